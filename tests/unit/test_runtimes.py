"""Runtimes as classes (scalesweep.platform.runtimes): every class's command lines, pinned."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from conftest import REPO
from scalesweep.plan import sweep
from scalesweep.plan.config import offered_runtimes
from scalesweep.platform import runtimes
from scalesweep.platform.launch import Launch, launch_command, launch_env
from scalesweep.platform.runtimes import (
    LaunchError,
    Runtime,
    RuntimeNotOffered,
    RuntimeSite,
    UnknownRuntime,
    runtime,
)
from scalesweep.platform.site import load_site

CODE, DATA, OUT = "/repo", "/data/ds", "/repo/results/runs/p"
STANDARD = [(CODE, "/mnt/code"), (DATA, "/mnt/data"), (OUT, "/mnt/out")]
STANDARD_BIND = f"{CODE}:/mnt/code,{DATA}:/mnt/data,{OUT}:/mnt/out"
LIBS = ("/opt/cray/pe/mpich/8.1.31/ofi/gnu/12.3/lib-abi-mpich", "/opt/cray/pe/mpich/8.1.31/gtl/lib")
PRELOAD = "/opt/cray/pe/mpich/8.1.31/gtl/lib/libmpi_gtl_hsa.so.0"
HOSTMPI = dict(host_mpi_lib_dirs=LIBS, host_mpi_preload=PRELOAD, host_mpi_binds=("/var/spool/slurmd",),
               host_mpi_env=(("MPICH_GPU_SUPPORT_ENABLED", "1"),))


def site(**facts) -> RuntimeSite:
    return RuntimeSite(image=facts.pop("image", "/img/x"), **facts)


def prefix(name: str, **facts) -> list[str]:
    rt = runtime(name)
    s = site(**facts)
    return rt.exec_prefix(s, rt.binds(s, STANDARD), "/mnt/code")


# --- the registry ----------------------------------------------------------------------


def test_registry_names_in_report_order():
    assert runtimes.names()[:5] == ("native", "native-aa", "charliecloud", "apptainer", "apptainer-hostmpi")
    assert set(runtimes.names()) == {"native", "native-aa", "charliecloud", "charliecloud-hostmpi", "apptainer",
                                     "apptainer-hostmpi", "singularity", "singularity-hostmpi", "podman"}
    assert runtimes.native_names() == ("native", "native-aa")
    # the sweep's runtimes are the tokens: each runtime (its default mode), then its modes
    assert sweep.RUNTIMES == runtimes.tokens() and sweep.NATIVE_RUNTIMES == runtimes.native_names()
    assert [t for t in sweep.RUNTIMES if "+" not in t] == list(runtimes.names())
    assert sweep.CONTAINER_RUNTIMES == runtimes.container_names()
    assert sweep.is_native("native-aa") and not sweep.is_native("podman") and not sweep.is_native("nope")
    assert runtimes.builders() == ("charliecloud", "apptainer", "singularity", "podman")


def test_the_registry_is_the_only_list_of_runtimes():
    """No schema repeats the registry: a runtime is one class (the config check refuses
    names the registry does not know, naming the known ones)."""
    config = yaml.safe_load((REPO / "workflow/schemas/config.schema.yaml").read_text())
    assert "enum" not in config["$defs"]["runtime"]
    image = config["properties"]["containers"]["properties"]["images"]["additionalProperties"]
    assert "enum" not in image["properties"]["builder"]
    site = yaml.safe_load((REPO / "workflow/schemas/site.schema.yaml").read_text())
    assert "enum" not in site["properties"]["runtimes"]["propertyNames"]
    from conftest import tiny_config
    from scalesweep.plan.config import ConfigError, validated

    config = tiny_config()
    config["sweep"]["runtimes"] = ["native", "docker"]
    with pytest.raises(ConfigError, match="sweep.runtimes: unknown runtime 'docker'; known: native"):
        validated(config)


def test_unknown_runtime_is_refused_naming_the_known_ones():
    with pytest.raises(UnknownRuntime, match="unknown runtime 'docker'; known: native, native-aa, charliecloud"):
        runtime("docker")
    launch = Launch("docker", "local", 1, 1, 1, 0, "scripts/p.py", (), CODE, DATA, OUT, site=site())
    with pytest.raises(LaunchError, match="podman"):
        launch_command(launch)


# --- native ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["native", "native-aa"])
def test_native_wraps_nothing(name):
    rt = runtime(name)
    assert rt.native and prefix(name) == [] and rt.host_env(site()) == {}
    assert rt.version_command() == [] and rt.provenance(site()) == {"runtime": name, "native": True}


# --- Charliecloud ----------------------------------------------------------------------


def test_charliecloud_exec():
    assert prefix("charliecloud", binds=("/usr/share/libdrm",), env=(("NCCL_SOCKET_IFNAME", "hsn0"),)) == [
        "ch-run", f"--bind={CODE}:/mnt/code", f"--bind={DATA}:/mnt/data", f"--bind={OUT}:/mnt/out",
        "--bind=/usr/share/libdrm:/usr/share/libdrm", "--set-env=NCCL_SOCKET_IFNAME=hsn0",
        "--cd=/mnt/code", "/img/x", "--",
    ]
    assert runtime("charliecloud").host_env(site(env=(("A", "1"),))) == {}
    assert runtime("charliecloud").gpu_flags(site(device="cuda")) == []  # ch-run has none


def test_charliecloud_hostmpi_binds_and_sets_the_library_path():
    cmd = prefix("charliecloud-hostmpi", bin="/opt/ch/bin/ch-run", **HOSTMPI)
    assert cmd[0] == "/opt/ch/bin/ch-run"
    binds = [a for a in cmd if a.startswith("--bind=")]
    assert binds[3:] == ["--bind=/var/spool/slurmd:/var/spool/slurmd", *(f"--bind={d}:{d}" for d in LIBS)]
    envs = [a for a in cmd if a.startswith("--set-env=")]
    assert envs == ["--set-env=MPICH_GPU_SUPPORT_ENABLED=1", f"--set-env=LD_LIBRARY_PATH={':'.join(LIBS)}",
                    f"--set-env=LD_PRELOAD={PRELOAD}"]
    assert cmd[-3:] == ["--cd=/mnt/code", "/img/x", "--"]


def test_charliecloud_build_commands():
    cc = runtime("charliecloud")
    assert cc.build_command("D", "t", "/st", "ctx", binds={"/wh": "/wheelhouse"}, build_args={"A": "1"}) == [
        "/usr/bin/python3", "ch-image", "-s", "/st", "--no-cache", "build", "--force",
        "-b", "/wh:/wheelhouse", "--build-arg", "A=1", "-t", "t", "-f", "D", "ctx",
    ]
    assert cc.import_command("b.tar", "localhost/base:x", "/st") == [
        "/usr/bin/python3", "ch-image", "-s", "/st", "--no-cache", "import", "b.tar", "localhost/base:x"]
    assert cc.convert_command("/img", "/img.sqfs") == ["ch-convert", "-i", "dir", "-o", "squash", "/img", "/img.sqfs"]
    assert cc.version_command() == ["ch-run", "--version"]


# --- Apptainer and SingularityCE ------------------------------------------------------


@pytest.mark.parametrize("name, exe", [("apptainer", "apptainer"), ("singularity", "singularity")])
def test_apptainer_and_singularity_exec(name, exe):
    assert prefix(name, gpu_flag="--rocm", binds=("/opt/cray", "/lus/a:/data")) == [
        exe, "exec", "--rocm", "--bind", f"{STANDARD_BIND},/opt/cray:/opt/cray,/lus/a:/data",
        "--pwd", "/mnt/code", "/img/x",
    ]


@pytest.mark.parametrize("name", ["apptainer", "singularity", "podman"])
@pytest.mark.parametrize("device, cuda, rocm", [("cuda", True, False), ("rocm", False, True), ("cpu", False, False)])
def test_gpu_flags_follow_the_device_unless_the_site_names_one(name, device, cuda, rocm):
    flags = runtime(name).gpu_flags(site(device=device))
    nvidia = {"podman": "--device=nvidia.com/gpu=all"}.get(name, "--nv")
    amd = {"podman": "--device=/dev/kfd"}.get(name, "--rocm")
    assert (nvidia in flags, amd in flags) == (cuda, rocm)
    assert runtime(name).gpu_flags(site(device=device, gpu_flag="--site-flag")) == ["--site-flag"]


def test_singularity_env_prefix_differs_from_apptainer():
    s = site(env=(("NCCL_SOCKET_IFNAME", "hsn0"),))
    assert runtime("apptainer").host_env(s) == {"APPTAINERENV_NCCL_SOCKET_IFNAME": "hsn0"}
    assert runtime("singularity").host_env(s) == {"SINGULARITYENV_NCCL_SOCKET_IFNAME": "hsn0"}


@pytest.mark.parametrize("name, var", [("apptainer-hostmpi", "APPTAINERENV_"),
                                       ("singularity-hostmpi", "SINGULARITYENV_")])
def test_hostmpi_puts_host_libraries_first_and_preloads(name, var):
    s = site(env=(("NCCL_SOCKET_IFNAME", "hsn0"),), **HOSTMPI)
    assert runtime(name).host_env(s) == {
        f"{var}NCCL_SOCKET_IFNAME": "hsn0",
        f"{var}MPICH_GPU_SUPPORT_ENABLED": "1",
        f"{var}LD_LIBRARY_PATH": ":".join(LIBS),
        f"{var}LD_PRELOAD": PRELOAD,
    }
    bind = prefix(name, **HOSTMPI)[3]
    assert bind == f"{STANDARD_BIND},/var/spool/slurmd:/var/spool/slurmd," + ",".join(f"{d}:{d}" for d in LIBS)
    # the plain runtime ignores the site's host_mpi part
    assert runtime(name.removesuffix("-hostmpi")).host_env(s) == {f"{var}NCCL_SOCKET_IFNAME": "hsn0"}


@pytest.mark.parametrize("name,var", [("apptainer-hostmpi", "APPTAINER_CONTAINLIBS"),
                                      ("singularity-hostmpi", "SINGULARITY_CONTAINLIBS")])
def test_hostmpi_libs_and_image_lib_dirs(name, var):
    """OLCF's GPU-aware MPI environment: the image's ROCm after the host directories on
    LD_LIBRARY_PATH, host system libraries through the runtime's CONTAINLIBS variable
    (its own name per runtime); Charliecloud injects them into a copy of the image
    instead (tests/unit/test_hostmpi.py), so its host environment stays empty."""
    s = site(**HOSTMPI, host_mpi_image_lib_dirs=("/opt/rocm/lib",), host_mpi_libs=("/usr/lib64/libcxi.so.1",))
    env = runtime(name).host_env(s)
    prefix_ = var.split("_")[0] + "ENV_"
    assert env[f"{prefix_}LD_LIBRARY_PATH"] == ":".join(LIBS + ("/opt/rocm/lib",))
    assert env[var] == "/usr/lib64/libcxi.so.1"
    assert var not in runtime(name.removesuffix("-hostmpi")).host_env(s)  # plain mode: no host libs
    assert runtime("charliecloud-hostmpi").host_env(s) == {}  # in the image copy instead


def test_hostmpi_without_library_directories_is_refused():
    with pytest.raises(LaunchError, match=r"runtimes\.singularity\.host_mpi\.lib_dirs"):
        runtime("singularity-hostmpi").host_env(site())


@pytest.mark.parametrize("name", ["apptainer", "singularity"])
def test_sif_build_and_inspect_commands(name):
    rt = runtime(name)
    assert rt.build_command("o.sif", "r.def", {"ROCM_VERSION": "6.2.4"}, fakeroot=True) == [
        name, "build", "--fakeroot", "--warn-unused-build-args", "--build-arg", "ROCM_VERSION=6.2.4",
        "o.sif", "r.def"]
    assert rt.exec_command("o.sif", ["true"]) == [name, "--silent", "exec", "--cleanenv", "o.sif", "true"]
    assert rt.version_command("/sw/bin/" + name) == ["/sw/bin/" + name, "--version"]
    assert rt.build_tools == (name, "cp")


# --- Podman ----------------------------------------------------------------------------


def test_podman_rootless_run():
    """A site that states no run options gets the rootless defaults; the storage driver
    is the mode's (overlay, the default)."""
    image = "/campaign/resources/images/default"
    cmd = prefix("podman", image=image, device="cuda", binds=("/lus/a:/data",), env=(("OMP_PROC_BIND", "close"),))
    ref = runtime("podman").storage_reference(image)
    assert cmd == [
        "podman", "--storage-driver=overlay", "run", "--rm", "--pull=never", "--env-host",
        "--security-opt=label=disable", "--userns=keep-id", "--network=host", "--ipc=host",
        "--device=nvidia.com/gpu=all",
        "--volume", f"{CODE}:/mnt/code", "--volume", f"{DATA}:/mnt/data", "--volume", f"{OUT}:/mnt/out",
        "--volume", "/lus/a:/data", "--env", "OMP_PROC_BIND=close", "--workdir", "/mnt/code", ref,
    ]
    assert runtime("podman").host_env(site(env=(("A", "1"),))) == {}
    assert prefix("podman", image="localhost/mine:1")[-1] == "localhost/mine:1"  # a reference as is


