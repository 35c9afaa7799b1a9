"""Shared fixtures: the repository root, a tiny workflow config, and a workflow runner."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Iterable

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "workflow"))

# The test layers, one folder each (docs/testing.md), and the marker each folder's tests
# get: `-m` selects a layer by it. The helpers a split module shares with its other part
# (tests/integration/test_fits_real.py uses tests/unit/test_fits.py's) are imported by
# module name, so every layer folder is on sys.path (pytest itself prepends only the
# folders it collects from); test modules' basenames are unique across the folders.
LAYERS = {"unit": "unit", "workflow": "workflow", "integration": "integration",
          "slurm": "slurm", "quality": "quiet"}
# the layer markers a test may carry in each folder (besides its folder's own): a real
# run in a container or on the Slurm cluster, a measurement-quality test of a real run
ALLOWED = {"unit": set(), "workflow": set(), "integration": {"container"},
           "slurm": {"integration", "container"}, "quality": {"integration"}}
LAYER_MARKERS = {*LAYERS.values(), "container"}
TESTS = Path(__file__).resolve().parent
for _layer in LAYERS:
    if str(TESTS / _layer) not in sys.path:
        sys.path.insert(1, str(TESTS / _layer))

from slurm_fixtures import slurm_cluster  # noqa: E402,F401  (session fixture)

SNAKEMAKE = str(Path(sys.executable).parent / "snakemake")


def tiny_config(**overrides) -> dict:
    """A few seconds of real training: synthetic 2-class images (8 per class: 12 train,
    4 held out; one step per epoch), 2 epochs, on the site ``local`` (2 cores, no GPU,
    mpirun) unless ``site=`` names another (``write_site``).
    Its site is loaded as validation loads it (``config["_site"]``), so library functions
    take it as it is; ``campaign`` writes it without that key."""
    config = {
        "site": "local",
        "sweep": {"runtimes": ["native"], "nodes": [1], "ranks_per_node": [1, 2],
                  "threads_per_rank": [1], "repeats": 1, "baseline": 1},
        "datasets": {"tiny": {"source": "synthetic", "classes": ["a", "b"],
                              "images_per_class": 8, "image_size": 64}},
        "workloads": {"cnn_ddp": {"payload": "cnn", "parallel": "ddp", "dataset": "tiny",
                                  "epochs": 2, "batch_size": 16}},
        # a fixed number of repeats: tests that exercise adaptive repeats switch it on.
        # No run is flagged disturbed by what else this machine runs (the Slurm test
        # cluster's daemons, another test's cleanup): the tests of interference set
        # their own thresholds (tests/unit/test_interference.py, test_status_disturbed.py).
        # No warm-up block (the schema's default is 1): tests count their runs; those of
        # the warm-up set it (tests/unit/test_warmup.py)
        "measurement": {"adaptive": False, "max_outside_cpu_pct": 100, "max_steal_pct": 100,
                        "max_stolen_cpu_pct": 100, "warmup_blocks": 0},
    }
    for key, value in overrides.items():
        config[key] = value
    return with_site(config)


def with_site(config: dict) -> dict:
    """``config`` with the site it names loaded into ``config["_site"]`` (as
    scalesweep.plan.config.check_config does)."""
    from scalesweep.plan.config import REPO as CODE
    from scalesweep.platform.site import SITE_KEY, load_site

    config[SITE_KEY] = load_site(config.get("site", "local"), base=CODE)
    return config


def write_site(directory: Path, name: str = "test", extends: str | None = "local",
               **facts) -> str:
    """A site file in ``directory`` (``extends`` another site, then these facts merged over
    it, e.g. ``node={"device": "rocm", "gpus": 8}``); its path, for ``site:``."""
    site = {"name": name, "description": f"test site {name}"}
    if extends:
        site["extends"] = extends
    site.update(facts)
    path = Path(directory) / f"{name}.site.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(site))
    return str(path)


def config_text(config: dict) -> str:
    """A config as a campaign's config.yaml: without the loaded site (validation loads it)."""
    return yaml.safe_dump({k: v for k, v in config.items() if k != "_site"})


def scalesweep_cli(*args) -> subprocess.CompletedProcess:
    """``scalesweep ARGS`` run in this process (``scalesweep.cli.main``, the console
    script's own function), its output and exit status as a subprocess's: a process each
    costs ~2 s of imports (pandas, scipy); tests/unit/test_cli_analysis.py's
    test_the_console_script_runs starts the real one."""
    import contextlib
    import io

    from scalesweep.cli import main

    out, err = io.StringIO(), io.StringIO()
    argv = [*map(str, args)]
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse's usage errors and --help
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    return subprocess.CompletedProcess([sys.executable, "-m", "scalesweep", *argv], code,
                                       out.getvalue(), err.getvalue())


