"""``scalesweep scaling`` and ``scalesweep overhead``: the analysis tables from a CSV file.

Each prints one table to stdout: CSV by default (pipe-friendly), a Markdown table with
``--format markdown``; notes go to stderr. Bad input ends in one line naming the file,
and the file's line number where a value is at fault.

Rows are grouped by every column that is not a measurement (``GROUPING_RULE``,
``group_columns``), so runs that differ in a setting are never pooled; ``--group-by``
narrows the grouping, and is refused where it would pool rows that differ in another
setting. ``scalesweep fit`` (``fits_cli``) and ``scalesweep compare`` share the helpers.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from scalesweep.analyse.frame import TableError, truthy
from scalesweep.analyse.overhead import STATISTICS, overhead_table, verdict_table
from scalesweep.analyse.pairing import SAME_BLOCK
from scalesweep.analyse.scaling import SCALING_MODES, scaling_table
from scalesweep.analyse.verdict import (EQUIVALENCE_MARGIN_PCT, OVERHEAD_DEFINITION,
                                        TARGET_CI_PP)

from scalesweep.campaign.usage import UsageError
from scalesweep.record import columns

# Printed decimals per output column; p-values get significant digits instead.
PERCENT_DECIMALS = 2
OTHER_DECIMALS = 4
P_VALUE_DIGITS = 4
FORMATS = ("csv", "markdown")

# --- which columns group: every setting; never a measurement --------------------------------

# The column numbering the repeats of a point (the first present is the one): never a
# setting; overhead pairs native and container runs on it.
REPEAT_COLUMNS = ("repeat", "rep", "repetition", "trial", "iteration")

GROUPING_RULE = (
    "Grouping: rows are grouped by the columns scalesweep.record.columns declares as sweep "
    "axes (workload, runtime, nodes, gpus, ranks, threads, model, ...) and by text columns "
    "it does not declare (labels such as task or site), so runs that differ in a setting "
    "are never pooled. A declared measurement (time_s, images_per_s, "
    "achieved_gflops_per_rank, ..., each with its unit), the run's identity (repeat, "
    "block_id) and provenance (path, hosts, start, end, git_commit, disturbed, ...) never "
    "group, nor do the statistics of a summary table read back (speedup, efficiency_pct, "
    "overhead_pct, ...); count and world_size (derived from the point) do not group but "
    "must be the same within a row, and so must a number column the declaration does not "
    "name (where one differs within a row the command refuses, naming it: --group-by it "
    "if it is a setting). --group-by COL[,COL] groups by those columns only (--group-by "
    "'' by none); where another setting then differs within a row the command refuses, "
    "naming it, instead of pooling."
)


def is_measurement(column: str) -> bool:
    """Whether ``column`` never groups by default: a declared measurement, provenance or
    identity column (``scalesweep.record.columns``; no guessing from its name)."""
    return columns.is_measurement(column)


def is_setting(runs: pd.DataFrame, column: str) -> bool:
    """Whether ``column`` groups by default: a declared axis, or a text column the
    declaration does not name (a label: a measurement is a number with its unit)."""
    declared = columns.role(column)
    if declared is not None:
        return declared == columns.AXIS
    return not pd.api.types.is_numeric_dtype(runs[column])


def repeat_column(runs: pd.DataFrame) -> str | None:
    """The column numbering repeats (the first of ``REPEAT_COLUMNS`` present), or None."""
    lower = {str(col).lower(): col for col in runs.columns}
    return next((lower[name] for name in REPEAT_COLUMNS if name in lower), None)


# --- the commands ------------------------------------------------------------------------------

def add_parser(subparsers) -> None:
    scaling = subparsers.add_parser(
        "scaling",
        help="speedup and parallel efficiency per node count",
        description="Speedup and parallel efficiency per group and count. Rows of the "
        "same group and count are repeats; runs marked disturbed are left out. "
        + GROUPING_RULE.replace("every column that is", "every column (but the count) "
                                "that is"),
    )
    scaling.add_argument("file", type=Path, help="CSV with a count column and time_s")
    scaling.add_argument("--baseline", type=int, help="baseline count (default: smallest)")
    scaling.add_argument("--mode", choices=SCALING_MODES, default=None,
                         help="default: strong (a campaign's runs.csv: each workload's own)")
    scaling.add_argument("--count-col", default=None, help="default: nodes (a campaign's "
                         "runs.csv: count, as scaling.csv)")
    scaling.add_argument("--cv-threshold", type=non_negative, default=None,
                         help="flag high_variance above this cv (default: 0.05, or the "
                         "campaign's analysis.cv_threshold)")
    _add_common(scaling)
    scaling.set_defaults(func=run_scaling)

    overhead = subparsers.add_parser(
        "overhead",
        help=f"container overhead, {OVERHEAD_DEFINITION}, with its verdict",
        description="Container overhead against the baseline runtime with its 95% CI, "
        "p-value and verdict (equivalent / slower / faster / inconclusive, as in "
        "results/summary/overhead.csv), per group and runtime; paired on the repeat "
        "column where each repeat occurs once per runtime, runs marked disturbed counted "
        "and left out. Long layout: runtime,time_s plus other columns. Wide layout (no "
        "runtime column): every *_s column is one runtime's time (<runtime>_s), the "
        "same grouping in both. " + GROUPING_RULE.replace("every column that is", "every column (but "
                                            "the runtime) that is"),
    )
    overhead.add_argument("file", type=Path, help="CSV of runs")
    overhead.add_argument("--baseline-runtime", default="native", help="default: native")
    overhead.add_argument("--statistic", choices=STATISTICS, default="mean",
                          help="also print the overhead of this statistic of the repeats "
                          "(median, min: extra columns; the verdict is on means)")
    overhead.add_argument("--margin-pct", type=non_negative, default=None,
                          help="equivalence margin: 'equivalent' when the 90%% CI lies "
                          "within +-this (default: the campaign's, from campaign.json "
                          f"beside the file; else {EQUIVALENCE_MARGIN_PCT:g})")
    overhead.add_argument("--target-ci-pp", type=non_negative, default=None,
                          help="95%% CI half-width the repeats_needed column aims at "
                          "(default: the campaign's; else "
                          f"{TARGET_CI_PP:g})")
    _add_common(overhead)
    overhead.set_defaults(func=run_overhead)


def add_group_by(parser: argparse.ArgumentParser) -> None:
    """The ``--group-by COL[,COL]`` option of every analysis command (``group_columns``)."""
    parser.add_argument("--group-by", type=lambda text: [c for c in text.split(",") if c],
                        default=None, metavar="COL[,COL]",
                        help="group by these columns only ('' for none: one series); "
                        "default: every column that is not a measurement. Refused where "
                        "rows would pool runs that differ in another setting")


def add_format(parser: argparse.ArgumentParser) -> None:
    """The ``--format csv|markdown`` option (``print_table``)."""
    parser.add_argument("--format", choices=FORMATS, default="csv",
                        help="stdout as CSV (default) or a Markdown table")


def _add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--time-col", default="time_s", help="default: time_s")
    add_group_by(parser)
    add_format(parser)


# --- a campaign's own runs.csv: the campaign's answers, exactly --------------------------

def add_verdict_options(parser: argparse.ArgumentParser) -> None:
    """``--margin-pct`` and ``--target-ci-pp`` of a command that reads a campaign's
    runs.csv (``verdict_config``)."""
    parser.add_argument("--margin-pct", type=non_negative, default=None,
                        help="equivalence margin (default: the campaign's; else "
                        f"{EQUIVALENCE_MARGIN_PCT:g})")
    parser.add_argument("--target-ci-pp", type=non_negative, default=None,
                        help=f"CI half-width target (default: the campaign's; else "
                        f"{TARGET_CI_PP:g})")


def verdict_config(args, runs: pd.DataFrame) -> tuple[dict, dict | None]:
    """(config, campaign record) a verdict over ``args.file`` uses: the campaign's own
    config where its campaign.json is beside the file and no option asks for another
    analysis (``campaign_of``), else one of the options' margin and CI target (or their
    defaults)."""
    record = campaign_of(args, runs, {"--margin-pct": args.margin_pct,
                                      "--target-ci-pp": args.target_ci_pp})
    if record is not None:
        return record["config"], record
    return {"measurement": {
        "equivalence_margin_pct": EQUIVALENCE_MARGIN_PCT if args.margin_pct is None else args.margin_pct,
        "target_ci_pp": TARGET_CI_PP if args.target_ci_pp is None else args.target_ci_pp}}, None


def campaign_of(args, runs: pd.DataFrame, overrides: dict) -> dict | None:
    """The campaign record (``collect.campaign_record``: results/summary/campaign.json)
    when ``args.file`` is a campaign's runs.csv with its campaign.json beside it and no
    option asks for another analysis (``overrides``: option -> value, given when not
    None/False); None otherwise (the table is analysed with the options' defaults)."""
    import json

    from scalesweep.analyse.summary import CAMPAIGN_JSON

    record_path = Path(args.file).parent / CAMPAIGN_JSON
    if not record_path.is_file() or not {"block_id", "payload", "arm"} <= set(runs.columns):
        return None
    given = [name for name, value in overrides.items() if value not in (None, False)]
    if given:
        note(args, f"{', '.join(given)} given: analysing {args.file} with these options, "
                   f"not as its campaign did ({record_path})")
        return None
    try:
        record = json.loads(record_path.read_text())
    except (OSError, ValueError) as exc:
        raise UsageError(f"{record_path}: unreadable ({exc})") from None
    if not isinstance(record.get("config"), dict):
        raise UsageError(f"{record_path}: no campaign config in it")
    return record


def note_campaign(args, record: dict, table_name: str) -> None:
    s = record.get("settings") or {}
    note(args, f"the campaign's own analysis, as in {Path(args.file).parent / table_name} "
               f"(from {Path(args.file).parent / 'campaign.json'}: margin "
               f"+-{s.get('margin_pct', '?')}%, CI target {s.get('target_ci_pp', '?')} "
               f"pp, {SAME_BLOCK}, pairs more than {s.get('max_pair_gap_s', '?')} "
               "s apart left out); any option of the command analyses the file "
               "with that option instead")


def _campaign_table(args, function, runs, record, table_name):
    logs: list[str] = []
    try:
        table = function(runs, record["config"], logs.append)
    except (TableError, KeyError, ValueError) as exc:
        raise UsageError(f"{args.file}: {exc}") from None
    for line in logs:
        note(args, line)
    note_campaign(args, record, table_name)
    return table


def run_scaling(args: argparse.Namespace) -> int:
    runs = read_table(args.file)
    record = campaign_of(args, runs, {
        "--baseline": args.baseline, "--mode": args.mode, "--count-col": args.count_col,
        "--group-by": args.group_by, "--time-col": args.time_col if args.time_col != "time_s" else None,
        "--cv-threshold": args.cv_threshold})
    if record is not None:
        from scalesweep.analyse.summary import scaling_summary

        table = _campaign_table(args, scaling_summary, runs, record, "scaling.csv")
        print_table(table, args.format)
        return 0
    args.mode = args.mode or "strong"
    args.count_col = args.count_col or "nodes"
    args.cv_threshold = 0.05 if args.cv_threshold is None else args.cv_threshold
    groups, ignored = group_columns(args, runs, key=args.count_col, time_col=args.time_col,
                                    key_role="count")
    runs, disturbed = drop_disturbed(args, runs)
    table = analyse(args.file, scaling_table, keyed(runs, groups),
                    count_col=args.count_col, time_col=args.time_col, group_cols=groups,
                    baseline=args.baseline, mode=args.mode, cv_threshold=args.cv_threshold)
    note_ignored(args, runs, ignored, groups, disturbed)
    if groups and len(table) > 1 and table.groupby(groups, dropna=False).size().max() == 1:
        note(args, f"every row is its own group, one {args.count_col} each: some grouping "
                   f"column varies with {args.count_col}; --group-by the columns of a "
                   "series to scale across it")
    print_table(table, args.format)
    return 0


def run_overhead(args: argparse.Namespace) -> int:
    runs = read_table(args.file)
    record = campaign_of(args, runs, {
        "--margin-pct": args.margin_pct, "--target-ci-pp": args.target_ci_pp,
        "--group-by": args.group_by,
        "--baseline-runtime": (args.baseline_runtime
                               if args.baseline_runtime != "native" else None),
        "--time-col": args.time_col if args.time_col != "time_s" else None})
    if record is not None:
        from scalesweep.analyse.summary import overhead_summary
        from scalesweep.report.significance import add_q_values

        table = add_q_values(
            _campaign_table(args, overhead_summary, runs, record, "overhead.csv"))
        if args.statistic != "mean":
            note(args, "--statistic is for other tables; a campaign's verdicts are on "
                       "same-block pairs (geometric means)")
        print_table(table, args.format)
        return 0
    if args.margin_pct is None:
        args.margin_pct = EQUIVALENCE_MARGIN_PCT
    if args.target_ci_pp is None:
        args.target_ci_pp = TARGET_CI_PP
    if "runtime" not in runs.columns and f"{args.baseline_runtime}_s" in runs.columns:
        runs = _melt_runtime_columns(runs, args.time_col)
    groups, ignored = group_columns(args, runs, key="runtime", time_col=args.time_col,
                                    key_role="runtime")
    if args.time_col in runs.columns:
        _require_positive(args.file, runs, args.time_col)
    runs = keyed(drop_warmup(args, runs), groups)
    # runs of one block were measured together: paired on it where the table has it
    repeat = ("block_id" if "block_id" in runs.columns and runs["block_id"].notna().all()
              else repeat_column(runs))
    table = analyse(args.file, verdict_table, runs, group_cols=groups,
                    runtime_col="runtime", time_col=args.time_col,
                    baseline_runtime=args.baseline_runtime, pair_col=repeat,
                    exclude_col="disturbed", margin_pct=args.margin_pct,
                    target_ci_pp=args.target_ci_pp)
    if table.empty:
        raise UsageError(f"{args.file}: no runtime other than {args.baseline_runtime!r}")
    from scalesweep.analyse.multiplicity import adjust_verdicts

    # the table's comparisons are one family, as a campaign's are
    table = adjust_verdicts(table)
    if args.statistic != "mean":
        table = _with_statistic(args, runs, table, groups)
    note_ignored(args, runs, ignored, groups)
    print_table(table, args.format)
    return 0


def _with_statistic(args, runs: pd.DataFrame, table: pd.DataFrame,
                    groups: list[str]) -> pd.DataFrame:
    """``table`` plus native_<stat>_s, <stat>_s and overhead_<stat>_pct of the valid runs
    (``scalesweep.analyse.overhead.overhead_table``), after overhead_pct."""
    stat = args.statistic
    valid = runs
    if "disturbed" in runs.columns:
        valid = runs[~runs["disturbed"].map(truthy).astype(bool)]
    extra = analyse(args.file, overhead_table, valid, time_col=args.time_col,
                    group_cols=groups, baseline_runtime=args.baseline_runtime,
                    statistic=stat)
    names = {"native_s": f"native_{stat}_s", "time_s": f"{stat}_s",
             "overhead_pct": f"overhead_{stat}_pct"}
    extra = extra[[*groups, "runtime", *names]].rename(columns=names)
    merged = table.merge(extra, on=[*groups, "runtime"], how="left")
    order = list(table.columns)
    at = order.index("overhead_pct") + 1
    return merged[order[:at] + list(names.values()) + order[at:]]


# --- shared by scaling, overhead, fit and compare ----------------------------------------------

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


def group_columns(args, runs: pd.DataFrame, key: str, time_col: str,
                  key_role: str = "count") -> tuple[list[str], list[str]]:
    """(group columns, ignored columns) of ``runs`` by ``GROUPING_RULE``.

    ``key``: the column the analysis runs along within a group (the count column for
    scaling and fits, the runtime column for overhead); it, ``time_col`` and the repeat
    column never group. Without ``args.group_by`` every other column that is a setting
    (``is_setting``: a declared axis, or an undeclared text column) groups, except
    columns with no value at all. With it (a list, maybe empty), only the columns it
    names group. Ignored: the measurement columns left out. Raises UsageError (naming
    the file) when ``args.group_by`` names an absent column or one of the analysis' own,
    or when a setting or derived column left out of the groups differs within a group x
    ``key`` cell: the analysis would pool unlike runs there."""
    narrowed = args.group_by is not None
    group_by = list(dict.fromkeys(args.group_by or []))
    absent = [col for col in group_by if col not in runs.columns]
    if absent:
        raise UsageError(f"{args.file}: no --group-by column {', '.join(absent)} "
                         f"(has {', '.join(map(str, runs.columns))})")
    roles = {time_col: "time", key: key_role}
    repeat = repeat_column(runs)
    if repeat is not None:
        roles.setdefault(repeat, "repeat")
    for col in group_by:
        if col in roles:
            raise UsageError(f"{args.file}: --group-by cannot name {col}: it is the "
                             f"{roles[col]} column, which the analysis runs along")
    rest = [col for col in runs.columns if col not in roles]
    ignored = [col for col in rest if is_measurement(col) and col not in group_by]
    if narrowed:
        groups = [col for col in rest if col in group_by]
    else:
        groups = [col for col in rest if is_setting(runs, col) and runs[col].notna().any()]
    unchecked = set(groups) | set(ignored)
    left_out = [col for col in rest if col not in unchecked and runs[col].notna().any()]
    cells = [*groups, *([key] if key in runs.columns else [])]
    varying = _varying_within(runs, cells, left_out)
    if varying:
        how = (f"--group-by '{','.join(group_by)}'" if narrowed
               else "grouping by every setting")
        undeclared = [col for col in varying if columns.role(col) is None]
        why = (f"; {', '.join(undeclared)}: not declared in scalesweep.record.columns"
               if undeclared and not narrowed else "")
        raise UsageError(f"{args.file}: {how} would pool runs that differ in "
                         f"{', '.join(varying)} ({_example(runs, cells, varying[0])}){why}; "
                         f"name {'it' if len(varying) == 1 else 'them'} in --group-by too")
    return groups, ignored


def _varying_within(runs: pd.DataFrame, cells: list[str], cols: list[str]) -> list[str]:
    """The ``cols`` that take more than one value (empty counts as one) in some cell."""
    if not cols:
        return []
    if cells:
        counts = runs.groupby(cells, dropna=False, sort=False)[cols].nunique(dropna=False)
        return [col for col in cols if (counts[col] > 1).any()]
    return [col for col in cols if runs[col].nunique(dropna=False) > 1]


def _example(runs: pd.DataFrame, cells: list[str], col: str) -> str:
    """Where ``col`` varies, e.g. 'gpus=1, runtime=native has ranks 1, 2'."""
    parts = runs.groupby(cells, dropna=False, sort=False) if cells else [((), runs)]
    for key, cell in parts:
        values = cell[col].drop_duplicates()
        if len(values) > 1:
            key = key if isinstance(key, tuple) else (key,)
            where = ", ".join(f"{c}={_shown(v)}" for c, v in zip(cells, key)) or "the table"
            shown = ", ".join(_shown(v) for v in values[:4])
            return f"{where} has {col} {shown}{', ...' if len(values) > 4 else ''}"
    return ""


def _shown(value) -> str:
    return "(empty)" if pd.isna(value) else str(value)


def keyed(runs: pd.DataFrame, groups: list[str]) -> pd.DataFrame:
    """``runs`` with empty cells of the group columns made explicit keys ('' in text
    columns, <NA> in number columns), so that such rows form their own groups and keep
    every statistic (a NaN key is not found again where one is looked up)."""
    runs = runs.copy()
    for col in groups:
        values = runs[col]
        if not values.isna().any():
            continue
        if pd.api.types.is_numeric_dtype(values):
            present = values.dropna()
            whole = bool((present % 1 == 0).all())
            runs[col] = values.astype("Int64" if whole else "Float64")
        else:
            runs[col] = values.fillna("")
    return runs


def drop_warmup(args, runs: pd.DataFrame) -> pd.DataFrame:
    """The runs not marked in a ``warmup`` column (a campaign's warm-up blocks:
    measurement.warmup_blocks), said in a note where some were; UsageError when none is
    left."""
    if "warmup" not in runs.columns:
        return runs
    warmup = runs["warmup"].map(truthy).astype(bool)
    if warmup.all():
        raise UsageError(f"{args.file}: every run is marked warmup; nothing to analyse")
    if warmup.any():
        note(args, f"{int(warmup.sum())} run(s) marked warmup (warm-up blocks) left out")
    return runs[~warmup]


def drop_disturbed(args, runs: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """(the runs marked neither in a ``warmup`` column (``drop_warmup``) nor in a
    ``disturbed`` one, how many were disturbed); UsageError when none is left."""
    runs = drop_warmup(args, runs)
    if "disturbed" not in runs.columns:
        return runs, 0
    disturbed = runs["disturbed"].map(truthy).astype(bool)
    if disturbed.all():
        raise UsageError(f"{args.file}: every run is marked disturbed; nothing to analyse")
    return runs[~disturbed], int(disturbed.sum())


def analyse(path: Path, function, runs: pd.DataFrame, **kwargs) -> pd.DataFrame:
    """``function(runs, **kwargs)``, a ``TableError`` turned into a UsageError
    naming ``path``."""
    try:
        return function(runs, **kwargs)
    except TableError as exc:
        raise UsageError(f"{path}: {exc}") from None


def note(args, text: str) -> None:
    """One note line on stderr: ``scalesweep <command>: note: <text>``."""
    print(f"scalesweep {args.command}: note: {text}", file=sys.stderr)


def note_ignored(args, runs: pd.DataFrame, ignored: list[str], groups: list[str] = (),
                 disturbed: int = 0) -> None:
    """The grouping on stderr (``group_columns``' result): the group columns, the
    measurement columns of ``runs`` ignored (numeric and text apart) and how many runs
    marked disturbed were left out. Printed once the table is made, so that errors stay
    one line."""
    parts = []
    if groups:
        parts.append(f"grouped by {', '.join(groups)}")
    numeric = [c for c in ignored if pd.api.types.is_numeric_dtype(runs[c])]
    text = [c for c in ignored if c not in numeric]
    if numeric:
        parts.append(f"ignored numeric column(s) {', '.join(numeric)}")
    if text:
        parts.append(f"ignored text column(s) {', '.join(text)}")
    if ignored:
        parts[-1] += " (measurements and provenance; --group-by names the columns to group by)"
    if disturbed:
        parts.append(f"{disturbed} run(s) marked disturbed left out")
    if parts:
        note(args, "; ".join(parts))


def print_table(table: pd.DataFrame, fmt: str = "csv", file=None) -> None:
    """``table`` on stdout (or ``file``) as CSV or a Markdown table, floats rounded:
    p-values to 4 significant digits, *_pct / *_pp to 2 decimals, others to 4."""
    table = table.copy()
    for col in table.columns:
        if not pd.api.types.is_float_dtype(table[col]):
            continue
        if col.endswith("p_value"):
            table[col] = table[col].map(
                lambda p: p if pd.isna(p) else float(f"{p:.{P_VALUE_DIGITS}g}"))
        elif col.endswith(("_pct", "_pp")):
            table[col] = table[col].round(PERCENT_DECIMALS)
        else:
            table[col] = table[col].round(OTHER_DECIMALS)
    out = sys.stdout if file is None else file
    if fmt == "markdown":
        out.write(markdown_table(table))
    else:
        table.to_csv(out, index=False)


def markdown_table(table: pd.DataFrame) -> str:
    """A GitHub-flavoured Markdown table (numbers right-aligned, empty cells blank)."""
    def cell(value) -> str:
        if value is None or (not isinstance(value, str) and pd.isna(value)):
            return ""
        return str(value).replace("|", "\\|").replace("\n", " ")

    rows = [[cell(v) for v in row] for row in table.itertuples(index=False, name=None)]
    header = [cell(col) for col in table.columns]
    widths = [max([len(h), 3, *(len(r[i]) for r in rows)]) for i, h in enumerate(header)]
    right = [pd.api.types.is_numeric_dtype(table[col])
             and not pd.api.types.is_bool_dtype(table[col]) for col in table.columns]

    def line(cells) -> str:
        return "| " + " | ".join(c.rjust(w) if r else c.ljust(w)
                                 for c, w, r in zip(cells, widths, right)) + " |"

    rule = "| " + " | ".join("-" * (w - 1) + ":" if r else "-" * w
                             for w, r in zip(widths, right)) + " |"
    return "\n".join([line(header), rule, *map(line, rows)]) + "\n"


def non_negative(text: str) -> float:
    """argparse type: a number >= 0 (NaN and negative values refused)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number >= 0, not {text!r}") from None
    if not value >= 0:  # NaN compares False
        raise argparse.ArgumentTypeError(f"must be >= 0, not {text}")
    return value


def _require_positive(path: Path, runs: pd.DataFrame, col: str) -> None:
    """Every ``col`` value a positive number; else a UsageError naming the first bad line."""
    values = pd.to_numeric(runs[col], errors="coerce")
    ok = (values.notna() & np.isfinite(values) & (values > 0)).to_numpy()
    if ok.all():
        return
    first = int(np.flatnonzero(~ok)[0])
    label, value = runs.index[first], runs[col].iloc[first]
    shown = "an empty cell" if pd.isna(value) else f"'{value}'"
    raise UsageError(f"{path}: {col} must be a positive number; line {label} has {shown}")


def _melt_runtime_columns(wide: pd.DataFrame, time_col: str) -> pd.DataFrame:
    """gpus,native_s,container_s -> gpus,runtime,time_s (one row per runtime)."""
    per_runtime = [col for col in wide.columns if col.endswith("_s")]
    ids = [col for col in wide.columns if col not in per_runtime]
    long = wide.melt(id_vars=ids, value_vars=per_runtime, var_name="runtime",
                     value_name=time_col, ignore_index=False)  # keep file line labels
    long["runtime"] = long["runtime"].str.removesuffix("_s")
    return long
