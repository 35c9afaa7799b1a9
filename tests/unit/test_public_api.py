"""Only Snakemake's documented interface in the workflow (issue #17).

The Snakefile, the rule files and the scripts may use the Snakefile language, ``config``,
``snakemake.utils``, ``WorkflowError`` and the attributes of ``workflow`` that Snakemake's
documentation names; a script may use the ``snakemake`` object's documented attributes.
Anything else (a private module or name, a settings object, a resource evaluator, a
function's ``__signature__`` set for Snakemake to find) can change or vanish in any
Snakemake release without notice, and the workflow would break silently.

The files are read with Python's tokenizer (a Snakefile tokenizes as Python does), so
comments and plain strings never count; the expressions inside f-strings do.
"""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

import pytest

from conftest import REPO

# `workflow.<name>` the Snakemake documentation names (snakemake.readthedocs.io).
DOCUMENTED_WORKFLOW = {
    # "Snakefiles and rules", Threads: `threads: workflow.cores * 0.75`
    "cores",
    # "Snakefiles and rules", Accessing auxiliary source files; FAQ on relative paths
    "source_path",
}
# Not in the documentation, and kept where named: the directory of the Snakefile being
# read (common.smk's own), the one anchor to the tree (its package, scripts and the files
# config paths name), which holds where the workflow is a module of another Snakefile
# (workflow.basedir is the main Snakefile's directory). workflow.source_path() is the
# documented way to a *file* next to a Snakefile, but it hands out a copy in Snakemake's
# source cache: it cannot name a directory to import from, and the docs rule it out for
# params (the path changes between runs).
TOLERATED_WORKFLOW = {
    "current_basedir": {"workflow/rules/common.smk"},
}
# What a Snakefile may import from Snakemake (None: any public name of the module).
ALLOWED_IMPORTS = {
    "snakemake.utils": None,  # "Utils": min_version, validate, update_config, ...
    # "Writing workflows" (min_version raises a WorkflowError), "Data-dependent
    # conditional execution" (checkpoints raise IncompleteCheckpointException)
    "snakemake.exceptions": {"WorkflowError", "IncompleteCheckpointException"},
    "snakemake.iocontainers": {"snakemake"},  # "Python": the typed stub of a script's object
}
# The `snakemake` object of a script: directive (Snakefiles and rules, External scripts).
SCRIPT_OBJECT = {"input", "output", "params", "wildcards", "threads", "resources", "log",
                 "config", "rule", "scriptdir"}
# Names Snakemake finds by reflection on the workflow's own objects.
REFLECTED = {"__signature__"}


def workflow_files() -> list[Path]:
    rules = sorted((REPO / "workflow" / "rules").glob("*.smk"))
    scripts = sorted((REPO / "workflow" / "scripts").glob("*.py"))
    return [REPO / "Snakefile", *rules, *scripts]


def _code(tokens):
    """The tokens that are code: comments and line structure dropped; each f-string's
    replacement fields as their own tokens (Python 3.11 keeps an f-string whole)."""
    for tok in tokens:
        if tok.type in (tokenize.COMMENT, tokenize.NL, tokenize.INDENT, tokenize.DEDENT,
                        tokenize.ENCODING, tokenize.ENDMARKER):
            continue
        if tok.type == tokenize.STRING:
            prefix = re.match(r"[A-Za-z]*", tok.string)[0].lower()
            if "f" in prefix:
                for field in re.findall(r"(?<!\{)\{([^{}]+)\}", tok.string):
                    try:
                        inner = tokenize.generate_tokens(io.StringIO(field.strip()).readline)
                        for sub in _code(inner):  # at the f-string's line
                            yield sub._replace(start=tok.start, end=tok.end)
                    except (tokenize.TokenError, IndentationError):
                        pass  # not an expression (a format spec alone): nothing to find
            continue
        yield tok


def _imports(tokens, at):
    """(module, [names]) of the import statement starting at tokens[at]."""
    def dotted(i):
        parts = [tokens[i].string]
        while i + 2 < len(tokens) and tokens[i + 1].string == "." and tokens[i + 2].type == tokenize.NAME:
            parts.append(tokens[i + 2].string)
            i += 2
        return ".".join(parts), i + 1

    if tokens[at].string == "import":  # import a.b [as c], d
        out, i = [], at + 1
        while i < len(tokens) and tokens[i].type == tokenize.NAME:
            module, i = dotted(i)
            out.append((module, []))
            if i < len(tokens) and tokens[i].string == "as":
                i += 2
            if i < len(tokens) and tokens[i].string == ",":
                i += 1
            else:
                break
        return out
    if at + 1 >= len(tokens) or tokens[at + 1].type != tokenize.NAME:
        return []  # `from .x import y` (relative: not Snakemake's)
    module, i = dotted(at + 1)  # from a.b import (c as d, e)
    names = []
    while i < len(tokens) and tokens[i].type != tokenize.NEWLINE:
        tok = tokens[i]
        if tok.type == tokenize.NAME and tok.string != "import" and tokens[i - 1].string != "as":
            if tok.string != "as":
                names.append(tok.string)
        i += 1
    return [(module, names)]


