"""Runtimes as classes: everything scalesweep knows about one way of running a payload.

One class per runtime (in the manner of ReFrame's container platforms,
``reframe/core/containers.py``), registered by name. A runtime knows

* its name (and, for a container runtime, the entry of a site file that describes it:
  ``sites/<name>.yaml`` ``runtimes.<site_key>``; a host-MPI variant ``<name>-hostmpi``
  reads its base runtime's entry plus that entry's ``host_mpi`` part),
* whether it is native (no container at all),
* how it wraps a command: the argv in front of it (:meth:`Runtime.exec_prefix`), its
  binds, the variables it sets inside the container, the host environment it needs
  (Apptainer's ``APPTAINERENV_``, SingularityCE's ``SINGULARITYENV_``), its GPU options,
* what it records as provenance (the version command of its executable),
* how an image is built or obtained: the builder's command lines.

Every method returns data (argv lists, dicts) and starts nothing, so the exact command
lines are pinned by unit tests (``tests/test_runtimes.py``). The launcher
(:mod:`scalesweep.platform.launch`) asks the registry, never names a runtime: adding one is one
class here, one entry in the config schema's runtime enum and in the site schema.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any, ClassVar, Mapping, Sequence

# Inside every image these directories exist (created at build time: ch-run cannot
# create bind targets in a read-only image).
MOUNT_CODE = "/mnt/code"
MOUNT_DATA = "/mnt/data"
MOUNT_OUT = "/mnt/out"
IMAGE_PYTHON = "/opt/venv/bin/python"  # the payload interpreter in every image
# in the copy of an image a runtime injects the host's MPI into (``injects_host_libs``,
# ``scalesweep inject-host-mpi``): the injected host libraries
INJECT_DIR = "/opt/host-mpi/lib"

Bind = tuple[str, str]  # (host path, path in the container)


class LaunchError(ValueError):
    """A launch that cannot be built (unknown runtime, missing image, ...)."""


class UnknownRuntime(LaunchError):
    """A runtime name no class is registered for."""


class RuntimeNotOffered(LaunchError):
    """A runtime the campaign's site does not describe (no ``runtimes.<name>`` entry)."""


@dataclass(frozen=True)
class RuntimeSite:
    """One runtime's facts on one site (a site file's ``runtimes.<name>`` entry), plus the
    image to run. Built by :meth:`Runtime.site_facts`; tests build it directly."""

    image: str = ""  # ch-run: image directory or .sqfs; apptainer/singularity: .sif
    bin: str = ""  # the runtime's executable ("" = the class's default_bin)
    python: str = IMAGE_PYTHON
    gpu_flag: str = ""  # "" = the runtime's default for ``device``
    device: str = "cpu"  # the site's node.device: cpu | cuda | rocm
    binds: tuple[str, ...] = ()  # "SRC[:DST]" bound into every container
    env: tuple[tuple[str, str], ...] = ()  # variables set inside the container
    modules: tuple[str, ...] = ()  # environment modules the site loads for it (recorded)
    host_mpi_lib_dirs: tuple[str, ...] = ()  # <name>-hostmpi: LD_LIBRARY_PATH, in order
    host_mpi_image_lib_dirs: tuple[str, ...] = ()  # of them, the image's own (not bound)
    host_mpi_libs: tuple[str, ...] = ()  # host library files injected (APPTAINER_CONTAINLIBS)
    host_mpi_preload: str = ""  # e.g. cray-mpich's GPU transport layer libmpi_gtl_hsa.so.0
    host_mpi_binds: tuple[str, ...] = ()
    host_mpi_env: tuple[tuple[str, str], ...] = ()


def parse_binds(specs: Sequence[str]) -> list[Bind]:
    """``"SRC[:DST]"`` -> ``(SRC, DST or SRC)``."""
    out = []
    for spec in specs:
        src, _, dst = spec.partition(":")
        out.append((src, dst or src))
    return out


