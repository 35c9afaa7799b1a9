import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import tiny_config, write_site
from scalesweep.plan.sweep import RUNTIMES, SweepError, SweepPoint, scaling_count, sweep_points


def test_default_tiny_sweep_lists_every_point():
    points = sweep_points(tiny_config())
    assert [p.path for p in points] == [
        "cnn_ddp/native/n1-g0-r1-t1/rep1/native",
        "cnn_ddp/native/n1-g0-r2-t1/rep1/native",
    ]


def test_axes_multiply_and_workload_overrides_top_level():
    cfg = tiny_config()
    cfg["sweep"].update(runtimes=["native", "charliecloud"], repeats=3, nodes=[1, 2])
    cfg["workloads"]["cnn_ddp"]["sweep"] = {"ranks_per_node": [1]}
    points = sweep_points(cfg)
    assert len(points) == 2 * 3 * 2 * 1
    assert {p.ranks for p in points} == {1}
    assert {p.nodes for p in points} == {1, 2}


@given(
    workload=st.from_regex(r"[a-z][a-z0-9_]{0,12}", fullmatch=True),
    runtime=st.sampled_from(RUNTIMES),
    nodes=st.integers(1, 10000),
    gpus=st.integers(0, 64),
    ranks=st.integers(1, 512),
    threads=st.integers(1, 256),
    repeat=st.integers(1, 1000),
)
def test_point_path_round_trips(workload, runtime, nodes, gpus, ranks, threads, repeat):
    p = SweepPoint(workload, runtime, nodes, gpus, ranks, threads, repeat)
    assert SweepPoint.from_path(p.path) == p


def test_bad_path_is_refused():
    with pytest.raises(SweepError, match="not a sweep point path"):
        SweepPoint.from_path("cnn_ddp/docker/n1-g0-r1-t1/rep1")


def test_dataparallel_on_cpu_is_refused_at_planning_time():
    cfg = tiny_config()
    cfg["workloads"]["cnn_dp"] = {"payload": "cnn", "parallel": "dp", "dataset": "tiny",
                                  "sweep": {"gpus_per_node": [1, 2]}}
    with pytest.raises(SweepError, match="DataParallel is a GPU mode"):
        sweep_points(cfg)


def test_dataparallel_on_gpu_machine_is_one_process_many_gpus():
    cfg = tiny_config(site="frontier")  # ROCm, 8 GPUs per node
    cfg["workloads"] = {"cnn_dp": {"payload": "cnn", "parallel": "dp", "dataset": "tiny",
                                   "sweep": {"gpus_per_node": [1, 2, 4, 8]}}}
    points = sweep_points(cfg)
    assert {(p.gpus, p.ranks) for p in points} == {(1, 1), (2, 1), (4, 1), (8, 1)}
    assert [scaling_count(p, "cnn") for p in points] == [1, 2, 4, 8]


def test_gpu_ddp_is_one_rank_per_gpu():
    cfg = tiny_config(site="frontier")
    cfg["sweep"].update(nodes=[1, 2], gpus_per_node=[8], baseline=8)
    points = sweep_points(cfg)
    assert {(p.nodes, p.gpus, p.ranks) for p in points} == {(1, 8, 8), (2, 8, 8)}
    assert sorted(scaling_count(p, "cnn") for p in points) == [8, 16]


def test_cpu_ranks_on_a_gpu_node_are_swept_by_ranks_per_node(tmp_path):
    """Found on an H200 node (issue #32): a CNN workload asking for gpus_per_node [0] on a GPU
    site got ranks = GPUs = 0 and was refused ("ranks=0 out of range"), so the node's CPUs
    could not be strong-scaled beside its GPU."""
    site = write_site(tmp_path, extends=None, node={"device": "cuda", "gpus": 1, "cores": 16})
    cfg = tiny_config(site=site)
    cfg["sweep"].update(gpus_per_node=[0, 1], ranks_per_node=[1, 2, 4, 16], baseline=1)
    points = sweep_points(cfg)
    assert {(p.gpus, p.ranks) for p in points} == {(0, 1), (0, 2), (0, 4), (0, 16), (1, 1)}


def test_ddp_on_a_gpu_is_nccl_ddp_also_at_one_rank():
    """One CPU rank of ddp trains alone; on a GPU the payload is given ddp at any world size
    (the one-GPU baseline carries the DDP wrapper and the NCCL group, as eight GPUs do)."""
    from scalesweep.plan.payloads import cnn_parallel

    assert cnn_parallel("ddp", 1, "cpu") == "single"
    assert cnn_parallel("ddp", 2, "cpu") == "ddp"
    assert cnn_parallel("ddp", 1, "cuda") == "ddp"
    assert cnn_parallel("mpi", 1, "cpu") == "mpi"
    assert cnn_parallel("dp", 1, "cuda") == "dp"


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda c: c["sweep"].update(runtimes=["docker"]), "unknown runtime 'docker'"),
        (lambda c: c["sweep"].update(repeats=0), "repeats must be >= 1, got 0"),
        (lambda c: c["sweep"].update(baseline=4), "baseline 4 is not a count in the sweep"),
        (lambda c: c["sweep"].update(ranks_per_node=[4]), "exceeds node.cores=2 of site local"),
        (lambda c: c["workloads"]["cnn_ddp"].update(enabled=False), "enables no workload"),
    ],
)
def test_bad_sweeps_name_the_bad_value(change, message):
    cfg = tiny_config()
    change(cfg)
    with pytest.raises(SweepError, match=message):
        sweep_points(cfg)


def test_gpus_above_machine_are_refused(tmp_path):
    cfg = tiny_config(site=write_site(tmp_path, extends=None, node={"device": "cuda", "gpus": 4}))
    cfg["sweep"].update(gpus_per_node=[8], baseline=None)
    with pytest.raises(SweepError, match="gpus_per_node=8 but site test has node.gpus=4"):
        sweep_points(cfg)


def test_run_rule_output_path_is_the_point_path():
    """The rule's output is built from the one point-path definition (no literal copy)."""
    from conftest import REPO
    from scalesweep.record.pointdir import METRICS_JSON
    from scalesweep.plan.sweep import POINT_DIR

    rule_text = (REPO / "workflow" / "rules" / "run.smk").read_text()
    run_point = rule_text[rule_text.index("rule run_point:"):].split("\n\n\n")[0]
    assert "POINT_METRICS" in run_point and "n{nodes}-g{gpus}" not in run_point
    common = (REPO / "workflow" / "rules" / "common.smk").read_text()
    assert "POINT_DIR" in common and "n{nodes}-g{gpus}" not in common
    assert POINT_DIR.startswith("{workload}/{arm}/") and POINT_DIR.endswith("/{runtime}")
    assert METRICS_JSON == "metrics.json"
