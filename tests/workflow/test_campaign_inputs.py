"""Issue #40, cases 4, 5 and 9b: what a campaign runs from and reads besides its config is
refused before any job, naming the path (and key) and the real reason: a campaign
directory or interpreter path with a space and "ü" (Snakemake runs a script: rule's
interpreter unquoted), a binary, huge or overfull prompts file, a hostile Slurm account.
Real directories, files and Snakemake processes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, SNAKEMAKE, config_text, run_snakemake, tiny_config
from scalesweep.plan.config import ConfigError, check_config
from scalesweep.run.slurm import account_problem


def _write_campaign(workdir: Path, config: dict) -> Path:
    (workdir / "config").mkdir(parents=True, exist_ok=True)
    (workdir / "config" / "config.yaml").write_text(config_text(config))
    return workdir


def _llm_config(prompts: str, **workload) -> dict:
    cfg = tiny_config()
    cfg["models"] = {"m": {"source": "synthetic"}}
    cfg["workloads"] = {"llm": {"payload": "llm", "model": "m", "prompts": prompts, **workload}}
    cfg["sweep"]["ranks_per_node"] = [1]
    return cfg


# --- case 4: the campaign's own paths -----------------------------------------------------

def test_a_campaign_directory_with_a_space_and_umlaut_is_refused_before_any_job(tmp_path):
    workdir = _write_campaign(tmp_path / "au dit ü", tiny_config())
    for args in (("-n",), ("--cores", "1")):  # a dry run, and a real run: nothing measured
        proc = run_snakemake(workdir, *args, check=False, timeout=300)
        out = proc.stdout + proc.stderr
        assert proc.returncode != 0, out[-3000:]
        assert (f"the campaign directory {str(workdir)!r} has a space and the non-ASCII 'ü': "
                "the workflow hands this path to shells") in out, out[-3000:]
        assert f"Rename or move it (e.g. {str(tmp_path / 'au_dit_u')!r}). Nothing ran" in out, out[-3000:]
        assert not (workdir / "results").exists() and not (workdir / "resources").exists()


def test_an_interpreter_path_with_a_space_is_refused_before_any_job(tmp_path):
    """The repository's virtual environment as if made in `au dit ü/` (its pyvenv.cfg, its
    site-packages): Snakemake would run every script: rule as `<that path> <script>`
    unquoted. The campaign directory itself is a plain one."""
    venv = tmp_path / "au dit ü" / ".venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text((REPO / ".venv" / "pyvenv.cfg").read_text())
    (venv / "lib").symlink_to(Path(sys.prefix) / "lib")
    (venv / "bin" / "python").symlink_to(os.path.realpath(sys.executable))
    python = str(venv / "bin" / "python")
    probe = subprocess.run([python, "-c", "import sys, snakemake; print(sys.executable)"],
                           capture_output=True, text=True, check=True)
    assert probe.stdout.strip() == python  # the path Snakemake would interpolate
    workdir = _write_campaign(tmp_path / "campaign", tiny_config())
    proc = subprocess.run([python, "-m", "snakemake", "-s", str(REPO / "Snakefile"),
                           "--directory", str(workdir), "-n"],
                          cwd=workdir, capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    assert (f"the Python interpreter running this workflow, {python!r}, has a space and the "
            "non-ASCII 'ü': Snakemake runs every script: rule") in out, out[-3000:]
    assert "the campaign directory" not in out  # a plain one: not named
    assert not (workdir / "results").exists()


def test_the_repositorys_own_interpreter_and_directory_pass():
    from scalesweep.plan.inputs import path_problems

    assert path_problems(REPO, REPO) == []
    assert Path(SNAKEMAKE).is_file()


# --- case 5: prompts files ----------------------------------------------------------------

def test_a_binary_prompts_file_stops_snakemake_before_any_job(tmp_path):
    binary = tmp_path / "prompts.bin"
    binary.write_bytes(bytes([0xC4, 0x00, 0xFF, 0x10]) * 256)
    workdir = _write_campaign(tmp_path / "campaign", _llm_config(str(binary)))
    proc = run_snakemake(workdir, "-n", check=False, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    assert (f"config key workloads.llm.prompts: {str(binary)!r} is not UTF-8 text: "
            "byte 0xc4 at offset 0") in out, out[-3000:]
    assert not (workdir / "results").exists() and not (workdir / "resources").exists()


def test_a_large_prompts_file_is_refused_by_its_size_without_reading_it(tmp_path):
    big = tmp_path / "big.txt"
    with open(big, "wb") as fh:  # 100 MiB, sparse: made at once
        fh.truncate(100 * 1024 * 1024)
    with pytest.raises(ConfigError) as err:
        check_config(_llm_config(str(big)))
    assert str(err.value) == (
        f"config key workloads.llm.prompts: {str(big)!r} is 100.0 MiB, more than config "
        "key workloads.llm.max_prompts_mb (16 MiB; a prompt set that large runs for hours): use "
        "a smaller file, or raise max_prompts_mb (at most 1024)")
    # raised, the size passes: sparse zeros are NUL bytes, not text, refused as such
    with pytest.raises(ConfigError, match=r"is not text: a NUL byte at offset 0"):
        check_config(_llm_config(str(big), max_prompts_mb=101))


def test_prompts_files_are_counted_parsed_and_named(tmp_path):
    many = tmp_path / "many.txt"
    many.write_text("# a comment\n\n" + "".join(f"prompt {i}\n" for i in range(11)))
    with pytest.raises(ConfigError) as err:
        check_config(_llm_config(str(many), max_prompts=10))
    assert (f"config key workloads.llm.prompts: {str(many)!r} holds 11 prompts, more "
            "than config key workloads.llm.max_prompts (10;") in str(err.value)
    check_config(_llm_config(str(many), max_prompts=11))
    empty = tmp_path / "empty.txt"
    empty.write_text("# nothing\n\n")
    with pytest.raises(ConfigError, match=r"workloads.llm.prompts: .*: no prompts"):
        check_config(_llm_config(str(empty)))
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "a"}\n{not json\n')
    with pytest.raises(ConfigError, match=rf"workloads.llm.prompts: .*{bad}:2: not JSON"):
        check_config(_llm_config(str(bad)))
    with pytest.raises(ConfigError, match=r"workloads.llm.prompts: 'config/prompts/none.txt' .* does not exist"):
        check_config(_llm_config("config/prompts/none.txt"))
    with pytest.raises(ConfigError, match=r"is not a regular file"):
        check_config(_llm_config(str(tmp_path)))
    check_config(_llm_config("config/prompts/default.txt"))  # the default passes
    # the bounds are the schema's
    with pytest.raises(ConfigError, match=r"max_prompts_mb: 2000 is greater than the maximum of 1024"):
        check_config(_llm_config("config/prompts/default.txt", max_prompts_mb=2000))


# --- case 9b: each refused Slurm account says why ----------------------------------------

def test_a_hostile_slurm_account_is_refused_for_its_characters_not_as_empty(tmp_path, monkeypatch):
    msg = account_problem("x$(touch pwned)", {})
    assert msg.startswith("the Slurm account 'x$(touch pwned)' (default-resources slurm_account) "
                          "has characters no Slurm account has ('$' '(' ' ' ')')"), msg
    assert "empty" not in msg
    msg = account_problem("'$SBATCH_ACCOUNT'", {"SBATCH_ACCOUNT": "a;b"})
    assert msg.startswith("the Slurm account 'a;b' (from $SBATCH_ACCOUNT) has characters"), msg
    assert "which is set to nothing" in account_problem("'$SBATCH_ACCOUNT'", {"SBATCH_ACCOUNT": " "})
    assert "which is not set" in account_problem("'$SBATCH_ACCOUNT'", {})
    assert account_problem("abc-123_x.y", {}) is None
    # the workflow itself, on a Slurm site: refused before any job, the file never made
    cfg = tiny_config()
    cfg["site"] = "local-slurm"
    workdir = _write_campaign(tmp_path / "campaign", cfg)
    pwned = tmp_path / "pwned"
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    proc = run_snakemake(workdir, "-n", "--default-resources", f"slurm_account='x$(touch {pwned})'",
                         "slurm_partition=batch", check=False, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    assert f"the Slurm account 'x$(touch {pwned})' (default-resources slurm_account) has characters" \
        in out, out[-3000:]
    assert "account is empty" not in out
    assert not pwned.exists()
