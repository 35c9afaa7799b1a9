"""The campaign's walk: which runs and decisions this run of the workflow asks for.

Without adaptive repeats, every selected point. With them (``scalesweep.plan.adaptive``),
each series' minimum of blocks, then one more block per decision that wanted more, up to
``max_repeats``: the decisions are Snakemake checkpoints, so the walk is given a callback,
``decision_file(series, round)``, that returns a decision's file once it is made and raises
(Snakemake's IncompleteCheckpointException) until then; the workflow asks again when it is.

Everything here is a function of the config, the points and the campaign's files (read
relative to the current directory, the campaign's, as Snakemake runs): the rules' input
functions (``workflow/rules/common.smk``) are one line each over a ``Walk``, and
``tests/unit/test_walk.py`` drives it with files and a callback of its own.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterable, Sequence

from scalesweep.plan.adaptive import (FINAL_JSON, Series, asked_blocks,
                                      block_bounds, is_adaptive, read_decision,
                                      recorded_decision, run_priority, series_of,
                                      walks_decisions)
from scalesweep.plan.sweep import HISTORY_DIR, Selection, SweepPoint
from scalesweep.record.pointdir import METRICS_JSON, RUNS_DIR

DecisionFile = Callable[[Series, int], str]
# The runs the summary reads, listed one path a line (rule runs_list): the aggregate rule
# waits for these lists, not for every run. Each list holds whole series of one workload's
# arm, at most about LIST_RUNS runs (sized from the config: every series at its most
# blocks), so a list's job has few inputs and a campaign few lists. Snakemake 9 prepares a
# job in O(inputs x the jobs making them): 100,000 runs as one job's inputs kept it
# preparing for more than 6 minutes (about 17 estimated) before the job started. And it
# stats every input of every ready job at each scheduling round: a list per series (1,000
# lists at 100,000 runs) took 7.5 s a round, about an hour in all (BENCHMARKS.md section 3).
LIST_RUNS = 5000
RUNS_LIST = "results/lists/{workload}/{arm}/part{part}.txt"


def point_metrics(point: SweepPoint) -> str:
    """Where ``point``'s measurement goes (rule run_point's output)."""
    return f"{RUNS_DIR}/{point.path}/{METRICS_JSON}"


def final_json(series: Series) -> str:
    """The series' final.json (rule series_done's output)."""
    return FINAL_JSON.format(**series.as_dict())


def runs_list(workload: str, arm: str, part: int) -> str:
    """List ``part`` of the runs of ``workload``'s ``arm`` the summary reads (rule runs_list)."""
    return RUNS_LIST.format(workload=workload, arm=arm, part=part)


ListKey = tuple[str, str, int]  # (workload, arm, part): one list of runs


