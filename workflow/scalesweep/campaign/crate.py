"""A campaign archive's RO-Crate metadata (``ro-crate-metadata.json``, RO-Crate 1.1, the
Workflow Run Crate shape): what a site publishing the archive, or a reader of it years
later, needs to know without opening a run: the campaign as one CreateAction of the
scalesweep workflow at its commit(s), on its site and hosts, from its first run to its
last, with its config and summary tables as files (size and sha256) and its runs counted.
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

CRATE = "ro-crate-metadata.json"
CONTEXT = "https://w3id.org/ro/crate/1.1/context"
SPEC = "https://w3id.org/ro/crate/1.1"
# the profiles the crate follows (Workflow Run Crate: a run of a workflow, its instrument)
PROFILES = ("https://w3id.org/ro/wfrun/process/0.5", "https://w3id.org/ro/wfrun/workflow/0.5")
WORKFLOW = "#scalesweep"
RUN = "#campaign"
SUMMARY = "results/summary"
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

    summary = campaign / SUMMARY
    facts = json.loads((summary / "campaign.json").read_text()) \
        if (summary / "campaign.json").is_file() else {}
    config = facts.get("config") or {}
    table = pd.read_csv(summary / "runs.csv") if (summary / "runs.csv").is_file() else pd.DataFrame()

    def values(column: str) -> list[str]:
        if column not in table:
            return []
        return sorted({str(v) for v in table[column].dropna() if str(v)})

    hosts = sorted({h for v in values("hosts") for h in v.split(";") if h})
    start, end = values("start"), values("end")
    files = [_file(campaign, f"{SUMMARY}/{name}", f"the campaign's {name}")
             for name in LISTED if (summary / name).is_file()]
    if (campaign / "config" / "config.yaml").is_file():
        files.insert(0, _file(campaign, "config/config.yaml", "the campaign's config"))
    parts = [{"@id": f"{m}/", "@type": "Dataset", "name": m} for m in members
             if (campaign / m).is_dir()]
    now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    commits = values("git_commit")
    graph: list[dict[str, Any]] = [
        {"@id": CRATE, "@type": "CreativeWork", "conformsTo": [{"@id": SPEC}],
         "about": {"@id": "./"}},
        {"@id": "./", "@type": "Dataset",
         "name": f"scalesweep campaign {campaign.resolve().name}",
         "description": "Container overhead and scaling measurements made by scalesweep: "
                        f"{runs} finished runs, their summaries and the config they were "
                        "measured under",
         "datePublished": now, "conformsTo": [{"@id": p} for p in PROFILES],
         "hasPart": [{"@id": x["@id"]} for x in files + parts],
         "mentions": [{"@id": RUN}], "mainEntity": {"@id": WORKFLOW}},
        {"@id": WORKFLOW, "@type": ["SoftwareSourceCode", "ComputationalWorkflow"],
         "name": "scalesweep", "programmingLanguage": {"@id": "https://snakemake.github.io"},
         "version": ", ".join(commits) or "unknown"},
        {"@id": "https://snakemake.github.io", "@type": "ComputerLanguage",
         "name": "Snakemake"},
        {"@id": RUN, "@type": "CreateAction", "name": "the campaign's runs",
         "instrument": {"@id": WORKFLOW},
         "startTime": start[0] if start else None, "endTime": end[-1] if end else None,
         "result": [{"@id": x["@id"]} for x in files if x["@id"].startswith(SUMMARY)],
         "object": [{"@id": "config/config.yaml"}] if files and
         files[0]["@id"] == "config/config.yaml" else [],
         "location": config.get("site") or None, "hosts": hosts, "runs": runs},
        *files, *parts,
    ]
    return {"@context": CONTEXT, "@graph": graph}


def describe(directory: Path) -> str | None:
    """One line of what a campaign's crate says (its workflow commit(s), site, runs and
    time), or None where the directory holds no readable crate."""
    try:
        graph = {e["@id"]: e for e in json.loads((directory / CRATE).read_text())["@graph"]}
        run, workflow = graph[RUN], graph[WORKFLOW]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return (f"{directory}: RO-Crate: scalesweep {workflow.get('version')}, site "
            f"{run.get('location')}, {run.get('runs')} runs, {run.get('startTime')} .. "
            f"{run.get('endTime')}")
