#!/usr/bin/env bash
# Host tooling (tools/, not a payload): run by tools/install.sh and by hand on GPU sites.
# Build the llama-cpp-python wheel once (CPU only, portable) into the scalesweep cache.
#
#   tools/build_llama_wheel.sh          # no-op when the wheel is already there
#   FORCE=1 tools/build_llama_wheel.sh  # rebuild
#
# Then install it (the [server] extra pulls its pure-Python deps from the index):
#   pip install --find-links "${SCALESWEEP_CACHE:-$HOME/.cache/scalesweep}/wheels" \
#       'llama-cpp-python[server]==0.3.36'
#
# Environment:
#   SCALESWEEP_CACHE            cache root (default $HOME/.cache/scalesweep)
#   PYTHON                      interpreter whose pip builds the wheel (default: the
#                               repository's .venv/bin/python, else python3)
#   LLAMA_CPP_VERSION           default 0.3.36 (keep in step with the install pin)
#   LLAMA_CPU_LEVEL             x86-64-v3 (default: SSE4.2 AVX AVX2 FMA F16C BMI2; any
#                               Haswell/Zen or newer CPU) or baseline (SSE only; slow,
#                               runs anywhere) - never -march=native, because the
#                               same wheel goes into container images run elsewhere
#   CMAKE_BUILD_PARALLEL_LEVEL  compile jobs (default: 2)
#   EXTRA_CMAKE_ARGS            appended to CMAKE_ARGS (e.g. -DGGML_HIP=ON for a ROCm
#                               build on a site that has the toolkit; not done here)
#
# The wheel is tagged py3-none-linux_<arch> (llama-cpp-python loads its shared
# libraries with ctypes), so it installs into any CPython >= 3.8; it links against
# this machine's glibc and libstdc++, so a container image needs a glibc at least as
# new (Debian 12: 2.36). OpenMP is off so it needs no libgomp at run time.
set -euo pipefail

VERSION="${LLAMA_CPP_VERSION:-0.3.36}"
CACHE="${SCALESWEEP_CACHE:-$HOME/.cache/scalesweep}"
WHEELS="$CACHE/wheels"
LEVEL="${LLAMA_CPU_LEVEL:-x86-64-v3}"
export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-2}"

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$here")"
if [[ -z "${PYTHON:-}" ]]; then
    if [[ -x "$repo/.venv/bin/python" ]]; then PYTHON="$repo/.venv/bin/python"; else PYTHON=python3; fi
fi

mkdir -p "$WHEELS"
exec 9>"$WHEELS/.llama-build.lock"
if ! flock -n 9; then
    echo "build_llama_wheel: another build holds $WHEELS/.llama-build.lock; waiting" >&2
    flock 9
fi

shopt -s nullglob
existing=("$WHEELS"/llama_cpp_python-"$VERSION"-*.whl)
if [[ ${#existing[@]} -gt 0 && -z "${FORCE:-}" ]]; then
    echo "build_llama_wheel: present: ${existing[0]}"
    exit 0
fi

case "$LEVEL" in
    x86-64-v3)
        cpu_args="-DGGML_NATIVE=OFF -DGGML_SSE42=ON -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX512=OFF"
        ;;
    baseline)
        cpu_args="-DGGML_NATIVE=OFF -DGGML_SSE42=OFF -DGGML_AVX=OFF -DGGML_AVX2=OFF -DGGML_FMA=OFF -DGGML_F16C=OFF -DGGML_BMI2=OFF -DGGML_AVX512=OFF"
        ;;
    *)
        echo "build_llama_wheel: LLAMA_CPU_LEVEL must be x86-64-v3 or baseline, not '$LEVEL'" >&2
        exit 2
        ;;
esac
if [[ "$(uname -m)" != "x86_64" ]]; then
    cpu_args="-DGGML_NATIVE=OFF"  # aarch64 etc.: the compiler's generic target
