"""Reports at scale: the report of an N-run synthetic campaign, made as a user makes it.

    python benchmarks/report_scale.py [--full|--smoke] [--runs N] [--keep DIR]
                                      [--code CHECKOUT ...] [--rounds R] [--steps S,...]

--full: 100,000 runs (benchmarks/aggregation.py's sweep and generator: 5 workloads x 4
runs per block set x 10 node counts x 5 GPU counts x 4 thread counts x 25 blocks);
--runs 1000: its small sweep (5 node counts x 5 GPU counts x 2 blocks); --runs 20000 (any
multiple of 4,000): the full sweep's axes, that many runs' worth of blocks; --smoke: 160 runs
(2 node counts x 2 GPU counts x 2 blocks; CI runs only its summary step, --steps summary:
the report's ~45 jobs take 2 minutes even there).

The campaign: aggregation.py's realistic metrics.json files (copies of a real CNN and a
real LLM run with the point and the measured values varied), its config with fixed
repeats (measurement.adaptive off: no decision files to fake) and its site, Frontier's
nodes with every runtime, without a scheduler (the site is a Slurm site: its points would
be submitted by a Slurm profile; here nothing is measured, and Snakemake runs the
summary and report jobs on this machine, as a Slurm profile runs them on the submit host:
they are local rules). What the points waited for is there too, as files: the images and
their manifests, the staged dataset and model, each runtime's start-up record (synthetic,
in the record's format). Generated once (not timed), under DIR/base with --keep; each
measured tree works on a hard-linked copy of it (DIR/work-<i>, removed after).

For each --code checkout (default: this one), alternately, round after round, each step
a snakemake command of that checkout's Snakefile in the campaign (``--directory``), timed:

- summary: ``snakemake summary`` (the aggregate rule: every table of results/summary/);
- all: ``snakemake`` (the default target: figures, fits, report tables and pages);
- html: ``snakemake --report report.html`` (one self-contained file);
- zip: ``snakemake --report report.zip`` (the report as an archive of files).

--tables-apart (what a tree before the lists of runs, rule runs_list, needs at
100,000 runs with Snakemake 9.27.1): no job that has every run as its input is started.
Snakemake prepares a job (snakemake/jobs.py, Job.prepare: ``is_pipe_or_service_input`` of
each input, a loop over the job's dependencies) in O(inputs x dependencies): in such a
tree, for the aggregate rule, and the summary and all targets, that is 100,000 x 100,000
(a 100,000-run `snakemake summary` was still preparing the aggregate job after 6 min 46 s,
2026-11-29). Since the lists (whole series of an arm, a few thousand runs a list) a
tree needs no such detour. Then the summary step is the aggregate rule's own code in a
process of its own (aggregation.py's cold stage: write_summary of the checkout, as the
rule's script calls it), and the all step asks Snakemake for the report's files by name
(rule all's inputs but the runs' metrics files, from a dry run of the default target,
not timed: DIR/targets.txt); the report steps are as above.

Each step is planned by Snakemake over every point (its metrics.json an input of its
list of runs): nothing is measured again (checked: Snakemake's job counts name no run_point,
and the campaign's metrics files are the same number after). Reported per step: wall
seconds, the largest process's peak RSS (getrusage of a wrapper's children: Snakemake and
the jobs it started), the jobs run; and the sizes of report.html, report.zip and of the
largest table page (runs.html).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import REPO, SNAKEMAKE, loadavg, mode_of, report, snakemake_env  # noqa: E402
from aggregation import generate, sweep_config  # noqa: E402

STEPS = ("summary", "all", "html", "zip")
# the site of aggregation.py's sweep (a Slurm site) without a scheduler: see the docstring
SITE = """\
name: gpu-cluster
extends: frontier
description: Frontier's nodes with every container runtime, no scheduler (benchmarks/report_scale.py)
source: sites/frontier.yaml, plus Charliecloud
scheduler: none
runtimes:
  charliecloud:
    bin: ch-run
"""


def campaign_config(runs: int, site: Path) -> dict:
    """aggregation.py's sweep of ``runs`` points, on ``site``, with fixed repeats."""
    config = sweep_config(max(runs, 1000) if runs % 4000 else 100_000)
    if runs < 1000:  # the smoke's: 5 workloads x 4 runs x 2 node counts x 2 GPU counts x 2 blocks
        config["sweep"].update(nodes=[1, 2], gpus_per_node=[1, 2])
    elif runs < 100_000 and runs % 4000 == 0:  # the full sweep's axes, fewer blocks (4,000 runs each)
        config["sweep"]["repeats"] = runs // 4000 - 1  # after the warm-up block
    config["site"] = str(site)
    config["measurement"] = {"adaptive": False}
    return config


