"""One reading of the configuration (issue #16): every subcommand reads a campaign's
config as ``snakemake`` does for the same ``--configfile``, ``--config`` and ``--profile``;
and ``--config 'only={...}'`` chooses workloads, runtimes and node counts to measure."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import REPO, config_text, run_snakemake, tiny_config, write_site
from scalesweep.plan.config import ConfigError
from scalesweep.plan.config_read import (
    WORKFLOW_CONFIGFILE,
    config_sources,
    effective_config,
    load_config,
    schema_typed,
)
from scalesweep.plan.sweep import (
    Selection,
    SweepError,
    SweepPoint,
    check_selection,
    select_points,
    selected_points,
    sweep_points,
)

COMMON = REPO / "workflow" / "rules" / "common.smk"


def scalesweep(*args, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "scalesweep", *map(str, args)],
                          capture_output=True, text=True, timeout=300, cwd=cwd)


def write(path: Path, data) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return path


def profile_dir(root: Path, **keys) -> Path:
    return write(root / "config.yaml", keys).parent


def planned_points(proc: subprocess.CompletedProcess) -> set[str]:
    """The points a `snakemake -n` would measure: its run_point jobs' metrics.json."""
    text = proc.stdout + proc.stderr
    return set(re.findall(r"^\s+output: results/runs/(\S+)/metrics\.json", text, re.M))


def recorded_config(directory: Path) -> dict:
    """The effective config the workflow wrote (campaign.parse_time.write_run_config) in a fresh
    campaign, without the key the workflow adds after validation."""
    files = sorted((directory / ".snakemake" / "scalesweep").glob("config-*.json"))
    assert len(files) == 1, files
    config = json.loads(files[0].read_text())
    config.pop("_code_root", None)
    return config


def as_json(config: dict) -> dict:
    return json.loads(json.dumps(config, sort_keys=True, default=str))


# --- reading the configuration -------------------------------------------------------------

def test_the_snakefile_reads_the_file_scalesweep_reads():
    """One configfile directive (workflow/rules/config.smk), in the workflow and in what
    effective_config has Snakemake parse through its API (plan/read_config.smk)."""
    from scalesweep.plan.config_read import READ_CONFIG

    directive = f'configfile: "{WORKFLOW_CONFIGFILE}"'
    assert directive in (REPO / "workflow" / "rules" / "config.smk").read_text()
    assert 'include: "workflow/rules/config.smk"' in (REPO / "Snakefile").read_text()
    assert 'include: "../../rules/config.smk"' in READ_CONFIG.read_text()
    holders = [p for p in [REPO / "Snakefile", *(REPO / "workflow").rglob("*.smk")]
               if "configfile:" in re.sub(r"#.*", "", p.read_text())]
    assert holders == [REPO / "workflow" / "rules" / "config.smk"]


def test_partial_configfile_merges_over_the_campaign_config(campaign, tmp_path):
    wd = campaign(tiny_config())
    part = write(tmp_path / "part.yaml", {"sweep": {"repeats": 2}})
    with pytest.raises(ConfigError):  # the old reading: the override file alone
        load_config([part])
    config = effective_config(wd, [part])
    assert config["sweep"]["repeats"] == 2 and config["sweep"]["ranks_per_node"] == [1, 2]
    assert config["workloads"]["cnn_ddp"]["epochs"] == 2
    assert config["measurement"]["max_repeats"] == 10  # schema defaults filled in


def test_config_items_parsed_by_snakemake_then_retyped(campaign):
    wd = campaign(tiny_config())
    config = effective_config(wd, config_args=[
        "sweep={repeats: 3, ranks_per_node: [1]}", "measurement={adaptive: true}",
        "analysis={cv_threshold: 0.1}"])
    assert config["sweep"]["repeats"] == 3 and config["sweep"]["ranks_per_node"] == [1]
    assert config["sweep"]["nodes"] == [1]  # merged, not replaced
    assert config["measurement"]["adaptive"] is True
    assert config["analysis"]["cv_threshold"] == 0.1
    typed = schema_typed({"sweep": {"repeats": "3", "ranks_per_node": ["1", "2"]},
                          "containers": {"image": "007"}, "measurement": "{adaptive: true}"})
    assert typed == {"sweep": {"repeats": 3, "ranks_per_node": [1, 2]},
                     "containers": {"image": "007"},  # the schema takes a string there
                     "measurement": {"adaptive": True}}
    with pytest.raises(ConfigError, match="--config: Invalid config definition"):
        effective_config(wd, config_args=["no-equals-sign"])


