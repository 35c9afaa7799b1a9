"""Container modes (issue 29): the ways one runtime runs the same image, each named by a
runtime token ``<name>+<mode>`` (the plain name: the default mode), its command line in the
runtime's class, which modes a site offers in its site file, and the mode of every run."""

from __future__ import annotations

import hashlib

import pytest

from conftest import tiny_config, write_site
from scalesweep.analyse.collect import run_row
from scalesweep.plan.config import offered_runtimes
from scalesweep.plan.imageset import ImageConfigError, load_record, workload_image
from scalesweep.plan.kinds import SweepError
from scalesweep.plan.sweep import SweepPoint, sweep_points
from scalesweep.platform import runtimes
from scalesweep.platform.runtimes import (
    ModeNotOffered,
    RuntimeSite,
    UnknownMode,
    runtime,
)
from scalesweep.platform.site import SiteError, load_site
from scalesweep.record import columns

STANDARD = [("/repo", "/mnt/code"), ("/data", "/mnt/data"), ("/out", "/mnt/out")]
RUN = hashlib.sha256(b"/var/tmp/scalesweep-podman").hexdigest()[:12]  # local's storage_root


def prefix(token: str, **facts) -> list[str]:
    rt = runtime(token)
    site = RuntimeSite(**{"image": "/img/x", "mode": rt.run_mode, **facts})
    return rt.exec_prefix(site, rt.binds(site, STANDARD), "/mnt/code")


# --- tokens ------------------------------------------------------------------------------


def test_tokens_name_a_runtime_in_a_mode_the_plain_name_its_default():
    assert runtime("charliecloud").run_mode == "dir" and runtime("charliecloud").token == "charliecloud"
    sq = runtime("charliecloud+squashfs")
    assert (sq.name, sq.run_mode, sq.token) == ("charliecloud", "squashfs", "charliecloud+squashfs")
    assert runtime("charliecloud+squashfs") is sq  # one instance per token
    assert runtime("charliecloud") is not sq and runtime("charliecloud").mode == ""
    assert runtimes.split_token("podman+vfs") == ("podman", "vfs")
    assert runtimes.mode_of("native") is None and runtimes.mode_of("podman") == "overlay"
    assert runtimes.is_native("native") and not runtimes.is_native("charliecloud+squashfs")
    tokens = runtimes.tokens()
    assert tokens.index("charliecloud") + 1 == tokens.index("charliecloud+squashfs")
    assert "charliecloud+dir" not in tokens and "native+x" not in tokens
    assert {"apptainer+userns", "apptainer+sandbox", "singularity+userns", "podman+vfs"} <= set(tokens)


@pytest.mark.parametrize("token, message", [
    ("charliecloud+nope", "runtime 'charliecloud' has no mode 'nope'.*its modes: dir, squashfs"),
    ("native+dir", "runtime 'native' has no mode 'dir'.*its modes: none"),
    ("charliecloud+dir", "'dir' is the default mode of runtime charliecloud: write 'charliecloud'"),
    ("nope+dir", "unknown runtime 'nope\\+dir'"),
])
def test_a_bad_token_is_refused_naming_the_value(token, message):
    with pytest.raises(runtimes.UnknownRuntime, match=message):
        runtime(token)


# --- each runtime's modes: their command lines -----------------------------------------


def test_charliecloud_modes_run_their_own_format_with_the_same_command_line():
    # the plain name runs either format, as before modes (its mode: the image's)
    assert runtime("charliecloud").mode_formats() == ("dir", "squashfs")
    assert runtime("charliecloud+squashfs").mode_formats() == ("squashfs",)
    local = load_site("local")
    assert runtime("charliecloud").site_facts(local, "/i/x.sqfs").mode == "squashfs"
    assert runtime("charliecloud").site_facts(local, "/i/default").mode == "dir"
    assert prefix("charliecloud+squashfs", image="/c/resources/images/squashfs.sqfs") == [
        "ch-run", "--bind=/repo:/mnt/code", "--bind=/data:/mnt/data", "--bind=/out:/mnt/out",
        "--cd=/mnt/code", "/c/resources/images/squashfs.sqfs", "--"]
    assert prefix("charliecloud")[:-2] == prefix("charliecloud+squashfs")[:-2]


