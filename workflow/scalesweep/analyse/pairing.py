"""Which runs of two runtimes are compared as pairs: runs measured in the same block
(``SAME_BLOCK``), or on the same repeat number (``SAME_REPEAT``), less the pairs measured
apart or on machines whose speed differed; pairs on the same hosts preferred. The one
pairing of the verdicts (``scalesweep.analyse.overhead.verdict_table``) and of the
adaptive decisions (``scalesweep.analyse.decision``).
"""

from __future__ import annotations

import functools
import math
import re

import numpy as np
import pandas as pd

from scalesweep.analyse.frame import TableError
from scalesweep.analyse.stats import usable


# how a paired comparison's pairs were formed, as every table says it
SAME_BLOCK = "same-block pairs"
SAME_REPEAT = "pairs on the repeat number"
UNPAIRED = "unpaired"


class Pairs:
    """The pairs of one comparison: (native, container) times, or None where unpaired;
    how they were formed, and how many were left out and why."""

    def __init__(self, native=None, container=None, how=UNPAIRED, split=0,
                 machine_differs=0, surviving=(np.array([]), np.array([]))):
        self.native, self.container, self.how = native, container, how
        self.split, self.machine_differs = split, machine_differs
        self.surviving = surviving  # the pairs left where fewer than 2 remain


def pair_records(df: pd.DataFrame, pair_col: str, time_col: str) -> list[dict]:
    """Each row of ``df`` as a dict of what side_pairs reads of it (``pair_col``,
    ``time_col`` and ROW_KEYS): a table of runs.csv's hundred columns made into records
    whole was most of a 100,000-run campaign's verdicts (#31)."""
    cols = [c for c in df.columns if c in (pair_col, time_col, *ROW_KEYS)]
    return [dict(zip(cols, values)) for values in zip(*(df[c].tolist() for c in cols))]


def side_pairs(base: tuple[np.ndarray, list[dict]], runs: tuple[np.ndarray, list[dict]],
               pair_col: str, time_col: str, max_gap_s: float | None = None,
               probe_tolerance_pct: float | None = None) -> Pairs:
    """The valid pairs, matched on ``pair_col`` and in its order (see ``verdict_table``),
    of two sides given as (their ``pair_col`` values, their rows: ``pair_records``)."""
    how = SAME_BLOCK if pair_col == "block_id" else SAME_REPEAT
    sides = []
    for keys, records in (base, runs):
        if pd.isna(keys).any() or len(set(keys.tolist())) != len(keys):
            if how == SAME_BLOCK:
                raise TableError(f"{pair_col}: every run must name its block, once per "
                                 "runtime (empty or repeated block ids)")
            return Pairs()
        sides.append({k: r for k, r in zip(keys.tolist(), records)
                      if not r["_excluded"] and _usable(r[time_col])})
    return block_pairs(sides[0], sides[1], time_col, how, max_gap_s, probe_tolerance_pct)


def _usable(value) -> bool:
    """stats.usable of one value (a float checked as a float, anything else as usable
    checks it: in an array of floats)."""
    if type(value) is float:
        return value > 0 and value != math.inf
    return bool(usable(np.array([value], float))[0])


# the keys of a run's row that block_pairs reads, besides its time column
ROW_KEYS = ("_excluded", "start", "end", "hosts", "payload", "probe_gflops", "probe_gbps",
            "probe_change_pct")


def block_pairs(native: dict, other: dict, time_col: str = "time_s", how: str = SAME_BLOCK,
                max_gap_s: float | None = None,
                probe_tolerance_pct: float | None = None) -> Pairs:
    """The pairs of two runtimes' valid runs, each side {block key: run row}: the blocks
    both measured, less those whose runs were more than ``max_gap_s`` apart (columns
    start, end) or saw machines whose probes differ by more than ``probe_tolerance_pct``
    (``scalesweep.measure.probe.pair_probe_difference_pct``); pairs on the same hosts preferred
    where at least two exist. The one pairing of the verdicts (``verdict_table``) and of
    the adaptive decisions (``scalesweep.analyse.decision.decide``). It reads a row's
    ``time_col`` and ``ROW_KEYS`` only."""
    common = sorted(set(native) & set(other), key=natural_key)
    split = machine = 0
    if max_gap_s is not None:
        together = [k for k in common if gap_s(native[k], other[k]) <= max_gap_s]
        split, common = len(common) - len(together), together
    if probe_tolerance_pct is not None:
        from scalesweep.measure.probe import pair_probe_difference_pct

        alike = [k for k in common if not pair_probe_difference_pct(
                     native[k], other[k], probe_kernel(native[k])) > probe_tolerance_pct]
        # NaN (no probe): kept
        machine, common = len(common) - len(alike), alike
    # Under Slurm the two runs of a block may get different nodes: pairs measured on
    # the same nodes are preferred, where at least two such pairs exist.
    same = [k for k in common if "hosts" in native[k] and "hosts" in other[k]
            and str(native[k]["hosts"]) == str(other[k]["hosts"])]
    if len(same) >= 2:
        common = same
    times = (np.array([float(native[k][time_col]) for k in common], dtype=float),
             np.array([float(other[k][time_col]) for k in common], dtype=float))
    if len(common) < 2:
        return Pairs(how=how, split=split, machine_differs=machine, surviving=times)
    return Pairs(times[0], times[1], how, split, machine)


def probe_kernel(row) -> str | None:
    """The probe kernel of a run row's workload kind (``probe_kernel``: the one that stands
    for how its payload uses the machine); None (both kernels) where the row names no
    kind the registry knows."""
    from scalesweep.plan.kinds import SweepError, kind_of

    payload = row.get("payload") if hasattr(row, "get") else None
    if not isinstance(payload, str) or not payload:
        return None
    try:
        return kind_of(payload).probe_kernel
    except SweepError:
        return None


_DIGITS = re.compile(r"(\d+)")


def natural_key(value):
    """Sort block ids and repeat numbers as numbers where they are (rep2 before rep10)."""
    return [int(t) if t.isdigit() else t for t in _DIGITS.split(str(value))]


def gap_s(a: dict, b: dict) -> float:
    """Seconds between the end of the earlier run and the start of the later one (0 when
    they overlap; NaN-safe: 0 when a time is missing, as in tables without times)."""
    starts = [_utc(a.get("start")), _utc(b.get("start"))]
    ends = [_utc(a.get("end")), _utc(b.get("end"))]
    if any(t is None for t in (*starts, *ends)):
        return 0.0
    first, second = (0, 1) if starts[0] <= starts[1] else (1, 0)
    return max(0.0, (starts[second] - ends[first]).total_seconds())


@functools.lru_cache(maxsize=65536)
def _utc_text(text: str):
    try:
        t = pd.to_datetime(text, utc=True)
    except (ValueError, TypeError):
        return None
    return None if pd.isna(t) else t


def _utc(value):
    """A run's start or end as a UTC timestamp, None where missing or unreadable; each
    time stamp parsed once (every pair of a campaign, and every decision, reads them)."""
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return None
    if isinstance(value, pd.Timestamp):
        return None if pd.isna(value) else (value.tz_localize("UTC") if value.tzinfo is None
                                            else value)
    return _utc_text(str(value))
