"""Load a scalesweep config outside Snakemake (the CLI), validated by the same schema.

``effective_config`` reads a campaign's config exactly as ``snakemake`` does for the same
``--configfile``, ``--config`` and ``--profile`` arguments (see its docstring); every
subcommand that reads a campaign's config uses it.
"""

from __future__ import annotations

import contextlib
import copy
import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

import yaml

from scalesweep.plan.kinds.base import check_kinds
from scalesweep.plan.payload_scripts import llm_engines, model_context, payload_script

REPO = Path(__file__).resolve().parents[3]
SCHEMA = Path(__file__).resolve().parents[2] / "schemas" / "config.schema.yaml"
SNAKEFILE = REPO / "Snakefile"
# The Snakefile effective_config has Snakemake parse (through snakemake.api): the
# workflow's configfile directive alone (workflow/rules/config.smk).
READ_CONFIG = Path(__file__).resolve().with_name("read_config.smk")
# The workflow's `configfile:` directive (workflow/rules/config.smk), relative to the
# campaign (working) directory: named in messages; tests/workflow/test_config_reading.py checks it.
WORKFLOW_CONFIGFILE = "config/config.yaml"


class ConfigError(ValueError):
    """The config does not validate; the message names the key and the bad value."""


@functools.cache
def _schema() -> dict:
    """The config schema, read once; read-only (``validated`` fills defaults from a copy
    of its own)."""
    return yaml.safe_load(SCHEMA.read_text())


def schema_errors(config: dict) -> list[str]:
    """Every schema violation as 'key.path: message', naming the key and the bad value."""
    import jsonschema

    validator = jsonschema.Draft202012Validator(_schema())
    out = []
    for err in sorted(validator.iter_errors(config), key=lambda e: list(map(str, e.absolute_path))):
        key = ".".join(str(p) for p in err.absolute_path) or "(top level)"
        out.append(f"config key {key}: {err.message}")
    return out


# Keys that left the config for the site file (issue #17), and where they went.
MOVED = {
    ("machine",): "moved to a site file: name it with `site: <name>` (sites/*.yaml)",
    ("containers", "site"): "moved to a site file's `runtimes:` (sites/*.yaml): name the "
                            "site with `site: <name>`",
    ("containers", "build_args"): "moved to a site file's `build_args:` (sites/*.yaml): "
                                  "name the site with `site: <name>`",
    # one image per campaign -> images by name, each workload naming its own (issue #18)
    **{("containers", key): f"moved to containers.images.<name>.{key} (images by name; "
                            "`containers.image` names the default one, "
                            "`workloads.<name>.image` a workload's own)"
       for key in ("builder", "recipe", "requirements", "prebuilt", "format", "fakeroot")},
}


def moved_keys(config: dict) -> list[str]:
    """An error for each key of ``config`` that moved to the site file."""
    out = []
    for path, where in MOVED.items():
        node: Any = config
        for key in path:
            node = node.get(key) if isinstance(node, dict) else None
        if node is not None:
            out.append(f"config key {'.'.join(path)}: {where}")
    datasets = config.get("datasets")
    for name, ds in (datasets.items() if isinstance(datasets, dict) else ()):
        path = ds.get("node_local") if isinstance(ds, dict) else None
        if isinstance(path, str) and path.lower() not in ("true", "false", ""):
            out.append(f"config key datasets.{name}.node_local: the node-local path is the "
                       "site's (its site file's storage.node_local_path, sites/*.yaml): set "
                       f"`node_local: true` (it was {path!r})")
    return out


def check_node_local(config: dict) -> None:
    """A dataset copied node-local (``node_local: true``) needs the site's node-local
    storage (its site file's ``storage.node_local_path``)."""
    from scalesweep.platform.site import site_of

    site = site_of(config)
    for name, ds in sorted((config.get("datasets") or {}).items()):
        if ds.get("node_local") and not site["storage"]["node_local_path"]:
            raise ConfigError(
                f"config key datasets.{name}.node_local: site {site['name']!r} has no "
                "node-local storage (its site file states no storage.node_local_path): "
                "state it there, or read the dataset in place (node_local: false)")


def check_config(config: dict, directory: str | Path = ".") -> None:
    """The one validation of a config, in place, before any job: keys that moved to the
    site file, the schema (defaults filled in; a violation raises ConfigError naming the
    key and the value), the site it names loaded once into ``config["_site"]``, then what
    the schema cannot say: runtimes the site offers, engines that can run the workloads.

    A ``site:`` path is relative to the repository, like every path in the config.
    The workflow calls this while it is parsed (workflow/rules/common.smk), in the
    campaign ``directory``.
    """
    from snakemake.exceptions import WorkflowError
    from snakemake.utils import validate

    from scalesweep.platform.site import SITE_KEY, SiteError, load_site

    errors = moved_keys(config)
    if not errors:
        try:
            validate(config, str(SCHEMA), set_default=True)
        except WorkflowError as exc:
            errors = schema_errors(config) or [str(exc).splitlines()[0] + ": " + _first_detail(exc)]
    if errors:
        raise ConfigError("; ".join(errors[:5]) + (f" (and {len(errors) - 5} more)" if len(errors) > 5 else ""))
    check_kinds(config, ConfigError)  # the registry's kinds: the schema lists none
    try:
        config[SITE_KEY] = load_site(config["site"], base=REPO)
    except SiteError as exc:
        raise ConfigError(f"config key site: {exc}") from None
    check_node_local(config)
    check_dataset_sources(config, directory)
    check_runtimes(config)
    check_images(config)
    check_engines(config)
    check_payload_bounds(config, directory)


