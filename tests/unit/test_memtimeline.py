"""Memory over time (scalesweep.measure.memtimeline): the ranks' resident memory sampled by the
interference monitor on real process trees (real /proc, real allocations: the asserts
are on what was allocated, never on timing), the pairwise downsampling, the GPU sources
(the ROCm stand-ins, a fake sysfs, a fake nvidia-smi), and the block in a run's metrics
written by the harness."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from conftest import REPO, fake_payload_launch, tiny_config
from scalesweep.measure.interference import TOKEN_VAR, Monitor, new_token
from scalesweep.measure.gpumem import AmdSysfs, GpuSource, open_gpu_source
from scalesweep.measure.memtimeline import (
    MAX_SAMPLES,
    RANK_VARS,
    Bins,
    MemoryTimeline,
    runs_script,
    script_of,
)

STANDIN = REPO / "tests" / "standins" / "gpu_smi.py"
PAGE = os.sysconf("SC_PAGE_SIZE")

# A rank: holds MB of its own, optionally forks a worker (same command line: no rank of
# its own) holding WORKER MB, says it is ready, and lives until the stop file appears.
RANK = """\
import os, sys, time
from pathlib import Path
ready, stop, mb, worker_mb = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
block = b"\\x01" * (mb << 20)
child = 0
if worker_mb:
    child = os.fork()
    if child == 0:
        mine = b"\\x02" * (worker_mb << 20)
        Path(f"{ready}.worker").write_text(str(os.getpid()))
        while not stop.exists():
            time.sleep(0.05)
        os._exit(0)
    while not Path(f"{ready}.worker").exists():
        time.sleep(0.02)
ready.write_text(str(os.getpid()))
while not stop.exists():
    time.sleep(0.05)
if child:
    os.waitpid(child, 0)
