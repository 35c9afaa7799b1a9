"""`scalesweep overlaps`: did anything of the workflow run beside a measurement? The
campaign's Snakemake logs (and sacct) read by ``scalesweep.analyse.timeline``."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path

from scalesweep.analyse.timeline import overlaps, parse_snakemake_log, with_slurm_times
from scalesweep.campaign.usage import UsageError


def campaign_logs(directory: str | Path) -> list[Path]:
    return sorted((Path(directory) / ".snakemake" / "log").glob("*.snakemake.log"))


def run(args) -> int:
    logs = [Path(p) for p in args.log] or campaign_logs(args.directory)
    if not logs:
        raise UsageError(f"no Snakemake log under {args.directory}/.snakemake/log")
    report = []
    total_bad = 0
    for log in logs:
        jobs = with_slurm_times(parse_snakemake_log(log))
        bad = overlaps(jobs)
        total_bad += len(bad)
        report.append({
            "log": str(log),
            "jobs": len(jobs),
            "measurements": sum(j.measurement for j in jobs),
            "overlaps": [{"measurement": asdict(m), "other": asdict(o)} for m, o in bad],
        })
    if args.json:
        json.dump(report, sys.stdout, indent=2)
        print()
    else:
        for r in report:
            print(f"{r['log']}: {r['jobs']} jobs, {r['measurements']} measurements, "
                  f"{len(r['overlaps'])} overlapping a measurement")
            for o in r["overlaps"]:
                m, other = o["measurement"], o["other"]
                print(f"  {m['rule']}[{m['wildcards']}] overlapped {other['rule']}"
                      f"[{other['wildcards']}]")
    return 1 if total_bad else 0


def add_parser(sub) -> None:
    p = sub.add_parser(
        "overlaps",
        help="check from the job logs (and sacct) that no job ran beside a measurement",
    )
    p.add_argument("log", nargs="*", help="Snakemake logs (default: every log of the campaign)")
    p.add_argument("--directory", "-d", default=".", help="campaign directory (default: .)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run)
