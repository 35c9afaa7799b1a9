"""The ``scalesweep`` console script: one sub-command per module that offers one.

Each module listed in ``COMMANDS`` exposes ``add_parser(subparsers)``, which registers
its sub-command and sets ``func`` (taking the parsed args, returning an exit code).
"""

from __future__ import annotations

import argparse
import importlib
import sys

from scalesweep.campaign.usage import UsageError

# module name -> sub-commands it registers (imported lazily so `--help` stays fast)
COMMANDS = [
    "scalesweep.campaign.analysis_cli",
    "scalesweep.campaign.decomposition_cli",
    "scalesweep.campaign.load_cli",
    "scalesweep.campaign.status",
    "scalesweep.campaign.rerun",
    "scalesweep.campaign.archive",
    "scalesweep.campaign.compare",
    "scalesweep.campaign.ablate",
    "scalesweep.campaign.cost",
    "scalesweep.campaign.fits_cli",
    "scalesweep.campaign.overlaps",
    "scalesweep.images.cli",
    "scalesweep.images.load",
    "scalesweep.platform.hostmpi",
    "scalesweep.campaign.deploy",
]
# Sub-commands whose module is imported alone (standard library only): the workflow's
# rules run them in whatever environment they have, without the analysis stack.
STANDALONE = {"build-image": "scalesweep.images.cli",
              "describe-image": "scalesweep.images.cli",
              "inject-host-mpi": "scalesweep.platform.hostmpi",
              "load-image": "scalesweep.images.load"}


def build_parser(modules: list[str] | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="scalesweep",
        description="Container overhead and scaling of ML training and LLM inference.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for name in modules or COMMANDS:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:
                continue
            raise
        module.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    if argv is None:  # as a console script: `scalesweep status | head` ends quietly
        import signal

        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "run":  # every argument after it is Snakemake's, unparsed
        from scalesweep.campaign.deploy import run

        try:
            return run(argv[1:])
        except UsageError as exc:
            print(f"scalesweep run: error: {exc}", file=sys.stderr)
            return 2
    standalone = STANDALONE.get(argv[0]) if argv else None
    args = build_parser([standalone] if standalone else None).parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except UsageError as exc:
        print(f"scalesweep {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
