"""Concurrent starts (issue #44, scalesweep.run.startscale) for real on a tiny virtual
environment: K ranks on the node's disk and on the bounded-rate file system (a mount per
rank), the server's counts per start the same whatever K; and the Slurm step's parsing of
each rank's end, with a stand-in srun (the real one: BENCHMARKS.md section 14)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from scalesweep.measure import metafs
from scalesweep.run import startscale


@pytest.fixture(scope="module")
def tiny_venv(tmp_path_factory) -> Path:
    """A venv without pip (its interpreter is this one's), a small package in its
    site-packages (which each start lists: the interpreter's site module)."""
    root = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root / "env")],
                   check=True)
    site = next((root / "env" / "lib").glob("python3*/site-packages"))
    (site / "tinypkg").mkdir()
    (site / "tinypkg" / "__init__.py").write_text(
        "".join(f"from tinypkg import m{i}\n" for i in range(4)))
    for i in range(4):
        (site / "tinypkg" / f"m{i}.py").write_text(f"X = {i}\n")
    return root / "env"


def test_k_ranks_on_the_disk_and_on_the_bounded_file_system(tiny_venv, tmp_path):
    probe = tmp_path / "probe"
    mnt = tmp_path / "m"
    mnt.mkdir()
    try:  # the file system needs root or a usable /dev/fuse
        with metafs.MetaFS(tiny_venv, mnt):
            pass
    except metafs.MountError as exc:
        pytest.skip(str(exc))
    side = startscale.Side("native", tiny_venv, "bin/python", {}, "python")
    assert side.argv(probe) == [str(probe / "bin" / "python"), "-c", "pass"]
    rows = startscale.measure(side, [1, 2, 3], [0.0], repeats=1, mount_root=str(tmp_path))
    assert sorted((r["place"], r["ranks"]) for r in rows) == [
        ("local", 1), ("local", 2), ("local", 3), ("metafs", 1), ("metafs", 2), ("metafs", 3)]
    for r in rows:
        assert len(r["rank_s"]) == r["ranks"] and all(t > 0 for t in r["rank_s"])
        assert r["ranks_per_core"] == r["ranks"] / len(os.sched_getaffinity(0))
    fs = [r for r in rows if r["place"] == "metafs"]
    # each rank a cold client of its own: the same operations per start whatever K
    assert len({r["metadata_ops_per_start"] for r in fs}) == 1 and fs[0]["metadata_ops_per_start"] > 0
    assert all(0 < r["metadata_busy_s_per_start"] <= r["server_busy_s_per_start"] for r in fs)
    assert not list(tmp_path.glob("scalesweep-metafs-*"))  # every mount point removed
    assert not any(metafs.is_mounted(p) for p in tmp_path.iterdir() if p.is_dir())


def test_a_failing_rank_stops_the_measurement_with_its_error(tmp_path):
    argv = [sys.executable, "-c", "import sys; sys.exit('no such module: torch')"]
    with pytest.raises(startscale.StartError, match="exited 1 in a start of 2: no such module"):
        startscale.start_together([argv, argv], dict(os.environ))


def test_the_slurm_step_reads_each_ranks_end(tmp_path):
    """A stand-in srun runs the command once per task (--ntasks=N), as srun does, or drops
    one rank's line: a step missing a rank's end is an error, never a shorter list."""
    fake = tmp_path / "srun"
    fake.write_text('#!/bin/sh\nn=1\nwhile [ "${1#--}" != "$1" ]; do\n'
                    '  case "$1" in --ntasks=*) n=${1#--ntasks=};; esac; shift\ndone\n'
                    'i=0; while [ $i -lt $((n - ${DROP:-0})) ]; do "$@"; i=$((i+1)); done\n')
    fake.chmod(0o755)
    env = dict(os.environ, PATH=f"{tmp_path}:{os.environ['PATH']}")
    side = startscale.Side("native", Path(sys.prefix), "", {}, "python")
    site = {"launch": {"srun_extra": ["--overlap"]}}
    argv = startscale.srun_argv(side, 2, 3, site)
    assert argv[:6] == ["srun", "--nodes=2", "--ntasks=6", "--ntasks-per-node=3",
                        "--cpus-per-task=1", "--overlap"]
    ends = startscale.start_step(argv[:6] + startscale.RANK_END + ["true"], env, 6)
    assert len(ends) == 6 and ends == sorted(ends) and all(0 <= t < 30 for t in ends)
    with pytest.raises(startscale.StartError, match="5 ranks said when they ended, of 6"):
        startscale.start_step(argv[:6] + startscale.RANK_END + ["true"],
                              dict(env, DROP="1"), 6)
