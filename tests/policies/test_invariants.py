"""Invariants every policy keeps through run_round, on random clusters and jobs (hypothesis).

run_round itself raises ``PolicyInvariantError`` when a decision over-commits a node, breaks a gang,
leaves min/max replicas or uses a GPU type the job does not allow; these tests also check the planned
end state and that the same inputs (same seed) give the same result.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.core.decisions import ActionKind
from scheduler.core.placement import FreeIndex
from scheduler.core.round import RoundCosts, run_round
from scheduler.core.types import Allocation, ClusterSnapshot, Job
from scheduler.policies import POLICIES, make_policy
from scheduler.policies.base import type_infos
from scheduler.policies.type_planner import MIN_SPREAD_SHARE
from tests.builders import FakeOracle, job, node

TYPES = ["K80", "V100", "A100"]


@st.composite
def scenarios(draw: Any) -> tuple[ClusterSnapshot, list[Job], FakeOracle]:
    nodes = []
    for i in range(draw(st.integers(1, 6))):
        b = node(f"n{i}").gpus(draw(st.sampled_from([1, 2, 4, 8])), draw(st.sampled_from(TYPES)))
        b.rack(draw(st.sampled_from(["", "r1", "r2"])))
        if draw(st.booleans()):
            b.pcie()
        if draw(st.integers(0, 9)) == 0:
            b.external(1)
        nodes.append(b.build())
    now = float(draw(st.integers(0, 100_000)))
    jobs = []
    speeds: dict[Any, float] = {}
    for i in range(draw(st.integers(1, 10))):
        lo = draw(st.integers(1, 3))
        hi = lo + draw(st.integers(0, 3))
        work = float(draw(st.integers(1, 10_000)))
        b = (
            job(f"j{i}")
            .replicas(lo, hi)
            .gpus_per_replica(draw(st.sampled_from([1, 2, 4])))
            .work(work)
            .submitted(float(draw(st.integers(0, int(now)))))
            .attained(float(draw(st.integers(0, 200_000))))
            .priority(draw(st.integers(0, 2)))
        )
        if draw(st.booleans()):
            b.rigid()
        if draw(st.integers(0, 3)) == 0:
            b.allowed(*draw(st.lists(st.sampled_from(TYPES), min_size=1, max_size=2)))
        if draw(st.integers(0, 4)) == 0:
            b.non_preemptible()
        if draw(st.booleans()):
            b.deadline(now + draw(st.integers(-100, 20_000)))
        if draw(st.integers(0, 5)) == 0:
            b.progress(work)  # finished
        else:
            done = draw(st.floats(0, 0.9)) * work
            b.progress(done, checkpoint=done / 2)
        jobs.append(b.build())
        for t in TYPES:
            speeds[(f"j{i}", t)] = float(draw(st.sampled_from([0.0, 1.0, 2.0, 5.0])))
    # Some jobs already run: place them for real so the snapshot is consistent.
    index = FreeIndex(nodes)
    allocations: dict[str, Allocation] = {}
    for j in jobs:
        if not draw(st.booleans()):
            continue
        reps = draw(st.integers(j.min_replicas if j.is_elastic else j.max_replicas, j.max_replicas))
        for t in TYPES:
            if not j.allows(t):
                continue
            res = index.place(replicas=reps, gpus_per_replica=j.gpus_per_replica, gpu_type=t, job=j.name)
            if isinstance(res, Allocation):
                index.commit(res)
                allocations[j.name] = res
                break
    oracle = FakeOracle(speed=speeds, scaling=draw(st.sampled_from([0.5, 0.8, 1.0])))
    return ClusterSnapshot(now=now, nodes=tuple(nodes), allocations=allocations), jobs, oracle


def check_end_state(snap: ClusterSnapshot, jobs: list[Job], actions: Any) -> None:
    final = dict(snap.allocations)
    for a in actions:
        if a.after is None:
            final.pop(a.job, None)
        else:
            final[a.job] = a.after
    used: dict[str, int] = {}
    by_name = {j.name: j for j in jobs}
    for name, alloc in final.items():
        j = by_name[name]
        lo = j.min_replicas if j.is_elastic else j.max_replicas
        assert lo <= alloc.replicas <= j.max_replicas  # gang all-or-nothing within min/max
        assert j.allows(alloc.gpu_type)
        for n, r in alloc.replicas_per_node:
            used[n] = used.get(n, 0) + r * alloc.gpus_per_replica
    for n in snap.nodes:
        assert used.get(n.name, 0) <= n.capacity_for_jobs  # never more GPUs than the node has
    for j in jobs:
        cur = snap.allocations.get(j.name)
        if cur is not None and not j.preemptible and j.remaining_work > 0:
            assert final.get(j.name) == cur  # non-preemptible jobs stay put
    kinds = {a.job: a.kind for a in actions}
    for j in jobs:
        if j.remaining_work <= 0:
            assert kinds[j.name] is ActionKind.COMPLETE


def slow_spread(snap: ClusterSnapshot, j: Job, gpu_type: str, oracle: FakeOracle) -> bool:
    """Whether aware policies leave ``gpu_type`` out for waiting ``j`` (``type_planner.MIN_SPREAD_SHARE``):
    its smallest gang spans several nodes of the type and runs there at under a quarter of the speed of
    its best type with a node that holds a replica. The fake oracle scales every type alike with the
    gang's size, so its per-GPU rates compare the speeds."""
    infos = type_infos(snap)
    lo = j.min_replicas if j.is_elastic else j.max_replicas
    gpus = lo * j.gpus_per_replica
    if len(infos) <= 1 or gpu_type not in infos or gpus <= infos[gpu_type].node_gpus:
        return False
    ok = [t for t, info in infos.items() if j.allows(t) and gpus <= info.capacity]
    best = max((oracle.rate(j, t) for t in ok if infos[t].node_gpus >= j.gpus_per_replica), default=0.0)
    return oracle.rate(j, gpu_type) < MIN_SPREAD_SHARE * best


