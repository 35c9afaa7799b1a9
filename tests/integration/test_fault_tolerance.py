"""Failures come in pieces: a killed point fails alone, a re-run redoes only it, and
nothing measured is ever lost or rewritten."""

import json
import os
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
import yaml

from conftest import (REPO, SNAKEMAKE, have, measured_by, payload_pids, run_files_digest,
                      run_snakemake, tiny_config, write_site)

pytestmark = pytest.mark.integration
PROFILE = str(REPO / "profiles" / "local")


def _kill_when_training(log: Path, marker: str, killed: list, deadline: float) -> None:
    while time.time() < deadline:
        if log.is_file() and "epoch 1/" in log.read_text(errors="replace"):
            for pid in payload_pids(marker):
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            return
        time.sleep(0.2)


@pytest.mark.skipif(not have("mpirun"), reason="mpirun not installed")
def test_sigkill_mid_run_fails_one_point_and_rerun_redoes_only_it(campaign):
    cfg = tiny_config()
    cfg["sweep"]["repeats"] = 1
    # 16 per class (24 training images: a 12-image step per rank and epoch at 2 ranks) and
    # 4 epochs: the target trains on for seconds after "epoch 1/", wide for the 0.2 s watcher
    cfg["datasets"]["tiny"]["images_per_class"] = 16
    cfg["workloads"]["cnn_ddp"]["epochs"] = 4
    wd = campaign(cfg)
    target = "cnn_ddp/native/n1-g0-r2-t1/rep1/native"
    killed: list = []
    watcher = threading.Thread(
        target=_kill_when_training,
        args=(wd / "results/runs" / target / "run.log", f"{wd}/results/runs/{target}/", killed,
              time.time() + 600),
        daemon=True,
    )
    watcher.start()
    first = run_snakemake(wd, "--profile", PROFILE, "summary", check=False)
    watcher.join(timeout=5)
    assert killed, "the watcher never saw the target point training"
    assert first.returncode != 0

    other = wd / "results/runs/cnn_ddp/native/n1-g0-r1-t1/rep1/native/metrics.json"
    assert other.is_file(), "the independent point must finish despite the failure"
    failed_dir = wd / "results/runs" / target
    assert not (failed_dir / "metrics.json").exists()
    failure = json.loads((failed_dir / "failure.json").read_text())
    assert failure["state"] == "failed" and failure["exit_code"] != 0
    assert failure["log"] == f"results/runs/{target}/run.1.log"  # the attempt's own log
    assert "mpirun" in (wd / failure["log"]).read_text()

    status = subprocess.run([str(Path(SNAKEMAKE).parent / "scalesweep"), "status", "-d", str(wd),
                             "--json"], capture_output=True, text=True, check=True)
    states = {p["path"]: p["state"] for p in json.loads(status.stdout)["points"]}
    assert states == {target: "failed", "cnn_ddp/native/n1-g0-r1-t1/rep1/native": "done"}

    before = other.read_bytes()
    # up to the summary table (the report after a re-run: tests/test_report.py)
    second = run_snakemake(wd, "--profile", PROFILE, "results/summary/runs.csv")
    assert "Finished" in second.stdout + second.stderr
    assert measured_by(second.stdout + second.stderr) == [target]  # only the failed point
    assert other.read_bytes() == before, "a finished measurement was rewritten"
    assert (failed_dir / "metrics.json").is_file()
    assert not (failed_dir / "failure.json").exists()
    attempts = [json.loads(line) for line in (failed_dir / "attempts.jsonl").read_text().splitlines()]
    assert [a["state"] for a in attempts] == ["failed", "done"]


def test_adding_a_repeat_runs_only_the_new_points(small_finished, tmp_path):
    """A copy of conftest's finished campaign (1 repeat), 1 rank of it asked for twice."""
    wd = tmp_path / "campaign"
    shutil.copytree(small_finished, wd, symlinks=True)
    first = (wd / "results/runs/cnn_ddp/native/n1-g0-r1-t1/rep1/native/metrics.json").read_bytes()
    out = run_snakemake(wd, "--profile", PROFILE, "--config",
                        "sweep={ranks_per_node: [1], repeats: 2}", "-n").stdout
    assert out.count("rule run_point:") == 1
    assert "cnn_ddp/native/n1-g0-r1-t1/rep2/native/metrics.json" in out
    assert (wd / "results/runs/cnn_ddp/native/n1-g0-r1-t1/rep1/native/metrics.json").read_bytes() == first


def test_code_change_does_not_rerun_finished_measurements(small_finished, tmp_path):
    """rerun-triggers: [input] in profiles/default: parameter edits never redo a measurement
    (on a copy of conftest's finished campaign)."""
    wd = tmp_path / "campaign"
    shutil.copytree(small_finished, wd, symlinks=True)
    cfg = yaml.safe_load((wd / "config" / "config.yaml").read_text())
    assert cfg["workloads"]["cnn_ddp"]["batch_size"] != 8
    cfg["workloads"]["cnn_ddp"]["batch_size"] = 8  # changes the rule's params
    (wd / "config" / "config.yaml").write_text(yaml.safe_dump(cfg))
    out = run_snakemake(wd, "--profile", PROFILE, "-n").stdout
    assert "rule run_point:" not in out
    # re-verifying the dataset (or rebuilding the image) does not redo measurements either
    out = run_snakemake(wd, "--profile", PROFILE, "-n", "--forcerun", "verify_dataset").stdout
    assert "rule verify_dataset:" in out and "rule run_point:" not in out


