"""The real workflow on a tiny config: real staging, real DDP training, real aggregation."""

import json
import re
from pathlib import Path

import pandas as pd
import pytest

from conftest import REPO, have, run_snakemake, tiny_config, write_site
from scalesweep.record.metrics import read_metrics

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    if not have("mpirun"):
        pytest.skip("mpirun not installed (apt-get install openmpi-bin)")
    wd = tmp_path_factory.mktemp("campaign")
    (wd / "config").mkdir()
    import yaml
    (wd / "config" / "config.yaml").write_text(yaml.safe_dump(tiny_config()))
    run_snakemake(wd, "--profile", str(REPO / "profiles" / "local"))
    return wd


def test_dry_run_lists_every_point(campaign):
    wd = campaign(tiny_config())
    out = run_snakemake(wd, "-n", "--cores", "1").stdout
    assert out.count("rule run_point:") == 2
    assert "plot_fit" not in out  # 1 and 2 ranks: no law to fit, no fit figure listed
    for path in ("n1-g0-r1-t1/rep1", "n1-g0-r2-t1/rep1"):
        assert f"results/runs/cnn_ddp/native/{path}/native/metrics.json" in out


def _run_point_blocks(stdout: str) -> dict[str, str]:
    """output -> the dry run's block of each run_point job."""
    blocks = {}
    for block in stdout.split("rule run_point:")[1:]:
        blocks[re.search(r"^\s+output: (\S+)$", block, re.M)[1]] = block
    return blocks


def test_run_point_waits_for_the_same_input_set_as_ever(campaign):
    """With rerun-triggers [input], a different input set would re-run (and first delete)
    every finished point of a campaign made by an earlier version: the set is fixed."""
    config = tiny_config(models={"tiny_llm": {"source": "synthetic"}})
    config["sweep"]["runtimes"] = ["native", "charliecloud"]
    config["workloads"]["llm"] = {"payload": "llm", "model": "tiny_llm",
                                  "sweep": {"ranks_per_node": [1], "baseline": None}}
    wd = campaign(config)
    blocks = _run_point_blocks(run_snakemake(wd, "-n", "--cores", "1").stdout)
    # results/runs/<workload>/<arm>/<geometry>/rep<k>/<runtime>/metrics.json
    inputs = {(out.split("/")[2], out.split("/")[-2]): set(re.search(r"^\s+input: (.*)$", b, re.M)[1].split(", "))
              for out, b in blocks.items()}
    ds, verified = "resources/datasets/tiny", "resources/datasets/tiny.verified.json"
    model, manifest = "resources/models/tiny_llm", "resources/images/default.manifest.json"
    assert inputs == {
        ("cnn_ddp", "native"): {ds, verified},
        ("cnn_ddp", "charliecloud"): {ds, verified, manifest},
        ("llm", "native"): {model},
        ("llm", "charliecloud"): {model, manifest},
    }


def test_harness_gets_the_effective_config(campaign):
    """run_point's command line names a JSON file holding the config as the workflow
    sees it: config file, --config overrides, schema defaults, the code root."""
    wd = campaign(tiny_config())
    out = run_snakemake(wd, "-n", "-p", "--cores", "1", "--config", "sweep={repeats: 3}").stdout
    commands = re.findall(r"^Shell command: (python \S+run_point.py .*)$", out, re.M)
    assert len(commands) == 6, out[-3000:]
    files = {re.search(r"--config (\S+)", c)[1] for c in commands}
    assert len(files) == 1
    cfg = json.loads((wd / files.pop()).read_text())
    assert cfg["sweep"]["repeats"] == 3 and cfg["_code_root"] == str(REPO)
    assert cfg["containers"]["image"] == "default"  # a schema default
    assert set(cfg["workloads"]) == {"cnn_ddp"} and cfg["datasets"]["tiny"]["images_per_class"] == 8


def test_each_point_wrote_complete_metrics(finished):
    for ranks in (1, 2):
        m = read_metrics(finished / f"results/runs/cnn_ddp/native/n1-g0-r{ranks}-t1/rep1/native/metrics.json")
        assert m["ranks"] == ranks
        assert len(m["epoch_s"]) == 2 and all(t > 0 for t in m["epoch_s"])
        assert m["images_per_s"] > 0
        assert 0.0 <= m["final_accuracy"] <= 1.0
        assert m["peak_rss_mb"] > 50
        assert m["hosts"] and m["versions"]["torch"].startswith("2.13.0")
        assert m["launcher"] == ("local" if ranks == 1 else "mpirun")
        assert m["harness_wall_s"] >= m["payload_wall_s"] > 0
        assert m["dataset"]["images"] == 16
        assert m["start"] and m["end"] and m["command"]


