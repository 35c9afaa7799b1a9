"""``scalesweep plan``: what a sweep will cost before it is submitted.

For a config (the campaign's config as ``snakemake`` reads it for the same
``--configfile``, ``--config`` and ``--profile``: ``scalesweep.plan.config.effective_config``;
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
compared with: ``sweep.arms_of``, ``block_runtimes``); after each block from
``sweep.repeats`` on, the workflow's decision says whether it needs another, up to
``measurement.max_repeats``. Per series:
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

import argparse
import json
import math
import re
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from scalesweep.analyse import fits
from scalesweep.analyse.decision import blocks_at_spread
from scalesweep.campaign.usage import UsageError
from scalesweep.plan.adaptive import MIN_COMPARED, Series, repeat_bounds, walks_decisions
from scalesweep.plan.config import ConfigError, config_sources, validated
from scalesweep.plan.kinds import kind_of
from scalesweep.plan.sweep import REFERENCE, Selection, SweepError, SweepPoint, selected_points
from scalesweep.platform.site import SiteError, known_sites, site_of
from scalesweep.record.geometry import AXES
from scalesweep.record.pointdir import RUNS_DIR
from scalesweep.run.slurm import runtime_min, settings_options

REPO = Path(__file__).resolve().parents[3]

# Rules that run as Slurm jobs besides run_point, per dataset a CNN workload reads.
DATASET_JOBS = ("stage_dataset", "verify_dataset")
DEFAULT_RUNTIME_MIN = 60  # Snakemake's own default runtime when a profile sets none
EXPRESSION = re.compile(r"^[\d\s+\-*/().]*$")
SOURCES = ("point", "nodes", "fit", "requested")
# a series of the plan: one arm of one geometry of a workload (adaptive.Series)
SERIES_KEY = ["workload", "arm", *AXES]
SCENARIOS = {"minimum": "blocks_min", "expected": "blocks_expected", "maximum": "blocks_max"}
SPREAD_SOURCES = ("series", "workload", "assumed")
MIN_SPREAD_PAIRS = 3  # a series' own spread: from at least this many same-block pairs
POINT_FIELDS = ("workload", "runtime", *AXES, "repeat", "arm")


# --- profile --------------------------------------------------------------------------------

def read_profile(path: str | Path | None) -> dict:
    """profiles/default/config.yaml overlaid by ``path`` (a profile directory or its
    config.yaml), key by key, as Snakemake applies a workflow profile and --profile."""
    merged: dict = {}
    for candidate in [REPO / "profiles" / "default", path]:
        if candidate is None:
            continue
        candidate = Path(candidate)
        file = candidate / "config.yaml" if candidate.is_dir() else candidate
        if not file.is_file():
            if candidate == REPO / "profiles" / "default":
                continue
            raise UsageError(f"profile {candidate}: no config.yaml there")
        data = yaml.safe_load(file.read_text()) or {}
        if not isinstance(data, dict):
            raise UsageError(f"profile {file}: not a YAML mapping")
        merged.update(data)
    return merged


def _resources(value) -> dict:
    """default-resources as a mapping (a profile may write a list of 'key=value')."""
    if isinstance(value, dict):
        return dict(value)
    out = {}
    for item in value or []:
        key, _, val = str(item).partition("=")
        out[key.strip()] = val.strip()
    return out


def _set_resources(value) -> dict[str, dict]:
    """set-resources as {rule: {key: value}} (a list of 'rule:key=value' too)."""
    if isinstance(value, dict):
        return {rule: _resources(res) for rule, res in value.items()}
    out: dict[str, dict] = {}
    for item in value or []:
        rule, _, rest = str(item).partition(":")
        key, _, val = rest.partition("=")
        out.setdefault(rule.strip(), {})[key.strip()] = val.strip()
    return out


def minutes(value, attempt: int = 1) -> float | None:
    """A profile's runtime: a number, or arithmetic of ``attempt``; None if unreadable."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    text = str(value).strip().strip("'\"")
    text = re.sub(r"\battempt\b", str(int(attempt)), text)
    if not text or not EXPRESSION.match(text):
        return None
    try:
        return float(eval(text, {"__builtins__": {}}, {}))  # digits and operators only
    except (SyntaxError, ZeroDivisionError, TypeError):
        return None


