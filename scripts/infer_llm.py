#!/usr/bin/env python3
"""LLM inference payload: run an engine, stream a prompt set through it, time it.

One point of the sweep = one engine (``--engine``: llama.cpp's OpenAI-compatible server
from llama-cpp-python, Ollama, or an in-process PyTorch Llama; see ``llm_engines.py``)
on one model with N visible GPUs, at concurrency C:

1. start the engine (a server unless ``--servers`` names already-running ones, with the
   GPU visibility environment from :func:`gpu_visibility_env` and its output in
   ``--server-log``; or the model loaded in this process);
2. wait until it is ready with a bounded timeout (a clear error naming the log if it dies);
3. warm up (``--warmup`` untimed requests per server, or to the in-process engine);
4. send every prompt, ``--concurrency`` at a time, through the engine's streaming
   ``generate`` (temperature 0, a fixed seed; round-robin over servers);
5. write the metrics JSON (wall time for the whole prompt set, requests/s, tokens/s,
   TTFT / latency / decode-rate percentiles, the engine's peak RSS, Ollama's own timing
   fields) and the generated texts (JSONL, to check native vs container greedy outputs
   match);
6. ALWAYS stop the engine (its server's process group: terminate, kill after a
   timeout); also on SIGTERM (Slurm cancel) or SIGINT.

This driver never asks which engine it runs: engines are classes looked up by name,
with capability flags (``serves_http``: ``--serve-only``/``--servers``, multi-node).
Imports the standard library, ``llm_engines`` beside it and the repository's
``workflow/scalesweep/record/metrics`` writer (itself stdlib-only); an engine may import more
when it starts (torch). It never asks whether it runs in a container.

Exit status: 0 all requests succeeded; 1 the point failed (metrics still written, with
``status: failed`` and the error); 2 bad arguments; 143/130 terminated by SIGTERM/SIGINT.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Mapping

T_SCRIPT = time.time()  # the start-up of this process: its first statement (record.stack)
_HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(_HERE.parent / "workflow"))
sys.path.insert(0, str(_HERE))
from llm_engines import (  # noqa: E402
    APIS, DEFAULT_CTX, ENGINES, Engine, PointError, Setup, engine_class, server_exit_error,
)
from llm_load import run_load  # noqa: E402
from scalesweep.record.load import ARRIVAL_SHAPES, target_of  # noqa: E402
from scalesweep.record.metrics import container_env, host_info, now_iso, peak_rss_mb, write_metrics  # noqa: E402
from scalesweep.record.stack import process_stack, startup_record  # noqa: E402

VENDORS = ("amd", "nvidia", "none")
HIDE_ALL = "-1"  # an invalid device id: Ollama's documented way to force CPU


class Terminated(BaseException):
    """Raised in the main thread by the SIGTERM handler so that ``finally`` runs."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"terminated by signal {signum}")
        self.signum = signum


# --------------------------------------------------------------------------- pure helpers


