"""A gang's plan is checked against the pods the API server shows on its nodes before filter passes them:
a pod bound around the extender (``nodeName``, another scheduler) that the watch has not delivered yet
must not split a gang."""

from __future__ import annotations

import copy
import threading
from collections import Counter
from collections.abc import Sequence
from typing import Any

from fastapi.testclient import TestClient

from scheduler import metrics
from scheduler.core.errors import TemporaryError
from scheduler.extender import create_app
from scheduler.extender.gang import COMMIT_S
from scheduler.k8s.cache import ClusterCache, Kind
from scheduler.settings import Settings
from tests.extender.conftest import FakeBinder, FakeOracle
from tests.extender.kube import fed_cache, kube_node, kube_pod, kube_tj


class FakeApiServer:
    """The API server's pods (the truth the watch lags behind): ``pods_on`` answers a read of one node's
    unfinished pods and counts the reads; ``error`` makes every read fail."""

    def __init__(self, pods: Sequence[dict[str, Any]] = ()) -> None:
        self.pods: dict[str, dict[str, Any]] = {p["metadata"]["name"]: p for p in pods}
        self.reads: Counter[str] = Counter()
        self.versions: list[str] = []
        self.error: Exception | None = None
        self._lock = threading.Lock()

    def bind(self, pod: dict[str, Any], node: str) -> dict[str, Any]:
        bound = copy.deepcopy(pod)
        bound["spec"]["nodeName"] = node
        bound["status"]["phase"] = "Running"
        self.pods[pod["metadata"]["name"]] = bound
        return bound

    def pods_on(self, node: str, not_older_than: str = "") -> list[dict[str, Any]]:
        with self._lock:
            self.reads[node] += 1
            self.versions.append(not_older_than)
        if self.error is not None:
            raise self.error
        return [
            p
            for p in self.pods.values()
            if p["spec"].get("nodeName") == node and p["status"]["phase"] not in ("Succeeded", "Failed")
        ]


def client(cache: ClusterCache, api: FakeApiServer, binder: FakeBinder | None = None) -> TestClient:
    return TestClient(create_app(Settings(), cache, FakeOracle(), binder=binder, reader=api))


def checks(result: str) -> float:
    value = metrics.REGISTRY.get_sample_value("perfsched_extender_plan_checks_total", {"result": result})
    return value or 0.0


def gang(n: int = 4, gpus: int = 2) -> list[dict[str, Any]]:
    return [kube_pod(f"tj-w{i}", gpus, job="tj", replica=i, gpu_type="A100", world_size=n) for i in range(n)]


def two_nodes() -> list[dict[str, Any]]:
    return [kube_node("a100-0", "A100", 8), kube_node("a100-1", "A100", 8)]


NAMES = ["a100-0", "a100-1"]
#: bound to a100-0 around the extender (by ``nodeName``): the API server has it, the watch not yet
FILLER = kube_pod("filler", 2, node="a100-0", namespace="other")


def test_a_pod_the_watch_has_not_delivered_does_not_split_the_gang() -> None:
    """The e2e race: the extender's cache shows a100-0 empty, the API server shows a filler on it. The
    gang (4 x 2 GPUs) must be placed whole on a100-1: planned on a100-0 from the cache alone, its first
    replica would bind there and, once the watch delivers the filler, the rest would go elsewhere."""
    pods = gang()
    cache = fed_cache(two_nodes(), pods, [kube_tj("tj", replicas=4, gpus=2)])
    api = FakeApiServer([FILLER, *pods])
    binder = FakeBinder()
    c = client(cache, api, binder)
    fresh, replanned = checks("fresh"), checks("replanned")
    placed: dict[str, str] = {}
    for i, pod in enumerate(pods):
        body = c.post("/filter", json={"Pod": pod, "NodeNames": NAMES}).json()
        assert body["Error"] == "" and len(body["NodeNames"]) == 1, body
        node = body["NodeNames"][0]
        name = pod["metadata"]["name"]
        r = c.post(
            "/bind",
            json={"PodName": name, "PodNamespace": "team-a", "PodUID": f"uid-team-a-{name}", "Node": node},
        )
        assert r.json()["Error"] == ""
        placed[name] = node
        if i == 0:  # the watch delivers the filler after the first replica is bound
            cache.apply(Kind.PODS, "ADDED", FILLER)
    assert set(placed.values()) == {"a100-1"}, placed
    assert binder.binds and {b[3] for b in binder.binds} == {"a100-1"}
    # the first replica read both nodes (the stale plan's, then the new one's); the others, placed next to
    # a bound replica on a node already read, read nothing
    assert dict(api.reads) == {"a100-0": 1, "a100-1": 1}
    assert (checks("fresh"), checks("replanned")) == (fresh, replanned + 1)
    # read at least as new as the filtered pod: whatever was bound before kube-scheduler saw it
    assert api.versions == [pods[0]["metadata"]["resourceVersion"]] * 2


