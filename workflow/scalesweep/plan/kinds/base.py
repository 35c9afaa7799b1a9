"""What a workload kind declares (``WorkloadKind``), and the registry of kinds by name.

A kind is what ``workloads.<name>.payload`` names: one class, registered once
(``@register``), declaring everything the workflow, the harness, the analysis and the
report need to know of its workloads:

- ``script``: its payload script (relative to the code root), which writes payload.json;
- ``input_key``/``input_section``: the input a workload names (``dataset`` under
  ``datasets:``, ``model`` under ``models:``), checked before any job (``check``), and the
  files a point reads (``inputs``);
- the sweep: the per-node axis it is swept on (``per_node_axis``) and how a point's
  geometry follows from the axes (``geometries``); its scaling count (``scaling_count``,
  what a series is plotted against) and that count's unit (``count_unit``);
- its payload's arguments (``invocation``; ``planned``: the same without reading any
  staged file, for a dry run);
- its record: ``record_payload``, the "payload" its metrics.json carries;
- its figures, each declared once (``metrics``: ``scalesweep.record.measures``, for a kind
  defined elsewhere its ``own_metrics`` and the other fields its ``row`` reads,
  ``own_inputs``, registered with it): its runs.csv columns with their units and roles,
  and the record fields they come from (``fields``: ``scalesweep.record.metrics.FIELDS``);
  ``values`` fills a run's row with them, those read as they are by itself and the
  computed ones by the kind's ``row``;
- its figure of merit (``merit``: the headline column, its unit, whether higher is better).

Adding a kind is one module with one such class (``scalesweep/plan/kinds/cnn.py`` is the
model) plus its payload script; ``scalesweep.plan.kinds`` imports the built-in ones.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Iterable

from scalesweep.record import columns as _columns
from scalesweep.record import measures as _measures
from scalesweep.record import metrics as _metrics
from scalesweep.record.geometry import Geometry
from scalesweep.record.measures import Metric


class SweepError(ValueError):
    """The config asks for a sweep that cannot run: raised before any job starts."""


@dataclass
class Invocation:
    script: str  # relative to the code root
    args: list[str]
    data_dir: str  # bound read-only-in-spirit as the data mount
    image: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    stage_from: str = ""  # copy this verified dataset to data_dir (node-local) first
    dataset: str = ""  # the staged dataset, checked against its manifest before each run


@dataclass(frozen=True)
class Merit:
    """A kind's figure of merit: the runs.csv column its verdicts and headlines rest on."""

    column: str
    unit: str
    higher_is_better: bool
    label: str = ""


def field_value(record: dict, path: str) -> Any:
    """The value at ``path`` ("a.b": b of the mapping a) of a record; None where absent."""
    value: Any = record
    for name in path.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(name)
    return value


def as_list(value: Any) -> list:
    return list(value) if isinstance(value, (list, tuple)) else [value]


