"""The sbatch lines the Slurm executor plugin derives for sweep points (no Slurm needed).

The resources come from scalesweep.run.slurm (what rule run_point's resource functions
return); the sbatch line from the plugin's own functions (snakemake-executor-plugin-slurm
2.8.0: submit_string.get_submit_command + utils.set_gres_string, exactly what its
run_job() concatenates), given a minimal job stand-in carrying those resources. Then the
real dry runs of the Frontier and Odo designs through their profiles.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import REPO, run_snakemake, tiny_config, write_site
from scalesweep.plan.config_read import load_config
from scalesweep.plan.sweep import SweepPoint, sweep_points
from scalesweep.platform.site import SiteError, load_site
from scalesweep.campaign.invocation import plugin_settings, snakemake_args
from scalesweep.run.slurm import (
    SlurmConfigError,
    account_problem,
    runtime_min,
    sbatch_options,
    slurm_request,
    srun_line,
    srun_template,
)

submit_string = pytest.importorskip("snakemake_executor_plugin_slurm.submit_string")
from snakemake_executor_plugin_slurm import ExecutorSettings  # noqa: E402
from snakemake_executor_plugin_slurm.utils import set_gres_string  # noqa: E402
from snakemake_executor_plugin_slurm.validation import validate_slurm_extra  # noqa: E402
from snakemake_executor_plugin_slurm_jobstep import (  # noqa: E402
    get_cpu_setting,
    get_gpu_setting,
    get_node_setting,
)

FRONTIER = [REPO / "config" / "config.yaml", REPO / "config" / "frontier.yaml"]
ODO = FRONTIER + [REPO / "config" / "odo.yaml"]
PREFIX = "sbatch --parsable --job-name UUID --output LOG --export=ALL --comment rule_run_point"


class _Resources(dict):
    """Like Snakemake's job.resources: .get() and attribute access, missing = absent."""

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


class _Job:
    def __init__(self, resources: dict, threads: int):
        self.resources = _Resources(resources)
        self.threads = threads


def profile(name: str) -> dict:
    return yaml.safe_load((REPO / "profiles" / name / "config.yaml").read_text())


def job_for(point: SweepPoint, config: dict, profile_name: str | None = None, attempt: int = 1) -> _Job:
    """The job as the plugin sees it: profile default-resources, then the rule's own."""
    resources: dict = {}
    if profile_name:
        resources.update(profile(profile_name)["default-resources"])
    resources.update(slurm_request(point, config["workloads"][point.workload], config, attempt).resources())
    return _Job(resources, threads=point.ranks * point.threads)


def sbatch_line(job: _Job, account: str = "abc123", partition: str = "batch",
                settings=None) -> str:
    """What the plugin's run_job() submits, minus --wrap, whitespace normalised
    (``settings``: the plugin's ExecutorSettings, the user's --slurm-* options)."""
    validate_slurm_extra(job)  # the plugin's own check of slurm_extra
    params = {"run_uuid": "UUID", "slurm_logfile": "LOG", "comment_str": "rule_run_point",
              "account": f" -A {shlex.quote(account)}", "partition": f" -p {shlex.quote(partition)}",
              "workdir": "/work"}
    # the executor's failed nodes start as --slurm-exclude-failed-nodes (its __post_init__)
    failed = {n.strip() for n in (settings.exclude_failed_nodes or "").split(",") if n.strip()} \
        if settings else set()
    call = submit_string.get_submit_command(job, params, settings=settings, failed_nodes=failed) \
        + set_gres_string(job)
    return " ".join(call.split())


def on_site(config: dict, **facts) -> dict:
    """A copy of ``config`` with these facts merged over its loaded site, section by
    section (e.g. ``slurm={"exclusive": False}``)."""
    out = copy.deepcopy(config)
    for section, values in facts.items():
        out["_site"][section] = {**out["_site"][section], **values}
    return out


def geometry(line: str) -> str:
    assert line.startswith(PREFIX), line
    return line[len(PREFIX):].strip()


@pytest.fixture(scope="module")
def frontier() -> dict:
    return load_config(FRONTIER)


def the_point(config: dict, **want) -> SweepPoint:
    found = [p for p in sweep_points(config) if all(getattr(p, k) == v for k, v in want.items())]
    assert found, f"no point {want} in the design"
    return found[0]


# --------------------------------------------------------------------- Frontier lines


def test_frontier_2_nodes_x_8_gpus_apptainer(frontier):
    point = the_point(frontier, workload="cnn_ddp", runtime="apptainer", nodes=2, repeat=1)
    assert (point.gpus, point.ranks, point.threads) == (8, 8, 7)
    job = job_for(point, frontier, "frontier")
    assert geometry(sbatch_line(job)) == (
        "-A abc123 -p batch -t 30 -C nvme --nodes=2 --ntasks-per-node=8 --cpus-per-task=7 "
        "--gpus-per-task=1 --gpu-bind=closest --core-spec=8 --exclusive -D /work"
    )
    # no srun -n1 around the job (the point's own srun starts the 16 ranks)
    assert job.resources["mpi"] == "srun"


def test_frontier_30_nodes_apptainer_hostmpi(frontier):
    point = the_point(frontier, workload="cnn_ddp", runtime="apptainer-hostmpi", nodes=30)
    assert geometry(sbatch_line(job_for(point, frontier, "frontier"))) == (
        "-A abc123 -p batch -t 30 -C nvme --nodes=30 --ntasks-per-node=8 --cpus-per-task=7 "
        "--gpus-per-task=1 --gpu-bind=closest --core-spec=8 --exclusive -D /work"
    )


