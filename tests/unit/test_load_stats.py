"""scalesweep.record.load (issue #30): open-loop arrivals, quantiles and their intervals,
MLPerf LoadGen's early stopping, latency targets, goodput, the max-rate bisection.

LoadGen's numbers are checked against a line-by-line Python port of its own code
(``LoadGenFinder``: mlcommons/inference loadgen/early_stopping.cc and the loop of
loadgen/results.cc PerformanceSummary::EarlyStopping, commit
b66003e10e2db4b8c36a448b0545ec90fcc6e9e9), not against the module's own arithmetic.
"""

from __future__ import annotations

import bisect
import json
import math
import random
import statistics

import numpy as np
import pytest

from scalesweep.record import load
from scalesweep.record.load import (ARRIVAL_SHAPES, MLPERF_PRESETS, arrival_times,
                                    early_stopping_estimate, early_stopping_min_queries,
                                    goodput, itl_gaps, level_summary, max_rate_bisect, meets,
                                    quantile, quantile_ci, target_of, tpot_s)


# ---- LoadGen's early stopping, ported from loadgen/early_stopping.cc as written ----------

def _lbeta(x, y):
    return math.lgamma(x) + math.lgamma(y) - math.lgamma(x + y)


def _hyp2f1_a1(b, c, x):
    tol, term, result, i = 1.0 / (1 << 33), 1.0, 1.0, 0
    while abs(term) > tol:
        term *= (b + i) * x / (c + i)
        result += term
        i += 1
    return result


def _odds(h, t, p, d):  # beta_regularized(p - d, h, 1 + t)
    x, a, b = p - d, h, 1 + t
    return math.exp(a * math.log(x) + (b - 1) * math.log(1 - x) - _lbeta(a, b)) / a \
        * _hyp2f1_a1(1 - b, 1 + a, x / (x - 1))


def _find_min_passing(min_h, max_h, t, p, d, c):
    count = max_h - min_h
    while count > 0:
        step = count // 2
        h = min_h + step
        if _odds(h, t, p, d) < 1 - c:
            count = step
        else:
            min_h = h + 1
            count -= step + 1
    return min_h


class LoadGenFinder:
    """MinPassingQueriesFinder, its cache and bracket included (int64 casts truncate)."""

    def __init__(self):
        self.caches = {}

    def __call__(self, t, p, d, c):
        cache = self.caches.setdefault((p, d, c), {})
        if t in cache:
            return cache[t]
        keys = sorted(cache)
        i = bisect.bisect_left(keys, t)
        x0, y0, x1, y1 = -1, 0, 0, math.ceil(math.log(1 - c) / math.log(p - d))
        if i > 0:
            i -= 1
            x1, y1 = keys[i], cache[keys[i]]
        if i > 0:
            i -= 1
            x0, y0 = keys[i], cache[keys[i]]
        min_slope = (p - d) / (1 - p + d)
        max_slope = float((y1 - y0) * (x1 - x0))
        min_h = int((t - x1) * min_slope + y1)
        max_h = int((t - x1) * max_slope + y1 + 1)
        cache[t] = h = _find_min_passing(min_h, max_h, t, p, d, c)
        return h


def loadgen_single_stream(n, p, c=0.99, d=0.0):
    """(t, min queries) as results.cc's SingleStream case computes them; t None below."""
    find = LoadGenFinder()
    h_min = find(1, p, d, c)
    if n < h_min + 1:
        return None, h_min + 1
    t = 1
    for i in range(2, n + 1):
        if n < find(i, p, d, c) + i:
            t = i - 1
            break
    return t, h_min + 1


# ---- arrivals -------------------------------------------------------------------------

def _gaps(times):
    return [b - a for a, b in zip([0.0] + times, times)]


def _cv(xs):
    return statistics.pstdev(xs) / statistics.fmean(xs)


def test_poisson_arrivals_rate_and_cv():
    times = arrival_times(20000, 5.0, "poisson", seed=1)
    assert len(times) == 20000 and times == sorted(times) and times[0] > 0
    assert len(times) / times[-1] == pytest.approx(5.0, rel=0.03)
    assert _cv(_gaps(times)) == pytest.approx(1.0, abs=0.05)


@pytest.mark.parametrize("k, cv", [(0.25, 2.0), (1.0, 1.0), (4.0, 0.5)])
def test_gamma_arrivals_cv_is_one_over_sqrt_k(k, cv):
    times = arrival_times(20000, 5.0, "gamma", burstiness=k, seed=2)
    assert len(times) / times[-1] == pytest.approx(5.0, rel=0.05)
    assert _cv(_gaps(times)) == pytest.approx(cv, rel=0.08)


