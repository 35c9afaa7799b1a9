#!/usr/bin/env bash
# Host tooling (tools/, not a payload): the README's test command, what CI (.ci/run) runs.
# Run the test suite: installs what the tests need (idempotent), then pytest.
#   tools/test.sh                 # everything (unit, integration, container, Slurm)
#   tools/test.sh -m "not slurm"  # any pytest arguments: one plain pytest run with them
#
# Without arguments the suite runs in two lanes side by side, then a third alone:
#   1. the Slurm tests (-m slurm), in the background: their jobs get the CPU they ask for,
#      and between jobs they mostly wait for the plugin's status checks (a job is seen
#      done 18 s after its submission however short it is);
#   2. beside them, at nice 19 (they take only the CPU the Slurm lane leaves idle), every
#      other test but those marked quiet: their campaigns use tiny_config, whose runs are
#      never flagged disturbed and whose assertions hold whatever the timings;
#   3. then, alone on the machine, the tests marked quiet: they compare timings
#      (tests/test_compare.py), decide repeats with the default interference thresholds
#      (tests/test_adaptive.py) or check that a quiet run is not flagged
#      (tests/test_interference.py), so nothing of ours may run beside them.
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
nice -n 19 "${PYTEST[@]}" -m "not slurm and not quiet" >"$logs/beside.log" 2>&1
beside=$?
cat "$logs/beside.log"
lane "beside Slurm (nice 19)" "$beside"
wait "$slurm_pid"
slurm=$?
trap - EXIT
cat "$logs/slurm.log"
lane "slurm" "$slurm"
"${PYTEST[@]}" -m "quiet and not slurm"
quiet=$?
lane "quiet (alone)" "$quiet"
set -e
rm -rf "$logs"

for status in "$beside" "$slurm" "$quiet"; do
    # 5: nothing collected (e.g. a filtered checkout), not a failure
    if [[ "$status" != 0 && "$status" != 5 ]]; then
        exit "$status"
    fi
done