class WorkloadKind:
    """One kind of workload (see the module's docstring). Subclasses set the class
    attributes and override ``geometries``, ``invocation`` and ``row``."""

    name: ClassVar[str] = ""  # workloads.<name>.payload
    script: ClassVar[str] = ""  # the payload script, relative to the code root
    record_payload: ClassVar[str] = ""  # metrics.json "payload" (record.metrics.FIELDS key)
    input_key: ClassVar[str] = ""  # the workload's key naming its input ("dataset")
    input_section: ClassVar[str] = ""  # the config section defining it ("datasets")
    merit: ClassVar[Merit] = Merit("time_s", "s", higher_is_better=False)
    # a kind defined outside this package: its figures (scalesweep.record.measures) and
    # the other record fields its row() reads, registered with it
    own_metrics: ClassVar[tuple[Metric, ...] | None] = None
    own_inputs: ClassVar[tuple[_metrics.Field, ...]] = ()
    # or its record's fields alone (its row's columns then undeclared: appended to
    # runs.csv, never grouped by)
    own_fields: ClassVar[tuple[_metrics.Field, ...] | None] = None
    # a point on several nodes runs one server per node behind one client (LLM)
    server_per_node: ClassVar[bool] = False
    # the summary table of aggregate its runs are summarised in: "scaling" (scaling.csv:
    # time vs count, efficiency) or "llm" (llm.csv: per model, tokens/s)
    summary_table: ClassVar[str] = "scaling"
    # the machine-speed probe kernel whose drift explains its runs' (measure.probe):
    # "gflops" (compute) or "gbps" (memory bandwidth)
    probe_kernel: ClassVar[str] = "gflops"
    # its input is a dataset staged (and verified) before its points run, by jobs of their
    # own (the ``input_section`` is "datasets"; node-local copies, image sizes)
    stages_dataset: ClassVar[bool] = False
    # its payload drives a model server (scripts/llm_engines.py): its workloads name an
    # engine, an api and max_tokens, checked against the engine before any job
    engine_served: ClassVar[bool] = False
    # runs.csv provenance columns its runs carry beyond every run's (the CNN's torch)
    provenance: ClassVar[tuple[str, ...]] = ()

    def __repr__(self) -> str:
        return f"<workload kind {self.name}>"

    # --- the record ---------------------------------------------------------------------
    @property
    def fields(self) -> tuple[_metrics.Field, ...]:
        """The fields of its metrics.json its readers use (scalesweep.record.metrics)."""
        return _metrics.FIELDS[self.record_payload]

    @property
    def metrics(self) -> tuple[Metric, ...]:
        """Its figures (scalesweep.record.measures), in runs.csv's order."""
        return _measures.METRICS.get(self.record_payload, ())

    @functools.cached_property
    def _figures(self) -> tuple[tuple[tuple[str, str | None], ...], frozenset[str]]:
        """Its figures as ``values`` walks them, once per kind (it runs per run): (name,
        the field read as it is, None where computed) in order, and the names read as they
        are. A kind's figures are fixed once it is registered."""
        order = tuple((m.name, None if m.computed else m.field) for m in self.metrics)
        return order, frozenset(name for name, field in order if field is not None)

    def values(self, metrics: dict) -> dict:
        """Its figures of one run, in their declared order: those read as they are from
        their field (None where absent), the computed ones from ``row``; then any column
        ``row`` makes that is not declared (a kind with ``own_fields`` alone). A computed
        figure ``row`` does not make is an error (KeyError naming it)."""
        computed = self.row(metrics)
        order, read_as_is = self._figures
        out = {name: computed[name] if field is None else field_value(metrics, field)
               for name, field in order}
        read = read_as_is & computed.keys()
        if read:  # a row() (a subclass's) making a figure declared as read as it is
            raise ValueError(f"workload kind {self.name}: row() makes {', '.join(sorted(read))}, "
                             "declared read as it is (scalesweep.record.measures: computed)")
        out.update((k, v) for k, v in computed.items() if k not in out)
        return out

    # --- inputs ---------------------------------------------------------------------------
    def check(self, name: str, wl: dict, config: dict) -> str | None:
        """Why workload ``name`` cannot run (its input is not defined), or None."""
        if not self.input_key:
            return None
        defined = config.get(self.input_section) or {}
        if wl.get(self.input_key) not in defined:
            return (f"workload {name}: {self.input_key} {wl.get(self.input_key)!r} is not "
                    f"defined under {self.input_section} (defined: "
                    f"{', '.join(defined) or 'none'})")
        return None

    def inputs(self, wl: dict, config: dict) -> dict[str, str]:
        """The files (campaign-relative) a point of a workload of this kind reads, by
        name; the image is the runtime's (scalesweep.plan.payloads.point_inputs)."""
        return {}

    # --- the sweep ------------------------------------------------------------------------
    def per_node_axis(self, wl: dict, node: dict) -> str:
        """The sweep axis (config name) of what a node runs: ranks_per_node or
        gpus_per_node."""
        return "ranks_per_node"

    def required_axes(self, wl: dict, node: dict) -> list[str]:
        return ["runtimes", "nodes", self.per_node_axis(wl, node)]

    def check_site(self, name: str, wl: dict, site: dict) -> None:
        """SweepError where ``site`` cannot run workload ``name`` at all (checked once the
        axes are there, before its runtimes and geometries)."""

    def geometries(self, name: str, wl: dict, axes: dict, site: dict) -> Iterable[tuple[int, int, int]]:
        """(nodes, GPUs per node, ranks per node) of each point the axes ask for
        (threads per rank are swept on every kind alike); SweepError for a geometry
        this kind cannot run on ``site``."""
        for nodes in as_list(axes["nodes"]):
            for ranks in as_list(axes["ranks_per_node"]):
                yield nodes, 0, ranks

    def scaling_count(self, point: Any) -> int:
        """What a scaling series is plotted against (a point, or any object with the
        geometry's axes): total ranks by default."""
        return Geometry.of(point).world_size

    def count_unit(self, points: Iterable[Any]) -> str:
        """What ``scaling_count`` counts, for a series of ``points``."""
        return "GPUs" if any(p.gpus for p in points) else "ranks"

    # --- the payload ----------------------------------------------------------------------
    def invocation(self, point: Any, wl: dict, config: dict, inputs: dict,
                   out_dir: Path) -> Invocation:
        raise NotImplementedError(f"{self!r}: no invocation")

    def planned(self, point: Any, wl: dict, config: dict, inputs: dict,
                out_dir: Path) -> Invocation:
        """The invocation before the staged files it reads for its record exist (a dry
        run): nothing in ``extra``. By default ``invocation`` less its extra."""
        inv = self.invocation(point, wl, config, inputs, out_dir)
        return Invocation(inv.script, inv.args, inv.data_dir)

    # --- the analysis ---------------------------------------------------------------------
    def row(self, metrics: dict) -> dict:
        """Its computed figures of a run (each ``Metric`` declared ``computed``; ``time_s``
        always, the run's time), from its metrics.json (fields as ``fields`` declares
        them); ``values`` adds those read as they are."""
        return {"time_s": metrics["wall_s"]}