def attempts_of(profile: dict) -> int:
    return 1 + max(0, int(profile.get("retries", 0) or 0))


def support_runtime_min(profile: dict) -> float:
    value = _resources(profile.get("default-resources")).get("runtime")
    found = minutes(value) if value is not None else None
    return found if found is not None else DEFAULT_RUNTIME_MIN


def point_runtime_min(config: dict, profile: dict, workload: str, attempt: int) -> float:
    """Minutes asked for by attempt ``attempt`` of a point of ``workload``."""
    fixed = _set_resources(profile.get("set-resources")).get("run_point", {}).get("runtime")
    if fixed is not None:
        found = minutes(fixed, attempt)
        if found is not None:
            return found
    return float(runtime_min(config["workloads"][workload], site_of(config), attempt))


# --- history ----------------------------------------------------------------------------------

def campaign_history(directories) -> pd.DataFrame:
    """Every finished run of the given campaigns (runs.csv-like rows)."""
    from scalesweep.campaign.compare import campaign_runs

    tables = [campaign_runs(Path(d))[0].assign(campaign=str(d)) for d in directories]
    tables = [t for t in tables if not t.empty]
    return pd.concat(tables, ignore_index=True) if tables else pd.DataFrame()


def history_dirs(directory: Path, earlier) -> list[Path]:
    """The campaigns whose runs say what to expect: ``directory`` itself where it has
    measured runs, then each of ``earlier`` (each once)."""
    out: list[Path] = []
    for d in ([directory] if (Path(directory) / RUNS_DIR).is_dir() else []) + list(earlier):
        if Path(d).resolve() not in [o.resolve() for o in out]:
            out.append(Path(d))
    return out


def expected_seconds(points: pd.DataFrame, history: pd.DataFrame) -> pd.DataFrame:
    """``points`` with expected_s and expected_source (see the module docstring);
    expected_s is NaN where nothing measured says anything (source 'requested')."""
    out = points.copy()
    out["expected_s"], out["expected_source"] = np.nan, "requested"
    if history.empty or "harness_wall_s" not in history:
        return out
    walls = history.dropna(subset=["harness_wall_s"])
    walls = walls[walls["harness_wall_s"] > 0]
    if walls.empty:
        return out
    geometry = ["workload", "runtime", *AXES]
    by_point = walls.groupby(geometry)["harness_wall_s"].mean()
    by_nodes = walls.groupby(["workload", "runtime", "nodes"])["harness_wall_s"].mean()
    series_fits: dict[tuple, fits.Fit | None] = {}
    for i, p in out.iterrows():
        key = tuple(p[c] for c in geometry)
        if key in by_point.index:
            out.loc[i, ["expected_s", "expected_source"]] = [by_point[key], "point"]
            continue
        if key[:3] in by_nodes.index:
            out.loc[i, ["expected_s", "expected_source"]] = [by_nodes[key[:3]], "nodes"]
            continue
        series = key[:2]
        if series not in series_fits:
            mine = walls[(walls["workload"] == series[0]) & (walls["runtime"] == series[1])]
            fit = None
            if mine["nodes"].nunique() >= fits.min_counts("amdahl"):
                fit = fits.fit_series(mine, "amdahl", "nodes", "harness_wall_s", n_boot=0)
            series_fits[series] = fit
        fit = series_fits[series]
        if fit is not None and fit.can_predict:
            predicted = fits.model_time("amdahl", fit.params, [p["nodes"]])[0]
            out.loc[i, ["expected_s", "expected_source"]] = [predicted, "fit"]
    return out


# --- adaptive repeats --------------------------------------------------------------------------

