"""`scalesweep status --watch`: a campaign followed while it runs (issue #42): the points
by state, the runs measured against the plan's counts with the run time left and the
expected finish (``campaign.progress``), and the block being measured (the running
points' block and runtimes), looked at again every few seconds until nothing is left to
measure (no point missing, running or stale). On a terminal the screen is redrawn each
time; in a log (stdout not a terminal) a look is printed only when it says something new,
so a long campaign's log holds one line per change, not one per tick.
"""

from __future__ import annotations

import datetime as dt
import re
import sys
import time
from pathlib import Path
from typing import Callable, TextIO

import pandas as pd

from scalesweep.campaign.progress import progress, progress_line

OPEN = ("missing", "running", "stale")  # states with something still to measure


def block_of(path: str) -> str:
    """A point's block: its path without the runtime (results/runs/<...>/rep<r>)."""
    return path.rsplit("/", 1)[0]


def look(config: dict, directory: Path, profile: str | None, table: pd.DataFrame) -> list[str]:
    """What one look says: the counts, the progress line, the block(s) being measured."""
    counts = table["state"].value_counts()
    shown = ", ".join(f"{int(n)} {state}" for state, n in counts.items())
    lines = [f"{len(table)} requested points: {shown or 'none'}",
             progress_line(progress(config, directory, profile, table))]
    running = table[table["state"] == "running"]
    for block, rows in running.groupby(running["path"].map(block_of), sort=True):
        runtimes = ", ".join(p.rsplit("/", 1)[1] for p in rows["path"])
        lines.append(f"measuring: {block} ({runtimes})")
    return lines


def _news(lines: list[str] | None) -> list[str] | None:
    """A look without its expected finish, which moves with the clock while a queue waits:
    what decides whether a log gets a line."""
    if lines is None:
        return None
    return [re.sub(r"; expected to finish ~\S+ UTC", "", line) for line in lines]


def finished(table: pd.DataFrame) -> bool:
    return not table["state"].isin(OPEN).any()


def watch(args, survey: Callable, out: TextIO | None = None,
          sleep: Callable[[float], None] = time.sleep) -> int:
    """Look at the campaign every ``args.watch`` seconds until it is finished (or
    ``args.watch_count`` looks, or Ctrl-C). ``survey(args)``: status's reading of it."""
    out = out or sys.stdout
    tty = out.isatty()
    last: list[str] | None = None
    looks = 0
    limit = getattr(args, "watch_count", None)
    try:
        while True:
            _, config, _, table, _ = survey(args)
            lines = look(config, Path(args.directory), args.profile or None, table)
            done = finished(table)
            if tty:
                out.write("\x1b[H\x1b[2J")  # redraw in place
            if tty or _news(lines) != _news(last):
                stamp = dt.datetime.now(dt.timezone.utc).strftime("%H:%M:%S UTC")
                out.write(f"[{stamp}] " + "\n  ".join(lines) + "\n")
                out.flush()
            last = lines
            looks += 1
            if done:
                out.write("nothing left to measure\n")
                return 0
            if limit is not None and looks >= limit:
                return 0
            sleep(max(float(args.watch), 0.0))
    except KeyboardInterrupt:
        out.write("\n")
        return 130
