"""`scalesweep status`: every requested point by state, and how to re-run the failed ones."""

from __future__ import annotations

import argparse
import base64
import functools
import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
from pathlib import Path

from scalesweep.analyse.collect import extra_repeats, point_states, print_foreign
from scalesweep.campaign.progress import (REPORT_HTML, progress, progress_line, report_freshness,
                                          stale_report_line)
from scalesweep.campaign.series_record import futile_series, last_decision
from scalesweep.campaign.snakemake_args import user_args
from scalesweep.campaign.usage import UsageError
from scalesweep.measure.oomkill import slurm_oom_reason
from scalesweep.measure.slurmjob import sacct_fields
from scalesweep.plan.adaptive import Series, asked_points, block_bounds, walks_decisions
from scalesweep.plan.config import ConfigError
from scalesweep.plan.config_read import config_sources
from scalesweep.plan.sweep import (Selection, SweepError, SweepPoint, check_selection,
                                   sweep_points, warmup_blocks)
from scalesweep.record.pointdir import (FAILURE_JSON, METRICS_JSON, RUNNING_JSON, RUNS_DIR,
                                        WORKFLOW_OWNER, boot_id,
                                        proc_start_ticks)


def slurm_states(job_ids: list[str]) -> dict[str, str]:
    """Slurm's own verdict (TIMEOUT, NODE_FAIL, OUT_OF_MEMORY, CANCELLED...) per job id."""
    return {job: (state.split() or [""])[0]
            for job, (state,) in sacct_fields(job_ids, "State").items()}


def _incomplete_marker(directory: Path, output: str) -> Path:
    """Snakemake marks an output incomplete while its job runs (or after it was killed);
    the marker is the output path, urlsafe-base64 encoded, split into 254-char parts."""
    b64 = base64.urlsafe_b64encode(output.encode()).decode()
    parts = [b64[i:i + 254] for i in range(0, len(b64), 254)]
    parts = ["@" + p for p in parts[:-1]] + parts[-1:]
    return (directory / ".snakemake" / "incomplete").joinpath(*parts)


def _in_flight(directory: Path, path: str, state: str) -> bool:
    """A missing point whose output is marked incomplete is running; so is a failed one
    whose marker is newer than its failure.json: a retry (Snakemake's own, or a re-run)
    was submitted after that attempt failed. A failed job's marker is removed when the
    failure is handled, and a marker older than the failure is that attempt's own."""
    marker = _incomplete_marker(directory, f"{RUNS_DIR}/{path}/{METRICS_JSON}")
    if state == "missing":
        return marker.exists()
    if state != "failed":
        return False
    failure = directory / RUNS_DIR / path / FAILURE_JSON
    try:
        return marker.stat().st_mtime >= failure.stat().st_mtime
    except OSError:  # no marker, or no failure.json (an unreadable metrics.json)
        return False


# Slurm job states after which the job's processes are gone
SLURM_ENDED = {"BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE", "FAILED", "NODE_FAIL",
               "OUT_OF_MEMORY", "PREEMPTED", "REVOKED", "SPECIAL_EXIT", "TIMEOUT"}


def snakemake_pids(directory: Path) -> list[int]:
    """Snakemake processes on this host working in ``directory`` (their cwd: Snakemake
    changes into its --directory); [] where /proc cannot tell."""
    try:
        target = directory.resolve()
        procs = list(Path("/proc").iterdir())
    except OSError:
        return []
    pids = []
    for proc in procs:
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
            cwd = Path(os.readlink(proc / "cwd"))
        except OSError:
            continue
        names = [os.path.basename(a.decode(errors="replace")) for a in argv[:3]]
        if ("snakemake" in names[:2] or names[1:3] == ["-m", "snakemake"]) and cwd == target:
            pids.append(int(proc.name))
    return pids


