"""Aggregation at scale: N synthetic runs -> the summary tables and figures.

    python benchmarks/aggregation.py [--full|--smoke] [--runs N] [--profile] [--keep DIR]

--full: 100,000 runs (5 workloads: 3 CNN + 2 LLM, x 4 runs per block set (native twice: beside charliecloud and beside apptainer) x 10 node counts x 5 GPU
counts x 4 thread counts x 25 repeats); --smoke: 1,000 runs.

The metrics.json files are realistic: copies of a real CNN and a real LLM run of this
repository (benchmarks/data/metrics_{cnn,llm}.json) with the point and the measured values
varied. They are written first (not timed), then a separate process runs exactly what the
`aggregate` and `plot_scaling`/`plot_llm` rules run (workflow/scripts/aggregate.py,
plot_scaling.py, plot_llm.py: scalesweep.analyse.collect.collect_runs, scaling.scaling_table,
describe_repeats, overhead_table, collect.point_states, plots.scaling_figure and
llm_figure, the CSV writes and the PNGs) and reports the time of each stage and its own
peak memory (resource.getrusage ru_maxrss). The files are read from the page cache (they
were just written): a parallel filesystem would add its own metadata latency per file.
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import REPO, loadavg, mode_of, report  # noqa: E402

DATA = Path(__file__).resolve().parent / "data"
TARGET_S = 30.0


def sweep_config(runs: int) -> dict:
    """A GPU-cluster config (benchmarks/configs/gpu-cluster.site.yaml: Frontier's nodes,
    every runtime) whose sweep has `runs` points (25 repeats for the full size)."""
    if runs >= 100_000:
        nodes, gpus, threads, repeats = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512], [1, 2, 4, 6, 8], [1, 2, 4, 7], 25
    else:  # smoke: 5 x 4 x 5 x 5 x 1 x 2 = 1,000
        nodes, gpus, threads, repeats = [1, 2, 4, 8, 16], [1, 2, 4, 6, 8], [7], 2
    workloads = {}
    for i in range(3):
        workloads[f"cnn_{i}"] = {"payload": "cnn", "parallel": "ddp", "dataset": "bench",
                                 "sweep": {"baseline": 1}}
    for i in range(2):
        workloads[f"llm_{i}"] = {"payload": "llm", "model": "bench",
                                 "sweep": {"baseline": None}}
    return {
        "site": "benchmarks/configs/gpu-cluster.site.yaml",  # relative to the repository
        "sweep": {"runtimes": ["native", "charliecloud", "apptainer"],
                  "nodes": nodes, "gpus_per_node": gpus, "threads_per_rank": threads,
                  "repeats": repeats, "baseline": None},
        "datasets": {"bench": {"source": "synthetic"}},
        "models": {"bench": {"source": "synthetic"}},
        "workloads": workloads,
        "analysis": {"cv_threshold": 0.05, "partial": False},
        # the Charliecloud image for charliecloud points, a SIF for the apptainer ones
        "containers": {"image": ["default", "sif"],
                       "images": {"default": {}, "sif": {"builder": "apptainer", "format": "sif",
                                                         "recipe": "containers/apptainer/pytorch-rocm.def"}}},
    }


RUNTIME_COST = {"native": 1.0, "charliecloud": 1.01, "apptainer": 1.02, "apptainer-hostmpi": 1.005}


def synthetic_metrics(point, payload: str, templates: dict, rng: random.Random) -> dict:
    """A copy of a real run's metrics with this point and plausible measured values."""
    m = copy.deepcopy(templates[payload])
    noise = lambda: rng.gauss(1.0, 0.02)  # noqa: E731
    m["point"] = point.as_dict()
    m["runtime"], m["workload"] = point.runtime, point.workload
    m["ranks"] = point.ranks
    cost = RUNTIME_COST[point.runtime]
    if payload == "cnn":
        count = point.nodes * point.ranks
        epoch = 40.0 / count ** 0.9 / point.threads ** 0.5 * cost
        m["epoch_s"] = [epoch * 1.3 * noise()] + [epoch * noise() for _ in range(4)]
        m["epochs"] = 5
        m["train_s"] = sum(m["epoch_s"])
        m["images_per_s"] = 384 * 5 / m["train_s"]
        m["final_loss"] = 0.24 * noise()
        m["final_accuracy"] = min(1.0, 0.93 * noise())
        m["peak_rss_mb"] = 1000 * noise()
        m["payload_wall_s"] = m["train_s"] + 5
    else:
        wall = 3.0 / (1 + point.gpus) ** 0.7 * cost * noise()
        m["wall_s"] = wall
        m["tokens_per_s"] = 512 / wall
        m["requests_per_s"] = 8 / wall
        m["gpus"] = point.gpus
        for key in ("ttft_s", "latency_s"):
            m[key] = {k: (v * noise() if isinstance(v, float) else v) for k, v in m[key].items()}
        m["memory"]["server_peak_rss_mb"] = 171.1 * noise()
        m["payload_wall_s"] = wall + 0.4
    m["harness_wall_s"] = m["payload_wall_s"] + 0.05 * noise()
    m["harness_overhead_s"] = m["harness_wall_s"] - m["payload_wall_s"]
    m["command"] = m["command"].replace("n1-g0-r1-t1/rep1", point.path.split("/", 2)[2])
    return m


