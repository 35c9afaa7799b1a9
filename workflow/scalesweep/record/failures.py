"""A point's attempt and failure records.

Every attempt has one line in ``attempts.jsonl`` (kept across re-runs: the point's
history of tries), numbered (``attempt``): written with ``state: started`` before anything
runs (:func:`start_attempt`), then replaced by the attempt's end, ``done`` or ``failed``
(:func:`append_attempt`). A line still ``started`` is an attempt whose harness was killed
(SIGKILL, out of memory, a lost node) before it could say how it ended: the next attempt
marks it failed (:data:`NO_END_REASON`), and :func:`read_attempts` reads it so before.
Each attempt keeps its own log, ``run.<attempt>.log`` (a hard link of the log the
harness writes, ``run.log``, which Snakemake deletes before the next attempt), named by
its line and its ``failure.json``.

A failed attempt also writes ``failure.json`` (the last failure: its reason, exit code,
wall time, command and log), which a later success removes. ``termination_recorder``
writes that record the moment a termination signal arrives, before Slurm kills the
harness.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

from scalesweep.record.metrics import now_iso, write_json_atomic
from scalesweep.record.pointdir import ATTEMPTS, FAILURE_JSON, attempt_log, fresh_log

STARTED = "started"
# the reason of an attempt that has a start and no end
NO_END_REASON = ("no end recorded: its harness was killed (SIGKILL, out of memory, a lost "
                 "node) or crashed; see its log")


def write_failure(out_dir: Path, attempt: dict) -> None:
    """``failure.json`` and the attempt's line in ``attempts.jsonl``."""
    write_json_atomic(out_dir / FAILURE_JSON, attempt)
    append_attempt(out_dir, attempt)


def termination_recorder(out_dir: Path, attempt: dict, t0: float):
    """A callback that writes the failure record the moment a termination signal arrives.

    On a Slurm time limit or scancel every process of the job gets SIGTERM, the batch
    script exits on it at once, and Slurm then kills what is left of the job (this harness
    included) within a fraction of a second, whatever KillWait says. A record written only
    after the payload has exited loses that race (seen on the local cluster: the temporary
    failure.json left unrenamed), and the point then shows as missing, without sacct's
    verdict. So: failure.json and the attempts.jsonl line now (no fsync: speed matters
    more than surviving a power cut here); the harness's end leaves that record as it is
    (``scalesweep.run.harness``).
    """
    def record(signum: int) -> None:
        if attempt.get("_recorded"):
            return
        attempt["_recorded"] = signum  # the harness's end keeps this cause
        snapshot = {k: v for k, v in attempt.items() if not k.startswith("_")}
        snapshot.update(end=now_iso(), wall_s=time.perf_counter() - t0, exit_code=-signum,
                        reason=exit_reason(-signum), state="failed")
        attempt["reason"] = snapshot["reason"]  # the cause, whatever exit code follows
        try:
            tmp = out_dir / f".{FAILURE_JSON}.{os.getpid()}.signal"
            tmp.write_text(json.dumps(snapshot, indent=2, sort_keys=True, default=str) + "\n")
            os.replace(tmp, out_dir / FAILURE_JSON)
            append_attempt(out_dir, snapshot)
        except OSError:
            pass
    return record


def exit_reason(rc: int) -> str:
    """Why an attempt failed, from its exit code (negative: the signal that killed it)."""
    if rc < 0:
        return f"killed by signal {signal.Signals(-rc).name}"
    if rc > 128 and rc - 128 < 65:
        try:
            return f"exit code {rc} (signal {signal.Signals(rc - 128).name} in the job)"
        except ValueError:
            pass
    return f"exit code {rc}"


