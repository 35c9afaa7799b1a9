"""Smoke runs of the benchmarks (benchmarks/*.py --smoke): each runs and prints its figure.

No timing is asserted: the figures are published in BENCHMARKS.md from --full runs; here
only that every benchmark still works against the current workflow and prints one line of
JSON with its figure and one human line.
"""

import json
import os
import shutil
import subprocess
import sys

import pytest

from conftest import REPO

BENCH = REPO / "benchmarks"


@pytest.fixture(scope="module")
def bench_env(tmp_path_factory):
    """The environment of the benchmark processes.

    snakemake-executor-plugin-slurm 2.8.0 runs `scontrol show config` (10 s timeout) when
    Snakemake loads its plugins, at the start of every snakemake command. Where Slurm's
    client is configured for a controller that is down (this machine's local test cluster
    when it is stopped) that costs 9 s per command, ~90 s for these smoke runs, none of
    which uses Slurm. Then an `scontrol` that fails at once goes first on their PATH.
    """
    env = dict(os.environ)
    if shutil.which("scontrol"):
        try:
            # what the plugin runs (`scontrol ping` fails at once where this one waits)
            subprocess.run(["scontrol", "show", "config"], capture_output=True, timeout=3)
        except subprocess.TimeoutExpired:
            shim = tmp_path_factory.mktemp("no-slurmctld")
            (shim / "scontrol").write_text("#!/bin/sh\nexit 1\n")
            (shim / "scontrol").chmod(0o755)
            env["PATH"] = f"{shim}{os.pathsep}{env['PATH']}"
    return env


def run_bench(env: dict, name: str, *args: str, timeout: int = 300) -> dict:
    proc = subprocess.run([sys.executable, str(BENCH / f"{name}.py"), "--smoke", *args],
                          cwd=REPO, capture_output=True, text=True, timeout=timeout, env=env)
    assert proc.returncode == 0, f"{name} --smoke failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    lines = proc.stdout.strip().splitlines()
    result = json.loads(lines[-2])
    assert result["benchmark"] == name and result["mode"] == "smoke"
    assert lines[-1].startswith(f"{name} (smoke): ")
    assert result["load_before"] and result["date"] and result["machine"]["cores"]
    return result


def test_planning_smoke(bench_env):
    r = run_bench(bench_env, "planning", "--ablation")
    assert r["points"] == 48
    assert r["jobs_scalesweep"] == r["jobs_bare"] > r["points"]
    assert r["ratio_median"] > 0 and r["ratio_cpu_same_options"] > 0
    # every side plans the same jobs: the Frontier profile's dry run and the ablation's
    # (each feature's own ablation side is --full's; the smoke plans them all at once)
    sides = {"bare_functions", "bare_workflow_profile", "scalesweep_frontier_profile",
             "bare+all"}
    assert sides <= set(r["sides"])
    assert {r["sides"][s]["jobs"] for s in sides} == {r["jobs_bare"]}


def test_aggregation_smoke(bench_env):
    r = run_bench(bench_env, "aggregation")
    assert r["runs"] == r["runs_read"] == r["points_done"] == 1000
    assert r["scaling_rows"] > 0 and r["overhead_rows"] > 0
    assert r["tables_and_figures_s"] > 0 and r["peak_rss_mib"] > 0


def test_benchmark_configs_validate():
    """The configs the benchmarks and BENCHMARKS.md use pass the workflow's own checks."""
    sys.path.insert(0, str(BENCH))
    from aggregation import sweep_config as aggregation_config
    from planning import SIZES, sweep_config as planning_config

    from scalesweep.plan.config import check_config

    from scalesweep.plan.config_read import load_config
    from scalesweep.plan.sweep import sweep_points

    planned = planning_config(**SIZES["full"])
    check_config(planned)  # and its site loaded, which the sweep's expansion reads
    # Frontier's node shape, without scheduler (compared with the bare Snakefile)
    assert planned["_site"]["name"] == "planning" and planned["_site"]["node"]["gpus"] == 8
    assert planned["_site"]["scheduler"] == "none"
    from planning import SLURM_SITE
    from scalesweep.platform.site import load_site
    assert load_site(SLURM_SITE, base=REPO)["scheduler"] == "slurm"
    assert len(sweep_points(planned)) == 9600
    full = aggregation_config(100_000)
    check_config(full)
    assert len(sweep_points(full)) == 100_000
    assert len(sweep_points(load_config([BENCH / "configs" / "gpu-node.yaml"]))) > 0
