"""Why the container differs (issue #43): each difference split into what the container's
isolation costs and what the image's software stack changes, from a campaign that runs a
control image (the host's own stack in a container: ``containers.images.<name>.control``,
run by the token ``<runtime>+control``).

How the blocks hold the three runtimes: each container runtime is its own arm, so every
component is a same-block comparison or a stated combination of them:

- **total** = workload image vs native, the workload image's own arm (overhead.csv's row,
  same-block pairs);
- **isolation** = control image vs native, the control's own arm (its overhead.csv row,
  same-block pairs): namespaces, mounts, the image's file system, the launcher, with the
  host's own software;
- **stack** = total less isolation, on the log scale: ln(1 + stack) = ln(1 + total) -
  ln(1 + isolation), the ratio of the workload image to the control. The two arms'
  blocks are measured separately (each with its own native runs), so the two estimates
  are independent and the variances add: each one's standard error is its 95% CI's
  half-width on the log scale over t(n - 1), n its same-block pairs (an approximation
  for a rank interval, which need not be symmetric); the stack's CI is the t interval of
  the difference with Welch-Satterthwaite's degrees of freedom (``stack_df``), its p value
  the t test of no difference, its equivalence p the two one-sided t tests against the
  margin. The estimate is the interval's centre.

Rows: one per comparison (workload, model, geometry, the workload image's runtime in the
control's mode: charliecloud, podman; charliecloud+squashfs or podman+vfs would put their
mode's own cost into "stack", and are left out) and phase: ``steady state`` (overhead.csv:
the figure of merit) and each measured component of decomposition.csv but ``compute``
(the steady state's own comparison): start-up, imports, data, MPI, memory. Total and
isolation keep their own tables' verdicts (campaign-adjusted there); the stack verdicts
are decided over the campaign's stack components (Benjamini-Hochberg,
``scalesweep.analyse.multiplicity``), in the same words as overhead.csv's. ``explanation``
is one sentence per row, as the report's first screen says it. Pure.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import stats

from scalesweep.analyse.ablation import cause
from scalesweep.analyse.multiplicity import DIFFERENCE_CLAIMS, adjust_verdicts
from scalesweep.analyse.stats import CONFIDENCE
from scalesweep.platform.runtimes.base import CONTROL_MODE, MODE_SEP
from scalesweep.record.geometry import AXES as GEOMETRY

CONTROL_SUFFIX = MODE_SEP + CONTROL_MODE  # a runtime's control token: charliecloud+control
KEYS = ["workload", "model", *GEOMETRY]
STEADY = "steady state"
METHOD = ("difference of independent estimates on the log scale (t, Welch-Satterthwaite "
          "degrees of freedom; each component's standard error from its 95% CI and pairs)")
COLUMNS = [*KEYS, "runtime", "control_runtime", "phase", "phase_label",
           "total_pct", "total_ci95_low_pct", "total_ci95_high_pct", "total_verdict",
           "isolation_pct", "isolation_ci95_low_pct", "isolation_ci95_high_pct",
           "isolation_verdict",
           "stack_pct", "stack_ci95_low_pct", "stack_ci95_high_pct", "stack_df", "stack_ci_method",
           "p_value", "q_value", "equivalence_p_value", "equivalence_q_value", "comparisons",
           "margin_pct", "verdict", "verdict_unadjusted", "verdict_text", "cause",
           "explanation"]


def control_of(runtime: str) -> str:
    """The control token of a runtime token (charliecloud+squashfs -> charliecloud+control)."""
    return runtime.split(MODE_SEP, 1)[0] + CONTROL_SUFFIX


def is_control(runtime: str) -> bool:
    return str(runtime).endswith(CONTROL_SUFFIX)


def _log_ci(low_pct: float, high_pct: float) -> tuple[float, float]:
    return math.log1p(low_pct / 100), math.log1p(high_pct / 100)


def _t(confidence: float, df: float) -> float:
    return float(stats.t.ppf(0.5 + confidence / 2, df)) if np.isfinite(df) else \
        float(stats.norm.ppf(0.5 + confidence / 2))


def stack_component(total: tuple[float, float, float], isolation: tuple[float, float, float],
                    margin_pct: float, confidence: float = CONFIDENCE,
                    n_total: float | None = None, n_isolation: float | None = None) -> dict:
    """The stack's part of ``total`` given ``isolation``, each (estimate, CI low, CI high) in
    percent, from ``n_total`` and ``n_isolation`` same-block pairs (module docstring): its
    estimate, CI, p value and equivalence p value, and the degrees of freedom; NaN where a
    component has no estimate or no finite CI. Each standard error is its CI's half-width
    on the log scale over t(n - 1) (the normal quantile where n is not known); the
    difference has Welch-Satterthwaite's degrees of freedom."""
    nan = dict(stack_pct=np.nan, stack_ci95_low_pct=np.nan, stack_ci95_high_pct=np.nan,
               p_value=np.nan, equivalence_p_value=np.nan, stack_df=np.nan)
    values = [*total, *isolation]
    if not all(np.isfinite(v) and v > -100 for v in values):
        return nan
    df_t = float(n_total) - 1 if n_total is not None and np.isfinite(n_total) and n_total > 1 \
        else np.inf
    df_i = float(n_isolation) - 1 if n_isolation is not None and np.isfinite(n_isolation) \
        and n_isolation > 1 else np.inf
    (t, *t_ci), (i, *i_ci) = total, isolation
    lo_t, hi_t = _log_ci(*t_ci)
    lo_i, hi_i = _log_ci(*i_ci)
    se_t = (hi_t - lo_t) / (2 * _t(confidence, df_t))
    se_i = (hi_i - lo_i) / (2 * _t(confidence, df_i))
    d = math.log1p(t / 100) - math.log1p(i / 100)
    se = math.hypot(se_t, se_i)
    if not se > 0:
        return nan
    # Welch-Satterthwaite (infinite where neither n is known)
    denom = sum(v ** 4 / k for v, k in ((se_t, df_t), (se_i, df_i)) if np.isfinite(k))
    df = se ** 4 / denom if denom > 0 else np.inf
    q = _t(confidence, df)
    dist = stats.t(df) if np.isfinite(df) else stats.norm()
    lower = math.log1p(-margin_pct / 100) if margin_pct < 100 else -math.inf
    upper = math.log1p(margin_pct / 100)
    return dict(
        stack_pct=math.expm1(d) * 100,
        stack_ci95_low_pct=math.expm1(d - q * se) * 100,
        stack_ci95_high_pct=math.expm1(d + q * se) * 100,
        p_value=float(2 * dist.sf(abs(d) / se)),
        # two one-sided tests: above the lower bound, below the upper one
        equivalence_p_value=float(max(dist.sf((d - lower) / se), dist.cdf((d - upper) / se))),
        stack_df=float(df),
    )


