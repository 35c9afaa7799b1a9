"""What report.html says about itself: made.csv (when and from which results), the
many-comparisons statement (significance.csv, q values) and the benchmarking rules
(rules.csv), each computed from small summary tables with known answers; the landing
page that embeds them, rendered as Snakemake renders it; and `scalesweep status` on a
report older than its summary."""

from __future__ import annotations

import json
import os
import re
import sys
import time
from html.parser import HTMLParser
from pathlib import Path

import jinja2
import numpy as np
import pandas as pd
import pytest
import yaml
from docutils.core import publish_parts
from scipy import stats

from conftest import REPO, tiny_config
from scalesweep.analyse.collect import SHARED_CORES_NOTE, SYNTHETIC_LABEL
from scalesweep.campaign.progress import report_freshness
from scalesweep.cli import main
from scalesweep.report import pages as rp
from scalesweep.report import table_page as tp
from scalesweep.report import made as report_made
from scalesweep.report import rules as report_rules
from scalesweep.report import significance as report_significance

GEOMETRY = dict(nodes=1, gpus=0, ranks=2, threads=1)


# --- summary tables of a small, clean campaign ---------------------------------------------

def runs_table(n: int = 4, **changes) -> pd.DataFrame:
    """n CNN runs of native and apptainer at 1 and 2 ranks, complete provenance."""
    rows = []
    t0 = pd.Timestamp("2025-03-01 01:29:00", tz="UTC")
    rng = np.random.default_rng(0)
    for k in range(n):
        for ranks, seconds in ((1, 10.0), (2, 5.5)):
            for runtime in ("native", "apptainer"):
                start = t0 + pd.Timedelta(minutes=len(rows))
                rows.append({
                    "workload": "cnn", "payload": "cnn", "runtime": runtime, "nodes": 1,
                    "gpus": 0, "ranks": ranks, "threads": 1, "repeat": k + 1,
                    "count": ranks, "time_s": seconds * np.exp(rng.normal(0, 0.01)),
                    "disturbed": False, "git_commit": "a" * 40, "hosts": "node1",
                    "launcher": "mpirun", "torch": "2.13.0",
                    "image_digest": "sha256:beef" if runtime == "apptainer" else None,
                    "start": start.isoformat(),
                    "end": (start + pd.Timedelta(seconds=50)).isoformat(),
                })
    runs = pd.DataFrame(rows)
    for col, value in changes.items():
        runs[col] = value
    return runs


def scaling_table(**changes) -> pd.DataFrame:
    rows = []
    for runtime in ("native", "apptainer"):
        for count, t in ((1, 10.0), (2, 5.5)):
            rows.append({"workload": "cnn", "runtime": runtime, "threads": 1, "count": count,
                         "time_s": t, "n": 4, "ci95_low": t * 0.98, "ci95_high": t * 1.02,
                         "baseline_count": 1, "baseline_time_s": 10.0,
                         "linear_time_s": 10.0 / count, "speedup": 10.0 / t,
                         "efficiency_pct": 1000 / t / count,
                         "efficiency_ci95_low_pct": 1000 / t / count - 2,
                         "efficiency_ci95_high_pct": 1000 / t / count + 2})
    table = pd.DataFrame(rows)
    for col, value in changes.items():
        table[col] = value
    return table


def overhead_row(ranks=2, runtime="apptainer", verdict="equivalent", p=0.4, eq_p=0.01,
                 low=-1.0, high=1.0, paired=True, n=4, normality=0.5,
                 method="paired t", overhead=None) -> dict:
    return {"workload": "cnn", "model_label": "", "arm": runtime, "nodes": 1, "gpus": 0,
            "ranks": ranks, "threads": 1, "runtime": runtime, "paired": paired,
            "pairing": "same-block pairs" if paired else "unpaired", "n_native": n, "n": n,
            "native_s": 10.0, "time_s": 10.0 * (1 + (low + high) / 200)
            if overhead is None else 10.0 * (1 + overhead / 100),
            "overhead_pct": (low + high) / 2 if overhead is None else overhead,
            "overhead_ci95_low_pct": low,
            "overhead_ci95_high_pct": high, "ci_method": method,
            "normality_p_value": normality, "p_value": p, "equivalence_p_value": eq_p,
            "margin_pct": 5.0, "verdict": verdict}


def points_table(states=("done",) * 4, reasons=None) -> pd.DataFrame:
    reasons = reasons or [""] * len(states)
    return pd.DataFrame([{"workload": "cnn", "runtime": "native", **GEOMETRY, "repeat": i + 1,
                          "path": f"cnn/native/n1-g0-r2-t1/rep{i + 1}/native", "state": s,
                          "reason": r, "log": ""}
                         for i, (s, r) in enumerate(zip(states, reasons))])


def clean_campaign() -> dict:
    return {"runs": runs_table(), "scaling": scaling_table(), "llm": pd.DataFrame(),
            "overhead": pd.DataFrame([overhead_row(1), overhead_row(2)]),
            "points": points_table()}


def by_rule(table: pd.DataFrame) -> dict[int, pd.Series]:
    assert table.columns.tolist() == report_rules.RULES_COLUMNS
    assert table["rule"].tolist() == list(report_rules.RULES)
    return {i: row for i, row in table.iterrows()}


# --- the benchmarking rules ------------------------------------------------------------------