def test_corrupted_dataset_stops_before_any_point_runs(campaign):
    cfg = tiny_config()
    cfg["sweep"].update(ranks_per_node=[1], repeats=1)
    wd = campaign(cfg)
    run_snakemake(wd, "--profile", PROFILE, "--until", "stage_dataset")
    victim = sorted((wd / "resources/datasets/tiny/a").iterdir())[0]
    victim.write_bytes(b"not a png")
    proc = run_snakemake(wd, "--profile", PROFILE, "summary", check=False)
    assert proc.returncode != 0
    log = (wd / "logs/datasets/tiny.verify.log").read_text()
    assert "checksum mismatch" in log and victim.name in log
    assert "--forcerun resources/datasets/tiny" in log  # how to restage
    assert not list((wd / "results").rglob("metrics.json"))


def test_a_dataset_changed_after_staging_fails_its_point_and_a_restage_redoes_only_it(
        small_finished, tmp_path):
    """Issue #26 case 3: the verify rule (above) checks the staged copy once; each point's
    harness checks it again before anything runs (scalesweep.record.dataset.check_staged), also
    where points read a node-local copy. Another valid image in a staged image's place
    fails the point still to measure, naming the file, with nothing measured; restaging
    (`--forcerun resources/datasets/tiny`, not deleting it: Snakemake would then measure
    every finished point again) and the next run measure exactly that point."""
    wd = tmp_path / "campaign"
    shutil.copytree(small_finished, wd, symlinks=True)
    shutil.rmtree(wd / ".snakemake" / "log", ignore_errors=True)
    one = "cnn_ddp/native/n1-g0-r1-t1/rep1/native"
    point = wd / "results/runs" / one
    shutil.rmtree(point)  # still to measure
    before = run_files_digest(wd)
    victim, other = sorted((wd / "resources/datasets/tiny/a").iterdir())[:2]
    victim.write_bytes(other.read_bytes())
    nvme = tmp_path / "nvme"
    site = write_site(tmp_path, "nvme", storage={"node_local_path": str(nvme)})
    for node_local in ([], ["--config", "datasets={tiny: {node_local: true}}", f"site={site}"]):
        proc = run_snakemake(wd, "--profile", PROFILE, "--until", "run_point", *node_local,
                             check=False)
        assert proc.returncode != 0
        failure = json.loads((point / "failure.json").read_text())
        assert failure["exit_code"] == 65, failure
        reason = failure["reason"]
        assert f"a/{victim.name}" in reason and "nothing was measured" in reason
        assert "--forcerun resources/datasets/tiny" in reason
        assert not (point / "metrics.json").exists()
        assert not any("epoch 1/" in log.read_text() for log in point.glob("*.log"))  # no training
        assert run_files_digest(wd, skip=[one]) == before
    assert not nvme.exists()  # never copied to node-local storage either

    run_snakemake(wd, "--profile", PROFILE, "--forcerun", "resources/datasets/tiny")
    assert run_files_digest(wd, skip=[one]) == before and not (point / "metrics.json").exists()
    rerun = run_snakemake(wd, "--profile", PROFILE, "--until", "run_point")
    assert measured_by(rerun.stdout + rerun.stderr) == [one]
    assert (point / "metrics.json").is_file()
    assert run_files_digest(wd, skip=[one]) == before


def test_partial_aggregation_leaves_out_series_without_baseline_or_native(campaign):
    """A partial sweep (baseline or native twin missing) still aggregates; the gaps are
    named in the log and listed in points.csv, not papered over."""
    from scalesweep.record.metrics import write_metrics
    from scalesweep.plan.sweep import SweepPoint

    cfg = tiny_config()
    cfg["sweep"].update(runtimes=["native", "charliecloud"], repeats=1)
    wd = campaign(cfg)

    def fake(runtime, ranks):  # native is measured in charliecloud's blocks (its arm)
        p = SweepPoint("cnn_ddp", runtime, 1, 0, ranks, 1, 1, "charliecloud")
        write_metrics(wd / "results/runs" / p.path / "metrics.json", {
            "point": p.as_dict(), "epoch_s": [2.0, 1.0], "train_s": 3.0, "images_per_s": 10.0,
            "final_loss": 0.5, "final_accuracy": 0.8, "hosts": ["h"], "peak_rss_mb": 100.0})

    fake("native", 2)  # native lacks its 1-rank baseline
    fake("charliecloud", 1)  # no native twin at 1 rank
    out = run_snakemake(wd, "results/summary/scaling.csv", "--cores", "1",
                        "--config", "analysis={partial: true}")
    assert out.returncode == 0
    log = (wd / "logs/aggregate.log").read_text()
    assert "no finished run of its baseline count 1; left out" in log
    assert "has no finished native run; left out" in log
    import pandas as pd
    points = pd.read_csv(wd / "results/summary/points.csv")
    assert sorted(points["state"]) == ["done", "done", "missing", "missing"]
    scaling = pd.read_csv(wd / "results/summary/scaling.csv")
    assert set(scaling["runtime"]) == {"charliecloud"}
