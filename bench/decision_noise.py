"""Benchmark control: how far one decision-quality cell moves under information-free changes to the oracle.

A policy run with the shipped predictor in the simulator's loop is chaotic: a small change in any answer
changes which GPUs are free when, and with it where long jobs restart. Before reading a change of the
predictor from one run of ``bench/decision_quality.py``, compare it with this spread: the same cell with
every predicted throughput multiplied by a fixed per-(job, shape) factor ``exp(sigma z)``, ``z ~ N(0, 1)``
drawn from a hash of the noise seed, the job and the shape (no information; ``--sigma 0.01`` is 1%), for
each noise seed, after the noise-free run. Prints avg and p99 JCT per run, their mean, and the kept share
of the aware policy's gain over its agnostic twin against the true table's ("kept",
docs/decision-quality.md), both agnostic runs taken once per cell.

Run: ``nice python bench/decision_noise.py [--seed 1] [--load 1.5] [--policy las] [--sigma 0.01]
[--draws 4] [--jobs 400]`` (gavel-heterogeneous; about a minute per run on the 2-core VM).
"""

from __future__ import annotations

import argparse
import hashlib
import math
import random
import statistics
import sys
from collections.abc import Sequence
from unittest import mock

from scheduler.core.types import Job, PlacementShape
from scheduler.oracles.predictor import PredictorOracle
from scheduler.sim.simulations import SimulationRequest, run_simulations


class NoisyOracle(PredictorOracle):
    """The shipped predictor's answers times a fixed per-(job, shape) factor ``exp(sigma z)``."""

    sigma = 0.0
    noise_seed = 0

    def throughput(self, queries: Sequence[tuple[Job, PlacementShape]]) -> list[float]:
        out = super().throughput(queries)
        if self.sigma == 0.0:
            return out
        noisy: list[float] = []
        for (job, shape), value in zip(queries, out, strict=True):
            key = (
                self.noise_seed,
                job.name,
                shape.gpu_type,
                shape.num_gpus,
                shape.num_nodes,
                shape.gpus_per_node,
            )
            h = hashlib.blake2b(repr(key).encode(), digest_size=8).digest()
            z = random.Random(int.from_bytes(h, "little")).gauss(0.0, 1.0)
            noisy.append(value * math.exp(self.sigma * z))
        return noisy


def _noisy_load(cls: type[PredictorOracle]) -> PredictorOracle:
    """``PredictorOracle.load`` for the runs under noise: the shipped predictor behind ``NoisyOracle``."""
    from perfmodel.predictor import Predictor

    return NoisyOracle(Predictor.load())


def run(spec: str, oracle: str, seed: int, load: float, jobs: int) -> dict[str, float]:
    """avg and p99 JCT (h) and churn (preemptions + migrations per job) of one gavel-heterogeneous run
    (also ``bench/predictor_loss_split.py``'s runs)."""
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
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--load", type=float, default=1.5)
    ap.add_argument("--policy", default="las", help="an ordering policy: las, srsf, fifo, ftf")
    ap.add_argument("--sigma", type=float, default=0.01)
    ap.add_argument("--draws", type=int, default=4)
    ap.add_argument("--jobs", type=int, default=400)
    a = ap.parse_args(argv)
    agnostic = f"{a.policy}:heterogeneity=agnostic"
    table_aware = run(a.policy, "table", a.seed, a.load, a.jobs)["avg"]
    table_agn = run(agnostic, "table", a.seed, a.load, a.jobs)["avg"]
    pred_agn = run(agnostic, "predictor", a.seed, a.load, a.jobs)["avg"]
    gain = 1.0 - table_aware / table_agn
    print(
        f"seed {a.seed} load {a.load:g} {a.policy}: table aware {table_aware:.3f} h, "
        f"agnostic {table_agn:.3f} h; agnostic under the predictor {pred_agn:.3f} h"
    )
    avgs: list[float] = []
    p99s: list[float] = []
    for k in range(a.draws + 1):
        NoisyOracle.sigma, NoisyOracle.noise_seed = (0.0, 0) if k == 0 else (a.sigma, k)
        with mock.patch.object(PredictorOracle, "load", classmethod(_noisy_load)):
            r = run(a.policy, "predictor", a.seed, a.load, a.jobs)
            avg, p99 = r["avg"], r["p99"]
        avgs.append(avg)
        p99s.append(p99)
        label = "no noise" if k == 0 else f"noise seed {k}, sigma {a.sigma:g}"
        kept = (1.0 - avg / pred_agn) / gain
        print(f"  {label:<28} avg JCT {avg:6.3f} h  p99 {p99:6.1f} h  kept {100 * kept:5.1f}%")
    mean = statistics.mean(avgs)
    print(
        f"  mean of {len(avgs)} runs: avg JCT {mean:.3f} h (min {min(avgs):.3f}, max {max(avgs):.3f}), "
        f"p99 {statistics.mean(p99s):.1f} h, kept {100 * (1.0 - mean / pred_agn) / gain:.1f}%"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
