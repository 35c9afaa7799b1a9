"""The summary tables aggregated from runs.csv (scaling.csv, llm.csv, overhead.csv), each
row with its notes (disturbed runs left out, shared cores), and the campaign's record
(campaign.json: the settings its tables were made with). The table of runs itself is
scalesweep.analyse.collect."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from scalesweep.analyse.collect import SHARED_CORES_NOTE, with_blocks
from scalesweep.analyse.frame import left_out, truthy
from scalesweep.analyse.overhead import verdict_table
from scalesweep.analyse.multiplicity import adjust_verdicts
from scalesweep.analyse.scaling import SCALING_COLUMNS, scaling_table
from scalesweep.analyse.stats import describe_rates, describe_repeats
from scalesweep.plan.kinds import summarised_in
from scalesweep.plan.kinds.llm import model_label
from scalesweep.plan.sweep import REFERENCE, workload_axes
from scalesweep.record.dataset import STAGED_DIR, staged_source
from scalesweep.record.geometry import AXES as GEOMETRY

SCALING_SERIES = ["workload", "runtime", "threads"]
LLM_KEYS = ["workload", "model_label", "runtime", "nodes", "gpus", "threads"]
OVERHEAD_KEYS = ["workload", "arm", *GEOMETRY]
ROW_NOTES = ["n_disturbed", "n_warmup", "shared_cores", "note"]



def _flags(runs: pd.DataFrame, col: str) -> pd.Series:
    if col not in runs.columns:
        return pd.Series(False, index=runs.index)
    return runs[col].map(truthy).astype(bool)



def valid_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs the statistics use: every run neither disturbed nor warm-up
    (``frame.left_out``)."""
    return runs[~left_out(runs)]



def _row_notes(table: pd.DataFrame, runs: pd.DataFrame, keys: list[str],
               count_disturbed: bool = True) -> pd.DataFrame:
    """n_disturbed and n_warmup (runs left out: disturbed, warm-up; a warm-up run is
    counted as warm-up only), shared_cores (any run of the row on shared cores) and
    note (the shared-cores label) for each row of ``table``, matched on ``keys``."""
    if table.empty:
        return table.assign(**{c: pd.Series(dtype=object) for c in ROW_NOTES})
    warmup = _flags(runs, "warmup")
    flags = runs.assign(_disturbed=(_flags(runs, "disturbed") & ~warmup).astype(int),
                        _warmup=warmup.astype(int), _shared=_flags(runs, "shared_cores"))
    per_row = flags.groupby(keys, dropna=False).agg(n_disturbed=("_disturbed", "sum"),
                                                    n_warmup=("_warmup", "sum"),
                                                    shared_cores=("_shared", "any"))
    out = table.merge(per_row.reset_index(), on=keys, how="left")
    if not count_disturbed:
        out = out.drop(columns="n_disturbed")
    else:
        out["n_disturbed"] = out["n_disturbed"].fillna(0).astype(int)
    out["n_warmup"] = out["n_warmup"].fillna(0).astype(int)
    out["shared_cores"] = out["shared_cores"].fillna(False).astype(bool)
    out["note"] = np.where(out["shared_cores"], SHARED_CORES_NOTE, "")
    return out



