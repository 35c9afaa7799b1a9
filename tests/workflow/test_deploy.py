"""The Snakemake way to deploy (issue #42): `snakedeploy deploy-workflow` of a local copy
of this repository into an empty directory gives a deployment whose dry run plans the
campaign from the source's tree (its rules, payloads, recipes), with the config,
profiles and licence copied beside it (docs/install.md)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, run_snakemake

SNAKEDEPLOY = Path(sys.executable).with_name("snakedeploy")


def source_copy(dest: Path, git: bool = False) -> Path:
    """The repository's files as git sees them (tracked and new, not ignored): what a
    clone of this state holds, without .venv. ``git``: a git checkout of this HEAD with
    them over it (its uncommitted changes showing as such)."""
    if git:
        subprocess.run(["git", "clone", "-q", "--no-checkout", str(REPO), str(dest)], check=True)
        subprocess.run(["git", "reset", "-q"], cwd=dest, check=True)  # the index at HEAD
    names = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO,
                           capture_output=True, text=True, check=True).stdout.split("\0")
    for name in filter(None, names):
        if (REPO / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, dest / name)
    return dest


def test_snakedeploy_deployment_plans_from_the_source_tree(tmp_path):
    if not SNAKEDEPLOY.exists():
        pytest.skip("snakedeploy not installed (tools/install.sh --test installs it)")
    src = source_copy(tmp_path / "scalesweep")
    dest = tmp_path / "deployment"
    subprocess.run([SNAKEDEPLOY, "deploy-workflow", src, dest, "--branch", "main"],
                   check=True, capture_output=True, text=True)
    assert (dest / "config" / "config.yaml").is_file() and (dest / "LICENSE").is_file()
    assert (dest / "profiles" / "local" / "config.yaml").is_file()
    snakefile = dest / "workflow" / "Snakefile"
    text = snakefile.read_text()
    # snakedeploy 0.17's local provider names the module's Snakefile relative to the
    # source ("Snakefile"), which Snakemake reads relative to the deployment: pointed at
    # the source, as docs/install.md says (a GitHub source gets github(..., tag=...))
    assert 'snakefile: \n        "Snakefile"' in text and "use rule * from" in text
    snakefile.write_text(text.replace('"Snakefile"', f'"{src / "Snakefile"}"'))
    dry = run_snakemake(dest, "-n", "-p", "--cores", "2", snakefile=snakefile).stdout
    assert "rule run_point:" in dry and "rule build_image:" in dry
    # the module's own tree: recipes, pins and the package from the source, not from the
    # deployment (whose workflow/ holds only its Snakefile)
    assert f"--recipe {src}/containers/charliecloud/Dockerfile" in dry
    assert f"PYTHONPATH={src}/workflow" in dry
    assert str(dest / "workflow" / "containers") not in dry