def test_files_then_config_items_in_order(campaign, tmp_path):
    wd = campaign(tiny_config())
    a = write(tmp_path / "a.yaml", {"sweep": {"repeats": 2, "ranks_per_node": [1]}})
    b = write(tmp_path / "b.json", json.dumps({"sweep": {"repeats": 4}}))
    config = effective_config(wd, [a, b], ["sweep={repeats: 5}"])
    assert config["sweep"]["repeats"] == 5 and config["sweep"]["ranks_per_node"] == [1]
    assert effective_config(wd, [b, a])["sweep"]["repeats"] == 2


def test_missing_campaign_config_needs_a_configfile(tmp_path):
    full = write(tmp_path / "full.yaml", tiny_config())
    with pytest.raises(ConfigError, match="no config: .*config/config.yaml does not exist"):
        effective_config(tmp_path / "empty")
    with pytest.raises(ConfigError, match="no config"):  # --config alone is not enough
        effective_config(tmp_path / "empty", config_args=["sweep={repeats: 2}"])
    assert effective_config(tmp_path / "empty", [full])["sweep"]["repeats"] == 1
    write(tmp_path / "rec" / ".snakemake" / "scalesweep" / "config-0123.json", "{}")
    with pytest.raises(ConfigError, match="recorded in .*scalesweep .newest: config-0123"):
        effective_config(tmp_path / "rec")
    with pytest.raises(ConfigError, match="config file .*nothere.yaml not found"):
        effective_config(tmp_path / "empty", [tmp_path / "nothere.yaml"])


def test_profile_config_and_configfile_keys(campaign, tmp_path):
    wd = campaign(tiny_config())
    over = write(tmp_path / "over.yaml", {"sweep": {"repeats": 3}})
    prof = profile_dir(tmp_path / "prof", config=["site=local-slurm"], configfile=[str(over)])
    config = effective_config(wd, profile=prof)
    assert config["site"] == "local-slurm" and config["_site"]["shared_cores"] is True
    assert config["sweep"]["ranks_per_node"] == [1, 2]  # merged over the campaign's config
    assert config["sweep"]["repeats"] == 3
    # an explicit --config replaces the profile's whole config: list (Snakemake's
    # argparse-based profiles: a key given on the command line wins as a whole)
    config = effective_config(wd, config_args=["sweep={repeats: 2}"], profile=prof)
    assert config["site"] == "local" and config["_site"]["shared_cores"] is False
    assert config["sweep"]["repeats"] == 2
    # ... and an explicit --configfile the profile's configfile:
    other = write(tmp_path / "other.yaml", {"sweep": {"ranks_per_node": [2]}})
    config = effective_config(wd, [other], profile=prof)
    assert config["sweep"]["repeats"] == 1 and config["site"] == "local-slurm"
    sources = config_sources(wd, [other], profile=prof)
    assert sources.files() == [wd / "config" / "config.yaml", other]
    assert sources.config_args == ("site=local-slurm",)


LOCAL_SLURM = REPO / "profiles" / "local-slurm"


