# Helpers shared by the rules: config validation, sweep expansion, input functions.
import os
import sys
from pathlib import Path

from snakemake.utils import min_version, validate

min_version("9.0")

sys.path.insert(0, str(Path(workflow.basedir) / "workflow"))
# Rules call `python`: make it the interpreter running this workflow (the quickstart's
# .venv) unless a conda environment is in use.
os.environ.update(
    PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]])
)

from scalesweep.sweep import (  # noqa: E402
    POINT_DIR,
    WILDCARD_CONSTRAINTS,
    SweepError,
    SweepPoint,
    sweep_points,
)


envvars:
    "PATH",


validate(config, schema="../schemas/config.schema.yaml")
config["_code_root"] = workflow.basedir

try:
    POINTS = sweep_points(config)
except SweepError as exc:
    raise WorkflowError(f"scalesweep config: {exc}") from None

for _name, _wl in config["workloads"].items():
    if _wl["payload"] == "cnn" and _wl.get("dataset") not in config["datasets"]:
        raise WorkflowError(
            f"scalesweep config: workload {_name}: dataset {_wl.get('dataset')!r} "
            f"is not defined under datasets (defined: {', '.join(config['datasets']) or 'none'})"
        )
    if _wl["payload"] == "llm" and _wl.get("model") not in config.get("models", {}):
        raise WorkflowError(
            f"scalesweep config: workload {_name}: model {_wl.get('model')!r} "
            f"is not defined under models (defined: {', '.join(config.get('models', {})) or 'none'})"
        )


wildcard_constraints:
    **WILDCARD_CONSTRAINTS,
    dataset=r"[a-z][a-z0-9_]*",
    model=r"[a-z][a-z0-9_]*",


def point_of(wildcards):
    return SweepPoint.from_wildcards(wildcards)


def metrics_files(points=None):
    return [f"results/runs/{p.path}/metrics.json" for p in (points or POINTS)]


def sweep_banner():
    by_workload = {}
    for p in POINTS:
        by_workload[p.workload] = by_workload.get(p.workload, 0) + 1
    parts = ", ".join(f"{w}: {n} points" for w, n in by_workload.items())
    return f"scalesweep: {len(POINTS)} sweep points ({parts})"


def model_params(wildcards):
    m = {"path": "", "name": "", "seed": 0, "ollama_bin": "ollama"}
    m.update(config["models"][wildcards.model])
    return m


def dataset_params(wildcards):
    return config["datasets"][wildcards.dataset]


def run_inputs(wildcards):
    point = point_of(wildcards)
    wl = config["workloads"][point.workload]
    inputs = {}
    if wl["payload"] == "cnn":
        inputs["dataset"] = f"resources/datasets/{wl['dataset']}"
        inputs["verified"] = f"resources/datasets/{wl['dataset']}.verified.json"
    elif wl["payload"] == "llm":
        inputs["model"] = f"resources/models/{wl['model']}"
    return inputs


def point_cores(wildcards):
    point = point_of(wildcards)
    return point.ranks * point.threads


def run_workload(wildcards):
    return config["workloads"][wildcards.workload]


def aggregate_inputs(wildcards):
    """All requested points; with analysis.partial only those already measured."""
    files = metrics_files()
    if config.get("analysis", {}).get("partial", False):
        files = [f for f in files if Path(f).is_file()]
    return {"metrics": files}
