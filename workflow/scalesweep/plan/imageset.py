"""A campaign's container images: which image each workload runs, where each lives, and
how the workflow obtains it (built from a recipe, pulled from a registry, or used in
place), from ``containers.images`` of a validated config.

One function per fact, used by both sides: the Snakefile's rules (containers.smk: which
rule makes which image, what a point waits for) and the harness (which image a point
runs and whose manifest it records). Standard library plus :mod:`scalesweep.platform.runtimes`.

Paths, relative to the campaign directory:

* ``resources/images/<name>``       a directory image (charliecloud ``dir``, podman ``oci-dir``,
  an Apptainer ``sandbox``)
* ``resources/images/<name>.sqfs``  a Charliecloud SquashFS image
* ``resources/images/<name>.sif``   an Apptainer/SingularityCE image (built or pulled)
* ``resources/images/<name>.manifest.json``  every image's provenance (also for an image
  used in place: then it describes that file)
* ``resources/images/<name>+hostmpi``  a directory image with the site's host MPI
  libraries injected (charliecloud-hostmpi with ``host_mpi.libs``: rule inject_host_mpi)
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterable

from scalesweep.plan import swaps
from scalesweep.platform import runtimes

IMAGES_DIR = "resources/images"
# registry references `apptainer pull` / `singularity pull` accept (apptainer-pull(1))
PULL_SCHEMES = ("docker://", "oras://", "library://", "https://", "shub://")
SUFFIX = {"dir": "", "oci-dir": "", "sandbox": "", "squashfs": ".sqfs", "sif": ".sif"}
RECIPE_SUFFIX = {"definition": ".def"}  # a recipe kind's file name ending (else: any but .def)
HOST_MPI_SUFFIX = "+hostmpi"  # the copy of an image with the host's MPI libraries injected


class ImageConfigError(ValueError):
    """An image a campaign cannot have (names the config key and the value)."""


@dataclass(frozen=True)
class ImageSpec:
    """One entry of ``containers.images`` (defaults filled in by the schema)."""

    name: str
    builder: str
    recipe: str
    requirements: str
    prebuilt: str
    format: str  # resolved: never "" (the builder's default)
    fakeroot: bool
    control: bool = False  # the host's own stack (--host-stack), run by mode control only
    swap: str = ""  # an ablation's image: the control image with this item swapped in
    base: str = ""  # a copy of this image with the host's MPI libraries injected
    inject_libs: tuple[str, ...] = ()  # those libraries (host paths)

    @property
    def how(self) -> str:
        """``build`` (a recipe, rule build_image), ``pull`` (a registry reference, rule
        pull_image), ``local`` (an existing file or directory, rule describe_image) or
        ``inject`` (a copy of image ``base`` with host libraries, rule inject_host_mpi)."""
        if self.base:
            return "inject"
        if not self.prebuilt:
            return "build"
        return "pull" if self.prebuilt.startswith(PULL_SCHEMES) else "local"

    @property
    def path(self) -> str:
        """Where the image is: campaign-relative for built and pulled images, the
        configured path for one used in place."""
        if self.how == "local":
            return self.prebuilt
        return f"{IMAGES_DIR}/{self.name}{SUFFIX[self.format]}"

    @property
    def manifest(self) -> str:
        return f"{IMAGES_DIR}/{self.name}.manifest.json"

    @property
    def is_directory(self) -> bool:
        return SUFFIX[self.format] == ""


def image_spec(config: dict, name: str) -> ImageSpec:
    images = config["containers"]["images"]
    if name not in images:
        raise ImageConfigError(f"image {name!r} is not in containers.images "
                               f"(it has: {', '.join(images) or 'none'})")
    e = images[name]
    fmt = e["format"]
    if not fmt:
        try:
            fmt = runtimes.runtime(e["builder"]).image_formats[0]
        except (runtimes.LaunchError, IndexError):
            fmt = "dir"  # refused by check_images, which names the builder
    return ImageSpec(name, e["builder"], e["recipe"], e["requirements"], e["prebuilt"], fmt,
                     bool(e["fakeroot"]), bool(e.get("control")), e.get("swap") or "")


def workload_image_names(config: dict, workload: str) -> list[str]:
    """The images a workload's container points may run (``workloads.<name>.image``, else
    ``containers.image``): a name, or several of different formats (each container
    runtime runs the first whose format it runs)."""
    names = config["workloads"][workload].get("image") or config["containers"]["image"]
    return [names] if isinstance(names, str) else list(names)


def workload_image(config: dict, workload: str, runtime: str) -> ImageSpec:
    """The image the points of ``workload`` in container ``runtime`` (a runtime token: its
    mode decides the formats, ``Runtime.mode_formats``) run."""
    rt = runtimes.runtime(runtime)
    formats = rt.mode_formats()
    specs = [image_spec(config, n) for n in workload_image_names(config, workload)]
    for spec in specs:
        # a control image is run by a control mode only, and a control mode runs nothing else
        if spec.format in formats and spec.control == rt.runs_control:
            return host_mpi_image(config, spec, rt)
    have = ", ".join(f"{s.name!r} ({s.format}{', control' if s.control else ''})" for s in specs)
    if rt.runs_control:
        raise ImageConfigError(
            f"{_image_key(config, workload)}: runtime {runtime} runs a control image "
            f"(containers.images.<name>.control: true) of format {'/'.join(formats)}, and the "
            f"workload's images are {have}: name one for it")
    raise ImageConfigError(
        f"{_image_key(config, workload)}: runtime {runtime} runs {'/'.join(formats)} "
        f"images, and the workload's images are {have}: name one of that format for it"
        + (" (a control image is run by <runtime>+control only)"
           if any(s.control for s in specs) else ""))


def host_mpi_image(config: dict, spec: ImageSpec, rt) -> ImageSpec:
    """The image a runtime runs of ``spec``: ``spec`` itself, or for a runtime that injects
    the site's ``host_mpi.libs`` into a copy (charliecloud-hostmpi, ch-fromhost) that copy,
    ``<name>+hostmpi`` (a directory image: ch-fromhost injects into directories)."""
    if not (rt.host_mpi and rt.injects_host_libs):
        return spec
    from scalesweep.platform.site import site_of

    try:
        libs = rt.site_facts(site_of(config)).host_mpi_libs
    except runtimes.RuntimeNotOffered:
        return spec  # refused by check_runtimes, naming the site
    if not libs:
        return spec
    if not spec.is_directory:
        raise ImageConfigError(
            f"containers.images.{spec.name}: runtime {rt.name} injects the host's MPI libraries "
            f"(site file: runtimes.{rt.site_key}.host_mpi.libs) with ch-fromhost, which writes "
            f"into directory images; this one is {spec.format}: use a dir image for {rt.name}")
    return replace(spec, name=spec.name + HOST_MPI_SUFFIX, base=spec.name, prebuilt="",
                   recipe="", requirements="", inject_libs=tuple(libs))


def load_record(spec: ImageSpec, runtime: str) -> str | None:
    """For a runtime that runs images from its own storage (Podman): the record of the
    image's copy in the storage of the runtime token's mode (rule load_image), which its
    points wait for; None for a runtime that runs the image where it lies."""
    if not runtimes.runtime(runtime).loads_images:
        return None
    return f"{IMAGES_DIR}/{spec.name}.{runtime}.load.json"


def loaded_images(config: dict, points: Iterable) -> dict[str, tuple[ImageSpec, str]]:
    """The load records the container points among ``points`` wait for: record ->
    (the image, the runtime token)."""
    out: dict[str, tuple[ImageSpec, str]] = {}
    for p in points:
        if not runtimes.is_native(p.runtime):
            spec = workload_image(config, p.workload, p.runtime)
            record = load_record(spec, p.runtime)
            if record:
                out.setdefault(record, (spec, p.runtime))
    return out


def _image_key(config: dict, workload: str) -> str:
    return f"workloads.{workload}.image" if config["workloads"][workload].get("image") else "containers.image"


def used_images(config: dict, points: Iterable) -> dict[str, ImageSpec]:
    """The images the container points among ``points`` run, by name (each once)."""
    out: dict[str, ImageSpec] = {}
    for p in points:
        if not runtimes.is_native(p.runtime):
            spec = workload_image(config, p.workload, p.runtime)
            if spec.base:  # its copy is made from the image itself
                out.setdefault(spec.base, image_spec(config, spec.base))
            out.setdefault(spec.name, spec)
    return out


def runtime_image(config: dict, runtime: str, points: Iterable) -> ImageSpec | None:
    """The image a runtime's start-up is timed in: that of the first point (sweep order)
    run in ``runtime``; None when no point is."""
    for p in points:
        if p.runtime == runtime:
            return workload_image(config, p.workload, runtime)
    return None


def check_images(config: dict, workloads: Iterable[str], runtimes_of) -> None:
    """Refuse, before any job, an image a campaign cannot obtain or run: unknown image
    names, a builder that builds nothing or that the site does not offer, a recipe of
    the wrong kind, a format the builder cannot make, a registry reference the builder
    cannot pull, and a workload's container runtime that cannot run its image's format.
    ``runtimes_of(workload)``: the runtimes the workload compares."""
    from scalesweep.platform.site import site_of

    site = site_of(config)
    checked: set[str] = set()
    for wl in workloads:
        containers = [rt for rt in runtimes_of(wl) if not runtimes.is_native(rt)]
        if not containers:
            continue
        key = _image_key(config, wl)
        for name in workload_image_names(config, wl):
            if name not in config["containers"]["images"]:
                raise ImageConfigError(f"{key}: image {name!r} is not in containers.images "
                                       f"(it has: {', '.join(config['containers']['images']) or 'none'})")
            if name not in checked:
                check_image(image_spec(config, name), site)  # the image itself first
                checked.add(name)
        for rt_name in containers:
            workload_image(config, wl, rt_name)  # then who runs it


def check_image(spec: ImageSpec, site: dict) -> None:
    """One image's own consistency (see :func:`check_images`)."""
    key = f"containers.images.{spec.name}"
    builders = runtimes.builders()
    if spec.builder not in builders:
        raise ImageConfigError(f"{key}.builder: {spec.builder!r} builds no images; builders: "
                               f"{', '.join(builders)}")
    rt = runtimes.runtime(spec.builder)
    if spec.format not in rt.image_formats:
        raise ImageConfigError(f"{key}.format: {spec.builder} makes {', '.join(rt.image_formats)} "
                               f"images, not {spec.format!r}")
    if spec.control and spec.how != "build":
        raise ImageConfigError(
            f"{key}.control: a control image is built here from the host's own stack "
            f"(scalesweep build-image --host-stack, from a control recipe: containers/"
            f"charliecloud/Dockerfile.control, containers/apptainer/control.def); this one is "
            f"{spec.how} {spec.prebuilt!r}. Without one the campaign attributes nothing "
            "(attribution.csv empty, no \"why\" on the report's first screen, a Slurm dry run "
            "says so)")
    if spec.swap and spec.control:
        raise ImageConfigError(
            f"{key}.swap: {spec.swap!r} makes an ablation's image, run as the workload's image "
            "beside the control image; it cannot be the control image too (control: false)")
    if spec.swap and spec.how == "build" and rt.recipe_kind not in swaps.SWAPS[spec.swap].recipe_kinds:
        raise ImageConfigError(
            f"{key}.swap: {spec.swap!r} cannot be swapped into a control image built by "
            f"{spec.builder} (only by a {'/'.join(swaps.SWAPS[spec.swap].recipe_kinds)} recipe's "
            "builder: the workload image's interpreter comes from another base release)")
    if spec.swap and spec.how != "build":
        raise ImageConfigError(
            f"{key}.swap: an ablation's image is a control recipe built from the host's own "
            f"stack with {spec.swap!r} swapped in; this one is {spec.how} {spec.prebuilt!r}")
    if spec.how == "local":
        if spec.prebuilt.startswith("~"):
            raise ImageConfigError(f"{key}.prebuilt: {spec.prebuilt!r}: '~' is not expanded here; "
                                   "give the path in full")
        return  # used in place: nothing is built or pulled, whoever built it
    try:
        rt.site_entry(site)  # the site must offer the builder (it runs on the login node)
    except runtimes.RuntimeNotOffered as exc:
        raise ImageConfigError(f"{key}.builder: {exc}") from None
    if spec.how == "pull":
        if not hasattr(rt, "pull_command"):
            raise ImageConfigError(f"{key}.prebuilt: {spec.builder} cannot pull {spec.prebuilt!r} "
                                   "(apptainer and singularity pull registry references)")
        return
    want = RECIPE_SUFFIX.get(rt.recipe_kind or "")
    is_def = spec.recipe.endswith(".def")
    if (want == ".def") != is_def:
        kind = "an Apptainer definition file (.def)" if want else "a Dockerfile"
        raise ImageConfigError(f"{key}.recipe: {spec.builder} builds from {kind}, "
                               f"not {spec.recipe!r}")
