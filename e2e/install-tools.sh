#!/usr/bin/env bash
# Installs what the local Kubernetes control plane needs, into a cache outside the repo keyed by version:
#   - etcd built from its Go module (e2e/etcd-build); Debian's etcd-server (apt-get) if that build fails
#   - kube-apiserver, kube-controller-manager, kube-scheduler built from the k8s.io/kubernetes Go module,
#     pinned per version in e2e/k8s-build/<version>/go.mod (PERFSCHED_K8S_VERSION picks one, default v1.37.2)
#   - kwok and helm built from their Go modules
# Skips every step whose output is already there. Fails with a message saying what to fix.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
K8S_VERSION="${PERFSCHED_K8S_VERSION:-v1.37.2}"
KWOK_VERSION="${PERFSCHED_KWOK_VERSION:-v0.8.0}"
HELM_VERSION="${PERFSCHED_HELM_VERSION:-v3.19.0}"
CACHE="${PERFSCHED_CACHE:-$HOME/.cache/perfsched}"
K8S_BIN="$CACHE/k8s-$K8S_VERSION"
KWOK_BIN="$CACHE/kwok-$KWOK_VERSION"
HELM_BIN="$CACHE/helm-$HELM_VERSION"
ETCD_VERSION="$(awk '$1 == "go.etcd.io/etcd/server/v3" && $2 ~ /^v/ {print $2}' "$here/etcd-build/go.mod")"
ETCD_BIN="$CACHE/etcd-$ETCD_VERSION"

die() { echo "install-tools: $*" >&2; exit 1; }

# --- Go (only needed when something must be built; a warm cache works without it) -----------------------
need_go() {
  command -v go >/dev/null 2>&1 || die "Go is not installed: install Go >= 1.26 (https://go.dev/doc/install) and retry"
}
export GOTOOLCHAIN=local CGO_ENABLED=0

# --- etcd -------------------------------------------------------------------------------------------
# Built from its Go module (e2e/etcd-build pins it): Debian's etcd-server is 3.4.23, which lacks
# RequestWatchProgress; kwok v0.8.0's client-go then has every watch fail and falls back to slow relists
# (pods take 10+ s to change phase). Debian's package stays the fallback when the build fails.
if [ ! -x "$ETCD_BIN/etcd" ]; then
  need_go
  echo "install-tools: building etcd $ETCD_VERSION into $ETCD_BIN"
  mkdir -p "$ETCD_BIN"
  if ! (cd "$here/etcd-build" && go build -trimpath -ldflags "-s -w" -o "$ETCD_BIN/etcd" go.etcd.io/etcd/server/v3); then
    rm -rf "$ETCD_BIN"
    echo "install-tools: WARNING: building etcd $ETCD_VERSION failed; falling back to Debian's etcd-server" >&2
    if ! command -v etcd >/dev/null 2>&1 && [ ! -x /usr/bin/etcd ]; then
      command -v apt-get >/dev/null 2>&1 || die "etcd: the Go build failed and apt-get is not available: install etcd >= 3.5.13 on PATH"
      echo "install-tools: installing etcd-server with apt-get"
      sudo_cmd=""; [ "$(id -u)" = 0 ] || sudo_cmd="sudo"
      $sudo_cmd apt-get update -qq >/dev/null || die "apt-get update failed"
      DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq etcd-server >/dev/null \
        || die "apt-get install etcd-server failed"
      # Debian starts its own etcd service on install; stop the service (never other etcd processes)
      ($sudo_cmd systemctl stop etcd 2>/dev/null || $sudo_cmd service etcd stop 2>/dev/null || true) >/dev/null 2>&1
    fi
  fi
fi

