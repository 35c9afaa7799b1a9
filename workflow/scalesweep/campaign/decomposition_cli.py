"""``scalesweep decomposition``: where the container's cost goes, from a campaign's
runs.csv (``scalesweep.analyse.decomposition``: decomposition.csv, exactly, where the
campaign's campaign.json is beside the file)."""

from __future__ import annotations

import argparse
from pathlib import Path

from scalesweep.analyse.frame import TableError
from scalesweep.campaign.analysis_cli import (add_format, add_verdict_options, note,
                                              note_campaign, print_table, read_table,
                                              verdict_config)
from scalesweep.campaign.usage import UsageError

NEEDED = ("workload", "runtime", "arm", "block_id", "payload", "time_s")


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "decomposition",
        help="where the container's cost goes: the overhead by component, with verdicts",
        description="The container overhead taken apart (as results/summary/"
        "decomposition.csv): per comparison of a container runtime (and mode) with native "
        "and per component (start-up and its parts, steady-state compute, data reading, "
        "the MPI path, memory of the ranks and of the node), the paired difference with "
        "its 95%% CI and the verdict, computed as the overhead verdicts are; a component "
        "the runs did not record says 'not measured'. Reads a campaign's runs.csv; with "
        "its campaign.json beside it, the campaign's margin, CI target and pairing.")
    parser.add_argument("file", type=Path, help="a campaign's runs.csv")
    add_verdict_options(parser)
    add_format(parser)
    parser.set_defaults(func=run_decomposition)


def run_decomposition(args: argparse.Namespace) -> int:
    from scalesweep.analyse.decomposition import decomposition_table

    runs = read_table(args.file)
    missing = [c for c in NEEDED if c not in runs.columns]
    if missing:
        raise UsageError(f"{args.file}: not a campaign's runs.csv (no column "
                         f"{', '.join(missing)})")
    config, record = verdict_config(args, runs)
    logs: list[str] = []
    try:
        table = decomposition_table(runs.reset_index(drop=True), config, logs.append)
    except (TableError, KeyError, ValueError) as exc:
        raise UsageError(f"{args.file}: {exc}") from None
    for line in logs:
        note(args, line)
    if record is not None:
        note_campaign(args, record, "decomposition.csv")
    if table.empty:
        raise UsageError(f"{args.file}: no container runtime compared with native")
    print_table(table, args.format)
    return 0
