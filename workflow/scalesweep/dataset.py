"""Dataset manifests: what was staged, and a check that it is still all there.

Standard library only (used on compute nodes and inside containers). A manifest is
``MANIFEST.sha256`` in ``sha256sum`` format at the dataset root, so a site can also check
it with coreutils: ``cd DATASET && sha256sum -c MANIFEST.sha256``.

Beside it, ``MANIFEST.state.json`` records what the staging left: the manifest's own
sha256, and each file's size and modification time. Every run checks its dataset against
both (``check_staged``): cheap (one stat per file and the manifest's digest), hashing only
the files whose size or time changed since staging (and those written too close to the
staging for their time to tell, as git does with its index).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from pathlib import Path

MANIFEST = "MANIFEST.sha256"
INFO = "dataset.json"
STATE = "MANIFEST.state.json"  # sizes and times at staging (check_staged)
STAGED_DIR = "resources/datasets"  # a campaign's staged copies: <STAGED_DIR>/<name>
_SKIP = {MANIFEST, INFO, STATE}
# what PIL raises for a damaged image (UnidentifiedImageError is an OSError, a bad chunk
# checksum a SyntaxError, a bad size a ValueError): the payloads and the staging name the file
IMAGE_ERRORS = (OSError, SyntaxError, ValueError)
# a file modified this close before the state was written may keep its recorded time
# (coarse file system clocks: FAT 2 s): it is hashed at every check
_RACY_NS = 2_000_000_000


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
    """Hash every data file under ``root`` into ``root/MANIFEST.sha256``, and record the
    manifest's digest and every file's size and time in ``root/MANIFEST.state.json``
    (each atomically)."""
    root = Path(root)
    files = _data_files(root)
    lines = [f"{sha256_file(root / rel)}  {rel}\n" for rel in files]
    if not lines:
        raise DatasetError(f"{root}: no data files to put in a manifest")
    _write_atomic(root / MANIFEST, "".join(lines))
    stats = {rel: os.stat(root / rel) for rel in files}
    state = {"manifest_sha256": sha256_file(root / MANIFEST), "written_ns": time.time_ns(),
             "files": {rel: [st.st_size, st.st_mtime_ns] for rel, st in stats.items()}}
    _write_atomic(root / STATE, json.dumps(state, sort_keys=True))
    return root / MANIFEST


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


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


def restage_hint(root: Path) -> str:
    """How to stage dataset ``root`` afresh (its campaign copy, ``STAGED_DIR/<name>``)
    without measuring anything again: a forced stage_dataset job. Deleting the copy
    instead would make Snakemake run every finished point of it again."""
    return (f"restage it with your usual snakemake command plus `--forcerun "
            f"{STAGED_DIR}/{root.name}` (it stages dataset {root.name} afresh from its source, "
            f"datasets.{root.name}, and measures nothing), then run your command again: it "
            "measures the points without metrics.json; finished points are kept")


def _manifest_state(root: Path) -> dict | None:
    """The staging's record (``STATE``) if there is one, after checking that the manifest
    is still the one it recorded."""
    path = root / STATE
    if not path.is_file():
        return None  # staged before states were recorded
    try:
        state = json.loads(path.read_text())
        recorded = state["manifest_sha256"]
    except (ValueError, KeyError, TypeError) as exc:
        raise DatasetError(f"{path}: unreadable ({exc}); {restage_hint(root)}") from None
    if (root / MANIFEST).is_file() and sha256_file(root / MANIFEST) != recorded:
        raise DatasetError(f"{root / MANIFEST} changed since the dataset was staged (its sha256 "
                           f"is not the one {STATE} recorded); {restage_hint(root)}")
    return state


def check_staged(root: str | os.PathLike) -> int:
    """The check of every run: ``root`` against its manifest, cheaply. The manifest's
    digest must be the one recorded at staging, every file listed must be there with its
    recorded size, and no other; a file whose time changed since staging is hashed
    (``verify`` hashes every file). Returns the number of files. Without a recorded
    state (staged by an older version) every file is hashed."""
    root = Path(root)
    if not root.is_dir():
        raise DatasetError(f"{root}: dataset directory does not exist")
    state = _manifest_state(root)
    if state is None:
        return verify(root, deep=True)
    recorded = state.get("files") or {}
    racy = int(state.get("written_ns", 0)) - _RACY_NS

    def changed(rel: str, digest: str) -> bool:
        size, mtime = (recorded.get(rel) or (None, None))[:2]
        st = os.stat(root / rel)
        if size is not None and st.st_size != size:
            return True
        if st.st_mtime_ns == mtime and mtime < racy:
            return False  # as staged
        return sha256_file(root / rel) != digest

    return _check(root, changed)


def verify(root: str | os.PathLike, deep: bool = True) -> int:
    """Check ``root`` against its manifest; return the number of files.

    Refuses missing, extra, and (with ``deep``) corrupted files, naming the first few,
    and a manifest that is not the one recorded at staging.
    """
    root = Path(root)
    if not root.is_dir():
        raise DatasetError(f"{root}: dataset directory does not exist")
    _manifest_state(root)
    if not deep:
        return _check(root, None)
    return _check(root, lambda rel, digest: sha256_file(root / rel) != digest)


def _check(root: Path, changed) -> int:
    """Missing and extra files, and those ``changed(rel, digest)`` says differ."""
    expected = read_manifest(root)
    present = set(_data_files(root))
    missing = sorted(set(expected) - present)
    extra = sorted(present - set(expected))
    problems = []
    if missing:
        problems.append(f"{len(missing)} missing (e.g. {', '.join(missing[:3])})")
    if extra:
        problems.append(f"{len(extra)} not in manifest (e.g. {', '.join(extra[:3])})")
    if changed is not None:
        bad = [rel for rel in sorted(present & set(expected)) if changed(rel, expected[rel])]
        if bad:
            problems.append(f"{len(bad)} changed or corrupted, checksum mismatch "
                            f"(e.g. {', '.join(bad[:3])})")
    if problems:
        raise DatasetError(f"{root}: dataset does not match {MANIFEST}: " + "; ".join(problems)
                           + f"; {restage_hint(root)}")
    return len(expected)


def stage_copy(src: str | os.PathLike, dest: str | os.PathLike) -> Path:
    """Copy a verified dataset to ``dest`` (e.g. node-local NVMe) and verify the copy.

    The copy goes to a temporary sibling and is renamed into place only once verified,
    so a failed copy never leaves a dataset that looks complete.
    """
    src, dest = Path(src), Path(dest)
    check_staged(src)
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
