"""Greedy gang allocation: the policies' shared walk over their ranked requests.

Pure. Every policy ranks jobs its own way and then hands an ordered list of ``Request``s to
``greedy_allocate``, which walks them in order and places each gang with the core's ``FreeIndex``
(the same placement the extender uses). Running jobs whose allocation still matches their request keep
it untouched (no migration); preemptive policies may evict running jobs ranked behind the requester
(``preempt_for``). ``try_place`` and ``preempt_for`` are public because the simulator's incremental
rounds (``scheduler.policies.incremental``) run exactly this code on their own free-GPU index.

Anti-starvation (optional, ``Reservation``): EASY backfilling, after Lifka, "The ANL/IBM SP scheduling
system" (JSSPP 1995) and Mu'alem & Feitelson, "Utilization, predictability, workloads, and user runtime
estimates in scheduling the IBM SP2 with backfilling" (IEEE TPDS 2001), at the granularity of nodes. The
first *starving* job in the walk (the policy says which) that cannot start compactly, or runs spread over
more nodes than its gang needs, gets a reservation: the nodes of one allowed GPU type that are predicted
to free up first enough to hold it compactly (running jobs' predicted finish times from the throughput
oracle; its own GPUs count as free), on the type where it is predicted to finish first. Their free GPUs
are held from then on in the walk; a waiting job behind it may take them only when predicted to finish
before the shadow time (when those nodes are free enough). A starving job does not start spread out: it
waits for its held nodes (once running spread out, ``consolidate`` moves it when they free). Differs from
EASY: run times are predicted from the oracle (not user estimates); the shadow time is per node and
topology-aware (a gang's speed depends on how many nodes it spans) but GPUs left over on the held nodes are
not offered to longer jobs; jobs ahead of the starving one in the policy's order are not held back, and
GPUs that a job behind it frees on the held nodes by preemption are not held.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import NamedTuple

from scheduler.core.decisions import Decision, Unschedulable
from scheduler.core.placement import FreeIndex
from scheduler.core.types import Allocation, ClusterSnapshot, Job


class Request(NamedTuple):
    """What a policy asks for one job, in its rank order (immutable; a named tuple because policies
    build one per job per round and a tuple is several times cheaper to build than a frozen dataclass).

    ``gpu_types`` and ``replicas`` are tried in order (replicas outer, types inner). ``rank``: lower is
    more urgent; a preemptive round lets a job evict running jobs whose rank exceeds its own by more than
    the margin. ``note`` tells a waiting person where the job stands (e.g. "LAS queue 1").
    ``keep_current``: a running job whose allocation matches any of the options keeps it; when false
    the first replica count is the target and a running job is resized in place towards it.
    """

    job: Job
    gpu_types: tuple[str, ...]
    replicas: tuple[int, ...]
    rank: float = 0.0
    note: str = ""
    keep_current: bool = True


class Reservation(NamedTuple):
    """EASY backfilling for starving jobs (see the module docstring); immutable.

    ``starving``: names of jobs the policy deems starving (waiting, or running spread out);
    ``runtime_s(job, gpu_type, gpus)``: predicted seconds for ``job`` to finish its remaining work on
    ``gpus`` GPUs of ``gpu_type`` (``math.inf`` when it cannot run there); ``now``: the snapshot's
    clock; ``prefetch`` (optional): ask ``runtime_s``'s oracle about many (job, type, GPUs) at once.
    """

    starving: Collection[str]
    runtime_s: Callable[[Job, str, int], float]
    now: float
    prefetch: Callable[[Sequence[tuple[Job, str, int]]], None] | None = None


class _Hold(NamedTuple):
    """An active reservation: ``nodes`` of ``gpu_type`` held for ``job`` until ``shadow`` (the predicted
    time they are free enough); ``alloc``: the placeholder allocation (named ``alloc_name``) taking their
    free GPUs on the walk's index, None when none is free there now."""

    job: str
    gpu_type: str
    shadow: float
    nodes: tuple[str, ...]
    alloc_name: str
    alloc: Allocation | None


_NO_VICTIMS = Unschedulable("no lower-ranked running jobs to preempt")
#: ``preempt_for``'s answer when the least urgent running job it would evict holds a restart lease
_LEASED = Unschedulable(
    "the least urgent running job it would evict has restarted many times and holds a lease on its GPUs"
)
#: ``preempt_for``'s answer when evictions would make room but ``evict_pays`` declined them all
_EVICTION_DOES_NOT_PAY = Unschedulable(
    "evicting lower-ranked jobs would cost them more restart time than this job is predicted to wait"
)

