"""The text of runs.csv's rows, kept beside it (``RUNS_CSV_CACHE``,
results/summary/.runs-csv-cache.npz): ``write_csv`` writes a table as pandas' to_csv does,
byte for byte, formatting only the rows it has not written before (a row's key:
what determines its values exactly; for runs.csv the identity of its metrics file, its
block's start and end and its warm-up label, scalesweep.analyse.collect.collect_runs_keyed
and scalesweep.analyse.aggregate). At 100,000 runs
formatting runs.csv took seconds; after one more run all but a few rows are as before.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from scalesweep.analyse.cachefiles import save_npz_atomic
from scalesweep.analyse.runcache import CACHE_FORMAT, from_text_array, text_array

RUNS_CSV_CACHE = ".runs-csv-cache.npz"  # beside runs.csv


def write_csv(df: pd.DataFrame, path: str | os.PathLike, keys: Sequence | None = None,
              memo: str | os.PathLike | None = None, version: str = "", **to_csv) -> None:
    """``df.to_csv(path, index=False, **to_csv)``, the same bytes, with the text of rows
    written before taken from ``memo`` rather than formatted again (at 100,000 runs
    formatting runs.csv was seconds; after one more run all but a few rows are as before).

    ``keys``: per row, what determines its values exactly (and so its text, with the
    table's columns and their types), or None for a row always formatted: for runs.csv
    the identity of the row's metrics file (collect.collect_runs_keyed) with its block's
    start and end and its warm-up label (from the config, not the file). ``version``: what else the values depend on (cache_version). A memo of
    other columns, types, options, versions or pandas is not used; one that cannot be read
    is ignored; either is rewritten."""
    if memo is None or keys is None or df.empty or len(keys) != len(df) or not all(
            t.kind in "biufO" for t in df.dtypes):
        _drop(memo)
        df.to_csv(path, index=False, **to_csv)
        return
    signature = json.dumps({"format": CACHE_FORMAT, "version": version, "pandas": pd.__version__,
                            "numpy": np.__version__, "options": repr(sorted(to_csv.items())),
                            "columns": [repr(c) for c in df.columns],
                            "dtypes": [str(t) for t in df.dtypes]})
    digests = [None if k is None else hashlib.blake2b(repr(k).encode(), digest_size=16).digest()
               for k in keys]
    old = _load_texts(memo, signature)
    texts: list = [old.get(d) if d is not None else None for d in digests] if old else [None] * len(df)
    missing = [i for i, t in enumerate(texts) if t is None]
    header = df.iloc[:0].to_csv(index=False, **to_csv).encode()
    if missing:
        rendered = _rows_text(df.iloc[missing] if len(missing) < len(df) else df, to_csv)
        if rendered is None:  # a row of several lines (a value with a line break)
            _drop(memo)
            df.to_csv(path, index=False, **to_csv)
            return
        for i, t in zip(missing, rendered):
            texts[i] = t
    data = header + b"".join(texts)
    with open(path, "wb") as fh:
        fh.write(data)
    if missing or len(old) != sum(d is not None for d in digests):
        _save_texts(memo, signature, digests, texts)


def _rows_text(df: pd.DataFrame, to_csv: dict) -> list[bytes] | None:
    """The text of each row of ``df`` as to_csv writes it (line break included); None
    where a row's text is not one line."""
    text = df.to_csv(index=False, header=False, **to_csv).encode()
    lines = text.split(b"\n")
    if len(lines) != len(df) + 1 or lines[-1]:
        return None
    return [line + b"\n" for line in lines[:-1]]


def _load_texts(memo, signature: str) -> dict[bytes, bytes]:
    try:
        with np.load(memo, allow_pickle=False) as npz:
            if from_text_array(npz["meta"]) != signature:
                return {}
            digests, offsets, text = npz["digests"], npz["offsets"], npz["text"].tobytes()
            if digests.ndim != 2 or digests.shape[1] != 16 or len(offsets) != len(digests) + 1:
                return {}
            bounds = offsets.tolist()
            if bounds and (bounds[0] != 0 or bounds[-1] != len(text)):
                return {}
            return {bytes(d): text[a:b] for d, a, b in zip(digests, bounds, bounds[1:])}
    except Exception:  # noqa: BLE001 - not a cache of ours (stray, truncated, encrypted)
        return {}


def _save_texts(memo, signature: str, digests: list, texts: list) -> None:
    kept = [(d, t) for d, t in zip(digests, texts) if d is not None]
    sizes = np.array([len(t) for _, t in kept], dtype=np.int64)
    arrays = {
        "meta": text_array(signature),
        "digests": np.frombuffer(b"".join(d for d, _ in kept), dtype=np.uint8).reshape(-1, 16),
        "offsets": np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64),
        "text": np.frombuffer(b"".join(t for _, t in kept), dtype=np.uint8),
    }
    try:
        save_npz_atomic(memo, arrays)
    except Exception:  # a cache never fails the summary: the next run formats again
        pass


def _drop(memo) -> None:
    if memo is not None:
        try:
            Path(memo).unlink(missing_ok=True)
        except OSError:  # a cache never fails the summary (a directory there, read-only)
            pass
