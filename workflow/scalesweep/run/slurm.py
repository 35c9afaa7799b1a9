"""Slurm resources of one sweep point, for snakemake-executor-plugin-slurm (2.8.0; every
call into its internals or Snakemake's goes through :mod:`scalesweep.platform.snakemake_adapter`).

Every function here is pure but ``point_resources`` (its functions keep one request per
point and attempt) and ``sbatch_options`` (the plugin's own code renders the line): a sweep point + its workload + the config (+ the
attempt) in, plain values out; the machine's rules come from the config's site
(``scalesweep.platform.site``: ``node``, ``launch.gpu_bind``, ``slurm``, ``storage``).
``point_resources`` makes them the resource functions of ``rule run_point``
(``workflow/rules/run.smk``); the plugin turns them into the ``sbatch`` line.
``slurm_partition``, ``slurm_account`` and ``qos`` are not set here: they belong to the site
profile (``profiles/<site>/config.yaml``, ``default-resources``) or the command line.

The geometry of the allocation is exactly the geometry the point's own ``srun`` asks for
inside it: both come from the point's ``scalesweep.platform.launch.Geometry``::

    one process (nodes=1, ranks=1)        --nodes=1 --ntasks=1 --cpus-per-task=T
                                          (+ --gpus=G with G GPUs)
    several ranks, 1 per node              --nodes=N --ntasks=N --cpus-per-task=T
    several ranks, R > 1 per node          --nodes=N --ntasks-per-node=R --cpus-per-task=T
      with GPUs (R ranks, G GPUs per node)   + --gpus-per-task=G/R --gpu-bind=<site's>

What the plugin and its jobstep do with these (read from their source, checked on the
local cluster, ``tests/workflow/test_slurm_profile.py`` pins it):

* ``mpi``: the jobstep looks only at whether the key *exists*. With it, the job's command
  runs directly in the batch step, so the point's own ``srun`` can start the ranks; without
  it, the command is wrapped in ``srun -n1`` and a nested multi-task ``srun`` hangs. A
  resource function returning ``None`` drops the key (Snakemake leaves ``None`` resources
  out of the job), so ``mpi`` is ``"srun"`` when the point has more than one rank and
  ``None`` otherwise. ``""`` would keep the key (no ``srun -n1``) while the submit side
  treats it as false: never return ``""``.
* With ``mpi`` the plugin requires ``tasks > 1`` or ``tasks_per_node > 1`` (never both):
  ``tasks_per_node`` when R > 1, else ``tasks`` = N (the ranks of a 1-per-node layout).
* GPUs: the plugin's ``gpu`` resource gives ``--gpus=G`` and, when ``tasks`` is set,
  ``--ntasks-per-gpu=<tasks>`` (wrong for several ranks, and Slurm refuses it together with
  ``--ntasks-per-node``). So several ranks get ``--gpus-per-task=G/R`` (and the site's
  ``launch.gpu_bind``, Frontier ``closest``, as ``--gpu-bind``)
  through ``slurm_extra`` (which refuses ``--gpus``/``--gres`` but not ``--gpus-per-task``),
  and one process gets ``gpu=G`` (``--gpus=G`` on sbatch and on the jobstep's ``srun -n1``).
* ``constraint``/``slurm_extra``: ``None`` leaves the option out; an empty string would
  give ``-C ''``. The plugin pastes ``slurm_extra`` into a shell line unquoted, so every
  token is schema-restricted and shell-quoted here.
* ``mem_mb``: Snakemake refuses ``None`` for a size resource; ``0`` makes the plugin leave
  ``--mem`` out (the node's default memory: the whole node where nodes are exclusive).
* Whole nodes: the plugin has no resource or option for an exclusive allocation and does
  not refuse ``--exclusive`` in ``slurm_extra`` (2.8.0: not among its forbidden options),
  so the site's ``slurm.exclusive`` (default true) adds ``--exclusive`` there, unless its
  ``slurm.extra`` already has an ``--exclusive[=...]``. The run records what it got
  (``scontrol``'s OverSubscribe: ``allocation.exclusive`` in metrics.json).
"""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path
from dataclasses import asdict, dataclass, fields
from typing import Any, Callable

