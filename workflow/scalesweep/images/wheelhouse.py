"""The wheelhouse of a Dockerfile build: the requirements read (exact pins, local wheels
that satisfy them) and every wheel they need staged on the host, keyed by content, for
the offline build to install from ``/wheelhouse``."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from scalesweep.images.digest import sha256_text
from scalesweep.images.process import BuildError, log
from scalesweep.record.dataset import sha256_file


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
