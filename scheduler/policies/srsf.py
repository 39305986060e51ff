"""Shortest remaining service first (SRSF), with remaining time from the throughput oracle.

Pure. Remaining service = GPUs asked x remaining time, and remaining time = remaining work / predicted
throughput on the job's fastest allowed GPU type (one batched oracle call per round; an elastic job
too big for a type's capacity is judged there at the largest size that fits). Jobs with the
least remaining service go first; preemptive: a job evicts running jobs with more remaining service
(by more than ``preempt_margin_gpu_s``). ``heterogeneity: aware`` (the default) picks each job's GPU
type from the throughput matrix (``scheduler.policies.type_planner``); ``agnostic``: the allowed type with
the most free GPUs (remaining service still comes from the fastest type). Aware, elastic jobs are sized by
marginal gain in SRSF's order (``scheduler.policies.elastic_sizing``); agnostic, they take the largest size
that fits. ``ordered``: as agnostic, the types newest generation first (or ``type_order``), then most
free GPUs (``scheduler.policies.ordered``).

Aware on several GPU types, a job restarted many times holds a lease on its GPUs (``lease_after_restarts``
restarts or more, evictions and moves alike: not evicted within ``lease_s`` of each (re)start; the job
that wanted its GPUs evicts no job with less remaining service in its place, and tries its next type or
waits). SRSF always evicts the running job with the most remaining service, so on a busy cluster the
longest 1-GPU job restarted on whatever GPU a completion freed and was evicted from it by the next short
arrival seconds later (Gavel's cluster, 400 jobs: one 119 h job 44 times, 0.1 per job of the run's
churn). After Slurm's ``PreemptExemptTime`` (a minimum run time before a job may be preempted); differs:
only for jobs already restarted ``lease_after_restarts`` times, so SRSF's order decides every other
eviction (a 600 s lease for every job cost the predictor's share of the gain:
docs/decisions/0013-srsf-restart-lease.md). On one
GPU type aware equals agnostic, and the agnostic twin (the baseline) has no lease.

Follows the SRSF baseline of Tiresias (NSDI'19) and the survey's "SRSF with execution-time error"
experiment, where remaining time comes from a predictor. Differs: remaining time is predicted per
GPU type from the performance model instead of being given, and elastic jobs rank by their
``max_replicas`` size.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from scheduler.core.decisions import Decision
from scheduler.core.protocols import ThroughputOracle
from scheduler.core.round import IncrementalRound
from scheduler.core.types import ClusterSnapshot, Job, Node
from scheduler.policies.base import allowed_types, replica_options, type_infos
from scheduler.policies.config import Heterogeneity, parse_config, require
from scheduler.policies.elastic_shares import PredictedThroughputs, size_bounds
from scheduler.policies.elastic_sizing import planning_table, size_elastic, sizing_counts
from scheduler.policies.greedy import Request, greedy_allocate, restart_leases
from scheduler.policies.incremental import GreedyRounds, simple_jobs, single_type
from scheduler.policies.ordered import baseline_order, check_type_order
from scheduler.policies.srsf_rounds import SrsfRanks
from scheduler.policies.type_planner import DEFAULT_HORIZON_S, PlacementMovePrice, aware_orders


@dataclass(frozen=True, slots=True)
class SrsfConfig:
    """``preempt_margin_gpu_s``: how much less remaining service (GPU-seconds) it takes to evict;
    ``heterogeneity``: ``aware`` picks GPU types from the throughput matrix, ``ordered`` in a fixed
    preference order (``type_order``, default newest generation first), ``agnostic`` by free GPUs;
    ``horizon_s``: how far ahead a move to a faster GPU type must pay its restart (aware only);
    ``lease_after_restarts``: a running job restarted this many times or more is not evicted within
    ``lease_s`` seconds of its last (re)start (aware, several GPU types; None: never)."""

    preemptive: bool = True
    preempt_margin_gpu_s: float = 0.0
    heterogeneity: Heterogeneity = "aware"
    horizon_s: float = DEFAULT_HORIZON_S
    lease_after_restarts: int | None = 10
    lease_s: float = 600.0
    type_order: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "type_order", check_type_order(self.heterogeneity, self.type_order))
        require(self.preempt_margin_gpu_s >= 0, "preempt_margin_gpu_s", "must be >= 0")
        require(
            self.lease_after_restarts is None or self.lease_after_restarts >= 1,
            "lease_after_restarts",
            "must be >= 1 (or null: no lease)",
        )
        require(self.lease_s >= 0 and math.isfinite(self.lease_s), "lease_s", "must be >= 0 and finite")


class SrsfPolicy:
    """Shortest remaining service (GPUs x predicted remaining time) first; preemptive."""

    name = "srsf"

    def __init__(self, config: SrsfConfig | None = None) -> None:
        self.config = config or SrsfConfig()

    @classmethod
    def from_config(cls, config: Mapping[str, Any] | None = None) -> SrsfPolicy:
        return cls(parse_config(SrsfConfig, cls.name, config))

    def allocate(
        self, snapshot: ClusterSnapshot, jobs: Sequence[Job], oracle: ThroughputOracle
    ) -> Mapping[str, Decision]:
        infos = type_infos(snapshot)
        live = [j for j in jobs if j.remaining_work > 0]
        # aware, with elastic jobs: every size of those, for sizing them (still one oracle call)
        elastic = self.config.heterogeneity == "aware" and any(j.is_elastic for j in live)
        table = PredictedThroughputs(oracle, live, infos, sizing_counts if elastic else size_bounds)
        keyed: list[tuple[float, float, str, Job, tuple[str, ...]]] = []
        extra: dict[str, Decision] = {}
        for j in live:
            peaks = {t: table.peak(j, t) for t in allowed_types(j, infos)}
            speeds = sorted(((v, t) for t, (_, v) in peaks.items()), key=lambda x: (-x[0], x[1]))
            types = tuple(t for v, t in speeds if v > 0)
            if not types:
                extra[j.name] = Decision(
                    j.name, None, "predicted throughput is 0 on every allowed GPU type", unresolvable=True
                )
                continue
            replicas, best = peaks[types[0]]
            remaining_s = j.remaining_work / best
            keyed.append((replicas * j.gpus_per_replica * remaining_s, j.submit_time, j.name, j, types))
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
                rank=svc,
                note=f"remaining service {svc / 3600:.2f} GPU-hours",
            )
            for svc, _, _, j, types in keyed
        ]
        if self.config.heterogeneity == "aware":  # elastic jobs sized by the throughput model
            requests = size_elastic(
                snapshot,
                requests,
                oracle,
                infos,
                preemptive=self.config.preemptive,
                margin=self.config.preempt_margin_gpu_s,
                horizon_s=self.config.horizon_s,
                table=table,
            )
        leased: frozenset[str] = frozenset()
        if self.config.heterogeneity == "aware" and len(infos) > 1:  # a job restarted many times
            # holds a lease on its GPUs (on one type aware equals agnostic, the baseline: no lease)
            leased = restart_leases(snapshot, jobs, self.config.lease_after_restarts, self.config.lease_s)
        return greedy_allocate(
            snapshot,
            jobs,
            requests,
            preemptive=self.config.preemptive,
            preempt_margin=self.config.preempt_margin_gpu_s,
            extra=extra,
            no_cascade=self.config.heterogeneity == "aware",
            leased=leased,
            spread_move=(
                PlacementMovePrice(snapshot, oracle, self.config.horizon_s)
                if self.config.heterogeneity == "aware"
                else None
            ),
        )

    def incremental(
        self, nodes: Sequence[Node], oracle: ThroughputOracle, jobs: Sequence[Job]
    ) -> IncrementalRound | None:
        """The simulator's fast path (``scheduler.policies.incremental``): one GPU type and rigid
        preemptible jobs; None otherwise. Each job's peak predicted throughput is asked once, on arrival
        (the oracle's answers must not depend on the batch); its rank then follows its progress."""
        gpu_type = single_type(nodes)
        if gpu_type is None or not simple_jobs(jobs, gpu_type):
            return None
        ranks = SrsfRanks(oracle, type_infos(ClusterSnapshot(now=0.0, nodes=tuple(nodes))), jobs)
        return GreedyRounds(
            nodes,
            gpu_type,
            ranks.key_of,
            preemptive=self.config.preemptive,
            margin=self.config.preempt_margin_gpu_s,
            batch_keys=ranks.batch_keys,
            rank_of=ranks.rank_of,
            # remaining service only falls while a job runs (progress never goes back while it runs)
            falling_ranks=True,
        )
