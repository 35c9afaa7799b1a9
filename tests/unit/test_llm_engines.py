"""LLM engines as classes: the registry, a made-up engine through the real driver, and
the in-process torch engine (real tokens; the same greedy tokens as llama.cpp).

The registry and driver tests need only the standard library; the torch tests need
torch, numpy, gguf and tokenizers; the agreement tests also llama_cpp. Each group skips
with its reason when its packages are absent.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = REPO / "scripts"
sys.path.insert(0, str(SCRIPTS))

import infer_llm  # noqa: E402
import llm_engines  # noqa: E402
from llm_payload.engine import Setup  # noqa: E402
from llm_payload.stream import TokenStream  # noqa: E402
from scalesweep.record.metrics import field_problem, read_metrics  # noqa: E402

HAVE_TORCH_DEPS = all(importlib.util.find_spec(m) for m in ("torch", "numpy", "gguf", "tokenizers"))
HAVE_LLAMA = importlib.util.find_spec("llama_cpp") is not None
needs_torch = pytest.mark.skipif(not HAVE_TORCH_DEPS, reason="torch/numpy/gguf/tokenizers missing")
needs_llama = pytest.mark.skipif(not HAVE_LLAMA, reason="llama_cpp not importable")


# --------------------------------------------------------------------------- registry


def test_registry_lookup_and_capabilities():
    assert {"llamacpp", "ollama", "torch"} <= set(llm_engines.ENGINES)
    for name, cls in llm_engines.ENGINES.items():
        assert llm_engines.engine_class(name) is cls and cls.name == name and cls.summary
    assert llm_engines.engine_class("llamacpp").serves_http and llm_engines.engine_class("ollama").serves_http
    assert not llm_engines.engine_class("torch").serves_http
    assert "generate" in llm_engines.ENGINES["ollama"].apis
    assert "generate" not in llm_engines.ENGINES["llamacpp"].apis + llm_engines.ENGINES["torch"].apis


def test_unknown_engine_refused_naming_known_ones(tmp_path, capsys):
    with pytest.raises(ValueError, match="unknown engine 'vllm'; known engines: llamacpp, ollama, torch"):
        llm_engines.engine_class("vllm")
    with pytest.raises(SystemExit) as e:
        infer_llm.main(["--engine", "vllm", "--model", "m", "--prompts", "p", "--out", str(tmp_path / "m.json")])
    assert e.value.code == 2
    assert "known engines: llamacpp, ollama, torch" in capsys.readouterr().err
    assert not (tmp_path / "m.json").exists()


@pytest.mark.parametrize("extra, message", [
    (["--serve-only"], "engine torch runs in this process and serves no HTTP: it cannot run multi-node"),
    (["--servers", "n1:8000"], "engines that can: llamacpp, ollama"),
    (["--api", "generate"], "--api generate is not served by engine torch: use chat or completions"),
    (["--gpus", "2", "--gpu-vendor", "nvidia"], "engine torch runs on one device"),
])
def test_torch_engine_refuses_what_it_cannot_do(tmp_path, capsys, extra, message):
    argv = ["--engine", "torch", "--model", "m.gguf", "--out", str(tmp_path / "m.json"), *extra]
    if "--serve-only" not in extra:
        argv += ["--prompts", "p"]
    with pytest.raises(SystemExit) as e:
        infer_llm.main(argv)
    assert e.value.code == 2 and message in capsys.readouterr().err


def test_driver_never_names_an_engine():
    """No string in the driver's code (docstrings and help texts aside) is an engine name."""
    tree = ast.parse((SCRIPTS / "infer_llm.py").read_text())
    names = set(llm_engines.ENGINES) | {"llama_cpp", "llama-cpp", "llama.cpp"}
    found = [(n.lineno, n.value) for n in ast.walk(tree) if isinstance(n, ast.Constant) and n.value in names]
    assert not found


def test_ollama_client_requests_the_name_its_servers_registered(tmp_path):
    """Multi-node Ollama: each --serve-only server ran `ollama create scalesweep-<stem>`;
    the --servers client must ask for that name, not the card's."""
    model = tmp_path / "Tiny Model.gguf"
    model.write_bytes(b"GGUF")
    args = infer_llm.build_parser().parse_args(
        ["--engine", "ollama", "--model", str(model), "--servers", "n1:1,n2:2", "--prompts", "p", "--out", "o"])
    record = {"engine": {}, "model": {}}
    engine = llm_engines.OllamaEngine(Setup(args, str(model), "card-name", 1, {}, tmp_path / "log", record))
    engine.start()
    assert engine.model_name == "scalesweep-tiny-model" and engine.replicas == 2
    assert record["servers"] == ["http://n1:1", "http://n2:2"] and engine.pid is None and engine.stop() is None


# --------------------------------------------------------------------------- a made-up engine