def scaling_summary(runs: pd.DataFrame, config: dict, log=None) -> pd.DataFrame:
    """scaling.csv: scaling.scaling_table per workload x runtime x threads over the valid
    (not disturbed) CNN runs, plus n_disturbed, shared_cores and note per row. A series
    whose every run of its baseline count was disturbed has no numbers: one row at that
    count with n 0 says so (note; in ``log`` too), never an empty table without a word
    (``scaling_rows``: the rows with numbers). One without a finished baseline run (a
    partial sweep) is left out, said in ``log``."""
    log = log or (lambda text: None)
    trained = runs[runs["payload"].isin(summarised_in("scaling"))] if not runs.empty else runs
    tables, left_out = [], []
    for key, every in trained.groupby(SCALING_SERIES, sort=True):
        df = valid_runs(every)
        baseline = workload_axes(config, key[0]).get("baseline")
        # the workload's mode (workloads.<name>.scaling): strong, or weak (per-rank work
        # fixed: efficiency = T(baseline) / T(N)); every row says which
        mode = config["workloads"].get(key[0], {}).get("scaling", "strong")
        if df.empty or (baseline is not None and baseline not in set(df["count"])):
            at = baseline if baseline is not None else every["count"].min()
            series = ", ".join(f"{c}={v}" for c, v in zip(SCALING_SERIES, key))
            n = int((every["count"] == at).sum())  # all disturbed or warm-up
            if not n:  # a partial sweep: points.csv says what is missing
                log(f"scaling: {series}: no finished run of its baseline count {at}; left out")
                continue
            also = ", as every other run of the series" if df.empty and len(every) > n else ""
            at_base = every[every["count"] == at]
            warm = int(at_base["warmup"].map(truthy).sum()) if "warmup" in at_base else 0
            kinds = ", ".join(f"{k} {what}" for k, what in ((n - warm, "disturbed"),
                                                           (warm, "warm-up")) if k)
            why = (f"no numbers: no undisturbed run of its baseline count {at} ({kinds}"
                   f"{also}; `scalesweep status` says how to replace them)")
            log(f"scaling: {series}: {why}; left out of the scaling statistics")
            left_out.append({**dict(zip(SCALING_SERIES, key)), "count": at, "n": 0,
                             "baseline_count": at, "scaling": mode, "_why": why})
            continue
        tables.append(scaling_table(
            df, count_col="count", time_col="time_s", group_cols=SCALING_SERIES,
            baseline=baseline, mode=mode,
            cv_threshold=config.get("analysis", {}).get("cv_threshold", 0.05)).assign(scaling=mode))
    if not tables and not left_out:
        return pd.DataFrame(columns=[*SCALING_SERIES, "count", *ROW_NOTES])  # a header
    table = pd.concat([*tables, *([pd.DataFrame(left_out)] if left_out else [])],
                      ignore_index=True)
    if not tables:  # the columns of a table with numbers, empty
        table = table.reindex(columns=[*SCALING_SERIES, "count", *SCALING_COLUMNS, "scaling",
                                       "_why"])
    table = _row_notes(table, trained, [*SCALING_SERIES, "count"])
    why = table.pop("_why").fillna("") if left_out else pd.Series("", index=table.index)
    table["note"] = [w + "; " + t if w and t else w or t for w, t in zip(why, table["note"])]
    # a count reached by several node layouts (1 node x 2 ranks and 2 nodes x 1 rank) is
    # pooled here as repeats of one count: said on the row and in the log, never silently
    layouts = valid_runs(trained)[[*SCALING_SERIES, "count", "nodes", "gpus", "ranks"]].groupby(
        [*SCALING_SERIES, "count"]).apply(
        lambda d: sorted({(int(n), int(g), int(r)) for n, g, r in
                          zip(d["nodes"], d["gpus"], d["ranks"])}), include_groups=False)
    for i, row in table.iterrows():
        found = layouts.get(tuple(row[c] for c in [*SCALING_SERIES, "count"]), [])
        if len(found) > 1:
            shown = " + ".join(f"{n}x{g or r} {'GPUs' if g else 'ranks'}" for n, g, r in found)
            text = f"pools node layouts {shown} (nodes x per node)"
            table.at[i, "note"] = "; ".join(t for t in (table.at[i, "note"], text) if t)
            log(f"scaling: {dict(zip(SCALING_SERIES, row[SCALING_SERIES]))} count "
                f"{row['count']}: {text}; sweep nodes and ranks/GPUs per node in separate "
                "workloads to keep them apart")
    return table



def scaling_rows(table: pd.DataFrame) -> pd.DataFrame:
    """The rows of scaling.csv with numbers: not those of series left out (n 0, a note
    saying why; scaling_summary)."""
    if table is None or table.empty or "n" not in table:
        return table
    return table[pd.to_numeric(table["n"], errors="coerce").fillna(0) > 0]



