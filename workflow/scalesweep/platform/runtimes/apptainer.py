"""Apptainer and SingularityCE (its fork, the same command line): SIF images built from a
definition file or pulled (``apptainer``, ``singularity``, and their ``-hostmpi``
variants with the host's MPI)."""

from __future__ import annotations

from typing import Mapping, Sequence

from scalesweep.platform.runtimes.base import CONTROL_MODE, Runtime
from scalesweep.platform.runtimes.registry import register


@register
class Apptainer(Runtime):
    """Apptainer (apptainer.org docs, "apptainer exec", "Environment and metadata",
    "GPU support", "Build a container"):

      exec                     run a command in the image
      --nv / --rocm            bind the host's NVIDIA / ROCm driver stack, expose the GPUs
      --bind SRC:DST[,...]     bind mounts (comma-separated)
      --pwd DIR                initial working directory in the container
      APPTAINERENV_NAME=VALUE  in the host environment: NAME=VALUE inside (not expanded)
      -u, --userns             "run container in a new user namespace" (apptainer
                               exec --help; cmd/internal/cli/action_flags.go): no set-uid
                               starter, the SIF's SquashFS mounted with squashfuse
      build -s, --sandbox      "build image as sandbox format (chroot directory
                               structure)": `build --sandbox DIR IMAGE.sif` unpacks a SIF

    The host environment passes through by default (like ch-run).

    Its modes (which one a site offers: ``runtimes.<name>.modes``): ``setuid``, a SIF
    through the starter as installed, no option (set-uid root where the apptainer-suid
    component is installed: the kernel mounts the SIF; the default, as run before modes
    existed); ``userns``, a SIF with ``--userns``, unprivileged (squashfuse mounts it,
    apptainer/apptainer#665: hours instead of minutes for one job); ``sandbox``, a sandbox
    directory unpacked from the SIF (nothing mounted at start)."""

    name = "apptainer"
    order = 3
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
    image_formats = ("sif", "sandbox")
    image_file = "image.sif"
    digest_note = "sha256 of the SIF file (SIF builds are not bit-reproducible)"
    packed_formats = {"sandbox": "image.sandbox"}  # the SIF unpacked (a directory)
    modes = {
        "setuid": "SIF through the starter as installed (set-uid root with apptainer-suid)",
        "userns": "SIF in an unprivileged user namespace (--userns), mounted with squashfuse",
        "sandbox": "sandbox directory unpacked from the SIF (nothing mounted at start)",
        CONTROL_MODE: "the control image (the host's own stack, issue #43) as a SIF through "
                      "the starter as installed: native vs it is what isolation costs",
    }
    mode_options = {"setuid": (), "userns": ("--userns",), "sandbox": (), CONTROL_MODE: ()}

    def mode_formats(self):
        return ("sandbox",) if self.run_mode == "sandbox" else ("sif",)

    @property
    def build_tools(self) -> tuple[str, ...]:  # type: ignore[override]
        return (self.default_bin, "cp")

    def exec_prefix(self, site, binds, workdir):
        cmd = [self.executable(site), "exec", *self.mode_options[self.run_mode],
               *self.gpu_flags(site)]
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

    def pack_command(self, fmt, src, dest, source_date_epoch, tools):
        """The built SIF unpacked into a sandbox directory (``build --sandbox DEST SIF``)."""
        if fmt != "sandbox":
            return super().pack_command(fmt, src, dest, source_date_epoch, tools)
        return self.sandbox_command(src, dest, tools.get(self.default_bin, self.default_bin))

    def sandbox_command(self, sif: str, dest: str, bin: str = "") -> list[str]:
        return [bin or self.default_bin, "build", "--sandbox", str(dest), str(sif)]

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
    order = 4
    host_mpi = True


@register
class Singularity(Apptainer):
    """SingularityCE (sylabs.io docs, singularity-exec(1), singularity-build(1)): the same
    command line as Apptainer (its fork) - ``exec``, ``--nv``/``--rocm``, ``--bind``,
    ``--pwd``, ``build --fakeroot --build-arg``, SIF images - but it reads host variables
    prefixed ``SINGULARITYENV_``."""

    name = "singularity"
    order = 6
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
    order = 7
    host_mpi = True