def workflow_state(directory: Path) -> tuple[str, str]:
    """("alive" | "gone" | "unknown", who) of the last Snakemake run started in
    ``directory``, from the owner it recorded at its start (host, pid, start time, boot):
    a run on another login node is "unknown", never "gone". Without a record (a campaign
    from before it was kept), any snakemake working there on this host."""
    try:
        record = json.loads((directory / WORKFLOW_OWNER).read_text())
    except (OSError, ValueError):
        record = None
    if record:
        verdict, who = owner_state({**record, "slurm_job_id": None})
        return verdict, who.replace("harness pid", "snakemake pid")
    pids = snakemake_pids(directory)
    return ("alive", f"snakemake pid {pids[0]}") if pids else (
        "gone", f"no snakemake runs in {directory} on {socket.gethostname()}")


def stale_lock(directory: Path) -> list[Path]:
    """Snakemake's lock files left in ``directory`` by a run that is gone: the next run
    refuses to start until ``--unlock``. [] while the run may live (on this host, or on
    another one, where it cannot be checked)."""
    locks = sorted((directory / ".snakemake" / "locks").glob("*.lock"))
    if not locks or snakemake_pids(directory):
        return []
    return locks if workflow_state(directory)[0] == "gone" else []


def queued_points() -> set[str] | None:
    """Sweep points with a Slurm job of this user still queued or running, from the
    comment the Slurm executor gives each job (rule_run_point_wildcards_<values>); None
    without Slurm."""
    if not shutil.which("squeue"):
        return None
    try:
        proc = subprocess.run(["squeue", "-h", "--me", "-o", "%k"], capture_output=True,
                              text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0:
        return None
    prefix = "rule_run_point_wildcards_"
    return {line.strip()[len(prefix):] for line in proc.stdout.splitlines()
            if line.strip().startswith(prefix)}


def _job_key(path: str) -> str:
    """A point as the Slurm executor names it in a job comment: its wildcard values."""
    import re

    from scalesweep.plan.sweep import POINT_DIR

    p = SweepPoint.from_path(path)
    # the wildcards in the order the rule's output names them (sweep.POINT_DIR)
    return "_".join(str(getattr(p, name)) for name in re.findall(r"\{(\w+)\}", POINT_DIR))


def _slurm_job_state(job_id: str) -> str | None:
    """The job's state by squeue (by sacct once it left the queue): "" when Slurm no
    longer knows it, None when Slurm cannot be asked."""
    if not shutil.which("squeue"):
        return None
    try:
        proc = subprocess.run(["squeue", "-h", "-j", str(job_id), "-o", "%T"],
                              capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode == 0 and proc.stdout.strip():
        return proc.stdout.split()[0]
    if proc.returncode != 0 and "invalid job id" not in proc.stderr.lower():
        return None  # the controller did not answer
    try:
        return slurm_states([str(job_id)]).get(str(job_id), "")
    except (OSError, subprocess.TimeoutExpired):
        return ""


def owner_state(owner: dict) -> tuple[str, str]:
    """("alive" | "gone" | "unknown", who) of the run that wrote a point's running.json:
    on this host (same boot), its pid with the same start time; in a Slurm job, the
    job's state; on another host without Slurm, unknown."""
    host, pid, job = owner.get("host"), owner.get("pid"), owner.get("slurm_job_id")
    who = f"harness pid {pid} on {host}" + (f", Slurm job {job}" if job else "")
    who += f", started {owner['start']}" if owner.get("start") else ""
    here = host == socket.gethostname()
    if here and isinstance(pid, int) and owner.get("boot_id") in (None, boot_id()):
        ticks = proc_start_ticks(pid)
        alive = ticks is not None and ticks == owner.get("pid_start_ticks", ticks)
        return ("alive" if alive else "gone"), who
    if here and owner.get("boot_id"):
        return "gone", who + " (the host rebooted since)"
    if job:
        state = _slurm_job_state(job)
        if state is None:
            return "unknown", who + " (Slurm cannot be asked from here)"
        if not state or state.rstrip("+") in SLURM_ENDED:
            return "gone", who + (f" (the job ended: {state})" if state else " (the job ended)")
        return "alive", who + f" ({state})"
    return "unknown", who + f" (another host: cannot check from {socket.gethostname()})"


def _ownership(directory: Path, path: str, state: str, queued,
               workflow) -> tuple[str, str] | None:
    """(state, reason) of a point Snakemake marks incomplete ("running") or one a live
    harness runs outside Snakemake; None to leave the point as it is. ``queued`` and
    ``workflow``: queued_points and workflow_state of the campaign, looked up once."""
    point_dir = directory / RUNS_DIR / path
    marker = _incomplete_marker(directory, f"{RUNS_DIR}/{path}/{METRICS_JSON}")
    owner = None
    try:
        record = point_dir / RUNNING_JSON
        # the owner of this attempt: not one left by an earlier, killed run
        if not marker.exists() or record.stat().st_mtime >= marker.stat().st_mtime - 1:
            owner = json.loads(record.read_text())
    except (OSError, ValueError):
        pass
    if state != "running":  # missing: running all the same if a live harness owns it
        verdict, who = owner_state(owner) if state == "missing" and owner else ("", "")
        return ("running", who) if verdict == "alive" else None
    if owner:
        verdict, who = owner_state(owner)
        if verdict == "gone":
            return "stale", f"stale: the run that owned this point is gone ({who})"
        return "running", who + ("" if verdict == "alive" else ": its state is unknown")
    if _job_key(path) in (queued() or ()):
        return "running", "its Slurm job is queued or starting"
    verdict, who = workflow()
    if verdict == "alive":
        return "running", f"its job has not started the harness yet ({who})"
    if verdict == "unknown":
        return "running", f"its workflow's state is unknown ({who})"
    return "stale", f"stale: marked incomplete by a Snakemake run that is gone ({who})"


def status_table(config: dict, directory: Path,
                 problems: list[tuple[str, str]] | None = None):
    """Every requested point's state; a decision file that cannot be walked (counted as
    not made) goes to ``problems`` as (file, why)."""
    requested = sweep_points(config)
    results = str(directory / "results")
    # repeats the workflow added (adaptive repeats, replacements of disturbed runs) count
    # too: those its decisions ask for (measured, deleted or not yet measured) and those
    # on disk (asked for by decisions since changed, or under an earlier config)
    if walks_decisions(config, requested, Selection.of(config)):
        requested = sorted({*requested, *asked_points(requested, config, directory,
                                                      problems)})
    table = point_states(sorted({*requested, *extra_repeats(requested, results)}), results,
                         config=config)
    in_flight = [_in_flight(directory, p, s) for p, s in zip(table["path"], table["state"])]
    table.loc[in_flight, "state"] = "running"
    # running: is its owner alive (running.json), or did it die with its workflow (stale)?
    queued = functools.cache(queued_points)  # asked once, and only if needed
    workflow = functools.cache(functools.partial(workflow_state, directory))
    for i in table.index[table["state"].isin(["running", "missing"])]:
        verdict = _ownership(directory, table.at[i, "path"], table.at[i, "state"],
                             queued, workflow)
        if verdict:
            table.at[i, "state"], table.at[i, "reason"] = verdict
    failed = table["state"].eq("failed")
    job_ids, jobs = [], {}
    for i in table.index[failed]:
        f = directory / RUNS_DIR / table.at[i, "path"] / FAILURE_JSON
        if f.is_file():
            job = (json.loads(f.read_text()).get("slurm") or {}).get("job_id")
            if job:
                jobs[i] = job
                job_ids.append(job)
    verdict = slurm_states(job_ids)
    table["slurm_state"] = [verdict.get(jobs.get(i), "") for i in table.index]
    table["reason"] = list(map(slurm_oom_reason, table["reason"], table["slurm_state"]))
    return table


STATES = ["done", "disturbed", "foreign", "failed", "running", "stale", "missing"]
def _replacement_advice(config: dict, directory: Path, disturbed, command,
                        problems: list[tuple[str, str]]) -> list[str]:
    """How the disturbed runs' series get replacements: by the same command while a
    series is below its maximum of repeats (the workflow adds blocks until it has the
    undisturbed repeats it needs), by a raised maximum once it is there. ``command(extra)``:
    the user's snakemake command with the ``extra`` config values merged into its own
    (``snakemake_args.user_args``). A final.json that cannot be read goes to ``problems``."""

    kinds: dict[str, tuple[str, int, bool, str, int]] = {}
    for path in disturbed["path"]:
        point = SweepPoint.from_path(path)
        series = Series.of(point)
        low, high = block_bounds(config, point.workload)  # blocks, warm-up included
        decision = last_decision(directory, series, problems)
        series_dir = directory / RUNS_DIR / series.path
        done = max((int(p.name[3:]) for p in series_dir.glob("rep*")
                    if p.name[3:].isdigit()), default=0)
        if decision.get("futility"):
            kind = "futile"  # stopped: no replacement settles it (listed below)
        elif decision.get("enough"):
            kind = "enough"
        elif high > low and done < high:
            kind = "below"
        else:
            kind = "at_max"
        kinds[series.path] = (kind, high, high > low, point.workload, done)
    lines = []
    enough = sorted(k for k, v in kinds.items() if v[0] == "enough")
    if enough:
        lines.append("Not needed for " + ", ".join(enough) + ": enough undisturbed repeats.")
    if futile := sorted(k for k, v in kinds.items() if v[0] == "futile"):
        lines.append("Not replaced for " + ", ".join(futile) + ": stopped as futile (it "
                     "cannot settle within its maximum of repeats; see below).")
    if any(v[0] == "below" for v in kinds.values()):
        lines.append("Re-running the same command measures replacement blocks (series "
                     "below their maximum of repeats):")
        lines.append(f"  {command(None)}")
    for series, (kind, high, adaptive, workload, done) in sorted(kinds.items()):
        if kind != "at_max":
            continue
        # past the blocks on disk, after warm-up; sweep.repeats where the workload sets it
        top, high = max(high, done) - warmup_blocks(config), high - warmup_blocks(config)
        own = "repeats" in (config["workloads"][workload].get("sweep") or {})
        raised = ({"measurement": {"max_repeats": top + 2}} if adaptive
                  else {"workloads": {workload: {"sweep": {"repeats": top + 1}}}} if own
                  else {"sweep": {"repeats": top + 1}})
        lines.append(f"{series}: at its maximum of {high} repeats; to replace its disturbed "
                     f"runs: {command(raised)}")
    return lines


def survey(args, problems: list | None = None) -> tuple:
    """The campaign ``args`` names, as `snakemake` reads it with the same arguments: its
    config sources, config, selection, and the status table split into the points inside
    the selection and those outside it. ``problems`` collects decision files that cannot
    be read."""
    directory = Path(args.directory)
    try:  # the config as `snakemake` reads it with the same arguments
        sources = config_sources(directory, args.configfile or [], args.config or [],
                                 args.profile or None)
        config = sources.load()
        selection = check_selection(sweep_points(config), config)
        table = status_table(config, directory, [] if problems is None else problems)
    except (ConfigError, SweepError) as exc:
        raise UsageError(str(exc)) from None
    # `--config only=...`: the selected points; the others are counted, not listed
    inside = table["path"].map(lambda p: SweepPoint.from_path(p) in selection).astype(bool)
    return sources, config, selection, table[inside], table[~inside]


def run(args) -> int:
    if getattr(args, "watch", None) is not None:
        from scalesweep.campaign.watch import watch

        return watch(args, survey)
    directory = Path(args.directory)
    problems: list[tuple[str, str]] = []  # decision files that cannot be read
    sources, config, selection, table, outside = survey(args, problems)
    counts = table["state"].value_counts().reindex(STATES, fill_value=0)
    failed = table[table["state"] == "failed"]
    warmup = table["warmup"].astype(bool)  # a disturbed warm-up run needs no replacement
    disturbed = table[(table["state"] == "disturbed") & ~warmup]
    here = ["--directory", str(directory)] if str(directory) not in (".", "") else []

    def command(extra: dict | None = None) -> str:
        """The user's snakemake command; ``extra`` config values merged into its one
        --config, over the items Snakemake reads (the user's, or else the profile's
        config:, which an explicit --config replaces)."""
        items = sources.config_args if extra else args.config or []
        return shlex.join(["snakemake", *here, *user_args(args.profile, args.configfile or [],
                                                          items, extra)])

    rerun = command()
    outside_counts = outside["state"].value_counts().reindex(STATES, fill_value=0)
    locks = stale_lock(directory)  # left by a killed run: the next one refuses to start
    freshness = report_freshness(directory)
    advice = (_replacement_advice(config, directory, disturbed, command, problems)
              if len(disturbed) else [])
    futile = futile_series(config, directory, problems)
    problems = list(dict.fromkeys(problems))  # a final.json: once per disturbed run
    prog = progress(config, directory, args.profile or None, table)
    if args.json:
        json.dump({"counts": counts.to_dict(), "points": table.to_dict(orient="records"),
                   "unlock_command": f"{rerun} --unlock" if locks else None,
                   "rerun_command": rerun, "config": sources.describe(),
                   "report": freshness and {**freshness, "command": f"{rerun} --report "
                                                                     f"{REPORT_HTML}"},
                   "outside_selection": {"selection": selection.describe(),
                                         "points": len(outside),
                                         "counts": outside_counts.to_dict()},
                   "unreadable_decisions": [{"file": f, "problem": why}
                                            for f, why in problems],
                   "futile_series": futile, "progress": prog},
                  sys.stdout, indent=2, default=str)
        print()
        return 0
    warm = f"; {int(warmup.sum())} of them warm-up (kept, in no statistic)" if warmup.any() else ""
    shown = [f"{n} {s}" for s, n in counts.items() if n or s != "foreign"]  # if one is
    print(f"{len(table)} requested points: " + ", ".join(shown) + warm)
    print(progress_line(prog))
    if problems:
        print(f"{len(problems)} decision file(s) of adaptive repeats cannot be read, and count "
              "as not made (a series' blocks after one are not listed):")
        for path, why in problems:
            print(f"  {path}: {why}")
        print("  Delete them (the next snakemake run makes each anew from its series' "
              "runs): rm " + shlex.join(sorted({path for path, _ in problems})))
    stale_report = stale_report_line(freshness, rerun)
    if stale_report:
        print(stale_report)
    if len(outside):
        print(f"{len(outside)} more point(s) outside the selection {selection.describe()}, "
              "not listed: " + ", ".join(f"{n} {s}" for s, n in outside_counts.items() if n))
    if not sources.workflow_configfile.exists():
        print(f"note: {sources.workflow_configfile} does not exist: the config is "
              f"{sources.describe()} alone (as for snakemake)")
    shown = table[table["state"] != "done"] if not args.all else table
    # a warm-up column only where a listed point is one, and then as a label ("yes" on
    # the warm-up rows, blank on the others) rather than a column of True/False
    warm_shown = shown["warmup"].astype(bool)
    if warm_shown.any():
        shown = shown.assign(**{"warm-up": warm_shown.map({True: "yes", False: ""})})
    cols = ["state", *(["warm-up"] if warm_shown.any() else []), "path", "reason",
            "slurm_state", "log"]
    if not shown.empty:
        print(shown[cols].to_string(index=False))
    if len(disturbed):
        print(f"\n{len(disturbed)} disturbed run(s) left out of the statistics (kept on disk, "
              "marked in runs.csv): something else used the CPU during the measurement:")
        for _, row in disturbed.iterrows():
            print(f"  {row['path']}: {row['reason']}")
        for line in advice:
            print(line)
        print("To measure the disturbed runs again in place instead (each kept in its "
              "point's history/):")
        print(f"  {rerun_points_command(args, ['--disturbed'])}")
    print_foreign(table, rerun_points_command(args, ["--foreign"]))  # analyse/foreign.py
    if futile:
        print(f"\n{len(futile)} series stopped before their maximum of repeats: their "
              "verdict cannot be settled within it at the measured spread (raise "
              "measurement.max_repeats to go on):")
        for line in futile:
            print(f"  {line}")
    if locks:
        print(f"\nSnakemake's lock ({locks[0].parent}) is left by a run that is gone (no "
              f"snakemake runs in {directory} on {socket.gethostname()}): the next run refuses "
              "to start (\"Directory cannot be locked\") until it is removed:")
        print(f"  {rerun} --unlock")
    stale = table[table["state"] == "stale"]
    if len(stale):
        print(f"\n{len(stale)} stale point(s): the run that owned each is gone (killed with "
              "its workflow?) and left it marked incomplete; the next run measures it again"
              + (" (after --unlock)" if locks else "") + ":")
        print(f"  {rerun}")
    if len(failed) or counts["missing"]:
        wanted = [f for f, n in (("--failed", len(failed)), ("--missing", counts["missing"])) if n]
        print("\nMeasure only the failed and missing points again (finished ones are never "
              "redone; earlier files go to each point's history/):")
        print(f"  {rerun_points_command(args, wanted)}")
        no_metrics = failed[~failed["path"].map(
            lambda p: (directory / RUNS_DIR / p / METRICS_JSON).is_file())]
        if len(no_metrics) == len(failed):  # nothing unreadable to move aside first
            print(f"  (or: {rerun})")
    return 0


def rerun_points_command(args, selection: list[str]) -> str:
    """The `scalesweep rerun` command for ``selection`` with the user's arguments."""
    here = ["-d", str(args.directory)] if str(args.directory) not in (".", "") else []
    return shlex.join(["scalesweep", "rerun", *selection, *here,
                       *user_args(getattr(args, "profile", ""), getattr(args, "configfile", None) or [],
                                  getattr(args, "config", None) or [])])


def add_parser(sub) -> None:
    p = sub.add_parser("status", help="requested sweep points by state (done, disturbed, failed, running, stale, missing)")
    p.add_argument("--directory", "-d", default=".", help="campaign directory (default: .)")
    # action extend: a repeated --config or --configfile adds up (the commands printed
    # carry them all in one, as Snakemake reads only the last of each)
    p.add_argument("--configfile", nargs="*", action="extend", metavar="FILE",
                   help="config files merged over DIR/config/config.yaml, as for snakemake")
    p.add_argument("--config", nargs="+", action="extend", metavar="KEY=VALUE",
                   help="config values, as for snakemake (e.g. only='{workloads: [llm]}' "
                        "to list only the selected points)")
    p.add_argument("--profile", default="",
                   help="Snakemake profile: its config:/configfile: keys apply as for "
                        "snakemake, and the re-run command names it")
    p.add_argument("--all", action="store_true", help="list done points too")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--watch", nargs="?", type=float, const=10.0, metavar="SECONDS",
                   help="follow the campaign: the counts, the progress against the plan and "
                        "the block being measured, again every SECONDS (default 10) until "
                        "nothing is left to measure; in a log (not a terminal) a line only "
                        "when something changed")
    p.add_argument("--watch-count", type=int, help=argparse.SUPPRESS)  # tests: at most N looks
    p.set_defaults(func=run)
