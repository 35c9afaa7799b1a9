"""LLM serving under load (issue #30): open-loop arrivals, latency percentiles with
confidence intervals, MLPerf LoadGen's early stopping, latency targets and goodput.

Standard library only (the LLM payload imports it inside containers). Times are seconds.
A request is a dict: ``ok`` (bool), ``t_arrival`` (its scheduled arrival, optional),
``t_send``, ``t_first`` (first token, or None), ``t_end``, ``t_tokens`` (token times,
optional), ``input_tokens`` (the server's count, chat template included; or
``prompt_text_tokens``, the text alone: ``request_input_tokens``), ``output_tokens``, all
times on one clock. Definitions:

- TTFT = ``t_first - t_arrival`` (``t_send`` where there is no ``t_arrival``): LoadGen
  times a query from its *scheduled* time (loadgen/loadgen.cc, ``sched.delta(...)``), so a
  client that falls behind its schedule is charged, not hidden (no coordinated omission);
  vLLM's ``bench serve`` times from the send.
- TPOT = ``(t_end - t_first) / (output_tokens - 1)``, None below 2 tokens: vLLM
  (vllm/benchmarks/serve.py ``calculate_metrics``) and LoadGen (loadgen/logging.cc,
  ``(latency - token_latency) / (n_tokens - 1)``) alike.
- ITL: the gaps between consecutive ``t_tokens``; e2e = ``t_end - t_arrival`` (or
  ``t_send``); queue = ``t_send - t_arrival`` (client-side lag behind the schedule).

MLPerf numbers come from github.com/mlcommons/inference at commit
b66003e10e2db4b8c36a448b0545ec90fcc6e9e9 (loadgen/early_stopping.cc, loadgen/results.cc,
loadgen/mlperf.conf; mlperf.conf last changed in b0662794362bc2c22c33c3e4a0c66ef83411ecf0).
"""

from __future__ import annotations

import math
import random
from typing import Any, Callable, Iterable

ARRIVAL_SHAPES = ("poisson", "gamma", "constant")
PERCENTILES = {"p50": 0.5, "p90": 0.9, "p99": 0.99}
# LoadGen's early stopping: results.cc PerformanceSummary::EarlyStopping hard-codes
# ``confidence = 0.99`` and ``tolerance = 0.0``.
ES_CONFIDENCE = 0.99
ES_TOLERANCE = 0.0

_CONF = "loadgen/mlperf.conf, mlcommons/inference@b0662794362bc2c22c33c3e4a0c66ef83411ecf0"
# <model>.Server.ttft_latency / tpot_latency (ms in the file); the percentile is
# ``*.Server.target_latency_percentile = 99``, which LoadGen applies to TTFT and TPOT
# (results.h: token_target_latency_percentile, target_tpot_percentile).
_SERVER_MS = {
    "llama2-70b": (2000, 200), "llama2-70b-interactive": (450, 40),
    "mixtral-8x7b": (2000, 200),
    "llama3_1-405b": (6000, 175), "llama3_1-405b-interactive": (4500, 80),
    "llama3_1-8b": (2000, 100), "llama3_1-8b-interactive": (500, 30),
    "deepseek-r1": (2000, 80), "deepseek-r1-interactive": (1500, 15),
    "gpt-oss-120b": (3000, 80), "gpt-oss-120b-interactive": (2000, 15),
}
MLPERF_PRESETS: dict[str, dict] = {
    name: {"ttft_s": ttft / 1000, "tpot_s": tpot / 1000, "percentile": 0.99,
           "source": f"{_CONF}: {name}.Server.ttft_latency = {ttft}, "
                     f"{name}.Server.tpot_latency = {tpot} (ms); "
                     "*.Server.target_latency_percentile = 99"}
    for name, (ttft, tpot) in _SERVER_MS.items()}


