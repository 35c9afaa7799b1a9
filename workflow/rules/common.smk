# Helpers shared by the rules: config validation, sweep expansion, input functions.
# Only Snakemake's documented interface (tests/unit/test_public_api.py): the Snakefile language,
# `config`, snakemake.utils, WorkflowError, workflow.cores and the workflow's directory.
import glob
import hashlib
import json
import os
import re
import shlex
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake.utils import min_version

min_version("9.0")

# The repository of this Snakefile: its package, scripts and the files config paths name
# (also when another checkout of scalesweep is installed, e.g. a scratch copy benchmarked).
REPO = Path(workflow.basedir)
sys.path.insert(0, str(REPO / "workflow"))
# Rules call `python`: make it the interpreter running this workflow (the quickstart's
# .venv) unless a conda environment is in use.
os.environ.update(
    PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]])
)

from scalesweep.plan.config import ConfigError, check_config  # noqa: E402
from scalesweep.platform.snakemake_adapter import (
    release_rate_timers_at_exit,
)  # noqa: E402

# Snakemake's job-rate timers (a minute long in profiles/local) must not hold the exit
release_rate_timers_at_exit()

from scalesweep.plan.config_read import schema_typed
from scalesweep.record.metrics import write_json_atomic  # noqa: E402
from scalesweep.plan.imageset import (  # noqa: E402
    load_record,
    loaded_images,
    runtime_image,
    used_images,
)
from scalesweep.plan.kinds import kind_of  # noqa: E402
from scalesweep.plan.payloads import point_inputs  # noqa: E402
from scalesweep.platform.site import site_of  # noqa: E402
from scalesweep.plan.sweep import (  # noqa: E402
    HISTORY_DIR,
    NATIVE_RUNTIMES,
    POINT_DIR,
    WILDCARD_CONSTRAINTS,
    Selection,
    SweepError,
    SweepPoint,
    select_points,
    sweep_points,
)


envvars:
    "PATH",


# --config values re-typed by the schema (scalesweep.plan.config_read)
schema_typed(config)
try:  # the one validation: Snakemake's validate() with the schema's defaults, the site
    check_config(
        config
    )  # it names loaded (site_of(config)), runtimes and engines checked
except ConfigError as exc:
    raise WorkflowError(f"scalesweep config: {exc}") from None
config["_code_root"] = str(REPO)
SITE = site_of(config)
# Points are Slurm jobs on this site (sites/<name>.yaml: scheduler): run_point then
# declares its Slurm geometry (RUN_POINT_SLURM_RESOURCES) and its own threads. Only then:
# Snakemake evaluates every resource function of every job while planning, and the ten
# Slurm resources are ~25% of `snakemake -n` on a 10,000-point sweep.
SLURM_SITE = SITE["scheduler"] == "slurm"


def in_slurm_job():
    """Whether this Snakemake runs inside a Slurm job (the Slurm plugin's job step keeps
    SLURM_JOB_ID): every job parses the workflow again, to run that one job."""
    return "SLURM_JOB_ID" in os.environ


# What this run refused while planning (our WorkflowError from an input, params or
# resource function: Snakemake stops); a dry run then ends with no summary of its jobs.
REFUSED = []


def refusal(message):
    """The WorkflowError refusing ``message`` while planning, recorded in REFUSED."""
    REFUSED.append(message)
    return WorkflowError(message)


try:
    POINTS = sweep_points(config)  # the whole sweep: what the summary and report cover
    # --config only=...: what this invocation measures (all of POINTS without it)
    SELECTED = select_points(POINTS, config)
except SweepError as exc:
    raise WorkflowError(f"scalesweep config: {exc}") from None
SELECTION = Selection.of(config)

# each workload's input (a CNN's dataset, an LLM's model) defined: its kind says which
for _name, _wl in config["workloads"].items():
    _problem = kind_of(_wl).check(_name, _wl, config)
    if _problem:
        raise WorkflowError(f"scalesweep config: {_problem}")


wildcard_constraints:
    **WILDCARD_CONSTRAINTS,
    dataset=r"[a-z][a-z0-9_]*",
    model=r"[a-z][a-z0-9_]*",
    round=r"[1-9][0-9]*",


def point_of(wildcards):
    return SweepPoint.from_wildcards(wildcards)


# Where a point's measurement goes: rule run_point's output and log, and every list of
# points below, from the one layout (scalesweep.plan.sweep.POINT_DIR, SweepPoint.path).
from scalesweep.record.pointdir import METRICS_JSON, RUN_LOG, RUNS_DIR  # noqa: E402
from scalesweep.record.geometry import AXES as GEOMETRY_AXES  # noqa: E402

POINT_METRICS = f"{RUNS_DIR}/{POINT_DIR}/{METRICS_JSON}"
POINT_LOG = f"{RUNS_DIR}/{POINT_DIR}/{RUN_LOG}"


def point_metrics(point):
    return f"{RUNS_DIR}/{point.path}/{METRICS_JSON}"


def metrics_files(points=None):
    """The metrics files of ``points``, by default of the points this run measures."""
    return [point_metrics(p) for p in (points or SELECTED)]


