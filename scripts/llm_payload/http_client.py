"""Requests to an LLM server: the body of a streamed, greedy request, plain JSON calls
and one streamed request, timed (:class:`~llm_payload.stream.TokenStream`)."""

from __future__ import annotations

import http.client
import json
import urllib.parse
from typing import Any

from llm_payload.sse import parse_sse_stream
from llm_payload.stream import TokenStream

APIS = ("chat", "completions", "generate")
API_PATHS = {"chat": "/v1/chat/completions", "completions": "/v1/completions", "generate": "/api/generate"}


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
