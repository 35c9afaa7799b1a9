"""The test stand-ins (tests/standins) behave as the real tools in what the project uses.

Apptainer/SingularityCE: definition-file builds with build args (undefined and unused
args fail as in Apptainer), SIF inspect and pull, exec with real bind mounts in a private
mount namespace, the APPTAINERENV_/SINGULARITYENV_ variables, CONTAINLIBS, the image's
/opt/venv. Ollama: serve + pull from the stand-in registry, /api/tags, streamed
/api/generate with Ollama's timing fields, the payload (scripts/infer_llm.py) and
scripts/stage_model.py against it. rocm-smi / amd-smi: the fake 8-GCD MI250X node.

The exec tests need a private mount namespace (``unshare --mount``; root or user
namespaces) and skip with the reason where it is not permitted.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import standins  # tests/standins (pytest puts tests/ on sys.path)

REPO = Path(__file__).resolve().parents[2]

DEF = """Bootstrap: docker
From: {{ BASE }}

%arguments
    BASE=docker.io/library/ubuntu:24.04

%files
    {{ PAYLOAD }} /opt/payload.txt

%environment
    export GREETING={{ GREETING }}
    export PATH=/opt/venv/bin:$PATH

%post
    echo "never run by the stand-in"

%labels
    org.scalesweep.image test
    org.scalesweep.greeting {{ GREETING }}
