"""The CNN payload's parts on CPU: the model layer for layer, the held-out split, counted
FLOPs, DataParallel's code path as far as torch allows without a GPU, and the MPI
gradient average over two real ranks (mpirun)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from conftest import REPO

torch = pytest.importorskip("torch")
sys.path.insert(0, str(REPO / "scripts"))  # the payload's package, as train_cnn.py imports it
from cnn_payload.data import holdout_split  # noqa: E402
from cnn_payload.model import build_model, count_step_flops, set_precision  # noqa: E402
from cnn_payload.parallel import collective_device, dist_sum  # noqa: E402


def test_holdout_split_takes_every_kth_image_of_each_class_and_never_trains_on_it():
    y = torch.tensor([0] * 10 + [1] * 10)
    train, test = holdout_split(y, 0.2)
    assert sorted(set(train.tolist()) | set(test.tolist())) == list(range(20))
    assert not set(train.tolist()) & set(test.tolist())
    assert test.tolist() == [0, 5, 10, 15]  # every 5th of each class, the same every run
    assert holdout_split(y, 0.0)[1].numel() == 0


def test_the_model_is_the_olcf_classifier_layer_for_layer():
    """The OLCF study's image classifier as shared/notes/workloads.md records it: Conv 3->64,
    64->512, then the 512->512 block four times, each block Conv3x3 + ReLU + BatchNorm +
    MaxPool2, then Linear(512 -> classes): 9,742,722 parameters for 2 classes (the count
    docs/quickstart.md gives). Any change to the layers shows here, not as a silent change
    of every timing."""
    from torch import nn

    model = build_model(2)
    kinds = [type(m).__name__ for m in model]
    assert kinds == ["Conv2d", "ReLU", "BatchNorm2d", "MaxPool2d"] * 6 + [
        "AdaptiveAvgPool2d", "Flatten", "Linear"]
    convs = [m for m in model if isinstance(m, nn.Conv2d)]
    assert [(c.in_channels, c.out_channels) for c in convs] == [
        (3, 64), (64, 512)] + [(512, 512)] * 4
    assert all(c.kernel_size == (3, 3) and c.padding == (1, 1) for c in convs)
    assert (model[-1].in_features, model[-1].out_features) == (512, 2)
    assert sum(p.numel() for p in model.parameters()) == 9_742_722
    assert "9,742,722 parameters" in (REPO / "docs" / "quickstart.md").read_text()


def test_flops_are_counted_from_the_model_not_typed_in():
    """Forward FLOPs of one 64x64 image = 2 x multiply-adds of the six convolutions and
    the linear layer (the counter's convention); a training step adds the backward."""
    from torch.utils.flop_counter import FlopCounterMode

    model = build_model(2)
    convs = [(3, 64, 64), (64, 512, 32), (512, 512, 16), (512, 512, 8), (512, 512, 4), (512, 512, 2)]
    expect = sum(2 * 9 * cin * cout * hw * hw for cin, cout, hw in convs) + 2 * 512 * 2
    with FlopCounterMode(display=False) as counter:
        model(torch.zeros(1, 3, 64, 64))
    assert counter.get_total_flops() == expect
    loss_fn = torch.nn.CrossEntropyLoss()
    rng = torch.get_rng_state()
    step = count_step_flops(2, (2, 3, 64, 64), loss_fn)
    assert torch.equal(rng, torch.get_rng_state())  # the run's random state untouched
    assert 2 * 2 * expect < step <= 3 * 2 * expect  # backward: about twice the forward
    # counted on the meta device: what a real step on real tensors counts
    with FlopCounterMode(display=False) as counter:
        loss_fn(model(torch.zeros(2, 3, 64, 64)), torch.tensor([0, 1])).backward()
    assert step == counter.get_total_flops()


def test_dataparallel_code_path_on_cpu_as_far_as_torch_allows(tmp_path):
    """Without a GPU nn.DataParallel holds no devices and calls the module itself (torch's
    documented CPU behaviour): the payload's DP wrapping, step and evaluation of
    ``model.module`` run; the payload itself refuses DP without a GPU, naming why."""
    dp = torch.nn.DataParallel(build_model(2))
    assert dp.device_ids == []
    x, y = torch.rand(4, 3, 64, 64), torch.tensor([0, 1, 0, 1])
    loss = torch.nn.CrossEntropyLoss()(dp(x), y)
    loss.backward()
    assert all(p.grad is not None for p in dp.module.parameters())
    dp.module.eval()
    assert torch.equal(dp(x), dp.module(x))
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "train_cnn.py"), "--data",
                           str(tmp_path), "--out", str(tmp_path / "m.json"), "--parallel", "dp"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "DataParallel is a GPU mode" in proc.stderr


