"""`scalesweep rerun`: measure chosen points again, keeping what they measured before.

    scalesweep rerun --failed                    # failed points (incl. an unreadable metrics.json)
    scalesweep rerun --disturbed                 # disturbed runs (not warm-up ones)
    scalesweep rerun --missing                   # never measured (or deleted)
    scalesweep rerun --foreign                   # measured under another config (status names them)
    scalesweep rerun --where runtime=charliecloud nodes=2
    scalesweep rerun --failed --missing -n       # print what would be re-measured, run nothing

The selections combine: state flags add up (--failed --missing), ``--where`` narrows them
(alone, it selects every point matching it, whatever its state). ``--disturbed`` leaves
out the disturbed runs of warm-up blocks (measurement.warmup_blocks): no statistic uses a
warm-up run, disturbed or not, so measuring one again changes nothing (it says how many it
skipped; ``--where repeat=1`` still chooses them). The command prints the
points, moves each one's earlier files (metrics.json, failure.json, run.log, ...) into
``<point>/history/<UTC stamp>/`` (never deleted, never overwritten: the summary falls
back on the newest valid one there if the new run cannot be read), then runs Snakemake
with the same profile and config arguments, naming the points' metrics files as targets
next to the workflow's default target, so the summary and the report follow (with
``--tables-only``, next to ``summary``: the summary tables alone).

With ``--config only=...`` nothing outside the selection is measured: a chosen run whose
block partner is outside it is refused, nothing moved, each such block named with the
command whose selection includes the partners (``split_blocks``); and a point Snakemake's
dry run would measure besides them outside the selection is refused the same way.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

from scalesweep.campaign.snakemake_args import user_args
from scalesweep.campaign.usage import UsageError
from scalesweep.plan.sweep import HISTORY_DIR, SweepPoint
from scalesweep.record.pointdir import ATTEMPT_LOG, ATTEMPTS, METRICS_JSON, RUNS_DIR
from scalesweep.platform.code import CODE_ROOT as REPO

AXES = [f for f in SweepPoint.__dataclass_fields__]
# left in the point directory: the history itself, the record of every attempt and the
# log of each (run.<attempt>.log: attempts.jsonl names them; ATTEMPT_LOG)
KEPT_IN_PLACE = {HISTORY_DIR, ATTEMPTS}
STATE_FLAGS = {"failed": ("failed", "stale"), "disturbed": ("disturbed",),
               "foreign": ("foreign",), "missing": ("missing",)}


def parse_where(items: list[str]) -> dict[str, set[str]]:
    """``axis=value[,value]`` items -> {axis: {values}}; an unknown axis is an error."""
    where: dict[str, set[str]] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not value.strip():
            raise UsageError(f"--where {item!r}: expected AXIS=VALUE (axes: {', '.join(AXES)})")
        if key not in AXES:
            raise UsageError(f"--where {item!r}: unknown axis {key!r} (axes: {', '.join(AXES)})")
        where.setdefault(key, set()).update(v.strip() for v in value.split(",") if v.strip())
    return where


def select(table, states: set[str], where: dict[str, set[str]]):
    """Rows of a status table (scalesweep.campaign.status.status_table) chosen by state and axes.
    A value of ``where`` that no point of the campaign has is an error naming it."""
    for axis, values in where.items():
        known = {str(v) for v in table[axis]}
        unknown = sorted(values - known)
        if unknown:
            raise UsageError(f"--where {axis}={','.join(unknown)}: no point of this campaign "
                             f"has it ({axis} values: {', '.join(sorted(known, key=_natural))})")
    chosen = table
    if states:
        chosen = chosen[chosen["state"].isin(states)]
    for axis, values in where.items():
        chosen = chosen[chosen[axis].astype(str).isin(values)]
    return chosen


def without_disturbed_warmup(chosen, states: set[str]):
    """(``chosen`` less its disturbed warm-up runs where disturbed runs were asked for
    (``states``): no statistic uses a warm-up run, so nothing is gained by measuring one
    again; the rows left out)."""
    if "disturbed" not in states or "warmup" not in chosen.columns:
        return chosen, chosen.iloc[0:0]
    from scalesweep.analyse.frame import flag_column

    skip = chosen["state"].eq("disturbed") & flag_column(chosen, "warmup")
    return chosen[~skip], chosen[skip]


def _natural(text: str):
    return (0, int(text), "") if text.isdigit() else (1, 0, text)


def with_block_partners(table, chosen):
    """``chosen`` and every other point of ``table`` in the same block (a pair is two runs
    measured together: re-measuring one run of a block alone would pair it with a run
    measured long before), and {partner path: the chosen path that brought it}."""
    blocks = {}
    for path in chosen["path"]:
        blocks.setdefault(SweepPoint.from_path(path).block, path)
    in_block = table["path"].map(lambda p: SweepPoint.from_path(p).block in blocks)
    extra = table[in_block.astype(bool) & ~table["path"].isin(set(chosen["path"]))]
    partners = {p: blocks[SweepPoint.from_path(p).block] for p in extra["path"]}
    if extra.empty:
        return chosen, partners
    import pandas as pd

    return (pd.concat([chosen, extra], ignore_index=True).sort_values("path", kind="stable"),
            partners)


def split_blocks(partners: dict[str, str], selection) -> dict[str, list[str]]:
    """The blocks a rerun would split: {block: its partner paths outside ``selection``
    (``--config only=...``)} for the block partners (``with_block_partners``) that the
    selection does not measure. A pair is compared only within its block, so such a
    block is either measured whole, with a selection that includes its partners, or
    not at all: measuring its chosen run alone would pair it with a run measured at
    another time (or never)."""
    if selection.everything:
        return {}
    split: dict[str, list[str]] = {}
    for path in partners:
        if not in_selection(path, selection):
            split.setdefault(SweepPoint.from_path(path).block, []).append(path)
    return split


def in_selection(path: str, selection) -> bool:
    """Whether the point at ``path`` is one ``selection`` measures."""
    from scalesweep.plan.sweep import SweepError

    try:
        return SweepPoint.from_path(path) in selection
    except SweepError:
        return False


def foreign_points(paths, selection, refuse: bool = False) -> list[str]:
    """The points of ``paths`` outside ``selection``; with ``refuse``, a UsageError naming
    them where there are any (Snakemake's plan for a rerun, which must not measure them:
    e.g. a target given after ``--``)."""
    foreign = [p for p in paths if not in_selection(p, selection)]
    if foreign and refuse:
        raise UsageError(
            f"Snakemake would also measure {len(foreign)} point(s) outside "
            f"{selection.describe()} (nothing was moved or measured): "
            + ", ".join(foreign[:5]) + (", ..." if len(foreign) > 5 else "")
            + "; include them in the selection, or measure them with their own command")
    return foreign


def widened(selection, paths, order=()) -> dict:
    """The ``only:`` values (as --config takes them) that add the points at ``paths`` to
    ``selection``: {axis: every value it allows and theirs}, for the axes that need it;
    runtimes in ``order`` (the sweep's), the rest sorted."""
    from scalesweep.plan.sweep import SELECTION_AXES

    points = [SweepPoint.from_path(p) for p in paths]
    extra = {}
    for key, field in SELECTION_AXES.items():
        allowed = getattr(selection, key)
        need = {getattr(p, field) for p in points} - set(allowed or ())
        if allowed is not None and need:
            rank = {v: i for i, v in enumerate(order)}
            extra[key] = sorted({*allowed, *need},
                                key=lambda v: (rank.get(v, len(rank)), _natural(str(v))))
    return extra


def split_refusal(args, table, split: dict[str, list[str]], selection, order=()) -> str:
    """Why a rerun that would split blocks is refused, each block named with its runs
    and their states (from ``table``, the campaign's status), and the command that
    measures them whole."""
    states = {p: s for p, s in zip(table["path"], table["state"])
              if SweepPoint.from_path(p).block in split}
    lines = [f"{len(split)} block(s) of the chosen points have runs outside "
             f"{selection.describe()}; nothing was moved or measured. A block's runs are "
             "measured together, one right after the other, and compared only with each "
             "other: measuring the chosen run alone would pair it with a run measured at "
             "another time (or never), so the block is measured whole or not at all."]
    shown = 20  # blocks named; the command covers them all
    for block, outside in sorted(split.items())[:shown]:
        mine = [p for p in sorted(states) if SweepPoint.from_path(p).block == block
                and p not in set(outside)]
        lines.append(f"  {block}: chosen "
                     + ", ".join(f"{SweepPoint.from_path(p).runtime} ({states[p]})"
                                 for p in mine)
                     + "; outside the selection "
                     + ", ".join(f"{SweepPoint.from_path(p).runtime} ({states.get(p, '?')})"
                                 for p in outside))
    if len(split) > shown:
        lines.append(f"  ... and {len(split) - shown} more block(s)")
    more = widened(selection, [p for ps in split.values() for p in ps], order)
    lines.append("To measure these blocks whole, include their runtimes in the selection:")
    lines.append("  " + rerun_command(args, {"only": more}))
    return "\n".join(lines)


def rerun_command(args, extra: dict | None = None) -> str:
    """This rerun as a command line, ``extra`` config values merged into its --config."""
    flags = [f"--{flag}" for flag in STATE_FLAGS if getattr(args, flag)]
    if args.where:
        flags += ["--where", *args.where]
    flags += [f for f, on in (("--tables-only", args.tables_only), ("-n", args.dry_run)) if on]
    if Path(args.directory).resolve() != Path.cwd().resolve():
        flags += ["--directory", str(args.directory)]
    cmd = ["scalesweep", "rerun", *flags,
           *user_args(args.profile, args.configfile, args.config, extra)]
    if args.snakemake_args:
        cmd += ["--", *args.snakemake_args]
    return shlex.join(cmd)


def history_stamp() -> str:
    """UTC to the microsecond, sortable as text: 20261125T061502.123456Z."""
    now = time.time()
    return time.strftime("%Y%m%dT%H%M%S", time.gmtime(now)) + f".{int(now % 1 * 1e6):06d}Z"


def move_aside(point_dir: Path, stamp: str) -> Path | None:
    """Move everything in ``point_dir`` but its history, attempts log and attempts' own
    logs into ``point_dir/history/<stamp>/``; the destination, or None when there was
    nothing."""
    if not point_dir.is_dir():
        return None
    entries = [e for e in point_dir.iterdir()
               if e.name not in KEPT_IN_PLACE and not ATTEMPT_LOG.fullmatch(e.name)]
    if not entries:
        return None
    dest = point_dir / HISTORY_DIR / stamp
    if dest.exists():
        raise UsageError(f"{dest} exists already: run rerun again in a second")
    dest.mkdir(parents=True)
    # metrics.json last: until it has moved, the point still reads as measured
    for entry in sorted(entries, key=lambda e: e.name == METRICS_JSON):
        os.rename(entry, dest / entry.name)
    return dest


def snakemake_command(args, targets: list[str]) -> list[str]:
    """The Snakemake command the rerun runs: this checkout's Snakefile, the campaign
    directory, the user's profile and config arguments, the default target (``summary``
    with ``--tables-only``) and the points' metrics files."""
    exe = Path(sys.executable).with_name("snakemake")
    extra = list(args.snakemake_args or [])
    given = [a for a in extra if _config_option(a)]
    if given:  # Snakemake would read it instead of the user's: the points chosen without it
        raise UsageError(f"{given[0]} after --: give --config and --configfile to scalesweep "
                         "rerun itself (before --), so the points are chosen with them and "
                         "Snakemake reads them all in one")
    # the targets and the arguments after -- first: after --config/--configfile (nargs +)
    # a target would be read as one more config item or file
    cmd = [str(exe) if exe.exists() else "snakemake", "-s", str(REPO / "Snakefile"),
           "summary" if args.tables_only else "all", *targets, *extra]
    if Path(args.directory).resolve() != Path.cwd().resolve():
        cmd += ["--directory", str(args.directory)]
    cmd += user_args(args.profile, args.configfile, args.config)
    cores = {"-c", "--cores", "-j", "--jobs"}
    if not args.profile and not any(a.split("=")[0] in cores or a.startswith(("-c", "-j"))
                                    for a in extra):
        cmd += ["--cores", "all"]  # Snakemake needs a core budget to run locally
    return cmd


def _config_option(arg: str) -> bool:
    """Whether a Snakemake argument is its --config (-C) or --configfile option, or an
    abbreviation of one (as argparse takes it)."""
    name = arg.split("=", 1)[0]
    return (name.startswith("-C") and not name.startswith("--")) or (
        name.startswith("--conf") and any(o.startswith(name) for o in
                                          ("--config", "--configfile", "--configfiles")))


def planned_points(cmd: list[str]) -> list[str]:
    """The points Snakemake would measure for ``cmd`` (its dry run); UsageError with
    Snakemake's own message when it refuses the command."""
    proc = subprocess.run([*cmd, "--dry-run"], capture_output=True, text=True)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        raise UsageError(f"snakemake refuses the command (nothing was moved):\n{tail}")
    pattern = rf"output: {re.escape(RUNS_DIR)}/(\S+)/{re.escape(METRICS_JSON)}"
    return sorted(set(re.findall(pattern, proc.stdout)))


def campaign_config(args) -> dict:
    """The campaign's config as Snakemake reads it for the same arguments."""
    from scalesweep.plan.config_read import effective_config

    return effective_config(args.directory, args.configfile, args.config, args.profile or None)


def locked(directory: Path) -> bool:
    locks = directory / ".snakemake" / "locks"
    return locks.is_dir() and any(locks.iterdir())


def run(args) -> int:
    from scalesweep.plan.config import ConfigError
    from scalesweep.campaign.status import stale_lock, status_table
    from scalesweep.plan.sweep import SweepError, check_selection, sweep_points

    directory = Path(args.directory)
    states = {s for flag, group in STATE_FLAGS.items() if getattr(args, flag) for s in group}
    where = parse_where(args.where or [])
    if not states and not where:
        raise UsageError("say what to measure again: --failed, --disturbed, --foreign, --missing "
                         "and/or --where AXIS=VALUE ...")
    try:
        config = campaign_config(args)
        selection = check_selection(sweep_points(config), config)
        table = status_table(config, directory)
    except (ConfigError, SweepError) as exc:
        raise UsageError(str(exc)) from None
    # `--config only=...`: only the points this invocation may measure
    everything = table
    table = table[table["path"].map(lambda p: SweepPoint.from_path(p) in selection).astype(bool)]
    chosen, skipped = without_disturbed_warmup(select(table, states, where), states)
    if len(skipped):
        print(f"Not measured again: {len(skipped)} disturbed warm-up run(s) (the first "
              "measurement.warmup_blocks block(s) of their series: kept, in no statistic), "
              f"e.g. {skipped['path'].iloc[0]}")
    if chosen.empty:
        print("Nothing to measure again: no point matches "
              + " and ".join([*(f"state {'/'.join(sorted(states))}" for _ in [0] if states),
                              *(f"{k}={','.join(sorted(v))}" for k, v in where.items())]))
        return 0
    # the partners from the whole campaign: a block is measured whole, or not at all
    # where a partner is outside the selection (nothing outside it is ever measured)
    chosen, partners = with_block_partners(everything, chosen)
    split = split_blocks(partners, selection)
    if split:
        raise UsageError(split_refusal(args, everything, split, selection,
                                       (config.get("sweep") or {}).get("runtimes") or ()))
    running = chosen[chosen["state"].eq("running")]
    if len(running):
        raise UsageError(f"{len(running)} of the chosen points (or their block partners) are "
                         f"being measured now (e.g. {running['path'].iloc[0]}): wait for that "
                         "run to end")
    targets = [f"{RUNS_DIR}/{p}/{METRICS_JSON}" for p in chosen["path"]]
    cmd = snakemake_command(args, targets)
    print(f"Measuring {len(chosen)} point(s) again:")
    for _, row in chosen.iterrows():
        # (a failed metrics.json's reason: "<file>: <field> is <value>, expected <kind>")
        why = (f"{row['state']}{': ' + str(row['reason'])[:200] if row['reason'] else ''}"
               if row["path"] not in partners else
               f"its block partner {partners[row['path']]} is measured again: a pair is "
               "two runs measured together")
        print(f"  {row['path']}  ({why})")
    if locked(directory):
        where = directory / ".snakemake" / "locks"
        if stale_lock(directory):
            raise UsageError(f"{where} holds the lock of a snakemake that is gone (killed?): "
                             "release it with `snakemake --unlock` and the same arguments, "
                             "then run this again")
        raise UsageError(f"{where}: another snakemake runs in this campaign; wait for it")
    # Snakemake's own plan, before anything moves: it must accept the command, and the
    # summary needs every other point that is missing or failed: those run too, listed
    also = [p for p in planned_points(cmd) if p not in set(chosen["path"])]
    foreign_points(also, selection, refuse=True)  # never measured outside the selection
    if also:
        print(f"Also measured, because the summary needs them (missing or failed): {len(also)}")
        for path in also:
            print(f"  {path}")
    print("Earlier files of each point go to <point>/history/<UTC stamp>/ (kept, never "
          "overwritten).")
    print("$ " + shlex.join(cmd), flush=True)
    if args.dry_run:
        return 0
    stamp = history_stamp()
    busy = [p for p in chosen["path"]
            if (directory / RUNS_DIR / p / HISTORY_DIR / stamp).exists()]
    if busy:
        raise UsageError(f"{busy[0]}/{HISTORY_DIR}/{stamp} exists already: run this again")
    for path in chosen["path"]:
        dest = move_aside(directory / RUNS_DIR / path, stamp)
        if dest is not None:
            print(f"  kept {path} -> {dest.relative_to(directory)}")
    return run_snakemake(cmd, directory)


def run_snakemake(cmd: list[str], directory: Path) -> int:
    """Run Snakemake and pass it a Ctrl-C (or SIGTERM) the way it expects one: once, to
    its whole process group, and wait for it to end; its exit status.

    Snakemake stops on SIGINT by waiting for its running jobs, which stop because a
    terminal's Ctrl-C reached them too (its local jobs share its process group; a Slurm
    job is cancelled); it then releases its lock. So Snakemake runs in a process group
    of its own, which gets the first SIGINT or SIGTERM that reaches this process
    (``kill -INT`` of it alone, or Ctrl-C in a terminal, which does not reach that group
    itself); later ones are not passed on (a second Ctrl-C would cut Snakemake's own
    stopping short), and this process waits for Snakemake whatever comes. Killing
    Snakemake instead would leave its jobs running and its lock behind. A lock still
    left when it has ended (its owner gone: it was killed) is released, and the command
    that did it printed.
    """
    import signal

    forwarded: list[str] = []  # the signal passed on
    started: list[subprocess.Popen] = []
    # a hang-up (the terminal or ssh session gone) stops Snakemake as a Ctrl-C does:
    # otherwise it would run on in its own process group, unwatched, and its lock stay
    passed = {signal.SIGINT: signal.SIGINT, signal.SIGTERM: signal.SIGTERM,
              signal.SIGHUP: signal.SIGINT}

    def say(text: str) -> None:
        try:
            print(f"scalesweep rerun: {text}", file=sys.stderr, flush=True)
        except OSError:  # the terminal is gone (SIGHUP): say nothing, go on
            pass

    def forward(signum, _frame):
        if forwarded:
            say(f"Snakemake is stopping (it got {forwarded[0]}); waiting for it to end")
            return
        forwarded.append(signal.Signals(signum).name)
        say(f"{forwarded[0]}: stopping Snakemake and its jobs; waiting for it to end (it "
            "releases its lock)")
        for proc in started:
            try:
                os.killpg(proc.pid, passed[signum])
            except ProcessLookupError:
                pass

    def own_group() -> None:  # in the child: a process group of its own, signals as usual
        os.setpgrp()
        signal.pthread_sigmask(signal.SIG_UNBLOCK, passed)

    previous = {sig: signal.signal(sig, forward) for sig in passed}
    try:
        if forwarded:  # stopped before Snakemake started
            return 128 + signal.Signals[forwarded[0]].value
        # held while Snakemake starts: a signal that comes then is passed on once it is
        # in `started` (never lost between the fork and the list)
        signal.pthread_sigmask(signal.SIG_BLOCK, passed)
        try:
            started.append(subprocess.Popen(cmd, preexec_fn=own_group))
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, passed)
        rc = started[0].wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    from scalesweep.campaign.status import stale_lock

    left = stale_lock(directory)
    if left:  # this Snakemake's (the rerun starts only without one): release it
        unlock = [a for a in cmd if not a.startswith(f"{RUNS_DIR}/")] + ["--unlock"]
        say(f"Snakemake ended ({rc}) and left its lock ({', '.join(str(p) for p in left)}); "
            f"releasing it:\n$ {shlex.join(unlock)}")
        subprocess.run(unlock, stdout=subprocess.DEVNULL)
    if rc < 0:  # killed by a signal: as a shell reports it
        return 128 - rc
    return rc


