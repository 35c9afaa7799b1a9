"""The campaign's walk (scalesweep.plan.walk), driven as the workflow drives it: a
checkpoint callback in (here: the decision files of a temporary campaign, and an
exception until a decision is made), the runs and decisions out."""

import json

import numpy as np
import pytest

from conftest import tiny_config
from scalesweep.analyse.decision import decide
from scalesweep.plan.adaptive import Series, decision_path, series_of
from scalesweep.plan.sweep import Selection, select_points, sweep_points
from scalesweep.plan.walk import Walk, final_json, point_metrics, runs_list


class NotMade(Exception):
    """What Snakemake's IncompleteCheckpointException is to the workflow."""


def adaptive_config(**measurement):
    cfg = tiny_config()
    cfg["sweep"]["runtimes"] = ["native", "charliecloud"]
    cfg["sweep"]["repeats"] = 3
    cfg["measurement"] = {"adaptive": True, "max_repeats": 6, "warmup_blocks": 0,
                          **measurement}
    cfg.setdefault("analysis", {})["partial"] = False
    return cfg


def walk_of(cfg, asked=None):
    """The walk of ``cfg``'s sweep, its checkpoint the decision files on disk; ``asked``
    collects each decision it asks for."""
    points = sweep_points(cfg)

    def decision_file(series, round_):
        if asked is not None:
            asked.append((series, round_))
        path = decision_path(".", series, round_)
        if not path.is_file():
            raise NotMade(str(path))
        return str(path)

    return Walk(cfg, points, select_points(points, cfg), Selection.of(cfg), decision_file,
                refuse=RuntimeError)


def touch(path):
    from pathlib import Path

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text("{}")


def noisy_runs(blocks, seed=0):
    rng = np.random.default_rng(seed)
    rows = []
    for k in range(1, blocks + 1):
        for runtime in ("native", "charliecloud"):
            rows.append({"runtime": runtime, "repeat": k, "time_s": 10 + rng.normal(0, 1),
                         "disturbed": False})
    return rows


