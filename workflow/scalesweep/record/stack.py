"""What a payload process ran on and how long it took to start: the ``stack`` and the
``startup`` of a rank's record (``per_rank[]`` of a CNN run; ``per_rank`` and
``server_stack`` of an LLM run).

Standard library only: the payloads call it inside containers, where only their own
dependencies exist. Nothing here imports a library to ask for its version: what the
process has loaded is read from ``/proc/<pid>/maps`` and from the modules already in
``sys.modules``, so recording changes nothing that is measured. Called at the end of a
run (every library the payload used is mapped by then), never inside the timed loop.

**stack** (:func:`process_stack`):

- ``interpreter`` (this process only): ``sys.version``, implementation, version, build
  (``platform.python_build``), compiler, executable, ``sys.prefix``;
- ``libraries``: every shared library mapped (``/proc/<pid>/maps``, in address order;
  Python extension modules counted in ``extension_modules``, not listed), each with its
  ``kind`` (``LIBRARY_KINDS``: libc, blas, openmp, mpi, torch, llama.cpp, python, ...),
  its path as the process sees it (inside a container: the image's) and its ``version``
  where one can be derived: glibc's from ``confstr`` (this process) or its file name, a
  library inside ``site-packages/<pkg>/`` (or ``<pkg>.libs/``) the package's version from
  its ``.dist-info``, else the
  version in the file name (``libopenblasp-r0.3.21.so``, ``libmpi.so.40.30.4``);
- ``builds`` (this process only): the versions of the modules the payload imported
  (torch, numpy, mpi4py, llama_cpp) and torch's build (its BLAS, OpenMP, CPU capability;
  MKL is linked into libtorch and never shows as a library of its own);
- ``env``: the variables that change how the payload behaves (``BEHAVIOUR_ENV``: threads,
  allocator, library paths, Python, torch, MPI, ...), as the process sees them;
- ``cpu_affinity``: the CPUs the process may run on (``sched_getaffinity``), as a list
  ("0-1,4").

**startup** (:func:`startup_record`): wall-clock times (``time.time()``, seconds since the
epoch) of ``launch`` (the harness, just before it started the launcher: ``LAUNCH_T_VAR``
in the environment; absent when the payload was not started by the harness),
``process`` (when the kernel created this process: ``/proc/self/stat``'s start time, to
the clock tick; under ``ch-run`` or a launcher that execs the payload, the fork before
the exec), ``script`` (the payload script's first statement), ``imports`` (its heavy
imports done) and ``first_step`` (its first timed unit of work begins: a training step,
an LLM warm-up request). :func:`startup_durations` turns them into the intervals the
decomposition reads; on several nodes ``launch`` is the harness's clock, the others each
node's.
"""

from __future__ import annotations

import os
import platform
import re
import sys
import time
from typing import Any

LAUNCH_T_VAR = "SCALESWEEP_LAUNCH_T"
STARTUP_MARKS = ("launch", "process", "script", "imports", "first_step")

# environment variables that change what a payload does or how fast (exact names, and
# prefixes ending in "_"); run-specific ones (ranks, ports, tokens) are left out
BEHAVIOUR_ENV = ("OMP_", "KMP_", "GOMP_", "MKL_", "OPENBLAS_", "GOTO_", "BLIS_", "VECLIB_",
                 "NUMEXPR_", "MALLOC_", "GLIBC_TUNABLES", "LD_LIBRARY_PATH", "LD_PRELOAD",
                 "LD_BIND_NOW", "PYTHON", "TORCH_", "PYTORCH_", "GLOO_", "NCCL_", "OMPI_MCA_",
                 "UCX_", "FI_", "MPICH_", "I_MPI_", "CUDA_VISIBLE_DEVICES",
                 "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "LLAMA_", "GGML_",
                 # the environment modules loaded (Lmod and Environment Modules both
                 # set it): a site's point jobs load them with --sdm env-modules
                 "LOADEDMODULES")