# --- the registry -------------------------------------------------------------------------
_REGISTRY: dict[str, WorkloadKind] = {}


def register(cls: type[WorkloadKind]) -> type[WorkloadKind]:
    """Register a kind (a class decorator); a second class of the same name is refused."""
    if not cls.name or not cls.script or not cls.record_payload:
        raise TypeError(f"{cls.__name__}: a workload kind declares name, script and "
                        "record_payload")
    known = _REGISTRY.get(cls.name)
    if known is not None and type(known).__qualname__ != cls.__qualname__:
        raise ValueError(f"workload kind {cls.name!r} is registered already "
                         f"({type(known).__module__}.{type(known).__qualname__})")
    if cls.own_metrics is not None:
        unsourced = [m.name for m in cls.own_metrics if not m.field and not m.computed]
        if unsourced:
            raise TypeError(f"{cls.__name__}: own_metrics {', '.join(unsourced)} are neither "
                            "read from a field nor computed by row()")
        _columns.declare(cls.record_payload, cls.own_metrics)
        _metrics.declare_fields(cls.record_payload,
                                _metrics.fields_of(cls.own_metrics, cls.own_inputs))
    elif cls.own_fields is not None:
        _metrics.declare_fields(cls.record_payload, cls.own_fields)
    elif cls.record_payload not in _metrics.FIELDS:
        raise TypeError(f"{cls.__name__}: record payload {cls.record_payload!r} has no fields "
                        "in scalesweep.record.metrics.FIELDS: declare own_metrics")
    _REGISTRY[cls.name] = cls()
    return cls


def unregister(name: str) -> None:
    """Forget a kind (tests register kinds of their own)."""
    kind = _REGISTRY.pop(name, None)
    if kind is not None and kind.own_metrics is not None:
        _columns.forget(kind.record_payload)
    if kind is not None and (kind.own_metrics is not None or kind.own_fields is not None):
        _metrics.forget_fields(kind.record_payload)


def kind_of(what: str | dict) -> WorkloadKind:
    """The kind a name (``workloads.<name>.payload``, or the "payload" its records carry:
    ``record_payload``) or a workload's config names; SweepError for an unknown one."""
    name = what.get("payload") if isinstance(what, dict) else what
    if name in _REGISTRY:
        return _REGISTRY[name]
    for kind in _REGISTRY.values():
        if kind.record_payload == name:
            return kind
    raise SweepError(f"unknown workload kind (payload) {name!r}; known: "
                     f"{', '.join(_REGISTRY)}")


def names() -> list[str]:
    return list(_REGISTRY)


def check_kinds(config: dict, error: type[Exception] = SweepError) -> None:
    """Every workload of ``config`` names a registered kind (the config schema lists
    none): ``error`` (SweepError) naming the workload, the value and the known kinds."""
    for name, wl in sorted((config.get("workloads") or {}).items()):
        if isinstance(wl, dict) and wl.get("payload") not in _REGISTRY:
            raise error(f"config key workloads.{name}.payload: {wl.get('payload')!r} is "
                             f"not a workload kind; known: {', '.join(_REGISTRY)} "
                             "(workflow/scalesweep/plan/kinds/)")


def kinds() -> list[WorkloadKind]:
    return list(_REGISTRY.values())


def summarised_in(table: str) -> list[str]:
    """The kinds whose runs the summary table ``table`` ("scaling", "llm") holds."""
    return [name for name, kind in _REGISTRY.items() if kind.summary_table == table]


def record_payloads() -> dict[str, str]:
    """Kind -> the "payload" its records carry."""
    return {name: kind.record_payload for name, kind in _REGISTRY.items()}
