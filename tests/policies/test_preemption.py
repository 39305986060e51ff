"""Preemption in the shared greedy allocation: only the evictions needed, least urgent first."""

from __future__ import annotations

from scheduler.core.decisions import ActionKind
from scheduler.core.round import RoundCosts, run_round
from scheduler.policies import make_policy
from tests.builders import FakeOracle, alloc, job, node, snapshot, with_

NODES = [node("n1").gpus(4).build(), node("n2").gpus(4).build()]


def kinds(result) -> dict[str, ActionKind]:  # type: ignore[no-untyped-def]
    return {a.job: a.kind for a in result.actions}


def test_srsf_evicts_only_what_it_needs_least_urgent_first() -> None:
    # V100 speed 3/GPU. Remaining service: a = 4 GPUs x 120000/12 s = 40000 GPU-s,
    # b = 4 x 240000/12 = 80000 GPU-s (least urgent), new = 4 x 1200/12 = 400 GPU-s (most urgent).
    a = job("a").gpus_per_replica(4).work(120_000).build()
    b = job("b").gpus_per_replica(4).work(240_000).build()
    new = job("new").gpus_per_replica(4).work(1_200).submitted(5).build()
    snap = snapshot(NODES, allocations=[alloc("a", "V100", 4, {"n1": 1}), alloc("b", "V100", 4, {"n2": 1})])
    res = run_round(snap, [a, b, new], make_policy("srsf"), FakeOracle(), costs=RoundCosts(30, 10))
    assert kinds(res) == {"a": ActionKind.KEEP, "b": ActionKind.PREEMPT, "new": ActionKind.START}
    assert "preempted by job new" in res.waiting["b"].reason


def test_margin_stops_near_equal_jobs_from_evicting_each_other() -> None:
    # 8 GPUs x 3 = 24 units/s: run = 8 x 60000/24 = 20000 GPU-s; new = 8 x 54000/24 = 18000 GPU-s.
    # SRSF evicts with margin 0, not with a 10000 GPU-s margin (20000 - 18000 < 10000)
    run = job("run").gpus_per_replica(8).work(60_000).build()
    new = job("new").gpus_per_replica(8).work(54_000).submitted(1).build()
    big = [node("n").gpus(8).build()]
    snap = snapshot(big, allocations=[alloc("run", "V100", 8, {"n": 1})])
    res = run_round(snap, [run, new], make_policy("srsf"), FakeOracle())
    assert kinds(res) == {"run": ActionKind.PREEMPT, "new": ActionKind.START}
    res = run_round(snap, [run, new], make_policy("srsf", {"preempt_margin_gpu_s": 10_000}), FakeOracle())
    assert kinds(res) == {"run": ActionKind.KEEP}


def test_non_preemptible_jobs_are_never_victims() -> None:
    low = job("low").gpus_per_replica(4).attained(100 * 3600).non_preemptible().build()  # LAS queue 2
    new = job("new").gpus_per_replica(4).submitted(5).build()  # queue 0
    snap = snapshot([node("n").gpus(4).build()], allocations=[alloc("low", "V100", 4, {"n": 1})])
    res = run_round(snap, [low, new], make_policy("las"), FakeOracle())
    assert kinds(res) == {"low": ActionKind.KEEP}
    assert res.waiting["new"].resolvable


def test_fifo_orders_by_priority_then_submit_time() -> None:
    one = [node("n").gpus(4).build()]
    early = job("early").gpus_per_replica(4).submitted(0).build()
    urgent = job("urgent").gpus_per_replica(4).submitted(10).priority(5).build()
    res = run_round(snapshot(one), [early, urgent], make_policy("fifo"), FakeOracle())
    assert kinds(res) == {"urgent": ActionKind.START}
    res = run_round(
        snapshot(one), [early, urgent], make_policy("fifo", {"use_priority": False}), FakeOracle()
    )
    assert kinds(res) == {"early": ActionKind.START}


def test_las_is_fifo_inside_a_queue_and_never_preempts_within_it() -> None:
    one = [node("n").gpus(4).build()]
    # both in queue 0 (< 1 GPU-hour); the running one arrived later but keeps its GPUs
    waiting_first = job("first").gpus_per_replica(4).submitted(0).build()
    running_later = job("later").gpus_per_replica(4).submitted(10).attained(600).build()
    snap = snapshot(one, allocations=[alloc("later", "V100", 4, {"n": 1})])
    res = run_round(snap, [waiting_first, running_later], make_policy("las"), FakeOracle())
    assert kinds(res) == {"later": ActionKind.KEEP}


