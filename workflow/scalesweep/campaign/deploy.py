"""``scalesweep init DIR`` and ``scalesweep run [SNAKEMAKE ARGS]``: a campaign from an
installed package (a wheel, not a clone) the way a clone's README runs one.

- ``init`` makes DIR a campaign directory: ``DIR/config/``, a copy of the package's
  config folder (the embedded default ``config.yaml`` to edit, and the site and study
  configs the profiles and ``--configfile`` name: ``config/frontier.yaml``, ...), never
  over an existing ``config.yaml``, and says how to run it.
- ``run`` is ``snakemake`` with the package's Snakefile (``scalesweep.platform.code``:
  the wheel's copy of the tree, or the clone), in the current directory; a ``--profile``
  given by name (``local``, ``frontier``) that is no directory here is the package's own
  (``profiles/<name>``) where the package has one, else Snakemake looks it up as it does
  (~/.config/snakemake, /etc/xdg/snakemake). It replaces this process with Snakemake's
  (``os.execv``: a caller of ``scalesweep.cli.main(["run", ...])`` is replaced too), so
  Ctrl-C, the exit status and the terminal are Snakemake's own.
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
    """DIR/config/ from the package's config folder; refused where DIR/config/config.yaml
    exists (nothing is written then). Files already in DIR/config/ are kept."""
    target = directory / CONFIG
    if target.exists():
        raise UsageError(f"{target} exists: nothing was changed (edit it, or init another "
                         "directory)")
    source = CODE_ROOT / CONFIG.parent
    for path in sorted(source.rglob("*")):
        copy = directory / CONFIG.parent / path.relative_to(source)
        if path.is_dir():
            copy.mkdir(parents=True, exist_ok=True)
        elif not copy.exists():
            copy.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, copy)
    return target


def _is(arg: str, option: str, short: str = "") -> bool:
    """Whether ``arg`` is Snakemake's ``option`` (or an abbreviation argparse takes for
    it, 5 characters or more), with or without "=value", or its ``short`` form (also
    glued to its value: -sFILE)."""
    name = arg.split("=", 1)[0]
    return (len(name) >= 5 and option.startswith(name)) or bool(
        short and arg.startswith(short) and not arg.startswith("--"))


def snakemake_argv(args: list[str], here: Path | None = None) -> list[str]:
    """Snakemake's command line for ``scalesweep run ARGS``: this package's Snakefile, and
    a profile named without a path that is no directory ``here`` taken from its
    profiles/ where it has one."""
    here = Path.cwd() if here is None else here
    if any(_is(a, "--snakefile", "-s") for a in args):
        raise UsageError("scalesweep run gives Snakemake its own Snakefile "
                         f"({CODE_ROOT / 'Snakefile'}); run snakemake itself for another")
    out = []
    i = 0
    while i < len(args):
        arg = args[i]
        if _is(arg, "--profile"):
            name, _, value = arg.partition("=")
            if not _ and i + 1 < len(args):
                i += 1
                value = args[i]
            out += [name, _profile(value, here)] if value else [name]
        else:
            out.append(arg)
        i += 1
    return [sys.executable, "-m", "snakemake", "-s", str(CODE_ROOT / "Snakefile"), *out]


def _profile(value: str, here: Path) -> str:
    """A profile named without a path: the package's where it has one (and ``here`` has no
    directory of that name), else as given (Snakemake's own lookup)."""
    if "/" in value or (here / value).is_dir() or not (PROFILES_DIR / value).is_dir():
        return value
    return str(PROFILES_DIR / value)


def _init(args) -> int:
    directory = Path(args.directory)
    target = init(directory)
    print(f"{target}: the embedded default to edit (every key: {CODE_ROOT}/workflow/"
          "schemas/config.schema.yaml), beside the site and study configs the profiles "
          f"name. Then, in {directory}:\n"
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
