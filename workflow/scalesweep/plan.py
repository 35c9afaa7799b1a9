"""``scalesweep plan``: what a sweep will cost before it is submitted.

For a config (the campaign's config as ``snakemake`` reads it for the same
``--configfile``, ``--config`` and ``--profile``: ``scalesweep.config.effective_config``;
with ``--config 'only={...}'`` only the selected points) and a profile: the number of
Slurm jobs, the node-hours they request (nodes x the runtime of attempt 1, one job per
point: repeats are points), the worst case (every point failing until its last attempt,
each attempt using all it asked for), and the node-hours to expect from earlier
campaigns' measured wall times. Then the
warnings a site would otherwise give at submission or after days in the queue: over the
allocation, past a queue limit, over a walltime cap. Where the site declares a price
(``price.per_node_hour``, ``price.unit``), the cost: node-hours x that price.

The site is the config's (``site:``, loaded by the config's validation), or the one
``--site NAME|PATH`` names instead (a name under sites/, or a site file): its node shape
checks the sweep, its ``slurm.max_runtime_min`` caps the runtimes, its ``slurm.limits``
give the queue warnings and its ``price`` the cost.

Runtime per attempt: ``scalesweep.slurm.runtime_min`` (what ``rule run_point`` asks the
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
(``scalesweep.fits``), where it has enough node counts and fits well;
``requested`` none of these: the requested runtime of attempt 1 (an upper bound).
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

from scalesweep import fits
from scalesweep.cli import UsageError
from scalesweep.config import ConfigError, check_config, config_sources
from scalesweep.site import SiteError, known_sites, site_of
from scalesweep.slurm import runtime_min
from scalesweep.sweep import SweepError, selected_points

REPO = Path(__file__).resolve().parents[2]

# Rules that run as Slurm jobs besides run_point, per dataset a CNN workload reads.
DATASET_JOBS = ("stage_dataset", "verify_dataset")
DEFAULT_RUNTIME_MIN = 60  # Snakemake's own default runtime when a profile sets none
EXPRESSION = re.compile(r"^[\d\s+\-*/().]*$")
SOURCES = ("point", "nodes", "fit", "requested")


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
    from scalesweep.compare import campaign_runs

    tables = [campaign_runs(Path(d))[0] for d in directories]
    tables = [t for t in tables if not t.empty]
    return pd.concat(tables, ignore_index=True) if tables else pd.DataFrame()


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
    geometry = ["workload", "runtime", "nodes", "gpus", "ranks", "threads"]
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
                       if config["workloads"][p.workload]["payload"] == "cnn"} - {None})
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
    """Allocation and timeout warnings that hold on any site (``totals`` from ``totals_of``)."""
    warnings = []
    if allocation_node_h is not None:
        for what, key in (("requested", "requested_node_h"), ("expected", "expected_node_h"),
                          ("worst-case", "worst_node_h")):
            if totals[key] > allocation_node_h:
                warnings.append(f"the {what} node-hours ({totals[key]:,.1f}) exceed the "
                                f"allocation ({allocation_node_h:,.1f})")
    measured = points[points["expected_source"] != "requested"]
    short = measured[measured["expected_s"] > measured["runtime_min"].map(lambda r: r[0] * 60)]
    for workload, group in short.groupby("workload", sort=True):
        p = group.iloc[0]
        warnings.append(f"{workload}: {len(group)} points are expected to take longer than "
                        f"their first attempt asks (e.g. {p['nodes']} nodes: "
                        f"{p['expected_s'] / 60:.1f} min > {p['runtime_min'][0]:g} min): "
                        f"raise workloads.{workload}.max_runtime_min")
    return warnings


def totals_of(points: pd.DataFrame, support: pd.DataFrame, profile: dict) -> dict:
    """Jobs and node-hours of the whole sweep, dataset jobs included."""
    attempts = attempts_of(profile)
    return {
        "jobs": len(points) + len(support),
        "point_jobs": len(points),
        "support_jobs": len(support),
        "attempts": attempts,
        "requested_node_h": float(points["requested_node_h"].sum() + support["node_h"].sum()),
        "worst_node_h": float(points["worst_node_h"].sum() + support["node_h"].sum() * attempts),
        "expected_node_h": float(points["expected_node_h"].sum() + support["node_h"].sum()),
    }


def cost_of(totals: dict, site: dict) -> dict | None:
    """The node-hours of ``totals`` at the site's price; None where it declares none."""
    price = site["price"]
    if "per_node_hour" not in price:
        return None
    return {"unit": price["unit"], "per_node_hour": price["per_node_hour"],
            **{what: totals[f"{what}_node_h"] * price["per_node_hour"]
               for what in ("requested", "worst", "expected")}}


