"""The report's first page (issue #27): the first screen of report.html.

- ``front_page``: what a person sees, without a click, when report.html opens (Snakemake
  shows the workflow's report text, workflow/report/workflow.rst, which embeds this page):
  the campaign's verdicts (overhead.csv, one row per workload, geometry and container
  runtime: the verdict sentence as overhead.csv and ``scalesweep overhead`` word it, the
  overhead with its 95% CI, the pairs, the runs and pairs left out, labels such as shared
  cores or synthetic weights) and, above it, the same rows as a forest plot (an inline SVG:
  ``scalesweep.report.figures.forest_figure``), scaling efficiency with its 95% CI per
  count (scaling.csv),
  one line per caveat that applies (``caveats``), and the campaign's facts (made.csv).
  LLM-under-load comparisons that cannot be decided by design (too few requests per run
  to bound the percentile) are one line there; llm_load_overhead.csv's page has them all.
(``scalesweep.report.table_page``: every summary table as a table to read.)

Pure: tables in, HTML text out (workflow/scripts/report_pages.py reads and writes the
files). Every number is the tables' own, only rounded for reading; a table page keeps each
cell's full value (its tooltip, and the CSV).
"""

from __future__ import annotations

import math
import re

import pandas as pd

from scalesweep.analyse.frame import truthy
from scalesweep.analyse.collect import SHARED_CORES_NOTE, SYNTHETIC_LABEL
from scalesweep.plan.sweep import REFERENCE
from scalesweep.report.cells import as_text, esc, missing, plural
from scalesweep.report.figures import (AA_COLOR, FOREST_ID, VERDICT_COLORS, figure_svg,
                                       forest_figure)
from scalesweep.report.significance import row_label

AA_RUNTIME = "native-aa"  # the A/A calibration (scalesweep.platform.runtimes.NativeAA)
SHOWN = 3  # rows named in a caveat before "and k more"
# fits.csv's status (scalesweep.analyse.fits.STATUSES) as a caveat says it
FIT_STATUS = {"too_few_points": "not fitted (too few points)", "failed": "not fitted (the fit "
              "failed)", "poor_fit": "fitted poorly"}
FRONT_CLASS = "scalesweep-front"  # the landing page's CSS (workflow/report/workflow.rst) finds it
VERDICT_TABLE_ID = "scalesweep-verdicts"
SCALING_TABLE_ID = "scalesweep-scaling"
CAVEATS_ID = "scalesweep-caveats"
FACTS_TABLE_ID = "scalesweep-campaign"


# --- small helpers ---------------------------------------------------------------------------

def _num(value) -> float:
    try:
        x = float(value)
    except (TypeError, ValueError):
        return math.nan
    return x


def _int(value) -> int:
    x = _num(value)
    return int(x) if math.isfinite(x) else 0


def _named(labels: list[str]) -> str:
    more = len(labels) - SHOWN
    return "; ".join(labels[:SHOWN]) + (f"; and {more} more" if more > 0 else "")


def _column(table: pd.DataFrame | None, col: str) -> pd.Series:
    if table is None or col not in table.columns:
        return pd.Series([], dtype=object) if table is None else \
            pd.Series([None] * len(table), index=table.index, dtype=object)
    return table[col]


def _rows(table: pd.DataFrame | None) -> int:
    return 0 if table is None else len(table)


def _geometry(row) -> str:
    """A sweep point as a person reads it: "1 node, 2 ranks x 1 thread" (+ GPUs)."""
    nodes, ranks, threads, gpus = (_int(row.get(c)) for c in ("nodes", "ranks", "threads",
                                                                "gpus"))
    text = f"{plural(nodes, 'node')}, {plural(ranks, 'rank')} x {plural(threads, 'thread')}"
    return text + (f", {gpus} GPU{'s' if gpus != 1 else ''}/node" if gpus else "")


