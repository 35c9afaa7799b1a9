"""One LLM point as the driver runs it: its metrics record, its engine and the memory
sampler watching it, and how it ends (the error it gives; the engine always stopped)."""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

from llm_payload.engine import Engine, Setup
from llm_payload.memory import MemorySampler
from llm_payload.model_info import model_record
from llm_payload.prompts import prompt_set
from llm_payload.server import server_exit_error
from scalesweep.record.metrics import container_env, host_info, now_iso, peak_rss_mb
from scalesweep.record.stack import process_stack, startup_record

RANK_VARS = ("SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK")


def task_rank() -> str:
    """This task's rank as its launcher numbers it ("0" where none does)."""
    return next((os.environ[v] for v in RANK_VARS if os.environ.get(v)), "0")


def name_files_by_rank(args: argparse.Namespace, rank: str) -> None:
    """One server per node (srun --ntasks-per-node=1): each task writes its own files,
    ``{rank}`` in --out, --ready-file and --server-log replaced by its rank."""
    for name in ("out", "ready_file", "server_log"):
        if getattr(args, name):
            setattr(args, name, getattr(args, name).replace("{rank}", rank))


def engine_threads(threads: int) -> int:
    """``--threads``, else the CPUs this process may use."""
    return threads or (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


def server_log_path(args: argparse.Namespace) -> Path:
    """``--server-log``, else ``<out stem>.server.log`` beside ``--out``."""
    out = Path(args.out)
    return Path(args.server_log) if args.server_log else out.with_name(out.stem + ".server.log")


def initial_record(args: argparse.Namespace, gpu_env: dict[str, str], threads: int,
                   log_path: Path) -> dict[str, Any]:
    """The metrics record as the point starts: failed until it succeeds."""
    return {
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


class Point:
    """One point: ``record`` (the metrics record), ``engine`` and ``sampler`` once started,
    ``t_ready`` (when the engine could serve: the first unit of work starts)."""

    def __init__(self, args: argparse.Namespace, gpu_env: dict[str, str], threads: int) -> None:
        self.args, self.gpu_env, self.threads = args, gpu_env, threads
        self.out = Path(args.out)
        self.log_path = server_log_path(args)
        self.t_payload = time.perf_counter()
        self.record = initial_record(args, gpu_env, threads, self.log_path)
        self.engine: Engine | None = None
        self.sampler: MemorySampler | None = None
        self.t_ready: float | None = None

    def prompt_set(self) -> list[dict[str, Any]]:
        """The requests to send, counted in the record (none for ``--serve-only``)."""
        if self.args.serve_only:
            return []
        prompts = prompt_set(self.args.prompts, self.args.num_requests)
        self.record["n_requests"] = len(prompts)
        return prompts

    def describe_model(self) -> None:
        """The record's ``model`` (card, name, digest)."""
        a = self.args
        self.record["model"] = model_record(a.model, a.model_card, a.hash_limit_gb)

    def start_engine(self, engine_cls: type[Engine]) -> Engine:
        """Start the engine, sample its memory, wait until it can serve; its start-up
        time and provenance go to the record."""
        a = self.args
        self.engine = engine = engine_cls(Setup(a, a.model, self.record["model"]["name"], self.threads,
                                                self.gpu_env, self.log_path, self.record))
        engine.start()
        if engine.pid:
            self.sampler = MemorySampler(engine.pid)
            self.sampler.start()
        startup_s = engine.wait_ready()
        self.t_ready = time.time()  # the first unit of work (warm-up requests) starts
        if startup_s is not None:
            self.record["startup_s"] = startup_s
        self.record["engine"].update(engine.provenance())
        return engine

    def failed(self, error: str, rc: int) -> int:
        """Record why the point failed; return its exit status."""
        self.record["error"] = error
        return rc

    def error_of(self, exc: BaseException) -> str:
        """The error of ``exc``; where a server started here died under the run, why it
        died first (its log's cause)."""
        server = getattr(self.engine, "proc", None)
        if server is None or str(exc).startswith("server "):
            return str(exc)
        try:  # its connections close a moment before it can be reaped
            server.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            pass
        if server.poll() is not None:
            return f"{server_exit_error(server, self.log_path, 'during the run')}\n{exc}"
        return str(exc)

    def finish(self, rank: str, t_script: float, t_imports: float) -> None:
        """Whatever happened: the memory sampled, what the client (and its server, while it
        still runs) ran on and when it started, the engine stopped, the end."""
        if self.sampler is not None:
            self.record["memory"] = self.sampler.stop()
        self.record["per_rank"] = [{"rank": int(rank) if rank.isdigit() else rank,
                                    "host": socket.gethostname(),
                                    "startup": startup_record(t_script, t_imports, self.t_ready),
                                    "stack": process_stack()}]
        self.stop_engine()
        self.record.setdefault("memory", {})["client_peak_rss_mb"] = round(peak_rss_mb(), 1)
        self.record["end"] = now_iso()
        self.record["payload_wall_s"] = time.perf_counter() - self.t_payload

    def stop_engine(self) -> None:
        """A server's stack (before it stops), then the engine stopped, its exit status."""
        engine = self.engine
        if engine is None:
            return
        if engine.pid and engine.pid != os.getpid():
            self.record["server_stack"] = process_stack(engine.pid)
        returncode = engine.stop()
        if returncode is not None:
            self.record["server_returncode"] = returncode
