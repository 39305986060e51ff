"""The watch-fed cache keeps free GPUs right through events, binds, dropped watches and 410 Gone."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.k8s.cache import ClusterCache, Kind, WatchGone
from scheduler.k8s.codec import decode_pod as decode
from scheduler.k8s.errors import ApiUnavailable
from tests.extender.kube import fed_cache, kube_node, kube_pod, kube_tj


class FakeSource:
    """Scripted ``ListWatchSource``: each ``watch`` call plays the next script (events or an exception)."""

    def __init__(self, lists: dict[Kind, list[tuple[list[dict[str, Any]], str]]], scripts: list[Any]) -> None:
        self.lists = lists
        self.scripts = scripts
        self.list_calls: list[Kind] = []
        self.watch_calls: list[tuple[Kind, str]] = []
        self.stop = threading.Event()

    def list(self, kind: Kind) -> tuple[list[dict[str, Any]], str]:
        self.list_calls.append(kind)
        queue = self.lists[kind]
        return queue.pop(0) if len(queue) > 1 else queue[0]

    def watch(self, kind: Kind, resource_version: str, timeout_seconds: int) -> Iterator[dict[str, Any]]:
        self.watch_calls.append((kind, resource_version))
        if not self.scripts:
            self.stop.set()
            return
        script = self.scripts.pop(0)
        if isinstance(script, Exception):
            raise script
        yield from script


def test_free_gpus_follow_pod_events() -> None:
    cache = fed_cache([kube_node("a", "A100", 8), kube_node("b", "V100", 4)])
    assert cache.free == {"a": 8, "b": 4}
    # a pod bound but not yet Running already holds its GPUs: 8 - 3 = 5
    cache.apply(Kind.PODS, "ADDED", kube_pod("p1", 3, node="a", phase="Pending"))
    assert cache.free["a"] == 5
    # an unbound pod holds nothing
    cache.apply(Kind.PODS, "ADDED", kube_pod("p2", 4))
    assert cache.free == {"a": 5, "b": 4}
    # p2 bound to b: 4 - 4 = 0
    cache.apply(Kind.PODS, "MODIFIED", kube_pod("p2", 4, node="b"))
    assert cache.free["b"] == 0
    # p1 finished: its GPUs come back even before the pod is deleted
    cache.apply(Kind.PODS, "MODIFIED", kube_pod("p1", 3, node="a", phase="Succeeded"))
    assert cache.free["a"] == 8
    cache.apply(Kind.PODS, "DELETED", kube_pod("p2", 4, node="b"))
    assert cache.free["b"] == 4


def test_node_events_and_cordon() -> None:
    cache = fed_cache([kube_node("a", "A100", 8)], [kube_pod("p", 2, node="a")])
    cache.apply(Kind.NODES, "ADDED", kube_node("c", "T4", 1))
    assert cache.free["c"] == 1 and cache.nodes["c"].gpu_type == "T4"
    cache.apply(Kind.NODES, "MODIFIED", kube_node("a", "A100", 8, unschedulable=True))
    assert cache.free["a"] == 0  # cordoned: nothing to give
    cache.apply(Kind.NODES, "DELETED", kube_node("c", "T4", 1))
    assert "c" not in cache.nodes and "c" not in cache.free


def test_reservation_counts_until_the_watch_shows_the_binding() -> None:
    now = [0.0]
    cache = fed_cache([kube_node("a", "A100", 8)], [kube_pod("p", 4)], assume_ttl_s=30, clock=lambda: now[0])
    assert cache.reserve("team-a", "p", "uid-team-a-p", "a", 4) is None
    assert cache.free["a"] == 4  # 8 - 4 reserved
    # a second pod asking 6 cannot have the node: 4 free
    assert cache.reserve("team-a", "q", "uid-q", "a", 6) == (
        "perfsched: node a no longer fits: needs 6 nvidia.com/gpu, 4 free"
    )
    # the watch shows p bound: the reservation is replaced by the pod itself, never counted twice
    cache.apply(Kind.PODS, "MODIFIED", kube_pod("p", 4, node="a", phase="Pending"))
    assert cache.free["a"] == 4
    assert cache.assumed_node("team-a", "p") is None


def test_failed_bind_releases_and_ttl_expires() -> None:
    now = [0.0]
    cache = fed_cache([kube_node("a", "A100", 8)], assume_ttl_s=30, clock=lambda: now[0])
    assert cache.reserve("team-a", "p", "u", "a", 8) is None
    assert cache.free["a"] == 0
    cache.forget("team-a", "p")
    assert cache.free["a"] == 8
    assert cache.reserve("team-a", "q", "u2", "a", 2) is None
    now[0] = 31.0  # the watch never showed q bound within the TTL: released
    cache.expire_assumed()
    assert cache.free["a"] == 8


def test_reserving_again_for_the_same_pod_does_not_double_count() -> None:
    cache = fed_cache([kube_node("a", "A100", 8)])
    assert cache.reserve("ns", "p", "u", "a", 8) is None
    assert cache.reserve("ns", "p", "u", "a", 8) is None  # bind retried by kube-scheduler
    assert cache.free["a"] == 0


def test_a_pod_a_direct_read_shows_bound_counts_until_the_watch_shows_it() -> None:
    """``note_bound``: a pod bound around the extender that the watch has not delivered is counted from the
    read on, once (never again when the watch shows it), and forgotten when it goes or its TTL passes."""
    now = [0.0]
    cache = fed_cache([kube_node("a", "A100", 8)], [kube_pod("q", 2)], assume_ttl_s=30, clock=lambda: now[0])
    filler = kube_pod("filler", 2, node="a", namespace="other")
    assert cache.note_bound(decode(filler)) and cache.free["a"] == 6
    assert not cache.note_bound(decode(filler)) and cache.free["a"] == 6  # read again: counted once
    cache.apply(Kind.PODS, "ADDED", filler)
    assert cache.free["a"] == 6 and cache.assumed_node("other", "filler") is None
    assert not cache.note_bound(decode(filler))  # the watch counts it now
    # a known pending pod the read shows bound: counted where the read saw it, and placed there
    q = decode(kube_pod("q", 2, node="a"))
    assert cache.note_bound(q) and cache.free["a"] == 4
    assert cache.placed_node(cache.pod("team-a", "q")) == "a"  # type: ignore[arg-type]
    cache.apply(Kind.PODS, "DELETED", kube_pod("q", 2, node="a"))
    assert cache.free["a"] == 6
    # finished, GPU-less or on unknown nodes: nothing to count; a pod the watch never shows expires
    assert not cache.note_bound(decode(kube_pod("done", 2, node="a", phase="Succeeded")))
    assert not cache.note_bound(decode(kube_pod("cpu", 0, node="a")))
    assert not cache.note_bound(decode(kube_pod("far", 2, node="elsewhere")))
    assert cache.note_bound(decode(kube_pod("ghost", 2, node="a"))) and cache.free["a"] == 4
    now[0] = 31.0
    cache.expire_assumed()
    assert cache.free["a"] == 6


def test_list_watch_resumes_after_a_dropped_watch_and_relists_after_410() -> None:
    nodes1 = [kube_node("a", "A100", 8)]
    nodes2 = [kube_node("a", "A100", 8), kube_node("b", "V100", 4)]
    ev_added = {"type": "ADDED", "object": kube_node("c", "T4", 1)}
    ev_added["object"]["metadata"]["resourceVersion"] = "205"
    bookmark = {"type": "BOOKMARK", "object": {"kind": "Node", "metadata": {"resourceVersion": "210"}}}
    source = FakeSource(
        {Kind.NODES: [(nodes1, "200"), (nodes2, "300")]},
        [
            [ev_added, bookmark],  # then the server ends the watch normally
            ApiUnavailable("dropped"),  # a dropped connection: resume from 210
            [{"type": "ERROR", "object": {"kind": "Status", "code": 410, "message": "too old"}}],
            WatchGone("expired"),  # 410 as an HTTP status also relists
        ],
    )
    cache = ClusterCache(source, retry_backoff_s=0.0)
    cache.run_kind(Kind.NODES, source.stop)
    # resourceVersions used: list 200 -> watch 200; ended -> resume 210 (bookmark); dropped -> resume 210;
    # 410 -> relist (300) -> watch 300; WatchGone -> relist (300 again) -> watch 300; scripts done
    assert source.watch_calls == [
        (Kind.NODES, "200"),
        (Kind.NODES, "210"),
        (Kind.NODES, "210"),
        (Kind.NODES, "300"),
        (Kind.NODES, "300"),
    ]
    assert source.list_calls == [Kind.NODES] * 3
    # ended twice: the first script, and the last watch the fake ends when its scripts run out
    assert cache.watch_restarts == {("nodes", "ended"): 2, ("nodes", "error"): 1, ("nodes", "gone"): 2}
    # after the relist the cache holds exactly the second list: c (seen only by the old watch) is gone
    assert sorted(cache.nodes) == ["a", "b"]


def test_synced_only_after_every_kind_is_listed() -> None:
    cache = ClusterCache()
    assert not cache.synced and cache.unsynced() == [
        "nodes", "pods", "trainingjobs", "deviceclasses", "resourceslices", "resourceclaims",
        "devicetaintrules",
    ]  # fmt: skip
    for kind in Kind:
        if kind is Kind.TRAININGJOBS:
            continue
        cache.replace(kind, [], "1")
    assert cache.unsynced() == ["trainingjobs"]
    cache.replace(Kind.TRAININGJOBS, [kube_tj("tj", replicas=2, gpus=2)], "1")
    assert cache.synced
    assert cache.jobs["team-a/tj"].job is not None
    assert cache.jobs["team-a/tj"].job.gpus_per_replica == 2  # type: ignore[union-attr]


def test_undecodable_objects_are_skipped_not_fatal() -> None:
    bad = kube_node("bad", "A100", 8)
    bad["status"]["allocatable"]["nvidia.com/gpu"] = "lots"
    cache = fed_cache([bad, kube_node("ok", "T4", 1)])
    assert sorted(cache.nodes) == ["ok"] and cache.decode_errors == 1


def test_gang_members_are_grouped_by_job_and_generation() -> None:
    pods = [
        kube_pod("tj-1-w1", 2, job="tj", replica=1, generation="1"),
        kube_pod("tj-1-w0", 2, job="tj", replica=0, generation="1", node="a"),
        kube_pod("tj-2-w0", 2, job="tj", replica=0, generation="2"),
    ]
    cache = fed_cache([kube_node("a")], pods)
    assert [p.name for p in cache.gang("team-a/tj", "1")] == ["tj-1-w0", "tj-1-w1"]
    assert [p.name for p in cache.gang("team-a/tj", "2")] == ["tj-2-w0"]


_events = st.lists(
    st.tuples(
        st.sampled_from(["p0", "p1", "p2", "p3", "p4"]),
        st.sampled_from(["ADDED", "MODIFIED", "DELETED", "RESERVE", "FORGET"]),
        st.sampled_from(["", "a", "b"]),
        st.integers(1, 4),
        st.sampled_from(["Pending", "Running", "Succeeded"]),
    ),
    max_size=40,
)


@settings(max_examples=60, deadline=None)
@given(_events)
def test_free_gpus_always_equal_a_recount_from_scratch(events: list[tuple[str, str, str, int, str]]) -> None:
    """Invariant: incremental free GPUs == allocatable - (bound live pods + reservations not yet seen)."""
    nodes = [kube_node("a", "A100", 8), kube_node("b", "V100", 4)]
    cache = fed_cache(nodes)
    live: dict[str, dict[str, Any]] = {}
    reserved: dict[str, tuple[str, int]] = {}
    for name, kind, node, gpus, phase in events:
        if kind == "RESERVE":
            unbound = live.get(name, {}).get("spec", {}).get("nodeName") in (None, "")
            if node and unbound and cache.reserve("team-a", name, "u", node, gpus) is None:
                reserved[name] = (node, gpus)
            continue
        if kind == "FORGET":
            cache.forget("team-a", name)
            reserved.pop(name, None)
            continue
        obj = kube_pod(name, gpus, node=node, phase=phase)
        cache.apply(Kind.PODS, kind, obj)
        if kind == "DELETED":
            live.pop(name, None)
            reserved.pop(name, None)
        else:
            live[name] = obj
            if node or phase == "Succeeded":
                reserved.pop(name, None)
    used = {"a": 0, "b": 0}
    for obj in live.values():
        n = obj["spec"].get("nodeName")
        if n and obj["status"]["phase"] != "Succeeded":
            used[n] += int(obj["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"])
    for n, g in reserved.values():
        used[n] += g
    assert cache.free == {"a": max(0, 8 - used["a"]), "b": max(0, 4 - used["b"])}


def test_an_api_outage_keeps_the_cache_logs_once_and_resumes_the_watch(caplog: Any) -> None:
    import logging

    from scheduler.k8s.errors import ApiHealth

    down = ApiUnavailable("watch nodes: API server unreachable (MaxRetryError: connection refused)")
    ev = {"type": "ADDED", "object": kube_node("b", "V100", 4)}
    ev["object"]["metadata"]["resourceVersion"] = "120"
    source = FakeSource({Kind.NODES: [([kube_node("a", "A100", 8)], "100")]}, [down] * 6 + [[ev]])
    seen_during: list[tuple[bool, list[str]]] = []
    watch = source.watch

    def watching(kind: Kind, rv: str, timeout: int) -> Iterator[dict[str, Any]]:
        seen_during.append((cache.api_available(), sorted(cache.nodes)))
        return watch(kind, rv, timeout)

    source.watch = watching  # type: ignore[method-assign]
    counted: list[float] = []
    cache = ClusterCache(source, retry_backoff_s=0.001, health=ApiHealth("extender", count=counted.append))
    caplog.set_level(logging.DEBUG)
    cache.run_kind(Kind.NODES, source.stop)
    # during the outage the cache said so and kept serving what it had
    assert seen_during[2] == (False, ["a"])
    # after it: resumed from the last resourceVersion (no relist needed), with the new event applied
    assert source.list_calls == [Kind.NODES]
    assert [rv for _, rv in source.watch_calls] == ["100"] * 7 + ["120"]
    assert sorted(cache.nodes) == ["a", "b"] and cache.api_available()
    assert cache.health.outages == 1 and sum(counted) > 0
    messages = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO]
    assert sum("API server unavailable" in m for m in messages) == 1
    assert not any("watch of nodes failed" in m for m in messages)  # not once per retry


def test_a_planned_unbound_pod_holds_its_gpus_until_it_binds_goes_or_its_hold_ends() -> None:
    t = [0.0]
    cache = fed_cache([kube_node("a", "A100", 8), kube_node("b", "A100", 8)], clock=lambda: t[0])
    gang = ("team-a/tj", "1")
    p0 = kube_pod("tj-w0", 2, job="tj", replica=0, planned="a", uid="u0")
    cache.apply(Kind.PODS, "ADDED", p0)
    cache.apply(Kind.PODS, "ADDED", kube_pod("tj-w1", 2, job="tj", replica=1, planned="a", uid="u1"))
    assert cache.free == {"a": 4, "b": 8}  # held from every other pod
    assert cache.free_for("a", gang) == 8 and cache.holds_of(gang) == {"a": 4}
    assert cache.free_for("a", ("team-a/other", "1")) == 4
    # bound elsewhere than planned: it holds nothing on a, and is counted on b
    cache.apply(
        Kind.PODS, "MODIFIED", kube_pod("tj-w0", 2, job="tj", replica=0, planned="a", node="b", uid="u0")
    )
    assert cache.free == {"a": 6, "b": 6} and cache.holds_of(gang) == {"a": 2}
    # an assumed pod (this extender's bind in flight) is counted where it is assumed, not held
    assert cache.reserve("team-a", "tj-w1", "u1", "b", 2) is None
    assert cache.free == {"a": 8, "b": 4} and cache.holds_of(gang) == {}
    cache.forget("team-a", "tj-w1")
    assert cache.free == {"a": 6, "b": 6}
    # an update of the pod keeps the hold's end; past it, nothing is held
    cache.apply(Kind.PODS, "MODIFIED", kube_pod("tj-w1", 2, job="tj", replica=1, planned="a", uid="u1"))
    t[0] = 30.5
    cache.expire_assumed()
    assert cache.free == {"a": 8, "b": 6} and cache.holds_of(gang) == {}
    cache.apply(Kind.PODS, "MODIFIED", kube_pod("tj-w1", 2, job="tj", replica=1, planned="a", uid="u1"))
    assert cache.free["a"] == 8
    # a deleted pod holds nothing
    cache.apply(Kind.PODS, "ADDED", kube_pod("solo", 3, planned="b", uid="u2"))
    assert cache.free["b"] == 3
    cache.apply(Kind.PODS, "DELETED", kube_pod("solo", 3, planned="b", uid="u2"))
    assert cache.free["b"] == 6


def test_a_started_gang_holds_its_planned_gpus_before_its_pods_exist() -> None:
    """The operator writes a START's allocation into the status and creates the pods once pods exiting on
    its nodes have gone: from the status on, the planned GPUs are held for the gang (less what its pods
    that exist hold themselves), until all its pods exist, the job ends, or the hold's 30 s pass."""
    t = [0.0]
    tj = kube_tj("tj", replicas=2, gpus=2, alloc_replicas=2, gpu_type="A100", alloc_nodes={"a": 2})
    cache = fed_cache([kube_node("a", "A100", 8), kube_node("b", "A100", 8)], [], [tj], clock=lambda: t[0])
    gang = ("team-a/tj", "1")
    assert cache.free == {"a": 4, "b": 8} and cache.holds_of(gang) == {"a": 4}
    assert cache.free_for("a", gang) == 8
    cache.apply(Kind.PODS, "ADDED", kube_pod("tj-w0", 2, job="tj", replica=0, planned="a", uid="u0"))
    assert cache.free["a"] == 4 and cache.holds_of(gang) == {"a": 4}  # 2 by the pod, 2 by the plan
    cache.apply(Kind.PODS, "ADDED", kube_pod("tj-w1", 2, job="tj", replica=1, planned="a", uid="u1"))
    cache.apply(Kind.PODS, "MODIFIED", kube_pod("tj-w0", 2, job="tj", replica=0, planned="a", node="a"))
    cache.apply(Kind.PODS, "MODIFIED", kube_pod("tj-w1", 2, job="tj", replica=1, planned="a", node="a"))
    assert cache.free["a"] == 4 and cache.holds_of(gang) == {}  # bound: counted, not held
    # a job whose pods never come holds for 30 s only; a finished job holds nothing
    other = kube_tj("o", replicas=1, gpus=4, alloc_replicas=1, gpu_type="A100", alloc_nodes={"b": 1})
    cache.apply(Kind.TRAININGJOBS, "ADDED", other)
    assert cache.free["b"] == 4
    t[0] = 30.5
    cache.expire_assumed()
    assert cache.free["b"] == 8
    done = kube_tj("d", replicas=1, gpus=4, alloc_replicas=1, gpu_type="A100", alloc_nodes={"b": 1})
    done["status"]["phase"] = "Succeeded"
    cache.apply(Kind.TRAININGJOBS, "ADDED", done)
    assert cache.free["b"] == 8