def test_podman_storage_reference_is_per_path():
    ref = runtime("podman").storage_reference
    a, b = ref("/c1/resources/images/default"), ref("/c2/resources/images/default")
    assert a.startswith("localhost/scalesweep/default-") and a != b
    assert ref("/x/My Image.v2").startswith("localhost/scalesweep/my-image-v2-")


def test_podman_build_commands():
    pm = runtime("podman")
    assert pm.build_command("D", "localhost/t:1", "ctx", binds={"/wh": "/wheelhouse"}, build_args={"A": "1"}) == [
        "podman", "build", "--pull=never", "--volume", "/wh:/wheelhouse", "--build-arg", "A=1",
        "-t", "localhost/t:1", "-f", "D", "ctx"]
    assert pm.import_command("b.tar", "localhost/base:x") == ["podman", "import", "b.tar", "localhost/base:x"]
    assert pm.save_command("localhost/t:1", "/o") == ["podman", "save", "--format", "oci-dir", "-o", "/o",
                                                      "localhost/t:1"]
    assert pm.load_command("/o") == ["podman", "pull", "--quiet", "dir:/o"]
    assert pm.tag_command("abc", "localhost/r") == ["podman", "tag", "abc", "localhost/r"]


# --- through the launcher --------------------------------------------------------------


