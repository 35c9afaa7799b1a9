#!/usr/bin/env python3
"""Stand-in for ``apptainer`` (Apptainer 1.3.6) and ``singularity`` (SingularityCE 4.2.2).

Run as ``apptainer.py TOOL ARGS...`` (the wrappers of ``standins.install``). It does what
the project asks of the real tools, with their checks and messages, without their
machinery (no image file system, no network, no setuid starter):

* ``--version`` / ``version``; global options ``-s/--silent`` (errors only), ``-q/--quiet``
  (no INFO), ``-v/--verbose``, ``-d/--debug``.
* ``build [-f|--fakeroot] [-F|--force] [-s|--sandbox] [--warn-unused-build-args]
  [--build-arg K=V]... [--build-arg-file F] OUT SPEC``: SPEC is a definition file (or a
  ``docker://``-style URI, or a stand-in image to convert). The definition file is parsed
  as Apptainer's parser does (pkg/build/types/parser/deffile.go): header ``Key: value``
  lines with the known keywords, sections opened by a line whose first word starts with
  ``%``, unknown sections refused. ``{{ VAR }}`` is filled from the build args, then the
  ``%arguments`` defaults (internal/pkg/build/args/reader.go: not on comment lines); an
  undefined one and an unused build arg are fatal (cmd/internal/cli/build_linux.go), the
  latter only a warning with ``--warn-unused-build-args``. ``%files`` sources must exist
  (relative to the current directory). ``%post``/``%test`` are recorded, not run.
  The output is a "stand-in SIF": the SIF launch line ``#!/usr/bin/env run-singularity``
  then a JSON document (definition after substitution, labels with the build labels the
  real tool adds (internal/pkg/build/metadata.go), %environment, %runscript, build args
  ...). With ``--sandbox`` OUT is a directory holding it in ``.singularity.d/standin.json``.
  An existing OUT needs ``--force`` (cmd/internal/cli/build.go checkBuildTarget).
* ``pull [-F|--force] [--name N] [--dir D] [OUT] URI`` (docker, oras, library, shub, http(s)):
  no network, a stand-in SIF whose label ``org.scalesweep.standin.pulled_from`` is the URI;
  the default name is the real one (internal/pkg/util/uri/uri.go GetName:
  ``<name>_<tag>.sif``, the basename for http(s)).
* ``inspect [-j] [-l] [-d] [-e] [-r] [-s] [-t] [-H] [--all] IMAGE``: output as
  cmd/internal/cli/inspect.go prints it (JSON: ``{"data": {"attributes": {...}},
  "type": "container"}``; text: sections, then ``key: value`` labels).
* ``exec [options] IMAGE CMD ARGS...`` and ``run [options] IMAGE ARGS...`` (the image's
  %runscript): the command runs on this host, which plays the image's root file system,
  with the project's venv as the image's ``/opt/venv``, in a private mount namespace
  (``unshare --mount --propagation private``; ``unshare --user --map-root-user --mount``
  when not root), so nothing changes outside it:

  - ``/mnt`` is a fresh tmpfs with ``code``, ``data`` and ``out`` (every scalesweep image
    creates them), ``/opt`` a tmpfs with the host's ``/opt`` entries bound back plus
    ``venv`` (``$SCALESWEEP_STANDIN_VENV`` or this interpreter's ``sys.prefix``); programs
    an image installs in ``/usr/local/bin`` that have a stand-in (``ollama``) are put there;
  - binds (``-B/--bind SRC[:DST[:ro|rw]][,...]``, then ``$APPTAINER_BIND(PATH)`` /
    ``$SINGULARITY_BIND(PATH)``, cmdline/env.go EnvAppendValue): a missing source is fatal
    (``mount source /x doesn't exist``, container_linux.go mountGeneric), a missing
    destination too unless it lies on the tmpfs file systems above (Apptainer without an
    overlay/underlay layer: ``destination /x doesn't exist in container``);
  - ``$APPTAINER_CONTAINLIBS`` / ``$SINGULARITY_CONTAINLIBS``: each library must exist;
    they appear in a directory (``/opt/.singularity.d/libs``, the real one is
    ``/.singularity.d/libs``) that ends LD_LIBRARY_PATH as in 99-base.sh;
  - the environment as internal/pkg/util/env/create.go builds it and the action script
    (internal/pkg/util/fs/files/action_script.sh) finishes it: the host's variables pass
    (not ``APPTAINER_*``/``SINGULARITY_*``, ``HOME``, ``PATH``, ``LD_LIBRARY_PATH``; with
    ``-e/--cleanenv`` only ``TERM`` and the proxies, plus ``LANG=C``), PATH is the default
    path, then the image's %environment is sourced, then ``APPTAINERENV_X`` /
    ``SINGULARITYENV_X`` / ``--env X=V`` set X (evaluated in double quotes, as the real
    inject script does), then host variables the image did not set come back;
    ``APPTAINER_CONTAINER``/``APPTAINER_NAME`` (and the ``SINGULARITY_`` pair) name the image;
  - ``--pwd DIR`` is the working directory (must exist), else the current one;
    ``-W/--workdir`` is the scratch directory of ``-c/--contain`` (private /tmp, /var/tmp);
  - ``--rocm``/``--nv`` are recorded; on a host without /dev/kfd (/dev/nvidiactl) the real
    warnings ``Could not find any rocm files on this host!`` are printed;
  - the command's exit status is the stand-in's; signals (SIGTERM from srun) are forwarded
    to it, and a command killed by a signal kills the stand-in with the same signal, as the
    real starter does (internal/app/starter/master_linux.go).

* Anything else (``shell``, ``instance``, ``oci``, options the project does not use ...)
  exits 2 with "not supported by the stand-in".

Fatal errors print ``FATAL:   <message>`` and exit 255 (pkg/sylog Fatalf); command-line
errors print cobra's ``Error for command "build": ...`` and exit 1
(cmd/internal/cli/apptainer.go ExecuteApptainer). Sources: the Apptainer repository
(github.com/apptainer/apptainer) and apptainer.org/docs/user/main (build, exec, inspect,
pull, "Environment and metadata", "Bind Paths and Mounts", "GPU support").
"""

from __future__ import annotations

import ctypes
import datetime as _dt
import glob
import hashlib
import itertools
import json
import os
import re
import shlex
import shutil
import signal
import stat
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def log_invocation(record: dict[str, Any]) -> None:
    """standins.log_invocation (the package is tests/standins)."""
    sys.path.insert(0, str(HERE.parent))
    from standins import log_invocation as log

    log(record)


# --------------------------------------------------------------------------- constants

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"  # util/env/env.go
SIF_LAUNCH = "#!/usr/bin/env run-singularity\n"  # the first line of every SIF
STANDIN_FORMAT = "scalesweep-standin-sif"
IMAGE_MOUNT_POINTS = ("/mnt/code", "/mnt/data", "/mnt/out")  # created by every scalesweep image
SINGULARITY_D = "/opt/.singularity.d"  # the stand-in's /.singularity.d (on the /opt tmpfs)
LIBS_DIR = f"{SINGULARITY_D}/libs"
# Programs an image may install in /usr/local/bin that have a stand-in here.
PROVIDABLE = ("ollama",)

# Header keywords and sections of pkg/build/types/parser/deffile.go
VALID_HEADERS = {
    "bootstrap", "from", "includecmd", "mirrorurl", "updateurl", "osversion", "include",
    "library", "registry", "namespace", "stage", "product", "user", "regcode", "productpgp",
    "registerurl", "modules", "otherurl&n", "fingerprints", "confurl", "setopt", "target",
    "frontend", "filename", "buildargs",
}
VALID_SECTIONS = {
    "help", "setup", "files", "labels", "environment", "pre", "post", "runscript", "test",
    "startscript", "arguments",
}
APP_SECTIONS = {"appinstall", "applabels", "appfiles", "appenv", "apptest", "apphelp", "apprun", "appstart"}
# internal/pkg/build/args/reader.go
BUILD_ARG_RE = re.compile(r"{{\s*(\w+)\s*}}")
COMMENT_LINE_RE = re.compile(r"\s*[#][^!]\s*.*")
# internal/pkg/util/uri/uri.go validURIs (the ones pull can fetch from)
PULL_TRANSPORTS = ("library", "shub", "docker", "oras", "http", "https")
VALID_URIS = {"library", "shub", "docker", "docker-archive", "docker-daemon", "oci", "oci-archive",
              "http", "https", "oras", "buildkit", "dockerfile", "ipfs"}

# sylog levels (pkg/sylog): messages at or below the current level are printed
FATAL, ERROR, WARN, LOG, INFO, VERBOSE, DEBUG = -4, -3, -2, -1, 1, 2, 5


