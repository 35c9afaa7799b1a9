"""End to end: from a fresh clone to report.html (cold), then again (warm: nothing to do).

    python benchmarks/end_to_end.py [--full|--smoke] [--clone DIR] [--image-cold]

--full: `git clone <this repo> DIR && cd DIR && tools/quickstart.sh` timed (cold: venv,
        the embedded default sweep, the report), then `tools/quickstart.sh` again (warm).
        The clone holds the last commit only (uncommitted work is not in it). Each output
        line is time-stamped, so the install, sweep and report phases are reported apart.
        What is warm on the machine is reported with it: ~/.cache/scalesweep (the compiled
        llama.cpp wheel, the debootstrap base, the built image) and pip's local wheels.
--image-cold: also time `scalesweep build-image` into an empty --cache-dir (only the
        llama.cpp wheel copied in, so that its 8-minute compile is not re-measured).
--smoke: no clone, no install: the quickstart's sweep step as far as its summary
        (`snakemake summary`: the point and the summary tables) on a tiny one-point config
        in a temporary campaign, cold then warm; checks that the script runs (CI), its
        figures meaningless. The report's ~20 jobs are left to the test suite's own report
        tests (tests/integration/test_report.py): here they cost CI 2-3 minutes of the
        suite's shared cores.
"""

from __future__ import annotations

import argparse
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

CACHE = Path(os.environ.get("SCALESWEEP_CACHE", "~/.cache/scalesweep")).expanduser()


def stamped(argv: list[str], cwd: Path, log: Path, env: dict | None = None) -> tuple[float, int, list]:
    """Run, time-stamping every output line (seconds since start) into log."""
    t0 = time.perf_counter()
    lines: list[tuple[float, str]] = []
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, bufsize=1)
    with open(log, "w") as fh:
        for line in proc.stdout:
            t = time.perf_counter() - t0
            lines.append((t, line.rstrip("\n")))
            fh.write(f"{t:9.2f} {line}")
    rc = proc.wait()
    return time.perf_counter() - t0, rc, lines


def first(lines, pattern: str):
    for t, line in lines:
        if re.search(pattern, line):
            return round(t, 2)
    return None


def cache_state() -> dict:
    def entries(sub):
        d = CACHE / sub
        return sorted(p.name for p in d.iterdir()) if d.is_dir() else []
    return {"cache_dir": str(CACHE), "wheels": entries("wheels"), "images": len(entries("images")),
            "base": len(entries("base")),
            "pip_find_links": os.environ.get("PIP_FIND_LINKS", ""),
            "local_torch_wheel": sorted(p.name for p in Path("/opt/wheels").glob("torch-*"))
            if Path("/opt/wheels").is_dir() else []}


def full(args) -> tuple[dict, str]:
    clone = Path(args.clone)
    shutil.rmtree(clone, ignore_errors=True)
    t0 = time.perf_counter()
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
    clone_s = time.perf_counter() - t0
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=clone, capture_output=True,
                            text=True).stdout.strip()
    warm_caches = cache_state()
    # unbuffered: Snakemake's lines reach the time stamps when they are printed
    env = dict(os.environ, USER=os.environ.get("USER", "root"), PYTHONUNBUFFERED="1")
    cold_s, rc, lines = stamped(["bash", "tools/quickstart.sh"], clone, clone / "quickstart-cold.log", env)
    if rc != 0:
        raise SystemExit(f"cold quickstart failed ({rc}); log {clone / 'quickstart-cold.log'}:\n"
                         + "\n".join(l for _, l in lines[-40:]))
    phases = {"install_s": first(lines, r"install: \.venv (ready|is up to date)"),
              "sweep_done_s": first(lines, r"scalesweep: sweep complete|Nothing to be done|steps \(100%\) done"),
              "total_s": round(cold_s, 2)}
    jobs = sum(1 for _, l in lines if re.search(r"^\s*rule \w+:|^(local)?rule \w+:", l))
    warm_s, rc2, lines2 = stamped(["bash", "tools/quickstart.sh"], clone, clone / "quickstart-warm.log", env)
    if rc2 != 0:
        raise SystemExit(f"warm quickstart failed ({rc2})")
    warm_says = [l for _, l in lines2 if "Nothing to be done" in l or "up to date" in l]
    figures = {"clone_s": round(clone_s, 2), "commit": commit, "cold": phases, "cold_jobs": jobs,
               "warm_s": round(warm_s, 2), "warm_messages": warm_says,
               "caches_before": warm_caches, "clone": str(clone)}
    if args.image_cold:
        figures["image_build_cold"] = image_cold(clone)
    human = (f"fresh clone -> report.html cold {cold_s / 60:.1f} min (install {phases['install_s']} s), "
             f"warm {warm_s:.1f} s; caches warm: {', '.join(warm_caches['wheels']) or 'none'}, "
             f"{warm_caches['images']} image entries")
    if args.image_cold:
        human += f"; image build cold {figures['image_build_cold']['wall_s']:.0f} s"
    return figures, human


