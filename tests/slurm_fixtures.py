"""Pytest fixtures for the project's local Slurm cluster (tools/slurm-cluster).

`slurm_cluster` (session scope) starts the cluster once, or reuses a healthy one. At the
end, the last pytest session still using it stops it if a pytest session started it
(several sessions may share it: each holds a shared lock on a file in its state
directory). Set SCALESWEEP_SLURM_KEEP=1 to leave it up. Tests skip, with the reason,
where Slurm is not installed or we are not root.

To share it, import it in tests/conftest.py: `from slurm_fixtures import slurm_cluster`.
"""

import fcntl
import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "tools" / "slurm-cluster"
SBIN_PATH = os.environ.get("PATH", "") + ":/usr/local/sbin:/usr/sbin:/sbin"

# sacct states after which a job never changes again
TERMINAL_STATES = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL",
                   "OUT_OF_MEMORY", "PREEMPTED", "BOOT_FAIL", "DEADLINE", "REVOKED"}


def slurm_skip_reason():
    """Why the local cluster cannot run here, or None."""
    if shutil.which("slurmctld", path=SBIN_PATH) is None:
        return "slurmctld is not installed (run: tools/slurm-cluster install-deps)"
    if os.geteuid() != 0:
        return "the local Slurm cluster runs its daemons as root"
    return None


@dataclass
class SlurmCluster:
    """Handle to the running cluster: run Slurm commands against it, follow jobs."""

    state_dir: Path
    env: dict = field(repr=False)
    nodes: tuple = ("n1", "n2", "n3")
    gpus_per_node: int = 8  # of the made-up type "gcd" (tools/slurm-cluster GPU_TYPE)
    account: str = "scalesweep"
    partitions: tuple = ("debug", "batch")

    def run(self, *cmd, timeout=60, check=True, **kw):
        res = subprocess.run([str(c) for c in cmd], env=self.env, text=True,
                             stdin=subprocess.DEVNULL, capture_output=True,
                             timeout=timeout, **kw)
        if check and res.returncode != 0:
            raise AssertionError(f"{' '.join(map(str, cmd))} exited {res.returncode}\n"
                                 f"stdout: {res.stdout}\nstderr: {res.stderr}")
        return res

    def script(self, *args, timeout=300, check=True):
        return self.run(SCRIPT, *args, timeout=timeout, check=check)

    def sbatch(self, *args) -> str:
        if not any(a.startswith(("--output", "-o")) for a in args):
            args = ("--output=/dev/null", *args)  # not slurm-<id>.out in the repository
        res = self.run("sbatch", "--parsable", f"--account={self.account}", *args)
        return res.stdout.strip().split(";")[0]

    def sacct(self, job_id: str, fields="State") -> list:
        """Fields of the job allocation (not its steps), or [] before sacct knows it."""
        res = self.run("sacct", "-j", job_id, "-X", "-n", "-P", "-o", fields, check=False)
        line = res.stdout.strip().splitlines()
        return line[0].split("|") if res.returncode == 0 and line else []

    def wait_for_end(self, job_id: str, timeout: float) -> str:
        """Poll sacct until the job reaches a terminal state; return that state."""
        deadline = time.monotonic() + timeout
        state = None
        while time.monotonic() < deadline:
            row = self.sacct(job_id)
            state = row[0].split()[0] if row else None  # "CANCELLED by 0" -> CANCELLED
            if state in TERMINAL_STATES:
                return state
            time.sleep(0.5)
        raise AssertionError(f"job {job_id} still {state} after {timeout:.0f}s")

    def node_states(self) -> dict:
        out = self.run("sinfo", "-h", "-N", "-o", "%N %T").stdout
        return dict(line.split() for line in out.splitlines())

    def pid_of_slurmd(self, node: str) -> int:
        return int((self.state_dir / "run" / f"slurmd-{node}.pid").read_text())


@pytest.fixture(scope="session")
def slurm_cluster():
    reason = slurm_skip_reason()
    if reason:
        pytest.skip(reason)
    state_dir = Path(os.environ.get("SCALESWEEP_SLURM_DIR", "/tmp/scalesweep-slurm"))
    env = dict(os.environ, PATH=SBIN_PATH, SLURM_CONF=str(state_dir / "etc" / "slurm.conf"))
    cluster = SlurmCluster(state_dir=state_dir, env=env)
    state_dir.mkdir(parents=True, exist_ok=True)
    started_marker = state_dir / ".started-by-pytest"
    with open(state_dir / ".pytest-users", "a") as users:
        fcntl.flock(users, fcntl.LOCK_SH)
        if cluster.script("status", check=False, timeout=60).returncode != 0:
            started_marker.touch()
        res = cluster.script("start", check=False)
        if res.returncode != 0:
            pytest.fail(f"tools/slurm-cluster start failed:\n{res.stdout}\n{res.stderr}")
        yield cluster
        fcntl.flock(users, fcntl.LOCK_UN)
        try:
            fcntl.flock(users, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return  # another session still uses the cluster: it stops it
        if started_marker.exists() and not os.environ.get("SCALESWEEP_SLURM_KEEP"):
            cluster.script("stop", check=False, timeout=180)
            started_marker.unlink(missing_ok=True)
