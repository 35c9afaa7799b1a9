"""Dataset manifests: what was staged, and a check that it is still all there.

Standard library only (used on compute nodes and inside containers). A manifest is
``MANIFEST.sha256`` in ``sha256sum`` format at the dataset root, so a site can also check
it with coreutils: ``cd DATASET && sha256sum -c MANIFEST.sha256``.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

MANIFEST = "MANIFEST.sha256"
INFO = "dataset.json"
_SKIP = {MANIFEST, INFO}


class DatasetError(RuntimeError):
    """A dataset is missing, incomplete, corrupted or malformed."""


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


def _data_files(root: Path) -> list[str]:
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            rel = os.path.relpath(os.path.join(dirpath, name), root)
            if rel not in _SKIP and not name.startswith("."):
                out.append(rel)
    return out


def write_manifest(root: str | os.PathLike) -> Path:
    """Hash every data file under ``root`` into ``root/MANIFEST.sha256`` (atomically)."""
    root = Path(root)
    lines = [f"{sha256_file(root / rel)}  {rel}\n" for rel in _data_files(root)]
    if not lines:
        raise DatasetError(f"{root}: no data files to put in a manifest")
    tmp = root / f".{MANIFEST}.tmp"
    tmp.write_text("".join(lines))
    os.replace(tmp, root / MANIFEST)
    return root / MANIFEST


def read_manifest(root: Path) -> dict[str, str]:
    path = root / MANIFEST
    if not path.is_file():
        raise DatasetError(f"{root}: no {MANIFEST}; stage the dataset first")
    entries: dict[str, str] = {}
    for n, line in enumerate(path.read_text().splitlines(), 1):
        digest, sep, rel = line.partition("  ")
        if not sep or len(digest) != 64:
            raise DatasetError(f"{path}:{n}: malformed manifest line {line!r}")
        entries[rel] = digest
    return entries


def verify(root: str | os.PathLike, deep: bool = True) -> int:
    """Check ``root`` against its manifest; return the number of files.

    Refuses missing, extra, and (with ``deep``) corrupted files, naming the first few.
    """
    root = Path(root)
    if not root.is_dir():
        raise DatasetError(f"{root}: dataset directory does not exist")
    expected = read_manifest(root)
    present = set(_data_files(root))
    missing = sorted(set(expected) - present)
    extra = sorted(present - set(expected))
    problems = []
    if missing:
        problems.append(f"{len(missing)} missing (e.g. {', '.join(missing[:3])})")
    if extra:
        problems.append(f"{len(extra)} not in manifest (e.g. {', '.join(extra[:3])})")
    if deep:
        bad = [rel for rel in sorted(present & set(expected))
               if sha256_file(root / rel) != expected[rel]]
        if bad:
            problems.append(f"{len(bad)} corrupted, checksum mismatch (e.g. {', '.join(bad[:3])})")
    if problems:
        raise DatasetError(f"{root}: dataset does not match {MANIFEST}: " + "; ".join(problems))
    return len(expected)


def stage_copy(src: str | os.PathLike, dest: str | os.PathLike) -> Path:
    """Copy a verified dataset to ``dest`` (e.g. node-local NVMe) and verify the copy.

    The copy goes to a temporary sibling and is renamed into place only once verified,
    so a failed copy never leaves a dataset that looks complete.
    """
    src, dest = Path(src), Path(dest)
    verify(src, deep=False)
    if dest.is_dir():
        try:
            verify(dest, deep=True)
            return dest
        except DatasetError:
            shutil.rmtree(dest)
    tmp = dest.with_name(f".{dest.name}.staging-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(src, tmp)
    verify(tmp, deep=True)
    os.replace(tmp, dest)
    return dest