class EchoEngine(llm_engines.Engine):
    """Streams the prompt's words back, max_tokens of them: an engine the driver has never heard of."""

    name = "echo-test"
    summary = "test engine"
    calls: list[str] = []

    @classmethod
    def add_arguments(cls, ap):
        ap.add_argument("--echo-suffix", default=" ")

    def start(self):
        self.calls.append("start")
        self.pid = os.getpid()
        self.record["engine"]["echo_started"] = True

    def wait_ready(self):
        self.calls.append("ready")
        return 0.25

    def generate(self, prompt, index=0):
        self.calls.append(f"generate {index}")
        stream = TokenStream()
        words = (prompt["prompt"].split() * self.args.max_tokens)[: self.args.max_tokens]
        for w in words:
            stream.piece(w + self.args.echo_suffix)
        return stream.result(len(words), "usage", "length", prompt_tokens=len(prompt["prompt"].split()))

    def stop(self):
        self.calls.append("stop")
        return None

    def provenance(self):
        return {"name": self.name, "version": "9.9"}


@pytest.fixture
def echo_engine():
    llm_engines.register(EchoEngine)
    EchoEngine.calls = []
    yield EchoEngine
    llm_engines.ENGINES.pop(EchoEngine.name)


def test_made_up_engine_runs_through_the_driver(echo_engine, tmp_path):
    prompts = tmp_path / "p.txt"
    prompts.write_text("one two three\nfour five\n")
    out, outputs = tmp_path / "payload.json", tmp_path / "outputs.jsonl"
    rc = infer_llm.main([
        "--engine", "echo-test", "--model", "echo-model", "--prompts", str(prompts), "--num-requests", "4",
        "--max-tokens", "5", "--concurrency", "2", "--warmup", "1", "--echo-suffix", "_",
        "--out", str(out), "--outputs", str(outputs),
    ])  # fmt: skip
    assert rc == 0
    rec = read_metrics(out)
    assert field_problem({**rec, "payload": "llm_inference"}) is None
    assert rec["status"] == "ok" and rec["engine"] == {"name": "echo-test", "api": "chat", "version": "9.9", "echo_started": True}
    assert rec["startup_s"] == 0.25 and rec["warmup_s"] >= 0
    assert rec["n_requests"] == rec["n_ok"] == 4 and rec["completion_tokens_total"] == 20
    assert rec["tokens_per_s"] == pytest.approx(20 / rec["wall_s"]) and rec["token_sources"] == ["usage"]
    assert rec["ttft_s"]["n"] == rec["latency_s"]["n"] == rec["decode_tokens_per_s"]["n"] == 4
    assert rec["prompt_tokens_total"] == 3 + 2 + 3 + 2
    assert rec["memory"]["server_peak_rss_mb"] > 0  # the engine's pid (this process) was sampled
    assert "server_pid" not in rec and "server_returncode" not in rec
    # what the client ran on and when it started (scalesweep.record.stack); its engine
    # ran in this process: no server stack of its own
    (rank,) = rec["per_rank"]
    marks = rank["startup"]
    assert marks["script"] <= marks["imports"] <= marks["first_step"]
    assert any(lib["kind"] == "libc" for lib in rank["stack"]["libraries"])
    assert rank["stack"]["interpreter"]["executable"] == sys.executable
    assert "server_stack" not in rec
    assert [r["index"] for r in rec["requests"]] == [0, 1, 2, 3]
    assert all("text" not in r and "t_pieces" not in r for r in rec["requests"])
    assert [json.loads(line)["text"] for line in outputs.read_text().splitlines()] == [
        "one_two_three_one_two_", "four_five_four_five_four_", "one_two_three_one_two_", "four_five_four_five_four_"
    ]
    calls = echo_engine.calls
    assert calls[:3] == ["start", "ready", "generate 0"] and calls[-1] == "stop"
    assert sorted(calls[3:-1]) == [f"generate {i}" for i in range(4)]


def test_made_up_engine_failing_requests_fail_the_point(echo_engine, tmp_path, monkeypatch):
    def broken(self, prompt, index=0):
        return TokenStream().result(0, "usage", None, error="model on fire")

    monkeypatch.setattr(EchoEngine, "generate", broken)
    prompts = tmp_path / "p.txt"
    prompts.write_text("x\n")
    rc = infer_llm.main(["--engine", "echo-test", "--model", "m", "--prompts", str(prompts), "--out", str(tmp_path / "m.json")])
    rec = json.loads((tmp_path / "m.json").read_text())
    assert rc == 1 and rec["status"] == "failed" and "warm-up request failed: model on fire" in rec["error"]
    assert echo_engine.calls[-1] == "stop"


# --------------------------------------------------------------------------- torch engine


@pytest.fixture(scope="module")
def tiny_f32(tmp_path_factory):
    """A tiny f32 synthetic Llama with grouped-query attention (4 heads, 2 KV heads)."""
    if not HAVE_TORCH_DEPS:
        pytest.skip("torch/numpy/gguf/tokenizers missing")
    import make_synthetic_llm as maker  # scripts/ is on sys.path
    path = tmp_path_factory.mktemp("tiny") / "tiny.gguf"
    card = maker.build(path, maker.SyntheticConfig(hidden=64, layers=2, heads=4, kv_heads=2, ffn=128, vocab=512, ctx=256, dtype="f32"))
    return path, card