class Runtime:
    """The interface of a runtime. Subclasses set the class attributes and override the
    methods whose default does not fit; :func:`register` makes one known by its name."""

    name: ClassVar[str]
    site_key: ClassVar[str | None] = None  # entry under a site's runtimes: (None: native)
    native: ClassVar[bool] = False
    host_mpi: ClassVar[bool] = False
    # host_mpi.libs go into a copy of the image (ch-fromhost, rule inject_host_mpi) rather
    # than through a variable of the runtime (Apptainer's *_CONTAINLIBS)
    injects_host_libs: ClassVar[bool] = False
    default_bin: ClassVar[str] = ""
    install_hint: ClassVar[str] = ""  # one line: how to get default_bin
    # GPU options by site node.device when the site names none (gpu_flag)
    default_gpu_flags: ClassVar[Mapping[str, tuple[str, ...]]] = {}
    # images: "dockerfile" | "definition" (None: this runtime builds nothing itself)
    recipe_kind: ClassVar[str | None] = None
    image_formats: ClassVar[tuple[str, ...]] = ()  # the first is the builder's default
    image_file: ClassVar[str] = "image"  # the image's name inside a cache entry
    build_tools: ClassVar[tuple[str, ...]] = ()  # executables a build needs on PATH

    # --- site facts ------------------------------------------------------------------

    def site_entry(self, site: Mapping[str, Any]) -> dict[str, Any]:
        """This runtime's entry of a site (``runtimes.<site_key>``); refused if absent."""
        if self.native:
            return {}
        offered = site.get("runtimes") or {}
        if self.site_key not in offered:
            names = ", ".join(["native", *offered]) if offered else "native only"
            raise RuntimeNotOffered(
                f"runtime {self.name!r} is not offered by site {site.get('name', '?')!r} "
                f"(its file has no runtimes.{self.site_key} entry; it offers: {names})"
            )
        return dict(offered[self.site_key] or {})

    def site_facts(self, site: Mapping[str, Any], image: str = "") -> RuntimeSite:
        """The facts a launch needs, read from a loaded site (``scalesweep.platform.site``)."""
        entry = self.site_entry(site)
        mpi = (entry.get("host_mpi") or {}) if self.host_mpi else {}
        return RuntimeSite(
            image=image,
            bin=entry.get("bin") or self.default_bin,
            python=entry.get("python") or IMAGE_PYTHON,
            gpu_flag=entry.get("gpu_flag") or "",
            device=(site.get("node") or {}).get("device") or "cpu",
            binds=tuple(entry.get("binds") or ()),
            env=tuple(sorted((entry.get("env") or {}).items())),
            modules=tuple(entry.get("modules") or ()),
            host_mpi_lib_dirs=tuple(mpi.get("lib_dirs") or ()),
            host_mpi_image_lib_dirs=tuple(mpi.get("image_lib_dirs") or ()),
            host_mpi_libs=tuple(mpi.get("libs") or ()),
            host_mpi_preload=mpi.get("preload") or "",
            host_mpi_binds=tuple(mpi.get("binds") or ()),
            host_mpi_env=tuple(sorted((mpi.get("env") or {}).items())),
        )

    # --- wrapping a command ----------------------------------------------------------

    def executable(self, site: RuntimeSite) -> str:
        return site.bin or self.default_bin

    def binds(self, site: RuntimeSite, standard: Sequence[Bind]) -> list[Bind]:
        """Every bind: the launcher's (code, data, out), the site's, and in host-MPI mode
        its binds and library directories (each at the same path inside)."""
        binds = list(standard) + parse_binds(site.binds)
        if self.host_mpi:
            binds += parse_binds(site.host_mpi_binds)
            binds += [(d, d) for d in site.host_mpi_lib_dirs if d not in site.host_mpi_image_lib_dirs]
        return binds

    def host_mpi_library_path(self, site: RuntimeSite) -> list[str]:
        """The container's LD_LIBRARY_PATH in host-MPI mode: the injected libraries'
        directory (a runtime that injects ``libs`` into a copy of the image), then
        ``lib_dirs`` in their order (host directories, and the image's own ones where the
        site puts them), then any ``image_lib_dirs`` not listed there."""
        dirs = [INJECT_DIR] if self.injects_host_libs and site.host_mpi_libs else []
        dirs += [d for d in site.host_mpi_lib_dirs if d not in dirs]
        return dirs + [d for d in site.host_mpi_image_lib_dirs if d not in dirs]

    def container_env(self, site: RuntimeSite) -> list[tuple[str, str]]:
        """Variables set inside the container. Host-MPI mode (OLCF's GPU-aware MPI in
        Apptainer): LD_LIBRARY_PATH is the site's ``lib_dirs`` in order (OLCF: the GPU
        transport layer, the image's ROCm, Cray MPICH's ABI build, libfabric, the Cray PE
        libraries), replacing the image's (its own MPI is never found first); and the
        preload (the GTL, libmpi_gtl_hsa)."""
        env = list(site.env)
        if self.host_mpi:
            if not site.host_mpi_lib_dirs and not (self.injects_host_libs and site.host_mpi_libs):
                raise LaunchError(
                    f"runtime {self.name} needs host MPI library directories "
                    f"(site file: runtimes.{self.site_key}.host_mpi.lib_dirs)"
                    + (" or files (host_mpi.libs, injected with ch-fromhost)"
                       if self.injects_host_libs else "")
                )
            env += list(site.host_mpi_env)
            env.append(("LD_LIBRARY_PATH", ":".join(self.host_mpi_library_path(site))))
            if site.host_mpi_preload:
                env.append(("LD_PRELOAD", site.host_mpi_preload))
        return env

    def gpu_flags(self, site: RuntimeSite) -> list[str]:
        """The site's GPU option, or this runtime's default for the site's device."""
        if site.gpu_flag:
            return [site.gpu_flag]
        return list(self.default_gpu_flags.get(site.device, ()))

    def image_reference(self, image: str) -> str:
        """How the runtime names the image on its command line (a path, by default)."""
        return image

    def exec_prefix(self, site: RuntimeSite, binds: Sequence[Bind], workdir: str) -> list[str]:
        """The argv in front of the command run in the container (empty for native)."""
        raise NotImplementedError

    def host_env(self, site: RuntimeSite) -> dict[str, str]:
        """Variables the *host* must set for the runtime (none, unless it reads them).
        A runtime without a way to inject host library files refuses ``host_mpi.libs``."""
        if self.host_mpi and site.host_mpi_libs and not self.injects_host_libs:
            raise LaunchError(
                f"runtime {self.name} cannot inject host library files (site file: "
                f"runtimes.{self.site_key}.host_mpi.libs); bind their directory instead"
            )
        return {}

    def exec_command(self, image: str, argv: Sequence[str], bin: str = "") -> list[str]:
        """A plain command in the image, host environment kept out where the runtime
        allows (the image build's package inventory, the tests)."""
        raise NotImplementedError

    # --- provenance ------------------------------------------------------------------

    def version_command(self, bin: str = "") -> list[str]:
        """The command whose output names the runtime's version (empty for native)."""
        return [] if self.native else [bin or self.default_bin, "--version"]

    @staticmethod
    def parse_version(output: str) -> str:
        """``apptainer version 1.3.0`` -> ``1.3.0``; ``0.31`` -> ``0.31``."""
        words = output.strip().split()
        return words[-1] if words else "unknown"

    def provenance(self, site: RuntimeSite) -> dict[str, Any]:
        """What a run records about how it was run (the version comes from running
        :meth:`version_command`, see :func:`runtime_version`)."""
        record: dict[str, Any] = {"runtime": self.name, "native": self.native}
        if not self.native:
            record.update(bin=self.executable(site), version_command=self.version_command(site.bin),
                          modules=list(site.modules), host_mpi=self.host_mpi,
                          gpu_flags=self.gpu_flags(site))
        return record


