"""A real file system that serves metadata at a bounded rate (issue #44): the read-only
FUSE passthrough of scalesweep.measure.metafs mounted for real (needs root or a usable
/dev/fuse and mount(2); skipped otherwise): what it serves is the backing directory's, its
one server bounds the metadata rate (alone and under concurrent clients), and its command
line writes its counters and leaves no mount at SIGTERM."""

from __future__ import annotations

import errno
import json
import mmap
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from scalesweep.measure import fuseproto, metafs

WORKFLOW = Path(metafs.__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def fuse_usable(tmp_path_factory):
    """Skip the module where no FUSE file system can be mounted here."""
    where = tmp_path_factory.mktemp("probe")
    try:
        fd = metafs.mount(where)
    except metafs.MountError as exc:
        pytest.skip(str(exc))
    metafs.unmount(where)
    os.close(fd)


def test_the_structs_have_the_kernels_sizes():
    """include/uapi/linux/fuse.h: what the kernel reads and writes, byte for byte."""
    sizes = {"IN_HEADER": 40, "OUT_HEADER": 16, "ENTRY_OUT": 128, "ATTR_OUT": 104,
             "OPEN_OUT": 16, "READ_IN": 40, "INIT_OUT": 64, "KSTATFS": 80, "DIRENT": 24}
    assert {name: getattr(fuseproto, name).size for name in sizes} == sizes
    assert fuseproto.OPCODES[1] == "LOOKUP" and fuseproto.OPCODES[26] == "INIT"
    assert fuseproto.OPCODES[42] == "BATCH_FORGET" and fuseproto.OPCODES[51] == "TMPFILE"


def backing_tree(root: Path) -> dict:
    (root / "pkg" / "deep").mkdir(parents=True)
    files = {"top.txt": b"top\n", "pkg/deep/leaf.bin": b"\x00\x01leaf",
             "pkg/big.bin": os.urandom(1024 * 1024 + 123),
             "mod_on_metafs.py": b"VALUE = 42\nprint('imported', VALUE)\n"}
    for name, data in files.items():
        (root / name).write_bytes(data)
    os.symlink("deep/leaf.bin", root / "pkg" / "link")
    return files


def test_passthrough(tmp_path, fuse_usable):
    backing, mnt = tmp_path / "backing", tmp_path / "mnt"
    backing.mkdir()
    mnt.mkdir()
    files = backing_tree(backing)
    fs = metafs.MetaFS(backing, mnt)
    with fs:
        assert metafs.is_mounted(mnt)
        assert sorted(os.listdir(mnt)) == ["mod_on_metafs.py", "pkg", "top.txt"]
        assert sorted(os.listdir(mnt / "pkg")) == ["big.bin", "deep", "link"]
        for name, data in files.items():
            assert (mnt / name).read_bytes() == data
            assert os.stat(mnt / name).st_size == len(data)
        assert os.readlink(mnt / "pkg" / "link") == "deep/leaf.bin"
        assert (mnt / "pkg" / "link").read_bytes() == files["pkg/deep/leaf.bin"]
        with pytest.raises(FileNotFoundError):
            os.stat(mnt / "pkg" / "absent")
        with pytest.raises(OSError) as refused:
            (mnt / "new.txt").write_bytes(b"no")
        assert refused.value.errno in (errno.EROFS, errno.EACCES)
        with pytest.raises(OSError):
            (mnt / "top.txt").write_bytes(b"no")
        # an interpreter importing a module from the mount
        env = dict(os.environ, PYTHONPATH=str(mnt))
        out = subprocess.run([sys.executable, "-c", "import mod_on_metafs"], env=env,
                             capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == "imported 42"
        # mmap through the page cache (shared libraries are mapped so)
        with open(mnt / "pkg" / "big.bin", "rb") as f, \
                mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as mapped:
            assert mapped[:] == files["pkg/big.bin"]
    assert not metafs.is_mounted(mnt)
    stats = fs.stats
    assert stats["ended"] == "unmounted"
    assert stats["opcodes"]["LOOKUP"] > 0 and stats["opcodes"]["READDIR"] > 0
    assert stats["bytes_read"] >= sum(map(len, files.values()))


def test_the_metadata_rate_is_bounded(tmp_path, fuse_usable):
    service = 0.002
    backing, mnt = tmp_path / "backing", tmp_path / "mnt"
    backing.mkdir()
    mnt.mkdir()
    (backing / "f").write_text("x")
    with metafs.MetaFS(backing, mnt, service_s=service) as fs:
        start = time.perf_counter()
        for _ in range(150):
            os.stat(mnt / "f")
        elapsed = time.perf_counter() - start
    ops = fs.stats["metadata_ops"]
    assert ops >= 150
    # a few ops (the mount check) fell before the timed loop: 5% covers them
    assert elapsed >= ops * service * 0.95, (elapsed, ops)
    realised = ops / fs.stats["busy_s"]
    assert abs(realised / (1 / service) - 1) <= 0.15, fs.stats
    assert fs.stats["realised_metadata_rate_per_s"] == pytest.approx(realised, rel=0.05)

    # four concurrent clients: one server, so the throughput stays at its bound
    with metafs.MetaFS(backing, mnt, service_s=service) as fs:
        def client():
            for _ in range(40):
                os.stat(mnt / "f")

        threads = [threading.Thread(target=client) for _ in range(4)]
        start = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - start
    ops = fs.stats["metadata_ops"]
    assert ops >= 160
    assert ops / wall <= 1 / service * 1.05, (ops, wall)


def test_the_command_line_writes_its_stats_at_sigterm(tmp_path, fuse_usable):
    backing, mnt, stats = tmp_path / "backing", tmp_path / "mnt", tmp_path / "stats.json"
    backing.mkdir()
    mnt.mkdir()
    (backing / "f").write_text("data")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (str(WORKFLOW), os.environ.get("PYTHONPATH")) if p))
    proc = subprocess.Popen([sys.executable, "-m", "scalesweep.measure.metafs", "--backing",
                             str(backing), "--mount", str(mnt), "--service-us", "100",
                             "--stats", str(stats)], env=env, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 10
        while not metafs.is_mounted(mnt):
            assert proc.poll() is None, proc.stderr.read().decode()
            assert time.monotonic() < deadline, "not mounted in time"
            time.sleep(0.01)
        assert (mnt / "f").read_text() == "data"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0, proc.stderr.read().decode()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        metafs.unmount(mnt)
    assert not metafs.is_mounted(mnt)
    written = json.loads(stats.read_text())
    assert written["ended"] == "signalled"
    assert written["service_s"] == pytest.approx(100e-6)
    assert written["opcodes"]["OPEN"] >= 1 and written["bytes_read"] == 4
    assert written["metadata_ops"] >= 3


def test_several_clients_one_server_and_their_caches(tmp_path, fuse_usable):
    """Three mounts of one directory are three clients of one server: each sees the tree,
    the server counts them all; with cache_s a client asks once for what it was told
    (entries, missing names), without it at every use."""
    backing = tmp_path / "backing"
    backing.mkdir()
    backing_tree(backing)
    mounts = [tmp_path / f"client{i}" for i in range(3)]
    for m in mounts:
        m.mkdir()
    counted = {}
    for cache_s in (0.0, 60.0):
        with metafs.MetaFS(backing, mounts, cache_s=cache_s) as fs:
            for m in mounts:
                assert (m / "pkg" / "deep" / "leaf.bin").read_bytes() == b"\x00\x01leaf"
                for _ in range(20):
                    os.stat(m / "top.txt")
                    assert not os.path.exists(m / "not-there.py")
        assert not any(metafs.is_mounted(m) for m in mounts)
        counted[cache_s] = fs.stats["opcodes"]["LOOKUP"]
    # with caches: per client top.txt, not-there.py, pkg, deep, leaf.bin looked up once
    assert counted[60.0] == 3 * 5
    assert counted[0.0] >= 3 * 2 * 20  # every stat and every missing name, every time

