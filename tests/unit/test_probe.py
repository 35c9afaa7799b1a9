"""The machine's speed with every run (issue 25): the probe (scalesweep.measure.probe), its record
in metrics.json by the harness, runs.csv's probe columns, the pair difference the pairing
uses, and the drift table and figure (scalesweep.analyse.drift)."""

from __future__ import annotations

import io
import json
import math
import subprocess
import sys
from datetime import datetime, timedelta, timezone

import numpy as np
import pandas as pd
import pytest

from conftest import REPO, tiny_config
from scalesweep.analyse import drift
from scalesweep.analyse.collect import RUN_COLUMNS, run_row
from scalesweep.analyse.stats import cv_pct
from scalesweep.measure import probe
from scalesweep.plan.config import validated
from scalesweep.plan.sweep import SweepPoint
from scalesweep.platform.launch import Launch
from scalesweep.platform.site import load_site
from scalesweep.report.drift import drift_figure

FAKE_PAYLOAD = ("import json, sys\njson.dump({'workload': 'fake', 'payload_wall_s': 0.01}, "
                "open(sys.argv[sys.argv.index('--out') + 1], 'w'))\n")


def _positive(x) -> bool:
    return isinstance(x, float) and math.isfinite(x) and x > 0


# --- the probe -------------------------------------------------------------------------

def test_the_probe_measures_both_kernels_quickly():
    record = probe.measure(reps=2)
    assert _positive(record["gflops"]) and _positive(record["gbps"])
    assert record["host"] and record["method"] == probe.method()
    assert set(record["kernels"]) == {"sgemm", "sgemv"}
    for kernel in record["kernels"].values():
        assert kernel["best"] >= kernel["median"] > 0 and kernel["reps"] == 2
    assert record["kernels"]["sgemv"]["bytes"] == probe.SGEMV_ROWS * probe.SGEMV_COLS * 4
    assert 0 < record["probe_s"] < 30  # a sanity bound only: ~0.1 s on the 2-core VM


def test_python_m_scalesweep_probe_prints_one_json_line():
    env = probe.probe_env({"PATH": "/usr/bin:/bin"})
    assert env["OPENBLAS_NUM_THREADS"] == "1" and probe.WORKFLOW_DIR in env["PYTHONPATH"]
    out = subprocess.run([sys.executable, "-m", "scalesweep.measure.probe"], env=env,
                         capture_output=True, text=True, timeout=120, check=True).stdout
    lines = out.strip().splitlines()
    assert len(lines) == 1
    record = json.loads(lines[0])
    assert {"host", "gflops", "gbps", "probe_s", "kernels"} <= set(record)
    assert record["threads"] == "1"
    assert probe.parse_output("srun: warning\n" + out + "not json {\n") == [record]


def test_probe_command_per_node():
    argv, note = probe.probe_command(3, "srun", "/py")
    assert argv[:2] == ["srun", "--overlap"] and "--ntasks-per-node=1" in argv
    assert argv[-3:] == ["/py", "-m", "scalesweep.measure.probe"] and note is None
    assert probe.probe_command(1, "local", "/py") == (["/py", "-m", "scalesweep.measure.probe"], None)
    argv, note = probe.probe_command(2, "mpirun", "/py")
    assert argv[0] == "/py" and "only the harness's node" in note


def test_a_failing_probe_is_an_error_never_an_exception(tmp_path):
    records, error, seconds = probe.run_on_nodes([sys.executable, "-c", "import sys; sys.exit(3)"],
                                                 {}, 1)
    assert records == [] and "exited 3" in error and seconds >= 0
    records, error, _ = probe.run_on_nodes([str(tmp_path / "missing")], {}, 1)
    assert records == [] and "did not start" in error
    records, error, _ = probe.run_on_nodes([sys.executable, "-c", "import time; time.sleep(5)"],
                                           {}, 1, timeout_s=0.5)
    assert records == [] and "within" in error


# --- runs.csv and the pairing --------------------------------------------------------------

def _node(host, gflops, gbps):
    return {"host": host, "gflops": gflops, "gbps": gbps, "probe_s": 0.1}


