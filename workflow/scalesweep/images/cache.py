"""The image cache, ``<cache-dir>/images/<key>/``: the key of a build, the lock a build
holds on it, and a cached image placed at ``--out`` (hard-linked, copied or linked)."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
from pathlib import Path

from scalesweep.images.digest import sha256_text
from scalesweep.images.process import BuildError
from scalesweep.images.wheelhouse import normalized_requirements
from scalesweep.record.dataset import sha256_file


CACHE_SCHEMA = 1
DEFAULT_CACHE = Path(os.environ.get("SCALESWEEP_CACHE", "~/.cache/scalesweep")).expanduser()

def cache_key(
    recipe_text: str,
    requirements_text: str,
    wheel_hashes: dict[str, str],
    builder: str,
    builder_version: str,
    extra: dict | None = None,
) -> str:
    """sha256 (hex) identifying one image build.

    Inputs: recipe text (raw), requirements (normalised: comments and blank lines do
    not count), ``{wheel file name: sha256}``, builder name and version, and ``extra``
    (JSON-able: base rootfs parameters, build args, other files of the recipe's
    directory). Paths and timestamps never enter it.
    """
    payload = {
        "schema": CACHE_SCHEMA,
        "recipe_sha256": sha256_text(recipe_text),
        "requirements": normalized_requirements(requirements_text) if requirements_text else "",
        "wheels": sorted(wheel_hashes.items()),
        "builder": builder,
        "builder_version": builder_version,
        "extra": extra or {},
    }
    return sha256_text(json.dumps(payload, sort_keys=True, separators=(",", ":")))

def recipe_context_hashes(recipe: Path) -> dict[str, str]:
    """sha256 of the other files in the recipe's directory (files a recipe may COPY)."""
    out = {}
    for p in sorted(recipe.parent.iterdir()):
        if p.is_file() and p != recipe and not p.name.endswith((".md", ".def", ".args")):
            out[p.name] = sha256_file(p)
    return out

@contextlib.contextmanager
def file_lock(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)

def remove_path(p: Path) -> None:
    if p.is_symlink() or p.is_file():
        p.unlink()
    elif p.is_dir():
        shutil.rmtree(p)

def place_image(src: Path, out: Path, mode: str = "hardlink") -> str:
    """Put a cached image at ``out`` (replacing it); returns how: hardlink|copy|symlink.

    hardlink (default): ``cp -a --link``, seconds for a 1 GB tree, no extra space, and
    ``out`` survives cache cleanup; falls back to a copy across filesystems.
    """
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    remove_path(tmp)
    how = mode
    if mode == "symlink":
        os.symlink(src.resolve(), tmp)
    elif mode == "hardlink":
        r = subprocess.run(["cp", "-a", "--link", str(src), str(tmp)], capture_output=True, text=True)
        if r.returncode != 0:
            remove_path(tmp)
            how = "copy"
    if how == "copy":
        r = subprocess.run(["cp", "-a", "--reflink=auto", str(src), str(tmp)], capture_output=True, text=True)
        if r.returncode != 0:
            remove_path(tmp)
            raise BuildError(f"cannot copy {src} to {tmp}: {r.stderr.strip()}")
    if out.is_dir() and not out.is_symlink():
        old = out.with_name(f".{out.name}.old-{os.getpid()}")
        os.rename(out, old)
        os.rename(tmp, out)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, out)
    # cp -a keeps the cached mtime; a fresh one keeps make-like tools (Snakemake's mtime
    # rerun trigger) from seeing the output as older than its inputs.
    os.utime(out)
    return how
