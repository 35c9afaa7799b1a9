"""The real workflow with the Charliecloud runtime: the image is built by the workflow
(cached per machine under ~/.cache/scalesweep), then the CNN (1 and 2 ranks) and the LLM
run natively and in the container."""

import json

import pandas as pd
import pytest

from conftest import REPO, have, run_snakemake, tiny_config, write_site
from scalesweep.record.metrics import read_metrics

pytestmark = [pytest.mark.integration, pytest.mark.container]


@pytest.fixture(scope="module")
def campaign_dir(tmp_path_factory):
    for tool in ("ch-run", "ch-image", "debootstrap", "mpirun"):
        if not have(tool):
            pytest.skip(f"{tool} not installed (tools/install.sh installs it)")
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        pytest.skip("llama-cpp-python not installed (tools/install.sh installs it)")
    cfg = tiny_config()
    cfg["sweep"]["runtimes"] = ["native", "charliecloud"]
    cfg["workloads"]["llm"] = {
        "payload": "llm", "model": "tiny_llama", "max_tokens": 16, "warmup": 1,
        "num_requests": 4, "sweep": {"gpus_per_node": [0], "baseline": None},
    }
    # MPI data parallelism: the host's Open MPI natively, the image's own in charliecloud,
    # the host's injected into a copy of the image (ch-fromhost) in charliecloud-hostmpi
    # (2 ranks, 1 epoch: the 1-rank singleton and 2 nodes are tests/slurm/test_slurm_workflow.py's)
    cfg["workloads"]["cnn_mpi"] = dict(
        cfg["workloads"]["cnn_ddp"], parallel="mpi", epochs=1,
        sweep={"runtimes": ["native", "charliecloud", "charliecloud-hostmpi"], "ranks_per_node": [2],
               "baseline": 2})
    # the same LLM at an open-loop rate, its client on the host beside the containerised
    # server (load.client: host)
    cfg["workloads"]["llm_host"] = {
        **cfg["workloads"]["llm"], "load": {"rates": [4], "requests": 8, "client": "host"}}
    # the control image (issue #43: the host's own stack in the container), 1 rank, 1 epoch
    cfg["workloads"]["cnn_ctl"] = dict(
        cfg["workloads"]["cnn_ddp"], epochs=1,
        sweep={"runtimes": ["native", "charliecloud+control"], "ranks_per_node": [1]})
    cfg["models"] = {"tiny_llama": {"source": "synthetic", "seed": 1}}
    cfg["containers"] = {"startup_repeats": 3, "image": ["default", "control"], "images": {
        "default": {}, "control": {"recipe": "containers/charliecloud/Dockerfile.control",
                                   "control": True}}}
    wd = tmp_path_factory.mktemp("containers")
    (wd / "config").mkdir()
    import yaml
    (wd / "config" / "config.yaml").write_text(yaml.safe_dump(cfg))
    # what the tests read (the points and image manifests are their inputs; aggregate
    # writes overhead.csv beside runs.csv), not the report's plots and tables
    run_snakemake(wd, "--profile", str(REPO / "profiles" / "local"), "results/summary/runs.csv",
                  "results/startup/charliecloud.json", "results/summary/decomposition.csv",
                  timeout=1800)
    return wd


def test_image_manifest_has_provenance(campaign_dir):
    m = json.loads((campaign_dir / "resources/images/default.manifest.json").read_text())
    assert m["content_digest"].startswith("sha256:")
    assert m["builder"]["name"] == "charliecloud" and m["builder"]["version"]
    assert m["size_bytes"] > 100_000_000
    assert m["packages"]["pip"]["torch"].startswith("2.13.0")
    assert "python3" in m["packages"]["dpkg"]


def test_container_points_ran_in_the_image_and_carry_its_digest(campaign_dir):
    digest = json.loads((campaign_dir / "resources/images/default.manifest.json").read_text())["content_digest"]
    for ranks in (1, 2):
        m = read_metrics(campaign_dir / f"results/runs/cnn_ddp/charliecloud/n1-g0-r{ranks}-t1/rep1/charliecloud/metrics.json")
        assert m["image"]["content_digest"] == digest
        assert "ch-run" in m["command"] and "/mnt/code/scripts/train_cnn.py" in m["command"]
        assert m["ranks"] == ranks and m["final_accuracy"] >= 0
        native = read_metrics(campaign_dir / f"results/runs/cnn_ddp/charliecloud/n1-g0-r{ranks}-t1/rep1/native/metrics.json")
        assert native["image"] is None and "ch-run" not in native["command"]