def test_later_replicas_take_the_checked_plan_then_learn_bound_ones_from_a_read() -> None:
    """kube-scheduler binds (no bind verb): the next replicas' filter comes before the watch shows the first
    bound. Within ``COMMIT_S`` of the checked plan they take it without a read (the gang is committed to
    it); past that, a replica's read shows the first one bound and the gang follows it."""
    t = [0.0]
    pods = gang()
    cache = fed_cache(two_nodes(), pods, [kube_tj("tj", replicas=4, gpus=2)], clock=lambda: t[0])
    api = FakeApiServer([FILLER, *pods])
    c = client(cache, api)
    assert c.post("/filter", json={"Pod": pods[0], "NodeNames": NAMES}).json()["NodeNames"] == ["a100-1"]
    api.bind(pods[0], "a100-1")  # kube-scheduler's Binding; the extender's watch has not shown it
    t[0] = 1.0
    assert c.post("/filter", json={"Pod": pods[1], "NodeNames": NAMES}).json()["NodeNames"] == ["a100-1"]
    assert dict(api.reads) == {"a100-0": 1, "a100-1": 1}
    t[0] = 1.0 + COMMIT_S
    assert c.post("/filter", json={"Pod": pods[2], "NodeNames": NAMES}).json()["NodeNames"] == ["a100-1"]
    assert api.reads["a100-1"] == 2
    assert cache.placed_node(cache.pod("team-a", "tj-w0")) == "a100-1"  # type: ignore[arg-type]


def test_the_pod_a_checked_plan_was_passed_to_reads_again_when_retried() -> None:
    """A retry of the pod the plan was passed to (its attempt failed after filter) is not committed: the
    nodes may have filled since, so they are read again."""
    pods = gang()
    cache = fed_cache(two_nodes(), pods, [kube_tj("tj", replicas=4, gpus=2)])
    api = FakeApiServer(pods)
    c = client(cache, api)
    assert c.post("/filter", json={"Pod": pods[0], "NodeNames": NAMES}).json()["NodeNames"] == ["a100-0"]
    api.pods["filler"] = FILLER  # bound around the extender meanwhile
    assert c.post("/filter", json={"Pod": pods[0], "NodeNames": NAMES}).json()["NodeNames"] == ["a100-1"]
    assert dict(api.reads) == {"a100-0": 2, "a100-1": 1}


def test_a_plan_the_api_server_confirms_is_read_once_and_passed() -> None:
    pods = gang()
    cache = fed_cache(two_nodes(), pods, [kube_tj("tj", replicas=4, gpus=2)])
    api = FakeApiServer(pods)
    binder = FakeBinder()
    c = client(cache, api, binder)
    fresh = checks("fresh")
    body = c.post("/filter", json={"Pod": pods[0], "NodeNames": NAMES}).json()
    assert body["NodeNames"] == ["a100-0"]
    assert checks("fresh") == fresh + 1 and dict(api.reads) == {"a100-0": 1}
    c.post(
        "/bind",
        json={"PodName": "tj-w0", "PodNamespace": "team-a", "PodUID": "uid-team-a-tj-w0", "Node": "a100-0"},
    )
    body = c.post("/filter", json={"Pod": pods[1], "NodeNames": NAMES}).json()
    assert body["NodeNames"] == ["a100-0"]
    assert dict(api.reads) == {"a100-0": 1}  # a replica is placed on a node already read: no read


def test_a_failed_read_refuses_the_plan_for_a_retry() -> None:
    pods = gang()
    cache = fed_cache(two_nodes(), pods, [kube_tj("tj", replicas=4, gpus=2)])
    api = FakeApiServer(pods)
    api.error = TemporaryError("API server unreachable")
    c = client(cache, api)
    errors = checks("error")
    body = c.post("/filter", json={"Pod": pods[0], "NodeNames": NAMES}).json()
    assert body["NodeNames"] == [] and body["Error"] == ""
    assert body["FailedNodes"]["a100-0"] == (
        "perfsched: gang team-a/tj: its placement could not be checked against the API server "
        "(API server unreachable); retry"
    )
    assert "a100-0" not in body["FailedAndUnresolvableNodes"]
    assert checks("error") == errors + 1
    api.error = None  # the next attempt passes
    assert c.post("/filter", json={"Pod": pods[0], "NodeNames": NAMES}).json()["NodeNames"] == ["a100-0"]


def test_a_plan_that_moves_on_every_read_is_refused_after_three() -> None:
    """Every node holds a pod the watch has not shown: each read moves the plan to a node not read yet;
    after three reads the gang waits (resolvable) rather than pass a node no read covered."""
    names = [f"a100-{i}" for i in range(4)]
    pods = gang(2, 4)
    cache = fed_cache([kube_node(n, "A100", 8) for n in names], pods, [kube_tj("tj", replicas=2, gpus=4)])
    hidden = [kube_pod(f"x{i}", 1, node=n, namespace="other") for i, n in enumerate(names)]
    api = FakeApiServer([*hidden, *pods])
    body = client(cache, api).post("/filter", json={"Pod": pods[0], "NodeNames": names}).json()
    assert body["NodeNames"] == []
    assert dict(api.reads) == {"a100-0": 1, "a100-1": 1, "a100-2": 1}
    assert body["FailedNodes"]["a100-3"] == (
        "perfsched: gang team-a/tj: its placement moved on each of 3 reads of the API server; retry"
    )


def test_lone_pods_are_never_read() -> None:
    cache = fed_cache(two_nodes(), [], [])
    api = FakeApiServer([FILLER])
    pod = kube_pod("solo", 2)
    body = client(cache, api).post("/filter", json={"Pod": pod, "NodeNames": NAMES}).json()
    assert body["NodeNames"] == NAMES and not api.reads
