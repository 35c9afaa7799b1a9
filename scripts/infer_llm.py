#!/usr/bin/env python3
"""LLM inference payload: start an inference server, stream a prompt set through it, time it.

One point of the sweep = one engine (llama.cpp's OpenAI-compatible server from
llama-cpp-python, or Ollama) on one model with N visible GPUs, at concurrency C:

1. start the server (unless ``--servers`` names already-running ones) with the GPU
   visibility environment from :func:`gpu_visibility_env`, its output in ``--server-log``;
2. health-check it with a bounded timeout (a clear error naming the log if it dies);
3. warm up (``--warmup`` untimed requests per server);
4. send every prompt, ``--concurrency`` at a time, through ONE stdlib streaming client
   (``/v1/chat/completions``, ``/v1/completions`` or Ollama's native ``/api/generate``),
   temperature 0 and a fixed seed, round-robin over the servers;
5. write the metrics JSON (wall time for the whole prompt set, requests/s, tokens/s,
   TTFT / latency / decode-rate percentiles, server peak RSS, Ollama's own timing fields)
   and the generated texts (JSONL, to check native vs container greedy outputs match);
6. ALWAYS stop the server: terminate its process group, kill after a timeout; also on
   SIGTERM (Slurm cancel) or SIGINT.

Imports only the standard library (plus the repository's ``workflow/scalesweep/metrics``
writer, itself stdlib-only); the llama.cpp engine runs ``python -m llama_cpp.server`` in
this same interpreter. It never asks whether it runs in a container.

Exit status: 0 all requests succeeded; 1 the point failed (metrics still written, with
``status: failed`` and the error); 2 bad arguments; 143/130 terminated by SIGTERM/SIGINT.
"""

from __future__ import annotations

import argparse
import ctypes
import http.client
import json
import math
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

_REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(_REPO / "workflow"))
from scalesweep.metrics import host_info, now_iso, peak_rss_mb, write_metrics  # noqa: E402

ENGINES = ("llamacpp", "ollama")
VENDORS = ("amd", "nvidia", "none")
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
HIDE_ALL = "-1"  # an invalid device id: Ollama's documented way to force CPU


class PointError(RuntimeError):
    """The point failed (server did not start, requests failed, ...)."""


