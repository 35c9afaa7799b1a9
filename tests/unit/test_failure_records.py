"""Every way a point can end leaves a record that says why (issue #40, cases 1, 9 and the
closing message).

* A disk that fills up during a measurement (a 2 MiB tmpfs in a mount namespace of its
  own, and, where this runs as root, a 4 MiB ext4 on a loop device) fails the attempt
  "no space left on <device> (mounted at ...) while writing ...":
  failure.json, the attempt's line and its log say so, in the room the attempt's reserve
  leaves, and the point reads as failed (what `scalesweep status` reads); a metrics.json
  written before on the same disk is untouched, and a measurement meeting the full disk
  is written in the reserve's room.
* A payload the kernel's OOM killer ends (a memory cgroup with a small limit) is "out of
  memory".
* A failed Snakemake run's closing message names what failed: points (with their
  reasons) or other jobs (with their logs), read from the log Snakemake hands onerror.

Real processes, files, file systems and cgroups; no mocks.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import REPO, SNAKEMAKE, have
from scalesweep.analyse.collect import point_states
from scalesweep.campaign.failed_run import failure_message
from scalesweep.measure.oomkill import memory_cgroups, oom_evidence, oom_kills
from scalesweep.plan.sweep import SweepPoint
from scalesweep.record.failures import (RESERVE, make_reserve, read_attempts, release_reserve,
                                        with_room)
from scalesweep.record.metrics import write_json_atomic
from test_reaper import HARNESS, launch_spec, stand_in

POINT = "cnn_ddp/native/n1-g0-r1-t1/rep1/native"

# a payload whose disk fills up under it: another file takes every free block (as another
# job's output would), then it writes its record as train_cnn.py does (write_metrics)
FILLS_THE_DISK = """\
import os, sys
from scalesweep.record.metrics import write_metrics
out = sys.argv[sys.argv.index("--out") + 1]
print("payload: training", flush=True)
fd = os.open(os.path.join(os.path.dirname(os.path.dirname(out)), "filler"),
             os.O_WRONLY | os.O_CREAT)
for chunk in (4096, 512, 1):  # ext4 frees over-reserved blocks at fsync: fill those too
    try:
        while True:
            os.write(fd, os.urandom(chunk))
    except OSError:
        try:
            os.fsync(fd)
        except OSError:
            pass
