"""LLM serving under load, the analysis: runs.csv's load_levels -> llm_load.csv and
llm_load_overhead.csv (scalesweep.analyse.load), the payload's load arguments from a
config (scalesweep.plan.kinds.llm.load_args), the figures' Pareto front."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from scalesweep.analyse.pairing import SAME_BLOCK
from scalesweep.analyse.load import (TARGET_TEXT, load_runs, load_summary, load_verdicts,
                                     target_text)
from scalesweep.analyse.summary import campaign_settings
from scalesweep.plan.kinds.llm import compact_level, load_args, workload_targets
from scalesweep.record.load import level_summary
from scalesweep.report.load_figures import (distribution_figure, goodput_figure,
                                            latency_throughput_figure, pareto_front)


def _requests(rng, n, ttft, tpot, tokens=16):
    out, t = [], 0.0
    for i in range(n):
        t += rng.exponential(1.0)
        first = t + ttft * rng.uniform(0.9, 1.1)
        end = first + tpot * (tokens - 1) * rng.uniform(0.95, 1.05)
        out.append({"ok": True, "t_arrival": t, "t_send": t, "t_first": first, "t_end": end,
                    "t_tokens": list(np.linspace(first, end, tokens)), "input_tokens": 8,
                    "output_tokens": tokens, "index": i})
    return out


def _level(rng, spec, ttft, tpot, target="llama2-70b"):
    reqs = _requests(rng, 40, ttft, tpot)
    return {**spec, **level_summary(reqs, reqs[-1]["t_end"], target)}


def _runs(slowdown=1.2, repeats=4, seed=0):
    """native and charliecloud in the same blocks (arm charliecloud); the container's TTFT
    ``slowdown`` times native's at every level."""
    rng = np.random.default_rng(seed)
    rows = []
    for rep in range(1, repeats + 1):
        for runtime, factor in (("native", 1.0), ("charliecloud", slowdown)):
            levels = [
                {"level": 0, "shape": "closed", "concurrency": 1, **_level(rng, {}, 0.05 * factor, 0.01)},
                {"level": 1, "shape": "poisson", "rate": 1.0, "bisection": False,
                 **_level(rng, {}, 0.1 * factor, 0.01)},
                {"level": 2, "shape": "poisson", "rate": 4.0, "bisection": False,
                 **_level(rng, {}, 0.4 * factor, 0.012)},
            ]
            rows.append({"workload": "llm", "payload": "llm", "model_label": "m (synthetic weights)",
                         "arm": "charliecloud", "runtime": runtime, "nodes": 1, "gpus": 0, "ranks": 1,
                         "threads": 1, "repeat": rep, "block_id": f"b{rep}", "disturbed": False,
                         "shared_cores": False, "synthetic_model": True,
                         "start": f"2026-11-26T10:{rep:02d}:00+00:00",
                         "end": f"2026-11-26T10:{rep:02d}:30+00:00", "hosts": "h", "path": f"p/{runtime}/{rep}",
                         "load_levels": json.dumps([compact_level(lv) for lv in levels]),
                         "max_rate_rps": 0.8 / factor, "max_rate_bound": "bisection"})
    return pd.DataFrame(rows)


def test_every_run_and_level_becomes_a_row_with_its_percentiles_and_ci():
    levels = load_runs(_runs())
    assert len(levels) == 8 * 3
    assert set(levels["level_label"]) == {"closed loop, concurrency 1", "poisson arrivals, 1 requests/s",
                                          "poisson arrivals, 4 requests/s"}
    row = levels.iloc[1]
    assert row["ttft_p50_low_s"] <= row["ttft_p50_s"] <= row["ttft_p50_high_s"]
    assert row["s_per_output_token"] == pytest.approx(1 / row["output_tokens_per_s"])
    # 40 requests support no p99 early-stopping estimate: said, no number
    assert pd.isna(row["ttft_p99_es_s"]) and "662" in row["ttft_p99_note"]


