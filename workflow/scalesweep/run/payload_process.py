"""The harness's processes: the payload run in a session of its own, dying with the
harness (scalesweep.run.guard), its log written, a termination signal forwarded to its
process group; a multi-node LLM point's servers started before its client; and whatever
a payload left running stopped when it ends (the harness is their subreaper:
scalesweep.run.reaper); a point's time limit outside Slurm (``TimeLimit``): past it, every
process of the run is stopped and the attempt fails "time limit N s exceeded"."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from dataclasses import replace
from pathlib import Path

from scalesweep.platform.launch import Launch, launch_command, shell_line
from scalesweep.record.metrics import write_json_atomic
from scalesweep.record.pointdir import METRICS_JSON, PAYLOAD_JSON, SERVERS_DIR
from scalesweep.run.guard import dies_with_harness
from scalesweep.run.reaper import LEFTOVER_GRACE_S, stop_leftovers


SERVER_START_TIMEOUT_S = 900
TIME_LIMIT_RC = 124  # as timeout(1)'s: the point ran past its time limit



# outside Slurm, once a point's series has finished runs: at most this many times the
# longest of them, and never under the floor (start-up on a busy machine, a cold cache)
LIMIT_PER_MEASURED_WALL = 10
LIMIT_FLOOR_S = 300


def time_limit_s(workload: dict, site: dict, measured_walls=(), environ=os.environ) -> int | None:
    """A point's time limit (seconds) where no Slurm job bounds it: what its first Slurm
    attempt would ask for (``scalesweep.run.slurm.runtime_min``: the workload's
    ``max_runtime_min``, capped by the site's ``slurm.max_runtime_min``), so a hung point
    ends the same way here as there (:class:`TimeLimit`); and, where its series has
    finished runs (``measured_walls``: their ``harness_wall_s``, :func:`series_walls`), at
    most LIMIT_PER_MEASURED_WALL x the longest (at least LIMIT_FLOOR_S): the plan's
    estimate of a point is its series' measured wall time, and a point ten times slower
    is hung, not slow. None in a Slurm job: its own time limit ends it (TIMEOUT)."""
    from scalesweep.run.slurm import runtime_min

    if environ.get("SLURM_JOB_ID"):
        return None
    limit = 60 * runtime_min(workload, site, 1)
    walls = [w for w in measured_walls if w and w > 0]
    if walls:
        limit = min(limit, max(LIMIT_FLOOR_S, round(LIMIT_PER_MEASURED_WALL * max(walls))))
    return limit


def series_walls(out_dir: str | os.PathLike) -> list[float]:
    """``harness_wall_s`` of the finished runs of the series a point's directory
    (``<geometry>/rep<k>/<runtime>``) belongs to: every repeat and runtime of its arm and
    geometry, warm-up blocks included (a cold run is the slowest it will be)."""
    walls = []
    for metrics in sorted(Path(out_dir).parent.parent.glob(f"rep*/*/{METRICS_JSON}")):
        try:
            wall = json.loads(metrics.read_text()).get("harness_wall_s")
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(wall, (int, float)) and not isinstance(wall, bool):
            walls.append(float(wall))
    return walls


class TimeLimit:
    """A point's time limit (seconds from its start; None: none), as a Slurm job has one:
    a point that runs past it fails with "time limit N s exceeded" and every process of
    the run (all that carry its ``token``: the launcher, its ranks, stopped ones too) is
    stopped, SIGTERM and SIGCONT, then SIGKILL (``scalesweep.run.reaper.stop_leftovers``).
    ``stopped``: what it stopped (None while the limit holds)."""

    def __init__(self, seconds: float | None, token: str):
        self.seconds, self.token = seconds, token
        self.deadline = None if seconds is None else time.monotonic() + seconds
        self.stopped: list[str] | None = None

    @property
    def exceeded(self) -> bool:
        return self.stopped is not None

    @property
    def reason(self) -> str:
        return f"time limit {self.seconds:g} s exceeded"

    def remaining(self) -> float | None:
        return None if self.deadline is None else max(0.0, self.deadline - time.monotonic())

    def wait(self, proc: subprocess.Popen, log_path) -> int:
        """``proc``'s exit status, or TIME_LIMIT_RC once the limit has passed (the run's
        processes stopped: :meth:`expire`)."""
        try:
            return proc.wait(timeout=self.remaining())
        except subprocess.TimeoutExpired:
            rc = self.expire(log_path)
            if proc.poll() is None:  # not stopped with the run's token (reaped: it was)
                proc.kill()
                proc.wait()
            return rc

    def expire(self, log_path) -> int:
        """Stop every process of the run, say so in its log; TIME_LIMIT_RC."""
        self.stopped = stop_leftovers(self.token)
        try:
            with open(log_path, "a") as log:
                log.write(f"# {self.reason}: stopped (SIGTERM and SIGCONT, then SIGKILL after "
                          f"{LEFTOVER_GRACE_S:g} s): {'; '.join(self.stopped) or 'nothing left'}\n")
        except OSError:
            pass
        return TIME_LIMIT_RC



def run_llm_servers_and_client(servers: Launch, client: Launch, env: dict, log_path: str,
                               attempt: dict, record=None, limit: TimeLimit | None = None) -> int:
    ready_dir = Path(servers.out_dir) / SERVERS_DIR
    ready_dir.mkdir(parents=True, exist_ok=True)
    for stale in [*ready_dir.glob("ready-*"), ready_dir / "stop"]:
        stale.unlink(missing_ok=True)
    with open(log_path, "a") as log:
        log.write(f"# servers: {shell_line(launch_command(servers))}\n")
        log.flush()
        srv = subprocess.Popen(dies_with_harness(launch_command(servers)), stdout=log,
                               stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + SERVER_START_TIMEOUT_S
        while len(list(ready_dir.glob("ready-*"))) < servers.nodes:
            if srv.poll() is not None:
                attempt["reason"] = f"LLM servers exited ({srv.returncode}) before all were ready"
                return srv.returncode or 1
            if limit is not None and limit.remaining() == 0:
                return limit.expire(log_path)
            if time.monotonic() > deadline:
                attempt["reason"] = f"LLM servers not ready within {SERVER_START_TIMEOUT_S} s"
                return 124
            time.sleep(0.5)
        urls = sorted(p.read_text().strip() for p in ready_dir.glob("ready-*"))
        attempt["servers"] = urls
        argv = launch_command(replace(client, args=client.args + ("--servers", ",".join(urls))))
        with open(log_path, "a") as log:
            log.write(f"# client: {shell_line(argv)}\n")
        return run_payload(argv, env, log_path, record, limit)
    finally:
        # servers stop cleanly (and write their own metrics) on the stop file; a signal
        # only if they do not
        (ready_dir / "stop").touch()
        try:
            srv.wait(timeout=60)
        except subprocess.TimeoutExpired:
            stop_group(srv)
        _with_server_records(Path(client.out_dir) / PAYLOAD_JSON, ready_dir)


def _with_server_records(payload: Path, servers_dir: Path) -> None:
    """The client's record (payload.json) of a point whose servers ran apart (several
    nodes, or a client on the host): the software stack and peak memory of its first
    server beside its own, as a point whose client started its server has them (each
    server's whole record stays under servers/)."""
    try:
        record = json.loads(payload.read_text())
        first = json.loads((servers_dir / "server-0.json").read_text())
    except (OSError, ValueError):
        return  # a client or server that wrote nothing: the run's failure says why
    if not isinstance(record, dict) or not isinstance(first, dict) or "server_stack" in record:
        return
    if first.get("server_stack"):
        record["server_stack"] = first["server_stack"]
    server_memory = {k: v for k, v in (first.get("memory") or {}).items() if k.startswith("server_")}
    if server_memory:
        record["memory"] = {**server_memory, **(record.get("memory") or {})}
    write_json_atomic(payload, record)



def stop_leftovers_shielded(token: str, log_path, record=None) -> tuple[list[str], int]:
    """``scalesweep.run.reaper.stop_leftovers``, not cut short by a Ctrl-C or SIGTERM (they
    would leave the rest running), nor deaf to one: the first is held until the cleanup
    ends, and recorded the moment it comes (``record``: the attempt's
    ``termination_recorder``, as while the payload runs). Returns what it stopped (also
    written to the log) and the signal held (0: none), for the caller to end with."""
    held: list[int] = []

    def hold(signum, _frame):
        if not held:
            held.append(signum)
        if record is not None:
            record(signum)

    previous = _on_termination(hold)
    try:
        left = stop_leftovers(token)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if left:
        try:
            with open(log_path, "a") as log:
                log.write("# the payload left these running; stopped (SIGTERM, then SIGKILL "
                          f"after {LEFTOVER_GRACE_S:g} s): {'; '.join(left)}\n")
        except OSError:
            pass
    return left, (held[0] if held else 0)



def stop_group(proc: subprocess.Popen, grace_s: float = 30.0) -> None:
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    except ProcessLookupError:
        pass



def run_payload(argv: list[str], env: dict, log_path: str, record=None,
                limit: TimeLimit | None = None) -> int:
    with open(log_path, "a") as log:
        proc = subprocess.Popen(dies_with_harness(argv), stdout=log, stderr=subprocess.STDOUT,
                                env=env, start_new_session=True)
        previous = _forward_termination(proc, record)
        try:
            return limit.wait(proc, log_path) if limit is not None else proc.wait()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)



def _forward_termination(proc: subprocess.Popen, record=None) -> dict:
    """Pass SIGTERM/SIGINT (scancel, Ctrl-C) to the payload's whole process group, and
    record the failure at once (see ``scalesweep.record.failures.termination_recorder``)."""
    def forward(signum, _frame):
        try:
            os.killpg(proc.pid, signum)
        except ProcessLookupError:
            pass
        if record is not None:
            record(signum)

    return _on_termination(forward)



def _on_termination(handler) -> dict:
    """``handler`` for SIGTERM and SIGINT (scancel, Ctrl-C); the handlers it replaced, to
    restore. Nothing where this is not the main thread (Python allows it there only)."""
    previous = {}
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            previous[sig] = signal.signal(sig, handler)
        except ValueError:  # not the main thread
            pass
    return previous
