"""Podman and container modes for real (issue 29): the workflow imports its own
Charliecloud build into Podman's storage (rule load_image, offline) and runs the CNN (1 and
2 ranks, each rank its own `podman run` under mpirun) natively, in Podman with this
machine's options (sites/local.yaml: runtimes.podman), and in Charliecloud's SquashFS mode
(the same build packed into a SquashFS file, mounted by ch-run with squashfuse). Each mode
is an arm of its own: its own verdicts, its mode in runs.csv and the provenance table.

The Charliecloud image comes from the shared build cache (~/.cache/scalesweep), which the
other container tests fill: a cache hit, then the SquashFS packed once per cache entry.
Podman's storage is the test's own (a site extending local with its storage_root in the
test's temporary directory), so nothing is left in the machine's storage."""

import json
import subprocess
import sys

import pandas as pd
import pytest
import yaml

from conftest import REPO, have, run_snakemake, tiny_config, write_site
from scalesweep.platform.runtimes import runtime
from scalesweep.platform.site import load_site
from scalesweep.record.metrics import read_metrics

pytestmark = [pytest.mark.integration, pytest.mark.container]

TOKENS = ["native", "podman", "charliecloud+squashfs"]


@pytest.fixture(scope="module")
def campaign_dir(tmp_path_factory):
    for tool in ("ch-run", "ch-image", "debootstrap", "mpirun", "podman", "mksquashfs", "squashfuse"):
        if not have(tool):
            pytest.skip(f"{tool} not installed (tools/install.sh --test installs it)")
    wd = tmp_path_factory.mktemp("podman")
    site = write_site(wd / "site", "podmantest", runtimes={"podman": {"storage_root": str(wd / "storage")}})
    cfg = tiny_config(site=site)
    cfg["sweep"]["runtimes"] = TOKENS
    # no strace of the start-up probes (a traced podman start takes seconds; the
    # Charliecloud test checks the counts): CI's time
    cfg["containers"] = {"image": ["default", "squashfs"], "startup_repeats": 3,
                         "startup_trace": False,
                         "images": {"default": {}, "squashfs": {"format": "squashfs"}}}
    (wd / "config").mkdir()
    (wd / "config" / "config.yaml").write_text(yaml.safe_dump({k: v for k, v in cfg.items() if k != "_site"}))
    run_snakemake(wd, "--profile", str(REPO / "profiles" / "local"), "results/summary/runs.csv",
                  "results/startup/podman.json", timeout=1800)
    yield wd
    # the test's podman storage: its images removed through podman (layers it mounted)
    facts = runtime("podman").site_facts(load_site(site), "")
    subprocess.run([*runtime("podman").global_args(facts), "rmi", "--all", "--force"],
                   capture_output=True, timeout=300)


def test_podman_points_ran_in_the_imported_image(campaign_dir):
    manifest = json.loads((campaign_dir / "resources/images/default.manifest.json").read_text())
    load = json.loads((campaign_dir / "resources/images/default.podman.load.json").read_text())
    assert load["content_digest"] == manifest["content_digest"] and load["mode"] == "overlay"
    assert load["command"][:4] == ["tar", "-C", str((campaign_dir / "resources/images/default").resolve()), "-c"]
    assert "--runtime=runc" in load["command"] and "import" in load["command"]
    for ranks in (1, 2):
        m = read_metrics(campaign_dir / f"results/runs/cnn_ddp/podman/n1-g0-r{ranks}-t1/rep1/podman/metrics.json")
        assert m["ranks"] == ranks and m["final_accuracy"] >= 0
        assert m["image"]["content_digest"] == manifest["content_digest"]
        assert m["mode"] == "overlay" and m["runtime_provenance"]["mode"] == "overlay"
        assert m["runtime_provenance"]["version"] and "podman" in m["command"]
        assert load["reference"] in m["command"] and "/mnt/code/scripts/train_cnn.py" in m["command"]
        for option in ("--runtime=runc", "--cgroup-manager=cgroupfs", "--ulimit=nofile=1024:1024"):
            assert option in m["command"]
        # the container's processes (children of conmon, not of the harness) are the
        # run's own CPU, not "outside" use that would flag every podman run disturbed
        assert m["interference"]["nodes"][0]["own_cpu_s"] >= 0.5 * m["train_s"], m["interference"]
        native = read_metrics(campaign_dir / f"results/runs/cnn_ddp/podman/n1-g0-r{ranks}-t1/rep1/native/metrics.json")
        assert native["mode"] is None and " run --rm" not in native["command"]


def test_squashfs_points_ran_from_the_squashfs_file(campaign_dir):
    sqfs = json.loads((campaign_dir / "resources/images/squashfs.manifest.json").read_text())
    plain = json.loads((campaign_dir / "resources/images/default.manifest.json").read_text())
    assert sqfs["format"] == "squashfs" and sqfs["cache_key"] == plain["cache_key"]  # one build
    for ranks in (1, 2):
        m = read_metrics(campaign_dir / "results/runs/cnn_ddp/charliecloud+squashfs/"
                         f"n1-g0-r{ranks}-t1/rep1/charliecloud+squashfs/metrics.json")
        assert m["mode"] == "squashfs" and m["ranks"] == ranks
        assert "squashfs.sqfs" in m["command"] and "ch-run" in m["command"]


def test_the_mode_of_every_run_is_in_runs_csv_and_each_mode_has_its_verdicts(campaign_dir):
    runs = pd.read_csv(campaign_dir / "results/summary/runs.csv")
    modes = runs.groupby("runtime")["mode"].agg(lambda s: set(s.fillna("")))
    assert modes.to_dict() == {"native": {""}, "podman": {"overlay"}, "charliecloud+squashfs": {"squashfs"}}
    assert set(runs["arm"]) == {"podman", "charliecloud+squashfs"}
    overhead = pd.read_csv(campaign_dir / "results/summary/overhead.csv")
    assert sorted(zip(overhead["runtime"], overhead["ranks"])) == [
        ("charliecloud+squashfs", 1), ("charliecloud+squashfs", 2), ("podman", 1), ("podman", 2)]
    assert overhead["verdict_text"].str.len().gt(0).all()
    startup = read_metrics(campaign_dir / "results/startup/podman.json")
    assert startup["probes"]["noop"]["container"]["n"] == 3
    assert startup["runtime_provenance"]["mode"] == "overlay"


def test_a_second_load_is_a_cache_hit(campaign_dir, tmp_path):
    """The stored image carries the digest it was loaded with: loading it again copies
    nothing."""
    site = str(next((campaign_dir / "site").glob("*.site.yaml")))
    out = tmp_path / "again.json"
    proc = subprocess.run(
        [sys.executable, "-m", "scalesweep", "load-image", "--runtime", "podman",
         "--image", "resources/images/default", "--manifest", "resources/images/default.manifest.json",
         "--site", site, "--out", str(out)],
        cwd=campaign_dir, capture_output=True, text=True, timeout=300,
        env={"PYTHONPATH": str(REPO / "workflow"), "PATH": "/usr/local/bin:/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    again = json.loads(out.read_text())
    assert again["cached"] is True and again["load_seconds"] < 30
