"""Why the container differs (issue #43): the attribution arithmetic on constructed
campaigns (total = isolation + stack on the log scale, the CI of a difference of
independent estimates, the verdicts over the campaign), the control image's selection,
the host stack's checks, and the first screen's sentence."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from conftest import REPO, tiny_config
from scalesweep.analyse.attribution import COLUMNS, attribution_table, stack_component
from scalesweep.images import hoststack
from scalesweep.images.process import BuildError
from scalesweep.plan.imageset import ImageConfigError, workload_image
from scalesweep.report.pages import front_page

GEOM = dict(workload="cnn_ddp", model=np.nan, nodes=1, gpus=0, ranks=2, threads=1)


def overhead_rows(values: dict, margin=5.0, n=8, **geom) -> pd.DataFrame:
    """overhead.csv rows: runtime -> (overhead %, CI low, CI high, verdict), n pairs each."""
    return pd.DataFrame([dict(GEOM, **geom, runtime=rt, arm=rt, overhead_pct=o,
                              overhead_ci95_low_pct=lo, overhead_ci95_high_pct=hi,
                              verdict=v, margin_pct=margin, n=n)
                         for rt, (o, lo, hi, v) in values.items()])


def test_stack_is_total_less_isolation_with_the_ci_of_a_difference():
    t, i = (-16.0, -20.0, -12.0), (1.0, -2.0, 4.0)
    got = stack_component(t, i, margin_pct=5.0, n_total=8, n_isolation=6)
    # each standard error from its CI over t(n - 1); Welch-Satterthwaite for the difference
    se_t = (math.log(0.88) - math.log(0.80)) / (2 * stats.t.ppf(0.975, 7))
    se_i = (math.log(1.04) - math.log(0.98)) / (2 * stats.t.ppf(0.975, 5))
    d = math.log(0.84) - math.log(1.01)
    se = math.sqrt(se_t ** 2 + se_i ** 2)
    df = se ** 4 / (se_t ** 4 / 7 + se_i ** 4 / 5)
    q = stats.t.ppf(0.975, df)
    assert got["stack_df"] == pytest.approx(df)
    assert got["stack_pct"] == pytest.approx((0.84 / 1.01 - 1) * 100)
    assert got["stack_ci95_low_pct"] == pytest.approx(math.expm1(d - q * se) * 100)
    assert got["stack_ci95_high_pct"] == pytest.approx(math.expm1(d + q * se) * 100)
    assert got["p_value"] == pytest.approx(2 * stats.t.sf(abs(d) / se, df))
    lower, upper = math.log(0.95), math.log(1.05)
    assert got["equivalence_p_value"] == pytest.approx(
        max(stats.t.sf((d - lower) / se, df), stats.t.cdf((d - upper) / se, df)))
    assert got["stack_ci95_low_pct"] < got["stack_pct"] < got["stack_ci95_high_pct"]
    # total = isolation x stack, exactly, on the ratio scale
    assert (1 + got["stack_pct"] / 100) * 1.01 == pytest.approx(0.84)
    # without the pairs: the normal quantile; no CI on a side: no stack, never a number
    z = stack_component(t, i, margin_pct=5.0)
    assert math.isinf(z["stack_df"]) and z["stack_pct"] == pytest.approx(got["stack_pct"])
    assert math.isnan(stack_component((-16.0, np.nan, -12.0), i, 5.0)["stack_pct"])
    # a margin of 100% or more: no lower bound, no domain error
    assert stack_component(t, i, margin_pct=150.0)["equivalence_p_value"] < 0.05


def test_a_faster_image_with_equivalent_isolation_is_a_faster_stack():
    table = attribution_table(overhead_rows({
        "native-aa": (0.5, -1.0, 2.0, "equivalent"),
        "charliecloud": (-16.0, -20.0, -12.0, "faster"),
        "charliecloud+squashfs": (3.0, -30.0, 40.0, "inconclusive"),
        "charliecloud+control": (1.0, -2.0, 4.0, "equivalent")}))
    assert list(table.columns) == COLUMNS
    by = table.set_index("runtime")
    # native-aa has no control; charliecloud+squashfs runs another mode than the control's
    # (its FUSE mount's cost would land in "stack"): neither is attributed
    assert set(by.index) == {"charliecloud"}
    cc = by.loc["charliecloud"]
    assert cc["control_runtime"] == "charliecloud+control" and cc["phase"] == "steady state"
    assert cc["verdict"] == "faster" and cc["verdict_text"].startswith("faster by 16.8%")
    assert cc["explanation"] == ("faster by 16.0%: isolation equivalent within +-5%; "
                                 "stack faster by 16.8%")
    assert (table["comparisons"] == 1).all()


def test_equivalent_stack_and_the_campaign_level_adjustment():
    # two stack components: one tight around 0 (equivalent), one whose difference has
    # p 0.037 alone and q 0.074 over the two: not a difference over the campaign
    rows = pd.concat([
        overhead_rows({"charliecloud": (0.2, -1.0, 1.4, "equivalent"),
                       "charliecloud+control": (0.0, -1.0, 1.0, "equivalent")}, ranks=1),
        overhead_rows({"charliecloud": (5.0, 0.6, 10.0, "slower"),
                       "charliecloud+control": (0.0, -1.0, 1.0, "equivalent")}, ranks=2)])
    table = attribution_table(rows).set_index("ranks")
    assert table.loc[1, "verdict"] == "equivalent"
    assert table.loc[2, "p_value"] == pytest.approx(0.0369, abs=5e-4)
    assert table.loc[2, "verdict_unadjusted"] == "slower"
    q = stats.false_discovery_control(table["p_value"].to_numpy(), method="bh")
    assert table["q_value"].to_numpy() == pytest.approx(q) and q[1] > 0.05
    assert table.loc[2, "verdict"] == "inconclusive"
    assert "not significant over the campaign's 2 comparisons" in table.loc[2, "verdict_text"]


def test_each_measured_phase_of_the_decomposition_is_attributed():
    overhead = overhead_rows({"charliecloud": (-16.0, -20.0, -12.0, "faster"),
                              "charliecloud+control": (1.0, -2.0, 4.0, "equivalent")})
    decomposition = pd.DataFrame([
        dict(GEOM, runtime=rt, component=c, component_label=c, measured=m, overhead_pct=o,
             overhead_ci95_low_pct=o - 5, overhead_ci95_high_pct=o + 5, verdict="x")
        for rt, o in (("charliecloud", 30.0), ("charliecloud+control", 10.0))
        for c, m in (("startup", True), ("mpi", False), ("compute", True))])
    table = attribution_table(overhead, decomposition)
    # mpi: not measured; compute: the steady state's own comparison, not twice
    assert list(table["phase"]) == ["steady state", "startup"]
    startup = table.iloc[1]
    assert startup["stack_pct"] == pytest.approx((1.3 / 1.1 - 1) * 100)
    assert startup["margin_pct"] == 5.0  # the comparison's own margin, from overhead.csv


def test_no_control_no_rows():
    table = attribution_table(overhead_rows({"charliecloud": (1.0, 0.0, 2.0, "slower")}))
    assert table.empty and list(table.columns) == COLUMNS
    assert attribution_table(pd.DataFrame(), None).empty


def test_the_first_screen_says_why():
    table = attribution_table(overhead_rows({
        "charliecloud": (-16.0, -20.0, -12.0, "faster"),
        "charliecloud+control": (1.0, -2.0, 4.0, "equivalent")}))
    html = front_page({"attribution": table})
    assert "Why: isolation vs software stack" in html
    assert ("faster by 16.0%: isolation equivalent within +-5%; stack faster by 16.8%"
            in html)
    assert "Why:" not in front_page({"attribution": table.iloc[0:0]})


def _images_config():
    config = tiny_config()
    config["sweep"]["runtimes"] = ["native", "charliecloud", "charliecloud+control"]
    config["containers"] = {"image": ["default", "control"], "images": {
        "default": {"builder": "charliecloud", "recipe": "containers/charliecloud/Dockerfile",
                    "requirements": "envs/payload-requirements.txt", "prebuilt": "",
                    "format": "dir", "fakeroot": False, "control": False},
        "control": {"builder": "charliecloud",
                    "recipe": "containers/charliecloud/Dockerfile.control",
                    "requirements": "envs/payload-requirements.txt", "prebuilt": "",
                    "format": "dir", "fakeroot": False, "control": True}}}
    return config


def test_the_control_token_runs_the_control_image_and_no_other():
    config = _images_config()
    assert workload_image(config, "cnn_ddp", "charliecloud").name == "default"
    assert workload_image(config, "cnn_ddp", "charliecloud+control").name == "control"
    config["containers"]["image"] = ["default"]
    with pytest.raises(ImageConfigError, match="charliecloud\\+control runs a control image"):
        workload_image(config, "cnn_ddp", "charliecloud+control")
    config["containers"]["image"] = ["control"]
    with pytest.raises(ImageConfigError, match="run by <runtime>\\+control only"):
        workload_image(config, "cnn_ddp", "charliecloud")


def test_the_host_stack_is_the_interpreters_own_and_the_release_must_be_the_bases():
    import sys
    import sysconfig

    facts = hoststack.interpreter(sys.executable)
    assert facts["prefix"] == sys.base_prefix and facts["version"] == sys.version.split()[0]
    assert facts["shared"] == bool(sysconfig.get_config_var("Py_ENABLE_SHARED"))
    assert len(facts["executable_sha256"]) == 64
    release = {"ID": "debian", "VERSION_ID": "12", "VERSION_CODENAME": "bookworm"}
    assert hoststack.check_release("bookworm", release)["VERSION_CODENAME"] == "bookworm"
    with pytest.raises(BuildError, match="Debian trixie and this host runs debian bookworm"):
        hoststack.check_release("trixie", release)
    with pytest.raises(BuildError, match="this host runs ubuntu noble"):
        hoststack.check_release("bookworm", {"ID": "ubuntu", "VERSION_CODENAME": "noble"})


@pytest.mark.parametrize("entry, said", [
    ({"prebuilt": "docker://example.org/x:1"}, "pull 'docker://example.org/x:1'"),
    ({"prebuilt": "/images/x.sif", "builder": "apptainer", "format": "sif"},
     "local '/images/x.sif'"),
])
def test_a_control_image_that_cannot_carry_the_hosts_stack_is_refused(entry, said):
    from scalesweep.plan.imageset import check_image, image_spec

    config = _images_config()
    config["containers"]["images"]["control"].update(entry)
    with pytest.raises(ImageConfigError, match=f"containers.images.control.control: .*{said}"):
        check_image(image_spec(config, "control"), config["_site"])


def test_the_control_modes_command_lines():
    """charliecloud+control: ch-run of a directory, as charliecloud; podman+control: the
    control image from the default driver's (overlay) storage, as podman."""
    from scalesweep.platform.runtimes import runtime
    from scalesweep.platform.site import load_site

    local = load_site("local")
    image = "/c/resources/images/control"
    for token, plain in (("charliecloud+control", "charliecloud"), ("podman+control", "podman")):
        rt, base = runtime(token), runtime(plain)
        assert rt.runs_control and not base.runs_control
        site, plain_site = rt.site_facts(local, image), base.site_facts(local, image)
        assert site.mode == "control"
        assert rt.exec_prefix(site, [], "/mnt/code") == base.exec_prefix(plain_site, [], "/mnt/code")
    assert runtime("charliecloud+control").mode_formats() == ("dir",)


