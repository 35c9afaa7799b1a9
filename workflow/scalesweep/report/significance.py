"""Many tests in one campaign: ``add_q_values`` puts the Benjamini-Hochberg q values in
overhead.csv, and ``significance_table`` says how many "significant" overhead tests chance
alone would give (and Benjamini-Hochberg's answer), per family of tests. ``row_label`` and
``named_rows`` name the rows of a summary table as evidence texts do.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from scalesweep.analyse.multiplicity import adjust_verdicts
from scalesweep.analyse.stats import expected_false_positives, fdr_adjust
from scalesweep.record.geometry import AXES, Geometry

SIGNIFICANCE_COLUMNS = ["family", "statement", "tests", "significant", "expected_by_chance",
                        "bh_significant", "claims", "claims_not_bh_significant", "column",
                        "alpha"]
CLAIMS = {"p_value": ("slower", "faster"), "equivalence_p_value": ("equivalent",)}
SHOWN = 3  # rows named in an evidence text before "and k more"


def add_q_values(overhead: pd.DataFrame) -> pd.DataFrame:
    """overhead.csv (or load_overhead.csv) with its verdicts decided over the table's
    comparisons: ``scalesweep.analyse.multiplicity.adjust_verdicts`` (``q_value`` after
    ``p_value``, ``equivalence_q_value`` after ``equivalence_p_value``, ``comparisons``,
    ``verdict_unadjusted``; a claim whose q is not below alpha is inconclusive).
    Idempotent: overhead_summary has already decided them, and the same table comes back."""
    return adjust_verdicts(overhead)


def row_label(row: pd.Series) -> str:
    """A row of a summary table as the evidence names it: its workload (and model), runtime
    and geometry or count, e.g. "cnn_ddp apptainer n1-g0-r2-t1"."""
    def value(col):
        v = row.get(col)
        return "" if v is None or (isinstance(v, float) and np.isnan(v)) else str(v)

    parts = [value("workload")]
    if value("model_label"):
        parts.append(f"({value('model_label')})")
    runtime = value("runtime")
    if runtime:
        arm = value("arm")
        parts.append(runtime + (f" [arm {arm}]" if arm and arm != runtime else ""))
    if all(value(c) for c in AXES):
        parts.append(Geometry.of({c: int(float(value(c))) for c in AXES}).segment)
    elif value("threads"):
        parts.append(f"{value('threads')} thr/rank")
    if value("count"):
        parts.append(f"count {value('count')}")
    return " ".join(p for p in parts if p)


def named_rows(rows: pd.DataFrame) -> str:
    """The first SHOWN rows named, "; and k more" for the rest."""
    labels = [row_label(r) for _, r in rows.head(SHOWN).iterrows()]
    more = len(rows) - len(labels)
    return "; ".join(labels) + (f"; and {more} more" if more > 0 else "")


def significance_table(overhead: pd.DataFrame | None, alpha: float = 0.05) -> pd.DataFrame:
    """How many "significant" results chance alone would give, per family of tests in
    overhead.csv: the difference tests (``p_value``: the faster / slower verdicts) and the
    equivalence tests (``equivalence_p_value``, TOST: the equivalent verdicts). For each:
    ``tests`` (rows with a p value), ``significant`` (p < alpha), ``expected_by_chance``
    (tests x alpha: the significant results to expect if no runtime differed at all, or,
    for equivalence, if every one differed by the margin), ``bh_significant`` (q < alpha,
    Benjamini-Hochberg: a false discovery rate of alpha over the family), ``claims``
    (verdicts resting on the test) and the claims whose q is not below alpha, named; and
    the ``statement`` the report prints."""
    rows = []
    has_rows = overhead is not None and not overhead.empty
    for column, (family, what) in {
        "p_value": ("difference from native", "faster/slower"),
        "equivalence_p_value": ("equivalence within the margin (TOST)", "equivalent"),
    }.items():
        if not has_rows or column not in overhead.columns:
            rows.append({"family": family, "column": column, "tests": 0, "alpha": alpha,
                         "significant": 0, "expected_by_chance": 0.0, "bh_significant": 0,
                         "claims": 0, "claims_not_bh_significant": "",
                         "statement": f"no {what} comparison with a test in overhead.csv"})
            continue
        p = pd.to_numeric(overhead[column], errors="coerce").to_numpy(float)
        q = fdr_adjust(p)
        tested = ~np.isnan(p)
        m = int(tested.sum())
        k = int((p[tested] < alpha).sum())
        d = int((q[tested] < alpha).sum())
        expected = expected_false_positives(m, alpha)
        verdicts = overhead["verdict"].astype(str) if "verdict" in overhead else pd.Series(
            "", index=overhead.index)
        claimed = verdicts.isin(CLAIMS[column]).to_numpy()
        own = (overhead["verdict_unadjusted"].astype(str) if "verdict_unadjusted" in overhead
               else verdicts)
        # claimed by a comparison alone, inconclusive over the campaign (a table not
        # adjusted yet: its claims whose q is not below alpha)
        alone = overhead[(own.isin(CLAIMS[column]).to_numpy() & ~claimed)
                         | (claimed & ~(q < alpha))]
        weak = alone
        level = f"{alpha * 100:g}%"
        if m == 0:
            statement = f"no {what} comparison with a test in overhead.csv"
        else:
            null = ("no runtime differed from native" if column == "p_value"
                    else "every runtime differed from native by the margin")
            q_col = "q_value" if column == "p_value" else "equivalence_q_value"
            statement = (
                f"{k} of {m} comparison{'s' if m != 1 else ''} significant at {level} "
                f"({column} < {alpha:g}); if {null}, "
                f"chance alone would give about {expected:.1f}. Benjamini-Hochberg at a "
                f"false discovery rate of {level} over these {m}: {d} remain "
                f"({q_col} < {alpha:g}). "
                f"The verdicts are decided over the campaign: "
                + (f"no {what} verdict" if not claimed.any() else
                   f"{int(claimed.sum())} {what} verdict{'s' if claimed.sum() != 1 else ''}")
                + (f"; {len(alone)} comparison{'s' if len(alone) != 1 else ''} {what} alone "
                   f"but not over the campaign, inconclusive ({named_rows(alone)})."
                   if len(alone) else "."))
        rows.append({"family": family, "column": column, "tests": m, "alpha": alpha,
                     "significant": k, "expected_by_chance": expected, "bh_significant": d,
                     "claims": int(claimed.sum()),
                     "claims_not_bh_significant": named_rows(weak) if len(weak) else "",
                     "statement": statement})
    return pd.DataFrame(rows, columns=SIGNIFICANCE_COLUMNS)
