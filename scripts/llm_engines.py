"""LLM engines for ``infer_llm.py``: one interface, looked up by name (``--engine``).

An engine turns a prompt into a timed stream of tokens. The driver (``infer_llm.py``:
prompt loop, warm-up, memory sampler, metrics) only ever calls this interface:

* ``start()``: start the server / load the model (raise :class:`PointError` if it cannot);
* ``wait_ready() -> seconds or None``: until it can serve (None: it started nothing);
* ``warm_up(prompts, n)``: ``n`` untimed requests per replica (server);
* ``generate(prompt, index) -> dict``: one greedy, streamed request, timed by
  :class:`TokenStream` (``ok``, ``error``, ``text``, ``completion_tokens``, ``ttft_s``,
  ``latency_s``, ``decode_tokens_per_s``, per-piece times ``t_pieces`` ...); ``index``
  (the request's place in the prompt set) spreads requests round-robin over replicas;
* ``stop() -> exit status or None``: always called, also after a failed start;
* ``provenance() -> {"name", "version"}``;

and reads its capabilities: ``serves_http`` (an HTTP server: ``--serve-only``,
``--servers``, so multi-node as one server per node plus a client), ``apis`` (the
``--api`` values it accepts), ``pid`` (the process tree the memory sampler watches),
``replicas``, and for HTTP servers ``address`` and ``poll()``. Engines add their own
fields to the metrics record they are given (``server_cmd``, ``servers``, ``server_pid``).

Engines: ``llamacpp`` (llama-cpp-python's OpenAI-compatible server), ``ollama`` (``ollama
serve``, its native ``/api/generate`` with its timing fields or ``/v1``) and ``torch``
(an in-process PyTorch Llama read from the GGUF: ``llm_torch.py``). Add one with
:func:`register`. Standard library only at import (``torch`` is imported by the torch
engine when it starts), so the HTTP engines run in images without torch.
"""

from __future__ import annotations

import argparse
import ctypes
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Iterable, Iterator

APIS = ("chat", "completions", "generate")
API_PATHS = {"chat": "/v1/chat/completions", "completions": "/v1/completions", "generate": "/api/generate"}
# Ollama's native duration fields are nanoseconds.
OLLAMA_TIMING_FIELDS = (
    "total_duration",
    "load_duration",
    "prompt_eval_count",
    "prompt_eval_duration",
    "eval_count",
    "eval_duration",
)
# llama.cpp's own C++ server (llama-server) reports these in a "timings" object.
LLAMA_SERVER_TIMING_FIELDS = ("prompt_n", "prompt_ms", "predicted_n", "predicted_ms")
# The context (tokens: a request's prompt and what it generates) an engine that sets one
# (``Engine.sets_ctx``) runs the model with: llamacpp's n_ctx, torch's KV cache; the
# payload's --ctx default, and the bound the workflow checks max_tokens against.
DEFAULT_CTX = 2048
# The context Ollama runs a model with where nobody sets num_ctx (this payload sets none:
# OllamaEngine.sets_ctx): 4096 tokens since Ollama v0.6.7 (ollama/ollama#10452), so for
# v0.9.0, the version containers/apptainer/ollama.def pins; OLLAMA_CONTEXT_LENGTH in the
# server's environment changes it. The bound the workflow checks max_tokens against.
OLLAMA_DEFAULT_CTX = 4096


class PointError(RuntimeError):
    """The point failed (server did not start, requests failed, ...)."""


def now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


# --------------------------------------------------------------------------- timing