#: ``evict_pays(job, gpu_type, victims, free_gpus)``: whether evicting the running jobs named ``victims``
#: from ``gpu_type`` so that ``job`` starts now pays (``free_gpus``: GPUs of that type free before
#: evicting, less those wanted by the jobs ahead of it in the walk that wait for that type first: they
#: would get GPUs freed there before it; may be negative); the policy prices it (``greedy_allocate``)
EvictPays = Callable[[Job, str, Sequence[str], int], bool]
#: ``try_place``'s answer when every option fails only for want of free GPUs (see ``short_of_gpus``)
_SHORT_OF_GPUS = Unschedulable("waiting for free GPUs of an allowed type")


def restart_leases(
    snapshot: ClusterSnapshot, jobs: Sequence[Job], after_restarts: int | None, lease_s: float
) -> frozenset[str]:
    """``greedy_allocate``'s ``leased``: the running jobs restarted at least ``after_restarts`` times
    (``Job.restarts``: after evictions and moves) whose last (re)start (``Job.last_change_time``) was
    less than ``lease_s`` ago. None: no lease."""
    if after_restarts is None or lease_s <= 0:
        return frozenset()
    now = snapshot.now
    return frozenset(
        j.name
        for j in jobs
        if j.restarts >= after_restarts
        and j.last_change_time is not None
        and now - j.last_change_time < lease_s
        and j.name in snapshot.allocations
    )


def try_place(index: FreeIndex, req: Request, types_: Sequence[str]) -> Allocation | Unschedulable:
    """The first placement of ``req``'s gang on ``index`` (replica counts outer, ``types_`` inner), not
    committed; else why not (a resolvable reason when any option may fit later)."""
    last: Allocation | Unschedulable = Unschedulable("no allowed GPU type in the cluster", resolvable=False)
    any_resolvable = False
    for r in req.replicas:
        for t in types_:
            res = index.place(
                replicas=r, gpus_per_replica=req.job.gpus_per_replica, gpu_type=t, job=req.job.name
            )
            if isinstance(res, Allocation):
                return res
            if res.resolvable or not any_resolvable:
                last = res
            any_resolvable = any_resolvable or res.resolvable
    return last


def _resize_in_place(
    index: FreeIndex, req: Request, cur: Allocation, types_: Sequence[str]
) -> Allocation | None:
    """Shrink or grow a running gang on its own nodes (no migration) when its type stays; None if not.

    Called while ``cur`` is still committed; the result is not committed.
    """
    if cur.gpu_type not in types_ or cur.gpus_per_replica != req.job.gpus_per_replica:
        return None
    for target in req.replicas:
        if target < cur.replicas:
            # drop replicas from the nodes holding the fewest first, so the gang stays tight
            per_node = dict(cur.replicas_per_node)
            drop = cur.replicas - target
            for node_name, r in sorted(cur.replicas_per_node, key=lambda x: (x[1], x[0])):
                take = min(r, drop)
                per_node[node_name] = r - take
                drop -= take
                if drop == 0:
                    break
            return Allocation.of(cur.job, cur.gpu_type, cur.gpus_per_replica, per_node)
        if target > cur.replicas:
            extra = index.place(
                replicas=target - cur.replicas,
                gpus_per_replica=cur.gpus_per_replica,
                gpu_type=cur.gpu_type,
                job=cur.job,
                prefer=dict(cur.replicas_per_node),
            )
            if isinstance(extra, Allocation):
                per_node = dict(cur.replicas_per_node)
                for node_name, r in extra.replicas_per_node:
                    per_node[node_name] = per_node.get(node_name, 0) + r
                return Allocation.of(cur.job, cur.gpu_type, cur.gpus_per_replica, per_node)
        if target == cur.replicas:
            return cur
    return None


