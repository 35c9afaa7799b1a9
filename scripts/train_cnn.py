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
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import sys
import time
from pathlib import Path

T_SCRIPT = time.time()  # this rank's start-up: the script's first statement (record.stack)
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "workflow"))

from scalesweep.record.dataset import IMAGE_ERRORS  # noqa: E402
from scalesweep.record.metrics import container_env, git_commit, host_info, now_iso, peak_rss_mb, write_metrics  # noqa: E402
from scalesweep.record.stack import process_stack, startup_record  # noqa: E402

MIN_IMAGE_SIZE = 64  # six 2x poolings (build_model); the workflow checks datasets.<name>.image_size
RANK_VARS = ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID")
SIZE_VARS = ("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS")
LOCAL_RANK_VARS = ("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID")


def _first_env(names: tuple[str, ...], default: str) -> str:
    for name in names:
        if os.environ.get(name, "") != "":
            return os.environ[name]
    return default


def rank_info() -> tuple[int, int, int]:
    """(rank, world size, local rank) from whichever launcher started us."""
    return (
        int(_first_env(RANK_VARS, "0")),
        int(_first_env(SIZE_VARS, "1")),
        int(_first_env(LOCAL_RANK_VARS, "0")),
    )


# The arithmetic of training: what each --precision sets (recorded in metrics.json as
# `precision`, with what the device really did in `precision_effective`).
PRECISIONS = {"fp32": "float32", "tf32": "float32 with TensorFloat-32 matmul/conv", "bf16": "bfloat16 autocast"}


def set_precision(torch, precision: str, device: str) -> str:
    """Set torch's matmul/conv precision for ``precision``; return what applies on
    ``device`` (tf32 is an NVIDIA GPU mode: on a CPU it is plain fp32)."""
    tf32 = precision == "tf32" and device == "cuda"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    if precision == "tf32":
        return "tf32" if tf32 else "fp32"
    return precision


def collective_device(backend: str, device):
    """Where a torch.distributed collective's tensors must live: NCCL (and RCCL) reduce
    GPU tensors only ("No backend type associated with device type cpu", seen on an H200
    with the per-epoch loss/accuracy sums); gloo reduces CPU tensors."""
    import torch

    return device if backend == "nccl" else torch.device("cpu")


def dist_sum(dist, t, where):
    """``t`` summed over the process group, reduced on ``where`` (collective_device), returned
    on the CPU."""
    on = t.to(where)
    dist.all_reduce(on)
    return on.cpu()


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


def build_model(num_classes: int):
    from torch import nn

    def block(cin: int, cout: int) -> list:
        return [
            nn.Conv2d(cin, cout, 3, padding=1),
            nn.ReLU(inplace=True),
            nn.BatchNorm2d(cout),
            nn.MaxPool2d(2),
        ]

    layers = block(3, 64) + block(64, 512)
    for _ in range(4):
        layers += block(512, 512)
    return nn.Sequential(
        *layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, num_classes)
    )


def list_image_folder(root: Path, max_images: int) -> tuple[list[tuple[Path, int]], list[str]]:
    """The images of root/<class>/ with their labels (classes in name order), and the
    classes."""
    classes = sorted(d.name for d in root.iterdir() if d.is_dir() and not d.name.startswith("."))
    if len(classes) < 2:
        raise SystemExit(f"train_cnn: {root} has {len(classes)} class folders, need >= 2")
    files: list[tuple[Path, int]] = []
    for label, cls in enumerate(classes):
        for f in sorted((root / cls).iterdir()):
            if f.suffix.lower() in {".png", ".jpg", ".jpeg"}:
                files.append((f, label))
    if max_images:
        files = files[:max_images] if len(classes) == 1 else _balanced(files, max_images)
    return files, classes


def read_images(files: list[Path], size: int):
    """Decode ``files`` (RGB, resized to size x size) into one float tensor in [0, 1], NCHW."""
    import numpy as np
    import torch
    from PIL import Image

    arr = np.empty((len(files), size, size, 3), dtype=np.uint8)
    for i, f in enumerate(files):
        try:
            with Image.open(f) as im:
                im = im.convert("RGB")
                if im.size != (size, size):
                    im = im.resize((size, size), Image.BILINEAR)
                arr[i] = np.asarray(im)
        except IMAGE_ERRORS as exc:
            raise SystemExit(f"train_cnn: {f}: not a readable image ({exc}); the dataset is "
                             "damaged: check it against its manifest (cd DATASET && sha256sum -c "
                             "MANIFEST.sha256) and stage it again") from None
    return torch.from_numpy(arr).permute(0, 3, 1, 2).float().div_(255.0)


