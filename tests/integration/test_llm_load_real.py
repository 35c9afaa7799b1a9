"""LLM serving under load, for real: the payload (scripts/infer_llm.py, scripts/llm_load.py)
against a real llama.cpp server with the synthetic model: a closed-loop level, two open-loop
Poisson rates, an offline level and the highest rate within a target by bisection; every
request kept. The statistics themselves: tests/unit/test_load_stats.py."""

from __future__ import annotations

import json

import pytest

from test_llm import needs_llama, needs_maker, synthetic  # noqa: F401  (fixture)
from test_llm_real import _run_payload

from scalesweep.record.load import arrival_times


@needs_llama
@needs_maker
@pytest.mark.integration
def test_open_loop_levels_against_the_real_server(synthetic, tmp_path):
    model, _ = synthetic
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("The sky is\nWrite a loop in C\nList three planets\nOnce upon a time\n")
    requests = tmp_path / "requests.jsonl"
    # 16 requests at 200/s arrive within ~0.1 s at a server that serves one at a time
    # (40-80 ms each for 16 tokens on a 2-core machine): the 15th waits 0.6-1.1 s, past the
    # 0.3 s TTFT limit (at 1.0 s a quiet machine met it, and no bisection ran); at 1/s
    # nothing waits (a first token in tens of ms): the first rate meets it, the second
    # not, and the bisection runs between them
    p = _run_payload(model, prompts, tmp_path, "--request-rates", "1,200", "--load-requests", "16",
                     "--arrival", "poisson", "--arrival-seed", "7", "--offline",
                     "--target", "ttft_s=0.3,tpot_s=0.5", "--max-rate-steps", "2",
                     "--requests-out", str(requests), timeout=600)
    assert p.returncode == 0, p.stderr[-3000:] + (tmp_path / "server.log").read_text()[-2000:]
    rec = json.loads((tmp_path / "metrics.json").read_text())
    levels = rec["load_levels"]
    shapes = [(lv["shape"], lv.get("rate"), lv.get("bisection")) for lv in levels]
    assert shapes[:4] == [("closed", None, None), ("poisson", 1.0, False), ("poisson", 200.0, False),
                          ("offline", None, None)], shapes
    assert len(levels) == 4 + 2 and all(lv["bisection"] for lv in levels[4:])  # 2 bisection steps
    closed, slow, fast, offline = levels[:4]
    assert closed["n"] == 4 and slow["n"] == fast["n"] == offline["n"] == 16
    assert all(lv["n_failed"] == 0 for lv in levels)
    # the open loop sent at the seeded Poisson times (within the client's scheduling lag)
    lines = [json.loads(line) for line in requests.read_text().splitlines()]
    assert len(lines) == sum(lv["n"] for lv in levels)
    sent = sorted((r for r in lines if r["level"] == 1), key=lambda r: r["index"])
    want = arrival_times(16, 1.0, "poisson", 1.0, 7)
    assert [r["t_arrival"] for r in sent] == pytest.approx(want, abs=1e-3)
    assert all(0 <= r["t_send"] - r["t_arrival"] < 0.25 for r in sent)
    for r in sent:  # every token's time, in order, between the first token and the end
        assert r["t_tokens"][0] == pytest.approx(r["t_first"], abs=1e-6)
        assert r["t_tokens"] == sorted(r["t_tokens"]) and r["t_tokens"][-1] <= r["t_end"]
        assert r["output_tokens"] == 16
        # input tokens named by what they count (issue 40): llama-cpp-python's stream says
        # nothing of what the server evaluated, so the prompt text alone, counted apart
        assert r["input_tokens"] is None and r["prompt_text_tokens"] > 0
    # at 40 requests/s queueing piles up behind the one-at-a-time server
    assert fast["ttft"]["p99"]["estimate"] > slow["ttft"]["p99"]["estimate"]
    assert fast["queue"]["n"] == 16 and fast["meets_target"] is False
    assert slow["meets_target"] is not False and slow["goodput_rps"] > 0
    for lv in (slow, fast):
        assert lv["target"]["ttft_s"] == 0.3
        p50 = lv["ttft"]["p50"]
        assert p50["low"] is None or p50["low"] <= p50["estimate"] <= p50["high"]
        # 16 requests cannot support a p99: said, no number
        es = lv["ttft"]["early_stopping"]["p99"]
        assert es["supported"] is False and es["estimate"] is None and "662" in es["note"]
    # offline: everything at once, throughput above the slow open loop's
    assert offline["output_tokens_per_s"] > slow["output_tokens_per_s"]
    best = rec["max_rate"]
    assert best["bound"] == "bisection" and best["between"] == [1.0, 200.0]
    assert 1 <= best["max_rate_rps"] < 200 and len(best["tried"]) == 2
    assert best["basis"] == "sample percentiles" and "too short for early stopping" in best["note"]
    assert rec["load"]["seed"] == 7 and rec["load"]["target"]["name"] == "custom"
    assert rec["client"]["same_network_namespace"] is True
