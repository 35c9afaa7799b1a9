"""The first screen's LLM serving under load (issue #39): the container against native
at each load level (llm_load_overhead.csv, scalesweep.analyse.load) and the highest rate
within the target per runtime (llm_load.csv), placed by scalesweep.report.pages.front_page.

A comparison that cannot be decided by design, a percentile its runs' requests cannot
bound (the embedded default's 8 requests per run and a p90 or p99), is one line
(``undecidable_line``), not a row each: the table's own page (llm_load_overhead.html)
lists every comparison. Pure: tables in, HTML text out.
"""

from __future__ import annotations

import math
import re

import pandas as pd

from scalesweep.plan.sweep import value_span
from scalesweep.report.cells import (as_text, column, esc, n_rows, number, overhead_ci,
                                     plural, verdict_sentence)

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
    text = column(verdicts, "verdict_text").map(as_text)
    return (column(verdicts, "verdict").map(as_text) == "inconclusive") & \
        text.map(lambda t: bool(TOO_FEW_REQUESTS.search(t)))


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
            f"with {value_span(requests)} requests per run: that many cannot bound a "
            + " or ".join(percentiles) + " (a 95% interval needs at least "
            + ", ".join(f"{need[q]} for a {q}" for q in percentiles)
            + "; load.requests, as config/llm_load.yaml sets it). Each is in the table "
            "llm_load_overhead.csv, inconclusive, with what its runs measured.")


def load_section(verdicts: pd.DataFrame | None, load: pd.DataFrame | None) -> str:
    """The container's effect at each load level (llm_load_overhead.csv: its verdict
    sentences and overheads as the table has them), and the highest rate within the
    target per runtime (llm_load.csv); nothing where no run measured load levels. The
    comparisons that cannot be decided by design (``undecidable``) are one line
    (``undecidable_line``) instead of a row each; the table's own page lists them all."""
    if n_rows(verdicts) == 0 and n_rows(load) == 0:
        return ""
    parts = ["<h2>Serving under load (LLM)</h2>"]
    if n_rows(verdicts):
        by_design = undecidable(verdicts)
        shown = verdicts[~by_design.to_numpy()]
        if by_design.any():
            parts.append(f'<p id="{LOAD_UNDECIDABLE_ID}" class="ss-none">'
                         f"{esc(undecidable_line(verdicts))}</p>")
        body = [
            f'<tr class="ss-{esc(str(row.get("verdict"))).replace(" ", "-")}">'
            f'<td>{esc(row.get("workload"))}</td><td>{esc(row.get("level_label"))}</td>'
            f'<td>{esc(row.get("runtime"))}</td><td>{esc(row.get("compared"))}</td>'
            f'<td class="ss-verdict">{verdict_sentence(str(row.get("verdict")), str(row.get("verdict_text") or ""))}</td>'
            f'<td class="ss-n">{esc(overhead_ci(row))}</td></tr>'
            for _, row in shown.iterrows()]
        if body:
            parts.append(
                f'<table id="{LOAD_TABLE_ID}" class="ss-table"><caption>The container against native '
                "at each load level, from llm_load_overhead.csv (positive: the container is slower: "
                "a higher latency, fewer tokens/s, a lower highest rate within the target).</caption>"
                "<thead><tr><th>workload</th><th>load level</th><th>runtime</th><th>compared</th>"
                f"<th>verdict</th><th>overhead, 95% CI</th></tr></thead><tbody>{''.join(body)}</tbody></table>")
    best = load[column(load, "max_rate_rps").notna()] if n_rows(load) else pd.DataFrame()
    if not best.empty:
        rows = best.drop_duplicates(["workload", "model_label", "runtime", "nodes", "gpus"])
        items = "".join(
            f"<li>{esc(r['workload'])} ({esc(r['model_label'])}), {esc(r['runtime'])}: "
            f"{number(r['max_rate_rps']):.3g} requests/s ({esc(r.get('max_rate_bound') or '')}"
            + (f"; the lowest rate that missed: {number(r['max_rate_missed_rps']):.3g}"
               if math.isfinite(number(r.get("max_rate_missed_rps"))) else "") + ")</li>"
            for _, r in rows.iterrows())
        parts.append(f"<p>The highest request rate within the latency target (median over runs):</p><ul>{items}</ul>")
    return "".join(parts)
