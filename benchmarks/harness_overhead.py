"""Harness overhead per point: the workflow's run of a point vs the same command by hand.

    python benchmarks/harness_overhead.py [--full|--smoke] [--repeats N] [--keep DIR]

--full:  CNN DDP (1 and 2 ranks, a small synthetic image set, 2 epochs) and LLM inference
         (synthetic model, llama.cpp), each native and in Charliecloud, 3 rounds.
--smoke: CNN, 1 rank, native only, 1 tiny epoch, 1 round (CI).

Each round runs the real workflow (`snakemake --profile profiles/local`) on that round's
points in a temporary campaign directory, then runs each point's recorded command line
(metrics.json "command") by hand, directly, the same way (bash -c, output to a log),
so workflow and hand runs alternate and see the same load. Per point:

  payload_wall_s   the payload's own time (from after its arguments are parsed)
  harness_wall_s   run_point's Popen -> wait of the command (metrics.json)
  job_s            Snakemake's own record of the job: .snakemake/metadata starttime (the
                   job's incomplete marker) -> endtime (metrics.json written)
  hand_s           the command run by hand, timed from outside

The overhead per point (see summarize()) takes each run's own payload time out before
comparing, because on a shared machine two runs of the same payload differ by seconds:
workflow_own_s = job_s - harness_wall_s, plus what the harness adds around the command
compared with the hand run; target < 0.5 s or < 2% per point. hand_s - payload_wall_s is
the launcher's and interpreter's start-up (mpirun, ch-run, python, imports), paid by
hand too. The raw job_s - hand_s is reported as well.
The container's own start-up is read from results/startup/charliecloud.json (the
workflow's container_startup rule: /bin/true, python, import torch, native vs ch-run).

Differences of the hand run from the harness, on purpose: a fresh MASTER_PORT (the
recorded one may still be in TIME_WAIT), and, as root, Open MPI's run-as-root variables
and SCALESWEEP_GIT_COMMIT, which the harness also sets but does not print in "command".
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import REPO, SNAKEMAKE, loadavg, mode_of, report, snakemake_env  # noqa: E402


def campaign_config(mode: str, repeats: int, container: bool, llm: bool) -> dict:
    full = mode == "full"
    runtimes = ["native", "charliecloud"] if container else ["native"]
    cfg = {
        "site": "local",  # sites/local.yaml: 2 cores, no GPU, mpirun
        "sweep": {"runtimes": runtimes, "nodes": [1], "ranks_per_node": [1, 2] if full else [1],
                  "threads_per_rank": [1], "repeats": repeats, "baseline": 1},
        "datasets": {"tiny": {"source": "synthetic", "classes": ["a", "b"],
                              "images_per_class": 32 if full else 8, "image_size": 64}},
        "workloads": {"cnn_ddp": {"payload": "cnn", "parallel": "ddp", "dataset": "tiny",
                                  "epochs": 2 if full else 1, "batch_size": 16}},
        "containers": {"startup_repeats": 5},
    }
    if llm:
        cfg["workloads"]["llm"] = {
            "payload": "llm", "engine": "llamacpp", "model": "synthetic_llama",
            "prompts": "config/prompts/default.txt", "max_tokens": 64, "concurrency": 1,
            "warmup": 2, "sweep": {"gpus_per_node": [0], "baseline": None}}
        cfg["models"] = {"synthetic_llama": {"source": "synthetic", "seed": 0}}
    return cfg


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def job_times(wd: Path) -> dict[str, float]:
    """output path -> Snakemake's recorded job time (endtime - starttime)."""
    out = {}
    meta = wd / ".snakemake" / "metadata"
    for f in meta.rglob("*"):
        if not f.is_file():
            continue
        key = "".join(f.relative_to(meta).parts)
        try:
            name = base64.urlsafe_b64decode(key).decode()
        except (ValueError, UnicodeDecodeError):
            try:
                name = base64.b64decode(key).decode()
            except (ValueError, UnicodeDecodeError):
                continue
        rec = json.loads(f.read_text())
        if rec.get("starttime") and rec.get("endtime"):
            out[name] = rec["endtime"] - rec["starttime"]
    return out


