"""The cache of runs.csv's rows (scalesweep.analyse.runcache, issue #31): every summary
table is byte for byte the same with and without it, cold and warm, read in one process
or several; a changed, replaced or deleted metrics file is read again, never a stale
row; a cache of another version, or a corrupt one, is ignored and rewritten.

The campaign: benchmarks/aggregation.py's generator (copies of a real CNN and a real LLM
run of this repository, benchmarks/data/) on a small sweep, with values of every kind a
row holds mixed in (a column of None and numbers, of ints and floats, load levels as
JSON), a disturbed run, a malformed file and a point whose earlier run stands in."""

from __future__ import annotations

import json
import os
import shutil
import stat
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import REPO
from scalesweep.analyse import cachefiles, collect, rowtext, runcache
from scalesweep.record.mountinfo import mounts
from scalesweep.analyse.memo import VERDICTS_CACHE
from scalesweep.analyse.runcache import RUNS_CACHE, RowStore
from scalesweep.analyse.aggregate import OUTPUTS, write_summary

sys.path.insert(0, str(REPO / "benchmarks"))
from aggregation import generate, sweep_config  # noqa: E402


def small_config() -> dict:
    config = sweep_config(1000)
    config["sweep"].update(nodes=[1, 2], gpus_per_node=[1, 2], threads_per_rank=[7], repeats=2)
    return config


@pytest.fixture(scope="module")
def campaign(tmp_path_factory) -> tuple[Path, dict, list[str]]:
    root = tmp_path_factory.mktemp("campaign")
    config, paths, _ = generate(root, 0, config=small_config())
    files = [root / p for p in paths]
    cnn = [f for f in files if "/cnn_" in str(f)]
    llm = [f for f in files if "/llm_" in str(f)]

    def edit(f: Path, **changes):
        data = json.loads(f.read_text())
        data.update(changes)
        f.write_text(json.dumps(data, indent=2, sort_keys=True))

    for i, f in enumerate(cnn[::3]):  # a column of None and numbers
        edit(f, test_accuracy=0.9 + i / 1000, test_loss=1 if i % 2 else 0.5)
    edit(cnn[1], disturbed=True, interference={"reasons": ["load 3.2 > 1.5"], "load1_max": 3.2})
    edit(cnn[4], slurm={"job_id": 2**70})  # an int beyond int64 (a job id is text or a number)
    edit(cnn[5], mode="unicode \u00e9\u4e2d \\ \" \x00 end")
    edit(llm[0], load_levels=[{"level": 0, "shape": "poisson", "rate": 2.0, "concurrency": None,
                               "n": 40, "n_ok": 40, "n_failed": 0, "duration_s": 20.0,
                               "output_tokens_per_s": 80.0, "requests_per_s": 2.0,
                               "goodput_rps": 2.0, "ttft_s": {"p50": {
                                   "estimate": 0.03, "low": 0.02, "high": 0.04}}}],
         max_rate={"max_rate_rps": 7, "missed_rps": 8.5, "bound": "bisection"})
    files[7].write_text("{ truncated")  # failed, left out
    # a point measured again whose new run failed: its earlier run stands in
    history = files[9].parent / "history" / "20260101T000000Z"
    history.mkdir(parents=True)
    shutil.copy(files[9], history / "metrics.json")
    files[9].write_text("{}")
    return root, config, paths


def outputs(directory: Path) -> dict[str, str]:
    directory.mkdir(parents=True, exist_ok=True)
    return {name: str(directory / (f"{name}.csv" if name != "campaign" else "campaign.json"))
            for name in OUTPUTS}


def summary(root: Path, config: dict, paths: list[str], out: str, cache: bool = True,
            notes: list | None = None) -> dict[str, bytes]:
    """Every output of the aggregate rule, as bytes (campaign.json without its time); in
    the campaign's directory (the caller's monkeypatch.chdir)."""
    files = outputs(root / out)
    write_summary(paths, config, files, (notes if notes is not None else []).append, cache=cache)
    got = {}
    for name, f in files.items():
        data = Path(f).read_bytes()
        if name == "campaign":
            record = json.loads(data)
            record.pop("summarised_at")
            data = json.dumps(record).encode()
        got[name] = data
    return got


