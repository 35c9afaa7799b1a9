"""Sites as data: one file per machine (sites/<name>.yaml, workflow/schemas/site.schema.yaml).

A campaign names its site (config key ``site``: a name under sites/ or a path to a YAML
file). The validated site, with the schema's defaults and its ``extends`` chain merged,
travels with the config as ``config["_site"]`` (``scalesweep.plan.config.check_config`` loads
it once); every reader takes it from there through :func:`site_of`, so a fact about a
machine is written once, in its file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from scalesweep.platform.code import CODE_ROOT as REPO, SCHEMAS_DIR, SITES_DIR


SCHEMA = SCHEMAS_DIR / "site.schema.yaml"
SITE_KEY = "_site"  # where the loaded site travels inside a config


class SiteError(ValueError):
    """A site that cannot be found or does not validate; the message names it."""


def known_sites() -> list[str]:
    return sorted(p.stem for p in SITES_DIR.glob("*.yaml"))


def is_path(name: str) -> bool:
    """A site named by a path (a slash, or a .yaml/.yml name) rather than by its name."""
    return "/" in name or name.endswith((".yaml", ".yml"))


def site_file(name: str, base: str | Path | None = None) -> Path:
    """sites/<name>.yaml for a bare name; otherwise a path (relative to ``base``, default
    the current directory)."""
    if not is_path(name):
        path = SITES_DIR / f"{name}.yaml"
        if not path.is_file():
            raise SiteError(f"unknown site {name!r} (no {path}); known sites: "
                            f"{', '.join(known_sites())}, or a path to a site file")
        return path
    path = Path(name).expanduser()
    if not path.is_absolute():
        path = Path(base or Path.cwd()) / path
    if not path.is_file():
        raise SiteError(f"site file {name!r} not found ({path}); known sites: "
                        f"{', '.join(known_sites())}")
    return path


def _merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def _raw(name: str, base: str | Path | None, seen: tuple[Path, ...]) -> dict:
    path = site_file(name, base).resolve()
    if path in seen:
        chain = " -> ".join(str(p) for p in seen + (path,))
        raise SiteError(f"site {name!r}: 'extends' loops ({chain})")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        detail = " ".join(str(exc).split())
        raise SiteError(f"site file {path}: not valid YAML ({detail})") from None
    if not isinstance(data, dict):
        raise SiteError(f"site file {path}: not a YAML mapping")
    if "name" not in data:  # else it would take the name of the site it extends
        raise SiteError(f"site file {path}: no `name:`")
    parent = data.pop("extends", None)
    if parent:
        data = _merge(_raw(str(parent), path.parent, seen + (path,)), data)
    return data


def load_site(name: str, base: str | Path | None = None) -> dict[str, Any]:
    """The validated site ``name`` (a name under sites/, or a path relative to ``base``):
    its ``extends`` chain merged, the schema's defaults filled in. Raises SiteError."""
    import jsonschema
    from snakemake.utils import validate

    data = _raw(name, base, ())
    schema = yaml.safe_load(SCHEMA.read_text())
    errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(data),
                    key=lambda e: list(map(str, e.absolute_path)))
    if errors:
        where = site_file(name, base)
        found = "; ".join(f"site key {'.'.join(map(str, e.absolute_path)) or '(top level)'}: "
                          f"{e.message}" for e in errors[:3])
        raise SiteError(f"site {name!r} ({where}) does not validate: {found}"
                        + (f" (and {len(errors) - 3} more)" if len(errors) > 3 else ""))
    validate(data, str(SCHEMA), set_default=True)
    from scalesweep.platform.runtimes import site_keys  # the runtimes' registry, not the schema

    unknown = sorted(set(data["runtimes"]) - set(site_keys()))
    if unknown:
        raise SiteError(f"site {name!r} ({site_file(name, base)}) does not validate: site key "
                        f"runtimes.{unknown[0]}: not a runtime of scalesweep.platform.runtimes (known: "
                        f"{', '.join(site_keys())})")
    from scalesweep.platform.runtimes import runtime  # its modes: the class's

    for key, entry in data["runtimes"].items():
        modes = runtime(key).modes
        for mode in entry.get("modes") or ():
            if mode not in modes:
                raise SiteError(f"site {name!r} ({site_file(name, base)}) does not validate: site key "
                                f"runtimes.{key}.modes: {mode!r} is not a mode of runtime {key} "
                                f"(its modes: {', '.join(modes) or 'none'})")
    return data


def site_of(config: dict) -> dict[str, Any]:
    """The site a checked config runs on (``scalesweep.plan.config.check_config`` loads it)."""
    try:
        return config[SITE_KEY]
    except KeyError:
        raise SiteError("config has no loaded site (check it with "
                        "scalesweep.plan.config.check_config first)") from None


def point_modules(site: dict[str, Any]) -> list[str]:
    """The environment modules a point job loads (rule run_point's ``envmodules``, used
    where Snakemake deploys env-modules): the site's ``modules``, in order, then each of
    its runtimes' ``modules`` whose name (before any ``/version``) is not named yet."""
    out = list(site.get("modules") or ())
    names = {m.split("/", 1)[0] for m in out}
    for entry in (site.get("runtimes") or {}).values():
        for module in (entry or {}).get("modules") or ():
            if module.split("/", 1)[0] not in names:
                names.add(module.split("/", 1)[0])
                out.append(module)
    return out
