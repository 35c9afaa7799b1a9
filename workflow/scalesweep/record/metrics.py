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
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, NamedTuple

from scalesweep.record.geometry import AXES as GEOMETRY_AXES
from scalesweep.record.measures import METRICS, Metric

SCHEMA_VERSION = 1
SCHEMA_NAME = "scalesweep.metrics"


class MetricsError(ValueError):
    """A metrics file is missing, unreadable, of another schema, or lacks a field (or has
    one of another kind) that a reader needs (FIELDS)."""


# Every field of a sweep point's record that a reader uses (collect.run_row and the
# summary, the report's provenance and memory tables, `scalesweep status`, `rerun`,
# `compare`, `campaign merge`): declared once, per payload (the record's "payload": the
# payload's own name), with its kind and unit, and checked where the file is read
# (read_metrics: field_problem). So no reader meets a field of another shape: a bad file
# is refused naming the file, the field, its value and what was expected, and its point
# is failed (points.csv, `scalesweep status`; `scalesweep rerun --failed` measures it
# again). "a.b" is field b of the mapping a; "a[].b" field b of every item of the list a.
# A required field must be there and not null (a field below a mapping: where the mapping
# is); any other may be absent or null (older records, runs without Slurm, a container or
# a GPU). Records of no known payload (start-up timings) are checked against nothing here.


class Field(NamedTuple):
    path: str
    kind: str  # a key of KINDS
    unit: str = ""
    required: bool = False

    def expected(self) -> str:
        return KINDS[self.kind][0] + (f" ({self.unit})" if self.unit else "")


def _is_number(value: Any, finite: bool = False) -> bool:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not ok or not finite:
        return ok
    # an int beyond a float's range is no finite float (and math.isfinite overflows on it)
    return abs(value) <= sys.float_info.max if isinstance(value, int) else math.isfinite(value)


def _is_whole(value: Any) -> bool:
    return _is_number(value) and (isinstance(value, int) or value.is_integer())


# the statistics of a set of values a payload records (infer_llm.summarize); a summary of
# no values is {"n": 0}, and "std" of one value is null
SUMMARY_STATS = ("n", "mean", "std", "min", "p50", "p90", "p99", "max")

KINDS: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "number": ("a number", _is_number),
    "finite": ("a finite number", lambda v: _is_number(v, True)),
    "count": ("a whole number >= 0",
              lambda v: _is_whole(v) and v >= 0),
    "text": ("text", lambda v: isinstance(v, str)),
    "flag": ("true or false", lambda v: isinstance(v, bool)),
    "mapping": ("a mapping", lambda v: isinstance(v, dict)),
    "list": ("a list", lambda v: isinstance(v, list)),
    "texts": ("a list of text", lambda v: isinstance(v, list)
              and all(isinstance(x, str) for x in v)),
    # records before the interference monitor listed its reasons gave one text
    "text or texts": ("text or a list of text", lambda v: isinstance(v, str) or (
        isinstance(v, list) and all(isinstance(x, str) for x in v))),
    "numbers": ("a non-empty list of finite numbers", lambda v: isinstance(v, list)
                and bool(v) and all(_is_number(x, True) for x in v)),
    "summary": ("a mapping of statistics (n, mean, p50, ...) to finite numbers",
                lambda v: isinstance(v, dict) and all(
                    v.get(k) is None or _is_number(v[k], True) for k in SUMMARY_STATS)),
    "job": ("text or a whole number", lambda v: isinstance(v, str)
            or _is_whole(v)),
}

# every sweep point's record, whatever its payload (harness, launcher, interference)
RUN_FIELDS = (
    Field("point", "mapping"),  # required where it is read (collect.read_run)
    *(Field(f"point.{axis}", "text", required=True) for axis in ("workload", "runtime")),
    *(Field(f"point.{axis}", "count", required=True)
      for axis in (*GEOMETRY_AXES, "repeat")),
    Field("point.arm", "text"),
    # the container runtime's mode (charliecloud: dir, squashfs; ...); null for native
    Field("mode", "text"),
    Field("launcher", "text"),
    Field("hosts", "texts"),
    Field("peak_rss_mb", "number", "MiB"),
    Field("harness_wall_s", "number", "s"),
    Field("harness_overhead_s", "number", "s"),
    Field("harness_start", "text"), Field("harness_end", "text"),
    Field("start", "text"), Field("end", "text"),
    Field("git_commit", "text"),
    Field("image", "mapping"), Field("image.content_digest", "text"),
    Field("slurm", "mapping"), Field("slurm.job_id", "job"), Field("slurm_job_id", "job"),
    Field("versions", "mapping"), Field("host", "mapping"),
    Field("engine", "mapping"), Field("engine.name", "text"),
    Field("model", "mapping"), Field("model.name", "text"), Field("dataset", "mapping"),
    Field("runtime_provenance", "mapping"), Field("mpi", "mapping"),
    Field("disturbed", "flag"),
    Field("interference", "mapping"), Field("interference.reasons", "text or texts"),
    Field("interference.outside_cpu_pct_max", "number", "%"),
    Field("interference.steal_pct_max", "number", "%"),
    Field("interference.load1_max", "number"),
    Field("allocation", "mapping"), Field("allocation.shared_cores", "flag"),
    Field("order", "mapping"), Field("order.position", "count"),
    # what the run was measured under (scalesweep.plan.identity): absent before issue #40
    Field("identity", "mapping"), Field("identity.config_digest", "text"),
    Field("identity.measured", "mapping"),
    Field("probe", "mapping"),
    Field("memory_timeline", "mapping"),
)

