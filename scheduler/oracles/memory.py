"""``memory_fit`` answers for the core's ``MemoryOracle`` seam, from ``perfmodel.memory``.

Maps a core ``Job`` and ``PlacementShape`` to perfmodel's job and placement (an ``LLMJobFeatures`` for an
LLM job, ``perfmodel.llm.treat_as_llm``: a zoo LLM, a sequence length, or LLM fields on a model outside the
zoo) and
returns a ``MemoryFit`` per question. A sharding that does not suit the GPU count (``tp4xpp8`` on 16 GPUs)
is a non-fit with perfmodel's message; a job perfmodel cannot describe at all (an unknown model without
a parameter count, an unknown GPU) gets None: the memory check then assumes nothing. Results are cached
per (job features, shape). No I/O.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from scheduler.core.types import Job, MemoryFit, PlacementShape

if TYPE_CHECKING:
    from perfmodel.features import HardwareFeatures, JobFeatures

log = logging.getLogger(__name__)

#: perfmodel error fields that mean "does not fit like this" rather than "cannot tell".
_NON_FIT_FIELDS = ("sharding:", "sequence_length:", "micro_batch:", "params: an LLM")


def job_features(job: Job) -> JobFeatures:
    """perfmodel's view of a job: an ``LLMJobFeatures`` when it is an LLM job, else a ``JobFeatures``."""
    from perfmodel.features import JobFeatures
    from perfmodel.llm import LLMJobFeatures, treat_as_llm

    other = bool(job.sharding) or job.micro_batch_size is not None or job.activation_checkpointing
    if not treat_as_llm(job.model, job.sequence_length, other):
        return JobFeatures(
            model=job.model,
            dataset=job.dataset,
            batch_size=job.batch_size,
            precision=job.precision,
            params=job.params,
            flops_per_sample=job.flops_per_sample,
            profile=job.model_profile,
        )
    return LLMJobFeatures(
        model=job.model,
        dataset=job.dataset,
        batch_size=job.batch_size,
        precision=job.precision,
        params=job.params,
        flops_per_sample=job.flops_per_sample,
        sequence_length=job.sequence_length,
        sharding=job.sharding,
        micro_batch=job.micro_batch_size,
        activation_checkpointing=job.activation_checkpointing,
        profile=job.model_profile,
    )


def hardware_features(shape: PlacementShape) -> HardwareFeatures:
    """perfmodel's view of a placement (the memory fit's and the throughput predictor's)."""
    from perfmodel.features import HardwareFeatures

    return HardwareFeatures(
        gpu_type=shape.gpu_type,
        num_gpus=shape.num_gpus,
        gpus_per_node=shape.gpus_per_node,
        num_nodes=shape.num_nodes,
        interconnect=shape.interconnect.value,
        network_gbps=shape.network_gbps,
    )


class MemoryFitter:
    """``memory_fit`` for any oracle: peak memory per GPU from ``perfmodel.memory``, cached."""

    def __init__(self, cache_size: int = 65536) -> None:
        self._cache: dict[tuple[object, ...], MemoryFit | None] = {}
        self._cache_size = cache_size

    def memory_fit(self, queries: Sequence[tuple[Job, PlacementShape]]) -> list[MemoryFit | None]:
        return [self.one(job, shape) for job, shape in queries]

    def one(self, job: Job, shape: PlacementShape) -> MemoryFit | None:
        from perfmodel.errors import PerfModelError
        from perfmodel.memory import estimate_job

        feats = job_features(job)
        key = (feats.key, type(feats).__name__, shape)
        if key in self._cache:
            return self._cache[key]
        hw = hardware_features(shape)
        result: MemoryFit | None
        try:
            est = estimate_job(feats, hw)
            result = MemoryFit(est.fits, est.total_gib, est.capacity_gib, est.message)
        except PerfModelError as exc:
            text = str(exc)
            if text.startswith(_NON_FIT_FIELDS):
                result = MemoryFit(False, 0.0, 0.0, f"{text} (at {shape.num_gpus} x {shape.gpu_type})")
            else:
                log.debug("memory fit unknown", extra={"job": job.name, "error": text})
                result = None
        if len(self._cache) >= self._cache_size:
            self._cache.clear()
        self._cache[key] = result
        return result