def test_without_adaptive_repeats_every_selected_point_and_no_decision(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = tiny_config()
    walk = walk_of(cfg)
    assert not walk.adaptive
    every = sorted(point_metrics(p) for p in sweep_points(cfg))
    assert sorted(walk.requested_metrics()) == every
    assert sorted(walk.aggregate_metrics()) == every
    assert walk.series_final_files() == []


def test_a_series_asks_for_its_minimum_then_waits_for_the_checkpoint(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = adaptive_config()
    asked = []
    walk = walk_of(cfg, asked)
    series = walk.series[0]
    # the minimum's runs are asked for with the first decision: not made yet
    with pytest.raises(NotMade, match="after3.json"):
        walk.series_walk(series)
    assert asked == [(series, 3)]
    assert walk.decision_inputs(series, 3) == walk.series_metrics(series, range(1, 4))
    assert len(walk.decision_inputs(series, 3)) == 3 * len(series.runtimes(cfg))
    # a decision that wants more: one more block, then the next decision
    after3 = decide(series, 3, noisy_runs(3), cfg)
    assert after3["more"]
    decision_path(".", series, 3).parent.mkdir(parents=True)
    decision_path(".", series, 3).write_text(json.dumps(after3))
    with pytest.raises(NotMade, match="after4.json"):
        walk.series_walk(series)
    # one that is enough: the walk ends there, its runs and decisions named
    decision_path(".", series, 4).write_text(json.dumps({**after3, "round": 4, "more": False,
                                                         "enough": True, "comparisons": {}}))
    runs, decisions = walk.series_walk(series)
    assert runs == walk.series_metrics(series, range(1, 5))
    assert decisions == [str(decision_path(".", series, k)) for k in (3, 4)]
    assert walk.series_inputs(series) == runs + decisions


def test_a_decision_that_cannot_be_walked_is_refused_by_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    walk = walk_of(adaptive_config())
    series = walk.series[0]
    path = decision_path(".", series, 3)
    path.parent.mkdir(parents=True)
    path.write_text("[]")
    with pytest.raises(RuntimeError, match=r"after3\.json: a JSON list.*Delete it"):
        walk.series_walk(series)


def test_partial_reads_what_exists_and_asks_for_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = adaptive_config()
    cfg["analysis"]["partial"] = True
    walk = walk_of(cfg)
    series = walk.series[0]
    one = walk.series_metrics(series, [1])[0]
    beyond = walk.series_metrics(series, [5])[0]  # a block no decision asked for yet
    touch(one)
    touch(beyond)
    assert walk.requested_metrics() == []
    assert sorted(walk.aggregate_metrics()) == sorted([one, beyond])
    assert walk.series_final_files() == []  # no final.json made yet


def test_a_selection_keeps_what_was_measured_outside_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = tiny_config()
    cfg["sweep"]["runtimes"] = ["native", "charliecloud"]
    cfg["only"] = {"runtimes": ["native"]}
    walk = walk_of(cfg)
    outside = next(p for p in sweep_points(cfg) if p.runtime == "charliecloud")
    assert outside not in walk.selected
    touch(point_metrics(outside))
    assert point_metrics(outside) in walk.aggregate_metrics()  # summarised
    assert point_metrics(outside) not in walk.requested_metrics()  # never measured here


def test_a_finished_series_outside_the_selection_names_its_final_json(tmp_path, monkeypatch):
    """A run of part of a campaign names the same summary inputs as the whole run: the
    final.json of a series outside it whose decisions and runs are all on disk."""
    monkeypatch.chdir(tmp_path)
    cfg = adaptive_config()
    cfg["sweep"]["nodes"], cfg["sweep"]["ranks_per_node"] = [1, 2], [1]
    done = next(s for s in series_of(sweep_points(cfg)) if s.nodes == 2)
    walk = walk_of(cfg)
    for f in walk.series_metrics(done, range(1, 4)):
        touch(f)
    enough = {**decide(done, 3, noisy_runs(3), cfg), "more": False, "enough": True,
              "comparisons": {}, "valid_repeats": {}}
    decision_path(".", done, 3).parent.mkdir(parents=True)
    decision_path(".", done, 3).write_text(json.dumps(enough))
    touch(final_json(done))
    cfg["only"] = {"nodes": [1]}
    walk = walk_of(cfg)
    assert done not in walk.series and walk.finished_on_disk(done)
    assert final_json(done) in walk.series_final_files()
    # one of its runs gone: not finished, not named (nothing outside the selection made)
    (tmp_path / walk.series_metrics(done, [2])[0]).unlink()
    assert not walk.finished_on_disk(done)
    assert final_json(done) not in walk.series_final_files()


@pytest.mark.parametrize("case", ["plain", "adaptive", "partial", "only"])
def test_the_lists_name_exactly_what_the_summary_reads(tmp_path, monkeypatch, case):
    """The aggregate rule reads the runs through lists (rule runs_list, RUNS_LIST): together
    they name every file the summary reads, each once, each list only runs of its own
    workload's arm; every run this run measures is in one."""
    monkeypatch.chdir(tmp_path)
    cfg = adaptive_config() if case in ("adaptive", "partial") else tiny_config()
    cfg["sweep"]["runtimes"] = ["native", "charliecloud"]
    cfg["sweep"]["nodes"], cfg["sweep"]["ranks_per_node"] = [1, 2], [1]
    if case == "partial":
        cfg["analysis"]["partial"] = True
    if case == "only":
        cfg["only"] = {"nodes": [1]}
        for p in sweep_points(cfg):
            if p.nodes == 2 and p.repeat == 1:
                touch(point_metrics(p))  # measured before, outside the selection
    walk = walk_of(cfg)
    if case == "adaptive":  # the first decision is made: enough
        for s in walk.series:
            path = decision_path(".", s, 3)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps({**decide(s, 3, noisy_runs(3), cfg), "more": False,
                                        "enough": True, "comparisons": {}}))
    if case == "partial":
        touch(walk.series_metrics(walk.series[1], [2])[0])
    lists = {key: walk.list_runs(*key) for key in walk.lists()}
    assert [runs_list(*key) for key in lists] == walk.runs_lists()
    named = [f for files in lists.values() for f in files]
    assert sorted(named) == sorted(set(named)) == sorted(walk.aggregate_metrics())
    for (workload, arm, part), files in lists.items():
        assert files and all(f.startswith(f"results/runs/{workload}/{arm}/") for f in files)
        assert runs_list(workload, arm, part) == f"results/lists/{workload}/{arm}/part{part}.txt"
    assert set(walk.requested_metrics()) <= set(named)
    outside = [p for p in sweep_points(cfg) if p.nodes == 2 and p.repeat == 1]
    expected = {"plain": len(sweep_points(cfg)), "adaptive": 2 * 3 * 2, "partial": 1,
                "only": len(walk.selected) + len(outside)}
    assert len(named) == expected[case]


def test_a_list_holds_whole_series_up_to_its_size(tmp_path, monkeypatch):
    """A list holds whole series of one workload's arm, as many as fit in LIST_RUNS at
    their most blocks (from the config: a series never moves to another list as it
    grows); so a large campaign has a few lists of a few thousand runs, not one of all."""
    monkeypatch.chdir(tmp_path)
    cfg = adaptive_config()  # 6 blocks at most, 2 runtimes: 12 runs a series at most
    cfg["sweep"]["nodes"], cfg["sweep"]["ranks_per_node"] = [1, 2, 3, 4, 5], [1]
    monkeypatch.setattr("scalesweep.plan.walk.LIST_RUNS", 30)  # 2 series a list
    walk = walk_of(cfg)
    assert len(walk.series) == 5
    parts = [walk.list_keys[s] for s in walk.series]
    assert [p[2] for p in parts] == [1, 1, 2, 2, 3]
    assert len({p[:2] for p in parts}) == 1  # one workload's arm
    with pytest.raises(NotMade):  # the decisions are walked as the lists' runs are named
        walk.list_runs(*parts[0])


def test_a_run_missing_from_a_made_list_is_named_to_be_measured_again(tmp_path, monkeypatch):
    """Snakemake makes a missing intermediate file again only where a job needing it must
    run anyway: a run this run asks for, deleted after its list was made, is named by
    itself (the default target's), and only such runs (not every run of the campaign).
    A deleted list is a target itself (``runs_lists``): made again, its runs with it."""
    monkeypatch.chdir(tmp_path)
    cfg = tiny_config()
    cfg["sweep"]["runtimes"] = ["native", "charliecloud", "podman"]
    walk = walk_of(cfg)
    assert walk.missing_listed() == []  # nothing measured, no list made: the lists' jobs run
    for key in walk.lists():
        for f in walk.list_runs(*key):
            touch(f)
        touch(runs_list(*key))
    assert walk.missing_listed() == []
    listed, unlisted = walk.lists()
    gone = walk.list_runs(*listed)[0]
    (tmp_path / gone).unlink()
    (tmp_path / runs_list(*unlisted)).unlink()
    (tmp_path / walk.list_runs(*unlisted)[0]).unlink()  # its list, a target, is made again
    assert walk.missing_listed() == [gone]
    assert runs_list(*unlisted) in walk.runs_lists()
    cfg.setdefault("analysis", {})["partial"] = True  # a partial run measures nothing
    assert walk_of(cfg).missing_listed() == []
