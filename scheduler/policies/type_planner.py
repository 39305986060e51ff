"""Heterogeneity awareness for the ordering policies: which GPU type each job should ask for, in order.

Pure. ``TypePlanner.orders`` takes the jobs of one round in the policy's rank order (FIFO, LAS queue,
SRSF, FTF: the policy decides *who* goes first) and returns, per job, its allowed GPU types in the
order it should try them (``greedy_allocate`` then walks the jobs in rank order and places each on the
first type of its list that has room, so the policy's order is honoured: a higher-ranked job always
gets its pick first, and every job still runs somewhere when its preferred type is full, except a gang
that would crawl spread over slow servers, step 5).

How the lists are made, each round, from the throughput matrix X[j, t] (predicted throughput of job j
on its asked GPUs of type t, one batched oracle call):

1. **Effective throughput.** E[j, t] = X[j, t] / max_t X[j, t]: the share of its best speed job j gets on
   type t. The sum of g_j E[j, t(j)] over running jobs is the cluster's effective throughput in "GPUs of
   each job's best type" (each job's demand is fixed in those units, so more of it is more work done).
2. **Who competes.** The jobs that could run now if GPU types did not matter: the longest prefix of the
   rank order whose GPUs fit in the cluster (jobs too big for any allowed type are skipped).
3. **One assignment per round.** A small LP (SciPy's HiGHS) gives the competing jobs fractions
   a[j, t] that maximise sum g_j (1 + E[j, t] - churn[j, t]) a[j, t] under sum_t a[j, t] <= 1 and
   sum_j g_j a[j, t] <= GPUs of type t. The constant 1 makes "run as many GPUs of the prefix as fit"
   come first; E then hands each type to the jobs with the *comparative* advantage on it (a job 9x
   faster on V100 than K80 gets a V100 before a job 1.2x faster, even when the latter ranks first and
   still runs, on a K80). Identical jobs form one class (the LP is symmetric in them), so the LP has
   one row per distinct (speed row, size, current type) rather than per job.
4. **Churn priced.** A running job stays on its type unless moving pays: over the gain horizon
   h = min(``horizon_s``, remaining work / X[j, t]) a move to type t must gain more work than it loses,
   (X[j, t] - X[j, c]) h > (1 + restarts) (X[j, t] R + lost), where R is the restart cost the planner
   charges (``ClusterSnapshot.restart_cost_s``), lost the progress since its last checkpoint and
   restarts the job's restarts so far (each one raises the bar: no job hops from type to type). The new
   type must be predicted at least ``MIN_SPEEDUP`` (1.25x) faster, so that prediction errors of that
   size do not cause moves. A job with less than ``MIN_REMAINING_RESTARTS`` (10) restart costs of work
   left where it runs never moves, nor does one not yet measured where it runs (the operator's first
   progress report comes seconds after a start; the simulator measures at once).
   **Measured level, predicted ratios.** When the job is *measured* (``Job.observed_throughput``: the
   operator's progress reports, the simulator's true rate) faster than the oracle predicts for the
   placement it runs on (asked in one batched call per round), its whole row X[j, .] is scaled by
   measured / predicted: the move is decided on the predictor's ratio between types at the measured
   level. (Against the compact shape's prediction instead, a placement faster than that shape read as
   predictor error even under the true table: aware SRSF on modern-mix, load 1.5, 5.02 -> 12.8 h.)
   Comparing the measurement here with raw predictions elsewhere (the alternative) blocks every
   move of a job the predictor under-rates on all types (on one Philly draw a shufflenet on 8 P100s
   stayed there 526 h; the truth moves it to V100s within a day), and taking the measurement as the
   speed everywhere would move jobs on the predictor's level errors
   (migrations per job 0.60 -> 1.09 under ``--oracle predictor``). Where it runs, the measurement
   replaces the prediction, slower as well as faster: a gang predicted 35x too fast on K80s over
   10 Gb/s otherwise never left them (docs/decisions/0031-decisions-under-uncertainty.md); the moves
   that level errors would then cause are stopped by pricing the target at its lower bound (step 6).
   "Nearly done" is
   judged by the measured remaining time. Moves that do not pay get no LP variable; those that pay
   carry their cost (R X[j, t] + lost) / (max X[j] h) in the objective, so the LP only moves a job
   where the move is worth more than it costs to the job and to the jobs it would displace.
5. **Lists.** Each job's types, most wanted first: the type its LP row gives most of, then by value per
   GPU minus the type's LP price (the dual of its capacity row), so a job that did not compete this
   round still queues for the type where it is cheapest relative to what others would make of it.
   A running job that the LP moves asks only for its LP type (``greedy_allocate`` keeps its current
   GPUs when that type has no room, and a move never preempts anyone; a hop to a second-best type would
   often be followed by another); any other running job lists its current type first, so it keeps it.
   A job that a higher-ranked one evicts may restart at once on free GPUs of another type, but the
   aware policies do not let it evict in turn there (``greedy_allocate(no_cascade=True)``).
   **Evictions priced** (``EvictionPrice``, aware LAS): the policy's order says who may evict
   whom; a job that does not fit evicts only when what it would lose by waiting, its GPUs times the
   predicted wait until enough GPUs of the type free up without evicting (running jobs finishing at
   their measured rate, after the gangs of waiting jobs ahead of it; at most ``horizon_s``), beats what
   the evictions waste, each victim's GPUs times (its restart cost plus the time to redo its work since
   its last checkpoint) times (1 + its restarts so far), the bar moves pay. Otherwise it waits (its
   decision says so) or evicts on its next type. At a 30 s restart a first eviction passes unless a
   completion is under a minute away; a job evicted k times is evicted again only for a wait of about
   k restart costs: the long LAS queue-2 jobs that were restarted on GPUs a completion freed and
   evicted from them by the next arrival, dozens of times an hour, now keep them. Elastic victims are
   not priced (a restart is how one running small regains its size). Not for SRSF: it
   met the churn bound without it, and with it the predictor's share of its gain on one Philly
   draw fell 83% -> 75% (docs/decisions/0012-eviction-pricing.md).
   Types where a job is predicted to make no progress are left out; a job predicted to make none
   anywhere keeps the free-GPU order. So are, for a waiting job, the types where its gang would span
   several nodes and run, even at its upper bound, under ``MIN_SPREAD_SHARE`` of its best type's lower
   bound: it waits for a better type (under LAS a gang crawling on slow servers spends its attained
   service as fast as on fast ones, drops to the last queue and is starved; decision 0094).
6. **What the oracle does not know.** Each answer X[j, t] carries a factor u >= 1 (the truth within
   [X / u, X u]): the oracle's own interval where it gives one (``IntervalOracle``: the predictor's),
   widened to this round's measured spread (``Uncertainty``: the 0.9 quantile of |log(measured /
   predicted)| over the running jobs, the prediction a learning oracle made before it learned that
   job's measurement, ``HeldOutOracle``; per class: placements on one node, and gangs across nodes, which
   are never taken as better predicted than one node), the job's own error left out of its own row; a
   type where the job is measured is exact. A waiting job whose types' ratios are not all known within
   ``MIN_SPEEDUP`` (each interval's high / low <= sqrt(1.25)) does not enter the LP: it asks for its
   types as ``ordered`` would (newest generation first, ``scheduler.policies.ordered``), since a
   comparative advantage inside the uncertainty is no reason to give it an older type (the shipped
   predictor's own interval, -10% / +12%, is wider than that, so under it every waiting job does; the
   aware gain then comes from moving measured jobs). One that enters it is valued at its worst case
   (lower bound over the reference type's upper bound). A move is priced on the target's lower bound,
   so it must gain beyond the interval; gangs across nodes, the least predictable questions, need the
   largest gain. The one exception is the job's newest allowed type (highest peak rate at its precision,
   above its current type's): inside that type's interval the move is priced at the measured speed
   times the catalogue's peak ratio, so a measured job the oracle cannot rank moves up once, as
   ``ordered`` would have started it there (docs/decisions/0146). Under the true table every u is 1
   and the planner decides as on point predictions.

Follows Narayanan et al., "Heterogeneity-Aware Cluster Scheduling Policies for Deep Learning Workloads"
(Gavel, OSDI 2020): the throughput matrix, effective throughput and policies made heterogeneity-aware by
an optimisation over it. Differs: Gavel solves for time fractions over all jobs and realises them by
time-slicing every round (many preemptions); here the ordering policy keeps deciding who runs and the
LP only decides *where*, integrally and per round, for the jobs that can run now, with churn priced by
restart cost and lost work (so a job moves at most when a better type frees up and the move pays).
Normalisation is by the job's own best type, which (unlike Gavel's max-min objective) is harmless in a
sum: for two types any per-job normalisation ranks jobs by the same speed-up ratio.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from scheduler.core.placement import spread_of
from scheduler.core.protocols import HeldOutOracle, IntervalOracle, ThroughputOracle
from scheduler.core.types import Allocation, ClusterSnapshot, Job, PlacementShape
from scheduler.policies.base import FreeByType, TypeInfo, allowed_types, batch_throughput
from scheduler.policies.elastic_shares import PredictedThroughputs, size_bounds
from scheduler.policies.ordered import TypePreference, peak_tflops

#: default gain horizon (seconds) over which a move to a faster GPU type must pay for itself
DEFAULT_HORIZON_S = 3600.0
#: a move must gain this many times its cost (hysteresis against predictions that flip-flop)
MOVE_MARGIN = 1.0
#: and be predicted at least this much faster: predictions err by tens of percent (``--mre 0.25``, the
#: real predictor's ratios between types), and a move on a smaller predicted gain is as likely churn
MIN_SPEEDUP = 1.25
#: a running job with less than this many restart costs of work left where it runs is never moved
MIN_REMAINING_RESTARTS = 10.0
#: a waiting gang does not start spread over several nodes of a type where even the upper bound of its
#: speed is under this share of the lower bound of its best type's (one where a replica fits a node): it
#: waits for a better type. Under LAS its attained service (GPU-seconds) grows as fast there while its
#: work barely moves, so it drops to the last queue and is evicted and starved: on modern-mix, load 3,
#: 8-GPU gangs started on two 4-T4 PCIe servers ran 1.5-hour jobs for 118 hours (aware LAS 0.84x of
#: ``ordered`` under the true table; docs/decisions/0094-no-slow-spread-starts.md)
MIN_SPREAD_SHARE = 0.25


#: the measured/predicted ratios of the running jobs on placements of one class (one node, several
#: nodes) are the oracle's error there this round; the spread is read at this quantile of |log ratio|
SPREAD_QUANTILE = 0.9


@dataclass(frozen=True, slots=True)
class Uncertainty:
    """How far the oracle may be off this round, as a factor u >= 1 (the truth within [x / u, x u]), for
    questions about one node and about gangs across nodes.

    Read from the running jobs' measurements (``calibrate``): ``single`` and ``multi`` hold, sorted, the
    |log(measured / predicted)| of the measured jobs whose placement spans one node or several, and the
    factor is their ``SPREAD_QUANTILE`` (1 with none measured). A gang across nodes is never taken as
    better predicted than a job on one node (its factor is the larger of the two: its sync over the
    network is one more thing to predict). A job's own error is left out of the factor its own row uses
    (``exclude``): its row is already corrected by it, and what the others' errors say is what remains
    unknown. The oracle's own interval (``IntervalOracle``), where it gives one, is a floor per question
    (``TypePlanner``). Under the true table every factor is 1 and the planner decides exactly as on point
    predictions.
    """

    single: tuple[float, ...] = ()
    multi: tuple[float, ...] = ()

    def factor(self, multi_node: bool, exclude: tuple[bool, float] | None = None) -> float:
        one = _spread(self.single, exclude[1] if exclude is not None and not exclude[0] else None)
        if not multi_node:
            return one
        return max(one, _spread(self.multi, exclude[1] if exclude is not None and exclude[0] else None))


def _spread(xs: Sequence[float], exclude: float | None = None) -> float:
    """exp of the ``SPREAD_QUANTILE`` of sorted ``xs``, one occurrence of ``exclude`` left out."""
    n = len(xs)
    skip = bisect.bisect_left(xs, exclude) if exclude is not None else n
    if skip >= n or xs[skip] != exclude:
        skip = n
    m = n - (1 if skip < n else 0)
    if m <= 0:
        return 1.0
    k = min(m - 1, int(SPREAD_QUANTILE * m))
    return math.exp(xs[k + 1] if skip <= k else xs[k])


def calibrate(measured: Sequence[tuple[float, float, bool]]) -> Uncertainty:
    """``Uncertainty`` from (measured, predicted, spans several nodes) of running jobs' placements."""
    logs: dict[bool, list[float]] = {False: [], True: []}
    for observed, predicted, multi in measured:
        err = log_error(observed, predicted)
        if err is not None:
            logs[multi].append(err)
    return Uncertainty(single=tuple(sorted(logs[False])), multi=tuple(sorted(logs[True])))


