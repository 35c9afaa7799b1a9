"""Each workload kind's figures, declared once (issue #41): the runs.csv column, its unit,
its role, the direction that is better, whether it is a rate, and the metrics.json field
it is read from. What the other places say of a figure is derived from here:

- ``scalesweep.record.metrics.FIELDS[payload]``: the record fields each figure is read
  from, with their kind and unit, checked where a record is read;
- ``scalesweep.record.columns.COLUMNS``: each figure's role and unit (the CLI's grouping,
  the report's units, rates summarised as rates);
- ``scalesweep.analyse.collect.run_row``: a figure read as it is (``field`` and not
  ``computed``) is filled from its field by the generic code; the kind's ``row()`` makes
  the ``computed`` ones only (tests/unit/test_measures.py holds every kind's ``row()`` to
  exactly its computed declarations);
- the docs' list of figures (docs/report.md, "What each run's row holds", checked by the
  same test).

Adding a figure to a built-in kind is one ``Metric`` line in its tuple below (plus, for a
computed one, its line in the kind's ``row()`` in scalesweep/plan/kinds/); runs.csv
places it where ``scalesweep.analyse.collect.RUN_COLUMNS`` lists it, at the end where it
does not. A kind defined outside this package declares its own
(``WorkloadKind.own_metrics``), registered with it.

Standard library only: payloads import ``scalesweep.record`` inside containers.
"""

from __future__ import annotations

from typing import NamedTuple

# the roles of a runs.csv column (scalesweep.record.columns)
AXIS, IDENTITY, DERIVED, MEASUREMENT, PROVENANCE = (
    "axis", "identity", "derived", "measurement", "provenance")


class Metric(NamedTuple):
    """One figure of a kind's runs: a runs.csv column."""

    name: str  # the runs.csv column
    unit: str = ""  # measurements: the unit of the value ("1": a pure number)
    role: str = MEASUREMENT  # axis (a setting the run records), measurement, provenance
    # the metrics.json field it is read from ("a.b": field b of mapping a), checked as
    # ``check`` says (scalesweep.record.metrics.KINDS); "" for none
    field: str = ""
    check: str = "number"
    required: bool = False  # the record is refused without it
    # made by the kind's row() (from ``field`` and other fields), not read as it is
    computed: bool = False
    # work per second: summarised as total work over total time (or a harmonic mean),
    # never as an arithmetic mean of rates
    rate: bool = False
    higher_is_better: bool | None = None  # the direction that is better; None: neither
    text: str = ""  # what it is, for the docs' list


CNN = (
    Metric("time_s", "s", field="epoch_s", check="numbers", required=True, computed=True,
           higher_is_better=False,
           text="seconds per steady epoch: the mean of the epochs after the first (all of "
                "them for one epoch); the figure of merit"),
    Metric("epoch_time_first_s", "s", computed=True, higher_is_better=False,
           text="the first epoch (warm-up: out of time_s)"),
    Metric("train_s", "s", field="train_s", check="finite", required=True,
           higher_is_better=False, text="every epoch, the first included"),
    Metric("images_per_epoch", "images", field="images_per_epoch", computed=True,
           text="what every rank together processed per epoch"),
    # the record's images_per_s covers every epoch; the column, the steady ones
    Metric("images_per_s", "images/s", field="images_per_s", computed=True, rate=True,
           higher_is_better=True, text="images per second over the steady epochs"),
    Metric("final_loss", "1", field="final_loss", required=True,
           text="training loss of the last epoch"),
    Metric("final_accuracy", "fraction", field="final_accuracy", required=True,
           higher_is_better=True, text="training accuracy of the last epoch"),
    Metric("test_accuracy", "fraction", field="test_accuracy", higher_is_better=True,
           text="accuracy on the held-out images, after training (accuracy parity)"),
    Metric("test_loss", "1", field="test_loss", text="loss on the held-out images"),
    Metric("parallel", role=AXIS, field="parallel", check="text",
           text="single, ddp, dp or mpi"),
    Metric("mpi_library", role=PROVENANCE, computed=True,
           text="the MPI library the ranks loaded (--parallel mpi)"),
    Metric("mpi_library_version", role=PROVENANCE, computed=True),
    Metric("mpi_origin", role=PROVENANCE, computed=True,
           text="host or image: where that library came from"),
    Metric("allreduce_s", "s", field="allreduce_s", check="numbers", computed=True,
           higher_is_better=False,
           text="rank 0's seconds per steady epoch in the gradient Allreduce (mpi)"),
    Metric("flops_per_step", "FLOP", field="flops_per_step",
           text="counted FLOPs of one rank's training step (forward and backward)"),
    Metric("achieved_gflops_per_rank", "GFLOP/s", computed=True, rate=True,
           higher_is_better=True, text="flops_per_step x steps per epoch / time_s"),
    Metric("scaling", role=AXIS, field="scaling", check="text", computed=True,
           text="strong or weak (strong for older records)"),
    Metric("precision", role=AXIS, field="precision_effective", check="text", computed=True,
           text="the arithmetic the device did (tf32 asked on a CPU is fp32)"),
    Metric("data_path", role=AXIS, field="data_path", check="text", computed=True,
           text="where the training data was read from (memory for older records)"),
    Metric("data_wait_s", "s", field="data_wait_s", check="numbers", computed=True,
           higher_is_better=False, text="rank 0's seconds per steady epoch getting batches"),
    Metric("data_load_s", "s", field="data_load_s", text="reading the dataset at start-up"),
    Metric("staging_s", "s", field="staging_s",
           text="copying the dataset to node-local storage before the run"),
)

