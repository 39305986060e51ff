"""Filter decisions: which nodes pass, and the reason a person reads for each node that does not."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest
from fastapi.testclient import TestClient

from scheduler.core.types import Job, MemoryFit, PlacementShape
from scheduler.extender import create_app
from scheduler.k8s.cache import ClusterCache, Kind
from scheduler.oracles.memory import MemoryFitter
from scheduler.settings import Settings
from tests.extender.conftest import FakeBinder, FakeOracle
from tests.extender.kube import fed_cache, kube_node, kube_pod, kube_tj


def cluster() -> ClusterCache:
    nodes = [
        kube_node("a100-0", "A100", 8),  # 6 used below -> 2 free
        kube_node("a100-1", "A100", 8),  # 8 free
        kube_node("v100-0", "V100", 4),  # 4 free
        kube_node("t4-0", "T4", 1),  # 1 GPU in total
        kube_node("cpu-0", "", 0),  # no GPUs
        kube_node("a100-c", "A100", 8, unschedulable=True),  # cordoned
    ]
    pods = [
        kube_pod("busy-1", 4, node="a100-0"),
        kube_pod("busy-2", 2, node="a100-0", phase="Pending"),  # bound, not running yet: still counts
        kube_pod("old", 8, node="a100-1", phase="Succeeded"),  # finished: holds nothing
    ]
    jobs = [
        kube_tj("only-v100", replicas=1, gpus=4, allowed=["V100"]),
        kube_tj("bad-types", replicas=1, gpus=1, allowed=["X9000"]),  # unknown type: never schedulable
    ]
    return fed_cache(nodes, pods, jobs)


NAMES = ["a100-0", "a100-1", "v100-0", "t4-0", "cpu-0", "a100-c", "ghost"]

NEEDS_4_A100 = "perfsched: needs 4 nvidia.com/gpu of type A100, node has 2 free"
CACHE_LAG = "perfsched: node ghost is not in the extender's cache yet (watch lag); retry"
CORDONED = "perfsched: node a100-c is cordoned (unschedulable)"
T4_TOO_SMALL = "perfsched: needs 4 nvidia.com/gpu per replica, node has only 1 in total"
NO_GPU = "perfsched: node cpu-0 has no nvidia.com/gpu"

CASES: list[tuple[str, dict[str, Any], list[str], dict[str, str], dict[str, str]]] = [
    (
        # 4 GPUs, any type: a100-0 has 8 - (4 + 2) = 2 free < 4 -> wait; a100-1 8 free, v100-0 4 free pass;
        # t4-0 has 1 GPU in total < 4 and cpu-0 none: waiting cannot fix those
        "plain 4-GPU pod",
        {},
        ["a100-1", "v100-0"],
        {"a100-0": NEEDS_4_A100, "a100-c": CORDONED, "ghost": CACHE_LAG},
        {"t4-0": T4_TOO_SMALL, "cpu-0": NO_GPU},
    ),
    (
        # the operator decided A100: V100 and T4 are wrong types (unresolvable); a100-1 is the only fit
        "operator decided A100",
        {"gpu_type": "A100"},
        ["a100-1"],
        {"a100-0": NEEDS_4_A100, "a100-c": CORDONED, "ghost": CACHE_LAG},
        {
            "v100-0": "perfsched: needs GPU type A100 (the round's decision), node has V100",
            "t4-0": "perfsched: needs GPU type A100 (the round's decision), node has T4",
            "cpu-0": NO_GPU,
        },
    ),
    (
        # TrainingJob allows only V100: every A100 node is unresolvable, whatever is free on it
        "job allows V100 only",
        {"job": "only-v100"},
        ["v100-0"],
        {"ghost": CACHE_LAG},
        {
            "a100-0": "perfsched: job allows GPU types V100, node has A100",
            "a100-1": "perfsched: job allows GPU types V100, node has A100",
            "a100-c": "perfsched: job allows GPU types V100, node has A100",
            "t4-0": "perfsched: job allows GPU types V100, node has T4",
            "cpu-0": NO_GPU,
        },
    ),
]


@pytest.mark.parametrize(
    ("title", "pod_kw", "passed", "failed", "unresolvable"), CASES, ids=[c[0] for c in CASES]
)
def test_filter_table(
    title: str,
    pod_kw: dict[str, Any],
    passed: list[str],
    failed: dict[str, str],
    unresolvable: dict[str, str],
    client_for: Callable[..., TestClient],
) -> None:
    client = client_for(cluster())
    pod = kube_pod("p", 4, **pod_kw)
    r = client.post("/filter", json={"Pod": pod, "Nodes": None, "NodeNames": NAMES})
    assert r.status_code == 200
    body = r.json()
    assert body["NodeNames"] == passed
    assert body["FailedNodes"] == failed
    assert body["FailedAndUnresolvableNodes"] == unresolvable
    assert body["Error"] == ""


def test_a_job_that_can_never_be_scheduled_fails_every_node_unresolvably(
    client_for: Callable[..., TestClient],
) -> None:
    client = client_for(cluster())
    pod = kube_pod("bad-types-w0", 1, job="bad-types")
    body = client.post("/filter", json={"Pod": pod, "NodeNames": ["a100-1", "v100-0"]}).json()
    assert body["NodeNames"] == []
    assert set(body["FailedAndUnresolvableNodes"]) == {"a100-1", "v100-0"}
    assert (
        "spec.allowedGPUTypes names unknown GPU types ['X9000']"
        in body["FailedAndUnresolvableNodes"]["a100-1"]
    )


def test_pods_without_gpu_requests_pass_untouched(client_for: Callable[..., TestClient]) -> None:
    client = client_for(cluster())
    pod = kube_pod("web", 0)
    body = client.post("/filter", json={"Pod": pod, "NodeNames": NAMES}).json()
    assert (
        body["NodeNames"] == NAMES and body["FailedNodes"] == {} and body["FailedAndUnresolvableNodes"] == {}
    )


def test_full_node_objects_unknown_to_the_cache_are_decoded_from_the_request(
    client_for: Callable[..., TestClient],
) -> None:
    client = client_for(cluster())
    fresh = kube_node("new-0", "H100", 8)  # created a moment ago: the watch has not delivered it yet
    items = [kube_node("a100-1", "A100", 8), fresh]
    body = client.post(
        "/filter", json={"Pod": kube_pod("p", 8), "Nodes": {"metadata": {}, "items": items}}
    ).json()
    assert [n["metadata"]["name"] for n in body["Nodes"]["items"]] == ["a100-1", "new-0"]
    assert body["Nodes"]["items"][1] == fresh  # echoed back unmodified
    assert body["NodeNames"] is None


def test_reservations_of_binds_not_yet_seen_count_as_used(client_for: Callable[..., TestClient]) -> None:
    cache = cluster()
    assert cache.reserve("team-a", "other", "u", "a100-1", 6) is None  # bound by us, watch not caught up
    client = client_for(cache)
    body = client.post("/filter", json={"Pod": kube_pod("p", 4), "NodeNames": ["a100-1"]}).json()
    # 8 - 6 reserved = 2 free < 4
    assert body["FailedNodes"] == {
        "a100-1": "perfsched: needs 4 nvidia.com/gpu of type A100, node has 2 free"
    }


# --- gangs -------------------------------------------------------------------------------------------


def gang_cluster(big_free: bool) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Rack r1: big-0 (8 GPUs, its own NVLink node), n1 + n2 (4 GPUs each, NVLink domain d1), n3 (4, PCIe).
    Rack r2: m1, m2 (4 GPUs each, PCIe). ``big_free`` False fills big-0 with a running pod."""
    nodes = [
        kube_node("big-0", "A100", 8, rack="r1"),
        kube_node("n1", "A100", 4, rack="r1", domain="d1"),
        kube_node("n2", "A100", 4, rack="r1", domain="d1"),
        kube_node("n3", "A100", 4, rack="r1", interconnect="pcie"),
        kube_node("m1", "A100", 4, rack="r2", interconnect="pcie"),
        kube_node("m2", "A100", 4, rack="r2", interconnect="pcie"),
    ]
    pods = [] if big_free else [kube_pod("filler", 8, node="big-0", namespace="other")]
    return nodes, pods


