#!/usr/bin/env bash
# Copies the canonical CRDs (crds/*.yaml at the repo root) into the chart's crds/ directory, so that
# `helm install` creates exactly what `kubectl apply -f crds/` would. tests/deploy/test_chart.py fails
# when the two differ; run this script after editing crds/. `--check` only compares (exit 1 on drift).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
src="$here/../crds"
dst="$here/perfsched/crds"
mode="${1:-sync}"
shopt -s nullglob
srcs=("$src"/*.yaml)
[ ${#srcs[@]} -gt 0 ] || { echo "sync-crds: no CRDs found in $src" >&2; exit 1; }
if [ "$mode" = "--check" ]; then
  diff -r -x examples -x .gitkeep "$src" "$dst" >/dev/null \
    || { echo "sync-crds: $dst differs from $src; run helm/sync-crds.sh" >&2; exit 1; }
  echo "sync-crds: chart CRDs match $src"
  exit 0
fi
mkdir -p "$dst"
find "$dst" -maxdepth 1 -name '*.yaml' -delete
cp "${srcs[@]}" "$dst/"
echo "sync-crds: copied ${#srcs[@]} CRD file(s) into $dst"
