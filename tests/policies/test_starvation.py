"""LAS's defences of long gangs: consolidation of spread gangs, and the starvation reservation (EASY
backfilling) on the shared greedy walk; checked through ``run_round`` and the simulator's engine."""

from __future__ import annotations

from collections.abc import Sequence

from scheduler.core.decisions import ActionKind
from scheduler.core.round import run_round
from scheduler.core.types import Job, PlacementShape
from scheduler.policies import make_policy
from scheduler.sim.engine import Engine, EngineConfig
from tests.builders import FakeOracle, alloc, job, node, snapshot


def test_las_moves_a_spread_gang_onto_one_node_when_it_pays() -> None:
    nodes = [node("a").gpus(4).build(), node("b").gpus(4).build()]
    big = job("big").replicas(4).work(100_000).submitted(0).build()
    snap = snapshot(nodes, now=100, allocations=[alloc("big", "V100", 1, {"a": 2, "b": 2})])
    oracle = FakeOracle(cross_node_penalty=0.25)  # spread over two nodes: 4x slower
    res = run_round(snap, [big], make_policy("las"), oracle)
    [action] = res.actions
    assert action.after is not None and action.after.num_nodes == 1 and action.after.total_gpus == 4
    # opted out, or when the move would not pay (no speed-up), it keeps its GPUs
    res = run_round(snap, [big], make_policy("las", {"consolidate": False}), oracle)
    assert [a.kind for a in res.actions] == [ActionKind.KEEP]
    res = run_round(snap, [big], make_policy("las"), FakeOracle(cross_node_penalty=1.0))
    assert [a.kind for a in res.actions] == [ActionKind.KEEP]


def _starvation_round(config: dict[str, object]) -> dict[str, str]:
    # one 4-GPU node: r1 (2 GPUs, done in 100 s) and r2 (1 GPU, done in 50 s) run; 1 GPU is free.
    # big (4 GPUs, 1,000 s of work) has waited 10,000 s: starving at K = 1; the node is held for it
    # from 100 s. long (1 GPU, 5,000 s) is walked first but would delay big; short (30 s) would not.
    nodes = [node("a").gpus(4).build()]
    jobs = [
        job("r1").replicas(2).work(200).submitted(0).build(),
        job("r2").replicas(1).work(50).submitted(0).build(),
        job("big").replicas(4).work(4_000).submitted(0).build(),
        job("long").replicas(1).work(5_000).submitted(1).build(),
        job("short").replicas(1).work(30).submitted(2).build(),
    ]
    snap = snapshot(
        nodes,
        now=10_000,
        allocations=[alloc("r1", "V100", 1, {"a": 2}), alloc("r2", "V100", 1, {"a": 1})],
    )
    res = run_round(snap, jobs, make_policy("las", config), FakeOracle())
    return {d.job: ("runs" if d.allocation else d.reason) for d in res.decisions.values()}


def test_starving_gang_holds_the_node_and_only_jobs_done_in_time_backfill() -> None:
    off = _starvation_round({})
    assert (off["long"], off["short"]) == ("runs", off["short"])  # off: the first small job takes the GPU
    assert off["short"] != "runs"
    on = _starvation_round({"starvation_factor": 1.0})
    assert on["short"] == "runs"  # finishes (30 s) before the node is needed (100 s): backfilled
    assert "held for starving job big" in on["long"]
    assert "starving" in on["big"] and "held for it" in on["big"]


class _PerGpu:
    """Fake truth: 1 work unit per second per GPU, wherever the job runs."""

    def throughput(self, queries: Sequence[tuple[Job, PlacementShape]]) -> list[float]:
        return [float(shape.num_gpus) for _, shape in queries]


def _first_start_of_big(config: dict[str, object]) -> float:
    # one 4-GPU node. 1-GPU jobs of 35 s arrive every 10 s until t = 2,000 (3.5 GPUs busy on average,
    # never 4 free at once); a 4-GPU job of 100 s arrives at t = 1, behind the first ones
    jobs = [job(f"s{i:03d}").replicas(1).work(35).submitted(10.0 * i).build() for i in range(200)]
    jobs.append(job("big").replicas(4).work(400).submitted(1).build())
    engine = Engine(
        [node("n0").gpus(4, "V100").build()],
        jobs,
        make_policy("las", config),
        _PerGpu(),
        _PerGpu(),
        EngineConfig(round_seconds=10.0),
        run_round=run_round,
        ideal_durations={j.name: j.total_work / j.max_gpus for j in jobs},
    )
    [big] = [r for r in engine.run().records if r.name == "big"]
    assert big.first_start is not None and big.finish is not None  # it always finishes in the end
    return big.first_start


def test_a_long_gang_starts_while_small_jobs_keep_arriving() -> None:
    # without the rule small jobs keep taking each GPU as it frees: big waits until the arrivals stop
    assert _first_start_of_big({}) > 1_900
    # with it, big starts soon after it has waited its own run time (100 s): no starvation
    assert _first_start_of_big({"starvation_factor": 1.0}) < 300
