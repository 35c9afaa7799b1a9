"""The one metrics writer and reader.

Standard library only: payloads import this module inside containers, where only the
payload's own dependencies exist (the repository is bound at /mnt/code and
``workflow/`` is put on ``sys.path``).
"""

from __future__ import annotations

import json
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
    """A metrics file is missing, unreadable, or of another schema."""


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
    if data.get("schema") != SCHEMA_NAME:
        raise MetricsError(f"{path}: not a scalesweep metrics file")
    if data.get("schema_version") != SCHEMA_VERSION:
        raise MetricsError(
            f"{path}: schema_version {data.get('schema_version')!r}, "
            f"this scalesweep reads {SCHEMA_VERSION}"
        )
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


def host_info() -> dict[str, Any]:
    return {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
    }
