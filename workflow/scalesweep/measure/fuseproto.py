"""The kernel's FUSE protocol, the subset a read-only passthrough needs
(include/uapi/linux/fuse.h), and the one loop that serves it from a backing directory:
``scalesweep.measure.metafs``'s server (issue #44; its docstring says what is served, how
the clients' caches are set and how the service time is spent). Standard library only."""

from __future__ import annotations

import errno
import os
import select
import stat
import struct
import time
import traceback
from collections import Counter
from pathlib import Path

OPCODES = dict(enumerate("""
LOOKUP FORGET GETATTR SETATTR READLINK SYMLINK - MKNOD MKDIR UNLINK RMDIR RENAME
LINK OPEN READ WRITE STATFS RELEASE - FSYNC SETXATTR GETXATTR LISTXATTR
REMOVEXATTR FLUSH INIT OPENDIR READDIR RELEASEDIR FSYNCDIR GETLK SETLK SETLKW
ACCESS CREATE INTERRUPT BMAP DESTROY IOCTL POLL NOTIFY_REPLY BATCH_FORGET
FALLOCATE READDIRPLUS RENAME2 LSEEK COPY_FILE_RANGE SETUPMAPPING REMOVEMAPPING
SYNCFS TMPFILE STATX""".split(), 1))  # by opcode (1...); "-": none
METADATA = {"LOOKUP", "GETATTR", "READLINK", "OPEN", "OPENDIR", "READDIR", "STATFS",
            "ACCESS"}
CHANGES = {"SETATTR", "SYMLINK", "MKNOD", "MKDIR", "UNLINK", "RMDIR", "RENAME", "LINK",
           "WRITE", "SETXATTR", "REMOVEXATTR", "CREATE", "FALLOCATE", "RENAME2",
           "COPY_FILE_RANGE", "TMPFILE"}
NO_REPLY = {"FORGET", "BATCH_FORGET", "INTERRUPT"}

# include/uapi/linux/fuse.h, native byte order, no padding ("=")
IN_HEADER = struct.Struct("=IIQQIIIHH")        # fuse_in_header, 40 bytes
OUT_HEADER = struct.Struct("=IiQ")             # fuse_out_header, 16
ATTR = "QQQQQQIIIIIIIIII"                      # fuse_attr, 88
ENTRY_OUT = struct.Struct("=QQQQII" + ATTR)    # fuse_entry_out, 128
ATTR_OUT = struct.Struct("=QII" + ATTR)        # fuse_attr_out, 104
OPEN_OUT = struct.Struct("=QII")               # fuse_open_out, 16
READ_IN = struct.Struct("=QQIIQII")            # fuse_read_in, 40 (READ and READDIR)
INIT_IN = struct.Struct("=IIII")               # fuse_init_in: major, minor, readahead, flags
INIT_OUT = struct.Struct("=IIIIHHIIHHI7I")     # fuse_init_out, 64
KSTATFS = struct.Struct("=QQQQQIIII6I")        # fuse_kstatfs, 80
DIRENT = struct.Struct("=QQII")                # fuse_dirent before its name, 24
FIRST = struct.Struct("=I")                    # fuse_open_in's flags
HANDLE = struct.Struct("=Q")                   # fuse_release_in's fh

MINOR = 31                   # the protocol minor we speak (the kernel accepts an older one)
MAX_READ = 128 * 1024        # the largest READ the kernel sends (and max_write, unused)
BUFFER = 1024 * 1024 + 4096  # /dev/fuse wants a read buffer above max_write + headers
FOPEN_KEEP_CACHE = 1 << 1


class Interrupted(Exception):
    """The loop's wait for a request is over: it was signalled to end."""


def attr(st: os.stat_result) -> tuple:
    """A fuse_attr's fields from a backing file's lstat."""
    (a, an), (m, mn), (c, cn) = (divmod(t, 10**9) for t in
                                 (st.st_atime_ns, st.st_mtime_ns, st.st_ctime_ns))
    return (st.st_ino, st.st_size, st.st_blocks, a, m, c, an, mn, cn, st.st_mode,
            st.st_nlink, st.st_uid, st.st_gid, st.st_rdev, st.st_blksize, 0)