def observed_spreads(history: pd.DataFrame, config: dict) -> tuple[dict, dict]:
    """The spread of d = ln(t_runtime / t_native) over the same-block pairs of earlier
    runs, paired as the workflow's decisions pair them (``pairing.block_pairs`` with the
    config's pair checks), each campaign's blocks apart: ({(series key..., runtime):
    (mean d, sd of d, pairs)} for the series with MIN_SPREAD_PAIRS pairs or more,
    {(workload, runtime): (mean d, pooled sd, pairs)} over a workload's series, each
    series' deviations from its own mean)."""
    from scalesweep.analyse.pairing import block_pairs
    from scalesweep.analyse.collect import campaign_settings

    if history.empty or not {"time_s", "runtime", "repeat", *SERIES_KEY} <= set(history):
        return {}, {}
    settings = campaign_settings(config)
    runs = history.assign(time_s=pd.to_numeric(history["time_s"], errors="coerce"))
    runs = runs[runs["time_s"] > 0]
    if "campaign" not in runs:
        runs = runs.assign(campaign="")
    groups: dict[tuple, list[np.ndarray]] = {}  # (series key..., runtime) -> d per campaign
    for (*key, _campaign), g in runs.groupby(SERIES_KEY + ["campaign"], sort=True):
        by_runtime = {rt: {int(r["repeat"]): r.to_dict() for _, r in rows.iterrows()}
                      for rt, rows in g.groupby("runtime")}
        if REFERENCE not in by_runtime:
            continue
        for rt, rows in by_runtime.items():
            if rt == REFERENCE:
                continue
            pairs = block_pairs(by_runtime[REFERENCE], rows, "time_s",
                                max_gap_s=settings["max_pair_gap_s"],
                                probe_tolerance_pct=settings["probe_tolerance_pct"])
            native, other = (pairs.native, pairs.container) if pairs.native is not None \
                else pairs.surviving
            if len(native) >= 2:
                groups.setdefault((*key, rt), []).append(np.log(other / native))
    by_series: dict[tuple, tuple[float, float, int]] = {}
    pooled: dict[tuple, list[np.ndarray]] = {}
    for key, ds in groups.items():
        pooled.setdefault((key[0], key[-1]), []).extend(ds)
        spread = _pooled(ds)
        if spread[2] >= MIN_SPREAD_PAIRS:
            by_series[key] = spread
    return by_series, {key: _pooled(ds) for key, ds in pooled.items()}


def _pooled(groups: list[np.ndarray]) -> tuple[float, float, int]:
    """(mean, pooled sd, n) of several groups of values, each about its own mean."""
    n = sum(len(g) for g in groups)
    dof = sum(len(g) - 1 for g in groups)
    ss = sum(float(((g - g.mean()) ** 2).sum()) for g in groups)
    mean = float(np.concatenate(groups).mean())
    return mean, (float(np.sqrt(ss / dof)) if dof > 0 else float("nan")), n


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
        low, high = repeat_bounds(config, w)
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


# --- the plan ---------------------------------------------------------------------------------

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
        "blocks": _span(counts) if len(counts) else "0",
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
            "nodes": _span(g["nodes"]),
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


# --- the end of a dry run ----------------------------------------------------------------------

