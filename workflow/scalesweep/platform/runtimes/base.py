"""The runtime interface and its registry: everything scalesweep knows about one way of
running a payload is one class, registered by name (in the manner of ReFrame's container
platforms, ``reframe/core/containers.py``). A runtime knows

* its name (and, for a container runtime, the entry of a site file that describes it:
  ``sites/<name>.yaml`` ``runtimes.<site_key>``; a host-MPI variant ``<name>-hostmpi``
  reads its base runtime's entry plus that entry's ``host_mpi`` part),
* whether it is native (no container at all),
* how it wraps a command: the argv in front of it (:meth:`Runtime.exec_prefix`), its
  binds, the variables it sets inside the container, the host environment it needs
  (Apptainer's ``APPTAINERENV_``, SingularityCE's ``SINGULARITYENV_``), its GPU options,
* its modes (:attr:`Runtime.modes`): the ways it runs the same image (Charliecloud: an
  unpacked directory or a SquashFS file; Apptainer: the set-uid starter, a user
  namespace, a sandbox directory; Podman: its storage driver), each with its command
  line in the class. A campaign names a mode by a runtime token ``<name>+<mode>``
  (``charliecloud+squashfs``); the plain name is the default mode (the first), so the
  points and paths of campaigns without modes stay as they were. A site offers modes in
  ``runtimes.<site_key>.modes`` (the default mode alone where it names none),
* what it records as provenance (the version command of its executable, the mode),
* how its image is built: the checks before a build (:meth:`Runtime.build_preflight`),
  the steps of a build from the offline Debian base (:meth:`Runtime.dockerfile_steps`) or
  of a definition file (``build_command``), the formats it packs an image into
  (:meth:`Runtime.pack_command`), how a placed image enters its storage
  (:meth:`Runtime.load_steps`).

Every method returns data (argv lists, dicts) and starts nothing, so the exact command
lines are pinned by unit tests (``tests/unit/test_runtimes.py``); :mod:`scalesweep.images.build`
runs the steps and never asks which runtime it builds for. The launcher
(:mod:`scalesweep.platform.launch`) asks the registry, never names a runtime. Adding a
runtime is one module in this package (``platform/runtimes/<name>.py``: found by
``platform/runtimes/__init__.py``), plus its recipe; a site offers it under ``runtimes:``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Mapping, Sequence

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


class UnknownMode(UnknownRuntime):
    """A runtime token whose mode its runtime does not have (``charliecloud+nope``)."""


class ModeNotOffered(RuntimeNotOffered):
    """A mode the campaign's site does not offer (not in ``runtimes.<name>.modes``)."""


# A runtime token: "<runtime>" (its default mode) or "<runtime>+<mode>". Not ":" (the
# token is a path segment of a point, and point directories are bound SRC:DST).
MODE_SEP = "+"
# the mode that runs a campaign's control image (the host's own stack, issue #43) in place
# of the workload's: charliecloud+control
CONTROL_MODE = "control"


def split_token(token: str) -> tuple[str, str]:
    """``charliecloud+squashfs`` -> ``("charliecloud", "squashfs")``; a plain name ->
    ``(name, "")`` (its default mode)."""
    name, _, mode = str(token).partition(MODE_SEP)
    return name, mode


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
    mode: str = ""  # the mode run ("" = the runtime's default mode)
    # options of the runtime's own command before its subcommand (podman: --runtime,
    # --cgroup-manager), and in place of the class's defaults of its run command (None:
    # the class's); where its storage lives (podman --root): site facts
    global_options: tuple[str, ...] = ()
    run_options: tuple[str, ...] | None = None
    storage_root: str = ""


def parse_binds(specs: Sequence[str]) -> list[Bind]:
    """``"SRC[:DST]"`` -> ``(SRC, DST or SRC)``."""
    out = []
    for spec in specs:
        src, _, dst = spec.partition(":")
        out.append((src, dst or src))
    return out


@dataclass(frozen=True)
class Preflight:
    """A check before a build: ``argv`` must exit 0 (None: what it needs is missing, and
    ``missing`` says so); the tool it checked is recorded as ``tools[key]`` (``argv[0]``)."""

    key: str
    argv: list[str] | None
    missing: str


