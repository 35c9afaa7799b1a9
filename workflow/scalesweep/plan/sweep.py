"""Sweep points: the one expansion of config axes into immutable run records.

A point's path under ``results/runs/`` is derived from the point alone and parses back
to the same point (``SweepPoint.from_path(p.path) == p``).
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from operator import attrgetter
from typing import Any, Iterable

from scalesweep.plan.kinds import SweepError, kind_of
from scalesweep.platform import runtimes as _runtimes
from scalesweep.platform.site import site_of
from scalesweep.record.geometry import AXES as GEOMETRY_AXES
from scalesweep.record.geometry import CONFIG_AXES, CONSTRAINTS, SEGMENT, Geometry, segment_regex

# The runtimes are classes (scalesweep.platform.runtimes), registered by name; native-aa is the
# A/A calibration (measurement.aa_calibration), a second, identical native runtime. A
# campaign names a runtime by its token: the plain name (its default mode) or
# <name>+<mode> (charliecloud+squashfs): a point's runtime, arm and path segment, so runs
# of different modes are never paired or pooled.
RUNTIMES = _runtimes.tokens()
NATIVE_RUNTIMES = _runtimes.native_names()
CONTAINER_RUNTIMES = _runtimes.container_names()
AXES = ("runtimes", *CONFIG_AXES.values(), "repeats")

# The reference every other runtime is compared with (overhead = other vs reference).
REFERENCE = "native"
# A block is one repeat of one *arm* of a geometry: the reference and one compared runtime
# (the arm is named after it), measured one right after the other (block_order). Every
# comparison has blocks of its own, so a runtime added to a campaign later (the A/A
# runtime native-aa, a second container) is measured beside a reference run of its own
# block, never paired with reference runs measured before it existed. A series with the
# reference alone has the arm "native"; without the reference each runtime is its own arm.
# results/runs/<workload>/<arm>/<geometry segment>/rep<repeat>/<runtime> (the segment:
# scalesweep.record.geometry.SEGMENT): the block's directory holds its runs.
BLOCK_DIR = "{workload}/{arm}/" + SEGMENT + "/rep{repeat}"
POINT_DIR = BLOCK_DIR + "/{runtime}"
POINT_DEPTH = POINT_DIR.count("/") + 1  # path segments of a point directory
# <point dir>/history/<UTC stamp>/: a point's earlier runs, moved aside by `scalesweep rerun`
HISTORY_DIR = "history"


def in_history(path: str) -> bool:
    """Whether a path below results/runs/ is an earlier run kept in a point's history."""
    return HISTORY_DIR in path.replace("\\", "/").split("/")
WILDCARD_CONSTRAINTS = {
    "workload": r"[a-z][a-z0-9_]*",
    "arm": "|".join(re.escape(r) for r in RUNTIMES),
    "runtime": "|".join(re.escape(r) for r in RUNTIMES),
    **CONSTRAINTS,
    "repeat": r"[1-9][0-9]*",
}
_PATH_RE = re.compile(
    "^"
    + re.sub(r"\{(\w+)\}", lambda m: f"(?P<{m[1]}>{WILDCARD_CONSTRAINTS[m[1]]})", POINT_DIR)
    + "$"
)


# the layout of campaigns measured before same-block pairs (one directory per runtime,
# repeats matched on their number only): recognised, to say why such runs are not read
_OLD_LAYOUT_RE = re.compile(r"^[a-z][a-z0-9_]*/[a-z][a-z0-9-]*/"
                            + segment_regex(dict.fromkeys(GEOMETRY_AXES, r"\d+"), named=False)
                            + r"/rep\d+$")
OLD_LAYOUT_NOTE = ("measured before same-block pairs (results/runs/<workload>/<runtime>/"
                   "<geometry>/rep<k>): not read; its native and container runs were not "
                   "known to be measured together. Measure it again with this version")


def old_layout(path: str) -> bool:
    """Whether a point directory (below results/runs/) has the layout before blocks."""
    return bool(_OLD_LAYOUT_RE.match(str(path).strip("/")))


