"""The LLM kind: inference against a model server, one server per node
(scripts/infer_llm.py), swept over GPUs per node."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import Any, Iterable

from scalesweep.plan.kinds.base import Invocation, Merit, WorkloadKind, as_list, register
from scalesweep.platform.runtimes import is_native
from scalesweep.platform.site import site_of
from scalesweep.record.geometry import Geometry
from scalesweep.record.pointdir import OUTPUTS_JSONL, PAYLOAD_JSON

MODELS_DIR = "resources/models"
SYNTHETIC_LABEL = "synthetic weights"
GPU_VENDOR = {"rocm": "amd", "cuda": "nvidia", "cpu": "none"}


def model_label(model, synthetic) -> str:
    """A model's name as every table and figure shows it: synthetic weights said so."""
    name = "unknown model" if model is None or (isinstance(model, float) and model != model) \
        else str(model)
    return f"{name} ({SYNTHETIC_LABEL})" if synthetic is True or str(synthetic).lower() == "true" \
        else name


def request_spread_pct(metrics: dict) -> float | None:
    """The coefficient of variation (sample std / mean, percent) of an LLM run's
    per-request decode rates (tokens/s after the first token): from the requests it
    recorded, else from its ``decode_tokens_per_s`` summary's std (payloads since the
    summary has one); None with fewer than two rates."""
    rates = [r.get("decode_tokens_per_s") for r in metrics.get("requests") or []
             if isinstance(r, dict) and r.get("ok", True)]
    rates = [float(v) for v in rates
             if isinstance(v, (int, float)) and math.isfinite(v)]
    if len(rates) >= 2:
        mean = statistics.fmean(rates)
        return 100.0 * statistics.stdev(rates) / mean if mean > 0 else None
    summary = metrics.get("decode_tokens_per_s") or {}
    std, mean = summary.get("std"), summary.get("mean")
    if isinstance(std, (int, float)) and isinstance(mean, (int, float)) and mean > 0:
        return 100.0 * std / mean
    return None


def concurrency_levels(wl: dict) -> list[int]:
    """An LLM workload's concurrency levels (``concurrency``: one, or a list: an axis
    measured within each point, the first level the headline)."""
    c = wl["concurrency"]
    return [int(x) for x in c] if isinstance(c, list) else [int(c)]


@register
class LLM(WorkloadKind):
    name = "llm"
    script = "scripts/infer_llm.py"
    record_payload = "llm_inference"
    input_key, input_section = "model", "models"
    merit = Merit("tokens_per_s", "tokens/s", higher_is_better=True, label="generated tokens/s")
    server_per_node = True
    engine_served = True
    summary_table = "llm"
    probe_kernel = "gbps"  # decoding is memory-bound

    def inputs(self, wl: dict, config: dict) -> dict[str, str]:
        return {"model": f"{MODELS_DIR}/{wl['model']}"}

    def per_node_axis(self, wl: dict, node: dict) -> str:
        return "gpus_per_node"

    def required_axes(self, wl: dict, node: dict) -> list[str]:
        return ["runtimes", "nodes"]  # GPUs per node: 0 (CPU) unless swept

    def geometries(self, name: str, wl: dict, axes: dict, site: dict) -> Iterable[tuple[int, int, int]]:
        for nodes in as_list(axes["nodes"]):
            for gpus in as_list(axes.get("gpus_per_node", [0])):
                yield nodes, gpus, 1  # one server per node

    def scaling_count(self, point: Any) -> int:
        g = Geometry.of(point)
        return g.nodes * g.gpus

    def count_unit(self, points: Iterable[Any]) -> str:
        return "GPUs"

    def args(self, point: Any, wl: dict, config: dict, inputs: dict, out_dir: Path) -> list[str]:
        """The payload's arguments (reads no file: a dry run shows them before the model
        is staged)."""
        model_dir = Path(inputs["model"]).resolve()
        model_cfg = config["models"][wl["model"]]
        model = model_cfg["name"] if model_cfg["source"] == "ollama" else str(model_dir / "model.gguf")
        out = out_dir.resolve()
        code = Path(config["_code_root"]).resolve()
        levels = concurrency_levels(wl)
        args = [
            "--engine", wl["engine"],
            "--api", wl["api"],
            "--model", model,
            "--model-card", str(model_dir / "model.json"),
            "--prompts", str(code / wl["prompts"]),
            "--max-tokens", str(wl["max_tokens"]),
            "--concurrency", str(levels[0]),
            "--warmup", str(wl["warmup"]),
            "--gpus", str(point.gpus),
            "--gpu-vendor", GPU_VENDOR[site_of(config)["node"]["device"]],
            "--threads", str(point.threads),
            "--seed", str(wl["seed"]),
            "--out", str(out / PAYLOAD_JSON),
            "--outputs", str(out / OUTPUTS_JSONL),
            "--server-log", str(out / "server.log"),
        ]
        if len(levels) > 1:
            args += ["--concurrency-levels", ",".join(map(str, levels))]
        if wl["num_requests"]:
            args += ["--num-requests", str(wl["num_requests"])]
        if model_cfg["source"] == "ollama":
            # natively the configured binary; in a container the image's own `ollama`
            ollama_bin = model_cfg["ollama_bin"] if is_native(point.runtime) else "ollama"
            args += ["--ollama-bin", ollama_bin, "--models-dir", str(model_dir / "ollama")]
        return args

    def invocation(self, point: Any, wl: dict, config: dict, inputs: dict,
                   out_dir: Path) -> Invocation:
        model_dir = Path(inputs["model"]).resolve()
        args = self.args(point, wl, config, inputs, out_dir)
        card = json.loads((model_dir / "model.json").read_text())
        return Invocation(self.script, args, str(model_dir),
                          extra={"model_card": {k: card.get(k) for k in
                                                ("name", "synthetic", "sha256", "n_params", "source")}})

    def planned(self, point: Any, wl: dict, config: dict, inputs: dict,
                out_dir: Path) -> Invocation:
        return Invocation(self.script, self.args(point, wl, config, inputs, out_dir),
                          str(Path(inputs["model"]).resolve()))

    def row(self, metrics: dict) -> dict:
        ttft, latency = metrics.get("ttft_s") or {}, metrics.get("latency_s") or {}
        row = dict(
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
            concurrency=metrics.get("concurrency"),
            # the concurrency axis, per level (JSON: scalesweep.report.tables.concurrency_table)
            concurrency_levels=json.dumps([
                {"concurrency": lv["concurrency"], "tokens_per_s": lv.get("tokens_per_s"),
                 "requests_per_s": lv.get("requests_per_s"),
                 **{f"{m}_{q}_s": (lv.get(f"{m}_s") or {}).get(q)
                    for m in ("ttft", "latency") for q in ("p50", "p90", "p99")}}
                for lv in metrics["concurrency_levels"]]) if metrics.get("concurrency_levels") else None,
            model=(metrics.get("model") or {}).get("name"),
            synthetic_model=bool((metrics.get("model") or {}).get("synthetic", False)),
            # the spread inside the run: CV of its requests' decode rates, percent
            within_run_cv_pct=request_spread_pct(metrics),
        )
        row["model_label"] = model_label(row["model"], row["synthetic_model"])
        return row
