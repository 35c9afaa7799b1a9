"""benchmarks/report_scale.py --smoke: its synthetic campaign is one the workflow takes as
measured (the summary made, no point planned to run again), and the script prints its
figures. The report's own ~45 jobs are left out (--steps summary): they take 2 minutes
even at this size, and the report has its own tests (tests/integration/test_report.py).
"""

import json
import subprocess
import sys

from conftest import REPO
from test_benchmarks_smoke import bench_env  # noqa: F401  (the scontrol shim, a fixture)


def test_report_scale_smoke(bench_env, tmp_path):  # noqa: F811
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "report_scale.py"), "--smoke",
         "--steps", "summary", "--keep", str(tmp_path)],
        cwd=REPO, capture_output=True, text=True, timeout=120, env=bench_env)
    assert proc.returncode == 0, f"{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    lines = proc.stdout.strip().splitlines()
    result = json.loads(lines[-2])
    assert lines[-1].startswith("report_scale (smoke): 160 runs -> ")
    assert result["benchmark"] == "report_scale" and result["runs"] == 160
    (measured,) = result["measured"]
    summary = measured["steps"]["summary"]
    # the summary's jobs only: every point's metrics.json taken as it is, listed per
    # workload and arm (rule runs_list: 5 workloads, 2 arms each, one list an arm at
    # this size) for the aggregate job
    assert summary["jobs"] == {"runs_list": 10, "aggregate": 1, "summary": 1, "total": 12}
    assert summary["s"] > 0 and summary["peak_rss_mib"] > 0
    assert measured["runs_csv_mib"] > 0