def dry_run_summary(listed: dict, config: dict, options: str | None) -> list[str]:
    """What a dry run on a Slurm site submits, in a few lines for its end (common.smk
    prints them): ``listed``, {point path: (point, nodes, runtime in minutes)} of the
    run_point jobs it lists, as their resources were evaluated; the series of the points
    the config selects (``plan_series``); ``options`` the plugin's options from
    the command line as each point's ``# sbatch`` line shows them (``slurm.sbatch_options``
    of no resources), None where they could not be read."""
    from scalesweep.plan.imageset import used_images
    from scalesweep.plan.payloads import point_inputs

    points = [v[0] for v in listed.values()]
    node_h = sum(int(n or 1) * float(t or 0) for _, n, t in listed.values()) / 60
    series = plan_series(plan_points(config, {}), config)
    minimum = int((series["runs_per_block"] * series["blocks_min"]).sum())
    maximum = int((series["runs_per_block"] * series["blocks_max"]).sum())
    workloads = sorted({p.workload for p in points})
    lines = [
        f"points: {len(points)} run_point jobs listed above ({', '.join(workloads) or 'none'}); "
        f"the {len(series)} series selected measure "
        + (f"{minimum} to {maximum} runs in all, the workflow adding blocks after these "
           f"(adaptive repeats, at most measurement.max_repeats = "
           f"{config['measurement']['max_repeats']} blocks each)"
           if maximum > minimum else f"{minimum} runs in all"),
        f"Slurm jobs: {len(points)} points asking {_hours(node_h)} node-hours at attempt 1, "
        + ("each with the plugin's options of this command line: "
           f"{options or '(none given: no --slurm-qos ...)'}" if options is not None else
           "the plugin's --slurm-* options of this command line could not be read and "
           "are not shown"),
    ]
    datasets = sorted({config["workloads"][p.workload]["dataset"] for p in points
                       if kind_of(config["workloads"][p.workload]).stages_dataset
                       and not Path(point_inputs(p.workload, p.runtime, config)["verified"])
                       .exists()})
    if datasets:
        lines.append(f"datasets to stage and verify first ({len(DATASET_JOBS)} Slurm jobs "
                     f"each): {', '.join(datasets)}")
    todo = {"build": [], "pull": [], "inject": []}
    for spec in used_images(config, points).values():
        if spec.how in todo and not Path(spec.path).exists():
            todo[spec.how].append(spec.path + (f" ({spec.builder}, {spec.recipe})"
                                               if spec.how == "build" else ""))
    images = "; ".join(f"{how}: {', '.join(paths)}" for how, paths in todo.items() if paths)
    lines.append(f"images, on this host first: {images or 'none to build or pull'}")
    lines.append("runs and node-hours of the whole selection at the minimum, expected and "
                 "maximum of repeats: scalesweep plan, with the same --directory, "
                 "--configfile, --config and --profile")
    return lines


def print_dry_run_summary(listed: dict, config: dict, settings, out=None, err=None) -> None:
    """``dry_run_summary`` under its heading on ``out`` (stdout), at the end of a dry run
    on a Slurm site (common.smk, from atexit); ``settings`` the Slurm plugin's of the
    command line (``slurm.plugin_settings``), None where they could not be read. Where
    the summary cannot be made, one line on ``err`` (stderr) naming the error instead (in
    an atexit callback an exception prints as "Exception ignored" and a traceback)."""
    try:
        options = None if settings is None else " ".join(settings_options(settings))
        lines = dry_run_summary(listed, config, options)
    except Exception as exc:  # informational: the jobs listed above stand
        print(f"scalesweep: no summary of this dry run ({type(exc).__name__}: {exc}); the "
              "jobs listed above are what it would submit", file=err or sys.stderr)
        return
    print("\nscalesweep, this dry run:\n" + "\n".join(f"  {line}" for line in lines),
          file=out or sys.stdout)


# --- command line ---------------------------------------------------------------------------

