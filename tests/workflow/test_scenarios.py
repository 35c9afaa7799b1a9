"""The workflow scenarios of .test/config-*.yaml, each planned by a dry run: the embedded
default, LLM only, native vs Charliecloud, a Slurm site through its profile, a GPU site.

Each file is a config over the embedded default (config/config.yaml), as a user's
`--configfile` is; a line `# dry-run args: ...` in it gives the scenario's other
arguments (a profile, relative to the repository). The same files serve a CI matrix:

    snakemake -n --configfile .test/config-X.yaml [dry-run args] -d <fresh campaign>

(docs/testing.md). A scenario added as a file is tested without touching this module."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from conftest import REPO, run_snakemake

SCENARIOS = sorted((REPO / ".test").glob("config-*.yaml"))


def dry_run_args(scenario: Path) -> list[str]:
    """The scenario's own arguments (its `# dry-run args:` line), paths made absolute."""
    found = re.search(r"^# dry-run args:(.*)$", scenario.read_text(), re.M)
    args = shlex.split(found[1]) if found else []
    return [str(REPO / a) if a.startswith("profiles/") else a for a in args]


def test_there_are_scenarios():
    names = {s.stem.removeprefix("config-") for s in SCENARIOS}
    assert {"default", "llm", "two-runtimes", "slurm", "gpu"} <= names, names


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.stem.removeprefix("config-"))
def test_scenario_plans_its_measurements(scenario, tmp_path):
    (tmp_path / "config").symlink_to(REPO / "config")  # the embedded default, as a campaign has it
    proc = run_snakemake(tmp_path, "-n", *dry_run_args(scenario), "--configfile", str(scenario),
                         check=False, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{scenario.name}: {out[-4000:]}"
    assert re.search(r"^(?:local)?rule run_point:", proc.stdout, re.M), \
        f"{scenario.name}: no measurement planned\n{out[-3000:]}"
