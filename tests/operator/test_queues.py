"""TrainingQueues through the operator, against the fake API server: team A borrows team B's idle
A100s, B's job arrives and A's borrower is preempted in that very round (through the graceful delete)
while B's job starts; a job naming a missing queue waits with a condition naming it; a namespace
selector puts jobs in their team's queue; each queue's status reports usage, borrowing and pending jobs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from scheduler.core.types import Job, PlacementShape
from tests.operator.conftest import Harness, RecordingOracle, gpu_node, trainingjob


def queue(name: str, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": spec}


def two_teams(h: Harness) -> None:
    # 16 A100: team-a and team-b each own 8, lend each other idle quota, a may borrow up to 8
    h.api.add_node(gpu_node("n1", 8))
    h.api.add_node(gpu_node("n2", 8))
    h.api.add_trainingqueue(
        queue("team-a", cohort="research", quotas=[{"gpuType": "A100", "nominal": 8, "borrowingLimit": 8}])
    )
    h.api.add_trainingqueue(queue("team-b", cohort="research", quotas=[{"gpuType": "A100", "nominal": 8}]))


def rigid(name: str, queue_name: str, **kw: Any) -> dict[str, Any]:
    kw.setdefault("replicas", {"min": 4, "max": 4, "gpusPerReplica": 1})
    return trainingjob(name, queue=queue_name, **kw)


def test_borrow_then_reclaim_in_the_round_the_owner_arrives(h: Harness) -> None:
    two_teams(h)
    for i in range(4):  # 4 x 4 GPUs: a's nominal 8 plus 8 borrowed from b
        h.api.add_trainingjob(rigid(f"a{i}", "team-a"))
    op = h.operator()
    rep = op.run_round()
    assert all(rep.did("start", f"ml/a{i}") for i in range(4))
    h.settle_pods()
    op.run_round()
    status = h.api.trainingqueues["team-a"]["status"]
    assert status["usage"] == {"A100": 16} and status["borrowed"] == {"A100": 8}
    assert status["usageText"] == "A100 16/8"

    h.clock.advance(60)
    h.api.add_trainingjob(rigid("b0", "team-b"))
    rep = op.run_round()
    preempted = [i for i in range(4) if rep.did("preempt", f"ml/a{i}")]
    assert len(preempted) == 1  # b needs 4 of its 8 back: one 4-GPU borrower goes
    # b0 starts once the preempted gang's GPUs are released (graceful delete), not on top of them
    h.api.finish_deletions()
    h.settle_pods()
    for _ in range(2):
        h.clock.advance(5)
        rep = op.run_round()
        h.settle_pods()
    assert h.api.status_of("ml", "b0")["phase"] in {"Admitted", "Running"}
    b = h.api.trainingqueues["team-b"]["status"]
    assert b["usage"] == {"A100": 4} and b["pendingJobs"] == 0
    a = h.api.trainingqueues["team-a"]["status"]
    assert a["usage"] == {"A100": 12} and a["pendingJobs"] == 1


def test_missing_queue_waits_with_a_condition_naming_it(h: Harness) -> None:
    two_teams(h)
    h.api.add_trainingjob(rigid("lost", "team-z"))
    h.operator().run_round()
    st = h.api.status_of("ml", "lost")
    assert st["phase"] == "Pending"
    assert "queue team-z does not exist" in st["message"] or any(
        "queue team-z does not exist" in c.get("message", "") for c in st.get("conditions", [])
    ), st


def test_namespace_selector_and_invalid_queue_status(h: Harness) -> None:
    h.api.add_node(gpu_node("n1", 8))
    h.api.add_namespace("ml", {"team": "a"})
    h.api.add_trainingqueue(
        queue("team-a", namespaces={"matchLabels": {"team": "a"}}, quotas=[{"gpuType": "*", "nominal": 4}])
    )
    h.api.add_trainingqueue(queue("broken", quotas=[{"gpuType": "A100", "nominal": -3}]))
    h.api.add_trainingqueue(queue("future", quotas=[{"gpuType": "H100", "nominal": 8}]))
    for i in range(2):
        h.api.add_trainingjob(rigid(f"j{i}", ""))
    h.operator().run_round()
    # both jobs join team-a through their namespace; its nominal 4 lets one start
    a = h.api.trainingqueues["team-a"]["status"]
    assert (a["usage"], a["pendingJobs"], a["admittedJobs"]) == ({"A100": 4}, 1, 1)
    assert "queue team-a: 4/4 A100 in use (nominal 4)" in str(h.api.status_of("ml", "j1"))
    broken = h.api.trainingqueues["broken"]["status"]["conditions"][0]
    assert broken["status"] == "False" and "spec.quotas.0.nominal" in broken["message"]
    future = h.api.trainingqueues["future"]["status"]["conditions"][0]
    assert future["status"] == "True" and "H100 that no node has" in future["message"]


def test_no_queues_lists_no_namespaces_and_changes_nothing(h: Harness) -> None:
    h.api.add_node(gpu_node("n1", 8))
    h.api.add_trainingjob(rigid("j", "team-x"))
    rep = h.operator().run_round()
    assert rep.did("start", "ml/j")  # without TrainingQueues, spec.queue is not enforced


def test_queue_status_forgets_gpu_types_it_no_longer_uses(h: Harness) -> None:
    two_teams(h)
    h.api.add_trainingjob(rigid("a0", "team-a"))
    op = h.operator()
    op.run_round()
    assert h.api.trainingqueues["team-a"]["status"]["usage"] == {"A100": 4}
    h.api.delete_trainingjob("ml", "a0")
    h.api.finish_deletions()
    op.run_round()
    status = h.api.trainingqueues["team-a"]["status"]
    assert status["usage"] == {} and status["usageText"] == "idle" and status["admittedJobs"] == 0


def test_queue_metrics_after_a_round(h: Harness) -> None:
    from scheduler import metrics

    two_teams(h)
    for i in range(3):
        h.api.add_trainingjob(rigid(f"a{i}", "team-a"))
    h.api.add_trainingjob(
        trainingjob("b0", queue="team-b", replicas={"min": 1, "max": 1, "gpusPerReplica": 4})
    )
    h.operator().run_round()

    def value(name: str, **labels: str) -> float | None:
        return metrics.REGISTRY.get_sample_value(name, labels)

    # b: 4 of its nominal 8, the other 4 idle and lent; a: 3 x 4 = 12 = its nominal 8 + 4 borrowed
    assert value("perfsched_queue_gpus", queue="team-a", gpu_type="A100") == 12
    assert value("perfsched_queue_borrowed_gpus", queue="team-a", gpu_type="A100") == 4
    assert value("perfsched_queue_nominal_gpus", queue="team-b", gpu_type="A100") == 8
    assert value("perfsched_queue_pending_jobs", queue="team-b") == 0
    # GPUs per weight 12 and 4, mean 8
    assert value("perfsched_queue_fair_share_ratio", queue="team-a") == 1.5


class _TypedOracle(RecordingOracle):
    """10 work units/s per A100, 2.5 per K80 (a K80 is a quarter of an A100 for every job)."""

    def throughput(self, queries: Sequence[tuple[Job, PlacementShape]]) -> list[float]:
        return [(10.0 if s.gpu_type == "A100" else 2.5) * s.num_gpus for _, s in queries]


def test_fair_share_ratio_counts_delivered_throughput_not_gpus(h: Harness) -> None:
    from scheduler import metrics

    h.oracle = _TypedOracle()
    h.api.add_node(gpu_node("a100", 8, "A100"))
    h.api.add_node(gpu_node("k80", 8, "K80"))
    h.api.add_trainingqueue(queue("team-a", quotas=[{"gpuType": "A100", "nominal": 8}]))
    h.api.add_trainingqueue(queue("team-b", quotas=[{"gpuType": "K80", "nominal": 8}]))
    h.api.add_trainingqueue(queue("team-c", fairShare="gpus", quotas=[{"gpuType": "K80", "nominal": 0}]))
    h.api.add_trainingjob(rigid("a0", "team-a", replicas={"min": 8, "max": 8, "gpusPerReplica": 1}))
    h.api.add_trainingjob(rigid("b0", "team-b", replicas={"min": 8, "max": 8, "gpusPerReplica": 1}))
    h.operator().run_round()
    # both hold 8 GPUs, but a's deliver 8 A100-equivalents and b's K80s 8 x 0.25 = 2; c holds nothing:
    # shares 8, 2, 0 per unit of weight, mean 10/3
    ratio = {q: h.api.trainingqueues[q]["status"]["fairShareRatio"] for q in ("team-a", "team-b", "team-c")}
    assert ratio == {"team-a": 2.4, "team-b": 0.6, "team-c": 0.0}
    got = metrics.REGISTRY.get_sample_value("perfsched_queue_fair_share_ratio", {"queue": "team-b"})
    assert got == 0.6


def test_quota_wait_is_a_condition_and_an_event_naming_the_queue_and_the_limit(h: Harness) -> None:
    # 16 A100; team-a and team-b own 8 each in cohort research. b's two 4-GPU jobs use its 8, a's a0 and
    # a1 use a's 8; a2 waits on the quota: nothing idle to borrow. A job naming a missing queue gets a
    # Warning Event.
    two_teams(h)
    for i in range(2):
        h.api.add_trainingjob(rigid(f"b{i}", "team-b"))
    for i in range(3):
        h.api.add_trainingjob(rigid(f"a{i}", "team-a", priority=3 - i))
    h.api.add_trainingjob(rigid("lost", "team-z"))
    h.operator().run_round()
    want = (
        "queue team-a: 8/16 A100 in use (nominal 8, borrowing limit 8), cohort research has 0 idle; "
        "the job needs 4, 0 A100 free"
    )
    st = h.api.status_of("ml", "a2")
    adm = next(c for c in st["conditions"] if c["type"] == "Admitted")
    assert (st["phase"], adm["status"], adm["reason"], adm["message"]) == (
        "Pending",
        "False",
        "QueueQuota",
        want,
    )
    assert h.api.events_for("a2") == [("Normal", "QueueQuota", want)]
    (kind, reason, message), *_ = h.api.events_for("lost")
    assert (kind, reason) == ("Warning", "QueueNotFound") and "queue team-z does not exist" in message


def test_bad_queues_get_a_condition_and_the_others_are_scheduled(h: Harness) -> None:
    # a spec that is not an object, a quota list that is not a list, an infinite weight, a selector with an
    # unknown operator (a CRD installed without its schema lets them through); a cohort no other queue is
    # in, a quota for a GPU type no node has: each queue says so in its Ready condition; the round goes on
    # for the queues that parse, and a job of an unparsable queue waits naming it
    h.api.add_node(gpu_node("n1", 8))
    bad_selector = {"matchExpressions": [{"key": "team", "operator": "Bogus"}]}
    h.api.add_trainingqueue(queue("ok", quotas=[{"gpuType": "*", "nominal": 4}]))
    h.api.add_trainingqueue({"metadata": {"name": "not-an-object"}, "spec": "quotas: 8"})
    h.api.add_trainingqueue(queue("quotas-not-a-list", quotas="A100=8"))
    h.api.add_trainingqueue(queue("infinite", weight=float("inf")))
    h.api.add_trainingqueue(queue("bad-selector", namespaces=bad_selector))
    h.api.add_trainingqueue(
        queue(
            "odd",
            cohort="nobody-else",
            quotas=[{"gpuType": "A100", "nominal": 2}, {"gpuType": "TPU", "nominal": 1}],
        )
    )
    for name, q in (("j-ok", "ok"), ("j-odd", "odd"), ("j-lost", "not-an-object")):
        h.api.add_trainingjob(rigid(name, q, replicas={"min": 2, "max": 2, "gpusPerReplica": 1}))
    rep = h.operator().run_round()
    assert rep.did("start", "ml/j-ok") and rep.did("start", "ml/j-odd") and not rep.errors
    assert "queue not-an-object does not exist" in h.api.status_of("ml", "j-lost")["message"]

    def ready(name: str) -> tuple[str, str, str]:
        c = h.api.trainingqueues[name]["status"]["conditions"][0]
        assert c["type"] == "Ready"
        return c["status"], c["reason"], c["message"]

    assert ready("ok") == ("True", "Active", "quotas are enforced")
    for name, field_name in (
        ("not-an-object", "spec"),
        ("quotas-not-a-list", "quotas"),
        ("infinite", "weight"),
    ):
        status, reason, message = ready(name)
        assert (status, reason) == ("False", "InvalidSpec") and field_name in message, message
    status, reason, message = ready("odd")
    assert (status, reason) == ("True", "UnknownGPUType")
    assert message == (
        "quota for GPU type TPU that no node has; "
        "no other queue is in cohort nobody-else: nothing to borrow from or lend to"
    )
