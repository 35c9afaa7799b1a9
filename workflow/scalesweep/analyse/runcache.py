"""Rows of runs.csv, stored by column, and the cache of them beside the summary.

A campaign's summary is made from every metrics file of it (collect.collect_runs): at
100,000 runs that is 600 MiB of JSON or more to parse, every time one run is added. The
cache (``RUNS_CACHE``, results/summary/.runs-cache.npz) keeps each file's row, keyed by
the file's identity: its path and (device, inode, size, mtime_ns, ctime_ns). A file
whose identity changed (rewritten, replaced, touched, deleted) is read again; a file
changed within ``cachefiles.RACY_S`` of being looked at is read, but not kept (a change inside the
file system's time-stamp resolution could leave its identity unchanged; git's "racily
clean" entries). How a file is looked at (by an open on NFS, whose clients cache
attributes; "a moment ago" by the file system's clock as well as ours) is
scalesweep.analyse.cachefiles. The rows of files not asked for stay while their files
exist. The cache carries a version (``cache_version``: this format, the source of the
scalesweep package and of the workload kinds the config uses, the processor's
instruction set, the config's workload -> payload mapping): a cache of other code or
another config is ignored, and so is one that cannot be read; either is rewritten.

Rows are kept as their raw values (the Python objects run_row returned: float, int,
bool, str, None and their numpy scalar kinds, each restored with its own type), not as
pandas columns, so the table made from cached rows is made exactly as the table made
from freshly read ones (``RowStore.frame``: pandas infers each column's type from every
row's value, as pd.DataFrame(list of row dicts) does). A row holding any other kind of
value is never stored: it is read every time.

The file is a numpy .npz read with allow_pickle=False: numeric columns as arrays, text
as JSON; nothing in it is executed.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import sys
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np
import pandas as pd

from scalesweep.analyse.cachefiles import Identity, save_npz_atomic

RUNS_CACHE = ".runs-cache.npz"  # beside runs.csv (results/summary/)
CACHE_FORMAT = 1

# the types a stored value may have: name -> (type, numpy dtype of its column or None)
_TYPES: dict[type, tuple[str, Any]] = {
    float: ("float", np.float64), int: ("int", np.int64), bool: ("bool", np.bool_),
    str: ("str", None), type(None): ("none", None),
    np.float64: ("np.float64", np.float64), np.int64: ("np.int64", np.int64),
    np.bool_: ("np.bool_", np.bool_),
}
_BY_NAME = {name: (t, dtype) for t, (name, dtype) in _TYPES.items()}



@dataclass
class _Shape:
    """Rows of one set of keys, each of one type: their values column by column (an
    array per key; None for a key whose value is None in every row of the shape)."""
    keys: tuple[str, ...]
    types: tuple[str, ...]
    values: list = field(default_factory=list)  # rows as tuples, while being added
    columns: list | None = None  # per key: ndarray or None, once sealed
    n: int = 0
    _keys: dict | None = field(default=None, repr=False)

    def key_index(self) -> dict[str, int]:
        if self._keys is None:
            self._keys = {k: i for i, k in enumerate(self.keys)}
        return self._keys

    def seal(self) -> "_Shape":
        if self.columns is None:
            cols = list(zip(*self.values)) if self.values else [()] * len(self.keys)
            self.columns = [_column(c, t) for c, t in zip(cols, self.types)]
            self.values = []
        return self


def _column(values: Sequence, type_name: str):
    kind, dtype = _BY_NAME[type_name]
    if kind is type(None):
        return None
    if dtype is None:  # text
        return np.array(values, dtype=object)
    try:
        return np.array(values, dtype=dtype)
    except OverflowError:  # an int beyond int64: kept as Python ints (JSON in the file)
        return np.array(values, dtype=object)


def _shape_key(row: dict) -> tuple[tuple, tuple] | None:
    try:
        types = tuple(_TYPES[type(v)][0] for v in row.values())
    except KeyError:  # a value of another kind: the row is not stored
        return None
    return tuple(row), types


_NUMBERS = {"float", "int", "none", "absent"}


def _typed_column(col: str, n: int, used: list):
    """The column ``col`` of the rows of shapes ``used`` as the array pandas infers from
    their values, where the kinds of value it holds decide it without looking at each
    value; None (infer from the values) otherwise:
    - numbers (float, int) with None or absent: float64 (int, None and NaN as pandas
      casts them: exactly the float, NaN), where at least one float, or an int beside a
      missing value, is there; ints alone: int64; bools alone: bool;
    - any text: object, each value as itself (pandas keeps a column of text as objects).
    """
    kinds = set()
    for shape, _, _ in used:
        k = shape.key_index().get(col)
        if k is None:
            kinds.add("absent")
            continue
        kind = shape.types[k]
        if kind == "int" and shape.columns[k] is not None and shape.columns[k].dtype == object:
            return None  # an int beyond int64
        kinds.add(kind)
    if kinds <= _NUMBERS and ("float" in kinds or ("int" in kinds and kinds & {"none", "absent"})):
        out = np.full(n, np.nan)
        for shape, pos, rows in used:
            k = shape.key_index().get(col)
            if k is not None and shape.types[k] in ("float", "int"):
                out[pos] = shape.columns[k][rows]
        return out
    if kinds in ({"int"}, {"bool"}):
        dtype = np.int64 if kinds == {"int"} else np.bool_
        out = np.empty(n, dtype=dtype)
        for shape, pos, rows in used:
            out[pos] = shape.columns[shape.key_index()[col]][rows]
        return out
    if "str" in kinds and kinds <= {"str", "float", "int", "bool", "none", "absent"}:
        out = np.full(n, np.nan, dtype=object)
        for shape, pos, rows in used:
            k = shape.key_index().get(col)
            if k is None:
                continue
            values = shape.columns[k]
            out[pos] = None if values is None else values[rows].astype(object)
        return out
    return None


class RowStore:
    """Rows of runs.csv by file: each row's path, its file's identity and its values,
    stored by column (rows of the same keys and types together: a "shape")."""

    def __init__(self):
        self.paths: list[str] = []
        self.idents: list[Identity] = []
        self.shape_of: list[int] = []  # per row: its shape
        self.index_in: list[int] = []  # per row: its place in its shape
        self.shapes: list[_Shape] = []
        self._shape_ids: dict[tuple, int] = {}

    def __len__(self) -> int:
        return len(self.paths)

    def add(self, path: str, ident: Identity | None, row: dict) -> bool:
        """Add a row; False (not added) when one of its values is of a kind not stored."""
        key = _shape_key(row)
        if key is None:
            return False
        sid = self._shape_ids.get(key)
        if sid is None:
            sid = self._shape_ids[key] = len(self.shapes)
            self.shapes.append(_Shape(*key))
        shape = self.shapes[sid]
        if shape.columns is not None:
            raise RuntimeError("rows are added to a store before it is read")
        shape.values.append(tuple(row.values()))
        self.paths.append(path)
        self.idents.append(ident)
        self.shape_of.append(sid)
        self.index_in.append(shape.n)
        shape.n += 1
        return True

    def sealed(self) -> "RowStore":
        for shape in self.shapes:
            shape.seal()
        return self

    # -- many stores into one ------------------------------------------------------------
    @classmethod
    def merged(cls, parts: Iterable[tuple["RowStore", Sequence[int]]]) -> "RowStore":
        """One store of the rows ``rows`` of each store, in that order."""
        out = cls()
        pieces: dict[int, list] = {}  # shape id in out -> [(part shape, rows of it)]
        for store, rows in parts:
            store.sealed()
            rows = np.asarray(rows, dtype=np.int64)
            if not len(rows):
                continue
            shape_of = np.asarray(store.shape_of, dtype=np.int64)[rows]
            index_in = np.asarray(store.index_in, dtype=np.int64)[rows]
            new_index = np.empty(len(rows), dtype=np.int64)
            sids = np.empty(len(rows), dtype=np.int64)
            for sid in np.unique(shape_of):
                shape = store.shapes[sid]
                key = (shape.keys, shape.types)
                oid = out._shape_ids.get(key)
                if oid is None:
                    oid = out._shape_ids[key] = len(out.shapes)
                    out.shapes.append(_Shape(*key))
                target = out.shapes[oid]
                at = shape_of == sid
                new_index[at] = target.n + np.arange(int(at.sum()))
                sids[at] = oid
                pieces.setdefault(oid, []).append((shape, index_in[at]))
                target.n += int(at.sum())
            out.paths += [store.paths[i] for i in rows]
            out.idents += [store.idents[i] for i in rows]
            out.shape_of += sids.tolist()
            out.index_in += new_index.tolist()
        for oid, shape in enumerate(out.shapes):
            shape.columns = [
                None if all(s.columns[k] is None for s, _ in pieces[oid])
                else np.concatenate([s.columns[k][i] for s, i in pieces[oid]])
                for k in range(len(shape.keys))]
        return out

    # -- the table ------------------------------------------------------------------------
    def frame(self, order: Sequence[int | dict]) -> pd.DataFrame:
        """The table of the rows ``order``: a row of this store by its number, or a row
        dict (one not stored), in that order; made as pd.DataFrame(list of the row
        dicts) makes it: the columns in the order of their first appearance, a key a row
        lacks is NaN, each column's type inferred from all its values."""
        self.sealed()
        n = len(order)
        stored = np.array([i if not isinstance(i, dict) else -1 for i in order], dtype=np.int64)
        loose = [(p, r) for p, r in enumerate(order) if isinstance(r, dict)]
        shape_of = np.asarray(self.shape_of, dtype=np.int64)
        index_in = np.asarray(self.index_in, dtype=np.int64)
        at_stored = np.flatnonzero(stored >= 0)
        sel_shape = np.full(n, -1, dtype=np.int64)
        sel_shape[at_stored] = shape_of[stored[at_stored]]
        # per shape used: the output positions of its rows and their places in it
        used = []
        first: list[tuple[int, tuple]] = [(p, tuple(r)) for p, r in loose]
        for sid in np.unique(sel_shape[at_stored]):
            pos = np.flatnonzero(sel_shape == sid)
            used.append((self.shapes[sid], pos, index_in[stored[pos]]))
            first.append((int(pos[0]), self.shapes[sid].keys))
        columns: dict[str, None] = {}
        for _, keys in sorted(first, key=lambda item: item[0]):
            columns.update(dict.fromkeys(keys))
        data = {}
        for col in columns:
            if not loose:
                typed = _typed_column(col, n, used)
                if typed is not None:
                    data[col] = typed
                    continue
            out = np.full(n, np.nan, dtype=object)
            for shape, pos, rows in used:
                k = shape.key_index().get(col)
                if k is None:
                    continue
                kind, dtype = _BY_NAME[shape.types[k]]
                values = shape.columns[k]
                if values is None:
                    out[pos] = None
                elif kind in (float, int, bool):
                    out[pos] = values[rows].astype(object)  # the Python scalars
                elif dtype is None:
                    out[pos] = values[rows]
                else:  # numpy scalars, kept as numpy scalars
                    out[pos] = np.array(list(values[rows]), dtype=object)
            for p, row in loose:
                out[p] = row.get(col, np.nan)
            data[col] = out.tolist()
        return pd.DataFrame(data, columns=list(columns))

    def rows(self) -> list[dict]:
        """Every row as the dict it was added as (each value of its own type)."""
        self.sealed()
        per_shape = []
        for shape in self.shapes:
            cols = []
            for k, values in enumerate(shape.columns):
                kind, dtype = _BY_NAME[shape.types[k]]
                if values is None:
                    cols.append([None] * shape.n)
                elif kind in (float, int, bool) or dtype is None:
                    cols.append(values.tolist())  # the Python scalars (or objects)
                else:
                    cols.append(list(values))  # numpy scalars
            per_shape.append([dict(zip(shape.keys, vals)) for vals in zip(*cols)]
                             if cols else [{} for _ in range(shape.n)])
        return [per_shape[s][i] for s, i in zip(self.shape_of, self.index_in)]

    # -- the file -----------------------------------------------------------------------
    def save(self, path: str | os.PathLike, version: str) -> None:
        """Write the store to ``path`` (atomically: a crash leaves the old cache or the
        new one)."""
        self.sealed()
        arrays: dict[str, np.ndarray] = {}
        meta = {"format": CACHE_FORMAT, "version": version, "shapes": []}
        for sid, shape in enumerate(self.shapes):
            meta["shapes"].append({"keys": list(shape.keys), "types": list(shape.types),
                                   "n": shape.n})
            for k, values in enumerate(shape.columns):
                if values is None:
                    continue
                if values.dtype == object:  # text, or ints beyond int64: JSON
                    values = text_array(values.tolist())
                    meta["shapes"][-1].setdefault("json", []).append(k)
                arrays[f"s{sid}_{k}"] = values
        arrays["meta"] = text_array(meta)
        arrays["paths"] = text_array(self.paths)
        try:
            arrays["idents"] = np.array(self.idents, dtype=np.int64).reshape(len(self), 5)
        except OverflowError:  # inode numbers of 2^63 and above (hashed inodes): JSON
            arrays["idents"] = text_array([list(i) for i in self.idents])
        arrays["shape_of"] = np.asarray(self.shape_of, dtype=np.int32)
        arrays["index_in"] = np.asarray(self.index_in, dtype=np.int32)
        save_npz_atomic(path, arrays)

    @classmethod
    def load(cls, path: str | os.PathLike, version: str) -> "RowStore | None":
        """The store in ``path``; None where there is none, it cannot be read, or it was
        written by another version (``cache_version``)."""
        try:
            with np.load(path, allow_pickle=False) as npz:
                meta = from_text_array(npz["meta"])
                if meta.get("format") != CACHE_FORMAT or meta.get("version") != version:
                    return None
                out = cls()
                out.paths = from_text_array(npz["paths"])
                idents = npz["idents"]
                out.idents = [tuple(r) for r in (from_text_array(idents) if idents.ndim == 1
                                                 else idents.tolist())]
                out.shape_of = npz["shape_of"].astype(np.int64).tolist()
                out.index_in = npz["index_in"].astype(np.int64).tolist()
                for sid, s in enumerate(meta["shapes"]):
                    shape = _Shape(tuple(s["keys"]), tuple(s["types"]), n=int(s["n"]))
                    columns = []
                    for k, type_name in enumerate(shape.types):
                        kind, dtype = _BY_NAME[type_name]
                        if kind is type(None):
                            columns.append(None)
                            continue
                        values = npz[f"s{sid}_{k}"]
                        if dtype is None or k in s.get("json", ()):
                            values = np.array(from_text_array(values), dtype=object)
                        elif values.dtype != dtype:
                            raise ValueError(f"column {k} of shape {sid}: {values.dtype}")
                        if len(values) != shape.n:
                            raise ValueError(f"column {k} of shape {sid}: {len(values)} rows")
                        columns.append(values)
                    shape.columns = columns
                    out.shapes.append(shape)
                    out._shape_ids[(shape.keys, shape.types)] = sid
                n = len(out.paths)
                if not (len(out.idents) == len(out.shape_of) == len(out.index_in) == n):
                    raise ValueError("rows of different lengths")
                if n and (max(out.shape_of) >= len(out.shapes) or min(out.shape_of) < 0 or any(
                        not 0 <= i < out.shapes[s].n for s, i in zip(out.shape_of, out.index_in))):
                    raise ValueError("a row out of its shape")
                return out
        except Exception:  # noqa: BLE001 - whatever is there (a stray file, an encrypted
            return None  # or truncated zip): not a cache of ours, ignored and rewritten

    def index(self) -> dict[str, int]:
        return {p: i for i, p in enumerate(self.paths)}