def test_summary_per_level_over_runs_with_between_run_intervals():
    table = load_summary(load_runs(_runs()))
    assert len(table) == 2 * 3  # runtime x level
    row = table[(table["runtime"] == "native") & (table["rate"] == 4.0)].iloc[0]
    assert row["n_runs"] == 4 and row["requests"] == 160
    assert row["ttft_p90_ci95_low_s"] < row["ttft_p90_s"] < row["ttft_p90_ci95_high_s"]
    assert row["ttft_p90_ci_method"] == "between 4 runs (t)"
    # 40 requests per run cannot bound a p99: no interval, and why
    assert pd.isna(row["ttft_p99_ci95_low_s"]) and pd.isna(row["ttft_p99_ci95_high_s"])
    assert row["ttft_p99_ci_method"] == "none: 40 requests per run, at least 368 for a 95% interval of the p99"
    # 40 requests within the limits: met by the sample, not confirmed by early stopping
    assert row["target"] == TARGET_TEXT[None]
    assert target_text([True, False, None]) == ("1 of 3 runs met; 1 of 3 runs missed; 1 of 3 runs "
                                                + TARGET_TEXT[None])
    assert row["max_rate_rps"] == pytest.approx(0.8)
    # the closed loop's requests/s is the capacity; a highest rate above it is said to be a
    # short run's transient
    assert row["capacity_rps"] > 0
    beyond = load_summary(load_runs(_runs().assign(max_rate_rps=1000.0)))
    assert beyond["note"].str.contains("above the server's capacity").all()
    assert not table["note"].str.contains("above the server's capacity").any()
    assert "synthetic weights" in row["note"]
    one = load_summary(load_runs(_runs(repeats=1)))
    assert (one["ttft_p90_ci_method"] == "within the run (order statistics)").all()


def test_verdicts_per_level_see_a_20_percent_slower_ttft_and_equal_tpot():
    table = load_verdicts(load_runs(_runs(slowdown=1.2)), campaign_settings({}))
    ttft = table[table["metric"] == "ttft_p90_s"]
    assert len(ttft) == 3 and set(ttft["verdict"]) == {"slower"}
    # the p99 of 40 requests: inconclusive, saying why
    p99 = table[table["metric"] == "ttft_p99_s"]
    assert set(p99["verdict"]) == {"inconclusive"}
    assert p99["verdict_text"].str.startswith("inconclusive: 40 requests per run cannot bound a p99 (at least 368").all()
    assert ttft["overhead_pct"].between(10, 30).all()
    assert (ttft["pairing"] == SAME_BLOCK).all() and (ttft["n"] == 4).all()
    # throughput is compared where the level sets its own pace: an open loop's is its rate
    tput = table[table["metric"] == "s_per_output_token"]
    assert list(tput["level_label"]) == ["closed loop, concurrency 1"]
    best = table[table["metric"] == "s_per_request_at_max_rate"]
    assert len(best) == 1 and best["overhead_pct"].iloc[0] == pytest.approx(20, abs=0.5)
    same = load_verdicts(load_runs(_runs(slowdown=1.0)), campaign_settings({}))
    assert "slower" not in set(same[same["metric"] == "tpot_p99_s"]["verdict"])


def test_no_load_levels_gives_empty_tables():
    runs = _runs().assign(load_levels=None)
    assert load_runs(runs).empty and load_summary(load_runs(runs)).empty
    assert load_verdicts(load_runs(runs), campaign_settings({})).empty


def test_load_args_from_a_workload_config():
    load = {"rates": [0.5, 2], "arrival": "gamma", "burstiness": 0.5, "seed": 3, "requests": 24,
            "max_in_flight": 0, "offline": True, "target": {"ttft_s": 1.0, "tpot_s": 0.1},
            "max_rate_steps": 2}
    args = load_args(load)
    assert args[args.index("--request-rates") + 1] == "0.5,2"
    assert args[args.index("--target") + 1] == "ttft_s=1,tpot_s=0.1"
    assert "--offline" in args and args[args.index("--max-rate-steps") + 1] == "2"
    assert args[args.index("--burstiness") + 1] == "0.5"
    assert load_args({}) == []
    targets = workload_targets({"workloads": {"a": {"load": {"target": "llama2-70b"}}, "b": {}}}, ["a", "b"])
    assert targets["a"]["ttft_s"] == 2.0 and targets["b"] is None


