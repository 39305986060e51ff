"""Benchmark: how much faster than ``ordered`` can any type choice be? A lower bound on average JCT.

For each cell of ``bench/decision_quality.py`` (trace x scenario x load x seed) this builds the same
workload the simulator replays and bounds the average JCT from below: each job alone on the cluster, on
the GPU type and pool where its compact placement runs fastest under the ground truth
(``perfmodel.truth.GroundTruth``, the simulator's truth), no queueing, no restart. No policy, however it
chooses types and order, beats that bound for rigid jobs, so ``ordered avg JCT / bound`` is the most any
aware policy can gain over ``ordered`` in the cell. Where that ceiling is under the issue's 1.2x, the 1.2x
target cannot be met there by type choice: ``ordered`` already gives most jobs their fastest type without
waiting.

With ``--results FILE`` (a ``bench/decision_quality.py`` JSON) it also prints, per cell, the measured
average JCT of each aware and ``ordered`` run beside the bound (``run / bound``) and the ceiling.

Run: ``python bench/jct_bound.py [--jobs 400] [--seeds 0] [--traces multinode,philly,alibaba]
[--scenarios gavel,modern] [--loads 1.5,3] [--shared ../shared] [--results
bench/results/decision_quality.json]`` (seconds per cell: no simulation runs).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from any directory, like the other benches

from scheduler.core.placement import compact_shape
from scheduler.core.types import Job, PlacementShape
from scheduler.sim.cluster import ClusterSpec

TRACES = {"philly": "philly-10k", "alibaba": "alibaba-2023", "multinode": "multinode-mix:seed={seed}"}
SCENARIOS = {"gavel": "gavel-heterogeneous", "modern": "modern-mix"}


def best_durations(spec: ClusterSpec, jobs: Sequence[Job], truth: Any) -> dict[str, float]:
    """Each job's shortest run time alone on the cluster: over the pools of its allowed types that hold
    its GPUs, its compact placement there (as few nodes as possible), at the truth's throughput."""
    out: dict[str, float] = {}
    for job in jobs:
        gpus = job.gpus_per_replica * job.max_replicas  # rigid jobs: min = max replicas
        shapes: list[PlacementShape] = []
        for p in spec.pools:
            if not job.allows(p.gpu_type) or p.gpus_per_node * p.nodes < gpus:
                continue
            shapes.append(compact_shape(p.gpu_type, gpus, p.gpus_per_node, p.interconnect, p.network_gbps))
        rates = truth.throughput([(job, s) for s in shapes]) if shapes else []
        best = max(rates, default=0.0)
        if best > 0:
            out[job.name] = job.total_work / best
    return out


def bound_cell(trace: str, scenario: str, load: float, seed: int, jobs: int) -> tuple[float, int, int]:
    """(bound on the average JCT in seconds, jobs bounded, jobs in the workload) of one cell."""
    from perfmodel.truth import GroundTruth
    from scheduler.oracles.table import TableOracle
    from scheduler.sim.simulations import SimulationRequest, _build_workload, resolve_cluster
    from scheduler.sim.traces import load_trace, rescale_load

    req = SimulationRequest(
        policies=("las",),
        trace=TRACES[trace].format(seed=seed),
        cluster=SCENARIOS[scenario],
        load=load,
        max_jobs=jobs,
        seed=seed,
    )
    req.validate()
    spec = resolve_cluster(req)
    rows = load_trace(req.trace).jobs[:jobs]
    fitting = [r for r in rows if r.num_gpus <= spec.total_gpus]
    scaled, _ = rescale_load(fitting, spec.total_gpus, req.load)
    truth_table = GroundTruth.load()
    workload = _build_workload(req, spec, scaled, truth_table)
    best = best_durations(spec, workload.jobs, TableOracle(truth_table))
    if not best:
        return math.nan, 0, len(workload.jobs)
    return sum(best.values()) / len(best), len(best), len(workload.jobs)


def _measured(
    results: list[dict[str, Any]], trace: str, scenario: str, load: float, seed: int
) -> dict[str, float]:
    """Average JCT (s) of each (oracle, policy spec) run of the cell in a decision_quality JSON."""
    out: dict[str, float] = {}
    for r in results:
        if (r.get("trace"), r.get("scenario"), r.get("seed")) != (trace, scenario, seed):
            continue
        cell_load = r.get("load")
        if not isinstance(cell_load, int | float) or abs(float(cell_load) - load) > 1e-9:
            continue
        out[f"{r.get('oracle')} {r.get('spec')}"] = float(r["avg_jct_s"])
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=400)
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--traces", default="multinode,philly,alibaba")
    ap.add_argument("--scenarios", default="gavel,modern")
    ap.add_argument("--loads", default="1.5,3")
    ap.add_argument(
        "--shared", default="", help="the shared data folder (for the alibaba trace: its traces/)"
    )
    ap.add_argument("--results", default="", help="a bench/decision_quality.py JSON to set beside the bound")
    a = ap.parse_args(argv)
    traces = [t for t in a.traces.split(",") if t]
    for t in traces:
        if t not in TRACES:
            ap.error(f"--traces: unknown trace {t!r} (known: {', '.join(TRACES)})")
    scenarios = [s for s in a.scenarios.split(",") if s]
    for s in scenarios:
        if s not in SCENARIOS:
            ap.error(f"--scenarios: unknown scenario {s!r} (known: {', '.join(SCENARIOS)})")
    try:
        loads = [float(x) for x in a.loads.split(",") if x]
        seeds = [int(x) for x in a.seeds.split(",") if x]
    except ValueError as exc:
        ap.error(f"--loads/--seeds: {exc}")
    if a.jobs < 1:
        ap.error("--jobs must be >= 1")
    if a.shared:
        if not Path(a.shared).is_dir():
            ap.error(f"--shared: {a.shared!r} is not a directory")
        os.environ["PERFSCHED_TRACES_DIR"] = str(Path(a.shared) / "traces")
    elif "alibaba" in traces:
        ap.error("--traces alibaba: give --shared DIR (the shared data folder holding traces/)")
    results: list[dict[str, Any]] = []
    if a.results:
        try:
            doc = json.loads(Path(a.results).read_text())
        except (OSError, ValueError) as exc:
            ap.error(f"--results: cannot read {a.results!r}: {exc}")
        results = doc.get("rows", doc) if isinstance(doc, dict) else doc
        if not isinstance(results, list):
            ap.error(f"--results: {a.results!r} holds no list of rows")
    print(
        f"{'trace':<9} {'scenario':<8} {'load':>4} {'seed':>4} {'jobs':>9} {'bound h':>8}  measured / bound"
    )
    for trace in traces:
        for scenario in scenarios:
            for load in loads:
                for seed in seeds:
                    bound, n, total = bound_cell(trace, scenario, load, seed, a.jobs)
                    runs = _measured(results, trace, scenario, load, seed)
                    over = ", ".join(f"{k} {v / bound:.2f}" for k, v in sorted(runs.items()))
                    ordered = [v for k, v in runs.items() if "ordered" in k]
                    ceiling = f"; ceiling ordered/bound {min(ordered) / bound:.2f}x" if ordered else ""
                    print(
                        f"{trace:<9} {scenario:<8} {load:>4g} {seed:>4} {n:>4}/{total:<4} "
                        f"{bound / 3600:>8.2f}  {over}{ceiling}"
                    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