def test_frontier_dataparallel_1_node_4_gpus(frontier):
    point = the_point(frontier, workload="cnn_dp", runtime="native", gpus=4)
    assert (point.nodes, point.ranks, point.threads) == (1, 1, 7)
    job = job_for(point, frontier, "frontier")
    # one process: the plugin's GPU path (--gpus=4, no --ntasks-per-gpu), no mpi
    assert geometry(sbatch_line(job)) == (
        "-A abc123 -p batch -t 30 -C nvme --nodes=1 --cpus-per-task=7 --core-spec=8 --exclusive -D /work --gpus=4"
    )
    assert "mpi" not in job.resources
    # ... so the jobstep wraps it in `srun -n1` with the same CPUs, GPUs and node
    assert get_cpu_setting(job, True) == "--cpus-per-task=7"
    assert get_gpu_setting(job) == "--gpus=4"
    assert get_node_setting(job) == "--nodes=1"


def test_frontier_llm_cpu_only_and_8_gpus(frontier):
    cpu = the_point(frontier, workload="llm_astrollama", runtime="apptainer", gpus=0)
    assert geometry(sbatch_line(job_for(cpu, frontier, "frontier"))) == (
        "-A abc123 -p batch -t 30 --nodes=1 --ntasks=1 --cpus-per-task=56 --core-spec=8 --exclusive -D /work"
    )
    gpu = the_point(frontier, workload="llm_codellama", runtime="native", gpus=8)
    assert geometry(sbatch_line(job_for(gpu, frontier, "frontier"))) == (
        "-A abc123 -p batch -t 60 --nodes=1 --cpus-per-task=56 --core-spec=8 --exclusive -D /work --gpus=8"
    )


def test_every_frontier_point_fits_a_node(frontier):
    for p in sweep_points(frontier):
        req = slurm_request(p, frontier["workloads"][p.workload], frontier)
        assert p.ranks * req.cpus_per_task <= frontier["_site"]["node"]["cores"] == 56
        per_task = re.search(r"--gpus-per-task=(\d+)", req.slurm_extra or "")
        gpus = p.ranks * int(per_task[1]) if per_task else (req.gpu or 0)
        assert gpus == p.gpus <= 8
        assert (req.mpi == "srun") == (p.world_size > 1)


def test_retries_double_the_time_limit_up_to_the_site_cap(frontier):
    point = the_point(frontier, workload="cnn_ddp", runtime="native", nodes=16)
    wl = frontier["workloads"]["cnn_ddp"]
    assert [slurm_request(point, wl, frontier, a).runtime for a in (1, 2, 3, 4)] == [30, 60, 120, 120]
    lines = [sbatch_line(job_for(point, frontier, "frontier", attempt=a)) for a in (1, 2, 3)]
    assert [re.search(r" -t (\d+) ", line)[1] for line in lines] == ["30", "60", "120"]
    # without a cap (a site's slurm.max_runtime_min: 0, the schema's default) it keeps doubling
    local = load_site("local")
    assert [runtime_min({"max_runtime_min": 7}, local, a) for a in (1, 2, 3, 4)] == [7, 14, 28, 56]
    assert runtime_min({}, local, 1) == 30  # the schema's default base
    # the profile gives the retries that use it
    assert profile("frontier")["retries"] >= 1


def test_rule_run_points_resources_are_the_points_request(frontier):
    """point_resources: rule run_point's resource functions (workflow/rules/run.smk), one
    per field of the point's SlurmRequest, the runtime doubling with the attempt; a
    request the config refuses raises the workflow's refusal, naming why."""
    from scalesweep.run.slurm import POINT_RESOURCES, point_resources

    point = the_point(frontier, workload="cnn_ddp", runtime="native", nodes=16)
    wildcards = {f: getattr(point, f) for f in ("workload", "runtime", "nodes", "gpus",
                                                "ranks", "threads", "repeat", "arm")}
    resources = point_resources(frontier)
    assert tuple(resources) == POINT_RESOURCES
    want = slurm_request(point, frontier["workloads"]["cnn_ddp"], frontier)
    for name in POINT_RESOURCES:
        got = resources[name](wildcards, 2) if name == "runtime" else resources[name](wildcards)
        assert got == (want.runtime * 2 if name == "runtime" else getattr(want, name)), name
    refused = on_site(frontier, slurm={"extra": ["--ntasks=4"]})
    with pytest.raises(RuntimeError, match="^scalesweep config: site frontier: slurm.extra"):
        point_resources(refused, RuntimeError)["nodes"](wildcards)


# --------------------------------------------------------------------- local cluster lines


def test_local_cluster_lines(tmp_path):
    config = tiny_config(site=write_site(tmp_path, extends="local-slurm", node={"mem_mb": 1000}))
    config["sweep"].update(nodes=[1, 2], ranks_per_node=[1, 2])
    config["workloads"]["cnn_ddp"]["max_runtime_min"] = 5
    lines = {}
    for p in sweep_points(config):
        lines[(p.nodes, p.ranks)] = geometry(
            sbatch_line(job_for(p, config, "local-slurm"), account="scalesweep", partition="debug"))
    base = "-A scalesweep -p debug -t 5 --mem 1000"
    assert lines == {
        (1, 1): f"{base} --nodes=1 --ntasks=1 --cpus-per-task=1 --exclusive -D /work",
        (1, 2): f"{base} --nodes=1 --ntasks-per-node=2 --cpus-per-task=1 --exclusive -D /work",
        (2, 1): f"{base} --nodes=2 --ntasks=2 --cpus-per-task=1 --exclusive -D /work",
        (2, 2): f"{base} --nodes=2 --ntasks-per-node=2 --cpus-per-task=1 --exclusive -D /work",
    }


