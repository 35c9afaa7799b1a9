"""``scalesweep decomposition``: where the container's cost goes, from a campaign's
runs.csv (``scalesweep.analyse.decomposition``: decomposition.csv, exactly, where the
campaign's campaign.json is beside the file)."""

from __future__ import annotations

import argparse
from pathlib import Path

from scalesweep.analyse.frame import TableError
from scalesweep.analyse.verdict import EQUIVALENCE_MARGIN_PCT, TARGET_CI_PP
from scalesweep.campaign.analysis_cli import (campaign_of, note, note_campaign,
                                              non_negative, print_table, read_table,
                                              add_format)
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
    parser.add_argument("--margin-pct", type=non_negative, default=None,
                        help="equivalence margin (default: the campaign's; else "
                        f"{EQUIVALENCE_MARGIN_PCT:g})")
    parser.add_argument("--target-ci-pp", type=non_negative, default=None,
                        help=f"CI half-width target (default: the campaign's; else "
                        f"{TARGET_CI_PP:g})")
    add_format(parser)
    parser.set_defaults(func=run_decomposition)


def run_decomposition(args: argparse.Namespace) -> int:
    from scalesweep.analyse.decomposition import decomposition_table

    runs = read_table(args.file)
    missing = [c for c in NEEDED if c not in runs.columns]
    if missing:
        raise UsageError(f"{args.file}: not a campaign's runs.csv (no column "
                         f"{', '.join(missing)})")
    record = campaign_of(args, runs, {"--margin-pct": args.margin_pct,
                                      "--target-ci-pp": args.target_ci_pp})
    if record is not None:
        config = record["config"]
    else:
        measurement = {"equivalence_margin_pct": EQUIVALENCE_MARGIN_PCT
                       if args.margin_pct is None else args.margin_pct,
                       "target_ci_pp": TARGET_CI_PP if args.target_ci_pp is None
                       else args.target_ci_pp}
        config = {"measurement": measurement}
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