def test_arrivals_deterministic_for_a_seed():
    for shape in ("poisson", "gamma"):
        assert arrival_times(50, 2.0, shape, 0.5, seed=7) == arrival_times(50, 2.0, shape, 0.5,
                                                                           seed=7)
        assert arrival_times(50, 2.0, shape, 0.5, seed=7) != arrival_times(50, 2.0, shape, 0.5,
                                                                           seed=8)
    assert arrival_times(0, 2.0) == []


def test_constant_arrivals_exact():
    times = arrival_times(100, 4.0, "constant")
    assert times[0] == 0.25 and times[-1] == 25.0
    assert all(g == pytest.approx(0.25, abs=1e-12) for g in _gaps(times))
    assert set(ARRIVAL_SHAPES) == {"poisson", "gamma", "constant"}


@pytest.mark.parametrize("kwargs, named", [
    ({"n": -1}, "-1"), ({"n": 2.5}, "2.5"), ({"n": True}, "True"),
    ({"rate": 0}, "rate"), ({"rate": -3.0}, "-3.0"), ({"rate": math.inf}, "inf"),
    ({"rate": math.nan}, "nan"), ({"burstiness": 0}, "burstiness"),
    ({"shape": "weibull"}, "weibull")])
def test_arrivals_bad_inputs(kwargs, named):
    args = {"n": 10, "rate": 1.0, **kwargs}
    with pytest.raises(ValueError, match=named):
        arrival_times(**args)


# ---- quantiles and their intervals ----------------------------------------------------

def test_quantile_matches_numpy():
    rng = np.random.default_rng(0)
    for n in (1, 2, 3, 10, 101, 1000):
        xs = rng.lognormal(size=n).tolist()
        for q in (0.0, 0.1, 0.5, 0.9, 0.99, 0.999, 1.0):
            assert quantile(xs, q) == pytest.approx(float(np.percentile(xs, 100 * q)),
                                                    rel=1e-12)
    assert quantile([], 0.5) is None
    with pytest.raises(ValueError, match="1.5"):
        quantile([1.0], 1.5)


def test_quantile_ci_coverage_exponential():
    rng, true_q, hits, widths = random.Random(3), -math.log(0.1), 0, []
    for _ in range(300):
        xs = [rng.expovariate(1.0) for _ in range(400)]
        ci = quantile_ci(xs, 0.9)
        assert ci["low"] is not None and ci["high"] is not None
        assert ci["low"] <= ci["estimate"] <= ci["high"]
        hits += ci["low"] <= true_q <= ci["high"]
        widths.append(ci["high"] - ci["low"])
    assert hits / 300 >= 0.93
    assert statistics.fmean(widths) < 0.8  # sd of the p90 estimate is about 0.15


def test_quantile_ci_small_n_has_no_bound():
    ci = quantile_ci([1.0, 2.0, 3.0, 4.0, 5.0], 0.9)
    assert ci["high"] is None and ci["low"] is not None  # 5 values cannot bound p90 above
    ci = quantile_ci([1.0, 2.0], 0.5)
    assert ci["low"] is None and ci["high"] is None and ci["estimate"] == 1.5
    assert quantile_ci([], 0.5)["estimate"] is None
    assert set(ci) == {"n", "q", "estimate", "low", "high", "confidence", "method"}


def test_quantile_ci_large_n_is_stable():
    rng = random.Random(4)
    xs = [rng.random() for _ in range(100000)]
    ci = quantile_ci(xs, 0.99)
    assert ci["low"] < 0.99 < ci["high"] and ci["high"] - ci["low"] < 0.003


# ---- early stopping ---------------------------------------------------------------------

def test_min_queries_reproduce_loadgen():
    # loadgen/results.cc: "Need to process at least h_min + 1 queries"; 662 is also
    # loadgen/mlperf.conf's *.MultiStream.min_query_count.
    assert early_stopping_min_queries(0.9) == 64
    assert early_stopping_min_queries(0.99) == 662
    for q in (0.5, 0.9, 0.95, 0.99, 0.999):
        assert early_stopping_min_queries(q) == loadgen_single_stream(1, q)[1]


@pytest.mark.parametrize("q, ns", [(0.9, [64, 65, 100, 333, 1000, 2500]),
                                   (0.99, [662, 663, 1000, 2777, 5000])])
def test_estimate_matches_loadgen_port(q, ns):
    rng = random.Random(5)
    for n in ns:
        xs = [rng.expovariate(1.0) for _ in range(n)]
        t, need = loadgen_single_stream(n, q)
        es = early_stopping_estimate(xs, q)
        assert es["supported"] and es["min_queries"] == need
        assert es["overlatency_allowed"] == t
        assert es["estimate"] == sorted(xs)[n - t]


