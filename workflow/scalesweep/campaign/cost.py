"""``scalesweep plan``: what a sweep will cost before it is submitted, on the command line
(its options, the plan printed as text or JSON). The computation (the profile, the
expected wall times, the repeats of each series, the totals, the warnings, the price) is
scalesweep.campaign.estimate, whose docstring says how each figure is made; the summary a
dry run prints is scalesweep.campaign.dry_run."""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from scalesweep.campaign.estimate import (
    SCENARIOS,
    format_hours,
    cost_of,
    plan_points,
    plan_series,
    plan_warnings,
    scenario_points,
    site_warnings,
    summary_table,
    support_jobs,
    totals_of,
)
from scalesweep.campaign.history import campaign_history, history_dirs
from scalesweep.campaign.profile import read_profile
from scalesweep.campaign.startplan import format_prediction, startup_prediction
from scalesweep.campaign.usage import UsageError, positive_number
from scalesweep.plan.adaptive import MIN_COMPARED
from scalesweep.plan.config import ConfigError, validated
from scalesweep.plan.config_read import config_sources
from scalesweep.plan.sweep import Selection, SweepError, value_span
from scalesweep.platform.site import SiteError, known_sites, site_of


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
    p.add_argument("--allocation-node-hours", type=positive_number, metavar="N",
                   help="warn when the sweep needs more than this")
    p.add_argument("--from-campaign", nargs="*", default=[], type=Path, metavar="DIR",
                   help="earlier campaigns whose measured wall times and spread give the "
                        "expectation (besides the campaign's own runs so far)")
    p.add_argument("--assume-spread-pct", type=positive_number, metavar="PCT",
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
    startup = startup_prediction([directory, *args.from_campaign],
                                 site, [int(n) for n in points["nodes"].unique()]
                                 if len(points) else [], config["startup_scale"]["enabled"])
    if args.json:
        json.dump({"configs": configs, "profile": args.profile, "site": site["name"],
                   "measured_before": [str(d) for d in measured], "repeats_rule": rule,
                   "totals": totals, "cost": cost, "workloads": summary.to_dict(orient="records"),
                   "startup_prediction": startup, "warnings": warnings}, sys.stdout,
                  indent=2, default=_json_default)
        print()
    else:
        _print_text(configs, args, site, totals, cost, summary, support, warnings, rule,
                    measured, series)
        if startup:
            print("\n" + "\n".join(format_prediction(startup)))
    return 1 if warnings and args.strict else 0



def repeats_rule(config: dict, points: pd.DataFrame, series: pd.DataFrame) -> dict:
    """How the repeats are decided, for the output: adaptive or not, the bounds and the
    target (``measurement``), the pairs a comparison needs, the runs a first dry run
    lists (``sweep.repeats`` blocks of every series)."""
    m = config["measurement"]  # validated: the schema's defaults filled in
    warmup = int(m["warmup_blocks"])  # blocks_first counts them: sweep.repeats does not
    return {
        "adaptive": bool((series["blocks_max"] > series["blocks_first"]).any()),
        "runtimes_selected": Selection.of(config).runtimes is not None,
        "sweep_repeats": value_span(series["blocks_first"] - warmup) if len(series) else "0",
        "warmup_blocks": warmup,
        "blocks_first": value_span(series["blocks_first"]) if len(series) else "0",
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
              f"or a verdict settled over the campaign, or none within reach (futility), "
              f"at most measurement.max_repeats ({rule['max_repeats']}) blocks. A first dry "
              f"run lists the first {rule['blocks_first']} blocks "
              f"({rule['first_dry_run_runs']} runs); the workflow adds the others.")
    else:
        why = ("a selection of runtimes (only:) makes no decision" if rule["runtimes_selected"]
               else "measurement.adaptive is off, or max_repeats <= sweep.repeats")
        print(f"Repeats are fixed: sweep.repeats ({rule['sweep_repeats']}) blocks per series "
              f"({why}).")
    if rule["warmup_blocks"]:
        print(f"Before them every series measures {rule['warmup_blocks']} warm-up block(s) "
              "(measurement.warmup_blocks: kept, left out of every statistic); every count "
              "below includes them.")
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
              f"{format_hours(r['requested_node_h']):>9} node-h  ({r['blocks']} {notes[name]})"
              if name != "expected" else
              f"  {name:<9} {r['runs']:>6,} runs  {r['jobs']:>6,} {kind}  "
              f"{format_hours(r['requested_node_h']):>9} node-h  ({r['blocks']} blocks per series, "
              f"{notes[name]})")
    print(f"  worst case {format_hours(totals['worst_node_h'])} node-h: the maximum, every run "
          f"failing until its last attempt ({totals['attempts']} at most), each in full")
    if len(support):
        print(f"  jobs = runs + {len(support)} dataset staging/verification "
              f"({support['node_h'].sum():,.1f} node-h: {len(support)} jobs x "
              f"{support['runtime_min'].iloc[0]:g} min, 1 node)")
    if measured:
        print(f"  at the wall times measured before ({', '.join(map(str, measured))}): "
              f"minimum {format_hours(repeats['minimum']['measured_node_h'])}"
              + (f", expected {format_hours(repeats['expected']['measured_node_h'])}"
                 if repeats["expected"]["measured_node_h"] is not None else "")
              + f", maximum {format_hours(repeats['maximum']['measured_node_h'])} node-h")
    shown = summary.copy()
    shown["runs"] = [f"{a} / {_maybe(b)} / {c}" for a, b, c in
                     zip(shown["runs_minimum"], shown["runs_expected"], shown["runs_maximum"])]
    shown["node_h"] = [f"{format_hours(a)} / {_maybe(b, format_hours)} / {format_hours(c)}" for a, b, c in
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
              f"{format_hours(r['minimum']['cost'])}, expected {_maybe(r['expected']['cost'], format_hours)}"
              f", maximum {format_hours(r['maximum']['cost'])}, worst case {format_hours(cost['worst'])} "
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



def _json_default(value):
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating,)):
        return float(value)
    return str(value)



