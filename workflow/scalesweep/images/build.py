"""Build a scalesweep payload container image, cached by content, with a provenance manifest.

``scalesweep build-image`` (or ``python -m scalesweep build-image``); the workflow's
``rule build_image`` runs it. Four builders, one per runtime that builds images; their
command lines come from the runtime classes (:mod:`scalesweep.platform.runtimes`):

* ``charliecloud`` (this machine, offline): a Debian rootfs from ``debootstrap`` (the
  host's apt mirror) is imported with ``ch-image import`` into a private ch-image
  storage as ``localhost/scalesweep-debian:<suite>``, then the recipe
  (``containers/charliecloud/Dockerfile``) is built with ``ch-image build --force``
  while a host-staged wheelhouse is bind-mounted at ``/wheelhouse``.
* ``podman`` (rootless): the same offline Dockerfile build with ``podman import`` and
  ``podman build --pull=never --volume <wheelhouse>:/wheelhouse``; the image is saved as
  a directory (``podman save --format oci-dir``), cached and placed like the others, and
  loaded into the user's storage under the name the podman runtime runs.
* ``apptainer`` and ``singularity`` (Frontier-class sites): ``apptainer|singularity build
  [--fakeroot] --build-arg K=V ... X.sif recipe.def``; the build args come from the
  site file's ``build_args`` (``--site``, or ``--build-arg`` as the workflow passes them).

Usage::

    scalesweep build-image --builder charliecloud \\
        --recipe containers/charliecloud/Dockerfile \\
        --requirements envs/payload-requirements.txt \\
        --out resources/images/default \\
        --manifest resources/images/default.manifest.json \\
        [--cache-dir ~/.cache/scalesweep] [--format dir|squashfs]

    scalesweep build-image --builder apptainer --site frontier --fakeroot \\
        --recipe containers/apptainer/pytorch-rocm.def \\
        --requirements envs/payload-requirements.txt \\
        --out $MEMBERWORK/<proj>/scalesweep/pytorch-rocm.sif \\
        --manifest $MEMBERWORK/<proj>/scalesweep/pytorch-rocm.manifest.json

Cache: ``<cache-dir>/images/<key>/`` holds the built image and the manifest of its
cold build; ``key = sha256(recipe text (+ its directory's other files), normalised
requirements, sha256 of every staged wheel, builder name + version, base / build
args)``. A hit places the cached image at ``--out`` in seconds by *hard-linking* it
(``cp -al``; a full copy if the cache is on another filesystem): ``--out`` is then a
real directory that outlives any cache cleanup and that Snakemake can stat and delete
like any output, at no extra disk space. ``--link symlink`` is available; the image is
never modified in place (ch-run mounts it read-only; never ``ch-run -w`` it, as a
hard-linked file is shared with the cache).

Standard library only (plus :mod:`scalesweep.platform.site` for ``--site``), so the rule runs it
in any environment that has Python.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import fcntl
import hashlib
import json
import os
import re
import shutil
import socket
import stat
import subprocess
import sys
import tarfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from scalesweep.platform import runtimes
from scalesweep.record.dataset import sha256_file
from scalesweep.record.hostenv import user_name, with_user
from scalesweep.record.metrics import write_json_atomic

MANIFEST_SCHEMA = "scalesweep.image-manifest/1"
CACHE_SCHEMA = 1
DIGEST_METHOD = (
    "scalesweep-tree-v1: sha256 over entries in sorted byte order of their relative "
    "paths; each entry = type, permission bits, owner/group relative to the image "
    "root's owner (numeric), size and sha256 of content (files) or link target "
    "(symlinks); mtimes ignored; /ch (Charliecloud metadata) excluded"
)
DIGEST_EXCLUDE = ("ch",)

# Base rootfs for offline Dockerfile builds: the recipe's FROM line names it.
BASE_FROM_RE = re.compile(r"^\s*FROM\s+localhost/scalesweep-debian:([a-z]+)\s*$", re.M | re.I)
BASE_VARIANT = "minbase"
# Debian's python3 minor per suite: the wheelhouse is staged with the host's Python,
# whose tags must match the image's.
DEBIAN_PYTHON = {"bookworm": (3, 11), "trixie": (3, 13), "bullseye": (3, 9)}

# Stable fallback when the host's sources carry no snapshot date (2025-05-20 UTC).
DEFAULT_SOURCE_DATE_EPOCH = 1747699200
REPO_ROOT = Path(__file__).resolve().parents[3]
DEFAULT_CACHE = Path(os.environ.get("SCALESWEEP_CACHE", "~/.cache/scalesweep")).expanduser()
COMMAND = "build-image"  # the sub-command: `scalesweep build-image`

# What to install when a tool other than a runtime's own is missing; a runtime's own
# executables (ch-image, apptainer, podman, ...) are named by its install_hint.
TOOL_HINTS = {
    "debootstrap": "install the Debian package 'debootstrap' (apt-get install debootstrap)",
    "unshare": "install the Debian package 'util-linux'",
    "tar": "install the Debian package 'tar'",
    "cp": "install the Debian package 'coreutils'",
    "mksquashfs": "install the Debian package 'squashfs-tools' (apt-get install squashfs-tools)",
}
FORMAT_TOOLS = {("charliecloud", "squashfs"): ("mksquashfs",)}
CHARLIECLOUD = runtimes.runtime("charliecloud")
PODMAN = runtimes.runtime("podman")

# Definition files (Apptainer and SingularityCE share the format): lint + preflight.
APPTAINER_SECTIONS = frozenset(
    {
        "arguments", "setup", "files", "post", "test", "environment", "runscript",
        "startscript", "labels", "help",
        "appinstall", "appfiles", "appenv", "apphelp", "apprun", "applabels",
        "appstart", "apptest",
    }
)
APPTAINER_HEADER_KEYS = frozenset(
    {
        "bootstrap", "from", "stage", "fingerprints", "osversion", "mirrorurl",
        "include", "updateurl", "confurl", "setopt", "product", "user", "regcode",
        "productpgp", "registryurl", "namespace",
    }
)
TEMPLATE_VAR_RE = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")


class BuildError(RuntimeError):
    """A build that cannot proceed; its message is one line meant for the user."""


class BuilderMissing(BuildError):
    """A builder tool (binary or Python module) is not installed."""


def log(msg: str) -> None:
    print(f"scalesweep {COMMAND}: {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- hashing


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def content_digest(path: str | os.PathLike, exclude: tuple[str, ...] = DIGEST_EXCLUDE) -> str:
    """Reproducible digest of an image directory tree: ``"sha256:<hex>"``.

    Equal for two independent builds of the same content (see DIGEST_METHOD): names
    are sorted, owners are numeric and relative to the root's owner (an unprivileged
    build owns every file by the builder's uid), mtimes are ignored. Top-level names in
    ``exclude`` are skipped. A regular file (e.g. a SquashFS or SIF image) is hashed as
    bytes, which is NOT reproducible between builds: hash the directory it came from.
    """
    root = Path(path)
    st_root = os.lstat(root)
    if stat.S_ISREG(st_root.st_mode):
        return "sha256:" + sha256_file(root)
    if not stat.S_ISDIR(st_root.st_mode):
        raise BuildError(f"content_digest: {root} is neither a directory nor a file")
    uid0, gid0 = st_root.st_uid, st_root.st_gid
    h = hashlib.sha256()
    h.update(b"scalesweep-tree-v1\0")
    skip = {e.encode() for e in exclude}

    def walk(dirpath: bytes, rel: bytes) -> None:
        with os.scandir(dirpath) as it:
            names = sorted(e.name for e in it)
        for name in names:
            if not rel and name in skip:
                continue
            full = os.path.join(dirpath, name)
            relname = rel + b"/" + name if rel else name
            st = os.lstat(full)
            mode = st.st_mode
            uid = 0 if st.st_uid == uid0 else st.st_uid
            gid = 0 if st.st_gid == gid0 else st.st_gid
            perm = stat.S_IMODE(mode)
            if stat.S_ISDIR(mode):
                kind, extra = b"d", b""
            elif stat.S_ISREG(mode):
                kind = b"f"
                extra = b"%d:%s" % (st.st_size, sha256_file(full).encode())
            elif stat.S_ISLNK(mode):
                kind, extra = b"l", os.readlink(full)
            elif stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
                kind = b"c" if stat.S_ISCHR(mode) else b"b"
                extra = b"%d:%d" % (os.major(st.st_rdev), os.minor(st.st_rdev))
            elif stat.S_ISFIFO(mode):
                kind, extra = b"p", b""
            else:
                kind, extra = b"s", b""
            h.update(b"%s\0%s\0%o\0%d\0%d\0%s\n" % (kind, relname, perm, uid, gid, extra))
            if kind == b"d":
                walk(full, relname)

    walk(os.fsencode(root), b"")
    return "sha256:" + h.hexdigest()


def tree_size(path: str | os.PathLike) -> int:
    """Bytes of regular files (each inode once) plus symlink lengths; a file's size."""
    p = Path(path)
    st = os.lstat(p)
    if not stat.S_ISDIR(st.st_mode):
        return st.st_size
    seen: set[tuple[int, int]] = set()
    total = 0
    for dirpath, dirnames, filenames in os.walk(p):
        for name in filenames + dirnames:
            s = os.lstat(os.path.join(dirpath, name))
            if stat.S_ISREG(s.st_mode):
                if (s.st_dev, s.st_ino) in seen:
                    continue
                seen.add((s.st_dev, s.st_ino))
                total += s.st_size
            elif stat.S_ISLNK(s.st_mode):
                total += s.st_size
    return total


