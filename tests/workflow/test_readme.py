"""Every command and path the README and docs/ name exists and is what they say (issue #27).

Checked by name, without running a campaign:

- every ``scalesweep ...`` command of a code block parses with the console script's own
  argparse (its sub-command, options and values); every ``scalesweep ...`` in running text
  names a real sub-command and real options of it;
- every ``snakemake ...`` command parses with Snakemake's own argument parser (the Slurm
  plugin's ``--slurm-*`` options included); its ``--profile``, ``--configfile`` and
  ``--config`` give a config that validates (``scalesweep.plan.config_read.effective_config``:
  every key in workflow/schemas/config.schema.yaml, the site it names, the profile), and
  a ``results/runs/.../metrics.json`` target is a point of that config's sweep;
- every ``tools/...`` command is an executable tool that takes that sub-command;
- every repository path (in code spans, code blocks and links) exists, placeholders
  (``<name>``, ``*``) matching at least one file; every link into the repository resolves,
  its ``#anchor`` to a heading, and nothing points outside the repository; every file a
  campaign writes (``results/...``, ``logs/...``) is named by the workflow's code;
- every dotted config or site key (``measurement.max_repeats``, ``node.cores``) is in its
  schema; every ``rule x`` is a rule; every ``scalesweep.module.name`` imports;
- the README's layout section names every payload, tool, rule file, site and profile,
  and every module of workflow/scalesweep/ (its sub-packages too) has its line in
  docs/how-it-works.md;
- the README's first screen says what you get and where to read it, with a sample
  verdict line in the exact words the analysis writes, before any detail of a payload.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import importlib
import io
import re
import shlex
from functools import lru_cache
from pathlib import Path

import pytest
import yaml

from conftest import REPO

README = REPO / "README.md"
DOCS = [README, *sorted((REPO / "docs").glob("*.md"))]
# what a campaign writes (outputs of the workflow, not files of the repository)
CAMPAIGN_DIRS = ("results/", "resources/", "logs/", ".snakemake/")
# written by Snakemake or its Slurm plugin, not by this workflow's code
NOT_OURS = {".snakemake/slurm_logs/", ".snakemake/"}
WORKFLOW_SOURCES = [REPO / "Snakefile", *sorted((REPO / "workflow").rglob("*.smk")),
                    *sorted((REPO / "workflow").rglob("*.py"))]
# sample values for the placeholders the docs write in place of a value
PLACEHOLDER_VALUES = {"N": "100", "PCT": "3", "DIR": ".", "NAME|PATH": "local"}


def rel(path: Path) -> str:
    return str(path.relative_to(REPO))


# --- reading markdown ---------------------------------------------------------------------

def split_fences(text: str) -> tuple[str, list[tuple[str, str]]]:
    """(the text outside code blocks, [(language, body)] of its fenced code blocks)."""
    prose, blocks, lang, body, fenced = [], [], "", [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            if fenced:
                blocks.append((lang, "\n".join(body)))
                body = []
            else:
                lang = line.strip()[3:].strip()
            fenced = not fenced
            continue
        (body if fenced else prose).append(line.strip() if fenced else line)
    return "\n".join(prose), blocks


def spans(prose: str) -> list[str]:
    """The inline code spans of ``prose`` (a span may go on over a line break, never past
    its paragraph)."""
    return [s.strip() for para in re.split(r"\n\s*\n", prose)
            for s in re.findall(r"`([^`]+)`", re.sub(r"\s*\n\s*", " ", para))]


def links(prose: str) -> list[str]:
    return re.findall(r"\]\(([^)\s]+)\)", prose)


def block_commands(body: str) -> list[str]:
    """The command lines of a shell code block (continuation lines joined)."""
    return [c.strip() for c in body.replace("\\\n", " ").splitlines() if c.strip()]


@lru_cache(maxsize=None)
def document(path: Path):
    prose, blocks = split_fences(path.read_text())
    return prose, blocks


def all_spans():
    for path in DOCS:
        prose, _ = document(path)
        for s in spans(prose):
            yield path, s


def shell_lines():
    """(file, command line) of every shell code block."""
    for path in DOCS:
        for lang, body in document(path)[1]:
            if lang in ("bash", "sh", "console"):
                for line in block_commands(body):
                    yield path, line


def words(line: str) -> list[str]:
    argv = shlex.split(line, comments=True)
    out = []
    for tok in argv:
        tok = tok.strip("[]")  # [--baseline 4]: an optional part
        if tok:
            out.append(PLACEHOLDER_VALUES.get(tok, tok))
    return out


def test_the_docs_are_found():
    assert README.is_file() and len(DOCS) > 5, DOCS
    assert any(True for _ in shell_lines()) and any(True for _ in all_spans())


# --- scalesweep -------------------------------------------------------------------------

@lru_cache(maxsize=None)
def scalesweep_parser() -> argparse.ArgumentParser:
    from scalesweep.cli import build_parser

    return exact(build_parser())


def exact(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """``parser`` and its sub-commands taking whole option names only: the docs must write
    `--margin-pct`, not an abbreviation argparse would accept."""
    parser.allow_abbrev = False
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                exact(sub)
    return parser


def subparsers() -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in scalesweep_parser()._actions
                  if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def parse(parser: argparse.ArgumentParser, argv: list[str]) -> tuple[argparse.Namespace | None, str]:
    """(namespace, "") or (None, argparse's error message)."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            return parser.parse_args(argv), ""
        except SystemExit:
            return None, err.getvalue().strip().splitlines()[-1]


def scalesweep_block_commands():
    return [(p, line) for p, line in shell_lines() if line.startswith("scalesweep ")]


def test_scalesweep_commands_in_code_blocks_parse():
    found = scalesweep_block_commands()
    assert len(found) >= 10, found
    bad = []
    for path, line in found:
        if words(line)[1:2] == ["run"]:  # every argument is Snakemake's (campaign/deploy.py)
            from scalesweep.campaign.deploy import snakemake_argv

            argv = snakemake_argv(words(line)[2:], here=REPO / "docs")
            args, error = parse(snakemake_parser(), argv[argv.index("-s"):])
            if args is None:
                bad.append(f"{rel(path)}: {line!r}: {error}")
            continue
        args, error = parse(scalesweep_parser(), words(line)[1:])
        if args is None:
            bad.append(f"{rel(path)}: {line!r}: {error}")
            continue
        bad += [f"{rel(path)}: {line!r}: {p}" for p in config_problems(
            getattr(args, "profile", None) or None, getattr(args, "configfile", None) or [],
            getattr(args, "config", None) or [], getattr(args, "site", None))]
    assert bad == [], "\n".join(bad)


def test_scalesweep_commands_in_text_name_real_subcommands_and_options():
    subs = subparsers()
    bad, seen = [], 0
    for path, span in all_spans():
        if not span.startswith("scalesweep "):
            continue
        argv = words(span.replace("...", " "))[1:]
        if not argv:
            continue
        seen += 1
        names = argv[0].split("|")  # `scalesweep overhead|scaling|fit FILE`
        for name in names:
            if name not in subs:
                bad.append(f"{rel(path)}: `{span}`: no sub-command {name!r} (there are {sorted(subs)})")
                continue
            options = subs[name]._option_string_actions
            for tok in argv[1:]:
                if tok == "--":
                    break
                # `--where/--disturbed`: either option
                for opt in tok.split("/") if tok.startswith("--") else [tok]:
                    if opt.startswith("-") and not re.fullmatch(r"-\d.*", opt) \
                            and opt.split("=")[0] not in options:
                        bad.append(f"{rel(path)}: `{span}`: scalesweep {name} has no option {opt}")
    assert seen >= 10 and bad == [], "\n".join(bad)


# --- snakemake --------------------------------------------------------------------------

@lru_cache(maxsize=None)
def snakemake_parser():
    from snakemake.cli import get_argument_parser

    return exact(get_argument_parser())


@lru_cache(maxsize=None)
def _config_problem(profile, configfiles, config_items, site) -> str:
    from scalesweep.plan.config import ConfigError
    from scalesweep.plan.config_read import effective_config

    try:
        config = effective_config(REPO, list(configfiles), list(config_items),
                                  str(REPO / profile) if profile else None)
    except (ConfigError, ValueError) as exc:
        return f"config refused: {exc}"
    if site is not None and not (REPO / "sites" / f"{site}.yaml").is_file() \
            and not (REPO / site).is_file():
        return f"--site {site}: no such site"
    return ""


def config_problems(profile, configfiles, config_items, site=None) -> list[str]:
    problems = []
    if profile and not (REPO / profile / "config.yaml").is_file():
        problems.append(f"--profile {profile}: no {profile}/config.yaml in the repository")
        profile = None
    for f in configfiles:
        if not (REPO / f).is_file():
            problems.append(f"--configfile {f}: no such file in the repository")
    if problems:
        return problems
    problem = _config_problem(profile, tuple(configfiles), tuple(config_items), site)
    return [problem] if problem else []


@lru_cache(maxsize=None)
def sweep_paths(profile, configfiles, config_items) -> set[str]:
    from scalesweep.plan.config_read import effective_config
    from scalesweep.plan.sweep import sweep_points

    config = effective_config(REPO, list(configfiles), list(config_items),
                              str(REPO / profile) if profile else None)
    return {p.path for p in sweep_points(config)}


def snakemake_commands(text_too: bool = False):
    """The ``snakemake`` command lines of the code blocks (and, ``text_too``, of the running
    text's code spans that are whole commands)."""
    found = [(p, line) for p, line in shell_lines() if line.startswith("snakemake ")]
    if text_too:
        found += [(p, s) for p, s in all_spans()
                  if s.startswith("snakemake ") and "..." not in s and "<" not in s
                  and len(s.split()) > 2]  # `snakemake --profile`: an option named, no command
    return found


def test_snakemake_commands_parse_and_their_config_validates():
    found = snakemake_commands(text_too=True)
    assert len(found) >= 12, found
    bad = []
    for path, line in found:
        argv = words(line)[1:]
        args, error = parse(snakemake_parser(), argv)
        where = f"{rel(path)}: {line!r}"
        if args is None:
            bad.append(f"{where}: {error}")
            continue
        profile = args.profile[0] if args.profile else None
        config_items = tuple(args.config or ())
        configfiles = tuple(str(f) for f in (args.configfile or ()))
        problems = config_problems(profile, configfiles, config_items)
        bad += [f"{where}: {p}" for p in problems]
        for target in args.targets or ():
            if problems or not target.endswith("metrics.json"):
                continue
            point = target.removeprefix("results/runs/").rsplit("/", 1)[0]
            if point not in sweep_paths(profile, configfiles, config_items):
                bad.append(f"{where}: {target} is not a point of that sweep")
    assert bad == [], "\n".join(bad)


def test_the_readme_snakemake_commands_plan_the_embedded_default(tmp_path):
    """The README's own `snakemake` commands (the quickstart's and the A/A check's), as dry
    runs of the embedded default in a fresh campaign: each plans its measurements. (The
    Frontier dry run is tests/workflow/test_slurm_profile.py's; a report needs a finished campaign.)"""
    from conftest import run_snakemake

    (tmp_path / "config").symlink_to(REPO / "config")
    planned = {}
    for path, line in snakemake_commands():
        argv = [a for a in words(line)[1:] if a not in ("-n", "--dry-run")]
        if path != README or "--report" in argv or any("frontier" in a for a in argv):
            continue
        argv = [str(REPO / a) if a.startswith("profiles/") else a for a in argv]
        if tuple(argv) in planned:
            continue
        proc = run_snakemake(tmp_path, "-n", *argv, check=False, timeout=300)
        assert proc.returncode == 0, f"{line!r} as a dry run: {proc.stderr[-3000:]}"
        # its measurements: sweep points, or concurrent starts (startup_scale.yaml's target)
        planned[tuple(argv)] = sum(proc.stdout.count(f"rule {r}:")
                                   for r in ("run_point", "startup_scale"))
    assert len(planned) >= 3 and all(planned.values()), planned


# --- tools ------------------------------------------------------------------------------

def test_tool_commands_exist_and_take_their_subcommands():
    bad, seen = [], 0
    for path, line in shell_lines():
        if not line.startswith("tools/"):
            continue
        seen += 1
        argv = words(line)
        tool = REPO / argv[0]
        if not (tool.is_file() and tool.stat().st_mode & 0o111):
            bad.append(f"{rel(path)}: {line!r}: {argv[0]} is not an executable tool")
            continue
        for sub in argv[1:2]:
            if not sub.startswith("-") and sub not in tool.read_text():
                bad.append(f"{rel(path)}: {line!r}: {argv[0]} has no sub-command {sub!r}")
    assert seen >= 4 and bad == [], "\n".join(bad)


# --- paths ------------------------------------------------------------------------------

@lru_cache(maxsize=None)
def tracked_top() -> frozenset[str]:
    return frozenset(p.name for p in REPO.iterdir() if not p.name.startswith(".")
                     and p.name not in ("results", "resources", "logs", "report.html"))


def as_glob(path: str) -> str:
    return re.sub(r"<[^>]*>|\{[^}]*\}", "*", path)


def repo_path_problem(path: str) -> str:
    """'' when ``path`` (repository-relative, maybe with placeholders) exists."""
    path = path.rstrip(".,;:")
    if "..." in path or "$" in path:
        path = path.split("...")[0].split("$")[0]
    pattern = as_glob(path)
    if any(c in pattern for c in "*?["):
        return "" if glob.glob(str(REPO / pattern)) else f"{path}: matches no file"
    return "" if (REPO / pattern).exists() else f"{path}: no such file or directory"


@lru_cache(maxsize=None)
def workflow_text() -> str:
    return "\n".join(p.read_text() for p in WORKFLOW_SOURCES)


def campaign_path_problem(path: str) -> str:
    """'' when the workflow's code names the file a campaign path ends in (or, with a
    placeholder, the last literal directory before it)."""
    path = path.rstrip(".,;:")
    if any(path.startswith(p) for p in NOT_OURS) and path in NOT_OURS:
        return ""
    literal = re.split(r"[<{*]|\.\.\.", path)[0]
    name = literal.rstrip("/").rsplit("/", 1)[-1] if literal != path else \
        path.rstrip("/").rsplit("/", 1)[-1]
    stem = name.rsplit(".", 1)[0]  # results/summary/<name>.csv may be written by name
    if not name or name in workflow_text() or re.search(rf"[\"']{re.escape(stem)}[\"']", workflow_text()):
        return ""
    return f"{path}: no workflow code names {name!r}"


def path_like(token: str) -> str | None:
    """The repository- or campaign-relative path ``token`` is, or None."""
    token = token.strip().rstrip(".,;:")
    if " " in token or token.startswith(("/", "~", "http", "-")) or "://" in token:
        return None
    head = token.split("/", 1)[0]
    if token.startswith(CAMPAIGN_DIRS) or (head in tracked_top() and
                                           ("/" in token or (REPO / token).is_file())):
        return token
    return None


def test_every_path_exists():
    bad, seen = [], 0
    for path, span in all_spans():
        candidates = [span] if path_like(span) else \
            [w for w in re.split(r"[\s,()]+", span) if path_like(w) and "/" in w]
        for cand in candidates:
            cand = path_like(cand)
            seen += 1
            problem = campaign_path_problem(cand) if cand.startswith(CAMPAIGN_DIRS) \
                else repo_path_problem(cand)
            if problem:
                bad.append(f"{rel(path)}: `{span}`: {problem}")
    for path, line in shell_lines():
        for tok in words(line):
            for part in re.split(r"[=,]", tok):
                cand = path_like(part)
                if cand and not cand.startswith(CAMPAIGN_DIRS) and "/" in cand:
                    seen += 1
                    if problem := repo_path_problem(cand):
                        bad.append(f"{rel(path)}: {line!r}: {problem}")
    assert seen >= 100 and bad == [], "\n".join(bad)


def github_anchor(heading: str) -> str:
    text = heading.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    prose, _ = document(path)
    return {github_anchor(m) for m in re.findall(r"^#+ (.+)$", prose, re.M)}


def test_every_link_resolves_inside_the_repository():
    bad, seen = [], 0
    for path in DOCS:
        for target in links(document(path)[0]):
            if re.match(r"[a-z]+://", target):
                continue
            seen += 1
            file, _, anchor = target.partition("#")
            dest = (path.parent / file).resolve() if file else path
            if REPO.resolve() not in dest.parents and dest != REPO.resolve():
                bad.append(f"{rel(path)}: ({target}) points outside the repository")
            elif not dest.exists():
                bad.append(f"{rel(path)}: ({target}) does not exist")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                bad.append(f"{rel(path)}: ({target}): no heading #{anchor} in {dest.name}")
    assert seen >= 20 and bad == [], "\n".join(bad)


def test_no_path_outside_the_repository():
    """Notes and files of the people who wrote the code are not part of the repository."""
    bad = [f"{rel(p)}: {m.group(0)!r}" for p in DOCS
           for m in re.finditer(r"(?:\.\./)+(?:\.\./)*shared/[^\s`)]*|\bshared/notes\b", p.read_text())]
    assert bad == [], bad


# --- keys, rules, modules ---------------------------------------------------------------

@lru_cache(maxsize=None)
def schema(name: str) -> dict:
    return yaml.safe_load((REPO / "workflow" / "schemas" / f"{name}.schema.yaml").read_text())


def schema_has(root: dict, keys: list[str]) -> bool:
    """Whether the dotted key path is in the schema (``<x>``: any name of a mapping)."""
    defs = root.get("$defs", {})

    def resolve(node):
        while isinstance(node, dict) and "$ref" in node:
            node = defs[node["$ref"].rsplit("/", 1)[-1]]
        return node

    def children(node, key):
        node = resolve(node)
        out = []
        for alt in node.get("anyOf", []) + node.get("oneOf", []) + node.get("allOf", []):
            out += children(alt, key)
        if key in node.get("properties", {}):
            out.append(node["properties"][key])
        elif key.startswith("<") or "properties" not in node:
            # <name>, or a name of a mapping of names (runtimes.apptainer)
            if isinstance(node.get("additionalProperties"), dict):
                out.append(node["additionalProperties"])
            out += list(node.get("patternProperties", {}).values())
        if "items" in node:
            out += children(node["items"], key)
        return out

    nodes = [root]
    for key in keys:
        nodes = [c for n in nodes for c in children(n, key)]
        if not nodes:
            return False
    return True


def dotted_keys():
    for path, span in all_spans():
        text = span.split(":", 1)[0].strip() if ": " in span else span
        if re.fullmatch(r"[a-z_]+(?:\.(?:[a-z_0-9]+|<[a-z_]+>))+", text) and \
                not re.search(r"\.(?:py|yaml|json|csv|smk|sh|md|txt|log|png|html|sif|sqfs)$", text):
            yield path, span, text.split(".")


def test_every_dotted_config_or_site_key_is_in_its_schema():
    from scalesweep.plan.config import MOVED

    config, site = schema("config"), schema("site")
    tops = set(config["properties"]) | set(site["properties"])
    bad, seen = [], 0
    for path, span, keys in dotted_keys():
        if keys[0] not in tops or tuple(keys) in MOVED:
            continue  # a field of metrics.json, a Python name, or a key that moved (refused)
        seen += 1
        if not (schema_has(config, keys) or schema_has(site, keys)):
            bad.append(f"{rel(path)}: `{span}` is in neither workflow/schemas/config.schema.yaml "
                       "nor site.schema.yaml")
    assert seen >= 20 and bad == [], "\n".join(bad)


@lru_cache(maxsize=None)
def rule_names() -> frozenset[str]:
    text = "\n".join(p.read_text() for p in [REPO / "Snakefile",
                                              *(REPO / "workflow" / "rules").glob("*.smk")])
    return frozenset(n for pair in re.findall(r"^(?:rule|checkpoint) (\w+):|^use rule \w+ as (\w+)",
                                               text, re.M) for n in pair if n)


def test_every_rule_named_is_a_rule():
    bad, seen = [], 0
    for path in DOCS:
        text = path.read_text()
        named = re.findall(r"`rule (\w+)`|\brule `(\w+)`|\brules? `(\w+)`", text)
        named = [next(n for n in m if n) for m in named]
        # tables with a "rule" column
        for table in re.findall(r"(?:^\|.*\|\n)+", text, re.M):
            rows = [[c.strip() for c in r.strip("|").split("|")] for r in table.splitlines()]
            if "rule" in rows[0]:
                col = rows[0].index("rule")
                named += [n for r in rows[2:] for n in re.findall(r"`(\w+)`", r[col])]
        seen += len(named)
        bad += [f"{rel(path)}: rule {n}" for n in named if n not in rule_names()]
    assert seen >= 6 and bad == [], f"not rules of the workflow: {bad}"


def test_every_python_name_imports():
    bad, seen = [], 0
    for path, span in all_spans():
        name = span.removeprefix("python -m ").removesuffix("()")
        if re.fullmatch(r"scalesweep(?:\.\w+)+", name):
            seen += 1
            parts = name.split(".")
            for cut in range(len(parts), 0, -1):
                try:
                    obj = importlib.import_module(".".join(parts[:cut]))
                    break
                except ModuleNotFoundError:
                    continue
            try:
                for attr in parts[cut:]:
                    obj = getattr(obj, attr)
            except AttributeError:
                bad.append(f"{rel(path)}: `{span}`")
        elif re.fullmatch(r"scalesweep/[\w/]+\.py", span):
            seen += 1
            if not (REPO / "workflow" / span).is_file():
                bad.append(f"{rel(path)}: `{span}`")
    assert seen >= 10 and bad == [], f"no such module or name: {bad}"


# --- the layout section -----------------------------------------------------------------

def layout_block() -> dict[str, str]:
    """The README's layout block: directory -> its line."""
    for lang, body in document(README)[1]:
        if body.startswith("Snakefile "):
            return {line.split()[0]: line for line in body.splitlines()}
    raise AssertionError("README.md has no repository layout block starting with Snakefile")


def test_layout_names_what_is_there():
    layout = layout_block()
    for entry in layout:
        assert (REPO / entry).exists(), f"README layout: {entry} does not exist"
    top = {p.name for p in REPO.iterdir() if p.is_dir() and not p.name.startswith(".")
           and p.name not in ("results", "resources", "logs", "__pycache__")}
    listed = {e.split("/")[0] for e in layout}
    assert top <= listed, f"directories the README's layout does not name: {sorted(top - listed)}"

    def named(entry: str, names: list[str]):
        missing = [n for n in names if not re.search(rf"(?<![\w-]){re.escape(n)}(?![\w-])", layout[entry])]
        assert missing == [], f"README layout, {entry}: does not name {missing}"

    named("scripts/", [p.name for p in (REPO / "scripts").glob("*.py")])
    named("tools/", [p.name for p in (REPO / "tools").iterdir() if p.is_file()])
    named("workflow/rules/", [p.stem for p in (REPO / "workflow" / "rules").glob("*.smk")])
    named("sites/", [p.stem for p in (REPO / "sites").glob("*.yaml")])
    named("profiles/", [p.name for p in (REPO / "profiles").iterdir() if p.is_dir()])
    for entry, line in layout.items():
        for name in re.findall(r"[\w./-]+\.(?:py|sh|yaml|txt|smk|toml|md)\b", line):
            found = (REPO / name).exists() if "/" in name else \
                glob.glob(str(REPO / entry / "**" / name), recursive=True) or (REPO / name).exists()
            assert found, f"README layout, {entry}: {name} does not exist"


def test_every_library_module_has_its_line():
    text = (REPO / "docs" / "how-it-works.md").read_text()
    section = text.split("## Inside `workflow/scalesweep/`", 1)[1]
    package = REPO / "workflow" / "scalesweep"
    modules = {p.relative_to(package).as_posix() for p in package.rglob("*.py")
               if p.name not in ("__init__.py", "__main__.py") and "__pycache__" not in p.parts}
    named = set(re.findall(r"`([\w/]+\.py)`", section))
    assert modules - named == set(), f"modules docs/how-it-works.md does not describe: {sorted(modules - named)}"
    assert named - modules == set(), f"docs/how-it-works.md describes modules that do not exist: {sorted(named - modules)}"


# --- the first screen -------------------------------------------------------------------

def first_screen() -> str:
    """The README up to its second section: what a reader sees before scrolling far."""
    text = README.read_text()
    sections = [m.start() for m in re.finditer(r"^## ", text, re.M)]
    return text[:sections[1]] if len(sections) > 1 else text


def test_first_screen_says_what_you_get_and_where_to_read_it():
    screen = first_screen()
    for where in ("report.html", "results/summary/", "overhead.csv", "scalesweep status"):
        assert where in screen, f"the README's first screen does not name {where}"
    for detail in ("BatchNorm", "FlopCounterMode", "9,742,722"):
        assert detail not in screen, f"the README's first screen describes {detail}"
    assert len(README.read_text().splitlines()) <= 200, "the README no longer reads in a few minutes"


def test_sample_verdicts_are_in_the_analysis_own_words():
    """Each sample verdict line is what scalesweep.analyse.verdict writes for its numbers."""
    from scalesweep.analyse.overhead import _with_pairing
    from scalesweep.analyse.verdict import _verdict_text

    samples = [line for lang, body in document(README)[1] if lang == "text"
               for line in body.splitlines()]
    pattern = re.compile(
        r"(?P<verdict>equivalent within \+-(?P<margin>[\d.]+)%|faster by [\d.]+%|slower by [\d.]+%|"
        r"inconclusive: about (?P<more>\d+) more repeats? needed) \((?:overhead )?(?P<o>-?[\d.]+)%, "
        r"(?:two one-sided tests' 90% CI (?P<lo90>-?[\d.]+)% \.\. (?P<hi90>-?[\d.]+)%, )?"
        r"95% CI (?P<lo>-?[\d.]+)% \.\. (?P<hi>-?[\d.]+)%, n=(?P<n>\d+) same-block pairs\)$")
    found = 0
    for line in samples:
        m = pattern.search(line)
        assert m, f"README sample {line!r}: not a verdict line"
        found += 1
        kind = m["verdict"].split()[0].rstrip(":")
        v = {"verdict": kind, "overhead_pct": float(m["o"]), "ci95_low_pct": float(m["lo"]),
             "ci95_high_pct": float(m["hi"]), "paired": True, "n": int(m["n"]),
             "n_native": int(m["n"]), "ci_method": "paired t",
             **({"ci90_low_pct": float(m["lo90"]), "ci90_high_pct": float(m["hi90"])}
                if m["lo90"] else {})}
        text = _verdict_text(v, float(m["margin"] or 5), int(m["more"] or 0))
        text = text.replace(" pairs)", " same-block pairs)")  # as overhead._with_pairing says it
        assert line.endswith(text), f"README sample {line!r}: the analysis writes {text!r}"
    assert found >= 1
