"""Measuring points again, every documented way, against the real workflow: a deleted
point directory or metrics.json (plain re-run), and `scalesweep rerun` (--where,
--disturbed, --failed, --missing), which keeps the earlier files in the point's history.

Each workflow test copies one finished tiny campaign (two native CNN points, 1 and 2
ranks: conftest's session-wide ``small_finished``), hurts it, runs, and checks from Snakemake's own output that exactly the intended
points ran again and that every other file under results/runs/ is byte-identical
(`scalesweep rerun` measures a chosen run's whole block again: here each block holds
native's run alone).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from conftest import REPO, SNAKEMAKE, measured_by, run_files_digest, run_snakemake, tiny_config
from scalesweep.analyse.collect import readable_runs
from scalesweep.campaign.rerun import move_aside, parse_where, select
from scalesweep.campaign.usage import UsageError

PROFILE = str(REPO / "profiles" / "local")
SCALESWEEP = str(Path(SNAKEMAKE).parent / "scalesweep")
# native's runs (runtimes [native]: native is its own arm, one run per block)
R1 = "cnn_ddp/native/n1-g0-r1-t1/rep1/native"
R2 = "cnn_ddp/native/n1-g0-r2-t1/rep1/native"
# A run that only makes points and runs.csv anew is asked for the summary table only: the
# report after it (~17 s of local jobs) is made after re-runs by tests/test_report.py and
# `scalesweep rerun` here. Not a re-run of deleted points: Snakemake re-makes a missing
# metrics.json only for a target that names it (rule all), not for an existing runs.csv.
SUMMARY = "results/summary/runs.csv"

pytestmark = pytest.mark.integration


def small_config() -> dict:
    config = tiny_config()
    config["workloads"]["cnn_ddp"]["epochs"] = 1
    return config


@pytest.fixture
def finished(small_finished):
    """The session's finished small campaign (conftest): copy it, never change it."""
    return small_finished


@pytest.fixture
def copy(finished, tmp_path):
    workdir = tmp_path / "campaign"
    shutil.copytree(finished, workdir, symlinks=True)
    return workdir


