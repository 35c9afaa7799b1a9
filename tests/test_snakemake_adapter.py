"""The Snakemake internals scalesweep calls, pinned (issue #28): the installed Snakemake is
the release workflow/scalesweep/plan/snakemake_adapter.py was written against, and every
internal name it uses is there, with the signature it calls it with. A Snakemake upgrade
fails here, by name, not somewhere in a command."""

from __future__ import annotations

import importlib
import inspect
import re
from importlib.metadata import version

from conftest import REPO
from scalesweep.plan import snakemake_adapter
from scalesweep.plan.snakemake_adapter import (
    ATTRIBUTES,
    INTERNALS,
    PINNED,
    command_line,
    default_resources,
    parse_config_items,
    read_configfile,
)


def test_the_installed_snakemake_is_the_pinned_one():
    assert version("snakemake") == PINNED
    assert f'"snakemake=={PINNED}"' in (REPO / "pyproject.toml").read_text()


def test_every_internal_name_is_there_with_its_signature():
    params = {"parse_config": ["entries"], "parse_args": ["argv"],
              "load_configfile": ["configpath"]}
    for module, names in INTERNALS.items():
        mod = importlib.import_module(module)
        for name in names:
            assert callable(getattr(mod, name, None)), f"{module}.{name}"
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