os.close(fd)
write_metrics(out, {"workload": "stand-in", "payload_wall_s": 0.01})
"""


def can_mount_tmpfs() -> bool:
    if not have("unshare"):
        return False
    return subprocess.run(["unshare", "-Urm", "sh", "-c", "mount -t tmpfs -o size=1m tmpfs /mnt"],
                          capture_output=True).returncode == 0


def harness_env() -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env.update(PYTHONPATH=str(REPO / "workflow"), USER=os.environ.get("USER", "root"))
    return env


def can_mount_loop() -> bool:
    """Root, with losetup and mkfs.ext4, in a mount namespace that may mount a loop device."""
    if os.geteuid() != 0 or not (have("unshare") and have("losetup") and have("mkfs.ext4")):
        return False
    return subprocess.run(["unshare", "-m", "sh", "-c", "mount -t tmpfs -o size=1m tmpfs /mnt"],
                          capture_output=True).returncode == 0


# (unshare's flags, the mount command, the device its reason names)
FILE_SYSTEMS = {
    "tmpfs": pytest.param(("-Urm", 'mount -t tmpfs -o size=2m tmpfs "$R"', "tmpfs"),
                          marks=pytest.mark.skipif(not can_mount_tmpfs(),
                                                   reason="no mount namespace with tmpfs here")),
    # a real block device: ext4 without root's reserved blocks, on a loop device
    "ext4-loop": pytest.param(("-m", 'mount -o loop "$IMG" "$R"', "/dev/loop"),
                              marks=pytest.mark.skipif(not can_mount_loop(),
                                                       reason="not root, or no loop device")),
}


@pytest.mark.parametrize("fs", FILE_SYSTEMS.values(), ids=FILE_SYSTEMS.keys())
def test_a_disk_full_during_the_run_fails_the_point_named_and_recorded(tmp_path, fs):
    """The harness and its payload run on a small file system (results/ of a campaign: a
    2 MiB tmpfs, a 4 MiB ext4 on a loop device) where an earlier point is measured; the
    disk fills up while the payload runs. The attempt is failed with "no space left on
    <device> (mounted at <results>) while writing ...": in failure.json, attempts.jsonl and
    the log, never a traceback; the reserve is gone; the point reads as failed; the
    earlier measurement is byte for byte as it was. The mount vanishes with its namespace:
    the script copies the point directories out."""
    unshare, mount, device = fs
    image = tmp_path / "disk.img"
    if device.startswith("/dev/loop"):
        with open(image, "wb") as fh:
            fh.truncate(4 << 20)
        subprocess.run(["mkfs.ext4", "-q", "-m", "0", str(image)], check=True)
    results = tmp_path / "results"
    results.mkdir()
    out = results / "runs" / POINT
    earlier = results / "runs" / POINT.replace("rep1", "rep0")
    spec = launch_spec(tmp_path, out, "local")
    (Path(spec["code_root"]) / "scripts" / "fills.py").write_text(FILLS_THE_DISK)
    spec["payload"] = "scripts/fills.py"
    copy = tmp_path / "copy"
    script = mount + "\n" + textwrap.dedent("""\
        mkdir -p "$E"
        "$PY" -c 'import sys; from scalesweep.record.metrics import write_json_atomic
        write_json_atomic(sys.argv[1], {"measured": "before"})' "$E/metrics.json"
        sha256sum "$E/metrics.json" > "$C.before"
        set +e
        "$PY" -c "$HARNESS" "$SPEC" > "$C.out" 2> "$C.err"
        echo $? > "$C.rc"
        sha256sum "$E/metrics.json" > "$C.after"
        ls -a "$O" > "$C.ls"
        cp -a "$R" "$C"
        """)
    proc = subprocess.run(["unshare", unshare, "sh", "-c", script], capture_output=True,
                          text=True, timeout=300,
                          env={**harness_env(), "R": str(results), "E": str(earlier),
                               "IMG": str(image),
                               "O": str(out), "C": str(copy), "PY": sys.executable,
                               "HARNESS": HARNESS, "SPEC": json.dumps(spec)})
    assert proc.returncode == 0, proc.stderr
    err = Path(f"{copy}.err").read_text()
    assert Path(f"{copy}.rc").read_text().strip() == "1", (err, Path(f"{copy}.ls").read_text())
    assert "Traceback" not in err, err
    saved = copy / "runs" / POINT
    failure = json.loads((saved / "failure.json").read_text())
    source = failure["reason"].removeprefix("no space left on ").partition(" ")[0]
    assert source == device or (device == "/dev/loop" and source[len(device):].isdigit()), \
        failure["reason"]
    expected = (f"no space left on {source} (mounted at {results}) while writing the payload's "
                f"files in {out} (exit code 1)")
    assert (failure["reason"], failure["state"], failure["exit_code"]) == (expected, "failed", 1)
    (attempt,) = read_attempts(saved)
    assert (attempt["state"], attempt["reason"]) == ("failed", expected)
    assert f"point {POINT} failed: {expected}; log: {out / 'run.1.log'}" in err, err
    assert RESERVE not in Path(f"{copy}.ls").read_text().split()
    assert not (saved / "metrics.json").exists()
    # what `scalesweep status` and points.csv read: failed, with the reason
    table = point_states([SweepPoint.from_path(POINT)], str(copy))
    assert (table.at[0, "state"], table.at[0, "reason"]) == ("failed", expected)
    # nothing measured before is lost
    before, after = (Path(f"{copy}.{k}").read_text().split()[0] for k in ("before", "after"))
    assert before == after
    assert json.loads((copy / "runs" / POINT.replace("rep1", "rep0") / "metrics.json")
                      .read_text()) == {"measured": "before"}


@pytest.mark.skipif(not can_mount_tmpfs(), reason="no mount namespace with tmpfs here")
def test_the_reserve_makes_room_for_a_record_on_a_full_disk(tmp_path):
    """On a real full tmpfs: a record written without the reserve fails with ENOSPC; with
    it, the reserve is freed and the record (a metrics.json of 100 KiB) is written whole."""
    code = textwrap.dedent("""\
        import errno, json, os, sys
        from pathlib import Path
        from scalesweep.record.failures import RESERVE, make_reserve, with_room
        from scalesweep.record.metrics import read_metrics, write_metrics
        d = Path(sys.argv[1])
        make_reserve(d)
        assert (d / RESERVE).stat().st_size >= 256 << 10
        fd = os.open(d / "filler", os.O_WRONLY | os.O_CREAT)
        try:
            while True:
                os.write(fd, os.urandom(4096))
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
        record = {"workload": "stand-in", "blob": "x" * (100 << 10)}
        try:
            write_metrics(d / "plain.json", record)
            print("written without room")
        except OSError as exc:
            print("without the reserve:", errno.errorcode[exc.errno])
        with_room(d, write_metrics, d / "metrics.json", record)
        print("with the reserve:", read_metrics(d / "metrics.json")["blob"] == record["blob"],
              (d / RESERVE).exists())
        """)
    proc = subprocess.run(["unshare", "-Urm", "sh", "-c",
                           'mount -t tmpfs -o size=1m tmpfs "$D" && exec "$0" -c "$1" "$D"',
                           sys.executable, code], capture_output=True, text=True, timeout=120,
                          env={**harness_env(), "D": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["without the reserve: ENOSPC",
                                        "with the reserve: True False"]


def test_the_reserve_is_made_and_released_in_the_point_directory(tmp_path):
    make_reserve(tmp_path)
    assert (tmp_path / RESERVE).stat().st_size >= 256 << 10
    assert with_room(tmp_path, write_json_atomic, tmp_path / "a.json", {"a": 1})
    assert (tmp_path / RESERVE).exists()  # room was there: the reserve is kept
    assert release_reserve(tmp_path) and not (tmp_path / RESERVE).exists()
    assert not release_reserve(tmp_path)


# --- out of memory ------------------------------------------------------------------------

# a payload that takes memory until the cgroup's limit is reached
GREEDY = """\
import sys, time
print("payload: allocating", flush=True)
blocks = []
for _ in range(64):
    blocks.append(b"x" * (64 << 20))
