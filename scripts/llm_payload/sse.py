"""A streamed completion's wire formats as normalised events: server-sent events
(OpenAI-compatible ``/v1``) and newline-delimited JSON (Ollama's native API)."""

from __future__ import annotations

import json
from typing import Any, Iterable, Iterator

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
