"""The operator's learning state: bounded by the jobs alive, keyed per job, rebuilt after a restart.

A TrainingJob that finishes, fails, is deleted or is recreated under its name is forgotten by the
learning oracle (its own correction) and by the operator's per-job maps; what the shared levels learnt
from it stays. A new operator process replays each finished TrainingJob still listed from its status.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from scheduler.core.types import Job, PlacementShape
from scheduler.operator.reconcile import Operator
from scheduler.oracles.learning import CorrectedOracle
from tests.operator.conftest import Harness, RecordingOracle, gpu_node, make_harness, trainingjob


@dataclass
class ForgettingOracle(RecordingOracle):
    """RecordingOracle that also records what it is told to forget."""

    forgotten: list[str] = field(default_factory=list)

    def forget(self, name: str) -> None:
        self.forgotten.append(name)


def _run(h: Harness, name: str, throughput: float, progress: float = 100.0) -> None:
    """Play the workers of ``name``'s first gang: report ``progress`` at ``throughput``."""
    h.api.report_progress(
        "ml",
        f"{name}-g1-0",
        progress=progress,
        checkpoint=progress,
        throughput=throughput,
        time=h.clock.now(),
    )


def test_a_job_that_finishes_is_deleted_or_is_recreated_is_forgotten_once() -> None:
    h = make_harness()
    h.oracle = oracle = ForgettingOracle()
    h.api.add_node(gpu_node("n1", 8))
    for name in ("done", "gone", "again"):
        h.api.add_trainingjob(trainingjob(name, replicas={"min": 1, "max": 1, "gpusPerReplica": 2}))
    op = h.operator()
    op.run_round()
    h.settle_pods()
    for name in ("done", "gone", "again"):
        _run(h, name, 25.0)
    h.clock.advance(5)
    op.run_round()
    assert sorted(n for n, _, _ in oracle.observed) == ["ml/again", "ml/done", "ml/gone"]
    assert oracle.forgotten == []
    _run(h, "done", 25.0, progress=1000)  # all its work: it completes
    h.api.delete_trainingjob("ml", "gone")
    h.api.delete_trainingjob("ml", "again")  # and recreated under the same name: a new uid
    h.api.add_trainingjob(trainingjob("again", replicas={"min": 1, "max": 1, "gpusPerReplica": 2}))
    h.clock.advance(5)
    op.run_round()
    assert h.api.status_of("ml", "done")["phase"] == "Succeeded"
    assert sorted(oracle.forgotten) == ["ml/again", "ml/gone"]
    h.clock.advance(5)
    op.run_round()
    assert sorted(oracle.forgotten) == ["ml/again", "ml/done", "ml/gone"]
    for _ in range(3):  # once each
        h.clock.advance(5)
        op.run_round()
    assert sorted(oracle.forgotten) == ["ml/again", "ml/done", "ml/gone"]
    assert set(op._observed_report_time) <= {"ml/again"}
    assert set(op._announced) <= {"ml/done", "ml/again"}


def _finish_jobs(h: Harness, names: list[str], factor: float) -> Operator:
    """Run ``names`` (2 A100s each) at ``factor`` x the oracle's prediction (one progress report each,
    learnt), then let them complete; returns the operator, which saw them complete in its last round."""
    op = h.operator()
    op.run_round()
    h.settle_pods()
    oracle = h.oracle
    assert isinstance(oracle, CorrectedOracle)
    rates = {}
    for name in names:
        predicted = oracle.throughput([(_job(name), PlacementShape("A100", 2, gpus_per_node=2))])[0]
        rates[name] = factor * predicted
        _run(h, name, rates[name])
    h.clock.advance(5)
    op.run_round()
    for name in names:
        _run(h, name, rates[name], progress=1000)
    h.clock.advance(5)
    op.run_round()
    return op


def _job(name: str) -> Job:
    return Job(name=f"ml/{name}", submit_time=0, total_work=1000, model="resnet50", batch_size=256)


def _harness() -> Harness:
    h = make_harness()
    h.oracle = CorrectedOracle.load()  # type: ignore[assignment]
    h.api.add_node(gpu_node("n1", 8))
    for k in range(4):
        h.api.add_trainingjob(trainingjob(f"j{k}", replicas={"min": 1, "max": 1, "gpusPerReplica": 2}))
    return h


