#!/usr/bin/env bash
# BENCHMARKS.md section 6: the GPU path on one GPU node without a scheduler or network,
# through the workflow (benchmarks/configs/h200-node.yaml and its site file).
#   benchmarks/gpu_node.sh OUTDIR FASHION_MNIST_DIR [WHEELS_DIR]
# FASHION_MNIST_DIR holds train-images-idx3-ubyte.gz and train-labels-idx1-ubyte.gz (the
# node has no network: copy them there). WHEELS_DIR (optional): wheels of what the node's
# Python lacks (snakemake and its dependencies, gguf), installed into $TMPDIR/site.
# The campaign runs in $TMPDIR/h200; OUTDIR gets the log, the summary, the metrics files
# and report.html (REPORT=0: no report).
set -uo pipefail
out=$(realpath "$1"); data=$(realpath "$2"); wheels=${3:-}
cd "$(dirname "$0")/.."
repo=$PWD
tmp=${TMPDIR:-/tmp}
py=${PYTHON:-python3}
if [[ -n "$wheels" ]]; then
    "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target "$tmp/site" "$wheels"/*.whl || exit 1
    export PYTHONPATH="$tmp/site${PYTHONPATH:+:$PYTHONPATH}"
    export PATH="$tmp/site/bin:$PATH"
fi
{
    date -u; nvidia-smi; nproc; free -g; "$py" -V
    "$py" -c 'import torch; print("torch", torch.__version__, torch.cuda.is_available(), torch.cuda.get_device_name(0))'
    command -v mpirun || echo "no mpirun: the CNN's MPI mode is not run"
} >"$out/machine.txt" 2>&1
cat >"$tmp/h200-paths.yaml" <<YAML
datasets:
  fmnist_gpu: {path: $data}
  fmnist_cpu: {path: $data}
YAML
# EXTRA_CONFIGFILE: one more config file over it (a smaller sweep for a smoke run)
configs=("$repo/benchmarks/configs/h200-node.yaml" "$tmp/h200-paths.yaml" ${EXTRA_CONFIGFILE:+"$EXTRA_CONFIGFILE"})
work=$tmp/h200
mkdir -p "$work"
start=$SECONDS
timeout -s INT "${SWEEP_TIMEOUT:-460}" "$py" -m snakemake --snakefile "$repo/Snakefile" \
    --profile "$repo/profiles/local" --configfile "${configs[@]}" -d "$work" --cores all >"$out/snakemake.log" 2>&1
echo "snakemake exit $? after $((SECONDS - start)) s" | tee -a "$out/machine.txt"
[[ "${REPORT:-1}" == 0 ]] || timeout 90 "$py" -m snakemake --snakefile "$repo/Snakefile" --profile "$repo/profiles/local" \
    --configfile "${configs[@]}" -d "$work" \
    --report "$out/report.html" >"$out/report.log" 2>&1 || echo "report failed" >>"$out/machine.txt"
(cd "$work" && tar czf "$out/results.tgz" results/summary \
    $(find results/runs -name 'metrics.json' -o -name 'run.log' -o -name 'attempts.jsonl' | sort) \
    .snakemake/log 2>/dev/null)
tail -3 "$out/snakemake.log"
