"""The fields of a metrics record its readers use (scalesweep.record.metrics.FIELDS), checked where
the file is read, for every payload (issue #26, 1): a malformed one fails its point with
"<file>: <field> is <value>, expected <kind>", never a traceback and never the summary.
Real records (benchmarks/data: a CNN and an LLM point's metrics.json) with one field
spoiled; the Snakemake run of the same case: tests/integration/test_faults.py."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest

from conftest import REPO
from scalesweep.analyse.collect import point_states, readable_runs
from scalesweep.plan.sweep import SweepPoint
from scalesweep.plan.kinds import record_payloads
from scalesweep.record.metrics import FIELDS, KINDS, MetricsError, field_problem, read_metrics

RECORDS = {"cnn": REPO / "benchmarks/data/metrics_cnn.json",
           "llm_inference": REPO / "benchmarks/data/metrics_llm.json"}
KIND_OF = {record: kind for kind, record in record_payloads().items()}


def record(payload: str) -> dict:
    data = json.loads(RECORDS[payload].read_text())
    if payload == "llm_inference":  # a point with a concurrency axis (infer_llm.level_summary)
        data["concurrency_levels"] = [{"concurrency": c, "wall_s": 2.0, "tokens_per_s": 250.0,
                                       "requests_per_s": 4.0, "ttft_s": data["ttft_s"],
                                       "latency_s": data["latency_s"]} for c in (1, 2)]
        # and load levels (scripts/llm_load.py), with the highest rate within the target
        data["load_levels"] = [
            {"shape": "closed", "rate": None, "concurrency": 1, "output_tokens_per_s": 210.0,
             "requests_per_s": 6.5, "goodput_rps": 6.5},
            {"shape": "poisson", "rate": 2.0, "concurrency": None, "output_tokens_per_s": 80.0,
             "requests_per_s": 2.0, "goodput_rps": 2.0}]
        data["max_rate"] = {"max_rate_rps": 7.07, "missed_rps": 8.41, "bound": "bisection"}
    return data


def campaign_file(tmp_path: Path, data: dict) -> tuple[Path, dict, SweepPoint]:
    """``data`` as its point's metrics.json under tmp_path/results/runs, and the config
    whose workload runs it."""
    point = SweepPoint(**data["point"])
    path = tmp_path / "results" / "runs" / point.path / "metrics.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(data, indent=2))
    config = {"workloads": {point.workload: {"payload": KIND_OF[data["payload"]]}}}
    return path, config, point


@pytest.mark.parametrize("payload", sorted(RECORDS))
def test_the_real_records_have_every_field_as_declared(payload):
    assert field_problem(record(payload)) is None


@pytest.mark.parametrize("payload, change, message", [
    # issue #26, 1: what broke `scalesweep status`, `rerun` and the aggregation
    ("llm_inference", {"ttft_s": "n/a"}, "ttft_s is 'n/a', expected a mapping of statistics "
                                         "(n, mean, p50, ...) to finite numbers (s)"),
    ("llm_inference", {"ttft_s": [0.03, 0.04]}, "ttft_s is [0.03, 0.04], expected a mapping"),
    ("llm_inference", {"ttft_s": None}, "ttft_s is null, expected a mapping"),
    ("llm_inference", {"latency_s": {"p50": "fast"}}, "latency_s is {'p50': 'fast'}, expected"),
    ("llm_inference", {"latency_s": {"p99": math.inf}}, "latency_s is {'p99': inf}, expected"),
    ("llm_inference", {"memory": "lots"}, "memory is 'lots', expected a mapping"),
    ("llm_inference", {"concurrency_levels": [{"concurrency": 1, "ttft_s": "x"}]},
     "concurrency_levels[0].ttft_s is 'x', expected a mapping of statistics"),
    ("llm_inference", {"concurrency_levels": [{"tokens_per_s": 3.0}]},
     "concurrency_levels[0].concurrency is missing, expected a whole number >= 0 (requests)"),
    ("llm_inference", {"tokens_per_s": "1e3"}, "tokens_per_s is '1e3', expected a number "
                                               "(tokens/s)"),
    ("llm_inference", {"hosts": "vm"}, "hosts is 'vm', expected a list of text"),
    ("cnn", {"epoch_s": []}, "epoch_s is [], expected a non-empty list of finite numbers (s)"),
    ("cnn", {"train_s": True}, "train_s is True, expected a finite number (s)"),
    ("cnn", {"interference": ["busy"]}, "interference is ['busy'], expected a mapping"),
    ("cnn", {"disturbed": "no"}, "disturbed is 'no', expected true or false"),
    ("cnn", {"point": {"ranks": "two"}}, "point.ranks is 'two', expected a whole number >= 0"),
])
def test_a_malformed_field_fails_its_point_naming_file_field_value_and_kind(
        tmp_path, payload, change, message):
    data = record(payload)
    for key, value in change.items():
        data[key] = {**data[key], **value} if key == "point" else value
    path, config, point = campaign_file(tmp_path, data)
    with pytest.raises(MetricsError) as raised:
        read_metrics(path)
    assert str(raised.value).startswith(f"{path}: {message}"), raised.value
    notes = []
    assert readable_runs([str(path)], config, notes.append) == []  # left out, no traceback
    assert notes[0].startswith(f"warning: {path}: {message}"), notes
    if "point" not in change:  # `scalesweep status` and `rerun --failed`: failed, and why
        states = point_states([point], str(tmp_path / "results"), config=config)
        assert states.loc[0, "state"] == "failed"
        assert states.loc[0, "reason"].startswith(f"{path}: {message}")


def _spoil(data: dict, path: str, value) -> None:
    """Set the field at ``path`` ("a.b", "a[].b": in the list's first item) to ``value``,
    making the mappings and lists above it where the record has none."""
    *parents, last = path.split(".")
    here = data
    for part in parents:
        name = part.removesuffix("[]")
        if part.endswith("[]"):
            if not isinstance(here.get(name), list) or not here[name]:
                here[name] = [{}]
            if not isinstance(here[name][0], dict):
                here[name][0] = {}
            here = here[name][0]
        else:
            if not isinstance(here.get(name), dict):
                here[name] = {}
            here = here[name]
    if last.endswith("[]"):
        here[last.removesuffix("[]")] = [value]
    else:
        here[last] = value


@pytest.mark.parametrize("payload", sorted(FIELDS))
def test_every_declared_field_of_another_kind_is_named(payload):
    """Each field of the table, given a value of another kind, is the one named: no
    declared field goes unchecked (and the table's kinds are all known)."""
    for field in FIELDS[payload]:
        assert field.kind in KINDS, field
        wrong = 1.5 if field.kind in ("text", "texts", "text or texts", "job", "mapping",
                                      "list") else "x"
        data = copy.deepcopy(record(payload))
        _spoil(data, field.path, wrong)
        shown = field.path.replace("[]", "[0]")
        assert field_problem(data) == f"{shown} is {wrong!r}, expected {field.expected()}", \
            field


def test_what_older_records_and_their_readers_take_is_not_refused():
    """An older record's one interference reason as text (collect.disturbance reads it),
    and the names the run table reads (engine.name, model.name) declared and checked."""
    data = record("cnn")
    data["interference"] = {**data.get("interference", {}), "reasons": "outside CPU 60%"}
    assert field_problem(data) is None
    data = record("llm_inference")
    data["engine"] = {**data["engine"], "name": ["llamacpp"]}
    assert field_problem(data) == "engine.name is ['llamacpp'], expected text"


@pytest.mark.parametrize("damage, message", [
    ("bytes", "not UTF-8 text"),  # a byte that is no UTF-8
    ("digits", "not valid JSON"),  # a number beyond Python's 4,300-digit limit
    ("directory", "cannot be read"),  # a directory of that name
    ("nested", "not valid JSON (nested too deeply)"),  # [[[[... deeper than the parser goes
    ("huge", "train_s is 1000"),  # a finite field beyond a float's range
])
def test_an_unreadable_or_overflowing_file_fails_its_point_naming_it(tmp_path, damage, message):
    """A point, failed and named, never a traceback that stops the summary (a review)."""
    data = record("cnn")
    if damage == "huge":
        data["train_s"] = 10**400
    path, config, point = campaign_file(tmp_path, data)
    if damage == "bytes":
        path.write_bytes(path.read_bytes().replace(b'"cnn"', b'"cnn\xff"', 1))
    elif damage == "digits":
        path.write_text(path.read_text().rstrip().removesuffix("}") + ', "x": ' + "9" * 5000 + "}")
    elif damage == "nested":
        path.write_text("[" * 200_000 + "]" * 200_000)
    elif damage == "directory":
        path.unlink()
        path.mkdir()
    notes = []
    assert readable_runs([str(path)], config, notes.append) == []
    assert notes[0].startswith(f"warning: {path}: {message}"), notes
    states = point_states([point], str(tmp_path / "results"), config=config)
    # (a directory is no metrics file: the point is missing, as Snakemake's is not)
    assert states.loc[0, "state"] == ("missing" if damage == "directory" else "failed")
