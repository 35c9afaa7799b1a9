"""`scalesweep archive` and `scalesweep merge`: move measurements between campaigns
without ever overwriting one.

A campaign directory holds config/, results/runs/<point>/ and resources/*.manifest.json.
Merging copies finished points (a valid metrics.json) that the destination lacks; a point
finished in both is kept as it is in the destination and reported as a conflict when the
two differ. Failed or partial points are never copied over finished ones.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import sys
import tarfile
import time
from pathlib import Path

from scalesweep.campaign.crate import CRATE, crate, describe
from scalesweep.campaign.usage import UsageError
from scalesweep.plan.sweep import OLD_LAYOUT_NOTE, SweepError, SweepPoint, in_history, old_layout
from scalesweep.record.metrics import MetricsError, read_metrics
from scalesweep.record.pointdir import METRICS_JSON, RUNS_DIR, SUMMARY_DIR


def finished_points(campaign: Path) -> dict[str, Path]:
    """point path -> its directory, for every point with a valid metrics.json."""
    runs = campaign / RUNS_DIR
    out = {}
    for metrics in sorted(runs.rglob(METRICS_JSON)) if runs.is_dir() else []:
        rel = str(metrics.parent.relative_to(runs))
        if in_history(rel):  # earlier runs travel with their point's directory
            continue
        if old_layout(rel):
            print(f"scalesweep: {metrics}: {OLD_LAYOUT_NOTE}", file=sys.stderr)
            continue
        try:
            SweepPoint.from_path(rel)
            read_metrics(metrics)
        except (SweepError, MetricsError):
            continue
        out[rel] = metrics.parent
    return out


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def merge(sources: list[Path], dest: Path) -> dict[str, list[str]]:
    report: dict[str, list[str]] = {"copied": [], "identical": [], "conflicts": []}
    have = finished_points(dest)
    for src in sources:
        if src.resolve() == dest.resolve():
            raise UsageError(f"cannot merge {src} into itself")
        for rel, d in finished_points(src).items():
            if rel in have:
                same = _digest(d / METRICS_JSON) == _digest(have[rel] / METRICS_JSON)
                report["identical" if same else "conflicts"].append(f"{rel} (from {src})")
                continue
            target = dest / RUNS_DIR / rel
            tmp = target.with_name(f".{target.name}.merging-{os.getpid()}")
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.parent.mkdir(parents=True, exist_ok=True)
            shutil.copytree(d, tmp)
            if target.exists():  # a failed or partial attempt: keep it beside, never lose it
                target.rename(target.with_name(f"{target.name}.replaced-{os.getpid()}"))
            os.replace(tmp, target)
            have[rel] = target
            report["copied"].append(f"{rel} (from {src})")
    return report


def _no_caches(member: tarfile.TarInfo) -> tarfile.TarInfo | None:
    """The summary's caches (results/summary/.*-cache.npz: rows and file identities of
    this machine, rebuilt from the runs) stay out of an archive."""
    name = Path(member.name)
    if name.parent.as_posix().endswith(SUMMARY_DIR) and name.name.startswith(".") \
            and name.name.endswith((".npz", ".tmp")):
        return None
    return member


def archive(campaign: Path, out: Path) -> int:
    """Tar a campaign's measurements, configs and image/model manifests (no images), with
    its RO-Crate metadata at the root (scalesweep.campaign.crate)."""
    if not (campaign / "results").is_dir():
        raise UsageError(f"{campaign} has no results/ directory")
    members = [p for p in ("config", "results", "logs") if (campaign / p).exists()]
    members += [str(p.relative_to(campaign)) for p in (campaign / "resources").rglob("*.json")
                if "images" in p.parts or p.name.endswith((".manifest.json", ".verified.json"))] \
        if (campaign / "resources").is_dir() else []
    runs = len(finished_points(campaign))
    metadata = json.dumps(crate(campaign, members, runs), indent=1).encode()
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    with tarfile.open(tmp, "w:gz") as tar:
        info = tarfile.TarInfo(CRATE)
        info.size, info.mtime, info.mode = len(metadata), int(time.time()), 0o644
        tar.addfile(info, io.BytesIO(metadata))
        for m in members:
            tar.add(campaign / m, arcname=m, filter=_no_caches)
    os.replace(tmp, out)
    return runs


def _run_merge(args) -> int:
    sources = [Path(s) for s in args.sources]
    for s in sources:
        if s.suffix in (".gz", ".tgz") and s.is_file():
            raise UsageError(f"{s}: unpack an archive first (tar xzf {s} -C DIR), then merge DIR")
        if not (s / RUNS_DIR).is_dir():
            raise UsageError(f"{s} is not a campaign directory (no results/runs/)")
    for where in (*sources, Path(args.into)):  # where the runs come from (unpacked archives)
        line = describe(where)
        if line:
            print(line)
    report = merge(sources, Path(args.into))
    for key in ("copied", "identical", "conflicts"):
        print(f"{len(report[key])} {key}")
        for line in report[key] if key != "identical" else []:
            print(f"  {line}")
    return 1 if report["conflicts"] and args.strict else 0


def _run_archive(args) -> int:
    n = archive(Path(args.campaign), Path(args.out))
    print(f"{args.out}: {n} finished points")
    return 0


def add_parser(sub) -> None:
    m = sub.add_parser("merge", help="copy finished points of other campaigns into one (never overwrites)")
    m.add_argument("sources", nargs="+", help="campaign directories to take points from")
    m.add_argument("--into", required=True, help="destination campaign directory")
    m.add_argument("--strict", action="store_true", help="exit 1 if a point differs in both")
    m.set_defaults(func=_run_merge)
    a = sub.add_parser("archive", help="tar a campaign's measurements, configs and manifests")
    a.add_argument("campaign")
    a.add_argument("out", help="e.g. campaign-2026-11-21.tar.gz")
    a.set_defaults(func=_run_archive)