def test_a_clean_campaign_passes_every_rule_with_its_evidence():
    rules = by_rule(report_rules.rules_table(**clean_campaign()))
    assert [r["passed"] for r in rules.values()] == ["yes"] * 8, rules
    assert "4 of 4 speedup/efficiency rows show baseline_time_s" in rules[0]["evidence"]
    assert "2 of 2 overheads show native_s and time_s" in rules[0]["evidence"]
    assert "4 requested, 4 delivered" in rules[1]["evidence"]
    assert "10 of 10 estimates" in rules[2]["evidence"]  # 4 times, 4 efficiencies, 2 overheads
    assert "Shapiro-Wilk on the per-pair log ratios of 2 of 2 paired rows" in rules[3]["evidence"]
    assert "on 4 rows with 3 repeats or more" in rules[3]["evidence"]  # scaling, checked here
    assert "2 of 2 equivalent verdicts with equivalence_p_value < 0.05" in rules[4]["evidence"]
    assert "16 of 16 runs record" in rules[5]["evidence"]
    assert "linear_time_s" in rules[6]["evidence"] and "on 4 of 4 rows" in rules[6]["evidence"]
    assert "10 of 10 means drawn" in rules[7]["evidence"]


def test_an_empty_campaign_is_not_applicable_not_passed():
    rules = by_rule(report_rules.rules_table(runs=pd.DataFrame(), scaling=pd.DataFrame(),
                                   llm=pd.DataFrame(), overhead=pd.DataFrame(),
                                   points=pd.DataFrame()))
    assert {r["passed"] for r in rules.values()} == {"not applicable"}


def test_each_rule_fails_where_its_tables_break_it_and_names_the_rows():
    c = clean_campaign()
    c["scaling"].loc[3, "baseline_time_s"] = np.nan  # apptainer count 2
    c["points"] = points_table(("done", "failed", "missing", "done"),
                               ["", "exit code 1", "", ""])
    c["overhead"] = pd.DataFrame([
        # no test below 5%, and unpaired (Fieller/Welch without a normality check)
        overhead_row(1, verdict="faster", p=0.2, low=-9, high=-1, paired=False,
                     method="Fieller/Welch", normality=np.nan),
        overhead_row(2, runtime="native-aa", verdict="inconclusive", p=0.5, low=np.nan,
                     high=np.nan, n=5, method="Hodges-Lehmann (too few pairs)",
                     normality=0.01, overhead=-2.0),
    ])
    c["runs"].loc[0, "git_commit"] = None
    c["runs"].loc[1, "image_digest"] = None  # the first apptainer run
    c["scaling"].loc[0, "linear_time_s"] = np.nan
    rules = by_rule(report_rules.rules_table(**c))
    assert [rules[i]["passed"] for i in range(8)] == ["no"] * 8, rules
    assert "scaling.csv without them: cnn apptainer 1 thr/rank count 2" in rules[0]["evidence"]
    assert "3 of 4 speedup/efficiency rows" in rules[0]["evidence"]
    assert ("4 requested, 2 delivered (done); 1 failed, 1 missing; 1 of 2 not delivered have "
            "a reason (without: cnn/native/n1-g0-r2-t1/rep3/native)") in rules[1]["evidence"]
    assert "overhead.csv overhead: 1 without a CI" in rules[2]["evidence"]
    assert "native-aa" in rules[2]["evidence"]
    # a rejected normality kept its rank method (fine), but the faster row is unpaired
    assert "rejected in 1 (their ci_method: Hodges-Lehmann" in rules[3]["evidence"]
    assert "1 unpaired rows use Fieller/Welch without a normality check (cnn apptainer " \
        "n1-g0-r1-t1)" in rules[3]["evidence"]
    assert "0 of 1 faster/slower verdicts with p_value < 0.05" in rules[4]["evidence"]
    assert "cnn apptainer n1-g0-r1-t1" in rules[4]["evidence"]
    assert "git_commit missing in 1" in rules[5]["evidence"]
    assert "image_digest missing in 1" in rules[5]["evidence"]
    assert "14 of 16 runs record" in rules[5]["evidence"]
    assert "without: cnn native 1 thr/rank count 1" in rules[6]["evidence"]
    assert "drawn without an error bar" in rules[7]["evidence"]


def test_normality_rule_fails_on_a_parametric_ci_where_normality_is_rejected():
    c = clean_campaign()
    c["overhead"] = pd.DataFrame([overhead_row(1, normality=0.001, method="paired t"),
                                  overhead_row(2)])
    rule = by_rule(report_rules.rules_table(**c))[3]
    assert rule["passed"] == "no"
    assert "a parametric CI where normality was rejected (cnn apptainer n1-g0-r1-t1)" \
        in rule["evidence"]
    # without the column, the paired rows were not checked at all
    c["overhead"] = c["overhead"].drop(columns=["normality_p_value"])
    rule = by_rule(report_rules.rules_table(**c))[3]
    assert rule["passed"] == "no" and "has no normality_p_value" in rule["evidence"]
    # unpaired rows use Fieller/Welch unchecked
    c["overhead"] = pd.DataFrame([overhead_row(1, paired=False, method="Fieller/Welch",
                                               normality=np.nan)])
    rule = by_rule(report_rules.rules_table(**c))[3]
    assert rule["passed"] == "no" and "1 unpaired rows use Fieller/Welch" in rule["evidence"]


