"""Benchmark diagnosis: which of the predictor's answers cost the aware policies their gain.

With ``--oracle predictor`` an aware policy keeps a share of the gain it has over its agnostic twin under
the true table ("kept", target >= 80%: docs/decision-quality.md). This reruns the predictor-in-the-loop
cell with one class of the predictor's answers changed, so the lost gain can be split by where it comes from:

- ``predictor``: the shipped predictor as ``decision_quality.py`` runs it (the baseline);
- ``truth-across-nodes``: every question about a placement that spans nodes answered by the simulator's
  ground truth instead (``perfmodel.truth.GroundTruth``), every other one by the predictor: what the
  policy would keep if the predictor were right across nodes;
- ``declared-network``: the predictor asked, for a placement that spans nodes, about the layout the
  ground truth simulates there: the same GPUs one per node at the placement's own (declared) network (the
  truth takes the cross-node sync time from the research tables' rows, measured one GPU per node, scales
  it by their link over the placement's ``network_gbps`` and ignores the GPUs per node).

The ground truth honours each placement's network (``perfmodel.truth``, rule 2; why:
docs/decisions/0009-network-aware-ground-truth.md), so there is no network-blind what-if to compare with.

"kept" = (1 - aware JCT under the variant / agnostic JCT under the table) / (1 - aware / agnostic, both
under the table), as in docs/decision-quality.md. Table runs and the agnostic runs do not depend on the
variant (agnostic LAS does not ask the oracle; agnostic SRSF's table run is the reference).

Run: ``OMP_NUM_THREADS=1 nice python bench/predictor_loss_split.py [--seeds 4] [--loads 1.5]
[--policies las,srsf] [--variants predictor,truth-across-nodes,declared-network] [--jobs 400]``
(gavel-heterogeneous; about half a minute per run on the 2-core VM, 2 + variants runs per cell).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from unittest import mock

from scheduler.core.types import Interconnect, Job, PlacementShape
from scheduler.oracles.predictor import PredictorOracle
from scheduler.oracles.table import TableOracle

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root: this file's sibling bench

from bench.decision_noise import run

Rewrite = Callable[[PlacementShape], PlacementShape]


def _one_per_node(shape: PlacementShape) -> PlacementShape:
    """The same GPUs one per node, at the placement's own network."""
    return dataclasses.replace(
        shape, num_nodes=shape.num_gpus, gpus_per_node=1, interconnect=Interconnect.PCIE
    )


REWRITES: dict[str, Rewrite] = {"declared-network": _one_per_node}
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


def _split_load(cls: type[PredictorOracle]) -> PredictorOracle:
    """``PredictorOracle.load`` for the variant runs: the shipped predictor behind ``SplitOracle``."""
    from perfmodel.predictor import Predictor

    return SplitOracle(Predictor.load())


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", default="4")
    ap.add_argument("--loads", default="1.5")
    ap.add_argument("--policies", default="las,srsf", help="ordering policies: las, srsf, fifo, ftf")
    ap.add_argument("--variants", default="predictor,truth-across-nodes,declared-network")
    ap.add_argument("--jobs", type=int, default=400)
    a = ap.parse_args(argv)
    variants = [v for v in a.variants.split(",") if v]
    for v in variants:
        if v not in VARIANTS:
            ap.error(f"--variants: unknown variant {v!r}; known: {', '.join(VARIANTS)}")
    report(a, variants)
    return 0


def report(a: argparse.Namespace, variants: Sequence[str]) -> None:
    """Print one row per (seed, load, policy) with each variant's avg JCT, kept% and churn."""
    print(
        f"gavel-heterogeneous, {a.jobs} jobs; kept% of the table's aware/agnostic gain per predictor variant"
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