@pytest.mark.parametrize("name", ["apptainer", "singularity"])
def test_apptainer_modes_command_lines(name):
    """apptainer exec --help / singularity exec --help: ``-u, --userns`` "run container in
    a new user namespace"; a sandbox (``build -s, --sandbox``: "build image as sandbox
    format (chroot directory structure)") is a directory given as the image; the set-uid
    starter is the installed default (no option)."""
    bind = "--bind", "/repo:/mnt/code,/data:/mnt/data,/out:/mnt/out"
    assert prefix(name, image="/i/pytorch.sif") == [name, "exec", *bind, "--pwd", "/mnt/code", "/i/pytorch.sif"]
    assert prefix(f"{name}+userns", image="/i/pytorch.sif") == [
        name, "exec", "--userns", *bind, "--pwd", "/mnt/code", "/i/pytorch.sif"]
    assert prefix(f"{name}+sandbox", image="/i/pytorch") == [
        name, "exec", *bind, "--pwd", "/mnt/code", "/i/pytorch"]
    assert prefix(f"{name}-hostmpi+userns", image="/i/p.sif", host_mpi_lib_dirs=("/opt/mpi",))[:3] == [
        name, "exec", "--userns"]
    assert prefix(f"{name}+userns", image="/i/p.sif", device="rocm")[2:4] == ["--userns", "--rocm"]
    assert runtime(name).mode_formats() == runtime(f"{name}+userns").mode_formats() == ("sif",)
    assert runtime(f"{name}+sandbox").mode_formats() == ("sandbox",)
    assert runtime(name).pack_command("sandbox", "/e/image.sif", "/e/.image.sandbox.tmp-1", 0,
                                      {name: f"/usr/bin/{name}"}) == [
        f"/usr/bin/{name}", "build", "--sandbox", "/e/.image.sandbox.tmp-1", "/e/image.sif"]
    assert runtime(name).packed_formats == {"sandbox": "image.sandbox"}


def test_podman_site_options_and_storage_per_mode():
    """This machine's facts (sites/local.yaml) on the command line, in the order podman
    reads them: global options, the mode's storage, run, the class's own options, the
    site's run options in place of the rootless defaults."""
    local = load_site("local")
    image = "/c/resources/images/default"
    ref = runtime("podman").storage_reference(image)
    for token, mode in (("podman", "overlay"), ("podman+vfs", "vfs")):
        rt = runtime(token)
        site = rt.site_facts(local, image)
        assert site.mode == mode
        cmd = rt.exec_prefix(site, STANDARD, "/mnt/code")
        network = [o for o in site.run_options if o.startswith("--network")]
        assert cmd == [
            "podman", "--runtime=runc", "--cgroup-manager=cgroupfs", f"--storage-driver={mode}",
            f"--root=/var/tmp/scalesweep-podman/{mode}", f"--runroot=/tmp/scalesweep-podman-{RUN}/{mode}",
            "run", "--rm", "--pull=never", "--env-host", "--security-opt=label=disable",
            *network, "--ulimit=nofile=1024:1024", "--ulimit=nproc=1024:1024",
            "--volume", "/repo:/mnt/code", "--volume", "/data:/mnt/data", "--volume", "/out:/mnt/out",
            "--workdir", "/mnt/code", ref]
        assert "--userns=keep-id" not in cmd  # refused for root: the site replaces the defaults
        assert len(cmd[5].partition("=")[2]) <= 50  # podman refuses a longer runroot
        load = rt.storage_load(site, image, "dir", "sha256:ab")
        assert load.reference == ref and load.stdin == ["tar", "-C", image, "-c", "."]
        assert load.command == [*cmd[:6], "import", "--change",
                                "LABEL org.scalesweep.content-digest=sha256:ab", "-", ref]
        assert load.check == [*cmd[:6], "image", "inspect", "--format",
                              '{{index .Labels "org.scalesweep.content-digest"}}', ref]
        saved = rt.storage_load(site, "/c/resources/images/oci", "oci-dir")
        assert saved.command == [*cmd[:6], "pull", "--quiet", "dir:/c/resources/images/oci"]
        assert saved.tag == [*cmd[:6], "tag"] and saved.stdin is None
    # no storage_root: the driver alone; no run options: the rootless defaults
    rt = runtime("podman")
    assert rt.exec_prefix(RuntimeSite(image="r", mode="overlay"), [], "/w")[:9] == [
        "podman", "--storage-driver=overlay", "run", "--rm", "--pull=never", "--env-host",
        "--security-opt=label=disable", "--userns=keep-id", "--network=host"]
    assert rt.mode_formats() == ("oci-dir", "dir") and rt.loads_images


