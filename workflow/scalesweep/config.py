"""Load a scalesweep config outside Snakemake (the CLI), validated by the same schema."""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

import yaml

SCHEMA = Path(__file__).resolve().parents[1] / "schemas" / "config.schema.yaml"


class ConfigError(ValueError):
    """The config does not validate; the message names the key and the bad value."""


def merge(base: dict, override: dict) -> dict:
    """Snakemake's --configfile/--config semantics: nested mappings merge, the rest replaces."""
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            merge(base[key], value)
        else:
            base[key] = value
    return base


def schema_errors(config: dict) -> list[str]:
    """Every schema violation as 'key.path: message', naming the key and the bad value."""
    import jsonschema

    schema = yaml.safe_load(SCHEMA.read_text())
    validator = jsonschema.Draft202012Validator(schema)
    out = []
    for err in sorted(validator.iter_errors(config), key=lambda e: list(map(str, e.absolute_path))):
        key = ".".join(str(p) for p in err.absolute_path) or "(top level)"
        out.append(f"config key {key}: {err.message}")
    return out


def check_config(config: dict) -> None:
    errors = schema_errors(config)
    if errors:
        raise ConfigError("; ".join(errors[:5]) + (f" (and {len(errors) - 5} more)" if len(errors) > 5 else ""))


def load_config(paths: Iterable[str | Path]) -> dict:
    from snakemake.exceptions import WorkflowError
    from snakemake.utils import validate

    config: dict = {}
    for path in paths:
        path = Path(path)
        if not path.is_file():
            raise ConfigError(f"config file {path} not found")
        merge(config, yaml.safe_load(path.read_text()) or {})
    check_config(config)
    try:
        validate(config, str(SCHEMA), set_default=True)
    except WorkflowError as exc:
        raise ConfigError(str(exc).splitlines()[0] + ": " + _first_detail(exc)) from None
    return config


def _first_detail(exc: Exception) -> str:
    text = str(exc)
    for line in text.splitlines():
        if "Failed validating" in line or "is not" in line or "does not match" in line:
            return line.strip()
    return text.splitlines()[-1].strip() if text else ""
