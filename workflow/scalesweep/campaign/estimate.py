"""What a sweep will cost before it is submitted: the computation of ``scalesweep plan``
(the command line and its printing: scalesweep.campaign.cost).

For a config (the campaign's config as ``snakemake`` reads it for the same
``--configfile``, ``--config`` and ``--profile``: ``scalesweep.plan.config_read.effective_config``;
with ``--config 'only={...}'`` only the selected points) and a profile: the number of
runs (one Slurm job each) and the node-hours they request (nodes x the runtime of
attempt 1), at the minimum, the expected and the maximum number of repeats; the worst
case (the maximum, every run failing until its last attempt, each attempt using all it
asked for); and the node-hours to expect from earlier campaigns' measured wall times.
Then the
warnings a site would otherwise give at submission or after days in the queue: over the
allocation, past a queue limit, over a walltime cap. Where the site declares a price
(``price.per_node_hour``, ``price.unit``), the cost: node-hours x that price.

The site is the config's (``site:``, loaded by the config's validation), or the one
``--site NAME|PATH`` names instead (a name under sites/, or a site file): its node shape
checks the sweep, its ``slurm.max_runtime_min`` caps the runtimes, its ``slurm.limits``
give the queue warnings and its ``price`` the cost.

Runtime per attempt: ``scalesweep.run.slurm.runtime_min`` (what ``rule run_point`` asks the
Slurm plugin for: ``workloads.<name>.max_runtime_min x 2^(attempt-1)``, capped at
the site's ``slurm.max_runtime_min``), unless the profile's ``set-resources`` fixes
``run_point``'s runtime (a number, or an arithmetic expression of ``attempt``), which
Snakemake would use instead. Attempts = 1 + the profile's ``retries`` (profiles/default, then the given
profile, as Snakemake applies them).

Besides the points, each dataset a CNN workload reads is staged and verified by two more
Slurm jobs of one node (``rule stage_dataset``, ``rule verify_dataset``) with the profile's
default runtime; every other rule is local (login node).

Expected wall time per point, in order of preference, from ``harness_wall_s`` of the
campaigns given with ``--from-campaign`` (the mean over their repeats):
``point`` the same workload, runtime, nodes, GPUs, ranks and threads;
``nodes`` the same workload, runtime and nodes (any other geometry);
``fit`` Amdahl's law fitted to the workload and runtime's wall time vs nodes
(``scalesweep.analyse.fits``), where it has enough node counts and fits well;
``requested`` none of these: the requested runtime of attempt 1 (an upper bound).

Repeats (``scalesweep.plan.adaptive``): a series (one arm of one geometry of a workload)
measures its runtimes together, in blocks of one run each (native and the runtime it is
compared with: ``sweep.arms_of``, ``block_runtimes``); its first
``measurement.warmup_blocks`` blocks are warm-up (measured, in no statistic), and every
count below includes them; after each block from ``sweep.repeats`` on (after the
warm-up), the workflow's decision says whether it needs another, up to
``measurement.max_repeats`` (after the warm-up). Per series:
``minimum`` the fewest blocks it can stop at (``decision.blocks_at_spread`` at zero
spread: ``sweep.repeats``, and at least the pairs a comparison needs);
``expected`` the blocks it stops at when its pairs spread as measured before
(``decision.blocks_at_spread``): the spread of ln(t_runtime / t_native) over the
same-block pairs of this campaign's runs so far and of ``--from-campaign``'s, from the
``series`` itself (at least MIN_SPREAD_PAIRS pairs), else pooled over the ``workload``'s
other series of that runtime, else ``assumed`` (``--assume-spread-pct``); unknown
without any of these;
``maximum`` ``measurement.max_repeats`` blocks (a series may need them to replace
disturbed runs even where its CI is met).
A selection of runtimes (``only: {runtimes: ...}``) measures the minimum of
``sweep.repeats`` blocks and makes no decision (``adaptive.walks_decisions``).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from scalesweep.analyse.decision import blocks_at_spread
from scalesweep.campaign.history import (
    SERIES_KEY,
    SOURCES,
    SPREAD_SOURCES,
    expected_seconds,
    observed_spreads,
)
from scalesweep.campaign.profile import attempts_of, point_runtime_min, support_runtime_min
from scalesweep.plan.adaptive import Series, block_bounds, walks_decisions
from scalesweep.plan.kinds import kind_of
from scalesweep.plan.sweep import REFERENCE, Selection, SweepPoint, selected_points, value_span
from scalesweep.record.geometry import AXES


# Rules that run as Slurm jobs besides run_point, per dataset a CNN workload reads.
DATASET_JOBS = ("stage_dataset", "verify_dataset")
SCENARIOS = {"minimum": "blocks_min", "expected": "blocks_expected", "maximum": "blocks_max"}
POINT_FIELDS = ("workload", "runtime", *AXES, "repeat", "arm")



def plan_series(points: pd.DataFrame, config: dict, history: pd.DataFrame | None = None,
                assume_spread_pct: float | None = None) -> pd.DataFrame:
    """One row per series of ``points`` (``plan_points``): its runtimes per block, the
    blocks a first dry run lists (``sweep.repeats``: ``blocks_first``) and those it
    measures at the minimum, expected (NaN where unknown) and maximum (see the
    module docstring), where the expected spread comes from (``spread_from``: series,
    workload, assumed, none; "no comparison" for a series that compares nothing, "fixed"
    where no decision is made) and that spread (``spread_pct``: the largest sd of d of
    its runtimes, in percent)."""
    by_series, by_workload = observed_spreads(
        history if history is not None else pd.DataFrame(), config)
    first = points[points["repeat"] == 1]
    walks = walks_decisions(config, [SweepPoint(**{f: r[f] for f in POINT_FIELDS})
                                     for _, r in first.iterrows()], Selection.of(config))
    memo: dict[tuple, int | None] = {}

    def blocks(series: Series, spread: dict) -> int | None:
        key = (series.workload, series.arm, tuple(sorted(spread.items())))
        if key not in memo:
            memo[key] = blocks_at_spread(series, config, spread)
        return memo[key]

    rows = []
    for key, g in first.groupby(SERIES_KEY, sort=True):
        w, arm, nodes, gpus, ranks, threads = key
        series = Series(w, int(nodes), int(gpus), int(ranks), int(threads), arm)
        low, high = block_bounds(config, w)  # the warm-up blocks included
        members = series.runtimes(config)
        compared = [rt for rt in members if rt != REFERENCE] if REFERENCE in members else []
        spread, sources = {}, []
        for rt in compared:
            found = by_series.get((*key, rt))
            source = "series"
            if found is None or not np.isfinite(found[1]):
                found, source = by_workload.get((w, rt)), "workload"
            if found is None or not np.isfinite(found[1]):
                found, source = ((0.0, assume_spread_pct / 100, 0), "assumed") \
                    if assume_spread_pct is not None else (None, "none")
            sources.append(source)
            if found is not None:
                spread[rt] = (round(found[0], 9), round(found[1], 9))
        if not walks:  # no decision is made: the minimum of blocks
            minimum = expected = high = low
            sources = ["fixed"]
        else:
            minimum = blocks(series, {rt: (0.0, 0.0) for rt in compared})
            expected = blocks(series, spread) if len(spread) == len(compared) else None
        rows.append({
            **dict(zip(SERIES_KEY, key)), "runtimes": list(g["runtime"]),
            "runs_per_block": len(g), "blocks_first": low, "blocks_min": minimum,
            "blocks_expected": np.nan if expected is None else expected, "blocks_max": high,
            "spread_from": (max(sources, key=(*SPREAD_SOURCES, "none", "fixed").index)
                            if sources else "no comparison"),
            "spread_pct": max((s * 100 for _, s in spread.values()), default=np.nan),
        })
    return pd.DataFrame(rows, columns=[*SERIES_KEY, "runtimes", "runs_per_block",
                                       "blocks_first", "blocks_min",
                                       "blocks_expected", "blocks_max", "spread_from",
                                       "spread_pct"])



def scenario_points(points: pd.DataFrame, series: pd.DataFrame, column: str) -> pd.DataFrame:
    """``points`` (``plan_points``) with each series' blocks 1..``series[column]`` (a
    series whose count is unknown: its minimum): every run of that number of repeats."""
    first = points[points["repeat"] == 1]
    counts = series.set_index(SERIES_KEY)
    counts = counts[column].fillna(counts["blocks_min"])
    parts = [g.assign(repeat=k) for key, g in first.groupby(SERIES_KEY, sort=True)
             for k in range(1, int(counts[key]) + 1)]
    return pd.concat(parts, ignore_index=True) if parts else first.iloc[:0]



def plan_points(config: dict, profile: dict, history: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per sweep point (= one Slurm job): nodes, runtime per attempt (minutes),
    requested_node_h (attempt 1), worst_node_h (every attempt, in full), expected_s,
    expected_source, expected_node_h."""
    attempts = attempts_of(profile)
    rows = []
    for p in selected_points(config):
        per_attempt = [point_runtime_min(config, profile, p.workload, a)
                       for a in range(1, attempts + 1)]
        rows.append({**p.as_dict(), "runtime_min": per_attempt,
                     "requested_node_h": p.nodes * per_attempt[0] / 60,
                     "worst_node_h": p.nodes * sum(per_attempt) / 60})
    table = expected_seconds(pd.DataFrame(rows), history if history is not None
                             else pd.DataFrame())
    first = table["runtime_min"].map(lambda r: r[0] * 60)
    table["expected_node_h"] = table["nodes"] * table["expected_s"].fillna(first) / 3600
    return table



