import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO
from scalesweep.dataset import DatasetError, stage_copy, verify
from scalesweep.metrics import MetricsError, read_metrics, write_metrics

STAGE = [sys.executable, str(REPO / "scripts" / "stage_dataset.py")]
FASHION = "/usr/share/datasets/fashion-mnist"  # Debian's dataset-fashion-mnist


@pytest.fixture(scope="module")
def synthetic_ds(tmp_path_factory):
    out = tmp_path_factory.mktemp("ds") / "syn"
    subprocess.run([*STAGE, "stage", "--source", "synthetic", "--classes", "a", "b",
                    "--images-per-class", "8", "--image-size", "64", "--out", str(out)], check=True)
    return out


def test_staged_dataset_has_manifest_and_verifies(synthetic_ds):
    assert (synthetic_ds / "MANIFEST.sha256").is_file()
    assert verify(synthetic_ds) == 16
    info = json.loads((synthetic_ds / "dataset.json").read_text())
    assert info["synthetic"] is True and info["images"] == 16


def test_corrupted_file_is_refused_by_name(tmp_path, synthetic_ds):
    copy = stage_copy(synthetic_ds, tmp_path / "copy")
    victim = sorted((copy / "a").iterdir())[0]
    victim.write_bytes(victim.read_bytes()[:-10] + b"0123456789")
    with pytest.raises(DatasetError, match=f"corrupted.*a/{victim.name}"):
        verify(copy)
    proc = subprocess.run([*STAGE, "verify", str(copy)], capture_output=True, text=True)
    assert proc.returncode == 1 and "checksum mismatch" in proc.stderr


def test_missing_and_extra_files_are_refused(tmp_path, synthetic_ds):
    copy = stage_copy(synthetic_ds, tmp_path / "copy")
    sorted((copy / "b").iterdir())[0].unlink()
    (copy / "a" / "stray.png").write_bytes(b"x")
    with pytest.raises(DatasetError, match="1 missing.*1 not in manifest"):
        verify(copy)


def test_node_local_copy_is_verified_and_reused(tmp_path, synthetic_ds):
    dest = stage_copy(synthetic_ds, tmp_path / "nvme" / "syn")
    assert verify(dest) == 16
    mtime = (dest / "MANIFEST.sha256").stat().st_mtime_ns
    assert stage_copy(synthetic_ds, dest) == dest
    assert (dest / "MANIFEST.sha256").stat().st_mtime_ns == mtime


def test_a_changed_dataset_is_refused_by_the_check_of_every_run_naming_the_file(
        tmp_path, synthetic_ds):
    """Issue #26 case 3: the harness runs check_staged before every point (the staged copy,
    also where points read a node-local copy): sizes and the manifest's own digest always,
    a digest of each file whose size or time changed. Another valid image in a staged
    image's place is refused by name, with how to restage it (not by deleting it)."""
    from scalesweep.dataset import MANIFEST, check_staged, write_manifest

    copy = stage_copy(synthetic_ds, tmp_path / "tiny")
    hour_ago = time.time_ns() - 3600 * 10**9
    for f in copy.rglob("*.png"):  # staged an hour ago: the times tell (not racily new)
        os.utime(f, ns=(hour_ago, hour_ago))
    write_manifest(copy)
    assert check_staged(copy) == 16
    victim, other = sorted((copy / "a").iterdir())[:2]
    # cheap: a file of its staged size and time is not read (verify reads every file)
    data = victim.read_bytes()
    victim.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    os.utime(victim, ns=(hour_ago, hour_ago))
    assert check_staged(copy) == 16
    with pytest.raises(DatasetError, match=f"a/{victim.name}"):
        verify(copy)
    victim.write_bytes(other.read_bytes())  # a valid PNG, the wrong one: its time changed
    with pytest.raises(DatasetError) as err:
        check_staged(copy)
    assert f"a/{victim.name}" in str(err.value)
    assert "--forcerun resources/datasets/tiny" in str(err.value)
    with pytest.raises(DatasetError, match=f"a/{victim.name}"):  # node-local: from this copy
        stage_copy(copy, tmp_path / "nvme" / "tiny")
    assert not (tmp_path / "nvme" / "tiny").exists()
    # a manifest rewritten to match the change is not the one staged
    manifest = copy / MANIFEST
    lines = [(f"{'0' * 64}  a/{victim.name}" if line.endswith(f"a/{victim.name}") else line)
             for line in manifest.read_text().splitlines()]
    manifest.write_text("\n".join(lines) + "\n")
    with pytest.raises(DatasetError, match=f"{MANIFEST} changed since the dataset was staged"):
        check_staged(copy)