def run_workflow(wd: Path, targets: list[str]) -> float:
    argv = [SNAKEMAKE, "-s", str(REPO / "Snakefile"), "--directory", str(wd),
            "--profile", str(REPO / "profiles" / "local"), *targets]
    t0 = time.perf_counter()
    proc = subprocess.run(argv, cwd=wd, env=snakemake_env(), capture_output=True, text=True)
    wall = time.perf_counter() - t0
    (wd / "bench-snakemake.log").open("a").write(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        raise RuntimeError(f"snakemake failed ({proc.returncode}):\n{proc.stderr[-6000:]}")
    return wall


def run_by_hand(metrics_path: Path, wd: Path, scratch: Path) -> dict:
    """The point's recorded command, directly; returns hand_s and the payload's own time."""
    m = json.loads(metrics_path.read_text())
    command = re.sub(r"\bMASTER_PORT=\d+", f"MASTER_PORT={free_port()}", m["command"])
    env = snakemake_env()
    if os.geteuid() == 0:  # what the harness adds for mpirun as root (not in "command")
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    if m.get("git_commit"):
        env["SCALESWEEP_GIT_COMMIT"] = m["git_commit"]
    payload_json = metrics_path.parent / "payload.json"
    payload_json.unlink(missing_ok=True)
    log = scratch / (m["point"]["workload"] + "-" + m["runtime"] + ".log")
    with open(log, "a") as fh:
        t0 = time.perf_counter()
        rc = subprocess.run(["bash", "-c", command], stdout=fh, stderr=subprocess.STDOUT,
                            env=env, cwd=wd).returncode
        hand = time.perf_counter() - t0
    if rc != 0:
        raise RuntimeError(f"hand run of {metrics_path} failed ({rc}); log {log}")
    payload = json.loads(payload_json.read_text()) if payload_json.is_file() else {}
    payload_json.unlink(missing_ok=True)
    return {"hand_s": hand, "hand_payload_wall_s": payload.get("payload_wall_s")}


def summarize(rows: list[dict]) -> dict:
    """Per point kind (workload/runtime/ranks): medians over rounds.

    The payload's own time varies by seconds between two runs of the same command on a
    loaded machine, so job_s - hand_s is mostly that noise. The estimators used for the
    target take the payload's own time out of each run first:
      workflow_own_s    = job_s - harness_wall_s: Snakemake's script rule, run_point.py's
                          interpreter and imports, git, writing metrics.json (one run);
      around_command_s  = (harness_wall_s - payload_wall_s) - (hand_s - hand_payload_wall_s):
                          what the harness adds around the command, compared with the
                          same command by hand (launcher and interpreter start-up cancel);
      overhead_s        = workflow_own_s + around_command_s, per point.
    """
    per_kind = {}
    for key in sorted({(r["workload"], r["runtime"], r["ranks"]) for r in rows}):
        rs = [r for r in rows if (r["workload"], r["runtime"], r["ranks"]) == key
              and r["job_s"] is not None and r["hand_payload_wall_s"] is not None]
        own = [r["job_s"] - r["harness_wall_s"] for r in rs]
        around = [(r["harness_wall_s"] - r["payload_wall_s"])
                  - (r["hand_s"] - r["hand_payload_wall_s"]) for r in rs]
        over = [a + b for a, b in zip(own, around)]
        pct = [o / r["hand_s"] * 100 for o, r in zip(over, rs)]
        per_kind["/".join(map(str, key))] = {
            "n": len(rs),
            "payload_wall_s": med([r["payload_wall_s"] for r in rs]),
            "hand_payload_wall_s": med([r["hand_payload_wall_s"] for r in rs]),
            "hand_s": med([r["hand_s"] for r in rs]),
            "harness_wall_s": med([r["harness_wall_s"] for r in rs]),
            "job_s": med([r["job_s"] for r in rs]),
            "job_minus_hand_s": med([r["job_s"] - r["hand_s"] for r in rs]),
            "launch_and_startup_s": med([r["hand_s"] - r["hand_payload_wall_s"] for r in rs]),
            "workflow_own_s": med(own),
            "around_command_s": med(around),
            "overhead_s": med(over),
            "overhead_pct": med(pct),
            "target_met": bool(rs) and (med(over) < 0.5 or med(pct) < 2.0),
        }
    return per_kind


def med(xs):
    xs = [x for x in xs if x is not None]
    return round(statistics.median(xs), 3) if xs else None


def main(argv: list[str] | None = None) -> dict:
    mode, rest = mode_of(argv)
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3 if mode == "full" else 1)
    ap.add_argument("--no-container", action="store_true")
    ap.add_argument("--no-llm", action="store_true")
    ap.add_argument("--config", help="campaign config to use instead (e.g. a GPU node's: "
                    "benchmarks/configs/gpu-node.yaml); its sweep.repeats is set to --repeats")
    ap.add_argument("--keep", help="campaign directory to use and keep")
    args = ap.parse_args(rest)
    container = mode == "full" and not args.no_container
    llm = mode == "full" and not args.no_llm
    load0 = loadavg()

    wd = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="scalesweep-harness-"))
    (wd / "config").mkdir(parents=True, exist_ok=True)
    if args.config:
        cfg = yaml.safe_load(Path(args.config).read_text())
        cfg.setdefault("sweep", {})["repeats"] = args.repeats
        for wl in cfg["workloads"].values():
            (wl.get("sweep") or {}).pop("repeats", None)
    else:
        cfg = campaign_config(mode, args.repeats, container, llm)
    (wd / "config" / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    scratch = wd / "hand"
    scratch.mkdir(exist_ok=True)

    from scalesweep.plan.config_read import load_config
    from scalesweep.plan.sweep import sweep_points
    from scalesweep.plan.imageset import used_images
    full_cfg = load_config([wd / "config" / "config.yaml"])  # schema defaults filled in
    points = sweep_points(full_cfg)

    # Preparation (not per point): datasets, models, image (cached per machine), start-up.
    prep = []
    for name in sorted({p.workload for p in points}):
        wl = full_cfg["workloads"][name]
        if wl["payload"] == "cnn":
            prep.append(f"resources/datasets/{wl['dataset']}.verified.json")
        else:
            prep.append(f"resources/models/{wl['model']}")
    containers = sorted({p.runtime for p in points} - {"native"})
    prep += [spec.manifest for spec in used_images(full_cfg, points).values()]
    prep += [f"results/startup/{rt}.json" for rt in containers]
    prep_s = run_workflow(wd, sorted(set(prep)))

    rows, rounds = [], []
    for rep in range(1, args.repeats + 1):
        mine = [p for p in points if p.repeat == rep]
        targets = [f"results/runs/{p.path}/metrics.json" for p in mine]
        load_r = loadavg()
        wall = run_workflow(wd, targets)
        jobs = job_times(wd)
        round_rows = []
        for p, t in zip(mine, targets):
            m = json.loads((wd / t).read_text())
            round_rows.append({
                "workload": p.workload, "runtime": p.runtime, "ranks": p.ranks, "repeat": rep,
                "payload_wall_s": m["payload_wall_s"], "harness_wall_s": m["harness_wall_s"],
                "job_s": jobs.get(t)})
        for row, t in zip(round_rows, targets):
            row.update(run_by_hand(wd / t, wd, scratch))
        rounds.append({"round": rep, "snakemake_wall_s": round(wall, 3),
                       "sum_job_s": round(sum(r["job_s"] or 0 for r in round_rows), 3),
                       "points": len(mine), "load": load_r})
        rows.extend(round_rows)

    per_kind = summarize(rows)
    startup = None
    for rt in containers:  # the first container runtime's start-up, as the workflow timed it
        s = json.loads((wd / "results" / "startup" / f"{rt}.json").read_text())
        startup = {"runtime": rt, **{
            name: {"native_median_s": round(p["native"]["median_s"], 4),
                   "container_median_s": round(p["container"]["median_s"], 4),
                   "startup_overhead_s": round(p["startup_overhead_s"], 4)}
            for name, p in s["probes"].items()}}
        break
    fixed = [r["snakemake_wall_s"] - r["sum_job_s"] for r in rounds]
    figures = {
        "per_point_kind": per_kind, "rounds": rounds, "prep_s": round(prep_s, 2),
        "snakemake_fixed_per_invocation_s": med(fixed),
        "container_startup": startup, "rows": rows,
        "target": "overhead_s < 0.5 s or < 2% per point (median)",
        "target_met": all(v["target_met"] for v in per_kind.values()),
    }
    parts = [f"{k}: {v['overhead_s']:+.2f} s ({v['overhead_pct']:+.1f}%; own "
             f"{v['workflow_own_s']:.2f} s) of {v['hand_s']:.1f} s" for k, v in per_kind.items()]
    human = "workflow per point vs same command by hand: " + "; ".join(parts)
    if startup:
        human += (f"; {startup['runtime']} start-up /bin/true +{startup['noop']['startup_overhead_s'] * 1000:.1f} ms,"
                  f" python +{startup['python']['startup_overhead_s'] * 1000:.0f} ms")
    human += f" (target < 0.5 s or < 2%: {'met' if figures['target_met'] else 'MISSED'})"
    result = report("harness_overhead", mode, figures, human, load0)
    if not args.keep:
        shutil.rmtree(wd, ignore_errors=True)
    return result


if __name__ == "__main__":
    main()
