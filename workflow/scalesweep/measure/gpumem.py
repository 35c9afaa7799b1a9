"""GPU memory of a node, read by the memory timeline's sampler (:mod:`scalesweep.measure.memtimeline`):
one source per device kind, tried in order: AMD's sysfs counters (``mem_info_vram_used``),
NVIDIA's NVML (``nvmlDeviceGetMemoryInfo`` through ctypes), else the vendor's tool
(``amd-smi``, ``rocm-smi``, ``nvidia-smi``), no more often than every
``TOOL_MIN_INTERVAL_S``. Standard library only: it runs beside a payload, in or out of a
container."""

from __future__ import annotations

import ctypes
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Callable

TOOL_MIN_INTERVAL_S = 10.0
TOOL_TIMEOUT_S = 10.0
GPU_DEVICES = ("cuda", "rocm")


class GpuSource:
    """GPU memory used per device, in MiB (``read``); ``min_interval_s`` between reads."""

    name = "?"
    min_interval_s = 0.0

    def read(self) -> list[float]:
        raise NotImplementedError

    def close(self) -> None:
        pass


class AmdSysfs(GpuSource):
    """amdgpu's ``mem_info_vram_used`` (bytes) of every AMD card (vendor 0x1002)."""

    name = "sysfs mem_info_vram_used"

    def __init__(self, root: str = "/sys/class/drm"):
        cards = [p for p in Path(root).glob("card*") if re.fullmatch(r"card\d+", p.name)]
        self.paths, seen = [], set()
        for card in sorted(cards, key=lambda p: int(p.name[4:])):
            device = card / "device"
            try:
                vendor = (device / "vendor").read_text().strip()
                real = device.resolve()
            except OSError:
                continue
            used = device / "mem_info_vram_used"
            if vendor == "0x1002" and used.is_file() and real not in seen:
                seen.add(real)
                self.paths.append(used)
        if not self.paths:
            raise OSError(f"no AMD GPU with mem_info_vram_used under {root}")

    def read(self) -> list[float]:
        return [int(p.read_text().strip()) / 2**20 for p in self.paths]


class _NvmlMemory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong),
                ("used", ctypes.c_ulonglong)]


class Nvml(GpuSource):
    """NVML's memory used of every NVIDIA device (libnvidia-ml.so.1, in this process)."""

    name = "nvml"

    def __init__(self, library: str = "libnvidia-ml.so.1"):
        lib = ctypes.CDLL(library)
        self._check(lib.nvmlInit_v2(), "nvmlInit_v2")
        self.lib = lib
        count = ctypes.c_uint(0)
        self._check(lib.nvmlDeviceGetCount_v2(ctypes.byref(count)), "nvmlDeviceGetCount_v2")
        self.handles = []
        for i in range(count.value):
            handle = ctypes.c_void_p()
            self._check(lib.nvmlDeviceGetHandleByIndex_v2(ctypes.c_uint(i), ctypes.byref(handle)),
                        "nvmlDeviceGetHandleByIndex_v2")
            self.handles.append(handle)
        if not self.handles:
            self.close()
            raise OSError("NVML lists no device")

    @staticmethod
    def _check(rc: int, what: str) -> None:
        if rc != 0:
            raise OSError(f"{what} returned {rc}")

    def read(self) -> list[float]:
        out = []
        for handle in self.handles:
            mem = _NvmlMemory()
            self._check(self.lib.nvmlDeviceGetMemoryInfo(handle, ctypes.byref(mem)),
                        "nvmlDeviceGetMemoryInfo")
            out.append(mem.used / 2**20)
        return out

    def close(self) -> None:
        try:
            self.lib.nvmlShutdown()
        except (AttributeError, OSError):
            pass


def _amd_smi_used(out: str) -> list[float]:
    data = json.loads(out)
    rows = data if isinstance(data, list) else data.get("gpu_data", [])
    used = []
    for row in rows:
        value = ((row.get("mem_usage") or {}).get("used_vram") or {})
        number, unit = (value.get("value"), value.get("unit", "MB")) if isinstance(value, dict) \
            else (value, "MB")
        scale = {"B": 2**-20, "KB": 2**-10, "MB": 1, "GB": 2**10}.get(str(unit).upper(), 1)
        used.append(float(number) * scale)
    return used


def _rocm_smi_used(out: str) -> list[float]:
    cards = {k: v for k, v in json.loads(out).items() if k.startswith("card")}
    return [float(v["VRAM Total Used Memory (B)"]) / 2**20
            for _, v in sorted(cards.items(), key=lambda kv: int(kv[0][4:] or 0))]


def _nvidia_smi_used(out: str) -> list[float]:
    return [float(line.strip()) for line in out.splitlines() if line.strip()]


TOOL_COMMANDS = {
    "rocm": ((["amd-smi", "metric", "--mem-usage", "--json"], _amd_smi_used),
             (["rocm-smi", "--showmeminfo", "vram", "--json"], _rocm_smi_used)),
    "cuda": ((["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
              _nvidia_smi_used),),
}


class GpuTool(GpuSource):
    """A vendor tool run as a process: at most every TOOL_MIN_INTERVAL_S."""

    min_interval_s = TOOL_MIN_INTERVAL_S

    def __init__(self, argv: list[str], parse: Callable[[str], list[float]], run=None):
        self.argv, self.parse, self.run = argv, parse, run or subprocess.run
        self.name = argv[0]
        if not shutil.which(argv[0]):
            raise OSError(f"{argv[0]}: not found")

    def read(self) -> list[float]:
        proc = self.run(self.argv, capture_output=True, text=True, timeout=TOOL_TIMEOUT_S)
        if proc.returncode != 0:
            raise OSError(f"{self.name}: exit {proc.returncode}")
        try:
            used = self.parse(proc.stdout)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise OSError(f"{self.name}: unreadable output ({exc})") from exc
        if not used:
            raise OSError(f"{self.name}: no device listed")
        return used


def open_gpu_source(device: str | None, sysfs_root: str = "/sys/class/drm",
                    nvml_library: str = "libnvidia-ml.so.1",
                    run=None) -> tuple[GpuSource | None, list[float] | None, str | None]:
    """(source, its first reading, None) for the site's device kind, or (None, None,
    the reasons every source failed)."""
    candidates: list[tuple[str, Callable[[], GpuSource]]] = []
    if device == "rocm":
        candidates.append(("sysfs", lambda: AmdSysfs(sysfs_root)))
    if device == "cuda":
        candidates.append(("nvml", lambda: Nvml(nvml_library)))
    for argv, parse in TOOL_COMMANDS.get(device or "", ()):
        candidates.append((argv[0], lambda argv=argv, parse=parse: GpuTool(argv, parse, run)))
    tried = []
    for name, make in candidates:
        try:
            source = make()
            first = source.read()
        except (OSError, subprocess.SubprocessError, ValueError) as exc:
            tried.append(f"{name}: {exc}")
            continue
        return source, first, None
    return None, None, "; ".join(tried) or f"no GPU memory source for device {device!r}"
