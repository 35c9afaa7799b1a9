#!/usr/bin/env python3
"""Stand-in for ``ollama`` 0.9.0: the CLI and ``ollama serve``, backed by llama.cpp.

Run as ``ollama.py ollama ARGS...``. What the project uses, as Ollama does it (sources:
github.com/ollama/ollama at v0.9.0 -- docs/api.md, docs/openai.md, server/routes.go,
server/images.go, server/create.go, openai/openai.go, cmd/cmd.go, envconfig/config.go,
discover/; format/format.go for the numbers it prints):

* ``OLLAMA_HOST`` (default ``127.0.0.1:11434``; ``host:port``, ``http://host:port``,
  ``0.0.0.0:port``, ``:port``), ``OLLAMA_MODELS`` (default ``~/.ollama/models``),
  ``OLLAMA_CONTEXT_LENGTH`` (4096), ``OLLAMA_KEEP_ALIVE`` (5m; negative: forever),
  ``OLLAMA_NOPRUNE``.
* ``ollama serve``: the HTTP API: ``GET /`` ("Ollama is running"), ``/api/version``,
  ``/api/tags``, ``/api/ps``, ``POST /api/pull`` (NDJSON progress: "pulling manifest",
  "pulling <digest>" with digest/total/completed, "verifying sha256 digest", "writing
  manifest", "success"; ``"stream": false``: one object), ``/api/show``, ``/api/create``,
  ``HEAD|POST /api/blobs/sha256:<hex>``, ``DELETE /api/delete``, ``/api/generate`` and
  ``/api/chat`` (NDJSON chunks, the final one with ``done_reason`` and the timing fields
  ``total_duration``, ``load_duration``, ``prompt_eval_count``, ``prompt_eval_duration``,
  ``eval_count``, ``eval_duration`` in nanoseconds, measured; an empty prompt only loads the
  model: ``done_reason: "load"``), and the OpenAI-compatible ``/v1/models``,
  ``/v1/completions`` and ``/v1/chat/completions`` (server-sent events, ``data: [DONE]``, the
  usage chunk with ``stream_options.include_usage``). Errors are Ollama's
  (``model 'x' not found`` from /api/generate and /api/show, ``model "x" not found, try
  pulling it first`` from /api/chat, OpenAI-shaped errors on /v1).
  The models live where Ollama keeps them: ``$OLLAMA_MODELS/blobs/sha256-<hex>`` and
  ``$OLLAMA_MODELS/manifests/<host>/<namespace>/<model>/<tag>`` (Docker v2 manifests, the
  GGUF as layer ``application/vnd.ollama.image.model``), so servers sharing the directory
  see each other's models. Each request line is logged as Gin logs it (``[GIN] ... | 200
  | 1.2ms | 127.0.0.1 | POST "/api/generate"``, on stdout as gin.Default() does); the
  start-up lines (server config, listening, "inference compute" for each visible GPU of the
  node, or ``library=cpu``) go to stderr as slog text. SIGTERM/SIGINT: exit 0.
* Inference: ``llama_cpp.Llama`` on the model's blob, loaded on first use (``num_ctx``,
  ``num_thread`` of the request; reloaded when they change, as Ollama's scheduler does)
  and kept (``keep_alive``), one request at a time per model (others wait; health checks
  are answered meanwhile). Prompt evaluation and each generated token's sampling and
  evaluation are timed for real; generation stops at end-of-generation, ``num_predict``
  (``done_reason: "length"``), a ``stop`` string, or a full context (``length``).
  ``temperature`` 0 is greedy; above 0, top-k/top-p sampling with ``seed``. It always
  computes on the CPU: the GPUs are only reported, from the fake node of ``gpu_smi.py``
  filtered by ``ROCR_VISIBLE_DEVICES``/``HIP_VISIBLE_DEVICES``/``GPU_DEVICE_ORDINAL``
  (``-1``: none; unset: all 8 GCDs).
* Templates: the model's TEMPLATE (``ollama create`` with a Modelfile TEMPLATE) if it
  only uses ``{{ .System }}``/``{{ .Prompt }}``, else ``{{ .Prompt }}`` (what Ollama uses
  for a GGUF whose chat template it does not know); /api/chat with that template prompts
  with the user messages in order.
* "Registry" (no network): ``$SCALESWEEP_STANDIN_OLLAMA_REGISTRY`` is a directory with
  ``registry.json`` mapping model names (``"hf.co/UniverseTBD/astrollama.gguf"``,
  ``"codellama:70b"``, ``"tinyllama"``; no tag means ``:latest``) to GGUF files (relative
  to that directory or absolute). An unknown name fails as a missing manifest does
  (``pull model manifest: file does not exist``); without the variable every pull fails
  as without network.
* CLI: ``--version``/``-v``, ``serve``, ``pull``, ``show`` (the Model/architecture/
  parameters/context length/embedding length/quantization table), ``list``/``ls``, ``ps``,
  ``create NAME -f Modelfile`` (FROM a GGUF file: uploaded as a blob, as the real client
  does; or FROM a model name), ``rm``, ``run MODEL [PROMPT]``. They talk HTTP to the server
  at ``OLLAMA_HOST``; with none there they fail as Ollama 0.9.0 does on Linux:
  ``Error: ollama server not responding - could not connect to ollama server, run 'ollama
  serve' to start it`` (exit 1).

Not done: embeddings, push, copy, images/vision, tools, thinking, structured outputs,
OLLAMA_NUM_PARALLEL (requests to one model are served one after the other), KV-cache
reuse between requests (every prompt is evaluated in full).
"""

from __future__ import annotations

import codecs
import datetime as _dt
import hashlib
import http.client
import json
import os
import random
import re
import signal
import socket
import struct
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

try:  # the fake node's GPUs, shared with rocm-smi/amd-smi (run as a script: a sibling)
    import gpu_smi
except ImportError:  # imported as standins.ollama
    from standins import gpu_smi

HERE = Path(__file__).resolve().parent

VERSION = "0.9.0"
DEFAULT_REGISTRY = "registry.ollama.ai"
DEFAULT_NAMESPACE = "library"
DEFAULT_TAG = "latest"
MODEL_MEDIA = "application/vnd.ollama.image.model"
CONFIG_MEDIA = "application/vnd.docker.container.image.v1+json"
MANIFEST_MEDIA = "application/vnd.docker.distribution.manifest.v2+json"
LAYER_MEDIA = {"template": "application/vnd.ollama.image.template", "system": "application/vnd.ollama.image.system",
               "params": "application/vnd.ollama.image.params", "license": "application/vnd.ollama.image.license"}
DEFAULT_TEMPLATE = "{{ .Prompt }}"
REGISTRY_ENV = "SCALESWEEP_STANDIN_OLLAMA_REGISTRY"
NOT_RUNNING = "ollama server not responding - could not connect to ollama server, run 'ollama serve' to start it"


def log_invocation(record: dict[str, Any]) -> None:
    sys.path.insert(0, str(HERE.parent))
    from standins import log_invocation as log

    log(record)


# --------------------------------------------------------------------------- environment


def host_from_env() -> tuple[str, str, int]:
    """envconfig.Host: (scheme, host, port) from OLLAMA_HOST."""
    s = os.environ.get("OLLAMA_HOST", "").strip().strip("\"'")
    scheme, sep, hostport = s.partition("://")
    default_port = 11434
    if not sep:
        scheme, hostport = "http", s
    elif scheme == "http":
        default_port = 80
    elif scheme == "https":
        default_port = 443
    hostport = hostport.split("/", 1)[0]
    m = re.fullmatch(r"\[?([^\]]*?)\]?:(\d*)", hostport) if hostport.count(":") == 1 or hostport.startswith("[") \
        else None
    if m and m.group(2):
        host, port = m.group(1), int(m.group(2))
    else:
        host, port = (hostport.strip("[]") or "127.0.0.1"), default_port
    if not 0 <= port <= 65535:
        port = default_port
    return scheme, host, port


def models_dir() -> Path:
    return Path(os.environ.get("OLLAMA_MODELS") or Path.home() / ".ollama" / "models")


def keep_alive_default() -> float:
    """envconfig.KeepAlive: seconds (inf for negative)."""
    return parse_duration(os.environ.get("OLLAMA_KEEP_ALIVE", ""), 300.0)


