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
It is the list of steps above; each step is a function of the package ``llm_payload``
beside it (``cli``: the options; ``point``: the record, the engine's start and stop;
``client``: the timed prompt set and the load levels of ``llm_load.py``). It imports the
standard library, ``llm_engines`` and ``llm_payload`` beside it and the repository's
``workflow/scalesweep/record`` modules (the metrics writer: stdlib-only); an engine may
import more when it starts (torch). It never asks whether it runs in a container.

Exit status: 0 all requests succeeded; 1 the point failed (metrics still written, with
``status: failed`` and the error); 2 bad arguments; 143/130 terminated by SIGTERM/SIGINT.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

T_SCRIPT = time.time()  # the start-up of this process: its first statement (record.stack)
_HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(_HERE.parent / "workflow"))
sys.path.insert(0, str(_HERE))
import llm_engines  # noqa: E402,F401  (every engine, registered by name: --engine)
from llm_payload.cli import build_parser, check_args  # noqa: E402
from llm_payload.client import run_client, serve  # noqa: E402
from llm_payload.errors import PointError  # noqa: E402
from llm_payload.gpus import gpu_visibility_env  # noqa: E402
from llm_payload.point import Point, engine_threads, name_files_by_rank, task_rank  # noqa: E402
from llm_payload.prompts import load_prompts  # noqa: E402,F401  (the workflow reads prompt files with it)
from llm_payload.signals import Terminated, ignore_signals, install_signal_handlers, restore_signals  # noqa: E402
from scalesweep.record.metrics import write_metrics  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = build_parser()
    args = ap.parse_args(argv)
    t_imports = time.time()
    engine_cls = check_args(ap, args)
    rank = task_rank()
    name_files_by_rank(args, rank)
    gpu_env = visible_gpus(ap, args)
    install_signal_handlers()
    point = Point(args, gpu_env, engine_threads(args.threads))
    try:
        prompts = point.prompt_set()
        point.describe_model()
        engine = point.start_engine(engine_cls)
        if args.serve_only:
            serve(args, point.record, engine, point.log_path)
        else:
            run_client(args, point.record, engine, prompts)
            point.record["status"] = "ok"
        rc = 0
    except Terminated as exc:
        rc = point.failed(str(exc), 128 + exc.signum)
    except KeyboardInterrupt:
        rc = point.failed("interrupted", 130)
    except (PointError, ValueError, OSError) as exc:
        rc = point.failed(point.error_of(exc), 1)
    finally:
        # stop the engine whatever happened, and keep stopping it if a second signal arrives
        sigint = ignore_signals()
        point.finish(rank, T_SCRIPT, t_imports)
        write_metrics(point.out, point.record)
        restore_signals(sigint)
    print_outcome(rc, args, point.record, point.out)
    return rc


def visible_gpus(ap: argparse.ArgumentParser, args: argparse.Namespace) -> dict[str, str]:
    """The GPU visibility variables of --gpus and --gpu-vendor, within what the scheduler
    allowed (a bad combination: exit status 2)."""
    try:
        return gpu_visibility_env(args.gpus, args.gpu_vendor, os.environ)
    except ValueError as exc:
        ap.error(str(exc))


def print_outcome(rc: int, args: argparse.Namespace, record: dict[str, Any], out: Path) -> None:
    """One line on stderr: the error, the time served, or the headline figures."""
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


if __name__ == "__main__":
    sys.exit(main())