def run_snakemake(workdir: Path, *args: str, check: bool = True, timeout: int = 900,
                  snakefile: Path = REPO / "Snakefile") -> subprocess.CompletedProcess:
    """Run the real workflow in ``workdir`` (which holds config/config.yaml)."""
    env = dict(os.environ)
    env.setdefault("USER", "root")
    proc = subprocess.run(
        [SNAKEMAKE, "-s", str(snakefile), "--directory", str(workdir), *args],
        cwd=workdir, capture_output=True, text=True, timeout=timeout, env=env,
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"snakemake {' '.join(args)} failed ({proc.returncode}):\n"
                             f"{proc.stdout[-4000:]}\n{proc.stderr[-8000:]}")
    return proc


@pytest.fixture(scope="session")
def small_finished(tmp_path_factory) -> Path:
    """One finished small campaign for the whole test run (tiny_config, 1 epoch, 1
    repeat: the native 1- and 2-rank points), run with profiles/local. Shared by several
    modules (test_rerun, test_faults, test_fault_tolerance), and by every pytest-xdist
    worker of the run (the first to need it runs it under a file lock, the others wait
    and take it): copy it (``shutil.copytree(small_finished, dest, symlinks=True)``),
    never change it."""
    if not have("mpirun"):
        pytest.skip("mpirun not installed (apt-get install openmpi-bin)")
    # the run's base temporary directory, which all xdist workers share (each worker's
    # own base is a folder in it), or this process's own without xdist
    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent
    workdir = shared / "small-finished"
    done = shared / "small-finished.done"
    import fcntl

    with open(shared / "small-finished.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not done.is_file():
            shutil.rmtree(workdir, ignore_errors=True)  # a run that failed part-way
            config = tiny_config()
            config["workloads"]["cnn_ddp"]["epochs"] = 1
            config["sweep"]["repeats"] = 1
            (workdir / "config").mkdir(parents=True)
            (workdir / "config" / "config.yaml").write_text(config_text(config))
            run_snakemake(workdir, "--profile", str(REPO / "profiles" / "local"))
            for ranks in (1, 2):
                assert (workdir / f"results/runs/cnn_ddp/native/n1-g0-r{ranks}-t1/rep1/native/metrics.json").is_file()
            done.write_text("")
    return workdir


@pytest.fixture
def campaign(tmp_path: Path):
    """A campaign directory with a config writer: campaign(config_dict) -> Path."""
    def make(config: dict) -> Path:
        (tmp_path / "config").mkdir(exist_ok=True)
        (tmp_path / "config" / "config.yaml").write_text(config_text(config))
        return tmp_path
    return make


def payload_pids(marker: str, payload: str = "train_cnn.py") -> list[int]:
    """Processes of a running payload whose command line contains ``marker`` (a point path)."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if payload in cmd and marker in cmd:
            pids.append(int(proc.name))
    return pids


def fake_payload_launch(tmp_path: Path, source: str, point, *args: str, name: str = "fake.py"):
    """A native one-process launch of a stand-in payload (``source``, written to
    ``tmp_path/code/scripts/<name>``) for ``point``, called with ``--out <its point
    directory>/payload.json`` and ``args``: for tests of the harness around a payload
    (``scalesweep.run.harness.execute``). Returns (launch, the point directory)."""
    from scalesweep.platform.launch import Launch

    code = tmp_path / "code"
    (code / "scripts").mkdir(parents=True, exist_ok=True)
    (code / "scripts" / name).write_text(source)
    out = tmp_path / "runs" / point.path
    launch = Launch(runtime="native", launcher="local", nodes=1, ranks_per_node=1, threads=1,
                    gpus_per_node=0, payload=f"scripts/{name}",
                    args=("--out", str(out / "payload.json"), *args), code_root=str(code),
                    data_dir=str(tmp_path), out_dir=str(out), host_python=sys.executable)
    return launch, out


def have(binary: str) -> bool:
    return shutil.which(binary) is not None


def run_files_digest(workdir: Path, skip: Iterable[str] = ()) -> dict[str, str]:
    """sha256 of every file under results/runs/ except below the point paths in ``skip``
    (e.g. 'cnn_ddp/native/n1-g0-r1-t1/rep1/native'): what must stay byte-identical when only
    those points are measured again."""
    import hashlib

    runs = workdir / "results" / "runs"
    skip = tuple(str(runs / s) + os.sep for s in skip)
    return {str(p.relative_to(runs)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(runs.rglob("*")) if p.is_file() and not str(p).startswith(skip)}


def measured_by(output: str) -> list[str]:
    """Point paths of the run_point jobs in a Snakemake log (its stdout/stderr or a
    .snakemake/log file), from each job's metrics.json output line."""
    import re

    # each job's header block ("rule run_point:" or "localrule run_point:"), not the
    # "Error in rule run_point:" block that repeats a failed job's output
    return sorted(re.findall(r"^(?:local)?rule run_point:\n(?:[ \t]+.*\n)*?[ \t]+output: "
                             r"results/runs/(\S+)/metrics\.json", output, re.M))


@pytest.hookimpl(tryfirst=True)  # before -m deselects by the markers added here
def pytest_collection_modifyitems(config, items):
    """Each test gets its folder's layer marker; a test outside the layer folders, or one
    whose own markers say another layer (``integration`` in unit/, ``slurm`` outside
    slurm/, ``quiet`` outside quality/, ...), stops the collection."""
    wrong = []
    for item in items:
        folder = _folder(item)
        if not folder:  # a test given from elsewhere (not under tests/): no layer
            continue
        if folder not in LAYERS:
            wrong.append(f"{item.nodeid}: not in a layer folder ({', '.join(LAYERS)})")
            continue
        own = {m.name for m in item.iter_markers()} & LAYER_MARKERS
        extra = own - {LAYERS[folder]} - ALLOWED[folder]
        if extra:
            wrong.append(f"{item.nodeid}: marked {', '.join(sorted(extra))}, which "
                         f"contradicts its folder tests/{folder}/ (marker {LAYERS[folder]})")
        item.add_marker(LAYERS[folder])
    if wrong:
        raise pytest.UsageError("tests in the wrong layer (docs/testing.md):\n  "
                                + "\n  ".join(wrong))
    # the longest work first, so that the workers finish together: the Slurm tests
    # (mostly waiting on Slurm), then the integration, workflow and unit tests
    # (sort is stable: each module's tests keep their order)
    order = {layer: i for i, layer in enumerate(("slurm", "integration", "quality",
                                                 "workflow", "unit"))}
    items.sort(key=lambda item: order.get(_folder(item), len(order)))


# Below the Slurm tests' priority on pytest-xdist workers: the nice value of every other test.
OTHER_TESTS_NICE = 10


def pytest_runtest_setup(item):
    """On a pytest-xdist worker (tools/test.sh), every test but the Slurm ones runs at nice
    10 from its first test on. The Slurm tests are the run's longest chain, and most of
    it is Slurm jobs (slurmd's processes, started at the default priority by the Slurm
    worker's session fixture) competing for the 2 cores with the other workers' tests,
    which have slack: in CI the same 1-epoch point took 24-44 s under Slurm against 11-16 s
    on a quiet machine. A niced worker stays niced; the Slurm tests, one scope for
    LayerScheduling below and the first in collection order, go out first, so their worker
    starts with them. A plain pytest run (no worker) changes nothing."""
    if os.environ.get("PYTEST_XDIST_WORKER") and _folder(item) != "slurm":
        current = os.nice(0)
        if current < OTHER_TESTS_NICE:
            os.nice(OTHER_TESTS_NICE - current)


def pytest_xdist_make_scheduler(config, log):
    """pytest-xdist's ``--dist loadfile`` (tools/test.sh), but every test of tests/slurm/ on
    one worker: they share the session's Slurm cluster (``slurm_fixtures.slurm_cluster``,
    which one worker starts and stops). A module's tests stay on one worker, as they share
    its module fixtures; modules go out in collection order (``--no-loadscope-reorder``:
    ``pytest_collection_modifyitems`` puts the longest layers first). Not xdist's
    ``loadgroup`` with ``xdist_group`` marks: pytest-xdist 3.8.0 groups by a suffix it
    writes to ``item._nodeid``, which pytest 9.2's nodes no longer read (``Node.nodeid``
    is ``str(item._id)``), so every test went out alone."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class LayerScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return "tests/slurm/" if module.startswith("tests/slurm/") else module

    return LayerScheduling(config, log)


def _folder(item) -> str:
    """The folder under tests/ that holds ``item`` ("" for a test from elsewhere)."""
    try:
        return Path(item.path).resolve().relative_to(TESTS).parts[0]
    except ValueError:
        return ""
