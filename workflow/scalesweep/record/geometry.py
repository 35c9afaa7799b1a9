"""A sweep point's geometry, declared once (issue #28): its axes, what the config calls
each, and how a point's directory spells it.

- ``AXES``: the columns of runs.csv and of every table keyed by geometry, in order;
- ``CONFIG_AXES``: each axis's name under ``sweep:`` in the config (``gpus`` is swept as
  ``gpus_per_node``);
- ``SEGMENT``: the path segment of a point's directory (``n2-g0-r4-t1``), a format string
  whose fields are ``AXES``; ``segment_regex`` builds the pattern that parses it back,
  with each axis's value constraint (``CONSTRAINTS``: the Snakemake wildcard constraints);
- ``Geometry``: the four values, frozen.

Standard library only: payloads import ``record`` inside containers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping

# the columns, in the order every table lists them
AXES: tuple[str, ...] = ("nodes", "gpus", "ranks", "threads")
# column -> its sweep axis in the config (sweep: / workloads.<name>.sweep:)
CONFIG_AXES: dict[str, str] = {
    "nodes": "nodes",
    "gpus": "gpus_per_node",
    "ranks": "ranks_per_node",
    "threads": "threads_per_rank",
}
COLUMN_OF: dict[str, str] = {axis: column for column, axis in CONFIG_AXES.items()}
# the segment of a point's directory below <workload>/<arm>/ (sweep.BLOCK_DIR)
SEGMENT = "-".join(f"{axis[0]}{{{axis}}}" for axis in AXES)  # n{nodes}-g{gpus}-r{ranks}-t{threads}
# each axis's values (Snakemake's wildcard constraints): no zero but for GPUs (CPU only)
CONSTRAINTS: dict[str, str] = {
    "nodes": r"[1-9][0-9]*",
    "gpus": r"[0-9]+",
    "ranks": r"[1-9][0-9]*",
    "threads": r"[1-9][0-9]*",
}


def segment_regex(constraints: Mapping[str, str] | None = None, named: bool = True) -> str:
    """``SEGMENT`` as a regular expression (unanchored): each field a group (named after
    its axis where ``named``) of its constraint (``CONSTRAINTS``, or ``constraints``)."""
    constraints = CONSTRAINTS if constraints is None else constraints

    def field(m: re.Match) -> str:
        body = constraints[m[1]]
        return f"(?P<{m[1]}>{body})" if named else f"(?:{body})"

    parts = re.split(r"(\{\w+\})", SEGMENT)
    return "".join(field(re.match(r"\{(\w+)\}", p)) if p.startswith("{") else re.escape(p)
                   for p in parts if p)


SEGMENT_RE = re.compile(f"^{segment_regex()}$")


@dataclass(frozen=True, order=True)
class Geometry:
    """Where a point runs: ``nodes`` nodes, ``gpus`` GPUs visible per node (0: CPU only),
    ``ranks`` processes per node, ``threads`` threads per rank."""

    nodes: int
    gpus: int
    ranks: int
    threads: int = 1

    @property
    def segment(self) -> str:
        return SEGMENT.format(nodes=self.nodes, gpus=self.gpus, ranks=self.ranks,
                              threads=self.threads)

    @property
    def world_size(self) -> int:
        return self.nodes * self.ranks

    def as_dict(self) -> dict[str, int]:
        return {axis: getattr(self, axis) for axis in AXES}

    @classmethod
    def parse(cls, segment: str) -> "Geometry":
        """The geometry a path segment spells (``n2-g0-r4-t1``); ValueError otherwise."""
        m = SEGMENT_RE.match(segment.strip("/"))
        if not m:
            raise ValueError(f"not a geometry segment ({SEGMENT}): {segment!r}")
        return cls(**{axis: int(m[axis]) for axis in AXES})

    from_segment = parse

    @classmethod
    def of(cls, values: Any) -> "Geometry":
        """The geometry of a mapping or an object with the four axes (a SweepPoint, a
        runs.csv row, Snakemake wildcards)."""
        get = values.get if hasattr(values, "get") else lambda k: getattr(values, k)
        return cls(**{axis: int(get(axis)) for axis in AXES})