# what a launcher sets for one launch (its job id, rank, addresses, session directory) and
# PYTHONPATH (the repository's path, different by design in and out of an image): never
# the same twice, so never compared
RUN_SPECIFIC_ENV = ("PYTHONPATH", "OMPI_MCA_orte_", "OMPI_MCA_ess", "OMPI_MCA_pmix",
                    "OMPI_MCA_initial_wdir", "OMPI_MCA_shmem_RUNTIME_QUERY_hint")

# kind of a library by its file name (the first that matches)
LIBRARY_KINDS = (
    ("libc", re.compile(r"^(libc[.-]|libc\.so|ld-musl|libc\.musl)")),
    ("loader", re.compile(r"^ld-linux")),
    ("libm", re.compile(r"^libm[.-]")),
    ("blas", re.compile(r"(openblas|^libmkl|^libblas|^libcblas|^libflexiblas|^libblis"
                        r"|^liblapack|^libopenblas)")),
    ("openmp", re.compile(r"^(libgomp|libiomp|libomp)")),
    ("mpi", re.compile(r"^(libmpi|libmpich|libopen-pal|libopen-rte|libpmix|libfabric|libucp)")),
    ("torch", re.compile(r"^(libtorch|libc10|libshm)")),
    ("llama.cpp", re.compile(r"^(libllama|libggml|libllava|libmtmd)")),
    ("python", re.compile(r"^libpython")),
    ("c++", re.compile(r"^(libstdc\+\+|libgcc_s|libc\+\+)")),
)
_EXTENSION = re.compile(r"\.(cpython-[^/]*|abi3|pypy[^/]*)\.so$")
_FILE_VERSION = re.compile(r"(?:-r?|\.so\.)(\d+(?:\.\d+)+)(?:\.so)?$")


def library_kind(name: str) -> str:
    for kind, pattern in LIBRARY_KINDS:
        if pattern.search(name):
            return kind
    return "other"


def _dist_version(path: str, cache: dict) -> str | None:
    """The version of the Python distribution whose ``site-packages/<pkg>`` (or
    ``<pkg>.libs``) directory holds ``path``, from its ``<pkg>-<version>.dist-info``."""
    match = re.search(r"^(.*/(?:site|dist)-packages)/([^/]+)/", path)
    if not match:
        return None
    site, top = match[1], match[2].removesuffix(".libs").lower().replace("-", "_")
    if site not in cache:
        try:
            cache[site] = [d for d in os.listdir(site) if d.endswith(".dist-info")]
        except OSError:
            cache[site] = []
    for entry in cache[site]:
        name, _, version = entry.removesuffix(".dist-info").partition("-")
        if name.lower().replace("-", "_") == top:
            return version
    return None


def _libc_version(pid: str) -> str | None:
    if pid != "self":
        return None
    try:
        text = os.confstr("CS_GNU_LIBC_VERSION") or ""
    except (AttributeError, ValueError, OSError):
        return None
    return text.split()[-1] if text.startswith("glibc") else None


def library_version(path: str, kind: str, pid: str = "self", cache: dict | None = None
                    ) -> str | None:
    """The version of a mapped library where one can be derived (see the module's text)."""
    cache = {} if cache is None else cache
    name = os.path.basename(path)
    if kind == "libc":
        found = _FILE_VERSION.search(name)
        return found[1] if found and name.startswith("libc-") else _libc_version(pid)
    version = _dist_version(path, cache)
    if version:
        return version
    found = _FILE_VERSION.search(name)
    return found[1] if found else None