def parse_duration(value: Any, default: float) -> float:
    if value is None or value == "":
        return default
    if isinstance(value, (int, float)):
        return float("inf") if value < 0 else float(value)
    s = str(value).strip()
    try:
        n = float(s)
        return float("inf") if n < 0 else n
    except ValueError:
        pass
    total, units = 0.0, {"h": 3600, "m": 60, "s": 1, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
    neg = s.startswith("-")
    for num, unit in re.findall(r"([0-9.]+)(h|ms|m|s|us|µs|ns)", s):
        total += float(num) * units[unit]
    if neg:
        return float("inf")
    return total if re.fullmatch(r"-?([0-9.]+(h|ms|m|s|us|µs|ns))+", s) else default


# --------------------------------------------------------------------------- formats (Go)


def go_time(ts: float | None = None, utc: bool = False) -> str:
    """A time as Go marshals it (RFC 3339, nanoseconds without trailing zeros, Z for UTC)."""
    ns = time.time_ns() if ts is None else int(ts * 1e9)
    d = _dt.datetime.fromtimestamp(ns // 10**9, _dt.timezone.utc if utc else None).astimezone(
        _dt.timezone.utc if utc else None)
    frac = f"{ns % 10**9:09d}".rstrip("0")
    off = d.strftime("%z")
    off = "Z" if off in ("+0000", "") else f"{off[:3]}:{off[3:]}"
    return d.strftime("%Y-%m-%dT%H:%M:%S") + (f".{frac}" if frac else "") + off


def go_duration(ns: int) -> str:
    """time.Duration.String()."""
    if ns == 0:
        return "0s"
    if ns < 1000:
        return f"{ns}ns"
    if ns < 10**6:
        return f"{ns / 1e3:.3f}".rstrip("0").rstrip(".") + "µs"
    if ns < 10**9:
        return f"{ns / 1e6:.6f}".rstrip("0").rstrip(".") + "ms"
    s = ns / 1e9
    if s < 60:
        return f"{s:.9f}".rstrip("0").rstrip(".") + "s"
    m, s = divmod(s, 60)
    if m < 60:
        return f"{int(m)}m" + f"{s:.9f}".rstrip("0").rstrip(".") + "s"
    h, m = divmod(m, 60)
    return f"{int(h)}h{int(m)}m" + f"{s:.9f}".rstrip("0").rstrip(".") + "s"


def human_number(n: int) -> str:
    """format.HumanNumber (parameter counts)."""
    for div, unit, dec in ((10**9, "B", 1), (10**6, "M", 2)):
        if n >= div:
            v = n / div
            return f"{v:.0f}{unit}" if v == int(v) else f"{v:.{dec}f}{unit}"
    if n >= 1000:
        return f"{n / 1000:.0f}K"
    return str(n)


def human_bytes(b: int) -> str:
    """format.HumanBytes (decimal units)."""
    for div, unit in ((10**12, "TB"), (10**9, "GB"), (10**6, "MB"), (10**3, "KB")):
        if b >= div:
            v = b / div
            break
    else:
        return f"{b} B"
    if v >= 10:
        return f"{int(v)} {unit}"
    return f"{v:.1f} {unit}" if v != int(v) else f"{int(v)} {unit}"


def human_bytes2(b: int) -> str:
    """format.HumanBytes2 (binary units, GPU memory in the server log)."""
    for div, unit in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if b >= div:
            return f"{b / div:.1f} {unit}"
    return f"{b} B"


def parse_go_time(s: str) -> float:
    m = re.match(r"(.*T\d\d:\d\d:\d\d)(\.\d+)?(Z|[+-]\d\d:\d\d)$", s)
    if not m:
        return time.time()
    tz = "+00:00" if m.group(3) == "Z" else m.group(3)
    return _dt.datetime.fromisoformat(m.group(1) + (m.group(2) or ".0")[:7] + tz).timestamp()


def human_time(ts: float) -> str:
    """format.HumanTime (``ollama list``'s MODIFIED)."""
    d = time.time() - ts
    if d < 1:
        return "Less than a second ago"
    for limit, div, unit in ((60, 1, "second"), (3600, 60, "minute"), (86400, 3600, "hour"),
                             (86400 * 7, 86400, "day"), (86400 * 30, 86400 * 7, "week"),
                             (86400 * 365, 86400 * 30, "month")):
        if d < limit:
            n = int(d // div)
            if n == 1:
                return f"About a {unit} ago" if unit != "hour" else "About an hour ago"
            return f"{n} {unit}s ago"
    return f"{int(d // (86400 * 365))} years ago"


def slog(level: str, source: str, msg: str, **attrs: Any) -> None:
    """log/slog's text handler, as ``ollama serve`` writes to stderr."""
    def q(v: Any) -> str:
        s = str(v)
        return json.dumps(s) if (s == "" or re.search(r'[\s="\\]', s) or not s.isprintable()) else s

    now = _dt.datetime.now().astimezone()
    off = now.strftime("%z")
    stamp = now.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now.microsecond // 1000:03d}" + \
        ("Z" if off == "+0000" else f"{off[:3]}:{off[3:]}")  # slog's RFC 3339 with milliseconds
    parts = [f"time={stamp}", f"level={level}", f"source={source}", f"msg={q(msg)}"]
    parts += [f"{k}={q(v)}" for k, v in attrs.items()]
    sys.stderr.write(" ".join(parts) + "\n")
    sys.stderr.flush()


# --------------------------------------------------------------------------- model names


class Name:
    """model.ParseName: [host/][namespace/]model[:tag] (digest ignored)."""

    def __init__(self, host: str, namespace: str, model: str, tag: str):
        self.host, self.namespace, self.model, self.tag = host, namespace, model, tag

    @classmethod
    def parse(cls, s: str) -> Name | None:
        s = (s or "").strip()
        s = s.split("://", 1)[-1].split("@", 1)[0]
        parts = s.split("/")
        if not s or len(parts) > 3 or any(not p for p in parts):
            return None
        last = parts[-1]
        model, _, tag = last.partition(":")
        tag = tag or DEFAULT_TAG
        host, namespace = DEFAULT_REGISTRY, DEFAULT_NAMESPACE
        if len(parts) == 3:
            host, namespace = parts[0], parts[1]
        elif len(parts) == 2:
            namespace = parts[0]
        ok = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,79}")
        if not (ok.fullmatch(model) and ok.fullmatch(tag) and ok.fullmatch(namespace)
                and re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.:-]{0,349}", host)):
            return None
        return cls(host, namespace, model, tag)

    def key(self) -> tuple[str, ...]:
        return (self.host.lower(), self.namespace.lower(), self.model.lower(), self.tag.lower())

    def shortest(self) -> str:
        """DisplayShortest."""
        if self.host == DEFAULT_REGISTRY and self.namespace == DEFAULT_NAMESPACE:
            return f"{self.model}:{self.tag}"
        if self.host == DEFAULT_REGISTRY:
            return f"{self.namespace}/{self.model}:{self.tag}"
        return f"{self.host}/{self.namespace}/{self.model}:{self.tag}"

    def manifest_path(self, root: Path) -> Path:
        return root / "manifests" / self.host / self.namespace / self.model / self.tag


# --------------------------------------------------------------------------- GGUF


GGUF_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
FILE_TYPES = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K", 11: "Q3_K_S",
              12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S", 17: "Q5_K_M", 18: "Q6_K",
              19: "IQ2_XXS", 20: "IQ2_XS", 21: "Q2_K_S", 22: "IQ3_XS", 23: "IQ3_XXS", 24: "IQ1_S", 25: "IQ4_NL",
              26: "IQ3_S", 27: "IQ2_S", 28: "IQ4_XS", 29: "IQ2_M", 30: "IQ1_M", 32: "BF16"}
TENSOR_TYPES = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 6: "Q5_0", 7: "Q5_1", 8: "Q8_0", 10: "Q2_K",
                11: "Q3_K", 12: "Q4_K", 13: "Q5_K", 14: "Q6_K", 30: "BF16"}


def read_gguf(path: Path) -> dict[str, Any]:
    """The key/value metadata and tensor list of a GGUF file (header only)."""
    with open(path, "rb") as f:
        def rd(fmt: str) -> Any:
            size = struct.calcsize(fmt)
            data = f.read(size)
            if len(data) != size:
                raise ValueError("truncated GGUF header")
            return struct.unpack(fmt, data)[0]

        def string() -> str:
            return f.read(rd("<Q")).decode("utf-8", errors="replace")

        def value(t: int) -> Any:
            if t in GGUF_SCALARS:
                return rd(GGUF_SCALARS[t])
            if t == 8:
                return string()
            if t == 9:
                et, n = rd("<I"), rd("<Q")
                if et in GGUF_SCALARS:
                    fmt = GGUF_SCALARS[et]
                    size = struct.calcsize(fmt)
                    raw = f.read(size * n)
                    return list(struct.unpack(f"<{n}{fmt[1]}", raw))
                return [value(et) for _ in range(n)]
            raise ValueError(f"unknown GGUF value type {t}")

        if f.read(4) != b"GGUF":
            raise ValueError("invalid file magic")
        version = rd("<I")
        n_tensors, n_kv = (rd("<I"), rd("<I")) if version == 1 else (rd("<Q"), rd("<Q"))
        kv: dict[str, Any] = {}
        for _ in range(n_kv):
            key = string()
            kv[key] = value(rd("<I"))
        tensors = []
        for _ in range(n_tensors):
            name = string()
            dims = [rd("<Q") for _ in range(rd("<I"))]
            ttype = rd("<I")
            rd("<Q")  # offset
            tensors.append((name, dims, ttype))
    n_params = sum(_prod(d) for _, d, _ in tensors)
    kv.setdefault("general.parameter_count", n_params)
    arch = kv.get("general.architecture", "")
    file_type = kv.get("general.file_type")
    if file_type is not None:
        quant = FILE_TYPES.get(file_type, "unknown")
    else:
        counts: dict[int, int] = {}
        for _, d, t in tensors:
            if len(d) >= 2:
                counts[t] = counts.get(t, 0) + _prod(d)
        quant = TENSOR_TYPES.get(max(counts, key=counts.get), "unknown") if counts else "unknown"
    return {"kv": kv, "tensors": tensors, "version": version, "architecture": arch, "n_params": n_params,
            "quantization": quant}


def _prod(dims: list[int]) -> int:
    n = 1
    for d in dims:
        n *= d
    return n


