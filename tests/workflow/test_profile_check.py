"""The profile agrees with the site, checked while the workflow is parsed (issue #28): not
in a params function that Snakemake happens to evaluate when it prints a job, but before
any job, from this run's command line as Snakemake reads it (its profiles applied)."""

from __future__ import annotations

import re

from conftest import REPO, run_snakemake, tiny_config

LOCAL_SLURM = str(REPO / "profiles" / "local-slurm")


def listed_jobs(proc) -> list[str]:
    return re.findall(r"^(?:local)?rule (\w+):", proc.stdout + proc.stderr, re.M)


def test_a_slurm_profile_on_a_site_without_slurm_is_refused_before_any_job(campaign):
    wd = campaign(tiny_config())
    proc = run_snakemake(wd, "-n", "--profile", LOCAL_SLURM, "--config", "site=local",
                         check=False, timeout=300)
    assert proc.returncode != 0
    assert "a Slurm profile (its default-resources name slurm_partition" in proc.stdout + proc.stderr
    assert "site 'local'" in proc.stdout + proc.stderr and listed_jobs(proc) == []


def test_a_slurm_site_without_its_profile_is_refused_before_any_job(campaign):
    wd = campaign(tiny_config(site="local-slurm"))
    proc = run_snakemake(wd, "-n", check=False, timeout=300)
    assert proc.returncode != 0
    assert "site 'local-slurm' is a Slurm site (scheduler: slurm)" in proc.stdout + proc.stderr
    assert listed_jobs(proc) == []
    # a command that runs no job is not refused
    assert run_snakemake(wd, "--list-rules", timeout=300).returncode == 0


def test_the_check_is_no_params_function():
    """No rule carries the check as a param (Snakemake evaluates params when it prints
    or runs a job: too late, and an undocumented moment to rely on)."""
    rules = [REPO / "Snakefile", *(REPO / "workflow" / "rules").glob("*.smk")]
    assert not [p for p in rules if "profile_check" in p.read_text()]
    common = (REPO / "workflow" / "rules" / "common.smk").read_text()
    # checked once, while the workflow is parsed, before any job
    assert "_PROFILE_PROBLEM = INVOCATION.problem()" in common


def test_a_report_without_a_core_budget_is_parsed(campaign):
    """`snakemake --report` gives no --cores: no rule may need a core budget to be parsed
    (aggregate's threads were `workflow.cores`, which then refused the whole workflow)."""
    wd = campaign(tiny_config())
    proc = run_snakemake(wd, "--report", str(wd / "report.html"), check=False, timeout=300)
    out = proc.stdout + proc.stderr
    assert "number of cores" not in out, out[-3000:]
    assert "results/summary/runs.csv marked for report but does not exist" in out
