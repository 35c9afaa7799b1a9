"""Every summary table as a table to read (issue #27): ``table_page`` turns one CSV of
results/summary/ into a sortable HTML table, shown in the report beside the CSV, which stays
downloadable. Pure: a table in, HTML text out (workflow/scripts/report_pages.py reads and
writes the files); a page keeps each cell's full value (its tooltip, and the CSV).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from scalesweep.report.cells import as_text, esc, missing, plural

# A table page's cells stay on one line (a row per line, to scan), but for text longer than
# this (a verdict sentence, a rule's evidence), which wraps in a column of its own width.
LONG_TEXT = 40
# A table page with more columns than this lists the columns that hold one value in every
# row above the table, once, and shows only the columns that differ (provenance, runs).
WIDE = 12
# A table page shows at most this many rows, in the CSV's order, and says how many it
# leaves out: a page of all of a 100,000-run campaign's runs.csv was 168 MiB of HTML in the
# self-contained report (and a browser's sort over it stalls). The CSV beside the page
# holds every row.
MAX_ROWS = 5000


PAGE_STYLE = """
body { font: 13px/1.35 system-ui, -apple-system, "Segoe UI", sans-serif; color: #1e293b;
  margin: 0.8em; background: #fff; }
h1 { font-size: 1.1rem; margin: 0 0 0.3em; }
p, ul { margin: 0 0 0.6em; color: #334155; }
.common { columns: 3 22em; padding-left: 1.2em; }
table { border-collapse: collapse; }
th, td { border-bottom: 1px solid #e2e8f0; padding: 0.2em 0.7em 0.2em 0; text-align: left;
  vertical-align: top; white-space: nowrap; }
td.text { white-space: normal; min-width: 24em; max-width: 40em; }
thead th { position: sticky; top: 0; background: #f1f5f9; border-bottom: 2px solid #94a3b8;
  cursor: pointer; white-space: nowrap; user-select: none; }
thead th[aria-sort="ascending"]::after { content: " \\25B2"; }
thead th[aria-sort="descending"]::after { content: " \\25BC"; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
tbody tr:nth-child(even) { background: #f8fafc; }
"""

# Click a column's header to sort by it (again: the other way); numbers as numbers.
SORT_SCRIPT = """
document.querySelectorAll("table.sortable").forEach(function (table) {
  var heads = table.tHead.rows[0].cells;
  Array.prototype.forEach.call(heads, function (th, col) {
    th.addEventListener("click", function () {
      var up = th.getAttribute("aria-sort") !== "ascending";
      Array.prototype.forEach.call(heads, function (h) { h.removeAttribute("aria-sort"); });
      th.setAttribute("aria-sort", up ? "ascending" : "descending");
      var rows = Array.prototype.slice.call(table.tBodies[0].rows);
      function key(row) {
        var cell = row.cells[col], v = cell.getAttribute("data-v");
        return v === null ? cell.textContent : v;
      }
      var numeric = rows.every(function (r) { var k = key(r); return k === "" || !isNaN(k); });
      rows.sort(function (a, b) {
        var x = key(a), y = key(b), c;
        if (numeric) {
          if (x === "" || y === "") { c = (x === "") - (y === ""); return c; }
          c = Number(x) - Number(y);
        } else { c = x.localeCompare(y); }
        return up ? c : -c;
      });
      rows.forEach(function (r) { table.tBodies[0].appendChild(r); });
    });
  });
});
"""


def _cell(value) -> str:
    """A table cell: numbers right-aligned, rounded to 4 significant digits for reading,
    the full value in the tooltip and as the sort key."""
    if missing(value):
        return "<td></td>"
    if isinstance(value, (bool, np.bool_)):
        return f"<td>{value}</td>"
    if isinstance(value, (int, np.integer)):
        return f'<td class="num" data-v="{value}">{value}</td>'
    if isinstance(value, (float, np.floating)):
        full = repr(float(value))
        shown = f"{value:.4g}"
        title = f' title="{full}"' if shown != full else ""
        return f'<td class="num" data-v="{full}"{title}>{shown}</td>'
    text = str(value)
    wraps = ' class="text"' if len(text) > LONG_TEXT else ""
    return f"<td{wraps}>{esc(text)}</td>"


def table_page(table: pd.DataFrame | None, file_name: str, title: str,
               max_rows: int = MAX_ROWS) -> str:
    """``table`` (a summary CSV read back) as a standalone HTML page: a heading naming the
    file, and a table whose columns sort on a click. With more than ``WIDE`` columns and
    several rows, the columns holding one value in every row are listed once above it (of
    every row). At most ``max_rows`` rows, the first, saying so where there are more."""
    head = f"<h1>{esc(title)} <small>({esc(file_name)})</small></h1>"
    if table is None or len(table.columns) == 0:
        body = f"<p>{esc(file_name)} is empty (no columns, no rows).</p>"
    else:
        shown = table
        common = []
        if len(table.columns) > WIDE and len(table) > 1:
            same = [c for c in table.columns if table[c].nunique(dropna=False) == 1]
            common = [(c, table[c].iloc[0]) for c in same]
            shown = table.drop(columns=same)
        listed = ""
        if common:
            items = "".join(f"<li><b>{esc(c)}</b>: {esc(as_text(v)) or '(empty)'}</li>"
                            for c, v in common)
            listed = (f"<p>The same in every row ({len(common)} of {len(table.columns)} "
                      f"columns):</p><ul class=\"common\">{items}</ul>")
        rows = "".join("<tr>" + "".join(_cell(v) for v in row) + "</tr>"
                       for row in shown.head(max_rows).itertuples(index=False, name=None))
        count = f"<p>{plural(len(table), 'row')}, {plural(len(table.columns), 'column')}; " \
                "click a column's header to sort by it.</p>"
        if len(table) > max_rows:
            count += (f"<p><b>The first {max_rows:,} rows of {len(table):,} are shown</b> (in "
                      f"the file's order; a click sorts those): every row is in "
                      f"{esc(file_name)}, the CSV beside this page.</p>")
        body = (count + listed + '<table class="sortable"><thead><tr>'
                + "".join(f"<th>{esc(c)}</th>" for c in shown.columns)
                + f"</tr></thead><tbody>{rows}</tbody></table>")
        if table.empty:
            body += "<p>No rows.</p>"
    return ("<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{esc(file_name)}</title><style>{PAGE_STYLE}</style></head>"
            f"<body>{head}{body}<script>{SORT_SCRIPT}</script></body></html>\n")
