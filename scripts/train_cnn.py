#!/usr/bin/env python3
"""CNN image-classifier training payload (the OLCF container study's model).

Runs identically natively and inside a container: it never asks where it runs. Rank,
world size and rendezvous come from the launcher's environment (torchrun, mpirun, srun
or MPICH/PMI), one process per rank. Rank 0 writes the metrics file atomically.

Data parallelism (``--parallel``): ``ddp`` (DistributedDataParallel over gloo, or
NCCL/RCCL on GPUs), ``mpi`` (Horovod-style: every step the gradients are averaged with
one MPI Allreduce of a single fused buffer through mpi4py, so the MPI library the rank
loaded is on the measured path; each rank records which library that was), ``dp``
(DataParallel, one process over the node's GPUs) and ``single``.

After training, rank 0 evaluates the model on the held-out split (``--test-fraction``
of every class, never trained on): ``test_accuracy`` and ``test_loss``. FLOPs of one
training step (forward and backward of one per-rank batch) are counted by torch's
FlopCounterMode before the timed epochs.

Model: Conv(3->64), Conv(64->512), then the 512->512 block four times; each block is
Conv3x3 + ReLU + BatchNorm + MaxPool2; Flatten; Linear(512 -> classes). Six poolings, so
64x64 inputs end at 1x1x512.

``main`` is the run's list of steps; each is a function of the package ``cnn_payload``
beside this file (ranks, parallel, data, model, loop, record).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from pathlib import Path

T_SCRIPT = time.time()  # this rank's start-up: the script's first statement (record.stack)
_HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(_HERE.parent / "workflow"))
sys.path.insert(0, str(_HERE))

from cnn_payload.data import ImageSource, holdout_split  # noqa: E402
from cnn_payload.loop import Training, train_epochs  # noqa: E402
from cnn_payload.model import (  # noqa: E402
    MIN_IMAGE_SIZE, PRECISIONS, build_model, count_step_flops, held_out_test, set_precision,
)
from cnn_payload.parallel import Group  # noqa: E402
from cnn_payload.ranks import start_ranks  # noqa: E402
from cnn_payload.record import RunFacts, metrics_record, rank_record  # noqa: E402
from scalesweep.record.metrics import now_iso, write_metrics  # noqa: E402
from scalesweep.record.stack import startup_record  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True, help="image folder root/<class>/*.png|jpg")
    p.add_argument("--out", required=True, help="metrics JSON written by rank 0")
    p.add_argument("--parallel", choices=["ddp", "mpi", "dp", "single"], default="ddp")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                   help="cuda also covers ROCm builds of torch")
    p.add_argument("--precision", choices=list(PRECISIONS), default="fp32",
                   help="fp32; tf32 (TensorFloat-32 matmul/conv on NVIDIA GPUs); bf16 (autocast)")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=32, help="per rank")
    p.add_argument("--image-size", type=int, default=64)
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads per rank")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--max-images", type=int, default=0, help="0 = all")
    p.add_argument("--data-path", choices=["memory", "files"], default="memory",
                   help="memory: decode every image before training; files: read each batch's files at its step")
    p.add_argument("--scaling", choices=["strong", "weak"], default="strong",
                   help="strong: the ranks share the training set; weak: every rank trains on all of it")
    p.add_argument("--test-fraction", type=float, default=0.0,
                   help="held out of every class for the test split (0 = no test split)")
    args = p.parse_args(argv)
    if not 0.0 <= args.test_fraction <= 0.5:
        p.error(f"--test-fraction must be in [0, 0.5], got {args.test_fraction}")
    for name in ("epochs", "batch_size", "image_size", "threads"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.image_size < MIN_IMAGE_SIZE:
        p.error(f"--image-size must be >= {MIN_IMAGE_SIZE} (six 2x poolings), got {args.image_size}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    t_start = time.time()
    facts = RunFacts(start_iso=now_iso(), t_start=t_start)
    ranks = start_ranks(args.parallel)  # MPI_Init (--parallel mpi) before torch loads
    torch = import_torch()
    t_imports = time.time()
    prepare_torch(torch, args, ranks.world)
    device = torch.device(f"cuda:{ranks.local_rank}" if args.device == "cuda" else "cpu")
    group = Group(args, ranks, device)
    facts.init_s = group.init()
    autocast = set_arithmetic(torch, args, device, facts)
    data, train_idx, test_idx = load_data(args, facts)
    training = build_training(torch, args, data, train_idx, device, autocast, group, facts)
    hist = train_epochs(args, training)
    test = (held_out_test(training.model, data, train_idx, test_idx, args.batch_size, device)
            if ranks.rank == 0 and len(test_idx) else {})
    gathered = group.gather(rank_record(ranks, startup_record(T_SCRIPT, t_imports, hist.t_first_step)))
    if ranks.rank == 0:
        record = metrics_record(args, facts, group, data, hist, test, gathered, training.mpi_grads)
        write_metrics(args.out, record)
        print(json.dumps({"train_s": record["train_s"], "images_per_s": record["images_per_s"]}))
    return 0


def import_torch():
    """torch with torch.distributed: the imports a rank's start-up times
    (``script_to_imports_s``)."""
    import torch
    import torch.distributed  # noqa: F401  (loaded here, timed with torch)

    return torch


def prepare_torch(torch, args: argparse.Namespace, world: int) -> None:
    """Threads and seed set; a device or mode the run cannot have refused (SystemExit)."""
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("train_cnn: --device cuda but torch sees no GPU")
    if args.parallel == "dp" and (args.device != "cuda" or torch.cuda.device_count() < 1):
        raise SystemExit("train_cnn: DataParallel is a GPU mode; no GPU is visible")
    if args.parallel in ("dp", "single") and world > 1:
        raise SystemExit(f"train_cnn: --parallel {args.parallel} runs one process, got {world} ranks")


def set_arithmetic(torch, args: argparse.Namespace, device, facts: RunFacts):
    """``--precision`` set (what the device really does: ``facts.precision_effective``), this
    rank's GPU selected; returns the context each step runs in (bf16: autocast)."""
    facts.precision_effective = set_precision(torch, args.precision, args.device)
    autocast = (torch.autocast(device_type=device.type, dtype=torch.bfloat16)
                if args.precision == "bf16" else contextlib.nullcontext())
    if args.device == "cuda" and args.parallel != "dp":
        torch.cuda.set_device(device)
    return autocast


def load_data(args: argparse.Namespace, facts: RunFacts):
    """(the images, the training indices, the held-out indices); the time to read them."""
    t_load = time.time()
    data = ImageSource(Path(args.data), args.image_size, args.max_images, args.data_path)
    facts.load_s = time.time() - t_load
    train_idx, test_idx = holdout_split(data.y, args.test_fraction)
    facts.train_images = len(train_idx)
    return data, train_idx, test_idx


def build_training(torch, args: argparse.Namespace, data, train_idx, device, autocast, group: Group,
                   facts: RunFacts) -> Training:
    """The model on its device, one step's FLOPs counted (forward + backward of a per-rank
    batch, on the meta device: nothing computed), the model wrapped for the ranks, its
    optimiser."""
    model = build_model(len(data.classes)).to(device)
    facts.n_params = sum(p.numel() for p in model.parameters())
    loss_fn = torch.nn.CrossEntropyLoss()
    xp, _ = data.batch(train_idx[:args.batch_size])
    facts.step_flops = count_step_flops(len(data.classes), xp.shape, loss_fn)
    model, mpi_grads = group.wrap(model, args)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    return Training(model, opt, loss_fn, data, train_idx, device, autocast, mpi_grads, group)


if __name__ == "__main__":
    sys.exit(main())