def log_error(observed: float, predicted: float) -> float | None:
    """|log(observed / predicted)|, None when either is not positive."""
    if observed > 0 and predicted > 0 and math.isfinite(observed / predicted):
        return abs(math.log(observed / predicted))
    return None


@dataclass(frozen=True, slots=True)
class _Row:
    """One job's view of the types: speed, GPUs and LP value per type (absent: not an option)."""

    job: Job
    speed: dict[str, float]
    gpus: dict[str, int]
    value: dict[str, float]
    current: str | None
    #: the speed's bounds per type (``TypePlanner._bounds``); empty: exact
    low: Mapping[str, float] = field(default_factory=dict)
    high: Mapping[str, float] = field(default_factory=dict)
    #: a waiting job whose predicted advantages are inside the uncertainty: it asks as ``ordered`` would
    preference: tuple[str, ...] = ()


def move_pays(
    job: Job,
    current_speed: float,
    new_speed: float,
    *,
    restart_cost_s: float,
    horizon_s: float,
    restarts: int = 0,
) -> tuple[bool, float]:
    """Whether moving a running job from a type where it makes ``current_speed`` to one where it makes
    ``new_speed`` (work units/s) gains more work over the horizon than the move loses; and that cost in
    work units (restart seconds at the new speed plus the progress since the last checkpoint).

    The horizon is ``horizon_s`` or, if sooner, when the job would finish on the new type. Never a move:
    a speed-up under ``MIN_SPEEDUP``; a job whose remaining time where it runs is under
    ``MIN_REMAINING_RESTARTS`` restart costs (it is nearly done: what a move could save is within the
    error of the speeds); and a job that has already restarted ``restarts`` times must gain
    ``(1 + restarts)`` times the cost (each restart raises the bar, so no job hops type after type).
    """
    if new_speed <= MIN_SPEEDUP * current_speed or new_speed <= 0 or current_speed <= 0:
        return False, math.inf
    remaining = job.remaining_work
    if remaining / current_speed < MIN_REMAINING_RESTARTS * restart_cost_s:
        return False, math.inf
    lost = max(0.0, job.progress - job.checkpoint_progress)
    cost = new_speed * restart_cost_s + lost
    horizon = min(horizon_s, remaining / new_speed)
    gain = (new_speed - current_speed) * horizon
    return gain > MOVE_MARGIN * (1 + max(0, restarts)) * cost, cost


