"""The one module of the package that calls Snakemake, or snakemake-executor-plugin-slurm,
beyond its public interface. In ``platform``, so that any layer above may use it.

Everything else in scalesweep uses only ``snakemake.api`` (the API: ``SnakemakeApi`` and
the settings it takes), ``snakemake.utils`` and ``snakemake.exceptions``
(tests/unit/test_public_api.py keeps it so). What the public API does not offer lives here,
each call a thin wrapper naming the internal it uses:

- ``parse_config_items``: a ``--config KEY=VALUE`` list read as Snakemake's command line
  reads it (``snakemake.cli.parse_config``: int, float, bool, then YAML's BaseLoader);
  the API takes the config as values, the user gives text.
- ``command_line``: a ``snakemake`` command line read by Snakemake's own parser
  (``snakemake.cli.parse_args``), its profiles applied (``--profile``,
  ``$SNAKEMAKE_PROFILE``, the workflow profile): the API knows no profiles.
- ``default_resources``: the ``--default-resources`` of such a command line (a profile's
  included), each as its expression, unevaluated (``snakemake.resources.Resources.args``).
- ``parse_args``: the same reading, raw (the caller handles what Snakemake prints and raises).
- ``snakefile_choices``: where Snakemake looks for a Snakefile (``snakemake.common.SNAKEFILE_CHOICES``).
- ``forbidden_slurm_options``: the ``slurm_extra`` options the plugin refuses
  (``snakemake_executor_plugin_slurm.validation.get_forbidden_slurm_options``; it checks again
  at submission).
- ``executor_settings``: the plugin's settings (``--slurm-*``) of a command line, made by its
  registry entry as Snakemake makes them (``ExecutorPluginRegistry``).
- ``release_rate_timers_at_exit``: no internal, but Snakemake's behaviour: its job-rate
  limiter re-runs the scheduler through ``threading.Timer`` threads (one started per
  scheduling pass, ``--max-jobs-per-timespan``'s timespan long, not daemons), so the
  interpreter waits for the last one before it exits.
- ``env_modules_deployed``, ``env_modules_shellcmd``: whether a command line deploys
  environment modules (``--sdm env-modules`` or ``--use-envmodules``: the method's name,
  ``snakemake.settings.types.DeploymentMethod``), and the shell line Snakemake then runs
  a rule with ``envmodules:`` under (``snakemake.deployment.env_modules.EnvModules``).
- ``read_configfile``: one config file as Snakemake reads it
  (``snakemake.common.configfile.load_configfile``: JSON, else YAML), to name a file that
  Snakemake refuses (its own message names none).

``PINNED`` and ``PLUGIN_VERSION`` are the Snakemake and plugin releases these were read
against (pyproject.toml pins both); tests/unit/test_snakemake_adapter.py checks the installed
releases and every internal name below, so that an upgrade fails there, by name, instead of
somewhere else. Everything is imported inside the functions: the package imports without
Snakemake (the payloads, ``scalesweep build-image``).
"""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path
from typing import Any, Sequence

PINNED = "9.27.1"
PLUGIN = "snakemake-executor-plugin-slurm"
PLUGIN_VERSION = "2.8.0"  # its get_submit_command renders run.slurm.sbatch_options' line

# The internals used, module -> names: what tests/unit/test_snakemake_adapter.py checks.
INTERNALS = {
    "snakemake.cli": ("parse_config", "parse_args"),
    "snakemake.common": ("SNAKEFILE_CHOICES",),
    "snakemake.common.configfile": ("load_configfile",),
    "snakemake.deployment.env_modules": ("EnvModules",),
    "snakemake.settings.types": ("DeploymentMethod",),
    "snakemake_executor_plugin_slurm.submit_string": ("get_submit_command",),
    "snakemake_executor_plugin_slurm.utils": ("set_gres_string",),
    "snakemake_executor_plugin_slurm.validation": ("get_forbidden_slurm_options",),
    "snakemake_interface_executor_plugins.registry": ("ExecutorPluginRegistry",),
}
# Attributes of what they return, class -> names (checked there too).
ATTRIBUTES = {"snakemake.resources.Resources": ("args",)}


_releasing: list = []


