"""Adaptive repeats and the order of measurements.

A *series* is one arm of one geometry of one workload (workload, arm, nodes, GPUs, ranks,
threads): the reference (native) and the runtime the arm compares with it are measured in
blocks, one run of each per block, one right after the other
(``scalesweep.plan.sweep.block_order``, ``BLOCK_DIR``). Its first
``measurement.warmup_blocks`` blocks are warm-up, left out of every statistic
(``sweep.is_warmup``); after them and ``sweep.repeats`` blocks (the minimum), a decision
after each block says whether the series needs another: until every container's overhead
has a 95% CI half-width of at most ``measurement.target_ci_pp`` and every runtime has at
least the minimum of undisturbed repeats, or ``measurement.max_repeats`` blocks after the
warm-up were measured (``block_bounds``).

The decision itself reads measured runs, so it is the analysis' (``scalesweep.analyse.
decision.decide``); this module walks the decisions' records. Pure functions, but
``read_decision`` and ``recorded_decision``; the workflow
(``workflow/rules/run.smk``) chains the decisions with a checkpoint per block, so an
interrupted campaign continues where it stopped; `scalesweep status` counts the same runs
from the decisions on disk (``asked_points``).
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from scalesweep.plan.sweep import (
    BLOCK_DIR,
    REFERENCE,
    Selection,
    SweepPoint,
    block_order,
    block_runtimes,
    blocks_for,
    workload_axes,
)

# a comparison's CI from fewer undisturbed repeats per side is not trusted, whatever
# sweep.repeats says: with 3 or 4 pairs a narrow CI under run-to-run drift is mostly a
# fluke, and stopping on it adds false faster/slower verdicts (simulated in
# tests/unit/test_verdict_simulation.py: +0.3-0.45 points at 3, +0.03 at 5)
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
    """(minimum, maximum) repeats that count of a series (its blocks after the warm-up
    ones: ``block_bounds``): sweep.repeats and, where adaptive repeats are on,
    measurement.max_repeats (never below the minimum)."""
    low = int(workload_axes(config, workload).get("repeats", 1))
    m = config.get("measurement") or {}
    if not m.get("adaptive", True):
        return low, low
    return low, max(low, int(m.get("max_repeats", 10)))


def block_bounds(config: dict, workload: str) -> tuple[int, int]:
    """(minimum, maximum) blocks of a series: ``repeat_bounds`` after its warm-up blocks
    (measurement.warmup_blocks, ``sweep.blocks_for``)."""
    low, high = repeat_bounds(config, workload)
    return blocks_for(config, low), blocks_for(config, high)


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
    """The blocks ``series`` asks for so far: its minimum (its warm-up blocks and
    sweep.repeats: ``block_bounds``), then one more per decision that wanted more
    (``wants_more``, under the current config), up to its maximum. ``decision(k)``: the
    decision after block k, None where it is not made yet (the count stops there). The workflow's ``decision`` is its checkpoint (plan.walk
    ``Walk.series_walk``: Snakemake makes a missing decision, then asks again);
    `scalesweep status` reads the files on disk (``recorded_decision``)."""
    low, high = block_bounds(config, series.workload)
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


def wants_more(decision: Mapping[str, Any], config: dict) -> bool:
    """Another block after this decision, under the current config's maximum (a raised
    ``max_repeats`` continues a series that had stopped at the old one)."""
    series = decision["series"]
    low = repeat_bounds(config, series["workload"])[0]  # repeats that count
    if int(decision["round"]) >= block_bounds(config, series["workload"])[1]:  # blocks
        return False
    # judged again under the current config: a lowered target or a raised minimum
    # continues a series that had stopped
    target = float((config.get("measurement") or {}).get("target_ci_pp", 2.0))
    if any(len(v) < low for v in (decision.get("valid_repeats") or {}).values()):
        return True
    left = block_bounds(config, series["workload"])[1] - int(decision["round"])
    # the campaign's comparisons now, or as the decision counted them where more
    m = int(decision.get("campaign_comparisons") or 1)
    try:
        m = max(m, campaign_comparisons(config))
    except (KeyError, TypeError, ValueError, AttributeError):  # no sweep to read from
        pass
    for c in (decision.get("comparisons") or {}).values():
        half = c.get("ci_half_width_pp")
        if min(c.get("n") or 0, c.get("n_native") or 0) < MIN_COMPARED:
            return True
        if is_settled(c, config, series["workload"], m) or (half is not None and half <= target):
            continue  # its verdict holds over the campaign, or its CI meets the target
        if not is_futile(c, left):
            return True
    return not decision["enough"] and not decision.get("comparisons")


# The settled stop. A series that stops as soon as a difference test crosses its level
# after any block inflates the false "faster"/"slower" rate (optional stopping); stopping
# on the CI's width does not. So a settled stop needs a p value below 5% divided by the
# campaign's comparisons (a Bonferroni level: below it the Benjamini-Hochberg q value of
# the published verdict is below 5% whatever the other comparisons give) and by the looks
# at which the series can stop settled (a Bonferroni bound over its decisions, from
# MIN_COMPARED pairs to max_repeats). Simulated (tests/unit/test_verdict_simulation.py,
# benchmarks/stopping_simulation.py): docs/measurement.md, "Enough repeats".
def looks(low: int, high: int) -> int:
    """The decisions at which a comparison can stop settled: from MIN_COMPARED (or the
    minimum of repeats) to the maximum, in repeats that count."""
    return max(high - max(low, MIN_COMPARED) + 1, 1)


def settle_level(comparisons: int, looks_: int, confidence: float = 0.95) -> float:
    """The p value below which a comparison's verdict is settled (see above)."""
    return (1 - confidence) / max(int(comparisons), 1) / max(int(looks_), 1)


