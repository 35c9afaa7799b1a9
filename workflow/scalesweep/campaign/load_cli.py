"""``scalesweep load``: LLM serving under load, from a campaign's runs.csv
(``scalesweep.analyse.load``): the container's effect at each load level, exactly as
llm_load_overhead.csv where the campaign's campaign.json is beside the file (``--levels``:
llm_load.csv, each level's percentiles with their intervals, goodput and the highest rate
within the target)."""

from __future__ import annotations

import argparse
from pathlib import Path

from scalesweep.campaign.analysis_cli import (add_format, add_verdict_options, note_campaign,
                                              print_table, read_table, verdict_config)
from scalesweep.campaign.usage import UsageError

NEEDED = ("workload", "runtime", "arm", "block_id", "load_levels")


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "load",
        help="LLM serving under load: the container's effect at each load level, with verdicts",
        description="The container against native at each load level of the LLM workloads (as "
        "results/summary/llm_load_overhead.csv): p99 time to first token, p99 time per output "
        "token and output throughput per level, and the highest rate within the latency "
        "target, each with its overhead, 95%% CI and verdict over same-block pairs. "
        "--levels prints llm_load.csv instead. Reads a campaign's runs.csv; with its "
        "campaign.json beside it, the campaign's margin, CI target and pairing.")
    parser.add_argument("file", type=Path, help="a campaign's runs.csv")
    parser.add_argument("--levels", action="store_true",
                        help="each level's percentiles, goodput and highest rate (llm_load.csv)")
    add_verdict_options(parser)
    add_format(parser)
    parser.set_defaults(func=run_load)


def run_load(args: argparse.Namespace) -> int:
    from scalesweep.analyse.load import load_runs, load_summary, load_verdicts
    from scalesweep.analyse.summary import campaign_settings

    runs = read_table(args.file)
    missing = [c for c in NEEDED if c not in runs.columns]
    if missing:
        raise UsageError(f"{args.file}: not a campaign's runs.csv with LLM load levels (no column "
                         f"{', '.join(missing)})")
    config, record = verdict_config(args, runs)
    levels = load_runs(runs.reset_index(drop=True))
    if levels.empty:
        raise UsageError(f"{args.file}: no run measured load levels (workloads.<name>.load)")
    from scalesweep.report.significance import add_q_values

    table = (load_summary(levels) if args.levels
             else add_q_values(load_verdicts(levels, campaign_settings(config))))
    if record is not None:
        note_campaign(args, record, "llm_load.csv" if args.levels else "llm_load_overhead.csv")
    if table.empty:
        raise UsageError(f"{args.file}: no container runtime compared with native under load")
    print_table(table, args.format)
    return 0
