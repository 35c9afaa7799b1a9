"""Naming the cause of a stack difference (issue #43): the one-factor ablation's items,
order, verdicts over the ablation, stopping rule, the cause in attribution.csv's sentence,
the swap image's config and build command, and `scalesweep ablate --plan` on a
constructed campaign."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from scipy import stats

from conftest import tiny_config
from scalesweep.analyse import ablation as ab
from scalesweep.analyse.attribution import attribution_table
from scalesweep.plan import swaps
from scalesweep.images.build import build_image
from scalesweep.images.process import BuildError
from scalesweep.plan.imageset import ImageConfigError, check_image, image_spec, workload_image
from scalesweep.record.stack import bytecode_mode

REPO = Path(__file__).resolve().parents[2]
GEOM = dict(workload="cnn_ddp", model="", nodes=1, gpus=0, ranks=2, threads=1)


def target(pct=-16.0, lo=-20.0, hi=-12.0, verdict="faster", **geom) -> dict:
    return dict(GEOM, **geom, runtime="charliecloud", phase="steady state", stack_pct=pct,
                stack_ci95_low_pct=lo, stack_ci95_high_pct=hi, verdict=verdict,
                margin_pct=5.0)


def differences(**geom) -> pd.DataFrame:
    base = dict(GEOM, **geom, arm="charliecloud", runtime="charliecloud", mode="dir")
    base.pop("model")
    return pd.DataFrame([
        dict(base, category="interpreter", item="python version", native="3.11.7",
             container="3.11.2"),
        dict(base, category="interpreter", item="python bytecode",
             native="timestamp (torch)", container="checked hash (torch)"),
        dict(base, category="library", item="other: libexpat", native="not loaded",
             container="2.5.0"),
        dict(base, category="environment", item="env OMP_NUM_THREADS", native="2",
             container="unset")])


def measured(pct, lo, hi, p, eq_p, verdict, **geom) -> pd.DataFrame:
    """An item campaign's attribution.csv row (its stack component)."""
    return pd.DataFrame([dict(GEOM, **geom, runtime="charliecloud", phase="steady state",
                              stack_pct=pct, stack_ci95_low_pct=lo, stack_ci95_high_pct=hi,
                              p_value=p, equivalence_p_value=eq_p, verdict=verdict,
                              verdict_unadjusted=verdict, verdict_text=f"{verdict} ...")])


def test_each_recorded_difference_maps_to_the_item_that_swaps_it_or_to_none():
    cover = ab.differing_items(target(), differences())
    assert [x.split(":")[0] for x in cover["interpreter"]] == ["python version"]
    assert [x.split(":")[0] for x in cover["bytecode"]] == ["python bytecode"]
    # what no image swap can carry: listed apart, never tried
    assert [x.split(":")[0] for x in cover[""]] == ["other", "env OMP_NUM_THREADS"]
    assert swaps.covering("python: libpython3.11") == "interpreter"
    assert swaps.covering("torch blas") is None
    # another geometry's differences are not this target's
    assert ab.differing_items(target(ranks=1), differences()) == {}


def test_the_items_are_tried_those_covering_more_targets_first_then_in_catalogue_order():
    two = pd.DataFrame([target(), target(ranks=1)])
    diffs = pd.concat([differences(), differences(ranks=1).iloc[[1]]])
    assert ab.plan_items(two, diffs) == ["bytecode", "interpreter"]
    assert ab.plan_items(two.iloc[:1], differences()) == ["interpreter", "bytecode"]
    assert ab.plan_items(two, pd.DataFrame()) == []