CLAIM_P = {"equivalent": "equivalence_p_value", "slower": "p_value", "faster": "p_value"}


def claim_p(comparison: Mapping[str, Any]) -> float | None:
    """The p value of the verdict a comparison claims (None: it claims nothing)."""
    p = comparison.get(CLAIM_P.get(str(comparison.get("verdict")), ""))
    return float(p) if isinstance(p, (int, float)) and not isinstance(p, bool) else None


def is_settled(comparison: Mapping[str, Any], config: dict, workload: str,
               comparisons: int | None = None) -> bool:
    """Whether a comparison's verdict is settled under ``config``'s campaign (its
    comparisons and looks now: the A/A runtime added to a finished campaign doubles the
    comparisons, and a comparison settled before may not be any more)."""
    p = claim_p(comparison)
    have = min(comparison.get("n") or 0, comparison.get("n_native") or 0)
    if p is None or have < MIN_COMPARED:
        return False
    m = comparisons if comparisons is not None else campaign_comparisons(config)
    return p < settle_level(m, looks(*repeat_bounds(config, workload)))


def is_futile(comparison: Mapping[str, Any], blocks_left: int) -> bool:
    """Whether a comparison of a decision (``scalesweep.analyse.decision.decide``)
    cannot be decided within ``blocks_left`` more blocks at its measured overhead and
    spread: the pairs its verdict needs (``pairs_to_decide``, projected by
    ``overhead_verdict``) are more than it has plus one per block left. Judged again
    under the current config's maximum (a raised ``max_repeats`` continues the series).
    (Judged at the lower 80% bound of the spread instead, more series went on and the
    simulated LLM drift's optional stopping added 0.65% false verdicts over measuring
    every block: tests/unit/test_verdict_simulation.py.)"""
    need = comparison.get("pairs_to_decide")
    if need is None or isinstance(need, bool) or not isinstance(need, (int, float)):
        return False
    have = min(comparison.get("n") or 0, comparison.get("n_native") or 0)
    return need > have + max(blocks_left, 0)


def campaign_comparisons(config: dict) -> int:
    """The comparisons a campaign's verdicts are adjusted over
    (``scalesweep.analyse.multiplicity``): one per runtime compared with native in every
    series of the sweep (every arm of every geometry of every workload; the A/A runtime
    included), whatever ``only:`` selects; at least 1. What the adaptive rule's settled
    stop divides its level by (``scalesweep.analyse.decision.settle_level``)."""
    # asked once per decision and per walk of a series: the sweep enumerated once per
    # config (a Frontier campaign has thousands of series)
    key = json.dumps(config, sort_keys=True, default=str)
    if key not in _COMPARISONS:
        from scalesweep.plan.sweep import sweep_points

        count = 0
        for series in series_of(sweep_points(config)):
            runtimes = series.runtimes(config)
            if REFERENCE in runtimes:
                count += sum(rt != REFERENCE for rt in runtimes)
        if len(_COMPARISONS) > 64:
            _COMPARISONS.clear()
        _COMPARISONS[key] = max(count, 1)
    return _COMPARISONS[key]


_COMPARISONS: dict[str, int] = {}
