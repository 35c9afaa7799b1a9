"""Image builds: command lines, cache key, preflight, recipe lint, and the real build.

Unit tests pin the exact builder command lines (the runtime classes of
``scalesweep.platform.runtimes`` give them, and the steps of each build, as pure functions;
``scalesweep.images.build`` runs them)
and the cache-key rules; stand-in binaries drive the Apptainer and SingularityCE flows (Podman
runs for real: tests/integration/test_podman_workflow.py). The ``container`` test builds
the real Charliecloud image through
``scalesweep build-image`` with the shared cache ``~/.cache/scalesweep`` (minutes the
first time on a machine, seconds after) and runs it with ``ch-run``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO

from scalesweep.images import build, builders, cache, digest, process, recipe, rootfs, wheelhouse
from scalesweep.record.metrics import write_json_atomic
from scalesweep.platform.runtimes import runtime
from scalesweep.platform.site import load_site

CLI = [sys.executable, "-m", "scalesweep", "build-image"]
DOCKERFILE = REPO / "containers" / "charliecloud" / "Dockerfile"
REQUIREMENTS = REPO / "envs" / "payload-requirements.txt"
APPTAINER_DIR = REPO / "containers" / "apptainer"
DEFS = sorted(APPTAINER_DIR.glob("*.def"))
FRONTIER_ARGS = load_site("frontier")["build_args"]  # the site file's build_args
APPTAINER, CHARLIECLOUD = runtime("apptainer"), runtime("charliecloud")


# ----------------------------------------------------------------- command lines


def test_apptainer_build_command_plain():
    assert APPTAINER.build_command("X.sif", "containers/apptainer/pytorch-rocm.def") == [
        "apptainer", "build", "X.sif", "containers/apptainer/pytorch-rocm.def",
    ]


def test_apptainer_build_command_fakeroot_and_args_in_order():
    cmd = APPTAINER.build_command(
        "out/pytorch.sif", "containers/apptainer/pytorch-rocm.def",
        {"ROCM_VERSION": "6.2.4", "MPICH_VERSION": "3.4.2"}, fakeroot=True,
    )
    assert cmd == [
        "apptainer", "build", "--fakeroot", "--warn-unused-build-args",
        "--build-arg", "ROCM_VERSION=6.2.4", "--build-arg", "MPICH_VERSION=3.4.2",
        "out/pytorch.sif", "containers/apptainer/pytorch-rocm.def",
    ]


def test_apptainer_build_args_come_from_the_site_file():
    args = FRONTIER_ARGS
    cmd = APPTAINER.build_command("p.sif", "pytorch-rocm.def", args, fakeroot=True)
    pairs = [cmd[i + 1] for i, c in enumerate(cmd) if c == "--build-arg"]
    assert pairs == [f"{k}={v}" for k, v in args.items()]
    assert "ROCM_VERSION=6.2.4" in pairs
    assert any(p.startswith("MPICH_VERSION=3.4.") for p in pairs)
    assert cmd[-2:] == ["p.sif", "pytorch-rocm.def"]


def test_load_build_args_reads_and_rejects(tmp_path):
    f = tmp_path / "hand.args"
    f.write_text("# versions\nROCM_VERSION=6.2.4\n\nTORCH_VERSION='2.6.0'\n")
    assert recipe.load_build_args(f) == {"ROCM_VERSION": "6.2.4", "TORCH_VERSION": "2.6.0"}
    f = tmp_path / "bad.args"
    f.write_text("# fine\nA=1\nthis is not an assignment\n")
    with pytest.raises(process.BuildError, match="bad.args:3"):
        recipe.load_build_args(f)


def test_ch_image_build_command():
    cmd = CHARLIECLOUD.build_command(
        "containers/charliecloud/Dockerfile", "scalesweep-build-1", "/c/tmp/st",
        context="containers/charliecloud", binds={"/c/wheelhouse/k": "/wheelhouse"},
        build_args={"SOURCE_DATE_EPOCH": "1747699200"},
    )
    assert cmd == [
        "/usr/bin/python3", "ch-image", "-s", "/c/tmp/st", "--no-cache", "build", "--force",
        "-b", "/c/wheelhouse/k:/wheelhouse", "--build-arg", "SOURCE_DATE_EPOCH=1747699200",
        "-t", "scalesweep-build-1", "-f", "containers/charliecloud/Dockerfile",
        "containers/charliecloud",
    ]


def test_ch_image_import_and_debootstrap_commands():
    assert CHARLIECLOUD.import_command("/c/base.tar", "localhost/scalesweep-debian:bookworm", "/c/st") == [
        "/usr/bin/python3", "ch-image", "-s", "/c/st", "--no-cache", "import", "/c/base.tar",
        "localhost/scalesweep-debian:bookworm",
    ]
    assert rootfs.debootstrap_command("/c/rootfs", "bookworm", "http://deb.debian.org/debian") == [
        "unshare", "--mount", "--propagation", "private",
        "debootstrap", "--variant=minbase", "bookworm", "/c/rootfs", "http://deb.debian.org/debian",
    ]


def test_base_tarball_never_carries_device_nodes():
    cmd = rootfs.base_tar_command("/c/rootfs", "/c/base.tar")
    for d in ("dev", "proc", "sys"):
        assert f"--exclude=./{d}/*" in cmd
    assert "--numeric-owner" in cmd and "--sort=name" in cmd


def test_squashfs_and_ch_run_commands():
    assert CHARLIECLOUD.mksquashfs_command("/c/img", "/c/img.sqfs", 1747699200) == [
        "mksquashfs", "/c/img", "/c/img.sqfs", "-b", "65536", "-noappend", "-all-root",
        "-no-xattrs", "-all-time", "1747699200", "-mkfs-time", "1747699200", "-no-progress",
    ]
    assert CHARLIECLOUD.exec_command("img", ["python", "-V"], binds=("/a:/mnt/data",)) == [
        "ch-run", "-b", "/a:/mnt/data", "img", "--", "python", "-V",
    ]


# -------------------------------------------------------------------- cache key

BASE_KEY_ARGS = dict(
    recipe_text="FROM localhost/scalesweep-debian:bookworm\nRUN true\n",
    requirements_text="torch==2.13.0\nnumpy==2.4.6\n",
    wheel_hashes={"torch-2.13.0+cpu-cp311.whl": "aa", "numpy-2.4.6-cp311.whl": "bb"},
    builder="charliecloud",
    builder_version="0.31",
    extra={"base": {"suite": "bookworm"}},
)


def key(**changes):
    return cache.cache_key(**{**BASE_KEY_ARGS, **changes})


def test_cache_key_is_stable():
    k = key()
    assert re.fullmatch(r"[0-9a-f]{64}", k)
    assert key() == k
    # wheel order and comments/blank lines in the requirements do not matter
    assert key(wheel_hashes=dict(reversed(list(BASE_KEY_ARGS["wheel_hashes"].items())))) == k
    assert key(requirements_text="# pins\ntorch==2.13.0\n\nnumpy==2.4.6   # the array lib\n") == k


@pytest.mark.parametrize(
    "change",
    [
        {"recipe_text": BASE_KEY_ARGS["recipe_text"] + "RUN echo more\n"},
        {"requirements_text": "torch==2.13.0\nnumpy==2.4.5\n"},
        {"requirements_text": "torch==2.13.0\nnumpy==2.4.6\nllama-cpp-python==0.3.36\n"},
        {"wheel_hashes": {"torch-2.13.0+cpu-cp311.whl": "aa", "numpy-2.4.6-cp311.whl": "cc"}},
        {"builder_version": "0.32"},
        {"builder": "apptainer"},
        {"extra": {"base": {"suite": "trixie"}}},
    ],
    ids=["recipe", "requirement-version", "requirement-added", "wheel-bytes", "builder-version",
         "builder", "base"],
)
def test_cache_key_changes_with_inputs(change):
    assert key(**change) != key()


def test_cache_key_of_the_real_recipe_changes_when_it_is_edited():
    text = DOCKERFILE.read_text()
    req = REQUIREMENTS.read_text()
    k = cache.cache_key(text, req, {}, "charliecloud", "0.31")
    assert cache.cache_key(text, req, {}, "charliecloud", "0.31") == k
    assert cache.cache_key(text + "\nRUN true\n", req, {}, "charliecloud", "0.31") != k
    assert cache.cache_key(text, req + "pyyaml==6.0.3\n", {}, "charliecloud", "0.31") != k


# ---------------------------------------------------------------- preflight


def test_missing_charliecloud_names_the_debian_package():
    with pytest.raises(process.BuilderMissing) as e:
        builders.check_builder("charliecloud", which=lambda tool: None)
    msg = str(e.value)
    assert "\n" not in msg
    assert "ch-image" in msg and "apt-get install charliecloud" in msg


def test_missing_debootstrap_and_squashfs_tools_are_named():
    have = {"ch-image", "ch-run", "unshare", "tar", "cp"}
    with pytest.raises(process.BuilderMissing, match="debootstrap"):
        builders.check_builder("charliecloud", which=lambda t: f"/usr/bin/{t}" if t in have else None)
    have |= {"debootstrap"}
    with pytest.raises(process.BuilderMissing, match="squashfs-tools"):
        builders.check_builder("charliecloud", "squashfs", which=lambda t: f"/usr/bin/{t}" if t in have else None)


def test_missing_apptainer_names_what_to_install():
    with pytest.raises(process.BuilderMissing) as e:
        builders.check_builder("apptainer", which=lambda tool: None)
    assert "apptainer" in str(e.value).lower() and "module load apptainer" in str(e.value)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("builder, hint", [("singularity", "SingularityCE"), ("podman", "Podman")])
def test_missing_singularity_and_podman_name_what_to_install(builder, hint):
    with pytest.raises(process.BuilderMissing) as e:
        builders.check_builder(builder, which=lambda tool: None)
    assert f"needs '{builder}'" in str(e.value) and hint in str(e.value)


def test_unknown_builder_and_format_are_refused(tmp_path):
    with pytest.raises(process.BuildError, match="choose from charliecloud, apptainer, singularity, podman"):
        builders.check_builder("docker")
    with pytest.raises(process.BuildError, match="--format squashfs is not available with --builder apptainer"):
        build.build_image("apptainer", "x.def", tmp_path / "x.sif", tmp_path / "m.json", fmt="squashfs")


def test_missing_builder_fails_before_doing_anything(tmp_path):
    """The CLI exits 1 with one line on stderr and creates nothing (no cache, no out)."""
    cache_dir = tmp_path / "cache"
    env = dict(os.environ, PATH=str(tmp_path / "empty-bin"))
    proc = subprocess.run(
        [*CLI, "--builder", "apptainer",
         "--recipe", str(APPTAINER_DIR / "pytorch-rocm.def"),
         "--site", "frontier",
         "--out", str(tmp_path / "x.sif"), "--manifest", str(tmp_path / "x.json"),
         "--cache-dir", str(cache_dir)],
        capture_output=True, text=True, env=env, cwd=REPO, timeout=60,
    )
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("scalesweep build-image: error:"), proc.stderr
    assert "apptainer" in lines[0]
    assert not cache_dir.exists() and not (tmp_path / "x.sif").exists() and not (tmp_path / "x.json").exists()


FAKE_APPTAINER = """#!/bin/sh
# stand-in for apptainer/singularity: records its argv, writes a fake SIF on build
echo "$@" >> "$FAKE_APPTAINER_LOG"
case "$1" in
  --version) echo "$(basename "$0") version 1.3.0" ;;
  build) for last; do :; done
         out=""; prev=""; for a; do [ "$a" = "$last" ] && out="$prev"; prev="$a"; done
         printf 'SIF-%s' "$last" > "$out" ;;
  *) echo "fake apptainer: $1 not supported" >&2; exit 1 ;;
