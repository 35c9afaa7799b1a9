"""Against a peer: the same 2-point local sweep in ReFrame and in this workflow.

    python benchmarks/peer_reframe.py [--full|--smoke] [--repeats N] [--reframe PATH]
                                      [--keep DIR]

The sweep: the CNN payload (DDP, native), 1 rank and 2 ranks on one node, a small
synthetic image set (32 images per class, 64x64), 2 epochs (--smoke: the 1-rank point only,
8 images per class, 1 epoch, 1 round). ReFrame runs benchmarks/reframe/scalesweep_cnn.py (same command lines,
same staged dataset) with benchmarks/reframe/settings.py (local scheduler, mpirun, one
job at a time); the workflow runs `snakemake --profile profiles/local` with the two
points as targets (and, separately, its default target: points + aggregation + figures,
which ReFrame has no equivalent of). Rounds alternate ReFrame / workflow / workflow-all.

Per-point overhead of each tool = (its wall time - the sum of the payloads' own
payload_wall_s) / points: what the tool adds around identical payload processes
(including the launcher and interpreter start-up, the same on both sides).

ReFrame is not a dependency of scalesweep: install it in a separate venv, pinned:
    python3 -m venv /tmp/reframe-venv && /tmp/reframe-venv/bin/pip install reframe-hpc==4.10.4
and pass --reframe /tmp/reframe-venv/bin/reframe (the default), or set $REFRAME.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import REPO, SNAKEMAKE, loadavg, mode_of, report, snakemake_env  # noqa: E402

HERE = Path(__file__).resolve().parent
REFRAME_VERSION = "4.10.4"


def config(mode: str) -> dict:
    full = mode == "full"
    return {
        "site": "local",  # sites/local.yaml: 2 cores, no GPU, mpirun
        "sweep": {"runtimes": ["native"], "nodes": [1], "ranks_per_node": [1, 2],
                  "threads_per_rank": [1], "repeats": 1, "baseline": 1},
        "datasets": {"tiny": {"source": "synthetic", "classes": ["a", "b"],
                              "images_per_class": 32 if full else 8, "image_size": 64}},
        "workloads": {"cnn_ddp": {"payload": "cnn", "parallel": "ddp", "dataset": "tiny",
                                  "epochs": 2 if full else 1, "batch_size": 16}},
    }


def snakemake(wd: Path, targets: list[str]) -> float:
    argv = [SNAKEMAKE, "-s", str(REPO / "Snakefile"), "--directory", str(wd),
            "--profile", str(REPO / "profiles" / "local"), *targets]
    t0 = time.perf_counter()
    proc = subprocess.run(argv, cwd=wd, env=snakemake_env(), capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"snakemake failed:\n{proc.stderr[-6000:]}")
    return wall


def workflow_round(wd: Path, targets: list[str]) -> dict:
    for d in ("results", "logs"):
        shutil.rmtree(wd / d, ignore_errors=True)
    wall = snakemake(wd, targets)
    payload = [json.loads(p.read_text())["payload_wall_s"]
               for p in sorted((wd / "results" / "runs").rglob("metrics.json"))]
    return {"wall_s": wall, "payload_wall_s": payload}


def reframe_round(reframe: str, wd: Path, mode: str, rnd: int) -> dict:
    prefix = wd / f"reframe-{rnd}"
    shutil.rmtree(prefix, ignore_errors=True)
    data = str((wd / "resources" / "datasets" / "tiny").resolve())
    argv = [reframe, "-C", str(HERE / "reframe" / "settings.py"),
            "-c", str(HERE / "reframe" / "scalesweep_cnn.py"), "-r",
            "--exec-policy=serial", "--prefix", str(prefix),
            "--report-file", str(prefix / "report.json"),
            "-S", f"data_dir={data}", "-S", f"python={sys.executable}", "-S", f"repo={REPO}"]
    if mode != "full":  # smoke: the 1-rank point only, 1 epoch
        argv += ["-S", "epochs=1", "-n", "ScalesweepCNN%ranks=1"]
    env = dict(os.environ, USER=os.environ.get("USER", "root"))
    t0 = time.perf_counter()
    proc = subprocess.run(argv, cwd=wd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    (prefix / "reframe.out").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        raise RuntimeError(f"reframe failed ({proc.returncode}):\n{proc.stdout[-6000:]}")
    rep = json.loads((prefix / "report.json").read_text())
    payload, phases = [], []
    for run in rep["runs"]:
        for tc in run["testcases"]:
            # perfvalues: {"<system>:<partition>:<name>": [value, ref, lower, upper, unit, result]}
            perf = {k.rsplit(":", 1)[-1]: v[0] for k, v in (tc.get("perfvalues") or {}).items()}
            payload.append(perf["payload_wall_s"])
            phases.append({"test": tc.get("unique_name") or tc.get("name"),
                           "result": tc.get("result"),
                           **{k: round(tc[k], 3) for k in ("time_setup", "time_run",
                                                          "time_sanity", "time_performance",
                                                          "time_total") if tc.get(k) is not None}})
    return {"wall_s": wall, "payload_wall_s": payload, "testcases": phases,
            "version": rep.get("session_info", {}).get("version"),
            "session_elapsed_s": rep.get("session_info", {}).get("time_elapsed")}


def per_point(r: dict) -> float:
    return (r["wall_s"] - sum(r["payload_wall_s"])) / len(r["payload_wall_s"])


def med(xs):
    return round(statistics.median(xs), 3)


def main(argv: list[str] | None = None) -> dict:
    mode, rest = mode_of(argv)
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3 if mode == "full" else 1)
    ap.add_argument("--reframe", default=os.environ.get("REFRAME", "/tmp/reframe-venv/bin/reframe"))
    ap.add_argument("--keep", help="campaign directory to use and keep")
    args = ap.parse_args(rest)
    if not Path(args.reframe).exists() and not shutil.which(args.reframe):
        raise SystemExit(f"reframe not found at {args.reframe}: python3 -m venv /tmp/reframe-venv "
                         f"&& /tmp/reframe-venv/bin/pip install reframe-hpc=={REFRAME_VERSION}")
    load0 = loadavg()
    wd = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="scalesweep-peer-"))
    (wd / "config").mkdir(parents=True, exist_ok=True)
    (wd / "config" / "config.yaml").write_text(yaml.safe_dump(config(mode), sort_keys=False))
    snakemake(wd, ["resources/datasets/tiny.verified.json"])  # staged once, untimed
    points = [f"results/runs/cnn_ddp/native/n1-g0-r{r}-t1/rep1/native/metrics.json"
              for r in ((1, 2) if mode == "full" else (1,))]

    rf, wf, wf_all = [], [], []
    for rnd in range(1, args.repeats + 1):
        rf.append(reframe_round(args.reframe, wd, mode, rnd))
        wf.append(workflow_round(wd, points))
        if mode == "full":
            wf_all.append(workflow_round(wd, []))
    figures = {
        "reframe_version": rf[0]["version"],
        "reframe": {"wall_s": med([r["wall_s"] for r in rf]),
                    "payload_wall_s": med([sum(r["payload_wall_s"]) for r in rf]),
                    "overhead_per_point_s": med([per_point(r) for r in rf]),
                    "testcases_last_round": rf[-1]["testcases"],
                    "session_elapsed_s": med([r["session_elapsed_s"] for r in rf]),
                    "wall_samples_s": [round(r["wall_s"], 3) for r in rf]},
        "scalesweep_points": {"wall_s": med([r["wall_s"] for r in wf]),
                              "payload_wall_s": med([sum(r["payload_wall_s"]) for r in wf]),
                              "overhead_per_point_s": med([per_point(r) for r in wf]),
                              "wall_samples_s": [round(r["wall_s"], 3) for r in wf]},
    }
    if wf_all:
        figures["scalesweep_all"] = {
            "wall_s": med([r["wall_s"] for r in wf_all]),
            "payload_wall_s": med([sum(r["payload_wall_s"]) for r in wf_all]),
            "overhead_per_point_s": med([per_point(r) for r in wf_all]),
            "wall_samples_s": [round(r["wall_s"], 3) for r in wf_all]}
    ratio = figures["scalesweep_points"]["wall_s"] / figures["reframe"]["wall_s"]
    figures["wall_ratio_scalesweep_to_reframe"] = round(ratio, 3)
    human = (f"{len(points)} point(s): ReFrame {figures['reframe']['wall_s']:.1f} s "
             f"(+{figures['reframe']['overhead_per_point_s']:.2f} s/point) vs scalesweep "
             f"{figures['scalesweep_points']['wall_s']:.1f} s "
             f"(+{figures['scalesweep_points']['overhead_per_point_s']:.2f} s/point) = {ratio:.2f}x")
    if wf_all:
        human += (f"; scalesweep with aggregation+figures {figures['scalesweep_all']['wall_s']:.1f} s")
    result = report("peer_reframe", mode, figures, human, load0)
    if not args.keep:
        shutil.rmtree(wd, ignore_errors=True)
    return result


if __name__ == "__main__":
    main()
