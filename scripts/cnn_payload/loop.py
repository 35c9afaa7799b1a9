"""The timed epochs: every rank steps the same number of batches of its share of the
training set (strong scaling) or of all of it (weak), timing each step and each epoch;
the loss and accuracy of an epoch are summed over the ranks."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Training:
    """What the epochs run: the model as the ranks train it, its optimiser and loss, the
    data and the training images, where and in what arithmetic, and the ranks' group."""

    model: Any
    opt: Any
    loss_fn: Any
    data: Any  # data.ImageSource
    train_idx: Any
    device: Any
    autocast: Any  # torch.autocast (bf16) or a null context
    mpi_grads: Any  # parallel.MpiGradients (--parallel mpi) or None
    group: Any  # parallel.Group


@dataclass
class History:
    """What the epochs measured on this rank (``epoch_loss``/``epoch_acc``: every rank's)."""

    t_first_step: float = 0.0  # time.time() as the first epoch starts
    epoch_s: list[float] = field(default_factory=list)
    step_s: list[list[float]] = field(default_factory=list)  # per epoch, every step's seconds
    allreduce_s: list[float] = field(default_factory=list)  # per epoch, in MPI Allreduce (mpi)
    data_wait_s: list[float] = field(default_factory=list)  # per epoch, getting its batches
    epoch_loss: list[float] = field(default_factory=list)
    epoch_acc: list[float] = field(default_factory=list)
    images_per_epoch: int = 0


def train_epochs(args, t: Training) -> History:
    """``--epochs`` epochs; rank 0 prints one line per epoch."""
    hist = History(t_first_step=time.time())
    for epoch in range(args.epochs):
        run_epoch(args, t, epoch, hist)
        if t.group.ranks.rank == 0:
            print(
                f"epoch {epoch + 1}/{args.epochs}: {hist.epoch_s[-1]:.2f} s, "
                f"{hist.images_per_epoch / hist.epoch_s[-1]:.1f} images/s, loss {hist.epoch_loss[-1]:.4f}, "
                f"acc {hist.epoch_acc[-1]:.4f}",
                flush=True,
            )
    return hist


def epoch_batches(args, t: Training, epoch: int):
    """(this rank's images in this epoch's order, the number of steps)."""
    import torch

    group, ranks = t.group, t.group.ranks
    rank, world = ranks.rank, ranks.world
    n = len(t.train_idx)
    # weak scaling: each rank its own order of the whole set
    g = torch.Generator().manual_seed(args.seed + epoch + (1000 * rank if group.replicated else 0))
    order = t.train_idx[torch.randperm(n, generator=g)]
    # DistributedSampler semantics without padding surprises: rank r takes every
    # world-th sample; each rank steps the same number of batches.
    mine = order[rank::world] if group.sharded else order
    steps = len(order) // world // args.batch_size if group.sharded else len(mine) // args.batch_size
    return mine, max(steps, 1)


def run_epoch(args, t: Training, epoch: int, hist: History) -> None:
    """One epoch, between two barriers; its times, loss and accuracy go to ``hist``."""
    import torch

    mine, steps = epoch_batches(args, t, epoch)
    t.model.train()
    t.group.barrier()
    t0 = time.perf_counter()
    comm_before = t.mpi_grads.seconds if t.mpi_grads else 0.0
    data_before = t.data.seconds
    sums = [torch.zeros(1), torch.zeros(1), torch.zeros(1)]  # loss, correct, seen
    steps_here: list[float] = []
    for s in range(steps):
        t_step = time.perf_counter()
        train_step(t, mine[s * args.batch_size:(s + 1) * args.batch_size], sums)
        steps_here.append(time.perf_counter() - t_step)
    hist.step_s.append(steps_here)
    if args.device == "cuda":
        torch.cuda.synchronize()
    t.group.barrier()
    hist.epoch_s.append(time.perf_counter() - t0)
    hist.data_wait_s.append(t.data.seconds - data_before)
    if t.mpi_grads is not None:
        hist.allreduce_s.append(t.mpi_grads.seconds - comm_before)
    stats = t.group.allreduce_sum(torch.cat(sums))
    hist.epoch_loss.append(float(stats[0] / stats[2]))
    hist.epoch_acc.append(float(stats[1] / stats[2]))
    hist.images_per_epoch = int(stats[2])


def train_step(t: Training, idx, sums: list) -> None:
    """One step on the images ``idx``: forward, backward, gradients averaged (mpi), update;
    the batch's loss, correct answers and images added to ``sums``."""
    tot_loss, correct, seen = sums
    xb, yb = t.data.batch(idx)
    xb, yb = xb.to(t.device, non_blocking=True), yb.to(t.device, non_blocking=True)
    t.opt.zero_grad(set_to_none=True)
    with t.autocast:
        out = t.model(xb)
        loss = t.loss_fn(out, yb)
    loss.backward()
    if t.mpi_grads is not None:
        t.mpi_grads.allreduce()
    t.opt.step()
    tot_loss += loss.detach().cpu() * len(idx)
    correct += (out.argmax(1) == yb).sum().cpu()
    seen += len(idx)
