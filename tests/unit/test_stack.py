"""What a payload process ran on (scalesweep.record.stack), recorded by a real process of
its own, and what differs between two sides' records (scalesweep.analyse.differences)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from conftest import REPO
from scalesweep.analyse.differences import differences_table, library_base, stack_items
from scalesweep.record.stack import (LAUNCH_T_VAR, cpu_list, library_kind, process_stack,
                                     startup_durations)

RECORDER = """\
import json, sys, time
t_script = time.time()
from scalesweep.record.stack import process_stack, startup_record
json.dump({"stack": process_stack(), "startup": startup_record(t_script, time.time(),
           time.time()), "python": sys.version, "exe": sys.executable}, sys.stdout)
"""


def record_in_subprocess(**env) -> dict:
    full = {**os.environ, "PYTHONPATH": str(REPO / "workflow"), **env}
    out = subprocess.run([sys.executable, "-c", RECORDER], env=full, capture_output=True,
                         text=True, check=True, timeout=60)
    return json.loads(out.stdout)


def test_a_process_records_its_libc_python_env_and_binding():
    launched = time.time()
    got = record_in_subprocess(OMP_NUM_THREADS="3", MALLOC_ARENA_MAX="2",
                               HOME_OF_NOTHING="x", OMPI_MCA_btl="self,vader",
                               OMPI_MCA_orte_hnp_uri="1.0;tcp://10.0.0.1:1",
                               **{LAUNCH_T_VAR: repr(launched)})
    stack = got["stack"]
    libc = [lib for lib in stack["libraries"] if lib["kind"] == "libc"]
    assert libc, [lib["name"] for lib in stack["libraries"]]
    assert libc[0]["path"].startswith("/") and libc[0]["version"]
    gnu = os.confstr("CS_GNU_LIBC_VERSION")  # this machine's glibc: the same one
    assert gnu.endswith(libc[0]["version"])
    assert stack["interpreter"]["sys_version"] == got["python"]
    assert stack["interpreter"]["executable"] == got["exe"]
    env = stack["env"]
    assert env["OMP_NUM_THREADS"] == "3" and env["MALLOC_ARENA_MAX"] == "2"
    assert env["OMPI_MCA_btl"] == "self,vader"  # a setting, not the launch's own address
    assert not {"HOME_OF_NOTHING", "PYTHONPATH", "OMPI_MCA_orte_hnp_uri"} & set(env)
    assert stack["cpu_affinity"] == cpu_list(os.sched_getaffinity(0))
    marks = got["startup"]
    assert marks["launch"] == pytest.approx(launched, abs=1e-3)
    # the kernel created the process after the launch mark, give or take a clock tick
    assert marks["launch"] - 0.02 <= marks["process"] <= marks["script"]
    durations = startup_durations(marks)
    assert 0 <= durations["launch_to_script_s"] < 30
    assert durations["launch_to_first_step_s"] >= durations["launch_to_script_s"]


def test_without_a_launch_mark_the_launch_intervals_are_none():
    env = {k: v for k, v in os.environ.items() if k != LAUNCH_T_VAR}
    got = subprocess.run([sys.executable, "-c", RECORDER], capture_output=True, text=True,
                         env={**env, "PYTHONPATH": str(REPO / "workflow")}, check=True)
    marks = json.loads(got.stdout)["startup"]
    assert marks["launch"] is None and marks["script"] is not None
    durations = startup_durations(marks)
    assert durations["launch_to_script_s"] is None
    assert durations["script_to_imports_s"] >= 0


def test_another_process_is_read_from_its_maps_and_environ():
    proc = subprocess.Popen(["sleep", "30"], env={"OMP_NUM_THREADS": "7", "PATH": "/usr/bin:/bin"})
    try:
        time.sleep(0.3)
        stack = process_stack(proc.pid)
    finally:
        proc.kill()
        proc.wait()
    assert stack["pid"] == proc.pid and "interpreter" not in stack
    assert {lib["kind"] for lib in stack["libraries"]} >= {"libc", "loader"}
    assert stack["env"] == {"OMP_NUM_THREADS": "7"}


@pytest.mark.parametrize("name, kind", [
    ("libc.so.6", "libc"), ("libc-2.31.so", "libc"), ("ld-musl-x86_64.so.1", "libc"),
    ("libopenblasp-r0.3.21.so", "blas"), ("libmkl_rt.so.2", "blas"),
    ("libscipy_openblas64_-32a4b2a6.so", "blas"), ("libgomp.so.1", "openmp"),
    ("libmpi.so.40.30.4", "mpi"), ("libtorch_cpu.so", "torch"), ("libllama.so", "llama.cpp"),
    ("libggml-base.so", "llama.cpp"), ("libpython3.11.so.1.0", "python"),
    ("libz.so.1.2.13", "other")])
def test_library_kinds(name, kind):
    assert library_kind(name) == kind


def test_library_names_without_versions():
    assert library_base("libopenblasp-r0.3.21.so") == "libopenblasp"
    assert library_base("libgfortran-040039e1-0352e75f.so.5.0.0") == "libgfortran"
    assert library_base("ld-linux-x86-64.so.2") == "ld-linux-x86-64"
    assert library_base("libc-2.31.so") == library_base("libc.so.6") == "libc"


# --- differences ---------------------------------------------------------------------


def stack(python="3.11.7", libc="2.36", blas=("libopenblasp-r0.3.21.so", "0.3.21"),
          env=None, cpus=("0", "1")):
    libs = [{"name": "libc.so.6", "kind": "libc", "path": "/lib/libc.so.6", "version": libc},
            {"name": "libtorch_cpu.so", "kind": "torch", "path": "/venv/libtorch_cpu.so",
             "version": "2.13.0+cpu"}]
    if blas:
        libs.append({"name": blas[0], "kind": "blas", "path": f"/x/{blas[0]}",
                     "version": blas[1]})
    return [{"rank": r, "threads": 1, "stack": {
        "interpreter": {"version": python, "implementation": "CPython",
                        "build": "main", "compiler": "GCC 12.2.0", "executable": "/p"},
        "builds": {"torch": {"version": "2.13.0+cpu", "blas": "mkl"}},
        "libraries": libs, "env": env if env is not None else {"OMP_NUM_THREADS": "1"},
        "cpu_affinity": cpu}} for r, cpu in enumerate(cpus)]


def run(runtime, per_rank, repeat=1, arm="charliecloud", **extra):
    row = {"workload": "cnn_ddp", "arm": arm, "runtime": runtime, "nodes": 1, "gpus": 0,
           "ranks": len(per_rank or [0]), "threads": 1, "repeat": repeat, **extra}
    return ({"per_rank": per_rank} if per_rank is not None else {}), row


def test_only_what_differs_is_listed_with_the_count_of_the_rest():
    native = stack()
    container = stack(python="3.11.2", blas=None,
                      env={"OMP_NUM_THREADS": "1", "LD_LIBRARY_PATH": "/opt/mpi/lib"},
                      cpus=("0", "0-1"))
    table = differences_table([run("native", native), run("charliecloud", container),
                               run("native", native, 2), run("charliecloud", container, 2)])
    items = dict(zip(table["item"], zip(table["native"], table["container"])))
    assert items == {
        "python version": ("3.11.7", "3.11.2"),
        "blas: libopenblasp": ("0.3.21", "not loaded"),
        "env LD_LIBRARY_PATH": ("unset", "/opt/mpi/lib"),
        "rank 1 CPU binding": ("1", "0-1"),
    }
    assert set(table["category"]) == {"interpreter", "library", "environment", "cpu binding"}
    every = len(stack_items({"per_rank": native}) | stack_items({"per_rank": container}))
    assert (table["n_identical"] == every - 4).all() and (table["n_different"] == 4).all()
    assert (table["n_native_runs"] == 2).all() and (table["n_container_runs"] == 2).all()


def test_values_that_vary_within_a_side_are_all_shown():
    table = differences_table([run("native", stack()), run("native", stack(libc="2.31"), 2),
                               run("charliecloud", stack())])
    got = table.set_index("item").loc["libc: libc"]
    assert got["native"] == "2.31 | 2.36" and got["container"] == "2.36"


def test_nothing_differs_and_not_recorded_are_said():
    same = differences_table([run("native", stack()), run("charliecloud", stack())])
    assert len(same) == 1 and same.iloc[0]["note"].startswith("nothing recorded differs (")
    assert same.iloc[0]["n_different"] == 0 and same.iloc[0]["n_identical"] > 5
    old = differences_table([run("native", None), run("charliecloud", None)])
    assert len(old) == 1 and old.iloc[0]["note"].startswith("not recorded")


def test_each_comparison_and_mode_apart():
    records = [run("native", stack()), run("charliecloud", stack(python="3.11.2")),
               run("native", stack(), arm="podman"),
               run("podman", stack(), arm="podman", mode="overlay")]
    table = differences_table(records)
    assert set(zip(table["runtime"], table["mode"])) == {
        ("charliecloud", ""), ("podman", "overlay")}
    assert table.set_index("runtime").loc["charliecloud", "item"] == "python version"