def test_no_memory_request_leaves_mem_out():
    config = tiny_config()
    point = sweep_points(config)[0]
    job = job_for(point, config)
    assert job.resources["mem_mb"] == 0  # Snakemake refuses None for a size resource
    assert "--mem" not in sbatch_line(job)
    assert "constraint" not in job.resources and "-C" not in sbatch_line(job).split()


# --------------------------------------------------------------------- config checks


def test_site_slurm_extra_is_appended_and_forbidden_options_refused(frontier):
    point = the_point(frontier, workload="cnn_ddp", nodes=1, runtime="native")
    cfg = on_site(frontier, slurm={"extra": ["--exclusive", "--network=single_node_vni"]})
    line = sbatch_line(job_for(point, cfg, "frontier"))
    assert "--core-spec=8 --exclusive --network=single_node_vni -D /work" in line
    for bad in (["--ntasks=4"], ["-c", "7"], ["--gpus=8"], ["--time=10"], ["-C", "nvme"]):
        cfg = on_site(frontier, slurm={"extra": bad})
        with pytest.raises(SlurmConfigError, match="site frontier: slurm.extra"):
            slurm_request(point, frontier["workloads"]["cnn_ddp"], cfg)


def test_exclusive_nodes_can_be_switched_off(frontier):
    """A site's slurm.exclusive (default true) gives --exclusive; false leaves it out, and
    its own --exclusive[=...] in slurm.extra is not doubled."""
    point = the_point(frontier, workload="cnn_ddp", runtime="native", nodes=2, repeat=1)
    assert frontier["_site"]["slurm"]["exclusive"] is True
    assert load_site("local")["slurm"]["exclusive"] is True  # the schema's default
    assert "--exclusive" in sbatch_line(job_for(point, frontier, "frontier")).split()
    shared = on_site(frontier, slurm={"exclusive": False})
    assert geometry(sbatch_line(job_for(point, shared, "frontier"))) == (
        "-A abc123 -p batch -t 30 -C nvme --nodes=2 --ntasks-per-node=8 --cpus-per-task=7 "
        "--gpus-per-task=1 --gpu-bind=closest --core-spec=8 -D /work"
    )
    tiny = on_site(tiny_config(), slurm={"exclusive": False})
    assert slurm_request(sweep_points(tiny)[0], tiny["workloads"]["cnn_ddp"], tiny).slurm_extra is None
    site = on_site(frontier, slurm={"extra": ["--exclusive=user"]})
    line = sbatch_line(job_for(point, site, "frontier"))
    assert "--core-spec=8 --exclusive=user -D /work" in line and " --exclusive " not in line


def test_schema_refuses_unsafe_slurm_values(tmp_path):
    bad = write_site(tmp_path, slurm={"extra": ["--comment=a;rm -rf /"]},
                     storage={"node_local_constraint": "nvme $(x)"})
    with pytest.raises(SiteError) as err:
        load_site(bad)
    assert "site key slurm.extra.0" in str(err.value)
    assert "site key storage.node_local_constraint" in str(err.value)


def test_account_problem_names_the_variable():
    msg = account_problem("'$SBATCH_ACCOUNT'", {})
    assert msg and "$SBATCH_ACCOUNT" in msg and "export SBATCH_ACCOUNT=" in msg
    assert account_problem("'$SBATCH_ACCOUNT'", {"SBATCH_ACCOUNT": ""})
    assert account_problem("'$SBATCH_ACCOUNT'", {"SBATCH_ACCOUNT": "abc123"}) is None
    assert account_problem("scalesweep", {}) is None  # a literal account
    assert account_problem(None, {}) is None  # no Slurm profile
    assert account_problem("''", {})  # explicitly empty


def test_profiles():
    for site in ("frontier", "odo"):
        prof = profile(site)
        res = prof["default-resources"]
        assert prof["executor"] == "slurm"
        assert res["slurm_account"] == "'$SBATCH_ACCOUNT'" and res["slurm_partition"] == "batch"
        assert prof["keep-going"] is True and prof["retries"] >= 1
        assert prof["jobs"] <= 100  # Frontier: 100 queued jobs per user in all
    # the workflow profile applies everywhere: nothing site-specific in it
    default = profile("default")
    assert not {"executor", "default-resources", "jobs", "retries"} & set(default)


# --------------------------------------------------------------------- dry runs


def _dry_run(tmp_path: Path, monkeypatch, configs: list[Path], site: str, account: str | None):
    (tmp_path / "config").mkdir(exist_ok=True)
    shutil.copy(REPO / "config" / "config.yaml", tmp_path / "config" / "config.yaml")
    for name in ("containers", "envs"):  # image recipes are named relative to the workdir
        (tmp_path / name).symlink_to(REPO / name)
    if account is None:
        monkeypatch.delenv("SBATCH_ACCOUNT", raising=False)
    else:
        monkeypatch.setenv("SBATCH_ACCOUNT", account)
    return run_snakemake(tmp_path, "-n", "--profile", str(REPO / "profiles" / site),
                         "--configfile", *map(str, configs[1:]), check=account is not None, timeout=300)


def _planned_resources(stdout: str) -> dict[str, dict[str, str]]:
    """output path -> resources, for every run_point job of a dry run."""
    planned = {}
    for block in stdout.split("rule run_point:")[1:]:
        output = re.search(r"^\s+output: (\S+)$", block, re.M)[1]
        line = re.search(r"^\s+resources: (.*)$", block, re.M)[1]
        planned[output] = dict(item.partition("=")[::2] for item in line.split(", "))
    return planned