@pytest.fixture
def reads(monkeypatch):
    """The metrics files collect_runs reads (in this process: one reader)."""
    seen = []
    real = collect.read_run

    def read_run(path, config):
        seen.append(str(path))
        return real(path, config)

    monkeypatch.setattr(collect, "read_run", read_run)
    monkeypatch.setattr(collect, "default_workers", lambda: 1)
    monkeypatch.setattr(cachefiles, "_RACY_NS", 0)  # the files were written just now
    return seen


def test_every_table_is_the_same_with_and_without_the_cache(campaign, reads, monkeypatch):
    root, config, paths = campaign
    monkeypatch.chdir(root)
    plain = summary(root, config, paths, "plain", cache=False)
    assert not (root / "plain" / RUNS_CACHE).exists()
    runs = pd.read_csv(root / "plain" / "runs.csv")
    assert len(runs) == len(paths) - 1 and runs["disturbed"].sum() == 1
    assert runs["test_accuracy"].notna().sum() and runs["test_accuracy"].isna().sum()
    notes: list = []
    reads.clear()
    assert summary(root, config, paths, "cached", notes=notes) == plain  # cold: all read
    unreadable = {paths[7], paths[9], str(Path(paths[9]).parent / "history" /
                                          "20260101T000000Z" / "metrics.json")}
    assert set(reads) == set(paths) | unreadable  # (points.csv reads the unreadable again)
    assert any("the summary uses the earlier run" in n for n in notes)
    assert (root / "cached" / RUNS_CACHE).is_file()
    reads.clear()
    notes_warm: list = []
    assert summary(root, config, paths, "cached", notes=notes_warm) == plain  # warm
    # only the unreadable files (and the earlier run) are read again, the same said
    assert set(reads) == unreadable
    assert notes_warm == notes
    assert (root / "cached" / VERDICTS_CACHE).is_file()
    # one run changed: its verdict computed again (the memo's other rows taken), the
    # tables those of a summary without any cache
    f = root / paths[2]
    original = f.read_text()
    data = json.loads(original)
    data["epoch_s"] = [x * 1.5 for x in data["epoch_s"]]
    f.write_text(json.dumps(data, indent=2, sort_keys=True))
    try:
        assert summary(root, config, paths, "cached") == summary(root, config, paths, "plain",
                                                                 cache=False)
        assert summary(root, config, paths, "cached") != plain  # (it did change)
    finally:
        f.write_text(original)
    # read in several processes: the same table
    monkeypatch.setattr(collect, "PARALLEL_MIN", 1)
    monkeypatch.setattr(collect, "CHUNK", 7)
    for workers in (1, 3):
        df = collect.collect_runs(paths, config, workers=workers)
        assert df.to_csv(index=False).encode() == plain["runs"]


def test_a_changed_warmup_blocks_labels_every_run_anew(campaign, reads, monkeypatch):
    """runs.csv's warmup comes from the config, not from a file's cached row or text."""
    root, config, paths = campaign
    monkeypatch.chdir(root)

    def with_warmup(n):
        return {**config, "measurement": {**(config.get("measurement") or {}),
                                          "warmup_blocks": n}}

    summary(root, with_warmup(0), paths, "warm")
    reads.clear()
    labelled = summary(root, with_warmup(1), paths, "warm")
    assert not set(reads) & set(paths[:7])  # the rows came from the caches
    runs = pd.read_csv(root / "warm" / "runs.csv")
    assert runs["warmup"].any() and (runs["warmup"] == (runs["repeat"] <= 1)).all()
    assert labelled == summary(root, with_warmup(1), paths, "warm-plain", cache=False)
    points = pd.read_csv(root / "warm" / "points.csv")
    assert (points["warmup"] == (points["repeat"] <= 1)).all()