# What each kind's readers use of its record besides its figures' own fields
# (scalesweep.record.measures: each Metric's ``field``): what its row() computes from
# (the CNN's epochs, the LLM's levels and requests), the mappings above nested fields.
INPUTS: dict[str, tuple[Field, ...]] = {
    "cnn": (
        Field("steps_per_epoch", "count"),
        Field("precision", "text"),
    ),
    "llm_inference": (
        Field("decode_tokens_per_s", "summary", "tokens/s"),
        Field("memory", "mapping"),
        Field("concurrency_levels[]", "mapping"),
        Field("concurrency_levels[].concurrency", "count", "requests", required=True),
        Field("concurrency_levels[].tokens_per_s", "number", "tokens/s"),
        Field("concurrency_levels[].requests_per_s", "number", "requests/s"),
        Field("concurrency_levels[].ttft_s", "summary", "s"),
        Field("concurrency_levels[].latency_s", "summary", "s"),
        Field("load_levels[]", "mapping"),
        Field("load_levels[].shape", "text", required=True),
        Field("load_levels[].rate", "number", "requests/s"),
        Field("load_levels[].concurrency", "count", "requests"),
        Field("load_levels[].output_tokens_per_s", "number", "tokens/s"),
        Field("load_levels[].requests_per_s", "number", "requests/s"),
        Field("load_levels[].goodput_rps", "number", "requests/s"),
        Field("max_rate", "mapping"),
        Field("requests[]", "mapping"),
        Field("requests[].decode_tokens_per_s", "number", "tokens/s"),
    ),
}


_NUMBERS = ("number", "finite", "count", "numbers", "summary")


def fields_of(metrics: tuple[Metric, ...], inputs: tuple[Field, ...] = ()) -> tuple[Field, ...]:
    """A record's fields: every run's (RUN_FIELDS), each figure's own (its ``field``, its
    check, and its unit where the field holds numbers of it: not a pure number's "1", not
    a list, mapping, text or flag the figure is computed from), then ``inputs``; one Field
    per path, the first declaration's."""
    seen: dict[str, Field] = {f.path: f for f in RUN_FIELDS}
    for m in metrics:
        if m.field and m.field not in seen:
            unit = "" if m.unit == "1" or m.check not in _NUMBERS else m.unit
            seen[m.field] = Field(m.field, m.check, unit, m.required)
    for f in inputs:
        seen.setdefault(f.path, f)
    return tuple(seen.values())


# the "payload" a record carries (the payload script's own name for itself; a workload
# kind, scalesweep.plan.kinds, names the one its records carry: record_payload) -> the
# fields its readers use
FIELDS: dict[str, tuple[Field, ...]] = {
    payload: fields_of(metrics, INPUTS.get(payload, ())) for payload, metrics in METRICS.items()}


def _values(data: Any, steps: tuple[tuple[str, bool], ...]) -> list[tuple[str, Any, bool]]:
    """(shown path, value, present) of every value at a field's path in ``data`` (its
    steps: (name, every item of that list)); nothing below a missing, null or mistyped
    parent (the parent's own field says what is wrong with it)."""
    found = [("", data, True)]
    for name, items in steps:
        step = []
        for shown, value, _ in found:
            if not isinstance(value, dict):
                continue
            where = f"{shown}.{name}" if shown else name
            if not items:
                step.append((where, value.get(name), name in value))
            elif isinstance(value.get(name), list):
                step += [(f"{where}[{i}]", v, True) for i, v in enumerate(value[name])]
        found = step
    return found


def _problem(field: Field, shown: str, value: Any, present: bool) -> str:
    if value is None:
        return f"{shown} is {'null' if present else 'missing'}, expected {field.expected()}"
    return f"{shown} is {_shown(value)}, expected {field.expected()}"


def _plan(fields: tuple[Field, ...]) -> list:
    return [(f, KINDS[f.kind][1],
             None if "." not in f.path and not f.path.endswith("[]") else
             tuple((p.removesuffix("[]"), p.endswith("[]")) for p in f.path.split(".")))
            for f in fields]


# per payload: (field, its check, its steps; None for a field at the top: most of them,
# looked up directly, for every record is read)
_PLAN = {payload: _plan(fields) for payload, fields in FIELDS.items()}


