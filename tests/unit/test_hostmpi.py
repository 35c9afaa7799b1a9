"""Host MPI vs container MPI: which library a run's ranks loaded, the Charliecloud copy of
an image with the host's Open MPI injected (ch-fromhost), and the refusals around them.
The real runs (native, Charliecloud with its own MPI, Charliecloud with the host's) are
in tests/test_mpi_workflow.py."""

from __future__ import annotations

import pytest

from conftest import tiny_config, write_site
from scalesweep.plan.config import check_config
from scalesweep.plan.imageset import ImageConfigError, used_images, workload_image
from scalesweep.plan.sweep import sweep_points
from scalesweep.platform import runtimes
from scalesweep.platform.hostmpi import CONTAINLIBS_DIR, fromhost_command, host_mpi_dirs, mpi_check
from scalesweep.platform.launch import Launch, launch_command
from scalesweep.platform.runtimes import INJECT_DIR
from scalesweep.platform.runtimes import RuntimeSite

HOST_LIBS = ("/usr/lib/x86_64-linux-gnu/libmpi.so.40", "/usr/lib/x86_64-linux-gnu/libopen-pal.so.40")
IMAGE_LIBMPI = "/usr/lib/x86_64-linux-gnu/libmpi.so.40.30.4"


def payload(*libraries) -> dict:
    return {"per_rank": [{"rank": r, "mpi": {"library": lib, "library_version": "Open MPI v4.1.4",
                                             "vendor": "Open MPI 4.1.4"}}
                         for r, lib in enumerate(libraries)]}


def test_fromhost_command_names_the_destination_and_skips_ldconfig():
    assert fromhost_command("/img", HOST_LIBS) == [
        "ch-fromhost", "--no-ldconfig", "-v", "-d", INJECT_DIR,
        "-p", HOST_LIBS[0], "-p", HOST_LIBS[1], "/img"]


def test_charliecloud_hostmpi_puts_the_injected_libraries_first():
    site = RuntimeSite(image="/c/resources/images/default+hostmpi", host_mpi_libs=HOST_LIBS)
    launch = Launch(runtime="charliecloud-hostmpi", launcher="mpirun", nodes=1, ranks_per_node=2,
                    threads=1, gpus_per_node=0, payload="scripts/train_cnn.py", args=(),
                    code_root="/repo", data_dir="/d", out_dir="/o", site=site)
    argv = launch_command(launch)
    assert f"--set-env=LD_LIBRARY_PATH={INJECT_DIR}" in argv
    assert argv[argv.index("--") - 1] == "/c/resources/images/default+hostmpi"
    # no host library directory bound: they are in the image copy
    assert not [a for a in argv if a.startswith("--bind=/usr/lib")]
    # without libs nor lib_dirs there is no host MPI to use
    with pytest.raises(runtimes.LaunchError, match=r"host_mpi\.lib_dirs.*host_mpi\.libs"):
        runtimes.runtime("charliecloud-hostmpi").container_env(RuntimeSite(image="/x"))


@pytest.mark.parametrize("name,facts,expect", [
    ("charliecloud-hostmpi", {"host_mpi_libs": HOST_LIBS}, [INJECT_DIR]),
    ("apptainer-hostmpi", {"host_mpi_lib_dirs": ("/opt/cray/lib", "/opt/rocm/lib"),
                           "host_mpi_image_lib_dirs": ("/opt/rocm/lib",),
                           "host_mpi_libs": ("/usr/lib64/libcxi.so.1",)},
     ["/opt/cray/lib", CONTAINLIBS_DIR]),
    ("charliecloud", {"host_mpi_libs": HOST_LIBS}, []),
])
def test_where_host_mpi_is_inside_the_container(name, facts, expect):
    assert host_mpi_dirs(name, RuntimeSite(**facts)) == expect


