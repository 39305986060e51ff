"""Tiresias-style discretized two-dimensional least-attained-service (2D-LAS) scheduling.

Pure. A job's attained service is GPU-seconds received so far (GPUs x time: the "two dimensions").
Jobs fall into queues by thresholds on it (default 1 and 10 GPU-hours: queue 0 below 1, queue 1 below
10, queue 2 above); lower queues go first, FIFO (submit time) inside a queue. Preemptive between
queues: a job in a lower queue evicts running jobs of higher queues when it does not fit otherwise;
jobs in the same queue never evict each other. ``heterogeneity: aware`` (the default) picks each job's
GPU type from the throughput matrix (``scheduler.policies.type_planner``); ``agnostic``: the allowed type
with the most free GPUs, as Tiresias does; ``ordered``: newest generation first (or ``type_order``), then
most free GPUs (``scheduler.policies.ordered``). Aware on several GPU types, evictions are priced too
(``type_planner.EvictionPrice``): a job evicts only when the wait for GPUs to free up without evicting,
in GPU-seconds of its own, beats its victims' restarts, each times (1 + that victim's restarts so far);
on Gavel's cluster a long queue-2 job restarted on GPUs a completion had freed was evicted from them by
the next arrival minutes later, 64 times in 2.5 hours on one run. Aware, a job that must evict
chooses its victims over all of its types (``greedy_allocate(pick_victims=True)``): on each type the
evictions that free its gang with the fewest GPUs, and of the types, the one whose least-served victim
has the most attained service, so LAS's own rule (the most served job goes) holds across types, also
between jobs of one queue; evicting on the first type of its list, arrivals evicted 8-GPU gangs from the H100s
while a 32-GPU job held all the V100s for 39 hours
(docs/decisions/0136-aware-las-picks-victims-over-all-types.md). With
``promote_knob: K`` a waiting job whose time spent waiting exceeds K times its time spent running goes
back to queue 0 (Tiresias's starvation guard).

Consolidation, ``consolidate: true`` (the default): a running gang spread over several nodes moves to a
placement of the same type and size on fewer nodes when one is free at its turn and the oracle's speed-up
pays the restart (``type_planner.move_pays``). Without it, an 8-GPU job restarted on scattered GPUs keeps
them for its whole run: on the benchmark's clusters the largest jobs ran at 1/8 of their speed for
hundreds of hours (docs/decisions/0014-consolidation-of-spread-gangs.md).

Anti-starvation, ``starvation_factor: K`` (off by default, ``null``; opt in with e.g. 1): a job
waiting, or running spread over more nodes than its gang needs, is starving once the time it has lost
(time since submission minus what its progress would have taken on its fastest allowed type, compactly
placed, from the oracle) exceeds K times its own predicted run time there. A starving job goes ahead of
queue 0 (Tiresias's promotion, with the threshold tied to the job's own length instead of a constant; it
keeps its queue's rank, so it evicts no job its queue could not: promotion with eviction rights thrashed,
21 preemptions per job in one benchmark cell) and the first starving job that still cannot run compactly
gets an EASY backfilling reservation of nodes on the shared greedy walk
(``scheduler.policies.greedy.Reservation``): jobs behind it may take GPUs on those nodes only when
predicted to finish before the nodes are needed. It is off by default because the benchmark did not
choose it (docs/decisions/0014-consolidation-of-spread-gangs.md); K bounds a job's slowdown to about
K + 1 plus the wait for the held nodes.

Elastic jobs: aware, each is sized by marginal gain in LAS's order (``scheduler.policies.elastic_sizing``:
admitted at its minimum, spare GPUs by predicted gain per GPU, growth priced by its restart, shrunk only
for a job of a lower queue); agnostic, it takes the largest size that fits.

Follows Gu et al., "Tiresias: A GPU Cluster Manager for Distributed Deep Learning", NSDI 2019
(discretized 2D-LAS; its placement consolidation becomes ``consolidate``), and for the reservation,
EASY backfilling (Mu'alem & Feitelson, IEEE TPDS 2001).
Differs: the promote knob is off by default and compares the job's whole
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
from scheduler.core.types import Allocation, ClusterSnapshot, Job, Node
from scheduler.policies.base import TypeInfo, batch_throughput, replica_options, type_infos
from scheduler.policies.config import Heterogeneity, parse_config, require
from scheduler.policies.elastic_sizing import planning_table, size_elastic, sizing_table
from scheduler.policies.greedy import Request, Reservation, greedy_allocate
from scheduler.policies.incremental import GreedyRounds, simple_jobs, single_type
from scheduler.policies.ordered import baseline_order, check_type_order
from scheduler.policies.type_planner import (
    DEFAULT_HORIZON_S,
    EvictionPrice,
    PlacementMovePrice,
    aware_orders,
)


@dataclass(frozen=True, slots=True)
class LasConfig:
    """``thresholds_gpu_hours``: queue boundaries on attained service, strictly increasing;
    ``heterogeneity``: ``aware`` picks GPU types from the throughput matrix, ``ordered`` in a fixed
    preference order (``type_order``, default newest generation first), ``agnostic`` by free GPUs;
    ``horizon_s``: how far ahead a move to a faster GPU type must pay its restart (aware only);
    ``starvation_factor``: a waiting job that has waited more than this many times its own predicted
    run time is starving (back to queue 0, GPUs reserved for it; None: off); ``consolidate``: move a
    running gang spread over several nodes to fewer nodes when the predicted speed-up pays the restart."""

    thresholds_gpu_hours: tuple[float, ...] = (1.0, 10.0)
    preemptive: bool = True
    promote_knob: float | None = None
    heterogeneity: Heterogeneity = "aware"
    horizon_s: float = DEFAULT_HORIZON_S
    starvation_factor: float | None = None
    consolidate: bool = True
    type_order: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "type_order", check_type_order(self.heterogeneity, self.type_order))
        t = self.thresholds_gpu_hours
        require(all(x > 0 for x in t), "thresholds_gpu_hours", f"must be positive, got {list(t)}")
        require(all(a < b for a, b in itertools.pairwise(t)), "thresholds_gpu_hours", "must increase")
        require(self.promote_knob is None or self.promote_knob > 0, "promote_knob", "must be > 0")
        k = self.starvation_factor
        require(k is None or (k >= 0 and math.isfinite(k)), "starvation_factor", "must be >= 0 or null")


class LasPolicy:
    """Discretized 2D-LAS on attained GPU-service, preemptive between queues."""

    name = "las"

    def __init__(self, config: LasConfig | None = None) -> None:
        self.config = config or LasConfig()
        #: ``scheduler.core.protocols.MovesRunning``: consolidation and the starvation reservation may
        #: move a running gang when another job completes, so the simulator runs those rounds
        self.moves_running: bool = self.config.consolidate or self.config.starvation_factor is not None
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
        free = baseline_order(snapshot, oracle, self.config.heterogeneity, self.config.type_order)
        running = snapshot.allocations
        reservation: Reservation | None = None
        starving: frozenset[str] = frozenset()
        if self.config.starvation_factor is not None:
            runtime = _Runtimes(oracle, infos)
            starving = _starving(jobs, running, snapshot.now, self.config.starvation_factor, runtime)
            reservation = Reservation(starving, runtime, snapshot.now, runtime.prefetch)
        # starving jobs go first (in submission order) but keep their queue's rank: they may take free
        # and held GPUs ahead of everyone, not evict jobs their own queue could not (no preemption churn)
        queue = {j.name: self.queue_of(j, None if j.name in running else snapshot.now) for j in jobs}
        keyed = sorted(
            ((-1 if j.name in starving else queue[j.name], j.submit_time, j.name), j) for j in jobs
        )
        orders: dict[str, tuple[str, ...]] = {}
        table = None  # with elastic jobs: every size of each, for sizing (one oracle call)
        if self.config.heterogeneity == "aware":  # LAS ranks by attained service; the oracle picks types
            ranked = [j for _, j in keyed]
            table = sizing_table(oracle, ranked, infos)
            planning = planning_table(snapshot, ranked, table)  # None: no elastic job
            orders = aware_orders(
                snapshot, infos, oracle, ranked, horizon_s=self.config.horizon_s, table=planning
            )
        notes = [f"LAS queue {q}" for q in range(len(self._bounds) + 1)]
        requests = [
            Request(
                j,
                orders.get(j.name) or free.order(j, infos),
                replica_options(j),
                rank=float(queue[j.name]),
                note=notes[queue[j.name]] + ("; starving" if j.name in starving else ""),
            )
            for _, j in keyed
        ]
        if self.config.heterogeneity == "aware":  # elastic jobs sized by the throughput model
            requests = size_elastic(
                snapshot,
                requests,
                oracle,
                infos,
                preemptive=self.config.preemptive,
                horizon_s=self.config.horizon_s,
                table=table,
            )
        consolidate = None
        if self.config.consolidate:
            consolidate = PlacementMovePrice(snapshot, oracle, self.config.horizon_s)
        evict_pays = None
        if orders:  # aware, several GPU types: an eviction must pay its victims' restarts
            evict_pays = EvictionPrice(snapshot, jobs, horizon_s=self.config.horizon_s)
        return greedy_allocate(
            snapshot,
            jobs,
            requests,
            preemptive=self.config.preemptive,
            reservation=reservation,
            consolidate=consolidate,
            no_cascade=self.config.heterogeneity == "aware",
            evict_pays=evict_pays,
            spread_move=PlacementMovePrice(snapshot, oracle, self.config.horizon_s) if orders else None,
            pick_victims=bool(orders),
        )

    def incremental(
        self, nodes: Sequence[Node], oracle: ThroughputOracle, jobs: Sequence[Job]
    ) -> IncrementalRound | None:
        """The simulator's fast path (``scheduler.policies.incremental``): one GPU type, rigid preemptible
        jobs, no promote knob and no starvation rule (whose queues move with the clock); None otherwise.
        ``consolidate`` runs in it with the same rule (``type_planner.PlacementMovePrice``)."""
        gpu_type = single_type(nodes)
        if self.config.starvation_factor is not None:
            return None
        if self.config.promote_knob is not None or gpu_type is None or not simple_jobs(jobs, gpu_type):
            return None
        bounds = self._bounds

        def key_of(job: Job, progress: float, attained: float) -> tuple[tuple[float, float, str], float]:
            del progress
            q = bisect.bisect_right(bounds, attained)  # ``queue_of`` without the knob
            return (q, job.submit_time, job.name), float(q)

        horizon_s = self.config.horizon_s

        def consolidation(snapshot: ClusterSnapshot) -> PlacementMovePrice:  # ``allocate``'s rule
            return PlacementMovePrice(snapshot, oracle, horizon_s)

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
            consolidate=consolidation if self.config.consolidate else None,
        )


class _Runtimes:
    """Predicted seconds for a job to finish its remaining work on N GPUs of a type (one round's memo
    of oracle answers; ``math.inf`` where the oracle predicts no progress)."""

    def __init__(self, oracle: ThroughputOracle, infos: Mapping[str, TypeInfo]) -> None:
        self._oracle = oracle
        self._infos = infos
        self._tp: dict[tuple[str, str, int], float] = {}

    @property
    def types(self) -> Mapping[str, TypeInfo]:
        """The GPU types with schedulable capacity, keyed by name."""
        return self._infos

    def prefetch(self, queries: Sequence[tuple[Job, str, int]]) -> None:
        """Ask the oracle once, batched, for every (job, type, GPUs) not asked yet."""
        todo = [(j, t, g) for j, t, g in queries if (j.name, t, g) not in self._tp and t in self._infos]
        answers = batch_throughput(self._oracle, [(j, self._infos[t].shape(g)) for j, t, g in todo])
        for (j, t, g), tp in zip(todo, answers, strict=True):
            self._tp[(j.name, t, g)] = tp

    def throughput(self, job: Job, gpu_type: str, gpus: int) -> float:
        key = (job.name, gpu_type, gpus)
        if key not in self._tp:
            self.prefetch([(job, gpu_type, gpus)])
        return self._tp.get(key, 0.0)

    def __call__(self, job: Job, gpu_type: str, gpus: int) -> float:
        tp = self.throughput(job, gpu_type, gpus)
        return job.remaining_work / tp if tp > 0 else math.inf


def _starving(
    jobs: Sequence[Job],
    running: Mapping[str, Allocation],
    now: float,
    factor: float,
    runtime: _Runtimes,
) -> frozenset[str]:
    """Jobs that have lost more than ``factor`` times their own predicted run time: time since submission
    minus the time their progress would have taken on their fastest allowed type at their smallest
    compact gang, against their total work there. Waiting jobs, and running gangs spread over more nodes
    than they need (a spread gang can run many times slower); a compact running job is never starving."""
    cands: list[Job] = []
    for j in jobs:
        if j.remaining_work <= 0 or j.min_gpus <= 0:
            continue
        a = running.get(j.name)
        if a is not None:
            info = runtime.types.get(a.gpu_type)
            per_node = max(1, (info.node_gpus if info else 1) // max(1, a.gpus_per_replica))
            if a.num_nodes <= -(-a.replicas // per_node):
                continue
        if now - j.submit_time > 0:
            cands.append(j)
    runtime.prefetch([(j, t, j.min_gpus) for j in cands for t in runtime.types if j.allows(t)])
    out: set[str] = set()
    for j in cands:
        best = max((runtime.throughput(j, t, j.min_gpus) for t in runtime.types if j.allows(t)), default=0.0)
        if best <= 0:
            continue
        lost = now - j.submit_time - j.progress / best
        if lost > factor * j.total_work / best:
            out.add(j.name)
    return frozenset(out)
