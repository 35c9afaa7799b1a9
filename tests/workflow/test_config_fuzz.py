"""Bad input never reaches a job: every bad config is a clear schema or sweep error."""

import copy
import subprocess

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import REPO, run_snakemake, tiny_config
from scalesweep.plan.config import ConfigError, check_config, schema_errors
from scalesweep.plan.sweep import SweepError, sweep_points

import yaml

DEFAULT = yaml.safe_load((REPO / "config" / "config.yaml").read_text())


def _paths(node, prefix=()):
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, prefix + (i,))
    yield prefix


JUNK = st.one_of(
    st.none(), st.booleans(), st.integers(-10**6, -1), st.floats(allow_nan=True),
    st.text(max_size=20), st.lists(st.text(max_size=5), max_size=3),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=2),
    st.sampled_from(["; rm -rf /", "$(touch pwned)", "`id`", "a b", "docker", "-1", "../.."]),
)


def _set(cfg, path, value):
    node = cfg
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_bad_values_give_a_schema_or_sweep_error_never_a_traceback(data):
    cfg = copy.deepcopy(DEFAULT)
    paths = [p for p in _paths(cfg) if p]
    path = data.draw(st.sampled_from(paths))
    _set(cfg, path, data.draw(JUNK))
    try:
        check_config(cfg)
    except ConfigError as exc:
        assert "config key" in str(exc)
        return
    try:
        sweep_points(cfg)
    except SweepError as exc:
        assert str(exc)


@pytest.mark.parametrize(
    "path",
    [
        ("site",),
        ("datasets", "fashion_sandal_sneaker", "path"),
        ("datasets", "fashion_sandal_sneaker", "classes", 0),
        ("models", "synthetic_llama", "source"),
        ("workloads", "llm", "prompts"),
        ("workloads", "llm", "engine"),
        ("containers", "images", "default", "recipe"),
        ("containers", "images", "default", "prebuilt"),
        ("containers", "images", "default", "requirements"),
        ("workloads", "llm", "image"),
    ],
)
@pytest.mark.parametrize("attack", ["x; touch /tmp/PWNED", "$(touch PWNED)", "`touch PWNED`",
                                    "a'b", 'a"b', "x\ntouch PWNED", "x|y", "x&&y"])
def test_shell_injection_through_config_strings_is_refused(path, attack):
    cfg = copy.deepcopy(DEFAULT)
    cfg.setdefault("containers", {})
    node = cfg
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = attack
    errors = schema_errors(cfg)
    dotted = ".".join(map(str, path))
    assert any(dotted in e for e in errors), errors


def test_bad_config_stops_snakemake_before_any_job(campaign):
    cfg = tiny_config()
    cfg["sweep"]["repeats"] = 0
    cfg["site"] = "x;touch PWNED"
    wd = campaign(cfg)
    proc = run_snakemake(wd, "--cores", "1", check=False)
    assert proc.returncode != 0
    err = proc.stdout + proc.stderr
    assert "config key sweep.repeats: 0 is less than the minimum of 1" in err
    assert "config key site" in err
    assert not (wd / "results").exists() and not (wd / "resources").exists()
    assert not (wd / "PWNED").exists()


def test_missing_dataset_reference_is_named(campaign):
    cfg = tiny_config()
    cfg["workloads"]["cnn_ddp"]["dataset"] = "nope"
    proc = run_snakemake(campaign(cfg), "-n", "--cores", "1", check=False)
    assert proc.returncode != 0
    assert "dataset 'nope' is not defined under datasets" in proc.stdout + proc.stderr


def llm_config(model: dict, **workload) -> dict:
    """tiny_config with one LLM workload (1 rank) on ``model``."""
    cfg = tiny_config()
    cfg["models"] = {"m": model}
    cfg["workloads"] = {"llm": {"payload": "llm", "model": "m", **workload}}
    cfg["sweep"]["ranks_per_node"] = [1]
    return cfg


