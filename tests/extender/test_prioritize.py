"""Prioritize scores: predicted throughput, locality to the gang and best-fit packing, 0..10 per node."""

from __future__ import annotations

from collections.abc import Callable

from fastapi.testclient import TestClient

from tests.extender.conftest import FakeOracle
from tests.extender.kube import fed_cache, kube_node, kube_pod, kube_tj


def hetero_cache():  # type: ignore[no-untyped-def]
    nodes = [
        kube_node("a100-1", "A100", 8),  # 8 free
        kube_node("v100-0", "V100", 4),  # 4 free
        kube_node("t4-0", "T4", 2),  # 2 free
    ]
    return fed_cache(nodes)


def scores(client: TestClient, pod: dict, names: list[str]) -> dict[str, int]:
    r = client.post("/prioritize", json={"Pod": pod, "Nodes": None, "NodeNames": names})
    assert r.status_code == 200
    return {e["Host"]: e["Score"] for e in r.json()}


def test_throughput_and_packing_for_a_pod_with_model_annotations(
    client_for: Callable[..., TestClient],
) -> None:
    client = client_for(hetero_cache())
    pod = kube_pod("p", 2, model="resnet50", batch_size=64)
    # weights throughput 6, locality 3 (no gang: skipped), packing 1 -> divide by 6 + 1 = 7
    # FakeOracle: A100 3/GPU, V100 2, T4 1; 2 GPUs on one node -> 6, 4, 2; best 6 -> 10, 6.67, 3.33
    # packing: a100-1 8 - 2 = 6 left of 8 -> 2.5; v100-0 4 - 2 = 2 left of 4 -> 5; t4-0 0 left -> 10
    # a100-1 (6*10 + 2.5)/7 = 8.93 -> 9; v100-0 (6*6.67 + 5)/7 = 6.43 -> 6; t4-0 (6*3.33 + 10)/7 = 4.29 -> 4
    assert scores(client, pod, ["a100-1", "v100-0", "t4-0"]) == {"a100-1": 9, "v100-0": 6, "t4-0": 4}


def test_packing_only_without_a_model(client_for: Callable[..., TestClient]) -> None:
    client = client_for(hetero_cache())
    # best fit: a100-1 6 left of 8 -> 2.5 -> 3 (half up); v100-0 2 of 4 -> 5; t4-0 0 of 2 -> 10
    assert scores(client, kube_pod("p", 2), ["a100-1", "v100-0", "t4-0"]) == {
        "a100-1": 3,
        "v100-0": 5,
        "t4-0": 10,
    }


def test_trainingjob_pods_are_scored_by_the_job_and_the_spread_it_implies(
    client_for: Callable[..., TestClient], oracle: FakeOracle
) -> None:
    nodes = [kube_node("a100-1", "A100", 8), kube_node("v100-0", "V100", 4), kube_node("v100-1", "V100", 4)]
    gang = [kube_pod(f"tj-w{i}", 2, job="tj", replica=i) for i in range(4)]
    cache = fed_cache(nodes, gang, [kube_tj("tj", replicas=4, gpus=2)])
    client = client_for(cache)
    got = scores(client, gang[0], ["a100-1", "v100-0"])
    # 4 x 2 GPUs: on a100-1 all 8 GPUs fit one node -> 3 x 8 = 24; on v100-0 only 2 replicas fit, the
    # other 2 need a second 4-GPU node -> 2 x 8 x 0.8 = 12.8; throughput terms 10 and 5.33
    # packing: a100-1 8 - 2 = 6 left of 8 -> 2.5; v100-0 2 left of 4 -> 5
    # a100-1 (6*10 + 2.5)/7 = 8.93 -> 9; v100-0 (6*5.33 + 5)/7 = 5.29 -> 5
    assert got == {"a100-1": 9, "v100-0": 5}
    shapes = {(s.gpu_type, s.num_gpus, s.num_nodes) for _, s in oracle.calls[-1]}
    assert shapes == {("A100", 8, 1), ("V100", 8, 2)}


