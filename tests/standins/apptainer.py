#!/usr/bin/env python3
"""Stand-in for ``apptainer`` (Apptainer 1.3.6) and ``singularity`` (SingularityCE 4.2.2),
cut to what scalesweep calls of them where a test has no real tool: ``scalesweep
describe-image --pull`` (rules pull_image and describe_image) runs

* ``--version``: ``apptainer version 1.3.6`` / ``singularity-ce version 4.2.2``;
* ``pull --force OUT URI``: writes OUT, a small file standing for the SIF (no network:
  its content is derived from URI). Transports the real tool pulls from: oras, docker,
  library, https, http, shub; any other fails as it does (``FATAL:   Unsupported
  transport type: ftp``, exit 255); an existing OUT without --force is refused;
* ``inspect --json IMAGE``: ``{"data": {"attributes": {"labels": ..., "deffile": ...}},
  "type": "container"}``, the labels Apptainer's build adds (build date, the definition's
  Bootstrap and From) and the definition file.

Every other command exits 255 naming itself as not supported: the command lines
scalesweep gives ``apptainer exec``/``build`` are pinned by golden tests instead
(tests/test_frontier_golden.py, tests/test_frontier_standin.py,
tests/test_containers_build.py). Run as ``apptainer.py apptainer ARGS...``.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from standins import log_invocation  # noqa: E402

VERSIONS = {"apptainer": ("1.3.6", "apptainer version 1.3.6"),
            "singularity": ("4.2.2", "singularity-ce version 4.2.2")}
TRANSPORTS = ("oras", "docker", "library", "https", "http", "shub")
MAGIC = "scalesweep stand-in SIF\n"
BUILD_DATE = "Thursday_1_January_2026_0:0:0_UTC"


def fatal(msg: str) -> int:
    print(f"FATAL:   {msg}", file=sys.stderr)
    return 255


def pull(args: list[str]) -> int:
    force = "--force" in args or "-F" in args
    pos = [a for a in args if not a.startswith("-")]
    if len(pos) != 2:
        return fatal(f"the stand-in pulls `pull [--force] OUT URI` only, got {args}")
    out, uri = pos
    transport, sep, ref = uri.partition("://")
    if not sep or not ref:
        return fatal(f"Bad URI {uri}")
    if transport not in TRANSPORTS:
        return fatal(f"Unsupported transport type: {transport}")
    if os.path.lexists(out) and not force:
        return fatal(f'Image file already exists: "{out}" - will not overwrite')
    base = ref.rsplit("/", 1)[-1]
    image = {"labels": {"org.label-schema.build-date": BUILD_DATE,
                        "org.label-schema.schema-version": "1.0",
                        "org.label-schema.usage.singularity.deffile.bootstrap": "docker",
                        "org.label-schema.usage.singularity.deffile.from": base,
                        "org.scalesweep.standin.pulled_from": uri},
             "deffile": f"bootstrap: docker\nfrom: {base}\n"}
    Path(out).write_text(MAGIC + json.dumps(image) + "\n")
    print(f"INFO:    scalesweep stand-in: no network, image content derived from {uri}", file=sys.stderr)
    return 0


def inspect(args: list[str]) -> int:
    pos = [a for a in args if not a.startswith("-")]
    if "--json" not in args or len(pos) != 1:
        return fatal(f"the stand-in inspects `inspect --json IMAGE` only, got {args}")
    try:
        text = Path(pos[0]).read_text()
    except OSError:
        return fatal(f"Failed to open image {pos[0]}: no such file")
    if not text.startswith(MAGIC):
        return fatal(f"Failed to open image {pos[0]}: not a SIF of the stand-in")
    attrs = json.loads(text[len(MAGIC):])
    print(json.dumps({"data": {"attributes": {"deffile": attrs["deffile"],
                                              "labels": dict(sorted(attrs["labels"].items()))}},
                      "type": "container"}, indent="\t"))
    return 0


def main(argv: list[str]) -> int:
    tool, args = argv[0], argv[1:]
    if args == ["--version"]:
        print(VERSIONS[tool][1])
        return 0
    command = args[0] if args else ""
    if command == "pull":
        return pull(args[1:])
    if command == "inspect":
        return inspect(args[1:])
    return fatal(f"{tool} {command}: not supported by the stand-in (tests/standins/apptainer.py)")


if __name__ == "__main__":
    rc = main(sys.argv[1:])
    log_invocation({"tool": sys.argv[1], "argv": sys.argv[1:], "exit_status": rc})
    sys.exit(rc)
