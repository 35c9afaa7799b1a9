"""How an attempt ends when something fails around its measurement (review of #26).

* A measured metrics.json is never lost to what follows it: its hard-linked copy
  (metrics.<attempt>.json) failing with a real error from the kernel (ENOSPC from
  link(2)) leaves the run measured, its record done, and a line naming the copy.
* A Ctrl-C or SIGTERM while the harness stops what the payload left running is held,
  not dropped: the cleanup finishes, and the attempt ends failed by that signal,
  recorded at once, with no probe after it and no metrics.json.
* workflow/scripts/run_point.py (the harness as Snakemake runs it) writes each attempt's
  stderr into that attempt's log, also outside Snakemake where run.log is still the
  previous attempt's run.<n>.log; a staged dataset whose record is malformed or whose
  file cannot be read fails the point naming the file, never a traceback.

Real processes and files throughout: a harness in a process of its own
(tests/integration/test_reaper.py's), a payload of a few lines, run_point.py itself.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, tiny_config
from scalesweep.record.failures import read_attempts
from scalesweep.record.metrics import read_metrics, write_json_atomic
from test_reaper import HARNESS, gone_within, kill_all, launch_spec, wait_for

# Prepended to the harness's script: link(2) and linkat(2) fail with ENOSPC in this
# process and its children (a seccomp filter; x86_64), as on a file system that filled
# up between metrics.json and its copy. Nothing else is touched.
NO_LINKS = """\
import ctypes, errno, struct
def _no_links(err):
    AUDIT_ARCH_X86_64, LINK, LINKAT = 0xC000003E, 86, 265
    LD, JEQ, RET, ALLOW, ERRNO = 0x20, 0x15, 0x06, 0x7FFF0000, 0x00050000
    prog = [(LD, 0, 0, 4), (JEQ, 0, 3, AUDIT_ARCH_X86_64), (LD, 0, 0, 0),
            (JEQ, 2, 0, LINK), (JEQ, 1, 0, LINKAT), (RET, 0, 0, ALLOW), (RET, 0, 0, ERRNO | err)]
    code = ctypes.create_string_buffer(b"".join(struct.pack("HBBI", *i) for i in prog))
    class Prog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
    fprog = Prog(len(prog), ctypes.addressof(code))
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.prctl(38, 1, 0, 0, 0) == 0  # PR_SET_NO_NEW_PRIVS
    assert libc.prctl(22, 2, ctypes.byref(fprog), 0, 0) == 0  # PR_SET_SECCOMP, FILTER
_no_links(errno.ENOSPC)
"""

# a payload that leaves a daemon (own session), then writes its record and exits 0; on
# SIGTERM the daemon says so (<out dir>/stopping) and exits once <out dir>/release exists
SLOW_DAEMON = """\
import json, os, signal, sys, time
out = sys.argv[sys.argv.index("--out") + 1]
d = os.path.dirname(out)
if os.fork() == 0:
    os.setsid()
    def stop(*_):
        open(os.path.join(d, "stopping"), "w").close()
        while not os.path.exists(os.path.join(d, "release")):
            time.sleep(0.01)
        os._exit(0)
    signal.signal(signal.SIGTERM, stop)
    open(os.path.join(d, "daemon-up"), "w").close()
    time.sleep(300)
    os._exit(0)
while not os.path.exists(os.path.join(d, "daemon-up")):
    time.sleep(0.01)
