"""Shared helpers of the benchmarks: repository paths, load average, timing, reporting.

Every benchmark prints one line of JSON (its figures, the machine, the load average before
and after, the date, the git commit) and one human line. The machine is shared: timings
come with the load average, are repeated, and comparisons are interleaved A/B/A/B in one
run so that both sides see the same load.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "workflow"))
BIN = Path(sys.executable).parent  # the venv running the benchmark (.venv/bin)
SNAKEMAKE = str(BIN / "snakemake")


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def machine() -> dict[str, Any]:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gib = None
    try:
        kib = int(Path("/proc/meminfo").read_text().split()[1])
        mem_gib = round(kib / 2**20, 1)
    except (OSError, ValueError, IndexError):
        pass
    return {"host": platform.node(), "os": platform.platform(), "cpu": cpu,
            "cores": os.cpu_count(), "mem_gib": mem_gib, "python": platform.python_version()}


def git_state() -> dict[str, Any]:
    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True,
                                  timeout=20).stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            return ""
    return {"commit": git("rev-parse", "HEAD") or None,
            "dirty": bool(git("status", "--porcelain", "--untracked-files=no"))}


def timed(argv: list[str], *, cwd: str | os.PathLike | None = None, env: dict | None = None,
          check: bool = True, stdout=subprocess.DEVNULL, timeout: float | None = None) -> float:
    """Wall seconds of one command (its output discarded unless asked for)."""
    t0 = time.perf_counter()
    proc = subprocess.run(argv, cwd=cwd, env=env, stdout=stdout, stderr=subprocess.PIPE,
                          text=True, timeout=timeout)
    wall = time.perf_counter() - t0
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, argv))} failed ({proc.returncode}):\n"
                           f"{proc.stderr[-4000:]}")
    return wall


def timed_cpu(argv: list[str], *, cwd: str | os.PathLike | None = None, env: dict | None = None,
              check: bool = True, stdout=subprocess.DEVNULL) -> tuple[float, float]:
    """(wall s, CPU s: user+sys of the command and the children it waited for).

    CPU time is what a shared machine disturbs least: other engineers' load stretches the
    wall time of a single-threaded planner far more than the CPU time it needs. Read as the
    difference of RUSAGE_CHILDREN around the run (commands here run one at a time).
    """
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(argv, cwd=cwd, env=env, stdout=stdout, stderr=subprocess.PIPE,
                          text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, argv))} failed ({proc.returncode}):\n"
                           f"{proc.stderr[-4000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def interleaved(cases: dict[str, Callable[[], float]], repeats: int) -> dict[str, list[float]]:
    """Run every case once per round, round after round (A B A B ...): shared load hits both."""
    samples: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(repeats):
        for name, fn in cases.items():
            samples[name].append(fn())
    return samples


def summary(xs: list[float]) -> dict[str, Any]:
    return {"n": len(xs), "median_s": round(statistics.median(xs), 4),
            "min_s": round(min(xs), 4), "max_s": round(max(xs), 4),
            "samples_s": [round(x, 4) for x in xs]}


def peak_rss_mib(children: bool = False) -> float:
    import resource
    who = resource.RUSAGE_CHILDREN if children else resource.RUSAGE_SELF
    return round(resource.getrusage(who).ru_maxrss / 1024.0, 1)


def snakemake_env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("USER", "root")  # ch-run refuses to start without $USER
    env["PATH"] = os.pathsep.join([str(BIN), env.get("PATH", "")])
    return env


def report(benchmark: str, mode: str, figures: dict[str, Any], human: str,
           load_before: list[float], **extra: Any) -> dict[str, Any]:
    """Print the one-line JSON result and the human line; return the result."""
    result = {
        "benchmark": benchmark,
        "mode": mode,
        **figures,
        "load_before": load_before,
        "load_after": loadavg(),
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": machine(),
        "git": git_state(),
        **extra,
    }
    print(json.dumps(result, sort_keys=False, default=str), flush=True)
    print(f"{benchmark} ({mode}): {human} [load {load_before} -> {result['load_after']}]",
          flush=True)
    return result


def mode_of(argv: list[str] | None = None, default: str = "full") -> tuple[str, list[str]]:
    """`--full` / `--smoke` (and the rest of argv for the script's own options)."""
    args = list(sys.argv[1:] if argv is None else argv)
    mode = default
    for flag in ("--full", "--smoke"):
        if flag in args:
            mode = flag[2:]
            args.remove(flag)
    return mode, args
