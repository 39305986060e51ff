"""Queue admission: which jobs may hold GPUs this round under their queues' quotas, and why others wait.

Pure. ``admit(snapshot, jobs, oracle, choose_types=...)`` runs inside ``run_round`` before the policy
whenever the snapshot has queues (``ClusterSnapshot.queues``); with no queues it is never called and
nothing changes. It decides, per job, whether the job may hold GPUs this round and how many at most,
counting each admitted job against its queue's quota on one GPU type (the fastest with room); the policy
then orders and places the admitted jobs (their replicas capped) on a snapshot from which the GPUs of
jobs not admitted are freed, and the planner preempts those jobs.

GPU types: with ``choose_types`` (a policy that picks types by performance), an admitted job may run on
any of its types on which its queue's quota still has room for it after admission (its own counted type
always), so a heterogeneity-aware policy can place it, or move a running job, across types;
``Admission.guard`` (a ``QuotaGuard``) then checks the policy's answer per type, and ``run_round`` asks
the policy again with the queues whose quota it broke pinned to their counted types (then with every
queue pinned, which always keeps the quotas). Without ``choose_types`` every job is pinned.

The steps, per GPU type ``t`` (see ``scheduler.core.queues`` for the quota fields):

1. Fixed: running non-preemptible jobs keep their GPUs (they count against their queue), and so do
   running jobs whose queue no longer exists; allocations of anything not in the round (a gang still
   draining after a preemption) are not free either. A waiting job naming a missing queue waits, unresolvably,
   with a reason naming the queue.
2. Nominal: every queue admits its jobs, in queue order, while they fit its nominal quota and the free
   GPUs. Queue order is priority (high first), then running before waiting, then most progress lost on a
   preemption first, then submit time: the jobs reclaimed first are the lowest-priority ones that lose
   the least.
3. Borrowing: what is left of each cohort's nominal quota, within each member's lending limit, plus the
   GPUs no queue has a nominal quota on, is lent to the cohort's queues within their borrowing limits.
   A member keeps (lends none of) its idle nominal of a type where a waiting job of its own fits in it;
   idle nominal its waiting jobs are too large for is lent, and the member takes it back from the pool
   first. Contention is settled by weighted fair share:
   the queue with the smallest admitted share per unit of weight admits its next job first. The share
   is the sum over its admitted jobs of GPUs x the job's speed per GPU on that type relative to its
   fastest type (``fairShare: throughput``), or plain GPUs (``fairShare: gpus``).
4. Growth: elastic jobs were admitted at their minimum; they grow, one replica at a time and in the same
   fair order, into what is left within their queue's limits.

Backfill, bounded: a waiting job that does not fit lets the jobs behind it in its queue try; once it
has waited ``RESERVE_AFTER_S`` (and its queue could ever hold it) it holds the queue's quota: no waiting
job behind it starts on its GPU types until it does (running ones are not preempted for it). A job its
queue could never hold (nominal + borrowing limit below its size on every type) waits unresolvably.

Because every running borrower must be admitted again each round, a queue whose owner's job arrives
gets its nominal quota back in that very round: borrowers that no longer fit are preempted.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from scheduler.core.decisions import Decision, Unschedulable
from scheduler.core.protocols import ThroughputOracle
from scheduler.core.queues import DEFAULT_QUEUE, FairShare, QueueSpec, queue_index
from scheduler.core.types import Allocation, ClusterSnapshot, Job, PlacementShape

_UNLIMITED = 1 << 60
#: ``Unschedulable.cause`` of a job its queue's quota holds back, and of one naming a missing queue
QUEUE_QUOTA = "QueueQuota"
QUEUE_NOT_FOUND = "QueueNotFound"


@dataclass(frozen=True, slots=True)
class QueueUsage:
    """One queue after admission: GPUs admitted and borrowed per type, jobs left waiting, its share."""

    queue: str
    usage: Mapping[str, int]
    borrowed: Mapping[str, int]
    pending: int
    share: float


@dataclass(frozen=True, slots=True)
class QuotaGuard:
    """The quotas a policy's answer must keep when admitted jobs may choose their GPU type: per type, no
    queue above nominal + borrowing limit, and no cohort borrowing more than the GPUs no queue has a
    nominal quota on plus its members' idle nominal within their lending limits (members with a job
    waiting for that type lend none)."""

    specs: Mapping[str, QueueSpec]
    #: the admitted jobs' queues
    queue_of_job: Mapping[str, str]
    #: GPUs held by jobs the policy cannot move (running, not preemptible), per (queue, GPU type)
    fixed: Mapping[tuple[str, str], int]
    #: GPUs no queue has a nominal quota on, per GPU type
    unowned: Mapping[str, int]
    #: (queue, GPU type) pairs whose idle nominal quota is kept for the queue's waiting jobs (not lent)
    keeps: frozenset[tuple[str, str]]
    #: per (queue, GPU type), the fewest GPUs a job its queue holds back needs on that type: idle nominal
    #: it would fit in (a policy moved a job of the queue off that type) is not lendable either
    held: Mapping[tuple[str, str], int] = field(default_factory=dict)

    def broken(self, decisions: Mapping[str, Decision]) -> set[str]:
        """The queues whose quota ``decisions`` break (all members of a cohort that borrows too much)."""
        use = dict(self.fixed)
        for name, q in self.queue_of_job.items():
            d = decisions.get(name)
            if d is not None and d.allocation is not None:
                key = (q, d.allocation.gpu_type)
                use[key] = use.get(key, 0) + d.allocation.total_gpus
        bad: set[str] = set()
        for t in set(self.unowned) | {t for _, t in use}:
            borrowed: dict[str, int] = {}
            lendable: dict[str, int] = {}
            for q, spec in self.specs.items():
                u, nominal, limit = use.get((q, t), 0), spec.nominal(t), spec.borrowing_limit(t)
                if limit is not None and u > nominal + limit:
                    bad.add(q)
                if not spec.cohort:
                    continue
                borrowed[spec.cohort] = borrowed.get(spec.cohort, 0) + max(0, u - nominal)
                idle = max(0, nominal - u)
                if (q, t) not in self.keeps and self.held.get((q, t), _UNLIMITED) > idle:
                    lend = spec.lending_limit(t)
                    lendable[spec.cohort] = lendable.get(spec.cohort, 0) + (
                        idle if lend is None else min(lend, idle)
                    )
            for cohort, b in borrowed.items():
                if b > self.unowned.get(t, 0) + lendable.get(cohort, 0):
                    bad |= {q for q, spec in self.specs.items() if spec.cohort == cohort}
        return bad


@dataclass(frozen=True, slots=True)
class Admission:
    """What ``admit`` decided: the jobs the policy sees (capped, on the GPU types their queue has room for)
    on the snapshot it sees, the jobs held back by their queue with the reason, and each queue's usage.

    ``guard`` (None when every admitted job has one GPU type) checks the policy's answer; ``pin(queues)``
    gives the jobs again with those queues' admitted jobs pinned to the type admission counted them on
    (all queues: None), an answer for which always keeps the quotas."""

    jobs: tuple[Job, ...]
    snapshot: ClusterSnapshot
    waiting: Mapping[str, Unschedulable]
    queues: Mapping[str, QueueUsage]
    guard: QuotaGuard | None = None
    pinned: Mapping[str, Job] = field(default_factory=dict)

    def held_decisions(self) -> dict[str, Decision]:
        """A wait decision for every job the queues held back."""
        return {
            name: Decision(name, None, why.reason, unresolvable=not why.resolvable)
            for name, why in self.waiting.items()
        }

    def pin(self, queues: set[str] | None) -> tuple[Job, ...]:
        """The jobs with the admitted ones of ``queues`` (None: of every queue) pinned to one GPU type."""
        if self.guard is None:
            return self.jobs
        of = self.guard.queue_of_job
        return tuple(
            self.pinned[j.name] if j.name in self.pinned and (queues is None or of[j.name] in queues) else j
            for j in self.jobs
        )


def queue_of(job: Job) -> str:
    """The queue a job belongs to: the one it names, else ``default``."""
    return job.queue or DEFAULT_QUEUE


@dataclass
class _Cand:
    job: Job
    queue: str
    #: (GPU type, share per GPU) the job may run on, fastest first
    options: list[tuple[str, float]]
    running: Allocation | None
    #: every GPU type it may run on, fastest first
    types: list[str] = field(default_factory=list)
    gpu_type: str = ""
    gpus: int = 0


@dataclass
class _State:
    specs: Mapping[str, QueueSpec]
    free: dict[str, int]
    use: dict[tuple[str, str], int] = field(default_factory=dict)
    pool: dict[tuple[str, str], int] = field(default_factory=dict)
    share: dict[str, float] = field(default_factory=dict)
    fixed: dict[tuple[str, str], int] = field(default_factory=dict)
    unowned: dict[str, int] = field(default_factory=dict)
    now: float = 0.0
    cap: dict[str, int] = field(default_factory=dict)
    #: per (queue, type), the part of its idle nominal quota it lent to its cohort's pool
    pooled: dict[tuple[str, str], int] = field(default_factory=dict)
    #: per queue, the waiting job that holds its quota (see ``RESERVE_AFTER_S``)
    reserved: dict[str, _Cand] = field(default_factory=dict)

    def ceiling(self, q: str, t: str) -> int:
        """The most GPUs of ``t`` queue ``q`` could ever hold: nominal + borrowing limit, at most the GPUs
        of that type."""
        spec = self.specs[q]
        limit = spec.borrowing_limit(t)
        return min(self.cap.get(t, 0), _UNLIMITED if limit is None else spec.nominal(t) + limit)

    def borrowed(self, q: str, t: str) -> int:
        return max(0, self.use.get((q, t), 0) - self.specs[q].nominal(t))

    def room(self, q: str, t: str, borrowing: bool) -> int:
        """GPUs of ``t`` that ``q`` may take now: free ones within its quota room."""
        return min(self.quota_room(q, t, borrowing), self.free.get(t, 0))

    def quota_room(self, q: str, t: str, borrowing: bool = True) -> int:
        """GPUs of ``t`` the quotas still let ``q`` take (its idle nominal, then, when ``borrowing``, the
        cohort's pool within its borrowing limit), free or not. Of its idle nominal, the part it lent to
        the pool (``pooled``) is only its own again while the pool still has it."""
        spec = self.specs[q]
        idle = max(0, spec.nominal(t) - self.use.get((q, t), 0))
        if not (borrowing and spec.cohort):
            return idle
        pooled = self.pooled.get((q, t), 0)
        limit = spec.borrowing_limit(t)
        left = (_UNLIMITED if limit is None else limit) - self.borrowed(q, t)
        return idle - pooled + max(0, min(pooled + max(0, left), self.pool.get((spec.cohort, t), 0)))

    def take(self, c: _Cand, t: str, gpus: int) -> None:
        q, spec = c.queue, self.specs[c.queue]
        idle = max(0, spec.nominal(t) - self.use.get((q, t), 0))
        pooled = self.pooled.get((q, t), 0)
        from_pool = max(0, gpus - (idle - pooled))  # its lent idle nominal first, then borrowed GPUs
        if pooled:
            self.pooled[(q, t)] = max(0, pooled - from_pool)
        self.use[(q, t)] = self.use.get((q, t), 0) + gpus
        if spec.cohort and from_pool:
            key = (spec.cohort, t)
            self.pool[key] = self.pool.get(key, 0) - from_pool
        self.free[t] = self.free.get(t, 0) - gpus
        per_gpu = dict(c.options).get(t, 1.0) if spec.fair_share is FairShare.THROUGHPUT else 1.0
        self.share[q] = self.share.get(q, 0.0) + gpus * per_gpu / spec.weight


def _capacity(snapshot: ClusterSnapshot) -> dict[str, int]:
    """GPUs jobs may use, per GPU type (types whose nodes offer none are left out)."""
    cap: dict[str, int] = {}
    for n in snapshot.nodes:
        if n.capacity_for_jobs > 0:
            cap[n.gpu_type] = cap.get(n.gpu_type, 0) + n.capacity_for_jobs
    return cap


def queue_shares(
    snapshot: ClusterSnapshot,
    jobs: Sequence[Job],
    allocations: Mapping[str, Allocation],
    oracle: ThroughputOracle,
) -> dict[str, float]:
    """Each queue's share per unit of weight of what ``allocations`` give its jobs: the figure admission
    evens out across queues. For a ``fairShare: throughput`` queue, the sum over its jobs of GPUs x the
    job's speed per GPU on that type relative to its fastest type (delivered throughput in
    fastest-type GPU equivalents); for ``fairShare: gpus``, GPUs. Queues of the snapshot only."""
    specs = queue_index(snapshot.queues)
    held = [j for j in jobs if j.name in allocations and queue_of(j) in specs]
    by_tput = [j for j in held if specs[queue_of(j)].fair_share is FairShare.THROUGHPUT]
    rel = _options(by_tput, snapshot, oracle, _capacity(snapshot)) if by_tput else {}
    out = dict.fromkeys(specs, 0.0)
    for j in held:
        spec, alloc = specs[queue_of(j)], allocations[j.name]
        per_gpu = dict(rel.get(j.name, ())).get(alloc.gpu_type, 1.0) if j.name in rel else 1.0
        out[spec.name] += alloc.total_gpus * per_gpu / spec.weight
    return out


def _order_key(j: Job, running: bool) -> tuple[int, bool, float, float, str]:
    return (-j.priority, not running, -max(0.0, j.progress - j.checkpoint_progress), j.submit_time, j.name)


def _options(
    jobs: Sequence[Job], snapshot: ClusterSnapshot, oracle: ThroughputOracle, cap: Mapping[str, int]
) -> dict[str, list[tuple[str, float]]]:
    """For each waiting job, the GPU types it could ever fit on, with its speed per GPU relative to its
    fastest type, fastest first (one batched oracle call)."""
    largest: dict[str, int] = {}
    for n in snapshot.nodes:
        largest[n.gpu_type] = max(largest.get(n.gpu_type, 0), n.capacity_for_jobs)
    asks: list[tuple[Job, PlacementShape]] = []
    for j in jobs:
        for t in sorted(cap):
            if j.allows(t) and cap[t] >= j.min_gpus and largest[t] >= j.gpus_per_replica:
                per_node = largest[t] - largest[t] % j.gpus_per_replica
                asks.append((j, PlacementShape(t, j.min_gpus, -(-j.min_gpus // max(1, per_node)))))
    rates = oracle.throughput(asks) if asks else []
    by_job: dict[str, list[tuple[str, float]]] = {j.name: [] for j in jobs}
    for (j, shape), tput in zip(asks, rates, strict=True):
        if tput > 0:
            by_job[j.name].append((shape.gpu_type, tput / shape.num_gpus))
    rel: dict[str, list[tuple[str, float]]] = {}
    worth: dict[str, list[float]] = {}
    for name, opts in by_job.items():
        best = max((r for _, r in opts), default=0.0)
        rel[name] = [(t, r / best) for t, r in opts]
        for t, x in rel[name]:
            worth.setdefault(t, []).append(x)
    # among types on which a job runs about as fast (within 5%), prefer the one the other jobs gain
    # least from (a job as fast on K80 as on A100 leaves the A100s to jobs that need them)
    mean = {t: sum(xs) / len(xs) for t, xs in worth.items()}
    return {
        name: sorted(opts, key=lambda o: (-round(o[1] * 20), mean[o[0]], o[0])) for name, opts in rel.items()
    }


#: Seconds a waiting job lets smaller jobs of its queue start ahead of it (backfill) before it holds the
#: queue's quota: from then on no waiting job behind it in its queue starts on the GPU types it may use
#: until it starts (the idle quota it accumulates is lent meanwhile and reclaimed when it fits).
RESERVE_AFTER_S = 1800.0


def _admit_loop(state: _State, pending: dict[str, list[_Cand]], borrowing: bool) -> list[_Cand]:
    """Admit jobs at their minimum, the queue with the smallest share first; returns those admitted and
    leaves in ``pending`` those that did not fit (room only shrinks in a step, so each is tried once).
    A job that does not fit lets the jobs behind it in its queue try (backfill) unless it holds the
    queue's quota (``RESERVE_AFTER_S``)."""
    admitted: list[_Cand] = []
    untried = {q: list(reversed(cands)) for q, cands in pending.items() if cands}
    failed: dict[str, list[_Cand]] = {q: [] for q in pending}
    heap = [(state.share.get(q, 0.0), q) for q in untried]
    heapq.heapify(heap)
    while heap:
        _, q = heapq.heappop(heap)
        stack = untried[q]
        while stack:
            c = stack.pop()
            need = c.job.min_gpus
            holder = state.reserved.get(q)
            if (
                holder is not None
                and holder is not c
                and c.running is None
                and set(holder.types) & set(c.types)
            ):
                failed[q].append(c)  # behind a job that holds the quota of these types
                continue
            t = next((t for t, _ in c.options if state.room(q, t, borrowing) >= need), None)
            if t is None:
                failed[q].append(c)
                if holder is None and c.running is None and _may_reserve(state, c):
                    state.reserved[q] = c
                continue
            if holder is c:
                del state.reserved[q]
            c.gpu_type, c.gpus = t, need
            state.take(c, t, need)
            admitted.append(c)
            if stack:
                heapq.heappush(heap, (state.share.get(q, 0.0), q))
            break
    for q in pending:
        pending[q] = failed[q] + list(reversed(untried.get(q, [])))
    return admitted


