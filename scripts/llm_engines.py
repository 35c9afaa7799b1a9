"""LLM engines for ``infer_llm.py``: one interface, looked up by name (``--engine``).

Each engine is one class here, behind the interface of :mod:`llm_payload.engine`
(``start``, ``wait_ready``, ``warm_up``, ``generate``, ``stop``, ``provenance`` and the
capabilities the driver and the workflow read: ``serves_http``, ``apis``,
``model_sources``, ``max_gpus``, ``sets_ctx``, ``ctx``); importing this module registers
them all (``ENGINES``, :func:`engine_class`). The driver never asks which engine it runs.

Engines: ``llamacpp`` (llama-cpp-python's OpenAI-compatible server), ``ollama`` (``ollama
serve``, its native ``/api/generate`` with its timing fields or ``/v1``) and ``torch``
(an in-process PyTorch Llama read from the GGUF: ``llm_torch.py``). Add one with
:func:`register` (an HTTP server: subclass :class:`HttpEngine`). Standard library only at
import (``torch`` is imported by the torch engine when it starts), so the HTTP engines
run in images without torch; the workflow reads this registry before any job
(``scalesweep.plan.payload_scripts``).
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

# ENGINES and engine_class (the registry, with the engines below in it) and DEFAULT_CTX (the
# context they run a model with) are read from this module: the workflow's checks
from llm_payload.engine import DEFAULT_CTX, ENGINES, Engine, engine_class, register  # noqa: F401
from llm_payload.errors import PointError
from llm_payload.http_client import http_json
from llm_payload.http_engine import HttpEngine
from llm_payload.ollama import ollama_create, ollama_model_name
from llm_payload.stream import TokenStream

# The context Ollama runs a model with where nobody sets num_ctx (this payload sets none:
# OllamaEngine.sets_ctx): 4096 tokens since Ollama v0.6.7 (ollama/ollama#10452), so for
# v0.9.0, the version containers/apptainer/ollama.def pins; OLLAMA_CONTEXT_LENGTH in the
# server's environment changes it. The bound the workflow checks max_tokens against.
OLLAMA_DEFAULT_CTX = 4096


def dist_version(name: str) -> str | None:
    """The installed version of distribution ``name`` (None: not installed)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


@register
class LlamaCppEngine(HttpEngine):
    name = "llamacpp"
    summary = "llama-cpp-python's OpenAI-compatible server (python -m llama_cpp.server, this interpreter)"
    health_path = "/v1/models"

    def server_command(self, host: str, port: int, host_for_url: str) -> list[str]:
        if not self.setup.is_file:
            raise PointError(f"model {self.setup.model} is not a file (llamacpp needs a GGUF path)")
        a = self.args
        return [
            sys.executable, "-m", "llama_cpp.server",
            "--model", self.setup.model,
            "--model_alias", self.model_name,
            "--host", host,
            "--port", str(port),
            "--n_threads", str(self.setup.threads),
            "--n_threads_batch", str(self.setup.threads),
            "--n_gpu_layers", "0" if a.gpus == 0 else "-1",
            "--n_ctx", str(a.ctx),
            "--seed", str(a.seed),
            "--logits_all", "False",
            "--interrupt_requests", "False",
        ]  # fmt: skip

    def provenance(self) -> dict[str, Any]:
        return {"name": self.name, "version": dist_version("llama_cpp_python")}

    def count_tokens(self, prompt: dict[str, Any]) -> int | None:
        """The prompt text's tokens by the server's own tokenizer (``/extras/tokenize/count``;
        without a chat template's: llama-cpp-python streams no usage)."""
        status, body = http_json(self.bases[0], "POST", "/extras/tokenize/count",
                                 {"input": prompt["prompt"], "model": self.model_name})
        return int(body["count"]) if status == 200 and isinstance(body, dict) and "count" in body else None