def llm_summary(runs: pd.DataFrame) -> pd.DataFrame:
    """llm.csv: per workload x model x runtime x nodes x GPUs x threads (never averaged
    across models; a synthetic model's label says "synthetic weights"), over the valid
    runs: wall time for the prompt set (describe_repeats: n, mean, median, min, max, std,
    ci95_low, ci95_high, cv), tokens/s with its 95% CI (also per GPU, of nodes x GPUs,
    and per node: tokens_per_s_per_gpu / _per_node), mean median TTFT and latency,
    mean peak server memory; n_disturbed, shared_cores, note."""
    llm = (runs[runs["payload"].isin(summarised_in("llm"))] if not runs.empty and "payload" in runs
           else runs.iloc[0:0])
    if llm.empty:
        return pd.DataFrame(columns=[*LLM_KEYS, *ROW_NOTES])
    llm = llm.assign(model_label=[model_label(m, s) for m, s in
                                  zip(llm.get("model", pd.Series(None, index=llm.index)),
                                      llm.get("synthetic_model", pd.Series(False, index=llm.index)))])
    valid = valid_runs(llm)
    if valid.empty:
        return pd.DataFrame(columns=[*LLM_KEYS, *ROW_NOTES])
    table = describe_repeats(valid, LLM_KEYS, "time_s")
    models = valid.groupby("model_label", dropna=False).agg(
        model=("model", "first"),
        synthetic_model=("synthetic_model", lambda s: bool(s.map(truthy).any())))
    table = table.merge(models.reset_index(), on="model_label", how="left")
    tokens = valid.dropna(subset=["tokens_per_s"]) if "tokens_per_s" in valid else valid.iloc[0:0]
    if not tokens.empty:
        # a rate: total tokens over total time (harmonic mean), CI from the time per token
        rates = describe_rates(tokens, LLM_KEYS, "tokens_per_s")[
            [*LLM_KEYS, "mean", "ci95_low", "ci95_high"]].rename(columns={
                "mean": "tokens_per_s", "ci95_low": "tokens_per_s_ci95_low",
                "ci95_high": "tokens_per_s_ci95_high"})
        table = table.merge(rates, on=LLM_KEYS, how="left")
        # per GPU (nodes x GPUs per node; empty on a CPU-only point) and per node: the
        # row's estimate and CI divided by the row's constant
        nodes = pd.to_numeric(table["nodes"], errors="coerce")
        gpus = nodes * pd.to_numeric(table["gpus"], errors="coerce")
        for unit, per in (("gpu", gpus.where(gpus > 0)), ("node", nodes.where(nodes > 0))):
            for col in ("tokens_per_s", "tokens_per_s_ci95_low", "tokens_per_s_ci95_high"):
                table[col.replace("tokens_per_s", f"tokens_per_s_per_{unit}")] = table[col] / per
    means = [c for c in ("ttft_p50_s", "latency_p50_s", "peak_rss_mb") if c in valid]
    if means:
        table = table.merge(valid.groupby(LLM_KEYS, as_index=False, dropna=False)[means].mean(),
                            on=LLM_KEYS, how="left")
    table = _row_notes(table, llm, LLM_KEYS)
    first = ["workload", "model", "model_label", "synthetic_model", "runtime", "nodes", "gpus",
             "threads"]
    return table[first + [c for c in table.columns if c not in first]]



def campaign_settings(config: dict) -> dict:
    """What the campaign's verdicts rest on (measurement.*): the equivalence margin, the
    CI target, how pairs are formed and when a pair is left out. Written beside runs.csv
    (results/summary/campaign.json) so that `scalesweep overhead` on a campaign's runs.csv
    gives exactly the campaign's verdicts."""
    measurement = config.get("measurement") or {}
    return {
        "baseline_runtime": REFERENCE,
        "pair_col": "block_id",
        "margin_pct": float(measurement.get("equivalence_margin_pct", 2.0)),
        "target_ci_pp": float(measurement.get("target_ci_pp", 2.0)),
        "max_pair_gap_s": float(measurement.get("max_pair_gap_s", 600)),
        "probe_tolerance_pct": (None if measurement.get("probe_tolerance_pct") is None
                                else float(measurement["probe_tolerance_pct"])),
        "confidence": 0.95,
    }



CAMPAIGN_JSON = "campaign.json"  # beside runs.csv (results/summary/)



