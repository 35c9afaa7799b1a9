"""``scalesweep compare`` on two real tiny campaigns: timings compared across campaigns,
nothing may run beside them (the synthetic ones: tests/unit/test_compare.py)."""

from __future__ import annotations

import io
from pathlib import Path

import pandas as pd
import pytest
import yaml

from conftest import REPO, run_snakemake, tiny_config
from test_compare import scalesweep


def real_campaign(root: Path, name: str, images_per_class: int) -> Path:
    """The tiny workflow for real: 1 rank, 3 repeats, 2 epochs of synthetic 64x64 images
    (the time is epoch 2's, the one after the warm-up epoch). images_per_class changes the
    work per epoch (the time) but not the point paths."""
    config = tiny_config()
    config["sweep"].update(ranks_per_node=[1], repeats=3)
    config["workloads"]["cnn_ddp"]["epochs"] = 2
    config["datasets"]["tiny"]["images_per_class"] = images_per_class
    wd = root / name
    (wd / "config").mkdir(parents=True)
    (wd / "config" / "config.yaml").write_text(yaml.safe_dump(config))
    run_snakemake(wd, "--profile", str(REPO / "profiles" / "local"),
                  "results/summary/runs.csv", timeout=1800)
    return wd


@pytest.mark.integration
@pytest.mark.quiet  # timings compared across campaigns: nothing may run beside them
def test_real_slowdown_is_flagged_and_a_rerun_is_not(tmp_path):
    # 8 per class: 12 training images (4 held out), 1 step of 12 per epoch
    a = real_campaign(tmp_path, "a", images_per_class=8)
    rerun = real_campaign(tmp_path, "rerun", images_per_class=8)
    # 32 per class: 50 training images, 3 steps of 16 (48 images) per epoch: 4x the work
    slower = real_campaign(tmp_path, "slower", images_per_class=32)
    # 50%: on a shared 2-core machine an unchanged campaign run minutes later has come out
    # 20% faster, significantly (the load moved); 4x the images per epoch is +200-300%
    flagged = scalesweep("compare", a, slower, "--threshold", "50", "--fail-on-regression")
    print(flagged.stdout, flagged.stderr)
    assert flagged.returncode == 1, flagged.stderr
    row = pd.read_csv(io.StringIO(flagged.stdout)).iloc[0]
    assert row["verdict"] == "regression" and row["change_pct"] > 100
    assert (row["n_a"], row["n_b"]) == (3, 3)
    same = scalesweep("compare", a, rerun, "--threshold", "50", "--fail-on-regression")
    print(same.stdout, same.stderr)
    assert same.returncode == 0, same.stdout + same.stderr
    assert pd.read_csv(io.StringIO(same.stdout))["verdict"].iloc[0] != "regression"