def test_a_release_interpreter_is_installed_not_copied():
    """The host's interpreter at prefix /usr (a venv of Debian's python3, as tools/install.sh
    makes on a plain Debian host) is never bound and copied (that is the host's whole
    /usr): the recipe installs the release's python3 and checks its version."""
    facts = {"prefix": "/usr", "version": "3.11.2", "system": True}
    assert hoststack.build_binds_and_args(facts) == (
        {}, {"HOST_PYTHON_PREFIX": "", "HOST_PYTHON_VERSION": "3.11.2"})
    pyenv = {"prefix": "/root/.pyenv/versions/3.11.7", "version": "3.11.7", "system": False}
    assert hoststack.build_binds_and_args(pyenv) == (
        {"/root/.pyenv/versions/3.11.7": "/hostpython"},
        {"HOST_PYTHON_PREFIX": "/root/.pyenv/versions/3.11.7", "HOST_PYTHON_VERSION": "3.11.7"})
    if __import__("sys").base_prefix == "/usr":
        assert hoststack.interpreter(__import__("sys").executable)["system"]


def test_an_apptainer_control_image_is_built_from_the_control_definition():
    """Frontier's Apptainer builds a control image too (containers/apptainer/control.def,
    the host release's registry image): accepted, run by apptainer+control only."""
    from scalesweep.plan.imageset import check_image, image_spec
    from scalesweep.plan.config_read import load_config

    config = load_config([REPO / "config" / "config.yaml", REPO / "config" / "frontier.yaml",
                          REPO / "config" / "frontier_attribution.yaml"])
    spec = image_spec(config, "control")
    assert (spec.builder, spec.format, spec.control) == ("apptainer", "sif", True)
    check_image(spec, config["_site"])
    assert workload_image(config, "cnn_ddp", "apptainer+control").name == "control"
    assert workload_image(config, "cnn_ddp", "apptainer").name == "pytorch"