GANG_NAMES = ["big-0", "n1", "n2", "n3", "m1", "m2"]


def gang_pods(n: int = 4, gpus: int = 2, **kw: Any) -> list[dict[str, Any]]:
    return [kube_pod(f"tj-w{i}", gpus, job="tj", replica=i, gpu_type="A100", **kw) for i in range(n)]


def test_gang_goes_to_one_node_when_one_has_room(client_for: Callable[..., TestClient]) -> None:
    nodes, pods = gang_cluster(big_free=True)
    gang = gang_pods()
    cache = fed_cache(
        nodes, pods + gang, [kube_tj("tj", replicas=4, gpus=2, alloc_replicas=4, gpu_type="A100")]
    )
    body = client_for(cache).post("/filter", json={"Pod": gang[0], "NodeNames": GANG_NAMES}).json()
    # 4 replicas x 2 GPUs = 8: big-0 (8 free NVLink node) holds the whole gang
    assert body["NodeNames"] == ["big-0"]
    assert body["FailedNodes"]["n1"] == (
        "perfsched: gang team-a/tj (4 x 2 GPUs) is placed on node big-0; this node is outside that placement"
    )


def test_first_replica_seen_alone_still_gets_a_whole_gang_placement(
    client_for: Callable[..., TestClient],
) -> None:
    """kube-scheduler may ask about replica 0 before the watch has shown the extender its siblings or the
    TrainingJob: the operator's ``world-size`` annotation still sizes the gang, so replica 0 only passes
    nodes where all four replicas fit together (not any node with room for one)."""
    nodes, pods = gang_cluster(big_free=False)
    first = kube_pod("tj-w0", 2, job="tj", replica=0, gpu_type="A100", world_size=4)
    cache = fed_cache(nodes, [*pods, first], [])
    body = client_for(cache).post("/filter", json={"Pod": first, "NodeNames": GANG_NAMES}).json()
    assert body["NodeNames"] == ["n1", "n2"]  # NVLink domain d1 holds 4 x 2 GPUs; m1/m2 would each fit one
    # without the annotation the extender could only treat the pod as a lone replica
    lone = kube_pod("tj-w0", 2, job="tj", replica=0, gpu_type="A100")
    cache = fed_cache(nodes, [*pods, lone], [])
    body = client_for(cache).post("/filter", json={"Pod": lone, "NodeNames": GANG_NAMES}).json()
    assert set(body["NodeNames"]) > {"n1", "n2"}