def text_array(value: Any) -> np.ndarray:
    return np.frombuffer(json.dumps(value).encode(), dtype=np.uint8)


def from_text_array(array: np.ndarray) -> Any:
    if array.dtype != np.uint8:
        raise ValueError(f"text stored as {array.dtype}")
    return json.loads(array.tobytes().decode())


def keep_rows(cache, version: str, cached: RowStore, known: dict[str, int],
              table: RowStore, paths: list[str], looked: list, missed: list[int],
              placed: list, log) -> None:
    """Rewrite the cache ``cache`` after collect.collect_runs_keyed read ``paths`` (their
    identities ``looked``, those at positions ``missed`` read into ``table``, ``placed``)
    where it changed: the rows just read (not those of files changed moments ago:
    cachefiles.RACY_S), the cached rows still valid, and those of files not asked for
    this time while they exist (kept for a later summary of more of the
    campaign); never the rows of files changed, replaced, deleted or unreadable since."""
    stale = {paths[i] for i in missed}  # read now, or unreadable: their old rows go
    new = [value for i, (what, value) in zip(missed, placed)
           if what == "stored" and looked[i][0] is not None and not looked[i][1]]
    if not new and not any(p in known for p in stale):
        return  # nothing to change
    kept_new = set()
    fresh_rows = []
    for row in new:
        if table.paths[row] not in kept_new:
            kept_new.add(table.paths[row])
            fresh_rows.append(row)
    asked = set(paths)
    # the rows of files not asked for stay while their file does: a summary of part of
    # the campaign keeps the rest's, and a campaign's deleted runs leave the cache
    old_rows = [j for p, j in known.items() if p not in stale and p not in kept_new
                and (p in asked or os.path.exists(p))]
    try:
        Path(cache).parent.mkdir(parents=True, exist_ok=True)
        RowStore.merged([(cached, old_rows), (table, fresh_rows)]).save(cache, version)
    except Exception as exc:  # a cache never fails the summary
        log(f"note: the runs cache {cache} was not written ({exc}); the next summary "
            "reads every metrics file again")