LLM = (
    Metric("time_s", "s", field="wall_s", check="finite", required=True, computed=True,
           higher_is_better=False, text="the run's wall time serving its requests"),
    Metric("tokens_per_s", "tokens/s", field="tokens_per_s", rate=True,
           higher_is_better=True, text="generated tokens per second; the figure of merit"),
    Metric("requests_per_s", "requests/s", field="requests_per_s", rate=True,
           higher_is_better=True),
    Metric("ttft_p50_s", "s", field="ttft_s", check="summary", required=True, computed=True,
           higher_is_better=False, text="time to the first token, median"),
    Metric("ttft_p90_s", "s", computed=True, higher_is_better=False),
    Metric("ttft_p99_s", "s", computed=True, higher_is_better=False),
    Metric("latency_p50_s", "s", field="latency_s", check="summary", required=True,
           computed=True, higher_is_better=False, text="a request's whole latency, median"),
    Metric("latency_p99_s", "s", computed=True, higher_is_better=False),
    Metric("peak_rss_mb", "MiB", field="memory.server_peak_rss_mb",
           text="the model server's peak resident memory"),
    Metric("engine", role=PROVENANCE, field="engine.name", check="text"),
    Metric("concurrency", "requests", role=AXIS, field="concurrency", check="count"),
    Metric("concurrency_levels", "JSON per level", field="concurrency_levels", check="list",
           computed=True, text="each concurrency level's rates and latencies"),
    Metric("load_levels", "JSON per level", field="load_levels", check="list",
           computed=True, text="each load level (scalesweep.plan.kinds.llm.compact_level)"),
    Metric("max_rate_rps", "requests/s", field="max_rate.max_rate_rps", higher_is_better=True,
           text="the highest rate within the latency target"),
    Metric("max_rate_bound", role=PROVENANCE, computed=True,
           text="how max_rate_rps was found: bisection, at least, none"),
    Metric("max_rate_missed_rps", "requests/s", field="max_rate.missed_rps",
           text="the lowest rate above it that missed"),
    Metric("client_placement", role=PROVENANCE, computed=True,
           text="where the load client ran (load.client: with_server, host)"),
    Metric("model", role=AXIS, field="model.name", check="text"),
    Metric("synthetic_model", role=AXIS, field="model.synthetic", check="flag", computed=True,
           text="random weights: throughput only"),
    Metric("within_run_cv_pct", "%", field="requests", check="list", computed=True,
           higher_is_better=False, text="CV of the run's requests' decode rates"),
    Metric("model_label", role=AXIS, computed=True,
           text="the model's name, marked where its weights are synthetic"),
)

# the "payload" a record carries -> its figures (scalesweep.plan.kinds: record_payload)
METRICS: dict[str, tuple[Metric, ...]] = {"cnn": CNN, "llm_inference": LLM}


def declare(payload: str, metrics: tuple[Metric, ...]) -> None:
    """A kind defined outside this package declares its figures (WorkloadKind.own_metrics)."""
    METRICS[payload] = tuple(metrics)


def forget(payload: str) -> None:
    METRICS.pop(payload, None)


def markdown(payloads: tuple[str, ...] = ("cnn", "llm_inference")) -> str:
    """The docs' list of each kind's figures (docs/report.md), made from the declarations:
    ``python -m scalesweep.record.measures`` prints it."""
    better = {True: "higher", False: "lower", None: ""}
    lines = ["| record | runs.csv column | unit | role | better | from | what it is |",
             "|---|---|---|---|---|---|---|"]
    for payload in payloads:
        for m in METRICS[payload]:
            source = (f"computed{' from `' + m.field + '`' if m.field else ''}"
                      if m.computed else f"`{m.field}`")
            lines.append(f"| {payload} | `{m.name}` | {m.unit} | {m.role}"
                         f"{' (rate)' if m.rate else ''} | {better[m.higher_is_better]} | "
                         f"{source} | {m.text} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown(), end="")
