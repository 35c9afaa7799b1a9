"""The package's layers (issue #28): every module of workflow/scalesweep/ sits in one
sub-package, and the sub-packages are layers, bottom to top (``LAYERS``). A module imports
only from its own layer or a lower one, and no two modules import each other, directly or
round a longer cycle (inside one layer too). Imports inside functions count as much as the
ones at the top of a file: a lazy import is still a dependency.

- ``record`` (what a run leaves on disk) imports the standard library only: the payloads
  import it inside containers, with ``<repo>/workflow`` on ``sys.path`` and nothing else.
- ``images`` sits above ``plan``: an image build may use what a campaign's config asks for
  (``plan.imageset`` is the plan's view of the images); nothing in ``plan`` builds one.
- ``cli.py``, ``__main__.py`` and ``__init__.py`` are the only modules outside the layers,
  on top of them (``cli`` finds the commands by name, ``importlib``).

The modules are read with ``ast``, never imported: the check needs nothing installed.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from conftest import REPO

PACKAGE = REPO / "workflow" / "scalesweep"
# bottom to top: a module may import from its own layer and the ones before it
LAYERS = ["record", "measure", "platform", "plan", "images", "run", "analyse", "report",
          "campaign"]
TOP = {"scalesweep", "scalesweep.cli", "scalesweep.__main__"}  # above every layer
STDLIB = set(sys.stdlib_module_names) | {"__future__"}


def module_name(path: Path, package: Path = PACKAGE) -> str:
    parts = list(path.relative_to(package.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules(package: Path = PACKAGE) -> dict[str, Path]:
    """Module name -> file, for every .py file of the package (sub-packages included)."""
    return {module_name(p, package): p for p in sorted(package.rglob("*.py"))
            if "__pycache__" not in p.parts}


def is_package(path: Path) -> bool:
    return path.name == "__init__.py"


def imports(name: str, source: str, known: set[str], package_file: bool = False) -> list[tuple[str, int]]:
    """(imported module, line) for every import in ``source``, module level or inside a
    function. ``from pkg import x`` names the module ``pkg.x`` where that is a module,
    else ``pkg``; relative imports are resolved against ``name``'s package."""
    here = name if package_file else name.rpartition(".")[0]  # the importing package
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here.split(".")
                base = base[:len(base) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            for a in node.names:
                sub = f"{module}.{a.name}"
                found.append((sub if sub in known else module, node.lineno))
    return found


def graph(package: Path = PACKAGE) -> tuple[dict[str, list[tuple[str, int]]], dict[str, Path]]:
    """Module -> (imported module, line) of every import, the package's own and others."""
    files = modules(package)
    known = set(files)
    return {name: imports(name, path.read_text(), known, is_package(path))
            for name, path in files.items()}, files


def layer(name: str) -> int | None:
    """The layer's index (len(LAYERS) on top); None for a module outside every layer."""
    if name in TOP:
        return len(LAYERS)
    parts = name.split(".")
    if len(parts) >= 2 and parts[1] in LAYERS:
        return LAYERS.index(parts[1])
    return None


def own(edges: list[tuple[str, int]]) -> list[tuple[str, int]]:
    return [(m, line) for m, line in edges if m == "scalesweep" or m.startswith("scalesweep.")]


def upward(deps: dict[str, list[tuple[str, int]]]) -> list[str]:
    bad = []
    for name, edges in sorted(deps.items()):
        mine = layer(name)
        for target, line in own(edges):
            theirs = layer(target)
            if mine is not None and theirs is not None and theirs > mine:
                bad.append(f"{name} (layer {LAYERS[mine]}) imports {target} "
                           f"(layer {(LAYERS + ['top'])[theirs]}), line {line}")
    return bad


def cycles(deps: dict[str, list[tuple[str, int]]]) -> list[list[str]]:
    """One cycle per strongly connected component of more than one module (or a module
    importing itself), as the path round it."""
    edges = {n: sorted({t for t, _ in own(e) if t in deps and t != n}) for n, e in deps.items()}
    index, low, stack, on, comps, counter = {}, {}, [], set(), [], [0]

    def strong(v):  # Tarjan, iterative enough for a package of this size
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(comp)

    for v in sorted(edges):
        if v not in index:
            strong(v)
    found = []
    for comp in comps:  # a path round the component: from its first module back to it
        members, start = set(comp), min(comp)
        path, seen = [start], {start}
        while True:
            nxt = next((w for w in edges[path[-1]] if w in members and w not in seen), None)
            if nxt is None or start in edges[path[-1]]:
                break
            path.append(nxt)
            seen.add(nxt)
        found.append(path + [start] if start in edges[path[-1]] else sorted(comp))
    return found


# --- the checker itself -----------------------------------------------------------------

def write(root: Path, files: dict[str, str]) -> Path:
    package = root / "scalesweep"
    for rel, text in {"__init__.py": "", **files}.items():
        path = package / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return package


def test_the_checker_finds_upward_imports_and_cycles(tmp_path):
    package = write(tmp_path, {
        "record/__init__.py": "", "record/metrics.py": "import json\n",
        "run/__init__.py": "", "run/harness.py": "from scalesweep.record import metrics\n",
        "plan/__init__.py": "",
        "plan/sweep.py": "def f():\n    from scalesweep.run.harness import x\n",
        "analyse/__init__.py": "",
        "analyse/a.py": "from . import b\n", "analyse/b.py": "from .c import y\n",
        "analyse/c.py": "def g():\n    from scalesweep.analyse import a\n",
    })
    deps, _ = graph(package)
    assert ("scalesweep.record.metrics", 1) in deps["scalesweep.run.harness"]
    assert upward(deps) == ["scalesweep.plan.sweep (layer plan) imports scalesweep.run.harness "
                            "(layer run), line 2"]
    assert cycles(deps) == [["scalesweep.analyse.a", "scalesweep.analyse.b",
                             "scalesweep.analyse.c", "scalesweep.analyse.a"]]


# --- the package ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def package():
    return graph()


def test_every_module_sits_in_a_layer(package):
    deps, files = package
    outside = sorted(n for n in deps if layer(n) is None)
    assert outside == [], (f"modules outside the layers {LAYERS} (only cli, __main__ and "
                           f"__init__ may sit at the top): {outside}")
    missing = [d for d in LAYERS if not (PACKAGE / d / "__init__.py").is_file()]
    assert missing == [], f"layers without their package: {missing}"


def test_no_module_imports_from_a_higher_layer(package):
    deps, _ = package
    bad = upward(deps)
    assert bad == [], "imports from a higher layer (order: " + " < ".join(LAYERS) + "):\n" + \
        "\n".join(bad)


def test_no_import_cycle(package):
    deps, _ = package
    found = cycles(deps)
    assert found == [], "import cycles:\n" + "\n".join(" -> ".join(c) for c in found)


def test_record_imports_the_standard_library_only(package):
    deps, _ = package
    bad = [f"{n}: {t} (line {line})" for n, edges in sorted(deps.items())
           if layer(n) == 0 for t, line in edges
           if t.split(".")[0] not in STDLIB and not t.startswith("scalesweep.record")]
    assert bad == [], "scalesweep.record is imported inside containers, standard library " \
        "only:\n" + "\n".join(bad)


def test_layer_packages_import_nothing(package):
    deps, _ = package
    bad = {d: deps[f"scalesweep.{d}"] for d in LAYERS if own(deps[f"scalesweep.{d}"])
           or (d == "record" and deps[f"scalesweep.{d}"])}
    assert bad == {}, f"a layer's __init__.py is its docstring only: {bad}"


# --- one job per module (issue #28) -----------------------------------------------------------
# A module does one job, and no module is longer than this: a longer one is two jobs (split
# it by job, as report/figures.py, campaign/cost.py, run/harness.py, plan/config.py,
# analyse/fits.py, report/pages.py and measure/memtimeline.py were), or an exception
# listed here with the reason it stays whole.
MAX_LINES = 500
LONG_MODULES: dict[str, str] = {  # path under workflow/scalesweep/ -> why it stays whole
    "campaign/analysis_cli.py": "one job: the scaling and overhead commands (argparse, "
                                "grouping, printing) that fit and compare share",
}


def test_no_module_over_max_lines(package):
    _, files = package
    long = {p.relative_to(PACKAGE).as_posix(): n for p in files.values()
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    extra = {f: n for f, n in long.items() if f not in LONG_MODULES}
    assert extra == {}, (f"modules over {MAX_LINES} lines (split by job, or list the "
                         f"exception in LONG_MODULES with its reason): {extra}")
    stale = sorted(f for f in LONG_MODULES if f not in long)
    assert stale == [], f"under {MAX_LINES} lines now: take them off LONG_MODULES: {stale}"


# --- no private name across modules (issue #41) -------------------------------------------
# A leading underscore says "this module's own": another module that imports it (or reaches
# it through the module, `style._finish`) depends on what its owner may change at will.

def private(name: str) -> bool:
    """``_y`` or ``__y``, not a dunder such as ``__file__``."""
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_uses(path: Path) -> list[str]:
    """file:line of each private name ``path`` takes from a module of the project: ``from
    scalesweep.x import _y`` (or a relative import), and ``mod._y`` (or ``scalesweep.x._y``
    after ``import scalesweep.x``) through a name bound to a project module."""
    tree = ast.parse(path.read_text())
    modules: set[str] = set()  # local names bound to a project module
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            ours = node.level > 0 or (node.module or "").split(".")[0] == "scalesweep"
            for alias in node.names if ours else ():
                if private(alias.name):
                    found.append(f"{path}:{node.lineno}: {alias.name}")
                modules.add(alias.asname or alias.name)  # a module or a name: checked below
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "scalesweep":
                    modules.add(alias.asname or alias.name.split(".")[0])
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and private(node.attr)):
            continue
        chain, root = [], node.value  # mod._y, or package.module._y
        while isinstance(root, ast.Attribute):
            chain.insert(0, root.attr)
            root = root.value
        if isinstance(root, ast.Name) and root.id in modules:
            found.append(f"{path}:{node.lineno}: {'.'.join([root.id, *chain, node.attr])}")
    return found


def test_no_module_imports_another_modules_private_name():
    roots = [PACKAGE, REPO / "workflow" / "scripts", REPO / "scripts"]
    found = [use for root in roots for path in sorted(root.rglob("*.py"))
             for use in private_uses(path)]
    assert found == [], "give these names a public name in their module: " + "; ".join(found)


def test_the_private_name_check_finds_both_forms(tmp_path):
    mod = tmp_path / "m.py"
    mod.write_text("from scalesweep.report.style import _finish, apply_theme\n"
                   "from scalesweep.report import style as rs\n"
                   "from .sibling import _helper\n"
                   "import os\nimport scalesweep.report.style\n"
                   "rs._theme()\nos._exit\napply_theme()\nrs.__file__\n"
                   "scalesweep.report.style._empty(None)\n")
    assert sorted(u.split(": ")[1] for u in private_uses(mod)) == [
        "_finish", "_helper", "rs._theme", "scalesweep.report.style._empty"]
    assert private_uses(mod)[0].startswith(f"{mod}:1: ")  # file:line