print("payload: never out of memory", flush=True)
"""


def memory_cgroup(tmp_name: str, limit: int) -> Path | None:
    """A child of this process's memory cgroup (v1) with ``limit`` bytes and no swap, or
    None where one cannot be made here."""
    counters = memory_cgroups()
    if not counters or counters[0].name != "memory.oom_control":
        return None  # v2: a child needs the parent's subtree_control, busy with us
    child = counters[0].parent / tmp_name
    try:
        child.mkdir()
        (child / "memory.limit_in_bytes").write_text(str(limit))
        swap = child / "memory.memsw.limit_in_bytes"
        if swap.exists():
            swap.write_text(str(limit))
    except OSError:
        try:
            child.rmdir()
        except OSError:
            pass
        return None
    return child


def test_a_payload_killed_by_the_oom_killer_is_out_of_memory(tmp_path):
    """The harness and its payload in a memory cgroup of 400 MiB: the payload takes memory
    until the kernel's OOM killer ends it; the attempt is failed "out of memory (the
    kernel's OOM killer killed 1 process in memory cgroup <cgroup> during the run):
    killed by signal SIGKILL", in failure.json and the attempt's line."""
    cgroup = memory_cgroup(f"scalesweep-test-oom-{os.getpid()}", 400 << 20)
    if cgroup is None:
        pytest.skip("no cgroup v1 memory controller to make a child cgroup in here")
    out = tmp_path / "point"
    spec = launch_spec(tmp_path, out, "local")
    (Path(spec["code_root"]) / "scripts" / "greedy.py").write_text(GREEDY)
    spec["payload"] = "scripts/greedy.py"
    try:
        proc = subprocess.run(
            ["sh", "-c", 'echo $$ > "$CG/cgroup.procs" && exec "$0" -c "$1" "$2"',
             sys.executable, HARNESS, json.dumps(spec)],
            env={**harness_env(), "CG": str(cgroup)}, capture_output=True, text=True,
            timeout=300)
    finally:
        for pid in (cgroup / "cgroup.procs").read_text().split():
            os.kill(int(pid), signal.SIGKILL)
        for _ in range(100):
            try:
                cgroup.rmdir()
                break
            except OSError:
                import time
                time.sleep(0.1)
    expected = (f"out of memory (the kernel's OOM killer killed 1 process in memory cgroup "
                f"{cgroup} during the run): killed by signal SIGKILL")
    assert proc.returncode == 128 + signal.SIGKILL, proc.stderr
    failure = json.loads((out / "failure.json").read_text())
    assert failure["reason"] == expected, failure["reason"]
    (attempt,) = read_attempts(out)
    assert (attempt["state"], attempt["reason"]) == ("failed", expected)