if ! "$K8S_BIN/kube-apiserver" --version 2>/dev/null | grep -qx "Kubernetes $K8S_VERSION" \
   || [ ! -x "$K8S_BIN/kube-scheduler" ] || [ ! -x "$K8S_BIN/kube-controller-manager" ]; then
  K8S_MOD="$here/k8s-build/$K8S_VERSION"
  [ -f "$K8S_MOD/go.mod" ] || die "PERFSCHED_K8S_VERSION=$K8S_VERSION: no pinned build module $K8S_MOD/go.mod (supported: $(cd "$here/k8s-build" && echo v*))"
  need_go
  echo "install-tools: building Kubernetes $K8S_VERSION into $K8S_BIN (cold build: ~10-20 min on 2 cores)"
  mkdir -p "$K8S_BIN"
  minor="$(echo "$K8S_VERSION" | cut -d. -f2)"
  V=k8s.io/component-base/version
  LDF="-s -w -X $V.gitVersion=$K8S_VERSION -X $V.gitMajor=1 -X $V.gitMinor=$minor -X $V.gitTreeState=clean"
  LDF="$LDF -X k8s.io/client-go/pkg/version.gitVersion=$K8S_VERSION"
  (cd "$K8S_MOD" && go build -trimpath -pgo=off -ldflags "$LDF" -o "$K8S_BIN/" \
      k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
      k8s.io/kubernetes/cmd/kube-scheduler) || { rm -rf "$K8S_BIN"; die "building Kubernetes $K8S_VERSION failed (see above)"; }
fi

if [ ! -x "$KWOK_BIN/kwok" ]; then
  need_go
  echo "install-tools: building kwok $KWOK_VERSION into $KWOK_BIN"
  mkdir -p "$KWOK_BIN"
  GOBIN="$KWOK_BIN" go install "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION" \
    || { rm -rf "$KWOK_BIN"; die "building kwok $KWOK_VERSION failed (see above)"; }
fi

if [ ! -x "$HELM_BIN/helm" ]; then
  need_go
  echo "install-tools: building helm $HELM_VERSION into $HELM_BIN"
  mkdir -p "$HELM_BIN"
  GOBIN="$HELM_BIN" go install "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" \
    || { rm -rf "$HELM_BIN"; die "building helm $HELM_VERSION failed (see above)"; }