@dataclass(frozen=True)
class DockerfileBuild:
    """What a Dockerfile build from the offline Debian base is given (by
    :func:`scalesweep.images.build.build_image`): every path absolute or as the caller has it."""

    recipe: str
    context: str  # the recipe's directory
    tools: Mapping[str, str]  # what the preflight found: tool -> path
    base_tarball: str  # the Debian rootfs tarball (scalesweep.images.rootfs)
    base_name: str  # the name the recipe's FROM gives it: localhost/scalesweep-debian:<suite>
    binds: Mapping[str, str]  # host path -> image path, for RUN steps (the wheelhouse)
    build_args: Mapping[str, str]
    key: str  # the cache key (names a build uniquely)
    scratch: str  # a private directory the steps may create (removed afterwards)
    product: str  # where the image must lie when the steps are done


@dataclass(frozen=True)
class BuildSteps:
    """One cold build, as commands: run in order (logged); then the image at ``built`` is
    moved to the request's ``product`` (where they differ), and ``inventory`` + a command
    runs that command in it (the package inventory)."""

    commands: list[list[str]]
    built: str
    inventory: list[str]
    clean_env: bool = True  # a minimal environment (else the host's)
    facts: dict[str, Any] = field(default_factory=dict)  # into the build's manifest


@dataclass(frozen=True)
class StorageLoad:
    """How a placed image enters a runtime's own storage in one mode (rule load_image):
    ``check`` prints the content digest the stored ``reference`` carries (fails where it
    is not there: then it is loaded); ``command`` loads it, fed the output of ``stdin``
    where given; with ``tag`` the last word ``command`` prints (an image ID) is tagged
    ``reference`` by ``tag + [ID, reference]``."""

    reference: str
    check: list[str]
    command: list[str]
    stdin: list[str] | None = None
    tag: list[str] | None = None


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
    # what the manifest's content_digest_method says where the image is not a tree
    # hashed by scalesweep.images.digest.content_digest's own method (None: it is)
    digest_note: ClassVar[str | None] = None
    # tools the preflight records that the manifest leaves out (interpreters and such)
    internal_tools: ClassVar[tuple[str, ...]] = ()
    # formats a built image is packed into, each as a file of the cache entry
    packed_formats: ClassVar[Mapping[str, str]] = {}
    # a JSON file in the built image whose build-time stamps are pinned (reproducibility)
    metadata_file: ClassVar[str | None] = None
    # place in lists of runtimes (the report's colour order); a new one comes after
    order: ClassVar[int] = 100
    # runs images from its own storage (Podman): rule load_image copies each image there,
    # per mode (storage_load)
    loads_images: ClassVar[bool] = False
    # the ways this runtime runs the same image: mode -> what it is (one line); the first
    # is the default, run under the plain name (no modes: one, unnamed)
    modes: ClassVar[Mapping[str, str]] = {}
    # this instance's mode ("" = the default): runtime(token) gives one per mode
    mode: str = ""

    # --- modes -----------------------------------------------------------------------

    @property
    def default_mode(self) -> str:
        return next(iter(self.modes), "")

    @property
    def run_mode(self) -> str:
        """The mode this instance runs (its own, else the default; "" without modes)."""
        return self.mode or self.default_mode

    @property
    def token(self) -> str:
        """How a campaign names this runtime in this mode (the plain name: the default)."""
        if not self.mode or self.mode == self.default_mode:
            return self.name
        return f"{self.name}{MODE_SEP}{self.mode}"

    def with_mode(self, mode: str) -> "Runtime":
        """This runtime in ``mode`` (refused, naming the modes it has, if it has none such;
        its default mode is spelled by the plain name alone)."""
        if not mode:
            return self
        if mode not in self.modes:
            have = ", ".join(self.modes) if self.modes else "none"
            raise UnknownMode(f"runtime {self.name!r} has no mode {mode!r} "
                              f"(in {self.name}{MODE_SEP}{mode}; its modes: {have})")
        if mode == self.default_mode:
            raise UnknownMode(f"{self.name}{MODE_SEP}{mode}: {mode!r} is the default mode of "
                              f"runtime {self.name}: write {self.name!r}")
        moded = type(self)()
        moded.mode = mode
        return moded

    @property
    def runs_control(self) -> bool:
        """Does this token run a control image (the host's own stack, issue #43: mode
        ``control``) rather than the workload's image?"""
        return self.run_mode == CONTROL_MODE

    def image_mode(self, image: str) -> str:
        """The mode a run of ``image`` is in (its token's; a runtime whose plain name runs
        several formats says which one the image is)."""
        return self.run_mode

    def mode_formats(self) -> tuple[str, ...]:
        """The image formats this runtime runs in its mode (the workload's first image of
        one of them is run): by default every format it has."""
        return self.image_formats

    def offered_modes(self, site: Mapping[str, Any]) -> tuple[str, ...]:
        """The modes the site offers (``runtimes.<site_key>.modes``; the default mode
        alone where it names none)."""
        entry = self.site_entry(site)
        return tuple(entry.get("modes") or ((self.default_mode,) if self.modes else ()))

    def check_offered(self, site: Mapping[str, Any]) -> None:
        """Refuse a runtime or mode the site does not offer, naming the bad value."""
        entry = self.site_entry(site)
        for mode in entry.get("modes") or ():
            if mode not in self.modes:
                raise UnknownMode(
                    f"site {site.get('name', '?')!r}: runtimes.{self.site_key}.modes: "
                    f"{mode!r} is not a mode of runtime {self.name} "
                    f"(its modes: {', '.join(self.modes) or 'none'})")
        if self.modes and self.run_mode not in self.offered_modes(site):
            raise ModeNotOffered(
                f"runtime {self.token!r}: mode {self.run_mode!r} is not offered by site "
                f"{site.get('name', '?')!r} (its file's runtimes.{self.site_key}.modes: "
                f"{', '.join(self.offered_modes(site))})")

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
            mode=self.image_mode(image),
            global_options=tuple(entry.get("global_options") or ()),
            run_options=(tuple(entry["run_options"]) if entry.get("run_options") is not None
                         else None),
            storage_root=entry.get("storage_root") or "",
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

    # --- building its image (steps only: scalesweep.images.build runs them) ----------

    def format_tools(self, fmt: str) -> tuple[str, ...]:
        """Executables a build into ``fmt`` needs beyond :attr:`build_tools`."""
        return ()

    def build_preflight(self, which: Callable[[str], str | None]) -> list[Preflight]:
        """Checks a build needs beyond its tools being on PATH (``which``: shutil.which)."""
        return []

    def builder_version_command(self, tools: Mapping[str, str]) -> list[str]:
        """The command naming the builder's version (it enters the cache key)."""
        return self.version_command(tools[self.default_bin])

    def dockerfile_steps(self, req: DockerfileBuild) -> BuildSteps:
        """The cold build of a Dockerfile (``recipe_kind == "dockerfile"``)."""
        raise NotImplementedError(f"runtime {self.name} builds no Dockerfile")

    def pin_build_stamps(self, metadata: dict[str, Any], stamp: str) -> dict[str, Any]:
        """:attr:`metadata_file`'s content with its build-time stamps set to ``stamp``."""
        return metadata

    def pack_requires(self, fmt: str) -> tuple[str, ...]:
        """Paths the built tree must have before it is packed into ``fmt``."""
        return ()

    def pack_command(self, fmt: str, src: str, dest: str, source_date_epoch: int,
                     tools: Mapping[str, str]) -> list[str]:
        """The built tree ``src`` packed into ``fmt`` at ``dest`` (:attr:`packed_formats`)."""
        raise NotImplementedError(f"runtime {self.name} packs no {fmt}")

    def storage_load(self, site: RuntimeSite, image: str, fmt: str,
                     digest: str = "") -> StorageLoad | None:
        """For a runtime that runs images from its own storage: how the image placed at
        ``image`` (absolute, of format ``fmt``, content digest ``digest``) enters the
        storage of this runtime's mode on this site (rule load_image, once per image and
        mode). None: the image runs where it lies (no rule)."""
        return None

    def load_steps(self, image: str, tools: Mapping[str, str]) -> tuple[str, list[str]] | None:
        """For a runtime that runs images from its own storage: the name it runs the
        image placed at ``image`` (absolute) by, and the command that copies it there
        (its output's last word: the image ID, tagged with that name by
        ``tag_command``). None: the image runs where it lies."""
        return None

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
                          gpu_flags=self.gpu_flags(site), mode=self.run_mode or None,
                          mode_description=self.modes.get(self.run_mode))
        return record
