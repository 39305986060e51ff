"""``PredictorOracle``: the ``perfmodel`` throughput predictor behind the core's ``ThroughputOracle`` seam.

Maps a core ``Job`` and ``PlacementShape`` to ``perfmodel.features`` (``JobFeatures``: model, dataset,
global batch, precision, params/FLOPs; ``HardwareFeatures``: GPU type, GPUs, GPUs per node, nodes,
interconnect, network) and asks the predictor for the whole batch at once; LLM jobs go as
``perfmodel.llm.LLMJobFeatures`` (sequence length, sharding, ...), and ``memory_fit`` answers the core's
``MemoryOracle`` seam from ``perfmodel.memory``. Answers are in the job's
work units per second: iterations/s for iteration-counted jobs, samples/s for sample-counted ones (0 for
an LLM job on a placement whose GPU memory it does not fit: "cannot run there"). A row the predictor
cannot answer (no batch size, unknown model without params, bad shape) gets 0
("cannot run there"), and is logged once per job. The operator, the extender and the simulator import
this class. No I/O after ``load``; the predictor keeps its own cache.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from scheduler.core.protocols import IntervalOracle, MemoryOracle, ThroughputOracle
from scheduler.core.types import Job, MemoryFit, PlacementShape, WorkUnit
from scheduler.oracles import memory

if TYPE_CHECKING:
    from perfmodel.features import HardwareFeatures, JobFeatures
    from perfmodel.predictor import Predictor

log = logging.getLogger(__name__)


def job_features(job: Job) -> JobFeatures:
    """The predictor's view of a job (what it trains, not how long; LLM fields for LLM jobs)."""
    return memory.job_features(job)


def hardware_features(shape: PlacementShape) -> HardwareFeatures:
    """The predictor's view of a placement."""
    return memory.hardware_features(shape)


def cached_job_features(cache: dict[str, JobFeatures], job: Job) -> JobFeatures:
    """``job_features(job)``, kept in ``cache`` by job name and rebuilt when a field it reads changed."""
    feats = cache.get(job.name)
    if (
        feats is None
        or feats.batch_size != job.batch_size
        or feats.model != job.model
        or feats.profile is not job.model_profile
        or getattr(feats, "sharding", "") != job.sharding
        or getattr(feats, "sequence_length", None) != job.sequence_length
        or getattr(feats, "micro_batch", None) != job.micro_batch_size
        or getattr(feats, "activation_checkpointing", False) != job.activation_checkpointing
    ):
        feats = job_features(job)
        cache[job.name] = feats
    return feats


class PredictorOracle(ThroughputOracle, MemoryOracle, IntervalOracle):
    """Throughput from the ``perfmodel`` predictor, in each job's work units per second, its interval
    (``IntervalOracle``), and memory fit from ``perfmodel.memory`` (``scheduler.oracles.memory``)."""

    def __init__(self, predictor: Predictor) -> None:
        self.predictor = predictor
        self._memory = memory.MemoryFitter()
        self._warned: set[str] = set()
        self._features: dict[str, JobFeatures] = {}

    @classmethod
    def load(cls) -> PredictorOracle:
        """The oracle over the model shipped in ``perfmodel/data``."""
        from perfmodel.predictor import Predictor

        return cls(Predictor.load())

    def _job_features(self, job: Job) -> JobFeatures:
        return cached_job_features(self._features, job)

    def memory_fit(self, queries: Sequence[tuple[Job, PlacementShape]]) -> list[MemoryFit | None]:
        """Peak memory per GPU against the GPU's memory, per question (None where it cannot tell)."""
        return self._memory.memory_fit(queries)

    def throughput_interval(self, queries: Sequence[tuple[Job, PlacementShape]]) -> list[tuple[float, float]]:
        """The predictor's interval (``Predictions.iters_low``/``iters_high``) in each job's work units/s;
        ``(0, 0)`` for a row it cannot answer. Rows the predictor computed for ``throughput`` come from
        its cache."""
        from perfmodel.errors import InvalidInputError

        rows = [(self._job_features(job), hardware_features(shape)) for job, shape in queries]
        out = [(0.0, 0.0)] * len(queries)
        for i, res in enumerate(self.predictor.predict_each(rows) if rows else []):
            if isinstance(res, InvalidInputError):
                continue
            job = queries[i][0]
            k = job.batch_size if job.work_unit is WorkUnit.SAMPLES else 1
            lo, hi = res.iters_low[0] * k, res.iters_high[0] * k
            out[i] = (lo, hi) if 0 < lo <= hi else (0.0, 0.0)
        return out

    def throughput(self, queries: Sequence[tuple[Job, PlacementShape]]) -> list[float]:
        from perfmodel.errors import InvalidInputError
        from perfmodel.llm import LLMJobFeatures

        rows = [(self._job_features(job), hardware_features(shape)) for job, shape in queries]
        out = [0.0] * len(queries)
        try:
            preds = self.predictor.predict(rows)
            iters = preds.iters_per_s
            good = list(range(len(rows)))
        except InvalidInputError:
            # one bad row must not blind the policy to every other job: retry row by row
            good, iters = [], []
            for i, res in enumerate(self.predictor.predict_each(rows)):
                if isinstance(res, InvalidInputError):
                    name = queries[i][0].name
                    if name not in self._warned:
                        self._warned.add(name)
                        log.warning("predictor cannot answer for job", extra={"job": name, "error": str(res)})
                    continue
                good.append(i)
                iters.append(res.iters_per_s[0])
        # an LLM cannot run where it does not fit in GPU memory: 0 there (the seam's "cannot run")
        fitter = self._memory
        for i, ips in zip(good, iters, strict=True):
            job, shape = queries[i]
            value = ips * job.batch_size if job.work_unit is WorkUnit.SAMPLES else ips
            if value > 0 and isinstance(rows[i][0], LLMJobFeatures):
                fit = fitter.one(job, shape)
                value = 0.0 if fit is not None and not fit.fits else value
            out[i] = value if value > 0 else 0.0
        return out
