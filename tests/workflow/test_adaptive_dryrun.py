"""Adaptive repeats in a dry run: the cores a measurement gets without a profile (the rest:
tests/unit/test_adaptive.py, whose helpers it uses)."""

import os
import re

from conftest import run_snakemake
from test_adaptive import _config


def test_every_local_core_goes_to_a_measurement_without_any_profile(campaign):
    wd = campaign(_config(runtimes=("native",)))
    out = run_snakemake(wd, "-n", "--cores", "all", "results/summary/runs.csv").stdout
    blocks = out.split("rule run_point:")[1:]
    assert blocks
    for block in blocks:
        assert re.search(r"^\s+threads: (\d+)$", block, re.M)[1] == str(os.cpu_count())


def test_a_dry_run_lists_the_warm_up_block_before_sweep_repeats(campaign):
    """measurement.warmup_blocks: 1 measures rep1 as warm-up, then sweep.repeats (3)
    blocks before the first decision; 0: the three blocks alone, as before."""
    for warmup, blocks in ((1, {1, 2, 3, 4}), (0, {1, 2, 3})):
        wd = campaign(_config(runtimes=("native",), warmup_blocks=warmup))
        out = run_snakemake(wd, "-n", "--cores", "1", "results/summary/runs.csv").stdout
        reps = re.findall(r"results/runs/cnn_ddp/native/n1-g0-r(\d)-t1/rep(\d+)/native/metrics\.json",
                          out)
        assert {int(k) for _, k in reps} == blocks, out[-2000:]
        assert {r for r, _ in reps} == {"1", "2"}
