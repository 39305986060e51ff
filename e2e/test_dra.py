"""DRA GPUs end to end: on a cluster started with ``PERFSCHED_E2E_GPU_API=dra`` (or ``mixed``), pods asking
for ``nvidia.com/gpu`` are allocated DRA devices by kube-scheduler's DynamicResources plugin through a
ResourceClaim, never beyond the node's devices, and the extender's free-GPU count on every DRA node equals
what DynamicResources can still allocate there (devices minus those allocated claims hold).

Skipped on a device-plugin cluster (the default).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from kubernetes import client as k8s

from e2e.harness import Component, KubeCluster, e2e_gpu_api, gpu_capacity, gpu_pod, wait_until


def _claims(api: k8s.ApiClient) -> list[dict[str, Any]]:
    out = k8s.CustomObjectsApi(api).list_cluster_custom_object("resource.k8s.io", "v1", "resourceclaims")
    return list(out.get("items") or [])


def _dra_nodes(api: k8s.ApiClient) -> dict[str, int]:
    allocatable = {
        n.metadata.name: (n.status.allocatable or {}).get("nvidia.com/gpu")
        for n in k8s.CoreV1Api(api).list_node().items
    }
    return {n: c for n, c in gpu_capacity(api).items() if allocatable.get(n) is None and c > 0}


def _claimed(api: k8s.ApiClient) -> Counter[str]:
    """Devices held by allocated claims, per node (a pool is named after its node)."""
    held: Counter[str] = Counter()
    for c in _claims(api):
        for r in ((c.get("status") or {}).get("allocation") or {}).get("devices", {}).get("results") or []:
            if r.get("driver") == "gpu.nvidia.com":
                held[r["pool"]] += 1
    return held


@pytest.fixture
def extender(kube_cluster: KubeCluster, start_perfsched_extender: Callable[..., Component]) -> Component:
    if e2e_gpu_api() == "device-plugin":
        pytest.skip("needs PERFSCHED_E2E_GPU_API=dra or mixed")
    if not kube_cluster.local:
        pytest.skip("needs the local dev cluster")
    return start_perfsched_extender()


def test_dra_pods_get_claims_and_the_extender_counts_what_dynamicresources_can_allocate(
    kube_cluster: KubeCluster, fresh_namespace: str, extender: Component
) -> None:
    api, core, ns = kube_cluster.api, kube_cluster.core, fresh_namespace
    dra = _dra_nodes(api)
    assert dra, "no DRA node in the cluster"
    total = sum(gpu_capacity(api).values())
    # more 2-GPU pods than the cluster holds: some wait, none overcommits a node
    for i in range(total // 2 + 3):
        core.create_namespaced_pod(ns, gpu_pod(f"d-{i:02d}", 2))

    def bound() -> dict[str, str]:
        return {
            p.metadata.name: p.spec.node_name for p in core.list_namespaced_pod(ns).items if p.spec.node_name
        }

    wait_until(lambda: len(bound()) >= total // 2 - 2, 120, "the cluster to fill up")
    on_dra = Counter(node for node in bound().values() if node in dra)
    assert on_dra, f"no pod landed on a DRA node {sorted(dra)}"
    # every pod on a DRA node got its GPUs as a claim the scheduler allocated there
    wait_until(lambda: all(_claimed(api)[n] == 2 * k for n, k in on_dra.items()), 60, "claims of bound pods")
    claimed = _claimed(api)
    for node, devices in dra.items():
        assert claimed[node] <= devices, f"{node}: {claimed[node]} devices claimed > {devices}"
    for p in core.list_namespaced_pod(ns).items:
        if p.spec.node_name in dra:
            status = p.status.to_dict().get("extended_resource_claim_status") if p.status else None
            assert status, f"{p.metadata.name} on DRA node {p.spec.node_name} has no extended-resource claim"

    # the extender's free GPUs per DRA node: a probe pod asking for all of a node's GPUs passes only when
    # all are free, else the reason says how many are
    probe = gpu_pod("probe", 1)
    for node, devices in dra.items():
        probe["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = str(devices)
        reply = httpx.post(
            f"{kube_cluster.extender_url}/filter", json={"Pod": probe, "NodeNames": [node]}
        ).json()
        expected = devices - claimed[node]
        if reply["NodeNames"]:
            free = devices
        else:
            reason = {**(reply["FailedNodes"] or {}), **(reply["FailedAndUnresolvableNodes"] or {})}[node]
            m = re.search(r"node has (\d+) free", reason)
            assert m, reason
            free = int(m.group(1))
            assert "(DRA)" in reason
        assert free == expected, (
            f"{node}: extender says {free} free, DynamicResources can allocate {expected}"
        )