def _pct(value, signed: bool = True) -> str:
    x = _num(value)
    if not math.isfinite(x):
        return ""
    return f"{x:+.1f}%" if signed else f"{x:.1f}%"


# --- the verdicts -------------------------------------------------------------------------------

def _labels(row) -> list[tuple[str, str]]:
    """(text, css class) of each label a verdict row carries."""
    labels = []
    if row.get("runtime") == AA_RUNTIME:
        labels.append(("A/A check", "aa"))
    if SYNTHETIC_LABEL in as_text(row.get("model_label")):
        labels.append((SYNTHETIC_LABEL, "warn"))
    if truthy(row.get("shared_cores")):
        labels.append(("shared cores: not physical", "warn"))
    note = as_text(row.get("note"))
    if note and note != SHARED_CORES_NOTE:
        labels.append((note, "warn"))
    return labels


LABEL_TIPS = {  # what a label means, on hovering it
    "A/A check": "native against an identical native runtime: it should read equivalent",
    SYNTHETIC_LABEL: "a model with random weights: its tokens/s measure the engine and the "
                     "runtime, not a real model",
}
LEFT_OUT = (("n_disturbed", "disturbed run", "disturbed runs"),
            ("n_pairs_split", "pair measured too far apart", "pairs measured too far apart"),
            ("n_pairs_machine_differs", "pair whose machine speed differed",
             "pairs whose machine speed differed"))


def _left_out(row) -> str:
    parts = [plural(_int(row.get(col)), one, many) for col, one, many in LEFT_OUT
             if _int(row.get(col))]
    return "; ".join(parts) or "none"


def _pairs(row) -> str:
    n = _int(row.get("n"))
    if truthy(row.get("paired")):
        pairing = as_text(row.get("pairing")) or "pairs"
        return f"{n} {pairing[:-1] if n == 1 and pairing.endswith('pairs') else pairing}"
    return (f"unpaired: {_int(row.get('n_native'))} native, {n} "
            f"{as_text(row.get('runtime'))} runs")


def _overhead_ci(row) -> str:
    overhead = _pct(row.get("overhead_pct"))
    low, high = _pct(row.get("overhead_ci95_low_pct")), _pct(row.get("overhead_ci95_high_pct"))
    if not overhead:
        return "not tested"
    return f"{overhead} [{low} .. {high}]" if low and high else f"{overhead} (no 95% CI)"


def _workload(row) -> str:
    """The workload, and its model for LLM inference (synthetic weights: a label)."""
    model = as_text(row.get("model")) or as_text(row.get("model_label"))
    return as_text(row.get("workload")) + (f" ({model})" if model else "")


def verdict_rows(overhead: pd.DataFrame | None) -> pd.DataFrame:
    """The first screen's verdict table, one row per overhead.csv row in its order: the
    cells as shown (workload, point, runtime, verdict, verdict sentence, overhead and CI,
    pairs, left out, labels)."""
    cols = ["workload", "point", "runtime", "verdict", "verdict_text", "overhead_ci", "pairs",
            "left_out", "labels"]
    if overhead is None or overhead.empty:
        return pd.DataFrame(columns=cols)
    rows = []
    for _, row in overhead.iterrows():
        rows.append({"workload": _workload(row), "point": _geometry(row),
                     "runtime": as_text(row.get("runtime")),
                     "verdict": as_text(row.get("verdict")) or "not tested",
                     "verdict_text": as_text(row.get("verdict_text")),
                     "overhead_ci": _overhead_ci(row), "pairs": _pairs(row),
                     "left_out": _left_out(row),
                     "labels": "; ".join(text for text, _ in _labels(row))})
    return pd.DataFrame(rows, columns=cols)


def _verdict_sentence(verdict: str, text: str) -> str:
    """The verdict sentence as overhead.csv has it, its verdict in bold."""
    if text.startswith(verdict):
        return f"<b>{esc(verdict)}</b>{esc(text[len(verdict):])}"
    return f"<b>{esc(verdict)}</b>" + (f": {esc(text)}" if text else "")


