"""The memory an engine uses: its process tree sampled while the point runs."""

from __future__ import annotations

import os
import threading
from collections import defaultdict
from typing import Any


def _proc_children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = defaultdict(list)
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as fh:
                stat = fh.read()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        kids[ppid].append(int(d))
    return kids


def _status_kb(pid: int) -> dict[str, int]:
    out = {}
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith(("VmRSS:", "VmHWM:")):
                    out[line.split(":")[0]] = int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return out


class MemorySampler(threading.Thread):
    """Samples the engine's process tree (``engine.pid``): its server and the server's
    children (Ollama runs its model in a child runner), or this process for an engine
    that runs in-process (the ``server_*`` fields then measure this process).

    ``peak_tree_rss_mb``: the largest sampled sum of VmRSS over the tree;
    ``vmhwm_mb``: the sum over the processes seen of their kernel-recorded peak VmHWM
    (exact per process, an upper bound for the tree)."""

    def __init__(self, pid: int, interval: float = 0.5) -> None:
        super().__init__(daemon=True, name="mem-sampler")
        self.pid, self.interval = pid, interval
        self.peak_tree_rss_kb = 0
        self.hwm_kb: dict[int, int] = {}
        self._stop_event = threading.Event()

    def sample(self) -> None:
        kids = _proc_children()
        tree, todo = [], [self.pid]
        while todo:
            p = todo.pop()
            tree.append(p)
            todo.extend(kids.get(p, []))
        rss = 0
        for p in tree:
            st = _status_kb(p)
            rss += st.get("VmRSS", 0)
            if "VmHWM" in st:
                self.hwm_kb[p] = max(self.hwm_kb.get(p, 0), st["VmHWM"])
        self.peak_tree_rss_kb = max(self.peak_tree_rss_kb, rss)

    def run(self) -> None:
        while not self._stop_event.is_set():
            self.sample()
            self._stop_event.wait(self.interval)

    def stop(self) -> dict[str, Any]:
        self._stop_event.set()
        self.join(5)
        self.sample()
        return {
            "server_peak_rss_mb": round(self.peak_tree_rss_kb / 1024, 1),
            "server_vmhwm_mb": round(sum(self.hwm_kb.values()) / 1024, 1),
            "server_processes": len(self.hwm_kb),
        }