def _number(name: str, value: Any, low: float = 0.0, strict: bool = True) -> float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) \
        and math.isfinite(value) and (value > low if strict else value >= low)
    if not ok:
        raise ValueError(f"{name} must be a finite number {'>' if strict else '>='} {low}, "
                         f"got {value!r}")
    return float(value)


def _fraction(name: str, value: Any, open_: bool = False) -> float:
    if not (isinstance(value, (int, float)) and not isinstance(value, bool)
            and (0 < value < 1 if open_ else 0 <= value <= 1)):
        raise ValueError(f"{name} must be in {'(0, 1)' if open_ else '[0, 1]'}, got {value!r}")
    return float(value)


def arrival_times(n: int, rate: float, shape: str = "poisson", burstiness: float = 1.0,
                  seed: int = 0, exact_rate: bool = True) -> list[float]:
    """Arrival offsets (s from 0) of ``n`` open-loop requests at ``rate`` per second.

    The gaps are independent: "poisson" exponential with mean 1/rate; "gamma" gamma with
    shape k = ``burstiness`` and scale 1/(rate*k) (vLLM ``bench serve``'s definition: mean
    1/rate, coefficient of variation 1/sqrt(k); 1 is Poisson, below 1 burstier, above 1
    more regular); "constant" exactly 1/rate. As in vLLM, the first request arrives after
    its own gap, not at 0. With ``exact_rate`` (the default, as vLLM's ``bench serve``
    does) the times are scaled so that the last lands on n/rate: the level offers exactly
    ``rate`` (n requests in n/rate seconds), the gaps keep their shape; without it they
    are the raw samples, and the realised rate of a short level can differ from ``rate``
    by tens of percent (40 requests: the sample mean of 40 gaps). Deterministic for a
    ``seed`` (``random.Random(seed)``).
    """
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise ValueError(f"n must be an integer >= 0, got {n!r}")
    rate = _number("rate", rate)
    burstiness = _number("burstiness", burstiness)
    if shape not in ARRIVAL_SHAPES:
        raise ValueError(f"shape must be one of {ARRIVAL_SHAPES}, got {shape!r}")
    if shape == "constant":
        return [(i + 1) / rate for i in range(n)]
    rng = random.Random(seed)
    if shape == "poisson":
        gap = lambda: rng.expovariate(rate)  # noqa: E731
    else:
        gap = lambda: rng.gammavariate(burstiness, 1.0 / (rate * burstiness))  # noqa: E731
    times, t = [], 0.0
    for _ in range(n):
        t += gap()
        times.append(t)
    if exact_rate and times and times[-1] > 0:
        scale = (n / rate) / times[-1]
        times = [x * scale for x in times]
    return times


def _sorted(values: Iterable[Any]) -> list[float]:
    xs = sorted(float(v) for v in values if v is not None)
    if any(math.isnan(x) for x in xs):
        raise ValueError("values must not contain NaN")
    return xs


