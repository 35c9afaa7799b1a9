"""Resident memory of a run's ranks over time, and the node's GPU memory: the
``memory_timeline`` block of a run's metrics.

Standard library only. No thread or process of its own: the harness's interference
monitor (``scalesweep.measure.interference.Monitor``, ``memory=``) calls :meth:`MemoryTimeline.sample`
from its sampling thread at its interval (the config's ``measurement.sample_interval_s``,
1 s by default), after its scan of ``/proc`` has found the run's own processes (those
carrying the run's ``SCALESWEEP_RUN_TOKEN``). Per sample this reads one small file per
rank process and per descendant of a rank (``/proc/<pid>/statm``), plus, for a process the
sampler has not classified for good yet, its ``cmdline``; GPU memory is one sysfs file per
device (AMD) or one in-process NVML call per device (NVIDIA).

**Which processes are ranks.** Among the run's own processes, a *rank* is a process that
runs the payload script: its ``argv[0]`` is a Python interpreter (the file name starts with
``python``) and its first argument that is not an interpreter option (``-u``, ``-X opt``,
...) has the payload script's file name (``train_cnn.py``; the directory differs in and
out of a container). ``python -c ...`` and ``python -m ...`` run no script. So launchers
never count: ``mpirun``/``orted``, ``srun``, torchrun's agent (``python -m
torch.distributed.run ... train_cnn.py``), the harness's exec guard (``python -c``),
``ch-run`` (it execs the payload: the rank is the same process afterwards), Apptainer's
starter, the harness itself. A matching process below another rank (a forked data-loader
worker has its parent's command line) is no rank of its own. A process that does not
match is read again while it is young (``RECHECK_S``: between fork and exec it still has
its parent's command line).

**What a rank's memory is.** Its resident set (``statm``'s resident pages: ``VmRSS``) plus
that of every live descendant, token or not (an LLM payload's inference server and the
server's runner, data-loader workers): pages shared between a rank and a forked child
are counted in both, so a tree's value is an upper bound. Launcher processes are left out.
The rank's number is the first of ``RANK``, ``OMPI_COMM_WORLD_RANK``, ``PMIX_RANK``,
``PMI_RANK``, ``SLURM_PROCID`` in its environment; a lone rank without one is ``"0"``,
several are ``"pid<N>"``.

**The node's memory** (``node_used_mb``): with every sample, the memory in use on the
harness's node, ``MemTotal - MemAvailable`` of ``/proc/meminfo``: what the ranks' trees
miss and a container mode may cost (an image unpacked into tmpfs, a FUSE daemon serving a
SquashFS image, the runtime's own processes), and whatever else the node holds (read it as
a difference between paired runs, never alone).

**One node.** The monitor runs in the harness, so the ranks of other nodes of a
multi-node point are not sampled (``nodes_sampled`` 1 of ``nodes``, said in ``note``);
each rank's own peak (``per_rank[].peak_rss_mb`` from the payload, ``ru_maxrss``) covers
every node.

**GPU memory** (points with GPUs on a ``cuda`` or ``rocm`` site): the memory used on every
GPU of the node, summed (as the vendor tools list them: every device, whatever the
visibility variables say). Sources, first that answers: AMD ``/sys/class/drm/card*/device/
mem_info_vram_used`` (amdgpu), NVIDIA NVML (``libnvidia-ml.so.1``, in process); else the
vendor tool (``amd-smi metric --mem-usage --json``, ``rocm-smi --showmeminfo vram --json``,
``nvidia-smi --query-gpu=memory.used``), at most every ``TOOL_MIN_INTERVAL_S`` (a tool is
a process, rocm-smi a heavy one: samples in between are null). No source: no GPU series,
and the reason in ``gpu.error``; the run never fails for it.

**Size.** At most ``MAX_SAMPLES`` stored samples: when the run is long, consecutive samples
are merged pairwise (bins of 2, 4, 8, ... raw samples), each stored value the maximum over
its bin (peaks survive) and its time the middle of the bin; ``bin`` says how many raw
samples a stored one covers.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import PurePosixPath
from typing import Any, Iterable

from scalesweep.measure.gpumem import GPU_DEVICES, GpuSource, open_gpu_source

MAX_SAMPLES = 600
RECHECK_S = 10.0  # a process that is no rank is read again while it is this young
RANK_VARS = ("RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID")
METHOD = ("VmRSS (/proc/<pid>/statm resident pages) of each rank process (a Python process "
          "running the payload script) plus its descendants, sampled by the harness's "
          "interference monitor on its own node; launchers left out")
_PAGE_MB = os.sysconf("SC_PAGE_SIZE") / 2**20
_PY_OPTS_WITH_VALUE = {"W", "X", "Q"}  # -W arg, -X opt: the value may be the next argument


# ----------------------------------------------------------------------------- ranks


def script_of(argv: list[str]) -> str | None:
    """The script a Python command line runs (None: no Python interpreter, ``-c``, ``-m``,
    or no script: an interactive interpreter)."""
    if not argv or not PurePosixPath(argv[0]).name.startswith("python"):
        return None
    args = iter(argv[1:])
    for arg in args:
        if arg == "--":
            return next(args, None)
        if arg == "-" or not arg.startswith("-"):
            return arg
        if arg.startswith("--"):  # --check-hash-based-pycs MODE is the one with a value
            if arg == "--check-hash-based-pycs":
                next(args, None)
            continue
        flags = arg[1:]
        for i, flag in enumerate(flags):
            if flag in "cm":  # -c cmd, -m module: no script
                return None
            if flag in _PY_OPTS_WITH_VALUE:
                if i == len(flags) - 1:
                    next(args, None)
                break
    return None


def runs_script(argv: list[str], script_name: str) -> bool:
    """Whether the command line is a Python interpreter running a script of that name."""
    script = script_of(argv)
    return script is not None and PurePosixPath(script).name == script_name


def read_cmdline(pid: int, proc: str = "/proc") -> list[str] | None:
    try:
        with open(f"{proc}/{pid}/cmdline", "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    return [a.decode(errors="replace") for a in data.rstrip(b"\0").split(b"\0")] if data else []


def rank_from_environ(pid: int, proc: str = "/proc") -> str | None:
    """The rank the launcher gave the process (RANK_VARS, first set), or None."""
    try:
        with open(f"{proc}/{pid}/environ", "rb") as fh:
            env = dict(item.split(b"=", 1) for item in fh.read().split(b"\0") if b"=" in item)
    except OSError:
        return None
    for var in RANK_VARS:
        value = env.get(var.encode(), b"").decode(errors="replace").strip()
        if value:
            return value
    return None


def node_used_mb(proc: str = "/proc") -> float | None:
    """Memory in use on this node, MiB: MemTotal - MemAvailable (None where unreadable)."""
    fields = {}
    try:
        with open(f"{proc}/meminfo") as fh:
            for line in fh:
                name, _, rest = line.partition(":")
                if name in ("MemTotal", "MemAvailable"):
                    fields[name] = int(rest.split()[0])
    except (OSError, ValueError, IndexError):
        return None
    if len(fields) < 2:
        return None
    return round((fields["MemTotal"] - fields["MemAvailable"]) / 1024, 1)


def rss_mb(pid: int, proc: str = "/proc") -> float | None:
    """The process's resident set in MiB (statm's second field: pages), None when gone."""
    try:
        with open(f"{proc}/{pid}/statm", "rb") as fh:
            return int(fh.read().split()[1]) * _PAGE_MB
    except (OSError, IndexError, ValueError):
        return None


# ----------------------------------------------------------------------------- bins


class Bins:
    """Samples (t, {series: value}) kept in at most ``cap`` bins of equal width (in raw
    samples, a power of two): a full store merges neighbouring bins pairwise. A bin's
    value is the maximum over its samples (None where none had one), its time the middle
    of its first and last sample."""

    def __init__(self, cap: int = MAX_SAMPLES):
        self.cap = max(2, int(cap))
        self.width = 1
        self.raw = 0
        self.bins: list[list] = []  # [t_first, t_last, n, {series: value}]
        self._open: list | None = None

    @staticmethod
    def _merge(a: list, b: list) -> list:
        values = dict(a[3])
        for k, v in b[3].items():
            if v is not None and (values.get(k) is None or v > values[k]):
                values[k] = v
            elif k not in values:
                values[k] = None
        return [a[0], b[1], a[2] + b[2], values]

    def add(self, t: float, values: dict[str, float | None]) -> None:
        self.raw += 1
        sample = [t, t, 1, dict(values)]
        self._open = sample if self._open is None else self._merge(self._open, sample)
        if self._open[2] >= self.width:
            self.bins.append(self._open)
            self._open = None
            if len(self.bins) >= 2 * self.cap:
                self.bins = self._pairs(self.bins)
                self.width *= 2

    def _pairs(self, bins: list[list]) -> list[list]:
        out = [self._merge(bins[i], bins[i + 1]) for i in range(0, len(bins) - 1, 2)]
        return out + ([bins[-1]] if len(bins) % 2 else [])

    def result(self) -> tuple[list[float], dict[str, list], int]:
        """(times, {series: values}, raw samples per stored one), at most ``cap`` long."""
        bins = self.bins + ([self._open] if self._open is not None else [])
        width = self.width
        while len(bins) > self.cap:
            bins, width = self._pairs(bins), width * 2
        names: list[str] = []
        for b in bins:
            names += [k for k in b[3] if k not in names]
        times = [(b[0] + b[1]) / 2 for b in bins]
        return times, {k: [b[3].get(k) for b in bins] for k in names}, width


# ----------------------------------------------------------------------------- sampler


class MemoryTimeline:
    """The ranks' resident memory (and the GPUs') over a run, sampled by the interference
    monitor (:meth:`sample`), stored as :meth:`record`."""

    def __init__(self, script: str, *, interval_s: float, gpu_device: str | None = None,
                 nodes: int = 1, world_size: int = 1, max_samples: int = MAX_SAMPLES,
                 proc: str = "/proc", gpu_opener=None):
        self.script = PurePosixPath(script).name
        self.interval_s = float(interval_s)
        self.gpu_device = gpu_device if gpu_device in GPU_DEVICES else None
        self.nodes, self.world_size = int(nodes), int(world_size)
        self.proc = proc
        self.host = socket.gethostname()
        self.bins = Bins(max_samples)
        self._seen: dict[tuple[int, int], tuple[bool, float]] = {}  # key -> (rank?, first seen)
        self._labels: dict[tuple[int, int], str] = {}  # rank key -> label
        self._pids: dict[str, int] = {}  # label -> pid (the last process of that label)
        self._gpu_opener = gpu_opener or open_gpu_source
        self._gpu: GpuSource | None = None
        self._gpu_name: str | None = None
        self._gpu_tried = False
        self._gpu_error: str | None = None
        self._gpu_last = -float("inf")
        self._gpu_peaks: list[float] = []
        self.error: str | None = None

    @classmethod
    def for_launch(cls, launch, device: str | None, interval_s: float) -> "MemoryTimeline":
        """The sampler of a point's launch (``scalesweep.platform.launch.Launch``): its payload
        script, nodes and ranks; GPUs where the point has some on a GPU site."""
        return cls(launch.payload, interval_s=interval_s,
                   gpu_device=device if launch.gpus_per_node > 0 else None,
                   nodes=launch.nodes, world_size=launch.world_size)

    # ------------------------------------------------------------------ sampling
    def sample(self, t_s: float, ppids: dict[int, int], own: Iterable[tuple[int, int]]) -> None:
        """One sample at ``t_s`` seconds into the window: ``ppids`` of every live process
        (pid -> parent), ``own`` the (pid, start time) of the run's live own processes.
        Never raises: a failure stops the sampling and is kept in ``error``."""
        if self.error is not None:
            return
        try:
            self._sample(t_s, ppids, list(own))
        except Exception as exc:  # noqa: BLE001  (the measurement must never fail for it)
            self.error = f"memory sampling stopped: {type(exc).__name__}: {exc}"

    def _is_rank(self, key: tuple[int, int], now: float) -> bool:
        known = self._seen.get(key)
        if known is not None and (known[0] or now - known[1] > RECHECK_S):
            return known[0]
        argv = read_cmdline(key[0], self.proc)
        rank = argv is not None and runs_script(argv, self.script)
        self._seen[key] = (rank, known[1] if known else now)
        return rank

    def _sample(self, t_s: float, ppids: dict[int, int], own: list[tuple[int, int]]) -> None:
        now = time.monotonic()
        alive = {pid for pid, _ in own}
        candidates = {key for key in own if self._is_rank(key, now)}
        self._seen = {k: v for k, v in self._seen.items() if k[0] in ppids}  # forget the gone
        pids = {pid for pid, _ in candidates}

        def has_rank_ancestor(pid: int) -> bool:
            seen = set()
            pid = ppids.get(pid, 0)
            while pid and pid not in seen:
                if pid in pids:
                    return True
                seen.add(pid)
                pid = ppids.get(pid, 0)
            return False

        ranks = sorted(k for k in candidates if not has_rank_ancestor(k[0]))
        children: dict[int, list[int]] = {}
        if ranks:
            for pid, parent in ppids.items():
                children.setdefault(parent, []).append(pid)
        values: dict[str, float | None] = {}
        per_rank = []
        for key in ranks:
            label = self._label(key, alive)
            tree, todo, total = set(), [key[0]], 0.0
            while todo:
                pid = todo.pop()
                if pid in tree:
                    continue
                tree.add(pid)
                todo.extend(children.get(pid, ()))
                total += rss_mb(pid, self.proc) or 0.0
            values[label] = round(total, 1)
            per_rank.append(total)
        values["_total"] = round(sum(per_rank), 1) if per_rank else None
        values["_node"] = node_used_mb(self.proc)
        if self.gpu_device:
            values["_gpu"] = self._gpu_sample(now)
        self.bins.add(round(t_s, 3), values)

    def _label(self, key: tuple[int, int], alive: set[int]) -> str:
        label = self._labels.get(key)
        if label is None:
            label = rank_from_environ(key[0], self.proc) or f"pid{key[0]}"
            holder = self._pids.get(label)
            if holder is not None and holder != key[0] and holder in alive:
                label = f"{label}-pid{key[0]}"  # two live processes claim one rank
            self._labels[key] = label
            self._pids[label] = key[0]
        return label

    def _gpu_sample(self, now: float) -> float | None:
        if not self._gpu_tried:
            self._gpu_tried = True
            self._gpu, first, self._gpu_error = self._gpu_opener(self.gpu_device)
            self._gpu_name = getattr(self._gpu, "name", None)
            if first is not None:
                self._gpu_last = now
                return self._gpu_value(first)
        if self._gpu is None or now - self._gpu_last < self._gpu.min_interval_s:
            return None
        self._gpu_last = now
        try:
            return self._gpu_value(self._gpu.read())
        except (OSError, subprocess.SubprocessError, ValueError) as exc:
            self._gpu_error = f"{self._gpu.name}: {exc}"
            self._gpu.close()
            self._gpu = None
            return None

    def _gpu_value(self, used: list[float]) -> float:
        if len(self._gpu_peaks) < len(used):
            self._gpu_peaks += [0.0] * (len(used) - len(self._gpu_peaks))
        self._gpu_peaks = [max(p, u) for p, u in zip(self._gpu_peaks, used)]
        return round(sum(used), 1)

    # ------------------------------------------------------------------ record
    def record(self) -> dict[str, Any]:
        """The ``memory_timeline`` block (see the module's docstring); never raises."""
        try:
            return self._record()
        except Exception as exc:  # noqa: BLE001  (the run's metrics must still be written)
            return {"method": METHOD, "interval_s": self.interval_s, "host": self.host,
                    "error": f"memory record failed: {type(exc).__name__}: {exc}"}

    def _record(self) -> dict[str, Any]:
        if self._gpu is not None:
            self._gpu.close()
            self._gpu = None
        t, series, width = self.bins.result()
        total = series.pop("_total", [None] * len(t))
        gpu = series.pop("_gpu", None)
        node = series.pop("_node", None)
        labels = sorted(series, key=lambda s: (not s.isdigit(), int(s) if s.isdigit() else 0, s))
        if len(labels) == 1 and labels[0].startswith("pid") and "-" not in labels[0]:
            series = {"0": series[labels[0]]}  # a lone rank without a rank variable
            self._pids["0"] = self._pids.pop(labels[0])
            labels = ["0"]
        note = None
        if self.nodes > 1:
            note = (f"only the harness's node ({self.host}) is sampled: its ranks, not those of "
                    f"the other {self.nodes - 1} nodes; per_rank[].peak_rss_mb (each rank's "
                    "own peak, from the payload) covers every node")
        if not labels:
            note = "; ".join(filter(None, [note, f"no process running {self.script} was found"]))
        out: dict[str, Any] = {
            "method": METHOD,
            "interval_s": self.interval_s,
            "host": self.host,
            "nodes": self.nodes,
            "nodes_sampled": 1,
            "world_size": self.world_size,
            "script": self.script,
            "samples": self.bins.raw,
            "bin": width,
            "t_s": [round(x, 3) for x in t],
            "ranks": {label: self._pids.get(label) for label in labels},
            "rss_mb": {label: series[label] for label in labels},
            "total_rss_mb": total,
            "note": note,
        }
        if node is not None and any(v is not None for v in node):
            out["node_used_mb"] = node
        if self.gpu_device:
            out["gpu"] = {"device": self.gpu_device, "source": self._gpu_name,
                          "devices": len(self._gpu_peaks),
                          "peak_mb_per_device": [round(p, 1) for p in self._gpu_peaks],
                          "error": self._gpu_error}
            if gpu is not None and any(v is not None for v in gpu):
                out["gpu_mem_mb"] = gpu
        if self.error:
            out["error"] = self.error
        return out
