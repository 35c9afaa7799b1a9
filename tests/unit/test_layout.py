"""Where files live (issue #17): ``scripts/`` holds payloads only, ``tools/`` host tooling.

The rule this file pins:

- **scripts/** holds the payloads: what workflow rules run as jobs, unchanged on a login
  node, a compute node or inside any container runtime (train_cnn.py, infer_llm.py and
  the modules they import, the packages llm_payload/ and cnn_payload/ among them,
  stage_dataset.py, stage_model.py and the generator it runs, make_synthetic_llm.py).
  Every file (in the packages too) is Python, takes its paths as arguments, and imports
  neither Snakemake nor the scalesweep package, with one allowed exception: the modules
  in ``PAYLOAD_SIDE``, the package ``scalesweep.record`` (``scalesweep.record.metrics``:
  the one metrics writer, whose schema the payloads and the workflow share by design;
  ``scalesweep.record.dataset``: the checksum manifests). A payload puts ``<repo>/workflow`` on ``sys.path`` to import them (the repo
  is bound at /mnt/code in a container), so they must stay standard library only and
  import no other scalesweep module; that is checked here too.
- Every payload path that a rule, the Snakefile or the workflow library names (a
  ``scripts/...`` or ``workflow/scripts/...`` string, or a ``script:`` directive's
  ``../scripts/...``) exists.
- **tools/** holds what a person or CI runs on the host (quickstart.sh, test.sh,
  install.sh, build_llama_wheel.sh, slurm-cluster): executable, each saying in its second
  line that it is host tooling. No rule, Snakefile or workflow glue names a file in
  tools/ (the library may mention one in advice text, never as a payload path), and
  nothing tracked refers to a tool by its old ``scripts/`` path.
"""

from __future__ import annotations

import ast
import io
import re
import subprocess
import sys
import tokenize
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = REPO / "scripts"
TOOLS = REPO / "tools"
WORKFLOW = REPO / "workflow"
RULE_FILES = [REPO / "Snakefile", *sorted((WORKFLOW / "rules").glob("*.smk"))]

# scalesweep modules a payload may import (standard library only, checked below).
PAYLOAD_SIDE = {"scalesweep.record"}
FORBIDDEN_TOP = {"snakemake", "scalesweep"}

PAYLOAD_PATH = re.compile(r"(?:\.\./)*(?:workflow/)?scripts/[\w.-]+\.(?:py|sh)")


def payload_files() -> list[Path]:
    """Every file under scripts/, the payload packages' too (bytecode caches aside)."""
    return sorted(p for p in SCRIPTS.rglob("*") if "__pycache__" not in p.relative_to(SCRIPTS).parts
                  and not p.is_dir())


def payload_packages() -> list[Path]:
    return sorted(p for p in SCRIPTS.iterdir() if p.is_dir() and p.name != "__pycache__")


def tool_files() -> list[Path]:
    return sorted(p for p in TOOLS.iterdir() if p.name != "__pycache__")


