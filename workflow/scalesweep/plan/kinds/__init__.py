"""The workload kinds (``workloads.<name>.payload``), one registered class each
(``base.WorkloadKind``). Every module of this package is imported here, so importing it
registers them all: adding a kind is one module beside ``cnn.py`` (a ``@register``ed
subclass) plus its payload script. The config check asks this registry for the kinds
(``plan.config.check_kinds``); the schema lists none."""

from __future__ import annotations

import importlib
import pkgutil
from scalesweep.plan.kinds.base import (Invocation, Merit, SweepError, WorkloadKind, check_kinds, kind_of,
                                        kinds, names, record_payloads, register,
                                        summarised_in, unregister)

__all__ = ["Invocation", "Merit", "SweepError", "WorkloadKind", "check_kinds", "kind_of", "kinds", "names",
           "record_payloads", "register", "summarised_in", "unregister"]

for _module in pkgutil.iter_modules(__path__):
    if _module.name != "base":
        importlib.import_module(f"{__name__}.{_module.name}")
