"""The default demo's cluster and workload make the scheduling choices matter, checked in the simulator.

``perfsched demo`` with its defaults (40 jobs of the shipped Philly sample on one node per pool of
``gavel-heterogeneous``: 4 K80 + 4 P100 + 4 V100, 180 s) is replayed by the simulator's engine with the
true throughput table, round every 2 s (the demo operator's period) and a 10 s restart cost: queues must
form, the jobs must differ widely in what a V100 buys them, every job must finish well within the demo's
limit under the aware policy and the agnostic one (the live run adds pod start-up and status latency), and
aware LAS must beat agnostic LAS there. The live figures are in docs/demo.md.
"""

from __future__ import annotations

import statistics

import pytest

from perfmodel.truth import GroundTruth
from perfsched_dev.demo.emulated import DemoOptions, build_jobs
from scheduler.core.round import run_round
from scheduler.oracles.table import TableOracle
from scheduler.policies import make_policy_from_spec
from scheduler.sim.cluster import spec_to_nodes
from scheduler.sim.engine import Engine, EngineConfig, EngineResult
from scheduler.sim.simulations import las_thresholds_gpu_s

OPTIONS = DemoOptions()


def _replay(spec_text: str) -> EngineResult:
    jobs, spec = build_jobs(OPTIONS)
    policy = make_policy_from_spec(spec_text)
    truth = TableOracle(GroundTruth.load())
    config = EngineConfig(
        round_seconds=2.0,
        restart_cost_s=10.0,
        resize_cost_s=10.0,
        wake_thresholds_gpu_s=las_thresholds_gpu_s(policy),
    )
    return Engine(spec_to_nodes(spec), jobs, policy, truth, truth, config, run_round=run_round).run()


@pytest.fixture(scope="module")
def runs() -> dict[str, EngineResult]:
    return {spec: _replay(spec) for spec in ("las", "las:heterogeneity=agnostic")}


def test_the_default_cluster_is_small_and_mixed() -> None:
    _, spec = build_jobs(OPTIONS)
    assert {p.gpu_product: p.nodes * p.gpus_per_node for p in spec.pools} == {
        "Tesla-K80": 4,
        "Tesla-P100-PCIE-16GB": 4,
        "Tesla-V100-SXM2-16GB": 4,
    }


def test_jobs_gain_very_differently_from_a_v100() -> None:
    jobs, _ = build_jobs(OPTIONS)
    truth = GroundTruth.load()
    gains = []
    for j in jobs:
        k80 = truth.throughput(j.model, j.batch_size, "K80", j.max_gpus, 1, j.dataset)
        v100 = truth.throughput(j.model, j.batch_size, "V100", j.max_gpus, 1, j.dataset)
        assert k80 and v100, j.name
        gains.append(v100 / k80)
    assert min(gains) < 1.0  # some job runs slower on a V100 than on a K80 (the recommendation model)
    assert max(gains) > 5.0  # and some more than 5x faster


def test_queues_form_under_both_policies(runs: dict[str, EngineResult]) -> None:
    for spec, result in runs.items():
        waited = [r for r in result.records if (r.queueing_delay or 0.0) > 1.0]
        assert len(waited) >= 10, spec
        assert max(result.series_waiting) >= 4, spec


def test_every_job_finishes_well_within_the_limit(runs: dict[str, EngineResult]) -> None:
    for spec, result in runs.items():
        assert all(r.finish is not None for r in result.records), spec
        assert result.end_time <= 0.7 * OPTIONS.duration_s, spec


def test_the_aware_policy_has_the_lower_average_jct(runs: dict[str, EngineResult]) -> None:
    def avg(result: EngineResult) -> float:
        return statistics.mean(r.jct for r in result.records if r.jct is not None)

    assert avg(runs["las"]) < 0.8 * avg(runs["las:heterogeneity=agnostic"])
