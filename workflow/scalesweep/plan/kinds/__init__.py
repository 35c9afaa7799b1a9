"""The workload kinds (``workloads.<name>.payload``), one registered class each
(``base.WorkloadKind``): the built-in ones are imported here, so importing this package
registers them. Adding a kind: one module beside ``cnn.py`` (a ``@register``ed subclass)
imported below, plus its payload script (and the kind in the config schema's ``payload``
enum: tests/unit/test_kinds.py checks the two agree)."""

from __future__ import annotations

from scalesweep.plan.kinds import cnn, llm  # noqa: F401  (registers the built-in kinds)
from scalesweep.plan.kinds.base import (Invocation, Merit, SweepError, WorkloadKind, kind_of,
                                        kinds, names, record_payloads, register,
                                        summarised_in, unregister)

__all__ = ["Invocation", "Merit", "SweepError", "WorkloadKind", "kind_of", "kinds", "names",
           "record_payloads", "register", "summarised_in", "unregister"]