@pytest.mark.parametrize("site,configs", [("frontier", FRONTIER), ("odo", ODO)])
def test_dry_run_lists_every_point_with_its_resources(tmp_path, monkeypatch, site, configs):
    proc = _dry_run(tmp_path, monkeypatch, configs, site, account="abc123")
    config = load_config(configs)
    points = sweep_points(config)
    planned = _planned_resources(proc.stdout)
    # native is measured in the blocks of each container runtime (sweep.BLOCK_DIR)
    assert len(points) == 204 // 3 * (1 + 3)  # 3 repeats after 1 warm-up block
    assert set(planned) == {f"results/runs/{p.path}/metrics.json" for p in points}
    for p in points:
        got = planned[f"results/runs/{p.path}/metrics.json"]
        want = slurm_request(p, config["workloads"][p.workload], config).resources()
        assert {k: got.get(k) for k in want} == {k: str(v) for k, v in want.items()}, p
        absent = {"tasks", "tasks_per_node", "mpi", "gpu", "slurm_extra", "constraint"} - set(want)
        assert not absent & set(got), (p, got)  # None resources never reach the plugin
        assert got["slurm_account"] == "abc123" and got["slurm_partition"] == "batch"
    constrained = {p.workload for p in points if "constraint" in planned[f"results/runs/{p.path}/metrics.json"]}
    assert constrained == ({"cnn_ddp", "cnn_dp"} if site == "frontier" else set())


def test_dry_run_without_account_names_the_variable(tmp_path, monkeypatch):
    proc = _dry_run(tmp_path, monkeypatch, FRONTIER, "frontier", account=None)
    assert proc.returncode != 0
    assert "SBATCH_ACCOUNT" in proc.stdout + proc.stderr


def test_default_workflow_ignores_slurm_resources(tmp_path, monkeypatch, campaign):
    """Without a Slurm profile (no account in default-resources) nothing is checked and
    the Slurm resources are inert."""
    monkeypatch.delenv("SBATCH_ACCOUNT", raising=False)
    workdir = campaign(tiny_config())
    proc = run_snakemake(workdir, "-n", "--profile", str(REPO / "profiles" / "local"))
    assert "rule run_point" in proc.stdout


# --------------------------------------------------------------------- inside the job

# `scontrol show job -o` of a 2-node, 2-task job as the executor submits it (captured on
# the local cluster); inside such a job the jobstep left only SLURM_JOB_ID & co.
SCONTROL_JOB = (
    "JobId=61 JobName=31a48a5d UserId=root(0) GroupId=root(0) Account=scalesweep QOS=normal "
    "JobState=RUNNING Reason=None Restarts=0 TimeLimit=00:05:00 Partition=debug "
    "NodeList=n[1-2] BatchHost=n1 NumNodes=2 NumCPUs=2 NumTasks=2 CPUs/Task=1 "
    "ReqB:S:C:T=0:0:*:* TRES=cpu=2,mem=600M,node=2,billing=2,gres/gpu=4 Socks/Node=* "
    "NtasksPerN:B:S:C=0:0:*:* CoreSpec=* Features=nvme OverSubscribe=NO Comment=rule_run_point_wildcards_x y "
    "StdOut=/tmp/61.log Power="
)