def test_a_changed_replaced_or_deleted_file_is_read_again(campaign, reads, tmp_path,
                                                         monkeypatch):
    root, config, paths = campaign
    shutil.copytree(root / "results", tmp_path / "results")  # a copy: its files are changed
    monkeypatch.chdir(tmp_path)
    cache = tmp_path / "summary" / RUNS_CACHE
    cache.parent.mkdir()
    unreadable = [paths[7], paths[9], str(Path(paths[9]).parent / "history" /
                                          "20260101T000000Z" / "metrics.json")]

    def runs_csv(with_cache=True, which=paths) -> bytes:
        reads.clear()
        df = collect.collect_runs(which, config, cache=cache if with_cache else None)
        return df.to_csv(index=False).encode()

    runs_csv()
    assert runs_csv() and reads == unreadable  # warm
    f = tmp_path / paths[0]
    data = json.loads(f.read_text())
    # changed in place, same size, its time stamps put back: its ctime still changed
    stat, text = f.stat(), f.read_text()
    shown = repr(data["final_loss"])
    spoiled = text.replace(shown, shown[:-1] + ("7" if shown[-1] != "7" else "8"), 1)
    assert spoiled != text and len(spoiled) == len(text)
    f.write_text(spoiled)
    os.utime(f, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert f.stat().st_mtime_ns == stat.st_mtime_ns and f.stat().st_size == stat.st_size
    assert runs_csv() == runs_csv(with_cache=False)
    assert runs_csv() and reads == unreadable  # stored again
    # replaced (a new file renamed over it: another inode)
    data["final_loss"] = 0.123456
    new = f.with_name("metrics.json.new")
    new.write_text(json.dumps(data, indent=2))
    os.replace(new, f)
    first = runs_csv()
    assert reads == [paths[0], *unreadable] and first == runs_csv(with_cache=False)
    assert b"0.123456" in first
    # deleted: left out, never its old row
    f.unlink()
    assert runs_csv() == runs_csv(with_cache=False)
    assert paths[0].encode() not in runs_csv()
    # a summary of part of the campaign keeps the rows of the rest, when it rewrites
    # the cache (one of its files changed) too
    cache.unlink()
    runs_csv(which=paths[10:20])
    assert len(reads) == 10
    runs_csv()
    assert len(reads) == len(paths) - 10 + 1  # the rest, and the earlier run
    shutil.copy(tmp_path / paths[12], tmp_path / f"{paths[12]}.x")
    os.replace(tmp_path / f"{paths[12]}.x", tmp_path / paths[12])
    runs_csv(which=paths[10:20])
    assert reads == [paths[12]]
    runs_csv()
    assert reads == [paths[0], *unreadable]


def test_a_cache_of_another_version_or_a_corrupt_one_is_ignored(campaign, reads, tmp_path,
                                                                monkeypatch):
    root, config, paths = campaign
    monkeypatch.chdir(root)
    cache = tmp_path / RUNS_CACHE
    expected = collect.collect_runs(paths, config).to_csv(index=False)
    collect.collect_runs(paths, config, cache=cache)
    # another config's payload mapping: another version
    other = json.loads(json.dumps(config))
    other["workloads"]["new_one"] = {"payload": "cnn"}
    assert runcache.cache_version(other) != runcache.cache_version(config)
    assert RowStore.load(cache, runcache.cache_version(other)) is None
    for garbage in (b"", b"not a zip", cache.read_bytes()[:1000]):
        cache.write_bytes(garbage)
        reads.clear()
        assert collect.collect_runs(paths, config, cache=cache).to_csv(index=False) == expected
        assert len(reads) == len(paths) + 1  # everything read
        assert RowStore.load(cache, runcache.cache_version(config)) is not None  # rewritten
    # a file of another format
    np.savez(cache, meta=np.frombuffer(b'{"format": 0}', dtype=np.uint8))
    assert RowStore.load(cache, runcache.cache_version(config)) is None


def test_a_row_just_changed_is_used_but_not_stored(campaign, tmp_path, monkeypatch):
    root, config, paths = campaign
    monkeypatch.chdir(root)
    monkeypatch.setattr(cachefiles, "_RACY_NS", 10**18)  # every file "just changed"
    cache = tmp_path / RUNS_CACHE
    df = collect.collect_runs(paths, config, cache=cache)
    assert len(df) == len(paths) - 1 and not cache.exists()


VALUES = [1.5, -0.0, float("nan"), float("inf"), 3, 2**70, -(2**63), True, False, None,
          "text", "", "unicode \u00e9 \ud800 \x00", np.float64(2.5), np.int64(-4),
          np.bool_(True)]


def test_stored_rows_make_the_table_pandas_makes_of_them(tmp_path):
    """Every kind of value a row holds comes back as itself (type and value), and the
    table of stored rows is pd.DataFrame(the rows): the same columns, types and CSV."""
    rng = np.random.default_rng(0)
    rows = []
    for i in range(300):
        keys = ["a", "b", "c", "d"] if i % 3 else ["d", "e", "a"]
        rows.append({k: VALUES[rng.integers(len(VALUES))] if k != "d" else i for k in keys})
    rows.append({"a": [1, 2], "z": 1})  # a list: not stored, still in the table
    store = RowStore()
    added = [store.add(f"p{i}", (0, i, 0, 0, 0), row) for i, row in enumerate(rows)]
    assert all(added[:-1]) and not added[-1]
    store.save(tmp_path / "c.npz", "v")
    loaded = RowStore.load(tmp_path / "c.npz", "v")
    assert loaded.paths == store.paths and loaded.idents == store.idents
    order = list(range(len(rows) - 1))[::-1] + [rows[-1]]
    cases = [(store, order, rows[-2::-1] + [rows[-1]]), (loaded, order, rows[-2::-1] + [rows[-1]])]
    # without a row not stored (the columns made from their kinds of value, not each
    # value), of a few kinds of column each: numbers with and without missing values,
    # ints alone, bools alone, text with numbers
    kinds = RowStore()
    for picks in ([1.5, 3, None], [1.5, 2.0], [3, 4], [3, None], [True, False], [None],
                  ["t", 1.5, None], ["t", True, 3], [np.float64(1.0), 2.0], [2**70, 1]):
        these = []
        for i in range(40):
            row = {"k": picks[i % len(picks)], "x": i} if i % 4 else {"x": i}
            kinds.add(f"q{len(kinds)}", (1, len(kinds), 0, 0, 0), row)
            these.append(row)
        cases.append((kinds, list(range(len(kinds) - 40, len(kinds))), these))
        cases.append((kinds, list(range(len(kinds) - 39, len(kinds))), these[1:]))  # all "k"
    kinds.save(tmp_path / "k.npz", "v")
    cases += [(RowStore.load(tmp_path / "k.npz", "v"), o, r) for s, o, r in cases if s is kinds]
    for source, order, rows_of in cases:
        expected = pd.DataFrame(rows_of)
        got = source.frame(order)
        assert list(got.columns) == list(expected.columns)
        assert got.dtypes.equals(expected.dtypes), (rows_of[:3], got.dtypes, expected.dtypes)
        assert got.to_csv() == expected.to_csv()
        for col in expected:
            for x, y in zip(got[col].tolist(), expected[col].tolist()):
                assert type(x) is type(y) and (x == y or (x != x and y != y)), (col, x, y)
    assert RowStore.load(tmp_path / "c.npz", "another") is None
    merged = RowStore.merged([(loaded, [5, 2]), (store, [0])])
    assert merged.paths == ["p5", "p2", "p0"]
    assert merged.frame([0, 1, 2]).to_csv() == pd.DataFrame([rows[5], rows[2], rows[0]]).to_csv()


def test_the_text_of_rows_written_before_is_the_text_pandas_writes(tmp_path):
    """rowtext.write_csv: the bytes of df.to_csv, the rows whose key is unchanged taken
    from the memo; other columns or types, or a row of several lines, format every row."""
    memo, out = tmp_path / "memo.npz", tmp_path / "t.csv"
    df = pd.DataFrame({"a": [1, 2, 3], "b": ["x", "y,z", None], "c": [0.1, np.nan, 1e20],
                       "d": [True, False, True]})
    keys = [("r", 0), ("r", 1), ("r", 2)]

    def check(frame, keys, **kw):
        rowtext.write_csv(frame, out, keys, memo, "v", **kw)
        assert out.read_bytes() == frame.to_csv(index=False, **kw).encode()

    check(df, keys)
    assert memo.is_file()
    assert rowtext._load_texts(memo, "another signature") == {}
    # a row whose key is unchanged is not formatted again: its old text stands
    changed = df.assign(a=[1, 2, 4])
    rowtext.write_csv(changed, out, keys, memo, "v")
    assert out.read_bytes() == df.to_csv(index=False).encode()
    check(changed, [("r", 0), ("r", 1), ("r", 2, "new")])  # a new key: formatted
    check(changed.iloc[::-1].reset_index(drop=True), keys[::-1])  # reordered
    check(changed, [None, ("r", 1), None])  # rows without a key: always formatted
    check(df.assign(a=[1.0, 2.0, 4.0]), keys)  # another type: every row formatted
    check(df, keys, float_format="%.3g")  # other options
    check(df.assign(b=["x", "two\nlines", None]), keys)  # a row of two lines
    assert not memo.exists()
    check(df, keys)
    memo.write_bytes(b"garbage")
    check(df, keys)


@pytest.mark.parametrize("times", [
    ["2026-11-21T06:10:00+0000", None, "1999-01-02T03:04:05-0500"],  # whole seconds: at once
    ["2026-11-21T06:10:00.5+0000", None],  # a fraction: one by one
    [None, None]])
def test_block_times_are_written_as_isoformat_writes_them(times):
    fmt = lambda t: None if pd.isna(t) else t.isoformat()  # noqa: E731
    series = pd.to_datetime(pd.Series(times), utc=True, errors="coerce")
    assert list(collect._iso_utc(series, fmt)) == [fmt(t) for t in series]


def test_a_memo_gives_back_what_was_put_for_the_same_inputs_only(tmp_path):
    from scalesweep.analyse.memo import Memo

    path = tmp_path / VERDICTS_CACHE
    memo = Memo(path, "v1")
    rows = {memo.digest(("group", 1, [1.5, np.float64(2.0)])): {"a": 1, "b": np.float64(2.5),
                                                                  "c": "text", "d": None},
            memo.digest(("group", 2)): {"a": pd.NA}}  # not kept: computed every time
    for key, row in rows.items():
        assert memo.get(key) is None
        memo.put(key, row)
    memo.save()
    again = Memo(path, "v1")
    first = next(iter(rows))
    got = again.get(first)
    assert got == rows[first] and [type(v) for v in got.values()] == [int, np.float64, str,
                                                                       type(None)]
    assert again.get(memo.digest(("group", 1, [1.5, 2.0]))) is None  # another type: another key
    assert len(again.old) == 1 and Memo(path, "v2").old == {}
    path.write_bytes(b"garbage")
    assert Memo(path, "v1").old == {}


def test_huge_inode_numbers_are_kept_and_a_killed_writers_file_is_removed(tmp_path):
    """Hashed inode numbers of 2^63 and above (int64 overflows) are stored as text; the
    cache gets the umask's permissions, and a temporary file a killed writer left is
    removed by the next save (review of #31)."""
    store = RowStore()
    big = (1, 2**64 - 5, 10, 2**63 + 1, 7)
    assert store.add("p", big, {"a": 1.5})
    left = tmp_path / f".{RUNS_CACHE}.abc.tmp"
    left.write_bytes(b"half a file")
    os.utime(left, (time.time() - 2 * cachefiles.STALE_TMP_S,) * 2)
    young = tmp_path / f".{RUNS_CACHE}.def.tmp"  # another writer's, still writing
    young.write_bytes(b"")
    umask = os.umask(0o022)
    try:
        store.save(tmp_path / RUNS_CACHE, "v")
    finally:
        os.umask(umask)
    loaded = RowStore.load(tmp_path / RUNS_CACHE, "v")
    assert loaded.idents == [big] and loaded.frame([0]).to_dict("records") == [{"a": 1.5}]
    assert stat.S_IMODE((tmp_path / RUNS_CACHE).stat().st_mode) == 0o644
    assert not left.exists() and young.exists()


def test_a_cache_that_cannot_be_written_never_fails_the_summary(campaign, tmp_path, monkeypatch):
    root, config, paths = campaign
    def refuse(*args, **kwargs):
        raise OverflowError("a value no cache can hold")
    monkeypatch.setattr(runcache, "save_npz_atomic", refuse)
    monkeypatch.setattr(rowtext, "save_npz_atomic", refuse)
    monkeypatch.chdir(root)
    without = summary(root, config, paths, "plain", cache=False)
    assert summary(root, config, paths, "unwritable") == without
    assert not list((root / "unwritable").glob(".*.npz"))


MOUNTINFO = """\
22 1 259:1 / / rw,relatime shared:1 - ext4 /dev/root rw
30 22 0:40 / /home rw,relatime shared:2 - nfs4 server:/home rw,vers=4.2,acregmax=60
31 30 0:41 / /home/my\\040project rw shared:3 - lustre 10.0.0.1@o2ib:/orion rw
32 22 0:42 / /scratch rw master:4 - nfs server:/scratch rw
"""


def test_the_file_systems_files_are_opened_on_are_told_from_mountinfo():
    table = [(m.dev, m.point, m.fstype) for m in mounts(MOUNTINFO)]
    assert table == [(os.makedev(259, 1), "/", "ext4"), (os.makedev(0, 40), "/home", "nfs4"),
                      (os.makedev(0, 41), "/home/my project", "lustre"),  # (an escaped space)
                      (os.makedev(0, 42), "/scratch", "nfs")]
    assert mounts("garbage\n\n1 2 3") == []
    # the devices whose files are opened to be looked at: NFS's, not Lustre's or ext4's
    assert cachefiles.attribute_cached_devices(MOUNTINFO) == {os.makedev(0, 40),
                                                            os.makedev(0, 42)}
    # this machine's: the repository's device is a mount's, and opened where it is NFS's
    here = {m.dev: m.fstype for m in mounts()}
    dev = os.stat(REPO).st_dev
    assert dev in here
    assert (here[dev] in cachefiles.ATTRIBUTE_CACHED) == (dev in cachefiles.attribute_cached_devices())


def test_on_nfs_a_file_the_cache_answers_for_is_opened_not_only_statted(campaign, reads,
                                                                        tmp_path, monkeypatch):
    """NFS: a stat may answer from the client's attribute cache, giving a file replaced
    on another node its old identity for up to a minute; the files the cache would answer
    for are opened there (close-to-open consistency), and a replaced one is read again."""
    root, config, paths = campaign
    shutil.copytree(root / "results", tmp_path / "results")
    monkeypatch.chdir(tmp_path)
    cache = tmp_path / "summary" / RUNS_CACHE
    cache.parent.mkdir()
    collect.collect_runs(paths, config, cache=cache)
    old = cachefiles.identities([paths[0]])[0]
    data = json.loads(Path(paths[0]).read_text())
    data["final_loss"] = 0.123456
    new = Path(paths[0]).with_name("metrics.json.new")
    new.write_text(json.dumps(data, indent=2))
    os.replace(new, paths[0])
    real = cachefiles.identities

    def attribute_cache(which, now=None):  # the client's cache: the replaced file's old identity
        return [old if p == paths[0] else got for p, got in zip(which, real(which, now))]

    monkeypatch.setattr(cachefiles, "identities", attribute_cache)
    monkeypatch.setattr(cachefiles, "attribute_cached_devices", lambda: frozenset())
    reads.clear()
    stale = collect.collect_runs(paths, config, cache=cache).to_csv(index=False)
    assert "0.123456" not in stale and paths[0] not in reads  # a stat alone: the old row
    # the metrics files on NFS (the cache's own file system does not matter)
    monkeypatch.setattr(cachefiles, "attribute_cached_devices",
                        lambda: frozenset({os.stat(paths[0]).st_dev}))
    reads.clear()
    got = collect.collect_runs(paths, config, cache=cache).to_csv(index=False)
    assert "0.123456" in got and paths[0] in reads
    assert got == collect.collect_runs(paths, config).to_csv(index=False)


def test_the_rows_of_deleted_files_leave_the_cache(campaign, reads, tmp_path, monkeypatch):
    root, config, paths = campaign
    shutil.copytree(root / "results", tmp_path / "results")
    monkeypatch.chdir(tmp_path)
    cache = tmp_path / RUNS_CACHE
    version = runcache.cache_version(config)
    collect.collect_runs(paths, config, cache=cache)
    assert {paths[3], paths[5]} <= set(RowStore.load(cache, version).index())
    Path(paths[3]).unlink()  # a run deleted; then a summary of part of the campaign,
    shutil.copy(paths[12], f"{paths[12]}.x")  # one of whose files changed (a rewrite)
    os.replace(f"{paths[12]}.x", paths[12])
    collect.collect_runs(paths[10:20], config, cache=cache)
    kept = set(RowStore.load(cache, version).index())
    assert paths[3] not in kept and {paths[5], paths[12]} <= kept


def test_a_file_server_whose_clock_is_behind_does_not_make_a_new_file_look_old(
        tmp_path, monkeypatch):
    f = tmp_path / "metrics.json"
    f.write_text("{}")
    assert cachefiles.identities([str(f)])[0][1]  # written just now: fresh
    real = time.time_ns
    # our clock 1000 s ahead of the file system's (its server's clock behind ours)
    monkeypatch.setattr(time, "time_ns", lambda: real() + 10**12)
    assert not cachefiles.identities([str(f)])[0][1]  # by our clock alone: "old"
    now = cachefiles.file_system_now(tmp_path)  # the earlier of ours and the file system's
    assert now < real() + 10**9
    assert cachefiles.identities([str(f)], now)[0][1]  # fresh by the file system's clock
    # our clock behind: ours, and the file is fresh by it
    monkeypatch.setattr(time, "time_ns", lambda: real() - 10**12)
    assert cachefiles.file_system_now(tmp_path) < real() - 10**12 + 10**9
    assert cachefiles.identities([str(f)], cachefiles.file_system_now(tmp_path))[0][1]
    monkeypatch.setattr(time, "time_ns", real)
    assert not list(tmp_path.glob(".now.*"))
    # a killed summary's temporary file: removed by a later one once it is old
    left = tmp_path / ".now.abc.tmp"
    left.write_bytes(b"")
    cachefiles.file_system_now(tmp_path)
    assert left.exists()
    os.utime(left, (time.time() - 2 * cachefiles.STALE_TMP_S,) * 2)
    cachefiles.file_system_now(tmp_path)
    assert not left.exists()


def test_a_cache_version_that_cannot_be_read_whole_is_still_a_version(tmp_path):
    """An editor's lock file beside a module (.#collect.py: a symlink to nothing) and an
    unreadable file neither fail the version nor go unnoticed."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text("x = 1\n")
    digest = runcache._source_digest.__wrapped__
    first = digest(str(tmp_path))
    (tmp_path / "pkg" / ".#a.py").symlink_to(tmp_path / "nowhere")
    assert digest(str(tmp_path)) == first
    (tmp_path / "pkg" / "b.py").symlink_to(tmp_path / "nowhere")
    assert digest(str(tmp_path)) != first
    (tmp_path / "pkg" / "b.py").unlink()
    (tmp_path / "pkg" / "a.py").write_text("x = 2\n")
    assert digest(str(tmp_path)) != first


def test_runs_and_points_written_beside_the_other_tables_are_the_same_bytes(
        campaign, reads, monkeypatch):
    """A large campaign's runs.csv and points.csv are written by a second process while
    the first makes the other tables: the same files, the same log lines; its failure
    fails the summary, naming it."""
    from scalesweep.analyse import aggregate

    root, config, paths = campaign
    monkeypatch.chdir(root)
    alone = summary(root, config, paths, "alone", cache=False)
    notes_alone: list = []
    summary(root, config, paths, "alone", cache=False, notes=notes_alone)
    monkeypatch.setattr(aggregate, "BESIDE_MIN_ROWS", 1)
    monkeypatch.setattr(aggregate, "default_workers", lambda: 2)
    started = []
    real = aggregate.in_second_process
    monkeypatch.setattr(aggregate, "in_second_process",
                        lambda fn: started.append(fn) or real(fn))
    notes: list = []
    assert summary(root, config, paths, "beside", notes=notes) == alone
    assert summary(root, config, paths, "beside", notes=notes) == alone  # (warm)
    assert len(started) == 2
    assert sorted(notes[:len(notes_alone)]) == sorted(notes_alone)
    timings: dict = {}
    files = outputs(root / "beside")
    tables = write_summary(paths, config, files, None, timings=timings)
    assert {"runs_csv", "point_states", "beside_wait"} <= set(timings)
    assert tables["points"].to_csv(index=False).encode() == alone["points"]

    def broken(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(aggregate, "write_csv", broken)
    with pytest.raises(RuntimeError, match="second process failed.*No space left on device"):
        write_summary(paths, config, files, None)


def test_runs_parquet_holds_runs_csv_rows_typed(campaign, monkeypatch):
    """results/summary/runs.parquet (issue #41): the rows of runs.csv, column by column,
    read back by pandas through pyarrow; numbers stay numbers, the flags booleans, and a
    column whose runs recorded a number beyond int64 or mixed types is text."""
    root, config, paths = campaign
    monkeypatch.chdir(root)
    summary(root, config, paths, "parquet", cache=False)
    csv = pd.read_csv(root / "parquet" / "runs.csv")
    pq = pd.read_parquet(root / "parquet" / "runs_parquet.csv")
    assert list(pq.columns) == list(csv.columns) and len(pq) == len(csv)
    assert pq["disturbed"].dtype == bool and pq["disturbed"].sum() == csv["disturbed"].sum()
    for col in csv.columns:
        if pd.api.types.is_numeric_dtype(csv[col]) and pd.api.types.is_numeric_dtype(pq[col]):
            assert np.allclose(csv[col].to_numpy(float), pq[col].to_numpy(float),
                               equal_nan=True, rtol=1e-9), col
        else:  # text, as runs.csv has it (missing values missing in both); pandas's CSV
            # reader stops a value at a NUL byte, Parquet keeps it whole
            a = csv[col].astype(object).where(csv[col].notna(), None)
            b = pq[col].astype(object).where(pq[col].notna(), None)
            # (and reads an empty text as missing)
            assert [None if x is None else str(x) for x in a] == \
                [None if y is None or y == "" else str(y).split("\x00")[0] for y in b], col
    assert (pq["mode"] == "unicode \u00e9\u4e2d \\ \" \x00 end").sum() == 1
