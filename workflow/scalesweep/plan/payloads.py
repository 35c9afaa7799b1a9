"""Payload arguments per workload kind: what `python scripts/<payload>.py` is given, and
the files a point reads (dataset or model, image and its manifest). What differs by kind
is the kind's (scalesweep.plan.kinds: ``inputs``, ``invocation``, ``planned``).

Every function here takes a validated config (``scalesweep.plan.config.check_config``: the
schema's defaults filled in), and reads its values rather than repeating the defaults.
"""

from __future__ import annotations

from pathlib import Path

from scalesweep.plan.imageset import load_record, workload_image
from scalesweep.plan.kinds import Invocation, kind_of
from scalesweep.plan.kinds.cnn import cnn_parallel, node_local_dir  # noqa: F401  (re-exported)
from scalesweep.plan.kinds.llm import GPU_VENDOR, concurrency_levels  # noqa: F401  (re-exported)
from scalesweep.plan.sweep import SweepPoint, is_native


def point_inputs(workload: str, runtime: str, config: dict) -> dict[str, str]:
    """The files a point of `workload` in `runtime` reads, by name (paths relative to the
    campaign): its kind's inputs (the verified dataset of a CNN, the staged model of an
    LLM), and for a container point the manifest of the workload's image (built, pulled
    or described: every image has one). One function for both sides: the Snakefile's
    dependencies of run_point and the harness's payload paths.
    """
    wl = config["workloads"][workload]
    inputs = kind_of(wl).inputs(wl, config)
    if not is_native(runtime):
        image = workload_image(config, workload, runtime)
        # An image used in place is described by rule describe_image (a preparing job,
        # run first) but is no input of its points: a campaign whose image was prebuilt
        # before images had manifests keeps its finished points (rerun-triggers [input]
        # re-runs a point whose input set changed). The harness reads the manifest where
        # it exists (image_manifest_of).
        if image.how != "local":
            inputs["image_manifest"] = image.manifest
        loaded = load_record(image, runtime)  # a runtime that runs it from its storage
        if loaded:
            inputs["image_load"] = loaded
    return inputs


def image_manifest_of(config: dict, workload: str, runtime: str) -> str | None:
    """The manifest a container point records, if it exists yet (None for native)."""
    if is_native(runtime):
        return None
    manifest = workload_image(config, workload, runtime).manifest
    return manifest if Path(manifest).is_file() else None


def image_location(config: dict, workload: str, runtime: str) -> str:
    """The image the points of ``workload`` in container ``runtime`` run (campaign-
    relative, or the configured path of an image used in place)."""
    return workload_image(config, workload, runtime).path


def payload_invocation(point: SweepPoint, wl: dict, config: dict, inputs: dict, out_dir: Path) -> Invocation:
    """The payload of the point's workload kind, its arguments, data directory and what
    the run records of its inputs."""
    return kind_of(wl).invocation(point, wl, config, inputs, out_dir)


def planned_invocation(point: SweepPoint, wl: dict, config: dict, inputs: dict,
                       out_dir: Path) -> Invocation:
    """The payload, its arguments and its data directory as ``payload_invocation`` gives
    them to the point's run, before the staged files it reads for its record exist (a
    dry run): nothing in ``extra``."""
    return kind_of(wl).planned(point, wl, config, inputs, out_dir)
