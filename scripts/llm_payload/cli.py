"""The LLM payload's command line: every option (each engine adds its own) and the checks
made before anything starts.

The engines are the registry's (:data:`llm_payload.engine.ENGINES`): the entry point
imports ``llm_engines`` first, which registers them all.
"""

from __future__ import annotations

import argparse
import math

from llm_payload.engine import DEFAULT_CTX, ENGINES, Engine, engine_class
from llm_payload.gpus import VENDORS
from llm_payload.http_client import APIS
from scalesweep.record.load import ARRIVAL_SHAPES, target_of


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


def check_args(ap: argparse.ArgumentParser, args: argparse.Namespace) -> type[Engine]:
    """The engine class of ``--engine``, once every option is checked (``ap.error``, exit
    status 2, before anything starts); sets ``args.target_spec`` (``--target`` parsed)."""
    check_counts(ap, args)
    check_load_options(ap, args)
    check_roles(ap, args)
    return checked_engine(ap, args)


def check_counts(ap: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Requests, tokens, concurrency levels, GPUs: counts in range."""
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


def check_load_options(ap: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """The load levels' options (scripts/llm_load.py): rates, arrivals, generated lengths,
    the latency target."""
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


def check_roles(ap: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """A client needs prompts; a server started here (--serve-only) and servers running
    elsewhere (--servers) exclude each other."""
    if not args.serve_only and not args.prompts:
        ap.error("--prompts is required (unless --serve-only)")
    if args.serve_only and args.servers:
        ap.error("--serve-only starts a server; --servers uses running ones: choose one")


def checked_engine(ap: argparse.ArgumentParser, args: argparse.Namespace) -> type[Engine]:
    """The engine of ``--engine``, if it serves ``--api``, multi-node where asked, and
    accepts its own options (``Engine.check``)."""
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
