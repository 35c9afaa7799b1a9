"""The CNN payload run for real under mpirun (the rest of it: tests/unit/test_train_cnn.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import REPO

torch = pytest.importorskip("torch")  # the payload's (as in tests/unit/test_train_cnn.py)


@pytest.mark.integration
def test_an_unreadable_image_stops_the_payload_naming_the_file(tmp_path):
    """Issue #26 case 3: one flipped byte in an image the payload reads (a dataset given by
    hand, or damaged in its source before staging: the harness refuses a staged copy that
    changed since, by its manifest) names the file; no PIL traceback."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    for cls in ("a", "b"):
        (tmp_path / "data" / cls).mkdir(parents=True)
        for i in range(2):
            Image.fromarray(rng.integers(0, 255, (64, 64, 3), dtype=np.uint8)).save(
                tmp_path / "data" / cls / f"{i}.png")
    victim = tmp_path / "data" / "b" / "1.png"
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF  # inside the image data
    victim.write_bytes(bytes(data))
    out = tmp_path / "metrics.json"
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "train_cnn.py"),
                           "--data", str(tmp_path / "data"), "--out", str(out),
                           "--parallel", "single", "--epochs", "1", "--batch-size", "2"],
                          capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode != 0 and not out.exists()
    assert f"{victim}: not a readable image" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
