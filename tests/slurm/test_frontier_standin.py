"""The Frontier path, whole (issue #18), without Frontier: `snakemake -n --profile
<profiles/frontier with the local cluster's account and partition>` of a narrowed
config/frontier.yaml, every job's command line pinned, and the points' Slurm request run
once on the project's local Slurm cluster.

This machine has no Apptainer, SingularityCE, Ollama, ROCm or Frontier, so what scalesweep
hands them is what is checked: the exact command lines (image build with Frontier's build
args, the Ollama image pulled from an oras:// reference, the model staged through `ollama
pull`, every point's sbatch options and its srun/apptainer/singularity line with the
OLCF binds, the host-MPI environment, the LLM served by Ollama inside its image) are
golden (tests/data/frontier_standin_dry_run.txt). Each line is what the workflow runs:
the dry run prints the shell command Snakemake runs and, in its comment, the sbatch
options the Slurm plugin submits with (checked against the plugin's own rendering by
tests/test_slurm_profile.py) and the srun line run_point.py runs in the job (the harness's
own launch functions, tests/test_slurm_profile.py::test_srun_line_is_the_points_launch).

What the tools themselves do with these lines is theirs: the flags Apptainer takes are in
tests/test_frontier_golden.py's OLCF reference, image manifests in
tests/test_containers_build.py and tests/test_images_config.py, the AMD GPU inventory in
tests/test_memtimeline.py (tests/standins/gpu_smi.py). What Slurm does with them is
checked here for real: the 2-node point's sbatch options and srun line (-C nvme,
--gpus-per-task=1 --gpu-bind=closest, --exclusive, partition batch) as one tiny job.

The stand-in site extends sites/frontier.yaml with what differs here (2 cores, no -S, the
node-local path, host-MPI directories and files of this host's openmpi-bin, the payloads
on the CPU, a singularity entry); config/frontier.yaml is narrowed (2 nodes, one GPU per
node, one epoch, a few tokens, the Fashion-MNIST slice, the Ollama image pulled).

To re-make the golden file after an intended change: SCALESWEEP_GOLDEN_UPDATE=1 pytest
tests/test_frontier_standin.py, then read its diff.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from conftest import REPO, SNAKEMAKE
from slurm_fixtures import slurm_cluster, slurm_skip_reason  # noqa: F401  (session fixture)

GOLDEN = REPO / "tests" / "data" / "frontier_standin_dry_run.txt"
OPENMPI_LIB = Path("/usr/lib/x86_64-linux-gnu/openmpi/lib")  # Debian's openmpi-bin: the "host MPI"
HOST_LIBS = [Path("/usr/lib/x86_64-linux-gnu/libhwloc.so.15"), Path("/usr/lib/x86_64-linux-gnu/libevent_core-2.1.so.7")]
REGISTRY_NAME = "hf.co/UniverseTBD/astrollama.gguf"  # config/frontier.yaml's model
OLLAMA_REF = "oras://registry.example.org/scalesweep/ollama:0.9.0"
SPOOL = "/var/spool/slurmd"  # the OLCF binds' shape: slurmd's spool
ACCOUNT = "scalesweep"  # the local cluster's account (tools/slurm-cluster)


def standin_site(directory: Path) -> Path:
    """Frontier's facts with what differs on the local cluster (named, each one)."""
    host_mpi = {
        "lib_dirs": [str(OPENMPI_LIB)],
        "image_lib_dirs": ["/usr/lib/x86_64-linux-gnu"],
        "preload": str(OPENMPI_LIB / "libmpi.so.40"),
        "libs": [str(p) for p in HOST_LIBS],
    }
    entry = {
        "modules": [],  # no environment modules here
        # the OLCF binds' shape with this host's paths: slurmd's spool, the host MPI's tree
        "binds": [SPOOL, "/usr/lib/x86_64-linux-gnu/openmpi"],
        "host_mpi": host_mpi,
    }
    site = {
        "name": "frontier-standin",
        "extends": "frontier",
        "description": "Frontier's facts on the project's local Slurm cluster",
        "source": "tests/slurm/test_frontier_standin.py",
        "modules": [],  # no environment modules on the local cluster
        "shared_cores": True,  # the cluster's nodes share this host's 2 cores
        "node": {"cores": 2, "core_spec": None, "payload_device": "cpu"},
        "storage": {"node_local_path": str(directory / "bb")},
        "slurm": {"limits": {"max_nodes": 3}},
        "runtimes": {"apptainer": entry, "singularity": {**entry, "bin": "singularity"}},
    }
    path = directory / "frontier-standin.site.yaml"
    path.write_text(yaml.safe_dump(site))
    return path