@pytest.fixture
def fake_scontrol(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "scontrol"
    script.write_text(
        "#!/bin/sh\n"
        f"if [ \"$2\" = job ]; then echo {shlex.quote(SCONTROL_JOB)}; exit 0; fi\n"
        "if [ \"$2\" = hostnames ] && [ \"$3\" = 'n[1-2]' ]; then printf 'n1\\nn2\\n'; exit 0; fi\n"
        "exit 1\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    for var in list(os.environ):
        if var.startswith("SLURM_"):
            monkeypatch.delenv(var)
    monkeypatch.setenv("SLURM_JOB_ID", "61")  # all the jobstep keeps


def test_slurm_info_reads_the_allocation_from_scontrol(fake_scontrol):
    from scalesweep.measure.slurmjob import first_slurm_host, slurm_info

    info = slurm_info()
    assert info["source"] == "scontrol"
    assert (info["job_id"], info["job_nodelist"], info["hosts"]) == ("61", "n[1-2]", ["n1", "n2"])
    assert (info["job_num_nodes"], info["ntasks"], info["cpus_per_task"], info["gpus"]) == (2, 2, 1, 4)
    assert info["ntasks_per_node"] is None  # --ntasks only
    assert (info["job_partition"], info["job_account"], info["qos"]) == ("debug", "scalesweep", "normal")
    assert (info["time_limit"], info["features"], info["core_spec"]) == ("00:05:00", "nvme", None)
    assert first_slurm_host() == "n1"  # MASTER_ADDR without SLURM_JOB_NODELIST


def test_allocation_records_what_the_job_got(fake_scontrol, monkeypatch):
    from scalesweep.measure.slurmjob import allocation_info, slurm_info

    monkeypatch.setenv("ROCR_VISIBLE_DEVICES", "0,1")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("HIP_VISIBLE_DEVICES", raising=False)
    alloc = allocation_info(slurm_info(), load_site("local-slurm"))
    cpus = os.sched_getaffinity(0)
    assert alloc == {"site": "local-slurm", "hosts": ["n1", "n2"], "exclusive": True,
                     "shared_cores": True,
                     "cpus_bound": alloc["cpus_bound"], "ncpus_bound": len(cpus),
                     "gpus_visible": "ROCR_VISIBLE_DEVICES=0,1", "source": "scontrol"}
    assert alloc["cpus_bound"].startswith(str(min(cpus)))


def test_slurm_info_outside_slurm_is_none(monkeypatch):
    from scalesweep.measure.slurmjob import slurm_info

    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    assert slurm_info() is None


# --- a Slurm submission on a site without scheduler ------------------------------------

def test_slurm_profile_on_a_site_without_scheduler_is_refused_before_any_job(tmp_path):
    """run_point declares its Slurm geometry only for a site whose scheduler is slurm: a
    Slurm profile's default resources with site `local` are refused while the DAG is
    built (a dry run says so too), naming the site and the fix."""
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "config.yaml").write_text(yaml.safe_dump(
        {k: v for k, v in tiny_config().items() if k != "_site"}))
    proc = run_snakemake(tmp_path, "-n", "--default-resources", "slurm_account=acct",
                         "slurm_partition=batch", check=False, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    assert "with site 'local', whose scheduler is 'none'" in out and "Name a Slurm site" in out, out[-3000:]


def test_point_inside_a_slurm_job_of_a_site_without_scheduler_measures_nothing(tmp_path):
    """The harness's own guard (a bare `--executor slurm`, or a campaign started inside
    salloc): inside a Slurm job, a site without scheduler means the job was not given
    the point's layout, so the point refuses to measure, naming the site and the fix."""
    import json
    import subprocess
    import sys

    from scalesweep.plan.config import validated

    config = validated(tiny_config())
    config["_code_root"] = str(REPO)
    (tmp_path / "config.json").write_text(json.dumps(config))
    point = sweep_points(config)[0]
    metrics = tmp_path / "results" / "runs" / point.path / "metrics.json"
    env = dict(os.environ, SLURM_JOB_ID="4242")
    proc = subprocess.run([sys.executable, str(REPO / "workflow" / "scripts" / "run_point.py"),
                           "--config", str(tmp_path / "config.json"), "--metrics", str(metrics)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 78, proc.stderr
    assert "runs in Slurm job 4242, but site 'local' declares no scheduler" in proc.stderr
    assert "Nothing was measured" in proc.stderr
    assert not metrics.exists() and not (metrics.parent / "payload.json").exists()


# --- the dry run's comment: sbatch options and srun line per point ---------------------


def plugin_options(job: _Job, account: str = "abc123", partition: str = "batch",
                   settings=None) -> str:
    """The plugin's own rendering (sbatch_line) from -A on, without -D <workdir>."""
    tokens = geometry(sbatch_line(job, account, partition, settings)).split()
    at = tokens.index("-D")
    return " ".join(tokens[:at] + tokens[at + 2:])


@pytest.mark.parametrize("want", [
    dict(workload="cnn_ddp", runtime="apptainer", nodes=2, repeat=1),
    dict(workload="cnn_ddp", runtime="apptainer-hostmpi", nodes=30, repeat=1),
    dict(workload="cnn_dp", runtime="native", gpus=4, repeat=1),
    dict(workload="llm_astrollama", runtime="apptainer", gpus=0, repeat=1),
    dict(workload="llm_codellama", runtime="native", gpus=8, repeat=1),
])
def test_sbatch_options_are_the_plugins(frontier, want):
    job = job_for(the_point(frontier, **want), frontier, "frontier")
    job.resources.update(slurm_account="abc123", slurm_partition="batch")  # as evaluated
    assert sbatch_options(job.resources, threads=job.threads) == plugin_options(job)
    if want.get("nodes") == 2:
        assert sbatch_options(job.resources) == (
            "-A abc123 -p batch -t 30 -C nvme --nodes=2 --ntasks-per-node=8 --cpus-per-task=7 "
            "--gpus-per-task=1 --gpu-bind=closest --core-spec=8 --exclusive")


@pytest.mark.parametrize("extra", [
    {},  # no geometry at all: --ntasks=1, the job's threads
    {"mem_mb": 1000, "tasks": 3, "qos": "debug", "cluster": "c1", "constraint": ""},
    {"mem_mb": 1000, "mem_mb_per_cpu": 100, "gpu": 2, "gpu_model": "mi250x", "tasks": 4},
    {"gres": "gpu:2", "cpus_per_gpu": 3, "tasks_per_gpu": 2},
    {"gpu": 1, "cpus_per_task": -1},
    {"mpi": "srun", "tasks": 4, "nodes": 4, "runtime": 5, "slurm_extra": "--exclusive"},
])
def test_sbatch_options_follow_every_plugin_rule(extra):
    """Resources scalesweep never sets (gres, GPU model, per-CPU memory, QOS, clusters,
    cpus_per_gpu ...) rendered as the plugin renders them too."""
    job = _Job({"slurm_account": "abc123", "slurm_partition": "batch", **extra}, threads=5)
    assert sbatch_options(job.resources, threads=5) == plugin_options(job)
    # several accounts: the plugin submits with the first (get_account_arg); quoted values
    job = _Job({**job.resources, "slurm_account": "a1, a2", "slurm_partition": "p q"}, threads=5)
    assert sbatch_options(job.resources, threads=5) == plugin_options(job, "a1", "p q")


def test_resources_the_plugin_refuses_are_named_in_the_comment_not_raised():
    """sbatch_options is the plugin's own get_submit_command: what it refuses (an MPI job
    without tasks) is said in the dry run's comment, never an exception there (the
    submission itself is refused by the plugin)."""
    got = sbatch_options({"slurm_account": "abc123", "mpi": "srun", "nodes": 2}, threads=1)
    assert got.startswith("(the Slurm plugin refuses these resources: ")
    assert "'tasks_per_node' or 'tasks'" in got


def test_srun_line_is_the_points_launch(frontier, tmp_path, monkeypatch):
    """The srun line every repeat of a geometry shares, its directory filled in, is the
    line the harness's own launch functions give for the point (with srun), with the
    payload's arguments as the point's run builds them (run_point.py)."""
    from scalesweep.platform.launch import launch_command, launch_env, shell_line
    from scalesweep.plan.payloads import image_location, payload_invocation, point_inputs
    from scalesweep.run.pointlaunch import build_launch

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("USER", "someone")
    config = {**frontier, "_code_root": str(REPO)}
    point = the_point(config, workload="cnn_ddp", runtime="apptainer-hostmpi", nodes=2, repeat=2)
    wl = config["workloads"]["cnn_ddp"]
    out_dir = Path(f"results/runs/{point.path}")
    inv = payload_invocation(point, wl, config, point_inputs("cnn_ddp", point.runtime, config),
                             out_dir)
    assert inv.data_dir == "/mnt/bb/someone/study_images"  # datasets.*.node_local
    launch = build_launch(point, wl, config, payload_args=inv.args, payload=inv.script,
                          data_dir=inv.data_dir, out_dir=str(out_dir),
                          image=str(tmp_path / image_location(config, "cnn_ddp", point.runtime)),
                          launcher="srun")
    line = srun_line(point, wl, config, "results/runs")
    assert line == shell_line(launch_command(launch), launch_env(launch))
    assert f"{tmp_path}/results/runs/{point.path}:/mnt/out" in line
    assert line.endswith(f"/mnt/code/scripts/train_cnn.py --data /mnt/data --out "
                         f"/mnt/out/payload.json --parallel ddp --device cuda --precision "
                         f"{wl['precision']} --epochs "
                         f"{wl['epochs']} --batch-size {wl['batch_size']} --image-size 64 "
                         f"--threads 7 --seed 0 --test-fraction 0.2 --scaling "
                         f"{wl['scaling']} --data-path {wl['data_path']}"), line
    # an LLM point's line before its model is staged (the dry run's case): its arguments
    llm = the_point(config, workload="llm_astrollama", runtime="native", gpus=0, repeat=1)
    line = srun_line(llm, config["workloads"]["llm_astrollama"], config, "results/runs")
    assert f" --model-card {tmp_path}/resources/models/astrollama/model.json " in line
    assert f" --out {tmp_path}/results/runs/{llm.path}/payload.json " in line
    assert "@@" not in line and "\n" not in line
    # one template for every repeat
    other = the_point(config, workload="cnn_ddp", runtime="apptainer-hostmpi", nodes=2, repeat=3)
    template = srun_template(point, wl, config, "results/runs")
    assert srun_template(other, wl, config, "results/runs") == template


FRONTIER_2_NODES = ("-A abc123 -p batch -t 30 -C nvme --nodes=2 --ntasks-per-node=8 "
                    "--cpus-per-task=7 --gpus-per-task=1 --gpu-bind=closest --core-spec=8 --exclusive")
SRUN_2_NODES = ("srun --nodes=2 --ntasks=16 --ntasks-per-node=8 --cpus-per-task=7 "
                "--gpus-per-task=1 --gpu-bind=closest apptainer exec --rocm ")


@pytest.mark.parametrize("options", [
    {"qos": "debug"},
    {"qos": "debug", "requeue": True, "reservation": "my res"},
    {"no_requeue": True, "exclude_failed_nodes": "frontier00042"},
])
def test_sbatch_options_with_the_users_slurm_options(frontier, options):
    """The plugin's settings (--slurm-qos, --slurm-requeue ...) where the plugin puts them."""
    job = job_for(the_point(frontier, workload="cnn_ddp", runtime="apptainer", nodes=2,
                            repeat=1), frontier, "frontier")
    job.resources.update(slurm_account="abc123", slurm_partition="batch")
    settings = ExecutorSettings(**options)
    assert sbatch_options(job.resources, threads=job.threads, settings=settings) == \
        plugin_options(job, settings=settings)


def test_the_command_lines_slurm_options_as_snakemake_reads_them(tmp_path):
    """A relative --profile is read from the directory Snakemake started in (the first
    of the candidates where it reads); the plugin's settings are those of the command
    line and the profile; another executor has none."""
    argv = ["-n", "--profile", "profiles/frontier", "--slurm-qos", "debug"]
    args = snakemake_args(argv, [str(tmp_path), str(REPO)])
    assert args.dryrun and args.executor == "slurm"
    settings = plugin_settings(args)
    assert settings.qos == "debug" and not settings.requeue
    assert snakemake_args(argv, [str(tmp_path)]) is None  # no profiles/frontier there
    assert plugin_settings(snakemake_args(["-n"], [str(REPO)])) is None


def test_the_command_line_is_read_without_changing_directory(tmp_path):
    """Snakemake's own process reads its command line (common.smk, while the workflow is
    parsed) after --directory moved it: a relative --profile, or $SNAKEMAKE_PROFILE, is
    read from the directory Snakemake started in and passed on absolute, and the current
    directory never changes, not even for a moment (os.chdir's audit event: the local
    jobs' threads of the same process start processes and open relative paths)."""
    script = f"""
import json, os, sys
sys.path.insert(0, {str(REPO / "workflow")!r})
chdirs = []
sys.addaudithook(lambda event, args: chdirs.append(str(args[0])) if event == "os.chdir" else None)
from scalesweep.campaign.invocation import plugin_settings, snakemake_args
given = snakemake_args(["-n", "--profile", "profiles/frontier", "--slurm-qos", "debug"],
                       [{str(REPO)!r}])
os.environ["SNAKEMAKE_PROFILE"] = "profiles/frontier"
from_env = snakemake_args(["-n"], [None, {str(REPO)!r}])
print(json.dumps({{"chdirs": chdirs, "cwd": os.getcwd(), "profile": given.profile,
                  "executors": [given.executor, from_env.executor],
                  "qos": plugin_settings(given).qos}}))
"""
    env = {k: v for k, v in os.environ.items() if k != "SNAKEMAKE_PROFILE"}
    proc = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout.splitlines()[-1])
    assert seen["chdirs"] == [], seen
    assert seen["cwd"] == os.path.realpath(tmp_path)
    assert seen["profile"] == [str(REPO / "profiles" / "frontier")]
    assert seen["executors"] == ["slurm", "slurm"] and seen["qos"] == "debug"


def test_inside_a_slurm_job_the_workflow_prints_no_summary_note(campaign):
    """Every Slurm job parses the workflow again while the campaign is measured (no
    runs.csv yet): the partial-summary note (campaign.parse_time.summary_note) would stat every
    point's metrics.json in every job (the points squared, on Lustre) and land in every
    job's log. Outside a job it is said (1 of 2 points measured); inside one, not."""
    from conftest import SNAKEMAKE

    config = tiny_config()
    wd = campaign(config)
    done = wd / "results" / "runs" / sweep_points(config)[0].path / "metrics.json"
    done.parent.mkdir(parents=True)
    done.write_text("{}")
    env = {k: v for k, v in os.environ.items() if k != "SLURM_JOB_ID"}
    env.setdefault("USER", "root")

    def parsed(**extra) -> str:
        proc = subprocess.run([SNAKEMAKE, "-s", str(REPO / "Snakefile"), "--directory",
                               str(wd), "--list-rules"], cwd=wd, env={**env, **extra},
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
        return proc.stdout + proc.stderr

    assert "results/summary/runs.csv is not made yet: 1 of 2 points" in parsed()
    assert "is not made yet" not in parsed(SLURM_JOB_ID="4242")


def test_a_dry_run_summary_that_cannot_be_made_is_one_line_naming_why(frontier, capsys):
    """The summary ending a dry run is printed from an atexit callback, where an
    exception shows as "Exception ignored in atexit callback" and a traceback: one that
    cannot be made (here: a listed point of a workload the config lacks) is one line
    on stderr naming the error, and nothing on stdout; one that can, the summary."""
    from scalesweep.campaign.dry_run import print_dry_run_summary

    gone = SweepPoint("gone", "native", 1, 0, 1, 1, 1)
    print_dry_run_summary({gone.path: (gone, 1, 30)}, frontier, None)
    out, err = capsys.readouterr()
    assert out == ""
    assert err == ("scalesweep: no summary of this dry run (KeyError: 'gone'); the jobs "
                   "listed above are what it would submit\n")
    point = the_point(frontier, workload="cnn_ddp", runtime="apptainer", nodes=2, repeat=1)
    print_dry_run_summary({point.path: (point, 2, 30)}, frontier, ExecutorSettings(qos="debug"))
    out, err = capsys.readouterr()
    assert out.startswith("\nscalesweep, this dry run:\n  points: 1 run_point jobs listed "
                          "above (cnn_ddp)") and err == ""
    assert "each with the plugin's options of this command line: --qos=debug" in out


FRONTIER_MODULES = ("cpe/24.11 PrgEnv-gnu cray-python rocm/6.2.4 craype-accel-amd-gfx90a "
                    "cray-mpich-abi/8.1.31")


def test_the_point_rule_loads_the_sites_modules(frontier):
    """Issue #42: rule run_point's envmodules are the site's modules, then each runtime's
    own not already named (Frontier's apptainer names cray-mpich-abi and rocm: loaded
    once, at the site's versions); the docs' module line is the same list."""
    from scalesweep.platform.site import point_modules

    assert " ".join(point_modules(frontier["_site"])) == FRONTIER_MODULES
    assert point_modules({"modules": ["a/1"], "runtimes": {"x": {"modules": ["b", "a/2"]},
                                                           "y": {}}}) == ["a/1", "b"]
    assert point_modules({"runtimes": {}}) == []
    assert f"module load {FRONTIER_MODULES}\n" in (REPO / "docs" / "slurm.md").read_text()
    for name in ("frontier", "odo"):
        assert profile(name)["software-deployment-method"] == "env-modules"


@pytest.mark.parametrize("module", ["-rf", "a b", "x;touch pwned", "$(id)", ""])
def test_a_module_name_that_is_no_module_is_refused(tmp_path, module):
    """Snakemake writes the module names into the job's shell line unquoted: a name that
    could be an option, split or run something is refused by the site schema, named."""
    site = write_site(tmp_path, modules=[module])
    with pytest.raises(SiteError, match="site key modules.0"):
        load_site(site)
    site = write_site(tmp_path, "rt", runtimes={"charliecloud": {"bin": "ch-run", "modules": [module]}})
    with pytest.raises(SiteError, match="runtimes.charliecloud.modules.0"):
        load_site(site)


def test_dry_run_prints_each_points_sbatch_and_srun(tmp_path, monkeypatch):
    """`snakemake --profile profiles/frontier --slurm-qos debug -n` from the repository,
    the campaign elsewhere (--directory), the profile bringing its own sweep (its
    `configfile:`, no --configfile): every point's printed command ends in the sbatch
    options the plugin submits it with, --qos=debug included, as the plugin's own
    function renders them, and the srun line it runs in its job with the payload's
    arguments; a summary ends the dry run, once."""
    (tmp_path / "config").mkdir()
    for name in ("config.yaml", "frontier.yaml"):
        shutil.copy(REPO / "config" / name, tmp_path / "config" / name)
    for name in ("containers", "envs"):
        (tmp_path / name).symlink_to(REPO / name)
    env = {k: v for k, v in os.environ.items() if k != "SLURM_JOB_ID"}
    env.update(SBATCH_ACCOUNT="abc123", USER="someone", PWD=str(REPO))  # PWD: as a shell sets it
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "snakemake"), "--directory", str(tmp_path), "-n",
         "--profile", "profiles/frontier", "--slurm-qos", "debug",
         "--config", "only={workloads: [cnn_ddp], nodes: [2]}"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    config = load_config(FRONTIER)
    config["_code_root"] = str(REPO)
    wl = config["workloads"]["cnn_ddp"]
    commands = {}
    for line in proc.stdout.splitlines():
        m = re.search(r"--metrics (results/runs/\S+)/metrics\.json .*", line)
        if m and "run_point.py" in line:
            commands[m[1]] = line
    assert set(commands) == {f"results/runs/cnn_ddp/{arm}/n2-g8-r8-t7/rep{k}/{rt}"
                             for arm in ("apptainer", "apptainer-hostmpi")
                             for rt in ("native", arm) for k in (1, 2, 3, 4)}  # 1 warm-up
    debug = ExecutorSettings(qos="debug")
    for path, line in commands.items():
        command, _, comment = line.partition("  # ")
        assert command.endswith(f"--log {path}/run.log"), line
        sbatch, _, srun = comment.partition(" ; ")
        point = SweepPoint.from_path(path[len("results/runs/"):])
        job = job_for(point, config, "frontier")
        job.resources.update(slurm_account="abc123", slurm_partition="batch")  # as evaluated
        assert sbatch == f"sbatch {plugin_options(job, settings=debug)}", line
        assert sbatch == f"sbatch {FRONTIER_2_NODES.replace('--nodes=2', '--nodes=2 --qos=debug')}"
        assert f"{tmp_path}/{path}:/mnt/out" in srun or path.endswith("/native"), line
        assert "OMP_NUM_THREADS=7 srun --nodes=2 --ntasks=16 " in srun, line
        # the payload's arguments, as the point's run gives them
        args = f" --epochs {wl['epochs']} --batch-size {wl['batch_size']} --image-size 64 "
        assert f"scripts/train_cnn.py --data " in srun and args in srun, line
        assert " ..." not in srun, line
        # the site's modules, loaded by Snakemake in the job (the profile's --sdm env-modules)
        assert srun.startswith(f"module purge && MODULES_VERBOSITY=concise module load "
                               f"{FRONTIER_MODULES}; "), line
    summary = proc.stdout.split("\nscalesweep, this dry run:\n")
    assert len(summary) == 2 and "This was a dry-run" in summary[0]
    # each series: 1 warm-up block, then 5 same-block pairs at least, max_repeats at most
    # (config/config.yaml's, under frontier.yaml), 2 runs a block
    top = 2 * 2 * (1 + config["measurement"]["max_repeats"])
    assert "points: 16 run_point jobs listed above (cnn_ddp); the 2 series selected " \
           f"measure 24 to {top} runs in all" in summary[1]
    assert "Slurm jobs: 16 points asking 16.0 node-hours at attempt 1, each with the " \
           "plugin's options of this command line: --qos=debug" in summary[1]
    assert "images, on this host first: build: resources/images/pytorch.sif (apptainer, " \
           "containers/apptainer/pytorch-rocm.def)" in summary[1]
    assert ("why (isolation vs software stack, issue #43): not measured, no control image "
            "in this campaign" in summary[1] and "this campaign's images: apptainer)" in summary[1])
    assert "[--qos=Q" not in proc.stdout
    app = commands["results/runs/cnn_ddp/apptainer/n2-g8-r8-t7/rep1/apptainer"]
    assert f"# sbatch {FRONTIER_2_NODES.replace('--nodes=2', '--nodes=2 --qos=debug')} " in app
    assert SRUN_2_NODES in app
    # the image as run_point gives it: absolute, in the campaign directory
    assert "/mnt/bb/" in app and f" {tmp_path}/resources/images/pytorch.sif /opt/venv/bin/python " \
        "/mnt/code/scripts/train_cnn.py --data /mnt/data --out /mnt/out/payload.json " in app
    hostmpi = commands["results/runs/cnn_ddp/apptainer-hostmpi/n2-g8-r8-t7/rep1/apptainer-hostmpi"]
    env = hostmpi.partition(" ; ")[2].partition(" srun ")[0]
    for var in ("APPTAINERENV_LD_LIBRARY_PATH", "APPTAINERENV_LD_PRELOAD", "APPTAINER_CONTAINLIBS"):
        assert f"{var}=" in env, hostmpi
    assert SRUN_2_NODES in hostmpi
    native = commands["results/runs/cnn_ddp/apptainer/n2-g8-r8-t7/rep1/native"]
    assert "--gpu-bind=closest /" in native and "apptainer exec" not in native.partition(" ; ")[2]
    # the resources the plugin gets are unchanged (the existing checks read these lines)
    planned = _planned_resources(proc.stdout)
    assert len(planned) == 16  # 2 arms x (native, container) x (1 warm-up + 3 repeats)
