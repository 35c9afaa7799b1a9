"""The rules' conda environment (envs/scalesweep.yaml, `snakemake --sdm conda`) against the
quickstart's pins: the same version of every package (constraints.txt), and every
package the rules import (pyproject.toml's dependencies, less what runs the workflow
itself, and the torch and llm extras). A package added to pyproject, or a version moved
in constraints.txt, without the environment fails here."""

from __future__ import annotations

import re
import tomllib

import yaml

from conftest import REPO

# what runs the workflow, not its rules (the conda environment is the jobs')
WORKFLOW_ONLY = {"snakemake", "snakemake-executor-plugin-slurm"}


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(text: str) -> str:
    return canonical(re.split(r"[\[<>=!~ ;]", text.strip(), maxsplit=1)[0])


def env_pins() -> dict[str, str]:
    env = yaml.safe_load((REPO / "envs" / "scalesweep.yaml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
    pins = {}
    for line in pip:
        name, _, version = line.partition("==")
        assert version, f"envs/scalesweep.yaml: {line!r} is not pinned exactly (==)"
        pins[requirement_name(name)] = version
    return pins


def constraints() -> dict[str, str]:
    out = {}
    for line in (REPO / "constraints.txt").read_text().splitlines():
        if "==" in line and not line.startswith("#"):
            name, _, version = line.partition("==")
            out[canonical(name)] = version.strip()
    return out


def test_every_pin_of_the_conda_environment_is_constraints_txts():
    pins, wanted = env_pins(), constraints()
    differ = {n: (v, wanted.get(n)) for n, v in pins.items() if wanted.get(n) != v}
    assert differ == {}, f"envs/scalesweep.yaml vs constraints.txt: {differ}"


def test_the_conda_environment_has_every_package_the_rules_import():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    needed = {requirement_name(r) for r in project["dependencies"]} - WORKFLOW_ONLY
    for extra in ("torch", "llm"):
        needed |= {requirement_name(r) for r in project["optional-dependencies"][extra]}
    missing = sorted(needed - set(env_pins()))
    assert missing == [], f"envs/scalesweep.yaml lacks {missing} (pyproject.toml needs them)"
