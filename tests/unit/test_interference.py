"""Interference measured during a run: real processes, the real /proc (no mocks).

A CPU hog without the run's token beside a CPU-bound child with it must mark the run
disturbed; the same run without the hog must not be. The harness (``execute``) records
the interference, the allocation and the run's place in its block in metrics.json.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, fake_payload_launch, tiny_config
from scalesweep.measure.interference import (
    METHOD,
    TOKEN_VAR,
    Monitor,
    assess,
    has_token,
    new_token,
    own_processes,
)

NODE_KEYS = {"host", "ncpu", "window_s", "busy_cpu_s", "own_cpu_s", "outside_cpu_s",
             "outside_cpu_pct", "steal_pct", "load1_start", "load1_end", "load1_max", "samples"}
RECORD_KEYS = {"method", "window_s", "nodes", "outside_cpu_pct_max", "steal_pct_max", "load1_max",
               "thresholds", "disturbed", "reasons"}
HOG = [sys.executable, "-c", "while True: pass"]


def burn(seconds: float) -> list[str]:
    """A CPU-bound python process that spins for ``seconds`` of wall time."""
    return [sys.executable, "-c",
            f"import time\nt = time.monotonic()\nwhile time.monotonic() - t < {seconds}: pass"]


def node(host="n1", outside=0.0, steal=0.0, load=0.5, window=10.0):
    return {"host": host, "ncpu": 4, "window_s": window, "busy_cpu_s": 1.0, "own_cpu_s": 1.0,
            "outside_cpu_s": 0.0, "outside_cpu_pct": outside, "steal_pct": steal,
            "load1_start": load, "load1_end": load, "load1_max": load, "samples": 20}


# ---------------------------------------------------------------------- assess (pure)


def test_outside_cpu_counts_against_the_cores_a_run_leaves_busy():
    """The same outside use (6% of a 2-core node over 10 s: 1.2 CPU s) disturbs a run
    of 2 ranks, which leaves no core idle, and not a run of 1, whose idle core absorbs it;
    half the node used outside still spares the 1-rank run (issue 39's measurements)."""
    def rec(outside_pct):
        n = node("vm", outside_pct, 0.0, window=10.0)
        return {**n, "ncpu": 2, "outside_cpu_s": outside_pct / 100 * 2 * 10.0}

    two = assess([rec(6.0)], 10, 5, cores_used=2, max_stolen_cpu_pct=3)
    assert two["disturbed"] and two["nodes"][0]["stolen_cpu_pct"] == 6.0
    assert two["reasons"] == ["vm: outside processes took 6.0% of the time of the 2 cores "
                              "the run uses (6.0% of the node's CPUs, no core left idle; "
                              "threshold 3%)"]
    one = assess([rec(6.0)], 10, 5, cores_used=1, max_stolen_cpu_pct=3)
    assert not one["disturbed"] and one["nodes"][0]["stolen_cpu_pct"] == 0.0
    # beyond the idle core: 60% of the node is 1.2 cores, 0.2 of them the run's
    assert assess([rec(60.0)], 100, 5, cores_used=1,
                  max_stolen_cpu_pct=3)["nodes"][0]["stolen_cpu_pct"] == 20.0
    # the node's own threshold still holds, named once
    both = assess([rec(12.0)], 10, 5, cores_used=2, max_stolen_cpu_pct=3)
    assert len(both["reasons"]) == 1 and "of the node's CPUs (threshold 10%)" in both["reasons"][0]
    # the input records are not changed
    r = rec(6.0)
    assess([r], 10, 5, cores_used=2, max_stolen_cpu_pct=3)
    assert "stolen_cpu_pct" not in r


def test_assess_thresholds_and_reasons():
    quiet = assess([node("n1", 2.0, 0.0), node("n2", 9.9, 4.9, load=3.0, window=12.0)], 10, 5)
    assert set(quiet) == RECORD_KEYS
    assert quiet["method"] == METHOD
    assert not quiet["disturbed"] and quiet["reasons"] == []
    assert (quiet["outside_cpu_pct_max"], quiet["steal_pct_max"], quiet["load1_max"]) == (9.9, 4.9, 3.0)
    assert quiet["window_s"] == 12.0
    assert quiet["thresholds"] == {"max_outside_cpu_pct": 10.0, "max_steal_pct": 5.0,
                                   "max_stolen_cpu_pct": None}  # not judged without cores

    loud = assess([node("n1", 48.7), node("n2", 3.0, 7.25)], 10, 5)
    assert loud["disturbed"]
    assert loud["reasons"] == [
        "n1: outside processes used 48.7% of the node's CPUs (threshold 10%)",
        "n2: steal time was 7.2% of the node's CPU time (threshold 5%)",
    ]
    # no steal field on the node: None, never a breach
    none = assess([node("n1", 1.0, None)], 10, 5)
    assert none["steal_pct_max"] is None and not none["disturbed"]
    # exactly at the threshold is not above it
    assert not assess([node("n1", 10.0, 5.0)], 10, 5)["disturbed"]


# ---------------------------------------------------------------------- the token filter


def test_token_filter_finds_the_child_with_the_token_only():
    token = new_token()
    sleep = [sys.executable, "-c", "import time; time.sleep(30)"]
    mine = subprocess.Popen(sleep, env={**os.environ, TOKEN_VAR: token})
    other = subprocess.Popen(sleep, env={**os.environ, TOKEN_VAR: token + "x"})
    plain = subprocess.Popen(sleep)
    try:
        deadline = time.monotonic() + 10  # until the children have exec'd
        while mine.pid not in own_processes(token) and time.monotonic() < deadline:
            time.sleep(0.05)
        own = own_processes(token)
        assert mine.pid in own
        assert other.pid not in own and plain.pid not in own and os.getpid() not in own
        assert has_token(mine.pid, token) and not has_token(plain.pid, token)
    finally:
        for p in (mine, other, plain):
            p.kill()
            p.wait()


def test_a_process_that_gets_the_token_at_exec_counts_as_own():
    """Between fork and exec a child has its parent's environment (no token): a young
    process is checked again until it carries the token."""
    token = new_token()
    code = ("import os, sys, time\ntime.sleep(1.0)\n"
            f"os.execve(sys.executable, {burn(1.5)!r}, {{**os.environ, {TOKEN_VAR!r}: {token!r}}})")
    with Monitor(token, 0.2) as monitor:
        child = subprocess.Popen([sys.executable, "-c", code])
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)
    rec = monitor.stop()
    child_cpu = usage.ru_utime + usage.ru_stime
    print(f"exec'd with the token: {rec}; child CPU {child_cpu:.2f} s")
    assert child.returncode == 0 and child_cpu > 0.3
    assert child_cpu - 0.3 <= rec["own_cpu_s"] <= child_cpu + 0.5, rec