def narrowed_sweep(directory: Path, site: Path) -> Path:
    """config/frontier.yaml, narrowed (each change named)."""
    cfg = {
        "site": str(site),
        "sweep": {"repeats": 1, "threads_per_rank": [1]},
        "datasets": {"study_images": {"source": "fashion-mnist",
                                      "path": "/usr/share/datasets/fashion-mnist",
                                      "classes": ["sandal", "sneaker"], "images_per_class": 8,
                                      "image_size": 64}},
        "workloads": {
            "cnn_ddp": {"epochs": 1, "batch_size": 16, "max_runtime_min": 5,
                        "sweep": {"runtimes": ["native", "apptainer", "apptainer-hostmpi", "singularity"],
                                  # 2 nodes, 1 of their 8 GPUs each
                                  "nodes": [2], "gpus_per_node": [1], "baseline": None}},
            "cnn_dp": {"enabled": False},  # DataParallel needs GPUs torch can use
            "llm_astrollama": {"max_tokens": 8, "warmup": 1, "num_requests": 2, "max_runtime_min": 5,
                               "sweep": {"runtimes": ["native", "apptainer"],
                                         "gpus_per_node": [1], "threads_per_rank": [1]}},
            "llm_codellama": {"enabled": False},
        },
        "models": {"astrollama": {"ollama_bin": "ollama"}},
        "containers": {"images": {"ollama": {"prebuilt": OLLAMA_REF}}, "startup_repeats": 1},
        "measurement": {"adaptive": False, "max_outside_cpu_pct": 100, "max_steal_pct": 100,
                        "max_stolen_cpu_pct": 100, "aa_calibration": False, "warmup_blocks": 0},
    }
    path = directory / "standin.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def frontier_test_profile(directory: Path, configs: list[Path]) -> Path:
    """profiles/frontier with the local cluster's account and partition."""
    prof = yaml.safe_load((REPO / "profiles" / "frontier" / "config.yaml").read_text())
    prof["configfile"] = [str(REPO / "config" / "frontier.yaml"), *map(str, configs)]
    prof["default-resources"].update(slurm_account=ACCOUNT, slurm_partition="batch")
    out = directory / "profile"
    out.mkdir()
    (out / "config.yaml").write_text(yaml.safe_dump(prof))
    return out


