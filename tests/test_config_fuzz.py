"""Bad input never reaches a job: every bad config is a clear schema or sweep error."""

import copy
import subprocess

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import REPO, run_snakemake, tiny_config
from scalesweep.config import ConfigError, check_config, schema_errors
from scalesweep.sweep import SweepError, sweep_points

import yaml

DEFAULT = yaml.safe_load((REPO / "config" / "config.yaml").read_text())


def _paths(node, prefix=()):
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, prefix + (i,))
    yield prefix


JUNK = st.one_of(
    st.none(), st.booleans(), st.integers(-10**6, -1), st.floats(allow_nan=True),
    st.text(max_size=20), st.lists(st.text(max_size=5), max_size=3),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=2),
    st.sampled_from(["; rm -rf /", "$(touch pwned)", "`id`", "a b", "docker", "-1", "../.."]),
)


def _set(cfg, path, value):
    node = cfg
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_bad_values_give_a_schema_or_sweep_error_never_a_traceback(data):
    cfg = copy.deepcopy(DEFAULT)
    paths = [p for p in _paths(cfg) if p]
    path = data.draw(st.sampled_from(paths))
    _set(cfg, path, data.draw(JUNK))
    try:
        check_config(cfg)
    except ConfigError as exc:
        assert "config key" in str(exc)
        return
    try:
        sweep_points(cfg)
    except SweepError as exc:
        assert str(exc)


@pytest.mark.parametrize(
    "path",
    [
        ("site",),
        ("datasets", "fashion_sandal_sneaker", "path"),
        ("datasets", "fashion_sandal_sneaker", "classes", 0),
        ("models", "synthetic_llama", "source"),
        ("workloads", "llm", "prompts"),
        ("workloads", "llm", "engine"),
        ("containers", "images", "default", "recipe"),
        ("containers", "images", "default", "prebuilt"),
        ("containers", "images", "default", "requirements"),
        ("workloads", "llm", "image"),
    ],
)
@pytest.mark.parametrize("attack", ["x; touch /tmp/PWNED", "$(touch PWNED)", "`touch PWNED`",
                                    "a'b", 'a"b', "x\ntouch PWNED", "x|y", "x&&y"])
def test_shell_injection_through_config_strings_is_refused(path, attack):
    cfg = copy.deepcopy(DEFAULT)
    cfg.setdefault("containers", {})
    node = cfg
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = attack
    errors = schema_errors(cfg)
    dotted = ".".join(map(str, path))
    assert any(dotted in e for e in errors), errors


def test_bad_config_stops_snakemake_before_any_job(campaign):
    cfg = tiny_config()
    cfg["sweep"]["repeats"] = 0
    cfg["site"] = "x;touch PWNED"
    wd = campaign(cfg)
    proc = run_snakemake(wd, "--cores", "1", check=False)
    assert proc.returncode != 0
    err = proc.stdout + proc.stderr
    assert "config key sweep.repeats: 0 is less than the minimum of 1" in err
    assert "config key site" in err
    assert not (wd / "results").exists() and not (wd / "resources").exists()
    assert not (wd / "PWNED").exists()


def test_missing_dataset_reference_is_named(campaign):
    cfg = tiny_config()
    cfg["workloads"]["cnn_ddp"]["dataset"] = "nope"
    proc = run_snakemake(campaign(cfg), "-n", "--cores", "1", check=False)
    assert proc.returncode != 0
    assert "dataset 'nope' is not defined under datasets" in proc.stdout + proc.stderr
