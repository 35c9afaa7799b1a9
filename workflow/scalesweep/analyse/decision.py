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
from scalesweep.analyse.summary import campaign_settings, duration_text, median_block_seconds
from scalesweep.plan.adaptive import MIN_COMPARED, Series, block_bounds, repeat_bounds, wants_more
from scalesweep.plan.adaptive import campaign_comparisons, is_futile, looks, settle_level
from scalesweep.plan.sweep import REFERENCE, is_native, is_warmup, warmup_blocks


def decide(
    series: Series,
    round_: int,
    runs: Sequence[Mapping[str, Any]],
    config: dict,
    *,
    comparisons: int | None = None,
) -> dict[str, Any]:
    """Whether ``series`` needs another block after ``round_`` blocks.

    ``runs``: one row per run of the series (keys runtime, repeat, time_s, disturbed),
    as ``scalesweep.analyse.collect.run_row`` gives them. ``enough`` is True when every runtime
    has at least the minimum of undisturbed repeats and every comparison with native
    meets the CI target; ``more`` adds the bound of ``max_repeats``.

    A comparison needs no more blocks, whatever its CI, once it is *settled* or
    *futile* (the objective is the time to a verdict, ``settle_level``): settled, its
    verdict (slower, faster or equivalent, from MIN_COMPARED pairs on) has a p value
    below ``settle_level``, so that it holds over the campaign's ``comparisons``
    (Benjamini-Hochberg, ``scalesweep.analyse.multiplicity``) whatever the others give;
    futile, even its own verdict at 5% cannot be reached within ``max_repeats`` at the
    measured overhead and spread (``pairs_to_decide``, ``is_futile``): the decision says
    so (``futility``, ``reasons``) with the blocks and the wall time it would need.
    ``comparisons``: the campaign's (``campaign_comparisons`` of ``config`` by default).
    """
    # the warm-up blocks (measurement.warmup_blocks) count for nothing: left out here
    runs = [row for row in runs if not is_warmup(config, row["repeat"])]
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
    comparisons_in_campaign = (comparisons if comparisons is not None else
                               campaign_comparisons(config) if REFERENCE in runtimes else 1)
    comparisons = {}
    level = settle_level(comparisons_in_campaign, looks(low, high))
    blocks_left = block_bounds(config, series.workload)[1] - round_
    notes: list[str] = []  # why a comparison stops before its CI meets the target
    futility: list[str] = []
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
            have = len(native)
            claim_p = {"equivalent": verdict["equivalence_p_value"], "slower": verdict["p_value"],
                       "faster": verdict["p_value"]}.get(verdict["verdict"], np.nan)
            settled = bool(have >= MIN_COMPARED and np.isfinite(claim_p) and claim_p < level)
            verdict.update(settled=settled, settle_p=level,
                           pairs_to_decide=have + int(verdict["repeats_to_decide"]))
            futile = (have >= MIN_COMPARED and not settled and not verdict["target_met"]
                      and is_futile(verdict, blocks_left))
            verdict["futile"] = bool(futile)
            comparisons[rt] = _plain(verdict)
            if settled and not verdict["target_met"]:
                notes.append(f"{rt} vs native: settled, {verdict['verdict']} (p {claim_p:.2g} < "
                             f"{level:.2g}, holds over the campaign's {comparisons_in_campaign} "
                             f"comparison{'s' if comparisons_in_campaign != 1 else ''})")
            if futile:
                futility.append(f"{rt} vs native: " + futility_text(
                    verdict, have, high, block_seconds(base, valid[rt])))
            if len(native) < MIN_COMPARED:
                left = pairs.split + pairs.machine_differs
                reasons.append(f"{rt} vs native: {len(native)} same-block pairs"
                               f"{f' ({left} left out)' if left else ''}, a comparison "
                               f"needs at least {MIN_COMPARED}")
            elif not (verdict["target_met"] or settled or futile):
                reasons.append(
                    f"{rt} vs native: 95% CI half-width "
                    f"{_fmt(verdict['ci_half_width_pp'])} pp > target {target} pp"
                )
    enough = not reasons
    reasons = reasons + notes + futility
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
        "more": (not enough) and round_ < block_bounds(config, series.workload)[1],
        "reasons": reasons,
        "futility": futility,
        "campaign_comparisons": comparisons_in_campaign,
        "native_kinds": [rt for rt in runtimes if is_native(rt)],
    }


