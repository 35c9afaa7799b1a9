"""One class per container runtime (and native), one module per runtime family, behind
one interface (:mod:`scalesweep.platform.runtimes.base`), known by name
(:mod:`scalesweep.platform.runtimes.registry`).

Every module of this package is imported here, so a runtime added as a new module
(``platform/runtimes/<name>.py`` with a ``@register``-ed class) is known without editing
any other file; ``scalesweep.platform.runtimes.<Name>`` reaches the built-in classes.
"""

from __future__ import annotations

import importlib
import pkgutil

from scalesweep.platform.runtimes.base import (  # noqa: F401  (the package's API)
    IMAGE_PYTHON,
    INJECT_DIR,
    MOUNT_CODE,
    MOUNT_DATA,
    MOUNT_OUT,
    Bind,
    BuildSteps,
    DockerfileBuild,
    MODE_SEP,
    LaunchError,
    ModeNotOffered,
    Preflight,
    Runtime,
    RuntimeNotOffered,
    RuntimeSite,
    StorageLoad,
    UnknownMode,
    UnknownRuntime,
    parse_binds,
    split_token,
)
from scalesweep.platform.runtimes.registry import (  # noqa: F401  (the package's API)
    builders,
    container_names,
    is_native,
    mode_of,
    names,
    native_names,
    register,
    runtime,
    runtime_version,
    site_keys,
    tokens,
    unregister,
)
from scalesweep.platform.runtimes.native import Native, NativeAA  # noqa: F401
from scalesweep.platform.runtimes.charliecloud import Charliecloud, CharliecloudHostMPI  # noqa: F401
from scalesweep.platform.runtimes.apptainer import (  # noqa: F401
    Apptainer,
    ApptainerHostMPI,
    Singularity,
    SingularityHostMPI,
)
from scalesweep.platform.runtimes.podman import Podman  # noqa: F401

# any other module of the package: a runtime added as one file
for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")