def declare_fields(payload: str, fields: tuple[Field, ...]) -> None:
    """Declare the fields of records of ``payload`` (a workload kind declared outside this
    module: scalesweep.plan.kinds.base.register); RUN_FIELDS are added where missing."""
    fields = tuple(fields)
    if not any(f.path == "point" for f in fields):
        fields = (*RUN_FIELDS, *fields)
    FIELDS[payload] = fields
    _PLAN[payload] = _plan(fields)


def forget_fields(payload: str) -> None:
    FIELDS.pop(payload, None)
    _PLAN.pop(payload, None)


def _shown(value: Any, limit: int = 80) -> str:
    """A field's value as a message quotes it: its repr, cut short."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 4] + " ..."


def field_problem(data: dict[str, Any], payload: str | None = None) -> str | None:
    """The first field of a metrics record (FIELDS of ``payload``, by default of the
    record's own "payload") that is missing (a required one) or not of its kind:
    "<field> is <value>, expected <kind> (<unit>)"; None when every field its readers
    use is as declared."""
    for field, check, steps in _PLAN.get(payload or data.get("payload"), ()):
        if steps is None:
            value = data.get(field.path)
            if value is None:
                if field.required:
                    return _problem(field, field.path, value, field.path in data)
            elif not check(value):
                return _problem(field, field.path, value, True)
            continue
        if _nested_ok(data, steps, check, field.required):
            continue
        for shown, value, present in _values(data, steps):
            if value is None:
                if field.required:
                    return _problem(field, shown, value, present)
            elif not check(value):
                return _problem(field, shown, value, True)
    return None


def _nested_ok(data: Any, steps: tuple[tuple[str, bool], ...], check: Callable[[Any], bool],
               required: bool) -> bool:
    """Whether every value at a field's path (as _values finds them) is as declared: the
    check of every record read, without the paths _values names for a message."""
    values: list = [data]
    missing = False
    for name, items in steps:
        step: list = []
        missing = False
        for value in values:
            if not isinstance(value, dict):
                continue
            if not items:
                if name in value:
                    step.append(value[name])
                else:
                    missing = True
            elif isinstance(value.get(name), list):
                step.extend(value[name])
        values = step
    if missing and required:
        return False
    for value in values:
        if value is None:
            if required:
                return False
        elif not check(value):
            return False
    return True


def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` via a temporary file and rename.

    A crash at any moment leaves either the complete previous file, the complete new
    file, or nothing: never half a file.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
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


def write_text_atomic(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically (:func:`write_bytes_atomic`)."""
    return write_bytes_atomic(path, text.encode())


def write_json_atomic(path: str | os.PathLike, data: Any) -> Path:
    """Write ``data`` as JSON to ``path`` atomically (:func:`write_text_atomic`)."""
    return write_text_atomic(path, json.dumps(data, indent=2, sort_keys=True, default=str)
                             + "\n")


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
        data = json.loads(path.read_bytes())  # UTF-8 (or -16/-32, as JSON allows)
    except FileNotFoundError as exc:
        raise MetricsError(f"{path}: no such metrics file") from exc
    except OSError as exc:  # a directory of that name, no permission, an I/O error
        raise MetricsError(f"{path}: cannot be read ({exc.strerror or exc})") from exc
    except UnicodeDecodeError as exc:
        raise MetricsError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
    except ValueError as exc:  # JSONDecodeError, or a number beyond Python's digit limit
        raise MetricsError(f"{path}: not valid JSON ({exc})") from exc
    except RecursionError as exc:
        raise MetricsError(f"{path}: not valid JSON (nested too deeply)") from exc
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


# A wheel's copy of the tree (scalesweep.platform.code) is no git checkout: setup.py's
# build step writes, at its root, the commit the wheel was built from (" + uncommitted
# changes" where tracked files differed from it).
SOURCE_COMMIT_FILE = "SOURCE_COMMIT"


def git_commit(repo: str | os.PathLike | None = None, environment: bool = True) -> str | None:
    """The commit of the code being measured: $SCALESWEEP_GIT_COMMIT (the harness's, for a
    payload in a container; not with ``environment=False``), else ``repo``'s SOURCE_COMMIT
    file (an installed wheel), else the commit of the git checkout whose root ``repo`` is;
    None otherwise (never the commit of another repository that happens to hold
    ``repo``, such as a project holding a virtual environment)."""
    if environment and os.environ.get("SCALESWEEP_GIT_COMMIT"):
        return os.environ["SCALESWEEP_GIT_COMMIT"]
    root = Path(repo) if repo else Path(__file__).resolve().parents[3]
    try:
        return (root / SOURCE_COMMIT_FILE).read_text().strip() or None
    except OSError:
        pass
    try:
        out = subprocess.run(["git", "rev-parse", "--show-toplevel", "HEAD"], cwd=root,
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = out.stdout.split("\n")
    if out.returncode != 0 or len(lines) < 2 or Path(lines[0]).resolve() != root.resolve():
        return None
    return lines[1].strip() or None


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
