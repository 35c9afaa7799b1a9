"""Recipes: definition files (Apptainer and SingularityCE share the format) parsed and
linted, with the base image they name; KEY=VALUE build-arg files."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from scalesweep.images.process import BuildError


# Definition files: the sections and header keywords Apptainer knows (lint + preflight).
APPTAINER_SECTIONS = frozenset(
    {
        "arguments", "setup", "files", "post", "test", "environment", "runscript",
        "startscript", "labels", "help",
        "appinstall", "appfiles", "appenv", "apphelp", "apprun", "applabels",
        "appstart", "apptest",
    }
)

APPTAINER_HEADER_KEYS = frozenset(
    {
        "bootstrap", "from", "stage", "fingerprints", "osversion", "mirrorurl",
        "include", "updateurl", "confurl", "setopt", "product", "user", "regcode",
        "productpgp", "registryurl", "namespace",
    }
)
TEMPLATE_VAR_RE = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")

def load_build_args(path: str | os.PathLike) -> dict[str, str]:
    """KEY=VALUE lines (``#`` comments, blank lines ignored; the format of
    ``apptainer build --build-arg-file``), in file order."""
    args: dict[str, str] = {}
    for n, raw in enumerate(Path(path).read_text().splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        key = key.strip()
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            raise BuildError(f"{path}:{n}: expected KEY=VALUE, got {raw!r}")
        args[key] = value.strip().strip("'\"")
    return args

@dataclass
class ApptainerDef:
    header: dict[str, str]  # the final stage's (the image's base)
    sections: list[tuple[str, str]]  # (name, body) in order, every stage's
    arguments: dict[str, str]  # %arguments defaults
    used_vars: set[str]
    stages: list[dict[str, str]] = field(default_factory=list)  # every stage's header, in order

def parse_apptainer_def(text: str) -> ApptainerDef:
    """Parse an Apptainer definition file; raises BuildError on structural problems.

    Checks: the header starts with ``Bootstrap:``, header keys are known, section names
    are known, every ``{{ VAR }}`` has a default in ``%arguments``.
    """
    header: dict[str, str] = {}
    stages = [header]
    stage_lines: list[list[str]] = [[]]  # each stage's text, for its {{ VAR }}s
    sections: list[tuple[str, str]] = []
    section_stage: list[int] = []  # the stage of each section
    current: str | None = None
    body: list[str] = []

    def close_section() -> None:
        if current is not None:
            sections.append((current, "\n".join(body)))
            section_stage.append(len(stages) - 1)

    for n, raw in enumerate(text.splitlines(), 1):
        if (current is not None or "bootstrap" in header) and re.match(r"^Bootstrap:", raw, re.I):
            # a multi-stage build: the next stage's header (`Stage: <name>`; a later
            # stage copies files from an earlier one with `%files from <name>`)
            close_section()
            current, body, header = None, [], {}
            stages.append(header)
            stage_lines.append([])
        stage_lines[-1].append(raw)
        m = re.match(r"^%([A-Za-z]+)\b(.*)$", raw)
        if m:
            close_section()
            current, body = m.group(1).lower(), []
            if current not in APPTAINER_SECTIONS:
                raise BuildError(f"line {n}: unknown section %{m.group(1)}")
            continue
        if current is None:
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            key, sep, value = line.partition(":")
            if not sep:
                raise BuildError(f"line {n}: header line is not 'Key: value': {raw!r}")
            k = key.strip().lower()
            if k not in APPTAINER_HEADER_KEYS:
                raise BuildError(f"line {n}: unknown header keyword {key.strip()!r}")
            if not header and k != "bootstrap":
                raise BuildError(f"line {n}: the header must start with 'Bootstrap:'")
            header[k] = value.strip()
        else:
            body.append(raw)
    close_section()
    for stage in stages:
        if "bootstrap" not in stage:
            raise BuildError("no 'Bootstrap:' header")
        if stage["bootstrap"] in ("docker", "localimage", "oras", "library", "shub") and "from" not in stage:
            raise BuildError(f"Bootstrap: {stage['bootstrap']} needs a 'From:' header")
    if len(stages) > 1 and not all(st.get("stage") for st in stages):
        raise BuildError("a multi-stage definition needs a 'Stage:' in every header")
    # Apptainer reads %arguments per stage: each stage's {{ VAR }} needs its own default;
    # `arguments` is every stage's (a build arg fills a {{ VAR }} of any stage)
    own: list[dict[str, str]] = [{} for _ in stages]
    for (name, sbody), i in zip(sections, section_stage):
        if name == "arguments":
            own[i].update(_arguments_section(sbody))
    arguments = {k: v for stage_args in own for k, v in stage_args.items()}
    for i, lines in enumerate(stage_lines):
        missing = sorted(set(TEMPLATE_VAR_RE.findall("\n".join(lines))) - set(own[i]))
        if missing:
            where = f" (stage {i + 1})" if len(stages) > 1 else ""
            raise BuildError(f"{{{{ VAR }}}} without a %arguments default{where}: {', '.join(missing)}")
    used = set(TEMPLATE_VAR_RE.findall(text))
    return ApptainerDef(header, sections, arguments, used, stages)

def _arguments_section(body: str) -> dict[str, str]:
    """``KEY=VALUE`` lines of an %arguments section (comments and blanks skipped)."""
    out = {}
    for line in body.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise BuildError(f"%arguments: expected KEY=VALUE, got {line!r}")
        out[key.strip()] = value.strip().strip("'\"")
    return out

def def_base(deffile: str, args: dict[str, str] | None = None) -> dict | None:
    """``{"bootstrap": ..., "from": ...}`` of a definition file, its ``{{ ARG }}`` filled
    from ``args`` then its %arguments defaults; None when it cannot be read."""
    try:
        parsed = parse_apptainer_def(deffile)
    except BuildError:
        return None
    values = {**parsed.arguments, **(args or {})}
    fill = lambda v: TEMPLATE_VAR_RE.sub(lambda m: values.get(m.group(1), m.group(0)), v)  # noqa: E731
    base = {k: fill(parsed.header[k]) for k in ("bootstrap", "from") if k in parsed.header}
    if len(parsed.stages) > 1:  # multi-stage: the final stage's base is the image's
        base["stages"] = [{k: fill(v) for k, v in st.items() if k in ("stage", "from")} for st in parsed.stages]
    return base