def test_summary_takes_the_slowest_node_and_the_largest_change():
    record = {"before": [_node("a", 100.0, 20.0), _node("b", 90.0, 22.0)],
              "after": [_node("a", 100.0, 18.0), _node("b", 110.0, 22.0)], "method": "m"}
    s = probe.summary(record)
    assert s["probe_gflops"] == pytest.approx(100.0)  # a: 100, b: (90 + 110) / 2 = 100
    assert s["probe_gbps"] == pytest.approx(19.0)  # a: 19, b: 22
    assert s["probe_change_pct"] == pytest.approx(100 * (110 / 90 - 1))  # b's sgemm
    only_before = probe.summary({"before": [_node("a", 100.0, 20.0)], "after": [],
                                 "error": {"after": "probe exited 1"}})
    assert only_before == {"probe_gflops": 100.0, "probe_gbps": 20.0, "probe_change_pct": None}
    none = {"probe_gflops": None, "probe_gbps": None, "probe_change_pct": None}
    assert probe.summary(None) == probe.summary({"before": [], "after": []}) == none


def test_pair_probe_difference_pct():
    a = {"probe_gflops": 100.0, "probe_gbps": 20.0}
    b = {"probe_gflops": 95.0, "probe_gbps": 25.0}
    assert probe.pair_probe_difference_pct(a, b) == pytest.approx(25.0)  # 25 / 20 - 1
    assert probe.pair_probe_difference_pct(b, a) == pytest.approx(25.0)  # symmetric
    assert probe.pair_probe_difference_pct(a, a) == 0.0
    # the kernel of the runs' kind alone, where the caller names it
    assert probe.pair_probe_difference_pct(a, b, "gflops") == pytest.approx(100 * (100 / 95 - 1))
    assert probe.pair_probe_difference_pct(a, b, "gbps") == pytest.approx(25.0)
    # a kernel missing on one side: the other decides; none in both rows: NaN (not judged)
    assert probe.pair_probe_difference_pct(a, {"probe_gflops": 110.0, "probe_gbps": np.nan}) \
        == pytest.approx(10.0)
    assert math.isnan(probe.pair_probe_difference_pct(a, {"probe_gflops": None}))
    assert math.isnan(probe.pair_probe_difference_pct(a, {}))
    # a runs.csv row as the pairing sees it (pandas, after a CSV round trip)
    rows = pd.read_csv(io.StringIO("probe_gflops,probe_gbps\n100,20\n,\n"))
    assert math.isnan(probe.pair_probe_difference_pct(rows.iloc[0], rows.iloc[1]))
    assert probe.pair_probe_difference_pct(rows.iloc[0].to_dict(), a) == 0.0


def _cnn_metrics(**extra):
    return {"point": SweepPoint("cnn", "native", 1, 0, 1, 1, 1).as_dict(),
            "epoch_s": [2.0, 1.0], "train_s": 3.0, "final_loss": 0.5, "final_accuracy": 0.9,
            **extra}


def test_run_row_probe_columns_with_and_without_a_probe():
    for name in ("probe_gflops", "probe_gbps", "probe_change_pct", "within_run_cv_pct"):
        assert name in RUN_COLUMNS
    old = run_row(_cnn_metrics(), "p", "cnn")
    assert old["probe_gflops"] is None and old["probe_gbps"] is None
    assert old["probe_change_pct"] is None and old["within_run_cv_pct"] is None
    record = {"before": [_node("h", 100.0, 20.0)], "after": [_node("h", 90.0, 21.0)]}
    row = run_row(_cnn_metrics(probe=record), "p", "cnn")
    assert row["probe_gflops"] == pytest.approx(95.0)
    assert row["probe_gbps"] == pytest.approx(20.5)
    assert row["probe_change_pct"] == pytest.approx(10.0)


