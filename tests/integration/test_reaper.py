"""Nothing of a run outlives it, and every attempt leaves its record (issue #26, 5 and 8).

The harness is a child subreaper (scalesweep.run.reaper): what a payload leaves running is
stopped and reaped when the payload ends or the harness is interrupted; a SIGKILLed
harness still takes its launcher's ranks and workers along (scalesweep.run.guard.
dies_with_harness); `scalesweep rerun` passes a Ctrl-C to Snakemake as Snakemake expects,
so that its jobs stop and it releases its lock. Each attempt has one line in
attempts.jsonl (written when it starts, completed when it ends) and its own log.

Real processes throughout: a harness runs a stand-in payload (a few lines of Python, or
two ranks of it under mpirun or torchrun) in a process of its own, as Snakemake starts it,
and is signalled or SIGKILLed; one test runs a tiny LLM campaign with `scalesweep rerun`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, SNAKEMAKE, config_text, have, measured_by, run_snakemake, tiny_config
from scalesweep.record.failures import NO_END_REASON, read_attempts

pytestmark = pytest.mark.integration

PROFILE = str(REPO / "profiles" / "local")
SCALESWEEP = str(Path(SNAKEMAKE).parent / "scalesweep")

# a harness as Snakemake runs one (run_point.py calls execute), in a process of its own:
# argv: the launch as JSON; it prints its pid, then exits with execute's status
HARNESS = """\
import json, os, sys
from scalesweep.plan.config import validated
from scalesweep.plan.sweep import SweepPoint
from scalesweep.platform.launch import Launch
from scalesweep.platform.site import load_site
from scalesweep.run.harness import execute
sys.path.insert(0, {tests!r})
from conftest import tiny_config
spec = json.loads(sys.argv[1])
point = SweepPoint.from_path(spec.pop("point"))
out = spec.pop("out")
measurement = validated(tiny_config())["measurement"]
print(os.getpid(), flush=True)
sys.exit(execute(point, Launch(**spec), os.path.join(out, "metrics.json"),
                 os.path.join(out, "run.log"),
                 measurement={{**measurement, "sample_interval_s": 0.2}}, site=load_site("local")))
""".format(tests=str(REPO / "tests"))

# the stand-in payload: rank 0 writes payload.json once <out>/go exists; with --stay it
# first waits there; with --ignore-sigint it ignores SIGINT; with --daemon it leaves a
# daemon behind (setsid and a double fork) that writes its parent's pid into <out>/adopted
STAND_IN = """\
import json, os, signal, sys, time
out = sys.argv[sys.argv.index("--out") + 1]
d = os.path.dirname(out)
rank = int(os.environ.get("OMPI_COMM_WORLD_RANK") or os.environ.get("RANK") or 0)
if "--ignore-sigint" in sys.argv:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
if "--daemon" in sys.argv and os.fork() == 0:
    os.setsid()
    middle = os.getpid()
    if os.fork() == 0:
        while os.getppid() == middle:  # until the middle process is gone: adopted
            time.sleep(0.01)
        with open(os.path.join(d, "adopted.tmp"), "w") as fh:
            fh.write(str(os.getppid()))
        os.replace(os.path.join(d, "adopted.tmp"), os.path.join(d, "adopted"))
        time.sleep(300)
    os._exit(0)
if "--daemon" in sys.argv:
    while not os.path.exists(os.path.join(d, "adopted")):
        time.sleep(0.01)
open(os.path.join(d, f"up-{rank}"), "w").close()
print(f"stand-in rank {rank} up", flush=True)
while "--stay" in sys.argv and not os.path.exists(os.path.join(d, "go")):
    time.sleep(0.05)
record = {"workload": "stand-in", "payload_wall_s": 0.01}
if "--record" in sys.argv:  # the payload's own record instead (a JSON object)
    record = json.loads(sys.argv[sys.argv.index("--record") + 1])
if rank == 0:
    json.dump(record, open(out, "w"))
