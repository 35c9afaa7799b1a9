"""The whole verdict procedure, adaptive stopping included, under A/A noise fitted to the
LLM runs of issue 25: how often does it call two identical runtimes "faster" or
"slower"? At most the stated 5% (and the same harness does find a real 10% slowdown).

The noise. Eight identical native LLM runs in a row gave 148, 205, 226, 217, 207, 169,
149, 127 tokens/s; a run's time goes as 1 / rate, so its log time is
x_t = drift_t + e_t over the run index t, with drift_t = phi drift_(t-1) + step_t
(phi = 1: a random walk) and e_t the between-run noise. Inside one run the per-request
rate varied by only +-3% and is averaged over the run's requests: it is not a term of
its own. Fitted to the 8 log times by Gaussian maximum likelihood:
- random walk (phi = 1): steps of sd 0.17 per run and no between-run noise (the
  likelihood's maximum), or, with the most between-run noise the 8 runs allow (the upper
  end of its 95% profile-likelihood interval), the step sd refitted beside it;
- AR(1): phi 0.69, steps of sd 0.15, no between-run noise. A short series biases this
  phi down: the runs' lag-1 autocorrelation (0.46) is above what even a random walk of 8
  runs gives on average (0.32), so the random walk is the better-supported drift; the
  AR(1) fit is the stress case of a drift that reverts from run to run.

The procedure, as the workflow runs it: blocks of two runs (native, native-aa) one
right after the other, in ``scalesweep.plan.sweep.block_order``'s order; after the
minimum of blocks (sweep.repeats 3) ``scalesweep.analyse.decision.decide`` and ``wants_more``
after every block, up to measurement.max_repeats 8, with config/config.yaml's target
(3 pp) and margin (5%); then ``overhead_verdict`` on the same-block pairs.

The bound: a false rate at most ALPHA, read as: the observed rate of CAMPAIGNS seeded
campaigns is at most the 99% one-sided binomial quantile of ALPHA (LIMIT, 6.15% at
2000 campaigns): a procedure at 5% exceeds it with a probability under 1%, one at 7%
(the ABBA order under the AR(1) drift, measured over 10 000 campaigns) about 9 times
in 10.
What the adaptive stopping adds is measured apart, on the same runs (the false rate had
every campaign measured all blocks), where 2000 campaigns resolve a few tenths of a
point.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import math
from collections import Counter

import numpy as np
import pytest
from scipy import optimize, stats

from scalesweep.analyse.verdict import overhead_verdict
from scalesweep.analyse.decision import decide
from scalesweep.plan.adaptive import MIN_COMPARED, Series, repeat_bounds, wants_more
from scalesweep.plan.sweep import block_order

LLM_RATES = np.array([148, 205, 226, 217, 207, 169, 149, 127], dtype=float)  # tokens/s
ALPHA = 0.05
CAMPAIGNS = 2000
LIMIT = stats.binom.ppf(0.99, CAMPAIGNS, ALPHA) / CAMPAIGNS
BASE_S = 60.0  # a run's time before the noise (the rates only fix its spread)

# config/config.yaml's adaptive repeats, on one LLM geometry with the A/A runtime
CONFIG = {
    "sweep": {"runtimes": ["native", "native-aa"], "repeats": 3},
    "measurement": {"max_repeats": 8, "target_ci_pp": 3.0, "equivalence_margin_pct": 5.0,
                    "warmup_blocks": 0},
    "workloads": {"llm": {"payload": "llm"}},
}


@dataclasses.dataclass(frozen=True)
class Noise:
    phi: float  # drift_t = phi drift_(t-1) + step_t; 1: a random walk
    step_sd: float  # the drift's step from one run to the next (log time)
    run_sd: float  # between-run noise (log time)


def _log_times() -> np.ndarray:
    return -np.log(LLM_RATES)


def _random_walk_nll(step_sd: float, run_sd: float, dx: np.ndarray) -> float:
    """-log likelihood of the runs' first differences under a random-walk drift plus
    between-run noise: dx_t = step_t + e_t - e_(t-1), an MA(1)."""
    n = dx.size
    cov = (np.eye(n) * (step_sd**2 + 2 * run_sd**2)
           - run_sd**2 * (np.eye(n, k=1) + np.eye(n, k=-1)))
    return -stats.multivariate_normal(np.zeros(n), cov).logpdf(dx)


def fit_random_walk(run_sd: float | None = None) -> Noise:
    """Maximum likelihood step sd, given ``run_sd`` (None: fitted too)."""
    dx = np.diff(_log_times())

    def profile(run: float) -> tuple[float, float]:
        res = optimize.minimize_scalar(lambda log_step: _random_walk_nll(
            math.exp(log_step), run, dx), bounds=(-6, 0), method="bounded")
        return math.exp(res.x), res.fun

    if run_sd is None:
        res = optimize.minimize_scalar(lambda log_run: profile(math.exp(log_run))[1],
                                       bounds=(-12, -0.5), method="bounded")
        run_sd = math.exp(res.x)
    return Noise(1.0, profile(run_sd)[0], run_sd)


def most_between_run_noise() -> Noise:
    """The random walk with the largest between-run noise the runs allow: the upper end
    of run_sd's 95% profile-likelihood interval (-log likelihood 1.92 above its
    minimum), the step sd refitted beside it."""
    dx = np.diff(_log_times())
    best = fit_random_walk()
    floor = _random_walk_nll(best.step_sd, best.run_sd, dx)

    def excess(run: float) -> float:
        return _random_walk_nll(fit_random_walk(run).step_sd, run, dx) - floor - 1.92

    run_sd = optimize.brentq(excess, max(best.run_sd, 1e-6), 0.3)
    return fit_random_walk(run_sd)


def fit_ar1() -> Noise:
    """Maximum likelihood stationary AR(1) drift plus between-run noise."""
    x = _log_times()
    lag = np.abs(np.subtract.outer(np.arange(x.size), np.arange(x.size)))

    def nll(p):
        mean, log_step, log_run, z = p
        phi = math.tanh(z)
        cov = (math.exp(2 * log_step) / (1 - phi**2) * phi**lag
               + math.exp(2 * log_run) * np.eye(x.size))
        return -stats.multivariate_normal(np.full(x.size, mean), cov).logpdf(x)

    fits = [optimize.minimize(nll, [x.mean(), -2.0, log_run, z], method="Nelder-Mead",
                              options={"maxiter": 4000, "xatol": 1e-8, "fatol": 1e-10})
            for z in (0.5, 1.0, 2.0) for log_run in (-4.0, -2.0)]
    _, log_step, log_run, z = min(fits, key=lambda r: r.fun).x
    return Noise(math.tanh(z), math.exp(log_step), math.exp(log_run))


# compute-bound CNN runs: 2-5% from run to run (issue 25, BENCHMARKS.md's A/A)
CNN_NOISE = Noise(1.0, 0.02, 0.015)


def _series() -> Series:
    fields = {f.name for f in dataclasses.fields(Series)}
    extra = {"arm": "native-aa"} if "arm" in fields else {}
    return Series("llm", 1, 0, 1, 1, **extra)


@functools.lru_cache(maxsize=None)
def simulate(noise: Noise, campaigns: int, seed: int, effect: float = 0.0,
             order: str | None = None) -> dict:
    """``campaigns`` A/A campaigns of one series (native-aa slower by ``effect``, a
    fraction): the rates of the final verdicts, the blocks each measured, the CI
    methods; ``false_at_max``: the false rate had every campaign measured all blocks
    (the same runs: what the adaptive stopping adds is the difference)."""
    config = copy.deepcopy(CONFIG)
    if order:
        config["measurement"]["order"] = order
    series = _series()
    low, high = repeat_bounds(config, series.workload)
    rng = np.random.default_rng(seed)
    runs = 2 * high
    drift = np.empty((campaigns, runs))
    start_sd = noise.step_sd / math.sqrt(1 - noise.phi**2) if noise.phi < 1 else 0.0
    drift[:, 0] = rng.normal(0, start_sd, campaigns)
    steps = rng.normal(0, noise.step_sd, (campaigns, runs))
    for t in range(1, runs):
        drift[:, t] = noise.phi * drift[:, t - 1] + steps[:, t]
    log_time = drift + rng.normal(0, noise.run_sd, (campaigns, runs))
    verdicts, blocks, methods, at_max = Counter(), Counter(), Counter(), Counter()
    for c in range(campaigns):
        if order == "random":
            config["measurement"]["seed"] = c
        rows = []
        for block in range(1, high + 1):
            for position, runtime in enumerate(block_order(series.point("native", block),
                                                           config)):
                point = series.point(runtime, block)
                factor = 1.0 if runtime == "native" else 1.0 + effect
                rows.append({
                    "runtime": runtime, "repeat": block, "disturbed": False,
                    "block_id": getattr(point, "block", block),
                    "time_s": BASE_S * factor * math.exp(log_time[c, 2 * (block - 1) + position]),
                })
        for stop in range(low, high + 1):
            measured = [r for r in rows if r["repeat"] <= stop]
            if not wants_more(decide(series, stop, measured, config, comparisons=1), config):
                break
        times = {(r["runtime"], r["repeat"]): r["time_s"] for r in rows}

        def verdict(n: int) -> dict:
            return overhead_verdict([times["native", k] for k in range(1, n + 1)],
                                    [times["native-aa", k] for k in range(1, n + 1)],
                                    paired=True, margin_pct=5, target_ci_pp=3)

        v = verdict(stop)
        verdicts[v["verdict"]] += 1
        blocks[stop] += 1
        methods[v["ci_method"]] += 1
        at_max[(verdict(high) if stop < high else v)["verdict"]] += 1
    rates = {k: verdicts[k] / campaigns for k in ("faster", "slower", "equivalent",
                                                   "inconclusive")}
    out = {**rates, "false": rates["faster"] + rates["slower"],
           "false_at_max": (at_max["faster"] + at_max["slower"]) / campaigns,
           "blocks": dict(sorted(blocks.items())), "methods": dict(methods)}
    print(noise, order or "alternate", f"effect {effect:.0%}:", out)
    return out


def test_the_fits_reproduce_the_llm_runs():
    x = _log_times()
    walk, wide, ar1 = fit_random_walk(), most_between_run_noise(), fit_ar1()
    # the 8 runs' run-to-run changes in log time: rms 0.17 (rates 127-226 tokens/s)
    assert walk.run_sd < 1e-3 and walk.step_sd == pytest.approx(
        math.sqrt(np.mean(np.diff(x) ** 2)), rel=1e-3)
    assert 0.1 < wide.run_sd < 0.2 and 0.1 < wide.step_sd < walk.step_sd
    assert 0.6 < ar1.phi < 0.8 and 0.13 < ar1.step_sd < 0.17 and ar1.run_sd < 0.01
    # the stationary AR(1) spread is the runs' own (sd of log time 0.21)
    assert ar1.step_sd / math.sqrt(1 - ar1.phi**2) == pytest.approx(np.std(x, ddof=1),
                                                                    rel=0.02)


@pytest.mark.parametrize("fit", [fit_random_walk, most_between_run_noise],
                         ids=["random-walk", "random-walk+between-run"])
def test_aa_false_faster_slower_rate_is_at_most_5_percent_under_llm_drift(fit):
    result = simulate(fit(), CAMPAIGNS, seed=25)
    assert result["false"] <= LIMIT, result
    # The LLM's runs vary too much for the 3 pp target, or any verdict, in 8 blocks: most
    # campaigns stop at their first decision from MIN_COMPARED pairs on as futile (issue
    # 39; before, almost every one measured all 8) and end honestly inconclusive, not
    # "equivalent".
    assert result["blocks"].get(MIN_COMPARED, 0) >= 0.75 * CAMPAIGNS
    assert result["inconclusive"] >= 0.9 and result["equivalent"] < 0.02


def test_adaptive_stopping_adds_no_false_verdicts_under_llm_drift():
    """Optional stopping. Under the LLM's drift the 3 pp target is out of reach: a
    series stops before max_repeats only where its few pairs happened to agree, its
    spread underestimated, and such a narrow CI then mostly excludes 0. Measured on the
    same runs, stopping may add at most 3 of 2000 campaigns' false verdicts to those of
    measuring every block: a stop needs MIN_COMPARED >= 5 pairs (10 000 campaigns:
    +0.03% from 5 pairs on, +0.3% when 3 pairs may stop a series)."""
    result = simulate(fit_random_walk(), CAMPAIGNS, seed=25)
    assert result["false"] - result["false_at_max"] <= 3 / CAMPAIGNS, result


def test_aa_false_rate_under_a_mean_reverting_drift_with_random_order():
    """The AR(1) fit, blocks in random order (measurement.order: random): each pair's
    sign is independent of the drift, so the pairs' log ratios are uncorrelated."""
    result = simulate(fit_ar1(), CAMPAIGNS, seed=26, order="random")
    assert result["false"] <= LIMIT, result