def support_jobs(config: dict, profile: dict) -> pd.DataFrame:
    """The Slurm jobs that are not points: staging and verifying each CNN dataset."""
    datasets = sorted({config["workloads"][p.workload].get("dataset")
                       for p in selected_points(config)
                       if kind_of(config["workloads"][p.workload]).stages_dataset} - {None})
    runtime = support_runtime_min(profile)
    return pd.DataFrame([{"rule": rule, "dataset": d, "nodes": 1, "runtime_min": runtime,
                          "node_h": runtime / 60} for d in datasets for rule in DATASET_JOBS],
                        columns=["rule", "dataset", "nodes", "runtime_min", "node_h"])



def walltime_cap_h(limits: dict, nodes: int) -> float | None:
    for low, high, hours in limits.get("walltime_h_by_nodes", []):
        if low <= nodes <= high:
            return hours
    return None



def site_warnings(points: pd.DataFrame, support: pd.DataFrame, profile: dict, site: dict,
                  qos: str | None = None) -> list[str]:
    """What the site's documented limits (``slurm.limits``, those of ``qos`` over them)
    say about this sweep."""
    warnings: list[str] = []
    limits = dict(site["slurm"]["limits"])
    if qos and qos in limits.get("qos", {}):
        limits.update(limits["qos"][qos])
    name = f"site {site['name']}" + (f" ({qos} QOS)" if qos else "")
    jobs = len(points) + len(support)
    queued, eligible = limits.get("max_queued_jobs"), limits.get("max_eligible_jobs")
    concurrent = int(profile.get("jobs", 0) or 0)
    if queued and jobs > queued:
        warnings.append(
            f"{jobs} jobs exceed the {queued} a user may have queued on {name}: they cannot "
            f"all be submitted at once; Snakemake keeps at most the profile's jobs "
            f"({concurrent or 'unset'}) queued" + (" and submits the rest as jobs end"
                                                   if concurrent and concurrent <= queued
                                                   else ""))
    if queued and concurrent > queued:
        warnings.append(f"the profile's jobs: {concurrent} exceeds {name}'s {queued} queued "
                        "jobs per user: submissions beyond it are rejected")
    if eligible and jobs > eligible:
        waves = math.ceil(jobs / eligible)
        hours = _elapsed_h(points, eligible)
        warnings.append(
            f"{name} lets {eligible} of a user's jobs be eligible to run at once: {jobs} jobs "
            f"run in at least {waves} waves, at least {hours:.1f} h end to end at the expected "
            f"times with no queue wait at all")
    top = limits.get("max_nodes")
    if top:
        big = points[points["nodes"] > top]
        if len(big):
            warnings.append(f"{len(big)} points ask for more than {name}'s {top} nodes "
                            f"(largest: {big['nodes'].max()}): they can never start")
    cap_fixed = limits.get("max_walltime_h")
    for workload, group in points.groupby("workload", sort=True):
        refused, retry_refused, slow = [], [], []
        for _, p in group.iterrows():
            cap = cap_fixed or walltime_cap_h(limits, int(p["nodes"]))
            if cap is None:
                continue
            cap_min = cap * 60
            if p["runtime_min"][0] > cap_min:
                refused.append((p["nodes"], p["runtime_min"][0], cap))
            elif any(r > cap_min for r in p["runtime_min"][1:]):
                attempt = next(a for a, r in enumerate(p["runtime_min"], 1) if r > cap_min)
                retry_refused.append((p["nodes"], attempt, p["runtime_min"][attempt - 1], cap))
            if p["expected_source"] != "requested" and p["expected_s"] > cap * 3600:
                slow.append((p["nodes"], p["expected_s"], cap))
        if refused:
            n, r, cap = refused[0]
            warnings.append(f"{workload}: {len(refused)} points ask for more walltime than "
                            f"{name} allows (e.g. {n} nodes: {r:g} min > {cap:g} h): "
                            "refused at submission")
        if retry_refused:
            n, a, r, cap = retry_refused[0]
            warnings.append(f"{workload}: {len(retry_refused)} points' retries would ask for "
                            f"more than {name}'s walltime cap (e.g. {n} nodes, attempt {a}: "
                            f"{r:g} min > {cap:g} h): set the site's slurm.max_runtime_min "
                            "to the cap")
        if slow:
            n, s, cap = slow[0]
            warnings.append(f"{workload}: {len(slow)} points are expected to run longer than "
                            f"{name}'s cap (e.g. {n} nodes: {s / 3600:.1f} h > {cap:g} h): "
                            "they will time out on every attempt")
    return warnings



