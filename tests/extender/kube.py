"""Builders of raw Kubernetes API JSON (Nodes, Pods, TrainingJobs) as the API server sends them.

Test helper for the extender and ``scheduler.k8s`` tests: ``kube_node("n1", "NVIDIA-A100-SXM4-40GB", 8,
rack="r1", domain="d1")``, ``kube_pod("p", gpus=2, node="n1")``, ``kube_tj("tj", replicas=4, gpus=2)``,
and ``fed_cache(nodes, pods, jobs)`` for a ``ClusterCache`` filled without any watch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from scheduler.k8s.cache import ClusterCache, Kind

PRODUCTS = {
    "A100": "NVIDIA-A100-SXM4-40GB",
    "H100": "NVIDIA-H100-80GB-HBM3",
    "V100": "Tesla-V100-SXM2-16GB",
    "T4": "Tesla-T4",
    "K80": "Tesla-K80",
}

_rv = [100]


def _next_rv() -> str:
    _rv[0] += 1
    return str(_rv[0])


def kube_node(
    name: str,
    gpu_type: str = "A100",
    gpus: int = 8,
    *,
    rack: str = "",
    domain: str = "",
    zone: str = "",
    interconnect: str = "",
    network: float | None = None,
    unschedulable: bool = False,
) -> dict[str, Any]:
    labels: dict[str, str] = {"kubernetes.io/hostname": name, "type": "kwok"}
    if gpu_type:
        labels["nvidia.com/gpu.product"] = PRODUCTS.get(gpu_type, gpu_type)
    if rack:
        labels["perfsched.dev/rack"] = rack
    if domain:
        labels["perfsched.dev/nvlink-domain"] = domain
    if zone:
        labels["topology.kubernetes.io/zone"] = zone
    if interconnect:
        labels["perfsched.dev/interconnect"] = interconnect
    if network is not None:
        labels["perfsched.dev/network-gbps"] = str(network)
    alloc = {"cpu": "64", "memory": "512Gi", "pods": "110"}
    if gpus:
        alloc["nvidia.com/gpu"] = str(gpus)
    node: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels, "resourceVersion": _next_rv()},
        "spec": {},
        "status": {"allocatable": alloc, "capacity": dict(alloc)},
    }
    if unschedulable:
        node["spec"]["unschedulable"] = True
    return node


def kube_pod(
    name: str,
    gpus: int = 1,
    *,
    node: str = "",
    namespace: str = "team-a",
    phase: str = "",
    job: str = "",
    replica: int | None = None,
    generation: str = "",
    gpu_type: str = "",
    planned: str = "",
    model: str = "",
    batch_size: int | None = None,
    world_size: int | None = None,
    uid: str = "",
) -> dict[str, Any]:
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    if job:
        labels["perfsched.dev/job-name"] = job
        labels["perfsched.dev/generation"] = generation or "1"
    if replica is not None:
        labels["perfsched.dev/replica-index"] = str(replica)
    if gpu_type:
        annotations["perfsched.dev/gpu-type"] = gpu_type
    if planned:
        annotations["perfsched.dev/planned-node"] = planned
    if model:
        annotations["perfsched.dev/model"] = model
    if batch_size is not None:
        annotations["perfsched.dev/batch-size"] = str(batch_size)
    if world_size is not None:
        annotations["perfsched.dev/world-size"] = str(world_size)
    resources: dict[str, Any] = {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {}
    spec: dict[str, Any] = {
        "schedulerName": "perfsched",
        "containers": [{"name": "main", "image": "trainer:1", "resources": resources}],
    }
    if node:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid or f"uid-{namespace}-{name}",
            "labels": labels,
            "annotations": annotations,
            "resourceVersion": _next_rv(),
        },
        "spec": spec,
        "status": {"phase": phase or ("Running" if node else "Pending")},
    }


def kube_tj(
    name: str,
    *,
    namespace: str = "team-a",
    replicas: int = 1,
    gpus: int = 1,
    model: str = "resnet50",
    batch_size: int = 256,
    allowed: Sequence[str] = (),
    alloc_replicas: int = 0,
    gpu_type: str = "",
    generation: int = 1,
    placement: dict[str, str] | None = None,
    alloc_nodes: dict[str, int] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "model": model,
        "dataset": "imagenet",
        "batchSize": batch_size,
        "precision": "amp",
        "work": {"iterations": 1000},
        "replicas": {"max": replicas, "gpusPerReplica": gpus},
        "template": {"spec": {"containers": [{"name": "worker", "image": "trainer:1"}]}},
    }
    if allowed:
        spec["allowedGPUTypes"] = list(allowed)
    status: dict[str, Any] = {"gangGeneration": generation}
    if alloc_replicas:
        status["allocation"] = {"replicas": alloc_replicas, "gpuType": gpu_type, "gpusPerReplica": gpus}
        if alloc_nodes:
            status["allocation"]["replicasPerNode"] = dict(alloc_nodes)
    if placement:
        status["placement"] = placement
    return {
        "apiVersion": "perfsched.dev/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": name, "namespace": namespace, "resourceVersion": _next_rv()},
        "spec": spec,
        "status": status,
    }


def fed_cache(
    nodes: Sequence[dict[str, Any]],
    pods: Sequence[dict[str, Any]] = (),
    jobs: Sequence[dict[str, Any]] = (),
    *,
    classes: Sequence[dict[str, Any]] = (),
    slices: Sequence[dict[str, Any]] = (),
    claims: Sequence[dict[str, Any]] = (),
    rules: Sequence[dict[str, Any]] = (),
    **kwargs: Any,
) -> ClusterCache:
    cache = ClusterCache(**kwargs)
    cache.replace(Kind.DEVICECLASSES, list(classes), "1")
    cache.replace(Kind.RESOURCESLICES, list(slices), "1")
    cache.replace(Kind.RESOURCECLAIMS, list(claims), "1")
    cache.replace(Kind.DEVICETAINTRULES, list(rules), "1")
    cache.replace(Kind.NODES, list(nodes), "1")
    cache.replace(Kind.PODS, list(pods), "1")
    cache.replace(Kind.TRAININGJOBS, list(jobs), "1")
    return cache


def gpu_claim(
    name: str, node: str, devices: Sequence[int], *, owner_uid: str = "", namespace: str = "team-a"
) -> dict[str, Any]:
    """A ResourceClaim allocated ``gpu-<i>`` of ``node``'s pool, as kube-scheduler creates for a pod's
    DRA-backed ``nvidia.com/gpu`` request (owned by the pod ``owner_uid``)."""
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "annotations": {"resource.kubernetes.io/extended-resource-claim": "true"},
        "resourceVersion": _next_rv(),
    }
    if owner_uid:
        meta["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "Pod", "name": name, "uid": owner_uid, "controller": True}
        ]
    results = [
        {"request": "container-0-request-0", "driver": "gpu.nvidia.com", "pool": node, "device": f"gpu-{i}"}
        for i in devices
    ]
    status = {"allocation": {"devices": {"results": results}}} if results else {}
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": meta, "status": status}