def image_cold(clone: Path) -> dict:
    cache = Path(tempfile.mkdtemp(prefix="scalesweep-cache-"))
    (cache / "wheels").mkdir()
    for whl in (CACHE / "wheels").glob("*.whl"):
        shutil.copy2(whl, cache / "wheels" / whl.name)
    out = Path(tempfile.mkdtemp(prefix="scalesweep-image-"))
    argv = [str(clone / ".venv" / "bin" / "python"), "-m", "scalesweep", "build-image",
            "--builder", "charliecloud", "--recipe", "containers/charliecloud/Dockerfile",
            "--requirements", "envs/payload-requirements.txt", "--out", str(out / "default"),
            "--manifest", str(out / "default.manifest.json"), "--cache-dir", str(cache)]
    env = dict(os.environ, USER=os.environ.get("USER", "root"))
    wall, rc, lines = stamped(argv, clone, out / "build.log", env)
    result = {"wall_s": round(wall, 1), "rc": rc, "cache_dir": str(cache),
              "note": "empty cache dir except the compiled llama.cpp wheel"}
    manifest = out / "default.manifest.json"
    if manifest.is_file():
        m = json.loads(manifest.read_text())
        result.update({k: m.get(k) for k in ("size_bytes", "build_seconds", "content_digest") if k in m})
    shutil.rmtree(out, ignore_errors=True)
    shutil.rmtree(cache, ignore_errors=True)
    return result


def smoke() -> tuple[dict, str]:
    wd = Path(tempfile.mkdtemp(prefix="scalesweep-e2e-"))
    cfg = {
        "site": "local",  # sites/local.yaml: 2 cores, no GPU, mpirun
        "sweep": {"runtimes": ["native"], "nodes": [1], "ranks_per_node": [1],
                  "threads_per_rank": [1], "repeats": 1, "baseline": 1},
        "datasets": {"tiny": {"source": "synthetic", "classes": ["a", "b"],
                              "images_per_class": 8, "image_size": 64}},
        "workloads": {"cnn_ddp": {"payload": "cnn", "parallel": "ddp", "dataset": "tiny",
                                  "epochs": 1, "batch_size": 16}},
        # the workflow's steps are timed, not the run: a run disturbed by what else runs
        # (the test suite's workers) must not add replacement blocks up to max_repeats
        "measurement": {"max_outside_cpu_pct": 100, "max_stolen_cpu_pct": 100},
    }
    (wd / "config").mkdir()
    (wd / "config" / "config.yaml").write_text(yaml.safe_dump(cfg))
    base = [SNAKEMAKE, "-s", str(REPO / "Snakefile"), "--directory", str(wd),
            "--profile", str(REPO / "profiles" / "local")]

    def snakemake(*extra: str) -> None:
        proc = subprocess.run(base + list(extra), cwd=wd, env=snakemake_env(),
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"snakemake {' '.join(extra)} failed:\n{proc.stderr[-4000:]}")

    def quickstart() -> float:
        """tools/quickstart.sh's sweep step, as far as the summary."""
        t0 = time.perf_counter()
        snakemake("summary")
        return time.perf_counter() - t0
    cold, warm = quickstart(), quickstart()
    shutil.rmtree(wd, ignore_errors=True)
    return ({"cold_s": round(cold, 2), "warm_s": round(warm, 2), "points": 1},
            f"tiny 1-point campaign: sweep to its summary cold {cold:.1f} s, warm {warm:.1f} s")


def main(argv: list[str] | None = None) -> dict:
    mode, rest = mode_of(argv)
    ap = argparse.ArgumentParser()
    ap.add_argument("--clone", default="/tmp/bench-clone")
    ap.add_argument("--image-cold", action="store_true")
    args = ap.parse_args(rest)
    load0 = loadavg()
    figures, human = full(args) if mode == "full" else smoke()
    return report("end_to_end", mode, figures, human, load0)


if __name__ == "__main__":
    main()
