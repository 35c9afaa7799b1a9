"""Aggregation at scale: N synthetic runs -> every summary table, again after one more
run, and the figures.

    python benchmarks/aggregation.py [--full|--smoke] [--runs N] [--profile] [--keep DIR]
                                     [--code CHECKOUT] [--stages cold,update,figures]

--full: 100,000 runs (5 workloads: 3 CNN + 2 LLM, x 4 runs per block set (native twice:
beside charliecloud and beside apptainer) x 10 node counts x 5 GPU counts x 4 thread counts
x 25 blocks: 1 warm-up (measurement.warmup_blocks' default) + 24 repeats); --smoke: 1,000
runs (2 blocks: the warm-up + 1 repeat).

The metrics.json files are realistic: copies of a real CNN and a real LLM run of this
repository (benchmarks/data/metrics_{cnn,llm}.json) with the point and the measured values
varied. They are written first (not timed). Then each stage runs in a process of its own,
as each rule does, the rule's own code (workflow/scripts/*.py of --code, or
scalesweep.analyse.aggregate.write_summary, which the aggregate rule's script calls):

- cold: the aggregate rule with no summary and no cache (results/summary/ removed): every
  metrics file read, every table of results/summary/ written, and the runs cache;
- update: one more run (a repeat beyond the config's, as adaptive repeats add) and the
  aggregate rule again: the cache warm, one new file;
- figures: the plot_scaling and plot_llm rules on those tables (PNG).

Each reports its time, its steps' (collect_runs, runs.csv, each table) where the checkout
gives them, and its peak memory (resource.getrusage ru_maxrss: its own, and the largest of
the processes it started to read files). The files are read from the page cache (they
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


def sweep_config(runs: int) -> dict:
    """A GPU-cluster config (benchmarks/configs/gpu-cluster.site.yaml: Frontier's nodes,
    every runtime) whose sweep has `runs` points (25 blocks for the full size: the warm-up
    block of measurement.warmup_blocks' default, then 24 repeats; the same 100,000 runs as
    the figures of BENCHMARKS.md measured before the warm-up block, when they were 25
    repeats)."""
    # sweep.repeats counts the blocks after the warm-up one (plan.sweep.blocks_for)
    if runs >= 100_000:
        nodes, gpus, threads, repeats = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512], [1, 2, 4, 6, 8], [1, 2, 4, 7], 24
    else:  # smoke: 5 x 4 x 5 x 5 x 1 x (1 warm-up + 1) = 1,000
        nodes, gpus, threads, repeats = [1, 2, 4, 8, 16], [1, 2, 4, 6, 8], [7], 1
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


SUMMARY = ("runs", "scaling", "llm", "overhead", "load", "load_overhead", "points", "campaign")
TABLES_TARGET_S, UPDATE_TARGET_S, FIGURES_TARGET_S, RSS_TARGET_MIB = 10.0, 2.0, 10.0, 1024


class _Files(list):
    """A Snakemake input/output list: by position and by name."""

    def __init__(self, *items, **named):
        super().__init__([*items, *named.values()])
        self.__dict__.update(named)


def run_rule_script(code: Path, script: str, config: dict, log: Path, output=None,
                    **inputs) -> None:
    """A rule's script (workflow/scripts/<script>.py of the checkout ``code``) as Snakemake
    runs it: with a ``snakemake`` object of its input, output, log and config."""
    import types

    named = output if isinstance(output, dict) else {}
    sm = types.SimpleNamespace(
        input=_Files(**inputs), output=_Files(*([] if named else [output]), **named),
        log=_Files(str(log)), config=config, threads=1, params=_Files(), wildcards=_Files())
    source = (code / "workflow" / "scripts" / f"{script}.py").read_text()
    stderr = sys.stderr
    try:
        exec(compile(source, script, "exec"), {"snakemake": sm, "__name__": "__main__"})
    finally:
        if sys.stderr is not stderr:
            sys.stderr.close()
            sys.stderr = stderr


def extra_block(config: dict) -> int:
    """The block number of ``extra_run``: the one after the config's last (its warm-up
    blocks and sweep.repeats: plan.sweep.blocks_for), so that it adds a run and does not
    rewrite one of the sweep's."""
    from scalesweep.plan.sweep import blocks_for

    return blocks_for(config, config["sweep"]["repeats"]) + 1


