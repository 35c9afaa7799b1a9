"""What a run was measured under (scalesweep.plan.identity): a run recorded before its
identity existed is this campaign's, as before; one of another config is foreign, named;
a key a later version records is not compared."""

from __future__ import annotations

import copy

from conftest import tiny_config
from scalesweep.analyse.collect import point_states, readable_runs
from scalesweep.plan.identity import config_digest, foreign_reason, measured_config
from scalesweep.plan.sweep import sweep_points
from scalesweep.record.metrics import write_metrics


def _run(tmp_path, cfg, identity):
    point = sweep_points(cfg)[0]
    path = tmp_path / "results" / "runs" / point.path / "metrics.json"
    record = {"point": point.as_dict(), "epoch_s": [1.0, 1.0], "train_s": 2.0,
              "final_loss": 0.5, "final_accuracy": 0.9}
    if identity is not None:
        record["identity"] = identity
    write_metrics(path, record)
    return point, path


def _identity(cfg, **workload):
    measured = measured_config(cfg, "cnn_ddp", "native")
    measured["workloads.cnn_ddp"].update(workload)
    return {"config_digest": config_digest(measured), "measured": measured,
            "campaign": {"directory": "/elsewhere"}}


def _state(tmp_path, cfg, identity):
    point, path = _run(tmp_path, cfg, identity)
    row = point_states([point], str(tmp_path / "results"), config=cfg).iloc[0]
    read = readable_runs([path], cfg)[0][2]
    return row["state"], row["reason"], read


def test_a_run_without_identity_is_the_campaigns_as_before(tmp_path):
    state, reason, row = _state(tmp_path, tiny_config(), None)
    assert (state, reason) == ("done", "")
    assert not row.get("foreign") and not row["disturbed"] and row["config_digest"] is None


def test_a_run_of_this_config_is_done_and_of_another_is_foreign(tmp_path):
    cfg = tiny_config()
    assert _state(tmp_path, cfg, _identity(cfg))[0] == "done"
    state, reason, row = _state(tmp_path, cfg, _identity(cfg, epochs=5))
    assert state == "foreign"
    assert reason == ("foreign run: measured under another config (campaign /elsewhere): "
                      "workloads.cnn_ddp.epochs 5 (this config: 2)")
    assert row["foreign"] and row["disturbed"] and row["disturbed_reason"] == reason


def test_analysis_settings_and_axes_are_not_measured():
    cfg = tiny_config()
    other = copy.deepcopy(cfg)
    other["measurement"]["max_repeats"] = 40
    other["sweep"]["ranks_per_node"] = [1, 2, 4]
    other["workloads"]["cnn_ddp"]["enabled"] = True
    # input bounds and the time limit (raising one must not make every run foreign), and
    # one dataset path spelled two ways (review of issue 40)
    other["workloads"]["cnn_ddp"].update(max_prompts_mb=64, max_prompts=99, max_runtime_min=9)
    assert measured_config(cfg, "cnn_ddp", "native") == measured_config(other, "cnn_ddp", "native")
    spelled = [copy.deepcopy(cfg), copy.deepcopy(cfg)]
    spelled[0]["datasets"]["tiny"]["path"] = "data/photos"
    spelled[1]["datasets"]["tiny"]["path"] = "./data//photos"
    assert measured_config(spelled[0], "cnn_ddp", "native") == measured_config(
        spelled[1], "cnn_ddp", "native")
    other["datasets"]["tiny"]["image_size"] = 96
    assert measured_config(cfg, "cnn_ddp", "native") != measured_config(other, "cnn_ddp", "native")


def test_a_key_only_a_later_version_records_is_not_compared():
    cfg = tiny_config()
    identity = _identity(cfg, some_new_key=3)  # its digest differs, its values do not
    assert foreign_reason({"point": {"workload": "cnn_ddp", "runtime": "native"},
                           "identity": identity}, cfg) == ""
    identity = _identity(cfg, batch_size=4)
    why = foreign_reason({"point": {"workload": "cnn_ddp", "runtime": "native"},
                          "identity": identity}, cfg)
    assert why.endswith("workloads.cnn_ddp.batch_size 4 (this config: 16)")