def _fake_proc(root: Path, busy: int, procs: dict[int, tuple]) -> None:
    """A /proc with the files the monitor reads: ``procs`` maps pid -> (ppid, self
    ticks, children ticks, starttime, environment)."""
    for old in root.glob("[0-9]*"):
        for f in old.iterdir():
            f.unlink()
        old.rmdir()
    root.mkdir(exist_ok=True)
    (root / "stat").write_text(f"cpu  {busy} 0 0 100000 0 0 0 0 0 0\n")
    (root / "loadavg").write_text("0.50 0.40 0.30 1/100 999\n")
    (root / "uptime").write_text("1000.00 1900.00\n")
    for pid, (ppid, self_t, children_t, start, env) in procs.items():
        d = root / str(pid)
        d.mkdir()
        fields = ["S", ppid] + [0] * 9 + [self_t, 0, children_t, 0] + [0] * 4 + [start]
        (d / "stat").write_text(f"{pid} (a (b) c) " + " ".join(map(str, fields)) + "\n")
        (d / "environ").write_bytes(b"\0".join(f"{k}={v}".encode() for k, v in env.items()))


def test_reap_correction_on_a_fake_proc(tmp_path):
    """A child seen last at 50 ticks, then reaped by its (tracked) parent, whose cutime
    grows by the child's final 80: the run's own CPU is 80 + the parent's own, not 130
    (counted twice) nor 50 (the child's last sample)."""
    proc, token, parent = tmp_path / "proc", new_token(), 4242
    env = {TOKEN_VAR: token}
    born = 1000 * os.sysconf("SC_CLK_TCK") + 5  # after the window started (uptime 1000 s)
    _fake_proc(proc, 0, {parent: (1, 10, 0, 1, {})})
    monitor = Monitor(token, 3600, pids=(parent,), proc=str(proc)).start()
    _fake_proc(proc, 60, {parent: (1, 11, 0, 1, {}), parent + 1: (parent, 50, 0, born, env)})
    with monitor._lock:
        monitor._sample()
    _fake_proc(proc, 100, {parent: (1, 12, 80, 1, {})})  # the child reaped
    rec = monitor.stop()
    tick = os.sysconf("SC_CLK_TCK")
    assert rec["own_cpu_s"] == round((80 + 2) / tick, 3), rec
    assert rec["busy_cpu_s"] == round(100 / tick, 3) and rec["samples"] == 3


