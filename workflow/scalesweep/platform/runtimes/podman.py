"""Podman: images in its local storage (rootless by default), built from the offline Debian
base or imported from another builder's directory image (a Charliecloud build)."""

from __future__ import annotations

import hashlib
import re
from typing import Mapping

from scalesweep.platform.runtimes.base import (CONTROL_MODE, BuildSteps, DockerfileBuild, Runtime,
                                                StorageLoad)
from scalesweep.platform.runtimes.registry import register


# where the volatile state (--runroot) of a storage under a site's storage_root lives:
# short (podman 4.3: "the specified runroot is longer than 50 characters"), writable by
# any user, cleared at boot as state that must not outlive the machine's boot should be
RUNROOT = "/tmp/scalesweep-podman"


@register
class Podman(Runtime):
    """Podman (podman(1), podman-run(1), podman-build(1), podman-import(1), docs.podman.io):

      --storage-driver=D       the storage driver (the mode: overlay or vfs)
      --root=DIR --runroot=DIR where its storage lives (the site's ``storage_root``: one
                               directory per driver, a storage holds one driver's layers),
                               and its volatile state (podman refuses a runroot of over 50
                               characters: /tmp/scalesweep-podman-<12 hex of the root>/<driver>)
      SITE'S GLOBAL OPTIONS    before ``run`` (``runtimes.podman.global_options``, e.g.
                               --runtime=runc --cgroup-manager=cgroupfs)
      run --rm                 remove the container when it exits
      --pull=never             never contact a registry: the image is in local storage
      --env-host               the host environment inside (ch-run and Apptainer pass it
                               too): the rank variables of mpirun/srun, MASTER_ADDR, ...
      --security-opt=label=disable  no SELinux label separation: the bound repository
                               and data stay readable without relabelling host files
      ROOTLESS DEFAULTS        where the site states no ``run_options`` (replaced by them):
        --userns=keep-id       the user's UID:GID inside too (rootless only: refused for
                               root), so files written to the bound output dir are theirs
        --network=host, --ipc=host  the host's network and /dev/shm: ranks in separate
                               containers rendezvous (MASTER_ADDR) and share memory as
                               natively
      --device=nvidia.com/gpu=all   the GPUs through CDI (NVIDIA Container Toolkit's
                               generated spec); AMD: /dev/kfd and /dev/dri, with the
                               user's groups kept (--group-add=keep-groups)
      --volume SRC:DST         bind mounts
      --env NAME=VALUE         variables inside (win over --env-host)
      --workdir DIR            initial working directory

    The image is a reference in local storage, :meth:`storage_reference` of the path the
    image is placed at: rule load_image copies it there (``podman import`` of a directory
    image's tar, ``podman pull dir:`` of a saved one), in the storage of the point's mode.

    Its modes are its storage drivers: ``overlay`` (layers mounted with overlayfs, the
    default) and ``vfs`` (every layer a full copy, nothing mounted: what works where
    overlay does not)."""

    name = "podman"
    order = 8
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
    digest_note = ("tree digest of the saved image directory (its layer tarballs "
                   "keep build-time mtimes: not reproducible between builds)")
    run_options = ("--rm", "--pull=never", "--env-host", "--security-opt=label=disable")
    # rootless defaults: what a site that states no run_options gets
    default_run_options = ("--userns=keep-id", "--network=host", "--ipc=host")
    modes = {
        "overlay": "storage driver overlay: image layers mounted with overlayfs",
        "vfs": "storage driver vfs: every layer a full copy, nothing mounted",
        CONTROL_MODE: "the control image (the host's own stack, issue #43) in storage driver "
                      "overlay: native vs it is what isolation costs",
    }
    loads_images = True
    # the label an imported image carries: the content digest of what was imported
    DIGEST_LABEL = "org.scalesweep.content-digest"

    def mode_formats(self):
        """Its own saved images (oci-dir) and other builders' directory images (dir),
        each copied into the mode's storage by rule load_image."""
        return ("oci-dir", "dir")

    def storage_options(self, site) -> list[str]:
        """``--storage-driver`` (the mode), and ``--root``/``--runroot`` under the site's
        ``storage_root`` (one per driver)."""
        mode = site.mode or self.run_mode
        if mode == CONTROL_MODE:  # the control image, in the default driver's storage
            mode = self.default_mode
        opts = [f"--storage-driver={mode}"]
        if site.storage_root:
            root = site.storage_root.rstrip("/")
            run = hashlib.sha256(root.encode()).hexdigest()[:12]
            opts += [f"--root={root}/{mode}", f"--runroot={RUNROOT}-{run}/{mode}"]
        return opts

    def global_args(self, site) -> list[str]:
        """``podman`` and its options before the subcommand: the site's, then storage."""
        return [self.executable(site), *site.global_options, *self.storage_options(site)]

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
        extra = self.default_run_options if site.run_options is None else site.run_options
        cmd = [*self.global_args(site), "run", *self.run_options, *extra, *self.gpu_flags(site)]
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

    # --- copying an image into the mode's storage (rule load_image) ------------------

    @staticmethod
    def tar_command(image_dir: str) -> list[str]:
        """A directory image as a tar stream (podman import's input)."""
        return ["tar", "-C", str(image_dir), "-c", "."]

    def import_dir_command(self, site, ref: str, digest: str = "") -> list[str]:
        """``import`` of a root filesystem tar on stdin as ``ref`` (offline), labelled with
        the content digest of what it imports (:attr:`DIGEST_LABEL`)."""
        change = ["--change", f"LABEL {self.DIGEST_LABEL}={digest}"] if digest else []
        return [*self.global_args(site), "import", *change, "-", ref]

    def pull_dir_command(self, site, image_dir: str) -> list[str]:
        """A saved image directory (oci-dir) into the storage (prints the image ID)."""
        return [*self.global_args(site), "pull", "--quiet", f"dir:{image_dir}"]

    def storage_load(self, site, image, fmt, digest=""):
        """A directory image (another builder's, e.g. Charliecloud's): its tar imported,
        labelled with its digest; a saved one (oci-dir): pulled from ``dir:`` and tagged."""
        ref = self.storage_reference(image)
        check = self.digest_label_command(site, ref)
        if fmt == "oci-dir":
            return StorageLoad(ref, check, self.pull_dir_command(site, image),
                               tag=[*self.global_args(site), "tag"])
        return StorageLoad(ref, check, self.import_dir_command(site, ref, digest),
                           stdin=self.tar_command(image))

    def digest_label_command(self, site, ref: str) -> list[str]:
        """The :attr:`DIGEST_LABEL` of ``ref`` in the storage (fails if it is not there)."""
        return [*self.global_args(site), "image", "inspect", "--format",
                f'{{{{index .Labels "{self.DIGEST_LABEL}"}}}}', ref]

    # --- its image build -------------------------------------------------------------

    @staticmethod
    def build_tag(key: str) -> str:
        """The local-storage name of a cold build (one per cache key)."""
        return f"localhost/scalesweep-build:{key[:16]}"

    def dockerfile_steps(self, req: DockerfileBuild) -> BuildSteps:
        """``podman import`` (the offline base), ``podman build``, ``podman save`` (a
        directory: what is cached and placed)."""
        podman = req.tools[self.default_bin]
        tag = self.build_tag(req.key)
        return BuildSteps(
            commands=[
                self.import_command(req.base_tarball, req.base_name, podman),
                self.build_command(req.recipe, tag, req.context, binds=req.binds,
                                   build_args=req.build_args, bin=podman),
                self.save_command(tag, req.product, podman),
            ],
            built=req.product,
            inventory=self.exec_command(tag, [], bin=podman),
            clean_env=False,
            facts={"build_tag": tag},
        )

    def load_steps(self, image, tools):
        """The placed directory copied into the user's storage under
        :meth:`storage_reference` of its path (cheap when the layers are there)."""
        return self.storage_reference(image), self.load_command(image, tools[self.default_bin])
