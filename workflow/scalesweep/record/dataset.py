"""Dataset manifests: what was staged, and a check that it is still all there.

Standard library only (used on compute nodes and inside containers). A manifest is
``MANIFEST.sha256`` in ``sha256sum`` format at the dataset root, so a site can also check
it with coreutils: ``cd DATASET && sha256sum -c MANIFEST.sha256``.

Beside it, ``MANIFEST.state.json`` records what the staging left: the manifest's own
sha256, and each file's size and modification time. Every run checks its dataset against
both (``check_staged``): cheap (one stat per file and the manifest's digest), hashing only
the files whose size or time changed since staging (and those written too close to the
staging for their time to tell, as git does with its index). A dataset staged before
these records were kept gets its record from the verify rule (``verify(record=True)``:
``scripts/stage_dataset.py verify``), after a full check; until then every run hashes it.
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
# a file modified this close before the state's time (written_ns: taken before its stats)
# may keep its recorded time (coarse file system clocks: FAT 2 s): it is hashed at every check
_RACY_NS = 2_000_000_000


# the keys of a dataset's config entry (datasets.<name>) that decide what is staged: the
# staging records them (dataset.json: staged_from), and a config that names another value
# for a staged dataset is refused before any job (scalesweep.plan.config)
SOURCE_KEYS = ("source", "path", "sha256", "classes", "images_per_class", "image_size")


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
    since = time.time_ns()
    stats = {rel: os.stat(root / rel) for rel in files}
    _write_state(root, sha256_file(root / MANIFEST), stats, since)
    return root / MANIFEST


def _write_state(root: Path, manifest_sha256: str, stats: dict[str, os.stat_result],
                 since_ns: int) -> None:
    """``STATE``: the manifest's digest and each file's size and time (``stats``, all
    taken after ``since_ns``: a file whose time is not well before it is hashed by every
    check, as its time may not tell a later change)."""
    state = {"manifest_sha256": manifest_sha256, "written_ns": since_ns,
             "files": {rel: [st.st_size, st.st_mtime_ns] for rel, st in stats.items()}}
    _write_atomic(root / STATE, json.dumps(state, sort_keys=True))


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def read_manifest(root: Path, restage: Path | None = None) -> dict[str, str]:
    """``root``'s manifest: file -> sha256 (``restage``: the dataset a message says to
    restage, ``root`` itself unless it is a copy)."""
    path = root / MANIFEST
    if not path.is_file():
        raise DatasetError(f"{root}: no {MANIFEST}; stage the dataset first")
    try:
        text = path.read_text()
    except (OSError, ValueError) as exc:  # EACCES, EIO; not UTF-8 (UnicodeDecodeError)
        raise _unreadable(path, exc, restage or root) from None
    entries: dict[str, str] = {}
    for n, line in enumerate(text.splitlines(), 1):
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


def _unreadable(path: Path, exc: Exception, restage: Path) -> DatasetError:
    """A dataset's file that cannot be read (permissions, an I/O error, gone), named."""
    why = getattr(exc, "strerror", None) or exc
    return DatasetError(f"{path}: cannot be read ({why}); {restage_hint(restage)}")


def _state_problem(state) -> str | None:
    """What makes a parsed ``STATE`` unusable (None: nothing): a mapping with the
    manifest's sha256, an integer time, and [size, mtime_ns] integers per file."""
    def integer(x) -> bool:
        return isinstance(x, int) and not isinstance(x, bool)

    if not isinstance(state, dict):
        return f"is {state!r:.80}, expected a mapping"
    digest = state.get("manifest_sha256")
    if not isinstance(digest, str):
        return f"manifest_sha256 is {digest!r:.80}, expected a sha256 string"
    if not integer(state.get("written_ns", 0)):
        return f"written_ns is {state['written_ns']!r:.80}, expected an integer (nanoseconds)"
    files = state.get("files", {})
    if not isinstance(files, dict):
        return f"files is {files!r:.80}, expected a mapping of file to [size, mtime_ns]"
    for rel, entry in files.items():
        if not (isinstance(entry, list) and len(entry) == 2 and all(map(integer, entry))):
            return f"files[{rel!r}] is {entry!r:.80}, expected [size, mtime_ns] (two integers)"
    return None