def test_finished_jobs_leave_the_oracle_no_state_of_their_own_and_what_their_type_learnt() -> None:
    h = _harness()
    oracle = h.oracle
    assert isinstance(oracle, CorrectedOracle)
    question = [(_job("new"), PlacementShape("A100", 4, gpus_per_node=4))]
    (cold,) = oracle.throughput(question)
    op = _finish_jobs(h, [f"j{k}" for k in range(4)], 1.8)  # observed, then complete
    assert all(h.api.status_of("ml", f"j{k}")["phase"] == "Succeeded" for k in range(4))
    assert oracle.corrector.jobs() == 4
    (learnt,) = oracle.throughput(question)
    assert learnt > 1.3 * cold
    h.clock.advance(5)
    op.run_round()  # the next round of the same process forgets them
    # nothing of the four jobs' own: what is left is the question's job, never a TrainingJob
    assert oracle.corrector.jobs() == 0 and oracle.jobs() == 1 and "ml/new" in oracle._features
    assert oracle.corrector.observations() == 4
    assert oracle.throughput(question) == pytest.approx([learnt], rel=1e-9)


def test_a_new_operator_process_replays_the_finished_jobs_still_listed() -> None:
    h = _harness()
    first = h.oracle
    assert isinstance(first, CorrectedOracle)
    question = [(_job("new"), PlacementShape("A100", 4, gpus_per_node=4))]
    _finish_jobs(h, [f"j{k}" for k in range(4)], 1.8).run_round()
    assert first.corrector.jobs() == 0
    (learnt,) = first.throughput(question)
    # the extender recorded where each pod was bound; the pods are gone
    for k in range(4):
        h.api.patch_trainingjob_status("ml", f"j{k}", {"placement": {f"j{k}-g1-0": "n1"}})
    for pod in list(h.api.list_pods("ml")):
        h.api.delete_pod("ml", pod["metadata"]["name"], 0)
    h.api.finish_deletions()
    restarted = CorrectedOracle.load()
    h.oracle = restarted  # type: ignore[assignment]
    (cold,) = restarted.throughput(question)
    op = h.operator()
    op.run_round()
    assert restarted.corrector.jobs() == 0 and restarted.corrector.observations() == 4
    (again,) = restarted.throughput(question)
    assert again == pytest.approx(learnt, rel=0.02) and again > 1.3 * cold
    h.clock.advance(5)
    op.run_round()  # once per process
    assert restarted.corrector.observations() == 4


def test_a_new_process_replays_the_latest_finished_jobs_only_where_it_can_place_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # five Succeeded TrainingJobs as a cluster holds them: "a" to "e" completed at minutes 4, 1, 3, 2 and
    # 5, each with its last gang (generation 2) recorded on n1 beside an older one on n2, "e" on a node
    # since removed. With room to replay 3, the latest 3 are tried in completion order ("c", "a", "e"),
    # at the rate in their status; "e" cannot be placed and is only forgotten
    from scheduler.operator import reconcile

    monkeypatch.setattr(reconcile, "REPLAY_MAX", 3)
    h = make_harness()
    h.oracle = oracle = ForgettingOracle()
    h.api.add_node(gpu_node("n1", 8))
    for name, minute, node in (
        ("a", 4, "n1"),
        ("b", 1, "n1"),
        ("c", 3, "n1"),
        ("d", 2, "n1"),
        ("e", 5, "n9"),
    ):
        obj = trainingjob(name, replicas={"min": 1, "max": 1, "gpusPerReplica": 2})
        obj["status"] = {
            "phase": "Succeeded",
            "observedThroughput": 10.0 * minute,
            "gangGeneration": 2,
            "completionTime": f"2027-01-15T08:0{minute}:00Z",
            "placement": {f"{name}-g1-0": "n2", f"{name}-g2-0": node},
        }
        h.api.add_trainingjob(obj)
    h.operator().run_round()
    # the latest 3 by completion: "c" (3), "a" (4), "e" (5); "e"'s node is gone
    assert oracle.observed == [("ml/c", "A100", 30.0), ("ml/a", "A100", 40.0)]
    assert sorted(oracle.forgotten) == ["ml/a", "ml/c", "ml/e"]