def test_local_slurm_profile_names_its_site(campaign, tmp_path):
    """profiles/local-slurm names config/local-slurm.yaml (site: local-slurm, whose nodes
    share cores), relative to the profile: from any campaign directory. An explicit
    --configfile replaces it (and names a site of its own: one extending local-slurm)."""
    wd = campaign(tiny_config())
    config = effective_config(wd, profile=LOCAL_SLURM)
    assert config["site"] == "local-slurm" and config["_site"]["shared_cores"] is True
    assert config_sources(wd, profile=LOCAL_SLURM).files() == [
        wd / "config" / "config.yaml", LOCAL_SLURM / ".." / ".." / "config" / "local-slurm.yaml"]
    site = write_site(tmp_path, "cluster", extends="local-slurm", node={"mem_mb": 1000})
    part = write(tmp_path / "part.yaml", {"site": site, "sweep": {"repeats": 2}})
    config = effective_config(wd, [part], profile=LOCAL_SLURM)
    assert config["site"] == site and config["_site"]["name"] == "cluster"
    assert config["_site"]["shared_cores"] is True and config["_site"]["node"]["mem_mb"] == 1000
    assert config["sweep"]["repeats"] == 2


def test_local_slurm_profile_site_agrees_with_snakemake(tmp_path):
    """The same through `snakemake -n` (a dry run: nothing is submitted), in a campaign
    directory outside the repository: what the workflow records is what
    effective_config reads."""
    site = write_site(tmp_path, "cluster", extends="local-slurm", node={"mem_mb": 1000})
    part = write(tmp_path / "part.yaml", {"site": site, "sweep": {"repeats": 2}})
    for name, extra in (("local-slurm", []), ("cluster", ["--configfile", str(part)])):
        wd = tmp_path / name
        write(wd / "config" / "config.yaml", config_text(tiny_config()))
        run_snakemake(wd, "-n", "--profile", str(LOCAL_SLURM), *extra, timeout=300)
        recorded = recorded_config(wd)
        assert recorded == as_json(effective_config(wd, extra[1:], profile=LOCAL_SLURM))
        assert recorded["_site"]["name"] == name and recorded["_site"]["shared_cores"] is True


def test_profile_replace_workflow_config(campaign, tmp_path):
    wd = campaign(tiny_config(sweep={"runtimes": ["native"], "nodes": [1],
                                     "ranks_per_node": [1, 2], "repeats": 4}))
    alone = write(tmp_path / "alone.yaml", tiny_config())
    prof = profile_dir(tmp_path / "prof", **{"replace-workflow-config": True})
    assert effective_config(wd, [alone], profile=prof)["sweep"]["repeats"] == 1
    assert config_sources(wd, [alone], profile=prof).files() == [alone]
    assert effective_config(wd, [write(tmp_path / "p.yaml", {"sweep": {"repeats": 2}})],
                            profile=None)["sweep"]["repeats"] == 2


def test_bad_profile_is_a_config_error(campaign, tmp_path):
    with pytest.raises(ConfigError, match="no profile.yaml .or config.yaml. found"):
        effective_config(campaign(tiny_config()), profile=tmp_path / "none")


# --- the same reading as the workflow: compared with `snakemake -n` -------------------------

def test_status_with_a_partial_configfile_agrees_with_snakemake(campaign, tmp_path):
    wd = campaign(tiny_config())
    part = write(tmp_path / "part.yaml", {"sweep": {"repeats": 2}})
    out = scalesweep("status", "-d", wd, "--configfile", part, "--json")
    assert out.returncode == 0, out.stderr
    status = json.loads(out.stdout)
    listed = {p["path"] for p in status["points"]}
    assert len(listed) == 4 and all(p["state"] == "missing" for p in status["points"])
    dry = run_snakemake(wd, "-n", "--configfile", str(part))
    assert planned_points(dry) == listed
    assert recorded_config(wd) == as_json(effective_config(wd, [part]))


def test_config_items_and_profile_agree_with_snakemake(campaign, tmp_path):
    wd = campaign(tiny_config())
    prof = profile_dir(tmp_path / "prof", config=["sweep={repeats: 3}", "site=local-slurm"])
    args = ["--profile", str(prof), "--config", "sweep={ranks_per_node: [2], baseline: 2}",
            "analysis={cv_threshold: 0.2}"]
    dry = run_snakemake(wd, "-n", *args)
    expected = effective_config(wd, (), args[3:], prof)
    assert expected["sweep"]["repeats"] == 1 and expected["site"] == "local"
    assert recorded_config(wd) == as_json(expected)
    out = scalesweep("status", "-d", wd, *args, "--json")
    assert out.returncode == 0, out.stderr
    listed = {p["path"] for p in json.loads(out.stdout)["points"]}
    assert planned_points(dry) == listed == {"cnn_ddp/native/n1-g0-r2-t1/rep1/native"}


