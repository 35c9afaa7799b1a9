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


def test_archive_carries_ro_crate_metadata_that_merge_and_compare_read(tmp_path):
    """RO-Crate 1.1 at the archive's root: the descriptor, the root dataset and every part
    it names, the campaign as a CreateAction of the workflow at its commit, on its site,
    with its config and summary files (size, sha256); an unpacked archive's crate is what
    merge and compare say the runs come from."""
    import hashlib

    from scalesweep.campaign.crate import CRATE, RUN, SPEC, WORKFLOW

    a = tmp_path / "a"
    _point(a, 1, 1.0)
    (a / "config").mkdir()
    (a / "config" / "config.yaml").write_text("site: local\n")
    summary = a / "results" / "summary"
    summary.mkdir(parents=True)
    (summary / "runs.csv").write_text(
        "workload,git_commit,hosts,start,end\n"
        "cnn_ddp,abc123,vm;vm2,2026-11-29T01:00:00+0000,2026-11-29T01:00:10+0000\n"
        # another offset: it starts later (01:30 UTC), though its text sorts first
        "cnn_ddp,abc123,vm,2026-11-29T00:30:00-0100,2026-11-29T01:00:05+0000\n")
    (summary / "campaign.json").write_text(json.dumps({"config": {"site": "local"}}))
    out = subprocess.run([*CLI, "archive", str(a), str(tmp_path / "a.tar.gz")],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    with tarfile.open(tmp_path / "a.tar.gz") as tar:
        assert tar.getnames()[0] == CRATE
        tar.extractall(tmp_path / "unpacked", filter="data")
    unpacked = tmp_path / "unpacked"
    graph = json.loads((unpacked / CRATE).read_text())
    assert graph["@context"][0] == "https://w3id.org/ro/crate/1.1/context"
    entities = {e["@id"]: e for e in graph["@graph"]}
    assert entities[CRATE]["conformsTo"] == [{"@id": SPEC}]
    assert entities[CRATE]["about"] == {"@id": "./"}
    root = entities["./"]
    assert "Dataset" in root["@type"] and root["datePublished"]
    for part in root["hasPart"]:  # every part described, every file as archived
        entity = entities[part["@id"]]
        if entity["@type"] == "File":
            data = (unpacked / part["@id"]).read_bytes()
            assert entity["sha256"] == hashlib.sha256(data).hexdigest()
            assert entity["contentSize"] == str(len(data))
    run = entities[RUN]
    assert run["instrument"] == {"@id": WORKFLOW} and entities[WORKFLOW]["version"] == "abc123"
    assert run["runs"] == 1 and run["hosts"] == ["vm", "vm2"]
    assert entities[run["location"]["@id"]] == {"@id": "#site-local", "@type": "Place",
                                                "name": "local"}
    assert run["startTime"] == "2026-11-29T01:00:00Z" and run["endTime"] == "2026-11-29T01:00:10Z"
    # every term is RO-Crate 1.1's or defined in the crate's own context
    assert set(graph["@context"][1]) == {"sha256", "hosts", "runs"}
    merged = subprocess.run([*CLI, "merge", str(unpacked), "--into", str(tmp_path / "b")],
                            capture_output=True, text=True)
    assert merged.returncode == 0, merged.stderr
    assert f"{unpacked}: RO-Crate: scalesweep abc123, site local, 1 runs" in merged.stdout