def failure_reason(rc: int, payload_json: Path) -> str:
    """Why an attempt failed: its exit code (``exit_reason``) and, where the payload wrote
    its own account (``payload.json`` with ``status: failed`` and an ``error``, as
    infer_llm.py does: e.g. the cause its server's log gives), that error's first line."""
    try:
        record = json.loads(Path(payload_json).read_text())
    except (OSError, ValueError):
        record = None
    error = record.get("error") if isinstance(record, dict) and record.get("status") == "failed" else None
    # its first line (details, such as a log's tail, follow on later lines: "...; see LOG:")
    first = error.strip().splitlines()[0][:1000].rstrip(" :") if isinstance(error, str) and error.strip() else ""
    return f"{exit_reason(rc)}: {first}" if first else exit_reason(rc)


def _lines(out_dir: Path) -> list[str]:
    try:
        return (Path(out_dir) / ATTEMPTS).read_text().splitlines()
    except FileNotFoundError:
        return []


def _parsed(line: str) -> dict | None:
    try:
        record = json.loads(line)
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


def _write_lines(out_dir: Path, lines: list[str]) -> None:
    """``attempts.jsonl`` replaced at once (never half written: a signal may end the
    harness any moment)."""
    path = Path(out_dir) / ATTEMPTS
    tmp = path.with_name(f".{ATTEMPTS}.{os.getpid()}.{time.monotonic_ns()}")
    tmp.write_text("".join(f"{line}\n" for line in lines))
    os.replace(tmp, path)


def _ended_without_record(record: dict) -> dict:
    return {**record, "state": "failed", "reason": NO_END_REASON, "exit_code": None}


def start_attempt(out_dir: Path, attempt: dict, log_path: str | os.PathLike) -> Path:
    """Number the attempt (``attempt["attempt"]``: one more than any before), give it its
    own log (``run.<attempt>.log``: a hard link of ``log_path``, so it keeps what the
    harness writes there after Snakemake deletes ``log_path`` for the next attempt), and
    write its ``started`` line. An earlier attempt still ``started`` has ended without a
    record: its line says so now. Returns the attempt's log (``log_path`` itself where the
    filesystem has no hard links)."""
    lines = _lines(out_dir)
    records = [_parsed(line) for line in lines]
    numbers = [r["attempt"] for r in records if r and isinstance(r.get("attempt"), int)]
    n = max([len(lines), *numbers]) + 1
    log = fresh_log(log_path)
    while True:
        own = attempt_log(log, n)
        try:
            os.link(log, own)
            break
        except FileExistsError:  # a log of an attempt this file does not list: keep it
            n += 1
        except OSError:
            own = log
            break
    attempt.update(attempt=n, log=str(own), state=STARTED)
    lines = [json.dumps(_ended_without_record(r), sort_keys=True, default=str)
             if r and r.get("state") == STARTED else line for line, r in zip(lines, records)]
    _write_lines(out_dir, [*lines, json.dumps(attempt, sort_keys=True, default=str)])
    return own


def append_attempt(out_dir: Path, attempt: dict) -> None:
    """The attempt's line in the point's ``attempts.jsonl`` (done or failed): it replaces
    the attempt's earlier line (its start, or the record written at a termination
    signal), or is appended (an attempt with no number: one not started here)."""
    line = json.dumps(attempt, sort_keys=True, default=str)
    lines = _lines(out_dir)
    n = attempt.get("attempt")
    at = [i for i, old in enumerate(lines) if n is not None
          and (_parsed(old) or {}).get("attempt") == n]
    if at:
        lines[at[-1]] = line
    else:
        lines.append(line)
    _write_lines(out_dir, lines)


def read_attempts(out_dir: Path, running: bool = False) -> list[dict]:
    """The point's attempts, one record each, oldest first. One that started and recorded
    no end is failed (:data:`NO_END_REASON`), unless it is the last and ``running`` (a
    harness measures the point now: ``scalesweep.campaign.status.owner_state`` of its
    ``running.json``). Unreadable lines are left out."""
    records = [r for r in map(_parsed, _lines(out_dir)) if r is not None]
    return [_ended_without_record(r)
            if r.get("state") == STARTED and (i < len(records) - 1 or not running) else r
            for i, r in enumerate(records)]