class Exit(Exception):
    """Leave with ``code`` (the message is already printed)."""

    def __init__(self, code: int):
        super().__init__(code)
        self.code = code


class Unsupported(Exception):
    """Something the real tool does that this stand-in does not (exit 2)."""


@dataclass
class Tool:
    """The differences between Apptainer and SingularityCE the project can see."""

    name: str
    version: str
    version_line: str
    env_prefixes: tuple[str, ...]  # APPTAINERENV_ -> variable inside
    cli_prefixes: tuple[str, ...]  # APPTAINER_BIND, _CONTAINLIBS ... (first wins)
    container_vars: tuple[str, ...]  # prefixes of CONTAINER / NAME set inside
    label_version: str  # org.label-schema.usage.<x>.version
    ps1: str

    def cli_env(self, key: str) -> str | None:
        for prefix in self.cli_prefixes:
            value = os.environ.get(prefix + key)
            if value is not None:
                return value
        return None


TOOLS = {
    # Apptainer honours the legacy SINGULARITY_ names too (util/env/env.go).
    "apptainer": Tool("apptainer", "1.3.6", "apptainer version 1.3.6",
                      ("APPTAINERENV_", "SINGULARITYENV_"), ("APPTAINER_", "SINGULARITY_"),
                      ("APPTAINER_", "SINGULARITY_"), "apptainer", "Apptainer> "),
    "singularity": Tool("singularity", "4.2.2", "singularity-ce version 4.2.2",
                        ("SINGULARITYENV_",), ("SINGULARITY_",), ("SINGULARITY_",),
                        "singularity", "Singularity> "),
}


# --------------------------------------------------------------------------- messages


class Log:
    """pkg/sylog: ``FATAL:   msg`` (padded to 8 columns), to stderr."""

    level = INFO

    @classmethod
    def emit(cls, level: int, tag: str, msg: str) -> None:
        if level <= cls.level:
            sys.stderr.write(f"{tag + ':':<8} {msg}\n")
            sys.stderr.flush()

    @classmethod
    def fatal(cls, msg: str) -> None:
        cls.emit(FATAL, "FATAL", msg)
        raise Exit(255)

    @classmethod
    def error(cls, msg: str) -> None:
        cls.emit(ERROR, "ERROR", msg)

    @classmethod
    def warning(cls, msg: str) -> None:
        cls.emit(WARN, "WARNING", msg)

    @classmethod
    def info(cls, msg: str) -> None:
        cls.emit(INFO, "INFO", msg)

    @classmethod
    def verbose(cls, msg: str) -> None:
        cls.emit(VERBOSE, "VERBOSE", msg)


# --------------------------------------------------------------------------- flags (pflag)


@dataclass
class Flag:
    long: str
    short: str = ""
    kind: str = "bool"  # bool | value | list
    help: str = ""
    supported: bool = True  # False: the real tool has it, the stand-in refuses it


class FlagError(Exception):
    pass


def parse_flags(args: list[str], flags: list[Flag], interspersed: bool) -> tuple[dict[str, Any], list[str]]:
    """pflag's syntax: ``--name value``, ``--name=value``, ``-x value``, ``-xvalue``, ``-abc``
    (booleans), ``--`` ends the options; without ``interspersed`` the first positional
    argument ends them too (``exec IMAGE CMD -x``)."""
    by_long = {f.long: f for f in flags}
    by_short = {f.short: f for f in flags if f.short}
    opts: dict[str, Any] = {f.long: ([] if f.kind == "list" else (False if f.kind == "bool" else None)) for f in flags}
    seen: list[str] = []
    pos: list[str] = []
    i = 0

    def take(f: Flag, value: str | None, name: str) -> None:
        nonlocal i
        if f.kind == "bool":
            if value is None or value.lower() in ("true", "1", "t"):
                opts[f.long] = True
            elif value.lower() in ("false", "0", "f"):
                opts[f.long] = False
            else:
                raise FlagError(f'invalid argument "{value}" for "{name}" flag: strconv.ParseBool: parsing "{value}": invalid syntax')
        else:
            if value is None:
                if i + 1 >= len(args):
                    raise FlagError(f"flag needs an argument: {name}")
                i += 1
                value = args[i]
            if f.kind == "list":
                opts[f.long].append(value)
            else:
                opts[f.long] = value
        seen.append(f.long)

    while i < len(args):
        a = args[i]
        if a == "--":
            pos.extend(args[i + 1:])
            break
        if a.startswith("--") and len(a) > 2:
            name, eq, value = a[2:].partition("=")
            f = by_long.get(name)
            if f is None:
                raise FlagError(f"unknown flag: --{name}")
            take(f, value if eq else None, f"--{name}")
        elif a.startswith("-") and len(a) > 1:
            j = 1
            while j < len(a):
                c = a[j]
                f = by_short.get(c)
                if f is None:
                    raise FlagError(f"unknown shorthand flag: '{c}' in {a}")
                if f.kind == "bool":
                    take(f, None, f"'{c}' in {a}")
                    j += 1
                    continue
                rest = a[j + 1:]
                take(f, rest if rest else None, f"'{c}' in -{c}")
                break
        else:
            pos.append(a)
            if not interspersed:
                pos.extend(args[i + 1:])
                break
        i += 1
    for name in seen:
        if not by_long[name].supported:
            raise Unsupported(f"option --{name} is not supported by the stand-in")
    return opts, pos


def flags_usage(flags: list[Flag]) -> str:
    lines = []
    for f in flags:
        short = f"-{f.short}, " if f.short else "    "
        arg = " string" if f.kind != "bool" else ""
        lines.append(f"  {short}--{f.long}{arg}".ljust(34) + f.help)
    return "\n".join(lines)


# --------------------------------------------------------------------------- definition files


@dataclass
class Definition:
    """One build stage of a definition file."""

    header: dict[str, str]
    sections: dict[str, str]  # name ("post", "apprun foo") -> body
    section_args: dict[str, str]
    files: list[tuple[str, str, str]]  # %files [from <stage>]: (src, dst, stage or "")
    labels: dict[str, str]
    raw: str


class EmptyDefinition(ValueError):
    pass


def _split_sections(text: str) -> tuple[str, list[tuple[str, str]]]:
    """The header and the (first line, body) of each section, as scanDefinitionFile cuts
    them: a section starts at a line whose first word begins with '%'."""
    header: list[str] = []
    sections: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        words = line.split()
        if words and words[0].startswith("%"):
            sections.append((line.strip(), []))
        elif sections:
            sections[-1][1].append(line)
        else:
            header.append(line)
    return "\n".join(header), [(first, "\n".join(body) + ("\n" if body else "")) for first, body in sections]


def _parse_header(text: str) -> dict[str, str]:
    """deffile.go doHeader: ``Key: value`` (comments cut at '#', '\\' continues a line)."""
    header: dict[str, str] = {}
    key_cont = val_cont = ""
    for line in text.strip().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            if key_cont:
                header[key_cont] = val_cont
                key_cont = val_cont = ""
            continue
        trim = line.split("#")[0]
        if not val_cont:
            key, sep, val = trim.partition(":")
            if not sep:
                raise ValueError(f"failed to parse deffile header: header key {key} had no val")
            key, val = key.strip().lower(), val.strip()
        else:
            key, val = key_cont, val_cont + trim.strip()
            key_cont = val_cont = ""
        if val.endswith("\\"):
            key_cont, val_cont = key, val[:-1]
            continue
        if key not in VALID_HEADERS and re.sub(r"\d+$", "&n", key) not in VALID_HEADERS:
            raise ValueError(f"failed to parse deffile header: invalid header keyword found: {key}")
        header[key] = val
    return header


def _labels(body: str) -> dict[str, str]:
    """deffile.go GetLabels: ``key value`` per line."""
    labels = {}
    for line in body.strip().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, _, val = line.partition(" ")
        labels[key.strip()] = val.strip()
    return labels


def parse_definition(text: str) -> Definition:
    """Parse (no substitution); raises ValueError with the parser's message."""
    header_text, raw_sections = _split_sections(text)
    header = _parse_header(header_text) if header_text.strip() else {}
    sections: dict[str, str] = {}
    section_args: dict[str, str] = {}
    files: list[tuple[str, str, str]] = []
    invalid = []
    for first, body in raw_sections:
        words = first.lstrip("%").split(None, 1)
        name = words[0].lower() if words else ""
        arg = words[1] if len(words) > 1 else ""
        if name == "files":
            # "%files from <stage>" copies from an earlier stage's root file system
            from_args = arg.split("#")[0].split()
            stage = from_args[1] if len(from_args) >= 2 and from_args[0] == "from" else ""
            for line in body.strip().splitlines():
                line = line.strip()
                if not line or line.startswith("#"):
                    continue
                parts = shlex.split(line, comments=False) if '"' in line or "'" in line else line.split()
                files.append((parts[0], parts[1] if len(parts) > 1 else "", stage))
            continue
        if name in APP_SECTIONS:
            app = arg.split()[0] if arg.split() else ""
            if not app:
                raise ValueError(f"app section %{name}: could not be split into section name and app name")
            name = f"{name} {app}"
        elif name not in VALID_SECTIONS:
            invalid.append(name)
            continue
        elif arg:
            section_args[name] = arg
        sections[name] = sections.get(name, "") + body
    if invalid:
        raise ValueError(f"invalid section(s) specified: {', '.join(invalid)}")
    if not header and not sections and not files:
        raise EmptyDefinition("empty definition file")
    return Definition(header, sections, section_args, files, _labels(sections.get("labels", "")), text)