def model_config(info: dict[str, Any], gguf_digest: str) -> dict[str, Any]:
    """server/images.go ConfigV2 of a GGUF model."""
    arch = info["architecture"]
    return {"model_format": "gguf", "model_family": arch, "model_families": [arch],
            "model_type": human_number(info["n_params"]), "file_type": info["quantization"],
            "architecture": "amd64", "os": "linux", "rootfs": {"type": "layers", "diff_ids": [gguf_digest]}}


# --------------------------------------------------------------------------- the store


class StoreError(Exception):
    pass


class Store:
    """$OLLAMA_MODELS: blobs/sha256-<hex>, manifests/<host>/<ns>/<model>/<tag>."""

    def __init__(self, root: Path):
        self.root = root
        self.blobs = root / "blobs"
        self.lock = threading.Lock()

    def blob_path(self, digest: str) -> Path:
        if not re.fullmatch(r"sha256[:-][0-9a-f]{64}", digest):
            raise StoreError(f"invalid digest format {digest!r}")
        return self.blobs / digest.replace(":", "-")

    def manifests(self) -> Iterator[tuple[Name, Path]]:
        base = self.root / "manifests"
        if not base.is_dir():
            return
        for p in sorted(base.glob("*/*/*/*")):
            if p.is_file() and not p.name.startswith("."):
                host, ns, model, tag = p.relative_to(base).parts
                yield Name(host, ns, model, tag), p

    def find(self, name: Name) -> tuple[Name, Path] | None:
        """getExistingName: a case-insensitive match of a local model."""
        for n, p in self.manifests():
            if n.key() == name.key():
                return n, p
        return None

    def load(self, name: Name) -> dict[str, Any] | None:
        found = self.find(name)
        if not found:
            return None
        n, p = found
        raw = p.read_bytes()
        manifest = json.loads(raw)
        model = next((layer for layer in manifest.get("layers", []) if layer.get("mediaType") == MODEL_MEDIA), None)
        texts = {}
        for kind, media in LAYER_MEDIA.items():
            layer = next((la for la in manifest.get("layers", []) if la.get("mediaType") == media), None)
            if layer:
                texts[kind] = self.blob_path(layer["digest"]).read_text()
        config = {}
        if manifest.get("config", {}).get("digest"):
            try:
                config = json.loads(self.blob_path(manifest["config"]["digest"]).read_text())
            except (OSError, ValueError):
                config = {}
        return {"name": n, "path": p, "manifest": manifest, "digest": hashlib.sha256(raw).hexdigest(),
                "model_layer": model, "blob": self.blob_path(model["digest"]) if model else None,
                "config": config, "texts": texts, "mtime": p.stat().st_mtime,
                "size": sum(la.get("size", 0) for la in manifest.get("layers", [])) + manifest.get("config", {}).get("size", 0)}

    def write_blob_bytes(self, data: bytes) -> tuple[str, int]:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        path = self.blob_path(digest)
        if not path.exists():
            self.blobs.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(path.name + f"-partial-{os.getpid()}-{threading.get_ident()}")
            tmp.write_bytes(data)
            os.replace(tmp, path)
        return digest, len(data)

    def copy_blob(self, src: Path, digest: str, progress: Callable[[int], None]) -> bool:
        """Copy ``src`` to the blob ``digest`` (verified); False when it was there already."""
        path = self.blob_path(digest)
        if path.exists():
            return False
        self.blobs.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + "-partial")
        h = hashlib.sha256()
        done = 0
        with open(src, "rb") as fi, open(tmp, "wb") as fo:
            while chunk := fi.read(8 << 20):
                fo.write(chunk)
                h.update(chunk)
                done += len(chunk)
                progress(done)
        if "sha256:" + h.hexdigest() != digest:
            tmp.unlink(missing_ok=True)
            raise StoreError("digest mismatch")
        os.replace(tmp, path)
        return True

    def write_manifest(self, name: Name, layers: list[dict[str, Any]], config: dict[str, Any]) -> None:
        cdigest, csize = self.write_blob_bytes(json.dumps(config, separators=(",", ":")).encode())
        manifest = {"schemaVersion": 2, "mediaType": MANIFEST_MEDIA,
                    "config": {"mediaType": CONFIG_MEDIA, "digest": cdigest, "size": csize}, "layers": layers}
        path = name.manifest_path(self.root)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{threading.get_ident()}")
        tmp.write_text(json.dumps(manifest, separators=(",", ":")))
        os.replace(tmp, path)

    def prune(self) -> tuple[int, int]:
        """images.go PruneLayers at start-up: (blobs, removed unreferenced blobs)."""
        if not self.blobs.is_dir():
            return 0, 0
        used = set()
        for _, p in self.manifests():
            try:
                m = json.loads(p.read_text())
            except (OSError, ValueError):
                continue
            used.update(la["digest"].replace(":", "-") for la in [*m.get("layers", []), m.get("config", {})]
                        if la.get("digest"))
        blobs = [b for b in self.blobs.iterdir() if re.fullmatch(r"sha256-[0-9a-f]{64}", b.name)]
        removed = 0
        if not os.environ.get("OLLAMA_NOPRUNE"):
            for b in blobs:
                if b.name not in used:
                    b.unlink(missing_ok=True)
                    removed += 1
        return len(blobs), removed


def registry_lookup(name: Name) -> Path:
    """The GGUF the stand-in registry has for ``name``; StoreError as a failed pull."""
    reg = os.environ.get(REGISTRY_ENV)
    if not reg:
        raise StoreError(f'pull model manifest: Get "https://{name.host}/v2/{name.namespace}/{name.model}/manifests/'
                         f'{name.tag}": dial tcp: lookup {name.host}: no such host')
    root = Path(reg)
    try:
        table = json.loads((root / "registry.json").read_text())
    except (OSError, ValueError) as exc:
        raise StoreError(f"pull model manifest: {exc}") from None
    for key, file in table.items():
        n = Name.parse(key)
        if n and n.key() == name.key():
            path = Path(file) if os.path.isabs(file) else root / file
            if not path.is_file():
                slog("WARN", "standin", "registry entry names a missing file", model=key, file=str(path))
                break
            return path
    raise StoreError("pull model manifest: file does not exist")


# --------------------------------------------------------------------------- inference


