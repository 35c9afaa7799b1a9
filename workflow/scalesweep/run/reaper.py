"""What a payload leaves behind is stopped: the harness as a child subreaper.

A payload may start processes that outlive it: mpirun's ranks and torchrun's workers (in
process groups or sessions of their own, so no signal to the payload's group reaches
them), an LLM server (its own session), anything a payload daemonizes (setsid and a
double fork). When their parent dies they are re-parented to the nearest *child
subreaper* (prctl PR_SET_CHILD_SUBREAPER), else to init, where they would run on beside
the next measurement. So the harness is the subreaper while it runs a point
(:func:`subreaper`), and when the payload has ended, or the harness is interrupted, it
stops whatever still runs of the payload (:func:`stop_leftovers`): SIGTERM (and SIGCONT,
for a stopped one), a grace, SIGKILL, and waits for each (reaping those re-parented to
it). A point past its time limit is stopped the same way
(``scalesweep.run.payload_process.TimeLimit``).

The payload's processes are told apart by the run's token in their environment
(``scalesweep.measure.interference``: every process of the payload carries it, in or out of a
container, whoever its parent is now), never by ancestry alone: a harness called in a
larger process (a test) has other children of its own.

A SIGKILLed harness can stop nothing: the first process of each command still dies with
it (``scalesweep.run.guard.dies_with_harness``), and mpirun and torchrun stop their ranks
on that signal.
"""

from __future__ import annotations

import ctypes
import errno
import os
import signal
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from scalesweep.measure.interference import own_processes
from scalesweep.record.pointdir import proc_start_ticks

PR_SET_CHILD_SUBREAPER = 36
# SIGTERM to SIGKILL for what the payload left: longer than the payload's own stop of what
# it started (an LLM server: scripts/llm_payload/server.py SERVER_STOP_GRACE_S), so that a payload
# still stopping its server is not cut short when it is one of them
LEFTOVER_GRACE_S = 10.0
_POLL_S = 0.05


def _prctl(option: int, value: int) -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


@contextmanager
def subreaper() -> Iterator[bool]:
    """This process is a child subreaper inside the block (yields whether the kernel
    agreed: Linux 3.4 and later); the setting it had before is restored after."""
    was = ctypes.c_int(0)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(37, ctypes.byref(was), 0, 0, 0)  # PR_GET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        pass
    on = _prctl(PR_SET_CHILD_SUBREAPER, 1)
    try:
        yield on
    finally:
        if on and not was.value:
            _prctl(PR_SET_CHILD_SUBREAPER, 0)


def _state(pid: int) -> str | None:
    """The process's state letter (Z: a zombie), None once it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    try:
        return stat.rsplit(")", 1)[1].split()[0]
    except IndexError:
        return None


def _describe(pid: int) -> str:
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        cmd = ""
    return f"{pid} {cmd.strip()[:200]}"


def _reap(pid: int) -> bool:
    """Wait for ``pid`` if it is this process's child and has ended; whether it is gone."""
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done:
            return True
    except ChildProcessError:  # not our child: gone when /proc says so (or a zombie of another)
        pass
    except OSError as exc:
        if exc.errno != errno.EINTR:
            raise
    return _state(pid) in (None, "Z")


def stop_leftovers(token: str, grace_s: float = LEFTOVER_GRACE_S) -> list[str]:
    """Stop every process of this host that carries ``token`` (but this one): SIGTERM,
    up to ``grace_s`` for them to exit, then SIGKILL; wait for each and reap those that
    are this process's children. Returns them as "pid command line" (none: []). A stopped
    process (SIGSTOP, a ``kill -STOP`` of a rank) gets SIGCONT after its SIGTERM: a
    signal but SIGKILL waits, pending, until the process runs again."""
    me = os.getpid()
    found: dict[tuple[int, int | None], str] = {}

    def scan() -> list[tuple[int, int | None]]:
        new = []
        for pid in own_processes(token):
            if pid == me or _state(pid) in (None, "Z"):
                continue
            key = (pid, proc_start_ticks(pid))
            if key not in found:
                found[key] = _describe(pid)
                new.append(key)
        return new

    def signal_all(keys, sig: int) -> None:
        for pid, ticks in keys:
            if proc_start_ticks(pid) == ticks:  # still that process, not a new one with its pid
                try:
                    os.kill(pid, sig)
                    if sig == signal.SIGTERM:  # a stopped one (kill -STOP) acts on it only
                        os.kill(pid, signal.SIGCONT)  # once continued, as Slurm does
                except (ProcessLookupError, PermissionError):
                    pass

    def alive() -> list[tuple[int, int | None]]:
        return [(pid, ticks) for pid, ticks in found
                if proc_start_ticks(pid) == ticks and not _reap(pid)]

    signal_all(scan(), signal.SIGTERM)
    if not found:
        return []
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, grace_s)):
        deadline = time.monotonic() + wait_s
        while True:
            signal_all(scan(), sig)  # one started while the others stopped
            left = alive()
            if not left or time.monotonic() > deadline:
                break
            time.sleep(_POLL_S)
        if not left:
            break
        signal_all(left, signal.SIGKILL)
    return list(found.values())