def imported_modules(tree: ast.AST) -> set[str]:
    """Every module an ``import`` anywhere in the tree names (also inside functions);
    ``from pkg import name`` gives both ``pkg`` and ``pkg.name`` (name may be a module)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
    return found


def violations(source: str) -> list[str]:
    """The imports of a payload that break the rule."""
    bad = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module] if node.module != "scalesweep" else \
                [f"scalesweep.{a.name}" for a in node.names]
        else:
            continue
        for name in names:
            if name.split(".")[0] in FORBIDDEN_TOP and \
                    not any(name == m or name.startswith(m + ".") for m in PAYLOAD_SIDE):
                bad.append(name)
    return bad


def string_tokens(path: Path) -> list[str]:
    """The string literals of a Python or Snakefile-language file, comments left out: an
    f-string gives its literal parts and the strings in its expressions."""
    middle = getattr(tokenize, "FSTRING_MIDDLE", None)  # Python >= 3.12
    out = []
    for tok in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
        if tok.type == middle:
            out.append(tok.string)
        elif tok.type == tokenize.STRING:
            try:
                tree = ast.parse(tok.string.strip(), mode="eval")
            except SyntaxError:
                out.append(tok.string)
                continue
            out += [n.value for n in ast.walk(tree)
                    if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    return out


def test_the_rule_checker_itself():
    assert violations("import snakemake\n") == ["snakemake"]
    assert violations("from snakemake.script import snakemake\n") == ["snakemake.script"]
    assert violations("def f():\n    from scalesweep.plan.config import SCHEMA\n") == ["scalesweep.plan.config"]
    assert violations("import scalesweep\n") == ["scalesweep"]
    assert violations("from scalesweep.record import metrics\n") == []
    assert violations("from scalesweep import record, plan\n") == ["scalesweep.plan"]
    assert violations("from scalesweep.recorder import x\n") == ["scalesweep.recorder"]
    assert violations("from scalesweep.record.metrics import write_metrics\nimport json, torch\n") == []
    assert violations("from scalesweep.record.dataset import sha256_file\nimport llm_engines\n") == []


@pytest.mark.parametrize("path", payload_files(), ids=lambda p: p.relative_to(SCRIPTS).as_posix())
def test_every_file_in_scripts_is_a_payload(path):
    rel = path.relative_to(SCRIPTS).as_posix()
    assert path.is_file() and path.suffix == ".py", \
        f"scripts/{rel}: scripts/ holds Python payloads only; host tooling goes to tools/"
    assert violations(path.read_text()) == [], \
        f"scripts/{rel} imports Snakemake or scalesweep beyond {sorted(PAYLOAD_SIDE)}"


@pytest.mark.parametrize("package", payload_packages(), ids=lambda p: p.name)
def test_every_folder_in_scripts_is_a_payload_package(package):
    """A folder of scripts/ is a package the payloads import (scripts/ is on their
    sys.path): it has its __init__.py, and nothing of it runs as a script."""
    assert (package / "__init__.py").is_file(), f"scripts/{package.name}/ has no __init__.py"
    mains = [p.name for p in package.rglob("*.py") if '__name__ == "__main__"' in p.read_text()]
    assert mains == [], f"scripts/{package.name}/: entry points stay in scripts/ itself: {mains}"


def test_no_payload_module_imports_another_modules_private_name():
    """A leading underscore says "this module's own" (issue #41, as tests/unit/test_layers.py
    checks the package): no payload module takes one from another payload module, by
    ``from m import _x`` or through the module, ``m._x``."""
    ours = {p.stem for p in SCRIPTS.glob("*.py")} | {p.name for p in payload_packages()}
    found = []
    for path in (p for p in payload_files() if p.suffix == ".py"):
        tree = ast.parse(path.read_text())
        modules = set()  # local names bound to a payload module (or a name of one)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and \
                    (node.module or "").split(".")[0] in ours:
                found += [f"{path.relative_to(SCRIPTS)}:{node.lineno}: {a.name}" for a in node.names
                          if a.name.startswith("_") and not a.name.endswith("__")]
                modules.update(a.asname or a.name for a in node.names)
            elif isinstance(node, ast.Import):
                modules.update(a.asname or a.name.split(".")[0] for a in node.names
                               if a.name.split(".")[0] in ours)
        found += [f"{path.relative_to(SCRIPTS)}:{n.lineno}: {n.value.id}.{n.attr}" for n in ast.walk(tree)
                  if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
                  and n.value.id in modules and n.attr.startswith("_") and not n.attr.endswith("__")]
    assert found == [], "give these names a public name in their module: " + "; ".join(found)


def test_payload_side_modules_are_standard_library_only():
    stdlib = set(sys.stdlib_module_names) | {"__future__"}
    package = WORKFLOW / "scalesweep"
    files = [package / "__init__.py"] + [p for side in sorted(PAYLOAD_SIDE)
                                         for p in sorted((package / side.split(".", 1)[1]).rglob("*.py"))]
    assert len(files) > 3
    for path in files:
        # `from pathlib import Path` also gives "pathlib.Path": only the top name counts
        outside = sorted(m for m in imported_modules(ast.parse(path.read_text()))
                         if m.split(".")[0] not in stdlib
                         and not any(m == s or m.startswith(s + ".") for s in PAYLOAD_SIDE))
        assert outside == [], f"{path.relative_to(REPO)} (imported by payloads) imports {outside}"


def test_payloads_named_by_the_workflow_exist():
    named = {}
    for smk in RULE_FILES:
        for s in string_tokens(smk):
            if PAYLOAD_PATH.fullmatch(s):
                # a script: directive is relative to its rule file; in_repo() paths to the repo
                target = (smk.parent / s) if s.startswith("../") else (REPO / s)
                named[f"{smk.relative_to(REPO)}: {s}"] = target.resolve()
    for py in sorted((WORKFLOW / "scalesweep").rglob("*.py")):
        for s in string_tokens(py):
            if PAYLOAD_PATH.fullmatch(s) and not s.startswith("../"):
                named[f"{py.relative_to(REPO)}: {s}"] = REPO / s
    assert any(str(t).startswith(str(SCRIPTS) + "/") for t in named.values()), \
        "found no scripts/ payload named by the workflow: the pattern no longer matches"
    missing = sorted(k for k, t in named.items() if not t.is_file())
    assert missing == [], f"payload paths that do not exist: {missing}"


@pytest.mark.parametrize("path", tool_files(), ids=lambda p: p.name)
def test_every_tool_is_host_tooling(path):
    lines = path.read_text().splitlines()
    assert path.is_file() and lines[0].startswith("#!"), f"tools/{path.name}: no shebang"
    assert path.stat().st_mode & 0o111, f"tools/{path.name} is not executable"
    assert lines[1].startswith("# Host tooling (tools/, not a payload)"), \
        f"tools/{path.name}: its second line must say it is host tooling"


def test_no_rule_runs_a_tool():
    tools = [p.name for p in tool_files()]
    assert tools, "tools/ is empty"
    mention = re.compile(r"(?<![\w/.-])tools/(?:%s)\b" % "|".join(map(re.escape, tools)))
    glue = RULE_FILES + sorted((WORKFLOW / "scripts").glob("*.py"))
    found = [f"{f.relative_to(REPO)}: {s!r}" for f in glue for s in string_tokens(f)
             if mention.search(s)]
    # the library may advise a person to run a tool, but never use one as a payload path
    found += [f"{f.relative_to(REPO)}: {s!r}"
              for f in sorted((WORKFLOW / "scalesweep").rglob("*.py"))
              for s in string_tokens(f) if mention.fullmatch(s.strip())]
    assert found == [], f"the workflow names host tooling as a payload: {found}"


def test_no_reference_to_a_tool_by_its_old_path():
    try:
        listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                                cwd=REPO, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    # moved tools, and what issue #17 removed: the image builder (now `scalesweep
    # build-image`) and Frontier's build-args file (now build_args in sites/frontier.yaml)
    old = re.compile(r"\bscripts/(?:%s|build_image\.py)\b|\bcontainers/apptainer/frontier\.args\b"
                     % "|".join(re.escape(p.name) for p in tool_files()))
    stale = []
    for rel in listed.splitlines():
        path = REPO / rel
        if path == Path(__file__).resolve() or not path.is_file() or rel == "BENCHMARKS.md":
            continue
        try:
            text = path.read_text()
        except (UnicodeDecodeError, OSError):
            continue
        stale += [f"{rel}:{n}" for n, line in enumerate(text.splitlines(), 1) if old.search(line)]
    assert stale == [], f"still naming scripts/<tool> (now tools/<tool>): {stale}"
