"""The ``perfsched.dev/progress`` pod annotation: how a training worker reports its progress.

Pure codec. The annotation holds JSON ``{"progress": P, "checkpoint": C, "throughput": R, "time": T}``:
``P`` work units the job has done in total (iterations or samples, as the TrainingJob's ``work`` says),
``C`` the work saved by the last checkpoint (what survives a restart), ``R`` work units per second over
the last reporting interval and ``T`` Unix seconds of the report. Replica 0 is authoritative. When the
operator restarts or resizes a job it writes ``perfsched.dev/start-progress`` (replica 0's last
``checkpoint``) on the new pods, and the worker resumes from there. See ``docs/progress-reporting.md``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ProgressReport:
    """One progress report (see the module docstring for the units)."""

    progress: float
    checkpoint: float
    throughput: float
    time: float

    def to_annotation(self) -> str:
        return json.dumps(
            {
                "progress": round(self.progress, 6),
                "checkpoint": round(self.checkpoint, 6),
                "throughput": round(self.throughput, 6),
                "time": round(self.time, 3),
            },
            separators=(",", ":"),
        )


def _number(data: Mapping[str, object], key: str) -> float | None:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        return None
    return float(value)


def parse_progress(raw: str | None) -> ProgressReport | None:
    """The report in an annotation value, or None when it is absent or malformed (never raises).

    ``progress`` is required; a missing ``checkpoint``/``throughput``/``time`` reads as 0, and a
    checkpoint beyond the progress is clamped to it.
    """
    if not raw:
        return None
    try:
        data = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    progress = _number(data, "progress")
    if progress is None:
        return None
    checkpoint = min(_number(data, "checkpoint") or 0.0, progress)
    return ProgressReport(
        progress, checkpoint, _number(data, "throughput") or 0.0, _number(data, "time") or 0.0
    )


def parse_start_progress(raw: str | None) -> float | None:
    """The ``perfsched.dev/start-progress`` value (a non-negative number), or None."""
    if raw is None or raw == "":
        return None
    try:
        value = float(raw)
    except ValueError:
        return None
    return value if math.isfinite(value) and value >= 0 else None