def generate(root: Path, runs: int, seed: int = 0,
             config: dict | None = None) -> tuple[dict, list[str], float]:
    """The metrics files of ``config``'s sweep (default: sweep_config(runs)) under
    root/results/runs; (config, their paths, seconds)."""
    from scalesweep.plan.config import check_config
    from scalesweep.plan.sweep import sweep_points

    config = sweep_config(runs) if config is None else config
    check_config(config)  # and its site loaded (config["_site"]), as the workflow does
    config["_code_root"] = str(REPO)
    points = sweep_points(config)
    templates = {"cnn": json.loads((DATA / "metrics_cnn.json").read_text()),
                 "llm": json.loads((DATA / "metrics_llm.json").read_text())}
    rng = random.Random(seed)
    t0 = time.perf_counter()
    paths = []
    for p in points:
        payload = config["workloads"][p.workload]["payload"]
        d = root / "results" / "runs" / p.path
        d.mkdir(parents=True, exist_ok=True)
        f = d / "metrics.json"
        # scalesweep.record.metrics.write_metrics' format (indent=2, sorted keys), without its fsync per file
        f.write_text(json.dumps(synthetic_metrics(p, payload, templates, rng), indent=2,
                                sort_keys=True, default=str) + "\n")
        paths.append(f"results/runs/{p.path}/metrics.json")
    return config, paths, time.perf_counter() - t0