def _quantile_sorted(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    i, frac = divmod(q * (len(xs) - 1), 1)
    i = int(i)
    return xs[i] if frac == 0 else xs[i] + (xs[i + 1] - xs[i]) * frac


def quantile(values: Iterable[Any], q: float) -> float | None:
    """The sample q-quantile by linear interpolation between order statistics, position
    q*(n-1) counted from 0 (numpy.percentile's default, method "linear", Hyndman & Fan
    type 7); None for no values. None values are skipped."""
    return _quantile_sorted(_sorted(values), _fraction("q", q))


def _binom_cdf(n: int, p: float) -> Callable[[int], float]:
    """k -> P(Binomial(n, p) <= k), exact: log-gamma pmf terms summed over mean +- (12 sd
    + 25), clipped to [0, n]; the mass outside is below 1e-30, taken as 0."""
    if p <= 0:
        return lambda k: 1.0 if k >= 0 else 0.0
    if p >= 1:
        return lambda k: 1.0 if k >= n else 0.0
    mean, sd = n * p, math.sqrt(n * p * (1 - p))
    lo, hi = max(0, int(mean - 12 * sd - 25)), min(n, int(mean + 12 * sd + 25))
    c, lp, lq = math.lgamma(n + 1), math.log(p), math.log1p(-p)
    cum, acc = [], 0.0
    for k in range(lo, hi + 1):
        acc += math.exp(c - math.lgamma(k + 1) - math.lgamma(n - k + 1) + k * lp
                        + (n - k) * lq)
        cum.append(min(acc, 1.0))
    return lambda k: 0.0 if k < lo else 1.0 if k > hi else cum[k - lo]


def _quantile_ci_sorted(xs: list[float], q: float, confidence: float) -> dict:
    n, alpha = len(xs), 1 - confidence
    out = {"n": n, "q": q, "estimate": _quantile_sorted(xs, q), "low": None, "high": None,
           "confidence": confidence,
           "method": "order statistics, equal-tailed binomial (the interval for a "
                     "quantile in Conover's Practical Nonparametric Statistics and Hahn & "
                     "Meeker's Statistical Intervals)"}
    if n == 0:
        return out
    F = _binom_cdf(n, q)
    # x_(l) <= Q_q fails iff fewer than l values lie below Q_q: P = F(l-1) <= alpha/2.
    l = _first(lambda j: F(j - 1) > alpha / 2, 1, n) - 1
    # x_(u) >= Q_q fails iff u or more values lie below it: P = 1 - F(u-1) <= alpha/2.
    u = _first(lambda j: F(j - 1) >= 1 - alpha / 2, 1, n)
    out["low"] = xs[l - 1] if l >= 1 else None
    out["high"] = xs[u - 1] if u <= n else None
    return out


def _first(pred: Callable[[int], bool], lo: int, hi: int) -> int:
    """The smallest j in [lo, hi] with pred(j) (monotone); hi + 1 where there is none."""
    while lo <= hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid - 1) if pred(mid) else (mid + 1, hi)
    return lo


def bounded_ci_min_n(q: float, confidence: float = 0.95) -> int:
    """The fewest values for which ``quantile_ci`` bounds the q-quantile on both sides
    (at 95%: 36 for p90, 368 for p99): below it, the sample percentile comes with no
    interval, and a figure of it rests on the sample's extremes."""
    q, alpha = _fraction("q", q, open_=True), 1 - _fraction("confidence", confidence, open_=True)
    # the upper bound needs F(n-1) = 1 - q^n >= 1 - alpha/2; the lower, (1-q)^n <= alpha/2
    return max(math.ceil(math.log(alpha / 2) / math.log(q)),
               math.ceil(math.log(alpha / 2) / math.log(1 - q)))


def quantile_ci(values: Iterable[Any], q: float, confidence: float = 0.95) -> dict:
    """Distribution-free confidence interval of the q-quantile from order statistics.

    With B ~ Binomial(n, q) the count of values below the true quantile Q_q, the interval
    [x_(l), x_(u)] (1-based order statistics) covers Q_q with probability F(u-1) - F(l-1)
    (continuous data; F the CDF of B). The construction is equal-tailed (the confidence
    interval for a quantile of Conover, Practical Nonparametric Statistics, and of Hahn &
    Meeker, Statistical Intervals): l is the largest index with F(l-1) <= alpha/2 and u the smallest
    with F(u-1) >= 1 - alpha/2, so each tail misses at most alpha/2 and the coverage is
    at least ``confidence`` (more for small n: the binomial is discrete). Where n is too
    small for an index on one side, that bound is None: the data cannot bound it.
    Returns {n, q, estimate (quantile()), low, high, confidence, method}.
    """
    return _quantile_ci_sorted(_sorted(values), _fraction("q", q),
                               _fraction("confidence", confidence, open_=True))


