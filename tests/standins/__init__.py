"""Behaving stand-ins for programs this machine lacks, for tests only, cut to what
scalesweep calls of them:

* ``apptainer`` / ``singularity`` (``apptainer.py``): ``--version``, ``pull --force OUT
  URI`` and ``inspect --json``, what ``scalesweep describe-image --pull`` runs
  (tests/test_images_config.py). The command lines scalesweep gives ``apptainer
  build``/``exec`` are pinned by golden tests instead (tests/test_frontier_golden.py,
  tests/test_frontier_standin.py, tests/test_containers_build.py);
* ``rocm-smi`` / ``amd-smi`` (``gpu_smi.py``): the GPU inventory and memory queries of a
  fake Frontier node of 8 MI250X GCDs (tests/test_memtimeline.py).

No Ollama stand-in: what scalesweep runs of ``ollama`` (``serve``, ``create``, ``pull``,
``show``, the HTTP API) is checked with small fakes in tests/test_llm.py and
tests/test_llm_engines.py, and its command lines in tests/test_frontier_standin.py.

This package writes small executable wrappers into a bin directory that a test puts
first on ``PATH``:

    from standins import install            # tests/ is on sys.path under pytest
    env = install(tmp_path / "bin", log=tmp_path / "standins.jsonl")
    env["PATH"] = f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}"

Each wrapper is ``#!/bin/sh`` + ``exec <python> <module file> <tool name> "$@"``: the
tool's name is the module's first argument (not an environment variable, so nothing of
the stand-in leaks into the environment of the commands it runs).

Every invocation appends one JSON line to ``$SCALESWEEP_STANDIN_LOG`` when it is set
(:func:`log_invocation`): ``tool``, ``argv``, ``cwd``, ``pid``, ``time``, ``exit_status``.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

# wrapper name -> module (apptainer.py serves both names; gpu_smi.py both SMIs)
TOOLS: dict[str, str] = {
    "apptainer": "apptainer.py",
    "singularity": "apptainer.py",
    "rocm-smi": "gpu_smi.py",
    "amd-smi": "gpu_smi.py",
}

LOG_ENV = "SCALESWEEP_STANDIN_LOG"


def install(bin_dir: Path, log: Path | None = None, python: str | None = None) -> dict[str, str]:
    """Write the executable wrappers into ``bin_dir`` (created if needed); return the
    variables the test should add to the environment of what it runs (``PATH`` is the
    caller's job: put ``bin_dir`` first).

    ``log``: a JSON-lines file every stand-in appends one record per invocation to.
    ``python``: the interpreter the stand-ins run under (default: this one)."""
    bin_dir = Path(bin_dir)
    bin_dir.mkdir(parents=True, exist_ok=True)
    # not resolved: a venv's python is a symlink, and the venv is found through its path
    interpreter = python or sys.executable
    for name, module in TOOLS.items():
        path = bin_dir / name
        path.write_text(
            "#!/bin/sh\n"
            f"# scalesweep test stand-in for {name} (tests/standins/{module})\n"
            f'exec {shlex.quote(interpreter)} {shlex.quote(str(HERE / module))} {shlex.quote(name)} "$@"\n'
        )
        path.chmod(0o755)
    env: dict[str, str] = {}
    if log is not None:
        Path(log).parent.mkdir(parents=True, exist_ok=True)
        env[LOG_ENV] = str(Path(log).resolve())
    return env


def read_log(log: Path) -> list[dict]:
    """The records of a stand-in log (for assertions)."""
    try:
        text = Path(log).read_text()
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def log_invocation(record: dict) -> None:
    """Append ``record`` (plus pid, cwd, time) as one JSON line to $SCALESWEEP_STANDIN_LOG.

    One ``write`` on an ``O_APPEND`` descriptor: lines of concurrent stand-ins (ranks,
    servers, clients) do not interleave."""
    path = os.environ.get(LOG_ENV)
    if not path:
        return
    rec = {"time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "pid": os.getpid()}
    try:
        rec["cwd"] = os.getcwd()
    except OSError:
        rec["cwd"] = None
    rec.update(record)
    line = (json.dumps(rec, default=str, sort_keys=False) + "\n").encode()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    except OSError:
        return  # a log that cannot be written must not change the tool's behaviour
    try:
        os.write(fd, line)
    finally:
        os.close(fd)
