"""What the harness measures around a run: the interference monitors of its measurement
window (``InterferenceProbe``: scalesweep.measure.interference, one watcher per node of a
multi-node point under Slurm) and the machine's speed just before and just after it on
every node (``MachineProbe``: scalesweep.measure.probe)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from scalesweep.measure import probe as machine_probe
from scalesweep.measure.interference import METHOD, Monitor, assess
from scalesweep.measure.memtimeline import MemoryTimeline
from scalesweep.platform.launch import Launch, shell_line
from scalesweep.record.pointdir import INTERFERENCE_DIR
from scalesweep.run.guard import dies_with_harness
from scalesweep.run.payload_process import stop_group


WATCHERS_READY_TIMEOUT_S = 60



class InterferenceProbe:
    """The interference monitors of one run's measurement window.

    A thread in the harness watches the harness's node; a multi-node point under Slurm
    also gets one ``python -m scalesweep.measure.interference watch`` per node (an overlapping
    ``srun`` step), stopped by a stop file after the payload ends. If that step fails, the
    harness's node alone is monitored, and ``nodes_monitored`` says so.
    """

    def __init__(self, launch: Launch, env: dict, out_dir: Path, token: str,
                 measurement: dict, log_path: str, memory: MemoryTimeline | None = None):
        m = measurement  # the config's (validated: every key there)
        self.memory = memory  # sampled by the harness's own monitor (its node only)
        self.launch, self.env, self.token, self.log_path = launch, env, token, log_path
        self.interval = float(m["sample_interval_s"])
        self.max_outside = float(m["max_outside_cpu_pct"])
        self.max_steal = float(m["max_steal_pct"])
        self.max_stolen = m.get("max_stolen_cpu_pct")
        self.dir = out_dir / INTERFERENCE_DIR
        self.local: Monitor | None = None
        self.watchers: subprocess.Popen | None = None
        self.note: str | None = None
        self.error: str | None = None

    def start(self) -> None:
        try:
            self.local = Monitor(self.token, self.interval, pids=(os.getpid(),),
                                 rusage_root=True, memory=self.memory).start()
        except OSError as exc:
            self.error = f"interference monitor failed to start: {exc}"
            return
        if self.launch.nodes > 1:
            if self.launch.launcher == "srun":
                self._start_watchers()
            else:
                self.note = f"{self.launch.launcher} without Slurm: only the harness's node is monitored"

    def watch_command(self) -> list[str]:
        n = self.launch.nodes
        return ["srun", "--overlap", f"--nodes={n}", f"--ntasks={n}", "--ntasks-per-node=1",
                self.launch.host_python, "-m", "scalesweep.measure.interference", "watch",
                "--token", self.token, "--interval", str(self.interval),
                "--out", str(self.dir / "{host}.json"), "--stop-file", str(self.dir / "stop"),
                "--ready-file", str(self.dir / "ready-{host}")]

    def _start_watchers(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        for stale in [*self.dir.glob("*.json"), *self.dir.glob("ready-*"), self.dir / "stop"]:
            stale.unlink(missing_ok=True)
        env = dict(self.env)
        workflow = str(Path(self.launch.code_root) / "workflow")
        env["PYTHONPATH"] = os.pathsep.join(p for p in (workflow, env.get("PYTHONPATH", "")) if p)
        cmd = self.watch_command()
        with open(self.log_path, "a") as log:
            log.write(f"# interference monitors: {shell_line(cmd)}\n")
            log.flush()
            try:
                self.watchers = subprocess.Popen(dies_with_harness(cmd), stdout=log,
                                                 stderr=subprocess.STDOUT, env=env,
                                                 start_new_session=True)
            except OSError as exc:
                self.note = f"per-node monitors did not start ({exc}): only the harness's node is monitored"
                return
        deadline = time.monotonic() + WATCHERS_READY_TIMEOUT_S
        while len(list(self.dir.glob("ready-*"))) < self.launch.nodes:
            if self.watchers.poll() is not None:
                self.note = (f"per-node monitors exited ({self.watchers.returncode}) before all "
                             "were ready: only the harness's node is monitored")
                self.watchers = None
                return
            if time.monotonic() > deadline:
                break  # go on: whatever monitors run by the end are merged
            time.sleep(0.1)

    def stop(self) -> dict[str, Any] | None:
        """The run's interference record (``assess``'s, plus ``nodes_monitored``)."""
        if self.local is None:
            return None if self.error is None else {"method": METHOD, "error": self.error}
        if self.watchers is not None:
            (self.dir / "stop").touch()
        try:
            nodes = [self.local.stop()]
        except OSError as exc:
            return {"method": METHOD, "error": f"interference monitor failed: {exc}"}
        if self.watchers is not None:
            try:
                self.watchers.wait(timeout=30 + 2 * self.interval)
            except subprocess.TimeoutExpired:
                stop_group(self.watchers, grace_s=5)
            for path in sorted(self.dir.glob("*.json")):
                try:
                    node = json.loads(path.read_text())
                except (OSError, ValueError):
                    continue
                if node.get("host") != nodes[0]["host"]:  # the harness's own monitor wins
                    nodes.append(node)
            if len(nodes) < self.launch.nodes and self.note is None:
                self.note = f"per-node monitors wrote {len(nodes)} of {self.launch.nodes} records"
        record = assess(nodes, self.max_outside, self.max_steal,
                        self.launch.ranks_per_node * self.launch.threads, self.max_stolen)
        record["nodes_monitored"] = {"requested": self.launch.nodes, "monitored": len(nodes),
                                     "note": self.note}
        return record



class MachineProbe:
    """The machine's speed before and after the payload, on every node of the point
    (``scalesweep.measure.probe``): a ``python -m scalesweep.measure.probe`` on this host, or one task per
    node (an overlapping ``srun`` step) for a multi-node point under Slurm. Never beside
    the payload, and out of the run's wall time (``seconds``). A probe that fails is
    recorded (``errors``), never a failed run."""

    def __init__(self, launch: Launch, env: dict, log_path: str):
        python = launch.host_python if launch.launcher == "srun" and launch.nodes > 1 \
            else (sys.executable or launch.host_python)
        self.argv, self.note = machine_probe.probe_command(launch.nodes, launch.launcher, python)
        self.requested = launch.nodes
        self.nodes = launch.nodes if launch.launcher == "srun" else 1  # those probed
        self.env, self.log_path = env, log_path
        self.results: dict[str, list] = {}
        self.errors: dict[str, str] = {}
        self.seconds = 0.0

    def run(self, when: str) -> None:
        nodes, error, seconds = machine_probe.run_on_nodes(self.argv, self.env, self.nodes,
                                                           wrap=dies_with_harness)
        self.seconds += seconds
        self.results[when] = nodes
        if error:
            self.errors[when] = error
        figures = "; ".join(f"{n.get('host')}: {float(n.get('gflops') or 0):.1f} GFLOP/s, "
                            f"{float(n.get('gbps') or 0):.1f} GB/s" for n in nodes)
        with open(self.log_path, "a") as log:
            log.write(f"# machine probe {when} ({seconds:.2f} s): {figures or '-'}"
                      f"{f' ({error})' if error else ''}\n")

    def record(self) -> dict[str, Any]:
        out: dict[str, Any] = {"before": self.results.get("before", []),
                               "after": self.results.get("after", []),
                               "method": machine_probe.method(), "wall_s": self.seconds,
                               "nodes": {"requested": self.requested, "probed": self.nodes}}
        if self.note:
            out["note"] = self.note
        if self.errors:
            out["error"] = dict(self.errors)
        return out
