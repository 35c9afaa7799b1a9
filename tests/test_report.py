"""The publishable report end to end: a tiny real sweep in which one point really fails
(its payload is SIGKILLed), the partial report made anyway (analysis.partial), opened in
a real headless Chromium; then the re-run that completes the sweep and the report."""

from __future__ import annotations

import base64
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


def report_items(container: bool) -> list[str]:
    """Every report() item this campaign must have in report.html."""
    items = [f"results/summary/{t}.csv" for t in (
        "runs", "scaling", "llm", "overhead", "epochs", "provenance", "missing", "startup",
        "accuracy_parity", "achieved_rate", "mpi", "memory", "made", "significance",
        "rules", "drift")]
    items += ["results/plots/scaling.png", "results/plots/llm.png",
              "results/plots/completeness.png", "results/plots/drift.png"]
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


def headless(binary: str, html: Path, tmp: Path, *mode: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
         "--no-first-run", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", f"--user-data-dir={tmp}", "--window-size=1400,2000",
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


def opening(report: Path, view: dict) -> Path:
    """A copy of report.html that, once loaded, shows `view` (what clicking through the
    menu to a result does): the report has no URL for a result."""
    html = report.read_text()
    at = html.rindex("</body>")
    script = ('<script>window.addEventListener("load", function () { setTimeout(function () '
              f'{{ app.setView({json.dumps(view)}); }}, 300); }});</script>')
    copy = report.with_name("report-view.html")
    copy.write_text(html[:at] + script + html[at:])
    return copy


def screenshot_ok(shot: Path) -> None:
    from PIL import Image

    assert shot.is_file() and shot.stat().st_size > 20_000, f"no screenshot {shot}"
    with Image.open(shot) as img:
        assert img.size == (1400, 2000)
        colors = img.convert("RGB").getcolors(maxcolors=1 << 20)
    assert colors is None or len(colors) > 50, f"{shot} is (nearly) one colour"


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
    cfg["containers"] = {"startup_repeats": 3}
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
    assert len(epochs) == 2 * (n_points - 1) and epochs["warmup"].sum() == n_points - 1
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