def test_outcomes_carries_part_exceeds_ruled_out_undecided():
    t = target()
    item = dict(stack_ci95_low_pct=-18.0, stack_ci95_high_pct=-10.0)
    assert ab.outcome(t, dict(item, verdict="faster")) == ab.CARRIES
    # faster, but its CI wholly nearer zero than the target's: a part of it
    assert ab.outcome(t, dict(stack_ci95_low_pct=-6.0, stack_ci95_high_pct=-2.0,
                              verdict="faster")) == ab.PART
    # wholly beyond the target's: more than the whole (something else offsets it)
    assert ab.outcome(t, dict(stack_ci95_low_pct=-35.0, stack_ci95_high_pct=-25.0,
                              verdict="faster")) == ab.EXCEEDS
    # equivalent within the margin: ruled out where its CI excludes the target's, not where
    # a target within the margin's reach is still possible
    assert ab.outcome(t, dict(stack_ci95_low_pct=-3.0, stack_ci95_high_pct=2.0,
                              verdict="equivalent")) == ab.RULED_OUT
    small = target(-6.0, -8.0, -4.0)
    assert ab.outcome(small, dict(stack_ci95_low_pct=-4.8, stack_ci95_high_pct=-3.2,
                                  verdict="equivalent")) == ab.UNDECIDED
    assert ab.outcome(t, dict(item, verdict="slower")) == ab.RULED_OUT
    assert ab.outcome(t, dict(item, verdict="inconclusive")) == ab.UNDECIDED
    # a slower target: nearer zero is below it
    slow = target(16.0, 12.0, 20.0, "slower")
    assert ab.outcome(slow, dict(stack_ci95_low_pct=2.0, stack_ci95_high_pct=6.0,
                                 verdict="slower")) == ab.PART


def test_the_stopping_rule():
    assert ab.next_step(["bytecode"], 0, 600, 60) == ("stop", "every target is named")
    action, why = ab.next_step([], 1, 600, None)
    assert action == "stop" and "no single item" in why
    # the next item does not fit in what is left of the budget: said with what it needs
    action, why = ab.next_step(["interpreter", "bytecode"], 1, 300, 1200)
    assert action == "stop" and "interpreter" in why and "20 min" in why and "5 min" in why
    assert ab.next_step(["interpreter", "bytecode"], 1, 1500, 1200) == ("run", "interpreter")
    assert ab.next_step(["bytecode"], 1, 1500, None) == ("run", "bytecode")


def test_item_verdicts_are_decided_over_the_whole_ablation():
    targets = pd.DataFrame([target()])
    # the interpreter: faster with p 0.01 alone, q 0.02 over the two tries; the byte code
    # equivalent within the margin
    rows = ab.item_rows(targets, "interpreter",
                        measured(-15.0, -19.0, -11.0, 0.01, 0.9, "faster"), differences(), "a")
    rows += ab.item_rows(targets, "bytecode",
                         measured(-1.0, -3.0, 1.0, 0.6, 0.01, "equivalent"), differences(), "b")
    table = ab.ablation_table(rows)
    assert list(table.columns) == ab.COLUMNS
    q = stats.false_discovery_control([0.01, 0.6], method="bh")
    assert table["q_value"].to_numpy() == pytest.approx(q)
    assert list(table["outcome"]) == [ab.CARRIES, ab.RULED_OUT]
    assert ab.cause(target(), table) == (
        "carried by the Python build (python version: 3.11.7 (native) vs 3.11.2 (image))")
    # read back from ablation.csv, a row without differences has NaN there: no "(nan)"
    assert ab.cause(target(), table.assign(differences=np.nan)) == "carried by the Python build"
    # the same item at p 0.04 among four tries is not a difference over the ablation
    more = ab.item_rows(targets, "interpreter",
                        measured(-15.0, -19.0, -11.0, 0.04, 0.9, "faster"), differences(), "a")
    for p in (0.5, 0.6, 0.7):
        more += ab.item_rows(targets, "bytecode",
                             measured(-1.0, -3.0, 1.0, p, 0.2, "inconclusive"), differences(), "b")
    t2 = ab.ablation_table(more)
    assert t2.iloc[0]["verdict"] == "inconclusive" and t2.iloc[0]["verdict_unadjusted"] == "faster"
    assert ab.cause(target(), t2) == ("no single item named (interpreter undecided, bytecode "
                                      "undecided, bytecode undecided, bytecode undecided)")


def test_an_item_campaign_without_the_comparison_is_not_measured():
    rows = ab.item_rows(pd.DataFrame([target()]), "bytecode", pd.DataFrame(), differences(), "x")
    assert np.isnan(rows[0]["stack_pct"]) and rows[0]["verdict"] == "inconclusive"
    assert rows[0]["verdict_text"].startswith("not measured")


