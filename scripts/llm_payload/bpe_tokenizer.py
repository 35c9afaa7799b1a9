"""The synthetic model's tokenizer (``make_synthetic_llm.py``): a byte-level BPE
(gpt2-style vocab + merges) trained on a corpus of text files, with exactly the model's
vocabulary size. Needs ``tokenizers`` (imported when it trains: build time only)."""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

SPECIAL_TOKENS = ("<|begin_of_text|>", "<|end_of_text|>", "<|pad|>")


def corpus_files(corpus: str | os.PathLike) -> list[Path]:
    """Regular files (not symlinks) of a corpus directory, sorted; or the file itself."""
    p = Path(corpus)
    if p.is_file():
        return [p]
    if not p.is_dir():
        raise FileNotFoundError(f"corpus {p} does not exist")
    files = sorted(f for f in p.iterdir() if f.is_file() and not f.is_symlink())
    if not files:
        raise FileNotFoundError(f"corpus {p} holds no regular files")
    return files


def corpus_sha256(files: list[Path]) -> str:
    h = hashlib.sha256()
    for f in files:
        h.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


@dataclass
class BPEVocab:
    tokens: list[str]
    token_types: list[int]
    merges: list[str]
    bos_id: int
    eos_id: int
    pad_id: int
    trained_vocab: int = 0
    train_seconds: float = 0.0
    extra: dict = field(default_factory=dict)


def train_tokenizer(files: list[Path], vocab_size: int) -> BPEVocab:
    """Byte-level BPE (GPT-2 pre-tokenizer) with exactly ``vocab_size`` entries."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    t0 = time.perf_counter()
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    texts = [f.read_text(encoding="utf-8", errors="replace") for f in files]
    tok.train_from_iterator(texts, trainer=trainer)
    seconds = time.perf_counter() - t0

    model = json.loads(tok.to_str())["model"]
    by_id = sorted(model["vocab"].items(), key=lambda kv: kv[1])
    if [i for _, i in by_id] != list(range(len(by_id))):
        raise RuntimeError("tokenizer ids are not contiguous")
    tokens = [t for t, _ in by_id]
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    trained = len(tokens)
    # Pad to the exact vocabulary size (a small corpus may yield fewer merges).
    while len(tokens) < vocab_size:
        tokens.append(f"<|reserved_{len(tokens)}|>")
    if len(tokens) > vocab_size:
        raise RuntimeError(f"tokenizer produced {len(tokens)} > {vocab_size} tokens")
    specials = {t: tokens.index(t) for t in SPECIAL_TOKENS}
    types = [1] * len(tokens)  # gguf.TokenType.NORMAL
    for i in list(specials.values()) + list(range(trained, vocab_size)):
        types[i] = 3  # gguf.TokenType.CONTROL
    return BPEVocab(
        tokens=tokens,
        token_types=types,
        merges=merges,
        bos_id=specials["<|begin_of_text|>"],
        eos_id=specials["<|end_of_text|>"],
        pad_id=specials["<|pad|>"],
        trained_vocab=trained,
        train_seconds=seconds,
    )