def startup_record(runtime: str, digest: str) -> dict:
    """A start-up record in the format of scalesweep.run.startup.measure_startup."""
    def sides(native: float, container: float) -> dict:
        summary = lambda s, n=10: {"n": n, "median_s": s, "mean_s": s, "min_s": s * 0.97,  # noqa: E731
                                   "max_s": s * 1.05, "samples_s": [s * (1 + 0.01 * (i % 5 - 2))
                                                                    for i in range(n)]}
        return {"native": summary(native), "container": summary(container),
                "startup_overhead_s": container - native, "command": [runtime, "true"]}
    return {"runtime": runtime, "image": f"resources/images/{runtime}", "repeats": 10,
            "start": "2026-11-29T00:00:00+00:00", "end": "2026-11-29T00:01:00+00:00",
            "runtime_provenance": {"name": runtime}, "image_digest": digest,
            "probes": {"noop": sides(0.001, 0.003), "python": sides(0.020, 0.024),
                       "import_torch": sides(1.10, 1.16)}}


def make_campaign(base: Path, runs: int) -> float:
    """The campaign of ``runs`` points under ``base``: its metrics files, config, site
    and the files its points waited for. Seconds taken."""
    from scalesweep.record.metrics import write_metrics

    t0 = time.perf_counter()
    base.mkdir(parents=True, exist_ok=True)
    site = base / "site.yaml"
    site.write_text(SITE)
    config = campaign_config(runs, site)
    (base / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    # what the points waited for (rule run_point's inputs, the summary's manifests and
    # start-up records), made before the runs as the workflow makes them
    for d in ("resources/images/default", "resources/datasets/bench", "resources/models/bench"):
        (base / d).mkdir(parents=True, exist_ok=True)
    (base / "resources/images/default/README").write_text("synthetic image (report_scale.py)\n")
    (base / "resources/images/sif.sif").write_text("synthetic image (report_scale.py)\n")
    for image in ("default", "sif"):
        (base / f"resources/images/{image}.manifest.json").write_text(json.dumps(
            {"image": image, "content_digest": f"sha256:{image:0>64}"[:71]}) + "\n")
    (base / "resources/datasets/bench.verified.json").write_text(json.dumps({"ok": True}) + "\n")
    for runtime, image in (("charliecloud", "default"), ("apptainer", "sif")):
        write_metrics(base / f"results/startup/{runtime}.json",
                      startup_record(runtime, f"sha256:{image:0>64}"[:71]))
    time.sleep(1.1)  # the runs after what they waited for, by the clock's second too
    _, paths, _ = generate(base, runs, config=copy.deepcopy(config))
    (base / "paths.txt").write_text("\n".join(paths) + "\n")
    return time.perf_counter() - t0


JOBS = re.compile(r"^(\w+)\s+(\d+)$")


def job_counts(output: str) -> dict[str, int]:
    """Snakemake's "Job stats" table of a run (the last one in its output)."""
    counts: dict[str, int] = {}
    for block in output.split("Job stats:")[1:]:
        counts = {}
        for line in block.splitlines()[3:]:
            m = JOBS.match(line.strip())
            if not m:
                break
            counts[m.group(1)] = int(m.group(2))
    return counts


def snakemake_argv(code: Path, work: Path) -> list[str]:
    return [SNAKEMAKE, "-s", str(code / "Snakefile"), "--directory", str(work),
            "--configfile", str(work / "config.yaml"), "--cores", "2"]


def report_targets(code: Path, base: Path) -> list[str]:
    """Rule all's inputs but the runs' metrics files (DIR/targets.txt, from a dry run of
    checkout ``code`` on a hard-linked copy of the campaign, once)."""
    saved = base.parent / "targets.txt"
    if not saved.is_file():
        work = base.parent / "work-dry"
        shutil.rmtree(work, ignore_errors=True)
        subprocess.run(["cp", "-al", str(base), str(work)], check=True)
        proc = subprocess.run(snakemake_argv(code, work) + ["-n"], capture_output=True,
                              text=True, env=snakemake_env())
        shutil.rmtree(work, ignore_errors=True)
        block = proc.stdout.split("\nrule all:\n", 1)[1]
        line = next(x for x in block.splitlines() if x.strip().startswith("input:"))
        files = [f.strip() for f in line.split("input:", 1)[1].split(",")]
        saved.write_text("\n".join(f for f in files
                                   if f and not f.startswith("results/runs/")) + "\n")
    return saved.read_text().split()


def tables_apart(code: Path, work: Path) -> dict:
    """The summary step without Snakemake: the aggregate rule's code (aggregation.py's cold
    stage, in a process of its own, with checkout ``code``'s workflow/)."""
    argv = [sys.executable, str(Path(__file__).with_name("aggregation.py")), "--measure",
            str(work), "--stage", "cold", "--code", str(code)]
    t0 = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True)
    s = time.perf_counter() - t0
    (work / "summary.log").write_text(proc.stderr)
    if proc.returncode != 0:
        raise SystemExit(f"summary ({code}) failed:\n{proc.stderr[-4000:]}")
    cold = json.loads(proc.stdout.strip().splitlines()[-1])
    return {"s": round(s, 2), "rule_code_s": cold["s"], "imports_s": cold["imports_s"],
            "peak_rss_mib": max(cold["peak_rss_mib"], cold["children_peak_rss_mib"]),
            "jobs": {}, "argv": " ".join(argv)}


