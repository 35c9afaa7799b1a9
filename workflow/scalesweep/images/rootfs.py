"""The offline Debian base of Dockerfile builds: the host's apt mirror and its state,
``debootstrap`` into a rootfs tarball (cached, no device nodes), the build's date
(SOURCE_DATE_EPOCH). A recipe's ``FROM localhost/scalesweep-debian:<suite>`` names it."""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import re
import shutil
import tarfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from scalesweep.images.cache import file_lock
from scalesweep.images.digest import sha256_text
from scalesweep.images.process import BuildError, log, run_capture, run_logged
from scalesweep.record.metrics import write_json_atomic


# Base rootfs for offline Dockerfile builds: the recipe's FROM line names it.
BASE_FROM_RE = re.compile(r"^\s*FROM\s+localhost/scalesweep-debian:([a-z]+)\s*$", re.M | re.I)
BASE_VARIANT = "minbase"
# Debian's python3 minor per suite: the wheelhouse is staged with the host's Python,
# whose tags must match the image's.
DEBIAN_PYTHON = {"bookworm": (3, 11), "trixie": (3, 13), "bullseye": (3, 9)}

# Stable fallback when the host's sources carry no snapshot date (2025-05-20 UTC).
DEFAULT_SOURCE_DATE_EPOCH = 1747699200

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

def debootstrap_version(path: str) -> str:
    try:
        return run_capture([path, "--version"]).strip().split()[-1]
    except BuildError:
        return "unknown"

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

def assert_no_device_nodes(tarball: Path) -> None:
    with tarfile.open(tarball) as tf:
        for m in tf:
            if m.isdev():
                raise BuildError(f"{tarball} holds device node {m.name}: refusing to import it")

def base_facts(base_info: dict, mirror: Mirror, release: dict, sde: int) -> dict:
    """The manifest's ``base`` of a Dockerfile build: the rootfs, and the apt state the
    build saw."""
    base = dict(base_info)
    base.update(mirror_release_at_build=release, host_snapshot_hint=mirror.snapshot,
                source_date_epoch=sde)
    return base
