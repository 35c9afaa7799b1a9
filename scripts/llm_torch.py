"""A plain PyTorch Llama read from a GGUF file: weights, tokenizer, greedy decoding.

What the ``torch`` engine of ``infer_llm.py`` runs in-process (no server). It reads a
Llama-architecture GGUF (the synthetic models of ``make_synthetic_llm.py``, or any
``llama`` GGUF with a gpt2-style byte-level BPE vocabulary and tensor types that
``gguf.quants`` can dequantize) and computes in float32:

* RMSNorm, rotary embedding in llama.cpp's convention for GGUF Llama tensors: the Q/K
  rows are stored permuted (``convert_hf_to_gguf`` / ``make_synthetic_llm._permute_qk``)
  so that the rotation acts on ADJACENT pairs ``(x[2i], x[2i+1])`` with angle
  ``pos * base^(-2i/d)`` (llama.cpp's ``LLAMA_ROPE_TYPE_NORM``);
* grouped-query attention (query head ``h`` reads KV head ``h // (heads / kv_heads)``),
  a preallocated KV cache of ``ctx`` positions, SwiGLU feed-forward;
* the tokenizer rebuilt from the GGUF's ``tokenizer.ggml.tokens``/``merges`` with the
  ``tokenizers`` library (GPT-2 pre-tokenizer, control tokens matched in the text as
  llama.cpp does with ``special=True``); pieces decoded byte-wise, control tokens as "";
* greedy sampling as llama-cpp-python's server does it at temperature 0: its default
  repeat penalty (1.1 over the last 64 generated tokens) then argmax, so the same model
  and prompt give the same tokens as the ``llamacpp`` engine.

Needs torch, numpy, gguf and tokenizers (and jinja2, a torch dependency, for the chat
template); none of them is imported by the stdlib-only HTTP engines.
"""

from __future__ import annotations

import codecs
from dataclasses import dataclass
from typing import Any, Generator

import numpy as np
import torch
import torch.nn.functional as F

# llama-cpp-python's server defaults (server/types.py repeat_penalty_field; Llama's
# last_n_tokens_size), applied before the greedy pick exactly as llama.cpp's penalties
# sampler does; Ollama's defaults are the same.
REPEAT_PENALTY = 1.1
REPEAT_LAST_N = 64


class GGUFError(ValueError):
    """The GGUF is not something this engine can run (architecture, tokenizer, tensors)."""


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character table (what byte-level BPE tokens are made of)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


@dataclass(frozen=True)
class LlamaConfig:
    vocab: int
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    ffn: int
    ctx_train: int
    rope_base: float
    rope_dim: int
    rms_eps: float

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


class GGUFTokenizer:
    """Byte-level BPE from GGUF metadata, tokenizing as llama.cpp does for ``gpt2``/``gpt-2``."""

    def __init__(self, fields: dict[str, Any]) -> None:
        from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers

        model, pre = fields.get("tokenizer.ggml.model"), fields.get("tokenizer.ggml.pre", "default")
        if model != "gpt2" or pre != "gpt-2":
            raise GGUFError(
                f"tokenizer {model!r} (pre-tokenizer {pre!r}) not supported: the torch engine reads "
                "gpt2-style byte-level BPE with the gpt-2 pre-tokenizer (what make_synthetic_llm.py writes)"
            )
        self.tokens: list[str] = fields["tokenizer.ggml.tokens"]
        types = fields.get("tokenizer.ggml.token_type") or [1] * len(self.tokens)
        merges = [tuple(m.split(" ", 1)) for m in fields.get("tokenizer.ggml.merges", [])]
        tok = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(self.tokens)}, merges=merges))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        # CONTROL (3) and USER_DEFINED (4) tokens are matched whole in the text (llama.cpp's
        # special=True); a CONTROL token's piece is empty when decoding.
        self.control = {i for i, t in enumerate(types) if t == 3}
        tok.add_special_tokens([AddedToken(self.tokens[i], special=True, normalized=False)
                                for i, t in enumerate(types) if t in (3, 4)])
        self._tok = tok
        self.bos_id = fields.get("tokenizer.ggml.bos_token_id")
        self.eos_id = fields.get("tokenizer.ggml.eos_token_id")
        self.add_bos = bool(fields.get("tokenizer.ggml.add_bos_token", True)) and self.bos_id is not None
        self.eog = {i for i in (self.eos_id, fields.get("tokenizer.ggml.eot_token_id")) if i is not None}
        self.chat_template: str | None = fields.get("tokenizer.chat_template")
        decode = {c: b for b, c in _bytes_to_unicode().items()}
        self._bytes = [
            b"" if i in self.control else
            bytes(decode[c] for c in t) if all(c in decode for c in t) else t.encode("utf-8")
            for i, t in enumerate(self.tokens)
        ]  # fmt: skip

    def encode(self, text: str, add_bos: bool) -> list[int]:
        ids = self._tok.encode(text, add_special_tokens=False).ids
        return ([self.bos_id] if add_bos and self.add_bos else []) + ids

    def piece(self, token: int) -> bytes:
        return self._bytes[token]

    def render_chat(self, messages: list[dict[str, Any]]) -> str:
        """The chat prompt as llama-cpp-python renders it (Jinja2ChatFormatter)."""
        if not self.chat_template:
            raise GGUFError("the GGUF has no tokenizer.chat_template: use --api completions")
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        def raise_exception(message: str) -> None:
            raise ValueError(message)

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
        return env.from_string(self.chat_template).render(
            messages=messages,
            bos_token=self.tokens[self.bos_id] if self.bos_id is not None else "",
            eos_token=self.tokens[self.eos_id] if self.eos_id is not None else "",
            add_generation_prompt=True,
            raise_exception=raise_exception,
        )


