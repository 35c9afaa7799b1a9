# Helpers shared by the rules: config validation, sweep expansion, input functions.
import os
import sys
from pathlib import Path

from snakemake.utils import min_version, validate

min_version("9.0")

sys.path.insert(0, str(Path(workflow.basedir) / "workflow"))

from scalesweep.sweep import (  # noqa: E402
    POINT_DIR,
    WILDCARD_CONSTRAINTS,
    SweepError,
    SweepPoint,
    sweep_points,
)


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


wildcard_constraints:
    **WILDCARD_CONSTRAINTS,
    dataset=r"[a-z][a-z0-9_]*",


RUN_DIR = "results/runs/" + POINT_DIR


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


# Rules call `python` and `scalesweep`: make them the interpreter running this workflow
# (the quickstart's .venv) unless a conda environment is in use.
os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
