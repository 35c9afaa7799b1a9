"""Values as the report's HTML shows them: escaped to ASCII, missing values, plurals
(shared by the front page, :mod:`scalesweep.report.pages`, and the table pages,
:mod:`scalesweep.report.table_page`)."""

from __future__ import annotations

import html

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
