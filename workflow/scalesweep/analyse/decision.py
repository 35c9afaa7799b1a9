"""The decision after each block of a series: does it need another one?

``decide`` reads the runs of one series (``scalesweep.plan.adaptive.Series``) measured so
far and forms the comparisons with native as the published verdict forms them (same-block
pairs, ``scalesweep.analyse.pairing.block_pairs`` and ``overhead_verdict``, under the
campaign's settings, ``scalesweep.analyse.summary.campaign_settings``); the workflow
(``workflow/scripts/decide_repeats.py``) writes its record, and
``scalesweep.plan.adaptive`` walks the records (``wants_more``, ``asked_points``).
``blocks_at_spread``: the blocks a series measures at a given spread, by the same
decisions (the estimate of ``scalesweep plan``). Pure.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from scalesweep.analyse.pairing import block_pairs
from scalesweep.analyse.verdict import overhead_verdict
from scalesweep.analyse.summary import campaign_settings
from scalesweep.plan.adaptive import MIN_COMPARED, Series, repeat_bounds, wants_more
from scalesweep.plan.sweep import REFERENCE, is_native


def decide(
    series: Series,
    round_: int,
    runs: Sequence[Mapping[str, Any]],
    config: dict,
) -> dict[str, Any]:
    """Whether ``series`` needs another block after ``round_`` blocks.

    ``runs``: one row per run of the series (keys runtime, repeat, time_s, disturbed),
    as ``scalesweep.analyse.collect.run_row`` gives them. ``enough`` is True when every runtime
    has at least the minimum of undisturbed repeats and every comparison with native
    meets the CI target; ``more`` adds the bound of ``max_repeats``.
    """
    low, high = repeat_bounds(config, series.workload)
    m = config.get("measurement") or {}
    target = float(m.get("target_ci_pp", 2.0))
    margin = float(m.get("equivalence_margin_pct", 2.0))
    runtimes = series.runtimes(config)
    valid: dict[str, dict[int, Mapping[str, Any]]] = {rt: {} for rt in runtimes}
    disturbed: dict[str, list[int]] = {rt: [] for rt in runtimes}
    for row in runs:
        rt = row["runtime"]
        if rt not in valid or int(row["repeat"]) > round_:
            continue
        time_s = row.get("time_s")
        usable = isinstance(time_s, (int, float)) and np.isfinite(time_s) and time_s > 0
        if row.get("disturbed"):
            disturbed[rt].append(int(row["repeat"]))
        elif usable:
            valid[rt][int(row["repeat"])] = row
    reasons = []
    for rt in runtimes:
        if len(valid[rt]) < low:
            reasons.append(f"{rt}: {len(valid[rt])} undisturbed repeats of at least {low}")
    comparisons = {}
    if REFERENCE in runtimes:
        settings = campaign_settings(config)
        base = valid[REFERENCE]
        for rt in runtimes:
            if rt == REFERENCE:
                continue
            # the runs of one repeat of a series are one block: measured together; the
            # pairs as the published verdict forms them (pairing.block_pairs: pairs
            # measured apart or on a machine whose speed differed left out)
            pairs = block_pairs(base, valid[rt], "time_s", max_gap_s=settings["max_pair_gap_s"],
                                probe_tolerance_pct=settings["probe_tolerance_pct"])
            native, other = (pairs.native, pairs.container) if pairs.native is not None \
                else pairs.surviving
            verdict = overhead_verdict(native, other, paired=True, margin_pct=margin,
                                       target_ci_pp=target)
            verdict.update(n_pairs_split=pairs.split,
                           n_pairs_machine_differs=pairs.machine_differs)
            comparisons[rt] = _plain(verdict)
            if len(native) < MIN_COMPARED:
                left = pairs.split + pairs.machine_differs
                reasons.append(f"{rt} vs native: {len(native)} same-block pairs"
                               f"{f' ({left} left out)' if left else ''}, a comparison "
                               f"needs at least {MIN_COMPARED}")
            elif not verdict["target_met"]:
                reasons.append(
                    f"{rt} vs native: 95% CI half-width "
                    f"{_fmt(verdict['ci_half_width_pp'])} pp > target {target} pp"
                )
    enough = not reasons
    return {
        "series": series.as_dict(),
        "round": round_,
        "min_repeats": low,
        "max_repeats": high,
        "target_ci_pp": target,
        "valid_repeats": {rt: sorted(v) for rt, v in valid.items()},
        "disturbed_repeats": disturbed,
        "comparisons": comparisons,
        "enough": enough,
        "more": (not enough) and round_ < high,
        "reasons": reasons,
        "native_kinds": [rt for rt in runtimes if is_native(rt)],
    }


def blocks_at_spread(series: Series, config: dict,
                     spread: Mapping[str, tuple[float, float]]) -> int | None:
    """The blocks ``series`` measures, every run undisturbed, when the log ratio
    ln(t_runtime / t_native) of each compared runtime's same-block pairs has mean m and
    standard deviation s (``spread``: runtime -> (m, s)): its minimum, then one more per
    decision that wants more (``decide``, ``wants_more``: the walk of the workflow's
    checkpoints), up to its maximum. The pairs of round n are n normal scores with exactly
    that mean and sample sd, so that every rule of ``decide`` judges them as it judges a
    real series (pairs needed, CI target). ``spread`` (0, 0): the fewest blocks the series
    can stop at. None where a compared runtime has no spread in ``spread``."""
    from scipy import stats

    low, high = repeat_bounds(config, series.workload)
    runtimes = series.runtimes(config)
    compared = [rt for rt in runtimes if rt != REFERENCE] if REFERENCE in runtimes else []
    if any(rt not in spread for rt in compared):
        return None

    def runs(round_: int) -> list[dict[str, Any]]:
        q = stats.norm.ppf((np.arange(1, round_ + 1) - 0.375) / (round_ + 0.25))  # Blom
        z = (q - q.mean()) / q.std(ddof=1) if round_ > 1 else np.zeros(1)
        out = []
        for k in range(round_):
            for rt in runtimes:
                m, s = spread.get(rt, (0.0, 0.0))
                time_s = float(np.exp(m + s * z[k])) if rt in compared else 1.0
                out.append({"runtime": rt, "repeat": k + 1, "time_s": time_s,
                            "disturbed": False})
        return out

    blocks = low
    while blocks < high and wants_more(decide(series, blocks, runs(blocks), config), config):
        blocks += 1
    return blocks


def _fmt(x: Any) -> str:
    try:
        return f"{float(x):.2f}"
    except (TypeError, ValueError):
        return str(x)


def _plain(d: Mapping[str, Any]) -> dict[str, Any]:
    out = {}
    for k, v in d.items():
        if isinstance(v, np.generic):
            v = v.item()
        if isinstance(v, float) and not np.isfinite(v):
            v = None
        out[k] = v
    return out
