"""A real RGB dataset from a local archive (datasets.<name>.source: image-archive): staged at
native resolution (files byte for byte), its sha256 checked and recorded, extracted
safely. The archives are built here; the workflow run that stages one, copies it
node-local and trains on it is tests/integration/test_workflow.py's node-local test."""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from conftest import REPO

SCRIPT = REPO / "scripts" / "stage_dataset.py"


def make_tree(root: Path, size=(96, 80), per_class=3) -> Path:
    """root/photos/<class>/*.jpg: RGB JPEGs of one native size."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    for c in ("horse", "zebra"):
        d = root / "photos" / c
        d.mkdir(parents=True)
        for i in range(per_class):
            Image.fromarray(rng.integers(0, 255, (size[1], size[0], 3), dtype=np.uint8)).save(
                d / f"{c}{i}.jpg", quality=90)
    return root / "photos"


def make_archive(tree: Path, path: Path) -> Path:
    if path.suffix == ".zip":
        with zipfile.ZipFile(path, "w") as zf:
            for f in sorted(tree.rglob("*")):
                zf.write(f, f.relative_to(tree.parent))
    else:
        with tarfile.open(path, "w:gz") as tf:
            tf.add(tree, arcname=tree.name)
    return path


def stage(archive: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), "stage", "--source", "image-archive",
                           "--path", str(archive), "--images-per-class", "0", "--image-size", "96",
                           "--out", str(out), *extra], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("name", ["photos.tar.gz", "photos.zip"])
def test_archive_is_staged_byte_for_byte_with_its_checksum(tmp_path, name):
    tree = make_tree(tmp_path / "src")
    archive = make_archive(tree, tmp_path / name)
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    out = tmp_path / "staged"
    proc = stage(archive, out, "--sha256", digest)
    assert proc.returncode == 0, proc.stderr
    info = json.loads((out / "dataset.json").read_text())
    assert info["archive_sha256"] == digest and info["native_sizes"] == ["96x80"]
    assert info["classes"] == ["horse", "zebra"] and info["images"] == 6
    for f in tree.rglob("*.jpg"):  # never re-encoded
        assert (out / f.parent.name / f.name).read_bytes() == f.read_bytes()
    assert (out / "MANIFEST.sha256").is_file()
    assert not list(tmp_path.glob("*.unpacked"))  # the extraction is gone
    verify = subprocess.run([sys.executable, str(SCRIPT), "verify", str(out)],
                            capture_output=True, text=True, timeout=60)
    assert verify.returncode == 0, verify.stderr


def test_another_archive_than_the_configured_one_is_refused(tmp_path):
    archive = make_archive(make_tree(tmp_path / "src"), tmp_path / "photos.tar.gz")
    proc = stage(archive, tmp_path / "staged", "--sha256", "0" * 64)
    assert proc.returncode != 0 and "0" * 64 in proc.stderr and "is not the configured" in proc.stderr
    assert not (tmp_path / "staged").exists()


@pytest.mark.parametrize("member", ["../evil/x.jpg", "/abs/x.jpg"])
def test_unsafe_members_are_refused(tmp_path, member):
    archive = tmp_path / "bad.tar"
    with tarfile.open(archive, "w") as tf:
        data = b"not an image"
        info = tarfile.TarInfo(member)
        info.size = len(data)
        tf.addfile(info, io.BytesIO(data))
    proc = stage(archive, tmp_path / "staged")
    assert proc.returncode != 0 and "unsafe member" in proc.stderr
    assert not (tmp_path / "evil").exists()


def test_a_link_in_the_archive_is_refused(tmp_path):
    archive = tmp_path / "link.tar"
    with tarfile.open(archive, "w") as tf:
        info = tarfile.TarInfo("photos/horse/x.jpg")
        info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tf.addfile(info)
    proc = stage(archive, tmp_path / "staged")
    assert proc.returncode != 0 and "not a file or directory" in proc.stderr


def test_the_config_takes_an_archive_and_refuses_a_bad_checksum_value(tmp_path):
    from conftest import tiny_config
    from scalesweep.plan.config import ConfigError, check_config

    config = tiny_config()
    archive = tmp_path / "photos.tar.gz"  # staged on this host (site local): it must exist
    archive.write_bytes(b"")
    config["datasets"]["tiny"] = {"source": "image-archive", "path": str(archive),
                                  "sha256": "ab" * 32, "image_size": 256}
    check_config(config)
    config["datasets"]["tiny"]["sha256"] = "not-a-digest"
    with pytest.raises(ConfigError, match="sha256"):
        check_config(config)
