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
