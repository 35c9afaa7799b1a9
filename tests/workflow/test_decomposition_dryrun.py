"""The decomposition's outputs are planned: a dry run of native vs Charliecloud (the
scenario .test/config-two-runtimes.yaml) makes decomposition.csv, differences.csv, the
figure and their pages from runs.csv and every run's metrics, found through runs.csv
(rule report_decomposition)."""

from __future__ import annotations

import re

from conftest import REPO, run_snakemake


def test_report_decomposition_is_planned(tmp_path):
    (tmp_path / "config").symlink_to(REPO / "config")
    proc = run_snakemake(tmp_path, "-n", "--configfile",
                         str(REPO / ".test" / "config-two-runtimes.yaml"), timeout=300)
    out = proc.stdout
    job = re.search(r"^(?:local)?rule report_decomposition:\n(.*?)\n\n", out, re.M | re.S)
    assert job, out[-3000:]
    text = job[1]
    for path in ("results/summary/decomposition.csv", "results/summary/differences.csv",
                 "results/plots/decomposition.png"):
        assert path in text, text
    # every run's metrics through runs.csv's paths (analyse.collect.summarised_metrics),
    # not 10,000 inputs of their own (issue #31: planning)
    assert "results/summary/runs.csv" in text and "metrics.json" not in text, text
    # the tables' pages, and the summary's first screen, are made from them
    pages = re.search(r"^(?:local)?rule report_pages:\n(.*?)\n\n", out, re.M | re.S)
    assert pages and "results/summary/decomposition.csv" in pages[1], out[-3000:]
    assert "results/summary/differences.html" in pages[1]