def test_pareto_front_keeps_the_levels_nothing_beats_on_both():
    tput = [10, 20, 30, 25, 30]
    lat = [0.1, 0.2, 0.5, 0.6, 0.4]
    assert list(pareto_front(tput, lat)) == [True, True, False, False, True]


def test_figures_draw_and_say_when_there_is_nothing():
    table = load_summary(load_runs(_runs()))
    targets = {"llm": {"name": "llama2-70b", "ttft_s": 2.0, "tpot_s": 0.2, "percentile": 0.99}}
    for fig in (latency_throughput_figure(table, targets), goodput_figure(table, targets),
                distribution_figure(pd.DataFrame(), targets), goodput_figure(table, {})):
        assert fig.axes


def test_the_payloads_load_arguments_are_checked_before_a_server_starts(capsys):
    import sys

    from conftest import REPO

    sys.path.insert(0, str(REPO / "scripts"))
    import infer_llm

    base = ["--engine", "llamacpp", "--model", "m.gguf", "--prompts", "p.txt", "--out", "o.json",
            "--max-tokens", "16"]
    for extra, message in ((["--request-rates", "1,x"], "--request-rates must be comma-separated numbers"),
                           (["--request-rates", "1,-2"], "every rate must be a positive number"),
                           (["--target", "nope"], "--target 'nope'"),
                           (["--target", "ttft_s=1"], "--target 'ttft_s=1'"),
                           (["--burstiness", "0"], "--burstiness must be a positive number"),
                           (["--output-tokens", "4:32"], "exceeds --max-tokens 16"),
                           (["--input-words", "9:3"], "--input-words '9:3'")):
        with pytest.raises(SystemExit) as exit_:
            infer_llm.main(base + extra)
        assert exit_.value.code == 2 and message in capsys.readouterr().err, extra


def test_generated_lengths_are_the_same_for_a_seed():
    import sys

    from conftest import REPO

    sys.path.insert(0, str(REPO / "scripts"))
    from llm_load import generated_prompts

    a = generated_prompts(50, (3, 9), (4, 16), seed=5)
    assert a == generated_prompts(50, (3, 9), (4, 16), seed=5) != generated_prompts(50, (3, 9), (4, 16), 6)
    assert {3, 9} <= {len(p["prompt"].split()) for p in a} and all(3 <= len(p["prompt"].split()) <= 9 for p in a)
    assert min(p["max_tokens"] for p in a) >= 4 and max(p["max_tokens"] for p in a) <= 16


def test_the_cli_prints_the_load_verdicts_and_levels(tmp_path, capsys):
    from scalesweep.cli import main

    path = tmp_path / "runs.csv"
    _runs(slowdown=1.2).to_csv(path, index=False)
    assert main(["load", str(path), "--format", "csv"]) == 0
    out = pd.read_csv(__import__("io").StringIO(capsys.readouterr().out))
    ttft = out[out["metric"] == "ttft_p90_s"]
    assert len(ttft) == 3 and set(ttft["verdict"]) == {"slower"}
    assert main(["load", str(path), "--levels", "--format", "csv"]) == 0
    assert "ttft_p99_ci95_low_s" in capsys.readouterr().out
    _runs().assign(load_levels=None).to_csv(path, index=False)
    assert main(["load", str(path)]) == 2
    assert "no run measured load levels" in capsys.readouterr().err


def test_the_same_bisection_grid_point_is_not_called_equivalent_beyond_its_resolution():
    """Both sides found 7.07 requests/s between the same grid points (7.07 met, 8.41
    missed: 19% apart): the runs know the rate to 19%, so a 5% margin cannot be claimed."""
    runs = _runs(slowdown=1.0).assign(max_rate_rps=7.071, max_rate_missed_rps=8.409)
    settings = {**campaign_settings({}), "margin_pct": 5.0}
    best = load_verdicts(load_runs(runs), settings)
    best = best[best["metric"] == "s_per_request_at_max_rate"].iloc[0]
    assert best["verdict"] == "inconclusive" and best["resolution_pct"] == pytest.approx(18.9, abs=0.1)
    assert "resolves the highest rate to 19%" in best["verdict_text"]
    fine = load_verdicts(load_runs(runs.assign(max_rate_missed_rps=7.2)), settings)
    assert fine[fine["metric"] == "s_per_request_at_max_rate"].iloc[0]["verdict"] == "equivalent"


