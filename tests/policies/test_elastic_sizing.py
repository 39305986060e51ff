"""Elastic sizing inside the ordering policies (``scheduler.policies.elastic_sizing``), as a user sees it."""

from __future__ import annotations

import dataclasses

import pytest

from scheduler.core.decisions import ActionKind
from scheduler.core.round import RoundCosts, run_round
from scheduler.policies import make_policy
from scheduler.policies.base import replica_options, type_infos
from scheduler.policies.elastic_sizing import resize_pays, size_elastic
from scheduler.policies.greedy import Request
from tests.builders import FakeOracle, alloc, cluster, job, node, snapshot

HOUR = 3600.0


def sizes(result) -> dict[str, int]:  # type: ignore[no-untyped-def]
    return {a.job: a.after.replicas for a in result.actions if a.after is not None}


@pytest.mark.parametrize("name", ["las", "srsf", "fifo", "ftf"])
def test_two_elastic_jobs_share_the_gpus_instead_of_one_taking_its_largest_size(name: str) -> None:
    nodes = [node("a").gpus(8).build()]
    # throughput ~ sqrt(GPUs): two jobs of 1..8 replicas on 8 GPUs run 4 + 4, not 8 + nothing
    jobs = [job("x").replicas(1, 8).build(), job("y").replicas(1, 8).submitted(1).build()]
    res = run_round(snapshot(nodes), jobs, make_policy(name), FakeOracle(scaling=0.5))
    assert sizes(res) == {"x": 4, "y": 4}
    # agnostic (the baseline: GPUs counted, no performance model) still gives one job its largest size
    agnostic = make_policy(name, {"heterogeneity": "agnostic"})
    res = run_round(snapshot(nodes), jobs, agnostic, FakeOracle(scaling=0.5))
    assert sorted(sizes(res).values()) == [8]


def test_strict_fifo_sizes_only_the_jobs_ahead_of_one_that_cannot_start() -> None:
    nodes = [node("a").gpus(8).build()]
    # "head" (rigid, 4 GPUs) cannot start while "runner" holds 6 of the 8; strict FIFO: "late" (elastic)
    # behind it waits too, though it could start on the 2 free GPUs, and "runner" does not grow into them
    # (the head would wait for ever)
    runner = job("runner").replicas(2, 8).work(100 * HOUR).build()
    head = job("head").gpus_per_replica(4).submitted(1).build()
    late = job("late").replicas(1, 8).submitted(2).build()
    snap = snapshot(nodes, now=10, allocations=[alloc("runner", "V100", 1, {"a": 6})])
    # linear scaling: growing "runner" 6 -> 8 would pay (1.33x for one 30 s restart)
    costs = RoundCosts(restart_cost_s=30)
    res = run_round(snap, [runner, head, late], make_policy("fifo"), FakeOracle(), costs=costs)
    assert sizes(res) == {"runner": 6}
    # with backfill, "late" starts on the 2 free GPUs (its gain per GPU beats runner's, and runner's
    # 6 -> 7 would be under the 1.25x resize bar)
    backfill = make_policy("fifo", {"backfill": True})
    res = run_round(snap, [runner, head, late], backfill, FakeOracle(), costs=costs)
    assert sizes(res) == {"runner": 6, "late": 2}


def test_a_running_elastic_job_grows_into_free_gpus_only_when_it_pays() -> None:
    nodes = [node("a").gpus(8).build()]
    x = job("x").replicas(1, 8).work(100 * HOUR).build()
    snap = snapshot(nodes, now=10, allocations=[alloc("x", "V100", 1, {"a": 2})])
    # 2 -> 8 replicas, linear scaling: 4x faster for one 30 s restart
    res = run_round(snap, [x], make_policy("las"), FakeOracle(), costs=RoundCosts(restart_cost_s=30))
    assert [(a.kind, sizes(res)) for a in res.actions] == [(ActionKind.RESIZE, {"x": 8})]
    # nearly done (10 s of work left at 2 GPUs): the restart would cost more than the growth saves
    done = dataclasses.replace(x, progress=x.total_work - 10 * 2 * 3.0)
    res = run_round(snap, [done], make_policy("las"), FakeOracle(), costs=RoundCosts(restart_cost_s=30))
    assert [a.kind for a in res.actions] == [ActionKind.KEEP]


