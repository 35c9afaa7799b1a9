"""Load a scalesweep config outside Snakemake (the CLI), validated by the same schema.

``effective_config`` reads a campaign's config exactly as ``snakemake`` does for the same
``--configfile``, ``--config`` and ``--profile`` arguments (see its docstring); every
subcommand that reads a campaign's config uses it.
"""

from __future__ import annotations

import contextlib
import copy
import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

import yaml

REPO = Path(__file__).resolve().parents[2]
SCHEMA = Path(__file__).resolve().parents[1] / "schemas" / "config.schema.yaml"
SNAKEFILE = REPO / "Snakefile"
# The Snakefile's `configfile:` directive, relative to the campaign (working) directory.
# tests/test_config_reading.py checks that the Snakefile still says so.
WORKFLOW_CONFIGFILE = "config/config.yaml"


class ConfigError(ValueError):
    """The config does not validate; the message names the key and the bad value."""


def merge(base: dict, override: dict) -> dict:
    """Snakemake's --configfile/--config semantics: nested mappings merge, the rest replaces."""
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            merge(base[key], value)
        else:
            base[key] = value
    return base


def schema_errors(config: dict) -> list[str]:
    """Every schema violation as 'key.path: message', naming the key and the bad value."""
    import jsonschema

    schema = yaml.safe_load(SCHEMA.read_text())
    validator = jsonschema.Draft202012Validator(schema)
    out = []
    for err in sorted(validator.iter_errors(config), key=lambda e: list(map(str, e.absolute_path))):
        key = ".".join(str(p) for p in err.absolute_path) or "(top level)"
        out.append(f"config key {key}: {err.message}")
    return out


def check_config(config: dict) -> None:
    errors = schema_errors(config)
    if errors:
        raise ConfigError("; ".join(errors[:5]) + (f" (and {len(errors) - 5} more)" if len(errors) > 5 else ""))


def load_config(paths: Iterable[str | Path]) -> dict:
    """These files merged in order and validated: not a campaign's reading (use
    ``effective_config`` for that: the workflow's own config, --config, profiles)."""
    config: dict = {}
    for path in paths:
        path = Path(path)
        if not path.is_file():
            raise ConfigError(f"config file {path} not found")
        merge(config, yaml.safe_load(path.read_text()) or {})
    return validated(config)


def _first_detail(exc: Exception) -> str:
    text = str(exc)
    for line in text.splitlines():
        if "Failed validating" in line or "is not" in line or "does not match" in line:
            return line.strip()
    return text.splitlines()[-1].strip() if text else ""


# --- the configuration as Snakemake reads it ---------------------------------------------

def typed_values(value: Any) -> Any:
    """--config parses nested values with YAML's BaseLoader (every scalar a string):
    re-read them with the safe loader so `--config sweep='{repeats: 3}'` gives an int.
    The workflow (workflow/rules/common.smk) applies it to the --config values only:
    --configfile values are typed YAML already, and re-reading them would turn a quoted
    "1" into 1 or "" into None.
    """
    if isinstance(value, dict):
        return {k: typed_values(v) for k, v in value.items()}
    if isinstance(value, list):
        return [typed_values(v) for v in value]
    if isinstance(value, str):
        try:
            return yaml.safe_load(value)
        except yaml.YAMLError:
            return value
    return value


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
        return validated(self.raw())

    def raw(self) -> dict:
        """The config as the workflow sees it before validation (no defaults)."""
        from snakemake.cli import parse_config
        from snakemake.exceptions import WorkflowError
        from snakemake.settings.types import ConfigSettings
        from snakemake.utils import update_config

        try:
            command_line = parse_config(list(self.config_args))
        except ValueError as exc:
            raise ConfigError(f"--config: {exc}") from None
        try:
            settings = ConfigSettings(config=command_line, configfiles=list(self.configfiles),
                                      replace_workflow_config=self.replace_workflow_config)
        except WorkflowError as exc:
            raise ConfigError(_one_line(exc)) from None
        except OSError as exc:  # snakemake opens the file before its own error handling
            raise ConfigError(f"config file {exc.filename} not found: {exc.strerror}") from None
        overwrite = settings.overwrite_config
        # snakemake.workflow.Workflow: config starts as the command line's, then the
        # configfile: directive (Workflow.configfile) reads the workflow's file, if it
        # exists, and applies the command line over it again.
        config = copy.deepcopy(overwrite)
        base = self.workflow_configfile
        if base.exists():
            config = _merged_directive(config, base, overwrite, self.replace_workflow_config)
        elif not self.configfiles:
            recorded = recorded_configs(self.directory)
            raise ConfigError(
                f"no config: {base} does not exist and no --configfile was given "
                f"(Snakemake: 'Workflow defines configfile {WORKFLOW_CONFIGFILE} but it is "
                "not present or accessible')" + (
                    f"; the configs this campaign ran with are recorded in "
                    f"{recorded[0].parent} (newest: {recorded[0].name})" if recorded else ""))
        else:
            update_config(config, overwrite)
        # workflow/rules/common.smk: the --config values again, re-typed
        update_config(config, typed_values(dict(command_line)))
        return config


