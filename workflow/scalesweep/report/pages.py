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
  Where the campaign served an LLM under load, its verdicts follow the table
  (``scalesweep.report.front_load``: those that cannot be decided by design, too few
  requests per run to bound the percentile, as one line).
(``scalesweep.report.table_page``: every summary table as a table to read.)

Pure: tables in, HTML text out (workflow/scripts/report_pages.py reads and writes the
files). Every number is the tables' own, only rounded for reading; a table page keeps each
cell's full value (its tooltip, and the CSV).
"""

from __future__ import annotations

import math

import pandas as pd

from scalesweep.analyse.frame import truthy
from scalesweep.analyse.collect import SHARED_CORES_NOTE, SYNTHETIC_LABEL
from scalesweep.plan.sweep import REFERENCE
from scalesweep.report.cells import (as_text, column, esc, missing, n_rows, number,
                                     overhead_ci, pct, plural, verdict_sentence)
from scalesweep.report.front_load import load_section
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

def _int(value) -> int:
    x = number(value)
    return int(x) if math.isfinite(x) else 0


def _named(labels: list[str]) -> str:
    more = len(labels) - SHOWN
    return "; ".join(labels[:SHOWN]) + (f"; and {more} more" if more > 0 else "")


def _geometry(row) -> str:
    """A sweep point as a person reads it: "1 node, 2 ranks x 1 thread" (+ GPUs)."""
    nodes, ranks, threads, gpus = (_int(row.get(c)) for c in ("nodes", "ranks", "threads",
                                                                "gpus"))
    text = f"{plural(nodes, 'node')}, {plural(ranks, 'rank')} x {plural(threads, 'thread')}"
    return text + (f", {gpus} GPU{'s' if gpus != 1 else ''}/node" if gpus else "")


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
                     "overhead_ci": overhead_ci(row), "pairs": _pairs(row),
                     "left_out": _left_out(row),
                     "labels": "; ".join(text for text, _ in _labels(row))})
    return pd.DataFrame(rows, columns=cols)


def _verdict_table(overhead: pd.DataFrame | None) -> str:
    shown = verdict_rows(overhead)
    if shown.empty:
        return ('<p class="ss-none">No container comparison: overhead.csv has no rows (a '
                'campaign of native runs only, or no point with both a native and a '
                'container run finished).</p>')
    margin = number(column(overhead, "margin_pct").dropna().iloc[0]) \
        if column(overhead, "margin_pct").notna().any() else math.nan
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
            f'<td class="ss-verdict">{verdict_sentence(cells["verdict"], cells["verdict_text"])}'
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


def _why(attribution: pd.DataFrame | None) -> str:
    """Why the container differs, one sentence per comparison and phase whose isolation and
    stack a control image measured (attribution.csv: the steady state first, then the
    start-up); nothing where the campaign ran no control image."""
    if attribution is None or attribution.empty:
        return ""
    shown = attribution[column(attribution, "phase").isin(["steady state", "startup"])]
    if shown.empty:
        return ""
    items = "".join(
        f"<li>{esc(_workload(row))} {esc(_geometry(row))} {esc(as_text(row.get('runtime')))}"
        f" ({esc(as_text(row.get('phase')))}): {esc(as_text(row.get('explanation')))}</li>"
        for _, row in shown.iterrows())
    return ("<h2>Why: isolation vs software stack</h2><p>Against a control image (the "
            "host's own stack in the same container), from attribution.csv; the stack's "
            "verdicts over the campaign's stack components. Which item of the stack "
            "carries it is not named here.</p><ul>" + items + "</ul>")


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
    fig, drawn = forest_figure(overhead, forest_labels(overhead), AA_RUNTIME)
    aa = ("; squares and [A/A]: the A/A check, native against an identical native"
          if drawn["aa"].any() else "")
    return (f'<figure class="{FOREST_CLASS}">{figure_svg(fig, FOREST_ID)}<figcaption>Each row of '
            "the table below: the overhead (point) and its 95% CI (bar), coloured by its "
            "verdict; the shaded band is the equivalence margin, the line 0 (positive: the "
            f"container is slower){aa}.</figcaption></figure>")


# --- scaling ---------------------------------------------------------------------------------

def _efficiency_cell(row) -> str:
    eff = number(row.get("efficiency_pct"))
    if not math.isfinite(eff):
        return "no efficiency"
    n = _int(row.get("n"))
    if number(row.get("count")) == number(row.get("baseline_count")):
        return f"{eff:.0f}% (baseline: {number(row.get('time_s')):.4g} s, n={n})"
    low, high = (number(row.get(c)) for c in ("efficiency_ci95_low_pct",
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
    kinds = sorted({as_text(k) for k in column(scaling, "scaling") if as_text(k)})
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

    if n_rows(missing):
        states = column(missing, "state").fillna("missing").astype(str)
        counts = ", ".join(f"{n} {s}" for s, n in states.value_counts().items())
        named = [f"{as_text(r.get('path'))}" + (f" ({as_text(r.get('reason'))})"
                                              if as_text(r.get("reason")) else "")
                 for _, r in missing.iterrows()]
        lines.append(f"{plural(len(missing), 'requested point')} not finished ({counts}): "
                     f"{_named(named)}. The comparisons and scaling rows they belong to rest "
                     "on fewer repeats or are absent (Sweep completeness, missing.csv).")

    disturbed = int(column(runs, "disturbed").map(truthy).sum()) if n_rows(runs) else 0
    if disturbed:
        lines.append(f"{disturbed} of {n_rows(runs)} runs were disturbed by other activity "
                     "during their measurement: kept, left out of every statistic (runs.csv: "
                     "disturbed, disturbed_reason).")

    shared = [name for name, t in (("overhead.csv", overhead), ("scaling.csv", scaling),
                                   ("llm.csv", llm))
              if n_rows(t) and column(t, "shared_cores").map(truthy).any()]
    if shared:
        lines.append(f"Measured on shared cores ({', '.join(shared)}): {SHARED_CORES_NOTE}.")

    synthetic = [t[column(t, "model_label").map(as_text).str.contains(SYNTHETIC_LABEL,
                                                                      regex=False)]
                 for t in (overhead, llm) if n_rows(t)]
    models = sorted({as_text(m) for t in synthetic for m in column(t, "model")})
    if any(len(t) for t in synthetic):
        lines.append(f"LLM inference on a model with {SYNTHETIC_LABEL} "
                     f"({', '.join(models) or 'unnamed'}): its tokens/s and overhead measure "
                     "the engine and the runtime, not a real model.")

    if n_rows(overhead):
        overhead = overhead.reset_index(drop=True)
        verdict = column(overhead, "verdict").astype(str)
        runtime = column(overhead, "runtime").astype(str)
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
            needed = [_int(n) for n in column(open_, "repeats_needed") if _int(n)]
            more = (f" about {min(needed)}" + (f"-{max(needed)}" if max(needed) != min(needed)
                                                else "") + " more repeats each would settle "
                    "them (repeats_needed)") if needed else ""
            named = _named([row_label(r) for _, r in open_.iterrows()])
            lines.append(f"{len(open_)} of {int((~is_aa).sum())} container "
                         f"comparisons are inconclusive: {named}{';' + more if more else ''}.")
        untested = overhead[column(overhead, "overhead_ci95_low_pct").map(number).map(
            lambda x: not math.isfinite(x))] if "overhead_ci95_low_pct" in overhead else []
        if len(untested):
            lines.append(f"{plural(len(untested), 'comparison')} without a 95% CI (fewer than "
                         "two valid pairs or repeats on a side): "
                         f"{_named([row_label(r) for _, r in untested.iterrows()])}.")
        apart = sum(_int(v) for v in column(overhead, "n_pairs_split"))
        differs = sum(_int(v) for v in column(overhead, "n_pairs_machine_differs"))
        if apart or differs:
            lines.append(f"Pairs left out of the verdicts: {apart} measured too far apart, "
                         f"{differs} whose machine-speed probes differed (overhead.csv: "
                         "n_pairs_split, n_pairs_machine_differs).")

    if n_rows(significance) and "claims_not_bh_significant" in significance.columns:
        for _, row in significance.iterrows():
            if as_text(row.get("claims_not_bh_significant")):
                lines.append(f"Many comparisons ({as_text(row.get('family'))}): "
                             f"{as_text(row.get('claims_not_bh_significant'))} significant "
                             "alone, not after Benjamini-Hochberg over the campaign: "
                             "inconclusive (significance.csv).")

    if n_rows(scaling) and "flag" in scaling.columns:
        flagged = scaling[column(scaling, "flag").map(as_text) != ""]
        if len(flagged):
            named = [f"{row_label(r)}: {as_text(r['flag']).replace(';', ', ')}"
                     for _, r in flagged.iterrows()]
            lines.append(f"Scaling rows flagged (high variance, a single repeat or "
                         f"superlinear): {_named(named)} (scaling.csv: flag).")

    if n_rows(fits) and "status" in fits.columns:
        for status, rows in fits[column(fits, "status").map(as_text) != "ok"].groupby(
                "status", sort=False):
            series = list(dict.fromkeys(
                " ".join(as_text(r.get(c)) for c in ("workload", "runtime")) for _, r in
                rows.iterrows()))
            lines.append(f"Scaling laws {FIT_STATUS.get(status, status)} for "
                         f"{plural(len(series), 'series', 'series')} ({_named(series)}), e.g. "
                         f"{as_text(rows.iloc[0].get('model'))}: {as_text(rows.iloc[0].get('reason'))} "
                         "(fits.csv: status, reason).")

    if n_rows(runs) and "git_commit" in runs.columns:
        commits = runs["git_commit"].dropna().astype(str).unique()
        if len(commits) > 1:
            lines.append(f"The runs were measured with {len(commits)} git commits of the "
                         "workflow (made.csv; provenance.csv per run).")

    if n_rows(rules) and {"rule", "passed"} <= set(rules.columns):
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
        + _why(tables.get("attribution"))
        + load_section(tables.get("llm_load_overhead"), tables.get("llm_load"))
        + "<h2>Caveats</h2>" + _caveats(caveats(tables))
        + "<h2>How it scales</h2>" + _scaling_table(tables.get("scaling"))
        + "<h2>The campaign</h2>" + _facts(tables.get("made"))
        + "</div>\n")
