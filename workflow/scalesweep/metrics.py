"""The one metrics writer and reader.

Standard library only: payloads import this module inside containers, where only the
payload's own dependencies exist (the repository is bound at /mnt/code and
``workflow/`` is put on ``sys.path``).
"""

from __future__ import annotations

import json
import math
import os
import platform
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1
SCHEMA_NAME = "scalesweep.metrics"


class MetricsError(ValueError):
    """A metrics file is missing, unreadable, of another schema, or lacks a field (or has
    a non-numeric one) that the summary needs."""


# What the summary tables read from a sweep point's record, by the payload that wrote it
# (the record's "payload": the payload's own name). Required fields must be there; every
# listed field that is there must be a number (times: finite; lists: of numbers). Records
# without a known "payload" (start-up timings, hand-made ones) get the type checks only.
REQUIRED_FIELDS = {
    "cnn": ("epoch_s", "train_s", "final_loss", "final_accuracy"),
    "llm_inference": ("wall_s",),
}
TIME_FIELDS = ("epoch_s", "train_s", "wall_s")  # finite, never NaN or infinite
NUMBER_FIELDS = ("epoch_s", "train_s", "wall_s", "final_loss", "final_accuracy",
                 "images_per_epoch", "images_per_s", "tokens_per_s", "requests_per_s",
                 "peak_rss_mb", "harness_wall_s", "harness_overhead_s")
LIST_FIELDS = ("epoch_s",)


def _is_number(value: Any, finite: bool) -> bool:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    return ok and (not finite or math.isfinite(value))


def field_problem(data: dict[str, Any]) -> str | None:
    """The first missing or non-numeric field of a metrics record, described; None if
    the fields the summary reads are all there and numbers."""
    for name in REQUIRED_FIELDS.get(data.get("payload"), ()):
        if data.get(name) is None:
            return f"field {name!r} is missing"
    for name in NUMBER_FIELDS:
        value = data.get(name)
        if value is None and name not in REQUIRED_FIELDS.get(data.get("payload"), ()):
            continue
        finite = name in TIME_FIELDS
        if name in LIST_FIELDS:
            if not isinstance(value, list) or not value:
                return f"field {name!r} is not a list of numbers ({value!r})"
            bad = [v for v in value if not _is_number(v, finite)]
            if bad:
                return f"field {name!r} holds a non-numeric value ({bad[0]!r})"
        elif not _is_number(value, finite):
            return f"field {name!r} is not a number ({value!r})"
    return None


def write_json_atomic(path: str | os.PathLike, data: Any) -> Path:
    """Write ``data`` as JSON to ``path`` via a temporary file and rename.

    A crash at any moment leaves either the complete previous file, the complete new
    file, or nothing: never half a file.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(data, fh, indent=2, sort_keys=True, default=str)
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return path


def write_metrics(path: str | os.PathLike, record: dict[str, Any]) -> Path:
    """Stamp ``record`` with the schema and write it atomically."""
    out = dict(record)
    out["schema"] = SCHEMA_NAME
    out["schema_version"] = SCHEMA_VERSION
    return write_json_atomic(path, out)


def read_metrics(path: str | os.PathLike) -> dict[str, Any]:
    """Read a metrics file, refusing other schemas with an error naming the file."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError as exc:
        raise MetricsError(f"{path}: no such metrics file") from exc
    except json.JSONDecodeError as exc:
        raise MetricsError(f"{path}: not valid JSON ({exc})") from exc
    if not isinstance(data, dict) or data.get("schema") != SCHEMA_NAME:
        raise MetricsError(f"{path}: not a scalesweep metrics file")
    if data.get("schema_version") != SCHEMA_VERSION:
        raise MetricsError(
            f"{path}: schema_version {data.get('schema_version')!r}, "
            f"this scalesweep reads {SCHEMA_VERSION}"
        )
    problem = field_problem(data)
    if problem:
        raise MetricsError(f"{path}: {problem}")
    return data


def now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def peak_rss_mb() -> float:
    """Peak resident set size of this process in MiB (Linux reports KiB)."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def git_commit(repo: str | os.PathLike | None = None) -> str | None:
    """The commit of the code being measured, or None outside a git checkout."""
    if os.environ.get("SCALESWEEP_GIT_COMMIT"):
        return os.environ["SCALESWEEP_GIT_COMMIT"]
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=repo or Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


# What a payload records of its own environment: how to tell, from a run's metrics, that a
# container runtime's mode was in effect where the payload ran (host-MPI mode: the host's
# MPI directories first on LD_LIBRARY_PATH and the GTL preloaded; the image it ran in).
CONTAINER_ENV_VARS = ("LD_LIBRARY_PATH", "LD_PRELOAD", "MPICH_GPU_SUPPORT_ENABLED",
                      "APPTAINER_CONTAINER", "APPTAINER_NAME", "SINGULARITY_CONTAINER",
                      "SINGULARITY_NAME", "CH_RUNNING")


def container_env() -> dict[str, str]:
    """The variables of CONTAINER_ENV_VARS this process sees (the set ones only)."""
    return {k: os.environ[k] for k in CONTAINER_ENV_VARS if os.environ.get(k)}


def loaded_libraries(*prefixes: str) -> list[str]:
    """The shared libraries this process has mapped whose file name starts with one of
    ``prefixes`` (from /proc/self/maps, in load order; paths as this process sees them,
    so inside a container the container's paths). [] where /proc is not Linux's."""
    out: list[str] = []
    try:
        with open("/proc/self/maps") as fh:
            for line in fh:
                parts = line.split(None, 5)
                if len(parts) < 6:
                    continue
                path = parts[5].strip()
                if path.startswith("/") and os.path.basename(path).startswith(prefixes) \
                        and path not in out:
                    out.append(path)
    except OSError:
        return []
    return out


def host_info() -> dict[str, Any]:
    return {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
    }
