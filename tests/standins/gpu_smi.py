#!/usr/bin/env python3
"""Stand-ins for ``rocm-smi`` (ROCm 6.2, ROCM-SMI 2.3.1) and ``amd-smi`` (24.7, ROCm 6.3)
answering for a fake Frontier node: 4 AMD Instinct MI250X = 8 GCDs (gfx90a, 64 GiB HBM2e
each), cut to what scalesweep runs of them:

* the node's GPU inventory (scalesweep.pointlaunch.GPU_INVENTORY_COMMANDS):
  ``amd-smi static --asic --vram --json``, else
  ``rocm-smi --showproductname --showmeminfo vram --json``;
* the GPU memory series (scalesweep.measure.gpumem.TOOL_COMMANDS):
  ``amd-smi metric --mem-usage --json``, else ``rocm-smi --showmeminfo vram --json``.

As the real tools, they list every device of the node whatever ``ROCR_VISIBLE_DEVICES`` /
``HIP_VISIBLE_DEVICES`` say (those hide devices from the HIP runtime, not from the SMI).
The JSON is the real tools' layout: rocm-smi's formatJson (``{"card0": {"Card Series":
"...", ...}}``, every value a string; since ROCm 6.2 the product keys are capitalised),
amd-smi's list of ``{"gpu": N, ...}`` with ``{"value", "unit"}`` quantities. Anything else
exits 2 saying the stand-in does not support it (a test that starts to need more fails
instead of passing on a guess).

Run as ``gpu_smi.py rocm-smi ARGS...`` or ``gpu_smi.py amd-smi ARGS...``.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

VRAM_BYTES = 68702699520  # what rocm-smi reports for one MI250X GCD (64 GiB minus the reserve)
VRAM_USED_BYTES = 10993664
VENDOR = "Advanced Micro Devices, Inc. [AMD/ATI]"
MARKET_NAME = "AMD Instinct MI250X"
SERIES = "AMD INSTINCT MI250X"  # rsmi_dev_name_get on MI250X
GFX = "gfx90a"
DEVICE_ID = "0x740c"
SUBSYSTEM_ID = "0x0b0c"
REV = "0x01"
VBIOS = "113-D65209-073"  # rocm-smi's "Card SKU" is the part between the dashes
COMPUTE_UNITS = 110
GCDS = range(8)


def _h(i: int, what: str, n: int) -> str:
    return hashlib.sha256(f"scalesweep-fake-mi250x-{i}-{what}".encode()).hexdigest()[:n]


def unsupported(tool: str, args: list[str]) -> int:
    sys.stderr.write(f"{tool} (scalesweep stand-in): {' '.join(args) or '(no arguments)'}: not supported "
                     "by the stand-in (tests/standins/gpu_smi.py)\n")
    return 2


def rocm_smi(args: list[str]) -> int:
    """``--showproductname`` and/or ``--showmeminfo vram``, with ``--json``."""
    rest = [a for a in args if a != "--json"]
    product = "--showproductname" in rest
    vram = rest[rest.index("--showmeminfo"):][:2] == ["--showmeminfo", "vram"] if "--showmeminfo" in rest else False
    known = {"--showproductname"} | ({"--showmeminfo", "vram"} if vram else set())
    if "--json" not in args or not (product or vram) or set(rest) - known:
        return unsupported("rocm-smi", args)
    cards: dict[str, dict[str, str]] = {}
    for i in GCDS:
        card: dict[str, str] = {}
        if vram:
            card.update({"VRAM Total Memory (B)": str(VRAM_BYTES), "VRAM Total Used Memory (B)": str(VRAM_USED_BYTES)})
        if product:
            card.update({"Card Series": SERIES, "Card Model": DEVICE_ID, "Card Vendor": VENDOR,
                         "Card SKU": VBIOS.split("-")[1], "Subsystem ID": SUBSYSTEM_ID, "Device Rev": REV,
                         "Node ID": str(4 + i), "GUID": str(int(_h(i, "guid", 4), 16) | 0x8000),
                         "GFX Version": GFX})
        cards[f"card{i}"] = card
    print(json.dumps(cards))
    return 0


def _unit(value: Any, unit: str) -> dict[str, Any]:
    return {"value": value, "unit": unit}


def amd_smi(args: list[str]) -> int:
    """``static [--asic] [--vram] --json`` and ``metric --mem-usage --json``."""
    command, opts = (args[0], set(args[1:])) if args else ("", set())
    if command == "static" and "--json" in opts and opts <= {"--json", "--asic", "--vram"}:
        what = (opts - {"--json"}) or {"--asic", "--vram"}
        rows = []
        for i in GCDS:
            row: dict[str, Any] = {"gpu": i}
            if "--asic" in what:  # amdsmi_interface.amdsmi_get_gpu_asic_info
                row["asic"] = {"market_name": MARKET_NAME, "vendor_id": "0x1002",
                               "vendor_name": VENDOR.replace(",", ""), "subvendor_id": "0x1002",
                               "device_id": DEVICE_ID, "rev_id": REV, "asic_serial": "0x" + _h(i, "serial", 16).upper(),
                               "oam_id": i // 2, "num_compute_units": COMPUTE_UNITS,
                               "target_graphics_version": GFX}
            if "--vram" in what:
                row["vram"] = {"type": "HBM", "vendor": "N/A", "size": _unit(VRAM_BYTES // 2**20, "MB"),
                               "bit_width": 4096}
            rows.append(row)
    elif command == "metric" and opts == {"--mem-usage", "--json"}:
        mb = 2**20
        rows = [{"gpu": i, "mem_usage": {
            "total_vram": _unit(VRAM_BYTES // mb, "MB"), "used_vram": _unit(VRAM_USED_BYTES // mb, "MB"),
            "free_vram": _unit(VRAM_BYTES // mb - VRAM_USED_BYTES // mb, "MB")}} for i in GCDS]
    else:
        return unsupported("amd-smi", args)
    print(json.dumps(rows, indent=4))
    return 0


def main(argv: list[str]) -> int:
    tool, args = argv[0], argv[1:]
    code = 2
    try:
        code = rocm_smi(args) if tool == "rocm-smi" else amd_smi(args)
    finally:
        sys.path.insert(0, str(HERE.parent))
        from standins import log_invocation

        log_invocation({"tool": tool, "argv": [tool, *args], "exit_status": code})
    return code


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in ("rocm-smi", "amd-smi"):
        sys.stderr.write("usage: gpu_smi.py {rocm-smi|amd-smi} ARGS... (see tests/standins)\n")
        sys.exit(2)
    sys.exit(main(sys.argv[1:]))