"""
# A launcher that is no rank (python -c), starting ranks as mpirun would: RANK=i each.
LAUNCHER = """\
import json, os, subprocess, sys
ranks = json.loads(sys.argv[1])
procs = [subprocess.Popen(argv, env={**os.environ, **env}) for argv, env in ranks]
sys.exit(max(p.wait() for p in procs))
"""


def clean_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in RANK_VARS}
    return {**env, **extra}


def wait_for(paths: list[Path], proc: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not all(p.exists() for p in paths):
        assert proc.poll() is None, "the process tree exited before it was ready"
        assert time.monotonic() < deadline, f"not ready: {paths}"
        time.sleep(0.05)


def start_tree(tmp_path: Path, ranks: list[tuple[int, int, dict]], token: str):
    """A launcher (python -c) with one rank per (MB, worker MB, extra env); returns the
    launcher, the ready files and the stop file."""
    script = tmp_path / "scripts" / "alloc_rank.py"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(RANK)
    stop = tmp_path / "stop"
    ready = [tmp_path / f"ready{i}" for i in range(len(ranks))]
    spec = [[[sys.executable, "-u", str(script), str(r), str(stop), str(mb), str(worker)], env]
            for r, (mb, worker, env) in zip(ready, ranks)]
    launcher = subprocess.Popen([sys.executable, "-c", LAUNCHER, json.dumps(spec)],
                                env=clean_env(**{TOKEN_VAR: token}))
    wait_for(ready, launcher)
    return launcher, ready, stop


def sampled(token: str, script: str = "scripts/alloc_rank.py", **kwargs) -> dict:
    """Two samples (the monitor's first and last: its thread never wakes in between)."""
    memory = MemoryTimeline(script, interval_s=3600, **kwargs)
    Monitor(token, 3600, memory=memory).start().stop()
    return memory.record()


# ---------------------------------------------------------------------- which processes are ranks


@pytest.mark.parametrize("argv,script", [
    (["/opt/venv/bin/python", "/mnt/code/scripts/train_cnn.py", "--epochs", "2"],
     "/mnt/code/scripts/train_cnn.py"),
    (["python3", "-u", "-X", "dev", "-W", "ignore", "train_cnn.py"], "train_cnn.py"),
    (["python3.12", "-uB", "-Wignore", "s.py"], "s.py"),
    (["python", "--", "s.py"], "s.py"),
    (["python", "-m", "torch.distributed.run", "--nproc-per-node=2", "train_cnn.py"], None),
    (["python3", "-I", "-S", "-c", "guard", "15", "1", "mpirun", "python", "train_cnn.py"], None),
    (["mpirun", "-n", "2", "python", "train_cnn.py"], None),
    (["srun", "--ntasks=2", "python", "train_cnn.py"], None),
    (["ch-run", "--bind=/r:/mnt/code", "/img", "--", "python", "train_cnn.py"], None),
    (["python"], None),
    ([], None),
])
def test_script_of_a_command_line(argv, script):
    assert script_of(argv) == script
    assert runs_script(argv, "train_cnn.py") == (script is not None
                                                 and script.endswith("train_cnn.py"))


# ---------------------------------------------------------------------- real process trees


def test_a_lone_rank_and_its_forked_worker_are_sampled_the_launcher_is_not(tmp_path):
    """python -c launcher -> rank (100 MiB) -> forked worker (40 MiB, the rank's command
    line): one rank, "0", whose tree holds at least what both allocated."""
    token = new_token()
    launcher, ready, stop = start_tree(tmp_path, [(100, 40, {})], token)
    try:
        rec = sampled(token)
    finally:
        stop.touch()
        launcher.wait(timeout=60)
    rank_pid = int(ready[0].read_text())
    assert rec["ranks"] == {"0": rank_pid}, rec  # not the launcher, not the forked worker
    assert rec["samples"] == 2 and len(rec["t_s"]) == 2 and rec["bin"] == 1
    peak = max(v for v in rec["rss_mb"]["0"] if v is not None)
    print(f"lone rank: sampled {rec['rss_mb']['0']} MiB (allocated 100 + 40)")
    assert peak >= 140
    assert rec["total_rss_mb"] == rec["rss_mb"]["0"]
    assert rec["script"] == "alloc_rank.py" and rec["nodes_sampled"] == 1
    assert rec["note"] is None and "gpu" not in rec and "gpu_mem_mb" not in rec


def test_two_ranks_are_told_apart_by_their_rank_variable(tmp_path):
    token = new_token()
    launcher, ready, stop = start_tree(
        tmp_path, [(120, 0, {"RANK": "0"}), (30, 0, {"OMPI_COMM_WORLD_RANK": "1"})], token)
    try:
        rec = sampled(token)
    finally:
        stop.touch()
        launcher.wait(timeout=60)
    assert rec["ranks"] == {"0": int(ready[0].read_text()), "1": int(ready[1].read_text())}
    r0 = max(v for v in rec["rss_mb"]["0"] if v is not None)
    r1 = max(v for v in rec["rss_mb"]["1"] if v is not None)
    print(f"two ranks: rank 0 {r0:.0f} MiB (allocated 120), rank 1 {r1:.0f} MiB (allocated 30)")
    assert r0 >= 120 and 30 <= r1 < 120  # each rank's own tree only
    total = max(v for v in rec["total_rss_mb"] if v is not None)
    assert total >= 150
    # the sum is over the ranks of the same sample
    for i, t in enumerate(rec["total_rss_mb"]):
        assert t == pytest.approx(rec["rss_mb"]["0"][i] + rec["rss_mb"]["1"][i], abs=0.2)


def test_a_process_that_execs_into_the_payload_becomes_a_rank(tmp_path):
    """ch-run and the harness's guard exec the payload: the same pid, first no rank."""
    token = new_token()
    script = tmp_path / "scripts" / "alloc_rank.py"
    script.parent.mkdir(parents=True)
    script.write_text(RANK)
    stop, ready = tmp_path / "stop", tmp_path / "ready"
    go = tmp_path / "go"
    execer = ("import os, sys, time\nfrom pathlib import Path\n"
              "while not Path(sys.argv[1]).exists(): time.sleep(0.02)\n"
              "os.execv(sys.executable, [sys.executable] + sys.argv[2:])\n")
    proc = subprocess.Popen([sys.executable, "-c", execer, str(go), str(script), str(ready),
                             str(stop), "60", "0"], env=clean_env(**{TOKEN_VAR: token}))
    memory = MemoryTimeline("alloc_rank.py", interval_s=3600)
    monitor = Monitor(token, 3600, memory=memory).start()  # sees `python -c`: no rank
    try:
        go.touch()
        wait_for([ready], proc)
        rec_monitor = monitor.stop()  # the same pid, now running the script
    finally:
        stop.touch()
        proc.wait(timeout=60)
    rec = memory.record()
    assert rec_monitor["samples"] == 2
    assert rec["ranks"] == {"0": proc.pid}
    assert rec["rss_mb"]["0"][0] is None and rec["rss_mb"]["0"][1] >= 60
    assert rec["total_rss_mb"][0] is None


def test_no_rank_found_is_said(tmp_path):
    token = new_token()
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                               env=clean_env(**{TOKEN_VAR: token}))
    try:
        rec = sampled(token, script="scripts/train_cnn.py", nodes=2, world_size=4)
    finally:
        sleeper.kill()
        sleeper.wait()
    assert rec["ranks"] == {} and rec["rss_mb"] == {}
    assert rec["total_rss_mb"] == [None, None]
    assert "only the harness's node" in rec["note"] and "per_rank[].peak_rss_mb" in rec["note"]
    assert "no process running train_cnn.py was found" in rec["note"]


