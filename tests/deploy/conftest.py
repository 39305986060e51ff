"""Fixtures of the deployment tests: the repo root, the helm binary and a `render` helper for the chart."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "perfsched"
HELM_VERSION = os.environ.get("PERFSCHED_HELM_VERSION", "v3.19.0")
# helm built with `go install` reports Kubernetes v1.20 for client-side renders; say which one we target
KUBE_VERSION = ("--kube-version", "v1.37.2")
CACHE = Path(os.environ.get("PERFSCHED_CACHE", str(Path.home() / ".cache" / "perfsched")))


def helm_binary() -> Path | None:
    cached = CACHE / f"helm-{HELM_VERSION}" / "helm"
    if cached.is_file():
        return cached
    found = shutil.which("helm")
    return Path(found) if found else None


@pytest.fixture(scope="session")
def helm() -> Path:
    path = helm_binary()
    if path is None:
        pytest.skip("helm is not installed: run `bash e2e/install-tools.sh` (or `make tools`)")
    return path


@pytest.fixture(scope="session")
def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.skip("promtool is not installed: run `bash e2e/install-tools.sh` (Debian package prometheus)")
    return path


Render = Callable[..., list[dict[str, Any]]]


def run_helm(helm: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "HELM_CACHE_HOME": str(CACHE / "helm-home" / "cache"),
        "HELM_CONFIG_HOME": str(CACHE / "helm-home" / "config"),
        "HELM_DATA_HOME": str(CACHE / "helm-home" / "data"),
    }
    return subprocess.run([str(helm), *args], capture_output=True, text=True, env=env, timeout=120)


@pytest.fixture(scope="session")
def render(helm: Path) -> Render:
    """`render(*set_args, namespace=...)` -> the chart's manifests (CRDs included) as dicts."""

    def _render(*sets: str, namespace: str = "perfsched-system", release: str = "ps") -> list[dict[str, Any]]:
        args = ["template", release, str(CHART), "--namespace", namespace, "--include-crds", *KUBE_VERSION]
        for s in sets:
            args += ["--set", s]
        out = run_helm(helm, *args)
        assert out.returncode == 0, out.stderr
        return [d for d in yaml.safe_load_all(out.stdout) if d]

    return _render


def by_kind(docs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}
