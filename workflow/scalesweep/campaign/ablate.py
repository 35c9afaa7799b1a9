"""scalesweep ablate: name the item of the software stack that carries a stack
difference (issue #43), by the one-factor ablation of :mod:`scalesweep.analyse.ablation`.

Run in a campaign directory after its attribution (``results/summary/attribution.csv``,
from a campaign with a control image: ``config/attribution.yaml``), with the same
``--profile`` and ``--configfile`` as the campaign::

    scalesweep ablate --plan --profile profiles/local --configfile config/attribution.yaml
    scalesweep ablate --profile profiles/local --configfile config/attribution.yaml

For each item, in the ablation's order, a campaign of its own under ``ablation/<item>/``:
the campaign's config (its ``config/config.yaml`` copied, the same config files) with an
overlay (``ablation/<item>/ablation.yaml``) that runs only the workloads (the others
disabled), geometries and runtimes of the targets, with the workload image replaced by the control image with that item
swapped in (``containers.images.ablation_<item>.swap``). Its attribution's stack
component is the item's effect. Before anything runs, each item's expected cost (the
points' wall times this campaign measured, at the minimum, expected and maximum repeats:
``scalesweep.campaign.estimate``, plus the image's build) against the budget
(``attribution.ablation.budget_min``, or ``--budget-min``); ``--plan`` stops there.
Between items the stopping rule decides (``analyse.ablation.next_step``). The table,
``results/summary/ablation.csv``, is written after each item (atomically); the campaign's
next ``snakemake`` puts the cause into attribution.csv's explanation and the report's
first screen. Only the items that cover a target still open are tried. Re-running it
redoes only what an item's campaign is missing (Snakemake's own rule), against the same
budget (what each item's campaign took is kept in ``ablation/spent.json``), and an item's
failed campaign stops nothing but that item (its rows say so). ``--plan`` writes the
items' overlays (to read) and runs nothing.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import time
from pathlib import Path

import pandas as pd
import yaml

from scalesweep.analyse import ablation as ab
from scalesweep.analyse.attribution import control_of
from scalesweep.campaign.estimate import SCENARIOS, plan_points, plan_series, scenario_points
from scalesweep.campaign.history import campaign_history, history_dirs
from scalesweep.campaign.profile import read_profile
from scalesweep.campaign.usage import UsageError, positive_number
from scalesweep.plan.swaps import SWAPS
from scalesweep.plan.config import ConfigError
from scalesweep.plan.config_read import config_sources
from scalesweep.plan.imageset import image_spec
from scalesweep.plan.kinds.llm import MODELS_DIR
from scalesweep.plan.sweep import REFERENCE, SweepError
from scalesweep.platform.site import SiteError
from scalesweep.record.dataset import STAGED_DIR
from scalesweep.record.geometry import CONFIG_AXES
from scalesweep.record.metrics import write_text_atomic
from scalesweep.report.registry import table_csv

ABLATION_DIR = "ablation"
OVERLAY = "ablation.yaml"
SPENT = "spent.json"  # seconds each item's campaign took, over every invocation
SHARED = (STAGED_DIR, MODELS_DIR)  # the campaign's datasets and models, linked into an item's
TARGET = table_csv("attribution")


def control_image(config: dict) -> tuple[str, dict]:
    """The campaign's control image: (name, its containers.images entry)."""
    for name, entry in config["containers"]["images"].items():
        if entry.get("control"):
            return name, entry
    raise UsageError("the campaign has no control image (containers.images.<name>.control: "
                     "true): its attribution has nothing to ablate (config/attribution.yaml "
                     "runs one)")


