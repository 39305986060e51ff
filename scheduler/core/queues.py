"""Tenant queues: GPU quotas per type, cohorts that lend each other idle quota, fair-share weights.

Pure data: frozen, slotted dataclasses with no I/O and no Kubernetes types (``scheduler.k8s`` converts a
``TrainingQueue`` into a ``QueueSpec``; the simulator reads them from the cluster spec). What the round
does with them lives in ``scheduler.core.admission``.

Quota semantics, per GPU type ``t`` (counts of GPUs):

- ``nominal``: the queue may always use this many GPUs of ``t`` (its guaranteed share);
- ``borrowing_limit``: how many GPUs of ``t`` beyond ``nominal`` it may borrow from its cohort (None: no
  limit); a queue without a cohort never borrows;
- ``lending_limit``: how many of its idle nominal GPUs of ``t`` the cohort may borrow (None: all of them).

The quota entry for type ``"*"`` applies to every GPU type that has no entry of its own (its limits hold
per type, not summed over types). A type with no entry and no ``"*"`` entry has nominal 0 and borrowing
limit 0 for that queue: the queue cannot use it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from scheduler.core.errors import ConfigError

#: the quota entry that applies to every GPU type without an entry of its own
ANY_GPU_TYPE = "*"
#: the queue a job joins when it names none
DEFAULT_QUEUE = "default"


class FairShare(StrEnum):
    """What fair share across queues equalises (per unit of weight)."""

    #: delivered throughput, normalised per job to its fastest GPU type (heterogeneity-aware)
    THROUGHPUT = "throughput"
    #: GPU counts, whatever their type
    GPUS = "gpus"


@dataclass(frozen=True, slots=True)
class Quota:
    """One GPU type's quota of a queue (see the module docstring); ``gpu_type`` may be ``"*"``."""

    gpu_type: str
    nominal: int = 0
    borrowing_limit: int | None = None
    lending_limit: int | None = None

    def __post_init__(self) -> None:
        if not self.gpu_type:
            raise ConfigError("quota gpuType must not be empty")
        for name in ("nominal", "borrowing_limit", "lending_limit"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ConfigError(f"quota for {self.gpu_type}: {name} must be >= 0, got {value}")


@dataclass(frozen=True, slots=True)
class QueueSpec:
    """A tenant queue: its quotas, the cohort it borrows from and lends to, and its fair-share weight."""

    name: str
    quotas: tuple[Quota, ...] = ()
    cohort: str = ""
    weight: float = 1.0
    fair_share: FairShare = FairShare.THROUGHPUT

    def __post_init__(self) -> None:
        if not self.name:
            raise ConfigError("queue name must not be empty")
        if not self.weight > 0:
            raise ConfigError(f"queue {self.name}: weight must be > 0, got {self.weight!r}")
        seen: set[str] = set()
        for q in self.quotas:
            if q.gpu_type in seen:
                raise ConfigError(f"queue {self.name}: quotas list GPU type {q.gpu_type} twice")
            seen.add(q.gpu_type)
            if not self.cohort and q.borrowing_limit not in (None, 0):
                raise ConfigError(
                    f"queue {self.name}: quota for {q.gpu_type} has borrowingLimit "
                    "but the queue has no cohort"
                )

    def quota_for(self, gpu_type: str) -> Quota:
        """The quota that applies to ``gpu_type``: its own entry, else ``"*"``, else nothing (all 0)."""
        fallback: Quota | None = None
        for q in self.quotas:
            if q.gpu_type == gpu_type:
                return q
            if q.gpu_type == ANY_GPU_TYPE:
                fallback = q
        if fallback is not None:
            return fallback
        return Quota(gpu_type, 0, 0, 0)

    def nominal(self, gpu_type: str) -> int:
        return self.quota_for(gpu_type).nominal

    def borrowing_limit(self, gpu_type: str) -> int | None:
        """GPUs of ``gpu_type`` it may borrow beyond nominal (None: unlimited); 0 without a cohort."""
        if not self.cohort:
            return 0
        return self.quota_for(gpu_type).borrowing_limit

    def lending_limit(self, gpu_type: str) -> int | None:
        return self.quota_for(gpu_type).lending_limit


def queue_index(queues: tuple[QueueSpec, ...]) -> Mapping[str, QueueSpec]:
    """Queues by name; raises ``ConfigError`` when two share a name."""
    out: dict[str, QueueSpec] = {}
    for q in queues:
        if q.name in out:
            raise ConfigError(f"two queues are named {q.name}")
        out[q.name] = q
    return out