def _verdict_table(overhead: pd.DataFrame | None) -> str:
    shown = verdict_rows(overhead)
    if shown.empty:
        return ('<p class="ss-none">No container comparison: overhead.csv has no rows (a '
                'campaign of native runs only, or no point with both a native and a '
                'container run finished).</p>')
    margin = _num(_column(overhead, "margin_pct").dropna().iloc[0]) \
        if _column(overhead, "margin_pct").notna().any() else math.nan
    head = ("<tr><th>workload</th><th>point</th><th>runtime</th><th>verdict</th>"
            "<th>overhead, 95% CI</th><th>pairs</th><th>left out</th><th>labels</th></tr>")
    body = []
    for (_, row), (_, cells) in zip(overhead.iterrows(), shown.iterrows()):
        labels = "".join(f'<span class="ss-label ss-{cls}" title="'
                         f'{esc(LABEL_TIPS.get(text, text))}">{esc(text)}</span>'
                         for text, cls in _labels(row))
        body.append(
            f'<tr class="ss-{esc(cells["verdict"]).replace(" ", "-")}">'
            f'<td>{esc(cells["workload"])}</td><td class="ss-nowrap">{esc(cells["point"])}</td>'
            f'<td>{esc(cells["runtime"])}</td>'
            f'<td class="ss-verdict">{_verdict_sentence(cells["verdict"], cells["verdict_text"])}'
            '</td>'
            f'<td class="ss-n">{esc(cells["overhead_ci"])}</td>'
            f'<td class="ss-nowrap">{esc(cells["pairs"])}</td><td>{esc(cells["left_out"])}</td>'
            f'<td>{labels}</td></tr>')
    margin_text = f" within &plusmn;{margin:g}%" if math.isfinite(margin) else ""
    return (
        f'<table id="{VERDICT_TABLE_ID}" class="ss-table">'
        f'<caption>Container overhead against native at the same point (positive: the '
        f'container is slower), from overhead.csv; "equivalent"{margin_text} by two '
        f'one-sided tests, "slower" / "faster" where the 95% CI excludes 0.</caption>'
        f'<thead>{head}</thead><tbody>{"".join(body)}</tbody></table>')


# --- the verdicts as a picture ----------------------------------------------------------------

FOREST_CLASS = "ss-forest"


def forest_labels(overhead: pd.DataFrame | None) -> list[str]:
    """The forest plot's row labels: the verdict table's workload, point and runtime."""
    shown = verdict_rows(overhead)
    return [f"{r['workload']} | {r['point']} | {r['runtime']}" for _, r in shown.iterrows()]


def _forest(overhead: pd.DataFrame | None) -> str:
    """Every row of overhead.csv as a forest plot (inline SVG; nothing without rows)."""
    if overhead is None or overhead.empty:
        return ""
    fig, _ = forest_figure(overhead, forest_labels(overhead), AA_RUNTIME)
    return (f'<figure class="{FOREST_CLASS}">{figure_svg(fig, FOREST_ID)}<figcaption>Each row of '
            "the table below: the overhead (point) and its 95% CI (bar), coloured by its "
            "verdict; the shaded band is the equivalence margin, the line 0 (positive: the "
            "container is slower); squares and [A/A]: the A/A check, native against an "
            "identical native.</figcaption></figure>")


# --- LLM serving under load ----------------------------------------------------------------

LOAD_TABLE_ID = "scalesweep-load"
LOAD_UNDECIDABLE_ID = "scalesweep-load-undecidable"


# load.py's wording (scalesweep.analyse.load._too_few_requests) of a percentile its runs'
# requests cannot bound: inconclusive by design, whatever the runs measured
TOO_FEW_REQUESTS = re.compile(r"(\d+) requests per run cannot bound a (p\d+) \(at least (\d+)")