def test_gang_goes_to_one_nvlink_domain_else_one_rack(client_for: Callable[..., TestClient]) -> None:
    nodes, pods = gang_cluster(big_free=False)
    gang = gang_pods()
    cache = fed_cache(nodes, pods + gang, [kube_tj("tj", replicas=4, gpus=2)])
    client = client_for(cache)
    body = client.post("/filter", json={"Pod": gang[0], "NodeNames": GANG_NAMES}).json()
    # big-0 is full; n1 + n2 (4 + 4 = 8 GPUs in NVLink domain d1) hold the gang
    assert body["NodeNames"] == ["n1", "n2"]
    assert "NVLink domain d1 (nodes n1, n2)" in body["FailedNodes"]["n3"]
    # fill n2 with someone else: no domain has room; rack r1 (n1 + n3 = 8) beats spanning racks
    cache.apply(Kind.PODS, "ADDED", kube_pod("x", 4, node="n2", namespace="other"))
    client = client_for(cache)
    body = client.post("/filter", json={"Pod": gang[0], "NodeNames": GANG_NAMES}).json()
    assert body["NodeNames"] == ["n1", "n3"]
    assert "rack r1" in body["FailedNodes"]["m1"]


def test_later_replicas_follow_the_bound_ones(client_for: Callable[..., TestClient]) -> None:
    nodes, pods = gang_cluster(big_free=False)
    gang = gang_pods()
    # replicas 0 and 1 already bound to n3 (PCIe, rack r1): the other two stay in rack r1 next to them
    gang[0] = kube_pod("tj-w0", 2, job="tj", replica=0, gpu_type="A100", node="n3")
    gang[1] = kube_pod("tj-w1", 2, job="tj", replica=1, gpu_type="A100", node="n3")
    cache = fed_cache(nodes, pods + gang, [kube_tj("tj", replicas=4, gpus=2)])
    body = client_for(cache).post("/filter", json={"Pod": gang[2], "NodeNames": GANG_NAMES}).json()
    passed = body["NodeNames"]
    assert passed and all(cache.nodes[n].rack == "r1" for n in passed)