def test_a_container_process_reaped_outside_the_tree_counts_by_its_own_entry(tmp_path):
    """Podman: the container's process (the token, from --env-host) is a child of conmon,
    which Podman starts with an environment of its own (no token) and which the harness
    (a subreaper, the rusage root) reaps only after the window. The process's CPU, gone
    with it into conmon's children time, is the run's own: its entry counts (before this,
    every podman run was flagged disturbed, its payload's CPU counted as outside)."""
    proc, token, root = tmp_path / "proc", new_token(), os.getpid()
    conmon, payload = root + 100000, root + 100001
    env = {TOKEN_VAR: token}
    born = 1000 * os.sysconf("SC_CLK_TCK") + 5
    _fake_proc(proc, 0, {root: (1, 0, 0, 1, env)})
    monitor = Monitor(token, 3600, proc=str(proc), rusage_root=True).start()
    _fake_proc(proc, 60, {root: (1, 0, 0, 1, env), conmon: (root, 1, 0, born, {}),
                          payload: (conmon, 50, 0, born, env)})
    with monitor._lock:
        monitor._sample()
    _fake_proc(proc, 100, {root: (1, 0, 0, 1, env), conmon: (root, 1, 80, born, {})})  # reaped by conmon
    rec = monitor.stop()
    tick = os.sysconf("SC_CLK_TCK")
    assert 50 / tick <= rec["own_cpu_s"] <= 50 / tick + 0.5, rec  # its last sample, + the harness's own


# ---------------------------------------------------------------------- real hog, real run


def measured_run(token: str, seconds: float, interval: float = 0.5) -> tuple[dict, float]:
    """The monitor around a CPU-bound child with the token: (node record, child's CPU s)."""
    with Monitor(token, interval) as monitor:
        child = subprocess.Popen(burn(seconds), env={**os.environ, TOKEN_VAR: token})
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)
    return monitor.stop(), usage.ru_utime + usage.ru_stime


def assert_counted_once(rec: dict, child_cpu: float, interval: float = 0.5) -> None:
    """The child's CPU is the run's own, counted once. Sampling /proc sees the child last
    up to one interval before it exits; its parent's cutime (grown at the reap) normally
    makes up the rest, but a sample racing the reap can miss it (CI saw 0.47 s of 5.01 s
    missing once), so the floor is one interval. Counted twice (the child's entry and its
    parent's cutime) it would be ~2x: the ceiling catches that. The reap correction
    itself is tested exactly on a fake /proc (test_reap_correction_on_a_fake_proc)."""
    assert child_cpu - interval - 0.1 <= rec["own_cpu_s"] <= child_cpu + 0.5, (rec, child_cpu)