# ---------------------------------------------------------------------- a fake /proc


def fake_proc(root: Path, procs: dict[int, tuple[list[str], dict, int]]) -> None:
    for pid, (argv, env, pages) in procs.items():
        d = root / str(pid)
        d.mkdir(parents=True)
        (d / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
        (d / "environ").write_bytes(b"\0".join(f"{k}={v}".encode() for k, v in env.items()))
        (d / "statm").write_text(f"{pages * 3} {pages} 10 1 0 {pages} 0\n")


def test_attribution_and_the_cap_on_a_fake_proc(tmp_path):
    """mpirun (no rank) -> ch-run'd ranks 0 and 1; rank 0 has a forked worker and an LLM
    server child (no token: a descendant still counts); an unrelated process does not."""
    py = ["/opt/venv/bin/python", "/mnt/code/scripts/train_cnn.py", "--epochs", "2"]
    fake_proc(tmp_path, {
        10: (["mpirun", "-n", "2", "python", "/r/scripts/train_cnn.py"], {}, 1000),
        11: (py, {"OMPI_COMM_WORLD_RANK": "0"}, 25600),  # 100 MiB at 4 KiB pages
        12: (py, {"OMPI_COMM_WORLD_RANK": "1"}, 12800),
        13: (py, {"OMPI_COMM_WORLD_RANK": "0"}, 2560),  # forked worker of rank 0
        14: (["llama-server"], {}, 5120),  # rank 0's server, no token
        15: (py, {"OMPI_COMM_WORLD_RANK": "7"}, 99999),  # another run's rank: not own
    })
    ppids = {10: 1, 11: 10, 12: 10, 13: 11, 14: 11, 15: 1}
    own = [(10, 1), (11, 2), (12, 2), (13, 3)]
    memory = MemoryTimeline("scripts/train_cnn.py", interval_s=0.5, max_samples=50,
                            proc=str(tmp_path))
    for i in range(1000):
        memory.sample(i * 0.5, ppids, own)
    rec = memory.record()
    mib = PAGE / 2**20
    assert rec["ranks"] == {"0": 11, "1": 12}
    assert rec["samples"] == 1000 and len(rec["t_s"]) <= 50 and rec["bin"] == 32
    assert all(len(v) == len(rec["t_s"]) for v in rec["rss_mb"].values())
    assert set(rec["rss_mb"]["0"]) == {round((25600 + 2560 + 5120) * mib, 1)}
    assert set(rec["rss_mb"]["1"]) == {round(12800 * mib, 1)}
    assert set(rec["total_rss_mb"]) == {round((25600 + 2560 + 5120 + 12800) * mib, 1)}
    assert rec["t_s"] == sorted(rec["t_s"]) and rec["t_s"][0] >= 0 and rec["t_s"][-1] <= 499.5
    json.dumps(rec)  # plain JSON


# ---------------------------------------------------------------------- downsampling


def test_bins_keep_at_most_cap_samples_and_every_peak():
    bins = Bins(cap=600)
    raw = []
    for i in range(10_007):
        value = float((i * 7919) % 1013)
        raw.append(value)
        bins.add(i * 0.1, {"0": value, "late": value if i >= 5000 else None})
    t, series, width = bins.result()
    assert 300 <= len(t) <= 600 and width == 32  # 10007 / 32 = 313 bins
    assert t == sorted(t) and t[0] >= 0 and t[-1] <= 1000.6
    assert max(series["0"]) == max(raw) and min(series["0"]) >= 0
    # each stored value is the maximum of its bin of raw samples
    assert series["0"][:5] == [max(raw[i * 32:(i + 1) * 32]) for i in range(5)]
    assert series["0"][-1] == max(raw[(len(t) - 1) * 32:])
    # a series that starts late is None before, values after
    first = series["late"].index(next(v for v in series["late"] if v is not None))
    assert all(v is None for v in series["late"][:first]) and 150 <= first <= 157


def test_bins_short_run_is_kept_as_is():
    bins = Bins(cap=MAX_SAMPLES)
    for i in range(5):
        bins.add(float(i), {"0": float(i)})
    assert bins.result() == ([0.0, 1.0, 2.0, 3.0, 4.0], {"0": [0.0, 1.0, 2.0, 3.0, 4.0]}, 1)
    assert Bins(cap=10).result() == ([], {}, 1)


# ---------------------------------------------------------------------- GPUs


def test_amd_sysfs_reads_every_amd_card_once(tmp_path):
    for card, vendor, used in (("card0", "0x1002", 10 << 20), ("card1", "0x1002", 30 << 20),
                               ("card2", "0x10de", 1 << 30)):
        dev = tmp_path / card / "device"
        dev.mkdir(parents=True)
        (dev / "vendor").write_text(vendor + "\n")
        (dev / "mem_info_vram_used").write_text(f"{used}\n")
    (tmp_path / "card0-DP-1").mkdir()  # a connector, not a card
    assert AmdSysfs(str(tmp_path)).read() == [10.0, 30.0]
    source, first, error = open_gpu_source("rocm", sysfs_root=str(tmp_path))
    assert (source.name, first, error) == ("sysfs mem_info_vram_used", [10.0, 30.0], None)


def tool_path(tmp_path: Path, monkeypatch, tools: dict[str, str]) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in tools.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")


def test_rocm_tools_through_the_standins(tmp_path, monkeypatch):
    py = sys.executable
    tool_path(tmp_path, monkeypatch, {"amd-smi": f'exec {py} {STANDIN} amd-smi "$@"',
                                      "rocm-smi": f'exec {py} {STANDIN} rocm-smi "$@"'})
    nothing = str(tmp_path / "no-sysfs")
    source, first, error = open_gpu_source("rocm", sysfs_root=nothing)
    assert source.name == "amd-smi" and first == [10.0] * 8 and error is None
    assert source.min_interval_s >= 5
    (tmp_path / "bin" / "amd-smi").unlink()
    source, first, error = open_gpu_source("rocm", sysfs_root=nothing)
    assert source.name == "rocm-smi" and first == [pytest.approx(10993664 / 2**20)] * 8


def test_gpu_inventory_through_the_standins(tmp_path, monkeypatch):
    """The node's GPUs a run records (pointlaunch.gpu_inventory: amd-smi, else rocm-smi)
    on the fake Frontier node: 8 GCDs, whatever ROCR_VISIBLE_DEVICES says."""
    from scalesweep.run.pointlaunch import gpu_inventory

    py = sys.executable
    tool_path(tmp_path, monkeypatch, {"amd-smi": f'exec {py} {STANDIN} amd-smi "$@"',
                                      "rocm-smi": f'exec {py} {STANDIN} rocm-smi "$@"'})
    monkeypatch.setenv("ROCR_VISIBLE_DEVICES", "0")
    inv = gpu_inventory("rocm")
    assert inv["tool"] == "amd-smi" and inv["command"][1:] == ["static", "--asic", "--vram", "--json"]
    assert inv["count"] == 8 and set(inv["names"]) == {"AMD Instinct MI250X"}
    (tmp_path / "bin" / "amd-smi").unlink()
    inv = gpu_inventory("rocm")
    assert inv["tool"] == "rocm-smi" and inv["count"] == 8 and set(inv["names"]) == {"AMD INSTINCT MI250X"}
    (tmp_path / "bin" / "rocm-smi").unlink()
    assert gpu_inventory("rocm") == {"tool": None, "count": None,
                                     "error": "amd-smi: not found; rocm-smi: not found"}
    assert gpu_inventory("cpu") is None


def test_nvidia_smi_and_no_tool(tmp_path, monkeypatch):
    tool_path(tmp_path, monkeypatch, {"nvidia-smi": 'printf "1234\\n 567\\n"'})
    source, first, error = open_gpu_source("cuda", nvml_library="libnot-here.so")
    assert source.name == "nvidia-smi" and first == [1234.0, 567.0]
    (tmp_path / "bin" / "nvidia-smi").unlink()
    source, first, error = open_gpu_source("cuda", nvml_library="libnot-here.so")
    assert source is None and first is None
    assert "nvml:" in error and "nvidia-smi: not found" in error
    assert open_gpu_source("cpu")[0] is None


class FakeGpu(GpuSource):
    name = "fake"

    def __init__(self, values):
        self.values = iter(values)

    def read(self):
        value = next(self.values)
        if value is None:
            raise OSError("device gone")
        return value


def test_gpu_memory_in_the_timeline_and_a_failing_source(tmp_path):
    reads = [[100.0, 50.0], [300.0, 10.0], None]
    memory = MemoryTimeline("x.py", interval_s=1, gpu_device="cuda", proc=str(tmp_path),
                            gpu_opener=lambda device: (FakeGpu(reads[1:]), reads[0], None))
    for i in range(4):
        memory.sample(float(i), {}, [])
    rec = memory.record()
    assert rec["gpu_mem_mb"] == [150.0, 310.0, None, None]
    assert rec["gpu"] == {"device": "cuda", "source": "fake", "devices": 2,
                          "peak_mb_per_device": [300.0, 50.0], "error": "fake: device gone"}
    # no source at all: no series, the reason, and the run goes on
    none = MemoryTimeline("x.py", interval_s=1, gpu_device="rocm", proc=str(tmp_path),
                          gpu_opener=lambda device: (None, None, "rocm-smi: not found"))
    none.sample(0.0, {}, [])
    rec = none.record()
    assert "gpu_mem_mb" not in rec and rec["gpu"]["error"] == "rocm-smi: not found"
    # a CPU point on a GPU site: no GPU sampling
    from scalesweep.platform.launch import Launch

    launch = Launch(runtime="native", launcher="local", nodes=1, ranks_per_node=1, threads=1,
                    gpus_per_node=0, payload="scripts/train_cnn.py", args=(), code_root="/r",
                    data_dir="/d", out_dir="/o")
    assert MemoryTimeline.for_launch(launch, "rocm", 1.0).gpu_device is None
    assert MemoryTimeline.for_launch(replace(launch, gpus_per_node=2), "rocm",
                                     1.0).gpu_device == "rocm"


def test_a_sampling_error_stops_sampling_never_the_run(tmp_path):
    memory = MemoryTimeline("x.py", interval_s=1, proc=str(tmp_path))
    memory.sample(0.0, {}, [])
    memory.sample(1.0, None, [(1, 1)])  # type: ignore[arg-type]  (a broken scan)
    memory.sample(2.0, {}, [])
    rec = memory.record()
    assert rec["samples"] == 1 and "memory sampling stopped" in rec["error"]


# ---------------------------------------------------------------------- through the harness

FAKE_PAYLOAD = """\
import json, sys, time
out = sys.argv[sys.argv.index("--out") + 1]
t = time.monotonic()
block = b"\\x01" * (80 << 20)
time.sleep(2.0)
json.dump({"workload": "fake", "payload_wall_s": time.monotonic() - t}, open(out, "w"))
"""


def test_execute_writes_the_memory_timeline(tmp_path, monkeypatch):
    from scalesweep.plan.config import validated
    from scalesweep.run.harness import execute
    from scalesweep.platform.site import load_site
    from scalesweep.plan.sweep import run_order, sweep_points

    for var in [v for v in os.environ if v.startswith("SLURM_") or v in RANK_VARS]:
        monkeypatch.delenv(var)
    monkeypatch.setenv("SCALESWEEP_GIT_COMMIT", "0" * 40)
    config = validated(tiny_config())
    point = sweep_points(config)[0]
    launch, out = fake_payload_launch(tmp_path, FAKE_PAYLOAD, point, name="fake_mem.py")
    measurement = {**config["measurement"], "sample_interval_s": 0.1}
    rc = execute(point, launch, str(out / "metrics.json"), str(out / "run.log"),
                 measurement=measurement, site=load_site("local"), order=run_order(point, config))
    assert rc == 0, (out / "run.log").read_text()
    m = json.loads((out / "metrics.json").read_text())
    mt = m["memory_timeline"]
    print(f"through execute: {mt['samples']} samples, rank 0 peak "
          f"{max(v for v in mt['rss_mb']['0'] if v is not None)} MiB (allocated 80)")
    assert mt["interval_s"] == 0.1 and mt["script"] == "fake_mem.py"
    assert list(mt["ranks"]) == ["0"] and mt["samples"] >= 3
    assert max(v for v in mt["rss_mb"]["0"] if v is not None) >= 80
    assert len(mt["t_s"]) == len(mt["total_rss_mb"]) == len(mt["rss_mb"]["0"])
    # the timeline is kept in the run's metrics only, not in every attempt's line
    attempt = json.loads((out / "attempts.jsonl").read_text().splitlines()[-1])
    assert "memory_timeline" not in attempt
