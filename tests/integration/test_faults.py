"""Faults and bad input, tried on purpose on a real small campaign (issue #16).

One tiny campaign (2 points: 1 rank, and 2 ranks through mpirun; 1 epoch of 16 images:
conftest's ``small_finished``) is built once for the session and copied for each test.
Each test hurts it in one way and checks that: the user is told what went wrong (naming
the path or the key), the other points' files are byte-identical afterwards, and the next
run redoes exactly what was hurt (the ``rule run_point:`` jobs of Snakemake's job log).

Covered elsewhere, not repeated here: shell metacharacters in config *values* (a dataset
path, names, image references): tests/workflow/test_config_fuzz.py
(test_shell_injection_through_config_strings_is_refused, test_bad_config_stops_snakemake_
before_any_job); a payload SIGKILLed alone: tests/integration/test_fault_tolerance.py.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from conftest import (REPO, SNAKEMAKE, fake_payload_launch, have, measured_by, payload_pids,
                      run_files_digest, run_snakemake)

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(not have("mpirun"), reason="mpirun not installed")]

PROFILE = str(REPO / "profiles" / "local")
SCALESWEEP = str(Path(SNAKEMAKE).parent / "scalesweep")
ONE = "cnn_ddp/native/n1-g0-r1-t1/rep1/native"  # the 1-rank point (launcher: local)
TWO = "cnn_ddp/native/n1-g0-r2-t1/rep1/native"  # the 2-rank point (launcher: mpirun)
# "the next run": up to the points only (what it must redo is checked there, from Snakemake's
# own job log); the summary and report after a re-run: tests/test_report.py, test_rerun.py
UNTIL_POINTS = ("--until", "run_point")
LONG = ("workloads={cnn_ddp: {payload: cnn, parallel: ddp, dataset: tiny, epochs: 200, "
        "batch_size: 16}}")


@pytest.fixture
def finished(small_finished) -> Path:
    """The finished tiny campaign, built once for the session (conftest): copy it, never
    change it."""
    for point in (ONE, TWO):
        assert (small_finished / "results/runs" / point / "metrics.json").is_file()
    return small_finished


@pytest.fixture
def wd(finished, tmp_path) -> Path:
    """A copy of the finished campaign (times kept: Snakemake sees it up to date)."""
    copy = tmp_path / "campaign"
    shutil.copytree(finished, copy, symlinks=True)
    shutil.rmtree(copy / ".snakemake" / "log", ignore_errors=True)
    return copy


def digests(wd: Path, hurt: str | None) -> dict[str, str]:
    """sha256 of every file under results/runs, but the hurt point's."""
    return run_files_digest(wd, skip=[hurt] if hurt else [])


def run_point_jobs(wd: Path, logs_before: set[Path] = frozenset()) -> list[str]:
    """The points the run_point jobs of Snakemake's job logs (those newer than
    ``logs_before``) measured."""
    logs = sorted(set((wd / ".snakemake" / "log").glob("*.snakemake.log")) - set(logs_before))
    return measured_by("".join(log.read_text() for log in logs))


def payload_of(wd: Path, point: str) -> list[int]:
    """The point's payload processes (launcher and ranks) of this campaign, not another's
    (other test sessions may run the same point paths elsewhere)."""
    return payload_pids(str(wd / "results/runs" / point))


def logs(wd: Path) -> set[Path]:
    return set((wd / ".snakemake" / "log").glob("*.snakemake.log"))