MPI_AVERAGE = textwrap.dedent("""
    import sys, torch
    from mpi4py import MPI
    sys.path[:0] = [sys.argv[1], sys.argv[1] + "/../workflow"]  # scripts/, as train_cnn.py has it
    from cnn_payload.parallel import MpiGradients, mpi_info
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    torch.manual_seed(rank)  # different weights per rank: the broadcast makes them rank 0's
    model = torch.nn.Linear(3, 2)
    grads = MpiGradients(model, comm)
    grads.broadcast_state()
    for p in model.parameters():
        p.grad = torch.full_like(p, float(rank + 1))  # rank 0: 1, rank 1: 2 -> mean 1.5
    grads.allreduce()
    w = comm.allgather(model.weight.detach().clone())
    assert torch.equal(w[0], w[1]), "parameters differ after the broadcast"
    assert all(torch.allclose(p.grad, torch.full_like(p, 1.5)) for p in model.parameters())
    assert grads.bytes_per_step == (3 * 2 + 2) * 4 and grads.calls == 1
    with open(f"{sys.argv[2]}/ok.{rank}", "w") as out:  # a file per rank: mpirun may merge stdout
        out.write(mpi_info(MPI)["library"] or "")
""")


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="mpirun not installed")
def test_mpi_gradients_are_averaged_over_two_real_ranks(tmp_path):
    script = tmp_path / "avg.py"
    script.write_text(MPI_AVERAGE)
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    proc = subprocess.run(["mpirun", "-n", "2", "--oversubscribe", "--bind-to", "none",
                           sys.executable, str(script), str(REPO / "scripts"), str(tmp_path)],
                          capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    done = sorted(tmp_path.glob("ok.*"))
    assert [p.name for p in done] == ["ok.0", "ok.1"], proc.stdout + proc.stderr
    assert all("libmpi" in p.read_text() for p in done)


def test_collectives_reduce_on_the_backends_device():
    """Found on an H200 (issue #32): DDP over NCCL died after the first epoch with "No backend
    type associated with device type cpu": the per-epoch loss/accuracy sums were CPU tensors
    handed to NCCL. They are now reduced where the backend reduces."""
    cuda0 = torch.device("cuda", 0)
    assert collective_device("nccl", cuda0) == cuda0
    assert collective_device("gloo", cuda0) == torch.device("cpu")
    assert collective_device("gloo", torch.device("cpu")) == torch.device("cpu")

    class Nccl:  # as NCCL: a tensor not on the group's device is refused
        def __init__(self, device):
            self.device, self.seen = device, []

        def all_reduce(self, t):
            if t.device != self.device:
                raise RuntimeError(f"No backend type associated with device type {t.device.type}")
            self.seen.append(t.device)
            t.mul_(2)  # two ranks holding the same values

    group = Nccl(torch.device("cpu"))
    out = dist_sum(group, torch.tensor([1.0, 2.0]), torch.device("cpu"))
    assert out.tolist() == [2.0, 4.0] and out.device.type == "cpu" and group.seen == [torch.device("cpu")]
    with pytest.raises(RuntimeError, match="device type cpu"):
        dist_sum(Nccl(torch.device("meta")), torch.tensor([1.0]), torch.device("cpu"))


def test_precision_sets_tf32_only_on_a_gpu_and_bf16_trains(tmp_path):
    """--precision: tf32 switches TensorFloat-32 on for CUDA matmul/conv only (on a CPU the run
    records fp32), fp32 switches it off (torch's cuDNN default is on), bf16 autocasts."""
    assert set_precision(torch, "tf32", "cuda") == "tf32"
    assert torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32
    assert set_precision(torch, "fp32", "cuda") == "fp32"
    assert not torch.backends.cuda.matmul.allow_tf32 and not torch.backends.cudnn.allow_tf32
    assert set_precision(torch, "tf32", "cpu") == "fp32"
    assert set_precision(torch, "bf16", "cpu") == "bf16"