def test_a_host_mpi_run_that_loaded_the_containers_mpi_is_named():
    site = RuntimeSite(host_mpi_libs=HOST_LIBS)
    good, problem = mpi_check(payload(f"{INJECT_DIR}/libmpi.so.40", f"{INJECT_DIR}/libmpi.so.40"),
                              "charliecloud-hostmpi", site)
    assert problem == "" and good["origin"] == "host" and good["host_mpi_requested"]
    mixed, problem = mpi_check(payload(f"{INJECT_DIR}/libmpi.so.40", IMAGE_LIBMPI),
                               "charliecloud-hostmpi", site)
    assert mixed["origin"] == "mixed"
    assert "rank 1 loaded " + IMAGE_LIBMPI in problem and INJECT_DIR in problem
    _, problem = mpi_check(payload(None), "charliecloud-hostmpi", site)
    assert "rank 0 loaded no MPI library" in problem


def test_container_and_native_mpi_are_labelled_without_a_problem():
    summary, problem = mpi_check(payload(IMAGE_LIBMPI), "charliecloud", RuntimeSite())
    assert (summary["origin"], problem) == ("container", "")
    summary, problem = mpi_check(payload(IMAGE_LIBMPI, IMAGE_LIBMPI), "native", RuntimeSite())
    assert (summary["origin"], summary["library"], problem) == ("host", IMAGE_LIBMPI, "")
    assert mpi_check({"per_rank": [{"rank": 0}]}, "native", RuntimeSite()) == (None, "")


def mpi_config(checked: bool = True) -> dict:
    config = tiny_config()
    config["sweep"]["runtimes"] = ["native", "charliecloud", "charliecloud-hostmpi"]
    config["workloads"]["cnn_ddp"]["parallel"] = "mpi"
    if checked:
        check_config(config)  # the schema's defaults filled in
    return config


def test_hostmpi_points_run_a_copy_of_the_image_and_the_image_itself_is_kept():
    config = mpi_config()  # sites/local.yaml lists the host's Open MPI libraries
    plain = workload_image(config, "cnn_ddp", "charliecloud")
    copy = workload_image(config, "cnn_ddp", "charliecloud-hostmpi")
    assert (plain.name, plain.how) == ("default", "build")
    assert (copy.name, copy.how, copy.base) == ("default+hostmpi", "inject", "default")
    assert copy.path == "resources/images/default+hostmpi"
    assert copy.manifest == "resources/images/default+hostmpi.manifest.json"
    assert copy.inject_libs[0] == "/usr/lib/x86_64-linux-gnu/libmpi.so.40"
    assert list(used_images(config, sweep_points(config))) == ["default", "default+hostmpi"]
    # a hostmpi-only campaign still builds the image the copy is made from
    config["sweep"]["runtimes"] = ["charliecloud-hostmpi"]
    assert set(used_images(config, sweep_points(config))) == {"default", "default+hostmpi"}


def test_injecting_into_a_squashfs_image_is_refused_naming_the_image(tmp_path):
    config = mpi_config(checked=False)
    config["containers"] = {"images": {"default": {"format": "squashfs"}}}
    with pytest.raises(Exception, match=r"containers\.images\.default: runtime charliecloud-hostmpi "
                                        r"injects .* squashfs"):
        check_config(config)


def test_a_site_without_host_mpi_libraries_is_refused_before_any_job(tmp_path):
    site = write_site(tmp_path, "nompi", extends=None, scheduler="none",
                      node={"cores": 2, "gpus": 0, "device": "cpu"},
                      launch={"launcher": "mpirun"},
                      runtimes={"charliecloud": {"bin": "ch-run"}})
    config = tiny_config(site=site)
    config["sweep"]["runtimes"] = ["charliecloud-hostmpi"]
    config["workloads"]["cnn_ddp"]["parallel"] = "mpi"
    with pytest.raises(Exception, match=r"runtimes\.charliecloud\.host_mpi"):
        check_config(config)


def test_mpi_mode_with_torchrun_is_refused(tmp_path):
    site = write_site(tmp_path, "tr", launch={"launcher": "torchrun"})
    config = tiny_config(site=site)
    config["workloads"]["cnn_ddp"]["parallel"] = "mpi"
    with pytest.raises(Exception, match=r"parallel 'mpi' .* launch\.launcher 'torchrun'"):
        sweep_points(config)