def add_parser(sub) -> None:
    p = sub.add_parser(
        "rerun", help="measure chosen points again (failed, disturbed, missing, by axis)",
        description=__doc__.split("\n\n")[0] + " The selections add up; --where narrows.",
    )
    p.add_argument("--failed", action="store_true",
                   help="failed points (a failure.json, an unreadable metrics.json, a run "
                        "whose owner is gone)")
    p.add_argument("--disturbed", action="store_true",
                   help="runs marked disturbed (left out of the statistics); not those of "
                        "warm-up blocks (measurement.warmup_blocks), which no statistic uses")
    p.add_argument("--foreign", action="store_true",
                   help="runs measured under another config than this campaign's for their "
                        "point (scalesweep status names them; left out of the statistics)")
    p.add_argument("--missing", action="store_true", help="points with no run at all")
    p.add_argument("--where", nargs="+", metavar="AXIS=VALUE[,VALUE]",
                   help=f"only points with these values (axes: {', '.join(AXES)})")
    p.add_argument("-n", "--dry-run", action="store_true",
                   help="print what would be measured again and the command; change nothing")
    p.add_argument("--tables-only", action="store_true",
                   help="then update the summary tables only (target `summary`), not the "
                        "figures and report tables (the next plain `snakemake` makes them)")
    p.add_argument("--directory", "-d", default=".", help="campaign directory (default: .)")
    p.add_argument("--profile", default="", help="Snakemake profile, e.g. profiles/local-slurm")
    # action extend: a repeated --config or --configfile adds up (Snakemake gets them all
    # in one, as it reads only the last of each)
    p.add_argument("--configfile", nargs="+", action="extend", default=[],
                   help="as for snakemake")
    p.add_argument("--config", nargs="+", action="extend", default=[], metavar="KEY=VALUE",
                   help="as for snakemake")
    p.add_argument("snakemake_args", nargs="*", metavar="-- SNAKEMAKE_ARGS",
                   help="further snakemake arguments, after --")
    p.set_defaults(func=run)