def eviction_pays(
    need_gpus: int,
    wait_s: float,
    victims: Sequence[Job],
    victim_gpus: Sequence[int],
    *,
    restart_cost_s: float,
    horizon_s: float,
) -> bool:
    """Whether evicting ``victims`` (running on ``victim_gpus`` GPUs each) so that a job needing
    ``need_gpus`` GPUs starts now, instead of in ``wait_s`` seconds when GPUs free up without evicting
    anyone, pays: in GPU-seconds (LAS's own currency), the service the job gains, ``need_gpus x
    min(wait_s, horizon_s)``, must exceed what the evictions waste, each victim's restart plus the
    progress since its last checkpoint, times ``(1 + restarts)`` as for a move (``move_pays``): a job
    evicted many times is evicted again only for a long wait. An eviction that wastes nothing (no
    restart cost, no victim priced) always pays.
    """
    cost = 0.0
    for v, g in zip(victims, victim_gpus, strict=True):
        lost = max(0.0, v.progress - v.checkpoint_progress)
        speed = v.observed_throughput or 0.0
        lost_s = lost / speed if speed > 0 else 0.0
        cost += (1 + max(0, v.restarts)) * g * (restart_cost_s + lost_s)
    return cost <= 0 or need_gpus * min(wait_s, horizon_s) > MOVE_MARGIN * cost


