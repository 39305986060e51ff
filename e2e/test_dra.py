"""DRA GPUs end to end: on a cluster started with ``PERFSCHED_E2E_GPU_API=dra`` (or ``mixed``), pods asking
for ``nvidia.com/gpu`` are allocated DRA devices by kube-scheduler's DynamicResources plugin through a
ResourceClaim, never beyond the node's devices, and the extender's free-GPU count on every DRA node equals
what DynamicResources can still allocate there (devices minus those allocated claims hold).

A stream of TrainingJobs through the operator (``PERFSCHED_E2E_STREAM_JOBS``, default 24; every fourth a
gang of 8 x 1 GPU) checks the same equality on every DRA node at every sample while claims come and go
(``e2e/jobstream.py``; ``bench/dra_stream.py`` runs 200 jobs). With ``PERFSCHED_E2E_WORKLOAD_API=1`` the
operator puts each gang under a PodGroup and the test also asks that no gang is seen partly bound in two
samples running (where its gangs land is printed: ``bench/dra_stream.py`` measures it over many).

A DeviceTaintRule tainting ``NoExecute`` a GPU that a running gang holds: the operator restarts the gang
(``NodeFailed`` naming the device) and no pod of it holds that GPU afterwards.

Skipped on a device-plugin cluster (the default).
"""

from __future__ import annotations

import json
import os
import re
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from e2e import jobstream, test_operator
from e2e.conftest import E2E_WORKLOAD_API_ENV
from e2e.harness import Component, KubeCluster, e2e_gpu_api, gpu_capacity, gpu_pod, wait_until
from e2e.test_operator import Cluster

#: the operator tests' fixtures: a namespace's helpers and the extender + emulator + operator stack
cluster = test_operator.cluster
stack = test_operator.stack
#: how many TrainingJobs the stream test submits
STREAM_JOBS_ENV = "PERFSCHED_E2E_STREAM_JOBS"


_dra_nodes = jobstream.dra_nodes
_claimed = jobstream.claimed_devices


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


