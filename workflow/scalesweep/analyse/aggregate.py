"""The aggregate rule (workflow/scripts/aggregate.py): metrics files -> every summary
table of results/summary/ (runs.csv, scaling.csv, llm.csv, overhead.csv, llm_load.csv,
llm_load_overhead.csv, points.csv, campaign.json). One function, so that the rule and
benchmarks/aggregation.py run the same code.

Disturbed runs (interference above the thresholds during their measurement) stay in
runs.csv, marked, and are left out of every statistic; each table row counts them
(n_disturbed).

The rows of runs.csv are read through a cache beside it (``RUNS_CACHE``:
scalesweep.analyse.runcache): a campaign of 100,000 runs plus one new run reads one
metrics file, not 100,000.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterable, Mapping

import pandas as pd

from scalesweep.analyse.frame import write_parquet
from scalesweep.analyse.collect import collect_runs_keyed, default_workers, point_states, runs_points
from scalesweep.analyse.load import load_runs, load_summary, load_verdicts
from scalesweep.analyse.rowtext import RUNS_CSV_CACHE, write_csv
from scalesweep.analyse.memo import VERDICTS_CACHE, Memo
from scalesweep.analyse.multiplicity import adjust_verdicts
from scalesweep.analyse.runcache import RUNS_CACHE, cache_version
from scalesweep.analyse.summary import (
    campaign_record,
    campaign_settings,
    llm_summary,
    overhead_summary,
    scaling_summary,
)
from scalesweep.plan.sweep import HISTORY_DIR, POINT_ORDER, sweep_points
from scalesweep.record.metrics import write_json_atomic
from scalesweep.record.pointdir import METRICS_JSON, RUNS_DIR

# the rule's outputs, by the names of its `output:` (workflow/rules/aggregate.smk)
OUTPUTS = ("runs", "runs_parquet", "scaling", "llm", "overhead", "load", "load_overhead",
           "points", "campaign")
FLOATS = "%.10g"
# from this many runs, runs.csv and points.csv are written by a second process while the
# first makes the other tables (where the rule has more than one core)
BESIDE_MIN_ROWS = 20_000


def aggregate_paths(metrics: Iterable[str], config: dict) -> list[str]:
    """The metrics files to summarise: the rule's input, and with analysis.partial, a
    point measured again whose new run failed: its earlier run (kept in history/ by
    scalesweep rerun) stands in, said so in the log (collect.readable_runs)."""
    paths = [str(p) for p in metrics]
    if config["analysis"]["partial"]:
        named = set(paths)
        for p in sweep_points(config):
            f = Path(RUNS_DIR, p.path, METRICS_JSON)
            if str(f) not in named and not f.is_file() and (f.parent / HISTORY_DIR).is_dir():
                paths.append(str(f))
    return paths


def write_summary(metrics: Iterable[str], config: dict, output: Mapping[str, str],
                  log: Callable[[str], None] | None = None, cache: bool = True,
                  timings: dict | None = None, workers: int | None = None
                  ) -> dict[str, pd.DataFrame]:
    """Write every output of the aggregate rule (``output``: name -> file, ``OUTPUTS``)
    from the metrics files ``metrics``; returns the tables by name. ``cache``: read the
    runs through the cache beside runs.csv (``RUNS_CACHE``; False reads every file).
    ``timings``: where given, the seconds of each step by name (the benchmark's).
    ``workers``: processes reading the metrics files (collect_runs: at most MAX_WORKERS;
    None: the processors this process may use)."""
    log = log or (lambda text: None)
    step = stepper(timings)
    paths = aggregate_paths(metrics, config)
    summary = Path(output["runs"]).parent
    runs, keys = collect_runs_keyed(paths, config, log, cache=summary / RUNS_CACHE if cache else None,
                                    workers=workers)
    step("collect_runs")
    # each row's text kept beside it too: a row of an unchanged file in an unchanged
    # block is not formatted again (nor one whose warm-up label, from the config, changed)
    if cache and keys:
        blocks = zip(*(runs[c] if c in runs else [None] * len(runs)
                       for c in ("block_start", "block_end", "warmup")))
        keys = [None if k is None else (k, *b) for k, b in zip(keys, blocks)]

    def files(log, step):  # runs.csv and points.csv: the two largest files
        write_csv(runs, output["runs"], keys if cache else None,
                  summary / RUNS_CSV_CACHE if cache else None,
                  cache_version(config) if cache else "")
        step("runs_csv")
        if output.get("runs_parquet"):  # the same rows, typed and columnar
            write_parquet(runs, output["runs_parquet"])
            step("runs_parquet")
        if not runs.empty and runs["disturbed"].any():
            log(f"{int(runs['disturbed'].sum())} disturbed runs kept in runs.csv, left out "
                "of the statistics")
        if not runs.empty and runs["warmup"].any():
            log(f"{int(runs['warmup'].sum())} warm-up runs (measurement.warmup_blocks) kept "
                "in runs.csv, left out of the statistics")
        states = points_table(runs, config, output["points"], log)
        step("point_states")
        return states

    # a campaign of thousands of runs: written by a second process while this one makes
    # the other tables (the rule's threads; nothing is measured beside a summary)
    beside = None
    if len(runs) >= BESIDE_MIN_ROWS and (workers if workers is not None else default_workers()) > 1:
        beside = in_second_process(files)
    else:
        states = files(log, step)

    # With a partial sweep a series may lack its baseline, or a point its native twin:
    # such series are left out of the derived tables (and named in the log); points.csv
    # and the report's missing-points table say what is missing.
    tables = {"runs": runs}
    tables["scaling"] = scaling_summary(runs, config, log)
    tables["scaling"].to_csv(output["scaling"], index=False, float_format=FLOATS)
    step("scaling_table")
    tables["llm"] = llm_summary(runs)
    tables["llm"].to_csv(output["llm"], index=False, float_format=FLOATS)
    step("llm_table")
    # q values (Benjamini-Hochberg) beside the p values: many comparisons in one campaign
    # each verdict kept beside the summary too, by its inputs: a campaign plus one run
    # computes the verdict that run is in, not every one
    memo = None
    if cache:
        try:
            memo = Memo(summary / VERDICTS_CACHE)
        except Exception as exc:  # noqa: BLE001 - a cache never fails the summary
            log(f"note: the verdicts cache is not used ({exc}); every verdict is computed")
    tables["overhead"] = adjust_verdicts(overhead_summary(runs, config, log, memo=memo))
    if memo is not None:
        memo.save()
    tables["overhead"].to_csv(output["overhead"], index=False, float_format=FLOATS)
    step("overhead_table")
    # LLM serving under load: each load level over the runs, and the container's effect
    levels = load_runs(runs)
    tables["load"] = load_summary(levels)
    tables["load"].to_csv(output["load"], index=False, float_format=FLOATS)
    # (q values over its own comparisons: many levels x metrics in one table)
    tables["load_overhead"] = adjust_verdicts(load_verdicts(levels, campaign_settings(config)))
    tables["load_overhead"].to_csv(output["load_overhead"], index=False, float_format=FLOATS)
    step("load_tables")
    # what the verdicts above rest on, beside runs.csv: `scalesweep overhead|scaling|fit`
    # on this runs.csv read it and give the same answers
    write_json_atomic(output["campaign"], campaign_record(config, runs))
    step("campaign_json")

    if beside is not None:
        states = beside(log, timings)  # (raises what the second process raised)
        step("beside_wait")
    tables["points"] = states
    return tables


def stepper(timings: dict | None) -> Callable[[str], None]:
    """``step(name)``: the seconds since the last step (or since this call) into
    ``timings[name]``, where ``timings`` is given."""
    import time

    clock = [time.perf_counter()]

    def step(name: str) -> None:
        now = time.perf_counter()
        if timings is not None:
            timings[name] = round(now - clock[0], 3)
        clock[0] = now

    return step


def points_table(runs: pd.DataFrame, config: dict, output: str, log) -> pd.DataFrame:
    """points.csv (``output``): every requested point, and every repeat whose metrics came
    in (adaptive repeats add repeats beyond the config's), with its state; metrics
    already read by collect_runs are not read again."""
    points = sorted(set(sweep_points(config)) | set(runs_points(runs)), key=POINT_ORDER)
    disturbed = (dict(zip(runs.loc[runs["disturbed"], "path"],
                          runs.loc[runs["disturbed"], "disturbed_reason"]))
                 if not runs.empty else {})
    states = point_states(points, done=runs["path"], disturbed=disturbed, config=config)
    # a point whose own run could not be read, summarised by its earlier run (history/)
    earlier = {str(Path(p).parents[2].relative_to(RUNS_DIR)): p
               for p in (runs["path"] if not runs.empty else []) if f"/{HISTORY_DIR}/" in p}
    for i in states.index[states["path"].isin(earlier)]:
        used = earlier[states.at[i, "path"]]
        states.at[i, "reason"] = "; ".join(
            r for r in (states.at[i, "reason"] or "", f"the summary uses the earlier run {used}")
            if r)
    states.to_csv(output, index=False)
    log(states["state"].value_counts().to_string())
    return states


def in_second_process(fn: Callable) -> Callable:
    """Start ``fn(log, step)`` in a forked process now; return ``wait(log, timings)``,
    which waits for it, passes its log lines to ``log`` and its step times into
    ``timings``, and returns what ``fn`` returned (or raises, with the error ``fn``
    raised, where it failed or the process died). A ``wait`` never called (the caller
    failed first) leaves no process behind: it is terminated when this one exits."""
    import multiprocessing
    import traceback

    ctx = multiprocessing.get_context("fork")  # as collect_runs's readers
    receive, send = ctx.Pipe(duplex=False)

    def child():
        lines: list[str] = []
        times: dict[str, float] = {}
        try:
            send.send(("ok", fn(lines.append, stepper(times)), lines, times))
        except BaseException as exc:  # noqa: BLE001 - handed to the parent, whole
            send.send(("error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}",
                       lines, times))

    proc = ctx.Process(target=child, daemon=True)
    proc.start()
    send.close()

    def wait(log, timings: dict | None = None):
        try:
            kind, value, lines, times = receive.recv()
        except EOFError:
            kind, value, lines, times = "error", "it ended without a word", [], {}
        proc.join()
        for line in lines:
            log(line)
        if timings is not None:
            timings.update(times)
        if kind != "ok":
            raise RuntimeError(f"writing runs.csv and points.csv in a second process failed "
                               f"(exit code {proc.exitcode}): {value}")
        return value

    return wait
