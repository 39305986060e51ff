#!/usr/bin/env bash
# perfsched on kind (Docker users): the same set-up as `perfsched dev-cluster up`, in a kind cluster.
#   1. kind cluster (e2e/kind/cluster.yaml)
#   2. KWOK controller in the cluster + perfsched's stages (e2e/kwok-stages.yaml)
#   3. the TrainingJob CRD (crds/) and fake GPU nodes from a cluster spec (`perfsched dev-cluster nodes`)
#   4. perfsched itself from the Helm chart (extender, operator, second kube-scheduler), image built locally
# Then run the workload emulator locally (`perfsched emulate`) and point the e2e tests at the cluster:
#   PERFSCHED_E2E_KUBECONFIG=$(kind get kubeconfig-path ...) pytest e2e
# Not run in CI here (no Docker on the build machine). Usage: e2e/kind/up.sh [cluster-spec] ; down: e2e/kind/down.sh
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
SPEC="${1:-modern-mix}"
NAME="${PERFSCHED_KIND_NAME:-perfsched}"
KWOK_VERSION="${PERFSCHED_KWOK_VERSION:-v0.8.0}"
KUBECONFIG_OUT="${PERFSCHED_KIND_KUBECONFIG:-$HOME/.cache/perfsched/kind-$NAME.kubeconfig}"
IMAGE="perfsched:dev"

die() { echo "kind/up.sh: $*" >&2; exit 1; }
for tool in docker kind kubectl helm perfsched; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool is not on PATH (perfsched: activate the venv from \`make venv\`)"
done
docker info >/dev/null 2>&1 || die "the Docker daemon is not reachable"

if ! kind get clusters | grep -qx "$NAME"; then
  kind create cluster --name "$NAME" --config "$here/cluster.yaml" ${PERFSCHED_KIND_IMAGE:+--image "$PERFSCHED_KIND_IMAGE"}
fi
mkdir -p "$(dirname "$KUBECONFIG_OUT")"
kind get kubeconfig --name "$NAME" > "$KUBECONFIG_OUT"
export KUBECONFIG="$KUBECONFIG_OUT"

# KWOK controller (its release manifest manages nodes annotated kwok.x-k8s.io/node=fake) and our stages
kubectl apply -f "https://github.com/kubernetes-sigs/kwok/releases/download/$KWOK_VERSION/kwok.yaml"
kubectl -n kube-system rollout status deployment/kwok-controller --timeout=120s
kubectl apply -f "$repo/e2e/kwok-stages.yaml"

kubectl apply -f "$repo/crds/"
kubectl wait --for=condition=Established crd/trainingjobs.perfsched.dev --timeout=60s
perfsched dev-cluster nodes --cluster "$SPEC" --kubeconfig "$KUBECONFIG_OUT"

docker build -t "$IMAGE" "$repo"
kind load docker-image "$IMAGE" --name "$NAME"
helm upgrade --install perfsched "$repo/helm/perfsched" --namespace perfsched-system --create-namespace \
  --set image.repository=perfsched --set image.tag=dev --wait --timeout 5m

cat <<MSG
perfsched is running on kind cluster '$NAME'.
  export KUBECONFIG=$KUBECONFIG_OUT
  perfsched emulate --time-scale 60 &            # the workload emulator plays the training processes
  PERFSCHED_E2E_KUBECONFIG=$KUBECONFIG_OUT pytest e2e -m e2e   # tests that need the local extender port skip
  e2e/kind/down.sh                               # delete the cluster
MSG