class Server:
    """The one loop that serves a mounted connection from a backing directory."""

    def __init__(self, fds: list[int], backing: str | Path, service_s: float = 0.0,
                 read_s_per_mib: float = 0.0, cache_s: float = 0.0):
        self.fds, self.service_s, self.read_s_per_mib = list(fds), service_s, read_s_per_mib
        self.valid = (int(cache_s), int(cache_s % 1 * 1e9))  # a reply's timeout: s, ns
        root = os.fsencode(os.path.abspath(backing))
        self.paths: dict[int, bytes] = {1: root}  # node id -> backing path
        self.ids: dict[bytes, int] = {root: 1}
        self.files: set[int] = set()      # open backing descriptors: the files' handles
        self.dirs: dict[int, list] = {}   # directory handle -> its entries
        self.counts: Counter = Counter()
        self.metadata_ops = self.bytes_read = 0
        self.busy_s = self.metadata_busy_s = 0.0
        self.started, self.ended = time.time(), ""
        # set by serve()'s signal watcher, which then unmounts; waiting for a request
        self.signalled = self.reading = False

    def serve(self) -> None:
        """Serve until every connection ends (ENODEV: unmounted; DESTROY), or a signal:
        one request at a time, the ready connections in turn."""
        buf = bytearray(BUFFER)
        view = memoryview(buf)
        while self.fds and not self.ended:
            try:  # SIGUSR1 can raise Interrupted here, only here, once per wait
                self.reading = True
                ready = select.select(self.fds, [], [])[0]  # EINTR is retried (PEP 475)
                self.reading = False
            except Interrupted:
                break
            for fd in ready:
                try:
                    n = os.readv(fd, [buf])
                except OSError as exc:
                    if exc.errno != errno.ENODEV:  # ENODEV: unmounted, nothing uses it
                        raise
                    self.fds.remove(fd)
                    continue
                start = time.perf_counter()
                length, opcode, unique, node = IN_HEADER.unpack_from(buf)[:4]
                name = OPCODES.get(opcode, f"OP{opcode}")
                self.counts[name] += 1
                reply = self.handle(name, node, bytes(view[IN_HEADER.size:min(length, n)]))
                if reply is not None:
                    self.send(fd, unique, *reply)
                if name == "DESTROY" and fd in self.fds:  # that connection only
                    self.fds.remove(fd)
                spent = time.perf_counter() - start
                self.busy_s += spent
                if name in METADATA:
                    self.metadata_ops += 1
                    self.metadata_busy_s += spent
        self.ended = self.ended or ("signalled" if self.signalled else "unmounted")

    def interrupt(self, signum=None, frame=None) -> None:
        """SIGUSR1's handler: end the loop's wait for a request (a mount still in use
        after the unmount may send none); raises only while the loop waits, and once."""
        if self.reading:
            self.reading = False
            raise Interrupted

    def send(self, fd: int, unique: int, error: int, payload: bytes = b"") -> None:
        try:
            os.write(fd, OUT_HEADER.pack(OUT_HEADER.size + len(payload), -error,
                                         unique) + payload)
        except OSError as exc:
            if exc.errno == errno.ENODEV and fd in self.fds:  # unmounted meanwhile
                self.fds.remove(fd)
            elif exc.errno != errno.ENOENT:  # ENOENT: the request was interrupted
                raise

    def handle(self, name: str, node: int, body: bytes) -> tuple | None:
        """(error number or 0, reply payload), or None for no reply; a metadata
        operation's service time is slept after its work, failed or not."""
        if name in NO_REPLY:
            return None
        method = getattr(self, "do_" + name.lower(), None)
        if name in CHANGES or method is None:
            return (errno.EROFS if name in CHANGES else errno.ENOSYS), b""
        payload, error = b"", 0
        try:
            if node not in self.paths and name in METADATA:
                raise OSError(errno.ESTALE, "unknown node id")
            payload = method(node, body)
        except OSError as exc:
            error = exc.errno or errno.EIO
        except Exception:  # a bug or a malformed request: EIO, and the server goes on
            traceback.print_exc()
            error = errno.EIO
        if name in METADATA and self.service_s > 0:
            time.sleep(self.service_s)
        return error, payload

    def do_init(self, node, body):
        major, minor, readahead, _ = INIT_IN.unpack_from(body)
        if major != 7:
            raise OSError(errno.EPROTO, f"FUSE major {major}")
        return INIT_OUT.pack(7, min(minor, MINOR), readahead, 0, 0, 0, MAX_READ, 0, 0, 0, 0,
                             *[0] * 7)

    def do_destroy(self, node, body):  # its connection only: serve() drops it
        return b""

    def do_lookup(self, node, body):
        path = os.path.join(self.paths[node], body.split(b"\0", 1)[0])
        s, ns = self.valid
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            if not (s or ns):
                raise
            return ENTRY_OUT.pack(0, 0, s, 0, ns, 0, *[0] * 16)  # node 0: a missing name kept
        child = self.ids.setdefault(path, len(self.ids) + 1)  # the same at every lookup
        self.paths[child] = path
        return ENTRY_OUT.pack(child, 0, s, s, ns, ns, *attr(st))

    def do_getattr(self, node, body):
        return ATTR_OUT.pack(*self.valid, 0, *attr(os.lstat(self.paths[node])))

    def do_readlink(self, node, body):
        return os.readlink(self.paths[node])

    def do_open(self, node, body):
        if FIRST.unpack_from(body)[0] & os.O_ACCMODE != os.O_RDONLY:
            raise OSError(errno.EROFS, "read-only")
        fd = os.open(self.paths[node], os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
        self.files.add(fd)
        return OPEN_OUT.pack(fd, FOPEN_KEEP_CACHE if any(self.valid) else 0, 0)

    def do_read(self, node, body):
        fh, offset, size = READ_IN.unpack_from(body)[:3]
        if fh not in self.files:
            raise OSError(errno.EBADF, "unknown file handle")
        data = os.pread(fh, size, offset)
        self.bytes_read += len(data)
        if self.read_s_per_mib > 0 and data:
            time.sleep(self.read_s_per_mib * len(data) / 2**20)
        return data

    def do_release(self, node, body):
        fh = HANDLE.unpack_from(body)[0]
        if fh in self.files:
            self.files.discard(fh)
            os.close(fh)
        return b""

    def do_flush(self, node, body):
        return b""

    do_access = do_flush  # allowed: the kernel checks modes (default_permissions)

    def do_statfs(self, node, body):
        s = os.statvfs(self.paths[1])
        return KSTATFS.pack(s.f_blocks, s.f_bfree, s.f_bavail, s.f_files, s.f_ffree,
                            s.f_bsize, s.f_namemax, s.f_frsize, 0, *[0] * 6)

    def do_opendir(self, node, body):
        path = self.paths[node]
        entries = [(os.lstat(path).st_ino, stat.S_IFDIR, b"."),
                   (os.lstat(os.path.join(path, b"..")).st_ino, stat.S_IFDIR, b"..")]
        with os.scandir(path) as it:
            for e in it:
                kind = (stat.S_IFLNK if e.is_symlink() else stat.S_IFDIR
                        if e.is_dir(follow_symlinks=False) else stat.S_IFREG
                        if e.is_file(follow_symlinks=False) else 0)
                entries.append((e.inode(), kind, e.name))
        handle = max(self.dirs, default=0) + 1
        self.dirs[handle] = entries
        return OPEN_OUT.pack(handle, 0, 0)

    def do_readdir(self, node, body):
        handle, offset, size = READ_IN.unpack_from(body)[:3]
        if handle not in self.dirs:
            raise OSError(errno.EBADF, "unknown directory handle")
        out, used = [], 0
        for index, (ino, kind, name) in enumerate(self.dirs[handle][offset:], offset):
            record = DIRENT.pack(ino, index + 1, len(name), kind >> 12) + name
            record += b"\0" * (-len(record) % 8)  # names padded to 8 bytes
            if used + len(record) > size:
                break
            out.append(record)
            used += len(record)
        return b"".join(out)

    def do_releasedir(self, node, body):
        self.dirs.pop(HANDLE.unpack_from(body)[0], None)
        return b""

    def stats(self) -> dict:
        """The counters: requests by opcode, metadata operations, bytes read, the time
        spent serving (all requests; metadata ones), the nominal and realised rates."""
        return {"opcodes": dict(sorted(self.counts.items())),
                "requests": sum(self.counts.values()), "metadata_ops": self.metadata_ops,
                "bytes_read": self.bytes_read, "busy_s": self.busy_s,
                "metadata_busy_s": self.metadata_busy_s, "service_s": self.service_s,
                "read_s_per_mib": self.read_s_per_mib,
                "nominal_metadata_rate_per_s": 1 / self.service_s if self.service_s else None,
                "realised_metadata_rate_per_s": self.metadata_ops / self.metadata_busy_s
                if self.metadata_busy_s else None,
                "served_s": time.time() - self.started, "ended": self.ended,
                # the server's own CPU: on a node shared with the ranks its busy time
                # (wall clock) holds the moments it waited for a core too
                "cpu_s": time.process_time()}