def test_mpi_points_loaded_the_mpi_library_their_runtime_says(campaign_dir):
    """The gradients went through MPI_Allreduce of: the host's Open MPI (native), the
    image's own (charliecloud), the host's injected into the image copy
    (charliecloud-hostmpi), on every rank, as the payload saw /proc/self/maps; runs.csv
    and the image copy's manifest say so."""
    want = {"native": ("host", "/usr/lib/x86_64-linux-gnu/libmpi.so.40"),
            "charliecloud": ("container", "/usr/lib/x86_64-linux-gnu/libmpi.so.40"),
            "charliecloud-hostmpi": ("host", "/opt/host-mpi/lib/libmpi.so.40")}
    # native is measured in each container runtime's blocks (its arms): the same library
    runs = [(arm, runtime) for arm in ("charliecloud", "charliecloud-hostmpi")
            for runtime in ("native", arm)]
    for arm, runtime in runs:
        origin, library = want[runtime]
        for ranks in (2,):
            m = read_metrics(campaign_dir / f"results/runs/cnn_mpi/{arm}/n1-g0-r{ranks}-t1/rep1/{runtime}/metrics.json")
            assert m["parallel"] == "mpi" and m["ranks"] == ranks
            assert m["mpi"]["origin"] == origin, (runtime, m["mpi"])
            assert [r["library"].startswith(library) for r in m["mpi"]["ranks"]] == [True] * ranks
            assert m["allreduce_bytes_per_step"] > 4 * 9_000_000  # every parameter, float32
            assert 0 <= m["test_accuracy"] <= 1 and m["test_images"] > 0
            assert m["flops_per_step"] > 0
    hostmpi = read_metrics(campaign_dir / "results/runs/cnn_mpi/charliecloud-hostmpi/n1-g0-r2-t1/rep1/charliecloud-hostmpi/metrics.json")
    assert hostmpi["container_env"]["LD_LIBRARY_PATH"].startswith("/opt/host-mpi/lib")
    assert "default+hostmpi" in hostmpi["command"]
    copy = json.loads((campaign_dir / "resources/images/default+hostmpi.manifest.json").read_text())
    plain = json.loads((campaign_dir / "resources/images/default.manifest.json").read_text())
    assert copy["base_content_digest"] == plain["content_digest"] != copy["content_digest"]
    assert [x["path"] for x in copy["host_mpi"]["libs"]][0] == "/opt/host-mpi/lib/libmpi.so.40"
    # the image itself was not changed by the injection: no host MPI directory in it
    assert not (campaign_dir / "resources/images/default/opt/host-mpi").exists()
    runs = pd.read_csv(campaign_dir / "results/summary/runs.csv")
    mpi = runs[runs["workload"] == "cnn_mpi"]
    assert dict(zip(mpi["runtime"], mpi["mpi_origin"])) == {rt: o for rt, (o, _) in want.items()}
    assert len(mpi) == 4  # native twice: once per arm


def test_llm_greedy_outputs_match_native_and_container(campaign_dir):
    def texts(runtime):
        path = campaign_dir / f"results/runs/llm/charliecloud/n1-g0-r1-t1/rep1/{runtime}/outputs.jsonl"
        return [json.loads(line)["text"] for line in path.read_text().splitlines()]

    native, container = texts("native"), texts("charliecloud")
    assert len(native) == 4 and all(native)
    assert native == container
    m = read_metrics(campaign_dir / "results/runs/llm/charliecloud/n1-g0-r1-t1/rep1/charliecloud/metrics.json")
    assert m["model"]["synthetic"] is True
    assert m["tokens_per_s"] > 0 and m["ttft_s"]["p50"] > 0