def _property(policy_name: str) -> Any:
    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(scenarios())
    def prop(case: tuple[ClusterSnapshot, list[Job], FakeOracle]) -> None:
        snap, jobs, oracle = case
        costs = RoundCosts(restart_cost_s=10, resize_cost_s=5)
        first = run_round(snap, jobs, make_policy(policy_name), oracle, costs=costs)
        check_end_state(snap, jobs, first.actions)
        again = run_round(snap, jobs, make_policy(policy_name), oracle, costs=costs)
        assert again == first  # same inputs and seed: same result
        for name, why in first.waiting.items():
            assert why.reason, name

    return prop


for _name in POLICIES:
    globals()[f"test_invariants_{_name}"] = _property(_name)


def test_every_policy_is_tested() -> None:
    assert {"fifo", "las", "srsf", "ftf", "hetero", "elastic", "deadline"} <= set(POLICIES)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), st.sampled_from([("fifo", {"backfill": True}), ("las", {}), ("srsf", {})]))
def test_backfilling_policies_leave_no_gang_that_fits(
    case: tuple[ClusterSnapshot, list[Job], FakeOracle], policy: tuple[str, dict[str, Any]]
) -> None:
    """Work conservation: after the round, no waiting job's smallest gang fits in the free GPUs."""
    snap, jobs, oracle = case
    res = run_round(snap, jobs, make_policy(*policy), oracle)
    final = dict(snap.allocations)
    for a in res.actions:
        if a.after is None:
            final.pop(a.job, None)
        else:
            final[a.job] = a.after
    index = FreeIndex(snap.nodes)
    for a in final.values():
        index.commit(a)
    for j in jobs:
        why = res.waiting.get(j.name)
        if why is None or not why.resolvable:
            continue
        lo = j.min_replicas if j.is_elastic else j.max_replicas
        for t in TYPES:
            # the oracle's 0 means "cannot run there": heterogeneity-aware policies (the default) never
            # place a job on such a type, so a free GPU of it does not count as one the job could use;
            # nor do they start a gang spread over nodes of a type where it runs under a quarter of its
            # best speed (it waits for a better type: ``type_planner.MIN_SPREAD_SHARE``)
            if j.allows(t) and oracle.rate(j, t) > 0 and not slow_spread(snap, j, t, oracle):
                fits = index.place(replicas=lo, gpus_per_replica=j.gpus_per_replica, gpu_type=t, job=j.name)
                assert not isinstance(fits, Allocation), (j.name, why.reason)
