"""What differs between the two sides of a comparison: differences.csv.

Per comparison (a workload, an arm, a geometry, a container runtime and mode against
native in the same arm, as the overhead table pairs them), every item of the software
stack the runs recorded (``scalesweep.record.stack``: ``per_rank[].stack`` and an LLM
run's ``server_stack``), compared between the native runs and the container runs, one
row per item that is not the same (the values each side had, all runs of a side pooled,
several values joined by " | "); every row says how many items were identical. A
comparison where nothing differs is one row saying so; one whose runs recorded no stack
(measured before it was recorded) is one row saying "not recorded".

The items (:func:`stack_items`): the interpreter (version, implementation, build,
compiler), the builds of the imported modules (torch's version, BLAS, MKL, OpenMP, CPU
capability; numpy, mpi4py, llama_cpp), every loaded library by kind and name (its
version; "not loaded" on the side that lacks it: libraries are compared by name and
version, never by path, which differs by design between a host's virtual environment
and an image), the behaviour-changing environment variables ("unset" where absent), and
each rank's CPU binding and torch threads.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import pandas as pd

from scalesweep.analyse.decomposition import MODE_COL
from scalesweep.plan.sweep import REFERENCE
from scalesweep.record.geometry import AXES as GEOMETRY
from scalesweep.record.stack import RUN_SPECIFIC_ENV

KEYS = ["workload", "arm", *GEOMETRY, "runtime", MODE_COL]
COLUMNS = [*KEYS, "category", "item", "native", "container", "n_native_runs",
           "n_container_runs", "n_identical", "n_different", "note"]
NOT_LOADED, UNSET, UNKNOWN = "not loaded", "unset", "version unknown"
_HASH = re.compile(r"-[0-9a-f]{8}$")  # a wheel's vendored copy: libgfortran-040039e1


def library_base(name: str) -> str:
    """A library's name without its versions: libopenblasp-r0.3.21.so -> libopenblasp,
    libc.so.6 -> libc, libgomp-a34b3233.so.1 -> libgomp."""
    base = name.split(".so")[0]
    while _HASH.search(base):
        base = _HASH.sub("", base)
    return re.sub(r"-r?\d+(\.\d+)+$", "", base)


def _library_items(stack: dict, prefix: str) -> dict[str, tuple[str, str]]:
    out = {}
    for lib in stack.get("libraries") or []:
        if not isinstance(lib, dict) or not lib.get("name"):
            continue
        key = f"{prefix}{lib.get('kind', 'other')}: {library_base(lib['name'])}"
        out[key] = ("library", str(lib.get("version") or UNKNOWN))
    return out


def stack_items(metrics: dict) -> dict[str, tuple[str, str]]:
    """item -> (category, value) of one run's record; {} where it recorded no stack."""
    ranks = sorted((r for r in metrics.get("per_rank") or []
                    if isinstance(r, dict) and isinstance(r.get("stack"), dict)),
                   key=lambda r: str(r.get("rank")))
    if not ranks:
        return {}
    first = ranks[0]["stack"]
    items: dict[str, tuple[str, str]] = {}
    for key in ("version", "implementation", "build", "compiler", "bytecode"):
        value = (first.get("interpreter") or {}).get(key)
        if value is not None:
            items[f"python {key}"] = ("interpreter", str(value))
    for module, build in sorted((first.get("builds") or {}).items()):
        for key, value in sorted((build or {}).items()):
            items[f"{module} {key}"] = ("build", str(value))
    items.update(_library_items(first, ""))
    for name, value in (first.get("env") or {}).items():
        if not name.startswith(RUN_SPECIFIC_ENV):  # a launch's own (records of before)
            items[f"env {name}"] = ("environment", str(value))
    for rank in ranks:
        label = f"rank {rank.get('rank')}"
        items[f"{label} CPU binding"] = ("cpu binding", str(rank["stack"].get("cpu_affinity")))
        if rank.get("threads") is not None:
            items[f"{label} torch threads"] = ("cpu binding", str(rank["threads"]))
    server = metrics.get("server_stack")
    if isinstance(server, dict):
        items.update(_library_items(server, "server "))
        for name, value in (server.get("env") or {}).items():
            if not name.startswith(RUN_SPECIFIC_ENV):
                items[f"server env {name}"] = ("environment", str(value))
        items["server CPU binding"] = ("cpu binding", str(server.get("cpu_affinity")))
    return items


def _absent(item: str, category: str) -> str:
    return {"library": NOT_LOADED, "environment": UNSET}.get(category, "not recorded")


def _side(runs: list[dict]) -> tuple[dict[str, set], dict[str, str]]:
    """item -> the set of values over the runs (a run without the item: its absent
    value), item -> category."""
    categories: dict[str, str] = {}
    for items in runs:
        categories.update({k: c for k, (c, _) in items.items()})
    values: dict[str, set] = {}
    for items in runs:
        for item, category in categories.items():
            values.setdefault(item, set()).add(
                items[item][1] if item in items else _absent(item, category))
    return values, categories


def _shown(values: set | None, absent: str) -> str:
    return " | ".join(sorted(values)) if values else absent


def differences_table(records: Iterable[tuple[dict, dict]]) -> pd.DataFrame:
    """differences.csv (see the module's text) from (metrics, runs.csv row) of every run."""
    groups: dict[tuple, dict[str, list]] = {}
    for metrics, row in records:
        arm = row.get("arm") or row.get("runtime")
        if arm == REFERENCE:
            continue  # native measured alone compares nothing
        mode = "" if row.get("runtime") == REFERENCE else str(row.get(MODE_COL) or "")
        base = (row.get("workload"), arm, *(row.get(g) for g in GEOMETRY))
        side = "native" if row.get("runtime") == REFERENCE else (row.get("runtime"), mode)
        groups.setdefault(base, {}).setdefault(side, []).append(stack_items(metrics))
    rows = []
    for base, sides in groups.items():
        native = sides.get("native", [])
        for side, container in sides.items():
            if side == "native":
                continue
            key = dict(zip(KEYS, (*base, *side)))
            rows += _compare(key, native, container)
    table = pd.DataFrame(rows, columns=COLUMNS)
    return table.sort_values(KEYS + ["category", "item"], key=lambda s: s.astype(str),
                             kind="stable").reset_index(drop=True)


def _compare(key: dict, native: list[dict], container: list[dict]) -> list[dict]:
    counts = {"n_native_runs": len(native), "n_container_runs": len(container)}
    n_recorded = (sum(bool(i) for i in native), sum(bool(i) for i in container))
    if not native or not all(n_recorded):
        why = ("no native run in this arm" if not native else
               "not recorded: no run of a side recorded its stack (measured before "
               "scalesweep recorded it)")
        return [{**key, **counts, "category": "", "item": "", "note": why}]
    native_values, native_cat = _side([i for i in native if i])
    container_values, container_cat = _side([i for i in container if i])
    categories = {**native_cat, **container_cat}
    different = []
    for item in sorted(categories, key=lambda k: (categories[k], k)):
        category = categories[item]
        n_val = native_values.get(item) or {_absent(item, category)}
        c_val = container_values.get(item) or {_absent(item, category)}
        if n_val != c_val:
            different.append({**key, "category": category, "item": item,
                              "native": _shown(n_val, ""), "container": _shown(c_val, "")})
    identical = len(categories) - len(different)
    summary = {**counts, "n_identical": identical, "n_different": len(different)}
    if not different:
        return [{**key, **summary, "category": "", "item": "",
                 "note": f"nothing recorded differs ({identical} identical items)"}]
    return [{**row, **summary, "note": ""} for row in different]
