"""Isolation, interleaving and adaptive repeats: the pure parts, then the real workflow."""

import json
import shlex

import numpy as np
import pytest

from conftest import REPO, tiny_config
from scalesweep.analyse.decision import decide
from scalesweep.analyse.timeline import overlaps, parse_snakemake_log
from scalesweep.plan.adaptive import MIN_COMPARED, Series, run_priority, wants_more
from scalesweep.plan.sweep import SweepPoint, block_order, sweep_points


def _config(runtimes=("native", "charliecloud"), **measurement):
    cfg = tiny_config()
    cfg["sweep"]["runtimes"] = list(runtimes)
    cfg["sweep"]["repeats"] = 3
    cfg["measurement"] = {"adaptive": True, "max_repeats": 6, "warmup_blocks": 0, **measurement}
    return cfg


def test_blocks_alternate_and_every_measurement_comes_after_preparation():
    cfg = _config()
    points = sweep_points(cfg)
    series = {s: i for i, s in enumerate(sorted({Series.of(p) for p in points}))}
    order = sorted(points, key=lambda p: -run_priority(p, cfg, series))
    first = [(p.ranks, p.runtime, p.repeat) for p in order[:8]]
    assert first == [
        (1, "native", 1), (1, "charliecloud", 1), (2, "native", 1), (2, "charliecloud", 1),
        (1, "charliecloud", 2), (1, "native", 2), (2, "charliecloud", 2), (2, "native", 2),
    ]
    # never all of one runtime before the other: each block holds one of each
    assert all(run_priority(p, cfg, series) < 0 for p in points)  # preparing jobs: 0


def test_random_order_is_recorded_by_seed_and_reproducible():
    cfg = _config(runtimes=("native", "native-aa", "charliecloud"), order="random", seed=7)
    p = SweepPoint("cnn_ddp", "native", 1, 0, 1, 1, 4, "native-aa")
    assert block_order(p, cfg) == block_order(p, cfg)
    # a block holds native and the runtime of its arm
    assert sorted(block_order(p, cfg)) == ["native", "native-aa"]
    orders = {tuple(block_order(SweepPoint("cnn_ddp", "native", 1, 0, 1, 1, k,
                                           "charliecloud"), cfg))
              for k in range(1, 20)}
    assert len(orders) > 1


def test_aa_calibration_adds_a_second_native_runtime():
    cfg = _config(runtimes=("native",), aa_calibration=True)
    assert {p.runtime for p in sweep_points(cfg)} == {"native", "native-aa"}
    assert {p.arm for p in sweep_points(cfg)} == {"native-aa"}


def _runs(native, container, disturbed=()):
    rows = []
    for k, (a, b) in enumerate(zip(native, container), start=1):
        rows.append({"runtime": "native", "repeat": k, "time_s": a, "disturbed": k in disturbed})
        rows.append({"runtime": "charliecloud", "repeat": k, "time_s": b, "disturbed": False})
    return rows


SERIES = Series("cnn_ddp", 1, 0, 1, 1, "charliecloud")


def test_a_tight_comparison_is_enough_after_the_minimum():
    cfg = _config()
    d = decide(SERIES, 5, _runs([10.0, 10.1, 9.9, 10.0, 10.05],
                                [10.05, 10.12, 9.97, 10.04, 10.08]), cfg)
    assert d["enough"] and not d["more"], d["reasons"]
    # the same tight pairs after 3 blocks: too few to trust (MIN_COMPARED)
    assert not decide(SERIES, 3, _runs([10.0, 10.1, 9.9], [10.05, 10.12, 9.97]), cfg)["enough"]
    assert d["comparisons"]["charliecloud"]["target_met"]


def _ratios(log_ratios, wall_s=None):
    """A series whose same-block pairs have these log ratios ln(container / native)."""
    rows = _runs([10.0] * len(log_ratios), list(10.0 * np.exp(log_ratios)))
    if wall_s is not None:
        for row in rows:
            row["harness_wall_s"] = wall_s
    return rows