def test_provenance_records_the_mode():
    local = load_site("local")
    rt = runtime("charliecloud+squashfs")
    record = rt.provenance(rt.site_facts(local, "/i.sqfs"))
    assert record["mode"] == "squashfs" and record["runtime"] == "charliecloud"
    assert runtime("native").provenance(RuntimeSite()) == {"runtime": "native", "native": False} | {"native": True}


# --- what a site offers -------------------------------------------------------------------


def test_site_offers_modes_and_refuses_others(tmp_path):
    local = load_site("local")
    assert runtime("charliecloud").offered_modes(local) == ("dir", "squashfs", "control")
    offered_runtimes(with_runtimes(["native", "charliecloud", "charliecloud+squashfs", "podman+vfs"]))
    only_dir = write_site(tmp_path, "dironly", runtimes={"charliecloud": {"bin": "ch-run", "modes": []}})
    with pytest.raises(ModeNotOffered, match="runtime 'charliecloud\\+squashfs': mode 'squashfs' is not "
                                             "offered by site 'dironly'.*modes: dir"):
        offered_runtimes(with_runtimes(["native", "charliecloud+squashfs"], site=only_dir))
    frontier = load_site("frontier")  # the default (setuid) and the control image's mode
    assert runtime("apptainer").offered_modes(frontier) == ("setuid", "control")
    with pytest.raises(ModeNotOffered, match="'apptainer\\+userns': mode 'userns' is not offered by site 'frontier'"):
        runtime("apptainer+userns").check_offered(frontier)
    bad = write_site(tmp_path, "badmode", runtimes={"podman": {"bin": "podman", "modes": ["btrfs"]}})
    with pytest.raises(SiteError, match="runtimes.podman.modes: 'btrfs' is not a mode of runtime podman "
                                        "\\(its modes: overlay, vfs, control\\)"):
        load_site(bad)
    with pytest.raises(UnknownMode, match="runtimes.podman.modes: 'btrfs' is not a mode of runtime podman"):
        runtime("podman").check_offered({"name": "raw", "runtimes": {"podman": {"modes": ["btrfs"]}}})


def with_runtimes(tokens: list[str], site: str = "local") -> dict:
    config = tiny_config(site=site)
    config["sweep"]["runtimes"] = tokens
    return config


# --- points, images, runs ------------------------------------------------------------------


def test_the_default_mode_keeps_its_paths_and_each_mode_is_its_own_arm():
    config = with_runtimes(["native", "charliecloud", "charliecloud+squashfs"])
    config["containers"] = {"image": ["default", "squashfs"],
                            "images": {"default": {"builder": "charliecloud", "format": "", "recipe": "r",
                                                   "requirements": "q", "prebuilt": "", "fakeroot": False},
                                       "squashfs": {"builder": "charliecloud", "format": "squashfs",
                                                    "recipe": "r", "requirements": "q", "prebuilt": "",
                                                    "fakeroot": False}}}
    paths = {p.path for p in sweep_points(config) if p.ranks == 1}
    assert paths == {
        "cnn_ddp/charliecloud/n1-g0-r1-t1/rep1/native",
        "cnn_ddp/charliecloud/n1-g0-r1-t1/rep1/charliecloud",  # as before modes existed
        "cnn_ddp/charliecloud+squashfs/n1-g0-r1-t1/rep1/native",
        "cnn_ddp/charliecloud+squashfs/n1-g0-r1-t1/rep1/charliecloud+squashfs",
    }
    for path in paths:
        assert SweepPoint.from_path(path).path == path
    assert workload_image(config, "cnn_ddp", "charliecloud").name == "default"
    assert workload_image(config, "cnn_ddp", "charliecloud+squashfs").path == "resources/images/squashfs.sqfs"
    assert workload_image(config, "cnn_ddp", "podman").name == "default"  # imported from the dir
    assert load_record(workload_image(config, "cnn_ddp", "podman"), "podman+vfs") == \
        "resources/images/default.podman+vfs.load.json"
    assert load_record(workload_image(config, "cnn_ddp", "charliecloud"), "charliecloud") is None
    config["containers"]["image"] = ["default"]
    with pytest.raises(ImageConfigError, match="runtime charliecloud\\+squashfs runs squashfs images, and "
                                               "the workload's images are 'default' \\(dir\\)"):
        workload_image(config, "cnn_ddp", "charliecloud+squashfs")


