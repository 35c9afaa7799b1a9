"""The fits rule of the workflow, run for real on synthetic metrics (the fits themselves:
tests/unit/test_fits.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from conftest import REPO, run_snakemake, tiny_config
from scalesweep.plan.sweep import sweep_points
from scalesweep.record.metrics import write_metrics


def fits_snakefile(tmp_path: Path) -> Path:
    """The repository's Snakefile once it includes fits.smk; until then, a copy that does,
    in a directory of links to the repository (so workflow.basedir finds everything)."""
    text = (REPO / "Snakefile").read_text()
    if "workflow/rules/fits.smk" in text and "rules.fits.output" in text:
        return REPO / "Snakefile"
    shim = tmp_path / "shim"
    shim.mkdir()
    for name in ("workflow", "scripts", "containers", "envs", "profiles", "config"):
        (shim / name).symlink_to(REPO / name)
    text = text.replace('include: "workflow/rules/aggregate.smk"\n',
                        'include: "workflow/rules/aggregate.smk"\n'
                        'include: "workflow/rules/fits.smk"\n')
    (shim / "Snakefile").write_text(text)
    return shim / "Snakefile"


def synthetic_campaign(directory: Path, config: dict, serial_fraction=0.05, seed=0) -> None:
    """Metrics of every point without running anything: Amdahl times, 2% noise."""
    (directory / "config").mkdir(parents=True)
    (directory / "config" / "config.yaml").write_text(yaml.safe_dump(config))
    rng = np.random.default_rng(seed)
    for p in sweep_points(config):
        t = 100 * (serial_fraction + (1 - serial_fraction) / (p.nodes * p.ranks)) \
            * np.exp(rng.normal(0, 0.02))
        write_metrics(directory / "results" / "runs" / p.path / "metrics.json", {
            "point": p.as_dict(), "epoch_s": [1.3 * t, t, t], "train_s": 3.3 * t,
            "images_per_s": 64 / t, "final_loss": 0.5, "final_accuracy": 0.8,
            "harness_wall_s": 3.3 * t + 4, "ranks": p.ranks})


@pytest.mark.integration
def test_fits_rule_fits_and_draws_each_series(tmp_path):
    config = tiny_config()
    config["sweep"].update(nodes=[1, 2, 4, 8], ranks_per_node=[1], repeats=2,
                           runtimes=["native", "charliecloud"])
    wd = tmp_path / "campaign"
    synthetic_campaign(wd, config)
    targets = ["results/summary/fits.csv", "results/plots/fits/cnn_ddp/native.png",
               "results/plots/fits/cnn_ddp/charliecloud.png"]
    run_snakemake(wd, "--cores", "1", *targets, "--config", "analysis={partial: true}",
                  snakefile=fits_snakefile(tmp_path))
    table = pd.read_csv(wd / "results/summary/fits.csv")
    assert len(table) == 4 and set(table["status"]) == {"ok"}
    amdahl = table[table["model"] == "amdahl"]
    assert amdahl["serial_fraction"].between(0.04, 0.06).all()
    predicted = pd.read_csv(wd / "results/summary/fit_predictions.csv")
    assert sorted(set(predicted["count"])) == [16, 32] and predicted["time_s"].notna().all()
    for target in targets[1:]:
        assert (wd / target).stat().st_size > 10_000


@pytest.mark.integration
def test_fits_rule_copes_with_two_counts(tmp_path):
    wd = tmp_path / "campaign"
    synthetic_campaign(wd, tiny_config())  # the embedded default's shape: 1 vs 2 ranks
    run_snakemake(wd, "--cores", "1", "results/summary/fits.csv",
                  "results/plots/fits/cnn_ddp/native.png", "--config",
                  "analysis={partial: true}", snakefile=fits_snakefile(tmp_path))
    table = pd.read_csv(wd / "results/summary/fits.csv")
    assert set(table["status"]) == {"too_few_points"}
    assert table["reason"].str.startswith("too few points to fit: 2 distinct count").all()
    assert (wd / "results/plots/fits/cnn_ddp/native.png").stat().st_size > 10_000
