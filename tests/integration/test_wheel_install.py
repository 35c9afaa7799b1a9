"""scalesweep installed as a wheel, not a clone (issue #42): `pip install` of the built
wheel into a fresh virtual environment outside the repository; the wheel holds every
file of the tree the workflow runs from, and the documented commands (`scalesweep
init`, `scalesweep run`) measure a tiny campaign and summarise it from the package's own
copy (setup.py's build step). The report's rules are the clone's
(tests/integration/test_report.py), their files checked here to be in the wheel.

The fresh environment gets its dependencies from this test run's environment (a .pth
line naming its site-packages, added after the wheel is installed, so pip resolves
nothing and downloads nothing); scalesweep itself, its workflow, payloads and site
files come from the wheel alone: the clone is not on its path and nothing names it.
"""

from __future__ import annotations

import json
import os
import site
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import REPO, have, tiny_config
from test_deploy import source_copy

pytestmark = pytest.mark.integration


def sh(*cmd, cwd: Path, env: dict | None = None, timeout: int = 600) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=env)
    assert proc.returncode == 0, f"{cmd} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    return proc


def setup_tree() -> tuple[str, ...]:
    """setup.py's TREE (read, not imported: importing it would run setup())."""
    import ast

    for node in ast.parse((REPO / "setup.py").read_text()).body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "TREE":
            return ast.literal_eval(node.value)
    raise AssertionError("setup.py has no TREE")


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A fresh venv with the built wheel installed: its bin/ folder."""
    root = tmp_path_factory.mktemp("wheel")
    dist = root / "dist"
    # built from a copy (a build writes into its source tree), the way a release is: an
    # sdist from the git checkout, then the wheel from the sdist, outside any checkout
    src = source_copy(root / "scalesweep", git=True)
    sh(sys.executable, "setup.py", "-q", "sdist", "-d", dist, cwd=src)
    sdist, = dist.glob("scalesweep-*.tar.gz")
    sh(sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-q",
       "-w", dist, sdist, cwd=root)
    wheel, = dist.glob("scalesweep-*.whl")
    venv = root / "venv"
    sh(sys.executable, "-m", "venv", venv, cwd=root)  # its pip: Python's bundled one
    py = venv / "bin" / "python"
    sh(py, "-m", "pip", "install", "--no-deps", "--no-index", "-q", wheel, cwd=root)
    purelib = sh(py, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))",
                 cwd=root).stdout.strip()
    # the dependencies (snakemake, torch, pandas, ...): this environment's site-packages,
    # after the new one's (its editable scalesweep .pth is not read from there)
    Path(purelib, "zz_dependencies.pth").write_text(site.getsitepackages()[0] + "\n")
    return venv / "bin"


def test_the_wheel_carries_the_workflow_and_finds_it_without_the_clone(installed, tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
    where = sh(installed / "python", "-c",
               "import scalesweep, scalesweep.platform.code as c; "
               "print(scalesweep.__file__); print(c.CODE_ROOT)", cwd=tmp_path, env=env).stdout
    package, root = where.split()
    assert str(REPO) not in package and str(REPO) not in root, where
    assert Path(root) == Path(package).parent / "_tree"
    # every file git holds under the tree's folders (setup.py's TREE) is in it
    tracked = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", *setup_tree()],
                             cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    assert len(tracked) > 250
    missing = [name for name in tracked if not (Path(root) / name).is_file()]
    assert missing == [], missing
    # the commit it was built from (" + uncommitted changes" where the tree had some), for
    # every run's provenance
    commit = (Path(root) / "SOURCE_COMMIT").read_text().strip()
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True,
                          text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO,
                           capture_output=True, text=True).stdout.strip()
    assert commit == head + (" + uncommitted changes" if dirty else "")


def test_init_then_run_measures_and_reports_outside_the_clone(installed, tmp_path):
    if not have("mpirun"):
        pytest.skip("mpirun not installed (tools/install.sh installs it)")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
    env["PATH"] = f"{installed}{os.pathsep}{env['PATH']}"
    scalesweep = installed / "scalesweep"
    campaign = tmp_path / "campaign"
    out = sh(scalesweep, "init", campaign, cwd=tmp_path, env=env).stdout
    config = campaign / "config" / "config.yaml"
    assert config.is_file() and "scalesweep run --profile local" in out
    assert (campaign / "config" / "frontier.yaml").is_file()  # what profiles/frontier names
    # init never writes over a config
    again = subprocess.run([scalesweep, "init", campaign], capture_output=True, text=True, env=env)
    assert again.returncode == 2 and "exists" in again.stderr
    # the tiny sweep instead of the embedded default's (minutes): one 1-rank point, 1 epoch
    tiny = {k: v for k, v in tiny_config().items() if k != "_site"}
    tiny["sweep"]["ranks_per_node"] = [1]
    tiny["workloads"]["cnn_ddp"]["epochs"] = 1
    config.write_text(yaml.safe_dump(tiny))
    sh(scalesweep, "run", "--profile", "local", "summary", cwd=campaign, env=env, timeout=900)
    metrics = json.loads(next((campaign / "results" / "runs").rglob("metrics.json")).read_text())
    tree = str(Path(sh(installed / "python", "-c", "import scalesweep.platform.code as c; "
                       "print(c.CODE_ROOT)", cwd=tmp_path, env=env).stdout.strip()))
    assert f"{tree}/scripts/train_cnn.py" in metrics["command"], metrics["command"]
    assert str(REPO) not in metrics["command"]
    assert metrics["git_commit"] == (Path(tree) / "SOURCE_COMMIT").read_text().strip()
    assert metrics["final_accuracy"] >= 0
    runs = (campaign / "results" / "summary" / "runs.csv").read_text().splitlines()
    assert len(runs) == 2 and "cnn_ddp" in runs[1]