def test_profile_config_agrees_with_snakemake(campaign, tmp_path):
    wd = campaign(tiny_config())
    prof = profile_dir(tmp_path / "prof", config=["sweep={repeats: 2, ranks_per_node: [1]}"])
    dry = run_snakemake(wd, "-n", "--profile", str(prof))
    assert recorded_config(wd) == as_json(effective_config(wd, profile=prof))
    out = scalesweep("status", "-d", wd, "--profile", prof, "--json")
    assert out.returncode == 0, out.stderr
    status = json.loads(out.stdout)
    assert planned_points(dry) == {p["path"] for p in status["points"]} == {
        "cnn_ddp/native/n1-g0-r1-t1/rep1/native", "cnn_ddp/native/n1-g0-r1-t1/rep2/native"}
    assert status["rerun_command"].startswith(f"snakemake --directory {wd} --profile {prof}")


@pytest.mark.parametrize("content,what", [("- a\n- b\n", "a list"), ("just words\n", "a string"),
                                          ("", "empty")])
def test_a_config_file_that_is_not_a_mapping_is_refused_naming_it(campaign, tmp_path, content,
                                                                   what):
    """Issue #26 case 8 (Snakemake's own refusal, "Config file must be given as JSON or YAML
    with keys at top level.", names no file)."""
    wd = campaign(tiny_config())
    bad = tmp_path / "bad.yaml"
    bad.write_text(content)
    expected = f"config file {bad}: its content is {what}, not a mapping of config keys"
    with pytest.raises(ConfigError, match=re.escape(expected)):
        effective_config(wd, [bad])
    with pytest.raises(ConfigError, match=re.escape(expected)):
        load_config([bad])
    own = wd / "config" / "config.yaml"
    own.write_text(content)
    with pytest.raises(ConfigError, match=re.escape(f"config file {own}: its content is {what}")):
        effective_config(wd)
    if what == "a list":  # and on the command line, as a user sees it
        out = scalesweep("status", "-d", wd, "--configfile", bad)
        assert out.returncode == 2 and expected in out.stderr and "Traceback" not in out.stderr


def test_status_without_campaign_config(tmp_path):
    full = write(tmp_path / "full.yaml", tiny_config())
    out = scalesweep("status", "-d", tmp_path / "c")
    assert out.returncode == 2 and "no config:" in out.stderr
    out = scalesweep("status", "-d", tmp_path / "c", "--configfile", full)
    assert out.returncode == 0, out.stderr
    assert "2 requested points" in out.stdout and "does not exist: the config is" in out.stdout


def test_plan_reads_the_same_config(campaign, tmp_path):
    wd = campaign(tiny_config())
    part = write(tmp_path / "part.yaml", {"sweep": {"repeats": 2}})
    out = scalesweep("plan", "-d", wd, "--configfile", part, "--config",
                     "sweep={ranks_per_node: [1]}", "--json")
    assert out.returncode == 0, out.stderr
    plan = json.loads(out.stdout)
    assert plan["totals"]["point_jobs"] == 2
    assert plan["configs"] == [str(wd / "config" / "config.yaml"), str(part),
                               "--config sweep={ranks_per_node: [1]}"]


# --- choosing workloads, runtimes and node counts: only= ------------------------------------

def two_workloads(**overrides) -> dict:
    """Two CNN workloads; cnn_b also at 2 nodes and in a container."""
    config = tiny_config(**overrides)
    config["workloads"]["cnn_b"] = {
        "payload": "cnn", "dataset": "tiny",
        "sweep": {"runtimes": ["native", "charliecloud"], "nodes": [1, 2],
                  "ranks_per_node": [1]}}
    return config


