"""Snakemake glue: llm_load.csv, runs.csv and each run's requests.jsonl -> the figures of
LLM serving under load (scalesweep.report.load_figures): latency vs throughput with the
Pareto front, goodput vs request rate, TTFT and TPOT distributions."""

import sys
from pathlib import Path

sys.stderr = open(snakemake.log[0], "w")  # noqa: F821
sys.path.insert(0, str(Path(snakemake.config["_code_root"]) / "workflow"))  # noqa: F821

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from scalesweep.report.load_figures import (distribution_figure, goodput_figure,  # noqa: E402
                                            latency_throughput_figure, request_rows)

sm = snakemake  # noqa: F821


def read(path):
    try:
        return pd.read_csv(path)
    except pd.errors.EmptyDataError:  # nothing measured under load yet
        return pd.DataFrame()


load, runs = read(sm.input.load), read(sm.input.runs)
targets = {w: t for w, t in (sm.params.targets or {}).items() if t}
requests = request_rows(runs) if not runs.empty else pd.DataFrame()
for figure, path in ((latency_throughput_figure(load, targets), sm.output.latency),
                     (goodput_figure(load, targets), sm.output.goodput),
                     (distribution_figure(requests, targets), sm.output.distributions)):
    figure.savefig(path, dpi=110)
    plt.close(figure)
print(f"{len(load)} load rows, {len(requests)} open-loop requests drawn", file=sys.stderr)
