"""Adaptive repeats and the order of measurements.

A *series* is one arm of one geometry of one workload (workload, arm, nodes, GPUs, ranks,
threads): the reference (native) and the runtime the arm compares with it are measured in
blocks, one run of each per block, one right after the other
(``scalesweep.sweep.block_order``, ``BLOCK_DIR``). After ``sweep.repeats``
blocks (the minimum), a decision after each block says whether the series needs another:
until every container's overhead has a 95% CI half-width of at most
``measurement.target_ci_pp`` and every runtime has at least the minimum of undisturbed
repeats, or ``measurement.max_repeats`` blocks were measured.

Pure functions, but ``read_decision`` and ``recorded_decision``; the workflow
(``workflow/rules/run.smk``) chains the decisions with a checkpoint per block, so an
interrupted campaign continues where it stopped; `scalesweep status` counts the same runs
from the decisions on disk (``asked_points``).
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from scalesweep.sweep import (
    BLOCK_DIR,
    REFERENCE,
    Selection,
    SweepPoint,
    block_order,
    block_runtimes,
    is_native,
    workload_axes,
)

# a comparison's CI from fewer undisturbed repeats per side is not trusted, whatever
# sweep.repeats says: with 3 or 4 pairs a narrow CI under run-to-run drift is mostly a
# fluke, and stopping on it adds false faster/slower verdicts (simulated in
# tests/test_verdict_simulation.py: +0.3-0.45 points at 3, +0.03 at 5)
MIN_COMPARED = 5
# a series' directory: the geometry part of its blocks' (sweep.BLOCK_DIR without rep<k>)
SERIES_DIR, _, _REPEAT = BLOCK_DIR.rpartition("/")
assert _REPEAT == "rep{repeat}", BLOCK_DIR
# The decisions of a series, relative to the campaign directory: the checkpoint
# repeats_decision writes DECISION_JSON after each block, rule series_done FINAL_JSON
# (workflow/rules/run.smk); `scalesweep status` reads them (decision_path, final_path).
DECISIONS_DIR = "results/decisions"
DECISION_JSON = f"{DECISIONS_DIR}/{SERIES_DIR}/after{{round}}.json"
FINAL_JSON = f"{DECISIONS_DIR}/{SERIES_DIR}/final.json"


@dataclass(frozen=True, order=True)
class Series:
    workload: str
    nodes: int
    gpus: int
    ranks: int
    threads: int
    arm: str = REFERENCE

    @property
    def path(self) -> str:
        return SERIES_DIR.format_map(vars(self))

    @classmethod
    def of(cls, point: SweepPoint) -> "Series":
        return cls(point.workload, point.nodes, point.gpus, point.ranks, point.threads,
                   point.arm)

    @classmethod
    def from_wildcards(cls, wc: Any) -> "Series":
        get = wc.get if hasattr(wc, "get") else lambda k: getattr(wc, k)
        return cls(str(get("workload")), int(get("nodes")), int(get("gpus")),
                   int(get("ranks")), int(get("threads")), str(get("arm")))

    def point(self, runtime: str, repeat: int) -> SweepPoint:
        return SweepPoint(self.workload, runtime, self.nodes, self.gpus, self.ranks,
                          self.threads, repeat, self.arm)

    def runtimes(self, config: dict) -> list[str]:
        """The runtimes of each of its blocks."""
        return block_runtimes(config, self.workload, self.arm)

    def as_dict(self) -> dict[str, Any]:
        return dict(vars(self))


def series_of(points: Iterable[SweepPoint]) -> list[Series]:
    return sorted({Series.of(p) for p in points})


def repeat_bounds(config: dict, workload: str) -> tuple[int, int]:
    """(minimum, maximum) blocks of a series: sweep.repeats and, where adaptive repeats
    are on, measurement.max_repeats (never below the minimum)."""
    low = int(workload_axes(config, workload).get("repeats", 1))
    m = config.get("measurement") or {}
    if not m.get("adaptive", True):
        return low, low
    return low, max(low, int(m.get("max_repeats", 10)))


def is_adaptive(config: dict, points: Iterable[SweepPoint]) -> bool:
    workloads = {p.workload for p in points}
    return any(repeat_bounds(config, w)[1] > repeat_bounds(config, w)[0] for w in workloads)


def walks_decisions(config: dict, points: Iterable[SweepPoint], selection: Selection) -> bool:
    """Whether the series of ``points`` follow their decisions (``asked_blocks``): with
    adaptive repeats, and no selection of runtimes (it splits a series, whose decisions
    compare all its runtimes: the selected runtimes get their minimum of blocks, and no
    decision is made or changed)."""
    return is_adaptive(config, points) and selection.runtimes is None


def decision_path(directory: str | Path, series: Series, round_: int) -> Path:
    """The decision after block ``round_`` of ``series`` in the campaign ``directory``,
    as the workflow's checkpoint repeats_decision writes it (``DECISION_JSON``)."""
    return Path(directory, DECISION_JSON.format(round=round_, **series.as_dict()))


