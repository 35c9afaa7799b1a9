"""The harness in its modules (issue #17): each fact in one place, the runtime's version in
every run's provenance, start-up timed in the launch's environment. Fast: no workflow."""

from __future__ import annotations

import ast
import json
import os
import sys
from dataclasses import replace

import pytest

from conftest import REPO, fake_payload_launch, tiny_config
from scalesweep.plan.config import validated
from scalesweep.plan.sweep import SweepPoint
from scalesweep.platform.launch import Launch
from scalesweep.platform.site import load_site

PACKAGE = REPO / "workflow" / "scalesweep"
FAKE_PAYLOAD = ("import json, sys\njson.dump({'workload': 'fake', 'payload_wall_s': 0.01}, "
                "open(sys.argv[sys.argv.index('--out') + 1], 'w'))\n")


def test_the_point_file_names_are_written_once_in_the_package():
    """metrics.json, failure.json, attempts.jsonl, payload.json and running.json are
    named by scalesweep.record.pointdir; no other module of the package or its scripts spells
    them (docstrings, comments and help texts may)."""
    names = {"metrics.json", "failure.json", "attempts.jsonl", "payload.json", "running.json"}
    files = [*PACKAGE.rglob("*.py"), *(REPO / "workflow" / "scripts").glob("*.py")]
    found = []
    for path in files:
        if path.name == "pointdir.py":
            continue
        tree = ast.parse(path.read_text())
        docs = {id(n.body[0].value) for n in ast.walk(tree)
                if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef)) and n.body
                and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
        helps = {id(kw.value) for n in ast.walk(tree) if isinstance(n, ast.Call)
                 for kw in n.keywords if kw.arg == "help"}
        for node in ast.walk(tree):
            if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                    and id(node) not in docs | helps):
                hits = [name for name in names if name in node.value and " " not in node.value]
                found += [f"{path.name}:{node.lineno}: {node.value!r}" for _ in hits]
    assert not found, found


def test_nothing_imports_the_old_runpoint_module():
    assert not (PACKAGE / "runpoint.py").exists()
    for path in [*PACKAGE.rglob("*.py"), *(REPO / "workflow" / "scripts").glob("*.py")]:
        assert "scalesweep.runpoint" not in path.read_text(), path


def test_user_name_without_user(monkeypatch):
    import pwd

    from scalesweep.record.hostenv import user_name, with_user

    monkeypatch.delenv("USER", raising=False)
    assert user_name() == pwd.getpwuid(os.getuid()).pw_name
    assert with_user({})["USER"] == user_name()
    assert with_user({"USER": "alice"})["USER"] == "alice"
    monkeypatch.setenv("USER", "bob")
    assert user_name() == "bob"


def test_image_paths_read_the_validated_config():
    from scalesweep.plan.payloads import image_location, point_inputs

    config = validated(tiny_config())
    assert config["containers"]["image"] == "default"  # the schema's default, filled in
    assert config["containers"]["images"]["default"]["builder"] == "charliecloud"
    assert image_location(config, "cnn_ddp", "charliecloud") == "resources/images/default"
    assert point_inputs("cnn_ddp", "charliecloud", config)["image_manifest"] == \
        "resources/images/default.manifest.json"
    assert "image_manifest" not in point_inputs("cnn_ddp", "native-aa", config)
    # an image used in place keeps its path, and is described into a manifest like any
    prebuilt = validated(tiny_config(containers={"images": {"default": {"prebuilt": "/img/x.sqfs",
                                                                        "format": "squashfs"}}}))
    assert image_location(prebuilt, "cnn_ddp", "charliecloud") == "/img/x.sqfs"
    # ... but is no input of its points (campaigns from before manifests keep their runs)
    assert "image_manifest" not in point_inputs("cnn_ddp", "charliecloud", prebuilt)


def test_cnn_arguments_are_the_configs_after_validation(tmp_path):
    from scalesweep.plan.payloads import payload_invocation

    config = validated(tiny_config())
    config["_code_root"] = str(REPO)
    ds = tmp_path / "resources" / "datasets" / "tiny"
    ds.mkdir(parents=True)
    point = SweepPoint("cnn_ddp", "native", 1, 0, 2, 1, 1)
    inv = payload_invocation(point, config["workloads"]["cnn_ddp"], config,
                             {"dataset": str(ds)}, tmp_path / "out")
    args = dict(zip(inv.args[::2], inv.args[1::2]))
    assert (args["--epochs"], args["--batch-size"], args["--seed"]) == ("2", "16", "0")
    assert args["--parallel"] == "ddp" and args["--out"].endswith("/out/payload.json")