def completion_message():
    """onsuccess: what the summary says of the points (an unreadable metrics.json is
    left out of it, and the points outside a selection may be missing)."""
    import csv
    from collections import Counter

    points = Path("results", "summary", "points.csv")
    counts = Counter()
    if points.is_file():
        with points.open() as fh:
            counts = Counter(row["state"] for row in csv.DictReader(fh))
    left = ", ".join(
        f"{counts[s]} {s}"
        for s in ("failed", "missing", "disturbed", "foreign")
        if counts[s]
    )
    head = (
        "scalesweep: sweep complete" if not left else f"scalesweep: done, with {left}"
    )
    tail = "; see `scalesweep status`" if left else ""
    return (
        f"{head}; summary in results/summary/, report: snakemake --report "
        f"report.html{tail}"
    )


PARTIAL_HINT = "--config analysis='{partial: true}'"


def summary_note(runs_csv):
    """At parse time, so that `snakemake --report` says it too (it runs no onstart): where
    some points of this run are measured and others are not (failed or never run), the
    summary (``runs_csv``) waits for all of them, and a report needs it ("marked for
    report but does not exist"): how to summarise and report what was measured. None
    where the summary exists, analysis.partial is on, or nothing or everything is
    measured; and inside a Slurm job, which parses the workflow again while the summary
    is not made yet: it would stat every point's metrics.json (per job: the campaign's
    points squared on Lustre) and print the note into every job's log."""
    if in_slurm_job():
        return None
    if Path(runs_csv).exists() or config["analysis"]["partial"]:
        return None
    files = metrics_files()
    have = sum(Path(f).is_file() for f in files)
    if not have or have == len(files):
        return None
    return (
        f"scalesweep: {runs_csv} is not made yet: {len(files) - have} of {len(files)} "
        "points have no metrics.json (failed or not run; `scalesweep status` says which), "
        "and the summary and `snakemake --report` wait for every point. To summarise and "
        f"report what was measured: snakemake {PARTIAL_HINT} (with your --profile, and "
        "your other --config items in the same --config), then snakemake --report "
        "report.html"
    )


def remeasure_note():
    """At parse time, before any job: an input of finished points (a staged dataset, a
    model, an image's manifest) that is gone. Snakemake makes it anew and then runs every
    point that reads it again (an input updated by another job), deleting its
    metrics.json first; the harness keeps each measurement as metrics.<attempt>.json
    beside it, but the campaign is measured again. Says so, and how to make the input
    anew alone. None when every input is there (one stat each) or inside a Slurm job."""
    if in_slurm_job():
        return None
    gone = {}
    for workload, runtime in sorted({(p.workload, p.runtime) for p in SELECTED}):
        for path in point_inputs(workload, runtime, config).values():
            if Path(path).exists():
                continue
            pattern = POINT_METRICS.format(
                workload=workload,
                runtime=runtime,
                arm="*",
                repeat="*",
                **dict.fromkeys(GEOMETRY_AXES, "*"),
            )
            gone.setdefault(path, set()).update(glob.glob(pattern))
    done = sorted(set().union(*gone.values())) if gone else []
    if not done:
        return None
    paths = " ".join(sorted(path for path, read in gone.items() if read))
    return (
        f"scalesweep: {paths} gone, read by {len(done)} finished point(s) (e.g. {done[0]}): "
        "a run that makes them anew (for a point still to measure) measures those points "
        "again too, as Snakemake re-runs a job whose input another job updated (each "
        "earlier measurement stays beside its point as metrics.<attempt>.json). To make "
        f"them anew alone, first run: snakemake {paths} (with your --profile and --config)"
    )


def sweep_banner():
    by_workload = {}
    for p in POINTS:
        by_workload[p.workload] = by_workload.get(p.workload, 0) + 1
    parts = ", ".join(f"{w}: {n} points" for w, n in by_workload.items())
    banner = f"scalesweep: {len(POINTS)} sweep points ({parts})"
    if not SELECTION.everything:
        banner += (
            f"; measuring the {len(SELECTED)} selected by {SELECTION.describe()} "
            "(the others are kept, and summarised where measured)"
        )
    return banner


def model_params(wildcards):
    m = {"path": "", "name": "", "seed": 0, "ollama_bin": "ollama"}
    m.update(config["models"][wildcards.model])
    return m


def dataset_params(wildcards):
    return config["datasets"][wildcards.dataset]


def in_repo(path):
    """Relative paths in the config name files of the repository, not of the campaign."""
    return str(REPO / path) if not Path(path).is_absolute() else path


# --- Images (scalesweep.plan.imageset): which rule makes each image the selected points run --
IMAGES = used_images(config, POINTS)
for _spec in IMAGES.values():  # 6. an image used in place must be there, before any job
    if _spec.how == "local" and not Path(_spec.path).exists():
        raise WorkflowError(
            f"scalesweep config: containers.images.{_spec.name}.prebuilt: "
            f"{_spec.path!r} does not exist (relative paths: to the campaign directory)"
        )


def images_made_by(how, *formats):
    """A wildcard constraint: the names of the images obtained ``how`` (build, pull,
    local) in one of ``formats`` (any, when none is given); never matches when none is:
    the rules' outputs then never overlap."""
    names = [
        re.escape(name)
        for name, spec in IMAGES.items()
        if spec.how == how and (not formats or spec.format in formats)
    ]
    return "|".join(names) if names else "(?!)"


def image_of(wildcards):
    return IMAGES[wildcards.image]