def _fields(reader: Any) -> dict[str, Any]:
    out = {}
    for name, field in reader.fields.items():
        if name.startswith("GGUF."):
            continue
        try:
            out[name] = field.contents()
        except Exception:  # a value type this gguf version cannot decode: not needed here
            pass
    return out


class GGUFLlama:
    """Llama weights (float32 torch tensors on ``device``) with a KV cache of ``ctx`` positions."""

    def __init__(self, path: str, ctx: int = 2048, device: str = "cpu") -> None:
        import gguf

        reader = gguf.GGUFReader(path)
        f = _fields(reader)
        arch = f.get("general.architecture")
        if arch != "llama":
            raise GGUFError(f"architecture {arch!r} not supported: the torch engine runs 'llama' GGUFs")
        a = arch + "."
        if f.get(a + "rope.scaling.type", "none") not in ("none", None) or any(t.name == "rope_freqs.weight" for t in reader.tensors):
            raise GGUFError("rope scaling is not supported by the torch engine")
        tensors = {t.name: t for t in reader.tensors}
        hidden, heads = int(f[a + "embedding_length"]), int(f[a + "attention.head_count"])
        self.cfg = LlamaConfig(
            vocab=int(tensors["token_embd.weight"].shape[1]),
            hidden=hidden,
            layers=int(f[a + "block_count"]),
            heads=heads,
            kv_heads=int(f.get(a + "attention.head_count_kv", heads)),
            ffn=int(f[a + "feed_forward_length"]),
            ctx_train=int(f.get(a + "context_length", ctx)),
            rope_base=float(f.get(a + "rope.freq_base", 10000.0)),
            rope_dim=int(f.get(a + "rope.dimension_count", hidden // heads)),
            rms_eps=float(f.get(a + "attention.layer_norm_rms_epsilon", 1e-5)),
        )
        if self.cfg.rope_dim != self.cfg.head_dim:
            raise GGUFError("partial rotary embedding is not supported by the torch engine")
        self.device = torch.device(device)
        self.ctx = ctx
        self.tokenizer = GGUFTokenizer(f)
        self.file_types = sorted({t.tensor_type.name for t in reader.tensors})

        def w(name: str) -> torch.Tensor:
            t = tensors[name]
            arr = np.array(gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float32)
            return torch.from_numpy(arr.reshape([int(d) for d in reversed(t.shape)])).to(self.device)

        self.tok_embd = w("token_embd.weight")
        self.output = w("output.weight") if "output.weight" in tensors else self.tok_embd  # tied
        self.out_norm = w("output_norm.weight")
        names = ("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_gate", "ffn_up", "ffn_down")
        self.blocks = [{n: w(f"blk.{i}.{n}.weight") for n in names} for i in range(self.cfg.layers)]
        c = self.cfg
        inv = c.rope_base ** (-torch.arange(0, c.rope_dim, 2, dtype=torch.float64) / c.rope_dim)
        ang = torch.arange(ctx, dtype=torch.float64)[:, None] * inv[None, :]  # [ctx, d/2]
        self.cos = ang.cos().float().to(self.device)
        self.sin = ang.sin().float().to(self.device)
        shape = (c.layers, c.kv_heads, ctx, c.head_dim)
        self.k_cache = torch.zeros(shape, device=self.device)
        self.v_cache = torch.zeros(shape, device=self.device)

    def _norm(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.cfg.rms_eps) * weight

    def _rope(self, x: torch.Tensor, pos: slice) -> torch.Tensor:
        """x: [heads, T, d]; rotate adjacent pairs (llama.cpp NORM mode on GGUF-permuted rows)."""
        x0, x1 = x[..., 0::2], x[..., 1::2]
        cos, sin = self.cos[pos], self.sin[pos]
        return torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1).flatten(-2)

    @torch.inference_mode()
    def forward(self, ids: list[int], start: int) -> torch.Tensor:
        """Logits of the LAST position after feeding ``ids`` at positions ``start...``."""
        c = self.cfg
        n = len(ids)
        if n > 1 and start > 0:
            raise ValueError("several new tokens are fed only at position 0 (the prompt)")
        pos = slice(start, start + n)
        x = self.tok_embd[torch.tensor(ids, device=self.device)]  # [T, hidden]
        for li, b in enumerate(self.blocks):
            h = self._norm(x, b["attn_norm"])
            q = (h @ b["attn_q"].T).view(n, c.heads, c.head_dim).transpose(0, 1)
            k = (h @ b["attn_k"].T).view(n, c.kv_heads, c.head_dim).transpose(0, 1)
            v = (h @ b["attn_v"].T).view(n, c.kv_heads, c.head_dim).transpose(0, 1)
            q, k = self._rope(q, pos), self._rope(k, pos)
            self.k_cache[li, :, pos] = k
            self.v_cache[li, :, pos] = v
            keys, values = self.k_cache[li, :, : start + n], self.v_cache[li, :, : start + n]
            if c.kv_heads != c.heads:
                keys = keys.repeat_interleave(c.heads // c.kv_heads, dim=0)
                values = values.repeat_interleave(c.heads // c.kv_heads, dim=0)
            # a prompt starting at 0 is causal; one new token sees every cached position
            att = F.scaled_dot_product_attention(q, keys, values, is_causal=n > 1)
            x = x + att.transpose(0, 1).reshape(n, c.hidden) @ b["attn_output"].T
            h = self._norm(x, b["ffn_norm"])
            x = x + (F.silu(h @ b["ffn_gate"].T) * (h @ b["ffn_up"].T)) @ b["ffn_down"].T
        return self._norm(x[-1], self.out_norm) @ self.output.T

    @torch.inference_mode()
    def generate(self, prompt_ids: list[int], max_tokens: int) -> Generator[tuple[int, str], None, str]:
        """Greedy tokens (as llama.cpp's server picks them at temperature 0) with their text
        pieces ("" while a UTF-8 character is incomplete); returns the finish reason:
        ``stop`` (an end-of-generation token) or ``length`` (``max_tokens``, or the end of
        the context)."""
        if not prompt_ids or len(prompt_ids) >= self.ctx:
            raise ValueError(f"prompt of {len(prompt_ids)} tokens does not fit the context ({self.ctx})")
        limit = min(max_tokens, self.ctx - len(prompt_ids))
        utf8 = codecs.getincrementaldecoder("utf-8")(errors="ignore")
        out: list[int] = []
        logits = self.forward(prompt_ids, 0)
        while True:
            if out and REPEAT_PENALTY != 1.0:
                seen = torch.tensor(sorted(set(out[-REPEAT_LAST_N:])), device=self.device)
                v = logits[seen]
                logits[seen] = torch.where(v > 0, v / REPEAT_PENALTY, v * REPEAT_PENALTY)
            token = int(torch.argmax(logits))
            if token in self.tokenizer.eog:
                return "stop"
            out.append(token)
            yield token, utf8.decode(self.tokenizer.piece(token))
            if len(out) >= limit:
                return "length"
            logits = self.forward([token], len(prompt_ids) + len(out) - 1)

