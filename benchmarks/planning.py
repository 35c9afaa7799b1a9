"""Planning at scale: `snakemake -n` on a Frontier-size sweep vs a bare Snakefile.

    python benchmarks/planning.py [--full|--smoke] [--repeats N] [--no-profile] [--no-site-profile]
                                  [--ablation]
                                  [--snakefile PATH] [--keep DIR]

--full:  ~10,000 points (10 node counts x 4 GPU counts x 4 runs per block set (native beside charliecloud, beside apptainer) x 4 workloads x 15
         blocks (1 warm-up + 14 repeats) = 9,600 run_point jobs) on a ROCm machine with 8 GPUs per node.
--smoke: 48 points, 1 repeat, no profile, of --ablation only bare+all (CI).

The config is written into a temporary campaign directory and passed with --configfile
(it validates against workflow/schemas/config.schema.yaml: the workflow refuses it
otherwise). The bare workflow (benchmarks/bare/Snakefile) plans the same number of jobs
with one plain rule per job kind and no scalesweep code; "bare_functions" is the same
Snakefile with the per-job functions any per-job-Slurm workflow has (input, threads, params
and 10 resource functions, all trivial); "bare_workflow_profile" is the bare Snakefile
run with scalesweep's workflow profile (profiles/default: every job's shell command
printed, keep-going, rerun-triggers), the options every scalesweep run has. All dry runs are interleaved (real, bare,
bare_functions, variants, real, ...) so that they see the same load; the figure is the ratio
of the median CPU times (user+sys: the least disturbed by other processes), the wall-time
ratio is reported too. Round 1 also writes each dry run's output, to count the jobs. With a
profile (--full), the real dry run is re-run under cProfile and the time is split into
scalesweep's own code (workflow/, the .smk files) and Snakemake's; --keep DIR keeps it.

--ablation adds the bare Snakefile with one of scalesweep's run_point features at a time
(a log: directive, an input function, a threads function, params in the shell command) and
with all of them: what Snakemake charges for each, i.e. where the rest goes.

"scalesweep_frontier_profile" (unless --no-site-profile) plans the same sweep as a Frontier
user does, with --profile profiles/frontier: the Slurm executor, and run_point with its 10
per-point Slurm resource functions (declared only under a Slurm site profile); its fair
baseline is bare_functions.

--snakefile runs the "real" side with another Snakefile; --variant NAME=SNAKEFILE (any
number) adds further Snakefiles (e.g. a scratch copy of the repository with a proposed
fix) to the same interleaved rounds, so that a fix is measured side by side.
"""

from __future__ import annotations

import argparse
import copy
import pstats
import re
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (  # noqa: E402
    REPO,
    SNAKEMAKE,
    interleaved,
    loadavg,
    mode_of,
    report,
    snakemake_env,
    summary,
    timed,
    timed_cpu,
)

SIZES = {
    # nodes x gpus x runtimes x (cnn, llm workloads) x blocks: sweep.repeats counts the
    # blocks after the warm-up one (measurement.warmup_blocks' default: plan.sweep.blocks_for),
    # so 14 repeats plan the 15 blocks, the 9,600 points, of BENCHMARKS.md's figures
    "full": dict(nodes=[1, 2, 4, 8, 16, 32, 64, 128, 256, 512], gpus=[1, 2, 4, 8],
                 runtimes=["native", "charliecloud", "apptainer"],
                 cnn=2, llm=2, repeats=14),
    # 48 points: CI's check that every side still plans (the figures come from --full)
    "smoke": dict(nodes=[1, 4, 16], gpus=[1, 2],
                  runtimes=["native", "apptainer"], cnn=1, llm=1, repeats=1),
}
BARE = Path(__file__).resolve().parent / "bare" / "Snakefile"
# The sites planned on (paths relative to the repository, as a config's site is): without
# scheduler for the side compared with the bare Snakefile, with Frontier's Slurm under
# profiles/frontier (compared with bare_functions).
SITE = "benchmarks/configs/planning.site.yaml"
SLURM_SITE = "benchmarks/configs/planning-slurm.site.yaml"
TARGET_RATIO = 1.3  # issue #31: planning within 1.3x of the bare Snakefile (#17 asked 1.5x)
SAME_OPTIONS = "bare_workflow_profile"  # the bare Snakefile with scalesweep's profiles/default
# run_point's features that the bare Snakefile can add one at a time (--ablation)
ABLATION_FEATURES = ("log", "input_function", "threads", "params")