def check_dataset_sources(config: dict, directory: str | Path = ".") -> None:
    """The source (``datasets.<name>.path``) of every dataset a workload trains on exists
    where staging will read it, before any job: on a site without a scheduler every job
    runs on this host, so it must be here (relative paths: to the campaign ``directory``,
    where the staging job runs). On a Slurm site staging is a Slurm job and the path is the
    cluster's (a Frontier campaign is planned anywhere, e.g. with `snakemake -n`): the
    staging job refuses it there, naming it, before any point runs. A dataset the campaign
    has staged already (``resources/datasets/<name>``) does not read its source again;
    a synthetic one reads none."""
    from scalesweep.record.dataset import STAGED_DIR
    from scalesweep.platform.site import site_of
    from scalesweep.plan.sweep import Selection, enabled_workloads

    site = site_of(config)
    if site["scheduler"] != "none":
        return
    datasets = config.get("datasets") or {}
    chosen = Selection.of(config).workloads  # only: {workloads: [...]}: the others stage nothing
    used = {config["workloads"][w].get("dataset") for w in enabled_workloads(config)
            if _kind(config["workloads"][w]).stages_dataset and (chosen is None or w in chosen)}
    for name in sorted(n for n in used if n in datasets):
        ds = datasets[name]
        if ds["source"] == "synthetic" or Path(directory, STAGED_DIR, name).is_dir():
            continue
        path = Path(directory, ds["path"])
        wanted = "file" if ds["source"] == "image-archive" else "directory"
        if path.is_file() if wanted == "file" else path.is_dir():
            continue
        found = ("does not exist" if not path.exists() else f"is not a {wanted}")
        hint = {"fashion-mnist": "install Debian's dataset-fashion-mnist (apt-get install "
                                 "dataset-fashion-mnist) or name the directory of its idx files",
                "image-folder": "name the directory of its <class>/ folders",
                "image-archive": "name the archive file"}[ds["source"]]
        if ds["path"].startswith("~"):
            hint = "'~' is not expanded here: give the path in full"
        raise ConfigError(
            f"config key datasets.{name}.path: {ds['path']!r} {found} on this host, where site "
            f"{site['name']!r} (no scheduler) stages it (source {ds['source']}): {hint}")


def check_images(config: dict) -> None:
    """Every image a workload's container points run exists, can be built or pulled by
    a builder the site offers, and is of a format those runtimes run."""
    from scalesweep.plan.imageset import ImageConfigError
    from scalesweep.plan.imageset import check_images as check
    from scalesweep.plan.sweep import enabled_workloads, workload_axes, workload_runtimes

    workloads = [w for w in enabled_workloads(config) if "runtimes" in workload_axes(config, w)]
    try:
        check(config, workloads, lambda w: workload_runtimes(config, w))
    except ImageConfigError as exc:
        raise ConfigError(f"config key {exc}") from None


def check_runtimes(config: dict) -> None:
    """Every runtime a workload compares is known and offered by the site."""
    from scalesweep.platform.launch import LaunchError
    from scalesweep.platform.runtimes import runtime

    for i, name in enumerate((config.get("only") or {}).get("runtimes") or []):
        try:  # the selection's names are the registry's (the sweep's are checked below)
            runtime(name)
        except LaunchError as exc:
            raise ConfigError(f"config key only.runtimes.{i}: {exc}") from None
    try:
        offered_runtimes(config)
    except LaunchError as exc:
        key = "" if str(exc).startswith("containers.") else "sweep.runtimes: "
        raise ConfigError(f"config key {key}{exc}") from None


def offered_runtimes(config: dict) -> None:
    """Refuse, before any job, a campaign that asks for a runtime that is unknown or that
    its site does not offer (no ``runtimes.<name>`` in the site file; native always is).
    Raises :class:`~scalesweep.platform.runtimes.UnknownRuntime` or
    :class:`~scalesweep.platform.runtimes.RuntimeNotOffered` naming runtime and site."""
    from scalesweep.platform.runtimes import LaunchError, RuntimeNotOffered, runtime
    from scalesweep.platform.site import site_of
    from scalesweep.plan.sweep import enabled_workloads, workload_axes, workload_runtimes

    site = site_of(config)
    wanted: list[str] = []
    for name in enabled_workloads(config):
        if "runtimes" not in workload_axes(config, name):
            continue  # sweep_points names the missing axis
        wanted += [rt for rt in workload_runtimes(config, name) if rt not in wanted]
    for name in wanted:
        rt = runtime(name)
        rt.check_offered(site)  # the runtime, and its mode (runtimes.<name>.modes)
        if rt.host_mpi:  # a host-MPI mode needs the host's MPI named in the site file
            try:
                rt.container_env(rt.site_facts(site))
            except LaunchError as exc:
                raise RuntimeNotOffered(f"site {site.get('name', '?')!r}: {exc}") from None


