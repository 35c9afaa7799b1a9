"""The host's own stack, for a control image (issue #43): the interpreter the native runs
use (its prefix, version and build: shared or static libpython, compiler, the sha256 of
its executable and libpython) and the host's distribution release.

``scalesweep build-image --host-stack`` builds such an image: the interpreter's prefix is
bound at ``/hostpython`` for the recipe's RUN steps, which copy it to its own path
(``HOST_PYTHON_PREFIX``), and the wheelhouse is staged with that interpreter, so the
image's venv holds the same wheels as the native one. Only where the host runs the
recipe base's Debian release (the same distribution, release and packages): elsewhere the
build is refused, naming both.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

from scalesweep.images.process import BuildError

BIND = "/hostpython"  # where the recipe's RUN steps find the interpreter's prefix
BUILD_ARG = "HOST_PYTHON_PREFIX"  # empty: the release's own interpreter (prefix /usr)
VERSION_ARG = "HOST_PYTHON_VERSION"  # checked in the image against the host's
# prefixes of the distribution's own interpreter: never copied (the host's whole /usr);
# the release's python3 packages are it
SYSTEM_PREFIXES = ("/usr", "")  # without a trailing slash

_PROBE = ("import json, sys, sysconfig; print(json.dumps({'prefix': sys.base_prefix, "
          "'executable': sys.executable, 'version': sys.version.split()[0], "
          "'build': sys.version, 'shared': bool(sysconfig.get_config_var('Py_ENABLE_SHARED')), "
          "'libdir': sysconfig.get_config_var('LIBDIR'), "
          "'ldlibrary': sysconfig.get_config_var('LDLIBRARY'), "
          "'major_minor': list(sys.version_info[:2])}))")


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def interpreter(python: str) -> dict:
    """What ``python`` is (its base prefix, version, build, libpython) and the sha256 of its
    real executable and of its shared libpython (where it has one)."""
    try:
        out = subprocess.run([python, "-c", _PROBE], capture_output=True, text=True,
                             check=True).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        raise BuildError(f"--host-stack: cannot run the host interpreter {python}: {exc}") from None
    facts = json.loads(out)
    exe = Path(facts["executable"]).resolve()
    facts["executable_sha256"] = _sha256(exe)
    lib = Path(facts["libdir"] or "") / (facts["ldlibrary"] or "")
    facts["libpython_sha256"] = _sha256(lib.resolve()) if facts["shared"] and lib.is_file() else None
    facts["system"] = facts["prefix"].rstrip("/") in SYSTEM_PREFIXES
    if not Path(facts["prefix"], "bin").is_dir():
        raise BuildError(f"--host-stack: the interpreter {python} has no prefix to copy "
                         f"({facts['prefix']}/bin is missing)")
    return facts


def os_release(path: str = "/etc/os-release") -> dict[str, str]:
    """The host's distribution (os-release(5)): ID, VERSION_ID, VERSION_CODENAME ..."""
    out = {}
    try:
        for line in Path(path).read_text().splitlines():
            key, sep, value = line.partition("=")
            if sep:
                out[key.strip()] = value.strip().strip('"')
    except OSError:
        pass
    return out


def check_release(suite: str, release: dict[str, str] | None = None) -> dict[str, str]:
    """The host's release, refused unless it is Debian ``suite`` (the recipe's base)."""
    release = os_release() if release is None else release
    if release.get("ID") != "debian" or release.get("VERSION_CODENAME") != suite:
        have = f"{release.get('ID', '?')} {release.get('VERSION_CODENAME') or release.get('VERSION_ID', '?')}"
        raise BuildError(
            f"--host-stack: a control image carries the host's stack on the host's release; "
            f"the recipe's base is Debian {suite} and this host runs {have}: build it on a "
            f"Debian {suite} host, or leave the control image out")
    return {k: release[k] for k in ("ID", "VERSION_ID", "VERSION_CODENAME") if k in release}


def build_binds_and_args(facts: dict) -> tuple[dict[str, str], dict[str, str]]:
    """The binds and build args a control image's recipe gets for the interpreter ``facts``
    (``interpreter``): its prefix bound at BIND and named in BUILD_ARG, or, for the
    release's own interpreter (prefix /usr), no bind, BUILD_ARG empty (the recipe installs
    the release's python3); VERSION_ARG either way."""
    args = {VERSION_ARG: facts["version"]}
    if facts["system"]:
        return {}, {BUILD_ARG: "", **args}
    return {facts["prefix"]: BIND}, {BUILD_ARG: facts["prefix"], **args}
