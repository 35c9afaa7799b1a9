"""Adding a runtime is one module (issue #28): a made-up runtime, registered from a module
of its own (tests/toybox_runtime.py), is run by the launcher and built by the image build
through its class only; no other file names it."""

from __future__ import annotations

import importlib
import sys

import pytest

from conftest import REPO

from scalesweep.images import build, builders, rootfs, wheelhouse
from scalesweep.platform import runtimes
from scalesweep.platform.launch import Launch, launch_command, launch_env
from scalesweep.platform.runtimes import RuntimeSite

FAKE_TOYBOX = """#!/bin/sh
# stand-in for the toybox runtime: records its argv; build makes the -o directory
echo "$@" >> "$TOYBOX_LOG"
case "$1" in
  --version) echo "toybox 0.1" ;;
  import) ;;
  build) prev=""; for a; do [ "$prev" = "-o" ] && mkdir -p "$a/bin" && echo hi > "$a/bin/hello"; prev="$a"; done ;;
  enter) case "$*" in *dpkg-query*) printf 'python3\t3.11.2-1\n' ;; *pip*) echo "numpy==2.0.0" ;; esac ;;
  *) exit 1 ;;
esac
"""


@pytest.fixture
def toybox():
    sys.modules.pop("toybox_runtime", None)
    module = importlib.import_module("toybox_runtime")
    yield module.Toybox
    runtimes.unregister("toybox")
    sys.modules.pop("toybox_runtime", None)


def test_the_registry_knows_it(toybox):
    assert "toybox" in runtimes.names() and "toybox" in runtimes.container_names()
    assert "toybox" in runtimes.builders() and "toybox" in runtimes.site_keys()
    assert runtimes.names()[-1] == "toybox"  # after the built-in ones (its order)


def test_the_launcher_uses_its_exec_line(toybox):
    launch = Launch(runtime="toybox", launcher="srun", nodes=2, ranks_per_node=2, threads=4,
                    gpus_per_node=0, payload="scripts/train_cnn.py", args=("--out", "/o/p.json"),
                    code_root="/c", data_dir="/d", out_dir="/o",
                    site=RuntimeSite(image="/img/x", env=(("A", "1"),)))
    assert launch_command(launch) == [
        "srun", "--nodes=2", "--ntasks=4", "--ntasks-per-node=2", "--cpus-per-task=4",
        "toybox", "enter", "-m/c=/mnt/code", "-m/d=/mnt/data", "-m/o=/mnt/out", "--cwd=/mnt/code",
        "/img/x", "--", "/opt/venv/bin/python", "/mnt/code/scripts/train_cnn.py", "--out", "/mnt/out/p.json",
    ]
    assert launch_env(launch) == {"OMP_NUM_THREADS": "4", "TOYBOX_A": "1"}


def test_the_image_build_runs_its_steps(toybox, tmp_path, monkeypatch):
    fake = tmp_path / "bin" / "toybox"
    fake.parent.mkdir()
    fake.write_text(FAKE_TOYBOX)
    fake.chmod(0o755)
    log = tmp_path / "argv.log"
    monkeypatch.setenv("TOYBOX_LOG", str(log))
    tools = builders.check_builder("toybox", which=lambda t: str(fake) if t == "toybox" else None)
    assert tools == {"toybox": str(fake)}
    assert builders.builder_version("toybox", tools) == "0.1"

    tarball = tmp_path / "base.tar"
    monkeypatch.setattr(build, "make_base_tarball", lambda *a: (tarball, {"suite": "bookworm"}))
    monkeypatch.setattr(build, "mirror_release", lambda mirror: {"date": "today"})
    recipe = REPO / "containers" / "charliecloud" / "Dockerfile"
    job = build.Build(toybox(), recipe, tools, tmp_path / "cache", tmp_path / "build.log", "cd" * 32,
                      {"A": "1"}, suite="bookworm", mirror=rootfs.Mirror("http://m/debian", "bookworm"),
                      sde=1747699200, wheelhouse=wheelhouse.Wheelhouse(tmp_path / "wh", {}, "k", True))
    entry = tmp_path / "entry"
    entry.mkdir()
    facts = build.cold_dockerfile(job, entry)
    lines = [line.split() for line in log.read_text().splitlines()][1:]  # after --version
    assert lines[0] == ["import", str(tarball), "localhost/scalesweep-debian:bookworm"]
    assert lines[1] == ["build", f"--mount={tmp_path / 'wh'}:/wheelhouse", "--arg=A=1",
                        "--arg=SOURCE_DATE_EPOCH=1747699200", "-f", str(recipe),
                        "-o", str(entry / "image"), str(recipe.parent)]
    assert facts["toybox"] is True and facts["packages"]["pip"] == {"numpy": "2.0.0"}
    assert facts["content_digest"].startswith("sha256:") and (entry / "image" / "bin" / "hello").exists()
    assert build.load_into_storage(toybox(), entry / "image", tools) is None  # runs where it lies


def test_the_command_line_offers_it(toybox):
    from scalesweep.images import cli

    args = cli.parse_args(["--builder", "toybox", "--recipe", "R", "--out", "O", "--manifest", "M"])
    assert args.builder == "toybox"