def test_normality_of_scaling_repeats_is_checked_on_the_runs():
    c = clean_campaign()
    runs = c["runs"]
    # one wild repeat among 7 tight ones of native at count 1: Shapiro-Wilk rejects
    extra = runs[(runs["runtime"] == "native") & (runs["count"] == 1)].iloc[[0] * 4].copy()
    extra["repeat"] = [5, 6, 7, 8]
    extra["time_s"] = [9.85, 10.08, 9.95, 30.0]
    c["runs"] = pd.concat([runs, extra], ignore_index=True)
    rule = by_rule(report_rules.rules_table(**c))[3]
    assert rule["passed"] == "no"
    assert "scaling.csv: a Student t CI where normality is rejected (cnn native 1 thr/rank " \
           "count 1 (p " in rule["evidence"]
    # disturbed repeats are not in the statistics, so not in the check either
    c["runs"].loc[c["runs"]["time_s"] == 30.0, "disturbed"] = True
    assert by_rule(report_rules.rules_table(**c))[3]["passed"] == "yes"


def test_provenance_requires_block_and_probe_where_runs_csv_has_them():
    c = clean_campaign()
    c["runs"]["block_id"] = "b"
    c["runs"]["probe_gflops"] = 1.0
    assert by_rule(report_rules.rules_table(**c))[5]["passed"] == "yes"
    c["runs"].loc[2, "probe_gflops"] = np.nan
    rule = by_rule(report_rules.rules_table(**c))[5]
    assert rule["passed"] == "no" and "probe_gflops missing in 1" in rule["evidence"]


def test_rules_and_significance_on_the_aggregation_s_own_tables():
    """The tables as scalesweep.analyse.collect makes them for aggregate (same-block pairs)."""
    from scalesweep.analyse import collect
    from scalesweep.analyse import summary

    cfg = tiny_config()
    cfg["workloads"] = {"cnn": cfg["workloads"]["cnn_ddp"]}
    cfg["sweep"]["runtimes"] = ["native", "apptainer"]
    cfg["measurement"]["equivalence_margin_pct"] = 5
    runs = runs_table(n=5).assign(arm="apptainer")
    if hasattr(collect, "with_blocks"):
        runs = collect.with_blocks(runs)
    tables = {"runs": runs, "scaling": summary.scaling_summary(runs, cfg),
              "llm": summary.llm_summary(runs), "overhead": summary.overhead_summary(runs, cfg),
              "points": points_table()}
    assert len(tables["overhead"]) == 2 and len(tables["scaling"]) == 4
    rules = by_rule(report_rules.rules_table(**tables))
    assert [r["passed"] for r in rules.values()] == ["yes"] * 8, rules
    significance = report_significance.significance_table(tables["overhead"]).set_index("column")
    assert significance.loc["equivalence_p_value", "claims"] == 2
    assert significance.loc["p_value", "statement"].endswith("no faster/slower verdict.")


def test_rules_from_a_csv_round_trip(tmp_path):
    c = clean_campaign()
    for name, table in c.items():
        table.to_csv(tmp_path / f"{name}.csv", index=False)
    read = {}
    for name in c:
        try:
            read[name] = pd.read_csv(tmp_path / f"{name}.csv", dtype={"reason": str, "log": str})
        except pd.errors.EmptyDataError:
            read[name] = pd.DataFrame()
    assert report_rules.rules_table(**read)["passed"].tolist() == ["yes"] * 8


# --- many comparisons --------------------------------------------------------------------------

def test_significance_counts_chance_and_benjamini_hochberg():
    p = [0.001, 0.02, 0.03, 0.04, 0.30, 0.50, 0.70, 0.90, np.nan, 0.045]
    rows = []
    for i, value in enumerate(p):
        verdict = "slower" if value < 0.05 else "inconclusive"
        rows.append(overhead_row(ranks=i + 1, verdict=verdict, p=value, eq_p=0.5))
    # decided over the campaign (as overhead_summary writes it): 4 of the 5 "slower"
    # comparisons do not hold over 9 (BH), and become inconclusive
    overhead = report_significance.add_q_values(
        pd.DataFrame(rows).assign(verdict_text="slower by 1% (95% CI 0.5% .. 1.5%, n=4 pairs)"))
    assert overhead["verdict"].tolist().count("slower") == 1
    assert overhead["verdict_unadjusted"].tolist().count("slower") == 5
    table = report_significance.significance_table(overhead, alpha=0.05)
    assert table.columns.tolist() == report_significance.SIGNIFICANCE_COLUMNS
    diff = table.set_index("column").loc["p_value"]
    finite = np.array([x for x in p if not np.isnan(x)])
    q = stats.false_discovery_control(finite)
    assert diff["tests"] == 9 and diff["significant"] == 5
    assert diff["expected_by_chance"] == pytest.approx(9 * 0.05)
    assert diff["bh_significant"] == int((q < 0.05).sum()) == 1
    assert diff["claims"] == 1
    assert diff["claims_not_bh_significant"].startswith("cnn apptainer n1-g0-r2-t1")
    assert diff["claims_not_bh_significant"].endswith("; and 1 more")
    statement = diff["statement"]
    assert statement.startswith("5 of 9 comparisons significant at 5% (p_value < 0.05); if no "
                                "runtime differed from native, chance alone would give about "
                                "0.5. Benjamini-Hochberg at a false discovery rate of 5% over "
                                "these 9: 1 remain (q_value < 0.05).")
    assert statement.endswith(
        "The verdicts are decided over the campaign: 1 faster/slower verdict; 4 comparisons "
        "faster/slower alone but not over the campaign, inconclusive (cnn apptainer "
        "n1-g0-r2-t1; cnn apptainer n1-g0-r3-t1; cnn apptainer n1-g0-r4-t1; and 1 more).")
    equiv = table.set_index("column").loc["equivalence_p_value"]
    assert equiv["tests"] == 10 and equiv["significant"] == 0 and equiv["claims"] == 0


