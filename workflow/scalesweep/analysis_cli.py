"""``scalesweep scaling`` and ``scalesweep overhead``: the analysis tables from a CSV file.

Each prints a CSV to stdout. Bad input ends in one line naming the file, and the
file's line number where a value is at fault.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from scalesweep import analysis
from scalesweep.cli import UsageError

# Printed decimals per output column; p-values get significant digits instead.
PERCENT_DECIMALS = 2
OTHER_DECIMALS = 4
P_VALUE_DIGITS = 4


def add_parser(subparsers) -> None:
    scaling = subparsers.add_parser(
        "scaling",
        help="speedup and parallel efficiency per node count",
        description="Rows with the same count are repeats; text columns group the table, "
        "other numeric columns are ignored unless named in --group-by.",
    )
    scaling.add_argument("file", type=Path, help="CSV with a count column and time_s")
    scaling.add_argument("--baseline", type=int, help="baseline count (default: smallest)")
    scaling.add_argument("--mode", choices=analysis.SCALING_MODES, default="strong")
    scaling.add_argument("--count-col", default="nodes", help="default: nodes")
    scaling.add_argument("--cv-threshold", type=_non_negative, default=0.05,
                         help="flag high_variance above this cv (default: 0.05)")
    _add_common(scaling)
    scaling.set_defaults(func=run_scaling)

    overhead = subparsers.add_parser(
        "overhead",
        help=f"container overhead, {analysis.OVERHEAD_DEFINITION}",
        description="Long layout: runtime,time_s plus grouping columns. Wide layout (no "
        "runtime column): one <runtime>_s column per runtime, the other columns group.",
    )
    overhead.add_argument("file", type=Path, help="CSV of runs")
    overhead.add_argument("--baseline-runtime", default="native", help="default: native")
    overhead.add_argument("--statistic", choices=analysis.STATISTICS, default="mean")
    _add_common(overhead)
    overhead.set_defaults(func=run_overhead)


def _add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--time-col", default="time_s", help="default: time_s")
    parser.add_argument("--group-by", type=lambda text: [c for c in text.split(",") if c],
                        default=[], metavar="COL[,COL]",
                        help="also group by these numeric columns")


def run_scaling(args: argparse.Namespace) -> int:
    runs = read_table(args.file)
    groups, ignored = _group_columns(args, runs, measured=(args.count_col, args.time_col))
    table = _analyse(args.file, analysis.scaling_table, runs, count_col=args.count_col,
                     time_col=args.time_col, group_cols=groups, baseline=args.baseline,
                     mode=args.mode, cv_threshold=args.cv_threshold)
    _note_ignored(args, ignored)
    _print_csv(table)
    return 0


def run_overhead(args: argparse.Namespace) -> int:
    runs = read_table(args.file)
    if "runtime" not in runs.columns and f"{args.baseline_runtime}_s" in runs.columns:
        runs = _melt_runtime_columns(runs, args.time_col)
        groups = [col for col in runs.columns if col not in ("runtime", args.time_col)]
        ignored = []
    else:
        groups, ignored = _group_columns(args, runs, measured=("runtime", args.time_col))
    table = _analyse(args.file, analysis.overhead_table, runs, time_col=args.time_col,
                     group_cols=groups, baseline_runtime=args.baseline_runtime,
                     statistic=args.statistic)
    if table.empty:
        raise UsageError(f"{args.file}: no runtime other than {args.baseline_runtime!r}")
    _note_ignored(args, ignored)
    # Without repeats there is no CI or test: leave those columns out, not empty.
    uncertainty = ["overhead_ci95_low_pct", "overhead_ci95_high_pct", "p_value", "significant"]
    _print_csv(table.drop(columns=[col for col in uncertainty if table[col].isna().all()]))
    return 0


def read_table(path: Path) -> pd.DataFrame:
    """The CSV at ``path``, its index the file's line numbers (header = line 1)."""
    if not path.is_file():
        raise UsageError(f"{path}: {'not a file' if path.exists() else 'no such file'}")
    try:
        # Blank lines are kept while numbering, then dropped, so labels stay true lines.
        table = pd.read_csv(path, dtype=str, skipinitialspace=True, skip_blank_lines=False)
    except pd.errors.EmptyDataError:
        raise UsageError(f"{path}: empty file") from None
    except (pd.errors.ParserError, UnicodeDecodeError) as exc:
        first_line = str(exc).strip().splitlines()[0]
        raise UsageError(f"{path}: not a readable CSV: {first_line}") from None
    table.index = pd.RangeIndex(2, len(table) + 2, name="line")
    table = table.dropna(how="all")
    if table.empty:
        raise UsageError(f"{path}: no data rows under the header")
    for col in table.columns:
        try:
            table[col] = pd.to_numeric(table[col])
        except ValueError:
            pass  # text, or a number column with a bad cell: errors quote it as typed
    return table


def _group_columns(args, runs: pd.DataFrame, measured: tuple[str, ...]):
    """(group columns, ignored columns): text columns and --group-by group the table."""
    absent = [col for col in args.group_by if col not in runs.columns]
    if absent:
        raise UsageError(f"{args.file}: no --group-by column {', '.join(absent)} "
                         f"(has {', '.join(runs.columns)})")
    rest = [col for col in runs.columns if col not in measured]
    numeric = [col for col in rest if pd.api.types.is_numeric_dtype(runs[col])]
    ignored = [col for col in numeric if col not in args.group_by]
    return [col for col in rest if col not in ignored], ignored


def _note_ignored(args, ignored: list[str]) -> None:
    # A numeric setting (gpus, ranks) left out of the groups would pool unlike runs as
    # repeats; say so once the table is made, so errors stay one line.
    if ignored:
        print(f"scalesweep {args.command}: note: ignored numeric column(s) "
              f"{', '.join(ignored)}; name them in --group-by to group by them",
              file=sys.stderr)


def _melt_runtime_columns(wide: pd.DataFrame, time_col: str) -> pd.DataFrame:
    """gpus,native_s,container_s -> gpus,runtime,time_s (one row per runtime)."""
    per_runtime = [col for col in wide.columns if col.endswith("_s")]
    ids = [col for col in wide.columns if col not in per_runtime]
    long = wide.melt(id_vars=ids, value_vars=per_runtime, var_name="runtime",
                     value_name=time_col, ignore_index=False)  # keep file line labels
    long["runtime"] = long["runtime"].str.removesuffix("_s")
    return long


def _analyse(path: Path, function, runs: pd.DataFrame, **kwargs) -> pd.DataFrame:
    try:
        return function(runs, **kwargs)
    except analysis.TableError as exc:
        raise UsageError(f"{path}: {exc}") from None


def _print_csv(table: pd.DataFrame) -> None:
    table = table.copy()
    for col in table.columns:
        if not pd.api.types.is_float_dtype(table[col]):
            continue
        if col == "p_value":
            table[col] = table[col].map(lambda p: float(f"{p:.{P_VALUE_DIGITS}g}"))
        elif col.endswith("_pct"):
            table[col] = table[col].round(PERCENT_DECIMALS)
        else:
            table[col] = table[col].round(OTHER_DECIMALS)
    table.to_csv(sys.stdout, index=False)


def _non_negative(text: str) -> float:
    value = float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, not {text}")
    return value
