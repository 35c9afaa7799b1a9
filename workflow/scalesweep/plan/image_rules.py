"""What the image rules (``workflow/rules/containers.smk``) read and run, for the images the
selected points use (``scalesweep.plan.imageset``): which rule makes each image (a
wildcard constraint per rule, so that their outputs never overlap), each job's inputs and
command-line arguments (shell-quoted), the images copied into a runtime's own storage
(Podman: rule load_image), and the start-up timings (rule container_startup).

The methods that take ``wildcards`` are the rules' input and params functions as they are
(a bound method is a function of the job's wildcards).
"""

from __future__ import annotations

import re
import sys
import shlex
from pathlib import Path
from typing import Any, Callable, Sequence

from scalesweep.plan.imageset import (ImageSpec, load_record, loaded_images, runtime_image,
                                      used_images)
from scalesweep.plan.sweep import NATIVE_RUNTIMES, SweepPoint


def alternatives(names: Sequence[str]) -> str:
    """A wildcard constraint matching exactly ``names``; one that never matches for none."""
    return "|".join(re.escape(n) for n in names) if names else "(?!)"


class ImageRules:
    """The image rules of a run: ``points`` the whole sweep, ``selected`` what this run
    measures; ``in_repo`` makes a config path (a recipe) a path of the repository."""

    def __init__(self, config: dict, points: Sequence[SweepPoint],
                 selected: Sequence[SweepPoint], in_repo: Callable[[str], str]):
        self.config = config
        self.points = list(points)
        self.selected = list(selected)
        self.in_repo = in_repo
        self.images = used_images(config, self.points)
        # images copied into a runtime's own storage, per mode
        self.loads = loaded_images(config, self.points)

    def missing_prebuilt(self) -> str | None:
        """An image used in place (``prebuilt: /path``) that is not there: refused before
        any job."""
        for spec in self.images.values():
            if spec.how == "local" and not Path(spec.path).exists():
                return (f"containers.images.{spec.name}.prebuilt: {spec.path!r} does not "
                        "exist (relative paths: to the campaign directory)")
        return None

    def made_by(self, how: str, *formats: str) -> str:
        """A wildcard constraint: the names of the images obtained ``how`` (build, pull,
        local, inject) in one of ``formats`` (any, when none is given)."""
        return alternatives([name for name, spec in self.images.items()
                             if spec.how == how and (not formats or spec.format in formats)])

    def image(self, wildcards: Any) -> ImageSpec:
        return self.images[wildcards.image]

    def recipe_inputs(self, wildcards: Any) -> dict[str, str]:
        spec = self.image(wildcards)
        return {"recipe": self.in_repo(spec.recipe),
                "requirements": self.in_repo(spec.requirements)}

    def build_args(self, wildcards: Any) -> str:
        """--builder, --format and --fakeroot of `scalesweep build-image`; for a control
        image (or an ablation's, with its --swap) --host-stack, with the native runs' interpreter (the site's launch.python,
        else the workflow's own, as the point's launch takes it)."""
        spec = self.image(wildcards)
        args = ["--builder", spec.builder, "--format", spec.format]
        if spec.control or spec.swap:
            from scalesweep.platform.site import site_of

            args += ["--host-stack", "--python",
                     site_of(self.config)["launch"]["python"] or sys.executable]
        if spec.swap:
            args += ["--swap", spec.swap]
        return shlex.join(args + (["--fakeroot"] if spec.fakeroot else []))

    def source_args(self, wildcards: Any) -> str:
        """--builder, --format and --image of `scalesweep describe-image`."""
        spec = self.image(wildcards)
        return shlex.join(["--builder", spec.builder, "--format", spec.format,
                           "--image", spec.prebuilt])

    def inject_inputs(self, wildcards: Any) -> dict[str, str]:
        """The image a host-MPI copy is made from, and its manifest (carried over)."""
        base = self.images[self.image(wildcards).base]
        return {"image": base.path, "manifest": base.manifest}

    def inject_args(self, wildcards: Any) -> str:
        """--lib of `scalesweep inject-host-mpi`: the site's host MPI library files."""
        return shlex.join(arg for lib in self.image(wildcards).inject_libs
                          for arg in ("--lib", lib))

    def loads_made(self, field: str) -> str:
        """A wildcard constraint of rule load_image: the images (``field`` image) or
        runtime tokens (``runtime``) of the load records the points wait for."""
        return alternatives(sorted({spec.name if field == "image" else rt
                                    for spec, rt in self.loads.values()}))

    def load_inputs(self, wildcards: Any) -> dict[str, str]:
        """The placed image a load copies, and its manifest (the digest it is keyed by)."""
        spec = self.image(wildcards)
        return {"image": spec.path, "manifest": spec.manifest}

    def startup_image(self, wildcards: Any) -> ImageSpec:
        """The image a runtime's start-up is timed in: the first point's of it in the
        whole sweep (not the selection: the result is kept for the campaign)."""
        return runtime_image(self.config, wildcards.runtime, self.points)

    def startup_path(self, wildcards: Any) -> str:
        return self.startup_image(wildcards).path

    def startup_inputs(self, wildcards: Any) -> dict[str, str]:
        """The start-up image's manifest, and its load record where it is loaded."""
        image = self.startup_image(wildcards)
        loaded = load_record(image, wildcards.runtime)
        return {"manifest": image.manifest, **({"load": loaded} if loaded else {})}

    def scale_runtimes(self) -> list[str]:
        """The runtime tokens rule startup_scale measures (issue #44): none unless
        ``startup_scale.enabled``; those named, or the sweep's runtimes whose image runs
        from its path (native: its virtual environment). A runtime that keeps its images in
        its own storage (Podman) cannot be put on the file system: named, it is refused."""
        from scalesweep.platform.runtimes import runtime

        opts = self.config.get("startup_scale") or {}
        if not opts.get("enabled"):
            return []
        swept = list(dict.fromkeys(p.runtime for p in self.points))  # the sweep's order
        named = list(opts.get("runtimes") or [])
        for rt in named:
            if runtime(rt).loads_images:
                raise ValueError(f"startup_scale.runtimes: {rt!r} keeps its images in its own "
                                 "storage: they cannot be served from the bounded-rate file "
                                 "system (a runtime that runs an image from its path can)")
            if rt not in swept:
                raise ValueError(f"startup_scale.runtimes: {rt!r} is not one of the sweep's "
                                 f"runtimes {swept}")
        if named:
            return named
        natives = [rt for rt in swept if runtime(rt).native][:1]  # native-aa: the same start
        return natives + [rt for rt in swept if not runtime(rt).native
                          and not runtime(rt).loads_images]

    def scale_nodes(self) -> list[int]:
        """The sweep's node counts (every workload's): under Slurm rule startup_scale
        starts at each of them."""
        return sorted({int(p.nodes) for p in self.points})

    def scale_image(self, wildcards: Any) -> str:
        """The image rule startup_scale starts (the start-up image), "" natively."""
        if wildcards.runtime in NATIVE_RUNTIMES:
            return ""
        return self.startup_path(wildcards)

    def scale_inputs(self, wildcards: Any) -> dict[str, str]:
        """The start-up image's manifest (none natively)."""
        if wildcards.runtime in NATIVE_RUNTIMES:
            return {}
        return {"manifest": self.startup_image(wildcards).manifest}

    def manifests(self) -> list[str]:
        """The manifest of every image the selected points run (the default target):
        images used in place are described too."""
        return sorted(spec.manifest for spec in used_images(self.config, self.selected).values())

    def container_runtimes(self) -> list[str]:
        """The container runtimes this run measures."""
        return sorted({p.runtime for p in self.selected} - set(NATIVE_RUNTIMES))

    def startup_results(self, pattern: str) -> list[str]:
        """The start-up timings (``pattern``: rule container_startup's output) the table
        reads: of the container runtimes this run measures (made when missing), and those
        already made of every other container runtime of the sweep whose image manifest
        is there. So a selection of runtimes (only:) on a finished campaign re-makes no
        table, and makes nothing outside it."""
        files = {pattern.format(runtime=rt) for rt in self.container_runtimes()}
        for rt in {p.runtime for p in self.points} - set(NATIVE_RUNTIMES):
            made = pattern.format(runtime=rt)
            if Path(made).is_file() and Path(runtime_image(self.config, rt,
                                                           self.points).manifest).is_file():
                files.add(made)
        return sorted(files)
