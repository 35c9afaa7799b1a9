"""A scalesweep config checked: the schema (Snakemake's ``validate``, its defaults filled
in), then what a schema cannot say (the site it names loaded, the runtimes and images the
site offers, the workload kinds' own checks, datasets that exist, LLM engines and their
bounds). The workflow (common.smk) and every command check a config here; reading one as
``snakemake`` does is :mod:`scalesweep.plan.config_read`'s.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import yaml

from scalesweep.plan.kinds.base import check_kinds
from scalesweep.plan.payload_scripts import llm_engines, model_context, payload_script
from scalesweep.platform.code import CODE_ROOT as REPO, SCHEMAS_DIR


SCHEMA = SCHEMAS_DIR / "config.schema.yaml"


class ConfigError(ValueError):
    """The config does not validate; the message names the key and the bad value."""


@functools.cache
def config_schema() -> dict:
    """The config schema, read once; read-only (``validated`` fills defaults from a copy
    of its own)."""
    return yaml.safe_load(SCHEMA.read_text())


def schema_errors(config: dict) -> list[str]:
    """Every schema violation as 'key.path: message', naming the key and the bad value."""
    import jsonschema

    validator = jsonschema.Draft202012Validator(config_schema())
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
    the schema cannot say: runtimes the site offers, engines that can run the workloads,
    prompts files. The campaign's own paths come first (scalesweep.plan.inputs).

    A ``site:`` path is relative to the repository, like every path in the config.
    The workflow calls this while it is parsed (workflow/rules/common.smk), in the
    campaign ``directory``.
    """
    from snakemake.exceptions import WorkflowError
    from snakemake.utils import validate

    from scalesweep.platform.site import SITE_KEY, SiteError, load_site
    from scalesweep.plan.inputs import check_prompts, path_problems

    paths = path_problems(directory, REPO)  # the campaign's own paths, before anything
    if paths:
        raise ConfigError("; ".join(paths) + ". Nothing ran")
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
    problem = check_prompts(config, REPO, _kind)  # readable UTF-8, bounded (scalesweep.plan.inputs)
    if problem:
        raise ConfigError(problem)


def check_dataset_sources(config: dict, directory: str | Path = ".") -> None:
    """The source (``datasets.<name>.path``) of every dataset a workload trains on exists
    where staging will read it, before any job: on a site without a scheduler every job
    runs on this host, so it must be here (relative paths: to the campaign ``directory``,
    where the staging job runs). On a Slurm site staging is a Slurm job and the path is the
    cluster's (a Frontier campaign is planned anywhere, e.g. with `snakemake -n`): the
    staging job refuses it there, naming it, before any point runs. A dataset the campaign
    has staged already (``resources/datasets/<name>``) from this very source does not read
    it again; a synthetic one reads none. One staged from another source (path, classes,
    ... : ``scalesweep.plan.identity.source_change``) is refused on every site, naming
    both, unless ``restage`` names it (then its source must exist here too)."""
    from scalesweep.record.dataset import STAGED_DIR
    from scalesweep.platform.site import site_of
    from scalesweep.plan.identity import source_change
    from scalesweep.plan.sweep import Selection, enabled_workloads

    site = site_of(config)
    datasets = config.get("datasets") or {}
    chosen = Selection.of(config).workloads  # only: {workloads: [...]}: the others stage nothing
    used = {config["workloads"][w].get("dataset") for w in enabled_workloads(config)
            if _kind(config["workloads"][w]).stages_dataset and (chosen is None or w in chosen)}
    restage = set(config.get("restage") or [])
    for name in sorted(n for n in used if n in datasets):
        ds = datasets[name]
        changed = source_change(name, ds, directory)
        if changed and name not in restage:
            raise ConfigError(changed)
        staged = Path(directory, STAGED_DIR, name).is_dir() and not changed
        if ds["source"] == "synthetic" or staged or site["scheduler"] != "none":
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
        load = wl.get("load") or {}
        for name in ("input_words", "output_tokens"):
            span = load.get(name)
            if span and span[0] > span[1]:
                raise ConfigError(f"{key}.load.{name}: {span} is not [low, high] with low <= high")
        if load.get("output_tokens") and load["output_tokens"][1] > wl["max_tokens"]:
            raise ConfigError(f"{key}.load.output_tokens: {load['output_tokens']} goes past the "
                              f"workload's max_tokens {wl['max_tokens']}: raise max_tokens (it is "
                              "checked against the model's context) or lower the range")
        if load.get("max_rate_steps") and (not load.get("rates") or load.get("target") is None):
            raise ConfigError(f"{key}.load.max_rate_steps: {load['max_rate_steps']} bisection steps "
                              "need open-loop rates (load.rates) and a latency target (load.target) "
                              "to search between")
        target = load.get("target")
        if target is not None:
            from scalesweep.record.load import target_of

            try:
                target_of(target)
            except ValueError as exc:
                raise ConfigError(f"{key}.load.target: {target!r}: {exc}") from None
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
        words = (wl.get("load") or {}).get("input_words")
        if bound is not None and words and words[1] + wl["max_tokens"] >= bound:
            raise ConfigError(f"{key}.load.input_words: prompts of up to {words[1]} words (a token "
                              f"or more each) and {wl['max_tokens']} output tokens do not fit the "
                              f"context ({'; '.join(why for _, why in limits)}): lower them below "
                              f"{bound} together")


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
        if (wl.get("load") or {}).get("client", "with_server") == "host":
            if not engine.serves_http:
                raise ConfigError(f"{key}.load.client: host needs a server to send to; engine "
                                  f"{engine.name} runs in the payload's process (no server)")
            if several:
                raise ConfigError(f"{key}.load.client: host is for one node (a client beside its "
                                  f"node's containerised server); on {several[0]} nodes the client "
                                  "runs on the first node, a server on every node: set "
                                  "load.client: with_server there")


def validated(config: dict, directory: str | Path = ".") -> dict:
    """``config`` checked, defaults filled in, its site loaded (``check_config``; for the
    campaign in ``directory``)."""
    check_config(config, directory)
    return config


def one_line(exc: Exception) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return " ".join(lines[:2]) if lines else type(exc).__name__