def campaign_record(config: dict, runs: pd.DataFrame) -> dict:
    """campaign.json: the settings the summary's verdicts rest on (``campaign_settings``),
    the config they were computed with (private keys left out), the runs summarised:
    how many (foreign ones: scalesweep.analyse.foreign), from when to when, at which
    commits, and each dataset's staged source (``record.dataset.staged_source``: path
    and the sha256 of its manifest; null where not staged)."""
    import datetime as _dt

    plain = json.loads(json.dumps({k: v for k, v in config.items() if not k.startswith("_")},
                                  default=str))
    start = pd.to_datetime(runs["start"], utc=True, errors="coerce") if len(runs) else None
    end = pd.to_datetime(runs["end"], utc=True, errors="coerce") if len(runs) else None
    iso = lambda t: None if t is None or pd.isna(t) else t.isoformat()  # noqa: E731
    return {
        "summarised_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "settings": campaign_settings(config),
        "runs": int(len(runs)),
        "disturbed": int(_flags(runs, "disturbed").sum()) if len(runs) else 0,
        "warmup": int(_flags(runs, "warmup").sum()) if len(runs) else 0,
        "foreign": int(_flags(runs, "foreign").sum()) if len(runs) else 0,
        # each dataset as staged: its source (path, ...) and the digest of what was staged
        "datasets": {name: staged_source(Path(STAGED_DIR, name))
                     for name in sorted(config.get("datasets") or {})},
        "first_start": iso(start.min()) if start is not None else None,
        "last_end": iso(end.max()) if end is not None else None,
        "git_commits": (sorted({str(c) for c in runs["git_commit"].dropna()})
                        if len(runs) and "git_commit" in runs else []),
        "config": plain,
    }



def overhead_summary(runs: pd.DataFrame, config: dict, log=None, memo=None) -> pd.DataFrame:
    """overhead.csv: overhead.verdict_table of every other runtime (containers, and the
    A/A runtime native-aa) against native at the same point (workload, nodes, gpus,
    ranks, threads, and the model for LLM inference), each in its own arm (sweep.BLOCK_DIR):
    paired on the block the two runs were measured in (same-block pairs), disturbed and
    warm-up runs left out and counted (n_disturbed, n_warmup), pairs not measured together or on a machine whose speed
    differed left out and counted; margin, CI target and pairing from
    ``campaign_settings``. Points with no native run are left out (and logged).
    ``memo``: verdict_table's (rows of unchanged inputs not computed again)."""
    log = log or (lambda text: None)
    settings = campaign_settings(config)
    columns = ["workload", "model", "model_label", "arm", *GEOMETRY, "runtime"]
    empty = pd.DataFrame(columns=[*columns, "pairing", "n_native", "n", "native_s", "time_s",
                                  "overhead_pct", "verdict", "verdict_text", *ROW_NOTES])
    if runs.empty:
        return empty
    data = runs.copy()
    pair_col = settings["pair_col"]
    if "arm" not in data.columns:
        # a table from before blocks had arms: every runtime of a geometry in one block,
        # paired on the repeat number (and said so: pairing.SAME_REPEAT)
        data["arm"], pair_col = "", "repeat"
    elif "block_id" not in data.columns:
        data = with_blocks(data)
    # the runs of a kind summarised per model (llm.csv) carry its label
    is_llm = (data["payload"].isin(summarised_in("llm")) if "payload" in data
              else pd.Series(False, index=data.index))
    labels = [model_label(m, s) if llm else "" for m, s, llm in zip(
        data.get("model", pd.Series(None, index=data.index)),
        data.get("synthetic_model", pd.Series(False, index=data.index)), is_llm)]
    data["model_label"] = labels
    if "model" not in data:
        data["model"] = None
    data.loc[~is_llm, "model"] = None
    keys = [*OVERHEAD_KEYS, "model_label"]
    # the reference runs measured alone (arm native) compare nothing
    data = data[data["arm"] != REFERENCE]
    # warm-up runs (measurement.warmup_blocks: runs.csv's warmup) left out, counted
    # apart from the disturbed ones (n_warmup, both sides)
    warm = _flags(data, "warmup")
    n_warmup = data[warm].groupby([*keys, "runtime"], dropna=False).size().to_dict()
    data = data[~warm]
    if data.empty:
        return empty
    has_native = (data["runtime"] == REFERENCE).groupby([data[k] for k in keys]).transform("any")
    for key in data.loc[~has_native, keys].drop_duplicates().itertuples(index=False):
        log(f"overhead: {dict(zip(keys, key))} has no finished native run; left out")
    data = data[has_native]
    if data.empty or data["runtime"].nunique() < 2:
        return empty
    table = verdict_table(data, keys, baseline_runtime=settings["baseline_runtime"],
                          pair_col=pair_col, exclude_col="disturbed",
                          margin_pct=settings["margin_pct"],
                          target_ci_pp=settings["target_ci_pp"],
                          confidence=settings["confidence"],
                          max_pair_gap_s=settings["max_pair_gap_s"],
                          probe_tolerance_pct=probe_tolerance(data, settings), memo=memo)
    models = data.groupby("model_label")["model"].first()
    table.insert(1, "model", table["model_label"].map(models))
    # n_disturbed is verdict_table's own (both sides); shared cores: either side
    shared = data.assign(_shared=_flags(data, "shared_cores")).groupby(
        [*keys, "runtime"], dropna=False)["_shared"].any().to_dict()
    table["shared_cores"] = [
        bool(shared.get((*k, REFERENCE), False) or shared.get((*k, rt), False))
        for k, rt in zip(table[keys].itertuples(index=False, name=None), table["runtime"])]
    table["note"] = np.where(table["shared_cores"], SHARED_CORES_NOTE, "")
    table.insert(list(table.columns).index("n_disturbed") + 1 if "n_disturbed" in table
                 else len(table.columns), "n_warmup",
                 [int(n_warmup.get((*k, REFERENCE), 0) + n_warmup.get((*k, rt), 0))
                  for k, rt in zip(table[keys].itertuples(index=False, name=None),
                                   table["runtime"])])
    table = _with_spread(table, data, keys)
    # the verdicts over the campaign's comparisons, not one at a time (multiplicity)
    table = adjust_verdicts(table, settings["confidence"])
    table = _with_cost(table, data, keys, config)
    return table[columns + [c for c in table.columns if c not in columns]]



