"""Images per workload (issue #18): containers.images by name, each built, pulled or used
in place; which rule makes each; every bad combination refused before any job, naming
the key and the value."""

from __future__ import annotations

import copy
import json
import os

import pytest

from conftest import REPO, run_snakemake, tiny_config, write_site
from scalesweep.plan.config import ConfigError, validated
from scalesweep.plan.config_read import load_config
from scalesweep.plan.imageset import image_spec, runtime_image, used_images, workload_image
from scalesweep.plan.sweep import sweep_points

FRONTIER = [REPO / "config" / "config.yaml", REPO / "config" / "frontier.yaml"]


def frontier_config() -> dict:
    return load_config(FRONTIER)


def test_frontier_workloads_name_their_images():
    """The CNN runs the PyTorch/ROCm image, the LLM workloads the Ollama image; each is
    built once (one SIF each) and shared by every workload naming it."""
    config = frontier_config()
    assert workload_image(config, "cnn_ddp", "apptainer-hostmpi").name == "pytorch"
    assert workload_image(config, "cnn_dp", "apptainer").name == "pytorch"
    assert workload_image(config, "llm_astrollama", "apptainer").name == "ollama"
    images = used_images(config, sweep_points(config))
    assert sorted(images) == ["ollama", "pytorch"]
    assert {s.path for s in images.values()} == {"resources/images/pytorch.sif", "resources/images/ollama.sif"}
    assert all(s.how == "build" and s.fakeroot and s.builder == "apptainer" for s in images.values())
    assert images["ollama"].recipe == "containers/apptainer/ollama.def"
    points = sweep_points(config)
    assert runtime_image(config, "apptainer-hostmpi", points).name == "pytorch"


def test_how_each_image_is_obtained():
    config = validated(tiny_config(containers={"images": {
        "built": {},
        "sqfs": {"format": "squashfs"},
        "pulled": {"builder": "apptainer", "prebuilt": "oras://ghcr.io/x/pytorch:1"},
        "inplace": {"builder": "apptainer", "prebuilt": "/images/p.sif"},
    }, "image": "built"}))
    by = {n: image_spec(config, n) for n in ("built", "sqfs", "pulled", "inplace")}
    assert [(s.how, s.format, s.path) for s in by.values()] == [
        ("build", "dir", "resources/images/built"),
        ("build", "squashfs", "resources/images/sqfs.sqfs"),
        ("pull", "sif", "resources/images/pulled.sif"),
        ("local", "sif", "/images/p.sif"),
    ]
    assert {s.manifest for s in by.values()} == {f"resources/images/{n}.manifest.json" for n in by}


def with_images(site: str = "local", runtimes=("native", "charliecloud"), image: str = "", **images) -> dict:
    cfg = tiny_config(site=site, containers={"images": images or {"default": {}}})
    cfg["sweep"]["runtimes"] = list(runtimes)
    if site != "local":
        cfg["sweep"].pop("ranks_per_node")
        cfg["sweep"]["gpus_per_node"] = [1]
    if image:
        cfg["workloads"]["cnn_ddp"]["image"] = image
    return cfg


@pytest.mark.parametrize("cfg, message", [
    (with_images(image="missing"),
     "config key workloads.cnn_ddp.image: image 'missing' is not in containers.images (it has: default)"),
    (with_images(pytorch={}),  # containers.image still names `default`
     "config key containers.image: image 'default' is not in containers.images (it has: pytorch)"),
    (with_images("frontier", ("native", "apptainer"), default={"builder": "apptainer",
                                                               "recipe": "containers/apptainer/pytorch-rocm.def",
                                                               "format": "sif"}, image="")
     | {"sweep": {"runtimes": ["native", "charliecloud"], "nodes": [1], "gpus_per_node": [1], "repeats": 1}},
     "runtime 'charliecloud' is not offered by site 'frontier'"),
    (with_images("frontier", ("native", "apptainer")),  # Frontier has no Charliecloud
     "config key containers.images.default.builder: runtime 'charliecloud' is not offered by site 'frontier'"),
    (with_images("frontier", ("native", "apptainer"), default={"prebuilt": "/images/ch-dir"}),
     "config key containers.image: runtime apptainer runs sif images, and the workload's images are "
     "'default' (dir): name one of that format for it"),
    (with_images("frontier", ("native", "apptainer"), default={"builder": "apptainer", "format": "sif"}),
     "config key containers.images.default.recipe: apptainer builds from an Apptainer definition file "
     "(.def), not 'containers/charliecloud/Dockerfile'"),
    (with_images(default={"builder": "native"}),
     "config key containers.images.default.builder: 'native' builds no images"),
    (with_images(default={"format": "sif"}),
     "config key containers.images.default.format: charliecloud makes dir, squashfs images, not 'sif'"),
    (with_images(default={"prebuilt": "docker://python:3.11"}),
     "config key containers.images.default.prebuilt: charliecloud cannot pull 'docker://python:3.11'"),
    (with_images("frontier", ("native", "apptainer"),
                 default={"builder": "apptainer", "format": "sif", "prebuilt": "oras://x/y:1"})
     | {"containers": {"images": {"default": {"builder": "apptainer", "format": "sif",
                                              "prebuilt": "oras://x/y:1 ; rm -rf ~"}}}},
     "config key containers.images.default.prebuilt"),
])
def test_bad_images_are_refused_naming_the_key(cfg, message):
    with pytest.raises(ConfigError) as err:
        validated(copy.deepcopy(cfg))
    assert message in str(err.value)


