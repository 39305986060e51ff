"""What the policies assume about the cluster's GPU types, and their batched oracle look-ups.

Pure. ``type_infos`` summarises each GPU type's nodes (``TypeInfo``: GPUs per node, interconnect,
network, capacity) so that a policy can ask the oracle about compact shapes before placing;
``allowed_types``/``FreeByType`` give the types a job may get (dropping those it does not fit in memory
when the oracle can tell), and ``batch_throughput`` asks many questions in one oracle call. Config
parsing is in ``scheduler.policies.config``, greedy gang allocation in ``scheduler.policies.greedy``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from scheduler.core.placement import compact_shape
from scheduler.core.protocols import MemoryOracle, ThroughputOracle
from scheduler.core.types import ClusterSnapshot, Interconnect, Job, PlacementShape


@dataclass(frozen=True, slots=True)
class TypeInfo:
    """What a policy assumes about the nodes of one GPU type before placing (for oracle questions)."""

    gpu_type: str
    node_gpus: int
    interconnect: Interconnect
    network_gbps: float
    capacity: int

    def shape(self, num_gpus: int) -> PlacementShape:
        """The compact shape of ``num_gpus`` GPUs of this type: as few nodes as possible."""
        return compact_shape(self.gpu_type, num_gpus, self.node_gpus, self.interconnect, self.network_gbps)


def type_infos(snapshot: ClusterSnapshot) -> dict[str, TypeInfo]:
    """One ``TypeInfo`` per GPU type with schedulable capacity, keyed by type."""
    acc: dict[str, list[Any]] = {}
    for n in snapshot.nodes:
        cap = n.capacity_for_jobs
        if cap <= 0:
            continue
        a = acc.setdefault(n.gpu_type, [0, 0, 0, n.network_gbps, 0])
        a[0] = max(a[0], cap)
        a[1] += 1 if n.interconnect is Interconnect.NVLINK else 0
        a[2] += 1
        a[3] = min(a[3], n.network_gbps)
        a[4] += cap
    return {
        t: TypeInfo(t, a[0], Interconnect.NVLINK if a[1] * 2 >= a[2] else Interconnect.PCIE, a[3], a[4])
        for t, a in sorted(acc.items())
    }


def batch_throughput(oracle: ThroughputOracle, queries: Sequence[tuple[Job, PlacementShape]]) -> list[float]:
    """One batched oracle call; checks that the oracle answered every question."""
    if not queries:
        return []
    out = oracle.throughput(queries)
    if len(out) != len(queries):
        raise ValueError(f"throughput oracle answered {len(out)} of {len(queries)} questions")
    return [float(x) for x in out]


def replica_options(job: Job) -> tuple[int, ...]:
    """Replica counts to try, most first: rigid jobs only ``max_replicas``; elastic ones down to min."""
    if not job.is_elastic:
        return (job.max_replicas,)
    return tuple(range(job.max_replicas, job.min_replicas - 1, -1))


def allowed_types(
    job: Job, infos: Mapping[str, TypeInfo], oracle: ThroughputOracle | None = None
) -> tuple[str, ...]:
    """The GPU types a job may get: those it allows and, when ``oracle`` answers memory questions
    (``MemoryOracle``), whose memory it fits at its count (``fitting_types``)."""
    types = tuple(t for t in infos if job.allows(t))
    if oracle is None or not types or not isinstance(oracle, MemoryOracle):
        return types
    return fitting_types(job, types, infos, oracle)


def fitting_types(
    job: Job, types: Sequence[str], infos: Mapping[str, TypeInfo], oracle: MemoryOracle
) -> tuple[str, ...]:
    """The ``types`` on which ``job`` fits in GPU memory at its smallest GPU count (``min_gpus``), in the
    compact shape a policy asks about: the count a policy may give it that needs the most memory per GPU
    (sharding spreads the model over fewer GPUs, and each GPU's share of the batch is largest). A type the
    oracle cannot judge (None) stays."""
    answers = oracle.memory_fit([(job, infos[t].shape(job.min_gpus)) for t in types])
    return tuple(t for t, fit in zip(types, answers, strict=True) if fit is None or fit.fits)


class FreeByType:
    """Free GPUs per type in a snapshot, computed once; orders each job's allowed types by it.

    With an ``oracle`` that answers memory questions, types the job does not fit are dropped
    (``fitting_types``)."""

    def __init__(self, snapshot: ClusterSnapshot, oracle: ThroughputOracle | None = None) -> None:
        self.memory = oracle if isinstance(oracle, MemoryOracle) else None
        node_free = snapshot.free_by_node()
        self.free: dict[str, int] = {}
        self._memo: dict[frozenset[str], tuple[str, ...]] = {}
        for n in snapshot.nodes:
            self.free[n.gpu_type] = self.free.get(n.gpu_type, 0) + node_free.get(n.name, 0)

    def order(self, job: Job, infos: Mapping[str, TypeInfo]) -> tuple[str, ...]:
        """The job's allowed types, most free GPUs first, then by name (memoised per allowed set)."""
        key = job.allowed_gpu_types
        got = self._memo.get(key)
        if got is None:
            got = tuple(sorted(allowed_types(job, infos), key=lambda t: (-self.free.get(t, 0), t)))
            self._memo[key] = got
        if self.memory is not None and got:
            return fitting_types(job, got, infos, self.memory)
        return got