def violations(text: str, path: str) -> list[str]:
    """Every use of Snakemake beyond its documented interface in one file's text."""
    script = path.endswith(".py")
    tokens = list(_code(tokenize.generate_tokens(io.StringIO(text).readline)))
    found = []
    statement_end = -1  # the NEWLINE ending an import statement already read

    def where(tok):
        return f"{path}:{tok.start[0]}"

    for i, tok in enumerate(tokens):
        if i <= statement_end:
            continue
        prev = tokens[i - 1] if i else None
        starts_statement = prev is None or prev.type == tokenize.NEWLINE or prev.string == ":"
        if tok.type == tokenize.NAME and tok.string in ("import", "from") and starts_statement:
            statement_end = next((j for j in range(i, len(tokens))
                                  if tokens[j].type == tokenize.NEWLINE), len(tokens))
            for module, names in _imports(tokens, i):
                if module.split(".")[0] != "snakemake":
                    continue
                allowed = ALLOWED_IMPORTS.get(module, set())
                if module not in ALLOWED_IMPORTS or any(p.startswith("_") for p in module.split(".")):
                    found.append(f"{where(tok)}: imports from {module} (not a documented module)")
                    continue
                for name in names:
                    if name.startswith("_") or (allowed is not None and name not in allowed):
                        found.append(f"{where(tok)}: imports {module}.{name} (not documented)")
            continue
        if tok.type != tokenize.NAME or (prev is not None and prev.string == "."):
            if tok.type == tokenize.NAME and tok.string in REFLECTED:
                found.append(f"{where(tok)}: sets .{tok.string} for Snakemake to find")
            continue
        if i + 2 >= len(tokens) or tokens[i + 1].string != "." or tokens[i + 2].type != tokenize.NAME:
            continue
        attr = tokens[i + 2].string
        if tok.string == "workflow" and not script:
            if attr in DOCUMENTED_WORKFLOW or path in TOLERATED_WORKFLOW.get(attr, ()):
                continue
            found.append(f"{where(tok)}: workflow.{attr} (not documented)")
        elif tok.string == "snakemake":
            if script and attr in SCRIPT_OBJECT:
                continue
            if not script and f"snakemake.{attr}" in ALLOWED_IMPORTS:
                continue
            found.append(f"{where(tok)}: snakemake.{attr} (not documented)")
    return found


def test_the_workflow_uses_only_documented_snakemake():
    files = workflow_files()
    assert len(files) > 10
    found = [v for f in files for v in violations(f.read_text(), str(f.relative_to(REPO)))]
    assert not found, "\n".join(found)


# What issue #17 found in workflow/rules/common.smk (and what a new rule might add): each
# must be caught; the documented forms next to them must not.
CAUGHT = [
    "_defaults = workflow.resource_settings.default_resources\n",
    "from snakemake.resources import Resource\n",
    "from snakemake.resources import (\n    Resource,\n)\n",
    "import snakemake.dag\n",
    "from snakemake.utils import _private\n",
    "from snakemake.exceptions import RuleException\n",
    "func.__signature__ = inspect.signature(func)\n",
    "plugin = workflow.executor_plugin\n",
    "if not workflow.remote_exec:\n    pass\n",
    "update_config(config, dict(workflow.config_settings.config or {}))\n",
    'script = f"{workflow.main_snakefile}/x.py"\n',
    "rule a:\n    params:\n        d=workflow.default_resources,\n    shell:\n        'x'\n",
]
NOT_CAUGHT = [
    "from snakemake.utils import min_version, update_config, validate\n",
    "from snakemake.exceptions import WorkflowError\n",
    "rule a:\n    threads: workflow.cores * 0.75\n    shell:\n        'x'\n",
    'x = workflow.source_path("../resources/a.json")\n',
    "# workflow.resource_settings in a comment\n",
    "doc = 'workflow.remote_exec in a plain string'\n",
    "obj.workflow.remote_exec\n",  # another object's attribute
]


@pytest.mark.parametrize("snippet", CAUGHT)
def test_internals_are_caught(snippet):
    assert violations(snippet, "workflow/rules/new.smk"), snippet