def test_significance_without_overhead_says_so():
    table = report_significance.significance_table(pd.DataFrame(), alpha=0.05)
    assert table["tests"].tolist() == [0, 0]
    assert table["statement"].str.startswith("no ").all()


def test_q_values_are_benjamini_hochberg_and_leave_the_rest_alone():
    overhead = pd.DataFrame([overhead_row(i, p=p, eq_p=e) for i, (p, e) in
                             enumerate([(0.01, 0.2), (0.04, np.nan), (np.nan, 0.01),
                                        (0.03, 0.03)], 1)])
    out = report_significance.add_q_values(overhead)
    cols = out.columns.tolist()
    assert cols.index("q_value") == cols.index("p_value") + 1
    assert cols.index("equivalence_q_value") == cols.index("equivalence_p_value") + 1
    expected = stats.false_discovery_control([0.01, 0.04, 0.03])
    assert out["q_value"].tolist()[:2] == pytest.approx(expected[:2].tolist())
    assert np.isnan(out["q_value"].iloc[2]) and out["q_value"].iloc[3] == pytest.approx(expected[2])
    pd.testing.assert_frame_equal(out.drop(columns=["q_value", "equivalence_q_value"]), overhead)
    assert report_significance.add_q_values(out).columns.tolist() == cols  # idempotent


# --- made ---------------------------------------------------------------------------------------

def test_made_table_time_range_runs_and_commits():
    runs = runs_table(n=2)
    runs.loc[0, "disturbed"] = True
    runs.loc[1:2, "git_commit"] = "b" * 40
    runs.loc[3, "git_commit"] = None
    made = report_made.made_table(runs, points_table(("done", "failed")),
                         pd.Timestamp("2025-03-01 01:45:10", tz="UTC"),
                         "c" * 40 + " + uncommitted changes",
                         ["runs.csv", "overhead.csv"])
    assert made.columns.tolist() == report_made.MADE_COLUMNS
    items = dict(zip(made["item"], made["value"]))
    assert items["summarised (UTC)"] == "2025-03-01 01:45:10 UTC"
    assert items["campaign ran (first run's start .. last run's end)"] == \
        "2025-03-01 01:29:00 UTC .. 2025-03-01 01:36:50 UTC"
    assert items["runs"].startswith("8 (1 disturbed")
    assert items["requested points"] == "2: 1 done, 1 failed"
    assert items["git commit of the runs"] == ("aaaaaaaaaaaa (5 runs); bbbbbbbbbbbb (2 runs); "
                                               "not recorded (1 run)")
    assert items["git commit of the workflow (at summary time)"].endswith("uncommitted changes")
    assert items["made from"] == "runs.csv, overhead.csv"


def test_made_table_names_the_site_and_machine():
    site = {"name": "local", "description": "The machine", "scheduler": "none",
            "node": {"cores": 2, "gpus": 0}}
    made = report_made.made_table(runs_table(n=1), None, 0, "c", site=site)
    items = dict(made.values)
    assert made["item"].tolist()[2:4] == ["site", "machine"]
    assert items["site"] == "local: The machine (sites/local.yaml)"
    assert items["machine"] == "per node 2 cores, no GPU, scheduler none; hosts node1 (4 runs)"
    assert "site" not in dict(report_made.made_table(runs_table(n=1), None, 0, "c").values)


def test_made_table_of_no_runs_and_the_workflow_commit(tmp_path):
    made = dict(report_made.made_table(pd.DataFrame(), None, time.time() * 1e9, "unknown").values)
    assert made["runs"].startswith("0 (0 disturbed") and "no runs" in made.values()
    assert report_made.workflow_commit(tmp_path) == "unknown (not a git checkout)"
    commit = report_made.workflow_commit(REPO)
    assert len(commit.split()[0]) == 40


# --- the landing page, rendered as Snakemake's report renders a caption ------------------------

class _File:
    """What Snakemake's report hands a caption as ``files``: records with a ``path``."""

    def __init__(self, path: str):
        self.path = Path(path)
        self.target = self.path.name


def render_landing_page(cwd: Path, files: list[str]) -> str:
    """workflow/report/workflow.rst through Jinja (trim_blocks, lstrip_blocks) and docutils
    in the campaign directory, as snakemake.report.auto_report does for the report's text."""
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    text = (REPO / "workflow/report/workflow.rst").read_text()
    rst = env.from_string(text).render(snakemake=None, categories={},
                                       files=[_File(f) for f in files])
    here = os.getcwd()
    os.chdir(cwd)
    try:
        return publish_parts(rst, writer="html",
                             settings_overrides={"halt_level": 2})["html_body"]
    finally:
        os.chdir(here)


