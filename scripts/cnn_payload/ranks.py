"""Where this process sits among the ranks: rank, world size and local rank, from whichever
launcher started it (torchrun, mpirun, srun or MPICH/PMI), or from MPI itself."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

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


@dataclass
class Ranks:
    """This process's place; ``comm`` and ``MPI`` with ``--parallel mpi`` (mpi4py's
    COMM_WORLD and module), else None."""

    rank: int
    world: int
    local_rank: int
    comm: Any = None
    MPI: Any = None


def start_ranks(parallel: str) -> Ranks:
    """With ``--parallel mpi``, MPI_Init first: rank and size come from MPI itself
    (mpirun, srun's PMIx/PMI2, or a singleton of one rank); else from the environment."""
    if parallel != "mpi":
        return Ranks(*rank_info())
    from mpi4py import MPI  # noqa: N811

    comm = MPI.COMM_WORLD
    rank, world = comm.Get_rank(), comm.Get_size()
    local_rank = comm.Split_type(MPI.COMM_TYPE_SHARED).Get_rank()
    return Ranks(rank, world, local_rank, comm, MPI)