class Runner:
    """One loaded model (llama.cpp), serving one request at a time."""

    def __init__(self, blob: Path, n_ctx: int, n_threads: int, seed: int):
        import llama_cpp

        self.llama_cpp = llama_cpp
        t0 = time.perf_counter_ns()
        self.llm = llama_cpp.Llama(model_path=str(blob), n_ctx=n_ctx, n_threads=n_threads,
                                   n_threads_batch=n_threads, n_gpu_layers=0, seed=seed if seed >= 0 else
                                   random.randrange(2**31), logits_all=False, verbose=False)
        self.load_ns = time.perf_counter_ns() - t0
        self.key = (str(blob), n_ctx, n_threads)
        self.n_ctx = n_ctx
        self.lock = threading.Lock()
        self.expires = float("inf")
        self.size = blob.stat().st_size

    def generate(self, prompt: str, opts: dict[str, Any], emit: Callable[[str], bool]) -> dict[str, Any]:
        """Evaluate ``prompt`` and generate; ``emit(text)`` gets each decodable piece and
        returns False to stop (client gone). Returns counts and nanosecond timings."""
        llm = self.llm
        tokens = llm.tokenize(prompt.encode(), add_bos=True, special=True)
        if len(tokens) >= self.n_ctx:
            slog("WARN", "runner.go:131", "truncating input prompt", limit=self.n_ctx, prompt=len(tokens),
                 keep=1, new=self.n_ctx // 2)
            tokens = tokens[:1] + tokens[-(self.n_ctx // 2 - 1):]
        num_predict = int(opts.get("num_predict", -1) if opts.get("num_predict") is not None else -1)
        temperature = float(opts.get("temperature", 0.8) if opts.get("temperature") is not None else 0.8)
        stops = opts.get("stop") or []
        stops = [stops] if isinstance(stops, str) else list(stops)
        if "seed" in opts and opts["seed"] is not None and int(opts["seed"]) >= 0:
            llm.set_seed(int(opts["seed"]))
        t0 = time.perf_counter_ns()
        llm.reset()
        llm.eval(tokens)
        prompt_ns = time.perf_counter_ns() - t0
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        vocab = llm._model.vocab
        n, eval_ns, reason, text = 0, 0, "stop", ""
        generated: list[int] = []
        while True:
            if 0 <= num_predict <= n:
                reason = "length"
                break
            if llm.n_tokens >= self.n_ctx:
                reason = "length"
                break
            t = time.perf_counter_ns()
            if temperature <= 0:
                tok = llm.sample(temp=0.0, repeat_penalty=1.0)
            else:
                tok = llm.sample(temp=temperature, top_k=int(opts.get("top_k") or 40),
                                 top_p=float(opts.get("top_p") or 0.9), min_p=float(opts.get("min_p") or 0.0),
                                 repeat_penalty=1.0)
            if self.llama_cpp.llama_vocab_is_eog(vocab, tok):
                eval_ns += time.perf_counter_ns() - t
                break
            llm.eval([tok])
            eval_ns += time.perf_counter_ns() - t
            n += 1
            generated.append(tok)
            # a piece holding an incomplete UTF-8 sequence waits for the next one
            piece = decoder.decode(llm.detokenize([tok], prev_tokens=None, special=False))
            hits = [i for i in ((text + piece).find(x) for x in stops if x) if i >= 0]
            if hits:  # a stop string: the text up to it, then done ("stop")
                piece = (text + piece)[len(text):min(hits)]
                if piece and not emit(piece):
                    reason = "cancelled"
                break
            if piece:
                text += piece
                if not emit(piece):
                    reason = "cancelled"
                    break
        tail = decoder.decode(b"", final=True)
        if tail and reason not in ("cancelled",) and not stops:
            emit(tail)
        return {"prompt_eval_count": len(tokens), "prompt_eval_duration": prompt_ns, "eval_count": n,
                "eval_duration": eval_ns, "done_reason": reason, "context": tokens + generated}


class Scheduler:
    """Loads models on first use and keeps them (server/sched.go, much simplified)."""

    def __init__(self, store: Store):
        self.store = store
        self.runners: dict[str, Runner] = {}
        self.lock = threading.Lock()
        threading.Thread(target=self._expire, daemon=True).start()

    def get(self, model: dict[str, Any], opts: dict[str, Any], keep_alive: Any) -> tuple[Runner, bool]:
        n_ctx = int(opts.get("num_ctx") or os.environ.get("OLLAMA_CONTEXT_LENGTH") or 4096)
        threads = int(opts.get("num_thread") or 0) or (os.cpu_count() or 1)
        seed = int(opts.get("seed", -1) if opts.get("seed") is not None else -1)
        key = str(model["blob"])
        with self.lock:
            runner = self.runners.get(key)
            loaded = False
            if runner is None or runner.key != (key, n_ctx, threads):
                if runner is not None:  # different runner options: reload (sched.go needsReload)
                    with runner.lock:
                        del self.runners[key]
                        del runner
                slog("INFO", "server.go:135", "starting llama server (scalesweep stand-in: llama_cpp.Llama)",
                     model=key, ctx=n_ctx, threads=threads)
                runner = Runner(model["blob"], n_ctx, threads, seed)
                slog("INFO", "server.go:637", f"llama runner started in {runner.load_ns / 1e9:.2f} seconds")
                self.runners[key] = runner
                loaded = True
            ka = parse_duration(keep_alive, keep_alive_default())
            runner.expires = time.time() + ka if ka != float("inf") else float("inf")
        return runner, loaded

    def unload(self, model: dict[str, Any]) -> None:
        with self.lock:
            runner = self.runners.pop(str(model["blob"]), None)
        if runner is not None:
            with runner.lock:
                del runner

    def loaded(self) -> list[tuple[str, Runner]]:
        with self.lock:
            return list(self.runners.items())

    def _expire(self) -> None:
        while True:
            time.sleep(1.0)
            now = time.time()
            with self.lock:
                for key, r in list(self.runners.items()):
                    if r.expires <= now and r.lock.acquire(blocking=False):
                        try:
                            del self.runners[key]
                        finally:
                            r.lock.release()


def render_prompt(model: dict[str, Any], prompt: str, system: str | None, raw: bool) -> str:
    """The model's template applied to a generate prompt (only {{ .System }} and
    {{ .Prompt }} are understood; anything else: the prompt as it is)."""
    if raw:
        return prompt
    tmpl = model["texts"].get("template") or DEFAULT_TEMPLATE
    if re.sub(r"{{-?\s*\.(Prompt|System)\s*-?}}", "", tmpl).count("{{"):
        return prompt
    return re.sub(r"{{-?\s*\.System\s*-?}}", system or model["texts"].get("system", ""),
                  re.sub(r"{{-?\s*\.Prompt\s*-?}}", prompt, tmpl))


def chat_prompt(model: dict[str, Any], messages: list[dict[str, Any]]) -> str:
    """The chat rendered with a {{ .Prompt }}-only template: the user turns, in order."""
    system = "\n".join(m.get("content", "") for m in messages if m.get("role") == "system")
    users = [m.get("content", "") for m in messages if m.get("role") == "user"]
    return "".join(render_prompt(model, u, system, False) for u in users)


def model_details(model: dict[str, Any]) -> dict[str, Any]:
    c = model["config"]
    return {"parent_model": "", "format": c.get("model_format", "gguf"), "family": c.get("model_family", ""),
            "families": c.get("model_families") or ([c["model_family"]] if c.get("model_family") else None),
            "parameter_size": c.get("model_type", ""), "quantization_level": c.get("file_type", "")}


# --------------------------------------------------------------------------- the server


class HTTPError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, addr: tuple[str, int], store: Store):
        self.address_family = socket.AF_INET6 if ":" in addr[0] else socket.AF_INET
        super().__init__(addr, Handler)
        self.store = store
        self.sched = Scheduler(store)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Server

    # ---- plumbing

    def log_message(self, fmt: str, *args: Any) -> None:  # Gin's line instead (gin_log)
        pass

    def version_string(self) -> str:
        return ""

    def send_header(self, keyword: str, value: str) -> None:
        if keyword.lower() == "server":
            return  # Go's server sends none
        super().send_header(keyword, value)

    def gin_log(self, status: int) -> None:
        ns = time.perf_counter_ns() - self.t0
        now = time.strftime("%Y/%m/%d - %H:%M:%S")
        line = (f"[GIN] {now} | {status:3d} | {go_duration(ns):>13} | {self.client_address[0]:>15} | "
                f"{self.command:<7} {json.dumps(urllib.parse.urlsplit(self.path).path)}\n")
        sys.stdout.write(line)
        sys.stdout.flush()

    def body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = bytearray()
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    return bytes(out)
                out += self.rfile.read(size)
                self.rfile.readline()
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def json_body(self) -> dict[str, Any]:
        raw = self.body()
        if not raw.strip():
            raise HTTPError(400, "missing request body")
        try:
            obj = json.loads(raw)
        except ValueError as exc:
            raise HTTPError(400, str(exc)) from None
        if not isinstance(obj, dict):
            raise HTTPError(400, "json: cannot unmarshal into Go value of type api.Request")
        return obj

    def reply(self, status: int, obj: Any = None, text: str | None = None, ctype: str | None = None) -> None:
        data = (text if text is not None else json.dumps(obj, ensure_ascii=False, separators=(",", ":"))).encode() \
            if (obj is not None or text is not None) else b""
        self.send_response(status)
        self.send_header("Content-Type", ctype or ("text/plain; charset=utf-8" if text is not None
                                                   else "application/json; charset=utf-8"))
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)
        self.status = status

    def start_stream(self, ctype: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.status = 200

    def chunk(self, data: str) -> bool:
        """Write one chunk of a streamed response; False when the client is gone."""
        raw = data.encode()
        try:
            self.wfile.write(f"{len(raw):x}\r\n".encode() + raw + b"\r\n")
            self.wfile.flush()
            return True
        except (BrokenPipeError, ConnectionResetError, OSError):
            self.close_connection = True
            return False

    def end_stream(self) -> None:
        try:
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except OSError:
            self.close_connection = True

    def handle_one_request(self) -> None:
        self.t0 = time.perf_counter_ns()
        self.status = 0
        super().handle_one_request()

    def route(self) -> None:
        self.t0 = getattr(self, "t0", time.perf_counter_ns())
        path = urllib.parse.urlsplit(self.path).path
        routes: dict[tuple[str, str], Callable[[], None]] = {
            ("GET", "/"): lambda: self.reply(200, text="Ollama is running"),
            ("HEAD", "/"): lambda: self.reply(200, text="Ollama is running"),
            ("GET", "/api/version"): lambda: self.reply(200, {"version": VERSION}),
            ("HEAD", "/api/version"): lambda: self.reply(200, {"version": VERSION}),
            ("GET", "/api/tags"): self.api_tags, ("HEAD", "/api/tags"): self.api_tags,
            ("GET", "/api/ps"): self.api_ps,
            ("POST", "/api/pull"): self.api_pull,
            ("POST", "/api/show"): self.api_show,
            ("POST", "/api/create"): self.api_create,
            ("DELETE", "/api/delete"): self.api_delete,
            ("POST", "/api/generate"): lambda: self.api_generate(self.json_body()),
            ("POST", "/api/chat"): lambda: self.api_chat(self.json_body()),
            ("GET", "/v1/models"): self.v1_models,
            ("POST", "/v1/completions"): self.v1_completions,
            ("POST", "/v1/chat/completions"): self.v1_chat,
        }
        handler = routes.get((self.command, path))
        if handler is None and path.startswith("/api/blobs/"):
            handler = {"HEAD": self.api_blob_head, "POST": self.api_blob_post}.get(self.command)
        if handler is None and path.startswith("/v1/models/") and self.command == "GET":
            handler = self.v1_model
        if handler is None and path in ("/api/embed", "/api/embeddings", "/api/push", "/api/copy",
                                        "/v1/embeddings"):
            def handler() -> None:
                self.reply(501, {"error": f"{path} is not supported by the scalesweep stand-in"})
        try:
            if handler is None:
                if any(p == path for (_, p) in routes):
                    self.reply(405, text="405 method not allowed")
                else:
                    self.reply(404, text="404 page not found")
            else:
                handler()
        except HTTPError as exc:
            if path.startswith("/v1/"):
                etype = {400: "invalid_request_error", 404: "not_found_error"}.get(exc.status, "api_error")
                self.reply(exc.status, {"error": {"message": exc.message, "type": etype, "param": None,
                                                  "code": None}})
            else:
                self.reply(exc.status, {"error": exc.message})
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        finally:
            self.gin_log(self.status or 500)

    do_GET = do_HEAD = do_POST = do_DELETE = do_PUT = route

    # ---- models

    def model_for(self, name_str: str, not_found: str) -> dict[str, Any]:
        name = Name.parse(name_str)
        if name is None:
            raise HTTPError(404 if not_found != "chat" else 400,
                            f"model '{name_str}' not found" if not_found != "chat" else "invalid model name")
        model = self.server.store.load(name)
        if model is None or model["blob"] is None:
            if not_found == "chat":
                raise HTTPError(404, f'model "{name_str}" not found, try pulling it first')
            raise HTTPError(404, f"model '{name_str}' not found")
        return model

    def api_tags(self) -> None:
        models = []
        for name, _ in self.server.store.manifests():
            m = self.server.store.load(name)
            if m is None:
                continue
            models.append({"name": m["name"].shortest(), "model": m["name"].shortest(),
                           "modified_at": go_time(m["mtime"]), "size": m["size"], "digest": m["digest"],
                           "details": model_details(m)})
        models.sort(key=lambda x: x["modified_at"], reverse=True)
        self.reply(200, {"models": models})

    def api_ps(self) -> None:
        out = []
        for key, r in self.server.sched.loaded():
            for name, _ in self.server.store.manifests():
                m = self.server.store.load(name)
                if m and str(m["blob"]) == key:
                    out.append({"name": m["name"].shortest(), "model": m["name"].shortest(), "size": r.size,
                                "digest": m["digest"], "details": model_details(m),
                                "expires_at": go_time(r.expires) if r.expires != float("inf")
                                else "2318-01-01T00:00:00Z", "size_vram": 0})
                    break
        self.reply(200, {"models": out})

    def api_show(self) -> None:
        req = self.json_body()
        name = req.get("model") or req.get("name") or ""
        model = self.model_for(name, "show")
        info = read_gguf(model["blob"])
        verbose = bool(req.get("verbose"))
        model_info = {k: (v if not isinstance(v, list) or verbose else None) for k, v in sorted(info["kv"].items())}
        params = model["texts"].get("params")
        params_text = ""
        if params:
            for k, v in json.loads(params).items():
                for item in v if isinstance(v, list) else [v]:
                    params_text += f"{k:<30} {json.dumps(item) if isinstance(item, str) else item}\n"
        template = model["texts"].get("template") or DEFAULT_TEMPLATE
        modelfile = (f'# Modelfile generated by "ollama show"\n# To build a new Modelfile based on this, '
                     f'replace FROM with:\n# FROM {model["name"].shortest()}\n\nFROM {model["blob"]}\n'
                     f'TEMPLATE {template}\n')
        resp: dict[str, Any] = {"modelfile": modelfile, "parameters": params_text.rstrip("\n") or None,
                                "template": template, "system": model["texts"].get("system") or None,
                                "details": model_details(model), "model_info": model_info,
                                "capabilities": ["completion"], "modified_at": go_time(model["mtime"])}
        if verbose:
            resp["tensors"] = [{"name": n, "type": TENSOR_TYPES.get(t, str(t)), "shape": d}
                               for n, d, t in info["tensors"]]
        self.reply(200, {k: v for k, v in resp.items() if v is not None})

    def api_delete(self) -> None:
        req = self.json_body()
        name = Name.parse(req.get("model") or req.get("name") or "")
        found = self.server.store.find(name) if name else None
        if not found:
            raise HTTPError(404, f"model '{req.get('model') or req.get('name')}' not found")
        found[1].unlink()
        self.reply(200)

    def api_blob_head(self) -> None:
        digest = urllib.parse.urlsplit(self.path).path.rsplit("/", 1)[-1]
        try:
            exists = self.server.store.blob_path(digest).exists()
        except StoreError as exc:
            raise HTTPError(400, str(exc)) from None
        if not exists:
            raise HTTPError(404, f'blob "{digest}" not found')
        self.reply(200)

    def api_blob_post(self) -> None:
        digest = urllib.parse.urlsplit(self.path).path.rsplit("/", 1)[-1]
        store = self.server.store
        try:
            path = store.blob_path(digest)
        except StoreError as exc:
            raise HTTPError(400, str(exc)) from None
        if path.exists():
            self.body()
            self.reply(200)
            return
        store.blobs.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + f"-partial-{threading.get_ident()}")
        h = hashlib.sha256()
        n = int(self.headers.get("Content-Length") or 0)
        with open(tmp, "wb") as fo:
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                data = self.body()
                fo.write(data)
                h.update(data)
            else:
                left = n
                while left:
                    chunk = self.rfile.read(min(left, 8 << 20))
                    if not chunk:
                        break
                    fo.write(chunk)
                    h.update(chunk)
                    left -= len(chunk)
        got = "sha256:" + h.hexdigest()
        if got != digest.replace("-", ":", 1):
            tmp.unlink(missing_ok=True)
            raise HTTPError(400, f'digest mismatch, expected "{digest}", got "{got}"')
        os.replace(tmp, path)
        self.reply(201)

    def progress_stream(self, req: dict[str, Any], work: Callable[[Callable[[dict[str, Any]], None]], None]) -> None:
        """streamResponse / waitForStream: NDJSON progress, or the last status."""
        stream = req.get("stream") is not False
        last: dict[str, Any] = {}
        if stream:
            self.start_stream("application/x-ndjson")

        def fn(obj: dict[str, Any]) -> None:
            nonlocal last
            last = obj
            if stream:
                self.chunk(json.dumps(obj, separators=(",", ":")) + "\n")

        try:
            work(fn)
        except StoreError as exc:
            if stream:
                self.chunk(json.dumps({"error": str(exc)}) + "\n")
            else:
                raise HTTPError(500, str(exc)) from None
        if stream:
            self.end_stream()
        else:
            self.reply(200, last)

    def api_pull(self) -> None:
        req = self.json_body()
        raw = req.get("model") or req.get("name") or ""
        name = Name.parse(raw)
        if name is None:
            raise HTTPError(400, "invalid model name")
        existing = self.server.store.find(name)
        name = existing[0] if existing else name
        self.progress_stream(req, lambda fn: pull_model(self.server.store, name, fn))

    def api_create(self) -> None:
        req = self.json_body()
        name = Name.parse(req.get("model") or req.get("name") or "")
        if name is None:
            raise HTTPError(400, "invalid model name")
        if not req.get("from") and not req.get("files"):
            raise HTTPError(400, "neither 'from' or 'files' was specified")
        self.progress_stream(req, lambda fn: create_model(self.server.store, name, req, fn))

    # ---- inference

    def run_model(self, model: dict[str, Any], req: dict[str, Any], prompt: str | None,
                  on_piece: Callable[[str], bool]) -> dict[str, Any]:
        t_start = self.t0
        opts = dict(req.get("options") or {})
        runner, _ = self.server.sched.get(model, opts, req.get("keep_alive"))
        t_loaded = time.perf_counter_ns()
        stats: dict[str, Any] = {"load_duration": t_loaded - t_start}
        if prompt is None:
            stats["done_reason"] = "load"
            return stats
        with runner.lock:
            stats.update(runner.generate(prompt, opts, on_piece))
        stats["total_duration"] = time.perf_counter_ns() - t_start
        if parse_duration(req.get("keep_alive"), 1.0) == 0:
            self.server.sched.unload(model)
        return stats

    def api_generate(self, req: dict[str, Any], writer: Any = None) -> None:
        name = req.get("model", "")
        model = self.model_for(name, "generate")
        prompt = req.get("prompt") or ""
        if not prompt and req.get("keep_alive") is not None and parse_duration(req["keep_alive"], 1.0) == 0:
            self.server.sched.unload(model)
            self.reply(200, {"model": name, "created_at": go_time(utc=True), "response": "", "done": True,
                             "done_reason": "unload"})
            return
        stream = req.get("stream") is not False
        if not prompt:  # only load the model (routes.go: c.JSON, even when streaming)
            self.run_model(model, req, None, lambda _: True)
            self.reply(200, {"model": name, "created_at": go_time(utc=True), "response": "", "done": True,
                             "done_reason": "load"})
            return
        rendered = render_prompt(model, prompt, req.get("system"), bool(req.get("raw")))
        if writer is None:
            writer = NativeWriter(self, stream, "generate", name)
        stats = self.run_model(model, req, rendered, writer.piece)
        writer.finish(stats)

    def api_chat(self, req: dict[str, Any], writer: Any = None) -> None:
        name = req.get("model", "")
        model = self.model_for(name, "chat")
        messages = req.get("messages") or []
        stream = req.get("stream") is not False
        if not messages:  # only load the model
            self.run_model(model, req, None, lambda _: True)
            self.reply(200, {"model": name, "created_at": go_time(utc=True),
                             "message": {"role": "assistant", "content": ""}, "done_reason": "load", "done": True})
            return
        prompt = chat_prompt(model, messages)
        if writer is None:
            writer = NativeWriter(self, stream, "chat", name)
        stats = self.run_model(model, req, prompt, writer.piece)
        writer.finish(stats)

    def v1_models(self) -> None:
        data = []
        for name, _ in self.server.store.manifests():
            m = self.server.store.load(name)
            if m:
                data.append({"id": m["name"].shortest(), "object": "model", "created": int(m["mtime"]),
                             "owned_by": m["name"].namespace})
        self.reply(200, {"object": "list", "data": data})

    def v1_model(self) -> None:
        name = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path[len("/v1/models/"):])
        m = self.model_for(name, "show")
        self.reply(200, {"id": name, "object": "model", "created": int(m["mtime"]), "owned_by": m["name"].namespace})

    def _v1_options(self, r: dict[str, Any]) -> dict[str, Any]:
        """openai.go fromCompleteRequest/fromChatRequest: the options Ollama derives."""
        opts: dict[str, Any] = {}
        if r.get("stop") is not None:
            opts["stop"] = [r["stop"]] if isinstance(r["stop"], str) else r["stop"]
        if r.get("max_tokens") is not None:
            opts["num_predict"] = r["max_tokens"]
        opts["temperature"] = r["temperature"] if r.get("temperature") is not None else 1.0
        if r.get("seed") is not None:
            opts["seed"] = r["seed"]
        opts["top_p"] = r["top_p"] if r.get("top_p") else 1.0
        return opts

    def v1_completions(self) -> None:
        r = self.json_body()
        if not isinstance(r.get("prompt"), str):
            raise HTTPError(400, "prompt is not a string" if "prompt" in r else "prompt is required")
        req = {"model": r.get("model", ""), "prompt": r["prompt"], "options": self._v1_options(r),
               "stream": bool(r.get("stream"))}
        self.api_generate(req, OpenAIWriter(self, bool(r.get("stream")), "completion", r.get("model", ""),
                                            (r.get("stream_options") or {}).get("include_usage", False)))

    def v1_chat(self) -> None:
        r = self.json_body()
        messages = []
        for m in r.get("messages") or []:
            content = m.get("content")
            if isinstance(content, list):
                content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
            messages.append({"role": m.get("role"), "content": content or ""})
        req = {"model": r.get("model", ""), "messages": messages, "options": self._v1_options(r),
               "stream": bool(r.get("stream"))}
        self.api_chat(req, OpenAIWriter(self, bool(r.get("stream")), "chat", r.get("model", ""),
                                        (r.get("stream_options") or {}).get("include_usage", False)))


