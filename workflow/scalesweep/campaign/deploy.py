"""``scalesweep init DIR`` and ``scalesweep run [SNAKEMAKE ARGS]``: a campaign from an
installed package (a wheel, not a clone) the way a clone's README runs one.

- ``init`` makes DIR a campaign directory: ``DIR/config/config.yaml``, a copy of the
  embedded default to edit (never over an existing one), and says how to run it.
- ``run`` is ``snakemake`` with the package's Snakefile (``scalesweep.platform.code``:
  the wheel's copy of the tree, or the clone), in the current directory; a ``--profile``
  given by name (``local``, ``frontier``) that is no directory here is the package's own
  (``profiles/<name>``). It replaces this process with Snakemake's, so Ctrl-C, the exit
  status and the terminal are Snakemake's own.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from scalesweep.campaign.usage import UsageError
from scalesweep.platform.code import CODE_ROOT, PROFILES_DIR

CONFIG = Path("config") / "config.yaml"


def init(directory: Path) -> Path:
    """DIR/config/config.yaml from the embedded default; refused where one exists."""
    target = directory / CONFIG
    if target.exists():
        raise UsageError(f"{target} exists: nothing was changed (edit it, or init another "
                         "directory)")
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(CODE_ROOT / CONFIG, target)
    return target


def snakemake_argv(args: list[str], here: Path | None = None) -> list[str]:
    """Snakemake's command line for ``scalesweep run ARGS``: this package's Snakefile, and
    a profile named without a path that is no directory ``here`` taken from its
    profiles/."""
    here = Path.cwd() if here is None else here
    if any(a in ("-s", "--snakefile") or a.startswith("--snakefile=") for a in args):
        raise UsageError("scalesweep run gives Snakemake its own Snakefile "
                         f"({CODE_ROOT / 'Snakefile'}); run snakemake itself for another")
    out = []
    i = 0
    while i < len(args):
        arg = args[i]
        name, value = (arg.split("=", 1) + [None])[:2] if arg.startswith("--profile=") \
            else (arg, None)
        if name == "--profile":
            if value is None and i + 1 < len(args):
                i += 1
                value = args[i]
            if value is not None:
                value = _profile(value, here)
            out += [name] + ([value] if value is not None else [])
        else:
            out.append(arg)
        i += 1
    return [sys.executable, "-m", "snakemake", "-s", str(CODE_ROOT / "Snakefile"), *out]


def _profile(value: str, here: Path) -> str:
    if "/" in value or (here / value).is_dir():
        return value
    packaged = PROFILES_DIR / value
    if not packaged.is_dir():
        known = ", ".join(sorted(p.name for p in PROFILES_DIR.iterdir() if p.is_dir()))
        raise UsageError(f"--profile {value!r}: no directory {here / value} and no profile "
                         f"of that name in {PROFILES_DIR} ({known})")
    return str(packaged)


def _init(args) -> int:
    directory = Path(args.directory)
    target = init(directory)
    print(f"{target}: the embedded default (every key: {CODE_ROOT}/workflow/schemas/"
          "config.schema.yaml; site examples in "
          f"{CODE_ROOT / 'config'}). Then, in {directory}:\n"
          "  scalesweep run --profile local       # or any snakemake arguments\n"
          "  scalesweep run --report report.html")
    return 0


def run(args: list[str]) -> int:
    """``scalesweep run ARGS``: every argument is Snakemake's (``scalesweep.cli.main``
    passes them here unparsed; ``--help`` is Snakemake's help)."""
    argv = snakemake_argv(args)
    sys.stdout.flush()
    os.execv(argv[0], argv)
    return 0  # not reached


def add_parser(sub) -> None:
    p = sub.add_parser("init", help="make a campaign directory with the embedded default "
                                    "config to edit")
    p.add_argument("directory", nargs="?", default=".",
                   help="the campaign directory (default: here)")
    p.set_defaults(func=_init)
    p = sub.add_parser("run", help="snakemake with this package's workflow, in the current "
                                   "directory (any snakemake arguments)")
    # listed for --help: scalesweep.cli.main passes `run`'s arguments to run() unparsed
    p.add_argument("snakemake_args", nargs="*", metavar="SNAKEMAKE_ARG",
                   help="passed to snakemake as they are")
    p.set_defaults(func=lambda args: run(list(args.snakemake_args)))
