"""The training data: an image folder root/<class>/*.png|jpg, decoded into one tensor or
read batch by batch (``--data-path``), and the held-out test split."""

from __future__ import annotations

import time
from pathlib import Path

from scalesweep.record.dataset import IMAGE_ERRORS


def list_image_folder(root: Path, max_images: int) -> tuple[list[tuple[Path, int]], list[str]]:
    """The images of root/<class>/ with their labels (classes in name order), and the
    classes."""
    classes = sorted(d.name for d in root.iterdir() if d.is_dir() and not d.name.startswith("."))
    if len(classes) < 2:
        raise SystemExit(f"train_cnn: {root} has {len(classes)} class folders, need >= 2")
    files: list[tuple[Path, int]] = []
    for label, cls in enumerate(classes):
        for f in sorted((root / cls).iterdir()):
            if f.suffix.lower() in {".png", ".jpg", ".jpeg"}:
                files.append((f, label))
    if max_images:
        files = files[:max_images] if len(classes) == 1 else balanced(files, max_images)
    return files, classes


def read_images(files: list[Path], size: int):
    """Decode ``files`` (RGB, resized to size x size) into one float tensor in [0, 1], NCHW."""
    import numpy as np
    import torch
    from PIL import Image

    arr = np.empty((len(files), size, size, 3), dtype=np.uint8)
    for i, f in enumerate(files):
        try:
            with Image.open(f) as im:
                im = im.convert("RGB")
                if im.size != (size, size):
                    im = im.resize((size, size), Image.BILINEAR)
                arr[i] = np.asarray(im)
        except IMAGE_ERRORS as exc:
            raise SystemExit(f"train_cnn: {f}: not a readable image ({exc}); the dataset is "
                             "damaged: check it against its manifest (cd DATASET && sha256sum -c "
                             "MANIFEST.sha256) and stage it again") from None
    return torch.from_numpy(arr).permute(0, 3, 1, 2).float().div_(255.0)


def load_image_folder(root: Path, size: int, max_images: int):
    """All images of root/<class>/ as one float tensor in [0, 1], NCHW, plus labels."""
    import torch

    files, classes = list_image_folder(root, max_images)
    x = read_images([f for f, _ in files], size)
    y = torch.tensor([label for _, label in files], dtype=torch.long)
    return x, y, classes


class ImageSource:
    """Where training reads its images from (``--data-path``): ``memory``, every image
    decoded once before training (the staged, or node-local, copy read at start-up:
    ``data_load_s``); ``files``, each batch's files opened and decoded at its step (the
    data path of a training that streams from the file system it was given: the shared
    one, or the node-local copy). ``seconds``: time spent getting batches, this rank."""

    def __init__(self, root: Path, size: int, max_images: int, mode: str):
        import torch

        self.mode, self.size = mode, size
        self.files, self.classes = list_image_folder(root, max_images)
        self.y = torch.tensor([label for _, label in self.files], dtype=torch.long)
        self.x = read_images([f for f, _ in self.files], size) if mode == "memory" else None
        self.seconds = 0.0

    def batch(self, idx):
        t0 = time.perf_counter()
        if self.x is not None:
            xb = self.x[idx]
        else:
            xb = read_images([self.files[int(i)][0] for i in idx], self.size)
        self.seconds += time.perf_counter() - t0
        return xb, self.y[idx]


def balanced(files: list[tuple[Path, int]], n: int) -> list[tuple[Path, int]]:
    """At most ``n`` images, the same number of each class (the first in file order)."""
    by_label: dict[int, list] = {}
    for item in files:
        by_label.setdefault(item[1], []).append(item)
    per = max(1, n // len(by_label))
    return [item for items in by_label.values() for item in items[:per]]


def holdout_split(y, fraction: float):
    """(train indices, test indices): every k-th image of each class (k = round(1 /
    fraction), the class's images in file order) is held out; independent of the seed,
    so every run of a campaign tests on the same images."""
    import torch

    if fraction <= 0:
        return torch.arange(len(y)), torch.arange(0)
    k = max(2, round(1 / fraction))
    test = torch.zeros(len(y), dtype=torch.bool)
    for label in torch.unique(y):
        members = torch.nonzero(y == label).flatten()
        test[members[::k]] = True
    return torch.nonzero(~test).flatten(), torch.nonzero(test).flatten()