def test_landing_page_embeds_the_first_screen_and_the_rules(tmp_path):
    summary = tmp_path / "results/summary"
    summary.mkdir(parents=True)
    c = clean_campaign()
    made = report_made.made_table(c["runs"], c["points"], pd.Timestamp("2025-03-01 01:45:10", tz="UTC"),
                         "c" * 40, ["runs.csv"])
    significance = report_significance.significance_table(c["overhead"])
    made = report_made.with_significance(made, significance)
    c["runs"].loc[0, "git_commit"] = None
    rules = report_rules.rules_table(**c)
    rules.to_csv(summary / "rules.csv", index=False)
    overhead = pd.DataFrame([{**overhead_row(1), "verdict_text": "equivalent within +-5% (x)"}])
    front = rp.front_page({**c, "overhead": overhead, "made": made, "rules": rules,
                           "significance": significance, "missing": c["points"].iloc[:0]})
    (summary / "front.html").write_text(front)
    names = ["results/summary/front.html", "results/summary/rules.csv"]
    # halt_level 2: any docutils warning (bad markup in a cell) fails here
    html = render_landing_page(tmp_path, names)
    assert html.index('id="scalesweep-verdicts"') < html.index("How to read it")
    assert "<b>equivalent</b> within +-5% (x)" in html and "2025-03-01 01:29:00 UTC" in html
    assert ".scalesweep-front" in html  # the landing page's layout rules
    assert "Benchmarking rules" in html and "git_commit missing in 1" in html
    assert "Benchmarking rule not met: provenance complete" in html  # a caveat, on top
    assert "chance alone would give about" in html
    assert "System Message" not in html
    # a report made without them (another target) renders without them, no error
    bare = render_landing_page(tmp_path / "results", [])
    assert "scalesweep measured every sweep point" in bare and "<table" not in bare
    assert "scalesweep-front" not in bare


# --- the first screen: verdicts, caveats, scaling, the campaign -----------------------------------

class _Tables(HTMLParser):
    """Every <table id=...> of a page: its rows of cell texts; and every <ul id=...>'s items."""

    def __init__(self, page: str):
        super().__init__()
        self.tables, self.lists, self._table, self._list, self._cell = {}, {}, None, None, None
        self.feed(page)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "table" and attrs.get("id"):
            self._table = self.tables.setdefault(attrs["id"], [])
        elif tag == "ul" and attrs.get("id"):
            self._list = self.lists.setdefault(attrs["id"], [])
        elif tag == "tr" and self._table is not None:
            self._table.append([])
        elif tag in ("td", "th") and self._table is not None:
            self._cell = []
        elif tag == "li" and self._list is not None:
            self._cell = []

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._table is not None and self._cell is not None:
            self._table[-1].append("".join(self._cell).strip())
            self._cell = None
        elif tag == "li" and self._list is not None and self._cell is not None:
            self._list.append("".join(self._cell).strip())
            self._cell = None
        elif tag == "table":
            self._table = None
        elif tag == "ul":
            self._list = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def verdict_campaign() -> dict:
    """One row of every kind the verdict table shows, as aggregate writes overhead.csv."""
    rows = [
        {**overhead_row(1), "verdict_text": "equivalent within +-5% (overhead 0.0%, ...)",
         "n_disturbed": 0, "shared_cores": False, "note": ""},
        {**overhead_row(2, verdict="slower", low=2.0, high=6.0, p=0.001, eq_p=0.6),
         "verdict_text": "slower by 4.0% (...)", "n_disturbed": 2, "n_pairs_split": 1,
         "shared_cores": True, "note": SHARED_CORES_NOTE},
        {**overhead_row(2, runtime="native-aa", verdict="inconclusive", low=np.nan,
                        high=np.nan, paired=False, n=1, overhead=1.5),
         "verdict_text": "inconclusive: about 3 more repeats needed (...)",
         "repeats_needed": 3, "n_native": 1},
        {**overhead_row(1), "workload": "llm", "model": "tiny",
         "model_label": f"tiny ({SYNTHETIC_LABEL})", "verdict_text": "equivalent (llm)"},
    ]
    return {"overhead": pd.DataFrame(rows)}


def test_front_page_verdicts_are_overhead_csv_s_rows():
    tables = verdict_campaign()
    page = _Tables(rp.front_page(tables))
    head, *rows = page.tables[rp.VERDICT_TABLE_ID]
    assert head == ["workload", "point", "runtime", "verdict", "overhead, 95% CI", "pairs",
                    "left out", "labels"]
    assert [r[0] for r in rows] == ["cnn", "cnn", "cnn", "llm (tiny)"]
    assert rows[0][1] == "1 node, 1 rank x 1 thread" and rows[1][1] == "1 node, 2 ranks x 1 thread"
    assert [r[2] for r in rows] == ["apptainer", "apptainer", "native-aa", "apptainer"]
    # the sentence as overhead.csv has it, its verdict in bold
    assert [r[3] for r in rows] == tables["overhead"]["verdict_text"].tolist()
    assert "<b>slower</b> by 4.0% (...)" in rp.front_page(tables)
    assert rows[0][4] == "+0.0% [-1.0% .. +1.0%]" and rows[1][4] == "+4.0% [+2.0% .. +6.0%]"
    assert rows[2][4] == "+1.5% (no 95% CI)"
    assert rows[0][5] == "4 same-block pairs"
    assert rp.verdict_rows(pd.DataFrame([overhead_row(n=1)]))["pairs"][0] == "1 same-block pair"
    assert rows[2][5] == "unpaired: 1 native, 1 native-aa runs"
    assert rows[0][6] == "none"
    assert rows[1][6] == "2 disturbed runs; 1 pair measured too far apart"
    assert "shared cores: not physical" in rows[1][7] and rows[0][7] == ""
    assert rows[2][7].startswith("A/A check") and rows[3][7] == SYNTHETIC_LABEL
    page = rp.front_page(tables)
    assert re.search(r'class="ss-label ss-warn" title="[^"]*">synthetic weights<', page)  # red