class TokenStream:
    """Times one streamed generation; :meth:`result` is what ``Engine.generate`` returns.

    Create it when the request is sent (queueing in the engine counts towards TTFT, as
    it does in a server), call :meth:`piece` as each text piece arrives."""

    def __init__(self, **fields: Any) -> None:
        self.fields = fields  # e.g. server
        self.t_send = time.perf_counter()
        self.times: list[float] = []
        self.texts: list[str] = []

    def piece(self, text: str) -> None:
        self.times.append(time.perf_counter())
        self.texts.append(text)

    def failed(self, error: str) -> dict[str, Any]:
        """A request that never streamed (refused, HTTP error)."""
        return {**self.fields, "ok": False, "t_send": self.t_send, "error": error}

    def result(self, completion_tokens: int, token_source: str, finish: str | None, prompt_tokens: int | None = None,
               error: str | None = None, engine_timings: dict[str, Any] | None = None) -> dict[str, Any]:
        t_end = time.perf_counter()
        t_first = self.times[0] if self.times else None
        t_last = self.times[-1] if self.times else None
        rec: dict[str, Any] = {**self.fields, "ok": False, "t_send": self.t_send}
        if error:
            rec["error"] = error
        rec.update(
            text="".join(self.texts),
            finish_reason=finish,
            completion_tokens=completion_tokens,
            prompt_tokens=prompt_tokens,
            token_source=token_source,
            stream_pieces=len(self.times),
            t_first=t_first,
            t_end=t_end,
            latency_s=t_end - self.t_send,
            ttft_s=(t_first - self.t_send) if t_first is not None else None,
            decode_tokens_per_s=(
                (completion_tokens - 1) / (t_last - t_first)
                if t_first is not None and t_last > t_first and completion_tokens > 1 else None
            ),
        )
        if engine_timings:
            rec["engine_timings"] = engine_timings
        rec["t_pieces"] = self.times  # per-piece arrival times (perf_counter)
        if "error" not in rec:
            if t_first is None:
                rec["error"] = "stream ended without any token"
            else:
                rec["ok"] = True
        return rec


# --------------------------------------------------------------------------- HTTP streaming


def _events_from_object(obj: Any) -> Iterator[dict[str, Any]]:
    if not isinstance(obj, dict):
        yield {"type": "error", "error": f"unexpected JSON value {obj!r:.200}"}
        return
    if obj.get("error"):
        err = obj["error"]
        yield {"type": "error", "error": err.get("message", err) if isinstance(err, dict) else err}
        return
    # OpenAI-compatible chunk (llama-cpp-python, Ollama /v1, vLLM, llama-server ...)
    for choice in obj.get("choices") or []:
        delta = choice.get("delta") or choice.get("message") or {}
        text = choice.get("text") if "text" in choice else delta.get("content")
        role_only = text == "" and "role" in delta  # a chat stream's opening chunk
        if text is not None and not role_only and (text != "" or choice.get("finish_reason") is None):
            yield {"type": "token", "text": text, "index": choice.get("index", 0)}
        if choice.get("finish_reason"):
            yield {"type": "finish", "reason": choice["finish_reason"], "index": choice.get("index", 0)}
    usage = obj.get("usage")
    if isinstance(usage, dict) and usage.get("completion_tokens") is not None:
        yield {
            "type": "usage",
            "prompt_tokens": usage.get("prompt_tokens"),
            "completion_tokens": usage.get("completion_tokens"),
            "total_tokens": usage.get("total_tokens"),
        }
    timings = obj.get("timings")
    if isinstance(timings, dict):
        yield {"type": "timings", "source": "llama-server", **{k: timings[k] for k in LLAMA_SERVER_TIMING_FIELDS if k in timings}}
    # Ollama native chunk (/api/generate: "response"; /api/chat: "message")
    if "choices" not in obj and ("response" in obj or "message" in obj or "done" in obj):
        text = obj.get("response")
        if text is None and isinstance(obj.get("message"), dict):
            text = obj["message"].get("content")
        if text:
            yield {"type": "token", "text": text, "index": 0}
        if obj.get("done"):
            fields = {k: obj[k] for k in OLLAMA_TIMING_FIELDS if k in obj}
            if fields:
                yield {"type": "timings", "source": "ollama", **fields}
            if "eval_count" in obj:
                yield {
                    "type": "usage",
                    "prompt_tokens": obj.get("prompt_eval_count"),
                    "completion_tokens": obj.get("eval_count"),
                    "total_tokens": (obj.get("prompt_eval_count") or 0) + obj["eval_count"],
                }
            yield {"type": "finish", "reason": obj.get("done_reason") or "stop", "index": 0}
            yield {"type": "done"}


