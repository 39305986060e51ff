"""Progress reporting for real training scripts: ``ProgressReporter`` writes ``perfsched.dev/progress``.

A training worker started by the perfsched operator reports how far the job has come, the same way the
workload emulator does (format in ``scheduler.k8s.progress`` and ``docs/progress-reporting.md``): call
``report(progress)`` as often as you like (it patches the pod at most every ``min_interval_s``),
``checkpoint(progress)`` right after saving a checkpoint, and ``finish(total)`` before exiting 0.
``start_progress()`` says where the operator wants a restarted or resized gang to resume. The pod is
found from ``PERFSCHED_POD_NAME``/``PERFSCHED_POD_NAMESPACE`` (set them with the downward API). API calls
go through ``scheduler.k8s.workload``; the clock and the API are injectable for tests. Impure.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping
from typing import Protocol

from scheduler.core.errors import ConfigError, PerfschedError
from scheduler.k8s.progress import (
    ANNOTATION_PROGRESS,
    ANNOTATION_START_PROGRESS,
    ProgressReport,
    parse_start_progress,
)

log = logging.getLogger(__name__)


class PodAnnotations(Protocol):
    """The two API calls the reporter makes (``scheduler.k8s.workload.KubeWorkload`` provides them)."""

    def pod_annotations(self, namespace: str, name: str) -> dict[str, str]: ...

    def annotate_pod(self, namespace: str, name: str, annotations: Mapping[str, str | None]) -> None: ...


class ProgressReporter:
    """Reports a worker's progress on its own pod; see the module docstring.

    Only replica 0's reports count for the job, but every worker may report (the operator ignores the
    others). Failed API calls are logged and retried with the next report, never raised: losing a
    report must not kill a training run.
    """

    def __init__(
        self,
        pod_name: str | None = None,
        namespace: str | None = None,
        min_interval_s: float | None = None,
        api: PodAnnotations | None = None,
        kubeconfig: str | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        from scheduler.settings import Settings

        settings = Settings()
        self.pod_name = pod_name or settings.pod_name
        self.namespace = namespace or settings.pod_namespace
        if not self.pod_name or not self.namespace:
            raise ConfigError(
                "ProgressReporter: PERFSCHED_POD_NAME and PERFSCHED_POD_NAMESPACE must name this pod "
                "(set them from metadata.name / metadata.namespace with the downward API)"
            )
        self.min_interval_s = (
            settings.worker_report_interval_seconds if min_interval_s is None else min_interval_s
        )
        if self.min_interval_s < 0:
            raise ConfigError(f"ProgressReporter: min_interval_s must be >= 0, got {self.min_interval_s}")
        if api is None:
            from scheduler.k8s.workload import KubeWorkload, load_client

            api = KubeWorkload(load_client(kubeconfig))
        self._api = api
        self._clock = clock
        self._checkpoint = 0.0
        self._last_sent_time: float | None = None
        self._last_sent_progress = 0.0
        self._throughput = 0.0

    def start_progress(self) -> float:
        """Work units to resume from: the operator's ``perfsched.dev/start-progress`` on this pod, else 0."""
        try:
            raw = self._api.pod_annotations(self.namespace, self.pod_name).get(ANNOTATION_START_PROGRESS)
        except PerfschedError as exc:
            log.warning("cannot read this pod's start progress (%s); starting from 0", exc)
            return 0.0
        start = parse_start_progress(raw) or 0.0
        self._checkpoint = start
        self._last_sent_progress = start
        return start

    def report(self, progress: float, checkpoint: float | None = None, force: bool = False) -> bool:
        """Record ``progress`` (work units done by the whole job); returns True when it was sent now."""
        if not math.isfinite(progress) or progress < 0:
            raise ValueError(f"progress must be a finite number >= 0, got {progress}")
        if checkpoint is not None:
            self._checkpoint = min(max(0.0, checkpoint), progress)
        now = self._clock()
        if (
            not force
            and self._last_sent_time is not None
            and now - self._last_sent_time < self.min_interval_s
        ):
            return False
        if self._last_sent_time is not None and now > self._last_sent_time:
            self._throughput = max(0.0, (progress - self._last_sent_progress) / (now - self._last_sent_time))
        report = ProgressReport(progress, min(self._checkpoint, progress), self._throughput, now)
        try:
            self._api.annotate_pod(
                self.namespace, self.pod_name, {ANNOTATION_PROGRESS: report.to_annotation()}
            )
        except PerfschedError as exc:
            log.warning("progress report not sent (%s); will retry with the next one", exc)
            return False
        self._last_sent_time = now
        self._last_sent_progress = progress
        return True

    def checkpoint(self, progress: float) -> bool:
        """Call right after a checkpoint holding ``progress`` work units was saved; reports at once."""
        return self.report(progress, checkpoint=progress, force=True)

    def finish(self, total: float) -> bool:
        """Call before exiting 0: the job's work (``total``) is done and saved."""
        return self.report(total, checkpoint=total, force=True)
