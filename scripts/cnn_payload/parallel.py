"""How the ranks train together (``--parallel``): ``ddp`` (DistributedDataParallel over
gloo, or NCCL/RCCL on GPUs), ``mpi`` (Horovod-style: one fused MPI Allreduce of the
gradients every step, through mpi4py), ``dp`` (DataParallel, one process over the node's
GPUs) and ``single``; the collectives the epochs use and the per-rank records gathered."""

from __future__ import annotations

import os
import time
from pathlib import Path

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


class Group:
    """The ranks as one training (``--parallel``): whether torch.distributed runs
    (``distributed``, over ``backend``), how the training set is shared (``sharded``:
    strong scaling, each rank its share; ``replicated``: weak scaling, every rank all of
    it), and the collectives of the epochs and of the end."""

    def __init__(self, args, ranks, device) -> None:
        self.ranks, self.device = ranks, device
        world = ranks.world
        # on a GPU ddp is DDP over NCCL also at one rank (the baseline carries the wrapper)
        self.distributed = args.parallel == "ddp" and (world > 1 or args.device == "cuda")
        # strong scaling: each rank its share of the training set; weak: all of it (per-rank
        # data and batch fixed, the global work grows with the ranks)
        self.sharded = (self.distributed or (args.parallel == "mpi" and world > 1)) and args.scaling == "strong"
        self.replicated = args.scaling == "weak" and world > 1
        self.backend = ("nccl" if args.device == "cuda" else "gloo") if self.distributed else None

    def init(self) -> float:
        """Start torch.distributed's process group where it runs; return the seconds it took."""
        t_init = time.time()
        if self.distributed:
            import torch.distributed as dist

            os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
            if self.ranks.world == 1 and "MASTER_PORT" not in os.environ:
                # one process started without a launcher: a file store of its own
                import tempfile
                store = Path(tempfile.mkdtemp(prefix="train_cnn-")) / "store"
                dist.init_process_group(self.backend, init_method=f"file://{store}", rank=0, world_size=1)
            elif "MASTER_PORT" not in os.environ:
                raise SystemExit("train_cnn: MASTER_PORT is not set (the launcher sets it)")
            else:
                dist.init_process_group(self.backend, rank=self.ranks.rank, world_size=self.ranks.world)
        return time.time() - t_init

    def wrap(self, model, args):
        """(the model as the ranks train it, the MPI gradient average or None): DDP, DataParallel,
        or the plain model with rank 0's parameters broadcast (mpi)."""
        from torch import nn

        if self.distributed:
            model = nn.parallel.DistributedDataParallel(
                model, device_ids=[self.ranks.local_rank] if args.device == "cuda" else None
            )
        elif args.parallel == "dp":
            model = nn.DataParallel(model)
        elif args.parallel == "mpi":
            mpi_grads = MpiGradients(model, self.ranks.comm)
            mpi_grads.broadcast_state()
            return model, mpi_grads
        return model, None

    def barrier(self) -> None:
        if self.distributed:
            import torch.distributed as dist

            dist.barrier()
        elif self.ranks.comm is not None:
            self.ranks.comm.Barrier()

    def allreduce_sum(self, t):
        """``t`` (a CPU tensor) summed over the ranks."""
        comm = self.ranks.comm
        if self.distributed:
            import torch.distributed as dist

            return dist_sum(dist, t, collective_device(self.backend, self.device))
        elif comm is not None and self.ranks.world > 1:
            comm.Allreduce(self.ranks.MPI.IN_PLACE, t.numpy(), op=self.ranks.MPI.SUM)
        return t

    def gather(self, per_rank: dict) -> list:
        """Every rank's record (rank order), and the process group torn down."""
        if self.distributed:
            import torch.distributed as dist

            gathered: list = [None] * self.ranks.world
            dist.all_gather_object(gathered, per_rank)
            # barrier before teardown: gloo under mpirun + ch-run can abort at exit otherwise
            dist.barrier()
            dist.destroy_process_group()
            return gathered
        if self.ranks.comm is not None:
            return self.ranks.comm.allgather(per_rank)
        return [per_rank]
