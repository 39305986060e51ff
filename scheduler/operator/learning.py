"""The operator's throughput oracle: the ``perfmodel`` predictor, corrected online by observed throughput.

In-memory state only (no I/O, no clock). ``CorrectedOracle`` answers the core's ``ThroughputOracle``
questions with ``perfmodel.online.OnlineCorrector.predict`` (offline prediction times the learned
per-GPU-type, per-model-and-type and per-job corrections) and feeds the workers' reported throughput into
the corrector with ``observe``. Observations are keyed by the (job features, placement) pair, so a job's
own correction applies exactly where it was measured, and the shared levels move every other prediction
on that GPU type and model. Work units are converted to samples per second for the corrector
(iterations x global batch) and back. A row the predictor cannot answer is 0 ("cannot run there"), as in
``scheduler.oracles.PredictorOracle``, whose feature mapping this class reuses; so is an LLM job on a
placement whose GPU memory it does not fit, and ``memory_fit`` answers the core's ``MemoryOracle`` seam
(``scheduler.oracles.memory``).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from scheduler.core.protocols import IntervalOracle, MemoryOracle, ThroughputOracle
from scheduler.core.types import Job, MemoryFit, PlacementShape, WorkUnit
from scheduler.oracles.memory import MemoryFitter
from scheduler.oracles.predictor import hardware_features, job_features

if TYPE_CHECKING:
    from perfmodel.online import OnlineCorrector

log = logging.getLogger(__name__)


class ThroughputLearner(Protocol):
    """An oracle that also learns: ``observe`` records a measured throughput (work units/s)."""

    def throughput(self, queries: Sequence[tuple[Job, PlacementShape]]) -> list[float]: ...

    def observe(self, job: Job, shape: PlacementShape, throughput: float) -> None: ...


class CorrectedOracle(ThroughputOracle, MemoryOracle, IntervalOracle):
    """``ThroughputOracle`` over an ``OnlineCorrector`` (see the module docstring), and ``MemoryOracle``."""

    def __init__(self, corrector: OnlineCorrector) -> None:
        self.corrector = corrector
        self._warned: set[str] = set()
        self._memory = MemoryFitter()

    def memory_fit(self, queries: Sequence[tuple[Job, PlacementShape]]) -> list[MemoryFit | None]:
        """Peak memory per GPU against the GPU's memory, per question (None where it cannot tell)."""
        return self._memory.memory_fit(queries)

    @classmethod
    def load(cls) -> CorrectedOracle:
        """The shipped predictor with an empty online correction."""
        from perfmodel.online import OnlineCorrector
        from perfmodel.predictor import Predictor

        return cls(OnlineCorrector(Predictor.load()))

    def _warn(self, job: Job, exc: Exception) -> None:
        if job.name not in self._warned:
            self._warned.add(job.name)
            log.warning("predictor cannot answer for job", extra={"job": job.name, "error": str(exc)})

    def throughput(self, queries: Sequence[tuple[Job, PlacementShape]]) -> list[float]:
        from perfmodel.errors import InvalidInputError

        if not queries:
            return []
        rows = [(job_features(job), hardware_features(shape)) for job, shape in queries]
        try:
            preds = self.corrector.predict(rows)
            iters = list(preds.iters_per_s)
        except InvalidInputError:
            # one bad row must not blind the policy to every other job: answer row by row
            iters = []
            for (job, _), row in zip(queries, rows, strict=True):
                try:
                    iters.append(self.corrector.predict([row]).iters_per_s[0])
                except InvalidInputError as exc:
                    self._warn(job, exc)
                    iters.append(0.0)
        from perfmodel.llm import LLMJobFeatures

        out = []
        for (job, shape), ips, (feats, _) in zip(queries, iters, rows, strict=True):
            value = ips * job.batch_size if job.work_unit is WorkUnit.SAMPLES else ips
            if value > 0 and isinstance(feats, LLMJobFeatures):
                fit = self._memory.one(job, shape)
                value = 0.0 if fit is not None and not fit.fits else value
            out.append(value if value > 0 and math.isfinite(value) else 0.0)
        return out

    def throughput_interval(self, queries: Sequence[tuple[Job, PlacementShape]]) -> list[tuple[float, float]]:
        """The corrected prediction's interval (``IntervalOracle``; it narrows as a job is observed), in
        each job's work units/s; ``(0, 0)`` for a row the predictor cannot answer."""
        from perfmodel.errors import InvalidInputError

        if not queries:
            return []
        rows = [(job_features(job), hardware_features(shape)) for job, shape in queries]
        bounds: list[tuple[float, float]] = []
        try:
            preds = self.corrector.predict(rows)
            bounds = list(zip(preds.iters_low, preds.iters_high, strict=True))
        except InvalidInputError:  # one bad row must not hide the others' intervals: row by row
            for row in rows:
                try:
                    one = self.corrector.predict([row])
                    bounds.append((one.iters_low[0], one.iters_high[0]))
                except InvalidInputError:
                    bounds.append((0.0, 0.0))
        out: list[tuple[float, float]] = []
        for (job, _), (lo, hi) in zip(queries, bounds, strict=True):
            k = job.batch_size if job.work_unit is WorkUnit.SAMPLES else 1
            ok = 0 < lo <= hi and math.isfinite(hi)
            out.append((lo * k, hi * k) if ok else (0.0, 0.0))
        return out

    def observe(self, job: Job, shape: PlacementShape, throughput: float) -> None:
        """Record that ``job`` ran at ``throughput`` work units/s on ``shape``; bad input is ignored."""
        from perfmodel.errors import InvalidInputError

        if not (throughput > 0 and math.isfinite(throughput)) or job.batch_size <= 0:
            return
        samples = throughput if job.work_unit is WorkUnit.SAMPLES else throughput * job.batch_size
        try:
            self.corrector.observe(job_features(job), hardware_features(shape), samples)
        except InvalidInputError as exc:
            self._warn(job, exc)
