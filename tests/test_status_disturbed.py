"""`scalesweep status` on disturbed runs: listed, left out, and how they get replaced."""

import yaml

from conftest import tiny_config
from scalesweep.cli import main
from scalesweep.metrics import write_metrics
from scalesweep.sweep import sweep_points


def _campaign(tmp_path, adaptive: bool, measured: int):
    cfg = tiny_config()
    cfg["sweep"].update(runtimes=["native"], ranks_per_node=[1], repeats=3)
    cfg["measurement"] = {"adaptive": adaptive, "max_repeats": 4}
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "config.yaml").write_text(yaml.safe_dump(cfg))
    point = sweep_points(cfg)[0]
    for k in range(1, measured + 1):
        p = type(point)(**{**point.as_dict(), "repeat": k})
        write_metrics(tmp_path / "results" / "runs" / p.path / "metrics.json", {
            "point": p.as_dict(), "epoch_s": [1.0, 1.0], "disturbed": k == 2,
            "train_s": 2.0, "final_loss": 0.5, "final_accuracy": 0.9,
            "interference": {"reasons": ["vm: outside processes used 48.0% of the node's CPUs"]},
        })
    return tmp_path


def test_status_lists_a_disturbed_run_and_says_the_same_command_replaces_it(tmp_path, capsys):
    wd = _campaign(tmp_path, adaptive=True, measured=3)
    assert main(["status", "-d", str(wd)]) == 0
    out = capsys.readouterr().out
    assert "3 requested points: 2 done, 1 disturbed" in out
    assert "rep2/native: vm: outside processes used 48.0%" in out
    assert "Re-running the same command measures replacement blocks" in out


def test_at_the_maximum_status_names_the_key_to_raise(tmp_path, capsys):
    wd = _campaign(tmp_path, adaptive=False, measured=3)
    assert main(["status", "-d", str(wd), "--profile", "profiles/local"]) == 0
    out = capsys.readouterr().out
    assert "at its maximum of 3 repeats" in out
    assert "--config sweep='{repeats: 4}'" in out
