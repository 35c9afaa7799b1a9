"""The CNN kind: the OLCF study's image classifier, trained on a staged dataset
(scripts/train_cnn.py), swept over ranks per node (CPU) or GPUs per node."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterable

from scalesweep.plan.kinds.base import (Invocation, Merit, SweepError, WorkloadKind, as_list,
                                        register)
from scalesweep.platform.site import site_of
from scalesweep.record.dataset import STAGED_DIR
from scalesweep.record.geometry import Geometry
from scalesweep.record.hostenv import expand_vars, with_user
from scalesweep.record.pointdir import PAYLOAD_JSON


def steady_epoch_time(epoch_s: list[float]) -> float:
    """Seconds per epoch, excluding the first epoch (warm-up) when there are several."""
    steady = epoch_s[1:] if len(epoch_s) > 1 else epoch_s
    return sum(steady) / len(steady)


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


@register
class CNN(WorkloadKind):
    name = "cnn"
    script = "scripts/train_cnn.py"
    record_payload = "cnn"
    input_key, input_section = "dataset", "datasets"
    stages_dataset = True
    provenance = ("torch",)
    merit = Merit("images_per_s", "images/s", higher_is_better=True, label="training throughput")

    def inputs(self, wl: dict, config: dict) -> dict[str, str]:
        return {"dataset": f"{STAGED_DIR}/{wl['dataset']}",
                "verified": f"{STAGED_DIR}/{wl['dataset']}.verified.json"}

    def per_node_axis(self, wl: dict, node: dict) -> str:
        gpu_machine = node["device"] != "cpu"
        return "gpus_per_node" if wl.get("parallel", "ddp") == "dp" or gpu_machine \
            else "ranks_per_node"

    def check_site(self, name: str, wl: dict, site: dict) -> None:
        if wl.get("parallel", "ddp") == "mpi" and site["launch"]["launcher"] == "torchrun":
            raise SweepError(
                f"workload {name}: parallel 'mpi' starts its ranks with MPI (mpirun or srun), "
                f"and site {site['name']} has launch.launcher 'torchrun': set launch.launcher "
                "to mpirun"
            )

    def geometries(self, name: str, wl: dict, axes: dict, site: dict) -> Iterable[tuple[int, int, int]]:
        node = site["node"]
        gpu_machine = node["device"] != "cpu"
        parallel = wl.get("parallel", "ddp")
        for nodes in as_list(axes["nodes"]):
            if parallel == "dp":
                if not gpu_machine or node["gpus"] < 1:
                    raise SweepError(
                        f"workload {name}: DataParallel is a GPU mode and site {site['name']} "
                        f"has node.device {node['device']!r} with {node['gpus']} GPUs per "
                        "node; nn.DataParallel on CPU would silently do nothing. "
                        "Disable the workload or run on a GPU site."
                    )
                if nodes != 1:
                    raise SweepError(f"workload {name}: DataParallel is single-node, got "
                                     f"nodes={nodes}")
                for gpus in as_list(axes["gpus_per_node"]):
                    yield 1, gpus, 1
            elif gpu_machine:
                for gpus in as_list(axes["gpus_per_node"]):
                    if gpus > 0:
                        yield nodes, gpus, gpus  # one rank per GPU
                    else:  # the node's CPUs alone: ranks from ranks_per_node (default 1)
                        for ranks in as_list(axes.get("ranks_per_node", [1])):
                            yield nodes, 0, ranks
            else:
                for ranks in as_list(axes["ranks_per_node"]):
                    yield nodes, 0, ranks

    def scaling_count(self, point: Any) -> int:
        g = Geometry.of(point)
        if g.gpus and g.ranks == 1:  # DataParallel: one process, many GPUs
            return g.gpus
        return g.world_size

    def invocation(self, point: Any, wl: dict, config: dict, inputs: dict,
                   out_dir: Path) -> Invocation:
        shared_dir = str(Path(inputs["dataset"]).resolve())
        ds_name = wl["dataset"]
        ds = config["datasets"][ds_name]
        node_local = node_local_dir(config, ds_name)
        dataset_dir = node_local or shared_dir
        # ROCm torch also answers to "cuda"; a site whose GPUs are scheduled but not usable
        # by the payload (node.payload_device: cpu, the project's stand-in of Frontier)
        # trains on the CPU (the run records its `device`)
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
        return Invocation(self.script, args, dataset_dir, extra=extra,
                          stage_from=shared_dir if node_local else "", dataset=shared_dir)

    def row(self, metrics: dict) -> dict:
        """The computed figures (scalesweep.record.measures.CNN); the others are read as
        they are (WorkloadKind.values)."""
        epochs = metrics["epoch_s"]
        steady = steady_epoch_time(epochs)
        # images_per_s covers the same epochs as time_s (steady state: the first epoch
        # excluded when there are several); the payload's own images_per_s is over all
        # epochs, warm-up included. images_per_epoch: what every rank together processed.
        per_epoch = metrics.get("images_per_epoch")
        if per_epoch is None and metrics.get("images_per_s") and metrics.get("train_s"):
            per_epoch = metrics["images_per_s"] * metrics["train_s"] / len(epochs)
        mpi = metrics.get("mpi") or {}
        allreduce = metrics.get("allreduce_s") or []
        steps, flops = metrics.get("steps_per_epoch"), metrics.get("flops_per_step")
        return dict(
            time_s=steady,
            epoch_time_first_s=epochs[0],
            images_per_epoch=per_epoch,
            images_per_s=per_epoch / steady if per_epoch and steady > 0 else None,
            # the MPI library the ranks loaded, and whether it was the host's
            mpi_library=mpi.get("library"),
            mpi_library_version=mpi.get("library_version"),
            mpi_origin=mpi.get("origin"),
            # rank 0's seconds per steady epoch in the gradient Allreduce (mpi)
            allreduce_s=steady_epoch_time(allreduce) if allreduce else None,
            # what one rank achieved per steady epoch
            achieved_gflops_per_rank=(flops * steps / steady / 1e9
                                      if flops and steps and steady > 0 else None),
            scaling=metrics.get("scaling", "strong"),
            # the arithmetic the device did (tf32 asked on a CPU is fp32): the peak it is
            # held to
            precision=metrics.get("precision_effective") or metrics.get("precision") or "fp32",
            data_path=metrics.get("data_path", "memory"),
            # rank 0's seconds per steady epoch getting its batches
            data_wait_s=(steady_epoch_time(metrics["data_wait_s"])
                         if metrics.get("data_wait_s") else None),
        )
