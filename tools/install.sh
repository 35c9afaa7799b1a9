#!/usr/bin/env bash
# Host tooling (tools/, not a payload): sets up this machine; no workflow rule runs it.
# Install what scalesweep needs, idempotently: Debian packages (when root), a .venv in the
# repo root with the Python dependencies at constraints.txt's exact versions (torch
# 2.13.0 among them), and scalesweep itself.
#
#   tools/install.sh          # what the embedded default sweep needs
#   tools/install.sh --test   # plus test tools and the local Slurm cluster's packages
#
# Environment: PYTHON (interpreter for the venv, default python3), TORCH_INDEX_URL (e.g.
# https://download.pytorch.org/whl/cpu on a machine without a local torch wheel).
set -euo pipefail
cd "$(dirname "$0")/.."

want_test=0
[[ "${1:-}" == "--test" ]] && want_test=1

APT_PACKAGES=(
  python3-venv          # the .venv
  charliecloud          # ch-run / ch-image: the container runtime of the embedded default
  debootstrap           # offline Debian root filesystem for the image
  squashfs-tools squashfuse # SquashFS images: mode charliecloud+squashfs (ch-run mounts them)
  podman                # the podman runtime (config/modes.yaml, the Podman integration tests)
  openmpi-bin           # mpirun: one process per rank outside Slurm
  strace                # file-system operations per container start (rule container_startup)
  dataset-fashion-mnist # the embedded default's real images, offline
  git
)

missing_apt() {
  local p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || echo "$p"
  done
}

apt_install() {
  local missing
  mapfile -t missing < <(missing_apt "$@")
  [[ ${#missing[@]} -eq 0 ]] && return 0
  if [[ $(id -u) -ne 0 ]]; then
    echo "install: please install these Debian packages first: sudo apt-get install ${missing[*]}" >&2
    exit 1
  fi
  echo "install: apt-get install ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

apt_install "${APT_PACKAGES[@]}"
if [[ $want_test -eq 1 ]]; then
  # chromium: the report test renders report.html in a real browser; environment-modules:
  # a real `module` command for the env-modules test (a site's `modules`)
  apt_install chromium environment-modules
  tools/slurm-cluster install-deps # the local multi-node Slurm cluster of the Slurm tests
fi

# Python: re-install only when the pins (constraints.txt), the ranges or this script change.
extras="[llm]" base_extras="" # base: all but the engine, installed while it compiles
[[ $want_test -eq 1 ]] && extras="[llm,test]" base_extras="[test]"
stamp=.venv/.scalesweep-installed
key=$(cat pyproject.toml constraints.txt tools/install.sh | sha256sum | cut -c1-16)"$extras"
if [[ -x .venv/bin/python && -f $stamp && $(cat "$stamp") == "$key" ]]; then
  echo "install: .venv is up to date"
  exit 0
fi
"${PYTHON:-python3}" -m venv .venv
# The LLM engine compiles from source once (minutes; the wheel is cached and reused, also
# by the container image build). It compiles while pip downloads and installs the rest
# (network and disk, not the compiler's cores); the engine goes in last.
PYTHON=.venv/bin/python tools/build_llama_wheel.sh &
llama_build=$!
wheels="${SCALESWEEP_CACHE:-$HOME/.cache/scalesweep}/wheels"
# torch first and alone, at constraints.txt's version: nothing else may resolve another
# torch (GBs of CUDA). Then everything at constraints.txt's exact versions.
torch_pin=$(grep -E '^torch==' constraints.txt)
if ! .venv/bin/pip install -q ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"} "$torch_pin" ||
   ! .venv/bin/pip install -q -c constraints.txt -e ".${base_extras}"; then
  kill "$llama_build" 2>/dev/null || true
  wait "$llama_build" || true
  exit 1
fi
wait "$llama_build"
.venv/bin/pip install -q -c constraints.txt --find-links "$wheels" -e ".${extras}"
echo "$key" > "$stamp"
echo "install: .venv ready ($(.venv/bin/python -c 'import torch, snakemake; print("torch", torch.__version__, "snakemake", snakemake.__version__)'))"