def test_an_earlier_plan_outside_kube_schedulers_sample_is_made_again_among_it(
    client_for: Callable[..., TestClient],
) -> None:
    """kube-scheduler offers a sample of the nodes (10% of 5,000): a plan none of whose nodes is offered
    would keep the gang waiting for a sample that may never come, so the gang is placed among the
    candidates instead; while the plan is offered, it holds."""
    nodes, pods = gang_cluster(big_free=False)
    gang = gang_pods()
    cache = fed_cache(nodes, pods + gang, [kube_tj("tj", replicas=4, gpus=2)])
    client = client_for(cache)
    body = client.post("/filter", json={"Pod": gang[0], "NodeNames": GANG_NAMES}).json()
    assert body["NodeNames"] == ["n1", "n2"]  # the plan: NVLink domain d1
    body = client.post("/filter", json={"Pod": gang[1], "NodeNames": ["n2", "m1", "m2"]}).json()
    assert body["NodeNames"] == ["n2"]  # part of the plan is offered: it holds
    body = client.post("/filter", json={"Pod": gang[1], "NodeNames": ["m1", "m2"]}).json()
    assert body["NodeNames"] and set(body["NodeNames"]) <= {"m1", "m2"}


def test_operator_plan_is_followed_while_it_fits(client_for: Callable[..., TestClient]) -> None:
    nodes, pods = gang_cluster(big_free=False)
    pods.append(kube_pod("half", 2, node="n1", namespace="other"))  # no NVLink domain holds the gang
    # the operator planned two replicas on m1 and two on m2 (rack r2): followed, although n1 + n2 + n3
    # would be a tighter fit
    gang = [
        kube_pod(f"tj-w{i}", 2, job="tj", replica=i, gpu_type="A100", planned="m1" if i < 2 else "m2")
        for i in range(4)
    ]
    cache = fed_cache(nodes, pods + gang, [kube_tj("tj", replicas=4, gpus=2)])
    body = client_for(cache).post("/filter", json={"Pod": gang[0], "NodeNames": GANG_NAMES}).json()
    assert body["NodeNames"] == ["m1", "m2"]


def test_a_gang_planned_over_several_nodes_takes_an_nvlink_domain_freed_since(
    client_for: Callable[..., TestClient], caplog: pytest.LogCaptureFixture
) -> None:
    """The operator planned the gang over m1 + m2 (no domain was free at its round); NVLink domain d1 is
    free now and held for nobody: every pod of the gang gets d1. A domain held for another gang's planned
    pods is not taken."""
    nodes, pods = gang_cluster(big_free=False)
    gang = [
        kube_pod(f"tj-w{i}", 2, job="tj", replica=i, gpu_type="A100", planned="m1" if i < 2 else "m2")
        for i in range(4)
    ]
    cache = fed_cache(nodes, pods + gang, [kube_tj("tj", replicas=4, gpus=2)])
    client = client_for(cache)
    with caplog.at_level("INFO", logger="scheduler.extender.gang"):
        for pod in gang:
            body = client.post("/filter", json={"Pod": pod, "NodeNames": GANG_NAMES}).json()
            assert body["NodeNames"] == ["n1", "n2"]
    # one line per gang says where and why
    assert [r.getMessage() for r in caplog.records if r.name == "scheduler.extender.gang"] == [
        "gang team-a/tj generation 1 placed on NVLink domain d1 (nodes n1, n2): one NVLink domain instead "
        "of the operator's plan on rack r2 (nodes m1, m2)"
    ]
    other = [
        kube_pod(f"o-w{i}", 4, job="o", replica=i, gpu_type="A100", planned=f"n{i + 1}") for i in range(2)
    ]
    cache = fed_cache(
        nodes, pods + gang + other, [kube_tj("tj", replicas=4, gpus=2), kube_tj("o", replicas=2, gpus=4)]
    )
    body = client_for(cache).post("/filter", json={"Pod": gang[0], "NodeNames": GANG_NAMES}).json()
    assert body["NodeNames"] == ["m1", "m2"]