def test_llm_client_on_the_host_against_the_server_in_the_container(campaign_dir):
    """load.client: host: the container point's server ran in the image (--serve-only, its
    record under servers/), its client natively beside it, the open-loop level through it;
    the in-container client of the llm workload shared the server's network namespace
    (ch-run makes none)."""
    point = campaign_dir / "results/runs/llm_host/charliecloud/n1-g0-r1-t1/rep1/charliecloud"
    m = read_metrics(point / "metrics.json")
    assert m["client"]["placement"] == "host" and "outside the server's container" in m["client"]["where"]
    assert "CH_RUNNING" not in (m.get("container_env") or {})  # the client: outside ch-run
    server = json.loads((point / "servers" / "server-0.json").read_text())
    assert server["status"] == "ok" and server["served_s"] > 0 and "CH_RUNNING" in server["container_env"]
    assert " ch-run " in f" {m['command']} " and "--serve-only" in m["command"]
    opened = [lv for lv in m["load_levels"] if lv["shape"] == "poisson"]
    assert len(opened) == 1 and opened[0]["n_ok"] == 8
    native = read_metrics(point.parent / "native" / "metrics.json")
    assert native["client"]["placement"] == "host"  # native: client and server on the host anyway
    inside = read_metrics(campaign_dir / "results/runs/llm/charliecloud/n1-g0-r1-t1/rep1/charliecloud/metrics.json")
    assert inside["client"]["placement"] == "with_server"
    assert inside["client"]["same_network_namespace"] is True
    load = pd.read_csv(campaign_dir / "results/summary/llm_load.csv")
    assert {"llm", "llm_host"} <= set(load["workload"]) and load["ttft_p50_s"].gt(0).all()


def test_overhead_and_startup_tables(campaign_dir):
    overhead = pd.read_csv(campaign_dir / "results/summary/overhead.csv")
    assert set(overhead["runtime"]) == {"charliecloud", "charliecloud-hostmpi",
                                        "charliecloud+control"}
    # cnn_ddp 1 and 2 ranks, llm, llm_host; cnn_mpi 2 ranks in each container runtime;
    # cnn_ctl 1 rank in the control image
    assert len(overhead) == 7
    row = overhead[overhead["workload"] == "cnn_ddp"].iloc[0]
    assert row["overhead_pct"] == pytest.approx((row["time_s"] - row["native_s"]) / row["native_s"] * 100)
    startup = read_metrics(campaign_dir / "results/startup/charliecloud.json")
    noop = startup["probes"]["noop"]
    assert noop["container"]["n"] == 3 and noop["container"]["median_s"] > 0
    assert "ch-run" in noop["command"][0]
    # issue #44: one traced start per probe and side, after the timings: import torch opens
    # hundreds of files, in the image's root file system for the container
    ops = startup["probes"]["import_torch"]["fs_ops"]
    assert ops["native"]["open"] > 300 and ops["container"]["open_root"] > 300, ops
    assert ops["container"]["bytes_read"] > 1_000_000 and ops["native"]["exit_code"] == 0


def test_payload_failing_inside_the_container_fails_only_that_point(campaign, tmp_path):
    """A container missing what the payload needs (here: its interpreter) fails its own
    points with a recorded reason; native points finish."""
    for tool in ("ch-run", "ch-image", "debootstrap"):
        if not have(tool):
            pytest.skip(f"{tool} not installed")
    # the site's Charliecloud runs an interpreter the image does not have
    cfg = tiny_config(site=write_site(tmp_path, runtimes={"charliecloud": {
        "bin": "ch-run", "python": "/opt/venv/bin/python-missing"}}))
    cfg["sweep"].update(runtimes=["native", "charliecloud"], ranks_per_node=[1])
    wd = campaign(cfg)
    proc = run_snakemake(wd, "--profile", str(REPO / "profiles" / "local"), check=False, timeout=1800)
    assert proc.returncode != 0
    assert (wd / "results/runs/cnn_ddp/charliecloud/n1-g0-r1-t1/rep1/native/metrics.json").is_file()
    bad = wd / "results/runs/cnn_ddp/charliecloud/n1-g0-r1-t1/rep1/charliecloud"
    assert not (bad / "metrics.json").exists()
    failure = json.loads((bad / "failure.json").read_text())
    assert failure["exit_code"] != 0 and "python-missing" in failure["command"]
    assert "python-missing" in (bad / "run.log").read_text()