def test_server_rule_matches_loadgen_port():
    # results.cc, case Server: a fresh finder per call; passes iff n >= h(t) + t
    for q in (0.9, 0.99):
        r = 1 - q
        for t in (0, 1, 2, 5, 17, 60):
            h = LoadGenFinder()(t, q, 0.0, 0.99)
            assert load._min_total(t, r, 0.99) == h + t


def test_estimate_below_minimum():
    es = early_stopping_estimate([0.1] * 120, 0.99)
    assert es["estimate"] is None and not es["supported"]
    assert es["note"] == "p99 needs at least 662 requests; this run has 120"
    assert early_stopping_estimate([0.1] * 63, 0.9)["estimate"] is None
    assert early_stopping_estimate([0.1] * 64, 0.9)["estimate"] == 0.1


def test_estimate_is_conservative_and_close():
    rng, true_q, above, rel = random.Random(6), -math.log(0.1), 0, []
    for _ in range(100):
        es = early_stopping_estimate([rng.expovariate(1.0) for _ in range(2000)], 0.9)
        above += es["estimate"] >= true_q
        rel.append(es["estimate"] / true_q - 1)
    assert above >= 95  # 99% confidence that it is not below the quantile
    assert 0 < statistics.fmean(rel) < 0.12


# ---- targets, goodput -----------------------------------------------------------------

def req(ttft, tpot, n_out=11, ok=True, arrival=0.0, send=None):
    send = arrival if send is None else send
    first = arrival + ttft
    end = first + tpot * (n_out - 1)
    return {"ok": ok, "t_arrival": arrival, "t_send": send, "t_first": first, "t_end": end,
            "t_tokens": [first + i * tpot for i in range(n_out)], "input_tokens": 100,
            "output_tokens": n_out}


def test_presets_from_mlperf_conf():
    assert MLPERF_PRESETS["llama2-70b"]["ttft_s"] == 2.0
    assert MLPERF_PRESETS["llama2-70b"]["tpot_s"] == 0.2
    assert MLPERF_PRESETS["llama3_1-8b-interactive"]["tpot_s"] == 0.03
    for name, p in MLPERF_PRESETS.items():
        assert p["ttft_s"] > 0 and p["tpot_s"] > 0 and p["percentile"] == 0.99
        assert "mlperf.conf" in p["source"] and name in p["source"]


def test_target_of():
    assert target_of("llama3.1-8b") == {"name": "llama3_1-8b", "ttft_s": 2.0, "tpot_s": 0.1,
                                        "percentile": 0.99}
    assert target_of({"ttft_s": 1, "tpot_s": 0.05})["percentile"] == 0.99
    with pytest.raises(ValueError, match="nope.*llama2-70b"):
        target_of("nope")
    with pytest.raises(ValueError, match="-1"):
        target_of({"ttft_s": -1, "tpot_s": 0.05})
    with pytest.raises(ValueError, match="tpot_s"):
        target_of({"ttft_s": 1})


def test_tpot_itl_and_meets():
    r = req(0.5, 0.04)
    assert tpot_s(r) == pytest.approx(0.04)
    assert itl_gaps(r) == pytest.approx([0.04] * 10)
    one = req(0.5, 0.0, n_out=1)
    assert tpot_s(one) is None and itl_gaps(one) == [] and itl_gaps({}) == []
    target = {"ttft_s": 1.0, "tpot_s": 0.05}
    assert meets(r, target) and meets(one, target)
    assert not meets(req(1.5, 0.01), target) and not meets(req(0.1, 0.06), target)
    assert not meets({**r, "ok": False}, target)
    # TTFT runs from the scheduled arrival: a late send is charged
    assert not meets(req(0.5, 0.01, arrival=0.0, send=0.8) | {"t_first": 1.2}, target)


def test_goodput():
    reqs = [req(0.5, 0.04), req(0.9, 0.05), req(1.2, 0.01), req(0.2, 0.3),
            req(0.3, 0.01, ok=False), req(0.4, 0.0, n_out=1)]
    g = goodput(reqs, {"ttft_s": 1.0, "tpot_s": 0.05}, duration_s=2.0)
    assert g == {"goodput_rps": 1.5, "n_met": 3, "n": 6, "fraction_met": 0.5}
    g = goodput(reqs, "llama2-70b", duration_s=3.0)  # 2 s TTFT, 0.2 s TPOT
    assert g["n_met"] == 4 and g["goodput_rps"] == pytest.approx(4 / 3)
    assert goodput([], "llama2-70b", 1.0)["fraction_met"] is None


# ---- a load level -----------------------------------------------------------------------

def _level(n, ttft_over=0, fail=0, seed=8):
    rng = random.Random(seed)
    reqs = []
    for i, t in enumerate(arrival_times(n, 10.0, seed=seed)):
        ttft = 3.0 if i < ttft_over else rng.uniform(0.1, 0.5)
        reqs.append(req(ttft, rng.uniform(0.01, 0.03), n_out=rng.randint(1, 20),
                        arrival=t, ok=i < n - fail))
    return reqs


