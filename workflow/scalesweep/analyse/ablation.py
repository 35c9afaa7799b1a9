"""Which item of the software stack carries a stack difference (issue #43): the one-factor
ablation. Pure; ``scalesweep ablate`` (``scalesweep.campaign.ablate``) runs it.

Where a campaign's attribution (``attribution.csv``) finds the software stack significant
(its stack verdict "slower" or "faster" after the campaign's multiplicity control: a
**target**), the ablation measures the items of the stack that differ between the two
sides (``differences.csv``) one at a time: for each item a campaign of its own whose
workload image is the control image with that one item of the workload image swapped in
(``containers.images.<name>.swap``; :mod:`scalesweep.plan.swaps` lists the items the
control recipe can swap), run beside the control image and native, so its attribution's
stack component is the item's own effect, measured with the same pairing and statistics.

**Order**: the items that cover a recorded difference of a target, those covering more
targets first, then the catalogue's order (the interpreter before the byte code). A
recorded difference no item covers (a library only one side loads, a thread count, a
CPU binding) is listed as not ablatable by an image: the ablation cannot name it.

**Verdicts**: each item's effect keeps its campaign's estimate, 95% CI, p value and
equivalence p value; the verdicts are decided again over every item row the ablation has
(Benjamini-Hochberg, :mod:`scalesweep.analyse.multiplicity`): trying several items is
several tests.

**Stopping rule** (:func:`outcome`, :func:`next_step`): an item **carries** a target's
effect where its verdict is the target's (both slower or both faster) and its 95% CI
overlaps the target's stack CI (at 95%, it can account for the whole of it); it carries
**part** where its verdict is the target's but its CI lies wholly nearer zero than the
target's; it **exceeds** it where its CI lies wholly beyond (other items then offset part
of it); it is **ruled out** where it differs the other way, or is equivalent within the
margin with a CI that excludes the target's; **undecided** where inconclusive (or
equivalent yet not excluding the target). The ablation stops when every target is named, when no
item is left (the target is then "no single item carries it: a combination, or a
difference not recorded"), or when the next item's expected cost does not fit in what is
left of the budget (``attribution.ablation.budget_min``): it says so, with the cost it
would need.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from scalesweep.analyse.multiplicity import DIFFERENCE_CLAIMS, adjust_verdicts
from scalesweep.plan.swaps import SWAPS, covering
from scalesweep.record.geometry import AXES as GEOMETRY

TARGET_KEYS = ["workload", "model", *GEOMETRY, "runtime", "phase"]
DIFFERENCE_KEYS = ["workload", *GEOMETRY, "runtime"]
DIFFERENCES = DIFFERENCE_CLAIMS  # the verdicts that claim a difference
BASIS_CAMPAIGN = "over the campaign"  # a target's stack verdict after the multiplicity
BASIS_ALONE = "alone (exploratory: not significant over the campaign)"
CARRIES, PART, EXCEEDS = "carries", "part", "exceeds"
RULED_OUT, UNDECIDED = "ruled out", "undecided"
COLUMNS = [*TARGET_KEYS, "target_pct", "target_ci95_low_pct", "target_ci95_high_pct",
           "target_verdict", "target_basis", "item", "item_label", "differences", "campaign",
           "stack_pct", "stack_ci95_low_pct", "stack_ci95_high_pct", "p_value", "q_value",
           "equivalence_p_value", "equivalence_q_value", "comparisons", "margin_pct",
           "verdict", "verdict_unadjusted", "verdict_text", "outcome"]


def targets(attribution: pd.DataFrame, exploratory: bool = False) -> pd.DataFrame:
    """The rows of an attribution table whose stack verdict is a difference over the
    campaign; with ``exploratory``, also those that are one on their own only (their
    ``verdict_unadjusted``; not a finding of the campaign: ``target_basis`` says so, and
    attribution.csv's cause never takes them), their verdict then the unadjusted one."""
    if attribution is None or not len(attribution):
        return pd.DataFrame(columns=list(attribution.columns) if attribution is not None else [])
    found = attribution["verdict"].isin(DIFFERENCES)
    out = attribution.assign(target_basis=BASIS_CAMPAIGN)
    if exploratory and "verdict_unadjusted" in attribution.columns:
        alone = ~found & attribution["verdict_unadjusted"].isin(DIFFERENCES)
        out.loc[alone, "target_basis"] = BASIS_ALONE
        out.loc[alone, "verdict"] = attribution.loc[alone, "verdict_unadjusted"]
        found = found | alone
    return out[found].reset_index(drop=True)


def _key(row, keys) -> tuple:
    out = []
    for k in keys:
        v = row.get(k)
        if isinstance(v, float) and v.is_integer():
            v = int(v)  # 2.0 (a column with gaps) is 2
        out.append("" if v is None or (isinstance(v, float) and np.isnan(v)) else str(v))
    return tuple(out)


def differing_items(target: dict, differences: pd.DataFrame) -> dict[str, list[str]]:
    """swap item -> the differences.csv items of ``target``'s comparison it covers, and
    under "" those no swap covers (not ablatable by an image)."""
    out: dict[str, list[str]] = {}
    if differences is None or not len(differences) or "item" not in differences.columns:
        return out
    want = _key(target, DIFFERENCE_KEYS)
    for row in differences.to_dict("records"):
        if _key(row, DIFFERENCE_KEYS) != want or not str(row.get("item") or ""):
            continue
        if str(row.get("category")) in ("none", "not recorded"):
            continue
        item = str(row["item"])
        name = covering(item) or ""
        shown = f"{item}: {row.get('native')} (native) vs {row.get('container')} (image)"
        out.setdefault(name, []).append(shown)
    return out


def plan_items(target_rows: pd.DataFrame, differences: pd.DataFrame) -> list[str]:
    """The swap items to try, in order (module docstring)."""
    count: dict[str, int] = {}
    for t in target_rows.to_dict("records"):
        for name in differing_items(t, differences):
            if name:
                count[name] = count.get(name, 0) + 1
    order = list(SWAPS)
    return sorted(count, key=lambda n: (-count[n], order.index(n)))


def outcome(target: dict, item: dict) -> str:
    """carries, part, exceeds, ruled out or undecided (module docstring): ``item`` has the
    item's stack_pct, CI and (adjusted) verdict; ``target`` the target's."""
    verdict = item.get("verdict")
    lo, hi = item["stack_ci95_low_pct"], item["stack_ci95_high_pct"]
    t_lo, t_hi = target["stack_ci95_low_pct"], target["stack_ci95_high_pct"]
    overlaps = lo <= t_hi and t_lo <= hi
    if verdict in DIFFERENCES and verdict != target.get("verdict"):
        return RULED_OUT
    if verdict == "equivalent":
        # within the margin, yet a target within the margin's reach is not excluded
        return UNDECIDED if overlaps else RULED_OUT
    if verdict != target.get("verdict"):
        return UNDECIDED
    if overlaps:
        return CARRIES
    nearer = hi < t_lo if target.get("verdict") == "slower" else lo > t_hi
    return PART if nearer else EXCEEDS


def target_key(row: dict) -> tuple:
    """A target's (or an ablation row's) comparison and phase, as :func:`named` keys it."""
    return _key(row, TARGET_KEYS)


def item_rows(target_rows: pd.DataFrame, item: str, item_attribution: pd.DataFrame,
              differences: pd.DataFrame, campaign: str, failed: str = "") -> list[dict]:
    """One row per target: what ``item``'s campaign measured of the target's comparison
    (its attribution's stack component), before the ablation's own multiplicity;
    ``failed``: why its campaign measured nothing (said in each row)."""
    rows = []
    measured = {}
    if item_attribution is not None and len(item_attribution):
        measured = {_key(r, TARGET_KEYS): r for r in item_attribution.to_dict("records")}
    for t in target_rows.to_dict("records"):
        covers = differing_items(t, differences).get(item, [])
        m = measured.get(_key(t, TARGET_KEYS), {})
        row = {k: t.get(k) for k in TARGET_KEYS}
        row.update(target_pct=t["stack_pct"], target_ci95_low_pct=t["stack_ci95_low_pct"],
                   target_ci95_high_pct=t["stack_ci95_high_pct"], target_verdict=t["verdict"],
                   target_basis=t.get("target_basis", BASIS_CAMPAIGN),
                   item=item, item_label=SWAPS[item].label, differences="; ".join(covers),
                   campaign=campaign, margin_pct=t.get("margin_pct"))
        for col in ("stack_pct", "stack_ci95_low_pct", "stack_ci95_high_pct", "p_value",
                    "equivalence_p_value"):
            row[col] = m.get(col, np.nan)
        own = m.get("verdict_unadjusted", m.get("verdict"))
        row["verdict"] = own if isinstance(own, str) else "inconclusive"
        text = m.get("verdict_text_unadjusted", m.get("verdict_text"))
        row["verdict_text"] = text if isinstance(text, str) else (
            f"not measured: {failed}" if failed else
            "not measured: the item's campaign has no stack component for this comparison")
        rows.append(row)
    return rows


def ablation_table(rows: list[dict]) -> pd.DataFrame:
    """The ablation's rows with their verdicts decided over all of them
    (Benjamini-Hochberg) and each one's outcome against its target."""
    if not rows:
        return pd.DataFrame(columns=COLUMNS)
    table = pd.DataFrame(rows)
    table["overhead_ci95_low_pct"] = table["stack_ci95_low_pct"]
    table["overhead_ci95_high_pct"] = table["stack_ci95_high_pct"]
    table = adjust_verdicts(table).drop(columns=["overhead_ci95_low_pct",
                                                 "overhead_ci95_high_pct"])
    table["outcome"] = [outcome({"verdict": r["target_verdict"],
                                 "stack_ci95_low_pct": r["target_ci95_low_pct"],
                                 "stack_ci95_high_pct": r["target_ci95_high_pct"]}, r)
                        for r in table.to_dict("records")]
    return table.reindex(columns=COLUMNS)


def named(table: pd.DataFrame) -> dict[tuple, dict]:
    """target key -> its carrying item's row (the first tried that carries it)."""
    out: dict[tuple, dict] = {}
    if table is None or not len(table):
        return out
    for r in table.to_dict("records"):
        if r["outcome"] == CARRIES:
            out.setdefault(_key(r, TARGET_KEYS), r)
    return out


def next_step(items_left: list[str], open_targets: int, budget_left_s: float,
              next_cost_s: float | None) -> tuple[str, str]:
    """("run", item) or ("stop", why): the stopping rule between two items."""
    if open_targets == 0:
        return "stop", "every target is named"
    if not items_left:
        return "stop", ("no item left: no single item of the recorded differences carries "
                        "the rest (a combination of them, or a difference not recorded)")
    item = items_left[0]
    if next_cost_s is not None and next_cost_s > budget_left_s:
        return "stop", (f"budget: the next item ({item}) is expected to take "
                        f"{next_cost_s / 60:.0f} min and {max(budget_left_s, 0) / 60:.0f} min "
                        f"of the budget are left (attribution.ablation.budget_min)")
    return "run", item


def cause(target: dict, table: pd.DataFrame, exploratory: bool = False) -> str:
    """What the ablation says of one target: "carried by <label> (<differences>)", or why
    it names nothing; "" where the ablation did not look at it. An exploratory target's
    rows (significant on its own only) count only with ``exploratory`` (the CLI's
    summary): attribution.csv's cause never takes them."""
    if table is None or not len(table):
        return ""
    key = _key(target, TARGET_KEYS)
    rows = [r for r in table.to_dict("records") if _key(r, TARGET_KEYS) == key
            and (exploratory or r.get("target_basis", BASIS_CAMPAIGN) == BASIS_CAMPAIGN)]
    if not rows:
        return ""
    carried = [r for r in rows if r["outcome"] == CARRIES]
    if carried:
        r = carried[0]
        what = r.get("differences")
        return f"carried by {r['item_label']} ({what})" if isinstance(what, str) and what \
            else f"carried by {r['item_label']}"
    tried = ", ".join(f"{r['item']} {r['outcome']}" for r in rows)
    return f"no single item named ({tried})"