@dataclass(frozen=True, order=True)
class SweepPoint:
    workload: str
    runtime: str
    nodes: int
    gpus: int  # GPUs per node visible to the point (0 = CPU only)
    ranks: int  # processes per node
    threads: int  # threads per rank
    repeat: int  # the block's number within its arm (one run of each runtime per block)
    # the runtime compared in this run's block (BLOCK_DIR); by default the run's own
    # runtime (a compared runtime's run, or the reference measured alone)
    arm: str = ""

    def __post_init__(self):
        if not self.arm:
            object.__setattr__(self, "arm", self.runtime)

    @property
    def path(self) -> str:
        return POINT_DIR.format_map(vars(self))  # asdict() deep-copies: 10x slower

    @property
    def block(self) -> str:
        """The block's identifier, shared by the runs measured together (its path)."""
        return BLOCK_DIR.format_map(vars(self))

    @property
    def geometry(self) -> Geometry:
        return Geometry(self.nodes, self.gpus, self.ranks, self.threads)

    @property
    def world_size(self) -> int:
        return self.geometry.world_size

    @classmethod
    def at(cls, workload: str, runtime: str, geometry: Geometry, repeat: int,
           arm: str = "") -> "SweepPoint":
        return cls(workload, runtime, *(getattr(geometry, a) for a in GEOMETRY_AXES), repeat, arm)

    @classmethod
    def from_path(cls, path: str) -> "SweepPoint":
        m = _PATH_RE.match(path.strip("/"))
        if not m:
            raise SweepError(f"not a sweep point path: {path!r}")
        return cls.from_wildcards(m.groupdict())

    @classmethod
    def from_wildcards(cls, wc: Any) -> "SweepPoint":
        get = wc.get if hasattr(wc, "get") else lambda k: getattr(wc, k)
        return cls(
            workload=str(get("workload")),
            runtime=str(get("runtime")),
            **{axis: int(get(axis)) for axis in GEOMETRY_AXES},
            repeat=int(get("repeat")),
            arm=str(get("arm") or "") if _has(wc, "arm") else "",
        )

    def as_dict(self) -> dict[str, Any]:
        # not dataclasses.asdict(): it deep-copies field by field, 10x slower, and this is
        # called for every run by collect_runs and point_states
        return dict(vars(self))


# the order of SweepPoints (order=True compares their fields in turn), as a sort key
POINT_ORDER = attrgetter(*SweepPoint.__dataclass_fields__)


def _has(wc: Any, key: str) -> bool:
    if isinstance(wc, dict):
        return key in wc
    try:
        return key in wc.keys()
    except AttributeError:
        return hasattr(wc, key)


def workload_axes(config: dict, name: str) -> dict[str, Any]:
    """The sweep axes of one workload: the top-level ``sweep`` overlaid by its own."""
    axes = dict(config.get("sweep", {}))
    axes.update(config["workloads"][name].get("sweep", {}) or {})
    return axes


# The first measurement.warmup_blocks blocks of every series are warm-up: measured like
# any block (same interleaving, same directories rep1, rep2 ...) and kept, but left out
# of every statistic (runs.csv: warmup). The first run of a series is cold (page cache,
# image, interpreter: on a 2-vCPU VM a 2-rank CNN's first container run took 4.60 s, every
# other run 3.64-3.85 s). sweep.repeats and measurement.max_repeats count the blocks after
# them (``blocks_for``).
WARMUP_BLOCKS = 1  # the schema's default of measurement.warmup_blocks


def warmup_blocks(config: dict) -> int:
    """measurement.warmup_blocks: the warm-up blocks at the start of every series."""
    return int((config.get("measurement") or {}).get("warmup_blocks", WARMUP_BLOCKS))


def is_warmup(config: dict, repeat: Any) -> bool:
    """Whether block ``repeat`` (1, 2, ...) of a series is a warm-up block."""
    return int(repeat) <= warmup_blocks(config)