def load_image_folder(root: Path, size: int, max_images: int):
    """All images of root/<class>/ as one float tensor in [0, 1], NCHW, plus labels."""
    import torch

    files, classes = list_image_folder(root, max_images)
    x = read_images([f for f, _ in files], size)
    y = torch.tensor([label for _, label in files], dtype=torch.long)
    return x, y, classes


class ImageSource:
    """Where training reads its images from (``--data-path``): ``memory``, every image
    decoded once before training (the staged, or node-local, copy read at start-up:
    ``data_load_s``); ``files``, each batch's files opened and decoded at its step (the
    data path of a training that streams from the file system it was given: the shared
    one, or the node-local copy). ``seconds``: time spent getting batches, this rank."""

    def __init__(self, root: Path, size: int, max_images: int, mode: str):
        import torch

        self.mode, self.size = mode, size
        self.files, self.classes = list_image_folder(root, max_images)
        self.y = torch.tensor([label for _, label in self.files], dtype=torch.long)
        self.x = read_images([f for f, _ in self.files], size) if mode == "memory" else None
        self.seconds = 0.0

    def batch(self, idx):
        t0 = time.perf_counter()
        if self.x is not None:
            xb = self.x[idx]
        else:
            xb = read_images([self.files[int(i)][0] for i in idx], self.size)
        self.seconds += time.perf_counter() - t0
        return xb, self.y[idx]


