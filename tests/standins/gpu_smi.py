#!/usr/bin/env python3
"""Stand-ins for ``rocm-smi`` (ROCm 6.2, ROCM-SMI 2.3.1) and ``amd-smi`` (24.7, ROCm 6.3)
answering for a fake Frontier node: 4 AMD Instinct MI250X = 8 GCDs (gfx90a, 64 GiB HBM2e
each), at Frontier's PCI buses c1, c6, c9, ce, d1, d6, d9, de.

Run as ``gpu_smi.py rocm-smi ARGS...`` or ``gpu_smi.py amd-smi ARGS...``. As the real tools,
they list every device of the node whatever ``ROCR_VISIBLE_DEVICES`` /
``HIP_VISIBLE_DEVICES`` say (those hide devices from the HIP runtime, not from the SMI).

rocm-smi (ROCm/rocm_smi_lib python_smi_tools/rocm_smi.py, tag rocm-6.2.2): options
``--showproductname``, ``--showmeminfo TYPE...`` (vram, vis_vram, gtt, all), ``-u/--showuse``,
``--showbus``, ``-i/--showid``, ``--showuniqueid``, ``-V/--version``, ``-d/--device N...``,
``--json`` (``{"card0": {"Card Series": "...", ...}}``, every value a string, as
formatJson writes it; since ROCm 6.2 the product keys are capitalised: "Card Series",
"Card Model", "Card Vendor"; ROCm <= 6.1 wrote "Card series", "Card model", "Card vendor"),
``--csv``; without options the concise table. The log layout (``GPU[0]\t\t: key: value``
between ``=`` spacers 90 columns wide) is printLog/printLogSpacer's. Other rocm-smi
options are refused by argparse as the real parser refuses unknown ones (exit 2); known
ones this stand-in does not implement exit 2 with "not supported by the stand-in".

amd-smi (ROCm/amdsmi amdsmi_cli, 24.7): ``version``, ``list``, ``static [-a|--asic]
[-b|--bus] [-v|--vram] [-B|--board] [-d|--driver] [-u|--numa]``, ``metric [-u|--usage]
[-m|--mem-usage]``, each with ``--json`` (a list of ``{"gpu": N, ...}``), ``--csv`` or the
human-readable layout, and ``-g/--gpu`` to pick devices. An unknown parameter prints
``Parameter '--x' is invalid. Run '--help' for more info. Error code: -2`` on stdout and,
as amd-smi 24.7 does (amdsmi_cli.py _print_error), exits 0; an unknown command likewise
(``Command 'x' is invalid ...``).
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import io
import json
import signal
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

# --------------------------------------------------------------------------- the fake node

BUSES = ("c1", "c6", "c9", "ce", "d1", "d6", "d9", "de")
# OLCF Frontier User Guide, "Frontier Compute Nodes": GCDs 0-1 are closest to NUMA 3,
# 2-3 to NUMA 1, 4-5 to NUMA 0, 6-7 to NUMA 2
NUMA = (3, 3, 1, 1, 0, 0, 2, 2)
VRAM_BYTES = 68702699520  # what rocm-smi reports for one MI250X GCD (64 GiB minus the reserve)
VRAM_USED_BYTES = 10993664
GTT_BYTES = 540_972_654_592
GTT_USED_BYTES = 11_759_616
VENDOR = "Advanced Micro Devices, Inc. [AMD/ATI]"
MARKET_NAME = "AMD Instinct MI250X"
SERIES = "AMD INSTINCT MI250X"  # rsmi_dev_name_get on MI250X
GFX = "gfx90a"
DEVICE_ID = "0x740c"
SUBSYSTEM_ID = "0x0b0c"
REV = "0x01"
VBIOS = "113-D65209-073"  # rocm-smi's "Card SKU" is the part between the dashes
COMPUTE_UNITS = 110


def _h(i: int, what: str, n: int) -> str:
    return hashlib.sha256(f"scalesweep-fake-mi250x-{i}-{what}".encode()).hexdigest()[:n]


GCDS: list[dict[str, Any]] = [
    {
        "index": i,
        "bus": BUSES[i],
        "bdf": f"0000:{BUSES[i]}:00.0",  # amd-smi's form
        "pci_bus": f"0000:{BUSES[i].upper()}:00.0",  # rocm-smi's form ({:04X}:{:02X}:{:02X}.{:0X})
        "numa": NUMA[i],
        "oam_id": i // 2,  # two GCDs per MI250X package
        "node_id": 4 + i,  # KFD topology: the CPU (4 NUMA nodes) first
        "guid": int(_h(i, "guid", 4), 16) | 0x8000,
        "unique_id": "0x" + _h(i, "uid", 16),
        "uuid": f"{_h(i, 'u1', 2)}ff740c-0000-1000-80{_h(i, 'u2', 2)}-{_h(i, 'u3', 12)}",
        "serial": "0x" + _h(i, "serial", 16).upper(),
    }
    for i in range(8)
]


def ollama_gpu_id(gcd: dict[str, Any]) -> str:
    """How Ollama names a ROCm GPU (discover/amd_linux.go: GPU-<unique id>)."""
    return "GPU-" + gcd["unique_id"][2:]


# --------------------------------------------------------------------------- rocm-smi

APP_WIDTH = 90
HEADER = " ROCm System Management Interface "
FOOTER = " End of ROCm SMI Log "
ROCM_SMI_VERSION = "2.3.1+79ab5f3"
ROCM_SMI_LIB_VERSION = "7.3.0"
MEM_TYPES = ("VRAM", "VIS_VRAM", "GTT")


class RocmSmi:
    """printLog / printLogSpacer / formatJson of rocm_smi.py."""

    def __init__(self, as_json: bool, as_csv: bool, devices: list[int]):
        self.json = as_json or as_csv
        self.csv = as_csv
        self.devices = devices
        self.data: dict[str, dict[str, str]] = {f"card{d}": {} for d in devices}
        self.out: list[str] = []

    def spacer(self, text: str | None = None, fill: str = "=") -> None:
        if self.json:
            return
        width = APP_WIDTH
        if text:
            if len(text) % 2:
                text += fill
            half = (width - len(text)) // 2
            self.out.append(fill * half + text + fill * half)
        else:
            self.out.append(fill * width)

    def log(self, device: int, metric: str, value: Any = None) -> None:
        if self.json:
            line = f"{metric}: {value}" if value is not None else metric
            if ":" in line:  # formatJson drops lines without a key
                key, _, val = line.partition(": ")
                self.data[f"card{device}"][key] = val.strip()
            return
        self.out.append(f"GPU[{device}]\t\t: {metric}: {value}" if value is not None else f"GPU[{device}]\t\t: {metric}")

    # the show* functions

    def product(self) -> None:
        self.spacer(" Product Info ")
        for d in self.devices:
            g = GCDS[d]
            self.log(d, "Card Series", "\t\t" + SERIES)
            self.log(d, "Card Model", "\t\t" + DEVICE_ID)
            self.log(d, "Card Vendor", "\t\t" + VENDOR)
            self.log(d, "Card SKU", "\t\t" + VBIOS.split("-")[1])
            self.log(d, "Subsystem ID", "\t" + SUBSYSTEM_ID)
            self.log(d, "Device Rev", "\t\t" + REV)
            self.log(d, "Node ID", "\t\t" + str(g["node_id"]))
            self.log(d, "GUID", "\t\t" + str(g["guid"]))
            self.log(d, "GFX Version", "\t\t" + GFX)
        self.spacer()

    def meminfo(self, types: list[str]) -> None:
        wanted = list(MEM_TYPES) if "all" in [t.lower() for t in types] else [t.upper() for t in types]
        self.spacer(" Memory Usage (Bytes) ")
        for d in self.devices:
            for mem in wanted:
                if mem not in MEM_TYPES:
                    self.err(d, f"Invalid memory type {mem}")
                    continue
                total, used = {"VRAM": (VRAM_BYTES, VRAM_USED_BYTES), "VIS_VRAM": (VRAM_BYTES, VRAM_USED_BYTES),
                               "GTT": (GTT_BYTES, GTT_USED_BYTES)}[mem]
                self.log(d, f"{mem} Total Memory (B)", total)
                self.log(d, f"{mem} Total Used Memory (B)", used)
        self.spacer()

    def use(self) -> None:
        self.spacer(" % time GPU is busy ")
        for d in self.devices:
            self.log(d, "GPU use (%)", 0)
            self.log(d, "GFX Activity", 1352)
        self.spacer()

    def bus(self) -> None:
        self.spacer(" PCI Bus ID ")
        for d in self.devices:
            self.log(d, "PCI Bus", GCDS[d]["pci_bus"])
        self.spacer()

    def ids(self) -> None:
        self.spacer(" ID ")
        for d in self.devices:
            self.log(d, "Device Name", "\t\t" + SERIES)
            self.log(d, "Device ID", "\t\t" + DEVICE_ID)
            self.log(d, "Device Rev", "\t\t" + REV)
            self.log(d, "Subsystem ID", "\t" + SUBSYSTEM_ID)
            self.log(d, "GUID", "\t\t" + str(GCDS[d]["guid"]))
        self.spacer()

    def uniqueid(self) -> None:
        self.spacer(" Unique ID ")
        for d in self.devices:
            self.log(d, "Unique ID", GCDS[d]["unique_id"])
        self.spacer()

    def err(self, device: int, msg: str) -> None:
        if not self.json:
            self.out.append(f"GPU[{device}]\t\t: {msg}")

    def concise(self) -> None:
        header = ["Device", "Node", "IDs", "", "Temp", "Power", "Partitions", "SCLK", "MCLK", "Fan", "Perf",
                  "PwrCap", "VRAM%", "GPU%"]
        sub = ["", "", "(DID,", "GUID)", "(Junction)", "(Socket)", "(Mem, Compute, ID)", "", "", "", "", "", "", ""]
        rows = []
        for d in self.devices:
            g = GCDS[d]
            rows.append([str(d), str(g["node_id"]), DEVICE_ID + ",", str(g["guid"]), "35.0\N{DEGREE SIGN}C",
                         "90.0W", "N/A, N/A, 0", "800Mhz", "1600Mhz", "0%", "auto", "560.0W", "0%", "0%"])
        widths = [max(len(x) for x in col) + 2 for col in zip(header, sub, *rows)]

        def fmt(r: list[str]) -> str:
            return "".join(c.ljust(w) for c, w in zip(r, widths)).rstrip()

        width = sum(widths)
        self.out.append("=" * ((width - len(HEADER)) // 2) + HEADER + "=" * ((width - len(HEADER)) // 2))
        self.out.append("=" * ((width - 14) // 2) + " Concise Info " + "=" * ((width - 14) // 2))
        self.out += [fmt(header), fmt(sub), "=" * width, *map(fmt, rows), "=" * width]
        self.out.append("=" * ((width - len(FOOTER)) // 2) + FOOTER + "=" * ((width - len(FOOTER)) // 2))


ROCM_SMI_UNSUPPORTED = (
    "--showhw", "--showallinfo", "--showvbios", "--showmclkrange", "--showmemvendor", "--showsclkrange",
    "--showserial", "--showvoltagerange", "--showpagesinfo", "--showpendingpages", "--showretiredpages",
    "--showunreservablepages", "--showfan", "--showpower", "--showtemp", "--showmemuse", "--showvoltage",
    "--showbw", "--showclocks", "--showgpuclocks", "--showprofile", "--showmaxpower", "--showmemoverdrive",
    "--showoverdrive", "--showperflevel", "--showclkvolt", "--showclkfrq", "--showpids", "--showpidgpus",
    "--showreplaycount", "--showrasinfo", "--showvc", "--showxgmierr", "--showtopo", "--showdriverversion",
    "--showfwinfo", "--showtempgraph", "--showenergycounter", "--showcomputepartition",
    "--showmemorypartition", "--setfan", "--setperflevel", "--setsclk", "--setmclk", "--resetclocks",
    "--gpureset", "--setpoweroverdrive",
)


def rocm_smi(args: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="rocm-smi",
        description=f"AMD ROCm System Management Interface  |  ROCM-SMI version: {ROCM_SMI_VERSION}")
    p.add_argument("-V", "--version", action="store_true", help="Show version information")
    p.add_argument("-d", "--device", type=int, nargs="+", help="Execute command on specified device")
    p.add_argument("--alldevices", action="store_true")
    p.add_argument("-i", "--showid", action="store_true", help="Show DEVICE IDs")
    p.add_argument("--showuniqueid", action="store_true", help="Show GPU's Unique ID")
    p.add_argument("--showproductname", action="store_true", help="Show product details")
    p.add_argument("--showbus", action="store_true", help="Show PCI bus number")
    p.add_argument("-u", "--showuse", action="store_true", help="Show current GPU use")
    p.add_argument("--showmeminfo", metavar="TYPE", type=str, nargs="+",
                   help="Show Memory usage information for given block(s) TYPE")
    p.add_argument("--loglevel", metavar="LEVEL")
    p.add_argument("--json", action="store_true", help="Print output in JSON format")
    p.add_argument("--csv", action="store_true", help="Print output in CSV format")
    for opt in ROCM_SMI_UNSUPPORTED:  # the real tool's, not implemented here
        p.add_argument(opt, nargs="*", default=None, help=argparse.SUPPRESS)
    a = p.parse_args(args)
    for opt in ROCM_SMI_UNSUPPORTED:
        if getattr(a, opt.lstrip("-").replace("-", "_")) is not None:
            sys.stderr.write(f"rocm-smi (scalesweep stand-in): {opt} is not supported by the stand-in\n")
            return 2
    if a.version:
        print(f"ROCM-SMI version: {ROCM_SMI_VERSION}\nROCM-SMI-LIB version: {ROCM_SMI_LIB_VERSION}")
        return 0
    devices = list(range(len(GCDS)))
    if a.device:
        bad = [d for d in a.device if not 0 <= d < len(GCDS)]
        if bad:
            print(f"GPU[{bad[0]}]\t\t: Unable to find device")  # rocm_smi.py: invalid device ids
            return 1
        devices = sorted(set(a.device))
    smi = RocmSmi(a.json, a.csv, devices)
    concise = len(args) == 0 or (len(args) == 1 and (a.json or a.csv or a.alldevices))
    if concise:
        if smi.json:
            print("NOT_SUPPORTED: Cannot print JSON/CSV output for concise output")
            return 1
        print("\n")
        smi.concise()
        print("\n".join(smi.out))
        return 0
    if not smi.json:
        smi.out.append("\n")
        smi.spacer(HEADER)
    if a.showid:
        smi.ids()
    if a.showuniqueid:
        smi.uniqueid()
    if a.showuse:
        smi.use()
    if a.showmeminfo:
        smi.meminfo(a.showmeminfo)
    if a.showproductname:
        smi.product()
    if a.showbus:
        smi.bus()
    if smi.json:
        data = {k: v for k, v in smi.data.items() if v}
        if not data:
            sys.stderr.write("WARNING:root:No JSON data to report\n")
            return 0
        if a.csv:
            keys = sorted({k for v in data.values() for k in v})
            buf = io.StringIO()
            w = csv.writer(buf, lineterminator="\n")
            w.writerow(["device", *keys])
            for card, v in data.items():
                w.writerow([card, *(v.get(k, "N/A") for k in keys)])
            print(buf.getvalue(), end="")
        else:
            print(json.dumps(data))
        return 0
    smi.spacer(FOOTER)
    print("\n".join(smi.out))
    return 0


# --------------------------------------------------------------------------- amd-smi

AMDSMI_VERSION = "24.7.1+b446d6c"
AMDSMI_LIB_VERSION = "24.7.1.0"
AMDSMI_ROCM_VERSION = "6.3.0"


def _unit(value: Any, unit: str, fmt: str) -> Any:
    """amdsmi_commands.py: {"value", "unit"} in JSON, "v unit" when human readable."""
    if fmt == "json":
        return {"value": value, "unit": unit}
    return f"{value} {unit}" if fmt == "human" else value


def amd_static(g: dict[str, Any], what: set[str], fmt: str) -> dict[str, Any]:
    out: dict[str, Any] = {"gpu": g["index"]}
    if "asic" in what:  # amdsmi_interface.amdsmi_get_gpu_asic_info
        out["asic"] = {
            "market_name": MARKET_NAME, "vendor_id": "0x1002", "vendor_name": VENDOR.replace(",", ""),
            "subvendor_id": "0x1002", "device_id": DEVICE_ID, "rev_id": REV, "asic_serial": g["serial"],
            "oam_id": g["oam_id"], "num_compute_units": COMPUTE_UNITS, "target_graphics_version": GFX,
        }
    if "bus" in what:
        out["bus"] = {"bdf": g["bdf"], "max_pcie_width": 16, "max_pcie_speed": _unit(16, "GT/s", fmt),
                      "pcie_interface_version": "Gen 4", "slot_type": "OAM"}
    if "vbios" in what:
        out["vbios"] = {"name": "AMD MI250X", "build_date": "2022/04/20 13:29", "part_number": VBIOS,
                        "version": "022.040.003.043.000001"}
    if "driver" in what:
        out["driver"] = {"name": "amdgpu", "version": "6.8.5"}
    if "board" in what:
        out["board"] = {"model_number": "102-D65209-00", "product_serial": g["serial"][2:],
                        "fru_id": "N/A", "product_name": "Aldebaran/MI200 [Instinct MI250X/MI250]",
                        "manufacturer_name": VENDOR}
    if "numa" in what:
        out["numa"] = {"node": g["numa"], "affinity": g["numa"]}
    if "vram" in what:
        out["vram"] = {"type": "HBM", "vendor": "N/A", "size": _unit(VRAM_BYTES // 2**20, "MB", fmt),
                       "bit_width": 4096}
    return out


def amd_metric(g: dict[str, Any], what: set[str], fmt: str) -> dict[str, Any]:
    out: dict[str, Any] = {"gpu": g["index"]}
    if "usage" in what:
        out["usage"] = {"gfx_activity": _unit(0, "%", fmt), "umc_activity": _unit(0, "%", fmt),
                        "mm_activity": "N/A", "vcn_activity": ["N/A"] * 4, "jpeg_activity": ["N/A"] * 32}
    if "mem_usage" in what:
        mb = 2**20
        vals = {"total_vram": VRAM_BYTES // mb, "used_vram": VRAM_USED_BYTES // mb,
                "free_vram": VRAM_BYTES // mb - VRAM_USED_BYTES // mb,
                "total_visible_vram": VRAM_BYTES // mb, "used_visible_vram": VRAM_USED_BYTES // mb,
                "free_visible_vram": VRAM_BYTES // mb - VRAM_USED_BYTES // mb,
                "total_gtt": GTT_BYTES // mb, "used_gtt": GTT_USED_BYTES // mb,
                "free_gtt": GTT_BYTES // mb - GTT_USED_BYTES // mb}
        out["mem_usage"] = {k: _unit(v, "MB", fmt) for k, v in vals.items()}
    return out


def _human(rows: list[dict[str, Any]]) -> str:
    """amdsmi_logger._convert_json_to_human_readable: upper-case keys, YAML-like, 4 spaces."""
    def emit(obj: Any, indent: int) -> list[str]:
        lines = []
        for k, v in obj.items():
            key = str(k).upper()
            if isinstance(v, dict):
                lines.append(" " * indent + f"{key}:")
                lines += emit(v, indent + 4)
            elif isinstance(v, list):
                lines.append(" " * indent + f"{key}: [{', '.join(map(str, v))}]")
            else:
                lines.append(" " * indent + f"{key}: {v}")
        return lines

    blocks = []
    for row in rows:
        rest = {k: v for k, v in row.items() if k != "gpu"}
        blocks.append("\n".join([f"GPU: {row['gpu']}", *emit(rest, 4)]) + "\n")
    return "\n".join(blocks)


def _flatten(prefix: str, obj: Any, out: dict[str, Any]) -> None:
    if isinstance(obj, dict):
        for k, v in obj.items():
            _flatten(f"{prefix}_{k}" if prefix else k, v, out)
    else:
        out[prefix] = obj


def _print_rows(rows: list[dict[str, Any]], fmt: str) -> None:
    if fmt == "json":
        print(json.dumps(rows, indent=4))
    elif fmt == "csv":
        flat = []
        for r in rows:
            f: dict[str, Any] = {}
            _flatten("", r, f)
            flat.append(f)
        keys = list(dict.fromkeys(k for f in flat for k in f))
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(keys)
        for f in flat:
            w.writerow([f.get(k, "N/A") for k in keys])
        print(buf.getvalue(), end="")
    else:
        print(_human(rows))


class AmdSmiError(Exception):
    def __init__(self, message: str, code: int):
        super().__init__(message)
        self.message, self.code = message, code


class AmdSmiParser(argparse.ArgumentParser):
    """amdsmi_parser.py error(): invalid commands/parameters become AmdSmi exceptions."""

    def error(self, message: str) -> None:  # type: ignore[override]
        if "invalid choice: " in message:
            cmd = message.split("invalid choice: ", 1)[1].split("'")[1]
            raise AmdSmiError(f"Command '{cmd}' is invalid. Run '--help' for more info.", -1)
        if "unrecognized arguments: " in message:
            raise AmdSmiError(f"Parameter '{message.split('unrecognized arguments: ', 1)[1]}' is invalid. "
                              "Run '--help' for more info.", -2)
        print(message)
        sys.exit(0)


def amd_smi(args: list[str]) -> int:
    p = AmdSmiParser(prog="amd-smi", description="AMD System Management Interface")
    sub = p.add_subparsers(dest="command", parser_class=AmdSmiParser)

    def modifiers(sp: argparse.ArgumentParser, gpu: bool = True) -> None:
        g = sp.add_mutually_exclusive_group()
        g.add_argument("--json", action="store_true")
        g.add_argument("--csv", action="store_true")
        sp.add_argument("--file")
        sp.add_argument("--loglevel", default="ERROR")
        if gpu:
            sp.add_argument("-g", "--gpu", nargs="+")

    modifiers(sub.add_parser("version"), gpu=False)
    modifiers(sub.add_parser("list"))
    st = sub.add_parser("static")
    for short, long in (("-a", "--asic"), ("-b", "--bus"), ("-V", "--vbios"), ("-d", "--driver"), ("-v", "--vram"),
                        ("-B", "--board"), ("-u", "--numa")):
        st.add_argument(short, long, action="store_true")
    for short, long in (("-c", "--cache"), ("-R", "--process-isolation"), ("-r", "--ras"), ("-p", "--partition"),
                        ("-l", "--limit"), ("-P", "--policy"), ("-x", "--xgmi-plpd")):
        st.add_argument(short, long, action="store_true", help=argparse.SUPPRESS)
    modifiers(st)
    mt = sub.add_parser("metric")
    mt.add_argument("-u", "--usage", action="store_true")
    mt.add_argument("-m", "--mem-usage", action="store_true")
    for short, long in (("-p", "--power"), ("-c", "--clock"), ("-t", "--temperature"), ("-e", "--ecc"),
                        ("-P", "--pcie"), ("-f", "--fan"), ("-v", "--voltage-curve"), ("-o", "--overdrive"),
                        ("-l", "--perf-level"), ("-x", "--xgmi-err"), ("-E", "--energy")):
        mt.add_argument(short, long, action="store_true", help=argparse.SUPPRESS)
    modifiers(mt)
    for name in ("firmware", "bad-pages", "process", "event", "topology", "set", "reset", "monitor", "xgmi",
                 "partition", "ras", "node"):
        unsupported = sub.add_parser(name)
        unsupported.add_argument("rest", nargs=argparse.REMAINDER)
    if not args:
        p.print_help()
        return 0
    try:
        a = p.parse_args(args)
        if a.command in ("version", "list", "static", "metric"):
            pass
        else:
            sys.stderr.write(f"amd-smi (scalesweep stand-in): '{a.command}' is not supported by the stand-in\n")
            return 2
        fmt = "json" if a.json else "csv" if a.csv else "human"
        if a.command == "version":
            if fmt == "human":
                print(f"AMDSMI Tool: {AMDSMI_VERSION} | AMDSMI Library version: {AMDSMI_LIB_VERSION} | "
                      f"ROCm version: {AMDSMI_ROCM_VERSION}")
            else:
                _print_rows_plain({"tool": "AMDSMI Tool", "version": AMDSMI_VERSION,
                                   "amdsmi_library_version": AMDSMI_LIB_VERSION,
                                   "rocm_version": AMDSMI_ROCM_VERSION}, fmt)
            return 0
        gcds = _select(a.gpu)
        if a.command == "list":
            rows = [{"gpu": g["index"], "bdf": g["bdf"], "uuid": g["uuid"], "kfd_id": g["guid"],
                     "node_id": g["node_id"], "partition_id": 0} for g in gcds]
        elif a.command == "static":
            unsupported = [n for n in ("cache", "process_isolation", "ras", "partition", "limit", "policy",
                                       "xgmi_plpd") if getattr(a, n)]
            if unsupported:
                sys.stderr.write(f"amd-smi (scalesweep stand-in): static --{unsupported[0].replace('_', '-')} "
                                 "is not supported by the stand-in\n")
                return 2
            what = {n for n in ("asic", "bus", "vbios", "driver", "board", "numa", "vram") if getattr(a, n)}
            rows = [amd_static(g, what or {"asic", "bus", "vbios", "driver", "board", "numa", "vram"}, fmt)
                    for g in gcds]
        else:
            unsupported = [n for n in ("power", "clock", "temperature", "ecc", "pcie", "fan", "voltage_curve",
                                       "overdrive", "perf_level", "xgmi_err", "energy") if getattr(a, n)]
            if unsupported:
                sys.stderr.write(f"amd-smi (scalesweep stand-in): metric --{unsupported[0].replace('_', '-')} "
                                 "is not supported by the stand-in\n")
                return 2
            what = {n for n in ("usage", "mem_usage") if getattr(a, n)}
            rows = [amd_metric(g, what or {"usage", "mem_usage"}, fmt) for g in gcds]
        _print_rows(rows, fmt)
        return 0
    except AmdSmiError as exc:
        print(f"{exc.message} Error code: {exc.code}")
        return 0  # amdsmi_cli.py prints the error and ends normally


def _print_rows_plain(obj: dict[str, Any], fmt: str) -> None:
    if fmt == "json":
        print(json.dumps([obj], indent=4))
    else:
        print(",".join(obj))
        print(",".join(str(v) for v in obj.values()))


def _select(spec: list[str] | None) -> list[dict[str, Any]]:
    """-g/--gpu: ids, BDFs, UUIDs or 'all'."""
    if not spec or "all" in spec:
        return GCDS
    picked = []
    for item in spec:
        for g in GCDS:
            if item in (str(g["index"]), g["bdf"], g["uuid"]):
                picked.append(g)
                break
        else:
            raise AmdSmiError(f"GPU '{item}' is invalid. Run '--help' for more info.", -3)
    return picked


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `... | head`: end quietly
    tool, args = argv[0], argv[1:]
    code = 2
    try:
        code = rocm_smi(args) if tool == "rocm-smi" else amd_smi(args)
    except SystemExit as exc:  # argparse: usage errors exit 2
        code = exc.code if isinstance(exc.code, int) else 2
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
