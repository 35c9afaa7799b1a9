"""The Snakemake and Slurm-plugin internals scalesweep calls, pinned (issue #28): the
installed Snakemake and plugin are the releases workflow/scalesweep/platform/snakemake_adapter.py
was written against, every internal name it uses is there (with the signature it calls it
with), and no other module of the package reaches an internal. An upgrade fails here, by
name, not somewhere in a command."""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from importlib.metadata import version

from conftest import REPO
from scalesweep.platform import snakemake_adapter
from scalesweep.platform.snakemake_adapter import (
    ATTRIBUTES,
    INTERNALS,
    PINNED,
    PLUGIN,
    PLUGIN_VERSION,
    command_line,
    executor_settings,
    forbidden_slurm_options,
    installed_version,
    parse_args,
    snakefile_choices,
    default_resources,
    parse_config_items,
    read_configfile,
)


PACKAGE = REPO / "workflow" / "scalesweep"
INTERNAL = ("snakemake_executor_plugin_slurm", "snakemake_interface_executor_plugins",
            "snakemake.cli", "snakemake.common", "snakemake.settings", "snakemake.resources")


def test_the_installed_snakemake_and_plugin_are_the_pinned_ones():
    assert version("snakemake") == PINNED
    pins = (REPO / "constraints.txt").read_text().splitlines()
    assert f"snakemake=={PINNED}" in pins
    assert installed_version() == PLUGIN_VERSION, (
        f"{PLUGIN} {installed_version()} is installed, but the adapter (and "
        f"run.slurm.sbatch_options, which renders its sbatch line) was read from "
        f"{PLUGIN_VERSION}: read the new release's validation.py, submit_string.py and "
        "utils.py, then update PLUGIN_VERSION and constraints.txt")
    assert f"{PLUGIN}=={PLUGIN_VERSION}" in pins


def test_every_internal_name_is_there_with_its_signature():
    params = {"parse_config": ["entries"], "parse_args": ["argv"],
              "load_configfile": ["configpath"], "get_forbidden_slurm_options": []}
    for module, names in INTERNALS.items():
        mod = importlib.import_module(module)
        for name in names:
            assert hasattr(mod, name), f"{module} no longer has {name}: the adapter needs it"
            if name in params:
                assert list(inspect.signature(getattr(mod, name)).parameters) == params[name]


def test_every_internal_attribute_is_there():
    for qualified, names in ATTRIBUTES.items():
        module, _, cls = qualified.rpartition(".")
        klass = getattr(importlib.import_module(module), cls)
        for name in names:
            assert hasattr(klass, name), f"{qualified}.{name}"


def test_the_adapter_imports_only_the_names_it_declares():
    text = inspect.getsource(snakemake_adapter)
    used = set(re.findall(r"from (snakemake[\w.]*) import (\w+)", text))
    assert used == {(m, n) for m, names in INTERNALS.items() for n in names}


def test_no_other_module_of_the_package_reaches_the_internals():
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "snakemake_adapter.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            offenders += [f"{path.relative_to(REPO)}:{node.lineno} {n}"
                          for n in names if n.startswith(INTERNAL)]
    assert offenders == []


def test_what_the_internals_give(tmp_path):
    assert parse_config_items(["aa=1", "bb={x: 2}", "cc=True", "dd="]) == {
        "aa": 1, "bb": {"x": "2"}, "cc": True, "dd": None}
    args = command_line(["--snakefile", str(REPO / "Snakefile"), "--config", "a=1",
                         "--configfile", "x.yaml", "--profile", str(REPO / "profiles" / "frontier")])
    assert args.config == ["a=1"] and [str(f) for f in args.configfile] == ["x.yaml"]
    assert args.executor == "slurm" and not args.replace_workflow_config
    assert default_resources(args)["slurm_account"] == "'$SBATCH_ACCOUNT'"
    assert default_resources(args)["slurm_partition"] == "batch"
    assert default_resources(command_line(["--snakefile", str(REPO / "Snakefile")])) == {}
    path = tmp_path / "c.json"
    path.write_text('{"a": {"b": 1}}')
    assert read_configfile(path) == {"a": {"b": 1}}

    forbidden = forbidden_slurm_options()
    assert "job name" in forbidden.values() and all(isinstance(p, str) for p in forbidden)
    assert "Snakefile" in [str(c) for c in snakefile_choices()]
    raw = parse_args(["-n", "--executor", "slurm"])
    assert raw.executor == "slurm" and raw.dryrun
    assert executor_settings(raw, "slurm") is not None
