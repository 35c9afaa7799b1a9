"""``scalesweep init`` and ``scalesweep run`` (campaign/deploy.py, issue #42): the campaign
directory it makes, and the Snakemake command line it runs."""

from __future__ import annotations

import sys

import pytest

from scalesweep.campaign.deploy import init, snakemake_argv
from scalesweep.campaign.usage import UsageError
from scalesweep.platform.code import CODE_ROOT, PROFILES_DIR


def test_run_is_snakemake_with_the_packages_snakefile(tmp_path):
    argv = snakemake_argv(["--profile", "local", "-n", "summary"], here=tmp_path)
    assert argv[:5] == [sys.executable, "-m", "snakemake", "-s", str(CODE_ROOT / "Snakefile")]
    assert argv[5:] == ["--profile", str(PROFILES_DIR / "local"), "-n", "summary"]
    # --profile=NAME and an abbreviation argparse takes
    assert snakemake_argv(["--profile=frontier"], here=tmp_path)[-2:] == [
        "--profile", str(PROFILES_DIR / "frontier")]
    assert snakemake_argv(["--prof", "odo"], here=tmp_path)[-1] == str(PROFILES_DIR / "odo")


def test_a_profile_the_package_has_not_is_snakemakes_to_find(tmp_path):
    # a user's global profile (~/.config/snakemake/NAME): passed on as it is
    assert snakemake_argv(["--profile", "mysite"], here=tmp_path)[-1] == "mysite"
    # a directory here of a packaged profile's name wins, and so does a path
    (tmp_path / "local").mkdir()
    assert snakemake_argv(["--profile", "local"], here=tmp_path)[-1] == "local"
    assert snakemake_argv(["--profile", "./x/local"], here=tmp_path)[-1] == "./x/local"


@pytest.mark.parametrize("given", [["-s", "Other"], ["-sOther"], ["--snakefile=Other"],
                                   ["--snakef", "Other"]])
def test_another_snakefile_is_refused(tmp_path, given):
    with pytest.raises(UsageError, match="its own Snakefile"):
        snakemake_argv(["-n", *given], here=tmp_path)


def test_init_copies_the_config_folder_and_never_writes_over_a_config(tmp_path):
    target = init(tmp_path / "c")
    assert target.read_text() == (CODE_ROOT / "config" / "config.yaml").read_text()
    # the site configs the profiles name (profiles/frontier: config/frontier.yaml)
    assert (tmp_path / "c" / "config" / "frontier.yaml").is_file()
    target.write_text("mine\n")
    with pytest.raises(UsageError, match="exists: nothing was changed"):
        init(tmp_path / "c")
    assert target.read_text() == "mine\n"