class NativeWriter:
    """/api/generate and /api/chat responses: NDJSON chunks or one object."""

    def __init__(self, h: Handler, stream: bool, kind: str, model: str):
        self.h, self.stream, self.kind, self.model = h, stream, kind, model
        self.started = False
        self.text: list[str] = []

    def _obj(self, text: str, done: bool) -> dict[str, Any]:
        obj: dict[str, Any] = {"model": self.model, "created_at": go_time(utc=True)}
        if self.kind == "generate":
            obj["response"] = text
        else:
            obj["message"] = {"role": "assistant", "content": text}
        obj["done"] = done
        return obj

    def piece(self, text: str) -> bool:
        if not self.stream:
            self.text.append(text)
            return True
        if not self.started:
            self.h.start_stream("application/x-ndjson")
            self.started = True
        return self.h.chunk(json.dumps(self._obj(text, False), ensure_ascii=False, separators=(",", ":")) + "\n")

    def finish(self, stats: dict[str, Any]) -> None:
        obj = self._obj("" if self.stream else "".join(self.text), True)
        if self.kind == "chat":  # ChatResponse: done_reason before done
            obj.pop("done")
            obj["done_reason"] = stats["done_reason"]
            obj["done"] = True
        else:
            obj["done_reason"] = stats["done_reason"]
            if "context" in stats:
                obj["context"] = stats["context"] + []
        for k in ("total_duration", "load_duration", "prompt_eval_count", "prompt_eval_duration", "eval_count",
                  "eval_duration"):
            if stats.get(k):
                obj[k] = stats[k]
        if stats["done_reason"] == "cancelled":
            return
        line = json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
        if self.stream:
            if not self.started:
                self.h.start_stream("application/x-ndjson")
                self.started = True
            self.h.chunk(line + "\n")
            self.h.end_stream()
        else:
            self.h.reply(200, obj)