"""


def stand_in(tmp_path: Path) -> Path:
    code = tmp_path / "code"
    (code / "scripts").mkdir(parents=True, exist_ok=True)
    (code / "scripts" / "stand_in.py").write_text(STAND_IN)
    return code


def launch_spec(tmp_path: Path, out: Path, launcher: str, *flags: str) -> dict:
    ranks = 1 if launcher == "local" else 2
    return {"point": f"cnn_ddp/native/n1-g0-r{ranks}-t1/rep1/native", "out": str(out),
            "runtime": "native", "launcher": launcher, "nodes": 1, "ranks_per_node": ranks,
            "threads": 1, "gpus_per_node": 0, "payload": "scripts/stand_in.py",
            "args": ["--out", str(out / "payload.json"), *flags],
            "code_root": str(stand_in(tmp_path)), "data_dir": str(tmp_path),
            "out_dir": str(out), "host_python": sys.executable}


def start_harness(spec: dict) -> tuple[subprocess.Popen, int]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env.update(PYTHONPATH=str(REPO / "workflow"), USER=os.environ.get("USER", "root"))
    proc = subprocess.Popen([sys.executable, "-c", HARNESS, json.dumps(spec)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return proc, int(proc.stdout.readline())


def pids_of(marker: str) -> list[int]:
    """Live processes (not zombies) whose command line or working directory holds
    ``marker`` (a test's own directory)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                continue
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            cwd = os.readlink(entry / "cwd") if marker not in cmd else ""
        except OSError:
            continue
        if marker in cmd or cwd == marker or cwd.startswith(marker + os.sep):
            found.append(int(entry.name))
    return found


def wait_for(predicate, what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.05)


def gone_within(marker: str, seconds: float) -> list[int]:
    """The processes of ``marker`` still alive ``seconds`` from now (or none, sooner)."""
    deadline = time.monotonic() + seconds
    while pids_of(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    return pids_of(marker)


def kill_all(marker: str) -> None:
    """Only if a test failed: never leave its processes running."""
    for pid in pids_of(marker):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


# --- the harness as a subreaper ------------------------------------------------------------


def test_a_daemon_the_payload_leaves_is_adopted_stopped_and_reaped(tmp_path):
    """The payload daemonizes a process (setsid, double fork) and exits 0: the daemon is
    re-parented to the harness (not to init), which stops it when the payload has ended;
    the run is kept, and its record and log name what was stopped."""
    out = tmp_path / "point"
    marker = str(tmp_path)
    harness, hpid = start_harness(launch_spec(tmp_path, out, "local", "--daemon"))
    try:
        _, err = harness.communicate(timeout=120)
        assert harness.returncode == 0, err + (out / "run.log").read_text()
        assert (out / "adopted").read_text() == str(hpid)  # its subreaper: the harness
        assert pids_of(marker) == []  # stopped and reaped before the harness returned
    finally:
        harness.kill()
        kill_all(marker)
    (attempt,) = read_attempts(out)
    assert attempt["state"] == "done" and len(attempt["left_running"]) == 1
    assert "stand_in.py" in attempt["left_running"][0]
    log = (out / "run.1.log").read_text()
    assert "# the payload left these running; stopped (SIGTERM, then SIGKILL" in log
    assert (out / "metrics.json").is_file()


def sigkill_the_harness_mid_run(tmp_path: Path, out: Path, launcher: str) -> list[int]:
    """Start a harness whose payload waits (its ranks up), SIGKILL it; the processes of
    the point still alive 10 s later."""
    ranks = 1 if launcher == "local" else 2
    marker = str(tmp_path)
    harness, _ = start_harness(launch_spec(tmp_path, out, launcher, "--stay"))
    try:
        wait_for(lambda: all((out / f"up-{r}").exists() for r in range(ranks)), "ranks up")
        running = [p for p in pids_of(marker) if p != harness.pid]
        assert len(running) >= (1 if ranks == 1 else 3), running  # launcher and ranks
        harness.kill()
        harness.wait()
        t_kill = time.monotonic()
        survivors = gone_within(marker, 10)
        print(f"{launcher}: the payload gone {time.monotonic() - t_kill:.1f} s after the SIGKILL")
        if survivors:  # who they are, for the failure's report
            print(subprocess.run(["ps", "-o", "pid,ppid,pgid,sid,stat,args", "-p",
                                  ",".join(map(str, survivors))], capture_output=True,
                                 text=True).stdout)
        return survivors
    finally:
        harness.kill()
        kill_all(marker)


LAUNCHED_BY = {"mpirun": "mpirun -n 2", "torchrun": "-m torch.distributed.run"}  # in the log


@pytest.mark.parametrize("launcher", sorted(LAUNCHED_BY))
def test_sigkill_of_the_harness_stops_the_launcher_and_its_ranks(tmp_path, launcher):
    """kill -9 of the harness while 2 ranks run (mpirun starts them in process groups of
    their own, torchrun in sessions of their own): no process of the point is alive 10 s
    later, and the attempt's record says it ended without a record, naming its log."""
    if launcher == "mpirun" and not have("mpirun"):
        pytest.skip("mpirun not installed (apt-get install openmpi-bin)")
    if launcher == "torchrun":
        pytest.importorskip("torch.distributed.run")
    out = tmp_path / "point"
    survivors = sigkill_the_harness_mid_run(tmp_path, out, launcher)
    assert not survivors, f"outlived their harness by 10 s: {survivors}"
    (killed,) = read_attempts(out)
    assert (killed["attempt"], killed["state"], killed["reason"]) == (1, "failed", NO_END_REASON)
    log = Path(killed["log"]).read_text()
    assert LAUNCHED_BY[launcher] in log and "stand-in rank 1 up" in log


def test_a_sigkilled_attempt_keeps_its_record_and_log_after_the_next_one(tmp_path):
    """The harness SIGKILLed mid-run, then the point run again to its end: attempts.jsonl
    has one line each (the first marked failed: no end recorded), each attempt its own
    log (run.1.log, run.2.log; run.log the last one's), the first never overwritten."""
    out = tmp_path / "point"
    assert not sigkill_the_harness_mid_run(tmp_path, out, "local")
    first_log = (out / "run.1.log").read_text()
    assert "stand-in rank 0 up" in first_log
    (out / "go").touch()  # the next attempt runs to its end
    again, _ = start_harness(launch_spec(tmp_path, out, "local", "--stay"))
    _, err = again.communicate(timeout=300)
    assert again.returncode == 0, err
    lines = (out / "attempts.jsonl").read_text().splitlines()
    assert len(lines) == 2, lines  # one line per attempt
    assert json.loads(lines[0])["reason"] == NO_END_REASON  # now in the file itself
    first, second = read_attempts(out)
    assert (first["attempt"], first["state"], first["log"]) == (1, "failed", str(out / "run.1.log"))
    assert (second["attempt"], second["state"], second["log"]) == (2, "done", str(out / "run.2.log"))
    assert (out / "run.1.log").read_text() == first_log  # not overwritten
    assert (out / "run.log").read_text() == (out / "run.2.log").read_text() != first_log
    assert (out / "metrics.json").is_file() and not (out / "failure.json").exists()
    # the measurement's own copy (a hard link), kept when Snakemake deletes metrics.json
    # to run the point again (its dataset staged anew)
    assert (out / "metrics.2.json").samefile(out / "metrics.json")
    assert not (out / "metrics.1.json").exists()  # the killed attempt measured nothing
    (out / "metrics.json").unlink()
    assert json.loads((out / "metrics.2.json").read_text())["point"]["repeat"] == 1


def test_a_payload_that_outlives_the_harness_s_sigint_leaves_one_failed_record(tmp_path):
    """Ctrl-C reaches the harness (SIGINT) and the payload ignores it, then exits 0: the
    attempt has one record, failed by the SIGINT (the interrupted run is not kept)."""
    out = tmp_path / "point"
    marker = str(tmp_path)
    harness, _ = start_harness(launch_spec(tmp_path, out, "local", "--stay", "--ignore-sigint"))
    try:
        wait_for(lambda: (out / "up-0").exists(), "the payload up")
        harness.send_signal(signal.SIGINT)
        wait_for(lambda: (out / "failure.json").exists(), "the failure recorded at the signal")
        (out / "go").touch()  # the payload goes on and exits 0
        _, err = harness.communicate(timeout=120)
    finally:
        harness.kill()
        kill_all(marker)
    assert harness.returncode == 128 + signal.SIGINT, err
    lines = (out / "attempts.jsonl").read_text().splitlines()
    assert len(lines) == 1, lines
    (attempt,) = read_attempts(out)
    assert attempt["state"] == "failed" and attempt["attempt"] == 1
    assert attempt["reason"].startswith("killed by signal SIGINT; the payload went on and "
                                        "exited 0"), attempt["reason"]
    assert json.loads((out / "failure.json").read_text())["reason"] == attempt["reason"]
    assert not (out / "metrics.json").exists()
    assert f"failed: {attempt['reason']}; log: {out / 'run.1.log'}" in err


# --- Ctrl-C of `scalesweep rerun` during a long LLM request ---------------------------------

LLM_POINT = "llm/native/n1-g0-r1-t1/rep1/native"


def have_llm_stack() -> bool:
    """llama.cpp's server, and what the synthetic model is made with."""
    try:
        import gguf  # noqa: F401
        import llama_cpp  # noqa: F401
        import tokenizers  # noqa: F401
    except Exception:
        return False
    return True


@pytest.mark.skipif(not have_llm_stack(), reason="llama_cpp, gguf or tokenizers not importable")
def test_ctrl_c_of_rerun_during_a_long_llm_request_stops_everything_and_the_lock(tmp_path):
    """`kill -INT` of `scalesweep rerun` while the llama.cpp server generates a long
    answer (its generation does not stop on SIGTERM): 10 s later no process of the run is
    alive (Snakemake, the harness, the payload, the server) and Snakemake's lock is gone;
    the point is failed by the SIGINT, with its own log; the next run plans exactly it."""
    config = tiny_config(models={"tiny_llm": {"source": "synthetic"}})
    config["workloads"] = {"llm": {"payload": "llm", "model": "tiny_llm", "max_tokens": 1500,
                                   "warmup": 0, "num_requests": 1,
                                   "sweep": {"ranks_per_node": [1], "baseline": None}}}
    wd = tmp_path / "campaign"
    (wd / "config").mkdir(parents=True)
    (wd / "config" / "config.yaml").write_text(config_text(config))
    point = wd / "results/runs" / LLM_POINT
    env = dict(os.environ, USER=os.environ.get("USER", "root"))
    rerun = subprocess.Popen([SCALESWEEP, "rerun", "--missing", "--profile", PROFILE], cwd=wd,
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    marker = str(wd)
    try:
        # the request is answered (its access line), tokens streaming: generation under way
        wait_for(lambda: "POST /v1/chat/completions" in (
            (point / "server.log").read_text(errors="replace")
            if (point / "server.log").exists() else ""), "the request in flight", 300)
        time.sleep(2)  # well into its 1500 tokens (~40 per second here, no early stop)
        assert rerun.poll() is None
        running = pids_of(marker)
        assert len(running) >= 4, running  # snakemake, its job's shell, harness, payload, server
        os.kill(rerun.pid, signal.SIGINT)
        t_kill = time.monotonic()
        output, _ = rerun.communicate(timeout=120)
        print(f"rerun ended {time.monotonic() - t_kill:.1f} s after SIGINT")
        survivors = gone_within(marker, 10 - (time.monotonic() - t_kill))
        assert not survivors, f"alive 10 s after the SIGINT: {survivors}"
    finally:
        rerun.kill()
        kill_all(marker)
    assert rerun.returncode != 0
    assert "scalesweep rerun: SIGINT: stopping Snakemake and its jobs" in output, output[-3000:]
    locks = wd / ".snakemake" / "locks"
    assert not (locks.is_dir() and list(locks.iterdir())), list(locks.iterdir())
    (attempt,) = read_attempts(point)
    assert attempt["state"] == "failed" and attempt["reason"] == "killed by signal SIGINT"
    assert attempt["log"] == f"results/runs/{LLM_POINT}/run.1.log"
    assert "infer_llm: FAILED: interrupted" in (wd / attempt["log"]).read_text()
    payload = json.loads((point / "payload.json").read_text())
    assert payload["error"] == "interrupted"
    print(f"the server's exit status: {payload['server_returncode']}")  # -9: it needed SIGKILL
    assert not (point / "metrics.json").exists()
    plan = run_snakemake(wd, "--profile", PROFILE, "-n")
    assert measured_by(plan.stdout) == [LLM_POINT]


def test_rerun_releases_the_lock_of_a_snakemake_that_was_killed(tmp_path, capsys):
    """Snakemake SIGKILLed under `scalesweep rerun` (its Ctrl-C path never runs): once it
    has ended, the rerun finds its lock left (its owner gone) and releases it, saying so."""
    import threading

    from scalesweep.campaign.rerun import run_snakemake as rerun_snakemake
    from scalesweep.campaign.status import snakemake_pids

    (tmp_path / "Snakefile").write_text(
        'rule all:\n    output: "done"\n    shell: "touch started; sleep 60; touch {output}"\n')
    cmd = [SNAKEMAKE, "-s", str(tmp_path / "Snakefile"), "--cores", "1",
           "--directory", str(tmp_path)]
    locks = tmp_path / ".snakemake" / "locks"

    def kill_snakemake():
        wait_for(lambda: (tmp_path / "started").exists(), "the job started")
        assert list(locks.iterdir())  # locked while it runs
        for pid in snakemake_pids(tmp_path):
            os.kill(pid, signal.SIGKILL)

    killer = threading.Thread(target=kill_snakemake, daemon=True)
    killer.start()
    try:
        rc = rerun_snakemake(cmd, tmp_path)
    finally:
        killer.join(timeout=130)
        kill_all(str(tmp_path))  # its job's shell, orphaned
    assert rc == 128 + signal.SIGKILL
    err = capsys.readouterr().err
    assert f"Snakemake ended (-9) and left its lock ({locks}/" in err, err
    assert "--unlock" in err
    assert not (locks.is_dir() and list(locks.iterdir()))


def test_a_payload_record_its_readers_cannot_use_fails_the_attempt_and_keeps_no_metrics(tmp_path):
    """A payload that exits 0 with a field every reader of metrics.json would refuse
    (scalesweep.record.metrics.FIELDS: here an LLM record's ttft_s "n/a") fails its attempt, with
    the field, the value and the expected kind named: no metrics.json, so a plain re-run
    measures the point again."""
    out = tmp_path / "point"
    bad = {"workload": "llm_inference", "payload_wall_s": 0.01, "wall_s": 1.0,
           "ttft_s": "n/a", "latency_s": {"n": 1, "mean": 0.5}}
    harness, _ = start_harness(launch_spec(tmp_path, out, "local", "--record", json.dumps(bad)))
    try:
        _, err = harness.communicate(timeout=120)
    finally:
        harness.kill()
        kill_all(str(tmp_path))
    assert harness.returncode == 70, err
    assert not (out / "metrics.json").exists()
    failure = json.loads((out / "failure.json").read_text())
    assert "payload.json: ttft_s is 'n/a', expected a mapping of statistics" in failure["reason"]
    (attempt,) = read_attempts(out)
    assert attempt["state"] == "failed" and attempt["reason"] == failure["reason"]


def test_a_hang_up_of_rerun_stops_snakemake_as_a_ctrl_c_and_its_lock_goes(tmp_path):
    """The terminal or ssh session of `scalesweep rerun` gone (SIGHUP to it alone):
    Snakemake, in a process group of its own, gets a Ctrl-C's SIGINT, stops its job and
    releases its lock; nothing of it runs on unwatched."""
    (tmp_path / "Snakefile").write_text(
        'rule all:\n    output: "done"\n    shell: "touch started; sleep 60; touch {output}"\n')
    cmd = [SNAKEMAKE, "-s", str(tmp_path / "Snakefile"), "--cores", "1",
           "--directory", str(tmp_path)]
    code = ("import sys; from pathlib import Path; from scalesweep.campaign.rerun import run_snakemake; "
            f"sys.exit(run_snakemake({cmd!r}, Path({str(tmp_path)!r})))")
    env = {**os.environ, "PYTHONPATH": str(REPO / "workflow")}
    rerun = subprocess.Popen([sys.executable, "-c", code], env=env, stderr=subprocess.PIPE,
                             text=True, start_new_session=True)
    try:
        wait_for(lambda: (tmp_path / "started").exists(), "the job started")
        rerun.send_signal(signal.SIGHUP)
        _, err = rerun.communicate(timeout=60)
        survivors = gone_within(str(tmp_path), 10)
    finally:
        rerun.kill()
        kill_all(str(tmp_path))
    assert "SIGHUP: stopping Snakemake and its jobs" in err, err
    assert rerun.returncode != 0 and not (tmp_path / "done").exists()
    assert not survivors, survivors
    locks = tmp_path / ".snakemake" / "locks"
    assert not (locks.is_dir() and list(locks.iterdir())), err
