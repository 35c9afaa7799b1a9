"""Charliecloud: ``ch-run`` runs a directory or SquashFS image; ``ch-image`` builds it
from the offline Debian base (``charliecloud``, and ``charliecloud-hostmpi`` with the
host's MPI)."""

from __future__ import annotations

import os
from typing import Mapping, Sequence

from scalesweep.platform.runtimes.base import (CONTROL_MODE, BuildSteps, DockerfileBuild,
                                                Preflight, Runtime)
from scalesweep.platform.runtimes.registry import register

# Paths ch-run needs in an image (ch-convert's mount_points_ensure): a SquashFS lacking
# them cannot be mounted read-only with its binds.
CH_RUN_MOUNT_POINTS = ("bin", "dev", "etc", "mnt", "proc", "usr", *(f"mnt/{i}" for i in range(10)),
                       "etc/hosts", "etc/resolv.conf")
# ch-run(1), Charliecloud 0.31 (`ch-run --help` here; the man page):
#   -b, --bind=SRC[:DST]  bind-mount SRC at guest DST; with a read-only image DST must
#                         exist in the image (the images create /mnt/{code,data,out})
#   -c, --cd=DIR          initial working directory in the container
#   --set-env=VAR=VALUE   set a variable in the container ($ in VALUE is expanded)
#   IMAGE -- CMD ARGS     the image (directory or SquashFS), then the command
# ch-run passes the host environment through (like Apptainer), so MASTER_ADDR, the rank
# variables of mpirun/srun and OMP_NUM_THREADS reach the payload unchanged.
# Its modes: IMAGE is a directory (mode dir: ch-run pivots into the unpacked tree) or a
# SquashFS file (mode squashfs: ch-run mounts it itself with squashfuse, a FUSE daemon per
# container start, and unmounts it when the command exits; needs /dev/fuse). The command
# line is the same; the mode decides which image (format) it is given.


@register
class Charliecloud(Runtime):
    name = "charliecloud"
    order = 2
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
    internal_tools = ("python_for_ch_image",)
    packed_formats = {"squashfs": "image.sqfs"}
    metadata_file = "ch/metadata.json"  # ch-image's record of the build ("created" per step)
    modes = {
        "dir": "directory image: the unpacked tree, ch-run pivots into it",
        "squashfs": "SquashFS file mounted by ch-run with squashfuse (FUSE), per container",
        CONTROL_MODE: "the control image (the host's own stack, issue #43) as a directory: "
                      "native vs it is what isolation costs",
    }

    def mode_formats(self):
        """charliecloud+squashfs runs SquashFS files, charliecloud+control a directory (the
        control image); the plain name (the default) runs either format, as before modes
        existed (a workload whose only image is a SquashFS file), its mode then the
        image's (:meth:`image_mode`)."""
        if self.mode == CONTROL_MODE:
            return ("dir",)
        return (self.mode,) if self.mode else self.image_formats

    def image_mode(self, image):
        """ch-run mounts a file image as SquashFS: a .sqfs image is run in mode squashfs."""
        if not self.mode and image.endswith((".sqfs", ".squashfs", ".sqsh")):
            return "squashfs"
        return self.run_mode

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
        keeps file mtimes); the image build uses :meth:`mksquashfs_command` instead."""
        return [ch_convert, "-i", "dir", "-o", "squash", str(src_dir), str(dest)]

    # --- its image build -------------------------------------------------------------

    def format_tools(self, fmt):
        return ("mksquashfs",) if fmt == "squashfs" else ()

    def build_preflight(self, which):
        """ch-image must start: it needs the Python module ``lark`` (Debian: python3-lark,
        pulled in by charliecloud), so it is run with /usr/bin/python3, not whatever
        ``python3`` is first on PATH."""
        py = self.builder_python if os.access(self.builder_python, os.X_OK) else which("python3")
        return [Preflight(
            "python_for_ch_image", [py, "-c", "import lark"] if py else None,
            "ch-image needs the Python module 'lark': install the Debian package "
            "'python3-lark' (a dependency of 'charliecloud') for /usr/bin/python3",
        )]

    def builder_version_command(self, tools):
        return self.builder_prefix(tools["python_for_ch_image"], tools["ch-image"]) + ["--version"]

    def dockerfile_steps(self, req: DockerfileBuild) -> BuildSteps:
        """``ch-image import`` of the base and ``ch-image build`` into a private storage
        (``req.scratch``); the image is that storage's ``img/<tag>``."""
        prefix = self.builder_prefix(req.tools["python_for_ch_image"], req.tools["ch-image"])
        tag = f"scalesweep-build-{req.key[:16]}"
        return BuildSteps(
            commands=[
                self.import_command(req.base_tarball, req.base_name, req.scratch, prefix),
                self.build_command(req.recipe, tag, req.scratch, context=req.context,
                                   binds=req.binds, build_args=req.build_args, prefix=prefix),
            ],
            built=f"{req.scratch}/img/{tag}",
            inventory=self.exec_command(req.product, [], bin=req.tools["ch-run"]),
        )

    def pin_build_stamps(self, metadata, stamp):
        """/ch/metadata.json's "created" of each build step (its history)."""
        for entry in metadata.get("history", []):
            if "created" in entry:
                entry["created"] = stamp
        return metadata

    def pack_requires(self, fmt):
        return CH_RUN_MOUNT_POINTS if fmt == "squashfs" else ()

    def pack_command(self, fmt, src, dest, source_date_epoch, tools):
        if fmt != "squashfs":
            return super().pack_command(fmt, src, dest, source_date_epoch, tools)
        return self.mksquashfs_command(src, dest, source_date_epoch, tools["mksquashfs"])

    @staticmethod
    def mksquashfs_command(src_dir: str, dest: str, source_date_epoch: int,
                           mksquashfs: str = "mksquashfs") -> list[str]:
        """Directory image -> SquashFS for ``ch-run`` (mounted with squashfuse). Not
        ``ch-convert`` (:meth:`convert_command`): it keeps file mtimes, so its bytes
        differ from build to build.

        ch-convert's settings (64 KiB blocks, all files owned by root) plus fixed file and
        filesystem timestamps and no xattrs, so the same tree gives the same bytes.
        """
        return [mksquashfs, str(src_dir), str(dest), "-b", "65536", "-noappend", "-all-root",
                "-no-xattrs", "-all-time", str(source_date_epoch),
                "-mkfs-time", str(source_date_epoch), "-no-progress"]


@register
class CharliecloudHostMPI(Charliecloud):
    """Charliecloud with the host's MPI, either way ch-run allows: library directories
    bound (``--bind``, ``host_mpi.lib_dirs``) or library files injected with ch-fromhost
    into a copy of the image (``host_mpi.libs``, rule inject_host_mpi, at
    :data:`scalesweep.platform.runtimes.INJECT_DIR`), set first on the container's LD_LIBRARY_PATH
    (``--set-env``). Bind destinations must exist in the image (ch-run cannot create them
    in a read-only image): a site binding /opt/cray needs /opt/cray in the image."""

    name = "charliecloud-hostmpi"
    order = 5
    host_mpi = True
    injects_host_libs = True