def test_deadline_job_preempts_best_effort() -> None:
    one = [node("n").gpus(4).build()]
    # dl: 12000 units by t=1000 needs 12 units/s = all 4 V100 (4 x 3); be runs without a deadline
    be = job("be").gpus_per_replica(4).work(10**6).build()
    dl = job("dl").replicas(1, 4).work(12_000).deadline(1000).submitted(1).build()
    snap = snapshot(one, allocations=[alloc("be", "V100", 4, {"n": 1})])
    res = run_round(snap, [be, dl], make_policy("deadline"), FakeOracle())
    assert kinds(res) == {"be": ActionKind.PREEMPT, "dl": ActionKind.START}
    assert res.decisions["dl"].allocation is not None and res.decisions["dl"].allocation.replicas == 4


def test_elastic_does_not_resize_non_preemptible_jobs() -> None:
    one = [node("n").gpus(8).build()]
    j = job("j").replicas(1, 8).non_preemptible().build()
    snap = snapshot(one, allocations=[alloc("j", "V100", 1, {"n": 2})])
    res = run_round(snap, [j], make_policy("elastic"), FakeOracle())
    assert kinds(res) == {"j": ActionKind.KEEP}


def test_hetero_serves_the_job_with_the_larger_deficit() -> None:
    one = [node("n").gpus(1).build()]
    # both plan 0.5 of the one GPU; served has received 900 of 1000 s (0.9), starved 0 -> starved runs
    served = job("served").submitted(0).attained(900).build()
    starved = job("starved").submitted(0).build()
    snap = snapshot(one, now=1000, allocations=[alloc("served", "V100", 1, {"n": 1})])
    res = run_round(snap, [served, starved], make_policy("hetero"), FakeOracle())
    assert kinds(res) == {"served": ActionKind.PREEMPT, "starved": ActionKind.START}


# Aware SRSF's restart lease (scheduler.policies.srsf). Two GPU types (aware SRSF plans types only when
# there is a choice); every job may run on the V100s only. Remaining service at 3 units/s per V100:
# "long" 4e6 / 3 s, "longer" 8e6 / 3 s, "mid" 1e5 / 3 s, "new" 300 / 3 s: "new" is the most urgent.
KEEP, PREEMPT, START = ActionKind.KEEP, ActionKind.PREEMPT, ActionKind.START
LEASE_NODES = [node("v").gpus(2, "V100").build(), node("k").gpus(1, "K80").build()]


def _lease_round(config: dict[str, object], *, restarts: int = 10, since_s: float = 60, with_: str = "mid"):  # type: ignore[no-untyped-def]
    now = 10_000.0
    long = job("long").allowed("V100").work(4e6).restarts(restarts).changed_at(now - since_s).build()
    other = {
        "mid": job("mid").allowed("V100").work(1e5).changed_at(0).build(),
        "longer": job("longer").allowed("V100").work(8e6).changed_at(0).build(),
    }[with_]
    new = job("new").allowed("V100").work(300).submitted(now - 1).build()
    snap = snapshot(
        LEASE_NODES,
        now=now,
        allocations=[alloc("long", "V100", 1, {"v": 1}), alloc(with_, "V100", 1, {"v": 1})],
    )
    return run_round(snap, [long, other, new], make_policy("srsf", config), FakeOracle())


def test_a_job_restarted_many_times_is_not_evicted_again_within_its_lease() -> None:
    # unleased, "new" evicts the least urgent job, "long"
    unleased: list[tuple[dict[str, object], int, float]] = [
        ({"lease_after_restarts": None}, 10, 60.0),
        ({"heterogeneity": "agnostic"}, 10, 60.0),  # the baseline has no lease
        ({}, 9, 60.0),  # restarted fewer than 10 times (the default)
        ({}, 10, 600.0),  # restarted 600 s ago: its lease (the default 600 s) is over
        ({"lease_s": 0}, 10, 60.0),
    ]
    for config, restarts, since_s in unleased:
        res = _lease_round(config, restarts=restarts, since_s=since_s)
        assert kinds(res) == {"long": PREEMPT, "mid": KEEP, "new": START}, (config, restarts, since_s)
    # leased: "long" keeps its GPU, and "mid" (less remaining service) is not evicted in its place
    res = _lease_round({})
    assert kinds(res) == {"long": KEEP, "mid": KEEP}
    assert "holds a lease" in res.waiting["new"].reason
    res = _lease_round({"lease_after_restarts": 3, "lease_s": 3600}, restarts=3, since_s=3000)
    assert kinds(res) == {"long": KEEP, "mid": KEEP}