def libraries(pid: str = "self") -> tuple[list[dict[str, Any]], int]:
    """(the shared libraries mapped by process ``pid``, each {name, kind, path, version},
    in address order; the number of Python extension modules mapped). ([], 0) where its maps
    cannot be read."""
    out: list[dict[str, Any]] = []
    seen, extensions, cache = set(), set(), {}
    try:
        with open(f"/proc/{pid}/maps") as fh:
            lines = fh.readlines()
    except OSError:
        return [], 0
    for line in lines:
        parts = line.split(None, 5)
        if len(parts) < 6:
            continue
        path = parts[5].strip().removesuffix(" (deleted)")
        name = os.path.basename(path)
        if not path.startswith("/") or ".so" not in name or path in seen:
            continue
        seen.add(path)
        if _EXTENSION.search(name):
            extensions.add(path)
            continue
        kind = library_kind(name)
        out.append({"name": name, "kind": kind, "path": path,
                    "version": library_version(path, kind, pid, cache)})
    return out, len(extensions)


def behaviour_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The variables of ``environ`` (this process's by default) that ``BEHAVIOUR_ENV``
    names, sorted."""
    environ = os.environ if environ is None else environ
    return {k: environ[k] for k in sorted(environ)
            if k.startswith(BEHAVIOUR_ENV) and not k.startswith(RUN_SPECIFIC_ENV)}


def _environ_of(pid: str) -> dict[str, str] | None:
    if pid == "self":
        return dict(os.environ)
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    pairs = (item.decode(errors="replace").partition("=") for item in data.split(b"\0") if item)
    return {k: v for k, _, v in pairs}


def cpu_list(cpus) -> str:
    """CPUs as a list: {0, 1, 2, 4} -> "0-2,4"."""
    cpus, runs = sorted(cpus), []
    for cpu in cpus:
        if runs and cpu == runs[-1][1] + 1:
            runs[-1][1] = cpu
        else:
            runs.append([cpu, cpu])
    return ",".join(f"{a}" if a == b else f"{a}-{b}" for a, b in runs)


def cpu_affinity(pid: str = "self") -> str | None:
    try:
        return cpu_list(os.sched_getaffinity(0 if pid == "self" else int(pid)))
    except (AttributeError, OSError, ValueError):
        return None


# a .pyc's flags (PEP 552): bit 0 hash-based, bit 1 check the source against the hash
PYC_MODES = {0: "timestamp", 1: "unchecked hash", 3: "checked hash"}
# whose byte code is recorded: the payload's first imported package, else the standard
# library's (the bytecode item of a run's stack)
BYTECODE_OF = ("torch", "numpy", "llama_cpp", "json")


def bytecode_mode(modules: tuple[str, ...] = BYTECODE_OF) -> str | None:
    """How the byte code of the first imported module of ``modules`` is validated, read
    from its cached .pyc's header (``timestamp``, ``checked hash``: each import reads and
    hashes the source too, ``unchecked hash``), with the module: ``checked hash (torch)``;
    ``no .pyc (torch)`` where it has none; None where none of them is imported."""
    for name in modules:
        module = sys.modules.get(name)
        if module is None:
            continue
        spec = getattr(module, "__spec__", None)
        cached = getattr(spec, "cached", None)
        try:
            with open(cached, "rb") as f:
                header = f.read(8)
        except (OSError, TypeError):
            return f"no .pyc ({name})"
        if len(header) < 8:
            return f"no .pyc ({name})"
        flags = int.from_bytes(header[4:8], "little")
        return f"{PYC_MODES.get(flags, f'flags {flags}')} ({name})"
    return None


def interpreter() -> dict[str, Any]:
    build = platform.python_build()
    return {"version": platform.python_version(), "sys_version": sys.version,
            "implementation": platform.python_implementation(),
            "build": f"{build[0]} ({build[1]})", "compiler": platform.python_compiler(),
            "executable": sys.executable, "prefix": sys.prefix,
            "bytecode": bytecode_mode()}


def _torch_build(torch) -> dict[str, Any]:
    out: dict[str, Any] = {"version": getattr(torch, "__version__", None)}
    try:
        shown = torch.__config__.show()
    except Exception:  # noqa: BLE001  (a torch without __config__: its version only)
        return out
    blas = re.search(r"BLAS_INFO=([^,\s]+)", shown)
    out["blas"] = blas[1] if blas else None
    for key, pattern in (("mkl", r"Math Kernel Library Version ([^\n]+?)(?: for|\n)"),
                         ("openmp", r"OpenMP (\d+)"), ("cpu_capability",
                                                       r"CPU capability usage: (\S+)"),
                         ("compiler", r"\n\s*-\s*(GCC [\d.]+|clang[^\n]*)")):
        found = re.search(pattern, shown)
        out[key] = found[1].strip() if found else None
    return out


def builds() -> dict[str, Any]:
    """The versions of the payload's libraries it imported (never imported here)."""
    out: dict[str, Any] = {}
    for name in ("numpy", "mpi4py", "llama_cpp"):
        module = sys.modules.get(name)
        if module is not None:
            out[name] = {"version": getattr(module, "__version__", None)}
    if sys.modules.get("torch") is not None:
        out["torch"] = _torch_build(sys.modules["torch"])
    return out