def dry_run(tmp_path: Path) -> str:
    campaign = tmp_path / "campaign"
    campaign.mkdir()
    (campaign / "config").symlink_to(REPO / "config")
    for name in ("containers", "envs"):
        (campaign / name).symlink_to(REPO / name)
    profile = frontier_test_profile(tmp_path, [narrowed_sweep(tmp_path, standin_site(tmp_path))])
    env = {k: v for k, v in os.environ.items() if k not in ("SLURM_JOB_ID", "SBATCH_ACCOUNT")}
    env["USER"] = "someone"
    proc = subprocess.run([SNAKEMAKE, "-s", str(REPO / "Snakefile"), "--directory", str(campaign),
                           "--profile", str(profile), "-n"], cwd=campaign, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


def startup_probes(out: str) -> list[str]:
    return sorted(re.findall(r"^rule container_startup:\n(?:\s+.*\n)*?\s+output: results/startup/(\S+)\.json", out, re.M))


def job_lines(out: str, tmp_path: Path) -> str:
    """Every job of the dry run that runs a shell command: `rule -> outputs` and the
    command (its sbatch and srun comment included), paths of this checkout and this test
    named, sorted. (The jobs that run a Python script, the start-up probes and the report,
    print no command: the probes are checked by name below, the report by the
    workflow's own tests.)"""
    python = Path(sys.executable)
    # the interpreter's directory first: a venv inside the checkout (CI's .venv) is {venv}
    subs = [(str(python.parent), "{venv}/bin"), (os.path.realpath(python.parent), "{venv}/bin"),
            (str(tmp_path), "{tmp}"), (str(REPO), "{repo}")]
    jobs = []
    for block in out.split("\n\n"):
        m = re.search(r"^(?:local)?rule (\w+):\n", block, re.M)
        if not m:
            continue
        outputs = re.search(r"^\s+output: (.*)$", block, re.M)
        shell = re.search(r"^Shell command: (.*)$", block, re.M)
        if not shell or shell[1] == "None":
            continue
        text = f"{m[1]} -> {outputs[1] if outputs else '-'}\n    {shell[1]}"
        for old, new in subs:
            text = text.replace(old, new)
        jobs.append(re.sub(r"config-[0-9a-f]{16}\.json", "config-{hash}.json", text))
    return "\n".join(sorted(jobs)) + "\n"


@pytest.fixture(scope="module")
def dry(tmp_path_factory):
    missing = [p for p in [OPENMPI_LIB, *HOST_LIBS] if not p.exists()]
    if missing:
        pytest.skip(f"host libraries of openmpi-bin missing: {missing}")
    tmp = tmp_path_factory.mktemp("frontier")
    out = dry_run(tmp)
    # every container runtime's start-up cost is probed (a Slurm job each)
    assert startup_probes(out) == ["apptainer", "apptainer-hostmpi", "singularity"], out[-3000:]
    return tmp, job_lines(out, tmp)


def test_frontier_dry_run_command_lines_are_pinned(dry):
    _, lines = dry
    if os.environ.get("SCALESWEEP_GOLDEN_UPDATE"):
        GOLDEN.write_text(lines)
    golden = GOLDEN.read_text()
    if lines != golden:
        import difflib

        diff = "".join(difflib.unified_diff(golden.splitlines(True), lines.splitlines(True),
                                            str(GOLDEN), "this dry run"))
        pytest.fail(f"the Frontier dry run's command lines changed:\n{diff}")


def test_frontier_dry_run_has_every_runtime_image_and_host_mpi(dry):
    """What the golden lines must hold, said once more in words: a diff that loses one of
    these is not an intended change."""
    _, lines = dry
    points = re.findall(r"^run_point -> results/runs/(\w+)/[\w-]+/\S+/rep1/([\w-]+)/metrics\.json", lines, re.M)
    assert sorted(set(points)) == sorted(
        [("cnn_ddp", rt) for rt in ("native", "apptainer", "apptainer-hostmpi", "singularity")]
        + [("llm_astrollama", rt) for rt in ("native", "apptainer")])
    build = next(line for line in lines.splitlines() if " build-image " in line)
    assert "--builder apptainer --format sif --fakeroot --recipe {repo}/containers/apptainer/pytorch-rocm.def" in build
    assert "--build-arg PYTORCH_BASE_IMAGE=docker.io/rocm/dev-ubuntu-24.04:6.2.4 " in build
    assert "--build-arg RUNTIME_BASE_IMAGE=docker.io/library/ubuntu:24.04 " in build
    pull = next(line for line in lines.splitlines() if " describe-image " in line)
    assert f"--builder apptainer --format sif --image {OLLAMA_REF} --pull --out resources/images/ollama.sif" in pull
    assert f"stage_model.py --source ollama --path= --name={REGISTRY_NAME} " in lines
    hostmpi = [line for line in lines.splitlines() if "apptainer-hostmpi/metrics.json" in line
               and "run_point.py" in line and line.endswith("--data-path memory")]
    (line,) = [line for line in hostmpi if "apptainer exec" in line]
    assert f"APPTAINERENV_LD_LIBRARY_PATH={OPENMPI_LIB}:" in line
    assert f"APPTAINERENV_LD_PRELOAD={OPENMPI_LIB / 'libmpi.so.40'} " in line
    assert f"# sbatch -A {ACCOUNT} -p batch -t 5 -C nvme --nodes=2 " in line
    llm = [line for line in lines.splitlines() if "infer_llm.py" in line and "apptainer exec" in line]
    assert llm and all("resources/images/ollama.sif" in line and "--engine ollama" in line for line in llm)


def point_request(lines: str, runtime: str) -> tuple[list[str], list[str]]:
    """The sbatch options and srun options (up to the program) of the 2-node point of
    ``runtime``, from its dry-run line."""
    (line,) = [line for line in lines.splitlines()
               if f"/rep1/{runtime}/metrics.json" in line and "train_cnn.py" in line]
    sbatch = shlex.split(line.split("# sbatch ", 1)[1].split(" ; ", 1)[0])
    srun = shlex.split(line.split(" srun ", 1)[1])
    srun = srun[:next(i for i, a in enumerate(srun) if not a.startswith("-"))]
    return sbatch, srun


@pytest.mark.slurm
@pytest.mark.integration
@pytest.mark.skipif(slurm_skip_reason() is not None, reason=str(slurm_skip_reason()))
def test_frontier_point_request_runs_on_the_cluster(slurm_cluster, dry):  # noqa: F811
    """The host-MPI point's own sbatch options and srun options, from the dry run, as one
    job on the local cluster (its nodes declare feature nvme and 8 GPUs): Slurm takes
    them, gives 2 nodes of the batch partition, and sacct records what Frontier is asked."""
    tmp, lines = dry
    sbatch, srun = point_request(lines, "apptainer-hostmpi")
    assert sbatch[:4] == ["-A", ACCOUNT, "-p", "batch"] and "-C" in sbatch
    out = tmp / "job.out"
    job = slurm_cluster.run("sbatch", "--parsable", f"--output={out}", *sbatch, "--wrap",
                            shlex.join(["srun", *srun, "hostname"])).stdout.strip().split(";")[0]
    assert slurm_cluster.wait_for_end(job, timeout=60) == "COMPLETED", out.read_text() if out.exists() else ""
    deadline = time.monotonic() + 30
    while not (row := slurm_cluster.sacct(job, "Constraints,ReqTRES,Partition,Account,NNodes")) or not all(row):
        assert time.monotonic() < deadline, f"sacct knows nothing of job {job}: {row}"
        time.sleep(0.5)
    assert "nvme" in row[0] and "gres/gpu=2" in row[1] and row[2:] == ["batch", ACCOUNT, "2"], row
    hosts = out.read_text().split()
    assert len(hosts) == 2 and len(set(hosts)) == 2 and set(hosts) <= set(slurm_cluster.nodes), hosts
