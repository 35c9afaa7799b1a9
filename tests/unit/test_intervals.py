"""Every estimate lies inside its own interval (issue 40, case 8): the interval columns of
the summary tables found by their names (``scalesweep.record.columns.intervals``), the
walk over a campaign's tables that checks them (``outside_own_interval``, which
tests/integration/test_report.py runs on a real campaign), the tables that once put a
statistic beside an interval of another method (llm_load.csv: a median beside the runs'
t interval), and a figure given an estimate outside its interval drawing it with a note
instead of failing. Also (case 9c): a request's input tokens named by what they count."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from conftest import REPO
from scalesweep.record.columns import intervals


def summary_tables(directory: Path) -> dict[str, pd.DataFrame]:
    """Every results/summary/*.csv of a campaign, by name (an empty file: no table)."""
    tables = {}
    for path in sorted(Path(directory).glob("*.csv")):
        try:
            tables[path.stem] = pd.read_csv(path)
        except pd.errors.EmptyDataError:
            continue
    return tables


def checked_intervals(tables: dict[str, pd.DataFrame]) -> set[tuple[str, str]]:
    """(table, estimate) of every interval the walk checks."""
    return {(name, estimate) for name, table in tables.items()
            for estimate, _, _ in intervals(table.columns)}


def outside_own_interval(tables: dict[str, pd.DataFrame]) -> list[str]:
    """Every estimate of ``tables`` outside its own interval, named (table, row, columns,
    values); a missing bound (NaN: no interval, or one side unbounded) checks nothing.
    The tables are written to 10 significant digits: a bound equal to its estimate up to
    that rounding is inside."""
    bad = []
    for name, table in tables.items():
        for estimate, low, high in intervals(table.columns):
            e, lo, hi = (pd.to_numeric(table[c], errors="coerce").to_numpy(float)
                         for c in (estimate, low, high))
            tol = 1e-9 * np.fmax(np.fmax(np.abs(e), np.abs(lo)), np.abs(hi)) + 1e-12
            with np.errstate(invalid="ignore"):
                wrong = (lo > e + tol) | (e > hi + tol)
            for i in np.flatnonzero(wrong):
                bad.append(f"{name}.csv row {i}: {estimate} {e[i]:.6g} outside {low} .. "
                           f"{high} ({lo[i]:.6g} .. {hi[i]:.6g})")
    return bad


def test_the_interval_columns_are_found_by_their_names():
    names = ["time_s", "mean", "median", "ci95_low", "ci95_high", "overhead_pct",
             "overhead_ci95_low_pct", "overhead_ci95_high_pct", "equivalence_ci90_low_pct",
             "equivalence_ci90_high_pct", "ttft_p99_s", "ttft_p99_ci95_low_s",
             "ttft_p99_ci95_high_s", "difference", "difference_ci95_low",
             "difference_ci95_high", "gflops_per_rank_mean", "gflops_per_rank_ci95_low",
             "gflops_per_rank_ci95_high", "time_ci95_low", "time_ci95_high",
             "efficiency_at_8_pct", "efficiency_at_8_ci95_low_pct",
             "efficiency_at_8_ci95_high_pct", "orphan_ci95_low", "orphan_ci95_high",
             "target_ci_pp", "ttft_p99_ci_method"]
    assert set(intervals(names)) == {
        ("mean", "ci95_low", "ci95_high"),
        ("overhead_pct", "overhead_ci95_low_pct", "overhead_ci95_high_pct"),
        ("overhead_pct", "equivalence_ci90_low_pct", "equivalence_ci90_high_pct"),
        ("ttft_p99_s", "ttft_p99_ci95_low_s", "ttft_p99_ci95_high_s"),
        ("difference", "difference_ci95_low", "difference_ci95_high"),
        ("gflops_per_rank_mean", "gflops_per_rank_ci95_low", "gflops_per_rank_ci95_high"),
        ("time_s", "time_ci95_low", "time_ci95_high"),
        ("efficiency_at_8_pct", "efficiency_at_8_ci95_low_pct",
         "efficiency_at_8_ci95_high_pct"),
    }
    # scaling.csv names its mean time_s
    assert intervals(["time_s", "median", "ci95_low", "ci95_high"]) == [
        ("time_s", "ci95_low", "ci95_high")]


def test_the_walk_names_an_estimate_outside_its_interval_and_nothing_else():
    # decomposition.csv's row of issue 40: -0.0183 s beside its CI -0.149 .. -0.037 s
    table = pd.DataFrame({"difference": [-0.0183, -0.1, 0.5, np.nan],
                          "difference_ci95_low": [-0.149, -0.149, np.nan, -1.0],
                          "difference_ci95_high": [-0.037, -0.037, 0.5 * (1 - 1e-12), 1.0]})
    bad = outside_own_interval({"decomposition": table})
    assert len(bad) == 1 and bad[0].startswith("decomposition.csv row 0: difference -0.0183")


def test_llm_load_reports_the_centre_of_its_between_run_interval():
    """A median of the runs' percentiles beside the t interval of their mean lay outside
    it where the runs split in two (11 runs at 1 s, 9 at 0.1 s: median 1 s, interval
    about 0.35 .. 0.8 s)."""
    from scalesweep.analyse.load import load_runs, load_summary
    from scalesweep.plan.kinds.llm import compact_level
    from test_load_analysis import _level

    rng = np.random.default_rng(3)
    rows = []
    for rep in range(1, 21):
        ttft = 1.0 if rep <= 11 else 0.1
        level = {"level": 0, "shape": "poisson", "rate": 1.0, "bisection": False,
                 **_level(rng, {}, ttft, 0.01)}
        rows.append({"workload": "llm", "payload": "llm", "model_label": "m", "arm": "native",
                     "runtime": "native", "nodes": 1, "gpus": 0, "ranks": 1, "threads": 1,
                     "repeat": rep, "block_id": f"b{rep}", "disturbed": False,
                     "start": f"2026-11-26T10:{rep:02d}:00+00:00",
                     "end": f"2026-11-26T10:{rep:02d}:30+00:00", "path": f"p/{rep}",
                     "load_levels": json.dumps([compact_level(level)])})
    table = load_summary(load_runs(pd.DataFrame(rows)))
    row = table.iloc[0]
    assert row["ttft_p50_ci_method"] == "between 20 runs (t)"
    assert row["ttft_p50_ci95_low_s"] < row["ttft_p50_s"] < row["ttft_p50_ci95_high_s"]
    assert not outside_own_interval({"llm_load": table})


def test_a_figure_draws_an_estimate_outside_its_interval_and_says_so():
    """decomposition.csv of an older version (issue 40's row): the figure is drawn, the
    bar cut at the estimate, and a note under it, never matplotlib's "'yerr' must not
    contain negative values"."""
    from scalesweep.report.decomposition import decomposition_figure
    from test_decomposition import CONFIG, runs_with

    from scalesweep.analyse.decomposition import decomposition_table

    table = decomposition_table(runs_with({"startup_imports_s": 0.9}), CONFIG)
    at = table.index[table["component"] == "startup_imports"][0]
    table.loc[at, ["difference", "difference_ci95_low", "difference_ci95_high"]] = [
        -0.0183, -0.149, -0.037]
    fig = decomposition_figure(table)
    notes = " ".join(t.get_text() for t in fig.texts)
    assert "1 estimate lies outside its own 95% interval" in notes
    drawn = [line for ax in fig.axes for line in ax.lines if line.get_marker() == "o"]
    assert len(drawn) == table["measured"].sum()


def test_input_tokens_are_named_by_what_they_count():
    sys.path.insert(0, str(REPO / "scripts"))
    from llm_load import request_record

    from scalesweep.record.load import request_input_tokens

    served = {"ok": True, "t_send": 1.0, "t_first": 1.5, "t_end": 2.0, "prompt_tokens": 33,
              "completion_tokens": 8}
    # the engine said what it evaluated (the chat template included): that, and no count
    rec = request_record(served, 0.0, 0, counted=25)
    assert rec["input_tokens"] == 33 and rec["prompt_text_tokens"] is None
    # llama-cpp-python's stream says nothing: the prompt text alone, named so
    rec = request_record({**served, "prompt_tokens": None}, 0.0, 0, counted=25)
    assert rec["input_tokens"] is None and rec["prompt_text_tokens"] == 25
    assert "input_tokens_source" not in rec
    assert request_input_tokens(rec) == {"input_tokens": None, "prompt_text_tokens": 25}
    # records of before: input_tokens held either, input_tokens_source said which
    old_text = {"input_tokens": 25, "input_tokens_source":
                "prompt text, counted by the engine's tokenizer"}
    assert request_input_tokens(old_text) == {"input_tokens": None, "prompt_text_tokens": 25}
    old_engine = {"input_tokens": 33, "input_tokens_source": "engine"}
    assert request_input_tokens(old_engine) == {"input_tokens": 33, "prompt_text_tokens": None}