def image_recipe_inputs(wildcards):
    spec = image_of(wildcards)
    return {"recipe": in_repo(spec.recipe), "requirements": in_repo(spec.requirements)}


def image_build_args(wildcards):
    """--builder, --format and --fakeroot of `scalesweep build-image`, shell-quoted."""
    spec = image_of(wildcards)
    args = ["--builder", spec.builder, "--format", spec.format]
    if spec.fakeroot:
        args.append("--fakeroot")
    return shlex.join(args)


def image_source_args(wildcards):
    """--builder, --format and --image of `scalesweep describe-image`, shell-quoted."""
    spec = image_of(wildcards)
    return shlex.join(
        ["--builder", spec.builder, "--format", spec.format, "--image", spec.prebuilt]
    )


def inject_inputs(wildcards):
    """The image a host-MPI copy is made from, and its manifest (carried over)."""
    base = IMAGES[image_of(wildcards).base]
    return {"image": base.path, "manifest": base.manifest}


def inject_args(wildcards):
    """--lib of `scalesweep inject-host-mpi`: the site's host MPI library files."""
    return shlex.join(
        arg for lib in image_of(wildcards).inject_libs for arg in ("--lib", lib)
    )


# Images copied into a runtime's own storage, per mode (Podman: rule load_image)
LOADS = loaded_images(config, POINTS)


def loads_made(field):
    """A wildcard constraint of load_image (the rule): the images (``field`` image) or runtime
    tokens (``runtime``) of the load records the points wait for."""
    values = sorted(
        {spec.name if field == "image" else rt for spec, rt in LOADS.values()}
    )
    return "|".join(re.escape(v) for v in values) if values else "(?!)"


def load_inputs(wildcards):
    """The placed image a load copies, and its manifest (the digest it is keyed by)."""
    spec = image_of(wildcards)
    return {"image": spec.path, "manifest": spec.manifest}


def startup_image(wildcards):
    """The image a runtime's start-up is timed in: the first point's of it in the whole
    sweep (not the selection: the result is kept for the campaign)."""
    return runtime_image(config, wildcards.runtime, POINTS)


def startup_inputs(wildcards):
    image = startup_image(wildcards)
    inputs = {"manifest": ancient(image.manifest)}
    loaded = load_record(image, wildcards.runtime)
    if loaded:
        inputs["load"] = ancient(loaded)
    return inputs


def image_manifests():
    """The manifest of every image the selected points run (the default target): images used in
    place are described too."""
    return sorted(spec.manifest for spec in used_images(config, SELECTED).values())


def container_runtimes():
    return sorted({p.runtime for p in SELECTED} - set(NATIVE_RUNTIMES))


def startup_results():
    """The start-up timings the table reads: of the container runtimes this run measures
    (made when missing), and those already made of every other container runtime of the
    sweep whose image manifest is there. So a selection of runtimes (only:) on a finished
    campaign re-makes no table, and makes nothing outside it."""
    pattern = rules.container_startup.output[0]
    files = {pattern.format(runtime=rt) for rt in container_runtimes()}
    for rt in {p.runtime for p in POINTS} - set(NATIVE_RUNTIMES):
        made = pattern.format(runtime=rt)
        image = runtime_image(config, rt, POINTS)
        if Path(made).is_file() and Path(image.manifest).is_file():
            files.add(made)
    return sorted(files)


def run_inputs(wildcards):
    """What a point waits for: the staged and verified dataset or the model, and the
    image manifest. A plain list (no names: Snakemake pays for unpack() per job on
    10,000-point sweeps); the harness derives the same paths from the same function.
    The set must not change between versions: with rerun-triggers [input], a new set
    would re-run (and so delete) every finished measurement of a campaign.
    """
    inputs = point_inputs(wildcards.workload, wildcards.runtime, config)
    # ancient(): a re-staged dataset or rebuilt image never re-runs (and so never
    # deletes) a finished measurement; points still missing wait for them as usual.
    return [ancient(path) for path in inputs.values()]


def point_cores(wildcards):
    return int(wildcards.ranks) * int(wildcards.threads)


def run_workload(wildcards):
    return config["workloads"][wildcards.workload]


# run_point is a shell job (python workflow/scripts/run_point.py), not a script: job:
# Snakemake reads and checks the source of every script: job while planning (~8% of
# `snakemake -n` on a 10,000-point sweep). The harness gets the effective config (config
# files + --configfile + --config) from this file, named by its content, written when
# the workflow is parsed (also inside Slurm jobs, identically).
def write_run_config(cfg):
    text = json.dumps(cfg, sort_keys=True, default=str)
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    path = Path(".snakemake", "scalesweep", f"config-{digest}.json")
    if not path.is_file():
        try:
            write_json_atomic(path, cfg)
        except OSError as exc:  # a read-only campaign can still be planned and reported
            print(
                f"scalesweep: cannot write {path} ({exc}): no point can run",
                file=sys.stderr,
            )
    return str(path)