def test_stale_operator_plan_waits_while_held_then_falls_back_to_gang_placement(
    client_for: Callable[..., TestClient],
) -> None:
    """A plan that does not fit is waited for (a finished pod's claim or a watch behind the operator
    clears within seconds) for 5 s; then the gang is placed afresh."""
    t = [0.0]
    nodes, pods = gang_cluster(big_free=False)
    pods.append(kube_pod("squatter", 4, node="m1", namespace="other"))  # m1 planned but now full
    gang = [
        kube_pod(f"tj-w{i}", 2, job="tj", replica=i, gpu_type="A100", planned="m1" if i < 2 else "m2")
        for i in range(4)
    ]
    cache = fed_cache(nodes, pods + gang, [kube_tj("tj", replicas=4, gpus=2)], clock=lambda: t[0])
    client = client_for(cache)
    body = client.post("/filter", json={"Pod": gang[0], "NodeNames": GANG_NAMES}).json()
    assert body["NodeNames"] == []
    assert body["FailedNodes"]["n1"] == (
        "perfsched: gang team-a/tj: waiting for the GPUs planned for it on rack r2 (nodes m1, m2) to be free "
        "(4 of 8 free now)"
    )
    t[0] = 4.0
    body = client.post("/filter", json={"Pod": gang[1], "NodeNames": GANG_NAMES}).json()
    assert body["NodeNames"] == []
    t[0] = 5.5  # past the 5 s a plan is waited for
    body = client.post("/filter", json={"Pod": gang[0], "NodeNames": GANG_NAMES}).json()
    assert body["NodeNames"] == ["n1", "n2"]  # the NVLink domain, as place_gang says


def test_the_plan_wait_and_hold_are_settings(client_for: Callable[..., TestClient]) -> None:
    """``PERFSCHED_EXTENDER_PLAN_WAIT_SECONDS`` sets how long a plan that does not fit is waited for (here
    1 s, not 5), and the cache's hold (``hold_ttl_s``) how long the gang's GPUs stay held for it."""
    t = [0.0]
    nodes, pods = gang_cluster(big_free=False)
    pods.append(kube_pod("squatter", 4, node="m1", namespace="other"))
    gang = [
        kube_pod(f"tj-w{i}", 2, job="tj", replica=i, gpu_type="A100", planned="m1" if i < 2 else "m2")
        for i in range(4)
    ]
    cache = fed_cache(
        nodes, pods + gang, [kube_tj("tj", replicas=4, gpus=2)], clock=lambda: t[0], hold_ttl_s=2.0
    )
    client = client_for(cache, extender_plan_wait_seconds=1.0, extender_plan_hold_seconds=2.0)
    body = client.post("/filter", json={"Pod": gang[0], "NodeNames": GANG_NAMES}).json()
    assert body["NodeNames"] == [] and "waiting for the GPUs planned" in body["FailedNodes"]["n1"]
    t[0] = 1.5  # past the 1 s wait, within the 2 s hold: placed afresh
    body = client.post("/filter", json={"Pod": gang[0], "NodeNames": GANG_NAMES}).json()
    assert body["NodeNames"] == ["n1", "n2"]
    assert cache.holds_of(("team-a/tj", "1"))  # the unbound pods still hold their planned GPUs
    t[0] = 2.5  # past the 2 s hold
    cache.expire_assumed()  # what the watch loop and every reader do
    assert cache.holds_of(("team-a/tj", "1")) == {}


