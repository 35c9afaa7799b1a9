#!/usr/bin/env bash
# Host tooling (tools/, not a payload): the README's test command, what CI (.ci/run) runs.
# Installs what the tests need (idempotent), then pytest:
#   tools/test.sh                 # everything
#   tools/test.sh -m "not slurm"  # any pytest arguments: one plain pytest run with them
#
# Without arguments, pytest runs of the test layers (one folder each, docs/testing.md):
#   1. tests/slurm (the project's Slurm cluster, tools/slurm-cluster), in the background;
#   2. beside it, tests/unit and tests/workflow;
#   3. and beside both, tests/integration;
#   4. then, alone, tests/quality: they compare timings or check that a quiet run is not
#      flagged disturbed, so nothing may run beside them.
# Why 1-3 side by side (the one exception to one run after another): a Slurm test
# mostly waits. The Slurm plugin sees a job done ~18 s after its submission however short
# it is (profiles/local-slurm: its status checks), and tests/slurm/test_slurm_faults.py waits
# minutes for Slurm's time limits on jobs that sleep, so the Slurm run's ~11 minutes
# leave the 2 cores mostly idle, and the unit, workflow and integration tests wait on
# Snakemake's start-up and on subprocesses much of the time. What runs side by side is
# indifferent to the load: test campaigns flag no run disturbed (conftest.tiny_config's thresholds), no test times
# anything, and the Slurm tests wait for what they look at (no race with the machine's
# speed: tests/slurm/test_slurm_faults.py holds the retry it inspects).
# The exit status is the first failing run's (5, nothing collected, is no failure).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install.sh --test
PYTEST=(.venv/bin/pytest -ra --durations=25)
if [[ $# -gt 0 ]]; then
    exec "${PYTEST[@]}" "$@"
fi

log=$(mktemp "${TMPDIR:-/tmp}/scalesweep-test-slurm.XXXXXX")
ilog=$(mktemp "${TMPDIR:-/tmp}/scalesweep-test-integration.XXXXXX")
started=$SECONDS
finished() {  # name, exit status
    echo "=== $1: exit $2, $((SECONDS - started)) s after the start ==="
}
# Job control (set -m): each run in a process group of its own, where SIGINT is not
# ignored as in a script's plain background job; the script waits for them, so Ctrl-C
# or CI's SIGTERM reaches this trap at once, which passes SIGINT to every run: pytest
# tears its fixtures down (Snakemake cancels its Slurm jobs), then we exit.
set -m
"${PYTEST[@]}" tests/slurm >"$log" 2>&1 &
slurm_pid=$!
"${PYTEST[@]}" tests/integration >"$ilog" 2>&1 &
integration_pid=$!
"${PYTEST[@]}" tests/unit tests/workflow &
unit_pid=$!
trap 'kill -INT -- "-$slurm_pid" "-$integration_pid" "-$unit_pid" 2>/dev/null; wait; cat "$log" "$ilog"; exit 130' INT TERM
set +e
wait "$unit_pid"
unit=$?
finished "unit and workflow" "$unit"
wait "$integration_pid"
integration=$?
cat "$ilog"
rm -f "$ilog"
finished "integration" "$integration"
wait "$slurm_pid"
slurm=$?
trap - INT TERM
set +m
cat "$log"
rm -f "$log"
finished "slurm" "$slurm"
"${PYTEST[@]}" tests/quality
alone=$?
finished "quality (alone)" "$alone"
set -e

for status in "$unit" "$integration" "$slurm" "$alone"; do
    if [[ "$status" != 0 && "$status" != 5 ]]; then
        exit "$status"
    fi
done
