"""The LLM engine interface and the registry of engines by name (``--engine``).

An engine turns a prompt into a timed stream of tokens. The driver (``infer_llm.py``:
prompt loop, warm-up, memory sampler, metrics) only ever calls this interface:

* ``start()``: start the server / load the model (raise :class:`PointError` if it cannot);
* ``wait_ready() -> seconds or None``: until it can serve (None: it started nothing);
* ``warm_up(prompts, n)``: ``n`` untimed requests per replica (server);
* ``generate(prompt, index) -> dict``: one greedy, streamed request, timed by
  :class:`~llm_payload.stream.TokenStream` (``ok``, ``error``, ``text``,
  ``completion_tokens``, ``ttft_s``, ``latency_s``, ``decode_tokens_per_s``, per-piece
  times ``t_pieces`` ...); ``index`` (the request's place in the prompt set) spreads
  requests round-robin over replicas;
* ``stop() -> exit status or None``: always called, also after a failed start;
* ``provenance() -> {"name", "version"}``;

and reads its capabilities: ``serves_http`` (an HTTP server: ``--serve-only``,
``--servers``, so multi-node as one server per node plus a client), ``apis`` (the
``--api`` values it accepts), ``pid`` (the process tree the memory sampler watches),
``replicas``, and for HTTP servers ``address`` and ``poll()``. Engines add their own
fields to the metrics record they are given (``server_cmd``, ``servers``, ``server_pid``).

The engines themselves are classes in ``llm_engines.py``, each made available by name
with :func:`register`.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from llm_payload.errors import PointError

# The context (tokens: a request's prompt and what it generates) an engine that sets one
# (``Engine.sets_ctx``) runs the model with: llamacpp's n_ctx, torch's KV cache; the
# payload's --ctx default, and the bound the workflow checks max_tokens against.
DEFAULT_CTX = 2048


@dataclass
class Setup:
    """What an engine is given: the parsed options (its own included) and the driver's
    decisions. ``record`` is the metrics record: engines add their own fields to it."""

    args: argparse.Namespace
    model: str  # GGUF path or an engine's own model name
    model_name: str  # the name the model is served and reported under
    threads: int
    gpu_env: dict[str, str]  # device visibility for the engine's process(es)
    log_path: Path  # the engine's (server's) output
    record: dict[str, Any]

    @property
    def is_file(self) -> bool:
        return os.path.isfile(self.model)


class Engine:
    """An LLM engine as the driver sees it (see the module docstring). Subclass, set
    ``name`` and the capabilities, implement ``start``/``generate``, then :func:`register`."""

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    serves_http: ClassVar[bool] = False  # --serve-only / --servers: multi-node server + client
    apis: ClassVar[tuple[str, ...]] = ("chat", "completions")
    # What the workflow checks before any job (scalesweep.plan.config reads these): the model
    # sources it can run (config models.<name>.source) and the GPUs one instance drives.
    model_sources: ClassVar[tuple[str, ...]] = ("synthetic", "gguf-file")
    max_gpus: ClassVar[int | None] = None  # None: any number
    sets_ctx: ClassVar[bool] = True  # runs the model with --ctx's context (DEFAULT_CTX)
    ctx: ClassVar[int] = DEFAULT_CTX  # the context it runs a model with by default

    @classmethod
    def add_arguments(cls, ap: argparse.ArgumentParser) -> None:
        """Options of this engine (every engine's are always accepted)."""

    @classmethod
    def check(cls, args: argparse.Namespace) -> str | None:
        """What is wrong with these options for this engine, or None (before anything starts)."""
        return None

    def __init__(self, setup: Setup) -> None:
        self.setup, self.args, self.record = setup, setup.args, setup.record
        self.model_name = setup.model_name
        self.pid: int | None = None  # the process tree whose memory is sampled
        self.replicas = 1  # instances that warm_up() warms (servers)

    def start(self) -> None:
        raise NotImplementedError

    def wait_ready(self) -> float | None:
        return None

    def warm_up(self, prompts: list[dict[str, Any]], n: int) -> None:
        """``n`` untimed requests per replica: the first calls are 3-30x slower
        (allocation, page faults, graph build)."""
        for r in range(self.replicas):
            for k in range(n):
                res = self.generate(prompts[k % len(prompts)], r)
                if not res["ok"]:
                    to = f" to {res['server']}" if res.get("server") else ""
                    log = f"; see {self.setup.log_path}" if self.setup.log_path.exists() else ""
                    raise PointError(f"warm-up request{to} failed: {res.get('error')}{log}")

    def generate(self, prompt: dict[str, Any], index: int = 0) -> dict[str, Any]:
        raise NotImplementedError

    def count_tokens(self, prompt: dict[str, Any]) -> int | None:
        """A prompt's input tokens where requests do not report them (None: unknown)."""
        return None

    def stop(self) -> int | None:
        return None

    def provenance(self) -> dict[str, Any]:
        return {"name": self.name, "version": None}


ENGINES: dict[str, type[Engine]] = {}


def register(cls: type[Engine]) -> type[Engine]:
    """Class decorator: make an engine available as ``--engine NAME``."""
    if not cls.name:
        raise ValueError(f"{cls.__name__} has no name")
    ENGINES[cls.name] = cls
    return cls


def engine_class(name: str) -> type[Engine]:
    """The engine registered as ``name`` (ValueError naming the known ones)."""
    try:
        return ENGINES[name]
    except KeyError:
        raise ValueError(f"unknown engine {name!r}; known engines: {', '.join(sorted(ENGINES))}") from None