def sweep_config(nodes, gpus, runtimes, cnn, llm, repeats) -> dict:
    """A sweep on Frontier's node shape (ROCm, 8 GPUs and 56 cores per node: SITE, which
    extends sites/frontier.yaml without scheduler), CNN DDP + LLM workloads."""
    workloads = {}
    for i in range(cnn):
        workloads[f"cnn_ddp_{i}"] = {
            "payload": "cnn", "parallel": "ddp", "dataset": "bench", "epochs": 5,
            "batch_size": 64, "sweep": {"baseline": 1}}
    for i in range(llm):
        workloads[f"llm_{i}"] = {
            "payload": "llm", "engine": "llamacpp", "model": "bench", "max_tokens": 256,
            "sweep": {"threads_per_rank": [56], "baseline": None}}
    return {
        "site": SITE,
        "sweep": {"runtimes": list(runtimes), "nodes": list(nodes), "gpus_per_node": list(gpus),
                  "threads_per_rank": [7], "repeats": repeats, "baseline": None},
        "datasets": {"bench": {"source": "synthetic", "classes": ["a", "b"],
                               "images_per_class": 32, "image_size": 64}},
        "models": {"bench": {"source": "synthetic", "seed": 0}},
        "workloads": workloads,
        # the Charliecloud image for charliecloud points, a SIF for the apptainer ones
        "containers": {"image": ["default", "sif"],
                       "images": {"default": {}, "sif": {"builder": "apptainer", "format": "sif",
                                                         "recipe": "containers/apptainer/pytorch-rocm.def"}}},
    }


def job_total(dry_run_stdout: str) -> int:
    """The `total` row of Snakemake's Job stats table."""
    m = re.search(r"^total\s+(\d+)", dry_run_stdout, re.M)
    if not m:
        raise RuntimeError("no job stats in the dry run's output:\n" + dry_run_stdout[-2000:])
    return int(m[1])


def dry_run(snakefile: Path, wd: Path, extra: list[str], out: Path | None = None) -> tuple[float, float]:
    """(wall s, CPU s) of `snakemake -n` (its output to `out`, or discarded)."""
    argv = [SNAKEMAKE, "-s", str(snakefile), "--directory", str(wd), "-n", "--cores", "2", *extra]
    env = snakemake_env()
    env.setdefault("SBATCH_ACCOUNT", "bench")  # the site profiles read the account from here
    if out is None:
        return timed_cpu(argv, cwd=wd, env=env)
    with open(out, "w") as fh:
        return timed_cpu(argv, cwd=wd, env=env, stdout=fh)


def profile_real(snakefile: Path, wd: Path, prof: Path) -> dict:
    """cProfile of the whole snakemake process; scalesweep's share by function."""
    argv = [sys.executable, "-m", "cProfile", "-o", str(prof), "-m", "snakemake",
            "-s", str(snakefile), "--directory", str(wd), "-n", "--cores", "2",
            "--configfile", str(wd / "config" / "config.yaml")]
    wall = timed(argv, cwd=wd, env=snakemake_env())
    st = pstats.Stats(str(prof))
    total = st.total_tt
    code_root = str(snakefile.resolve().parent)
    ours_roots = (code_root + "/workflow", code_root + "/Snakefile")

    def ours(filename: str) -> bool:
        return filename.startswith(ours_roots)

    # Own time (tottime) of scalesweep's functions, and cumulative time of each of them
    # (cumulative includes what they call in Snakemake/pyyaml/jsonschema).
    rows = []
    own_total = 0.0
    for (filename, line, name), (cc, nc, tt, ct, _callers) in st.stats.items():
        if ours(filename):
            own_total += tt
            rows.append({"function": f"{Path(filename).name}:{line}({name})", "calls": nc,
                         "tottime_s": round(tt, 3), "cumtime_s": round(ct, 3)})
    rows.sort(key=lambda r: r["cumtime_s"], reverse=True)
    # Time spent in scalesweep's code including what it calls, counted once: the cumulative
    # time of every call edge from Snakemake (or anything not ours) into our functions.
    entry = 0.0
    for (filename, _line, _name), (_cc, _nc, _tt, _ct, callers) in st.stats.items():
        if ours(filename):
            entry += sum(v[3] for c, v in callers.items() if not ours(c[0]))
    # Top functions overall by own time, to show where Snakemake spends the rest.
    top = sorted(st.stats.items(), key=lambda kv: kv[1][2], reverse=True)[:15]
    top_rows = [{"function": f"{Path(fn).name}:{ln}({name})", "calls": v[1],
                 "tottime_s": round(v[2], 3), "cumtime_s": round(v[3], 3)}
                for (fn, ln, name), v in top]
    return {"profile_wall_s": round(wall, 2), "profile_total_s": round(total, 2),
            "scalesweep_own_s": round(own_total, 3),
            "scalesweep_cumulative_s": round(entry, 3),
            "scalesweep_top_cumulative": rows[:12], "top_own_time": top_rows,
            "profile_file": str(prof)}