def final_path(directory: str | Path, series: Series) -> Path:
    """The record of a series' runs and last decision in the campaign ``directory``, as
    the workflow's rule series_done writes it (``FINAL_JSON``)."""
    return Path(directory, FINAL_JSON.format(**series.as_dict()))


def decision_problem(record: Any) -> str | None:
    """Why ``record`` (a decision file's JSON) is not a decision ``wants_more`` can
    walk (another shape: {}, a list, an older schema), or None."""
    if not isinstance(record, dict):
        return f"a JSON {type(record).__name__}, not a decision (an object)"
    missing = [k for k in ("series", "round", "enough") if k not in record]
    if missing:
        return f"no {', '.join(missing)} (not a decision of this version)"
    series, round_ = record["series"], record["round"]
    if not isinstance(series, dict) or not isinstance(series.get("workload"), str):
        return f"series is {series!r}, not an object naming its workload"
    if isinstance(round_, bool) or not isinstance(round_, int):
        return f"round is {round_!r}, not an integer"
    valid = record.get("valid_repeats") or {}
    if not isinstance(valid, dict) or not all(isinstance(v, list) for v in valid.values()):
        return f"valid_repeats is {valid!r}, not an object of lists"
    comparisons = record.get("comparisons") or {}
    if not isinstance(comparisons, dict):
        return f"comparisons is {comparisons!r}, not an object"
    for runtime, c in comparisons.items():
        if not isinstance(c, dict):
            return f"comparisons.{runtime} is {c!r}, not an object"
        for key in ("n", "n_native", "ci_half_width_pp"):
            value = c.get(key)
            if value is not None and (isinstance(value, bool)
                                      or not isinstance(value, (int, float))):
                return f"comparisons.{runtime}.{key} is {value!r}, not a number"
    return None


def read_decision(path: str | Path) -> tuple[dict | None, str | None]:
    """(the decision in the file ``path``, None), or (None, why it cannot be walked:
    unreadable, not JSON, another shape: ``decision_problem``), or (None, None) where
    there is no such file (the decision is not made yet)."""
    try:
        record = json.loads(Path(path).read_text())
    except FileNotFoundError:
        return None, None
    except (OSError, ValueError) as exc:
        return None, f"not readable as JSON ({exc})"
    problem = decision_problem(record)
    return (None, problem) if problem else (record, None)


def asked_blocks(series: Series, config: dict,
                 decision: Callable[[int], Mapping[str, Any] | None]) -> int:
    """The blocks ``series`` asks for so far: its minimum (sweep.repeats), then one more
    per decision that wanted more (``wants_more``, under the current config), up to its
    maximum. ``decision(k)``: the decision after block k, None where it is not made yet
    (the count stops there). The workflow's ``decision`` is its checkpoint (common.smk
    ``series_walk``: Snakemake makes a missing decision, then asks again);
    `scalesweep status` reads the files on disk (``recorded_decision``)."""
    low, high = repeat_bounds(config, series.workload)
    blocks = low
    while blocks < high:
        made = decision(blocks)
        if made is None or not wants_more(made, config):
            break
        blocks += 1
    return blocks