def undecidable(verdicts: pd.DataFrame | None) -> pd.Series:
    """Rows of llm_load_overhead.csv that cannot be decided by design: inconclusive because a
    run's requests cannot bound the percentile compared."""
    if verdicts is None or verdicts.empty:
        return pd.Series([], dtype=bool)
    text = _column(verdicts, "verdict_text").map(as_text)
    return (_column(verdicts, "verdict").map(as_text) == "inconclusive") & \
        text.map(lambda t: bool(TOO_FEW_REQUESTS.search(t)))


def _span(values: list[int]) -> str:
    return f"{min(values)}" if min(values) == max(values) else f"{min(values)}-{max(values)}"


def undecidable_line(verdicts: pd.DataFrame | None) -> str:
    """One line for every comparison ``undecidable`` marks ('' where none is): how many,
    with how many requests per run, which percentiles and how many requests each needs."""
    rows = verdicts[undecidable(verdicts)] if verdicts is not None else None
    if rows is None or rows.empty:
        return ""
    found = [TOO_FEW_REQUESTS.search(as_text(t)).groups() for t in rows["verdict_text"]]
    requests = [int(n) for n, _, _ in found]
    need = {q: int(k) for _, q, k in found}
    percentiles = sorted(need, key=lambda q: float(q[1:]))
    return (f"{plural(len(rows), 'LLM-under-load comparison')} cannot be decided by design "
            f"with {_span(requests)} requests per run: that many cannot bound a "
            + " or ".join(percentiles) + " (a 95% interval needs at least "
            + ", ".join(f"{need[q]} for a {q}" for q in percentiles)
            + "; load.requests, as config/llm_load.yaml sets it). Each is in the table "
            "llm_load_overhead.csv, inconclusive, with what its runs measured.")


def _load_table(verdicts: pd.DataFrame | None, load: pd.DataFrame | None) -> str:
    """The container's effect at each load level (llm_load_overhead.csv: its verdict
    sentences and overheads as the table has them), and the highest rate within the
    target per runtime (llm_load.csv); nothing where no run measured load levels. The
    comparisons that cannot be decided by design (``undecidable``) are one line
    (``undecidable_line``) instead of a row each; the table's own page lists them all."""
    if _rows(verdicts) == 0 and _rows(load) == 0:
        return ""
    parts = ["<h2>Serving under load (LLM)</h2>"]
    if _rows(verdicts):
        by_design = undecidable(verdicts)
        shown = verdicts[~by_design.to_numpy()]
        if by_design.any():
            parts.append(f'<p id="{LOAD_UNDECIDABLE_ID}" class="ss-none">'
                         f"{esc(undecidable_line(verdicts))}</p>")
        body = [
            f'<tr class="ss-{esc(str(row.get("verdict"))).replace(" ", "-")}">'
            f'<td>{esc(row.get("workload"))}</td><td>{esc(row.get("level_label"))}</td>'
            f'<td>{esc(row.get("runtime"))}</td><td>{esc(row.get("compared"))}</td>'
            f'<td class="ss-verdict">{_verdict_sentence(str(row.get("verdict")), str(row.get("verdict_text") or ""))}</td>'
            f'<td class="ss-n">{esc(_overhead_ci(row))}</td></tr>'
            for _, row in shown.iterrows()]
        if body:
            parts.append(
                f'<table id="{LOAD_TABLE_ID}" class="ss-table"><caption>The container against native '
                "at each load level, from llm_load_overhead.csv (positive: the container is slower: "
                "a higher latency, fewer tokens/s, a lower highest rate within the target).</caption>"
                "<thead><tr><th>workload</th><th>load level</th><th>runtime</th><th>compared</th>"
                f"<th>verdict</th><th>overhead, 95% CI</th></tr></thead><tbody>{''.join(body)}</tbody></table>")
    best = load[_column(load, "max_rate_rps").notna()] if _rows(load) else pd.DataFrame()
    if not best.empty:
        rows = best.drop_duplicates(["workload", "model_label", "runtime", "nodes", "gpus"])
        items = "".join(
            f"<li>{esc(r['workload'])} ({esc(r['model_label'])}), {esc(r['runtime'])}: "
            f"{_num(r['max_rate_rps']):.3g} requests/s ({esc(r.get('max_rate_bound') or '')}"
            + (f"; the lowest rate that missed: {_num(r['max_rate_missed_rps']):.3g}"
               if math.isfinite(_num(r.get("max_rate_missed_rps"))) else "") + ")</li>"
            for _, r in rows.iterrows())
        parts.append(f"<p>The highest request rate within the latency target (median over runs):</p><ul>{items}</ul>")
    return "".join(parts)


