"""Predicted-throughput tables and marginal-gain sharing used by the performance-aware policies.

Pure. ``PredictedThroughputs`` asks the oracle once per round for every (job, GPU type, replica count)
a policy may consider, on the compact shape of that many GPUs of that type. ``grow_by_marginal_gain``
hands out free GPUs one step at a time to the job whose normalised throughput (speed-up over its own
baseline) rises most per GPU: diminishing returns make this spread GPUs across jobs (Pollux's goodput
view, with the oracle's throughput standing in for goodput).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass

from scheduler.core.protocols import ThroughputOracle
from scheduler.core.types import ClusterSnapshot, Job, PlacementShape
from scheduler.policies.base import TypeInfo, allowed_types, batch_throughput


class PredictedThroughputs:
    """Predicted throughput of each job per (GPU type, replicas), from one batched oracle call."""

    def __init__(
        self,
        oracle: ThroughputOracle,
        jobs: Sequence[Job],
        infos: Mapping[str, TypeInfo],
        counts: Callable[[Job], Iterable[int]],
        extra: Sequence[tuple[Job, PlacementShape]] = (),
    ) -> None:
        """``extra`` questions ride along in the same oracle call; ``extra_answers`` holds their answers."""
        keys: list[tuple[str, str, int]] = []
        queries: list[tuple[Job, PlacementShape]] = []
        shapes: dict[tuple[str, int], PlacementShape] = {}  # many jobs share a (type, GPUs) shape
        for job in jobs:
            reps = sorted(set(counts(job)))
            gpr = job.gpus_per_replica
            name = job.name
            for t in allowed_types(job, infos):
                info = infos[t]
                for r in reps:
                    gpus = r * gpr
                    if r <= 0 or gpus > info.capacity:
                        continue
                    shape = shapes.get((t, gpus))
                    if shape is None:
                        shape = shapes[(t, gpus)] = info.shape(gpus)
                    keys.append((name, t, r))
                    queries.append((job, shape))
        values = batch_throughput(oracle, [*queries, *extra])
        self._table: dict[tuple[str, str, int], float] = dict(zip(keys, values[: len(keys)], strict=True))
        self.extra_answers: list[float] = values[len(keys) :]

    def only(self, counts: Mapping[str, Iterable[int]]) -> PredictedThroughputs:
        """These answers for the jobs named in ``counts``, at the replica counts given there only, without
        asking the oracle again (answers not asked before stay absent: 0.0)."""
        keep = {name: frozenset(c) for name, c in counts.items()}
        out = PredictedThroughputs.__new__(PredictedThroughputs)
        out._table = {k: v for k, v in self._table.items() if k[2] in keep.get(k[0], ())}
        out.extra_answers = []
        return out

    def peak(self, job: Job, gpu_type: str) -> tuple[int, float]:
        """The largest asked replica count with a positive throughput on ``gpu_type``, and that throughput.

        ``(0, 0.0)`` when the job cannot run there (or no asked count fits the type's capacity).
        """
        for r in range(job.max_replicas, 0, -1):
            v = self.get(job.name, gpu_type, r)
            if v > 0:
                return r, v
        return 0, 0.0

    def get(self, job: str, gpu_type: str, replicas: int) -> float:
        """Throughput in work units/s, 0.0 where it cannot run or was not asked."""
        return max(0.0, self._table.get((job, gpu_type, replicas), 0.0))

    def best_type(self, job: Job, replicas: int, types: Iterable[str]) -> tuple[str | None, float]:
        """The fastest of ``types`` for ``replicas`` replicas (ties by name) and its throughput."""
        best: tuple[str | None, float] = (None, 0.0)
        for t in sorted(types):
            v = self.get(job.name, t, replicas)
            if v > best[1]:
                best = (t, v)
        return best


@dataclass
class Share:
    """A job's assignment while sharing: GPU type and replicas (0: none yet)."""

    gpu_type: str | None
    replicas: int


def grow_by_marginal_gain(
    jobs: Sequence[Job],
    shares: MutableMapping[str, Share],
    free: MutableMapping[str, int],
    table: PredictedThroughputs,
    norm: Mapping[str, float],
    *,
    may_start: Callable[[Job], bool],
    may_grow: Callable[[Job, str, int, int], bool],
    types_of: Callable[[Job], Sequence[str]],
) -> None:
    """Hand out ``free`` GPUs (per type) by largest normalised throughput gain per GPU.

    A job without GPUs may start at its minimum on any of ``types_of(job)`` (when ``may_start``);
    a job with GPUs grows one replica at a time on its type while ``may_grow(job, type, r, r+1)``.
    ``shares`` and ``free`` are updated in place. Deterministic: ties go to the job name.
    """
    heap: list[tuple[float, str, str, int]] = []
    by_name = {j.name: j for j in jobs}

    def push(job: Job, t: str, r_from: int) -> None:
        lo = job.min_replicas if job.is_elastic else job.max_replicas
        r_to = lo if r_from == 0 else r_from + 1
        if r_to > job.max_replicas or norm.get(job.name, 0.0) <= 0:
            return
        if r_from > 0 and not may_grow(job, t, r_from, r_to):
            return
        gain = (table.get(job.name, t, r_to) - table.get(job.name, t, r_from)) / norm[job.name]
        gpus = (r_to - r_from) * job.gpus_per_replica
        if gain <= 1e-12:
            return
        heapq.heappush(heap, (-gain / gpus, job.name, t, r_from))

    for job in jobs:
        share = shares.get(job.name)
        if share is None or share.replicas == 0:
            if may_start(job):
                for t in types_of(job):
                    push(job, t, 0)
        elif share.gpu_type is not None:
            push(job, share.gpu_type, share.replicas)
    while heap:
        _, name, t, r_from = heapq.heappop(heap)
        job = by_name[name]
        share = shares.setdefault(name, Share(None, 0))
        if share.replicas != r_from or (r_from > 0 and share.gpu_type != t):
            continue  # stale: the job moved on since this step was queued
        lo = job.min_replicas if job.is_elastic else job.max_replicas
        r_to = lo if r_from == 0 else r_from + 1
        gpus = (r_to - r_from) * job.gpus_per_replica
        if free.get(t, 0) < gpus:
            continue
        free[t] -= gpus
        share.gpu_type = t
        share.replicas = r_to
        push(job, t, r_to)


def used_by_type(snapshot: ClusterSnapshot, exclude: Iterable[str] = ()) -> dict[str, int]:
    """GPUs held per GPU type by the snapshot's allocations, leaving out the jobs in ``exclude``."""
    skip = set(exclude)
    out: dict[str, int] = {}
    for name, alloc in snapshot.allocations.items():
        if name not in skip:
            out[alloc.gpu_type] = out.get(alloc.gpu_type, 0) + alloc.total_gpus
    return out


def shrink_for(
    waiting: Job,
    jobs: Sequence[Job],
    shares: MutableMapping[str, Share],
    free: MutableMapping[str, int],
    table: PredictedThroughputs,
    norm: Mapping[str, float],
    types: Sequence[str],
    *,
    penalty: float,
) -> bool:
    """Start ``waiting`` at its minimum by taking replicas from elastic jobs above their minimum.

    Done only when its speed-up gain beats the donors' lost speed-up plus ``penalty`` x their current
    speed-up per resized donor. Updates ``shares``/``free``; returns whether it happened.
    """
    lo_w = waiting.min_replicas if waiting.is_elastic else waiting.max_replicas
    need = lo_w * waiting.gpus_per_replica
    for t in types:
        gain = table.get(waiting.name, t, lo_w) / norm[waiting.name]
        steps: list[tuple[float, str]] = []
        for j in jobs:
            s = shares.get(j.name)
            if (
                s is None
                or s.gpu_type != t
                or not j.preemptible
                or not j.is_elastic
                or j.name == waiting.name
            ):
                continue
            for r in range(s.replicas, j.min_replicas, -1):
                loss = (table.get(j.name, t, r) - table.get(j.name, t, r - 1)) / norm[j.name]
                steps.append((loss / j.gpus_per_replica, j.name))
        steps.sort()
        freed = free.get(t, 0)
        taken: dict[str, int] = {}
        loss_total = 0.0
        by_name = {j.name: j for j in jobs}
        for per_gpu, name in steps:
            if freed >= need:
                break
            j = by_name[name]
            if name not in taken:
                s = shares[name]
                loss_total += penalty * table.get(name, t, s.replicas) / norm[name]
            taken[name] = taken.get(name, 0) + 1
            freed += j.gpus_per_replica
            loss_total += per_gpu * j.gpus_per_replica
        if freed < need or gain <= loss_total:
            continue
        for name, k in taken.items():
            shares[name].replicas -= k
        free[t] = freed - need
        shares[waiting.name] = Share(t, lo_w)
        return True
    return False


def size_bounds(job: Job) -> tuple[int, ...]:
    """Replica counts a type-aware ranking asks about: the job's largest and its smallest size."""
    lo = job.min_replicas if job.is_elastic else job.max_replicas
    return (job.max_replicas, lo)
