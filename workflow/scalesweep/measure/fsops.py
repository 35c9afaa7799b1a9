"""What a process's start does to the file system (issue #44): its file-system operations
counted with a real tracer (strace(1): every thread and child, ``-f``, wall-clock
timestamps ``-ttt``, each descriptor's path ``-y``), outside any measured run, to its end
or up to a moment the caller gives (``until``: e.g. a payload's own first-step time; the
container start-up probes are traced whole, they end at their start).

The counts do not depend on the machine's speed: they are the portable part of a start-up
result (how many metadata operations a thousand ranks starting at once ask of a shared
file system). Per class of system call:

- ``open``: open, openat, openat2, creat (each attempt; ``failed`` counts those that
  returned an error: a lookup of a file that is not there, which the interpreter's module
  search makes by the hundred);
- ``stat``: stat, lstat, fstat, newfstatat, statx, access, faccessat, faccessat2, readlink,
  readlinkat, getdents64 (the metadata a lookup costs);
- ``read``: read, pread64, readv, preadv, preadv2 of any descriptor (with the bytes they
  returned; pages of a file mapped with mmap, the shared libraries, are read by page
  faults, not counted here);
- ``mmap``: mmap of a file (the libraries and extension modules a start maps).

Each path is classed by where it lies: ``kernel`` (/proc, /sys, /dev), ``bound`` (under
one of the bind targets the caller names: a container's /mnt/code, /mnt/data ...: the
host's file system seen from inside), ``image`` (under the image's own host path: the
runtime reading the image before it enters it, a SquashFS image's FUSE daemon), and
otherwise ``root`` (the process's root file system: the image's inside a container, the
host's natively and for the runtime's own files); ``unnamed``: a call whose path strace
could not read. A descriptor's call is placed by the path strace prints with
the descriptor; a pipe, socket or anonymous descriptor is no file-system operation and is
not counted. ``files``: the distinct paths opened successfully. Standard library only.
"""

from __future__ import annotations

import re
import shutil
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

CLASSES = {
    "open": ("open", "openat", "openat2", "creat"),
    "stat": ("stat", "lstat", "fstat", "newfstatat", "statx", "access", "faccessat",
             "faccessat2", "readlink", "readlinkat", "getdents64"),
    "read": ("read", "pread64", "readv", "preadv", "preadv2"),
    "mmap": ("mmap",),
}
SYSCALLS = tuple(s for names in CLASSES.values() for s in names)
CLASS_OF = {s: c for c, names in CLASSES.items() for s in names}
KERNEL = ("/proc", "/sys", "/dev")
LOCATIONS = ("root", "image", "bound", "kernel", "unnamed")

# `PID SECONDS.USEC name(args) = result` (possibly resumed: `<... name resumed>args) = r`)
_LINE = re.compile(r"^(?:\[pid\s+)?(?P<pid>\d+)\]?\s+(?P<t>\d+\.\d+)\s+(?P<rest>.*)$")
_CALL = re.compile(r"^(?P<name>[a-z0-9_]+)\((?P<args>.*)\)\s+=\s+(?P<ret>-?\d+|\?|0x[0-9a-f]+)"
                   r"(?:<[^>]*>)?(?:\s+(?P<err>E[A-Z]+))?")
_UNFINISHED = re.compile(r"^(?P<name>[a-z0-9_]+)\((?P<args>.*)\s+<unfinished \.\.\.>$")
_RESUMED = re.compile(r"^<\.\.\. (?P<name>[a-z0-9_]+) resumed>(?P<args>.*)\)\s+=\s+"
                      r"(?P<ret>-?\d+|\?|0x[0-9a-f]+)(?:<[^>]*>)?(?:\s+(?P<err>E[A-Z]+))?")
_PATH = re.compile(r'"((?:[^"\\]|\\.)*)"')


class TraceError(RuntimeError):
    """The tracer is missing or its output cannot be read; the message says which."""


def strace_argv(argv: list[str], out: str | Path, strace: str | None = None) -> list[str]:
    """``argv`` under strace: every thread and child, wall-clock timestamps, each
    descriptor with the path it is open on (``-y``: shared by threads, inherited by
    children), the traced calls only, paths in full (strace never shortens them), to
    ``out``."""
    exe = strace or shutil.which("strace")
    if not exe:
        raise TraceError("strace not found (apt-get install strace): the file-system "
                         "operations of a start are counted with it")
    return [exe, "-f", "-qq", "-y", "-ttt", "-s", "0", "-e", f"trace={','.join(SYSCALLS)}",
            "-o", str(out), "--", *argv]


@dataclass
class Counts:
    """One trace's operations (module docstring)."""

    ops: Counter = field(default_factory=Counter)  # (class, location) -> calls
    failed: Counter = field(default_factory=Counter)  # class -> calls that returned an error
    bytes_read: int = 0
    files: set = field(default_factory=set)  # distinct paths opened successfully
    processes: set = field(default_factory=set)
    first_t: float | None = None
    last_t: float | None = None

    def total(self, cls: str) -> int:
        return sum(n for (c, _), n in self.ops.items() if c == cls)

    def as_dict(self) -> dict:
        out = {"processes": len(self.processes), "files": len(self.files),
               "bytes_read": self.bytes_read,
               "seconds": (round(self.last_t - self.first_t, 6)
                           if self.first_t is not None and self.last_t is not None else None)}
        for cls in CLASSES:
            out[cls] = self.total(cls)
            out[f"{cls}_failed"] = self.failed[cls]
            for loc in LOCATIONS:
                out[f"{cls}_{loc}"] = self.ops[(cls, loc)]
        return out