def greedy_allocate(
    snapshot: ClusterSnapshot,
    jobs: Sequence[Job],
    requests: Sequence[Request],
    *,
    preemptive: bool,
    strict: bool = False,
    preempt_margin: float = 0.0,
    extra: Mapping[str, Decision] | None = None,
    reservation: Reservation | None = None,
    consolidate: Callable[[Job, Allocation, Allocation], bool] | None = None,
    no_cascade: bool = False,
    evict_pays: EvictPays | None = None,
    leased: Collection[str] = frozenset(),
    spread_move: Callable[[Job, Allocation, Allocation], bool] | None = None,
    pick_victims: bool = False,
) -> dict[str, Decision]:
    """Walk ``requests`` in order and place each gang; returns a decision for every job in ``jobs``.

    - finished jobs get no allocation; running non-preemptible jobs keep theirs whatever they asked;
    - a running job whose allocation matches its request keeps it; otherwise it is re-placed (kept as it
      is when the new placement fails and the old one still fits);
    - ``preemptive``: when a job does not fit, running jobs ranked behind it (by more than
      ``preempt_margin``) are evicted, least urgent first, until it fits; evictions that turn out not to
      be needed are undone;
    - ``strict``: once a job cannot start, no job behind it starts (strict FIFO);
    - jobs with no request get ``extra``'s decision, else none (waiting, or preempted when running);
    - ``reservation``: EASY backfilling behind the first starving job that cannot start (module docstring);
    - ``consolidate(job, current, tighter)``: a running gang spread over several nodes that keeps its
      request is moved, when its turn comes, to a placement of the same type and size on fewer nodes
      if this says the move pays (the policy prices it); otherwise it keeps its GPUs;
    - ``no_cascade``: a running job evicted in this walk may restart at once on free GPUs, but may evict
      others in turn only on the GPU type it was evicted from (no eviction cascade onto another type:
      on Gavel's cluster a job evicted from a P100 evicted a queue-2 job from a K80, and both moved
      back within seconds when the newcomer moved up; one queue-2 job was evicted 54 times).
    - ``evict_pays(job, gpu_type, victims, free_gpus)``: asked before the evictions a job needs on a type
      are made; when it declines, that type is not preempted on (the job tries its next type, else waits
      and its decision says why). None: every eviction the ranks allow is made.
    - ``leased``: running jobs that may not be evicted this round (``restart_leases``). A job needing
      evictions on a type evicts, least urgent first, only the jobs ranked behind the least urgent leased
      one there: a leased job shields itself and every job ranked ahead of it on its type (no job with
      less remaining work is evicted in its place); the job tries its next type, else waits.
    - ``spread_move(job, current, new)``: a running job that its request moves to another GPU type, onto
      a placement there over more nodes than its gang needs, moves only if this says the move pays on
      that placement (the policy prices it on the placement's real spread); otherwise it keeps its GPUs.
      The type planner priced the move on the compact shape: realised spread out, the job ran slower
      than priced and the move back paid (on Gavel's cluster a 4-GPU job went from one K80 node to
      three P100 nodes and back 18 times in 13 hours). None: such moves are made as asked.
    - ``pick_victims``: a job that must evict chooses where over all of its types (``preempt_for`` with
      the jobs' attained service): on each type the evictions that free its gang with the fewest GPUs,
      and of the types, the one whose least-served victim has been served most. False: it evicts on the
      first type of its request where evictions make room, least urgent first.
    """
    walk = _Walk(snapshot, jobs, requests, reservation, no_cascade, evict_pays, leased, pick_victims)
    for req in requests:
        if req.job.name not in walk.decisions:  # else finished or pinned
            walk.step(req, preemptive, strict, preempt_margin, consolidate, spread_move)
    decisions = walk.decisions
    for j in jobs:
        if j.name not in decisions:
            dec = (extra or {}).get(j.name)
            decisions[j.name] = (
                dec if dec is not None else Decision(j.name, None, "not selected by the policy")
            )
    return decisions