def launch(rt: str, **facts) -> Launch:
    return Launch(rt, "mpirun", 1, 2, 1, 0, "scripts/train_cnn.py", ("--out", f"{OUT}/payload.json"),
                  CODE, DATA, OUT, host_python="/venv/bin/python", site=site(**facts))


@pytest.mark.parametrize("name", ["singularity", "podman", "charliecloud-hostmpi"])
def test_new_runtimes_through_the_launcher(name):
    facts = HOSTMPI if name.endswith("hostmpi") else {}
    cmd = launch_command(launch(name, **facts))
    assert cmd[0] == "mpirun"
    assert cmd[-4:] == ["/opt/venv/bin/python", "/mnt/code/scripts/train_cnn.py", "--out", "/mnt/out/payload.json"]
    env = launch_env(launch(name, env=(("A", "1"),)))
    assert ("SINGULARITYENV_A" in env) == (name == "singularity") and env["OMP_NUM_THREADS"] == "1"


@pytest.fixture
def made_up_runtime():
    @runtimes.register
    class Toybox(Runtime):
        """A runtime the launcher has never heard of: one class, nothing else."""

        name = "toybox"
        site_key = "toybox"
        default_bin = "toybox"

        def exec_prefix(self, site, binds, workdir):
            return [self.executable(site), "enter", *(f"-m{s}={d}" for s, d in binds),
                    f"--cwd={workdir}", site.image, "--"]

        def host_env(self, site):
            return {f"TOYBOX_{k}": v for k, v in self.container_env(site)}

    yield Toybox
    runtimes.unregister("toybox")


