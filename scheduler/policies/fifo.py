"""First-in, first-out scheduling, strict or with backfill.

Pure. Jobs are served in order of priority (higher first, unless ``use_priority`` is false), then submit
time, then name. Strict FIFO (the default) starts no job behind one that cannot start, so a big job at the
head is never starved; ``backfill: true`` lets later jobs that fit start in the meantime. Running jobs
are never preempted. ``heterogeneity: aware`` (the default) picks each job's GPU type from the
throughput matrix (``scheduler.policies.type_planner``) and sizes elastic jobs by marginal gain in FIFO
order (``scheduler.policies.elastic_sizing``); ``agnostic``: the allowed type with the most free GPUs, and
elastic jobs take as many replicas as fit, down to their minimum; ``ordered``: as agnostic, the types
newest generation first (or ``type_order``), then most free GPUs (``scheduler.policies.ordered``).

Follows the FIFO baseline used by Tiresias (NSDI'19) and Gavel (OSDI'20). Differs: the backfill is
first-fit without a reservation for the head job (not EASY backfilling, which needs runtime estimates),
and priorities order the queue (as Kueue's StrictFIFO does).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from scheduler.core.decisions import Decision
from scheduler.core.protocols import ThroughputOracle
from scheduler.core.round import IncrementalRound
from scheduler.core.types import ClusterSnapshot, Job, Node
from scheduler.policies.base import replica_options, type_infos
from scheduler.policies.config import Heterogeneity, parse_config
from scheduler.policies.elastic_sizing import planning_table, size_elastic, sizing_table
from scheduler.policies.greedy import Request, greedy_allocate
from scheduler.policies.incremental import GreedyRounds, simple_jobs, single_type
from scheduler.policies.ordered import baseline_order, check_type_order
from scheduler.policies.type_planner import DEFAULT_HORIZON_S, PlacementMovePrice, aware_orders


@dataclass(frozen=True, slots=True)
class FifoConfig:
    """``backfill``: let later jobs start when the head cannot; ``use_priority``: order by priority first;
    ``heterogeneity``: ``aware`` picks GPU types from the throughput matrix, ``ordered`` in a fixed
    preference order (``type_order``, default newest generation first), ``agnostic`` by free GPUs;
    ``horizon_s``: how far ahead a move to a faster GPU type must pay its restart (aware only)."""

    backfill: bool = False
    use_priority: bool = True
    heterogeneity: Heterogeneity = "aware"
    horizon_s: float = DEFAULT_HORIZON_S
    type_order: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "type_order", check_type_order(self.heterogeneity, self.type_order))


class FifoPolicy:
    """Strict FIFO or FIFO with first-fit backfill; non-preemptive."""

    name = "fifo"

    def __init__(self, config: FifoConfig | None = None) -> None:
        self.config = config or FifoConfig()

    @classmethod
    def from_config(cls, config: Mapping[str, Any] | None = None) -> FifoPolicy:
        return cls(parse_config(FifoConfig, cls.name, config))

    def allocate(
        self, snapshot: ClusterSnapshot, jobs: Sequence[Job], oracle: ThroughputOracle
    ) -> Mapping[str, Decision]:
        infos = type_infos(snapshot)
        free = baseline_order(snapshot, oracle, self.config.heterogeneity, self.config.type_order)
        prio = self.config.use_priority
        ordered = sorted(jobs, key=lambda j: (-j.priority if prio else 0, j.submit_time, j.name))
        orders: dict[str, tuple[str, ...]] = {}
        table = None  # with elastic jobs: every size of each, for sizing (one oracle call)
        if self.config.heterogeneity == "aware":  # agnostic FIFO needs no performance model
            table = sizing_table(oracle, ordered, infos)  # None: no elastic job
            planning = planning_table(snapshot, ordered, table)
            orders = aware_orders(
                snapshot, infos, oracle, ordered, horizon_s=self.config.horizon_s, table=planning
            )
        requests = [
            Request(j, orders.get(j.name) or free.order(j, infos), replica_options(j), rank=float(i))
            for i, j in enumerate(ordered)
        ]
        if self.config.heterogeneity == "aware":  # elastic jobs sized by the throughput model
            requests = size_elastic(
                snapshot,
                requests,
                oracle,
                infos,
                preemptive=False,
                strict=not self.config.backfill,
                horizon_s=self.config.horizon_s,
                table=table,
            )
        return greedy_allocate(
            snapshot,
            jobs,
            requests,
            preemptive=False,
            strict=not self.config.backfill,
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
        preemptible jobs; None otherwise."""
        del oracle
        gpu_type = single_type(nodes)
        if gpu_type is None or not simple_jobs(jobs, gpu_type):
            return None
        prio = self.config.use_priority

        def key_of(job: Job, progress: float, attained: float) -> tuple[tuple[float, float, str], float]:
            del progress, attained
            return (-job.priority if prio else 0, job.submit_time, job.name), 0.0

        return GreedyRounds(nodes, gpu_type, key_of, preemptive=False, strict=not self.config.backfill)
