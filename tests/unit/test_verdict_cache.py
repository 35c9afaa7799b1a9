"""The verdicts' cache (issue #41): a verdict is a pure function of one Comparison
(scalesweep.analyse.overhead.comparison_row), and the cache beside the summary
(scalesweep.analyse.memo.Memo) is keyed by the whole of it, so that changing any input
gives the verdict computed afresh, never an old one."""

import dataclasses

import numpy as np
import pandas as pd
import pytest

from scalesweep.analyse.memo import Memo
from scalesweep.analyse.overhead import Comparison, Settings, Side, verdict_table

RNG = np.random.default_rng(4)
N = 8


def iso(seconds: float) -> str:
    return (pd.Timestamp("2026-11-28T00:00:00Z") + pd.Timedelta(seconds=seconds)).isoformat()


def shifted(df, where, seconds):
    """Runs ``where`` moved by ``seconds`` (their start and end)."""
    move = lambda col: [iso((pd.Timestamp(t) - pd.Timestamp(iso(0))).total_seconds() + seconds)  # noqa: E731
                        if w else t for t, w in zip(df[col], where)]
    return df.assign(start=move("start"), end=move("end"))


def runs() -> pd.DataFrame:
    """Two groups, native and a container in N same-block pairs, with the columns the
    pairing reads (start and end, hosts, probe figures)."""
    rows = []
    for g in ("a", "b"):
        for k in range(1, N + 1):
            t0 = 1000.0 * k
            for i, runtime in enumerate(("native", "charliecloud")):
                rows.append({
                    "g": g, "runtime": runtime, "block_id": f"{g}-{k}",
                    "time_s": float(10 * (1.03 if i else 1.0) * np.exp(RNG.normal(0, 0.02))),
                    "disturbed": False, "start": iso(t0 + 20 * i), "end": iso(t0 + 20 * i + 15),
                    "hosts": "n1", "payload": "cnn", "probe_gflops": 100.0,
                    "probe_gbps": 20.0, "probe_change_pct": 0.0,
                })
    return pd.DataFrame(rows)


BASE = dict(group_cols=["g"], pair_col="block_id", margin_pct=5.0, target_ci_pp=2.0,
            confidence=0.95, max_pair_gap_s=60.0, probe_tolerance_pct=5.0)


def at(df, g, runtime, k):
    return (df["g"] == g) & (df["runtime"] == runtime) & (df["block_id"] == f"{g}-{k}")


# Each input of a Comparison, and a change of the runs or settings that changes it
# (with the names of the row's fields it must move).
CHANGES = {
    "group": (lambda df, kw: (df.assign(g=df["g"].replace({"a": "c"})), kw), ["g"]),
    "runtime": (lambda df, kw: (df.assign(runtime=df["runtime"].replace(
        {"charliecloud": "podman"})), kw), ["runtime"]),
    "runtime_col": (lambda df, kw: (df.rename(columns={"runtime": "rt"}),
                                    {**kw, "runtime_col": "rt"}), ["rt"]),
    "time_col": (lambda df, kw: (df.rename(columns={"time_s": "t"}).assign(
        t=lambda d: d["t"] * 2), {**kw, "time_col": "t"}), ["native_s"]),
    "pair_col": (lambda df, kw: (df, {**kw, "pair_col": None}), ["pairing"]),
    "settings.margin_pct": (lambda df, kw: (df, {**kw, "margin_pct": 1.0}), ["margin_pct"]),
    "settings.target_ci_pp": (lambda df, kw: (df, {**kw, "target_ci_pp": 0.1}),
                              ["target_ci_pp"]),
    "settings.confidence": (lambda df, kw: (df, {**kw, "confidence": 0.5}),
                            ["overhead_ci95_low_pct"]),
    "settings.max_pair_gap_s": (lambda df, kw: (df, {**kw, "max_pair_gap_s": 1.0}),
                                ["n_pairs_split"]),  # the runs of a block are 5 s apart
    "settings.probe_tolerance_pct": (lambda df, kw: (df.assign(probe_gflops=np.where(
        df["runtime"] == "native", 100.0, 150.0)), kw), ["n_pairs_machine_differs"]),
    "native.times": (lambda df, kw: (df.assign(time_s=np.where(
        at(df, "a", "native", 1), 30.0, df["time_s"])), kw), ["native_s"]),
    "container.times": (lambda df, kw: (df.assign(time_s=np.where(
        at(df, "a", "charliecloud", 1), 30.0, df["time_s"])), kw), ["time_s"]),
    "native.excluded": (lambda df, kw: (df.assign(disturbed=at(df, "a", "native", 2)), kw),
                        ["n_disturbed"]),
    "container.excluded": (lambda df, kw: (df.assign(
        disturbed=at(df, "a", "charliecloud", 2)), kw), ["n_disturbed"]),
    "native.keys": (lambda df, kw: (df.assign(block_id=np.where(
        at(df, "a", "native", 3), "a-99", df["block_id"])), kw), ["n"]),
    "container.keys": (lambda df, kw: (df.assign(block_id=np.where(
        at(df, "a", "charliecloud", 3), "a-99", df["block_id"])), kw), ["n"]),
    "native.records": (lambda df, kw: (shifted(df, at(df, "a", "native", 4), -500), kw),
                       ["n_pairs_split"]),
    "container.records": (lambda df, kw: (shifted(df, at(df, "a", "charliecloud", 4), 500),
                                          kw), ["n_pairs_split"]),
}


def inputs_of(cls, prefix=""):
    out = []
    for f in dataclasses.fields(cls):
        nested = {"settings": Settings, "native": Side, "container": Side}.get(f.name)
        out += inputs_of(nested, f"{f.name}.") if nested else [prefix + f.name]
    return out


def test_every_input_of_a_verdict_is_changed_below():
    """A new input of a Comparison needs its change here (and so its check below)."""
    assert sorted(CHANGES) == sorted(inputs_of(Comparison))


def group_a(table, kw):
    rt = kw.get("runtime_col", "runtime")
    first = table.sort_values(["g", rt]).iloc[0]
    return first.to_dict()


@pytest.mark.parametrize("name", sorted(CHANGES))
def test_a_changed_input_gets_its_verdict_computed_not_the_cached_one(tmp_path, name):
    change, moved = CHANGES[name]
    df, kw = runs(), dict(BASE)
    memo = Memo(tmp_path / "verdicts.npz", "v")
    before = verdict_table(df, memo=memo, **kw)
    memo.save()
    pd.testing.assert_frame_equal(before, verdict_table(df, **kw))
    new_df, new_kw = change(df, kw)
    memo = Memo(tmp_path / "verdicts.npz", "v")
    assert memo.old  # the rows of the first summary are there to be (mis)used
    cached = verdict_table(new_df, memo=memo, **new_kw)
    fresh = verdict_table(new_df, **new_kw)
    pd.testing.assert_frame_equal(cached, fresh)
    # the change reaches the verdict's row (the test changes what it says it does)
    old_row, new_row = group_a(before, kw), group_a(fresh, new_kw)
    for field in moved:
        assert field in new_row and old_row.get(field) != new_row[field], (name, field)
    # group b is unchanged where only group a's runs changed: taken from the cache
    if name.startswith(("native.", "container.")):
        assert len(memo.used) == len(fresh) and memo.added