def test_a_decided_but_unsettled_comparison_asks_for_more_until_the_maximum():
    cfg = _config()
    # slower by ~6% (sd 4%): the 95% CI excludes 0 (p 0.03) but is wider than the
    # target, and p is not below the settled level 5%/(2 comparisons x 2 looks)
    d = decide(SERIES, 5, _ratios(0.06 + 0.04 * np.array([-1.2, -0.5, 0.0, 0.5, 1.2])), cfg)
    c = d["comparisons"]["charliecloud"]
    assert c["verdict"] == "slower" and not c["settled"] and not c["futile"], c
    assert not d["enough"] and d["more"]
    assert "half-width" in d["reasons"][0]
    six = 0.06 + 0.04 * np.array([-1.2, -0.5, 0.0, 0.5, 1.2, 0.3])
    stopped = decide(SERIES, 6, _ratios(six), cfg)
    assert not stopped["more"] and not wants_more(stopped, cfg)  # max_repeats = 6
    # a raised maximum continues a series that stopped at the old one
    cfg["measurement"]["max_repeats"] = 8
    assert wants_more(stopped, cfg) == (not stopped["comparisons"]["charliecloud"]["settled"])


def test_a_series_that_cannot_settle_within_max_repeats_stops_early_and_says_what_it_needs():
    """Futility (issue 39): at 10% from run to run, 6 blocks cannot decide anything; the
    series stops at its first decision with the blocks and the wall time it would need."""
    cfg = _config()
    rng = np.random.default_rng(0)
    native, cont = 10 + rng.normal(0, 1, 6), 10 + rng.normal(0, 1, 6)
    runs = _runs(native, cont)
    for row in runs:
        row["harness_wall_s"] = 12.0  # 24 s per block
    d = decide(SERIES, 5, runs, cfg)
    c = d["comparisons"]["charliecloud"]
    assert c["verdict"] == "inconclusive" and c["futile"] and not c["target_met"]
    assert d["enough"] and not d["more"] and not wants_more(d, cfg)
    need = c["pairs_to_decide"]
    assert need > 6 and need == 5 + c["repeats_to_decide"]
    [text] = d["futility"]
    assert text in d["reasons"]
    assert (f"cannot settle within max_repeats=6 at the measured spread: needs about {need} "
            f"same-block pairs ({need - 5} more than the 5 measured, ~{(need - 5) * 24 / 60:.0f} min "
            "more of wall time at this series' 24 s per block") in text, text
    # judged again under the current config: a maximum that reaches it continues
    cfg["measurement"]["max_repeats"] = need
    assert wants_more(d, cfg)
    # before 5 pairs no projection is trusted (MIN_COMPARED): the series goes on
    early = decide(SERIES, 4, runs, cfg)
    assert not early["comparisons"]["charliecloud"]["futile"] and wants_more(early, cfg)


def test_a_settled_verdict_stops_before_its_ci_meets_the_target():
    """Settled (issue 39): slower by ~20%, p far below 5%/(m x looks): the verdict holds
    over the campaign whatever the others give, so the series stops although its CI is
    wider than the target. In a campaign of 1000 comparisons the same p is not enough."""
    cfg = _config()
    runs = _ratios(0.18 + 0.05 * np.array([-1.2, -0.5, 0.0, 0.5, 1.2]))
    d = decide(SERIES, 5, runs, cfg)
    c = d["comparisons"]["charliecloud"]
    assert c["verdict"] == "slower" and c["settled"] and not c["target_met"], c
    assert c["settle_p"] == pytest.approx(0.05 / 2 / 2)  # 2 comparisons, looks 5 and 6
    assert d["campaign_comparisons"] == 2
    assert d["enough"] and not d["more"] and not wants_more(d, cfg)
    assert any("settled, slower" in r for r in d["reasons"]), d["reasons"]
    many = decide(SERIES, 5, runs, cfg, comparisons=1000)
    assert not many["comparisons"]["charliecloud"]["settled"] and wants_more(many, cfg)


def test_a_settled_stop_is_judged_again_when_the_campaign_grows():
    """The README's flow: the quickstart, then the A/A check on the finished campaign.
    A comparison settled over the 2 comparisons of the first campaign (p below
    5%/(2 x 2)) is not settled over the 4 of the second (5%/(4 x 2)): its series
    continues."""
    cfg = _config()
    d = decide(SERIES, 5, _ratios(0.18 + 0.05 * np.array([-1.2, -0.5, 0.0, 0.5, 1.2])), cfg)
    c = d["comparisons"]["charliecloud"]
    c["p_value"] = 0.01  # between 0.05 / 4 and 0.05 / 8
    assert c["verdict"] == "slower" and not c["target_met"] and not c["futile"]
    assert not wants_more(d, cfg)
    cfg["measurement"]["aa_calibration"] = True  # 2 series x (charliecloud, native-aa)
    assert wants_more(d, cfg)


