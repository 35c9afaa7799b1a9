#!/usr/bin/env bash
# Host tooling (tools/, not a payload): the README's first command.
# From a fresh clone to report.html: install, run the embedded default sweep, make the report.
# Idempotent: a second run finds nothing to do and says so within seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install.sh
.venv/bin/snakemake --profile profiles/local "$@"
if [[ ! -f report.html || -n $(find results -newer report.html -type f -print -quit) ]]; then
  .venv/bin/snakemake --profile profiles/local --report report.html "$@"
else
  echo "quickstart: report.html is up to date"
fi
echo "quickstart: open report.html; tables in results/summary/"
