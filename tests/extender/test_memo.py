"""Reading request bodies, and the memo tables behind filter and prioritize following the cache.

Requests go through the whole ASGI app; the memo tables (gang indexes, class scores, locality levels,
per-class verdicts) must answer what a fresh computation over the cache's current state answers.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler import metrics
from scheduler.core.placement import place_gang
from scheduler.core.types import Allocation
from scheduler.extender import create_app
from scheduler.extender.gang import FreeIndexes
from scheduler.k8s.cache import ClusterCache, Kind
from scheduler.settings import Settings
from tests.extender.conftest import FakeOracle
from tests.extender.kube import fed_cache, kube_node, kube_pod, kube_tj


def call(
    app: Any,
    path: str,
    chunks: list[bytes],
    *,
    method: str = "POST",
    length: bool = True,
) -> tuple[int | None, dict[bytes, bytes], bytes]:
    """One request through the ASGI app: (status or None when nothing was sent, headers, body)."""
    body = b"".join(chunks)
    headers = [(b"content-type", b"application/json")]
    if length:
        headers.append((b"content-length", str(len(body)).encode()))
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": (path).encode(),
        "query_string": b"",
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
    }
    messages = [
        {"type": "http.request", "body": c, "more_body": i < len(chunks) - 1} for i, c in enumerate(chunks)
    ]
    status: list[int] = []
    out: list[bytes] = []
    got: dict[bytes, bytes] = {}

    async def receive() -> dict[str, Any]:
        if messages:
            return messages.pop(0)
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            status.append(message["status"])
            got.update(message.get("headers", []))
        elif message["type"] == "http.response.body":
            out.append(message.get("body", b""))

    asyncio.run(app(scope, receive, send))
    return (status[0] if status else None), got, b"".join(out)


def small_app(**settings: Any) -> Any:
    nodes = [
        kube_node("a", "A100", 8, rack="r1", domain="d1"),
        kube_node("b", "V100", 4, rack="r1"),
        kube_node("c", "A100", 8, rack="r2", unschedulable=True),
    ]
    pods = [kube_pod("tj-w0", 2, job="tj", replica=0, node="a"), kube_pod("busy", 3, node="b")]
    cache = fed_cache(nodes, pods, [kube_tj("tj", replicas=2, gpus=2)])
    return create_app(Settings(**settings), cache, FakeOracle())


def pod_body(pod: dict[str, Any], names: list[str]) -> bytes:
    return orjson.dumps({"Pod": pod, "Nodes": None, "NodeNames": names})


BODIES = [pod_body(kube_pod("tj-w1", 2, job="tj", replica=1), ["a", "b", "c", "ghost"])]


def test_a_body_sent_in_chunks_is_read_whole_and_one_over_the_limit_is_refused() -> None:
    app = small_app(extender_max_body_bytes=4096)
    body = BODIES[0]
    whole = call(app, "/filter", [body])
    # 3 chunks, no Content-Length (chunked transfer encoding): the same answer
    assert call(app, "/filter", [body[:10], body[10:50], body[50:]], length=False) == whole
    # 5 chunks of 1,000 bytes without a Content-Length: over 4,096 on the fifth -> 413
    status, _, reply = call(app, "/prioritize", [b" " * 1000] * 5, length=False)
    assert status == 413
    assert orjson.loads(reply) == {"Error": "request body is over the limit of 4096 bytes"}
    # a Content-Length over the limit is refused before reading
    status, _, reply = call(app, "/filter", [b" " * 5000])
    assert (status, orjson.loads(reply)) == (
        413,
        {"Error": "request body of 5000 bytes is over the limit of 4096 bytes"},
    )


# --- memo tables ---------------------------------------------------------------------------------


def scores(app: Any, pod: dict[str, Any], names: list[str]) -> dict[str, int]:
    status, _, reply = call(app, "/prioritize", [pod_body(pod, names)])
    assert status == 200
    return {e["Host"]: e["Score"] for e in orjson.loads(reply)}


def test_a_node_that_moves_rack_is_scored_by_its_new_rack() -> None:
    nodes = [kube_node("n1", "V100", 4, rack="r1"), kube_node("n2", "V100", 4, rack="r2")]
    gang = [kube_pod("tj-w0", 2, job="tj", replica=0, node="n1"), kube_pod("tj-w1", 2, job="tj", replica=1)]
    cache = fed_cache(nodes, gang, [kube_tj("tj", replicas=2, gpus=2)])
    app = create_app(Settings(extender_weight_throughput=0.0), cache, FakeOracle())
    me = kube_pod("tj-w1", 2, job="tj", replica=1)
    # locality 3, packing 1 -> /4. n1: same node as the bound replica 10; 2 left of 4 after -> 10 x 2/4
    # ... packing 0 free left -> 10; (3*10 + 10)/4 = 10. n2 rack r2, cluster level 0; 4 - 2 = 2 of 4 -> 5:
    # (0 + 5)/4 = 1.25 -> 1
    assert scores(app, me, ["n1", "n2"]) == {"n1": 10, "n2": 1}
    version = cache.nodes_version
    # a heartbeat (same node, new resourceVersion) changes nothing the extender reads
    cache.apply(Kind.NODES, "MODIFIED", kube_node("n2", "V100", 4, rack="r2"))
    assert cache.nodes_version == version
    # n2 moves to r1: rack level 6 -> (3*6 + 5)/4 = 5.75 -> 6
    cache.apply(Kind.NODES, "MODIFIED", kube_node("n2", "V100", 4, rack="r1"))
    assert cache.nodes_version > version
    assert scores(app, me, ["n1", "n2"]) == {"n1": 10, "n2": 6}


def test_scores_left_without_throughput_by_a_failed_prediction_are_not_kept() -> None:
    oracle = FakeOracle()
    cache = fed_cache([kube_node("a100", "A100", 8), kube_node("t4", "T4", 2)])
    app = create_app(Settings(), cache, oracle)
    pod = kube_pod("p", 2, model="resnet50", batch_size=64)
    oracle.fail = True
    # packing only: a100 6 left of 8 -> 2.5 -> 3 (half up); t4 0 left -> 10
    assert scores(app, pod, ["a100", "t4"]) == {"a100": 3, "t4": 10}
    oracle.fail = False
    # throughput 6 + packing 1 -> /7; A100 2 x 3 = 6 -> 10, T4 2 x 1 = 2 -> 3.33
    # a100 (60 + 2.5)/7 = 8.9 -> 9; t4 (20 + 10)/7 = 4.3 -> 4
    assert scores(app, pod, ["a100", "t4"]) == {"a100": 9, "t4": 4}
    calls = len(oracle.calls)
    assert scores(app, pod, ["a100", "t4"]) == {"a100": 9, "t4": 4}  # memoised: no new oracle call
    assert len(oracle.calls) == calls


@settings(max_examples=25, deadline=None)
@given(
    sizes=st.lists(st.sampled_from([2, 4, 8]), min_size=2, max_size=10),
    steps=st.lists(st.tuples(st.integers(0, 9), st.integers(0, 8), st.booleans()), min_size=1, max_size=12),
    gang=st.tuples(st.integers(1, 4), st.sampled_from([1, 2, 4])),
)
def test_the_kept_gang_index_places_as_a_fresh_place_gang_does(
    sizes: list[int], steps: list[tuple[int, int, bool]], gang: tuple[int, int]
) -> None:
    nodes = [
        kube_node(f"n{i}", "A100" if i % 3 else "V100", g, rack=f"r{i // 3}", domain=f"d{i // 2}")
        for i, g in enumerate(sizes)
    ]
    cache = ClusterCache()
    cache.replace(Kind.NODES, nodes, "1")
    cache.replace(Kind.PODS, [], "1")
    indexes = FreeIndexes(cache)
    replicas, gpr = gang

    def check() -> None:
        for t in ("A100", "V100"):
            pool = [n for n in cache.nodes.values() if n.gpu_type == t]
            fresh = place_gang(pool, cache.free, replicas=replicas, gpus_per_replica=gpr, gpu_type=t, job="j")
            kept = indexes.get(t).place(replicas=replicas, gpus_per_replica=gpr, gpu_type=t, job="j")
            assert kept == fresh
            if isinstance(fresh, Allocation):
                assert all(cache.free[n] >= r * gpr for n, r in fresh.replicas_per_node)

    check()
    # pods come and go on random nodes (an assumed bind, a bound pod, a deletion), and a node is cordoned
    for k, (i, gpus, delete) in enumerate(steps):
        node = f"n{i % len(sizes)}"
        if delete and cache.pod("team-a", f"p{k - 1}") is not None:
            cache.apply(Kind.PODS, "DELETED", kube_pod(f"p{k - 1}", 1))
        elif k % 4 == 3:
            cache.assume("team-a", f"x{k}", f"u{k}", node, min(gpus, 2))
        else:
            cache.apply(Kind.PODS, "ADDED", kube_pod(f"p{k}", gpus % 3, node=node))
        if k == 5:
            cache.apply(Kind.NODES, "MODIFIED", {**nodes[0], "spec": {"unschedulable": True}})
        check()


def test_rejection_counts_per_category_match_the_rejected_nodes() -> None:
    nodes = [
        kube_node("a1", "A100", 8),
        kube_node("a2", "A100", 8),  # 7 of 8 in use below: 1 free
        kube_node("a3", "A100", 8),  # 7 of 8 in use: same class and free count as a2, one verdict
        kube_node("a4", "A100", 1),  # smaller than one replica
        kube_node("v1", "V100", 4),  # wrong type
        kube_node("v2", "V100", 4),
        kube_node("c1", "A100", 8, unschedulable=True),  # cordoned: a reason naming the node
        kube_node("c2", "A100", 8, unschedulable=True),
        kube_node("cpu", "", 0),  # no GPUs
    ]
    pods = [kube_pod("busy-2", 7, node="a2"), kube_pod("busy-3", 7, node="a3")]
    cache = fed_cache(nodes, pods)
    app = create_app(Settings(), cache, FakeOracle())
    names = ["a1", "a2", "a3", "a4", "v1", "v2", "c1", "c2", "cpu", "ghost"]
    before = {c: _rejections(c) for c in CATEGORIES}
    status, _, reply = call(app, "/filter", [pod_body(kube_pod("p", 2, gpu_type="A100"), names)])
    out = orjson.loads(reply)
    assert (status, out["NodeNames"]) == (200, ["a1"])
    categories = {c: _rejections(c) - before[c] for c in CATEGORIES if _rejections(c) > before[c]}
    # a2, a3: 1 free < 2; a4: 1 GPU in total; v1, v2: wrong type; c1, c2: cordoned; cpu: no GPUs;
    # ghost: not in the cache
    assert categories == {
        "insufficient_free_gpus": 2,
        "node_too_small": 1,
        "gpu_type": 2,
        "cordoned": 2,
        "no_gpus": 1,
        "unknown_node": 1,
    }
    failed, unresolvable = out["FailedNodes"], out["FailedAndUnresolvableNodes"]
    assert sum(categories.values()) == len(failed) + len(unresolvable) == 9
    assert failed["c2"] == "perfsched: node c2 is cordoned (unschedulable)"
    assert list(failed) == ["a2", "a3", "c1", "c2", "ghost"]  # request order
    assert list(unresolvable) == ["a4", "v1", "v2", "cpu"]


CATEGORIES = ["insufficient_free_gpus", "node_too_small", "gpu_type", "cordoned", "no_gpus", "unknown_node"]


def _rejections(category: str) -> float:
    value = metrics.REGISTRY.get_sample_value(
        "perfsched_extender_filter_rejections_total", {"reason": category}
    )
    return value or 0.0


def test_node_keys_follow_every_change_the_cache_sees() -> None:
    """The extender's per-node class keys change exactly when the cache says a node changed."""
    from scheduler.extender.nodes import FREE_MASK, NodeIndex

    cache = fed_cache([kube_node("a", "A100", 8), kube_node("b", "A100", 8), kube_node("c", "V100", 4)])
    index = NodeIndex(cache)
    assert index.key["a"] == index.key["b"] != index.key["c"]  # a and b are alike: one class
    cache.apply(Kind.PODS, "ADDED", kube_pod("p", 3, node="a"))
    assert index.key["a"] & FREE_MASK == 5 and index.key["b"] & FREE_MASK == 8
    cache.assume("team-a", "q", "uid-q", "b", 2)  # a bind's reservation counts at once
    assert index.key["b"] & FREE_MASK == 6
    cache.apply(Kind.NODES, "MODIFIED", kube_node("b", "A100", 8, unschedulable=True))
    assert index.key["b"] >> 16 != index.key["a"] >> 16  # cordoned: another class
    cache.apply(Kind.NODES, "DELETED", kube_node("c", "V100", 4))
    assert "c" not in index.key
    cache.replace(Kind.NODES, [kube_node("d", "A100", 8)], "2")  # a relist replaces every node
    assert set(index.key) == {"d"}
    assert index.key["d"] >> 16 == 0  # the class of a and b: class numbers are never reused