class OpenAIWriter:
    """openai.go ChatWriter / CompleteWriter: SSE chunks, the usage chunk, [DONE]."""

    def __init__(self, h: Handler, stream: bool, kind: str, model: str, include_usage: bool):
        self.h, self.stream, self.kind, self.model, self.include_usage = h, stream, kind, model, include_usage
        self.id = f"chatcmpl-{random.randrange(999)}" if kind == "chat" else f"cmpl-{random.randrange(999)}"
        self.started = False
        self.text: list[str] = []

    def _chunk(self, text: str, finish: str | None) -> dict[str, Any]:
        if self.kind == "chat":
            return {"id": self.id, "object": "chat.completion.chunk", "created": int(time.time()),
                    "model": self.model, "system_fingerprint": "fp_ollama",
                    "choices": [{"index": 0, "delta": {"role": "assistant", "content": text},
                                 "finish_reason": finish}]}
        c = {"id": self.id, "object": "text_completion", "created": int(time.time()),
             "choices": [{"text": text, "index": 0, "finish_reason": finish}], "model": self.model,
             "system_fingerprint": "fp_ollama"}
        if self.include_usage:
            c["usage"] = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
        return c

    def _send(self, obj: dict[str, Any] | str) -> bool:
        if not self.started:
            self.h.start_stream("text/event-stream")
            self.started = True
        data = obj if isinstance(obj, str) else json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
        return self.h.chunk(f"data: {data}\n\n")

    def piece(self, text: str) -> bool:
        if not self.stream:
            self.text.append(text)
            return True
        return self._send(self._chunk(text, None))

    def finish(self, stats: dict[str, Any]) -> None:
        reason = stats["done_reason"]
        if reason == "cancelled":
            return
        usage = {"prompt_tokens": stats.get("prompt_eval_count", 0), "completion_tokens": stats.get("eval_count", 0),
                 "total_tokens": stats.get("prompt_eval_count", 0) + stats.get("eval_count", 0)}
        finish = reason if reason in ("stop", "length") else (reason or None)
        if not self.stream:
            if self.kind == "chat":
                obj = {"id": self.id, "object": "chat.completion", "created": int(time.time()), "model": self.model,
                       "system_fingerprint": "fp_ollama",
                       "choices": [{"index": 0, "message": {"role": "assistant", "content": "".join(self.text)},
                                    "finish_reason": finish}], "usage": usage}
            else:
                obj = {"id": self.id, "object": "text_completion", "created": int(time.time()), "model": self.model,
                       "system_fingerprint": "fp_ollama",
                       "choices": [{"text": "".join(self.text), "index": 0, "finish_reason": finish}],
                       "usage": usage}
            self.h.reply(200, obj)
            return
        last = self._chunk("", finish)
        self._send(last)
        if self.include_usage:
            last["usage"] = usage
            last["choices"] = []
            self._send(last)
        self._send("[DONE]")
        self.h.end_stream()


def pull_model(store: Store, name: Name, fn: Callable[[dict[str, Any]], None]) -> None:
    """images.go PullModel with the stand-in registry."""
    fn({"status": "pulling manifest"})
    src = registry_lookup(name)
    info = read_gguf(src)
    h = hashlib.sha256()
    with open(src, "rb") as f:
        while chunk := f.read(8 << 20):
            h.update(chunk)
    digest = "sha256:" + h.hexdigest()
    size = src.stat().st_size
    status = f"pulling {digest[7:19]}"
    fn({"status": status, "digest": digest, "total": size})
    last = [0.0]

    def progress(done: int) -> None:
        if time.monotonic() - last[0] > 0.1 or done == size:
            last[0] = time.monotonic()
            fn({"status": status, "digest": digest, "total": size, "completed": done})

    with store.lock:
        copied = store.copy_blob(src, digest, progress)
    if not copied:  # cache hit
        fn({"status": status, "digest": digest, "total": size, "completed": size})
    config = model_config(info, digest)
    cdigest = "sha256:" + hashlib.sha256(json.dumps(config, separators=(",", ":")).encode()).hexdigest()
    csize = len(json.dumps(config, separators=(",", ":")).encode())
    fn({"status": f"pulling {cdigest[7:19]}", "digest": cdigest, "total": csize, "completed": csize})
    fn({"status": "verifying sha256 digest"})
    fn({"status": "writing manifest"})
    store.write_manifest(name, [{"mediaType": MODEL_MEDIA, "digest": digest, "size": size}], config)
    fn({"status": "success"})


def create_model(store: Store, name: Name, req: dict[str, Any], fn: Callable[[dict[str, Any]], None]) -> None:
    """server/create.go: from uploaded GGUF blobs ("files") or an existing model ("from")."""
    layers: list[dict[str, Any]] = []
    texts: dict[str, str] = {}
    if req.get("from"):
        base_name = Name.parse(req["from"])
        if base_name is None:
            raise StoreError("invalid model name")
        base = store.load(base_name)
        if base is None:
            pull_model(store, base_name, fn)
            base = store.load(base_name)
        layers = [la for la in base["manifest"]["layers"]]
        config = base["config"]
        texts = dict(base["texts"])
    else:
        files = req["files"]
        gguf = None
        for fname, digest in files.items():
            try:
                path = store.blob_path(digest)
            except StoreError:
                raise StoreError(f"invalid digest format for {fname}") from None
            if not path.exists():
                raise StoreError(f"open {path}: no such file or directory")
            gguf = (path, digest)
        fn({"status": "parsing GGUF"})
        try:
            info = read_gguf(gguf[0])
        except ValueError as exc:
            raise StoreError(f"unsupported content type: {exc}") from None
        fn({"status": f"using existing layer {gguf[1]}"})
        layers = [{"mediaType": MODEL_MEDIA, "digest": gguf[1], "size": gguf[0].stat().st_size}]
        config = model_config(info, gguf[1])
    for kind in ("template", "system", "license"):
        if req.get(kind):
            texts[kind] = req[kind] if isinstance(req[kind], str) else "\n".join(req[kind])
    if req.get("parameters"):
        texts["params"] = json.dumps(req["parameters"], separators=(",", ":"))
    layers = [la for la in layers if la["mediaType"] == MODEL_MEDIA]
    for kind, text in texts.items():
        digest, size = store.write_blob_bytes(text.encode())
        fn({"status": f"creating new layer {digest}"})
        layers.append({"mediaType": LAYER_MEDIA[kind], "digest": digest, "size": size})
    fn({"status": "writing manifest"})
    store.write_manifest(name, layers, config)
    fn({"status": "success"})


