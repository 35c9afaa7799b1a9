"""The publishable report end to end: a tiny real sweep in which one point really fails
(its payload is SIGKILLed), the partial report made anyway (analysis.partial), opened in
a real headless Chromium (driven by a script run in the page: what its first screen
shows, a table item opened, every figure); then the re-run that completes the sweep and
the report."""

from __future__ import annotations

import base64
import html as html_module
import io
import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from conftest import REPO, have, measured_by, payload_pids, run_snakemake, tiny_config
from scalesweep.report.pages import forest_labels

pytestmark = pytest.mark.integration
PROFILE = str(REPO / "profiles" / "local")
PARTIAL = ("--config", "analysis={partial: true}")
# Not a baseline point (ranks 1 is): with it gone the scaling table still has its baseline.
WORKLOAD = "cnn_ddp"
CONTAINER_TOOLS = ("ch-run", "ch-image", "debootstrap")
# native and Charliecloud where installed (partial_campaign): then native is measured in
# charliecloud's blocks (its arm), else alone (its own arm)
CONTAINER = all(have(t) for t in CONTAINER_TOOLS)
TARGET = f"cnn_ddp/{'charliecloud' if CONTAINER else 'native'}/n1-g0-r2-t1/rep2/native"


TABLES = ("runs", "scaling", "llm", "overhead", "epochs", "provenance", "missing", "startup",
          "accuracy_parity", "achieved_rate", "mpi", "memory", "made", "significance",
          "rules", "drift")


def report_items(container: bool) -> list[str]:
    """Every report() item this campaign must have in report.html: each table as its CSV
    and as its HTML page, the first screen as a page of its own, the figures."""
    items = [f"results/summary/{t}.{kind}" for t in TABLES for kind in ("csv", "html")]
    items.append("results/summary/front.html")
    items += ["results/plots/scaling.png", "results/plots/completeness.png",
              "results/plots/drift.png"]  # no LLM workload: no LLM figure (it would be empty)
    items += [f"results/plots/{kind}/{WORKLOAD}.png"
              for kind in ("efficiency", "overhead", "epoch_times", "memory",
                           "memory_timeline")]
    if container:
        items.append("results/plots/startup/charliecloud.png")
    return items


CATEGORIES = ("Scaling efficiency", "Container overhead", "Per-epoch time", "Peak memory",
              "Provenance", "Sweep completeness", "Container start-up", "About this report",
              "Machine drift")


# --- helpers -------------------------------------------------------------------------------

def chromium() -> str:
    """The Chromium binary; installed with apt-get when missing and possible (root)."""
    for name in ("chromium", "chromium-browser"):
        if have(name):
            return shutil.which(name)
    if os.geteuid() == 0 and have("apt-get"):
        proc = subprocess.run(["apt-get", "install", "-y", "chromium"], capture_output=True,
                              text=True, timeout=1200)
        if proc.returncode == 0 and have("chromium"):
            return shutil.which("chromium")
        pytest.skip(f"chromium cannot be installed: apt-get install -y chromium failed:\n"
                    f"{proc.stdout[-1500:]}{proc.stderr[-1500:]}")
    pytest.skip("chromium not installed and cannot be installed here (not root or no apt-get):"
                " apt-get install chromium (tools/install.sh --test installs it)")


def headless(binary: str, html: Path, tmp: Path, *mode: str,
             size: tuple[int, int] = (1400, 2000)) -> subprocess.CompletedProcess:
    return subprocess.run(
        [binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
         "--no-first-run", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", f"--user-data-dir={tmp}", f"--window-size={size[0]},{size[1]}",
         "--virtual-time-budget=10000", *mode, html.resolve().as_uri()],
        capture_output=True, text=True, timeout=180,
    )


def embedded(html: str, var: str) -> dict:
    """The `<script id="x"> var x = {...};` object of Snakemake 9's report (results, categories)."""
    match = re.search(rf'<script id="{var}">\s*var {var} = ', html)
    assert match, f"report.html has no script {var}"
    return json.JSONDecoder().raw_decode(html, match.end())[0]


