"""A server process started by an engine: its port, its log, its health, its stop, and
why it stopped (from its log)."""

from __future__ import annotations

import ctypes
import http.client
import os
import re
import signal
import subprocess
import time
from pathlib import Path

from llm_payload.errors import PointError
from scalesweep.record.ports import listen_port
from llm_payload.http_client import http_json


def now_iso() -> str:
    """Local time with its offset (the line :func:`start_server` writes before a start)."""
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def free_port(host: str) -> int:
    """The server's port: nothing listens on it, and no outgoing connection can take it
    before the server listens (scalesweep.record.ports)."""
    return listen_port(host)


def _pdeathsig() -> None:
    """In the child: get SIGTERM if the payload dies (even SIGKILLed). Linux only."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except Exception:
        pass


LOG_HEADER = "--- scalesweep infer_llm "  # start_server's line before each start's output


def start_server(cmd: list[str], env: dict[str, str], log_path: Path) -> subprocess.Popen:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log = open(log_path, "ab")
    log.write(f"{LOG_HEADER}{now_iso()}: {' '.join(cmd)}\n".encode())
    log.flush()
    try:
        return subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,  # its own process group: stop it and its children at once
            preexec_fn=_pdeathsig,
        )
    finally:
        log.close()


# SIGTERM to SIGKILL of a server started here. Its clean shutdown (uvicorn's for llama.cpp:
# close the connections, free the model) takes 0.2 s when no request is in flight (the
# synthetic model, 2 busy cores); with one in flight it has no bound: uvicorn waits for
# it, and its generation runs on to max_tokens in a worker thread even once the client
# has closed its connection (at full CPU, for minutes with a large max_tokens), so no
# longer wait would end it, and SIGKILL loses nothing (the payload writes the record). Whatever a payload leaves running (a server it
# could not stop) the harness stops once the payload has ended (scalesweep.run.reaper).
SERVER_STOP_GRACE_S = 3.0


def stop_server(proc: subprocess.Popen | None, grace: float = SERVER_STOP_GRACE_S) -> int | None:
    """Terminate the server's process group, SIGKILL after ``grace`` seconds."""
    if proc is None:
        return None
    pgid = proc.pid  # start_new_session: the group id is the server's pid

    def signal_group(sig: int) -> None:
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    signal_group(signal.SIGTERM)
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        signal_group(signal.SIGKILL)
        proc.wait(timeout=grace)
    signal_group(signal.SIGKILL)  # stragglers (Ollama runners) left in the group
    return proc.returncode


def _log_tail(path: Path, n: int = 20) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return "\n".join("    " + line for line in lines[-n:])


# A line of a server log that says what went wrong: llama.cpp's "error loading model",
# Ollama's "Error: ...", a Python exception's last line ("ValueError: ..."). Not "cannot":
# llama.cpp logs "... cannot be used with preferred buffer type ..." on every good load.
_CAUSE = re.compile(r"\b(error|failed|fatal|unable|not found|no such|denied|out of memory)\b"
                    r"|^[A-Za-z_][\w.]*(Error|Exception|Exit):", re.IGNORECASE)


def log_cause(path: Path | None, limit: int = 2) -> str | None:
    """Why a server stopped, from its log: the last ``limit`` lines of its latest start
    (after :data:`LOG_HEADER`) that name an error (no traceback frames), joined by " | ";
    None when none does (a server killed by a signal says nothing)."""
    try:
        text = path.read_text(errors="replace") if path else ""
    except OSError:
        return None
    lines = text[text.rfind(LOG_HEADER):].splitlines()[1:] if LOG_HEADER in text else text.splitlines()
    causes = [line.strip() for line in lines if not line.startswith((" ", "\t")) and _CAUSE.search(line)]
    picked = list(dict.fromkeys(causes))[-limit:]
    return " | ".join(line[:300] for line in picked) or None


def server_exit_error(proc: subprocess.Popen, log_path: Path | None, when: str) -> str:
    """One line (the cause from its log) and the log's tail: a server that exited."""
    cause, rc = log_cause(log_path), proc.returncode
    how = f"was killed by signal {-rc}" if rc < 0 else f"exited with status {rc}"
    if rc < 0 and -rc in signal.valid_signals():
        how = f"was killed by signal {signal.Signals(-rc).name}"
    return (f"server {how} {when}" + (f": {cause}" if cause else "")
            + (f"; see {log_path}:\n{_log_tail(log_path)}" if log_path else ""))


def wait_healthy(base: str, path: str, proc: subprocess.Popen | None, timeout: float, log_path: Path | None) -> float:
    """Poll GET ``path`` until 200; raise PointError naming the log (and the cause it
    gives) if the server exits, or ``timeout`` passes. Returns the seconds waited."""
    t0 = time.perf_counter()
    last = "no answer"
    while True:
        if proc is not None and proc.poll() is not None:
            raise PointError(server_exit_error(proc, log_path, "before becoming healthy"))
        try:
            status, _ = http_json(base, "GET", path, timeout=5.0)
            if status == 200:
                return time.perf_counter() - t0
            last = f"HTTP {status}"
        except (OSError, http.client.HTTPException) as exc:
            last = f"{type(exc).__name__}: {exc}"
        if time.perf_counter() - t0 > timeout:
            cause = log_cause(log_path)
            where = (f": its log says {cause}" if cause else "") + (
                f"; see {log_path}:\n{_log_tail(log_path)}" if log_path else "")
            raise PointError(f"server {base} not healthy after {timeout:.0f}s (last: {last}){where}")
        time.sleep(0.2)