def plan_warnings(points: pd.DataFrame, totals: dict, allocation_node_h: float | None) -> list[str]:
    """Allocation and timeout warnings that hold on any site (``totals`` from ``totals_of``,
    ``points`` the minimum's runs)."""
    warnings = []
    if allocation_node_h is not None:
        repeats = totals["repeats"]
        for what, value in (("minimum", repeats["minimum"]["requested_node_h"]),
                            ("expected", repeats["expected"]["requested_node_h"]),
                            ("maximum", repeats["maximum"]["requested_node_h"]),
                            ("worst-case", totals["worst_node_h"])):
            if value is not None and value > allocation_node_h:
                warnings.append(f"the {what} node-hours ({value:,.1f}) exceed the "
                                f"allocation ({allocation_node_h:,.1f})")
    measured = points[(points["expected_source"] != "requested") & (points["repeat"] == 1)]
    short = measured[measured["expected_s"] > measured["runtime_min"].map(lambda r: r[0] * 60)]
    for workload, group in short.groupby("workload", sort=True):
        p = group.iloc[0]
        warnings.append(f"{workload}: {len(group)} points are expected to take longer than "
                        f"their first attempt asks (e.g. {p['nodes']} nodes: "
                        f"{p['expected_s'] / 60:.1f} min > {p['runtime_min'][0]:g} min): "
                        f"raise workloads.{workload}.max_runtime_min")
    return warnings



