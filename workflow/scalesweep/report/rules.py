"""The benchmarking rules (Hoefler and Belli, SC15) a tool can check (rules.csv): each
passed, not, or not applicable for the campaign, with its evidence, computed from the
campaign's summary tables (``rules_table``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from scalesweep.analyse.summary import scaling_rows
from scalesweep.analyse.stats import normality_p
from scalesweep.plan.kinds import kinds, summarised_in
from scalesweep.report.significance import SHOWN, named_rows, row_label
from scalesweep.analyse.frame import left_out
from scalesweep.report.tables import flags, numeric

RULES_COLUMNS = ["rule", "passed", "evidence"]
YES, NO, NOT_APPLICABLE = "yes", "no", "not applicable"


# the benchmarking rules (Hoefler and Belli, SC15, "Scientific benchmarking of parallel
# computing systems") a tool can check on a campaign's summary tables, in report order
RULES = (
    "the baseline's absolute time is shown next to every speedup, efficiency and overhead",
    "requested vs delivered points, with a reason for each one not delivered",
    "a 95% CI on every nondeterministic number the verdicts and figures rest on",
    "normality checked before a parametric CI (Shapiro-Wilk), a rank interval where rejected",
    "a statistical test behind every faster / slower / equivalent claim",
    "provenance complete for every run (commit, time, hosts, launcher, software, image)",
    "ideal (linear) lines in the scaling figures",
    "error bars (95% CI) on every mean drawn in a figure",
)


def _finite(df: pd.DataFrame, col: str) -> pd.Series:
    return numeric(df, col).notna() & np.isfinite(numeric(df, col))


def _rule(rule: int, passed: str, evidence: str) -> dict:
    return {"rule": RULES[rule], "passed": passed, "evidence": evidence}


def _verdict(failures: list[str], checked: int) -> str:
    return NOT_APPLICABLE if not checked else (NO if failures else YES)


def _rule_baseline(scaling: pd.DataFrame, overhead: pd.DataFrame) -> dict:
    checked, failures, parts = 0, [], []
    if not _is_empty(scaling):
        rel = scaling[_finite(scaling, "speedup") | _finite(scaling, "efficiency_pct")]
        bad = rel[~(_finite(rel, "baseline_time_s") & _finite(rel, "time_s"))]
        checked += len(rel)
        parts.append(f"scaling.csv: {len(rel) - len(bad)} of {len(rel)} speedup/efficiency "
                     "rows show baseline_time_s and time_s")
        if len(bad):
            failures.append(f"scaling.csv without them: {named_rows(bad)}")
    if not _is_empty(overhead):
        rel = overhead[_finite(overhead, "overhead_pct")]
        bad = rel[~(_finite(rel, "native_s") & _finite(rel, "time_s"))]
        checked += len(rel)
        parts.append(f"overhead.csv: {len(rel) - len(bad)} of {len(rel)} overheads show "
                     "native_s and time_s")
        if len(bad):
            failures.append(f"overhead.csv without them: {named_rows(bad)}")
    text = "; ".join(parts + failures) or "no speedup, efficiency or overhead in the tables"
    return _rule(0, _verdict(failures, checked), text)


def _rule_points(points: pd.DataFrame) -> dict:
    if _is_empty(points) or "state" not in points:
        return _rule(1, NOT_APPLICABLE, "points.csv lists no requested point")
    states = points["state"].astype(str)
    reasons = points["reason"].fillna("").astype(str).str.strip() if "reason" in points \
        else pd.Series("", index=points.index)
    gaps = points[states != "done"]
    silent = gaps[reasons[states != "done"] == ""]
    counts = states.value_counts()
    text = (f"points.csv: {len(points)} requested, {int(counts.get('done', 0))} delivered "
            "(done); " + ", ".join(f"{int(c)} {s}" for s, c in counts.items() if s != "done"))
    text = text.rstrip("; ")
    if len(gaps):
        text += f"; {len(gaps) - len(silent)} of {len(gaps)} not delivered have a reason"
    if len(silent):
        text += " (without: " + "; ".join(silent["path"].astype(str).head(SHOWN)) + (
            f"; and {len(silent) - SHOWN} more" if len(silent) > SHOWN else "") + ")"
    return _rule(1, NO if len(silent) else YES, text)


# (table, value column, CI low, CI high, what it is): the estimates the verdicts and the
# figures rest on; speedup's CI is efficiency's, rescaled (speedup = efficiency x r / 100)
CI_CHECKS = (
    ("scaling", "time_s", "ci95_low", "ci95_high", "mean seconds per epoch"),
    ("scaling", "efficiency_pct", "efficiency_ci95_low_pct", "efficiency_ci95_high_pct",
     "efficiency (and speedup)"),
    ("overhead", "overhead_pct", "overhead_ci95_low_pct", "overhead_ci95_high_pct",
     "overhead"),
    ("llm", "mean", "ci95_low", "ci95_high", "mean wall time"),
    ("llm", "tokens_per_s", "tokens_per_s_ci95_low", "tokens_per_s_ci95_high", "tokens/s"),
)


def _ci_gaps(tables: dict, checks=CI_CHECKS) -> tuple[int, int, list[str]]:
    """(estimates checked, with a CI, what lacks one) over ``checks``."""
    checked = with_ci = 0
    missing = []
    for name, value, low, high, what in checks:
        table = tables.get(name)
        if _is_empty(table) or value not in table.columns:
            continue
        rows = table[_finite(table, value)]
        ok = _finite(rows, low) & _finite(rows, high)
        checked += len(rows)
        with_ci += int(ok.sum())
        if (~ok).any():
            bad = rows[~ok]
            why = ""
            if "n" in bad.columns and (pd.to_numeric(bad["n"], errors="coerce") < 2).all():
                why = ", n < 2"
            missing.append(f"{name}.csv {what}: {len(bad)} without a CI{why} ("
                           f"{named_rows(bad)})")
    return checked, with_ci, missing


def _rule_ci(tables: dict) -> dict:
    checked, with_ci, missing = _ci_gaps(tables)
    if not checked:
        return _rule(2, NOT_APPLICABLE, "no estimate in scaling.csv, overhead.csv or llm.csv")
    text = (f"{with_ci} of {checked} estimates in scaling.csv, overhead.csv and llm.csv have "
            "a 95% CI (speedup's is efficiency's, rescaled)")
    return _rule(2, NO if missing else YES, "; ".join([text, *missing]))


def _group_normality(table: pd.DataFrame, runs: pd.DataFrame, keys: list[str],
                     value: str, alpha: float) -> tuple[int, int, list[str], int]:
    """Shapiro-Wilk of the undisturbed repeats behind each row of ``table`` (a Student t
    CI): (rows with >= 3 repeats checked, rejected, the rejected rows named, rows with
    fewer than 3 repeats)."""
    keys = [k for k in keys if k in table.columns and k in runs.columns]
    if _is_empty(table) or _is_empty(runs) or value not in runs.columns or not keys:
        return 0, 0, [], 0
    valid = runs[~left_out(runs)]  # neither disturbed nor warm-up
    samples = {tuple(str(v) for v in (k if isinstance(k, tuple) else (k,))): g[value]
               for k, g in valid.groupby(keys, dropna=False)}
    checked = rejected = small = 0
    named = []
    for _, row in table.iterrows():
        sample = samples.get(tuple(str(row[k]) for k in keys))
        if sample is None:
            continue
        p = normality_p(pd.to_numeric(sample, errors="coerce"))
        if np.isnan(p):
            small += 1
            continue
        checked += 1
        if p < alpha:
            rejected += 1
            named.append(f"{row_label(row)} (p {p:.3g})")
    return checked, rejected, named, small


def _rule_normality(tables: dict, alpha: float) -> dict:
    from scalesweep.analyse import summary

    overhead, runs = tables.get("overhead"), tables.get("runs")
    parts, failures, checked = [], [], 0
    if not _is_empty(overhead):
        with_ci = overhead[_finite(overhead, "overhead_ci95_low_pct")]
        checked += len(with_ci)
        is_paired = flags(overhead, "paired")
        paired = overhead[is_paired]
        need = paired[numeric(paired, "n") >= 3]
        few = int((numeric(paired, "n") == 2).sum())
        if "normality_p_value" not in overhead.columns:
            if len(need):
                failures.append(f"overhead.csv has no normality_p_value: its {len(need)} "
                                "paired rows with 3 pairs or more were not checked")
        else:
            tested = need[_finite(need, "normality_p_value")]
            rejected = tested[numeric(tested, "normality_p_value") < alpha]
            method = (rejected["ci_method"].fillna("").astype(str) if "ci_method" in rejected
                      else pd.Series("", index=rejected.index))
            parametric = rejected[method.str.contains("paired t|Fieller|Welch", case=False)
                                  | (method == "")]
            parts.append(f"overhead.csv: Shapiro-Wilk on the per-pair log ratios of "
                         f"{len(tested)} of {len(need)} paired rows with 3 pairs or more, "
                         f"rejected in {len(rejected)}"
                         + (f" (their ci_method: {', '.join(sorted(set(method)))})"
                            if len(rejected) else ""))
            if len(tested) < len(need):
                failures.append(f"overhead.csv: {len(need) - len(tested)} paired rows not "
                                f"checked ({named_rows(need[~_finite(need, 'normality_p_value')])})")
            if len(parametric):
                failures.append("overhead.csv: a parametric CI where normality was "
                                f"rejected ({named_rows(parametric)})")
        if few:
            parts.append(f"overhead.csv: {few} paired rows with 2 pairs cannot be checked")
        unpaired = with_ci[~flags(with_ci, "paired")]
        if len(unpaired):
            failures.append(f"overhead.csv: {len(unpaired)} unpaired rows use Fieller/Welch "
                            f"without a normality check ({named_rows(unpaired)})")
    series = getattr(summary, "SCALING_SERIES", ["workload", "runtime", "threads"])
    llm_keys = getattr(summary, "LLM_KEYS", ["workload", "model_label", "runtime", "nodes",
                                             "gpus", "threads"])
    has_payload = not _is_empty(runs) and "payload" in runs
    cnn = runs[runs["payload"].isin(summarised_in("scaling"))] if has_payload else None
    llm = runs[runs["payload"].isin(summarised_in("llm"))] if has_payload else None
    for name, table, keys, sample in (("scaling", tables.get("scaling"), [*series, "count"], cnn),
                                      ("llm", tables.get("llm"), llm_keys, llm)):
        n_checked, rejected, named, small = _group_normality(table, sample, keys, "time_s",
                                                             alpha)
        checked += n_checked
        if n_checked or small:
            parts.append(f"{name}.csv: Student t CIs; Shapiro-Wilk of their undisturbed "
                         f"repeats (checked here) on {n_checked} rows with 3 repeats or more, "
                         f"rejected in {rejected}"
                         + (f"; {small} rows with fewer than 3 distinct repeats cannot be "
                            "checked" if small else ""))
        if rejected:
            failures.append(f"{name}.csv: a Student t CI where normality is rejected ("
                            + "; ".join(named[:SHOWN])
                            + (f"; and {len(named) - SHOWN} more" if len(named) > SHOWN else "")
                            + ")")
    text = "; ".join(parts + failures) or "no CI with 3 values or more to check"
    return _rule(3, _verdict(failures, checked), text)


def _rule_tests(overhead: pd.DataFrame, alpha: float) -> dict:
    if _is_empty(overhead) or "verdict" not in overhead:
        return _rule(4, NOT_APPLICABLE, "overhead.csv has no verdicts")
    verdicts = overhead["verdict"].astype(str)
    claims = overhead[verdicts.isin(["slower", "faster", "equivalent"])]
    if claims.empty:
        return _rule(4, NOT_APPLICABLE, f"no faster/slower/equivalent verdict in "
                     f"overhead.csv ({len(overhead)} rows, all inconclusive)")
    diff = claims[claims["verdict"].isin(["slower", "faster"])]
    equiv = claims[claims["verdict"] == "equivalent"]
    bad_diff = diff[~(numeric(diff, "p_value") < alpha)]
    bad_equiv = equiv[~(numeric(equiv, "equivalence_p_value") < alpha)]
    text = (f"overhead.csv: {len(diff) - len(bad_diff)} of {len(diff)} faster/slower verdicts "
            f"with p_value < {alpha:g}; {len(equiv) - len(bad_equiv)} of {len(equiv)} "
            f"equivalent verdicts with equivalence_p_value < {alpha:g} (TOST)")
    bad = pd.concat([bad_diff, bad_equiv])
    if len(bad):
        text += (f"; without a test below {alpha:g} (identical repeats, decided on the exact "
                 f"difference, or no test): {named_rows(bad)}")
    return _rule(4, NO if len(bad) else YES, text)


def _rule_provenance(runs: pd.DataFrame) -> dict:
    if _is_empty(runs):
        return _rule(5, NOT_APPLICABLE, "runs.csv has no runs")
    from scalesweep.plan.sweep import CONTAINER_RUNTIMES

    required = {col: pd.Series(True, index=runs.index)
                for col in ("git_commit", "start", "end", "hosts", "launcher")}
    if "payload" in runs:
        for kind in kinds():
            for col in kind.provenance:
                required[col] = required.get(col, pd.Series(False, index=runs.index)) \
                    | runs["payload"].astype(str).isin([kind.name, kind.record_payload])
    required["image_digest"] = runs["runtime"].isin(list(CONTAINER_RUNTIMES)) \
        if "runtime" in runs else pd.Series(False, index=runs.index)
    # recorded by this version of the workflow: required where runs.csv has the column
    for col in ("block_id", "probe_gflops", "probe_gbps"):
        if col in runs.columns:
            required[col] = pd.Series(True, index=runs.index)
    gaps, complete = [], pd.Series(True, index=runs.index)
    for col, needed in required.items():
        values = runs[col] if col in runs.columns else pd.Series(np.nan, index=runs.index)
        empty = values.isna() | values.astype(str).str.strip().isin(["", "nan", "None"])
        lacking = needed & empty
        complete &= ~lacking
        if lacking.any():
            gaps.append(f"{col} missing in {int(lacking.sum())}")
    text = (f"runs.csv: {int(complete.sum())} of {len(runs)} runs record "
            + ", ".join(required) + " (torch: CNN runs; image_digest: container runs)")
    if gaps:
        text += "; " + "; ".join(gaps)
    return _rule(5, NO if gaps else YES, text)


def _rule_ideal(scaling: pd.DataFrame) -> dict:
    if _is_empty(scaling) or "count" not in scaling:
        return _rule(6, NOT_APPLICABLE, "scaling.csv has no rows with numbers (no CNN "
                     "scaling series, or none with an undisturbed baseline run)")
    ok = _finite(scaling, "linear_time_s")
    text = (f"scaling.csv: linear_time_s (the ideal the scaling figure draws dashed; the "
            f"efficiency figures draw 100%) on {int(ok.sum())} of {len(scaling)} rows")
    if (~ok).any():
        text += f"; without: {named_rows(scaling[~ok])}"
    return _rule(6, NO if (~ok).any() else YES, text)


FIGURE_CHECKS = (  # the means a figure draws, and the table CI it draws as the error bar
    ("scaling", "time_s", "ci95_low", "ci95_high", "scaling.png"),
    ("scaling", "efficiency_pct", "efficiency_ci95_low_pct", "efficiency_ci95_high_pct",
     "efficiency figures"),
    ("overhead", "overhead_pct", "overhead_ci95_low_pct", "overhead_ci95_high_pct",
     "overhead figures"),
    ("llm", "mean", "ci95_low", "ci95_high", "llm.png (wall time)"),
    ("llm", "tokens_per_s", "tokens_per_s_ci95_low", "tokens_per_s_ci95_high",
     "llm.png (tokens/s)"),
)


def _rule_error_bars(tables: dict) -> dict:
    checked, with_ci, missing = _ci_gaps(tables, FIGURE_CHECKS)
    if not checked:
        return _rule(7, NOT_APPLICABLE, "no figure of a mean (no scaling, overhead or LLM rows)")
    text = (f"{with_ci} of {checked} means drawn in the scaling, efficiency, overhead and "
            "LLM figures have a 95% CI error bar; the peak-memory bars carry the 95% CI of "
            "their mean; the start-up and per-epoch figures draw every repeat instead")
    return _rule(7, NO if missing else YES, "; ".join([text, *[m.replace(" without a CI",
                                                                    " drawn without an error bar")
                                                            for m in missing]]))


def _is_empty(df: pd.DataFrame | None) -> bool:
    return df is None or df.empty


def rules_table(runs: pd.DataFrame | None = None, scaling: pd.DataFrame | None = None,
                llm: pd.DataFrame | None = None, overhead: pd.DataFrame | None = None,
                points: pd.DataFrame | None = None, alpha: float = 0.05) -> pd.DataFrame:
    """The benchmarking rules (``RULES``; Hoefler and Belli, SC15) a tool can check, each
    passed ("yes"), not ("no") or "not applicable" for this campaign, with the evidence:
    computed from the campaign's summary tables (runs.csv, scaling.csv, llm.csv,
    overhead.csv, points.csv), never assumed.

    1. baseline: every scaling row with a speedup / efficiency has baseline_time_s and
       time_s, every overhead native_s and time_s;
    2. points: every requested point not done (points.csv) has a reason;
    3. CIs: every estimate in ``CI_CHECKS`` has a finite 95% CI;
    4. normality: overhead.csv's paired rows with >= 3 pairs carry a Shapiro-Wilk
       normality_p_value, and none rejected at alpha kept a parametric CI; unpaired rows
       (Fieller / Welch, unchecked) fail it; scaling.csv's and llm.csv's Student t CIs
       are checked here on their undisturbed repeats (>= 3);
    5. tests: every slower / faster verdict has p_value < alpha, every equivalent one
       equivalence_p_value < alpha;
    6. provenance: every run has git_commit, start, end, hosts, launcher (torch for CNN
       runs, image_digest for container runs; block_id, probe_gflops, probe_gbps where
       runs.csv has the column);
    7. ideal lines: every scaling row has linear_time_s (the dashed ideal);
    8. error bars: every mean a figure draws (``FIGURE_CHECKS``) has its CI.
    """
    scaling = scaling_rows(scaling)  # not the rows saying why a series has no numbers
    tables = {"runs": runs, "scaling": scaling, "llm": llm, "overhead": overhead}
    rows = [
        _rule_baseline(scaling, overhead),
        _rule_points(points),
        _rule_ci(tables),
        _rule_normality(tables, alpha),
        _rule_tests(overhead, alpha),
        _rule_provenance(runs),
        _rule_ideal(scaling),
        _rule_error_bars(tables),
    ]
    return pd.DataFrame(rows, columns=RULES_COLUMNS)
