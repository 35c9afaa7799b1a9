"""One streamed generation, timed: what ``Engine.generate`` returns."""

from __future__ import annotations

import time
from typing import Any


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
