"""Container start-up cost, measured apart from the workloads: the same no-op, python
start and torch import, N times natively and N times through the container runtime.

Then, after the timings (a traced start is slower, and never timed), each probe once more
on each side under strace (``scalesweep.measure.fsops``): its file-system operations per
start (opens, stats, reads and bytes, mmaps, distinct files; on the image's root, the
image's host path, the bound host directories, /proc-/sys-/dev), ``probes.<name>.fs_ops``
(issue #44): what a start asks of the file system, whatever the machine's speed. Where
strace is missing, ``fs_ops`` says so.

Both sides run in the environment a point's launch gets from the host (``launch_env``:
the variables the runtime needs, e.g. Apptainer's ``APPTAINERENV_*``), with ``$USER``.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from scalesweep.measure import fsops
from scalesweep.platform.launch import Launch, container_prefix, launch_env
from scalesweep.platform.runtimes.base import MOUNT_CODE, MOUNT_DATA, MOUNT_OUT
from scalesweep.platform.site import site_of
from scalesweep.record.hostenv import with_user
from scalesweep.record.metrics import now_iso
from scalesweep.run.pointlaunch import container_site, runtime_provenance

PROBES = {
    "noop": ["/bin/true"],
    "python": ["{python}", "-c", "pass"],
    "import_torch": ["{python}", "-c", "import torch"],
}


def _time(argv: list[str], env: dict) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, check=True, env=env, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def _trace(argv: list[str], env: dict, **where) -> dict:
    """One start of ``argv`` traced (``measure.fsops.trace``), in the same environment."""
    return fsops.trace(argv, env, **where)


def _summary(xs: list[float]) -> dict:
    return {"n": len(xs), "median_s": statistics.median(xs), "mean_s": statistics.fmean(xs),
            "min_s": min(xs), "max_s": max(xs), "samples_s": xs}


def measure_startup(runtime: str, image: str, config: dict, repeats: int = 10,
                    manifest: str | None = None) -> dict:
    code = str(Path(config["_code_root"]).resolve())
    site = container_site(config, runtime, image)
    launch = Launch(runtime=runtime, launcher="local", nodes=1, ranks_per_node=1, threads=1,
                    gpus_per_node=0, payload="", args=(), code_root=code, data_dir=code,
                    out_dir=code, site=site)
    prefix = container_prefix(launch)
    env = with_user(dict(os.environ))
    env.update(launch_env(launch))
    native_python = site_of(config)["launch"]["python"] or sys.executable
    result: dict = {"runtime": runtime, "image": image, "repeats": repeats, "start": now_iso(),
                    "runtime_provenance": runtime_provenance(runtime, site), "probes": {}}
    for name, argv in PROBES.items():
        native = [a.replace("{python}", native_python) for a in argv]
        inside = prefix + [a.replace("{python}", site.python) for a in argv]
        _time(inside, env)  # first start pays for cold caches: not counted
        nat = [_time(native, env) for _ in range(repeats)]
        con = [_time(inside, env) for _ in range(repeats)]
        result["probes"][name] = {
            "native": _summary(nat),
            "container": _summary(con),
            "startup_overhead_s": statistics.median(con) - statistics.median(nat),
            "command": inside,
        }
    traced = PROBES if (config.get("containers") or {}).get("startup_trace", True) else {}
    for name, argv in traced.items():  # after every timing: nothing traced beside one
        native = [a.replace("{python}", native_python) for a in argv]
        inside = prefix + [a.replace("{python}", site.python) for a in argv]
        try:
            result["probes"][name]["fs_ops"] = {
                "native": _trace(native, env),
                "container": _trace(inside, env, bound=(MOUNT_CODE, MOUNT_DATA, MOUNT_OUT),
                                    image=image),
                "tracer": "strace -f (every thread and child)",
            }
        except fsops.TraceError as exc:
            result["probes"][name]["fs_ops"] = {"not_traced": str(exc)}
    if manifest and Path(manifest).is_file():
        result["image_digest"] = json.loads(Path(manifest).read_text()).get("content_digest")
    result["end"] = now_iso()
    return result