def _kind(wl: dict):
    """The kind a workload's ``payload`` names (scalesweep.plan.kinds); one declaring
    nothing where it names none the registry knows (the schema reports that)."""
    from scalesweep.plan.kinds import SweepError, WorkloadKind, kind_of

    try:
        return kind_of(wl)
    except SweepError:
        return WorkloadKind()


def check_payload_bounds(config: dict, directory: str | Path = ".") -> None:
    """What the schema cannot bound alone, before any job: an LLM workload's max_tokens
    against the context its model runs with (a request stops at the context, and a
    "length" finish there is not max_tokens), a CNN's image size against the smallest the
    network takes (scripts/train_cnn.py)."""
    from scalesweep.plan.sweep import enabled_workloads

    for name in enabled_workloads(config):
        wl, key = config["workloads"][name], f"config key workloads.{name}"
        kind = _kind(wl)
        if kind.stages_dataset and wl.get("dataset") in config.get("datasets", {}):
            size = config["datasets"][wl["dataset"]]["image_size"]
            least = payload_script(Path(kind.script).stem).MIN_IMAGE_SIZE
            if size < least:
                raise ConfigError(f"config key datasets.{wl['dataset']}.image_size: {size} is too small for "
                                  f"workload {name}'s CNN, which takes images of at least {least} pixels "
                                  f"(scripts/train_cnn.py): set image_size to {least} or more")
        if not kind.engine_served:
            continue
        model_ctx, source = model_context((config.get("models") or {}).get(wl.get("model"), {}) or {},
                                          directory)
        engine = llm_engines().engine_class(wl["engine"])
        limits = [(model_ctx, f"{model_ctx} tokens: {source}")]
        # the context the engine runs every model with: the payload's --ctx (llamacpp,
        # torch), or Ollama's own default num_ctx (the payload sets none)
        limits.append((engine.ctx, f"engine {engine.name}'s context {engine.ctx}: "
                                   f"{'DEFAULT_CTX' if engine.sets_ctx else 'OLLAMA_DEFAULT_CTX'} "
                                   "in scripts/llm_engines.py"))
        limits = [(n, why) for n, why in limits if n]
        bound = min((n for n, _ in limits), default=None)
        if bound is not None and wl["max_tokens"] >= bound:
            raise ConfigError(f"{key}.max_tokens: {wl['max_tokens']} does not fit the context of model "
                              f"{wl.get('model')!r} ({'; '.join(why for _, why in limits)}), which each "
                              f"request's prompt shares (a request stops there, with fewer tokens): "
                              f"set max_tokens below {bound}")


def check_engines(config: dict) -> None:
    """An LLM workload's engine serves its api, runs its model's source, drives its GPU
    counts, and runs on several nodes only where it serves HTTP (one server per node)."""
    from scalesweep.plan.sweep import enabled_workloads, workload_axes

    for name in enabled_workloads(config):
        wl = config["workloads"][name]
        if not _kind(wl).engine_served:
            continue
        try:
            engine = llm_engines().engine_class(wl["engine"])
        except ValueError as exc:
            raise ConfigError(f"config key workloads.{name}.engine: {exc}") from None
        key = f"config key workloads.{name}"
        if wl["api"] not in engine.apis:
            raise ConfigError(f"{key}.api: {wl['api']!r} is not served by engine {engine.name} "
                              f"(it serves: {', '.join(engine.apis)})")
        source = (config.get("models", {}).get(wl.get("model"), {}) or {}).get("source")
        if source and source not in engine.model_sources:
            raise ConfigError(f"{key}.engine: engine {engine.name} cannot run model {wl['model']!r} "
                              f"of source {source!r} (it runs: {', '.join(engine.model_sources)})")
        axes = workload_axes(config, name)
        too_many = [g for g in axes.get("gpus_per_node") or [0] if engine.max_gpus is not None
                    and g > engine.max_gpus]
        if too_many:
            raise ConfigError(f"{key}.sweep.gpus_per_node: engine {engine.name} drives at most "
                              f"{engine.max_gpus} GPU per instance, not {too_many[0]}")
        several = [n for n in axes.get("nodes") or [1] if n > 1]
        if several and not engine.serves_http:
            raise ConfigError(f"{key}.sweep.nodes: engine {engine.name} runs in the payload's process "
                              f"(no server), so one node only, not {several[0]}")


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
        return _one_line(exc)
    if isinstance(content, dict):
        return _one_line(exc)
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
    schema = _schema()
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
        raise ConfigError(_one_line(exc)) from None
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
            raise ConfigError(_one_line(exc)) from None
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


def validated(config: dict, directory: str | Path = ".") -> dict:
    """``config`` checked, defaults filled in, its site loaded (``check_config``; for the
    campaign in ``directory``)."""
    check_config(config, directory)
    return config


def _one_line(exc: Exception) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return " ".join(lines[:2]) if lines else type(exc).__name__