class EvictionPrice:
    """``greedy_allocate``'s ``evict_pays`` for one round: a job evicts only when waiting for GPUs of the
    type to free up would cost it more than the evictions cost their victims (``eviction_pays``).

    The wait is predicted from the running jobs' measured throughput (``Job.observed_throughput``):
    each finishes its remaining work at that rate, and the wait is until the GPUs free on the type
    plus those of the jobs finished by then reach the job's gang, after the gangs of the waiting jobs
    ahead of it that want that type first (``free_gpus`` comes net of those; jobs not measured yet
    never finish in it; node boundaries are not counted).
    When enough GPUs are free already but the gang does not fit on them (split over nodes), no
    completion is known to help: the wait is unbounded, and the job evicts as it would unpriced.
    Elastic victims are not priced (their restart is how they regain their size).
    """

    def __init__(
        self, snapshot: ClusterSnapshot, jobs: Sequence[Job], *, horizon_s: float = DEFAULT_HORIZON_S
    ) -> None:
        self._restart_s = snapshot.restart_cost_s
        self._horizon_s = horizon_s
        self._jobs = {j.name: j for j in jobs}
        self._gpus = {name: a.total_gpus for name, a in snapshot.allocations.items()}
        ends: dict[str, list[tuple[float, int]]] = {}
        for name, a in snapshot.allocations.items():
            j = self._jobs.get(name)
            speed = j.observed_throughput if j is not None else None
            if j is not None and speed and speed > 0:
                ends.setdefault(a.gpu_type, []).append((j.remaining_work / speed, a.total_gpus))
        self._ends = {t: sorted(e) for t, e in ends.items()}

    def wait_s(self, need_gpus: int, gpu_type: str, free_gpus: int) -> float:
        """Predicted seconds until ``need_gpus`` GPUs of ``gpu_type`` are free without evicting, with
        ``free_gpus`` free now (negative: owed to jobs ahead)."""
        if free_gpus >= need_gpus:
            return math.inf  # free, but the gang does not fit on them: no completion is known to help
        have = free_gpus
        for end, g in self._ends.get(gpu_type, ()):
            have += g
            if have >= need_gpus:
                return end
        return math.inf

    def __call__(self, job: Job, gpu_type: str, victims: Sequence[str], free_gpus: int) -> bool:
        wait = self.wait_s(job.min_gpus, gpu_type, free_gpus)
        # an elastic victim is not protected: a restart is how an elastic job that runs small gets back
        # to a larger size. Priced, the short jobs that would evict it wait instead: on the benchmark's
        # elastic scenario at load 3 preemptions per job fell 0.47 / 0.49 -> 0.13 / 0.17 (seeds 0 / 1)
        # but the average JCT went 1.63 / 1.83 -> 1.61 / 2.10 h (docs/decisions/0012-eviction-pricing.md)
        priced = [v for v in victims if not self._jobs[v].is_elastic]
        return eviction_pays(
            job.min_gpus,
            wait,
            [self._jobs[v] for v in priced],
            [self._gpus[v] for v in priced],
            restart_cost_s=self._restart_s,
            horizon_s=self._horizon_s,
        )


