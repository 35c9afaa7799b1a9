#!/usr/bin/env bash
# Host tooling (tools/, not a payload): the README's test command, what CI (.ci/run) runs.
# Run the test suite: installs what the tests need (idempotent), then pytest.
#   tools/test.sh                 # everything (unit, integration, container, Slurm)
#   tools/test.sh -m "not slurm"  # any pytest arguments: one plain pytest run with them
#
# Without arguments the suite runs in two lanes, then a third:
#   1. the Slurm tests (-m slurm), in the background: they mostly wait for the plugin's
#      status checks (a job is seen done 18 s after its submission however short it is);
#   2. beside them, niced, the tests that measure nothing (-m "not slurm and not
#      integration and not quiet"): they fill those waits; a Slurm run they slow may read
#      "disturbed", which the Slurm tests accept (the cluster's nodes share these cores);
#   3. then, alone on the machine, the local integration tests and those marked quiet:
#      they measure for real and compare timings (tests/test_compare.py) or check that a
#      quiet run is not flagged (tests/test_interference.py), so nothing runs beside them.
# Each lane's output is printed whole when it ends; the exit status is the first failing
# lane's. SCALESWEEP_TEST_LANES=0 runs the whole suite as one pytest run instead.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install.sh --test
PYTEST=(.venv/bin/pytest -ra --durations=25)
if [[ $# -gt 0 || "${SCALESWEEP_TEST_LANES:-1}" == 0 ]]; then
    exec "${PYTEST[@]}" "$@"
fi

logs=$(mktemp -d "${TMPDIR:-/tmp}/scalesweep-test-lanes.XXXXXX")
started=$SECONDS
"${PYTEST[@]}" -m slurm >"$logs/slurm.log" 2>&1 &
slurm_pid=$!
trap 'kill "$slurm_pid" 2>/dev/null || true' EXIT

lane() {  # name, exit status
    echo "=== lane $1: exit $2, $((SECONDS - started)) s after the suite's start ==="
}

set +e
nice -n 10 "${PYTEST[@]}" -m "not slurm and not integration and not quiet" >"$logs/unit.log" 2>&1
unit=$?
cat "$logs/unit.log"
lane "unit (beside Slurm)" "$unit"
wait "$slurm_pid"
slurm=$?
trap - EXIT
cat "$logs/slurm.log"
lane "slurm" "$slurm"
"${PYTEST[@]}" -m "(integration or quiet) and not slurm"
integration=$?
lane "integration (alone)" "$integration"
set -e
rm -rf "$logs"

for status in "$unit" "$slurm" "$integration"; do
    # 5: nothing collected (e.g. a filtered checkout), not a failure
    if [[ "$status" != 0 && "$status" != 5 ]]; then
        exit "$status"
    fi
done