class _Walk:
    """``greedy_allocate``'s state while it walks the requests (mutable, one per call)."""

    def __init__(
        self,
        snapshot: ClusterSnapshot,
        jobs: Sequence[Job],
        requests: Sequence[Request],
        reservation: Reservation | None,
        no_cascade: bool,
        evict_pays: EvictPays | None = None,
        leased: Collection[str] = frozenset(),
        pick_victims: bool = False,
    ) -> None:
        self.allocations = snapshot.allocations
        self.no_cascade = no_cascade
        self.evict_pays = evict_pays
        self.leased = leased
        #: GPUs wanted by the jobs walked so far that wait, by the first GPU type of their request: the
        #: GPUs freed on a type go to them before a job behind them (``evict_pays``'s ``free_gpus``)
        self.queued: dict[str, int] = {}
        self.index = FreeIndex(snapshot.nodes, snapshot.free_by_node())
        self.decisions, self.reserved = _settle_running(self.index, snapshot, jobs)
        self.rank_of = {r.job.name: r.rank for r in requests}
        for name in [n for n in self.reserved if n not in self.rank_of]:
            self.index.release(self.reserved.pop(name))  # no request: it stops this round, GPUs free now
        self.pending_victims = dict(self.reserved)  # running, preemptible, not yet walked
        self.victims_by_type = _victims_by_type(self.pending_victims, self.rank_of)
        #: each job's attained service, for ``preempt_for`` to choose victims over types (``pick_victims``)
        self.served = {j.name: j.attained_service for j in jobs} if pick_victims else None
        self.preempted_by: dict[str, str] = {}
        self.short_memo: _ShortMemo = {}
        self.blocked_by: str | None = None
        self.hold: _Hold | None = None
        self.jobs = jobs
        self.by_name: dict[str, Job] = {}
        self.reservation = reservation
        self.ahead = 0

    def _hold(self, req: Request, types_: tuple[str, ...], reservation: Reservation) -> _Hold | None:
        self.by_name = self.by_name or {j.name: j for j in self.jobs}
        return _hold_for(self.index, req, types_, self.reserved, self.decisions, self.by_name, reservation)

    def step(
        self,
        req: Request,
        preemptive: bool,
        strict: bool,
        preempt_margin: float,
        consolidate: Callable[[Job, Allocation, Allocation], bool] | None,
        spread_move: Callable[[Job, Allocation, Allocation], bool] | None = None,
    ) -> None:
        """Decide ``req``'s job: keep (or consolidate) its GPUs, place it, preempt for it, or wait."""
        name = req.job.name
        allowed = req.job.allowed_gpu_types
        types_ = tuple(t for t in req.gpu_types if t in allowed) if allowed else tuple(req.gpu_types)
        self.pending_victims.pop(name, None)
        cur = self.reserved.get(name)
        reservation = self.reservation
        starving = reservation is not None and self.hold is None and name in reservation.starving
        if cur is not None and _keeps_current(req, cur, types_):
            self._keep(req, cur, starving, consolidate)
            self.ahead += 1
            return
        if self.blocked_by is not None and cur is None:
            self.decisions[name] = Decision(
                name, None, f"blocked behind job {self.blocked_by} at the head of the queue"
            )
            self.ahead += 1
            return
        hold = self.hold
        lifted = False
        if (
            hold is not None
            and cur is None
            and reservation is not None
            and hold.alloc is not None
            and _done_by(req, hold, reservation)  # EASY: finishes before the held nodes are needed
        ):
            self.index.release(hold.alloc)
            lifted = True
        res = _place_or_keep(self.index, req, cur, types_, self.reserved, self.short_memo)
        if (
            spread_move is not None
            and cur is not None
            and isinstance(res, Allocation)
            and res.gpu_type != cur.gpu_type
            and res.num_nodes > _compact_nodes(self.index, res)
            and self.index.fits(cur)
            and not spread_move(req.job, cur, res)
        ):
            res = cur  # the move does not pay on the placement it would get: it keeps its GPUs
        if (
            starving
            and isinstance(res, Allocation)
            and cur is None
            and res.num_nodes > _compact_nodes(self.index, res)
        ):
            res = _SHORT_OF_GPUS  # a starving gang waits for a compact placement (held below)
        elif not isinstance(res, Allocation) and preemptive and types_:
            evict_on = types_
            if self.no_cascade and name in self.preempted_by and name in self.allocations:
                was = self.allocations[name].gpu_type
                evict_on = tuple(t for t in types_ if t == was)
            if evict_on:
                res = preempt_for(
                    self.index,
                    req,
                    evict_on,
                    self.reserved,
                    self.pending_victims,
                    self.victims_by_type,
                    preempt_margin,
                    self.preempted_by,
                    self._evict_pays if self.evict_pays is not None else None,
                    self.leased,
                    self.served,
                )
        if isinstance(res, Allocation):
            self.index.commit(res)
            self.reserved[name] = res
            self.decisions[name] = Decision(name, res, req.note)
        else:
            self._wait(req, res, types_, cur, starving, lifted)
            if res.resolvable and types_:
                gpus = min(req.replicas) * req.job.gpus_per_replica
                self.queued[types_[0]] = self.queued.get(types_[0], 0) + gpus
            if strict and self.blocked_by is None and res.resolvable:
                self.blocked_by = name
            if not res.resolvable:
                if lifted and self.hold is not None:
                    self.hold = _rehold(self.index, self.hold)
                return  # a job that can never run is not "ahead" of anyone
        if lifted and self.hold is not None:
            self.hold = _rehold(self.index, self.hold)
        self.ahead += 1

    def _evict_pays(self, job: Job, gpu_type: str, victims: Sequence[str], free_gpus: int) -> bool:
        """``evict_pays`` with ``free_gpus`` net of what the waiting jobs walked so far want there."""
        pays = self.evict_pays
        return pays is None or pays(job, gpu_type, victims, free_gpus - self.queued.get(gpu_type, 0))

    def _keep(
        self,
        req: Request,
        cur: Allocation,
        starving: bool,
        consolidate: Callable[[Job, Allocation, Allocation], bool] | None,
    ) -> None:
        """A running job that keeps its request: consolidated if that pays, else it keeps its GPUs."""
        name = req.job.name
        moved = _tighter(self.index, req, cur, consolidate) if consolidate is not None else None
        if moved is not None:
            self.index.commit(moved)
            self.reserved[name] = moved
            note = f"moved to {moved.num_nodes} node(s) from {cur.num_nodes}"
            self.decisions[name] = Decision(name, moved, f"{req.note}; {note}" if req.note else note)
            return
        self.decisions[name] = Decision(name, cur, req.note)
        reservation = self.reservation
        if starving and reservation is not None and cur.num_nodes > _compact_nodes(self.index, cur):
            # a starving gang running spread out: hold nodes for it to move to when they free up
            self.hold = self._hold(req, (cur.gpu_type,), reservation)

    def _wait(
        self,
        req: Request,
        res: Unschedulable,
        types_: tuple[str, ...],
        cur: Allocation | None,
        starving: bool,
        lifted: bool,
    ) -> None:
        """The job waits: its reason, and a hold for it when it is the first starving job."""
        name = req.job.name
        self.decisions[name] = d = _waiting_decision(req, res, self.ahead, self.preempted_by)
        reservation = self.reservation
        hold = self.hold
        if starving and reservation is not None and cur is None and res.resolvable:
            self.hold = hold = self._hold(req, types_, reservation)
            if hold is not None:
                free_in_h = max(0.0, hold.shadow - reservation.now) / 3600
                self.decisions[name] = _noted(
                    d, f"starving: {_held(hold)} for it, predicted free in {free_in_h:.2f} h"
                )
        elif hold is not None and cur is None and not lifted and hold.gpu_type in types_:
            self.decisions[name] = _noted(d, f"{_held(hold)} for starving job {hold.job}")