def split_stages(text: str) -> list[str]:
    """deffile.go All: the text cut before every line starting with ``Bootstrap:``
    (what comes before the first is a stage too, usually only comments)."""
    starts = [m.start() for m in re.finditer(r"(?mi)^bootstrap:", text)]
    bounds = [0, *starts, len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds) if b > a]


def read_defaults(definition: Definition) -> dict[str, str]:
    """args.go ReadDefaults: KEY=VALUE lines of %arguments (values trimmed, not unquoted)."""
    defaults = {}
    for line in definition.sections.get("arguments", "").splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, val = line.partition("=")
        if not sep or not key.strip():
            Log.warning(f'Skipping "{line}" in \'arguments\' section: "{line}" is not a key=value pair')
            continue
        defaults[key.strip()] = val.strip()
    return defaults


def substitute(text: str, build_args: dict[str, str], defaults: dict[str, str]) -> tuple[str, set[str]]:
    """args/reader.go NewReader: replace {{ VAR }} (not on comment lines) from the build
    args, then the defaults (whose own {{ X }} are filled too); the consumed names."""
    out: list[str] = []
    consumed: set[str] = set()
    i = 0
    for m in BUILD_ARG_RE.finditer(text):
        line_start = text.rfind("\n", i, m.start())
        line_start = i if line_start < 0 else line_start
        if COMMENT_LINE_RE.search(text, line_start, m.start()):
            continue  # left as it is, and not consumed
        out.append(text[i:m.start()])
        name = m.group(1)
        if name in build_args:
            val = build_args[name]
        elif name in defaults:
            val = defaults[name]
        else:
            raise KeyError(name)
        for inner in BUILD_ARG_RE.finditer(val):
            k = inner.group(1)
            if k in build_args:
                val = val.replace(inner.group(0), build_args[k])
            elif k in defaults:
                val = val.replace(inner.group(0), defaults[k])
        out.append(val)
        consumed.add(name)
        i = m.end()
    out.append(text[i:])
    return "".join(out), consumed


def read_build_args(args: list[str], arg_file: str | None) -> dict[str, str]:
    """args.go ReadBuildArgs: the file's KEY=VALUE lines, then --build-arg (wins)."""
    result: dict[str, str] = {}
    if arg_file:
        try:
            text = Path(arg_file).read_text()
        except OSError as exc:
            Log.fatal(f'While processing the definition file: error while opening file "{arg_file}": open {arg_file}: {exc.strerror.lower()}')
        for line in text.splitlines():
            key, sep, val = line.partition("=")
            if not sep or not key.strip():
                Log.warning(f'Skipping "{line}" in build arg file: "{line}" is not a key=value pair')
                continue
            result[key.strip()] = val.strip()
    for arg in args:
        key, sep, val = arg.partition("=")
        if not sep:
            Log.fatal(f'While processing the definition file: "{arg}" is not a key=value pair')
        if not key.strip():
            Log.fatal(f'While processing the definition file: missing key portion in "{arg}"')
        result[key.strip()] = val.strip()
    return result


# --------------------------------------------------------------------------- stand-in images


@dataclass
class Image:
    path: str  # absolute
    doc: dict[str, Any]
    sandbox: bool

    @property
    def labels(self) -> dict[str, str]:
        return self.doc.get("labels") or {}


def _filler(seed: str, size: int = 4096) -> str:
    """Deterministic padding so a stand-in SIF has a few KB, like a (tiny) real one."""
    out, block = [], seed.encode()
    while sum(len(x) for x in out) < size:
        block = hashlib.sha256(block).digest()
        out.append(block.hex())
    return "".join(out)[:size]


def build_labels(tool: Tool, header: dict[str, str], has_help: bool) -> dict[str, str]:
    """metadata.go addBuildLabels (v1.3.6): what every built image carries."""
    now = _dt.datetime.now().astimezone()
    labels = {
        "org.label-schema.schema-version": "1.0",
        "org.label-schema.build-date": (f"{now:%A}_{now.day}_{now:%B}_{now.year}_"
                                        f"{now.hour}:{now.minute}:{now.second}_{now.tzname()}"),
        f"org.label-schema.usage.{tool.label_version}.version": tool.version,
        "org.label-schema.build-arch": "amd64",
    }
    if has_help:
        labels["org.label-schema.usage"] = "/.singularity.d/runscript.help"
        labels[f"org.label-schema.usage.{tool.label_version}.runscript.help"] = "/.singularity.d/runscript.help"
    for key, value in header.items():
        labels[f"org.label-schema.usage.singularity.deffile.{key}"] = value
    return labels


def provided_programs(deffile: str) -> list[str]:
    """Stand-in programs the image installs: those its definition runs or tests at
    /usr/local/bin/<name> (the Ollama image: ``test -x /usr/local/bin/ollama``)."""
    return [p for p in PROVIDABLE if f"/usr/local/bin/{p}" in deffile]


def write_image(out: Path, doc: dict[str, Any], sandbox: bool) -> None:
    doc = dict(doc, filler=_filler(json.dumps(doc.get("labels", {}), sort_keys=True) + doc.get("deffile", "")))
    text = json.dumps(doc, indent=1, sort_keys=False) + "\n"
    if sandbox:
        # a sandbox as checkBuildTarget recognises one: .singularity.d, dev, proc, sys
        for sub in ("dev", "proc", "sys", ".singularity.d/env", ".singularity.d/libs"):
            (out / sub).mkdir(parents=True, exist_ok=True)
        (out / ".singularity.d" / "standin.json").write_text(text)
        (out / ".singularity.d" / "Singularity").write_text(doc.get("deffile", ""))
        (out / ".singularity.d" / "labels.json").write_text(json.dumps(doc.get("labels", {}), indent=1))
        (out / ".singularity.d" / "env" / "90-environment.sh").write_text(env_file_text(doc))
        (out / ".singularity.d" / "runscript").write_text(runscript_text(doc))
        return
    tmp = out.with_name(f".{out.name}.standin-{os.getpid()}")
    tmp.write_text(SIF_LAUNCH + text)
    tmp.chmod(0o755)  # SIFs are executable (the launch line)
    os.replace(tmp, out)


def load_image(arg: str, purpose: str = "could not open image") -> Image:
    """The stand-in image at ``arg`` (SIF file or sandbox directory), or FATAL as
    image.Init fails for the real tool."""
    path = os.path.abspath(arg)
    if not os.path.lexists(path):
        Log.fatal(f"{purpose} {path}: failed to retrieve path for {path}: lstat {path}: no such file or directory")
    try:
        if os.path.isdir(path):
            doc = json.loads(Path(path, ".singularity.d", "standin.json").read_text())
            sandbox = True
        else:
            with open(path, encoding="utf-8", errors="strict") as fh:
                first = fh.readline()
                if first != SIF_LAUNCH:
                    raise ValueError("no SIF launch line")
                doc = json.loads(fh.read())
            sandbox = False
        if not isinstance(doc, dict) or doc.get("format") != STANDIN_FORMAT or not doc.get("standin"):
            raise ValueError("not a stand-in image")
    except (OSError, ValueError, UnicodeDecodeError):
        Log.fatal(f"{purpose} {path}: image format not recognized (not a scalesweep stand-in image: "
                  "build or pull it with the stand-in)")
    return Image(path, doc, sandbox)


def env_file_text(doc: dict[str, Any]) -> str:
    """/.singularity.d/env/90-environment.sh as the build writes it."""
    return "#!/bin/sh\n# Custom environment shell code should follow\n\n" + (doc.get("environment") or "")


def runscript_text(doc: dict[str, Any]) -> str:
    return "#!/bin/sh\n\n" + (doc.get("runscript") or "")


def inspect_attributes(image: Image) -> dict[str, Any]:
    doc = image.doc
    attrs: dict[str, Any] = {
        "labels": doc.get("labels") or {},
        "deffile": doc.get("deffile") or "",
        "environment": {"/.singularity.d/env/90-environment.sh": env_file_text(doc)} if doc.get("environment") else {},
        "runscript": runscript_text(doc) if doc.get("runscript") else "",
        "startscript": ("#!/bin/sh\n\n" + doc["startscript"]) if doc.get("startscript") else "",
        "test": ("#!/bin/sh\n\n" + doc["test"]) if doc.get("test") else "",
        "helpfile": doc.get("help") or "",
    }
    return attrs