# --- scaling ---------------------------------------------------------------------------------

def _efficiency_cell(row) -> str:
    eff = _num(row.get("efficiency_pct"))
    if not math.isfinite(eff):
        return "no efficiency"
    n = _int(row.get("n"))
    if _num(row.get("count")) == _num(row.get("baseline_count")):
        return f"{eff:.0f}% (baseline: {_num(row.get('time_s')):.4g} s, n={n})"
    low, high = (_num(row.get(c)) for c in ("efficiency_ci95_low_pct",
                                            "efficiency_ci95_high_pct"))
    ci = f" [{low:.1f} .. {high:.1f}]" if math.isfinite(low) and math.isfinite(high) else \
        " (no 95% CI)"
    flag = as_text(row.get("flag")).replace(";", ", ").replace("_", " ")
    return f"{eff:.1f}%{ci}, n={n}" + (f" ({flag})" if flag else "")


def _scaling_table(scaling: pd.DataFrame | None) -> str:
    if scaling is None or scaling.empty or "efficiency_pct" not in scaling.columns:
        return ('<p class="ss-none">No scaling series: scaling.csv has no rows (no training '
                'workload measured at several counts).</p>')
    series = ["workload", "runtime", "threads"]
    counts = sorted({_int(c) for c in scaling["count"]})
    kinds = sorted({as_text(k) for k in _column(scaling, "scaling") if as_text(k)})
    head = ("<tr><th>workload</th><th>runtime</th><th>threads</th>"
            + "".join(f"<th>count {c}</th>" for c in counts) + "<th>labels</th></tr>")
    body = []
    for key, group in scaling.groupby(series, sort=False, dropna=False):
        by_count = {_int(r["count"]): r for _, r in group.iterrows()}
        labels = []
        if any(truthy(v) for v in group.get("shared_cores", [])):
            labels.append('<span class="ss-label ss-warn">shared cores: not physical</span>')
        cells = "".join(
            f'<td class="ss-n">{esc(_efficiency_cell(by_count[c]))}</td>' if c in by_count
            else "<td></td>" for c in counts)
        body.append(f"<tr><td>{esc(key[0])}</td><td>{esc(key[1])}</td>"
                    f"<td>{_int(key[2])}</td>{cells}<td>{''.join(labels)}</td></tr>")
    kind = f" ({', '.join(kinds)} scaling)" if kinds else ""
    return (f'<table id="{SCALING_TABLE_ID}" class="ss-table"><caption>Scaling efficiency'
            f'{kind} per count with its 95% CI and repeats, from scaling.csv: linear time / '
            f'measured time x 100, against the baseline count.</caption>'
            f'<thead>{head}</thead><tbody>{"".join(body)}</tbody></table>')


# --- caveats ---------------------------------------------------------------------------------

