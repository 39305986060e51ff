"""Benchmark diagnosis: which of the predictor's answers cost the aware policies their gain (issue 11).

With ``--oracle predictor`` an aware policy keeps a share of the gain it has over its agnostic twin under
the true table ("kept", issue 11's target >= 80%). This reruns the predictor-in-the-loop cell with one
class of the predictor's answers changed, so the lost gain can be split by where it comes from:

- ``predictor``: the shipped predictor as ``decision_quality.py`` runs it (the baseline);
- ``truth-across-nodes``: every question about a placement that spans nodes answered by the simulator's
  ground truth instead (``perfmodel.truth.GroundTruth``), every other one by the predictor: what the
  policy would keep if the predictor were right across nodes;
- ``measured-layout``: the predictor asked, for a placement that spans nodes, about the layout the ground
  truth actually simulates there: the same GPUs one per node at 10 Gb/s (the truth takes the cross-node
  sync time from the research table's rows, measured one GPU per node at 10 Gb/s, and ignores the
  placement's GPUs per node and ``network_gbps``; gavel-heterogeneous declares 10 / 25 / 100 Gb/s for its
  K80 / P100 / V100 servers);
- ``declared-network``: the predictor asked about the same GPUs one per node at the placement's own
  (declared) network: the measured layout without the 10 Gb/s.

``--truth network-aware`` reruns everything, table runs included, against a what-if ground truth that
honours the placement's network: a cross-node answer's measured sync time (``GroundTruth``'s rule 2) is
scaled by 10 Gb/s (the link the research rows were measured on) over the placement's ``network_gbps``,
and each job's work is calibrated with the same truth on the reference pool (V100, 100 Gb/s), so every
job still runs for its traced duration there. Not the simulator's truth: a question for the owners.

"kept" = (1 - aware JCT under the variant / agnostic JCT under the table) / (1 - aware / agnostic, both
under the table), as in docs/performance.md. Table runs and the agnostic runs do not depend on the
variant (agnostic LAS does not ask the oracle; agnostic SRSF's table run is the reference).

Run: ``OMP_NUM_THREADS=1 nice python bench/predictor_loss_split.py [--seeds 4] [--loads 1.5]
[--policies las,srsf] [--variants predictor,truth-across-nodes,measured-layout] [--truth table]
[--jobs 400]``
(gavel-heterogeneous; about half a minute per run on the 2-core VM, 2 + variants runs per cell).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any
from unittest import mock

from scheduler.core.types import Interconnect, Job, PlacementShape
from scheduler.oracles.predictor import PredictorOracle
from scheduler.oracles.table import TableOracle
from scheduler.sim.cluster import load_cluster_spec
from scheduler.sim.simulations import SimulationRequest, run_simulations
from scheduler.sim.trace_jobs import build_workload

#: the link the research table's cross-node rows were measured on (Gb/s), which the ground truth carries
MEASURED_NETWORK_GBPS = 10.0

Rewrite = Callable[[PlacementShape], PlacementShape]


def _one_per_node(shape: PlacementShape, network_gbps: float | None) -> PlacementShape:
    return dataclasses.replace(
        shape,
        num_nodes=shape.num_gpus,
        gpus_per_node=1,
        interconnect=Interconnect.PCIE,
        network_gbps=shape.network_gbps if network_gbps is None else network_gbps,
    )


REWRITES: dict[str, Rewrite] = {
    "measured-layout": lambda s: _one_per_node(s, MEASURED_NETWORK_GBPS),
    "declared-network": lambda s: _one_per_node(s, None),
}
VARIANTS = ("predictor", "truth-across-nodes", *REWRITES)


class SplitOracle(PredictorOracle):
    """The shipped predictor, with its answers about placements that span nodes changed per ``variant``."""

    variant = "predictor"
    truth: TableOracle | None = None

    def throughput(self, queries: Sequence[tuple[Job, PlacementShape]]) -> list[float]:
        rewrite = REWRITES.get(self.variant)
        if rewrite is not None:
            queries = [(j, rewrite(s) if s.num_nodes > 1 else s) for j, s in queries]
        out = super().throughput(queries)
        if self.variant == "truth-across-nodes":
            if SplitOracle.truth is None:
                from perfmodel.truth import GroundTruth

                SplitOracle.truth = TableOracle(GroundTruth.load())
            idx = [i for i, (_, s) in enumerate(queries) if s.num_nodes > 1]
            if idx:
                for i, v in zip(idx, SplitOracle.truth.throughput([queries[i] for i in idx]), strict=True):
                    out[i] = v
        return out


def network_factor(truth: Any, model: str, dataset: str, batch: int, gpu: str, n: int, gbps: float) -> float:
    """Throughput factor of the network-aware what-if for a cross-node placement: (C + S) / (C + S x 10 /
    gbps), with C and S ``GroundTruth``'s compute and sync times of the (model, dataset, GPU type) group;
    1 where the truth has no such group (rule 3, another type's measurements)."""
    from perfmodel.zoo import canonical_model

    name = canonical_model(model) or model
    ds = truth._dataset_for(name, dataset)
    group = truth._groups.get((name, ds, gpu)) if ds else None
    if group is None:
        return 1.0
    c = float(group.compute_time(batch / n))
    sync = float(group.sync_time(n, True))
    return (c + sync) / (c + sync * MEASURED_NETWORK_GBPS / gbps) if c > 0 and sync > 0 else 1.0


class _CalibrationTruth:
    """``GroundTruth`` for ``build_workload`` under the what-if: cross-node answers at ``gbps``."""

    def __init__(self, truth: Any, gbps: float) -> None:
        self.truth = truth
        self.gbps = gbps

    def __getattr__(self, name: str) -> Any:
        return getattr(self.truth, name)

    def throughput(
        self, model: str, batch: int, gpu: str, n: int, nodes: int = 1, dataset: str = ""
    ) -> float | None:
        v: float | None = self.truth.throughput(model, batch, gpu, n, nodes, dataset)
        if v is None or nodes <= 1:
            return v
        return v * network_factor(self.truth, model, dataset, batch, gpu, n, self.gbps)


@contextlib.contextmanager
def network_aware_truth(cluster: str = "gavel-heterogeneous", reference_gpu: str = "V100") -> Iterator[None]:
    """Within it, the simulator's truth (and the table oracles) honour each placement's network."""
    ref = [p.network_gbps for p in load_cluster_spec(cluster).pools if p.gpu_type == reference_gpu]
    original = TableOracle.true_iterations_per_s

    def true_ips(self: TableOracle, job: Job, shape: PlacementShape) -> float | None:
        v = original(self, job, shape)
        if v is None or shape.num_nodes <= 1:
            return v
        return v * network_factor(
            self.truth,
            job.model,
            job.dataset,
            job.batch_size,
            shape.gpu_type,
            shape.num_gpus,
            shape.network_gbps,
        )

    def calibrated(scaled: Any, truth: Any, options: Any) -> Any:
        return build_workload(
            scaled, _CalibrationTruth(truth, max(ref, default=MEASURED_NETWORK_GBPS)), options
        )

    with (
        mock.patch.object(TableOracle, "true_iterations_per_s", true_ips),
        mock.patch("scheduler.sim.simulations.build_workload", calibrated),
    ):
        yield


def _split_load(cls: type[PredictorOracle]) -> PredictorOracle:
    """``PredictorOracle.load`` for the variant runs: the shipped predictor behind ``SplitOracle``."""
    from perfmodel.predictor import Predictor

    return SplitOracle(Predictor.load())


def run(spec: str, oracle: str, seed: int, load: float, jobs: int) -> dict[str, float]:
    """avg and p99 JCT (h) and churn (preemptions + migrations per job) of one gavel-heterogeneous run."""
    req = SimulationRequest(
        policies=(spec,), cluster="gavel-heterogeneous", load=load, max_jobs=jobs, oracle=oracle, seed=seed
    )
    row = run_simulations(req).report["results"][0]
    return {
        "avg": row["avg_jct_s"] / 3600,
        "p99": row["p99_jct_s"] / 3600,
        "churn": row["preemptions_per_job"] + row["migrations_per_job"],
    }


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", default="4")
    ap.add_argument("--loads", default="1.5")
    ap.add_argument("--policies", default="las,srsf", help="ordering policies: las, srsf, fifo, ftf")
    ap.add_argument("--variants", default="predictor,truth-across-nodes,measured-layout")
    ap.add_argument("--jobs", type=int, default=400)
    ap.add_argument("--truth", choices=("table", "network-aware"), default="table")
    a = ap.parse_args(argv)
    variants = [v for v in a.variants.split(",") if v]
    for v in variants:
        if v not in VARIANTS:
            ap.error(f"--variants: unknown variant {v!r}; known: {', '.join(VARIANTS)}")
    what_if = network_aware_truth() if a.truth == "network-aware" else contextlib.nullcontext()
    with what_if:
        report(a, variants)
    return 0


def report(a: argparse.Namespace, variants: Sequence[str]) -> None:
    """Print one row per (seed, load, policy) with each variant's avg JCT, kept% and churn."""
    print(
        f"gavel-heterogeneous, {a.jobs} jobs, truth {a.truth}; kept% of the table's aware/agnostic gain per "
        "predictor variant"
    )
    print(
        f"{'seed':>4} {'load':>4} {'policy':<6} {'table aware/agn h':>18}  "
        + "  ".join(f"{v:>24}" for v in variants)
    )
    for seed in (int(s) for s in a.seeds.split(",") if s):
        for load in (float(x) for x in a.loads.split(",") if x):
            for policy in (p for p in a.policies.split(",") if p):
                aware = run(policy, "table", seed, load, a.jobs)
                agn = run(f"{policy}:heterogeneity=agnostic", "table", seed, load, a.jobs)
                gain = 1.0 - aware["avg"] / agn["avg"]
                cells = []
                for v in variants:
                    SplitOracle.variant = v
                    with mock.patch.object(PredictorOracle, "load", classmethod(_split_load)):
                        r = run(policy, "predictor", seed, load, a.jobs)
                    kept = (1.0 - r["avg"] / agn["avg"]) / gain
                    cells.append(f"{r['avg']:5.2f} h {100 * kept:4.0f}% ch {r['churn']:4.2f}")
                ratio = agn["avg"] / aware["avg"]
                print(
                    f"{seed:>4} {load:>4g} {policy:<6} {aware['avg']:8.2f}/{agn['avg']:5.2f} ({ratio:.2f}x)  "
                    + "  ".join(f"{c:>24}" for c in cells),
                    flush=True,
                )


if __name__ == "__main__":
    sys.exit(main())
