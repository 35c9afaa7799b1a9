#!/usr/bin/env bash
# Host tooling (tools/, not a payload): the README's test command, what CI (.ci/run) runs.
# Installs what the tests need (idempotent), then pytest:
#   tools/test.sh                 # everything
#   tools/test.sh -m "not slurm"  # any pytest arguments: one plain pytest run with them
#
# Without arguments, two pytest runs (the test layers: one folder each, docs/testing.md):
#   1. tests/slurm, tests/integration, tests/workflow and tests/unit on pytest-xdist
#      workers (--dist loadfile: a module's tests on one worker, and every Slurm test on
#      one, tests/conftest.py's scheduler; the Slurm tests first as they take longest);
#   2. then tests/quality alone: they compare timings or check that a quiet run is not
#      flagged disturbed, so nothing may run beside them.
# Why workers beside each other on 2 cores: a Slurm test mostly waits (the Slurm plugin
# sees a job done ~18 s after its submission however short it is, and
# tests/slurm/test_slurm_faults.py waits minutes for Slurm's time limits on jobs that
# sleep), and the other tests wait on Snakemake's start-up and on subprocesses much of
# the time. What runs side by side is indifferent to the load: test campaigns flag no run
# disturbed (conftest.tiny_config's thresholds), no test times anything, and the Slurm
# tests wait for what they look at.
# TEST_WORKERS sets the number of workers (default 4).
# The exit status is the first failing run's (5, nothing collected, is no failure).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install.sh --test
PYTEST=(.venv/bin/pytest -ra --durations=60)
if [[ $# -gt 0 ]]; then
    exec "${PYTEST[@]}" "$@"
fi

started=$SECONDS
finished() {  # name, exit status
    echo "=== $1: exit $2, $((SECONDS - started)) s after the start ==="
}
set +e
# Job control (set -m): the run in a process group of its own, where SIGINT is not ignored
# as in a script's plain background job; the script waits for it, so Ctrl-C or CI's
# SIGTERM reaches this trap at once, which passes SIGINT to the run: pytest tears its
# fixtures down (Snakemake cancels its Slurm jobs), then we exit.
set -m
"${PYTEST[@]}" -n "${TEST_WORKERS:-4}" --dist loadfile --no-loadscope-reorder \
    tests/slurm tests/integration tests/workflow tests/unit &
pid=$!
trap 'kill -INT -- "-$pid" 2>/dev/null; wait "$pid"; exit 130' INT TERM
wait "$pid"
side_by_side=$?
trap - INT TERM
set +m
finished "slurm, integration, workflow and unit" "$side_by_side"
"${PYTEST[@]}" tests/quality
alone=$?
finished "quality (alone)" "$alone"
set -e

for status in "$side_by_side" "$alone"; do
    if [[ "$status" != 0 && "$status" != 5 ]]; then
        exit "$status"
    fi
done
