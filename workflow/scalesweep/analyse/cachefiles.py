"""How the summary's caches look at files and write them: a file's identity (path, device,
inode, size, mtime_ns, ctime_ns) and whether it changed too recently to be trusted
(``RACY_S``, by this host's clock or the file system's), looked at by a stat, or by an
open where the file system's clients cache attributes (NFS: ``attribute_cached_devices``);
and a cache file written whole or not at all (``save_npz_atomic``).
Used by scalesweep.analyse.collect, runcache and rowtext."""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Sequence

import numpy as np

from scalesweep.record.mountinfo import mounts

RACY_S = 3.0
_RACY_NS = int(RACY_S * 1e9)

Identity = tuple  # (dev, ino, size, mtime_ns, ctime_ns)


def _looked(st: os.stat_result, now: int) -> tuple[Identity, bool]:
    return ((st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns),
            now - max(st.st_mtime_ns, st.st_ctime_ns) < _RACY_NS)


def file_system_now(directory: str | os.PathLike | None = None) -> int:
    """Now, in ns, by the earlier of this host's clock and the file system's (the
    modification time of a file made in ``directory`` now): a file changed less than
    RACY_S ago by either clock is "just changed". A file server whose clock is behind ours
    stamps a file written a moment ago with a time that looks old by ours alone. A
    killed summary's temporary file there is removed by a later one."""
    now = time.time_ns()
    if directory is None:
        return now
    _remove_stale(Path(directory), ".now.*.tmp")
    try:
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".now.", suffix=".tmp") as fh:
            return min(now, os.fstat(fh.fileno()).st_mtime_ns)
    except OSError:
        return now


def identities(paths: Sequence[str], now: int | None = None) -> list[tuple[Identity | None, bool]]:
    """identity of each file (fresh: changed less than RACY_S before ``now``, by default
    when this call began)."""
    now, stat, out = time.time_ns() if now is None else now, os.stat, []
    for path in paths:
        try:
            st = stat(path)
        except OSError:
            out.append((None, False))
            continue
        out.append(_looked(st, now))
    return out


def opened_identity(path: str, now: int | None = None) -> tuple[Identity | None, bool]:
    """A file's (identity, fresh), as identities() gives them, as an open() finds it: on NFS the open revalidates the
    name and the attributes a stat may have taken from the client's cache."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None, False
    try:
        st = os.fstat(fd)
    finally:
        os.close(fd)
    return _looked(st, time.time_ns() if now is None else now)


# File systems whose clients cache a file's attributes and its name's lookup: there a
# stat may give a file replaced on another node its old identity for up to the mount's
# acregmax (60 s by default on NFS); an open revalidates them (close-to-open
# consistency). Lustre, GPFS and local file systems are coherent: their stat is current.
ATTRIBUTE_CACHED = ("nfs", "nfs4", "cifs", "smb3", "smbfs", "9p", "fuse.sshfs")


def attribute_cached_devices(mountinfo: str | None = None) -> frozenset[int]:
    """The device numbers (st_dev) of the mounted file systems whose clients cache
    attributes (ATTRIBUTE_CACHED): a file on one of them is opened to be looked at."""
    return frozenset(m.dev for m in mounts(mountinfo) if m.fstype in ATTRIBUTE_CACHED)


STALE_TMP_S = 3600  # a cache's temporary file older than this was left by a killed writer


def save_npz_atomic(path: str | os.PathLike, arrays: dict) -> None:
    """``arrays`` into ``path`` (npz) through a temporary file and a rename: a reader sees
    the old file or the new one, never half a file. The file gets the permissions the
    umask gives (a campaign shared by a group reads one cache), and temporary files of
    writers killed mid-write (Snakemake's or Slurm's cancel) are removed."""
    path = Path(path)
    _remove_stale(path.parent, f".{path.name}.*.tmp")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:  # closes fd, whatever follows
            os.fchmod(fh.fileno(), 0o666 & ~_umask())
            np.savez(fh, **arrays)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _remove_stale(directory: Path, pattern: str) -> None:
    """Remove the files of ``pattern`` in ``directory`` older than STALE_TMP_S: the
    temporary files of writers killed mid-write (Snakemake's or Slurm's cancel)."""
    for old in directory.glob(pattern):
        try:
            if time.time() - old.stat().st_mtime > STALE_TMP_S:
                old.unlink()
        except OSError:
            pass


def _umask() -> int:
    """This process's umask, read without changing it (os.umask sets it, for every
    thread, while it is read): /proc/self/status's Umask (Linux 4.7 and later)."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    umask = os.umask(0o022)  # where /proc cannot tell: set and put back at once
    os.umask(umask)
    return umask
