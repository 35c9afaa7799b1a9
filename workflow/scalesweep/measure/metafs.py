"""A real file system that serves metadata at a bounded rate (issue #44): a read-only FUSE
passthrough of a backing directory whose one server sleeps a service time per metadata
operation, a stand-in for a parallel file system's metadata server (a Lustre MDS) when
many ranks start a container or an interpreter at once.

It speaks the kernel's FUSE protocol (include/uapi/linux/fuse.h; the structs and the loop:
``measure/fuseproto.py``) itself on /dev/fuse and
mounts with mount(2), unmounts with umount2(MNT_DETACH) through ctypes: standard library
only, no libfuse, no fusermount. One single-threaded loop serves every request in turn
(one server, one queue: the kernel queues the rest): INIT, LOOKUP, FORGET and
BATCH_FORGET (no reply; node ids are kept), GETATTR, READLINK, OPEN, READ, RELEASE, FLUSH,
STATFS, OPENDIR, READDIR, RELEASEDIR, ACCESS (allowed: ``default_permissions`` has the
kernel check modes), INTERRUPT (ignored), DESTROY; what would change the tree (WRITE,
CREATE, MKDIR, UNLINK, SETATTR, ...) gets EROFS, the rest ENOSYS (xattrs too: the kernel
then answers EOPNOTSUPP itself).

Clients: the one server can serve several mounts of the same directory at once (one
/dev/fuse connection each, ``select`` over them, still one request at a time). Each mount
is a client of its own, with its own kernel caches: K ranks each on a mount of its own are
K cold nodes against one metadata server. ``cache_s`` is how long a client keeps what it
was told (entries, missing names, attributes, a file's pages: like a Lustre client's
lock-protected caches); 0 keeps nothing (every path component looked up and every
attribute fetched again at every use, pages dropped at each open). Reads go through the
page cache (no direct I/O): shared libraries and extension modules can be mmapped from it.

Service: ``service_s`` seconds per metadata operation (LOOKUP, GETATTR, READLINK, OPEN,
OPENDIR, READDIR, STATFS, ACCESS) slept after the work, before the reply (``time.sleep``,
timer slack 1 ns, no busy wait), and ``read_s_per_mib`` seconds per MiB read (0: not
throttled). The loop's own CPU (Python: tens of microseconds a request) and the sleep's
wake-up latency add to each operation's service time: the *realised* rate
(``stats["realised_metadata_rate_per_s"]``: metadata operations over the time spent
serving them), not the nominal ``1 / service_s``, is what a caller should use.

Needs root, or a usable /dev/fuse and the right to mount(2) (``MountError`` says why not).
``MetaFS`` runs the server in its own process, so that its GIL never slows the caller.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import errno
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from scalesweep.measure.fuseproto import MAX_READ, Server

MS_RDONLY, MS_NOSUID, MS_NODEV, MNT_DETACH = 1, 2, 4, 2
PR_SET_PDEATHSIG, PR_SET_TIMERSLACK = 1, 29
LIBC = ctypes.CDLL(None, use_errno=True)


class MountError(RuntimeError):
    """The file system cannot be mounted here (no usable /dev/fuse, mount(2) refused)."""


def mount(mountpoint: str | Path) -> int:
    """Mount an empty FUSE connection read-only on ``mountpoint``; its /dev/fuse
    descriptor, whose reader must serve it (the first request is INIT)."""
    try:
        fd = os.open("/dev/fuse", os.O_RDWR | os.O_CLOEXEC)
    except OSError as exc:
        raise MountError(f"/dev/fuse cannot be opened: {exc.strerror} (needs root or a "
                         "usable /dev/fuse)") from None
    options = (f"fd={fd},rootmode=40000,user_id={os.getuid()},group_id={os.getgid()},"
               f"allow_other,default_permissions,max_read={MAX_READ}").encode()
    flags = ctypes.c_ulong(MS_RDONLY | MS_NOSUID | MS_NODEV)
    for fstype in (b"fuse.scalesweep-metafs", b"fuse"):
        if LIBC.mount(b"scalesweep-metafs", os.fsencode(mountpoint), fstype, flags,
                      options) == 0:
            return fd
        err = ctypes.get_errno()
    os.close(fd)
    raise MountError(f"mount(2) of a FUSE file system on {mountpoint} refused: "
                     f"{os.strerror(err)} (needs root: CAP_SYS_ADMIN)")


def unmount(mountpoint: str | Path) -> bool:
    """Detach the mount (umount2 MNT_DETACH); False if nothing was mounted there."""
    return LIBC.umount2(os.fsencode(mountpoint), MNT_DETACH) == 0


def is_mounted(mountpoint: str | Path) -> bool:
    """Whether ``mountpoint`` is on another device than its parent (a mount is there)."""
    path = os.path.abspath(mountpoint)
    return os.stat(path).st_dev != os.stat(os.path.dirname(path)).st_dev


def check_paths(backing: str | Path, mountpoint: str | Path) -> None:
    """Both directories, and neither inside the other: the server would wait on itself."""
    for path in (backing, mountpoint):
        if not os.path.isdir(path):
            raise NotADirectoryError(errno.ENOTDIR, "not a directory", str(path))
    b, m = os.path.realpath(backing), os.path.realpath(mountpoint)
    if os.path.commonpath([b, m]) in (b, m):
        raise ValueError(f"backing {b} and mount point {m} overlap")


def serve(backing: str | Path, mountpoints: list, service_s: float = 0.0,
          read_s_per_mib: float = 0.0, stats_path: str | Path | None = None,
          cache_s: float = 0.0) -> dict:
    """Mount ``backing`` on each of ``mountpoints`` (a client each), serve until all are
    unmounted or SIGTERM/SIGINT (then unmount), write the stats (JSON at ``stats_path``)
    and return them. Raises MountError if it cannot mount."""
    # SIGTERM/SIGINT go to a thread waiting for them, not to a handler (which runs between
    # bytecodes: a signal just before the loop's read of /dev/fuse would wait for the next
    # request). It unmounts (the read ends with ENODEV unless the mount is still in use),
    # then sends SIGUSR1 until the loop ends (``Server.interrupt``).
    signals = {signal.SIGTERM, signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, signals)
    LIBC.prctl(PR_SET_TIMERSLACK, ctypes.c_ulong(1), 0, 0, 0)  # precise short sleeps
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)  # a descriptor per open file
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 1 << 20)), hard))
    for mountpoint in mountpoints:
        check_paths(backing, mountpoint)
    server = Server([], backing, service_s, read_s_per_mib, cache_s)
    signal.signal(signal.SIGUSR1, server.interrupt)
    fds = []
    try:
        for mountpoint in mountpoints:
            fds.append(mount(mountpoint))
    except MountError:
        for mountpoint in mountpoints[:len(fds)]:
            unmount(mountpoint)
        raise
    server.fds = list(fds)
    serving, loop = [True], threading.get_ident()

    def watch():
        signal.sigwait(signals)
        server.signalled = True
        for mountpoint in mountpoints:
            unmount(mountpoint)
        while serving[0]:
            signal.pthread_kill(loop, signal.SIGUSR1)
            time.sleep(0.02)

    watcher = threading.Thread(target=watch, name="metafs-signals", daemon=True)
    watcher.start()
    try:
        server.serve()
    finally:
        serving[0] = False
        if server.signalled:
            watcher.join(1)
        for mountpoint, fd in zip(mountpoints, fds):
            unmount(mountpoint)
            os.close(fd)  # ends the connection if something still held the mount
        stats = server.stats()
        if stats_path:
            Path(stats_path).write_text(json.dumps(stats, indent=1) + "\n")
    return stats


class MetaFS:
    """``with MetaFS(backing, mountpoint, service_s=0.002) as fs: ...``: the backing
    directory served read-only at ``mountpoint`` (a path, or a list of them: a client
    each, ``cache_s`` its caches' timeout) by one server process; at exit it is unmounted
    and ``fs.stats`` holds the server's counters (a dict, see ``Server.stats``)."""

    def __init__(self, backing: str | Path, mountpoint, service_s: float = 0.0,
                 read_s_per_mib: float = 0.0, stats_path: str | Path | None = None,
                 timeout_s: float = 10.0, cache_s: float = 0.0):
        self.mountpoints = [Path(m).absolute() for m in
                            (mountpoint if isinstance(mountpoint, (list, tuple)) else [mountpoint])]
        self.backing, self.mountpoint = Path(backing), self.mountpoints[0]
        self.service_s, self.read_s_per_mib, self.cache_s = service_s, read_s_per_mib, cache_s
        self.stats_path, self.timeout_s = stats_path, timeout_s
        self.stats: dict = {}

    def __enter__(self) -> "MetaFS":
        for mountpoint in self.mountpoints:
            check_paths(self.backing, mountpoint)
            if is_mounted(mountpoint):
                raise MountError(f"{mountpoint} is already a mount point")
        self.scratch = tempfile.TemporaryDirectory(prefix="metafs-")  # stderr, own stats
        self.stats_file = Path(self.stats_path or Path(self.scratch.name) / "stats.json")
        self.stats_file.unlink(missing_ok=True)  # only this server's stats count
        self.stderr = open(Path(self.scratch.name) / "stderr", "w+b")
        workflow = str(Path(__file__).resolve().parents[2])  # the folder above scalesweep
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            p for p in (workflow, os.environ.get("PYTHONPATH")) if p))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "scalesweep.measure.metafs", "--backing",
             str(self.backing), *[a for m in self.mountpoints for a in ("--mount", str(m))],
             "--cache-s", repr(self.cache_s), "--service-us",
             repr(self.service_s * 1e6), "--read-us-per-mib", repr(self.read_s_per_mib * 1e6),
             "--stats", str(self.stats_file), "--die-with-parent"],
            env=env, stdin=subprocess.DEVNULL, stdout=self.stderr, stderr=self.stderr)
        deadline, why = time.monotonic() + self.timeout_s, "not in time"
        try:
            while not all(map(is_mounted, self.mountpoints)):
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    break
                time.sleep(0.005)
            else:
                return self
        except OSError as exc:  # the mount is there but does not answer
            why = f"it does not answer: {exc}"
        code = self.proc.poll()
        if code is None:
            self.proc.kill()
            self.proc.wait()
            for mountpoint in self.mountpoints:
                unmount(mountpoint)
        why = self.output() or why if code is not None else why
        self.stderr.close()
        self.scratch.cleanup()
        raise (MountError if code == 3 else RuntimeError)(
            f"metafs server did not mount {self.mountpoint}: {why}")

    def output(self) -> str:
        """What the server wrote (stdout and stderr)."""
        self.stderr.seek(0)
        return self.stderr.read().decode(errors="replace").strip()

    def __exit__(self, *exc) -> None:
        for mountpoint in self.mountpoints:  # the server reads ENODEV once nothing uses it
            unmount(mountpoint)
        # if something still holds the detached mount: SIGTERM (the server stops at once,
        # writing its stats), then SIGKILL
        for stop in (None, self.proc.terminate, self.proc.kill):
            if stop:
                stop()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=self.timeout_s)
                break
        try:
            self.stats = json.loads(self.stats_file.read_text())
        except (OSError, ValueError) as err:
            raise RuntimeError(f"metafs server left no stats ({err}): {self.output()}")
        finally:
            self.stderr.close()
            self.scratch.cleanup()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scalesweep.measure.metafs",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--backing", required=True, help="the directory served")
    parser.add_argument("--mount", required=True, action="append",
                        help="a mount point (a directory); again for another client")
    parser.add_argument("--cache-s", type=float, default=0.0,
                        help="how long a client keeps entries, attributes and pages")
    parser.add_argument("--service-us", type=float, default=0.0,
                        help="microseconds of service per metadata operation")
    parser.add_argument("--read-us-per-mib", type=float, default=0.0,
                        help="microseconds of service per MiB read (0: not throttled)")
    parser.add_argument("--stats", help="write the counters here (JSON) at the end")
    parser.add_argument("--die-with-parent", action="store_true",
                        help="end (unmounting) when the starting process ends")
    args = parser.parse_args(argv)
    if args.die_with_parent:
        LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    try:
        serve(args.backing, args.mount, args.service_us / 1e6, args.read_us_per_mib / 1e6,
              args.stats, args.cache_s)
    except (MountError, OSError, ValueError) as exc:
        print(f"metafs: {exc}", file=sys.stderr)
        return 3 if isinstance(exc, MountError) else 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