def status(wd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([SCALESWEEP, "status", "-d", str(wd), "--profile", PROFILE, *args],
                          capture_output=True, text=True, check=True, timeout=120)


def states(wd: Path) -> tuple[dict[str, dict], dict]:
    out = json.loads(status(wd, "--json").stdout)
    return {p["path"]: p for p in out["points"]}, out


def hurt(wd: Path, point: str) -> None:
    """The point must be measured again: its metrics.json is gone."""
    (wd / "results/runs" / point / "metrics.json").unlink()


def assert_redone_exactly(wd: Path, point: str, before: dict[str, str],
                          proc: subprocess.CompletedProcess, logs_before=frozenset()) -> None:
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    assert run_point_jobs(wd, logs_before) == [point]
    assert digests(wd, point) == before, "another point's files changed"
    assert (wd / "results/runs" / point / "metrics.json").is_file()
    assert not (wd / "results/runs" / point / "running.json").exists()


def can_unshare() -> bool:
    """A private user + mount namespace (what unprivileged users get too)."""
    if not have("unshare"):
        return False
    return subprocess.run(["unshare", "-Urm", "true"], capture_output=True).returncode == 0


def in_namespace(setup: str, argv: list[str], cwd: Path, timeout: int = 600,
                 **env: str) -> subprocess.CompletedProcess:
    """``argv`` in a private mount namespace after the shell lines ``setup`` (its mounts
    vanish with it)."""
    full_env = dict(os.environ, USER=os.environ.get("USER", "root"), **env)
    return subprocess.run(["unshare", "-Urm", "sh", "-c", f'set -e\n{setup}\nexec "$@"', "sh",
                           *argv], cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env=full_env)


def snakemake_argv(wd: Path, *args: str) -> list[str]:
    return [SNAKEMAKE, "-s", str(REPO / "Snakefile"), "--directory", str(wd), *args]


# --- 1. SIGKILL of the workflow's process group mid-point ------------------------------------


def test_sigkill_of_the_workflow_kills_the_payload_and_the_point_is_stale_then_redone(wd):
    """kill -9 of snakemake's process group while the 2-rank (mpirun) point trains: no
    payload process survives it; status says the point is stale (its owner is gone) and
    that the left lock needs --unlock; the next run redoes exactly that point."""
    hurt(wd, TWO)
    before = digests(wd, TWO)
    log = wd / "results/runs" / TWO / "run.log"
    env = dict(os.environ, USER=os.environ.get("USER", "root"))
    # 200 epochs for this run only: it is surely training when killed
    proc = subprocess.Popen(snakemake_argv(wd, "--profile", PROFILE, "--config", LONG), cwd=wd,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while "epoch 1/200" not in (log.read_text(errors="replace") if log.is_file() else ""):
            assert proc.poll() is None, "snakemake ended before the point trained"
            assert time.monotonic() < deadline, "the point never trained"
            time.sleep(0.2)
        running, _ = states(wd)
        assert running[TWO]["state"] == "running", running[TWO]
        pids = payload_of(wd, TWO)
        assert len(pids) >= 3, pids  # mpirun and its 2 ranks
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        t_kill = time.monotonic()
        while payload_of(wd, TWO) and time.monotonic() - t_kill < 10:
            time.sleep(0.1)
        survivors = payload_of(wd, TWO)
        print(f"payload gone {time.monotonic() - t_kill:.1f} s after the kill")
        assert not survivors, f"payload processes outlived their harness: {survivors}"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        for pid in payload_of(wd, TWO):  # only if the test failed: never leave them running
            os.kill(pid, signal.SIGKILL)

    point_dir = wd / "results/runs" / TWO
    assert (point_dir / "running.json").is_file() and not (point_dir / "metrics.json").exists()
    points, out = states(wd)
    assert points[TWO]["state"] == "stale", points[TWO]
    assert "the run that owned this point is gone" in points[TWO]["reason"]
    assert points[ONE]["state"] in ("done", "disturbed")
    unlock = f"snakemake --directory {wd} --profile {PROFILE} --unlock"
    assert out["unlock_command"] == unlock
    text = status(wd).stdout
    assert "1 stale" in text and "Directory cannot be locked" in text, text
    assert unlock in text, text
    assert digests(wd, TWO) == before

    # what status said: the next run refuses to start until --unlock
    refused = run_snakemake(wd, "--profile", PROFILE, check=False)
    assert refused.returncode != 0
    assert "cannot be locked" in refused.stdout + refused.stderr
    run_snakemake(wd, "--profile", PROFILE, "--unlock")
    assert states(wd)[1]["unlock_command"] is None
    logs_before = logs(wd)
    again = run_snakemake(wd, "--profile", PROFILE, *UNTIL_POINTS, check=False)
    assert_redone_exactly(wd, TWO, before, again, logs_before)
    assert states(wd)[0][TWO]["state"] in ("done", "disturbed")


def test_a_command_dies_with_its_harness_even_when_the_harness_is_sigkilled(tmp_path):
    """The guard alone: a stand-in harness starts a command as the harness starts a
    payload (in a session of its own), then is SIGKILLed: the command gets SIGTERM."""
    marker = f"{tmp_path}/sleeper"
    harness = (
        "import subprocess, sys, time\n"
        "from scalesweep.run.guard import dies_with_harness\n"
        "p = subprocess.Popen(dies_with_harness([sys.executable, '-c', "
        "'import time; time.sleep(60)', sys.argv[1]]), start_new_session=True)\n"
        "print(p.pid, flush=True)\n"
        "time.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, "-c", harness, marker], stdout=subprocess.PIPE,
                            text=True, env=dict(os.environ, PYTHONPATH=str(REPO / "workflow")))
    try:
        child = int(proc.stdout.readline())
        deadline = time.monotonic() + 10
        while child not in payload_pids(marker, "time.sleep(60)") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert child in payload_pids(marker, "time.sleep(60)")
        proc.kill()
        proc.wait()
        deadline = time.monotonic() + 5
        while payload_pids(marker, "time.sleep(60)") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not payload_pids(marker, "time.sleep(60)")
    finally:
        proc.kill()
        for pid in payload_pids(marker, "time.sleep(60)"):
            os.kill(pid, signal.SIGKILL)


def test_the_guard_names_a_command_it_cannot_run():
    from scalesweep.run.guard import dies_with_harness

    proc = subprocess.run(dies_with_harness(["/nonexistent/mpirun", "-n", "2"]),
                          capture_output=True, text=True)
    assert proc.returncode == 127
    assert "scalesweep: cannot run /nonexistent/mpirun: [Errno 2]" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_the_owner_of_a_run_is_checked_by_pid_and_start_time_host_and_slurm_job(
        tmp_path, monkeypatch):
    import socket

    from scalesweep.record.pointdir import owner_record
    from scalesweep.campaign.status import owner_state

    me = owner_record()
    assert owner_state(me)[0] == "alive"
    reused = {**me, "pid_start_ticks": me["pid_start_ticks"] + 1}  # another process, same pid
    assert owner_state(reused)[0] == "gone"
    dead = subprocess.Popen(["true"])
    dead.wait()
    assert owner_state({**me, "pid": dead.pid})[0] == "gone"
    assert owner_state({**me, "boot_id": "another-boot"})[0] == "gone"
    elsewhere = {**me, "host": socket.gethostname() + "-other", "boot_id": None}
    verdict, who = owner_state(elsewhere)
    assert verdict == "unknown" and "another host" in who
    # in a Slurm job: squeue while it is queued or runs, sacct once it left the queue
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    squeue = '[ -n "$FAKE_SQUEUE_RC" ] && { echo "$FAKE_SQUEUE" >&2; exit 1; }; echo "$FAKE_SQUEUE"'
    for name, body in (("squeue", squeue),
                       ("sacct", 'echo "123|CANCELLED by 0"')):
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    job = {**elsewhere, "slurm_job_id": "123"}
    monkeypatch.setenv("FAKE_SQUEUE", "RUNNING")
    assert owner_state(job)[0] == "alive"
    monkeypatch.setenv("FAKE_SQUEUE", "slurm_load_jobs error: Invalid job id specified")
    monkeypatch.setenv("FAKE_SQUEUE_RC", "1")
    verdict, who = owner_state(job)
    assert verdict == "gone" and "CANCELLED" in who, who
    monkeypatch.setenv("FAKE_SQUEUE", "slurm_load_jobs error: Unable to contact slurm controller")
    assert owner_state(job)[0] == "unknown"


# --- 2. two invocations at once ----------------------------------------------------------------


def test_a_second_invocation_while_one_runs_is_refused_by_the_lock(wd):
    hurt(wd, ONE)
    before = digests(wd, ONE)
    env = dict(os.environ, USER=os.environ.get("USER", "root"))
    first = subprocess.Popen(snakemake_argv(wd, "--profile", PROFILE, *UNTIL_POINTS), cwd=wd, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while not (held := payload_of(wd, ONE)):  # the lock is taken before any job starts
            assert first.poll() is None, first.stdout.read()
            assert time.monotonic() < deadline, "the first run never started the point"
            time.sleep(0.1)
        # the point is 1 epoch of 16 images: held stopped while the second invocation starts,
        # or it may finish (and free the lock) first on a loaded machine (CI, stop 36)
        for pid in held:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)
        try:
            assert list((wd / ".snakemake" / "locks").glob("*.lock"))
            second = run_snakemake(wd, "--profile", PROFILE, check=False)
        finally:
            for pid in held:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)
        out, _ = first.communicate(timeout=600)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
    assert second.returncode != 0
    assert "cannot be locked" in second.stdout + second.stderr
    assert "rule run_point" not in second.stdout + second.stderr
    assert_redone_exactly(wd, ONE, before, subprocess.CompletedProcess([], first.returncode,
                                                                       out, ""))


# --- 3. a read-only or full results directory ------------------------------------------------


@pytest.mark.skipif(not can_unshare(), reason="no user + mount namespaces (unshare -Urm)")
def test_read_only_results_are_refused_naming_the_path_and_nothing_runs(wd):
    """A read-only mount: Snakemake refuses before the point's job runs (its own error
    names the file it cannot write); the harness alone (a point directory the harness
    cannot write) says so with the path before the payload runs."""
    hurt(wd, ONE)
    before, others = digests(wd, None), digests(wd, ONE)
    ro = 'mount --bind "$R" "$R"\nmount -o remount,bind,ro "$R"'
    whole = in_namespace(ro, snakemake_argv(wd, "--profile", PROFILE), wd, R=str(wd / "results"))
    err = whole.stdout + whole.stderr
    assert whole.returncode != 0
    assert "Write-protected output files" in err and "results/" in err, err[-3000:]
    point_only = in_namespace(ro, snakemake_argv(wd, "--profile", PROFILE), wd,
                              R=str(wd / "results/runs" / ONE))
    err = point_only.stdout + point_only.stderr
    assert point_only.returncode != 0
    assert f"Read-only file system: 'results/runs/{ONE}/metrics.json'" in err, err[-3000:]

    # the harness itself, where Snakemake lets the job start: exit 74, the path named
    config = sorted((wd / ".snakemake" / "scalesweep").glob("config-*.json"))[-1]
    harness = [sys.executable, str(REPO / "workflow/scripts/run_point.py"), "--config",
               str(config), "--metrics", f"results/runs/{ONE}/metrics.json"]
    for log in (f"results/runs/{ONE}/run.log", str(wd / "elsewhere.log")):
        alone = in_namespace(ro, [*harness, "--log", log], wd, R=str(wd / "results/runs" / ONE))
        assert alone.returncode == 74, alone.stderr
        assert f"results/runs/{ONE}" in alone.stderr and "Read-only file system" in alone.stderr
        assert "Traceback" not in alone.stderr, alone.stderr
    # stopped before the launch (the log's header comes first)
    assert "scalesweep run-point" not in (wd / "elsewhere.log").read_text()
    assert not payload_of(wd, ONE)
    assert digests(wd, None) == before, "a read-only run changed results/runs"

    logs_before = logs(wd)
    again = run_snakemake(wd, "--profile", PROFILE, *UNTIL_POINTS, check=False)
    assert_redone_exactly(wd, ONE, others, again, logs_before)


@pytest.mark.skipif(not can_unshare(), reason="no user + mount namespaces (unshare -Urm)")
def test_full_results_directory_stops_the_point_before_its_payload_naming_the_path(wd):
    """A full file system (a 64 KiB tmpfs, filled, over the point's directory): the
    harness checks before the payload runs and names the directory."""
    hurt(wd, ONE)
    before = digests(wd, ONE)
    hurt_before = digests(wd, None)
    full = ('mount -t tmpfs -o size=64k tmpfs "$P"\n'
            'dd if=/dev/zero of="$P/filler" bs=4k 2>/dev/null || true')
    proc = in_namespace(full, snakemake_argv(wd, "--profile", PROFILE), wd,
                        P=str(wd / "results/runs" / ONE))
    err = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert (f"scalesweep: point {ONE}: no space left on the device of results/runs/{ONE}: "
            "a full results directory") in err, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    assert run_point_jobs(wd) == [ONE]  # it was the point's job that stopped
    assert not payload_of(wd, ONE)
    assert digests(wd, None) == hurt_before

    logs_before = logs(wd)
    again = run_snakemake(wd, "--profile", PROFILE, *UNTIL_POINTS, check=False)
    assert_redone_exactly(wd, ONE, before, again, logs_before)


def test_metrics_that_cannot_be_written_after_the_run_name_the_path(tmp_path, monkeypatch):
    """ENOSPC when the harness writes metrics.json (the disk filled during the run),
    injected at the write: an error naming the file, never a traceback without a path."""
    import scalesweep.run.harness as harness
    import scalesweep.run.run_record as run_record
    from scalesweep.record.failures import device_of
    from scalesweep.record.pointdir import PointDirError
    from scalesweep.platform.site import load_site
    from scalesweep.plan.sweep import SweepPoint

    point = SweepPoint("cnn_ddp", "native", 1, 0, 1, 1, 1)
    launch, out = fake_payload_launch(
        tmp_path, "import json, sys\njson.dump({'workload': 'fake', 'payload_wall_s': 0.01}, "
        "open(sys.argv[sys.argv.index('--out') + 1], 'w'))\n", point)

    def full(path, record):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(run_record, "write_metrics", full)
    with pytest.raises(PointDirError) as exc:
        harness.execute(point, launch, str(out / "metrics.json"), str(out / "run.log"),
                        measurement={"sample_interval_s": 0.2, "max_outside_cpu_pct": 100,
                                     "max_steal_pct": 100}, site=load_site("local"))
    assert str(out / "metrics.json") in str(exc.value)
    assert f"no space left on {device_of(out)} while writing {out / 'metrics.json'}" in str(exc.value)
    assert not (out / "running.json").exists()
    # the attempt's record says so (written after the metrics, never "done" before them)
    from scalesweep.record.failures import read_attempts

    (attempt,) = read_attempts(out)
    assert (attempt["state"], attempt["exit_code"]) == ("failed", 74)
    assert attempt["reason"] == str(exc.value)
    assert json.loads((out / "failure.json").read_text())["reason"] == str(exc.value)


# --- 4. bad input: shell metacharacters in a workload name -------------------------------------


def test_shell_metacharacters_in_a_workload_name_stop_snakemake_naming_the_key(wd):
    config = yaml.safe_load((wd / "config" / "config.yaml").read_text())
    config["workloads"]["x;touch PWNED"] = config["workloads"]["cnn_ddp"]
    (wd / "config" / "config.yaml").write_text(yaml.safe_dump(config))
    before = digests(wd, None)
    proc = run_snakemake(wd, "--profile", PROFILE, "summary", check=False)
    err = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "config key workloads" in err and "x;touch PWNED" in err, err[-3000:]
    assert "rule run_point" not in err and run_point_jobs(wd) == []
    assert not (wd / "PWNED").exists() and not list(wd.rglob("PWNED"))
    assert digests(wd, None) == before


# --- 5. a metrics.json with a missing or non-numeric field ------------------------------------


@pytest.mark.parametrize("change, field", [
    (lambda m: m.pop("train_s"), "train_s is missing, expected a finite number (s)"),
    (lambda m: m.update(final_loss="low"), "final_loss is 'low', expected a number"),
    (lambda m: m.update(epoch_s=[1.0, None]),
     "epoch_s is [1.0, None], expected a non-empty list of finite numbers (s)"),
])
def test_a_metrics_field_missing_or_not_a_number_is_named_and_the_point_failed(
        finished, tmp_path, change, field):
    from scalesweep.record.metrics import MetricsError, read_metrics

    wd = tmp_path / "campaign"
    shutil.copytree(finished / "config", wd / "config")
    shutil.copytree(finished / "results" / "runs", wd / "results" / "runs")
    path = wd / "results/runs" / ONE / "metrics.json"
    record = json.loads(path.read_text())
    change(record)
    path.write_text(json.dumps(record))
    with pytest.raises(MetricsError, match=re.escape(f"{path}: {field}")):
        read_metrics(path)
    points, _ = states(wd)
    assert points[ONE]["state"] == "failed" and field in points[ONE]["reason"], points[ONE]


def test_bad_metrics_fail_their_points_in_the_summary_and_rerun_failed_redoes_them(wd):
    """One truncated metrics.json, one with a non-numeric field: the aggregation leaves
    both out (no traceback) and lists them as failed; `scalesweep rerun --failed`
    measures exactly those two again."""
    one = wd / "results/runs" / ONE / "metrics.json"
    two = wd / "results/runs" / TWO / "metrics.json"
    text = one.read_text()
    one.write_text(text[: len(text) // 2])
    record = json.loads(two.read_text())
    record["train_s"] = "fast"
    two.write_text(json.dumps(record))
    before = digests(wd, None)

    proc = run_snakemake(wd, "--profile", PROFILE, "summary", check=False)
    out = proc.stdout + proc.stderr
    assert "Traceback" not in out, out[-4000:]
    assert run_point_jobs(wd) == []  # nothing measured: the files exist
    summary = wd / "results" / "summary"
    assert (summary / "runs.csv").is_file()
    assert {p.name for p in summary.glob("*.csv")} >= {"runs.csv", "points.csv", "scaling.csv"}
    points = pd.read_csv(summary / "points.csv").set_index("path")
    assert points.loc[ONE, "state"] == "failed" and points.loc[TWO, "state"] == "failed"
    assert digests(wd, None) == before
    by_path, _ = states(wd)
    assert by_path[ONE]["state"] == by_path[TWO]["state"] == "failed"
    assert "train_s is 'fast', expected a finite number (s)" in by_path[TWO]["reason"]

    logs_before = logs(wd)
    env = dict(os.environ, USER=os.environ.get("USER", "root"))
    rerun = subprocess.run([SCALESWEEP, "rerun", "--failed", "--tables-only", "-d", str(wd),
                            "--profile", PROFILE], capture_output=True, text=True, timeout=900, env=env)
    assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-6000:]
    assert run_point_jobs(wd, logs_before) == sorted([ONE, TWO])
    for point in (ONE, TWO):
        history = list((wd / "results/runs" / point / "history").glob("*/metrics.json"))
        assert len(history) == 1, history  # the bad file kept aside
    by_path, _ = states(wd)
    assert {by_path[p]["state"] for p in (ONE, TWO)} <= {"done", "disturbed"}


# --- issue #26, 1: a malformed field of an LLM point fails the point, never the summary --------

LLM = "llm/native/n1-g0-r1-t1/rep1/native"  # one request of 8 tokens on the synthetic model


def test_a_malformed_llm_field_fails_its_point_keeps_the_summary_and_rerun_redoes_it(wd):
    """A finished LLM point whose metrics.json says "ttft_s": "n/a" (the values of other
    kinds: tests/unit/test_metrics_fields.py): `scalesweep status` and `rerun --failed -n`
    name the file, the field, the value and what was expected (no traceback); the next
    snakemake aggregates without it (a failed point in points.csv) and no summary file
    disappears; `scalesweep rerun --failed` measures exactly that point again, keeping
    the bad file, and every other file stays byte-identical."""
    config = yaml.safe_load((wd / "config" / "config.yaml").read_text())
    config["models"] = {"tiny_llm": {"source": "synthetic"}}
    config["workloads"]["llm"] = {"payload": "llm", "model": "tiny_llm", "max_tokens": 8,
                                  "warmup": 0, "num_requests": 1,
                                  "sweep": {"ranks_per_node": [1], "baseline": None}}
    (wd / "config" / "config.yaml").write_text(yaml.safe_dump(config))
    path = wd / "results/runs" / LLM / "metrics.json"
    run_snakemake(wd, "--profile", PROFILE, str(path.relative_to(wd)))  # the point alone
    record = json.loads(path.read_text())
    assert isinstance(record["ttft_s"], dict)
    record["ttft_s"] = "n/a"
    path.write_text(json.dumps(record, indent=2))
    bad = path.read_bytes()
    message = (f"{path}: ttft_s is 'n/a', expected a mapping of statistics (n, mean, p50, "
               "...) to finite numbers (s)")
    before = digests(wd, None)
    summaries = {p.name for p in (wd / "results" / "summary").iterdir()}

    shown = status(wd)
    assert "Traceback" not in shown.stdout + shown.stderr
    assert re.search(rf"^failed +{re.escape(LLM)} +{re.escape(message)}", shown.stdout, re.M), \
        shown.stdout
    env = dict(os.environ, USER=os.environ.get("USER", "root"))
    dry = subprocess.run([SCALESWEEP, "rerun", "--failed", "-n", "-d", str(wd), "--profile",
                          PROFILE], capture_output=True, text=True, timeout=300, env=env)
    assert dry.returncode == 0 and "Traceback" not in dry.stdout + dry.stderr, dry.stderr
    assert dry.stdout.startswith(f"Measuring 1 point(s) again:\n  {LLM}  (failed: {path}: "
                                 "ttft_s is 'n/a', expected a mapping"), dry.stdout
    assert "Also measured" not in dry.stdout

    logs_before = logs(wd)
    proc = run_snakemake(wd, "--profile", PROFILE, "summary")  # the summary, with the new workload
    assert run_point_jobs(wd, logs_before) == [] and "Traceback" not in proc.stdout + proc.stderr
    assert "done, with 1 failed" in proc.stdout + proc.stderr
    assert f"warning: {message.replace(str(wd) + '/', '')}; left out of the summary" in \
        (wd / "logs" / "aggregate.log").read_text()
    assert {p.name for p in (wd / "results" / "summary").iterdir()} >= summaries
    points = pd.read_csv(wd / "results" / "summary" / "points.csv").set_index("path")
    assert points.loc[LLM, "state"] == "failed" and "ttft_s is 'n/a'" in points.loc[LLM, "reason"]
    assert points.loc[ONE, "state"] == points.loc[TWO, "state"] == "done"
    assert digests(wd, None) == before  # nothing measured, nothing moved

    # the measurement only (--until): the summary's rebuild after a rerun is
    # test_bad_metrics_fail_their_points_in_the_summary_and_rerun_failed_redoes_them's
    logs_before = logs(wd)
    rerun = subprocess.run([SCALESWEEP, "rerun", "--failed", "-d", str(wd), "--profile", PROFILE,
                            "--", "--until", "run_point"],
                           capture_output=True, text=True, timeout=900, env=env)
    others = {k: v for k, v in before.items() if not k.startswith(LLM + "/")}
    assert_redone_exactly(wd, LLM, others, rerun, logs_before)
    (kept,) = (wd / "results/runs" / LLM / "history").glob("*/metrics.json")
    assert kept.read_bytes() == bad
    assert states(wd)[0][LLM]["state"] in {"done", "disturbed"}


# --- issue #26, 8: a report on a partial campaign; a scaling series with every baseline disturbed --


def test_a_partial_report_says_how_and_a_series_whose_baseline_runs_are_disturbed_says_why(wd):
    """The 2-rank point not measured (the summary never made: it waits for every point)
    and the 1-rank run, the series' baseline, disturbed. `snakemake --report` fails
    saying how to report what was measured (analysis.partial); done so, the summary has
    scaling.csv's one row for the series saying why it has no numbers (aggregate.log
    too), and the report is made. Nothing is measured or changed under results/runs."""
    hurt(wd, TWO)
    shutil.rmtree(wd / "results" / "summary")
    one = wd / "results/runs" / ONE / "metrics.json"
    record = json.loads(one.read_text())
    record["disturbed"] = True
    record["interference"].update(disturbed=True, reasons=["outside processes used 61.0% CPU"])
    one.write_text(json.dumps(record, indent=2))
    before = digests(wd, None)

    refused = run_snakemake(wd, "--report", "report.html", check=False)
    out = refused.stdout + refused.stderr
    assert refused.returncode != 0 and not (wd / "report.html").exists()
    assert ("scalesweep: results/summary/runs.csv is not made yet: 1 of 2 points have no "
            "metrics.json") in out, out[-3000:]
    assert ("To summarise and report what was measured: snakemake --config "
            "analysis='{partial: true}'") in out and "then snakemake --report report.html" in out

    logs_before = logs(wd)
    run_snakemake(wd, "--profile", PROFILE, "--config", "analysis={partial: true}")
    assert run_point_jobs(wd, logs_before) == [] and digests(wd, None) == before
    why = ("no numbers: no undisturbed run of its baseline count 1 (1 disturbed; "
           "`scalesweep status` says how to replace them)")
    assert (f"scaling: workload=cnn_ddp, runtime=native, threads=1: {why}; left out of the "
            "scaling statistics") in (wd / "logs" / "aggregate.log").read_text()
    scaling = pd.read_csv(wd / "results" / "summary" / "scaling.csv")
    assert len(scaling) == 1 and scaling.loc[0, "note"] == why, scaling.to_dict("records")
    assert (scaling.loc[0, "count"], scaling.loc[0, "n"], scaling.loc[0, "n_disturbed"]) == (1, 0, 1)
    assert pd.isna(scaling.loc[0, "time_s"]) and pd.isna(scaling.loc[0, "efficiency_pct"])
    run_snakemake(wd, "--report", "report.html")
    assert (wd / "report.html").stat().st_size > 0


# --- issue #26, 8: a failed LLM point says why (the server log's cause) ------------------------


def test_a_failed_llm_server_start_names_the_cause_from_its_log(wd):
    """A model the llama.cpp server cannot load (a GGUF header and nothing else): the
    point's failure.json reason, and `scalesweep status`, carry the cause the server log
    gives, not only "exit code 1"; the CNN points' files stay byte-identical and no
    summary file disappears."""
    broken = wd / "broken.gguf"
    broken.write_bytes(b"GGUF" + b"\0" * 64)  # passes stage_model's magic check
    config = yaml.safe_load((wd / "config" / "config.yaml").read_text())
    config["models"] = {"broken": {"source": "gguf-file", "path": str(broken)}}
    config["workloads"]["llm"] = {"payload": "llm", "model": "broken", "max_tokens": 8,
                                  "warmup": 0, "num_requests": 1,
                                  "sweep": {"ranks_per_node": [1], "baseline": None}}
    (wd / "config" / "config.yaml").write_text(yaml.safe_dump(config))
    before = digests(wd, None)
    summaries = {p.name for p in (wd / "results" / "summary").iterdir()}

    proc = run_snakemake(wd, "--profile", PROFILE, "summary", check=False)
    point = "llm/native/n1-g0-r1-t1/rep1/native"
    assert proc.returncode != 0 and run_point_jobs(wd) == [point], proc.stderr[-4000:]
    reason = json.loads((wd / "results/runs" / point / "failure.json").read_text())["reason"]
    server_log = wd / "results/runs" / point / "server.log"
    assert reason.startswith("exit code 1: server exited with status 1 before becoming healthy: "), reason
    assert f"ValueError: Failed to load model from file: {wd}/resources/models/broken/model.gguf" \
        in reason and reason.endswith(f"see {server_log}"), reason
    assert "Failed to load model from file" in server_log.read_text()
    assert digests(wd, point) == before, "another point's files changed"
    assert {p.name for p in (wd / "results" / "summary").iterdir()} >= summaries
    points, _ = states(wd)
    assert points[point]["state"] == "failed" and points[point]["reason"] == reason


def test_a_deleted_dataset_says_its_finished_points_would_run_again_and_how_not_to(wd):
    """Deleting a staged dataset while a point is still to measure: Snakemake would make
    it anew and then run every finished point that reads it again (an input another job
    updated), deleting its metrics.json first. The dry run says so before any job, naming
    the files and the command that makes them anew alone; that command measures nothing,
    and the next run plans exactly the point still to measure."""
    staged = ["resources/datasets/tiny", "resources/datasets/tiny.verified.json"]
    for path in staged:
        shutil.rmtree(wd / path) if (wd / path).is_dir() else (wd / path).unlink()
    (wd / "results/runs" / ONE / "metrics.json").unlink()
    before = digests(wd, ONE)
    dry = run_snakemake(wd, "--profile", PROFILE, "-n")
    assert (f"scalesweep: {' '.join(staged)} gone, read by 1 finished point(s) (e.g. "
            f"results/runs/{TWO}/metrics.json)") in dry.stderr
    assert f"first run: snakemake {' '.join(staged)}" in dry.stderr
    assert measured_by(dry.stdout + dry.stderr) == sorted([ONE, TWO])  # what it warns of
    run_snakemake(wd, "--profile", PROFILE, *staged)  # the advice: stages, measures nothing
    assert digests(wd, ONE) == before
    dry = run_snakemake(wd, "--profile", PROFILE, "-n")
    assert "gone, read by" not in dry.stderr
    assert measured_by(dry.stdout + dry.stderr) == [ONE]