def _es_args(q: float, confidence: float, tolerance: float) -> float:
    q = _fraction("q", q, open_=True)
    _fraction("confidence", confidence, open_=True)
    if not (isinstance(tolerance, (int, float)) and 0 <= tolerance < q):
        raise ValueError(f"tolerance must be in [0, q), got {tolerance!r}")
    return 1 - q + tolerance  # a query's chance of being over the latency, LoadGen's 1-(p-d)


def _min_total(t: int, r: float, confidence: float) -> int:
    """LoadGen's h + t for ``t`` over-latency queries: the fewest queries n with
    P(Binomial(n, r) <= t) < 1 - confidence (early_stopping.cc find_min_passing:
    odds(h, t, p, d) = BetaRegularized[p - d, h, 1 + t] is that probability at n = h + t,
    and it falls as n grows)."""
    ok = lambda m: _binom_cdf(m, r)(t) < 1 - confidence  # noqa: E731
    lo, hi = t, max(2 * t, 1)  # P = 1 at n = t
    while not ok(hi):
        lo, hi = hi, 2 * hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    return hi


def early_stopping_min_queries(q: float, confidence: float = ES_CONFIDENCE,
                               tolerance: float = ES_TOLERANCE) -> int:
    """The fewest queries for which LoadGen's early stopping gives a q-percentile estimate:
    h_min + 1 with h_min = find_min_passing(t=1, ...) (results.cc, SingleStream and
    MultiStream: "Need to process at least h_min + 1 queries for early stopping"). At
    LoadGen's confidence 0.99 and tolerance 0: 64 for p90, 662 for p99 (mlperf.conf sets
    ``*.MultiStream.min_query_count = 662`` to match)."""
    return _min_total(1, _es_args(q, confidence, tolerance), confidence)


def _es_overlatency(n: int, r: float, confidence: float) -> int:
    """LoadGen's t for n queries: the largest t with n >= h(t) + t, i.e. with
    P(Binomial(n, r) <= t) < 1 - confidence; 0 where not even t = 1 passes."""
    F, t = _binom_cdf(n, r), 0
    while t < n and F(t + 1) < 1 - confidence:
        t += 1
    return t


def _early_stopping_sorted(xs: list[float], q: float, confidence: float,
                           tolerance: float) -> dict:
    n, r = len(xs), _es_args(q, confidence, tolerance)
    need = _min_total(1, r, confidence)
    out = {"n": n, "q": q, "estimate": None, "min_queries": need,
           "overlatency_allowed": None, "supported": n >= need, "confidence": confidence,
           "tolerance": tolerance}
    if n < need:
        return {**out, "note": f"p{100 * q:g} needs at least {need} requests; this run has {n}"}
    t = _es_overlatency(n, r, confidence)
    out["overlatency_allowed"] = t
    out["estimate"] = xs[n - t]  # LoadGen: sample_latencies[queries_issued - t]
    out["note"] = (f"p{100 * q:g} early-stopping estimate: value {n - t + 1} of {n} in ascending "
                   f"order ({t - 1} highest discarded), {confidence:g} confidence")
    return out


def early_stopping_estimate(values: Iterable[Any], q: float,
                            confidence: float = ES_CONFIDENCE,
                            tolerance: float = ES_TOLERANCE) -> dict:
    """MLPerf LoadGen's early-stopping q-percentile estimate (loadgen/results.cc,
    PerformanceSummary::EarlyStopping, SingleStream/MultiStream).

    A query is "over latency" with probability 1 - (q - tolerance) if the latency bound is
    the true q-percentile. LoadGen finds t, the most over-latency queries that n queries
    can hold while P(at most t of n over) < 1 - confidence still holds (the bound is then
    above the q-percentile at ``confidence``), and reports the t-th largest latency
    (``sorted[n - t]``, 0-based: it discards the t - 1 highest). Returns {n, q, estimate
    (None below min_queries), min_queries, overlatency_allowed (t), supported,
    confidence, tolerance, note}. Binomial probabilities are computed exactly here
    (LoadGen: a hypergeometric series) and give the same t (tests/unit/test_load_stats.py).
    """
    return _early_stopping_sorted(_sorted(values), q, confidence, tolerance)


