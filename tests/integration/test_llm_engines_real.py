"""LLM engines end to end through the driver: the torch and llama.cpp payloads write the
same texts (needs torch, numpy, gguf, tokenizers and llama_cpp). The rest, and the helpers
used here: tests/unit/test_llm_engines.py."""

from __future__ import annotations

import pytest

from test_llm_engines import _payload, needs_llama, needs_torch, tiny_f32  # noqa: F401  (fixture)


@needs_torch
@needs_llama
@pytest.mark.integration
@pytest.mark.parametrize("api", ["completions", "chat"])
def test_torch_and_llamacpp_payloads_write_the_same_texts(tiny_f32, tmp_path, api):
    """End to end through the driver: the same text, up to two quirks of llama-cpp-python's
    streaming (0.3.36), both seen on this random model whose tokens are often single bytes:
    it drops a multi-byte character assembled from several byte tokens (it decodes each
    token's piece alone), and when the text would end inside such a character it goes on
    generating (and streaming) up to 3 tokens past max_tokens (its multibyte_fix). The
    torch engine decodes the whole byte stream and stops at max_tokens; the token ids
    themselves are compared exactly in the test above."""
    model, _ = tiny_f32
    torch_rec, torch_out = _payload("torch", model, tmp_path, "--api", api)
    llama_rec, llama_out = _payload("llamacpp", model, tmp_path, "--api", api)
    assert torch_rec["completion_tokens_total"] == 4 * 24 and torch_rec["token_sources"] == ["usage"]
    # llama-cpp-python streams no usage: its tokens are the streamed pieces (one piece for
    # the byte tokens of a multi-byte character: at most what it generated), never max_tokens
    assert llama_rec["token_sources"] == ["chunks"]
    assert llama_rec["completion_tokens_total"] == sum(r["stream_pieces"] for r in llama_rec["requests"])
    assert 0 < llama_rec["completion_tokens_total"] <= 4 * (24 + 3)

    def ascii_only(text):
        return "".join(c for c in text if c.isascii())

    assert all(ascii_only(lo["text"]).startswith(ascii_only(to["text"])) for to, lo in zip(torch_out, llama_out))
    assert sum(lo["text"] == to["text"] for to, lo in zip(torch_out, llama_out)) >= 2
    assert {k for r in torch_rec["requests"] for k in r} <= {k for r in llama_rec["requests"] for k in r}