def blocks_for(config: dict, repeats: int) -> int:
    """The blocks a series measures to have ``repeats`` blocks that count: the warm-up
    blocks first (the one place sweep.repeats and measurement.max_repeats, which count
    the blocks after them, become block numbers)."""
    return warmup_blocks(config) + int(repeats)


def enabled_workloads(config: dict) -> list[str]:
    return [name for name, w in config["workloads"].items() if w.get("enabled", True)]


def _as_list(value: Any) -> list:
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _workload_points(config: dict, name: str) -> Iterable[SweepPoint]:
    wl = config["workloads"][name]
    kind = kind_of(wl)
    axes = workload_axes(config, name)
    site = site_of(config)
    node = site["node"]

    missing = [axis for axis in kind.required_axes(wl, node) if axis not in axes]
    if missing:
        raise SweepError(
            f"workload {name}: sweep axis {', '.join(missing)} is not set "
            "(neither under sweep: nor under the workload's own sweep:)"
        )
    kind.check_site(name, wl, site)
    runtimes = workload_runtimes(config, name)
    for rt in runtimes:
        if rt not in RUNTIMES:
            try:  # names the runtime's modes where the mode is the bad part
                _runtimes.runtime(rt)
            except _runtimes.LaunchError as exc:
                raise SweepError(f"workload {name}: {exc}") from None
            raise SweepError(f"workload {name}: unknown runtime {rt!r}; known: {', '.join(RUNTIMES)}")
    repeats = int(axes.get("repeats", 1))
    if repeats < 1:
        raise SweepError(f"workload {name}: repeats must be >= 1, got {repeats}")
    threads_axis = _as_list(axes.get(CONFIG_AXES["threads"], [1]))

    # geometry: (nodes, gpus per node, ranks per node), as the workload's kind derives it
    geometry = list(kind.geometries(name, wl, axes, site))

    gpus_avail, cores = node["gpus"], node["cores"]
    for nodes, gpus, ranks in geometry:
        if nodes < 1 or ranks < 1 or gpus < 0:
            raise SweepError(f"workload {name}: nodes={nodes}, ranks={ranks}, gpus={gpus} out of range")
        if gpus > gpus_avail:
            raise SweepError(
                f"workload {name}: gpus_per_node={gpus} but site {site['name']} has "
                f"node.gpus={gpus_avail}"
            )
        for threads in threads_axis:
            if cores and ranks * threads > cores:
                raise SweepError(
                    f"workload {name}: {ranks} ranks x {threads} threads = {ranks * threads} "
                    f"exceeds node.cores={cores} of site {site['name']} (oversubscription "
                    "distorts timings)"
                )
            where = Geometry(nodes, gpus, ranks, threads)
            for arm in arms_of(runtimes):
                for rt, rep in itertools.product(arm_members(runtimes, arm),
                                                 range(1, blocks_for(config, repeats) + 1)):
                    yield SweepPoint.at(name, rt, where, rep, arm)


def is_native(runtime: str) -> bool:
    return _runtimes.is_native(runtime)


def workload_runtimes(config: dict, name: str) -> list[str]:
    """The runtimes a workload compares, in config order (native-aa added after native
    where the A/A calibration is on)."""
    axes = workload_axes(config, name)
    runtimes = _as_list(axes["runtimes"])
    if (config.get("measurement") or {}).get("aa_calibration") and "native" in runtimes:
        runtimes = [r for r in runtimes if r != "native-aa"]
        runtimes.insert(runtimes.index("native") + 1, "native-aa")
    return runtimes


def arms_of(runtimes: list[str]) -> list[str]:
    """The arms of a series comparing ``runtimes`` (see BLOCK_DIR): one per runtime
    compared with the reference; the reference alone, or each runtime alone when the
    reference is not among them."""
    others = [rt for rt in runtimes if rt != REFERENCE]
    if REFERENCE not in runtimes:
        return others
    return others or [REFERENCE]


