#!/usr/bin/env bash
# Host tooling (tools/, not a payload): the README's test command, what CI (.ci/run) runs.
# Run the test suite: installs what the tests need (idempotent), then pytest.
#   tools/test.sh                 # everything (unit, integration, container, Slurm)
#   tools/test.sh -m "not slurm"  # any pytest arguments: one plain pytest run with them
#
# Without arguments the suite runs in two lanes side by side, then a third alone:
#   1. the Slurm tests (-m slurm), in the background, in a session of their own: between
#      jobs they mostly wait for the plugin's status checks (a job is seen done 18 s
#      after its submission however short it is);
#   2. beside them, under nice 10, the tests that measure nothing (-m "not slurm and not
#      integration and not quiet"): they fill those waits. Not the integration tests:
#      their payloads start sessions of their own, which nice does not reach under the
#      kernel's autogroup scheduling, and took enough CPU from a Slurm job to break the
#      timing of tests/test_slurm_faults.py's TIMEOUT-then-retry point (seen once in
#      three runs of that layout);
#   3. then, alone on the machine, the local integration tests and those marked quiet:
#      they measure for real, compare timings (tests/test_compare.py) or check that a
#      quiet run is not flagged (tests/test_interference.py).
# Each lane's output is printed whole when it ends; the exit status is the first failing
# lane's. Ctrl-C (or SIGTERM) interrupts both running lanes (their fixtures tear down:
# the Slurm cluster's jobs are cancelled) and skips the rest.
# SCALESWEEP_TEST_LANES=0 runs the whole suite as one pytest run instead.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install.sh --test
PYTEST=(.venv/bin/pytest -ra --durations=25)
if [[ $# -gt 0 || "${SCALESWEEP_TEST_LANES:-1}" == 0 ]]; then
    exec "${PYTEST[@]}" "$@"
fi

logs=$(mktemp -d "${TMPDIR:-/tmp}/scalesweep-test-lanes.XXXXXX")
started=$SECONDS
# Its own session (setsid: not a group leader here, so it execs in place): the
# terminal's Ctrl-C reaches this script and the niced lane only; the trap passes it on
# to the Slurm lane's whole process group as SIGINT, so pytest tears its fixtures down
# and Snakemake cancels its jobs. bash starts a background job with SIGINT ignored (no
# job control), and a Python started so never raises KeyboardInterrupt: the lane is
# exec'd with SIGINT back to its default.
setsid .venv/bin/python -c 'import os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_DFL)
os.execv(sys.argv[1], sys.argv[1:])' "${PYTEST[@]}" -m slurm >"$logs/slurm.log" 2>&1 &
slurm_pid=$!
slurm_running=1
stop_slurm() {
    if [[ $slurm_running == 1 ]]; then
        slurm_running=0
        kill -INT -- "-$slurm_pid" 2>/dev/null || true
        for _ in $(seq 120); do  # teardown: cancelled jobs, the cluster's own cleanup
            kill -0 "$slurm_pid" 2>/dev/null || break
            sleep 1
        done
        kill -KILL -- "-$slurm_pid" 2>/dev/null || true
        wait "$slurm_pid" 2>/dev/null || true
        echo "=== lane slurm: interrupted; its output: $logs/slurm.log ==="
    fi
}
trap 'stop_slurm; exit 130' INT TERM
trap 'stop_slurm' EXIT

lane() {  # name, exit status
    echo "=== lane $1: exit $2, $((SECONDS - started)) s after the suite's start ==="
}

set +e
nice -n 10 "${PYTEST[@]}" -m "not slurm and not integration and not quiet" >"$logs/beside.log" 2>&1
beside=$?
cat "$logs/beside.log"
lane "beside Slurm (nice 10)" "$beside"
if [[ $beside == 2 ]]; then  # pytest interrupted (Ctrl-C reached it first)
    stop_slurm
    exit 2
fi
wait "$slurm_pid"
slurm=$?
slurm_running=0
trap - INT TERM EXIT
cat "$logs/slurm.log"
lane "slurm" "$slurm"
"${PYTEST[@]}" -m "(integration or quiet) and not slurm"
alone=$?
lane "integration and quiet (alone)" "$alone"
set -e
rm -rf "$logs"

for status in "$beside" "$slurm" "$alone"; do
    # 5: nothing collected (e.g. a filtered checkout), not a failure
    if [[ "$status" != 0 && "$status" != 5 ]]; then
        exit "$status"
    fi
done
