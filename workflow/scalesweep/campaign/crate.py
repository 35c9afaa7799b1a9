"""A campaign archive's RO-Crate metadata (``ro-crate-metadata.json``, RO-Crate 1.1): what a
site publishing the archive, or a reader of it years later, needs to know without opening
a run: the campaign as one CreateAction (a run, as the Workflow Run Crate profiles model
it, whose instrument is the scalesweep workflow at its commits; the workflow itself is not
in the archive, so the crate does not claim those profiles), on its site (a Place) and
hosts, from its first run to its last, with its config and summary tables as files (size
and sha256) and its runs counted. Terms beyond RO-Crate 1.1's context are defined in the
crate's own context (``TERMS``). Archive a finished campaign: a file that changes while
the archive is written no longer matches its sha256.
``scalesweep archive`` writes it at the archive's root; ``scalesweep compare`` and
``merge`` read it where a campaign directory has one (an unpacked archive) and say which
workflow, site and time its runs come from (``describe``).
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from scalesweep.record.pointdir import SUMMARY_DIR

CRATE = "ro-crate-metadata.json"
CONTEXT = "https://w3id.org/ro/crate/1.1/context"
SPEC = "https://w3id.org/ro/crate/1.1"
# the terms it uses that RO-Crate 1.1's context lacks: the Workflow Run Crate's sha256,
# and scalesweep's own counts
TERMS = {"sha256": "https://w3id.org/ro/terms/workflow-run#sha256",
         "hosts": "https://w3id.org/scalesweep/terms#hosts",
         "runs": "https://w3id.org/scalesweep/terms#runs"}
WORKFLOW = "#scalesweep"
RUN = "#campaign"
# the summary files listed one by one (the runs' own metrics.json files are counted, not
# listed: a campaign can hold 100,000 of them)
LISTED = ("runs.csv", "overhead.csv", "scaling.csv", "llm.csv", "points.csv", "campaign.json")
MEDIA = {".csv": "text/csv", ".json": "application/json", ".yaml": "application/yaml"}


def _file(campaign: Path, rel: str, about: str) -> dict[str, Any]:
    path = campaign / rel
    return {"@id": rel, "@type": "File", "name": Path(rel).name, "description": about,
            "encodingFormat": MEDIA.get(path.suffix, "application/octet-stream"),
            "contentSize": str(path.stat().st_size),
            "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}


def crate(campaign: Path, members: list[str], runs: int) -> dict[str, Any]:
    """The crate of ``campaign``'s archive holding ``members`` (its top-level paths), with
    ``runs`` finished points; facts from results/summary (campaign.json, runs.csv)."""
    import pandas as pd

    summary = campaign / SUMMARY_DIR
    try:
        facts = json.loads((summary / "campaign.json").read_text())
    except (OSError, ValueError):
        facts = {}
    config = facts.get("config") or {} if isinstance(facts, dict) else {}
    try:  # text as written (a commit of digits stays one)
        table = pd.read_csv(summary / "runs.csv", dtype=str, keep_default_na=False,
                            usecols=lambda c: c in ("git_commit", "hosts", "start", "end"))
    except (OSError, pd.errors.EmptyDataError, pd.errors.ParserError):
        table = pd.DataFrame()

    def values(column: str) -> list[str]:
        return sorted({v for v in table[column] if v}) if column in table else []

    def when(column: str, last: bool) -> str | None:
        times = pd.to_datetime(pd.Series(values(column), dtype=str), utc=True,
                               errors="coerce").dropna()
        if times.empty:
            return None
        return (times.max() if last else times.min()).strftime("%Y-%m-%dT%H:%M:%SZ")

    hosts = sorted({h for v in values("hosts") for h in v.split(";") if h})
    files = [_file(campaign, f"{SUMMARY_DIR}/{name}", f"the campaign's {name}")
             for name in LISTED if (summary / name).is_file()]
    if (campaign / "config" / "config.yaml").is_file():
        files.insert(0, _file(campaign, "config/config.yaml", "the campaign's config"))
    parts = [{"@id": f"{m}/", "@type": "Dataset", "name": m} for m in members
             if (campaign / m).is_dir()]
    now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    commits = values("git_commit")
    site = config.get("site")
    place = {"@id": f"#site-{site}", "@type": "Place", "name": site} if site else None
    graph: list[dict[str, Any]] = [
        {"@id": CRATE, "@type": "CreativeWork", "conformsTo": [{"@id": SPEC}],
         "about": {"@id": "./"}},
        {"@id": "./", "@type": "Dataset",
         "name": f"scalesweep campaign {campaign.resolve().name}",
         "description": "Container overhead and scaling measurements made by scalesweep: "
                        f"{runs} finished runs, their summaries and the config they were "
                        "measured under",
         "datePublished": now,
         "hasPart": [{"@id": x["@id"]} for x in files + parts],
         "mentions": [{"@id": RUN}]},
        {"@id": WORKFLOW, "@type": "SoftwareApplication", "name": "scalesweep",
         "description": "the Snakemake workflow that measured the runs (not in the archive)",
         "programmingLanguage": {"@id": "https://snakemake.github.io"},
         "version": ", ".join(commits) or "unknown"},
        {"@id": "https://snakemake.github.io", "@type": "ComputerLanguage",
         "name": "Snakemake"},
        {"@id": RUN, "@type": "CreateAction", "name": "the campaign's runs",
         "instrument": {"@id": WORKFLOW},
         "startTime": when("start", last=False), "endTime": when("end", last=True),
         "result": [{"@id": x["@id"]} for x in files if x["@id"].startswith(SUMMARY_DIR)],
         "object": [{"@id": "config/config.yaml"}] if files and
         files[0]["@id"] == "config/config.yaml" else [],
         "location": {"@id": place["@id"]} if place else None, "hosts": hosts,
         "runs": runs},
        *([place] if place else []), *files, *parts,
    ]
    return {"@context": [CONTEXT, TERMS], "@graph": graph}


def describe(directory: Path) -> str | None:
    """One line of what a campaign's crate says (its workflow commit(s), site, runs and
    time), or None where the directory holds no readable crate."""
    try:
        graph = {e["@id"]: e for e in json.loads((directory / CRATE).read_text())["@graph"]}
        run, workflow = graph[RUN], graph[WORKFLOW]
        place = graph.get((run.get("location") or {}).get("@id"), {})
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return (f"{directory}: RO-Crate: scalesweep {workflow.get('version')}, site "
            f"{place.get('name')}, {run.get('runs')} runs, {run.get('startTime')} .. "
            f"{run.get('endTime')}")
