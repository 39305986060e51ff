"""The operator with the Workload API on: each gang generation it starts is one PodGroup, and a restart
replaces the old generation's PodGroup and Workload with the new one's."""

from __future__ import annotations

from tests.operator.conftest import Harness, gpu_node, make_harness, trainingjob


def groups(h: Harness) -> set[tuple[str, str, str]]:
    return set(h.api.gang_objects)


def test_a_restarted_gang_gets_the_new_generations_group() -> None:
    h = make_harness(backoff_limit=3, workload_api=True)
    h.api.add_node(gpu_node("n1", 8))
    h.api.add_trainingjob(trainingjob("bert"))  # rigid: 2 replicas x 2 GPUs
    op = h.operator()
    assert op.run_round().did("start", "ml/bert")
    assert groups(h) == {("workloads", "ml", "bert-g1"), ("podgroups", "ml", "bert-g1")}
    assert {p["spec"]["schedulingGroup"]["podGroupName"] for p in h.api.job_pods("ml", "bert")} == {"bert-g1"}
    assert h.api.gang_objects[("podgroups", "ml", "bert-g1")]["spec"]["schedulingPolicy"] == {
        "gang": {"minCount": 2}
    }
    h.settle_pods()
    op.run_round()
    h.api.set_pod_phase("ml", "bert-g1-1", "Failed")
    assert op.run_round().did("restart", "ml/bert")
    op.run_round()
    h.api.finish_deletions()
    assert op.run_round().did("start", "ml/bert")
    assert groups(h) == {("workloads", "ml", "bert-g2"), ("podgroups", "ml", "bert-g2")}
    g2 = [p for p in h.api.job_pods("ml", "bert") if p["metadata"]["name"].startswith("bert-g2-")]
    assert len(g2) == 2 and {p["spec"]["schedulingGroup"]["podGroupName"] for p in g2} == {"bert-g2"}


def test_off_by_default() -> None:
    h = make_harness()
    h.api.add_node(gpu_node("n1", 8))
    h.api.add_trainingjob(trainingjob("bert"))
    h.operator().run_round()
    assert not h.api.gang_objects
    assert all("schedulingGroup" not in p["spec"] for p in h.api.job_pods("ml", "bert"))


def test_a_finished_job_leaves_no_group() -> None:
    h = make_harness(workload_api=True)
    h.api.add_node(gpu_node("n1", 8))
    h.api.add_trainingjob(trainingjob("bert"))
    op = h.operator()
    op.run_round()
    h.settle_pods()
    assert groups(h) == {("workloads", "ml", "bert-g1"), ("podgroups", "ml", "bert-g1")}
    for i in (1, 0):
        h.api.set_pod_phase("ml", f"bert-g1-{i}", "Succeeded")
    op.run_round()
    assert h.api.status_of("ml", "bert")["phase"] == "Succeeded"
    assert groups(h) == set()
