"""The harness's processes: the payload run in a session of its own, dying with the
harness (scalesweep.run.guard), its log written, a termination signal forwarded to its
process group; a multi-node LLM point's servers started before its client; and whatever
a payload left running stopped when it ends (the harness is their subreaper:
scalesweep.run.reaper)."""

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
from scalesweep.record.pointdir import PAYLOAD_JSON, SERVERS_DIR
from scalesweep.run.guard import dies_with_harness
from scalesweep.run.reaper import LEFTOVER_GRACE_S, stop_leftovers


SERVER_START_TIMEOUT_S = 900



def _run_llm_servers_and_client(servers: Launch, client: Launch, env: dict, log_path: str,
                                attempt: dict, record=None) -> int:
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
            if time.monotonic() > deadline:
                attempt["reason"] = f"LLM servers not ready within {SERVER_START_TIMEOUT_S} s"
                return 124
            time.sleep(0.5)
        urls = sorted(p.read_text().strip() for p in ready_dir.glob("ready-*"))
        attempt["servers"] = urls
        argv = launch_command(replace(client, args=client.args + ("--servers", ",".join(urls))))
        with open(log_path, "a") as log:
            log.write(f"# client: {shell_line(argv)}\n")
        return _run_payload(argv, env, log_path, record)
    finally:
        # servers stop cleanly (and write their own metrics) on the stop file; a signal
        # only if they do not
        (ready_dir / "stop").touch()
        try:
            srv.wait(timeout=60)
        except subprocess.TimeoutExpired:
            _stop_group(srv)
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



def _stop_leftovers(token: str, log_path, record=None) -> tuple[list[str], int]:
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



def _stop_group(proc: subprocess.Popen, grace_s: float = 30.0) -> None:
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



def _run_payload(argv: list[str], env: dict, log_path: str, record=None) -> int:
    with open(log_path, "a") as log:
        proc = subprocess.Popen(dies_with_harness(argv), stdout=log, stderr=subprocess.STDOUT,
                                env=env, start_new_session=True)
        previous = _forward_termination(proc, record)
        try:
            return proc.wait()
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
