"""Helpers for e2e tests: started components (kill/restart), waiting, pods and events.

Imported by ``e2e/conftest.py`` and by e2e test modules of every perfsched component. Test code, so it
may use the ``kubernetes`` client directly.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar, cast

import httpx
from kubernetes import client as k8s

from perfsched_dev.devcluster.process import ProcessRecord, is_running, spawn, stop, tail
from scheduler.core.types import Interconnect, Node

REPO = Path(__file__).resolve().parents[1]
#: how the e2e clusters' nodes publish their GPUs (``perfsched dev-cluster up --gpu-api``)
E2E_GPU_API_ENV = "PERFSCHED_E2E_GPU_API"


def e2e_gpu_api() -> str:
    """``$PERFSCHED_E2E_GPU_API`` (``device-plugin``, ``dra`` or ``mixed``; default ``device-plugin``)."""
    return os.environ.get(E2E_GPU_API_ENV) or "device-plugin"


def a100_nodes(count: int) -> list[Node]:
    """``count`` 8-GPU A100 SXM nodes in one rack, each its own NVLink domain (``a100-0``, ``a100-1``...)."""
    return [
        Node(
            name=f"a100-{i}",
            gpu_type="A100",
            gpus=8,
            gpu_product="NVIDIA-A100-SXM4-40GB",
            rack="rack-0",
            nvlink_domain=f"nvl-{i}",
            interconnect=Interconnect.NVLINK,
        )
        for i in range(count)
    ]


def _gpu_slices(api: k8s.ApiClient) -> list[dict[str, Any]]:
    """The ResourceSlices of NVIDIA's GPU driver (empty on a server without the DRA API)."""
    try:
        slices = k8s.CustomObjectsApi(api).list_cluster_custom_object(
            "resource.k8s.io", "v1", "resourceslices"
        )
    except k8s.ApiException as exc:
        if exc.status == 404:
            return []
        raise
    return [s for s in slices.get("items") or [] if (s.get("spec") or {}).get("driver") == "gpu.nvidia.com"]


def gpu_products(api: k8s.ApiClient) -> dict[str, str]:
    """Each GPU node's product in GFD's spelling: its ``nvidia.com/gpu.product`` label, else its DRA
    devices' ``productName`` (``Tesla V100-SXM2-16GB`` -> ``Tesla-V100-SXM2-16GB``)."""
    out = {
        n.metadata.name: (n.metadata.labels or {}).get("nvidia.com/gpu.product", "")
        for n in k8s.CoreV1Api(api).list_node().items
    }
    for s in _gpu_slices(api):
        node, devices = s["spec"].get("nodeName"), s["spec"].get("devices") or []
        if node in out and not out[node] and devices:
            name = ((devices[0].get("attributes") or {}).get("productName") or {}).get("string", "")
            out[node] = "-".join(name.split())
    return out


def gpu_capacity(api: k8s.ApiClient) -> dict[str, int]:
    """GPUs per node as kube-scheduler counts them: allocatable ``nvidia.com/gpu``, else the node's GPU
    devices in ResourceSlices (DRA nodes)."""
    capacity = {
        n.metadata.name: int((n.status.allocatable or {}).get("nvidia.com/gpu", "0"))
        for n in k8s.CoreV1Api(api).list_node().items
    }
    for item in _gpu_slices(api):
        spec = item.get("spec") or {}
        node = spec.get("nodeName")
        if node in capacity and not capacity[node]:
            capacity[node] = len(spec.get("devices") or [])
    return capacity


T = TypeVar("T")