def test_aa_false_rate_under_a_mean_reverting_drift_with_abba_order():
    """A known excess, pinned: ABBA under a drift that reverts from run to run gave 6.96%
    false verdicts over 10 000 campaigns. Consecutive blocks in opposite order see
    opposite halves of the same reversion, so their log ratios correlate (lag-1 about
    +0.11) and the t interval is too narrow; random order (measurement.order: random)
    gives 5.3% (test above). Since futile series stop at 5 blocks (issue 39), 6.1% of
    these 2000: above the nominal 5%, below 8% (per comparison; over a campaign the
    verdicts are adjusted)."""
    result = simulate(fit_ar1(), CAMPAIGNS, seed=26)
    assert ALPHA < result["false"] <= 0.08, result


def test_aa_under_cnn_noise_stops_early_and_calls_it_equivalent():
    """Where the target is within reach, the adaptive stopping really stops (from
    MIN_COMPARED blocks on): still at most 5% false, and "equivalent" nearly always."""
    result = simulate(CNN_NOISE, CAMPAIGNS // 2, seed=27)
    assert result["false"] <= stats.binom.ppf(0.99, CAMPAIGNS // 2, ALPHA) / (CAMPAIGNS // 2)
    assert result["equivalent"] >= 0.9
    assert sum(n for k, n in result["blocks"].items() if k < 8) >= 0.3 * CAMPAIGNS // 2


def test_the_harness_finds_a_real_10_percent_slowdown():
    """The same harness, native-aa made 10% slower: under CNN noise "slower" nearly
    always; under the LLM's drift (d sd 0.17 per pair) 8 blocks only sometimes resolve
    it, yet far more often than the A/A false rate, and never as "faster"."""
    cnn = simulate(CNN_NOISE, 300, seed=28, effect=0.10)
    assert cnn["slower"] >= 0.95
    llm = simulate(fit_random_walk(), 300, seed=29, effect=0.10)
    assert llm["slower"] > 3 * ALPHA and llm["faster"] < 0.01


# --- Issue 39: campaigns of 6 comparisons, the drift seen, and the adaptive rule's stops --
#
# A campaign of the embedded default with its A/A check compares 6 (series, runtime)
# pairs: CNN 1 and 2 ranks and the LLM, each Charliecloud and native-aa against native.
# A/A: no runtime differs, so any "faster"/"slower" after the campaign's
# Benjamini-Hochberg adjustment (scalesweep.analyse.multiplicity) is a false one, and the
# campaign's false-difference rate must stay at most 5%.
# The noise stated in BENCHMARKS.md: the two runs of a CNN block differ by sd ~2.5% (log
# ratio), an LLM block's by ~7%: a random walk plus between-run noise of that pair sd.
# The drift seen (issue 39): the epoch time of BOTH arms rose 3.6 -> 4.6 s over nine
# minutes (a linear rise of ln(4.6/3.6) over a series' 16 runs at 8 blocks), and one
# block's two runs differed by 17% (a run now and then slower by 17%: here 1 run in 20).
CNN_PAIR = Noise(1.0, 0.010, 0.0154)  # pair sd sqrt(0.010^2 + 2 x 0.0154^2) = 2.5%
LLM_PAIR = Noise(1.0, 0.030, 0.045)  # pair sd 7.0%


@dataclasses.dataclass(frozen=True)
class Drift:
    rise: float = 0.0  # log time, both arms, over the runs of max_repeats blocks
    jump_p: float = 0.0  # chance that a run is slower by ``jump``
    jump: float = math.log(1.17)


NO_DRIFT = Drift()
DRIFT_SEEN = Drift(rise=math.log(4.6 / 3.6), jump_p=0.05)

CAMPAIGN_CONFIG = {
    "sweep": {"runtimes": ["native", "charliecloud"], "repeats": 3},
    "measurement": {"max_repeats": 8, "target_ci_pp": 3.0, "equivalence_margin_pct": 5.0,
                    "warmup_blocks": 0, "aa_calibration": True},
    "workloads": {"cnn_ddp": {"payload": "cnn"}, "llm": {"payload": "llm"}},
}
CAMPAIGN = tuple((Series(w, 1, 0, ranks, 1, arm), noise)
                 for w, ranks, noise in (("cnn_ddp", 1, CNN_PAIR), ("cnn_ddp", 2, CNN_PAIR),
                                         ("llm", 1, LLM_PAIR))
                 for arm in ("charliecloud", "native-aa"))
COMPARISONS = len(CAMPAIGN)  # the campaign's m


def _stop_rules(m: int, looks_: int) -> dict:
    """name -> rule(comparison of a decision, blocks left): whether it stops there (from
    MIN_COMPARED pairs on). "settled at 5%/(m x looks)" is decide's own (the test checks
    that wants_more agrees), the others the alternatives it was chosen from."""
    from scalesweep.plan.adaptive import is_futile

    def claim_p(c):
        p = {"equivalent": c["equivalence_p_value"], "slower": c["p_value"],
             "faster": c["p_value"]}.get(c["verdict"])
        return p if p is not None else math.nan

    def target(c, left):
        return c["ci_half_width_pp"] is not None and c["ci_half_width_pp"] <= 3.0

    def settled(level):
        return lambda c, left: (target(c, left) or claim_p(c) < level
                                or is_futile(c, left))

    return {
        "CI target (before)": target,
        "CI target + futility": lambda c, left: target(c, left) or is_futile(c, left),
        "settled at 5%/m + futility": settled(ALPHA / m),
        "settled at 5%/(m x looks) + futility": settled(ALPHA / m / looks_),
    }


CHOSEN = "settled at 5%/(m x looks) + futility"


def simulate_campaigns(drift: Drift, campaigns: int, seed: int, effect: float = 0.0,
                       check_rule: bool = True) -> dict:
    """``campaigns`` simulated campaigns of CAMPAIGN (Charliecloud slower by ``effect``;
    native-aa never differs), each series walked by ``decide`` after every block from the
    minimum on, and stopped by each rule of ``_stop_rules`` on the same runs; the final
    verdicts adjusted over the campaign (``adjust_verdicts``). Per rule: ``false``, the
    share of campaigns with any false faster/slower (native-aa always, Charliecloud too
    when ``effect`` is 0); ``conclusive``, the share of comparisons with a verdict after
    the adjustment; ``blocks``: the median blocks per workload, and their mean per
    campaign."""
    import pandas as pd

    from scalesweep.analyse.decision import looks
    from scalesweep.analyse.multiplicity import adjust_verdicts

    config = copy.deepcopy(CAMPAIGN_CONFIG)
    low, high = repeat_bounds(config, "cnn_ddp")
    rules = _stop_rules(COMPARISONS, looks(low, high))
    rng = np.random.default_rng(seed)
    runs = 2 * high
    orders = {s: [block_order(s.point("native", b), config) for b in range(1, high + 1)]
              for s, _ in CAMPAIGN}
    out = {name: {"false": 0, "conclusive": 0, "blocks": {"cnn_ddp": [], "llm": []},
                  "campaign_blocks": [], "verdicts": Counter()} for name in rules}
    for _ in range(campaigns):
        rows_of = {name: [] for name in rules}
        for series, noise in CAMPAIGN:
            steps = rng.normal(0, noise.step_sd, runs)
            steps[0] = 0.0
            log_time = (np.cumsum(steps) + rng.normal(0, noise.run_sd, runs)
                        + drift.rise * np.arange(runs) / (runs - 1)
                        + drift.jump * (rng.random(runs) < drift.jump_p))
            other = series.arm
            factor = 1.0 + (effect if other == "charliecloud" else 0.0)
            rows = []
            for block in range(1, high + 1):
                for position, runtime in enumerate(orders[series][block - 1]):
                    rows.append({"runtime": runtime, "repeat": block, "disturbed": False,
                                 "time_s": BASE_S * (factor if runtime == other else 1.0)
                                 * math.exp(log_time[2 * (block - 1) + position])})
            stopped: dict[str, tuple[int, dict]] = {}
            for stop in range(low, high + 1):
                d = decide(series, stop, [r for r in rows if r["repeat"] <= stop], config,
                           comparisons=COMPARISONS)
                c = d["comparisons"][other]
                walked = CHOSEN not in stopped  # (decide's own rule had not stopped it)
                enough_pairs = min(c["n"], c["n_native"]) >= MIN_COMPARED
                for name, rule in rules.items():
                    if name not in stopped and (stop == high or (
                            enough_pairs and rule(c, high - stop))):
                        stopped[name] = (stop, c)
                if check_rule and walked and stop < high:
                    assert wants_more(d, config) == (CHOSEN not in stopped), d
                if len(stopped) == len(rules):
                    break
            for name, (stop, c) in stopped.items():
                out[name]["blocks"][series.workload].append(stop)
                rows_of[name].append({
                    "runtime": other, "difference": other == "charliecloud" and effect != 0,
                    "blocks": stop, "verdict": c["verdict"], "verdict_text": c["verdict_text"],
                    "p_value": c["p_value"], "equivalence_p_value": c["equivalence_p_value"],
                    "overhead_ci95_low_pct": c["ci95_low_pct"],
                    "overhead_ci95_high_pct": c["ci95_high_pct"]})
        for name, rows in rows_of.items():
            table = adjust_verdicts(pd.DataFrame(rows).astype({"p_value": float,
                                                               "equivalence_p_value": float}))
            said = table["verdict"].isin(("slower", "faster"))
            out[name]["false"] += bool((said & ~table["difference"]).any())
            out[name]["conclusive"] += int((table["verdict"] != "inconclusive").sum())
            out[name]["campaign_blocks"].append(int(table["blocks"].sum()))
            out[name]["verdicts"].update(table["verdict"])
    result = {}
    for name, r in out.items():
        result[name] = {
            "false": r["false"] / campaigns,
            "conclusive": r["conclusive"] / (campaigns * COMPARISONS),
            "median_blocks": {w: float(np.median(b)) for w, b in r["blocks"].items()},
            "mean_campaign_blocks": float(np.mean(r["campaign_blocks"])),
            "verdicts": dict(r["verdicts"]),
        }
    return result


def test_campaigns_of_6_comparisons_under_the_drift_seen():
    """Issue 39: a campaign of 6 A/A comparisons under the drift seen, stopped by decide's
    rule (a settled verdict at 5%/(m x looks), futility, the CI target) and, on the same
    runs, by the CI target alone (before): no more false faster/slower over the campaign
    (after Benjamini-Hochberg), and fewer blocks (futile LLM series stop at their first
    decision). benchmarks/stopping_simulation.py runs it at 4000 campaigns."""
    n = 100
    result = simulate_campaigns(DRIFT_SEEN, n, seed=39)
    print(result)
    before, chosen = result["CI target (before)"], result[CHOSEN]
    assert chosen["false"] <= before["false"] + 1 / n, result
    assert chosen["false"] <= stats.binom.ppf(0.99, n, ALPHA) / n, result
    assert chosen["mean_campaign_blocks"] < 0.85 * before["mean_campaign_blocks"], result
    assert chosen["median_blocks"]["llm"] == MIN_COMPARED
    assert chosen["conclusive"] >= before["conclusive"] - 0.05, result
