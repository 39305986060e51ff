"""The perfsched extender behind the real kube-scheduler, on the KWOK GPU cluster of the e2e session.

Cluster ``e2e/clusters/e2e-small.yaml``: a100-0/1 (8 GPUs, each its own NVLink node), v100-0/1 (4, NVLink),
k80-0/1 (4, PCIe); 32 GPUs. Each test starts the real ``perfsched extender`` on the port the cluster's
kube-scheduler calls, creates pods the way the operator does (labels and annotations of the brief) and
watches where the real scheduler puts them.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client as k8s

from e2e.harness import (
    Component,
    KubeCluster,
    gpu_capacity,
    gpu_pod,
    gpu_products,
    pod_events,
    resnet_job,
    wait_until,
)
from scheduler.names import GPU_RESOURCE


def _require_local(cluster: KubeCluster) -> None:
    if not cluster.local:
        pytest.skip("needs the local dev cluster (the extender port its kube-scheduler calls)")


def _nodes(core: k8s.CoreV1Api) -> dict[str, k8s.V1Node]:
    return {n.metadata.name: n for n in core.list_node(label_selector="type=kwok").items}


def _gpus_of(pod: k8s.V1Pod) -> int:
    total = 0
    for c in pod.spec.containers or []:
        res = c.resources
        if res is None:
            continue
        value = (res.requests or {}).get(GPU_RESOURCE) or (res.limits or {}).get(GPU_RESOURCE)
        total += int(value or 0)
    return total


def _used_per_node(core: k8s.CoreV1Api) -> Counter[str]:
    used: Counter[str] = Counter()
    for p in core.list_pod_for_all_namespaces().items:
        if p.spec.node_name and p.status.phase not in ("Succeeded", "Failed"):
            used[p.spec.node_name] += _gpus_of(p)
    return used


def _wait_gpus_idle(core: k8s.CoreV1Api, timeout: float = 120.0) -> None:
    """Earlier tests' namespaces may still be draining: wait until no GPU is held anywhere."""
    wait_until(
        lambda: sum(_used_per_node(core).values()) == 0, timeout, "GPUs of earlier tests to be released"
    )


def _assert_never_overcommitted(core: k8s.CoreV1Api) -> None:
    nodes = gpu_capacity(core.api_client)
    for name, used in _used_per_node(core).items():
        if name in nodes:
            assert used <= nodes[name], f"{name}: {used} GPUs bound > {nodes[name]} allocatable"


def _bound(core: k8s.CoreV1Api, ns: str) -> dict[str, str]:
    return {p.metadata.name: p.spec.node_name for p in core.list_namespaced_pod(ns).items if p.spec.node_name}


def _gang(job: str, replicas: int, gpus: int, gpu_type: str) -> list[dict[str, Any]]:
    return [
        gpu_pod(
            f"{job}-g1-w{i}",
            gpus,
            labels={
                "perfsched.dev/job-name": job,
                "perfsched.dev/replica-index": str(i),
                "perfsched.dev/generation": "1",
            },
            # as the operator writes them (scheduler/k8s/actuator.py)
            annotations={"perfsched.dev/gpu-type": gpu_type, "perfsched.dev/world-size": str(replicas)},
        )
        for i in range(replicas)
    ]


@pytest.fixture
def extender(kube_cluster: KubeCluster, start_perfsched_extender: Callable[..., Component]) -> Component:
    _require_local(kube_cluster)
    _wait_gpus_idle(kube_cluster.core)
    return start_perfsched_extender()


def test_a_job_lands_on_the_gpu_type_the_predictor_says_is_fastest(
    kube_cluster: KubeCluster, fresh_namespace: str, extender: Component
) -> None:
    from scheduler.core.types import Interconnect, Job, PlacementShape
    from scheduler.oracles.predictor import PredictorOracle

    core, ns = kube_cluster.core, fresh_namespace
    # what the predictor says for a 2-GPU ResNet-50 (batch 256) on one node of each type in the cluster
    oracle = PredictorOracle.load()
    job = Job(
        name=f"{ns}/fast", submit_time=0, total_work=1, gpus_per_replica=2, model="resnet50", batch_size=256
    )
    links = {"A100": Interconnect.NVLINK, "V100": Interconnect.NVLINK, "K80": Interconnect.PCIE}
    speeds = dict(
        zip(
            links,
            oracle.throughput([(job, PlacementShape(t, 2, 1, 2, link)) for t, link in links.items()]),
            strict=True,
        )
    )
    fastest = max(speeds, key=lambda t: speeds[t])
    annotations = {"perfsched.dev/model": "resnet50", "perfsched.dev/batch-size": "256"}
    core.create_namespaced_pod(ns, gpu_pod("fast", 2, annotations=annotations))
    node = wait_until(lambda: _bound(core, ns).get("fast"), 60, "pod fast to be bound")
    label = gpu_products(core.api_client)[node]  # the GFD label, or the DRA devices' productName
    from perfmodel.gpus import canonical_gpu_type

    assert canonical_gpu_type(label) == fastest, f"landed on {node} ({label}); predictions {speeds}"