def scalesweep(workdir: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([SCALESWEEP, *args], cwd=workdir, capture_output=True, text=True,
                          timeout=600)
    if check and proc.returncode != 0:
        raise AssertionError(f"scalesweep {' '.join(args)}: {proc.returncode}\n"
                             f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc


def runs_csv(workdir: Path) -> pd.DataFrame:
    return pd.read_csv(workdir / "results" / "summary" / "runs.csv")


# --- plain re-runs ------------------------------------------------------------------------

def test_deleted_point_and_deleted_metrics_are_measured_again_by_snakemake(copy):
    """Snakemake re-makes a missing intermediate file only when a job needing it must run
    anyway; rule all names each run missing from its list of runs (made already), so it
    does: both for a deleted point directory (R2) and for a deleted metrics.json alone
    (R1), in one run."""
    before = run_files_digest(copy, skip=[R1, R2])
    shutil.rmtree(copy / "results" / "runs" / R2)
    (copy / "results" / "runs" / R1 / "metrics.json").unlink()
    status = scalesweep(copy, "status")
    assert "2 missing" in status.stdout and "scalesweep rerun --missing" in status.stdout
    proc = run_snakemake(copy, "--profile", PROFILE, "summary")
    assert measured_by(proc.stdout + proc.stderr) == sorted([R1, R2])
    assert run_files_digest(copy, skip=[R1, R2]) == before
    for point in (R1, R2):
        assert (copy / "results" / "runs" / point / "metrics.json").is_file()
    assert set(runs_csv(copy)["ranks"]) == {1, 2}
    assert "0 missing" in scalesweep(copy, "status").stdout
    # and then nothing is left to do
    again = run_snakemake(copy, "--profile", PROFILE, "-n")
    assert measured_by(again.stdout) == []


def test_deleted_point_is_measured_again_by_rerun_missing(copy):
    before = run_files_digest(copy, skip=[R2])
    target = copy / "results" / "runs" / R2
    shutil.rmtree(target)
    status = scalesweep(copy, "status")
    assert "1 missing" in status.stdout and "scalesweep rerun --missing" in status.stdout
    proc = scalesweep(copy, "rerun", "--missing", "--tables-only", "--profile", PROFILE)
    assert "Measuring 1 point(s) again" in proc.stdout and "Also measured" not in proc.stdout
    assert measured_by(proc.stdout + proc.stderr) == [R2]
    assert run_files_digest(copy, skip=[R2]) == before
    assert (target / "metrics.json").is_file()
    assert set(runs_csv(copy)["ranks"]) == {1, 2}
    assert "0 missing" in scalesweep(copy, "status").stdout
    # and then nothing is left to do
    again = run_snakemake(copy, "--profile", PROFILE, "-n")
    assert measured_by(again.stdout) == []


# --- scalesweep rerun ---------------------------------------------------------------------

def test_rerun_where_keeps_the_earlier_run_and_the_summary_uses_the_new_one(copy):
    old = (copy / "results" / "runs" / R1 / "metrics.json").read_bytes()
    before = run_files_digest(copy, skip=[R1])
    proc = scalesweep(copy, "rerun", "--where", "ranks=1", "--tables-only", "--profile", PROFILE)
    assert "Measuring 1 point(s) again" in proc.stdout and R1 in proc.stdout
    assert measured_by(proc.stdout + proc.stderr) == [R1]
    assert run_files_digest(copy, skip=[R1]) == before
    point = copy / "results" / "runs" / R1
    (kept,) = (point / "history").iterdir()
    assert (kept / "metrics.json").read_bytes() == old  # moved aside, byte for byte
    assert (kept / "run.log").is_file() and (point / "run.log").is_file()
    assert (point / "attempts.jsonl").read_text().count("\n") == 2  # both attempts logged
    new = json.loads((point / "metrics.json").read_text())
    row = runs_csv(copy).query("ranks == 1").iloc[0]
    assert row["path"] == f"results/runs/{R1}/metrics.json"
    assert row["train_s"] == pytest.approx(new["train_s"])
    assert new["train_s"] != json.loads(old)["train_s"]  # a new measurement, not a copy


def test_rerun_disturbed_and_dry_run(copy):
    """A run marked disturbed is chosen by --disturbed; -n prints and changes nothing."""
    metrics = copy / "results" / "runs" / R2 / "metrics.json"
    m = json.loads(metrics.read_text())
    m["disturbed"] = True
    m.setdefault("interference", {})["reasons"] = ["outside CPU 40% > 10% (test)"]
    metrics.write_text(json.dumps(m))
    status = scalesweep(copy, "status")
    assert "1 disturbed" in status.stdout and "scalesweep rerun --disturbed" in status.stdout
    before = run_files_digest(copy)
    dry = scalesweep(copy, "rerun", "--disturbed", "-n")
    assert R2 in dry.stdout and R1 not in dry.stdout
    assert run_files_digest(copy) == before and not (copy / "results/runs" / R2 / "history").exists()
    proc = scalesweep(copy, "rerun", "--disturbed", "--tables-only", "--profile", PROFILE)
    assert measured_by(proc.stdout + proc.stderr) == [R2]
    assert (copy / "results/runs" / R2 / "history").is_dir()
    assert "0 disturbed" in scalesweep(copy, "status").stdout


def test_rerun_refuses_while_a_lock_is_held(copy):
    locks = copy / ".snakemake" / "locks"
    locks.mkdir(parents=True, exist_ok=True)
    (locks / "0.input.lock").write_text("")
    before = run_files_digest(copy)
    proc = scalesweep(copy, "rerun", "--where", "ranks=2", "--profile", PROFILE, check=False)
    assert proc.returncode == 2 and "--unlock" in proc.stderr
    assert run_files_digest(copy) == before


def test_rerun_with_nothing_chosen_or_an_unknown_value(copy):
    proc = scalesweep(copy, "rerun", check=False)
    assert proc.returncode == 2 and "--failed" in proc.stderr
    proc = scalesweep(copy, "rerun", "--where", "runtime=docker", check=False)
    assert proc.returncode == 2 and "runtime=docker" in proc.stderr and "native" in proc.stderr
    proc = scalesweep(copy, "rerun", "--failed")
    assert "Nothing to measure again" in proc.stdout


def test_only_measures_the_selected_runtime_in_its_blocks(copy):
    """`--config only=...`: with an A/A runtime added, native is compared with it in the
    native-aa arm (cnn_ddp/native-aa/<geometry>/rep<k>/{native,native-aa}); selecting
    native-aa measures its blocks whole (native beside it) and nothing else: the native
    arm's earlier runs (no longer in the sweep, one of them deleted) are untouched."""
    shutil.rmtree(copy / "results" / "runs" / R2)
    before = run_files_digest(copy)
    arm = [f"cnn_ddp/native-aa/n1-g0-r{ranks}-t1/rep1/{runtime}"
           for ranks in (1, 2) for runtime in ("native", "native-aa")]
    args = ("--profile", PROFILE, "--config", "sweep={runtimes: [native, native-aa]}")
    bad = run_snakemake(copy, *args, "only={workloads: [cnn]}", check=False)
    assert bad.returncode != 0 and "'cnn' is not a workload" in bad.stdout + bad.stderr
    proc = run_snakemake(copy, SUMMARY, *args, "only={runtimes: [native-aa]}")
    assert measured_by(proc.stdout + proc.stderr) == sorted(arm)
    assert run_files_digest(copy, skip=arm) == before
    assert not (copy / "results" / "runs" / R2).exists()
    runs = runs_csv(copy)
    assert sorted(zip(runs["runtime"], runs["ranks"])) == [
        ("native", 1), ("native", 2), ("native-aa", 1), ("native-aa", 2)]
    assert set(runs["arm"]) == {"native-aa"}


# --- adaptive repeats ---------------------------------------------------------------------

def test_deleted_repeat_of_an_adaptive_series_is_measured_again(campaign):
    """The series' decisions run again over the new repeat; every repeat measured
    before stays in the summary even if the new decisions would have stopped earlier.
    A deleted extra repeat (rep3, asked for by the decision after rep2) is a point
    `scalesweep status` knows, missing, and the re-runs measure exactly it (issue #26,
    case 7)."""
    config = small_config()
    config["sweep"].update(ranks_per_node=[1], repeats=2, runtimes=["native", "native-aa"])
    config["measurement"].update(adaptive=True, max_repeats=3, target_ci_pp=0.01)
    workdir = campaign(config)
    run_snakemake(workdir, "--profile", PROFILE, SUMMARY)
    assert len(runs_csv(workdir)) == 6  # 3 blocks x 2 runtimes (the CI target is unreachable)
    hurt = "cnn_ddp/native-aa/n1-g0-r1-t1/rep1/native"  # native, in the native-aa arm
    block = "cnn_ddp/native-aa/n1-g0-r1-t1/rep3"  # the extra repeat, both runtimes
    redo = sorted([hurt, f"{block}/native", f"{block}/native-aa"])
    before = run_files_digest(workdir, skip=redo)
    for gone in (hurt, block):
        shutil.rmtree(workdir / "results" / "runs" / gone)
    status = scalesweep(workdir, "status", "--profile", PROFILE).stdout
    assert status.startswith("6 requested points: 3 done, 0 disturbed, 0 failed, 0 running, "
                             "0 stale, 3 missing"), status
    assert all(f"missing {p}" in " ".join(status.split()) for p in redo), status
    assert "scalesweep rerun --missing --profile" in status
    dry = scalesweep(workdir, "rerun", "--missing", "-n", "--profile", PROFILE).stdout
    assert all(f"  {p}  (missing" in dry for p in redo) and "Also measured" not in dry, dry
    proc = run_snakemake(workdir, "--profile", PROFILE, "summary")
    assert measured_by(proc.stdout + proc.stderr) == redo
    assert run_files_digest(workdir, skip=redo) == before
    assert len(runs_csv(workdir)) == 6


# --- units --------------------------------------------------------------------------------

def test_parse_where():
    assert parse_where(["runtime=native,charliecloud", "nodes=2"]) == {
        "runtime": {"native", "charliecloud"}, "nodes": {"2"}}
    with pytest.raises(UsageError, match="unknown axis 'node'"):
        parse_where(["node=2"])
    with pytest.raises(UsageError, match="expected AXIS=VALUE"):
        parse_where(["nodes"])


def test_select_by_state_and_axis():
    table = pd.DataFrame({
        "workload": ["w"] * 4, "runtime": ["native", "native", "charliecloud", "charliecloud"],
        "nodes": [1, 2, 1, 2], "gpus": 0, "ranks": 1, "threads": 1, "repeat": 1,
        "path": list("abcd"), "state": ["done", "failed", "missing", "disturbed"]})
    assert list(select(table, {"failed", "missing"}, {})["path"]) == ["b", "c"]
    assert list(select(table, set(), {"runtime": {"charliecloud"}})["path"]) == ["c", "d"]
    assert list(select(table, {"disturbed"}, {"nodes": {"1"}})["path"]) == []
    with pytest.raises(UsageError, match="nodes=3: no point"):
        select(table, set(), {"nodes": {"3"}})


def test_move_aside_keeps_history_and_attempts(tmp_path):
    point = tmp_path / "rep1"
    point.mkdir()
    for name in ("metrics.json", "run.log", "attempts.jsonl"):
        (point / name).write_text(name)
    first = move_aside(point, "20260101T000000Z")
    assert sorted(p.name for p in first.iterdir()) == ["metrics.json", "run.log"]
    assert sorted(p.name for p in point.iterdir()) == ["attempts.jsonl", "history"]
    assert move_aside(point, "20260101T000001Z") is None  # nothing left to move
    (point / "metrics.json").write_text("second")
    with pytest.raises(UsageError, match="exists already"):
        move_aside(point, "20260101T000000Z")


def test_summary_falls_back_on_the_newest_valid_run_in_history(tmp_path):
    """An unreadable metrics.json is left out with a warning; a valid earlier run kept
    in history stands in for it (the newest one)."""
    src = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "metrics_cnn.json"
    valid = json.loads(src.read_text())
    config = {"workloads": {valid["point"]["workload"]: {"payload": "cnn"}}}
    point = tmp_path / "rep1"
    for stamp, loss in (("20260101T000000Z", 1.0), ("20260102T000000Z", 2.0)):
        (point / "history" / stamp).mkdir(parents=True)
        (point / "history" / stamp / "metrics.json").write_text(
            json.dumps({**valid, "final_loss": loss}))
    (point / "metrics.json").write_text(src.read_text()[:200])  # truncated
    notes = []
    ((path, _, row),) = readable_runs([point / "metrics.json"], config, notes.append)
    assert "20260102T000000Z" in path and row["final_loss"] == 2.0
    assert "not valid JSON" in notes[0] and "earlier run" in notes[0]
    shutil.rmtree(point / "history")
    notes.clear()
    assert readable_runs([point / "metrics.json"], config, notes.append) == []
    assert "left out of the summary" in notes[0]
    # a valid file whose time is not a number is refused too, naming it
    bad = dict(valid, epoch_s=["fast"])
    (point / "metrics.json").write_text(json.dumps(bad))
    assert readable_runs([point / "metrics.json"], config, notes.append) == []
    assert "metrics.json" in notes[-1]