def _waited(state: _State, j: Job) -> float:
    """Seconds ``j`` has waited: since it last stopped, else since it was submitted."""
    return state.now - (j.last_change_time if j.last_change_time is not None else j.submit_time)


def _may_reserve(state: _State, c: _Cand) -> bool:
    """Whether waiting job ``c`` now holds its queue's quota: it waited ``RESERVE_AFTER_S`` and its queue
    could ever give it its GPUs on one of its types."""
    fits = any(c.job.min_gpus <= state.ceiling(c.queue, t) for t in c.types)
    return fits and _waited(state, c.job) >= RESERVE_AFTER_S


def admit(
    snapshot: ClusterSnapshot, jobs: Sequence[Job], oracle: ThroughputOracle, *, choose_types: bool = False
) -> Admission:
    """Apply the snapshot's queues to ``jobs``; see the module docstring. ``choose_types``: let the policy
    choose each admitted job's GPU type among those its queue's quota has room for (kept in check by
    ``Admission.guard``); otherwise each is pinned to the type admission counted it on."""
    specs = queue_index(snapshot.queues)
    cap = _capacity(snapshot)
    state = _State(specs, dict(cap), now=snapshot.now, cap=cap)
    passed, waiting, cands = _classify(snapshot, jobs, state)
    _set_options(cands, snapshot, oracle, cap)
    by_queue: dict[str, list[_Cand]] = {}
    for c in sorted(cands, key=lambda c: _order_key(c.job, c.running is not None)):
        if c.options:
            by_queue.setdefault(c.queue, []).append(c)
        else:  # fits no GPU type at all: the policy and the wait explainer say why
            passed[c.job.name] = c.job
    admitted = _admit_loop(state, by_queue, borrowing=False)
    keeps = _lend(state, cap, by_queue)
    admitted += _admit_loop(state, by_queue, borrowing=True)
    _grow(state, admitted)
    for cs in by_queue.values():
        for c in cs:
            waiting[c.job.name] = _why(state, c)
    guard = QuotaGuard(
        state.specs,
        {c.job.name: c.queue for c in admitted},
        dict(state.fixed),
        dict(state.unowned),
        keeps,
        _held(by_queue),
    )
    return _result(snapshot, jobs, state, passed, waiting, admitted, by_queue, guard, choose_types)