def test_a_stream_of_jobs_keeps_the_extenders_free_gpus_equal_to_what_dynamicresources_can_allocate(
    kube_cluster: KubeCluster, cluster: Cluster, stack: Any
) -> None:
    """Every sample compares each DRA node's free GPUs, asked of the extender, with what DynamicResources
    can allocate there, unless a claim came or went on the node between the two claim lists around the
    question (compared claim by claim: one claim released and another allocated on the node in that
    window leaves the count unchanged but is in flux all the same). The test fails on a *persistent*
    mismatch only: the same node unequal in two samples running (a second apart) with the same claims on
    its devices. A single unequal sample is reported, not failed: the extender's count follows the claims
    through its watch, and on a loaded CI machine a watch event can arrive later than the 0.3 s the
    sampler waits after listing, so one sample can compare the extender's previous instant with the
    list's; an accounting error does not go away a second later with the claims unchanged."""
    if e2e_gpu_api() == "device-plugin" or not kube_cluster.local:
        pytest.skip("needs the local dev cluster with PERFSCHED_E2E_GPU_API=dra or mixed")
    workload_api = os.environ.get(E2E_WORKLOAD_API_ENV) == "1"
    n = int(os.environ.get(STREAM_JOBS_ENV) or 24)
    stack("fifo:backfill=true", **({"PERFSCHED_OPERATOR_WORKLOAD_API": "true"} if workload_api else {}))
    api, ns = kube_cluster.api, cluster.ns
    sampler = jobstream.StreamSampler(api, kube_cluster.extender_url, ns, jobstream.gang_jobs(n))
    assert sampler.devices, "no DRA node in the cluster"
    with sampler:
        jobstream.submit_jobs(api, ns, n)
        wait_until(
            lambda: jobstream.phases(api, ns).get("Succeeded", 0) == n,
            120 + 6 * n,
            f"all {n} jobs to succeed",
            interval=1.0,
        )
    got = sampler.summary()
    print(json.dumps(got))
    assert got["errors"] == [], got["errors"]
    assert got["persistent_mismatches"] == [], got["persistent_mismatches"]
    # every sample compared most DRA nodes: the claims did not change under every question; and all but
    # a few comparisons agreed (single unequal samples, see above)
    checks = got["samples"] * len(sampler.devices) // 2
    assert got["node_checks"] >= checks, (got["node_checks"], checks)
    assert got["node_checks"] - got["node_equal"] <= max(1, got["node_checks"] // 100), got["mismatches"]
    # the sampler sees a gang only if it runs across a sample (once a second): on a loaded machine a short
    # gang can start and finish between two, so the gang checks need some gangs seen, not every one
    assert 1 <= got["gangs_placed"] <= len(jobstream.gang_jobs(n)), json.dumps(got)
    if workload_api:
        # a gang's 8 binds are 8 API calls after its one scheduling cycle: a sample may fall between
        # them, the next (a second later) may not
        assert got["persistent_partial"] == 0, json.dumps(got)


def _dra_gpu_types(custom: Any) -> list[str]:
    """The GPU types of the cluster's DRA devices (their ResourceSlices' ``productName``)."""
    from scheduler.k8s.codec import gpu_type_of_product
    from scheduler.k8s.dra import decode_slice, product_label

    types = {
        gpu_type_of_product(product_label(dev.attributes.get("productName", "")))
        for obj in custom.list_cluster_custom_object("resource.k8s.io", "v1", "resourceslices")["items"]
        for dev in decode_slice(obj).devices
        if dev.attributes.get("productName")
    }
    assert types, "no DRA GPU device with a productName in the cluster's ResourceSlices"
    return sorted(types)


def test_a_device_taint_rule_on_a_gpu_a_running_gang_holds_restarts_the_gang_elsewhere(
    kube_cluster: KubeCluster, cluster: Cluster, stack: Any
) -> None:
    """A DeviceTaintRule tainting ``NoExecute`` one GPU that a running gang's pod holds: the gang restarts
    from its checkpoint (``restarts`` 1), whole, and no pod of it holds the tainted device afterwards."""
    if e2e_gpu_api() == "device-plugin" or not kube_cluster.local:
        pytest.skip("needs the local dev cluster with PERFSCHED_E2E_GPU_API=dra or mixed")
    from e2e.test_operator import tj

    stack("fifo")
    api, custom = kube_cluster.api, cluster.custom
    # on a mixed cluster only some GPU types are DRA devices: the gang must run on one of them
    cluster.submit(
        tj("big", replicas=2, gpus=2, iterations=50_000_000, allowedGPUTypes=_dra_gpu_types(custom))
    )
    cluster.wait_phase("big", {"Running"}, 90)
    pods = {
        p.metadata.uid: p.metadata.name for p in cluster.pods("big") if p.metadata.deletion_timestamp is None
    }

    def held_by_gang() -> set[str]:
        uids = {p.metadata.uid for p in cluster.pods("big") if p.metadata.deletion_timestamp is None}
        return {
            f"{node}/{dev}"
            for node, held in jobstream.claim_holders(api).items()
            for _, dev, owner in held
            if owner in uids
        }

    held = wait_until(lambda: sorted(held_by_gang()), 30, "the gang's claims")
    pool, device = held[0].split("/")
    rule: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceTaintRule",
        "metadata": {"name": f"e2e-{cluster.ns}"},
        "spec": {
            "deviceSelector": {"driver": jobstream.DRIVER, "pool": pool, "device": device},
            "taint": {"key": "gpu.nvidia.com/xid", "value": "79", "effect": "NoExecute"},
        },
    }
    custom.create_cluster_custom_object("resource.k8s.io", "v1", "devicetaintrules", rule)
    t0 = time.monotonic()
    try:

        def moved() -> dict[str, Any] | None:
            s = cluster.status("big")
            now_held = held_by_gang()
            old = {p.metadata.uid for p in cluster.pods("big")} & set(pods)
            running = s.get("restarts", 0) >= 1 and s.get("phase") == "Running"
            return s if running and not old and now_held and f"{pool}/{device}" not in now_held else None

        st = wait_until(moved, 60, "the gang running again off the tainted GPU")
        assert st is not None
        print(
            f"device tainted NoExecute: gang running again after {time.monotonic() - t0:.1f} s, "
            f"lost work {st.get('lostWork')}"
        )
        assert st["restarts"] == 1 and st.get("lostWork", 0) >= 0, st
        events = cluster.events("big")
        # the operator tore the gang down for the taint (kube-controller-manager's eviction of the one pod
        # would read GangBroken)
        assert any(r == "NodeFailed" and f"{pool}/{device}" in m for r, m in events), events
    finally:
        custom.delete_cluster_custom_object(
            "resource.k8s.io", "v1", "devicetaintrules", rule["metadata"]["name"]
        )
