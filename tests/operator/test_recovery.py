"""An operator restart (or a new leader) rebuilds everything from the API: nothing is lost or redone.

Also: a gang half-created by a leader that died is completed without duplicates, leftover pods of older
generations are removed, and one job's API failure does not stop the round for the others.
"""

from __future__ import annotations

from scheduler.core.errors import TemporaryError
from tests.operator.conftest import Harness, gpu_node, make_harness, trainingjob


def run_some(h: Harness) -> None:
    h.api.add_node(gpu_node("n1", 8))
    h.api.add_node(gpu_node("n2", 8, "V100"))
    for name in ("a", "b", "c"):
        h.api.add_trainingjob(trainingjob(name))
    op = h.operator()
    op.run_round()
    h.settle_pods()
    h.clock.advance(5)
    op.run_round()
    h.api.report_progress("ml", "a-g1-0", progress=100, checkpoint=50, throughput=10, time=h.clock.now())
    h.clock.advance(5)
    op.run_round()


def test_new_operator_instance_changes_nothing_that_runs() -> None:
    h = make_harness()
    run_some(h)
    before_pods = {k: p["metadata"]["resourceVersion"] for k, p in h.api.pods.items()}
    before_status = {k: h.api.status_of(*k) for k in h.api.trainingjobs}
    calls = len(h.api.calls)
    events = len(h.api.events)
    assert {st["phase"] for st in before_status.values()} == {"Running"}

    fresh = h.operator()  # a restarted process: no memory at all
    rep = fresh.run_round()
    assert rep.actions == {}
    # no pod created or deleted, every status identical, no new event
    assert [c for c in h.api.calls[calls:] if c[0] != "patch_status"] == []
    assert {k: p["metadata"]["resourceVersion"] for k, p in h.api.pods.items()} == before_pods
    assert {k: h.api.status_of(*k) for k in h.api.trainingjobs} == before_status
    assert len(h.api.events) == events


def test_half_created_gang_is_completed_without_duplicates() -> None:
    h = make_harness()
    h.api.add_node(gpu_node("n1", 8))
    h.api.add_trainingjob(trainingjob("bert"))
    # the leader dies after writing the intent and creating the first pod
    real_create = h.api.create_pod
    created: list[str] = []

    def create_once(ns: str, body: dict) -> dict:  # type: ignore[type-arg]
        if created:
            raise TemporaryError("leader killed")
        created.append(body["metadata"]["name"])
        return real_create(ns, body)

    h.api.create_pod = create_once  # type: ignore[method-assign]
    rep = h.operator().run_round()
    assert rep.errors and h.api.status_of("ml", "bert")["phase"] == "Admitted"
    assert [p["metadata"]["name"] for p in h.api.job_pods("ml", "bert")] == ["bert-g1-0"]

    h.api.create_pod = real_create  # type: ignore[method-assign]
    h.operator().run_round()  # the next leader
    names = [p["metadata"]["name"] for p in h.api.job_pods("ml", "bert")]
    assert names == ["bert-g1-0", "bert-g1-1"]
    assert h.api.status_of("ml", "bert")["gangGeneration"] == 1


def test_pods_of_older_generations_are_removed() -> None:
    h = make_harness()
    h.api.add_node(gpu_node("n1", 8))
    h.api.add_trainingjob(trainingjob("bert"))
    op = h.operator()
    op.run_round()
    h.settle_pods()
    # a pod of generation 0 that a dead leader left behind
    stray = dict(h.api.job_pods("ml", "bert")[1])
    stray["metadata"] = {
        **stray["metadata"],
        "name": "bert-g0-1",
        "labels": {**stray["metadata"]["labels"], "perfsched.dev/generation": "0"},
    }
    stray["metadata"].pop("uid")
    h.api.create_pod("ml", stray)
    h.api.bind("ml", "bert-g0-1", "n1")
    h.api.set_pod_phase("ml", "bert-g0-1", "Running")
    op.run_round()
    assert "deletionTimestamp" in h.api.pods[("ml", "bert-g0-1")]["metadata"]
    assert h.api.status_of("ml", "bert")["phase"] == "Running"


def test_api_failure_on_one_job_does_not_stop_the_others() -> None:
    h = make_harness()
    h.api.add_node(gpu_node("n1", 8))
    h.api.add_trainingjob(trainingjob("a"))
    h.api.add_trainingjob(trainingjob("b"))
    h.api.fail_next("patch_trainingjob_status", TemporaryError("etcd timeout"), times=1)
    rep = h.operator().run_round()
    assert len(rep.errors) == 1 and "ml/a" in rep.errors[0]
    assert rep.did("start", "ml/b")
    assert h.api.job_pods("ml", "a") == []  # intent not written -> no pods either
    rep = h.operator().run_round()  # retried next round
    assert [p["metadata"]["name"] for p in h.api.job_pods("ml", "a")] == ["a-g1-0", "a-g1-1"]


def test_job_deleted_mid_run_leaves_others_alone() -> None:
    h = make_harness()
    run_some(h)
    h.api.delete_trainingjob("ml", "a")
    rep = h.operator().run_round()
    assert not rep.errors
    assert h.api.job_pods("ml", "a") == []
    assert h.api.status_of("ml", "b")["phase"] == "Running"
