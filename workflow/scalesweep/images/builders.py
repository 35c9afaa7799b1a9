"""The builders: the runtime a ``--builder`` names, whether the tools its build needs are
there (checked before anything else, one line naming what to install), its version."""

from __future__ import annotations

import shutil
import subprocess

from scalesweep.images.process import BuildError, BuilderMissing, run_capture
from scalesweep.platform import runtimes


# What to install when a tool other than a runtime's own is missing; a runtime's own
# executables (ch-image, apptainer, podman, ...) are named by its install_hint.
TOOL_HINTS = {
    "debootstrap": "install the Debian package 'debootstrap' (apt-get install debootstrap)",
    "unshare": "install the Debian package 'util-linux'",
    "tar": "install the Debian package 'tar'",
    "cp": "install the Debian package 'coreutils'",
    "mksquashfs": "install the Debian package 'squashfs-tools' (apt-get install squashfs-tools)",
}

def builder_runtime(builder: str) -> runtimes.Runtime:
    """The runtime class that builds with ``builder`` (a runtime's name)."""
    if builder not in runtimes.builders():
        raise BuildError(f"unknown builder {builder!r} (choose from {', '.join(runtimes.builders())})")
    return runtimes.runtime(builder)

def check_builder(builder: str, fmt: str | None = None, which=shutil.which) -> dict[str, str]:
    """Paths of the tools a builder needs; BuilderMissing (one line) if any is absent.

    Then the runtime's own checks (:meth:`~scalesweep.platform.runtimes.Runtime.build_preflight`:
    e.g. that ch-image can start), each recorded under its key.
    """
    rt = builder_runtime(builder)
    tools = {}
    for tool in tuple(rt.build_tools) + rt.format_tools(fmt or ""):
        path = which(tool)
        if not path:
            hint = TOOL_HINTS.get(tool) or rt.install_hint
            raise BuilderMissing(f"{builder} builder needs '{tool}', not found on PATH: {hint}")
        tools[tool] = path
    for check in rt.build_preflight(which):
        ok = check.argv and subprocess.run(check.argv, capture_output=True).returncode == 0
        if not ok:
            raise BuilderMissing(check.missing)
        tools[check.key] = check.argv[0]
    return tools

def builder_version(builder: str, tools: dict[str, str]) -> str:
    """The builder's version (the runtime's builder_version_command: ch-image's for
    charliecloud, the runtime's own otherwise)."""
    rt = builder_runtime(builder)
    return rt.parse_version(run_capture(rt.builder_version_command(tools)))