def _balanced(files: list[tuple[Path, int]], n: int) -> list[tuple[Path, int]]:
    by_label: dict[int, list] = {}
    for item in files:
        by_label.setdefault(item[1], []).append(item)
    per = max(1, n // len(by_label))
    return [item for items in by_label.values() for item in items[:per]]


def holdout_split(y, fraction: float):
    """(train indices, test indices): every k-th image of each class (k = round(1 /
    fraction), the class's images in file order) is held out; independent of the seed,
    so every run of a campaign tests on the same images."""
    import torch

    if fraction <= 0:
        return torch.arange(len(y)), torch.arange(0)
    k = max(2, round(1 / fraction))
    test = torch.zeros(len(y), dtype=torch.bool)
    for label in torch.unique(y):
        members = torch.nonzero(y == label).flatten()
        test[members[::k]] = True
    return torch.nonzero(~test).flatten(), torch.nonzero(test).flatten()


class MpiGradients:
    """Horovod-style data parallelism over MPI (mpi4py): after every backward pass the
    gradients of all parameters are packed into one fused float32 buffer, summed with
    one ``Allreduce`` and divided by the world size. Parameters and buffers start as
    rank 0's (``Bcast``). The MPI library is whichever the dynamic loader found: the
    container's own, or the host's where the runtime bound or injected it."""

    def __init__(self, model, comm):
        import torch

        self.comm = comm
        self.world = comm.Get_size()
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.model = model
        self.buf = torch.zeros(sum(p.numel() for p in self.params), dtype=torch.float32)
        self.seconds = 0.0  # spent in Allreduce (and packing), this rank
        self.calls = 0

    @property
    def bytes_per_step(self) -> int:
        return self.buf.numel() * self.buf.element_size()

    def broadcast_state(self) -> None:
        for t in [*self.model.parameters(), *self.model.buffers()]:
            host = t.detach().cpu().contiguous()
            self.comm.Bcast(host.numpy(), root=0)
            t.data.copy_(host)

    def allreduce(self) -> None:
        from mpi4py import MPI

        t0 = time.perf_counter()
        off = 0
        for p in self.params:
            n = p.numel()
            self.buf[off:off + n].copy_(p.grad.detach().reshape(-1))
            off += n
        self.comm.Allreduce(MPI.IN_PLACE, self.buf.numpy(), op=MPI.SUM)
        self.buf.div_(self.world)
        off = 0
        for p in self.params:
            n = p.numel()
            p.grad.copy_(self.buf[off:off + n].view_as(p.grad))
            off += n
        self.seconds += time.perf_counter() - t0
        self.calls += 1


def mpi_info(MPI) -> dict:
    """What this rank's MPI is: the library file the process loaded (/proc/self/maps:
    the path inside the container when it runs in one), its version string and vendor."""
    from scalesweep.record.metrics import loaded_libraries

    vendor, version = MPI.get_vendor()
    libs = loaded_libraries("libmpi.so", "libmpi_cray", "libmpi_gnu", "libmpich")
    return {
        "library": libs[0] if libs else None,
        "libraries": libs,
        "library_version": MPI.Get_library_version().strip("\x00 \n").splitlines()[0].strip(),
        "vendor": f"{vendor} {'.'.join(map(str, version))}",
        "mpi4py": __import__("mpi4py").__version__,
    }


def count_step_flops(model, loss_fn, xb, yb) -> int | None:
    """FLOPs of one training step (forward + backward of one batch), counted by torch's
    FlopCounterMode (convolutions and matmuls: the arithmetic that dominates); None when
    this torch cannot count. Gradients are cleared afterwards."""
    try:
        from torch.utils.flop_counter import FlopCounterMode
    except ImportError:
        return None
    with FlopCounterMode(display=False) as counter:
        loss_fn(model(xb), yb).backward()
    model.zero_grad(set_to_none=True)
    return int(counter.get_total_flops())


def recalibrate_batchnorm(model, data, idx, batch_size: int, device, max_batches: int = 8) -> int:
    """Re-estimate BatchNorm's population statistics on training images ("precise BN"):
    a run of a few dozen steps leaves the running averages (momentum 0.1) far from them,
    and eval mode would test with the wrong ones. Returns the images used."""
    import torch
    from torch import nn

    bns = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    if not bns:
        return 0
    for m in bns:
        m.reset_running_stats()
        m.momentum = None  # a cumulative average over the batches below
    model.train()
    used = 0
    with torch.no_grad():
        for s in range(0, min(len(idx), max_batches * batch_size), batch_size):
            i = idx[s:s + batch_size]
            model(data.batch(i)[0].to(device))
            used += len(i)
    return used


def evaluate(model, data, idx, batch_size: int, device) -> dict:
    """Loss and accuracy of ``model`` (eval mode) on the images ``idx``."""
    import torch
    from torch import nn

    loss_fn = nn.CrossEntropyLoss(reduction="sum")
    model.eval()
    tot, correct = 0.0, 0
    with torch.no_grad():
        for s in range(0, len(idx), batch_size):
            i = idx[s:s + batch_size]
            xb, yb = data.batch(i)
            xb, yb = xb.to(device), yb.to(device)
            out = model(xb)
            tot += float(loss_fn(out, yb))
            correct += int((out.argmax(1) == yb).sum())
    n = max(len(idx), 1)
    return {"test_loss": tot / n, "test_accuracy": correct / n, "test_images": int(len(idx))}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    t_start = time.time()
    start_iso = now_iso()

    comm = MPI = None
    if args.parallel == "mpi":
        # MPI_Init first: rank and size come from MPI itself (mpirun, srun's PMIx/PMI2,
        # or a singleton of one rank)
        from mpi4py import MPI  # noqa: N811

        comm = MPI.COMM_WORLD
        rank, world = comm.Get_rank(), comm.Get_size()
        local_rank = comm.Split_type(MPI.COMM_TYPE_SHARED).Get_rank()
    else:
        rank, world, local_rank = rank_info()

    import torch
    import torch.distributed as dist
    from torch import nn

    t_imports = time.time()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)

    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("train_cnn: --device cuda but torch sees no GPU")
    if args.parallel == "dp" and (args.device != "cuda" or torch.cuda.device_count() < 1):
        raise SystemExit("train_cnn: DataParallel is a GPU mode; no GPU is visible")
    if args.parallel in ("dp", "single") and world > 1:
        raise SystemExit(f"train_cnn: --parallel {args.parallel} runs one process, got {world} ranks")

    # on a GPU ddp is DDP over NCCL also at one rank (the baseline carries the wrapper)
    distributed = args.parallel == "ddp" and (world > 1 or args.device == "cuda")
    # strong scaling: each rank its share of the training set; weak: all of it (per-rank
    # data and batch fixed, the global work grows with the ranks)
    sharded = (distributed or (args.parallel == "mpi" and world > 1)) and args.scaling == "strong"
    replicated = args.scaling == "weak" and world > 1
    t_init = time.time()
    if distributed:
        backend = "nccl" if args.device == "cuda" else "gloo"
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        if world == 1 and "MASTER_PORT" not in os.environ:
            # one process started without a launcher: a file store of its own
            import tempfile
            store = Path(tempfile.mkdtemp(prefix="train_cnn-")) / "store"
            dist.init_process_group(backend, init_method=f"file://{store}", rank=0, world_size=1)
        elif "MASTER_PORT" not in os.environ:
            raise SystemExit("train_cnn: MASTER_PORT is not set (the launcher sets it)")
        else:
            dist.init_process_group(backend, rank=rank, world_size=world)
    init_s = time.time() - t_init

    device = torch.device(f"cuda:{local_rank}" if args.device == "cuda" else "cpu")
    precision_effective = set_precision(torch, args.precision, args.device)
    autocast = (torch.autocast(device_type=device.type, dtype=torch.bfloat16)
                if args.precision == "bf16" else contextlib.nullcontext())
    if args.device == "cuda" and args.parallel != "dp":
        torch.cuda.set_device(device)

    t_load = time.time()
    data = ImageSource(Path(args.data), args.image_size, args.max_images, args.data_path)
    y, classes = data.y, data.classes
    load_s = time.time() - t_load
    train_idx, test_idx = holdout_split(y, args.test_fraction)

    model = build_model(len(classes)).to(device)
    n_params = sum(p.numel() for p in model.parameters())
    loss_fn = nn.CrossEntropyLoss()
    # one untimed step's FLOPs (forward + backward of a per-rank batch), before wrapping
    xp, yp = data.batch(train_idx[:args.batch_size])
    step_flops = count_step_flops(model, loss_fn, xp.to(device), yp.to(device))
    mpi_grads = None
    if distributed:
        model = nn.parallel.DistributedDataParallel(
            model, device_ids=[local_rank] if args.device == "cuda" else None
        )
    elif args.parallel == "dp":
        model = nn.DataParallel(model)
    elif args.parallel == "mpi":
        mpi_grads = MpiGradients(model, comm)
        mpi_grads.broadcast_state()
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)

    def barrier():
        if distributed:
            dist.barrier()
        elif comm is not None:
            comm.Barrier()

    def allreduce_sum(t):
        if distributed:
            return dist_sum(dist, t, collective_device(backend, device))
        elif comm is not None and world > 1:
            comm.Allreduce(MPI.IN_PLACE, t.numpy(), op=MPI.SUM)
        return t

    n = len(train_idx)
    epoch_s: list[float] = []
    step_s: list[list[float]] = []  # per epoch, every step's seconds (this rank)
    allreduce_s: list[float] = []  # per epoch, this rank's seconds in MPI Allreduce (mpi)
    data_wait_s: list[float] = []  # per epoch, this rank's seconds getting its batches
    epoch_loss: list[float] = []
    epoch_acc: list[float] = []
    t_first_step = time.time()
    for epoch in range(args.epochs):
        # weak scaling: each rank its own order of the whole set
        g = torch.Generator().manual_seed(args.seed + epoch + (1000 * rank if replicated else 0))
        order = train_idx[torch.randperm(n, generator=g)]
        # DistributedSampler semantics without padding surprises: rank r takes every
        # world-th sample; each rank steps the same number of batches.
        mine = order[rank::world] if sharded else order
        steps = len(order) // world // args.batch_size if sharded else len(mine) // args.batch_size
        steps = max(steps, 1)
        model.train()
        barrier()
        t0 = time.perf_counter()
        comm_before = mpi_grads.seconds if mpi_grads else 0.0
        data_before = data.seconds
        tot_loss = torch.zeros(1)
        correct = torch.zeros(1)
        seen = torch.zeros(1)
        steps_here: list[float] = []
        for s in range(steps):
            t_step = time.perf_counter()
            idx = mine[s * args.batch_size:(s + 1) * args.batch_size]
            xb, yb = data.batch(idx)
            xb, yb = xb.to(device, non_blocking=True), yb.to(device, non_blocking=True)
            opt.zero_grad(set_to_none=True)
            with autocast:
                out = model(xb)
                loss = loss_fn(out, yb)
            loss.backward()
            if mpi_grads is not None:
                mpi_grads.allreduce()
            opt.step()
            tot_loss += loss.detach().cpu() * len(idx)
            correct += (out.argmax(1) == yb).sum().cpu()
            seen += len(idx)
            steps_here.append(time.perf_counter() - t_step)
        step_s.append(steps_here)
        if args.device == "cuda":
            torch.cuda.synchronize()
        barrier()
        epoch_s.append(time.perf_counter() - t0)
        data_wait_s.append(data.seconds - data_before)
        if mpi_grads is not None:
            allreduce_s.append(mpi_grads.seconds - comm_before)
        stats = allreduce_sum(torch.cat([tot_loss, correct, seen]))
        epoch_loss.append(float(stats[0] / stats[2]))
        epoch_acc.append(float(stats[1] / stats[2]))
        images_per_epoch = int(stats[2])
        if rank == 0:
            print(
                f"epoch {epoch + 1}/{args.epochs}: {epoch_s[-1]:.2f} s, "
                f"{images_per_epoch / epoch_s[-1]:.1f} images/s, loss {epoch_loss[-1]:.4f}, "
                f"acc {epoch_acc[-1]:.4f}",
                flush=True,
            )

    # held-out evaluation by rank 0 (its parameters are every rank's), after the timed
    # epochs: BatchNorm statistics re-estimated on training images, then eval mode
    test: dict = {}
    if rank == 0 and len(test_idx):
        plain = getattr(model, "module", model)
        calibrated = recalibrate_batchnorm(plain, data, train_idx, args.batch_size, device)
        test = {**evaluate(plain, data, test_idx, args.batch_size, device),
                "bn_recalibration_images": calibrated}

    per_rank = {
        "rank": rank,
        "local_rank": local_rank,
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "peak_rss_mb": round(peak_rss_mb(), 1),
        "threads": torch.get_num_threads(),
        # what this rank ran on, and when it started (scalesweep.record.stack)
        "startup": startup_record(T_SCRIPT, t_imports, t_first_step),
        "stack": process_stack(),
    }
    if comm is not None:
        per_rank["mpi"] = mpi_info(MPI)
    if distributed:
        gathered: list = [None] * world
        dist.all_gather_object(gathered, per_rank)
        # barrier before teardown: gloo under mpirun + ch-run can abort at exit otherwise
        dist.barrier()
        dist.destroy_process_group()
    elif comm is not None:
        gathered = comm.allgather(per_rank)
    else:
        gathered = [per_rank]

    if rank == 0:
        total = sum(epoch_s)
        record = {
            "kind": "payload",
            "workload": "cnn",
            "parallel": args.parallel,
            "device": args.device,
            "ranks": world,
            "hosts": sorted({r["host"] for r in gathered}),
            "per_rank": gathered,
            "threads_per_rank": args.threads,
            "batch_size_per_rank": args.batch_size,
            "global_batch_size": args.batch_size * (world if sharded or replicated else 1),
            "scaling": args.scaling,
            "data_path": args.data_path,
            "data_wait_s": data_wait_s,  # rank 0, per epoch: getting batches (files: reading them)
            "image_size": args.image_size,
            "classes": classes,
            "dataset_images": int(len(y)),
            "train_images": int(n),
            "test_fraction": args.test_fraction,
            "images_per_epoch": images_per_epoch,
            "steps_per_epoch": len(step_s[-1]),
            "parameters": n_params,
            "flops_per_step": step_flops,  # one rank, one batch, forward + backward
            "precision": args.precision,
            "precision_effective": precision_effective,  # tf32 on a CPU is fp32
            "distributed_backend": backend if distributed else None,
            "epochs": args.epochs,
            "epoch_s": epoch_s,
            "step_s": [[round(t, 6) for t in e] for e in step_s],  # rank 0, per epoch
            "train_s": total,
            "images_per_s": images_per_epoch * args.epochs / total,
            "final_loss": epoch_loss[-1],
            "final_accuracy": epoch_acc[-1],
            "loss_per_epoch": epoch_loss,
            "accuracy_per_epoch": epoch_acc,
            **test,
            "init_process_group_s": init_s,
            "data_load_s": load_s,
            "peak_rss_mb": max(r["peak_rss_mb"] for r in gathered),
            "seed": args.seed,
            "versions": {"torch": torch.__version__, "python": sys.version.split()[0]},
            "host": host_info(),
            "container_env": container_env(),  # as rank 0 saw it: the runtime's mode in effect
            "git_commit": git_commit(),
            "start": start_iso,
            "end": now_iso(),
            "payload_wall_s": time.time() - t_start,
        }
        if mpi_grads is not None:
            record.update(
                mpi=gathered[0]["mpi"],  # rank 0's; every rank's is in per_rank
                allreduce_s=allreduce_s,  # rank 0, per epoch
                allreduce_bytes_per_step=mpi_grads.bytes_per_step,
            )
        write_metrics(args.out, record)
        print(json.dumps({"train_s": total, "images_per_s": record["images_per_s"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