def test_a_plan_the_watch_shows_in_part_is_read_from_the_jobs_status(
    client_for: Callable[..., TestClient],
) -> None:
    """The operator writes the allocation into the TrainingJob's status before it creates the pods: with
    one pod of the gang visible, the plan (NVLink domain d1) is still whole, not placed afresh on big-0."""
    nodes, pods = gang_cluster(big_free=True)
    gang = [
        kube_pod(f"tj-w{i}", 2, job="tj", replica=i, gpu_type="A100", planned="n1" if i < 2 else "n2")
        for i in range(4)
    ]
    tj = kube_tj("tj", replicas=4, gpus=2, alloc_replicas=4, gpu_type="A100", alloc_nodes={"n1": 2, "n2": 2})
    cache = fed_cache(nodes, pods + gang[:1], [tj])
    body = client_for(cache).post("/filter", json={"Pod": gang[0], "NodeNames": GANG_NAMES}).json()
    assert body["NodeNames"] == ["n1", "n2"]


def test_gpus_planned_for_a_gang_are_held_from_other_pods(client_for: Callable[..., TestClient]) -> None:
    """Another job's pod is kept off the GPUs planned for a gang whose pods are not bound yet, until the
    hold ends; the gang's own pods still see them."""
    t = [0.0]
    nodes, pods = gang_cluster(big_free=True)
    gang = gang_pods(planned="big-0")
    lone = kube_pod("solo-w0", 2, job="solo", replica=0, gpu_type="A100")
    cache = fed_cache(
        nodes,
        pods + gang + [lone],
        [kube_tj("tj", replicas=4, gpus=2), kube_tj("solo", gpus=2)],
        clock=lambda: t[0],
    )
    client = client_for(cache)
    body = client.post("/filter", json={"Pod": lone, "NodeNames": ["big-0"]}).json()
    assert body["NodeNames"] == []
    assert body["FailedNodes"]["big-0"].endswith("node has 0 free; 8 more held for pods planned there")
    body = client.post("/filter", json={"Pod": gang[3], "NodeNames": GANG_NAMES}).json()
    assert body["NodeNames"] == ["big-0"]
    t[0] = 31.0
    body = client.post("/filter", json={"Pod": lone, "NodeNames": ["big-0"]}).json()
    assert body["NodeNames"] == ["big-0"]


def test_a_gang_that_does_not_fit_waits_with_the_reason(client_for: Callable[..., TestClient]) -> None:
    nodes, pods = gang_cluster(big_free=False)
    pods += [kube_pod(f"f{i}", 4, node=n, namespace="other") for i, n in enumerate(["n1", "n2", "n3", "m1"])]
    gang = gang_pods()
    cache = fed_cache(nodes, pods + gang, [kube_tj("tj", replicas=4, gpus=2)])
    body = client_for(cache).post("/filter", json={"Pod": gang[0], "NodeNames": GANG_NAMES}).json()
    # only m2 has room (4 free) but the gang needs 4 x 2 = 8: waiting (resolvable) on m2
    assert body["NodeNames"] == []
    assert body["FailedNodes"]["m2"] == "perfsched: gang team-a/tj: waiting for 8 GPUs of type A100: 4 free"


def test_filter_never_passes_a_node_without_room(client_for: Callable[..., TestClient]) -> None:
    """Invariant over every plain-pod decision in the table cluster: passed => free >= asked."""
    cache = cluster()
    client = client_for(cache)
    for g in range(0, 10):
        out = client.post("/filter", json={"Pod": kube_pod("p", g), "NodeNames": NAMES}).json()
        for name in out["NodeNames"]:
            assert g == 0 or cache.free[name] >= g
        assert set(out["NodeNames"]) | set(out["FailedNodes"]) | set(
            out["FailedAndUnresolvableNodes"]
        ) == set(NAMES)


