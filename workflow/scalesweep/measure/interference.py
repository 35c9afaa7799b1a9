"""Interference during a run's measurement window: what else used the node's CPUs.

Standard library only (it may run inside containers and on every node of an allocation).

A monitor samples, every ``interval_s`` while the payload runs:

* ``/proc/stat``'s aggregate ``cpu`` line: busy time (every field but idle, iowait and
  steal; guest time is already inside user/nice) and steal time, node-wide;
* ``/proc/loadavg``: the 1-minute load;
* the CPU time (utime + stime + cutime + cstime of ``/proc/<pid>/stat``) of the run's
  *own* processes: those whose environment holds ``SCALESWEEP_RUN_TOKEN=<token>`` (the
  harness sets a unique token in the payload's environment, so launcher, ranks on every
  node and container processes carry it), plus the pids given (the harness itself).

Outside CPU time = node busy time - own CPU time over the window; as a share of the
node's CPUs (``outside_cpu_pct``) it says how much of the machine something else used
while the run was measured. ``assess`` turns per-node records into the run's verdict
(``disturbed`` when outside use or steal exceeds its threshold). The interval and the
thresholds are the config's ``measurement`` keys (their defaults: the config schema).

The harness's monitor also drives the run's memory timeline (``memory=``: a
``scalesweep.measure.memtimeline.MemoryTimeline``, sampled after each scan from the same thread,
with the own processes it found): the ranks' resident memory over the run.

Several nodes (Slurm): ``python -m scalesweep.measure.interference watch --token T --interval S
--out DIR/{host}.json --stop-file DIR/stop`` runs one monitor per node until the stop
file appears, and writes that node's record.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any, Iterable

TOKEN_VAR = "SCALESWEEP_RUN_TOKEN"
METHOD = f"proc-stat busy minus own processes ({TOKEN_VAR})"
_YOUNG_S = 10.0  # a process without the token is checked again while this young


def new_token() -> str:
    """A token unique to one run (host, pid, time, randomness)."""
    return f"{socket.gethostname()}-{os.getpid()}-{time.time_ns():x}-{os.urandom(4).hex()}"


def clock_ticks() -> int:
    return os.sysconf("SC_CLK_TCK")


def node_cpus() -> int:
    return os.sysconf("SC_NPROCESSORS_ONLN")


def read_cpu_line(proc: str = "/proc") -> tuple[int, int | None]:
    """(busy jiffies, steal jiffies or None if the kernel has no steal field)."""
    with open(f"{proc}/stat") as fh:
        for line in fh:
            if line.startswith("cpu "):
                values = [int(v) for v in line.split()[1:]]
                break
        else:
            raise OSError(f"{proc}/stat has no aggregate cpu line")
    # user nice system idle iowait irq softirq steal guest guest_nice (guest is in user)
    fields = values[:8]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    steal = fields[7] if len(fields) > 7 else None
    busy = sum(fields) - idle - (steal or 0)
    return busy, steal


def read_load1(proc: str = "/proc") -> float:
    with open(f"{proc}/loadavg") as fh:
        return float(fh.read().split()[0])


def read_uptime_ticks(proc: str = "/proc") -> float:
    with open(f"{proc}/uptime") as fh:
        return float(fh.read().split()[0]) * clock_ticks()


def proc_stat(pid: int, proc: str = "/proc") -> tuple[int, int, int, int] | None:
    """(ppid, own CPU ticks utime+stime, children's ticks cutime+cstime, starttime) or
    None when the process is gone."""
    try:
        with open(f"{proc}/{pid}/stat", "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    rest = data[data.rfind(b")") + 2:].split()  # the name may hold spaces and parentheses
    try:  # rest[0] is field 3 (state): field n is rest[n - 3]
        return int(rest[1]), int(rest[11]) + int(rest[12]), int(rest[13]) + int(rest[14]), int(rest[19])
    except (IndexError, ValueError):
        return None


def has_token(pid: int, token: str, proc: str = "/proc") -> bool:
    """Whether the environment of ``pid`` holds SCALESWEEP_RUN_TOKEN=<token> (False where
    it cannot be read: another user's process, or one that is gone)."""
    try:
        with open(f"{proc}/{pid}/environ", "rb") as fh:
            env = fh.read()
    except OSError:
        return False
    return f"{TOKEN_VAR}={token}".encode() in env.split(b"\0")


def own_processes(token: str, proc: str = "/proc") -> list[int]:
    """Pids of the processes that carry ``token`` now."""
    return sorted(int(p) for p in os.listdir(proc) if p.isdigit() and has_token(int(p), token, proc))


class _Tracked:
    __slots__ = ("first_self", "first_children", "last_self", "last_children", "ppid",
                 "seen_at", "gone_at")

    def __init__(self, ppid: int, self_t: int, children_t: int, born_in_window: bool, sample: int):
        # a process born in the window counts from 0, one alive at its start from its value
        self.first_self = 0 if born_in_window else self_t
        self.first_children = 0 if born_in_window else children_t
        self.last_self, self.last_children, self.ppid = self_t, children_t, ppid
        self.seen_at = sample  # index of the last sample that saw it
        self.gone_at: int | None = None


class Monitor:
    """Samples a node's CPU use in a background thread between ``start`` and ``stop``.

    ``pids``: processes that count as the run's own whatever their environment (the
    harness, this monitor). ``stop`` returns the node's record (see ``assess``).
    ``memory``: a ``scalesweep.measure.memtimeline.MemoryTimeline`` sampled after each scan, in
    this thread and at this interval (the harness's monitor only; None: no memory).
    """

    def __init__(self, token: str, interval_s: float,
                 pids: Iterable[int] = (), proc: str = "/proc", rusage_root: bool = False,
                 memory=None):
        self.token = token
        self.memory = memory
        self._alive: set[tuple[int, int]] = set()
        # rusage_root: this process (the harness) is the root of the run's process tree:
        # its own CPU and that of every descendant it (transitively) reaped come from
        # getrusage (exact, each counted once); /proc sampling then counts only the
        # token's processes outside that tree (ranks started by srun through slurmstepd)
        self.rusage_root = rusage_root
        self._ppids: dict[int, int] = {}  # pid -> ppid of every process seen
        self.interval_s = float(interval_s)
        self.extra_pids = {int(p) for p in pids} | {os.getpid()}
        self.proc = proc
        self.host = socket.gethostname()
        self.ncpu = node_cpus()
        self.tick = clock_ticks()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._tracked: dict[tuple[int, int], _Tracked] = {}  # (pid, starttime) -> times
        self._not_own: set[tuple[int, int]] = set()
        self._samples = 0
        self._record: dict[str, Any] | None = None

    # ------------------------------------------------------------------ sampling
    def _scan(self) -> None:
        idx = self._samples
        young_from = read_uptime_ticks(self.proc) - _YOUNG_S * self.tick
        alive: set[tuple[int, int]] = set()
        try:
            names = os.listdir(self.proc)
        except OSError:
            names = []
        for name in names:
            if not name.isdigit():
                continue
            pid = int(name)
            st = proc_stat(pid, self.proc)
            if st is None:
                continue
            ppid, self_t, children_t, start = st
            self._ppids[pid] = ppid
            key = (pid, start)
            alive.add(key)
            tracked = self._tracked.get(key)
            if tracked is None:
                if key in self._not_own and start < young_from:
                    continue
                # a young process is checked again on every sample: between fork and exec
                # it still has its parent's environment, without the token
                if pid not in self.extra_pids and not has_token(pid, self.token, self.proc):
                    self._not_own.add(key)
                    continue
                self._not_own.discard(key)
                tracked = self._tracked[key] = _Tracked(
                    ppid, self_t, children_t, start >= self._start_ticks and idx > 0, idx)
            tracked.last_self, tracked.last_children = self_t, children_t
            tracked.ppid, tracked.seen_at = ppid, idx
        for key, tracked in self._tracked.items():
            if tracked.gone_at is None and key not in alive:
                tracked.gone_at = idx
        self._not_own &= alive
        self._alive = alive

    def _sample(self) -> None:
        busy, steal = read_cpu_line(self.proc)
        load1 = read_load1(self.proc)
        now = time.monotonic()
        self._scan()
        if self._samples == 0:
            self._t0, self._busy0, self._steal0 = now, busy, steal
            self._load_start = load1
            self._load_max = load1
        self._t1, self._busy1, self._steal1, self._load_end = now, busy, steal, load1
        self._load_max = max(self._load_max, load1)
        if self.memory is not None:  # the run's own processes now, and every live parent
            own = [k for k, t in self._tracked.items() if t.seen_at == self._samples]
            self.memory.sample(now - self._t0, {pid: self._ppids[pid] for pid, _ in self._alive},
                               own)
        self._samples += 1

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            with self._lock:
                try:
                    self._sample()
                except OSError:  # /proc unreadable for a moment: the next sample counts
                    pass

    # ------------------------------------------------------------------ interface
    def start(self) -> "Monitor":
        self._start_ticks = read_uptime_ticks(self.proc)
        self._ru0 = _rusage_s() if self.rusage_root else 0.0
        with self._lock:
            self._sample()
        self._thread = threading.Thread(target=self._run, name="scalesweep-interference", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> dict[str, Any]:
        if self._record is not None:
            return self._record
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            self._sample()
            self._ru1 = _rusage_s() if self.rusage_root else 0.0
            self._record = self._node_record()
        return self._record

    def __enter__(self) -> "Monitor":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def own_ticks(self) -> int:
        """CPU ticks of the own processes in the window, each counted once.

        A process's cutime/cstime grow by a child's whole CPU time when it reaps the
        child; for a tracked child that was seen gone while its tracked parent still
        lived, that is subtracted from the parent (the child's own times counted it).
        """
        tracked = self._tracked
        root_ticks = 0
        if self.rusage_root:
            root = os.getpid()
            root_ticks = round((self._ru1 - self._ru0) * self.tick)
            # the root and its descendants that are gone (reaped inside the tree, so in
            # the root's RUSAGE_CHILDREN or in a live descendant's children time) are
            # left to those; live descendants still count by their own entries. A gone
            # descendant whose parent does not carry the token was reaped outside the
            # tree: Podman's conmon (started with an environment of its own, reparented
            # to the harness, a subreaper) reaps the container's processes and is reaped
            # by the harness only after the window, so they count by their own entries
            own = {pid for pid, _start in tracked} | {root}
            tracked = {k: t for k, t in tracked.items()
                       if k[0] != root and not (t.gone_at is not None and t.ppid in own
                                                and self._descends(k[0], root))}
        by_pid = {pid: t for (pid, _start), t in tracked.items()}
        reaped: dict[int, int] = {}
        for t in tracked.values():
            parent = by_pid.get(t.ppid)
            if t.gone_at is not None and parent is not None and parent.seen_at >= t.gone_at:
                reaped[t.ppid] = reaped.get(t.ppid, 0) + t.last_self + t.last_children
        total = root_ticks
        for (pid, _start), t in tracked.items():
            children = t.last_children - t.first_children - reaped.get(pid, 0)
            total += (t.last_self - t.first_self) + max(0, children)
        return total

    def _descends(self, pid: int, root: int) -> bool:
        """Whether ``pid`` is ``root`` or one of its descendants (ppids as last seen)."""
        seen = set()
        while pid and pid not in seen:
            if pid == root:
                return True
            seen.add(pid)
            pid = self._ppids.get(pid, 0)
        return False

    def _node_record(self) -> dict[str, Any]:
        window = max(self._t1 - self._t0, 1e-9)
        busy = (self._busy1 - self._busy0) / self.tick
        own = self.own_ticks() / self.tick
        outside = max(0.0, busy - own)
        capacity = window * self.ncpu
        steal = None if self._steal0 is None else (self._steal1 - self._steal0) / self.tick
        return {
            "host": self.host,
            "ncpu": self.ncpu,
            "window_s": round(window, 3),
            "busy_cpu_s": round(busy, 3),
            "own_cpu_s": round(own, 3),
            "outside_cpu_s": round(outside, 3),
            "outside_cpu_pct": round(outside / capacity * 100, 2),
            "steal_pct": None if steal is None else round(steal / capacity * 100, 2),
            "load1_start": self._load_start,
            "load1_end": self._load_end,
            "load1_max": self._load_max,
            "samples": self._samples,
        }


def _rusage_s() -> float:
    """CPU seconds of this process and of every descendant it has reaped (each reaped
    process brings its own reaped descendants: the kernel sums them once each)."""
    import resource

    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def _fmt(value: float) -> str:
    return f"{value:g}"


def stolen_cpu_pct(node: dict, cores_used: int | None) -> float | None:
    """The outside CPU time a run's ``cores_used`` cores (ranks x threads on the node)
    could not be spared: what outside processes used beyond the cores the run left idle,
    as a percentage of the time of the cores it uses. A run that leaves no core idle (2
    ranks on 2 cores) loses all of it; one that leaves a core idle loses none until the
    outside work needs more than that core. None without the figures."""
    try:
        ncpu, window = int(node["ncpu"]), float(node["window_s"])
        outside = float(node["outside_cpu_s"])
    except (KeyError, TypeError, ValueError):
        return None
    if not cores_used or ncpu <= 0 or window <= 0:
        return None
    used = min(int(cores_used), ncpu)
    beyond = max(0.0, outside - (ncpu - used) * window)
    return round(beyond / (used * window) * 100, 2)


def assess(nodes: list[dict], max_outside_cpu_pct: float, max_steal_pct: float,
           cores_used: int | None = None, max_stolen_cpu_pct: float | None = None,
           ) -> dict[str, Any]:
    """The run's interference record from its per-node records: worst node, verdict, and
    the reasons (one per node and cause above its threshold). With ``cores_used`` (the
    run's ranks x threads per node) each node also gets ``stolen_cpu_pct``
    (``stolen_cpu_pct``), judged against ``max_stolen_cpu_pct``: on this project's 2-core
    machine a 2-rank CNN run with 6% of the node's CPU used outside ran 8-13% slower,
    a 1-rank run with 50% used outside within 2% (BENCHMARKS.md, section 8, issue #39)."""
    max_outside_cpu_pct, max_steal_pct = float(max_outside_cpu_pct), float(max_steal_pct)
    reasons = []
    if cores_used:
        nodes = [{**n, "cores_used": int(cores_used),
                  "stolen_cpu_pct": stolen_cpu_pct(n, cores_used)} for n in nodes]
    for n in nodes:
        if n["outside_cpu_pct"] > max_outside_cpu_pct:
            reasons.append(f"{n['host']}: outside processes used {n['outside_cpu_pct']:.1f}% of the "
                           f"node's CPUs (threshold {_fmt(max_outside_cpu_pct)}%)")
        elif (max_stolen_cpu_pct is not None and n.get("stolen_cpu_pct") is not None
              and n["stolen_cpu_pct"] > float(max_stolen_cpu_pct)):
            idle = max(int(n["ncpu"]) - int(cores_used), 0)
            reasons.append(f"{n['host']}: outside processes took {n['stolen_cpu_pct']:.1f}% of "
                           f"the time of the {min(int(cores_used), int(n['ncpu']))} cores the "
                           f"run uses ({n['outside_cpu_pct']:.1f}% of the node's CPUs, "
                           f"{'no core' if idle == 0 else f'{idle} cores'} left idle; "
                           f"threshold {_fmt(float(max_stolen_cpu_pct))}%)")
        if n.get("steal_pct") is not None and n["steal_pct"] > max_steal_pct:
            reasons.append(f"{n['host']}: steal time was {n['steal_pct']:.1f}% of the node's CPU "
                           f"time (threshold {_fmt(max_steal_pct)}%)")
    steals = [n["steal_pct"] for n in nodes if n.get("steal_pct") is not None]
    return {
        "method": METHOD,
        "window_s": max((n["window_s"] for n in nodes), default=0.0),
        "nodes": list(nodes),
        "outside_cpu_pct_max": max((n["outside_cpu_pct"] for n in nodes), default=0.0),
        "steal_pct_max": max(steals) if steals else None,
        "load1_max": max((n["load1_max"] for n in nodes), default=0.0),
        "thresholds": {"max_outside_cpu_pct": max_outside_cpu_pct, "max_steal_pct": max_steal_pct,
                       "max_stolen_cpu_pct": max_stolen_cpu_pct},
        "disturbed": bool(reasons),
        "reasons": reasons,
    }


# ---------------------------------------------------------------------- one per node


def watch(token: str, interval_s: float, out: str, stop_file: str, pids: Iterable[int] = (),
          ready_file: str = "", max_s: float = 0.0) -> dict[str, Any]:
    """Monitor this node until ``stop_file`` exists (or SIGTERM/SIGINT, or ``max_s``), then
    write its record to ``out`` (``{host}`` replaced by this host's name)."""
    host = socket.gethostname()
    stopping = threading.Event()

    def on_signal(_signum, _frame):
        stopping.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    monitor = Monitor(token, interval_s, pids).start()
    if ready_file:
        _write(Path(ready_file.replace("{host}", host)), {"host": host, "pid": os.getpid()})
    deadline = time.monotonic() + max_s if max_s else None
    while not stopping.wait(min(interval_s, 0.5)):
        if os.path.exists(stop_file) or (deadline and time.monotonic() > deadline):
            break
    record = monitor.stop()
    _write(Path(out.replace("{host}", host)), record)
    return record


def _write(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m scalesweep.measure.interference", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    w = sub.add_parser("watch", help="monitor this node until the stop file appears")
    w.add_argument("--token", required=True, help=f"the run's {TOKEN_VAR}")
    w.add_argument("--interval", type=float, required=True, help="seconds between samples")
    w.add_argument("--out", required=True, help="the node's record (JSON); {host} = this host's name")
    w.add_argument("--stop-file", required=True, help="stop when this file exists")
    w.add_argument("--ready-file", default="", help="written once monitoring runs ({host} replaced)")
    w.add_argument("--pid", type=int, action="append", default=[], help="a process that counts as own")
    w.add_argument("--max-s", type=float, default=0.0, help="stop after this many seconds (0: never)")
    args = ap.parse_args(argv)
    watch(args.token, args.interval, args.out, args.stop_file, args.pid, args.ready_file, args.max_s)
    return 0


if __name__ == "__main__":
    sys.exit(main())