RUN_CONFIG = write_run_config(config)
# run_point's command line, with the harness and the config file written in (not params:
# Snakemake formats every param of every job, ~1.5% of planning 10,000 points).
RUN_POINT_SHELL = (
    f"python {shlex.quote(in_repo('workflow/scripts/run_point.py'))} "
    f"--config {shlex.quote(RUN_CONFIG)} ".replace("{", "{{").replace("}", "}}")
    + "--metrics {output.metrics:q} --log {log:q}"
)
_DECIDE = (
    f"python {shlex.quote(in_repo('workflow/scripts/decide_repeats.py'))} "
    f"--config {shlex.quote(RUN_CONFIG)} ".replace("{", "{{").replace("}", "}}")
)
DECIDE_ROUND_SHELL = "".join(
    [_DECIDE, "--out {output:q} --round {wildcards.round} {input:q} > {log:q} 2>&1"]
)
DECIDE_FINAL_SHELL = "".join(
    [_DECIDE, "--out {output:q} --final {input:q} > {log:q} 2>&1"]
)


# --- Isolation: nothing of ours runs beside a measurement --------------------------------
# Locally a measurement (a sweep point, the container start-up timing) takes every core
# Snakemake may use (--cores N, all, or a profile's cores): the scheduler then starts no
# other job beside it, whatever profile or --resources the user gives (or forgets).
# On a Slurm site a point asks for its own geometry (whole nodes, the site's
# slurm.exclusive); the local test cluster serialises every job with its profile's
# `measure` resource (profiles/local-slurm), because its "nodes" share this host's cores.
def core_budget():
    """Every core Snakemake may use; None where it has no core budget yet (some dry
    runs, `--report`)."""
    try:
        return max(int(workflow.cores), 1)
    except WorkflowError:
        return None


def measurement_threads(wildcards):
    budget = None if SLURM_SITE else core_budget()
    if budget is None:  # Slurm: a job of the point's own geometry (never local)
        return point_cores(wildcards) if "ranks" in wildcards.keys() else 1
    return budget


# measurement_threads as a number where it is one for every job (off Slurm, with a core
# budget): Snakemake calls a threads function for each of 10,000 jobs
MEASUREMENT_THREADS = (None if SLURM_SITE else core_budget()) or measurement_threads


def all_cores(wildcards):
    """Every core Snakemake may use; 1 without a core budget."""
    return core_budget() or 1


# --- Interleaved blocks and adaptive repeats (scalesweep.plan.adaptive) ----------------------
from scalesweep.plan.sweep import workload_runtimes  # noqa: E402
from scalesweep.plan.adaptive import (  # noqa: E402
    DECISION_JSON,
    FINAL_JSON,
    SERIES_DIR,
    Series,
    asked_blocks,
    block_bounds,
    is_adaptive,
    read_decision,
    recorded_decision,
    run_priority,
    series_of,
    walks_decisions,
)

SERIES = series_of(SELECTED)  # the series this run measures
SERIES_INDEX = {s: i for i, s in enumerate(SERIES)}
ADAPTIVE = walks_decisions(config, SELECTED, SELECTION)
# the logs of run.smk's repeats_decision and series_done (outputs: DECISION_JSON, FINAL_JSON)
DECISION_LOG = f"logs/decisions/{SERIES_DIR}/after{{round}}.log"
FINAL_LOG = f"logs/decisions/{SERIES_DIR}/final.log"


def point_priority(wildcards):
    """Measurements in blocks, runtimes interleaved (native, container, container,
    native ...): scalesweep.plan.adaptive.run_priority."""
    return run_priority(point_of(wildcards), config, SERIES_INDEX)


def series_point_metrics(series, repeats):
    return [
        point_metrics(series.point(rt, k))
        for k in repeats
        for rt in series.runtimes(config)
    ]


def series_walk(series):
    """(metrics files, decision files) the series has asked for so far: the minimum of
    blocks, then one more block per decision that wanted more (scalesweep.plan.adaptive.
    asked_blocks, which `scalesweep status` uses too). Raises Snakemake's
    IncompleteCheckpointException at the first decision not yet made (the workflow then
    waits for it and asks again); refuses, naming it, a decision file that cannot be
    walked (scalesweep.plan.adaptive.read_decision)."""
    decisions = []

    def decision(round_):
        out = checkpoints.repeats_decision.get(**series.as_dict(), round=round_).output[
            0
        ]
        decisions.append(out)
        made, problem = read_decision(out)
        if problem:
            raise refusal(
                f"scalesweep: {out}: {problem}. Delete it and run again: the decision "
                "is made anew from its series' runs"
            )
        return made

    blocks = asked_blocks(series, config, decision)
    return series_point_metrics(series, range(1, blocks + 1)), decisions


def decision_inputs(wildcards):
    series = Series.from_wildcards(wildcards)
    return [
        ancient(f)
        for f in series_point_metrics(series, range(1, int(wildcards.round) + 1))
    ]


def series_inputs(wildcards):
    metrics, decisions = series_walk(Series.from_wildcards(wildcards))
    return [ancient(f) for f in metrics] + decisions


def aggregate_metrics(wildcards):
    """All requested points; with analysis.partial only those already measured.

    With adaptive repeats the points of every series are those its decisions asked for.
    The rules that read them also depend on every series' final.json (a separate,
    static input: series_final_files), so each series goes on independently of the
    others while this function waits for one decision at a time.
    """
    partial = config.get("analysis", {}).get("partial", False)
    if not ADAPTIVE:
        files = metrics_files()
    elif partial:
        files = [
            f
            for s in SERIES
            for f in series_point_metrics(
                s, range(1, block_bounds(config, s.workload)[1] + 1)
            )
        ]
    else:
        files = []
        for s in SERIES:
            walked = series_walk(s)[0]
            files += walked + measured_beyond(s, walked)
    files += measured_outside(files)
    if partial:
        return [f for f in files if Path(f).is_file()]
    return files


