"""A Snakemake profile as ``scalesweep plan`` reads it (profiles/default, then the given
profile, as Snakemake applies them): its ``default-resources`` and ``set-resources`` (a
runtime: a number, or an arithmetic expression of ``attempt``), its ``retries``; and the
runtime each attempt of a point asks for (``scalesweep.run.slurm.runtime_min`` unless the
profile fixes ``run_point``'s)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from scalesweep.campaign.usage import UsageError
from scalesweep.platform.site import site_of
from scalesweep.run.slurm import runtime_min
from scalesweep.platform.code import CODE_ROOT as REPO


DEFAULT_RUNTIME_MIN = 60  # Snakemake's own default runtime when a profile sets none
EXPRESSION = re.compile(r"^[\d\s+\-*/().]*$")


def read_profile(path: str | Path | None) -> dict:
    """profiles/default/config.yaml overlaid by ``path`` (a profile directory or its
    config.yaml), key by key, as Snakemake applies a workflow profile and --profile."""
    merged: dict = {}
    for candidate in [REPO / "profiles" / "default", path]:
        if candidate is None:
            continue
        candidate = Path(candidate)
        file = candidate / "config.yaml" if candidate.is_dir() else candidate
        if not file.is_file():
            if candidate == REPO / "profiles" / "default":
                continue
            raise UsageError(f"profile {candidate}: no config.yaml there")
        data = yaml.safe_load(file.read_text()) or {}
        if not isinstance(data, dict):
            raise UsageError(f"profile {file}: not a YAML mapping")
        merged.update(data)
    return merged


def _resources(value) -> dict:
    """default-resources as a mapping (a profile may write a list of 'key=value')."""
    if isinstance(value, dict):
        return dict(value)
    out = {}
    for item in value or []:
        key, _, val = str(item).partition("=")
        out[key.strip()] = val.strip()
    return out


def _set_resources(value) -> dict[str, dict]:
    """set-resources as {rule: {key: value}} (a list of 'rule:key=value' too)."""
    if isinstance(value, dict):
        return {rule: _resources(res) for rule, res in value.items()}
    out: dict[str, dict] = {}
    for item in value or []:
        rule, _, rest = str(item).partition(":")
        key, _, val = rest.partition("=")
        out.setdefault(rule.strip(), {})[key.strip()] = val.strip()
    return out


def minutes(value, attempt: int = 1) -> float | None:
    """A profile's runtime: a number, or arithmetic of ``attempt``; None if unreadable."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    text = str(value).strip().strip("'\"")
    text = re.sub(r"\battempt\b", str(int(attempt)), text)
    if not text or not EXPRESSION.match(text):
        return None
    try:
        return float(eval(text, {"__builtins__": {}}, {}))  # digits and operators only
    except (SyntaxError, ZeroDivisionError, TypeError):
        return None


def attempts_of(profile: dict) -> int:
    return 1 + max(0, int(profile.get("retries", 0) or 0))


def support_runtime_min(profile: dict) -> float:
    value = _resources(profile.get("default-resources")).get("runtime")
    found = minutes(value) if value is not None else None
    return found if found is not None else DEFAULT_RUNTIME_MIN


def point_runtime_min(config: dict, profile: dict, workload: str, attempt: int) -> float:
    """Minutes asked for by attempt ``attempt`` of a point of ``workload``."""
    fixed = _set_resources(profile.get("set-resources")).get("run_point", {}).get("runtime")
    if fixed is not None:
        found = minutes(fixed, attempt)
        if found is not None:
            return found
    return float(runtime_min(config["workloads"][workload], site_of(config), attempt))