def scenario_totals(runs: pd.DataFrame, series: pd.DataFrame, column: str,
                    support: pd.DataFrame) -> dict:
    """Runs, jobs and node-hours of one scenario (``runs``: its ``scenario_points``)."""
    known = series[column].notna()
    counts = series[column].fillna(series["blocks_min"]).astype(int)
    return {
        "blocks": value_span(counts) if len(counts) else "0",
        "runs": len(runs),
        "jobs": len(runs) + len(support),
        "requested_node_h": float(runs["requested_node_h"].sum() + support["node_h"].sum()),
        "measured_node_h": float(runs["expected_node_h"].sum() + support["node_h"].sum()),
        "series": len(series),
        "series_known": int(known.sum()),
    }



def totals_of(scenarios: dict[str, pd.DataFrame], series: pd.DataFrame,
              support: pd.DataFrame, profile: dict) -> dict:
    """Jobs and node-hours of the whole sweep, dataset jobs included: the flat keys at
    the minimum of repeats, but ``worst_node_h`` (the maximum, every attempt in full),
    and under ``repeats`` the minimum, expected and maximum (``scenario_totals``; the
    expected's values None where no series' spread is known)."""
    attempts = attempts_of(profile)
    repeats = {name: scenario_totals(scenarios[name], series, column, support)
               for name, column in SCENARIOS.items()}
    expected = repeats["expected"]
    if expected["series_known"] == 0 and len(series):
        expected.update(runs=None, jobs=None, requested_node_h=None, measured_node_h=None)
    expected["complete"] = expected["series_known"] == expected["series"]
    minimum = repeats["minimum"]
    return {
        "jobs": minimum["jobs"],
        "point_jobs": minimum["runs"],
        "support_jobs": len(support),
        "attempts": attempts,
        "requested_node_h": minimum["requested_node_h"],
        "worst_node_h": float(scenarios["maximum"]["worst_node_h"].sum()
                              + support["node_h"].sum() * attempts),
        "expected_node_h": minimum["measured_node_h"],
        "repeats": repeats,
    }