def _held(hold: _Hold) -> str:
    return f"{hold.gpu_type} GPUs on {', '.join(hold.nodes)} held"


def _noted(d: Decision, note: str) -> Decision:
    """A waiting job's decision ``d`` with ``note`` added to its reason."""
    return Decision(d.job, None, f"{d.reason}; {note}", unresolvable=d.unresolvable)


def _tighter(
    index: FreeIndex,
    req: Request,
    cur: Allocation,
    consolidate: Callable[[Job, Allocation, Allocation], bool],
) -> Allocation | None:
    """A placement of ``cur``'s gang (same type and size) on fewer nodes that ``consolidate`` approves,
    not committed (``cur`` is then released on ``index``); None when there is none (``cur`` stays)."""
    if cur.num_nodes <= 1:
        return None
    index.release(cur)
    res = try_place(index, req._replace(replicas=(cur.replicas,)), (cur.gpu_type,))
    if isinstance(res, Allocation) and res.num_nodes < cur.num_nodes and consolidate(req.job, cur, res):
        return res
    index.commit(cur)
    return None


def _compact_nodes(index: FreeIndex, alloc: Allocation) -> int:
    """The fewest nodes of ``alloc``'s type that can hold its gang (the largest node's capacity)."""
    per_node = max(1, index.largest_node(alloc.gpu_type) // max(1, alloc.gpus_per_replica))
    return max(1, -(-alloc.replicas // per_node))


def _done_by(req: Request, hold: _Hold, reservation: Reservation) -> bool:
    """Whether a waiting job behind the hold is predicted to finish, at every size it may start at, on
    the held type before the held nodes are needed (EASY backfilling's condition)."""
    gpr = req.job.gpus_per_replica
    return all(
        reservation.now + reservation.runtime_s(req.job, hold.gpu_type, r * gpr) <= hold.shadow
        for r in req.replicas
    )


def _rehold(index: FreeIndex, hold: _Hold) -> _Hold:
    """Hold again what is free on the held nodes after a backfilled job took its share."""
    per_node = {n: index.free_of(n) for n in hold.nodes if index.free_of(n) > 0}
    alloc = Allocation.of(hold.alloc_name, hold.gpu_type, 1, per_node) if per_node else None
    if alloc is not None:
        index.commit(alloc)
    return hold._replace(alloc=alloc)


def _hold_for(
    index: FreeIndex,
    req: Request,
    types_: Sequence[str],
    reserved: Mapping[str, Allocation],
    decisions: Mapping[str, Decision],
    by_name: Mapping[str, Job],
    reservation: Reservation,
) -> _Hold | None:
    """Hold, for a starving gang, the nodes of one allowed type that free up first enough to hold it
    compactly (its own GPUs count as free); the type is the one where it is predicted to finish first.
    The free GPUs on those nodes are committed on ``index`` now; None when no type can ever hold it."""
    job = req.job
    gpr = job.gpus_per_replica
    replicas = min(req.replicas)
    need = replicas * gpr
    ends: dict[str, list[tuple[float, int]]] = {}  # node -> (predicted end, GPUs) of what runs there
    holders = list(reserved.values()) + [
        d.allocation
        for d in decisions.values()
        if d.allocation is not None and d.allocation.job not in reserved
    ]
    if reservation.prefetch is not None:
        reservation.prefetch(
            [
                (by_name[a.job], a.gpu_type, a.total_gpus)
                for a in holders
                if a.job in by_name and a.job != job.name
            ]
        )
    for a in holders:
        if a.job == job.name:
            end = reservation.now  # its own GPUs are free for the move
        else:
            other = by_name.get(a.job)
            run = math.inf if other is None else reservation.runtime_s(other, a.gpu_type, a.total_gpus)
            end = reservation.now + run
        for node_name, r in a.replicas_per_node:
            ends.setdefault(node_name, []).append((end, r * a.gpus_per_replica))
    best: tuple[float, float, str, tuple[str, ...]] | None = None
    for t in types_:
        run = reservation.runtime_s(job, t, need)
        if not math.isfinite(run):
            continue
        per_node_cap = index.largest_node(t)
        k = -(-replicas // max(1, per_node_cap // max(1, gpr)))  # nodes a compact gang spans
        want = min(need, (per_node_cap // max(1, gpr)) * gpr)  # GPUs it needs on each of them
        when: list[tuple[float, str]] = []
        for node_name, node in index.nodes.items():
            if node.gpu_type != t or node.capacity_for_jobs < want:
                continue
            free = index.free_of(node_name)
            at = reservation.now
            for end, g in sorted(ends.get(node_name, ())):
                if free >= want:
                    break
                free += g
                at = end
            if free >= want:
                when.append((at, node_name))
        if len(when) < k:
            continue
        when.sort()
        shadow = when[k - 1][0]
        if not math.isfinite(shadow):
            continue
        cand = (shadow + run, shadow, t, tuple(n for _, n in when[:k]))
        if best is None or cand[:3] < best[:3]:
            best = cand
    if best is None:
        return None
    _, shadow, t, nodes = best
    return _rehold(index, _Hold(job.name, t, shadow, nodes, f"hold for {job.name}", None))


#: ``greedy_allocate``'s memo of "short of GPUs": (replicas, GPUs per replica, types) -> (index
#: version, answer)
_ShortMemo = dict[tuple[tuple[int, ...], int, tuple[str, ...]], tuple[int, bool]]


def _settle_running(
    index: FreeIndex, snapshot: ClusterSnapshot, jobs: Sequence[Job]
) -> tuple[dict[str, Decision], dict[str, Allocation]]:
    """Decide finished and non-preemptible jobs up front (finished ones release their GPUs on
    ``index``); returns those decisions and the running preemptible jobs' allocations."""
    decisions: dict[str, Decision] = {}
    reserved: dict[str, Allocation] = {}
    for j in jobs:
        cur = snapshot.allocations.get(j.name)
        if not j.total_work - j.progress > 0:  # remaining_work <= 0, without the property call
            if cur is not None:
                index.release(cur)
            decisions[j.name] = Decision(j.name, None, "complete: all work done")
        elif cur is None:
            continue
        elif not j.preemptible:
            decisions[j.name] = Decision(j.name, cur, "non-preemptible: keeps its GPUs")
        else:
            reserved[j.name] = cur
    return decisions, reserved


def _victims_by_type(
    pending_victims: Mapping[str, Allocation], rank_of: Mapping[str, float]
) -> dict[str, list[tuple[float, str]]]:
    """Per GPU type, running jobs least urgent first: a preemption attempt stops at the first one
    that may not be evicted, so a saturated cluster costs O(1) per waiting job."""
    victims_by_type: dict[str, list[tuple[float, str]]] = {}
    for v, a in pending_victims.items():
        victims_by_type.setdefault(a.gpu_type, []).append((-rank_of.get(v, float("inf")), v))
    for lst in victims_by_type.values():
        lst.sort()
    return victims_by_type


def _keeps_current(req: Request, cur: Allocation, types_: Sequence[str]) -> bool:
    """Whether a running job's allocation is one of the options its request allows."""
    return (
        req.keep_current
        and cur.gpu_type in types_
        and cur.replicas in req.replicas
        and cur.gpus_per_replica == req.job.gpus_per_replica
    )


def _place_or_keep(
    index: FreeIndex,
    req: Request,
    cur: Allocation | None,
    types_: tuple[str, ...],
    reserved: dict[str, Allocation],
    short_memo: _ShortMemo,
) -> Allocation | Unschedulable:
    """Without preempting: resize a running job in place, else place the gang anew, else keep what runs
    when it still fits. A running job's GPUs are released on ``index`` and it leaves ``reserved``."""
    job = req.job
    res: Allocation | Unschedulable | None = None
    if cur is not None:
        res = _resize_in_place(index, req, cur, types_)
        index.release(cur)
        del reserved[job.name]
    if res is None:
        # many waiting jobs share a shape: ask once per shape until the free GPUs change
        shape = (req.replicas, job.gpus_per_replica, types_)
        seen = short_memo.get(shape)
        if seen is None or seen[0] != index.version:
            seen = (index.version, index.short_of_gpus(req.replicas, job.gpus_per_replica, types_))
            short_memo[shape] = seen
        # when short of GPUs, ``_SHORT_OF_GPUS`` is what ``try_place`` would conclude
        res = _SHORT_OF_GPUS if seen[1] else try_place(index, req, types_)
    if not isinstance(res, Allocation) and cur is not None and index.fits(cur):
        res = cur  # the change failed: keep what runs
    return res


def _waiting_decision(
    req: Request, res: Unschedulable, ahead: int, preempted_by: Mapping[str, str]
) -> Decision:
    """The decision of a job that gets no GPUs this round, saying where it stands in the queue."""
    name = req.job.name
    parts = [f"{ahead} job{'' if ahead == 1 else 's'} ahead in the queue"]
    if req.note:
        parts.append(req.note)
    if name in preempted_by:
        parts.append(f"preempted by job {preempted_by[name]}")
    if "free but" in res.reason or res is _EVICTION_DOES_NOT_PAY or res is _LEASED:
        parts.append(res.reason)
    return Decision(name, None, "; ".join(parts), unresolvable=not res.resolvable)


def _gpus_of(names: Sequence[str], reserved: Mapping[str, Allocation]) -> int:
    return sum(reserved[v].total_gpus for v in names)


def _victim_set(
    index: FreeIndex,
    req: Request,
    gpu_type: str,
    order: Sequence[str],
    reserved: Mapping[str, Allocation],
    rank_of: Mapping[str, float],
) -> tuple[Allocation, list[str]] | None:
    """Release ``order``'s jobs one by one until ``req`` fits on ``gpu_type``, then put back, most urgent
    first, those not needed: the placement and the evictions it needs (None: it never fits). ``index``
    is left as it was."""
    released: list[str] = []
    placed: Allocation | None = None
    for v in order:
        index.release(reserved[v])
        released.append(v)
        res = try_place(index, req, [gpu_type])
        if isinstance(res, Allocation):
            placed = res
            break
    if placed is None:
        for v in released:
            index.commit(reserved[v])
        return None
    index.commit(placed)
    put_back: list[str] = []
    needed: list[str] = []
    for v in sorted(released, key=lambda v: (rank_of[v], v)):
        if index.fits(reserved[v]):
            index.commit(reserved[v])
            put_back.append(v)
        else:
            needed.append(v)
    for v in put_back:
        index.release(reserved[v])
    index.release(placed)
    for v in released:
        index.commit(reserved[v])
    return placed, needed


def preempt_for(
    index: FreeIndex,
    req: Request,
    types_: Sequence[str],
    reserved: dict[str, Allocation],
    pending_victims: dict[str, Allocation],
    victims_by_type: Mapping[str, Sequence[tuple[float, str]]],
    margin: float,
    preempted_by: dict[str, str],
    evict_pays: EvictPays | None = None,
    leased: Collection[str] = frozenset(),
    served: Mapping[str, float] | None = None,
) -> Allocation | Unschedulable:
    """Evict running jobs ranked behind ``req`` until it fits; undo evictions not needed. With
    ``evict_pays``, the evictions needed on a type are made only when it approves them. A job in
    ``leased`` is not evicted, nor is any job ranked ahead of it on its type (``greedy_allocate``).

    Without ``served``, the evictions are made on the first of ``types_`` where they make room, least
    urgent first. With ``served`` (each job's attained service, LAS's measure), every type is tried: on
    each, the fewer GPUs of two victim sets, least urgent first and smallest jobs first (both only jobs
    ranked behind ``req``); of the types, the one whose least-served victim has been served most, ties
    to the earlier type of ``types_``. Under LAS that keeps its own rule (the most served job goes)
    across GPU types, also between jobs of one queue (on one type, equal ranks still go by name): a
    newcomer that prefers H100s evicts a 32-GPU job that has held the V100s for a day rather than an
    8-GPU gang just restarted on the H100s.
    """
    gpr = req.job.gpus_per_replica
    need_min = min(req.replicas) * gpr
    threshold = req.rank + margin
    rank_of: dict[str, float] = {}
    declined = False
    shielded = False
    chosen: tuple[Allocation, list[str]] | None = None
    chosen_least = -math.inf
    for t in types_:
        victims: list[str] = []
        for neg_rank, v in victims_by_type.get(t, ()):
            if -neg_rank <= threshold:
                break
            if v in leased:
                shielded = True
                break
            if v in pending_victims:
                victims.append(v)
                rank_of[v] = -neg_rank
        if not victims:
            continue
        free_before = index.type_free(t)
        if free_before + sum(reserved[v].total_gpus for v in victims) < need_min:
            continue
        got = _victim_set(index, req, t, victims, reserved, rank_of)
        if got is not None and served is not None:
            # the smallest jobs first may make room with fewer GPUs evicted (a 1-GPU job evicting a
            # 1-GPU job rather than the lowest-ranked 8-GPU gang; a gang clearing a server that holds
            # one small job rather than evicting a gang from another)
            by_size = sorted(victims, key=lambda v: (reserved[v].total_gpus, -rank_of[v], v))
            alt = _victim_set(index, req, t, by_size, reserved, rank_of)
            if alt is not None and _gpus_of(alt[1], reserved) < _gpus_of(got[1], reserved):
                got = alt
        if got is None:
            continue
        placed, needed = got
        if evict_pays is not None and needed and not evict_pays(req.job, t, needed, free_before):
            declined = True
            continue
        # with ``served``: the type whose least-served victim has been served most (ties: the job's own
        # type order); without: the first type where the evictions make room
        least = min((served.get(v, 0.0) for v in needed), default=math.inf) if served is not None else 0.0
        if chosen is None or least > chosen_least:
            chosen, chosen_least = (placed, needed), least
        if served is None:
            break
    if chosen is not None:
        placed, needed = chosen
        for v in needed:
            index.release(reserved[v])
            del reserved[v]
            del pending_victims[v]
            preempted_by[v] = req.job.name
        return placed
    if declined:
        return _EVICTION_DOES_NOT_PAY
    return _LEASED if shielded else _NO_VICTIMS
