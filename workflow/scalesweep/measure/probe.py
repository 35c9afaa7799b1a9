"""A short, fixed probe of the machine's speed, measured before and after every run.

The runs of one kind on one machine can differ by far more than any container costs (the
LLM's decode rate on a shared 2-core VM drifted from 127 to 226 tokens/s over minutes):
the probe says how fast the machine was when each run was measured, so that a pair of runs
that saw different machines can be left out, and the report can tell drift of the machine
from differences between runtimes. It measures the machine the way the workloads use it:

* ``sgemm``: a float32 matrix multiply (BLAS), compute-bound, GFLOP/s (``gflops``): what
  the CNN's convolutions and linear layers do;
* ``sgemv``: a float32 matrix-vector multiply over a matrix far beyond the last-level
  cache, memory-bandwidth-bound, GB/s of the matrix streamed (``gbps``): what an LLM's
  decode step does with its weights.

Each kernel runs once to warm up, then ``REPS`` times; its figure is the best repetition
(the machine's speed without the noise of one slow repetition), its median is recorded
beside it. One thread (the BLAS pool pinned to one thread by ``python -m scalesweep.measure.probe``
before numpy is imported): the figures are comparable across every point of a campaign
whatever its ranks and threads, and across nodes. The probe runs on the host (never in the
run's container: it measures the machine, not the runtime), on every node of the point,
before the payload starts and after it ends, never beside it (``scalesweep.run.harness``); a
probe that fails is recorded as an error and never fails the run.

Sizes are fixed here, never configured: a probe's figures are comparable only between
identical probes. ``SGEMM_N = 512``: three 1 MiB matrices, in cache, 0.27 GFLOP per
multiply (a few ms on one core at 50-100 GFLOP/s: long enough to time, short enough to
repeat). ``SGEMV_ROWS x SGEMV_COLS = 8192 x 4096`` float32: a 128 MiB matrix, 4x the 32 MiB
L3 of this machine and of a Frontier node's CCD (a single core reaches its own CCD's L3
only), and beyond the 105-112 MiB of large Intel LLCs: each repetition streams it from
memory. Measured on the 2-core development VM: the whole probe takes ~0.05-0.1 s (the
matrix's first touch included), with rare spikes to ~0.3 s when the kernel compacts
memory for huge pages; a fresh ``python -m scalesweep.measure.probe`` process adds ~0.15 s of
start-up (numpy's import), which the harness keeps out of the run's wall time.

``summary(record)`` gives runs.csv's ``probe_gflops``, ``probe_gbps`` (the slowest node,
mean of before and after) and ``probe_change_pct`` (the larger absolute change, after vs
before, of the two kernels); ``pair_probe_difference_pct(row_a, row_b)`` is how far apart
the machines two runs saw were (the pairing leaves out pairs beyond
``measurement.probe_tolerance_pct``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Mapping

METHOD = ("best of {reps} after one warm-up, one thread: float32 sgemm {n}x{n} (GFLOP/s) "
          "and sgemv {rows}x{cols} ({mib} MiB matrix streamed, GB/s); on the host of every "
          "node, before and after the payload")
SGEMM_N = 512
SGEMV_ROWS, SGEMV_COLS = 8192, 4096
REPS = 5
# the BLAS and OpenMP pools pinned to one thread (set before numpy is imported)
THREAD_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
               "GOTO_NUM_THREADS", "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")
KERNELS = {"gflops": "sgemm", "gbps": "sgemv"}  # the figure of each kernel
PROBE_TIMEOUT_S = 120  # one probe step (every node), start-up included
WORKFLOW_DIR = str(Path(__file__).resolve().parents[2])  # where `scalesweep` is importable


def method() -> str:
    return METHOD.format(reps=REPS, n=SGEMM_N, rows=SGEMV_ROWS, cols=SGEMV_COLS,
                         mib=SGEMV_ROWS * SGEMV_COLS * 4 // 2**20)


def _timed(fn, reps: int) -> list[float]:
    fn()  # warm-up: first touch, BLAS's buffers, the CPU's clock
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return times


def _kernel(name: str, unit: str, work: float, times: list[float], **size) -> dict[str, Any]:
    best, median = min(times), sorted(times)[len(times) // 2]
    return {"kernel": name, "unit": unit, **size, "reps": len(times), "best_s": best,
            "median_s": median, "best": work / best / 1e9, "median": work / median / 1e9}


def measure(reps: int = REPS) -> dict[str, Any]:
    """Probe this machine now: {host, gflops, gbps, probe_s, kernels, threads, time, method}.

    Runs in this process with its BLAS pool as it is (``python -m scalesweep.measure.probe`` pins
    it to one thread first, as the harness runs it)."""
    import numpy as np

    t0 = time.perf_counter()
    a = np.full((SGEMM_N, SGEMM_N), 0.5, dtype=np.float32)
    b = np.full((SGEMM_N, SGEMM_N), 0.25, dtype=np.float32)
    c = np.empty_like(a)
    gemm = _kernel("sgemm", "GFLOP/s", 2.0 * SGEMM_N**3,
                   _timed(lambda: np.matmul(a, b, out=c), reps), n=SGEMM_N)
    del a, b, c
    w = np.full((SGEMV_ROWS, SGEMV_COLS), 0.5, dtype=np.float32)  # touched: in memory
    x = np.full(SGEMV_COLS, 0.25, dtype=np.float32)
    y = np.empty(SGEMV_ROWS, dtype=np.float32)
    gemv = _kernel("sgemv", "GB/s", float(w.nbytes),
                   _timed(lambda: np.matmul(w, x, out=y), reps),
                   rows=SGEMV_ROWS, cols=SGEMV_COLS, bytes=int(w.nbytes))
    del w, x, y
    return {
        "host": socket.gethostname(),
        "gflops": gemm["best"],
        "gbps": gemv["best"],
        "probe_s": time.perf_counter() - t0,
        "kernels": {"sgemm": gemm, "sgemv": gemv},
        "threads": os.environ.get("OPENBLAS_NUM_THREADS"),
        "numpy": np.__version__,
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "method": method(),
    }


# --- on the nodes of a run (scalesweep.run.harness) ----------------------------------------

def probe_env(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` with one thread per pool and this package importable."""
    out = dict(env)
    out.update({v: "1" for v in THREAD_VARS})
    out["PYTHONPATH"] = os.pathsep.join(p for p in (WORKFLOW_DIR, env.get("PYTHONPATH", "")) if p)
    return out