PROMPTS = "The sky is\nWrite a loop in C\nList three planets\nOnce upon a time\n"


def _payload(engine, model, tmp_path, *extra):
    prompts = tmp_path / "prompts.txt"
    prompts.write_text(PROMPTS)
    d = tmp_path / engine
    d.mkdir(exist_ok=True)
    cmd = [
        sys.executable, str(SCRIPTS / "infer_llm.py"), "--engine", engine, "--model", str(model),
        "--prompts", str(prompts), "--max-tokens", "24", "--concurrency", "2", "--warmup", "1",
        "--threads", "1", "--ctx", "256", "--out", str(d / "metrics.json"), "--outputs", str(d / "outputs.jsonl"),
        "--server-log", str(d / "server.log"), *extra,
    ]  # fmt: skip
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    outputs = [json.loads(line) for line in (d / "outputs.jsonl").read_text().splitlines()]
    return read_metrics(d / "metrics.json"), outputs


@needs_torch
def test_torch_engine_generates_real_tokens_with_timings(tiny_f32, tmp_path):
    import torch

    model, card = tiny_f32
    rec, outputs = _payload("torch", model, tmp_path, "--api", "completions")
    assert rec["status"] == "ok" and rec["engine"]["name"] == "torch" and rec["engine"]["version"] == torch.__version__
    assert rec["engine"]["device"] == "cpu" and rec["engine"]["tensor_types"] == ["F32"]
    assert rec["model"]["sha256"] == card["sha256"] and rec["threads"] == 1
    assert rec["n_ok"] == 4 and rec["completion_tokens_total"] == 4 * 24  # specials never win: no early stop
    assert rec["prompt_tokens_total"] > 4  # BOS + the prompt's tokens
    for key in ("ttft_s", "latency_s", "decode_tokens_per_s"):
        assert rec[key]["n"] == 4 and 0 < rec[key]["p50"] <= rec[key]["max"]
    assert rec["ttft_s"]["p50"] < rec["latency_s"]["p50"] and rec["tokens_per_s"] > 0
    assert rec["startup_s"] > 0 and rec["memory"]["server_peak_rss_mb"] > 10 and "server_pid" not in rec
    assert all(r["stream_pieces"] == 24 and r["finish_reason"] == "length" for r in rec["requests"])
    assert all(o["ok"] and o["text"] and o["completion_tokens"] == 24 for o in outputs)
    _, outputs2 = _payload("torch", model, tmp_path, "--api", "completions")
    assert outputs2 == outputs  # greedy: identical run to run


@needs_torch
def test_torch_engine_refuses_other_architectures_clearly(tmp_path):
    bad = tmp_path / "x.gguf"
    bad.write_bytes(b"GGUF" + b"\0" * 64)
    prompts = tmp_path / "p.txt"
    prompts.write_text("hi\n")
    p = subprocess.run([sys.executable, str(SCRIPTS / "infer_llm.py"), "--engine", "torch", "--model", str(bad),
                        "--prompts", str(prompts), "--out", str(tmp_path / "m.json")], capture_output=True, text=True, timeout=120)
    rec = json.loads((tmp_path / "m.json").read_text())
    assert p.returncode == 1 and rec["status"] == "failed" and rec["error"]


@needs_torch
@needs_llama
def test_torch_matches_llamacpp_tokens_logits_and_greedy_ids(tiny_f32):
    """Same tokenizer, logits within 1e-3, and the same 64 greedy tokens (with the llama.cpp
    server's default repeat penalty, which the torch engine applies too)."""
    import llama_cpp
    import numpy as np

    import llm_torch

    model, _ = tiny_f32
    ours = llm_torch.GGUFLlama(str(model), ctx=256)
    llm = llama_cpp.Llama(model_path=str(model), n_ctx=256, n_threads=1, logits_all=True, verbose=False, seed=0)
    for text in ("The quick brown fox, 3.14!", "  été \n\tx <|begin_of_text|>y", "Write a loop in C"):
        assert ours.tokenizer.encode(text, add_bos=True) == llm.tokenize(text.encode(), add_bos=True, special=True)
    ids = ours.tokenizer.encode("The quick brown fox jumps over the lazy dog.", add_bos=True)
    llm.eval(ids)
    ref = np.array(llm.scores[len(ids) - 1], dtype=np.float32)
    got = ours.forward(ids, 0).numpy()
    assert np.abs(got - ref).max() < 1e-3 and got.argmax() == ref.argmax()
    for prompt in ("The sky is", "Once upon a time"):
        ids = ours.tokenizer.encode(prompt, add_bos=True)
        llm.reset()
        expected = []
        for tok in llm.generate(ids, temp=0.0, repeat_penalty=llm_torch.REPEAT_PENALTY):
            expected.append(tok)
            if len(expected) == 64:
                break
        assert [t for t, _ in ours.generate(ids, 64)] == expected