def test_cpu_hog_beside_the_run_marks_it_disturbed():
    hog = subprocess.Popen(HOG)  # no token: someone else's process
    try:
        time.sleep(0.3)
        rec, child_cpu = measured_run(new_token(), 5.0)
    finally:
        hog.kill()  # reaped only after the window: its CPU never reaches our cutime
        hog.wait()
    verdict = assess([rec], max_outside_cpu_pct=10, max_steal_pct=100)
    print(f"with hog: {json.dumps(rec)}; child CPU {child_cpu:.2f} s")
    assert set(rec) == NODE_KEYS
    assert rec["samples"] >= 8 and 4.5 < rec["window_s"] < 15
    # the hog alone keeps one of the node's CPUs busy for the whole window
    assert rec["outside_cpu_s"] >= 0.6 * rec["window_s"]
    assert rec["outside_cpu_pct"] >= 0.6 * 100 / rec["ncpu"] > 10
    assert verdict["disturbed"] and "outside processes used" in verdict["reasons"][0]
    assert_counted_once(rec, child_cpu)


# ---------------------------------------------------------------------- one monitor per node


def test_watch_writes_the_node_record_when_the_stop_file_appears(tmp_path):
    token = new_token()
    env = {**os.environ, TOKEN_VAR: token, "PYTHONPATH": str(REPO / "workflow")}
    cmd = [sys.executable, "-m", "scalesweep.measure.interference", "watch", "--token", token,
           "--interval", "0.2", "--out", str(tmp_path / "{host}.json"),
           "--stop-file", str(tmp_path / "stop"), "--ready-file", str(tmp_path / "ready-{host}")]
    proc = subprocess.Popen(cmd, env=env, cwd=tmp_path)
    deadline = time.monotonic() + 30
    while not list(tmp_path.glob("ready-*")) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert list(tmp_path.glob("ready-*")), "the monitor never got ready"
    burner = subprocess.Popen(burn(1.0), env={**os.environ, TOKEN_VAR: token})
    _, status, usage = os.wait4(burner.pid, 0)
    burner.returncode = os.waitstatus_to_exitcode(status)
    (tmp_path / "stop").touch()
    assert proc.wait(timeout=30) == 0
    [out] = tmp_path.glob("*.json")
    rec = json.loads(out.read_text())
    assert set(rec) == NODE_KEYS and out.stem == rec["host"]
    # the burner carried the token (seen last up to one interval before it ended)
    assert rec["own_cpu_s"] >= usage.ru_utime + usage.ru_stime - 0.3 > 0


def _fake_srun(tmp_path: Path, body: str) -> dict:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text("#!/bin/sh\n" + body)
    (bin_dir / "srun").chmod(0o755)
    return {"PATH": f"{bin_dir}:{os.environ['PATH']}"}


def measurement(**values) -> dict:
    """The config's ``measurement`` section as validation leaves it (the schema's
    defaults filled in), with ``values``: what the harness is given."""
    from scalesweep.plan.config import validated

    return {**validated(tiny_config())["measurement"], **values}


def _probe(tmp_path: Path, monkeypatch, srun_body: str) -> dict:
    import scalesweep.run.watchers
    from scalesweep.run.watchers import InterferenceProbe
    from scalesweep.platform.launch import Launch

    monkeypatch.setenv("PATH", _fake_srun(tmp_path, srun_body)["PATH"])
    # one stand-in watcher for two nodes: do not wait the real minute for the second
    monkeypatch.setattr(scalesweep.run.watchers, "WATCHERS_READY_TIMEOUT_S", 5)
    out = tmp_path / "point"
    out.mkdir()
    launch = Launch(runtime="native", launcher="srun", nodes=2, ranks_per_node=1, threads=1,
                    gpus_per_node=0, payload="scripts/x.py", args=(), code_root=str(REPO),
                    data_dir=str(tmp_path), out_dir=str(out), host_python=sys.executable)
    token = new_token()
    probe = InterferenceProbe(launch, dict(os.environ), out, token,
                              measurement(sample_interval_s=0.2), str(tmp_path / "run.log"))
    probe.start()
    time.sleep(0.5)
    return probe.stop()