def test_the_highest_rate_is_bracketed_below_the_lowest_miss_even_when_not_monotone():
    """Rates 2 (met, unconfirmed), 5 (missed) and 10 (met by a short level's luck): the
    bracket is 2 .. 5, never "at least 10", and the result says the levels were not
    monotone."""
    import sys

    from conftest import REPO

    sys.path.insert(0, str(REPO / "scripts"))
    from llm_load import LoadRun

    run = LoadRun(None, [{"prompt": "x"}], target={"ttft_s": 1.0, "tpot_s": 0.1}, requests_out=None,
                  arrival="poisson", burstiness=1.0, seed=0, n_open=4, max_in_flight=0)
    run.levels = [{"rate": 2.0, "meets_target": None}, {"rate": 5.0, "meets_target": False},
                  {"rate": 10.0, "meets_target": None}]
    best = run.max_rate(steps=0, tolerance=0.05)
    assert best["bound"] == "bisection" and best["max_rate_rps"] == 2.0 and best["missed_rps"] == 5.0
    assert "not monotone: 10 requests/s met the target above 5" in best["note"]
    run.levels = [{"rate": 2.0, "meets_target": False}, {"rate": 5.0, "meets_target": None}]
    none = run.max_rate(steps=0, tolerance=0.05)
    assert none["max_rate_rps"] is None and "the lowest measured rate, 2 requests/s, missed" in none["note"]
    run.levels = [{"rate": 2.0, "meets_target": True}, {"rate": 5.0, "meets_target": None}]
    assert run.max_rate(steps=0, tolerance=0.05)["bound"] == "at least"


def test_distributions_read_every_request_with_ttft_from_its_scheduled_arrival(tmp_path):
    from scalesweep.report.load_figures import request_rows

    point = tmp_path / "p"
    point.mkdir()
    (point / "requests.jsonl").write_text("\n".join(json.dumps(r) for r in [
        {"level": 1, "ok": True, "t_arrival": 1.0, "t_send": 1.2, "t_first": 1.5, "t_end": 2.5,
         "output_tokens": 11},
        {"level": 1, "ok": False, "t_arrival": 2.0, "t_send": 2.0},
        {"level": 0, "ok": True, "t_arrival": 0.0, "t_send": 0.0, "t_first": 0.1, "t_end": 0.2,
         "output_tokens": 2}]))
    runs = pd.DataFrame([{"workload": "llm", "model_label": "m", "nodes": 1, "gpus": 0,
                          "runtime": "native", "disturbed": False, "path": str(point / "metrics.json"),
                          "load_levels": json.dumps([{"level": 0, "shape": "closed"},
                                                     {"level": 1, "shape": "poisson", "rate": 2.0}])}])
    rows = request_rows(runs)
    assert len(rows) == 1 and rows.iloc[0]["rate"] == 2.0
    assert rows.iloc[0]["ttft_s"] == pytest.approx(0.5) and rows.iloc[0]["tpot_s"] == pytest.approx(0.1)


def test_a_level_without_its_request_count_is_summarised_not_a_crash():
    """A record without a level's "n" (an older or hand-edited metrics.json) made
    load_summary raise (int of NaN); its requests count as 0 and the CI says why."""
    levels = load_runs(_runs()).drop(columns=["n"])
    table = load_summary(levels)
    assert len(table) == 2 * 3 and (table["requests"] == 0).all()
    row = table[(table["runtime"] == "native") & (table["rate"] == 4.0)].iloc[0]
    assert row["ttft_p99_ci_method"].startswith("none: a run without its request count")
    levels = load_runs(_runs())
    levels.loc[levels.index[:3], "n"] = np.nan
    assert load_summary(levels)["requests"].sum() == 40 * (8 * 3 - 3)