def test_run_row_within_run_spread_of_an_llm_run():
    point = SweepPoint("llm", "native", 1, 0, 1, 1, 1).as_dict()
    rates = [122.7, 125.0, 129.7, 126.0]
    metrics = {"point": point, "wall_s": 10.0, "tokens_per_s": 100.0,
               "requests": [{"ok": True, "decode_tokens_per_s": r} for r in rates]
               + [{"ok": False, "decode_tokens_per_s": 1.0}]}
    row = run_row(metrics, "p", "llm")
    assert row["within_run_cv_pct"] == pytest.approx(100 * np.std(rates, ddof=1) / np.mean(rates))
    # a record with the summary's std only (no requests): from it; neither: None
    summary = {"point": point, "wall_s": 10.0, "decode_tokens_per_s": {"n": 4, "mean": 125.0, "std": 2.5}}
    assert run_row(summary, "p", "llm")["within_run_cv_pct"] == pytest.approx(2.0)
    assert run_row({"point": point, "wall_s": 10.0}, "p", "llm")["within_run_cv_pct"] is None


def test_the_llm_payload_summary_has_its_spread():
    sys.path.insert(0, str(REPO / "scripts"))
    from llm_payload.stats import summarize

    s = summarize([1.0, 3.0])
    assert s["std"] == pytest.approx(math.sqrt(2.0))
    assert summarize([2.0])["std"] is None


def test_the_schema_has_the_probe_tolerance():
    assert validated(tiny_config())["measurement"]["probe_tolerance_pct"] == 10


# --- the harness -----------------------------------------------------------------------

def _fake_launch(tmp_path, point):
    code = tmp_path / "code"
    (code / "scripts").mkdir(parents=True, exist_ok=True)
    (code / "scripts" / "fake.py").write_text(FAKE_PAYLOAD)
    out = tmp_path / "runs" / point.path
    return out, Launch(runtime="native", launcher="local", nodes=1, ranks_per_node=1,
                       threads=1, gpus_per_node=0, payload="scripts/fake.py",
                       args=("--out", str(out / "payload.json")), code_root=str(code),
                       data_dir=str(tmp_path), out_dir=str(out), host_python=sys.executable)


def _execute(tmp_path, monkeypatch):
    from scalesweep.run.harness import execute

    for var in [v for v in __import__("os").environ if v.startswith("SLURM_")]:
        monkeypatch.delenv(var)
    point = SweepPoint("cnn_ddp", "native", 1, 0, 1, 1, 1)
    out, launch = _fake_launch(tmp_path, point)
    measurement = validated(tiny_config())["measurement"]
    rc = execute(point, launch, str(out / "metrics.json"), str(out / "run.log"),
                 measurement={**measurement, "sample_interval_s": 0.2}, site=load_site("local"))
    assert rc == 0, (out / "run.log").read_text()
    return out, json.loads((out / "metrics.json").read_text())


def test_the_harness_probes_before_and_after_the_payload(tmp_path, monkeypatch):
    out, m = _execute(tmp_path, monkeypatch)
    record = m["probe"]
    assert record["method"] == probe.method() and "error" not in record
    for when in ("before", "after"):
        assert len(record[when]) == 1
        assert _positive(record[when][0]["gflops"]) and _positive(record[when][0]["gbps"])
    log = (out / "run.log").read_text()
    assert "# machine probe before" in log and "# machine probe after" in log
    assert record["wall_s"] > 0 and record["nodes"] == {"requested": 1, "probed": 1}
    assert _positive(probe.summary(record)["probe_gflops"])


def test_a_failing_probe_does_not_fail_the_run(tmp_path, monkeypatch):
    from scalesweep.run import watchers

    monkeypatch.setattr(watchers.machine_probe, "probe_command",
                        lambda nodes, launcher, python: ([python, "-c", "raise SystemExit(2)"], None))
    _, m = _execute(tmp_path, monkeypatch)
    assert m["probe"]["before"] == [] and m["probe"]["after"] == []
    assert "exited 2" in m["probe"]["error"]["before"]
    assert probe.summary(m["probe"])["probe_gflops"] is None


# --- the drift table and figure --------------------------------------------------------

def _runs(time_of, n=8, payload="cnn", seed=0, **extra):
    rng = np.random.default_rng(seed)
    t0 = datetime(2025, 1, 1, tzinfo=timezone.utc)
    gflops = 100 + 15 * rng.standard_normal(n)
    gbps = 20 + 3 * rng.standard_normal(n)
    rows = []
    for i in range(n):
        rows.append({"workload": payload, "payload": payload, "runtime": "native", "nodes": 1,
                     "gpus": 0, "ranks": 1, "threads": 1, "repeat": i, "disturbed": False,
                     "time_s": time_of(gflops[i], gbps[i], rng),
                     "probe_gflops": gflops[i], "probe_gbps": gbps[i],
                     "probe_change_pct": 1.0,
                     "start": (t0 + timedelta(minutes=i)).isoformat(),
                     "end": (t0 + timedelta(minutes=i, seconds=30)).isoformat(), **extra})
    return pd.DataFrame(rows)


