"""Why the container differs on Frontier (issue #43): the Apptainer control image's
recipe and command lines, pinned by the Frontier profile's dry run of
config/frontier_attribution.yaml (what cannot run here: Apptainer, Frontier)."""

from __future__ import annotations

import re
import shlex
import shutil
import sys

from conftest import REPO, run_snakemake

CONFIGS = [REPO / "config" / "frontier.yaml", REPO / "config" / "frontier_attribution.yaml"]


def test_frontier_dry_run_builds_the_control_image_and_runs_it_beside_the_workload_image(
        tmp_path, monkeypatch):
    (tmp_path / "config").mkdir()
    shutil.copy(REPO / "config" / "config.yaml", tmp_path / "config" / "config.yaml")
    for name in ("containers", "envs"):  # recipes are named relative to the workdir
        (tmp_path / name).symlink_to(REPO / name)
    monkeypatch.setenv("SBATCH_ACCOUNT", "abc123")
    proc = run_snakemake(tmp_path, "-n", "--profile", str(REPO / "profiles" / "frontier"),
                         "--configfile", *map(str, CONFIGS), timeout=300)
    out = proc.stdout
    builds = {re.search(r"--out resources/images/(\w+)\.sif", line)[1]: shlex.split(line)
              for line in out.splitlines() if " build-image " in line}
    assert set(builds) == {"pytorch", "control"}
    control = builds["control"]
    # the control image: the host's stack (the native runs' interpreter), built with
    # --fakeroot from the Apptainer control recipe, as a SIF
    at = control.index("--python")
    assert control[at + 1] == sys.executable or control[at + 1].endswith("python3")
    assert "--host-stack" in control and "--fakeroot" in control
    assert control[control.index("--builder") + 1] == "apptainer"
    assert control[control.index("--format") + 1] == "sif"
    assert control[control.index("--recipe") + 1].endswith("containers/apptainer/control.def")
    assert "--host-stack" not in builds["pytorch"]
    # each point of apptainer+control runs the control SIF, through srun, as apptainer
    # runs the workload image
    points = [line for line in out.splitlines() if "run_point.py" in line and "# sbatch" in line]
    # results/runs/<workload>/<arm>/<geometry>/<repeat>/<runtime>/metrics.json
    ctl = [p for p in points if "/apptainer+control/metrics.json" in p]
    work = [p for p in points if "/apptainer/metrics.json" in p]
    assert ctl and work
    for line in ctl:
        launch = line.split(" ; ", 1)[1]
        assert "apptainer exec --rocm" in launch and "resources/images/control.sif" in launch
        assert "pytorch.sif" not in launch
    for line in work:
        assert "resources/images/pytorch.sif" in line.split(" ; ", 1)[1]
    # the campaign measures its attribution: no "not measured, no control image" line
    assert "no control image in this campaign" not in out