fi
# --- JobSet and Kubeflow Trainer controllers (for `perfsched dev-cluster up --with-jobsets`) ----------
# Built from their Go modules pinned in e2e/jobset-build and e2e/trainer-build (each module's own go.mod
# requirements and go.sum, so nothing asks the proxy for a version list, which it refuses for these two),
# with their CRDs and webhook configurations copied from the module source next to the binary. Skipped
# unless PERFSCHED_WITH_JOBSETS=1: most runs need only batch/v1 Jobs, whose controller is in
# kube-controller-manager. About 15 minutes on 2 cores, cached by version.
JOBSET_VERSION="$(awk '$1 == "sigs.k8s.io/jobset" && $2 ~ /^v/ {print $2}' "$here/jobset-build/go.mod")"
TRAINER_VERSION="$(awk '$1 == "github.com/kubeflow/trainer/v2" && $2 ~ /^v/ {print $2}' "$here/trainer-build/go.mod")"
JOBSET_BIN="$CACHE/jobset-$JOBSET_VERSION"
TRAINER_BIN="$CACHE/trainer-$TRAINER_VERSION"
module_dir() {  # build dir, module@version -> its source directory in the Go module cache (downloads it)
  (cd "$here/$1" && go mod download -json "$2" | awk -F'"' '$2 == "Dir" {print $4}')
}
if [ "${PERFSCHED_WITH_JOBSETS:-0}" = 1 ] && { [ ! -x "$JOBSET_BIN/jobset" ] || [ ! -f "$JOBSET_BIN/webhooks.yaml" ]; }; then
  need_go
  echo "install-tools: installing the JobSet controller $JOBSET_VERSION into $JOBSET_BIN"
  mkdir -p "$JOBSET_BIN/crds"
  src="$(module_dir jobset-build "sigs.k8s.io/jobset@$JOBSET_VERSION")" || true
  [ -n "$src" ] || { rm -rf "$JOBSET_BIN"; die "downloading sigs.k8s.io/jobset@$JOBSET_VERSION failed (see above)"; }
  install -m 0644 "$src"/config/components/crd/bases/*.yaml "$JOBSET_BIN/crds/"
  install -m 0644 "$src"/config/components/webhook/manifests.yaml "$JOBSET_BIN/webhooks.yaml"
  [ -x "$JOBSET_BIN/jobset" ] || (cd "$here/jobset-build" && go build -trimpath -ldflags "-s -w" -o "$JOBSET_BIN/jobset" sigs.k8s.io/jobset) \
    || { rm -rf "$JOBSET_BIN"; die "building the JobSet controller $JOBSET_VERSION failed (see above)"; }
fi
if [ "${PERFSCHED_WITH_JOBSETS:-0}" = 1 ] \
   && { [ ! -x "$TRAINER_BIN/trainer-controller-manager" ] || [ ! -f "$TRAINER_BIN/webhooks.yaml" ]; }; then
  need_go
  echo "install-tools: installing the Kubeflow Trainer controller $TRAINER_VERSION into $TRAINER_BIN"
  mkdir -p "$TRAINER_BIN/crds"
  src="$(module_dir trainer-build "github.com/kubeflow/trainer/v2@$TRAINER_VERSION")" || true
  [ -n "$src" ] || { rm -rf "$TRAINER_BIN"; die "downloading github.com/kubeflow/trainer/v2@$TRAINER_VERSION failed (see above)"; }
  install -m 0644 "$src"/manifests/base/crds/trainer.kubeflow.org_*.yaml "$TRAINER_BIN/crds/"
  install -m 0644 "$src"/manifests/base/webhook/manifests.yaml "$TRAINER_BIN/webhooks.yaml"
  [ -x "$TRAINER_BIN/trainer-controller-manager" ] || (cd "$here/trainer-build" && go build -trimpath -ldflags "-s -w" -o "$TRAINER_BIN/trainer-controller-manager" \
      github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager) \
    || { rm -rf "$TRAINER_BIN"; die "building the Kubeflow Trainer controller $TRAINER_VERSION failed (see above)"; }
fi

etcd_path="$ETCD_BIN/etcd"; [ -x "$etcd_path" ] || etcd_path="$(command -v etcd || echo /usr/bin/etcd)"
echo "install-tools: ok (k8s $K8S_BIN, kwok $KWOK_BIN, helm $HELM_BIN, etcd $etcd_path)"

# --- prometheus (promtool + prometheus server) -- owned by the Helm/observability issue (7) -----------
# `promtool check rules` / `promtool test rules` and the e2e scrape test need Debian's prometheus package.
if ! command -v promtool >/dev/null 2>&1; then
  command -v apt-get >/dev/null 2>&1 || die "promtool is missing and apt-get is not available: install Prometheus (promtool on PATH)"
  echo "install-tools: installing prometheus (promtool) with apt-get"
  sudo_cmd=""; [ "$(id -u)" = 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq >/dev/null || die "apt-get update failed"
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends prometheus >/dev/null \
    || die "apt-get install prometheus failed"
  # Debian starts the service on install; the e2e test runs its own prometheus per run.
  ($sudo_cmd systemctl stop prometheus 2>/dev/null || $sudo_cmd service prometheus stop 2>/dev/null || true) >/dev/null 2>&1
fi

# --- PyTorch for the real-training tests and `perfsched demo --real` -------------------------------------
# Debian's python3-torch (CPU, 1.13) for /usr/bin/python3 (3.11, the same minor version as perfsched's
# venv, so the workers can import scheduler.worker through `perfsched emulate --exec`'s worker site).
# Skipped when a Python with PyTorch is already there ($PERFSCHED_TRAINER_PYTHON or /usr/bin/python3)
# or PERFSCHED_SKIP_TORCH=1. Its torch.distributed.run fails at start-up (a packaging bug); the tests
# start workers with the environment the operator sets instead.
torch_python="${PERFSCHED_TRAINER_PYTHON:-/usr/bin/python3}"
if [ "${PERFSCHED_SKIP_TORCH:-0}" != 1 ] && ! "$torch_python" -c 'import torch, torch.distributed' >/dev/null 2>&1; then
  command -v apt-get >/dev/null 2>&1 || die "PyTorch is missing and apt-get is not available: install PyTorch for $torch_python (or set PERFSCHED_SKIP_TORCH=1; the real-training tests are then skipped)"
  echo "install-tools: installing python3-torch (CPU PyTorch for $torch_python) with apt-get"
  sudo_cmd=""; [ "$(id -u)" = 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq >/dev/null || die "apt-get update failed"
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends python3-torch >/dev/null \
    || die "apt-get install python3-torch failed"
  "$torch_python" -c 'import torch, torch.distributed' || die "python3-torch is installed but $torch_python cannot import torch"
fi