# --------------------------------------------------------------------------- serve


def visible_gpus() -> list[dict[str, Any]]:
    """The node's GCDs that ROCR_VISIBLE_DEVICES, then HIP_VISIBLE_DEVICES (or
    CUDA_VISIBLE_DEVICES) and GPU_DEVICE_ORDINAL leave visible (ids or UUIDs; -1: none)."""
    gcds = list(gpu_smi.GCDS)
    for var in ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES" if "HIP_VISIBLE_DEVICES" in os.environ
                else "CUDA_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL"):
        spec = os.environ.get(var)
        if spec is None:
            continue
        keep = []
        for item in (s.strip() for s in spec.split(",") if s.strip()):
            if item.isdigit() and int(item) < len(gcds):
                keep.append(gcds[int(item)])
            elif item.startswith("GPU-"):
                keep += [g for g in gcds if gpu_smi.ollama_gpu_id(g) == item]
            else:
                break  # an invalid id ends the list (-1: none)
        for g in gcds:
            if g not in keep:
                slog("INFO", "amd_linux.go:332", "filtering out device per user request",
                     id=gpu_smi.ollama_gpu_id(g), visible_devices=spec)
        gcds = keep
    return gcds


def memory_info() -> tuple[int, int]:
    total = avail = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            k, v = line.split(":", 1)
            if k == "MemTotal":
                total = int(v.split()[0]) * 1024
            elif k == "MemAvailable":
                avail = int(v.split()[0]) * 1024
    except OSError:
        pass
    return total, avail


