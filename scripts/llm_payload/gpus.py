"""Which GPUs an engine sees: the device visibility variables of each vendor."""

from __future__ import annotations

from typing import Mapping

VENDORS = ("amd", "nvidia", "none")
HIDE_ALL = "-1"  # an invalid device id: Ollama's documented way to force CPU


def gpu_visibility_env(n_gpus: int, vendor: str, parent: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment variables that make exactly ``n_gpus`` devices visible to the server.

    * ``amd``: ``ROCR_VISIBLE_DEVICES`` (what the OLCF study varied) and
      ``HIP_VISIBLE_DEVICES``; ``nvidia``: ``CUDA_VISIBLE_DEVICES`` (with
      ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` so indices match ``nvidia-smi``).
    * ``0`` GPUs, whatever the vendor: every variable of every vendor set to ``"-1"``,
      an invalid id, which is Ollama's documented way to force CPU (an empty
      ``CUDA_VISIBLE_DEVICES`` has been reported to crash Ollama).
    * ``parent`` (optional, e.g. ``os.environ``): when the scheduler already restricted
      the devices (Slurm sets ``ROCR_VISIBLE_DEVICES``/``CUDA_VISIBLE_DEVICES`` to the
      allocated ones), the first ``n_gpus`` of that list are used instead of ``0..n-1``.
      ``HIP_VISIBLE_DEVICES`` indexes the ROCr-visible devices, so it is always
      ``0..n-1``.

    Pure: no environment is read or written here.
    """
    if isinstance(n_gpus, bool) or not isinstance(n_gpus, int) or n_gpus < 0:
        raise ValueError(f"n_gpus must be an integer >= 0, not {n_gpus!r}")
    if vendor not in VENDORS:
        raise ValueError(f"gpu vendor must be one of {VENDORS}, not {vendor!r}")
    if n_gpus == 0:
        return {
            "CUDA_VISIBLE_DEVICES": HIDE_ALL,
            "ROCR_VISIBLE_DEVICES": HIDE_ALL,
            "HIP_VISIBLE_DEVICES": HIDE_ALL,
        }
    if vendor == "none":
        raise ValueError(f"{n_gpus} GPUs requested with gpu vendor 'none'")
    parent = parent or {}
    var = "ROCR_VISIBLE_DEVICES" if vendor == "amd" else "CUDA_VISIBLE_DEVICES"
    ids = [str(i) for i in range(n_gpus)]
    inherited = [d.strip() for d in parent.get(var, "").split(",") if d.strip()]
    if inherited and HIDE_ALL not in inherited:
        if len(inherited) < n_gpus:
            raise ValueError(f"{n_gpus} GPUs requested but {var}={parent[var]!r} allows only {len(inherited)}")
        ids = inherited[:n_gpus]
    env = {var: ",".join(ids)}
    if vendor == "amd":
        env["HIP_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(n_gpus))
    else:
        env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    return env
