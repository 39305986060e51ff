"""The greedy allocation's public steps, ``try_place`` and ``preempt_for`` (the simulator's incremental
rounds call them directly), on a small free-GPU index."""

from __future__ import annotations

from scheduler.core.decisions import Unschedulable
from scheduler.core.placement import FreeIndex
from scheduler.core.types import Allocation
from scheduler.policies.greedy import Request, preempt_for, try_place
from tests.builders import alloc, job, node, snapshot


def test_try_place_tries_replica_counts_most_first_then_types_in_order() -> None:
    # n1: 4 V100, n2: 4 K80. 8 replicas fit neither type (4 GPUs each); 4 replicas fit V100, tried first.
    idx = FreeIndex([node("n1").gpus(4, "V100").build(), node("n2").gpus(4, "K80").build()])
    req = Request(job("j").build(), ("V100", "K80"), (8, 4))
    got = try_place(idx, req, ("V100", "K80"))
    assert isinstance(got, Allocation)
    assert (got.gpu_type, got.replicas, dict(got.replicas_per_node)) == ("V100", 4, {"n1": 4})
    # not committed: the same placement is still possible
    assert idx.type_free("V100") == 4
    # K80 first: the same 4 replicas land on n2
    got = try_place(idx, req, ("K80", "V100"))
    assert isinstance(got, Allocation) and got.gpu_type == "K80"


def test_try_place_says_why_not_and_whether_waiting_helps() -> None:
    idx = FreeIndex([node("n1").gpus(4).build()], {"n1": 2})  # 2 of 4 V100 free
    wait = try_place(idx, Request(job("j").build(), ("V100",), (4,)), ("V100",))
    assert isinstance(wait, Unschedulable) and wait.resolvable  # 4 GPUs exist: it may fit later
    never = try_place(idx, Request(job("j").build(), ("V100",), (8,)), ("V100",))
    assert isinstance(never, Unschedulable) and not never.resolvable  # the cluster has 4
    none = try_place(idx, Request(job("j").build(), ("A100",), (1,)), ("A100",))
    assert isinstance(none, Unschedulable) and not none.resolvable


# Two 4-GPU V100 nodes, full. Ranks (higher = less urgent): on n1 c 9 and x 8, on n2 b 8.5 and y 0.5;
# 2 GPUs each. ``new`` (rank 1) needs one 4-GPU replica, so one whole node.
RUNNING = {
    "c": alloc("c", "V100", 2, {"n1": 1}),
    "x": alloc("x", "V100", 2, {"n1": 1}),
    "b": alloc("b", "V100", 2, {"n2": 1}),
    "y": alloc("y", "V100", 2, {"n2": 1}),
}
RANKS = {"c": 9.0, "x": 8.0, "b": 8.5, "y": 0.5}


def _preempt(
    margin: float,
) -> tuple[Allocation | Unschedulable, FreeIndex, dict[str, Allocation], dict[str, str]]:
    snap = snapshot([node("n1").gpus(4).build(), node("n2").gpus(4).build()], allocations=RUNNING.values())
    idx = FreeIndex(snap.nodes, snap.free_by_node())
    reserved = dict(RUNNING)
    pending = dict(RUNNING)
    victims = {"V100": sorted((-r, name) for name, r in RANKS.items())}  # least urgent first
    preempted_by: dict[str, str] = {}
    req = Request(job("new").gpus_per_replica(4).build(), ("V100",), (1,), rank=1.0)
    got = preempt_for(idx, req, ("V100",), reserved, pending, victims, margin, preempted_by)
    return got, idx, reserved, preempted_by


def test_preempt_for_evicts_least_urgent_first_and_puts_back_evictions_not_needed() -> None:
    # evict c (9): n1 has 2 free; b (8.5): n1 2, n2 2, still no 4-GPU node; x (8): n1 has 4 -> place.
    # Put back most urgent first: x no longer fits (n1 is new's), b fits on n2 again, c does not.
    got, idx, reserved, preempted_by = _preempt(margin=0.0)
    assert isinstance(got, Allocation) and dict(got.replicas_per_node) == {"n1": 1}
    assert preempted_by == {"c": "new", "x": "new"}
    assert sorted(reserved) == ["b", "y"]
    assert idx.type_free("V100") == 4  # new's GPUs are left for the caller to commit


def test_preempt_for_respects_the_margin_and_undoes_everything_when_it_cannot_place() -> None:
    # margin 7.5: only ranks above 1 + 7.5 = 8.5 may go, i.e. c alone, which frees only 2 GPUs of n1
    got, idx, reserved, preempted_by = _preempt(margin=7.5)
    assert isinstance(got, Unschedulable) and got.resolvable
    assert preempted_by == {}
    assert sorted(reserved) == sorted(RUNNING)
    assert idx.type_free("V100") == 0
