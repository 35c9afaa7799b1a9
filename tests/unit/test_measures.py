"""Each kind's figures are declared once (scalesweep.record.measures, issue #41): the record
fields it checks (record.metrics.FIELDS), the runs.csv columns' roles and units
(record.columns.COLUMNS), what a kind's row() computes and the docs' list are made from
the declaration, and held to it here."""

from __future__ import annotations

import json

import pytest

from conftest import REPO
from scalesweep.plan.kinds import kind_of
from scalesweep.record import columns, measures
from scalesweep.record.metrics import FIELDS, field_problem


def cnn_record() -> dict:
    """A CNN record with every field its figures come from (MPI data parallelism)."""
    return {
        "payload": "cnn", "epoch_s": [3.0, 2.0, 2.2], "train_s": 7.2, "images_per_epoch": 48,
        "images_per_s": 20.0, "final_loss": 0.1, "final_accuracy": 0.9, "test_accuracy": 0.8,
        "test_loss": 0.3, "parallel": "mpi", "mpi": {"library": "Open MPI",
                                                     "library_version": "4.1", "origin": "host"},
        "allreduce_s": [0.3, 0.2, 0.2], "flops_per_step": 1e10, "steps_per_epoch": 3,
        "scaling": "strong", "precision": "fp32", "precision_effective": "fp32",
        "data_path": "memory", "data_wait_s": [0.01, 0.02, 0.02], "data_load_s": 0.5,
        "staging_s": 1.5,
    }


def llm_record() -> dict:
    """An LLM record with every field its figures come from (levels and a latency target)."""
    summary = {"n": 4, "mean": 0.2, "std": 0.01, "min": 0.1, "p50": 0.2, "p90": 0.3,
               "p99": 0.4, "max": 0.4}
    return {
        "payload": "llm_inference", "wall_s": 4.0, "tokens_per_s": 100.0,
        "requests_per_s": 2.0, "ttft_s": summary, "latency_s": summary,
        "memory": {"server_peak_rss_mb": 900.0}, "engine": {"name": "llamacpp"},
        "concurrency": 1,
        "concurrency_levels": [{"concurrency": 1, "tokens_per_s": 100.0,
                                "requests_per_s": 2.0, "ttft_s": summary, "latency_s": summary}],
        "load_levels": [{"shape": "poisson", "rate": 1.0, "requests_per_s": 1.0,
                         "output_tokens_per_s": 50.0, "goodput_rps": 1.0}],
        "max_rate": {"max_rate_rps": 1.0, "missed_rps": 2.0, "bound": "bisection"},
        "client": {"placement": "with_server"},
        "model": {"name": "tiny", "synthetic": True},
        "requests": [{"decode_tokens_per_s": 50.0}, {"decode_tokens_per_s": 55.0}],
    }


RECORDS = {"cnn": cnn_record, "llm": llm_record}


@pytest.mark.parametrize("kind", sorted(RECORDS))
def test_a_kinds_row_computes_exactly_its_computed_figures(kind):
    k = kind_of(kind)
    record = RECORDS[kind]()
    computed = {m.name for m in k.metrics if m.computed}
    assert set(k.row(record)) == computed
    values = k.values(record)
    # every figure, in its declared order, read or computed
    assert list(values) == [m.name for m in k.metrics]
    for m in k.metrics:
        if not m.computed:
            assert values[m.name] is not None, m.name


@pytest.mark.parametrize("payload", sorted(measures.METRICS))
def test_fields_and_columns_are_made_from_the_figures(payload):
    fields = {f.path: f for f in FIELDS[payload]}
    for m in measures.METRICS[payload]:
        if m.field:  # its field is checked where a record is read, as declared
            f = fields[m.field]
            assert (f.kind, f.required) == (m.check, m.required), m
        else:
            assert m.computed, f"{m.name}: neither read from a field nor computed"
        column = columns.declared(m.name)
        assert column.role == m.role and column.rate == m.rate, m
        if m.role == columns.MEASUREMENT:
            assert column.unit == m.unit and m.unit, m


@pytest.mark.parametrize("payload", sorted(measures.METRICS))
def test_a_record_that_breaks_a_declared_field_is_refused_naming_it(payload):
    kind = {"cnn": "cnn", "llm_inference": "llm"}[payload]
    record = RECORDS[kind]()
    assert field_problem(record, payload) is None
    read = next(m for m in measures.METRICS[payload] if m.field and m.check == "number")
    *parents, last = read.field.split(".")
    target = record
    for name in parents:
        target = target[name]
    target[last] = "fast"
    assert read.field in (field_problem(record, payload) or "")


def test_a_figure_declared_twice_unlike_is_refused():
    clash = measures.Metric("time_s", "ms", computed=True)  # time_s is in seconds
    with pytest.raises(ValueError, match="time_s: declared as"):
        columns.declare("clash", (clash,))
    assert "clash" not in measures.METRICS


def test_the_docs_list_is_the_declarations():
    text = (REPO / "docs" / "report.md").read_text()
    assert measures.markdown() in text


def test_names_say_one_thing():
    """Each figure is one column of one meaning: a kind declares a name once, and two
    kinds that share one (time_s) declare it alike (checked where COLUMNS is made)."""
    for payload, metrics in measures.METRICS.items():
        names = [m.name for m in metrics]
        assert len(names) == len(set(names)), payload
    assert json.dumps(sorted(columns.COLUMNS))  # made without a clash


def test_a_kind_is_held_to_its_declarations():
    """A figure declared neither read nor computed is refused when its kind registers; a
    row() that makes a figure declared read as it is fails naming it."""
    from scalesweep.plan.kinds import register, unregister
    from scalesweep.plan.kinds.base import WorkloadKind

    class Unsourced(WorkloadKind):
        name, script, record_payload = "unsourced", "x.py", "unsourced"
        own_metrics = (measures.Metric("floating", "s"),)

    with pytest.raises(TypeError, match="floating are neither read from a field nor computed"):
        register(Unsourced)

    class Overriding(type(kind_of("cnn"))):
        def row(self, metrics):
            return {**super().row(metrics), "train_s": 0.0}

    with pytest.raises(ValueError, match="row\\(\\) makes train_s, declared read as it is"):
        Overriding().values(cnn_record())
    assert "unsourced" not in measures.METRICS
    unregister("unsourced")