class MemoryAwareOracle(FakeOracle):
    """The fake throughput with the real memory model (``scheduler.oracles.memory``, from perfmodel)."""

    def __init__(self) -> None:
        super().__init__()
        self.fitter = MemoryFitter()

    def memory_fit(self, queries: Sequence[tuple[Job, PlacementShape]]) -> list[MemoryFit | None]:
        return self.fitter.memory_fit(queries)


def test_nodes_whose_gpu_memory_the_job_does_not_fit_are_refused_with_the_memory_named(
    binder: FakeBinder,
) -> None:
    # Llama 3 8B, FSDP over 8 GPUs: 16 B/param x 8.0e9 / 8 = ~15 GiB of weights, gradients and Adam state
    # per GPU plus ~45 GiB of activations for 2 x 4096 tokens without checkpointing (~60 GiB): fits an 80 GB
    # H100, not a 16 GB T4, and waiting cannot fix that
    tj = kube_tj("llama", replicas=1, gpus=8, model="llama3-8b", batch_size=64)
    tj["spec"].update({"precision": "bf16", "sequenceLength": 4096, "sharding": "fsdp", "microBatchSize": 2})
    tj["spec"].pop("dataset")
    cache = fed_cache([kube_node("h100-0", "H100", 8), kube_node("t4-0", "T4", 8)], [], [tj])
    client = TestClient(create_app(Settings(), cache, MemoryAwareOracle(), binder=binder))
    pod = kube_pod("llama-w0", 8, job="llama")
    body = client.post("/filter", json={"Pod": pod, "NodeNames": ["h100-0", "t4-0"]}).json()
    assert body["NodeNames"] == ["h100-0"]
    assert body["FailedNodes"] == {}
    why = body["FailedAndUnresolvableNodes"]["t4-0"]
    assert why.startswith("perfsched: node t4-0: TrainingJob team-a/llama needs ~") and "GiB per GPU" in why
    assert "does not fit" in why and "16" in why


def test_lone_pod_goes_to_its_planned_node_while_it_has_room(client_for: Callable[..., TestClient]) -> None:
    """An adopted job's pod (no gang label) planned on a100-1: only a100-1 passes while it has room; a
    pod planned on a full node (a100-0 has 2 free, it needs 4) may go wherever it fits."""
    client = client_for(cluster())
    pod = kube_pod("job-abc-0", 4, gpu_type="A100", planned="a100-1")
    body = client.post("/filter", json={"Pod": pod, "NodeNames": ["a100-0", "a100-1", "v100-0"]}).json()
    assert body["NodeNames"] == ["a100-1"]
    assert body["FailedNodes"]["a100-0"] == NEEDS_4_A100
    full = kube_pod("job-abc-1", 4, planned="a100-0")
    body = client.post("/filter", json={"Pod": full, "NodeNames": ["a100-0", "a100-1", "v100-0"]}).json()
    assert body["NodeNames"] == ["a100-1", "v100-0"]
    # planned on a100-1 but any type: the other fitting node is refused with the reason
    anyt = kube_pod("job-abc-2", 4, planned="a100-1")
    body = client.post("/filter", json={"Pod": anyt, "NodeNames": ["a100-1", "v100-0"]}).json()
    assert body["NodeNames"] == ["a100-1"]
    assert (
        body["FailedNodes"]["v100-0"] == "perfsched: the pod's job is planned on node a100-1, which has room"
    )


def test_lone_pod_of_an_adopted_gang_is_sized_by_its_world_size() -> None:
    """An adopted job's pod names its model and its gang's size: the extender's job for it (memory fit,
    throughput) is the whole gang of 4 x 1 GPU with the global batch, not one GPU holding all of it."""
    from scheduler.extender.context import pod_context

    pod = kube_pod("job-abc-0", 1, model="resnet50", batch_size=256, world_size=4, planned="a100-1")
    ctx = pod_context(cluster(), pod)
    assert ctx.job is not None and (ctx.job.max_replicas, ctx.job.batch_size) == (4, 256)
    assert ctx.replicas == 4 and not ctx.in_gang