def target_of(spec: str | dict) -> dict:
    """A latency target, normalized to {name, ttft_s, tpot_s, percentile}: a preset name
    (MLPERF_PRESETS; "llama3.1-8b" is read as LoadGen's "llama3_1-8b") or a dict
    {ttft_s, tpot_s, optional percentile (default 0.99), optional name}."""
    if isinstance(spec, str):
        key = spec.replace(".", "_")
        if key not in MLPERF_PRESETS:
            raise ValueError(f"unknown latency target {spec!r}; known: "
                             f"{', '.join(sorted(MLPERF_PRESETS))}")
        p = MLPERF_PRESETS[key]
        return {"name": key, "ttft_s": p["ttft_s"], "tpot_s": p["tpot_s"],
                "percentile": p["percentile"]}
    if not isinstance(spec, dict):
        raise ValueError(f"a latency target is a preset name or a dict, got {spec!r}")
    extra = set(spec) - {"name", "ttft_s", "tpot_s", "percentile"}
    if extra:
        raise ValueError(f"unknown latency target keys {sorted(extra)} in {spec!r}")
    if "ttft_s" not in spec or "tpot_s" not in spec:
        raise ValueError(f"a latency target needs ttft_s and tpot_s, got {spec!r}")
    return {"name": str(spec.get("name", "custom")),
            "ttft_s": _number("ttft_s", spec["ttft_s"]), "tpot_s": _number("tpot_s", spec["tpot_s"]),
            "percentile": _fraction("percentile", spec.get("percentile", 0.99), open_=True)}


def _since_start(request: dict, key: str) -> float | None:
    t, start = request.get(key), request.get("t_arrival")
    return None if t is None else t - (request["t_send"] if start is None else start)


def ttft_s(request: dict) -> float | None:
    """Time to first token from the scheduled arrival (t_send without one), or None."""
    return _since_start(request, "t_first")


def e2e_s(request: dict) -> float | None:
    """End-to-end latency from the scheduled arrival (t_send without one), or None."""
    return _since_start(request, "t_end")


def tpot_s(request: dict) -> float | None:
    """Time per output token after the first: (t_end - t_first) / (output_tokens - 1),
    None below 2 output tokens or without a first token (vLLM, LoadGen)."""
    n, first, end = request.get("output_tokens"), request.get("t_first"), request.get("t_end")
    if not n or n < 2 or first is None or end is None:
        return None
    return (end - first) / (n - 1)


def request_input_tokens(request: dict) -> dict:
    """A request's input tokens, each by what it counts: ``input_tokens`` (the server's
    own count of what it evaluated, the chat template included) and ``prompt_text_tokens``
    (the prompt text alone, by the server's tokenizer); None where not recorded. A record
    of before issue 40 held either in ``input_tokens``, its ``input_tokens_source`` saying
    which ("engine", or "prompt text, ...")."""
    tokens = request.get("input_tokens")
    text = request.get("prompt_text_tokens")
    if str(request.get("input_tokens_source") or "").startswith("prompt text"):
        tokens, text = None, tokens
    return {"input_tokens": tokens, "prompt_text_tokens": text}


def itl_gaps(request: dict) -> list[float]:
    """Inter-token latencies: the differences of consecutive ``t_tokens`` (none without)."""
    ts = request.get("t_tokens") or []
    return [b - a for a, b in zip(ts, ts[1:])]


def meets(request: dict, target: str | dict) -> bool:
    """Whether one request meets a target: ok, TTFT <= ttft_s, and TPOT <= tpot_s where it
    has a TPOT (vLLM's goodput counts a 1-token output's TPOT as 0)."""
    tg = target_of(target)
    ttft, tpot = ttft_s(request), tpot_s(request)
    return bool(request.get("ok")) and ttft is not None and ttft <= tg["ttft_s"] \
        and (tpot is None or tpot <= tg["tpot_s"])


