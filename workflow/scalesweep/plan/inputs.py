"""What a campaign runs from and reads besides its config, checked before any job where a
bad one would otherwise fail only after measuring (issue #40, cases 4 and 5):

- the paths the workflow runs from (the Python interpreter running it, the repository,
  the campaign directory) hold only the characters of a config path (letters, digits and
  ``_ . / + @ % -``: config.schema.yaml ``$defs.safe_path``). Snakemake runs every
  ``script:`` rule as ``<interpreter> <script>`` in bash with the interpreter's path
  unquoted (snakemake/script/__init__.py, ``execute_script``): with a space in it every
  summary, figure and report job fails after the last point is measured;
- an LLM workload's prompts file (``workloads.<name>.prompts``) is a readable regular
  file of UTF-8 text, within ``max_prompts_mb`` and ``max_prompts`` (the schema bounds
  both), parsed by the payload's own reader (scripts/infer_llm.py ``load_prompts``).

Called by :func:`scalesweep.plan.config.check_config`; every refusal names the path (and
the config key) and the reason.
"""

from __future__ import annotations

import os
import re
import stat
import sys
import unicodedata
from pathlib import Path
from typing import Iterable

# a config path's characters (config.schema.yaml $defs.safe_path), '~' aside: these
# paths are absolute, a '~' in them is a directory's name
SAFE_CHAR = re.compile(r"[A-Za-z0-9_./+@%-]")
SAFE_CHARS = "letters, digits and _ . / + @ % -"
MIB = 1024 * 1024


def unsafe_characters(path: str) -> list[str]:
    """The characters of ``path`` outside SAFE_CHAR, each once, in order."""
    out: list[str] = []
    for ch in path:
        if not SAFE_CHAR.fullmatch(ch) and ch not in out:
            out.append(ch)
    return out


def describe(chars: Iterable[str]) -> str:
    """'a space and the non-ASCII 'ü'' for [' ', 'ü']."""
    names = []
    for ch in chars:
        if ch == " ":
            names.append("a space")
        elif ord(ch) > 127:
            names.append(f"the non-ASCII {ch!r}")
        else:
            names.append(repr(ch))
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def safe_spelling(path: str) -> str:
    """``path`` with accents dropped and every other unsafe character made '_'
    ('/x/au dit ü' -> '/x/au_dit_u'): a name to suggest."""
    plain = unicodedata.normalize("NFKD", path).encode("ascii", "ignore").decode()
    return "".join(ch if SAFE_CHAR.fullmatch(ch) else "_" for ch in plain)


def path_problems(directory: str | os.PathLike, repo: str | os.PathLike,
                  interpreter: str | None = None) -> list[str]:
    """Why the workflow cannot run from these paths, one sentence per path; [] if it can.
    ``directory``: the campaign directory; ``repo``: the checkout of the Snakefile;
    ``interpreter``: the Python running Snakemake (default ``sys.executable``)."""
    interpreter = sys.executable if interpreter is None else interpreter
    out = []
    bad = unsafe_characters(interpreter)
    if bad:
        out.append(
            f"the Python interpreter running this workflow, {interpreter!r}, has {describe(bad)}: "
            "Snakemake runs every script: rule (the summary, figures and report) as "
            "`<interpreter> <script>` in bash with this path unquoted "
            "(snakemake/script/__init__.py), so each would fail with 'No such file or "
            "directory' after every point was measured. Make the virtual environment in a "
            f"path of {SAFE_CHARS} only (e.g. python3 -m venv {safe_spelling(interpreter).rsplit('/bin/', 1)[0]}, "
            "or the checkout moved there and tools/quickstart.sh run again)")
    for what, path in (("the repository (the Snakefile's checkout)", repo),
                       ("the campaign directory", directory)):
        path = os.path.abspath(path)
        bad = unsafe_characters(path)
        if bad:
            out.append(
                f"{what} {path!r} has {describe(bad)}: the workflow hands this path to "
                "shells, Slurm and container runtimes (bind mounts, where ':' and ',' "
                f"separate fields) and holds every path it does so to {SAFE_CHARS} (the "
                "characters of a config path, config.schema.yaml $defs.safe_path). Rename "
                f"or move it (e.g. {safe_spelling(path)!r})")
    return out


def prompts_problem(key: str, wl: dict, repo: str | os.PathLike, on_cluster: bool) -> str | None:
    """Why workload ``wl``'s prompts file cannot be read as the payload reads it, or
    None. ``key``: 'config key workloads.<name>'. The path is relative to the repository,
    as the payload gets it (scalesweep.plan.kinds.llm). ``on_cluster``: a site with a
    scheduler, whose payloads read the file on the cluster: one missing here is not
    refused (what is here is checked)."""
    name = wl["prompts"]
    path = Path(repo, name)
    where = f"{key}.prompts: {name!r}" + (f" ({path})" if str(path) != name else "")
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return None if on_cluster else f"{where} does not exist"
    except OSError as exc:
        return f"{where} cannot be read: {exc.strerror}"
    if not stat.S_ISREG(info.st_mode):
        return f"{where} is not a regular file (a directory, device or pipe): name a text file of prompts"
    limit = wl["max_prompts_mb"]
    if info.st_size > limit * MIB:
        return (f"{where} is {info.st_size / MIB:.1f} MiB, more than {key}.max_prompts_mb "
                f"({limit} MiB; a prompt set that large runs for hours): use a smaller file, "
                "or raise max_prompts_mb (at most 1024)")
    try:
        data = path.read_bytes()
    except OSError as exc:
        return f"{where} cannot be read: {exc.strerror}"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return (f"{where} is not UTF-8 text: byte 0x{data[exc.start]:02x} at offset {exc.start} "
                "(a binary file, or text in another encoding: convert it, e.g. `iconv -f "
                "latin1 -t utf-8`)")
    if "\0" in text:
        return f"{where} is not text: a NUL byte at offset {text.index(chr(0))} (a binary file?)"
    from scalesweep.plan.payload_scripts import payload_script

    try:
        prompts = payload_script("infer_llm").load_prompts(path)
    except ValueError as exc:
        return f"{where}: {exc}"
    if len(prompts) > wl["max_prompts"]:
        return (f"{where} holds {len(prompts)} prompts, more than {key}.max_prompts "
                f"({wl['max_prompts']}; each is a request unless num_requests is set): use "
                "fewer, or raise max_prompts (at most 1000000)")
    return None


def check_prompts(config: dict, repo: Path, kind) -> str | None:
    """The first problem of a prompts file of an enabled engine-served workload the run
    selects (``only.workloads``), or None. ``repo``: where relative paths start;
    ``kind``: a workload's kind (``scalesweep.plan.config``, which calls this)."""
    from scalesweep.plan.sweep import Selection, enabled_workloads
    from scalesweep.platform.site import site_of

    chosen = Selection.of(config).workloads
    on_cluster = site_of(config)["scheduler"] != "none"
    for name in enabled_workloads(config):
        wl = config["workloads"][name]
        if not kind(wl).engine_served or (chosen is not None and name not in chosen):
            continue
        problem = prompts_problem(f"config key workloads.{name}", wl, repo, on_cluster)
        if problem:
            return problem
    return None
