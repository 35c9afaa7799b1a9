# What all rules share: the config validated, the sweep's points, the campaign's
# walk (which runs and decisions this run asks for) and the measurement's isolation. Each
# rule file states its own paths and command; the logic lives in workflow/scalesweep.
# Only Snakemake's documented interface (tests/unit/test_public_api.py): the Snakefile language,
# `config`, snakemake.utils, WorkflowError, workflow.cores and the workflow's directory.
import os
import shlex
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake.utils import min_version

min_version("9.0")

# The tree that holds this file (as <tree>/workflow/rules/common.smk), with its package,
# payloads and the files config paths name; also where another Snakefile includes it as
# a module (a deployment's, snakedeploy: workflow.basedir is then that Snakefile's
# directory) and where another checkout of scalesweep is installed (a scratch copy).
REPO = Path(str(workflow.current_basedir)).parents[1]
sys.path.insert(0, str(REPO / "workflow"))
# Rules call `python`: make it the interpreter running this workflow (the quickstart's
# .venv) unless a conda environment is in use.
os.environ.update(
    PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]])
)

from scalesweep.platform.snakemake_adapter import (  # noqa: E402
    release_rate_timers_at_exit,
)

# Snakemake's job-rate timers (a minute long in profiles/local) must not hold the exit
release_rate_timers_at_exit()

from scalesweep.campaign.invocation import Invocation  # noqa: E402
from scalesweep.campaign.parse_time import (  # noqa: E402
    PARTIAL_HINT,
    check_writable,
    completion_message,
    record_owner,
    remeasure_note,
    summary_note,
    sweep_banner,
    write_run_config,
)
from scalesweep.plan.adaptive import DECISION_JSON, FINAL_JSON, SERIES_DIR  # noqa: E402
from scalesweep.plan.adaptive import Series  # noqa: E402
from scalesweep.plan.config import ConfigError, check_config  # noqa: E402
from scalesweep.plan.config_read import schema_typed  # noqa: E402
from scalesweep.plan.kinds import kind_of  # noqa: E402
from scalesweep.plan.sweep import (  # noqa: E402
    POINT_DIR,
    WILDCARD_CONSTRAINTS,
    Selection,
    SweepError,
    SweepPoint,
    select_points,
    sweep_points,
)
from scalesweep.plan.walk import RUNS_LIST, Walk  # noqa: E402
from scalesweep.plan.fitlaws import figure_keywords  # noqa: E402
from scalesweep.plan.image_rules import ImageRules  # noqa: E402
from scalesweep.plan.payloads import point_inputs  # noqa: E402
from scalesweep.platform.site import point_modules, site_of  # noqa: E402
from scalesweep.record.pointdir import METRICS_JSON, RUN_LOG, RUNS_DIR  # noqa: E402
from scalesweep.report.registry import (  # noqa: E402
    load_targets,
    table_item,
    workload_labels,
)
from scalesweep.report import registry  # noqa: E402
from scalesweep.run.slurm import point_resources, scale_resources  # noqa: E402


envvars:
    "PATH",


# --- The config: one validation, before any job ------------------------------------------
# --config values re-typed by the schema (scalesweep.plan.config_read), then Snakemake's
# validate() with the schema's defaults, the site loaded, runtimes and engines checked
schema_typed(config)
try:
    check_config(config)
except ConfigError as exc:
    raise WorkflowError(f"scalesweep config: {exc}") from None
config["_code_root"] = str(REPO)
SITE = site_of(config)
# Points are Slurm jobs on this site (sites/<name>.yaml: scheduler): run_point then
# declares its Slurm geometry (run.smk) and its own threads.
SLURM_SITE = SITE["scheduler"] == "slurm"
# the site's environment modules, loaded in each point job with --sdm env-modules
POINT_MODULES = point_modules(SITE)
# the effective config, as a file the harness and the decisions read (run.smk)
RUN_CONFIG = write_run_config(config)

# This run's command line, read once here (scalesweep.campaign.invocation): its profile
# checked against the site before any job, dry runs included; on a Slurm site each
# point's sbatch options and srun line, and a dry run's summary at its end.
INVOCATION = Invocation(config, SITE, RUNS_DIR, sys.argv[1:])
_PROFILE_PROBLEM = INVOCATION.problem()
if _PROFILE_PROBLEM:
    raise WorkflowError(f"scalesweep: {_PROFILE_PROBLEM}")
INVOCATION.summarise_dry_run_at_exit()


def refusal(message):
    """The WorkflowError refusing ``message`` while planning (from an input, params or
    resource function: Snakemake stops; a dry run then prints no summary of its jobs).
    """
    return WorkflowError(INVOCATION.refusal(message))


# --- The sweep ----------------------------------------------------------------------------
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
    part=r"[1-9][0-9]*",


def point_of(wildcards):
    return SweepPoint.from_wildcards(wildcards)


def in_repo(path):
    """Relative paths in the config name files of the repository, not of the campaign."""
    return str(REPO / path) if not Path(path).is_absolute() else path