json.dump({"workload": "stand-in", "payload_wall_s": 0.01}, open(out, "w"))
"""

POINT = "cnn_ddp/native/n1-g0-r1-t1/rep1/native"


def harness_env() -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env.update(PYTHONPATH=str(REPO / "workflow"), USER=os.environ.get("USER", "root"))
    return env


def seccomp_filters() -> bool:
    """Whether this process may install a seccomp filter (x86_64 Linux, not forbidden by
    the container): tried in a child process."""
    if os.uname().machine != "x86_64":
        return False
    probe = NO_LINKS + "import os\ntry:\n    os.link('/nonexistent-a', '/nonexistent-b')\n" \
        "except OSError as exc:\n    raise SystemExit(0 if exc.errno == errno.ENOSPC else 1)\n"
    return subprocess.run([sys.executable, "-c", probe], capture_output=True).returncode == 0


@pytest.mark.skipif(not seccomp_filters(), reason="no seccomp filter here (x86_64 Linux only)")
def test_a_copy_of_metrics_that_cannot_be_linked_keeps_the_measurement(tmp_path):
    """link(2) fails with ENOSPC when the harness keeps metrics.<attempt>.json: the run
    stays measured (exit 0, metrics.json as written, its attempt done), and stderr (the
    run's log under run_point.py) names the copy that could not be made and why."""
    out = tmp_path / "point"
    spec = launch_spec(tmp_path, out, "local")
    proc = subprocess.run([sys.executable, "-c", NO_LINKS + HARNESS, json.dumps(spec)],
                          env=harness_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert read_metrics(out / "metrics.json")["point"]["repeat"] == 1
    (attempt,) = read_attempts(out)
    assert attempt["state"] == "done", attempt
    assert not (out / "metrics.1.json").exists()
    assert (f"scalesweep: point {POINT} is measured (metrics.json written), but keeping "
            f"its copy {out / 'metrics.1.json'} failed: No space left on device") in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (out / "failure.json").exists() and not (out / "payload.json").exists()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=lambda s: s.name)
def test_a_signal_while_leftovers_are_stopped_ends_the_attempt_killed_by_it(tmp_path, sig):
    """The payload exits 0 leaving a daemon that is slow to stop; scancel's SIGTERM (or a
    Ctrl-C) reaches the harness while it waits for that daemon: the signal is recorded
    when it comes, the cleanup finishes (the daemon stopped and reaped), then the attempt
    ends failed by the signal: no probe after the run, no metrics.json."""
    out = tmp_path / "point"
    marker = str(tmp_path)
    spec = launch_spec(tmp_path, out, "local")
    (Path(spec["code_root"]) / "scripts" / "slow_daemon.py").write_text(SLOW_DAEMON)
    spec["payload"] = "scripts/slow_daemon.py"
    harness = subprocess.Popen([sys.executable, "-c", HARNESS, json.dumps(spec)],
                               env=harness_env(), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: (out / "stopping").exists(), "the harness stopping the daemon", 60)
        harness.send_signal(sig)
        wait_for(lambda: (out / "failure.json").exists(), "the signal recorded as it came", 15)
        (out / "release").touch()  # the daemon stops: the cleanup ends
        _, err = harness.communicate(timeout=60)
        survivors = gone_within(marker, 10)
    finally:
        harness.kill()
        kill_all(marker)
    assert harness.returncode == 128 + sig, err
    assert not survivors, survivors
    (attempt,) = read_attempts(out)
    assert (attempt["state"], attempt["reason"]) == ("failed", f"killed by signal {sig.name}")
    assert json.loads((out / "failure.json").read_text())["reason"] == attempt["reason"]
    assert not (out / "metrics.json").exists() and not (out / "metrics.1.json").exists()
    log = (out / "run.1.log").read_text()
    assert "# the payload left these running; stopped" in log and "slow_daemon.py" in log
    assert "# machine probe before" in log and "# machine probe after" not in log
    assert f"point {POINT} failed: killed by signal {sig.name}" in err


# --- run_point.py ---------------------------------------------------------------------------


def campaign(tmp_path: Path) -> tuple[Path, Path]:
    """A campaign directory with the workflow's effective config (as common.smk writes
    it) and the point's directory, where attempt 1 failed and left its log, run.1.log,
    and run.log (a hard link of it: what a run outside Snakemake finds)."""
    from scalesweep.plan.config import validated

    wd = tmp_path / "campaign"
    config = {**validated(tiny_config()), "_code_root": str(REPO)}
    write_json_atomic(wd / "config.json", config)
    out = wd / "results/runs" / POINT
    out.mkdir(parents=True)
    (out / "run.1.log").write_text("attempt 1's log\n")
    os.link(out / "run.1.log", out / "run.log")
    first = {"attempt": 1, "state": "failed", "reason": "exit code 1",
             "log": str(out / "run.1.log")}
    (out / "attempts.jsonl").write_text(json.dumps(first) + "\n")
    return wd, out


def run_point(wd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "workflow/scripts/run_point.py"),
                           "--config", "config.json", "--metrics",
                           f"results/runs/{POINT}/metrics.json"],
                          cwd=wd, env=harness_env(), capture_output=True, text=True, timeout=120)


