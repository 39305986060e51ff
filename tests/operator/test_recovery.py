"""An operator restart (or a new leader) rebuilds everything from the API: nothing is lost or redone.

Also: a gang half-created by a leader that died is completed without duplicates, leftover pods of older
generations are removed, and one job's API failure does not stop the round for the others. Events follow
the state they describe: a leader killed between writing a transition and sending its Event leaves it to
the next leader, which sends it once; no Event is sent for a change whose write failed.
"""

from __future__ import annotations

from scheduler.core.errors import TemporaryError
from tests.operator.conftest import Harness, ScriptedPolicy, alloc, gpu_node, make_harness, trainingjob


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


# --- events follow the state they describe ----------------------------------------------------------------


def preempted_job(h: Harness) -> ScriptedPolicy:
    """Job ``bert`` ran as generation 1, was preempted and its pods are gone; the policy now starts it."""
    policy = h.policy
    assert isinstance(policy, ScriptedPolicy)
    h.api.add_node(gpu_node("n1", 8))
    h.api.add_trainingjob(trainingjob("bert"))
    policy.want["ml/bert"] = alloc("ml/bert", "A100", 2, n1=2)
    op = h.operator()
    op.run_round()
    h.settle_pods()
    h.api.report_progress("ml", "bert-g1-0", progress=300, checkpoint=200, throughput=20, time=h.clock.now())
    op.run_round()
    policy.want["ml/bert"] = None
    assert op.run_round().did("preempt", "ml/bert")
    h.api.finish_deletions()
    policy.want["ml/bert"] = alloc("ml/bert", "A100", 2, n1=2)
    return policy


def die_after(h: Harness, verb: str, times: int = 1) -> None:
    """The operator process dies right after its ``times``-th successful ``verb`` call (it stops acting)."""
    real = getattr(h.api, verb)
    done = {"n": 0}

    def wrapped(*args: object, **kwargs: object) -> object:
        out = real(*args, **kwargs)
        done["n"] += 1
        if done["n"] >= times:
            h.leader[0] = False
        return out

    setattr(h.api, verb, wrapped)


def reasons(h: Harness, name: str) -> list[str]:
    return [r for _, r, _ in h.api.events_for(name)]


def test_killed_between_the_restart_write_and_its_event_the_next_leader_sends_it() -> None:
    h = make_harness(ScriptedPolicy())
    preempted_job(h)
    die_after(h, "patch_trainingjob_status")
    assert h.operator().run_round().skipped  # wrote the restart, then died: no event, no pod
    st = h.api.status_of("ml", "bert")
    assert (st["phase"], st["reason"], st["restarts"], st["gangGeneration"]) == (
        "Admitted",
        "Restarted",
        1,
        2,
    )
    assert "Restarted" not in reasons(h, "bert") and h.api.job_pods("ml", "bert") == []

    h.api.patch_trainingjob_status = type(h.api).patch_trainingjob_status.__get__(h.api)  # type: ignore[method-assign]
    h.leader[0] = True
    h.operator().run_round()  # the next leader completes the gang and tells the user
    assert [p["metadata"]["name"] for p in h.api.job_pods("ml", "bert")] == ["bert-g2-0", "bert-g2-1"]
    assert reasons(h, "bert").count("Restarted") == 1
    message = next(m for _, r, m in h.api.events_for("bert") if r == "Restarted")
    assert message == h.api.status_of("ml", "bert")["message"]  # the Event says what the status says
    h.operator().run_round()
    assert reasons(h, "bert").count("Restarted") == 1  # and only once


def test_killed_halfway_through_starting_a_gang_the_restart_is_announced_once() -> None:
    h = make_harness(ScriptedPolicy())
    preempted_job(h)
    die_after(h, "create_pod")  # the case: one pod of the new gang created, then killed
    assert h.operator().run_round().skipped
    assert [p["metadata"]["name"] for p in h.api.job_pods("ml", "bert")] == ["bert-g2-0"]
    assert reasons(h, "bert").count("Restarted") == 1  # sent with the status, before the pods

    h.leader[0] = True
    h.api.create_pod = type(h.api).create_pod.__get__(h.api)  # type: ignore[method-assign]
    h.operator().run_round()
    assert [p["metadata"]["name"] for p in h.api.job_pods("ml", "bert")] == ["bert-g2-0", "bert-g2-1"]
    assert reasons(h, "bert").count("Restarted") == 1
    assert h.api.status_of("ml", "bert")["restarts"] == 1


def test_killed_between_the_preemption_write_and_its_event_the_next_leader_sends_it() -> None:
    h = make_harness(ScriptedPolicy())
    policy = preempted_job(h)
    h.operator().run_round()
    h.settle_pods()
    before = reasons(h, "bert").count("Preempted")
    policy.want["ml/bert"] = None
    die_after(h, "patch_trainingjob_status")
    assert h.operator().run_round().skipped
    assert h.api.status_of("ml", "bert")["phase"] == "Preempted"
    assert reasons(h, "bert").count("Preempted") == before
    assert not any("deletionTimestamp" in p["metadata"] for p in h.api.job_pods("ml", "bert"))

    h.api.patch_trainingjob_status = type(h.api).patch_trainingjob_status.__get__(h.api)  # type: ignore[method-assign]
    h.leader[0] = True
    h.operator().run_round()
    assert all("deletionTimestamp" in p["metadata"] for p in h.api.job_pods("ml", "bert"))
    assert reasons(h, "bert").count("Preempted") == before + 1
    h.operator().run_round()
    assert reasons(h, "bert").count("Preempted") == before + 1


def test_no_event_for_a_change_that_was_not_written() -> None:
    h = make_harness(ScriptedPolicy())
    preempted_job(h)
    events = len(h.api.events)
    h.api.fail_next("patch_trainingjob_status", TemporaryError("etcd timeout"), times=1)
    rep = h.operator().run_round()
    assert rep.errors and len(h.api.events) == events and h.api.job_pods("ml", "bert") == []
    assert h.api.status_of("ml", "bert")["restarts"] == 0
    h.operator().run_round()  # retried: written, then announced once
    assert reasons(h, "bert").count("Restarted") == 1 and h.api.status_of("ml", "bert")["restarts"] == 1
