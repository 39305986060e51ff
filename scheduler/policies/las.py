"""Tiresias-style discretized two-dimensional least-attained-service (2D-LAS) scheduling.

Pure. A job's attained service is GPU-seconds received so far (GPUs x time: the "two dimensions").
Jobs fall into queues by thresholds on it (default 1 and 10 GPU-hours: queue 0 below 1, queue 1 below
10, queue 2 above); lower queues go first, FIFO (submit time) inside a queue. Preemptive between
queues: a job in a lower queue evicts running jobs of higher queues when it does not fit otherwise;
jobs in the same queue never evict each other. ``heterogeneity: aware`` (the default) picks each job's
GPU type from the throughput matrix (``scheduler.policies.type_planner``); ``agnostic``: the allowed type
with the most free GPUs, as Tiresias does. With
``promote_knob: K`` a waiting job whose time spent waiting exceeds K times its time spent running goes
back to queue 0 (Tiresias's starvation guard).

Follows Gu et al., "Tiresias: A GPU Cluster Manager for Distributed Deep Learning", NSDI 2019
(discretized 2D-LAS). Differs: the promote knob is off by default and compares the job's whole
waiting and running time (now - submit vs attained GPU-seconds / GPUs) rather than the time since its
last preemption, which a stateless policy does not know; no placement-consolidation profiler
(placement is the core's topology-aware best fit); state is recomputed from the snapshot every round
rather than kept by the scheduler.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from scheduler.core.decisions import Decision
from scheduler.core.protocols import ThroughputOracle
from scheduler.core.round import IncrementalRound
from scheduler.core.types import ClusterSnapshot, Job, Node
from scheduler.policies.base import FreeByType, replica_options, type_infos
from scheduler.policies.config import Heterogeneity, parse_config, require
from scheduler.policies.greedy import Request, greedy_allocate
from scheduler.policies.incremental import GreedyRounds, simple_jobs, single_type
from scheduler.policies.type_planner import DEFAULT_HORIZON_S, aware_orders


@dataclass(frozen=True, slots=True)
class LasConfig:
    """``thresholds_gpu_hours``: queue boundaries on attained service, strictly increasing;
    ``heterogeneity``: ``aware`` picks GPU types from the throughput matrix, ``agnostic`` by free GPUs;
    ``horizon_s``: how far ahead a move to a faster GPU type must pay its restart (aware only)."""

    thresholds_gpu_hours: tuple[float, ...] = (1.0, 10.0)
    preemptive: bool = True
    promote_knob: float | None = None
    heterogeneity: Heterogeneity = "aware"
    horizon_s: float = DEFAULT_HORIZON_S

    def __post_init__(self) -> None:
        t = self.thresholds_gpu_hours
        require(all(x > 0 for x in t), "thresholds_gpu_hours", f"must be positive, got {list(t)}")
        require(all(a < b for a, b in itertools.pairwise(t)), "thresholds_gpu_hours", "must increase")
        require(self.promote_knob is None or self.promote_knob > 0, "promote_knob", "must be > 0")


class LasPolicy:
    """Discretized 2D-LAS on attained GPU-service, preemptive between queues."""

    name = "las"

    def __init__(self, config: LasConfig | None = None) -> None:
        self.config = config or LasConfig()
        self._bounds = [h * 3600.0 for h in self.config.thresholds_gpu_hours]

    @classmethod
    def from_config(cls, config: Mapping[str, Any] | None = None) -> LasPolicy:
        return cls(parse_config(LasConfig, cls.name, config))

    def queue_of(self, job: Job, now: float | None = None) -> int:
        """0 for the least served; a job exactly at a threshold has crossed it.

        With the promote knob and ``now``, a job that has waited more than knob x its running time
        is promoted to queue 0.
        """
        knob = self.config.promote_knob
        if knob is not None and now is not None and job.attained_service > 0:
            ran = job.attained_service / max(1, job.min_gpus)
            waited = max(0.0, now - job.submit_time - ran)
            if waited > knob * ran:
                return 0
        return bisect.bisect_right(self._bounds, job.attained_service)

    def allocate(
        self, snapshot: ClusterSnapshot, jobs: Sequence[Job], oracle: ThroughputOracle
    ) -> Mapping[str, Decision]:
        infos = type_infos(snapshot)
        free = FreeByType(snapshot, oracle)
        running = snapshot.allocations
        keyed = sorted(
            ((self.queue_of(j, None if j.name in running else snapshot.now), j.submit_time, j.name), j)
            for j in jobs
        )
        orders: dict[str, tuple[str, ...]] = {}
        if self.config.heterogeneity == "aware":  # LAS ranks by attained service; the oracle picks types
            ranked = [j for _, j in keyed]
            orders = aware_orders(snapshot, infos, oracle, ranked, horizon_s=self.config.horizon_s)
        notes = [f"LAS queue {q}" for q in range(len(self._bounds) + 1)]
        requests = [
            Request(
                j,
                orders.get(j.name) or free.order(j, infos),
                replica_options(j),
                rank=float(q),
                note=notes[q],
            )
            for (q, _, _), j in keyed
        ]
        return greedy_allocate(snapshot, jobs, requests, preemptive=self.config.preemptive)

    def incremental(
        self, nodes: Sequence[Node], oracle: ThroughputOracle, jobs: Sequence[Job]
    ) -> IncrementalRound | None:
        """The simulator's fast path (``scheduler.policies.incremental``): one GPU type, rigid preemptible
        jobs and no promote knob (whose queues move with the clock); None otherwise."""
        del oracle
        gpu_type = single_type(nodes)
        if self.config.promote_knob is not None or gpu_type is None or not simple_jobs(jobs, gpu_type):
            return None
        bounds = self._bounds

        def key_of(job: Job, progress: float, attained: float) -> tuple[tuple[float, float, str], float]:
            del progress
            q = bisect.bisect_right(bounds, attained)  # ``queue_of`` without the knob
            return (q, job.submit_time, job.name), float(q)

        def rank_of(job: Job, progress: float, attained: float) -> float:
            return float(bisect.bisect_right(bounds, attained))

        def steady_until(job: Job, attained: float, rank: float, gpus: int, now: float) -> float:
            # the queue moves when attained service reaches the next boundary, at ``gpus`` GPU-s per
            # second; a margin of 1 GPU-s (plus 1e-6 relative) covers the rounding of its running sum
            q = int(rank)
            if q >= len(bounds):
                return math.inf
            bound = bounds[q]
            return now + (bound - attained - (1.0 + 1e-6 * bound)) / gpus

        return GreedyRounds(
            nodes,
            gpu_type,
            key_of,
            preemptive=self.config.preemptive,
            rank_of=rank_of,
            steady_until=steady_until,
        )
