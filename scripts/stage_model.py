#!/usr/bin/env python3
"""Stage an LLM for the inference sweep into one directory: model.gguf + model.json (card).

Sources:
  synthetic  a small Llama-architecture model with random weights (make_synthetic_llm.py):
             offline, for throughput measurement only, and labelled so everywhere.
  gguf-file  a local GGUF file (linked, not copied: real models are tens of GB); the card
             records its size and sha256.
  ollama     `ollama pull NAME` into DIR/ollama (the OLLAMA_MODELS of every run), with a
             temporary `ollama serve`; run it where the registry is reachable (a login node).

The directory is built under a temporary name and renamed into place when complete.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "workflow"))

from scalesweep.record.dataset import sha256_file  # noqa: E402
from scalesweep.record.metrics import write_json_atomic  # noqa: E402


def stage_synthetic(tmp: Path, seed: int) -> None:
    subprocess.run([sys.executable, str(HERE / "make_synthetic_llm.py"), "--out",
                    str(tmp / "model.gguf"), "--seed", str(seed)], check=True)


def stage_gguf_file(tmp: Path, path: str) -> None:
    src = Path(path).expanduser().resolve()
    if not src.is_file():
        raise SystemExit(f"stage_model: GGUF file {path} not found")
    with open(src, "rb") as fh:
        if fh.read(4) != b"GGUF":
            raise SystemExit(f"stage_model: {path} is not a GGUF file (bad magic)")
    (tmp / "model.gguf").symlink_to(src)
    write_json_atomic(tmp / "model.json", {
        "name": src.stem, "source": "gguf-file", "path": str(src), "synthetic": False,
        "size_bytes": src.stat().st_size, "sha256": sha256_file(src),
    })


def stage_ollama(tmp: Path, name: str, ollama_bin: str, port: int = 11499) -> None:
    if not shutil.which(ollama_bin):
        raise SystemExit(f"stage_model: {ollama_bin!r} not found: install Ollama "
                         "(https://ollama.com/download) or set models.<name>.ollama_bin")
    env = dict(os.environ, OLLAMA_MODELS=str(tmp / "ollama"), OLLAMA_HOST=f"127.0.0.1:{port}")
    (tmp / "ollama").mkdir()
    server = subprocess.Popen([ollama_bin, "serve"], env=env, stdout=subprocess.DEVNULL,
                              stderr=open(tmp / "serve.log", "w"))
    try:
        for _ in range(120):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/api/version", timeout=1)
                break
            except OSError:
                time.sleep(0.5)
        else:
            raise SystemExit(f"stage_model: ollama serve did not start; see {tmp / 'serve.log'}")
        subprocess.run([ollama_bin, "pull", name], env=env, check=True)
        show = subprocess.run([ollama_bin, "show", name], env=env, capture_output=True, text=True)
    finally:
        server.terminate()
        server.wait(timeout=30)
    write_json_atomic(tmp / "model.json", {"name": name, "source": "ollama", "synthetic": False,
                                           "ollama_show": show.stdout})


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    out = Path(args.out)
    stage_atomically(out, args)
    print(json.loads((out / "model.json").read_text()).get("name"))
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--source", choices=["synthetic", "gguf-file", "ollama"], required=True)
    p.add_argument("--path", default="")
    p.add_argument("--name", default="")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--ollama-bin", default="ollama")
    p.add_argument("--out", required=True)
    return p


def stage_atomically(out: Path, args: argparse.Namespace) -> None:
    """The model of ``--source`` staged beside ``out``, then renamed into place (replacing
    an earlier staging; nothing left behind if it fails)."""
    tmp = out.with_name(f".{out.name}.staging-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        if args.source == "synthetic":
            stage_synthetic(tmp, args.seed)
        elif args.source == "gguf-file":
            stage_gguf_file(tmp, args.path)
        else:
            stage_ollama(tmp, args.name, args.ollama_bin)
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


if __name__ == "__main__":
    sys.exit(main())