def without_scripts(html: str) -> str:
    return re.sub(r"<script\b.*?</script>", "", html, flags=re.S)


def injected(report: Path, script: str, name: str) -> Path:
    """A copy of report.html with `script` run in it (a reader's clicks, or a probe)."""
    html = report.read_text()
    at = html.rindex("</body>")
    copy = report.with_name(name)
    copy.write_text(html[:at] + f"<script>{script}</script>" + html[at:])
    return copy


def opening(report: Path, view: dict) -> Path:
    """A copy of report.html that, once loaded, shows `view` (what clicking through the
    menu to a result does): the report has no URL for a result."""
    return injected(report, 'window.addEventListener("load", function () { setTimeout('
                    f'function () {{ app.setView({json.dumps(view)}); }}, 300); }});',
                    "report-view.html")


def screenshot_ok(shot: Path, size: tuple[int, int] = (1400, 2000)) -> None:
    from PIL import Image

    assert shot.is_file() and shot.stat().st_size > 20_000, f"no screenshot {shot}"
    with Image.open(shot) as img:
        assert img.size == size
        colors = img.convert("RGB").getcolors(maxcolors=1 << 20)
    assert colors is None or len(colors) > 50, f"{shot} is (nearly) one colour"


# The first screen: report.html as it opens in a browser window of this size, no click.
FIRST_SCREEN = (1400, 900)
# What report.html shows, read in Chromium by a script run in it once the report has
# rendered: the verdict table and caveats of the first screen (their text; each row on the
# screen and not covered by anything: its centre hits it), every figure as the browser
# decodes it, and one table item opened as a reader opens it (the content pane's frame
# shows the item) and rendered (its page in a frame the probe can read: the header, the
# rows, the rows after a click on a column's header). JSON in <pre id="probe">.
PROBE = r"""
(function () {
  function seen(el) {
    var r = el.getBoundingClientRect();
    if (!r.width || !r.height || r.top < 0 || r.left < 0 || r.bottom > innerHeight ||
        r.right > innerWidth) { return false; }
    var hit = document.elementFromPoint((r.left + r.right) / 2, (r.top + r.bottom) / 2);
    return !!hit && (hit === el || el.contains(hit));
  }
  function texts(cells) { return Array.prototype.map.call(cells, function (c) {
    return c.textContent.trim(); }); }
  function rows(table) { return Array.prototype.map.call(table.tBodies[0].rows, function (r) {
    return texts(r.cells); }); }
  function done(out) {
    var pre = document.createElement("pre");
    pre.id = "probe";
    pre.textContent = JSON.stringify(out);
    document.body.appendChild(pre);
  }
  function wait(ms) { return new Promise(function (ok) { setTimeout(ok, ms); }); }
  window.addEventListener("load", function () { wait(500).then(function () {
    var out = {viewport: [innerWidth, innerHeight], figures: {}};
    var verdicts = document.getElementById("scalesweep-verdicts");
    if (verdicts) {
      out.verdicts = {head: texts(verdicts.tHead.rows[0].cells), rows: rows(verdicts),
                      seen: Array.prototype.map.call(verdicts.tBodies[0].rows, seen)};
    }
    var forest = document.getElementById("scalesweep-forest");
    if (forest) {
      var box = forest.getBoundingClientRect();
      out.forest = {top: box.top, bottom: box.bottom, width: box.width, height: box.height,
                    on_screen: box.height > 0 && box.top >= 0 && box.bottom <= innerHeight,
                    texts: texts(forest.querySelectorAll("text")),
                    table_top: verdicts ? verdicts.getBoundingClientRect().top : null};
    }
    var caveats = document.getElementById("scalesweep-caveats");
    if (caveats) {
      out.caveats = {text: caveats.textContent, top: caveats.getBoundingClientRect().top};
    }
    out.front = (document.querySelector(".scalesweep-front") || {}).textContent || "";
    var figures = Object.keys(results).filter(function (p) {
      return results[p].mime_type === "image/png"; });
    return Promise.all(figures.map(function (p) { return new Promise(function (ok) {
      var img = new Image();
      img.onload = function () { out.figures[p] = [img.naturalWidth, img.naturalHeight]; ok(); };
      img.onerror = function () { out.figures[p] = [0, 0]; ok(); };
      img.src = results[p].data_uri;
    }); })).then(function () {
      var item = results[__TABLE__];
      app.setView({content: "html", contentPath: item.data_uri, resultPath: __TABLE__});
      return wait(300).then(function () {
        var frame = document.querySelector("iframe");
        out.opened = {shows_item: !!frame && frame.getAttribute("src") === item.data_uri,
                      seen: !!frame && seen(frame)};
        return fetch(item.data_uri);
      });
    }).then(function (r) { return r.text(); }).then(function (page) {
      return new Promise(function (ok) {
        var frame = document.createElement("iframe");
        frame.onload = function () { ok(frame.contentDocument); };
        frame.srcdoc = page;
        document.body.appendChild(frame);
      });
    }).then(function (doc) {
      var table = doc.querySelector("table.sortable");
      out.table = {head: texts(table.tHead.rows[0].cells), rows: rows(table),
                   common: texts(doc.querySelectorAll("ul.common li b"))};
      var col = out.table.head.indexOf(__SORT__);
      table.tHead.rows[0].cells[col].click();
      table.tHead.rows[0].cells[col].click();
      out.table.sorted = rows(table).map(function (r) { return r[col]; });
      done(out);
    });
  }).catch(function (e) { done({error: String(e) + " " + e.stack}); }); });
})();
"""


