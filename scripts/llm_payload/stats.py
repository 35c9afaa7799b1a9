"""Percentiles and summaries of a run's per-request figures (TTFT, latency, decode rate,
an engine's own timing fields).

:func:`percentile` is ``scalesweep.record.load.quantile`` with ``q`` in percent (both
numpy's default "linear" method), kept here as it has always computed: its position
``(n - 1) * q / 100`` rounds differently in the last bit from ``quantile``'s ``q * (n -
1)``, and it skips NaN where ``quantile`` refuses it, so the metrics files of earlier
campaigns keep their exact values (tests/unit/test_llm.py holds the two together).
"""

from __future__ import annotations

import math
from typing import Any


def percentile(values: list[float], q: float) -> float | None:
    """The q-th percentile (0..100), linear interpolation (numpy's default method)."""
    xs = sorted(v for v in values if v is not None and not math.isnan(v))
    if not xs:
        return None
    pos = (len(xs) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def summarize(values: list[float | None]) -> dict[str, Any]:
    """n, mean, std (the spread inside the run: sample standard deviation, None for one
    value), min, percentiles, max."""
    xs = [v for v in values if v is not None]
    if not xs:
        return {"n": 0}
    mean = sum(xs) / len(xs)
    return {
        "n": len(xs),
        "mean": mean,
        "std": (math.sqrt(sum((x - mean) ** 2 for x in xs) / (len(xs) - 1))
                if len(xs) > 1 else None),
        "min": min(xs),
        "p50": percentile(xs, 50),
        "p90": percentile(xs, 90),
        "p99": percentile(xs, 99),
        "max": max(xs),
    }
