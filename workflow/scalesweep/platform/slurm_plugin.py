"""The one module that calls into Snakemake's and snakemake-executor-plugin-slurm's
internals (issue #28). In ``platform``, so any layer above may use it: what the rest of the package needs from them and their public API
does not offer, each behind one function here. ``PLUGIN_VERSION`` is the plugin release
these were read from; ``USED`` names every internal reached, and
``tests/test_slurm_plugin.py`` fails, naming it, when the installed versions differ or a
name is gone. Everything is imported inside the functions: the package imports without
Snakemake (the payloads, ``scalesweep build-image``).

* ``snakemake_executor_plugin_slurm.validation.get_forbidden_slurm_options``: the
  ``slurm_extra`` options the plugin refuses (it checks again at submission).
* ``snakemake.common.SNAKEFILE_CHOICES``: where Snakemake looks for a Snakefile.
* ``snakemake.cli.parse_args``: a command line read as Snakemake reads it (profiles
  applied); ``snakemake.cli.parse_config``: the items of a ``--config``.
* ``snakemake_interface_executor_plugins.registry.ExecutorPluginRegistry``: the plugin's
  settings (``--slurm-*``), made as Snakemake makes them.
"""

from __future__ import annotations

from typing import Any, Sequence

PLUGIN = "snakemake-executor-plugin-slurm"
PLUGIN_VERSION = "2.8.0"  # pyproject.toml pins it; sbatch_options (run.slurm) renders its line
# module -> the names of it used here
USED = {
    "snakemake_executor_plugin_slurm.validation": ("get_forbidden_slurm_options",),
    "snakemake.common": ("SNAKEFILE_CHOICES",),
    "snakemake.cli": ("parse_args", "parse_config"),
    "snakemake_interface_executor_plugins.registry": ("ExecutorPluginRegistry",),
}


def installed_version(distribution: str = PLUGIN) -> str | None:
    """The installed version of ``distribution`` (None: not installed)."""
    from importlib import metadata

    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def forbidden_slurm_options() -> dict[str, str]:
    """The plugin's refused ``slurm_extra`` options: {regular expression: what it sets};
    {} without the plugin."""
    try:
        from snakemake_executor_plugin_slurm.validation import get_forbidden_slurm_options
    except ImportError:
        return {}
    return dict(get_forbidden_slurm_options())


def snakefile_choices() -> list[str]:
    """The paths Snakemake tries, in order, when no ``--snakefile`` is given."""
    from snakemake.common import SNAKEFILE_CHOICES

    return list(SNAKEFILE_CHOICES)


def parse_args(argv: Sequence[str]) -> Any:
    """Snakemake's reading of a command line (its ``args`` namespace, profiles applied);
    raises what Snakemake raises (SystemExit on a bad line)."""
    from snakemake.cli import parse_args as snakemake_parse_args

    return snakemake_parse_args(list(argv))[1]


def parse_config(items: Sequence[str]) -> dict:
    """Snakemake's reading of ``--config`` items (KEY=VALUE, YAML values); raises
    ValueError on an item it cannot read."""
    from snakemake.cli import parse_config as snakemake_parse_config

    return snakemake_parse_config(list(items))


def executor_settings(args: Any, executor: str = "slurm") -> Any:
    """The executor plugin's settings of ``args``, made by its registry entry as Snakemake
    makes them; raises what the plugin raises on a setting it refuses."""
    from snakemake_interface_executor_plugins.registry import ExecutorPluginRegistry

    return ExecutorPluginRegistry().get_plugin(executor).get_settings(args)