def overlay(config: dict, item: str, target_rows: pd.DataFrame) -> dict:
    """The config an item's campaign adds to the campaign's (module docstring)."""
    control, entry = control_image(config)
    name = f"ablation_{item}"
    image = {k: entry[k] for k in ("builder", "recipe", "requirements", "format", "fakeroot")
             if k in entry}
    image["swap"] = item
    workloads = sorted(set(map(str, target_rows["workload"])))
    runtimes = [REFERENCE]
    for r in sorted(set(map(str, target_rows["runtime"]))):
        runtimes += [r, control_of(r)]
    out = {"sweep": {"runtimes": runtimes},
           "containers": {"image": [name, control], "images": {name: image}}}
    # the targets' workloads only (the others off, so none of their points is missing),
    # each at its targets' geometries (no scaling baseline: none is compared)
    per_workload: dict = {w: {"enabled": False} for w in config["workloads"]
                          if w not in workloads and config["workloads"][w].get("enabled", True)}
    for w in workloads:
        rows = target_rows[target_rows["workload"].astype(str) == w]
        sweep = {key: sorted({int(v) for v in rows[axis]}) for axis, key in CONFIG_AXES.items()}
        per_workload[w] = {"sweep": {**sweep, "baseline": None}}
        if config["workloads"][w].get("image"):
            per_workload[w]["image"] = [name, control]
    out["workloads"] = per_workload
    return out


def item_dir(directory: Path, item: str) -> Path:
    return directory / ABLATION_DIR / item


def prepare(directory: Path, item: str, config: dict, target_rows: pd.DataFrame) -> Path:
    """The item's campaign directory: the campaign's config/config.yaml copied, its staged
    datasets and models linked (``SHARED``), the overlay written; returns its path."""
    d = item_dir(directory, item)
    (d / "config").mkdir(parents=True, exist_ok=True)
    own = directory / "config" / "config.yaml"
    if own.is_file():
        shutil.copyfile(own, d / "config" / "config.yaml")
    # the campaign's staged datasets and models, not staged again
    for sub in SHARED:
        mine, theirs = d / sub, directory / sub
        if theirs.is_dir() and not mine.exists() and not mine.is_symlink():
            mine.parent.mkdir(parents=True, exist_ok=True)
            mine.symlink_to(theirs)
    path = d / OVERLAY
    write_text_atomic(path, "# written by scalesweep ablate: the campaign's config plus this\n"
                      + yaml.safe_dump(overlay(config, item, target_rows), sort_keys=False))
    return path


def item_cost_s(directory: Path, configfiles: list[str], overlay_path: Path, profile: str | None,
                history: pd.DataFrame, build_s: float) -> dict[str, float | None]:
    """Expected seconds of an item's campaign per scenario (minimum, expected, maximum):
    its points' wall times as measured before (``history``), plus its image's build."""
    try:
        config = config_sources(overlay_path.parent, [*configfiles, overlay_path], (),
                                profile).load()
        points = plan_points(config, read_profile(profile), history)
        series = plan_series(points, config, history)
    except (ConfigError, SiteError, SweepError) as exc:
        raise UsageError(f"{overlay_path}: {exc}") from None
    out: dict[str, float | None] = {}
    for name, column in SCENARIOS.items():
        if name == "expected" and not series[column].notna().any():
            out[name] = None
            continue
        runs = scenario_points(points, series, column)
        seconds = runs["expected_s"].fillna(runs["runtime_min"].map(lambda r: r[0] * 60))
        out[name] = float(seconds.sum()) + build_s
    return out


def build_seconds(directory: Path, config: dict) -> float:
    """What building the control image took here (its manifest), the swap image's guess."""
    name, _ = control_image(config)
    path = directory / image_spec(config, name).manifest
    try:
        man = json.loads(path.read_text())
        return float(man.get("cold_build_seconds") or man.get("build_seconds") or 0)
    except (OSError, ValueError, TypeError):
        return 0.0


def _read(path: Path) -> pd.DataFrame:
    try:
        return pd.read_csv(path)
    except (FileNotFoundError, pd.errors.EmptyDataError):
        return pd.DataFrame()


def _spent(path: Path) -> dict[str, float]:
    try:
        return {str(k): float(v) for k, v in json.loads(path.read_text()).items()}
    except (OSError, ValueError, TypeError, AttributeError):
        return {}


