"""The report's "made" table (made.csv): what report.html was made from: when, the
workflow's commit, the runs' commits, hosts and site, and the significance statements.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from scalesweep.record.metrics import SOURCE_COMMIT_FILE, git_commit

from scalesweep.report.significance import SHOWN
from scalesweep.report.tables import flags

MADE_COLUMNS = ["item", "value"]


def workflow_commit(code_root) -> str:
    """The workflow's commit: an installed wheel's (the SOURCE_COMMIT its build wrote), or
    the git checkout's that ``code_root`` is, with " + uncommitted changes" where tracked
    files differ from it; "unknown (not a git checkout)" otherwise."""
    import subprocess

    head = git_commit(code_root, environment=False)
    if not head:
        return "unknown (not a git checkout)"
    if (Path(code_root) / SOURCE_COMMIT_FILE).is_file():
        return f"{head} (an installed package built from it)"
    try:
        out = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                             cwd=code_root, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return head
    return head + (" + uncommitted changes" if out.returncode == 0 and out.stdout.strip()
                   else "")


def _utc(value) -> str:
    """A time as the tables print it: 2025-01-31 01:36:05 UTC ('' where unknown)."""
    t = pd.to_datetime(value, utc=True, errors="coerce")
    return "" if pd.isna(t) else t.strftime("%Y-%m-%d %H:%M:%S UTC")


def _commits(runs: pd.DataFrame) -> str:
    if "git_commit" not in runs.columns or runs.empty:
        return "not recorded"
    commits = runs["git_commit"].where(runs["git_commit"].notna(), None)
    counts = commits.dropna().astype(str).value_counts()
    parts = [f"{c[:12]} ({n} run{'s' if n != 1 else ''})" for c, n in counts.items()]
    missing = int(commits.isna().sum())
    if missing:
        parts.append(f"not recorded ({missing} run{'s' if missing != 1 else ''})")
    return "; ".join(parts)


def with_significance(made: pd.DataFrame, significance: pd.DataFrame) -> pd.DataFrame:
    """made.csv with one row per family of ``significance_table`` (its statement): the
    report's front page shows made.csv, and the ten-column significance table is too wide
    beside Snakemake's rule graph."""
    if not {"family", "statement"} <= set(significance.columns) or significance.empty:
        return made
    return pd.concat([made, pd.DataFrame({
        "item": [f"many comparisons: {f}" for f in significance["family"]],
        "value": significance["statement"]})], ignore_index=True)


def _hosts(runs: pd.DataFrame) -> str:
    """The hosts the runs ran on (runs.csv hosts), with their runs counted."""
    if "hosts" not in runs.columns or runs.empty:
        return "not recorded"
    hosts = runs["hosts"].where(runs["hosts"].notna(), None)
    counts = hosts.dropna().astype(str).value_counts()
    parts = [f"{h} ({n} run{'s' if n != 1 else ''})" for h, n in counts.head(SHOWN).items()]
    if len(counts) > SHOWN:
        parts.append(f"and {len(counts) - SHOWN} more host sets")
    missing = int(hosts.isna().sum())
    if missing:
        parts.append(f"not recorded ({missing} run{'s' if missing != 1 else ''})")
    return "; ".join(parts)


def _site_rows(site: dict | None, runs: pd.DataFrame) -> list[tuple[str, str]]:
    """made.csv's site and machine rows: the site file's name and description, its node
    (cores, GPUs, scheduler) and the hosts the runs ran on."""
    if not site:
        return []
    node = site.get("node") or {}
    shape = ", ".join(p for p in (
        f"{node['cores']} cores" if node.get("cores") else "",
        f"{node['gpus']} GPUs" if node.get("gpus") else "no GPU",
        f"scheduler {site['scheduler']}" if site.get("scheduler") else "") if p)
    name = site.get("name") or "unknown"
    described = f"{name}: {site['description']}" if site.get("description") else name
    return [("site", f"{described} (sites/{name}.yaml)"),
            ("machine", f"per node {shape}; hosts {_hosts(runs)}")]


def made_table(runs: pd.DataFrame, points: pd.DataFrame | None, summarised_at,
               workflow: str, tables: Iterable[str] = (), site: dict | None = None
               ) -> pd.DataFrame:
    """What report.html was made from, as item / value rows: when the summary tables were
    written (``summarised_at``, shown in UTC), the campaign's time range (the first run's
    start .. the last run's end, runs.csv start / end), the site and machine (``site``: the
    site's record, its name, description, scheduler and node; the runs' hosts), the runs
    (and disturbed and warm-up ones), the requested points by state, the git commit(s) of the runs and
    of the workflow (``workflow``: workflow_commit), and the tables."""
    runs = runs if runs is not None else pd.DataFrame()
    n = len(runs)
    disturbed = int(flags(runs, "disturbed").sum()) if n else 0
    warmup = int(flags(runs, "warmup").sum()) if n else 0  # measurement.warmup_blocks
    start = pd.to_datetime(runs["start"], utc=True, errors="coerce") if "start" in runs else None
    end = pd.to_datetime(runs["end"], utc=True, errors="coerce") if "end" in runs else None
    if n and start is not None and end is not None and start.notna().any() and end.notna().any():
        span = f"{_utc(start.min())} .. {_utc(end.max())}"
        unknown = int((start.isna() | end.isna()).sum())
        if unknown:
            span += f" ({unknown} run{'s' if unknown != 1 else ''} without a start or end)"
    else:
        span = "unknown (no run recorded its start and end)" if n else "no runs"
    rows = [
        ("summarised (UTC)", _utc(summarised_at)),
        ("campaign ran (first run's start .. last run's end)", span),
        *_site_rows(site, runs),
        ("runs", f"{n} ({disturbed} disturbed" + (f", {warmup} warm-up" if warmup else "")
                 + ": kept, left out of the statistics)"),
    ]
    if points is not None and not points.empty and "state" in points:
        counts = points["state"].value_counts()
        rows.append(("requested points", f"{len(points)}: " + ", ".join(
            f"{int(c)} {s}" for s, c in counts.items())))
    rows += [
        ("git commit of the runs", _commits(runs)),
        ("git commit of the workflow (at summary time)", workflow),
    ]
    tables = list(tables)
    if tables:
        rows.append(("made from", ", ".join(tables)))
    rows.append(("report.html", "made by snakemake --report report.html from these tables; "
                 "scalesweep status says when it is older than them"))
    return pd.DataFrame(rows, columns=MADE_COLUMNS)