def extra_run(root: Path, config: dict, paths: list[str]) -> str:
    """One more run of the campaign (a block beyond the config's of its first point, as
    the adaptive repeats add): its metrics.json written, its path returned."""
    import dataclasses

    from scalesweep.plan.sweep import SweepPoint

    first = SweepPoint.from_path(paths[0].removeprefix("results/runs/").removesuffix(
        "/metrics.json"))
    point = dataclasses.replace(first, repeat=extra_block(config))
    templates = {"cnn": json.loads((DATA / "metrics_cnn.json").read_text()),
                 "llm": json.loads((DATA / "metrics_llm.json").read_text())}
    payload = config["workloads"][point.workload]["payload"]
    f = root / "results" / "runs" / point.path / "metrics.json"
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_text(json.dumps(synthetic_metrics(point, payload, templates, random.Random(1)),
                            indent=2, sort_keys=True, default=str) + "\n")
    return f"results/runs/{point.path}/metrics.json"


def measure(root: Path, stage: str, code: Path, profile: str | None) -> dict:
    """In its own process (as each rule runs in its own): ``stage`` "cold" (the aggregate
    rule with no cache: every metrics file read), "update" (the aggregate rule again after
    one more run: the cache of the cold stage warm, one new file) or "figures" (the
    plot_scaling and plot_llm rules on the tables). Its time, its steps' (where the
    checkout's aggregate rule gives them: scalesweep.analyse.aggregate.write_summary),
    and its peak memory and that of the processes it started."""
    import os
    import resource

    os.chdir(root)
    config = json.loads(Path("config.json").read_text())
    config["_code_root"] = str(code)
    paths = Path("paths.txt").read_text().split()
    out = Path("results/summary")
    out.mkdir(parents=True, exist_ok=True)
    output = {name: str(out / (f"{name}.csv" if name != "campaign" else "campaign.json"))
              for name in SUMMARY}
    output["load"], output["load_overhead"] = str(out / "llm_load.csv"), str(out / "llm_load_overhead.csv")
    # the same rows typed and columnar, as the aggregate rule writes them (a checkout from
    # before it, issue #41, ignores the name)
    output["runs_parquet"] = str(out / "runs.parquet")
    if stage == "update":
        paths.append(extra_run(root, config, paths))
        # older than the cache's "just changed" window (cachefiles.RACY_S), so that its
        # row is stored too: the update measured whole, cache rewrite included
        time.sleep(3.5)
    t0 = time.perf_counter()
    import pandas  # noqa: F401  (what every rule's script imports first)
    try:
        from scalesweep.analyse.aggregate import write_summary
    except ImportError:
        try:  # a checkout from before issue #41 (the entry point was in report/)
            from scalesweep.report.aggregate import write_summary
        except ImportError:  # a checkout from before it: its script
            write_summary = None
    imports_s = time.perf_counter() - t0
    prof = None
    if profile:
        import cProfile
        prof = cProfile.Profile()
        prof.enable()
    steps: dict[str, float] = {}
    t0 = time.perf_counter()
    if stage in ("cold", "update"):
        if write_summary is not None:
            tables = write_summary(paths, config, output, lambda text: None, timings=steps)
            runs, states = tables["runs"], tables["points"]
        else:
            run_rule_script(code, "aggregate", config, root / "aggregate.log", output,
                            metrics=paths)
            import pandas as pd
            runs, states = pd.read_csv(output["runs"]), pd.read_csv(output["points"])
        import pandas as pd
        extra = {"runs_read": len(runs), "points_done": int((states["state"] == "done").sum()),
                 "scaling_rows": len(pd.read_csv(output["scaling"])),
                 "overhead_rows": len(pd.read_csv(output["overhead"]))}
    else:
        run_rule_script(code, "plot_scaling", config, root / "plot_scaling.log",
                        str(root / "results/plots_scaling.png"),
                        scaling=output["scaling"], runs=output["runs"])
        t1 = time.perf_counter()
        run_rule_script(code, "plot_llm", config, root / "plot_llm.log",
                        str(root / "results/plots_llm.png"), runs=output["runs"])
        steps = {"scaling_figure": round(t1 - t0, 3), "llm_figure": round(time.perf_counter() - t1, 3)}
        extra = {}
    seconds = time.perf_counter() - t0
    if prof is not None:
        prof.disable()
        prof.dump_stats(profile)
    mib = lambda who: round(resource.getrusage(who).ru_maxrss / 1024, 1)  # noqa: E731
    return {"stage": stage, "s": round(seconds, 3), "imports_s": round(imports_s, 3),
            "steps_s": steps, "peak_rss_mib": mib(resource.RUSAGE_SELF),
            "children_peak_rss_mib": mib(resource.RUSAGE_CHILDREN), **extra}