# --------------------------------------------------------------------------- commands: build, pull


BUILD_FLAGS = [
    Flag("fakeroot", "f", help="build using user namespace to fake root user"),
    Flag("force", "F", help="overwrite an image file if it exists"),
    Flag("sandbox", "s", help="build image as sandbox format (chroot directory structure)"),
    Flag("build-arg", "", "list", "defines variable=value to replace {{ variable }} entries in build definition file"),
    Flag("build-arg-file", "", "value", "specifies a file containing variable=value lines"),
    Flag("warn-unused-build-args", "", help="shows warning instead of fatal message when build args are not exact matched"),
    Flag("notest", "T", help="build without running tests in %test section"),
    Flag("disable-cache", "", help="do not use cache or create cache"),
    Flag("fix-perms", "", help="ensure owner has rwX permissions on all container content for oci/docker sources"),
    Flag("update", "u", help="run definition over existing container (skips header)", supported=False),
    Flag("section", "", "list", "only run specific section(s) of deffile", supported=False),
    Flag("encrypt", "e", help="build an image with an encrypted file system", supported=False),
    Flag("remote", "r", help="build image remotely", supported=False),
    Flag("bind", "B", "list", "a user-bind path specification (builds)", supported=False),
    Flag("nv", "", help="inject host Nvidia libraries during build for post and test sections", supported=False),
    Flag("rocm", "", help="inject host Rocm libraries during build for post and test sections", supported=False),
]


def check_build_target(dest: str, opts: dict[str, Any]) -> None:
    """build.go checkBuildTarget (non-interactive: no prompt)."""
    path = os.path.abspath(dest)
    if not os.path.lexists(path):
        return
    force = opts["force"]
    if os.path.isdir(path) and not force:
        entries = os.listdir(path)
        if entries and len({"proc", "dev", "sys", ".singularity.d"} & set(entries)) != 4:
            Log.fatal(f"While checking build target: {path} is not empty and is not an Apptainer sandbox, "
                      "check its content first and use --force if you want to overwrite it")
    if not force:
        Log.fatal(f"While checking build target: build target '{os.path.basename(path)}' already exists. "
                  "Use --force if you want to overwrite it")


def place_image(out: str, doc: dict[str, Any], sandbox: bool) -> None:
    path = Path(os.path.abspath(out))
    if not path.parent.is_dir():
        Log.fatal(f"While performing build: while creating SIF: open {path}: no such file or directory")
    if sandbox:
        if path.exists() and not path.is_dir():
            path.unlink()
        elif path.is_dir():
            shutil.rmtree(path)
        path.mkdir()
    elif path.is_dir():
        Log.fatal(f"While performing build: while creating SIF: open {path}: is a directory")
    write_image(path, doc, sandbox)


def uri_image_doc(tool: Tool, uri: str) -> dict[str, Any]:
    """A stand-in image "fetched" from ``uri`` (no network): labels record the URI,
    the content is derived from it."""
    transport, _, ref = uri.partition(":")
    labels = build_labels(tool, {"bootstrap": transport, "from": ref.lstrip("/")}, False)
    labels["org.scalesweep.standin.pulled_from"] = uri
    labels["org.scalesweep.standin.content_sha256"] = hashlib.sha256(uri.encode()).hexdigest()
    # the image of a program with a stand-in (oras://.../ollama:0.9.0) has that program
    name = ref.rstrip("/").rsplit("/", 1)[-1].split(":")[0].split("@")[0].lower()
    provides = [p for p in PROVIDABLE if p in name]
    return {"standin": True, "format": STANDIN_FORMAT, "tool": tool.name, "tool_version": tool.version,
            "bootstrap": transport, "from": ref.lstrip("/"), "header": {}, "deffile": "", "sections": {},
            "labels": labels, "environment": "", "runscript": "", "build_args": {}, "fakeroot": False,
            "files": [], "provides": provides}


def cmd_build(tool: Tool, args: list[str], rec: dict[str, Any]) -> int:
    opts, pos = parse_flags(args, BUILD_FLAGS, interspersed=True)
    if len(pos) != 2:
        raise FlagError(f"accepts 2 arg(s), received {len(pos)}")
    dest, spec = pos
    rec.update(out=os.path.abspath(dest), spec=spec, fakeroot=opts["fakeroot"], sandbox=opts["sandbox"])
    check_build_target(dest, opts)
    build_args = read_build_args(opts["build-arg"], opts["build-arg-file"])
    rec["build_args"] = build_args

    # A URI (docker://...) or an existing image: no definition file (build.go MakeAllDefs).
    transport = spec.split(":", 1)[0] if ":" in spec else ""
    if transport in VALID_URIS:
        if transport not in PULL_TRANSPORTS:
            raise Unsupported(f"building from {transport}: is not supported by the stand-in")
        Log.info("Starting build...")
        doc = uri_image_doc(tool, spec)
        doc["fakeroot"] = opts["fakeroot"]
        place_image(dest, doc, opts["sandbox"])
        Log.info(f"Build complete: {dest}")
        return 0
    if os.path.isdir(spec) or _looks_like_image(spec):
        image = load_image(spec, "Unable to build from")
        Log.info("Starting build...")
        place_image(dest, dict(image.doc), opts["sandbox"])
        Log.info(f"Build complete: {dest}")
        return 0

    try:
        text = Path(spec).read_text()
    except OSError as exc:
        Log.fatal(f"Unable to build from {spec}: unable to open file {spec}: open {spec}: {os.strerror(exc.errno).lower()}")

    # build.go MakeAllDefs: parse every stage as written (structural errors first), then
    # fill each stage's {{ VAR }} from the build args and *that stage's* %arguments,
    # then parse the result again.
    stages: list[tuple[str, Definition]] = []
    for chunk in split_stages(text):
        try:
            stages.append((chunk, parse_definition(chunk)))
        except EmptyDefinition:
            continue
        except ValueError as exc:
            Log.fatal(f"Unable to build from {spec}: while parsing definition: {spec}: {exc}")
    if not stages:
        Log.fatal(f"Unable to build from {spec}: while parsing definition: {spec}: no stages found in definition file")
    consumed: set[str] = set()
    revised: list[tuple[str, Definition, dict[str, str]]] = []
    for chunk, parsed in stages:
        defaults = read_defaults(parsed)
        try:
            substituted, used = substitute(chunk, build_args, defaults)
        except KeyError as exc:
            Log.fatal(f"Unable to build from {spec}: build var {exc.args[0]} is not defined through either "
                      "--build-arg (--build-arg-file) or 'arguments' section")
        consumed |= used
        try:
            revised.append((substituted, parse_definition(substituted), defaults))
        except ValueError as exc:
            Log.fatal(f"Unable to build from {spec}: {exc}")
    unused = [k for k in build_args if k not in consumed]
    if unused:
        if opts["warn-unused-build-args"]:
            Log.warning(f"Unused build args: {' '.join(unused)}")
        else:
            Log.fatal(f"unused build args: {' '.join(unused)}. Use option --warn-unused-build-args "
                      "to show a warning instead of a fatal message")
    full_raw = "".join(sub for sub, _, _ in revised)
    names: list[str] = []
    for _, stage, _ in revised:
        header = stage.header
        if not header.get("bootstrap"):
            Log.fatal(f"Unable to build from {spec}: no bootstrap specification found")
        if header["bootstrap"] in ("docker", "localimage", "oras", "library", "shub") and not header.get("from"):
            Log.fatal("While performing build: conveyor failed to get: no from field in definition file: "
                      f"{header['bootstrap']}")
        names.append(header.get("stage", ""))

    Log.info("Starting build...")
    files = []
    rootfs = f"/tmp/build-temp-{os.getpid()}/rootfs"
    for index, (_, stage, _) in enumerate(revised):
        for src, dst, from_stage in stage.files:
            if from_stage:  # from an earlier stage's root file system: recorded
                if from_stage not in names[:index]:
                    Log.fatal(f"While performing build: unable to copy files from stage to container fs: "
                              f"stage {from_stage} was not found")
                files.append({"stage": names[index], "from_stage": from_stage, "src": src, "dst": dst or src})
                continue
            # from the host, relative to the current directory (files/copy.go:
            # "cp -fLr SRC ROOTFS/DST" after bash-like glob expansion)
            for m in sorted(glob.glob(src)) or [src]:
                if not os.path.exists(m):
                    target = rootfs + ((dst or src) if (dst or src).startswith("/") else "/" + (dst or src))
                    Log.fatal(f"While performing build: unable to copy files from host to container fs: while "
                              f"copying [{m}] to {target}: [-fLr {m} {target}]: /usr/bin/cp: cannot stat '{m}': "
                              "No such file or directory")
                Log.info(f"Copying {m} to {dst or src}")
                files.append({"stage": names[index], "src": os.path.abspath(m), "dst": dst or src,
                              "sha256": _tree_digest(m)})
        if stage.sections.get("post", "").strip():
            Log.info(f"Running post scriptlet{' of stage ' + names[index] if names[index] else ''} "
                     "(recorded by the stand-in, not run)")
    # the image is the last stage's: its header, labels, environment, scripts
    final = revised[-1][1]
    header = final.header
    labels = dict(final.labels)
    labels.update(build_labels(tool, header, bool(final.sections.get("help", "").strip())))
    Log.info("Creating SIF file..." if not opts["sandbox"] else "Creating sandbox directory...")
    resolved: dict[str, str] = {}
    for _, _, defaults in revised:
        resolved.update(defaults)
    resolved.update({k: v for k, v in build_args.items() if k in consumed})
    doc = {
        "standin": True, "format": STANDIN_FORMAT, "tool": tool.name, "tool_version": tool.version,
        "bootstrap": header.get("bootstrap"), "from": header.get("from", ""), "header": header,
        "stages": [{"stage": st.header.get("stage", ""), "bootstrap": st.header.get("bootstrap", ""),
                    "from": st.header.get("from", "")} for _, st, _ in revised],
        "deffile": full_raw, "sections": final.sections, "labels": labels,
        "environment": final.sections.get("environment", ""),
        "runscript": final.sections.get("runscript", ""),
        "startscript": final.sections.get("startscript", ""),
        "test": final.sections.get("test", ""), "help": final.sections.get("help", ""),
        "build_args": resolved, "fakeroot": opts["fakeroot"], "files": files,
        "provides": provided_programs(full_raw), "built_from": os.path.abspath(spec),
    }
    place_image(dest, doc, opts["sandbox"])
    Log.info(f"Build complete: {dest}")
    rec["labels"] = labels
    return 0