from scalesweep.plan.kinds import kind_of
from scalesweep.plan.sweep import SweepPoint
from scalesweep.platform.launch import Geometry
from scalesweep.platform.site import site_of
from scalesweep.platform import snakemake_adapter
from scalesweep.record.hostenv import ENV_REF, expand_vars

DEFAULT_MAX_RUNTIME_MIN = 30  # workloads.<name>.max_runtime_min's schema default


class SlurmConfigError(ValueError):
    """The config asks for Slurm options that cannot work: raised at planning time."""


@dataclass(frozen=True)
class SlurmRequest:
    """The executor-plugin resources of one point. ``None`` = not passed to the plugin."""

    nodes: int
    tasks: int | None
    tasks_per_node: int | None
    mpi: str | None
    cpus_per_task: int
    gpu: int | None
    slurm_extra: str | None
    runtime: int
    mem_mb: int  # per node; 0 = no --mem
    constraint: str | None

    def resources(self) -> dict[str, Any]:
        """What Snakemake hands the plugin: the set ones only."""
        return {k: v for k, v in asdict(self).items() if v is not None}


def runtime_min(workload: dict, site: dict, attempt: int = 1) -> int:
    """Wall time (minutes) of an attempt: the workload's base, doubled on each retry.

    Attempt n asks for ``max_runtime_min x 2^(n-1)``: a point that ran out of time gets
    twice as long, and a slow node never costs more than twice what was needed. Capped at
    the site's ``slurm.max_runtime_min`` (e.g. Frontier's 2 h for up to 91 nodes) when
    that is set, so a retry is never refused by the queue.
    """
    base = int(workload.get("max_runtime_min", DEFAULT_MAX_RUNTIME_MIN))
    minutes = base * 2 ** (max(1, int(attempt)) - 1)
    cap = site["slurm"]["max_runtime_min"]
    return min(minutes, cap) if cap else minutes


def point_geometry(point: SweepPoint) -> Geometry:
    """The point's process layout, as its launcher computes it (``platform.launch.Geometry``):
    the allocation asks for exactly what the point's own ``srun`` starts."""
    return Geometry(point.nodes, point.ranks, point.threads, point.gpus)


def forbidden_extra(tokens: list[str]) -> list[str]:
    """Tokens the plugin refuses in ``slurm_extra`` (options it sets itself)."""
    if not tokens:  # the usual case: no scan of the plugin's 22 patterns per point
        return []
    line = " ".join(tokens) + " "
    return [name for pattern, name in snakemake_adapter.forbidden_slurm_options().items()
            if re.search(pattern, line)]


def extra_tokens(point: SweepPoint, site: dict) -> list[str]:
    """sbatch options the plugin has no resource for, in a fixed order (GPU binding,
    core specialisation, exclusive nodes, then the site's own ``slurm.extra``)."""
    geometry = point_geometry(point)
    tokens: list[str] = []
    if geometry.tasks > 1:
        tokens += geometry.gpu_options(site["launch"]["gpu_bind"] or "")
    if site["node"]["core_spec"] is not None:
        tokens.append(f"--core-spec={site['node']['core_spec']}")
    own = [str(t) for t in site["slurm"]["extra"]]
    if site["slurm"]["exclusive"] and not any(t.startswith("--exclusive") for t in own):
        tokens.append("--exclusive")
    bad = forbidden_extra(own)
    if bad:
        raise SlurmConfigError(
            f"site {site['name']}: slurm.extra {own} sets what the Slurm executor plugin "
            f"sets itself ({', '.join(bad)}): use the matching resource or profile key instead"
        )
    return tokens + own


def constraint(workload: dict, config: dict) -> str | None:
    """Node features: the site's ``storage.node_local_constraint`` (Frontier: nvme) when
    the point's dataset is copied to node-local storage (``datasets.<name>.node_local``)."""
    feature = site_of(config)["storage"]["node_local_constraint"]
    dataset = config.get("datasets", {}).get(workload.get("dataset") or "", {}) or {}
    if kind_of(workload).stages_dataset and dataset.get("node_local") and feature:
        return feature
    return None


