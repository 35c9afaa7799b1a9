"""Each fact declared once (issue #28): a point's geometry (scalesweep.record.geometry) and
each workload kind (scalesweep.plan.kinds: one registered class per kind).

- ``Geometry`` round-trips through its path segment, and the segment and the column list
  are spelled nowhere in workflow/ but in record/geometry.py;
- the kinds registered are the config schema's ``payload`` enum;
- a toy kind, one file written into tmp_path beside its 10-line payload script, is
  registered from there and swept, launched (its arguments), run and read back into a
  runs.csv row, without a change to any other file.
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from conftest import REPO, tiny_config
from scalesweep.plan import kinds
from scalesweep.plan.sweep import AXES as SWEEP_AXES
from scalesweep.plan.sweep import BLOCK_DIR, SweepError, SweepPoint, old_layout, scaling_count
from scalesweep.record.geometry import (AXES, CONFIG_AXES, CONSTRAINTS, SEGMENT, SEGMENT_RE,
                                        Geometry)

WORKFLOW = REPO / "workflow"
GEOMETRY_MODULE = WORKFLOW / "scalesweep" / "record" / "geometry.py"


# --- the geometry ---------------------------------------------------------------------------

@given(nodes=st.integers(1, 10000), gpus=st.integers(0, 64), ranks=st.integers(1, 512),
       threads=st.integers(1, 256))
def test_geometry_round_trips_through_its_segment(nodes, gpus, ranks, threads):
    g = Geometry(nodes, gpus, ranks, threads)
    assert Geometry.parse(g.segment) == g == Geometry.from_segment(g.segment)
    assert Geometry.of(g.as_dict()) == g
    assert g.world_size == nodes * ranks
    point = SweepPoint.at("w", "native", g, 1)
    assert point.geometry == g and point.world_size == g.world_size
    assert g.segment in point.path and SweepPoint.from_path(point.path) == point


def test_geometry_declared_once():
    assert Geometry(2, 0, 4, 1).segment == "n2-g0-r4-t1"
    assert list(AXES) == list(CONFIG_AXES) == list(CONSTRAINTS)
    assert SEGMENT.format(**dict.fromkeys(AXES, 7)) == "n7-g7-r7-t7"
    # the sweep's axes are the geometry's config names (and runtimes, repeats)
    assert set(CONFIG_AXES.values()) <= set(SWEEP_AXES)
    assert BLOCK_DIR == "{workload}/{arm}/" + SEGMENT + "/rep{repeat}"
    for bad in ("n0-g0-r1-t1", "n1-g0-r0-t1", "n1-g0-r1", "n1-g-1-r1-t1", "x1-g0-r1-t1"):
        assert not SEGMENT_RE.match(bad)
        with pytest.raises(ValueError, match="not a geometry segment"):
            Geometry.parse(bad)
    assert old_layout("cnn_ddp/native/n1-g0-r2-t1/rep1")
    assert not old_layout("cnn_ddp/native/n1-g0-r2-t1/rep1/native")


# the segment (format string, f-string or regex) and the column list, spelled out
SEGMENT_SPELLED = re.compile(r"""n\{[^}]*\}-g\{|-g\{[^}]*\}-r\{|n\\d\+-g\\d|n\(\?P<nodes>""")
COLUMNS_SPELLED = re.compile(
    r"""["']nodes["'],\s*["']gpus["'],\s*["']ranks["'],\s*["']threads["']""")
# files still spelling the geometry: none left, and it stays empty
GEOMETRY_PENDING: set[str] = set()


def _sources() -> list[Path]:
    return sorted(p for p in WORKFLOW.rglob("*")
                  if p.suffix in (".py", ".smk") or p.name == "Snakefile")


def test_the_geometry_is_spelled_in_record_geometry_only():
    spelled = {}
    for path in _sources():
        if path == GEOMETRY_MODULE or "__pycache__" in path.parts:
            continue
        text = path.read_text()
        lines = sorted({text.count("\n", 0, m.start()) + 1
                        for rx in (SEGMENT_SPELLED, COLUMNS_SPELLED) for m in rx.finditer(text)})
        if lines:
            spelled[str(path.relative_to(REPO))] = lines
    extra = {f: lines for f, lines in spelled.items() if f not in GEOMETRY_PENDING}
    assert extra == {}, ("the geometry spelled out (use scalesweep.record.geometry: AXES, "
                         f"SEGMENT, Geometry) in {extra}")
    done = sorted(f for f in GEOMETRY_PENDING if (REPO / f).is_file() and f not in spelled)
    assert done == [], f"converted: take them off GEOMETRY_PENDING: {done}"


def test_the_checks_see_every_spelling():
    for text in ('"n{nodes}-g{gpus}-r{ranks}-t{threads}"', "f\"n{p.nodes}-g{p.gpus}\"",
                 r'"n\d+-g\d+-r\d+"'):
        assert SEGMENT_SPELLED.search(text), text
    assert COLUMNS_SPELLED.search('["nodes", "gpus",\n "ranks", \'threads\']')
    assert not COLUMNS_SPELLED.search('["nodes", "gpus", "threads"]')


# a branch on a built-in kind's name: == "cnn", .eq("llm"), ... (the kind's class says it)
KIND_BRANCH = re.compile(r"""(==|!=)\s*["'](cnn|llm)["']|\.(eq|isin)\(\s*["'](cnn|llm)["']"""
                         r"""|["'](cnn|llm)["']\s*(==|!=)|\bor\s+["'](cnn|llm)["']""")
# files still branching on a kind's name: none left, and it stays empty
KIND_BRANCH_PENDING: set[str] = set()


def test_no_file_branches_on_a_kinds_name():
    branching = {}
    for path in _sources():
        if "__pycache__" in path.parts:
            continue
        text = path.read_text()
        lines = sorted({text.count("\n", 0, m.start()) + 1 for m in KIND_BRANCH.finditer(text)
                        if "#" not in text[text.rfind("\n", 0, m.start()) + 1:m.start()]})
        if lines:  # (a comment's words are no branch)
            branching[str(path.relative_to(REPO))] = lines
    extra = {f: lines for f, lines in branching.items() if f not in KIND_BRANCH_PENDING}
    assert extra == {}, ("a branch on a workload kind's name (use scalesweep.plan.kinds: "
                         f"kind_of(...) and what the kind declares) in {extra}")
    done = sorted(f for f in KIND_BRANCH_PENDING if (REPO / f).is_file() and f not in branching)
    assert done == [], f"converted: take them off KIND_BRANCH_PENDING: {done}"
    assert KIND_BRANCH.search('runs["payload"] == "cnn"') and KIND_BRANCH.search("or 'cnn'")


# --- the registry ---------------------------------------------------------------------------

BUILT_IN = ["cnn", "llm"]


def schema_payload() -> dict:
    schema = yaml.safe_load((WORKFLOW / "schemas" / "config.schema.yaml").read_text())
    return schema["properties"]["workloads"]["additionalProperties"]["properties"]["payload"]


def test_the_registry_is_the_one_list_of_kinds():
    """Every module of plan/kinds/ registers itself; the schema lists no kind, and the
    config check asks the registry, naming the known kinds."""
    from scalesweep.plan.config import ConfigError, check_config
    from scalesweep.plan.kinds import SweepError, check_kinds

    assert sorted(kinds.names()) == BUILT_IN
    modules = sorted(p.stem for p in (WORKFLOW / "scalesweep" / "plan" / "kinds").glob("*.py")
                     if p.stem not in ("__init__", "base"))
    assert modules == BUILT_IN  # one module per kind, each registered by the package
    assert "enum" not in schema_payload()
    check_kinds({"workloads": {"a": {"payload": "cnn"}, "b": {"payload": "llm"}}})
    message = r"workloads.b.payload: 'docker' is not a workload kind; known: cnn, llm"
    with pytest.raises(SweepError, match=message):
        check_kinds({"workloads": {"a": {"payload": "cnn"}, "b": {"payload": "docker"}}})
    config = tiny_config()
    config["workloads"]["b"] = {"payload": "docker"}
    config.pop("_site", None)
    with pytest.raises(ConfigError, match=message):
        check_config(config)


def test_every_kind_declares_what_its_users_read():
    from scalesweep.analyse.pairing import probe_kernel
    from scalesweep.measure.probe import KERNELS
    from scalesweep.record.metrics import FIELDS

    for kind in kinds.kinds():
        assert (REPO / kind.script).is_file(), kind.script
        assert kind.fields is FIELDS[kind.record_payload]
        assert kind.merit.column and kind.merit.unit
        assert kinds.kind_of(kind.name) is kinds.kind_of(kind.record_payload) is kind
        assert kinds.kind_of({"payload": kind.name}) is kind
        # measure.probe sits below plan: the pairing passes it the kind's kernel
        assert kind.probe_kernel in KERNELS
        assert probe_kernel({"payload": kind.name}) == kind.probe_kernel
        assert probe_kernel({"payload": kind.record_payload}) == kind.probe_kernel
    assert probe_kernel({}) is None and probe_kernel({"payload": "docker"}) is None
    with pytest.raises(SweepError, match="unknown workload kind"):
        kinds.kind_of("docker")


def test_a_second_kind_of_the_same_name_is_refused():
    class Other(kinds.WorkloadKind):
        name, script, record_payload = "cnn", "x.py", "cnn"

    with pytest.raises(ValueError, match="registered already"):
        kinds.register(Other)


# --- a toy kind, one file -------------------------------------------------------------------

TOY_KIND = '''\
"""A toy workload kind: sleep, and count the naps (one per rank)."""
from scalesweep.plan.kinds.base import Invocation, Merit, WorkloadKind, register
from scalesweep.record.measures import Metric
from scalesweep.record.metrics import Field
from scalesweep.record.pointdir import PAYLOAD_JSON


@register
class Sleep(WorkloadKind):
    name = "sleep"
    script = "sleep_payload.py"
    record_payload = "sleep"
    merit = Merit("naps_per_s", "naps/s", higher_is_better=True)
    # each figure once: its column, unit, field (read as it is, or computed by row)
    own_metrics = (
        Metric("time_s", "s", field="wall_s", check="finite", required=True, computed=True),
        Metric("naps", "naps", field="naps", check="count"),
        Metric("naps_per_s", "naps/s", computed=True, rate=True, higher_is_better=True),
    )

    def invocation(self, point, wl, config, inputs, out_dir):
        args = ["--seconds", str(wl.get("seconds", 0.01)), "--naps", str(point.world_size),
                "--out", str(out_dir / PAYLOAD_JSON)]
        return Invocation(self.script, args, data_dir="")

    def row(self, metrics):  # the computed figures
        return {"time_s": metrics["wall_s"], "naps_per_s": metrics["naps"] / metrics["wall_s"]}
'''

TOY_PAYLOAD = '''\
import argparse, json, time
parser = argparse.ArgumentParser()
parser.add_argument("--seconds", type=float)
parser.add_argument("--naps", type=int)
parser.add_argument("--out")
args = parser.parse_args()
start = time.perf_counter()
time.sleep(args.seconds)
record = {"workload": "sleep", "wall_s": time.perf_counter() - start, "naps": args.naps}
open(args.out, "w").write(json.dumps(record))
'''


@pytest.fixture
def toy_kind(tmp_path):
    """The toy kind, registered from its own file in tmp_path (and forgotten after)."""
    (tmp_path / "sleep_kind.py").write_text(TOY_KIND)
    (tmp_path / "sleep_payload.py").write_text(TOY_PAYLOAD)
    spec = importlib.util.spec_from_file_location("sleep_kind", tmp_path / "sleep_kind.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    try:
        yield kinds.kind_of("sleep")
    finally:
        kinds.unregister("sleep")
    assert kinds.names() == BUILT_IN
    from scalesweep.record import columns

    assert columns.role("naps_per_s") is None  # its columns forgotten with it


def toy_config(tmp_path) -> dict:
    config = tiny_config()
    config["sweep"].update(runtimes=["native", "native-aa"], repeats=2, baseline=None)
    config["workloads"] = {"naps": {"payload": "sleep", "seconds": 0.01,
                                    "sweep": {"ranks_per_node": [1, 2]}}}
    config["_code_root"] = str(tmp_path)
    return config


def test_a_toy_kind_is_swept_launched_and_read_back(toy_kind, tmp_path):
    from scalesweep.analyse.collect import read_run, run_row
    from scalesweep.plan.payloads import payload_invocation, planned_invocation, point_inputs
    from scalesweep.plan.sweep import sweep_points
    from scalesweep.record.metrics import MetricsError, write_metrics

    assert "sleep" in kinds.names() and toy_kind.summary_table == "scaling"
    config = toy_config(tmp_path)
    # the sweep: the base class's geometry (ranks per node on a CPU node), arms and repeats
    points = sweep_points(config)
    assert {p.path for p in points if p.repeat == 1 and p.runtime == "native"} == {
        "naps/native-aa/n1-g0-r1-t1/rep1/native", "naps/native-aa/n1-g0-r2-t1/rep1/native"}
    assert len(points) == 2 * 2 * 2  # geometries x runtimes x repeats
    assert sorted({scaling_count(p, "sleep") for p in points}) == [1, 2]
    # its arguments, as the point's run and a dry run get them; it reads no input
    point = next(p for p in points if p.ranks == 2)
    wl = config["workloads"]["naps"]
    out = tmp_path / "results" / "runs" / point.path
    out.mkdir(parents=True)
    assert point_inputs("naps", point.runtime, config) == {}
    inv = payload_invocation(point, wl, config, {}, out)
    assert inv.script == "sleep_payload.py"
    assert inv.args == ["--seconds", "0.01", "--naps", "2", "--out", str(out / "payload.json")]
    assert planned_invocation(point, wl, config, {}, out).args == inv.args
    # the payload runs, and its record reads back into a runs.csv row
    subprocess.run([sys.executable, str(tmp_path / inv.script), *inv.args], check=True)
    payload = json.loads((out / "payload.json").read_text())
    write_metrics(out / "metrics.json", {**payload, "payload": payload.pop("workload"),
                                         "point": point.as_dict()})
    _, row = read_run(out / "metrics.json", config)
    assert row["payload"] == "sleep" and row["count"] == 2 and row["world_size"] == 2
    assert row["time_s"] >= 0.01 and row["naps_per_s"] == pytest.approx(2 / row["time_s"])
    assert row["naps"] == 2  # read as it is
    # its figures declared once: their columns, units and record fields follow
    from scalesweep.record import columns
    from scalesweep.record.metrics import FIELDS

    assert columns.unit("naps_per_s") == "naps/s" and columns.is_rate("naps_per_s")
    assert columns.role("naps") == columns.MEASUREMENT and columns.unit("naps") == "naps"
    assert {f.path: f.kind for f in FIELDS["sleep"]}.items() >= {"wall_s": "finite",
                                                                 "naps": "count"}.items()
    assert {k: row[k] for k in AXES} == point.geometry.as_dict()
    assert run_row(json.loads((out / "metrics.json").read_text()), "p", "sleep")["count"] == 2
    # its fields are checked where the record is read, as a built-in kind's are
    write_metrics(out / "metrics.json", {"payload": "sleep", "point": point.as_dict(),
                                         "naps": 2})
    with pytest.raises(MetricsError, match="wall_s is missing, expected"):
        read_run(out / "metrics.json", config)
