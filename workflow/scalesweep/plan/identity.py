"""What a run was measured under, and whether that is what this campaign's config gives
for its point (issue #40, cases 6 and 7).

Every run records ``identity`` in its metrics.json (``identity_record``, written by the
harness): the measured parts of the config for its point (``measured_config``: the
workload's settings, its dataset's, model's and container image's config entries;
never the sweep's axes or analysis settings such as max_repeats or margins), their
digest (``config_digest``), the campaign directory and host it ran in, and the source
of the staged dataset it read (path and the digest of what was staged:
``scalesweep.record.dataset.staged_source``). A run whose measured parts differ from
the config's is foreign (``differences``): the aggregation and ``scalesweep status``
name it and leave it out of every statistic. A run recorded before this field existed
(no ``identity``) is taken as this campaign's, as before.

The dataset's own check (``source_change``): a config whose ``datasets.<name>`` names
another source than the one its staged copy was staged from is refused before any job
(scalesweep.plan.config), unless ``restage`` names the dataset.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import socket
from pathlib import Path
from typing import Any

from scalesweep.record.dataset import SOURCE_KEYS, STAGED_DIR, staged_source

# a workload's keys that change nothing a run measures: whether it is in the sweep, its
# own axes (a new count is a new point, never another run of one), its time limit, the
# bounds a prompts file is checked against (raising one must not make runs foreign)
NOT_MEASURED = {"enabled", "sweep", "max_runtime_min", "max_prompts_mb", "max_prompts"}
FOREIGN = "foreign run"  # how a foreign run's reason starts (runs.csv, points.csv, status)


def _plain(value: Any) -> Any:
    """``value`` as its JSON round trip (what a run's metrics.json gives back)."""
    return json.loads(json.dumps(value, sort_keys=True, default=str))


def measured_config(config: dict, workload: str, runtime: str) -> dict:
    """The measured parts of ``config`` for the points of ``workload`` in ``runtime``,
    by config key: ``workloads.<w>`` (less ``NOT_MEASURED``), ``datasets.<d>``,
    ``models.<m>`` and, for a container runtime, ``containers.images.<i>`` (the image
    it runs)."""
    from scalesweep.plan.imageset import workload_image
    from scalesweep.plan.sweep import is_native

    wl = config["workloads"][workload]
    out = {f"workloads.{workload}": {k: v for k, v in wl.items() if k not in NOT_MEASURED}}
    for key, section in (("dataset", "datasets"), ("model", "models")):
        name = wl.get(key)
        if name and name in (config.get(section) or {}):
            entry = dict(config[section][name])
            if isinstance(entry.get("path"), str):  # "data/x" and "./data/x" are one path
                entry["path"] = os.path.normpath(entry["path"])
            out[f"{section}.{name}"] = entry
    if not is_native(runtime):
        spec = workload_image(config, workload, runtime)
        out[f"containers.images.{spec.name}"] = dataclasses.asdict(spec)
    return _plain(out)


def config_digest(measured: dict) -> str:
    return hashlib.sha256(json.dumps(measured, sort_keys=True).encode()).hexdigest()[:16]


def identity_record(config: dict, workload: str, runtime: str) -> dict:
    """A run's ``identity`` (metrics.json): its measured config, their digest, the
    campaign (directory, host) and the staged dataset's source it read."""
    measured = measured_config(config, workload, runtime)
    name = config["workloads"][workload].get("dataset")
    source = staged_source(Path(STAGED_DIR, name)) if name else None
    return {"config_digest": config_digest(measured), "measured": measured,
            "campaign": {"directory": os.getcwd(), "host": socket.gethostname()},
            "dataset_source": source and {"name": name, **source}}


def _shown(value: Any) -> str:
    return json.dumps(value, sort_keys=True)[:120]


def differences(recorded: dict, expected: dict) -> list[str]:
    """What differs between a run's measured config (``recorded``) and this config's
    (``expected``), each as "<key> <run's value> (this config: <value>)". A key only
    one side has inside a section (a later version's, or one no longer known) is not
    compared."""
    out = []
    for section in sorted(set(recorded) | set(expected)):
        was, now = recorded.get(section), expected.get(section)
        if isinstance(was, dict) and isinstance(now, dict):
            out += [f"{section}.{key} {_shown(was[key])} (this config: {_shown(now[key])})"
                    for key in sorted(was) if key in now and was[key] != now[key]]
        elif was is None and now is not None:
            out.append(f"{section} not used by the run (this config uses it)")
        elif now is None and was is not None:
            out.append(f"{section} used by the run, not by this config")
    return out


def foreign_reason(metrics: dict, config: dict, expected: dict | None = None) -> str:
    """Why the run of ``metrics`` is foreign to ``config`` ("" where it is not, or records
    no identity: runs before issue #40 are taken as the campaign's)."""
    identity = metrics.get("identity")
    if not isinstance(identity, dict) or not isinstance(identity.get("measured"), dict):
        return ""
    if "sweep" not in config:  # no campaign's config to hold it against (`scalesweep
        return ""              # compare` reads campaigns from their metrics alone)
    point = metrics.get("point") or {}
    try:
        expected = expected or measured_config(config, point["workload"], point["runtime"])
    except Exception as exc:  # noqa: BLE001 - a workload or image this config lacks
        return f"{FOREIGN}: measured under a config this one cannot place ({exc})"
    if identity.get("config_digest") == config_digest(expected):
        return ""
    diff = differences(identity["measured"], expected)
    if not diff:
        return ""
    where = (identity.get("campaign") or {}).get("directory")
    return (f"{FOREIGN}: measured under another config" + (f" (campaign {where})" if where
                                                            else "") + ": " + "; ".join(diff))


def source_change(name: str, ds: dict, directory: str | Path = ".") -> str | None:
    """Why dataset ``name``'s staged copy (``resources/datasets/<name>`` in the campaign
    ``directory``) is not what ``ds`` (its config entry) stages, naming both; None where
    it is (or is not staged, or was staged without a record of its source)."""
    staged = Path(directory, STAGED_DIR, name)
    recorded = staged_source(staged)
    if recorded is None:
        return None
    diff = []
    for key in SOURCE_KEYS:
        if key not in recorded or key not in ds or recorded[key] == ds[key]:
            continue
        if key == "path" and (ds["source"] == "synthetic" or _same_path(
                recorded[key], ds[key], directory)):
            continue
        diff.append(f"{key} {recorded[key]!r} (staged) but {ds[key]!r} in this config")
    if not diff:
        return None
    path = Path(directory, ds["path"])
    gone = ("" if ds["source"] == "synthetic" or path.exists()
            else f" ({ds['path']!r} does not exist)")
    digest = (recorded.get("manifest_sha256") or "")[:16]
    return (f"config key datasets.{name}: {STAGED_DIR}/{name} was staged from another source "
            f"(manifest sha256 {digest}...): " + "; ".join(diff) + gone + ". Its finished "
            "points were measured on the staged data, so nothing is run over it: put "
            f"datasets.{name} back as staged, or stage it anew from this source: your "
            f"snakemake command plus `--forcerun {STAGED_DIR}/{name} --config "
            f"restage='[{name}]'` (your other --config items in the same --config); points "
            "measured on the old data are then foreign runs, left out of the statistics and "
            "named by `scalesweep status` (`scalesweep rerun --foreign` measures them again)")


def _same_path(a: str, b: str, directory: str | Path) -> bool:
    """Whether two configured paths (relative: to the campaign) name the same file."""
    try:
        return os.path.realpath(Path(directory, a)) == os.path.realpath(Path(directory, b))
    except (OSError, ValueError):
        return False