def test_blocks_at_spread_follows_the_same_stops():
    from scalesweep.analyse.decision import blocks_at_spread

    cfg = _config()
    assert blocks_at_spread(SERIES, cfg, {"charliecloud": (0.0, 0.005)}) == MIN_COMPARED
    # futile from the first decision on: no more blocks than the first one it can trust
    assert blocks_at_spread(SERIES, cfg, {"charliecloud": (0.0, 0.15)}) == MIN_COMPARED
    # decided, neither settled nor narrow enough: up to the maximum
    assert blocks_at_spread(SERIES, cfg, {"charliecloud": (0.05, 0.04)}) == 6


def test_disturbed_runs_do_not_count():
    cfg = _config()
    d = decide(SERIES, 3, _runs([10.0, 10.1, 9.9], [10.05, 10.12, 9.97], disturbed={2}), cfg)
    assert d["disturbed_repeats"]["native"] == [2]
    assert d["valid_repeats"]["native"] == [1, 3]
    assert not d["enough"] and d["more"]
    assert any("at least" in r for r in d["reasons"])


def test_a_comparison_needs_three_repeats_per_side_whatever_sweep_repeats_says():
    cfg = _config()
    cfg["sweep"]["repeats"] = 2
    d = decide(SERIES, 2, _runs([10.0, 10.0], [10.0, 10.0]), cfg)
    assert not d["enough"] and f"at least {MIN_COMPARED}" in " ".join(d["reasons"])


LOG = """\
[Wed Nov 25 02:15:30 2026]
localrule build_image:
    output: resources/images/default
    jobid: 3
    reason: Missing output files
[Wed Nov 25 02:15:31 2026]
localrule run_point:
    output: results/runs/cnn_ddp/native/n1-g0-r1-t1/rep1/metrics.json
    jobid: 2
    reason: Missing output files
    wildcards: workload=cnn_ddp, runtime=native, nodes=1, gpus=0, ranks=1, threads=1, repeat=1
    priority: -1
    threads: 2
[Wed Nov 25 02:15:44 2026]
Finished jobid: 2 (Rule: run_point)
[Wed Nov 25 02:15:50 2026]
Finished jobid: 3 (Rule: build_image)
[Wed Nov 25 02:15:50 2026]
localrule aggregate:
    jobid: 0
[Wed Nov 25 02:15:51 2026]
Finished jobid: 0 (Rule: aggregate)
"""


def test_timeline_finds_a_measurement_beside_a_build(tmp_path):
    log = tmp_path / "x.snakemake.log"
    log.write_text(LOG)
    jobs = parse_snakemake_log(log)
    assert {j.rule for j in jobs} == {"build_image", "run_point", "aggregate"}
    assert [j.wildcards for j in jobs if j.rule == "run_point"][0].startswith("workload=cnn_ddp")
    bad = overlaps(jobs)
    assert [(m.rule, o.rule) for m, o in bad] == [("run_point", "build_image")]
    # sequential jobs sharing a second do not overlap
    log.write_text(LOG.replace("02:15:50 2026]\nFinished jobid: 3", "02:15:31 2026]\nFinished jobid: 3"))
    assert overlaps(parse_snakemake_log(log)) == []


def test_timeline_ends_a_failed_measurement_at_its_error(tmp_path):
    log = tmp_path / "x.snakemake.log"
    log.write_text(LOG.replace(
        "[Wed Nov 25 02:15:44 2026]\nFinished jobid: 2 (Rule: run_point)\n",
        "[Wed Nov 25 02:15:44 2026]\nError in rule run_point:\n    message: None\n    jobid: 2\n"))
    (run,) = [j for j in parse_snakemake_log(log) if j.rule == "run_point"]
    assert run.end - run.start == 13
    assert [(m.rule, o.rule) for m, o in overlaps(parse_snakemake_log(log))] == [("run_point", "build_image")]