def _manifest_state(root: Path, where: str, restage: Path) -> dict | None:
    """The staging's record (``STATE``) if there is one, after checking that the manifest
    is still the one it recorded. ``where``: what messages call the dataset; ``restage``:
    the dataset they say to restage."""
    path = root / STATE
    if not path.is_file():
        return None  # staged before states were recorded
    try:
        state = json.loads(path.read_text())
    except OSError as exc:
        raise _unreadable(path, exc, restage) from None
    except ValueError as exc:  # not JSON (or not UTF-8)
        raise DatasetError(f"{path}: unreadable ({exc}); {restage_hint(restage)}") from None
    problem = _state_problem(state)
    if problem:
        raise DatasetError(f"{path}: {problem}; {restage_hint(restage)}")
    manifest = root / MANIFEST
    if manifest.is_file():
        try:
            digest = sha256_file(manifest)
        except OSError as exc:
            raise _unreadable(manifest, exc, restage) from None
        if digest != state["manifest_sha256"]:
            raise DatasetError(f"{where}: {MANIFEST} changed since the dataset was staged (its "
                               f"sha256 is not the one {STATE} recorded); {restage_hint(restage)}")
    return state


def check_staged(root: str | os.PathLike) -> int:
    """The check of every run: ``root`` against its manifest, cheaply. The manifest's
    digest must be the one recorded at staging, every file listed must be there with its
    recorded size, and no other; a file whose time changed since staging is hashed
    (``verify`` hashes every file). Returns the number of files. Without a recorded
    state (staged by an older version) every file is hashed. Reads only: whatever is
    wrong (a changed, unreadable or missing file, a malformed record) is a
    ``DatasetError`` naming the file, with how to restage the dataset."""
    root = Path(root)
    return _check_staged(root, str(root), root)


def _check_staged(root: Path, where: str, restage: Path) -> int:
    if not root.is_dir():
        raise DatasetError(f"{where}: dataset directory does not exist")
    state = _manifest_state(root, where, restage)
    if state is None:
        return _check(root, lambda rel, digest: sha256_file(root / rel) != digest, where,
                      restage)
    recorded = state.get("files", {})
    racy = state.get("written_ns", 0) - _RACY_NS

    def changed(rel: str, digest: str) -> bool:
        size, mtime = (recorded.get(rel) or (None, None))[:2]
        st = os.stat(root / rel)
        if size is not None and st.st_size != size:
            return True
        if st.st_mtime_ns == mtime and mtime < racy:
            return False  # as staged
        return sha256_file(root / rel) != digest

    return _check(root, changed, where, restage)


def verify(root: str | os.PathLike, deep: bool = True, record: bool = False) -> int:
    """Check ``root`` against its manifest; return the number of files.

    Refuses missing, extra, and (with ``deep``) corrupted files, naming the first few,
    and a manifest that is not the one recorded at staging.

    ``record`` (with ``deep``): a dataset without the staging's record (``STATE``: staged
    by an older version) gets it once it passes, so that the check of every run
    (``check_staged``) is cheap from then on: each file's size and time as they were just
    before it was hashed. A record that cannot be written is a ``DatasetError`` naming it.
    """
    root = Path(root)
    where = str(root)
    if not root.is_dir():
        raise DatasetError(f"{root}: dataset directory does not exist")
    record = _manifest_state(root, where, root) is None and deep and record
    if not deep:
        return _check(root, None, where, root)
    since, stats = time.time_ns(), {}
    manifest = root / MANIFEST
    try:  # before the check reads it (a manifest changed meanwhile fails the next check)
        digest = sha256_file(manifest) if record and manifest.is_file() else ""
    except OSError as exc:
        raise _unreadable(manifest, exc, root) from None

    def changed(rel: str, expected: str) -> bool:
        if record:
            stats[rel] = os.stat(root / rel)
        return sha256_file(root / rel) != expected

    n = _check(root, changed, where, root)
    if record:
        try:
            _write_state(root, digest, stats, since)
        except OSError as exc:
            raise DatasetError(
                f"{root / STATE}: cannot be written ({exc.strerror or exc}): {root} matches "
                f"its manifest, but without this record every run hashes every file of it; "
                f"make {root} writable and verify it again") from None
    return n