def cost_of(totals: dict, site: dict) -> dict | None:
    """The node-hours of ``totals`` at the site's price; None where it declares none."""
    price = site["price"]
    if "per_node_hour" not in price:
        return None
    return {"unit": price["unit"], "per_node_hour": price["per_node_hour"],
            **{what: totals[f"{what}_node_h"] * price["per_node_hour"]
               for what in ("requested", "worst", "expected")}}



def summary_table(scenarios: dict[str, pd.DataFrame], series: pd.DataFrame) -> pd.DataFrame:
    """Per workload: series, runs (minimum, expected, maximum), nodes, runtime per
    attempt, node-hours (requested at each; the worst case; the minimum at measured wall
    times), sources of expectation (wall times at the minimum, spreads per series)."""
    rows = []
    points = scenarios["minimum"]
    for workload, g in points.groupby("workload", sort=True):
        mine = series[series["workload"] == workload]
        known = bool(mine["blocks_expected"].notna().all())
        at = {name: scenarios[name][scenarios[name]["workload"] == workload]
              for name in SCENARIOS}
        runtimes = sorted({tuple(r) for r in g["runtime_min"]})
        sources = g["expected_source"].value_counts()
        spreads = mine["spread_from"].value_counts()
        rows.append({
            "workload": workload,
            "series": len(mine),
            "jobs": len(g),
            "runs_minimum": len(at["minimum"]),
            "runs_expected": int(len(at["expected"])) if known else None,
            "runs_maximum": len(at["maximum"]),
            "nodes": value_span(g["nodes"]),
            "runtime_min": "; ".join(", ".join(f"{m:g}" for m in r) for r in runtimes),
            "requested_node_h": g["requested_node_h"].sum(),
            "requested_node_h_expected": (at["expected"]["requested_node_h"].sum() if known
                                          else None),
            "requested_node_h_maximum": at["maximum"]["requested_node_h"].sum(),
            "worst_node_h": at["maximum"]["worst_node_h"].sum(),
            "expected_node_h": g["expected_node_h"].sum(),
            "expected_from": ", ".join(f"{sources[s]} {s}" for s in SOURCES if s in sources),
            "spread_from": ", ".join(f"{spreads[s]} {s}" for s in
                                     (*SPREAD_SOURCES, "none", "no comparison", "fixed")
                                     if s in spreads),
        })
    return pd.DataFrame(rows)



def _elapsed_h(points: pd.DataFrame, at_once: int) -> float:
    """Lower bound of the end-to-end time with ``at_once`` jobs running at a time."""
    seconds = points["expected_s"].fillna(points["runtime_min"].map(lambda r: r[0] * 60))
    return float(max(seconds.sum() / at_once, seconds.max() if len(seconds) else 0.0)) / 3600


def format_hours(value: float) -> str:
    return f"{value:,.1f}" if value >= 10 else f"{value:.3g}"