def test_multinode_monitors_run_through_srun_and_merge(tmp_path, monkeypatch):
    # a stand-in srun: the command once, here, with the options dropped
    rec = _probe(tmp_path, monkeypatch,
                 'while [ "${1#-}" != "$1" ]; do shift; done\nexec "$@"\n')
    log = (tmp_path / "run.log").read_text()
    assert "srun --overlap --nodes=2 --ntasks=2 --ntasks-per-node=1" in log
    assert "-m scalesweep.measure.interference watch" in log
    # the watcher ran on this host, whose record the harness's own monitor gives
    assert (tmp_path / "point" / "interference" / f"{rec['nodes'][0]['host']}.json").is_file()
    assert len(rec["nodes"]) == 1
    assert rec["nodes_monitored"] == {"requested": 2, "monitored": 1,
                                      "note": "per-node monitors wrote 1 of 2 records"}


def test_multinode_monitors_fall_back_to_the_local_node(tmp_path, monkeypatch):
    rec = _probe(tmp_path, monkeypatch, "echo 'srun: error: no such step' >&2\nexit 1\n")
    assert set(rec) == RECORD_KEYS | {"nodes_monitored"} and len(rec["nodes"]) == 1
    assert rec["nodes_monitored"]["monitored"] == 1
    assert "per-node monitors exited (1)" in rec["nodes_monitored"]["note"]


# ---------------------------------------------------------------------- through the harness


FAKE_PAYLOAD = """\
import json, sys, time
out = sys.argv[sys.argv.index("--out") + 1]
t = time.monotonic()
while time.monotonic() - t < float(sys.argv[sys.argv.index("--seconds") + 1]):
    pass
json.dump({"workload": "fake", "payload_wall_s": time.monotonic() - t}, open(out, "w"))
"""


def test_execute_records_interference_allocation_and_order(tmp_path, monkeypatch):
    from scalesweep.plan.config import validated
    from scalesweep.run.harness import execute
    from scalesweep.platform.site import load_site
    from scalesweep.plan.sweep import run_order, sweep_points

    for var in [v for v in os.environ if v.startswith("SLURM_")]:
        monkeypatch.delenv(var)
    monkeypatch.setenv("SCALESWEEP_GIT_COMMIT", "0" * 40)
    config = validated(tiny_config())
    config["sweep"].update(runtimes=["native", "charliecloud"], ranks_per_node=[1], repeats=2)
    point = [p for p in sweep_points(config) if p.runtime == "charliecloud" and p.repeat == 2][0]
    launch, out = fake_payload_launch(tmp_path, FAKE_PAYLOAD, point, "--seconds", "3")
    hog = subprocess.Popen(HOG)
    try:
        rc = execute(point, launch, str(out / "metrics.json"), str(out / "run.log"),
                     measurement=measurement(max_outside_cpu_pct=10, max_steal_pct=100,
                                             sample_interval_s=0.25),
                     site=load_site("local-slurm"), order=run_order(point, config))
    finally:
        hog.kill()
        hog.wait()
    assert rc == 0, (out / "run.log").read_text()
    m = json.loads((out / "metrics.json").read_text())
    i = m["interference"]
    print(f"through execute, with hog: {json.dumps(i['nodes'])}")
    assert RECORD_KEYS <= set(i) and set(i["nodes"][0]) == NODE_KEYS | {"cores_used",
                                                                          "stolen_cpu_pct"}
    assert i["nodes"][0]["cores_used"] == 1  # 1 rank x 1 thread
    assert i["nodes_monitored"] == {"requested": 1, "monitored": 1, "note": None}
    assert m["disturbed"] is True and i["disturbed"] is True
    assert i["thresholds"] == {"max_outside_cpu_pct": 10.0, "max_steal_pct": 100.0,
                               "max_stolen_cpu_pct": 100.0}
    assert i["outside_cpu_pct_max"] > 10 and 2.5 < i["window_s"] < 20
    assert i["nodes"][0]["own_cpu_s"] >= 1.0  # the payload (token) is the run's own
    a = m["allocation"]
    cpus = sorted(os.sched_getaffinity(0))
    assert a == {"site": "local-slurm", "hosts": [os.uname().nodename], "exclusive": None,
                 "shared_cores": True,
                 "cpus_bound": a["cpus_bound"], "ncpus_bound": len(cpus),
                 "gpus_visible": a["gpus_visible"], "source": "local"}
    assert a["cpus_bound"].split(",")[0].split("-")[0] == str(cpus[0])
    # repeat 2 of an alternating block: the order reversed
    assert m["order"] == {"scheme": "alternate", "block": 2, "position": 0,
                          "block_id": "cnn_ddp/charliecloud/n1-g0-r1-t1/rep2",
                          "arm": "charliecloud", "sequence": ["charliecloud", "native"]}
    # the token never appears in the command line
    assert TOKEN_VAR not in m["command"]
    attempt = json.loads((out / "attempts.jsonl").read_text().splitlines()[-1])
    assert attempt["interference"]["disturbed"] is True


