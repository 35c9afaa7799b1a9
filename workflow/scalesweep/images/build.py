"""Build a scalesweep payload container image, cached by content, with a provenance manifest.

``scalesweep build-image`` (or ``python -m scalesweep build-image``, :mod:`scalesweep.images.cli`);
the workflow's ``rule build_image`` runs it. Four builders, one per runtime that builds
images; each runtime's class (:mod:`scalesweep.platform.runtimes`) gives the steps of its
build (:meth:`~scalesweep.platform.runtimes.Runtime.dockerfile_steps`, ``build_command``,
``pack_command``, ``load_steps``), and this module runs them without asking which runtime
it builds for:

* ``charliecloud`` (this machine, offline): a Debian rootfs from ``debootstrap`` (the
  host's apt mirror) is imported with ``ch-image import`` into a private ch-image
  storage as ``localhost/scalesweep-debian:<suite>``, then the recipe
  (``containers/charliecloud/Dockerfile``) is built with ``ch-image build --force``
  while a host-staged wheelhouse is bind-mounted at ``/wheelhouse``.
* ``podman`` (rootless): the same offline Dockerfile build with ``podman import`` and
  ``podman build --pull=never --volume <wheelhouse>:/wheelhouse``; the image is saved as
  a directory (``podman save --format oci-dir``), cached and placed like the others, and
  loaded into the user's storage under the name the podman runtime runs.
* ``apptainer`` and ``singularity`` (Frontier-class sites): ``apptainer|singularity build
  [--fakeroot] --build-arg K=V ... X.sif recipe.def``; the build args come from the
  site file's ``build_args`` (``--site``, or ``--build-arg`` as the workflow passes them).

Usage::

    scalesweep build-image --builder charliecloud \\
        --recipe containers/charliecloud/Dockerfile \\
        --requirements envs/payload-requirements.txt \\
        --out resources/images/default \\
        --manifest resources/images/default.manifest.json \\
        [--cache-dir ~/.cache/scalesweep] [--format dir|squashfs]

    scalesweep build-image --builder apptainer --site frontier --fakeroot \\
        --recipe containers/apptainer/pytorch-rocm.def \\
        --requirements envs/payload-requirements.txt \\
        --out $MEMBERWORK/<proj>/scalesweep/pytorch-rocm.sif \\
        --manifest $MEMBERWORK/<proj>/scalesweep/pytorch-rocm.manifest.json

Cache: ``<cache-dir>/images/<key>/`` holds the built image and the manifest of its
cold build; ``key = sha256(recipe text (+ its directory's other files), normalised
requirements, sha256 of every staged wheel, builder name + version, base / build
args)``. A hit places the cached image at ``--out`` in seconds by *hard-linking* it
(``cp -al``; a full copy if the cache is on another filesystem): ``--out`` is then a
real directory that outlives any cache cleanup and that Snakemake can stat and delete
like any output, at no extra disk space. ``--link symlink`` is available; the image is
never modified in place (ch-run mounts it read-only; never ``ch-run -w`` it, as a
hard-linked file is shared with the cache).

The other modules of :mod:`scalesweep.images` do one job each: the digest
(``digest``), the wheelhouse (``wheelhouse``), the Debian base (``rootfs``), definition
files (``recipe``), the builders' tools (``builders``), the cache (``cache``), images not
built here (``describe``), the command line (``cli``). Standard library only (plus
:mod:`scalesweep.platform.site` for ``--site``), so the rule runs it in any environment
that has Python.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from scalesweep.images.builders import builder_runtime, builder_version, check_builder
from scalesweep.images.cache import DEFAULT_CACHE, cache_key, file_lock, place_image, recipe_context_hashes
from scalesweep.images.describe import inspect_image
from scalesweep.images.digest import DIGEST_METHOD, MANIFEST_SCHEMA, content_digest, sha256_text, tree_size
from scalesweep.images.process import BuildError, clean_env, log, run_capture, run_logged
from scalesweep.images.recipe import def_base, load_build_args, parse_apptainer_def
from scalesweep.images.rootfs import (
    BASE_FROM_RE,
    BASE_VARIANT,
    DEBIAN_PYTHON,
    DEFAULT_SOURCE_DATE_EPOCH,
    Mirror,
    base_facts,
    debootstrap_version,
    host_mirror,
    make_base_tarball,
    mirror_release,
    source_date_epoch,
)
from scalesweep.images import hoststack
from scalesweep.plan import swaps
from scalesweep.images.wheelhouse import Wheelhouse, stage_wheelhouse
from scalesweep.platform import runtimes
from scalesweep.record.dataset import sha256_file
from scalesweep.record.hostenv import with_user
from scalesweep.record.metrics import write_json_atomic
from scalesweep.platform.code import CODE_ROOT as REPO_ROOT


def image_packages(runner: list[str], env: dict) -> dict:
    """dpkg-query + pip freeze inside the image (runner = command prefix up to argv)."""
    pk: dict = {}
    for kind, argv, sep in (
        ("dpkg", ["dpkg-query", "-W", "-f", "${Package}\t${Version}\n"], "\t"),
        ("pip", [runtimes.IMAGE_PYTHON, "-m", "pip", "freeze", "--all", "--disable-pip-version-check"], "=="),
    ):
        r = subprocess.run(runner + argv, capture_output=True, text=True, env=env)
        if r.returncode != 0:
            pk[kind], pk[f"{kind}_error"] = {}, r.stderr.strip()[-300:]
            continue
        pairs = (line.partition(sep) for line in r.stdout.splitlines())
        pk[kind] = {name: ver for name, found, ver in pairs if name and found}
    return pk


def pin_build_stamps(rt: runtimes.Runtime, image: Path, sde: int) -> None:
    """Pin the build-time stamps of the runtime's metadata file in the built tree
    (:attr:`~scalesweep.platform.runtimes.Runtime.metadata_file`, e.g. Charliecloud's
    /ch/metadata.json) to SOURCE_DATE_EPOCH, so a packed image (SquashFS) made from the
    tree is bit-reproducible too."""
    meta = image / rt.metadata_file if rt.metadata_file else None
    if meta is None or not meta.is_file():
        return
    stamp = _dt.datetime.fromtimestamp(sde, _dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    data = rt.pin_build_stamps(json.loads(meta.read_text()), stamp)
    st = os.stat(meta)
    tmp = meta.with_name(f".{meta.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    os.chmod(tmp, stat.S_IMODE(st.st_mode))
    os.replace(tmp, meta)


# ------------------------------------------------------------------ cold builds


@dataclass
class Build:
    """What a cold build needs: one per :func:`build_image` call."""

    rt: runtimes.Runtime
    recipe: Path
    tools: dict[str, str]
    cache_dir: Path
    logfile: Path
    key: str
    build_args: dict[str, str] = field(default_factory=dict)
    fakeroot: bool = False
    # Dockerfile builds (offline: debootstrap base + host wheelhouse)
    wheelhouse: Wheelhouse | None = None
    suite: str = ""
    mirror: Mirror | None = None
    sde: int = DEFAULT_SOURCE_DATE_EPOCH
    # a control image (--host-stack): host path -> bind target for the RUN steps
    binds: dict[str, str] = field(default_factory=dict)


def cold_dockerfile(b: Build, entry_tmp: Path) -> dict:
    """A Dockerfile from the offline Debian base (its tarball made or cached here), with
    the wheelhouse bound at /wheelhouse: the runtime's steps
    (:meth:`~scalesweep.platform.runtimes.Runtime.dockerfile_steps`), run in order; the
    image ends at ``entry_tmp/<its image_file>``. Returns the provenance facts."""
    tarball, base_info = make_base_tarball(b.cache_dir, b.suite, b.mirror, b.tools, b.logfile)
    release = mirror_release(b.mirror)  # the apt state the RUN apt-get update sees
    scratch = b.cache_dir / "tmp" / f"build-{b.key[:16]}-{os.getpid()}"
    product = entry_tmp / b.rt.image_file
    steps = b.rt.dockerfile_steps(runtimes.DockerfileBuild(
        recipe=str(b.recipe), context=str(b.recipe.parent), tools=b.tools,
        base_tarball=str(tarball), base_name=f"localhost/scalesweep-debian:{b.suite}",
        binds={str(b.wheelhouse.path): "/wheelhouse", **b.binds},
        build_args={**b.build_args, "SOURCE_DATE_EPOCH": str(b.sde)},
        key=b.key, scratch=str(scratch), product=str(product),
    ))
    env = clean_env() if steps.clean_env else None
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.parent.mkdir(parents=True, exist_ok=True)
    try:
        for cmd in steps.commands:
            run_logged(cmd, b.logfile, env=env)
        built = Path(steps.built)
        if not built.exists():
            raise BuildError(f"{b.rt.name} build reported success but {built} is missing")
        pin_build_stamps(b.rt, built, b.sde)
        if built != product:
            os.rename(built, product)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    facts = {"base": base_facts(base_info, b.mirror, release, b.sde), **steps.facts}
    facts["packages"] = image_packages(steps.inventory, env or dict(os.environ))
    facts["content_digest"] = content_digest(product)
    if b.rt.digest_note:
        facts["content_digest_note"] = b.rt.digest_note
    facts["tree_size_bytes"] = tree_size(product)
    return facts


def cold_definition(b: Build, entry_tmp: Path) -> dict:
    """``apptainer|singularity build`` of a definition file into a SIF."""
    exe = b.tools[b.rt.default_bin]
    sif = entry_tmp / b.rt.image_file
    cmd = b.rt.build_command(str(sif), str(b.recipe.resolve()), b.build_args,
                             fakeroot=b.fakeroot, bin=exe,
                             extra=[a for src, dst in b.binds.items()
                                    for a in ("--bind", f"{src}:{dst}")])
    # %files sources relative to the repository root, as in the recipes
    run_logged(cmd, b.logfile, cwd=str(REPO_ROOT))
    inspected = inspect_image(b.rt, sif, exe)
    facts = {
        "build_command": cmd,
        "build_args": b.build_args,
        "base": def_base(b.recipe.read_text(), b.build_args),
        "labels": inspected.get("labels"),
        "packages": image_packages(b.rt.exec_command(str(sif), [], bin=exe), dict(os.environ)),
        "content_digest": content_digest(sif),
    }
    if b.rt.digest_note:
        facts["content_digest_note"] = b.rt.digest_note
    facts["tree_size_bytes"] = tree_size(sif)
    return facts


# The cold build of each kind of recipe (Runtime.recipe_kind)
COLD_BUILDS = {"dockerfile": cold_dockerfile, "definition": cold_definition}


def pack_image(rt: runtimes.Runtime, fmt: str, entry: Path, facts: dict, tools: dict,
               logfile: Path) -> tuple[Path, bool]:
    """The cache entry's image packed into ``fmt`` (a file of the entry, made once);
    returns it and whether it was there already."""
    src = entry / rt.image_file
    packed = entry / rt.packed_formats[fmt]
    if packed.exists():
        return packed, True
    missing = [p for p in rt.pack_requires(fmt) if not os.path.lexists(src / p)]
    if missing:
        raise BuildError(f"{src} lacks what {rt.name} needs to run it as {fmt}: {missing}")
    tmp = packed.with_name(f".{packed.name}.tmp-{os.getpid()}")
    sde = (facts.get("base") or {}).get("source_date_epoch", DEFAULT_SOURCE_DATE_EPOCH)
    run_logged(rt.pack_command(fmt, str(src), str(tmp), sde, tools), logfile, env=clean_env())
    os.replace(tmp, packed)
    return packed, False


def load_into_storage(rt: runtimes.Runtime, out: Path, tools: dict) -> str | None:
    """For a runtime that runs images from its own storage (Podman): copy the placed
    image there under the name the runtime runs it by
    (:meth:`~scalesweep.platform.runtimes.Runtime.load_steps`); returns that name (None
    for runtimes that run the image where it lies)."""
    steps = rt.load_steps(str(out.resolve()), tools)
    if steps is None:
        return None
    ref, load = steps
    image_id = run_capture(load).split()[-1]
    run_capture(rt.tag_command(image_id, ref, tools[rt.default_bin]))
    return ref


def _host_stack(python: str, release: dict, swap, recipe: Path, recipe_text: str,
                kind: str, release_python: tuple[int, int] | None = None
                ) -> tuple[dict, dict[str, str], dict[str, str], tuple[int, int]]:
    """A control image's host stack (--host-stack): its manifest facts, the binds and build
    args its recipe gets (with --swap's items), and the interpreter's major.minor.
    ``kind``: the recipe's (dockerfile, definition); ``release_python``: the major.minor
    of the base release's python3 where known (an interpreter swap installs it, with the
    wheels staged for the host's: they must be the same)."""
    if hoststack.BUILD_ARG not in recipe_text:
        raise BuildError(f"--host-stack: {recipe} is not a control recipe (it takes no build "
                         f"arg {hoststack.BUILD_ARG}; containers/charliecloud/Dockerfile."
                         "control and containers/apptainer/control.def are)")
    stack = hoststack.interpreter(python)
    facts = {"release": release,
             "python": {k: stack[k] for k in ("prefix", "version", "build", "shared", "system",
                                              "executable_sha256", "libpython_sha256")}}
    binds, args = hoststack.build_binds_and_args(stack)
    if swap:
        if swaps.BUILD_ARG not in recipe_text:
            raise BuildError(f"--swap: {recipe} takes no build arg {swaps.BUILD_ARG} "
                             "(the control recipes do: containers/charliecloud/Dockerfile."
                             "control, containers/apptainer/control.def)")
        try:
            items = [swaps.swap(n) for n in swap]
        except ValueError as exc:
            raise BuildError(f"--swap: {exc}") from None
        for item in items:
            if kind not in item.recipe_kinds:
                raise BuildError(f"--swap {item.name}: a {kind} control recipe cannot swap it "
                                 f"in (only a {'/'.join(item.recipe_kinds)} one)")
        if "interpreter" in swap and release_python and \
                tuple(release_python) != tuple(stack["major_minor"]):
            have = ".".join(map(str, stack["major_minor"]))
            raise BuildError(
                f"--swap interpreter: the release's python3 is "
                f"{'.'.join(map(str, release_python))} and the host's interpreter {have}: the "
                f"wheels staged for {have} would not install; the interpreter differs in its "
                "minor version too, which no one-factor swap isolates")
        facts["swapped_in"] = [item.name for item in items]
        args[swaps.BUILD_ARG] = " ".join(swap)
    return facts, binds, args, tuple(stack["major_minor"])


def build_image(
    builder: str,
    recipe: str | os.PathLike,
    out: str | os.PathLike,
    manifest: str | os.PathLike,
    requirements: str | os.PathLike | None = None,
    cache_dir: str | os.PathLike = DEFAULT_CACHE,
    fmt: str | None = None,
    build_args_file: str | os.PathLike | None = None,
    build_args: dict[str, str] | None = None,
    fakeroot: bool = False,
    link: str = "hardlink",
    python: str = sys.executable,
    find_links: list[str] | None = None,
    no_cache: bool = False,
    tools: dict[str, str] | None = None,
    host_stack: bool = False,
    swap: tuple[str, ...] | list[str] = (),
) -> dict:
    """Build (or reuse) an image, place it at ``out``, write ``manifest``; return it.

    ``host_stack``: a control image (:mod:`scalesweep.images.hoststack`): the recipe gets
    ``python``'s interpreter (its prefix bound at /hostpython, HOST_PYTHON_PREFIX), the
    wheelhouse is staged for that interpreter, and the host's release must be the base's.
    ``swap``: with ``host_stack``, the items of the workload image swapped into it
    (:mod:`scalesweep.images.swaps`: build arg ``SWAP_IN``; recorded in the manifest's
    ``host_stack.swapped_in``).

    ``build_args`` (the site's, then overrides) win over those of ``build_args_file``;
    ``tools``: what :func:`check_builder` found, when the caller checked already."""
    t0 = time.monotonic()
    with_user(os.environ)  # ch-image and ch-run refuse to start without it
    rt = builder_runtime(builder)
    recipe = Path(recipe)
    out = Path(out)
    manifest = Path(manifest)
    cache_dir = Path(cache_dir).expanduser().resolve()
    fmt = fmt or rt.image_formats[0]
    if fmt not in rt.image_formats:
        raise BuildError(f"--format {fmt} is not available with --builder {builder} "
                         f"(it makes {', '.join(rt.image_formats)})")
    if swap and not host_stack:
        raise BuildError("--swap: an item is swapped into a control image (--host-stack)")
    tools = tools or check_builder(builder, fmt)  # (a) before doing anything else
    if not recipe.is_file():
        raise BuildError(f"recipe not found: {recipe}")
    recipe_text = recipe.read_text()
    req_path = Path(requirements) if requirements else None
    req_text = req_path.read_text() if req_path else ""
    version = builder_version(builder, tools)
    extra: dict = {"context": recipe_context_hashes(recipe)}
    args = dict(load_build_args(build_args_file)) if build_args_file else {}
    args.update(build_args or {})
    wheelhouse = None
    links = [Path(p).expanduser() for p in (find_links or [])]  # the wheelhouse's
    suite, mirror, sde = "", None, DEFAULT_SOURCE_DATE_EPOCH
    binds: dict[str, str] = {}
    if rt.recipe_kind == "dockerfile":
        m = BASE_FROM_RE.search(recipe_text)
        if not m:
            raise BuildError(
                f"{recipe}: offline {builder} builds need 'FROM localhost/scalesweep-debian:<suite>'"
            )
        suite = m.group(1)
        if not req_path:
            raise BuildError(f"--requirements is required with --builder {builder}")
        mirror = host_mirror(suite)
        sde = source_date_epoch(mirror)
        expect = DEBIAN_PYTHON.get(suite)
        if host_stack:
            extra["host_stack"], stack_binds, stack_args, expect = _host_stack(
                python, hoststack.check_release(suite), swap, recipe, recipe_text,
                rt.recipe_kind, DEBIAN_PYTHON.get(suite))
            binds.update(stack_binds)
            args.update(stack_args)
        wheelhouse = stage_wheelhouse(req_path, cache_dir, python=python,
                                      find_links=links,
                                      expect_python=expect)
        extra["base"] = {"suite": suite, "variant": BASE_VARIANT, "mirror": mirror.uri,
                         "debootstrap": debootstrap_version(tools["debootstrap"]),
                         "source_date_epoch": sde}
        if args:  # absent when empty: the cache keys of builds without args stay as they were
            extra["build_args"] = dict(args)
    else:
        parsed = parse_apptainer_def(recipe_text)
        if host_stack:
            # the host's release as the base image (its registry's), the interpreter and
            # the wheelhouse it stages bound for %post (containers/apptainer/control.def)
            release = hoststack.os_release()
            if hoststack.RELEASE_ARG not in args:
                args[hoststack.RELEASE_ARG] = hoststack.release_image(release)
            extra["host_stack"], stack_binds, stack_args, expect = _host_stack(
                python, {k: release[k] for k in ("ID", "VERSION_ID", "VERSION_CODENAME")
                         if k in release}, swap, recipe, recipe_text, rt.recipe_kind)
            if not req_path:
                raise BuildError("--requirements is required with --host-stack")
            wheelhouse = stage_wheelhouse(req_path, cache_dir, python=python,
                                          find_links=links,
                                          expect_python=expect)
            binds.update(stack_binds)
            binds[str(wheelhouse.path)] = hoststack.WHEELHOUSE_BIND
            args.update(stack_args)
        unknown = sorted(set(args) - set(parsed.arguments))
        if unknown:
            log(f"warning: build args not used by {recipe.name}: {', '.join(unknown)}")
        # The requirements file enters the key by content; its (absolute, checkout-
        # dependent) path is handed to the recipe's %files via REQUIREMENTS.
        extra["build_args"] = {k: v for k, v in args.items() if k != "REQUIREMENTS"}
        if req_path and "REQUIREMENTS" in parsed.arguments:
            args["REQUIREMENTS"] = str(req_path.resolve())
    key = cache_key(recipe_text, req_text, wheelhouse.wheels if wheelhouse else {},
                    builder, version, extra)
    entry = cache_dir / "images" / key
    logdir = cache_dir / "logs"
    logdir.mkdir(parents=True, exist_ok=True)
    logfile = logdir / f"{key[:16]}-{_dt.datetime.now().strftime('%Y%m%dT%H%M%S')}.log"
    build = Build(rt, recipe, tools, cache_dir, logfile, key, args, fakeroot,
                  wheelhouse, suite, mirror, sde, binds)
    cold = COLD_BUILDS[rt.recipe_kind]

    with file_lock(cache_dir / "images" / f"{key}.lock"):
        if no_cache and entry.exists():
            shutil.rmtree(entry)
        cached = (entry / ".complete").exists()
        if cached:
            log(f"cache hit {key[:16]}: {entry}")
            facts = json.loads((entry / "manifest.json").read_text())
        else:
            log(f"cache miss {key[:16]}: building ({builder} {version}); log: {logfile}")
            entry_tmp = entry.with_name(f".{key}.tmp-{os.getpid()}")
            shutil.rmtree(entry_tmp, ignore_errors=True)
            entry_tmp.mkdir(parents=True)
            try:
                tb = time.monotonic()
                facts = cold(build, entry_tmp)
                facts["cold_build_seconds"] = round(time.monotonic() - tb, 1)
                facts["built_at"] = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
                facts["built_on"] = socket.gethostname()
                facts["log"] = str(logfile)
                write_json_atomic(entry_tmp / "manifest.json", facts)
                (entry_tmp / ".complete").write_text(key + "\n")
                if entry.exists():
                    shutil.rmtree(entry)
                os.rename(entry_tmp, entry)
            except BaseException:
                shutil.rmtree(entry_tmp, ignore_errors=True)
                raise
        src = entry / rt.image_file
        packed_cached = None
        if fmt in rt.packed_formats:
            src, packed_cached = pack_image(rt, fmt, entry, facts, tools, logfile)
        placement = place_image(src, out, link)
        reference = load_into_storage(rt, out, tools)

    man = {
        "schema": MANIFEST_SCHEMA,
        "image": str(out),
        "format": fmt,
        "recipe": {"path": str(recipe), "sha256": sha256_text(recipe_text)},
        "requirements": ({"path": str(req_path), "sha256": sha256_file(req_path)} if req_path else None),
        "cache_key": key,
        "cache_entry": str(entry),
        "cached": cached,
        "placement": placement,
        "builder": {"name": builder, "version": version,
                    "tools": {k: v for k, v in tools.items() if k not in rt.internal_tools}},
        # the base image: the definition's Bootstrap/From (build args filled in), or the
        # offline Debian base of a Dockerfile build (its suite, mirror and date)
        "base": ({**facts["base"], "from": f"localhost/scalesweep-debian:{suite}"}
                 if suite and facts.get("base") else facts.get("base")),
        "labels": facts.get("labels"),
        "source": "built",
        "build_args": facts.get("build_args"),
        # a control image's host stack (--host-stack): the host's release and interpreter
        "host_stack": extra.get("host_stack"),
        "packages": facts.get("packages"),
        "wheels": ([{"file": n, "sha256": h} for n, h in wheelhouse.wheels.items()] if wheelhouse else None),
        "wheelhouse": ({"path": str(wheelhouse.path), "key": wheelhouse.key, "cached": wheelhouse.cached,
                        "local_pins": wheelhouse.local_pins} if wheelhouse else None),
        "size_bytes": tree_size(out),
        "tree_size_bytes": facts.get("tree_size_bytes"),
        "content_digest": facts.get("content_digest"),
        "content_digest_method": facts.get("content_digest_note") or DIGEST_METHOD,
        "build_seconds": round(time.monotonic() - t0, 2),
        "cold_build_seconds": facts.get("cold_build_seconds"),
        "built_at": facts.get("built_at"),
        "built_on": facts.get("built_on"),
        "log": str(logfile) if logfile.exists() else facts.get("log"),
    }
    if reference:
        man["reference"] = reference  # the name the runtime starts it by (podman run)
    if packed_cached is not None:
        man["squashfs_cached"] = packed_cached
    if fmt in rt.packed_formats and out.is_file():
        man["file_sha256"] = sha256_file(out)
    write_json_atomic(manifest, man)
    return man