def _held(by_queue: Mapping[str, list[_Cand]]) -> dict[tuple[str, str], int]:
    """Per (queue, GPU type), the fewest GPUs a job held back by its queue needs on that type."""
    out: dict[tuple[str, str], int] = {}
    for q, cs in by_queue.items():
        for c in cs:
            for t in c.types:
                out[(q, t)] = min(out.get((q, t), _UNLIMITED), c.job.min_gpus)
    return out


def _classify(
    snapshot: ClusterSnapshot, jobs: Sequence[Job], state: _State
) -> tuple[dict[str, Job], dict[str, Unschedulable], list[_Cand]]:
    """Step 1: the jobs passed to the policy as they are (done, running in a missing queue, running and
    not preemptible: these count against their queue), those that wait for a missing queue, and the
    candidates for admission. GPUs held by anything not in the round are taken from the free ones."""
    names = {j.name for j in jobs}
    for name, held in snapshot.allocations.items():
        if name not in names:  # GPUs held by something not in this round (a draining gang): not free
            state.free[held.gpu_type] = state.free.get(held.gpu_type, 0) - held.total_gpus
    passed: dict[str, Job] = {}
    waiting: dict[str, Unschedulable] = {}
    cands: list[_Cand] = []
    for j in jobs:
        cur = snapshot.allocations.get(j.name)
        q = queue_of(j)
        if j.remaining_work <= 0:
            passed[j.name] = j
        elif q not in state.specs:
            if cur is None:
                waiting[j.name] = Unschedulable(
                    f"queue {q} does not exist: create a TrainingQueue named {q} or set spec.queue",
                    False,
                    QUEUE_NOT_FOUND,
                )
            else:
                passed[j.name] = j
                state.free[cur.gpu_type] = state.free.get(cur.gpu_type, 0) - cur.total_gpus
        elif cur is not None and not j.preemptible:
            passed[j.name] = j
            state.take(_Cand(j, q, [(cur.gpu_type, 1.0)], cur), cur.gpu_type, cur.total_gpus)
            state.fixed[(q, cur.gpu_type)] = state.fixed.get((q, cur.gpu_type), 0) + cur.total_gpus
        else:
            cands.append(_Cand(j, q, [], cur))
    return passed, waiting, cands


