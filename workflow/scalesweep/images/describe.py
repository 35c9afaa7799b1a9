"""Images not built here, described by a manifest like a build's: pulled from a registry
(``apptainer|singularity pull``) or used in place; ``inspect`` for their labels and base.
``scalesweep describe-image`` (rules pull_image, describe_image)."""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

from scalesweep.images.builders import builder_runtime
from scalesweep.images.cache import remove_path
from scalesweep.images.digest import DIGEST_METHOD, MANIFEST_SCHEMA, content_digest, tree_size
from scalesweep.images.process import BuildError, BuilderMissing, run_capture
from scalesweep.images.recipe import def_base
from scalesweep.platform import runtimes
from scalesweep.record.metrics import write_json_atomic


# labels that name an image's base (Apptainer's build labels, OCI's, our recipes')
BASE_LABELS = ("org.scalesweep.base", "org.opencontainers.image.base.name",
               "org.label-schema.usage.singularity.deffile.from")

def inspect_image(rt: runtimes.Runtime, image: Path, exe: str) -> dict:
    """``apptainer|singularity inspect --json`` of a SIF: its labels and definition
    file ({} for runtimes without inspect, or when it fails: the error is recorded)."""
    if not hasattr(rt, "inspect_command"):
        return {}
    r = subprocess.run(rt.inspect_command(str(image), exe), capture_output=True, text=True)
    if r.returncode != 0:
        return {"error": (r.stderr or r.stdout).strip()[-300:]}
    try:
        attrs = json.loads(r.stdout)["data"]["attributes"]
    except (ValueError, KeyError, TypeError):
        return {"error": f"not inspect --json output: {r.stdout[:200]!r}"}
    return {"labels": attrs.get("labels") or {}, "deffile": attrs.get("deffile") or ""}

def image_base(inspected: dict) -> dict | None:
    """The base image reference of an inspected image: a base label, else the From of
    its definition file."""
    labels = inspected.get("labels") or {}
    for key in BASE_LABELS:
        if labels.get(key):
            return {"from": labels[key], "source": f"label {key}"}
    base = def_base(inspected["deffile"]) if inspected.get("deffile") else None
    return {**base, "source": "deffile"} if base else None

def describe_image(builder: str, image: str, manifest: str | os.PathLike, out: str | None = None,
                   pull: bool = False, fmt: str | None = None,
                   tools: dict[str, str] | None = None) -> dict:
    """The manifest of an image not built here. ``pull``: ``image`` is a registry
    reference pulled to ``out`` first (``apptainer|singularity pull``); else ``image`` is
    an existing file or directory, described where it lies. Records the reference or
    path, the image's own digest (sha256 of a SIF or SquashFS file, the tree digest of a
    directory), its size, its labels and base image (``inspect``), and the runtime."""
    t0 = time.monotonic()
    rt = builder_runtime(builder)
    fmt = fmt or rt.image_formats[0]
    exe = (tools or {}).get(rt.default_bin) or shutil.which(rt.default_bin)
    facts: dict = {"schema": MANIFEST_SCHEMA, "format": fmt, "recipe": None, "cached": False}
    if pull:
        if not hasattr(rt, "pull_command"):
            raise BuildError(f"--builder {builder} cannot pull {image!r}")
        if not exe:
            raise BuilderMissing(f"{builder} pull needs '{rt.default_bin}', not found on PATH: {rt.install_hint}")
        dest = Path(out or "")
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(f".{dest.name}.tmp-{os.getpid()}")
        cmd = rt.pull_command(str(tmp), image, exe)
        r = subprocess.run(cmd, capture_output=True, text=True)
        sys.stderr.write(r.stdout + r.stderr)
        if r.returncode != 0 or not tmp.exists():
            remove_path(tmp)
            raise BuildError(f"{' '.join(cmd)} exited {r.returncode}: {(r.stderr or r.stdout).strip()[-300:]}")
        os.replace(tmp, dest)
        facts.update(source="pulled", pulled_from=image, pull_command=cmd,
                     pull_seconds=round(time.monotonic() - t0, 2))
        path = dest
    else:
        path = Path(image)
        if not path.exists():
            raise BuildError(f"prebuilt image {image!r} does not exist "
                             f"(containers.images.<name>.prebuilt; relative to the campaign)")
        facts.update(source="local")
    path = path.resolve() if not pull else path
    version = None
    if exe:
        with contextlib.suppress(BuildError):
            version = rt.parse_version(run_capture(rt.version_command(exe)))
    inspected = inspect_image(rt, path, exe) if exe and path.is_file() else {}
    facts.update(
        image=str(path),
        builder={"name": builder, "version": version, "tools": {rt.default_bin: exe} if exe else {}},
        base=image_base(inspected),
        labels=inspected.get("labels"),
        inspect_error=inspected.get("error"),
        size_bytes=tree_size(path),
        content_digest=content_digest(path),
        content_digest_method=("sha256 of the image file" if path.is_file() else DIGEST_METHOD),
        described_at=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        described_on=socket.gethostname(),
    )
    if path.is_file():
        facts["file_sha256"] = facts["content_digest"].removeprefix("sha256:")
    # an image used in place may be replaced under its path: each run compares these
    facts["mtime_ns"] = path.stat().st_mtime_ns
    write_json_atomic(manifest, facts)
    return facts
