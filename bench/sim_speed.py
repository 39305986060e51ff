"""Benchmark: simulator speed on the Philly traces (targets: 10k jobs on 64 GPUs <= 5 s per policy;
the full 82k-job trace <= 60 s per policy).

For each policy it replays the shipped Philly 10k trace on 64 V100s at load 0.8 through the real
``run_round`` and prints wall time, events/s, rounds (and rounds skipped as provably idle), the average
number of jobs per round, and how the time splits between ``run_round`` (core + policy) and the engine.
Baseline, measured in the same run on the first ``--baseline-jobs`` jobs: a naive round loop (a round
every ``--round-seconds`` whether or not anything changed) against the event engine on the same jobs.
``--full`` also replays ``philly-full`` (from ../shared/traces) with the first policy.

Run: ``python bench/sim_speed.py [--policies las,srsf,fifo] [--jobs 10000] [--round-seconds 0] [--full]``.
Figures are written to ``bench/results/sim_speed.json`` as well.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from scheduler.sim.runner import SimulationRequest, run_simulations


def _one(policy: str, trace: str, jobs: int | None, round_s: float, survey: bool = False) -> dict[str, Any]:
    req = SimulationRequest(
        policies=(policy,),
        trace=trace,
        gpus=64,
        load=0.8,
        max_jobs=jobs,
        round_seconds=round_s,
        survey=survey,
        policy_configs={"fifo": {"backfill": True}},
    )
    t0 = time.perf_counter()
    out = run_simulations(req)
    total = time.perf_counter() - t0
    row = out.report["results"][0]
    return {
        "policy": policy,
        "trace": trace,
        "jobs": row["jobs_total"],
        "round_seconds": round_s,
        "wall_s": row["wall_s"],
        "cpu_s": row["cpu_s"],
        "total_s_with_loading": total,
        "events": row["events"],
        "events_per_s": row["events_per_s"],
        "rounds": row["rounds"],
        "skipped_rounds": row["skipped_rounds"],
        "avg_jobs_per_round": row["avg_jobs_per_round"],
        "run_round_s": row["round_wall_s"],
        "engine_s": row["wall_s"] - row["round_wall_s"],
        "ms_per_round": 1000 * row["round_wall_s"] / max(1, row["rounds"]),
        "avg_jct_s": row["avg_jct_s"],
    }


def _naive(policy: str, jobs: int, round_s: float) -> dict[str, Any]:
    """The baseline: the same engine forced to run a round at every tick (a plain round-based loop)."""
    from perfmodel.truth import GroundTruth
    from scheduler.core.round import run_round
    from scheduler.oracles.table import TableOracle
    from scheduler.policies import make_policy
    from scheduler.sim.cluster import homogeneous_spec, spec_to_nodes
    from scheduler.sim.engine import Engine, EngineConfig
    from scheduler.sim.traces import load_trace, rescale_load
    from scheduler.sim.workload import WorkloadOptions, build_workload

    truth = GroundTruth.load()
    scaled, _ = rescale_load(load_trace("philly-10k").jobs[:jobs], 64, 0.8)
    wl = build_workload(scaled, truth, WorkloadOptions())
    oracle = TableOracle(truth)
    cfg = EngineConfig(round_seconds=round_s, restart_cost_s=30.0, always_tick=True)
    pol = make_policy(policy, {"backfill": True} if policy == "fifo" else None)
    res = Engine(
        spec_to_nodes(homogeneous_spec(64)), wl.jobs, pol, oracle, oracle, cfg, run_round=run_round
    ).run()
    return {
        "policy": policy,
        "jobs": jobs,
        "wall_s": res.wall_s,
        "cpu_s": res.cpu_s,
        "rounds": res.rounds,
        "events": res.events,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--policies", default="las,srsf,fifo")
    ap.add_argument("--jobs", type=int, default=10_000)
    ap.add_argument("--round-seconds", type=float, default=0.0, help="0 = event-driven rounds")
    ap.add_argument("--baseline-jobs", type=int, default=1000)
    ap.add_argument(
        "--full", action="store_true", help="also replay philly-full (82k jobs) with the first policy"
    )
    args = ap.parse_args()
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    rows = []
    print(f"Philly 10k prefix of {args.jobs} jobs, 64 x V100, load 0.8, round_seconds={args.round_seconds:g}")
    hdr = f"{'policy':<8} {'wall s':>8} {'cpu s':>7} {'events/s':>9} {'ev/cpu-s':>9} {'rounds':>7} "
    print(hdr + f"{'skipped':>8} {'jobs/round':>10} {'run_round s':>11} {'engine s':>9} {'ms/round':>9}")
    for p in policies:
        r = _one(p, "philly-10k", args.jobs, args.round_seconds)
        rows.append(r)
        print(
            f"{p:<8} {r['wall_s']:>8.1f} {r['cpu_s']:>7.1f} {r['events_per_s']:>9.0f} "
            f"{r['events'] / max(r['cpu_s'], 1e-9):>9.0f} {r['rounds']:>7} {r['skipped_rounds']:>8} "
            f"{r['avg_jobs_per_round']:>10.1f} {r['run_round_s']:>11.1f} {r['engine_s']:>9.1f} "
            f"{r['ms_per_round']:>9.2f}"
        )
    print(
        f"\nbaseline, first {args.baseline_jobs} jobs: naive round loop (a round every 360 s) vs event engine"
    )
    base = []
    for p in policies:
        naive = _naive(p, args.baseline_jobs, 360.0)
        event = _one(p, "philly-10k", args.baseline_jobs, args.round_seconds)
        base.append({"naive": naive, "event": event})
        print(
            f"{p:<8} naive {naive['cpu_s']:>7.1f} s CPU ({naive['rounds']} rounds)   "
            f"event engine {event['cpu_s']:>7.1f} s CPU ({event['rounds']} rounds)"
        )
    full = None
    if args.full:
        full = _one(policies[0], "philly-full", None, args.round_seconds)
        print(
            f"\nphilly-full ({full['jobs']} jobs) {policies[0]}: {full['wall_s']:.1f} s wall, "
            f"{full['cpu_s']:.1f} s CPU, "
            f"{full['events_per_s']:.0f} events/s, {full['rounds']} rounds, "
            f"{full['ms_per_round']:.2f} ms/round"
        )
    out = Path(__file__).parent / "results"
    out.mkdir(exist_ok=True)
    (out / "sim_speed.json").write_text(json.dumps({"runs": rows, "baseline": base, "full": full}, indent=2))


if __name__ == "__main__":
    main()