def _with_spread(table: pd.DataFrame, data: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """time_cv_pct (the between-run spread: the CV of the valid runs' time_s, per runtime
    of the row, averaged over its two runtimes) and within_run_cv_pct (the runs' own per-request spread,
    LLM inference) per row; where runs differ far more from each other than inside
    themselves, the verdict's evidence says so (scalesweep.analyse.drift.spread_text)."""
    from scalesweep.analyse.drift import FAR_MORE_TEXT, cv_pct, spread_text

    valid = valid_runs(data).assign(
        time_s=lambda d: pd.to_numeric(d["time_s"], errors="coerce"),
        within_run_cv_pct=lambda d: pd.to_numeric(
            d["within_run_cv_pct"] if "within_run_cv_pct" in d else np.nan, errors="coerce"))
    # one pass over the runs: per row key and runtime (keys as in verdict_table's groups)
    per = valid.groupby([*keys, "runtime"], dropna=False).agg(
        cv=("time_s", cv_pct), w_sum=("within_run_cv_pct", "sum"),
        w_n=("within_run_cv_pct", "count"))
    cv, w_sum, w_n = (per[c].to_dict() for c in ("cv", "w_sum", "w_n"))
    between, within, texts = [], [], []
    for key, runtime in zip(table[keys].itertuples(index=False, name=None), table["runtime"]):
        cvs = [cv.get((*key, rt), np.nan) for rt in (REFERENCE, runtime)]
        b = float(np.nanmean(cvs)) if np.isfinite(cvs).any() else np.nan
        n = sum(w_n.get((*key, rt), 0) for rt in (REFERENCE, runtime))
        w = sum(w_sum.get((*key, rt), 0.0) for rt in (REFERENCE, runtime)) / n if n else np.nan
        _, text = spread_text(b, w)
        between.append(b)
        within.append(w)
        texts.append(text if text.startswith(FAR_MORE_TEXT) else "")
    table = table.assign(time_cv_pct=between, within_run_cv_pct=within)
    table["verdict_text"] = [v + (f"; {t}" if t else "")
                             for v, t in zip(table["verdict_text"], texts)]
    return table



def _with_cost(table: pd.DataFrame, data: pd.DataFrame, keys: list[str],
               config: dict) -> pd.DataFrame:
    """What an inconclusive verdict would cost to settle: the wall time of its
    ``repeats_needed`` blocks at the series' median seconds per block (the two runs'
    ``harness_wall_s``), and whether that is beyond ``measurement.max_repeats`` (the
    series cannot settle within this campaign's budget: say so, with what it needs)."""
    from scalesweep.plan.adaptive import repeat_bounds

    if table.empty or "harness_wall_s" not in data.columns:
        return table
    valid = valid_runs(data).assign(
        _wall=lambda d: pd.to_numeric(d["harness_wall_s"], errors="coerce"))
    block_col = "block_id" if "block_id" in valid.columns else "repeat"
    # seconds of each run, by row key, runtime and block (as _with_spread's lookups)
    # (keys normalised: a missing model is None in one table and NaN in the other)
    def norm(values) -> tuple:
        return tuple("" if pd.isna(v) else v for v in values)

    walls: dict[tuple, dict] = {}
    for (*key, rt, block), wall in valid.groupby(
            [*keys, "runtime", block_col], dropna=False)["_wall"].sum().items():
        walls.setdefault(norm((*key, rt)), {})[block] = wall
    texts = []
    to_decide = table["repeats_to_decide"] if "repeats_to_decide" in table else table[
        "repeats_needed"]
    for key, runtime, verdict, text, more, n in zip(
            table[keys].itertuples(index=False, name=None), table["runtime"],
            table["verdict"], table["verdict_text"], to_decide, table["n"]):
        more = int(more) if pd.notna(more) else 0
        if verdict != "inconclusive" or more <= 0:
            texts.append(text)
            continue
        native = walls.get(norm((*key, REFERENCE)), {})
        other = walls.get(norm((*key, runtime)), {})
        seconds = median_block_seconds(native, other) or float("nan")
        workload = dict(zip(keys, key)).get("workload")
        low, high = repeat_bounds(config, workload) if workload in (
            config.get("workloads") or {}) else (None, None)
        # the limit that bounds the series: max_repeats, or sweep.repeats without
        # adaptive repeats
        limit = "measurement.max_repeats" if high != low else "sweep.repeats"
        extra = [f"to a verdict about {more} more pair{'s' if more != 1 else ''}"
                 + (f", ~{duration_text(more * seconds)} of measurement at {seconds:.0f} s "
                    "per block" if np.isfinite(seconds) and seconds > 0 else "")]
        if high is not None and int(n) + more > high:
            extra.append(f"beyond {limit}={high}: it cannot settle within this campaign's "
                         "budget")
        texts.append(text + (f"; {', '.join(extra)}" if extra else ""))
    return table.assign(verdict_text=texts)


def median_block_seconds(native: dict, other: dict) -> float | None:
    """The median wall seconds of one block of a series: block -> seconds of its native
    run (``native``) and of the compared runtime's (``other``), summed over the blocks of
    both; None without one. The cost per block of every "more pairs" text (this table's
    and the adaptive rule's, ``scalesweep.analyse.decision.block_seconds``)."""
    blocks = [native[b] + other[b] for b in set(native) & set(other)
              if native[b] is not None and other[b] is not None
              and native[b] > 0 and other[b] > 0]
    return float(np.median(blocks)) if blocks else None


def duration_text(seconds: float) -> str:
    """A duration as a reader takes it in: s, min, h or days."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.0f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def probe_tolerance(data: pd.DataFrame, settings: dict):
    """The probe tolerance where the runs carry probe figures (else no probe check)."""
    if settings["probe_tolerance_pct"] is None:
        return None
    if not any(c in data.columns for c in ("probe_gflops", "probe_gbps")):
        return None
    return settings["probe_tolerance_pct"]