def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "plan",
        help="jobs, node-hours and queue limits of a sweep, before submitting it",
        description="The config is read as snakemake reads it with the same arguments: "
        "DIR/config/config.yaml, each --configfile merged over it, then --config; a "
        "profile's config:/configfile: keys apply unless given here.",
    )
    p.add_argument("--directory", "-d", default=".", help="campaign directory (default: .)")
    p.add_argument("--configfile", nargs="*", default=[], metavar="FILE",
                   help="config overlays, in order")
    p.add_argument("--config", nargs="+", default=[], metavar="KEY=VALUE",
                   help="config values, as for snakemake (e.g. only='{workloads: [llm]}' "
                        "to plan the selected points only)")
    p.add_argument("--profile", help="Snakemake profile directory, e.g. profiles/frontier")
    p.add_argument("--allocation-node-hours", type=_positive, metavar="N",
                   help="warn when the sweep needs more than this")
    p.add_argument("--from-campaign", nargs="*", default=[], type=Path, metavar="DIR",
                   help="earlier campaigns whose measured wall times and spread give the "
                        "expectation (besides the campaign's own runs so far)")
    p.add_argument("--assume-spread-pct", type=_positive, metavar="PCT",
                   help="for series nothing measured before: assume this spread (sd of "
                        "the container/native time ratio of a block, in percent) to "
                        "estimate their expected repeats")
    p.add_argument("--site", metavar="NAME|PATH",
                   help=f"plan for this site instead of the config's `site` (a name: "
                        f"{', '.join(known_sites())}; or a site file)")
    p.add_argument("--qos", help="Slurm QOS the jobs go to (default: the profile's slurm-qos)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--strict", action="store_true", help="exit 1 when there is a warning")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    directory = Path(args.directory)
    profile = read_profile(args.profile)  # names a missing profile first
    try:  # the config as `snakemake` reads it with the same arguments
        sources = config_sources(directory, args.configfile, args.config, args.profile)
        configs = [str(f) for f in sources.files()] + [f"--config {c}"
                                                      for c in sources.config_args]
        if args.site:  # a path relative to the current directory, as on any command line
            site_arg = args.site
            if "/" in site_arg or site_arg.endswith((".yaml", ".yml")):
                site_arg = str(Path(site_arg).resolve())
            # the config checked once, on that site (its datasets are staged there, not
            # on the config's own site: a source path of the latter is not read)
            config = validated({**sources.raw(), "site": site_arg}, directory)
        else:
            config = sources.load()
        measured = history_dirs(directory, args.from_campaign)
        history = campaign_history(measured)
        points = plan_points(config, profile, history)
        series = plan_series(points, config, history, args.assume_spread_pct)
        support = support_jobs(config, profile)
    except (ConfigError, SiteError, SweepError) as exc:
        raise UsageError(str(exc)) from None
    site = site_of(config)
    qos = args.qos or profile.get("slurm-qos")
    scenarios = {name: scenario_points(points, series, column)
                 for name, column in SCENARIOS.items()}
    totals = totals_of(scenarios, series, support, profile)
    cost = cost_of(totals, site)
    if cost:
        for scenario in totals["repeats"].values():
            value = scenario["requested_node_h"]
            scenario["cost"] = None if value is None else value * cost["per_node_hour"]
    rule = repeats_rule(config, points, series)
    warnings = plan_warnings(scenarios["minimum"], totals, args.allocation_node_hours)
    warnings += site_warnings(scenarios["minimum"], support, profile, site, qos)
    summary = summary_table(scenarios, series)
    if args.json:
        json.dump({"configs": configs, "profile": args.profile, "site": site["name"],
                   "measured_before": [str(d) for d in measured], "repeats_rule": rule,
                   "totals": totals, "cost": cost, "workloads": summary.to_dict(orient="records"),
                   "warnings": warnings}, sys.stdout, indent=2, default=_json_default)
        print()
    else:
        _print_text(configs, args, site, totals, cost, summary, support, warnings, rule,
                    measured, series)
    return 1 if warnings and args.strict else 0


def repeats_rule(config: dict, points: pd.DataFrame, series: pd.DataFrame) -> dict:
    """How the repeats are decided, for the output: adaptive or not, the bounds and the
    target (``measurement``), the pairs a comparison needs, the runs a first dry run
    lists (``sweep.repeats`` blocks of every series)."""
    m = config["measurement"]  # validated: the schema's defaults filled in
    return {
        "adaptive": bool((series["blocks_max"] > series["blocks_first"]).any()),
        "runtimes_selected": Selection.of(config).runtimes is not None,
        "sweep_repeats": _span(series["blocks_first"]) if len(series) else "0",
        "max_repeats": m["max_repeats"],
        "target_ci_pp": float(m["target_ci_pp"]),
        "min_pairs": MIN_COMPARED,
        "first_dry_run_runs": len(points),
    }


