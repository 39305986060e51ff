"""``PredictorOracle``: the ``perfmodel`` throughput predictor behind the core's ``ThroughputOracle`` seam.

Maps a core ``Job`` and ``PlacementShape`` to ``perfmodel.features`` (``JobFeatures``: model, dataset,
global batch, precision, params/FLOPs; ``HardwareFeatures``: GPU type, GPUs, GPUs per node, nodes,
interconnect, network) and asks the predictor for the whole batch at once. Answers are in the job's
work units per second: iterations/s for iteration-counted jobs, samples/s for sample-counted ones. A
row the predictor cannot answer (no batch size, unknown model without params, bad shape) gets 0
("cannot run there"), and is logged once per job. The operator, the extender and the simulator import
this class. No I/O after ``load``; the predictor keeps its own cache.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from scheduler.core.protocols import ThroughputOracle
from scheduler.core.types import Job, PlacementShape, WorkUnit

if TYPE_CHECKING:
    from perfmodel.features import HardwareFeatures, JobFeatures
    from perfmodel.predictor import Predictor

log = logging.getLogger(__name__)


def job_features(job: Job) -> JobFeatures:
    """The predictor's view of a job (what it trains, not how long)."""
    from perfmodel.features import JobFeatures

    return JobFeatures(
        model=job.model,
        dataset=job.dataset,
        batch_size=job.batch_size,
        precision=job.precision,
        params=job.params,
        flops_per_sample=job.flops_per_sample,
    )


def hardware_features(shape: PlacementShape) -> HardwareFeatures:
    """The predictor's view of a placement."""
    from perfmodel.features import HardwareFeatures

    return HardwareFeatures(
        gpu_type=shape.gpu_type,
        num_gpus=shape.num_gpus,
        gpus_per_node=shape.gpus_per_node,
        num_nodes=shape.num_nodes,
        interconnect=shape.interconnect.value,
        network_gbps=shape.network_gbps,
    )


class PredictorOracle(ThroughputOracle):
    """Throughput from the learned ``perfmodel`` predictor, in each job's work units per second."""

    def __init__(self, predictor: Predictor) -> None:
        self.predictor = predictor
        self._warned: set[str] = set()
        self._features: dict[str, JobFeatures] = {}

    @classmethod
    def load(cls) -> PredictorOracle:
        """The oracle over the model shipped in ``perfmodel/data``."""
        from perfmodel.predictor import Predictor

        return cls(Predictor.load())

    def _job_features(self, job: Job) -> JobFeatures:
        feats = self._features.get(job.name)
        if feats is None or feats.batch_size != job.batch_size or feats.model != job.model:
            feats = job_features(job)
            self._features[job.name] = feats
        return feats

    def throughput(self, queries: Sequence[tuple[Job, PlacementShape]]) -> list[float]:
        from perfmodel.errors import InvalidInputError

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
        for i, ips in zip(good, iters, strict=True):
            job = queries[i][0]
            value = ips * job.batch_size if job.work_unit is WorkUnit.SAMPLES else ips
            out[i] = value if value > 0 else 0.0
        return out