def selection_config(only=None, **overrides) -> dict:
    config = two_workloads(**overrides)
    if only is not None:
        config["only"] = only
    return config


def paths(points) -> list[str]:
    return [p.path for p in points]


def test_no_selection_is_the_whole_sweep():
    config = selection_config()
    points = sweep_points(config)
    assert select_points(points, config) == points == selected_points(config)
    assert Selection.of(config).everything and Selection.of(config).describe() == ""


def test_selection_narrows_each_axis_and_combines():
    pick = lambda only: paths(selected_points(selection_config(only)))  # noqa: E731
    assert pick({"workloads": ["cnn_ddp"]}) == ["cnn_ddp/native/n1-g0-r1-t1/rep1/native",
                                                "cnn_ddp/native/n1-g0-r2-t1/rep1/native"]
    # a chosen runtime is measured in its blocks: native beside it
    assert pick({"runtimes": ["charliecloud"]}) == [
        "cnn_b/charliecloud/n1-g0-r1-t1/rep1/charliecloud",
        "cnn_b/charliecloud/n2-g0-r1-t1/rep1/charliecloud",
        "cnn_b/charliecloud/n1-g0-r1-t1/rep1/native",
        "cnn_b/charliecloud/n2-g0-r1-t1/rep1/native"]
    assert pick({"nodes": [2]}) == ["cnn_b/charliecloud/n2-g0-r1-t1/rep1/charliecloud",
                                    "cnn_b/charliecloud/n2-g0-r1-t1/rep1/native"]
    assert pick({"workloads": ["cnn_b"], "runtimes": ["native"], "nodes": [1]}) == \
        ["cnn_b/charliecloud/n1-g0-r1-t1/rep1/native"]
    assert len(pick({"workloads": ["cnn_ddp", "cnn_b"], "runtimes": ["native"]})) == 4
    selection = Selection.of(selection_config({"nodes": [2], "workloads": ["cnn_b"]}))
    assert selection.describe() == "only={workloads: [cnn_b], nodes: [2]}"
    assert SweepPoint.from_path("cnn_b/charliecloud/n2-g0-r1-t1/rep7/native") in selection  # any repeat
    assert SweepPoint.from_path("cnn_b/charliecloud/n1-g0-r1-t1/rep1/native") not in selection


@pytest.mark.parametrize("only, message", [
    ({"workloads": ["lm"]},
     "only.workloads: 'lm' is not a workload of this config (defined: cnn_b, cnn_ddp)"),
    ({"runtimes": ["apptainer"]},
     "only.runtimes: 'apptainer' is not a runtime of the sweep (in the sweep: native, "
     "charliecloud)"),
    ({"workloads": ["cnn_ddp"], "runtimes": ["charliecloud"]},
     "only.runtimes: 'charliecloud' is not a runtime of the selected workloads (in the "
     "sweep: native)"),
    ({"nodes": [4]}, "only.nodes: 4 is not a node count of the sweep (in the sweep: 1, 2)"),
    ({"workloads": ["cnn_ddp"], "nodes": [2]},
     "only.nodes: 2 is not a node count of the selected workloads (in the sweep: 1)"),
])
def test_selection_errors_name_the_value_and_the_choices(only, message):
    with pytest.raises(SweepError) as err:
        selected_points(selection_config(only))
    assert message in str(err.value)


def test_a_value_of_any_selected_workload_is_valid():
    # charliecloud is cnn_b's only: with both workloads selected it selects cnn_b's points
    only = {"runtimes": ["charliecloud"], "nodes": [1], "workloads": ["cnn_ddp", "cnn_b"]}
    assert paths(selected_points(selection_config(only))) == \
        ["cnn_b/charliecloud/n1-g0-r1-t1/rep1/charliecloud",
         "cnn_b/charliecloud/n1-g0-r1-t1/rep1/native"]