class PlacementMovePrice:
    """Whether moving a running job from its placement to another pays, each priced on its real spread
    (the oracle's speed on ``spread_of`` each placement, ``move_pays`` with the job's restarts so far).

    ``greedy_allocate``'s ``consolidate`` (LAS: a spread gang to fewer nodes of its type) and
    ``spread_move`` (a move to another type that lands on more nodes than the compact shape the type
    planner priced it on)."""

    def __init__(self, snapshot: ClusterSnapshot, oracle: ThroughputOracle, horizon_s: float) -> None:
        self._nodes = snapshot.node_map()
        self._oracle = oracle
        self._restart_s = snapshot.restart_cost_s
        self._horizon_s = horizon_s

    def __call__(self, job: Job, current: Allocation, new: Allocation) -> bool:
        cur, to = batch_throughput(
            self._oracle, [(job, spread_of(current, self._nodes)), (job, spread_of(new, self._nodes))]
        )
        pays, _ = move_pays(
            job, cur, to, restart_cost_s=self._restart_s, horizon_s=self._horizon_s, restarts=job.restarts
        )
        return pays


class TypePlanner:
    """Per-round GPU type lists for jobs in a policy's rank order (see the module docstring)."""

    def __init__(
        self,
        snapshot: ClusterSnapshot,
        infos: Mapping[str, TypeInfo],
        table: PredictedThroughputs,
        *,
        horizon_s: float = DEFAULT_HORIZON_S,
        placed: Mapping[str, float] | None = None,
        uncertainty: Uncertainty | None = None,
        oracle: ThroughputOracle | None = None,
    ) -> None:
        """``placed``: each running job's predicted throughput on the placement it runs on (its
        measured throughput is compared with that, not with the compact shape's prediction);
        ``uncertainty``: this round's measured spread of the oracle (None: exact); ``oracle``: asked for
        its interval on the table's questions when it gives one (``IntervalOracle``)."""
        self.snapshot = snapshot
        self.infos = infos
        self.table = table
        self.horizon_s = horizon_s
        self.free = FreeByType(snapshot)
        self.preference = TypePreference(self.free)
        self.placed: Mapping[str, float] = placed or {}
        self.uncertainty = uncertainty or Uncertainty()
        self.oracle = oracle if isinstance(oracle, IntervalOracle) else None
        #: (job, type) -> the oracle's own uncertainty factor on the table's question (>= 1)
        self.oracle_u: dict[tuple[str, str], float] = {}

    def _oracle_intervals(self, jobs: Sequence[Job]) -> None:
        """Ask the oracle, in one call, for its interval on each job's question per type (``oracle_u``)."""
        if self.oracle is None:
            return
        keys: list[tuple[str, str, float]] = []
        queries: list[tuple[Job, PlacementShape]] = []
        for job in jobs:
            for t in allowed_types(job, self.infos):
                r, v = self.table.peak(job, t)
                if v > 0:
                    keys.append((job.name, t, v))
                    queries.append((job, self.infos[t].shape(r * job.gpus_per_replica)))
        if not queries:
            return
        for (name, t, v), (lo, hi) in zip(keys, self.oracle.throughput_interval(queries), strict=True):
            if 0 < lo <= hi:
                self.oracle_u[(name, t)] = max(1.0, v / lo, hi / v)

    def _row(self, job: Job) -> _Row | None:
        types = allowed_types(job, self.infos)
        speed: dict[str, float] = {}
        gpus: dict[str, int] = {}
        for t in types:
            r, v = self.table.peak(job, t)
            if v > 0:
                speed[t] = v
                gpus[t] = r * job.gpus_per_replica
        if not speed:
            return None
        cur_alloc = self.snapshot.allocations.get(job.name)
        # a job on a type with no schedulable capacity left (cordoned) must move: plan it as waiting
        current = cur_alloc.gpu_type if cur_alloc is not None and cur_alloc.gpu_type in self.infos else None
        observed = job.observed_throughput
        measured = False
        if current is not None and cur_alloc is not None and current in speed and observed and observed > 0:
            # measured where it runs: the measurement replaces the prediction there (scaled to the size
            # the row plans with when an elastic job runs at another size), and its ratio to the
            # prediction for the same placement, the predictor's error on this job, scales the whole row
            # (measured level, predicted ratios between types), faster or slower; a move must then still
            # gain beyond what the other jobs' errors say is unknown (``_bounds``)
            here = self.table.get(job.name, current, cur_alloc.replicas)
            at = self.placed.get(job.name, 0.0)
            ratio = observed / at if at > 0 else 0.0
            level = max(1.0, ratio)
            speed = {t: v * level for t, v in speed.items()}
            if cur_alloc.total_gpus == gpus[current]:
                speed[current] = observed
                measured = True
            elif here > 0 and ratio > 0:
                speed[current] = here * ratio
                measured = True
        own = None
        floor = 1.0
        if measured and cur_alloc is not None:
            at = self.placed.get(job.name, 0.0)
            err = log_error(observed or 0.0, at)
            own = (cur_alloc.num_nodes > 1, err) if err is not None else None
            if err is not None and (observed or 0.0) < at:
                # measured slower than predicted: the row is not corrected for it (a gang 35x slower on
                # K80s says little of its V100 speed), but it may be a level error: the targets' factor
                # is at least it, so one over-rated job alone moves on no level error
                floor = math.exp(err)
        low, high = self._bounds(job, speed, gpus, current if measured else None, own, floor)
        if current is None:
            self._drop_slow_spread(job, speed, gpus, low, high)
        value: dict[str, float] = {}
        if current is not None and current in speed and job.preemptible and observed:
            # a move is priced on the target's lower bound: it must gain beyond the interval; a type of a
            # higher peak rate at the job's precision (what ``ordered`` prefers) is priced, inside its
            # interval, at the measured speed times the peak rates' ratio (``_move_speeds``)
            target = self._move_speeds(job, current, speed[current], low, high)
            best = max(speed[current], *target.values())
            value[current] = 1.0 + speed[current] / best
            for t, v in target.items():
                if t == current:
                    continue
                pays, cost = move_pays(
                    job,
                    speed[current],
                    v,
                    restart_cost_s=self.snapshot.restart_cost_s,
                    horizon_s=self.horizon_s,
                    restarts=job.restarts,
                )
                if pays:
                    horizon = min(self.horizon_s, job.remaining_work / v)
                    value[t] = 1.0 + v / best - cost / (best * horizon)
        elif current is not None and cur_alloc is not None:
            # cannot move (non-preemptible; not measured where it runs yet, so a move cannot be priced;
            # or no predicted progress where it is): only where it is
            value[current] = 1.0 + speed.get(current, 0.0) / max(speed.values())
            gpus[current] = cur_alloc.total_gpus
        else:
            value = self._robust_values(job, speed, low, high)
        pref: tuple[str, ...] = ()
        if current is None and not self._certain(low, high):
            pref = tuple(sorted(speed, key=lambda t: self.preference.key(t, job.precision)))
        return _Row(job, speed, gpus, value, current, low, high, pref)

    def _move_speeds(
        self,
        job: Job,
        current: str,
        here: float,
        low: Mapping[str, float],
        high: Mapping[str, float],
    ) -> dict[str, float]:
        """The speed a move of a measured running job to each type is priced at: the type's lower bound;
        for the allowed type of the highest catalogue peak rate at the job's precision, when it is above
        the current type's, the measured speed ``here`` times the ratio of the peak rates, kept inside
        that type's interval. Where the oracle cannot tell the types apart (its interval spans the
        ratio), the job moves to the newest generation as ``ordered`` starts jobs, once (a move to a
        type in between is priced at its lower bound); an exact oracle (low = high) prices every move
        at its answer."""
        base = peak_tflops(current, job.precision)
        out = dict(low)
        if base <= 0:
            return out
        peaks = {t: peak_tflops(t, job.precision) for t in low}
        top = max(peaks, key=lambda t: (peaks[t], t))
        if top != current and peaks[top] > base:
            lo = low[top]
            out[top] = min(high.get(top, lo), max(lo, here * peaks[top] / base))
        return out

    def _drop_slow_spread(
        self,
        job: Job,
        speed: dict[str, float],
        gpus: dict[str, int],
        low: dict[str, float],
        high: dict[str, float],
    ) -> None:
        """Leave out of a waiting job's row the types where its gang would span several nodes and run,
        even at its upper bound, under ``MIN_SPREAD_SHARE`` of its best type's lower bound (among the
        types with a node that holds one of its replicas, so that the job has somewhere to wait for).

        The bounds are the widened ones (``_bounds``: the running gangs' measured spread included). With
        the shipped predictor, whose gang predictions across nodes err 2-8x by type, that keeps the rule
        from firing; on the oracle's own interval alone it fired for gangs that do well on the slow type
        and the multi-node mix on modern-mix lost 5-8% (decision 0118)."""
        gpr = job.gpus_per_replica
        fits = [low[t] for t in low if self.infos[t].node_gpus >= gpr]
        if not fits:
            return
        bar = MIN_SPREAD_SHARE * max(fits)
        for t in [t for t in speed if gpus[t] > self.infos[t].node_gpus and high[t] < bar]:
            for d in (speed, gpus, low, high):
                del d[t]

    def _certain(self, low: Mapping[str, float], high: Mapping[str, float]) -> bool:
        """Whether every ratio between two of the row's types is known within ``MIN_SPEEDUP`` (the bar a
        predicted gain must clear to move a job): each type's interval (high / low) within its square
        root, 1.118x. The LP may then trade the job's type for another job's."""
        return all(high[t] / low[t] <= math.sqrt(MIN_SPEEDUP) for t in low)

    def _bounds(
        self,
        job: Job,
        speed: Mapping[str, float],
        gpus: Mapping[str, int],
        measured_type: str | None,
        own: tuple[bool, float] | None = None,
        floor: float = 1.0,
    ) -> tuple[dict[str, float], dict[str, float]]:
        """Each type's speed divided and multiplied by its uncertainty factor: the oracle's own interval
        for the question (``IntervalOracle``), widened to this round's measured spread for its class (one
        node or several, ``Uncertainty``, less the job's own measured error ``own``), and at least ``floor``
        (a running job's own uncorrected error); a type where the job is measured is exact."""
        low: dict[str, float] = {}
        high: dict[str, float] = {}
        for t, v in speed.items():
            u = 1.0
            if t != measured_type:
                info = self.infos[t]
                multi = gpus[t] > max(1, info.node_gpus)
                u = max(self.oracle_u.get((job.name, t), 1.0), self.uncertainty.factor(multi, own), floor)
            low[t], high[t] = v / u, v * u
        return low, high

    def _robust_values(
        self, job: Job, speed: Mapping[str, float], low: Mapping[str, float], high: Mapping[str, float]
    ) -> dict[str, float]:
        """LP values of a job that may go anywhere, robust to the oracle's error: its reference type is the
        one ``ordered`` would pick (newest first) unless another type's lower bound beats that type's upper
        bound (an advantage beyond the interval; then the point estimate's best); every other type is
        valued at its lower bound over the reference's upper bound, the worst case of the row within the
        intervals. Exact answers (the true table) give the point values ``1 + X[t] / max X``."""
        pref = self.preference
        p = min(speed, key=lambda t: pref.key(t, job.precision))
        ref = p
        if max(low.values()) > high[p]:
            ref = max(speed, key=lambda t: (speed[t], -pref.key(t, job.precision)[1]))
        top = high[ref]
        return {t: 2.0 if t == ref else 1.0 + min(1.0, low[t] / top) for t in speed}

    def orders(self, ranked: Sequence[Job]) -> dict[str, tuple[str, ...]]:
        """Each job's allowed types in the order to try them; jobs missing get the free-GPU order."""
        types = list(self.infos)
        if len(types) <= 1:
            return {}
        live = [j for j in ranked if j.remaining_work > 0]
        self._oracle_intervals(live)
        rows = [r for r in (self._row(j) for j in live) if r is not None]
        if not rows:
            return {}
        capacity = {t: float(info.capacity) for t, info in self.infos.items()}
        total = sum(capacity.values())
        competing: list[_Row] = []
        used = 0
        for row in rows:
            if row.preference:
                continue  # asks as ``ordered`` would (``_Row.preference``), not in the LP
            need = min(row.gpus[t] for t in row.value) if row.value else 0
            if not row.value or need > max(capacity.get(t, 0.0) for t in row.value):
                continue
            if used + need > total:
                break
            used += need
            competing.append(row)
        in_lp = {r.job.name for r in competing}
        # running jobs outside the prefix keep their GPUs in this round's LP (they may yet be evicted)
        for name, alloc in self.snapshot.allocations.items():
            if name not in in_lp and alloc.gpu_type in capacity:
                capacity[alloc.gpu_type] = max(0.0, capacity[alloc.gpu_type] - alloc.total_gpus)
        share, price = _assign(competing, types, capacity)
        out: dict[str, tuple[str, ...]] = {}
        for row in rows:
            name = row.job.name
            got = share.get(name, {})

            def key(t: str, row: _Row = row, got: Mapping[str, float] = got) -> tuple[float, float, int, str]:
                v = row.value.get(t, 1.0 + row.speed[t] / max(row.speed.values()))
                return (-got.get(t, 0.0), -(v - price.get(t, 0.0)), -self.free.free.get(t, 0), t)

            if row.preference:
                out[name] = row.preference
                continue
            if row.current is not None and row.current in row.value and len(row.value) > 1:
                # the LP moves it (the move pays): ask only for that type; it keeps its GPUs otherwise
                best_move = sorted(row.value, key=key)[0]
                if best_move != row.current:
                    out[name] = (best_move,)
                    continue
            if row.current is not None:
                out[name] = (row.current, *sorted((t for t in row.speed if t != row.current), key=key))
                continue
            out[name] = tuple(sorted(row.speed, key=key))
        return out