def parse_sse_stream(lines: Iterable[str | bytes]) -> Iterator[dict[str, Any]]:
    """Normalised events from a streamed completion, one or more per input line.

    Accepts both wire formats, line by line (lazily, so callers can time each event):

    * Server-sent events (OpenAI-compatible ``/v1``): ``data: {json}`` lines, ``data:
      [DONE]``, blank separators, ``: keep-alive`` comments, ``event:``/``id:``/``retry:``
      fields (ignored);
    * newline-delimited JSON (Ollama's native ``/api/generate`` and ``/api/chat``).

    Events (dicts with a ``type``):

    * ``token``: ``text`` (possibly ``""``), ``index`` - one streamed content piece;
      a chat chunk carrying only the assistant ``role`` is not a token;
    * ``finish``: ``reason`` (``length``, ``stop``, ...);
    * ``usage``: ``prompt_tokens``, ``completion_tokens``, ``total_tokens`` (the
      ``include_usage`` chunk, or Ollama's ``prompt_eval_count``/``eval_count``);
    * ``timings``: ``source`` (``ollama`` or ``llama-server``) and the engine's own fields;
    * ``error``: ``error`` (an error object in the stream, or a line that is not JSON);
    * ``done``: ``data: [DONE]`` or Ollama's ``"done": true``.
    """
    for raw in lines:
        line = raw.decode("utf-8", errors="replace") if isinstance(raw, (bytes, bytearray)) else raw
        line = line.rstrip("\r\n")
        if not line.strip() or line.startswith(":"):
            continue  # event separator or SSE comment (keep-alive / ping)
        if line.startswith("data:"):
            payload = line[5:].strip()
            if payload == "[DONE]":
                yield {"type": "done"}
                continue
        elif line.startswith(("event:", "id:", "retry:")):
            continue
        else:
            payload = line.strip()  # NDJSON
        try:
            obj = json.loads(payload)
        except json.JSONDecodeError:
            yield {"type": "error", "error": f"not JSON: {payload[:200]!r}"}
            continue
        yield from _events_from_object(obj)