# Where a point's measurement goes: rule run_point's output and log, from the one layout
# (scalesweep.plan.sweep.POINT_DIR, SweepPoint.path).
POINT_METRICS = f"{RUNS_DIR}/{POINT_DIR}/{METRICS_JSON}"
POINT_LOG = f"{RUNS_DIR}/{POINT_DIR}/{RUN_LOG}"


# --- The walk: which runs and decisions this run asks for (scalesweep.plan.walk) -----------
# With adaptive repeats each series' decisions are checkpoints (run.smk: repeats_decision):
# a decision's file, or Snakemake's IncompleteCheckpointException until it is made.
def decision_file(series, round_):
    return checkpoints.repeats_decision.get(**series.as_dict(), round=round_).output[0]


WALK = Walk(config, POINTS, SELECTED, SELECTION, decision_file, refusal)
# every series' final.json the summary and the report tables wait for (stats the
# campaign's decision and run files: once per parse)
SERIES_FINAL = WALK.series_final_files()


def runs_lists(wildcards):
    """The lists of runs the summary reads (Walk.runs_lists)."""
    return WALK.runs_lists()


def missing_listed(wildcards):
    """Runs missing on disk whose list is made already, named so that they are measured
    again (Walk.missing_listed)."""
    return WALK.missing_listed()


def runs_list_inputs(wildcards):
    """What a list of runs names (Walk.list_runs): every run of its series the summary
    reads, so that a missing one is measured first."""
    return WALK.list_runs(wildcards.workload, wildcards.arm, wildcards.part)


def decision_inputs(wildcards):
    series = Series.from_wildcards(wildcards)
    return [ancient(f) for f in WALK.decision_inputs(series, int(wildcards.round))]


def series_inputs(wildcards):
    metrics, decisions = WALK.series_walk(Series.from_wildcards(wildcards))
    return [ancient(f) for f in metrics] + decisions


def point_priority(wildcards):
    return WALK.priority(point_of(wildcards))


# --- Images (containers.smk: scalesweep.plan.image_rules) --------------------------------
IMAGE_RULES = ImageRules(config, POINTS, SELECTED, in_repo)
_MISSING_IMAGE = IMAGE_RULES.missing_prebuilt()
if _MISSING_IMAGE:
    raise WorkflowError(f"scalesweep config: {_MISSING_IMAGE}")


def startup_inputs(wildcards):
    inputs = IMAGE_RULES.startup_inputs(wildcards)
    return {name: ancient(path) for name, path in inputs.items()}


# --- A point (run.smk) ------------------------------------------------------------------
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


def launch_comment(wildcards, resources):
    """On a Slurm site: the job's sbatch options and the point's srun line, a comment at
    the end of the command that dry runs print (scalesweep.campaign.invocation)."""
    point = point_of(wildcards)
    workload = config["workloads"][point.workload]
    return INVOCATION.launch_comment(point, workload, resources)


# The harness's interpreter: `python` (a conda environment's, with --sdm conda), but this
# workflow's own by its path where the site loads modules in the jobs: `module purge &&
# module load cray-python ...` puts another python ahead of the venv's on PATH.
HARNESS_PYTHON = shlex.quote(sys.executable) if POINT_MODULES else "python"


def harness(script):
    """`python <script> --config <the effective config> `, braces escaped for shell:
    (the harness and config file written in, not params: Snakemake formats every param
    of every job, ~1.5% of planning 10,000 points)."""
    line = f"{HARNESS_PYTHON} {shlex.quote(in_repo(script))} --config {shlex.quote(RUN_CONFIG)} "
    return line.replace("{", "{{").replace("}", "}}")


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


def point_cores(wildcards):
    return int(wildcards.ranks) * int(wildcards.threads)


def measurement_threads(wildcards):
    budget = None if SLURM_SITE else core_budget()
    if budget is None:  # Slurm: a job of the point's own geometry (never local)
        return point_cores(wildcards) if "ranks" in wildcards.keys() else 1
    return budget


# a number where it is one for every job (off Slurm, with a core budget): Snakemake
# calls a threads function for each of 10,000 jobs
MEASUREMENT_THREADS = (None if SLURM_SITE else core_budget()) or measurement_threads


def all_cores(wildcards):
    """Every core Snakemake may use; 1 without a core budget."""
    return core_budget() or 1


# --- The report's tables (scalesweep.report.registry: caption, category, labels) ---------
def report_table(name, view=False):
    """report() of summary table ``name``: its CSV, or with ``view`` its HTML page."""
    path, keywords = table_item(name, view)
    return report(path, **keywords)


def ablation_csv(wildcards):
    """scalesweep ablate's table (which item of the stack carries a stack difference,
    issue #43) where it has run: an input then, so the next run takes its cause."""
    path = registry.table_csv("ablation")
    return [path] if Path(path).is_file() else []


def report_workloads(payload=None):
    """The sweep's workloads; only those of this workload kind if given."""
    return registry.report_workloads(POINTS, config, payload)
