"""The first screen's answer as a picture (issue #39): the forest plot of every row of
overhead.csv (scalesweep.report.figures.forest_figure, embedded by
scalesweep.report.pages.front_page as an inline SVG above the verdict table), and the
LLM-under-load comparisons that cannot be decided by design said in one line there
instead of a row each."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser

import matplotlib.colors as mcolors
import numpy as np
import pandas as pd
import pytest

from test_load_analysis import _requests  # a load level's requests, as the engine logs them

from scalesweep.analyse.load import load_runs, load_verdicts
from scalesweep.analyse.summary import campaign_settings
from scalesweep.plan.kinds.llm import compact_level
from scalesweep.record.load import level_summary
from scalesweep.report import figures as rf
from scalesweep.report import front_load as fl
from scalesweep.report import pages as rp


def _row(runtime="apptainer", ranks=1, verdict="equivalent", overhead=0.5, low=-1.0,
         high=2.0, workload="cnn_ddp", margin=2.0, **more) -> dict:
    return {"workload": workload, "model_label": "", "arm": runtime, "nodes": 1, "gpus": 0,
            "ranks": ranks, "threads": 1, "runtime": runtime, "paired": True,
            "pairing": "same-block pairs", "n_native": 4, "n": 4, "overhead_pct": overhead,
            "overhead_ci95_low_pct": low, "overhead_ci95_high_pct": high,
            "margin_pct": margin, "verdict": verdict,
            "verdict_text": f"{verdict} (...)" if verdict else "", **more}


def overhead_csv() -> pd.DataFrame:
    """overhead.csv with a row of every kind the forest plot draws, deliberately not in any
    sorted order (the plot keeps the table's): slower, equivalent, faster, an A/A check
    without a CI, an A/A check that is equivalent, a row without an estimate, an LLM row."""
    return pd.DataFrame([
        _row(ranks=2, verdict="slower", overhead=4.0, low=2.1, high=6.3),
        _row(ranks=1, verdict="equivalent", overhead=0.4, low=-0.9, high=1.6),
        _row("charliecloud", ranks=1, verdict="faster", overhead=-3.2, low=-5.5, high=-0.8),
        _row("native-aa", ranks=2, verdict="inconclusive", overhead=-0.6, low=np.nan,
             high=np.nan, repeats_needed=3),
        _row("native-aa", ranks=1, verdict="equivalent", overhead=0.1, low=-0.7, high=0.9),
        _row("charliecloud", ranks=2, verdict=None, overhead=np.nan, low=np.nan, high=np.nan),
        _row(workload="llm", model="tiny", verdict="inconclusive", overhead=1.5, low=-4.0,
             high=7.0, margin=5.0),
    ])


def _hex(color) -> str:
    return mcolors.to_hex(color)


# --- the forest plot: what it draws is overhead.csv's rows -------------------------------------

def test_forest_plot_draws_each_row_of_overhead_csv_in_its_order():
    overhead = overhead_csv()
    labels = rp.forest_labels(overhead)
    fig, drawn = rf.forest_figure(overhead, labels)
    # what it says it drew: one row per overhead.csv row, in its order, its numbers
    assert list(drawn["label"]) == labels and len(drawn) == len(overhead)
    shown = rp.verdict_rows(overhead)  # the verdict table's cells
    assert labels == [f"{w} | {p} | {r}" for w, p, r in
                      zip(shown["workload"], shown["point"], shown["runtime"])]
    assert labels[0] == "cnn_ddp | 1 node, 2 ranks x 1 thread | apptainer"
    assert labels[6] == "llm (tiny) | 1 node, 1 rank x 1 thread | apptainer"
    np.testing.assert_array_equal(drawn["overhead_pct"], overhead["overhead_pct"])
    np.testing.assert_array_equal(drawn["ci_low_pct"], overhead["overhead_ci95_low_pct"])
    np.testing.assert_array_equal(drawn["ci_high_pct"], overhead["overhead_ci95_high_pct"])
    assert list(drawn["verdict"]) == ["slower", "equivalent", "faster", "inconclusive",
                                      "equivalent", "not tested", "inconclusive"]
    assert list(drawn["verdict"]) == list(shown["verdict"])  # the table's words
    assert list(drawn["color"]) == [rf.VERDICT_COLORS[v] for v in drawn["verdict"]]
    assert list(drawn["has_ci"]) == [True, True, True, False, True, False, True]
    assert list(drawn["note"]) == ["", "", "", rf.NO_CI, "", rf.NO_ESTIMATE, ""]

    # and what is on the axes: the tick labels top to bottom, a point per row at its
    # estimate in its verdict's colour, a horizontal bar from the CI's low to its high
    ax = fig.axes[0]
    ticks = [t.get_text() for t in ax.get_yticklabels()]
    assert [t.removesuffix("  [A/A]") for t in ticks] == labels
    assert ax.get_ylim()[0] > ax.get_ylim()[1]  # inverted: the first row on top
    points = {}
    for line in ax.get_lines():
        x, y = line.get_xdata(), line.get_ydata()
        if len(x) == 1 and line.get_marker() in ("o", "s"):
            points[int(y[0])] = (float(x[0]), _hex(line.get_markeredgecolor()),
                                 line.get_marker())
    assert sorted(points) == list(range(len(overhead)))
    for i, r in drawn.iterrows():
        x, color, _ = points[i]
        assert x == (r["overhead_pct"] if np.isfinite(r["overhead_pct"]) else 0.0)
        assert color == r["color"]
    bars = {}
    for collection in ax.collections:
        for seg in getattr(collection, "get_segments", lambda: [])():
            if len(seg) == 2 and seg[0][1] == seg[1][1] and seg[0][0] != seg[1][0]:
                bars[int(seg[0][1])] = (min(seg[0][0], seg[1][0]), max(seg[0][0], seg[1][0]),
                                        _hex(collection.get_colors()[0]))
    assert sorted(bars) == [i for i, ci in enumerate(drawn["has_ci"]) if ci]
    for i, (low, high, color) in bars.items():
        assert (low, high) == pytest.approx((overhead.at[i, "overhead_ci95_low_pct"],
                                             overhead.at[i, "overhead_ci95_high_pct"]))
        assert color == drawn.at[i, "color"]
    # "no CI" / "no estimate" beside the points without one
    notes = [t.get_text() for t in ax.texts]
    assert sorted(notes) == sorted([rf.NO_CI, rf.NO_ESTIMATE])
    # the zero line and each row's equivalence band +-margin_pct
    assert any(list(line.get_xdata()) == [0, 0] for line in ax.get_lines())
    bands = [c.get_paths()[0].get_extents() for c in ax.collections
             if len(c.get_facecolor()) and _hex(c.get_facecolor()[0]) == rf.BAND_COLOR]
    assert sorted((b.x0, b.x1) for b in bands) == sorted(
        (-m, m) for m in overhead["margin_pct"])


def test_forest_plot_marks_the_a_a_rows():
    overhead = overhead_csv()
    fig, drawn = rf.forest_figure(overhead, rp.forest_labels(overhead), rp.AA_RUNTIME)
    aa = list(overhead["runtime"] == rp.AA_RUNTIME)
    assert list(drawn["aa"]) == aa and sum(aa) == 2
    ax = fig.axes[0]
    ticks = ax.get_yticklabels()
    assert [t.get_text().endswith("[A/A]") for t in ticks] == aa
    assert [_hex(t.get_color()) == rf.AA_COLOR for t in ticks] == aa
    markers = {int(line.get_ydata()[0]): line.get_marker() for line in ax.get_lines()
               if len(line.get_xdata()) == 1 and line.get_marker() in ("o", "s")}
    assert [markers[i] == "s" for i in range(len(overhead))] == aa
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "A/A check (native vs native)" in legend
    assert "equivalence band (+-margin_pct of each row)" in legend  # 2% and 5% here
    one = rf.forest_figure(overhead[overhead["margin_pct"] == 2.0])[0]
    assert "equivalence band (+-2%)" in [t.get_text() for t in
                                          one.axes[0].get_legend().get_texts()]
    assert "squares and [A/A]: the A/A check" in rp.front_page({"overhead": overhead})
    # without A/A rows: no square, no A/A in the legend or the caption
    no_aa = overhead[~overhead["runtime"].eq(rp.AA_RUNTIME)]
    assert "[A/A]" not in rp.front_page({"overhead": no_aa})
    fig, drawn = rf.forest_figure(no_aa)
    assert not drawn["aa"].any()
    assert "A/A check (native vs native)" not in [t.get_text() for t in
                                                   fig.axes[0].get_legend().get_texts()]


class _Page(HTMLParser):
    """The first screen's elements in document order (tag, id), the forest SVG's texts and
    colours, every <table id=...>'s rows and every <p id=...>'s text."""

    def __init__(self, page: str):
        super().__init__()
        self.order, self.svg_text, self.tables, self.paragraphs = [], [], {}, {}
        self._svg = self._table = self._cell = self._p = None
        self.feed(page)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if attrs.get("id"):
            self.order.append((tag, attrs["id"]))
        if tag == "svg":
            self._svg = True
        elif tag == "text" and self._svg:
            self._cell = []
        elif tag == "table" and attrs.get("id"):
            self._table = self.tables.setdefault(attrs["id"], [])
        elif tag == "tr" and self._table is not None:
            self._table.append([])
        elif tag in ("td", "th") and self._table is not None:
            self._cell = []
        elif tag == "p" and attrs.get("id"):
            self._p = attrs["id"]
            self._cell = []

    def handle_endtag(self, tag):
        if tag == "svg":
            self._svg = None
        elif tag == "text" and self._svg and self._cell is not None:
            self.svg_text.append("".join(self._cell).strip())
            self._cell = None
        elif tag in ("td", "th") and self._table is not None and self._cell is not None:
            self._table[-1].append("".join(self._cell).strip())
            self._cell = None
        elif tag == "table":
            self._table = None
        elif tag == "p" and self._p:
            self.paragraphs[self._p] = "".join(self._cell).strip()
            self._p = self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def _svg(page: str) -> str:
    return re.search(r"<svg\b.*?</svg>", page, flags=re.S).group(0)


def test_front_page_shows_the_forest_plot_above_the_verdict_table():
    overhead = overhead_csv()
    page = rp.front_page({"overhead": overhead})
    parsed = _Page(page)
    ids = [i for _, i in parsed.order]
    assert ids.index(rf.FOREST_ID) < ids.index(rp.VERDICT_TABLE_ID)
    assert page.count("<svg") == 1 and "<?xml" not in page and "<!DOCTYPE" not in page
    assert page.isascii()  # docutils reads front.html in whatever encoding it guesses
    svg = _svg(page)
    # every id inside the inline SVG is its own (prefixed), and its stylesheet scoped to it
    assert all(i == rf.FOREST_ID or i.startswith(rf.FOREST_ID + "-")
               for i in re.findall(r'\bid="([^"]+)"', svg))
    assert not re.search(r"(?<![\w-])\*\{", svg.replace(f"#{rf.FOREST_ID} *{{", ""))
    # its row labels are the verdict table's rows, in order, as text
    labels = rp.forest_labels(overhead)
    ticks = [t.removesuffix("  [A/A]") for t in parsed.svg_text if t.removesuffix("  [A/A]")
             in labels]
    assert ticks == labels
    assert parsed.svg_text.count("[A/A]") == 0 and sum(
        t.endswith("[A/A]") for t in parsed.svg_text) == 2
    assert parsed.svg_text.count(rf.NO_CI) == 1
    head, *rows = parsed.tables[rp.VERDICT_TABLE_ID]
    assert [f"{r[0]} | {r[1]} | {r[2]}" for r in rows] == labels
    # the colours it draws are those of the verdicts present, as the table colours them
    present = {rf.VERDICT_COLORS[v] for v in rf.forest_rows(overhead)["verdict"]}
    drawn = {c for c in rf.VERDICT_COLORS.values() if c in svg}
    assert drawn == present
    for verdict, color in rf.VERDICT_COLORS.items():
        assert f"tr.ss-{verdict.replace(' ', '-')} .ss-verdict b {{ color: {color}; }}" in page
    # the same page twice: the same bytes (no date, no random ids)
    assert rp.front_page({"overhead": overhead}) == page


def test_front_page_without_comparisons_has_no_forest_plot():
    page = rp.front_page({"overhead": pd.DataFrame()})
    assert "<svg" not in page and "No container comparison" in page
    fig, drawn = rf.forest_figure(None)
    assert drawn.empty and list(drawn.columns) == rf.FOREST_COLUMNS


# --- LLM under load: what cannot be decided by design is one line -----------------------------

def load_overhead(requests: int, repeats: int = 3, seed: int = 0) -> pd.DataFrame:
    """llm_load_overhead.csv as scalesweep.analyse.load writes it (its own wording), for
    native and charliecloud with ``requests`` requests per level and run: a closed loop
    and two open-loop rates."""
    rng = np.random.default_rng(seed)
    rows = []
    for rep in range(1, repeats + 1):
        for runtime in ("native", "charliecloud"):
            levels = []
            for i, spec in enumerate([{"shape": "closed", "concurrency": 1},
                                      {"shape": "poisson", "rate": 1.0, "bisection": False},
                                      {"shape": "poisson", "rate": 4.0, "bisection": False}]):
                reqs = _requests(rng, requests, 0.05 * (i + 1), 0.01, tokens=8)
                levels.append({"level": i, **spec,
                               **level_summary(reqs, reqs[-1]["t_end"], "llama2-70b")})
            rows.append({"workload": "llm", "payload": "llm", "model_label": "m (synthetic weights)",
                         "arm": "charliecloud", "runtime": runtime, "nodes": 1, "gpus": 0,
                         "ranks": 1, "threads": 1, "repeat": rep, "block_id": f"b{rep}",
                         "disturbed": False, "shared_cores": False, "synthetic_model": True,
                         "start": f"2026-11-26T10:{rep:02d}:00+00:00",
                         "end": f"2026-11-26T10:{rep:02d}:30+00:00", "hosts": "h",
                         "path": f"p/{runtime}/{rep}",
                         "load_levels": json.dumps([compact_level(lv) for lv in levels])})
    return load_verdicts(load_runs(pd.DataFrame(rows)), campaign_settings({}))


def test_undecidable_load_comparisons_are_one_line_on_the_first_screen():
    """8 requests per run (the embedded default's size): no p90 or p99 can be bounded; those
    comparisons are one line, the throughput one stays a row of the table."""
    verdicts = load_overhead(requests=8)
    by_design = verdicts["verdict_text"].str.contains("8 requests per run cannot bound a p9")
    assert by_design.sum() == 12  # (p90, p99) x (TTFT, TPOT) x 3 levels: load.py's wording
    assert list(fl.undecidable(verdicts)) == list(by_design)
    page = rp.front_page({"llm_load_overhead": verdicts})
    parsed = _Page(page)
    line = parsed.paragraphs[fl.LOAD_UNDECIDABLE_ID]
    assert line.startswith("12 LLM-under-load comparisons cannot be decided by design with "
                           "8 requests per run: that many cannot bound a p90 or p99 (a 95% "
                           "interval needs at least 36 for a p90, 368 for a p99")
    assert "config/llm_load.yaml" in line and "llm_load_overhead.csv" in line
    assert "cannot bound" not in page.replace(line, "")  # no row says it again
    head, *rows = parsed.tables[fl.LOAD_TABLE_ID]
    decided = verdicts[~by_design]
    assert len(rows) == len(decided) >= 1
    assert [r[3] for r in rows] == list(decided["compared"])
    # the line comes before what remains of the table
    ids = [i for _, i in parsed.order]
    assert ids.index(fl.LOAD_UNDECIDABLE_ID) < ids.index(fl.LOAD_TABLE_ID)


def test_load_table_keeps_the_decidable_rows_and_drops_when_none_is():
    # 40 requests per run (config/llm_load.yaml): the p90s are decided, the p99s not
    verdicts = load_overhead(requests=40)
    by_design = fl.undecidable(verdicts)
    assert set(verdicts.loc[by_design, "metric"]) == {"ttft_p99_s", "tpot_p99_s"}
    parsed = _Page(rp.front_page({"llm_load_overhead": verdicts}))
    assert parsed.paragraphs[fl.LOAD_UNDECIDABLE_ID].startswith(
        f"{by_design.sum()} LLM-under-load comparisons cannot be decided by design with 40 "
        "requests per run: that many cannot bound a p99 (a 95% interval needs at least 368 "
        "for a p99")
    rows = parsed.tables[fl.LOAD_TABLE_ID][1:]
    assert len(rows) == (~by_design).sum() and not any("cannot bound" in " ".join(r)
                                                       for r in rows)
    # every comparison decidable: the full table, no line
    decidable = verdicts[~by_design]
    parsed = _Page(rp.front_page({"llm_load_overhead": decidable}))
    assert fl.LOAD_UNDECIDABLE_ID not in parsed.paragraphs
    assert len(parsed.tables[fl.LOAD_TABLE_ID]) - 1 == len(decidable)
    # none decidable: the line and no table
    parsed = _Page(rp.front_page({"llm_load_overhead": verdicts[by_design]}))
    assert fl.LOAD_TABLE_ID not in parsed.tables
    assert parsed.paragraphs[fl.LOAD_UNDECIDABLE_ID].startswith(
        f"{by_design.sum()} LLM-under-load comparisons")
    # an inconclusive verdict for another reason stays a row
    other = decidable.iloc[:1].assign(verdict="inconclusive",
                                      verdict_text="inconclusive: about 3 more repeats needed")
    assert not fl.undecidable(other).any()
    assert len(_Page(rp.front_page({"llm_load_overhead": other})).tables[fl.LOAD_TABLE_ID]) == 2


def test_an_equivalence_shows_the_90_percent_interval_it_was_decided_on():
    """The issue's LLM A/A: equivalent (TOST's 90% CI inside +-5%) while the 95% CI
    reaches past the band: the thick 90% bar is drawn for equivalent rows only."""
    table = pd.DataFrame([
        {**_row(verdict="equivalent", overhead=-0.4, low=-5.6, high=5.2),
         "equivalence_ci90_low_pct": -4.6, "equivalence_ci90_high_pct": 4.2, "margin_pct": 5.0},
        {**_row(verdict="inconclusive", overhead=1.0, low=-6.0, high=8.0),
         "equivalence_ci90_low_pct": -4.0, "equivalence_ci90_high_pct": 6.5, "margin_pct": 5.0}])
    fig, drawn = rf.forest_figure(table)
    assert drawn["ci90_low_pct"].iloc[0] == -4.6 and drawn["ci90_high_pct"].iloc[0] == 4.2
    assert drawn[["ci90_low_pct", "ci90_high_pct"]].iloc[1].isna().all()
    thick = [line for line in fig.axes[0].get_lines() if line.get_linewidth() >= 6]
    assert [list(line.get_xdata()) for line in thick] == [[-4.6, 4.2]]