def request_body(api: str, model: str, prompt: dict[str, Any], max_tokens: int, seed: int, threads: int | None = None) -> dict[str, Any]:
    """The JSON body of one streamed, greedy request."""
    if api == "generate":  # Ollama native: returns eval_count / eval_duration etc.
        options: dict[str, Any] = {"temperature": 0, "seed": seed, "num_predict": max_tokens}
        if threads:
            options["num_thread"] = threads
        return {"model": model, "prompt": prompt["prompt"], "stream": True, "options": options}
    body: dict[str, Any] = {
        "model": model,
        "max_tokens": max_tokens,
        "temperature": 0,
        "seed": seed,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if api == "chat":
        body["messages"] = prompt.get("messages") or [{"role": "user", "content": prompt["prompt"]}]
    else:
        body["prompt"] = prompt["prompt"]
    return body


def parse_servers(spec: str) -> list[str]:
    """``host:port,host:port`` (or full ``http://`` URLs) -> base URLs."""
    urls = []
    for item in spec.split(","):
        item = item.strip()
        if not item:
            continue
        if "://" not in item:
            item = "http://" + item
        u = urllib.parse.urlsplit(item)
        if not u.hostname or not u.port:
            raise ValueError(f"server {item!r} needs host:port")
        urls.append(f"{u.scheme}://{u.hostname}:{u.port}")
    if not urls:
        raise ValueError("--servers is empty")
    return urls


# --------------------------------------------------------------------------- HTTP client


def _conn(base_url: str, timeout: float) -> http.client.HTTPConnection:
    u = urllib.parse.urlsplit(base_url)
    cls = http.client.HTTPSConnection if u.scheme == "https" else http.client.HTTPConnection
    return cls(u.hostname, u.port, timeout=timeout)


def http_json(base_url: str, method: str, path: str, body: Any = None, timeout: float = 10.0) -> tuple[int, Any]:
    conn = _conn(base_url, timeout)
    try:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"} if data is not None else {}
        conn.request(method, path, body=data, headers=headers)
        resp = conn.getresponse()
        raw = resp.read()
        try:
            return resp.status, json.loads(raw) if raw else None
        except json.JSONDecodeError:
            return resp.status, raw.decode("utf-8", errors="replace")
    finally:
        conn.close()



def stream_request(base_url: str, api: str, body: dict[str, Any], timeout: float) -> dict[str, Any]:
    """Send one streamed request and time it. Never raises for HTTP/stream errors:
    they come back as ``ok: False`` with ``error``."""
    stream = TokenStream(server=base_url)
    usage = timings = finish = error = None
    conn = _conn(base_url, timeout)
    try:
        conn.request(
            "POST",
            API_PATHS[api],
            body=json.dumps(body).encode(),
            headers={"Content-Type": "application/json", "Accept": "text/event-stream"},
        )
        resp = conn.getresponse()
        if resp.status != 200:
            return stream.failed(f"HTTP {resp.status}: {resp.read()[:500].decode('utf-8', 'replace')}")
        for ev in parse_sse_stream(resp):
            kind = ev["type"]
            if kind == "token":
                stream.piece(ev["text"])
            elif kind == "usage":
                usage = ev
            elif kind == "timings":
                timings = {k: v for k, v in ev.items() if k != "type"}
            elif kind == "finish":
                finish = ev["reason"]
            elif kind == "error":
                error = str(ev["error"])
                break
            elif kind == "done":
                break
    except (OSError, http.client.HTTPException) as exc:
        error = f"{type(exc).__name__}: {exc}"
    finally:
        conn.close()
    n_tokens, source = returned_tokens(usage, timings, len(stream.times))
    return stream.result(n_tokens, source, finish, usage.get("prompt_tokens") if usage else None, error, timings)


def returned_tokens(usage: dict[str, Any] | None, timings: dict[str, Any] | None,
                    pieces: int) -> tuple[int, str]:
    """(tokens generated, where the count comes from): what the engine returned, never
    what was asked for. The engine's own count when it gives one (``usage``: the OpenAI
    ``include_usage`` chunk or Ollama's ``eval_count``; ``timings``: llama-server's
    ``predicted_n``), else the streamed pieces (``chunks``: a piece can hold several
    tokens when the server buffers incomplete UTF-8, so this may undercount, never
    overcount). A "length" finish says only that generation stopped at a limit: the
    request's max_tokens, or the engine's context (llama-cpp-python cuts max_tokens to
    what is left of its n_ctx and streams no usage)."""
    if usage is not None and isinstance(usage.get("completion_tokens"), int):
        return usage["completion_tokens"], "usage"
    if timings is not None and isinstance(timings.get("predicted_n"), int):
        return timings["predicted_n"], "timings"
    return pieces, "chunks"


# --------------------------------------------------------------------------- server processes


def free_port(host: str) -> int:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _pdeathsig() -> None:
    """In the child: get SIGTERM if the payload dies (even SIGKILLed). Linux only."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except Exception:
        pass


LOG_HEADER = "--- scalesweep infer_llm "  # start_server's line before each start's output


def start_server(cmd: list[str], env: dict[str, str], log_path: Path) -> subprocess.Popen:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log = open(log_path, "ab")
    log.write(f"{LOG_HEADER}{now_iso()}: {' '.join(cmd)}\n".encode())
    log.flush()
    try:
        return subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,  # its own process group: stop it and its children at once
            preexec_fn=_pdeathsig,
        )
    finally:
        log.close()


# SIGTERM to SIGKILL of a server started here. Its clean shutdown (uvicorn's for llama.cpp:
# close the connections, free the model) takes 0.2 s when no request is in flight (the
# synthetic model, 2 busy cores); with one in flight it has no bound: uvicorn waits for
# it, and its generation runs on to max_tokens in a worker thread even once the client
# has closed its connection (at full CPU, for minutes with a large max_tokens), so no
# longer wait would end it, and SIGKILL loses nothing (the payload writes the record). Whatever a payload leaves running (a server it
# could not stop) the harness stops once the payload has ended (scalesweep.run.reaper).
SERVER_STOP_GRACE_S = 3.0


def stop_server(proc: subprocess.Popen | None, grace: float = SERVER_STOP_GRACE_S) -> int | None:
    """Terminate the server's process group, SIGKILL after ``grace`` seconds."""
    if proc is None:
        return None
    pgid = proc.pid  # start_new_session: the group id is the server's pid

    def signal_group(sig: int) -> None:
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    signal_group(signal.SIGTERM)
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        signal_group(signal.SIGKILL)
        proc.wait(timeout=grace)
    signal_group(signal.SIGKILL)  # stragglers (Ollama runners) left in the group
    return proc.returncode


def _log_tail(path: Path, n: int = 20) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return "\n".join("    " + line for line in lines[-n:])


# A line of a server log that says what went wrong: llama.cpp's "error loading model",
# Ollama's "Error: ...", a Python exception's last line ("ValueError: ..."). Not "cannot":
# llama.cpp logs "... cannot be used with preferred buffer type ..." on every good load.
_CAUSE = re.compile(r"\b(error|failed|fatal|unable|not found|no such|denied|out of memory)\b"
                    r"|^[A-Za-z_][\w.]*(Error|Exception|Exit):", re.IGNORECASE)


def log_cause(path: Path | None, limit: int = 2) -> str | None:
    """Why a server stopped, from its log: the last ``limit`` lines of its latest start
    (after :data:`LOG_HEADER`) that name an error (no traceback frames), joined by " | ";
    None when none does (a server killed by a signal says nothing)."""
    try:
        text = path.read_text(errors="replace") if path else ""
    except OSError:
        return None
    lines = text[text.rfind(LOG_HEADER):].splitlines()[1:] if LOG_HEADER in text else text.splitlines()
    causes = [line.strip() for line in lines if not line.startswith((" ", "\t")) and _CAUSE.search(line)]
    picked = list(dict.fromkeys(causes))[-limit:]
    return " | ".join(line[:300] for line in picked) or None


def server_exit_error(proc: subprocess.Popen, log_path: Path | None, when: str) -> str:
    """One line (the cause from its log) and the log's tail: a server that exited."""
    cause, rc = log_cause(log_path), proc.returncode
    how = f"was killed by signal {-rc}" if rc < 0 else f"exited with status {rc}"
    if rc < 0 and -rc in signal.valid_signals():
        how = f"was killed by signal {signal.Signals(-rc).name}"
    return (f"server {how} {when}" + (f": {cause}" if cause else "")
            + (f"; see {log_path}:\n{_log_tail(log_path)}" if log_path else ""))


def wait_healthy(base: str, path: str, proc: subprocess.Popen | None, timeout: float, log_path: Path | None) -> float:
    """Poll GET ``path`` until 200; raise PointError naming the log (and the cause it
    gives) if the server exits, or ``timeout`` passes. Returns the seconds waited."""
    t0 = time.perf_counter()
    last = "no answer"
    while True:
        if proc is not None and proc.poll() is not None:
            raise PointError(server_exit_error(proc, log_path, "before becoming healthy"))
        try:
            status, _ = http_json(base, "GET", path, timeout=5.0)
            if status == 200:
                return time.perf_counter() - t0
            last = f"HTTP {status}"
        except (OSError, http.client.HTTPException) as exc:
            last = f"{type(exc).__name__}: {exc}"
        if time.perf_counter() - t0 > timeout:
            cause = log_cause(log_path)
            where = (f": its log says {cause}" if cause else "") + (
                f"; see {log_path}:\n{_log_tail(log_path)}" if log_path else "")
            raise PointError(f"server {base} not healthy after {timeout:.0f}s (last: {last}){where}")
        time.sleep(0.2)


# --------------------------------------------------------------------------- model metadata

# GGUF metadata value types (gguf.GGUFValueType) -> the size of a scalar; 8: string, 9: array
_GGUF_SCALAR = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_GGUF_INT = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 10: "<Q", 11: "<q"}