def test_a_lease_does_not_shield_jobs_ranked_behind_it() -> None:
    # "longer" has more remaining service than the leased "long": it is evicted as before
    res = _lease_round({}, with_="longer")
    assert kinds(res) == {"long": KEEP, "longer": PREEMPT, "new": START}


def _victim_round(  # type: ignore[no-untyped-def]
    heterogeneity: str, running: list[tuple[str, str, int, str, float]], new_gpus: int
):
    """One LAS round on two H100 servers, a V100 server and a T4 server (8 GPUs each): ``running`` as
    (name, type, GPUs, node, attained GPU-hours), measured, submitted in that order; 0 GPU-hours is
    LAS queue 0, ahead of "new" (not a victim), 10 or more queue 2. "new" (queue 0) wants
    ``new_gpus`` GPUs, runs 3/s per GPU on H100, 2 on V100 and not on T4."""
    nodes = [
        node("h0").gpus(8, "H100").build(),
        node("h1").gpus(8, "H100").build(),
        node("v0").gpus(8, "V100").build(),
        node("t0").gpus(8, "T4").build(),
    ]
    jobs = [
        with_(
            job(n).gpus_per_replica(g).work(1e9).progress(10, 10).attained(h * 3600).submitted(i).build(),
            observed_throughput=float(g),
        )
        for i, (n, _, g, _, h) in enumerate(running)
    ]
    new = job("new").gpus_per_replica(new_gpus).work(1e9).submitted(50).build()
    allocs = [alloc(n, t, g, {at: 1}) for n, t, g, at, _ in running]
    speed = {("new", "H100"): 3.0, ("new", "V100"): 2.0, ("new", "T4"): 0.0, "T4": 0.5}
    snap = snapshot(nodes, now=100, allocations=allocs)
    policy = make_policy("las", {"heterogeneity": heterogeneity})
    res = run_round(snap, [*jobs, new], policy, FakeOracle(speed=speed), costs=RoundCosts(30))
    return {a.job: a.kind for a in res.actions}


def test_aware_las_evicts_the_most_served_job_over_all_types() -> None:
    # the H100 servers run two queue-2 gangs served 20 and 30 GPU-hours, the V100 server one served
    # 500 (all V100s for days), the T4 server a job ahead of the newcomer. A newcomer that prefers
    # H100s evicts the job LAS serves last, the most served, wherever it runs: on the H100s a gang
    # restarted there minutes ago would go and wait behind every newer job
    running = [
        ("head", "H100", 8, "h0", 20.0),
        ("second", "H100", 8, "h1", 30.0),
        ("long", "V100", 8, "v0", 500.0),
        ("t4", "T4", 8, "t0", 0.0),
    ]
    kinds = _victim_round("aware", running, 8)
    assert kinds["long"] is ActionKind.PREEMPT and kinds["new"] is ActionKind.START
    assert kinds["head"] is ActionKind.KEEP and kinds["second"] is ActionKind.KEEP
    # ``ordered`` (the baseline) evicts on the first type of its order, H100, where both gangs have
    # LAS's rank (queue 2): by name, the head of the queue goes
    kinds = _victim_round("ordered", running, 8)
    assert kinds["head"] is ActionKind.PREEMPT and kinds["long"] is ActionKind.KEEP


def test_aware_las_frees_a_server_with_the_fewest_gpus_evicted() -> None:
    # one H100 server runs a queue-2 gang, the other a single 1-GPU job (also queue 2); the V100 and
    # T4 servers run jobs ahead of the newcomer. An 8-GPU newcomer evicts the 1-GPU job (it may restart
    # at once elsewhere), not the gang
    running = [
        ("small", "H100", 1, "h1", 20.0),
        ("gang", "H100", 8, "h0", 20.0),
        ("v", "V100", 8, "v0", 0.0),
        ("t4", "T4", 8, "t0", 0.0),
    ]
    kinds = _victim_round("aware", running, 8)
    assert kinds["small"] is ActionKind.PREEMPT and kinds["new"] is ActionKind.START
    assert kinds["gang"] is ActionKind.KEEP
    # ``ordered`` evicts the least urgent job of the H100s, by name the gang
    kinds = _victim_round("ordered", running, 8)
    assert kinds["gang"] is ActionKind.PREEMPT and kinds["small"] is ActionKind.KEEP
