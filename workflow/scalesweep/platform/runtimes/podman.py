"""Rootless Podman: images in the user's local storage, built from the offline Debian base."""

from __future__ import annotations

import hashlib
import re
from typing import Mapping

from scalesweep.platform.runtimes.base import BuildSteps, DockerfileBuild, Runtime, register


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
