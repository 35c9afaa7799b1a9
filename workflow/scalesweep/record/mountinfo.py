"""The mounts a process sees, read from proc(5)'s ``mountinfo`` (by default this
process's): the one parser for the full-disk reason (``record.failures.device_of``), the
OOM counters' cgroup hierarchy (``measure.oomkill``) and the summary's attribute-cached
file systems (``analyse.cachefiles``)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Mount:
    dev: int          # st_dev of the files below it
    root: str         # the mount's root inside its file system
    point: str        # where it is mounted
    fstype: str
    source: str       # e.g. /dev/sda1, tmpfs
    options: str      # the file system's own (super) options, e.g. for cgroup v1 "rw,memory"


def unescape(text: str) -> str:
    """A mountinfo field with its octal escapes (\\040 a space, \\134 a backslash) undone."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), text)


def mounts(text: str | None = None, proc: str = "/proc/self") -> list[Mount]:
    """Every well-formed line of ``text`` (``<proc>/mountinfo`` where None; [] where it
    cannot be read), in order."""
    if text is None:
        try:
            with open(os.path.join(proc, "mountinfo")) as fh:
                text = fh.read()
        except OSError:
            return []
    out = []
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if not sep or len(fields) < 5 or len(tail) < 2:
            continue
        try:
            major, minor = (int(x) for x in fields[2].split(":"))
        except ValueError:
            continue
        out.append(Mount(os.makedev(major, minor), unescape(fields[3]), unescape(fields[4]),
                         tail[0], unescape(tail[1]), tail[2] if len(tail) > 2 else ""))
    return out


def mount_of(path: str | os.PathLike, table: list[Mount] | None = None) -> Mount | None:
    """The mount holding ``path`` (symbolic links resolved): the deepest mount point above
    it, the last mounted where two share one; None where mountinfo cannot tell."""
    target = os.path.realpath(path)
    best = None
    for m in mounts() if table is None else table:
        if (target == m.point or target.startswith(m.point.rstrip("/") + "/")) and (
                best is None or len(m.point) >= len(best.point)):
            best = m
    return best