def arm_members(runtimes: list[str], arm: str) -> list[str]:
    """The runtimes measured in each block of ``arm``, in the config's order."""
    if arm != REFERENCE and REFERENCE in runtimes:
        return [rt for rt in runtimes if rt in (REFERENCE, arm)]
    return [arm]


def workload_arms(config: dict, name: str) -> list[str]:
    return arms_of(workload_runtimes(config, name))


def block_runtimes(config: dict, workload: str, arm: str) -> list[str]:
    """The runtimes of one block of ``arm`` (the reference first where it is compared)."""
    return arm_members(workload_runtimes(config, workload), arm)


def block_order(point: SweepPoint, config: dict) -> list[str]:
    """The order of the runtimes in the block of ``point`` (one repeat of one arm of one
    geometry: the reference and the runtime compared with it).

    Comparisons are interleaved, never all of one runtime before another: within a block
    every runtime runs once, one after the other; ``alternate`` reverses the order every
    other repeat (ABBA: drift affects both sides alike), ``random`` shuffles each block
    with a seed derived from ``measurement.seed`` and the block (reproducible, recorded
    by each run).
    """
    runtimes = block_runtimes(config, point.workload, point.arm)
    m = config.get("measurement") or {}
    if m.get("order", "alternate") == "random":
        import random

        key = (f"{m.get('seed', 0)}:{point.workload}:{point.nodes}:{point.gpus}:"
               f"{point.ranks}:{point.threads}:{point.repeat}:{point.arm}")
        rng = random.Random(key)
        rng.shuffle(runtimes)
        return runtimes
    return runtimes if point.repeat % 2 == 1 else runtimes[::-1]


def run_order(point: SweepPoint, config: dict) -> dict[str, Any]:
    """Where this run sits in its block (one repeat of one geometry): see block_order.
    Recorded by the run (metrics.json ``order``); ``config`` is validated."""
    sequence = block_order(point, config)
    return {
        "scheme": config["measurement"]["order"],
        "block": point.repeat,
        # the runs of one block share it (scalesweep.analyse.pairing pairs on it)
        "block_id": point.block,
        "arm": point.arm,
        "position": sequence.index(point.runtime) if point.runtime in sequence else None,
        "sequence": sequence,
    }


def scaling_count(point: SweepPoint, payload: str) -> int:
    """What a scaling series of workload kind ``payload`` is plotted against (the kind's
    ``scaling_count``: GPUs for LLM, total ranks otherwise)."""
    return kind_of(payload).scaling_count(point)


def sweep_points(config: dict) -> list[SweepPoint]:
    """Every point the config asks for, sorted, after checking baselines are in the sweep."""
    points: list[SweepPoint] = []
    for name in enabled_workloads(config):
        # (SweepPoint's own order, by a key of its fields: 100,000 points sort in a tenth
        # of the time of their pairwise comparisons)
        mine = sorted(set(_workload_points(config, name)), key=POINT_ORDER)
        baseline = workload_axes(config, name).get("baseline")
        if baseline is not None:
            payload = config["workloads"][name]["payload"]
            kind = kind_of(payload)  # (scaling_count's kind, looked up once)
            counts = sorted({kind.scaling_count(p) for p in mine})
            if int(baseline) not in counts:
                raise SweepError(
                    f"workload {name}: baseline {baseline} is not a count in the sweep; "
                    f"counts: {', '.join(map(str, counts))}"
                )
        points.extend(mine)
    if not points:
        raise SweepError("the config enables no workload, or its axes are empty")
    return points


# --- choosing points from the command line: `--config 'only={workloads: [llm], ...}'` -----
# The selection limits which points are MEASURED in this invocation; it never removes a
# point from the sweep (sweep_points), and results outside it are kept and summarised.
SELECTION_KEY = "only"
# selection key -> the SweepPoint field it selects on
SELECTION_AXES = {"workloads": "workload", "runtimes": "runtime", "nodes": "nodes"}