def measured_on_disk(series, history=False):
    """The series' metrics files on disk, every runtime and repeat; with ``history``
    also the repeats being measured again (scalesweep rerun moved their run to history/).
    """
    found = []
    base = Path(RUNS_DIR, series.path)
    for block in sorted(base.glob("rep*")) if base.is_dir() else []:
        if not block.name[3:].isdigit():
            continue
        for runtime in series.runtimes(config):
            run = block / runtime
            kept = (run / METRICS_JSON).is_file() or (
                history and (run / HISTORY_DIR).is_dir()
            )
            if kept:
                found.append(str(run / METRICS_JSON))
    return found


def measured_outside(files):
    """With `only:`, the metrics already on disk for points of the sweep (any repeat)
    that ``files`` does not name: points outside the selection, and repeats beyond what
    this run asks for. They stay in the summary and are never measured by this run.
    """
    if SELECTION.everything:
        return []
    named = set(files)
    return [f for s in series_of(POINTS) for f in measured_on_disk(s) if f not in named]


def measured_beyond(series, walked):
    """Metrics files of the series already on disk beyond the blocks its decisions now
    ask for: a re-measured repeat makes its decisions run again, and a new decision may
    stop the series earlier than the old one did; what was measured stays in the summary.
    """
    walked = set(walked)
    return [f for f in measured_on_disk(series, history=True) if f not in walked]


def requested_metrics(wildcards):
    """Every point this run measures, an input of the default target; with adaptive
    repeats those its series' decisions asked for so far. Named there because Snakemake
    re-makes a missing intermediate file only when a job that needs it must run anyway: with
    the aggregation up to date, a deleted point (or one whose failed attempt left no
    metrics.json) would otherwise never be measured again. With analysis.partial,
    nothing: that run aggregates and reports what exists, it measures nothing.
    """
    if config.get("analysis", {}).get("partial", False):
        return []
    if not ADAPTIVE:
        return metrics_files()
    return [f for s in SERIES for f in series_walk(s)[0]]


def series_final_files():
    """Every series' final.json (adaptive repeats): of the series this run measures (made
    when missing; with analysis.partial none, as that run waits for no series), and the
    final.json already made of every other series of the sweep whose runs are all on disk.
    So a run that selects part of a finished campaign (only:) or aggregates what exists
    (analysis.partial) names the same inputs as the whole run, and re-makes no summary
    (rerun-triggers: input); a series not finished outside the selection is not named, so
    nothing outside it is made."""
    partial = config.get("analysis", {}).get("partial", False)
    files = set() if partial or not ADAPTIVE else {final_json(s) for s in SERIES}
    if (partial or not SELECTION.everything) and is_adaptive(config, POINTS):
        files.update(
            final_json(s)
            for s in series_of(POINTS)
            if Path(final_json(s)).is_file() and finished_on_disk(s)
        )
    return sorted(files)


def final_json(series):
    return FINAL_JSON.format(**series.as_dict())


def finished_on_disk(series):
    """Whether every decision and run ``series`` asks for under this config is on disk,
    read from the files as `scalesweep status` reads them (scalesweep.plan.adaptive.
    recorded_decision): its rule series_done then has nothing to make."""
    unmade = []

    def decision(round_):
        made = recorded_decision(".", series, round_)
        if made is None:
            unmade.append(round_)
        return made

    blocks = asked_blocks(series, config, decision)
    runs = series_point_metrics(series, range(1, blocks + 1))
    return not unmade and all(Path(f).is_file() for f in runs)


# --- Slurm: run_point's resources for snakemake-executor-plugin-slurm -------------------
# One sweep point = one Slurm job whose allocation has exactly the point's geometry (nodes,
# ranks per node, threads per rank, GPUs). The values come from scalesweep.run.slurm (pure,
# unit-tested; its docstring says what the plugin makes of each). Partition, account and
# QOS come from the site profile (profiles/<site>/config.yaml).
from scalesweep.run.slurm import (  # noqa: E402
    SlurmConfigError,
    account_problem,
    slurm_request,
)

# (point, attempt) -> SlurmRequest: run_point has 10 resource functions, and each used to
# compute the whole request again (10 slurm_request calls per job).
_SLURM_REQUESTS = {}


def point_slurm(wildcards, attempt=1):
    point = point_of(wildcards)
    request = _SLURM_REQUESTS.get((point, attempt))
    if request is None:
        try:
            request = slurm_request(point, run_workload(wildcards), config, attempt)
        except SlurmConfigError as exc:
            raise refusal(f"scalesweep config: {exc}") from None
        _SLURM_REQUESTS[(point, attempt)] = request
    return request


def slurm_nodes(wildcards):
    return point_slurm(wildcards).nodes


def slurm_tasks(wildcards):
    return point_slurm(wildcards).tasks


def slurm_tasks_per_node(wildcards):
    return point_slurm(wildcards).tasks_per_node


def slurm_mpi(wildcards):
    return point_slurm(wildcards).mpi


def slurm_cpus_per_task(wildcards):
    return point_slurm(wildcards).cpus_per_task


