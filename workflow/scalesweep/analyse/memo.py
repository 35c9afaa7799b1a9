"""Results kept by what they were computed from (``Memo``): overhead.csv's verdicts beside
the summary (``VERDICTS_CACHE``, results/summary/.verdicts-cache.npz), each by a digest of
everything its row is computed from (scalesweep.analyse.overhead.Comparison: ``cached``),
so that a campaign plus one run computes the verdict of that run's group, not all 2,000."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any, Callable

from scalesweep.analyse.runcache import RowStore, code_version

VERDICTS_CACHE = ".verdicts-cache.npz"  # overhead.csv's rows by their inputs


class Memo:
    """Results (row dicts) by a digest of everything they were computed from (``digest``),
    kept in a file (a RowStore) for ``code_version``: a later call with the same inputs
    takes the row instead of computing it. Entries not asked for again are dropped when
    it is saved; a row with a value the store does not keep (pd.NA) is computed every
    time. A file of another version, or one that cannot be read, is ignored."""

    def __init__(self, path: str | os.PathLike, version: str | None = None):
        self.path, self.version = Path(path), version or code_version()
        store = RowStore.load(self.path, self.version) if self.path.is_file() else None
        self.old = dict(zip(store.paths, store.rows())) if store is not None else {}
        self.used: dict[str, dict] = {}
        self.added = False

    @staticmethod
    def digest(inputs: Any) -> str:
        """The key of ``inputs``: a digest of their repr (exact for numbers, text, None,
        NaN and numpy scalars, each with its type)."""
        return hashlib.blake2b(repr(inputs).encode(), digest_size=16).hexdigest()

    def cached(self, fn: Callable[[Any], dict], inputs: Any) -> dict:
        """``fn(inputs)``, or the row it gave for the same ``inputs`` (by ``digest``: the
        whole of them, with the function's name, under this memo's code version)."""
        key = self.digest((fn.__module__, fn.__qualname__, inputs))
        row = self.get(key)
        if row is None:
            row = fn(inputs)
            self.put(key, row)
        return row

    def get(self, key: str) -> dict | None:
        row = self.old.get(key)
        if row is not None:
            self.used[key] = row
        return row

    def put(self, key: str, row: dict) -> None:
        self.used[key] = row
        self.added = True

    def save(self) -> None:
        """Write the entries used or added (where they changed); never raises for a file
        that cannot be written (the next run computes again)."""
        if not self.added and self.used.keys() == self.old.keys():
            return
        store = RowStore()
        for key, row in self.used.items():
            store.add(key, (0, 0, 0, 0, 0), row)
        try:
            store.save(self.path, self.version)
        except Exception:  # a cache never fails the summary: the next run computes again
            pass