def test_a_made_up_runtime_needs_only_its_class(made_up_runtime):
    launch_ = launch("toybox", env=(("A", "1"),))
    assert launch_command(launch_) == [
        "mpirun", "-n", "2", "--bind-to", "none", "--mca", "btl_vader_single_copy_mechanism", "none",
        "-x", "MASTER_ADDR", "-x", "MASTER_PORT", "-x", "GLOO_SOCKET_IFNAME", "-x", "NCCL_SOCKET_IFNAME",
        "-x", "SCALESWEEP_GIT_COMMIT", "-x", "OMP_NUM_THREADS",
        "toybox", "enter", f"-m{CODE}=/mnt/code", f"-m{DATA}=/mnt/data", f"-m{OUT}=/mnt/out",
        "--cwd=/mnt/code", "/img/x", "--",
        "/opt/venv/bin/python", "/mnt/code/scripts/train_cnn.py", "--out", "/mnt/out/payload.json",
    ]
    assert launch_env(launch_) == {"OMP_NUM_THREADS": "1", "TOYBOX_A": "1"}
    assert "toybox" in runtimes.container_names()
    with pytest.raises(ValueError, match="already registered"):
        runtimes.register(type("Other", (made_up_runtime,), {}))


# --- sites ------------------------------------------------------------------------------