def test_the_readmes_analysis_commands_give_the_campaigns_own_answers(campaign_dir):
    """`scalesweep overhead|scaling|fit results/summary/runs.csv` (the README's commands)
    on a real campaign's output: exit 0, and the verdicts and efficiencies of the
    campaign's own overhead.csv and scaling.csv, row for row."""
    import io
    import subprocess
    import sys

    summary = campaign_dir / "results" / "summary"
    assert (summary / "campaign.json").is_file()

    def cli(*args):
        proc = subprocess.run([sys.executable, "-m", "scalesweep", *map(str, args)],
                              capture_output=True, text=True, timeout=300, cwd=campaign_dir)
        assert proc.returncode == 0, proc.stderr
        assert "the campaign's own analysis" in proc.stderr, proc.stderr
        return proc

    overhead = pd.read_csv(io.StringIO(cli("overhead", summary / "runs.csv").stdout))
    want = pd.read_csv(summary / "overhead.csv")
    assert len(want) > 0
    assert overhead["verdict_text"].tolist() == want["verdict_text"].tolist()
    assert (overhead["pairing"] == "same-block pairs").all()
    scaling = pd.read_csv(io.StringIO(cli("scaling", summary / "runs.csv").stdout))
    want = pd.read_csv(summary / "scaling.csv")
    assert len(scaling) == len(want) and scaling["n"].tolist() == want["n"].tolist()
    # the CLI prints percentages to 2 decimals (analysis_cli.PERCENT_DECIMALS)
    assert scaling["efficiency_pct"].tolist() == want["efficiency_pct"].round(2).tolist()
    cli("fit", summary / "runs.csv")


def _libraries(stack, kind):
    return [lib for lib in stack["libraries"] if lib["kind"] == kind]


def test_every_rank_recorded_its_stack_and_start_up(campaign_dir):
    """Natively and inside the image each rank recorded its start-up marks (the harness's
    launch to its first step), the libraries it loaded, its interpreter and its CPU
    binding (scalesweep.record.stack)."""
    paths = sorted((campaign_dir / "results/runs").glob("**/metrics.json"))
    assert paths
    for path in paths:
        m = read_metrics(path)
        ranks = m["per_rank"]
        assert len(ranks) == (m["point"]["ranks"] if m["payload"] == "cnn" else 1), path
        for rank in ranks:
            marks = rank["startup"]
            assert None not in marks.values(), (path, marks)
            assert marks["launch"] <= marks["script"] <= marks["imports"] <= marks["first_step"]
            stack = rank["stack"]
            libc = _libraries(stack, "libc")
            assert libc and libc[0]["version"], (path, stack["libraries"])
            assert stack["interpreter"]["version"] and stack["cpu_affinity"]
        first = ranks[0]["stack"]
        # (a client on the host records the host's stack, its server the image's)
        inside = (m["point"]["runtime"] != "native"
                  and (m.get("client") or {}).get("placement") != "host")
        assert first["interpreter"]["prefix"].startswith("/opt/venv") == inside, path
        if m["payload"] == "cnn":
            torch = _libraries(first, "torch")
            assert torch and all(lib["version"] == m["versions"]["torch"] for lib in torch)
            assert first["builds"]["torch"]["blas"]
        else:  # the llama.cpp server's own libraries
            assert _libraries(m["server_stack"], "llama.cpp"), path
        if m.get("parallel") == "mpi":
            mpi = [lib["path"] for lib in _libraries(first, "mpi") if lib["name"].startswith("libmpi")]
            assert mpi and mpi[0] == m["mpi"]["ranks"][0]["library"], (mpi, m["mpi"])
    runs = pd.read_csv(campaign_dir / "results/summary/runs.csv")
    assert (runs["startup_first_step_s"] > runs["startup_launch_s"]).all()
    assert (runs["startup_launch_s"] > 0).all() and (runs["node_used_peak_mb"] > 0).all()
    cnn = runs["payload"] == "cnn"
    assert (runs.loc[cnn, "data_read_s"] > 0).all() and runs.loc[~cnn, "data_read_s"].isna().all()


