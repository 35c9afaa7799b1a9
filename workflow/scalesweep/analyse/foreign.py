"""Foreign runs in a table of runs: a run measured under another config than this
campaign's gives for its point (``scalesweep.plan.identity``: a run copied from another
campaign, or measured before a workload's or dataset's settings changed). It is kept in
runs.csv (``foreign`` True, its reason in ``disturbed_reason``) and left out of every
statistic as a disturbed run is (``disturbed`` True: counted in n_disturbed);
points.csv and ``scalesweep status`` call its point ``foreign``, and
``scalesweep rerun --foreign`` measures it again. A run without a recorded identity
(measured before issue #40) is this campaign's, as before.

The marks are made from the config here, never kept in the runs cache (which is keyed by
each file alone, ``scalesweep.analyse.runcache``): a row's ``config_digest`` is compared
with the config's for its workload and runtime, and only a row whose digest differs has
its metrics.json read again, to name what differs.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from scalesweep.plan.identity import FOREIGN, config_digest, foreign_reason, measured_config


def mark(row: dict, metrics: dict, config: dict, expected: dict | None = None) -> dict:
    """A run's row (collect.run_row) marked foreign where its metrics say so
    (``expected``: the config's measured parts for its point, where known already)."""
    why = foreign_reason(metrics, config, expected)
    if why:
        row.update(foreign=True, disturbed=True, disturbed_reason="; ".join(
            r for r in (why, row.get("disturbed_reason") or "") if r))
    return row


def with_foreign(df: pd.DataFrame, config: dict, log=None) -> pd.DataFrame:
    """``df`` (collect_runs' table) with ``foreign`` set, and each foreign run's
    ``disturbed`` and ``disturbed_reason``; each foreign run named in ``log``."""
    log = log or (lambda text: None)
    df = df.assign(foreign=False)
    if "config_digest" not in df.columns or df.empty or "sweep" not in config:
        return df  # (no campaign's config: identity.foreign_reason)
    expected: dict = {}
    for i in df.index[df["config_digest"].notna()]:
        key = (df.at[i, "workload"], df.at[i, "runtime"])
        if key not in expected:
            try:
                measured = measured_config(config, *key)
                expected[key] = (measured, config_digest(measured))
            except Exception:  # noqa: BLE001 - named by foreign_reason below
                expected[key] = (None, None)
        measured, digest = expected[key]
        if df.at[i, "config_digest"] == digest:
            continue
        try:
            metrics = json.loads(Path(df.at[i, "path"]).read_text())
        except (OSError, ValueError):
            continue  # read a moment ago: gone since (the next summary says)
        row = mark({"disturbed_reason": df.at[i, "disturbed_reason"]}, metrics, config,
                   measured)  # this config's, computed once per workload and runtime
        if row.get("foreign"):
            df.loc[i, ["foreign", "disturbed", "disturbed_reason"]] = [
                True, True, row["disturbed_reason"]]
            log(f"warning: {df.at[i, 'path']}: {row['disturbed_reason']}; kept in runs.csv, "
                "left out of the statistics (`scalesweep rerun --foreign` measures it again)")
    return df


def is_foreign(reason: str) -> bool:
    """Whether a disturbed run's reason (runs.csv's disturbed_reason) marks it foreign."""
    return str(reason or "").startswith(FOREIGN)


def print_foreign(table: pd.DataFrame, rerun_command: str) -> None:
    """What ``scalesweep status`` says of the foreign runs of its ``table`` (nothing
    where there are none)."""
    for line in _status_lines(table, rerun_command):
        print(line)


def _status_lines(table: pd.DataFrame, rerun_command: str) -> list[str]:
    foreign = table[table["state"] == "foreign"]
    if foreign.empty:
        return []
    return [f"\n{len(foreign)} foreign run(s) left out of the statistics (kept on disk, marked "
            "in runs.csv): measured under another config than this campaign's for the point:",
            *(f"  {path}: {reason}" for path, reason in zip(foreign["path"], foreign["reason"])),
            "To measure them again under this config (each kept in its point's history/):",
            f"  {rerun_command}"]
