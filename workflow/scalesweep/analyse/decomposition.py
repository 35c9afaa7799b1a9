"""Where the container's cost goes: decomposition.csv, the overhead taken apart.

For every comparison of the overhead table (a workload, its model, an arm, a geometry,
a container runtime and mode against native) and every component of
``scalesweep.analyse.components.COMPONENTS`` (start-up and its parts, steady-state
compute, data reading, the MPI path, memory of the ranks and of the node), one row: the
component's value on both sides, their paired difference in the component's unit with its
95% CI, the relative overhead with its CI, and the verdict. The verdict is the overhead
table's own, computed the same way on the component's column: ``overhead_summary``
(same-block pairs, disturbed runs counted and left out, pairs measured apart or on a
machine whose speed differed left out, the campaign's margin and CI target). The
``compute`` rows are therefore exactly the overhead table's verdicts.

``native`` and ``container`` are the two sides' geometric means over the pairs (the
overhead table's native_s and time_s). The difference and its CI are the overhead's
estimate and CI times native, in the component's unit, so both come from one method
(``ci_method``) and the difference always lies inside its interval. Under the paired t
(and Fieller) method that is container - native; where the log ratios are not normal
(the rank method: a skewed start-up, a slow outlier pair) it is the Hodges-Lehmann shift
the rank interval is built around, which can differ from container - native (a difference
of means taken beside a rank interval once lay outside it: issue 40).

A component the runs of a comparison did not record (a campaign measured before it was
recorded, an LLM that reads no training set, a CNN that calls no MPI) is a row with
``measured`` false and the verdict text "not measured: ...", never a number.

Container modes: where runs.csv has a ``mode`` column, each mode of a runtime
is its own comparison (the column is kept on every row); without one, each runtime is one
mode (``mode`` empty).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from scalesweep.analyse.components import COMPONENTS
from scalesweep.analyse.summary import overhead_summary
from scalesweep.plan.sweep import REFERENCE
from scalesweep.record.columns import unit
from scalesweep.record.geometry import AXES as GEOMETRY

MODE_COL = "mode"
KEYS = ["workload", "model", "model_label", "arm", *GEOMETRY, "runtime", MODE_COL]
VERDICT_FIELDS = ["pairing", "n", "n_disturbed", "n_pairs_split", "n_pairs_machine_differs",
                  "overhead_pct", "overhead_ci95_low_pct", "overhead_ci95_high_pct",
                  "ci_method", "verdict", "verdict_text"]
COLUMNS = [*KEYS, "component", "component_label", "column", "unit", "measured", "native",
           "container", "difference", "difference_ci95_low", "difference_ci95_high",
           *VERDICT_FIELDS, "shared_cores", "note"]
NOT_MEASURED = "not measured"
_MODE_SEP = " | "  # runtime and mode joined while they are compared as one runtime


def _joined(runs: pd.DataFrame) -> tuple[pd.DataFrame, dict]:
    """``runs`` with each container run's runtime joined to its mode (where runs.csv has
    modes), and label -> (runtime, mode)."""
    runtimes = runs["runtime"].astype(str)
    if MODE_COL not in runs.columns:
        return runs, {rt: (rt, "") for rt in runtimes.unique()}
    modes = runs[MODE_COL].fillna("").astype(str)
    joined = [rt if rt == REFERENCE or not mode else f"{rt}{_MODE_SEP}{mode}"
              for rt, mode in zip(runtimes, modes)]
    labels = {j: ((j.split(_MODE_SEP, 1)[0], j.split(_MODE_SEP, 1)[1]) if _MODE_SEP in j
                  else (j, "")) for j in joined}
    return runs.assign(runtime=joined), labels


def _recorded(runs: pd.DataFrame, column: str) -> dict:
    """(workload, arm, geometry..., model, runtime) -> runs with a finite value of
    ``column`` (disturbed ones too: they recorded it)."""
    if column not in runs.columns:
        return {}
    values = pd.to_numeric(runs[column], errors="coerce")
    model = runs["model"] if "model" in runs.columns else [None] * len(runs)
    keys = zip(runs["workload"], runs["arm"], *(runs[g] for g in GEOMETRY),
               [m if isinstance(m, str) else None for m in model], runs["runtime"])
    out: dict = {}
    for key, ok in zip(keys, np.isfinite(values.to_numpy(float))):
        out[key] = out.get(key, 0) + int(ok)
    return out


def _not_measured_text(component, native_n: int, container_n: int) -> str:
    sides = [side for side, n in (("native", native_n), ("container", container_n)) if not n]
    return (f"{NOT_MEASURED}: no {' or '.join(sides)} run of this comparison recorded "
            f"{component.column} ({component.what})")


def decomposition_table(runs: pd.DataFrame, config: dict, log=None) -> pd.DataFrame:
    """decomposition.csv (see the module's text) from runs.csv and the campaign's config
    (its ``measurement`` section: margin, CI target, pairing); ``log`` gets what
    ``overhead_summary`` says of points left out."""
    log = log or (lambda text: None)
    if runs.empty or "runtime" not in runs.columns:
        return pd.DataFrame(columns=COLUMNS)
    data, labels = _joined(runs)
    if "arm" not in data.columns:
        data = data.assign(arm=data["runtime"])
    rows = []
    for i, component in enumerate(COMPONENTS):
        values = (pd.to_numeric(data[component.column], errors="coerce")
                  if component.column in data.columns else pd.Series(np.nan, index=data.index))
        compared = data.assign(time_s=values)
        if component.column != "time_s" and "within_run_cv_pct" in compared.columns:
            # the spread inside a run is the LLM's decode rates': a note on the compute
            # verdict only (overhead_summary's spread text)
            compared["within_run_cv_pct"] = np.nan
        table = overhead_summary(compared, config, log if i == 0 else None)
        recorded = _recorded(data, component.column)
        for position, (_, row) in enumerate(table.iterrows()):
            where = (row["workload"], row["arm"], *(row[g] for g in GEOMETRY),
                     row["model"] if isinstance(row["model"], str) else None)
            native_n = recorded.get((*where, REFERENCE), 0)
            container_n = recorded.get((*where, row["runtime"]), 0)
            runtime, mode = labels.get(row["runtime"], (row["runtime"], ""))
            out = {**{k: row.get(k) for k in KEYS}, "runtime": runtime, MODE_COL: mode,
                   "component": component.key, "component_label": component.label,
                   "column": component.column, "unit": unit(component.column),
                   "shared_cores": row.get("shared_cores"), "note": row.get("note", ""),
                   "_order": (position, i)}
            out.update({k: row.get(k) for k in VERDICT_FIELDS})
            if not native_n or not container_n:
                out.update(measured=False, verdict=NOT_MEASURED,
                           verdict_text=_not_measured_text(component, native_n, container_n),
                           overhead_pct=np.nan, overhead_ci95_low_pct=np.nan,
                           overhead_ci95_high_pct=np.nan, ci_method="")
                rows.append(out)
                continue
            native, container = float(row["native_s"]), float(row["time_s"])
            estimate = row["overhead_pct"]
            low, high = row["overhead_ci95_low_pct"], row["overhead_ci95_high_pct"]
            # the overhead's estimate and CI, in the component's unit: one method for both
            out.update(measured=True, native=native, container=container,
                       difference=native * estimate / 100 if np.isfinite(estimate) else np.nan,
                       difference_ci95_low=native * low / 100 if np.isfinite(low) else np.nan,
                       difference_ci95_high=native * high / 100 if np.isfinite(high) else np.nan)
            rows.append(out)
    # the overhead table's order of comparisons, each with its components in their order
    rows.sort(key=lambda r: r.pop("_order"))
    return pd.DataFrame(rows, columns=COLUMNS)
