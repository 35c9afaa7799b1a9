"""The command line of :mod:`scalesweep.images`: ``scalesweep build-image``
(:func:`scalesweep.images.build.build_image`) and ``scalesweep describe-image``
(:func:`scalesweep.images.describe.describe_image`). Standard library only: the rules run
it in any environment that has Python (``scalesweep.cli``'s STANDALONE)."""

from __future__ import annotations

import argparse
import sys

from scalesweep.images import build
from scalesweep.plan import swaps
from scalesweep.images.build import build_image
from scalesweep.images.builders import check_builder
from scalesweep.images.cache import DEFAULT_CACHE
from scalesweep.images.describe import describe_image
from scalesweep.images.process import COMMAND, BuildError, log
from scalesweep.platform import runtimes


DESCRIBE_COMMAND = "describe-image"  # `scalesweep describe-image`: rules pull_image, describe_image

def _describe_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--builder", required=True, choices=runtimes.builders(),
                   help="the runtime that pulls or runs the image (apptainer, singularity, ...)")
    p.add_argument("--image", required=True,
                   help="with --pull: a registry reference (oras://, docker://, library://, https://); "
                        "else the image's path")
    p.add_argument("--pull", action="store_true", help="pull --image to --out first")
    p.add_argument("--out", help="where the pulled image goes (with --pull)")
    p.add_argument("--format", help="the image's format (default: the builder's first)")
    p.add_argument("--manifest", required=True, help="provenance JSON (written atomically)")

def run_describe(a: argparse.Namespace) -> int:
    if a.pull and not a.out:
        log("error: --pull needs --out")
        return 2
    try:
        man = describe_image(a.builder, a.image, a.manifest, out=a.out, pull=a.pull, fmt=a.format)
    except BuildError as e:
        log(f"error: {e}")
        return 1
    how = f"pulled {a.image} to" if a.pull else "described"
    log(f"{how} {man['image']}: {man['size_bytes'] / 1e6:.0f} MB digest {man['content_digest']}"
        f"{' base ' + man['base']['from'] if man.get('base') else ''}")
    return 0

def _arguments(p: argparse.ArgumentParser) -> None:
    formats = sorted({f for name in runtimes.builders() for f in runtimes.runtime(name).image_formats})
    p.add_argument("--builder", required=True, choices=runtimes.builders())
    p.add_argument("--recipe", required=True, help="Dockerfile (charliecloud, podman) or .def (apptainer, singularity)")
    p.add_argument("--requirements", help="payload requirements (Dockerfile builds: required)")
    p.add_argument("--out", required=True, help="image path: directory, .sqfs or .sif")
    p.add_argument("--manifest", required=True, help="provenance JSON (written atomically)")
    p.add_argument("--cache-dir", default=str(DEFAULT_CACHE),
                   help="cache root: images/, wheelhouse/, base/, wheels/ (default $SCALESWEEP_CACHE or ~/.cache/scalesweep)")
    p.add_argument("--format", choices=formats, help="default: the builder's first (dir, sif, oci-dir)")
    p.add_argument("--site", help="take the build args from this site file's build_args (a name under sites/ or a path)")
    p.add_argument("--build-args", dest="build_args_file", help="KEY=VALUE file of build args (hand use)")
    p.add_argument("--build-arg", action="append", default=[], metavar="KEY=VALUE",
                   help="a build arg (repeatable; wins over --site and --build-args)")
    p.add_argument("--fakeroot", action="store_true", help="apptainer/singularity build --fakeroot")
    p.add_argument("--link", choices=("hardlink", "symlink", "copy"), default="hardlink",
                   help="how a cached image is placed at --out (default hardlink)")
    p.add_argument("--python", default=sys.executable, help="interpreter whose pip stages the wheelhouse")
    p.add_argument("--find-links", action="append", default=[], help="extra local wheel directory")
    p.add_argument("--no-cache", action="store_true", help="rebuild even if the cache has the key")
    p.add_argument("--host-stack", action="store_true",
                   help="a control image: the recipe gets --python's interpreter build (bound at "
                   "/hostpython, build arg HOST_PYTHON_PREFIX) and its wheels (issue #43)")
    p.add_argument("--swap", action="append", default=[], choices=tuple(swaps.SWAPS),
                   help="with --host-stack: this item of the workload image swapped into the "
                   "control image (build arg SWAP_IN; repeatable), for the one-factor ablation")

def add_parser(sub) -> None:
    """``scalesweep build-image`` (scalesweep.cli)."""
    p = sub.add_parser(COMMAND, help="build (or reuse from the cache) a payload image with its provenance manifest",
                       description=build.__doc__.split("\n\n")[0])
    _arguments(p)
    p.set_defaults(func=run)
    d = sub.add_parser(DESCRIBE_COMMAND, help="pull a prebuilt image, or describe one in place, "
                       "with a provenance manifest like a build's",
                       description=describe_image.__doc__.split("\n\n")[0])
    _describe_arguments(d)
    d.set_defaults(func=run_describe)

def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=f"scalesweep {COMMAND}", description=build.__doc__.split("\n\n")[0])
    _arguments(p)
    return p.parse_args(argv)

def run(a: argparse.Namespace) -> int:
    """Build as the parsed arguments say; one line on stderr and exit 1 if it cannot."""
    try:
        tools = check_builder(a.builder, a.format)  # before anything else (reading the site)
        args: dict[str, str] = {}
        if a.site:
            from scalesweep.platform.site import SiteError, load_site

            try:
                args.update(load_site(a.site)["build_args"])
            except SiteError as exc:
                raise BuildError(str(exc)) from None
        for kv in a.build_arg:
            k, sep, v = kv.partition("=")
            if not sep:
                raise BuildError(f"--build-arg {kv!r}: expected KEY=VALUE")
            args[k] = v
        man = build_image(
            a.builder, a.recipe, a.out, a.manifest, requirements=a.requirements,
            cache_dir=a.cache_dir, fmt=a.format, build_args_file=a.build_args_file,
            build_args=args, fakeroot=a.fakeroot, link=a.link, python=a.python,
            find_links=a.find_links, no_cache=a.no_cache, tools=tools,
            host_stack=a.host_stack, swap=a.swap,
        )
    except BuildError as e:
        log(f"error: {e}")
        return 1
    how = "cached" if man["cached"] else "built"
    if man.get("squashfs_cached") is False:
        how += " (squashfs packed now)"
    log(f"{how} {man['image']} ({man['placement']}) "
        f"{man['size_bytes'] / 1e6:.0f} MB digest {man['content_digest']} in {man['build_seconds']} s")
    return 0

def main(argv: list[str] | None = None) -> int:
    return run(parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
