"""The prompt set: read from a file, cycled to the requests asked for, and sent through an
engine, ``concurrency`` requests at a time."""

from __future__ import annotations

import json
import os
import queue
import threading
import time
from pathlib import Path
from typing import Any

from llm_payload.engine import Engine


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


def prompt_set(path: str | os.PathLike, num_requests: int) -> list[dict[str, Any]]:
    """The prompts of ``path``, cycled to ``num_requests`` requests (0: one each)."""
    prompts = load_prompts(path)
    if num_requests:
        prompts = [prompts[i % len(prompts)] for i in range(num_requests)]
    return prompts


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