def probe(browser: str, report: Path, tmp: Path, table: str, sort: str) -> dict:
    """What report.html shows in Chromium (PROBE), with `table` opened, sorted by `sort`."""
    script = PROBE.replace("__TABLE__", json.dumps(table)).replace("__SORT__", json.dumps(sort))
    page = injected(report, script, "report-probe.html")
    proc = headless(browser, page, tmp / "profile-probe", "--dump-dom", size=FIRST_SCREEN)
    match = re.search(r'<pre id="probe">(.*?)</pre>', proc.stdout, flags=re.S)
    assert match, f"the probe did not report: {proc.stderr[-2000:]}"
    out = json.loads(html_module.unescape(match.group(1)))
    assert "error" not in out, out["error"]
    return out


def figure_ok(data: bytes, name: str) -> None:
    """A figure with something drawn: many colours, and coloured marks (the data; axes,
    grid and text are grey)."""
    import numpy as np
    from PIL import Image

    with Image.open(io.BytesIO(data)) as img:
        colors = img.convert("RGB").getcolors(maxcolors=1 << 20)
        hsv = np.asarray(img.convert("HSV"))
    assert colors is None or len(colors) > 50, f"{name} is (nearly) one colour"
    saturated = int(((hsv[..., 1] > 80) & (hsv[..., 2] > 60)).sum())
    assert saturated > hsv[..., 0].size / 2000, f"{name} draws nothing in colour"


def kill_target_payload(marker: str, stop: Path, killed: list, deadline: float) -> None:
    """SIGKILL the target point's training processes (all ranks) whenever they run."""
    while time.time() < deadline and not stop.exists():
        for pid in payload_pids(marker):
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except ProcessLookupError:
                pass
        time.sleep(0.1)


def check_embedded(wd: Path, items: list[str]) -> dict:
    """report.html embeds every item byte for byte, and every category; its results."""
    html = (wd / "report.html").read_text(errors="replace")
    results = embedded(html, "results")
    missing = [item for item in items if item not in results]
    assert not missing, f"not in report.html: {missing}; it has {sorted(results)}"
    for item in items:
        uri = results[item]["data_uri"]
        assert base64.b64decode(uri.split("base64,", 1)[1]) == (wd / item).read_bytes(), item
    categories = embedded(html, "categories")
    assert set(CATEGORIES) <= set(categories), categories
    return results


