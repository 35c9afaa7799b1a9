"""The workflow follows Snakemake conventions: --lint clean and snakefmt-formatted."""

import subprocess
import sys
from pathlib import Path

from conftest import REPO

BIN = Path(sys.executable).parent


def test_snakemake_lint_is_clean():
    proc = subprocess.run([str(BIN / "snakemake"), "--lint"], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_snakefmt_check():
    proc = subprocess.run([str(BIN / "snakefmt"), "--check", "."], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