@pytest.mark.skipif(not Path(FASHION).is_dir(), reason="dataset-fashion-mnist not installed")
@pytest.mark.parametrize("damage", ["truncated", "flipped"])
def test_a_damaged_source_archive_is_refused_naming_it(tmp_path, damage):
    """Issue #26 case 3: a corrupt fashion-mnist .gz is refused naming it, no traceback."""
    src = tmp_path / "fashion"
    src.mkdir()
    for name in ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"):
        (src / name).symlink_to(Path(FASHION) / name)
    # the labels (29 kB): read after the images, so the whole reading path runs
    victim = src / "train-labels-idx1-ubyte.gz"
    data = bytearray(victim.read_bytes())
    victim.unlink()
    if damage == "truncated":
        data = data[:len(data) // 2]
    else:
        data[len(data) // 2] ^= 0xFF
    victim.write_bytes(bytes(data))
    out = tmp_path / "out"
    proc = subprocess.run([*STAGE, "stage", "--source", "fashion-mnist", "--path", str(src),
                           "--classes", "sandal", "sneaker", "--images-per-class", "2",
                           "--out", str(out)], capture_output=True, text=True)
    assert proc.returncode == 1
    assert f"{victim}: not a readable gzip file" in proc.stderr
    assert "dataset-fashion-mnist" in proc.stderr and "Traceback" not in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fashion"]  # nothing staged


def test_an_unreadable_source_image_is_refused_at_staging_naming_it(tmp_path, synthetic_ds):
    src = tmp_path / "src"
    shutil.copytree(synthetic_ds, src)
    victim = sorted((src / "b").iterdir())[1]
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF
    victim.write_bytes(bytes(data))
    proc = subprocess.run([*STAGE, "stage", "--source", "image-folder", "--path", str(src),
                           "--out", str(tmp_path / "out")], capture_output=True, text=True)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert f"{victim}: not a readable image" in proc.stderr
    assert not (tmp_path / "out").exists()


def test_image_folder_source_with_missing_class_names_it(tmp_path):
    (tmp_path / "src" / "cats").mkdir(parents=True)
    proc = subprocess.run([*STAGE, "stage", "--source", "image-folder", "--path", str(tmp_path / "src"),
                           "--classes", "cats", "dogs", "--out", str(tmp_path / "out")],
                          capture_output=True, text=True)
    assert proc.returncode == 1
    assert "class folder 'dogs' not found" in proc.stderr
    assert not (tmp_path / "out").exists()


def test_metrics_round_trip_and_atomic_write(tmp_path):
    path = write_metrics(tmp_path / "m.json", {"train_s": 1.5})
    assert read_metrics(path)["train_s"] == 1.5
    assert [p.name for p in tmp_path.iterdir()] == ["m.json"]  # no temporary left behind


def test_foreign_or_truncated_metrics_are_refused(tmp_path):
    (tmp_path / "a.json").write_text('{"train_s": 1}')
    with pytest.raises(MetricsError, match="not a scalesweep metrics file"):
        read_metrics(tmp_path / "a.json")
    (tmp_path / "b.json").write_text('{"schema": "scalesweep.metr')
    with pytest.raises(MetricsError, match="not valid JSON"):
        read_metrics(tmp_path / "b.json")
