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
from scalesweep.record.load import target_of
from scalesweep.record.pointdir import OUTPUTS_JSONL, PAYLOAD_JSON, REQUESTS_JSONL

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


# the per-request latencies a load level summarises (scalesweep.record.load.level_summary)
# and the percentiles runs.csv keeps of each
LOAD_METRICS = ("ttft", "tpot", "itl", "e2e")
QUANTILES = ("p50", "p90", "p99")
# percentiles the payload gives early-stopping estimates of
EARLY_STOPPING = ("p90", "p99")


def level_label(shape, rate, concurrency) -> str:
    """A load level as tables and figures name it."""
    if shape == "closed":
        return f"closed loop, concurrency {int(concurrency)}"
    if shape == "offline":
        return "offline (every request at once)"
    return f"{shape} arrivals, {float(rate):g} requests/s"


def compact_level(level: dict) -> dict:
    """One load level of metrics.json as runs.csv keeps it (load_levels, JSON): the
    level, its throughput and goodput, and per latency metric its percentiles with their
    confidence intervals and early-stopping estimates."""
    out = {k: level.get(k) for k in ("level", "shape", "rate", "concurrency", "burstiness",
                                     "bisection", "n", "n_ok", "n_failed", "duration_s",
                                     "output_tokens_per_s", "requests_per_s", "goodput_rps",
                                     "fraction_met", "meets_target", "meets_target_reason")}
    for metric in LOAD_METRICS:
        stats = level.get(metric) or {}
        for q in QUANTILES:
            ci = stats.get(q) or {}
            out[f"{metric}_{q}_s"] = ci.get("estimate")
            out[f"{metric}_{q}_low_s"], out[f"{metric}_{q}_high_s"] = ci.get("low"), ci.get("high")
        for q in EARLY_STOPPING:
            es = (stats.get("early_stopping") or {}).get(q) or {}
            out[f"{metric}_{q}_es_s"] = es.get("estimate")
            out[f"{metric}_{q}_supported"] = es.get("supported")
            out[f"{metric}_{q}_note"] = es.get("note")
    return out


def target_arg(target) -> str:
    """A workload's ``load.target`` as the payload's ``--target``: a preset's name, or
    ``ttft_s=X,tpot_s=Y[,percentile=Q]``."""
    if isinstance(target, str):
        return target
    return ",".join(f"{k}={target[k]:g}" for k in ("ttft_s", "tpot_s", "percentile") if k in target)


def load_args(load: dict, repeat: int = 1) -> list[str]:
    """The payload's load arguments from a workload's ``load`` section (the schema's
    defaults filled in): open-loop rates, arrivals, offline, target, highest rate. The
    arrival seed is ``load.seed`` plus the repeat: the two runs of a block (one repeat)
    get the same requests at the same times, and repeats different draws, so that the
    spread between runs includes the arrivals' own."""
    if not load:
        return []
    placement = (["--client-placement", load["client"]]
                 if load.get("client", "with_server") != "with_server" else [])
    if not (load.get("rates") or load.get("offline")):  # closed-loop levels only
        return placement
    args = ["--arrival", load["arrival"], "--burstiness", f"{load['burstiness']:g}",
            "--arrival-seed", str(load["seed"] + repeat), "--max-in-flight", str(load["max_in_flight"])]
    if load["rates"]:
        args += ["--request-rates", ",".join(f"{r:g}" for r in load["rates"])]
    if load["requests"]:
        args += ["--load-requests", str(load["requests"])]
    for key in ("input_words", "output_tokens"):
        if load.get(key):
            args += [f"--{key.replace('_', '-')}", f"{load[key][0]}:{load[key][1]}"]
    if load["offline"]:
        args.append("--offline")
    args += placement
    if load.get("target") is not None:
        args += ["--target", target_arg(load["target"])]
        if load["max_rate_steps"]:
            args += ["--max-rate-steps", str(load["max_rate_steps"])]
    return args


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
        args += ["--requests-out", str(out / REQUESTS_JSONL),
                 *load_args(wl.get("load") or {}, point.repeat)]
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
        """The computed figures (scalesweep.record.measures.LLM); the others are read as
        they are (WorkloadKind.values)."""
        ttft, latency = metrics.get("ttft_s") or {}, metrics.get("latency_s") or {}
        model = metrics.get("model") or {}
        synthetic = bool(model.get("synthetic", False))
        return dict(
            time_s=metrics["wall_s"],
            ttft_p50_s=ttft.get("p50"),
            ttft_p90_s=ttft.get("p90"),
            ttft_p99_s=ttft.get("p99"),
            latency_p50_s=latency.get("p50"),
            latency_p99_s=latency.get("p99"),
            # the concurrency axis, per level (JSON: scalesweep.report.tables.concurrency_table)
            concurrency_levels=json.dumps([
                {"concurrency": lv["concurrency"], "tokens_per_s": lv.get("tokens_per_s"),
                 "requests_per_s": lv.get("requests_per_s"),
                 **{f"{m}_{q}_s": (lv.get(f"{m}_s") or {}).get(q)
                    for m in ("ttft", "latency") for q in ("p50", "p90", "p99")}}
                for lv in metrics["concurrency_levels"]]) if metrics.get("concurrency_levels") else None,
            # the load levels (JSON: scalesweep.analyse.load) and the highest rate within
            # the target (scripts/llm_load.py)
            load_levels=json.dumps([compact_level(lv) for lv in metrics["load_levels"]])
            if metrics.get("load_levels") else None,
            max_rate_bound=(metrics.get("max_rate") or {}).get("bound"),
            # where the client ran (load.client: with_server, host)
            client_placement=(metrics.get("client") or {}).get("placement"),
            synthetic_model=synthetic,
            # the spread inside the run: CV of its requests' decode rates, percent
            within_run_cv_pct=request_spread_pct(metrics),
            model_label=model_label(model.get("name"), synthetic),
        )


def workload_targets(config: dict, workloads) -> dict[str, dict | None]:
    """``{workload: its load.target normalised (record.load.target_of), or None}``."""
    out = {}
    for name in workloads:
        spec = ((config["workloads"][name].get("load") or {}).get("target"))
        out[name] = target_of(spec) if spec is not None else None
    return out
