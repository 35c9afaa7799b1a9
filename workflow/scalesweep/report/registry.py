"""The report's items, named once: each summary table with its caption, category and
labels, and the labels of the per-workload figures, from the config's sweep (not from the
data, so an item reads the same while points are still missing: analysis.partial).

The rules (``workflow/rules/*.smk``) pass ``table_item(name)`` to Snakemake's ``report()``.
Every table is in the report twice with one caption, category and labels: as a table to
read (``<name>.html``, rule report_pages) and as the CSV to download (the same labels, the
last one marked "(CSV)": it lists after its table, never in its place). A new table is one
line here, its caption in ``workflow/report/``, and the rule that makes it.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

from scalesweep.plan.kinds import kind_of
from scalesweep.plan.sweep import RUNTIMES, value_span
from scalesweep.record.pointdir import SUMMARY_DIR

CAPTIONS = "../report"  # the captions, relative to the rule files

T = "Tables"
ABOUT = "About this report"
LOAD = "LLM serving under load"
FITS = {"workload": "all", "runtime": "all"}
# name: (caption in workflow/report/, category, subcategory, labels)
TABLES: dict[str, tuple[str, str, str | None, dict[str, str]]] = {
    "overhead": ("overhead_table.rst", T, None, {"table": "container overhead"}),
    "scaling": ("scaling_table.rst", T, None, {"table": "scaling"}),
    "llm": ("llm_table.rst", T, None, {"table": "LLM inference"}),
    "runs": ("runs.rst", T, None, {"table": "runs"}),
    "epochs": ("epochs_table.rst", T, None, {"table": "per-epoch times"}),
    "memory": ("memory_table.rst", T, None, {"table": "peak memory, native vs containers"}),
    "accuracy_parity": ("accuracy_parity.rst", T, None, {"table": "accuracy parity"}),
    "achieved_rate": ("achieved_rate.rst", T, None, {"table": "achieved FLOP rate"}),
    "mpi": ("mpi_table.rst", T, None, {"table": "MPI library and Allreduce"}),
    "data_path": ("data_path.rst", T, None, {"table": "data path"}),
    "decomposition": ("decomposition.rst", T, None,
                      {"table": "where the container's cost goes"}),
    "differences": ("differences.rst", T, None,
                    {"table": "what differs between native and container"}),
    "attribution": ("attribution.rst", T, None,
                    {"table": "why: isolation vs software stack"}),
    "llm_concurrency": ("llm_concurrency.rst", T, None, {"table": "LLM concurrency levels"}),
    "llm_load": ("llm_load.rst", LOAD, "tables", {
        "item": "table: latency percentiles, throughput and goodput per load level"}),
    "llm_load_overhead": ("llm_load_overhead.rst", LOAD, "tables",
                          {"item": "table: the container's effect at each load level"}),
    "drift": ("drift_table.rst", T, None, {"table": "machine drift and run-to-run spread"}),
    "fits": ("fits_table.rst", "Scaling", "fits", {**FITS, "item": "table: fitted laws"}),
    "fit_predictions": ("fits_predictions.rst", "Scaling", "fits",
                        {**FITS, "item": "table: predictions"}),
    "provenance": ("provenance.rst", "Provenance", None, {"table": "per-run provenance"}),
    # with the completeness figure (report.smk)
    "missing": ("missing.rst", "Sweep completeness", "all requested points",
                {"item": "table: missing and failed points"}),
    "startup": ("startup_table.rst", "Container start-up", "all container runtimes",
                {"runtime": "all", "item": "table: medians native vs container"}),
    "startup_scale": ("startup_scale.rst", "Container start-up", "at scale",
                      {"runtime": "all", "item": "table: concurrent starts, measured"}),
    "startup_model": ("startup_model.rst", "Container start-up", "at scale",
                      {"runtime": "all", "item": "table: model and prediction"}),
    "made": ("made.rst", ABOUT, None, {"table": "made from"}),
    "significance": ("significance.rst", ABOUT, None,
                     {"table": "many comparisons: chance and FDR"}),
    "rules": ("rules.rst", ABOUT, None, {"table": "benchmarking rules"}),
}


def table_csv(name: str) -> str:
    """Summary table ``name``'s CSV."""
    return f"{SUMMARY_DIR}/{name}.csv"


def table_item(name: str, view: bool = False) -> tuple[str, dict[str, Any]]:
    """(path, keywords) of Snakemake's ``report()`` for summary table ``name``: its CSV,
    or with ``view`` its HTML page (<name>.html)."""
    caption, category, subcategory, labels = TABLES[name]
    if not view:
        last = list(labels)[-1]
        labels = {**labels, last: f"{labels[last]} (CSV)"}
    path = f"{SUMMARY_DIR}/{name}.{'html' if view else 'csv'}"
    return path, dict(caption=f"{CAPTIONS}/{caption}", category=category,
                      subcategory=subcategory, labels=labels)


def table_title(name: str) -> str:
    """The heading of a table's page: its last label ("per-epoch times")."""
    return list(TABLES[name][3].values())[-1]


def report_workloads(points: Iterable[Any], config: dict, payload: str | None = None
                     ) -> list[str]:
    """The sweep's workloads; only those of this workload kind (``payload``) if given."""
    return sorted({p.workload for p in points
                   if payload is None or config["workloads"][p.workload]["payload"] == payload})


def load_targets(points: Iterable[Any], config: dict) -> dict[str, dict | None] | None:
    """Each swept LLM workload's latency target (None where it names none), or None where
    no LLM workload is swept (no load figures)."""
    from scalesweep.plan.kinds.llm import workload_targets

    names = report_workloads(points, config, "llm")
    return workload_targets(config, names) if names else None


def workload_labels(points: Iterable[Any], config: dict, figure: str) -> Callable:
    """report() labels of a per-workload figure (a function of its wildcards): workload,
    runtimes compared, scale swept, and ``figure``."""
    points = list(points)

    def labels(wildcards: Any) -> dict[str, str]:
        mine = [p for p in points if p.workload == wildcards.workload]
        kind = kind_of(config["workloads"][wildcards.workload])
        counts = [kind.scaling_count(p) for p in mine]
        return {
            "workload": wildcards.workload,
            "runtimes": ", ".join(r for r in RUNTIMES if any(p.runtime == r for p in mine)),
            "scale": f"nodes {value_span(p.nodes for p in mine)}, "
                     f"{kind.count_unit(mine)} {value_span(counts)}",
            "figure": figure,
        }

    return labels
