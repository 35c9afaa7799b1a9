"""The one module of the package that calls Snakemake beyond its public interface.

Everything else in scalesweep uses only ``snakemake.api`` (the API: ``SnakemakeApi`` and
the settings it takes), ``snakemake.utils`` and ``snakemake.exceptions``
(tests/test_public_api.py keeps it so). What the public API does not offer lives here,
each call a thin wrapper naming the internal it uses:

- ``parse_config_items``: a ``--config KEY=VALUE`` list read as Snakemake's command line
  reads it (``snakemake.cli.parse_config``: int, float, bool, then YAML's BaseLoader);
  the API takes the config as values, the user gives text.
- ``command_line``: a ``snakemake`` command line read by Snakemake's own parser
  (``snakemake.cli.parse_args``), its profiles applied (``--profile``,
  ``$SNAKEMAKE_PROFILE``, the workflow profile): the API knows no profiles.
- ``default_resources``: the ``--default-resources`` of such a command line (a profile's
  included), each as its expression, unevaluated (``snakemake.resources.Resources.args``).
- ``read_configfile``: one config file as Snakemake reads it
  (``snakemake.common.configfile.load_configfile``: JSON, else YAML), to name a file that
  Snakemake refuses (its own message names none).

``PINNED`` is the Snakemake release these were read against (pyproject.toml pins it);
tests/test_snakemake_adapter.py checks the installed release and every internal name
below, so that a Snakemake upgrade fails there, by name, instead of somewhere else.
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path
from typing import Any, Sequence

PINNED = "9.27.1"

# The internals used, module -> names: what tests/test_snakemake_adapter.py checks.
INTERNALS = {
    "snakemake.cli": ("parse_config", "parse_args"),
    "snakemake.common.configfile": ("load_configfile",),
}
# Attributes of what they return, class -> names (checked there too).
ATTRIBUTES = {"snakemake.resources.Resources": ("args",)}


class CommandLineError(ValueError):
    """Snakemake refused a command line; the message is its own last line."""


def parse_config_items(items: Sequence[str]) -> dict:
    """``--config`` items as Snakemake reads them (``snakemake.cli.parse_config``).
    Raises ValueError with Snakemake's message ("Invalid config definition: ...")."""
    from snakemake.cli import parse_config

    return parse_config([str(i) for i in items])


def command_line(argv: Sequence[str]) -> Any:
    """The ``snakemake`` command line ``argv`` as Snakemake reads it, its profiles applied
    (``snakemake.cli.parse_args``; an argparse namespace: ``.configfile``, ``.config``,
    ``.replace_workflow_config``, ``.default_resources``, ``.executor`` ...). What Snakemake
    prints meanwhile (the profiles it uses) is swallowed. Raises CommandLineError."""
    from snakemake.cli import parse_args

    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(err):
            return parse_args([str(a) for a in argv])[1]
    except SystemExit:
        lines = [line for line in err.getvalue().splitlines() if line.strip()
                 and not line.startswith(("usage:", "Using "))]
        raise CommandLineError(lines[-1] if lines else "Snakemake refused the arguments") from None
    except Exception as exc:  # CliException, a profile Snakemake cannot read
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        raise CommandLineError(" ".join(lines[:2]) if lines else type(exc).__name__) from None


def read_configfile(path: str | Path) -> dict:
    """One config file as Snakemake reads it (``load_configfile``). Raises Snakemake's
    WorkflowError (not a mapping, neither JSON nor YAML), or OSError."""
    from snakemake.common.configfile import load_configfile

    return load_configfile(str(path))


def default_resources(args: Any) -> dict[str, str]:
    """name -> expression of the default resources of a command line read by
    ``command_line`` (a profile's ``default-resources:`` and ``--default-resources``), as
    given, unevaluated (``'$SBATCH_ACCOUNT'``); {} where it names none."""
    resources = getattr(args, "default_resources", None)
    return dict(arg.split("=", 1) for arg in getattr(resources, "args", None) or ())
