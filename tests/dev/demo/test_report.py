"""The demo's live counts and final report, computed from TrainingJob objects."""

from __future__ import annotations

from typing import Any

import pytest

from perfsched_dev.demo.report import (
    DemoReport,
    build_report,
    comparison_rows,
    gpus_in_use,
    percentile,
    phase_counts,
    prediction_errors,
    time_average,
    verdict,
)


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
    assert r.p99_jct_s == pytest.approx(119.4)  # 60 + (120 - 60) x 0.99 (rank 0.99 x (2 - 1))
    assert r.jcts == (60.0, 120.0)
    assert r.utilisation == pytest.approx(15 / 40)  # (10*60 + 20*60) / 120 = 15 GPUs of 40
    assert (r.preemptions, r.resizes, r.restarts) == (1, 2, 1)
    assert r.predictor_error == pytest.approx(0.2)


@pytest.mark.parametrize(
    ("values", "q", "want"),
    [
        ([5.0], 99, 5.0),
        ([30.0, 10.0, 20.0], 50, 20.0),  # sorted 10, 20, 30: rank 0.5 x 2 = 1
        ([10.0, 20.0, 30.0, 40.0], 99, 39.7),  # rank 0.99 x 3 = 2.97: 30 + 0.97 x 10
        ([10.0, 20.0], 0, 10.0),
        ([10.0, 20.0], 100, 20.0),
    ],
)
def test_percentile_interpolates_between_ranks(values: list[float], q: float, want: float) -> None:
    assert percentile(values, q) == pytest.approx(want)


def test_percentile_of_nothing_is_refused() -> None:
    with pytest.raises(ValueError, match="no values"):
        percentile([], 99)


def report(
    avg: float | None, *, unfinished: int = 0, failed: int = 0, jcts: tuple[float, ...] = ()
) -> DemoReport:
    return DemoReport(
        submitted=10,
        succeeded=10 - unfinished - failed,
        failed=failed,
        unfinished=unfinished,
        avg_jct_s=avg,
        p99_jct_s=None if avg is None else 2 * avg,
        utilisation=0.5,
        preemptions=3,
        resizes=0,
        restarts=2,
        predictor_error=0.125,
        predictor_samples=40,
        jcts=jcts,
    )


def test_comparison_rows_put_the_two_runs_side_by_side() -> None:
    rows = {label: (a, b) for label, a, b in comparison_rows(report(20.0), report(None, unfinished=10))}
    assert rows["avg JCT"] == ("20.0 s", "-")
    assert rows["p99 JCT"] == ("40.0 s", "-")
    assert rows["jobs"] == (
        "10/10 succeeded, 0 failed, 0 unfinished",
        "0/10 succeeded, 0 failed, 10 unfinished",
    )
    assert rows["GPU utilisation"] == ("50%", "50%")
    assert rows["preemptions / resizes / restarts"] == ("3 / 0 / 2", "3 / 0 / 2")
    assert rows["predictor error (mean |pred - obs| / obs)"][0] == "12.5% (40 samples)"


def test_verdict_says_lower_with_the_ratio() -> None:
    text = verdict(report(20.0), report(30.0), "las", "las:heterogeneity=ordered")
    assert text == "las's average JCT was lower: 20.0 s vs 30.0 s for las:heterogeneity=ordered (1.50x)"


def test_verdict_says_so_when_it_was_not_lower() -> None:
    text = verdict(report(31.0), report(30.0), "las", "base")
    assert "was NOT lower: 31.0 s vs 30.0 s for base" in text
    assert "NOT lower" in verdict(report(30.0), report(30.0), "las", "base")  # a tie is not lower


def test_verdict_warns_when_the_averages_cover_different_jobs() -> None:
    text = verdict(report(20.0, unfinished=2), report(30.0), "las", "base")
    assert "was lower" in text and "not every job succeeded in both runs" in text
    assert verdict(report(None, unfinished=10), report(30.0), "las", "base") == (
        "no comparison: a run finished no job"
    )