def _pct(x: float) -> str:
    text = f"{x:.1f}"
    return ("0.0" if text == "-0.0" else text) + "%"


def _unadjusted(row: dict, margin_pct: float, alpha: float) -> tuple[str, str]:
    s, lo, hi = row["stack_pct"], row["stack_ci95_low_pct"], row["stack_ci95_high_pct"]
    ci = f"95% CI {_pct(lo)} .. {_pct(hi)}, {METHOD.split(' (', 1)[0]}"
    if not np.isfinite(s):
        return "inconclusive", ("inconclusive: the total or the isolation has no estimate "
                                "with a 95% CI yet")
    if row["equivalence_p_value"] < alpha:
        return "equivalent", f"equivalent within +-{margin_pct:g}% (stack overhead {_pct(s)}, {ci})"
    if lo > 0 and row["p_value"] < alpha:
        return "slower", f"slower by {_pct(s)} ({ci})"
    if hi < 0 and row["p_value"] < alpha:
        return "faster", f"faster by {_pct(-s)} (stack overhead {_pct(s)}, {ci})"
    return "inconclusive", (f"inconclusive: more repeats needed in both arms (stack "
                            f"overhead {_pct(s)}, {ci})")


def _said(verdict: str, pct: float, margin_pct: float) -> str:
    if verdict in ("slower", "faster"):
        return f"{verdict} by {_pct(abs(pct))}"
    if verdict == "equivalent":
        return f"equivalent within +-{margin_pct:g}%"
    return "inconclusive" + (f" ({_pct(pct)})" if np.isfinite(pct) else "")


def explanation(row: dict) -> str:
    """One sentence: the total, then isolation and stack (the report's first screen), and
    the stack's cause where the ablation named one or said why not."""
    m = row["margin_pct"]
    cause = row.get("cause")
    return (f"{_said(row['total_verdict'], row['total_pct'], m)}: isolation "
            f"{_said(row['isolation_verdict'], row['isolation_pct'], m)}; stack "
            f"{_said(row['verdict'], row['stack_pct'], m)}"
            + (f", {cause}" if isinstance(cause, str) and cause else ""))


