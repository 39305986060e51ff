"""Pollux-style elastic allocation: replica counts that maximise the cluster's summed speed-up.

Pure. Every job's speed-up is its predicted throughput over its throughput at its minimum size on its
best allowed type (so each running job counts about 1, and diminishing returns of extra replicas show
up as smaller increments). Running jobs start from what they have; free GPUs then go, one step at a
time, to the largest speed-up gain per GPU: starting a waiting job at its minimum, or one more replica
for a running elastic job (``elastic_shares.grow_by_marginal_gain``). A waiting job may also take replicas
from elastic jobs above their minimum when its gain beats their loss plus the resize cost. A running
job is resized only when the predicted gain over ``horizon_s`` beats ``restart_cost_s`` of lost
throughput; it is never shrunk below its minimum and never preempted by this policy.

Follows Qiao et al., "Pollux: Co-adaptive Cluster Scheduling for Goodput-Optimized Deep Learning",
OSDI 2021. Differs: the oracle's throughput stands in for goodput (no statistical-efficiency model or
batch-size tuning), the genetic search over allocations is replaced by greedy marginal gain, and the
fairness exponent p is fixed at 1 (sum of speed-ups).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from scheduler.core.decisions import Decision
from scheduler.core.protocols import ThroughputOracle
from scheduler.core.types import ClusterSnapshot, Job
from scheduler.policies.base import TypeInfo, allowed_types, type_infos
from scheduler.policies.config import parse_config, require
from scheduler.policies.elastic_shares import (
    PredictedThroughputs,
    Share,
    grow_by_marginal_gain,
    shrink_for,
    used_by_type,
)
from scheduler.policies.greedy import Request, greedy_allocate


@dataclass(frozen=True, slots=True)
class ElasticConfig:
    """``horizon_s``: how far ahead gains count; ``restart_cost_s``: throughput-seconds a resize loses."""

    horizon_s: float = 3600.0
    restart_cost_s: float = 60.0
    shrink_for_waiting: bool = True

    def __post_init__(self) -> None:
        require(self.horizon_s > 0, "horizon_s", "must be > 0")
        require(self.restart_cost_s >= 0, "restart_cost_s", "must be >= 0")


def min_replicas_of(job: Job) -> int:
    return job.min_replicas if job.is_elastic else job.max_replicas


@dataclass(frozen=True, slots=True)
class TypeRanking:
    """Each runnable job's best throughput at its minimum size and its allowed GPU types, fastest first."""

    runnable: list[Job]
    best: dict[str, float]
    types_of: dict[str, tuple[str, ...]]
    unrunnable: dict[str, Decision]


def rank_types(
    live: Sequence[Job], infos: Mapping[str, TypeInfo], table: PredictedThroughputs
) -> TypeRanking:
    """Rank the allowed GPU types of every job by predicted throughput at its minimum replica count.

    A job predicted to make no progress on any allowed type gets an unresolvable decision instead.
    """
    best: dict[str, float] = {}
    types_of: dict[str, tuple[str, ...]] = {}
    unrunnable: dict[str, Decision] = {}
    for j in live:
        lo = min_replicas_of(j)
        allowed = list(allowed_types(j, infos))
        best_t, top = table.best_type(j, lo, allowed)
        if best_t is None:
            unrunnable[j.name] = Decision(
                j.name, None, "predicted throughput is 0 on every allowed GPU type", unresolvable=True
            )
            continue
        best[j.name] = top
        types_of[j.name] = tuple(
            sorted(
                (t for t in allowed if table.get(j.name, t, lo) > 0),
                key=lambda t: (-table.get(j.name, t, lo), t),
            )
        )
    return TypeRanking([j for j in live if j.name in best], best, types_of, unrunnable)


class ElasticPolicy:
    """Greedy marginal-gain replica counts with resize hysteresis; never below min, never preempts."""

    name = "elastic"

    def __init__(self, config: ElasticConfig | None = None) -> None:
        self.config = config or ElasticConfig()

    @classmethod
    def from_config(cls, config: Mapping[str, Any] | None = None) -> ElasticPolicy:
        return cls(parse_config(ElasticConfig, cls.name, config))

    def worth_resizing(self, current: float, new: float) -> bool:
        """Gain over the horizon beats the work lost while restarting."""
        return (new - current) * self.config.horizon_s > current * self.config.restart_cost_s

    def allocate(
        self, snapshot: ClusterSnapshot, jobs: Sequence[Job], oracle: ThroughputOracle
    ) -> Mapping[str, Decision]:
        infos = type_infos(snapshot)
        live = [j for j in jobs if j.remaining_work > 0]
        table = PredictedThroughputs(
            oracle, live, infos, lambda j: range(min_replicas_of(j), j.max_replicas + 1)
        )
        ranking = rank_types(live, infos, table)
        live, norm, types_of, extra = ranking.runnable, ranking.best, ranking.types_of, ranking.unrunnable
        free = {t: info.capacity for t, info in infos.items()}
        for t, used in used_by_type(
            snapshot, exclude={j.name for j in jobs if j.remaining_work <= 0}
        ).items():
            free[t] = free.get(t, 0) - used
        shares: dict[str, Share] = {}
        current: dict[str, Share] = {}
        for j in live:
            cur = snapshot.allocations.get(j.name)
            if cur is not None and (j.allows(cur.gpu_type) or not j.preemptible):
                shares[j.name] = Share(cur.gpu_type, cur.replicas)
                current[j.name] = Share(cur.gpu_type, cur.replicas)

        def may_grow(job: Job, t: str, r_from: int, r_to: int) -> bool:
            cur = current.get(job.name)
            if cur is None or r_from != cur.replicas:
                return True
            if not job.preemptible:
                return False
            return self.worth_resizing(table.get(job.name, t, r_from), table.get(job.name, t, r_to))

        grow_by_marginal_gain(
            live,
            shares,
            free,
            table,
            norm,
            may_start=lambda j: j.name not in current,
            may_grow=may_grow,
            types_of=lambda j: types_of[j.name],
        )
        if self.config.shrink_for_waiting:
            waiting = sorted((j for j in live if shares.get(j.name, Share(None, 0)).replicas == 0), key=_fifo)
            for w in waiting:
                shrink_for(
                    w,
                    live,
                    shares,
                    free,
                    table,
                    norm,
                    types_of[w.name],
                    penalty=self.config.restart_cost_s / self.config.horizon_s,
                )
        requests: list[Request] = []
        for j in sorted(live, key=lambda j: (_phase(j, shares, current), j.submit_time, j.name)):
            s = shares.get(j.name)
            if s is None or s.replicas == 0 or s.gpu_type is None:
                extra.setdefault(
                    j.name, Decision(j.name, None, "no GPUs left after sharing by marginal gain")
                )
                continue
            reps = tuple(range(s.replicas, min_replicas_of(j) - 1, -1))
            note = f"speed-up {table.get(j.name, s.gpu_type, s.replicas) / norm[j.name]:.2f}"
            requests.append(Request(j, (s.gpu_type,), reps, note=note, keep_current=False))
        return greedy_allocate(snapshot, jobs, requests, preemptive=False, extra=extra)


def _fifo(job: Job) -> tuple[float, str]:
    return (job.submit_time, job.name)


def _phase(job: Job, shares: Mapping[str, Share], current: Mapping[str, Share]) -> int:
    """Place shrinking jobs first (they free GPUs), then unchanged, then growing, then new."""
    cur = current.get(job.name)
    s = shares.get(job.name)
    if cur is None:
        return 3
    if s is None or s.replicas < cur.replicas:
        return 0
    return 1 if s.replicas == cur.replicas else 2