def slurm_request(point: SweepPoint, workload: dict, config: dict, attempt: int = 1) -> SlurmRequest:
    """All executor-plugin resources of one point (see the module docstring)."""
    site = site_of(config)
    geometry = point_geometry(point)
    multi = geometry.tasks > 1
    tokens = extra_tokens(point, site)
    return SlurmRequest(
        nodes=geometry.nodes,
        tasks=geometry.tasks if multi and geometry.tasks_per_node == 1 else None,
        tasks_per_node=geometry.tasks_per_node if multi and geometry.tasks_per_node > 1 else None,
        mpi="srun" if multi else None,
        cpus_per_task=geometry.cpus_per_task,
        gpu=geometry.gpus_per_node if geometry.gpus_per_node and not multi else None,
        slurm_extra=shlex.join(tokens) if tokens else None,
        runtime=runtime_min(workload, site, attempt),
        mem_mb=site["node"]["mem_mb"],
        constraint=constraint(workload, config),
    )


# rule run_point's resources, by the plugin's names: what each becomes is the module's
# docstring (tasks: ranks when 1 per node; tasks_per_node: when > 1; mpi: "srun" with
# several ranks; cpus_per_task: threads per rank; gpu: one process with G GPUs;
# slurm_extra: --gpus-per-task/--gpu-bind, --exclusive, site extras; runtime: minutes,
# doubling with each retry, capped by the site; mem_mb: 0 = the node's default;
# constraint: nvme when the dataset is staged node-locally)
POINT_RESOURCES = tuple(f.name for f in fields(SlurmRequest))


def point_resources(config: dict, refuse: Callable[[str], Exception] = SlurmConfigError
                    ) -> dict[str, Callable]:
    """Rule run_point's Slurm resources: name -> a function of a job's wildcards (and,
    for ``runtime``, its attempt), each a field of the point's ``slurm_request``, made
    once per (point, attempt) for all of them (Snakemake evaluates every resource of
    every job while planning: ~25% of planning 10,000 points before). A config the
    request refuses raises ``refuse("scalesweep config: <why>")``."""
    requests: dict[tuple, SlurmRequest] = {}

    def request(wildcards: Any, attempt: int = 1) -> SlurmRequest:
        point = SweepPoint.from_wildcards(wildcards)
        made = requests.get((point, attempt))
        if made is None:
            try:
                made = slurm_request(point, config["workloads"][point.workload], config,
                                     attempt)
            except SlurmConfigError as exc:
                raise refuse(f"scalesweep config: {exc}") from None
            requests[(point, attempt)] = made
        return made

    def resource(name: str) -> Callable:
        if name == "runtime":  # doubles with each retry
            return lambda wildcards, attempt: request(wildcards, attempt).runtime
        return lambda wildcards: getattr(request(wildcards), name)

    return {name: resource(name) for name in POINT_RESOURCES}


# rule startup_scale's allocation: a minute for each srun step (a start of thousands of
# ranks queueing on the metadata server takes tens of seconds), and ten more
SCALE_STEP_MIN, SCALE_BASE_MIN = 1, 10


def scale_resources(config: dict, nodes: list[int]) -> dict[str, Any]:
    """Rule startup_scale's Slurm resources (issue #44): whole nodes, as many as the
    sweep's largest node count (``nodes``: the sweep's, every workload's), each able to hold the largest ``startup_scale.ranks``
    tasks of one core; the job's batch step runs the rule (``mpi``: as a multi-rank
    point's, not inside a step of its own that would hold a core) and starts each (nodes,
    ranks) as its own srun step (scalesweep.run.startscale.measure_slurm)."""
    site = site_of(config)
    steps = len(nodes) * len(config["startup_scale"]["ranks"]) * int(
        config["startup_scale"]["repeats"]) + 1
    nodes = max(nodes)
    ranks = max(int(k) for k in config["startup_scale"]["ranks"])
    probe = SweepPoint("startup_scale", "native", nodes, 0, ranks, 1, 0)
    tokens = extra_tokens(probe, site)
    multi = nodes * ranks > 1  # as a point's: the batch step runs the rule, srun the ranks
    return SlurmRequest(
        nodes=nodes, tasks=nodes if multi and ranks == 1 else None,
        tasks_per_node=ranks if ranks > 1 else None, mpi="srun" if multi else None,
        cpus_per_task=1, gpu=None,
        slurm_extra=shlex.join(tokens) if tokens else None,
        runtime=min(SCALE_BASE_MIN + SCALE_STEP_MIN * steps,
                    site["slurm"]["max_runtime_min"] or SCALE_BASE_MIN + SCALE_STEP_MIN * steps),
        mem_mb=site["node"]["mem_mb"], constraint=None).resources()


