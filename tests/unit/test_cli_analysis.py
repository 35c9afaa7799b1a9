"""The real ``scalesweep scaling`` / ``scalesweep overhead`` commands, good and bad input."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import scalesweep_cli
from scalesweep.analyse.multiplicity import adjust_verdicts
from scalesweep.analyse.overhead import VERDICT_COLUMNS

from scalesweep.analyse.collect import RUN_COLUMNS
from scalesweep.campaign import analysis_cli

PUBLISHED = Path(__file__).parents[1] / "data" / "published"


scalesweep = scalesweep_cli  # in this process (tests/conftest.py)


def test_the_console_script_runs(tmp_path):
    """The real entry point, as a process: ``python -m scalesweep`` on a table."""
    path = write(tmp_path, "nodes,time_s\n1,10\n2,5.5\n")
    proc = subprocess.run([sys.executable, "-m", "scalesweep", "scaling", str(path)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "efficiency" in proc.stdout


def table_from(result: subprocess.CompletedProcess) -> pd.DataFrame:
    assert result.returncode == 0, result.stderr
    return pd.read_csv(io.StringIO(result.stdout))


def write(tmp_path: Path, text: str, name: str = "runs.csv") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_scaling_reproduces_the_published_lrz_efficiencies():
    published = pd.read_csv(PUBLISHED / "sng_3dgan_1rank.csv")
    result = scalesweep("scaling", PUBLISHED / "sng_3dgan_1rank.csv")
    out = table_from(result)
    assert out.columns[:6].tolist() == ["nodes", "time_s", "n", "median", "min", "max"]
    assert {"linear_time_s", "speedup", "efficiency_pct", "flag"} <= set(out.columns)
    assert out["nodes"].tolist() == published["nodes"].tolist()
    printed = published["efficiency_pct"].fillna(100)
    # ours carries 2 decimals, theirs 1: equal within half their last digit (+ our rounding)
    assert ((out["efficiency_pct"] - printed).abs() <= 0.055).all()
    assert (out["linear_time_s"] - published["linear_time_s"]).abs().max() < 0.01
    # the printed linear_time_s / efficiency_pct columns are numeric, so not groups
    assert "ignored numeric column(s) linear_time_s, efficiency_pct" in result.stderr


def test_scaling_groups_by_text_columns_and_averages_repeats(tmp_path):
    path = write(tmp_path, "task,nodes,time_s,repeat\n"
                           "train,1,10,0\ntrain,1,12,1\ntrain,2,5.5,0\ninfer,2,4,0\ninfer,4,2,0\n")
    out = table_from(scalesweep("scaling", path, "--cv-threshold", "0.2"))
    assert out[["task", "nodes", "time_s", "n"]].values.tolist() == [
        ["infer", 2, 4.0, 1], ["infer", 4, 2.0, 1], ["train", 1, 11.0, 2], ["train", 2, 5.5, 1]]
    assert out["efficiency_pct"].tolist() == [100.0, 100.0, 100.0, 100.0]
    assert out["flag"].fillna("").tolist() == ["single_repeat"] * 2 + ["", "single_repeat"]


def test_scaling_weak_mode_and_explicit_baseline(tmp_path):
    path = write(tmp_path, "gpus,time_s\n1,10\n2,10\n4,12.5\n")
    out = table_from(scalesweep("scaling", path, "--count-col", "gpus", "--mode", "weak",
                                "--baseline", "2"))
    assert out["efficiency_pct"].tolist() == [100.0, 100.0, 80.0]


def test_overhead_of_the_wide_odo_table():
    out = table_from(scalesweep("overhead", PUBLISHED / "odo_llm_astrollama.csv"))
    # the verdict columns of scalesweep.analyse.overhead.verdict_table, whatever the data
    assert out.columns.tolist() == adjust_verdicts(
        pd.DataFrame(columns=["gpus", "runtime", *VERDICT_COLUMNS])).columns.tolist()
    assert out["runtime"].unique().tolist() == ["container"]
    assert out.set_index("gpus").at[1, "overhead_pct"] == -39.93
    # no repeats: no CI or test, an inconclusive verdict asking for repeats
    assert out["overhead_ci95_low_pct"].isna().all() and out["p_value"].isna().all()
    assert set(out["verdict"]) == {"inconclusive"} and (out["repeats_needed"] == 2).all()
    assert (out["margin_pct"] == 2.0).all() and (out["target_ci_pp"] == 2.0).all()


def test_overhead_of_the_llsc_means_shows_the_printed_discrepancy():
    published = pd.read_csv(PUBLISHED / "llsc_singularity_snn.csv").dropna()
    out = table_from(scalesweep("overhead", PUBLISHED / "llsc_singularity_snn.csv",
                                "--time-col", "mean_s"))
    ours = out.set_index("task")["overhead_pct"].round(1)
    printed = published.set_index("task")["overhead_pct"]
    assert (ours == printed).tolist() == [True, False, False]  # training only; see test_analysis


def test_overhead_with_repeats_adds_ci_and_welch_test(tmp_path):
    path = write(tmp_path, "runtime,time_s\n" + "".join(
        f"{runtime},{t}\n" for runtime, t in [("native", 10.0), ("native", 10.2),
                                              ("native", 9.8), ("apptainer", 12.1),
                                              ("apptainer", 11.9), ("apptainer", 12.0)]))
    row = table_from(scalesweep("overhead", path)).iloc[0]
    assert row["overhead_pct"] == 20.0
    assert row["overhead_ci95_low_pct"] < 20 < row["overhead_ci95_high_pct"]
    assert row["p_value"] < 0.001 and bool(row["significant"])


BAD_INPUT = [
    # (command, file text or None for no file, extra args, text the one error line names)
    ("scaling", None, [], "no such file"),
    ("scaling", "", [], "empty file"),
    ("scaling", "nodes,time_s\n", [], "no data rows"),
    ("scaling", "nodes,seconds\n1,10\n", [],
     "missing column time_s (needs nodes, time_s; has nodes, seconds)"),
    ("scaling", "nodes,time_s\n1,10\n2,abc\n", [], "time_s must be a positive number; line 3 has 'abc'"),
    ("scaling", "nodes,time_s\n1,10\n\n2,-5\n", [], "line 4 has '-5'"),
    ("scaling", "nodes,time_s\n1,10\n2,\n", [], "line 3 has an empty cell"),
    ("scaling", "nodes,time_s\n1,10\n1.5,6\n", [], "nodes must be a positive whole number; line 3 has '1.5'"),
    ("scaling", "nodes,time_s\n0,10\n", [], "line 2 has '0'"),
    ("scaling", "nodes,time_s\n1,10\n2,6\n", ["--baseline", "3"],
     "baseline nodes=3 is not in the table (nodes present: 1, 2)"),
    ("scaling", "nodes,time_s\n1,10\n", ["--group-by", "gpus"], "no --group-by column gpus"),
    ("overhead", "gpus,runtime,time_s\n1,native,10\n1,apptainer,11\n2,apptainer,6\n",
     ["--group-by", "gpus"], "no runtime='native' rows in group gpus=2"),
    ("overhead", "runtime,time_s\nnative,10\napptainer,0\n", [], "line 3 has '0'"),
    ("overhead", "runtime,time_s\nnative,10\n", [], "no runtime other than 'native'"),
    ("overhead", "gpus,native_s,container_s\n1,5.9,x\n", [], "line 2 has 'x'"),
    # --group-by narrows the grouping; where another setting then differs within a row,
    # refused with the columns named (never pooled)
    ("overhead", "gpus,ranks,runtime,time_s\n1,1,native,10\n1,2,native,6\n"
     "1,1,apptainer,11\n1,2,apptainer,6.5\n", ["--group-by", "gpus"],
     "--group-by 'gpus' would pool runs that differ in ranks (gpus=1, runtime=native has "
     "ranks 1, 2); name it in --group-by too"),
    ("overhead", "model,gpus,ranks,runtime,time_s\na,1,1,native,10\nb,1,2,native,6\n"
     "a,1,1,apptainer,11\nb,1,2,apptainer,6.5\n", ["--group-by", "gpus"],
     "would pool runs that differ in model, ranks ("),
    ("scaling", "workload,gpus,nodes,time_s\ncnn,1,1,10\nllm,1,1,20\ncnn,1,2,6\n",
     ["--group-by", "gpus"], "--group-by 'gpus' would pool runs that differ in workload "
     "(gpus=1, nodes=1 has workload cnn, llm)"),
    # count/world_size (derived from the point) never group, and never pool either
    ("scaling", "count,nodes,time_s\n1,1,10\n2,1,6\n", [],
     "grouping by every setting would pool runs that differ in count (nodes=1 has count 1, 2)"),
    ("scaling", "nodes,time_s\n1,10\n", ["--group-by", "nodes"],
     "--group-by cannot name nodes: it is the count column"),
    ("overhead", "gpus,runtime,repeat,time_s\n1,native,1,10\n", ["--group-by", "repeat"],
     "--group-by cannot name repeat: it is the repeat column"),
]


@pytest.mark.parametrize(("command", "text", "extra", "expected"), BAD_INPUT)
def test_bad_input_exits_2_with_one_line_naming_the_fault(tmp_path, command, text, extra,
                                                          expected):
    path = tmp_path / "runs.csv" if text is None else write(tmp_path, text)
    result = scalesweep(command, path, *extra)
    assert result.returncode == 2, result.stdout
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith(f"scalesweep {command}: error: {path}: ")
    assert expected in result.stderr
    assert result.stdout == ""


def test_bad_options_are_refused_by_argparse(tmp_path):
    path = write(tmp_path, "nodes,time_s\n1,10\n2,6\n")
    for args in (["scaling", path, "--cv-threshold", "nan"],
                 ["scaling", path, "--cv-threshold", "-1"],
                 ["overhead", path, "--margin-pct", "nan"],
                 ["overhead", path, "--format", "html"]):
        result = scalesweep(*args)
        assert result.returncode == 2 and result.stdout == "", args
        assert "argument --" in result.stderr, result.stderr


def test_non_negative_refuses_nan_and_negatives():
    assert analysis_cli.non_negative("0") == 0.0 and analysis_cli.non_negative("2.5") == 2.5
    for text in ("nan", "-0.1", "abc"):
        with pytest.raises(Exception, match="must be"):
            analysis_cli.non_negative(text)


# --- grouping: every setting groups, in both layouts; nothing unlike is pooled ----------------

# two GPU counts, 3 repeats each, the container 10% slower at 1 GPU and 50% at 2: pooled into
# one row the overhead would be about 24%, which is neither
LONG = ("gpus,runtime,repeat,time_s\n"
        "1,native,1,10.0\n1,native,2,10.2\n1,native,3,9.8\n"
        "1,apptainer,1,11.0\n1,apptainer,2,11.22\n1,apptainer,3,10.78\n"
        "2,native,1,4.0\n2,native,2,4.1\n2,native,3,3.9\n"
        "2,apptainer,1,6.0\n2,apptainer,2,6.15\n2,apptainer,3,5.85\n")
WIDE = ("gpus,repeat,native_s,apptainer_s\n"
        "1,1,10.0,11.0\n1,2,10.2,11.22\n1,3,9.8,10.78\n"
        "2,1,4.0,6.0\n2,2,4.1,6.15\n2,3,3.9,5.85\n")


def test_overhead_of_a_long_table_is_one_row_per_gpu_count(tmp_path):
    result = scalesweep("overhead", write(tmp_path, LONG))
    out = table_from(result)
    assert out[["gpus", "runtime", "n_native", "n"]].values.tolist() == [
        [1, "apptainer", 3, 3], [2, "apptainer", 3, 3]]
    assert out["overhead_pct"].tolist() == [10.0, 50.0]
    assert out["paired"].tolist() == [True, True]  # each repeat once a side
    # paired: geometric means of the repeats
    assert out["native_s"].tolist() == [9.9987, 3.9992]
    assert out["time_s"].tolist() == [10.9985, 5.9987]
    assert out["verdict"].tolist() == ["slower", "slower"]
    assert out["verdict_text"].iloc[0].startswith("slower by 10.0% (95% CI ")
    # notes on stderr only: stdout is the CSV alone
    assert result.stderr == "scalesweep overhead: note: grouped by gpus\n"


def test_overhead_of_the_same_data_wide_gives_the_same_rows(tmp_path):
    long = table_from(scalesweep("overhead", write(tmp_path, LONG, "long.csv")))
    wide = table_from(scalesweep("overhead", write(tmp_path, WIDE, "wide.csv")))
    pd.testing.assert_frame_equal(wide, long)
    assert len(wide) == 2


def test_overhead_group_by_narrows_and_keeps_rows_apart(tmp_path):
    text = LONG.replace("gpus,", "site,gpus,").replace("\n1,", "\nlrz,1,").replace(
        "\n2,", "\nlrz,2,")
    out = table_from(scalesweep("overhead", write(tmp_path, text), "--group-by", "gpus"))
    assert "site" not in out.columns  # constant, so nothing is pooled without it
    assert out[["gpus", "overhead_pct"]].values.tolist() == [[1, 10.0], [2, 50.0]]
    both = table_from(scalesweep("overhead", write(tmp_path, text)))
    assert both[["site", "gpus", "overhead_pct"]].values.tolist() == [
        ["lrz", 1, 10.0], ["lrz", 2, 50.0]]


def test_overhead_margin_and_target_options(tmp_path):
    # paired repeats 1% apart with a tight spread: equivalent within 2%, slower within 0.5%
    text = "runtime,repeat,time_s\n" + "".join(
        f"native,{r},{t}\napptainer,{r},{t * 1.01 * (1 + d)}\n"
        for r, (t, d) in enumerate([(10.0, 0.0005), (10.4, -0.0005), (9.7, 0.0),
                                    (10.1, 0.0003)], 1))
    path = write(tmp_path, text)
    default = table_from(scalesweep("overhead", path)).iloc[0]
    assert default["verdict"] == "equivalent" and default["margin_pct"] == 2.0
    strict = table_from(scalesweep("overhead", path, "--margin-pct", "0.5",
                                   "--target-ci-pp", "0.01")).iloc[0]
    assert strict["verdict"] == "slower" and strict["margin_pct"] == 0.5
    assert strict["target_ci_pp"] == 0.01 and not strict["target_met"]
    assert strict["repeats_needed"] > 0 and default["repeats_needed"] == 0


def test_overhead_statistic_adds_its_columns(tmp_path):
    out = table_from(scalesweep("overhead", write(tmp_path, LONG), "--statistic", "min"))
    assert out[["gpus", "native_min_s", "min_s", "overhead_min_pct"]].values.tolist() == [
        [1, 9.8, 10.78, 10.0], [2, 3.9, 5.85, 50.0]]
    assert out["overhead_pct"].tolist() == [10.0, 50.0]  # the verdict stays on means


def test_scaling_is_per_workload_and_per_gpu_count(tmp_path):
    path = write(tmp_path, "workload,gpus,nodes,time_s\n"
                           "cnn,1,1,100\ncnn,1,2,55\ncnn,2,1,60\ncnn,2,2,40\n"
                           "llm,1,1,20\nllm,1,2,12.5\n")
    result = scalesweep("scaling", path)
    out = table_from(result)
    assert out[["workload", "gpus", "nodes", "time_s", "efficiency_pct"]].values.tolist() == [
        ["cnn", 1, 1, 100.0, 100.0], ["cnn", 1, 2, 55.0, 90.91],
        ["cnn", 2, 1, 60.0, 100.0], ["cnn", 2, 2, 40.0, 75.0],
        ["llm", 1, 1, 20.0, 100.0], ["llm", 1, 2, 12.5, 80.0]]
    assert result.stderr == "scalesweep scaling: note: grouped by workload, gpus\n"


def test_scaling_notes_when_every_row_is_its_own_group(tmp_path):
    # ranks grows with nodes: grouping by it leaves one count per group
    path = write(tmp_path, "ranks,nodes,time_s\n1,1,10\n2,2,6\n")
    result = scalesweep("scaling", path)
    assert table_from(result)["efficiency_pct"].tolist() == [100.0, 100.0]
    assert "every row is its own group" in result.stderr
    out = table_from(scalesweep("scaling", path, "--count-col", "ranks", "--group-by", ""))
    assert out["efficiency_pct"].tolist() == [100.0, 83.33]


def test_markdown_format(tmp_path):
    result = scalesweep("scaling", write(tmp_path, "task,nodes,time_s\ntrain,1,10\n"
                                                   "train,2,6.25\n"), "--format", "markdown")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("| task  | nodes | time_s |   n |")
    assert lines[1].startswith("| ----- | ----: | -----: | --: |")  # numbers right-aligned
    assert lines[3].startswith("| train |     2 |   6.25 |   1 |")
    assert "|           80.0 |" in lines[3]  # efficiency_pct, its header 14 wide
    assert len(lines) == 4 and "note" not in result.stdout
    table = pd.DataFrame({"a": ["x|y", None], "b": [1.5, np.nan]})
    assert analysis_cli.markdown_table(table) == (
        "| a    |   b |\n| ---- | --: |\n| x\\|y | 1.5 |\n|      |     |\n")


# --- the workflow's own runs.csv ---------------------------------------------------------------

def workflow_runs() -> pd.DataFrame:
    """A runs.csv as aggregate writes it (collect.RUN_COLUMNS, then the LLM columns): CNN
    training at nodes 1, 2 x ranks 1, 2 (10% slower per extra node than linear), LLM
    inference of two models at 1 and 2 GPUs; native and apptainer (10% slower for CNN, 5%
    for LLM), 3 repeats each; one native run disturbed (and absurdly slow)."""
    rows = []
    points = [("cnn_ddp", "cnn", None, n, 0, r) for n in (1, 2) for r in (1, 2)]
    points += [("llm", "llm", m, 1, g, 1) for m in ("tiny-a", "tiny-b") for g in (1, 2)]
    for workload, payload, model, nodes, gpus, ranks in points:
        for runtime in ("native", "apptainer"):
            for repeat in (1, 2, 3):
                noise = 1 + 0.002 * (repeat - 2)
                if payload == "cnn":
                    base = 100 / (nodes * ranks) * (1 + 0.1 * (nodes - 1))
                    slower, count = 1.10, nodes * ranks
                else:
                    base = 20 / gpus * (2 if model == "tiny-b" else 1)
                    slower, count = 1.05, nodes * gpus
                time_s = base * noise * (slower if runtime == "apptainer" else 1)
                disturbed = (workload, runtime, nodes, ranks, repeat) == (
                    "cnn_ddp", "native", 1, 1, 3)
                row = dict.fromkeys(RUN_COLUMNS)
                row.update(
                    workload=workload, payload=payload, runtime=runtime, nodes=nodes,
                    gpus=gpus, ranks=ranks, threads=1, repeat=repeat, count=count,
                    world_size=nodes * ranks, time_s=999.0 if disturbed else time_s,
                    harness_wall_s=3 * time_s + 1.7 * repeat, peak_rss_mb=500 + repeat,
                    disturbed=disturbed, disturbed_reason="outside CPU 40%" if disturbed else "",
                    outside_cpu_pct=0.1 * repeat, steal_pct=0.0, load1_max=0.5 + repeat,
                    exclusive=True, shared_cores=False, order_position=repeat,
                    hosts="n1", launcher="local", slurm_job_id=1000 + len(rows),
                    image_digest="sha256:abc" if runtime == "apptainer" else None,
                    git_commit="abc123", torch="2.13.0",
                    start=f"2025-01-01T00:{len(rows):02d}:00", end="2025-01-01T01:00:00",
                    path=f"results/runs/{workload}/{runtime}/n{nodes}-g{gpus}-r{ranks}-t1/"
                         f"rep{repeat}/metrics.json")
                if payload == "cnn":
                    row.update(epoch_time_first_s=1.5 * time_s, train_s=3.5 * time_s,
                               images_per_epoch=64, images_per_s=64 / time_s,
                               final_loss=0.4 + 0.01 * repeat, final_accuracy=0.9)
                else:
                    row.update(model=model, model_label=model, synthetic_model=False,
                               tokens_per_s=100 / time_s, requests_per_s=8 / time_s,
                               ttft_p50_s=0.1 * repeat, ttft_p90_s=0.2, ttft_p99_s=0.3,
                               latency_p50_s=1.0, latency_p99_s=2.0, engine="llama.cpp")
                rows.append(row)
    return pd.DataFrame(rows)


POINT = ["workload", "model", "nodes", "gpus", "ranks", "threads"]


def test_the_workflows_runs_csv_gives_one_overhead_row_per_point(tmp_path):
    path = tmp_path / "runs.csv"
    workflow_runs().to_csv(path, index=False)
    result = scalesweep("overhead", path)
    out = table_from(result).fillna({"model": ""})
    points = [tuple(p) for p in out[POINT].itertuples(index=False)]
    assert sorted(points) == sorted(
        [("cnn_ddp", "", n, 0, r, 1) for n in (1, 2) for r in (1, 2)]
        + [("llm", m, 1, g, 1, 1) for m in ("tiny-a", "tiny-b") for g in (1, 2)])
    assert (out["runtime"] == "apptainer").all()
    by = out.set_index(["workload", "model", "nodes", "gpus", "ranks"])
    assert (by.loc["cnn_ddp", "overhead_pct"] == 10.0).all()
    assert (by.loc["llm", "overhead_pct"] == 5.0).all()
    assert by.loc[("llm", "tiny-b", 1, 2, 1), "native_s"] == pytest.approx(20.0, abs=1e-3)
    assert by.loc[("llm", "tiny-a", 1, 2, 1), "native_s"] == pytest.approx(10.0, abs=1e-3)
    # the disturbed run is counted and left out; the rest pair on repeat
    disturbed = by.loc[("cnn_ddp", "", 1, 0, 1)]
    assert (disturbed["n_disturbed"], disturbed["n_native"], disturbed["n"]) == (1, 2, 2)
    assert out["paired"].all() and (out["verdict"] == "slower").all()
    note = result.stderr
    assert note.count("\n") == 1 and note.startswith(
        "scalesweep overhead: note: grouped by workload, payload, nodes, gpus, ranks, "
        "threads, model, model_label, synthetic_model; ignored numeric column(s) ")
    ignored = note.split("; ignored", 1)[1]
    for measured in ("harness_wall_s", "peak_rss_mb", "final_loss", "slurm_job_id", "path",
                     "git_commit", "hosts", "disturbed", "order_position", "tokens_per_s"):
        assert f" {measured}," in ignored or f" {measured} " in ignored, measured
    assert "count" not in ignored and "world_size" not in ignored  # derived, not measured


def test_the_workflows_runs_csv_gives_one_scaling_row_per_point(tmp_path):
    path = tmp_path / "runs.csv"
    workflow_runs().to_csv(path, index=False)
    result = scalesweep("scaling", path)
    out = table_from(result).fillna({"model": ""})
    assert len(out) == 16  # 8 points x 2 runtimes, never pooled across them
    assert not out.duplicated([*POINT, "runtime"]).any()
    cnn = out[out["workload"] == "cnn_ddp"].set_index(["runtime", "ranks", "nodes"])
    # 10% slower than linear at 2 nodes, for every series: efficiency 1 / 1.1, but where
    # the baseline lost its (slightly slow) third repeat: 99.9 / (2 x 55) = 90.82%
    assert cnn.xs(2, level="nodes")["efficiency_pct"].to_dict() == {
        ("apptainer", 1): 90.91, ("apptainer", 2): 90.91, ("native", 1): 90.82,
        ("native", 2): 90.91}
    assert cnn.loc[("native", 1, 1), "n"] == 2  # the disturbed run left out
    assert cnn.loc[("native", 1, 1), "time_s"] == pytest.approx(99.9)
    assert cnn.loc[("apptainer", 2, 2), "time_s"] == pytest.approx(100 / 4 * 1.1 * 1.1)
    llm = out[out["workload"] == "llm"]
    assert sorted(zip(llm["model"], llm["gpus"], llm["runtime"])) == sorted(
        (m, g, rt) for m in ("tiny-a", "tiny-b") for g in (1, 2)
        for rt in ("native", "apptainer"))
    assert "1 run(s) marked disturbed left out" in result.stderr