def test_max_tokens_is_bounded_by_a_gguf_files_own_context(tmp_path):
    import gguf

    from scalesweep.plan.config import llm_engines

    path = tmp_path / "m.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_array("tokenizer.ggml.tokens", ["a", "bc", "def"])  # skipped by the header reader
    w.add_string("general.name", "m")
    w.add_float32("llama.rope.freq_base", 1e4)
    w.add_bool("x.flag", True)
    w.add_context_length(512)
    w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file(), w.close()
    for engine in ("llamacpp", "ollama"):
        check_config(llm_config({"source": "gguf-file", "path": str(path)}, engine=engine,
                                max_tokens=511))
        with pytest.raises(ConfigError) as err:
            check_config(llm_config({"source": "gguf-file", "path": str(path)}, engine=engine,
                                    max_tokens=512))
        assert f"workloads.llm.max_tokens: 512 does not fit the context of model 'm' (512 tokens: " \
               f"the context_length in {path}" in str(err.value)
    # a file that says nothing: the engine's context bounds it (the payload's --ctx for
    # llamacpp; Ollama's own default num_ctx, which the payload does not set)
    path.write_bytes(b"GGUF" + b"\0" * 64)
    engines = llm_engines()
    big = engines.DEFAULT_CTX
    with pytest.raises(ConfigError, match=f"max_tokens: {big} does not fit .*engine llamacpp's context {big}"):
        check_config(llm_config({"source": "gguf-file", "path": str(path)}, max_tokens=big))
    check_config(llm_config({"source": "gguf-file", "path": str(path)}, engine="ollama", max_tokens=big))
    ollama = engines.OLLAMA_DEFAULT_CTX
    with pytest.raises(ConfigError, match=f"max_tokens: {ollama} does not fit .*engine ollama's context "
                                          f"{ollama}: OLLAMA_DEFAULT_CTX"):
        check_config(llm_config({"source": "gguf-file", "path": str(path)}, engine="ollama",
                                max_tokens=ollama))
    # a GGUF path as the staging job reads it: relative to the campaign directory
    (tmp_path / "campaign").mkdir()
    w = gguf.GGUFWriter(str(tmp_path / "campaign" / "rel.gguf"), "llama")
    w.add_context_length(256)
    w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file(), w.close()
    with pytest.raises(ConfigError, match="max_tokens: 300 does not fit .*256 tokens"):
        check_config(llm_config({"source": "gguf-file", "path": "rel.gguf"}, max_tokens=300),
                     directory=tmp_path / "campaign")


def test_an_ollama_registry_model_is_bounded_by_ollamas_own_context():
    from scalesweep.plan.config import llm_engines

    ctx = llm_engines().OLLAMA_DEFAULT_CTX
    with pytest.raises(ConfigError, match=f"max_tokens: 1000000000000 does not fit .*ollama's context {ctx}"):
        check_config(llm_config({"source": "ollama", "name": "llama3"}, engine="ollama",
                                max_tokens=10**12))


def test_counts_and_sizes_that_reach_a_payload_are_bounded():
    cfg = tiny_config()
    cfg["datasets"]["tiny"]["image_size"] = 32
    with pytest.raises(ConfigError, match=r"datasets.tiny.image_size: 32 is too small for workload "
                                          r"cnn_ddp's CNN, which takes images of at least 64"):
        check_config(cfg)
    for key, value in (("epochs", 10**9), ("batch_size", 10**12), ("seed", 2**40)):
        cfg = tiny_config()
        cfg["workloads"]["cnn_ddp"][key] = value
        assert any(f"workloads.cnn_ddp.{key}: {value} is greater than the maximum" in e
                   for e in schema_errors(cfg)), key
    for key, value in (("warmup", 10**9), ("num_requests", 10**12)):
        errors = schema_errors(llm_config({"source": "synthetic"}, **{key: value}))
        assert any(f"workloads.llm.{key}: {value} is greater than the maximum" in e for e in errors), key


def test_a_dataset_source_that_does_not_exist_stops_snakemake_before_any_job(campaign):
    """Issue #26 case 4: on a site without a scheduler staging reads the path here."""
    cfg = tiny_config()
    cfg["datasets"]["tiny"] = {"source": "image-folder", "path": "/nonexistent/images",
                               "classes": [], "image_size": 64}
    wd = campaign(cfg)
    proc = run_snakemake(wd, "-n", "--cores", "1", check=False)
    assert proc.returncode != 0
    assert ("config key datasets.tiny.path: '/nonexistent/images' does not exist on this host"
            in proc.stdout + proc.stderr)
    assert not (wd / "results").exists() and not (wd / "resources").exists()