def main(argv: list[str] | None = None) -> dict:
    mode, rest = mode_of(argv)
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3 if mode == "full" else 1)
    ap.add_argument("--no-profile", action="store_true")
    ap.add_argument("--snakefile", default=str(REPO / "Snakefile"))
    ap.add_argument("--variant", action="append", default=[], metavar="NAME=SNAKEFILE",
                    help="another Snakefile planned in the same rounds (e.g. a fix)")
    ap.add_argument("--keep", help="keep the campaign directories (and the profile) here")
    ap.add_argument("--ablation", action="store_true",
                    help="also price run_point's features one at a time on the bare Snakefile")
    ap.add_argument("--no-site-profile", action="store_true",
                    help="skip the side planned under profiles/frontier (Slurm executor)")
    args = ap.parse_args(rest)
    snakefile = Path(args.snakefile).resolve()
    load0 = loadavg()

    config = sweep_config(**SIZES[mode])
    from scalesweep.plan.config import check_config
    from scalesweep.plan.imageset import used_images
    from scalesweep.plan.sweep import sweep_points
    checked = copy.deepcopy(config)
    check_config(checked)  # the workflow validates it again (schema + cross-checks)
    points = sweep_points(checked)

    base = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="scalesweep-plan-"))
    real_wd, bare_wd = base / "real", base / "bare"
    for wd in (real_wd, bare_wd):
        (wd / "config").mkdir(parents=True, exist_ok=True)
    (real_wd / "config" / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    (bare_wd / "points.txt").write_text("\n".join(p.path for p in points) + "\n")
    containers = sorted({p.runtime for p in points} - {"native"})

    # Round 1 also gives the job counts: the bare workflow gets report-like jobs up to the
    # real total (its config needs that number, so the real side goes first).
    real_extra = ["--configfile", str(real_wd / "config" / "config.yaml")]
    first = {"scalesweep": dry_run(snakefile, real_wd, real_extra, out=base / "real.out")}
    jobs = {"scalesweep": job_total((base / "real.out").read_text())}
    # datasets, model, images, start-up, points, aggregate, 2 plots, all
    fixed = 3 + len(used_images(checked, points)) + len(containers) + len(points) + 3 + 1
    bare_extra = {}
    for name, functions in (("bare", False), ("bare_functions", True)):
        cfg = {"points": str(bare_wd / "points.txt"), "runtimes": containers,
               "extra_jobs": max(0, jobs["scalesweep"] - fixed), "per_job_functions": functions}
        (bare_wd / "config" / f"{name}.yaml").write_text(yaml.safe_dump(cfg))
        bare_extra[name] = ["--configfile", str(bare_wd / "config" / f"{name}.yaml")]
        first[name] = dry_run(BARE, bare_wd, bare_extra[name], out=base / f"{name}.out")
        jobs[name] = job_total((base / f"{name}.out").read_text())
    # The bare Snakefile with the options scalesweep's workflow profile gives every run
    # (profiles/default: printshellcmds, keep-going, rerun-triggers): the same dry run's
    # output, every job's shell command printed, without scalesweep's code.
    bare_extra[SAME_OPTIONS] = [*bare_extra["bare"], "--workflow-profile",
                                str(snakefile.parent / "profiles" / "default")]
    first[SAME_OPTIONS] = dry_run(BARE, bare_wd, bare_extra[SAME_OPTIONS],
                                  out=base / f"{SAME_OPTIONS}.out")
    jobs[SAME_OPTIONS] = job_total((base / f"{SAME_OPTIONS}.out").read_text())

    # --ablation: the bare Snakefile plus one of scalesweep's run_point features at a time
    # (benchmarks/bare/Snakefile: features), and all of them: where the rest goes.
    # (--smoke: all of them only, each feature's own side is --full's)
    ablation = {f"bare+{f}": [f] for f in ABLATION_FEATURES} \
        if args.ablation and mode == "full" else {}
    if args.ablation:
        ablation["bare+all"] = list(ABLATION_FEATURES)
    for name, features in ablation.items():
        cfg = yaml.safe_load((bare_wd / "config" / "bare.yaml").read_text()) | {"features": features}
        (bare_wd / "config" / f"{name}.yaml").write_text(yaml.safe_dump(cfg))
        bare_extra[name] = ["--configfile", str(bare_wd / "config" / f"{name}.yaml")]
        first[name] = dry_run(BARE, bare_wd, bare_extra[name], out=base / f"{name}.out")
        jobs[name] = job_total((base / f"{name}.out").read_text())

    # The same sweep planned as on Frontier: --profile profiles/frontier (Slurm executor,
    # run_point with its 10 Slurm resource functions). Compare with bare_functions.
    site_extra = [*real_extra, "--profile", str(snakefile.parent / "profiles" / "frontier"),
                  "--config", f"site={SLURM_SITE}"]
    if not args.no_site_profile:
        first["scalesweep_frontier_profile"] = dry_run(snakefile, real_wd, site_extra,
                                                       out=base / "frontier.out")
        jobs["scalesweep_frontier_profile"] = job_total((base / "frontier.out").read_text())
    cases = {"scalesweep": lambda: dry_run(snakefile, real_wd, real_extra),
             "bare": lambda: dry_run(BARE, bare_wd, bare_extra["bare"]),
             "bare_functions": lambda: dry_run(BARE, bare_wd, bare_extra["bare_functions"]),
             SAME_OPTIONS: lambda: dry_run(BARE, bare_wd, bare_extra[SAME_OPTIONS])}
    for name in ablation:
        cases[name] = (lambda n=name: dry_run(BARE, bare_wd, bare_extra[n]))
    if not args.no_site_profile:
        cases["scalesweep_frontier_profile"] = lambda: dry_run(snakefile, real_wd, site_extra)
    variants = dict(v.split("=", 1) for v in args.variant)
    for name, path in variants.items():
        first[name] = dry_run(Path(path), real_wd, real_extra, out=base / f"{name}.out")
        jobs[name] = job_total((base / f"{name}.out").read_text())
        cases[name] = (lambda p=Path(path).resolve(): dry_run(p, real_wd, real_extra))
    samples = interleaved(cases, args.repeats - 1)
    for name, wall_cpu in first.items():
        samples[name].insert(0, wall_cpu)

    def side(name: str) -> dict:
        walls = [w for w, _ in samples[name]]
        cpus = [c for _, c in samples[name]]
        bare_w = [w for w, _ in samples["bare"]]
        bare_c = [c for _, c in samples["bare"]]
        return {"jobs": jobs[name], "wall": summary(walls), "cpu": summary(cpus),
                "ratio_wall": round(statistics.median(walls) / statistics.median(bare_w), 3),
                "ratio_cpu": round(statistics.median(cpus) / statistics.median(bare_c), 3),
                "ratio_wall_per_round": [round(a / b, 3) for a, b in zip(walls, bare_w)]}

    sides = {name: side(name) for name in cases}
    main_side = sides["scalesweep"]
    ratio = main_side["ratio_cpu"]
    figures = {
        "points": len(points), "jobs_scalesweep": jobs["scalesweep"], "jobs_bare": jobs["bare"],
        "sides": sides, "ratio_cpu": ratio, "ratio_wall": main_side["ratio_wall"],
        "ratio_cpu_same_options": round(main_side["cpu"]["median_s"]
                                        / sides[SAME_OPTIONS]["cpu"]["median_s"], 3),
        "ratio_median": ratio, "target_ratio": TARGET_RATIO, "target_met": ratio <= TARGET_RATIO,
        "snakefile": str(snakefile), "variants": variants,
    }
    if mode == "full" and not args.no_profile:
        figures["profile"] = profile_real(snakefile, real_wd, base / "scalesweep.prof")
    human = (f"{len(points)} points / {jobs['scalesweep']} jobs: snakemake -n "
             f"{main_side['cpu']['median_s']:.1f} s CPU ({main_side['wall']['median_s']:.1f} s wall) "
             f"vs bare {sides['bare']['cpu']['median_s']:.1f} s CPU = {ratio:.2f}x CPU, "
             f"{main_side['ratio_wall']:.2f}x wall (target <= {TARGET_RATIO}x: "
             f"{'met' if ratio <= TARGET_RATIO else 'MISSED'}); "
             f"{figures['ratio_cpu_same_options']:.2f}x the bare Snakefile with the workflow "
             f"profile's options; bare with per-job functions "
             f"{sides['bare_functions']['ratio_cpu']:.2f}x")
    if "scalesweep_frontier_profile" in sides:
        fp = sides["scalesweep_frontier_profile"]
        human += (f"; under profiles/frontier {fp['cpu']['median_s']:.1f} s CPU = "
                  f"{fp['ratio_cpu']:.2f}x bare, {fp['cpu']['median_s'] / sides['bare_functions']['cpu']['median_s']:.2f}x "
                  "bare with per-job functions")
    for name in variants:
        human += f"; {name}: {sides[name]['ratio_cpu']:.2f}x CPU"
    if ablation:
        human += "; ablation (CPU vs bare): " + ", ".join(
            f"{name} {sides[name]['ratio_cpu']:.2f}x" for name in ablation)
    if "profile" in figures:
        p = figures["profile"]
        human += (f"; profile: scalesweep's own functions {p['scalesweep_cumulative_s']:.1f} s "
                  f"cumulative of {p['profile_total_s']:.1f} s")
    result = report("planning", mode, figures, human, load0)
    if not args.keep:
        shutil.rmtree(base, ignore_errors=True)
    return result


if __name__ == "__main__":
    main()
