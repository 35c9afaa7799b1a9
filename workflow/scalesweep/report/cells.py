"""Values as the report's HTML shows them: escaped to ASCII, missing values, plurals,
numbers, an overhead with its 95% CI and a verdict sentence (shared by the front page,
:mod:`scalesweep.report.pages` and :mod:`scalesweep.report.front_load`, and the table
pages, :mod:`scalesweep.report.table_page`)."""

from __future__ import annotations

import html
import math

import pandas as pd


def esc(value) -> str:
    """Text as HTML, ASCII only (non-ASCII as character references: docutils reads the
    page as a raw file in whatever encoding it guesses)."""
    return html.escape(str(value)).encode("ascii", "xmlcharrefreplace").decode("ascii")


def missing(value) -> bool:
    if value is None:
        return True
    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):
        return False


def as_text(value) -> str:
    return "" if missing(value) else str(value)


def plural(n: int, word: str, words: str | None = None) -> str:
    return f"{n} {word if n == 1 else (words or word + 's')}"


# --- shared by the first screen's tables (pages.py, front_load.py) ----------------

def number(value) -> float:
    try:
        x = float(value)
    except (TypeError, ValueError):
        return math.nan
    return x


def column(table: pd.DataFrame | None, col: str) -> pd.Series:
    if table is None or col not in table.columns:
        return pd.Series([], dtype=object) if table is None else \
            pd.Series([None] * len(table), index=table.index, dtype=object)
    return table[col]


def n_rows(table: pd.DataFrame | None) -> int:
    return 0 if table is None else len(table)


def pct(value, signed: bool = True) -> str:
    x = number(value)
    if not math.isfinite(x):
        return ""
    text = f"{x:+.1f}" if signed else f"{x:.1f}"
    # a value that rounds to zero reads 0.0, never -0.0
    return ("0.0" if text in ("-0.0", "+0.0", "0.0") and signed is False else
            "+0.0" if text in ("-0.0", "+0.0") else text) + "%"


def overhead_ci(row) -> str:
    overhead = pct(row.get("overhead_pct"))
    low, high = pct(row.get("overhead_ci95_low_pct")), pct(row.get("overhead_ci95_high_pct"))
    if not overhead:
        return "not tested"
    return f"{overhead} [{low} .. {high}]" if low and high else f"{overhead} (no 95% CI)"


def verdict_sentence(verdict: str, text: str) -> str:
    """The verdict sentence as overhead.csv has it, its verdict in bold."""
    if text.startswith(verdict):
        return f"<b>{esc(verdict)}</b>{esc(text[len(verdict):])}"
    return f"<b>{esc(verdict)}</b>" + (f": {esc(text)}" if text else "")