def location(path: str | None, bound: Iterable[str] = (), image: str | None = None) -> str:
    """Where ``path`` lies (module docstring); ``unnamed`` where the trace has none."""
    if not path:
        return "unnamed"
    if image and (path == image.rstrip("/") or path.startswith(image.rstrip("/") + "/")):
        return "image"
    if not path.startswith("/"):
        return "root"  # relative to the working directory, which is in the root fs here
    for prefix in KERNEL:
        if path == prefix or path.startswith(prefix + "/"):
            return "kernel"
    for target in bound:
        target = target.rstrip("/")
        if path == target or path.startswith(target + "/"):
            return "bound"
    return "root"


def _first_path(args: str) -> str | None:
    m = _PATH.search(args)
    return m.group(1).encode().decode("unicode_escape") if m else None


# calls on a descriptor (its first argument; mmap's fifth): placed where the descriptor's
# file lies, as strace -y prints it (`read(3</usr/lib/x.so>, ...)`); a pipe, socket or
# other anonymous descriptor is no file-system operation and is not counted
FD_CALLS = {"read", "pread64", "readv", "preadv", "preadv2", "fstat", "getdents64", "mmap"}
_FD = re.compile(r"^\s*-?\d+<(?P<path>(?:[^>\\]|\\.)*)>")
NOT_FILES = ("pipe:", "socket:", "anon_inode:", "/memfd:")


def _fd_path(arg: str) -> str | None:
    """The path strace -y printed for a descriptor argument (``3</x/y>``); None without one."""
    m = _FD.match(arg)
    return m["path"] if m else None


def count(lines: Iterable[str], bound: Iterable[str] = (), until: float | None = None,
          image: str | None = None) -> Counts:
    """The operations of an strace log (``strace_argv``'s format) up to wall-clock time
    ``until`` (all of it where None)."""
    bound = tuple(bound)
    c = Counts()
    pending: dict[tuple[int, str], str] = {}  # (pid, name) -> args of an unfinished call
    for raw in lines:
        m = _LINE.match(raw.rstrip("\n"))
        if not m:
            continue
        pid, t, rest = int(m["pid"]), float(m["t"]), m["rest"]
        if until is not None and t > until:
            break
        u = _UNFINISHED.match(rest)
        if u:
            pending[(pid, u["name"])] = u["args"]
            continue
        r = _RESUMED.match(rest)
        if r:
            name = r["name"]
            args = pending.pop((pid, name), "") + r["args"]
            ret, err = r["ret"], r["err"]
        else:
            call = _CALL.match(rest)
            if not call:
                continue
            name, args, ret, err = call["name"], call["args"], call["ret"], call["err"]
        cls = CLASS_OF.get(name)
        if cls is None:
            continue
        parts = args.split(", ")
        if name in FD_CALLS:
            if name == "mmap":  # mmap(addr, length, prot, flags, fd, offset)
                if len(parts) < 5 or parts[4].strip() == "-1":
                    continue  # anonymous memory, not a file
                path = _fd_path(parts[4])
            else:
                path = _fd_path(parts[0])
            if path is None or path.startswith(NOT_FILES):
                continue
        else:
            path = _first_path(args)
            if path == "" or (path and not path.startswith("/")):
                # fstatat(fd, "", AT_EMPTY_PATH) or a path relative to a directory descriptor
                # (AT_FDCWD</cwd> included): where that directory lies
                base = _fd_path(parts[0].replace("AT_FDCWD", "-100"))
                if base is not None:
                    path = f"{base.rstrip('/')}/{path}" if path else base
        c.processes.add(pid)
        c.first_t = t if c.first_t is None else c.first_t
        c.last_t = t
        where = location(path, bound, image)
        c.ops[(cls, where)] += 1
        if err:
            c.failed[cls] += 1
            continue
        if cls == "open":
            c.files.add(path)
        elif cls == "read" and ret.isdigit():
            c.bytes_read += int(ret)
    return c


def count_file(path: str | Path, bound: Iterable[str] = (), until: float | None = None,
               image: str | None = None) -> Counts:
    """``count`` of an strace log file (strace writes ``PATH.PID`` per process only with
    ``-ff``; ``strace_argv`` writes one file)."""
    try:
        with open(path, errors="replace") as fh:
            return count(fh, bound, until, image=image)
    except OSError as exc:
        raise TraceError(f"cannot read the trace {path}: {exc.strerror}") from None


def trace(argv: list[str], env: dict | None = None, bound: Iterable[str] = (),
          image: str | None = None, workdir: str | Path | None = None) -> dict:
    """Run ``argv`` once under strace and count its operations (``Counts.as_dict``, with
    its ``exit_code``); never beside a measurement: the caller runs it on its own."""
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory(prefix="scalesweep-fsops-", dir=workdir) as tmp:
        out = Path(tmp) / "strace.log"
        proc = subprocess.run(strace_argv(argv, out), env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True, errors="replace")
        counts = count_file(out, bound, image=image)
    if not counts.processes:  # strace could not trace it (ptrace refused, a call unknown)
        raise TraceError(f"strace recorded no call of {argv[0]} (exit {proc.returncode}): "
                         f"{proc.stderr.strip()[-300:] or 'no message'}")
    return {**counts.as_dict(), "exit_code": proc.returncode}