@pytest.mark.parametrize("value,expected", [("NO", True), ("OK", False), ("YES", False),
                                            ("USER", False), ("MCS", False), (None, None)])
def test_exclusive_from_oversubscribe(value, expected):
    from scalesweep.measure.slurmjob import _exclusive, allocation_info, cpu_ranges

    assert _exclusive(value) is expected
    a = allocation_info({"hosts": ["n1", "n2"], "oversubscribe": value, "source": "scontrol"},
                        {"name": "test", "shared_cores": False})
    assert (a["hosts"], a["exclusive"], a["source"], a["shared_cores"]) == (["n1", "n2"], expected, "scontrol", False)
    assert cpu_ranges([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8" and cpu_ranges([3]) == "3"


def launcher_run(token: str, seconds: float, rusage_root: bool, interval: float = 1.0):
    """The harness's case: a launcher (mpirun, torchrun, apptainer's starter) whose rank
    exits, then the launcher itself, both between two samples."""
    launcher = [sys.executable, "-c",
                "import subprocess, sys; subprocess.run(sys.argv[1:], check=True)", *burn(seconds)]
    with Monitor(token, interval, pids=(os.getpid(),), rusage_root=rusage_root) as monitor:
        child = subprocess.Popen(launcher, env={**os.environ, TOKEN_VAR: token})
        _, status, usage = os.wait4(child.pid, 0)
    return monitor.stop(), usage.ru_utime + usage.ru_stime  # the whole tree's CPU


def test_a_rank_and_its_launcher_exiting_together_are_counted_once():
    """Counted twice (the rank's own entry and the harness's children time), the run's
    own CPU would hide a hog beside it."""
    rec, tree_cpu = launcher_run(new_token(), 3.0, rusage_root=True)
    print(f"launcher: {json.dumps(rec)}; tree CPU {tree_cpu:.2f} s")
    assert tree_cpu - 0.3 <= rec["own_cpu_s"] <= tree_cpu + 0.6
    hog = subprocess.Popen(HOG)
    try:
        time.sleep(0.3)
        rec, tree_cpu = launcher_run(new_token(), 3.0, rusage_root=True)
    finally:
        hog.kill()
        hog.wait()
    print(f"launcher beside a hog: {json.dumps(rec)}; tree CPU {tree_cpu:.2f} s")
    assert rec["own_cpu_s"] <= tree_cpu + 0.6
    assert assess([rec], max_outside_cpu_pct=10, max_steal_pct=100)["disturbed"]
