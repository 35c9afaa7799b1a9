"""The host's own stack, for a control image (issue #43): the interpreter the native runs
use (its prefix, version and build: shared or static libpython, compiler, the sha256 of
its executable and libpython) and the host's distribution release.

``scalesweep build-image --host-stack`` builds such an image: the interpreter's prefix is
bound at ``/hostpython`` for the recipe's RUN steps, which copy it to its own path
(``HOST_PYTHON_PREFIX``), and the wheelhouse is staged with that interpreter, so the
image's venv holds the same wheels as the native one. A Dockerfile build (Charliecloud,
Podman: containers/charliecloud/Dockerfile.control) only where the host runs the recipe
base's Debian release (the same distribution, release and packages): elsewhere the build
is refused, naming both. A definition build (Apptainer: containers/apptainer/control.def)
starts from the registry image of the host's own release (:func:`release_image`, build
arg ``HOST_RELEASE_IMAGE``), with the interpreter and the wheelhouse bound for %post
(``apptainer build --bind``).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

from scalesweep.images.process import BuildError

BIND = "/hostpython"  # where the recipe's RUN steps find the interpreter's prefix
WHEELHOUSE_BIND = "/wheelhouse"  # where they find the staged wheels (a definition build)
RELEASE_ARG = "HOST_RELEASE_IMAGE"  # a definition build's base: the host's release
# a release's image, by os-release ID: the distribution's own registry image of it
RELEASE_IMAGES = {
    "sles": "registry.suse.com/suse/sle15:{VERSION_ID}",
    "opensuse-leap": "registry.opensuse.org/opensuse/leap:{VERSION_ID}",
    "debian": "docker.io/library/debian:{VERSION_CODENAME}",
    "ubuntu": "docker.io/library/ubuntu:{VERSION_ID}",
    "rocky": "docker.io/library/rockylinux:{VERSION_ID}",
    "almalinux": "docker.io/library/almalinux:{VERSION_ID}",
    "rhel": "registry.access.redhat.com/ubi{VERSION_MAJOR}/ubi:{VERSION_ID}",
}
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


def release_image(release: dict[str, str]) -> str:
    """The registry image of the host's release (an Apptainer control image's base:
    ``Bootstrap: docker``, ``From: {{ HOST_RELEASE_IMAGE }}``), from its os-release; a
    release not listed is refused, naming how to give it."""
    fmt = RELEASE_IMAGES.get(release.get("ID", ""))
    values = {**release, "VERSION_MAJOR": release.get("VERSION_ID", "").split(".")[0]}
    try:
        if fmt:
            return fmt.format(**values)
    except KeyError:
        pass
    raise BuildError(
        f"--host-stack: no registry image is known for this host's release "
        f"({release.get('ID', '?')} {release.get('VERSION_ID', '?')}): give it with "
        f"--build-arg {RELEASE_ARG}=<the release's image>")


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
