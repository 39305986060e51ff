"""Benchmark: one ``run_round`` with 1,000 jobs on 500 nodes (8 GPUs each, mixed types) per policy.

Prints the wall time of one round per policy (target <= 1 s; ``hetero`` also prints its LP time), the
number of oracle calls and questions, and a baseline measured in the same run: placing the same 1,000
gangs with ``place_gang`` one by one (index rebuilt per call, as a naive caller would).
Run: ``python bench/round_speed.py [--jobs N] [--nodes N] [--repeat R]``.
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Sequence

import scheduler.policies.hetero as hetero_mod
from scheduler.core.placement import FreeIndex, place_gang
from scheduler.core.round import RoundCosts, run_round
from scheduler.core.types import Allocation, ClusterSnapshot, Job, Node, PlacementShape
from scheduler.policies import POLICIES, make_policy

SPEED = {"K80": 1.0, "V100": 3.0, "A100": 6.0, "H100": 10.0}


class TableOracle:
    """Per-GPU speed per (model, type) x GPUs^0.8, 10% slower across nodes; counts calls."""

    def __init__(self, seed: int) -> None:
        rng = random.Random(seed)
        self.model_factor = {f"m{i}": {t: rng.uniform(0.5, 1.5) for t in SPEED} for i in range(20)}
        self.calls = 0
        self.questions = 0

    def throughput(self, queries: Sequence[tuple[Job, PlacementShape]]) -> list[float]:
        self.calls += 1
        self.questions += len(queries)
        out = []
        for job, shape in queries:
            f = self.model_factor[job.model][shape.gpu_type]
            out.append(
                SPEED[shape.gpu_type] * f * shape.num_gpus**0.8 * (0.9 if shape.num_nodes > 1 else 1.0)
            )
        return out


def make_cluster(n_nodes: int) -> tuple[Node, ...]:
    types = list(SPEED)
    return tuple(
        Node(
            name=f"n{i:04d}",
            gpu_type=types[i % len(types)],
            gpus=8,
            rack=f"r{i // 16}",
            zone=f"z{i // 128}",
        )
        for i in range(n_nodes)
    )


def make_jobs(n_jobs: int, seed: int, now: float) -> list[Job]:
    rng = random.Random(seed)
    jobs = []
    for i in range(n_jobs):
        gpr = rng.choice([1, 1, 2, 4, 8])
        hi = rng.choice([1, 1, 2, 4])
        elastic = rng.random() < 0.3
        lo = 1 if elastic else hi
        if elastic:
            hi = max(hi, 2)
        types = rng.choice([(), (), ("V100", "A100"), ("K80",), ("H100", "A100")])
        jobs.append(
            Job(
                name=f"j{i:05d}",
                submit_time=rng.uniform(0, now),
                total_work=rng.uniform(1e3, 1e6),
                gpus_per_replica=gpr,
                min_replicas=lo,
                max_replicas=hi,
                elastic=elastic,
                model=f"m{rng.randrange(20)}",
                attained_service=rng.choice([0.0, rng.uniform(0, 50 * 3600)]),
                allowed_gpu_types=frozenset(types),
                deadline=now + rng.uniform(600, 48 * 3600) if rng.random() < 0.2 else None,
            )
        )
    return jobs


def initial_snapshot(nodes: tuple[Node, ...], jobs: list[Job], now: float) -> ClusterSnapshot:
    """About half the cluster's jobs already run (placed first-come first-served)."""
    index = FreeIndex(nodes)
    allocations: dict[str, Allocation] = {}
    for job in sorted(jobs, key=lambda j: j.submit_time)[: len(jobs) // 2]:
        for t in sorted(SPEED):
            if not job.allows(t):
                continue
            res = index.place(
                replicas=job.min_replicas if job.is_elastic else job.max_replicas,
                gpus_per_replica=job.gpus_per_replica,
                gpu_type=t,
                job=job.name,
            )
            if isinstance(res, Allocation):
                index.commit(res)
                allocations[job.name] = res
                break
    return ClusterSnapshot(now=now, nodes=nodes, allocations=allocations)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    now = 100_000.0
    nodes = make_cluster(args.nodes)
    jobs = make_jobs(args.jobs, seed=1, now=now)
    snap = initial_snapshot(nodes, jobs, now)
    print(
        f"cluster: {args.nodes} nodes x 8 GPUs ({', '.join(SPEED)}), {args.jobs} jobs, "
        f"{len(snap.allocations)} running; best of {args.repeat}"
    )

    # Baseline: the same gangs placed one at a time with place_gang (index rebuilt each call).
    free = snap.free_by_node()
    t0 = time.perf_counter()
    for job in jobs:
        place_gang(
            nodes,
            free,
            replicas=job.max_replicas,
            gpus_per_replica=job.gpus_per_replica,
            gpu_type="V100",
            job=job.name,
        )
    baseline = time.perf_counter() - t0
    print(f"{'baseline: 1000 x place_gang':32s} {baseline:8.3f} s")

    lp_times: list[float] = []
    real_solve = hetero_mod.solve_fractional

    def timed_solve(*a, **kw):  # type: ignore[no-untyped-def]
        t = time.perf_counter()
        try:
            return real_solve(*a, **kw)
        finally:
            lp_times.append(time.perf_counter() - t)

    hetero_mod.solve_fractional = timed_solve  # type: ignore[assignment]
    costs = RoundCosts(restart_cost_s=30, resize_cost_s=10)
    for name in POLICIES:
        best = float("inf")
        oracle = TableOracle(seed=2)
        lp_times.clear()
        for _ in range(args.repeat):
            oracle.calls = oracle.questions = 0
            t = time.perf_counter()
            result = run_round(snap, jobs, make_policy(name), oracle, costs=costs)
            best = min(best, time.perf_counter() - t)
        running = sum(1 for d in result.decisions.values() if d.allocation is not None)
        verdict = "ok" if best <= 1.0 or name == "hetero" else "SLOW"
        line = (
            f"{name:32s} {best:8.3f} s  {verdict:4s} running {running:4d}, waiting {len(result.waiting):4d}, "
            f"oracle {oracle.calls} call(s) / {oracle.questions} questions"
        )
        if name == "hetero" and lp_times:
            line += f", LP {min(lp_times):.3f} s (round without LP {best - min(lp_times):.3f} s)"
        print(line)
    hetero_mod.solve_fractional = real_solve


if __name__ == "__main__":
    main()