def summary_table(points: pd.DataFrame) -> pd.DataFrame:
    """Per workload: jobs, nodes, runtime per attempt, node-hours, sources of expectation."""
    rows = []
    for workload, g in points.groupby("workload", sort=True):
        runtimes = sorted({tuple(r) for r in g["runtime_min"]})
        sources = g["expected_source"].value_counts()
        rows.append({
            "workload": workload,
            "jobs": len(g),
            "nodes": _span(g["nodes"]),
            "runtime_min": "; ".join(", ".join(f"{m:g}" for m in r) for r in runtimes),
            "requested_node_h": g["requested_node_h"].sum(),
            "worst_node_h": g["worst_node_h"].sum(),
            "expected_node_h": g["expected_node_h"].sum(),
            "expected_from": ", ".join(f"{sources[s]} {s}" for s in SOURCES if s in sources),
        })
    return pd.DataFrame(rows)


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
                   help="earlier campaigns whose measured wall times give the expectation")
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
        config = sources.load()
        if args.site:  # a path relative to the current directory, as on any command line
            site_arg = args.site
            if "/" in site_arg or site_arg.endswith((".yaml", ".yml")):
                site_arg = str(Path(site_arg).resolve())
            config["site"] = site_arg
            check_config(config)  # the site's facts, runtimes and engines checked again
        history = campaign_history(args.from_campaign)
        points = plan_points(config, profile, history)
        support = support_jobs(config, profile)
    except (ConfigError, SiteError, SweepError) as exc:
        raise UsageError(str(exc)) from None
    site = site_of(config)
    qos = args.qos or profile.get("slurm-qos")
    totals = totals_of(points, support, profile)
    cost = cost_of(totals, site)
    warnings = plan_warnings(points, totals, args.allocation_node_hours)
    warnings += site_warnings(points, support, profile, site, qos)
    summary = summary_table(points)
    if args.json:
        json.dump({"configs": configs, "profile": args.profile, "site": site["name"],
                   "totals": totals, "cost": cost, "workloads": summary.to_dict(orient="records"),
                   "warnings": warnings}, sys.stdout, indent=2, default=_json_default)
        print()
    else:
        _print_text(configs, args, site, totals, cost, summary, support, warnings)
    return 1 if warnings and args.strict else 0


def _print_text(configs, args, site, totals, cost, summary, support, warnings) -> None:
    print(f"config: {' + '.join(configs)}; profile: {args.profile or '(none)'}; site: "
          f"{site['name']}, {site['description']}")
    kind = "Slurm jobs" if args.profile and read_profile(args.profile).get("executor") == "slurm" \
        else "jobs"
    print(f"{totals['jobs']} {kind}: {totals['point_jobs']} sweep points (repeats "
          f"included) + {totals['support_jobs']} dataset staging/verification; "
          f"{totals['attempts']} attempt(s) each at most")
    shown = summary.copy()
    for col in ("requested_node_h", "worst_node_h", "expected_node_h"):
        shown[col] = shown[col].map(_hours)
    print(shown.to_string(index=False))
    print("expected_from: point = that point measured before, nodes = same workload, runtime "
          "and nodes measured, fit = Amdahl fit of wall time vs nodes, requested = nothing "
          "measured (attempt 1's runtime: an upper bound)")
    print(f"node-hours: requested {_hours(totals['requested_node_h'])} (attempt 1 of every "
          f"job), worst case {_hours(totals['worst_node_h'])} (every attempt in full), "
          f"expected {_hours(totals['expected_node_h'])}" +
          ("" if args.from_campaign else " (= requested: no --from-campaign)"))
    if len(support):
        print(f"  incl. {support['node_h'].sum():,.1f} node-h of dataset staging/verification "
              f"({len(support)} jobs x {support['runtime_min'].iloc[0]:g} min, 1 node)")
    if cost:
        print(f"cost at {cost['per_node_hour']:g} {cost['unit']} per node-hour: requested "
              f"{_hours(cost['requested'])}, worst case {_hours(cost['worst'])}, expected "
              f"{_hours(cost['expected'])} {cost['unit']}")
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