def gguf_context_length(path: str | os.PathLike) -> int | None:
    """The context length a GGUF model declares (``<architecture>.context_length``), read
    from its header only (the keys come before the tensors: cheap for a 100 GB file); None
    when the file is not a readable GGUF (v2 or v3) or does not say."""
    import struct

    def read(fh, n: int) -> bytes:
        data = fh.read(n)
        if len(data) != n:
            raise EOFError
        return data

    def string(fh) -> bytes:
        return read(fh, struct.unpack("<Q", read(fh, 8))[0])

    def skip(fh, kind: int) -> None:
        if kind in _GGUF_SCALAR:
            fh.seek(_GGUF_SCALAR[kind], 1)
        elif kind == 8:
            fh.seek(struct.unpack("<Q", read(fh, 8))[0], 1)
        elif kind == 9:
            item, n = struct.unpack("<IQ", read(fh, 12))
            if item in _GGUF_SCALAR:
                fh.seek(_GGUF_SCALAR[item] * n, 1)
            else:
                for _ in range(n):
                    skip(fh, item)
        else:
            raise ValueError(f"GGUF value type {kind}")

    arch, lengths = None, {}
    try:
        with open(path, "rb") as fh:
            magic, version = struct.unpack("<4sI", read(fh, 8))
            if magic != b"GGUF" or version not in (2, 3):
                return None
            _, n_kv = struct.unpack("<QQ", read(fh, 16))
            for _ in range(n_kv):
                key = string(fh).decode("utf-8", "replace")
                kind = struct.unpack("<I", read(fh, 4))[0]
                if key == "general.architecture" and kind == 8:
                    arch = string(fh).decode("utf-8", "replace")
                elif key.endswith(".context_length") and kind in _GGUF_INT:
                    lengths[key] = struct.unpack(_GGUF_INT[kind], read(fh, _GGUF_SCALAR[kind]))[0]
                else:
                    skip(fh, kind)
                if arch and f"{arch}.context_length" in lengths:
                    break
    except (OSError, EOFError, ValueError, struct.error):
        return None
    n = lengths.get(f"{arch}.context_length") if arch else None
    return int(n) if n and n > 0 else None


