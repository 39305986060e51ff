"""Queues in run_round: nominal quota, borrowing, lending limits, reclaim, fair share, wait reasons.

Every table row states the arithmetic it checks. Cluster: 16 A100 unless said (two 8-GPU nodes).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.core.admission import RESERVE_AFTER_S, admit
from scheduler.core.decisions import ActionKind, Decision, RoundResult
from scheduler.core.errors import ConfigError
from scheduler.core.queues import FairShare, QueueSpec, Quota
from scheduler.core.round import run_round
from scheduler.core.types import Allocation, ClusterSnapshot, Job
from scheduler.policies import make_policy
from tests.builders import FakeOracle, alloc, cluster

A100_16 = cluster(("A100", 2, 8))


def q(name: str, nominal: int, borrow: int | None = 0, lend: int | None = None, **kw: object) -> QueueSpec:
    return QueueSpec(name, (Quota("A100", nominal, borrow, lend),), **kw)  # type: ignore[arg-type]


def jobs_of(queue: str, n: int, gpus: int = 1, t0: float = 0.0) -> list[Job]:
    """``n`` rigid one-replica jobs of ``gpus`` GPUs in ``queue``, submitted one second apart."""
    return [Job(f"{queue}-{i}", t0 + i, 1000.0, gpus_per_replica=gpus, queue=queue) for i in range(n)]


def running_gpus(snap: ClusterSnapshot, jobs: list[Job], queues: tuple[QueueSpec, ...]) -> dict[str, int]:
    """GPUs each queue holds after one round of FIFO."""
    s = ClusterSnapshot(snap.now, snap.nodes, snap.allocations, queues)
    result = run_round(s, jobs, make_policy("fifo"), FakeOracle())
    by_job = {j.name: j.queue for j in jobs}
    out: dict[str, int] = {}
    for d in result.decisions.values():
        if d.allocation is not None:
            out[by_job[d.job]] = out.get(by_job[d.job], 0) + d.allocation.total_gpus
    return out


@pytest.mark.parametrize(
    ("queues", "demand", "want"),
    [
        # no cohort: a uses its nominal 6 and no more, though 10 GPUs stay idle
        ((q("a", 6),), {"a": 12}, {"a": 6}),
        # cohort, a borrows b's idle nominal: 6 + min(borrow 4, b idle 10) = 10
        ((q("a", 6, 4, cohort="c"), q("b", 10, cohort="c")), {"a": 12}, {"a": 10}),
        # unlimited borrowing but b lends at most 3: 6 + 3 = 9
        ((q("a", 6, None, cohort="c"), q("b", 10, lend=3, cohort="c")), {"a": 12}, {"a": 9}),
        # b's 4 one-GPU jobs take 4 of its nominal 10; the other 6 are idle and lent: a 6 + 6 = 12
        ((q("a", 6, None, cohort="c"), q("b", 10, cohort="c")), {"a": 12, "b": 4}, {"a": 12, "b": 4}),
        # different cohorts do not lend: a 6, b's idle 10 stays idle
        ((q("a", 6, None, cohort="x"), q("b", 10, cohort="y")), {"a": 12}, {"a": 6}),
        # GPUs no queue has a nominal quota on (16 - 4 - 4 = 8) are lent to cohort members; fair share
        # evens out GPUs per unit of weight over all a queue holds: a 4 / 1 = 4, b 4 + 8 = 12, 12 / 3 = 4
        (
            (
                q("a", 4, None, cohort="c", fair_share=FairShare.GPUS),
                q("b", 4, None, cohort="c", weight=3, fair_share=FairShare.GPUS),
            ),
            {"a": 16, "b": 16},
            {"a": 4, "b": 12},
        ),
    ],
)
def test_quota_table(queues: tuple[QueueSpec, ...], demand: dict[str, int], want: dict[str, int]) -> None:
    jobs = [j for name, n in demand.items() for j in jobs_of(name, n)]
    assert running_gpus(ClusterSnapshot(0.0, A100_16), jobs, queues) == want


def test_reclaim_in_the_first_round_lowest_priority_and_least_lost_first() -> None:
    # a (nominal 8, borrows up to 8) holds all 16 A100 as 4 jobs of 4; b (nominal 8) submits an 8-GPU job.
    # b needs its 8 back: a keeps 8 = 2 jobs; the two reclaimed are the low-priority one (a-3) and, of the
    # equal-priority rest, the one that loses least since its checkpoint (a-2 loses 10, a-0 and a-1 lose 50)
    queues = (q("a", 8, 8, cohort="c"), q("b", 8, cohort="c"))
    a = [
        Job(
            f"a-{i}",
            float(i),
            1000.0,
            gpus_per_replica=4,
            queue="a",
            progress=100.0,
            checkpoint_progress=cp,
            priority=prio,
        )
        for i, (cp, prio) in enumerate([(50.0, 1), (50.0, 1), (90.0, 1), (0.0, 0)])
    ]
    allocs = [alloc(f"a-{i}", "A100", 4, {f"a100-00{i // 2}": 1}) for i in range(4)]
    b = Job("b-0", 10.0, 1000.0, gpus_per_replica=8, queue="b")
    snap = ClusterSnapshot(20.0, A100_16, {x.job: x for x in allocs}, queues)
    result = run_round(snap, [*a, b], make_policy("fifo"), FakeOracle())
    kinds = {x.job: x.kind for x in result.actions}
    assert kinds["a-2"] is ActionKind.PREEMPT and kinds["a-3"] is ActionKind.PREEMPT
    assert kinds["b-0"] is ActionKind.START
    assert result.decisions["a-0"].allocation is not None and result.decisions["a-1"].allocation is not None
    assert result.waiting["a-2"].reason.startswith("queue a: 8/16 A100 in use (nominal 8, borrowing limit 8)")


def test_wait_reason_names_queue_limit_and_cohort() -> None:
    queues = (q("team-a", 16, 0, cohort="research"), q("team-b", 0, cohort="research"))
    jobs = jobs_of("team-a", 3, gpus=8)
    snap = ClusterSnapshot(0.0, cluster(("A100", 4, 8)), {}, queues)
    result = run_round(snap, jobs, make_policy("fifo"), FakeOracle())
    # 32 A100, team-a nominal 16: two 8-GPU jobs run, the third waits although 16 are free
    assert result.waiting["team-a-2"].reason == (
        "queue team-a: 16/16 A100 in use (nominal 16), cohort research has 16 idle; "
        "the job needs 8, 16 A100 free"
    )


def test_missing_queue_is_unresolvable_and_names_it() -> None:
    snap = ClusterSnapshot(0.0, A100_16, {}, (q("a", 16),))
    j = Job("j", 0.0, 100.0, queue="nope")
    why = run_round(snap, [j], make_policy("fifo"), FakeOracle()).waiting["j"]
    assert not why.resolvable and "queue nope does not exist" in why.reason


def test_job_without_queue_joins_default() -> None:
    snap = ClusterSnapshot(0.0, A100_16, {}, (q("default", 2),))
    jobs = [Job(f"j{i}", float(i), 100.0) for i in range(4)]
    result = run_round(snap, jobs, make_policy("fifo"), FakeOracle())
    assert sorted(n for n, d in result.decisions.items() if d.allocation) == ["j0", "j1"]


def test_throughput_fair_share_gives_each_team_the_gpus_worth_most_to_it() -> None:
    # 8 A100 + 8 K80, no nominal quota, both queues borrow everything (weights 1:1). Team "fast" runs 6x
    # faster on A100 than on K80; team "flat" runs as fast on both. Jobs that run about as fast on either
    # type leave the A100s to those that gain from them: fast holds 8 A100 (share 8 x 1.0), flat 8 K80
    # (share 8 x 1.0). GPU-count fairness with the same jobs would also split 8/8 but place blindly.
    nodes = cluster(("A100", 1, 8), ("K80", 1, 8))
    speed: dict[object, float] = {(f"fast-{i}", "K80"): 1.0 for i in range(16)}
    speed |= {(f"fast-{i}", "A100"): 6.0 for i in range(16)}
    speed |= {(f"flat-{i}", t): 1.0 for i in range(16) for t in ("A100", "K80")}
    queues = tuple(QueueSpec(n, (Quota("*", 0, None),), cohort="c") for n in ("fast", "flat"))
    jobs = jobs_of("fast", 16) + [Job(f"flat-{i}", 0.5 + i, 1000.0, queue="flat") for i in range(16)]
    result = run_round(ClusterSnapshot(0.0, nodes, {}, queues), jobs, make_policy("fifo"), FakeOracle(speed))
    counts: dict[tuple[str, str], int] = {}
    for d in result.decisions.values():
        if d.allocation is not None:
            key = (d.job.split("-")[0], d.allocation.gpu_type)
            counts[key] = counts.get(key, 0) + d.allocation.total_gpus
    assert counts == {("fast", "A100"): 8, ("flat", "K80"): 8}


@pytest.mark.parametrize(
    ("quota", "message"),
    [
        (lambda: Quota("A100", -1), "nominal must be >= 0"),
        (lambda: QueueSpec("a", (Quota("A100", 1, 2),)), "borrowingLimit but the queue has no cohort"),
        (lambda: QueueSpec("a", (Quota("A100", 1), Quota("A100", 2))), "GPU type A100 twice"),
        (lambda: QueueSpec("a", weight=0), "weight must be > 0"),
    ],
)
def test_bad_queue_specs_name_the_field(quota: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        quota()  # type: ignore[operator]


def test_no_queues_changes_nothing() -> None:
    jobs = [Job(f"j{i}", float(i), 100.0, gpus_per_replica=4, queue="whatever") for i in range(6)]
    a = run_round(ClusterSnapshot(0.0, A100_16), jobs, make_policy("las"), FakeOracle())
    b = run_round(ClusterSnapshot(0.0, A100_16, {}, ()), jobs, make_policy("las"), FakeOracle())
    assert a == b and sum(1 for d in a.decisions.values() if d.allocation) == 4


@st.composite
def _tenants(draw: st.DrawFn) -> tuple[tuple[QueueSpec, ...], int]:
    nodes = draw(st.integers(1, 4))
    names = ["a", "b", "c"][: draw(st.integers(2, 3))]
    specs = tuple(
        q(
            n,
            draw(st.integers(0, 12)),
            draw(st.one_of(st.none(), st.integers(0, 16))),
            draw(st.one_of(st.none(), st.integers(0, 16))),
            cohort="c",
            weight=draw(st.sampled_from([1.0, 2.0])),
        )
        for n in names
    )
    return specs, nodes


@settings(max_examples=60, deadline=None)
@given(_tenants(), st.sampled_from(["fifo", "las"]), st.data())
def test_quotas_hold_and_owners_reclaim_in_the_first_round(
    tenants: tuple[tuple[QueueSpec, ...], int], policy_name: str, data: st.DataObject
) -> None:
    specs, n_nodes = tenants
    nodes = cluster(("A100", n_nodes, 8))
    policy = make_policy(policy_name)
    first, *later = specs
    # round 1: only the first queue has work (it borrows what it may); round 2: every other queue
    # submits; rounds 3-4: nothing new
    jobs = jobs_of(first.name, data.draw(st.integers(1, 40)))
    demand = {s.name: data.draw(st.integers(0, 12)) for s in later}
    allocations: dict[str, object] = {}
    for rnd in range(4):
        if rnd == 1:
            jobs += [j for s in later for j in jobs_of(s.name, demand[s.name], t0=100.0)]
        snap = ClusterSnapshot(float(rnd * 60), nodes, allocations, specs)  # type: ignore[arg-type]
        result = run_round(snap, jobs, policy, FakeOracle())
        for a in result.actions:
            if a.after is None:
                allocations.pop(a.job, None)
            else:
                allocations[a.job] = a.after
        use = {s.name: 0 for s in specs}
        for name in allocations:
            use[name.split("-")[0]] += 1
        waiting = {j.queue for j in jobs if j.name not in allocations}
        for s in specs:
            limit = s.borrowing_limit("A100")
            # never more than nominal + borrowing limit
            assert limit is None or use[s.name] <= s.nominal("A100") + limit, (rnd, use)
        # what is borrowed never exceeds what lenders may lend (idle nominal within lending limits)
        # plus the GPUs no queue has a nominal quota on
        borrowed = sum(max(0, use[s.name] - s.nominal("A100")) for s in specs)
        unowned = max(0, 8 * n_nodes - sum(s.nominal("A100") for s in specs))
        lendable = unowned
        for s in specs:
            idle = max(0, s.nominal("A100") - use[s.name])
            limit = s.lending_limit("A100")
            lendable += idle if limit is None else min(limit, idle)
        assert borrowed <= lendable, (rnd, use)
        borrowing = any(use[s.name] > s.nominal("A100") for s in specs)
        for s in specs:
            # nobody borrows while a queue with a waiting one-GPU job has its own nominal quota idle:
            # reclaim happens in the round the owner's jobs arrive
            if borrowing and s.name in waiting:
                assert use[s.name] >= min(s.nominal("A100"), 8 * n_nodes), (rnd, s.name, use)


def test_gpus_held_by_a_draining_gang_are_not_admitted_twice() -> None:
    # 16 A100; 8 are still held by a preempted gang that drains (not a job of this round). Queue a may
    # use all 16 (nominal 16), but only 8 are free: two 4-GPU jobs are admitted, the third waits on its
    # queue with the reason, not on the policy
    draining = alloc("old#draining", "A100", 8, {"a100-000": 1})
    snap = ClusterSnapshot(0.0, A100_16, {draining.job: draining}, (q("a", 16),))
    result = run_round(snap, jobs_of("a", 3, gpus=4), make_policy("fifo"), FakeOracle())
    assert sum(1 for d in result.decisions.values() if d.allocation) == 2
    assert result.waiting["a-2"].reason.startswith("queue a: 8/16 A100 in use (nominal 16)")
    assert result.waiting["a-2"].reason.endswith("the job needs 4, 0 A100 free")


# --- the policy chooses the GPU type within the queue's quota (heterogeneity-aware under queues) ---------

MIXED = cluster(("A100", 1, 8), ("K80", 1, 8))


def test_hetero_aware_policy_moves_a_running_job_to_a_faster_type_its_queue_has_room_on() -> None:
    # queue a owns 8 A100 and 8 K80 (no cohort). Its 4-GPU job runs on K80 but is 6x faster on A100, where
    # its queue has 8 idle: the policy (aware FIFO) may move it there; pinned to K80 it could not
    queues = (QueueSpec("a", (Quota("A100", 8), Quota("K80", 8))),)
    oracle = FakeOracle()
    on_k80 = oracle.rate(Job("a-0", 0.0, 1.0), "K80") * 4  # measured where it runs (as predicted)
    j = Job(
        "a-0", 0.0, 1e6, gpus_per_replica=4, queue="a", progress=10.0, checkpoint_progress=10.0,
        observed_throughput=on_k80,
    )  # fmt: skip
    running = alloc("a-0", "K80", 4, {"k80-000": 1})
    snap = ClusterSnapshot(100.0, MIXED, {"a-0": running}, queues)
    result = run_round(snap, [j], make_policy("fifo"), oracle)
    after = result.decisions["a-0"].allocation
    assert after is not None and after.gpu_type == "A100"
    # the same with an agnostic policy: it keeps the type admission counted it on
    agnostic = run_round(snap, [j], make_policy("fifo", {"heterogeneity": "agnostic"}), FakeOracle())
    kept = agnostic.decisions["a-0"].allocation
    assert kept is not None and kept.gpu_type == "K80"


def test_waiting_job_may_start_on_any_type_its_queue_has_room_on() -> None:
    # queue a: 4 A100 + 8 K80. a-0 (4 GPUs, 6x faster on A100) is counted on A100; a-1 on K80. The policy
    # sees a-0 allowed on both types (K80 room 8 - 4 = 4), a-1 on K80 only (no A100 room left)
    queues = (QueueSpec("a", (Quota("A100", 4), Quota("K80", 8))),)
    jobs = jobs_of("a", 2, gpus=4)
    adm = admit(ClusterSnapshot(0.0, MIXED, {}, queues), jobs, FakeOracle(), choose_types=True)
    allowed = {j.name: j.allowed_gpu_types for j in adm.jobs}
    assert allowed == {"a-0": frozenset({"A100", "K80"}), "a-1": frozenset({"K80"})}
    pinned = admit(ClusterSnapshot(0.0, MIXED, {}, queues), jobs, FakeOracle())
    assert {j.name: j.allowed_gpu_types for j in pinned.jobs} == {"a-0": {"A100"}, "a-1": {"K80"}}


@dataclass
class _AllOnOne:
    """Test policy: every job on ``gpu_type`` where allowed (else its first allowed type), packed in order
    while GPUs are free; counts its calls. Ignores quotas, as a policy may."""

    gpu_type: str
    name: str = "all-on-one"
    calls: int = 0

    def allocate(self, snapshot: ClusterSnapshot, jobs: Sequence[Job], oracle: object) -> dict[str, Decision]:
        self.calls += 1
        free = {n.name: n.capacity_for_jobs for n in snapshot.nodes}
        types = {n.name: n.gpu_type for n in snapshot.nodes}
        out: dict[str, Decision] = {}
        for j in jobs:
            want = self.gpu_type if j.allows(self.gpu_type) else min(j.allowed_gpu_types or {self.gpu_type})
            node = next((n for n in free if types[n] == want and free[n] >= j.max_gpus), None)
            if node is None:
                out[j.name] = Decision(j.name, None, "full")
                continue
            free[node] -= j.max_gpus
            out[j.name] = Decision(j.name, alloc(j.name, want, j.gpus_per_replica, {node: j.max_replicas}))
        return out


def test_a_policy_choice_that_breaks_a_quota_is_decided_again_with_the_queue_pinned() -> None:
    # queue a owns 4 GPUs of each of A100, T4 and K80. a-0 is counted on A100 (fastest), a-1 on T4 (A100
    # used up); each may also use K80, where a has room for one 4-GPU job. A policy that puts both on K80
    # gives a 8 K80 (nominal 4): the round asks it again with a's jobs pinned to their counted types.
    # b (4 K80, its own) is not pinned and keeps K80
    queues = (
        QueueSpec("a", (Quota("A100", 4), Quota("T4", 4), Quota("K80", 4))),
        QueueSpec("b", (Quota("K80", 4),)),
    )
    jobs = [*jobs_of("a", 2, gpus=4), *jobs_of("b", 1, gpus=4, t0=5.0)]
    nodes = cluster(("A100", 1, 8), ("T4", 1, 8), ("K80", 2, 8))
    policy = _AllOnOne("K80")
    result = run_round(ClusterSnapshot(0.0, nodes, {}, queues), jobs, policy, FakeOracle())
    got = {n: d.allocation.gpu_type for n, d in result.decisions.items() if d.allocation is not None}
    assert got == {"a-0": "A100", "a-1": "T4", "b-0": "K80"} and policy.calls == 2


@st.composite
def _typed_tenants(draw: st.DrawFn) -> tuple[QueueSpec, ...]:
    def quota(t: str) -> Quota:
        limit = draw(st.one_of(st.none(), st.integers(0, 16)))
        return Quota(t, draw(st.integers(0, 8)), limit, draw(st.one_of(st.none(), st.integers(0, 8))))

    return tuple(
        QueueSpec(n, (quota("A100"), quota("K80")), cohort="c", weight=draw(st.sampled_from([1.0, 2.0])))
        for n in ["a", "b", "c"][: draw(st.integers(2, 3))]
    )


@settings(max_examples=60, deadline=None)
@given(_typed_tenants(), st.sampled_from(["fifo", "las", "hetero", "all-on-k80"]), st.data())
def test_per_type_quotas_hold_when_the_policy_chooses_types(
    specs: tuple[QueueSpec, ...], policy_name: str, data: st.DataObject
) -> None:
    # 16 A100 + 16 K80; jobs of 1, 2 or 4 GPUs that run 1-6x faster on A100. Round 1: the first queue
    # alone; round 2: the others submit; round 3: nothing new. After every round, per GPU type: no queue
    # above nominal + borrowing limit, and the cohort borrows no more than the unowned GPUs plus the idle
    # nominal, within their lending limits, of its members with no held-back job that would fit in it
    nodes = cluster(("A100", 2, 8), ("K80", 2, 8))
    policy = _AllOnOne("K80") if policy_name == "all-on-k80" else make_policy(policy_name)
    speed: dict[object, float] = {}

    def submit(queue: str, n: int, t0: float) -> list[Job]:
        out = []
        for i in range(n):
            j = Job(
                f"{queue}-{i}",
                t0 + i,
                1e5,
                gpus_per_replica=data.draw(st.sampled_from([1, 2, 4])),
                queue=queue,
            )
            speed[(j.name, "A100")] = data.draw(st.sampled_from([1.0, 2.0, 6.0]))
            out.append(j)
        return out

    first, *later = specs
    jobs = submit(first.name, data.draw(st.integers(1, 16)), 0.0)
    allocations: dict[str, Allocation] = {}
    for rnd in range(3):
        if rnd == 1:
            jobs += [j for s in later for j in submit(s.name, data.draw(st.integers(0, 8)), 100.0)]
        snap = ClusterSnapshot(float(rnd * 60), nodes, dict(allocations), specs)
        result = run_round(snap, jobs, policy, FakeOracle(speed))
        for a in result.actions:
            if a.after is None:
                allocations.pop(a.job, None)
            else:
                allocations[a.job] = a.after
        # per queue, the smallest job its quota holds back (not one the policy could not place on a node)
        smallest: dict[str, int] = {}
        for j in jobs:
            why = result.waiting.get(j.name)
            if why is not None and why.reason.startswith("queue "):
                smallest[j.queue] = min(smallest.get(j.queue, 1 << 30), j.min_gpus)
        for t in ("A100", "K80"):
            use = {s.name: 0 for s in specs}
            for name, held in allocations.items():
                if held.gpu_type == t:
                    use[name.split("-")[0]] += held.total_gpus
            lendable = max(0, 16 - sum(s.nominal(t) for s in specs))
            for s in specs:
                limit = s.borrowing_limit(t)
                assert limit is None or use[s.name] <= s.nominal(t) + limit, (rnd, t, use)
                idle, lend = max(0, s.nominal(t) - use[s.name]), s.lending_limit(t)
                if smallest.get(s.name, 1 << 30) <= idle:  # a job of its own could use it: never lent
                    continue
                lendable += idle if lend is None else min(lend, idle)
            borrowed = sum(max(0, use[s.name] - s.nominal(t)) for s in specs)
            assert borrowed <= lendable, (rnd, t, use)


# --- a waiting job larger than its queue's idle nominal: backfill, bounded; lend what it cannot use


def _big_and_small(now: float, queues: tuple[QueueSpec, ...], extra: Sequence[Job] = ()) -> RoundResult:
    # queue a (nominal 8 of 16 A100) runs a 4-GPU job; a-big (8 GPUs, waiting since t=0) does not fit the
    # 4 idle; four 1-GPU jobs of a, submitted later, would
    running = Job("a-run", 0.0, 1e6, gpus_per_replica=4, queue="a", last_change_time=0.0)
    big = Job("a-big", 0.0, 1e6, gpus_per_replica=8, queue="a")
    small = [Job(f"a-s{i}", 1.0 + i, 1e6, queue="a") for i in range(4)]
    held = {"a-run": alloc("a-run", "A100", 4, {"a100-000": 1})}
    snap = ClusterSnapshot(now, A100_16, held, queues)
    return run_round(snap, [running, big, *small, *extra], make_policy("fifo"), FakeOracle())


def test_smaller_jobs_backfill_past_a_big_one_then_it_holds_the_quota() -> None:
    queues = (QueueSpec("a", (Quota("A100", 8),)),)
    # a minute in: the small jobs start in the 4 idle GPUs of a's nominal, the big one waits
    early = _big_and_small(60.0, queues)
    assert sorted(n for n, d in early.decisions.items() if d.allocation) == [
        "a-run",
        "a-s0",
        "a-s1",
        "a-s2",
        "a-s3",
    ]
    # after RESERVE_AFTER_S the big job holds a's quota: no newer job of a starts, the running one keeps
    # running (nothing is preempted for it), and the small ones say why they wait
    late = _big_and_small(RESERVE_AFTER_S + 1.0, queues)
    assert sorted(n for n, d in late.decisions.items() if d.allocation) == ["a-run"]
    assert late.waiting["a-s0"].reason.startswith(
        "queue a: its quota is held for a-big (needs 8, waiting 1801 s)"
    )


def test_idle_nominal_a_waiting_job_cannot_use_is_lent_and_reclaimed_when_it_can() -> None:
    # a (nominal 8, cohort c) runs 4 GPUs and waits with an 8-GPU job that its 4 idle cannot hold; b
    # (nominal 8, runs 8) borrows: a's 4 idle are lent (before: kept idle for a-big)
    queues = (
        QueueSpec("a", (Quota("A100", 8, 0),), cohort="c"),
        QueueSpec("b", (Quota("A100", 8, None),), cohort="c"),
    )
    running = Job("a-run", 0.0, 1e6, gpus_per_replica=4, queue="a", last_change_time=0.0)
    big = Job("a-big", 0.0, 1e6, gpus_per_replica=8, queue="a")
    b_jobs = [Job(f"b-{i}", 1.0 + i, 1e6, gpus_per_replica=4, queue="b") for i in range(3)]
    held = {"a-run": alloc("a-run", "A100", 4, {"a100-000": 1})}
    held |= {
        f"b-{i}": alloc(f"b-{i}", "A100", 4, {"a100-001": 1} if i < 2 else {"a100-000": 1}) for i in range(2)
    }
    snap = ClusterSnapshot(60.0, A100_16, held, queues)
    result = run_round(snap, [running, big, *b_jobs], make_policy("fifo"), FakeOracle())
    assert result.decisions["b-2"].allocation is not None and result.decisions["a-big"].allocation is None
    # a-run finishes: a's nominal 8 is idle and a-big fits it, so b's borrowed job is reclaimed that round
    held = {n: a for n, a in held.items() if n != "a-run"} | {"b-2": result.decisions["b-2"].allocation}
    after = run_round(
        ClusterSnapshot(120.0, A100_16, held, queues), [big, *b_jobs], make_policy("fifo"), FakeOracle()
    )
    kinds = {a.job: a.kind for a in after.actions}
    assert kinds.get("b-2") is ActionKind.PREEMPT and kinds.get("a-big") is ActionKind.START


def test_job_its_queue_could_never_hold_waits_unresolvable_naming_the_limit() -> None:
    queues = (QueueSpec("a", (Quota("A100", 8),)),)
    j = Job("huge", 0.0, 1e6, gpus_per_replica=8, min_replicas=2, max_replicas=2, queue="a")
    why = run_round(
        ClusterSnapshot(0.0, A100_16, {}, queues), [j], make_policy("fifo"), FakeOracle()
    ).waiting["huge"]
    assert not why.resolvable
    assert why.reason.startswith(
        "queue a: the job needs 16 GPUs of one type but the queue may hold at most 8 A100"
    )