def release_rate_timers_at_exit() -> None:
    """Let the process exit at once when its main thread ends, not a timespan later.

    Snakemake's scheduler starts a ``threading.Timer`` of the job-rate limiter's timespan on
    every scheduling pass, and every timer that fires makes one more pass: each job event
    adds such a chain, and at the default ``100/1s`` a campaign's main process grew from 5
    to 48 threads and ~4% of a core beside the measurements (BENCHMARKS.md section 8).
    ``profiles/local`` lengthens the timespan to a minute (the chains then wake 60 times
    less often); the interpreter would then wait up to that minute for the last timer when
    the workflow ends (``threading._shutdown`` joins every non-daemon thread), so a daemon
    thread waits for the main thread to end and cancels the timers left. Public Python
    API only (``Thread.join``, ``Timer.cancel``); idempotent."""
    import threading

    if _releasing:
        return

    def release() -> None:
        threading.main_thread().join()
        for thread in threading.enumerate():
            if isinstance(thread, threading.Timer):
                thread.cancel()

    _releasing.append(threading.Thread(target=release, name="scalesweep-release-timers",
                                       daemon=True))
    _releasing[0].start()


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


def parse_args(argv: Sequence[str]) -> Any:
    """Snakemake's reading of a command line (its ``args`` namespace, profiles applied), raw:
    raises what Snakemake raises (SystemExit on a bad line) and prints what it prints."""
    from snakemake.cli import parse_args as snakemake_parse_args

    return snakemake_parse_args(list(argv))[1]


def env_modules_deployed(args: Any) -> bool:
    """Does the command line ``args`` (``parse_args``) deploy environment modules?"""
    from snakemake.settings.types import DeploymentMethod

    methods = getattr(args, "software_deployment_method", None) or ()
    return (DeploymentMethod.ENV_MODULES in methods
            or bool(getattr(args, "use_envmodules", False)))


def env_modules_shellcmd(modules: Sequence[str], cmd: str) -> str:
    """``cmd`` as Snakemake runs it for a rule with ``envmodules: *modules`` (module purge,
    then module load)."""
    from snakemake.deployment.env_modules import EnvModules

    return EnvModules(*modules).shellcmd(cmd)


def snakefile_choices() -> list[str]:
    """The paths Snakemake tries, in order, when no ``--snakefile`` is given."""
    from snakemake.common import SNAKEFILE_CHOICES

    return list(SNAKEFILE_CHOICES)


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


def executor_settings(args: Any, executor: str = "slurm") -> Any:
    """The executor plugin's settings of ``args``, made by its registry entry as Snakemake
    makes them; raises what the plugin raises on a setting it refuses."""
    from snakemake_interface_executor_plugins.registry import ExecutorPluginRegistry

    return ExecutorPluginRegistry().get_plugin(executor).get_settings(args)


class _JobResources(dict):
    """A job's evaluated resources as the plugin reads them (Snakemake's job.resources):
    ``.get()`` and attribute access."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


# a shell word: unquoted text, '...' and "..." parts, side by side
_WORD = re.compile(r"""(?:[^\s'"]+|'[^']*'|"[^"]*")+""")
# what get_submit_command puts first, for every job: the plugin's own, never the job's
_SUBMIT_HEAD = ("sbatch", "--parsable", "--job-name", "J", "--output", "O", "--export=ALL",
                "--comment", "C")


def plugin_sbatch_options(resources: dict, threads: int, settings: Any, account: str,
                          partition: str) -> str:
    """The options the Slurm plugin's own ``get_submit_command`` and ``set_gres_string``
    (the two calls of its ``run_job``) put on the sbatch line of a job with these
    evaluated ``resources`` and ``threads``, its ``settings`` (ExecutorSettings, or None)
    and the account and partition arguments its executor would pass (" -A 'x'", " -p y",
    or ""), whitespace normalised; without its own options (--parsable, --job-name,
    --output, --export=ALL, --comment) and -D <workdir>. The nodes of
    ``--slurm-exclude-failed-nodes`` are excluded, sorted. Raises what the plugin raises
    (an MPI job without tasks, a nodes value it refuses)."""
    from types import SimpleNamespace

    from snakemake_executor_plugin_slurm.submit_string import get_submit_command
    from snakemake_executor_plugin_slurm.utils import set_gres_string

    job = SimpleNamespace(resources=_JobResources(resources), threads=threads)
    params = {"run_uuid": "J", "slurm_logfile": "O", "comment_str": "C", "account": account,
              "partition": partition, "workdir": ""}
    failed = sorted({n.strip() for n in (getattr(settings, "exclude_failed_nodes", None)
                                          or "").split(",") if n.strip()})
    call = get_submit_command(job, params, settings=settings, failed_nodes=failed)
    # its words as it wrote them (quoted parts kept whole): a quoted value keeps its quotes
    words = _WORD.findall(call + set_gres_string(job))
    assert tuple(words[:len(_SUBMIT_HEAD)]) == _SUBMIT_HEAD, call
    return " ".join(words[len(_SUBMIT_HEAD):])