# ------------------------------------------------------------------ requirements


REQ_NAME_RE = re.compile(r"^\s*([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)\s*(\[[^\]]*\])?\s*(.*)$")


def canonical_name(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_lines(text: str) -> list[str]:
    """The requirement specifiers of a requirements file: comments and blanks dropped."""
    out = []
    for line in text.splitlines():
        line = line.split(" #", 1)[0].strip() if not line.lstrip().startswith("#") else ""
        if line:
            if line.startswith("-"):
                raise BuildError(
                    f"requirements: option lines are not supported ({line!r}); list "
                    "plain specifiers, local wheels are found via --find-links"
                )
            out.append(line)
    return out


def normalized_requirements(text: str) -> str:
    """Requirements text as it enters cache keys: comments/whitespace do not count."""
    return "\n".join(requirement_lines(text)) + "\n"


def exact_pins(text: str) -> dict[str, str]:
    """``{canonical name: version}`` for every ``name[extras]==version`` line."""
    pins = {}
    for line in requirement_lines(text):
        m = REQ_NAME_RE.match(line.split(";", 1)[0])
        if not m:
            continue
        spec = m.group(3).strip()
        mm = re.fullmatch(r"==\s*([A-Za-z0-9.+!_-]+)", spec)
        if mm:
            pins[canonical_name(m.group(1))] = mm.group(1)
    return pins


def wheel_name_version(filename: str) -> tuple[str, str]:
    parts = Path(filename).name[: -len(".whl")].split("-")
    return canonical_name(parts[0]), parts[1]


def local_version_matches(pinned: str, candidate: str) -> bool:
    """``torch==2.13.0`` accepts ``2.13.0+cpu`` (PEP 440: local label ignored)."""
    return candidate == pinned or ("+" not in pinned and candidate.split("+", 1)[0] == pinned)


def local_wheel_pins(text: str, dirs: list[Path]) -> dict[str, Path]:
    """For each exact pin with a matching wheel in a local directory: that wheel file.

    Used to pin e.g. ``torch==2.13.0`` to the local ``torch-2.13.0+cpu`` wheel so pip
    never resolves a CUDA torch from an index.
    """
    found: dict[str, Path] = {}
    pins = exact_pins(text)
    for d in dirs:
        if not d.is_dir():
            continue
        for whl in sorted(d.glob("*.whl")):
            name, version = wheel_name_version(whl.name)
            if name in pins and name not in found and local_version_matches(pins[name], version):
                found[name] = whl
    return found


def pip_find_links(python: str) -> list[Path]:
    """Local find-links directories from pip's configuration and environment."""
    dirs: list[str] = []
    try:
        out = subprocess.run(
            [python, "-m", "pip", "config", "list"], capture_output=True, text=True, timeout=60
        ).stdout
    except (OSError, subprocess.SubprocessError):
        out = ""
    for line in out.splitlines():
        key, _, value = line.partition("=")
        if key.strip().endswith("find-links"):
            dirs += value.strip().strip("'\"").split()
    dirs += os.environ.get("PIP_FIND_LINKS", "").split()
    result = []
    for d in dirs:
        d = d[len("file://"):] if d.startswith("file://") else d
        if "://" not in d and d:
            p = Path(d).expanduser()
            if p not in result:
                result.append(p)
    return result


@dataclass
class Wheelhouse:
    path: Path
    wheels: dict[str, str]  # file name -> sha256
    key: str
    cached: bool
    local_pins: dict[str, str] = field(default_factory=dict)  # name -> wheel file


def stage_wheelhouse(
    requirements: Path,
    cache_dir: Path,
    python: str = sys.executable,
    find_links: list[Path] | None = None,
    expect_python: tuple[int, int] | None = None,
) -> Wheelhouse:
    """Stage every wheel the requirements need into ``<cache>/wheelhouse/<key>``.

    ``pip wheel --prefer-binary`` downloads binary wheels and builds the rest (sdists)
    on the host. Exact pins that have a wheel in a local find-links directory (pip's
    configured ones, ``<cache>/wheels``, ``--find-links``) are constrained to that exact
    file version (torch -> the local +cpu wheel). Keyed by the normalised requirements
    and the hashes of those local wheels; a complete wheelhouse is reused offline.
    """
    text = requirements.read_text()
    pyver = subprocess.run(
        [python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()
    if expect_python and pyver != "%d.%d" % expect_python:
        raise BuildError(
            f"host Python {pyver} ({python}) would stage cp{pyver.replace('.', '')} wheels "
            f"but the image's python3 is {expect_python[0]}.{expect_python[1]}; pass "
            f"--python /path/to/python{expect_python[0]}.{expect_python[1]}"
        )
    dirs = list(find_links or []) + [cache_dir / "wheels"] + pip_find_links(python)
    pins = local_wheel_pins(text, dirs)
    key_payload = {
        "requirements": normalized_requirements(text),
        "python": pyver,
        "local": {n: [p.name, sha256_file(p)] for n, p in sorted(pins.items())},
    }
    key = sha256_text(json.dumps(key_payload, sort_keys=True))[:20]
    dest = cache_dir / "wheelhouse" / key
    if not (dest / ".complete").exists():
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.parent / f".{key}.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        constraints = tmp / "constraints.txt"
        constraints.write_text(
            "".join(f"{n}=={wheel_name_version(p.name)[1]}\n" for n, p in sorted(pins.items()))
        )
        cmd = [python, "-m", "pip", "wheel", "--prefer-binary", "--wheel-dir", str(tmp),
               "-r", str(requirements.resolve()), "-c", str(constraints)]
        for d in dirs:
            if d.is_dir():
                cmd += ["--find-links", str(d)]
        log("staging wheelhouse: " + " ".join(cmd))
        env = dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1")
        if subprocess.run(cmd, env=env).returncode != 0:
            shutil.rmtree(tmp, ignore_errors=True)
            raise BuildError(f"pip wheel failed for {requirements} (see output above)")
        constraints.unlink()
        bad = [w.name for w in tmp.glob("*.whl")
               if re.match(r"(nvidia[_-]|triton-)", w.name.lower())]
        if bad:
            shutil.rmtree(tmp, ignore_errors=True)
            raise BuildError(f"wheelhouse pulled CUDA wheels {bad[:3]}: pin torch to the local CPU wheel")
        (tmp / "requirements.txt").write_text(normalized_requirements(text))
        (tmp / ".complete").write_text(json.dumps(key_payload, indent=1, sort_keys=True))
        try:
            os.rename(tmp, dest)
        except OSError:  # another build won the race: keep theirs
            shutil.rmtree(tmp, ignore_errors=True)
        cached = False
    else:
        cached = True
    wheels = {w.name: sha256_file(w) for w in sorted(dest.glob("*.whl"))}
    return Wheelhouse(dest, wheels, key, cached, {n: p.name for n, p in pins.items()})


# ------------------------------------------------------------------- cache key


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


# ------------------------------------------------------------ command builders
# (the runtimes' own command lines are methods of their classes: scalesweep.platform.runtimes)


def debootstrap_command(
    rootfs: str, suite: str, mirror: str, variant: str = BASE_VARIANT,
    include: tuple[str, ...] = (), debootstrap: str = "debootstrap",
    private_mounts: bool = True,
) -> list[str]:
    """debootstrap in a private mount namespace (its /proc, /sys mounts never leak)."""
    cmd = ["unshare", "--mount", "--propagation", "private"] if private_mounts else []
    cmd += [debootstrap, f"--variant={variant}"]
    if include:
        cmd.append("--include=" + ",".join(include))
    return cmd + [suite, str(rootfs), mirror]


def base_tar_command(rootfs: str, tarball: str) -> list[str]:
    """Tar a rootfs for ``ch-image import``: numeric owners, sorted, NO device nodes.

    /dev, /proc, /sys contents are excluded: ``ch-image import`` of a directory copies
    device nodes as files (reading /dev/zero or /dev/full fills the disk).
    """
    return ["tar", "--numeric-owner", "--sort=name", "-C", str(rootfs),
            "--exclude=./dev/*", "--exclude=./proc/*", "--exclude=./sys/*",
            "-cf", str(tarball), "."]


def mksquashfs_command(src_dir: str, dest: str, source_date_epoch: int,
                       mksquashfs: str = "mksquashfs") -> list[str]:
    """Directory image -> SquashFS for ``ch-run`` (mounted with squashfuse). Not
    ``ch-convert`` (:meth:`~scalesweep.platform.runtimes.Charliecloud.convert_command`): it keeps
    file mtimes, so its bytes differ from build to build.

    ch-convert's settings (64 KiB blocks, all files owned by root) plus fixed file and
    filesystem timestamps and no xattrs, so the same tree gives the same bytes.
    """
    return [mksquashfs, str(src_dir), str(dest), "-b", "65536", "-noappend", "-all-root",
            "-no-xattrs", "-all-time", str(source_date_epoch),
            "-mkfs-time", str(source_date_epoch), "-no-progress"]


# Paths ch-run needs in an image (ch-convert's mount_points_ensure).
CH_RUN_MOUNT_POINTS = ("bin", "dev", "etc", "mnt", "proc", "usr", *(f"mnt/{i}" for i in range(10)),
                       "etc/hosts", "etc/resolv.conf")


# ------------------------------------------- definition files (Apptainer, SingularityCE)


def load_build_args(path: str | os.PathLike) -> dict[str, str]:
    """KEY=VALUE lines (``#`` comments, blank lines ignored; the format of
    ``apptainer build --build-arg-file``), in file order."""
    args: dict[str, str] = {}
    for n, raw in enumerate(Path(path).read_text().splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        key = key.strip()
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            raise BuildError(f"{path}:{n}: expected KEY=VALUE, got {raw!r}")
        args[key] = value.strip().strip("'\"")
    return args


@dataclass
class ApptainerDef:
    header: dict[str, str]  # the final stage's (the image's base)
    sections: list[tuple[str, str]]  # (name, body) in order, every stage's
    arguments: dict[str, str]  # %arguments defaults
    used_vars: set[str]
    stages: list[dict[str, str]] = field(default_factory=list)  # every stage's header, in order


def parse_apptainer_def(text: str) -> ApptainerDef:
    """Parse an Apptainer definition file; raises BuildError on structural problems.

    Checks: the header starts with ``Bootstrap:``, header keys are known, section names
    are known, every ``{{ VAR }}`` has a default in ``%arguments``.
    """
    header: dict[str, str] = {}
    stages = [header]
    stage_lines: list[list[str]] = [[]]  # each stage's text, for its {{ VAR }}s
    sections: list[tuple[str, str]] = []
    section_stage: list[int] = []  # the stage of each section
    current: str | None = None
    body: list[str] = []

    def close_section() -> None:
        if current is not None:
            sections.append((current, "\n".join(body)))
            section_stage.append(len(stages) - 1)

    for n, raw in enumerate(text.splitlines(), 1):
        if (current is not None or "bootstrap" in header) and re.match(r"^Bootstrap:", raw, re.I):
            # a multi-stage build: the next stage's header (`Stage: <name>`; a later
            # stage copies files from an earlier one with `%files from <name>`)
            close_section()
            current, body, header = None, [], {}
            stages.append(header)
            stage_lines.append([])
        stage_lines[-1].append(raw)
        m = re.match(r"^%([A-Za-z]+)\b(.*)$", raw)
        if m:
            close_section()
            current, body = m.group(1).lower(), []
            if current not in APPTAINER_SECTIONS:
                raise BuildError(f"line {n}: unknown section %{m.group(1)}")
            continue
        if current is None:
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            key, sep, value = line.partition(":")
            if not sep:
                raise BuildError(f"line {n}: header line is not 'Key: value': {raw!r}")
            k = key.strip().lower()
            if k not in APPTAINER_HEADER_KEYS:
                raise BuildError(f"line {n}: unknown header keyword {key.strip()!r}")
            if not header and k != "bootstrap":
                raise BuildError(f"line {n}: the header must start with 'Bootstrap:'")
            header[k] = value.strip()
        else:
            body.append(raw)
    close_section()
    for stage in stages:
        if "bootstrap" not in stage:
            raise BuildError("no 'Bootstrap:' header")
        if stage["bootstrap"] in ("docker", "localimage", "oras", "library", "shub") and "from" not in stage:
            raise BuildError(f"Bootstrap: {stage['bootstrap']} needs a 'From:' header")
    if len(stages) > 1 and not all(st.get("stage") for st in stages):
        raise BuildError("a multi-stage definition needs a 'Stage:' in every header")
    # Apptainer reads %arguments per stage: each stage's {{ VAR }} needs its own default;
    # `arguments` is every stage's (a build arg fills a {{ VAR }} of any stage)
    own: list[dict[str, str]] = [{} for _ in stages]
    for (name, sbody), i in zip(sections, section_stage):
        if name == "arguments":
            own[i].update(_arguments_section(sbody))
    arguments = {k: v for stage_args in own for k, v in stage_args.items()}
    for i, lines in enumerate(stage_lines):
        missing = sorted(set(TEMPLATE_VAR_RE.findall("\n".join(lines))) - set(own[i]))
        if missing:
            where = f" (stage {i + 1})" if len(stages) > 1 else ""
            raise BuildError(f"{{{{ VAR }}}} without a %arguments default{where}: {', '.join(missing)}")
    used = set(TEMPLATE_VAR_RE.findall(text))
    return ApptainerDef(header, sections, arguments, used, stages)


def _arguments_section(body: str) -> dict[str, str]:
    """``KEY=VALUE`` lines of an %arguments section (comments and blanks skipped)."""
    out = {}
    for line in body.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise BuildError(f"%arguments: expected KEY=VALUE, got {line!r}")
        out[key.strip()] = value.strip().strip("'\"")
    return out


# ------------------------------------------------------------------ builders


def builder_runtime(builder: str) -> runtimes.Runtime:
    """The runtime class that builds with ``builder`` (a runtime's name)."""
    if builder not in runtimes.builders():
        raise BuildError(f"unknown builder {builder!r} (choose from {', '.join(runtimes.builders())})")
    return runtimes.runtime(builder)


def check_builder(builder: str, fmt: str | None = None, which=shutil.which,
                  ch_python: str = CHARLIECLOUD.builder_python) -> dict[str, str]:
    """Paths of the tools a builder needs; BuilderMissing (one line) if any is absent.

    For charliecloud also checks that ch-image can start: it needs the Python module
    ``lark`` (Debian: python3-lark, pulled in by charliecloud) and is therefore run with
    /usr/bin/python3, not whatever ``python3`` is first on PATH.
    """
    rt = builder_runtime(builder)
    tools = {}
    for tool in tuple(rt.build_tools) + FORMAT_TOOLS.get((builder, fmt or ""), ()):
        path = which(tool)
        if not path:
            hint = TOOL_HINTS.get(tool) or rt.install_hint
            raise BuilderMissing(f"{builder} builder needs '{tool}', not found on PATH: {hint}")
        tools[tool] = path
    if rt is CHARLIECLOUD:
        py = ch_python if os.access(ch_python, os.X_OK) else which("python3")
        ok = py and subprocess.run([py, "-c", "import lark"], capture_output=True).returncode == 0
        if not ok:
            raise BuilderMissing(
                "ch-image needs the Python module 'lark': install the Debian package "
                "'python3-lark' (a dependency of 'charliecloud') for /usr/bin/python3"
            )
        tools["python_for_ch_image"] = py
    return tools


def builder_version(builder: str, tools: dict[str, str]) -> str:
    """The builder's version (ch-image's for charliecloud, the runtime's own otherwise)."""
    rt = builder_runtime(builder)
    if rt is CHARLIECLOUD:
        argv = rt.builder_prefix(tools["python_for_ch_image"], tools["ch-image"]) + ["--version"]
    else:
        argv = rt.version_command(tools[rt.default_bin])
    return rt.parse_version(run_capture(argv))


def debootstrap_version(path: str) -> str:
    try:
        return run_capture([path, "--version"]).strip().split()[-1]
    except BuildError:
        return "unknown"


def run_capture(cmd: list[str], env: dict | None = None) -> str:
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise BuildError(f"{' '.join(cmd[:4])} ... failed ({r.returncode}): {r.stderr.strip()[-500:]}")
    return r.stdout


def run_logged(cmd: list[str], logfile: Path, env: dict | None = None, cwd: str | None = None) -> None:
    log("$ " + " ".join(cmd))
    with open(logfile, "ab") as f:
        f.write(("\n$ " + " ".join(cmd) + "\n").encode())
        f.flush()
        r = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, cwd=cwd)
    if r.returncode != 0:
        tail = logfile.read_bytes()[-3000:].decode(errors="replace")
        raise BuildError(f"command failed ({r.returncode}): {' '.join(cmd)}\n--- {logfile} (tail) ---\n{tail}")


# ---------------------------------------------------------------- apt mirror


@dataclass
class Mirror:
    uri: str
    suite: str
    snapshot: str | None = None  # e.g. http://snapshot.debian.org/archive/debian/20250520T000000Z


def parse_apt_sources(text: str, deb822: bool) -> list[Mirror]:
    """Debian archive entries (``/debian`` URIs) of one sources file."""
    out: list[Mirror] = []
    if deb822:
        for stanza in re.split(r"\n\s*\n", text):
            fields: dict[str, str] = {}
            snapshot = None
            for line in stanza.splitlines():
                s = line.strip()
                if s.startswith("#"):
                    m = re.search(r"(https?://snapshot\.debian\.org/\S+)", s)
                    snapshot = m.group(1) if m else snapshot
                    continue
                k, sep, v = s.partition(":")
                if sep:
                    fields[k.strip().lower()] = v.strip()
            if "deb" not in fields.get("types", "").split():
                continue
            if fields.get("enabled", "yes").lower() == "no":
                continue
            for uri in fields.get("uris", "").split():
                for suite in fields.get("suites", "").split():
                    out.append(Mirror(uri.rstrip("/"), suite, snapshot))
    else:
        for line in text.splitlines():
            parts = line.split("#", 1)[0].split()
            if len(parts) >= 3 and parts[0] == "deb":
                rest = [p for p in parts[1:] if not p.startswith("[")]
                if len(rest) >= 2:
                    out.append(Mirror(rest[0].rstrip("/"), rest[1]))
    return out


def host_mirror(suite: str, sources_dir: str = "/etc/apt/sources.list.d",
                sources_list: str = "/etc/apt/sources.list") -> Mirror:
    """The host apt's Debian mirror that carries ``suite`` (env SCALESWEEP_DEBIAN_MIRROR wins)."""
    override = os.environ.get("SCALESWEEP_DEBIAN_MIRROR")
    if override:
        return Mirror(override.rstrip("/"), suite)
    entries: list[Mirror] = []
    d = Path(sources_dir)
    files = sorted(d.glob("*.sources")) + sorted(d.glob("*.list")) if d.is_dir() else []
    if Path(sources_list).is_file():
        files.insert(0, Path(sources_list))
    for f in files:
        entries += parse_apt_sources(f.read_text(errors="replace"), f.suffix == ".sources")
    for e in entries:
        if e.suite == suite and re.search(r"/debian$", e.uri):
            return e
    raise BuildError(
        f"no Debian mirror for suite {suite!r} in {sources_dir}: set SCALESWEEP_DEBIAN_MIRROR "
        "(e.g. http://deb.debian.org/debian)"
    )


def mirror_release(mirror: Mirror, timeout: float = 20) -> dict:
    """Date/Version/sha256 of the mirror's InRelease now: the apt state the build saw."""
    url = f"{mirror.uri}/dists/{mirror.suite}/InRelease"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            data = r.read()
    except Exception as e:  # noqa: BLE001 - provenance is best effort
        return {"url": url, "error": str(e)[:200]}
    text = data.decode(errors="replace")
    info = {"url": url, "sha256": hashlib.sha256(data).hexdigest()}
    for k in ("Date", "Version", "Suite", "Codename"):
        m = re.search(rf"^{k}:\s*(.+)$", text, re.M)
        if m:
            info[k.lower()] = m.group(1).strip()
    return info


def source_date_epoch(mirror: Mirror) -> int:
    env = os.environ.get("SOURCE_DATE_EPOCH")
    if env and env.isdigit():
        return int(env)
    if mirror.snapshot:
        m = re.search(r"/(\d{8})T(\d{6})Z", mirror.snapshot)
        if m:
            t = _dt.datetime.strptime(m.group(1) + m.group(2), "%Y%m%d%H%M%S")
            return int(t.replace(tzinfo=_dt.timezone.utc).timestamp())
    return DEFAULT_SOURCE_DATE_EPOCH


# ------------------------------------------------------------------- helpers


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


def image_packages(runner: list[str], env: dict) -> dict:
    """dpkg-query + pip freeze inside the image (runner = command prefix up to argv)."""
    pk: dict = {}
    for kind, argv, sep in (
        ("dpkg", ["dpkg-query", "-W", "-f", "${Package}\t${Version}\n"], "\t"),
        ("pip", [runtimes.IMAGE_PYTHON, "-m", "pip", "freeze", "--all", "--disable-pip-version-check"], "=="),
    ):
        r = subprocess.run(runner + argv, capture_output=True, text=True, env=env)
        if r.returncode != 0:
            pk[kind], pk[f"{kind}_error"] = {}, r.stderr.strip()[-300:]
            continue
        pairs = (line.partition(sep) for line in r.stdout.splitlines())
        pk[kind] = {name: ver for name, found, ver in pairs if name and found}
    return pk


def clean_env(**extra: str) -> dict:
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin",
        "USER": user_name(),
        "HOME": os.environ.get("HOME", "/root"),
        "LC_ALL": "C",
    }
    for k in ("TMPDIR",):
        if k in os.environ:
            env[k] = os.environ[k]
    env.update(extra)
    return env


# -------------------------------------------------------------- charliecloud


def make_base_tarball(cache_dir: Path, suite: str, mirror: Mirror, tools: dict, logfile: Path) -> tuple[Path, dict]:
    """Debian rootfs (debootstrap, cached as a tarball keyed by suite/mirror/variant)."""
    info = {
        "distribution": "debian", "suite": suite, "variant": BASE_VARIANT, "mirror": mirror.uri,
        "debootstrap": debootstrap_version(tools["debootstrap"]),
    }
    key = sha256_text(json.dumps(info, sort_keys=True))[:16]
    tarball = cache_dir / "base" / f"debian-{suite}-{BASE_VARIANT}-{key}.tar"
    meta = tarball.with_suffix(".json")
    with file_lock(tarball.with_suffix(".lock")):
        if tarball.exists() and meta.exists():
            log(f"base rootfs cached: {tarball}")
            return tarball, json.loads(meta.read_text())
        if os.geteuid() != 0:
            raise BuildError(
                "debootstrap needs root to make the base rootfs; run this once as root, or "
                f"place a rootfs tarball (no device nodes) at {tarball} with {meta}"
            )
        work = cache_dir / "tmp" / f"base-{key}-{os.getpid()}"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        try:
            rootfs = work / "rootfs"
            t0 = time.monotonic()
            run_logged(debootstrap_command(str(rootfs), suite, mirror.uri, debootstrap=tools["debootstrap"]), logfile)
            lists = sorted((rootfs / "var/lib/apt/lists").glob("*Release"))
            release = {}
            if lists:
                text = lists[0].read_text(errors="replace")
                for k in ("Date", "Version"):
                    m = re.search(rf"^{k}:\s*(.+)$", text, re.M)
                    if m:
                        release[k.lower()] = m.group(1).strip()
            tmp_tar = work / "base.tar"
            run_logged(base_tar_command(str(rootfs), str(tmp_tar)), logfile)
            assert_no_device_nodes(tmp_tar)
            info.update(release_at_debootstrap=release, debootstrap_seconds=round(time.monotonic() - t0, 1),
                        created=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))
            tarball.parent.mkdir(parents=True, exist_ok=True)
            os.replace(tmp_tar, tarball)
            write_json_atomic(meta, info)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return tarball, info


def normalize_ch_metadata(image: Path, sde: int) -> None:
    """Pin the build-time stamps in /ch/metadata.json ("created" per instruction) to
    SOURCE_DATE_EPOCH, so a SquashFS made from the tree is bit-reproducible too."""
    meta = image / "ch" / "metadata.json"
    if not meta.is_file():
        return
    stamp = _dt.datetime.fromtimestamp(sde, _dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    data = json.loads(meta.read_text())
    for entry in data.get("history", []):
        if "created" in entry:
            entry["created"] = stamp
    st = os.stat(meta)
    tmp = meta.with_name(".metadata.json.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    os.chmod(tmp, stat.S_IMODE(st.st_mode))
    os.replace(tmp, meta)


def assert_no_device_nodes(tarball: Path) -> None:
    with tarfile.open(tarball) as tf:
        for m in tf:
            if m.isdev():
                raise BuildError(f"{tarball} holds device node {m.name}: refusing to import it")


def _base_facts(base_info: dict, mirror: Mirror, release: dict, sde: int) -> dict:
    base = dict(base_info)
    base.update(mirror_release_at_build=release, host_snapshot_hint=mirror.snapshot,
                source_date_epoch=sde)
    return base


def build_charliecloud(
    recipe: Path, wheelhouse: Wheelhouse, entry_tmp: Path, cache_dir: Path, tools: dict,
    suite: str, mirror: Mirror, sde: int, logfile: Path, build_args: dict | None = None,
) -> dict:
    """Cold build into ``entry_tmp/image``; returns provenance facts (base, release)."""
    tarball, base_info = make_base_tarball(cache_dir, suite, mirror, tools, logfile)
    prefix = CHARLIECLOUD.builder_prefix(tools["python_for_ch_image"], tools["ch-image"])
    storage = cache_dir / "tmp" / f"ch-storage-{os.getpid()}"
    shutil.rmtree(storage, ignore_errors=True)
    storage.parent.mkdir(parents=True, exist_ok=True)
    env = clean_env()
    tag = f"scalesweep-build-{os.getpid()}"
    try:
        run_logged(CHARLIECLOUD.import_command(str(tarball), f"localhost/scalesweep-debian:{suite}",
                                               str(storage), prefix),
                   logfile, env=env)
        release = mirror_release(mirror)  # the apt state the RUN apt-get update sees
        run_logged(
            CHARLIECLOUD.build_command(
                str(recipe), tag, str(storage), context=str(recipe.parent),
                binds={str(wheelhouse.path): "/wheelhouse"},
                build_args={**(build_args or {}), "SOURCE_DATE_EPOCH": str(sde)}, prefix=prefix,
            ),
            logfile, env=env,
        )
        img = storage / "img" / tag
        if not img.is_dir():
            raise BuildError(f"ch-image reported success but {img} is missing")
        normalize_ch_metadata(img, sde)
        os.rename(img, entry_tmp / CHARLIECLOUD.image_file)
    finally:
        shutil.rmtree(storage, ignore_errors=True)
    return {"base": _base_facts(base_info, mirror, release, sde)}


# ------------------------------------------------------------------ cold builds


@dataclass
class Build:
    """What a cold build needs: one per :func:`build_image` call."""

    rt: runtimes.Runtime
    recipe: Path
    tools: dict[str, str]
    cache_dir: Path
    logfile: Path
    key: str
    build_args: dict[str, str] = field(default_factory=dict)
    fakeroot: bool = False
    # Dockerfile builds (offline: debootstrap base + host wheelhouse)
    wheelhouse: Wheelhouse | None = None
    suite: str = ""
    mirror: Mirror | None = None
    sde: int = DEFAULT_SOURCE_DATE_EPOCH


def cold_charliecloud(b: Build, entry_tmp: Path) -> dict:
    facts = build_charliecloud(b.recipe, b.wheelhouse, entry_tmp, b.cache_dir, b.tools,
                               b.suite, b.mirror, b.sde, b.logfile, b.build_args)
    img = entry_tmp / CHARLIECLOUD.image_file
    runner = CHARLIECLOUD.exec_command(str(img), [], bin=b.tools["ch-run"])
    facts["packages"] = image_packages(runner, clean_env())
    facts["content_digest"] = content_digest(img)
    facts["tree_size_bytes"] = tree_size(img)
    return facts


def podman_build_tag(key: str) -> str:
    """The local-storage name of a cold podman build (one per cache key)."""
    return f"localhost/scalesweep-build:{key[:16]}"


def cold_podman(b: Build, entry_tmp: Path) -> dict:
    """podman import (the debootstrap base), podman build, podman save (a directory)."""
    podman = b.tools[PODMAN.default_bin]
    tarball, base_info = make_base_tarball(b.cache_dir, b.suite, b.mirror, b.tools, b.logfile)
    run_logged(PODMAN.import_command(str(tarball), f"localhost/scalesweep-debian:{b.suite}", podman),
               b.logfile)
    release = mirror_release(b.mirror)
    tag = podman_build_tag(b.key)
    run_logged(PODMAN.build_command(str(b.recipe), tag, str(b.recipe.parent),
                                    binds={str(b.wheelhouse.path): "/wheelhouse"},
                                    build_args={**b.build_args, "SOURCE_DATE_EPOCH": str(b.sde)},
                                    bin=podman),
               b.logfile)
    img = entry_tmp / PODMAN.image_file
    run_logged(PODMAN.save_command(tag, str(img), podman), b.logfile)
    return {
        "base": _base_facts(base_info, b.mirror, release, b.sde),
        "build_tag": tag,
        "packages": image_packages(PODMAN.exec_command(tag, [], bin=podman), dict(os.environ)),
        "content_digest": content_digest(img),
        "content_digest_note": "tree digest of the saved image directory (its layer tarballs "
                               "keep build-time mtimes: not reproducible between builds)",
        "tree_size_bytes": tree_size(img),
    }


def cold_definition(b: Build, entry_tmp: Path) -> dict:
    """``apptainer|singularity build`` of a definition file into a SIF."""
    exe = b.tools[b.rt.default_bin]
    sif = entry_tmp / b.rt.image_file
    cmd = b.rt.build_command(str(sif), str(b.recipe.resolve()), b.build_args,
                             fakeroot=b.fakeroot, bin=exe)
    # %files sources relative to the repository root, as in the recipes
    run_logged(cmd, b.logfile, cwd=str(REPO_ROOT))
    inspected = inspect_image(b.rt, sif, exe)
    return {
        "build_command": cmd,
        "build_args": b.build_args,
        "base": def_base(b.recipe.read_text(), b.build_args),
        "labels": inspected.get("labels"),
        "packages": image_packages(b.rt.exec_command(str(sif), [], bin=exe), dict(os.environ)),
        "content_digest": content_digest(sif),
        "content_digest_note": "sha256 of the SIF file (SIF builds are not bit-reproducible)",
        "tree_size_bytes": tree_size(sif),
    }


# The cold build of each builder; a runtime whose recipes are definition files builds
# like Apptainer without an entry here.
COLD_BUILDS = {"charliecloud": cold_charliecloud, "podman": cold_podman}
COLD_BY_RECIPE = {"definition": cold_definition}


def load_podman_image(out: Path, podman: str) -> str:
    """Copy the placed image into the user's podman storage under the name the podman
    runtime runs (:meth:`~scalesweep.platform.runtimes.Podman.storage_reference` of its path);
    returns that name. Cheap when the layers are already there."""
    ref = PODMAN.storage_reference(str(out.resolve()))
    image_id = run_capture(PODMAN.load_command(str(out), podman)).split()[-1]
    run_capture(PODMAN.tag_command(image_id, ref, podman))
    return ref


# ------------------------------------------------------------------ the build


def build_image(
    builder: str,
    recipe: str | os.PathLike,
    out: str | os.PathLike,
    manifest: str | os.PathLike,
    requirements: str | os.PathLike | None = None,
    cache_dir: str | os.PathLike = DEFAULT_CACHE,
    fmt: str | None = None,
    build_args_file: str | os.PathLike | None = None,
    build_args: dict[str, str] | None = None,
    fakeroot: bool = False,
    link: str = "hardlink",
    python: str = sys.executable,
    find_links: list[str] | None = None,
    no_cache: bool = False,
    tools: dict[str, str] | None = None,
) -> dict:
    """Build (or reuse) an image, place it at ``out``, write ``manifest``; return it.

    ``build_args`` (the site's, then overrides) win over those of ``build_args_file``;
    ``tools``: what :func:`check_builder` found, when the caller checked already."""
    t0 = time.monotonic()
    with_user(os.environ)  # ch-image and ch-run refuse to start without it
    rt = builder_runtime(builder)
    recipe = Path(recipe)
    out = Path(out)
    manifest = Path(manifest)
    cache_dir = Path(cache_dir).expanduser().resolve()
    fmt = fmt or rt.image_formats[0]
    if fmt not in rt.image_formats:
        raise BuildError(f"--format {fmt} is not available with --builder {builder} "
                         f"(it makes {', '.join(rt.image_formats)})")
    tools = tools or check_builder(builder, fmt)  # (a) before doing anything else
    if not recipe.is_file():
        raise BuildError(f"recipe not found: {recipe}")
    recipe_text = recipe.read_text()
    req_path = Path(requirements) if requirements else None
    req_text = req_path.read_text() if req_path else ""
    version = builder_version(builder, tools)
    extra: dict = {"context": recipe_context_hashes(recipe)}
    args = dict(load_build_args(build_args_file)) if build_args_file else {}
    args.update(build_args or {})
    wheelhouse = None
    suite, mirror, sde = "", None, DEFAULT_SOURCE_DATE_EPOCH
    if rt.recipe_kind == "dockerfile":
        m = BASE_FROM_RE.search(recipe_text)
        if not m:
            raise BuildError(
                f"{recipe}: offline {builder} builds need 'FROM localhost/scalesweep-debian:<suite>'"
            )
        suite = m.group(1)
        if not req_path:
            raise BuildError(f"--requirements is required with --builder {builder}")
        mirror = host_mirror(suite)
        sde = source_date_epoch(mirror)
        wheelhouse = stage_wheelhouse(req_path, cache_dir, python=python,
                                      find_links=[Path(p).expanduser() for p in (find_links or [])],
                                      expect_python=DEBIAN_PYTHON.get(suite))
        extra["base"] = {"suite": suite, "variant": BASE_VARIANT, "mirror": mirror.uri,
                         "debootstrap": debootstrap_version(tools["debootstrap"]),
                         "source_date_epoch": sde}
        if args:  # absent when empty: the cache keys of builds without args stay as they were
            extra["build_args"] = dict(args)
    else:
        parsed = parse_apptainer_def(recipe_text)
        unknown = sorted(set(args) - set(parsed.arguments))
        if unknown:
            log(f"warning: build args not used by {recipe.name}: {', '.join(unknown)}")
        # The requirements file enters the key by content; its (absolute, checkout-
        # dependent) path is handed to the recipe's %files via REQUIREMENTS.
        extra["build_args"] = {k: v for k, v in args.items() if k != "REQUIREMENTS"}
        if req_path and "REQUIREMENTS" in parsed.arguments:
            args["REQUIREMENTS"] = str(req_path.resolve())
    key = cache_key(recipe_text, req_text, wheelhouse.wheels if wheelhouse else {},
                    builder, version, extra)
    entry = cache_dir / "images" / key
    logdir = cache_dir / "logs"
    logdir.mkdir(parents=True, exist_ok=True)
    logfile = logdir / f"{key[:16]}-{_dt.datetime.now().strftime('%Y%m%dT%H%M%S')}.log"
    build = Build(rt, recipe, tools, cache_dir, logfile, key, args, fakeroot,
                  wheelhouse, suite, mirror, sde)
    cold = COLD_BUILDS.get(rt.name) or COLD_BY_RECIPE[rt.recipe_kind]

    with file_lock(cache_dir / "images" / f"{key}.lock"):
        if no_cache and entry.exists():
            shutil.rmtree(entry)
        cached = (entry / ".complete").exists()
        if cached:
            log(f"cache hit {key[:16]}: {entry}")
            facts = json.loads((entry / "manifest.json").read_text())
        else:
            log(f"cache miss {key[:16]}: building ({builder} {version}); log: {logfile}")
            entry_tmp = entry.with_name(f".{key}.tmp-{os.getpid()}")
            shutil.rmtree(entry_tmp, ignore_errors=True)
            entry_tmp.mkdir(parents=True)
            try:
                tb = time.monotonic()
                facts = cold(build, entry_tmp)
                facts["cold_build_seconds"] = round(time.monotonic() - tb, 1)
                facts["built_at"] = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
                facts["built_on"] = socket.gethostname()
                facts["log"] = str(logfile)
                write_json_atomic(entry_tmp / "manifest.json", facts)
                (entry_tmp / ".complete").write_text(key + "\n")
                if entry.exists():
                    shutil.rmtree(entry)
                os.rename(entry_tmp, entry)
            except BaseException:
                shutil.rmtree(entry_tmp, ignore_errors=True)
                raise
        src = entry / rt.image_file
        squashfs_cached = None
        if rt is CHARLIECLOUD and fmt == "squashfs":
            sqfs = entry / "image.sqfs"
            squashfs_cached = sqfs.exists()
            if not squashfs_cached:
                missing = [p for p in CH_RUN_MOUNT_POINTS if not os.path.lexists(src / p)]
                if missing:
                    raise BuildError(f"{src} lacks ch-run mount points {missing}")
                tmp = entry / f".image.sqfs.tmp-{os.getpid()}"
                sde_img = (facts.get("base") or {}).get("source_date_epoch", DEFAULT_SOURCE_DATE_EPOCH)
                run_logged(mksquashfs_command(str(src), str(tmp), sde_img, tools["mksquashfs"]),
                           logfile, env=clean_env())
                os.replace(tmp, sqfs)
            src = sqfs
        placement = place_image(src, out, link)
        reference = load_podman_image(out, tools[PODMAN.default_bin]) if rt is PODMAN else None

    man = {
        "schema": MANIFEST_SCHEMA,
        "image": str(out),
        "format": fmt,
        "recipe": {"path": str(recipe), "sha256": sha256_text(recipe_text)},
        "requirements": ({"path": str(req_path), "sha256": sha256_file(req_path)} if req_path else None),
        "cache_key": key,
        "cache_entry": str(entry),
        "cached": cached,
        "placement": placement,
        "builder": {"name": builder, "version": version,
                    "tools": {k: v for k, v in tools.items() if k != "python_for_ch_image"}},
        # the base image: the definition's Bootstrap/From (build args filled in), or the
        # offline Debian base of a Dockerfile build (its suite, mirror and date)
        "base": ({**facts["base"], "from": f"localhost/scalesweep-debian:{suite}"}
                 if suite and facts.get("base") else facts.get("base")),
        "labels": facts.get("labels"),
        "source": "built",
        "build_args": facts.get("build_args"),
        "packages": facts.get("packages"),
        "wheels": ([{"file": n, "sha256": h} for n, h in wheelhouse.wheels.items()] if wheelhouse else None),
        "wheelhouse": ({"path": str(wheelhouse.path), "key": wheelhouse.key, "cached": wheelhouse.cached,
                        "local_pins": wheelhouse.local_pins} if wheelhouse else None),
        "size_bytes": tree_size(out),
        "tree_size_bytes": facts.get("tree_size_bytes"),
        "content_digest": facts.get("content_digest"),
        "content_digest_method": DIGEST_METHOD if rt is CHARLIECLOUD else facts.get("content_digest_note"),
        "build_seconds": round(time.monotonic() - t0, 2),
        "cold_build_seconds": facts.get("cold_build_seconds"),
        "built_at": facts.get("built_at"),
        "built_on": facts.get("built_on"),
        "log": str(logfile) if logfile.exists() else facts.get("log"),
    }
    if reference:
        man["reference"] = reference  # the name `podman run` starts it by
    if squashfs_cached is not None:
        man["squashfs_cached"] = squashfs_cached
    if fmt == "squashfs":
        man["file_sha256"] = sha256_file(out)
    write_json_atomic(manifest, man)
    return man


# ----------------------------------------------------- prebuilt: pulled or in place

DESCRIBE_COMMAND = "describe-image"  # `scalesweep describe-image`: rules pull_image, describe_image
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


def def_base(deffile: str, args: dict[str, str] | None = None) -> dict | None:
    """``{"bootstrap": ..., "from": ...}`` of a definition file, its ``{{ ARG }}`` filled
    from ``args`` then its %arguments defaults; None when it cannot be read."""
    try:
        parsed = parse_apptainer_def(deffile)
    except BuildError:
        return None
    values = {**parsed.arguments, **(args or {})}
    fill = lambda v: TEMPLATE_VAR_RE.sub(lambda m: values.get(m.group(1), m.group(0)), v)  # noqa: E731
    base = {k: fill(parsed.header[k]) for k in ("bootstrap", "from") if k in parsed.header}
    if len(parsed.stages) > 1:  # multi-stage: the final stage's base is the image's
        base["stages"] = [{k: fill(v) for k, v in st.items() if k in ("stage", "from")} for st in parsed.stages]
    return base


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


def _describe_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--builder", required=True, choices=runtimes.builders(),
                   help="the runtime that pulls or runs the image (apptainer, singularity, ...)")
    p.add_argument("--image", required=True,
                   help="with --pull: a registry reference (oras://, docker://, library://, https://); "
                        "else the image's path")
    p.add_argument("--pull", action="store_true", help="pull --image to --out first")
    p.add_argument("--out", help="where the pulled image goes (with --pull)")
    p.add_argument("--format", help="the image's format (default: the builder's first)")
    p.add_argument("--manifest", required=True, help="provenance JSON (written atomically)")


def run_describe(a: argparse.Namespace) -> int:
    if a.pull and not a.out:
        log("error: --pull needs --out")
        return 2
    try:
        man = describe_image(a.builder, a.image, a.manifest, out=a.out, pull=a.pull, fmt=a.format)
    except BuildError as e:
        log(f"error: {e}")
        return 1
    how = f"pulled {a.image} to" if a.pull else "described"
    log(f"{how} {man['image']}: {man['size_bytes'] / 1e6:.0f} MB digest {man['content_digest']}"
        f"{' base ' + man['base']['from'] if man.get('base') else ''}")
    return 0


# ----------------------------------------------------------------------- CLI


def _arguments(p: argparse.ArgumentParser) -> None:
    formats = sorted({f for name in runtimes.builders() for f in runtimes.runtime(name).image_formats})
    p.add_argument("--builder", required=True, choices=runtimes.builders())
    p.add_argument("--recipe", required=True, help="Dockerfile (charliecloud, podman) or .def (apptainer, singularity)")
    p.add_argument("--requirements", help="payload requirements (Dockerfile builds: required)")
    p.add_argument("--out", required=True, help="image path: directory, .sqfs or .sif")
    p.add_argument("--manifest", required=True, help="provenance JSON (written atomically)")
    p.add_argument("--cache-dir", default=str(DEFAULT_CACHE),
                   help="cache root: images/, wheelhouse/, base/, wheels/ (default $SCALESWEEP_CACHE or ~/.cache/scalesweep)")
    p.add_argument("--format", choices=formats, help="default: the builder's first (dir, sif, oci-dir)")
    p.add_argument("--site", help="take the build args from this site file's build_args (a name under sites/ or a path)")
    p.add_argument("--build-args", dest="build_args_file", help="KEY=VALUE file of build args (hand use)")
    p.add_argument("--build-arg", action="append", default=[], metavar="KEY=VALUE",
                   help="a build arg (repeatable; wins over --site and --build-args)")
    p.add_argument("--fakeroot", action="store_true", help="apptainer/singularity build --fakeroot")
    p.add_argument("--link", choices=("hardlink", "symlink", "copy"), default="hardlink",
                   help="how a cached image is placed at --out (default hardlink)")
    p.add_argument("--python", default=sys.executable, help="interpreter whose pip stages the wheelhouse")
    p.add_argument("--find-links", action="append", default=[], help="extra local wheel directory")
    p.add_argument("--no-cache", action="store_true", help="rebuild even if the cache has the key")


def add_parser(sub) -> None:
    """``scalesweep build-image`` (scalesweep.cli)."""
    p = sub.add_parser(COMMAND, help="build (or reuse from the cache) a payload image with its provenance manifest",
                       description=__doc__.split("\n\n")[0])
    _arguments(p)
    p.set_defaults(func=run)
    d = sub.add_parser(DESCRIBE_COMMAND, help="pull a prebuilt image, or describe one in place, "
                       "with a provenance manifest like a build's",
                       description=describe_image.__doc__.split("\n\n")[0])
    _describe_arguments(d)
    d.set_defaults(func=run_describe)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=f"scalesweep {COMMAND}", description=__doc__.split("\n\n")[0])
    _arguments(p)
    return p.parse_args(argv)


def run(a: argparse.Namespace) -> int:
    """Build as the parsed arguments say; one line on stderr and exit 1 if it cannot."""
    try:
        tools = check_builder(a.builder, a.format)  # before anything else (reading the site)
        args: dict[str, str] = {}
        if a.site:
            from scalesweep.platform.site import SiteError, load_site

            try:
                args.update(load_site(a.site)["build_args"])
            except SiteError as exc:
                raise BuildError(str(exc)) from None
        for kv in a.build_arg:
            k, sep, v = kv.partition("=")
            if not sep:
                raise BuildError(f"--build-arg {kv!r}: expected KEY=VALUE")
            args[k] = v
        man = build_image(
            a.builder, a.recipe, a.out, a.manifest, requirements=a.requirements,
            cache_dir=a.cache_dir, fmt=a.format, build_args_file=a.build_args_file,
            build_args=args, fakeroot=a.fakeroot, link=a.link, python=a.python,
            find_links=a.find_links, no_cache=a.no_cache, tools=tools,
        )
    except BuildError as e:
        log(f"error: {e}")
        return 1
    how = "cached" if man["cached"] else "built"
    if man.get("squashfs_cached") is False:
        how += " (squashfs packed now)"
    log(f"{how} {man['image']} ({man['placement']}) "
        f"{man['size_bytes'] / 1e6:.0f} MB digest {man['content_digest']} in {man['build_seconds']} s")
    return 0


def main(argv: list[str] | None = None) -> int:
    return run(parse_args(argv))
