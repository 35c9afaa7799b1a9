"""``scalesweep load-image`` (rule load_image): a placed image copied into the own storage
of a runtime that runs images from there (Podman), in the storage of one of its modes,
once per image and mode. What the runtime runs is its class's business
(:meth:`~scalesweep.platform.runtimes.Runtime.storage_load`: the commands, the name the
image is run by); this module runs them and records what it did.

Cached by content: the stored image carries the content digest of what was loaded (a
label); where the storage already holds the reference with the digest of the image's
manifest, nothing is loaded again (``cached: true``). The record (JSON, written
atomically) is what the points of that runtime wait for: the reference, the digest, the
image ID, the runtime's version and the seconds the load took.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from scalesweep.images.process import BuildError
from scalesweep.platform import runtimes
from scalesweep.record.metrics import write_json_atomic

COMMAND = "load-image"


def log(msg: str) -> None:
    print(f"scalesweep {COMMAND}: {msg}", file=sys.stderr, flush=True)


def _run(cmd: list[str], stdin_cmd: list[str] | None = None) -> str:
    """``cmd`` (fed ``stdin_cmd``'s output where given); its stdout. BuildError naming
    the command when either fails."""
    log("$ " + (" ".join(stdin_cmd) + " | " if stdin_cmd else "") + " ".join(cmd))
    if stdin_cmd is None:
        proc = subprocess.run(cmd, capture_output=True, text=True)
        feeder_rc = 0
    else:
        with tempfile.TemporaryFile("w+") as feeder_err:
            feeder = subprocess.Popen(stdin_cmd, stdout=subprocess.PIPE, stderr=feeder_err, text=False)
            try:
                proc = subprocess.run(cmd, stdin=feeder.stdout, capture_output=True, text=True)
            finally:
                feeder.stdout.close()
                feeder_rc = feeder.wait()
            feeder_err.seek(0)
            warnings = feeder_err.read()
        if feeder_rc == 1 and Path(stdin_cmd[0]).name == "tar" and _only_ctime_changes(warnings):
            # GNU tar's exit 1: a file's status changed while it was read. The image's
            # files are hard links into the image cache, and another campaign placing the
            # same image links them again (a new ctime, the same content): not a change
            log(f"tar: {len(warnings.splitlines())} files' status changed as they were read "
                "(hard links into the image cache made meanwhile); their content is the cache's")
            feeder_rc = 0
        elif warnings:
            sys.stderr.write(warnings)
    if proc.returncode != 0:  # first: a reader that stopped early kills its feeder (SIGPIPE)
        raise BuildError(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.strip()[-800:]}")
    if feeder_rc != 0:
        raise BuildError(f"{' '.join(stdin_cmd)} failed ({feeder_rc})")
    return proc.stdout


def _only_ctime_changes(stderr: str) -> bool:
    """Whether GNU tar's complaints are all "file changed as we read it" (and there is one)."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    return bool(lines) and all(line.endswith("file changed as we read it") for line in lines)


def stored_digest(check: list[str]) -> str | None:
    """The digest the stored image carries; None where it is not in the storage."""
    proc = subprocess.run(check, capture_output=True, text=True)
    return proc.stdout.strip() if proc.returncode == 0 else None


def load_image(token: str, image: str, manifest: str, out: str, site: dict) -> dict:
    """Load ``image`` (its build manifest: ``manifest``) into the storage of runtime token
    ``token`` on ``site`` (a loaded site); write the record to ``out`` and return it."""
    rt = runtimes.runtime(token)
    facts = rt.site_facts(site, str(Path(image).resolve()))
    man = json.loads(Path(manifest).read_text())
    digest = man.get("content_digest") or ""
    fmt = man.get("format") or ""
    steps = rt.storage_load(facts, facts.image, fmt, digest)
    if steps is None:
        raise BuildError(f"runtime {token} runs images where they lie: nothing to load")
    t0 = time.monotonic()
    have = stored_digest(steps.check)
    cached = bool(digest) and have == digest
    if cached:
        log(f"cache hit: {steps.reference} in {token}'s storage has digest {digest}")
    else:
        log(f"loading {image} into {token}'s storage as {steps.reference}"
            + (f" (it held digest {have!r})" if have is not None else ""))
        printed = _run(steps.command, steps.stdin)
        if steps.tag is not None:
            _run([*steps.tag, printed.split()[-1], steps.reference])
    record = {
        "runtime": token,
        "mode": rt.run_mode or None,
        "image": facts.image,
        "format": fmt,
        "reference": steps.reference,
        "content_digest": digest,
        "cached": cached,
        "command": ([*steps.stdin, "|"] if steps.stdin else []) + steps.command,
        "runtime_version": runtimes.runtime_version(token, facts),
        "load_seconds": round(time.monotonic() - t0, 2),
        "loaded_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }
    write_json_atomic(out, record)
    return record


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--runtime", required=True, help="runtime token (podman, podman+vfs)")
    p.add_argument("--image", required=True, help="the placed image (a directory)")
    p.add_argument("--manifest", required=True, help="the image's build manifest")
    p.add_argument("--site", required=True, help="the campaign's site (a name under sites/ or a path)")
    p.add_argument("--out", required=True, help="the load record (JSON, written atomically)")


def run(a: argparse.Namespace) -> int:
    from scalesweep.platform.site import REPO, SiteError, load_site

    try:
        site = load_site(a.site, base=REPO)
        rec = load_image(a.runtime, a.image, a.manifest, a.out, site)
    except (BuildError, SiteError, runtimes.LaunchError) as exc:
        log(f"error: {exc}")
        return 1
    log(f"{'cached' if rec['cached'] else 'loaded'} {rec['reference']} ({rec['runtime']}) "
        f"in {rec['load_seconds']} s")
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser(COMMAND, help="copy a placed image into a runtime's own storage (podman), per mode",
                       description=__doc__.split("\n\n")[0])
    _arguments(p)
    p.set_defaults(func=run)
