"""Running a build's commands: logged to the build's log or captured, in a minimal
environment; the errors a build stops with, and its one-line messages on stderr."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from scalesweep.record.hostenv import user_name


COMMAND = "build-image"  # the sub-command: `scalesweep build-image`

class BuildError(RuntimeError):
    """A build that cannot proceed; its message is one line meant for the user."""

class BuilderMissing(BuildError):
    """A builder tool (binary or Python module) is not installed."""

def log(msg: str) -> None:
    print(f"scalesweep {COMMAND}: {msg}", file=sys.stderr, flush=True)

def run_capture(cmd: list[str], env: dict | None = None) -> str:
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise BuildError(f"{' '.join(cmd[:4])} ... failed ({r.returncode}): {r.stderr.strip()[-500:]}")
    return r.stdout

def run_logged(cmd: list[str], logfile: Path, env: dict | None = None, cwd: str | None = None) -> None:
    log("$ " + " ".join(cmd))
    with open(logfile, "ab") as f:
        f.write(("\n$ " + " ".join(cmd) + "\n").encode())
        f.flush()
        r = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, cwd=cwd)
    if r.returncode != 0:
        tail = logfile.read_bytes()[-3000:].decode(errors="replace")
        raise BuildError(f"command failed ({r.returncode}): {' '.join(cmd)}\n--- {logfile} (tail) ---\n{tail}")

def clean_env(**extra: str) -> dict:
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin",
        "USER": user_name(),
        "HOME": os.environ.get("HOME", "/root"),
        "LC_ALL": "C",
    }
    for k in ("TMPDIR",):
        if k in os.environ:
            env[k] = os.environ[k]
    env.update(extra)
    return env
