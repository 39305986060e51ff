"""Bind: creates the Binding, is idempotent and never over-commits a node; bound gang replicas are recorded
in their TrainingJob's placement, whoever bound them."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import anyio
from fastapi.testclient import TestClient

from scheduler import metrics
from scheduler.core.errors import PermanentError
from scheduler.extender.service import ExtenderService
from scheduler.k8s.cache import Kind
from scheduler.settings import Settings
from tests.extender.conftest import FakeBinder
from tests.extender.kube import fed_cache, kube_node, kube_pod, kube_tj


def bind(client: TestClient, pod: str, node: str, uid: str = "", ns: str = "team-a") -> str:
    r = client.post(
        "/bind", json={"PodName": pod, "PodNamespace": ns, "PodUID": uid or f"uid-{ns}-{pod}", "Node": node}
    )
    assert r.status_code == 200
    return str(r.json()["Error"])


def test_bind_creates_the_binding_and_reserves_the_gpus(
    client_for: Callable[..., TestClient], binder: FakeBinder
) -> None:
    cache = fed_cache(
        [kube_node("n1", "A100", 8)], [kube_pod("tj-w0", 2, job="tj", replica=0)], [kube_tj("tj")]
    )
    client = client_for(cache)
    assert bind(client, "tj-w0", "n1") == ""
    assert binder.binds == [("team-a", "tj-w0", "uid-team-a-tj-w0", "n1")]
    assert cache.free["n1"] == 6  # reserved until the watch shows the pod bound: 8 - 2


def test_binding_again_to_the_same_node_succeeds(
    client_for: Callable[..., TestClient], binder: FakeBinder
) -> None:
    cache = fed_cache([kube_node("n1", "A100", 8)], [kube_pod("p", 2, node="n1")])
    client = client_for(cache)
    assert bind(client, "p", "n1") == ""  # already there: success without another API call
    assert binder.binds == []
    assert bind(client, "p", "n2") == "perfsched: pod team-a/p is already bound to n1"


def test_bind_retried_before_the_watch_catches_up_does_not_double_count(
    client_for: Callable[..., TestClient], binder: FakeBinder
) -> None:
    cache = fed_cache([kube_node("n1", "A100", 8)], [kube_pod("p", 8)])
    client = client_for(cache)
    assert bind(client, "p", "n1") == ""
    assert bind(client, "p", "n1") == ""  # kube-scheduler retried: its own reservation is not in the way
    assert cache.free["n1"] == 0


def test_a_failed_bind_releases_its_reservation(
    client_for: Callable[..., TestClient], binder: FakeBinder
) -> None:
    cache = fed_cache([kube_node("n1", "A100", 8)], [kube_pod("p", 8)])
    binder.errors["p"] = PermanentError("pod team-a/p no longer exists")
    client = client_for(cache)
    assert bind(client, "p", "n1") == "perfsched: pod team-a/p no longer exists"
    assert cache.free["n1"] == 8
    binder.errors["p"] = TimeoutError("API server timed out")
    assert bind(client, "p", "n1") == "perfsched: binding team-a/p to n1 failed: API server timed out"
    assert cache.free["n1"] == 8


def test_bind_refuses_a_node_that_no_longer_fits(
    client_for: Callable[..., TestClient], binder: FakeBinder
) -> None:
    cache = fed_cache([kube_node("n1", "A100", 8)], [kube_pod("p", 6), kube_pod("q", 6)])
    client = client_for(cache)
    assert bind(client, "p", "n1") == ""
    # q was filtered when n1 had 8 free; since then p took 6: 8 - 6 = 2 < 6
    assert bind(client, "q", "n1") == "perfsched: node n1 no longer fits: needs 6 nvidia.com/gpu, 2 free"
    assert [b[1] for b in binder.binds] == ["p"]


def test_concurrent_binds_never_over_commit(
    client_for: Callable[..., TestClient], binder: FakeBinder
) -> None:
    pods = [kube_pod(f"p{i}", 3) for i in range(8)]
    cache = fed_cache([kube_node("n1", "A100", 8)], pods)
    client = client_for(cache)
    errors: list[str] = []

    def go(i: int) -> None:
        errors.append(bind(client, f"p{i}", "n1"))

    threads = [threading.Thread(target=go, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # 8 GPUs / 3 per pod: exactly 2 binds win
    assert sum(1 for e in errors if e == "") == 2 and len(binder.binds) == 2
    assert cache.free["n1"] == 2


def test_stale_cache_entry_with_another_uid_is_not_trusted(
    client_for: Callable[..., TestClient], binder: FakeBinder
) -> None:
    # the cache still shows an old pod "p" bound to n2; the new "p" (another uid) is bound to n1
    cache = fed_cache([kube_node("n1", "A100", 8), kube_node("n2", "A100", 8)], [kube_pod("p", 1, node="n2")])
    client = client_for(cache)
    assert bind(client, "p", "n1", uid="new-uid") == ""
    assert binder.binds == [("team-a", "p", "new-uid", "n1")]


def test_the_watch_confirming_the_bind_replaces_the_reservation(
    client_for: Callable[..., TestClient], binder: FakeBinder
) -> None:
    cache = fed_cache([kube_node("n1", "A100", 8)], [kube_pod("p", 4)])
    assert bind(client_for(cache), "p", "n1") == ""
    cache.apply(Kind.PODS, "MODIFIED", kube_pod("p", 4, node="n1", phase="Pending"))
    assert cache.free["n1"] == 4 and cache.assumed_node("team-a", "p") is None


def test_bound_gang_replicas_are_recorded_in_the_placement_once(
    client_for: Callable[..., TestClient], binder: FakeBinder
) -> None:
    # kube-scheduler (or the extender) bound two replicas; the TrainingJob shows one of them already
    pods = [kube_pod(f"tj-w{r}", 2, job="tj", replica=r, node="n1") for r in range(2)]
    pods.append(kube_pod("tj-w2", 2, job="tj", replica=2))  # not bound yet
    pods.append(kube_pod("solo", 2, node="n1"))  # no TrainingJob: nothing to record
    cache = fed_cache([kube_node("n1", "A100", 8)], pods, [kube_tj("tj", placement={"tj-w0": "n1"})])
    with client_for(cache) as client:
        wait_until(lambda: binder.placements == [("team-a", "tj", {"tj-w1": "n1"})])
        time.sleep(0.6)  # another round: a record the watch has not shown yet is not sent again
        assert binder.placements == [("team-a", "tj", {"tj-w1": "n1"})]
        # the third replica binds and the watch shows the first record: only the new one is sent
        cache.apply(Kind.PODS, "MODIFIED", kube_pod("tj-w2", 2, job="tj", replica=2, node="n1"))
        cache.apply(Kind.TRAININGJOBS, "MODIFIED", kube_tj("tj", placement={"tj-w0": "n1", "tj-w1": "n1"}))
        wait_until(lambda: len(binder.placements) == 2)
        assert binder.placements[1] == ("team-a", "tj", {"tj-w2": "n1"})
        assert client.get("/healthz").status_code == 200


def test_a_failed_placement_record_is_counted_and_made_again(
    client_for: Callable[..., TestClient], binder: FakeBinder
) -> None:
    binder.record_error = RuntimeError("status subresource missing")
    pods = [kube_pod("tj-w0", 2, job="tj", replica=0, node="n1")]
    cache = fed_cache([kube_node("n1", "A100", 8)], pods, [kube_tj("tj")])
    before = _errors("placement")
    with client_for(cache):
        wait_until(lambda: _errors("placement") >= before + 2)  # retried on the next round
        binder.record_error = None
        wait_until(lambda: binder.placements == [("team-a", "tj", {"tj-w0": "n1"})])


def test_placements_sent_for_a_deleted_training_job_are_forgotten(binder: FakeBinder) -> None:
    # what was sent and not yet shown is remembered only for TrainingJobs still in the cache: deleting
    # one drops its entries, and a TrainingJob made again under the same name gets its placement recorded
    pods = [kube_pod(f"tj-w{r}", 2, job="tj", replica=r, node="n1") for r in range(2)]
    cache = fed_cache([kube_node("n1", "A100", 8)], pods, [kube_tj("tj")])
    service = ExtenderService(Settings(), cache, None, binder)
    anyio.run(service.record_placements)
    sent = ("team-a", "tj", {"tj-w0": "n1", "tj-w1": "n1"})
    assert binder.placements == [sent]
    anyio.run(service.record_placements)  # the watch has not shown it yet: not sent again
    assert binder.placements == [sent] and len(service._sent) == 2
    cache.apply(Kind.TRAININGJOBS, "DELETED", kube_tj("tj"))
    anyio.run(service.record_placements)
    assert service._sent == {}
    cache.apply(Kind.TRAININGJOBS, "ADDED", kube_tj("tj"))
    anyio.run(service.record_placements)
    assert binder.placements == [sent, sent]


def _errors(verb: str) -> float:
    return metrics.REGISTRY.get_sample_value("perfsched_extender_errors_total", {"verb": verb}) or 0.0


def wait_until(check: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)