def _looks_like_image(path: str) -> bool:
    try:
        with open(path, "rb") as fh:
            return fh.read(len(SIF_LAUNCH)) == SIF_LAUNCH.encode()
    except OSError:
        return False


def _tree_digest(path: str) -> str:
    h = hashlib.sha256()
    p = Path(path)
    for f in sorted([p] if p.is_file() else [x for x in p.rglob("*") if x.is_file()]):
        h.update(str(f.relative_to(p) if f != p else f.name).encode())
        h.update(f.read_bytes())
    return h.hexdigest()


PULL_FLAGS = [
    Flag("force", "F", help="overwrite an image file if it exists"),
    Flag("name", "", "value", "specify a custom image name"),
    Flag("dir", "", "value", "download images to the specific directory"),
    Flag("disable-cache", "", help="do not use or create cached images/blobs"),
    Flag("arch", "", "value", "architecture to pull from library"),
    Flag("sandbox", "", help="build image as sandbox format (chroot directory structure)", supported=False),
]


def pull_name(uri: str) -> str:
    """uri.go GetName: docker://ubuntu:22.04 -> ubuntu_22.04.sif; https://h/x.sif -> x.sif."""
    transport, _, ref = uri.partition(":")
    parts = ref.lstrip("/").split("/")
    if transport in ("http", "https"):
        return parts[-1]
    container, tag = parts[-1], "latest"
    if ":" in container:
        container, tag = container.split(":", 1)
        tag = tag.split(",")[0]
    return f"{container}_{tag}.sif"


def cmd_pull(tool: Tool, args: list[str], rec: dict[str, Any]) -> int:
    opts, pos = parse_flags(args, PULL_FLAGS, interspersed=True)
    if not 1 <= len(pos) <= 2:
        raise FlagError(f"accepts between 1 and 2 arg(s), received {len(pos)}")
    uri = pos[-1]
    transport, sep, ref = uri.partition(":")
    if not sep:
        transport, ref = "", uri
    if not ref:
        Log.fatal(f"Bad URI {uri}")
    out = opts["name"] or (pos[0] if len(pos) == 2 else None)
    if out is None:
        if not transport:
            Log.fatal("No transport type URI supplied")
        out = pull_name(uri)
    if opts["dir"]:
        out = os.path.join(opts["dir"], out)
    rec.update(uri=uri, out=os.path.abspath(out))
    if os.path.lexists(out) and not opts["force"]:
        Log.fatal(f'Image file already exists: "{out}" - will not overwrite')
    if not transport:
        Log.fatal("No transport type URI supplied")
    if transport not in PULL_TRANSPORTS:
        if transport in VALID_URIS:
            raise Unsupported(f"pulling from {transport}: is not supported by the stand-in")
        Log.fatal(f"Unsupported transport type: {transport}")
    if transport == "docker":
        Log.info("Converting OCI blobs to SIF format")
        Log.info("Starting build...")
    Log.info(f"scalesweep stand-in: no network, image content derived from {uri}")
    doc = uri_image_doc(tool, uri)
    if Path(out).is_dir():
        shutil.rmtree(out)
    write_image(Path(os.path.abspath(out)), doc, sandbox=False)
    if transport == "docker":
        Log.info("Creating SIF file...")
    return 0


# --------------------------------------------------------------------------- inspect


INSPECT_FLAGS = [
    Flag("json", "j", help="print structured json instead of sections"),
    Flag("labels", "l", help="show the labels for the image (default)"),
    Flag("deffile", "d", help="show the Apptainer definition file that was used to generate the image"),
    Flag("environment", "e", help="show the environment settings for the image"),
    Flag("runscript", "r", help="show the runscript for the image"),
    Flag("startscript", "s", help="show the startscript for the image"),
    Flag("test", "t", help="show the test script for the image"),
    Flag("helpfile", "H", help="inspect the runscript helpfile, if it exists"),
    Flag("all", "", help="show all available data (imply --json option)"),
    Flag("list-apps", "", help="list all apps in a container"),
    Flag("app", "", "value", "inspect a specific app", supported=False),
]