def goodput(requests: list[dict], target: str | dict, duration_s: float) -> dict:
    """Goodput (DistServe, vLLM ``--goodput``): requests meeting the target per second of
    the level's duration. Failed requests count in n, never as met."""
    duration_s, tg = _number("duration_s", duration_s), target_of(target)
    met = sum(meets(r, tg) for r in requests)
    return {"goodput_rps": met / duration_s, "n_met": met, "n": len(requests),
            "fraction_met": met / len(requests) if requests else None}


def _check(values: list[float], n_failed: int, limit: float, q: float, confidence: float,
           tolerance: float) -> dict:
    """LoadGen's two Server-scenario tests of one latency against its limit, failed
    requests counted as over it: the percentile sorted[int(n*q)] <= limit
    (PerfConstraintsMet) and early stopping, n >= h(t) + t with t the count over the limit
    (EarlyStopping, case Server). passed: True both, False the first, None (too few
    requests to be ``confidence`` sure) only the second."""
    n, r = len(values) + n_failed, _es_args(q, confidence, tolerance)
    over = n_failed + sum(v > limit for v in values)
    out = {"limit_s": limit, "n": n, "over_limit": over, "percentile_s": None,
           "passed": None}
    if n == 0:
        return {**out, "reason": "no requests"}
    k = int(n * q)
    xs = _sorted(values)
    out["percentile_s"] = xs[k] if k < len(xs) else None
    name = f"p{100 * q:g}"
    if k >= len(xs) or xs[k] > limit:
        return {**out, "passed": False, "reason": f"{name} {over} of {n} requests over "
                f"the {limit:g} s limit (failed ones included)"}
    need = _min_total(over, r, confidence)
    if n >= need:
        return {**out, "passed": True, "reason": f"{name} within {limit:g} s at "
                f"{confidence:g} confidence ({over} of {n} over)"}
    return {**out, "reason": f"{name} needs at least {need} requests with {over} over the "
            f"{limit:g} s limit to be sure at {confidence:g}; this run has {n}"}


# the percentiles early stopping estimates
EARLY_STOPPING = ("p90", "p99")
CORRELATED = "not applicable: the gaps within one request are correlated, early stopping assumes independent values"


def _metric(values: list[float], confidence: float, es_confidence: float,
            independent: bool = True) -> dict:
    xs = _sorted(values)
    out: dict[str, Any] = {"n": len(xs), "mean": sum(xs) / len(xs) if xs else None}
    for key, q in PERCENTILES.items():
        out[key] = _quantile_ci_sorted(xs, q, confidence)
    out["early_stopping"] = {
        key: (_early_stopping_sorted(xs, PERCENTILES[key], es_confidence, ES_TOLERANCE)
              if independent else {"n": len(xs), "q": PERCENTILES[key], "estimate": None,
                                   "supported": False, "note": CORRELATED})
        for key in EARLY_STOPPING}
    return out


