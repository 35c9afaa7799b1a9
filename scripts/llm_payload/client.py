"""The point's client side: warm the engine up, time the prompt set, then the load levels
(scripts/llm_load.py), and fill the metrics record; or, with ``--serve-only``, keep a
server up for clients elsewhere."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from llm_load import run_load
from llm_payload.engine import Engine
from llm_payload.errors import PointError
from llm_payload.prompts import run_prompts
from llm_payload.signals import Terminated
from llm_payload.stats import summarize
from scalesweep.record.metrics import now_iso

Timed = tuple[list[dict[str, Any]], float, float]  # (records in prompt order, t_start, t_end)


def say(text: str) -> None:
    print(f"infer_llm: {text}", file=sys.stderr)


def serve(args: argparse.Namespace, record: dict[str, Any], engine: Any, log_path: Path) -> None:
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


def run_client(args: argparse.Namespace, record: dict[str, Any], engine: Engine, prompts: list[dict[str, Any]]) -> None:
    """Warm up the engine, time the prompt set, fill ``record``; raise PointError on failures."""
    t0 = time.perf_counter()
    engine.warm_up(prompts, args.warmup)
    record["warmup_s"] = time.perf_counter() - t0
    record["start_timed"] = now_iso()
    timed = run_prompts(engine, prompts, args.concurrency)
    results, t_start, _ = timed
    record.update(timed_figures(timed))
    note_requests_cut_short(args, record, results)
    timings = engine_timings(results)
    if timings:
        record["engine_timings"] = timings
    measure_load_levels(args, record, engine, prompts, timed)
    record["requests"] = request_rows(results, t_start)
    if args.outputs:
        write_outputs(Path(args.outputs), prompts, results)
    if record["n_failed"]:
        first = next(r for r in results if not r.get("ok"))
        raise PointError(f"{record['n_failed']} of {len(results)} requests failed, first: {first.get('error')}")


def timed_figures(timed: Timed) -> dict[str, Any]:
    """The prompt set's figures: wall time, requests and tokens per second, percentiles."""
    results, t_start, t_end = timed
    wall = t_end - t_start
    ok = [r for r in results if r.get("ok")]
    toks = sum(r["completion_tokens"] for r in ok)
    return dict(
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


def note_requests_cut_short(args: argparse.Namespace, record: dict[str, Any], results: list[dict[str, Any]]) -> None:
    """A "length" finish below max_tokens: the engine's context cut the request short (or,
    counted from streamed pieces, a piece held several tokens)."""
    ok = [r for r in results if r.get("ok")]
    short = sum(1 for r in ok if r.get("finish_reason") == "length" and r["completion_tokens"] < args.max_tokens)
    record["n_length_below_max_tokens"] = short
    if short:
        say(f"{short} of {len(ok)} requests stopped at a limit before --max-tokens "
            f"{args.max_tokens} (the engine's context, --ctx {args.ctx}): tokens/s counts the "
            f"tokens returned ({', '.join(record['token_sources'])})")


def engine_timings(results: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The engine's own timing fields over the successful requests (None: it gave none)."""
    timed = [r["engine_timings"] for r in results if r.get("ok") and r.get("engine_timings")]
    if not timed:
        return None
    agg: dict[str, Any] = {"source": timed[0].get("source"), "n": len(timed)}
    for k in dict.fromkeys(k for t in timed for k in t if k != "source"):
        vals = [t[k] for t in timed if isinstance(t.get(k), (int, float))]
        if vals:
            agg[k] = summarize(vals)
    evals = [(t["eval_count"], t["eval_duration"]) for t in timed if t.get("eval_duration")]
    if evals:  # Ollama's own decode rate (tokens / s), as `ollama run --verbose` prints
        agg["eval_rate_tokens_per_s"] = summarize([c / (d / 1e9) for c, d in evals])
    return agg


def measure_load_levels(args: argparse.Namespace, record: dict[str, Any], engine: Engine,
                        prompts: list[dict[str, Any]], timed: Timed) -> None:
    """The load levels: the closed-loop levels (the timed run the first), then the open-loop
    rates, offline and the highest rate within the target (scripts/llm_load.py)."""
    load = run_load(args, engine, prompts, record, timed, args.target_spec,
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
        say(f"requests failed under load ({'; '.join(overloaded)}): counted as missing the target")


def request_rows(results: list[dict[str, Any]], t_start: float) -> list[dict[str, Any]]:
    """The record's ``requests``: each request's fields, times from the timed run's start,
    without its text and per-piece times."""
    return [
        {
            k: (round(v - t_start, 6) if k in ("t_arrival", "t_send", "t_first", "t_end")
                and v is not None else v)
            for k, v in r.items()
            if k not in ("text", "t_pieces")
        }
        for r in results
    ]


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


def write_outputs(path: Path, prompts: list[dict[str, Any]], results: list[dict[str, Any]]) -> None:
    """The generated texts, JSON lines in prompt order (native and container runs compared)."""
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
