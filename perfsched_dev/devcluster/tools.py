"""Where the control plane's programs are: etcd, the Kubernetes binaries, kwok, openssl, and repo files.

Versions and the cache layout match ``e2e/install-tools.sh`` (which builds them): binaries live in
``$PERFSCHED_CACHE`` (default ``~/.cache/perfsched``) under ``k8s-<version>/``, ``kwok-<version>/`` and
``etcd-<version>/`` (else the ``etcd`` on PATH, e.g. Debian's);
``PERFSCHED_K8S_BIN_DIR``/``PERFSCHED_KWOK_BIN``/``PERFSCHED_ETCD_BIN`` override single paths.
``find_tools`` reports every missing piece at once, with the command that fixes it. Reads the file
system and the environment only.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from scheduler.core.errors import PerfschedError

#: the default; v1.35.4 stays built and tested (``--k8s-version`` / ``PERFSCHED_K8S_VERSION``)
K8S_VERSION = "v1.37.2"
KWOK_VERSION = "v0.8.0"
HELM_VERSION = "v3.19.0"
#: etcd built from e2e/etcd-build (Debian's 3.4 lacks RequestWatchProgress, which kwok's watches need)
ETCD_VERSION = "v3.6.16"

_FIX = "run `make tools` (or `bash e2e/install-tools.sh`) to install it"


class DevClusterError(PerfschedError):
    """The local control plane could not be started, found or stopped; the message says how to fix it."""


@dataclass(frozen=True, slots=True)
class Tools:
    """Absolute paths of everything ``perfsched dev-cluster up`` runs or reads."""

    etcd: Path
    kube_apiserver: Path
    kube_controller_manager: Path
    kube_scheduler: Path
    kwok: Path
    openssl: Path
    kwok_stages: Path
    crds_dir: Path | None
    k8s_version: str = K8S_VERSION


def cache_dir(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    return Path(env.get("PERFSCHED_CACHE") or Path.home() / ".cache" / "perfsched")


def repo_root() -> Path | None:
    """The source checkout this package runs from (it holds ``e2e/`` and ``crds/``), if any."""
    root = Path(__file__).resolve().parents[2]
    return root if (root / "e2e").is_dir() else None


def find_tools(env: Mapping[str, str] | None = None, k8s_version: str | None = None) -> Tools:
    """Locate every program and file; raise ``DevClusterError`` listing all that are missing.

    The Kubernetes binaries are those of ``k8s_version``, else ``$PERFSCHED_K8S_VERSION``, else
    ``K8S_VERSION`` (each built by ``PERFSCHED_K8S_VERSION=<version> e2e/install-tools.sh``)."""
    env = os.environ if env is None else env
    cache = cache_dir(env)
    k8s_version = k8s_version or env.get("PERFSCHED_K8S_VERSION") or K8S_VERSION
    kwok_version = env.get("PERFSCHED_KWOK_VERSION") or KWOK_VERSION
    k8s_dir = Path(env.get("PERFSCHED_K8S_BIN_DIR") or cache / f"k8s-{k8s_version}")
    kwok = Path(env.get("PERFSCHED_KWOK_BIN") or cache / f"kwok-{kwok_version}" / "kwok")
    etcd_env = env.get("PERFSCHED_ETCD_BIN")
    built_etcd = cache / f"etcd-{env.get('PERFSCHED_ETCD_VERSION') or ETCD_VERSION}" / "etcd"
    if etcd_env:
        etcd = Path(etcd_env)
    elif built_etcd.is_file():
        etcd = built_etcd
    else:
        etcd = Path(shutil.which("etcd") or "/usr/bin/etcd")
    openssl = Path(shutil.which("openssl") or "/usr/bin/openssl")
    root = repo_root()
    stages_env = env.get("PERFSCHED_KWOK_STAGES")
    stages = Path(stages_env) if stages_env else (root / "e2e" / "kwok-stages.yaml" if root else Path())
    crds_env = env.get("PERFSCHED_CRDS_DIR")
    crds: Path | None = Path(crds_env) if crds_env else (root / "crds" if root else None)

    problems: list[str] = []
    for label, path in (
        ("etcd", etcd),
        ("kube-apiserver", k8s_dir / "kube-apiserver"),
        ("kube-controller-manager", k8s_dir / "kube-controller-manager"),
        ("kube-scheduler", k8s_dir / "kube-scheduler"),
        (f"kwok {kwok_version}", kwok),
    ):
        if not (path.is_file() and os.access(path, os.X_OK)):
            fix = _FIX
            if label.startswith("kube-") and k8s_version != K8S_VERSION:
                fix = f"run `PERFSCHED_K8S_VERSION={k8s_version} bash e2e/install-tools.sh` to build it"
            problems.append(f"{label} not found at {path}: {fix}")
    if not (openssl.is_file() and os.access(openssl, os.X_OK)):
        problems.append(f"openssl not found at {openssl}: install it (apt-get install openssl)")
    if not stages.is_file():
        problems.append(
            f"KWOK stages file not found at {stages or '<no checkout>'}: run from a perfsched checkout "
            "or set PERFSCHED_KWOK_STAGES"
        )
    if problems:
        raise DevClusterError("missing tools for the local control plane:\n  - " + "\n  - ".join(problems))
    return Tools(
        etcd=etcd,
        kube_apiserver=k8s_dir / "kube-apiserver",
        kube_controller_manager=k8s_dir / "kube-controller-manager",
        kube_scheduler=k8s_dir / "kube-scheduler",
        kwok=kwok,
        openssl=openssl,
        kwok_stages=stages,
        crds_dir=crds if crds is not None and crds.is_dir() else None,
        k8s_version=k8s_version,
    )


JOBSET_VERSION = "v0.12.0"
TRAINER_VERSION = "v2.3.0"
_FIX_JOBSETS = "run `PERFSCHED_WITH_JOBSETS=1 bash e2e/install-tools.sh` to build it"


@dataclass(frozen=True, slots=True)
class JobSetTools:
    """The JobSet and Kubeflow Trainer controllers, their CRDs and webhook configurations (as built by
    ``e2e/install-tools.sh`` with ``PERFSCHED_WITH_JOBSETS=1``), and the ClusterTrainingRuntime the dev
    cluster installs."""

    jobset: Path
    jobset_crds: tuple[Path, ...]
    jobset_webhooks: Path
    trainer: Path
    trainer_crds: tuple[Path, ...]
    trainer_webhooks: Path
    runtime: Path


def find_jobset_tools(env: Mapping[str, str] | None = None) -> JobSetTools:
    """Locate the JobSet and Trainer controllers; raise ``DevClusterError`` listing all that is missing."""
    env = os.environ if env is None else env
    cache = cache_dir(env)
    js = cache / f"jobset-{env.get('PERFSCHED_JOBSET_VERSION') or JOBSET_VERSION}"
    tr = cache / f"trainer-{env.get('PERFSCHED_TRAINER_VERSION') or TRAINER_VERSION}"
    root = repo_root()
    runtime = (root / "e2e" / "trainer-runtime.yaml") if root else Path()
    problems = []
    for label, path in (
        ("the JobSet controller", js / "jobset"),
        ("the Trainer controller", tr / "trainer-controller-manager"),
    ):
        if not (path.is_file() and os.access(path, os.X_OK)):
            problems.append(f"{label} not found at {path}: {_FIX_JOBSETS}")
    for label, path in (
        ("JobSet webhooks", js / "webhooks.yaml"),
        ("Trainer webhooks", tr / "webhooks.yaml"),
    ):
        if not path.is_file():
            problems.append(f"{label} not found at {path}: {_FIX_JOBSETS}")
    if not runtime.is_file():
        problems.append(
            "e2e/trainer-runtime.yaml (the ClusterTrainingRuntime) not found: run from a checkout"
        )
    js_crds, tr_crds = tuple(sorted(js.glob("crds/*.yaml"))), tuple(sorted(tr.glob("crds/*.yaml")))
    if not problems and not (js_crds and tr_crds):
        problems.append(f"the JobSet or Trainer CRDs are missing under {js} / {tr}: {_FIX_JOBSETS}")
    if problems:
        raise DevClusterError("missing tools for --with-jobsets:\n  - " + "\n  - ".join(problems))
    return JobSetTools(
        jobset=js / "jobset",
        jobset_crds=js_crds,
        jobset_webhooks=js / "webhooks.yaml",
        trainer=tr / "trainer-controller-manager",
        trainer_crds=tr_crds,
        trainer_webhooks=tr / "webhooks.yaml",
        runtime=runtime,
    )