def level_summary(requests: list[dict], duration_s: float, target: str | dict | None = None,
                  confidence: float = 0.95, es_confidence: float = ES_CONFIDENCE) -> dict:
    """One load level's statistics, JSON-serialisable (None, never NaN).

    n, n_ok, n_failed, duration_s, requests_per_s (ok requests per second, vLLM's request
    throughput), output_tokens_per_s (ok requests' output tokens per second); then for
    "ttft", "tpot", "itl", "e2e" (ok requests; definitions in the module docstring) and
    "queue" (every request with t_arrival and t_send): {n, mean, p50, p90, p99
    (quantile_ci at ``confidence``), early_stopping: {p90, p99}}. ITL gaps of one
    request are correlated, so their intervals are narrower than they should be.
    With a target: its goodput fields, "target", "target_check" (per TTFT and TPOT:
    LoadGen's Server tests at the target's percentile and ``es_confidence``, see _check;
    requests without a TPOT pass its test) and "meets_target": True where both pass,
    False where one fails, else None with "meets_target_reason".
    """
    duration_s = _number("duration_s", duration_s)
    ok = [r for r in requests if r.get("ok")]
    ttfts = [v for v in map(ttft_s, ok) if v is not None]
    tpots = [tpot_s(r) for r in ok]
    out: dict[str, Any] = {
        "n": len(requests), "n_ok": len(ok), "n_failed": len(requests) - len(ok),
        "duration_s": duration_s, "requests_per_s": len(ok) / duration_s,
        "output_tokens_per_s": sum(r.get("output_tokens") or 0 for r in ok) / duration_s}
    metrics = {"ttft": ttfts, "tpot": [v for v in tpots if v is not None],
               "itl": [g for r in ok for g in itl_gaps(r)],
               "e2e": [v for v in map(e2e_s, ok) if v is not None],
               "queue": [r["t_send"] - r["t_arrival"] for r in requests
                         if r.get("t_arrival") is not None and r.get("t_send") is not None]}
    for key, values in metrics.items():
        out[key] = _metric(values, confidence, es_confidence, independent=key != "itl")
    if target is None:
        return out
    tg = target_of(target)
    out.update(goodput(requests, tg, duration_s), target=tg)
    q = tg["percentile"]
    # no first token counts as over the TTFT limit; no TPOT (1 token) as within it
    checks = {"ttft": _check(ttfts, len(requests) - len(ttfts), tg["ttft_s"], q,
                             es_confidence, ES_TOLERANCE),
              "tpot": _check([0.0 if v is None else v for v in tpots], len(requests) - len(ok),
                             tg["tpot_s"], q, es_confidence, ES_TOLERANCE)}
    out["target_check"] = checks
    verdicts = [c["passed"] for c in checks.values()]
    out["meets_target"] = False if False in verdicts else None if None in verdicts else True
    out["meets_target_reason"] = "; ".join(f"{k.upper()}: {c['reason']}"
                                           for k, c in checks.items())
    return out


def max_rate_bisect(measure: Callable[[float], bool], low: float, high: float, *,
                    steps: int, tolerance: float, low_known: bool = False) -> dict:
    """The highest rate that meets a target, by bisection: ``measure(rate)`` says whether a
    load level at ``rate`` met it (assumed monotone: met below some rate, missed above).
    ``low`` is measured first (unless ``low_known``: the caller measured it, and it met
    the target); if it fails, max_rate is None. ``high`` is taken as failing and never
    measured (the caller's bound). Then up to ``steps`` midpoints, stopping once the
    bracket is no wider than ``tolerance``; the midpoint is the geometric mean of the
    bracket (rates are scales: 1 and 200 requests/s bisect at ~14, not 100). Returns
    {max_rate (the highest passing rate tried), tried: [(rate, ok), ...] in order,
    bracket: [passing, failing]}.
    """
    low, high = _number("low", low), _number("high", high)
    tolerance = _number("tolerance", tolerance, strict=False)
    if high <= low:
        raise ValueError(f"high must be above low, got low={low!r}, high={high!r}")
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 0:
        raise ValueError(f"steps must be an integer >= 0, got {steps!r}")
    tried = []
    if not low_known:
        ok = bool(measure(low))
        tried.append((low, ok))
        if not ok:
            return {"max_rate": None, "tried": tried, "bracket": [None, low]}
    for _ in range(steps):
        if high - low <= tolerance:
            break
        mid = math.sqrt(low * high)
        ok = bool(measure(mid))
        tried.append((mid, ok))
        low, high = (mid, high) if ok else (low, mid)
    return {"max_rate": low, "tried": tried, "bracket": [low, high]}