def test_selection_of_a_switched_off_workload_or_of_nothing():
    config = selection_config({"workloads": ["cnn_b"]})
    config["workloads"]["cnn_b"]["enabled"] = False
    with pytest.raises(SweepError, match=r"only.workloads: 'cnn_b' is switched off "
                       r"\(workloads.cnn_b.enabled: false\); enabled: cnn_ddp"):
        selected_points(config)
    # each value is in the sweep, but no point has both: charliecloud only at 1 node
    config = selection_config({"runtimes": ["charliecloud"], "nodes": [2]})
    config["workloads"]["cnn_b"]["sweep"]["nodes"] = [1]
    config["workloads"]["cnn_ddp"]["sweep"] = {"nodes": [2], "baseline": 2}
    with pytest.raises(SweepError, match="selects no point of the sweep"):
        check_selection(sweep_points(config), config)


def test_selection_is_schema_checked(campaign):
    wd = campaign(two_workloads())
    config = effective_config(wd, config_args=[
        "only={workloads: [cnn_b], runtimes: [native], nodes: [2]}"])
    assert config["only"] == {"workloads": ["cnn_b"], "runtimes": ["native"], "nodes": [2]}
    assert paths(selected_points(config)) == ["cnn_b/charliecloud/n2-g0-r1-t1/rep1/native"]
    assert "only" not in effective_config(wd)  # no default: absent means everything
    for bad, key in [("only={workloads: cnn_b}", "config key only.workloads"),
                     ("only={workload: [cnn_b]}", "config key only"),
                     ("only={runtimes: [docker]}", "config key only.runtimes.0"),
                     ("only={nodes: [0]}", "config key only.nodes.0"),
                     ("only={workloads: ['a;rm -rf']}", "config key only.workloads.0")]:
        with pytest.raises(ConfigError, match=re.escape(key)):
            effective_config(wd, config_args=[bad])


def test_status_and_plan_honour_the_selection(campaign):
    wd = campaign(two_workloads())
    only = "only={workloads: [cnn_b], nodes: [2]}"
    out = scalesweep("status", "-d", wd, "--config", only, "--json")
    assert out.returncode == 0, out.stderr
    status = json.loads(out.stdout)
    assert {p["path"] for p in status["points"]} == {"cnn_b/charliecloud/n2-g0-r1-t1/rep1/native",
                                                     "cnn_b/charliecloud/n2-g0-r1-t1/rep1/charliecloud"}
    assert status["outside_selection"]["points"] == 4
    assert status["outside_selection"]["selection"] == "only={workloads: [cnn_b], nodes: [2]}"
    assert status["rerun_command"] == f"snakemake --directory {wd} --config '{only}'"
    out = scalesweep("status", "-d", wd, "--config", only)
    assert "2 requested points" in out.stdout
    assert "4 more point(s) outside the selection only={workloads: [cnn_b], nodes: [2]}, " \
           "not listed: 4 missing" in out.stdout
    out = scalesweep("status", "-d", wd, "--config", "only={workloads: [lm]}")
    assert out.returncode == 2
    assert "only.workloads: 'lm' is not a workload of this config (defined: cnn_b, cnn_ddp)" \
        in out.stderr
    out = scalesweep("plan", "-d", wd, "--config", only, "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["totals"]["point_jobs"] == 2


# --- the workflow with a selection (wired in workflow/rules/common.smk) ---------------------

def test_dry_run_measures_only_the_selection(campaign):
    wd = campaign(two_workloads())
    only = "only={workloads: [cnn_b], runtimes: [native]}"
    dry = run_snakemake(wd, "-n", "--config", only)
    assert planned_points(dry) == {"cnn_b/charliecloud/n1-g0-r1-t1/rep1/native",
                                   "cnn_b/charliecloud/n2-g0-r1-t1/rep1/native"}
    out = scalesweep("status", "-d", wd, "--config", only, "--json")
    assert planned_points(dry) == {p["path"] for p in json.loads(out.stdout)["points"]}
    bad = run_snakemake(wd, "-n", "--config", "only={workloads: [lm]}", check=False)
    assert bad.returncode != 0
    assert "only.workloads: 'lm' is not a workload of this config (defined: cnn_b, cnn_ddp)" \
        in bad.stdout + bad.stderr
