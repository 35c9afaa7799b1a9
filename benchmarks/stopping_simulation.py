"""The adaptive rule's stops simulated on campaigns of 6 comparisons (issue 39).

    python benchmarks/stopping_simulation.py [--full|--smoke] [--campaigns N]
                                              [--max-repeats K] [--seed S]

A campaign of the embedded default with its A/A check: CNN 1 and 2 ranks and the LLM, each
Charliecloud and native-aa against native (6 comparisons), the noise BENCHMARKS.md states
(pair sd 2.5% CNN, 7% LLM), with and without the drift of issue 39 (both arms' epoch time
rising 3.6 -> 4.6 s over a series; 1 run in 20 slower by 17%). Each series is walked by
``scalesweep.analyse.decision.decide`` after every block, stopped by each rule on the same
runs (the CI target alone, as before issue 39; the CI target and futility; a settled
verdict at 5%/m or at 5%/(m x looks), with futility; the last is decide's own), and the
final verdicts are adjusted over the campaign (``scalesweep.analyse.multiplicity``).
Per rule: the campaign-level false-difference rate (any faster/slower for a runtime that
does not differ), the share of conclusive verdicts, the median blocks per series of each
workload and the mean blocks per campaign. The simulation itself is the unit test's
(tests/unit/test_verdict_simulation.py ``simulate_campaigns``), run here at full size.

--full: 4000 campaigns per scenario (about 2 minutes per scenario on one core);
--smoke: 50.
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ProcessPoolExecutor

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent))
from _common import REPO, loadavg, mode_of, report  # noqa: E402

sys.path.insert(0, str(REPO / "tests" / "unit"))
sys.path.insert(0, str(REPO / "tests"))

SCENARIOS = {
    "A/A, stated noise": ("NO_DRIFT", 0.0),
    "A/A, stated noise + drift seen": ("DRIFT_SEEN", 0.0),
    "Charliecloud +10%, drift seen": ("DRIFT_SEEN", 0.10),
}


def _run(args: tuple[str, str, float, int, int, int]) -> tuple[str, dict, float]:
    name, drift_name, effect, campaigns, seed, max_repeats = args
    import test_verdict_simulation as sim

    sim.CAMPAIGN_CONFIG["measurement"]["max_repeats"] = max_repeats
    t0 = time.perf_counter()
    result = sim.simulate_campaigns(getattr(sim, drift_name), campaigns, seed, effect=effect)
    return name, result, time.perf_counter() - t0


def main() -> None:
    mode, rest = mode_of()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--campaigns", type=int, default=None)
    ap.add_argument("--max-repeats", type=int, default=8)
    ap.add_argument("--seed", type=int, default=39)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args(rest)
    campaigns = args.campaigns or (50 if mode == "smoke" else 4000)
    load = loadavg()
    jobs = [(name, drift, effect, campaigns, args.seed + i, args.max_repeats)
            for i, (name, (drift, effect)) in enumerate(SCENARIOS.items())]
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        results = list(pool.map(_run, jobs))
    figures = {}
    lines = [f"{campaigns} campaigns of 6 comparisons per scenario, max_repeats "
             f"{args.max_repeats}, target 3 pp, margin 5%, Benjamini-Hochberg over the "
             "campaign",
             f"{'scenario':32} {'rule':40} {'false':>6} {'concl.':>6} {'CNN':>4} {'LLM':>4} "
             f"{'blocks/campaign':>15}"]
    for name, result, seconds in results:
        figures[name] = {**result, "seconds": round(seconds, 1)}
        for rule, r in result.items():
            lines.append(f"{name:32} {rule:40} {r['false']:6.1%} {r['conclusive']:6.1%} "
                         f"{r['median_blocks']['cnn_ddp']:4g} {r['median_blocks']['llm']:4g} "
                         f"{r['mean_campaign_blocks']:15.1f}")
    print("\n".join(lines))
    report("stopping_simulation", mode, {"campaigns": campaigns,
                                         "max_repeats": args.max_repeats,
                                         "scenarios": figures},
           f"{campaigns} campaigns x {len(SCENARIOS)} scenarios", load)


if __name__ == "__main__":
    main()
