"""A campaign's config read outside Snakemake's own run (the CLI), exactly as ``snakemake``
reads it for the same ``--configfile``, ``--config`` and ``--profile`` arguments
(``effective_config``: through ``snakemake.api``, the workflow's configfile directive alone,
``read_config.smk``), then checked (:func:`scalesweep.plan.config.validated`); every
subcommand that reads a campaign's config uses it. Also ``--config`` values re-typed by
the schema (``schema_typed``), as the workflow does before its check.
"""

from __future__ import annotations

import contextlib
import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

import yaml

from scalesweep.plan.config import REPO, ConfigError, one_line, config_schema, validated

SNAKEFILE = REPO / "Snakefile"
# The Snakefile effective_config has Snakemake parse (through snakemake.api): the
# workflow's configfile directive alone (workflow/rules/config.smk).
READ_CONFIG = Path(__file__).resolve().with_name("read_config.smk")
# The workflow's `configfile:` directive (workflow/rules/config.smk), relative to the
# campaign (working) directory: named in messages; tests/workflow/test_config_reading.py checks it.
WORKFLOW_CONFIGFILE = "config/config.yaml"


def load_config(paths: Iterable[str | Path]) -> dict:
    """These files merged in order and validated: not a campaign's reading (use
    ``effective_config`` for that: the workflow's own config, --config, profiles)."""
    from snakemake.utils import update_config  # nested mappings merge, the rest replaces

    config: dict = {}
    for path in paths:
        update_config(config, read_config_file(path))
    return validated(config)


