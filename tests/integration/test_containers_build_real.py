"""A real Charliecloud image: built, built again from the cache, run (the rest:
tests/unit/test_containers_build.py, whose constants it uses)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from conftest import REPO
from scalesweep.images import digest
from scalesweep.record.dataset import sha256_file
from test_containers_build import CHARLIECLOUD, CLI, DOCKERFILE, REQUIREMENTS


SHARED_CACHE = Path(os.environ.get("SCALESWEEP_CACHE", "~/.cache/scalesweep")).expanduser()


def _can_build() -> str | None:
    if shutil.which("ch-image") is None or shutil.which("ch-run") is None:
        return "ch-image/ch-run not installed (apt-get install charliecloud)"
    have_base = any((SHARED_CACHE / "base").glob("debian-bookworm-*.tar"))
    if os.geteuid() != 0 and not have_base:
        return "the Debian base rootfs (debootstrap) needs root once"
    return None


def _build(out: Path, manifest: Path, timeout: int = 1800) -> tuple[dict, float]:
    t0 = time.monotonic()
    env = dict(os.environ)
    env.setdefault("USER", "root" if os.geteuid() == 0 else str(os.getuid()))
    SHARED_CACHE.mkdir(parents=True, exist_ok=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    # hard links need one filesystem; a symlink avoids copying 1.2 GB into a tmpfs /tmp
    same_fs = os.stat(SHARED_CACHE).st_dev == os.stat(out.parent).st_dev
    proc = subprocess.run(
        [*CLI, "--builder", "charliecloud",
         "--recipe", str(DOCKERFILE), "--requirements", str(REQUIREMENTS),
         "--out", str(out), "--manifest", str(manifest), "--cache-dir", str(SHARED_CACHE),
         "--link", "hardlink" if same_fs else "symlink"],
        capture_output=True, text=True, cwd=REPO, env=env, timeout=timeout,
    )
    assert proc.returncode == 0, proc.stderr[-6000:]
    return json.loads(manifest.read_text()), time.monotonic() - t0


@pytest.mark.container
@pytest.mark.skipif(_can_build() is not None, reason=_can_build() or "")
def test_real_charliecloud_image_builds_caches_and_runs(tmp_path):
    out, manifest = tmp_path / "images/default", tmp_path / "images/default.manifest.json"
    first, _ = _build(out, manifest)  # cold on a fresh machine, a cache hit afterwards
    assert first["schema"] == digest.MANIFEST_SCHEMA
    assert first["recipe"]["sha256"] == sha256_file(DOCKERFILE)
    assert first["content_digest"].startswith("sha256:")
    assert first["packages"]["pip"]["torch"] == "2.13.0+cpu"
    assert first["packages"]["pip"]["numpy"] == "2.4.6"
    assert "python3" in first["packages"]["dpkg"] and "openmpi-bin" in first["packages"]["dpkg"]
    assert first["size_bytes"] > 300e6 and first["base"]["suite"] == "bookworm"

    second, seconds = _build(out, manifest)
    assert second["cached"] is True and second["cache_key"] == first["cache_key"]
    assert second["content_digest"] == first["content_digest"]
    assert seconds < 60, f"a cached build took {seconds:.1f} s"

    env = dict(os.environ)
    env.setdefault("USER", "root" if os.geteuid() == 0 else str(os.getuid()))
    run = subprocess.run(
        CHARLIECLOUD.exec_command(str(out), ["/opt/venv/bin/python", "-c", "import torch; print(torch.__version__)"]),
        capture_output=True, text=True, env=env, timeout=300,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "2.13.0+cpu"

    data = tmp_path / "data"
    data.mkdir()
    (data / "hello.txt").write_text("from the host\n")
    outdir = tmp_path / "out"
    outdir.mkdir()
    run = subprocess.run(
        CHARLIECLOUD.exec_command(str(out), ["sh", "-c", "test -d /mnt/data && test -d /mnt/code && test -d /mnt/out "
                                             "&& cat /mnt/data/hello.txt > /mnt/out/copied.txt"],
                                  binds=(f"{data}:/mnt/data", f"{outdir}:/mnt/out", f"{REPO}:/mnt/code")),
        capture_output=True, text=True, env=env, timeout=300,
    )
    assert run.returncode == 0, run.stderr
    assert (outdir / "copied.txt").read_text() == "from the host\n"
