"""The Snakemake and Slurm-plugin internals the package reaches (issue #28) are all in
``scalesweep.platform.slurm_plugin``, read from one plugin release: this test pins that release
and every name used, and fails naming what changed when either does."""

from __future__ import annotations

import ast
import importlib

import pytest

from conftest import REPO

from scalesweep.platform import slurm_plugin

pytest.importorskip("snakemake_executor_plugin_slurm")

PACKAGE = REPO / "workflow" / "scalesweep"
INTERNAL = ("snakemake_executor_plugin_slurm", "snakemake_interface_executor_plugins", "snakemake.cli",
            "snakemake.common")


def test_the_plugin_is_the_release_the_adapter_was_read_from():
    installed = slurm_plugin.installed_version()
    assert installed == slurm_plugin.PLUGIN_VERSION, (
        f"{slurm_plugin.PLUGIN} {installed} is installed, but scalesweep.platform.slurm_plugin (and "
        f"run.slurm.sbatch_options, which renders its sbatch line) was read from "
        f"{slurm_plugin.PLUGIN_VERSION}: read the new release's validation.py, submit_string.py "
        "and utils.py, then update PLUGIN_VERSION and pyproject.toml"
    )
    pin = f'"{slurm_plugin.PLUGIN}=={slurm_plugin.PLUGIN_VERSION}"'
    assert pin in (REPO / "pyproject.toml").read_text(), f"pyproject.toml does not pin {pin}"


@pytest.mark.parametrize("module, names", sorted(slurm_plugin.USED.items()))
def test_every_internal_name_used_is_there(module, names):
    mod = importlib.import_module(module)
    missing = [n for n in names if not hasattr(mod, n)]
    assert missing == [], f"{module} no longer has {missing}: scalesweep.platform.slurm_plugin needs them"


def test_the_adapter_uses_only_the_names_it_declares():
    tree = ast.parse((PACKAGE / "platform" / "slurm_plugin.py").read_text())
    imported = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(INTERNAL):
            imported.setdefault(node.module, set()).update(a.name for a in node.names)
    assert imported == {m: set(n) for m, n in slurm_plugin.USED.items()}


def test_no_other_module_of_the_package_reaches_the_internals():
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "slurm_plugin.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            offenders += [f"{path.relative_to(REPO)}:{node.lineno} {n}" for n in names if n.startswith(INTERNAL)]
    # plan/config.py reads --config as Snakemake does (snakemake.cli.parse_config,
    # parse_args): not yet behind the adapter
    offenders = [o for o in offenders if not o.startswith("workflow/scalesweep/plan/config.py")]
    assert offenders == []


def test_what_the_adapter_returns():
    forbidden = slurm_plugin.forbidden_slurm_options()
    assert "job name" in forbidden.values() and all(isinstance(p, str) for p in forbidden)
    assert "Snakefile" in [str(c) for c in slurm_plugin.snakefile_choices()]
    args = slurm_plugin.parse_args(["-n", "--executor", "slurm"])
    assert args.executor == "slurm" and args.dryrun