def test_the_repeats_a_decision_asked_for_are_points_status_knows(tmp_path):
    """The runs a series asks for come from its decisions on disk, by the workflow's own
    walk (adaptive.asked_blocks): a repeat past the minimum is a requested point of
    `scalesweep status` whether measured, deleted or not yet measured (issue #26, case 7)."""
    from scalesweep.plan.adaptive import asked_points, decision_path
    from scalesweep.campaign.status import status_table

    cfg = _config()
    minimum = sweep_points(cfg)
    assert asked_points(minimum, cfg, tmp_path) == sorted(minimum)  # no decision yet
    rng = np.random.default_rng(0)
    noisy = _runs(10 + rng.normal(0, 1, 3), 10 + rng.normal(0, 1, 3))
    after3 = decide(SERIES, 3, noisy, cfg)
    assert after3["more"]
    decision_path(tmp_path, SERIES, 3).parent.mkdir(parents=True)
    decision_path(tmp_path, SERIES, 3).write_text(json.dumps(after3))
    fourth = [SERIES.point(rt, 4) for rt in SERIES.runtimes(cfg)]
    assert asked_points(minimum, cfg, tmp_path) == sorted([*minimum, *fourth])
    table = status_table(cfg, tmp_path)
    assert sorted(table["path"]) == sorted(p.path for p in [*minimum, *fourth])
    assert set(table["state"]) == {"missing"}
    # the current config's maximum bounds the walk, as in the workflow
    cfg["measurement"]["max_repeats"] = 3
    assert asked_points(minimum, cfg, tmp_path) == sorted(minimum)


def test_status_says_which_series_stopped_as_futile_and_what_they_need(tmp_path):
    """The futility statement of a series' last decision (final.json, as rule series_done
    writes it) reaches `scalesweep status` (issue 39)."""
    from scalesweep.campaign.status import futile_series
    from scalesweep.plan.adaptive import final_path

    cfg = _config()
    rng = np.random.default_rng(0)
    d = decide(SERIES, 5, _runs(10 + rng.normal(0, 1, 5), 10 + rng.normal(0, 1, 5)), cfg)
    assert d["futility"]
    final = final_path(tmp_path, SERIES)
    final.parent.mkdir(parents=True)
    final.write_text(json.dumps({"series": SERIES.as_dict(), "last_decision": d}))
    problems = []
    [line] = futile_series(cfg, tmp_path, problems)
    assert line.startswith(SERIES.path) and "cannot settle within max_repeats=6" in line
    assert not problems
    # a disturbed run of it is not replaced, and status does not call its repeats "enough"
    from scalesweep.campaign.status import _replacement_advice

    disturbed = {"path": [SERIES.point("native", 2).path]}
    [advice] = _replacement_advice(cfg, tmp_path, disturbed, lambda extra: "cmd", problems)
    assert advice.startswith(f"Not replaced for {SERIES.path}: stopped as futile")
    assert "enough" not in advice


# --- decision files: one path, and a file of another shape (review of #26) ----------------

BAD_DECISIONS = {
    "empty object": ("{}", "no series, round, enough"),
    "a list": ("[]", "a JSON list, not a decision"),
    "an older schema": (json.dumps({"series": "cnn_ddp/native-aa/n1-g0-r1-t1", "round": 3,
                                    "enough": False}), "series is 'cnn_ddp/native-aa/"),
    "a comparison of another shape": (json.dumps({
        "series": {"workload": "cnn_ddp"}, "round": 3, "enough": False,
        "comparisons": {"native-aa": {"n": "5"}}}), "comparisons.native-aa.n is '5'"),
    "not JSON": ('{"series": ', "not readable as JSON"),
}