def check_report(wd: Path, items: list[str], tmp: Path) -> dict:
    """report.html embeds every item byte for byte, and renders in a real browser."""
    results = check_embedded(wd, items)
    report = wd / "report.html"
    html = report.read_text(errors="replace")
    browser = chromium()
    shot = tmp / "report.png"
    proc = headless(browser, report, tmp / "profile-shot", f"--screenshot={shot}")
    assert shot.is_file(), proc.stderr[-3000:]
    screenshot_ok(shot)
    dom = without_scripts(headless(browser, report, tmp / "profile-dom", "--dump-dom").stdout)
    assert not [c for c in CATEGORIES if c in without_scripts(html)], "must come from the JS"
    missing = [c for c in CATEGORIES if c not in dom]
    assert not missing, f"the report's menu did not render {missing}: {dom[:3000]}"

    # Open one figure as a reader would: its subcategory lists it with its labels, the
    # content pane shows the embedded PNG.
    figure = f"results/plots/overhead/{WORKLOAD}.png"
    view = {"navbarMode": "subcategory", "category": "Container overhead",
            "subcategory": WORKLOAD, "content": "img", "resultPath": figure,
            "contentPath": results[figure]["data_uri"]}
    page = opening(report, view)
    shot = tmp / "overhead.png"
    headless(browser, page, tmp / "profile-view", f"--screenshot={shot}")
    screenshot_ok(shot)
    dom = without_scripts(headless(browser, page, tmp / "profile-view-dom", "--dump-dom").stdout)
    assert 'src="data:image/png' in dom and f"filename={WORKLOAD}.png" in dom
    assert "nodes 1, ranks 1-2" in dom and "overhead per point, 95% CI" in dom
    return results


# --- the campaign --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def partial_campaign(tmp_path_factory):
    """A real sweep (native, plus Charliecloud where installed) with one point failed,
    then aggregated and reported with analysis.partial."""
    if not have("mpirun"):
        pytest.skip("mpirun not installed (apt-get install openmpi-bin)")
    container = CONTAINER
    cfg = tiny_config()
    cfg["sweep"].update(repeats=2, ranks_per_node=[1, 2],
                        runtimes=["native", "charliecloud"] if container else ["native"])
    cfg["containers"] = {"startup_repeats": 3, "startup_trace": False}
    wd = tmp_path_factory.mktemp("report")
    (wd / "config").mkdir()
    (wd / "config" / "config.yaml").write_text(yaml.safe_dump(cfg))

    stop = wd / "results" / "runs" / TARGET / "failure.json"
    killed: list = []
    watcher = threading.Thread(target=kill_target_payload,
                               args=(f"{wd}/results/runs/{TARGET}/", stop, killed, time.time() + 1500),
                               daemon=True)
    watcher.start()
    first = run_snakemake(wd, "--profile", PROFILE, check=False, timeout=1800)
    watcher.join(timeout=5)
    assert killed, "the target point's payload never ran"
    assert first.returncode != 0, "the sweep must report the failed point"
    assert stop.is_file() and not (stop.parent / "metrics.json").exists()
    assert not (wd / "results/summary/runs.csv").exists(), "aggregate waits for every point"

    run_snakemake(wd, "--profile", PROFILE, *PARTIAL)
    run_snakemake(wd, "--profile", PROFILE, *PARTIAL, "--report", "report.html")
    return wd, container


def test_partial_run_does_not_retry_the_failed_point(partial_campaign):
    wd, _ = partial_campaign
    assert not (wd / "results/runs" / TARGET / "metrics.json").exists()
    dry = run_snakemake(wd, "--profile", PROFILE, *PARTIAL, "-n").stdout
    assert "rule run_point" not in dry


