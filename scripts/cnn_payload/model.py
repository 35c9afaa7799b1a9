"""The network (the OLCF container study's image classifier), the arithmetic it trains in
(``--precision``), the FLOPs of one step, and its evaluation on the held-out split."""

from __future__ import annotations

MIN_IMAGE_SIZE = 64  # six 2x poolings (build_model); the workflow checks datasets.<name>.image_size
# The arithmetic of training: what each --precision sets (recorded in metrics.json as
# `precision`, with what the device really did in `precision_effective`).
PRECISIONS = {"fp32": "float32", "tf32": "float32 with TensorFloat-32 matmul/conv", "bf16": "bfloat16 autocast"}


def set_precision(torch, precision: str, device: str) -> str:
    """Set torch's matmul/conv precision for ``precision``; return what applies on
    ``device`` (tf32 is an NVIDIA GPU mode: on a CPU it is plain fp32)."""
    tf32 = precision == "tf32" and device == "cuda"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    if precision == "tf32":
        return "tf32" if tf32 else "fp32"
    return precision


def build_model(num_classes: int):
    """Conv(3->64), Conv(64->512), then the 512->512 block four times; each block is
    Conv3x3 + ReLU + BatchNorm + MaxPool2; Flatten; Linear(512 -> classes). Six poolings,
    so 64x64 inputs end at 1x1x512."""
    from torch import nn

    def block(cin: int, cout: int) -> list:
        return [
            nn.Conv2d(cin, cout, 3, padding=1),
            nn.ReLU(inplace=True),
            nn.BatchNorm2d(cout),
            nn.MaxPool2d(2),
        ]

    layers = block(3, 64) + block(64, 512)
    for _ in range(4):
        layers += block(512, 512)
    return nn.Sequential(
        *layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, num_classes)
    )


def count_step_flops(num_classes: int, batch_shape, loss_fn) -> int | None:
    """FLOPs of one training step (forward + backward of one batch of ``batch_shape``) of
    ``build_model(num_classes)``, counted by torch's FlopCounterMode (convolutions and
    matmuls: the arithmetic that dominates) on the meta device: shapes only, nothing is
    computed, the count is a real step's (tests/unit/test_train_cnn.py), and the run's
    model, its random state and its caches are untouched (a real step here cost one
    training step of every run's start-up: 1-3 s on 2 CPU cores). None when this torch
    cannot count."""
    try:
        import torch
        from torch.utils.flop_counter import FlopCounterMode
    except ImportError:
        return None
    try:
        with torch.device("meta"):
            model = build_model(num_classes)
            xb = torch.empty(tuple(batch_shape))
            yb = torch.zeros(batch_shape[0], dtype=torch.long)
        with FlopCounterMode(display=False) as counter:
            loss_fn(model(xb), yb).backward()
    except (NotImplementedError, RuntimeError):  # an operator without a meta kernel
        return None
    return int(counter.get_total_flops())


def recalibrate_batchnorm(model, data, idx, batch_size: int, device, max_batches: int = 8) -> int:
    """Re-estimate BatchNorm's population statistics on training images ("precise BN"):
    a run of a few dozen steps leaves the running averages (momentum 0.1) far from them,
    and eval mode would test with the wrong ones. Returns the images used."""
    import torch
    from torch import nn

    bns = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    if not bns:
        return 0
    for m in bns:
        m.reset_running_stats()
        m.momentum = None  # a cumulative average over the batches below
    model.train()
    used = 0
    with torch.no_grad():
        for s in range(0, min(len(idx), max_batches * batch_size), batch_size):
            i = idx[s:s + batch_size]
            model(data.batch(i)[0].to(device))
            used += len(i)
    return used


def evaluate(model, data, idx, batch_size: int, device) -> dict:
    """Loss and accuracy of ``model`` (eval mode) on the images ``idx``."""
    import torch
    from torch import nn

    loss_fn = nn.CrossEntropyLoss(reduction="sum")
    model.eval()
    tot, correct = 0.0, 0
    with torch.no_grad():
        for s in range(0, len(idx), batch_size):
            i = idx[s:s + batch_size]
            xb, yb = data.batch(i)
            xb, yb = xb.to(device), yb.to(device)
            out = model(xb)
            tot += float(loss_fn(out, yb))
            correct += int((out.argmax(1) == yb).sum())
    n = max(len(idx), 1)
    return {"test_loss": tot / n, "test_accuracy": correct / n, "test_images": int(len(idx))}


def held_out_test(model, data, train_idx, test_idx, batch_size: int, device) -> dict:
    """The held-out evaluation (rank 0: its parameters are every rank's), after the timed
    epochs: BatchNorm statistics re-estimated on training images, then eval mode."""
    plain = getattr(model, "module", model)
    calibrated = recalibrate_batchnorm(plain, data, train_idx, batch_size, device)
    return {**evaluate(plain, data, test_idx, batch_size, device),
            "bn_recalibration_images": calibrated}
