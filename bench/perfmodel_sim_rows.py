"""The predictor against the simulator's ground truth on the simulator's own questions.

The simulator's workloads ask the throughput oracle about (job, compact shape) pairs: each job of the
shipped Philly sample with the model Gavel's generator gives it, on its GPU count packed onto the fewest
nodes of each pool of a cluster (an 8-GPU job on gavel-heterogeneous is two 4-GPU servers). This prints
the relative error of the shipped predictor's throughput against ``perfmodel.truth.GroundTruth`` (the
simulator's truth: research-table rows only) per (GPU count, node count) class and per GPU type, and the
error of the predicted speed ratio between the cluster's GPU types (what a type-aware policy acts on).
The same-run baselines are the truth table with the simulator's ``mre0.25`` injected error and the same
predictor without its measured anchors (``Predictor.load(anchors=False)``). Rows a measured anchor applies
to (a model measured at its precision and stack, never on the row's GPU type) are also broken down by
where their per-GPU work lies against the anchor's measured 1-GPU curve: below its smallest batch,
inside, above its largest. Multi-GPU questions are also split by where the truth's gradient sync comes
from: measured (the model was measured on several GPUs of that type, across nodes at the question's link
for a multi-node question), rescaled to the link (measured across nodes on another link: ``perfmodel.truth``
rule 2 scales those rows' sync by the link ratio) or at line rate (measured on one GPU only, or in one node
only: rule 2 charges the parameter bytes over the link at full rate). The last two are extrapolations of
the truth itself; a type-aware policy's choices for those jobs turn on them
(docs/decisions/0005-cross-node-correction.md).

Run: ``nice python bench/perfmodel_sim_rows.py [--cluster gavel-heterogeneous] [--jobs 400]``.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from perfmodel.datasets import canonical_dataset
from perfmodel.gpus import canonical_gpu_type
from perfmodel.predictor import Predictor
from perfmodel.truth import GroundTruth
from perfmodel.zoo import canonical_model
from scheduler.core.types import Job, PlacementShape
from scheduler.oracles.predictor import PredictorOracle
from scheduler.oracles.table import TableOracle
from scheduler.sim.cluster import load_cluster_spec
from scheduler.sim.simulations import DEFAULT_TRACE
from scheduler.sim.trace_jobs import WorkloadOptions, build_workload
from scheduler.sim.traces import load_trace, rescale_load


def questions(cluster: str, jobs: int, seed: int) -> list[tuple[Job, PlacementShape]]:
    """Every (job, compact shape on each pool that can hold it) of the simulator's workload."""
    spec = load_cluster_spec(cluster)
    trace = load_trace(DEFAULT_TRACE)
    rows = [r for r in trace.jobs[:jobs] if r.num_gpus <= spec.total_gpus]
    scaled, _ = rescale_load(rows, spec.total_gpus, 1.5)
    ref = [p.gpus_per_node for p in spec.pools if p.gpu_type == "V100"]
    wl = build_workload(
        scaled,
        GroundTruth.load(),
        WorkloadOptions(seed=seed, reference_gpu="V100", reference_node_gpus=max(ref) if ref else 8),
    )
    out: list[tuple[Job, PlacementShape]] = []
    for job in wl.jobs:
        for pool in spec.pools:
            if job.max_gpus > pool.gpus_per_node * pool.nodes:
                continue
            nodes = -(-job.max_gpus // pool.gpus_per_node)
            shape = PlacementShape(
                pool.gpu_type,
                job.max_gpus,
                nodes,
                min(job.max_gpus, pool.gpus_per_node),
                pool.interconnect,
                pool.network_gbps,
            )
            out.append((job, shape))
    return out


def anchor_positions(oracle: PredictorOracle, qs: Sequence[tuple[Job, PlacementShape]]) -> list[str | None]:
    """Per question: where its per-GPU work lies against its measured anchor's 1-GPU curve ("below its
    batches", "inside", "above its batches"), None where no anchor applies (or an LLM job)."""
    from perfmodel.features import JobFeatures
    from scheduler.oracles.predictor import hardware_features, job_features

    p = oracle.predictor
    out: list[str | None] = []
    for job, shape in qs:
        feats = job_features(job)
        if p.anchors is None or type(feats) is not JobFeatures:
            out.append(None)
            continue
        r = p.resolve(feats, hardware_features(shape))
        if not p.anchors.applies(r):
            out.append(None)
            continue
        out.append(("below its batches", "inside", "above its batches")[p.anchors.work_position(r) + 1])
    return out


def sync_sources(truth: GroundTruth, qs: Sequence[tuple[Job, PlacementShape]]) -> list[str | None]:
    """Per multi-GPU question, where the truth's gradient sync comes from: "measured" when the truth holds
    a row of the job's model and dataset on that GPU type on several GPUs with the same single-/multi-node
    kind (across nodes, at the question's link), "rescaled to the link" when those cross-node rows ran on
    another link, else "at line rate"; None for a 1-GPU question."""
    links: dict[tuple[str, str, str, bool], set[float]] = defaultdict(set)
    for m in truth.measurements:
        if m.num_gpus > 1:
            gpu = canonical_gpu_type(m.gpu_type) or m.gpu_type
            key = (canonical_model(m.model), canonical_dataset(m.dataset), gpu, m.num_nodes > 1)
            links[key].add(m.network_gbps)
    out: list[str | None] = []
    for job, shape in qs:
        if shape.num_gpus == 1:
            out.append(None)
            continue
        multi_node = shape.num_nodes > 1
        key = (
            canonical_model(job.model or ""),
            canonical_dataset(job.dataset or ""),
            canonical_gpu_type(shape.gpu_type) or shape.gpu_type,
            multi_node,
        )
        if key not in links:
            out.append("truth's sync at line rate")
        elif multi_node and shape.network_gbps not in links[key]:
            out.append("truth's sync rescaled to the link")
        else:
            out.append("truth's sync measured")
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cluster", default="gavel-heterogeneous")
    ap.add_argument("--jobs", type=int, default=400)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    t0 = time.time()
    qs = questions(a.cluster, a.jobs, a.seed)
    truth_table = GroundTruth.load()
    truth = np.asarray(TableOracle(truth_table).throughput(qs))
    shipped = PredictorOracle.load()
    methods = {
        "predictor": np.asarray(shipped.throughput(qs)),
        "no anchors": np.asarray(PredictorOracle(Predictor.load(anchors=False)).throughput(qs)),
        "mre0.25": np.asarray(TableOracle(truth_table, mre=0.25, seed=a.seed, per_shape=True).throughput(qs)),
    }
    ok = truth > 0
    where = anchor_positions(shipped, qs)
    sync_from = sync_sources(truth_table, qs)
    print(f"{len(qs)} (job, compact shape) questions on {a.cluster}, {int(ok.sum())} with a true answer")
    groups: dict[str, list[int]] = defaultdict(list)
    for i, (_, shape) in enumerate(qs):
        if ok[i]:
            groups[f"{shape.num_gpus} GPU(s) on {shape.num_nodes} node(s)"].append(i)
            groups[f"type {shape.gpu_type}"].append(i)
            groups["all"].append(i)
            if where[i] is not None:
                groups[f"anchored, {where[i]}"].append(i)
            if sync_from[i] is not None:
                groups[f"multi-GPU, {sync_from[i]}"].append(i)
    print(f"{'class':<45} {'n':>5}  " + "  ".join(f"{m + ' MRE (median)':>24}" for m in methods))
    for name in sorted(groups, key=lambda g: (g != "all", g)):
        idx = np.asarray(groups[name])
        cells = []
        for pred in methods.values():
            e = np.abs(pred[idx] / truth[idx] - 1.0)
            cells.append(f"{100 * e.mean():7.1f}% ({100 * np.median(e):5.1f}%)")
        print(f"{name:<45} {idx.size:>5}  " + "  ".join(f"{c:>24}" for c in cells))
    # Speed ratios between GPU types of the same job (what a type-aware policy acts on).
    by_job: dict[str, dict[str, int]] = defaultdict(dict)
    for i, (job, shape) in enumerate(qs):
        if ok[i]:
            by_job[job.name][shape.gpu_type] = i
    types = sorted({s.gpu_type for _, s in qs})
    print("speed ratio between GPU types, |log(predicted ratio / true ratio)| median (mean), by job GPUs")
    for t1 in types:
        for t2 in types:
            if t1 >= t2:
                continue
            for label, lo, hi in (("1 GPU", 1, 1), ("> 4 GPUs", 5, 1 << 30)):
                cells = []
                for pred in methods.values():
                    errs = []
                    for at in by_job.values():
                        if t1 in at and t2 in at and lo <= qs[at[t1]][0].max_gpus <= hi:
                            i, j = at[t1], at[t2]
                            if pred[i] > 0 and pred[j] > 0:
                                errs.append(abs(np.log(pred[i] / pred[j] / (truth[i] / truth[j]))))
                    if errs:
                        cells.append(
                            f"x{np.exp(np.median(errs)):.2f} (x{np.exp(np.mean(errs)):.2f}) n={len(errs)}"
                        )
                print(f"  {t1}/{t2} {label:<9} " + "   ".join(cells))
    print(f"({time.time() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