# --------------------------------------------------------------------------- engine provenance


def dist_version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


def _ollama_model_name(path: str) -> str:
    stem = re.sub(r"[^a-z0-9._-]+", "-", Path(path).stem.lower()).strip("-._") or "model"
    return f"scalesweep-{stem}"


def ollama_create(ollama_bin: str, base: str, gguf: str, env: dict[str, str], log_path: Path, timeout: float) -> str:
    """Register a local GGUF with the running Ollama server; return the model name."""
    name = _ollama_model_name(gguf)
    modelfile = log_path.parent / f".{name}.Modelfile"
    modelfile.write_text(f"FROM {Path(gguf).resolve()}\n")
    e = dict(env, OLLAMA_HOST=urllib.parse.urlsplit(base).netloc)
    with open(log_path, "ab") as log:
        rc = subprocess.run(
            [ollama_bin, "create", name, "-f", str(modelfile)], env=e, stdout=log, stderr=subprocess.STDOUT, timeout=timeout
        ).returncode
    if rc != 0:
        raise PointError(f"'ollama create {name}' failed with status {rc}; see {log_path}")
    return name


# --------------------------------------------------------------------------- engines


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
    try:
        return ENGINES[name]
    except KeyError:
        raise ValueError(f"unknown engine {name!r}; known engines: {', '.join(sorted(ENGINES))}") from None


class HttpEngine(Engine):
    """An engine that runs as an HTTP server: started here, or already running
    elsewhere (``--servers``: requests spread round-robin over them)."""

    serves_http = True
    health_path: ClassVar[str] = ""

    def __init__(self, setup: Setup) -> None:
        super().__init__(setup)
        self.env = dict(os.environ, **setup.gpu_env)
        self.proc: subprocess.Popen | None = None
        self.bases: list[str] = []
        self.address = ""  # host:port of the server started here, as clients reach it
        self._t_start = 0.0

    def server_command(self, host: str, port: int, host_for_url: str) -> list[str]:
        raise NotImplementedError

    def after_ready(self) -> None:
        """Once a server started here is healthy (e.g. register the model)."""

    def start(self) -> None:
        a = self.args
        if a.servers:
            self.bases = parse_servers(a.servers)
            self.record["servers"] = self.bases
            self.replicas = len(self.bases)
            return
        port = a.port or free_port(a.host)
        host_for_url = f"[{a.host}]" if ":" in a.host else a.host
        self.bases = [f"http://{host_for_url}:{port}"]
        advertised = socket.gethostname() if a.host in ("0.0.0.0", "::", "") else host_for_url
        self.address = f"{advertised}:{port}"
        cmd = self.server_command(a.host, port, host_for_url)
        self.record["engine"]["server_cmd"] = cmd
        self.record["servers"] = self.bases
        self._t_start = time.perf_counter()
        try:
            self.proc = start_server(cmd, self.env, self.setup.log_path)
        except OSError as exc:
            raise PointError(f"cannot start {cmd[0]}: {exc}") from exc
        self.record["server_pid"] = self.pid = self.proc.pid

    def wait_ready(self) -> float | None:
        a = self.args
        if self.proc is None:
            for b in self.bases:
                wait_healthy(b, self.health_path, None, a.startup_timeout, None)
            return None
        wait_healthy(self.bases[0], self.health_path, self.proc, a.startup_timeout, self.setup.log_path)
        seconds = time.perf_counter() - self._t_start
        self.after_ready()
        return seconds

    def generate(self, prompt: dict[str, Any], index: int = 0) -> dict[str, Any]:
        a = self.args
        # a request may carry its own output length (generated lengths: scripts/llm_load.py)
        body = request_body(a.api, self.model_name, prompt, prompt.get("max_tokens") or a.max_tokens,
                            a.seed, self.setup.threads)
        return stream_request(self.bases[index % len(self.bases)], a.api, body, a.request_timeout)

    def poll(self) -> int | None:
        """None while the server started here runs, else its exit status."""
        return self.proc.poll() if self.proc is not None else None

    def stop(self) -> int | None:
        return stop_server(self.proc)


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
            self.model_name = _ollama_model_name(self.setup.model)
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
