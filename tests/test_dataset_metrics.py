import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO
from scalesweep.dataset import DatasetError, stage_copy, verify
from scalesweep.metrics import MetricsError, read_metrics, write_metrics

STAGE = [sys.executable, str(REPO / "scripts" / "stage_dataset.py")]


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
