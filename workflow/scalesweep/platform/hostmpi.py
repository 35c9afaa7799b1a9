"""Host MPI in a container: putting the host's MPI library into an image, and telling,
from what a run's ranks loaded, whether the host's MPI was the one in effect.

Two ways in, by runtime (the site file's ``runtimes.<name>.host_mpi``):

* ``lib_dirs``: host directories bound into the container and put first on its
  LD_LIBRARY_PATH (every runtime; OLCF's Cray MPICH in Apptainer);
* ``libs``: host library files. Apptainer and SingularityCE bind them into
  ``/.singularity.d/libs`` (``*_CONTAINLIBS``), which is on the container's library path.
  Charliecloud injects them with ``ch-fromhost`` (its documented way, Charliecloud 0.31:
  "Inject files from the host into an image directory") into a copy of the image
  (``resources/images/<image>+hostmpi``: hard links to the image's files plus the injected
  ones in :data:`INJECT_DIR`), rule ``inject_host_mpi``; the image itself keeps its own MPI
  for the container-MPI runtime.

A host-MPI run whose ranks loaded an MPI library from anywhere else (the image's own) did
not measure host MPI: :func:`mpi_check` names it and the harness fails the run.

``scalesweep inject-host-mpi`` is standard library only (the rule runs it in whatever
environment it has).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path, PurePosixPath
from typing import Any, Iterable

from scalesweep.platform.runtimes import INJECT_DIR  # the injected host libraries' directory
from scalesweep.record.dataset import sha256_file
from scalesweep.record.hostenv import with_user

COMMAND = "inject-host-mpi"
CONTAINLIBS_DIR = "/.singularity.d/libs"  # where Apptainer/Singularity put *_CONTAINLIBS


class InjectError(RuntimeError):
    """The host libraries could not be injected (names the file or the command)."""


def fromhost_command(image_dir: str, libs: Iterable[str], dest: str = INJECT_DIR,
                     bin: str = "ch-fromhost") -> list[str]:
    """``ch-fromhost`` injecting ``libs`` into ``image_dir`` at ``dest`` (``-d``: its own
    destination inference picks the image's first ldconfig directory, which on Debian
    images is libfakeroot's). ``--no-ldconfig``: the copy's ld.so.cache stays the image's
    (a hard link); the libraries are found through LD_LIBRARY_PATH."""
    cmd = [bin, "--no-ldconfig", "-v", "-d", dest]
    for lib in libs:
        cmd += ["-p", lib]
    return cmd + [str(image_dir)]


def copy_tree_linked(src: Path, dest: Path) -> str:
    """``dest``: a copy of the directory ``src`` whose files are hard links (``cp -al``;
    a plain copy where hard links cannot be made). Returns how it was copied."""
    r = subprocess.run(["cp", "-al", str(src), str(dest)], capture_output=True, text=True)
    if r.returncode == 0:
        return "hardlink"
    shutil.rmtree(dest, ignore_errors=True)
    r = subprocess.run(["cp", "-a", str(src), str(dest)], capture_output=True, text=True)
    if r.returncode != 0:
        raise InjectError(f"cp -a {src} {dest} exited {r.returncode}: {r.stderr.strip()[-300:]}")
    return "copy"


def inject(image: str, out: str, manifest: str, libs: list[str], base_manifest: str = "",
           dest: str = INJECT_DIR, fromhost: str = "ch-fromhost") -> dict:
    """A copy of the directory image ``image`` at ``out`` with the host files ``libs``
    injected at ``dest`` by ch-fromhost, and its manifest: the base image's (its build
    provenance) plus what was injected (each file's host path, resolved file, sha256)."""
    src, dst = Path(image), Path(out)
    if not src.is_dir():
        raise InjectError(f"{image}: not a directory image (ch-fromhost injects into directories)")
    missing = [lib for lib in libs if not Path(lib).is_file()]
    if missing:
        raise InjectError(f"host MPI library {missing[0]!r} does not exist on this host "
                          "(site file: runtimes.charliecloud.host_mpi.libs)")
    exe = shutil.which(fromhost)
    if not exe:
        raise InjectError(f"{fromhost!r} not found on PATH (Debian package 'charliecloud')")
    tmp = dst.with_name(f".{dst.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    dst.parent.mkdir(parents=True, exist_ok=True)
    placement = copy_tree_linked(src, tmp)
    try:
        target = tmp / dest.lstrip("/")
        target.mkdir(parents=True, exist_ok=True)  # ch-fromhost: "not a directory" otherwise
        cmd = fromhost_command(str(tmp), libs, dest, exe)
        # ch-fromhost runs ch-run (ldconfig), which refuses to start without $USER
        r = subprocess.run(cmd, capture_output=True, text=True, env=with_user(dict(os.environ)))
        sys.stderr.write(r.stdout + r.stderr)
        if r.returncode != 0:
            raise InjectError(f"{' '.join(cmd)} exited {r.returncode}: {(r.stderr or r.stdout).strip()[-300:]}")
        injected = []
        for lib in libs:
            name = PurePosixPath(lib).name
            inside = target / name
            if not inside.is_file():
                raise InjectError(f"{' '.join(cmd)} did not leave {dest}/{name} in the image")
            injected.append({"host_path": lib, "resolved": str(Path(lib).resolve()),
                             "path": f"{dest}/{name}", "sha256": sha256_file(inside)})
        shutil.rmtree(dst, ignore_errors=True)
        os.replace(tmp, dst)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    base: dict[str, Any] = {}
    if base_manifest and Path(base_manifest).is_file():
        base = json.loads(Path(base_manifest).read_text())
    version = subprocess.run([exe, "--version"], capture_output=True, text=True)
    # the copy's own digest: the image's and the injected files' (the rest are the
    # image's files, hard-linked)
    digest = hashlib.sha256(json.dumps([base.get("content_digest"),
                                        [x["sha256"] for x in injected]]).encode()).hexdigest()
    facts = {
        **base,
        "image": str(dst.resolve()),
        "base_image": str(src.resolve()),
        "base_content_digest": base.get("content_digest"),
        "content_digest": f"sha256:{digest}",
        "content_digest_method": "sha256 of [the image's content_digest, the injected files' sha256]",
        "host_mpi": {
            "tool": "ch-fromhost",
            "tool_version": (version.stdout or version.stderr).strip() or None,
            "command": cmd[:-1] + [str(dst)],
            "dest": dest,
            "libs": injected,
            "placement": placement,
        },
        "injected_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }
    from scalesweep.record.metrics import write_json_atomic

    write_json_atomic(manifest, facts)
    return facts


# --------------------------------------------------------------- what a run loaded


def host_mpi_dirs(runtime_name: str, site: Any) -> list[str]:
    """Where, inside the container of a host-MPI runtime, the host's MPI libraries are:
    the bound ``lib_dirs`` (not the image's own ``image_lib_dirs``), the injected copy's
    :data:`INJECT_DIR` (Charliecloud) or ``/.singularity.d/libs`` (Apptainer's
    CONTAINLIBS). ``site``: the runtime's :class:`scalesweep.platform.runtimes.RuntimeSite`."""
    from scalesweep.platform.runtimes import runtime

    rt = runtime(runtime_name)
    if not rt.host_mpi:
        return []
    dirs = [d for d in site.host_mpi_lib_dirs if d not in site.host_mpi_image_lib_dirs]
    if site.host_mpi_libs:
        dirs.append(INJECT_DIR if rt.injects_host_libs else CONTAINLIBS_DIR)
    return dirs


def _under(path: str, dirs: Iterable[str]) -> bool:
    p = PurePosixPath(path)
    return any(p == PurePosixPath(d) / p.name or PurePosixPath(d) in p.parents for d in dirs)


def mpi_check(payload: dict, runtime_name: str, site: Any) -> tuple[dict | None, str]:
    """(what the run's ranks loaded, the problem or ""). Per rank: the MPI library file
    (``per_rank[].mpi.library``) and where it came from: ``host`` (natively, or inside a
    host-MPI container from :func:`host_mpi_dirs`) or ``container`` (the image's own). A
    host-MPI run with a rank that loaded the container's library, or none, is a problem:
    host MPI was requested and not measured. None when the payload used no MPI."""
    from scalesweep.platform.runtimes import runtime

    ranks = [r for r in payload.get("per_rank") or [] if isinstance(r, dict) and r.get("mpi")]
    if not ranks:
        return None, ""
    rt = runtime(runtime_name)
    dirs = host_mpi_dirs(runtime_name, site)
    libs = []
    for r in ranks:
        lib = r["mpi"].get("library")
        origin = "host" if rt.native or (lib and _under(lib, dirs)) else "container"
        libs.append({"rank": r.get("rank"), "library": lib, "origin": origin})
    first = ranks[0]["mpi"]
    summary = {
        "library": first.get("library"),
        "library_version": first.get("library_version"),
        "vendor": first.get("vendor"),
        "origin": libs[0]["origin"] if len({x["origin"] for x in libs}) == 1 else "mixed",
        "host_mpi_requested": rt.host_mpi,
        "host_mpi_dirs": dirs,
        "ranks": libs,
    }
    if rt.host_mpi:
        wrong = [x for x in libs if x["origin"] != "host"]
        if wrong:
            w = wrong[0]
            return summary, (f"host MPI was requested (runtime {runtime_name}) but rank {w['rank']} "
                             f"loaded {w['library'] or 'no MPI library'}, the container's own "
                             f"(host MPI directories in the container: {', '.join(dirs) or 'none'})")
    return summary, ""


# ----------------------------------------------------------------------- CLI


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--image", required=True, help="the directory image to copy")
    p.add_argument("--out", required=True, help="the copy with the host libraries injected")
    p.add_argument("--manifest", required=True, help="provenance JSON (written atomically)")
    p.add_argument("--base-manifest", default="", help="the image's own manifest (carried over)")
    p.add_argument("--lib", action="append", default=[], required=True,
                   help="a host library file to inject (repeatable)")
    p.add_argument("--dest", default=INJECT_DIR, help=f"where in the image (default {INJECT_DIR})")
    p.add_argument("--ch-fromhost", default="ch-fromhost", help="the ch-fromhost executable")


def run(a: argparse.Namespace) -> int:
    try:
        facts = inject(a.image, a.out, a.manifest, a.lib, a.base_manifest, a.dest, a.ch_fromhost)
    except InjectError as exc:
        print(f"scalesweep {COMMAND}: error: {exc}", file=sys.stderr)
        return 1
    libs = ", ".join(x["host_path"] for x in facts["host_mpi"]["libs"])
    print(f"scalesweep {COMMAND}: {facts['image']}: {libs} -> {a.dest} "
          f"({facts['host_mpi']['placement']})", file=sys.stderr)
    return 0


def add_parser(sub) -> None:
    """``scalesweep inject-host-mpi`` (scalesweep.cli)."""
    p = sub.add_parser(COMMAND, help="copy a directory image with the host's MPI libraries "
                       "injected (ch-fromhost), for charliecloud-hostmpi",
                       description=inject.__doc__.split("\n\n")[0])
    _arguments(p)
    p.set_defaults(func=run)
