"""The demo's live counts and final report, computed from TrainingJob objects."""

from __future__ import annotations

from typing import Any

import pytest

from perfsched_dev.demo.report import build_report, gpus_in_use, phase_counts, prediction_errors, time_average


def tj(
    phase: str,
    *,
    replicas: int = 0,
    per: int = 1,
    created: str = "2026-01-01T00:00:00Z",
    done: str | None = None,
    pred: float | None = None,
    obs: float | None = None,
    **counts: int,
) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": phase, **counts}
    if replicas:
        status["allocation"] = {"replicas": replicas, "gpusPerReplica": per, "gpuType": "V100"}
    if done:
        status["completionTime"] = done
    if pred is not None:
        status["predictedThroughput"] = pred
    if obs is not None:
        status["observedThroughput"] = obs
    return {"metadata": {"name": "x", "creationTimestamp": created}, "spec": {}, "status": status}


def test_phase_counts_in_lifecycle_order() -> None:
    jobs = [tj("Running"), tj("Pending"), tj("Running"), tj("Succeeded"), {"metadata": {}, "spec": {}}]
    assert phase_counts(jobs) == {"Pending": 2, "Running": 2, "Succeeded": 1}
    assert list(phase_counts(jobs)) == ["Pending", "Running", "Succeeded"]


def test_gpus_in_use_counts_only_live_allocations() -> None:
    # 2 x 4 + 1 x 2 = 10; the finished job's stale allocation is not counted
    jobs = [tj("Running", replicas=2, per=4), tj("Resizing", replicas=1, per=2), tj("Succeeded", replicas=8)]
    assert gpus_in_use(jobs) == 10


def test_prediction_errors_are_relative_to_observed() -> None:
    jobs = [
        tj("Running", pred=12, obs=10),
        tj("Running", pred=5, obs=10),
        tj("Running", pred=3),
        tj("Running"),
    ]
    assert prediction_errors(jobs) == pytest.approx([0.2, 0.5])  # |12-10|/10, |5-10|/10


@pytest.mark.parametrize(
    ("samples", "mean"),
    [
        ([], 0.0),
        ([(0, 5)], 5.0),
        ([(0, 4), (10, 8), (30, 0)], (4 * 10 + 8 * 20) / 30),  # step function: 4 for 10 s, 8 for 20 s
    ],
)
def test_time_average_of_a_step_function(samples: list[tuple[float, float]], mean: float) -> None:
    assert time_average(samples) == pytest.approx(mean)


def test_report_numbers() -> None:
    jobs = [
        tj("Succeeded", done="2026-01-01T00:01:00Z", preemptions=1, resizes=2),  # JCT 60 s
        tj("Succeeded", done="2026-01-01T00:02:00Z", restarts=1),  # JCT 120 s
        tj("Failed"),
        tj("Running", replicas=1),
    ]
    r = build_report(jobs, [(0, 10), (60, 20), (120, 20)], total_gpus=40, error_samples=[0.1, 0.3])
    assert (r.submitted, r.succeeded, r.failed, r.unfinished) == (4, 2, 1, 1)
    assert r.avg_jct_s == pytest.approx(90.0)  # (60 + 120) / 2
    assert r.utilisation == pytest.approx(15 / 40)  # (10*60 + 20*60) / 120 = 15 GPUs of 40
    assert (r.preemptions, r.resizes, r.restarts) == (1, 2, 1)
    assert r.predictor_error == pytest.approx(0.2)
