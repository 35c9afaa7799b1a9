"""``scalesweep compare A B``: two campaigns point by point, with the regressions named.

A campaign is a directory with ``results/runs/<point>/metrics.json`` (what ``snakemake``,
``scalesweep merge`` or an unpacked ``scalesweep archive`` leave). Points match on workload,
payload kind, model (its label: LLM inference; synthetic weights are another model),
runtime, nodes, gpus, ranks and threads (``POINT_KEYS``): only the repeats of one point are
pooled, never two models, runtimes or geometries, and a point whose model changed between
the campaigns is listed as only in A and only in B. For each point found in both:
change = (mean B - mean A) / mean A x 100 (positive = B slower), its 95% CI (Fieller's
interval for the ratio of means with Welch-Satterthwaite degrees of freedom, as for
container overhead: ``scalesweep.analyse.overhead.overhead_table``) and Welch's p-value. A point is a
``regression`` when B is slower by more than the threshold and the difference is
significant (p < alpha, and q < alpha: Benjamini-Hochberg over every matched point's test,
so a campaign of many points does not name chance differences), an ``improvement`` when
faster by more than the threshold and significant, ``within_threshold`` only when the whole 95% CI lies inside +-threshold, and
``inconclusive`` when the CI reaches past +-threshold without a significant change beyond
it (the data cannot tell whether B changed by more than the threshold); ``untested``
without a CI or a test (fewer than 2 repeats on a side). ``--fail-on-regression`` exits 1
on a regression; ``--strict`` also exits 3 when a matched point is inconclusive or
untested (``EXIT_REGRESSION``, ``EXIT_UNDECIDED``).

The payload kind of each workload (which decides what "time" is: steady seconds per
epoch for CNN training, wall time of the prompt set for LLM inference) is read from the
metrics themselves, so a campaign whose config was overridden on the command line, or
that has no config at all, compares the same.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from scalesweep.analyse.frame import TableError
from scalesweep.analyse.overhead import overhead_table
from scalesweep.analyse.stats import fdr_adjust
from scalesweep.analyse.collect import collect_runs
from scalesweep.campaign.analysis_cli import add_format, non_negative, print_table
from scalesweep.campaign.usage import UsageError
from scalesweep.plan.kinds import kinds as workload_kinds
from scalesweep.plan.sweep import OLD_LAYOUT_NOTE, SweepError, SweepPoint, in_history, old_layout
from scalesweep.record.geometry import AXES as GEOMETRY, Geometry
from scalesweep.campaign.crate import describe
from scalesweep.record.metrics import RUN_FIELDS, MetricsError, read_metrics
from scalesweep.record.pointdir import METRICS_JSON, RUNS_DIR

# what makes a point: rows that agree on all of these are repeats (model_label is empty
# for CNN training, which records no model)
POINT_KEYS = ["workload", "payload", "model_label", "runtime", *GEOMETRY]
METRICS = ("time_s", "harness_wall_s", "train_s")  # lower is better for each
VERDICTS = ("regression", "improvement", "inconclusive", "untested", "within_threshold",
            "only_in_a", "only_in_b")
# what --strict refuses besides regressions: matched points the data cannot decide
UNDECIDED = ("inconclusive", "untested")
EXIT_REGRESSION = 1  # --fail-on-regression (or --strict): a point regressed
EXIT_UNDECIDED = 3  # --strict: no regression, but a point is inconclusive or untested
CI_METHOD = "Fieller 95% CI of the ratio of means (Welch-Satterthwaite df)"

COLUMNS = [*POINT_KEYS, "verdict", "n_a", "n_b", "a_s", "b_s", "change_pct",
           "change_ci95_low_pct", "change_ci95_high_pct", "p_value", "q_value"]
# what the provenance columns may differ in without a note
PROVENANCE = ("git_commit", "torch", "image_digest", "launcher")


def payload_kind(metrics: dict) -> str:
    """The workload kind (scalesweep.plan.kinds) of a record: the one whose records carry
    its "payload"; for a record without it, the kind whose first own required field
    (epoch_s of CNN training, wall_s of LLM inference) it has."""
    by_record = {kind.record_payload: kind.name for kind in workload_kinds()}
    if metrics.get("payload") in by_record:
        return by_record[metrics["payload"]]
    own = {kind.name: next(f.path for f in kind.fields if f.required and f not in RUN_FIELDS)
           for kind in workload_kinds()}
    for name, field in own.items():
        if field in metrics:
            return name
    raise MetricsError("none of " + ", ".join(f"{f} ({k})" for k, f in own.items()) + " in it")


def campaign_runs(directory: Path) -> tuple[pd.DataFrame, list[str]]:
    """(one row per finished run, like runs.csv; the metrics files skipped, with why)."""
    runs_dir = Path(directory) / RUNS_DIR
    if not Path(directory).is_dir():
        raise UsageError(f"{directory}: no such campaign directory")
    if not runs_dir.is_dir():
        raise UsageError(f"{directory}: no results/runs/ (not a campaign directory?)")
    paths, kinds, skipped = [], {}, []
    for path in sorted(runs_dir.rglob(METRICS_JSON)):
        rel = str(path.parent.relative_to(runs_dir))
        if in_history(rel):  # an earlier run, superseded (scalesweep rerun)
            continue
        if old_layout(rel):
            skipped.append(f"{path}: {OLD_LAYOUT_NOTE}")
            continue
        try:
            point = SweepPoint.from_path(rel)
            metrics = read_metrics(path)
            kind = payload_kind(metrics)
            if SweepPoint(**metrics["point"]) != point:
                raise MetricsError(f"its point {metrics['point']} is not its directory's")
        except (SweepError, MetricsError, KeyError, TypeError) as exc:
            skipped.append(f"{path}: {exc}")
            continue
        if kinds.setdefault(point.workload, kind) != kind:
            skipped.append(f"{path}: workload {point.workload} is {kinds[point.workload]} "
                           f"elsewhere in this campaign, {kind} here")
            continue
        paths.append(path)
    config = {"workloads": {name: {"payload": kind} for name, kind in kinds.items()},
              "measurement": _measurement_of(Path(directory))}
    runs = collect_runs(paths, config)
    if "disturbed" in runs and len(runs):  # kept on disk, left out of the comparison
        disturbed = runs["disturbed"].fillna(False).astype(bool)
        skipped += [f"{p}: disturbed run (interference), left out" for p in runs.loc[disturbed, "path"]]
        runs = runs[~disturbed].reset_index(drop=True)
    if "warmup" in runs and len(runs):  # the warm-up blocks (measurement.warmup_blocks)
        warmup = runs["warmup"].fillna(False).astype(bool)
        skipped += [f"{p}: warm-up run, left out" for p in runs.loc[warmup, "path"]]
        runs = runs[~warmup].reset_index(drop=True)
    return runs, skipped


def _measurement_of(directory: Path) -> dict:
    """The campaign's measurement settings as its last summary recorded them
    (results/summary/campaign.json): its warm-up blocks are left out as its own summary
    left them out; none where it recorded none (a campaign from before warm-up blocks, or
    never summarised: every run counts)."""
    import json

    try:
        record = json.loads((directory / "results" / "summary" / "campaign.json").read_text())
        return {"warmup_blocks": 0, **((record.get("config") or {}).get("measurement") or {})}
    except (OSError, ValueError, AttributeError, TypeError):
        return {"warmup_blocks": 0}


def compare_runs(a: pd.DataFrame, b: pd.DataFrame, threshold: float = 5.0,
                 alpha: float = 0.05, metric: str = "time_s") -> pd.DataFrame:
    """One row per point of either table (``COLUMNS``), matched points first."""
    if metric not in METRICS:
        raise TableError(f"metric must be one of {', '.join(METRICS)}, not {metric!r}")
    tables = {}
    for side, runs in (("a", a), ("b", b)):
        runs = runs.dropna(subset=[metric]) if metric in runs else runs.iloc[0:0]
        table = runs.reindex(columns=[*POINT_KEYS, metric]).assign(campaign=side)
        for key in POINT_KEYS:  # an empty key is a key ('' matches ''; NaN would not)
            if not pd.api.types.is_numeric_dtype(table[key]) or table[key].isna().all():
                table[key] = table[key].astype(object).where(table[key].notna(), "")
        tables[side] = table
    keys_a = set(map(tuple, tables["a"][POINT_KEYS].itertuples(index=False)))
    keys_b = set(map(tuple, tables["b"][POINT_KEYS].itertuples(index=False)))
    both = keys_a & keys_b
    pooled = pd.concat([tables["a"], tables["b"]], ignore_index=True)
    in_both = pd.Series([tuple(k) in both for k in pooled[POINT_KEYS].itertuples(index=False)],
                        index=pooled.index, dtype=bool)
    rows = []
    if both:
        change = overhead_table(pooled[in_both], runtime_col="campaign",
                                time_col=metric, group_cols=POINT_KEYS,
                                baseline_runtime="a", alpha=alpha)
        for _, r in change.iterrows():
            rows.append({
                **{k: r[k] for k in POINT_KEYS},
                "verdict": verdict(r["overhead_pct"], r["p_value"], threshold, alpha,
                                   r["overhead_ci95_low_pct"], r["overhead_ci95_high_pct"]),
                "n_a": r["n_native"], "n_b": r["n"], "a_s": r["native_s"], "b_s": r["time_s"],
                "change_pct": r["overhead_pct"],
                "change_ci95_low_pct": r["overhead_ci95_low_pct"],
                "change_ci95_high_pct": r["overhead_ci95_high_pct"],
                "p_value": r["p_value"],
            })
    for side, keys in (("a", keys_a - both), ("b", keys_b - both)):
        runs = tables[side]
        for key in sorted(keys):
            mine = runs[[tuple(k) == key for k in runs[POINT_KEYS].itertuples(index=False)]]
            rows.append({**dict(zip(POINT_KEYS, key)), "verdict": f"only_in_{side}",
                         f"n_{side}": len(mine), f"{side}_s": mine[metric].mean()})
    table = pd.DataFrame(rows, columns=COLUMNS)
    # a regression or improvement holds over every matched point, not one at a time:
    # Benjamini-Hochberg at alpha over their tests (as a campaign's verdicts,
    # scalesweep.analyse.multiplicity); one significant alone is inconclusive
    table["q_value"] = fdr_adjust(pd.to_numeric(table["p_value"], errors="coerce")
                                  .to_numpy(float))
    claimed = table["verdict"].isin(["regression", "improvement"])
    table.loc[claimed & ~(table["q_value"] < alpha), "verdict"] = "inconclusive"
    order = {v: i for i, v in enumerate(VERDICTS)}
    table = table.assign(_order=table["verdict"].map(order)).sort_values(
        ["_order", *POINT_KEYS], kind="stable", ignore_index=True).drop(columns="_order")
    for col in ("n_a", "n_b"):
        table[col] = table[col].astype("Int64")
    return table


def verdict(change_pct: float, p_value: float, threshold: float, alpha: float,
            ci_low: float = np.nan, ci_high: float = np.nan) -> str:
    """One matched point's verdict from its change, Welch's p-value and the 95% CI of the
    change (``CI_METHOD``), all in percent:

    - regression / improvement: beyond +-threshold and significant (p < alpha);
    - within_threshold: the whole CI lies inside [-threshold, +threshold] (a point
      estimate inside it is not enough: a CI of -15% .. +18% cannot say "within 5%");
    - untested: no CI and no test (< 2 repeats a side), or identical repeats whose
      difference lies beyond the threshold (a zero-width CI but no test);
    - inconclusive: everything else: the CI reaches past +-threshold (or is unbounded)
      and no significant change beyond the threshold was found."""
    def finite(x) -> bool:
        return x is not None and not pd.isna(x) and bool(np.isfinite(x))

    tested = finite(p_value)
    if tested and p_value < alpha and abs(change_pct) > threshold:
        return "regression" if change_pct > 0 else "improvement"
    has_ci = finite(ci_low) and finite(ci_high)
    if has_ci and -threshold <= ci_low and ci_high <= threshold:
        return "within_threshold"
    if not tested and (not has_ci or ci_low == ci_high):
        return "untested"
    return "inconclusive"


def model_notes(a: pd.DataFrame, b: pd.DataFrame) -> list[str]:
    """Workloads whose model differs between the campaigns (their points are then not
    compared: each is only in A or only in B)."""
    notes = []
    if "model_label" not in a or "model_label" not in b:
        return notes
    for workload in sorted(set(a["workload"]) & set(b["workload"])):
        va = sorted(map(str, a.loc[a["workload"] == workload, "model_label"].dropna().unique()))
        vb = sorted(map(str, b.loc[b["workload"] == workload, "model_label"].dropna().unique()))
        if va and vb and va != vb:
            notes.append(f"workload {workload}: model differs (A {', '.join(va)}; B "
                         f"{', '.join(vb)}): its points are not compared across models")
    return notes


def provenance_notes(a: pd.DataFrame, b: pd.DataFrame) -> list[str]:
    """What else differs between the campaigns (code, torch, image, launcher)."""
    notes = []
    for col in PROVENANCE:
        va = sorted(map(str, a[col].dropna().unique())) if col in a else []
        vb = sorted(map(str, b[col].dropna().unique())) if col in b else []
        if va and vb and va != vb:
            notes.append(f"{col} differs: A {', '.join(v[:12] for v in va)}; "
                         f"B {', '.join(v[:12] for v in vb)}")
    return notes


def comparison_figure(table: pd.DataFrame, threshold: float, names=("A", "B")):
    """Change per matched point with its 95% CI, coloured by verdict; threshold band shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import seaborn as sns

    sns.set_theme(style="whitegrid", context="notebook")
    matched = table[table["change_pct"].notna()].copy()
    fig, ax = plt.subplots(figsize=(8, 1.2 + 0.35 * max(len(matched), 3)))
    ax.axvspan(-threshold, threshold, color="grey", alpha=0.15,
               label=f"within +-{threshold:g}%")
    ax.axvline(0, color="black", linewidth=0.8)
    if matched.empty:
        ax.text(0.5, 0.5, "no point measured in both campaigns", ha="center", va="center",
                transform=ax.transAxes)
    else:
        matched["point"] = [
            f"{r.workload}{f' ({r.model_label})' if r.model_label else ''} {r.runtime} "
            f"{Geometry.of(r).segment}" for r in matched.itertuples()]
        palette = {"regression": "tab:red", "improvement": "tab:green",
                   "within_threshold": "tab:grey", "inconclusive": "tab:orange",
                   "untested": "tab:purple"}
        y = np.arange(len(matched))
        low = (matched["change_pct"] - matched["change_ci95_low_pct"]).clip(lower=0)
        high = (matched["change_ci95_high_pct"] - matched["change_pct"]).clip(lower=0)
        xerr = [low.fillna(0).to_numpy(float), high.fillna(0).to_numpy(float)]
        ax.errorbar(matched["change_pct"].to_numpy(float), y, xerr=xerr, fmt="none",
                    ecolor="black", elinewidth=1, capsize=3)
        for name, group in matched.assign(y=y).groupby("verdict", sort=False):
            ax.scatter(group["change_pct"], group["y"], color=palette.get(name, "black"),
                       label=name.replace("_", " "), zorder=3)
        ax.set_yticks(y, matched["point"], fontsize="small")
        ax.invert_yaxis()
    only = table["verdict"].str.startswith("only_in").sum()
    ax.set_xlabel(f"change in time, {names[1]} vs {names[0]} (%), 95% CI; positive = "
                  f"{names[1]} slower")
    ax.set_title(f"{names[1]} vs {names[0]}" + (f" ({only} point(s) in one campaign only)"
                                                 if only else ""), fontsize="medium")
    ax.legend(fontsize="small", loc="best")
    fig.tight_layout()
    return fig


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "compare",
        help="two campaigns point by point: regressions, improvements, missing points",
        description="Prints one CSV row per point (matched on workload, payload, model, "
        "runtime, nodes, gpus, ranks, threads; only the repeats of one point are pooled, "
        "never two models, runtimes or geometries): change_pct = (B - A) / A x 100 with "
        "its 95% CI (Fieller), Welch's p-value and the verdict: regression / improvement "
        "(beyond the threshold and p < alpha), within_threshold (the whole 95% CI inside "
        "+-threshold), inconclusive (the CI reaches past +-threshold, no significant "
        "change beyond it), untested (< 2 repeats a side), only_in_a / only_in_b. A "
        "summary and notes go to stderr.",
        epilog=f"Exit status: 0 done; {EXIT_REGRESSION} a regression (with "
        f"--fail-on-regression or --strict); {EXIT_UNDECIDED} no regression but a matched "
        "point inconclusive or untested (with --strict); 2 a usage error.",
    )
    p.add_argument("a", type=Path, help="campaign directory A (the reference)")
    p.add_argument("b", type=Path, help="campaign directory B (compared with A)")
    p.add_argument("--threshold", type=non_negative, default=5.0,
                   help="percent change that counts (default: 5)")
    p.add_argument("--alpha", type=_probability, default=0.05,
                   help="significance level of Welch's test (default: 0.05)")
    p.add_argument("--metric", choices=METRICS, default="time_s",
                   help="what is compared (default: time_s, as in scaling.csv)")
    p.add_argument("--fail-on-regression", action="store_true",
                   help=f"exit {EXIT_REGRESSION} when any point regressed")
    p.add_argument("--strict", action="store_true",
                   help=f"as --fail-on-regression, and exit {EXIT_UNDECIDED} when no point "
                   "regressed but a matched point is inconclusive (its 95%% CI reaches past "
                   "+-threshold) or untested: passes only a campaign that can tell")
    add_format(p)
    p.add_argument("--csv", type=Path, metavar="OUT", help="also write the table here")
    p.add_argument("--plot", type=Path, metavar="OUT.png", help="write the figure here")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    a, skipped_a = campaign_runs(args.a)
    b, skipped_b = campaign_runs(args.b)
    for side, runs in (("A", a), ("B", b)):
        if runs.empty:
            raise UsageError(f"{args.a if side == 'A' else args.b}: no finished runs "
                             "(no valid results/runs/**/metrics.json)")
    table = compare_runs(a, b, args.threshold, args.alpha, args.metric)
    print_table(table, args.format)
    if args.csv:
        args.csv.parent.mkdir(parents=True, exist_ok=True)
        table.to_csv(args.csv, index=False, float_format="%.10g")
    if args.plot:
        args.plot.parent.mkdir(parents=True, exist_ok=True)
        names = (args.a.resolve().name or "A", args.b.resolve().name or "B")
        comparison_figure(table, args.threshold, names).savefig(args.plot, dpi=120)
    counts = table["verdict"].value_counts()
    summary = ", ".join(f"{counts[v]} {v.replace('_', ' ')}" for v in VERDICTS if v in counts)
    print(f"scalesweep compare: {len(table)} points ({summary}); threshold "
          f"{args.threshold:g}%, alpha {args.alpha:g}", file=sys.stderr)
    for note in model_notes(a, b) + provenance_notes(a, b):
        print(f"scalesweep compare: note: {note}", file=sys.stderr)
    for side, where in (("A", args.a), ("B", args.b)):  # an unpacked archive's RO-Crate
        line = describe(Path(where))
        if line:
            print(f"scalesweep compare: {side}: {line}", file=sys.stderr)
    for side, skipped in (("A", skipped_a), ("B", skipped_b)):
        for line in skipped:
            print(f"scalesweep compare: skipped in {side}: {line}", file=sys.stderr)
    regressions = table[table["verdict"] == "regression"]
    if len(regressions) and (args.fail_on_regression or args.strict):
        print(f"scalesweep compare: {len(regressions)} regression(s); failing as asked",
              file=sys.stderr)
        return EXIT_REGRESSION
    undecided = table[table["verdict"].isin(UNDECIDED)]
    if len(undecided) and args.strict:
        print(f"scalesweep compare: {len(undecided)} point(s) inconclusive or untested: "
              f"their 95% CI reaches past +-{args.threshold:g}% (or there is none), so "
              "these campaigns cannot tell whether they changed by more than the "
              f"threshold; failing as asked (--strict, exit {EXIT_UNDECIDED}). More "
              "repeats on both sides narrow the CI.", file=sys.stderr)
        return EXIT_UNDECIDED
    if len(undecided) and args.fail_on_regression:
        # passing is not the same as "no regression": say what the data cannot tell
        print(f"scalesweep compare: no regression found, but {len(undecided)} point(s) "
              f"are inconclusive or untested (95% CI past +-{args.threshold:g}%): these "
              "campaigns cannot tell whether they regressed there; --strict fails on them "
              f"(exit {EXIT_UNDECIDED})", file=sys.stderr)
    return 0


def _probability(text: str) -> float:
    value = float(text)
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1, not {text}")
    return value