def list_keys(config: dict, points: Iterable[SweepPoint]) -> dict[Series, ListKey]:
    """Which list of runs holds each series of ``points``: its workload's arm, and which
    part of it (its series in order, as many a part as fit in LIST_RUNS at their most
    blocks): from the config alone, so a series stays in its list as it grows."""
    arms: dict[tuple[str, str], list[Series]] = {}
    for s in series_of(points):
        arms.setdefault((s.workload, s.arm), []).append(s)
    keys: dict[Series, ListKey] = {}
    for (workload, arm), members in arms.items():
        most = block_bounds(config, workload)[1] * len(members[0].runtimes(config))
        per_list = max(1, LIST_RUNS // max(1, most))
        for i, s in enumerate(members):
            keys[s] = (workload, arm, i // per_list + 1)
    return keys


class Walk:
    """The runs and decisions of one run of the workflow: ``points`` (the whole sweep),
    ``selected`` (what this run measures, ``selection``: --config only=...), and
    ``decision_file``, the checkpoint callback (see the module). ``refuse(message)``
    makes the exception a decision file that cannot be walked raises."""

    def __init__(self, config: dict, points: Sequence[SweepPoint],
                 selected: Sequence[SweepPoint], selection: Selection,
                 decision_file: DecisionFile | None = None,
                 refuse: Callable[[str], Exception] = ValueError):
        self.config = config
        self.points = list(points)
        self.selected = list(selected)
        self.selection = selection
        self.series = series_of(self.selected)  # the series this run measures
        self.series_index = {s: i for i, s in enumerate(self.series)}
        self.adaptive = walks_decisions(config, self.selected, selection)
        self.partial = bool(config.get("analysis", {}).get("partial", False))
        self.decision_file = decision_file
        self.refuse = refuse
        self.selected_by_series: dict[Series, list[SweepPoint]] = {}
        for p in self.selected:
            self.selected_by_series.setdefault(Series.of(p), []).append(p)
        self.list_keys = list_keys(config, self.points)  # each series' list of runs
        self._summarised: list[Series] | None = None

    # --- plain lists --------------------------------------------------------------------
    def metrics_files(self, points: Iterable[SweepPoint] | None = None) -> list[str]:
        """The metrics files of ``points``, by default of the points this run measures."""
        return [point_metrics(p) for p in (points or self.selected)]

    def priority(self, point: SweepPoint) -> int:
        """Measurements in blocks, runtimes interleaved (native, container, container,
        native ...): scalesweep.plan.adaptive.run_priority."""
        return run_priority(point, self.config, self.series_index)

    def series_metrics(self, series: Series, repeats: Iterable[int]) -> list[str]:
        """The metrics files of ``series`` at blocks ``repeats``, every runtime."""
        return [point_metrics(series.point(rt, k))
                for k in repeats for rt in series.runtimes(self.config)]

    # --- the walk of one series ---------------------------------------------------------
    def series_walk(self, series: Series) -> tuple[list[str], list[str]]:
        """(metrics files, decision files) the series has asked for so far: the minimum of
        blocks, then one more block per decision that wanted more (adaptive.asked_blocks,
        which `scalesweep status` uses too). Raises what ``decision_file`` raises at the
        first decision not yet made; refuses, naming it, a decision file that cannot be
        walked (adaptive.read_decision)."""
        decisions: list[str] = []

        def decision(round_: int):
            out = self.decision_file(series, round_)
            decisions.append(out)
            made, problem = read_decision(out)
            if problem:
                raise self.refuse(f"scalesweep: {out}: {problem}. Delete it and run again: "
                                  "the decision is made anew from its series' runs")
            return made

        blocks = asked_blocks(series, self.config, decision)
        return self.series_metrics(series, range(1, blocks + 1)), decisions

    def decision_inputs(self, series: Series, round_: int) -> list[str]:
        """What the decision after block ``round_`` reads: the series' runs so far."""
        return self.series_metrics(series, range(1, round_ + 1))

    def series_inputs(self, series: Series) -> list[str]:
        """What the series' final.json waits for: its runs and its decisions."""
        metrics, decisions = self.series_walk(series)
        return metrics + decisions

    # --- what the rules ask for ---------------------------------------------------------
    def requested_metrics(self) -> list[str]:
        """Every point this run measures; with adaptive repeats those its series'
        decisions asked for so far. With analysis.partial, nothing: that run aggregates
        and reports what exists. (The summary names them through the lists of runs, and
        by name those missing from a list made already: ``missing_listed``.)"""
        if self.partial:
            return []
        return [f for s in self.series for f in self._requested(s)]

    def aggregate_metrics(self) -> list[str]:
        """What the summary reads: every list's runs (``list_runs``), list after list."""
        return [f for key in self.lists() for f in self.list_runs(*key)]

    def summarised_series(self) -> list[Series]:
        """The series the summary reads runs of: those this run measures, and with
        `only:` or analysis.partial those of the sweep with runs on disk (read once per
        Walk where no decision is walked: the files on disk are then all it depends on)."""
        if self.selection.everything and not self.partial:
            return list(self.series)
        if self._summarised is not None:
            return self._summarised
        found = [s for s in series_of(self.points) if self.series_runs(s)]
        if not self.adaptive or self.partial:
            self._summarised = found
        return found

    def lists(self) -> list[ListKey]:
        """Every list of runs the summary reads (``RUNS_LIST``), in order."""
        return list(dict.fromkeys(self.list_keys[s] for s in self.summarised_series()))

    def list_runs(self, workload: str, arm: str, part: int) -> list[str]:
        """The runs of one list (rule runs_list's inputs): ``series_runs`` of each of its
        series."""
        key = (workload, arm, int(part))
        return [f for s in self.summarised_series() if self.list_keys[s] == key
                for f in self.series_runs(s)]

    def runs_lists(self) -> list[str]:
        """The aggregate rule's inputs and the summary's targets: the lists of runs
        (rule runs_list) instead of every run. A list deleted is made again, and its
        runs still missing measured."""
        return [runs_list(*key) for key in self.lists()]

    def missing_listed(self) -> list[str]:
        """The runs this run asks for (``requested_metrics``) missing on disk whose list is
        made already (a deleted point or metrics.json): named as targets, since Snakemake
        makes a missing intermediate file again only where a job needing it must run
        anyway, and the list is up to date. Only these: the default target naming every
        run would be a job of 100,000 inputs (``RUNS_LIST``)."""
        if self.partial:
            return []
        return [f for s in self.series if Path(runs_list(*self.list_keys[s])).is_file()
                for f in self._requested(s) if not Path(f).is_file()]

    def _requested(self, series: Series) -> list[str]:
        """The runs of ``series`` this run asks for (``requested_metrics``)."""
        if not self.adaptive:
            return [point_metrics(p) for p in self.selected_by_series.get(series, [])]
        return self.series_walk(series)[0]

    def series_runs(self, series: Series) -> list[str]:
        """The metrics files of ``series`` the summary reads (in its list of runs):
        the points of it this run measures; with adaptive repeats those its decisions
        asked for (one decision at a time: each series goes on independently, the summary
        also waits for every final.json, ``series_final_files``) and what was measured
        beyond them (``measured_beyond``); with ``only:`` what is on disk of it outside
        the selection; with analysis.partial only what is already measured."""
        own: list[str] = []
        if series in self.series_index:
            if not self.adaptive:
                own = self._requested(series)
            elif self.partial:
                own = self.series_metrics(
                    series, range(1, block_bounds(self.config, series.workload)[1] + 1))
            else:
                walked = self.series_walk(series)[0]
                own = walked + self.measured_beyond(series, walked)
        if not self.selection.everything:
            named = set(own)
            own += [f for f in self.measured_on_disk(series) if f not in named]
        if self.partial:
            return [f for f in own if Path(f).is_file()]
        return own

    def series_final_files(self) -> list[str]:
        """Every series' final.json (adaptive repeats): of the series this run measures
        (made when missing; with analysis.partial none, as that run waits for no series),
        and the final.json already made of every other series of the sweep whose runs are
        all on disk. So a run that selects part of a finished campaign (only:) or
        aggregates what exists names the same inputs as the whole run, and re-makes no
        summary (rerun-triggers: input); nothing outside the selection is made."""
        files = set() if self.partial or not self.adaptive else {
            final_json(s) for s in self.series}
        if (self.partial or not self.selection.everything) and is_adaptive(self.config,
                                                                           self.points):
            files.update(final_json(s) for s in series_of(self.points)
                         if Path(final_json(s)).is_file() and self.finished_on_disk(s))
        return sorted(files)

    # --- what is on disk ----------------------------------------------------------------
    def measured_on_disk(self, series: Series, history: bool = False) -> list[str]:
        """The series' metrics files on disk, every runtime and repeat; with ``history``
        also the repeats being measured again (scalesweep rerun moved their run to
        history/)."""
        found = []
        base = Path(RUNS_DIR, series.path)
        for block in sorted(base.glob("rep*")) if base.is_dir() else []:
            if not block.name[3:].isdigit():
                continue
            for runtime in series.runtimes(self.config):
                run = block / runtime
                if (run / METRICS_JSON).is_file() or (history and (run / HISTORY_DIR).is_dir()):
                    found.append(str(run / METRICS_JSON))
        return found

    def measured_beyond(self, series: Series, walked: Iterable[str]) -> list[str]:
        """Metrics files of the series on disk beyond the blocks its decisions now ask
        for: a re-measured repeat makes its decisions run again, and a new decision may
        stop the series earlier than the old one did; what was measured stays."""
        walked = set(walked)
        return [f for f in self.measured_on_disk(series, history=True) if f not in walked]

    def finished_on_disk(self, series: Series) -> bool:
        """Whether every decision and run ``series`` asks for under this config is on
        disk, read as `scalesweep status` reads them (adaptive.recorded_decision): its
        rule series_done then has nothing to make."""
        unmade = []

        def decision(round_: int):
            made = recorded_decision(".", series, round_)
            if made is None:
                unmade.append(round_)
            return made

        blocks = asked_blocks(series, self.config, decision)
        runs = self.series_metrics(series, range(1, blocks + 1))
        return not unmade and all(Path(f).is_file() for f in runs)
