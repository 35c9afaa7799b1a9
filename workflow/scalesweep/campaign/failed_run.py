"""The closing message of a Snakemake run that failed (the Snakefile's ``onerror``): what
failed, named. The jobs come from Snakemake's log of the run (the path ``onerror`` is
given: its "Error in rule <rule>:" blocks, less a job that a later restart finished); a
failed point (rule ``run_point``) is named by its directory with the reason of its own
record (``failure.json``, else its last line in ``attempts.jsonl``), any other job (the
summary, a report, a figure, a build) by its rule and its log. A run whose log names no
failed job says where to look, never that points failed.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from scalesweep.record.failures import read_attempts
from scalesweep.record.pointdir import FAILURE_JSON, METRICS_JSON, RUNS_DIR

POINT_RULE = "run_point"
LISTED = 20  # points named in the message; `scalesweep status` lists them all

_ERROR = re.compile(r"^Error in rule (\w+):$")
_FIELD = re.compile(r"^\s+(\w+): (.*)$")
_FINISHED = re.compile(r"^Finished jobid: (\d+) ")
_LOG_NOTE = " (check log file(s) for error details)"


def _logs(log) -> list[Path]:
    """``onerror``'s ``log``: one path, or (Snakemake 9) a list of them."""
    if not log:
        return []
    return [Path(p) for p in ([log] if isinstance(log, (str, os.PathLike)) else log)]


def failed_jobs(log) -> list[dict]:
    """The jobs Snakemake's log ``log`` says failed, in order: {"rule", "jobid", "output",
    "log", "message"} each (lists of paths for output and log); a job restarted and then
    finished is not one of them. None where the log cannot be read."""
    jobs: dict[str, dict] = {}
    readable = False
    for path in _logs(log):
        try:
            lines = path.read_text(errors="replace").splitlines()
        except OSError:
            continue
        readable = True
        block = None
        for line in lines:
            m = _ERROR.match(line)
            if m:
                block = {"rule": m[1], "jobid": None, "output": [], "log": [], "message": ""}
                continue
            field = _FIELD.match(line) if block is not None else None
            if field:
                key, value = field[1], field[2]
                if key == "jobid":
                    block["jobid"] = value.strip()
                    jobs.pop(block["jobid"], None)  # the latest error of a job counts
                    jobs[block["jobid"]] = block
                elif key in ("output", "log"):
                    value = value.removesuffix(_LOG_NOTE)
                    block[key] = [v.strip() for v in value.split(",") if v.strip()]
                elif key == "message":
                    block["message"] = value.strip()
                continue
            if block is not None and not line.startswith((" ", "\t")):
                block = None
            m = _FINISHED.match(line)
            if m:
                jobs.pop(m[1], None)
    return list(jobs.values()) if readable else None


def point_reason(point_dir: Path) -> tuple[str, str]:
    """(reason, log) of a failed point: its failure.json where it is the last attempt's
    (one left by an earlier failed attempt is not), else its last attempt's line."""
    attempts = read_attempts(point_dir)
    last = attempts[-1] if attempts else {}
    try:
        record = json.loads((point_dir / FAILURE_JSON).read_text())
        if (isinstance(record, dict) and record.get("reason")
                and (not last or record.get("attempt") == last.get("attempt"))):
            return str(record["reason"]), str(record.get("log") or "")
    except (OSError, ValueError):
        pass
    if last and last.get("state") != "done" and last.get("reason"):
        return str(last.get("reason")), str(last.get("log") or "")
    return "", ""


def _point_path(output: list[str]) -> str | None:
    for out in output:
        parts = Path(out).parts
        runs = Path(RUNS_DIR).parts
        for i in range(len(parts) - len(runs)):
            if parts[i:i + len(runs)] == runs and parts[-1] == METRICS_JSON:
                return "/".join(parts[i + len(runs):-1])
    return None


def failure_message(log, partial_hint: str, directory: str | os.PathLike = ".") -> str:
    """What ``onerror`` prints: the failed points (named, with their reasons) and the
    other failed jobs (named, with their logs), each only where there is one."""
    jobs = failed_jobs(log)
    where = ", ".join(str(p) for p in _logs(log)) or "the output above"
    if not jobs:
        return (f"scalesweep: the run failed; Snakemake's log says why: {where}. Finished "
                "points are kept; fix the cause and run the same command again "
                "(`scalesweep status` lists every point).")
    points, others = [], []
    for job in jobs:
        path = _point_path(job["output"]) if job["rule"] == POINT_RULE else None
        (points if path else others).append((path, job))
    lines = []
    if points:
        lines.append(f"scalesweep: {len(points)} point{'s' if len(points) > 1 else ''} "
                     "failed; finished points are kept:")
        for path, job in points[:LISTED]:
            reason, point_log = point_reason(Path(directory) / RUNS_DIR / path)
            point_log = point_log or ", ".join(job["log"])
            lines.append(f"  {path}: {reason or 'no failure record'}"
                         + (f" (log: {point_log})" if point_log else ""))
        if len(points) > LISTED:
            lines.append(f"  ... and {len(points) - LISTED} more (`scalesweep status` lists "
                         "them)")
        lines.append("Run the same command again to measure them (only what failed or is "
                     "missing runs). A summary and report of what finished meanwhile: the "
                     f"same command with {partial_hint}, then snakemake --report report.html.")
    if others:
        many = len(others) > 1
        lines.append(("scalesweep: no point failed; " if not points else "scalesweep: ")
                     + f"{len(others)} other job{'s' if many else ''} (measuring no point) "
                     "failed:")
        for _, job in others:
            said = (f"log: {', '.join(job['log'])}" if job["log"] else
                    job["message"] or f"see {where}")
            lines.append(f"  {job['rule']} ({said})")
        lines.append("Measured points are kept and not measured again: fix what the log "
                     "says and run the same command again.")
    return "\n".join(lines)