@register
class OllamaEngine(HttpEngine):
    name = "ollama"
    summary = "ollama serve (a GGUF registered with 'ollama create', or a pulled model name)"
    apis = ("chat", "completions", "generate")
    model_sources = ("synthetic", "gguf-file", "ollama")
    health_path = "/api/version"
    sets_ctx = False  # Ollama's own num_ctx
    ctx = OLLAMA_DEFAULT_CTX

    @classmethod
    def add_arguments(cls, ap: argparse.ArgumentParser) -> None:
        ap.add_argument("--ollama-bin", default="ollama")
        ap.add_argument("--models-dir", default=None, help="OLLAMA_MODELS for the ollama engine")

    def start(self) -> None:
        if self.args.servers and self.setup.is_file:  # the servers registered it under this name
            self.model_name = ollama_model_name(self.setup.model)
        super().start()

    def server_command(self, host: str, port: int, host_for_url: str) -> list[str]:
        a = self.args
        self.env.update(OLLAMA_HOST=f"{host_for_url}:{port}", OLLAMA_SCHED_SPREAD="1", OLLAMA_KEEP_ALIVE="-1")
        self.env.setdefault("OLLAMA_NUM_PARALLEL", str(a.concurrency))
        if a.models_dir:
            self.env["OLLAMA_MODELS"] = str(Path(a.models_dir).resolve())
        self.record["ollama_env"] = {k: v for k, v in self.env.items() if k.startswith("OLLAMA_")}
        return [a.ollama_bin, "serve"]

    def after_ready(self) -> None:
        if self.setup.is_file:
            self.model_name = ollama_create(self.args.ollama_bin, self.bases[0], self.setup.model, self.env,
                                            self.setup.log_path, self.args.startup_timeout)
            self.record["model"]["ollama_name"] = self.model_name

    def provenance(self) -> dict[str, Any]:
        status, ver = http_json(self.bases[0], "GET", "/api/version")
        return {"name": self.name, "version": ver.get("version") if status == 200 and isinstance(ver, dict) else None}


@register
class TorchEngine(Engine):
    """A plain PyTorch Llama (``llm_torch.py``) in this process: no server, one request at
    a time (concurrent requests queue, as in llama-cpp-python's server), float32."""

    name = "torch"
    summary = "a plain PyTorch Llama read from the GGUF, in-process (no server; scripts/llm_torch.py)"
    max_gpus = 1

    @classmethod
    def check(cls, args: argparse.Namespace) -> str | None:
        if args.gpus > (cls.max_gpus or args.gpus):
            return f"engine torch runs on one device: --gpus {args.gpus} needs a server engine"
        return None

    def start(self) -> None:
        if not self.setup.is_file:
            raise PointError(f"model {self.setup.model} is not a file (torch needs a GGUF path)")
        os.environ.update(self.setup.gpu_env)  # before torch looks for devices
        try:
            import torch

            import llm_torch
        except ImportError as exc:
            raise PointError(f"engine torch needs torch, numpy, gguf and tokenizers: {exc}") from exc
        torch.set_num_threads(self.setup.threads)
        device = "cuda" if self.args.gpus else "cpu"  # ROCm torch answers to "cuda" too
        if device == "cuda" and not torch.cuda.is_available():
            raise PointError("--gpus 1 but torch sees no GPU")
        t0 = time.perf_counter()
        try:
            self.model = llm_torch.GGUFLlama(self.setup.model, ctx=self.args.ctx, device=device)
        except Exception as exc:  # not a GGUF, another architecture or tokenizer, a missing tensor
            raise PointError(f"torch engine cannot run {self.setup.model}: {type(exc).__name__}: {exc}") from exc
        self.load_s = time.perf_counter() - t0
        self.pid = os.getpid()
        self.lock = threading.Lock()
        self.cancel = threading.Event()
        self.record["engine"].update(device=device, dtype="float32", tensor_types=self.model.file_types)

    def wait_ready(self) -> float | None:
        return self.load_s

    def _prompt_ids(self, prompt: dict[str, Any]) -> list[int]:
        tok = self.model.tokenizer
        if self.args.api == "chat":  # as llama-cpp-python: the template renders BOS itself
            messages = prompt.get("messages") or [{"role": "user", "content": prompt["prompt"]}]
            return tok.encode(tok.render_chat(messages), add_bos=False)
        return tok.encode(prompt["prompt"], add_bos=True)

    def generate(self, prompt: dict[str, Any], index: int = 0) -> dict[str, Any]:
        stream = TokenStream()
        with self.lock:
            ids: list[int] = []
            n, finish, error = 0, None, None
            try:
                ids = self._prompt_ids(prompt)
                tokens = self.model.generate(ids, prompt.get("max_tokens") or self.args.max_tokens)
                while not self.cancel.is_set():
                    try:
                        _, text = next(tokens)
                    except StopIteration as end:
                        finish = end.value
                        break
                    stream.piece(text)
                    n += 1
                else:
                    error = "cancelled"
            except Exception as exc:  # bad template, prompt too long: this request fails
                error = f"{type(exc).__name__}: {exc}"
        return stream.result(n, "usage", finish, len(ids) or None, error)

    def stop(self) -> int | None:
        if hasattr(self, "cancel"):
            self.cancel.set()
        return None

    def provenance(self) -> dict[str, Any]:
        import torch

        return {"name": self.name, "version": torch.__version__}
