"""The Frontier path, whole (issue #18): `snakemake --profile <profiles/frontier with the
local cluster's account and partition>` from image build to report.html.

This machine has no Apptainer, SingularityCE, Ollama, ROCm or Frontier. What stands in:

* the project's local Slurm cluster (tools/slurm-cluster) plays Frontier's scheduler: two
  of its nodes, 8 GPUs each of a made-up gres type, feature `nvme`; the points ask for
  them exactly as on Frontier (--gpus-per-task=1 --gpu-bind=closest -C nvme --exclusive);
* a site file extending sites/frontier.yaml with what differs here (2 cores, no -S, the
  node-local path, host-MPI directories and files that exist on this host, the payloads
  on the CPU: node.payload_device cpu, and a singularity entry), every other fact
  Frontier's (--rocm, the OLCF binds' shape, MPICH_GPU_SUPPORT_ENABLED, the build args);
* behaving stand-ins first on PATH (tests/standins): `apptainer` and `singularity` that
  check their arguments as the real tools do, "build" and "pull" SIFs that record the
  recipe, and exec the payload on this host with the binds mounted for real; `ollama`
  serving the real Ollama HTTP API backed by llama.cpp and the synthetic model;
  `rocm-smi`/`amd-smi` answering a fake 8-GCD node;
* config/frontier.yaml, narrowed (2 nodes, one GPU per node, one epoch, a few tokens,
  the Fashion-MNIST slice instead of the Lustre image folder, the Ollama image pulled
  from an oras:// reference instead of built).

Then the report must have rows for native, apptainer, apptainer with host MPI and
singularity for the CNN, and native and apptainer for LLM inference (one container LLM
point: SingularityCE runs the same code path as Apptainer with its own binary, which the
CNN's singularity point exercises under Slurm; a second container LLM point would only add
a Slurm job); the
host-MPI run must show, in its own metrics, the host directories first on its
LD_LIBRARY_PATH and the preload in effect.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from conftest import REPO, SNAKEMAKE
from slurm_fixtures import slurm_cluster, slurm_skip_reason  # noqa: F401  (session fixture)

sys.path.insert(0, str(REPO / "tests"))
import standins  # noqa: E402

pytestmark = [
    pytest.mark.slurm,
    pytest.mark.integration,
    pytest.mark.skipif(slurm_skip_reason() is not None, reason=str(slurm_skip_reason())),
]

OPENMPI_LIB = Path("/usr/lib/x86_64-linux-gnu/openmpi/lib")  # Debian's openmpi-bin: the "host MPI"
HOST_LIBS = [Path("/usr/lib/x86_64-linux-gnu/libhwloc.so.15"), Path("/usr/lib/x86_64-linux-gnu/libevent_core-2.1.so.7")]
REGISTRY_NAME = "hf.co/UniverseTBD/astrollama.gguf"  # config/frontier.yaml's model, pulled from the stand-in registry
OLLAMA_REF = "oras://registry.example.org/scalesweep/ollama:0.9.0"


def standin_site(directory: Path, cluster_spool: Path) -> Path:
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
        "binds": [str(cluster_spool), "/usr/lib/x86_64-linux-gnu/openmpi"],
        "host_mpi": host_mpi,
    }
    site = {
        "name": "frontier-standin",
        "extends": "frontier",
        "description": "Frontier's facts on the project's local Slurm cluster, with stand-ins",
        "source": "tests/slurm/test_frontier_standin.py",
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
    """config/frontier.yaml, narrowed to what runs in minutes here (each change named)."""
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
                                  # 2 nodes (one point per runtime: each is ~30 s of
                                  # Slurm job here), 1 of their 8 GPUs each
                                  "nodes": [2], "gpus_per_node": [1], "baseline": None}},
            "cnn_dp": {"enabled": False},  # DataParallel needs GPUs torch can use
            "llm_astrollama": {"max_tokens": 8, "warmup": 1, "num_requests": 2, "max_runtime_min": 5,
                               "sweep": {"runtimes": ["native", "apptainer"],
                                         "gpus_per_node": [1], "threads_per_rank": [1]}},
            "llm_codellama": {"enabled": False},
        },
        "models": {"astrollama": {"ollama_bin": "ollama"}},  # the stand-in, first on PATH
        "containers": {"images": {"ollama": {"prebuilt": OLLAMA_REF}}, "startup_repeats": 1},
        # the cluster's nodes share this host: nothing is left out as disturbed here (the
        # runs are labelled shared_cores), the report still shows every row
        "measurement": {"adaptive": False, "max_outside_cpu_pct": 100, "max_steal_pct": 100,
                        "aa_calibration": False},
    }
    path = directory / "standin.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def frontier_test_profile(directory: Path, configs: list[Path], cluster) -> Path:
    """profiles/frontier with the local cluster's account and partition, status checks
    as profiles/local-slurm's (the cluster answers at once), one job at a time (its nodes share this
    host's cores: profiles/local-slurm's `measure`), no retries (a failure shows at once)."""
    prof = yaml.safe_load((REPO / "profiles" / "frontier" / "config.yaml").read_text())
    prof["configfile"] = [str(REPO / "config" / "frontier.yaml"), *map(str, configs)]
    prof["default-resources"].update(slurm_account=cluster.account, slurm_partition="batch",
                                     measure=1)
    prof.update({"slurm-init-seconds-before-status-checks": 4, "seconds-between-status-checks": 1,
                 "resources": ["measure=1"], "retries": 0, "latency-wait": 5,
                 "max-jobs-per-timespan": "100/1s"})
    out = directory / "profile"
    out.mkdir()
    (out / "config.yaml").write_text(yaml.safe_dump(prof))
    return out


def make_registry(directory: Path) -> Path:
    """The stand-in Ollama registry: the synthetic GGUF under the Frontier model's name."""
    sys.path.insert(0, str(REPO / "scripts"))
    import make_synthetic_llm as maker

    reg = directory / "registry"
    reg.mkdir()
    maker.build(reg / "astrollama.gguf", maker.SyntheticConfig())
    (reg / "registry.json").write_text(json.dumps({REGISTRY_NAME: "astrollama.gguf"}))
    return reg