def test_sweep_refuses_an_unknown_mode_naming_it():
    with pytest.raises(SweepError, match="workload cnn_ddp: runtime 'charliecloud' has no mode 'sqfs'"):
        sweep_points(with_runtimes(["native", "charliecloud+sqfs"]))


def cnn_metrics(runtime: str, **extra) -> dict:
    epochs = [2.0, 2.0]
    return {"point": SweepPoint("cnn_ddp", runtime, 1, 0, 1, 1, 1).as_dict(), "epoch_s": epochs,
            "train_s": sum(epochs), "images_per_epoch": 16, "images_per_s": 8.0, "final_loss": 0.1,
            "final_accuracy": 0.9, **extra}


def test_runs_csv_mode_column_declared_once_and_derived_for_older_runs():
    assert columns.COLUMNS["mode"].role == columns.DERIVED  # never groups: the token does
    assert run_row(cnn_metrics("charliecloud+squashfs", mode="squashfs"), "p", "cnn")["mode"] == "squashfs"
    assert run_row(cnn_metrics("charliecloud"), "p", "cnn")["mode"] == "dir"  # a run before modes
    assert run_row(cnn_metrics("native"), "p", "cnn")["mode"] is None


def test_the_provenance_table_names_each_runs_mode():
    from scalesweep.report.run_tables import provenance_table

    table = provenance_table([("a", cnn_metrics("podman+vfs", mode="vfs")), ("b", cnn_metrics("charliecloud")),
                              ("c", cnn_metrics("native"))])
    assert dict(zip(table["runtime"], table["mode"])) == {"podman+vfs": "vfs", "charliecloud": "dir",
                                                          "native": None}


def test_a_tar_of_hard_links_whose_status_changed_is_not_an_error(tmp_path, capsys):
    """The image's files are hard links into the image cache; another campaign placing the
    same image links them again while ``tar`` reads them (GNU tar: "file changed as we read
    it", exit 1; seen in CI beside the containers test). That alone is tolerated, with a
    line in the log; any other complaint is not."""
    import os
    import shutil
    import threading

    from scalesweep.images.load import _only_ctime_changes, _run

    warning = "tar: ./opt/venv/x.py: file changed as we read it"
    assert _only_ctime_changes(warning + "\n" + warning.replace("x.py", "y.py") + "\n")
    assert not _only_ctime_changes("")
    assert not _only_ctime_changes(warning + "\ntar: ./z: Cannot open: Permission denied")
    # for real: link the files again and again while tar reads them
    src = tmp_path / "image"
    src.mkdir()
    for i in range(100):
        (src / f"f{i}").write_bytes(os.urandom(64 * 1024))
    stop = threading.Event()

    def relink():
        k = 0
        while not stop.is_set():
            for f in src.iterdir():
                link = tmp_path / f"l{k % 2}-{f.name}"
                link.unlink(missing_ok=True)
                os.link(f, link)
            k += 1

    t = threading.Thread(target=relink, daemon=True)
    t.start()
    try:
        out = tmp_path / "out.tar"
        for _ in range(3):  # tar sees a changed ctime on most tries; every try must pass
            _run(["sh", "-c", f"cat > {out}"], [shutil.which("tar"), "-C", str(src), "-c", "."])
    finally:
        stop.set()
        t.join()
    assert out.stat().st_size > 100 * 64 * 1024
    assert "status changed as they were read" in capsys.readouterr().err  # the case was met