def _assign(
    rows: Sequence[_Row], types: Sequence[str], capacity: Mapping[str, float]
) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
    """The LP of step 3 over job classes: each job's share per type and each type's price per GPU."""
    if not rows:
        return {}, {}
    col = {t: k for k, t in enumerate(types)}
    m = len(types)
    classes: dict[tuple[tuple[float, ...], tuple[int, ...]], list[_Row]] = {}
    for row in rows:
        key = (
            tuple(round(row.value.get(t, -1.0), 9) for t in types),
            tuple(row.gpus.get(t, 0) for t in types),
        )
        classes.setdefault(key, []).append(row)
    keys = list(classes)
    easy = _uncontended(classes, types, capacity)
    if easy is not None:
        return easy, {t: 0.0 for t in types}
    var_c: list[int] = []
    var_t: list[int] = []
    obj: list[float] = []
    cap_coef: list[float] = []
    for ci, key in enumerate(keys):
        values, gpus = key
        for t in types:
            k = col[t]
            v = float(values[k])
            g = float(gpus[k])
            if v <= 0 or g <= 0:
                continue
            var_c.append(ci)
            var_t.append(k)
            obj.append(-g * v)
            cap_coef.append(g)
    if not obj:
        return {}, {}
    import numpy as np  # with scipy, only where a round solves the LP (imports stay light elsewhere)
    from scipy.optimize import linprog
    from scipy.sparse import coo_matrix

    nv = len(obj)
    n = len(keys)
    idx = np.arange(nv)
    a_rows = np.concatenate([np.asarray(var_c), n + np.asarray(var_t)])
    a_cols = np.concatenate([idx, idx])
    a_vals = np.concatenate([np.ones(nv), np.asarray(cap_coef)])
    a_ub = coo_matrix((a_vals, (a_rows, a_cols)), shape=(n + m, nv)).tocsr()
    counts = np.array([len(classes[k]) for k in keys], dtype=float)
    b_ub = np.concatenate([counts, np.array([capacity.get(t, 0.0) for t in types])])
    res = linprog(np.asarray(obj), A_ub=a_ub, b_ub=b_ub, bounds=(0.0, None), method="highs")
    if res.status != 0 or res.x is None:
        return {}, {}
    marg = getattr(getattr(res, "ineqlin", None), "marginals", None)
    price = {t: float(-marg[n + col[t]]) for t in types} if marg is not None else {}
    share: dict[str, dict[str, float]] = {}
    for i in range(nv):
        x = float(res.x[i])
        if x <= 1e-9:
            continue
        members = classes[keys[var_c[i]]]
        for row in members:
            share.setdefault(row.job.name, {})[types[var_t[i]]] = x / len(members)
    return share, price