def _fmt_min(seconds: float | None) -> str:
    return "unknown" if seconds is None else f"{seconds / 60:.0f} min"


def run(args: argparse.Namespace) -> int:
    directory = Path(args.directory).resolve()
    attribution = _read(directory / TARGET)
    if not len(attribution.columns):
        raise UsageError(f"{directory / TARGET} is missing: run the campaign's attribution "
                         f"first (snakemake {TARGET} --profile ... --configfile ...)")
    differences = _read(directory / table_csv("differences"))
    try:
        sources = config_sources(directory, [Path(f).resolve() for f in args.configfile], (),
                                 args.profile)
        config = sources.load()
    except (ConfigError, SiteError, SweepError) as exc:
        raise UsageError(str(exc)) from None
    # the config files as Snakemake takes them: the given ones, else the profile's own
    configfiles = [str(Path(f).resolve()) for f in sources.configfiles]
    settings = config["attribution"]["ablation"]
    budget_s = 60 * (args.budget_min if args.budget_min is not None else settings["budget_min"])
    target_rows = ab.targets(attribution, exploratory=args.exploratory)
    out_path = directory / table_csv("ablation")
    if not len(target_rows):
        alone = ab.targets(attribution, exploratory=True)  # none over the campaign: all alone
        q = pd.to_numeric(alone["q_value"], errors="coerce") if len(alone) else pd.Series([])
        best = alone.loc[q.idxmin()] if q.notna().any() else None
        shown = (f"{len(alone)} significant on their own only; the smallest q "
                 f"{best['q_value']:.2g}: {best['workload']} ranks {best['ranks']} "
                 f"{best['phase']}, stack {best['stack_pct']:.1f}%" if best is not None
                 else "none differs even on its own")
        print(f"nothing to ablate: none of the campaign's {len(attribution)} stack components "
              f"is significant over it ({shown})" + ("" if args.exploratory else
              "; --exploratory takes those significant on their own too"))
        return 0
    items = ab.plan_items(target_rows, differences)
    if settings["items"]:
        items = [i for i in items if i in settings["items"]]
    print(f"{len(target_rows)} target(s), the stack significant "
          + ("over the campaign or alone (--exploratory):" if args.exploratory
             else "over the campaign:"))
    for t in target_rows.to_dict("records"):
        cover = ab.differing_items(t, differences)
        print(f"  {t['workload']} {t['runtime']} ranks {t['ranks']} {t['phase']}: stack "
              f"{t['verdict']} {t['target_basis']} ({t['stack_pct']:.1f}%, 95% CI "
              f"{t['stack_ci95_low_pct']:.1f}% .. {t['stack_ci95_high_pct']:.1f}%, "
              f"q {t.get('q_value', float('nan')):.2g}); not ablatable by an image: "
              + ("; ".join(cover.get("", [])) or "none"))
    history = campaign_history(history_dirs(directory, []))
    build_s = build_seconds(directory, config)
    costs = {}
    for item in items:
        path = prepare(directory, item, config, target_rows)
        costs[item] = item_cost_s(directory, configfiles, path, args.profile, history, build_s)
    source = ("the wall times of this campaign's runs" if len(history) else
              "no run measured here: the points' requested runtimes, an upper bound")
    spent_path = directory / ABLATION_DIR / SPENT
    spent_by = _spent(spent_path)  # kept across invocations: a re-run spends the same budget
    before = sum(spent_by.values())
    print(f"plan: {len(items)} item(s) in this order, budget {budget_s / 60:.0f} min "
          f"(attribution.ablation.budget_min; {before / 60:.0f} min spent by earlier "
          f"invocations); cost from {source}, plus the image build "
          f"({build_s / 60:.1f} min, the control image's here):")
    for item in items:
        c = costs[item]
        print(f"  {item}: {SWAPS[item].what}; expected {_fmt_min(c['expected'])} (minimum "
              f"{_fmt_min(c['minimum'])}, maximum {_fmt_min(c['maximum'])})")
    if not items:
        print("no item of the recorded differences can be swapped by an image: the "
              "ablation cannot name the cause here")
        return 0
    if args.plan:
        return 0
    rows: list[dict] = []
    table = ab.ablation_table(rows)
    left = list(items)
    while True:
        named = ab.named(table)
        open_rows = target_rows[[ab.target_key(t) not in named
                                 for t in target_rows.to_dict("records")]]
        # only the items that cover a target still open
        left = [i for i in left if i in ab.plan_items(open_rows, differences)]
        c = costs[left[0]] if left else {}
        spent = sum(spent_by.values())
        action, what = ab.next_step(left, len(open_rows), budget_s - spent,
                                    c.get("expected") or c.get("maximum"))
        if action == "stop":
            print(f"stopped: {what}")
            break
        item = left.pop(0)
        d = item_dir(directory, item)
        cmd = _snakemake(d, configfiles, args.profile)
        print(f"item {item}: {' '.join(cmd[2:])}", flush=True)
        t0 = time.monotonic()
        status = subprocess.run(cmd, cwd=directory).returncode
        spent_by[item] = spent_by.get(item, 0.0) + time.monotonic() - t0
        write_text_atomic(spent_path, json.dumps(spent_by, indent=1) + "\n")
        failed = ""
        if status != 0:
            failed = (f"its campaign failed (exit {status}, logs under {d}/logs); re-running "
                      "scalesweep ablate redoes what it is missing")
            print(f"item {item}: {failed}")
        rows += ab.item_rows(target_rows, item, pd.DataFrame() if failed else _read(d / TARGET),
                             differences, str(d), failed=failed)
        table = ab.ablation_table(rows)
        write_text_atomic(out_path, table.to_csv(index=False, float_format="%.10g"))
    spent = sum(spent_by.values())
    write_text_atomic(out_path, table.to_csv(index=False, float_format="%.10g"))
    print(f"{out_path} ({len(table)} rows, {spent / 60:.1f} min spent):")
    for t in target_rows.to_dict("records"):
        said = ab.cause(t, table, exploratory=True) or "not looked at"
        if t["target_basis"] != ab.BASIS_CAMPAIGN:
            said += " (exploratory: the target is not significant over the campaign)"
        print(f"  {t['workload']} {t['runtime']} ranks {t['ranks']} {t['phase']}: {said}")
    print("then: snakemake --profile ... --configfile ... (attribution.csv and the report "
          "take the cause)")
    return 0