"""


def _unshare_reason() -> str | None:
    if not shutil.which("unshare"):
        return "unshare(1) not found: the apptainer stand-in runs exec in a private mount namespace"
    cmd = ["unshare", "--mount", "true"] if os.geteuid() == 0 else \
        ["unshare", "--user", "--map-root-user", "--mount", "true"]
    p = subprocess.run(cmd, check=False, capture_output=True, text=True)
    if p.returncode != 0:
        return f"a private mount namespace is not permitted here ({' '.join(cmd)}: {p.stderr.strip()})"
    return None


needs_unshare = pytest.mark.skipif(_unshare_reason() is not None, reason=str(_unshare_reason()))
HAVE_LLM = all(importlib.util.find_spec(m) for m in ("llama_cpp", "numpy", "gguf", "tokenizers"))
needs_llm = pytest.mark.skipif(not HAVE_LLM, reason="llama_cpp/numpy/gguf/tokenizers missing (the project venv has them)")


@pytest.fixture(scope="module")
def sb(tmp_path_factory):
    """The stand-ins installed in a bin directory; ``sb.run(argv, **env)``."""
    root = tmp_path_factory.mktemp("standins")
    log = root / "standins.jsonl"
    env = dict(os.environ, **standins.install(root / "bin", log))
    env["PATH"] = f"{root / 'bin'}{os.pathsep}{env['PATH']}"
    for k in list(env):
        if k.startswith(("APPTAINER", "SINGULARITY", "OLLAMA_")):
            del env[k]

    class SB:
        dir = root
        log_path = log

        @staticmethod
        def run(argv, cwd=None, timeout=120, **extra):
            return subprocess.run(argv, cwd=cwd or root, env={**env, **extra}, check=False, capture_output=True,
                                  text=True, timeout=timeout)

        environ = env

    return SB


@pytest.fixture(scope="module")
def image(sb):
    """A stand-in SIF built from DEF with build args."""
    (sb.dir / "payload.txt").write_text("payload\n")
    (sb.dir / "test.def").write_text(DEF)
    p = sb.run(["apptainer", "build", "--fakeroot", "--build-arg", "GREETING=hello", "--build-arg",
                "PAYLOAD=payload.txt", "img.sif", "test.def"])
    assert p.returncode == 0, p.stderr
    return sb.dir / "img.sif"


# --------------------------------------------------------------------------- apptainer: build


def test_versions(sb):
    assert sb.run(["apptainer", "--version"]).stdout == "apptainer version 1.3.6\n"
    assert sb.run(["singularity", "--version"]).stdout == "singularity-ce version 4.2.2\n"
    assert sb.run(["apptainer", "version"]).stdout == "1.3.6\n"


def test_build_fills_build_args_and_records_the_recipe(sb, image):
    text = image.read_text()
    assert text.startswith("#!/usr/bin/env run-singularity\n")
    doc = json.loads(text.split("\n", 1)[1])
    assert doc["standin"] and doc["from"] == "docker.io/library/ubuntu:24.04"
    assert "export GREETING=hello" in doc["deffile"] and "{{" not in doc["deffile"]
    assert doc["build_args"]["GREETING"] == "hello" and doc["fakeroot"] is True
    assert doc["files"][0]["dst"] == "/opt/payload.txt"
    assert image.stat().st_size > 4000


def test_build_without_a_needed_arg_fails_naming_it(sb):
    p = sb.run(["apptainer", "build", "--build-arg", "PAYLOAD=payload.txt", "x.sif", "test.def"])
    assert p.returncode == 255
    assert "build var GREETING is not defined through either --build-arg" in p.stderr
    assert not (sb.dir / "x.sif").exists()


def test_unused_build_arg_is_fatal_unless_warned(sb):
    args = ["--build-arg", "GREETING=hi", "--build-arg", "PAYLOAD=payload.txt", "--build-arg", "EXTRA=1"]
    p = sb.run(["apptainer", "build", *args, "u.sif", "test.def"])
    assert p.returncode == 255 and "unused build args: EXTRA. Use option --warn-unused-build-args" in p.stderr
    p = sb.run(["apptainer", "build", "--warn-unused-build-args", *args, "u.sif", "test.def"])
    assert p.returncode == 0 and "WARNING: Unused build args: EXTRA" in p.stderr


def test_build_checks_files_target_and_sections(sb):
    p = sb.run(["apptainer", "build", "--build-arg", "GREETING=hi", "--build-arg", "PAYLOAD=missing.txt",
                "m.sif", "test.def"])
    assert p.returncode == 255 and "cannot stat 'missing.txt'" in p.stderr
    p = sb.run(["apptainer", "build", "--build-arg", "GREETING=hi", "--build-arg", "PAYLOAD=payload.txt",
                "img.sif", "test.def"])  # built by the fixture
    assert p.returncode == 255 and "build target 'img.sif' already exists. Use --force" in p.stderr
    (sb.dir / "bad.def").write_text("Bootstrap: docker\nFrom: x\n%postt\n    true\n")
    p = sb.run(["apptainer", "build", "b.sif", "bad.def"])
    assert p.returncode == 255 and "invalid section(s) specified: postt" in p.stderr
    p = sb.run(["apptainer", "build", "--bogus", "b.sif", "bad.def"])
    assert p.returncode == 1 and 'Error for command "build": unknown flag: --bogus' in p.stderr


def test_the_projects_multistage_recipe_builds_with_the_site_build_args(sb):
    import yaml

    args = yaml.safe_load((REPO / "sites" / "frontier.yaml").read_text())["build_args"]
    argv = [a for k, v in args.items() for a in ("--build-arg", f"{k}={v}")]
    out = sb.dir / "pytorch.sif"
    recipe = REPO / "containers" / "apptainer" / "pytorch-rocm.def"
    p = sb.run(["apptainer", "build", "--fakeroot", "--warn-unused-build-args", *argv, str(out), str(recipe)],
               cwd=REPO)
    assert p.returncode == 0, p.stderr
    labels = json.loads(sb.run(["apptainer", "inspect", "--json", str(out)]).stdout)["data"]["attributes"]["labels"]
    assert labels["org.label-schema.usage.apptainer.version"] == "1.3.6"
    assert labels["org.scalesweep.image"] == "pytorch-rocm"


def test_inspect_json_and_text(sb, image):
    p = sb.run(["apptainer", "inspect", "--json", str(image)])
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["type"] == "container"
    labels = doc["data"]["attributes"]["labels"]
    assert labels["org.scalesweep.greeting"] == "hello"
    assert labels["org.label-schema.usage.singularity.deffile.from"] == "docker.io/library/ubuntu:24.04"
    assert "org.label-schema.build-date" in labels
    p = sb.run(["apptainer", "inspect", "--deffile", "--json", str(image)])
    assert "export GREETING=hello" in json.loads(p.stdout)["data"]["attributes"]["deffile"]
    assert "org.scalesweep.image: test\n" in sb.run(["apptainer", "inspect", str(image)]).stdout
    p = sb.run(["apptainer", "inspect", str(sb.dir / "payload.txt")])
    assert p.returncode == 255 and "image format not recognized" in p.stderr


def test_pull_writes_a_sif_that_inspect_reads(sb):
    p = sb.run(["apptainer", "pull", "docker://ubuntu:22.04"])
    assert p.returncode == 0, p.stderr
    sif = sb.dir / "ubuntu_22.04.sif"  # the real tool's default name
    labels = json.loads(sb.run(["apptainer", "inspect", "--json", str(sif)]).stdout)["data"]["attributes"]["labels"]
    assert labels["org.scalesweep.standin.pulled_from"] == "docker://ubuntu:22.04"
    p = sb.run(["apptainer", "pull", "docker://ubuntu:22.04"])
    assert p.returncode == 255 and "will not overwrite" in p.stderr
    p = sb.run(["singularity", "pull", "--force", "o.sif", "oras://registry.example.org/x/ollama:0.9.0"])
    assert p.returncode == 0, p.stderr
    p = sb.run(["apptainer", "pull", "f.sif", "ftp://example.org/x.sif"])
    assert p.returncode == 255 and "Unsupported transport type: ftp" in p.stderr


# --------------------------------------------------------------------------- apptainer: exec


@needs_unshare
def test_exec_binds_are_mounted_and_missing_sources_fail(sb, image, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "file").write_text("bound\n")
    out = tmp_path / "out"
    out.mkdir()
    p = sb.run(["apptainer", "exec", "--rocm", "--bind", f"{data}:/mnt/data:ro,{out}:/mnt/out", "--pwd", "/mnt/out",
                str(image), "sh", "-c", ("cat /mnt/data/file; pwd; echo x > /mnt/out/w; echo $GREETING; "
                                         "touch /mnt/data/nope 2>/dev/null || echo read-only")])
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["bound", "/mnt/out", "hello", "read-only"]
    assert (out / "w").read_text() == "x\n"
    if not os.path.exists("/dev/kfd"):  # no ROCm driver: the real tool's warning
        assert "Could not find any rocm files on this host!" in p.stderr
    assert not Path("/mnt/data/file").exists()  # nothing mounted outside the namespace
    p = sb.run(["apptainer", "exec", "--bind", "/nonexistent/src:/mnt/data", str(image), "true"])
    assert p.returncode == 255
    assert "mount source /nonexistent/src doesn't exist" in p.stderr
    p = sb.run(["apptainer", "exec", "--bind", f"{data}:/srv/not/in/image", str(image), "true"])
    assert p.returncode == 255 and "destination /srv/not/in/image doesn't exist in container" in p.stderr
    assert sb.run(["apptainer", "exec", str(image), "sh", "-c", "exit 7"]).returncode == 7
    rec = next(r for r in standins.read_log(sb.log_path) if r.get("subcommand") == "exec" and "--rocm" in r["argv"])
    assert rec["binds"][0] == {"src": str(data), "dst": "/mnt/data", "mode": "ro"} and rec["exit_status"] == 0


@needs_unshare
def test_exec_environment_and_containlibs(sb, image):
    p = sb.run(["apptainer", "exec", "--env", "BAR=2", str(image), "sh", "-c",
                "echo $FOO $BAR $APPTAINER_NAME ${APPTAINERENV_FOO-gone} $LD_LIBRARY_PATH"],
               APPTAINERENV_FOO="1", APPTAINERENV_LD_LIBRARY_PATH="/host/mpi/lib")
    assert p.returncode == 0, p.stderr
    foo, bar, name, gone, ld = p.stdout.split()
    assert (foo, bar, name, gone) == ("1", "2", "img.sif", "gone")
    assert ld.startswith("/host/mpi/lib:")
    p = sb.run(["singularity", "exec", str(image), "sh", "-c", "echo $FOO $SINGULARITY_CONTAINER"],
               SINGULARITYENV_FOO="s")
    assert p.stdout.split() == ["s", str(image)]
    p = sb.run(["apptainer", "exec", "--cleanenv", str(image), "sh", "-c", "echo ${HOSTONLY-unset}"], HOSTONLY="h")
    assert p.stdout.strip() == "unset"
    p = sb.run(["apptainer", "exec", str(image), "true"], APPTAINER_CONTAINLIBS="/nonexistent/libfoo.so")
    assert p.returncode == 255 and "mount source /nonexistent/libfoo.so doesn't exist" in p.stderr
    lib = "/usr/lib/x86_64-linux-gnu/libz.so.1"
    if os.path.exists(lib):
        p = sb.run(["apptainer", "exec", str(image), "sh", "-c", "ls $(echo $LD_LIBRARY_PATH | tr : ' ')"],
                   APPTAINER_CONTAINLIBS=lib)
        assert p.returncode == 0 and "libz.so.1" in p.stdout


@needs_unshare
def test_exec_has_the_venv_at_opt_venv(sb, image):
    p = sb.run(["apptainer", "exec", str(image), "/opt/venv/bin/python", "-c",
                "import sys, torch; print(sys.prefix, torch.__version__)"])
    assert p.returncode == 0, p.stderr
    assert p.stdout.split()[0] == "/opt/venv"


@needs_unshare
def test_exec_forwards_sigterm(sb, image):
    proc = subprocess.Popen(["apptainer", "exec", str(image), "sh", "-c",
                             "trap 'echo term; exit 3' TERM; echo ready; while :; do sleep 0.1; done"],
                            env=sb.environ, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "ready\n"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == 3
    assert proc.stdout.read() == "term\n"


# --------------------------------------------------------------------------- ollama


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    if not HAVE_LLM:
        pytest.skip("llama_cpp/numpy/gguf/tokenizers missing")
    sys.path.insert(0, str(REPO / "scripts"))
    import make_synthetic_llm as maker

    reg = tmp_path_factory.mktemp("registry")
    maker.build(reg / "tiny.gguf", maker.SyntheticConfig(hidden=64, layers=2, heads=4, kv_heads=2, ffn=128,
                                                         vocab=512, ctx=256, dtype="f32"))
    (reg / "registry.json").write_text(json.dumps({"hf.co/UniverseTBD/astrollama.gguf": "tiny.gguf",
                                                   "tinyllama": str(reg / "tiny.gguf")}))
    return reg


@pytest.fixture(scope="module")
def ollama(sb, registry):
    """``ollama serve`` on a free port; stopped with SIGTERM (must exit 0)."""
    port = _free_port()
    env = {**sb.environ, "OLLAMA_HOST": f"127.0.0.1:{port}", "OLLAMA_MODELS": str(sb.dir / "models"),
           "SCALESWEEP_STANDIN_OLLAMA_REGISTRY": str(registry)}
    with open(sb.dir / "serve.log", "w") as log:
        proc = subprocess.Popen(["ollama", "serve"], env=env, stdout=log, stderr=subprocess.STDOUT)
        base = f"http://127.0.0.1:{port}"
        for _ in range(100):
            try:
                urllib.request.urlopen(base + "/api/version", timeout=1).read()
                break
            except OSError:
                time.sleep(0.1)
        else:
            proc.kill()
            pytest.fail(f"ollama serve did not start: {(sb.dir / 'serve.log').read_text()}")

        class O:
            url = base
            environ = env
            process = proc

        yield O
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0


def _post(url: str, body: dict):
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    return urllib.request.urlopen(req, timeout=120)


@needs_llm
def test_ollama_cli_without_server(sb):
    p = sb.run(["ollama", "pull", "tinyllama"], OLLAMA_HOST=f"127.0.0.1:{_free_port()}")
    assert p.returncode == 1 and "could not connect to ollama server" in p.stderr


@needs_llm
def test_ollama_pull_tags_show_generate(sb, ollama):
    p = sb.run(["ollama", "pull", "hf.co/UniverseTBD/astrollama.gguf"], **ollama.environ)
    assert p.returncode == 0, p.stderr
    assert p.stderr.splitlines()[0] == "pulling manifest" and p.stderr.splitlines()[-1] == "success"
    p = sb.run(["ollama", "pull", "no-such-model"], **ollama.environ)
    assert p.returncode == 1 and "Error: pull model manifest: file does not exist" in p.stderr
    models = sb.dir / "models"
    assert (models / "manifests" / "hf.co" / "UniverseTBD" / "astrollama.gguf" / "latest").is_file()
    assert list((models / "blobs").glob("sha256-*"))

    tags = json.loads(urllib.request.urlopen(ollama.url + "/api/tags").read())
    (m,) = [x for x in tags["models"] if x["name"] == "hf.co/UniverseTBD/astrollama.gguf:latest"]
    assert m["details"]["family"] == "llama" and m["details"]["quantization_level"] == "F32"
    show = sb.run(["ollama", "show", "hf.co/UniverseTBD/astrollama.gguf"], **ollama.environ).stdout
    assert show.startswith("  Model\n") and "context length      256" in show

    # streamed generate: one chunk per decodable token, then the timing fields (ns)
    r = _post(ollama.url + "/api/generate", {"model": "hf.co/UniverseTBD/astrollama.gguf", "prompt": "The sky is",
                                             "options": {"temperature": 0, "seed": 0, "num_predict": 12,
                                                         "num_thread": 1}})
    assert r.headers["Content-Type"] == "application/x-ndjson"
    chunks = [json.loads(line) for line in r if line.strip()]
    final = chunks[-1]
    assert final["done"] is True and final["done_reason"] == "length"
    assert final["eval_count"] == 12 and 0 < len(chunks) - 1 <= 12
    assert all(c["done"] is False and c["response"] for c in chunks[:-1])
    for k in ("total_duration", "load_duration", "prompt_eval_duration", "eval_duration", "prompt_eval_count"):
        assert isinstance(final[k], int) and final[k] > 0, k
    assert final["total_duration"] >= final["eval_duration"] + final["prompt_eval_duration"]
    # errors as Ollama's
    with pytest.raises(urllib.error.HTTPError) as e:
        _post(ollama.url + "/api/generate", {"model": "nope", "prompt": "x"})
    assert e.value.code == 404 and json.loads(e.value.read()) == {"error": "model 'nope' not found"}
    # an empty prompt only loads the model
    assert json.loads(_post(ollama.url + "/api/generate", {"model": "hf.co/UniverseTBD/astrollama.gguf"})
                      .read())["done_reason"] == "load"


@needs_llm
def test_ollama_openai_chat_stream_with_usage(sb, ollama):
    sb.run(["ollama", "pull", "tinyllama"], **ollama.environ)
    r = _post(ollama.url + "/v1/chat/completions", {"model": "tinyllama", "messages": [{"role": "user", "content": "Hi"}],
                                                    "max_tokens": 5, "temperature": 0, "stream": True,
                                                    "stream_options": {"include_usage": True}})
    events = [line.decode().strip() for line in r if line.strip()]
    assert events[-1] == "data: [DONE]"
    usage = json.loads(events[-2][len("data: "):])
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 5
    assert json.loads(events[-3][len("data: "):])["choices"][0]["finish_reason"] == "length"


@needs_llm
def test_payload_and_stage_model_run_against_the_standin(sb, registry, tmp_path):
    """scripts/stage_model.py --source ollama, then scripts/infer_llm.py --engine ollama
    --api generate on what it staged (the Frontier workflow's LLM path)."""
    env = {**sb.environ, "SCALESWEEP_STANDIN_OLLAMA_REGISTRY": str(registry)}
    staged = tmp_path / "astrollama"
    p = subprocess.run([sys.executable, str(REPO / "scripts" / "stage_model.py"), "--source", "ollama", "--name",
                        "hf.co/UniverseTBD/astrollama.gguf", "--out", str(staged)],
                       env=env, check=False, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    card = json.loads((staged / "model.json").read_text())
    assert card["name"] == "hf.co/UniverseTBD/astrollama.gguf" and "architecture        llama" in card["ollama_show"]
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("The sky is\nOnce upon a time\n")
    p = subprocess.run([sys.executable, str(REPO / "scripts" / "infer_llm.py"), "--engine", "ollama", "--api",
                        "generate", "--model", card["name"], "--model-card", str(staged / "model.json"),
                        "--models-dir", str(staged / "ollama"), "--prompts", str(prompts), "--max-tokens", "6",
                        "--warmup", "1", "--gpus", "2", "--gpu-vendor", "amd", "--threads", "1",
                        "--out", str(tmp_path / "metrics.json")], env=env, check=False, capture_output=True,
                       text=True, timeout=180)
    assert p.returncode == 0, p.stderr
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["status"] == "ok" and metrics["n_ok"] == 2
    req = metrics["requests"][0]
    assert req["engine_timings"]["source"] == "ollama" and req["engine_timings"]["eval_count"] == 6
    server_log = Path(metrics["server_log"]).read_text()
    assert server_log.count('msg="inference compute" id=GPU-') == 2  # ROCR/HIP_VISIBLE_DEVICES=0,1


# --------------------------------------------------------------------------- rocm-smi / amd-smi


def test_rocm_smi_lists_eight_mi250x_gcds(sb):
    p = sb.run(["rocm-smi", "--showproductname", "--showmeminfo", "vram", "--json"])
    assert p.returncode == 0, p.stderr
    cards = json.loads(p.stdout)
    assert sorted(cards) == [f"card{i}" for i in range(8)]
    assert {c["GFX Version"] for c in cards.values()} == {"gfx90a"}
    assert {c["VRAM Total Memory (B)"] for c in cards.values()} == {"68702699520"}
    bus = json.loads(sb.run(["rocm-smi", "--showbus", "--json"]).stdout)
    assert [bus[f"card{i}"]["PCI Bus"][5:7] for i in range(8)] == ["C1", "C6", "C9", "CE", "D1", "D6", "D9", "DE"]
    assert "GPU[7]\t\t: Card Series: \t\tAMD INSTINCT MI250X" in sb.run(["rocm-smi", "--showproductname"]).stdout
    p = sb.run(["rocm-smi", "--nosuchoption"])
    assert p.returncode == 2 and "unrecognized arguments: --nosuchoption" in p.stderr


def test_amd_smi_static_lists_eight_mi250x(sb):
    p = sb.run(["amd-smi", "static", "--asic", "--vram", "--json"], ROCR_VISIBLE_DEVICES="0")
    assert p.returncode == 0, p.stderr
    rows = json.loads(p.stdout)
    assert [r["gpu"] for r in rows] == list(range(8))  # visibility does not hide devices from the SMI
    assert {r["asic"]["market_name"] for r in rows} == {"AMD Instinct MI250X"}
    assert {r["asic"]["target_graphics_version"] for r in rows} == {"gfx90a"}
    assert rows[0]["vram"]["size"] == {"value": 65520, "unit": "MB"}
    assert sb.run(["amd-smi", "version"]).stdout.startswith("AMDSMI Tool: ")
    p = sb.run(["amd-smi", "static", "--bogus"])
    assert "Parameter '--bogus' is invalid" in p.stdout
    recs = standins.read_log(sb.log_path)
    assert any(r["tool"] == "amd-smi" and r["argv"][:2] == ["amd-smi", "static"] for r in recs)