def test_the_cause_reaches_attribution_csv_and_its_sentence():
    overhead = pd.DataFrame([dict(GEOM, runtime=rt, arm=rt, overhead_pct=o,
                                  overhead_ci95_low_pct=lo, overhead_ci95_high_pct=hi,
                                  verdict=v, margin_pct=5.0, n=8)
                             for rt, (o, lo, hi, v) in {
                                 "charliecloud": (-16.0, -20.0, -12.0, "faster"),
                                 "charliecloud+control": (1.0, -2.0, 4.0, "equivalent")}.items()])
    plain = attribution_table(overhead)
    t = plain.iloc[0].to_dict()
    table = ab.ablation_table(ab.item_rows(
        plain, "interpreter", measured(-15.0, -19.0, -11.0, 0.001, 0.9, "faster"),
        differences(), "a"))
    row = attribution_table(overhead, ablation=table).iloc[0]
    assert row["cause"].startswith("carried by the Python build")
    assert row["explanation"] == (
        "faster by 16.0%: isolation equivalent within +-5%; stack faster by 16.8%, carried "
        "by the Python build (python version: 3.11.7 (native) vs 3.11.2 (image))")
    assert t["cause"] == "" and "carried" not in t["explanation"]


def test_the_catalogue_is_the_schemas_and_the_recipes():
    schema = yaml.safe_load((REPO / "workflow/schemas/config.schema.yaml").read_text())
    props = schema["properties"]
    image = props["containers"]["properties"]["images"]["additionalProperties"]["properties"]
    assert image["swap"]["enum"] == ["", *swaps.SWAPS]
    items = props["attribution"]["properties"]["ablation"]["properties"]["items"]
    assert items["items"]["enum"] == list(swaps.SWAPS)
    dockerfile = (REPO / "containers/charliecloud/Dockerfile.control").read_text()
    definition = (REPO / "containers/apptainer/control.def").read_text()
    assert f"ARG {swaps.BUILD_ARG}" in dockerfile and f"{swaps.BUILD_ARG}=" in definition
    for name, item in swaps.SWAPS.items():  # each recipe's branch for the items it swaps
        for kind, recipe in (("dockerfile", dockerfile), ("definition", definition)):
            assert (f'*" {name} "*)' in recipe) == (kind in item.recipe_kinds), (name, kind)


def _swap_config():
    config = tiny_config()
    config["sweep"]["runtimes"] = ["native", "charliecloud", "charliecloud+control"]
    entry = {"builder": "charliecloud", "recipe": "containers/charliecloud/Dockerfile.control",
             "requirements": "envs/payload-requirements.txt", "prebuilt": "", "format": "dir",
             "fakeroot": False}
    config["containers"] = {"image": ["ablation_interpreter", "control"], "images": {
        "ablation_interpreter": dict(entry, control=False, swap="interpreter"),
        "control": dict(entry, control=True, swap="")}}
    return config


def test_a_swap_image_is_the_workload_side_built_with_its_item():
    from scalesweep.plan.image_rules import ImageRules
    from scalesweep.plan.sweep import sweep_points

    config = _swap_config()
    assert workload_image(config, "cnn_ddp", "charliecloud").name == "ablation_interpreter"
    assert workload_image(config, "cnn_ddp", "charliecloud+control").name == "control"
    points = sweep_points(config)
    rules = ImageRules(config, points, points, str)
    args = rules.build_args(type("W", (), {"image": "ablation_interpreter"})())
    assert "--host-stack" in args and args.endswith("--swap interpreter")
    assert "--swap" not in rules.build_args(type("W", (), {"image": "control"})())
    config["containers"]["images"]["ablation_interpreter"]["control"] = True
    with pytest.raises(ImageConfigError, match="ablation_interpreter.swap: 'interpreter'.*"
                       "cannot be the control image too"):
        check_image(image_spec(config, "ablation_interpreter"), config["_site"])


def test_a_swap_needs_the_host_stack_and_a_recipe_that_takes_it(tmp_path):
    with pytest.raises(BuildError, match="--swap: an item is swapped into a control image"):
        build_image("charliecloud", REPO / "containers/charliecloud/Dockerfile.control",
                    tmp_path / "out", tmp_path / "m.json", swap=["interpreter"],
                    tools={"ch-image": "ch-image"})