def test_front_page_without_comparisons_or_scaling_says_so():
    page = rp.front_page({"overhead": pd.DataFrame(), "scaling": pd.DataFrame()})
    assert "No container comparison: overhead.csv has no rows" in page
    assert "No scaling series" in page and rp.VERDICT_TABLE_ID not in page


def test_front_page_scaling_efficiency_per_count_with_its_ci():
    scaling = scaling_table(flag="").assign(scaling="strong")
    scaling.loc[3, "flag"] = "high_variance"
    page = _Tables(rp.front_page({"scaling": scaling}))
    head, *rows = page.tables[rp.SCALING_TABLE_ID]
    assert head == ["workload", "runtime", "threads", "count 1", "count 2", "labels"]
    assert [r[:3] for r in rows] == [["cnn", "native", "1"], ["cnn", "apptainer", "1"]]
    assert rows[0][3] == "100% (baseline: 10 s, n=4)"
    eff = 1000 / 5.5 / 2
    assert rows[0][4] == f"{eff:.1f}% [{eff - 2:.1f} .. {eff + 2:.1f}], n=4"
    assert rows[1][4].endswith("(high variance)")


def clean_front() -> dict:
    """Every table the caveats read, of a campaign none of them applies to."""
    c = clean_campaign()
    overhead = pd.DataFrame([{**overhead_row(1), "n_disturbed": 0, "n_pairs_split": 0,
                              "n_pairs_machine_differs": 0, "shared_cores": False}])
    return {"runs": c["runs"], "overhead": overhead, "scaling": c["scaling"].assign(flag=""),
            "llm": pd.DataFrame(), "missing": c["points"].iloc[:0],
            "fits": pd.DataFrame([{"workload": "cnn", "runtime": "native", "model": "amdahl",
                                   "status": "ok", "reason": ""}]),
            "rules": report_rules.rules_table(**c), "significance": report_significance.significance_table(overhead)}


def _broken(name):
    def change(t):
        if name == "missing":
            t["missing"] = points_table(("failed",), ["killed by signal SIGKILL"])
        elif name == "disturbed":
            t["runs"].loc[3, "disturbed"] = True
        elif name == "shared":
            t["overhead"]["shared_cores"] = True
        elif name == "synthetic":
            t["llm"] = pd.DataFrame([{"workload": "llm", "model": "tiny", "runtime": "native",
                                      "model_label": f"tiny ({SYNTHETIC_LABEL})"}])
        elif name == "aa":
            t["overhead"] = pd.concat([t["overhead"], pd.DataFrame([
                {**overhead_row(2, runtime="native-aa", verdict="slower", low=1, high=3)}])])
        elif name == "inconclusive":
            t["overhead"]["verdict"] = "inconclusive"
            t["overhead"]["repeats_needed"] = 4
        elif name == "no_ci":
            t["overhead"]["overhead_ci95_low_pct"] = np.nan
        elif name == "pairs":
            t["overhead"]["n_pairs_machine_differs"] = 2
        elif name == "fdr":
            t["significance"].loc[0, "claims_not_bh_significant"] = "cnn apptainer n1-g0-r1-t1"
        elif name == "flag":
            t["scaling"].loc[1, "flag"] = "single_repeat"
        elif name == "fits":
            t["fits"].loc[0, ["status", "reason"]] = ["too_few_points", "2 counts; needs 3"]
        elif name == "commits":
            t["runs"].loc[0, "git_commit"] = "b" * 40
        elif name == "rule":
            t["rules"].loc[6, ["passed", "evidence"]] = ["no", "without: cnn native"]
    return change


CAVEATS = {
    "missing": "1 requested point not finished (1 failed): cnn/native/n1-g0-r2-t1/rep1/native "
               "(killed by signal SIGKILL)",
    "disturbed": "1 of 16 runs were disturbed",
    "shared": f"Measured on shared cores (overhead.csv): {SHARED_CORES_NOTE}.",
    "synthetic": f"LLM inference on a model with {SYNTHETIC_LABEL} (tiny)",
    "aa": "reads slower or faster where nothing differs (cnn native-aa n1-g0-r2-t1: slower)",
    "inconclusive": "1 of 1 container comparisons are inconclusive: cnn apptainer n1-g0-r1-t1; "
                    "about 4 more repeats each would settle them",
    "no_ci": "1 comparison without a 95% CI",
    "pairs": "Pairs left out of the verdicts: 0 measured too far apart, 2 whose machine-speed",
    "fdr": "cnn apptainer n1-g0-r1-t1 significant alone, not after Benjamini-Hochberg over the "
           "campaign: inconclusive",
    "flag": "Scaling rows flagged (high variance, a single repeat or superlinear): cnn "
            "native 1 thr/rank count 2: single_repeat",
    "fits": "Scaling laws not fitted (too few points) for 1 series (cnn native), e.g. amdahl: "
            "2 counts; needs 3",
    "commits": "The runs were measured with 2 git commits",
    "rule": "Benchmarking rule not met: ideal (linear) lines in the scaling figures "
            "(without: cnn native; rules.csv).",
}


