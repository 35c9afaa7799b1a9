"""No container: the host's Python runs the payload (``native``, and the A/A calibration's
``native-aa``)."""

from __future__ import annotations

from scalesweep.platform.runtimes.base import Runtime
from scalesweep.platform.runtimes.registry import register


@register
class Native(Runtime):
    """No container: the host's Python runs the payload from the repository."""

    name = "native"
    order = 0
    native = True

    def exec_prefix(self, site, binds, workdir):
        return []

    def exec_command(self, image, argv, bin=""):
        return list(argv)


@register
class NativeAA(Native):
    """The A/A calibration (``measurement.aa_calibration``): a second, identical native
    runtime that the statistics must call "equivalent" to native."""

    name = "native-aa"
    order = 1