@dataclass(frozen=True)
class Selection:
    """Allowed values per point field; an axis not named allows every value."""

    workloads: frozenset | None = None
    runtimes: frozenset | None = None
    nodes: frozenset | None = None

    @classmethod
    def of(cls, config: dict) -> "Selection":
        """The config's ``only:`` (no validation against the sweep: ``select_points``)."""
        only = config.get(SELECTION_KEY) or {}
        return cls(**{key: frozenset(_as_list(only[key])) if only.get(key) is not None
                      else None for key in SELECTION_AXES})

    @property
    def everything(self) -> bool:
        return all(getattr(self, key) is None for key in SELECTION_AXES)

    def __contains__(self, point: SweepPoint) -> bool:
        for key, field in SELECTION_AXES.items():
            allowed = getattr(self, key)
            if allowed is None or getattr(point, field) in allowed:
                continue
            # a chosen runtime is measured in its blocks: with native beside it
            if field == "runtime" and point.arm in allowed:
                continue
            return False
        return True

    def describe(self) -> str:
        """The selection as the --config value that gives it: only={workloads: [llm]}."""
        parts = [f"{key}: [{', '.join(map(str, sorted(getattr(self, key))))}]"
                 for key in SELECTION_AXES if getattr(self, key) is not None]
        return f"{SELECTION_KEY}={{{', '.join(parts)}}}" if parts else ""


def check_selection(points: Iterable[SweepPoint], config: dict) -> Selection:
    """The config's selection, checked against ``points`` (the whole sweep,
    ``sweep_points(config)``): every name or count must be one of the sweep's, and
    together they must select at least one point. Raises SweepError naming the bad value
    and the valid choices."""
    points = list(points)
    selection = Selection.of(config)
    if selection.everything:
        return selection
    workloads = config.get("workloads") or {}
    enabled = sorted({p.workload for p in points})
    for name in sorted(selection.workloads or ()):
        if name not in workloads:
            raise SweepError(
                f"{SELECTION_KEY}.workloads: {name!r} is not a workload of this config "
                f"(defined: {', '.join(sorted(workloads)) or 'none'})")
        if name not in enabled:
            raise SweepError(
                f"{SELECTION_KEY}.workloads: {name!r} is switched off "
                f"(workloads.{name}.enabled: false); enabled: {', '.join(enabled) or 'none'}")
    chosen = [p for p in points
              if selection.workloads is None or p.workload in selection.workloads]
    scope = ("the selected workloads" if selection.workloads is not None else "the sweep")
    for key in ("runtimes", "nodes"):
        allowed = getattr(selection, key)
        field = SELECTION_AXES[key]
        present = sorted({getattr(p, field) for p in chosen},
                         key=(RUNTIMES.index if key == "runtimes" else int))
        for value in sorted(allowed or (), key=str):
            if value not in present:
                what = "a runtime" if key == "runtimes" else "a node count"
                raise SweepError(
                    f"{SELECTION_KEY}.{key}: {value!r} is not {what} of {scope} "
                    f"(in the sweep: {', '.join(map(str, present))})")
    if not any(p in selection for p in chosen):
        raise SweepError(f"{selection.describe()} selects no point of the sweep (no point "
                         "of the selected workloads has a selected runtime at a selected "
                         "node count)")
    return selection


def select_points(points: Iterable[SweepPoint], config: dict) -> list[SweepPoint]:
    """The points of ``points`` (the sweep) that the config's ``only:`` selects, in
    order; all of them without ``only:``. Raises SweepError for a name or count that is
    not in the sweep (``check_selection``)."""
    points = list(points)
    selection = check_selection(points, config)
    return points if selection.everything else [p for p in points if p in selection]


def selected_points(config: dict) -> list[SweepPoint]:
    """The points to measure: ``sweep_points(config)`` narrowed by ``only:``."""
    return select_points(sweep_points(config), config)


def value_span(values) -> str:
    """Whole numbers as a range is written: "2", or "1-8" from the least to the largest
    (the nodes, counts or repeats swept; the report's labels, the plan's table)."""
    values = sorted(set(int(v) for v in values))
    return str(values[0]) if len(values) == 1 else f"{values[0]}-{values[-1]}"