def _set_options(
    cands: list[_Cand], snapshot: ClusterSnapshot, oracle: ThroughputOracle, cap: Mapping[str, int]
) -> None:
    """Every candidate's GPU types with its relative speed per GPU (one batched oracle call): a waiting
    one is counted on the first of its types with room, a running one on the type it runs on."""
    rel = _options([c.job for c in cands], snapshot, oracle, cap) if cands else {}
    for c in cands:
        opts = rel[c.job.name]
        c.types = [t for t, _ in opts]
        if c.running is None:
            c.options = opts
        else:
            cur = c.running.gpu_type
            c.options = [(cur, dict(opts).get(cur, 1.0))]
            if cur not in c.types:
                c.types.insert(0, cur)


def _lend(
    state: _State, cap: Mapping[str, int], by_queue: Mapping[str, list[_Cand]]
) -> frozenset[tuple[str, str]]:
    """Step 3's pools: what each cohort may lend of each type: the GPUs no queue has a nominal quota on,
    plus its members' idle nominal within their lending limits, except where the member keeps it for a
    waiting job of its own (``_keeps``). Returns the (queue, type) pairs kept."""
    specs = state.specs
    keeps = _keeps(state, by_queue)
    cohorts = {s.cohort for s in specs.values() if s.cohort}
    for t, total in cap.items():
        unowned = max(0, total - sum(s.nominal(t) for s in specs.values()))
        state.unowned[t] = unowned
        for cohort in cohorts:
            lend = unowned
            for s in specs.values():
                if s.cohort != cohort or (s.name, t) in keeps:
                    continue
                idle = max(0, s.nominal(t) - state.use.get((s.name, t), 0))
                limit = s.lending_limit(t)
                state.pooled[(s.name, t)] = idle if limit is None else min(limit, idle)
                lend += state.pooled[(s.name, t)]
            state.pool[(cohort, t)] = lend
    return keeps