def gpu_visibility_env(n_gpus: int, vendor: str, parent: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment variables that make exactly ``n_gpus`` devices visible to the server.

    * ``amd``: ``ROCR_VISIBLE_DEVICES`` (what the OLCF study varied) and
      ``HIP_VISIBLE_DEVICES``; ``nvidia``: ``CUDA_VISIBLE_DEVICES`` (with
      ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` so indices match ``nvidia-smi``).
    * ``0`` GPUs, whatever the vendor: every variable of every vendor set to ``"-1"``,
      an invalid id, which is Ollama's documented way to force CPU (an empty
      ``CUDA_VISIBLE_DEVICES`` has been reported to crash Ollama).
    * ``parent`` (optional, e.g. ``os.environ``): when the scheduler already restricted
      the devices (Slurm sets ``ROCR_VISIBLE_DEVICES``/``CUDA_VISIBLE_DEVICES`` to the
      allocated ones), the first ``n_gpus`` of that list are used instead of ``0..n-1``.
      ``HIP_VISIBLE_DEVICES`` indexes the ROCr-visible devices, so it is always
      ``0..n-1``.

    Pure: no environment is read or written here.
    """
    if isinstance(n_gpus, bool) or not isinstance(n_gpus, int) or n_gpus < 0:
        raise ValueError(f"n_gpus must be an integer >= 0, not {n_gpus!r}")
    if vendor not in VENDORS:
        raise ValueError(f"gpu vendor must be one of {VENDORS}, not {vendor!r}")
    if n_gpus == 0:
        return {
            "CUDA_VISIBLE_DEVICES": HIDE_ALL,
            "ROCR_VISIBLE_DEVICES": HIDE_ALL,
            "HIP_VISIBLE_DEVICES": HIDE_ALL,
        }
    if vendor == "none":
        raise ValueError(f"{n_gpus} GPUs requested with gpu vendor 'none'")
    parent = parent or {}
    var = "ROCR_VISIBLE_DEVICES" if vendor == "amd" else "CUDA_VISIBLE_DEVICES"
    ids = [str(i) for i in range(n_gpus)]
    inherited = [d.strip() for d in parent.get(var, "").split(",") if d.strip()]
    if inherited and HIDE_ALL not in inherited:
        if len(inherited) < n_gpus:
            raise ValueError(f"{n_gpus} GPUs requested but {var}={parent[var]!r} allows only {len(inherited)}")
        ids = inherited[:n_gpus]
    env = {var: ",".join(ids)}
    if vendor == "amd":
        env["HIP_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(n_gpus))
    else:
        env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    return env



def percentile(values: list[float], q: float) -> float | None:
    """The q-th percentile (0..100), linear interpolation (numpy's default method)."""
    xs = sorted(v for v in values if v is not None and not math.isnan(v))
    if not xs:
        return None
    pos = (len(xs) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def summarize(values: list[float | None]) -> dict[str, Any]:
    """n, mean, std (the spread inside the run: sample standard deviation, None for one
    value), min, percentiles, max."""
    xs = [v for v in values if v is not None]
    if not xs:
        return {"n": 0}
    mean = sum(xs) / len(xs)
    return {
        "n": len(xs),
        "mean": mean,
        "std": (math.sqrt(sum((x - mean) ** 2 for x in xs) / (len(xs) - 1))
                if len(xs) > 1 else None),
        "min": min(xs),
        "p50": percentile(xs, 50),
        "p90": percentile(xs, 90),
        "p99": percentile(xs, 99),
        "max": max(xs),
    }


def load_prompts(path: str | os.PathLike) -> list[dict[str, Any]]:
    """Prompts from a text file (one per line; blank lines and ``#`` lines skipped) or
    JSONL (``.jsonl``/``.ndjson``: a JSON string, or an object with ``prompt`` or
    ``messages``). Returns dicts with ``prompt`` (str) and optionally ``messages``."""
    path = Path(path)
    out: list[dict[str, Any]] = []
    jsonl = path.suffix in (".jsonl", ".ndjson")
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or (not jsonl and line.lstrip().startswith("#")):
            continue
        if not jsonl:
            out.append({"prompt": line.strip()})
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}:{n}: not JSON ({exc})") from exc
        if isinstance(obj, str):
            out.append({"prompt": obj})
        elif isinstance(obj, dict) and isinstance(obj.get("messages"), list):
            msgs = obj["messages"]
            out.append({"prompt": obj.get("prompt") or msgs[-1].get("content", ""), "messages": msgs})
        elif isinstance(obj, dict) and isinstance(obj.get("prompt"), str):
            out.append({"prompt": obj["prompt"]})
        else:
            raise ValueError(f"{path}:{n}: expected a string or an object with 'prompt' or 'messages'")
    if not out:
        raise ValueError(f"{path}: no prompts")
    return out


def run_prompts(engine: Engine, prompts: list[dict[str, Any]], concurrency: int) -> tuple[list[dict[str, Any]], float, float]:
    """All prompts through ``concurrency`` worker threads calling ``engine.generate``.

    Returns (records in prompt order, t_start, t_end) where the window spans the first
    send to the last response end: the wall time of the whole prompt set."""
    work: queue.Queue[int] = queue.Queue()
    for i in range(len(prompts)):
        work.put(i)
    results: list[dict[str, Any] | None] = [None] * len(prompts)

    def worker() -> None:
        while True:
            try:
                i = work.get_nowait()
            except queue.Empty:
                return
            try:
                rec = engine.generate(prompts[i], i)
            except Exception as exc:  # a bug, not an engine error: record and go on
                rec = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
            rec["index"] = i
            results[i] = rec

    t_start = time.perf_counter()
    threads_ = [threading.Thread(target=worker, daemon=True, name=f"client-{k}") for k in range(min(concurrency, len(prompts)))]
    for t in threads_:
        t.start()
    for t in threads_:
        while t.is_alive():
            t.join(0.5)
    t_end = time.perf_counter()
    return [r for r in results if r is not None], t_start, t_end


# --------------------------------------------------------------------------- memory


def _proc_children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = defaultdict(list)
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as fh:
                stat = fh.read()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        kids[ppid].append(int(d))
    return kids


def _status_kb(pid: int) -> dict[str, int]:
    out = {}
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith(("VmRSS:", "VmHWM:")):
                    out[line.split(":")[0]] = int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return out


class MemorySampler(threading.Thread):
    """Samples the engine's process tree (``engine.pid``): its server and the server's
    children (Ollama runs its model in a child runner), or this process for an engine
    that runs in-process (the ``server_*`` fields then measure this process).

    ``peak_tree_rss_mb``: the largest sampled sum of VmRSS over the tree;
    ``vmhwm_mb``: the sum over the processes seen of their kernel-recorded peak VmHWM
    (exact per process, an upper bound for the tree)."""

    def __init__(self, pid: int, interval: float = 0.5) -> None:
        super().__init__(daemon=True, name="mem-sampler")
        self.pid, self.interval = pid, interval
        self.peak_tree_rss_kb = 0
        self.hwm_kb: dict[int, int] = {}
        self._stop_event = threading.Event()

    def sample(self) -> None:
        kids = _proc_children()
        tree, todo = [], [self.pid]
        while todo:
            p = todo.pop()
            tree.append(p)
            todo.extend(kids.get(p, []))
        rss = 0
        for p in tree:
            st = _status_kb(p)
            rss += st.get("VmRSS", 0)
            if "VmHWM" in st:
                self.hwm_kb[p] = max(self.hwm_kb.get(p, 0), st["VmHWM"])
        self.peak_tree_rss_kb = max(self.peak_tree_rss_kb, rss)

    def run(self) -> None:
        while not self._stop_event.is_set():
            self.sample()
            self._stop_event.wait(self.interval)

    def stop(self) -> dict[str, Any]:
        self._stop_event.set()
        self.join(5)
        self.sample()
        return {
            "server_peak_rss_mb": round(self.peak_tree_rss_kb / 1024, 1),
            "server_vmhwm_mb": round(sum(self.hwm_kb.values()) / 1024, 1),
            "server_processes": len(self.hwm_kb),
        }


# --------------------------------------------------------------------------- model info


def model_card(model: str, card: str | None) -> dict[str, Any] | None:
    """The sidecar card (``x.gguf`` -> ``x.json``) written by make_synthetic_llm.py."""
    path = Path(card) if card else (Path(model).with_suffix(".json") if model.endswith(".gguf") else None)
    if path is None or not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise PointError(f"model card {path} unreadable: {exc}") from exc


def sha256_file(path: str, limit_bytes: int) -> str | None:
    import hashlib

    if os.path.getsize(path) > limit_bytes:
        return None
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 22):
            h.update(chunk)
    return h.hexdigest()



# --------------------------------------------------------------------------- main


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        description="LLM inference payload: one sweep point (engine + streaming client + metrics).",
        allow_abbrev=False,
    )
    engines = "; ".join(f"{n}: {c.summary}" for n, c in sorted(ENGINES.items()))
    ap.add_argument("--engine", required=True, help=f"the engine ({engines})")
    ap.add_argument("--model", required=True, help="GGUF path (ollama: registered via 'ollama create'), or an Ollama model name")
    ap.add_argument("--model-card", default=None, help="sidecar JSON (default: the model path with .json)")
    ap.add_argument("--prompts", default=None, help="text file (one prompt per line) or .jsonl (required unless --serve-only)")
    ap.add_argument("--num-requests", type=int, default=0, help="cycle the prompts to this many requests (default: one each)")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--concurrency", type=int, default=1)
    ap.add_argument("--concurrency-levels", default="",
                    help="comma-separated levels, the first = --concurrency: after the timed "
                         "run, the prompt set again at each further level (concurrency_levels)")
    ap.add_argument("--request-rates", default="",
                    help="comma-separated open-loop request rates (requests/s): after the closed-loop "
                         "levels, requests sent at arrival times of --arrival (scripts/llm_load.py)")
    ap.add_argument("--arrival", choices=ARRIVAL_SHAPES, default="poisson",
                    help="open-loop inter-arrival times: poisson, gamma (--burstiness) or constant")
    ap.add_argument("--burstiness", type=float, default=1.0,
                    help="gamma arrivals' shape (vLLM's burstiness: 1 = Poisson, < 1 burstier)")
    ap.add_argument("--arrival-seed", type=int, default=0, help="seed of the arrival times")
    ap.add_argument("--load-requests", type=int, default=0,
                    help="requests per open-loop or offline level (default: the prompt set's)")
    ap.add_argument("--max-in-flight", type=int, default=0,
                    help="open loop: requests outstanding at most (0 = no cap)")
    ap.add_argument("--input-words", default=None,
                    help="open-loop and offline levels: generated prompts of LO:HI words (seeded by "
                         "--arrival-seed) instead of the prompt set")
    ap.add_argument("--output-tokens", default=None,
                    help="open-loop and offline levels: each generated request's max_tokens drawn "
                         "from LO:HI (at most --max-tokens)")
    ap.add_argument("--offline", action="store_true",
                    help="also an offline level: every request at once, throughput only")
    ap.add_argument("--target", default=None,
                    help="latency target: an MLPerf preset name, or ttft_s=X,tpot_s=Y[,percentile=Q]")
    ap.add_argument("--max-rate-steps", type=int, default=0,
                    help="with --target and --request-rates: bisection steps for the highest rate "
                         "within the target")
    ap.add_argument("--max-rate-tolerance", type=float, default=0.05,
                    help="stop the bisection when the bracket is this narrow (requests/s)")
    ap.add_argument("--client-placement", choices=("with_server", "host"), default="with_server",
                    help="where this client runs (recorded; the harness starts a containerised "
                         "server apart from a host client: load.client)")
    ap.add_argument("--requests-out", default=None,
                    help="every request of every level, JSON lines (scripts/llm_load.py)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed requests per server before timing")
    ap.add_argument("--gpus", type=int, default=0, help="visible GPUs (0 = CPU only)")
    ap.add_argument("--gpu-vendor", choices=VENDORS, default="none")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0, help="0 = pick a free port")
    ap.add_argument("--servers", default=None, help="host:port,... of already-running servers: start none, spread requests over them")
    ap.add_argument(
        "--serve-only",
        action="store_true",
        help="multi-node: start the server, health-check it, write --ready-file, keep it up until SIGTERM/SIGINT "
        "(exit 0); a client elsewhere then runs with --servers",
    )
    ap.add_argument("--ready-file", default=None, help="with --serve-only: written (host:port) once the server is healthy")
    ap.add_argument("--stop-file", default=None,
                    help="with --serve-only: stop serving (cleanly, metrics written) once this file exists")
    ap.add_argument("--threads", type=int, default=0, help="engine CPU threads (default: the CPUs this process may use)")
    ap.add_argument("--ctx", type=int, default=DEFAULT_CTX, help="context size (llamacpp n_ctx; torch: its KV cache)")
    ap.add_argument("--api", choices=APIS, default="chat", help="chat|completions (OpenAI /v1) or generate (Ollama native, with its timing fields)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--out", required=True, help="metrics JSON")
    ap.add_argument("--outputs", default=None, help="generated texts, JSONL (one line per prompt, in prompt order)")
    ap.add_argument("--server-log", default=None, help="server stdout+stderr (default: next to --out)")
    ap.add_argument("--startup-timeout", type=float, default=600.0)
    ap.add_argument("--request-timeout", type=float, default=600.0, help="socket timeout per request read")
    ap.add_argument("--hash-limit-gb", type=float, default=4.0, help="hash the model file when no card gives its sha256 and it is smaller")
    for cls in ENGINES.values():
        cls.add_arguments(ap)
    return ap


def _install_signal_handlers() -> None:
    def handler(signum: int, frame: Any) -> None:
        raise Terminated(signum)

    signal.signal(signal.SIGTERM, handler)
    if hasattr(signal, "SIGHUP"):
        signal.signal(signal.SIGHUP, handler)


def _check_args(ap: argparse.ArgumentParser, args: argparse.Namespace) -> type[Engine]:
    for name in ("max_tokens", "concurrency"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be >= 1")
    try:
        levels = [int(x) for x in args.concurrency_levels.split(",") if x.strip()]
    except ValueError:
        ap.error(f"--concurrency-levels must be comma-separated integers, got {args.concurrency_levels!r}")
    if levels and (levels[0] != args.concurrency or min(levels) < 1):
        ap.error(f"--concurrency-levels {args.concurrency_levels!r}: levels >= 1, the first "
                 f"= --concurrency ({args.concurrency})")
    if min(args.warmup, args.gpus, args.num_requests, args.load_requests, args.max_in_flight,
           args.max_rate_steps) < 0:
        ap.error("--warmup, --gpus, --num-requests, --load-requests, --max-in-flight and "
                 "--max-rate-steps must be >= 0")
    try:
        rates = [float(x) for x in args.request_rates.split(",") if x.strip()]
    except ValueError:
        ap.error(f"--request-rates must be comma-separated numbers, got {args.request_rates!r}")
    if any(not (r > 0 and math.isfinite(r)) for r in rates):
        ap.error(f"--request-rates {args.request_rates!r}: every rate must be a positive number")
    if not (args.burstiness > 0 and math.isfinite(args.burstiness)):
        ap.error(f"--burstiness must be a positive number, got {args.burstiness}")
    for name in ("input_words", "output_tokens"):
        text = getattr(args, name)
        if text is None:
            continue
        lo, _, hi = text.partition(":")
        if not (lo.isdigit() and (hi or lo).isdigit() and 1 <= int(lo) <= int(hi or lo)):
            ap.error(f"--{name.replace('_', '-')} {text!r}: expected LO:HI, 1 <= LO <= HI")
    if args.output_tokens and int(args.output_tokens.partition(":")[2] or args.output_tokens) > args.max_tokens:
        ap.error(f"--output-tokens {args.output_tokens!r} exceeds --max-tokens {args.max_tokens}")
    try:
        args.target_spec = target_of(parse_target(args.target)) if args.target else None
    except ValueError as exc:
        ap.error(f"--target {args.target!r}: {exc}")
    if not args.serve_only and not args.prompts:
        ap.error("--prompts is required (unless --serve-only)")
    if args.serve_only and args.servers:
        ap.error("--serve-only starts a server; --servers uses running ones: choose one")
    try:
        cls = engine_class(args.engine)
    except ValueError as exc:
        ap.error(str(exc))
    if args.api not in cls.apis:
        ap.error(f"--api {args.api} is not served by engine {cls.name}: use {' or '.join(cls.apis)}")
    if (args.serve_only or args.servers) and not cls.serves_http:
        servers = ", ".join(n for n, c in sorted(ENGINES.items()) if c.serves_http)
        ap.error(f"engine {cls.name} runs in this process and serves no HTTP: it cannot run multi-node "
                 f"(--serve-only / --servers, one server per node); engines that can: {servers}")
    problem = cls.check(args)
    if problem:
        ap.error(problem)
    return cls


def parse_target(text: str) -> str | dict[str, float]:
    """``--target``: a preset name, or ``ttft_s=X,tpot_s=Y[,percentile=Q]``."""
    if "=" not in text:
        return text
    spec: dict[str, float] = {}
    for part in text.split(","):
        key, _, value = part.partition("=")
        try:
            spec[key.strip()] = float(value)
        except ValueError:
            raise ValueError(f"{part!r} is not key=number") from None
    return spec


def main(argv: list[str] | None = None) -> int:
    ap = build_parser()
    args = ap.parse_args(argv)
    t_imports, t_ready = time.time(), None
    engine_cls = _check_args(ap, args)
    # one server per node (srun --ntasks-per-node=1): each task writes its own files
    rank = next((os.environ[v] for v in ("SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK")
                 if os.environ.get(v)), "0")
    for name in ("out", "ready_file", "server_log"):
        if getattr(args, name):
            setattr(args, name, getattr(args, name).replace("{rank}", rank))
    try:
        gpu_env = gpu_visibility_env(args.gpus, args.gpu_vendor, os.environ)
    except ValueError as exc:
        ap.error(str(exc))
    threads = args.threads or (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
    out = Path(args.out)
    log_path = Path(args.server_log) if args.server_log else out.with_name(out.stem + ".server.log")
    _install_signal_handlers()

    t_payload = time.perf_counter()
    record: dict[str, Any] = {
        "workload": "llm_inference",
        "status": "failed",
        "start": now_iso(),
        "engine": {"name": args.engine, "api": args.api},
        "gpus": args.gpus,
        "gpu_vendor": args.gpu_vendor,
        "gpu_env": gpu_env,
        "threads": threads,
        "concurrency": args.concurrency,
        "max_tokens": args.max_tokens,
        "warmup": args.warmup,
        "seed": args.seed,
        "prompts_file": str(args.prompts),
        "hosts": [socket.gethostname()],
        "host": host_info(),
        "container_env": container_env(),
        "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
        "server_log": str(log_path),
    }
    engine: Engine | None = None
    sampler: MemorySampler | None = None
    rc = 1
    try:
        prompts: list[dict[str, Any]] = []
        if not args.serve_only:
            prompts = load_prompts(args.prompts)
            if args.num_requests:
                prompts = [prompts[i % len(prompts)] for i in range(args.num_requests)]
            record["n_requests"] = len(prompts)

        card = model_card(args.model, args.model_card)
        is_file = os.path.isfile(args.model)
        model_info: dict[str, Any] = {
            "path": os.path.abspath(args.model) if is_file else None,
            "name": (card or {}).get("name") or (Path(args.model).stem if is_file else args.model),
            "synthetic": bool((card or {}).get("synthetic", False)),
            "sha256": (card or {}).get("sha256"),
            "n_params": (card or {}).get("n_params"),
        }
        if card:
            model_info["card"] = card
        if is_file and not model_info["sha256"]:
            model_info["sha256"] = sha256_file(args.model, int(args.hash_limit_gb * 2**30))
        record["model"] = model_info

        engine = engine_cls(Setup(args, args.model, model_info["name"], threads, gpu_env, log_path, record))
        engine.start()
        if engine.pid:
            sampler = MemorySampler(engine.pid)
            sampler.start()
        startup_s = engine.wait_ready()
        t_ready = time.time()  # the first unit of work (warm-up requests) starts
        if startup_s is not None:
            record["startup_s"] = startup_s
        record["engine"].update(engine.provenance())

        if args.serve_only:
            _serve(args, record, engine, log_path)
        else:
            _run_client(args, record, engine, prompts)
            record["status"] = "ok"
        rc = 0
    except Terminated as exc:
        record["error"] = str(exc)
        rc = 128 + exc.signum
    except KeyboardInterrupt:
        record["error"] = "interrupted"
        rc = 130
    except (PointError, ValueError, OSError) as exc:
        record["error"] = str(exc)
        server = getattr(engine, "proc", None)  # a server started here that died under the run
        if server is not None and not record["error"].startswith("server "):
            try:  # its connections close a moment before it can be reaped
                server.wait(timeout=1.0)
            except subprocess.TimeoutExpired:
                pass
            if server.poll() is not None:
                record["error"] = f"{server_exit_error(server, log_path, 'during the run')}\n{exc}"
        rc = 1
    finally:
        # Stop the engine whatever happened; keep stopping it if a second signal arrives
        # (a second Ctrl-C too: it would leave the server running, orphaned, mid-request).
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        sigint = signal.signal(signal.SIGINT, signal.SIG_IGN)
        if hasattr(signal, "SIGHUP"):
            signal.signal(signal.SIGHUP, signal.SIG_IGN)
        if sampler is not None:
            record["memory"] = sampler.stop()
        # what the client (and its server, while it still runs) ran on; when it started
        record["per_rank"] = [{"rank": int(rank) if rank.isdigit() else rank,
                               "host": socket.gethostname(),
                               "startup": startup_record(T_SCRIPT, t_imports, t_ready),
                               "stack": process_stack()}]
        if engine is not None and engine.pid and engine.pid != os.getpid():
            record["server_stack"] = process_stack(engine.pid)
        if engine is not None:
            returncode = engine.stop()
            if returncode is not None:
                record["server_returncode"] = returncode
        record.setdefault("memory", {})["client_peak_rss_mb"] = round(peak_rss_mb(), 1)
        record["end"] = now_iso()
        record["payload_wall_s"] = time.perf_counter() - t_payload
        write_metrics(out, record)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, sigint)
        if hasattr(signal, "SIGHUP"):
            signal.signal(signal.SIGHUP, signal.SIG_DFL)
    if rc:
        print(f"infer_llm: FAILED: {record.get('error')}", file=sys.stderr)
    elif args.serve_only:
        print(f"infer_llm: stopped serving after {record.get('served_s', 0):.1f}s -> {out}", file=sys.stderr)
    else:
        print(
            f"infer_llm: {record['n_ok']} requests, {record['completion_tokens_total']} tokens in "
            f"{record['wall_s']:.2f}s: {record['tokens_per_s']:.1f} tok/s, {record['requests_per_s']:.2f} req/s, "
            f"TTFT p50 {record['ttft_s']['p50'] * 1e3:.1f} ms -> {out}",
            file=sys.stderr,
        )
    return rc


def _serve(args: argparse.Namespace, record: dict[str, Any], engine: Any, log_path: Path) -> None:
    """--serve-only (an HTTP engine, checked with the arguments): advertise the server,
    keep it up until a signal or the stop file."""
    record["serving"] = engine.address
    if args.ready_file:
        ready = Path(args.ready_file)
        ready.parent.mkdir(parents=True, exist_ok=True)
        tmp = ready.with_name(f".{ready.name}.tmp")
        tmp.write_text(record["serving"] + "\n")
        os.replace(tmp, ready)
    print(f"infer_llm: serving {engine.model_name} at {record['serving']} until SIGTERM", file=sys.stderr, flush=True)
    t_serve = time.perf_counter()
    try:
        while engine.poll() is None:
            if args.stop_file and Path(args.stop_file).exists():
                raise Terminated(signal.SIGTERM)  # same clean path as a signal
            time.sleep(0.5)
    except (Terminated, KeyboardInterrupt):
        record.update(status="ok", served_s=time.perf_counter() - t_serve)
    else:
        raise PointError(f"server exited with status {engine.poll()} while serving; see {log_path}")


def _run_client(args: argparse.Namespace, record: dict[str, Any], engine: Engine, prompts: list[dict[str, Any]]) -> None:
    """Warm up the engine, time the prompt set, fill ``record``; raise PointError on failures."""
    t0 = time.perf_counter()
    engine.warm_up(prompts, args.warmup)
    record["warmup_s"] = time.perf_counter() - t0

    record["start_timed"] = now_iso()
    results, t_start, t_end = run_prompts(engine, prompts, args.concurrency)
    wall = t_end - t_start
    ok = [r for r in results if r.get("ok")]
    toks = sum(r["completion_tokens"] for r in ok)
    record.update(
        wall_s=wall,
        n_ok=len(ok),
        n_failed=len(results) - len(ok),
        completion_tokens_total=toks,
        prompt_tokens_total=sum(r["prompt_tokens"] or 0 for r in ok) if ok and all(r.get("prompt_tokens") is not None for r in ok) else None,
        requests_per_s=len(ok) / wall if wall > 0 else None,
        tokens_per_s=toks / wall if wall > 0 else None,
        ttft_s=summarize([r.get("ttft_s") for r in ok]),
        latency_s=summarize([r.get("latency_s") for r in ok]),
        decode_tokens_per_s=summarize([r.get("decode_tokens_per_s") for r in ok]),
        token_sources=sorted({r["token_source"] for r in ok}),
    )
    # a "length" finish below max_tokens: the engine's context cut the request short
    # (or, counted from streamed pieces, a piece held several tokens)
    short = sum(1 for r in ok if r.get("finish_reason") == "length" and r["completion_tokens"] < args.max_tokens)
    record["n_length_below_max_tokens"] = short
    if short:
        print(f"infer_llm: {short} of {len(ok)} requests stopped at a limit before --max-tokens "
              f"{args.max_tokens} (the engine's context, --ctx {args.ctx}): tokens/s counts the "
              f"tokens returned ({', '.join(record['token_sources'])})", file=sys.stderr)
    timed = [r["engine_timings"] for r in ok if r.get("engine_timings")]
    if timed:
        agg: dict[str, Any] = {"source": timed[0].get("source"), "n": len(timed)}
        for k in dict.fromkeys(k for t in timed for k in t if k != "source"):
            vals = [t[k] for t in timed if isinstance(t.get(k), (int, float))]
            if vals:
                agg[k] = summarize(vals)
        evals = [(t["eval_count"], t["eval_duration"]) for t in timed if t.get("eval_duration")]
        if evals:  # Ollama's own decode rate (tokens / s), as `ollama run --verbose` prints
            agg["eval_rate_tokens_per_s"] = summarize([c / (d / 1e9) for c, d in evals])
        record["engine_timings"] = agg
    # the load levels: the closed-loop levels (this run the first), then the open-loop
    # rates, offline and the highest rate within the target (scripts/llm_load.py)
    load = run_load(args, engine, prompts, record, (results, t_start, t_end), args.target_spec,
                    lambda text: print(f"infer_llm: {text}", file=sys.stderr, flush=True))
    closed = [(lv, raw) for lv, raw in zip(load.levels, load.records) if lv["shape"] == "closed"]
    if len(closed) > 1:  # the concurrency axis: every level, the same prompts, the same server
        record["concurrency_levels"] = [level_summary(lv["concurrency"], recs, s1 - s0)
                                        for lv, (recs, s0, s1) in closed]
    # a failed request at a further closed-loop level fails the point (a server that cannot
    # serve its own prompt set); at an open-loop or offline level it is that level's result
    # (overload: it counts as missing the target, and the level records it)
    failed = sum(lv["n_failed"] for lv in load.levels[1:] if lv["shape"] == "closed")
    if failed:
        raise PointError(f"{failed} requests failed at the further concurrency levels")
    overloaded = [f"{lv['n_failed']} of {lv['n']} at {lv.get('rate') or lv['shape']}"
                  for lv in load.levels if lv["shape"] != "closed" and lv["n_failed"]]
    if overloaded:
        print(f"infer_llm: requests failed under load ({'; '.join(overloaded)}): counted as "
              "missing the target", file=sys.stderr)
    record["requests"] = [
        {
            k: (round(v - t_start, 6) if k in ("t_arrival", "t_send", "t_first", "t_end")
                and v is not None else v)
            for k, v in r.items()
            if k not in ("text", "t_pieces")
        }
        for r in results
    ]
    if args.outputs:
        _write_outputs(Path(args.outputs), prompts, results)
    if record["n_failed"]:
        first = next(r for r in results if not r.get("ok"))
        raise PointError(f"{record['n_failed']} of {len(results)} requests failed, first: {first.get('error')}")


def level_summary(concurrency: int, results: list[dict[str, Any]], wall: float) -> dict[str, Any]:
    """One concurrency level: throughput and the requests' latency percentiles."""
    ok = [r for r in results if r.get("ok")]
    toks = sum(r["completion_tokens"] for r in ok)
    return {
        "concurrency": concurrency,
        "wall_s": wall,
        "n_ok": len(ok),
        "n_failed": len(results) - len(ok),
        "tokens_per_s": toks / wall if wall > 0 else None,
        "requests_per_s": len(ok) / wall if wall > 0 else None,
        "ttft_s": summarize([r.get("ttft_s") for r in ok]),
        "latency_s": summarize([r.get("latency_s") for r in ok]),
    }


def _write_outputs(path: Path, prompts: list[dict[str, Any]], results: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w") as fh:
        for r in sorted(results, key=lambda r: r["index"]):
            line = {
                "index": r["index"],
                "prompt": prompts[r["index"]]["prompt"],
                "text": r.get("text"),
                "completion_tokens": r.get("completion_tokens"),
                "finish_reason": r.get("finish_reason"),
                "ok": r.get("ok"),
            }
            fh.write(json.dumps(line, ensure_ascii=False) + "\n")
    os.replace(tmp, path)


if __name__ == "__main__":
    sys.exit(main())
