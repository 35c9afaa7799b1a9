"""Did the kernel's OOM killer end a run? Its counters of OOM kills, read before and after
the run: the harness's memory cgroup and each one above it (cgroup v2 ``memory.events``,
v1 ``memory.oom_control``: ``oom_kill``, counted for the cgroup and those below it, so a
Slurm job's counter includes its steps), and the host's (``/proc/vmstat``). A rank killed
by SIGKILL while one of them rose was killed for memory (``oom_evidence``); so was any
failed run whose own cgroup counted an OOM kill, and one whose log carries slurmstepd's
"oom_kill event" line.
"""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

from scalesweep.record.mountinfo import mounts

VMSTAT = "/proc/vmstat"
# slurmstepd's line when a step's cgroup counted OOM kills
SLURM_OOM = re.compile(r"Detected \d+ oom[-_]kill events? in (?:StepId=)?\S+|OOM Killed")


def _counter(path: Path, key: str = "oom_kill") -> int | None:
    try:
        for line in path.read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key and value.strip().isdigit():
                return int(value)
    except OSError:
        pass
    return None


def memory_cgroups(proc: str = "/proc/self") -> list[Path]:
    """The counter files of the process's memory cgroup and each one above it, nearest
    first (v1's memory controller where it has one, else the v2 hierarchy); [] where
    /proc cannot tell or no hierarchy is mounted."""
    try:
        cgroups = Path(proc, "cgroup").read_text().splitlines()
    except OSError:
        return []
    v1 = v2 = None
    for line in cgroups:
        hid, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if "memory" in controllers.split(","):
            v1 = path
        elif hid == "0" and not controllers:
            v2 = path
    kind, path, counter = ("cgroup", v1, "memory.oom_control") if v1 is not None else (
        "cgroup2", v2, "memory.events")
    if path is None:
        return []
    for m in mounts(proc=proc):
        if m.fstype != kind or (kind == "cgroup" and "memory" not in m.options.split(",")):
            continue
        root, mount = Path(m.root), Path(m.point)
        try:  # the cgroup's place below the mount's root (a namespace's root: itself)
            here = mount / Path(path).relative_to(root)
        except ValueError:
            here = mount / path.lstrip("/")
        if not here.is_dir():
            here = mount
        found = []
        while True:
            if (here / counter).is_file():
                found.append(here / counter)
            if here == mount or here.parent == here:
                return found
            here = here.parent
    return []


def oom_kills(proc: str = "/proc/self") -> dict[str, int]:
    """{counter file: OOM kills counted}: the memory cgroups of ``memory_cgroups`` (nearest
    first) and the host's."""
    counts = {}
    for path in [*memory_cgroups(proc), Path(VMSTAT)]:
        n = _counter(path)
        if n is not None:
            counts[str(path)] = n
    return counts


def _killed_by_sigkill(rc: int, log_tail: str) -> bool:
    """The run's own rank ended by SIGKILL: its exit status, or its launcher's line of
    it (mpirun's "signal 9 (Killed)", a shell's "Killed" at the start of a line)."""
    return rc in (-signal.SIGKILL, 128 + signal.SIGKILL) or bool(
        re.search(r"signal 9\b|\bSIGKILL\b|^\S*\s*Killed\b", log_tail, re.MULTILINE))


def oom_evidence(before: dict[str, int] | None, after: dict[str, int], rc: int,
                 log_tail: str = "") -> str | None:
    """Why a failed run (exit ``rc``) was out of memory, from the counters of ``oom_kills``
    before and after it and its log's tail; None without such evidence."""
    m = SLURM_OOM.search(log_tail)
    if m:
        return f"Slurm: {m[0]}"
    if not before or rc == 0:
        return None
    files = list(after)
    for path in files:
        rose = after[path] - before.get(path, after[path])
        if rose <= 0:
            continue
        # a cgroup counts every process in it: locally the harness's own holds Snakemake
        # and the points beside it too (Slurm gives each job its own), so a rise is this
        # run's only where one of its ranks was killed by SIGKILL
        if not _killed_by_sigkill(rc, log_tail):
            return None
        where = ("on this host" if path == VMSTAT else
                 f"in memory cgroup {os.path.dirname(path)}")
        return (f"the kernel's OOM killer killed {rose} process{'es' if rose > 1 else ''} "
                f"{where} during the run")
    return None


def slurm_oom_reason(reason, slurm_state: str) -> str:
    """A failed point's reason, "out of memory (Slurm: OUT_OF_MEMORY): " first where sacct
    says so of its job and the reason does not say it already (the harness, in another
    step or on another node than its rank, may have seen only the rank's SIGKILL)."""
    reason = "" if reason is None or reason != reason else str(reason)  # None, NaN: ""
    if slurm_state == "OUT_OF_MEMORY" and not reason.startswith("out of memory"):
        return f"out of memory (Slurm: OUT_OF_MEMORY): {reason}"
    return reason
