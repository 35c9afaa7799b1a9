"""The TCP port a run's own processes listen on (the ranks' rendezvous outside Slurm, the
LLM payload's model server), recorded in the run's command. Standard library only: the
payloads import it inside containers.

Not the kernel's pick (bind to port 0): that is a port of the ephemeral range
(/proc/sys/net/ipv4/ip_local_port_range, 32768-60999 by default), which the kernel also
hands to any outgoing connection made between the pick and the listen (a rank's torch
import, mpirun's start: seconds), and then the listen fails with EADDRINUSE (seen in an
A/A campaign of the embedded default, 2026-11-29: a 2-rank point's TCPStore on the port
the harness had picked). A port below that range is never given to an outgoing
connection; one is drawn at random there and kept if nothing listens on it.
"""

from __future__ import annotations

import random
import socket

EPHEMERAL = "/proc/sys/net/ipv4/ip_local_port_range"
LOWEST = 10000  # below: well-known and registered services


def ephemeral_range(path: str | None = None) -> tuple[int, int]:
    """The kernel's ephemeral port range (``path``: the file saying it, EPHEMERAL)."""
    try:
        with open(path or EPHEMERAL) as fh:
            low, high = (int(x) for x in fh.read().split()[:2])
        return low, high
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


def below_ephemeral(key: int, path: str | None = None) -> int:
    """A port below the ephemeral range chosen by ``key`` (a Slurm job's id: every rank of
    the job computes the same one, and jobs on one node rarely share it); in the range's
    place where it has no room below it."""
    low, high = ephemeral_range(path)
    if low - 1 > LOWEST:
        return LOWEST + key % (low - LOWEST)
    return low + key % (high - low + 1)


def listen_port(host: str = "127.0.0.1", tries: int = 64, path: str | None = None) -> int:
    """A port nothing listens on at ``host``, below the ephemeral range where it has room;
    the kernel's pick where it has none (or every try is taken)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    low, _ = ephemeral_range(path)
    for _ in range(tries if low - 1 > LOWEST else 0):
        port = random.randint(LOWEST, low - 1)
        with socket.socket(family, socket.SOCK_STREAM) as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            return port
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]
