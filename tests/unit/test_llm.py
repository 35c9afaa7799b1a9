"""LLM inference payload: GPU visibility, stream parsing, synthetic model, real llama.cpp runs.

Unit tests need nothing beyond the standard library. The model tests need numpy, gguf
and tokenizers; the llama.cpp tests need llama_cpp (the wheel from
tools/build_llama_wheel.sh); the logits comparison needs transformers and torch.
Each group skips with its reason when its packages are absent.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = REPO / "scripts"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


infer = _load("infer_llm")
from llm_payload import http_client, sse, stats  # noqa: E402  (scripts/ is on sys.path once infer_llm is loaded)

HAVE_LLAMA = importlib.util.find_spec("llama_cpp") is not None
HAVE_MAKER_DEPS = all(importlib.util.find_spec(m) is not None for m in ("numpy", "gguf", "tokenizers"))
needs_llama = pytest.mark.skipif(not HAVE_LLAMA, reason="llama_cpp not importable (run tools/build_llama_wheel.sh, then pip install it)")
needs_maker = pytest.mark.skipif(not HAVE_MAKER_DEPS, reason="numpy/gguf/tokenizers missing (pip install gguf==0.19.0 tokenizers)")


# --------------------------------------------------------------------------- gpu_visibility_env


@pytest.mark.parametrize("vendor", ["amd", "nvidia", "none"])
def test_zero_gpus_hides_every_vendor(vendor):
    env = infer.gpu_visibility_env(0, vendor)
    assert env == {"CUDA_VISIBLE_DEVICES": "-1", "ROCR_VISIBLE_DEVICES": "-1", "HIP_VISIBLE_DEVICES": "-1"}


@pytest.mark.parametrize("n", range(1, 9))
def test_amd_lists_first_n_devices(n):
    env = infer.gpu_visibility_env(n, "amd")
    ids = ",".join(str(i) for i in range(n))
    assert env == {"ROCR_VISIBLE_DEVICES": ids, "HIP_VISIBLE_DEVICES": ids}


@pytest.mark.parametrize("n", range(1, 9))
def test_nvidia_lists_first_n_devices(n):
    env = infer.gpu_visibility_env(n, "nvidia")
    assert env == {"CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in range(n)), "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}


@pytest.mark.parametrize("n", range(1, 9))
def test_vendor_none_refuses_gpus(n):
    with pytest.raises(ValueError, match="vendor 'none'"):
        infer.gpu_visibility_env(n, "none")


@pytest.mark.parametrize("bad", [-1, 1.5, "2", True])
def test_bad_counts_rejected(bad):
    with pytest.raises(ValueError):
        infer.gpu_visibility_env(bad, "amd")


def test_bad_vendor_rejected():
    with pytest.raises(ValueError, match="vendor"):
        infer.gpu_visibility_env(1, "intel")


def test_inherited_allocation_is_respected():
    # Slurm gave this job GCDs 4-7: 2 GPUs means the first two of those, HIP indexes 0..1.
    env = infer.gpu_visibility_env(2, "amd", {"ROCR_VISIBLE_DEVICES": "4,5,6,7"})
    assert env == {"ROCR_VISIBLE_DEVICES": "4,5", "HIP_VISIBLE_DEVICES": "0,1"}
    env = infer.gpu_visibility_env(1, "nvidia", {"CUDA_VISIBLE_DEVICES": "GPU-abc,GPU-def"})
    assert env["CUDA_VISIBLE_DEVICES"] == "GPU-abc"
    with pytest.raises(ValueError, match="allows only 2"):
        infer.gpu_visibility_env(3, "nvidia", {"CUDA_VISIBLE_DEVICES": "0,1"})
    # a hidden parent (-1) or an unrelated variable does not restrict
    assert infer.gpu_visibility_env(2, "amd", {"ROCR_VISIBLE_DEVICES": "-1"})["ROCR_VISIBLE_DEVICES"] == "0,1"
    assert infer.gpu_visibility_env(2, "amd", {"CUDA_VISIBLE_DEVICES": "3"})["ROCR_VISIBLE_DEVICES"] == "0,1"


def test_gpu_visibility_env_is_pure(monkeypatch):
    monkeypatch.setenv("ROCR_VISIBLE_DEVICES", "6,7")
    before = dict(os.environ)
    assert infer.gpu_visibility_env(2, "amd")["ROCR_VISIBLE_DEVICES"] == "0,1"  # no parent: env not read
    assert dict(os.environ) == before


# --------------------------------------------------------------------------- parse_sse_stream


def _sse(*objs):
    lines = []
    for o in objs:
        lines.append(o if isinstance(o, str) else "data: " + json.dumps(o))
        lines.append("")
    return lines


def test_openai_completions_stream_with_usage_and_done():
    lines = _sse(
        {"id": "c", "choices": [{"index": 0, "text": "Hel", "finish_reason": None}]},
        {"id": "c", "choices": [{"index": 0, "text": "lo", "finish_reason": None}]},
        {"id": "c", "choices": [{"index": 0, "text": "", "finish_reason": "length"}]},
        {"id": "c", "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}},
        "data: [DONE]",
    )
    events = list(sse.parse_sse_stream(lines))
    assert [e["type"] for e in events] == ["token", "token", "finish", "usage", "done"]
    assert "".join(e["text"] for e in events if e["type"] == "token") == "Hello"
    assert events[2]["reason"] == "length"
    assert events[3] == {"type": "usage", "prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}


def test_openai_chat_stream_role_chunk_is_not_a_token():
    lines = _sse(
        {"choices": [{"index": 0, "delta": {"role": "assistant"}, "finish_reason": None}]},
        {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]},
        {"choices": [{"index": 0, "delta": {"content": "Hi"}, "finish_reason": None}]},
        {"choices": [{"index": 0, "delta": {"content": " there"}, "finish_reason": None}]},
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
        "data: [DONE]",
    )
    events = list(sse.parse_sse_stream(lines))
    assert [e["type"] for e in events] == ["token", "token", "finish", "done"]
    assert [e["text"] for e in events[:2]] == ["Hi", " there"]


def test_keepalive_comments_fields_crlf_and_bytes():
    lines = [
        b": ping - 2024-01-01 00:00:00\r\n",
        b"event: message\r\n",
        b"id: 7\r\n",
        b"retry: 1000\r\n",
        ('data: {"choices": [{"index": 0, "text": "\u00e9t\u00e9", "finish_reason": null}]}\r\n').encode(),
        b"\r\n",
        b":\n",
        b"data:[DONE]\n",
    ]
    events = list(sse.parse_sse_stream(lines))
    assert events == [{"type": "token", "text": "\u00e9t\u00e9", "index": 0}, {"type": "done"}]


def test_empty_text_piece_counts_as_token():
    # llama-cpp-python may stream "" while it buffers an incomplete UTF-8 character.
    events = list(sse.parse_sse_stream(_sse({"choices": [{"index": 0, "text": "", "finish_reason": None}]})))
    assert events == [{"type": "token", "text": "", "index": 0}]


def test_error_object_and_garbage():
    events = list(sse.parse_sse_stream(["data: {\"error\": {\"message\": \"model not found\"}}", "data: {not json"]))
    assert events[0] == {"type": "error", "error": "model not found"}
    assert events[1]["type"] == "error" and "not JSON" in events[1]["error"]


def test_ollama_native_generate_ndjson_with_timings():
    lines = [
        json.dumps({"model": "m", "response": "The", "done": False}) + "\n",
        json.dumps({"model": "m", "response": " sky", "done": False}) + "\n",
        json.dumps(
            {
                "model": "m",
                "response": "",
                "done": True,
                "done_reason": "length",
                "total_duration": 5_000_000_000,
                "load_duration": 1_000_000,
                "prompt_eval_count": 12,
                "prompt_eval_duration": 20_000_000,
                "eval_count": 2,
                "eval_duration": 40_000_000,
            }
        )
        + "\n",
    ]
    events = list(sse.parse_sse_stream(lines))
    assert [e["type"] for e in events] == ["token", "token", "timings", "usage", "finish", "done"]
    t = events[2]
    assert t["source"] == "ollama" and t["eval_count"] == 2 and t["eval_duration"] == 40_000_000
    assert t["prompt_eval_duration"] == 20_000_000 and t["total_duration"] == 5_000_000_000
    assert events[3]["completion_tokens"] == 2 and events[3]["prompt_tokens"] == 12
    assert events[4]["reason"] == "length"


def test_ollama_native_chat_ndjson():
    lines = [
        json.dumps({"message": {"role": "assistant", "content": "Hi"}, "done": False}),
        json.dumps({"message": {"role": "assistant", "content": ""}, "done": True, "eval_count": 1, "eval_duration": 5}),
    ]
    events = list(sse.parse_sse_stream(lines))
    assert [e["type"] for e in events] == ["token", "timings", "usage", "finish", "done"]


def test_llama_server_timings_object():
    lines = _sse({"choices": [{"index": 0, "text": "x", "finish_reason": "length"}], "timings": {"prompt_n": 3, "predicted_n": 1, "predicted_ms": 2.5}})
    events = list(sse.parse_sse_stream(lines))
    assert events[-1] == {"type": "timings", "source": "llama-server", "prompt_n": 3, "predicted_n": 1, "predicted_ms": 2.5}


def test_parse_is_lazy():
    seen = []

    def gen():
        for line in _sse({"choices": [{"index": 0, "text": "a", "finish_reason": None}]}, "data: [DONE]"):
            seen.append(line)
            yield line

    it = sse.parse_sse_stream(gen())
    assert next(it)["text"] == "a"
    assert len(seen) == 1  # the first event came before the rest of the stream was read


# --------------------------------------------------------------------------- other pure helpers


def test_percentile_matches_numpy():
    np = pytest.importorskip("numpy")
    xs = [0.3, 0.1, 0.7, 0.2, 0.9, 0.5, 0.4]
    for q in (0, 10, 50, 90, 99, 100):
        assert stats.percentile(xs, q) == pytest.approx(float(np.percentile(xs, q)))
    assert stats.percentile([], 50) is None
    s = stats.summarize([1.0, None, 3.0])
    assert s["n"] == 2 and s["p50"] == 2.0 and s["mean"] == 2.0


def test_percentile_agrees_with_the_record_quantile():
    """The payload's percentile (q in percent) and scalesweep.record.load.quantile (q in
    [0, 1]) are one definition, numpy's "linear"; the payload keeps its own arithmetic
    (its position rounds differently in the last bit, so the metrics of earlier campaigns
    keep their values): the two agree to rounding, and exactly where no interpolation
    happens."""
    import random

    from scalesweep.record.load import quantile

    rng = random.Random(41)
    samples = [[5.0], [2.0, 1.0], [0.3, 0.1, 0.7, 0.2, 0.9, 0.5, 0.4], list(range(1, 11)),
               [1e-3, 1e3, 7.5, 7.5, -2.0]] + [[rng.expovariate(3.0) for _ in range(n)]
                                                for n in (3, 17, 100, 1001)]
    for xs in samples:
        for q in (0, 1, 10, 25, 50, 75, 90, 95, 99, 99.9, 100):
            ours, theirs = stats.percentile(xs, q), quantile(xs, q / 100)
            assert ours == pytest.approx(theirs, rel=1e-12, abs=1e-15), (xs, q)
        for q in (0, 100):  # the ends: an order statistic itself on both sides
            assert stats.percentile(xs, q) == quantile(xs, q / 100)
    assert stats.percentile([], 50) is None and quantile([], 0.5) is None
    assert stats.percentile([1.0, None, 3.0], 50) == quantile([1.0, None, 3.0], 0.5) == 2.0


def test_load_prompts_text_and_jsonl(tmp_path):
    t = tmp_path / "p.txt"
    t.write_text("# comment\nfirst prompt\n\n  second  \n")
    assert infer.load_prompts(t) == [{"prompt": "first prompt"}, {"prompt": "second"}]
    j = tmp_path / "p.jsonl"
    j.write_text('"plain"\n{"prompt": "# not a comment"}\n{"messages": [{"role": "user", "content": "hi"}]}\n')
    got = infer.load_prompts(j)
    assert got[0] == {"prompt": "plain"} and got[1] == {"prompt": "# not a comment"}
    assert got[2]["messages"][0]["content"] == "hi" and got[2]["prompt"] == "hi"
    (tmp_path / "e.txt").write_text("# only comments\n")
    with pytest.raises(ValueError, match="no prompts"):
        infer.load_prompts(tmp_path / "e.txt")


def test_default_prompt_file():
    prompts = infer.load_prompts(REPO / "config" / "prompts" / "default.txt")
    assert 6 <= len(prompts) <= 12 and len({p["prompt"] for p in prompts}) == len(prompts)


def test_request_bodies_are_greedy_and_seeded():
    p = {"prompt": "hi"}
    chat = http_client.request_body("chat", "m", p, 16, 7)
    assert chat["messages"] == [{"role": "user", "content": "hi"}] and chat["temperature"] == 0
    assert chat["seed"] == 7 and chat["stream"] and chat["stream_options"] == {"include_usage": True}
    comp = http_client.request_body("completions", "m", p, 16, 7)
    assert comp["prompt"] == "hi" and comp["max_tokens"] == 16 and "messages" not in comp
    gen = http_client.request_body("generate", "m", p, 16, 7, threads=4)
    assert gen["options"] == {"temperature": 0, "seed": 7, "num_predict": 16, "num_thread": 4}


def test_parse_servers():
    assert http_client.parse_servers("n1:8000, n2:8001") == ["http://n1:8000", "http://n2:8001"]
    assert http_client.parse_servers("http://10.0.0.1:11434") == ["http://10.0.0.1:11434"]
    for bad in ("", "n1", ","):
        with pytest.raises(ValueError):
            http_client.parse_servers(bad)


def test_cli_rejects_bad_arguments(tmp_path):
    with pytest.raises(SystemExit) as e:
        infer.main(["--engine", "llamacpp", "--model", "x.gguf", "--prompts", "p", "--out", str(tmp_path / "m.json"), "--gpus", "2"])
    assert e.value.code == 2  # 2 GPUs with vendor none
    with pytest.raises(SystemExit):
        infer.main(["--engine", "llamacpp", "--model", "x", "--prompts", "p", "--out", "o", "--api", "generate"])


def test_missing_ollama_binary_fails_cleanly(tmp_path):
    prompts = tmp_path / "p.txt"
    prompts.write_text("hi\n")
    out = tmp_path / "m.json"
    rc = infer.main(
        ["--engine", "ollama", "--model", "llama3", "--prompts", str(prompts), "--out", str(out), "--ollama-bin", str(tmp_path / "no-such-ollama")]
    )
    assert rc == 1
    rec = json.loads(out.read_text())
    assert rec["status"] == "failed" and "cannot start" in rec["error"]
    assert rec["schema"] == "scalesweep.metrics"


# --------------------------------------------------------------------------- synthetic model


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    if not HAVE_MAKER_DEPS:
        pytest.skip("numpy/gguf/tokenizers missing")
    maker = _load("make_synthetic_llm")
    d = tmp_path_factory.mktemp("model")
    card = maker.build(d / "syn.gguf", maker.SyntheticConfig())
    return d / "syn.gguf", card


@needs_maker
def test_synthetic_model_is_deterministic_and_labelled(synthetic, tmp_path):
    import gguf

    maker = sys.modules["make_synthetic_llm"]
    path, card = synthetic
    again = maker.build(tmp_path / "again.gguf", maker.SyntheticConfig())
    assert again["sha256"] == card["sha256"] == maker.sha256_file(path)
    other = maker.build(tmp_path / "seed1.gguf", maker.SyntheticConfig(seed=1))
    assert other["sha256"] != card["sha256"]
    assert card["synthetic"] is True and 25e6 < card["n_params"] < 35e6
    assert json.loads(path.with_suffix(".json").read_text())["sha256"] == card["sha256"]
    r = gguf.GGUFReader(str(path))
    meta = {k: f.contents() for k, f in r.fields.items() if not k.startswith("tokenizer.ggml.token")}
    assert meta["general.architecture"] == "llama"
    assert meta["general.name"].startswith("scalesweep-synthetic-llama-") and meta["general.name"].endswith("-random")
    assert "RANDOM WEIGHTS" in meta["general.description"] and meta["scalesweep.synthetic"] is True
    assert meta["tokenizer.ggml.model"] == "gpt2" and len(r.fields["tokenizer.ggml.tokens"].data) == 4096
    assert sum(int(t.n_elements) for t in r.tensors) == card["n_params"]
    assert card["tokenizer"]["train_seconds"] < 1.0


# --------------------------------------------------------------------------- llama.cpp


def _pid_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_a_length_finish_counts_the_tokens_returned_never_max_tokens():
    # llama-cpp-python cuts max_tokens to what is left of its context and streams no
    # usage: its "length" finish says nothing about how many tokens came back
    assert http_client.returned_tokens(None, None, 242) == (242, "chunks")
    assert http_client.returned_tokens({"completion_tokens": 7}, None, 5) == (7, "usage")
    assert http_client.returned_tokens(None, {"source": "llama-server", "predicted_n": 9}, 4) == (9, "timings")


# --------------------------------------------------------------------------- logits vs transformers


@needs_llama
@needs_maker
def test_logits_match_transformers(tmp_path):
    pytest.importorskip("transformers", reason="transformers not installed (optional check)")
    torch = pytest.importorskip("torch")
    import llama_cpp
    import numpy as np
    from transformers import LlamaConfig, LlamaForCausalLM

    maker = sys.modules.get("make_synthetic_llm") or _load("make_synthetic_llm")
    cfg = maker.SyntheticConfig(dtype="f32", layers=4)
    path = tmp_path / "f32.gguf"
    card = maker.build(path, cfg)
    llm = llama_cpp.Llama(model_path=str(path), n_ctx=128, n_threads=2, logits_all=True, verbose=False, seed=0)
    ids = llm.tokenize(b"The quick brown fox jumps over the lazy dog.", add_bos=True)
    llm.eval(ids)
    ours = np.array(llm.scores[: len(ids)], dtype=np.float32)

    hf_cfg = LlamaConfig(
        vocab_size=cfg.vocab, hidden_size=cfg.hidden, intermediate_size=cfg.ffn, num_hidden_layers=cfg.layers,
        num_attention_heads=cfg.heads, num_key_value_heads=cfg.kv_heads, max_position_embeddings=cfg.ctx,
        rms_norm_eps=cfg.rms_eps, rope_theta=cfg.rope_theta, tie_word_embeddings=False,
        bos_token_id=card["tokenizer"]["bos_id"], eos_token_id=card["tokenizer"]["eos_id"],
    )  # fmt: skip
    model = LlamaForCausalLM(hf_cfg).eval()
    weights = maker.make_weights(cfg, (card["tokenizer"]["bos_id"], card["tokenizer"]["eos_id"], card["tokenizer"]["pad_id"]))
    missing, unexpected = model.load_state_dict({k: torch.from_numpy(v) for k, v in weights.items()}, strict=False)
    assert not unexpected and all("rotary" in m for m in missing)
    with torch.no_grad():
        ref = model(torch.tensor([ids])).logits[0].numpy()
    assert ours.shape == ref.shape
    assert np.abs(ours - ref).max() < 1e-3, np.abs(ours - ref).max()
    assert (ours.argmax(-1) == ref.argmax(-1)).all()


# --------------------------------------------------------------------------- Ollama path (fake binary)

FAKE_OLLAMA = r'''
import json, os, sys, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

if sys.argv[1] == "create":  # ollama create NAME -f Modelfile
    with open(os.environ["FAKE_OLLAMA_RECORD"] + ".create", "w") as fh:
        json.dump({"argv": sys.argv[1:], "modelfile": open(sys.argv[4]).read(), "host": os.environ.get("OLLAMA_HOST")}, fh)
    sys.exit(0)
if sys.argv[1] in ("pull", "show"):  # ollama pull|show NAME: clients of a running serve
    with open(os.environ["FAKE_OLLAMA_RECORD"] + "." + sys.argv[1], "w") as fh:
        json.dump({"argv": sys.argv[1:], "models": os.environ.get("OLLAMA_MODELS"), "host": os.environ.get("OLLAMA_HOST")}, fh)
    if sys.argv[1] == "show":
        print("  Model\n    architecture        llama\n")
    sys.exit(0)
assert sys.argv[1] == "serve"
with open(os.environ["FAKE_OLLAMA_RECORD"], "w") as fh:
    json.dump({k: v for k, v in os.environ.items() if k.startswith(("OLLAMA_", "ROCR_", "HIP_", "CUDA_"))}, fh)
host, port = os.environ["OLLAMA_HOST"].rsplit(":", 1)

class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"
    def log_message(self, *a):
        pass
    def do_GET(self):
        body = json.dumps({"version": "0.0.0-fake"}).encode()
        self.send_response(200 if self.path == "/api/version" else 404)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body)
    def do_POST(self):
        req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.send_response(200)
        self.end_headers()
        if self.path == "/api/generate":
            n = req["options"]["num_predict"]
            for i in range(n):
                self.wfile.write((json.dumps({"response": f"t{i} ", "done": False}) + "\n").encode()); self.wfile.flush()
                time.sleep(0.001)
            self.wfile.write((json.dumps({"response": "", "done": True, "done_reason": "length", "eval_count": n,
                "eval_duration": n * 1_000_000, "prompt_eval_count": 3, "prompt_eval_duration": 2_000_000,
                "total_duration": 9_000_000, "load_duration": 1000}) + "\n").encode())
        else:
            n = req["max_tokens"]
            self.wfile.write(b": keep-alive\n\n")
            for i in range(n):
                chunk = {"choices": [{"index": 0, "delta": {"role": "assistant", "content": f"t{i} "}, "finish_reason": None}]}
                self.wfile.write(("data: " + json.dumps(chunk) + "\n\n").encode()); self.wfile.flush()
            self.wfile.write(("data: " + json.dumps({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}) + "\n\n").encode())
            if (req.get("stream_options") or {}).get("include_usage"):
                self.wfile.write(("data: " + json.dumps({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": n, "total_tokens": n + 3}}) + "\n\n").encode())
            self.wfile.write(b"data: [DONE]\n\n")

ThreadingHTTPServer((host, int(port)), H).serve_forever()
'''


@pytest.mark.parametrize("api", ["generate", "chat"])
def test_ollama_engine_with_fake_binary(tmp_path, api):
    fake = tmp_path / "ollama"
    fake.write_text(f"#!{sys.executable}\n{FAKE_OLLAMA}")
    fake.chmod(0o755)
    prompts = tmp_path / "p.txt"
    prompts.write_text("a\nb\nc\n")
    model = tmp_path / "tiny.gguf"
    model.write_bytes(b"GGUF")
    record = tmp_path / "env.json"
    env = dict(os.environ, FAKE_OLLAMA_RECORD=str(record))
    for k in ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES", "OLLAMA_NUM_PARALLEL"):
        env.pop(k, None)
    cmd = [
        sys.executable, str(SCRIPTS / "infer_llm.py"), "--engine", "ollama", "--ollama-bin", str(fake),
        "--model", str(model), "--prompts", str(prompts), "--max-tokens", "8", "--concurrency", "3",
        "--warmup", "1", "--gpus", "2", "--gpu-vendor", "amd", "--api", api, "--threads", "4",
        "--models-dir", str(tmp_path / "models"), "--out", str(tmp_path / "m.json"), "--outputs", str(tmp_path / "o.jsonl"),
    ]  # fmt: skip
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 0, p.stderr
    rec = json.loads((tmp_path / "m.json").read_text())
    assert rec["status"] == "ok" and rec["engine"] == {**rec["engine"], "name": "ollama", "version": "0.0.0-fake", "api": api}
    assert rec["completion_tokens_total"] == 24 and rec["token_sources"] == ["usage"]
    seen = json.loads(record.read_text())
    assert seen["OLLAMA_SCHED_SPREAD"] == "1" and seen["OLLAMA_NUM_PARALLEL"] == "3"
    assert seen["ROCR_VISIBLE_DEVICES"] == "0,1" and seen["HIP_VISIBLE_DEVICES"] == "0,1"
    assert seen["OLLAMA_MODELS"] == str(tmp_path / "models") and seen["OLLAMA_HOST"].startswith("127.0.0.1:")
    created = json.loads(Path(str(record) + ".create").read_text())
    assert created["argv"][:2] == ["create", "scalesweep-tiny"] and created["modelfile"] == f"FROM {model}\n"
    assert rec["model"]["ollama_name"] == "scalesweep-tiny"
    if api == "generate":
        t = rec["engine_timings"]
        assert t["source"] == "ollama" and t["n"] == 3 and t["eval_count"]["p50"] == 8
        assert t["eval_rate_tokens_per_s"]["p50"] == pytest.approx(1000.0)
        assert t["prompt_eval_duration"]["mean"] == 2_000_000
    else:
        assert "engine_timings" not in rec
    outs = [json.loads(line) for line in (tmp_path / "o.jsonl").read_text().splitlines()]
    assert [o["text"] for o in outs] == ["".join(f"t{i} " for i in range(8))] * 3
    assert not _pid_alive(rec["server_pid"])


def test_stage_model_ollama_then_the_payload_on_the_pulled_name(tmp_path):
    """The Frontier workflow's LLM path (its command lines: tests/test_frontier_standin.py):
    scripts/stage_model.py --source ollama runs a temporary `ollama serve` with the staged
    directory's ollama/ as OLLAMA_MODELS, `ollama pull NAME` and `ollama show NAME` (the
    card), then scripts/infer_llm.py --engine ollama serves the pulled name from that
    directory, without `ollama create` (a registry name is no GGUF file)."""
    fake = tmp_path / "ollama"
    fake.write_text(f"#!{sys.executable}\n{FAKE_OLLAMA}")
    fake.chmod(0o755)
    record = tmp_path / "env.json"
    env = dict(os.environ, FAKE_OLLAMA_RECORD=str(record))
    for k in ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES", "OLLAMA_HOST", "OLLAMA_MODELS"):
        env.pop(k, None)
    name, staged = "hf.co/UniverseTBD/astrollama.gguf", tmp_path / "models" / "astrollama"
    p = subprocess.run([sys.executable, str(SCRIPTS / "stage_model.py"), "--source", "ollama", "--name", name,
                        "--ollama-bin", str(fake), "--out", str(staged)],
                       capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 0, p.stderr
    served = json.loads(record.read_text())  # the temporary server's environment
    pulled, shown = (json.loads(Path(f"{record}.{c}").read_text()) for c in ("pull", "show"))
    assert pulled["argv"] == ["pull", name] and shown["argv"] == ["show", name]
    for seen in (served, pulled, shown):  # the staging directory's ollama/, renamed into place
        assert seen["OLLAMA_MODELS" if seen is served else "models"].endswith("/ollama")
        assert seen["OLLAMA_HOST" if seen is served else "host"] == "127.0.0.1:11499"
    assert (staged / "ollama").is_dir() and not list(staged.parent.glob(".*staging*"))
    assert json.loads((staged / "model.json").read_text()) == {
        "name": name, "source": "ollama", "synthetic": False,
        "ollama_show": "  Model\n    architecture        llama\n\n"}
    record.unlink()
    prompts = tmp_path / "p.txt"
    prompts.write_text("The sky is\nOnce upon a time\n")
    cmd = [
        sys.executable, str(SCRIPTS / "infer_llm.py"), "--engine", "ollama", "--api", "generate", "--model", name,
        "--model-card", str(staged / "model.json"), "--prompts", str(prompts), "--max-tokens", "6", "--warmup", "1",
        "--gpus", "2", "--gpu-vendor", "amd", "--threads", "1", "--seed", "0", "--ollama-bin", str(fake),
        "--models-dir", str(staged / "ollama"), "--out", str(tmp_path / "m.json"),
    ]  # fmt: skip
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 0, p.stderr
    rec = json.loads((tmp_path / "m.json").read_text())
    assert rec["status"] == "ok" and rec["n_ok"] == 2, rec.get("error")
    assert rec["engine_timings"]["source"] == "ollama" and rec["engine_timings"]["eval_count"]["p50"] == 6
    assert "ollama_name" not in rec["model"] and not Path(f"{record}.create").exists()  # pulled, not created
    seen = json.loads(record.read_text())
    assert seen["OLLAMA_MODELS"] == str(staged / "ollama") and seen["ROCR_VISIBLE_DEVICES"] == "0,1"
    assert not _pid_alive(rec["server_pid"])
