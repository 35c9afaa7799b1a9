"""`scalesweep status`: every requested point by state, and how to re-run the failed ones."""

from __future__ import annotations

import base64
import json
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from scalesweep.cli import UsageError
from scalesweep.collect import extra_repeats, point_states
from scalesweep.config import ConfigError, load_config
from scalesweep.sweep import SweepError, sweep_points


def sacct_fields(job_ids, fields: str, timeout: float = 30) -> dict[str, list[str]]:
    """``sacct -X`` of the jobs: job id -> the values of ``fields`` (comma-separated
    sacct field names after JobID); {} without sacct or jobs."""
    ids = sorted(set(job_ids))
    if not ids or not shutil.which("sacct"):
        return {}
    proc = subprocess.run(
        ["sacct", "-X", "-n", "-P", "-o", f"JobID,{fields}", "-j", ",".join(ids)],
        capture_output=True, text=True, timeout=timeout,
    )
    width = fields.count(",") + 1
    out = {}
    for line in proc.stdout.splitlines():
        job, *values = line.split("|")
        out[job.strip()] = (values + [""] * width)[:width]
    return out


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
    marker = _incomplete_marker(directory, f"results/runs/{path}/metrics.json")
    if state == "missing":
        return marker.exists()
    if state != "failed":
        return False
    failure = directory / "results" / "runs" / path / "failure.json"
    try:
        return marker.stat().st_mtime >= failure.stat().st_mtime
    except OSError:  # no marker, or no failure.json (an unreadable metrics.json)
        return False


def status_table(config: dict, directory: Path):
    requested = sweep_points(config)
    results = str(directory / "results")
    # repeats the workflow added (adaptive repeats, replacements of disturbed runs) count too
    table = point_states(sorted([*requested, *extra_repeats(requested, results)]), results)
    in_flight = [_in_flight(directory, p, s) for p, s in zip(table["path"], table["state"])]
    table.loc[in_flight, "state"] = "running"
    failed = table["state"].eq("failed")
    job_ids, jobs = [], {}
    for i in table.index[failed]:
        f = directory / "results" / "runs" / table.at[i, "path"] / "failure.json"
        if f.is_file():
            job = (json.loads(f.read_text()).get("slurm") or {}).get("job_id")
            if job:
                jobs[i] = job
                job_ids.append(job)
    verdict = slurm_states(job_ids)
    table["slurm_state"] = [verdict.get(jobs.get(i), "") for i in table.index]
    return table


STATES = ["done", "disturbed", "failed", "running", "missing"]


def _replacement_advice(config: dict, directory: Path, disturbed, rerun: str) -> list[str]:
    """How the disturbed runs' series get replacements: by the same command while a
    series is below its maximum of repeats (the workflow adds blocks until it has the
    undisturbed repeats it needs), by a raised maximum once it is there."""
    from scalesweep.adaptive import Series, repeat_bounds
    from scalesweep.sweep import SweepPoint

    kinds: dict[str, tuple[str, int, bool]] = {}
    for path in disturbed["path"]:
        point = SweepPoint.from_path(path)
        series = Series.of(point)
        low, high = repeat_bounds(config, point.workload)
        final = directory / "results" / "decisions" / series.path / "final.json"
        decision = (json.loads(final.read_text()).get("last_decision") or {}) if final.is_file() else {}
        point_dir = directory / "results" / "runs" / Path(path).parent
        done = max((int(p.name[3:]) for p in point_dir.glob("rep*")), default=0)
        if decision.get("enough"):
            kind = "enough"
        elif high > low and done < high:
            kind = "below"
        else:
            kind = "at_max"
        kinds[series.path] = (kind, high, high > low)
    lines = []
    enough = sorted(k for k, v in kinds.items() if v[0] == "enough")
    if enough:
        lines.append("Not needed for " + ", ".join(enough) + ": enough undisturbed repeats.")
    if any(v[0] == "below" for v in kinds.values()):
        lines.append("Re-running the same command measures replacement blocks (series "
                     "below their maximum of repeats):")
        lines.append(f"  {rerun}")
    for series, (kind, high, adaptive) in sorted(kinds.items()):
        if kind != "at_max":
            continue
        key = ("measurement='{max_repeats: %d}'" % (high + 2) if adaptive
               else "sweep='{repeats: %d}'" % (high + 1))
        lines.append(f"{series}: at its maximum of {high} repeats; to replace its disturbed "
                     f"runs: {rerun} --config {key}")
    return lines


def run(args) -> int:
    directory = Path(args.directory)
    configs = args.configfile or [str(directory / "config" / "config.yaml")]
    try:
        config = load_config(configs)
        table = status_table(config, directory)
    except (ConfigError, SweepError) as exc:
        raise UsageError(str(exc)) from None
    counts = table["state"].value_counts().reindex(STATES, fill_value=0)
    failed = table[table["state"] == "failed"]
    disturbed = table[table["state"] == "disturbed"]
    rerun = "snakemake" + (f" --profile {shlex.quote(args.profile)}" if args.profile else "")
    rerun += "".join(f" --configfile {shlex.quote(c)}" for c in args.configfile or [])
    if args.json:
        json.dump({"counts": counts.to_dict(), "points": table.to_dict(orient="records"),
                   "rerun_command": rerun}, sys.stdout, indent=2, default=str)
        print()
        return 0
    print(f"{len(table)} requested points: " + ", ".join(f"{n} {s}" for s, n in counts.items()))
    cols = ["state", "path", "reason", "slurm_state", "log"]
    shown = table[table["state"] != "done"] if not args.all else table
    if not shown.empty:
        print(shown[cols].to_string(index=False))
    if len(disturbed):
        print(f"\n{len(disturbed)} disturbed run(s) left out of the statistics (kept on disk, "
              "marked in runs.csv): something else used the CPU during the measurement:")
        for _, row in disturbed.iterrows():
            print(f"  {row['path']}: {row['reason']}")
        for line in _replacement_advice(config, directory, disturbed, rerun):
            print(line)
    if len(failed) or counts["missing"]:
        print("\nRe-run only the failed and missing points (finished ones are never redone):")
        print(f"  {rerun}")
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("status", help="requested sweep points by state (done, disturbed, failed, running, missing)")
    p.add_argument("--directory", "-d", default=".", help="campaign directory (default: .)")
    p.add_argument("--configfile", nargs="*", help="config files (default: DIR/config/config.yaml)")
    p.add_argument("--profile", default="", help="profile to name in the re-run command")
    p.add_argument("--all", action="store_true", help="list done points too")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run)