@pytest.mark.parametrize("text,why", BAD_DECISIONS.values(), ids=BAD_DECISIONS)
def test_status_names_a_decision_file_it_cannot_walk_and_counts_it_as_not_made(
        tmp_path, capsys, text, why):
    """A decision file that parses to another shape ({}, a list, an older schema) used to
    end `scalesweep status` (and rerun) in a KeyError or TypeError traceback. It counts
    as not made (its series asks for its minimum only), and status names the file, why,
    and how to have it made anew; --json carries it too."""
    from conftest import config_text
    from scalesweep.plan.adaptive import decision_path, series_of
    from scalesweep.cli import main

    cfg = _config(runtimes=("native",), aa_calibration=True)  # repeats 3, max_repeats 6
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "config.yaml").write_text(config_text(cfg))
    minimum = sweep_points(cfg)
    bad = decision_path(tmp_path, series_of(minimum)[0], 3)
    bad.parent.mkdir(parents=True)
    bad.write_text(text)

    assert main(["status", "-d", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert f"{len(minimum)} requested points: " in out, out
    assert f"  {bad}: {why}" in out, out
    assert f"rm {shlex.quote(str(bad))}" in out, out
    assert main(["status", "-d", str(tmp_path), "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert sum(status["counts"].values()) == len(minimum)
    (problem,) = status["unreadable_decisions"]
    assert problem["file"] == str(bad) and problem["problem"].startswith(why)


def test_a_decision_of_this_version_is_walked_and_one_of_another_shape_is_named():
    """read_decision, which the workflow's walk (plan.walk Walk.series_walk: refused, naming
    the file) and status's (counted as not made) share: a decision decide() wrote
    reads back as itself; another shape gives why, never an exception."""
    from scalesweep.plan.adaptive import decision_problem

    rng = np.random.default_rng(0)
    made = json.loads(json.dumps(decide(SERIES, 3, _runs(10 + rng.normal(0, 1, 3),
                                                        10 + rng.normal(0, 1, 3)), _config())))
    assert decision_problem(made) is None
    for text, why in BAD_DECISIONS.values():
        try:
            record = json.loads(text)
        except ValueError:
            continue
        assert decision_problem(record).startswith(why)


def test_a_final_json_of_another_shape_is_named_not_a_traceback(tmp_path):
    """status's advice for disturbed runs reads each series' final.json (rule
    series_done): one of another shape is named and read as no decision."""
    from scalesweep.plan.adaptive import final_path
    from scalesweep.campaign.status import last_decision

    final = final_path(tmp_path, SERIES)
    final.parent.mkdir(parents=True)
    for text, why in [("[]", "a JSON list, not a series record"),
                      ('{"last_decision": {}}', "last_decision: no series, round, enough"),
                      ('{"last_decision": ', "not readable as JSON")]:
        final.write_text(text)
        problems = []
        assert last_decision(tmp_path, SERIES, problems) == {}
        assert [(f, w[:len(why)]) for f, w in problems] == [(str(final), why)]
    final.write_text(json.dumps({"last_decision": None}))  # no decision made: nothing wrong
    problems = []
    assert last_decision(tmp_path, SERIES, problems) == {} and problems == []


def test_the_decision_files_paths_are_stated_once():
    """Where the decisions go is one fact (scalesweep.plan.adaptive.DECISION_JSON, FINAL_JSON,
    from sweep.BLOCK_DIR's geometry): the workflow's rules and `scalesweep status` take it
    from there, and no other file builds the path again."""
    from scalesweep.plan.adaptive import DECISION_JSON, FINAL_JSON, SERIES_DIR
    from scalesweep.plan.sweep import BLOCK_DIR

    assert BLOCK_DIR == SERIES_DIR + "/rep{repeat}"
    assert DECISION_JSON == f"results/decisions/{SERIES_DIR}/after{{round}}.json"
    assert FINAL_JSON == f"results/decisions/{SERIES_DIR}/final.json"
    needles = ('"results/decisions', "'results/decisions", "after{round}.json",
               "after{{round}}.json", '/final.json"', '"final.json"')
    code = [*(REPO / "workflow" / "rules").glob("*.smk"), REPO / "Snakefile",
            *(REPO / "workflow" / "scalesweep").rglob("*.py"),
            *(REPO / "workflow" / "scripts").glob("*.py")]
    holders = sorted(str(p.relative_to(REPO)) for p in code
                     if any(n in p.read_text() for n in needles))
    assert holders == ["workflow/scalesweep/plan/adaptive.py"]
    run_smk = (REPO / "workflow" / "rules" / "run.smk").read_text()
    assert "        DECISION_JSON,\n" in run_smk and "        FINAL_JSON,\n" in run_smk
