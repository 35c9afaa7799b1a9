"""A site's environment modules in its point jobs (issue #42): with Snakemake's
`--sdm env-modules` the point rule's `envmodules:` (the site's `modules`) run through a
real `module` command (Debian's environment-modules, Tcl modulefiles), and the run records
what it was measured under (LOADEDMODULES in its stack's environment)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import REPO, SNAKEMAKE, config_text, have, tiny_config, write_site

MODULES_INIT = Path("/usr/share/modules/init/bash")  # Debian's environment-modules


@pytest.mark.skipif(not MODULES_INIT.exists(),
                    reason="environment-modules not installed (apt-get install environment-modules)")
def test_a_point_job_loads_the_sites_modules(tmp_path):
    if not have("mpirun"):
        pytest.skip("mpirun not installed (apt-get install openmpi-bin)")
    modulefiles = tmp_path / "modulefiles" / "scalesweep-test"
    modulefiles.mkdir(parents=True)
    # as cray-python does on Frontier, the module puts another python first on PATH: one
    # that fails, so a job that ran `python` from PATH instead of the workflow's own fails
    fakebin = tmp_path / "fakebin"
    fakebin.mkdir()
    (fakebin / "python").write_text("#!/bin/sh\necho 'not the workflow python' >&2; exit 3\n")
    (fakebin / "python").chmod(0o755)
    (modulefiles / "1.0").write_text("#%Module1.0\nsetenv OMP_DISPLAY_AFFINITY FALSE\n"
                                     f"prepend-path PATH {fakebin}\n")
    site = write_site(tmp_path, modules=["scalesweep-test/1.0"])
    config = tiny_config(site=site)
    config["sweep"]["ranks_per_node"] = [1]
    config["workloads"]["cnn_ddp"]["epochs"] = 1
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "config.yaml").write_text(config_text(config))
    point = "results/runs/cnn_ddp/native/n1-g0-r1-t1/rep1/native"
    # `module` as a login shell on a site has it: the init script defines and exports it
    script = (f"source {MODULES_INIT} && export MODULEPATH={tmp_path / 'modulefiles'} && "
              f"exec {SNAKEMAKE} -s {REPO / 'Snakefile'} --directory {tmp_path} --cores 2 "
              f"{point}/metrics.json --sdm env-modules")
    env = {k: v for k, v in os.environ.items() if k not in ("LOADEDMODULES", "MODULEPATH")}
    env.setdefault("USER", "root")
    proc = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    assert "Activating environment modules: scalesweep-test/1.0" in proc.stderr, proc.stderr[-3000:]
    metrics = json.loads((tmp_path / point / "metrics.json").read_text())
    envs = [r["env"] for r in metrics["stack"]["ranks"]] if "ranks" in metrics.get("stack", {}) \
        else None
    text = json.dumps(metrics)
    # the module's variable reached the payload, and the run names the module it ran under
    assert '"LOADEDMODULES": "scalesweep-test/1.0"' in text, envs
    assert '"OMP_DISPLAY_AFFINITY": "FALSE"' in text, envs
