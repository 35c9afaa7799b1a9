"""``scalesweep plan``'s start-up prediction (issue #44): the slowest rank's start per
runtime at the planned node counts, from the concurrent starts rule startup_scale measured
(results/startup_scale/*.json of the campaign directory or of --from-campaign DIR: a
campaign of config/startup_scale.yaml), at the plan's site's metadata rate
(storage.shared_fs). A prediction, said so; where nothing was measured or the site states
no rate, the plan says what to run or set instead."""

from __future__ import annotations

from pathlib import Path

from scalesweep.analyse.startmodel import StartModelError, predict, starts_frame
from scalesweep.record.metrics import MetricsError, read_metrics

SCALE_DIR = "results/startup_scale"


def startup_prediction(dirs: list[Path], site: dict, nodes: list[int],
                       wanted: bool = True) -> dict:
    """{"rows": [...], "site", "file_system", "metadata_ops_per_s", "source", "from"} or
    {"note": why there is no prediction}; {} where nothing was measured and the config
    does not ask for it (``wanted``: startup_scale.enabled)."""
    files = [p for d in dirs for p in sorted((Path(d) / SCALE_DIR).glob("*.json"))]
    if not files and not wanted:
        return {}
    if not files:
        where = ", ".join(str(d) for d in dirs) or "this campaign"
        return {"note": f"no concurrent starts measured in {where} ({SCALE_DIR}/): run "
                        "config/startup_scale.yaml on a node of this site, or give "
                        "--from-campaign DIR of a campaign that did"}
    fs = (site.get("storage") or {}).get("shared_fs") or {}
    rate = fs.get("metadata_ops_per_s")
    if not rate:
        return {"note": f"site {site['name']} states no storage.shared_fs.metadata_ops_per_s "
                        "(its shared file system's metadata rate, with its source)"}
    latency_us = fs.get("metadata_latency_us")
    try:
        rows = predict(starts_frame([read_metrics(p) for p in files]), sorted(set(nodes)), rate,
                       latency_us * 1e-6 if latency_us else None)
    except (StartModelError, MetricsError, KeyError, ValueError) as exc:  # a bad record
        return {"note": f"{type(exc).__name__}: {exc}"}
    rows = rows.astype(object).where(rows.notna(), None)  # JSON: null, never NaN
    return {"rows": rows.to_dict(orient="records"), "site": site["name"],
            "file_system": fs.get("name", ""), "metadata_ops_per_s": rate,
            "source": fs.get("source", ""), "from": [str(p) for p in files]}


def format_prediction(pred: dict) -> list[str]:
    """The plan's lines (none for {})."""
    if not pred:
        return []
    if "note" in pred:
        return [f"start-up at this scale (issue #44): not predicted: {pred['note']}"]
    lines = [f"start-up at this scale, a PREDICTION (issue #44): the slowest rank when the "
             f"nodes start together, each a cold client of {pred['file_system'] or 'the shared file system'} "
             f"at {pred['metadata_ops_per_s']:,.0f} metadata ops/s ({pred['source']}); "
             "model fitted to the concurrent starts measured in "
             f"{', '.join(sorted({str(Path(f).parent.parent.parent) for f in pred['from']}))}"]
    for row in pred["rows"]:
        if "not_predicted" in row and isinstance(row["not_predicted"], str):
            lines.append(f"  {row['runtime']:<24} not predicted: {row['not_predicted']}")
            continue
        bound = ", at the server's throughput bound" if row["at_bound"] else ""
        lines.append(f"  {row['runtime']:<24} {int(row['nodes']):>6} nodes  "
                     f"{row['predicted_s']:8.1f} s  (95% {row['low_s']:.1f} .. "
                     f"{row['high_s']:.1f} s; metadata {row['queue_s']:.1f} s{bound}; "
                     f"{row['metadata_ops_per_start']:,.0f} metadata ops a start)")
    lines.append("  not modelled: the data a start reads (object servers), the site's own "
                 "start (this machine's); the site's figures taken as given")
    return lines