def test_oom_evidence_reads_the_counters_and_slurms_word():
    """The counters as read here, and how a rise is read: only with a SIGKILL of the run's
    own (locally the harness's cgroup holds Snakemake and the points beside it too);
    slurmstepd's line always."""
    counts = oom_kills()
    assert "/proc/vmstat" in counts
    own = [str(p) for p in memory_cgroups()]
    assert all(p in counts for p in own)
    after = {k: v + 1 for k, v in counts.items()}
    if own:
        assert oom_evidence(counts, after, 137).startswith(
            "the kernel's OOM killer killed 1 process in memory cgroup ")
        # another process's OOM kill is not this run's failure (exit 1, no SIGKILL)
        assert oom_evidence(counts, after, 1) is None
        assert oom_evidence(counts, after, 1, "mpirun noticed that process rank 1 ... "
                            "exited on signal 9 (Killed).").startswith("the kernel's")
        assert oom_evidence(counts, after, 1, "the model was Killed-off early") is None
    host = {"/proc/vmstat": 3}
    assert oom_evidence(host, {"/proc/vmstat": 4}, 1) is None
    assert oom_evidence(host, {"/proc/vmstat": 4}, 137) == \
        "the kernel's OOM killer killed 1 process on this host during the run"
    assert oom_evidence(host, {"/proc/vmstat": 3}, 137) is None
    assert oom_evidence(None, {}, 137, "slurmstepd: error: Detected 1 oom_kill event in "
                        "StepId=97.0. Some of the step tasks have been OOM Killed.") == \
        "Slurm: Detected 1 oom_kill event in StepId=97.0."


# --- the closing message of a failed run ---------------------------------------------------

MINI_SNAKEFILE = """\
import json, sys
sys.path.insert(0, "@WORKFLOW@")
from scalesweep.campaign.failed_run import failure_message

onerror:
    print("CLOSING<<" + failure_message(log, "HINT") + ">>")

rule all:
    input: "results/summary/runs.csv"

rule run_point:
    output: "results/runs/{path}/metrics.json"
    log: "results/runs/{path}/run.log"
    run:
        if config["fail_point"]:
            with open(f"results/runs/{wildcards.path}/failure.json", "w") as fh:
                json.dump({"reason": "no space left on tmpfs while writing x", "log": log[0]}, fh)
            raise ValueError("the point failed")
        open(output[0], "w").write("{}")

rule aggregate:
    input: "results/runs/cnn/native/n1-g0-r1-t1/rep1/native/metrics.json"
    output: "results/summary/runs.csv"
    log: "logs/aggregate.log"
    run:
        open(log[0], "w").write("OSError: [Errno 28] No space left on device")
        raise OSError(28, "No space left on device")
"""


