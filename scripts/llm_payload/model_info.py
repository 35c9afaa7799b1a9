"""What the metrics record says about the model: its card (``make_synthetic_llm.py``'s
sidecar), name, digest and size."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from llm_payload.errors import PointError


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


def model_record(model: str, card_path: str | None, hash_limit_gb: float) -> dict[str, Any]:
    """The record's ``model``: a file's path, the card's name (else the file's stem or the
    engine's model name), whether it is synthetic, its sha256 (the card's, else hashed
    below ``hash_limit_gb``), its parameters and the card itself."""
    card = model_card(model, card_path)
    is_file = os.path.isfile(model)
    model_info: dict[str, Any] = {
        "path": os.path.abspath(model) if is_file else None,
        "name": (card or {}).get("name") or (Path(model).stem if is_file else model),
        "synthetic": bool((card or {}).get("synthetic", False)),
        "sha256": (card or {}).get("sha256"),
        "n_params": (card or {}).get("n_params"),
    }
    if card:
        model_info["card"] = card
    if is_file and not model_info["sha256"]:
        model_info["sha256"] = sha256_file(model, int(hash_limit_gb * 2**30))
    return model_info
