"""The ``perfsched.dev/progress`` annotation format (shared by the emulator, workers and the operator)."""

from __future__ import annotations

import json

import pytest

from scheduler.k8s.progress import ProgressReport, parse_progress, parse_start_progress


def test_round_trip_uses_the_documented_keys() -> None:
    report = ProgressReport(progress=1200.5, checkpoint=1000.0, throughput=12.25, time=1_700_000_000.123)
    raw = report.to_annotation()
    assert json.loads(raw) == {
        "progress": 1200.5,
        "checkpoint": 1000.0,
        "throughput": 12.25,
        "time": 1700000000.123,
    }
    assert parse_progress(raw) == report


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (None, None),
        ("", None),
        ("not json", None),
        ("[1, 2]", None),
        ('{"checkpoint": 3}', None),  # progress is required
        ('{"progress": -1}', None),
        ('{"progress": "12"}', None),
        ('{"progress": 10}', ProgressReport(10.0, 0.0, 0.0, 0.0)),
        ('{"progress": 10, "checkpoint": 50}', ProgressReport(10.0, 10.0, 0.0, 0.0)),  # clamped
        ('{"progress": 10, "throughput": true}', ProgressReport(10.0, 0.0, 0.0, 0.0)),
    ],
)
def test_parse_is_lenient_but_never_wrong(raw: str | None, expected: ProgressReport | None) -> None:
    assert parse_progress(raw) == expected


@pytest.mark.parametrize(
    ("raw", "expected"),
    [(None, None), ("", None), ("x", None), ("-3", None), ("nan", None), ("250.5", 250.5)],
)
def test_start_progress(raw: str | None, expected: float | None) -> None:
    assert parse_start_progress(raw) == expected