def _uncontended(
    classes: Mapping[tuple[tuple[float, ...], tuple[int, ...]], Sequence[_Row]],
    types: Sequence[str],
    capacity: Mapping[str, float],
) -> dict[str, dict[str, float]] | None:
    """The LP's answer without solving it when no type is contended, else None.

    When every class's most valued type (first in ``types`` on ties) has room for all of its members with
    some to spare, giving each class that type is optimal (each job's best term, no capacity binding) and
    every capacity row's price is 0. Many rounds are like this (54% of a 150-job Gavel run at load 1.5,
    21% of a 400-job one), and the LP call costs more than the rest of the round.
    """
    demand = dict.fromkeys(types, 0.0)
    pick: dict[tuple[tuple[float, ...], tuple[int, ...]], int] = {}
    for key, members in classes.items():
        values, gpus = key
        best = -1
        for k in range(len(types)):
            if values[k] > 0 and gpus[k] > 0 and (best < 0 or values[k] > values[best]):
                best = k
        if best >= 0:
            pick[key] = best
            demand[types[best]] += gpus[best] * len(members)
    if any(demand[t] >= capacity.get(t, 0.0) for t in types):
        return None
    share: dict[str, dict[str, float]] = {}
    for key, best in pick.items():
        for row in classes[key]:
            share[row.job.name] = {types[best]: 1.0}
    return share