def wait_until(
    check: Callable[[], T | Literal[False] | None], timeout: float, what: str, interval: float = 0.2
) -> T:
    """Poll ``check`` until it returns something truthy; fail the test naming ``what`` on timeout."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        last = check()
        if last:
            return cast(T, last)
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what} (last: {last!r})")
        time.sleep(interval)


@dataclass
class KubeCluster:
    """The cluster the e2e session runs against (``kube_cluster`` fixture).

    ``extender_url``/``extender_port`` are where kube-scheduler's ``perfsched`` profile calls the
    extender (empty/None for an external cluster whose extender runs elsewhere). ``api`` is an admin
    client; ``core`` a CoreV1Api on it.
    """

    kubeconfig: str
    endpoints: dict[str, str]
    api: k8s.ApiClient
    extender_url: str = ""
    extender_port: int | None = None
    state_dir: Path | None = None
    pids: dict[str, int] = field(default_factory=dict)
    logs: dict[str, str] = field(default_factory=dict)

    @property
    def core(self) -> k8s.CoreV1Api:
        return k8s.CoreV1Api(self.api)

    @property
    def custom(self) -> k8s.CustomObjectsApi:
        return k8s.CustomObjectsApi(self.api)

    @property
    def local(self) -> bool:
        return self.state_dir is not None


def perfsched_argv(argv: Sequence[str]) -> list[str]:
    """``["perfsched", ...]`` run with this interpreter (the venv's), other argv unchanged."""
    if argv and argv[0] == "perfsched":
        return [sys.executable, "-m", "scheduler.cli", *argv[1:]]
    return list(argv)


class Component:
    """A process started by a test against the cluster; stopped at test teardown.

    ``kill()`` is a crash (SIGKILL), ``stop()`` a clean shutdown (SIGTERM), ``restart()`` starts the
    same command again and waits for its health URL.
    """

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        log_dir: Path,
        env: Mapping[str, str] | None = None,
        health_url: str = "",
    ) -> None:
        self.name = name
        self.argv = perfsched_argv(argv)
        self.env = dict(env or {})
        self.health_url = health_url
        self.log_path = log_dir / f"{name}.log"
        self.record: ProcessRecord | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60.0) -> Component:
        self._proc, self.record = spawn(self.name, self.argv, self.log_path, env=self.env, cwd=REPO)
        if self.health_url:
            self.wait_healthy(timeout)
        return self

    @property
    def pid(self) -> int | None:
        return self.record.pid if self.record else None

    @property
    def running(self) -> bool:
        return self.record is not None and is_running(self.record)

    def wait_healthy(self, timeout: float = 60.0) -> None:
        def healthy() -> bool:
            if not self.running:
                raise AssertionError(f"{self.name} exited during start-up:\n{self.log()}")
            try:
                return httpx.get(self.health_url, timeout=2.0).status_code == 200
            except httpx.HTTPError:
                return False

        try:
            wait_until(healthy, timeout, f"{self.name} at {self.health_url}")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n--- {self.log_path}:\n{self.log()}") from None

    def stop(self, timeout: float = 10.0) -> int | None:
        """SIGTERM (then SIGKILL after ``timeout``); returns the exit code when known."""
        if self.record is not None:
            stop(self.record, timeout_s=timeout)
        return self._reap()

    def kill(self) -> int | None:
        """SIGKILL, as a crash would."""
        if self.record is not None and self.running:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.record.pid, signal.SIGKILL)
        return self._reap()

    def restart(self, timeout: float = 60.0) -> Component:
        self.stop()
        return self.start(timeout)

    def _reap(self) -> int | None:
        if self._proc is None:
            return None
        with contextlib.suppress(subprocess.TimeoutExpired):
            return self._proc.wait(timeout=10)
        return None

    def log(self, lines: int = 60) -> str:
        return tail(self.log_path, lines)


def gpu_pod(
    name: str,
    gpus: int,
    scheduler_name: str = "perfsched",
    annotations: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    owner: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A minimal pod asking for ``gpus`` x ``nvidia.com/gpu`` (``restartPolicy: Never``)."""
    meta: dict[str, Any] = {
        "name": name,
        "annotations": dict(annotations or {}),
        "labels": dict(labels or {}),
    }
    if owner is not None:
        meta["ownerReferences"] = [dict(owner)]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {
            "schedulerName": scheduler_name,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "main",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
                }
            ],
        },
    }


def resnet_job(name: str, replicas: int, gpus_per_replica: int) -> dict[str, Any]:
    """A TrainingJob of ``replicas`` x ``gpus_per_replica`` GPUs (ResNet-50, 1,000 iterations, pause image)
    for tests that drive its pods themselves."""
    return {
        "apiVersion": "perfsched.dev/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": name},
        "spec": {
            "model": "resnet50",
            "dataset": "imagenet",
            "batchSize": 256,
            "precision": "amp",
            "work": {"iterations": 1000},
            "replicas": {"max": replicas, "gpusPerReplica": gpus_per_replica},
            "template": {"spec": {"containers": [{"name": "worker", "image": "registry.k8s.io/pause:3.10"}]}},
        },
    }


def pod_events(core: k8s.CoreV1Api, namespace: str, pod: str) -> list[k8s.CoreV1Event]:
    """Events whose involved object is the pod, oldest first."""
    events = core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={pod}").items
    return sorted(events, key=lambda e: e.metadata.creation_timestamp)


def extender_calls(extender_url: str) -> list[dict[str, Any]]:
    """The calls the e2e minimal extender has recorded (``GET /calls``)."""
    data: list[dict[str, Any]] = httpx.get(f"{extender_url}/calls", timeout=5.0).json()
    return data