# --- the registry --------------------------------------------------------------------

_REGISTRY: dict[str, Runtime] = {}


def register(cls: type[Runtime]) -> type[Runtime]:
    """Class decorator: make the runtime known by ``cls.name``."""
    existing = _REGISTRY.get(cls.name)
    if existing is not None and type(existing) is not cls:
        raise ValueError(f"runtime {cls.name!r} is already registered ({type(existing).__name__})")
    _REGISTRY[cls.name] = cls()
    return cls


def unregister(name: str) -> None:
    _REGISTRY.pop(name, None)


def runtime(name: str) -> Runtime:
    """The registered runtime ``name``; refused with the names that are known."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise UnknownRuntime(f"unknown runtime {name!r}; known: {', '.join(_REGISTRY)}") from None


def names() -> tuple[str, ...]:
    """Every runtime, in registration order (the report's colour order)."""
    return tuple(_REGISTRY)


def native_names() -> tuple[str, ...]:
    return tuple(n for n, rt in _REGISTRY.items() if rt.native)


def container_names() -> tuple[str, ...]:
    return tuple(n for n, rt in _REGISTRY.items() if not rt.native)


def is_native(name: str) -> bool:
    rt = _REGISTRY.get(name)
    return rt is not None and rt.native


def site_keys() -> tuple[str, ...]:
    """The entries a site file may have under ``runtimes:`` (one per container runtime)."""
    return tuple(dict.fromkeys(rt.site_key for rt in _REGISTRY.values() if rt.site_key))


def builders() -> tuple[str, ...]:
    """Runtimes that build images (``scalesweep build-image --builder``)."""
    return tuple(n for n, rt in _REGISTRY.items() if rt.recipe_kind and not rt.host_mpi)


def runtime_version(name: str, site: RuntimeSite, run=None) -> str | None:
    """Run the runtime's version command (``run``: a ``subprocess.run`` stand-in in
    tests); None for native or when the executable cannot be run."""
    import subprocess

    argv = runtime(name).version_command(site.bin)
    if not argv:
        return None
    try:
        proc = (run or subprocess.run)(argv, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    if proc.returncode != 0:
        return None
    return Runtime.parse_version(proc.stdout or proc.stderr)  # ch-run prints to stderr


# --- native --------------------------------------------------------------------------


@register
class Native(Runtime):
    """No container: the host's Python runs the payload from the repository."""

    name = "native"
    native = True

    def exec_prefix(self, site, binds, workdir):
        return []

    def exec_command(self, image, argv, bin=""):
        return list(argv)


@register
class NativeAA(Native):
    """The A/A calibration (``measurement.aa_calibration``): a second, identical native
    runtime that the statistics must call "equivalent" to native."""

    name = "native-aa"


# --- Charliecloud --------------------------------------------------------------------
# ch-run(1), Charliecloud 0.31 (`ch-run --help` here; the man page):
#   -b, --bind=SRC[:DST]  bind-mount SRC at guest DST; with a read-only image DST must
#                         exist in the image (the images create /mnt/{code,data,out})
#   -c, --cd=DIR          initial working directory in the container
#   --set-env=VAR=VALUE   set a variable in the container ($ in VALUE is expanded)
#   IMAGE -- CMD ARGS     the image (directory or SquashFS), then the command
# ch-run passes the host environment through (like Apptainer), so MASTER_ADDR, the rank
# variables of mpirun/srun and OMP_NUM_THREADS reach the payload unchanged.


@register
class Charliecloud(Runtime):
    name = "charliecloud"
    site_key = "charliecloud"
    default_bin = "ch-run"
    install_hint = "install the Debian package 'charliecloud' (apt-get install charliecloud)"
    # ch-run has no GPU option: the host's /dev is the container's; the GPU user-space
    # libraries must be in the image (or injected with ch-fromhost).
    recipe_kind = "dockerfile"
    image_formats = ("dir", "squashfs")
    image_file = "image"
    build_tools = ("ch-image", "ch-run", "debootstrap", "unshare", "tar", "cp")
    builder_python = "/usr/bin/python3"  # ch-image needs Debian's python3-lark

    def exec_prefix(self, site, binds, workdir):
        cmd = [self.executable(site), *self.gpu_flags(site)]
        cmd += [f"--bind={src}:{dst}" for src, dst in binds]
        cmd += [f"--set-env={k}={v}" for k, v in self.container_env(site)]
        return cmd + [f"--cd={workdir}", self.image_reference(site.image), "--"]

    def exec_command(self, image, argv, bin="", binds: Sequence[str] = ()):
        cmd = [bin or self.default_bin]
        for b in binds:
            cmd += ["-b", b]
        return cmd + [str(image), "--", *argv]

    # ch-image(1): `-s DIR` storage, `--no-cache` (no build cache), `build --force`
    # (its fakeroot workaround so apt works unprivileged), `-b SRC:DST` bind for RUN
    # steps, `--build-arg KEY=VALUE`, `-t TAG`, `-f DOCKERFILE CONTEXT`; `import TAR NAME`.

    def builder_prefix(self, python: str | None = builder_python, ch_image: str = "ch-image") -> list[str]:
        """How to start ch-image: through the system Python that has its ``lark`` module."""
        return [python, ch_image] if python else [ch_image]

    def import_command(self, tarball: str, name: str, storage: str,
                       prefix: list[str] | None = None) -> list[str]:
        return (prefix or self.builder_prefix()) + ["-s", str(storage), "--no-cache", "import",
                                                    str(tarball), name]

    def build_command(self, recipe: str, tag: str, storage: str, context: str,
                      binds: Mapping[str, str] | None = None,
                      build_args: Mapping[str, str] | None = None,
                      force: bool = True, prefix: list[str] | None = None) -> list[str]:
        """``ch-image build``; ``binds`` = {host path: image path} for RUN steps only."""
        cmd = (prefix or self.builder_prefix()) + ["-s", str(storage), "--no-cache", "build"]
        if force:
            cmd.append("--force")
        for src, dst in (binds or {}).items():
            cmd += ["-b", f"{src}:{dst}"]
        for k, v in (build_args or {}).items():
            cmd += ["--build-arg", f"{k}={v}"]
        return cmd + ["-t", tag, "-f", str(recipe), str(context)]

    def convert_command(self, src_dir: str, dest: str, ch_convert: str = "ch-convert") -> list[str]:
        """Charliecloud's own directory -> SquashFS conversion (not bit-reproducible: it
        keeps file mtimes); the image build uses ``images.mksquashfs_command`` instead."""
        return [ch_convert, "-i", "dir", "-o", "squash", str(src_dir), str(dest)]


@register
class Apptainer(Runtime):
    """Apptainer (apptainer.org docs, "apptainer exec", "Environment and metadata",
    "GPU support", "Build a container"):

      exec                     run a command in the image
      --nv / --rocm            bind the host's NVIDIA / ROCm driver stack, expose the GPUs
      --bind SRC:DST[,...]     bind mounts (comma-separated)
      --pwd DIR                initial working directory in the container
      APPTAINERENV_NAME=VALUE  in the host environment: NAME=VALUE inside (not expanded)

    The host environment passes through by default (like ch-run)."""

    name = "apptainer"
    site_key = "apptainer"
    default_bin = "apptainer"
    env_prefix = "APPTAINERENV_"
    containlibs_var = "APPTAINER_CONTAINLIBS"
    install_hint = (
        "install Apptainer >= 1.2 (on Frontier it is in the default environment; "
        "elsewhere `module load apptainer`; not packaged in Debian bookworm, see "
        "https://apptainer.org/docs/admin/main/installation.html)"
    )
    default_gpu_flags = {"cuda": ("--nv",), "rocm": ("--rocm",)}
    recipe_kind = "definition"
    image_formats = ("sif",)
    image_file = "image.sif"

    @property
    def build_tools(self) -> tuple[str, ...]:  # type: ignore[override]
        return (self.default_bin, "cp")

    def exec_prefix(self, site, binds, workdir):
        cmd = [self.executable(site), "exec", *self.gpu_flags(site)]
        cmd += ["--bind", ",".join(f"{src}:{dst}" for src, dst in binds)]
        return cmd + ["--pwd", workdir, self.image_reference(site.image)]

    def host_env(self, site):
        env = {f"{self.env_prefix}{k}": v for k, v in self.container_env(site)}
        if self.host_mpi and site.host_mpi_libs:
            # host files bound into the container's library directory (/.singularity.d/libs,
            # on its LD_LIBRARY_PATH): the system libraries Cray MPICH and libfabric load
            # that the image lacks (OLCF: libcxi, libjson-c, libnl-3, libxpmem, ...)
            env[self.containlibs_var] = ",".join(site.host_mpi_libs)
        return env

    def exec_command(self, image, argv, bin=""):
        # --silent: no warnings in the captured output; --cleanenv: the host's
        # environment stays out of the inventory
        return [bin or self.default_bin, "--silent", "exec", "--cleanenv", str(image), *argv]

    def build_command(self, out_sif: str, recipe: str, build_args: Mapping[str, str] | None = None,
                      fakeroot: bool = False, bin: str = "", extra: Sequence[str] = ()) -> list[str]:
        """``build [--fakeroot] [--warn-unused-build-args --build-arg K=V ...] OUT.sif DEF``.

        ``--fakeroot``: build as an unprivileged user (root mapped in a user namespace);
        ``--build-arg KEY=VALUE`` fills a ``{{ KEY }}`` of the definition file (Apptainer
        >= 1.2, SingularityCE >= 4.0), in the order given; ``--warn-unused-build-args``
        lets one set of args serve several recipes (an unused arg is otherwise fatal)."""
        cmd = [bin or self.default_bin, "build"]
        if fakeroot:
            cmd.append("--fakeroot")
        cmd += list(extra)
        if build_args:
            cmd.append("--warn-unused-build-args")
            for k, v in build_args.items():
                cmd += ["--build-arg", f"{k}={v}"]
        return cmd + [str(out_sif), str(recipe)]

    def pull_command(self, out_sif: str, uri: str, bin: str = "") -> list[str]:
        """``pull --force OUT.sif URI`` (oras://, docker://, library://, https://): a
        registry image as one SIF file (docker:// layers are converted)."""
        return [bin or self.default_bin, "pull", "--force", str(out_sif), uri]

    def inspect_command(self, image: str, bin: str = "") -> list[str]:
        """``inspect --json IMAGE``: the image's labels (build date, base image, the
        definition's %labels) and definition file, as JSON (data.attributes)."""
        return [bin or self.default_bin, "inspect", "--json", str(image)]


@register
class ApptainerHostMPI(Apptainer):
    """Apptainer with the host's MPI bound in and first on the library path (hybrid
    model; the OLCF recipe for cray-mpich on Frontier)."""

    name = "apptainer-hostmpi"
    host_mpi = True


@register
class CharliecloudHostMPI(Charliecloud):
    """Charliecloud with the host's MPI, either way ch-run allows: library directories
    bound (``--bind``, ``host_mpi.lib_dirs``) or library files injected with ch-fromhost
    into a copy of the image (``host_mpi.libs``, rule inject_host_mpi, at
    :data:`scalesweep.platform.runtimes.INJECT_DIR`), set first on the container's LD_LIBRARY_PATH
    (``--set-env``). Bind destinations must exist in the image (ch-run cannot create them
    in a read-only image): a site binding /opt/cray needs /opt/cray in the image."""

    name = "charliecloud-hostmpi"
    host_mpi = True
    injects_host_libs = True


@register
class Singularity(Apptainer):
    """SingularityCE (sylabs.io docs, singularity-exec(1), singularity-build(1)): the same
    command line as Apptainer (its fork) - ``exec``, ``--nv``/``--rocm``, ``--bind``,
    ``--pwd``, ``build --fakeroot --build-arg``, SIF images - but it reads host variables
    prefixed ``SINGULARITYENV_``."""

    name = "singularity"
    site_key = "singularity"
    default_bin = "singularity"
    env_prefix = "SINGULARITYENV_"
    containlibs_var = "SINGULARITY_CONTAINLIBS"
    install_hint = (
        "install SingularityCE >= 4.0 (`module load singularity` on most HPC sites; "
        "https://docs.sylabs.io/guides/latest/admin-guide/installation.html)"
    )


@register
class SingularityHostMPI(Singularity):
    name = "singularity-hostmpi"
    host_mpi = True


# --- Podman --------------------------------------------------------------------------


@register
class Podman(Runtime):
    """Rootless Podman (podman-run(1), podman-build(1), docs.podman.io):

      run --rm                 remove the container when it exits
      --userns=keep-id         the user's UID:GID inside too (rootless only: refused for
                               root), so files written to the bound output dir are theirs
      --pull=never             never contact a registry: the image is in local storage
      --network=host, --ipc=host  the host's network and /dev/shm: ranks in separate
                               containers rendezvous (MASTER_ADDR) and share memory as
                               natively
      --env-host               the host environment inside (ch-run and Apptainer pass it
                               too): the rank variables of mpirun/srun, MASTER_ADDR, ...
      --security-opt=label=disable  no SELinux label separation: the bound repository
                               and data stay readable without relabelling host files
      --device=nvidia.com/gpu=all   the GPUs through CDI (NVIDIA Container Toolkit's
                               generated spec); AMD: /dev/kfd and /dev/dri, with the
                               user's groups kept (--group-add=keep-groups)
      --volume SRC:DST         bind mounts
      --env NAME=VALUE         variables inside (win over --env-host)
      --workdir DIR            initial working directory

    The image is a reference in the user's local storage; the image build tags what it
    places at a path with :meth:`storage_reference` of that path."""

    name = "podman"
    site_key = "podman"
    default_bin = "podman"
    install_hint = "install Podman >= 4.1 (rootless; apt-get install podman) with the site's CDI specs for GPUs"
    default_gpu_flags = {
        "cuda": ("--device=nvidia.com/gpu=all",),
        "rocm": ("--device=/dev/kfd", "--device=/dev/dri", "--group-add=keep-groups"),
    }
    recipe_kind = "dockerfile"
    image_formats = ("oci-dir",)
    image_file = "image"
    build_tools = ("podman", "debootstrap", "unshare", "tar", "cp")
    run_options = ("--rm", "--userns=keep-id", "--pull=never", "--network=host", "--ipc=host",
                   "--env-host", "--security-opt=label=disable")

    @staticmethod
    def storage_reference(path: str) -> str:
        """The local-storage name of the image placed at ``path`` (an absolute path):
        ``localhost/scalesweep/<name>-<12 hex of the path>``: two campaigns' images of
        the same name never share a tag."""
        base = re.sub(r"[^a-z0-9]+", "-", path.rstrip("/").rsplit("/", 1)[-1].lower()).strip("-")
        digest = hashlib.sha256(path.encode()).hexdigest()[:12]
        return f"localhost/scalesweep/{base or 'image'}-{digest}"

    def image_reference(self, image: str) -> str:
        return self.storage_reference(image) if image.startswith("/") else image

    def exec_prefix(self, site, binds, workdir):
        cmd = [self.executable(site), "run", *self.run_options, *self.gpu_flags(site)]
        for src, dst in binds:
            cmd += ["--volume", f"{src}:{dst}"]
        for k, v in self.container_env(site):
            cmd += ["--env", f"{k}={v}"]
        return cmd + ["--workdir", workdir, self.image_reference(site.image)]

    def exec_command(self, image, argv, bin=""):
        return [bin or self.default_bin, "run", "--rm", "--pull=never", "--network=none",
                self.image_reference(image), *argv]

    # podman-build(1), podman-import(1), podman-save(1), podman-pull(1), podman-tag(1)

    def import_command(self, tarball: str, name: str, bin: str = "") -> list[str]:
        """A rootfs tarball as image ``name`` in local storage (the offline base)."""
        return [bin or self.default_bin, "import", str(tarball), name]

    def build_command(self, recipe: str, tag: str, context: str,
                      binds: Mapping[str, str] | None = None,
                      build_args: Mapping[str, str] | None = None, bin: str = "") -> list[str]:
        """``build --pull=never`` (base images only from local storage) ``--volume SRC:DST``
        (bind for RUN steps) ``--build-arg K=V -t TAG -f RECIPE CONTEXT``."""
        cmd = [bin or self.default_bin, "build", "--pull=never"]
        for src, dst in (binds or {}).items():
            cmd += ["--volume", f"{src}:{dst}"]
        for k, v in (build_args or {}).items():
            cmd += ["--build-arg", f"{k}={v}"]
        return cmd + ["-t", tag, "-f", str(recipe), str(context)]

    def save_command(self, ref: str, out_dir: str, bin: str = "") -> list[str]:
        """The image as a directory (manifest, config and layers as files, OCI media
        types): what is cached, placed and loaded on other nodes."""
        return [bin or self.default_bin, "save", "--format", "oci-dir", "-o", str(out_dir), ref]

    def load_command(self, image_dir: str, bin: str = "") -> list[str]:
        """Copy a saved image directory into local storage (prints the image ID)."""
        return [bin or self.default_bin, "pull", "--quiet", f"dir:{image_dir}"]

    def tag_command(self, image_id: str, ref: str, bin: str = "") -> list[str]:
        return [bin or self.default_bin, "tag", image_id, ref]