def test_level_summary_shape_and_json():
    reqs = _level(1000, fail=5)
    s = level_summary(reqs, 100.0, target="llama2-70b")
    json.dumps(s, allow_nan=False)
    assert (s["n"], s["n_ok"], s["n_failed"]) == (1000, 995, 5)
    assert s["requests_per_s"] == pytest.approx(9.95)
    for key in ("ttft", "tpot", "itl", "e2e", "queue"):
        m = s[key]
        assert set(m) >= {"n", "mean", "p50", "p90", "p99", "early_stopping"}
        assert m["p90"]["low"] <= m["p90"]["estimate"] <= m["p90"]["high"]
        assert set(m["early_stopping"]) == {"p90", "p99"}
    assert s["ttft"]["early_stopping"]["p99"]["supported"]
    assert s["queue"]["mean"] == 0.0
    # 5 failed of 1000 at p99: the percentile passes, early stopping cannot be sure
    assert s["meets_target"] is None and "TTFT" in s["meets_target_reason"]
    assert s["target_check"]["ttft"]["over_limit"] == 5 and s["n_met"] == 995
    s = level_summary(_level(1000, fail=10), 100.0, target="llama2-70b")
    assert s["meets_target"] is False  # sorted[int(0.99 n)] is a failed request


def test_level_summary_meets_target():
    assert level_summary(_level(1000), 100.0, target="llama2-70b")["meets_target"] is True
    s = level_summary(_level(1000, ttft_over=30), 100.0, target="llama2-70b")
    assert s["meets_target"] is False and s["target_check"]["ttft"]["over_limit"] == 30
    s = level_summary(_level(100), 10.0, target="llama2-70b")
    assert s["meets_target"] is None
    assert "needs at least 459 requests with 0 over" in s["target_check"]["ttft"]["reason"]
    s = level_summary([], 1.0, target="llama2-70b")
    assert s["meets_target"] is None and s["ttft"]["p50"]["estimate"] is None
    json.dumps(s, allow_nan=False)
    assert "meets_target" not in level_summary(_level(50), 5.0)


# ---- max rate ---------------------------------------------------------------------------

def test_max_rate_bisect_finds_threshold():
    calls = []

    def measure(rate):
        calls.append(rate)
        return rate <= 7.3

    out = max_rate_bisect(measure, 1.0, 20.0, steps=20, tolerance=0.05)
    assert 7.3 - 0.05 <= out["max_rate"] <= 7.3
    assert out["tried"][0] == (1.0, True) and [r for r, _ in out["tried"]] == calls
    assert out["bracket"][1] - out["bracket"][0] <= 0.05 and 20.0 not in calls
    out = max_rate_bisect(lambda r: False, 1.0, 20.0, steps=5, tolerance=0.1)
    assert out["max_rate"] is None and out["tried"] == [(1.0, False)]
    assert len(max_rate_bisect(lambda r: True, 1.0, 2.0, steps=3, tolerance=0)["tried"]) == 4
    with pytest.raises(ValueError, match="high"):
        max_rate_bisect(measure, 5.0, 1.0, steps=3, tolerance=0.1)
    # a bracket the caller measured: low not measured again; geometric midpoints
    calls.clear()
    out = max_rate_bisect(measure, 1.0, 100.0, steps=1, tolerance=0, low_known=True)
    assert calls == [pytest.approx(10.0)] and out["max_rate"] == 1.0 and out["bracket"] == [1.0, 10.0]


def test_a_level_offers_exactly_its_rate_and_itl_has_no_early_stopping():
    from scalesweep.record.load import CORRELATED, bounded_ci_min_n

    times = arrival_times(40, 2.0, "poisson", 1.0, seed=1)
    assert times[-1] == pytest.approx(20.0)  # 40 requests in 40 / 2 seconds
    raw = arrival_times(40, 2.0, "poisson", 1.0, seed=1, exact_rate=False)
    assert raw[-1] != pytest.approx(20.0, rel=0.01)
    assert [a / b for a, b in zip(times, raw)] == pytest.approx([times[-1] / raw[-1]] * 40)
    assert bounded_ci_min_n(0.9) == 36 and bounded_ci_min_n(0.99) == 368
    reqs = [{"ok": True, "t_send": i, "t_first": i + 0.1, "t_end": i + 1.0, "output_tokens": 10,
             "t_tokens": [i + 0.1 * k for k in range(1, 11)]} for i in range(100)]
    level = level_summary(reqs, 100.0)
    assert level["itl"]["early_stopping"]["p90"] == {"n": 900, "q": 0.9, "estimate": None,
                                                      "supported": False, "note": CORRELATED}
    assert level["ttft"]["early_stopping"]["p90"]["supported"] is True
