"""Collect metrics files into one tidy table (one row per run) and list missing points."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable

import pandas as pd

from scalesweep.metrics import MetricsError, read_metrics
from scalesweep.runpoint import FAILURE_JSON
from scalesweep.sweep import SweepPoint, scaling_count

RUN_COLUMNS = [
    "workload", "payload", "runtime", "nodes", "gpus", "ranks", "threads", "repeat",
    "count", "world_size", "time_s", "epoch_time_first_s", "train_s", "images_per_s",
    "final_loss", "final_accuracy", "peak_rss_mb", "harness_wall_s", "harness_overhead_s",
    "hosts", "launcher", "image_digest", "slurm_job_id", "git_commit", "torch", "start", "end",
    "path",
]


def steady_epoch_time(epoch_s: list[float]) -> float:
    """Seconds per epoch, excluding the first epoch (warm-up) when there are several."""
    steady = epoch_s[1:] if len(epoch_s) > 1 else epoch_s
    return sum(steady) / len(steady)


def run_row(metrics: dict, path: str, payload_kind: str) -> dict:
    point = SweepPoint(**metrics["point"])
    row = point.as_dict()
    row.update(
        payload=payload_kind,
        count=scaling_count(point, payload_kind),
        world_size=point.world_size,
        launcher=metrics.get("launcher"),
        peak_rss_mb=metrics.get("peak_rss_mb"),
        harness_wall_s=metrics.get("harness_wall_s"),
        harness_overhead_s=metrics.get("harness_overhead_s"),
        hosts=";".join(metrics.get("hosts", [])),
        image_digest=(metrics.get("image") or {}).get("content_digest"),
        slurm_job_id=(metrics.get("slurm") or {}).get("job_id"),
        git_commit=metrics.get("git_commit"),
        torch=(metrics.get("versions") or {}).get("torch"),
        start=metrics.get("harness_start") or metrics.get("start"),
        end=metrics.get("harness_end") or metrics.get("end"),
        path=path,
    )
    if payload_kind == "cnn":
        epochs = metrics["epoch_s"]
        row.update(
            time_s=steady_epoch_time(epochs),
            epoch_time_first_s=epochs[0],
            train_s=metrics["train_s"],
            images_per_s=metrics["images_per_s"],
            final_loss=metrics["final_loss"],
            final_accuracy=metrics["final_accuracy"],
        )
    else:
        ttft, latency = metrics.get("ttft_s") or {}, metrics.get("latency_s") or {}
        row.update(
            time_s=metrics["wall_s"],
            tokens_per_s=metrics.get("tokens_per_s"),
            requests_per_s=metrics.get("requests_per_s"),
            ttft_p50_s=ttft.get("p50"),
            ttft_p90_s=ttft.get("p90"),
            ttft_p99_s=ttft.get("p99"),
            latency_p50_s=latency.get("p50"),
            latency_p99_s=latency.get("p99"),
            peak_rss_mb=(metrics.get("memory") or {}).get("server_peak_rss_mb"),
            engine=(metrics.get("engine") or {}).get("name"),
            model=(metrics.get("model") or {}).get("name"),
            synthetic_model=(metrics.get("model") or {}).get("synthetic"),
        )
    return row


def collect_runs(metrics_paths: Iterable[str], config: dict) -> pd.DataFrame:
    rows = []
    for path in metrics_paths:
        m = read_metrics(path)
        kind = config["workloads"][m["point"]["workload"]]["payload"]
        rows.append(run_row(m, str(path), kind))
    df = pd.DataFrame(rows)
    if df.empty:
        return pd.DataFrame(columns=RUN_COLUMNS)
    cols = [c for c in RUN_COLUMNS if c in df.columns]
    return df[cols + [c for c in df.columns if c not in cols]].sort_values(
        ["workload", "runtime", "count", "threads", "repeat"], ignore_index=True
    )


def point_states(
    points: Iterable[SweepPoint], results: str = "results", done: Iterable[str] = ()
) -> pd.DataFrame:
    """done / failed (with reason) / missing for every requested point.

    ``done``: metrics files already read and validated (collect_runs' ``path`` column, as
    aggregate passes it): they are not parsed a second time (at 100,000 runs that second
    pass was 13 s of a 37 s aggregation).
    """
    done = {str(Path(f)) for f in done}
    rows = []
    for p in points:
        d = Path(results) / "runs" / p.path
        state, reason, log = "missing", "", ""
        if str(d / "metrics.json") in done:
            state = "done"
        elif (d / "metrics.json").is_file():
            try:
                read_metrics(d / "metrics.json")
                state = "done"
            except MetricsError as exc:
                state, reason = "failed", str(exc)
        elif (d / FAILURE_JSON).is_file():
            failure = json.loads((d / FAILURE_JSON).read_text())
            state, reason, log = "failed", failure.get("reason", ""), failure.get("log", "")
        rows.append({**p.as_dict(), "path": p.path, "state": state, "reason": reason, "log": log})
    return pd.DataFrame(rows)
