"""Payload arguments per workload kind: what `python scripts/<payload>.py` is given, and
the files a point reads (dataset or model, image and its manifest).

Every function here takes a validated config (``scalesweep.plan.config.check_config``: the
schema's defaults filled in), and reads its values rather than repeating the defaults.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scalesweep.plan.imageset import workload_image
from scalesweep.plan.sweep import SweepPoint, is_native
from scalesweep.platform.site import site_of
from scalesweep.record.dataset import STAGED_DIR
from scalesweep.record.hostenv import expand_vars, with_user
from scalesweep.record.pointdir import OUTPUTS_JSONL, PAYLOAD_JSON

CNN_PAYLOAD = "scripts/train_cnn.py"
LLM_PAYLOAD = "scripts/infer_llm.py"


@dataclass
class Invocation:
    script: str  # relative to the code root
    args: list[str]
    data_dir: str  # bound read-only-in-spirit as the data mount
    image: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    stage_from: str = ""  # copy this verified dataset to data_dir (node-local) first
    dataset: str = ""  # the staged dataset, checked against its manifest before each run


def point_inputs(workload: str, runtime: str, config: dict) -> dict[str, str]:
    """The files a point of `workload` in `runtime` reads, by name (paths relative to the
    campaign): the verified dataset (CNN) or the staged model (LLM), and for a container
    point the manifest of the workload's image (built, pulled or described: every image
    has one). One function for both sides: the Snakefile's dependencies of run_point and
    the harness's payload paths.
    """
    wl = config["workloads"][workload]
    inputs = {}
    if wl["payload"] == "cnn":
        inputs["dataset"] = f"{STAGED_DIR}/{wl['dataset']}"
        inputs["verified"] = f"{STAGED_DIR}/{wl['dataset']}.verified.json"
    elif wl["payload"] == "llm":
        inputs["model"] = f"resources/models/{wl['model']}"
    if not is_native(runtime):
        image = workload_image(config, workload, runtime)
        # An image used in place is described by rule describe_image (a preparing job,
        # run first) but is no input of its points: a campaign whose image was prebuilt
        # before images had manifests keeps its finished points (rerun-triggers [input]
        # re-runs a point whose input set changed). The harness reads the manifest where
        # it exists (image_manifest_of).
        if image.how != "local":
            inputs["image_manifest"] = image.manifest
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


def node_local_dir(config: dict, dataset: str) -> str:
    """Where a point reads ``dataset`` when it is copied to node-local storage first
    (``datasets.<name>.node_local: true``): the site's ``storage.node_local_path``, its
    variables expanded (``$USER`` always set), then the dataset's name; "" when it is
    read where it was staged."""
    if not config["datasets"][dataset]["node_local"]:
        return ""
    path = site_of(config)["storage"]["node_local_path"]
    return str(Path(expand_vars(path, with_user(dict(os.environ)))) / dataset)


def cnn_parallel(parallel: str, world_size: int, device: str) -> str:
    """The CNN payload's ``--parallel``: ``single`` for one CPU rank of ``ddp`` (no process
    group to time), else the workload's mode (``ddp`` on a GPU: NCCL even at one rank)."""
    if parallel == "ddp" and world_size == 1 and device == "cpu":
        return "single"
    return parallel


def cnn_invocation(point: SweepPoint, wl: dict, config: dict, inputs: dict, out_dir: Path) -> Invocation:
    shared_dir = str(Path(inputs["dataset"]).resolve())
    ds_name = wl["dataset"]
    ds = config["datasets"][ds_name]
    node_local = node_local_dir(config, ds_name)
    dataset_dir = node_local or shared_dir
    # ROCm torch also answers to "cuda"; a site whose GPUs are scheduled but not usable
    # by the payload (node.payload_device: cpu, the project's stand-in of Frontier) trains
    # on the CPU (the run records its `device`)
    on_cpu = point.gpus == 0 or site_of(config)["node"]["payload_device"] == "cpu"
    device = "cpu" if on_cpu else "cuda"
    args = [
        "--data", dataset_dir,
        "--out", str((out_dir / PAYLOAD_JSON).resolve()),
        # one CPU rank of ddp trains alone; on a GPU ddp is DDP over NCCL at any world
        # size (one GPU's baseline carries the same wrapper as eight); mpi always
        # initialises MPI (a 1-rank run loads the same library as a 2-rank one)
        "--parallel", cnn_parallel(wl["parallel"], point.world_size, device),
        "--device", device,
        "--precision", wl["precision"],
        "--epochs", str(wl["epochs"]),
        "--batch-size", str(wl["batch_size"]),
        "--image-size", str(ds["image_size"]),
        "--threads", str(point.threads),
        "--seed", str(wl["seed"]),
        "--test-fraction", str(wl["test_fraction"]),
        "--scaling", wl["scaling"],
        "--data-path", wl["data_path"],
    ]
    info_file = Path(shared_dir) / "dataset.json"
    info = json.loads(info_file.read_text()) if info_file.is_file() else {}
    extra = {"dataset": {"name": ds_name, **info, "read_from": dataset_dir}}
    return Invocation(CNN_PAYLOAD, args, dataset_dir, extra=extra,
                      stage_from=shared_dir if node_local else "", dataset=shared_dir)