def test_frontier_dag_whole_through_slurm_with_standins(slurm_cluster, tmp_path):  # noqa: F811
    missing = [p for p in [OPENMPI_LIB, *HOST_LIBS] if not p.exists()]
    if missing:
        pytest.skip(f"host libraries of openmpi-bin missing: {missing}")
    campaign = tmp_path / "campaign"
    campaign.mkdir()
    (campaign / "config").symlink_to(REPO / "config")
    for name in ("containers", "envs"):
        (campaign / name).symlink_to(REPO / name)
    bindir, log = tmp_path / "bin", tmp_path / "standins.jsonl"
    env_add = standins.install(bindir, log)
    site = standin_site(tmp_path, Path(slurm_cluster.state_dir))
    profile = frontier_test_profile(tmp_path, [narrowed_sweep(tmp_path, site)], slurm_cluster)
    env = dict(os.environ, **env_add, SLURM_CONF=slurm_cluster.env["SLURM_CONF"],
               SCALESWEEP_STANDIN_OLLAMA_REGISTRY=str(make_registry(tmp_path)),
               PATH=f"{bindir}:{REPO / '.venv' / 'bin'}:{slurm_cluster.env['PATH']}")
    env.setdefault("USER", "root")
    env.pop("SBATCH_ACCOUNT", None)

    def snakemake(*args, timeout=900):
        t0 = time.monotonic()
        proc = subprocess.run([SNAKEMAKE, "-s", str(REPO / "Snakefile"), "--directory", str(campaign),
                               "--profile", str(profile), *args], cwd=campaign, env=env,
                              capture_output=True, text=True, timeout=timeout)
        print(f"snakemake {' '.join(args)}: exit {proc.returncode} in {time.monotonic() - t0:.0f} s")
        return proc

    proc = snakemake()
    logs = "\n".join(f"--- {p}\n{p.read_text()[-2000:]}" for p in sorted((campaign / "logs").rglob("*.log"))
                     if "Error" in p.read_text() or "error" in p.read_text()) if (campaign / "logs").exists() else ""
    assert proc.returncode == 0, f"{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}\n{logs[-6000:]}"
    report = snakemake("--report", str(campaign / "report.html"), timeout=600)
    assert report.returncode == 0, report.stderr[-4000:]
    assert (campaign / "report.html").stat().st_size > 100_000

    runs = pd.read_csv(campaign / "results" / "summary" / "runs.csv")
    got = {wl: set(runs.loc[runs.workload == wl, "runtime"]) for wl in ("cnn_ddp", "llm_astrollama")}
    assert got == {"cnn_ddp": {"native", "apptainer", "apptainer-hostmpi", "singularity"},
                   "llm_astrollama": {"native", "apptainer"}}, got
    assert runs["shared_cores"].all()  # labelled as such everywhere it shows

    # the images: the PyTorch SIF built from its recipe with Frontier's build args, the
    # Ollama SIF pulled; both manifests name builder, recipe or reference, base and digest
    images = campaign / "resources" / "images"
    built = json.loads((images / "pytorch.manifest.json").read_text())
    assert built["source"] == "built" and built["builder"]["name"] == "apptainer"
    # multi-stage: the toolchain in the ROCm development image, the image on plain Ubuntu
    assert built["base"]["from"] == "docker.io/library/ubuntu:24.04"
    assert built["base"]["stages"][0] == {"stage": "build", "from": "docker.io/rocm/dev-ubuntu-24.04:6.2.4"}
    assert built["recipe"]["path"].endswith("pytorch-rocm.def") and built["content_digest"].startswith("sha256:")
    pulled = json.loads((images / "ollama.manifest.json").read_text())
    assert pulled["source"] == "pulled" and pulled["pulled_from"] == OLLAMA_REF
    assert pulled["content_digest"] == "sha256:" + pulled["file_sha256"] and pulled["size_bytes"] > 0

    # every run records its image; the host-MPI run shows host MPI in effect from inside
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    execs = [c for c in calls if c.get("subcommand") == "exec" or "exec" in c.get("argv", [])[:3]]
    assert {c["tool"] for c in execs} >= {"apptainer", "singularity"}
    metrics = {str(p.parent): json.loads(p.read_text())
               for p in (campaign / "results" / "runs").rglob("metrics.json")}
    hostmpi = [m for m in metrics.values() if m["point"]["runtime"] == "apptainer-hostmpi"]
    assert hostmpi
    for m in hostmpi:
        inside = m["container_env"]
        assert inside["LD_LIBRARY_PATH"].split(":")[0] == str(OPENMPI_LIB), inside
        assert inside["LD_PRELOAD"] == str(OPENMPI_LIB / "libmpi.so.40")
        assert m["image"]["name"] == "pytorch" and m["image"]["content_digest"] == built["content_digest"]
    # Slurm was asked what Frontier is asked: the node-local NVMe, GPUs per task, batch
    job = hostmpi[0]["slurm"]["job_id"]
    deadline = time.monotonic() + 30
    while not (row := slurm_cluster.sacct(job, "Constraints,ReqTRES,Partition,Account,NNodes")) or not row[1]:
        assert time.monotonic() < deadline, f"sacct knows nothing of job {job}"
        time.sleep(1)
    assert "nvme" in row[0] and "gres/gpu=2" in row[1] and row[2:] == ["batch", "scalesweep", "2"], row
    assert hostmpi[0]["gpu_inventory"]["count"] == 8  # the node's GPUs, as amd-smi lists them
    llm = [m for m in metrics.values() if m["point"]["workload"] == "llm_astrollama"
           and m["point"]["runtime"] != "native"]
    assert llm and all(m["image"]["name"] == "ollama" for m in llm)
    assert shutil.which("apptainer", path=env["PATH"]) == str(bindir / "apptainer")
