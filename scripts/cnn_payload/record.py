"""What a CNN run reports: each rank's own record (gathered by rank 0), and the metrics
record rank 0 writes (``scalesweep.record.metrics``: the schema the workflow reads)."""

from __future__ import annotations

import os
import socket
import sys
import time
from dataclasses import dataclass

from cnn_payload.parallel import mpi_info
from scalesweep.record.metrics import container_env, git_commit, host_info, now_iso, peak_rss_mb
from scalesweep.record.stack import process_stack


@dataclass
class RunFacts:
    """What the run learned on the way that its record reports."""

    start_iso: str  # when the payload started (now_iso)
    t_start: float  # time.time() then
    init_s: float = 0.0  # torch.distributed's process group started
    load_s: float = 0.0  # the data read (memory: every image decoded)
    train_images: int = 0  # the training split (the rest held out)
    n_params: int = 0
    step_flops: int | None = None  # one rank, one batch, forward + backward
    precision_effective: str = ""  # tf32 on a CPU is fp32


def rank_record(ranks, startup: dict) -> dict:
    """This rank: where it ran, its peak memory and threads, what it ran on and when it
    started (``startup``: scalesweep.record.stack), its MPI library (mpi)."""
    import torch

    per_rank = {
        "rank": ranks.rank,
        "local_rank": ranks.local_rank,
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "peak_rss_mb": round(peak_rss_mb(), 1),
        "threads": torch.get_num_threads(),
        "startup": startup,
        "stack": process_stack(),
    }
    if ranks.comm is not None:
        per_rank["mpi"] = mpi_info(ranks.MPI)
    return per_rank


def metrics_record(args, facts: RunFacts, group, data, hist, test: dict, gathered: list,
                   mpi_grads) -> dict:
    """Rank 0's metrics record: the layout, the data, the epochs' figures, the held-out
    test, the provenance, and for ``--parallel mpi`` the Allreduce times and sizes."""
    record = {
        **layout_fields(args, group, gathered),
        **data_fields(args, data, facts, hist),
        **training_fields(args, facts, group, hist),
        **test,
        **provenance_fields(args, facts, gathered),
    }
    if mpi_grads is not None:
        record.update(
            mpi=gathered[0]["mpi"],  # rank 0's; every rank's is in per_rank
            allreduce_s=hist.allreduce_s,  # rank 0, per epoch
            allreduce_bytes_per_step=mpi_grads.bytes_per_step,
        )
    return record


def layout_fields(args, group, gathered: list) -> dict:
    """How the run was laid out: ranks, hosts, threads, batches, scaling."""
    world = group.ranks.world
    return {
        "kind": "payload",
        "workload": "cnn",
        "parallel": args.parallel,
        "device": args.device,
        "ranks": world,
        "hosts": sorted({r["host"] for r in gathered}),
        "per_rank": gathered,
        "threads_per_rank": args.threads,
        "batch_size_per_rank": args.batch_size,
        "global_batch_size": args.batch_size * (world if group.sharded or group.replicated else 1),
        "scaling": args.scaling,
        "distributed_backend": group.backend,
    }


def data_fields(args, data, facts: RunFacts, hist) -> dict:
    """What it trained on and how it read it."""
    return {
        "data_path": args.data_path,
        "data_wait_s": hist.data_wait_s,  # rank 0, per epoch: getting batches (files: reading them)
        "image_size": args.image_size,
        "classes": data.classes,
        "dataset_images": int(len(data.y)),
        "train_images": int(facts.train_images),
        "test_fraction": args.test_fraction,
        "images_per_epoch": hist.images_per_epoch,
    }


def training_fields(args, facts: RunFacts, group, hist) -> dict:
    """The model and the epochs: times, throughput, loss and accuracy."""
    total = sum(hist.epoch_s)
    return {
        "steps_per_epoch": len(hist.step_s[-1]),
        "parameters": facts.n_params,
        "flops_per_step": facts.step_flops,  # one rank, one batch, forward + backward
        "precision": args.precision,
        "precision_effective": facts.precision_effective,  # tf32 on a CPU is fp32
        "epochs": args.epochs,
        "epoch_s": hist.epoch_s,
        "step_s": [[round(t, 6) for t in e] for e in hist.step_s],  # rank 0, per epoch
        "train_s": total,
        "images_per_s": hist.images_per_epoch * args.epochs / total,
        "final_loss": hist.epoch_loss[-1],
        "final_accuracy": hist.epoch_acc[-1],
        "loss_per_epoch": hist.epoch_loss,
        "accuracy_per_epoch": hist.epoch_acc,
        "init_process_group_s": facts.init_s,
        "data_load_s": facts.load_s,
    }


def provenance_fields(args, facts: RunFacts, gathered: list) -> dict:
    """Where and when it ran, on what."""
    import torch

    return {
        "peak_rss_mb": max(r["peak_rss_mb"] for r in gathered),
        "seed": args.seed,
        "versions": {"torch": torch.__version__, "python": sys.version.split()[0]},
        "host": host_info(),
        "container_env": container_env(),  # as rank 0 saw it: the runtime's mode in effect
        "git_commit": git_commit(),
        "start": facts.start_iso,
        "end": now_iso(),
        "payload_wall_s": time.time() - facts.t_start,
    }