def slurm_gpu(wildcards):
    return point_slurm(wildcards).gpu


def slurm_extra(wildcards):
    return point_slurm(wildcards).slurm_extra


def slurm_runtime(wildcards, attempt):
    return point_slurm(wildcards, attempt).runtime


def slurm_mem_mb(wildcards):
    return point_slurm(wildcards).mem_mb


def slurm_constraint(wildcards):
    return point_slurm(wildcards).constraint


RUN_POINT_SLURM_RESOURCES = (
    dict(
        nodes=slurm_nodes,
        tasks=slurm_tasks,  # ranks, when 1 per node (several ranks only)
        tasks_per_node=slurm_tasks_per_node,  # ranks per node, when > 1
        mpi=slurm_mpi,  # "srun" with several ranks: no `srun -n1` around the job
        cpus_per_task=slurm_cpus_per_task,  # threads per rank (Frontier: 7)
        gpu=slurm_gpu,  # one process with G GPUs: --gpus=G
        slurm_extra=slurm_extra,  # --gpus-per-task/--gpu-bind, --core-spec, site extras
        runtime=slurm_runtime,  # minutes; doubles with each retry, capped by the site
        mem_mb=slurm_mem_mb,  # per node; 0 = no --mem (the node's default)
        constraint=slurm_constraint,  # nvme when the dataset is staged node-locally
    )
    if SLURM_SITE
    else {}
)


def check_writable(directories=("results", "logs")):
    """onstart: a read-only or full campaign directory refused before any job starts,
    naming the directory (the harness checks each point's directory again)."""
    from scalesweep.record.pointdir import writable_problem

    for name in directories:
        problem = writable_problem(name)
        if problem:
            raise WorkflowError(f"scalesweep: {problem}")


WORKFLOW_OWNER = Path(".snakemake", "scalesweep", "workflow.json")


def record_owner():
    """onstart: who runs this workflow (host, pid and its start time, boot): `scalesweep
    status` tells a live run on another login node from a killed one by it."""
    from scalesweep.record.pointdir import owner_record

    write_json_atomic(WORKFLOW_OWNER, owner_record())


# --- Before any job: the profile agrees with the site -------------------------------------
# Checked while the workflow is parsed (below, where this run's command line is read):
# a refused profile stops the workflow before its first job, dry runs included.
def profile_problem(args):
    """Why this run's profile does not fit the site, or None: a Slurm site without a
    Slurm profile (its points would be submitted without their geometry,
    RUN_POINT_SLURM_RESOURCES, or run here side by side), a Slurm account taken from a
    variable that is unset, a Slurm profile on a site without Slurm. ``args``: the
    command line as Snakemake read it (``snakemake_args``); None (not Snakemake's command
    line, or inside a Slurm job, checked where it was submitted): nothing to check.
    Commands that run no job (--lint, --report, --list-rules, ...) are not checked."""
    if args is None or any(getattr(args, name, None) for name in NO_JOBS):
        return None
    resources = default_resources(args)  # the profile's default-resources, as given
    account = resources.get("slurm_account")
    partition = resources.get("slurm_partition")
    if SLURM_SITE and account is None and partition is None:
        return (
            f"site {SITE['name']!r} is a Slurm site (scheduler: slurm): its points are Slurm "
            "jobs of their own geometry, submitted by its Slurm profile (e.g. --profile "
            "profiles/frontier, profiles/odo, profiles/local-slurm). Without one they would "
            "run here, side by side; use the profile, or a site without scheduler"
        )
    if SLURM_SITE:
        return account_problem(account, os.environ)
    if account is None and partition is None:
        return None
    return (
        f"a Slurm profile (its default-resources name slurm_partition or slurm_account) "
        f"with site {SITE['name']!r}, whose scheduler is {SITE['scheduler']!r}: its points "
        "declare no Slurm geometry and would be submitted as 1-core jobs. Name a Slurm "
        "site in the config (`site: frontier`, odo or local-slurm: profiles/frontier, "
        "profiles/odo and profiles/local-slurm name theirs) or run without the Slurm profile"
    )


# --- What each point's Slurm job is: its sbatch options and its srun line ----------------
# On a Slurm site rule run_point's shell command ends in a comment, printed by a dry run
# (the Slurm profiles set printshellcmds) and inert when the command runs:
#   python .../run_point.py ...  # sbatch -A abc123 -p batch -t 30 -C nvme --nodes=2 ...
#   ; OMP_NUM_THREADS=7 ... srun --nodes=2 --ntasks=16 ... apptainer exec --rocm ...
# the options the Slurm executor plugin submits the job with (scalesweep.run.slurm:
# sbatch_options, from the job's evaluated resources, profile defaults and retries
# included, and the plugin's settings of this command line: --slurm-qos ...) and the
# line the point launches its payload with inside the job (scalesweep.run.slurm.
# srun_template: the harness's own launch, with the payload's arguments). One params
# function, also the profile check: one call per job. A dry run ends with a summary
# (scalesweep.campaign.dry_run.dry_run_summary).
import atexit  # noqa: E402

from scalesweep.platform.snakemake_adapter import default_resources  # noqa: E402
from scalesweep.run.slurm import (  # noqa: E402
    POINT_SLOT,
    plugin_settings,
    sbatch_options,
    snakemake_args,
    srun_template,
)