def test_no_caveat_applies_to_a_clean_campaign():
    tables = clean_front()
    assert rp.caveats(tables) == []
    assert "No caveat applies" in rp.front_page(tables)


@pytest.mark.parametrize("name", sorted(CAVEATS))
def test_each_caveat_applies_where_its_table_says_so_and_alone(name):
    tables = clean_front()
    _broken(name)(tables)
    lines = rp.caveats(tables)
    assert len(lines) == 1 and CAVEATS[name] in lines[0], lines
    assert lines == _Tables(rp.front_page(tables)).lists[rp.CAVEATS_ID]


# --- every table as a table ---------------------------------------------------------------------

def test_table_page_is_the_table_sortable_with_full_values():
    table = pd.DataFrame({"workload": ["cnn", "llm"], "time_s": [7.123456789, np.nan],
                          "n": [3, 4], "note": ["<b>", ""]})
    page = tp.table_page(table, "scaling.csv", "scaling")
    parsed = _Tables(page.replace('<table class="sortable"', '<table id="t" class="sortable"'))
    assert parsed.tables["t"] == [["workload", "time_s", "n", "note"],
                                  ["cnn", "7.123", "3", "<b>"], ["llm", "", "4", ""]]
    assert 'data-v="7.123456789" title="7.123456789"' in page  # the full value, sorted on
    assert "&lt;b&gt;" in page and "<h1>scaling <small>(scaling.csv)</small></h1>" in page
    assert "2 rows, 4 columns" in page and 'addEventListener("click"' in page


def test_a_wide_table_lists_the_columns_the_same_in_every_row_once():
    wide = pd.DataFrame({f"c{i}": [i, i] for i in range(tp.WIDE)}).assign(
        path=["a", "b"], repeat=[1, 2])
    page = tp.table_page(wide, "provenance.csv", "per-run provenance")
    parsed = _Tables(page.replace('<table class="sortable"', '<table id="t" class="sortable"'))
    assert parsed.tables["t"][0] == ["path", "repeat"]
    assert f"The same in every row ({tp.WIDE} of {tp.WIDE + 2} columns)" in page
    assert "<li><b>c3</b>: 3</li>" in page
    # a narrow one, or a single row, keeps every column in the table
    assert "The same in every row" not in tp.table_page(wide.iloc[:1], "p.csv", "p")
    assert "The same in every row" not in tp.table_page(wide.iloc[:, -3:], "p.csv", "p")


def test_a_long_table_page_shows_its_first_rows_and_says_where_the_rest_are():
    """A 100,000-run runs.csv made a 168 MiB page: a page shows MAX_ROWS rows, names how
    many of how many, and the CSV that holds them all; a table within the cap is whole."""
    table = pd.DataFrame({"repeat": range(1, 13), "time_s": [10.0 + k for k in range(12)]})
    page = tp.table_page(table, "runs.csv", "runs", max_rows=5)
    assert page.count("<tr>") == 1 + 5  # the header and the first five rows
    assert 'data-v="15.0"' not in page and 'data-v="14.0"' in page
    assert "The first 5 rows of 12 are shown" in page and "12 rows, 2 columns" in page
    assert "every row is in runs.csv" in page
    whole = tp.table_page(table, "runs.csv", "runs", max_rows=12)
    assert whole.count("<tr>") == 13 and "are shown" not in whole
    assert tp.MAX_ROWS >= 1000  # a campaign of hundreds of runs is shown whole


def test_an_empty_table_page_says_so():
    assert "is empty (no columns, no rows)" in tp.table_page(pd.DataFrame(), "llm.csv", "LLM")
    header_only = tp.table_page(pd.DataFrame(columns=["path", "state"]), "missing.csv", "m")
    assert "<th>path</th>" in header_only and "No rows." in header_only


# --- scalesweep status: a report older than its summary ----------------------------------------

def _campaign(tmp_path: Path) -> Path:
    cfg = tiny_config()
    cfg.pop("_site", None)
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "config.yaml").write_text(yaml.safe_dump(cfg))
    (tmp_path / "results/summary").mkdir(parents=True)
    (tmp_path / "results/summary/runs.csv").write_text("workload\n")
    (tmp_path / "results/summary/overhead.csv").write_text("workload\n")
    return tmp_path


def _age(path: Path, seconds_ago: float) -> None:
    t = time.time() - seconds_ago
    os.utime(path, (t, t))