class Terminated(BaseException):
    """Raised in the main thread by the SIGTERM handler so that ``finally`` runs."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"terminated by signal {signum}")
        self.signum = signum


# --------------------------------------------------------------------------- pure helpers


def gpu_visibility_env(n_gpus: int, vendor: str, parent: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment variables that make exactly ``n_gpus`` devices visible to the server.

    * ``amd``: ``ROCR_VISIBLE_DEVICES`` (what the OLCF study varied) and
      ``HIP_VISIBLE_DEVICES``; ``nvidia``: ``CUDA_VISIBLE_DEVICES`` (with
      ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` so indices match ``nvidia-smi``).
    * ``0`` GPUs, whatever the vendor: every variable of every vendor set to ``"-1"``,
      an invalid id, which is Ollama's documented way to force CPU (an empty
      ``CUDA_VISIBLE_DEVICES`` has been reported to crash Ollama).
    * ``parent`` (optional, e.g. ``os.environ``): when the scheduler already restricted
      the devices (Slurm sets ``ROCR_VISIBLE_DEVICES``/``CUDA_VISIBLE_DEVICES`` to the
      allocated ones), the first ``n_gpus`` of that list are used instead of ``0..n-1``.
      ``HIP_VISIBLE_DEVICES`` indexes the ROCr-visible devices, so it is always
      ``0..n-1``.

    Pure: no environment is read or written here.
    """
    if isinstance(n_gpus, bool) or not isinstance(n_gpus, int) or n_gpus < 0:
        raise ValueError(f"n_gpus must be an integer >= 0, not {n_gpus!r}")
    if vendor not in VENDORS:
        raise ValueError(f"gpu vendor must be one of {VENDORS}, not {vendor!r}")
    if n_gpus == 0:
        return {
            "CUDA_VISIBLE_DEVICES": HIDE_ALL,
            "ROCR_VISIBLE_DEVICES": HIDE_ALL,
            "HIP_VISIBLE_DEVICES": HIDE_ALL,
        }
    if vendor == "none":
        raise ValueError(f"{n_gpus} GPUs requested with gpu vendor 'none'")
    parent = parent or {}
    var = "ROCR_VISIBLE_DEVICES" if vendor == "amd" else "CUDA_VISIBLE_DEVICES"
    ids = [str(i) for i in range(n_gpus)]
    inherited = [d.strip() for d in parent.get(var, "").split(",") if d.strip()]
    if inherited and HIDE_ALL not in inherited:
        if len(inherited) < n_gpus:
            raise ValueError(f"{n_gpus} GPUs requested but {var}={parent[var]!r} allows only {len(inherited)}")
        ids = inherited[:n_gpus]
    env = {var: ",".join(ids)}
    if vendor == "amd":
        env["HIP_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(n_gpus))
    else:
        env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    return env


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


def percentile(values: list[float], q: float) -> float | None:
    """The q-th percentile (0..100), linear interpolation (numpy's default method)."""
    xs = sorted(v for v in values if v is not None and not math.isnan(v))
    if not xs:
        return None
    pos = (len(xs) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def summarize(values: list[float | None]) -> dict[str, Any]:
    xs = [v for v in values if v is not None]
    if not xs:
        return {"n": 0}
    return {
        "n": len(xs),
        "mean": sum(xs) / len(xs),
        "min": min(xs),
        "p50": percentile(xs, 50),
        "p90": percentile(xs, 90),
        "p99": percentile(xs, 99),
        "max": max(xs),
    }


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
    rec: dict[str, Any] = {"server": base_url, "ok": False}
    t_send = time.perf_counter()
    rec["t_send"] = t_send
    texts: list[str] = []
    n_token_events = 0
    t_first = t_last = None
    usage = timings = finish = None
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
            rec["error"] = f"HTTP {resp.status}: {resp.read()[:500].decode('utf-8', 'replace')}"
            return rec
        for ev in parse_sse_stream(resp):
            now = time.perf_counter()
            kind = ev["type"]
            if kind == "token":
                if t_first is None:
                    t_first = now
                t_last = now
                n_token_events += 1
                texts.append(ev["text"])
            elif kind == "usage":
                usage = ev
            elif kind == "timings":
                timings = {k: v for k, v in ev.items() if k != "type"}
            elif kind == "finish":
                finish = ev["reason"]
            elif kind == "error":
                rec["error"] = str(ev["error"])
                break
            elif kind == "done":
                break
    except (OSError, http.client.HTTPException) as exc:
        rec["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        conn.close()
    t_end = time.perf_counter()
    max_tokens = body.get("max_tokens") or body.get("options", {}).get("num_predict")
    # Generated tokens: the engine's count when it gives one; else a "length" finish
    # means exactly max_tokens; else the number of streamed pieces (a piece can hold
    # several tokens when the server buffers incomplete UTF-8, so this undercounts).
    if usage is not None:
        n_tokens, source = usage["completion_tokens"], "usage"
    elif finish == "length" and max_tokens:
        n_tokens, source = int(max_tokens), "finish_length"
    else:
        n_tokens, source = n_token_events, "chunks"
    rec.update(
        text="".join(texts),
        finish_reason=finish,
        completion_tokens=n_tokens,
        prompt_tokens=usage.get("prompt_tokens") if usage else None,
        token_source=source,
        stream_pieces=n_token_events,
        t_first=t_first,
        t_end=t_end,
        latency_s=t_end - t_send,
        ttft_s=(t_first - t_send) if t_first is not None else None,
        decode_tokens_per_s=(
            (n_tokens - 1) / (t_last - t_first) if t_first is not None and t_last > t_first and n_tokens > 1 else None
        ),
    )
    if timings:
        rec["engine_timings"] = timings
    if "error" not in rec:
        if t_first is None:
            rec["error"] = "stream ended without any token"
        else:
            rec["ok"] = True
    return rec


def run_prompts(
    bases: list[str],
    api: str,
    model: str,
    prompts: list[dict[str, Any]],
    max_tokens: int,
    concurrency: int,
    seed: int,
    timeout: float,
    threads: int | None = None,
) -> tuple[list[dict[str, Any]], float, float]:
    """All prompts through ``concurrency`` worker threads, request i to server i % len.

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
            body = request_body(api, model, prompts[i], max_tokens, seed, threads)
            try:
                rec = stream_request(bases[i % len(bases)], api, body, timeout)
            except Exception as exc:  # a bug, not a server error: record and go on
                rec = {"server": bases[i % len(bases)], "ok": False, "error": f"{type(exc).__name__}: {exc}"}
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


# --------------------------------------------------------------------------- server process


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


def start_server(cmd: list[str], env: dict[str, str], log_path: Path) -> subprocess.Popen:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log = open(log_path, "ab")
    log.write(f"--- scalesweep infer_llm {now_iso()}: {' '.join(cmd)}\n".encode())
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


def stop_server(proc: subprocess.Popen | None, grace: float = 10.0) -> int | None:
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


def wait_healthy(base: str, path: str, proc: subprocess.Popen | None, timeout: float, log_path: Path | None) -> float:
    """Poll GET ``path`` until 200; raise PointError naming the log if the server exits
    or ``timeout`` passes. Returns the seconds waited."""
    t0 = time.perf_counter()
    last = "no answer"
    while True:
        if proc is not None and proc.poll() is not None:
            raise PointError(
                f"server exited with status {proc.returncode} before becoming healthy; "
                f"see {log_path}:\n{_log_tail(log_path) if log_path else ''}"
            )
        try:
            status, _ = http_json(base, "GET", path, timeout=5.0)
            if status == 200:
                return time.perf_counter() - t0
            last = f"HTTP {status}"
        except (OSError, http.client.HTTPException) as exc:
            last = f"{type(exc).__name__}: {exc}"
        if time.perf_counter() - t0 > timeout:
            where = f"; see {log_path}:\n{_log_tail(log_path)}" if log_path else ""
            raise PointError(f"server {base} not healthy after {timeout:.0f}s (last: {last}){where}")
        time.sleep(0.2)


def _proc_children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = defaultdict(list)
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as fh:
                stat = fh.read()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        kids[ppid].append(int(d))
    return kids


def _status_kb(pid: int) -> dict[str, int]:
    out = {}
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith(("VmRSS:", "VmHWM:")):
                    out[line.split(":")[0]] = int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return out


class MemorySampler(threading.Thread):
    """Samples the server's process tree (Ollama runs its model in a child runner).

    ``peak_tree_rss_mb``: the largest sampled sum of VmRSS over the tree;
    ``vmhwm_mb``: the sum over the processes seen of their kernel-recorded peak VmHWM
    (exact per process, an upper bound for the tree)."""

    def __init__(self, pid: int, interval: float = 0.5) -> None:
        super().__init__(daemon=True, name="mem-sampler")
        self.pid, self.interval = pid, interval
        self.peak_tree_rss_kb = 0
        self.hwm_kb: dict[int, int] = {}
        self._stop_event = threading.Event()

    def sample(self) -> None:
        kids = _proc_children()
        tree, todo = [], [self.pid]
        while todo:
            p = todo.pop()
            tree.append(p)
            todo.extend(kids.get(p, []))
        rss = 0
        for p in tree:
            st = _status_kb(p)
            rss += st.get("VmRSS", 0)
            if "VmHWM" in st:
                self.hwm_kb[p] = max(self.hwm_kb.get(p, 0), st["VmHWM"])
        self.peak_tree_rss_kb = max(self.peak_tree_rss_kb, rss)

    def run(self) -> None:
        while not self._stop_event.is_set():
            self.sample()
            self._stop_event.wait(self.interval)

    def stop(self) -> dict[str, Any]:
        self._stop_event.set()
        self.join(5)
        self.sample()
        return {
            "server_peak_rss_mb": round(self.peak_tree_rss_kb / 1024, 1),
            "server_vmhwm_mb": round(sum(self.hwm_kb.values()) / 1024, 1),
            "server_processes": len(self.hwm_kb),
        }


# --------------------------------------------------------------------------- model / engine info


def model_card(model: str, card: str | None) -> dict[str, Any] | None:
    """The sidecar card (``x.gguf`` -> ``x.json``) written by make_synthetic_llm.py."""
    path = Path(card) if card else (Path(model).with_suffix(".json") if model.endswith(".gguf") else None)
    if path is None or not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise PointError(f"model card {path} unreadable: {exc}") from exc


def sha256_file(path: str, limit_bytes: int) -> str | None:
    import hashlib

    if os.path.getsize(path) > limit_bytes:
        return None
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 22):
            h.update(chunk)
    return h.hexdigest()


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


# --------------------------------------------------------------------------- main


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        description="LLM inference payload: one sweep point (server + streaming client + metrics).",
        allow_abbrev=False,
    )
    ap.add_argument("--engine", choices=ENGINES, required=True)
    ap.add_argument("--model", required=True, help="GGUF path (llamacpp; also ollama: registered via 'ollama create') or Ollama model name")
    ap.add_argument("--model-card", default=None, help="sidecar JSON (default: the model path with .json)")
    ap.add_argument("--prompts", default=None, help="text file (one prompt per line) or .jsonl (required unless --serve-only)")
    ap.add_argument("--num-requests", type=int, default=0, help="cycle the prompts to this many requests (default: one each)")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--concurrency", type=int, default=1)
    ap.add_argument("--warmup", type=int, default=2, help="untimed requests per server before timing")
    ap.add_argument("--gpus", type=int, default=0, help="visible GPUs (0 = CPU only)")
    ap.add_argument("--gpu-vendor", choices=VENDORS, default="none")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0, help="0 = pick a free port")
    ap.add_argument("--servers", default=None, help="host:port,... of already-running servers: start none, spread requests over them")
    ap.add_argument(
        "--serve-only",
        action="store_true",
        help="multi-node: start the server, health-check it, write --ready-file, keep it up until SIGTERM/SIGINT "
        "(exit 0); a client elsewhere then runs with --servers",
    )
    ap.add_argument("--ready-file", default=None, help="with --serve-only: written (host:port) once the server is healthy")
    ap.add_argument("--stop-file", default=None,
                    help="with --serve-only: stop serving (cleanly, metrics written) once this file exists")
    ap.add_argument("--threads", type=int, default=0, help="server CPU threads (default: the CPUs this process may use)")
    ap.add_argument("--ctx", type=int, default=2048, help="context size (llamacpp n_ctx)")
    ap.add_argument("--api", choices=APIS, default="chat", help="chat|completions (OpenAI /v1) or generate (Ollama native, with its timing fields)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--out", required=True, help="metrics JSON")
    ap.add_argument("--outputs", default=None, help="generated texts, JSONL (one line per prompt, in prompt order)")
    ap.add_argument("--server-log", default=None, help="server stdout+stderr (default: next to --out)")
    ap.add_argument("--ollama-bin", default="ollama")
    ap.add_argument("--models-dir", default=None, help="OLLAMA_MODELS for the ollama engine")
    ap.add_argument("--startup-timeout", type=float, default=600.0)
    ap.add_argument("--request-timeout", type=float, default=600.0, help="socket timeout per request read")
    ap.add_argument("--hash-limit-gb", type=float, default=4.0, help="hash the model file when no card gives its sha256 and it is smaller")
    return ap


def _install_signal_handlers() -> None:
    def handler(signum: int, frame: Any) -> None:
        raise Terminated(signum)

    signal.signal(signal.SIGTERM, handler)
    if hasattr(signal, "SIGHUP"):
        signal.signal(signal.SIGHUP, handler)


def main(argv: list[str] | None = None) -> int:
    ap = build_parser()
    args = ap.parse_args(argv)
    for name in ("max_tokens", "concurrency"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.warmup < 0 or args.gpus < 0 or args.num_requests < 0:
        ap.error("--warmup, --gpus and --num-requests must be >= 0")
    if not args.serve_only and not args.prompts:
        ap.error("--prompts is required (unless --serve-only)")
    if args.serve_only and args.servers:
        ap.error("--serve-only starts a server; --servers uses running ones: choose one")
    if args.api == "generate" and args.engine != "ollama":
        ap.error("--api generate is Ollama's native API; use chat or completions with llamacpp")
    # one server per node (srun --ntasks-per-node=1): each task writes its own files
    rank = next((os.environ[v] for v in ("SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK")
                 if os.environ.get(v)), "0")
    for name in ("out", "ready_file", "server_log"):
        if getattr(args, name):
            setattr(args, name, getattr(args, name).replace("{rank}", rank))
    try:
        gpu_env = gpu_visibility_env(args.gpus, args.gpu_vendor, os.environ)
    except ValueError as exc:
        ap.error(str(exc))
    threads = args.threads or (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
    out = Path(args.out)
    log_path = Path(args.server_log) if args.server_log else out.with_name(out.stem + ".server.log")
    _install_signal_handlers()

    t_payload = time.perf_counter()
    record: dict[str, Any] = {
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
        "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
        "server_log": str(log_path),
    }
    proc: subprocess.Popen | None = None
    sampler: MemorySampler | None = None
    rc = 1
    try:
        prompts: list[dict[str, Any]] = []
        if not args.serve_only:
            prompts = load_prompts(args.prompts)
            if args.num_requests:
                prompts = [prompts[i % len(prompts)] for i in range(args.num_requests)]
            record["n_requests"] = len(prompts)

        card = model_card(args.model, args.model_card)
        is_file = os.path.isfile(args.model)
        model_info: dict[str, Any] = {
            "path": os.path.abspath(args.model) if is_file else None,
            "name": (card or {}).get("name") or (Path(args.model).stem if is_file else args.model),
            "synthetic": bool((card or {}).get("synthetic", False)),
            "sha256": (card or {}).get("sha256"),
            "n_params": (card or {}).get("n_params"),
        }
        if card:
            model_info["card"] = card
        if is_file and not model_info["sha256"]:
            model_info["sha256"] = sha256_file(args.model, int(args.hash_limit_gb * 2**30))
        if args.engine == "llamacpp" and not is_file and not args.servers:
            raise PointError(f"model {args.model} is not a file (llamacpp needs a GGUF path)")
        record["model"] = model_info
        served_name = model_info["name"]

        server_env = dict(os.environ, **gpu_env)
        if args.servers:
            bases = parse_servers(args.servers)
            record["servers"] = bases
        else:
            port = args.port or free_port(args.host)
            host_for_url = f"[{args.host}]" if ":" in args.host else args.host
            bases = [f"http://{host_for_url}:{port}"]
            if args.engine == "llamacpp":
                cmd = [
                    sys.executable, "-m", "llama_cpp.server",
                    "--model", args.model,
                    "--model_alias", served_name,
                    "--host", args.host,
                    "--port", str(port),
                    "--n_threads", str(threads),
                    "--n_threads_batch", str(threads),
                    "--n_gpu_layers", "0" if args.gpus == 0 else "-1",
                    "--n_ctx", str(args.ctx),
                    "--seed", str(args.seed),
                    "--logits_all", "False",
                    "--interrupt_requests", "False",
                ]  # fmt: skip
            else:
                server_env.update(
                    OLLAMA_HOST=f"{host_for_url}:{port}",
                    OLLAMA_SCHED_SPREAD="1",
                    OLLAMA_KEEP_ALIVE="-1",
                )
                server_env.setdefault("OLLAMA_NUM_PARALLEL", str(args.concurrency))
                if args.models_dir:
                    server_env["OLLAMA_MODELS"] = str(Path(args.models_dir).resolve())
                cmd = [args.ollama_bin, "serve"]
                record["ollama_env"] = {k: v for k, v in server_env.items() if k.startswith("OLLAMA_")}
            record["engine"]["server_cmd"] = cmd
            record["servers"] = bases
            t0 = time.perf_counter()
            try:
                proc = start_server(cmd, server_env, log_path)
            except OSError as exc:
                raise PointError(f"cannot start {cmd[0]}: {exc}") from exc
            record["server_pid"] = proc.pid
            sampler = MemorySampler(proc.pid)
            sampler.start()
            health = "/v1/models" if args.engine == "llamacpp" else "/api/version"
            wait_healthy(bases[0], health, proc, args.startup_timeout, log_path)
            record["startup_s"] = time.perf_counter() - t0
            if args.engine == "ollama" and is_file:
                served_name = ollama_create(args.ollama_bin, bases[0], args.model, server_env, log_path, args.startup_timeout)
                record["model"]["ollama_name"] = served_name
        if args.servers:
            health = "/v1/models" if args.engine == "llamacpp" else "/api/version"
            for b in bases:
                wait_healthy(b, health, None, args.startup_timeout, None)

        if args.engine == "llamacpp":
            record["engine"]["version"] = dist_version("llama_cpp_python")
        else:
            status, ver = http_json(bases[0], "GET", "/api/version")
            record["engine"]["version"] = ver.get("version") if status == 200 and isinstance(ver, dict) else None

        if args.serve_only:
            assert proc is not None
            advertised = socket.gethostname() if args.host in ("0.0.0.0", "::", "") else host_for_url
            record["serving"] = f"{advertised}:{port}"
            if args.ready_file:
                ready = Path(args.ready_file)
                ready.parent.mkdir(parents=True, exist_ok=True)
                tmp = ready.with_name(f".{ready.name}.tmp")
                tmp.write_text(record["serving"] + "\n")
                os.replace(tmp, ready)
            print(f"infer_llm: serving {served_name} at {record['serving']} until SIGTERM", file=sys.stderr, flush=True)
            t_serve = time.perf_counter()
            try:
                while proc.poll() is None:
                    if args.stop_file and Path(args.stop_file).exists():
                        raise Terminated(signal.SIGTERM)  # same clean path as a signal
                    time.sleep(0.5)
            except (Terminated, KeyboardInterrupt):
                record.update(status="ok", served_s=time.perf_counter() - t_serve)
            else:
                raise PointError(f"server exited with status {proc.returncode} while serving; see {log_path}")
            rc = 0
        else:
            _run_client(args, record, bases, served_name, prompts, threads, log_path)
            record["status"] = "ok"
            rc = 0
    except Terminated as exc:
        record["error"] = str(exc)
        rc = 128 + exc.signum
    except KeyboardInterrupt:
        record["error"] = "interrupted"
        rc = 130
    except (PointError, ValueError, OSError) as exc:
        record["error"] = str(exc)
        rc = 1
    finally:
        # Stop the server whatever happened; keep stopping it if a second signal arrives.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if hasattr(signal, "SIGHUP"):
            signal.signal(signal.SIGHUP, signal.SIG_IGN)
        if sampler is not None:
            record["memory"] = sampler.stop()
        if proc is not None:
            record["server_returncode"] = stop_server(proc)
        record.setdefault("memory", {})["client_peak_rss_mb"] = round(peak_rss_mb(), 1)
        record["end"] = now_iso()
        record["payload_wall_s"] = time.perf_counter() - t_payload
        write_metrics(out, record)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        if hasattr(signal, "SIGHUP"):
            signal.signal(signal.SIGHUP, signal.SIG_DFL)
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
    return rc


def _run_client(
    args: argparse.Namespace,
    record: dict[str, Any],
    bases: list[str],
    served_name: str,
    prompts: list[dict[str, Any]],
    threads: int,
    log_path: Path,
) -> None:
    """Warm up every server, time the prompt set, fill ``record``; raise PointError on failures."""
    # Warm-up: the first calls are 3-30x slower (allocation, page faults, graph build).
    t0 = time.perf_counter()
    for b in bases:
        for k in range(args.warmup):
            body = request_body(args.api, served_name, prompts[k % len(prompts)], args.max_tokens, args.seed, threads)
            w = stream_request(b, args.api, body, args.request_timeout)
            if not w["ok"]:
                raise PointError(f"warm-up request to {b} failed: {w.get('error')}; see {log_path}")
    record["warmup_s"] = time.perf_counter() - t0

    record["start_timed"] = now_iso()
    results, t_start, t_end = run_prompts(
        bases, args.api, served_name, prompts, args.max_tokens, args.concurrency, args.seed,
        args.request_timeout, threads if args.api == "generate" else None,
    )  # fmt: skip
    wall = t_end - t_start
    ok = [r for r in results if r.get("ok")]
    toks = sum(r["completion_tokens"] for r in ok)
    record.update(
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
    timed = [r["engine_timings"] for r in ok if r.get("engine_timings")]
    if timed:
        agg: dict[str, Any] = {"source": timed[0].get("source"), "n": len(timed)}
        for k in OLLAMA_TIMING_FIELDS + LLAMA_SERVER_TIMING_FIELDS:
            vals = [t[k] for t in timed if isinstance(t.get(k), (int, float))]
            if vals:
                agg[k] = summarize(vals)
        evals = [(t["eval_count"], t["eval_duration"]) for t in timed if t.get("eval_duration")]
        if evals:  # Ollama's own decode rate (tokens / s), as `ollama run --verbose` prints
            agg["eval_rate_tokens_per_s"] = summarize([c / (d / 1e9) for c, d in evals])
        record["engine_timings"] = agg
    record["requests"] = [
        {
            k: (round(v - t_start, 6) if k in ("t_send", "t_first", "t_end") and v is not None else v)
            for k, v in r.items()
            if k != "text"
        }
        for r in results
    ]
    if args.outputs:
        _write_outputs(Path(args.outputs), prompts, results)
    if record["n_failed"]:
        first = next(r for r in results if not r.get("ok"))
        raise PointError(f"{record['n_failed']} of {len(results)} requests failed, first: {first.get('error')}")


def _write_outputs(path: Path, prompts: list[dict[str, Any]], results: list[dict[str, Any]]) -> None:
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


if __name__ == "__main__":
    sys.exit(main())