def test_drift_table_says_the_probe_explains_a_correlated_run_time():
    runs = _runs(lambda g, b, rng: 3000.0 / g + 0.2 * rng.standard_normal())
    table = drift.drift_table(runs)
    assert len(table) == 1
    row = table.iloc[0]
    assert row["n"] == 8 and row["n_probed"] == 8 and row["probe_kernel"] == "probe_gflops"
    assert row["r"] < -0.8 and row["p_value"] < 0.05
    assert row["probe_explains"].startswith(f"probe explains {100 * row['r2']:.0f}% of the "
                                            "run-to-run variance")
    assert row["time_cv_pct"] > 0 and row["probe_gflops_cv_pct"] > 0


def test_drift_table_says_the_probe_does_not_explain_an_uncorrelated_run_time():
    runs = _runs(lambda g, b, rng: 30.0 + rng.standard_normal(), seed=1)
    row = drift.drift_table(runs).iloc[0]
    assert row["p_value"] >= 0.05
    assert row["probe_explains"].startswith(drift.DOES_NOT)


def test_drift_table_leaves_out_disturbed_runs_and_old_runs_without_a_probe():
    runs = _runs(lambda g, b, rng: 3000.0 / g)
    runs.loc[0, "disturbed"] = True
    runs.loc[1:, ["probe_gflops", "probe_gbps"]] = np.nan  # measured before the probe existed
    row = drift.drift_table(runs).iloc[0]
    assert row["n"] == 7 and row["n_disturbed"] == 1 and row["n_probed"] == 0
    assert "too few probed runs (0)" in row["probe_explains"] and "no probed run" in row["note"]
    assert drift.drift_table(pd.DataFrame()).iloc[0]["note"] == "no runs"


def test_drift_table_llm_within_and_between_run_spread():
    # between runs: tokens/s 127..226 (the LLM); inside a run: +-3%
    tps = [148, 205, 226, 217, 207, 169, 149, 127]
    runs = _runs(lambda g, b, rng: 3000.0 / b, payload="llm", within_run_cv_pct=2.0)
    runs["tokens_per_s"] = tps
    row = drift.drift_table(runs).iloc[0]
    assert row["probe_kernel"] == "probe_gbps"
    assert row["between_run_cv_pct"] == pytest.approx(cv_pct(tps))
    assert row["within_run_cv_pct"] == pytest.approx(2.0)
    assert row["spread_ratio"] == pytest.approx(row["between_run_cv_pct"] / 2.0)
    assert row["spread_ratio"] > 3 and row["spread"].startswith(drift.FAR_MORE_TEXT)
    runs["within_run_cv_pct"] = 15.0
    row = drift.drift_table(runs).iloc[0]
    assert row["spread_ratio"] < 3 and "about as much" in row["spread"]


def test_drift_figure_draws_with_and_without_probes(tmp_path):
    import matplotlib.pyplot as plt

    runs = pd.concat([_runs(lambda g, b, rng: 3000.0 / g),
                      _runs(lambda g, b, rng: 3000.0 / b, payload="llm",
                            within_run_cv_pct=2.0).assign(tokens_per_s=100.0)],
                     ignore_index=True)
    runs.loc[2, "disturbed"] = True
    fig = drift_figure(runs, drift.drift_table(runs))
    fig.savefig(tmp_path / "drift.png")
    texts = " ".join(t.get_text() for t in fig.texts)
    assert "probe explains" in texts and "disturbed" in texts
    plt.close(fig)
    old = runs.drop(columns=["probe_gflops", "probe_gbps"])
    fig = drift_figure(old, drift.drift_table(old))
    assert any(drift.NO_PROBE[:30] in t.get_text() for ax in fig.axes for t in ax.texts)
    plt.close(fig)
