"""``scalesweep fit``: Amdahl / USL fits and predictions for any ``nodes,time_s`` CSV.

Input rules are ``scalesweep scaling``'s (``analysis_cli``): rows of the same group and
count are repeats, runs marked disturbed are left out, and the table is grouped by every
column that is not a measurement (``analysis_cli.GROUPING_RULE``; ``--group-by`` narrows
it, and is refused where it would pool unlike runs). Prints, per group and law, the
parameters with 95% CIs, the fit quality, and the predictions asked for, or why there are
none. ``--csv`` prints one CSV row per group and law instead.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from scalesweep.campaign import analysis_cli


from scalesweep.analyse import fits
PARAM_LABELS = {"t1_s": "T1 (s, at count 1)", "serial_fraction": "serial fraction s",
                "sigma": "contention sigma", "kappa": "coherency kappa"}


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "fit",
        help="fit Amdahl's law / the USL to a scaling series and predict other counts",
        description="Rows of the same group and count are repeats; runs marked disturbed "
        "are left out. "
        + analysis_cli.GROUPING_RULE.replace("every column that is", "every column (but "
                                             "the count) that is")
        + " Fits are least "
        f"squares on log(time); CIs are seeded bootstraps. Predictions are refused when a "
        f"fit's R^2(log) < {fits.MIN_R2_LOG} or its lack of fit > "
        f"{fits.MAX_LACK_OF_FIT_LOG} (log), or with fewer counts than parameters + 1.",
    )
    p.add_argument("file", type=Path, help="CSV with a count column and time_s")
    p.add_argument("--model", choices=[*fits.MODELS, "both"], default="both")
    p.add_argument("--predict", type=_counts, default=[], metavar="N[,N]",
                   help="counts to predict, e.g. 256,512")
    p.add_argument("--count-col", default=None, help="default: nodes (a campaign's "
                   "runs.csv: count, as fits.csv)")
    p.add_argument("--time-col", default="time_s", help="default: time_s")
    p.add_argument("--baseline", type=int, help="efficiency baseline count (default: smallest)")
    analysis_cli.add_group_by(p)
    p.add_argument("--bootstrap", type=_non_negative_int, default=fits.DEFAULT_BOOTSTRAP,
                   metavar="N", help=f"bootstrap resamples (default: {fits.DEFAULT_BOOTSTRAP})")
    p.add_argument("--seed", type=int, default=fits.DEFAULT_SEED, help="bootstrap seed")
    p.add_argument("--csv", action="store_true", help="one CSV row per group and law")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    runs = analysis_cli.read_table(args.file)
    record = analysis_cli.campaign_of(args, runs, {
        "--count-col": args.count_col, "--baseline": args.baseline,
        "--group-by": args.group_by,
        "--time-col": args.time_col if args.time_col != "time_s" else None,
        "--model": args.model if args.model != "both" else None,
        "--bootstrap": args.bootstrap if args.bootstrap != fits.DEFAULT_BOOTSTRAP else None,
        "--seed": args.seed if args.seed != fits.DEFAULT_SEED else None})
    args.count_col = args.count_col or "nodes"
    if record is not None:
        found = fits.campaign_fits(runs, record["config"])
        args.count_col = "count"
        analysis_cli.note_campaign(args, record, "fits.csv")
        return _print_fits(args, [(values, fit) for values, _, fitted in found
                                  for fit in fitted])
    groups, ignored = analysis_cli.group_columns(
        args, runs, key=args.count_col, time_col=args.time_col, key_role="count")
    runs, disturbed = analysis_cli.drop_disturbed(args, runs)
    models = list(fits.MODELS) if args.model == "both" else [args.model]
    results = analysis_cli.analyse(
        args.file, fits.fit_groups, analysis_cli.keyed(runs, groups), group_cols=groups,
        models=models, count_col=args.count_col, time_col=args.time_col,
        baseline=args.baseline, n_boot=args.bootstrap, seed=args.seed)
    analysis_cli.note_ignored(args, runs, ignored, groups, disturbed)
    return _print_fits(args, results)


def _print_fits(args, results) -> int:
    predictions = [fits.predict(fit, args.predict) for _, fit in results]
    if args.csv:
        fits_csv(results, predictions).to_csv(sys.stdout, index=False, float_format="%.6g")
        return 0
    last_group = None
    for (group, fit), predicted in zip(results, predictions):
        if group != last_group:
            label = ", ".join(f"{k}={v}" for k, v in group.items()) or "the table"
            print(f"== {label}: {args.count_col} {', '.join(map(str, fit.counts))}")
            last_group = group
        for line in describe(fit, predicted, args.count_col):
            print(line)
    return 0


def describe(fit: fits.Fit, predicted: pd.DataFrame, count_name: str) -> list[str]:
    """The lines printed for one fit."""
    lines = [f"{fit.model}:"]
    if not fit.fitted:
        return lines + [f"  not fitted: {fit.reason}"]
    for name, value in fit.params.items():
        low, high = fit.ci95[name]
        lines.append(f"  {PARAM_LABELS[name]} = {value:.4g}  (95% CI {low:.4g} .. {high:.4g})")
    lines.append(f"  fit: R^2(log) {fit.r2_log:.4f}, RMSE(log) {fit.rmse_log:.4f}, lack of "
                 f"fit (log) {fit.lack_of_fit_log:.4f}; bootstrap over {fit.bootstrap}, "
                 f"{fit.n_boot} resamples, seed {fit.seed}")
    per_count = fit.residuals.groupby("count")["residual_pct"].mean()
    lines.append("  residuals (measured vs fitted, mean per count): " + ", ".join(
        f"{c}: {r:+.1f}%" for c, r in per_count.items()))
    if not fit.can_predict:
        lines.append(f"  {fit.reason}")
    for _, row in predicted.iterrows():
        if pd.isna(row["time_s"]):
            continue
        where = "measured" if row["measured"] else (
            f"extrapolated {row['extrapolation_factor']:g}x" if row["extrapolation_factor"] > 1
            else "interpolated")
        lines.append(f"  {fits.describe_prediction(row, count_name)} ({where})")
    return lines


def fits_csv(results, predictions) -> pd.DataFrame:
    """One row per group x law: group columns, ``fits.FIT_COLUMNS``, then per predicted
    count N: time_s_at_N (+ _ci95_low/_high) and efficiency_pct_at_N (+ CI)."""
    rows = []
    for (group, fit), predicted in zip(results, predictions):
        row = {**group, **fits.fit_row(fit)}
        for _, p in predicted.iterrows():
            n = p["count"]
            row.update({
                f"time_s_at_{n}": p["time_s"], f"time_s_at_{n}_ci95_low": p["time_ci95_low"],
                f"time_s_at_{n}_ci95_high": p["time_ci95_high"],
                f"efficiency_at_{n}_pct": p["efficiency_pct"],
                f"efficiency_at_{n}_ci95_low_pct": p["efficiency_ci95_low_pct"],
                f"efficiency_at_{n}_ci95_high_pct": p["efficiency_ci95_high_pct"],
            })
        rows.append(row)
    return pd.DataFrame(rows)


def _counts(text: str) -> list[int]:
    try:
        counts = [int(c) for c in text.split(",") if c.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"counts must be whole numbers, not {text!r}") from None
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"counts must be positive whole numbers, not {text!r}")
    return counts


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, not {text}")
    return value