# (workload, runtime, nodes, gpus, ranks, threads) -> srun line with slurm.POINT_SLOT:
# every repeat of a geometry shares it, but for its directory
_SRUN_LINES = {}
# This run's command line as Snakemake read it (scalesweep.run.slurm.snakemake_args), read
# once, here while the workflow is parsed (never while jobs run), its relative paths (a
# --profile) from the directory Snakemake started in: the shell's $PWD, else this one
# (the current directory is never changed). Outside a Slurm job only; None else, or where
# it does not read (the workflow run through snakemake.api: no profile to check). Its
# profile is checked against the site here (profile_problem), before any job; on a Slurm
# site it also gives the sbatch options a dry run prints (SUBMISSION_ARGS).
COMMAND_LINE = (
    snakemake_args(sys.argv[1:], [os.environ.get("PWD"), os.getcwd()])
    if not in_slurm_job()
    else None
)
# the options of a command that runs no job: the profile is not checked for it
NO_JOBS = (
    "lint",
    "report",
    "list_rules",
    "list_target_rules",
    "summary",
    "detailed_summary",
    "unlock",
    "dag",
    "rulegraph",
    "filegraph",
)
_PROFILE_PROBLEM = profile_problem(COMMAND_LINE)
if _PROFILE_PROBLEM:
    raise WorkflowError(f"scalesweep: {_PROFILE_PROBLEM}")
SUBMISSION_ARGS = COMMAND_LINE if SLURM_SITE else None
# the Slurm plugin's settings of it (--slurm-qos ...), as the plugin submits with them
SLURM_SETTINGS = plugin_settings(SUBMISSION_ARGS)
DRY_RUN = bool(getattr(SUBMISSION_ARGS, "dryrun", False))
# the run_point jobs a dry run lists: point path -> (point, nodes, runtime)
DRY_RUN_LISTED = {}


def print_dry_run_summary():
    """The end of a dry run on a Slurm site (atexit: Snakemake runs no onsuccess or
    onerror hook in a dry run; scalesweep.campaign.dry_run.print_dry_run_summary, one line where it
    cannot be made). Nothing where no run_point job was listed or this run refused one
    (REFUSED: Snakemake stopped)."""
    if DRY_RUN_LISTED and not REFUSED:
        from scalesweep.campaign.dry_run import print_dry_run_summary as print_summary

        print_summary(DRY_RUN_LISTED, config, SLURM_SETTINGS)


if DRY_RUN:
    atexit.register(print_dry_run_summary)


def launch_comment(wildcards, resources):
    """On a Slurm site, outside a Slurm job, the comment; "" else (inside the job the
    params are evaluated again, and nothing prints them)."""
    if not SLURM_SITE or in_slurm_job():
        return ""
    point = point_of(wildcards)
    key = (
        point.workload,
        point.runtime,
        point.nodes,
        point.gpus,
        point.ranks,
        point.threads,
    )
    srun = _SRUN_LINES.get(key)
    if srun is None:
        try:
            srun = srun_template(point, run_workload(wildcards), config, RUNS_DIR)
        except Exception as exc:  # informational: never stops a submission
            srun = f"(launch line not shown: {type(exc).__name__}: {exc})"
        _SRUN_LINES[key] = srun
    if DRY_RUN:
        DRY_RUN_LISTED[point.path] = (
            point,
            resources.get("nodes"),
            resources.get("runtime"),
        )
    # one line, whatever a path holds
    unknown = (
        ""
        if SLURM_SETTINGS is not None
        else " [the plugin's --slurm-* options: unknown]"
    )
    comment = (
        f"  # sbatch {sbatch_options(resources, settings=SLURM_SETTINGS)}{unknown} ; "
        f"{srun.replace(POINT_SLOT, point.path)}"
    )
    return comment.replace("\n", " ").replace("\r", " ")


# run_point's params and command: with the comment on a Slurm site (params.launch_comment)
RUN_POINT_PARAMS = dict(launch_comment=launch_comment) if SLURM_SITE else {}
RUN_POINT_COMMAND = "".join(
    [RUN_POINT_SHELL, "{params.launch_comment}" if SLURM_SITE else ""]
)


# Reading a few JSON/CSV files and drawing two figures: on the submit host, never a queued
# Slurm job (on Frontier a job can wait hours, and only 4 may be eligible to run at once).
localrules:
    aggregate,
    plot_scaling,
    plot_llm,


# --- Report (workflow/rules/report.smk): which figures exist and how they are labelled ---
# Labels come from the config's sweep, not from the data, so a figure reads the same while
# points are still missing (analysis.partial).
from scalesweep.plan.sweep import RUNTIMES  # noqa: E402


def load_targets():
    """Each swept LLM workload's latency target (scalesweep.record.load.target_of: None
    where it names none), or None where no LLM workload is swept (no load figures)."""
    from scalesweep.plan.kinds.llm import workload_targets

    names = report_workloads("llm")
    return workload_targets(config, names) if names else None


def report_workloads(payload=None):
    """The sweep's workloads; only those of this workload kind (scalesweep.plan.kinds) if
    given."""
    return sorted(
        {
            p.workload
            for p in POINTS
            if payload is None or config["workloads"][p.workload]["payload"] == payload
        }
    )


def _report_span(values):
    values = sorted(set(values))
    return str(values[0]) if len(values) == 1 else f"{values[0]}-{values[-1]}"


