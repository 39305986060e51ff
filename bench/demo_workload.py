"""Benchmark: how contended ``perfsched demo``'s workload is, per size, replayed in the simulator.

For each (jobs, nodes per pool) of ``--grid`` and each seed, builds the demo's workload exactly as
``perfsched demo`` does (``perfsched_dev.demo.emulated.build_jobs``: the first jobs of the shipped Philly
sample that fit, arrivals in the first third of ``--duration``, the median job a fifth of it, work
calibrated on the K80 pool) and replays it with the simulator's engine for each policy: the true
throughput table as truth and as what the policy is told, a round every 2 s (the demo operator's period)
and a 10 s restart cost (``--oracle predictor``: the policy is told the operator's learning oracle's
answers, the shipped predictor corrected online from each job's measured throughput, fresh for each
run, as the simulator's ``--oracle predictor``; ``predictor-cold``: the shipped predictor alone).
Prints per policy the average and p99 JCT, the time the last job finished (the
demo's limit is ``--duration``), GPU utilisation until then, the most jobs waiting at once and how many
jobs waited more than a second, preemptions and restarts. The live demo adds pod start-up and status
latency to these times (docs/demo.md).

Run: ``python bench/demo_workload.py [--grid 16x2,40x1] [--seeds 0,1] [--policies las,...]
[--duration 180]``.
"""

from __future__ import annotations

import argparse
import statistics

from perfmodel.truth import GroundTruth
from perfsched_dev.demo.emulated import DemoOptions, build_jobs
from perfsched_dev.demo.report import percentile
from scheduler.core.protocols import ThroughputOracle
from scheduler.core.round import run_round
from scheduler.oracles.table import TableOracle
from scheduler.policies import make_policy_from_spec
from scheduler.sim.cluster import spec_to_nodes
from scheduler.sim.engine import Engine, EngineConfig
from scheduler.sim.simulations import las_thresholds_gpu_s


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--grid", default="16x2,32x2,40x2,64x2,32x1,40x1,48x1", help="JOBSxNODES_PER_POOL,...")
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--policies", default="las,las:heterogeneity=agnostic")
    ap.add_argument("--duration", type=float, default=180.0)
    ap.add_argument(
        "--oracle",
        choices=("table", "predictor", "predictor-cold"),
        default="table",
        help="what the policy is told: the true table, the operator's learning oracle, the plain predictor",
    )
    args = ap.parse_args()
    try:
        grid = [tuple(int(x) for x in cell.split("x")) for cell in args.grid.split(",") if cell]
        seeds = [int(s) for s in args.seeds.split(",") if s]
    except ValueError:
        ap.error(f"--grid must be JOBSxNODES,... and --seeds integers, got {args.grid!r} / {args.seeds!r}")
    if any(len(cell) != 2 for cell in grid):
        ap.error(f"--grid must be JOBSxNODES,..., got {args.grid!r}")
    policies = [p for p in args.policies.split(",") if p]
    truth = TableOracle(GroundTruth.load())
    print(
        f"{'jobs':>4} {'npp':>3} {'seed':>4} {'policy':<28} {'avg JCT':>8} {'p99 JCT':>8} {'last done':>9} "
        f"{'util':>5} {'max wait':>8} {'waited':>6} {'preempt':>7} {'restart':>7}"
    )
    for jobs, npp in grid:
        for seed in seeds:
            options = DemoOptions(duration_s=args.duration, jobs=jobs, nodes_per_pool=npp, seed=seed)
            workload, spec = build_jobs(options)
            nodes = spec_to_nodes(spec)
            gpus = sum(n.gpus for n in nodes)
            for spec_text in policies:
                policy = make_policy_from_spec(spec_text)
                config = EngineConfig(
                    round_seconds=2.0,
                    restart_cost_s=10.0,
                    resize_cost_s=10.0,
                    wake_thresholds_gpu_s=las_thresholds_gpu_s(policy),
                )
                told = _told(args.oracle, truth)
                res = Engine(nodes, workload, policy, told, truth, config, run_round=run_round).run()
                jct = sorted(r.jct for r in res.records if r.jct is not None)
                util = (
                    sum(r.gpu_seconds for r in res.records) / (gpus * res.end_time) if res.end_time else 0.0
                )
                waited = sum(1 for r in res.records if (r.queueing_delay or 0.0) > 1.0)
                print(
                    f"{len(workload):>4} {npp:>3} {seed:>4} {spec_text:<28} {statistics.mean(jct):>7.1f}s "
                    f"{percentile(jct, 99):>7.1f}s {res.end_time:>8.1f}s {util:>5.0%} "
                    f"{max(res.series_waiting):>8} {waited:>6} "
                    f"{sum(r.preemptions for r in res.records):>7} {sum(r.restarts for r in res.records):>7}"
                )


def _told(oracle: str, truth: ThroughputOracle) -> ThroughputOracle:
    """What the policy is told (``--oracle``); the learning oracle fresh for each run."""
    if oracle == "predictor":
        from scheduler.oracles.learning import CorrectedOracle

        return CorrectedOracle.load()
    if oracle == "predictor-cold":
        from scheduler.oracles.predictor import PredictorOracle

        return PredictorOracle.load()
    return truth


if __name__ == "__main__":
    main()
