#!/usr/bin/env bash
# A scratch copy of this working tree with proposed fixes applied, to measure them side by
# side with the unchanged tree (BENCHMARKS.md). The tree itself is never modified.
#   benchmarks/fixes/apply.sh DEST PATCH...
#   e.g. benchmarks/fixes/apply.sh /tmp/aggfix benchmarks/fixes/aggregation-*.patch
set -euo pipefail
dest=$1; shift
repo="$(cd "$(dirname "$0")/../.." && pwd)"
patches=()
for p in "$@"; do patches+=("$(cd "$(dirname "$p")" && pwd)/$(basename "$p")"); done
rm -rf "$dest" && mkdir -p "$dest"
tar -C "$repo" --exclude=./.venv --exclude=./.git --exclude=./results --exclude=./resources \
    --exclude=./logs --exclude=./.snakemake --exclude=./.hypothesis --exclude=./.pytest_cache \
    -cf - . | tar -C "$dest" -xf -
for p in "${patches[@]}"; do
  if patch -d "$dest" -p1 -s -f --dry-run -R < "$p" >/dev/null 2>&1; then
    echo "already in the tree: $(basename "$p")"  # applied on main since it was measured
    continue
  fi
  patch -d "$dest" -p1 -s -f < "$p"
  echo "applied $(basename "$p")"
done
echo "$dest/Snakefile"