def recorded_decision(directory: str | Path, series: Series, round_: int,
                      problems: list[tuple[str, str]] | None = None) -> dict | None:
    """The decision after block ``round_`` as recorded in the campaign ``directory``;
    None without one, or with one that cannot be walked (``read_decision``), which is
    then added to ``problems`` as (file, why)."""
    path = decision_path(directory, series, round_)
    record, problem = read_decision(path)
    if problem and problems is not None:
        problems.append((str(path), problem))
    return record


def asked_points(points: Iterable[SweepPoint], config: dict, directory: str | Path,
                 problems: list[tuple[str, str]] | None = None) -> list[SweepPoint]:
    """Every run the series of ``points`` ask for by the decisions recorded in the
    campaign ``directory`` (``asked_blocks``): the runs the workflow measures, whether
    measured yet or not (a deleted extra repeat among them). A decision file that cannot
    be walked counts as not made (its series stops there) and goes to ``problems``."""
    return sorted(
        series.point(rt, k)
        for series in series_of(points)
        for k in range(1, asked_blocks(
            series, config,
            functools.partial(recorded_decision, directory, series, problems=problems)) + 1)
        for rt in series.runtimes(config))


def run_priority(point: SweepPoint, config: dict, series_index: Mapping[Series, int]) -> int:
    """Snakemake priority of a measurement: the higher, the sooner. Measurements run
    block by block (every series' repeat 1, then every series' repeat 2, ...) and
    within a block in ``block_order``; all negative, so the jobs that prepare them
    (image build, staging; priority 0) are always scheduled first.
    """
    order = block_order(point, config)
    n_rt = len(order)
    position = order.index(point.runtime) if point.runtime in order else n_rt
    n_series = max(len(series_index), 1)
    index = series_index.get(Series.of(point), n_series)
    return -(((point.repeat - 1) * (n_series + 1) + index) * (n_rt + 1) + position) - 1


def decide(
    series: Series,
    round_: int,
    runs: Sequence[Mapping[str, Any]],
    config: dict,
) -> dict[str, Any]:
    """Whether ``series`` needs another block after ``round_`` blocks.

    ``runs``: one row per run of the series (keys runtime, repeat, time_s, disturbed),
    as ``scalesweep.collect.run_row`` gives them. ``enough`` is True when every runtime
    has at least the minimum of undisturbed repeats and every comparison with native
    meets the CI target; ``more`` adds the bound of ``max_repeats``.
    """
    from scalesweep.analysis import block_pairs, overhead_verdict

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
        from scalesweep.collect import campaign_settings

        settings = campaign_settings(config)
        base = valid[REFERENCE]
        for rt in runtimes:
            if rt == REFERENCE:
                continue
            # the runs of one repeat of a series are one block: measured together; the
            # pairs as the published verdict forms them (analysis.block_pairs: pairs
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


def wants_more(decision: Mapping[str, Any], config: dict) -> bool:
    """Another block after this decision, under the current config's maximum (a raised
    ``max_repeats`` continues a series that had stopped at the old one)."""
    series = decision["series"]
    low, high = repeat_bounds(config, series["workload"])
    if int(decision["round"]) >= high:
        return False
    # judged again under the current config: a lowered target or a raised minimum
    # continues a series that had stopped
    target = float((config.get("measurement") or {}).get("target_ci_pp", 2.0))
    if any(len(v) < low for v in (decision.get("valid_repeats") or {}).values()):
        return True
    for c in (decision.get("comparisons") or {}).values():
        half = c.get("ci_half_width_pp")
        if min(c.get("n") or 0, c.get("n_native") or 0) < MIN_COMPARED:
            return True
        if half is None or not half <= target:
            return True
    return not decision["enough"] and not decision.get("comparisons")


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