def workload_report_labels(figure):
    """report() labels of a per-workload figure: workload, runtimes compared, scale swept."""

    def report_labels(wildcards):
        mine = [p for p in POINTS if p.workload == wildcards.workload]
        kind = kind_of(config["workloads"][wildcards.workload])
        unit = kind.count_unit(mine)
        counts = [kind.scaling_count(p) for p in mine]
        runtimes = [r for r in RUNTIMES if any(p.runtime == r for p in mine)]
        return {
            "workload": wildcards.workload,
            "runtimes": ", ".join(runtimes),
            "scale": f"nodes {_report_span(p.nodes for p in mine)}, {unit} {_report_span(counts)}",
            "figure": figure,
        }

    return report_labels


# The summary tables in the report, each twice with one caption, category and labels: as a
# table to read (<name>.html, report.smk: report_pages) and as the CSV to download (the
# same labels, the last one marked "(CSV)": it lists after its table, never in its place).
# name: (caption in workflow/report/, category, subcategory, labels)
REPORT_TABLES = {
    "overhead": ("overhead_table.rst", "Tables", None, {"table": "container overhead"}),
    "scaling": ("scaling_table.rst", "Tables", None, {"table": "scaling"}),
    "llm": ("llm_table.rst", "Tables", None, {"table": "LLM inference"}),
    "runs": ("runs.rst", "Tables", None, {"table": "runs"}),
    "epochs": ("epochs_table.rst", "Tables", None, {"table": "per-epoch times"}),
    "memory": (
        "memory_table.rst",
        "Tables",
        None,
        {"table": "peak memory, native vs containers"},
    ),
    "accuracy_parity": (
        "accuracy_parity.rst",
        "Tables",
        None,
        {"table": "accuracy parity"},
    ),
    "achieved_rate": (
        "achieved_rate.rst",
        "Tables",
        None,
        {"table": "achieved FLOP rate"},
    ),
    "mpi": ("mpi_table.rst", "Tables", None, {"table": "MPI library and Allreduce"}),
    "data_path": ("data_path.rst", "Tables", None, {"table": "data path"}),
    "decomposition": (
        "decomposition.rst",
        "Tables",
        None,
        {"table": "where the container's cost goes"},
    ),
    "differences": (
        "differences.rst",
        "Tables",
        None,
        {"table": "what differs between native and container"},
    ),
    "llm_concurrency": (
        "llm_concurrency.rst",
        "Tables",
        None,
        {"table": "LLM concurrency levels"},
    ),
    "llm_load": (
        "llm_load.rst",
        "LLM serving under load",
        "tables",
        {"item": "table: latency percentiles, throughput and goodput per load level"},
    ),
    "llm_load_overhead": (
        "llm_load_overhead.rst",
        "LLM serving under load",
        "tables",
        {"item": "table: the container's effect at each load level"},
    ),
    "drift": (
        "drift_table.rst",
        "Tables",
        None,
        {"table": "machine drift and run-to-run spread"},
    ),
    "fits": (
        "fits_table.rst",
        "Scaling",
        "fits",
        {"workload": "all", "runtime": "all", "item": "table: fitted laws"},
    ),
    "fit_predictions": (
        "fits_predictions.rst",
        "Scaling",
        "fits",
        {"workload": "all", "runtime": "all", "item": "table: predictions"},
    ),
    "provenance": (
        "provenance.rst",
        "Provenance",
        None,
        {"table": "per-run provenance"},
    ),
    "missing": (
        "missing.rst",
        "Sweep completeness",
        "all requested points",  # with the completeness figure (report.smk)
        {"item": "table: missing and failed points"},
    ),
    "startup": (
        "startup_table.rst",
        "Container start-up",
        "all container runtimes",
        {"runtime": "all", "item": "table: medians native vs container"},
    ),
    "made": ("made.rst", "About this report", None, {"table": "made from"}),
    "significance": (
        "significance.rst",
        "About this report",
        None,
        {"table": "many comparisons: chance and FDR"},
    ),
    "rules": ("rules.rst", "About this report", None, {"table": "benchmarking rules"}),
}


def report_table(name, view=False):
    """report() of summary table ``name``: results/summary/<name>.csv, or with ``view``
    its HTML page <name>.html (REPORT_TABLES)."""
    caption, category, subcategory, labels = REPORT_TABLES[name]
    if not view:
        last = list(labels)[-1]
        labels = {**labels, last: f"{labels[last]} (CSV)"}
    return report(
        f"results/summary/{name}.{'html' if view else 'csv'}",
        caption=f"../report/{caption}",
        category=category,
        subcategory=subcategory,
        labels=labels,
    )


def report_table_title(name):
    """The heading of a table's page: its last label ("per-epoch times")."""
    return list(REPORT_TABLES[name][3].values())[-1]


# --- Scaling-law fits (workflow/rules/fits.smk) -------------------------------------------
def fit_series():
    """The training series swept at enough counts for a fit, as expand(..., zip)
    keywords: one fit figure each (scalesweep.plan.fitlaws.figure_series; fits.csv says why
    the others have none)."""
    from scalesweep.plan.fitlaws import figure_series

    series = figure_series(POINTS, config)
    return {"workload": [w for w, _ in series], "runtime": [r for _, r in series]}