def _merged_directive(config: dict, path: Path, overwrite: dict, replace: bool) -> dict:
    from snakemake.common.configfile import load_configfile
    from snakemake.exceptions import WorkflowError
    from snakemake.utils import update_config

    try:
        update_config(config, load_configfile(str(path)))
    except WorkflowError as exc:
        raise ConfigError(f"{path}: {_one_line(exc)}") from None
    if overwrite:
        if replace:
            config = {}
        update_config(config, overwrite)
    return config


def recorded_configs(directory: str | Path) -> list[Path]:
    """The effective configs the workflow ran with in this campaign, newest first
    (.snakemake/scalesweep/config-<digest>.json, written by common.smk)."""
    found = Path(directory, ".snakemake", "scalesweep").glob("config-*.json")
    return sorted(found, key=lambda f: f.stat().st_mtime, reverse=True)


def config_sources(directory: str | Path = ".", configfiles: Sequence[str | Path] = (),
                   config_args: Sequence[str] = (), profile: str | Path | None = None,
                   snakefile: str | Path = SNAKEFILE) -> ConfigSources:
    """The config files and --config items Snakemake uses for these arguments.

    The arguments go through Snakemake's own command-line parser (snakemake.cli.
    parse_args, with ``-s snakefile``), so profiles are applied exactly as Snakemake
    applies them: the given ``--profile`` (or $SNAKEMAKE_PROFILE), and the workflow
    profile (``profiles/default`` here, or next to the Snakefile). A profile's ``config:``
    and ``configfile:`` stand for the command-line options, key by key: an explicit
    ``--config`` REPLACES the profile's whole ``config:`` list (it is not merged item by
    item), and an explicit ``--configfile`` replaces its ``configfile:``; the workflow
    profile's keys win over a ``--profile``'s. Relative paths are relative to the
    current directory (as for ``snakemake --directory DIR``), except the workflow's own
    ``config/config.yaml``, which is relative to ``directory``. An empty ``config_args``
    means no ``--config`` (as if the option were not given).
    """
    from snakemake.cli import parse_args

    argv = ["--snakefile", str(snakefile)]
    if configfiles:
        argv += ["--configfile", *map(str, configfiles)]
    if config_args:
        argv += ["--config", *map(str, config_args)]
    if profile:
        argv += ["--profile", str(profile)]
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(err):
            _, args = parse_args(argv)
    except SystemExit:
        lines = [line for line in err.getvalue().splitlines() if line.strip()
                 and not line.startswith(("usage:", "Using "))]
        raise ConfigError(lines[-1] if lines else "Snakemake refused the arguments") from None
    except Exception as exc:  # CliException, a profile Snakemake cannot read
        raise ConfigError(_one_line(exc)) from None
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
    the schema's defaults, as the workflow does (workflow/rules/common.smk):

    1. the Snakefile's ``configfile: "config/config.yaml"``, relative to ``directory``:
       a missing file is an error unless a ``--configfile`` is given (then it is skipped);
    2. each ``--configfile`` in order, nested mappings merged, anything else replaced;
    3. the ``--config KEY=VALUE`` items, parsed by Snakemake's own parser
       (snakemake.cli.parse_config), applied again re-typed (``typed_values``), as
       common.smk does;
    4. schema validation with defaults (``validated``).

    ``--profile``: see ``config_sources`` (an explicit ``--config`` replaces the profile's
    ``config:`` list). Raises ConfigError, naming the file, key or argument.
    """
    return config_sources(directory, configfiles, config_args, profile).load()


def validated(config: dict) -> dict:
    """``config`` checked against the schema, defaults filled in (in place)."""
    from snakemake.exceptions import WorkflowError
    from snakemake.utils import validate

    check_config(config)
    try:
        validate(config, str(SCHEMA), set_default=True)
    except WorkflowError as exc:
        raise ConfigError(str(exc).splitlines()[0] + ": " + _first_detail(exc)) from None
    return config


def _one_line(exc: Exception) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return " ".join(lines[:2]) if lines else type(exc).__name__