def test_runtime_provenance_records_the_version(tmp_path):
    from scalesweep.run.pointlaunch import container_site, runtime_provenance

    assert runtime_provenance("native", container_site({"_site": load_site("local")}, "native", "")) == {
        "runtime": "native", "native": True, "version": None}
    fake = tmp_path / "ch-run"
    fake.write_text("#!/bin/sh\necho 0.38 >&2\n")  # ch-run prints its version on stderr
    fake.chmod(0o755)
    site = replace(container_site({"_site": load_site("local")}, "charliecloud", "/img"),
                   bin=str(fake))
    record = runtime_provenance("charliecloud", site)
    assert record["version"] == "0.38" and record["bin"] == str(fake)
    assert record["runtime"] == "charliecloud" and record["native"] is False


def test_metrics_record_the_runtime_provenance(tmp_path, monkeypatch):
    from scalesweep.run.harness import execute

    for var in [v for v in os.environ if v.startswith("SLURM_")]:
        monkeypatch.delenv(var)
    point = SweepPoint("cnn_ddp", "native", 1, 0, 1, 1, 1)
    launch, out = fake_payload_launch(tmp_path, FAKE_PAYLOAD, point)
    measurement = validated(tiny_config())["measurement"]
    rc = execute(point, launch, str(out / "metrics.json"), str(out / "run.log"),
                 measurement={**measurement, "sample_interval_s": 0.2}, site=load_site("local"))
    assert rc == 0, (out / "run.log").read_text()
    m = json.loads((out / "metrics.json").read_text())
    assert m["runtime_provenance"] == {"runtime": "native", "native": True, "version": None}
    assert m["interference"]["thresholds"] == {"max_outside_cpu_pct": 100.0, "max_steal_pct": 100.0,
                                               "max_stolen_cpu_pct": 100.0}


def test_startup_is_timed_in_the_launchs_environment(monkeypatch):
    """Apptainer's host-MPI mode passes its variables as APPTAINERENV_* on the host: the
    start-up probes get them, as a point's launch does."""
    import scalesweep.run.startup as startup

    seen, traced = [], []
    monkeypatch.setattr(startup, "_time", lambda argv, env: seen.append(env) or 0.01)
    monkeypatch.setattr(startup, "_trace", lambda argv, env, **where: traced.append(
        (argv, env, where)) or {"open": 1})
    monkeypatch.delenv("USER", raising=False)
    config = {"_site": load_site("frontier"), "_code_root": str(REPO)}
    record = startup.measure_startup("apptainer-hostmpi", "/img.sif", config, repeats=1)
    assert seen and all(e["APPTAINERENV_LD_LIBRARY_PATH"] for e in seen)
    # each probe traced once per side after the timings, in the same environment, the
    # container's with its image and binds (issue #44); none where the config says so
    assert len(traced) == 2 * len(startup.PROBES) and all(e == seen[0] for _, e, _ in traced)
    assert traced[1][2] == {"bound": ("/mnt/code", "/mnt/data", "/mnt/out"), "image": "/img.sif"}
    assert record["probes"]["noop"]["fs_ops"]["container"] == {"open": 1}
    traced.clear()
    config["containers"] = {"startup_trace": False}
    startup.measure_startup("apptainer-hostmpi", "/img.sif", config, repeats=1)
    assert traced == []
    assert all(e["OMP_NUM_THREADS"] == "1" and e["USER"] for e in seen)
    assert record["runtime_provenance"]["runtime"] == "apptainer-hostmpi"


def test_interference_thresholds_have_no_second_default():
    """The thresholds and interval come from the config (the schema's defaults), never
    from defaults of their own in the monitor."""
    import inspect

    from scalesweep.measure import interference

    assert not [n for n in vars(interference) if n.startswith("DEFAULT_")]
    for fn, params in ((interference.assess, ("max_outside_cpu_pct", "max_steal_pct")),
                       (interference.Monitor.__init__, ("interval_s",))):
        sig = inspect.signature(fn)
        assert all(sig.parameters[p].default is inspect.Parameter.empty for p in params)
    with pytest.raises(SystemExit):
        interference.main(["watch", "--token", "t", "--out", "x", "--stop-file", "s"])


def test_execute_needs_the_measurement_section(tmp_path):
    from scalesweep.run.harness import execute

    launch = Launch(runtime="native", launcher="local", nodes=1, ranks_per_node=1, threads=1,
                    gpus_per_node=0, payload="scripts/x.py", args=(), code_root=str(tmp_path),
                    data_dir=str(tmp_path), out_dir=str(tmp_path))
    with pytest.raises(TypeError, match="measurement"):
        execute(SweepPoint("cnn_ddp", "native", 1, 0, 1, 1, 1), launch,
                str(tmp_path / "metrics.json"), str(tmp_path / "run.log"), site={})