def aware_orders(
    snapshot: ClusterSnapshot,
    infos: Mapping[str, TypeInfo],
    oracle: ThroughputOracle,
    ranked: Sequence[Job],
    *,
    horizon_s: float = DEFAULT_HORIZON_S,
    table: PredictedThroughputs | None = None,
) -> dict[str, tuple[str, ...]]:
    """``TypePlanner(...).orders(ranked)``, asking the oracle (one batched call) unless ``table`` is given.

    Empty on a cluster of one GPU type (nothing to choose: callers use the free-GPU order).
    """
    if len(infos) <= 1:
        return {}
    if table is None:
        table = PredictedThroughputs(oracle, [j for j in ranked if j.remaining_work > 0], infos, size_bounds)
    nodes = snapshot.node_map()
    measured = [
        (j, snapshot.allocations[j.name])
        for j in ranked
        if j.observed_throughput and j.name in snapshot.allocations and j.remaining_work > 0
    ]
    shapes = [(j, spread_of(a, nodes)) for j, a in measured]
    answers = batch_throughput(oracle, shapes)
    placed = {j.name: v for (j, _), v in zip(measured, answers, strict=True)}
    # a learning oracle's error is read on what it said before each job's own measurement (``HeldOutOracle``)
    said = oracle.throughput_held_out(shapes) if shapes and isinstance(oracle, HeldOutOracle) else answers
    uncertainty = calibrate(
        [(j.observed_throughput or 0.0, v, a.num_nodes > 1) for (j, a), v in zip(measured, said, strict=True)]
    )
    planner = TypePlanner(
        snapshot, infos, table, horizon_s=horizon_s, placed=placed, uncertainty=uncertainty, oracle=oracle
    )
    return planner.orders(ranked)