def go_json(obj: Any) -> str:
    """json.MarshalIndent(obj, "", "\\t") as Go writes it (HTML characters escaped)."""
    text = json.dumps(obj, indent="\t", ensure_ascii=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def cmd_inspect(tool: Tool, args: list[str], rec: dict[str, Any]) -> int:
    opts, pos = parse_flags(args, INSPECT_FLAGS, interspersed=True)
    if len(pos) != 1:
        raise FlagError(f"accepts 1 arg(s), received {len(pos)}")
    image = load_image(pos[0], "Failed to open image")
    rec["image"] = image.path
    if opts["all"]:
        opts["json"] = True
    picked = ("deffile", "runscript", "startscript", "test", "helpfile", "environment")
    default_labels = not any(opts[k] for k in (*picked, "list-apps"))
    full = inspect_attributes(image)
    attrs: dict[str, Any] = {}
    if opts["labels"] or default_labels or opts["all"]:
        attrs["labels"] = full["labels"]
    for key in picked:
        if opts[key] or opts["all"]:
            attrs[key] = full[key]
    if opts["json"]:
        order = ("environment", "labels", "runscript", "test", "helpfile", "deffile", "startscript")
        # omitempty fields; Go writes map keys sorted
        data = {k: (dict(sorted(attrs[k].items())) if isinstance(attrs[k], dict) else attrs[k])
                for k in order if attrs.get(k)}
        print(go_json({"data": {"attributes": data}, "type": "container"}))
        return 0
    for key in ("deffile", "runscript", "startscript", "test", "helpfile"):
        if attrs.get(key):
            print(attrs[key])
    for name, text in sorted((attrs.get("environment") or {}).items()):
        print(f"=== {name} ===\n{text}\n")
    for key, value in sorted((attrs.get("labels") or {}).items()):
        print(f"{key}: {value}")
    return 0


# --------------------------------------------------------------------------- exec / run


EXEC_FLAGS = [
    Flag("bind", "B", "list", "a user-bind path specification: src[:dest[:opts]]"),
    Flag("nv", "", help="enable Nvidia support"),
    Flag("rocm", "", help="enable experimental Rocm support"),
    Flag("pwd", "", "value", "initial working directory for payload process inside the container"),
    Flag("workdir", "W", "value", "working directory to be used for /tmp and /var/tmp (if -c/--contain was also used)"),
    Flag("cleanenv", "e", help="clean environment before running container"),
    Flag("contain", "c", help="use minimal /dev and empty other directories (e.g. /tmp and $HOME)"),
    Flag("env", "", "list", "pass environment variable to contained process"),
    Flag("no-home", "", help="do NOT mount users home directory if /home is not the current working directory"),
    Flag("writable-tmpfs", "", help="makes the file system accessible as read-write with non persistent data"),
    Flag("no-eval", "", help="do not shell evaluate env vars or OCI container CMD/ENTRYPOINT/ARGS"),
    Flag("home", "H", "value", "a home directory specification (default: $HOME)"),
    Flag("containall", "C", help="contain not only file systems, but also PID, IPC, and environment", supported=False),
    Flag("mount", "", "list", "a mount specification", supported=False),
    Flag("env-file", "", "list", "pass environment variables from file", supported=False),
    Flag("overlay", "o", "list", "use an overlayFS image", supported=False),
    Flag("writable", "w", help="open the image read-write", supported=False),
    Flag("fakeroot", "f", help="run container with the appearance of running as root", supported=False),
    Flag("userns", "u", help="run container in a new user namespace", supported=False),
    Flag("pid", "p", help="run container in a new PID namespace", supported=False),
    Flag("ipc", "i", help="run container in a new IPC namespace", supported=False),
    Flag("net", "n", help="run container in a new network namespace", supported=False),
    Flag("nvccli", "", help="use nvidia-container-cli for GPU setup", supported=False),
    Flag("no-mount", "", "list", "disable one or more 'mount xxx' options", supported=False),
    Flag("app", "", "value", "set an application to run inside a container", supported=False),
    Flag("scratch", "S", "list", "include a scratch directory within the container", supported=False),
]


@dataclass
class Bind:
    src: str  # absolute host path
    dst: str
    readonly: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {"src": self.src, "dst": self.dst, "mode": "ro" if self.readonly else "rw"}


def parse_bind_specs(specs: list[str]) -> list[Bind]:
    """``src[:dest[:opts]]``, comma-separated (bind.ParseBindPath); dest defaults to src."""
    binds = []
    for spec in specs:
        for item in spec.split(","):
            item = item.strip()
            if not item:
                continue
            parts = item.split(":")
            src = parts[0]
            dst = parts[1] if len(parts) > 1 and parts[1] else src
            readonly = False
            for opt in parts[2:] if len(parts) > 2 else []:
                for o in opt.split(","):
                    if o == "ro":
                        readonly = True
                    elif o == "rw":
                        readonly = False
                    elif o:
                        Log.fatal(f"While setting bind mount configuration: {item}: invalid bind option {o}")
            if not dst.startswith("/"):
                Log.fatal(f"While setting bind mount configuration: invalid bind path {item}: "
                          "destination must be an absolute path")
            binds.append(Bind(os.path.abspath(os.path.expanduser(src)), os.path.normpath(dst), readonly))
    return binds


ALWAYS_PASS = {"TERM", "http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "no_proxy", "NO_PROXY",
               "all_proxy", "ALL_PROXY", "ftp_proxy", "FTP_PROXY"}
ALWAYS_OMIT = {"HOME": False, "PATH": False, "APPTAINER_SHELL": False, "APPTAINER_APPNAME": False,
               "SINGULARITY_SHELL": False, "SINGULARITY_APPNAME": False, "LD_LIBRARY_PATH": True}


def container_env(tool: Tool, host: dict[str, str], cli_env: list[str], cleanenv: bool,
                  home: str, image_path: str) -> tuple[dict[str, str], dict[str, str]]:
    """util/env/create.go SetContainerEnv: (the process environment, the overrides the
    inject script exports). ``--env K=V`` becomes APPTAINERENV_K (launcher_linux.go)."""
    host = dict(host)
    for item in cli_env:
        for kv in item.split(","):
            key, sep, value = kv.partition("=")
            if not sep or not key:
                Log.warning(f"Ignore environment variable {kv}: variable name missing")
                continue
            host[tool.env_prefixes[0] + key] = value
    env: dict[str, str] = {}
    if cleanenv:
        env["LANG"] = "C"
    overrides: dict[str, str] = {}
    for prefix in tool.env_prefixes:  # the first prefix wins
        for k, v in host.items():
            if not k.startswith(prefix) or len(k) == len(prefix):
                continue
            key = k[len(prefix):]
            key = {"PREPEND_PATH": "SING_USER_DEFINED_PREPEND_PATH", "APPEND_PATH": "SING_USER_DEFINED_APPEND_PATH",
                   "PATH": "SING_USER_DEFINED_PATH"}.get(key, key)
            if ALWAYS_OMIT.get(key) is False:
                Log.warning(f"Overriding {key} environment variable with {k} is not permitted")
                continue
            if key in overrides:
                if overrides[key] != v:
                    Log.warning(f"Skipping environment variable [{k}={v}], {key} is already overridden "
                                f"with different value [{overrides[key]}]")
                continue
            overrides[key] = v
    if tool.name == "apptainer":
        for k in host:
            if k.startswith("SINGULARITYENV_") and ("APPTAINERENV_" + k[len("SINGULARITYENV_"):]) not in host:
                Log.info(f"Environment variable {k} is set, but APPTAINERENV_{k[len('SINGULARITYENV_'):]} is preferred")
    for k, v in host.items():
        if k.startswith((*tool.cli_prefixes, *tool.env_prefixes)):
            continue  # APPTAINER_* settings are not forwarded, the overrides are injected
        if (k in ALWAYS_PASS or (k not in ALWAYS_OMIT and not cleanenv)) and k not in overrides:
            env[k] = v
    env["HOME"] = home
    env["PATH"] = DEFAULT_PATH
    for prefix in tool.container_vars:
        env[prefix + "CONTAINER"] = image_path
        env[prefix + "NAME"] = os.path.basename(image_path)
    return env, overrides


def unshare_prefix() -> list[str]:
    """A private mount namespace: as root directly, else inside a user namespace."""
    unshare = shutil.which("unshare") or "/usr/bin/unshare"
    if os.geteuid() == 0:
        return [unshare, "--mount", "--propagation", "private"]
    return [unshare, "--user", "--map-root-user", "--mount", "--propagation", "private"]


FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1,
                     signal.SIGUSR2, signal.SIGCONT, signal.SIGALRM)


def cmd_exec(tool: Tool, args: list[str], rec: dict[str, Any], run: bool = False) -> int:
    opts, pos = parse_flags(args, EXEC_FLAGS, interspersed=False)
    need = 1 if run else 2
    if len(pos) < need:
        raise FlagError(f"requires at least {need} arg(s), only received {len(pos)}")
    image = load_image(pos[0])
    command = pos[1:]
    if run:
        if not image.doc.get("runscript"):
            raise Unsupported("'run' of an image without %runscript is not supported by the stand-in")
        command = ["/bin/sh", f"{SINGULARITY_D}/runscript", *command]
    rec.update(image=image.path, command=command)

    specs = list(opts["bind"])
    for key in ("BIND", "BINDPATH"):  # env binds are appended (cmdline EnvAppendValue)
        value = tool.cli_env(key)
        if value:
            specs.append(value)
    binds = parse_bind_specs(specs)
    rec["binds"] = [b.as_dict() for b in binds]
    containlibs = [p for p in (tool.cli_env("CONTAINLIBS") or "").split(",") if p.strip()]
    rec["containlibs"] = containlibs
    gpu = [f for f in ("nv", "rocm") if opts[f]]
    rec["gpu_flags"] = [f"--{f}" for f in gpu]
    if opts["nv"] and opts["rocm"]:
        Log.warning("--nv and --rocm cannot be used together. Only --nv will be used.")
    # launcher_linux.go addGPUBinds on a host without the driver stack
    for flag, device, platform in (("nv", "/dev/nvidiactl", "nv"), ("rocm", "/dev/kfd", "rocm")):
        if opts[flag] and not os.path.exists(device):
            Log.warning(f"Could not find any {platform} files on this host!")
            Log.warning(f"Could not find any {platform} libraries on this host!")

    # Sources are checked when mounted (container_linux.go mountGeneric): the libraries
    # (files tag) and the user binds; both before anything runs.
    for lib in containlibs:
        if not os.path.exists(lib):
            Log.fatal(f"container creation failed: while mounting {lib}: mount source {lib} doesn't exist")
    for b in binds:
        if not os.path.exists(b.src):
            Log.fatal(f"container creation failed: while mounting {b.src}: mount source {b.src} doesn't exist")

    home = opts["home"] or os.environ.get("HOME", "/root")
    env0, overrides = container_env(tool, dict(os.environ), opts["env"], opts["cleanenv"], home, image.path)
    rec["env_set"] = overrides
    rec["cleanenv"] = opts["cleanenv"]
    try:
        host_cwd = os.getcwd()
    except OSError:
        host_cwd = home
    cwd = opts["pwd"] or (home if opts["contain"] else host_cwd)
    rec["pwd"] = cwd
    venv = os.environ.get("SCALESWEEP_STANDIN_VENV") or sys.prefix
    spec = {
        "tool": tool.name, "image": image.path, "doc": {k: image.doc.get(k) for k in ("environment", "runscript", "provides")},
        "binds": [b.as_dict() for b in binds], "containlibs": [os.path.abspath(p) for p in containlibs],
        "env0": env0, "overrides": overrides, "cwd": cwd, "custom_cwd": bool(opts["pwd"]), "home": home,
        "contain": opts["contain"], "workdir": opts["workdir"], "venv": venv, "no_eval": opts["no-eval"],
        "command": command, "python": sys.executable, "standins": str(HERE), "ps1": tool.ps1,
        "log_level": Log.level,
    }
    read_fd, write_fd = os.pipe()  # both close-on-exec; the read end is handed on
    os.set_inheritable(read_fd, True)
    cmd = [*unshare_prefix(), sys.executable, str(Path(__file__).resolve()), "--inside", str(read_fd)]
    # The helper gets a bare environment: what the command sees is in the spec. Inherited
    # descriptors stay open for the command, as with the real starter (srun's PMI_FD).
    helper_env = {"PATH": DEFAULT_PATH, "LC_ALL": "C"}
    try:
        proc = subprocess.Popen(cmd, env=helper_env, close_fds=False)
    except OSError as exc:
        Log.fatal(f"scalesweep stand-in: cannot start {cmd[0]}: {exc}")
    os.close(read_fd)
    with os.fdopen(write_fd, "w") as fh:
        try:
            json.dump(spec, fh)
        except BrokenPipeError:
            pass

    # Stay as the parent (the real starter's master process does) and forward signals.
    def forward(signum: int, _frame: Any) -> None:
        try:
            proc.send_signal(signum)
        except ProcessLookupError:
            pass

    for sig in FORWARDED_SIGNALS:
        signal.signal(sig, forward)
    status = proc.wait()
    for sig in FORWARDED_SIGNALS:
        signal.signal(sig, signal.SIG_DFL)
    if status < 0:  # killed by a signal: die by it too (master_linux.go)
        rec.update(signal=-status, exit_status=128 - status)
        log_invocation(rec)
        rec["_logged"] = True
        sys.stdout.flush()
        sys.stderr.flush()
        os.kill(os.getpid(), -status)
        return 128 - status  # if the signal did not end this process
    return status


