"""The JCT lower bound of ``bench/jct_bound.py``: each job alone on its fastest pool, and no run beats it."""

from __future__ import annotations

import pytest

from bench.jct_bound import best_durations, bound_cell
from scheduler.sim.cluster import ClusterSpec, PoolSpec
from scheduler.sim.simulations import SimulationRequest, run_simulations
from tests.builders import FakeOracle, job


def test_best_duration_is_the_fastest_allowed_pool_that_holds_the_job() -> None:
    spec = ClusterSpec(
        name="t",
        pools=(
            PoolSpec(name="k", gpu_product="K80", gpu_type="K80", gpus_per_node=4, nodes=4),
            PoolSpec(name="h", gpu_product="H100", gpu_type="H100", gpus_per_node=8, nodes=1),
            PoolSpec(name="a", gpu_product="A100", gpu_type="A100", gpus_per_node=8, nodes=2),
        ),
    )
    small = job("small").replicas(1).gpus_per_replica(4).work(1000).build()
    big = job("big").replicas(1).gpus_per_replica(16).work(1000).build()  # no H100 pool holds 16
    k80_only = job("k80").replicas(1).gpus_per_replica(1).work(1000).allowed("K80").build()
    truth = FakeOracle(cross_node_penalty=0.5)
    got = best_durations(spec, [small, big, k80_only], truth)
    assert got["small"] == pytest.approx(1000 / (10.0 * 4))  # H100, one node
    assert got["big"] == pytest.approx(1000 / (6.0 * 16 * 0.5))  # A100 across its two nodes
    assert got["k80"] == pytest.approx(1000 / 1.0)


def test_no_run_of_the_cell_beats_the_bound() -> None:
    bound, n, total = bound_cell("philly", "gavel", 1.5, 0, 40)
    assert n == total == 40
    req = SimulationRequest(
        policies=("las", "las:heterogeneity=ordered"),
        trace="philly-10k",
        cluster="gavel-heterogeneous",
        load=1.5,
        max_jobs=40,
        seed=0,
    )
    rows = run_simulations(req).report["results"]
    assert len(rows) == 2
    for row in rows:
        assert row["avg_jct_s"] >= bound * 0.999, row["policy"]
