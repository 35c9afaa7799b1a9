"""The benchmarks that run the real workflow or a real payload, each at its smallest size
(split from tests/workflow/test_benchmarks_smoke.py, whose helpers they use)."""

import shutil
from pathlib import Path

import pytest

from conftest import have
from test_benchmarks_smoke import bench_env, run_bench  # noqa: F401  (fixture)


@pytest.mark.integration
def test_harness_overhead_smoke(bench_env):
    r = run_bench(bench_env, "harness_overhead")
    (kind, v), = r["per_point_kind"].items()
    assert kind == "cnn_ddp/native/1"
    assert v["hand_s"] > 0 and v["job_s"] >= v["harness_wall_s"] >= v["payload_wall_s"] > 0


@pytest.mark.integration
def test_end_to_end_smoke(bench_env):
    r = run_bench(bench_env, "end_to_end")
    assert r["cold_s"] > 0 and r["warm_s"] > 0


@pytest.mark.integration
def test_peer_reframe_smoke(bench_env):
    reframe = shutil.which("reframe") or "/tmp/reframe-venv/bin/reframe"
    if not Path(reframe).exists():
        pytest.skip("reframe-hpc not installed (separate venv: see benchmarks/peer_reframe.py)")
    if not have("mpirun"):
        pytest.skip("mpirun not installed")
    r = run_bench(bench_env, "peer_reframe", "--reframe", reframe)
    assert r["reframe"]["wall_s"] > 0 and r["scalesweep_points"]["wall_s"] > 0