# -- the version a cache is valid for ---------------------------------------------------
@lru_cache(maxsize=None)
def _source_digest(root: str) -> str:
    """A digest of every Python file under ``root`` (path and contents)."""
    h = hashlib.sha256()
    for f in sorted(Path(root).rglob("*.py")):
        rel = f.relative_to(root)
        # not an editor's lock or backup (.#collect.py: a symlink to nothing), not bytecode
        if "__pycache__" in rel.parts or any(p.startswith(".") for p in rel.parts):
            continue
        try:
            data = f.read_bytes() if f.is_file() else b"(not a file)"
        except OSError as exc:  # unreadable: its state is part of the version
            data = f"(unreadable: {exc.errno})".encode()
        h.update(str(rel).encode() + b"\0" + data + b"\0")
    return h.hexdigest()


@lru_cache(maxsize=None)
def _instruction_set() -> str:
    """The processor's architecture and the instruction-set extensions it reports: numpy's
    and the BLAS's code paths (AVX-512 or not) may round a last bit differently, so a
    value computed on one kind of node is not taken for another on a shared file system."""
    import platform

    flags = ""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith(("flags", "Features")):
                    flags = " ".join(sorted(line.split(":", 1)[1].split()))
                    break
    except OSError:
        pass
    return f"{platform.machine()} {hashlib.sha256(flags.encode()).hexdigest()[:16]}"


