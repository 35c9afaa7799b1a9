"""LLM inference payload: real llama.cpp runs end to end, through the payload script
(needs llama_cpp, numpy, gguf and tokenizers; each test skips with its reason). The rest,
and the helpers used here: tests/unit/test_llm.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request

import pandas as pd
import pytest

from test_llm import SCRIPTS, _pid_alive, needs_llama, needs_maker, synthetic  # noqa: F401  (fixture)
from llm_payload.server import free_port  # after test_llm, which puts scripts/ on sys.path


def _run_payload(model, prompts, out_dir, *extra, timeout=300):
    cmd = [
        sys.executable, str(SCRIPTS / "infer_llm.py"),
        "--engine", "llamacpp", "--model", str(model), "--prompts", str(prompts),
        "--max-tokens", "16", "--concurrency", "2", "--warmup", "1", "--threads", "1",
        "--out", str(out_dir / "metrics.json"), "--outputs", str(out_dir / "outputs.jsonl"),
        "--server-log", str(out_dir / "server.log"), *extra,
    ]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


@needs_llama
@needs_maker
@pytest.mark.integration
def test_llamacpp_end_to_end_twice_identical(synthetic, tmp_path):
    model, card = synthetic
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("The sky is\nWrite a loop in C\nList three planets\nOnce upon a time\n")
    runs = []
    for k in (1, 2):
        d = tmp_path / f"run{k}"
        d.mkdir()
        p = _run_payload(model, prompts, d)
        assert p.returncode == 0, p.stderr + (d / "server.log").read_text()[-3000:]
        rec = json.loads((d / "metrics.json").read_text())
        outputs = [json.loads(line) for line in (d / "outputs.jsonl").read_text().splitlines()]
        runs.append((rec, outputs))
        assert rec["status"] == "ok" and rec["schema"] == "scalesweep.metrics"
        assert rec["n_requests"] == rec["n_ok"] == 4 and rec["n_failed"] == 0
        assert rec["completion_tokens_total"] == 4 * 16  # special-token logits are 0: never stops early
        assert rec["wall_s"] > 0 and rec["tokens_per_s"] > 0 and rec["requests_per_s"] > 0
        assert rec["tokens_per_s"] == pytest.approx(64 / rec["wall_s"])
        for key in ("ttft_s", "latency_s", "decode_tokens_per_s"):
            assert rec[key]["n"] == 4 and 0 < rec[key]["p50"] <= rec[key]["p90"] <= rec[key]["p99"] <= rec[key]["max"]
        assert rec["ttft_s"]["p50"] < rec["latency_s"]["p50"]
        assert rec["engine"]["name"] == "llamacpp" and rec["engine"]["version"]
        assert "--interrupt_requests" in rec["engine"]["server_cmd"]
        assert rec["model"]["synthetic"] is True and rec["model"]["sha256"] == card["sha256"]
        assert rec["gpus"] == 0 and rec["gpu_env"]["CUDA_VISIBLE_DEVICES"] == "-1" and rec["threads"] == 1
        assert rec["memory"]["server_peak_rss_mb"] > 10 and rec["memory"]["server_vmhwm_mb"] > 10
        assert rec["start"] and rec["end"] and rec["hosts"][0] and rec["host"]["hostname"]
        assert len(rec["requests"]) == 4 and all(r["ok"] for r in rec["requests"])
        assert not _pid_alive(rec["server_pid"])  # the server was stopped
        assert [o["index"] for o in outputs] == [0, 1, 2, 3]
        assert all(o["ok"] and o["completion_tokens"] == 16 and o["text"] for o in outputs)
    assert runs[0][1] == runs[1][1]  # greedy outputs identical run to run


@needs_llama
@needs_maker
@pytest.mark.integration
def test_max_tokens_past_the_context_counts_the_tokens_the_server_returned(synthetic, tmp_path):
    """max_tokens far beyond the server's context (n_ctx 256): the request stops at the
    context with a "length" finish, and tokens/s counts the tokens streamed back. (A long
    prompt takes most of the context: a few dozen tokens are left to generate.)"""
    model, _ = synthetic
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("the " * 200 + "\n")
    asked, ctx = 10**12, 256
    p = _run_payload(model, prompts, tmp_path, "--max-tokens", str(asked), "--ctx", str(ctx),
                     "--num-requests", "1", "--warmup", "0", "--concurrency", "1")
    assert p.returncode == 0, p.stderr + (tmp_path / "server.log").read_text()[-3000:]
    rec = json.loads((tmp_path / "metrics.json").read_text())
    (req,) = rec["requests"]
    assert req["ok"] and req["finish_reason"] == "length" and req["token_source"] == "chunks"
    assert 0 < req["completion_tokens"] == req["stream_pieces"] < ctx
    assert rec["completion_tokens_total"] == req["completion_tokens"] and rec["token_sources"] == ["chunks"]
    assert rec["tokens_per_s"] == pytest.approx(req["completion_tokens"] / rec["wall_s"])
    assert rec["n_length_below_max_tokens"] == 1 and rec["max_tokens"] == asked
    assert f"stopped at a limit before --max-tokens {asked} (the engine's context, --ctx {ctx})" in p.stderr
    (out,) = [json.loads(line) for line in (tmp_path / "outputs.jsonl").read_text().splitlines()]
    assert out["completion_tokens"] == req["completion_tokens"] and out["text"]


@needs_llama
@pytest.mark.integration
def test_broken_model_fails_with_log_named(tmp_path):
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF" + b"\0" * 64)
    prompts = tmp_path / "p.txt"
    prompts.write_text("hi\n")
    p = _run_payload(bad, prompts, tmp_path, "--startup-timeout", "120")
    assert p.returncode == 1
    rec = json.loads((tmp_path / "metrics.json").read_text())
    assert rec["status"] == "failed"
    assert "exited" in rec["error"] and str(tmp_path / "server.log") in rec["error"]
    # the first line names the cause the server's log gives (the harness's failure reason)
    assert f"Failed to load model from file: {bad}" in rec["error"].splitlines()[0]
    assert not _pid_alive(rec["server_pid"])


def _children(pid: int) -> list[int]:
    kids = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as fh:
                    if int(fh.read().rsplit(")", 1)[1].split()[1]) == pid:
                        kids.append(int(d))
            except OSError:
                pass
    return kids


@needs_llama
@needs_maker
@pytest.mark.integration
def test_sigterm_stops_the_server(synthetic, tmp_path):
    model, _ = synthetic
    prompts = tmp_path / "p.txt"
    prompts.write_text("a long story\n")
    port = free_port("127.0.0.1")
    cmd = [
        sys.executable, str(SCRIPTS / "infer_llm.py"), "--engine", "llamacpp", "--model", str(model),
        "--prompts", str(prompts), "--num-requests", "200", "--max-tokens", "256", "--threads", "1",
        "--port", str(port), "--out", str(tmp_path / "m.json"), "--server-log", str(tmp_path / "s.log"),
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.time() + 120
        while time.time() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(0.3)
        else:
            pytest.fail("server never became healthy")
        time.sleep(1.0)  # requests in flight
        servers = _children(proc.pid)
        assert servers
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert rc == 128 + signal.SIGTERM
    time.sleep(0.2)
    assert not any(_pid_alive(s) for s in servers)
    rec = json.loads((tmp_path / "m.json").read_text())
    assert rec["status"] == "failed" and "signal 15" in rec["error"]


@needs_llama
@needs_maker
@pytest.mark.integration
def test_multi_server_serve_only_and_client(synthetic, tmp_path):
    """The multi-node shape on one machine: two --serve-only servers, one --servers client."""
    model, _ = synthetic
    prompts = tmp_path / "p.txt"
    prompts.write_text("one\ntwo\nthree\nfour\n")
    servers = []
    try:
        for k in (0, 1):
            cmd = [
                sys.executable, str(SCRIPTS / "infer_llm.py"), "--engine", "llamacpp", "--model", str(model),
                "--serve-only", "--ready-file", str(tmp_path / f"ready{k}"), "--threads", "1",
                "--out", str(tmp_path / f"serve{k}.json"),
            ]  # fmt: skip
            servers.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
        deadline = time.time() + 120
        while not all((tmp_path / f"ready{k}").exists() for k in (0, 1)):
            assert time.time() < deadline, "servers never became ready"
            assert all(s.poll() is None for s in servers)
            time.sleep(0.2)
        urls = ",".join((tmp_path / f"ready{k}").read_text().strip() for k in (0, 1))
        p = _run_payload(model, prompts, tmp_path, "--servers", urls)
        assert p.returncode == 0, p.stderr
        rec = json.loads((tmp_path / "metrics.json").read_text())
        assert rec["status"] == "ok" and rec["n_ok"] == 4 and len(rec["servers"]) == 2
        assert [r["server"] for r in rec["requests"]] == rec["servers"] * 2  # round robin
    finally:
        for s in servers:
            s.send_signal(signal.SIGTERM)
        rcs = [s.wait(timeout=60) for s in servers]
    assert rcs == [0, 0]
    for k in (0, 1):
        srec = json.loads((tmp_path / f"serve{k}.json").read_text())
        assert srec["status"] == "ok" and srec["serving"].startswith("127.0.0.1:") and srec["served_s"] > 0
        assert not _pid_alive(srec["server_pid"])


@needs_llama
@needs_maker
@pytest.mark.integration
def test_concurrency_levels_are_measured_in_one_run_against_one_server(synthetic, tmp_path):
    """``--concurrency-levels 2,1,4``: after the timed run at 2, the prompt set again at 1
    and 4 against the same server; each level has its own throughput and percentiles, and
    the collected row carries them for the report's concurrency table."""
    from scalesweep.analyse.collect import run_row
    from scalesweep.report.tables import concurrency_table

    model, _ = synthetic
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("The sky is\nWrite a loop in C\nList three planets\nOnce upon a time\n")
    p = _run_payload(model, prompts, tmp_path, "--concurrency-levels", "2,1,4")
    assert p.returncode == 0, p.stderr
    rec = json.loads((tmp_path / "metrics.json").read_text())
    levels = rec["concurrency_levels"]
    assert [lv["concurrency"] for lv in levels] == [2, 1, 4]
    assert levels[0]["tokens_per_s"] == rec["tokens_per_s"]  # the first is the headline
    for lv in levels:
        assert lv["n_ok"] == 4 and lv["n_failed"] == 0 and lv["tokens_per_s"] > 0
        assert lv["latency_s"]["p50"] <= lv["latency_s"]["p99"]
    rec.update(point={"workload": "llm", "runtime": "native", "nodes": 1, "gpus": 0, "ranks": 1,
                      "threads": 1, "repeat": 1})
    row = run_row(rec, "x", "llm")
    table = concurrency_table(pd.DataFrame([row]))
    assert table["concurrency"].tolist() == [1, 2, 4] and (table["n"] == 1).all()
    bad = _run_payload(model, prompts, tmp_path, "--concurrency-levels", "1,4")
    assert bad.returncode != 0 and "the first = --concurrency (2)" in bad.stderr