def _expected_note(totals: dict, series: pd.DataFrame, measured: list[Path],
                   args: argparse.Namespace) -> str:
    """Where the expected repeats come from, or why they are unknown."""
    expected = totals["repeats"]["expected"]
    spreads = series["spread_pct"].dropna()
    sources = series["spread_from"].value_counts()
    pct = f" {args.assume_spread_pct:g}%" if args.assume_spread_pct else ""
    named = {"series": "series from their own pairs measured before",
             "workload": "pooled over their workload's other series measured before",
             "assumed": f"at the assumed spread{pct}", "none": "with nothing measured",
             "no comparison": "comparing nothing (at their minimum)",
             "fixed": "with fixed repeats"}
    where = ", ".join(f"{sources[s]} {named[s]}" for s in named if s in sources)
    if expected["runs"] is None:
        if not measured:
            why = ("nothing measured before: this campaign has no results/runs/ yet and no "
                   "--from-campaign DIR was given")
        else:
            why = (f"the runs measured before ({', '.join(map(str, measured))}) have no "
                   "same-block pairs of these workloads' runtimes")
        return (f"unknown: {why}. Give --from-campaign DIR (a campaign that measured the same "
                "workloads and runtimes) or --assume-spread-pct PCT")
    low, high = (f"{spreads.min():.2g}", f"{spreads.max():.2g}") if len(spreads) else ("", "")
    spread = f"; sd of ln(t/t_native) per pair {low}{'' if low == high else '-' + high}%" \
        if len(spreads) else ""
    prefix = "" if expected["complete"] else (
        f"at least: the {expected['series'] - expected['series_known']} series with nothing "
        "measured at their minimum; ")
    return f"{prefix}{where}{spread}"