def code_version() -> str:
    """This format, Python, numpy, pandas and scipy, the processor's instruction set and
    the source of the scalesweep package: what a value computed by the package depends on
    besides its inputs."""
    import scipy

    package = Path(__file__).resolve().parents[1]
    return "\n".join([f"format {CACHE_FORMAT}", f"python {sys.version_info[:3]}",
                      f"numpy {np.__version__}", f"pandas {pd.__version__}",
                      f"scipy {scipy.__version__}", f"cpu {_instruction_set()}",
                      _source_digest(str(package))])


def cache_version(config: dict) -> str:
    """What a cached row depends on besides its file: this format, the source of the
    scalesweep package and of any workload kind defined outside it, Python, numpy and
    pandas, and the config's workload -> payload kind mapping (which kind reads each
    file)."""
    from scalesweep.plan.kinds import kind_of

    package = Path(__file__).resolve().parents[1]
    parts = [code_version()]
    payloads = {}
    for name, wl in sorted((config.get("workloads") or {}).items()):
        payload = wl.get("payload") if isinstance(wl, dict) else None
        payloads[name] = payload
        try:
            source = inspect.getsourcefile(type(kind_of(payload)))
        except Exception:  # noqa: BLE001 - an unknown kind: its files fail to be read
            continue
        if source and package not in Path(source).resolve().parents:
            try:
                parts.append(hashlib.sha256(Path(source).read_bytes()).hexdigest())
            except OSError as exc:
                parts.append(f"{source}: unreadable ({exc.errno})")
    parts.append(json.dumps(payloads, sort_keys=True, default=str))
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()
