#!/usr/bin/env bash
# Run the test suite: installs what the tests need (idempotent), then pytest.
#   scripts/test.sh                 # everything (unit, integration, container, Slurm)
#   scripts/test.sh -m "not slurm"  # any pytest arguments pass through
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install.sh --test
exec .venv/bin/pytest -ra "$@"