def _print_text(configs, args, site, totals, cost, summary, support, warnings, rule,
                measured, series) -> None:
    print(f"config: {' + '.join(configs)}; profile: {args.profile or '(none)'}; site: "
          f"{site['name']}, {site['description']}")
    kind = "Slurm jobs" if args.profile and read_profile(args.profile).get("executor") == "slurm" \
        else "jobs"
    if rule["adaptive"]:
        print(f"Repeats are adaptive: each series (one arm of one geometry of a workload) "
              f"measures native and the runtime compared with it together, one run of each "
              f"per block; after sweep.repeats ({rule['sweep_repeats']}) blocks it adds one at "
              f"a time until every comparison has {rule['min_pairs']} same-block pairs and a "
              f"95% CI half-width <= measurement.target_ci_pp ({rule['target_ci_pp']:g} pp), "
              f"at most measurement.max_repeats ({rule['max_repeats']}) blocks. A first dry "
              f"run lists the first {rule['sweep_repeats']} blocks "
              f"({rule['first_dry_run_runs']} runs); the workflow adds the others.")
    else:
        why = ("a selection of runtimes (only:) makes no decision" if rule["runtimes_selected"]
               else "measurement.adaptive is off, or max_repeats <= sweep.repeats")
        print(f"Repeats are fixed: sweep.repeats ({rule['sweep_repeats']}) blocks per series "
              f"({why}).")
    repeats = totals["repeats"]
    print(f"\nruns (one {kind[:-1]} each) and node-hours requested (nodes x attempt 1's "
          "runtime), by the number of repeats:")
    notes = {"minimum": "blocks per series: the fewest a series can stop at",
             "expected": _expected_note(totals, series, measured, args),
             "maximum": "blocks per series: measurement.max_repeats, the bound"}
    for name in SCENARIOS:
        r = repeats[name]
        if r["runs"] is None:
            print(f"  {name:<9} {notes[name]}")
            continue
        print(f"  {name:<9} {r['runs']:>6,} runs  {r['jobs']:>6,} {kind}  "
              f"{_hours(r['requested_node_h']):>9} node-h  ({r['blocks']} {notes[name]})"
              if name != "expected" else
              f"  {name:<9} {r['runs']:>6,} runs  {r['jobs']:>6,} {kind}  "
              f"{_hours(r['requested_node_h']):>9} node-h  ({r['blocks']} blocks per series, "
              f"{notes[name]})")
    print(f"  worst case {_hours(totals['worst_node_h'])} node-h: the maximum, every run "
          f"failing until its last attempt ({totals['attempts']} at most), each in full")
    if len(support):
        print(f"  jobs = runs + {len(support)} dataset staging/verification "
              f"({support['node_h'].sum():,.1f} node-h: {len(support)} jobs x "
              f"{support['runtime_min'].iloc[0]:g} min, 1 node)")
    if measured:
        print(f"  at the wall times measured before ({', '.join(map(str, measured))}): "
              f"minimum {_hours(repeats['minimum']['measured_node_h'])}"
              + (f", expected {_hours(repeats['expected']['measured_node_h'])}"
                 if repeats["expected"]["measured_node_h"] is not None else "")
              + f", maximum {_hours(repeats['maximum']['measured_node_h'])} node-h")
    shown = summary.copy()
    shown["runs"] = [f"{a} / {_maybe(b)} / {c}" for a, b, c in
                     zip(shown["runs_minimum"], shown["runs_expected"], shown["runs_maximum"])]
    shown["node_h"] = [f"{_hours(a)} / {_maybe(b, _hours)} / {_hours(c)}" for a, b, c in
                       zip(shown["requested_node_h"], shown["requested_node_h_expected"],
                           shown["requested_node_h_maximum"])]
    print("\nper workload (runs and node_h: minimum / expected / maximum, ? = unknown):")
    print(shown[["workload", "series", "runs", "nodes", "runtime_min", "node_h",
                 "expected_from", "spread_from"]].to_string(index=False))
    print("expected_from (wall time of a run): point = that point measured before, nodes = "
          "same workload, runtime and nodes measured, fit = Amdahl fit of wall time vs "
          "nodes, requested = nothing measured (attempt 1's runtime: an upper bound)")
    print("spread_from (expected repeats): series = its own same-block pairs measured "
          "before, workload = pooled over the workload's other series, assumed = "
          "--assume-spread-pct, none = unknown, no comparison = native alone, fixed = "
          "repeats not adaptive")
    if cost:
        r = repeats
        print(f"cost at {cost['per_node_hour']:g} {cost['unit']} per node-hour: minimum "
              f"{_hours(r['minimum']['cost'])}, expected {_maybe(r['expected']['cost'], _hours)}"
              f", maximum {_hours(r['maximum']['cost'])}, worst case {_hours(cost['worst'])} "
              f"{cost['unit']}")
    if args.allocation_node_hours:
        print(f"allocation: {args.allocation_node_hours:,.1f} node-hours")
    if site["slurm"]["limits"]:
        print(f"site limits from: {site['source'] or 'site ' + site['name']}")
    if warnings:
        print("\nwarnings:")
        for w in warnings:
            print(f"- {w}")
    else:
        print("\nno warnings")


def _maybe(value, fmt=str) -> str:
    return "?" if value is None or (isinstance(value, float) and math.isnan(value)) \
        else fmt(value)


def _elapsed_h(points: pd.DataFrame, at_once: int) -> float:
    """Lower bound of the end-to-end time with ``at_once`` jobs running at a time."""
    seconds = points["expected_s"].fillna(points["runtime_min"].map(lambda r: r[0] * 60))
    return float(max(seconds.sum() / at_once, seconds.max() if len(seconds) else 0.0)) / 3600


def _hours(value: float) -> str:
    return f"{value:,.1f}" if value >= 10 else f"{value:.3g}"


def _span(values) -> str:
    values = sorted(set(int(v) for v in values))
    return str(values[0]) if len(values) == 1 else f"{values[0]}-{values[-1]}"


def _json_default(value):
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating,)):
        return float(value)
    return str(value)


def _positive(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, not {text}")
    return value
