"""The test stand-ins (tests/standins) behave as the real tools in what scalesweep calls
of them: ``apptainer``/``singularity`` ``--version``, ``pull --force OUT URI`` and
``inspect --json`` (``scalesweep describe-image --pull``); ``rocm-smi``/``amd-smi`` of the
fake 8-GCD MI250X node (GPU inventory and memory). Anything else the stand-ins refuse,
naming it, so a test that starts to need more fails instead of passing on a guess.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import standins  # tests/standins (pytest puts tests/ on sys.path)

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def sb(tmp_path_factory):
    """The stand-ins installed in a bin directory; ``sb.run(argv, **env)``."""
    root = tmp_path_factory.mktemp("standins")
    log = root / "standins.jsonl"
    env = dict(os.environ, **standins.install(root / "bin", log))
    env["PATH"] = f"{root / 'bin'}{os.pathsep}{env['PATH']}"

    class SB:
        dir = root
        log_path = log

        @staticmethod
        def run(argv, cwd=None, timeout=120, **extra):
            return subprocess.run(argv, cwd=cwd or root, env={**env, **extra}, check=False, capture_output=True,
                                  text=True, timeout=timeout)

        environ = env

    return SB


# --------------------------------------------------------------------------- apptainer / singularity


def test_versions(sb):
    assert sb.run(["apptainer", "--version"]).stdout == "apptainer version 1.3.6\n"
    assert sb.run(["singularity", "--version"]).stdout == "singularity-ce version 4.2.2\n"


def test_pull_writes_a_sif_that_inspect_reads(sb):
    p = sb.run(["singularity", "pull", "--force", "o.sif", "oras://registry.example.org/x/ollama:0.9.0"])
    assert p.returncode == 0, p.stderr
    attrs = json.loads(sb.run(["singularity", "inspect", "--json", "o.sif"]).stdout)["data"]["attributes"]
    assert attrs["labels"]["org.scalesweep.standin.pulled_from"] == "oras://registry.example.org/x/ollama:0.9.0"
    assert attrs["labels"]["org.label-schema.usage.singularity.deffile.from"] == "ollama:0.9.0"
    assert attrs["deffile"].startswith("bootstrap: docker\n")
    p = sb.run(["apptainer", "pull", "o.sif", "docker://ubuntu:22.04"])
    assert p.returncode == 255 and "will not overwrite" in p.stderr
    p = sb.run(["apptainer", "pull", "f.sif", "ftp://example.org/x.sif"])
    assert p.returncode == 255 and "Unsupported transport type: ftp" in p.stderr
    p = sb.run(["apptainer", "inspect", "--json", "missing.sif"])
    assert p.returncode == 255 and "Failed to open image" in p.stderr


def test_what_scalesweep_does_not_call_is_refused_by_name(sb):
    for argv in (["apptainer", "exec", "x.sif", "true"], ["singularity", "build", "x.sif", "x.def"]):
        p = sb.run(argv)
        assert p.returncode == 255 and "not supported by the stand-in" in p.stderr, argv
    recs = standins.read_log(sb.log_path)
    assert any(r["tool"] == "singularity" and r["argv"][1] == "build" and r["exit_status"] == 255 for r in recs)


# --------------------------------------------------------------------------- rocm-smi / amd-smi


def test_rocm_smi_lists_eight_mi250x_gcds(sb):
    p = sb.run(["rocm-smi", "--showproductname", "--showmeminfo", "vram", "--json"])
    assert p.returncode == 0, p.stderr
    cards = json.loads(p.stdout)
    assert sorted(cards) == [f"card{i}" for i in range(8)]
    assert {c["GFX Version"] for c in cards.values()} == {"gfx90a"}
    assert {c["Card Series"] for c in cards.values()} == {"AMD INSTINCT MI250X"}
    assert {c["VRAM Total Memory (B)"] for c in cards.values()} == {"68702699520"}
    memory = json.loads(sb.run(["rocm-smi", "--showmeminfo", "vram", "--json"]).stdout)
    assert {c["VRAM Total Used Memory (B)"] for c in memory.values()} == {"10993664"}
    assert "Card Series" not in memory["card0"]
    for argv in (["rocm-smi", "--showbus", "--json"], ["rocm-smi", "--showproductname"]):
        p = sb.run(argv)
        assert p.returncode == 2 and "not supported by the stand-in" in p.stderr, argv


def test_amd_smi_static_and_metric_list_eight_mi250x(sb):
    p = sb.run(["amd-smi", "static", "--asic", "--vram", "--json"], ROCR_VISIBLE_DEVICES="0")
    assert p.returncode == 0, p.stderr
    rows = json.loads(p.stdout)
    assert [r["gpu"] for r in rows] == list(range(8))  # visibility does not hide devices from the SMI
    assert {r["asic"]["market_name"] for r in rows} == {"AMD Instinct MI250X"}
    assert {r["asic"]["target_graphics_version"] for r in rows} == {"gfx90a"}
    assert rows[0]["vram"]["size"] == {"value": 65520, "unit": "MB"}
    used = json.loads(sb.run(["amd-smi", "metric", "--mem-usage", "--json"]).stdout)
    assert [r["mem_usage"]["used_vram"] for r in used] == [{"value": 10, "unit": "MB"}] * 8
    p = sb.run(["amd-smi", "static", "--bus", "--json"])
    assert p.returncode == 2 and "not supported by the stand-in" in p.stderr
    recs = standins.read_log(sb.log_path)
    assert any(r["tool"] == "amd-smi" and r["argv"][:2] == ["amd-smi", "static"] for r in recs)
