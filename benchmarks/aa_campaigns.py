"""K back-to-back A/A campaigns of the embedded default: how often does the method call a
runtime "faster" or "slower" than an identical one, over a whole campaign?

    python benchmarks/aa_campaigns.py [--campaigns K] [--dir DIR] [--config-extra YAML]
                                      [--with-containers] [--full|--smoke]

Each campaign is a fresh directory under DIR (default: a temporary one) holding this
repository's config/, run with `snakemake --profile profiles/local --config
measurement='{aa_calibration: true}'` (what the README's A/A command runs). Without
--with-containers the sweep compares native with native-aa only (sweep.runtimes:
[native]): 3 A/A comparisons per campaign (CNN 1 and 2 ranks, LLM), the fastest way to
count false differences; with it, the embedded default whole (Charliecloud too: 6
comparisons, like the issue's campaign). The machine must be quiet (nothing else
running): every run records the load it saw, and disturbed runs are left out anyway.

Reported, per campaign and over the K campaigns, side by side for the verdict as decided
over the campaign (column ``verdict``) and each comparison's own (``verdict_unadjusted``:
the verdicts as issue #39 found them, but on runs measured under today's stops and
warm-up) on the same runs:
- campaigns with any false difference (a native-aa row "faster"/"slower"): the
  campaign-level false-difference rate (its 95% Clopper-Pearson interval: K is small);
- the share of conclusive verdicts (equivalent, slower or faster) among every row;
- blocks per series and the wall time from a series' first run to its last (the time to
  its verdict), median over the series; the campaign's wall time.
--smoke: one campaign of a tiny config (1 epoch, 2 to 3 blocks), to check that the script
runs (CI's smoke benchmarks), its figures meaningless.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import REPO, SNAKEMAKE, loadavg, mode_of, report, snakemake_env  # noqa: E402

CLAIMS = ("slower", "faster")
CONCLUSIVE = ("slower", "faster", "equivalent")
AA = "native-aa"


def clopper_pearson(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    from scipy import stats

    alpha = 1 - level
    low = 0.0 if k == 0 else float(stats.beta.ppf(alpha / 2, k, n - k + 1))
    high = 1.0 if k == n else float(stats.beta.ppf(1 - alpha / 2, k + 1, n - k))
    return low, high


def campaign_config(with_containers: bool, smoke: bool, extra: dict) -> dict:
    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    if not with_containers:
        config["sweep"]["runtimes"] = ["native"]
    if smoke:
        config["workloads"]["cnn_ddp"]["epochs"] = 1
        config["sweep"]["repeats"] = 2
        config.setdefault("measurement", {})["max_repeats"] = 3
    for key, value in extra.items():
        if isinstance(value, dict):
            config.setdefault(key, {}).update(value)
        else:
            config[key] = value
    config.setdefault("measurement", {})["aa_calibration"] = True
    return config


def run_campaign(workdir: Path, config: dict, log: Path) -> float:
    shutil.copytree(REPO / "config", workdir / "config")
    (workdir / "config" / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    t0 = time.perf_counter()
    with open(log, "w") as fh:
        proc = subprocess.run(
            [SNAKEMAKE, "-s", str(REPO / "Snakefile"), "--directory", str(workdir),
             "--profile", str(REPO / "profiles" / "local")],
            cwd=workdir, stdout=fh, stderr=subprocess.STDOUT, env=snakemake_env())
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"campaign in {workdir} failed ({proc.returncode}): see {log}")
    return wall


def series_figures(workdir: Path) -> pd.DataFrame:
    """Per series (workload, geometry, arm): blocks measured, and seconds from its first
    run's start to its last run's end."""
    runs = pd.read_csv(workdir / "results" / "summary" / "runs.csv")
    keys = [k for k in ("workload", "nodes", "gpus", "ranks", "threads", "arm") if k in runs]
    # start and end are ISO times; blocks counted after the warm-up ones
    data = runs.assign(_start=pd.to_datetime(runs["start"], utc=True, errors="coerce"),
                       _end=pd.to_datetime(runs["end"], utc=True, errors="coerce"),
                       _counted=~runs.get("warmup", pd.Series(False, index=runs.index))
                       .fillna(False).astype(bool))
    out = data.groupby(keys, dropna=False).agg(
        first=("_start", "min"), last=("_end", "max")).reset_index()
    counted = data[data["_counted"]].groupby(keys, dropna=False)["repeat"].nunique()
    out["blocks"] = [counted.get(tuple(r), 0) if len(keys) > 1 else counted.get(r[0], 0)
                     for r in out[keys].itertuples(index=False, name=None)]
    out["seconds"] = (out["last"] - out["first"]).dt.total_seconds()
    return out


def main() -> int:
    mode, rest = mode_of()
    parser = argparse.ArgumentParser()
    parser.add_argument("--campaigns", type=int, default=5)
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--with-containers", action="store_true")
    parser.add_argument("--config-extra", default="{}",
                        help="YAML merged over each campaign's config (top-level keys)")
    args = parser.parse_args(rest)
    smoke = mode == "smoke"
    k_total = 1 if smoke else args.campaigns
    base = args.dir or Path(tempfile.mkdtemp(prefix="aa-campaigns-"))
    base.mkdir(parents=True, exist_ok=True)
    config = campaign_config(args.with_containers, smoke, yaml.safe_load(args.config_extra) or {})
    load_before = loadavg()
    per_campaign, rows = [], []
    for k in range(1, k_total + 1):
        workdir = base / f"campaign-{k}"
        if workdir.exists():
            shutil.rmtree(workdir)
        workdir.mkdir()
        wall = run_campaign(workdir, config, base / f"campaign-{k}.log")
        overhead = pd.read_csv(workdir / "results" / "summary" / "overhead.csv")
        series = series_figures(workdir)
        aa = overhead[overhead["runtime"] == AA]
        own = overhead.get("verdict_unadjusted", overhead["verdict"])
        record = {
            "campaign": k, "wall_s": round(wall, 1), "comparisons": len(overhead),
            "aa_comparisons": len(aa),
            "false_difference": bool(aa["verdict"].isin(CLAIMS).any()),
            "false_difference_unadjusted": bool(own[aa.index].isin(CLAIMS).any()),
            "conclusive": int(overhead["verdict"].isin(CONCLUSIVE).sum()),
            "conclusive_unadjusted": int(own.isin(CONCLUSIVE).sum()),
            "median_blocks": float(series["blocks"].median()),
            "median_series_s": round(float(series["seconds"].median()), 1),
            "verdicts": [f"{r.workload} r{r.ranks} {r.runtime}: {r.verdict_text}"
                         for r in overhead.itertuples()],
        }
        per_campaign.append(record)
        rows.append(overhead.assign(campaign=k))
        print(f"campaign {k}: {record['wall_s']} s, false difference "
              f"{record['false_difference']} (alone: {record['false_difference_unadjusted']}), "
              f"conclusive {record['conclusive']}/{record['comparisons']}", flush=True)
    table = pd.concat(rows, ignore_index=True)
    table.to_csv(base / "overhead_all.csv", index=False)
    k_false = sum(r["false_difference"] for r in per_campaign)
    k_false_own = sum(r["false_difference_unadjusted"] for r in per_campaign)
    n_rows = sum(r["comparisons"] for r in per_campaign)
    figures = {
        "campaigns": k_total,
        "false_difference_campaigns": k_false,
        "false_difference_rate": round(k_false / k_total, 3),
        "false_difference_rate_ci95": [round(x, 3) for x in clopper_pearson(k_false, k_total)],
        "false_difference_campaigns_unadjusted": k_false_own,
        "conclusive_share": round(sum(r["conclusive"] for r in per_campaign) / n_rows, 3),
        "conclusive_share_unadjusted": round(
            sum(r["conclusive_unadjusted"] for r in per_campaign) / n_rows, 3),
        "median_blocks_per_series": float(pd.Series(
            [r["median_blocks"] for r in per_campaign]).median()),
        "median_series_s": float(pd.Series([r["median_series_s"] for r in per_campaign]).median()),
        "median_campaign_wall_s": float(pd.Series([r["wall_s"] for r in per_campaign]).median()),
        "per_campaign": per_campaign,
        "dir": str(base),
    }
    human = (f"{k_false}/{k_total} campaigns with a false difference over the campaign "
             f"({k_false_own}/{k_total} by each comparison alone); conclusive "
             f"{figures['conclusive_share']:.0%} ({figures['conclusive_share_unadjusted']:.0%} "
             f"alone); median {figures['median_blocks_per_series']:g} blocks, "
             f"{figures['median_series_s']:.0f} s per series")
    report("aa_campaigns", mode, figures, human, load_before)
    return 0


if __name__ == "__main__":
    sys.exit(main())
