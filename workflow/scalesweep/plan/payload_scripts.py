"""What the payload scripts of scripts/ declare, read where they declare it (their imports
are light: torch is imported only when they run): the LLM engines' registry
(scripts/llm_engines.py: what each engine serves, runs and drives), a model's context
length (a synthetic model's generator, a GGUF file's metadata: the payload's header
reader, scripts/llm_payload/gguf_header.py), the CNN's smallest image size. The config's
checks (scalesweep.plan.config) hold a workload to them before any job. They are imported
as the payloads import each other, with scripts/ on sys.path (an entry point's own
folder), so a payload module and the packages beside it (llm_payload/, cnn_payload/) load
alike."""

from __future__ import annotations

import functools
from pathlib import Path

from scalesweep.platform.code import PAYLOADS_DIR


@functools.cache
def payload_script(name: str):
    """A payload module of scripts/ by its import name (``infer_llm``, or a package's:
    ``llm_payload.gguf_header``), imported with scripts/ on sys.path (what it declares,
    read where it is declared: their imports are light, torch is imported only when they
    run)."""
    import importlib
    import sys

    payloads = str(PAYLOADS_DIR)
    if payloads not in sys.path:
        sys.path.append(payloads)
    return importlib.import_module(name)


def llm_engines():
    """The payload's engine registry (scripts/llm_engines.py: standard library only), so
    that what an engine can run is declared once, on its class."""
    return payload_script("llm_engines")


def model_context(model: dict, directory: str | Path = ".") -> tuple[int | None, str]:
    """(context length in tokens, where it comes from) of a config ``models.<name>``: a
    synthetic model's is its generator's (scripts/make_synthetic_llm.py, which
    stage_model runs with its defaults), a GGUF file's its metadata where the file is
    readable now (its path as stage_model reads it: '~' expanded, relative to the
    campaign ``directory``, where the staging job runs); None where unknown before
    staging (an Ollama registry model: the engine's own context bounds it)."""
    if model.get("source") == "synthetic":
        ctx = payload_script("make_synthetic_llm").SyntheticConfig().ctx
        return ctx, "its generator's context_length, scripts/make_synthetic_llm.py"
    if model.get("source") == "gguf-file" and model.get("path"):
        path = Path(directory, Path(model["path"]).expanduser())
        return payload_script("llm_payload.gguf_header").gguf_context_length(path), f"the context_length in {path}"
    return None, ""
