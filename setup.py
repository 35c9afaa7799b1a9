"""The package's build step beyond pyproject.toml: a wheel carries the workflow.

``pip install .`` (a wheel, not editable) copies the tree the workflow runs from (the
Snakefile, its rules, schemas, report captions and glue scripts, the payloads, the site
files, profiles, container recipes, pins and the embedded default config) into the
package as ``scalesweep/_tree/``, laid out as in a clone, so that
``scalesweep.platform.code`` finds it through ``importlib.resources`` and ``scalesweep
run`` gives Snakemake its Snakefile (docs/install.md). The package itself is copied too,
under ``_tree/workflow/scalesweep``: a container binds the tree at /mnt/code and imports it
from there, as it does from a clone. An editable install (``pip install -e .``,
tools/install.sh) copies nothing: the clone is the tree.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "workflow"))
from scalesweep.platform.code import PACKAGED_TREE  # noqa: E402
from scalesweep.record.metrics import SOURCE_COMMIT_FILE  # noqa: E402
# What the workflow reads at run time, relative to the clone's root (scalesweep.platform.code
# names where each is looked for); MANIFEST.in puts the same in an sdist, and
# tests/integration/test_wheel_install.py checks that a wheel built from one holds every
# file git tracks under them.
TREE = ("Snakefile", "LICENSE", "constraints.txt", "workflow/rules", "workflow/schemas",
        "workflow/report", "workflow/scripts", "workflow/scalesweep", "scripts", "sites",
        "profiles", "containers", "config", "envs")
SKIP = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", ".snakemake")


class BuildWithTree(build_py):
    """build_py, then the tree copied into the built package (not for an editable install)."""

    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        tree = Path(self.build_lib) / "scalesweep" / PACKAGED_TREE
        shutil.rmtree(tree, ignore_errors=True)
        for name in TREE:
            source, target = HERE / name, tree / name
            target.parent.mkdir(parents=True, exist_ok=True)
            if source.is_dir():
                shutil.copytree(source, target, ignore=SKIP)
            else:
                shutil.copy2(source, target)
        (tree / SOURCE_COMMIT_FILE).write_text(source_commit() + "\n")


class SdistWithCommit(sdist):
    """sdist, with the commit it is made from at its root (SOURCE_COMMIT): a wheel built
    from the sdist, outside any git checkout, still records it."""

    def make_release_tree(self, base_dir, files) -> None:
        super().make_release_tree(base_dir, files)
        (Path(base_dir) / SOURCE_COMMIT_FILE).write_text(source_commit() + "\n")


def source_commit() -> str:
    """The commit being built (" + uncommitted changes" where tracked files differ from
    it): an sdist's SOURCE_COMMIT, else git's; "" where neither says."""
    if (HERE / SOURCE_COMMIT_FILE).is_file():
        return (HERE / SOURCE_COMMIT_FILE).read_text().strip()
    def git(*args: str) -> str:
        try:
            out = subprocess.run(["git", *args], cwd=HERE, capture_output=True, text=True,
                                 timeout=20)
        except (OSError, subprocess.TimeoutExpired):
            return ""
        return out.stdout.strip() if out.returncode == 0 else ""

    head = git("rev-parse", "HEAD")
    dirty = head and git("status", "--porcelain", "--untracked-files=no")
    return head + (" + uncommitted changes" if dirty else "")


setup(cmdclass={"build_py": BuildWithTree, "sdist": SdistWithCommit})
