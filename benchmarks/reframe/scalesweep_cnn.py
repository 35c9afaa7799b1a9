"""ReFrame version of scalesweep's 2-point local sweep (benchmarks/peer_reframe.py).

The same payload and the same command lines as scalesweep's run_point for the points
cnn_ddp/native/n1-g0-r1-t1 (one process, no launcher) and n1-g0-r2-t1 (mpirun -n 2,
DDP over gloo), on the same staged dataset:

    reframe -C benchmarks/reframe/settings.py -c benchmarks/reframe/scalesweep_cnn.py -r \
        --exec-policy=serial -S data_dir=<staged dataset> -S python=<venv python> \
        -S repo=<scalesweep checkout>

Sanity: the payload wrote payload.json with every epoch timed. Performance: steady-state
seconds per epoch (the mean over epochs after the first, as scalesweep reports it) and the
payload's own wall time.
"""

import json
import os
import socket

import reframe as rfm
import reframe.utility.sanity as sn
from reframe.core.backends import getlauncher


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@sn.deferrable
def _payload(path):
    with open(path) as fh:
        return json.load(fh)


@sn.deferrable
def _steady_epoch_s(path):
    epochs = _payload(path).evaluate()["epoch_s"]
    steady = epochs[1:] if len(epochs) > 1 else epochs
    return sum(steady) / len(steady)


@sn.deferrable
def _payload_wall_s(path):
    return _payload(path).evaluate()["payload_wall_s"]


@rfm.simple_test
class ScalesweepCNN(rfm.RunOnlyRegressionTest):
    ranks = parameter([1, 2])
    repo = variable(str, value=os.environ.get("SCALESWEEP_REPO", "."))
    python = variable(str, value=os.environ.get("SCALESWEEP_PYTHON", "python3"))
    data_dir = variable(str, value=os.environ.get("SCALESWEEP_DATA", ""))
    epochs = variable(int, value=2)
    batch_size = variable(int, value=16)
    image_size = variable(int, value=64)
    valid_systems = ["*"]
    valid_prog_environs = ["*"]
    time_limit = "20m"
    num_cpus_per_task = 1
    descr = "scalesweep CNN payload (DDP, native), 1 or 2 ranks"

    @run_after("init")
    def set_geometry(self):
        self.num_tasks = self.ranks
        self.num_tasks_per_node = self.ranks

    @run_before("run")
    def set_command(self):
        self.executable = self.python
        self.executable_opts = [
            os.path.join(self.repo, "scripts", "train_cnn.py"),
            "--data", self.data_dir, "--out", "payload.json",
            "--parallel", "ddp" if self.ranks > 1 else "single",
            "--device", "cpu", "--epochs", str(self.epochs),
            "--batch-size", str(self.batch_size), "--image-size", str(self.image_size),
            "--threads", "1", "--seed", "0",
        ]
        self.env_vars = {"OMP_NUM_THREADS": "1"}
        if self.ranks == 1:
            # scalesweep starts one process without a launcher
            self.job.launcher = getlauncher("local")()
        else:
            self.env_vars.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()),
                                 GLOO_SOCKET_IFNAME="lo", OMPI_ALLOW_RUN_AS_ROOT="1",
                                 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
            # the options scalesweep's launcher gives mpirun
            self.job.launcher.options = [
                "--bind-to", "none", "--mca", "btl_vader_single_copy_mechanism", "none",
                "-x", "MASTER_ADDR", "-x", "MASTER_PORT", "-x", "GLOO_SOCKET_IFNAME",
                "-x", "OMP_NUM_THREADS",
            ]

    @sanity_function
    def payload_complete(self):
        path = os.path.join(self.stagedir, "payload.json")
        return sn.all([
            sn.assert_true(os.path.isfile(path)),
            sn.assert_eq(sn.len(_payload(path)["epoch_s"]), self.epochs),
        ])

    @performance_function("s")
    def steady_epoch_s(self):
        return _steady_epoch_s(os.path.join(self.stagedir, "payload.json"))

    @performance_function("s")
    def payload_wall_s(self):
        return _payload_wall_s(os.path.join(self.stagedir, "payload.json"))