def test_site_facts_from_the_frontier_file():
    frontier = load_site("frontier")
    plain = runtime("apptainer").site_facts(frontier, "/img.sif")
    assert plain.bin == "apptainer" and plain.gpu_flag == "--rocm" and plain.device == "rocm"
    assert plain.binds == ("/usr/share/libdrm", "/var/spool/slurmd", "/opt/cray")
    assert ("NCCL_SOCKET_IFNAME", "hsn0") in plain.env
    assert plain.host_mpi_lib_dirs == () and plain.modules == ("cray-mpich-abi", "rocm/6.2.4")
    hybrid = runtime("apptainer-hostmpi").site_facts(frontier, "/img.sif")
    assert hybrid.host_mpi_lib_dirs[3].endswith("lib-abi-mpich") and hybrid.host_mpi_preload.endswith(".so.0")
    env = runtime("apptainer-hostmpi").host_env(hybrid)
    # OLCF's order: the GTL, the image's ROCm, Cray MPICH's ABI build, ...
    ld_path = env["APPTAINERENV_LD_LIBRARY_PATH"].split(":")
    assert ld_path[0].endswith("/gtl/lib") and ld_path[1:3] == ["/opt/rocm/lib", "/opt/rocm/lib64"]
    assert ld_path[3].endswith("lib-abi-mpich")
    binds = runtime("apptainer-hostmpi").binds(hybrid, [])
    assert ("/opt/rocm/lib", "/opt/rocm/lib") not in binds  # the image's own: never bound
    assert (ld_path[0], ld_path[0]) in binds
    assert "/usr/lib64/libcxi.so.1" in env["APPTAINER_CONTAINLIBS"].split(",")
    assert env["APPTAINERENV_MPICH_GPU_SUPPORT_ENABLED"] == "1"
    native = runtime("native").site_facts({"name": "bare", "node": {"device": "cpu"}})  # no runtimes: fine
    assert native == RuntimeSite() and runtime("native").exec_prefix(native, STANDARD, "/") == []


def test_runtime_not_offered_by_the_site_is_refused():
    local = load_site("local")
    assert runtime("charliecloud").site_facts(local, "/img").bin == "ch-run"
    with pytest.raises(RuntimeNotOffered, match="runtime 'apptainer' is not offered by site 'local'.*"
                                               "offers: native, charliecloud, podman"):
        runtime("apptainer").site_facts(local)
    with pytest.raises(RuntimeNotOffered, match="runtimes.singularity"):
        runtime("singularity").site_entry(local)


def campaign(site_name: str, runtimes_: list[str], **workload_sweep) -> dict:
    return {"_site": load_site(site_name), "sweep": {"runtimes": runtimes_},
            "workloads": {"cnn": {"payload": "cnn", "sweep": workload_sweep},
                          "off": {"payload": "cnn", "enabled": False, "sweep": {"runtimes": ["podman"]}}},
            "measurement": {"aa_calibration": True}}


def test_offered_runtimes_refuses_before_any_job():
    offered_runtimes(campaign("local", ["native", "charliecloud"]))  # native-aa added: fine
    offered_runtimes(campaign("frontier", ["native", "apptainer", "apptainer-hostmpi"]))
    with pytest.raises(RuntimeNotOffered, match="runtime 'singularity' is not offered by site 'frontier'"):
        offered_runtimes(campaign("frontier", ["native"], runtimes=["native", "singularity"]))
    with pytest.raises(RuntimeNotOffered, match="'charliecloud-hostmpi' is not offered by site 'odo'"):
        offered_runtimes(campaign("odo", ["charliecloud-hostmpi"]))
    with pytest.raises(UnknownRuntime, match="unknown runtime 'docker'"):
        offered_runtimes(campaign("local", ["docker"]))


# --- provenance -------------------------------------------------------------------------


def test_provenance_and_version():
    s = runtime("apptainer-hostmpi").site_facts(load_site("frontier"), "/img.sif")
    record = runtime("apptainer-hostmpi").provenance(s)
    assert record == {"runtime": "apptainer-hostmpi", "native": False, "bin": "apptainer",
                      "version_command": ["apptainer", "--version"],
                      "modules": ["cray-mpich-abi", "rocm/6.2.4"], "host_mpi": True, "gpu_flags": ["--rocm"],
                      "mode": "setuid", "mode_description": runtime("apptainer").modes["setuid"]}

    def run(argv, **kw):
        out = {"apptainer": ("apptainer version 1.3.4\n", ""), "ch-run": ("", "0.31\n")}[Path(argv[0]).name]
        return subprocess.CompletedProcess(argv, 0, *out)

    assert runtimes.runtime_version("apptainer", s, run=run) == "1.3.4"
    assert runtimes.runtime_version("charliecloud", site(), run=run) == "0.31"  # ch-run: stderr
    assert runtimes.runtime_version("native", site(), run=run) is None
    assert runtimes.runtime_version("podman", site(bin="/nonexistent/podman")) is None
