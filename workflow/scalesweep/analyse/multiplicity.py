"""A campaign's verdicts at the campaign level: ``adjust_verdicts`` of a table of
comparisons (overhead.csv's rows, each one ``scalesweep.analyse.verdict.overhead_verdict``).

Each comparison's tests are at alpha (5%) on their own; a campaign makes many (6 in the
embedded default with its A/A check), so with no difference anywhere about one campaign in
four would show a "faster" or "slower" somewhere. The verdicts are therefore decided after
Benjamini-Hochberg over the campaign, one family per claim:

- "slower"/"faster" holds where the 95% CI excludes 0 and the difference test's q value
  (Benjamini-Hochberg over every row with a difference p) is below alpha;
- "equivalent" holds where the two one-sided tests' q value (the same over every row with
  an equivalence p) is below alpha;
- else the row is "inconclusive", and its text says what the comparison alone gave
  ("p 0.047 alone; not significant over the campaign's 6 comparisons, Benjamini-Hochberg
  q 0.28").

What it guarantees: a false discovery rate of at most alpha over the campaign's claims of a
difference (and of equivalence), for independent or positively dependent tests; where no
runtime differs at all (an A/A campaign) that is the chance of any false "faster"/"slower"
in the whole campaign (the family-wise rate). ``verdict_unadjusted`` keeps the comparison's
own verdict. Applying it twice gives the same table (it starts from verdict_unadjusted).
Pure.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from scalesweep.analyse.stats import CONFIDENCE, fdr_adjust

DIFFERENCE_CLAIMS = ("slower", "faster")
ADJUSTMENT = "Benjamini-Hochberg"


def _fmt_p(x: float) -> str:
    return f"{x:.2g}" if x >= 0.001 else "<0.001"


def adjust_verdicts(table: pd.DataFrame, confidence: float = CONFIDENCE) -> pd.DataFrame:
    """``table`` (columns verdict, verdict_text, p_value, equivalence_p_value,
    overhead_ci95_low_pct, overhead_ci95_high_pct; others kept) with its verdicts decided
    over the campaign (module docstring). Adds ``q_value`` after ``p_value``,
    ``equivalence_q_value`` after ``equivalence_p_value``, ``comparisons`` (the rows with
    a difference test: the family's size) and ``verdict_unadjusted`` after ``verdict``;
    rewrites ``verdict`` and, where it changed, ``verdict_text``. A table without p values
    (none of those columns) is returned unchanged but for the q columns it can have."""
    alpha = 1 - confidence
    out = table.copy()
    for p_col, q_col in (("p_value", "q_value"), ("equivalence_p_value", "equivalence_q_value")):
        if p_col not in out.columns:
            continue
        q = fdr_adjust(pd.to_numeric(out[p_col], errors="coerce").to_numpy(float))
        if q_col in out.columns:
            out[q_col] = q
        else:
            out.insert(out.columns.get_loc(p_col) + 1, q_col, q)
    needed = {"verdict", "verdict_text", "p_value", "equivalence_p_value",
              "overhead_ci95_low_pct", "overhead_ci95_high_pct"}
    if not needed <= set(out.columns):
        return out
    if "verdict_unadjusted" in out.columns:
        own = out["verdict_unadjusted"].astype(str)
        own_text = out["verdict_text_unadjusted"].astype(str) if (
            "verdict_text_unadjusted" in out.columns) else out["verdict_text"].astype(str)
    else:
        own, own_text = out["verdict"].astype(str), out["verdict_text"].astype(str)
    current, current_text = out["verdict"].astype(str).tolist(), out["verdict_text"].tolist()
    p = pd.to_numeric(out["p_value"], errors="coerce").to_numpy(float)
    eq_p = pd.to_numeric(out["equivalence_p_value"], errors="coerce").to_numpy(float)
    q = out["q_value"].to_numpy(float)
    eq_q = out["equivalence_q_value"].to_numpy(float)
    low = pd.to_numeric(out["overhead_ci95_low_pct"], errors="coerce").to_numpy(float)
    high = pd.to_numeric(out["overhead_ci95_high_pct"], errors="coerce").to_numpy(float)
    m = int(np.isfinite(p).sum())
    m_eq = int(np.isfinite(eq_p).sum())
    verdicts, texts = [], []
    for i, (verdict, text) in enumerate(zip(own, own_text)):
        new = verdict
        if verdict in DIFFERENCE_CLAIMS and not (np.isnan(p[i]) or q[i] < alpha):
            new = "inconclusive"
        elif verdict == "equivalent" and not (np.isnan(eq_p[i]) or eq_q[i] < alpha):
            # equivalence not shown over the campaign: a difference may be (the
            # comparison's own rule: equivalence first, then a CI that excludes 0)
            excludes = (low[i] > 0) or (high[i] < 0)
            if excludes and (np.isnan(p[i]) or q[i] < alpha):
                new = "slower" if low[i] > 0 else "faster"
            else:
                new = "inconclusive"
        verdicts.append(new)
        if new == current[i]:  # decided as before (a table adjusted already): kept as is,
            texts.append(current_text[i])  # with what was added to its text since
        else:
            texts.append(text if new == verdict else
                         _downgraded_text(verdict, new, text, p[i], q[i], eq_p[i], eq_q[i],
                                          m, m_eq, alpha))
    out["verdict"] = verdicts
    out["verdict_text"] = texts
    if "verdict_unadjusted" not in out.columns:
        out.insert(out.columns.get_loc("verdict") + 1, "verdict_unadjusted", list(own))
        out.insert(out.columns.get_loc("verdict_text") + 1, "verdict_text_unadjusted",
                   list(own_text))
    if "comparisons" in out.columns:
        out["comparisons"] = m
    else:
        out.insert(out.columns.get_loc("q_value") + 1, "comparisons", m)
    return out


def _details(text: str) -> str:
    """The evidence of a comparison's own verdict text: its parenthesis and notes
    ("(overhead -5.2%, 95% CI ..., n=8 same-block pairs); 1 pair ... left out")."""
    at = text.find(" (")
    if at < 0:
        return ""
    rest = text[at + 1:]
    return rest if rest.startswith("(overhead") else "(" + _overhead_of(text) + rest[1:]


def _overhead_of(text: str) -> str:
    # "slower by X% (95% CI ...": the overhead is X%; the other texts name it themselves
    head = text.split(" (", 1)[0]
    if head.startswith("slower by "):
        return f"overhead {head[len('slower by '):]}, "
    return ""


def _downgraded_text(verdict: str, new: str, text: str, p: float, q: float, eq_p: float,
                     eq_q: float, m: int, m_eq: int, alpha: float) -> str:
    """The text of a row whose own verdict does not hold over the campaign."""
    if verdict == "equivalent" and new != "inconclusive":
        # equivalence not shown over the campaign, the difference is
        return (f"{new} by {text.split('overhead ', 1)[-1].split('%', 1)[0].lstrip('-')}% "
                f"over the campaign (equivalence within the margin not shown over its "
                f"{m_eq} comparisons: p {_fmt_p(eq_p)} alone, {ADJUSTMENT} q {_fmt_p(eq_q)}) "
                + _details(text))
    if verdict == "equivalent":
        why = (f"equivalence within the margin not shown over the campaign's {m_eq} "
               f"comparisons (two one-sided tests p {_fmt_p(eq_p)} alone, {ADJUSTMENT} "
               f"q {_fmt_p(eq_q)} >= {alpha:g})")
    else:
        why = (f"not significant over the campaign's {m} comparisons (p {_fmt_p(p)} alone, "
               f"{ADJUSTMENT} q {_fmt_p(q)} >= {alpha:g})")
    return f"inconclusive: {why}; more repeats needed {_details(text)}".rstrip()
