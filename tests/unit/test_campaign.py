"""Archive and merge campaigns: two partial sweeps become one, nothing is overwritten."""

import json
import subprocess
import sys
import tarfile

from scalesweep.plan.sweep import SweepPoint
from scalesweep.record.metrics import write_metrics

CLI = [sys.executable, "-m", "scalesweep"]


def _point(campaign, repeat, value, failed=False):
    p = SweepPoint("cnn_ddp", "native", 1, 0, 1, 1, repeat)
    d = campaign / "results" / "runs" / p.path
    d.mkdir(parents=True, exist_ok=True)
    if failed:
        (d / "failure.json").write_text(json.dumps({"state": "failed"}))
    else:
        write_metrics(d / "metrics.json", {"point": p.as_dict(), "train_s": value})
    return d


def test_merge_copies_missing_points_and_never_overwrites(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    _point(a, 1, 1.0)
    _point(a, 2, 2.0, failed=True)
    _point(b, 2, 2.5)
    _point(b, 1, 9.9)  # same point as a's rep1, different measurement
    before = (a / "results/runs/cnn_ddp/native/n1-g0-r1-t1/rep1/native/metrics.json").read_bytes()
    out = subprocess.run([*CLI, "merge", str(b), "--into", str(a)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "1 copied" in out.stdout and "1 conflicts" in out.stdout
    assert (a / "results/runs/cnn_ddp/native/n1-g0-r1-t1/rep1/native/metrics.json").read_bytes() == before
    rep2 = a / "results/runs/cnn_ddp/native/n1-g0-r1-t1/rep2/native"
    assert json.loads((rep2 / "metrics.json").read_text())["train_s"] == 2.5
    kept = list(rep2.parent.glob("native.replaced-*"))
    assert kept and (kept[0] / "failure.json").is_file(), "the failed attempt's record is kept"
    strict = subprocess.run([*CLI, "merge", str(b), "--into", str(a), "--strict"], capture_output=True, text=True)
    assert strict.returncode == 1


def test_archive_holds_measurements_and_config(tmp_path):
    a = tmp_path / "a"
    _point(a, 1, 1.0)
    (a / "config").mkdir()
    (a / "config" / "config.yaml").write_text("workloads: {}\n")
    # the summary's caches (this machine's file identities) stay out; its tables go in
    (a / "results" / "summary").mkdir(parents=True)
    for name in ("runs.csv", ".runs-cache.npz", ".verdicts-cache.npz", ".runs-cache.npz.x1.tmp"):
        (a / "results" / "summary" / name).write_text("x")
    out = subprocess.run([*CLI, "archive", str(a), str(tmp_path / "a.tar.gz")], capture_output=True, text=True)
    assert out.returncode == 0 and "1 finished points" in out.stdout
    names = tarfile.open(tmp_path / "a.tar.gz").getnames()
    assert "config/config.yaml" in names
    assert [n for n in names if n.startswith("results/summary/")] == ["results/summary/runs.csv"]
    assert "results/runs/cnn_ddp/native/n1-g0-r1-t1/rep1/native/metrics.json" in names


def test_merge_refuses_a_non_campaign(tmp_path):
    out = subprocess.run([*CLI, "merge", str(tmp_path / "nope"), "--into", str(tmp_path)],
                         capture_output=True, text=True)
    assert out.returncode == 2 and "is not a campaign directory" in out.stderr
