"""Benchmark: simulator speed on the Philly traces (targets: 10k jobs on 64 GPUs <= 5 s per policy;
the full 82k-job trace <= 60 s per policy).

For each policy it replays the shipped Philly 10k trace on 64 V100s at load 0.8, event-driven rounds
(the survey's semantics, ``--round-seconds 0``), and prints CPU seconds of the simulator process
(``time.process_time``: the machine is shared, so wall time says little), events per CPU second, rounds,
how many of them the policy's incremental round decided, the CPU seconds including loading the trace and
building the workload (``+load s``), and the target verdict (on the engine's CPU seconds).
Baseline, measured in the same run: the same engine with ``run_round`` for every round (the path every
policy has; ``incremental=False``) on the first ``--baseline-jobs`` jobs, against the incremental rounds
on the same jobs, with a check that both give the same average JCT, makespan and preemptions.
``--full`` also replays ``philly-full`` (82,247 jobs, from ../shared/traces) with every policy.

Run: ``python bench/sim_speed.py [--policies las,srsf,fifo] [--jobs 10000] [--baseline-jobs 2000] [--full]``
(fifo runs with backfill). Figures are written to ``bench/results/sim_speed.json`` as well.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from scheduler.sim.simulations import SimulationRequest, run_simulations

TARGET_10K_S = 5.0
TARGET_FULL_S = 60.0


def _one(
    policy: str, trace: str, jobs: int | None, round_s: float, *, incremental: bool = True
) -> dict[str, Any]:
    req = SimulationRequest(
        policies=(policy,),
        trace=trace,
        gpus=64,
        load=0.8,
        max_jobs=jobs,
        round_seconds=round_s,
        policy_configs={"fifo": {"backfill": True}},
        incremental=incremental,
    )
    t0 = time.perf_counter()
    c0 = time.process_time()
    out = run_simulations(req)
    total = time.perf_counter() - t0
    total_cpu = time.process_time() - c0
    row = out.report["results"][0]
    result = out.runs[0][1]
    return {
        "policy": policy,
        "trace": trace,
        "jobs": row["jobs_total"],
        "round_seconds": round_s,
        "incremental": incremental,
        "wall_s": row["wall_s"],
        "cpu_s": row["cpu_s"],
        "total_s_with_loading": total,
        "cpu_s_with_loading": total_cpu,
        "events": row["events"],
        "events_per_cpu_s": row["events"] / max(row["cpu_s"], 1e-9),
        "rounds": row["rounds"],
        "incremental_rounds": result.incremental_rounds,
        "skipped_rounds": row["skipped_rounds"],
        "avg_jobs_per_round": row["avg_jobs_per_round"],
        "avg_jct_s": row["avg_jct_s"],
        "makespan_s": row["makespan_s"],
        "preemptions": row["preemptions"],
    }


def _verdict(cpu_s: float, target: float) -> str:
    return f"{'met' if cpu_s <= target else 'MISSED'} (<= {target:g} s)"


def _print_row(r: dict[str, Any], target: float) -> None:
    print(
        f"{r['policy']:<8} {r['jobs']:>6} {r['cpu_s']:>7.2f} {r['wall_s']:>7.1f} {r['events']:>8} "
        f"{r['events_per_cpu_s']:>11.0f} {r['rounds']:>7} {r['incremental_rounds']:>7} "
        f"{r['avg_jobs_per_round']:>10.1f} {r['cpu_s_with_loading']:>8.2f}  {_verdict(r['cpu_s'], target)}"
    )


HEADER = (
    f"{'policy':<8} {'jobs':>6} {'cpu s':>7} {'wall s':>7} {'events':>8} {'events/cpu-s':>11} "
    f"{'rounds':>7} {'incr.':>7} {'jobs/round':>10} {'+load s':>8}  target (engine CPU)"
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--policies", default="las,srsf,fifo")
    ap.add_argument("--jobs", type=int, default=10_000)
    ap.add_argument("--round-seconds", type=float, default=0.0, help="0 = event-driven rounds")
    ap.add_argument("--baseline-jobs", type=int, default=2000)
    ap.add_argument(
        "--full", action="store_true", help="also replay philly-full (82k jobs) with every policy"
    )
    args = ap.parse_args()
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    rs = args.round_seconds

    print(f"Philly 10k prefix of {args.jobs} jobs, 64 x V100, load 0.8, round_seconds={rs:g}; CPU seconds")
    print(HEADER)
    rows = []
    for p in policies:
        r = _one(p, "philly-10k", args.jobs, rs)
        rows.append(r)
        _print_row(r, TARGET_10K_S)

    print(
        f"\nbaseline, same run, first {args.baseline_jobs} jobs: run_round every round vs incremental rounds"
    )
    base = []
    for p in policies:
        plain = _one(p, "philly-10k", args.baseline_jobs, rs, incremental=False)
        fast = _one(p, "philly-10k", args.baseline_jobs, rs)
        same = all(plain[k] == fast[k] for k in ("avg_jct_s", "makespan_s", "preemptions", "rounds"))
        base.append({"run_round": plain, "incremental": fast, "same_results": same})
        print(
            f"{p:<8} run_round {plain['cpu_s']:>7.2f} s CPU ({plain['events_per_cpu_s']:>6.0f} events/s)   "
            f"incremental {fast['cpu_s']:>6.2f} s CPU ({fast['events_per_cpu_s']:>6.0f} events/s)   "
            f"x{plain['cpu_s'] / max(fast['cpu_s'], 1e-9):.1f}   same results: {'yes' if same else 'NO'}"
        )

    full = []
    if args.full:
        print("\nphilly-full (../shared/traces), 64 x V100, load 0.8; CPU seconds")
        print(HEADER)
        for p in policies:
            r = _one(p, "philly-full", None, rs)
            full.append(r)
            _print_row(r, TARGET_FULL_S)
    out = Path(__file__).parent / "results"
    out.mkdir(exist_ok=True)
    (out / "sim_speed.json").write_text(json.dumps({"runs": rows, "baseline": base, "full": full}, indent=2))


if __name__ == "__main__":
    main()