def probe_command(nodes: int, launcher: str, python: str) -> tuple[list[str], str | None]:
    """(argv, note): one probe per node of the point. Several nodes under Slurm: one task
    per node (an overlapping srun step, as the interference watchers); otherwise this
    host only, and the note says so where the point has several nodes."""
    here = [python, "-m", "scalesweep.measure.probe"]
    if nodes > 1 and launcher == "srun":
        return ["srun", "--overlap", f"--nodes={nodes}", f"--ntasks={nodes}",
                "--ntasks-per-node=1", *here], None
    note = (f"{launcher} without Slurm: only the harness's node is probed" if nodes > 1
            else None)
    return here, note


def parse_output(text: str) -> list[dict[str, Any]]:
    """The node records among a probe step's output lines (one JSON object per node)."""
    nodes = []
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and "gflops" in record:
            nodes.append(record)
    return nodes


def run_on_nodes(argv: list[str], env: Mapping[str, str], nodes: int,
                 timeout_s: float = PROBE_TIMEOUT_S, wrap=None) -> tuple[list[dict], str | None, float]:
    """Run one probe step: (node records, error or None, seconds it took). Never raises:
    a probe that fails is an error in the run's record, never a failed run. ``wrap``:
    what the command is started through (the harness's ``dies_with_harness``)."""
    t0 = time.perf_counter()
    cmd = wrap(argv) if wrap else argv
    try:
        proc = subprocess.run(cmd, env=probe_env(env), capture_output=True, text=True,
                              timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return [], f"probe did not finish within {timeout_s:g} s", time.perf_counter() - t0
    except OSError as exc:
        return [], f"probe did not start: {exc}", time.perf_counter() - t0
    wall = time.perf_counter() - t0
    records = parse_output(proc.stdout)
    if proc.returncode != 0:
        tail = (proc.stderr or "").strip().splitlines()[-1:] or [""]
        return records, f"probe exited {proc.returncode}: {tail[0]}"[:500], wall
    if len(records) < nodes:
        return records, f"probe reported {len(records)} of {nodes} nodes", wall
    return records, None, wall


# --- what runs.csv and the pairing read --------------------------------------------------

def _number(value) -> float:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return math.nan
    return out if math.isfinite(out) and out > 0 else math.nan


def _by_host(nodes) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for i, node in enumerate(nodes or []):
        if isinstance(node, dict):
            out[str(node.get("host", i))] = node
    return out


def summary(record: Mapping | None) -> dict[str, float | None]:
    """runs.csv's probe columns of a run's ``probe`` record (None each where it has none):
    ``probe_gflops`` / ``probe_gbps``: per node the mean of before and after (whichever
    exist), then the slowest node; ``probe_change_pct``: per kernel and node
    100 x |after / before - 1|, the largest (None without both)."""
    empty = {"probe_gflops": None, "probe_gbps": None, "probe_change_pct": None}
    if not isinstance(record, Mapping):
        return empty
    before, after = _by_host(record.get("before")), _by_host(record.get("after"))
    out = dict(empty)
    changes = []
    for figure in KERNELS:
        per_node = []
        for host in {**before, **after}:
            b = _number((before.get(host) or {}).get(figure))
            a = _number((after.get(host) or {}).get(figure))
            seen = [v for v in (b, a) if not math.isnan(v)]
            if seen:
                per_node.append(sum(seen) / len(seen))
            if not (math.isnan(a) or math.isnan(b)):
                changes.append(100.0 * abs(a / b - 1.0))
        if per_node:
            out[f"probe_{figure}"] = min(per_node)
    if changes:
        out["probe_change_pct"] = max(changes)
    return out


def pair_probe_difference_pct(row_a: Mapping, row_b: Mapping, kernel: str | None = None) -> float:
    """How far apart the machines two runs saw were, in percent, on ``kernel`` (the one
    that stands for how their payload uses the machine: its workload kind's
    ``probe_kernel``, "gflops" for compute-bound training, "gbps" for memory-bound
    decoding; both kernels where None): for each such kernel (runs.csv's
    ``probe_gflops``, ``probe_gbps``) present in both rows, 100 x (faster / slower - 1);
    the larger. NaN where no kernel is in both rows
    (a run measured before the probe existed, or whose probe failed) and where either run's
    own probe changed by more than that between its start and end (``probe_change_pct``:
    the probe could not tell the machine's speed during that run): such a pair is not
    judged. Rows: dicts or pandas Series. The pairing leaves out a pair whose difference
    exceeds ``measurement.probe_tolerance_pct``."""
    diffs = []
    for figure in ([kernel] if kernel else KERNELS):
        a, b = _number(row_a.get(f"probe_{figure}")), _number(row_b.get(f"probe_{figure}"))
        if not (math.isnan(a) or math.isnan(b)):
            diffs.append(100.0 * (max(a, b) / min(a, b) - 1.0))
    if not diffs:
        return math.nan
    own = [v for v in (_number(row_a.get("probe_change_pct")),
                       _number(row_b.get("probe_change_pct"))) if not math.isnan(v)]
    if own and max(own) >= max(diffs):
        return math.nan  # the runs' own probes moved as much: no evidence of a difference
    return max(diffs)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m scalesweep.measure.probe",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", default="1",
                    help="BLAS threads (default 1, as the harness probes; set before numpy loads)")
    args = ap.parse_args(argv)
    if "numpy" not in sys.modules:
        os.environ.update({v: str(args.threads) for v in THREAD_VARS})
    record = measure()
    print(json.dumps(record, sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
