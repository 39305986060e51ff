"""A gang under the Workload API: kube-scheduler filters every pod of a PodGroup in one cycle with its
gang-mates only *assumed* (none bound, none visible to the extender's cache), then binds all or none.

The extender must still send the whole gang to one NVLink domain. It decides the gang's domain up front:
from the operator's plan (the pods' ``planned-node`` annotations), or, without one, on the gang's first
filter call (then kept for every later gang-mate while it fits and is offered). Each test drives a small
model of kube-scheduler's cycle: it keeps its own count of assumed GPUs per node, offers only nodes with
room left (what NodeResourcesFit leaves), and assumes each pod on the first node the extender passes.
With opportunistic batching a pod identical to the previous one reuses that pod's filtered nodes without
calling the extender again; both ways are run.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.extender.kube import fed_cache, kube_node, kube_pod, kube_tj

NODES = ["big-0", "n1", "n2", "n3", "m1", "m2", "p1", "p2"]


def cluster() -> list[dict[str, Any]]:
    """big-0 is busy (8 GPUs used); NVLink domain d1 = n1 + n2 (4 + 4 GPUs); n3, m1, m2 PCIe;
    NVLink domain d2 = p1 + p2 (4 + 4) in another rack."""
    return [
        kube_node("big-0", "H100", 8, rack="r1"),
        kube_node("n1", "H100", 4, rack="r1", domain="d1"),
        kube_node("n2", "H100", 4, rack="r1", domain="d1"),
        kube_node("n3", "H100", 4, rack="r1", interconnect="pcie"),
        kube_node("m1", "H100", 4, rack="r2", interconnect="pcie"),
        kube_node("m2", "H100", 4, rack="r2", interconnect="pcie"),
        kube_node("p1", "H100", 4, rack="r3", domain="d2"),
        kube_node("p2", "H100", 4, rack="r3", domain="d2"),
    ]


CAPACITY = {"big-0": 0, "n1": 4, "n2": 4, "n3": 4, "m1": 4, "m2": 4, "p1": 4, "p2": 4}


def gang(plan: list[str] | None) -> list[dict[str, Any]]:
    pods = []
    for i in range(8):
        pod = kube_pod(
            f"tj-g1-{i}",
            1,
            job="tj",
            replica=i,
            gpu_type="H100",
            world_size=8,
            planned=plan[i] if plan else "",
        )
        pod["spec"]["schedulingGroup"] = {"podGroupName": "tj-g1"}
        pods.append(pod)
    return pods


def schedule_group(client: TestClient, pods: list[dict[str, Any]], *, batching: bool) -> dict[str, str]:
    """One gang cycle: every pod filtered with the earlier ones assumed; returns pod -> node."""
    assumed = dict.fromkeys(CAPACITY, 0)
    placed: dict[str, str] = {}
    reused: list[str] | None = None
    for pod in pods:
        offered = [n for n in NODES if CAPACITY[n] - assumed[n] >= 1]
        if batching and reused is not None:
            passed = [n for n in reused if n in offered]
        else:
            body = client.post("/filter", json={"Pod": pod, "NodeNames": offered}).json()
            passed = body["NodeNames"] or []
            reused = passed
        assert passed, f"{pod['metadata']['name']}: no node passed"
        node = passed[0]
        assumed[node] += 1
        placed[pod["metadata"]["name"]] = node
    return placed


def domain(node: str) -> str:
    return {"n1": "d1", "n2": "d1", "p1": "d2", "p2": "d2"}.get(node, node)


@pytest.mark.parametrize("batching", [False, True], ids=["batching-off", "batching-on"])
def test_the_operators_plan_puts_the_whole_gang_in_its_domain(
    client_for: Callable[..., TestClient], batching: bool
) -> None:
    plan = ["p1"] * 4 + ["p2"] * 4  # the operator chose d2, although d1 fits as well
    pods = gang(plan)
    busy = kube_pod("filler", 8, node="big-0", namespace="other")
    cache = fed_cache(cluster(), [busy, *pods], [kube_tj("tj", replicas=8, gpus=1)])
    placed = schedule_group(client_for(cache), pods, batching=batching)
    assert len(placed) == 8
    assert {domain(n) for n in placed.values()} == {"d2"}


@pytest.mark.parametrize("batching", [False, True], ids=["batching-off", "batching-on"])
def test_without_a_plan_the_first_filter_call_decides_the_domain_for_all(
    client_for: Callable[..., TestClient], batching: bool
) -> None:
    pods = gang(None)
    busy = kube_pod("filler", 8, node="big-0", namespace="other")
    cache = fed_cache(cluster(), [busy, *pods], [kube_tj("tj", replicas=8, gpus=1)])
    placed = schedule_group(client_for(cache), pods, batching=batching)
    assert len(placed) == 8
    domains = {domain(n) for n in placed.values()}
    assert len(domains) == 1 and domains <= {"d1", "d2"}, placed


def test_no_domain_fits_then_no_pod_of_the_gang_passes(client_for: Callable[..., TestClient]) -> None:
    """Only n1 has room (4 free GPUs): the gang of 8 fits nowhere, so every pod of it waits with the
    reason (kube-scheduler binds none of them); no pod is passed on its own."""
    pods = gang(None)
    busy = [kube_pod("filler", 8, node="big-0", namespace="other")]
    busy += [kube_pod(f"f-{n}", 4, node=n, namespace="other") for n in ["n2", "n3", "m1", "m2", "p1", "p2"]]
    cache = fed_cache(cluster(), [*busy, *pods], [kube_tj("tj", replicas=8, gpus=1)])
    client = client_for(cache)
    for pod in pods:
        body = client.post("/filter", json={"Pod": pod, "NodeNames": NODES}).json()
        assert body["NodeNames"] == []
        assert "waiting for 8 GPUs" in body["FailedNodes"]["n1"]