def step(code: Path, work: Path, name: str, targets: list[str] | None = None) -> dict:
    """One snakemake command of checkout ``code`` in campaign ``work``, through a wrapper
    process whose children's peak RSS is that of the largest process of the step."""
    if name == "summary" and targets is not None:
        return tables_apart(code, work)
    argv = snakemake_argv(code, work)
    argv += {"summary": ["summary"], "all": targets or [],
             "html": ["--report", str(work / "report.html")],
             "zip": ["--report", str(work / "report.zip")]}[name]
    wrapper = [sys.executable, __file__, "--wrap", json.dumps(argv)]
    proc = subprocess.run(wrapper, capture_output=True, text=True, env=snakemake_env())
    (work / f"{name}.log").write_text(proc.stderr)
    if proc.returncode != 0:
        raise SystemExit(f"{name} ({code}) failed: {' '.join(argv)}\n{proc.stderr[-4000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    if result["rc"] != 0:
        raise SystemExit(f"{name} ({code}) failed ({result['rc']}): {' '.join(argv)}\n"
                         f"{proc.stderr[-6000:]}")
    jobs = job_counts(proc.stderr)
    if jobs.get("run_point") or jobs.get("container_startup"):
        raise SystemExit(f"{name} ({code}) measured again: {jobs}")
    shown = argv if targets is None or name != "all" else argv[:-len(targets)] + [
        f"<the {len(targets)} files of targets.txt>"]
    return {"s": result["s"], "peak_rss_mib": result["peak_rss_mib"], "jobs": jobs,
            "argv": " ".join(shown)}


def wrap(argv: list[str]) -> None:
    """The measured process: runs ``argv``, prints its wall time and its children's peak RSS."""
    import resource

    t0 = time.perf_counter()
    rc = subprocess.run(argv).returncode
    s = time.perf_counter() - t0
    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(json.dumps({"rc": rc, "s": round(s, 2), "peak_rss_mib": round(rss, 1)}))


def zip_largest(path: Path, n: int = 6) -> list[list]:
    """The ``n`` largest members of report.zip: [name, MiB, MiB compressed]."""
    import zipfile

    if not path.is_file():
        return []
    with zipfile.ZipFile(path) as z:
        infos = sorted(z.infolist(), key=lambda i: i.file_size, reverse=True)[:n]
    return [[i.filename, round(i.file_size / 2**20, 2), round(i.compress_size / 2**20, 2)]
            for i in infos]


def measure(base: Path, code: Path, work: Path, names: list[str],
            targets: list[str] | None = None) -> dict:
    """Every step of one tree on a hard-linked copy of the campaign."""
    shutil.rmtree(work, ignore_errors=True)
    subprocess.run(["cp", "-al", str(base), str(work)], check=True)
    metrics_before = sum(1 for _ in (work / "results/runs").rglob("metrics.json"))
    load = loadavg()
    steps = {name: step(code, work, name, targets) for name in names}
    metrics_after = sum(1 for _ in (work / "results/runs").rglob("metrics.json"))
    if metrics_after != metrics_before:
        raise SystemExit(f"{code}: {metrics_before} metrics files before, {metrics_after} after")
    size = lambda p: round(p.stat().st_size / 2**20, 2) if p.is_file() else None  # noqa: E731
    commit = subprocess.run(["git", "-C", str(code), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip() or None
    out = {"code": str(code), "commit": commit, "load_before": load, "load_after": loadavg(),
           "steps": steps, "report_html_mib": size(work / "report.html"),
           "report_zip_mib": size(work / "report.zip"),
           "runs_html_mib": size(work / "results/summary/runs.html"),
           "runs_csv_mib": size(work / "results/summary/runs.csv"),
           "total_s": round(sum(s["s"] for s in steps.values()), 2),
           "zip_largest": zip_largest(work / "report.zip")}
    shutil.rmtree(work, ignore_errors=True)
    return out


def date_before(code: Path, base: Path) -> None:
    """Date checkout ``code``'s tracked files newer than campaign ``base`` an hour before it
    was made, as the code a campaign ran is: a checkout cloned after the campaign was
    generated would otherwise have its container recipes newer than the campaign's images,
    and Snakemake (no metadata for the synthetic images) would build them again. Older
    files are left as they are."""
    made = (base / "config.yaml").stat().st_mtime - 3600
    files = subprocess.run(["git", "-C", str(code), "ls-files", "-z"], capture_output=True,
                           check=True).stdout.decode().split("\0")
    for name in filter(None, files):
        path = code / name
        if path.is_file() and not path.is_symlink() and path.stat().st_mtime > made:
            os.utime(path, (made, made))


def main(argv: list[str] | None = None) -> dict:
    mode, rest = mode_of(argv)
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=100_000 if mode == "full" else 160,
                    help="100000, 1000 (aggregation.py's sweeps) or 160 (the smoke's)")
    ap.add_argument("--steps", default=",".join(STEPS), help="which steps, in order (html "
                    "and zip need all's outputs)")
    ap.add_argument("--keep", help="generate into (and keep) DIR/base; an existing one is "
                    "reused (no new files)")
    ap.add_argument("--code", action="append", help="a checkout whose Snakefile makes the "
                    "report (repeatable: measured alternately; default: this one)")
    ap.add_argument("--rounds", type=int, default=1, help="rounds over the checkouts")
    ap.add_argument("--tables-apart", action="store_true", help="the summary by the "
                    "aggregate rule's code, the report's jobs by their files (see above)")
    ap.add_argument("--wrap", help=argparse.SUPPRESS)  # internal: the measured process
    args = ap.parse_args(rest)
    if args.wrap:
        wrap(json.loads(args.wrap))
        return {}
    codes = [Path(c).resolve() for c in (args.code or [str(REPO)])]

    load0 = loadavg()
    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="scalesweep-rep-"))
    base = root / "base"
    gen_s = None
    if not (base / "paths.txt").is_file():
        shutil.rmtree(base, ignore_errors=True)
        gen_s = make_campaign(base, args.runs)
    runs = len((base / "paths.txt").read_text().split())
    if not (base / "config.json").is_file():  # the checked config, as aggregation.py reads it
        from scalesweep.plan.config import check_config

        config = yaml.safe_load((base / "config.yaml").read_text())
        check_config(config)
        (base / "config.json").write_text(json.dumps(config))
    for code in codes:
        date_before(code, base)
    targets = report_targets(codes[0], base) if args.tables_apart else None
    disk_mb = sum(f.stat().st_size for f in (base / "results/runs").rglob("metrics.json")) / 2**20
    rounds = []
    for r in range(args.rounds):
        for i, code in enumerate(codes):
            rounds.append({"round": r + 1, **measure(base, code, root / f"work-{i}",
                                                     args.steps.split(","), targets)})
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    figures = {"runs": runs, "metrics_mib": round(disk_mb, 1),
               "generate_s": round(gen_s, 1) if gen_s is not None else None,
               "tables_apart": args.tables_apart, "measured": rounds}
    last = {m["code"]: m for m in rounds}
    human = "; ".join(
        f"{m['commit'] or Path(m['code']).name}: "
        + ", ".join(f"{k} {v['s']:.1f} s" for k, v in m["steps"].items())
        + f", report.html {m['report_html_mib']} MiB, report.zip {m['report_zip_mib']} MiB, "
          f"largest process {max(s['peak_rss_mib'] for s in m['steps'].values()):.0f} MiB"
        for m in last.values())
    return report("report_scale", mode, figures, f"{runs:,} runs -> {human}", load0)


if __name__ == "__main__":
    main()