def serve() -> int:
    scheme, host, port = host_from_env()
    root = models_dir()
    root.mkdir(parents=True, exist_ok=True)
    store = Store(root)
    env_view = {k: os.environ.get(k, "") for k in (
        "CUDA_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL", "HIP_VISIBLE_DEVICES", "HSA_OVERRIDE_GFX_VERSION",
        "OLLAMA_CONTEXT_LENGTH", "OLLAMA_KEEP_ALIVE", "OLLAMA_MAX_LOADED_MODELS", "OLLAMA_NUM_PARALLEL",
        "OLLAMA_SCHED_SPREAD", "ROCR_VISIBLE_DEVICES")}
    env_view.update(OLLAMA_HOST=f"{scheme}://{host}:{port}", OLLAMA_MODELS=str(root),
                    OLLAMA_CONTEXT_LENGTH=os.environ.get("OLLAMA_CONTEXT_LENGTH") or "4096")
    slog("INFO", "routes.go:1234", "server config",
         env="map[" + " ".join(f"{k}:{v}" for k, v in sorted(env_view.items())) + "]")
    total, removed = store.prune()
    slog("INFO", "images.go:479", f"total blobs: {total}")
    slog("INFO", "images.go:486", f"total unused blobs removed: {removed}")
    try:
        httpd = Server((host or "0.0.0.0", port), store)
    except OSError as exc:
        sys.stderr.write(f"Error: listen tcp {host}:{port}: bind: {os.strerror(exc.errno).lower()}\n")
        return 1
    slog("INFO", "routes.go:1287", f"Listening on {host}:{httpd.server_address[1]} (version {VERSION})")
    slog("INFO", "gpu.go:217", "looking for compatible GPUs")
    gpus = visible_gpus()
    if not gpus:
        slog("INFO", "gpu.go:377", "no compatible GPUs were discovered")
        mt, ma = memory_info()
        slog("INFO", "types.go:130", "inference compute", id="0", library="cpu", variant="", compute="",
             driver="0.0", name="", total=human_bytes2(mt), available=human_bytes2(ma))
    for g in gpus:
        slog("INFO", "amd_linux.go:386", "amdgpu is supported", gpu=gpu_smi.ollama_gpu_id(g), gpu_type=gpu_smi.GFX)
    for g in gpus:
        slog("INFO", "types.go:130", "inference compute", id=gpu_smi.ollama_gpu_id(g), library="rocm", variant="",
             compute=gpu_smi.GFX, driver="6.8", name="1002:740c", total=human_bytes2(gpu_smi.VRAM_BYTES),
             available=human_bytes2(gpu_smi.VRAM_BYTES - gpu_smi.VRAM_USED_BYTES))
    slog("WARN", "standin", "scalesweep stand-in: models run on the CPU with llama.cpp; GPUs are only reported",
         gpus=len(gpus))
    log_invocation({"tool": "ollama", "argv": ["ollama", "serve"], "event": "start", "host": f"{host}:{port}",
                    "models": str(root), "gpus": [g["index"] for g in gpus], "exit_status": None})

    def stop(signum: int, _frame: Any) -> None:
        threading.Thread(target=httpd.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        httpd.serve_forever(poll_interval=0.2)
    finally:
        httpd.server_close()
    return 0


# --------------------------------------------------------------------------- the CLI


class CLIError(Exception):
    pass


def client_base() -> tuple[str, int]:
    _, host, port = host_from_env()
    if host in ("", "0.0.0.0", "::"):
        host = "127.0.0.1"
    return host, port


def request(method: str, path: str, body: Any = None, stream: bool = False,
            raw: bytes | Any = None, headers: dict[str, str] | None = None) -> http.client.HTTPResponse:
    host, port = client_base()
    conn = http.client.HTTPConnection(host, port, timeout=None)
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    hdrs = {"Content-Type": "application/json", "Accept": "application/x-ndjson" if stream else "application/json",
            "User-Agent": f"ollama/{VERSION} (amd64 linux) Go/go1.24.0"}
    hdrs.update(headers or {})
    conn.request(method, path, body=data, headers=hdrs)
    return conn.getresponse()


def heartbeat() -> None:
    """checkServerHeartbeat: HEAD /, refused -> the 'not responding' error."""
    try:
        r = request("HEAD", "/")
        r.read()
    except OSError:
        raise CLIError(NOT_RUNNING) from None


def stream_objects(r: http.client.HTTPResponse) -> Iterator[dict[str, Any]]:
    if r.status >= 400:
        raw = r.read()
        try:
            raise CLIError(json.loads(raw).get("error", raw.decode()))
        except ValueError:
            raise CLIError(raw.decode().strip()) from None
    for line in r:
        if line.strip():
            obj = json.loads(line)
            if obj.get("error"):
                raise CLIError(obj["error"])
            yield obj


def progress_bar(done: int, total: int) -> str:
    pct = int(done * 100 / total) if total else 100
    filled = pct * 16 // 100
    return f"{pct:3d}% ▕{'█' * filled}{' ' * (16 - filled)}▏ {human_bytes(total)}"


def cli_pull(name: str) -> int:
    heartbeat()
    shown: set[str] = set()
    last_status = ""
    for obj in stream_objects(request("POST", "/api/pull", {"model": name}, stream=True)):
        if obj.get("digest"):
            if not obj.get("completed"):
                continue
            label = f"pulling {obj['digest'][7:19]}:"
            if obj["completed"] >= obj.get("total", 0) and label not in shown:
                shown.add(label)
                sys.stderr.write(f"{label} {progress_bar(obj['completed'], obj.get('total', 0))}\n")
        elif obj.get("status") != last_status:
            last_status = obj["status"]
            sys.stderr.write(last_status + "\n")
    sys.stderr.flush()
    return 0


def cli_show(name: str, args: list[str]) -> int:
    heartbeat()
    r = request("POST", "/api/show", {"model": name, "verbose": "--verbose" in args or "-v" in args})
    raw = r.read()
    if r.status != 200:
        raise CLIError(json.loads(raw).get("error", raw.decode()))
    resp = json.loads(raw)
    for flag, key in (("--modelfile", "modelfile"), ("--parameters", "parameters"), ("--template", "template"),
                      ("--system", "system"), ("--license", "license")):
        if flag in args:
            print(resp.get(key, ""))
            return 0
    info = resp.get("model_info") or {}
    arch = info.get("general.architecture", resp["details"].get("family", ""))
    rows = [("architecture", arch), ("parameters", human_number(int(info.get("general.parameter_count", 0))))]
    if f"{arch}.context_length" in info:
        rows.append(("context length", str(info[f"{arch}.context_length"])))
    if f"{arch}.embedding_length" in info:
        rows.append(("embedding length", str(info[f"{arch}.embedding_length"])))
    rows.append(("quantization", resp["details"].get("quantization_level", "")))

    def table(header: str, items: list[tuple[str, ...]]) -> None:
        print(" ", header)
        widths = [max(len(r[i]) for r in items) for i in range(len(items[0]))]
        for r in items:
            print(("    " + "    ".join(c.ljust(w) for c, w in zip(r, widths))).rstrip())
        print()

    table("Model", rows)
    if resp.get("capabilities"):
        table("Capabilities", [(c,) for c in resp["capabilities"]])
    if resp.get("parameters"):
        table("Parameters", [tuple(line.split(None, 1)) for line in resp["parameters"].splitlines() if line.strip()])
    return 0


def cli_list() -> int:
    heartbeat()
    r = request("GET", "/api/tags")
    models = json.loads(r.read())["models"]
    rows = [("NAME", "ID", "SIZE", "MODIFIED")]
    for m in models:
        ts = parse_go_time(m["modified_at"])
        rows.append((m["name"], m["digest"][:12], human_bytes(m["size"]), human_time(ts)))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    for r in rows:
        print("    ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    return 0


def cli_ps() -> int:
    heartbeat()
    models = json.loads(request("GET", "/api/ps").read())["models"]
    rows = [("NAME", "ID", "SIZE", "PROCESSOR", "UNTIL")]
    for m in models:
        until = "Forever" if m["expires_at"].startswith("2318") else "Less than a minute from now"
        rows.append((m["name"], m["digest"][:12], human_bytes(m["size"]), "100% CPU", until))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    for r in rows:
        print("    ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    return 0


def parse_modelfile(text: str) -> list[tuple[str, str]]:
    """parser.ParseFile: INSTRUCTION args, with \"\"\" multi-line strings."""
    commands: list[tuple[str, str]] = []
    lines = text.splitlines()
    i = 0
    valid = ("from", "license", "template", "system", "adapter", "parameter", "message")
    while i < len(lines):
        line = lines[i].strip()
        i += 1
        if not line or line.startswith("#"):
            continue
        word, _, rest = line.partition(" ")
        cmd = word.lower()
        if cmd not in valid:
            raise CLIError(f'(line {i}): command must be one of "from", "license", "template", "system", '
                           f'"adapter", "parameter", or "message"')
        rest = rest.strip()
        if rest.startswith('"""'):
            body = rest[3:]
            while '"""' not in body and i < len(lines):
                body += "\n" + lines[i]
                i += 1
            rest = body.split('"""', 1)[0]
        elif len(rest) >= 2 and rest[0] == rest[-1] == '"':
            rest = rest[1:-1]
        if cmd == "parameter":
            k, _, v = rest.partition(" ")
            commands.append((k.strip(), v.strip()))
        else:
            commands.append(("model" if cmd == "from" else cmd, rest))
    return commands


def cli_create(name: str, modelfile: str | None) -> int:
    heartbeat()
    if modelfile is None:
        modelfile = "Modelfile"
        if not os.path.exists(modelfile):
            commands = [("model", ".")]
            base_dir = "."
        else:
            commands = parse_modelfile(Path(modelfile).read_text())
            base_dir = os.path.dirname(os.path.abspath(modelfile))
    else:
        if not os.path.exists(modelfile):
            raise CLIError("specified Modelfile wasn't found")
        commands = parse_modelfile(Path(modelfile).read_text())
        base_dir = os.path.dirname(os.path.abspath(modelfile))
    sys.stderr.write("gathering model components\n")
    req: dict[str, Any] = {"model": name}
    params: dict[str, Any] = {}
    for cmd, arg in commands:
        if cmd == "model":
            path = os.path.expanduser(arg)
            if not os.path.isabs(path):
                path = os.path.join(base_dir, path)
            if os.path.isfile(path):
                digest = upload_blob(Path(path))
                req.setdefault("files", {})[os.path.basename(path)] = digest
            else:
                req["from"] = arg
        elif cmd in ("template", "system"):
            req[cmd] = arg
        elif cmd == "license":
            req.setdefault("license", []).append(arg)
        elif cmd in ("adapter", "message"):
            raise CLIError(f"{cmd.upper()} is not supported by the scalesweep stand-in")
        else:
            value: Any = arg
            for conv in (int, float):
                try:
                    value = conv(arg)
                    break
                except ValueError:
                    continue
            if cmd == "stop":
                params.setdefault("stop", []).append(arg.strip('"'))
            else:
                params[cmd] = value
    if params:
        req["parameters"] = params
    last = ""
    for obj in stream_objects(request("POST", "/api/create", req, stream=True)):
        if obj.get("status") != last:
            last = obj["status"]
            sys.stderr.write(last + "\n")
    return 0


def upload_blob(path: Path) -> str:
    """createBlob: hash the file, HEAD /api/blobs/<digest>, POST it when missing."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(8 << 20):
            h.update(chunk)
    digest = "sha256:" + h.hexdigest()
    r = request("HEAD", f"/api/blobs/{digest}")
    r.read()
    if r.status == 404:
        size = path.stat().st_size
        with open(path, "rb") as f:
            r = request("POST", f"/api/blobs/{digest}", raw=f, headers={"Content-Length": str(size),
                                                                       "Content-Type": "application/octet-stream"})
            body = r.read()
        if r.status not in (200, 201):
            raise CLIError(json.loads(body).get("error", body.decode()) if body else f"HTTP {r.status}")
        sys.stderr.write(f"copying file {digest} 100%\n")
    return digest


def cli_rm(names: list[str]) -> int:
    heartbeat()
    for n in names:
        r = request("DELETE", "/api/delete", {"model": n})
        body = r.read()
        if r.status != 200:
            raise CLIError(json.loads(body).get("error", "")) if body else CLIError(f"HTTP {r.status}")
        print(f"deleted '{n}'")
    return 0


def cli_run(name: str, words: list[str]) -> int:
    heartbeat()
    prompt = " ".join(words) if words else (sys.stdin.read() if not sys.stdin.isatty() else "")
    if not prompt:
        raise CLIError("interactive 'ollama run' is not supported by the scalesweep stand-in")
    r = request("POST", "/api/generate", {"model": name, "prompt": prompt}, stream=True)
    if r.status == 404:
        cli_pull(name)
        r = request("POST", "/api/generate", {"model": name, "prompt": prompt}, stream=True)
    for obj in stream_objects(r):
        sys.stdout.write(obj.get("response", ""))
        sys.stdout.flush()
    print("\n")
    return 0


USAGE = """Large language model runner

Usage:
  ollama [flags]
  ollama [command]

Available Commands:
  serve       Start ollama
  create      Create a model from a Modelfile
  show        Show information for a model
  run         Run a model
  pull        Pull a model from a registry
  list        List models
  ps          List running models
  rm          Remove a model
  help        Help about any command

Flags:
  -h, --help      help for ollama
  -v, --version   Show version information

Use "ollama [command] --help" for more information about a command.
"""


def cli_version() -> int:
    """versionHandler: the server's version, warnings when it differs or is not there."""
    try:
        r = request("GET", "/api/version")
        server = json.loads(r.read()).get("version", "")
    except (OSError, ValueError):
        server = ""
        print("Warning: could not connect to a running Ollama instance")
    if server:
        print(f"ollama version is {server}")
    if server != VERSION:
        print(f"Warning: client version is {VERSION}")
    return 0


def main(argv: list[str]) -> int:
    args = argv[1:]
    rec: dict[str, Any] = {"tool": "ollama", "argv": ["ollama", *args]}
    code = 0
    cmd = args[0] if args else ""
    if cmd != "serve":
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    try:
        if not args or cmd in ("-h", "--help", "help"):
            print(USAGE, end="")
        elif cmd in ("-v", "--version"):
            code = cli_version()
        elif cmd == "serve":
            code = serve()
            rec["event"] = "exit"
        elif cmd in ("pull", "show", "rm", "run") and len(args) < 2:
            raise CLIError(f'accepts {"at least " if cmd == "rm" else ""}1 arg(s), received 0'
                           if cmd != "run" else "requires at least 1 arg(s), only received 0")
        elif cmd == "pull":
            code = cli_pull(args[1])
        elif cmd == "show":
            code = cli_show(args[1], args[2:])
        elif cmd in ("list", "ls"):
            code = cli_list()
        elif cmd == "ps":
            code = cli_ps()
        elif cmd == "rm":
            code = cli_rm(args[1:])
        elif cmd == "run":
            code = cli_run(args[1], args[2:])
        elif cmd == "create":
            rest = args[1:]
            mf = None
            name = None
            i = 0
            while i < len(rest):
                if rest[i] in ("-f", "--file"):
                    if i + 1 >= len(rest):
                        raise CLIError("flag needs an argument: 'f' in -f")
                    mf = rest[i + 1]
                    i += 2
                elif rest[i].startswith("--file="):
                    mf = rest[i].split("=", 1)[1]
                    i += 1
                elif rest[i].startswith("-"):
                    raise CLIError(f"unknown flag: {rest[i]}")
                else:
                    name = name or rest[i]
                    i += 1
            if not name:
                raise CLIError("accepts 1 arg(s), received 0")
            code = cli_create(name, mf)
        elif cmd in ("push", "cp", "stop", "signin", "signout"):
            sys.stderr.write(f"ollama (scalesweep stand-in): '{cmd}' is not supported by the stand-in\n")
            code = 2
        else:
            sys.stderr.write(f'Error: unknown command "{cmd}" for "ollama"\nRun \'ollama --help\' for usage.\n')
            code = 1
    except CLIError as exc:
        sys.stderr.write(f"Error: {exc}\n")
        code = 1
    except KeyboardInterrupt:
        code = 130
    finally:
        rec["exit_status"] = code
        log_invocation(rec)
    return code


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] != "ollama":
        sys.stderr.write("usage: ollama.py ollama ARGS... (see tests/standins)\n")
        sys.exit(2)
    sys.exit(main(sys.argv[1:]))