def main(argv: list[str] | None = None) -> dict:
    mode, rest = mode_of(argv)
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=100_000 if mode == "full" else 1_000)
    ap.add_argument("--profile", action="store_true", help="cProfile each measured stage "
                    "(DIR/<stage>.prof)")
    ap.add_argument("--keep", help="generate into (and keep) this directory; an existing "
                    "one is reused (no new files)")
    ap.add_argument("--code", default=str(REPO), help="the checkout whose workflow/ is "
                    "measured (e.g. a scratch copy with a proposed fix)")
    ap.add_argument("--stages", default="cold,update,figures",
                    help="which stages to measure, in order (update needs cold's cache)")
    ap.add_argument("--measure", help=argparse.SUPPRESS)  # internal: the measured process
    ap.add_argument("--stage", help=argparse.SUPPRESS)
    ap.add_argument("--profile-out", help=argparse.SUPPRESS)
    args = ap.parse_args(rest)
    code = Path(args.code).resolve()
    if args.measure:
        sys.path.insert(0, str(code / "workflow"))
        print(json.dumps(measure(Path(args.measure), args.stage, code, args.profile_out)))
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
    # no summary, no cache, no run of an earlier update stage
    shutil.rmtree(root / "results" / "summary", ignore_errors=True)
    runs_dir = root / "results" / "runs"
    for extra in runs_dir.glob(f"*/*/*/rep{extra_block(config)}"):
        shutil.rmtree(extra)
    disk_mb = sum(f.stat().st_size for f in runs_dir.rglob("metrics.json")) / 2**20
    stages = {}
    for stage in args.stages.split(","):
        argv = [sys.executable, __file__, "--measure", str(root), "--stage", stage,
                "--code", str(code)]
        if args.profile:
            argv += ["--profile-out", str(root / f"{stage}.prof")]
        proc = subprocess.run(argv, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"measurement of {stage} failed:\n{proc.stderr[-4000:]}")
        stages[stage] = json.loads(proc.stdout.strip().splitlines()[-1])
    cold, update, figures = (stages.get(k, {}) for k in ("cold", "update", "figures"))
    peak = max((max(s["peak_rss_mib"], s["children_peak_rss_mib"]) for s in stages.values()),
               default=0)
    tables_s, update_s, figures_s = cold.get("s"), update.get("s"), figures.get("s")
    met = {"tables": tables_s is not None and tables_s < TABLES_TARGET_S,
           "update": update_s is not None and update_s < UPDATE_TARGET_S,
           "figures": figures_s is not None and figures_s < FIGURES_TARGET_S,
           "rss": peak < RSS_TARGET_MIB}
    figures_out = {
        "runs": len(paths), "metrics_mib": round(disk_mb, 1),
        "generate_s": round(gen_s, 1) if gen_s is not None else None,
        "runs_read": cold.get("runs_read"), "points_done": cold.get("points_done"),
        "scaling_rows": cold.get("scaling_rows"), "overhead_rows": cold.get("overhead_rows"),
        "tables_s": tables_s, "update_s": update_s, "figures_s": figures_s,
        "tables_and_figures_s": round((tables_s or 0) + (figures_s or 0), 3),
        "peak_rss_mib": peak, "stages": stages,
        "targets": {"tables_s": TABLES_TARGET_S, "update_s": UPDATE_TARGET_S,
                    "figures_s": FIGURES_TARGET_S, "peak_rss_mib": RSS_TARGET_MIB},
        "targets_met": met, "load_at_measure": loadavg(), "code": str(code),
    }
    if args.profile:
        figures_out["profile_files"] = [str(root / f"{s}.prof") for s in stages]
    shown = lambda v: "-" if v is None else f"{v:.1f} s"  # noqa: E731
    human = (f"{len(paths):,} runs ({disk_mb:.0f} MiB of metrics.json) -> tables "
             f"{shown(tables_s)} (collect_runs {shown(cold.get('steps_s', {}).get('collect_runs'))}), "
             f"update after one more run {shown(update_s)}, figures {shown(figures_s)}, peak RSS "
             f"{peak:.0f} MiB (targets < {TABLES_TARGET_S:.0f} s / < {UPDATE_TARGET_S:.0f} s / "
             f"< {FIGURES_TARGET_S:.0f} s / < {RSS_TARGET_MIB} MiB: "
             + ", ".join(f"{k} {'met' if v else 'MISSED'}" for k, v in met.items()) + ")")
    result = report("aggregation", mode, figures_out, human, load0)
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    return result


if __name__ == "__main__":
    main()