def _snakemake(d: Path, configfiles: list[str], profile: str | None) -> list[str]:
    from scalesweep.campaign.deploy import snakemake_argv

    argv = [TARGET, "--directory", str(d)]
    if profile:
        argv += ["--profile", str(Path(profile).resolve()) if Path(profile).exists()
                 else profile]
    argv += ["--configfile", *configfiles, str(d / OVERLAY)]
    return snakemake_argv(argv)


def add_parser(sub) -> None:
    p = sub.add_parser("ablate", help="name the item of the software stack that carries a "
                       "stack difference (one-factor ablation, issue #43)",
                       description=__doc__.split("\n\n")[0])
    p.add_argument("--directory", "-d", default=".", help="campaign directory (default: .)")
    p.add_argument("--configfile", nargs="*", default=[], metavar="FILE",
                   help="the campaign's config files, as given to snakemake")
    p.add_argument("--profile", help="the campaign's Snakemake profile, e.g. profiles/local")
    p.add_argument("--budget-min", type=positive_number, metavar="MIN",
                   help="machine time it may spend (default: attribution.ablation.budget_min)")
    p.add_argument("--exploratory", action="store_true",
                   help="also ablate stack components significant on their own only (not "
                   "over the campaign): said so in ablation.csv, never in attribution.csv")
    p.add_argument("--plan", action="store_true",
                   help="print the targets, the items and their expected cost, run nothing")
    p.set_defaults(func=run)