@pytest.mark.parametrize("snippet", NOT_CAUGHT)
def test_documented_uses_pass(snippet):
    assert violations(snippet, "workflow/rules/new.smk") == []


def test_scripts_use_the_documented_snakemake_object():
    ok = 'sys.stderr = open(snakemake.log[0], "w")\nx = snakemake.input.runs\n'
    assert violations(ok, "workflow/scripts/new.py") == []
    assert violations("j = snakemake.job\n", "workflow/scripts/new.py")
    assert violations("from snakemake.script import Snakemake\n", "workflow/scripts/new.py")


def test_the_rule_files_directory_only_where_tolerated():
    assert violations("d = workflow.current_basedir\n", "workflow/rules/common.smk") == []
    assert violations("d = workflow.current_basedir\n", "workflow/rules/new.smk")
    # the main Snakefile's directory is not the tree where scalesweep is a module
    assert violations("d = workflow.basedir\n", "workflow/rules/common.smk")


# --- the package (issue #28): Snakemake's public API only, internals in one adapter -------

PACKAGE = REPO / "workflow" / "scalesweep"
# What a module of the package may import from Snakemake (None: any public name).
PACKAGE_IMPORTS = {
    "snakemake.api": {"SnakemakeApi", "ConfigSettings", "OutputSettings", "ResourceSettings"},
    "snakemake.utils": None,
    "snakemake.exceptions": {"WorkflowError"},
}
# The one module that calls Snakemake beyond it (tests/unit/test_snakemake_adapter.py pins it).
ADAPTER = "workflow/scalesweep/platform/snakemake_adapter.py"
def package_imports(text: str) -> list[tuple[int, str, list[str]]]:
    """(line, module, names) of every import of Snakemake or of a Snakemake plugin or
    interface package (snakemake_*) in one module's text."""
    tokens = list(_code(tokenize.generate_tokens(io.StringIO(text).readline)))
    out = []
    for i, tok in enumerate(tokens):
        prev = tokens[i - 1] if i else None
        starts = prev is None or prev.type in (tokenize.NEWLINE,) or prev.string == ":"
        if tok.type == tokenize.NAME and tok.string in ("import", "from") and starts:
            for module, names in _imports(tokens, i):
                if module.split(".")[0] == "snakemake" or module.startswith("snakemake_"):
                    out.append((tok.start[0], module, names))
    return out


def package_violations(text: str, path: str) -> list[str]:
    if path == ADAPTER:
        return []
    found = []
    for line, module, names in package_imports(text):
        allowed = PACKAGE_IMPORTS.get(module, set())
        for name in names or [""]:
            full = f"{module}.{name}" if name else module
            if module not in PACKAGE_IMPORTS or not name or name.startswith("_") or (
                    allowed is not None and name not in allowed):
                found.append(f"{path}:{line}: imports {full} (not Snakemake's public API: "
                             f"call it through {ADAPTER})")
    return found


def package_files() -> list[Path]:
    return sorted([*PACKAGE.rglob("*.py"), *PACKAGE.rglob("*.smk")])


def test_the_package_uses_only_snakemakes_public_api():
    files = package_files()
    assert len(files) > 30
    found = [v for f in files for v in package_violations(f.read_text(), str(f.relative_to(REPO)))]
    assert not found, "\n".join(found)


def test_package_smk_files_use_only_documented_snakemake():
    found = [v for f in PACKAGE.rglob("*.smk")
             for v in violations(f.read_text(), str(f.relative_to(REPO)))]
    assert not found, "\n".join(found)


@pytest.mark.parametrize("snippet", [
    "from snakemake.cli import parse_config\n",
    "def f():\n    from snakemake.settings.types import ConfigSettings\n",
    "from snakemake.common.configfile import load_configfile\n",
    "import snakemake.workflow\n",
    "from snakemake_interface_executor_plugins.registry import ExecutorPluginRegistry\n",
    "from snakemake.api import _private\n",
])
def test_package_internals_are_caught(snippet):
    assert package_violations(snippet, "workflow/scalesweep/plan/new.py"), snippet
    assert package_violations(snippet, ADAPTER) == []


@pytest.mark.parametrize("snippet", [
    "from snakemake.api import SnakemakeApi, ConfigSettings\n",
    "def f():\n    from snakemake.utils import update_config, validate\n",
    "from snakemake.exceptions import WorkflowError\n",
    "x = 'from snakemake.cli import parse_args'\n",
])
def test_package_public_api_passes(snippet):
    assert package_violations(snippet, "workflow/scalesweep/plan/new.py") == []