def measure(root: Path, profile: str | None) -> dict:
    """In its own process: the aggregate rule's code, then the two plot rules' code."""
    import os
    import resource

    os.chdir(root)
    config = json.loads(Path("config.json").read_text())
    paths = Path("paths.txt").read_text().split()
    stages: dict[str, float] = {}
    t_all = time.perf_counter()

    def stage(name, fn):
        t0 = time.perf_counter()
        out = fn()
        stages[name] = round(time.perf_counter() - t0, 3)
        return out

    t0 = time.perf_counter()
    import pandas as pd

    from scalesweep.analyse.overhead import overhead_table
    from scalesweep.analyse.scaling import scaling_table
    from scalesweep.analyse.stats import describe_repeats
    from scalesweep.analyse.collect import collect_runs, point_states
    from scalesweep.report.plots import llm_figure, scaling_figure
    from scalesweep.plan.sweep import sweep_points, workload_axes
    stages["imports"] = round(time.perf_counter() - t0, 3)

    prof = None
    if profile:
        import cProfile
        prof = cProfile.Profile()
        prof.enable()
    out = Path("results/summary")
    out.mkdir(parents=True, exist_ok=True)
    # --- workflow/scripts/aggregate.py, step by step -----------------------------------
    runs = stage("collect_runs", lambda: collect_runs(paths, config))
    stage("runs_csv", lambda: runs.to_csv(out / "runs.csv", index=False))

    def scaling():
        tables = []
        trained = runs[runs["payload"] == "cnn"]
        for workload, df in trained.groupby("workload", sort=True):
            tables.append(scaling_table(
                df, count_col="count", time_col="time_s",
                group_cols=["workload", "runtime", "threads"],
                baseline=workload_axes(config, workload).get("baseline"),
                cv_threshold=config.get("analysis", {}).get("cv_threshold", 0.05)))
        table = pd.concat(tables, ignore_index=True)
        table.to_csv(out / "scaling.csv", index=False, float_format="%.10g")
        return table
    scaling_df = stage("scaling_table", scaling)

    def llm():
        llm = runs[runs["payload"] == "llm"]
        keys = ["workload", "runtime", "nodes", "gpus", "threads"]
        table = describe_repeats(llm, keys, "time_s")
        extra = llm.groupby(keys, as_index=False)[
            ["tokens_per_s", "ttft_p50_s", "latency_p50_s", "peak_rss_mb"]].mean()
        table.merge(extra, on=keys).to_csv(out / "llm.csv", index=False, float_format="%.10g")
    stage("llm_table", llm)

    def overhead():
        keys = ["workload", "nodes", "gpus", "ranks", "threads"]
        table = overhead_table(runs, "runtime", "time_s", keys, baseline_runtime="native")
        table.to_csv(out / "overhead.csv", index=False, float_format="%.10g")
        return table
    overhead_df = stage("overhead_table", overhead)

    def states():
        import inspect
        if "done" in inspect.signature(point_states).parameters:  # the proposed fix
            st = point_states(sweep_points(config), done=runs["path"])
        else:
            st = point_states(sweep_points(config))
        st.to_csv(out / "points.csv", index=False)
        return st
    states_df = stage("point_states", states)
    # --- workflow/scripts/plot_scaling.py and plot_llm.py (they re-read the CSVs) -------
    def plot_scaling():
        fig = scaling_figure(pd.read_csv(out / "scaling.csv"), pd.read_csv(out / "runs.csv"))
        fig.savefig("results/plots_scaling.png", dpi=120)
    stage("scaling_figure", plot_scaling)

    def plot_llm():
        fig = llm_figure(pd.read_csv(out / "runs.csv"))
        fig.savefig("results/plots_llm.png", dpi=120)
    stage("llm_figure", plot_llm)
    if prof is not None:
        prof.disable()
        prof.dump_stats(profile)
    total = time.perf_counter() - t_all
    aggregate_s = sum(stages[k] for k in ("collect_runs", "runs_csv", "scaling_table",
                                          "llm_table", "overhead_table", "point_states"))
    return {
        "runs_read": len(runs), "scaling_rows": len(scaling_df), "overhead_rows": len(overhead_df),
        "points_done": int((states_df["state"] == "done").sum()),
        "stages_s": stages, "aggregate_rule_s": round(aggregate_s, 3),
        "plots_s": round(stages["scaling_figure"] + stages["llm_figure"], 3),
        "total_s": round(total, 3),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def main(argv: list[str] | None = None) -> dict:
    mode, rest = mode_of(argv)
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=100_000 if mode == "full" else 1_000)
    ap.add_argument("--profile", action="store_true", help="cProfile the measured stages")
    ap.add_argument("--keep", help="generate into (and keep) this directory; an existing "
                    "one is reused (no new files)")
    ap.add_argument("--code", default=str(REPO), help="the checkout whose workflow/ is "
                    "measured (e.g. a scratch copy with a proposed fix)")
    ap.add_argument("--measure", help=argparse.SUPPRESS)  # internal: the measured process
    ap.add_argument("--profile-out", help=argparse.SUPPRESS)
    args = ap.parse_args(rest)
    if args.measure:
        sys.path.insert(0, str(Path(args.code).resolve() / "workflow"))
        print(json.dumps(measure(Path(args.measure), args.profile_out)))
        return {}

    load0 = loadavg()
    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="scalesweep-agg-"))
    root.mkdir(parents=True, exist_ok=True)
    if (root / "paths.txt").is_file() and (root / "config.json").is_file():
        config = json.loads((root / "config.json").read_text())
        paths, gen_s = (root / "paths.txt").read_text().split(), None
    else:
        config, paths, gen_s = generate(root, args.runs)
        (root / "config.json").write_text(json.dumps(config))
        (root / "paths.txt").write_text("\n".join(paths) + "\n")
    shutil.rmtree(root / "results" / "summary", ignore_errors=True)
    disk_mb = sum(f.stat().st_size for f in (root / "results" / "runs").rglob("metrics.json")) / 2**20
    load1 = loadavg()
    argv = [sys.executable, __file__, "--measure", str(root), "--code", args.code]
    if args.profile:
        argv += ["--profile-out", str(root / "aggregate.prof")]
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"measurement failed:\n{proc.stderr[-4000:]}")
    m = json.loads(proc.stdout.strip().splitlines()[-1])
    total = m["aggregate_rule_s"] + m["plots_s"]
    figures = {
        "runs": len(paths), "metrics_mib": round(disk_mb, 1),
        "generate_s": round(gen_s, 1) if gen_s is not None else None,
        **m, "tables_and_figures_s": round(total, 3),
        "target_s": TARGET_S, "target_met": total < TARGET_S, "load_at_measure": load1,
        "code": args.code,
    }
    if args.profile:
        figures["profile_file"] = str(root / "aggregate.prof")
    human = (f"{len(paths):,} runs ({disk_mb:.0f} MiB of metrics.json) -> tables "
             f"{m['aggregate_rule_s']:.1f} s + figures {m['plots_s']:.1f} s = {total:.1f} s "
             f"(collect_runs {m['stages_s']['collect_runs']:.1f} s, point_states "
             f"{m['stages_s']['point_states']:.1f} s), peak RSS {m['peak_rss_mib']:.0f} MiB "
             f"(target < {TARGET_S:.0f} s: {'met' if total < TARGET_S else 'MISSED'})")
    result = report("aggregation", mode, figures, human, load0)
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    return result


if __name__ == "__main__":
    main()