def test_run_point_outside_snakemake_writes_its_stderr_to_this_attempt_s_log(tmp_path):
    """run.log still the previous attempt's run.1.log (Snakemake did not delete it):
    what the harness prints on stderr (here the point's failure: its dataset is not
    staged) goes to run.2.log, the new attempt's; run.1.log stays as it was."""
    wd, out = campaign(tmp_path)
    proc = run_point(wd)
    assert proc.returncode == 65, proc.stderr + (out / "run.log").read_text()
    assert (out / "run.1.log").read_text() == "attempt 1's log\n"
    assert (out / "run.2.log").samefile(out / "run.log")
    log = (out / "run.2.log").read_text()
    assert f"point {POINT} failed: the dataset is not as staged" in log, log
    assert "dataset directory does not exist" in log
    first, second = read_attempts(out)
    assert (first["attempt"], second["attempt"], second["state"]) == (1, 2, "failed")
    assert (wd / second["log"]).samefile(out / "run.2.log")  # the log its record names


def damage_state(key: str, value):
    def damage(ds: Path) -> None:
        state = json.loads((ds / "MANIFEST.state.json").read_text())
        if key == "files" and value == "a list":
            state["files"] = [[rel, entry] for rel, entry in state["files"].items()]
        elif key == "files" and value == "an entry a number":
            state["files"][sorted(state["files"])[0]] = 5
        else:
            state[key] = value
        (ds / "MANIFEST.state.json").write_text(json.dumps(state))
    return damage


def dangling_link(ds: Path) -> None:
    victim = sorted((ds / "a").iterdir())[0]
    victim.unlink()
    victim.symlink_to(ds / "gone.png")


DAMAGES = {
    "files a list": (damage_state("files", "a list"),
                     "MANIFEST.state.json: files is [['a/"),
    "an entry a number": (damage_state("files", "an entry a number"),
                          "MANIFEST.state.json: files['a/00000.png'] is 5, expected [size, "
                          "mtime_ns] (two integers)"),
    "written_ns text": (damage_state("written_ns", "yesterday"),
                        "MANIFEST.state.json: written_ns is 'yesterday', expected an integer"),
    "a dangling link": (dangling_link, "a/00000.png cannot be read (No such file or directory)"),
}


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_run_point_names_a_malformed_dataset_record_or_an_unreadable_file(tmp_path, damage):
    """The staged dataset's MANIFEST.state.json malformed (files a list, an entry a
    number, its time a text) or an image that cannot be read (a dangling link): the
    point fails before anything runs (exit 65), failure.json and the attempt's record
    name the file and how to restage the dataset; no traceback in the log."""
    from scalesweep.record.dataset import write_manifest

    wd, out = campaign(tmp_path)
    ds = wd / "resources/datasets/tiny"
    for cls in ("a", "b"):
        (ds / cls).mkdir(parents=True)
        for i in range(2):
            (ds / cls / f"{i:05d}.png").write_bytes(f"{cls}{i}".encode())
    write_manifest(ds)
    make, expected = DAMAGES[damage]
    make(ds)
    proc = run_point(wd)
    log = (out / "run.log").read_text()
    assert proc.returncode == 65, proc.stderr + log
    assert "Traceback" not in log + proc.stderr, log
    reason = json.loads((out / "failure.json").read_text())["reason"]
    assert reason.startswith("the dataset is not as staged, nothing was measured: "), reason
    assert expected in reason and "--forcerun resources/datasets/tiny" in reason, reason
    assert read_attempts(out)[-1]["reason"] == reason
    assert not (out / "payload.json").exists() and not (out / "metrics.json").exists()
