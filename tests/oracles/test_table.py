"""TableOracle: exact truth at MRE 0, injected error with the asked mean, deterministic per (job, shape)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.core.types import Job, PlacementShape, WorkUnit
from scheduler.oracles.table import ErrorInjector, TableOracle, mre_of_sigma, sigma_for_mre


class FakeTable:
    """iterations/s = 10 x GPUs on V100, 5 x GPUs on K80, halved when spread over nodes; only model 'm'."""

    def __init__(self) -> None:
        self.calls = 0

    def throughput(
        self,
        model: str,
        batch_size: int,
        gpu_type: str,
        num_gpus: int,
        num_nodes: int = 1,
        dataset: str = "",
        network_gbps: float | None = None,
    ) -> float | None:
        self.calls += 1
        if model != "m":
            return None
        base = {"V100": 10.0, "K80": 5.0}.get(gpu_type)
        return None if base is None else base * num_gpus / num_nodes


def _job(name: str, model: str = "m", batch: int = 32, unit: WorkUnit = WorkUnit.ITERATIONS) -> Job:
    return Job(name=name, submit_time=0.0, total_work=100.0, model=model, batch_size=batch, work_unit=unit)


@pytest.mark.parametrize(
    ("job", "shape", "expected"),
    [
        (_job("a"), PlacementShape("V100", 4), 40.0),  # 10 x 4 GPUs
        (_job("a"), PlacementShape("V100", 4, num_nodes=2), 20.0),  # 10 x 4 / 2 nodes
        (_job("a"), PlacementShape("K80", 2), 10.0),  # 5 x 2
        (_job("a", unit=WorkUnit.SAMPLES), PlacementShape("V100", 1), 320.0),  # 10 it/s x batch 32
        (_job("a"), PlacementShape("H100", 1), 0.0),  # not in the table -> cannot run
        (_job("a", model="other"), PlacementShape("V100", 1), 0.0),  # unknown model
        (_job("a", batch=0), PlacementShape("V100", 1), 0.0),  # no batch size: nothing to look up
    ],
)
def test_mre_zero_is_the_table(job: Job, shape: PlacementShape, expected: float) -> None:
    assert TableOracle(FakeTable()).throughput([(job, shape)]) == [expected]


def test_fallback_answers_what_the_table_lacks() -> None:
    class Half:
        def throughput(self, queries: object) -> list[float]:
            return [0.5 for _ in queries]  # type: ignore[attr-defined]

    oracle = TableOracle(FakeTable(), fallback=Half())
    assert oracle.throughput(
        [(_job("a"), PlacementShape("H100", 1)), (_job("a"), PlacementShape("V100", 1))]
    ) == [
        0.5,
        10.0,
    ]


def test_table_lookups_are_cached() -> None:
    table = FakeTable()
    oracle = TableOracle(table)
    q = [(_job(f"j{i}"), PlacementShape("V100", 2)) for i in range(50)]
    oracle.throughput(q)
    oracle.throughput(q)
    assert table.calls == 1  # same (model, batch, dataset, shape) for all 50 jobs


def test_the_truth_is_asked_at_the_placements_network_across_nodes() -> None:
    # The real truth: a cross-node placement behind a faster network runs faster (the measured sync time
    # scales with the link); inside one node the network does not enter the question.
    from perfmodel.truth import GroundTruth

    oracle = TableOracle(GroundTruth.load())
    job = Job(name="lstm", submit_time=0.0, total_work=1.0, model="lstm", dataset="wikitext-2", batch_size=20)
    across = [PlacementShape("V100", 8, num_nodes=2, network_gbps=g) for g in (10.0, 25.0, 100.0)]
    slow, mid, fast = oracle.throughput([(job, s) for s in across])
    assert 0 < slow < mid < fast
    inside = [PlacementShape("V100", 4, network_gbps=g) for g in (10.0, 100.0)]
    a, b = oracle.throughput([(job, s) for s in inside])
    assert a == b > 0


@pytest.mark.parametrize("mre", [0.1, 0.25, 0.5, 0.75])
def test_injected_error_has_the_asked_mean_relative_error(mre: float) -> None:
    # the error is on the predicted execution time: |t_pred / t_true - 1| = |true / pred - 1|, averaged
    oracle = TableOracle(FakeTable(), mre=mre, seed=7)
    jobs = [_job(f"j{i}") for i in range(4000)]
    preds = oracle.throughput([(j, PlacementShape("V100", 1)) for j in jobs])
    measured = sum(abs(10.0 / p - 1.0) for p in preds) / len(preds)
    # standard error of the mean of |e^X - 1| over 4000 draws is below 3% of m for these m
    assert measured == pytest.approx(mre, rel=0.08)
    assert all(p > 0 for p in preds)


def test_errors_are_deterministic_per_job_and_shape_and_seeded() -> None:
    q = [
        (_job("a"), PlacementShape("V100", 1)),
        (_job("a"), PlacementShape("V100", 2)),
        (_job("b"), PlacementShape("V100", 1)),
    ]
    first = TableOracle(FakeTable(), mre=0.5, seed=1).throughput(q)
    again = TableOracle(FakeTable(), mre=0.5, seed=1).throughput(list(reversed(q)))
    assert first == list(reversed(again))  # order of the questions does not matter
    assert first != TableOracle(FakeTable(), mre=0.5, seed=2).throughput(q)
    # per (job, shape): job a's two shapes get different factors (40 and 20 would otherwise be in ratio 2)
    assert first[0] * 2 != pytest.approx(first[1])


def test_one_error_per_job_when_not_per_shape() -> None:
    oracle = TableOracle(FakeTable(), mre=0.5, seed=3, per_shape=False)
    one, two = oracle.throughput(
        [(_job("a"), PlacementShape("V100", 1)), (_job("a"), PlacementShape("V100", 2))]
    )
    assert two == pytest.approx(2 * one)  # same factor on both shapes


@pytest.mark.parametrize(
    ("sigma", "mre"),
    [
        # E|e^X - 1| = e^(s^2/2) erf(s / sqrt 2): s = 0 -> 0; s = 1 -> e^0.5 x erf(0.7071) = 1.6487 x 0.6827
        (0.0, 0.0),
        (1.0, math.exp(0.5) * math.erf(1 / math.sqrt(2))),
    ],
)
def test_mre_of_sigma_closed_form(sigma: float, mre: float) -> None:
    assert mre_of_sigma(sigma) == pytest.approx(mre)


@settings(max_examples=40, deadline=None)
@given(st.floats(min_value=0.0, max_value=3.0))
def test_sigma_for_mre_inverts_mre_of_sigma(mre: float) -> None:
    assert mre_of_sigma(sigma_for_mre(mre)) == pytest.approx(mre, abs=1e-9)


def test_bad_mre_is_a_config_error() -> None:
    from scheduler.core.errors import ConfigError

    with pytest.raises(ConfigError, match="mre"):
        ErrorInjector(-0.1)