# --------------------------------------------------------------------------- inside the namespace

_libc = None


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
        _libc.mount.argtypes = (ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p)
    enc = (lambda s: s.encode() if s is not None else None)
    if _libc.mount(enc(source), enc(target), enc(fstype), flags, enc(data)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {source} -> {target}: {os.strerror(err)}")


MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_REC = 1, 2, 4, 32, 4096, 16384


class Inside:
    """The mounts and the environment of one ``exec``, done in the new mount namespace."""

    def __init__(self, spec: dict[str, Any]):
        self.spec = spec
        self.fds: dict[str, int] = {}
        self.tmpfs_devs: set[int] = set()

    def fd_path(self, path: str) -> str:
        """A path to ``path`` that survives mounts over it (an O_PATH descriptor)."""
        if path not in self.fds:
            self.fds[path] = os.open(path, os.O_PATH | os.O_CLOEXEC)
        return f"/proc/self/fd/{self.fds[path]}"

    def tmpfs(self, target: str) -> None:
        _mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV, "mode=755")
        self.tmpfs_devs.add(os.stat(target).st_dev)

    def shadow(self, directory: str) -> None:
        """A tmpfs over ``directory`` with its entries bound back (so new entries can be
        added to it inside the namespace without touching the host)."""
        entries = sorted(os.listdir(directory))
        base = self.fd_path(directory)
        self.tmpfs(directory)
        for name in entries:
            src = f"{base}/{name}"
            dst = os.path.join(directory, name)
            st = os.lstat(src)
            if stat.S_ISLNK(st.st_mode):
                os.symlink(os.readlink(src), dst)
                continue
            if stat.S_ISDIR(st.st_mode):
                os.mkdir(dst)
            else:
                open(dst, "w").close()
            _mount(src, dst, None, MS_BIND | MS_REC)

    def on_tmpfs(self, path: str) -> bool:
        p = path
        while not os.path.lexists(p):
            p = os.path.dirname(p)
        return os.stat(p).st_dev in self.tmpfs_devs

    def setup_mounts(self) -> None:
        s = self.spec
        # open everything the mounts below could hide
        for b in s["binds"]:
            self.fd_path(b["src"])
        for lib in s["containlibs"]:
            self.fd_path(lib)
        venv = self.fd_path(s["venv"])
        self.shadow("/opt")
        os.makedirs("/opt/venv", exist_ok=True)
        if os.path.islink("/opt/venv") or not os.path.isdir("/opt/venv"):
            raise OSError("/opt/venv on this host is not a directory")
        _mount(venv, "/opt/venv", None, MS_BIND | MS_REC)
        # the stand-in's /.singularity.d: env script, runscript, libs
        sd = Path(SINGULARITY_D)
        (sd / "env").mkdir(parents=True, exist_ok=True)
        (sd / "libs").mkdir(exist_ok=True)
        (sd / "env" / "90-environment.sh").write_text(env_file_text(s["doc"]))
        (sd / "runscript").write_text(runscript_text(s["doc"]))
        for lib in s["containlibs"]:
            os.symlink(lib, sd / "libs" / os.path.basename(lib))
        self.tmpfs("/mnt")
        for d in IMAGE_MOUNT_POINTS:
            os.makedirs(d, exist_ok=True)
        provides = s["doc"].get("provides") or []
        if provides and os.path.isdir("/usr/local/bin"):
            self.shadow("/usr/local/bin")
            for prog in provides:
                wrapper = Path("/usr/local/bin", prog)
                if wrapper.exists():
                    wrapper.unlink()
                wrapper.write_text(f"#!/bin/sh\nexec {shlex.quote(s['python'])} "
                                   f"{shlex.quote(s['standins'] + '/' + prog + '.py')} {prog} \"$@\"\n")
                wrapper.chmod(0o755)
        if s["contain"]:  # private /tmp and /var/tmp: WORKDIR/tmp, WORKDIR/var_tmp or tmpfs
            scratch = {}
            for d, sub in (("/tmp", "tmp"), ("/var/tmp", "var_tmp")):
                if s["workdir"]:
                    os.makedirs(os.path.join(s["workdir"], sub), exist_ok=True)
                    scratch[d] = self.fd_path(os.path.join(s["workdir"], sub))  # before /tmp is covered
            for d in ("/tmp", "/var/tmp"):
                if d in scratch:
                    _mount(scratch[d], d, None, MS_BIND)
                else:
                    self.tmpfs(d)
        for b in s["binds"]:
            dst = b["dst"]
            src_path = self.fd_path(b["src"])
            if not os.path.lexists(dst):
                if not self.on_tmpfs(dst):
                    Log.warning(f"No layer in use (overlay or underlay), check your configuration, "
                                f"{s['tool'].capitalize()} can't create {dst} destination automatically "
                                "without overlay or underlay")
                    Log.fatal(f"container creation failed: while mounting {b['src']}: "
                              f"destination {dst} doesn't exist in container")
                if os.path.isdir(src_path):
                    os.makedirs(dst, exist_ok=True)
                else:
                    os.makedirs(os.path.dirname(dst), exist_ok=True)
                    open(dst, "w").close()
            _mount(src_path, dst, None, MS_BIND | MS_REC)
            if b["mode"] == "ro":
                _mount(None, dst, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_REC)

    def chdir(self) -> str:
        s = self.spec
        try:
            os.chdir(s["cwd"])
            return s["cwd"]
        except OSError as exc:
            if s["custom_cwd"]:
                Log.fatal(f"failed to set working directory: chdir {s['cwd']}: {os.strerror(exc.errno).lower()}")
            try:
                os.chdir(s["home"])
                Log.warning(f"Error changing the container working directory. Using '{s['home']}' instead: {exc}")
                return s["home"]
            except OSError:
                os.chdir("/")
                Log.warning(f"Error changing the container working directory. Using '/' instead: {exc}")
                return "/"

    def environment(self, cwd: str) -> dict[str, str]:
        """action_script.sh: clear, source the image's env scripts and the injected
        overrides, then restore the forwarded variables the image did not set."""
        s = self.spec
        env0: dict[str, str] = s["env0"]
        # clear_env keeps HOME, PWD and the image's name variables; PATH is then the
        # default path (fixpath) when the image's environment is sourced
        names = {p + v for p in ("APPTAINER_", "SINGULARITY_") for v in ("CONTAINER", "NAME")}
        keep = {k: v for k, v in env0.items() if k == "HOME" or k in names}
        start = {**keep, "PWD": cwd, "PATH": DEFAULT_PATH}
        lines = [
            "set +u",
            f'. {SINGULARITY_D}/env/90-environment.sh',
            # 99-base.sh
            (f'if [ -z "${{LD_LIBRARY_PATH:-}}" ]; then LD_LIBRARY_PATH="{LIBS_DIR}"; '
             f'else LD_LIBRARY_PATH="$LD_LIBRARY_PATH:{LIBS_DIR}"; fi'),
            f'if [ -z "${{PS1:-}}" ]; then PS1="{s["ps1"]}"; fi',
            "export LD_LIBRARY_PATH PS1",
            # process_linux.go injectEnvHandler
            f'if ! test -v PATH; then export PATH="{DEFAULT_PATH}"; fi',
        ]
        for key, value in s["overrides"].items():
            if key in ("UID", "GID"):
                continue
            if key == "LD_LIBRARY_PATH" and value != "":
                value = value + ":" + LIBS_DIR
            quoted = shlex.quote(value) if s["no_eval"] else '"' + value.replace('"', '\\"') + '"'
            lines.append(f"export {key}={quoted}")
        lines += [  # 99-runtimevars.sh
            'if [ -n "${SING_USER_DEFINED_PREPEND_PATH:-}" ]; then PATH="${SING_USER_DEFINED_PREPEND_PATH}:${PATH}"; fi',
            'if [ -n "${SING_USER_DEFINED_APPEND_PATH:-}" ]; then PATH="${PATH}:${SING_USER_DEFINED_APPEND_PATH}"; fi',
            'if [ -n "${SING_USER_DEFINED_PATH:-}" ]; then PATH="${SING_USER_DEFINED_PATH}"; fi',
            "unset SING_USER_DEFINED_PREPEND_PATH SING_USER_DEFINED_APPEND_PATH SING_USER_DEFINED_PATH",
            "export PATH",
        ]
        r, w = os.pipe()
        lines.append(f"env -0 >&{w}")  # the result, on a descriptor of its own
        proc = subprocess.Popen(["/bin/bash", "--norc", "--noprofile", "-c", "\n".join(lines)],
                                env=start, pass_fds=(w,))
        os.close(w)
        with os.fdopen(r, "rb") as fh:
            data = fh.read()
        if proc.wait() != 0:
            Log.warning(f"sourcing the image environment failed with status {proc.returncode}")
        result: dict[str, str] = {}
        for item in data.split(b"\0"):
            if b"=" in item:
                k, _, v = item.decode(errors="surrogateescape").partition("=")
                result[k] = v
        for k in ("SHLVL", "_", "OLDPWD"):
            if k not in env0:
                result.pop(k, None)
        # restore_env: forwarded variables the image left undefined; empty ones are unset
        for k, v in env0.items():
            if k not in result:
                result[k] = v
            elif result[k] == "":
                del result[k]
        # set_default_ld_library_path: only the libs directory, and libraries in it ->
        # the system's library directories first (ldconfig -Nv)
        if result.get("LD_LIBRARY_PATH") == LIBS_DIR and s["containlibs"]:
            try:
                out = subprocess.run(["/sbin/ldconfig", "-Nv"], check=False, capture_output=True, text=True).stdout
                dirs = [line.split(":")[0] for line in out.splitlines() if line and not line.startswith("\t")]
                if dirs:
                    result["LD_LIBRARY_PATH"] = ":".join(dirs) + ":" + LIBS_DIR
            except OSError:
                pass
        if not result.get("PS1"):
            result["PS1"] = s["ps1"]
        env_var = "/.singularity.d/env/91-environment.sh"
        result.setdefault("APPTAINER_ENVIRONMENT" if s["tool"] == "apptainer" else "SINGULARITY_ENVIRONMENT", env_var)
        result["SINGULARITY_ENVIRONMENT"] = result.get("APPTAINER_ENVIRONMENT", env_var)
        return result

    def run(self) -> None:
        self.setup_mounts()
        cwd = self.chdir()
        env = self.environment(cwd)
        argv = self.spec["command"]
        exe = argv[0]
        if "/" not in exe:
            found = shutil.which(exe, path=env.get("PATH", DEFAULT_PATH))
            if not found:
                Log.fatal(f'"{exe}": executable file not found in $PATH')
            exe = found
        elif not os.path.exists(exe):
            Log.fatal(f'stat {exe}: no such file or directory')
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            os.execve(exe, argv, env)
        except OSError as exc:
            Log.fatal(f"{exe}: {os.strerror(exc.errno).lower()}")