def test_decomposition_and_differences_tables(campaign_dir):
    summary = campaign_dir / "results/summary"
    overhead = pd.read_csv(summary / "overhead.csv")
    table = pd.read_csv(summary / "decomposition.csv")
    from scalesweep.analyse.components import COMPONENTS

    keys = ["workload", "arm", "nodes", "gpus", "ranks", "threads", "runtime"]
    assert len(table) == len(overhead) * len(COMPONENTS)
    compute = table[table["component"] == "compute"].merge(overhead, on=keys,
                                                           suffixes=("", "_overhead"))
    assert len(compute) == len(overhead)
    assert (compute["verdict_text"] == compute["verdict_text_overhead"]).all()
    measured = table.set_index(["workload", "runtime", "ranks", "component"])["measured"]
    assert not measured[("llm", "charliecloud", 1, "data")]  # an LLM reads no training set
    assert not measured[("cnn_ddp", "charliecloud", 2, "mpi")]  # DDP over gloo: no MPI
    assert measured[("cnn_mpi", "charliecloud-hostmpi", 2, "mpi")]
    for component in ("startup", "startup_launch", "data", "memory_node"):
        assert measured[("cnn_ddp", "charliecloud", 2, component)], component
    # a measured component whose pair was left out (its machine's speed differed) has no
    # number, as the overhead row has none; the others: container - native
    startup = table[(table["component"] == "startup") & table["measured"] & (table["n"] > 0)]
    assert len(startup) and (startup["native"] > 0).all()
    assert startup["difference"].to_numpy() == pytest.approx(
        (startup["container"] - startup["native"]).to_numpy(), rel=1e-6)
    assert set(table.loc[~table["measured"], "verdict"]) == {"not measured"}
    assert (table["n_disturbed"] == 0).all()
    assert (campaign_dir / "results/plots/decomposition.png").stat().st_size > 10_000

    diff = pd.read_csv(summary / "differences.csv", dtype={"native": str, "container": str})
    assert set(diff["runtime"]) == {"charliecloud", "charliecloud-hostmpi", "charliecloud+control"}
    assert (diff["n_identical"] > 0).all()

    def python(runtime):
        m = read_metrics(campaign_dir / f"results/runs/cnn_ddp/charliecloud/n1-g0-r1-t1/rep1/{runtime}/metrics.json")
        return m["per_rank"][0]["stack"]["interpreter"]["version"]

    ddp = diff[(diff["workload"] == "cnn_ddp") & (diff["ranks"] == 1)].set_index("item")
    if python("native") != python("charliecloud"):
        assert ddp.loc["python version", ["native", "container"]].tolist() == [
            python("native"), python("charliecloud")]
    else:
        assert "python version" not in ddp.index
    hostmpi = diff[(diff["runtime"] == "charliecloud-hostmpi")].set_index("item")
    assert "/opt/host-mpi/lib" in hostmpi.loc["env LD_LIBRARY_PATH", "container"]


def test_the_control_images_stack_is_the_hosts(campaign_dir):
    """Issue #43: the control image carries the host's own stack: from the runs' own
    records, its interpreter (version, build, compiler) and the payload's packages (torch's
    version and build, numpy) are the native run's, and differences.csv finds none of them
    different; its manifest names the host's release and interpreter; the workload image
    (Debian's python3) differs where it does."""
    point = "results/runs/cnn_ctl/charliecloud+control/n1-g0-r1-t1/rep1"
    native = read_metrics(campaign_dir / point / "native/metrics.json")["per_rank"][0]["stack"]
    control = read_metrics(campaign_dir / point / "charliecloud+control/metrics.json")
    assert "ch-run" in control["command"] and control["image"]["content_digest"]
    stack = control["per_rank"][0]["stack"]
    for key in ("version", "build", "compiler", "implementation"):
        assert stack["interpreter"][key] == native["interpreter"][key], key
    assert stack["builds"] == native["builds"]
    diff = pd.read_csv(campaign_dir / "results/summary/differences.csv",
                       dtype={"native": str, "container": str})
    ctl = diff[diff["runtime"] == "charliecloud+control"]
    assert not ctl["item"].fillna("").str.startswith(("python", "torch", "numpy")).any(), \
        ctl[["item", "native", "container"]].to_string()
    manifest = json.loads((campaign_dir / "resources/images/control.manifest.json").read_text())
    host = manifest["host_stack"]
    assert host["release"]["VERSION_CODENAME"] == "bookworm"
    assert host["python"]["version"] == native["interpreter"]["version"]