def closing(tmp_path: Path, *config: str) -> tuple[str, subprocess.CompletedProcess]:
    (tmp_path / "Snakefile").write_text(MINI_SNAKEFILE.replace("@WORKFLOW@", str(REPO / "workflow")))
    proc = subprocess.run([SNAKEMAKE, "-c1", "--keep-going", "--config", *config],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0, text
    assert "CLOSING<<" in text, text[-3000:]
    return text.split("CLOSING<<", 1)[1].split(">>", 1)[0], proc


def test_a_failed_summary_job_is_named_with_its_log_never_as_failed_points(tmp_path):
    message, _ = closing(tmp_path, "fail_point=0")
    assert message == ("scalesweep: no point failed; 1 other job (measuring no point) failed:\n"
                       "  aggregate (log: logs/aggregate.log)\n"
                       "Measured points are kept and not measured again: fix what the log "
                       "says and run the same command again.")


def test_a_failed_point_is_named_with_its_reason(tmp_path):
    message, _ = closing(tmp_path, "fail_point=1")
    point = "cnn/native/n1-g0-r1-t1/rep1/native"
    assert message.splitlines()[:2] == [
        "scalesweep: 1 point failed; finished points are kept:",
        f"  {point}: no space left on tmpfs while writing x (log: results/runs/{point}/run.log)"]
    assert "aggregate" not in message and "job" not in message


def test_a_log_that_names_no_failed_job_says_where_to_look(tmp_path):
    log = tmp_path / "x.snakemake.log"
    log.write_text("Building DAG of jobs...\nError in rule run_point:\n    jobid: 3\n"
                   "    output: results/runs/a/b/n1-g0-r1-t1/rep1/native/metrics.json\n"
                   "Trying to restart job 3.\nFinished jobid: 3 (Rule: run_point)\n")
    message = failure_message([str(log)], "HINT", tmp_path)
    assert message.startswith(f"scalesweep: the run failed; Snakemake's log says why: {log}.")
    assert "point" not in message.split("says why")[0]
    assert failure_message([], "HINT").startswith(
        "scalesweep: the run failed; Snakemake's log says why: the output above.")


def test_slurms_out_of_memory_comes_first_in_a_points_reason():
    from scalesweep.measure.oomkill import slurm_oom_reason

    assert slurm_oom_reason("exit code 137 (signal SIGKILL in the job)", "OUT_OF_MEMORY") == \
        "out of memory (Slurm: OUT_OF_MEMORY): exit code 137 (signal SIGKILL in the job)"
    said = "out of memory (Slurm: Detected 1 oom_kill event in StepId=9.0): exit code 137"
    assert slurm_oom_reason(said, "OUT_OF_MEMORY") == said
    assert slurm_oom_reason("exit code 1", "FAILED") == "exit code 1"
    assert slurm_oom_reason(float("nan"), "") == ""


def test_the_closing_message_gives_the_last_attempts_reason_not_an_older_failure_json(tmp_path):
    """A failure.json left by an earlier failed attempt is not the reason of a later one
    that wrote none (its harness SIGKILLed: "no end recorded"; review of issue 40)."""
    from scalesweep.campaign.failed_run import point_reason

    (tmp_path / "failure.json").write_text(json.dumps(
        {"attempt": 1, "reason": "exit code 1", "log": "run.1.log"}))
    lines = [{"attempt": 1, "state": "failed", "reason": "exit code 1", "log": "run.1.log"},
             {"attempt": 2, "state": "failed", "reason": "no end recorded: its harness was "
              "killed", "log": "run.2.log"}]
    (tmp_path / "attempts.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    assert point_reason(tmp_path) == ("no end recorded: its harness was killed", "run.2.log")
    # the same attempt's failure.json is its reason
    (tmp_path / "failure.json").write_text(json.dumps(
        {"attempt": 2, "reason": "out of memory", "log": "run.2.log"}))
    assert point_reason(tmp_path) == ("out of memory", "run.2.log")
