"""Sites as data (issue #17): every fact about a machine in one file, sites/<name>.yaml
(workflow/schemas/site.schema.yaml), named by the config's `site:`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import REPO, config_text, run_snakemake, tiny_config, write_site
from scalesweep.plan.config import ConfigError, check_config
from scalesweep.plan.config_read import effective_config
from scalesweep.plan.sweep import SweepError, sweep_points
from scalesweep.platform.site import SITES_DIR, SiteError, known_sites, load_site

SITE_FILES = sorted(SITES_DIR.glob("*.yaml"))


def scalesweep(*args, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "scalesweep", *map(str, args)],
                          capture_output=True, text=True, timeout=300, cwd=cwd)


# --- the sites of the repository ------------------------------------------------------------

@pytest.mark.parametrize("path", SITE_FILES, ids=[p.stem for p in SITE_FILES])
def test_every_site_file_validates(path):
    site = load_site(path.stem)
    assert site["name"] == path.stem  # sites/<name>.yaml is named so
    assert site["description"] and site["scheduler"] in ("none", "slurm")
    assert load_site(str(path)) == site  # by name or by path: the same site


def test_the_sites_are_the_known_ones():
    # the project's own (a user's sites/<name>.yaml may join them)
    assert {"frontier", "local", "local-slurm", "odo"} <= set(known_sites())
    assert load_site("local")["scheduler"] == "none"
    assert load_site("local-slurm")["shared_cores"] is True


def test_odo_extends_frontier_with_its_own_node_count():
    frontier, odo = load_site("frontier"), load_site("odo")
    assert odo["slurm"]["limits"]["max_nodes"] == 30
    assert frontier["slurm"]["limits"]["max_nodes"] == 9472
    # everything else is Frontier's
    for site in (frontier, odo):
        del site["slurm"]["limits"]["max_nodes"]
        for key in ("name", "description", "source"):
            del site[key]
    assert odo == frontier
    assert "runtimes" in odo and odo["runtimes"]["apptainer"]["gpu_flag"] == "--rocm"


def test_defaults_come_from_the_schema():
    site = load_site("local")
    assert site["slurm"] == {"exclusive": True, "max_runtime_min": 0, "extra": [], "limits": {}}
    assert site["node"]["core_spec"] is None and site["node"]["mem_mb"] == 0
    assert site["runtimes"]["charliecloud"]["binds"] == []
    host_mpi = site["runtimes"]["charliecloud"]["host_mpi"]  # the file names only libs
    assert host_mpi.pop("libs")[0].endswith("/libmpi.so.40")
    assert host_mpi == {"lib_dirs": [], "image_lib_dirs": [], "preload": "", "binds": [], "env": {}}
    assert site["node"]["payload_device"] == "auto"
    assert site["price"] == {}  # no price declared
    assert load_site("frontier")["price"] == {"per_node_hour": 1.0,
                                              "unit": "allocation node-hours"}


# --- the config names its site ---------------------------------------------------------------

def test_the_config_carries_its_site(campaign):
    config = effective_config(campaign(tiny_config()))
    assert config["site"] == "local" and config["_site"] == load_site("local")
    frontier = effective_config(REPO, [REPO / "config" / "frontier.yaml"])
    assert frontier["site"] == "frontier" and frontier["_site"]["node"]["gpus"] == 8
    odo = effective_config(REPO, [REPO / "config" / "frontier.yaml", REPO / "config" / "odo.yaml"])
    assert odo["_site"]["name"] == "odo"


@pytest.mark.parametrize("key, value, moved", [
    ("machine", {"name": "frontier", "gpus_per_node": 8},
     "config key machine: moved to a site file: name it with `site: <name>` (sites/*.yaml)"),
    ("containers", {"site": {"gpu_flag": "--rocm"}},
     "config key containers.site: moved to a site file's `runtimes:`"),
    ("containers", {"build_args": "containers/apptainer/site.args"},
     "config key containers.build_args: moved to a site file's `build_args:`"),
])
def test_moved_keys_are_refused_saying_where_they_went(key, value, moved):
    config = tiny_config()
    config[key] = value
    with pytest.raises(ConfigError) as err:
        check_config(config)
    assert moved in str(err.value)


def test_old_config_stops_snakemake_before_any_job(campaign):
    config = tiny_config()
    config["machine"] = {"name": "local", "cores_per_node": 2}
    wd = campaign(config)
    proc = run_snakemake(wd, "-n", check=False)
    assert proc.returncode != 0
    assert "config key machine: moved to a site file: name it with `site: <name>` " \
           "(sites/*.yaml)" in proc.stdout + proc.stderr
    assert not (wd / "results").exists()


def test_unknown_site_is_refused_naming_the_known_ones(tmp_path):
    with pytest.raises(ConfigError) as err:
        check_config({**tiny_config(), "site": "summit"})
    message = str(err.value)
    assert "config key site: unknown site 'summit'" in message
    assert "known sites: " + ", ".join(known_sites()) in message and "local-slurm" in message
    with pytest.raises(ConfigError, match="site file .*nowhere.yaml' not found"):
        check_config({**tiny_config(), "site": str(tmp_path / "nowhere.yaml")})


def test_a_site_that_does_not_validate_is_named(tmp_path):
    bad = write_site(tmp_path, "bad", node={"gpus": -1, "device": "tpu"})
    with pytest.raises(ConfigError) as err:
        check_config({**tiny_config(), "site": bad})
    message = str(err.value)
    assert "site" in message and "bad.site.yaml" in message
    assert "site key node.device" in message and "site key node.gpus" in message


@pytest.mark.parametrize("facts", [
    {"launch": {"srun_extra": ["--x;rm -rf /"]}},
    {"slurm": {"extra": ["$(touch PWNED)"]}},
    {"storage": {"node_local_path": "/mnt/`id`"}},
    {"runtimes": {"apptainer": {"bin": "apptainer", "binds": ["/a b"]}}},
    {"runtimes": {"apptainer": {"bin": "apptainer", "env": {"X": "a'b"}}}},
    {"build_args": {"ROCM_VERSION": "6.2;touch PWNED"}},
    {"runtimes": {"docker": {"bin": "docker"}}},
])
def test_unsafe_or_unknown_site_values_are_refused(tmp_path, facts):
    with pytest.raises(SiteError, match="does not validate: site key"):
        load_site(write_site(tmp_path, **facts))


def test_extends_loops_and_nameless_files_are_refused(tmp_path):
    (tmp_path / "a.yaml").write_text(yaml.safe_dump({"name": "a", "description": "a",
                                                     "extends": "b.yaml"}))
    (tmp_path / "b.yaml").write_text(yaml.safe_dump({"name": "b", "description": "b",
                                                     "extends": "./a.yaml"}))
    with pytest.raises(SiteError, match="'extends' loops"):
        load_site(str(tmp_path / "a.yaml"))
    (tmp_path / "self.yaml").write_text(yaml.safe_dump({"name": "s", "description": "s",
                                                        "extends": "self.yaml"}))
    with pytest.raises(SiteError, match="'extends' loops"):
        load_site(str(tmp_path / "self.yaml"))
    (tmp_path / "anon.yaml").write_text(yaml.safe_dump({"extends": "frontier"}))
    with pytest.raises(SiteError, match="no `name:`"):  # it would be called frontier
        load_site(str(tmp_path / "anon.yaml"))


# --- a new site is one file ------------------------------------------------------------------

MADE_UP = {
    "name": "made-up",
    "description": "A made-up GPU cluster",
    "source": "its user guide",
    "scheduler": "slurm",
    "node": {"cores": 16, "gpus": 4, "device": "cuda"},
    "launch": {"launcher": "srun"},
    "slurm": {"max_runtime_min": 60,
              "limits": {"max_nodes": 4, "max_queued_jobs": 50, "max_eligible_jobs": 2}},
    "price": {"per_node_hour": 2.5, "unit": "USD"},
}


def gpu_sweep(site: str) -> dict:
    config = tiny_config()
    config["site"] = site
    config["sweep"] = {"runtimes": ["native"], "nodes": [1, 2, 8], "gpus_per_node": [4],
                       "threads_per_rank": [4], "repeats": 1, "baseline": 4}
    config["workloads"]["cnn_ddp"]["max_runtime_min"] = 90
    return config


def test_a_site_added_as_one_file_is_planned_with_its_limits_and_price(tmp_path):
    site = tmp_path / "made-up.yaml"
    site.write_text(yaml.safe_dump(MADE_UP))
    (tmp_path / "c" / "config").mkdir(parents=True)
    (tmp_path / "c" / "config" / "config.yaml").write_text(config_text(gpu_sweep(str(site))))
    out = scalesweep("plan", "-d", tmp_path / "c", "--json")
    assert out.returncode == 0, out.stderr
    plan = json.loads(out.stdout)
    assert plan["site"] == "made-up"
    totals = plan["totals"]
    # 3 points of 1, 2, 8 nodes, 90 min asked, capped at the site's 60; + staging and
    # verification of the dataset (2 jobs of 1 node, Snakemake's default 60 min)
    assert totals["point_jobs"] == 3 and totals["support_jobs"] == 2
    assert totals["requested_node_h"] == pytest.approx((1 + 2 + 8) * 1.0 + 2 * 1.0)
    assert plan["cost"] == {"unit": "USD", "per_node_hour": 2.5,
                            "requested": pytest.approx(2.5 * totals["requested_node_h"]),
                            "worst": pytest.approx(2.5 * totals["worst_node_h"]),
                            "expected": pytest.approx(2.5 * totals["expected_node_h"])}
    warnings = "\n".join(plan["warnings"])
    assert "1 points ask for more than site made-up's 4 nodes (largest: 8): they can never " \
           "start" in warnings
    assert "site made-up lets 2 of a user's jobs be eligible to run at once: 5 jobs run in " \
           "at least 3 waves" in warnings
    text = scalesweep("plan", "-d", tmp_path / "c").stdout
    assert "site: made-up, A made-up GPU cluster" in text
    assert "cost at 2.5 USD per node-hour: minimum 32.5, " in text
    assert "site limits from: its user guide" in text


def test_plan_site_option_overrides_the_configs_site(tmp_path):
    (tmp_path / "made-up.yaml").write_text(yaml.safe_dump(MADE_UP))
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "config.yaml").write_text(config_text(gpu_sweep("local")))
    out = scalesweep("plan", "-d", tmp_path, "--json", cwd=tmp_path)
    # a CPU site: DDP's per-node axis is ranks_per_node, which this GPU sweep does not set
    assert out.returncode == 2 and "sweep axis ranks_per_node is not set" in out.stderr
    # --site PATH: relative to the current directory, as on any command line
    out = scalesweep("plan", "-d", tmp_path, "--site", "made-up.yaml", "--json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["site"] == "made-up"
    out = scalesweep("plan", "-d", tmp_path, "--site", "nowhere", cwd=tmp_path)
    assert out.returncode == 2 and "unknown site 'nowhere'" in out.stderr
    # the config is checked on --site's site alone: a dataset source that the config's own
    # site (local: no scheduler) would read here is the cluster's there
    config = gpu_sweep("local")
    config["datasets"]["tiny"] = {"source": "fashion-mnist", "path": "/nonexistent/fm",
                                  "image_size": 64}
    (tmp_path / "config" / "config.yaml").write_text(config_text(config))
    out = scalesweep("plan", "-d", tmp_path, "--site", "made-up.yaml", "--json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr


def test_the_sweep_is_checked_against_the_sites_node(tmp_path):
    made_up = write_site(tmp_path, "made-up", extends=None, **{
        k: v for k, v in MADE_UP.items() if k not in ("name", "description")})
    config = gpu_sweep(made_up)
    check_config(config)
    assert {p.gpus for p in sweep_points(config)} == {4}
    config["sweep"]["threads_per_rank"] = [5]  # 4 ranks x 5 threads > 16 cores
    with pytest.raises(SweepError, match="exceeds node.cores=16 of site made-up"):
        sweep_points(config)


# --- a site is its site file (issue #28): machine facts once, there ---------------------------

TOY = {
    "name": "toy",
    "description": "A toy GPU cluster, added as one file",
    "source": "made up for the test",
    "scheduler": "slurm",
    "node": {"cores": 56, "gpus": 8, "device": "rocm", "gpu_visibility_var": "ROCR_VISIBLE_DEVICES"},
    "launch": {"launcher": "srun"},
    "slurm": {"max_runtime_min": 120, "limits": {"max_nodes": 64}},
    "storage": {"node_local_path": "/scratch/local/$USER", "node_local_constraint": "ssd"},
    "runtimes": {"apptainer": {"bin": "apptainer", "python": "/opt/venv/bin/python",
                               "gpu_flag": "--rocm",
                               "host_mpi": {"lib_dirs": ["/opt/toy/mpich/lib"]}}},
}


def test_a_toy_site_file_alone_plans_the_frontier_study(tmp_path, monkeypatch):
    """One new file, sites/<name>.yaml (here in tmp_path): the Frontier study measured on
    it, its node-local copies where the toy site says, nothing else of the repository
    touched."""
    from scalesweep.plan.payloads import node_local_dir

    before = subprocess.run(["git", "status", "--porcelain"], cwd=REPO, capture_output=True,
                            text=True).stdout
    toy = tmp_path / "toy.yaml"
    toy.write_text(yaml.safe_dump(TOY))
    study = REPO / "config" / "frontier.yaml"
    out = scalesweep("plan", "-d", REPO, "--configfile", study, "--site", toy, "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["site"] == "toy"
    config = effective_config(REPO, [study], [f"site={toy}"])
    assert config["_site"]["name"] == "toy"
    monkeypatch.setenv("USER", "someone")
    assert node_local_dir(config, "study_images") == "/scratch/local/someone/study_images"
    assert subprocess.run(["git", "status", "--porcelain"], cwd=REPO, capture_output=True,
                          text=True).stdout == before


def test_the_node_local_path_is_the_sites_alone(tmp_path):
    """datasets.<name>.node_local says whether, the site file's storage.node_local_path
    where; a path in the config is refused saying where it went, node_local on a site
    without node-local storage naming the site."""
    config = tiny_config()
    config["datasets"]["tiny"]["node_local"] = "/mnt/bb/$USER"
    with pytest.raises(ConfigError, match=r"datasets.tiny.node_local: the node-local path is "
                                          r"the site's .*storage.node_local_path"):
        check_config(config)
    config = tiny_config(site=write_site(tmp_path, "bare", extends=None, scheduler="none",
                                         node={"cores": 2, "gpus": 0, "device": "cpu"},
                                         launch={"launcher": "mpirun"}))
    config["datasets"]["tiny"]["node_local"] = True
    with pytest.raises(ConfigError, match="site 'bare' has no node-local storage"):
        check_config(config)
    # every study config of the repository states no machine path of a site's
    for path in sorted((REPO / "config").glob("*.yaml")):
        text = path.read_text()
        for site in SITE_FILES:
            local = (yaml.safe_load(site.read_text()).get("storage") or {}).get("node_local_path")
            assert not local or local not in text.split("#")[0] and not any(
                local in line.split("#")[0] for line in text.splitlines()), (path, local)