def test_missing_table_names_the_failed_point(partial_campaign):
    wd, container = partial_campaign
    missing = pd.read_csv(wd / "results/summary/missing.csv")
    assert list(missing["path"]) == [TARGET]
    row = missing.iloc[0]
    assert row["state"] == "failed" and row["log"].endswith(f"{TARGET}/run.1.log")
    assert "signal" in row["reason"] or "exit code" in row["reason"]
    n_points = 8 if container else 4
    provenance = pd.read_csv(wd / "results/summary/provenance.csv")
    assert len(provenance) == n_points - 1 and provenance["git_commit"].notna().all()
    epochs = pd.read_csv(wd / "results/summary/epochs.csv")
    assert len(epochs) == 2 * (n_points - 1) and epochs["first_epoch"].sum() == n_points - 1
    scaling = pd.read_csv(wd / "results/summary/scaling.csv")
    native_2 = scaling[(scaling["runtime"] == "native") & (scaling["count"] == 2)].iloc[0]
    assert native_2["n"] == 1 and "single_repeat" in native_2["flag"]


def test_container_overhead_and_startup_tables(partial_campaign):
    wd, container = partial_campaign
    if not container:
        pytest.skip(f"Charliecloud not installed ({', '.join(CONTAINER_TOOLS)}): native only")
    startup = pd.read_csv(wd / "results/summary/startup.csv")
    assert list(startup["probe"]) == ["noop", "python", "import_torch"]
    assert (startup["runtime"] == "charliecloud").all() and startup["n"].eq(3).all()
    overhead = pd.read_csv(wd / "results/summary/overhead.csv")
    assert len(overhead) == 2  # 1 and 2 ranks; the 2-rank native side has one repeat
    two = overhead[overhead["ranks"] == 2].iloc[0]
    assert two["n_native"] == 1 and pd.isna(two["overhead_ci95_low_pct"])


def test_partial_report_renders_in_chromium(partial_campaign, tmp_path):
    wd, container = partial_campaign
    results = check_report(wd, report_items(container), tmp_path)
    efficiency = results[f"results/plots/efficiency/{WORKLOAD}.png"]
    assert efficiency["labels"]["workload"] == WORKLOAD
    assert efficiency["labels"]["scale"] == "nodes 1, ranks 1-2"
    shutil.copy(tmp_path / "report.png", wd / "report-partial.png")


