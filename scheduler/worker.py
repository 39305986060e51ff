"""Progress reporting for real training scripts: ``ProgressReporter`` writes ``perfsched.dev/progress``.

A training worker started by the perfsched operator reports how far the job has come, the same way the
workload emulator does (format in ``scheduler.k8s.progress`` and ``docs/progress-reporting.md``): call
``report(progress)`` as often as you like (it patches the pod at most every ``min_interval_s``),
``checkpoint(progress)`` right after saving a checkpoint, and ``finish(total)`` before exiting 0.
``start_progress()`` says where the operator wants a restarted or resized gang to resume. The pod is
found from ``PERFSCHED_POD_NAME``/``PERFSCHED_POD_NAMESPACE`` (set them with the downward API). API calls
go through ``scheduler.k8s.workload``, which raises every client failure as a perfsched error; none of
them ever leaves ``report``, ``checkpoint`` or ``finish`` (an API server restart must not kill a training
run). The clock, sleep and the API are injectable for tests. Impure.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable, Mapping
from typing import Protocol

from scheduler.core.errors import ConfigError, PerfschedError, TemporaryError
from scheduler.k8s.progress import ProgressReport, parse_start_progress
from scheduler.names import ANNOTATION_PROGRESS, ANNOTATION_START_PROGRESS

log = logging.getLogger(__name__)

#: Set on every pod the operator creates (``scheduler.k8s.actuator``): the same number as the annotation.
_ENV_START_PROGRESS = "PERFSCHED_START_PROGRESS"


class PodAnnotations(Protocol):
    """The two API calls the reporter makes (``scheduler.k8s.workload.KubeWorkload`` provides them)."""

    def pod_annotations(self, namespace: str, name: str) -> dict[str, str]: ...

    def annotate_pod(self, namespace: str, name: str, annotations: Mapping[str, str | None]) -> None: ...


class ProgressReporter:
    """Reports a worker's progress on its own pod; see the module docstring.

    Only replica 0's reports count for the job, but every worker may report (the operator ignores the
    others). No method raises for an API or transport failure (losing a report must not kill a training
    run): the latest progress and checkpoint are kept and sent with the next report that goes out. While
    the API server is unreachable the reporter tries again no more often than every ``retry_s`` seconds,
    doubling up to ``max_retry_s``, so a training loop that reports every step is not slowed down by a
    dead server; the outage is logged once when it starts and once when a report gets through again.
    ``finish`` keeps trying for ``finish_timeout_s`` seconds, then logs an error and returns False.
    """

    def __init__(
        self,
        pod_name: str | None = None,
        namespace: str | None = None,
        min_interval_s: float | None = None,
        api: PodAnnotations | None = None,
        kubeconfig: str | None = None,
        clock: Callable[[], float] = time.time,
        *,
        sleep: Callable[[float], None] = time.sleep,
        retry_s: float = 2.0,
        max_retry_s: float = 30.0,
        finish_timeout_s: float = 60.0,
        start_timeout_s: float = 20.0,
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
        for field, value in (
            ("retry_s", retry_s),
            ("max_retry_s", max_retry_s),
            ("finish_timeout_s", finish_timeout_s),
            ("start_timeout_s", start_timeout_s),
        ):
            if not math.isfinite(value) or value < 0:
                raise ConfigError(f"ProgressReporter: {field} must be a finite number >= 0, got {value}")
        if api is None:
            from scheduler.k8s.connect import api_client
            from scheduler.k8s.workload import KubeWorkload

            api = KubeWorkload(api_client(kubeconfig))
        self._api = api
        self._clock = clock
        self._sleep = sleep
        self.retry_s = retry_s
        self.max_retry_s = max(retry_s, max_retry_s)
        self.finish_timeout_s = finish_timeout_s
        self.start_timeout_s = start_timeout_s
        self._checkpoint = 0.0
        self._progress = 0.0  # the latest progress given, sent or not
        self._last_sent_time: float | None = None
        self._last_sent_progress = 0.0
        self._throughput = 0.0
        self._failures = 0  # consecutive failed sends
        self._failing_since: float | None = None
        self._retry_at = 0.0
        #: reports that did not go out (for tests and a script's own logging)
        self.failed_reports = 0

    @property
    def pending(self) -> bool:
        """True while the latest progress has not reached the API server."""
        return self._failures > 0

    def start_progress(self) -> float:
        """Work units to resume from: the operator's ``perfsched.dev/start-progress`` on this pod.

        Retried for ``start_timeout_s`` while the API server is unreachable; then the value the operator
        put in the environment (``PERFSCHED_START_PROGRESS``, the same number), else 0.
        """
        deadline = self._clock() + self.start_timeout_s
        delay = max(0.1, self.retry_s)
        while True:
            try:
                raw = self._api.pod_annotations(self.namespace, self.pod_name).get(ANNOTATION_START_PROGRESS)
                break
            except TemporaryError as exc:
                left = deadline - self._clock()
                if left <= 0:
                    fallback = parse_start_progress(os.environ.get(_ENV_START_PROGRESS))
                    log.warning(
                        "cannot read this pod's start progress (%s); using %s",
                        exc,
                        f"{_ENV_START_PROGRESS}={fallback:g}" if fallback is not None else "0",
                        extra={"pod": self.pod_name, "error": str(exc)},
                    )
                    raw = None if fallback is None else str(fallback)
                    break
                self._sleep(min(delay, left))
                delay = min(self.max_retry_s, delay * 2)
            except PerfschedError as exc:
                log.warning("cannot read this pod's start progress (%s); starting from 0", exc)
                raw = None
                break
        start = parse_start_progress(raw) or 0.0
        self._checkpoint = start
        self._progress = max(self._progress, start)
        self._last_sent_progress = start
        return start

    def report(self, progress: float, checkpoint: float | None = None, force: bool = False) -> bool:
        """Record ``progress`` (work units done by the whole job); returns True when it was sent now.

        ``force`` skips the ``min_interval_s`` rate limit, not the back-off while the API is unreachable.
        """
        if not math.isfinite(progress) or progress < 0:
            raise ValueError(f"progress must be a finite number >= 0, got {progress}")
        if checkpoint is not None and not math.isfinite(checkpoint):
            raise ValueError(f"checkpoint must be a finite number, got {checkpoint}")
        self._progress = progress
        if checkpoint is not None:
            self._checkpoint = min(max(0.0, checkpoint), progress)
        now = self._clock()
        if self._failures:
            if now < self._retry_at:
                return False  # the API server was unreachable a moment ago: keep it for the retry
        elif (
            not force
            and self._last_sent_time is not None
            and now - self._last_sent_time < self.min_interval_s
        ):
            return False
        return self._send(now)

    def _send(self, now: float) -> bool:
        progress = self._progress
        if self._last_sent_time is not None and now > self._last_sent_time:
            self._throughput = max(0.0, (progress - self._last_sent_progress) / (now - self._last_sent_time))
        report = ProgressReport(progress, min(self._checkpoint, progress), self._throughput, now)
        try:
            self._api.annotate_pod(
                self.namespace, self.pod_name, {ANNOTATION_PROGRESS: report.to_annotation()}
            )
        except PerfschedError as exc:
            self._failed(now, exc)
            return False
        if self._failures:
            log.info(
                "progress reports get through again after %.1f s (%d not sent); sent progress %g",
                now - (self._failing_since or now),
                self.failed_reports,
                progress,
                extra={"pod": self.pod_name, "progress": progress},
            )
        self._failures = 0
        self._failing_since = None
        self._last_sent_time = now
        self._last_sent_progress = progress
        return True

    def _failed(self, now: float, exc: PerfschedError) -> None:
        self.failed_reports += 1
        self._failures += 1
        wait = min(self.max_retry_s, self.retry_s * 2 ** (self._failures - 1))
        self._retry_at = now + wait
        if self._failures == 1:
            self._failing_since = now
            log.warning(
                "progress report not sent (%s); keeping the latest progress and retrying every %g-%g s",
                exc,
                self.retry_s,
                self.max_retry_s,
                extra={"pod": self.pod_name, "error": str(exc)},
            )
        else:
            log.debug("progress report not sent again", extra={"pod": self.pod_name, "error": str(exc)})

    def checkpoint(self, progress: float) -> bool:
        """Call right after a checkpoint holding ``progress`` work units was saved; reports at once."""
        return self.report(progress, checkpoint=progress, force=True)

    def finish(self, total: float) -> bool:
        """Call before exiting 0: the job's work (``total``) is done and saved.

        Tries for up to ``finish_timeout_s`` seconds while the API server is unreachable; returns False
        (after logging an error) when the final report never got through, so the script can still exit.
        """
        deadline = self._clock() + self.finish_timeout_s
        while True:
            if self.report(total, checkpoint=total, force=True):
                return True
            now = self._clock()
            left = deadline - now
            if left <= 0:
                log.error(
                    "final progress report not sent after %.0f s; the pod's exit code still tells the "
                    "operator the job is done",
                    self.finish_timeout_s,
                    extra={"pod": self.pod_name, "progress": total},
                )
                return False
            self._sleep(min(max(0.0, self._retry_at - now), left) or min(0.1, left))
