"""Gangs under the Workload API end to end: on a control plane started with
``PERFSCHED_E2E_WORKLOAD_API=1`` (``dev-cluster up --workload-api``: Kubernetes 1.37, the GenericWorkload
feature gate, kube-scheduler's GangScheduling plugin), the operator with ``PERFSCHED_OPERATOR_WORKLOAD_API``
creates a Workload and a PodGroup per gang generation and kube-scheduler binds the gang all or nothing,
the extender keeping every pod in the one NVLink domain the policy chose.

Run with ``PERFSCHED_E2E_OPPORTUNISTIC_BATCHING=0`` too (kube-scheduler's batching off). Skipped on a
control plane without the gang API (the default).
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import pytest
from kubernetes import client as k8s

from e2e import test_operator
from e2e.conftest import E2E_WORKLOAD_API_ENV
from e2e.harness import KubeCluster, gpu_pod, wait_until
from e2e.test_operator import Cluster, Watcher, tj

#: the operator tests' fixtures: a namespace's helpers and the extender + emulator + operator stack
cluster = test_operator.cluster
stack = test_operator.stack

GROUP, VERSION = "scheduling.k8s.io", "v1beta1"


@pytest.fixture(autouse=True)
def _needs_the_gang_api(kube_cluster: KubeCluster) -> None:
    if os.environ.get(E2E_WORKLOAD_API_ENV) != "1" or not kube_cluster.local:
        pytest.skip("needs the local dev cluster with PERFSCHED_E2E_WORKLOAD_API=1")


def _domain_of(core: k8s.CoreV1Api) -> dict[str, str]:
    return {
        n.metadata.name: (n.metadata.labels or {}).get("perfsched.dev/nvlink-domain", "")
        for n in core.list_node().items
    }


def _pods_json(core: k8s.CoreV1Api, ns: str, job: str) -> list[dict[str, Any]]:
    """The job's pods as API JSON (the client's models may predate ``spec.schedulingGroup``)."""
    resp = core.list_namespaced_pod(
        ns, label_selector=f"perfsched.dev/job-name={job}", _preload_content=False
    )
    return list(json.loads(resp.data).get("items") or [])


def _a100_nodes(core: k8s.CoreV1Api) -> list[str]:
    return sorted(
        n.metadata.name
        for n in core.list_node().items
        if "A100" in (n.metadata.labels or {}).get("nvidia.com/gpu.product", "")
    )


def test_a_gang_of_8_lands_in_one_nvlink_domain_under_a_pod_group(cluster: Cluster, stack: Any) -> None:
    core, ns = cluster.core, cluster.ns
    a100 = _a100_nodes(core)
    assert len(a100) == 2, a100
    # half of the first A100 node is taken: 4 + 8 GPUs free over two NVLink domains, one of which holds
    # the gang whole; a split gang (4 here, 4 there) would also find room
    filler = gpu_pod("filler", 4, scheduler_name="default-scheduler")
    filler["spec"]["nodeName"] = a100[0]
    core.create_namespaced_pod(ns, filler)
    stack("fifo", PERFSCHED_OPERATOR_WORKLOAD_API="true")
    with Watcher(cluster.kube) as w:
        cluster.submit(tj("g8", replicas=8, gpus=1, iterations=10**7))
        cluster.wait_phase("g8", {"Running"}, 90)
        pods = _pods_json(core, ns, "g8")
    assert w.violations == [], w.violations
    where = sorted((p["metadata"]["name"], p["spec"].get("nodeName", "")) for p in pods)
    assert len(pods) == 8 and all(node for _, node in where), where
    domains = _domain_of(core)
    assert len({domains[node] or node for _, node in where}) == 1, where
    groups = {(p["spec"].get("schedulingGroup") or {}).get("podGroupName", "") for p in pods}
    prefixes = {p["metadata"]["name"].rsplit("-", 1)[0] for p in pods}  # <job>-g<generation>
    assert groups == prefixes and len(groups) == 1, (groups, prefixes)
    (group,) = groups
    pg = cluster.custom.get_namespaced_custom_object(GROUP, VERSION, ns, "podgroups", group)
    assert pg["spec"]["schedulingPolicy"]["gang"]["minCount"] == 8


def test_a_pod_group_binds_all_or_nothing(cluster: Cluster, stack: Any) -> None:
    """8 pods of a PodGroup with minCount 8: while only 7 exist, none binds; the 8th lets all 8 bind."""
    core, ns, custom = cluster.core, cluster.ns, cluster.custom
    stack("fifo")
    custom.create_namespaced_custom_object(
        GROUP, VERSION, ns, "workloads",
        {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Workload", "metadata": {"name": "w8"},
         "spec": {"podGroupTemplates": [{"name": "workers", "schedulingPolicy": {"gang": {"minCount": 8}}}]}},
    )  # fmt: skip
    custom.create_namespaced_custom_object(
        GROUP, VERSION, ns, "podgroups",
        {"apiVersion": f"{GROUP}/{VERSION}", "kind": "PodGroup", "metadata": {"name": "w8"},
         "spec": {"workloadRef": {"workloadName": "w8", "templateName": "workers"},
                  "schedulingPolicy": {"gang": {"minCount": 8}}}},
    )  # fmt: skip

    def member(i: int) -> dict[str, Any]:
        pod = gpu_pod(f"w8-{i}", 1)
        pod["spec"]["schedulingGroup"] = {"podGroupName": "w8"}
        return pod

    for i in range(7):
        core.create_namespaced_pod(ns, member(i))

    def bound() -> list[str]:
        return [
            p.spec.node_name
            for p in core.list_namespaced_pod(ns).items
            if p.metadata.name.startswith("w8-") and p.spec.node_name
        ]

    t_end = time.monotonic() + 10
    while time.monotonic() < t_end:
        assert bound() == [], "a pod of an incomplete PodGroup was bound"
        time.sleep(0.5)
    core.create_namespaced_pod(ns, member(7))
    wait_until(lambda: len(bound()) == 8, 60, "all 8 pods of the PodGroup to bind")
