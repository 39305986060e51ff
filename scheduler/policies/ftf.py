"""Themis-style finish-time fairness: serve the jobs treated most unfairly first.

Pure. For each job, rho = T_shared / T_isolated, where T_isolated is the time the whole job would take
alone on its asked GPUs of its fastest allowed type, and T_shared is the time since submission plus the
remaining work at the throughput it gets now (its current allocation; for a waiting job, the best
it could get if started now). Jobs with the largest rho go first; preemptive with a margin on rho so
near-equal jobs do not evict each other every round. ``heterogeneity: aware`` (the default) picks each
job's GPU type from the throughput matrix (``scheduler.policies.type_planner``) and sizes elastic jobs by
marginal gain in rho order (``scheduler.policies.elastic_sizing``); ``agnostic``: the allowed type with the
most free GPUs, and the largest size that fits; ``ordered``: as agnostic, the types newest generation
first (or ``type_order``), then most free GPUs (``scheduler.policies.ordered``).

Follows Mahajan et al., "Themis: Fair and Efficient GPU Cluster Scheduling", NSDI 2020. Differs: no
partial-allocation auction between app agents and no fairness knob f (all jobs bid each round); rho
is computed centrally from the oracle's predictions, and leases are replaced by per-round decisions
with the preemption margin as hysteresis.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from scheduler.core.decisions import Decision
from scheduler.core.placement import spread_of
from scheduler.core.protocols import ThroughputOracle
from scheduler.core.types import ClusterSnapshot, Job, PlacementShape
from scheduler.policies.base import allowed_types, replica_options, type_infos
from scheduler.policies.config import Heterogeneity, parse_config, require
from scheduler.policies.elastic_shares import PredictedThroughputs, size_bounds
from scheduler.policies.elastic_sizing import planning_table, size_elastic, sizing_counts
from scheduler.policies.greedy import Request, greedy_allocate
from scheduler.policies.ordered import baseline_order, check_type_order
from scheduler.policies.type_planner import DEFAULT_HORIZON_S, PlacementMovePrice, aware_orders


@dataclass(frozen=True, slots=True)
class FtfConfig:
    """``preempt_margin``: how much larger a job's rho must be to evict a running job;
    ``heterogeneity``: ``aware`` picks GPU types from the throughput matrix, ``ordered`` in a fixed
    preference order (``type_order``, default newest generation first), ``agnostic`` by free GPUs;
    ``horizon_s``: how far ahead a move to a faster GPU type must pay its restart (aware only)."""

    preemptive: bool = True
    preempt_margin: float = 0.2
    heterogeneity: Heterogeneity = "aware"
    horizon_s: float = DEFAULT_HORIZON_S
    type_order: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "type_order", check_type_order(self.heterogeneity, self.type_order))
        require(self.preempt_margin >= 0, "preempt_margin", "must be >= 0")


class FtfPolicy:
    """Largest finish-time-fairness ratio rho first; preemptive with a margin."""

    name = "ftf"

    def __init__(self, config: FtfConfig | None = None) -> None:
        self.config = config or FtfConfig()

    @classmethod
    def from_config(cls, config: Mapping[str, Any] | None = None) -> FtfPolicy:
        return cls(parse_config(FtfConfig, cls.name, config))

    def rho(self, snapshot: ClusterSnapshot, job: Job, best: float, current: float) -> float:
        """T_shared / T_isolated for ``job`` given its best and current throughput (work units/s)."""
        t_isolated = job.total_work / best
        rate = current if current > 0 else best
        t_shared = max(0.0, snapshot.now - job.submit_time) + job.remaining_work / rate
        return t_shared / max(t_isolated, 1e-9)

    def allocate(
        self, snapshot: ClusterSnapshot, jobs: Sequence[Job], oracle: ThroughputOracle
    ) -> Mapping[str, Decision]:
        infos = type_infos(snapshot)
        live = [j for j in jobs if j.remaining_work > 0]
        node_map = snapshot.node_map()
        running = [j for j in live if j.name in snapshot.allocations]
        cur_q: list[tuple[Job, PlacementShape]] = [
            (j, spread_of(snapshot.allocations[j.name], node_map)) for j in running
        ]
        # one oracle call: the table plus each running job's current placement
        # aware, with elastic jobs: every size of those, for sizing them (still one oracle call)
        elastic = self.config.heterogeneity == "aware" and any(j.is_elastic for j in live)
        table = PredictedThroughputs(
            oracle, live, infos, sizing_counts if elastic else size_bounds, extra=cur_q
        )
        current = dict(zip((j.name for j in running), table.extra_answers, strict=True))
        keyed: list[tuple[float, float, str, Job, tuple[str, ...]]] = []
        extra: dict[str, Decision] = {}
        for j in live:
            speeds = sorted(
                ((table.peak(j, t)[1], t) for t in allowed_types(j, infos)),
                key=lambda x: (-x[0], x[1]),
            )
            types = tuple(t for v, t in speeds if v > 0)
            if not types:
                extra[j.name] = Decision(
                    j.name, None, "predicted throughput is 0 on every allowed GPU type", unresolvable=True
                )
                continue
            rho = self.rho(snapshot, j, speeds[0][0], current.get(j.name, 0.0))
            keyed.append((-rho, j.submit_time, j.name, j, types))
        keyed.sort(key=lambda x: (x[0], x[1], x[2]))
        orders: dict[str, tuple[str, ...]] = {}
        if self.config.heterogeneity == "aware":
            ranked = [x[3] for x in keyed]
            # elastic jobs' types chosen at their minimum size (None: no elastic job, the table as it is)
            planning = planning_table(snapshot, ranked, table if elastic else None)
            orders = aware_orders(
                snapshot, infos, oracle, ranked, horizon_s=self.config.horizon_s, table=planning or table
            )
        else:
            free = baseline_order(snapshot, None, self.config.heterogeneity, self.config.type_order)
            orders = {j.name: free.order(j, infos) for _, _, _, j, _ in keyed}
        requests = [
            Request(
                j,
                orders.get(j.name) or types,
                replica_options(j),
                rank=neg,
                note=f"finish-time fairness rho {-neg:.2f}",
            )
            for neg, _, _, j, types in keyed
        ]
        if self.config.heterogeneity == "aware":  # elastic jobs sized by the throughput model
            requests = size_elastic(
                snapshot,
                requests,
                oracle,
                infos,
                preemptive=self.config.preemptive,
                margin=self.config.preempt_margin,
                horizon_s=self.config.horizon_s,
                table=table,
            )
        return greedy_allocate(
            snapshot,
            jobs,
            requests,
            preemptive=self.config.preemptive,
            preempt_margin=self.config.preempt_margin,
            extra=extra,
            spread_move=(
                PlacementMovePrice(snapshot, oracle, self.config.horizon_s)
                if self.config.heterogeneity == "aware"
                else None
            ),
        )