def block_seconds(native: Mapping[int, Mapping[str, Any]],
                  other: Mapping[int, Mapping[str, Any]]) -> float | None:
    """The median wall seconds of one block of a series: its two runs' ``harness_wall_s``
    (the payload's ``time_s`` where a run has none); None without a block of both."""
    def wall(row: Mapping[str, Any]) -> float | None:
        for key in ("harness_wall_s", "time_s"):
            x = row.get(key)
            if isinstance(x, (int, float)) and not isinstance(x, bool) and np.isfinite(x) \
                    and x > 0:
                return float(x)
        return None

    return median_block_seconds({k: wall(row) for k, row in native.items()},
                                {k: wall(row) for k, row in other.items()})


def futility_text(verdict: Mapping[str, Any], have: int, max_repeats: int,
                  seconds_per_block: float | None) -> str:
    """"cannot settle within max_repeats=K at the measured spread: needs about N
    same-block pairs (...)": why a futile comparison stops (``decide``)."""
    from scalesweep.analyse.verdict import MAX_REPEATS

    need = int(verdict["pairs_to_decide"])
    more = max(need - have, 0)
    about = f"over {MAX_REPEATS}" if need >= MAX_REPEATS else f"about {need}"
    wall = (f", ~{duration_text(more * seconds_per_block)} more of wall time at this series' "
            f"{seconds_per_block:.3g} s per block" if seconds_per_block else "")
    return (f"cannot settle within max_repeats={max_repeats} at the measured spread: needs "
            f"{about} same-block pairs ({more} more than the {have} measured{wall}; overhead "
            f"{_fmt(verdict.get('overhead_pct'))}%, 95% CI half-width "
            f"{_fmt(verdict.get('ci_half_width_pp'))} pp)")


def blocks_at_spread(series: Series, config: dict,
                     spread: Mapping[str, tuple[float, float]],
                     comparisons: int | None = None) -> int | None:
    """The blocks ``series`` measures, every run undisturbed, when the log ratio
    ln(t_runtime / t_native) of each compared runtime's same-block pairs has mean m and
    standard deviation s (``spread``: runtime -> (m, s)): its minimum, then one more per
    decision that wants more (``decide``, ``wants_more``: the walk of the workflow's
    checkpoints), up to its maximum. The pairs of round n are n normal scores with exactly
    that mean and sample sd, so that every rule of ``decide`` judges them as it judges a
    real series (pairs needed, CI target, settled and futile stops; ``comparisons``: the
    campaign's, ``campaign_comparisons`` by default). ``spread`` (0, 0): the fewest blocks
    the series can stop at. None where a compared runtime has no spread in ``spread``."""
    from scipy import stats

    low, high = block_bounds(config, series.workload)  # warm-up blocks included
    runtimes = series.runtimes(config)
    compared = [rt for rt in runtimes if rt != REFERENCE] if REFERENCE in runtimes else []
    if any(rt not in spread for rt in compared):
        return None
    warm = warmup_blocks(config)  # (their runs: left out by decide, any value)

    def runs(round_: int) -> list[dict[str, Any]]:
        n = max(round_ - warm, 0)  # the blocks that count
        q = stats.norm.ppf((np.arange(1, n + 1) - 0.375) / (n + 0.25))  # Blom
        z = (q - q.mean()) / q.std(ddof=1) if n > 1 else np.zeros(1)
        z = np.concatenate([np.zeros(round_ - n), z])
        out = []
        for k in range(round_):
            for rt in runtimes:
                m, s = spread.get(rt, (0.0, 0.0))
                time_s = float(np.exp(m + s * z[k])) if rt in compared else 1.0
                out.append({"runtime": rt, "repeat": k + 1, "time_s": time_s,
                            "disturbed": False})
        return out

    blocks = low
    if comparisons is None and compared:
        comparisons = campaign_comparisons(config)
    while blocks < high and wants_more(decide(series, blocks, runs(blocks), config,
                                              comparisons=comparisons), config):
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