esac
"""


@pytest.mark.parametrize("builder", ["apptainer", "singularity"])
def test_sif_flow_with_a_stand_in_binary(tmp_path, builder):
    """The definition-file path end to end (cache miss, then hit) with a fake
    ``apptainer`` or ``singularity``; build args from the site file (--site)."""
    fakebin = tmp_path / "bin"
    fakebin.mkdir()
    (fakebin / builder).write_text(FAKE_APPTAINER)
    (fakebin / builder).chmod(0o755)
    argv_log = tmp_path / "argv.log"
    env = dict(os.environ, PATH=f"{fakebin}:{os.environ['PATH']}", FAKE_APPTAINER_LOG=str(argv_log))
    cmd = [*CLI, "--builder", builder,
           "--recipe", str(APPTAINER_DIR / "pytorch-rocm.def"), "--site", "frontier",
           "--build-arg", "TORCH_VERSION=2.7.1", "--fakeroot",
           "--requirements", str(REQUIREMENTS), "--cache-dir", str(tmp_path / "cache"),
           "--out", str(tmp_path / "img/pytorch-rocm.sif"), "--manifest", str(tmp_path / "img/m.json")]
    first = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert first.returncode == 0, first.stderr
    m1 = json.loads((tmp_path / "img/m.json").read_text())
    assert m1["cached"] is False
    assert (m1["builder"]["name"], m1["builder"]["version"]) == (builder, "1.3.0")
    build_lines = [line.split() for line in argv_log.read_text().splitlines() if line.startswith("build")]
    assert len(build_lines) == 1
    argv = build_lines[0]
    assert argv[:3] == ["build", "--fakeroot", "--warn-unused-build-args"]
    assert argv[-1] == str((APPTAINER_DIR / "pytorch-rocm.def").resolve())
    assert argv[-2].endswith("/image.sif")
    pairs = [argv[i + 1] for i, a in enumerate(argv) if a == "--build-arg"]
    assert "ROCM_VERSION=6.2.4" in pairs and "TORCH_VERSION=2.7.1" in pairs
    assert f"REQUIREMENTS={REQUIREMENTS.resolve()}" in pairs
    assert (tmp_path / "img/pytorch-rocm.sif").read_bytes().startswith(b"SIF-")
    assert m1["build_args"]["TORCH_VERSION"] == "2.7.1"
    # what the manifest says of the multi-stage recipe: the toolchain stage in the ROCm
    # development image (the site's build args filled in), the image on plain Ubuntu
    assert m1["source"] == "built" and m1["recipe"]["path"].endswith("pytorch-rocm.def")
    assert m1["base"]["from"] == "docker.io/library/ubuntu:24.04"
    assert m1["base"]["stages"][0] == {"stage": "build", "from": "docker.io/rocm/dev-ubuntu-24.04:6.2.4"}
    assert m1["content_digest"] == "sha256:" + hashlib.sha256((tmp_path / "img/pytorch-rocm.sif").read_bytes()).hexdigest()

    second = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert second.returncode == 0, second.stderr
    m2 = json.loads((tmp_path / "img/m.json").read_text())
    assert m2["cached"] is True and m2["cache_key"] == m1["cache_key"]
    assert len([line for line in argv_log.read_text().splitlines() if line.startswith("build")]) == 1

    cmd[cmd.index("TORCH_VERSION=2.7.1")] = "TORCH_VERSION=2.8.0"
    third = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert third.returncode == 0, third.stderr
    assert json.loads((tmp_path / "img/m.json").read_text())["cache_key"] != m1["cache_key"]


# --------------------------------------------------------------- recipe lint


@pytest.mark.parametrize("deffile", DEFS, ids=[d.name for d in DEFS])
def test_apptainer_def_lint(deffile):
    text = deffile.read_text()
    d = recipe.parse_apptainer_def(text)  # header first, known sections, defaults for all vars
    first = next(line for line in text.splitlines() if line.strip() and not line.startswith("#"))
    assert first.startswith("Bootstrap:")
    assert d.header["bootstrap"] == "docker" and d.header["from"]
    assert {name for name, _ in d.sections} <= recipe.APPTAINER_SECTIONS
    assert d.used_vars <= set(d.arguments)
    # every {{ VAR }} needs a non-empty default, but a control recipe's (an empty prefix:
    # the release's own interpreter; nothing swapped in)
    from scalesweep.images import hoststack
    from scalesweep.plan import swaps

    empty_by_design = {hoststack.BUILD_ARG, swaps.BUILD_ARG}
    assert all(d.arguments[v] or v in empty_by_design for v in d.used_vars)
    # the base image is a build arg, not a literal
    assert recipe.TEMPLATE_VAR_RE.fullmatch(d.header["from"])
    # versions are build args: no default version literal outside %arguments/comments
    body = "\n".join(
        line for name, sbody in d.sections if name != "arguments"
        for line in sbody.splitlines() if not line.strip().startswith("#")
    )
    for k, v in d.arguments.items():
        if k.endswith("_VERSION"):
            assert v not in body, f"{deffile.name}: {k}'s value {v} is written out in the body"
    post = "\n".join(b for n, b in d.sections if n == "post")
    for target in ("/mnt/data", "/mnt/code", "/mnt/out"):
        assert target in post


def test_pytorch_rocm_def_follows_the_olcf_recipe():
    d = recipe.parse_apptainer_def((APPTAINER_DIR / "pytorch-rocm.def").read_text())
    assert d.arguments["MPICH_VERSION"].startswith("3.4.")  # cray-mpich-abi: libmpi.so.12
    assert {"PYTORCH_BASE_IMAGE", "ROCM_VERSION", "TORCH_VERSION", "MPICH_VERSION"} <= d.used_vars
    post = "\n".join(b for n, b in d.sections if n == "post")
    assert "--with-device=ch4:ofi" in post
    assert 'MPICC="/opt/mpich/bin/mpicc -shared"' in post and "--no-binary=mpi4py" in post
    assert "/opt/venv" in post


def test_ollama_def_pins_a_release():
    d = recipe.parse_apptainer_def((APPTAINER_DIR / "ollama.def").read_text())
    assert re.fullmatch(r"\d+\.\d+\.\d+", d.arguments["OLLAMA_VERSION"])
    assert {"OLLAMA_BASE_IMAGE", "OLLAMA_VERSION"} <= d.used_vars


def test_frontier_build_args_only_set_known_arguments():
    known = set().union(*(recipe.parse_apptainer_def(p.read_text()).arguments for p in DEFS))
    assert set(FRONTIER_ARGS) <= known


@pytest.mark.parametrize(
    "text, match",
    [
        ("From: x\nBootstrap: docker\n", "must start with 'Bootstrap:'"),
        ("Bootstrap: docker\nFrom: a\n%bogus\n", "unknown section"),
        ("Bootstrap: docker\nFrom: {{ B }}\n%post\n  true\n", "without a %arguments default: B"),
        ("Bootstrap: docker\n%post\n  true\n", "needs a 'From:'"),
    ],
    ids=["header-order", "unknown-section", "missing-default", "missing-from"],
)
def test_def_lint_catches_mistakes(text, match):
    with pytest.raises(process.BuildError, match=re.escape(match)):
        recipe.parse_apptainer_def(text)


def test_dockerfile_takes_pins_from_the_requirements_file():
    text = DOCKERFILE.read_text()
    assert rootfs.BASE_FROM_RE.search(text).group(1) == "bookworm"
    code = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    for pkg in ("torch", "numpy", "pillow"):
        assert not re.search(rf"\b{pkg}\s*==", code)
    assert "--no-index" in code and "-r /wheelhouse/requirements.txt" in code
    assert "mkdir -p /mnt/data /mnt/code /mnt/out" in code
    for pkg in ("python3", "python3-venv", "ca-certificates", "libopenmpi3", "openmpi-bin"):
        assert re.search(rf"\s{re.escape(pkg)}(\s|$)", code)


# --------------------------------------------------- requirements and sources


def test_local_wheel_pins_pick_the_local_cpu_torch(tmp_path):
    for name in ("torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl",
                 "torch-2.12.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl",
                 "llama_cpp_python-0.3.36-py3-none-linux_x86_64.whl"):
        (tmp_path / name).write_bytes(b"")
    req = "torch==2.13.0\nnumpy==2.4.6\nllama-cpp-python[server]==0.3.36  # local build\n"
    pins = wheelhouse.local_wheel_pins(req, [tmp_path])
    assert pins["torch"].name.startswith("torch-2.13.0+cpu")
    assert pins["llama-cpp-python"].name.startswith("llama_cpp_python-0.3.36")
    assert "numpy" not in pins
    assert wheelhouse.exact_pins(req) == {"torch": "2.13.0", "numpy": "2.4.6", "llama-cpp-python": "0.3.36"}
    assert not wheelhouse.local_version_matches("2.13.0", "2.13.1+cpu")


def test_payload_requirements_are_pinned():
    pins = wheelhouse.exact_pins(REQUIREMENTS.read_text())
    assert pins["torch"] == "2.13.0" and pins["numpy"] == "2.4.6" and pins["pillow"] == "13.0.0"


def test_host_mirror_from_deb822_sources():
    text = (
        "Types: deb\n# http://snapshot.debian.org/archive/debian/20250520T000000Z\n"
        "URIs: http://deb.debian.org/debian\nSuites: bookworm bookworm-updates\nComponents: main\n\n"
        "Types: deb\nURIs: http://deb.debian.org/debian-security\nSuites: bookworm-security\n"
    )
    entries = rootfs.parse_apt_sources(text, deb822=True)
    assert entries[0] == rootfs.Mirror("http://deb.debian.org/debian", "bookworm",
                                   "http://snapshot.debian.org/archive/debian/20250520T000000Z")
    assert rootfs.source_date_epoch(entries[0]) == 1747699200 or "SOURCE_DATE_EPOCH" in os.environ
    assert rootfs.parse_apt_sources("deb [arch=amd64] http://m/debian bookworm main\n", deb822=False) == [
        rootfs.Mirror("http://m/debian", "bookworm")
    ]


# ------------------------------------------------------- digest and placement


def make_tree(root: Path) -> Path:
    (root / "usr/bin").mkdir(parents=True)
    (root / "usr/bin/tool").write_text("#!/bin/sh\necho hi\n")
    (root / "usr/bin/tool").chmod(0o755)
    (root / "etc").mkdir()
    (root / "etc/conf").write_text("a=1\n")
    (root / "bin").symlink_to("usr/bin")
    (root / "ch").mkdir()
    (root / "ch/metadata.json").write_text('{"created": "now"}')
    return root


def test_content_digest_ignores_mtimes_and_ch_metadata(tmp_path):
    a = make_tree(tmp_path / "a")
    b = make_tree(tmp_path / "b")
    os.utime(b / "etc/conf", (1, 1))
    (b / "ch/metadata.json").write_text('{"created": "later"}')
    da = digest.content_digest(a)
    assert da.startswith("sha256:") and digest.content_digest(b) == da


@pytest.mark.parametrize("mutate", [
    lambda r: (r / "etc/conf").write_text("a=2\n"),
    lambda r: (r / "usr/bin/tool").chmod(0o700),
    lambda r: ((r / "bin").unlink(), (r / "bin").symlink_to("usr/sbin")),
    lambda r: (r / "etc/new").write_text(""),
], ids=["content", "mode", "symlink", "new-file"])
def test_content_digest_sees_real_changes(tmp_path, mutate):
    a = make_tree(tmp_path / "a")
    before = digest.content_digest(a)
    mutate(a)
    assert digest.content_digest(a) != before


def test_place_image_hardlinks_and_replaces(tmp_path):
    src = make_tree(tmp_path / "cache/image")
    out = tmp_path / "resources/images/default"
    assert cache.place_image(src, out) == "hardlink"
    assert os.stat(out / "etc/conf").st_ino == os.stat(src / "etc/conf").st_ino
    assert (out / "bin").is_symlink()
    (out / "stale").write_text("x")
    assert cache.place_image(src, out) == "hardlink"
    assert not (out / "stale").exists() and not (src / "stale").exists()
    assert cache.place_image(src, tmp_path / "link", "symlink") == "symlink"
    assert (tmp_path / "link").resolve() == src.resolve()


def test_manifest_is_written_atomically(tmp_path):
    target = tmp_path / "m.json"
    write_json_atomic(target, {"a": 1})
    write_json_atomic(target, {"a": 2})
    assert json.loads(target.read_text()) == {"a": 2}
    assert [p.name for p in tmp_path.iterdir()] == ["m.json"]


# ------------------------------------------------------------ the real build


def _tiny_wheel(directory: Path) -> None:
    """A pure-Python wheel, made here: what the control image's wheelhouse stages offline."""
    import zipfile

    directory.mkdir(parents=True, exist_ok=True)
    files = {"tinypkg/__init__.py": "X = 1\n",
             "tinypkg-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: tinypkg\nVersion: 1.0\n",
             "tinypkg-1.0.dist-info/WHEEL": ("Wheel-Version: 1.0\nGenerator: test\n"
                                             "Root-Is-Purelib: true\nTag: py3-none-any\n")}
    record = "".join(f"{name},,\n" for name in files) + "tinypkg-1.0.dist-info/RECORD,,\n"
    with zipfile.ZipFile(directory / "tinypkg-1.0-py3-none-any.whl", "w") as z:
        for name, text in {**files, "tinypkg-1.0.dist-info/RECORD": record}.items():
            z.writestr(name, text)