def caveats(tables: dict[str, pd.DataFrame | None]) -> list[str]:
    """One line per caveat that applies to the campaign, from its summary tables (keys as
    the files: runs, overhead, scaling, llm, missing, fits, rules, significance); each line
    says where to read more. Empty where none applies."""
    runs, overhead, scaling = tables.get("runs"), tables.get("overhead"), tables.get("scaling")
    llm, missing, fits = tables.get("llm"), tables.get("missing"), tables.get("fits")
    rules, significance = tables.get("rules"), tables.get("significance")
    lines = []

    if _rows(missing):
        states = _column(missing, "state").fillna("missing").astype(str)
        counts = ", ".join(f"{n} {s}" for s, n in states.value_counts().items())
        named = [f"{as_text(r.get('path'))}" + (f" ({as_text(r.get('reason'))})"
                                              if as_text(r.get("reason")) else "")
                 for _, r in missing.iterrows()]
        lines.append(f"{plural(len(missing), 'requested point')} not finished ({counts}): "
                     f"{_named(named)}. The comparisons and scaling rows they belong to rest "
                     "on fewer repeats or are absent (Sweep completeness, missing.csv).")

    disturbed = int(_column(runs, "disturbed").map(truthy).sum()) if _rows(runs) else 0
    if disturbed:
        lines.append(f"{disturbed} of {_rows(runs)} runs were disturbed by other activity "
                     "during their measurement: kept, left out of every statistic (runs.csv: "
                     "disturbed, disturbed_reason).")

    shared = [name for name, t in (("overhead.csv", overhead), ("scaling.csv", scaling),
                                   ("llm.csv", llm))
              if _rows(t) and _column(t, "shared_cores").map(truthy).any()]
    if shared:
        lines.append(f"Measured on shared cores ({', '.join(shared)}): {SHARED_CORES_NOTE}.")

    synthetic = [t[_column(t, "model_label").map(as_text).str.contains(SYNTHETIC_LABEL,
                                                                      regex=False)]
                 for t in (overhead, llm) if _rows(t)]
    models = sorted({as_text(m) for t in synthetic for m in _column(t, "model")})
    if any(len(t) for t in synthetic):
        lines.append(f"LLM inference on a model with {SYNTHETIC_LABEL} "
                     f"({', '.join(models) or 'unnamed'}): its tokens/s and overhead measure "
                     "the engine and the runtime, not a real model.")

    if _rows(overhead):
        overhead = overhead.reset_index(drop=True)
        verdict = _column(overhead, "verdict").astype(str)
        runtime = _column(overhead, "runtime").astype(str)
        is_aa = runtime == AA_RUNTIME
        differs = overhead[is_aa & verdict.isin(["slower", "faster"])]
        if len(differs):
            named = [f"{row_label(r)}: {r['verdict']}" for _, r in differs.iterrows()]
            lines.append(f"The A/A check, native against an identical native, reads slower or "
                         f"faster where nothing differs ({_named(named)}): differences of that "
                         "size are within this machine's noise; weigh the other verdicts "
                         "with it.")
        unsure = overhead[is_aa & (verdict == "inconclusive")]
        if len(unsure):
            lines.append(f"The A/A check, native against an identical native, is inconclusive "
                         f"({_named([row_label(r) for _, r in unsure.iterrows()])}): at these "
                         "repeats the noise is too large to show that identical runs read "
                         "\"equivalent\"; weigh the other verdicts with it.")
        open_ = overhead[(verdict == "inconclusive") & ~is_aa]
        if len(open_):
            needed = [_int(n) for n in _column(open_, "repeats_needed") if _int(n)]
            more = (f" about {min(needed)}" + (f"-{max(needed)}" if max(needed) != min(needed)
                                                else "") + " more repeats each would settle "
                    "them (repeats_needed)") if needed else ""
            named = _named([row_label(r) for _, r in open_.iterrows()])
            lines.append(f"{len(open_)} of {int((~is_aa).sum())} container "
                         f"comparisons are inconclusive: {named}{';' + more if more else ''}.")
        untested = overhead[_column(overhead, "overhead_ci95_low_pct").map(_num).map(
            lambda x: not math.isfinite(x))] if "overhead_ci95_low_pct" in overhead else []
        if len(untested):
            lines.append(f"{plural(len(untested), 'comparison')} without a 95% CI (fewer than "
                         "two valid pairs or repeats on a side): "
                         f"{_named([row_label(r) for _, r in untested.iterrows()])}.")
        apart = sum(_int(v) for v in _column(overhead, "n_pairs_split"))
        differs = sum(_int(v) for v in _column(overhead, "n_pairs_machine_differs"))
        if apart or differs:
            lines.append(f"Pairs left out of the verdicts: {apart} measured too far apart, "
                         f"{differs} whose machine-speed probes differed (overhead.csv: "
                         "n_pairs_split, n_pairs_machine_differs).")

    if _rows(significance) and "claims_not_bh_significant" in significance.columns:
        for _, row in significance.iterrows():
            if as_text(row.get("claims_not_bh_significant")):
                lines.append(f"Many comparisons ({as_text(row.get('family'))}): "
                             f"{as_text(row.get('claims_not_bh_significant'))} not significant "
                             "after Benjamini-Hochberg over the campaign (significance.csv).")

    if _rows(scaling) and "flag" in scaling.columns:
        flagged = scaling[_column(scaling, "flag").map(as_text) != ""]
        if len(flagged):
            named = [f"{row_label(r)}: {as_text(r['flag']).replace(';', ', ')}"
                     for _, r in flagged.iterrows()]
            lines.append(f"Scaling rows flagged (high variance, a single repeat or "
                         f"superlinear): {_named(named)} (scaling.csv: flag).")

    if _rows(fits) and "status" in fits.columns:
        for status, rows in fits[_column(fits, "status").map(as_text) != "ok"].groupby(
                "status", sort=False):
            series = list(dict.fromkeys(
                " ".join(as_text(r.get(c)) for c in ("workload", "runtime")) for _, r in
                rows.iterrows()))
            lines.append(f"Scaling laws {FIT_STATUS.get(status, status)} for "
                         f"{plural(len(series), 'series', 'series')} ({_named(series)}), e.g. "
                         f"{as_text(rows.iloc[0].get('model'))}: {as_text(rows.iloc[0].get('reason'))} "
                         "(fits.csv: status, reason).")

    if _rows(runs) and "git_commit" in runs.columns:
        commits = runs["git_commit"].dropna().astype(str).unique()
        if len(commits) > 1:
            lines.append(f"The runs were measured with {len(commits)} git commits of the "
                         "workflow (made.csv; provenance.csv per run).")

    if _rows(rules) and {"rule", "passed"} <= set(rules.columns):
        for _, row in rules[rules["passed"].astype(str) == "no"].iterrows():
            lines.append(f"Benchmarking rule not met: {as_text(row['rule'])} "
                         f"({as_text(row.get('evidence'))}; rules.csv).")
    return lines


