import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO
from scalesweep.record.dataset import DatasetError, stage_copy, verify
from scalesweep.record.metrics import MetricsError, read_metrics, write_metrics

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
    from scalesweep.record.dataset import MANIFEST, check_staged, write_manifest

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


def staged_an_hour_ago(src: Path, dest: Path) -> Path:
    """A copy of dataset ``src`` whose images were written an hour ago (their times tell,
    not racily new), its manifest and state written now."""
    from scalesweep.record.dataset import write_manifest

    shutil.copytree(src, dest)
    hour_ago = time.time_ns() - 3600 * 10**9
    for f in dest.rglob("*.png"):
        os.utime(f, ns=(hour_ago, hour_ago))
    write_manifest(dest)
    return dest


def flip_keeping_size_and_time(victim: Path) -> None:
    """A byte of ``victim`` changed, its size and time as they were: only a digest sees it."""
    st = victim.stat()
    data = victim.read_bytes()
    victim.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    os.utime(victim, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_the_verify_rule_records_the_state_an_older_staging_left_out(tmp_path, synthetic_ds):
    """A dataset staged before MANIFEST.state.json was kept was hashed whole by the check
    of every run (on every node). The verify rule (stage_dataset.py verify) records the
    state after its full check, so that every later check is cheap; a failed check
    records nothing."""
    from scalesweep.record.dataset import STATE, check_staged

    ds = staged_an_hour_ago(synthetic_ds, tmp_path / "tiny")
    (ds / STATE).unlink()
    proc = subprocess.run([*STAGE, "verify", str(ds)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert f"{ds / STATE}: recorded" in proc.stdout
    state = json.loads((ds / STATE).read_text())
    assert sorted(state["files"]) == sorted(str(f.relative_to(ds)) for f in ds.rglob("*.png"))
    victim = sorted((ds / "a").iterdir())[0]
    flip_keeping_size_and_time(victim)
    assert check_staged(ds) == 16  # cheap now: a file of its staged size and time is not read
    (ds / STATE).unlink()
    proc = subprocess.run([*STAGE, "verify", str(ds)], capture_output=True, text=True)
    assert proc.returncode == 1 and f"a/{victim.name}" in proc.stderr, proc.stderr
    assert not (ds / STATE).exists()


def test_a_node_local_copy_is_checked_by_sizes_and_times_and_a_stale_one_replaced(
        tmp_path, synthetic_ds):
    """stage_copy (on every node of a point, just after the harness checked the source)
    reads no file to check its copy: the staging's record, which the copy carries, and
    the times the copy keeps. A copy already there is kept only if its manifest is the
    source's (a restaged source is copied anew) and its files' sizes are as staged."""
    from scalesweep.record.dataset import write_manifest

    src = staged_an_hour_ago(synthetic_ds, tmp_path / "tiny")
    victim = sorted((src / "a").iterdir())[0]
    flip_keeping_size_and_time(victim)  # only a digest would see it
    dest = stage_copy(src, tmp_path / "nvme" / "tiny")
    assert (dest / "a" / victim.name).read_bytes() == victim.read_bytes()  # not hashed
    assert sorted(p.name for p in dest.parent.iterdir()) == ["tiny"]  # no temporary left

    (dest / "b" / "00000.png").write_bytes(b"truncated")  # the copy damaged: copied anew
    assert stage_copy(src, dest) == dest
    assert (dest / "b" / "00000.png").read_bytes() == (src / "b" / "00000.png").read_bytes()

    (src / "b" / "extra.png").write_bytes((src / "b" / "00000.png").read_bytes())
    write_manifest(src)  # restaged: the copy's own manifest still matches the copy
    assert stage_copy(src, dest) == dest
    assert (dest / "b" / "extra.png").is_file() and verify(dest) == 17


DAMAGED_STATE = {  # MANIFEST.state.json made wrong, and what the message says of it
    "not a mapping": (lambda s: [1, 2], "is [1, 2], expected a mapping"),
    "files a list": (lambda s: {**s, "files": list(s["files"])},
                     "files is ['a/00000.png', "),
    "an entry a number": (lambda s: {**s, "files": {**s["files"], "a/00000.png": 5}},
                          "files['a/00000.png'] is 5, expected [size, mtime_ns] (two integers)"),
    "an entry short": (lambda s: {**s, "files": {**s["files"], "a/00000.png": [1]}},
                       "files['a/00000.png'] is [1], expected [size, mtime_ns]"),
    "written_ns text": (lambda s: {**s, "written_ns": "yesterday"},
                        "written_ns is 'yesterday', expected an integer (nanoseconds)"),
    "manifest_sha256 null": (lambda s: {**s, "manifest_sha256": None},
                             "manifest_sha256 is None, expected a sha256 string"),
}


@pytest.mark.parametrize("damage", sorted(DAMAGED_STATE))
def test_a_malformed_state_is_a_dataset_error_naming_it(tmp_path, synthetic_ds, damage):
    """Whatever shape MANIFEST.state.json has, the check of every run says what is wrong
    with it, naming the file and how to restage (never an AttributeError or TypeError:
    the harness would end with a traceback and no failure record)."""
    from scalesweep.record.dataset import STATE, check_staged

    ds = stage_copy(synthetic_ds, tmp_path / "tiny")
    make, expected = DAMAGED_STATE[damage]
    (ds / STATE).write_text(json.dumps(make(json.loads((ds / STATE).read_text()))))
    for check in (check_staged, verify):
        with pytest.raises(DatasetError) as err:
            check(ds)
        assert f"{ds / STATE}: {expected}" in str(err.value)
        assert "--forcerun resources/datasets/tiny" in str(err.value)


def test_a_file_that_cannot_be_read_is_a_dataset_error_naming_it(tmp_path, synthetic_ds):
    """An image replaced by a dangling link (stat and open fail: ENOENT), and, where
    permissions hold (not root), one that cannot be opened (EACCES): named, with how to
    restage, by the check of every run and by verify."""
    from scalesweep.record.dataset import check_staged

    ds = stage_copy(synthetic_ds, tmp_path / "tiny")
    victim = sorted((ds / "a").iterdir())[0]
    victim.unlink()
    victim.symlink_to(tmp_path / "gone.png")
    for check in (check_staged, verify):
        with pytest.raises(DatasetError) as err:
            check(ds)
        assert f"{ds}: a/{victim.name} cannot be read (No such file or directory)" in str(err.value)
        assert "--forcerun resources/datasets/tiny" in str(err.value)
    if os.geteuid() == 0:
        return  # root reads a file of mode 000
    victim.unlink()
    victim.write_bytes(b"x")
    victim.chmod(0)
    with pytest.raises(DatasetError) as err:
        verify(ds)
    assert f"a/{victim.name} cannot be read (Permission denied)" in str(err.value)


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