def test_a_job_las_ranks_ahead_shrinks_a_running_elastic_job_instead_of_evicting_it() -> None:
    nodes = [node("a").gpus(8).build()]
    # "old" has 20 GPU-hours of service (LAS queue 2) and runs on all 8 GPUs; "new" (queue 0) arrives
    old = job("old").replicas(2, 8).work(1000 * HOUR).attained(20 * HOUR).build()
    new = job("new").replicas(1, 8).submitted(5).build()
    snap = snapshot(nodes, now=100, allocations=[alloc("old", "V100", 1, {"a": 8})])
    res = run_round(snap, [old, new], make_policy("las"), FakeOracle(scaling=0.5))
    kinds = {a.job: a.kind for a in res.actions}
    assert kinds == {"old": ActionKind.RESIZE, "new": ActionKind.START}
    assert sizes(res) == {"old": 7, "new": 1}
    # a job of the same LAS queue waits: LAS does not preempt within a queue, nor does sizing shrink
    peer = job("peer").replicas(1, 8).submitted(5).attained(20 * HOUR).build()
    res = run_round(snap, [old, peer], make_policy("las"), FakeOracle(scaling=0.5))
    assert {a.job: a.kind for a in res.actions} == {"old": ActionKind.KEEP}


def test_an_elastic_job_goes_to_the_type_where_it_runs_fast_at_the_size_it_gets() -> None:
    # "poor" barely scales (3% faster on 16 GPUs than on 1) and is 5x faster on an H100 than on a T4 at
    # the size it gets; planned at its largest size, 16 T4s outweighed one H100 and it went to the T4s
    nodes = cluster(("T4", 2, 8), ("H100", 1, 8))
    poor = job("poor").replicas(1, 16).build()
    res = run_round(snapshot(nodes), [poor], make_policy("las"), FakeOracle(scaling=0.01))
    (a,) = res.actions
    assert a.after is not None and a.after.gpu_type == "H100"


def test_rigid_rounds_are_left_alone() -> None:
    nodes = cluster(("V100", 2, 8), ("K80", 2, 8))
    snap = snapshot(nodes)
    jobs = [job(f"r{i}").replicas(2).submitted(i).build() for i in range(3)]
    requests = [Request(j, ("V100", "K80"), replica_options(j), rank=float(i)) for i, j in enumerate(jobs)]
    out = size_elastic(snap, requests, FakeOracle(), type_infos(snap), preemptive=True)
    assert out == requests


def test_resize_pays_arithmetic() -> None:
    j = job("j").work(1000.0).build()
    # 2 -> 3 units/s: gain 1 x min(3600, 1000 / 3) = 333 units against 3 x 30 s = 90: pays
    assert resize_pays(j, 2.0, 3.0, restart_cost_s=30, horizon_s=3600) is True
    # the same with a 120 s restart: 360 > 333, it does not
    assert resize_pays(j, 2.0, 3.0, restart_cost_s=120, horizon_s=3600) is False
    # under MIN_RESIZE_SPEEDUP (1.25x, as for a move) never, however long the job
    long = job("long").work(1e9).build()
    assert resize_pays(long, 2.0, 2.49, restart_cost_s=30, horizon_s=3600) is False


def test_a_newcomer_shrinks_running_jobs_on_one_gpu_type_only() -> None:
    # both types full of queue-2 elastic jobs above their minimum; the queue-0 newcomer needs 1 GPU:
    # one of them gives up a replica, not both
    nodes = cluster(("V100", 1, 8), ("K80", 1, 8))
    a = job("a").replicas(2, 8).work(1000 * HOUR).attained(20 * HOUR).build()
    b = job("b").replicas(2, 8).work(1000 * HOUR).attained(20 * HOUR).submitted(1).build()
    new = job("new").replicas(1, 8).submitted(5).build()
    allocs = [alloc("a", "V100", 1, {"v100-000": 8}), alloc("b", "K80", 1, {"k80-000": 8})]
    res = run_round(
        snapshot(nodes, now=100, allocations=allocs), [a, b, new], make_policy("las"), FakeOracle()
    )
    kinds = sorted((a.job, a.kind.name) for a in res.actions if a.kind is not ActionKind.KEEP)
    assert len([k for k in kinds if k[1] == "RESIZE"]) == 1 and ("new", "START") in kinds


