"""LLM throughput mode on the local Slurm cluster: one server per node, one client
spreading the prompt set across them (the OLCF study's 'future work')."""

import json

import pytest

from conftest import REPO, run_snakemake, tiny_config, write_site
from scalesweep.record.metrics import read_metrics

pytestmark = [pytest.mark.slurm, pytest.mark.integration]


def test_two_node_llm_point_serves_from_both_nodes(slurm_cluster, campaign, tmp_path):
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        pytest.skip("llama-cpp-python not installed (tools/install.sh installs it)")
    # the local cluster, servers started with srun outside a job too
    site = write_site(tmp_path, "cluster", extends="local-slurm", launch={"launcher": "srun"})
    cfg = tiny_config(site=site)
    cfg["workloads"] = {"llm": {"payload": "llm", "model": "tiny_llama", "max_tokens": 8,
                                "warmup": 1, "num_requests": 8, "max_runtime_min": 5,
                                # and an open-loop level across both servers, through Slurm
                                "load": {"rates": [4], "requests": 8, "seed": 3},
                                "sweep": {"nodes": [2], "gpus_per_node": [0], "baseline": None}}}
    cfg["models"] = {"tiny_llama": {"source": "synthetic", "seed": 2}}
    wd = campaign(cfg)
    # --config: the campaign's site over the one the profile names (site: local-slurm);
    # --until before it (--config takes every word after it); only the point is read
    run_snakemake(wd, "--profile", str(REPO / "profiles" / "local-slurm"), "--until", "run_point",
                  "--config", f"site={site}", timeout=1200)
    point = wd / "results/runs/llm/native/n2-g0-r1-t1/rep1/native"
    m = read_metrics(point / "metrics.json")
    servers = m["servers"]
    assert len(servers) == 2
    hosts = {s.split("//")[-1].split(":")[0] for s in servers}
    assert len(hosts) == 2, f"both servers on one node: {servers}"
    assert m["n_ok"] == 8 and m["n_failed"] == 0
    per_server = {}
    for r in m["requests"]:
        per_server[r.get("server")] = per_server.get(r.get("server"), 0) + 1
    assert len([k for k in per_server if k]) == 2, per_server
    for i in (0, 1):
        srv = json.loads((point / "servers" / f"server-{i}.json").read_text())
        assert srv["status"] == "ok" and srv["served_s"] > 0
    assert m["slurm"]["job_id"]
    # the open loop from the client on the first node, spread over both nodes' servers
    closed, opened = m["load_levels"]
    assert closed["shape"] == "closed" and opened["shape"] == "poisson" and opened["rate"] == 4
    assert opened["n"] == opened["n_ok"] == 8 and opened["ttft"]["p50"]["estimate"] > 0
    sent = [json.loads(line) for line in (point / "requests.jsonl").read_text().splitlines()]
    assert {r["server"] for r in sent if r["level"] == 1} == set(servers)
    assert m["client"]["placement"] == "with_server" and "a server on every node" in m["client"]["where"]
