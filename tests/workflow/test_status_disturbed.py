"""`scalesweep status` on disturbed runs: listed, left out, and how they get replaced."""

import re
import shlex
import subprocess

import yaml
from snakemake.cli import parse_args, parse_config

from conftest import tiny_config
from scalesweep.cli import main
from scalesweep.plan.adaptive import repeat_bounds
from scalesweep.plan.config_read import SNAKEFILE, config_sources
from scalesweep.plan.sweep import sweep_points
from scalesweep.record.metrics import write_metrics


def _campaign(tmp_path, adaptive: bool, measured: int):
    cfg = tiny_config()
    cfg["sweep"].update(runtimes=["native"], ranks_per_node=[1], repeats=3)
    cfg["measurement"] = {"adaptive": adaptive, "max_repeats": 4, "warmup_blocks": 0}
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
    assert "--config 'sweep={repeats: 4}'" in out


def _advice(out: str) -> list[str]:
    """The command status advises for a series at its maximum, as argv."""
    line = next(x for x in out.splitlines() if "at its maximum of 3 repeats" in x)
    return shlex.split(line.split("to replace its disturbed runs: ", 1)[1])


def _snakemake_reads(argv: list[str]):
    """(--config as Snakemake parses it, the effective config) of a snakemake command."""
    assert argv[0] == "snakemake"
    _, args = parse_args(["--snakefile", str(SNAKEFILE), *argv[1:]])  # profiles applied
    sources = config_sources(args.directory, args.configfile, args.config)
    return parse_config(args.config), sources.load()


def test_the_advice_at_the_maximum_keeps_the_users_config(tmp_path, capsys):
    """Snakemake reads only the last --config of a command line: the raised repeats go
    into the user's own --config (given here as two --config), whose values all stay."""
    wd = _campaign(tmp_path, adaptive=True, measured=3)  # repeats 3, max_repeats 4
    mine = ["measurement={max_repeats: 3}", "only={workloads: [cnn_ddp], nodes: [1]}"]
    assert main(["status", "-d", str(wd), "--config", mine[0], "--config", mine[1]]) == 0
    out = capsys.readouterr().out
    assert all(x.count("--config") == 1 for x in out.splitlines() if "--config" in x), out
    argv = _advice(out)
    assert argv.count("--config") == 1 and argv[argv.index("--config") + 1:] == [
        *mine, "sweep={repeats: 4}"]
    given, config = _snakemake_reads(argv)
    assert given == {"measurement": {"max_repeats": "3"}, "sweep": {"repeats": "4"},
                     "only": {"workloads": ["cnn_ddp"], "nodes": ["1"]}}
    assert config["measurement"]["max_repeats"] == 3
    assert config["only"] == {"workloads": ["cnn_ddp"], "nodes": [1]}
    assert config["sweep"]["repeats"] == 4 and config["sweep"]["runtimes"] == ["native"]
    assert repeat_bounds(config, "cnn_ddp") == (4, 4)


def test_the_advice_merges_into_the_users_own_key_and_the_profiles_config(tmp_path, capsys):
    """A --config sweep=... of the user's is merged with the raised repeats, not
    replaced; without a --config of the user's, the profile's config: (which an explicit
    --config would replace) is carried into the advice."""
    wd = _campaign(tmp_path, adaptive=False, measured=3)
    mine = "sweep={repeats: 3, baseline: 1}"
    assert main(["status", "-d", str(wd), "--config", mine, "only={nodes: [1]}"]) == 0
    argv = _advice(capsys.readouterr().out)
    assert argv[argv.index("--config") + 1:] == ["sweep={repeats: 4, baseline: 1}",
                                                  "only={nodes: [1]}"]
    profile = tmp_path / "profile"
    profile.mkdir()
    (profile / "config.yaml").write_text(yaml.safe_dump({"config": ["only={nodes: [1]}"]}))
    assert main(["status", "-d", str(wd), "--profile", str(profile)]) == 0
    argv = _advice(capsys.readouterr().out)
    given, config = _snakemake_reads(argv)
    assert given == {"only": {"nodes": ["1"]}, "sweep": {"repeats": "4"}}
    assert config["only"] == {"nodes": [1]} and config["sweep"]["repeats"] == 4
    # a workload's own sweep.repeats is the one raised (the top-level one would not count)
    cfg = yaml.safe_load((wd / "config" / "config.yaml").read_text())
    cfg["sweep"]["repeats"] = 1
    cfg["workloads"]["cnn_ddp"]["sweep"] = {"repeats": 3}
    (wd / "config" / "config.yaml").write_text(yaml.safe_dump(cfg))
    assert main(["status", "-d", str(wd)]) == 0
    _, config = _snakemake_reads(_advice(capsys.readouterr().out))
    assert repeat_bounds(config, "cnn_ddp") == (4, 4)


def test_rerun_refuses_a_config_for_snakemake_alone(tmp_path, capsys):
    """After --, a --config would replace the one the points were chosen with."""
    wd = _campaign(tmp_path, adaptive=False, measured=3)
    for extra in (["--config", "only={nodes: [1]}"], ["-C", "xx=1"], ["--configfile=a.yaml"]):
        assert main(["rerun", "--disturbed", "-n", "-d", str(wd), "--", *extra]) == 2
        err = capsys.readouterr().err
        assert f"{extra[0]} after --: give --config and --configfile to scalesweep rerun" in err


def test_rerun_tables_only_plans_the_points_and_the_summary_but_no_figure(tmp_path, capsys):
    """--tables-only: the points' metrics files beside the target `summary` (not `all`);
    Snakemake's plan of that command (its dry run, before rerun moves the old run aside)
    aggregates and makes no figure or report table."""
    wd = _campaign(tmp_path, adaptive=False, measured=3)
    assert main(["rerun", "--disturbed", "-n", "--tables-only", "-d", str(wd), "--", "--cores", "1"]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("$ "))
    argv = shlex.split(line[2:])
    assert "summary" in argv and "all" not in argv, line
    plan = subprocess.run([*argv, "--dry-run"], capture_output=True, text=True, cwd=wd)
    assert plan.returncode == 0, plan.stderr[-3000:]
    rules = set(re.findall(r"^(?:local)?rule (\w+):", plan.stdout, re.M))
    assert {"aggregate", "summary"} <= rules, rules
    assert not {r for r in rules if r.startswith(("report_", "plot_"))}, rules
    # without it, the same rerun's plan makes the report too
    assert main(["rerun", "--disturbed", "-n", "-d", str(wd), "--", "--cores", "1"]) == 0
    argv = shlex.split(next(x for x in capsys.readouterr().out.splitlines() if x.startswith("$ "))[2:])
    assert "all" in argv and "summary" not in argv
