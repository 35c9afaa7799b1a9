"""Decide whether a series (one geometry of one workload) needs another block of repeats
(checkpoint repeats_decision), or summarise a finished series (rule series_done).

    python workflow/scripts/decide_repeats.py --config CONFIG.json --out after3.json \
        --round 3 METRICS.json ...
    python workflow/scripts/decide_repeats.py --config CONFIG.json --out final.json \
        --final METRICS.json ... DECISION.json ...

CONFIG.json is the workflow's effective config (common.smk: RUN_CONFIG).
"""

import argparse
import json
import sys
from pathlib import Path

ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
ap.add_argument("--config", required=True)
ap.add_argument("--out", required=True)
ap.add_argument("--round", type=int, default=0)
ap.add_argument("--final", action="store_true")
ap.add_argument("files", nargs="*")
args = ap.parse_args()

config = json.loads(Path(args.config).read_text())
sys.path.insert(0, str(Path(config["_code_root"]) / "workflow"))

from scalesweep.analyse.collect import readable_runs  # noqa: E402
from scalesweep.analyse.decision import decide  # noqa: E402
from scalesweep.plan.adaptive import Series  # noqa: E402
from scalesweep.plan.sweep import SweepPoint, warmup_blocks  # noqa: E402
from scalesweep.record.metrics import write_json_atomic  # noqa: E402
from scalesweep.record.pointdir import METRICS_JSON  # noqa: E402

metrics = [f for f in args.files if Path(f).name == METRICS_JSON]
decisions = [f for f in args.files if f not in metrics]
runs = []
series = None
# an unreadable run (truncated, a field missing) counts as not measured: the decision
# then asks for another block, as for a disturbed one; named in the log
for path, m, row in readable_runs(metrics, config, lambda text: print(text, file=sys.stderr)):
    series = series or Series.of(SweepPoint(**m["point"]))
    runs.append(row)
if series is None:
    sys.exit(f"decide_repeats: no readable metrics file among {metrics}")

if args.final:
    last = json.loads(Path(sorted(decisions, key=lambda f: int(Path(f).stem[5:]))[-1]).read_text()) if decisions else None
    blocks = max(int(r["repeat"]) for r in runs)
    warm = min(warmup_blocks(config), blocks)
    record = {
        "series": series.as_dict(),
        "metrics": sorted(metrics),
        "blocks": blocks,  # measured, the warm-up blocks included
        "warmup_blocks": warm,
        "repeats": blocks - warm,  # the blocks that count (sweep.repeats, max_repeats)
        "disturbed_runs": sorted(r["path"] for r in runs if r["disturbed"]),
        "last_decision": last,
    }
else:
    record = decide(series, args.round, runs, config)
write_json_atomic(args.out, record)
print(json.dumps({k: record.get(k) for k in ("round", "enough", "more", "reasons")}, default=str))