fi
# CPU backend only; no OpenMP (ggml's own thread pool); no multimodal (llava/mtmd) library.
export CMAKE_ARGS="$cpu_args -DGGML_OPENMP=OFF -DGGML_CUDA=OFF -DGGML_HIP=OFF -DGGML_VULKAN=OFF -DGGML_METAL=OFF -DGGML_BLAS=OFF -DLLAVA_BUILD=OFF -DCMAKE_BUILD_TYPE=Release ${EXTRA_CMAKE_ARGS:-}"
export FORCE_CMAKE=1

tmp="$(mktemp -d "$WHEELS/.build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
log="$WHEELS/llama_cpp_python-$VERSION.build.log"
echo "build_llama_wheel: building llama-cpp-python==$VERSION with $PYTHON"
echo "build_llama_wheel: CMAKE_ARGS=$CMAKE_ARGS  jobs=$CMAKE_BUILD_PARALLEL_LEVEL  log=$log"
start=$(date +%s)
fail() {
    echo "build_llama_wheel: FAILED ($1), see $log" >&2
    tail -n 30 "$log" >&2
    exit 1
}
# The pinned sdist, with one line changed: its CMakeLists.txt forces llama.cpp's "common"
# library on (LLAMA_BUILD_COMMON ... FORCE, so -D cannot turn it off). That library and
# the cpp-httplib it pulls in are for llama.cpp's own tools; the Python package never
# loads libllama-common.so, and they are about half the compile. LLAMA_BUILD_COMMON=OFF is
# llama.cpp's own switch (its install rule and cpp-httplib follow it).
"$PYTHON" -m pip download --no-deps --no-cache-dir --no-binary llama-cpp-python \
    -d "$tmp/sdist" "llama-cpp-python==$VERSION" >"$log" 2>&1 || fail "download"
sdists=("$tmp"/sdist/llama_cpp_python-"$VERSION".tar.gz)
[[ -f ${sdists[0]} ]] || fail "no sdist llama_cpp_python-$VERSION.tar.gz in $tmp/sdist"
tar -xzf "${sdists[0]}" -C "$tmp/sdist" || fail "unpack ${sdists[0]}"
src="$tmp/sdist/llama_cpp_python-$VERSION"
forced='set(LLAMA_BUILD_COMMON ON CACHE BOOL "Build llama.cpp common library" FORCE)'
grep -qF "$forced" "$src/CMakeLists.txt" ||
    fail "the line to change is not in $src/CMakeLists.txt: check this script against $VERSION"
sed -i "s|${forced}|${forced/ ON / OFF }|" "$src/CMakeLists.txt"
! grep -qF "$forced" "$src/CMakeLists.txt" || fail "LLAMA_BUILD_COMMON still forced on"
"$PYTHON" -m pip wheel --no-deps --no-cache-dir -w "$tmp" "$src" >>"$log" 2>&1 || fail "build"
secs=$(( $(date +%s) - start ))
built=("$tmp"/llama_cpp_python-"$VERSION"-*.whl)
if [[ ${#built[@]} -ne 1 ]]; then
    echo "build_llama_wheel: expected one wheel in $tmp, found ${#built[@]}" >&2
    exit 1
fi
name="$(basename "${built[0]}")"
rm -f "$WHEELS"/llama_cpp_python-"$VERSION"-*.whl
mv "${built[0]}" "$WHEELS/$name"
cat >"$WHEELS/llama_cpp_python-$VERSION.buildinfo.json" <<EOF
{"package": "llama-cpp-python", "version": "$VERSION", "wheel": "$name",
 "cpu_level": "$LEVEL", "cmake_args": "$CMAKE_ARGS", "llama_build_common": false,
 "build_seconds": $secs,
 "built_on": "$(hostname)", "machine": "$(uname -m)", "date": "$(date -Iseconds)",
 "sha256": "$(sha256sum "$WHEELS/$name" | cut -d' ' -f1)"}
EOF
echo "build_llama_wheel: built $WHEELS/$name in ${secs}s"
