#!/usr/bin/env python3
"""Stage a two-class image dataset as an image folder with a checksum manifest.

Sources:
  fashion-mnist  Debian's dataset-fashion-mnist (idx files), two chosen classes,
                 upscaled to SIZE x SIZE RGB PNGs: real photos of objects, offline.
  image-folder   an existing root/<class>/*.jpg|png tree (what real sites have),
                 copied and optionally resized.
  image-archive  a local .tar, .tar.gz/.tgz or .zip of such a tree (a real RGB dataset
                 as it is distributed, e.g. the CycleGAN photos the OLCF study used),
                 its sha256 checked against the config's (and recorded), extracted
                 safely (no absolute paths, no .., no links or devices) and staged at its
                 native resolution: the files are copied byte for byte, never re-encoded.
  synthetic      a trivially separable generator, for unit tests only.

The dataset is written to a temporary sibling directory and renamed into place only after
its manifest is written and verified, so an interrupted staging leaves nothing that looks
complete. `verify` re-checks a staged dataset against its manifest, every file's digest
(the workflow's verify rule), and records what a run's cheap check needs
(MANIFEST.state.json) where an older staging left none.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import struct
import sys
import time
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "workflow"))

from scalesweep.record.dataset import (  # noqa: E402
    IMAGE_ERRORS, INFO, STATE, DatasetError, sha256_file, stage_copy, verify, write_manifest)
from scalesweep.record.metrics import write_json_atomic  # noqa: E402

FASHION_CLASSES = [
    "tshirt", "trouser", "pullover", "dress", "coat",
    "sandal", "shirt", "sneaker", "bag", "ankle_boot",
]


def read_idx(path: Path):
    import numpy as np

    damaged = ("; the archive is damaged: reinstall Debian's dataset-fashion-mnist "
               "(apt-get install --reinstall dataset-fashion-mnist), or name an intact copy "
               "in datasets.<name>.path")
    try:
        with gzip.open(path, "rb") as fh:
            data = fh.read()
    except (OSError, EOFError, zlib.error) as exc:  # gzip.BadGzipFile is an OSError
        raise DatasetError(f"{path}: not a readable gzip file ({exc}){damaged}") from None
    try:
        zero, dtype, ndim = struct.unpack(">HBB", data[:4])
        if zero != 0 or dtype != 0x08:
            raise ValueError("no unsigned-byte idx header")
        dims = struct.unpack(f">{ndim}I", data[4:4 + 4 * ndim])
        return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)
    except (struct.error, ValueError) as exc:
        raise DatasetError(f"{path}: not an unsigned-byte idx file ({exc}){damaged}") from None


def from_fashion_mnist(src: Path, out: Path, classes: list[str], per_class: int, size: int) -> None:
    from PIL import Image

    unknown = [c for c in classes if c not in FASHION_CLASSES]
    if unknown:
        raise DatasetError(f"unknown fashion-mnist class {unknown[0]!r}; known: {', '.join(FASHION_CLASSES)}")
    images_path = src / "train-images-idx3-ubyte.gz"
    labels_path = src / "train-labels-idx1-ubyte.gz"
    for p in (images_path, labels_path):
        if not p.is_file():
            raise DatasetError(f"{p} not found: install Debian's dataset-fashion-mnist (apt-get install dataset-fashion-mnist)")
    images, labels = read_idx(images_path), read_idx(labels_path)
    for cls in classes:
        idx = (labels == FASHION_CLASSES.index(cls)).nonzero()[0][:per_class]
        if len(idx) < per_class:
            raise DatasetError(f"fashion-mnist has only {len(idx)} images of {cls!r}, asked for {per_class}")
        (out / cls).mkdir(parents=True)
        for i in idx:
            im = Image.fromarray(images[i], mode="L").resize((size, size), Image.BILINEAR).convert("RGB")
            im.save(out / cls / f"{int(i):05d}.png", optimize=False)


def from_image_folder(src: Path, out: Path, classes: list[str], per_class: int, size: int) -> None:
    from PIL import Image

    if not src.is_dir():
        raise DatasetError(f"image folder {src} does not exist")
    found = sorted(d.name for d in src.iterdir() if d.is_dir())
    wanted = classes or found
    missing = [c for c in wanted if c not in found]
    if missing:
        raise DatasetError(f"{src}: class folder {missing[0]!r} not found; present: {', '.join(found) or 'none'}")
    for cls in wanted:
        files = sorted(f for f in (src / cls).iterdir() if f.suffix.lower() in {".jpg", ".jpeg", ".png"})
        if per_class:
            files = files[:per_class]
        if not files:
            raise DatasetError(f"{src / cls}: no .jpg/.png images")
        (out / cls).mkdir(parents=True)
        for f in files:
            if size:
                try:
                    with Image.open(f) as im:
                        im = im.convert("RGB").resize((size, size), Image.BILINEAR)
                except IMAGE_ERRORS as exc:
                    raise DatasetError(f"{f}: not a readable image ({exc}); replace or remove "
                                       "it in the source (datasets.<name>.path)") from None
                im.save(out / cls / f"{f.stem}.png")
            else:
                shutil.copy2(f, out / cls / f.name)


def _safe_member(name: str) -> bool:
    parts = Path(name).parts
    return bool(parts) and not Path(name).is_absolute() and ".." not in parts


def extract_archive(archive: Path, dest: Path) -> None:
    """Extract ``archive`` into ``dest``, refusing any member that would land outside it
    or is not a plain file or directory."""
    import tarfile
    import zipfile

    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as zf:
            for info in zf.infolist():
                if not _safe_member(info.filename):
                    raise DatasetError(f"{archive}: unsafe member {info.filename!r}")
                if (info.external_attr >> 16) & 0o170000 == 0o120000:
                    raise DatasetError(f"{archive}: member {info.filename!r} is a link")
            zf.extractall(dest)
        return
    try:
        tf = tarfile.open(archive)
    except tarfile.TarError as exc:
        raise DatasetError(f"{archive}: not a tar or zip archive ({exc})") from None
    with tf:
        for m in tf.getmembers():
            if not _safe_member(m.name):
                raise DatasetError(f"{archive}: unsafe member {m.name!r}")
            if not (m.isfile() or m.isdir()):
                raise DatasetError(f"{archive}: member {m.name!r} is not a file or directory")
        tf.extractall(dest, filter="data")


def class_root(tree: Path) -> Path:
    """The directory whose subdirectories are the classes: ``tree`` itself, or its one
    top-level directory (archives usually wrap the tree in one)."""
    entries = [e for e in tree.iterdir() if not e.name.startswith(".")]
    if len(entries) == 1 and entries[0].is_dir():
        inner = [e for e in entries[0].iterdir() if e.is_dir() and not e.name.startswith(".")]
        if len(inner) >= 2:
            return entries[0]
    return tree


def from_archive(archive: Path, out: Path, classes: list[str], per_class: int,
                 expect_sha256: str = "") -> dict:
    """Stage a dataset from a local archive of root/<class>/*.jpg at its native resolution
    (copied byte for byte). Returns what the staging records: the archive's sha256 and
    the image sizes found."""
    import tarfile
    import zipfile

    from PIL import Image

    if not archive.is_file():
        raise DatasetError(f"dataset archive {archive} does not exist (datasets.<name>.path)")
    digest = sha256_file(archive)
    if expect_sha256 and digest != expect_sha256.lower():
        raise DatasetError(f"{archive}: sha256 {digest} is not the configured "
                           f"{expect_sha256} (datasets.<name>.sha256)")
    unpacked = out.with_name(out.name + ".unpacked")
    shutil.rmtree(unpacked, ignore_errors=True)
    unpacked.mkdir()
    try:
        try:
            extract_archive(archive, unpacked)
        except (OSError, EOFError, zlib.error, tarfile.TarError, zipfile.BadZipFile) as exc:
            raise DatasetError(f"{archive}: cannot be unpacked ({exc}): the archive is damaged "
                               "or truncated; fetch it again (datasets.<name>.path)") from None
        from_image_folder(class_root(unpacked), out, classes, per_class, 0)
    finally:
        shutil.rmtree(unpacked, ignore_errors=True)
    sizes = set()
    for f in sorted(out.rglob("*")):
        if f.is_file():
            try:  # decoded whole once: a damaged image is refused here, not by a run
                with Image.open(f) as im:
                    im.load()
                    sizes.add(im.size)
            except IMAGE_ERRORS as exc:
                raise DatasetError(f"{archive}: {f.relative_to(out)} is not a readable image "
                                   f"({exc}); fix the archive (datasets.<name>.path)") from None
    return {"archive_sha256": digest,
            "native_sizes": sorted(f"{w}x{h}" for w, h in sizes)}


def synthetic(out: Path, classes: list[str], per_class: int, size: int, seed: int) -> None:
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    for label, cls in enumerate(classes or ["a", "b"]):
        (out / cls).mkdir(parents=True)
        for i in range(per_class):
            arr = rng.integers(0, 96, (size, size, 3), dtype=np.uint8)
            arr[..., label % 3] += 128  # class = dominant colour channel
            Image.fromarray(arr).save(out / cls / f"{i:05d}.png")


def stage(args: argparse.Namespace) -> int:
    """``stage``: the dataset written beside ``--out`` and renamed into place once its
    manifest is written and verified (an existing one is verified, not staged again)."""
    out = Path(args.out)
    if out.exists():
        verify(out)
        print(f"{out}: already staged and verified")
        return 0
    tmp = out.with_name(f".{out.name}.staging-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    t0 = time.time()
    try:
        extra = stage_source(args, tmp)
        write_manifest(tmp)
        n = verify(tmp)
        info = dataset_info(args, tmp, n, time.time() - t0, extra)
        write_json_atomic(tmp / INFO, info)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    print(json.dumps(info))
    return 0


def stage_source(args: argparse.Namespace, tmp: Path) -> dict:
    """The images of ``--source`` written to ``tmp``; what the source adds to the dataset's
    info (an archive: its digest and members)."""
    if args.source == "image-archive":
        return from_archive(Path(args.path), tmp, args.classes, args.images_per_class, args.sha256)
    if args.source == "fashion-mnist":
        from_fashion_mnist(Path(args.path), tmp, args.classes, args.images_per_class, args.image_size)
    elif args.source == "image-folder":
        from_image_folder(Path(args.path), tmp, args.classes, args.images_per_class, args.image_size)
    else:
        synthetic(tmp, args.classes, args.images_per_class, args.image_size, args.seed)
    return {}


def dataset_info(args: argparse.Namespace, tmp: Path, n: int, seconds: float, extra: dict) -> dict:
    """The dataset's info file (``INFO``): what it holds and what it was staged from."""
    return {
        "source": args.source,
        "path": args.path,
        "classes": sorted(d.name for d in tmp.iterdir() if d.is_dir()),
        "images": n,
        "image_size": args.image_size,
        "staged_s": round(seconds, 3),
        "synthetic": args.source == "synthetic",
        # the config's datasets.<name> as staged (record.dataset.SOURCE_KEYS): a config
        # naming another source is refused before any job (scalesweep.plan.config)
        "staged_from": {"source": args.source, "path": args.path, "sha256": args.sha256,
                        "classes": list(args.classes),
                        "images_per_class": args.images_per_class,
                        "image_size": args.image_size},
        **extra,
    }


def copy(args: argparse.Namespace) -> int:
    """``copy``: a staged dataset copied (node-local storage) and the copy checked."""
    t0 = time.time()
    stage_copy(args.src, args.dest)
    print(f"{args.dest}: copied and checked in {time.time() - t0:.2f} s")
    return 0


def verify_command(args: argparse.Namespace) -> int:
    """``verify``: every file against the manifest; the state a run's cheap check needs
    recorded where an older staging left none."""
    t0 = time.time()
    state = Path(args.root) / STATE
    had_state = state.is_file()
    n = verify(args.root, record=True)
    record = {"dataset": args.root, "files": n, "verified_s": round(time.time() - t0, 3)}
    if args.report:
        write_json_atomic(args.report, record)
    print(f"{args.root}: {n} files match the manifest")
    if not had_state:
        print(f"{state}: recorded (staged by an older version): each run's check of the "
              "dataset is cheap from now on")
    return 0


COMMANDS = {"stage": stage, "copy": copy, "verify": verify_command}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return COMMANDS[args.cmd](args)
    except DatasetError as exc:
        message = str(exc)
        if args.cmd == "stage":  # the workflow stages dataset <name> to resources/datasets/<name>
            message = message.replace("datasets.<name>.", f"datasets.{Path(args.out).name}.")
        print(f"stage_dataset: error: {message}", file=sys.stderr)
        return 1


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("stage", help="produce a dataset with a manifest")
    s.add_argument("--source", choices=["fashion-mnist", "image-folder", "image-archive", "synthetic"],
                   required=True)
    s.add_argument("--path", default="",
                   help="source directory (fashion-mnist idx files or image folder) or archive file")
    s.add_argument("--sha256", default="", help="image-archive: the archive's expected sha256")
    s.add_argument("--classes", nargs="*", default=[])
    s.add_argument("--images-per-class", type=int, default=0, help="0 = all (image-folder)")
    s.add_argument("--image-size", type=int, default=64)
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--out", required=True)
    v = sub.add_parser("verify", help="check a staged dataset against its manifest (every "
                       f"file's digest), and record {STATE} where it has none")
    v.add_argument("root")
    v.add_argument("--report", help="write a JSON verification record here")
    c = sub.add_parser("copy", help="copy a staged dataset (e.g. to node-local NVMe) and check "
                       "the copy by sizes and times")
    c.add_argument("src")
    c.add_argument("dest")
    return p


if __name__ == "__main__":
    sys.exit(main())
