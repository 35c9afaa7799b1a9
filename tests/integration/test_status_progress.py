"""`scalesweep status`'s progress line (issue #42): runs measured against the plan's
counts (minimum, expected, maximum) and the run time left, from the campaign's own runs,
on a real finished campaign with a point deleted."""

from __future__ import annotations

import json
import shutil

import pytest

from conftest import scalesweep_cli

pytestmark = pytest.mark.integration

R2 = "cnn_ddp/native/n1-g0-r2-t1/rep1/native"


def test_progress_counts_the_measured_runs_and_the_time_left(small_finished, tmp_path):
    wd = tmp_path / "campaign"
    shutil.copytree(small_finished, wd, symlinks=True)
    finished = json.loads(scalesweep_cli("status", "-d", wd, "--json").stdout)["progress"]
    assert finished["measured"] == 2
    for scenario in ("minimum", "expected", "maximum"):
        assert finished[scenario] == {"runs": 2, "left": 0, "left_s": 0.0, "unknown": 0}
    text = scalesweep_cli("status", "-d", wd).stdout
    assert "progress: 2 runs measured (the plan: 2); nothing left to measure" in text, text

    wall = json.loads((wd / "results/runs" / R2 / "metrics.json").read_text())["harness_wall_s"]
    (wd / "results/runs" / R2 / "metrics.json").unlink()
    proc = scalesweep_cli("status", "-d", wd, "--json")
    left = json.loads(proc.stdout)["progress"]
    assert left["measured"] == 1
    # the deleted run's time is what its own measurement said no more: nothing measured
    # of its geometry is left, so the plan falls back to its nodes' (the 1-rank run's)
    one_rank = json.loads((wd / "results/runs" / R2.replace("r2", "r1") / "metrics.json")
                          .read_text())["harness_wall_s"]
    assert left["minimum"]["left"] == left["maximum"]["left"] == 1
    assert left["minimum"]["left_s"] == pytest.approx(one_rank)
    assert left["finish"] is not None
    text = scalesweep_cli("status", "-d", wd).stdout
    assert (f"progress: 1 runs measured (the plan: 2); left: 1 run, "
            f"{one_rank:.0f} s of run time, a run's median ") in text, text
    assert "expected to finish ~" in text, text
    assert wall > 0


def test_watch_follows_the_campaign_and_stays_quiet_in_a_log(small_finished, tmp_path):
    """`scalesweep status --watch`: the counts, the progress line and the block being
    measured, looked at again until nothing is left; in a log (not a terminal) a look that
    says nothing new prints nothing; a finished campaign ends the watch at once."""
    from scalesweep.record.pointdir import RUNNING_JSON, owner_record

    wd = tmp_path / "campaign"
    shutil.copytree(small_finished, wd, symlinks=True)
    out = scalesweep_cli("status", "-d", wd, "--watch", "0", "--watch-count", "5")
    assert out.returncode == 0
    assert out.stdout.count("requested points") == 1, out.stdout
    assert "2 requested points: 2 done" in out.stdout
    assert out.stdout.rstrip().endswith("nothing left to measure"), out.stdout

    point = wd / "results/runs" / R2
    (point / "metrics.json").unlink()
    out = scalesweep_cli("status", "-d", wd, "--watch", "0", "--watch-count", "3")
    assert out.returncode == 0 and out.stdout.count("requested points") == 1, out.stdout
    assert "1 done, 1 missing" in out.stdout and "left: 1 run" in out.stdout, out.stdout
    assert "nothing left to measure" not in out.stdout

    # a run in flight (its owner record, as the harness writes it: this process, alive)
    (point / RUNNING_JSON).write_text(json.dumps(owner_record()))
    out = scalesweep_cli("status", "-d", wd, "--watch", "0", "--watch-count", "1")
    assert "1 done, 1 running" in out.stdout, out.stdout
    assert "measuring: cnn_ddp/native/n1-g0-r2-t1/rep1 (native)" in out.stdout, out.stdout