def inside_main(fd: int) -> int:
    with os.fdopen(fd, "r") as fh:  # closed before the command runs
        spec = json.load(fh)
    Log.level = spec.get("log_level", INFO)
    try:
        Inside(spec).run()
    except Exit as e:
        return e.code
    except OSError as exc:
        Log.emit(FATAL, "FATAL", f"container creation failed: {exc}")
        return 255
    return 255  # not reached: exec


# --------------------------------------------------------------------------- main


GLOBAL_FLAGS = [
    Flag("debug", "d", help="print debugging information (highest verbosity)"),
    Flag("verbose", "v", help="print additional information"),
    Flag("quiet", "q", help="suppress normal output"),
    Flag("silent", "s", help="only print errors"),
    Flag("nocolor", "", help="print without color output (default False)"),
    Flag("version", "", help="version for apptainer"),
    Flag("help", "h", help="help for apptainer"),
    Flag("config", "c", "value", "specify a configuration file (for root or unprivileged installation only)", supported=False),
]

SUBCOMMANDS: dict[str, Callable[..., int]] = {
    "build": cmd_build,
    "pull": cmd_pull,
    "inspect": cmd_inspect,
    "exec": cmd_exec,
    "run": lambda tool, args, rec: cmd_exec(tool, args, rec, run=True),
}
REAL_ONLY = {"shell", "instance", "cache", "capability", "checkpoint", "completion", "config", "delete",
             "help", "key", "keyserver", "oci", "overlay", "plugin", "push", "registry", "remote",
             "run-help", "search", "sif", "sign", "test", "verify"}


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `... | head` ends it quietly, as a Go program
    tool = TOOLS[argv[0]]
    args = argv[1:]
    rec: dict[str, Any] = {"tool": tool.name, "argv": [tool.name, *args]}
    code = 0
    sub = ""
    try:
        # global options come before the subcommand
        i = 0
        while i < len(args) and args[i].startswith("-"):
            i += 1
        opts, _ = parse_flags(args[:i], GLOBAL_FLAGS, interspersed=True)
        rest = args[i:]
        if opts["silent"]:
            Log.level = ERROR
        elif opts["quiet"]:
            Log.level = LOG
        if opts["verbose"]:
            Log.level = VERBOSE
        if opts["debug"]:
            Log.level = DEBUG
        if opts["version"] and not rest:
            print(tool.version_line)
            return 0
        if opts["help"] or not rest:
            print(f"Usage:\n  {tool.name} [global options...] <command>\n\n"
                  f"(scalesweep stand-in: version, build, pull, inspect, exec, run)")
            return 0
        sub, sub_args = rest[0], rest[1:]
        rec["subcommand"] = sub
        if sub == "version":
            print(tool.version)
            return 0
        if sub in SUBCOMMANDS:
            code = SUBCOMMANDS[sub](tool, sub_args, rec)
        elif sub in REAL_ONLY:
            raise Unsupported(f"'{tool.name} {sub}' is not supported by the stand-in")
        else:
            sys.stderr.write(f'Error: unknown command "{sub}" for "{tool.name}"\n'
                             f"Run '{tool.name} --help' for usage.\n")
            code = 1
    except FlagError as exc:
        name = sub or tool.name
        flags = {"build": BUILD_FLAGS, "pull": PULL_FLAGS, "inspect": INSPECT_FLAGS, "exec": EXEC_FLAGS,
                 "run": EXEC_FLAGS}.get(sub, GLOBAL_FLAGS)
        sys.stderr.write(f'Error for command "{name}": {exc}\n\nOptions for {name} command:\n\n'
                         f"{flags_usage(flags)}\n\nRun '{tool.name} --help' for more detailed usage information.\n")
        code = 1
    except Unsupported as exc:
        sys.stderr.write(f"{tool.name} (scalesweep stand-in): {exc}\n")
        code = 2
    except Exit as exc:
        code = exc.code
    finally:
        if not rec.pop("_logged", False):
            rec["exit_status"] = code
            log_invocation(rec)
    return code


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "--inside":
        sys.exit(inside_main(int(sys.argv[2])))
    if len(sys.argv) < 2 or sys.argv[1] not in TOOLS:
        sys.stderr.write("usage: apptainer.py {apptainer|singularity} ARGS... (see tests/standins)\n")
        sys.exit(2)
    sys.exit(main(sys.argv[1:]))