def test_gang_lands_on_one_node_when_one_has_room_else_one_rack(
    kube_cluster: KubeCluster, fresh_namespace: str, extender: Component
) -> None:
    core, ns = kube_cluster.core, fresh_namespace
    kube_cluster.custom.create_namespaced_custom_object(
        "perfsched.dev", "v1alpha1", ns, "trainingjobs", resnet_job("one", 4, 2)
    )
    for pod in _gang("one", 4, 2, "A100"):
        core.create_namespaced_pod(ns, pod)
    placed = wait_until(
        lambda: (b := _bound(core, ns)) and len(b) == 4 and b, 90, "4 replicas of job one bound"
    )
    # 4 x 2 = 8 GPUs: one A100 node (its own NVLink domain) holds the whole gang
    assert len(set(placed.values())) == 1, placed
    # the extender recorded the gang's placement on the TrainingJob
    tj = wait_until(
        lambda: (
            (
                o := kube_cluster.custom.get_namespaced_custom_object(
                    "perfsched.dev", "v1alpha1", ns, "trainingjobs", "one"
                )
            )
            and len((o.get("status") or {}).get("placement") or {}) == 4
            and o
        ),
        30,
        "status.placement of job one",
    )
    assert tj["status"]["placement"] == placed

    # now leave 4 GPUs free on each A100 node: no node has room for 8, so the gang spans two A100 nodes
    # of one rack rather than anything wider
    for pod in list(core.list_namespaced_pod(ns).items):
        core.delete_namespaced_pod(pod.metadata.name, ns, grace_period_seconds=0)
    wait_until(lambda: not core.list_namespaced_pod(ns).items, 60, "job one's pods to go")
    for node in ("a100-0", "a100-1"):
        # through the scheduler (default profile), not nodeName: on a DRA node only a scheduled pod gets
        # the ResourceClaim that takes its devices from what DynamicResources may still allocate
        filler = gpu_pod(f"filler-{node}", 4, scheduler_name="default-scheduler")
        filler["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
        core.create_namespaced_pod(ns, filler)
    wait_until(lambda: len(_bound(core, ns)) == 2, 60, "the two fillers to be bound")
    kube_cluster.custom.create_namespaced_custom_object(
        "perfsched.dev", "v1alpha1", ns, "trainingjobs", resnet_job("two", 4, 2)
    )
    for pod in _gang("two", 4, 2, "A100"):
        core.create_namespaced_pod(ns, pod)
    placed = wait_until(
        lambda: (
            (b := {k: v for k, v in _bound(core, ns).items() if k.startswith("two-")}) and len(b) == 4 and b
        ),
        90,
        "4 replicas of job two bound",
    )
    nodes = _nodes(core)
    racks = {nodes[n].metadata.labels.get("perfsched.dev/rack") for n in placed.values()}
    assert set(placed.values()) == {"a100-0", "a100-1"} and len(racks) == 1, (placed, racks)
    _assert_never_overcommitted(core)


def test_a_pod_that_cannot_fit_shows_the_extenders_reason(
    kube_cluster: KubeCluster, fresh_namespace: str, extender: Component
) -> None:
    core, ns = kube_cluster.core, fresh_namespace
    # the round decided H100, which no node has: every node passes the in-tree filters, ours says why not
    core.create_namespaced_pod(ns, gpu_pod("nowhere", 2, annotations={"perfsched.dev/gpu-type": "H100"}))

    def failed_message() -> str:
        for ev in pod_events(core, ns, "nowhere"):
            if ev.reason == "FailedScheduling" and "perfsched:" in (ev.message or ""):
                return str(ev.message)
        return ""

    message = wait_until(failed_message, 60, "a FailedScheduling event with the extender's reason")
    assert "perfsched: needs GPU type H100 (the round's decision), node has A100" in message
    assert not _bound(core, ns)


def test_killing_the_extender_mid_batch_loses_no_pod_and_never_overcommits(
    kube_cluster: KubeCluster, fresh_namespace: str, extender: Component
) -> None:
    core, ns = kube_cluster.core, fresh_namespace
    capacity = sum(gpu_capacity(core.api_client).values())
    pods = capacity // 2 + 4  # 2-GPU pods: 4 more than the cluster holds
    for i in range(pods):
        core.create_namespaced_pod(ns, gpu_pod(f"batch-{i:02d}", 2))
    wait_until(lambda: len(_bound(core, ns)) >= 3, 60, "the batch to start binding")
    extender.kill()  # a crash in the middle of the batch
    _assert_never_overcommitted(core)
    time.sleep(2)  # kube-scheduler meets a dead extender: attempts fail and back off
    extender.start(90)
    bound = wait_until(
        lambda: (b := _bound(core, ns)) and len(b) == capacity // 2 and b, 120, f"{capacity // 2} pods bound"
    )
    time.sleep(3)  # nothing more may bind: the cluster is full
    assert len(_bound(core, ns)) == capacity // 2
    _assert_never_overcommitted(core)
    # no pod was lost: the ones that did not fit still wait, and take the room freed by others
    names = {p.metadata.name for p in core.list_namespaced_pod(ns).items}
    assert names == {f"batch-{i:02d}" for i in range(pods)}
    for name in list(bound)[:2]:
        core.delete_namespaced_pod(name, ns, grace_period_seconds=0)
    wait_until(
        lambda: (
            len(_bound(core, ns)) == capacity // 2 and not any(n in _bound(core, ns) for n in list(bound)[:2])
        ),
        90,
        "two waiting pods to take the freed GPUs",
    )
    _assert_never_overcommitted(core)
