"""Issue #40, cases 6 and 7, with real runs and files: a run directory copied from a
campaign of another config is named by `scalesweep status` and the aggregation and left
out of every statistic (never pooled), with the command that measures it again; a
dataset's source changed on a staged campaign (another image directory, or one that does
not exist) is refused before any job, naming both, unless it is staged anew on request.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
import yaml

from conftest import REPO, config_text, run_snakemake, scalesweep_cli, tiny_config
from scalesweep.record.failures import read_attempts

PROFILE = str(REPO / "profiles" / "local")
R1 = "cnn_ddp/native/n1-g0-r1-t1/rep1/native"
R2 = "cnn_ddp/native/n1-g0-r2-t1/rep1/native"

pytestmark = pytest.mark.integration


def _config(wd: Path) -> dict:
    return yaml.safe_load((wd / "config" / "config.yaml").read_text())


def test_a_run_copied_from_a_campaign_of_another_config_is_named_and_left_out(
        small_finished, tmp_path):
    here, other = tmp_path / "here", tmp_path / "other"
    shutil.copytree(small_finished, here, symlinks=True)  # epochs: 1
    shutil.copytree(small_finished, other, symlinks=True)
    cfg = _config(other)
    cfg["workloads"]["cnn_ddp"]["epochs"] = 2
    (other / "config" / "config.yaml").write_text(yaml.safe_dump(cfg))
    shutil.rmtree(other / "results" / "runs" / R1)
    run_snakemake(other, "--profile", PROFILE, f"results/runs/{R1}/metrics.json")
    theirs = json.loads((other / "results" / "runs" / R1 / "metrics.json").read_text())
    ours = json.loads((here / "results" / "runs" / R2 / "metrics.json").read_text())
    assert theirs["identity"]["measured"]["workloads.cnn_ddp"]["epochs"] == 2
    assert ours["identity"]["measured"]["workloads.cnn_ddp"]["epochs"] == 1
    assert theirs["identity"]["config_digest"] != ours["identity"]["config_digest"]
    staged = here / "resources" / "datasets" / "tiny"
    digest = hashlib.sha256((staged / "MANIFEST.sha256").read_bytes()).hexdigest()
    assert theirs["identity"]["dataset_source"]["manifest_sha256"] == digest  # in each run

    # the other campaign's run directory copied over this campaign's run of that point
    shutil.rmtree(here / "results" / "runs" / R1)
    shutil.copytree(other / "results" / "runs" / R1, here / "results" / "runs" / R1)
    status = scalesweep_cli("status", "-d", here, "--profile", PROFILE)
    assert status.returncode == 0, status.stderr
    out = status.stdout
    assert "2 requested points: 1 done, 0 disturbed, 1 foreign" in out
    why = (f"{R1}: foreign run: measured under another config (campaign {other}): "
           "workloads.cnn_ddp.epochs 2 (this config: 1)")
    assert why in out
    assert "1 foreign run(s) left out of the statistics" in out
    assert f"scalesweep rerun --foreign -d {here} --profile {PROFILE}" in out

    # the aggregation: kept in runs.csv and marked, named in points.csv and its log, and
    # in no statistic (the 1-rank baseline has no run left: scaling says so, n 0)
    shutil.rmtree(here / "results" / "summary")
    run_snakemake(here, "--profile", PROFILE, "results/summary/runs.csv")
    runs = pd.read_csv(here / "results" / "summary" / "runs.csv")
    mine = runs.set_index(runs["path"].str.extract(r"runs/(.*)/metrics.json")[0])
    assert bool(mine.at[R1, "foreign"]) and bool(mine.at[R1, "disturbed"])
    assert mine.at[R1, "disturbed_reason"].startswith("foreign run: measured under another")
    assert not bool(mine.at[R2, "foreign"]) and not bool(mine.at[R2, "disturbed"])
    assert mine.at[R1, "config_digest"] == theirs["identity"]["config_digest"]
    points = pd.read_csv(here / "results" / "summary" / "points.csv").set_index("path")
    assert points.at[R1, "state"] == "foreign" and points.at[R2, "state"] == "done"
    assert "workloads.cnn_ddp.epochs 2 (this config: 1)" in points.at[R1, "reason"]
    scaling = pd.read_csv(here / "results" / "summary" / "scaling.csv")
    assert scaling.loc[scaling["count"] == 1, "n"].tolist() == [0]
    assert f"{R1}/metrics.json: foreign run" in (here / "logs" / "aggregate.log").read_text()
    record = json.loads((here / "results" / "summary" / "campaign.json").read_text())
    assert record["foreign"] == 1
    assert record["datasets"]["tiny"]["manifest_sha256"] == digest
    assert record["datasets"]["tiny"]["source"] == "synthetic"

    # the command status gives measures exactly it again
    plan = scalesweep_cli("rerun", "--foreign", "-n", "-d", here, "--profile", PROFILE)
    assert plan.returncode == 0, plan.stderr
    assert R1 in plan.stdout and R2 not in plan.stdout


def _images(root: Path, seed: int) -> Path:
    from PIL import Image

    for k, cls in enumerate(("a", "b")):
        (root / cls).mkdir(parents=True)
        for i in range(8):
            Image.new("RGB", (64, 64), ((seed * 40 + k * 90 + i) % 256, 80, 160)).save(
                root / cls / f"{i}.png")
    return root


def test_a_changed_dataset_path_is_refused_before_any_job_or_staged_anew(tmp_path):
    first, second = _images(tmp_path / "photos-a", 1), _images(tmp_path / "photos-b", 2)
    wd = tmp_path / "campaign"
    cfg = tiny_config()
    cfg["datasets"]["tiny"] = {"source": "image-folder", "path": str(first),
                               "classes": ["a", "b"], "images_per_class": 8,
                               "image_size": 64}
    (wd / "config").mkdir(parents=True)
    (wd / "config" / "config.yaml").write_text(config_text(cfg))
    run_snakemake(wd, "--cores", "1", "resources/datasets/tiny")  # staged from photos-a
    staged = wd / "resources" / "datasets" / "tiny"
    info = json.loads((staged / "dataset.json").read_text())
    assert info["staged_from"]["path"] == str(first)
    before = (staged / "MANIFEST.sha256").read_bytes()

    for path, gone in ((second, ""), (tmp_path / "nowhere", " does not exist")):
        cfg["datasets"]["tiny"]["path"] = str(path)
        (wd / "config" / "config.yaml").write_text(config_text(cfg))
        proc = run_snakemake(wd, "--profile", PROFILE, "-n", check=False)
        said = proc.stdout + proc.stderr
        assert proc.returncode != 0
        assert ("config key datasets.tiny: resources/datasets/tiny was staged from another "
                f"source (manifest sha256 {hashlib.sha256(before).hexdigest()[:16]}...): path "
                f"'{first}' (staged) but '{path}' in this config") in said
        assert gone in said
        assert "--forcerun resources/datasets/tiny --config restage='[tiny]'" in said
        assert not (wd / "results" / "runs").exists()  # no job ran
        assert (staged / "MANIFEST.sha256").read_bytes() == before
        status = scalesweep_cli("status", "-d", wd)
        assert status.returncode != 0 and f"but '{path}' in this config" in status.stderr

    # restage named without its --forcerun: nothing is staged anew, and each point refuses
    # to run on the old data, an attempt of its own failed with the reason (exit 65)
    cfg["datasets"]["tiny"]["path"] = str(second)
    (wd / "config" / "config.yaml").write_text(config_text(cfg))
    proc = run_snakemake(wd, "--profile", PROFILE, "--until", "run_point", "--config",
                         "restage=[tiny]", check=False)
    assert proc.returncode != 0
    assert (staged / "MANIFEST.sha256").read_bytes() == before
    for point in (R1, R2):
        d = wd / "results" / "runs" / point
        (attempt,) = read_attempts(d)
        assert attempt["state"] == "failed" and attempt["exit_code"] == 65, attempt
        assert attempt["reason"].startswith("not run: ") and "add the --forcerun" in \
            attempt["reason"], attempt
        assert f"{point}: not run: " in proc.stdout + proc.stderr
        assert not (d / "metrics.json").exists()
        assert not any("epoch 1/" in log.read_text() for log in d.glob("*.log"))  # no training
    shutil.rmtree(wd / "results")

    # asked for: staged anew from photos-b, and the config is accepted again
    cfg["datasets"]["tiny"]["path"] = str(second)
    (wd / "config" / "config.yaml").write_text(config_text(cfg))
    run_snakemake(wd, "--cores", "1", "resources/datasets/tiny", "--forcerun",
                  "resources/datasets/tiny", "--config", "restage=[tiny]")
    assert json.loads((staged / "dataset.json").read_text())["staged_from"]["path"] == str(second)
    assert (staged / "MANIFEST.sha256").read_bytes() != before
    run_snakemake(wd, "--profile", PROFILE, "-n")
