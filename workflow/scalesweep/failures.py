"""A point's attempt and failure records.

Every attempt appends one line to ``attempts.jsonl`` (kept across re-runs: the point's
history of tries); a failed attempt also writes ``failure.json`` (the last failure: its
reason, exit code, wall time, command and log), which a later success removes.
``termination_recorder`` writes that record the moment a termination signal arrives,
before Slurm kills the harness.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

from scalesweep.metrics import now_iso, write_json_atomic
from scalesweep.pointdir import ATTEMPTS, FAILURE_JSON


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
    (``scalesweep.harness``).
    """
    def record(signum: int) -> None:
        if attempt.get("_recorded"):
            return
        attempt["_recorded"] = True
        snapshot = {k: v for k, v in attempt.items() if k != "_recorded"}
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


def append_attempt(out_dir: Path, attempt: dict) -> None:
    """One line (the attempt, done or failed) appended to the point's ``attempts.jsonl``."""
    with open(out_dir / ATTEMPTS, "a") as fh:
        fh.write(json.dumps(attempt, sort_keys=True, default=str) + "\n")
