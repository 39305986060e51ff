#!/usr/bin/env bash
# Deletes the kind cluster made by e2e/kind/up.sh.
set -euo pipefail
NAME="${PERFSCHED_KIND_NAME:-perfsched}"
command -v kind >/dev/null 2>&1 || { echo "kind/down.sh: kind is not on PATH" >&2; exit 1; }
kind delete cluster --name "$NAME"
rm -f "${PERFSCHED_KIND_KUBECONFIG:-$HOME/.cache/perfsched/kind-$NAME.kubeconfig}"