def test_a_local_point_has_the_time_limit_its_slurm_job_would_have():
    """Outside Slurm a point's time limit is its first Slurm attempt's runtime, read from
    the same facts (workloads.<name>.max_runtime_min, the site's slurm.max_runtime_min cap:
    scalesweep.run.slurm.runtime_min), in seconds; in a Slurm job none (its own limit)."""
    from scalesweep.platform.site import site_of
    from scalesweep.run.payload_process import time_limit_s
    from scalesweep.run.slurm import runtime_min

    config = validated(tiny_config())
    workload, site = config["workloads"]["cnn_ddp"], site_of(config)
    assert time_limit_s(workload, site, environ={}) == 60 * runtime_min(workload, site) == 1800
    assert time_limit_s({**workload, "max_runtime_min": 7}, site, environ={}) == 420
    capped = {**site, "slurm": {**site["slurm"], "max_runtime_min": 5}}
    assert time_limit_s({**workload, "max_runtime_min": 7}, capped, environ={}) == 300
    assert time_limit_s(workload, site, environ={"SLURM_JOB_ID": "42"}) is None


def test_a_series_with_finished_runs_bounds_the_local_time_limit_by_ten_times_the_longest(tmp_path):
    """Where the point's series has finished runs, the local limit is at most 10x the
    longest of their wall times (the plan's estimate), never under 5 min, never over the
    configured limit; their metrics.json are read from the series' directories (every
    repeat and runtime of the arm and geometry), unreadable ones skipped."""
    from scalesweep.platform.site import site_of
    from scalesweep.record.metrics import write_json_atomic
    from scalesweep.run.payload_process import series_walls, time_limit_s

    config = validated(tiny_config())
    workload, site = config["workloads"]["cnn_ddp"], site_of(config)
    geometry = tmp_path / "runs" / "cnn_ddp" / "charliecloud" / "n1-g0-r2-t1"
    for rep, runtime, wall in (("rep0", "native", 41.0), ("rep1", "charliecloud", 38.5),
                               ("rep1", "native", 35.2)):
        write_json_atomic(geometry / rep / runtime / "metrics.json", {"harness_wall_s": wall})
    (geometry / "rep2" / "native").mkdir(parents=True)
    (geometry / "rep2" / "native" / "metrics.json").write_text("{trunc")
    other = tmp_path / "runs" / "cnn_ddp" / "charliecloud" / "n1-g0-r1-t1" / "rep1" / "native"
    write_json_atomic(other / "metrics.json", {"harness_wall_s": 900.0})  # another geometry
    point = geometry / "rep3" / "charliecloud"
    assert sorted(series_walls(point)) == [35.2, 38.5, 41.0]
    assert time_limit_s(workload, site, series_walls(point), environ={}) == 410
    assert time_limit_s(workload, site, [12.0], environ={}) == 300  # the floor
    assert time_limit_s(workload, site, [600.0], environ={}) == 1800  # the configured limit
    assert time_limit_s(workload, site, [], environ={}) == 1800
    assert time_limit_s(workload, site, [41.0], environ={"SLURM_JOB_ID": "1"}) is None


def test_the_rendezvous_port_is_below_the_ephemeral_range_and_free(tmp_path, monkeypatch):
    """A port the kernel would also give to an outgoing connection between the pick and
    the listen is not taken (EADDRINUSE, seen in an A/A campaign): the ranks' rendezvous
    and the LLM server listen below the ephemeral range, on a port nothing listens on;
    under Slurm every rank computes the job's port, below the range too."""
    import socket

    from scalesweep.record import ports
    from scalesweep.run.pointlaunch import rendezvous_env

    default = tmp_path / "default"
    default.write_text("32768\t60999\n")
    monkeypatch.setattr(ports, "EPHEMERAL", str(default))  # Linux's default range
    port = int(rendezvous_env("mpirun")["MASTER_PORT"])
    assert 10000 <= port < 32768
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))  # free
    # a port something listens on is never given
    with socket.socket() as held:
        held.bind(("127.0.0.1", port))
        held.listen()
        assert all(ports.listen_port() != port for _ in range(200))
    # no room below the range (a site's wide ephemeral range): the kernel's pick, which
    # is in that range
    wide = tmp_path / "wide"
    wide.write_text("10001 60999\n")
    assert 10001 <= ports.listen_port(path=str(wide)) <= 60999
    # Slurm: the job's port, the same for every rank, below the range (was 20000 + id %
    # 20000: a third of the ids in the range)
    monkeypatch.setenv("SLURM_JOB_ID", "31999")
    monkeypatch.setattr("scalesweep.run.pointlaunch.first_slurm_host", lambda: "n1")
    env = rendezvous_env("srun")
    assert env["MASTER_PORT"] == str(ports.below_ephemeral(31999)) and int(env["MASTER_PORT"]) < 32768
    assert 10000 <= ports.below_ephemeral(31999, str(wide)) <= 60999