def test_a_dataset_source_is_checked_only_where_staging_will_read_it(tmp_path):
    cfg = tiny_config()
    cfg["datasets"]["tiny"] = {"source": "fashion-mnist", "path": "idx", "image_size": 64}
    with pytest.raises(ConfigError, match="config key datasets.tiny.path: 'idx' does not exist "
                                          ".*apt-get install dataset-fashion-mnist"):
        check_config(copy.deepcopy(cfg), tmp_path)
    (tmp_path / "idx").write_text("")
    with pytest.raises(ConfigError, match="'idx' is not a directory"):
        check_config(copy.deepcopy(cfg), tmp_path)
    (tmp_path / "idx").unlink()
    (tmp_path / "idx").mkdir()  # relative: to the campaign directory, where staging runs
    check_config(copy.deepcopy(cfg), tmp_path)
    elsewhere = tmp_path / "other-campaign"
    (elsewhere / "resources" / "datasets" / "tiny").mkdir(parents=True)
    check_config(copy.deepcopy(cfg), elsewhere)  # staged already: its source is not read again
    # a run measuring only other workloads stages nothing of this one
    other = copy.deepcopy(cfg)
    other["workloads"]["llm"] = {"payload": "llm", "model": "m"}
    other["models"] = {"m": {"source": "synthetic"}}
    other["sweep"]["ranks_per_node"] = [1]
    check_config({**copy.deepcopy(other), "only": {"workloads": ["llm"]}}, tmp_path / "nowhere")
    with pytest.raises(ConfigError, match="datasets.tiny.path: 'idx' does not exist"):
        check_config({**copy.deepcopy(other), "only": {"workloads": ["cnn_ddp"]}},
                     tmp_path / "nowhere")
    cfg["site"] = "local-slurm"  # staging is a Slurm job there: the path is the cluster's
    check_config(copy.deepcopy(cfg), tmp_path / "nowhere")


def test_bad_load_settings_are_named_before_any_job():
    """workloads.<name>.load: an unknown target preset, a reversed range, output lengths
    past max_tokens, prompts that cannot fit the context, a bad rate."""
    model = {"source": "synthetic", "seed": 0}
    ok = dict(max_tokens=16, load={"rates": [1, 2], "target": "llama2-70b", "max_rate_steps": 2,
                                   "input_words": [4, 8], "output_tokens": [4, 16]})
    check_config(llm_config(model, **ok))
    bad = [
        ({"target": "llama2-700b"}, "workloads.llm.load.target: 'llama2-700b'"),
        ({"output_tokens": [8, 4]}, "workloads.llm.load.output_tokens: [8, 4] is not [low, high]"),
        ({"output_tokens": [4, 32]}, "workloads.llm.load.output_tokens: [4, 32] goes past the workload's max_tokens 16"),
        ({"input_words": [1, 10**5]}, "workloads.llm.load.input_words: prompts of up to 100000 words"),
        ({"rates": [0]}, "rates"),
        ({"target": {"ttft_s": 1}}, "target"),
        ({"arrival": "uniform"}, "arrival"),
        ({"client": "elsewhere"}, "client"),
        ({"target": None}, "workloads.llm.load.max_rate_steps: 2 bisection steps need open-loop rates"),
    ]
    for change, message in bad:
        with pytest.raises(ConfigError) as err:
            check_config(llm_config(model, **{**ok, "load": {**ok["load"], **change}}))
        assert message in str(err.value), (change, str(err.value))
    # a client on the host needs a server, and one node
    with pytest.raises(ConfigError, match="load.client: host needs a server to send to; engine torch"):
        check_config(llm_config(model, engine="torch", max_tokens=16, load={"client": "host"}))
    with pytest.raises(ConfigError, match="load.client: host is for one node"):
        check_config(llm_config(model, max_tokens=16, load={"client": "host"},
                                sweep={"nodes": [1, 2], "gpus_per_node": [0]}))
