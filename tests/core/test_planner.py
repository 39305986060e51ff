"""Planner transitions: current vs desired allocation -> action, with the cost charged."""

from __future__ import annotations

import pytest

from scheduler.core.decisions import Action, ActionKind, Decision
from scheduler.core.planner import is_migration, plan
from scheduler.core.types import Allocation, Job
from tests.builders import alloc, job, node, snapshot

NODES = [node("a").gpus(8).build(), node("b").gpus(8).build()]
A2 = alloc("j", "V100", 2, {"a": 2})  # 2 replicas x 2 GPUs on a
A3 = alloc("j", "V100", 2, {"a": 3})
B2 = alloc("j", "V100", 2, {"b": 2})
RESTART, RESIZE = 30.0, 10.0

RIGID = job("j").replicas(2).gpus_per_replica(2).work(1000).progress(300, checkpoint=200).build()
ELASTIC = job("j").replicas(1, 4).gpus_per_replica(2).work(1000).progress(300, checkpoint=200).build()
FRESH = job("j").replicas(2).gpus_per_replica(2).work(1000).build()
DONE = job("j").replicas(2).gpus_per_replica(2).work(1000).progress(1000).build()
PINNED = job("j").replicas(2).gpus_per_replica(2).work(1000).progress(300, 200).non_preemptible().build()


@pytest.mark.parametrize(
    ("j", "cur", "want", "kind", "lost", "cost"),
    [
        (FRESH, None, A2, ActionKind.START, 0.0, 0.0),  # first start: nothing to restore
        (RIGID, None, A2, ActionKind.START, 0.0, RESTART),  # resumed: pays the restart
        (RIGID, A2, A2, ActionKind.KEEP, 0.0, 0.0),  # identical allocation
        (RIGID, A2, None, ActionKind.PREEMPT, 100.0, 0.0),  # loses 300 - 200 = 100 since checkpoint
        (RIGID, A2, B2, ActionKind.RESIZE, 100.0, RESTART),  # migration counts as a restart
        (ELASTIC, A2, A3, ActionKind.RESIZE, 0.0, RESIZE),  # elastic resize: checkpoint first
        (ELASTIC, A2, B2, ActionKind.RESIZE, 100.0, RESTART),  # same size elsewhere: a restart
        (DONE, A2, A2, ActionKind.COMPLETE, 0.0, 0.0),  # remaining work 0
        (PINNED, A2, None, ActionKind.KEEP, 0.0, 0.0),  # never preempt a non-preemptible job
        (PINNED, A2, B2, ActionKind.KEEP, 0.0, 0.0),  # nor move it
    ],
)
def test_transition_table(
    j: Job, cur: Allocation | None, want: Allocation | None, kind: ActionKind, lost: float, cost: float
) -> None:
    snap = snapshot(NODES, now=100, allocations=[cur] if cur else [])
    (action,) = plan(snap, [j], {"j": Decision("j", want)}, restart_cost_s=RESTART, resize_cost_s=RESIZE)
    assert (action.kind, action.lost_work, action.cost_seconds) == (kind, lost, cost)


def test_waiting_job_gets_no_action() -> None:
    assert plan(snapshot(NODES), [FRESH], {"j": Decision("j", None)}, restart_cost_s=1, resize_cost_s=1) == ()


def test_min_resize_interval_keeps_recently_changed_job() -> None:
    recent = job("j").replicas(1, 4).gpus_per_replica(2).changed_at(90).build()
    snap = snapshot(NODES, now=100, allocations=[A2])
    # changed 10 s ago < 60 s interval -> KEEP; at interval 5 s -> RESIZE
    (a,) = plan(
        snap, [recent], {"j": Decision("j", A3)}, restart_cost_s=1, resize_cost_s=1, min_resize_interval_s=60
    )
    assert a.kind is ActionKind.KEEP and "minimum resize interval" in a.reason
    (a,) = plan(
        snap, [recent], {"j": Decision("j", A3)}, restart_cost_s=1, resize_cost_s=1, min_resize_interval_s=5
    )
    assert a.kind is ActionKind.RESIZE


def test_forced_keep_holds_back_a_conflicting_start() -> None:
    # p is non-preemptible on a (8 GPUs); the policy wrongly evicts it for q on a: q's start is held back
    p = job("p").replicas(1).gpus_per_replica(8).non_preemptible().build()
    q = job("q").replicas(1).gpus_per_replica(8).build()
    snap = snapshot(NODES, allocations=[alloc("p", "V100", 8, {"a": 1})])
    decisions = {"p": Decision("p", None), "q": Decision("q", alloc("q", "V100", 8, {"a": 1}))}
    actions = plan(snap, [p, q], decisions, restart_cost_s=0, resize_cost_s=0)
    assert [(a.kind, a.job) for a in actions] == [(ActionKind.KEEP, "p")]


def test_is_migration_tells_moves_from_resizes_and_preemptions() -> None:
    k80 = alloc("j", "K80", 1, {"k1": 2})
    v100 = alloc("j", "V100", 1, {"v1": 2})
    other_nodes = alloc("j", "K80", 1, {"k2": 2})
    grown = alloc("j", "K80", 1, {"k1": 3})
    assert is_migration(Action(ActionKind.RESIZE, "j", k80, v100))  # another type
    assert is_migration(Action(ActionKind.RESIZE, "j", k80, other_nodes))  # same size, other nodes
    assert not is_migration(Action(ActionKind.RESIZE, "j", k80, grown))  # elastic resize in place
    assert not is_migration(Action(ActionKind.PREEMPT, "j", k80, None))  # the job waits: a preemption
    assert not is_migration(Action(ActionKind.START, "j", None, k80))