def test_a_growing_job_evicted_in_the_walk_restarts_at_once_at_a_size_that_fits() -> None:
    # V100 nodes n1 (2 GPUs), n2 (4), n3 (4). "grower" (elastic 1..3 x 2 GPUs) runs 2 replicas on n2;
    # "done" (finished) still holds n3's 4; "big" (rigid 4 x 2 = 8 GPUs, less remaining service) waits.
    # Sizing's plan sees 10 - 4 - 4 = 2 GPUs free: "big" cannot be admitted there, so "grower" is planned
    # to grow to 3 on them. The walk frees "done"'s 4 (6 free, 2 short of 8) and "big" evicts "grower":
    # n2 4 + n3 4. "grower"'s 1 replica still fits on n1's 2 free GPUs: it restarts there at once, rather
    # than waiting with GPUs free for it (its growth request used to stop at the 2 replicas it held).
    nodes = [node(n).gpus(g, "V100").build() for n, g in (("n1", 2), ("n2", 4), ("n3", 4))]
    grower = job("grower").replicas(1, 3).gpus_per_replica(2).work(1.0).allowed("V100").build()
    done = job("done").rigid().gpus_per_replica(4).replicas(1).work(1.0).progress(1.0).non_preemptible()
    big = job("big").rigid().replicas(4).gpus_per_replica(2).work(1.0).progress(0.5, checkpoint=0.25)
    jobs = [done.build(), big.non_preemptible().build(), grower]
    running = [alloc("grower", "V100", 2, {"n2": 2}), alloc("done", "V100", 4, {"n3": 1})]
    oracle = FakeOracle(speed={"V100": 1.0}, scaling=0.8)
    res = run_round(snapshot(nodes, allocations=running), jobs, make_policy("srsf"), oracle)
    after = {a.job: (a.kind, a.after) for a in res.actions}
    assert after["big"] == (ActionKind.START, alloc("big", "V100", 2, {"n2": 2, "n3": 2}))
    assert after["grower"] == (ActionKind.RESIZE, alloc("grower", "V100", 2, {"n1": 1}))
    assert "grower" not in res.waiting


@pytest.mark.parametrize("name", ["las", "srsf", "fifo", "ftf"])
def test_an_elastic_job_is_not_planned_on_a_type_whose_nodes_cannot_hold_one_replica(name: str) -> None:
    # "j" is elastic 1..2 replicas x 2 GPUs, 2x faster on A100 than on K80. The A100s are two 1-GPU nodes:
    # 2 A100 GPUs free, but no node of them holds a 2-GPU replica. n1 has 2 K80s free (n0's one K80 is
    # taken outside perfsched). Sizing counts GPUs per type, so it planned "j" on the A100s and the walk
    # then tried only them: "j" waited for ever with its smallest gang (1 x 2 K80s on n1) free.
    nodes = [
        node("n0").gpus(1, "K80").external(1).build(),
        node("n1").gpus(2, "K80").build(),
        node("n2").gpus(1, "A100").build(),
        node("n3").gpus(1, "A100").build(),
    ]
    j = job("j").replicas(1, 2).gpus_per_replica(2).work(1.0).build()
    oracle = FakeOracle(speed={("j", "K80"): 1.0, ("j", "A100"): 2.0}, scaling=0.5)
    res = run_round(snapshot(nodes), [j], make_policy(name), oracle)
    assert res.waiting == {}
    assert [(a.kind, a.after) for a in res.actions] == [(ActionKind.START, alloc("j", "K80", 2, {"n1": 1}))]


@pytest.mark.parametrize(("name", "config"), [("fifo", {"backfill": True}), ("las", {})])
def test_an_elastic_job_whose_planned_gpus_hold_no_whole_replica_starts_on_another_type(
    name: str, config: dict[str, object]
) -> None:
    # V100: n1 has 1 GPU, n3 has 3 (of 4; one taken outside perfsched); A100: n2 has 2. "first" (rigid,
    # 2 GPUs, V100 only; submitted first, so FIFO and LAS walk it first) takes 2 of n3's. Sizing counts
    # GPUs per type: 4 - 2 = 2 V100s left, so it plans "elastic" (1..2 x 2 GPUs, twice as fast on V100
    # as on A100) there; but they are one GPU on n1 and one on n3, no node holds its 2-GPU replica. It
    # must start on n2's A100s instead of waiting.
    nodes = [
        node("n1").gpus(1, "V100").build(),
        node("n2").gpus(2, "A100").build(),
        node("n3").gpus(4, "V100").external(1).build(),
    ]
    first = job("first").replicas(1).gpus_per_replica(2).work(1.0).allowed("V100").non_preemptible().build()
    elastic = job("elastic").replicas(1, 2).gpus_per_replica(2).work(1.0).submitted(1).build()
    speeds = {("first", "V100"): 1.0, ("elastic", "V100"): 2.0, ("elastic", "A100"): 1.0}
    res = run_round(snapshot(nodes), [first, elastic], make_policy(name, config), FakeOracle(speed=speeds))
    assert res.waiting == {}
    after = {a.job: a.after for a in res.actions}
    assert after == {
        "first": alloc("first", "V100", 2, {"n3": 1}),
        "elastic": alloc("elastic", "A100", 2, {"n2": 1}),
    }