FAKE_CH_RUN = """#!{python}
# ch-run stand-in: no container; the bound directories' paths mapped back to the host's
import os, sys
args, binds = sys.argv[1:], []
while args[0] != "--":
    if args[0].startswith("--bind="):
        src, dst = args[0][len("--bind="):].split(":")
        binds.append((dst, src))
    args.pop(0)
def host(a):
    for dst, src in binds:
        if a == dst or a.startswith(dst + "/"):
            return src + a[len(dst):]
    return a
cmd = [host(a) for a in args[1:]]
os.execv(cmd[0], cmd)
"""


MPI_PAYLOAD = """
import json, sys
out = sys.argv[sys.argv.index("--out") + 1]
lib = sys.argv[sys.argv.index("--lib") + 1]
json.dump({"workload": "cnn", "payload_wall_s": 0.1, "epoch_s": [1.0], "train_s": 1.0,
           "final_loss": 0.1, "final_accuracy": 1.0, "parallel": "mpi",
           "per_rank": [{"rank": 0, "mpi": {"library": lib, "library_version": "Open MPI v4.1.4"}}]},
          open(out, "w"))
"""


@pytest.mark.parametrize("loaded,fails", [(f"{INJECT_DIR}/libmpi.so.40", False),
                                           (IMAGE_LIBMPI, True)])
def test_a_host_mpi_point_whose_ranks_loaded_the_images_mpi_is_a_failed_run(
        tmp_path, monkeypatch, loaded, fails):
    """Through the harness: the same host-MPI point succeeds when its rank loaded the
    injected library and fails, with the reason in failure.json and no metrics.json,
    when it loaded the image's own (ch-run replaced by a stand-in that runs the command)."""
    import json
    import os
    import sys

    from scalesweep.plan.config import validated
    from scalesweep.run.harness import execute
    from scalesweep.platform.site import load_site
    from scalesweep.plan.sweep import SweepPoint, run_order

    for var in [v for v in os.environ if v.startswith(("SLURM_", "OMPI_", "PMI"))]:
        monkeypatch.delenv(var)
    config = validated(mpi_config(checked=False))
    point = SweepPoint("cnn_ddp", "charliecloud-hostmpi", 1, 0, 1, 1, 1)
    code = tmp_path / "code"
    (code / "scripts").mkdir(parents=True)
    (code / "scripts" / "fake.py").write_text(MPI_PAYLOAD)
    ch_run = tmp_path / "ch-run"
    ch_run.write_text(FAKE_CH_RUN.format(python=sys.executable))
    ch_run.chmod(0o755)
    out = tmp_path / "runs" / point.path
    site = RuntimeSite(image=str(tmp_path), bin=str(ch_run), python=sys.executable,
                       host_mpi_libs=HOST_LIBS)
    launch = Launch(runtime="charliecloud-hostmpi", launcher="local", nodes=1, ranks_per_node=1,
                    threads=1, gpus_per_node=0, payload="scripts/fake.py",
                    args=("--out", str(out / "payload.json"), "--lib", loaded),
                    code_root=str(code), data_dir=str(tmp_path), out_dir=str(out), site=site)
    rc = execute(point, launch, str(out / "metrics.json"), str(out / "run.log"),
                 measurement=config["measurement"], site=load_site("local"),
                 order=run_order(point, config))
    if not fails:
        assert rc == 0, (out / "run.log").read_text()
        m = json.loads((out / "metrics.json").read_text())
        assert m["mpi"]["origin"] == "host" and m["mpi"]["host_mpi_requested"]
        return
    assert rc == 70 and not (out / "metrics.json").exists()
    failure = json.loads((out / "failure.json").read_text())
    assert "host MPI was requested" in failure["reason"] and IMAGE_LIBMPI in failure["reason"]
    assert failure["mpi"]["origin"] == "container"