def test_summary_tables(finished):
    runs = pd.read_csv(finished / "results/summary/runs.csv")
    assert len(runs) == 2 and set(runs["count"]) == {1, 2}
    scaling = pd.read_csv(finished / "results/summary/scaling.csv")
    base = scaling[scaling["count"] == 1].iloc[0]
    two = scaling[scaling["count"] == 2].iloc[0]
    assert base["efficiency_pct"] == pytest.approx(100.0)
    assert two["linear_time_s"] == pytest.approx(base["time_s"] / 2)
    assert two["efficiency_pct"] == pytest.approx(two["linear_time_s"] / two["time_s"] * 100, rel=1e-6)
    assert two["speedup"] == pytest.approx(base["time_s"] / two["time_s"])
    points = pd.read_csv(finished / "results/summary/points.csv")
    assert set(points["state"]) == {"done"}
    assert (finished / "results/plots/scaling.png").stat().st_size > 10_000


def test_second_run_has_nothing_to_do(finished):
    before = {p: p.read_bytes() for p in (finished / "results/runs").rglob("metrics.json")}
    out = run_snakemake(finished, "--profile", str(REPO / "profiles" / "local"))
    assert "Nothing to be done" in out.stdout + out.stderr
    assert {p: p.read_bytes() for p in before} == before


def test_report_renders(finished):
    run_snakemake(finished, "--profile", str(REPO / "profiles" / "local"), "--report", "report.html")
    html = (finished / "report.html").read_text(errors="replace")
    assert "scaling" in html.lower()


def test_node_local_staging_copies_and_verifies_before_training(campaign, tmp_path):
    """A real RGB dataset as sites get one: a local archive of JPEGs (built here) at its
    native resolution, checksummed, staged, copied node-local by the run and read from
    that copy batch by batch."""
    import hashlib

    from test_dataset_archive import make_archive, make_tree

    archive = make_archive(make_tree(tmp_path / "src", size=(72, 72), per_class=6),
                           tmp_path / "photos.tar.gz")
    cfg = tiny_config()
    cfg["sweep"].update(ranks_per_node=[2], repeats=1, baseline=None)
    nvme = tmp_path / "nvme-$USER"
    cfg["datasets"]["tiny"] = {
        "source": "image-archive", "path": str(archive), "classes": [], "images_per_class": 0,
        "image_size": 72, "sha256": hashlib.sha256(archive.read_bytes()).hexdigest(),
        "node_local": True}
    # the node-local path is the site's (storage.node_local_path), not the dataset's
    cfg["site"] = write_site(tmp_path, "nvme", storage={"node_local_path": str(nvme)})
    cfg["workloads"]["cnn_ddp"]["data_path"] = "files"  # each batch read from the copy
    wd = campaign(cfg)
    point = "results/runs/cnn_ddp/native/n1-g0-r2-t1/rep1/native/metrics.json"
    run_snakemake(wd, "--profile", str(REPO / "profiles" / "local"), point)  # no report chain
    m = read_metrics(wd / point)
    import os
    import pwd
    user = os.environ.get("USER") or pwd.getpwuid(os.getuid()).pw_name
    staged = Path(str(nvme).replace("$USER", user)) / "tiny"
    assert m["dataset"]["read_from"] == str(staged)
    assert (staged / "MANIFEST.sha256").is_file()
    assert m["staging_s"] > 0 and f"--data {staged}" in m["command"]
    # read at every step: the batches' reading time per epoch, and no decoding up front
    assert m["data_path"] == "files" and len(m["data_wait_s"]) == 2
    assert all(w > 0 for w in m["data_wait_s"]) and "--data-path files" in m["command"]
    assert m["dataset"]["archive_sha256"] == cfg["datasets"]["tiny"]["sha256"]
    assert m["dataset"]["native_sizes"] == ["72x72"] and m["image_size"] == 72
    assert m["classes"] == ["horse", "zebra"] and m["dataset_images"] == 12
