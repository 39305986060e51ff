"""Tiresias-style discretized two-dimensional least-attained-service (2D-LAS) scheduling.

Pure. A job's attained service is GPU-seconds received so far (GPUs x time: the "two dimensions").
Jobs fall into queues by thresholds on it (default 1 and 10 GPU-hours: queue 0 below 1, queue 1 below
10, queue 2 above); lower queues go first, FIFO (submit time) inside a queue. Preemptive between
queues: a job in a lower queue evicts running jobs of higher queues when it does not fit otherwise;
jobs in the same queue never evict each other. Type-agnostic (most free allowed GPU type).

Follows Gu et al., "Tiresias: A GPU Cluster Manager for Distributed Deep Learning", NSDI 2019
(discretized 2D-LAS). Differs: no starvation "promote knob" (a long-waiting job is not moved back to
queue 0), no placement-consolidation profiler (placement is the core's topology-aware best fit), and
state is recomputed from the snapshot every round rather than kept by the scheduler.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from scheduler.core.decisions import Decision
from scheduler.core.protocols import ThroughputOracle
from scheduler.core.types import ClusterSnapshot, Job
from scheduler.policies.base import (
    FreeByType,
    Request,
    greedy_allocate,
    parse_config,
    replica_options,
    require,
    type_infos,
)


@dataclass(frozen=True, slots=True)
class LasConfig:
    """``thresholds_gpu_hours``: queue boundaries on attained service, strictly increasing."""

    thresholds_gpu_hours: tuple[float, ...] = (1.0, 10.0)
    preemptive: bool = True

    def __post_init__(self) -> None:
        t = self.thresholds_gpu_hours
        require(all(x > 0 for x in t), "thresholds_gpu_hours", f"must be positive, got {list(t)}")
        require(all(a < b for a, b in itertools.pairwise(t)), "thresholds_gpu_hours", "must increase")


class LasPolicy:
    """Discretized 2D-LAS on attained GPU-service, preemptive between queues."""

    name = "las"

    def __init__(self, config: LasConfig | None = None) -> None:
        self.config = config or LasConfig()
        self._bounds = [h * 3600.0 for h in self.config.thresholds_gpu_hours]

    @classmethod
    def from_config(cls, config: Mapping[str, Any] | None = None) -> LasPolicy:
        return cls(parse_config(LasConfig, cls.name, config))

    def queue_of(self, job: Job) -> int:
        """0 for the least served; a job exactly at a threshold has crossed it."""
        return bisect.bisect_right(self._bounds, job.attained_service)

    def allocate(
        self, snapshot: ClusterSnapshot, jobs: Sequence[Job], oracle: ThroughputOracle
    ) -> Mapping[str, Decision]:
        del oracle  # LAS ranks by attained service only
        infos = type_infos(snapshot)
        free = FreeByType(snapshot)
        keyed = sorted(((self.queue_of(j), j.submit_time, j.name), j) for j in jobs)
        requests = [
            Request(j, free.order(j, infos), replica_options(j), rank=float(q), note=f"LAS queue {q}")
            for (q, _, _), j in keyed
        ]
        return greedy_allocate(snapshot, jobs, requests, preemptive=self.config.preemptive)
