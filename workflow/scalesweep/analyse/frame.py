"""What every analysis of a table of runs shares: its error, the checks of its columns
and values (naming the first bad row by its index label: the CLI labels file lines), a
flag read back from a CSV, and the grouping (no group columns: the whole table is one
group).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator

import numpy as np
import pandas as pd

from scalesweep.record.metrics import write_bytes_atomic


class TableError(ValueError):
    """The table cannot be analysed as asked: a missing column, value or baseline."""


def truthy(value) -> bool:
    """A flag from a table or a CSV round trip: True, 'True', 'true', 1 (NaN: False)."""
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "yes")
    try:
        return bool(value) and not pd.isna(value)
    except (TypeError, ValueError):
        return False


def flag_column(runs: pd.DataFrame, col: str) -> pd.Series:
    """A flag column of ``runs`` read back (``truthy``); False where it has no such column."""
    if col not in runs.columns:
        return pd.Series(False, index=runs.index, dtype=bool)
    return runs[col].map(truthy).astype(bool)


# What marks a run that no statistic uses, kept in runs.csv: interference during its
# measurement (``disturbed``), or a warm-up block of its series (``warmup``:
# measurement.warmup_blocks, scalesweep.plan.sweep.is_warmup).
LEFT_OUT = ("disturbed", "warmup")


def left_out(runs: pd.DataFrame) -> pd.Series:
    """Which runs every statistic leaves out (``LEFT_OUT``): disturbed or warm-up."""
    mask = pd.Series(False, index=runs.index, dtype=bool)
    for col in LEFT_OUT:
        mask |= flag_column(runs, col)
    return mask


def without_warmup(runs: pd.DataFrame) -> pd.DataFrame:
    """``runs`` less the warm-up runs (``warmup``): those a table that counts its
    disturbed runs (n_disturbed) leaves out before anything."""
    if runs is None or "warmup" not in getattr(runs, "columns", ()):
        return runs
    return runs[~flag_column(runs, "warmup")]


def over_counted_runs(fn):
    """``fn(runs, ...)`` over ``without_warmup(runs)``."""
    @functools.wraps(fn)
    def over(runs, *args, **kwargs):
        return fn(without_warmup(runs), *args, **kwargs)
    return over


def as_list(cols: Iterable[str]) -> list[str]:
    return [cols] if isinstance(cols, str) else list(cols)


def group_keys(df: pd.DataFrame, group_cols: list[str]):
    # groupby needs at least one key: with no group columns the whole table is one group.
    return group_cols if group_cols else np.zeros(len(df), dtype=int)


def grouped(df: pd.DataFrame, group_cols: list[str]) -> Iterator[tuple[tuple, pd.DataFrame]]:
    for key, group in df.groupby(group_keys(df, group_cols), sort=False, dropna=False):
        yield (key if group_cols else ()), group


def describe_group(group_cols: list[str], key: tuple) -> str:
    if not group_cols:
        return "the table"
    return "group " + ", ".join(f"{col}={value}" for col, value in zip(group_cols, key))


def require_table(df: pd.DataFrame, required: list[str]) -> None:
    """The required columns exist and there is at least one row."""
    missing = [col for col in required if col not in df.columns]
    if missing:
        raise TableError(
            f"missing column {', '.join(missing)} (needs {', '.join(required)}; "
            f"has {', '.join(map(str, df.columns))})"
        )
    if df.empty:
        raise TableError("no rows")


def require_positive_times(df: pd.DataFrame, col: str) -> None:
    values = pd.to_numeric(df[col], errors="coerce")
    require_valid(df, col, values.notna() & np.isfinite(values) & (values > 0),
                   "a positive number")


def require_valid(df: pd.DataFrame, col: str, ok: pd.Series, what: str) -> None:
    """Raise naming the first bad row by its index label (the CLI labels file lines)."""
    if ok.all():
        return
    first_bad = int(np.flatnonzero(~ok.to_numpy())[0])
    label, value = df.index[first_bad], df[col].iloc[first_bad]
    shown = "an empty cell" if pd.isna(value) else f"'{value}'"
    raise TableError(f"{col} must be {what}; {df.index.name or 'row'} {label} has {shown}")


def write_parquet(df: pd.DataFrame, path) -> None:
    """``df`` as a Parquet file (pyarrow), written atomically: runs.parquet beside runs.csv,
    the same rows with their types (numbers as numbers, flags as booleans). A column of
    mixed Python types (a value recorded as a number in one run and as text in another)
    is stored as text, None kept as null."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    def as_text(v):
        return None if v is None or (isinstance(v, float) and v != v) else str(v)

    try:
        table = pa.Table.from_pandas(df, preserve_index=False)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        fixed = df.copy()
        for col in fixed.columns:
            if fixed[col].dtype == object:
                try:
                    pa.array(fixed[col], from_pandas=True)
                except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
                    fixed[col] = fixed[col].map(as_text)
        table = pa.Table.from_pandas(fixed, preserve_index=False)
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    write_bytes_atomic(path, sink.getvalue().to_pybytes())
