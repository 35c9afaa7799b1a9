"""`scalesweep rerun` with `--config only=...` never measures outside the selection
(issue #40, case 3): a chosen run whose block partner is outside the selection is refused,
nothing moved, the block named with the command whose selection includes the partner;
that command measures the block whole and nothing else; and a point Snakemake's own plan
would measure outside the selection (here: one named after `--`) is refused too.

The campaigns compare native with native-aa (the A/A runtime: no image to build), so a
block is cnn_ddp/native-aa/<geometry>/rep<k>/{native,native-aa}; `only={runtimes:
[native]}` selects native's runs of those blocks and not their partners.
"""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest

from conftest import SNAKEMAKE, measured_by, run_files_digest, run_snakemake, tiny_config
from scalesweep.campaign.rerun import foreign_points, split_blocks
from scalesweep.campaign.usage import UsageError
from scalesweep.plan.sweep import Selection

pytestmark = pytest.mark.integration

SCALESWEEP = str(Path(SNAKEMAKE).parent / "scalesweep")
PROFILE = str(Path(__file__).resolve().parents[2] / "profiles" / "local")
BLOCK = "cnn_ddp/native-aa/n1-g0-r1-t1/rep1"
NATIVE, PARTNER = f"{BLOCK}/native", f"{BLOCK}/native-aa"


def aa_config(**workloads) -> dict:
    config = tiny_config()
    config["workloads"]["cnn_ddp"]["epochs"] = 1
    config["workloads"].update(workloads)
    config["sweep"].update(runtimes=["native", "native-aa"], ranks_per_node=[1])
    return config


def scalesweep(workdir: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([SCALESWEEP, *args], cwd=workdir, capture_output=True, text=True,
                          timeout=600)


def suggested(refusal: str) -> list[str]:
    """The command a refusal gives (its last line), runnable from this checkout."""
    line = refusal.strip().splitlines()[-1].strip()
    assert line.startswith("scalesweep rerun "), refusal
    return [SCALESWEEP, *shlex.split(line)[1:]]


def test_block_partner_outside_only_is_refused_and_the_advice_measures_the_block(campaign):
    """The issue's case: native's run failed (an unreadable metrics.json), its partner
    native-aa never measured and outside `only`: refused (exit 2), nothing moved or
    measured, the block and both runs named; the suggested command measures exactly the
    block (both runs), every other file byte-identical."""
    workdir = campaign(aa_config(cnn_b={**aa_config()["workloads"]["cnn_ddp"]}))
    # measure native's run only (the plain workflow's own selection), then damage it
    run_snakemake(workdir, "--profile", PROFILE, "results/summary/runs.csv", "--config",
                  "only={workloads: [cnn_ddp], runtimes: [native]}")
    metrics = workdir / "results" / "runs" / NATIVE / "metrics.json"
    bad = metrics.read_text()[:100]
    metrics.write_text(bad)  # truncated: the point is failed
    before = run_files_digest(workdir)

    proc = scalesweep(workdir, "rerun", "--failed", "--profile", PROFILE,
                      "--config", "only={workloads: [cnn_ddp], runtimes: [native]}")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    err = " ".join(proc.stderr.split())
    assert (f"{BLOCK}: chosen native (failed); outside the selection native-aa (missing)"
            in err), proc.stderr
    assert "nothing was moved or measured" in err and "Measuring" not in proc.stdout
    assert run_files_digest(workdir) == before
    assert not (workdir / "results" / "runs" / PARTNER).exists()
    assert not (workdir / "results" / "runs" / NATIVE / "history").exists()
    command = suggested(proc.stderr)
    assert "only={workloads: [cnn_ddp], runtimes: [native, native-aa]}" in command, command

    run = subprocess.run([*command, "--tables-only"], cwd=workdir, capture_output=True,
                         text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert measured_by(run.stdout + run.stderr) == [NATIVE, PARTNER]  # and nothing else
    assert (workdir / "results" / "runs" / PARTNER / "metrics.json").is_file()
    (kept,) = (workdir / "results" / "runs" / NATIVE / "history").iterdir()
    assert (kept / "metrics.json").read_text() == bad  # the failed run, kept
    assert not (workdir / "results" / "runs" / "cnn_b").exists()  # outside: never measured


def test_a_point_snakemake_would_add_outside_only_is_refused(campaign):
    """A target after `--` outside the selection (another workload's point) is in
    Snakemake's plan: refused before anything moves, the point named; with -n too."""
    workdir = campaign(aa_config(cnn_b={**aa_config()["workloads"]["cnn_ddp"]}))
    outside = "cnn_b/native-aa/n1-g0-r1-t1/rep1/native"
    for dry in ([], ["-n"]):
        proc = scalesweep(workdir, "rerun", "--missing", *dry, "--profile", PROFILE,
                          "--config", "only={workloads: [cnn_ddp]}", "--",
                          f"results/runs/{outside}/metrics.json")
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert "Snakemake would also measure 1 point(s) outside only={workloads: [cnn_ddp]}" \
            in proc.stderr and outside in proc.stderr, proc.stderr
        assert not (workdir / "results").exists()  # nothing moved, nothing measured
    # without the foreign target the same command plans the selection's block alone
    ok = scalesweep(workdir, "rerun", "--missing", "-n", "--profile", PROFILE,
                    "--config", "only={workloads: [cnn_ddp]}")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "Measuring 2 point(s) again" in ok.stdout and "cnn_b" not in ok.stdout


def test_split_blocks_and_foreign_points():
    partners = {PARTNER: NATIVE, "cnn_b/native-aa/n1-g0-r1-t1/rep2/native": "x"}
    native = Selection(runtimes=frozenset({"native"}))
    assert split_blocks(partners, native) == {BLOCK: [PARTNER]}
    assert split_blocks(partners, Selection()) == {}
    assert split_blocks(partners, Selection(runtimes=frozenset({"native-aa"}))) == {}
    cnn = Selection(workloads=frozenset({"cnn_ddp"}))
    assert foreign_points([NATIVE, "cnn_b/native/n1-g0-r1-t1/rep1/native"], cnn) == [
        "cnn_b/native/n1-g0-r1-t1/rep1/native"]
    with pytest.raises(UsageError, match="outside only"):
        foreign_points(["cnn_b/native/n1-g0-r1-t1/rep1/native"], cnn, refuse=True)