def _keeps(state: _State, by_queue: Mapping[str, list[_Cand]]) -> frozenset[tuple[str, str]]:
    """The (queue, type) pairs whose idle nominal quota is not lent after step 2: those on which a waiting
    job of the queue fits in its idle nominal (it waits for GPUs held outside the round). A waiting job
    larger than its queue's idle nominal does not keep it, even when it holds its queue's quota: it could
    not use it alone, takes it back from the pool first, and gets it back (the borrowers reclaimed) in the
    round its queue's own jobs free enough of it."""
    out: set[tuple[str, str]] = set()
    for q, cs in by_queue.items():
        nominal = state.specs[q].nominal
        for c in cs:
            out.update((q, t) for t in c.types if c.job.min_gpus <= nominal(t) - state.use.get((q, t), 0))
    return frozenset(out)


def _result(
    snapshot: ClusterSnapshot,
    jobs: Sequence[Job],
    state: _State,
    passed: Mapping[str, Job],
    waiting: Mapping[str, Unschedulable],
    admitted: Sequence[_Cand],
    by_queue: Mapping[str, list[_Cand]],
    guard: QuotaGuard,
    choose_types: bool,
) -> Admission:
    """The Admission: admitted jobs capped at the GPUs they were admitted with, on the GPU types their
    queue has room for (or pinned), and each queue's usage."""
    pinned: dict[str, Job] = {}
    chosen: dict[str, Job] = {}
    for c in admitted:
        j = c.job
        replicas = c.gpus // j.gpus_per_replica
        capped = replace(j, max_replicas=replicas)
        if not capped.is_elastic:
            capped = replace(capped, min_replicas=min(j.min_replicas, replicas))
        pinned[j.name] = replace(capped, allowed_gpu_types=frozenset({c.gpu_type}))
        chosen[j.name] = pinned[j.name]
        if choose_types:
            room = {t for t in c.types if t == c.gpu_type or state.quota_room(c.queue, t) >= j.min_gpus}
            chosen[j.name] = replace(capped, allowed_gpu_types=frozenset(room))
    order = {j.name: i for i, j in enumerate(jobs)}
    out_jobs = sorted([*passed.values(), *chosen.values()], key=lambda j: order[j.name])
    keep = {name: a for name, a in snapshot.allocations.items() if name not in waiting}
    pending_count: dict[str, int] = {}
    for cs in by_queue.values():
        for c in cs:
            pending_count[c.queue] = pending_count.get(c.queue, 0) + 1
    types = sorted(state.unowned)
    usage = {
        q: QueueUsage(
            q,
            {t: state.use.get((q, t), 0) for t in types},
            {t: state.borrowed(q, t) for t in types},
            pending_count.get(q, 0),
            state.share.get(q, 0.0),
        )
        for q in sorted(state.specs)
    }
    flexible = any(len(j.allowed_gpu_types) > 1 for j in chosen.values())
    return Admission(
        tuple(out_jobs),
        replace(snapshot, allocations=keep),
        waiting,
        usage,
        guard if flexible else None,
        pinned,
    )