def test_status_says_when_the_report_is_older_than_the_summary(tmp_path, capsys):
    wd = _campaign(tmp_path)
    assert main(["status", "-d", str(wd)]) == 0
    assert "report.html" not in capsys.readouterr().out  # no report: nothing to say
    report = wd / "report.html"
    report.write_text("<html></html>")
    _age(report, 600)
    _age(wd / "results/summary/runs.csv", 900)  # overhead.csv is the newest
    assert main(["status", "-d", str(wd)]) == 0
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if line.startswith("report.html"))
    assert line.startswith("report.html is older than the summary (made ")
    assert "results/summary/overhead.csv)" in line
    assert line.endswith(f"run snakemake --directory {wd} --report report.html")
    assert main(["status", "-d", str(wd), "--json"]) == 0
    record = json.loads(capsys.readouterr().out)["report"]
    assert record["stale"] is True and record["newest"] == "overhead.csv"
    assert record["command"] == f"snakemake --directory {wd} --report report.html"
    # made again after the summary: not stale
    report.write_text("<html>again</html>")
    assert main(["status", "-d", str(wd)]) == 0
    assert "older than the summary" not in capsys.readouterr().out
    assert main(["status", "-d", str(wd), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["report"]["stale"] is False


def test_report_freshness_times_are_utc(tmp_path):
    wd = _campaign(tmp_path)
    report = wd / "report.html"
    report.write_text("x")
    os.utime(report, (0, 0))
    fresh = report_freshness(wd)
    assert fresh["report"] == "1970-01-01 00:00:00 UTC" and fresh["stale"] is True
    # a cache written after the report (an aggregation that failed later) is no table
    os.utime(report, None)
    (wd / "results" / "summary" / ".runs-cache.npz").write_bytes(b"x")
    assert report_freshness(wd)["newest"] != ".runs-cache.npz"


# --- the rule's script, with a stand-in for Snakemake's `snakemake` object -----------------------

class _Files(list):
    def __init__(self, **named):
        super().__init__(named.values())
        self.__dict__.update(named)

    def items(self):
        return iter(self.__dict__.items())


def run_script(name: str, snakemake) -> None:
    """workflow/scripts/<name> as Snakemake's script: directive runs it."""
    script = REPO / "workflow/scripts" / name
    stderr = sys.stderr
    try:
        exec(compile(script.read_text(), str(script), "exec"), {"snakemake": snakemake})
    finally:
        sys.stderr.close()
        sys.stderr = stderr


def test_report_summary_script_writes_the_three_tables(tmp_path):
    summary = tmp_path / "results/summary"
    summary.mkdir(parents=True)
    c = clean_campaign()
    inputs = {}
    for name, table in c.items():
        inputs[name] = str(summary / f"{name}.csv")
        table.to_csv(inputs[name], index=False)
    (summary / "llm.csv").write_text("")  # an empty table, as aggregate may write one
    os.utime(summary / "overhead.csv", (1_700_000_000, 1_700_000_000))
    for name in ("runs", "scaling", "llm", "points"):
        os.utime(summary / f"{name}.csv", (1_600_000_000, 1_600_000_000))
    outputs = {n: str(summary / f"{n}.csv") for n in ("made", "significance", "rules")}
    snakemake = type("Snakemake", (), {})()
    snakemake.input = _Files(**inputs)
    snakemake.output = _Files(**outputs)
    snakemake.log = [str(tmp_path / "summary.log")]
    snakemake.config = {"_code_root": str(REPO), "measurement": {}}
    snakemake.params = type("Params", (), {"site": {"name": "local", "node": {"cores": 2}}})()
    run_script("report_summary.py", snakemake)
    made = dict(pd.read_csv(outputs["made"]).values)
    assert made["site"] == "local (sites/local.yaml)"
    assert made["machine"] == "per node 2 cores, no GPU; hosts node1 (16 runs)"
    assert made["summarised (UTC)"] == "2023-11-14 22:13:20 UTC"  # overhead.csv's mtime
    assert made["made from"] == "runs.csv, scaling.csv, llm.csv, overhead.csv, points.csv"
    assert pd.read_csv(outputs["rules"])["passed"].tolist() == ["yes"] * 8
    assert len(pd.read_csv(outputs["significance"])) == 2
    assert "rules.csv: 8 rows" in (tmp_path / "summary.log").read_text()


def test_report_pages_script_writes_every_table_page_and_the_first_screen(tmp_path):
    summary = tmp_path / "results/summary"
    summary.mkdir(parents=True)
    c = clean_campaign()
    overhead = pd.DataFrame([{**overhead_row(1), "verdict_text": "equivalent (one)"}])
    tables = {"runs": c["runs"], "scaling": c["scaling"], "overhead": overhead,
              "missing": c["points"].iloc[:0], "made": report_made.made_table(c["runs"], None, 0, "c")}
    inputs = {}
    for name, table in tables.items():
        inputs[name] = str(summary / f"{name}.csv")
        table.to_csv(inputs[name], index=False)
    inputs["llm"] = str(summary / "llm.csv")
    (summary / "llm.csv").write_text("")  # an empty table, as aggregate may write one
    outputs = {n: str(summary / f"{n}.html") for n in inputs}
    snakemake = type("Snakemake", (), {})()
    snakemake.input = _Files(**inputs)
    snakemake.output = _Files(front=str(summary / "front.html"), **outputs)
    snakemake.log = [str(tmp_path / "pages.log")]
    snakemake.config = {"_code_root": str(REPO)}
    snakemake.params = type("Params", (), {"titles": {n: f"the {n} table" for n in inputs}})()
    run_script("report_pages.py", snakemake)
    for name, path in outputs.items():
        page = Path(path).read_text()
        assert f"<h1>the {name} table <small>({name}.csv)</small></h1>" in page
        assert ("is empty" in page) if name == "llm" else (
            f"{_plural_rows(len(tables[name]))}" in page)
    front = _Tables((summary / "front.html").read_text())
    assert front.tables[rp.VERDICT_TABLE_ID][1][3] == "equivalent (one)"
    assert "runs.html: 16 rows" in (tmp_path / "pages.log").read_text()


def _plural_rows(n: int) -> str:
    return f"{n} row{'s' if n != 1 else ''},"
