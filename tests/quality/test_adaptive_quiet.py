"""Adaptive repeats on the real workflow, with the default interference thresholds: nothing
may run beside it (the rest: tests/unit/test_adaptive.py, whose helpers it uses)."""

import json
import re

import pytest

from conftest import have, run_snakemake
from scalesweep.analyse.timeline import overlaps, parse_snakemake_log
from test_adaptive import _config


@pytest.mark.integration
@pytest.mark.quiet  # default interference thresholds: other work would add repeats
def test_adaptive_interleaved_isolated_campaign(campaign):
    """A/A (native vs native-aa) on the real workflow, plain `--cores 2`: blocks ABBA,
    decisions after every block from the third, nothing beside any measurement."""
    if not have("mpirun"):
        pytest.skip("mpirun not installed")
    cfg = _config(runtimes=("native",), aa_calibration=True, max_repeats=4,
                  target_ci_pp=0.001)  # unreachable: the series must go to the maximum
    cfg["sweep"]["ranks_per_node"] = [1]
    cfg["workloads"]["cnn_ddp"]["epochs"] = 1  # the order is tested, not the training
    wd = campaign(cfg)
    run_snakemake(wd, "--cores", "2", "results/summary/runs.csv")
    log = sorted((wd / ".snakemake" / "log").glob("*.snakemake.log"))[-1]
    jobs = parse_snakemake_log(log)
    assert overlaps(jobs) == []
    runs = [j for j in sorted(jobs, key=lambda j: (j.start, j.jobid)) if j.rule == "run_point"]
    seq = [re.search(r"runtime=([\w-]+)", j.wildcards)[1] for j in runs]
    assert seq == ["native", "native-aa", "native-aa", "native",
                   "native", "native-aa", "native-aa", "native"]
    series = wd / "results/decisions/cnn_ddp/native-aa/n1-g0-r1-t1"  # the A/A arm
    assert json.loads((series / "after3.json").read_text())["more"] is True
    assert not (series / "after4.json").exists()  # the maximum: no decision needed
    final = json.loads((series / "final.json").read_text())
    assert final["repeats"] == final["blocks"] == 4 and len(final["metrics"]) == 8
    assert final["warmup_blocks"] == 0  # this config measures none
    # every run records its place in its block
    m = json.loads((wd / "results/runs/cnn_ddp/native-aa/n1-g0-r1-t1/rep2/native-aa/metrics.json").read_text())
    if "order" in m:
        assert m["order"]["position"] == 0 and m["order"]["sequence"] == ["native-aa", "native"]
    # re-running finds nothing to do: the decisions are kept
    again = run_snakemake(wd, "--cores", "2", "-n", "results/summary/runs.csv")
    assert "Nothing to be done" in again.stdout + again.stderr
    # nor does a summary of part of it or of what exists (docs/configuration.md: a
    # --config that selects the same finished points re-makes nothing)
    for extra in ("analysis={partial: true}", "only={runtimes: [native]}"):
        again = run_snakemake(wd, "--cores", "2", "-n", "results/summary/runs.csv",
                              "--config", extra)
        assert "Nothing to be done" in again.stdout + again.stderr, extra