def test_first_screen_shows_the_verdicts_and_tables_render_in_chromium(partial_campaign,
                                                                       tmp_path):
    """report.html as it opens, no click, in a 1400x900 window: the forest plot of
    overhead.csv's rows above the verdict table, whole on the screen; the verdict table
    with overhead.csv's verdicts and numbers, every row on the screen; the caveats name the
    failed point; every figure decodes and draws something; a table item opens as a table
    (provenance: one row per run, every column either in the table or listed once above
    it, sorting on a click)."""
    wd, container = partial_campaign
    report = wd / "report.html"
    browser = chromium()
    shot = tmp_path / "first-screen.png"
    headless(browser, report, tmp_path / "profile-first", f"--screenshot={shot}",
             size=FIRST_SCREEN)
    screenshot_ok(shot, FIRST_SCREEN)
    shutil.copy(shot, wd / "report-first-screen.png")
    seen = probe(browser, report, tmp_path, "results/summary/provenance.html", "repeat")
    # the page's viewport: the window less what the browser takes (headless: the same)
    width, height = seen["viewport"]
    assert width == FIRST_SCREEN[0] and FIRST_SCREEN[1] * 0.75 < height <= FIRST_SCREEN[1]

    overhead = pd.read_csv(wd / "results/summary/overhead.csv")
    if overhead.empty:
        assert "verdicts" not in seen and "No container comparison" in seen["front"]
        assert "forest" not in seen
    else:
        # the forest plot above the table, whole on the first screen, a row label per row
        forest = seen["forest"]
        assert forest["on_screen"] and forest["width"] > 300, forest
        assert forest["bottom"] <= forest["table_top"], forest
        labels = [t.removesuffix("  [A/A]") for t in forest["texts"]]
        assert [t for t in labels if t in forest_labels(overhead)] == forest_labels(overhead)
        shown = seen["verdicts"]
        assert shown["head"][:4] == ["workload", "point", "runtime", "verdict"], shown["head"]
        assert len(shown["rows"]) == len(overhead) and all(shown["seen"]), shown
        for (_, row), cells in zip(overhead.iterrows(), shown["rows"]):
            text = " | ".join(cells)
            assert cells[2] == row["runtime"] and row["verdict_text"] in text, text
            for value in ("overhead_pct", "overhead_ci95_low_pct", "overhead_ci95_high_pct"):
                assert pd.isna(row[value]) or f"{row[value]:+.1f}%" in text, text
            assert f"{row['n']} " in cells[5], cells
    missing = pd.read_csv(wd / "results/summary/missing.csv")
    assert list(missing["path"]) == [TARGET]
    assert TARGET in seen["caveats"]["text"] and "1 failed" in seen["caveats"]["text"]
    assert seen["caveats"]["top"] < height, "the caveats start on the first screen"

    results = embedded(report.read_text(errors="replace"), "results")
    figures = [p for p, r in results.items() if r["mime_type"] == "image/png"]
    assert figures and sorted(seen["figures"]) == sorted(figures)
    assert "results/plots/llm.png" not in figures  # no LLM workload here
    for path in figures:
        assert min(seen["figures"][path]) > 0, f"{path} does not decode in Chromium"
        figure_ok((wd / path).read_bytes(), path)

    assert seen["opened"] == {"shows_item": True, "seen": True}, seen["opened"]
    provenance = pd.read_csv(wd / "results/summary/provenance.csv")
    table = seen["table"]
    assert len(table["rows"]) == len(provenance) and len(table["head"]) > 3, table["head"]
    assert sorted(table["head"] + table["common"]) == sorted(provenance.columns)
    assert "path" in table["head"] and "git_commit" in table["common"]  # one commit here
    repeats = [int(r) for r in table["sorted"]]
    assert repeats == sorted(provenance["repeat"], reverse=True), repeats


def test_rerun_redoes_only_the_failed_point_and_completes_the_report(partial_campaign):
    """Last: it completes the campaign the tests above look at. The complete report is
    the partial one's template with more results: its embedded items are checked here,
    its rendering in Chromium on the partial report (test_partial_report_renders_...)."""
    wd, container = partial_campaign
    proc = run_snakemake(wd, "--profile", PROFILE)
    assert measured_by(proc.stdout + proc.stderr) == [TARGET]
    run_snakemake(wd, "--profile", PROFILE, "--report", "report.html")
    assert pd.read_csv(wd / "results/summary/missing.csv").empty
    assert len(pd.read_csv(wd / "results/summary/provenance.csv")) == (8 if container else 4)
    check_embedded(wd, report_items(container))


def test_every_summary_table_gives_each_estimate_inside_its_own_interval(partial_campaign):
    """Issue 40, case 8: every results/summary/*.csv of the completed campaign, every
    estimate with an interval (scalesweep.record.columns.intervals: overhead, its
    equivalence interval, scaling's mean and efficiency, the decomposition's differences,
    accuracy parity, the achieved rate, ...): low <= estimate <= high."""
    from test_intervals import checked_intervals, outside_own_interval, summary_tables

    wd, container = partial_campaign
    tables = summary_tables(wd / "results/summary")
    checked = checked_intervals(tables)
    assert {("scaling", "time_s"), ("scaling", "efficiency_pct")} <= checked, checked
    if container:
        assert {("overhead", "overhead_pct"), ("decomposition", "difference")} <= checked
    assert outside_own_interval(tables) == []