def test_apptainer_control_image_build_binds_the_host_stack(tmp_path):
    """containers/apptainer/control.def through `build-image --host-stack --swap` with a
    stand-in apptainer: the release's registry image as the base, the interpreter's prefix
    and the staged wheelhouse bound for %post, the host's interpreter and the swapped item
    as build args, all in the manifest; a recipe that is no control recipe is refused."""
    from scalesweep.images import hoststack

    fakebin = tmp_path / "bin"
    fakebin.mkdir()
    (fakebin / "apptainer").write_text(FAKE_APPTAINER)
    (fakebin / "apptainer").chmod(0o755)
    argv_log = tmp_path / "argv.log"
    _tiny_wheel(tmp_path / "wheels")
    req = tmp_path / "req.txt"
    req.write_text("tinypkg==1.0\n")
    env = dict(os.environ, PATH=f"{fakebin}:{os.environ['PATH']}", FAKE_APPTAINER_LOG=str(argv_log),
               PIP_NO_INDEX="1")
    cmd = [*CLI, "--builder", "apptainer", "--recipe", str(APPTAINER_DIR / "control.def"),
           "--host-stack", "--python", sys.executable, "--swap", "bytecode", "--fakeroot",
           "--requirements", str(req), "--find-links", str(tmp_path / "wheels"),
           "--cache-dir", str(tmp_path / "cache"), "--out", str(tmp_path / "img/control.sif"),
           "--manifest", str(tmp_path / "img/control.json")]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr
    argv = [line.split() for line in argv_log.read_text().splitlines() if line.startswith("build")][0]
    stack = hoststack.interpreter(sys.executable)
    binds = [argv[i + 1] for i, a in enumerate(argv) if a == "--bind"]
    wheelhouse = [b for b in binds if b.endswith(":/wheelhouse")]
    assert len(wheelhouse) == 1 and wheelhouse[0].startswith(str(tmp_path / "cache" / "wheelhouse"))
    pairs = [argv[i + 1] for i, a in enumerate(argv) if a == "--build-arg"]
    assert f"HOST_PYTHON_VERSION={stack['version']}" in pairs and "SWAP_IN=bytecode" in pairs
    release = hoststack.os_release()
    assert f"HOST_RELEASE_IMAGE={hoststack.release_image(release)}" in pairs
    if stack["system"]:
        assert "HOST_PYTHON_PREFIX=" in pairs and not any(b.endswith(":/hostpython") for b in binds)
    else:
        assert f"{stack['prefix']}:/hostpython" in binds
        assert f"HOST_PYTHON_PREFIX={stack['prefix']}" in pairs
    assert argv[:2] == ["build", "--fakeroot"] and argv[-1].endswith("control.def")
    staged = Path(wheelhouse[0].split(":")[0])
    assert (staged / "tinypkg-1.0-py3-none-any.whl").is_file()
    assert (staged / "requirements.txt").read_text().strip() == "tinypkg==1.0"
    man = json.loads((tmp_path / "img/control.json").read_text())
    assert man["host_stack"]["swapped_in"] == ["bytecode"]
    assert man["host_stack"]["python"]["version"] == stack["version"]
    assert man["build_args"]["HOST_RELEASE_IMAGE"] == hoststack.release_image(release)
    # the workload's recipe is no control recipe
    bad = [*cmd]
    bad[bad.index(str(APPTAINER_DIR / "control.def"))] = str(APPTAINER_DIR / "pytorch-rocm.def")
    proc = subprocess.run(bad, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert proc.returncode == 1 and "is not a control recipe" in proc.stderr


def test_the_release_image_of_a_host():
    from scalesweep.images import hoststack
    from scalesweep.images.process import BuildError

    assert hoststack.release_image({"ID": "sles", "VERSION_ID": "15.5"}) == \
        "registry.suse.com/suse/sle15:15.5"
    assert hoststack.release_image({"ID": "debian", "VERSION_ID": "12",
                                    "VERSION_CODENAME": "bookworm"}) == "docker.io/library/debian:bookworm"
    assert hoststack.release_image({"ID": "rhel", "VERSION_ID": "9.4"}) == \
        "registry.access.redhat.com/ubi9/ubi:9.4"
    with pytest.raises(BuildError, match="arch .*--build-arg HOST_RELEASE_IMAGE="):
        hoststack.release_image({"ID": "arch", "VERSION_ID": "rolling"})
