"""PredictorOracle maps core jobs and shapes onto the shipped perfmodel predictor, in work units/s."""

from __future__ import annotations

import pytest

from scheduler.core.types import Interconnect, Job, PlacementShape, WorkUnit
from scheduler.oracles.predictor import PredictorOracle, hardware_features, job_features


@pytest.fixture(scope="module")
def oracle() -> PredictorOracle:
    return PredictorOracle.load()


def _job(name: str, unit: WorkUnit = WorkUnit.ITERATIONS, model: str = "resnet50", batch: int = 64) -> Job:
    return Job(
        name=name,
        submit_time=0,
        total_work=1,
        model=model,
        dataset="imagenet",
        batch_size=batch,
        work_unit=unit,
    )


def test_features_carry_the_job_and_the_shape() -> None:
    jf = job_features(_job("a"))
    assert (jf.model, jf.dataset, jf.batch_size, jf.precision) == ("resnet50", "imagenet", 64, "fp32")
    hw = hardware_features(
        PlacementShape("A100", 16, num_nodes=2, interconnect=Interconnect.PCIE, network_gbps=25)
    )
    assert (hw.gpu_type, hw.num_gpus, hw.num_nodes, hw.gpus_per_node, hw.interconnect, hw.network_gbps) == (
        "A100",
        16,
        2,
        8,
        "pcie",
        25,
    )


def test_predicts_iterations_and_samples(oracle: PredictorOracle) -> None:
    shape = PlacementShape("V100", 1)
    its, samples = oracle.throughput([(_job("a"), shape), (_job("b", WorkUnit.SAMPLES), shape)])
    assert its > 0
    assert samples == pytest.approx(its * 64)  # samples/s = iterations/s x global batch


def test_faster_gpu_is_predicted_faster(oracle: PredictorOracle) -> None:
    k80, h100 = oracle.throughput(
        [(_job("a"), PlacementShape("K80", 1)), (_job("a"), PlacementShape("H100", 1))]
    )
    assert h100 > 2 * k80


def test_unanswerable_row_gets_zero_without_blinding_the_others(oracle: PredictorOracle) -> None:
    bad = Job(name="x", submit_time=0, total_work=1)  # no model, no batch size
    good, zero = oracle.throughput([(_job("a"), PlacementShape("V100", 1)), (bad, PlacementShape("V100", 1))])
    assert good > 0 and zero == 0.0


def test_the_interval_brackets_the_answer_in_the_jobs_units(oracle: PredictorOracle) -> None:
    bad = Job(name="x", submit_time=0, total_work=1)
    shape = PlacementShape("V100", 8, num_nodes=2, interconnect=Interconnect.PCIE, network_gbps=25)
    queries = [(_job("a"), shape), (_job("b", WorkUnit.SAMPLES), shape), (bad, shape)]
    points = oracle.throughput(queries)
    (lo_i, hi_i), (lo_s, hi_s), none = oracle.throughput_interval(queries)
    assert lo_i < points[0] < hi_i
    assert (lo_s, hi_s) == pytest.approx((lo_i * 64, hi_i * 64))  # samples = iterations x global batch
    assert none == (0.0, 0.0)  # a row it cannot answer: no interval, not a zero-width one
