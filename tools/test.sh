#!/usr/bin/env bash
# Host tooling (tools/, not a payload): the README's test command, what CI (.ci/run) runs.
# Run the test suite: installs what the tests need (idempotent), then pytest.
#   tools/test.sh                 # everything (unit, integration, container, Slurm)
#   tools/test.sh -m "not slurm"  # any pytest arguments pass through
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install.sh --test
exec .venv/bin/pytest -ra --durations=25 "$@"