def process_stack(pid: int | str = "self") -> dict[str, Any]:
    """The ``stack`` of process ``pid`` (this one by default; the interpreter and the
    builds only for this one); never raises for what it cannot read (null instead)."""
    pid = str(pid)
    libs, extensions = libraries(pid)
    environ = _environ_of(pid)
    stack: dict[str, Any] = {
        "pid": os.getpid() if pid == "self" else int(pid),
        "libraries": libs,
        "extension_modules": extensions,
        "env": behaviour_env(environ) if environ is not None else None,
        "cpu_affinity": cpu_affinity(pid),
    }
    if pid == "self":
        stack["interpreter"] = interpreter()
        stack["builds"] = builds()
    return stack


# ----------------------------------------------------------------------------- startup


def process_start_time(pid: str = "self") -> float | None:
    """When the kernel created process ``pid``, in seconds since the epoch (to the clock
    tick: /proc/<pid>/stat's start time against CLOCK_BOOTTIME); None where unreadable."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rpartition(")")[2].split()
        ticks = int(fields[19])  # field 22 of stat; 3 before the ")"-split remainder
        boot_now = time.clock_gettime(time.CLOCK_BOOTTIME)
        now = time.time()
        return now - (boot_now - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError, AttributeError):
        return None


def launch_time(environ: dict[str, str] | None = None) -> float | None:
    value = (os.environ if environ is None else environ).get(LAUNCH_T_VAR)
    try:
        return float(value) if value else None
    except ValueError:
        return None


def startup_record(script_t: float | None, imports_t: float | None,
                   first_step_t: float | None) -> dict[str, Any]:
    """The ``startup`` of this rank (see the module's text), marks rounded to 1 ms."""
    marks = {"launch": launch_time(), "process": process_start_time(), "script": script_t,
             "imports": imports_t, "first_step": first_step_t}
    return {k: (round(v, 3) if v is not None else None) for k, v in marks.items()}


# the intervals of a rank's start-up: name -> (from mark, to mark)
STARTUP_INTERVALS = {
    "launch_to_process_s": ("launch", "process"),  # the launcher (mpirun, srun) forks it
    "launch_to_script_s": ("launch", "script"),  # + the runtime (namespaces, mounts), Python
    "script_to_imports_s": ("script", "imports"),  # importing torch & co from the image
    "imports_to_first_step_s": ("imports", "first_step"),  # rendezvous, data, model
    "launch_to_first_step_s": ("launch", "first_step"),  # all of it
}


def startup_durations(startup: dict[str, Any] | None) -> dict[str, float | None]:
    """The intervals of ``STARTUP_INTERVALS`` of one rank's ``startup`` (None where a mark
    is missing)."""
    startup = startup or {}
    out = {}
    for name, (a, b) in STARTUP_INTERVALS.items():
        t0, t1 = startup.get(a), startup.get(b)
        ok = all(isinstance(t, (int, float)) and not isinstance(t, bool) for t in (t0, t1))
        out[name] = t1 - t0 if ok else None
    return out