def test_the_bytecode_mode_is_read_from_the_pyc_header(tmp_path, monkeypatch):
    import importlib.util
    import py_compile

    src = tmp_path / "probe_mod.py"
    src.write_text("X = 1\n")
    for mode, want in ((py_compile.PycInvalidationMode.TIMESTAMP, "timestamp"),
                       (py_compile.PycInvalidationMode.CHECKED_HASH, "checked hash"),
                       (py_compile.PycInvalidationMode.UNCHECKED_HASH, "unchecked hash")):
        cached = importlib.util.cache_from_source(str(src))
        py_compile.compile(str(src), cfile=cached, invalidation_mode=mode)
        spec = importlib.util.spec_from_file_location("probe_mod", src)
        module = importlib.util.module_from_spec(spec)
        monkeypatch.setitem(sys.modules, "probe_mod", module)
        assert bytecode_mode(("probe_mod",)) == f"{want} (probe_mod)"
    Path(cached).unlink()
    assert bytecode_mode(("probe_mod",)) == "no .pyc (probe_mod)"
    assert bytecode_mode(("not_imported_here",)) is None


def test_ablate_plan_on_a_constructed_campaign(tmp_path):
    """`scalesweep ablate --plan`: the targets, what no image can swap, the items in order
    with their cost against the budget, the overlay each item's campaign adds; nothing
    runs."""
    summary = tmp_path / "results/summary"
    summary.mkdir(parents=True)
    (tmp_path / "config").mkdir()
    (tmp_path / "config/config.yaml").write_text((REPO / "config/config.yaml").read_text())
    row = dict(target(), control_runtime="charliecloud+control")
    pd.DataFrame([row, dict(row, ranks=1, verdict="equivalent")]).to_csv(
        summary / "attribution.csv", index=False)
    differences().to_csv(summary / "differences.csv", index=False)
    cmd = [sys.executable, "-m", "scalesweep.cli", "ablate", "--plan", "--directory",
           str(tmp_path), "--profile", str(REPO / "profiles/local"), "--configfile",
           str(REPO / "config/attribution.yaml"), "--budget-min", "30"]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "1 target(s)" in text and "cnn_ddp charliecloud ranks 2 steady state" in text
    assert "not ablatable by an image: other: libexpat" in text
    assert "budget 30 min" in text
    assert text.index("  interpreter:") < text.index("  bytecode:")
    overlay = yaml.safe_load((tmp_path / "ablation/interpreter/ablation.yaml").read_text())
    assert "only" not in overlay and overlay["workloads"]["llm"] == {"enabled": False}
    assert overlay["sweep"]["runtimes"] == ["native", "charliecloud", "charliecloud+control"]
    assert overlay["containers"]["image"] == ["ablation_interpreter", "control"]
    assert overlay["containers"]["images"]["ablation_interpreter"]["swap"] == "interpreter"
    # the target's geometry only: 2 ranks, not the campaign's 1 and 2
    assert overlay["workloads"]["cnn_ddp"]["sweep"] == {
        "nodes": [1], "gpus_per_node": [0], "ranks_per_node": [2], "threads_per_rank": [1],
        "baseline": None}
    assert not (summary / "ablation.csv").exists()
    # a campaign without an attribution: told what to run first
    bare = subprocess.run([*cmd[:6], str(tmp_path / "none"), *cmd[7:]], capture_output=True,
                          text=True, cwd=REPO)
    assert bare.returncode == 2 and "attribution.csv is missing" in bare.stderr


def test_exploratory_targets_are_said_so_and_never_reach_attribution_csv():
    row = dict(target(), verdict="inconclusive", verdict_unadjusted="faster", q_value=0.21)
    attribution = pd.DataFrame([row, dict(row, ranks=1, verdict_unadjusted="inconclusive")])
    assert ab.targets(attribution).empty
    found = ab.targets(attribution, exploratory=True)
    assert len(found) == 1 and found.iloc[0]["verdict"] == "faster"
    assert found.iloc[0]["target_basis"] == ab.BASIS_ALONE
    table = ab.ablation_table(ab.item_rows(
        found, "interpreter", measured(-11.0, -14.5, -6.9, 0.0001, 0.9, "faster"),
        differences(), "a"))
    assert table.iloc[0]["target_basis"] == ab.BASIS_ALONE and table.iloc[0]["outcome"] == ab.CARRIES
    assert ab.cause(found.iloc[0].to_dict(), table) == ""  # attribution.csv: never
    assert ab.cause(found.iloc[0].to_dict(), table, exploratory=True).startswith(
        "carried by the Python build")