def _check(root: Path, changed, where: str, restage: Path) -> int:
    """Missing and extra files, and those ``changed(rel, digest)`` says differ (a file it
    cannot read is named)."""
    expected = read_manifest(root, restage)
    present = set(_data_files(root))
    missing = sorted(set(expected) - present)
    extra = sorted(present - set(expected))
    problems = []
    if missing:
        problems.append(f"{len(missing)} missing (e.g. {', '.join(missing[:3])})")
    if extra:
        problems.append(f"{len(extra)} not in manifest (e.g. {', '.join(extra[:3])})")
    if changed is not None:
        bad = []
        for rel in sorted(present & set(expected)):
            try:
                if changed(rel, expected[rel]):
                    bad.append(rel)
            except OSError as exc:  # EACCES, EIO, gone since the walk, a dangling link
                raise DatasetError(f"{where}: {rel} cannot be read ({exc.strerror or exc}); "
                                   f"{restage_hint(restage)}") from None
        if bad:
            problems.append(f"{len(bad)} changed or corrupted, checksum mismatch "
                            f"(e.g. {', '.join(bad[:3])})")
    if problems:
        raise DatasetError(f"{where}: dataset does not match {MANIFEST}: " + "; ".join(problems)
                           + f"; {restage_hint(restage)}")
    return len(expected)


def stage_copy(src: str | os.PathLike, dest: str | os.PathLike) -> Path:
    """Copy a staged dataset to ``dest`` (e.g. node-local NVMe) and check the copy.

    The source is not checked again here: the harness checks it (``check_staged``)
    just before, and this runs on every node of a point. The copy is checked as
    cheaply (``_check_copy``), which also finds a source file changed since its staging
    where its time tells. A copy already at ``dest`` is kept if its manifest is the
    source's and it passes the same check. The copy goes to a temporary sibling and is
    renamed into place only once checked, so a failed copy never leaves a dataset that
    looks complete.
    """
    src, dest = Path(src), Path(dest)
    if not src.is_dir():
        raise DatasetError(f"{src}: dataset directory does not exist")
    where = f"{src} (copied to {dest})"
    if dest.is_dir():
        try:
            if (dest / MANIFEST).read_bytes() == (src / MANIFEST).read_bytes():
                _check_copy(dest, src, where)
                return dest
        except (OSError, DatasetError):
            pass  # copied anew (and checked: a problem of the source is named then)
        shutil.rmtree(dest)
    tmp = dest.with_name(f".{dest.name}.staging-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        try:
            shutil.copytree(src, tmp)
        except OSError as exc:  # shutil.Error included: ENOSPC on the node, EIO
            raise DatasetError(f"cannot copy {src} to {dest}: {str(exc)[:500]} (is "
                               f"{dest.parent} full or read-only?)") from None
        _check_copy(tmp, src, where)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    os.replace(tmp, dest)
    return dest


def _check_copy(copy: Path, src: Path, where: str) -> int:
    """A copy of dataset ``src`` checked without reading its files: against the
    staging's record, which the copy carries (``check_staged``: sizes, and the times
    ``shutil.copytree`` keeps; a file whose time changed is hashed), or, where the
    source has none (staged by an older version), by each file's size against the
    source's."""
    if (copy / STATE).is_file():
        return _check_staged(copy, where, src)

    def resized(rel: str, _digest: str) -> bool:
        return os.stat(copy / rel).st_size != os.stat(src / rel).st_size

    return _check(copy, resized, where, src)


def staged_source(root: str | os.PathLike) -> dict | None:
    """What the staged dataset ``root`` was staged from, and a digest of what was staged:
    its dataset.json's ``staged_from`` (the config's ``SOURCE_KEYS`` at staging; for a
    dataset staged before they were recorded, its source and path alone) and
    ``manifest_sha256``, the sha256 of its MANIFEST.sha256 (which lists every staged
    file's sha256; None where it cannot be read). None where ``root`` has no readable
    dataset.json (not staged)."""
    root = Path(root)
    try:
        info = json.loads((root / INFO).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(info, dict):
        return None
    source = info.get("staged_from")
    if not isinstance(source, dict):
        source = {k: info[k] for k in ("source", "path") if k in info}
    try:
        digest = sha256_file(root / MANIFEST)
    except OSError:
        digest = None
    return {**source, "manifest_sha256": digest}