# The characters of a Slurm account here: the executor plugin splits the value at commas
# and whitespace (several accounts) and passes each with -A; scalesweep holds it to these.
ACCOUNT_CHARS = re.compile(r"[A-Za-z0-9_.+@-]")


def account_problem(raw: str | int | None, environ: Any) -> str | None:
    """Why the profile's ``slurm_account`` cannot work, or None: a variable it names
    that is unset or empty, an empty account, characters no account has (``x$(touch
    y)``), each said as what it is.

    ``raw`` is the profile's default-resources expression (e.g. ``'$SBATCH_ACCOUNT'``);
    Snakemake expands ``$VAR`` in it when it evaluates it. None = no account configured
    (not a Slurm profile, or the plugin's own guess): nothing to check.
    """
    if raw is None:
        return None
    text = str(raw)
    names = [a or b for a, b in ENV_REF.findall(text)]
    value = expand_vars(text, environ)
    value = value.strip().strip("'\"").strip()
    unset = [n for n in names if n not in environ]
    blank = [n for n in names if n in environ and not str(environ[n]).strip()]
    if unset or blank:
        name = (unset or blank)[0]
        state = "is not set" if unset else "is set to nothing"
        return (
            f"the Slurm account is empty: the profile's default-resources take it from "
            f"${name}, which {state}. Set it to your "
            f"project's allocation, e.g. `export {name}=abc123` "
            "(sbatch reads SBATCH_ACCOUNT too), or pass "
            "--default-resources slurm_account=<project> on the command line"
        )
    if not value:
        return (
            "the Slurm account is empty (default-resources slurm_account): "
            "set it in the profile or with --default-resources slurm_account=<project>"
        )
    bad = sorted({ch for ch in value if not ACCOUNT_CHARS.fullmatch(ch)}, key=value.index)
    if bad:
        source = f" (from ${names[0]})" if names else " (default-resources slurm_account)"
        return (
            f"the Slurm account {value!r}{source} has characters no Slurm account has "
            f"({' '.join(repr(ch) for ch in bad)}): an account is letters, digits and _ . + @ -, "
            "and the Slurm executor would split this one at its spaces and commas and submit "
            "with a part of it. Set it to your project's allocation (e.g. abc123), in the "
            "profile or with --default-resources slurm_account=<project>"
        )
    return None


# --- What a dry run shows per point: the sbatch options and the point's srun line ---------
# rule run_point's shell command carries them as a trailing comment (campaign.invocation:
# launch_comment), so `snakemake --profile profiles/frontier -n` prints, per job, what
# a user following OLCF's documentation would type by hand.


def sbatch_options(resources: Any, threads: int | None = None, settings: Any = None) -> str:
    """The options snakemake-executor-plugin-slurm puts on a job's ``sbatch`` line, made by
    the plugin's own code (``submit_string.get_submit_command`` then
    ``utils.set_gres_string``, through ``platform.snakemake_adapter.plugin_sbatch_options``)
    from the job's evaluated ``resources`` (anything with ``.get`` and ``.items``) and the
    plugin's ``settings`` (its ExecutorSettings: the user's ``--slurm-*`` options;
    ``campaign.invocation.plugin_settings``)::

        -A ACCOUNT -p PARTITION [--clusters C] -t RUNTIME [-C CONSTRAINT] [--qos=Q]
        [--mem-per-cpu M | --mem M] --nodes=N [--requeue | --no-requeue] [--qos=Q]
        [--reservation=R] [--exclude=NODES] [--ntasks-per-gpu=T | --ntasks=T]
        [--ntasks-per-node=R | --ntasks=T] --cpus-per-task=C [SLURM_EXTRA] [--gres=G] [--gpus=G]

    Left out, being the plugin's own and not the job's: ``--parsable``, ``--job-name``,
    ``--output``, ``--export=ALL``, ``--comment``, ``-D <workdir>``, ``--wrap``. The
    account and partition are passed as the plugin's executor passes them: the first
    account named (it may also canonicalise it through ``sacctmgr``); with no account or
    partition it guesses one, and none is shown. ``threads``: the job's threads
    (``--cpus-per-task`` without a ``cpus_per_task`` resource), by default the resources'
    ``_cores``. Resources the plugin refuses (an MPI job without tasks ...) give a line
    saying so, never an exception: the comment is informational, the submission itself
    is refused by the plugin."""
    get = resources.get
    account = get("slurm_account")
    named = [a for a in re.split(r"[,\s]+", str(account)) if a] if account else []
    partition = get("slurm_partition")
    try:
        return snakemake_adapter.plugin_sbatch_options(
            dict(resources.items()), threads if threads is not None else get("_cores", 1),
            settings, f" -A {shlex.quote(named[0])}" if named else "",
            f" -p {shlex.quote(str(partition))}" if partition else "")
    except Exception as exc:  # noqa: BLE001 - the plugin's refusal, shown in the comment
        return f"(the Slurm plugin refuses these resources: {exc})"