def read_config_file(path: str | Path) -> dict:
    """A config file as Snakemake reads one (JSON, else YAML: scalesweep.plan.
    snakemake_adapter.read_configfile), refused naming the file: missing, neither JSON nor YAML, or not a mapping of
    config keys (Snakemake's own message names no file)."""
    from snakemake.exceptions import WorkflowError

    from scalesweep.platform.snakemake_adapter import read_configfile

    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {path} not found")
    try:
        return read_configfile(path)
    except WorkflowError as exc:
        raise ConfigError(f"config file {path}: {_config_file_problem(path, exc)}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"config file {path}: cannot be read ({exc})") from None


def _config_file_problem(path: Path, exc: Exception) -> str:
    try:
        content = yaml.safe_load(path.read_text())
    except (yaml.YAMLError, OSError, UnicodeDecodeError):
        return one_line(exc)
    if isinstance(content, dict):
        return one_line(exc)
    what = ("empty" if content is None else
            {list: "a list", str: "a string", bool: "a boolean", int: "a number",
             float: "a number"}.get(type(content), f"a {type(content).__name__}"))
    return (f"its content is {what}, not a mapping of config keys (`key: value` lines at "
            "the top level, as in config/config.yaml)")


def _first_detail(exc: Exception) -> str:
    text = str(exc)
    for line in text.splitlines():
        if "Failed validating" in line or "is not" in line or "does not match" in line:
            return line.strip()
    return text.splitlines()[-1].strip() if text else ""


# --- the configuration as Snakemake reads it ---------------------------------------------

def schema_typed(config: dict) -> dict:
    """``config`` with every string the schema does not take as a string read again as
    YAML, in place: the one re-typing of a config, by the workflow (common.smk) and by
    ``effective_config`` alike. --config parses values below the top level with YAML's
    BaseLoader (every scalar a string: `--config sweep='{repeats: 3}'` gives "3"); the
    config holds them merged with the config files, whose strings stay strings wherever
    the schema expects one (a quoted "1" or "" in a --configfile is not turned into 1 or
    None).
    """
    schema = config_schema()
    return _typed(config, schema, schema.get("$defs", {}))


def _typed(value: Any, schema: dict, defs: dict) -> Any:
    while "$ref" in schema:  # local references only: "#/$defs/<name>"
        schema = defs[schema["$ref"].rsplit("/", 1)[1]]
    if isinstance(value, str) and not _takes_string(schema, defs):
        try:
            value = yaml.safe_load(value)
        except yaml.YAMLError:
            return value
    if isinstance(value, dict):
        known, extra = schema.get("properties", {}), schema.get("additionalProperties")
        for key, item in value.items():
            sub = known.get(key, extra)
            if isinstance(sub, dict):
                value[key] = _typed(item, sub, defs)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            value[i] = _typed(item, schema["items"], defs)
    return value


def _takes_string(schema: dict, defs: dict) -> bool:
    while "$ref" in schema:
        schema = defs[schema["$ref"].rsplit("/", 1)[1]]
    if any(_takes_string(s, defs) for s in schema.get("anyOf", schema.get("oneOf", []))):
        return True
    types = schema.get("type")
    if types is None:  # an enum, or anything
        return "enum" not in schema or any(isinstance(v, str) for v in schema["enum"])
    return "string" in ([types] if isinstance(types, str) else types)


@dataclass(frozen=True)
class ConfigSources:
    """What Snakemake reads the config from for one set of command-line arguments, after
    the profiles are applied (``config_sources``)."""

    directory: Path
    configfiles: tuple[Path, ...]  # --configfile, or the profile's configfile:
    config_args: tuple[str, ...]  # --config KEY=VALUE items, or the profile's config:
    replace_workflow_config: bool = False

    @property
    def workflow_configfile(self) -> Path:
        return self.directory / WORKFLOW_CONFIGFILE

    def files(self) -> list[Path]:
        """The files read, in order (the workflow's own first, where it exists and is
        not replaced)."""
        base = self.workflow_configfile
        own = base.exists() and not (self.replace_workflow_config and
                                     (self.configfiles or self.config_args))
        return ([base] if own else []) + list(self.configfiles)

    def describe(self) -> str:
        parts = [str(f) for f in self.files()]
        parts += [f"--config {item}" for item in self.config_args]
        return " + ".join(parts) or "(nothing)"

    def load(self) -> dict:
        """The effective config: Snakemake's reading, the workflow's re-typing of --config
        values, then schema validation with defaults (``validated``)."""
        return validated(self.raw(), self.directory)

    def raw(self) -> dict:
        """The config as the workflow sees it before validation (no defaults): read by
        Snakemake itself, through its API (``snakemake_config``), then re-typed by the
        schema as workflow/rules/common.smk does (``schema_typed``)."""
        from scalesweep.platform.snakemake_adapter import parse_config_items

        base = self.workflow_configfile
        if not base.exists() and not self.configfiles:
            recorded = recorded_configs(self.directory)
            raise ConfigError(
                f"no config: {base} does not exist and no --configfile was given "
                f"(Snakemake: 'Workflow defines configfile {WORKFLOW_CONFIGFILE} but it is "
                "not present or accessible')" + (
                    f"; the configs this campaign ran with are recorded in "
                    f"{recorded[0].parent} (newest: {recorded[0].name})" if recorded else ""))
        for path in list(self.configfiles) + ([base] if base.exists() else []):
            read_config_file(path)  # refused here naming the file: Snakemake names none
        try:
            command_line = parse_config_items(self.config_args)
        except ValueError as exc:
            raise ConfigError(f"--config: {exc}") from None
        return schema_typed(snakemake_config(self.directory, self.configfiles, command_line,
                                             self.replace_workflow_config))


# What workflow/scalesweep/plan/read_config.smk hands over (``receive_config``).
_RECEIVED: list[dict] = []


def receive_config(config: dict) -> None:
    """Called by read_config.smk, while Snakemake parses it, with the config Snakemake read."""
    _RECEIVED.append(copy.deepcopy(dict(config)))


def snakemake_config(directory: str | Path, configfiles: Sequence[str | Path] = (),
                     config: dict | None = None, replace_workflow_config: bool = False) -> dict:
    """The config Snakemake reads for a campaign in ``directory`` with these
    ``--configfile`` files and ``--config`` values, asked through its public API
    (``snakemake.api``): the workflow's own ``configfile:`` directive
    (workflow/rules/config.smk, in read_config.smk) parsed with these ConfigSettings.
    Relative ``configfiles`` are relative to the current directory. Nothing is written
    (no log file); a ``directory`` that does not exist is not made (an empty one stands
    in: it has no config/config.yaml either)."""
    import logging
    import tempfile

    from snakemake.api import ConfigSettings, OutputSettings, ResourceSettings, SnakemakeApi
    from snakemake.exceptions import WorkflowError

    try:
        settings = ConfigSettings(config=dict(config or {}),
                                  configfiles=[Path(f) for f in configfiles],
                                  replace_workflow_config=replace_workflow_config)
    except WorkflowError as exc:
        raise ConfigError(one_line(exc)) from None
    except OSError as exc:  # snakemake opens the file before its own error handling
        raise ConfigError(f"config file {exc.filename} not found: {exc.strerror}") from None
    output = OutputSettings(enable_file_logging=False, log_level_override=logging.WARNING)
    with contextlib.ExitStack() as stack:
        workdir = Path(directory).absolute()
        if not workdir.is_dir():
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        _RECEIVED.clear()
        try:
            with SnakemakeApi(output) as api:
                api.workflow(ResourceSettings(), settings, snakefile=READ_CONFIG,
                             workdir=workdir).list_rules()
        except WorkflowError as exc:
            raise ConfigError(one_line(exc)) from None
        if not _RECEIVED:
            raise ConfigError(f"Snakemake read no config ({READ_CONFIG} was not parsed)")
        return _RECEIVED.pop()


def recorded_configs(directory: str | Path) -> list[Path]:
    """The effective configs the workflow ran with in this campaign, newest first
    (.snakemake/scalesweep/config-<digest>.json, written by common.smk)."""
    found = Path(directory, ".snakemake", "scalesweep").glob("config-*.json")
    return sorted(found, key=lambda f: f.stat().st_mtime, reverse=True)


def config_sources(directory: str | Path = ".", configfiles: Sequence[str | Path] = (),
                   config_args: Sequence[str] = (), profile: str | Path | None = None,
                   snakefile: str | Path = SNAKEFILE) -> ConfigSources:
    """The config files and --config items Snakemake uses for these arguments.

    The arguments go through Snakemake's own command-line parser (scalesweep.plan.
    snakemake_adapter.command_line, with ``-s snakefile``), so profiles are applied
    exactly as Snakemake applies them: the given ``--profile`` (or $SNAKEMAKE_PROFILE),
    and the workflow profile (``profiles/default`` here, or next to the Snakefile). A
    profile's ``config:`` and ``configfile:`` stand for the command-line options, key by
    key: an explicit ``--config`` REPLACES the profile's whole ``config:`` list (it is not
    merged item by item), and an explicit ``--configfile`` replaces its ``configfile:``;
    the workflow profile's keys win over a ``--profile``'s. Relative paths are relative
    to the current directory (as for ``snakemake --directory DIR``), except the
    workflow's own ``config/config.yaml``, which is relative to ``directory``. An empty
    ``config_args`` means no ``--config`` (as if the option were not given).
    """
    from scalesweep.platform.snakemake_adapter import CommandLineError, command_line

    argv = ["--snakefile", str(snakefile)]
    if configfiles:
        argv += ["--configfile", *map(str, configfiles)]
    if config_args:
        argv += ["--config", *map(str, config_args)]
    if profile:
        argv += ["--profile", str(profile)]
    try:
        args = command_line(argv)
    except CommandLineError as exc:
        raise ConfigError(str(exc)) from None
    return ConfigSources(
        directory=Path(directory),
        configfiles=tuple(Path(f) for f in args.configfile or ()),
        config_args=tuple(args.config or ()),
        replace_workflow_config=bool(args.replace_workflow_config),
    )


def effective_config(directory: str | Path = ".", configfiles: Sequence[str | Path] = (),
                     config_args: Sequence[str] = (), profile: str | Path | None = None) -> dict:
    """A campaign's config exactly as ``snakemake --directory DIRECTORY`` reads it with
    these ``--configfile``, ``--config`` and ``--profile`` arguments, then validated with
    the schema's defaults, as the workflow does (workflow/rules/common.smk). Snakemake
    reads it (``snakemake_config``, through snakemake.api):

    1. the workflow's ``configfile: "config/config.yaml"``, relative to ``directory``:
       a missing file is an error unless a ``--configfile`` is given (then it is skipped);
    2. each ``--configfile`` in order, nested mappings merged, anything else replaced;
    3. the ``--config KEY=VALUE`` items (read by Snakemake's command-line parser:
       scalesweep.platform.snakemake_adapter), then re-typed (``schema_typed``), as
       common.smk does;
    4. schema validation with defaults, and the site it names loaded as ``_site``
       (``validated``).

    ``--profile``: see ``config_sources`` (a profile names its sweep with ``configfile:``,
    which an explicit ``--configfile`` replaces; an explicit ``--config`` replaces the
    profile's ``config:`` list). Raises ConfigError, naming the file, key or argument.
    """
    return config_sources(directory, configfiles, config_args, profile).load()
