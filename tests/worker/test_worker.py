"""``scheduler.worker.ProgressReporter``: what a real training script's reports look like on its pod."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from scheduler.core.errors import ConfigError, TemporaryError
from scheduler.k8s.progress import ProgressReport, parse_progress
from scheduler.worker import ProgressReporter


class FakePods:
    def __init__(self, annotations: dict[str, str] | None = None, fail: bool = False) -> None:
        self.annotations = dict(annotations or {})
        self.patches: list[dict[str, str | None]] = []
        self.fail = fail

    def pod_annotations(self, namespace: str, name: str) -> dict[str, str]:
        assert (namespace, name) == ("team", "job-g1-0")
        return dict(self.annotations)

    def annotate_pod(self, namespace: str, name: str, annotations: Mapping[str, str | None]) -> None:
        assert (namespace, name) == ("team", "job-g1-0")
        if self.fail:
            raise TemporaryError("apiserver unavailable")
        self.patches.append(dict(annotations))

    def last(self) -> ProgressReport | None:
        raw = self.patches[-1]["perfsched.dev/progress"] if self.patches else None
        return parse_progress(raw)


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def reporter(pods: FakePods, clock: Clock, interval: float = 10.0) -> ProgressReporter:
    return ProgressReporter("job-g1-0", "team", min_interval_s=interval, api=pods, clock=clock)


def test_reports_are_rate_limited_and_carry_throughput_and_checkpoint() -> None:
    pods, clock = FakePods(), Clock()
    rep = reporter(pods, clock)
    assert rep.report(0.0)
    clock.t += 4
    assert not rep.report(40.0)  # 4 s < 10 s since the last report
    clock.t += 6
    assert rep.report(100.0)
    # 100 units in the 10 s since the last sent report: 10 units/s
    assert pods.last() == ProgressReport(100.0, 0.0, 10.0, 110.0)
    clock.t += 1
    assert rep.checkpoint(120.0)  # forced: a checkpoint is reported at once
    assert pods.last() == ProgressReport(120.0, 120.0, 20.0, 111.0)
    clock.t += 2
    assert rep.finish(150.0)
    assert pods.last() == ProgressReport(150.0, 150.0, 15.0, 113.0)
    assert len(pods.patches) == 4


def test_start_progress_comes_from_the_operators_annotation() -> None:
    pods, clock = FakePods({"perfsched.dev/start-progress": "2500"}), Clock()
    rep = reporter(pods, clock)
    assert rep.start_progress() == 2500.0
    rep.report(2600.0)
    report = pods.last()
    assert report is not None and report.checkpoint == 2500.0  # the resumed checkpoint still holds
    assert reporter(FakePods(), clock).start_progress() == 0.0


def test_api_failures_do_not_raise_and_are_retried() -> None:
    pods, clock = FakePods(fail=True), Clock()
    rep = reporter(pods, clock)
    assert rep.report(10.0) is False
    pods.fail = False
    assert rep.report(15.0) is False  # backing off: the API server was unreachable a moment ago
    clock.t += rep.retry_s
    assert rep.report(20.0) is True  # not rate limited: nothing was sent before
    assert pods.last() == ProgressReport(20.0, 0.0, 0.0, 102.0)


def test_bad_input_is_refused() -> None:
    rep = reporter(FakePods(), Clock())
    with pytest.raises(ValueError, match="progress"):
        rep.report(float("nan"))
    with pytest.raises(ValueError, match="progress"):
        rep.report(-1.0)


def test_pod_identity_is_required(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PERFSCHED_POD_NAME", raising=False)
    monkeypatch.delenv("PERFSCHED_POD_NAMESPACE", raising=False)
    with pytest.raises(ConfigError, match="PERFSCHED_POD_NAME"):
        ProgressReporter(api=FakePods())
    monkeypatch.setenv("PERFSCHED_POD_NAME", "job-g1-0")
    monkeypatch.setenv("PERFSCHED_POD_NAMESPACE", "team")
    assert ProgressReporter(api=FakePods()).pod_name == "job-g1-0"