def _components(overhead: pd.DataFrame, decomposition: pd.DataFrame | None) -> pd.DataFrame:
    """One frame of (keys, runtime, phase, estimate, CI, verdict, margin) from both tables."""
    cols = ["overhead_pct", "overhead_ci95_low_pct", "overhead_ci95_high_pct", "verdict", "n"]
    names = [*KEYS, "runtime", "phase", "phase_label", *cols, "margin_pct"]
    parts = []
    margins = None
    if overhead is not None and len(overhead):
        o = overhead.assign(phase=STEADY, phase_label="steady state (the figure of merit)",
                            model=overhead["model"].fillna("").astype(str))
        if "n" not in o.columns:
            o["n"] = np.nan
        parts.append(o[names])
        margins = o.drop_duplicates([*KEYS, "runtime"]).set_index([*KEYS, "runtime"])["margin_pct"]
    if decomposition is not None and len(decomposition):
        d = decomposition
        if "measured" in d.columns:
            d = d[d["measured"].astype(str).str.lower() == "true"]
        # its compute row is the overhead table's own comparison: the steady state already
        d = d[d["component"] != "compute"]
        d = d.rename(columns={"component": "phase", "component_label": "phase_label"})
        if "n" not in d.columns:
            d = d.assign(n=np.nan)
        d = d.assign(model=d["model"].fillna("").astype(str))[[*KEYS, "runtime", "phase",
                                                               "phase_label", *cols]]
        if margins is not None and len(d):
            d = d.join(margins, on=[*KEYS, "runtime"])
        else:
            d = d.assign(margin_pct=np.nan)
        parts.append(d[names])
    if not parts:
        return pd.DataFrame(columns=names)
    return pd.concat(parts, ignore_index=True)


def attribution_table(overhead: pd.DataFrame, decomposition: pd.DataFrame | None = None,
                      margin_pct: float | None = None,
                      confidence: float = CONFIDENCE,
                      ablation: pd.DataFrame | None = None) -> pd.DataFrame:
    """The attribution of every comparison whose runtime has a control measured at the
    same geometry (module docstring); an empty table (its columns) where none has.
    ``ablation``: ``scalesweep ablate``'s table, where it ran: ``cause`` says which item
    carries a significant stack component (:func:`scalesweep.analyse.ablation.cause`)."""
    comp = _components(overhead, decomposition)
    alpha = 1 - confidence
    rows = []
    by = {(tuple(r[k] for k in KEYS), r["runtime"], r["phase"]): r
          for r in comp.to_dict("records")}
    for (key, runtime, phase), total in by.items():
        if is_control(runtime) or runtime in ("native", "native-aa") or MODE_SEP in runtime:
            # a mode other than the control's (charliecloud+squashfs, podman+vfs): its own
            # cost would land in "stack"; attributed where the mode is the control's
            continue
        iso = by.get((key, control_of(runtime), phase))
        if iso is None:
            continue
        margin = total.get("margin_pct")
        margin = float(margin if margin is not None and np.isfinite(margin) else
                       (margin_pct if margin_pct is not None else 2.0))
        row = dict(zip(KEYS, key), runtime=runtime, control_runtime=control_of(runtime),
                   phase=phase, phase_label=total["phase_label"], margin_pct=margin,
                   total_pct=total["overhead_pct"],
                   total_ci95_low_pct=total["overhead_ci95_low_pct"],
                   total_ci95_high_pct=total["overhead_ci95_high_pct"],
                   total_verdict=total["verdict"],
                   isolation_pct=iso["overhead_pct"],
                   isolation_ci95_low_pct=iso["overhead_ci95_low_pct"],
                   isolation_ci95_high_pct=iso["overhead_ci95_high_pct"],
                   isolation_verdict=iso["verdict"], stack_ci_method=METHOD)
        row.update(stack_component(
            (row["total_pct"], row["total_ci95_low_pct"], row["total_ci95_high_pct"]),
            (row["isolation_pct"], row["isolation_ci95_low_pct"],
             row["isolation_ci95_high_pct"]), margin, confidence,
            total.get("n"), iso.get("n")))
        row["verdict"], row["verdict_text"] = _unadjusted(row, margin, alpha)
        rows.append(row)
    if not rows:
        return pd.DataFrame(columns=COLUMNS)
    table = pd.DataFrame(rows)
    # adjust_verdicts reads the stack's interval under overhead.csv's names
    table["overhead_ci95_low_pct"] = table["stack_ci95_low_pct"]
    table["overhead_ci95_high_pct"] = table["stack_ci95_high_pct"]
    table = adjust_verdicts(table, confidence).drop(
        columns=["overhead_ci95_low_pct", "overhead_ci95_high_pct"])
    table["cause"] = [cause(r, ablation) if r["verdict"] in DIFFERENCE_CLAIMS else ""
                      for r in table.to_dict("records")]
    table["explanation"] = [explanation(r) for r in table.to_dict("records")]
    return table.reindex(columns=COLUMNS)
