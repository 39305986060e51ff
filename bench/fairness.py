"""Benchmark: fair share across tenant queues on a heterogeneous cluster, in delivered throughput.

Three tenants (the three busiest Philly virtual clusters of the shipped trace, ``group`` column) share
``gavel-heterogeneous`` (36 K80 + 36 P100 + 36 V100) through queues with weights 1:1:2, no nominal quota
(everything is lent from the cohort) and unlimited borrowing, so only fair share decides. Every job is
submitted at time 0 (each tenant is backlogged); rounds run every ``--round`` seconds with ``las`` inside
the queues and advance each running job by its true throughput (the Gavel/perfmodel ground truth table).

Measured in every round in which all three tenants still have jobs waiting: each tenant's delivered
throughput, normalised per job to its fastest GPU type at the same GPU count ("fastest-type GPU
equivalents"), and its GPUs. Reported: each tenant's share of the total divided by its weight share
(1.00 = exactly fair), for three settings measured in the same run: ``fairShare: throughput``,
``fairShare: gpus`` and no queues (the baseline). Target: throughput fairness within 10% of 1:1:2.

Run: ``python bench/fairness.py [--jobs-per-tenant 80] [--rounds 40] [--round 360]``.
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from dataclasses import dataclass, replace

from perfmodel.truth import GroundTruth
from scheduler.core.queues import FairShare, QueueSpec, Quota
from scheduler.core.round import RoundCosts, run_round
from scheduler.core.types import Allocation, ClusterSnapshot, Job, Node, PlacementShape
from scheduler.oracles.table import TableOracle
from scheduler.policies import make_policy
from scheduler.sim.cluster import load_cluster_spec, spec_to_nodes
from scheduler.sim.trace_jobs import WorkloadOptions, build_workload
from scheduler.sim.traces import load_trace

WEIGHTS = (1.0, 1.0, 2.0)


def _shape(alloc: Allocation, nodes: dict[str, Node]) -> PlacementShape:
    per_node = max(r for _, r in alloc.replicas_per_node) * alloc.gpus_per_replica
    slow = min(nodes[n].network_gbps for n in alloc.nodes)
    return PlacementShape(alloc.gpu_type, alloc.total_gpus, alloc.num_nodes, per_node, network_gbps=slow)


def workload(per_tenant: int, seed: int) -> tuple[list[Job], list[str]]:
    trace = load_trace("philly-10k")
    groups = [g for g, _ in Counter(j.group for j in trace.jobs if j.num_gpus <= 8).most_common(3)]
    rows = []
    for g in groups:
        rows += [j for j in trace.jobs if j.group == g and j.num_gpus <= 8][:per_tenant]
    rows = [replace(r, submit_time=0.0) for r in rows]
    built = build_workload(rows, GroundTruth.load(), WorkloadOptions(seed=seed, reference_gpu="V100"))
    return list(built.jobs), groups


def best_rate(jobs: list[Job], oracle: TableOracle, types: list[str]) -> dict[str, float]:
    """Each job's best throughput per GPU at its size over the GPU types (packed on 4-GPU nodes)."""
    asks = [(j, PlacementShape(t, j.min_gpus, -(-j.min_gpus // 4))) for j in jobs for t in types]
    out: dict[str, float] = {}
    for (j, shape), tput in zip(asks, oracle.throughput(asks), strict=True):
        out[j.name] = max(out.get(j.name, 0.0), tput / shape.num_gpus)
    return out


@dataclass(frozen=True)
class Outcome:
    setting: str
    rounds_measured: int
    #: each tenant's share of the delivered normalised throughput / its weight share (1.0 = fair)
    throughput_share_over_target: list[float]
    #: each tenant's share of the GPUs held / its weight share
    gpu_share_over_target: list[float]
    normalised_throughput_per_round: float
    cpu_s: float


def run(
    setting: str, jobs: list[Job], groups: list[str], nodes: tuple[Node, ...], rounds: int, dt: float
) -> Outcome:
    oracle = TableOracle(GroundTruth.load())
    node_map = {n.name: n for n in nodes}
    queues: tuple[QueueSpec, ...] = ()
    if setting != "none":
        fs = FairShare.THROUGHPUT if setting == "throughput" else FairShare.GPUS
        queues = tuple(
            QueueSpec(g, (Quota("*", 0, None),), cohort="all", weight=w, fair_share=fs)
            for g, w in zip(groups, WEIGHTS, strict=True)
        )
    best = best_rate(jobs, oracle, sorted({n.gpu_type for n in nodes}))
    policy = make_policy("las")
    live = {j.name: j for j in jobs}
    allocs: dict[str, Allocation] = {}
    delivered = dict.fromkeys(groups, 0.0)
    gpus = dict.fromkeys(groups, 0.0)
    measured = 0
    t0 = time.process_time()
    for k in range(rounds):
        now = k * dt
        snap = ClusterSnapshot(now, nodes, dict(allocs), queues)
        result = run_round(snap, list(live.values()), policy, oracle, costs=RoundCosts(), explain=False)
        for act in result.actions:
            if act.after is None:
                allocs.pop(act.job, None)
            else:
                allocs[act.job] = act.after
        waiting = {live[n].queue for n in live if n not in allocs}
        backlogged = all(g in waiting for g in groups)
        running = list(allocs.items())
        tputs = oracle.throughput([(live[n], _shape(a, node_map)) for n, a in running])
        for (name, a), tput in zip(running, tputs, strict=True):
            j = live[name]
            if backlogged:
                delivered[j.queue] += tput / best[name]
                gpus[j.queue] += a.total_gpus
            done = min(j.total_work, j.progress + tput * dt)
            live[name] = replace(
                j,
                progress=done,
                checkpoint_progress=done,
                attained_service=j.attained_service + a.total_gpus * dt,
            )
        measured += backlogged
        for name in [n for n, j in live.items() if j.remaining_work <= 0]:
            live.pop(name)
            allocs.pop(name, None)
    want = [w / sum(WEIGHTS) for w in WEIGHTS]
    tot_d, tot_g = sum(delivered.values()) or 1.0, sum(gpus.values()) or 1.0
    return Outcome(
        setting,
        measured,
        [delivered[g] / tot_d / w for g, w in zip(groups, want, strict=True)],
        [gpus[g] / tot_g / w for g, w in zip(groups, want, strict=True)],
        tot_d / max(1, measured),
        time.process_time() - t0,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs-per-tenant", type=int, default=80)
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--round", type=float, default=360.0, help="seconds between rounds")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--cluster", default="gavel-heterogeneous", help="cluster spec (gavel-heterogeneous, modern-mix)"
    )
    args = ap.parse_args()
    nodes = spec_to_nodes(load_cluster_spec(args.cluster))
    jobs, groups = workload(args.jobs_per_tenant, args.seed)
    print(
        f"{args.cluster} ({sum(n.gpus for n in nodes)} GPUs), tenants {', '.join(groups)} "
        f"(Philly virtual clusters) with weights {':'.join(f'{w:g}' for w in WEIGHTS)}, "
        f"{args.jobs_per_tenant} jobs each at t=0, las inside queues, "
        f"{args.rounds} rounds of {args.round:g} s"
    )
    print("share / weight share per tenant (1.00 = fair); measured while all three are backlogged")
    head = f"{'setting':<12} {'rounds':>6} {'throughput share / target':>30} {'GPU share / target':>24}"
    print(f"{head} {'norm tput':>10}")
    base = None
    for setting in ("throughput", "gpus", "none"):
        r = run(setting, jobs, groups, nodes, args.rounds, args.round)
        ts = " ".join(f"{x:.2f}" for x in r.throughput_share_over_target)
        gs = " ".join(f"{x:.2f}" for x in r.gpu_share_over_target)
        norm = r.normalised_throughput_per_round
        base = base if base is not None else norm
        print(f"{setting:<12} {r.rounds_measured:>6} {ts:>30} {gs:>24} {norm / base:>10.2f}")


if __name__ == "__main__":
    main()
