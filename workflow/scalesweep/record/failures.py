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

A full disk must not take the record with it: each attempt holds a reserve in the point's
directory (:data:`RESERVE`, :func:`make_reserve`, written before the payload runs), and a
record that meets ENOSPC or EDQUOT frees it and is written again (:func:`with_room`).
Such a failure is named by its device and file (:func:`no_space_reason`).
"""

from __future__ import annotations

import errno
import json
import os
import re
import signal
import time
from pathlib import Path

from scalesweep.record.metrics import now_iso, write_json_atomic
from scalesweep.record.mountinfo import mount_of
from scalesweep.record.pointdir import ATTEMPTS, FAILURE_JSON, MIN_FREE_BYTES, attempt_log, fresh_log

STARTED = "started"
# the reason of an attempt that has a start and no end
NO_END_REASON = ("no end recorded: its harness was killed (SIGKILL, out of memory, a lost "
                 "node) or crashed; see its log")


# the attempt's room on a full disk: a file of its own in the point's directory, freed when
# a record cannot be written otherwise, removed when the attempt ends
RESERVE = ".reserve"
RESERVE_BYTES = 256 << 10  # failure.json and attempts.jsonl (rewritten whole) fit, twice
NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
# a device with less free than this after a failed payload is full (what a write that
# failed with ENOSPC may have freed again is smaller); the writable check before the run
# asks for MIN_FREE_BYTES, the reserve takes RESERVE_BYTES of it
FULL_BYTES = RESERVE_BYTES
assert MIN_FREE_BYTES > RESERVE_BYTES + FULL_BYTES


def make_reserve(out_dir: str | os.PathLike) -> None:
    """Hold :data:`RESERVE_BYTES` (and twice the size of ``attempts.jsonl``, which is
    rewritten whole) in the point's directory. Random bytes: a compressing file system
    would hold nothing for zeros. Nothing where it cannot be made (the disk is full
    already: the point's writable check said so before)."""
    path = Path(out_dir) / RESERVE
    try:
        size = RESERVE_BYTES + 2 * (Path(out_dir) / ATTEMPTS).stat().st_size
    except OSError:
        size = RESERVE_BYTES
    try:
        with open(path, "wb") as fh:
            fh.write(os.urandom(size))
            fh.flush()
            os.fsync(fh.fileno())
    except OSError:
        release_reserve(out_dir)


def release_reserve(out_dir: str | os.PathLike) -> bool:
    """Free the reserve (truncated first: its blocks are freed even where another process
    holds it open); whether there was one."""
    path = Path(out_dir) / RESERVE
    try:
        os.truncate(path, 0)
    except OSError:
        pass
    try:
        path.unlink()
    except OSError:
        return False
    return True


def with_room(out_dir: str | os.PathLike, write, *args):
    """``write(*args)``; where it finds the disk full (ENOSPC, EDQUOT), once more after the
    reserve is freed. The error of the second try (or of one with no reserve) is raised."""
    try:
        return write(*args)
    except OSError as exc:
        if exc.errno not in NO_SPACE or not release_reserve(out_dir):
            raise
    return write(*args)


def write_failure(out_dir: Path, attempt: dict) -> None:
    """``failure.json`` and the attempt's line in ``attempts.jsonl``: on a full disk in the
    room the reserve leaves (:func:`with_room`)."""
    record = {k: v for k, v in attempt.items() if not k.startswith("_")}
    with_room(out_dir, write_json_atomic, Path(out_dir) / FAILURE_JSON, record)
    with_room(out_dir, append_attempt, out_dir, record)


def device_of(path: str | os.PathLike) -> str:
    """The file system holding ``path``: its source and mount point, e.g. "/dev/sda1
    (mounted at /work)" or "tmpfs (mounted at /tmp/x)"; the path itself where
    /proc/self/mountinfo cannot tell."""
    m = mount_of(path)
    return f"{m.source} (mounted at {m.point})" if m else str(path)


def no_space_reason(file: str | os.PathLike, what: str | None = None) -> str:
    """"no space left on <device> while writing <file>" (``what``: the words for what was
    written, where it is not one known file)."""
    return f"no space left on {device_of(file)} while writing {what or file}"


_NO_SPACE_LOG = re.compile(r"No space left on device(?:: '([^']+)')?|\[Errno 28\]|Disk quota exceeded")


def payload_no_space(out_dir: str | os.PathLike, log: str | os.PathLike | None) -> str | None:
    """Why a payload that failed did: no space, where its log names the file (ENOSPC with a
    path), or its point's device is full (less free than :data:`FULL_BYTES`, where the
    writable check before the run found at least ``MIN_FREE_BYTES``), or its log says so
    (a device elsewhere: the log's line); None otherwise. Read before the reserve is
    freed."""
    out_dir = Path(out_dir)
    named = said = None
    if log:
        try:
            with open(log, "rb") as fh:
                fh.seek(max(0, os.fstat(fh.fileno()).st_size - (64 << 10)))
                tail = fh.read().decode(errors="replace")
        except OSError:
            tail = ""
        for line in tail.splitlines():
            m = _NO_SPACE_LOG.search(line)
            if m:
                said, named = line.strip()[:300], m.group(1) or named
    if named:
        return no_space_reason(named)
    try:
        st = os.statvfs(out_dir)
        full = st.f_frsize * (st.f_bfree if os.geteuid() == 0 else st.f_bavail) < FULL_BYTES
    except OSError:
        full = False
    if full:
        return no_space_reason(out_dir, f"the payload's files in {out_dir}")
    if said:
        return f"no space left on a device the payload wrote to (its log: {said})"
    return None


def end_started(out_dir: str | os.PathLike, reason: str, exit_code: int) -> bool:
    """The point's last attempt, still ``started`` (its harness could not finish it: a
    full disk under a write it did not expect), ended failed with ``reason``: its line and
    ``failure.json``, in the reserve's room. Whether there was one to end."""
    records = read_attempts(out_dir, running=True)
    if not records or records[-1].get("state") != STARTED:
        return False
    record = {**records[-1], "state": "failed", "reason": reason, "exit_code": exit_code,
              "end": now_iso()}
    write_failure(Path(out_dir), record)
    return True


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
        tmp = out_dir / f".{FAILURE_JSON}.{os.getpid()}.signal"
        try:
            with_room(out_dir, tmp.write_text,
                      json.dumps(snapshot, indent=2, sort_keys=True, default=str) + "\n")
            os.replace(tmp, out_dir / FAILURE_JSON)
            with_room(out_dir, append_attempt, out_dir, snapshot)
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


def failure_reason(rc: int, payload_json: Path, *, log: str | os.PathLike | None = None,
                   oom: str | None = None) -> str:
    """Why an attempt failed: its exit code (``exit_reason``) and, where the payload wrote
    its own account (``payload.json`` with ``status: failed`` and an ``error``, as
    infer_llm.py does: e.g. the cause its server's log gives), that error's first line.
    Without one: "out of memory (``oom``: the kernel's or Slurm's word,
    ``scalesweep.measure.oomkill.oom_evidence``): <exit>", or, where the payload's log
    or its device say the disk is full (:func:`payload_no_space`), "no space left on
    <device> while writing <file> (<exit>)"."""
    try:
        record = json.loads(Path(payload_json).read_text())
    except (OSError, ValueError):
        record = None
    error = record.get("error") if isinstance(record, dict) and record.get("status") == "failed" else None
    # its first line (details, such as a log's tail, follow on later lines: "...; see LOG:")
    first = error.strip().splitlines()[0][:1000].rstrip(" :") if isinstance(error, str) and error.strip() else ""
    if first:
        return f"{exit_reason(rc)}: {first}"
    if oom:
        return f"out of memory ({oom}): {exit_reason(rc)}"
    full = payload_no_space(Path(payload_json).parent, log)
    return f"{full} ({exit_reason(rc)})" if full else exit_reason(rc)


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
    record: its line says so now. Then the attempt's reserve (:func:`make_reserve`: room
    for its end's record on a disk that fills up). Returns the attempt's log
    (``log_path`` itself where the filesystem has no hard links)."""
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
    make_reserve(out_dir)
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