def _grow(state: _State, admitted: list[_Cand]) -> None:
    """Grow admitted elastic jobs one replica at a time, the queue with the smallest share first."""
    growing = [c for c in admitted if c.job.is_elastic and c.gpus < c.job.max_gpus]
    while growing:
        growing.sort(key=lambda c: (state.share.get(c.queue, 0.0), _order_key(c.job, c.running is not None)))
        c = growing[0]
        step = c.job.gpus_per_replica
        if state.room(c.queue, c.gpu_type, True) >= step:
            state.take(c, c.gpu_type, step)
            c.gpus += step
            if c.gpus < c.job.max_gpus:
                continue
        growing.pop(0)


def _why(state: _State, c: _Cand) -> Unschedulable:
    """Why a job its queue held back waits, quoting the type it would run fastest on; unresolvable when
    its queue's limits could never give it its GPUs."""
    q, spec = c.queue, state.specs[c.queue]
    if not any(c.job.min_gpus <= state.ceiling(q, t) for t in c.types):
        most = ", ".join(f"{state.ceiling(q, t)} {t}" for t in c.types)
        return Unschedulable(
            f"queue {q}: the job needs {c.job.min_gpus} GPUs of one type but the queue may hold at most "
            f"{most} (nominal quota + borrowing limit): raise the quota or shrink the job",
            False,
            QUEUE_QUOTA,
        )
    holder = state.reserved.get(q)
    if holder is not None and holder is not c and c.running is None and set(holder.types) & set(c.types):
        return Unschedulable(
            f"queue {q}: its quota is held for {holder.job.name} (needs {holder.job.min_gpus}, waiting "
            f"{_waited(state, holder.job):.0f} s), which smaller jobs may pass for "
            f"{RESERVE_AFTER_S:.0f} s only",
            cause=QUEUE_QUOTA,
        )
    t = c.options[0][0]
    used = state.use.get((q, t), 0)
    nominal = spec.nominal(t)
    limit = spec.borrowing_limit(t)
    if limit is None:
        text = f"queue {q}: {used} {t} in use (nominal {nominal}, no borrowing limit)"
    elif limit:
        text = f"queue {q}: {used}/{nominal + limit} {t} in use (nominal {nominal}, borrowing limit {limit})"
    else:
        text = f"queue {q}: {used}/{nominal} {t} in use (nominal {nominal})"
    if spec.cohort:
        text += f", cohort {spec.cohort} has {max(0, state.pool.get((spec.cohort, t), 0))} idle"
    else:
        text += ", no cohort to borrow from"
    free = max(0, state.free.get(t, 0))
    return Unschedulable(f"{text}; the job needs {c.job.min_gpus}, {free} {t} free", cause=QUEUE_QUOTA)