def test_one_workload_in_runtimes_of_different_formats(tmp_path):
    """A list of images: each container runtime runs the first of a format it runs."""
    site = write_site(tmp_path, "both", extends="frontier", runtimes={"podman": {"bin": "podman"}})
    cfg = with_images(site, ("native", "apptainer", "podman"),
                      sif={"builder": "apptainer", "recipe": "containers/apptainer/pytorch-rocm.def"},
                      oci={"builder": "podman", "prebuilt": "/images/oci"}, image="")
    cfg["containers"]["image"] = ["oci", "sif"]
    config = validated(cfg)
    assert workload_image(config, "cnn_ddp", "apptainer").name == "sif"
    assert workload_image(config, "cnn_ddp", "podman").name == "oci"
    assert sorted(used_images(config, sweep_points(config))) == ["oci", "sif"]


def test_images_that_are_fine():
    # a SIF used in place needs no builder on the site (nothing is built or pulled)
    validated(with_images("frontier", ("native", "apptainer"), default={"builder": "apptainer",
                                                                        "prebuilt": "/img/p.sif"}))
    # a native-only campaign never looks at its images
    validated(with_images(runtimes=("native",), image="missing"))


@pytest.mark.parametrize("key", ["builder", "recipe", "requirements", "prebuilt", "format", "fakeroot"])
def test_one_image_per_campaign_keys_moved(key):
    cfg = tiny_config(containers={key: "x" if key != "fakeroot" else True})
    with pytest.raises(ConfigError, match=rf"config key containers\.{key}: moved to containers\.images\.<name>\.{key}"):
        validated(cfg)


def test_each_image_is_made_by_one_rule(tmp_path, monkeypatch):
    """A dry run of the Frontier profile (with the sweep narrowed to one point per
    workload) builds the two SIFs by rule build_image_sif; a pulled image is pulled by
    pull_image and an image used in place is described by describe_image."""
    monkeypatch.setenv("SBATCH_ACCOUNT", "abc123")
    for name in ("config", "containers", "envs"):
        (tmp_path / name).symlink_to(REPO / name)
    extra = tmp_path / "images.yaml"
    extra.write_text(
        "containers:\n  images:\n"
        "    ollama: {builder: apptainer, format: sif, prebuilt: 'oras://ghcr.io/example/ollama:0.9.0'}\n"
        f"    pytorch: {{builder: apptainer, format: sif, prebuilt: '{tmp_path}/p.sif'}}\n")
    (tmp_path / "p.sif").write_text("not read by a dry run")
    only = "only={workloads: [cnn_ddp, llm_astrollama], nodes: [1]}"
    proc = run_snakemake(tmp_path, "-n", "--profile", str(REPO / "profiles" / "frontier"),
                         "--config", only, timeout=300)
    out = proc.stdout
    assert "rule build_image_sif:" in out and "wildcards: image=pytorch" in out, out[-3000:]
    proc = run_snakemake(tmp_path, "-n", "--profile", str(REPO / "profiles" / "frontier"),
                         "--configfile", str(REPO / "config" / "frontier.yaml"), str(extra),
                         "--config", only, timeout=300)
    out = proc.stdout
    assert "rule pull_image:" in out and "rule describe_image:" in out and "rule build_image" not in out
    assert "describe-image --builder apptainer --format sif --image oras://ghcr.io/example/ollama:0.9.0 --pull" in out


def test_an_image_used_in_place_is_described_and_a_replaced_one_flagged(tmp_path):
    from scalesweep.images.describe import describe_image
    from scalesweep.run.pointlaunch import image_provenance

    image = tmp_path / "p.sif"
    image.write_bytes(b"SIF" * 1000)
    man = describe_image("apptainer", str(image), tmp_path / "p.manifest.json")
    assert man["source"] == "local" and man["size_bytes"] == 3000
    assert man["content_digest"] == "sha256:" + man["file_sha256"]
    run = image_provenance(str(tmp_path / "p.manifest.json"))
    assert run["content_digest"] == man["content_digest"] and "stale" not in run
    image.write_bytes(b"other" * 1000)  # replaced under the same path
    assert "the image changed" in image_provenance(str(tmp_path / "p.manifest.json"))["stale"]


def test_pulling_a_reference_writes_a_sif_and_its_manifest(tmp_path, monkeypatch):
    """`scalesweep describe-image --pull` through the apptainer stand-in (the real tool's
    `pull --force OUT URI` and `inspect --json`)."""
    import standins

    standins.install(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    out, manifest = tmp_path / "images" / "o.sif", tmp_path / "images" / "o.manifest.json"
    ref = "oras://registry.example.org/team/ollama:0.9.0"
    assert main_describe(["--builder", "apptainer", "--image", ref, "--pull", "--out", str(out),
                          "--manifest", str(manifest)]) == 0
    man = json.loads(manifest.read_text())
    assert out.is_file() and man["source"] == "pulled" and man["pulled_from"] == ref
    assert man["pull_command"][1:3] == ["pull", "--force"] and man["builder"]["version"] == "1.3.6"
    assert man["labels"] and man["base"]["from"]
    # a reference the tool refuses fails the rule, naming it
    assert main_describe(["--builder", "apptainer", "--image", "ftp://x/y", "--pull", "--out",
                          str(tmp_path / "x.sif"), "--manifest", str(tmp_path / "x.json")]) == 1


def main_describe(argv):
    from scalesweep.cli import main

    return main(["describe-image", *argv])