def test_prioritize_after_filter_sees_a_node_that_changed_between_the_two_calls() -> None:
    """Prioritize reuses the keys of filter's passing nodes only while no node changed since."""
    nodes = [kube_node("a", "V100", 8), kube_node("b", "V100", 8), kube_node("c", "V100", 8)]
    cache = fed_cache(nodes, [kube_pod("busy", 2, node="a")])
    app = create_app(Settings(extender_weight_throughput=0.0), cache, FakeOracle())
    me = kube_pod("p", 4)
    status, _, reply = call(app, "/filter", [pod_body(me, ["a", "b", "c"])])
    assert status == 200
    passed = orjson.loads(reply)["NodeNames"]
    assert passed == ["a", "b", "c"]
    # packing: a has 6 free -> 2 left of 8 after the pod -> 10 x 6/8 = 7.5 -> 8; b and c: 4 left -> 5
    assert scores(app, me, passed) == {"a": 8, "b": 5, "c": 5}
    call(app, "/filter", [pod_body(me, ["a", "b", "c"])])
    cache.apply(Kind.PODS, "ADDED", kube_pod("late", 4, node="b"))  # bound between filter and prioritize
    assert scores(app, me, passed) == {"a": 8, "b": 10, "c": 5}
    # a list of other names (or another order) is looked up afresh
    assert scores(app, me, ["c", "b"]) == {"c": 5, "b": 10}
