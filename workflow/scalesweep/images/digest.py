"""What an image is, by content: the tree digest of a directory image (the same for two
builds of the same content), the sha256 of a file image, its size; the manifest's schema."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

from scalesweep.images.process import BuildError
from scalesweep.record.dataset import sha256_file


MANIFEST_SCHEMA = "scalesweep.image-manifest/1"
DIGEST_METHOD = (
    "scalesweep-tree-v1: sha256 over entries in sorted byte order of their relative "
    "paths; each entry = type, permission bits, owner/group relative to the image "
    "root's owner (numeric), size and sha256 of content (files) or link target "
    "(symlinks); mtimes ignored; /ch (Charliecloud metadata) excluded"
)
DIGEST_EXCLUDE = ("ch",)

def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()

def content_digest(path: str | os.PathLike, exclude: tuple[str, ...] = DIGEST_EXCLUDE) -> str:
    """Reproducible digest of an image directory tree: ``"sha256:<hex>"``.

    Equal for two independent builds of the same content (see DIGEST_METHOD): names
    are sorted, owners are numeric and relative to the root's owner (an unprivileged
    build owns every file by the builder's uid), mtimes are ignored. Top-level names in
    ``exclude`` are skipped. A regular file (e.g. a SquashFS or SIF image) is hashed as
    bytes, which is NOT reproducible between builds: hash the directory it came from.
    """
    root = Path(path)
    st_root = os.lstat(root)
    if stat.S_ISREG(st_root.st_mode):
        return "sha256:" + sha256_file(root)
    if not stat.S_ISDIR(st_root.st_mode):
        raise BuildError(f"content_digest: {root} is neither a directory nor a file")
    uid0, gid0 = st_root.st_uid, st_root.st_gid
    h = hashlib.sha256()
    h.update(b"scalesweep-tree-v1\0")
    skip = {e.encode() for e in exclude}

    def walk(dirpath: bytes, rel: bytes) -> None:
        with os.scandir(dirpath) as it:
            names = sorted(e.name for e in it)
        for name in names:
            if not rel and name in skip:
                continue
            full = os.path.join(dirpath, name)
            relname = rel + b"/" + name if rel else name
            st = os.lstat(full)
            mode = st.st_mode
            uid = 0 if st.st_uid == uid0 else st.st_uid
            gid = 0 if st.st_gid == gid0 else st.st_gid
            perm = stat.S_IMODE(mode)
            if stat.S_ISDIR(mode):
                kind, extra = b"d", b""
            elif stat.S_ISREG(mode):
                kind = b"f"
                extra = b"%d:%s" % (st.st_size, sha256_file(full).encode())
            elif stat.S_ISLNK(mode):
                kind, extra = b"l", os.readlink(full)
            elif stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
                kind = b"c" if stat.S_ISCHR(mode) else b"b"
                extra = b"%d:%d" % (os.major(st.st_rdev), os.minor(st.st_rdev))
            elif stat.S_ISFIFO(mode):
                kind, extra = b"p", b""
            else:
                kind, extra = b"s", b""
            h.update(b"%s\0%s\0%o\0%d\0%d\0%s\n" % (kind, relname, perm, uid, gid, extra))
            if kind == b"d":
                walk(full, relname)

    walk(os.fsencode(root), b"")
    return "sha256:" + h.hexdigest()

def tree_size(path: str | os.PathLike) -> int:
    """Bytes of regular files (each inode once) plus symlink lengths; a file's size."""
    p = Path(path)
    st = os.lstat(p)
    if not stat.S_ISDIR(st.st_mode):
        return st.st_size
    seen: set[tuple[int, int]] = set()
    total = 0
    for dirpath, dirnames, filenames in os.walk(p):
        for name in filenames + dirnames:
            s = os.lstat(os.path.join(dirpath, name))
            if stat.S_ISREG(s.st_mode):
                if (s.st_dev, s.st_ino) in seen:
                    continue
                seen.add((s.st_dev, s.st_ino))
                total += s.st_size
            elif stat.S_ISLNK(s.st_mode):
                total += s.st_size
    return total
