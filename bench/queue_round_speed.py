"""Benchmark: one ``run_round`` with 1,000 jobs in 20 queues on 500 nodes, against the same round without
queues (the same-run baseline), per policy. Target: <= 1 s with queues.

The cluster, jobs and running allocations are ``bench/round_speed.py``'s (500 nodes x 8 GPUs of four
types, 1,000 jobs). The 20 queues share one cohort; each owns 1/40 of every GPU type (half the cluster is
nominal, the rest is lent) and may borrow without limit; weights 1..4; jobs join queues round-robin.
Run: ``python bench/queue_round_speed.py [--jobs N] [--nodes N] [--queues Q] [--repeat R]``.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace

from round_speed import TableOracle, initial_snapshot, make_cluster, make_jobs

from scheduler.core.queues import QueueSpec, Quota
from scheduler.core.round import RoundCosts, run_round
from scheduler.policies import make_policy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--queues", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--policies", default="fifo,las,srsf,hetero")
    args = parser.parse_args()
    now = 100_000.0
    nodes = make_cluster(args.nodes)
    names = [f"team-{i:02d}" for i in range(args.queues)]
    jobs = [
        replace(j, queue=names[i % len(names)]) for i, j in enumerate(make_jobs(args.jobs, seed=1, now=now))
    ]
    plain = initial_snapshot(nodes, jobs, now)
    per_type: dict[str, int] = {}
    for n in nodes:
        per_type[n.gpu_type] = per_type.get(n.gpu_type, 0) + n.gpus
    queues = tuple(
        QueueSpec(
            name,
            tuple(Quota(t, g // (2 * args.queues), None) for t, g in sorted(per_type.items())),
            cohort="all",
            weight=float(1 + i % 4),
        )
        for i, name in enumerate(names)
    )
    with_queues = replace(plain, queues=queues)
    print(
        f"cluster: {args.nodes} nodes x 8 GPUs, {args.jobs} jobs in {args.queues} queues, "
        f"{len(plain.allocations)} running; best of {args.repeat}"
    )
    costs = RoundCosts(restart_cost_s=30, resize_cost_s=10)
    for name in args.policies.split(","):
        times = {}
        for label, snap in (("no queues", plain), ("queues", with_queues)):
            best = float("inf")
            for _ in range(args.repeat):
                t = time.perf_counter()
                result = run_round(snap, jobs, make_policy(name), TableOracle(seed=2), costs=costs)
                best = min(best, time.perf_counter() - t)
            held = [d.allocation.total_gpus for d in result.decisions.values() if d.allocation is not None]
            times[label] = (best, len(held), sum(held))
        (b, rb, gb), (q, rq, gq) = times["no queues"], times["queues"]
        verdict = "ok" if q <= 1.0 else "SLOW"
        print(
            f"{name:8s} no queues {b:6.3f} s (running {rb:4d}, {gb:4d} GPUs)  "
            f"queues {q:6.3f} s (running {rq:4d}, {gq:4d} GPUs)  ratio {q / b:5.2f}  {verdict}"
        )


if __name__ == "__main__":
    main()
