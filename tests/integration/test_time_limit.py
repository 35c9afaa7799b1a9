"""A hung rank ends its point at the point's time limit, outside Slurm too (issue #40, 2).

`kill -STOP` of one rank of a 2-rank point run locally used to hang it until something
outside ended it. The harness now has the limit a Slurm job would have
(scalesweep.run.payload_process.time_limit_s); past it, every process of the point is stopped
(SIGTERM and SIGCONT, then SIGKILL: a stopped process acts on nothing else) and the
attempt fails "time limit N s exceeded". Real processes: a harness as Snakemake starts
it, mpirun and two ranks of a stand-in payload, one of them SIGSTOPped by the test.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, have
from scalesweep.analyse.collect import point_states
from scalesweep.plan.sweep import SweepPoint
from scalesweep.record.failures import read_attempts
from test_reaper import kill_all, launch_spec, pids_of, wait_for

pytestmark = pytest.mark.integration

LIMIT_S = 6  # the ranks are up within a second or two; the test stops one at once
POINT = "cnn_ddp/native/n1-g0-r2-t1/rep1/native"

# test_reaper's harness with the point's time limit (run_point.py passes
# time_limit_s(workload, site): minutes; a test cannot wait one)
HARNESS = """\
import json, os, sys
from scalesweep.plan.config import validated
from scalesweep.plan.sweep import SweepPoint
from scalesweep.platform.launch import Launch
from scalesweep.platform.site import load_site
from scalesweep.run.harness import execute
sys.path.insert(0, {tests!r})
from conftest import tiny_config
spec = json.loads(sys.argv[1])
point = SweepPoint.from_path(spec.pop("point"))
out = spec.pop("out")
limit = spec.pop("time_limit_s")
measurement = validated(tiny_config())["measurement"]
sys.exit(execute(point, Launch(**spec), os.path.join(out, "metrics.json"),
                 os.path.join(out, "run.log"), measurement={{**measurement, "sample_interval_s": 0.2}},
                 site=load_site("local"), time_limit_s=limit))
""".format(tests=str(REPO / "tests"))

# two ranks that do one step together: each writes its pid, waits for the test's "go",
# marks its step and waits for the other's mark (never comes: rank 1 is stopped)
HUNG_PAYLOAD = """\
import os, sys, time
d = os.path.dirname(sys.argv[sys.argv.index("--out") + 1])
rank = int(os.environ.get("OMPI_COMM_WORLD_RANK") or os.environ.get("RANK") or 0)
with open(os.path.join(d, f"pid-{rank}.tmp"), "w") as fh:
    fh.write(str(os.getpid()))
os.replace(os.path.join(d, f"pid-{rank}.tmp"), os.path.join(d, f"pid-{rank}"))
while not os.path.exists(os.path.join(d, "go")):
    time.sleep(0.05)
open(os.path.join(d, f"step-{rank}"), "w").close()
while not os.path.exists(os.path.join(d, f"step-{1 - rank}")):
    time.sleep(0.05)
"""


def state_of(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


@pytest.mark.skipif(not have("mpirun"), reason="mpirun not installed (apt-get install openmpi-bin)")
def test_a_sigstopped_rank_fails_its_point_at_the_time_limit_and_nothing_survives(tmp_path):
    """kill -STOP of rank 1 of a 2-rank mpirun point (the local site's launcher), rank 0
    waiting for it: at the limit the attempt fails "time limit 6 s exceeded" (exit 124) in
    failure.json, attempts.jsonl, the run log and the point's state as `scalesweep status`
    reads it; no process of the point is alive when the harness returns, the stopped rank
    included; nothing is measured."""
    out = tmp_path / "results" / "runs" / POINT
    spec = launch_spec(tmp_path, out, "mpirun")
    (Path(spec["code_root"]) / "scripts" / "stand_in.py").write_text(HUNG_PAYLOAD)
    spec["time_limit_s"] = LIMIT_S
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env.update(PYTHONPATH=str(REPO / "workflow"), USER=os.environ.get("USER", "root"))
    marker = str(tmp_path)
    harness = subprocess.Popen([sys.executable, "-c", HARNESS, json.dumps(spec)], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: harness.poll() is not None
                 or all((out / f"pid-{r}").exists() for r in (0, 1)), "both ranks up")
        assert harness.poll() is None, "the limit came before the ranks were up: raise LIMIT_S"
        stopped = int((out / "pid-1").read_text())
        os.kill(stopped, signal.SIGSTOP)
        wait_for(lambda: state_of(stopped) in ("T", "t", None), "rank 1 stopped")
        assert state_of(stopped) in ("T", "t"), "rank 1 gone before the limit"
        (out / "go").touch()  # rank 0 steps and waits for rank 1, which never comes
        _, err = harness.communicate(timeout=120)  # without a limit: never
        survivors = pids_of(marker)  # the harness has stopped and reaped them all
    finally:
        harness.kill()
        kill_all(marker)
    assert harness.returncode == 124, err
    assert survivors == [], f"alive after the harness returned: {survivors}"
    assert state_of(stopped) is None
    print((out / "run.1.log").read_text())
    # rank 0 stepped and waited for rank 1 (which may have run again once SIGCONTed: mpirun
    # continues its ranks to stop them, so may the harness)
    assert (out / "step-0").exists()
    reason = f"time limit {LIMIT_S} s exceeded"
    failure = json.loads((out / "failure.json").read_text())
    assert (failure["reason"], failure["exit_code"], failure["time_limit_s"]) == (reason, 124, LIMIT_S)
    assert any(w.startswith(f"{stopped} ") for w in failure["stopped_at_time_limit"]), failure
    (attempt,) = read_attempts(out)
    assert (attempt["state"], attempt["reason"]) == ("failed", reason)
    assert f"# {reason}: stopped (SIGTERM and SIGCONT, then SIGKILL" in (out / "run.1.log").read_text()
    assert f"point {POINT} failed: {reason}; log: " in err
    assert not (out / "metrics.json").exists()
    (row,) = point_states([SweepPoint.from_path(POINT)], str(tmp_path / "results")).itertuples()
    assert (row.state, row.reason) == ("failed", reason)  # as `scalesweep status` lists it