def _caveats(lines: list[str]) -> str:
    if not lines:
        return (f'<p id="{CAVEATS_ID}" class="ss-none">No caveat applies: every requested point '
                'finished, no run was disturbed, every comparison has a verdict and every '
                'benchmarking rule is met.</p>')
    return (f'<ul id="{CAVEATS_ID}" class="ss-caveats">'
            + "".join(f"<li>{esc(line)}</li>" for line in lines) + "</ul>")


# --- the campaign's facts ----------------------------------------------------------------------

def _facts(made: pd.DataFrame | None) -> str:
    if made is None or made.empty or not {"item", "value"} <= set(made.columns):
        return '<p class="ss-none">made.csv has no rows.</p>'
    rows = "".join(f"<tr><th>{esc(as_text(r['item']))}</th><td>{esc(as_text(r['value']))}</td></tr>"
                   for _, r in made.iterrows())
    return (f'<table id="{FACTS_TABLE_ID}" class="ss-table ss-facts"><caption>What this report '
            'was made from (made.csv)</caption><tbody>' + rows + "</tbody></table>")


FRONT_STYLE = f"""
.{FRONT_CLASS} {{ font-size: 0.85rem; line-height: 1.35; color: #1e293b; }}
.{FRONT_CLASS} h2 {{ font-size: 1.05rem; margin: 1.1em 0 0.35em; }}
.{FRONT_CLASS} h2:first-child {{ margin-top: 0; }}
.{FRONT_CLASS} .ss-table {{ border-collapse: collapse; margin: 0 0 0.5em; width: auto; }}
.{FRONT_CLASS} .ss-table caption {{ caption-side: top; text-align: left; color: #475569;
  font-size: 0.8rem; padding: 0 0 0.3em; }}
.{FRONT_CLASS} .ss-table th, .{FRONT_CLASS} .ss-table td {{ border-bottom: 1px solid #e2e8f0;
  padding: 0.25em 0.6em 0.25em 0; vertical-align: top; text-align: left; }}
.{FRONT_CLASS} .ss-table thead th {{ border-bottom: 2px solid #94a3b8; white-space: nowrap; }}
.{FRONT_CLASS} .ss-n {{ white-space: nowrap; font-variant-numeric: tabular-nums; }}
.{FRONT_CLASS} .ss-nowrap {{ white-space: nowrap; }}
.{FRONT_CLASS} .ss-verdict {{ min-width: 22em; }}
{{verdict_colors}}
.{FRONT_CLASS} .ss-label {{ display: inline-block; border-radius: 0.3em; padding: 0 0.35em;
  margin: 0 0.2em 0.15em 0; font-size: 0.75rem; background: #e2e8f0; white-space: nowrap; }}
.{FRONT_CLASS} .ss-warn {{ background: #fee2e2; color: #b91c1c; }}
.{FRONT_CLASS} .ss-aa {{ background: #e0e7ff; color: {AA_COLOR}; }}
.{FRONT_CLASS} .ss-caveats {{ margin: 0 0 0.5em; padding-left: 1.2em; list-style: disc; }}
.{FRONT_CLASS} .ss-caveats li {{ margin: 0.1em 0; }}
.{FRONT_CLASS} .ss-facts th {{ font-weight: 600; padding-right: 1em; max-width: 18em; }}
.{FRONT_CLASS} .ss-none {{ color: #475569; }}
.{FRONT_CLASS} .{FOREST_CLASS} {{ margin: 0 0 0.6em; }}
.{FRONT_CLASS} .{FOREST_CLASS} svg {{ display: block; max-width: 100%; height: auto; }}
.{FRONT_CLASS} .{FOREST_CLASS} figcaption {{ color: #475569; font-size: 0.8rem; }}
""".replace("{verdict_colors}", "".join(  # the forest plot's colour of each verdict
    f".{FRONT_CLASS} tr.ss-{verdict.replace(' ', '-')} .ss-verdict b {{ color: {color}; }}\n"
    for verdict, color in VERDICT_COLORS.items()))


def front_page(tables: dict[str, pd.DataFrame | None]) -> str:
    """The first screen of report.html (an HTML fragment: workflow.rst embeds it, and it is
    a report item of its own): the verdicts as a forest plot and as a table, caveats,
    scaling efficiency, the campaign's facts.
    ``tables``: the summary tables by file name (overhead, scaling, made, and those
    ``caveats`` reads)."""
    return (
        f'<div class="{FRONT_CLASS}"><style>{FRONT_STYLE}</style>'
        "<h2>What the containers cost: the verdicts</h2>"
        + _forest(tables.get("overhead"))
        + _verdict_table(tables.get("overhead"))
        + _load_table(tables.get("llm_load_overhead"), tables.get("llm_load"))
        + "<h2>Caveats</h2>" + _caveats(caveats(tables))
        + "<h2>How it scales</h2>" + _scaling_table(tables.get("scaling"))
        + "<h2>The campaign</h2>" + _facts(tables.get("made"))
        + "</div>\n")
