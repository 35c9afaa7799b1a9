"""A local GGUF registered with a running Ollama server (``ollama create``)."""

from __future__ import annotations

import re
import subprocess
import urllib.parse
from pathlib import Path

from llm_payload.errors import PointError


def ollama_model_name(path: str) -> str:
    """The name a GGUF file is registered under (``scalesweep-<stem>``): the same on every
    node, so a ``--servers`` client asks for the name its servers registered."""
    stem = re.sub(r"[^a-z0-9._-]+", "-", Path(path).stem.lower()).strip("-._") or "model"
    return f"scalesweep-{stem}"


def ollama_create(ollama_bin: str, base: str, gguf: str, env: dict[str, str], log_path: Path, timeout: float) -> str:
    """Register a local GGUF with the running Ollama server; return the model name."""
    name = ollama_model_name(gguf)
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