def concurrency_levels(wl: dict) -> list[int]:
    """An LLM workload's concurrency levels (``concurrency``: one, or a list: an axis
    measured within each point, the first level the headline)."""
    c = wl["concurrency"]
    return [int(x) for x in c] if isinstance(c, list) else [int(c)]


GPU_VENDOR = {"rocm": "amd", "cuda": "nvidia", "cpu": "none"}


def llm_args(point: SweepPoint, wl: dict, config: dict, inputs: dict, out_dir: Path) -> list[str]:
    """The LLM payload's arguments (reads no file: a dry run shows them before the model
    is staged)."""
    model_dir = Path(inputs["model"]).resolve()
    model_cfg = config["models"][wl["model"]]
    model = model_cfg["name"] if model_cfg["source"] == "ollama" else str(model_dir / "model.gguf")
    out = out_dir.resolve()
    code = Path(config["_code_root"]).resolve()
    args = [
        "--engine", wl["engine"],
        "--api", wl["api"],
        "--model", model,
        "--model-card", str(model_dir / "model.json"),
        "--prompts", str(code / wl["prompts"]),
        "--max-tokens", str(wl["max_tokens"]),
        "--concurrency", str(concurrency_levels(wl)[0]),
        "--warmup", str(wl["warmup"]),
        "--gpus", str(point.gpus),
        "--gpu-vendor", GPU_VENDOR[site_of(config)["node"]["device"]],
        "--threads", str(point.threads),
        "--seed", str(wl["seed"]),
        "--out", str(out / PAYLOAD_JSON),
        "--outputs", str(out / OUTPUTS_JSONL),
        "--server-log", str(out / "server.log"),
    ]
    if len(concurrency_levels(wl)) > 1:
        args += ["--concurrency-levels", ",".join(map(str, concurrency_levels(wl)))]
    if wl["num_requests"]:
        args += ["--num-requests", str(wl["num_requests"])]
    if model_cfg["source"] == "ollama":
        # natively the configured binary; in a container the image's own `ollama`
        ollama_bin = model_cfg["ollama_bin"] if is_native(point.runtime) else "ollama"
        args += ["--ollama-bin", ollama_bin, "--models-dir", str(model_dir / "ollama")]
    return args


def llm_invocation(point: SweepPoint, wl: dict, config: dict, inputs: dict, out_dir: Path) -> Invocation:
    model_dir = Path(inputs["model"]).resolve()
    args = llm_args(point, wl, config, inputs, out_dir)
    card = json.loads((model_dir / "model.json").read_text())
    return Invocation(LLM_PAYLOAD, args, str(model_dir),
                      extra={"model_card": {k: card.get(k) for k in ("name", "synthetic", "sha256", "n_params", "source")}})


def payload_invocation(point: SweepPoint, wl: dict, config: dict, inputs: dict, out_dir: Path) -> Invocation:
    kinds = {"cnn": cnn_invocation, "llm": llm_invocation}
    try:
        build = kinds[wl["payload"]]
    except KeyError:
        raise ValueError(f"workload {point.workload}: unknown payload {wl['payload']!r}") from None
    return build(point, wl, config, inputs, out_dir)


def planned_invocation(point: SweepPoint, wl: dict, config: dict, inputs: dict,
                       out_dir: Path) -> Invocation:
    """The payload, its arguments and its data directory as ``payload_invocation`` gives
    them to the point's run, before the staged files it reads for its record exist (a
    dry run): nothing in ``extra``."""
    if wl["payload"] == "llm":
        return Invocation(LLM_PAYLOAD, llm_args(point, wl, config, inputs, out_dir),
                          str(Path(inputs["model"]).resolve()))
    inv = payload_invocation(point, wl, config, inputs, out_dir)  # reads no file it needs
    return Invocation(inv.script, inv.args, inv.data_dir)