def test_locality_pulls_replicas_to_their_gang(client_for: Callable[..., TestClient]) -> None:
    nodes = [
        kube_node("n1", "A100", 4, rack="r1", domain="d1"),
        kube_node("n2", "A100", 4, rack="r1", domain="d1"),
        kube_node("n3", "A100", 4, rack="r1", interconnect="pcie"),
        kube_node("m1", "A100", 4, rack="r2", interconnect="pcie"),
    ]
    gang = [kube_pod("tj-w0", 2, job="tj", replica=0, node="n1")] + [
        kube_pod(f"tj-w{i}", 2, job="tj", replica=i) for i in (1, 2, 3)
    ]
    cache = fed_cache(nodes, gang, [kube_tj("tj", replicas=4, gpus=2)])
    client = client_for(
        cache, extender_weight_throughput=0, extender_weight_locality=3, extender_weight_packing=1
    )
    got = scores(client, gang[1], ["n1", "n2", "n3", "m1"])
    # anchor n1 (replica 0 bound there). locality: n1 same node 10, n2 same NVLink domain 10, n3 same rack 6,
    # m1 other rack 0. packing: n1 4 - 2 bound = 2 free, 0 left -> 10; others 2 left of 4 -> 5
    # n1 (3*10 + 10)/4 = 10; n2 (30 + 5)/4 = 8.75 -> 9; n3 (18 + 5)/4 = 5.75 -> 6; m1 (0 + 5)/4 = 1.25 -> 1
    assert got == {"n1": 10, "n2": 9, "n3": 6, "m1": 1}


def test_one_predictor_call_per_request_and_memoised_after(
    client_for: Callable[..., TestClient], oracle: FakeOracle
) -> None:
    nodes = [kube_node(f"a{i}", "A100", 8) for i in range(50)] + [
        kube_node(f"v{i}", "V100", 4) for i in range(50)
    ]
    client = client_for(fed_cache(nodes))
    pod = kube_pod("p", 2, model="resnet50", batch_size=64)
    names = [n["metadata"]["name"] for n in nodes]
    first = scores(client, pod, names)
    assert len(oracle.calls) == 1  # 100 nodes, 2 distinct shapes, one batch
    assert len(oracle.calls[0]) == 2
    assert scores(client, pod, names) == first
    assert len(oracle.calls) == 1  # answered from the memo


def test_a_failing_predictor_falls_back_to_packing(
    client_for: Callable[..., TestClient], oracle: FakeOracle
) -> None:
    oracle.fail = True
    client = client_for(hetero_cache())
    pod = kube_pod("p", 2, model="resnet50", batch_size=64)
    assert scores(client, pod, ["a100-1", "v100-0", "t4-0"]) == {"a100-1": 3, "v100-0": 5, "t4-0": 10}


def test_scores_stay_in_0_to_10_and_unknown_nodes_score_0(client_for: Callable[..., TestClient]) -> None:
    client = client_for(hetero_cache(), extender_weight_throughput=100, extender_weight_packing=0.001)
    got = scores(client, kube_pod("p", 1, model="bert", batch_size=32), ["a100-1", "ghost", "t4-0"])
    assert got["ghost"] == 0
    assert all(0 <= s <= 10 for s in got.values())


def test_the_reply_lists_every_name_in_order_whatever_its_characters(
    client_for: Callable[..., TestClient],
) -> None:
    """The reply is written by one join over the names; names JSON must escape take the slow way."""
    client = client_for(hetero_cache())
    pod = kube_pod("p", 1)
    for names in (["a100-1", "ghost", "t4-0"], ['we"ird', "a100-1", "back\\slash", "new\nline", "ü"], []):
        reply = client.post("/prioritize", json={"Pod": pod, "NodeNames": names})
        assert reply.status_code == 200
        assert [e["Host"] for e in reply.json()] == names
        assert all(0 <= e["Score"] <= 10 for e in reply.json())