def _plugin_quote(value: Any) -> str:
    """The plugin's safe_quote: shlex.quote, '' for an empty value."""
    text = str(value)
    return shlex.quote(text) if text else "''"


def settings_options(settings: Any) -> list[str]:
    """The options the plugin adds to every job's ``sbatch`` from its ``settings``, in its
    order (after ``--nodes``): see ``sbatch_options``; none for ``None``."""
    if settings is None:
        return []
    opts = []
    if getattr(settings, "requeue", False):
        opts.append("--requeue")
    elif getattr(settings, "no_requeue", False):
        opts.append("--no-requeue")
    if getattr(settings, "qos", None):
        opts.append(f"--qos={_plugin_quote(settings.qos)}")
    if getattr(settings, "reservation", None):
        opts.append(f"--reservation={_plugin_quote(settings.reservation)}")
    excluded = sorted({n.strip() for n in
                       str(getattr(settings, "exclude_failed_nodes", None) or "").split(",")
                       if n.strip()})
    if excluded:
        opts.append(f"--exclude={','.join(excluded)}")
    return opts


# Where a point's own path goes in a srun line shared by every repeat of its geometry
# (only characters shlex leaves unquoted: the line quotes alike with the real path).
POINT_SLOT = "@@POINT@@"


def srun_template(point: SweepPoint, workload: dict, config: dict, runs_dir: str) -> str:
    """The point's launch as a shell line, as the job runs it: several ranks started by
    ``srun`` with the point's geometry, one process directly:
    ``VAR=value ... srun --nodes=N --ntasks=... [apptainer exec ... IMAGE] python
    <payload> <its arguments>`` (the variables the runtime needs on the host,
    ``launch.launch_env``; the payload's arguments as its run builds them,
    ``payloads.planned_invocation``), with the point's directory,
    ``<runs_dir>/<point.path>``, as ``<runs_dir>/POINT_SLOT``: the line is the same for
    every repeat of a geometry (:func:`srun_line` fills the slot)."""
    from scalesweep.platform.launch import launch_command, launch_env, shell_line
    from scalesweep.plan.payloads import image_location, planned_invocation, point_inputs
    from scalesweep.run.pointlaunch import build_launch
    from scalesweep.plan.sweep import is_native

    inputs = point_inputs(point.workload, point.runtime, config)
    # the image's path as run_point gives it (absolute: the campaign directory's)
    image = "" if is_native(point.runtime) else str(Path(image_location(config, point.workload, point.runtime)).resolve())
    out_dir = f"{runs_dir}/{POINT_SLOT}"
    inv = planned_invocation(point, workload, config, inputs, Path(out_dir))
    launch = build_launch(
        point,
        workload,
        config,
        payload_args=inv.args,
        payload=inv.script,
        data_dir=inv.data_dir,
        out_dir=out_dir,
        image=image,
        # what runs inside the job: several ranks through the point's own srun; one
        # process (DataParallel, an LLM server) directly in the plugin's job step
        launcher="srun" if point.world_size > 1 else "local",
    )
    return shell_line(launch_command(launch), launch_env(launch))


def srun_line(point: SweepPoint, workload: dict, config: dict, runs_dir: str) -> str:
    return srun_template(point, workload, config, runs_dir).replace(POINT_SLOT, point.path)
