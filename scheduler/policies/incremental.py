"""Incremental greedy rounds: ``greedy_allocate``'s answer at the cost of what changed, for the simulator.

Pure, but stateful: ``GreedyRounds`` keeps the free GPUs (a ``FreeIndex``), the running jobs'
allocations and the waiting jobs sorted by their policy key between rounds, and implements
``scheduler.core.round.IncrementalRound`` for the rank-ordered greedy policies (``las``, ``srsf``,
``fifo``) on clusters of one GPU type with rigid, preemptible jobs (their ``incremental`` method says
None otherwise, and the caller uses ``run_round``).

Why it gives the same allocations as ``greedy_allocate`` (and so as ``run_round``): in such a cluster
every running job asks for exactly what it holds, so walking it keeps it and changes nothing; a waiting
job at rank r that needs g GPUs can only change anything when g <= F (free GPUs now) or, for a
preemptive policy, g <= F + V(r) (V(r): GPUs of running jobs not yet evicted whose rank exceeds r plus
the margin; otherwise ``preempt_for`` gives up on counting alone). Such a waiting job is a no-op, and
so, within one group of jobs of the same shape, is every job ranked after it (V only falls with the
rank), until something is placed or evicted. So a round walks, in the policy's order, only the head of
each shape group that passes that test (and the jobs evicted in this round, at their own rank), and runs
on each exactly ``greedy_allocate``'s code (``try_place``, ``preempt_for``) on the same free-GPU index.
A job that passed the test but could not be placed marks its group as failed until the index changes
(every later job of the group would try the same placements with a subset of the same victims). Strict
FIFO walks waiting jobs in order up to the first that cannot start, as ``greedy_allocate`` does.

Consolidation (``consolidate``, LAS's default rule): ``greedy_allocate`` offers each running gang, at
its turn in the walk, a move to a placement of the same size on fewer nodes (``greedy._tighter``). Only a
gang *spread* over more nodes than the fewest that can hold it can have one. So the walk also visits, at
their own rank, the spread running gangs that were not evicted earlier in the round, and runs
``_tighter`` on each with the policy's rule, unless the GPUs free then (plus its own) hold it on no fewer
nodes, where ``_tighter`` finds nothing; the rule prices the move with the job as ``run_round`` would
see it and the round's snapshot, looked up through the caller's ``RoundView`` only when a tighter
placement is free. A move counts as a change of the free-GPU index (groups marked failed are tried
again); a moved gang is never a victim later in the walk (every job walked after it ranks no more
urgent, so may not evict it).
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from scheduler.core.decisions import Unschedulable
from scheduler.core.placement import FreeIndex
from scheduler.core.round import RoundView
from scheduler.core.types import Allocation, ClusterSnapshot, Job, Node
from scheduler.policies.greedy import Request, _tighter, preempt_for, try_place

#: the policy's order key of a job (compared as tuples, ending with the unique job name) and its rank
#: (what preemption compares), from the job, its progress and its attained service; None: the policy
#: never asks for this job (it stays waiting, e.g. SRSF with no positive predicted throughput)
KeyFn = Callable[[Job, float, float], "tuple[tuple[Any, ...], float] | None"]
#: ``steady_until(job, attained, rank, gpus, now)``: a time before which the running job's rank surely
#: stays ``rank`` (for ranks that move in steps, like LAS queues)
SteadyFn = Callable[[Job, float, float, int, float], float]
#: ``greedy_allocate``'s ``consolidate(job, current, tighter)`` rule
ConsolidateFn = Callable[[Job, Allocation, Allocation], bool]


def single_type(nodes: Sequence[Node]) -> str | None:
    """The one GPU type of the schedulable GPU nodes, or None when there are several (or none)."""
    types = {n.gpu_type for n in nodes if n.capacity_for_jobs > 0}
    return next(iter(types)) if len(types) == 1 else None


def simple_jobs(jobs: Sequence[Job], gpu_type: str) -> bool:
    """Whether every job is rigid, preemptible and allowed on ``gpu_type`` (what ``GreedyRounds`` handles)."""
    return all(
        not j.is_elastic
        and j.preemptible
        and j.allows(gpu_type)
        and j.gpus_per_replica > 0
        and j.max_replicas > 0
        and j.total_work - j.progress > 0
        for j in jobs
    )


class GreedyRounds:
    """``scheduler.core.round.IncrementalRound`` for a rank-ordered greedy policy; see the module docstring.

    ``key_of`` gives a waiting or running job's order key and rank; ``batch_keys`` (optional) keys many
    newly arrived jobs at once (policies that ask an oracle batch them); ``preemptive``, ``margin`` and
    ``strict`` are ``greedy_allocate``'s arguments; ``rank_of`` (optional): ``key_of``'s rank alone, cheaper;
    ``consolidate`` (optional): the policy's ``greedy_allocate`` ``consolidate`` rule for a round's
    snapshot (module docstring).
    """

    def __init__(
        self,
        nodes: Sequence[Node],
        gpu_type: str,
        key_of: KeyFn,
        *,
        preemptive: bool,
        margin: float = 0.0,
        strict: bool = False,
        batch_keys: Callable[[Sequence[Job]], Sequence[tuple[tuple[Any, ...], float] | None]] | None = None,
        rank_of: Callable[[Job, float, float], float] | None = None,
        falling_ranks: bool = False,
        steady_until: SteadyFn | None = None,
        consolidate: Callable[[ClusterSnapshot], ConsolidateFn] | None = None,
    ) -> None:
        self._index = FreeIndex(nodes)
        self._consolidate = consolidate
        self._spread: set[str] = set()  # running gangs on more nodes than they need (with ``consolidate``)
        self._type_nodes = tuple(n for n, node in self._index.nodes.items() if node.gpu_type == gpu_type)
        self._type = gpu_type
        self._types = (gpu_type,)
        self._key_of = key_of
        self._rank_of = rank_of or self._rank_from_key
        self._batch_keys = batch_keys
        self._preemptive = preemptive
        self._margin = margin
        self._strict = strict
        self._jobs: dict[str, Job] = {}
        self._alloc: dict[str, Allocation] = {}
        self._gpus: dict[str, int] = {}  # running job -> GPUs it holds
        self._new: list[Job] = []
        # waiting jobs: shape (replicas, GPUs per replica) -> sorted order keys; and per job its key, rank
        self._groups: dict[tuple[int, int], list[tuple[Any, ...]]] = {}
        self._wait: dict[str, tuple[tuple[Any, ...], float]] = {}
        # running jobs' ranks as last computed: an upper bound on the rank now when ranks only fall
        # while running (``falling_ranks``), the exact rank until ``_until`` with ``steady_until``
        self._falling = falling_ranks and preemptive  # only preemption looks at running jobs' ranks
        self._steady = steady_until if preemptive else None
        self._hi: dict[str, float] = {}
        self._until: dict[str, float] = {}
        self._expiry: list[tuple[float, str]] = []  # heap of (until, job)
        self._hi_ranks: list[float] = []  # sorted cached ranks, and their GPUs from index i on
        self._hi_suffix: list[int] = [0]
        self._hi_dirty = False

    # ------------------------------------------------------------------ changes reported by the caller
    def add(self, job: Job) -> None:
        self._jobs[job.name] = job
        self._new.append(job)

    def remove(self, name: str) -> None:
        job = self._jobs.pop(name, None)
        if job is None:
            return
        alloc = self._alloc.pop(name, None)
        if alloc is not None:
            self._index.release(alloc)
            del self._gpus[name]
            self._spread.discard(name)
            self._forget(name)
        self._unwait(job)
        self._new = [j for j in self._new if j.name != name]

    def _rank_from_key(self, job: Job, progress: float, attained: float) -> float:
        keyed = self._key_of(job, progress, attained)
        if keyed is None:
            raise RuntimeError(f"incremental round: running job {job.name!r} has no rank")
        return keyed[1]

    # ---------------------------------------------------------------- cached ranks of running jobs
    def _cache(self, name: str, rank: float, until: float) -> None:
        if self._falling or self._steady is not None:
            if self._hi.get(name) != rank:
                self._hi[name] = rank
                self._hi_dirty = True
            if self._steady is not None:
                self._until[name] = until
                heapq.heappush(self._expiry, (until, name))

    def _forget(self, name: str) -> None:
        if self._hi.pop(name, None) is not None:
            self._hi_dirty = True
        self._until.pop(name, None)

    def _renew(self, now: float, running: Mapping[str, tuple[float, float]]) -> None:
        """Recompute the exact rank of each running job whose cached rank may have changed by ``now``."""
        steady = self._steady
        expiry = self._expiry
        until_of = self._until
        due = []
        while expiry and expiry[0][0] <= now:
            until, name = heapq.heappop(expiry)
            if until_of.get(name) == until:  # else a stale entry (the job stopped or was renewed since)
                due.append(name)
        for name in due:  # after the pops: a renewal may be due again at ``now`` (next round, then)
            job = self._jobs[name]
            progress, attained = running[name]
            rank = self._rank_of(job, progress, attained)
            assert steady is not None
            self._cache(name, rank, steady(job, attained, rank, self._gpus[name], now))

    def _hi_above(self, rank: float) -> int:
        """GPUs of running jobs whose cached rank exceeds ``rank``."""
        if self._hi_dirty:
            gpus = self._gpus
            pairs = sorted([(r, gpus[n]) for n, r in self._hi.items()])
            self._hi_ranks = [r for r, _ in pairs]
            self._hi_suffix = _suffix_sums([g for _, g in pairs])
            self._hi_dirty = False
        return self._hi_suffix[bisect.bisect_right(self._hi_ranks, rank)]

    def _shape(self, job: Job) -> tuple[int, int]:
        return (job.max_replicas, job.gpus_per_replica)

    def _enwait(self, job: Job, keyed: tuple[tuple[Any, ...], float] | None) -> None:
        if keyed is None:
            return  # never asked for: a permanent no-op
        self._wait[job.name] = keyed
        bisect.insort(self._groups.setdefault(self._shape(job), []), keyed[0])

    def _unwait(self, job: Job) -> None:
        keyed = self._wait.pop(job.name, None)
        if keyed is None:
            return
        shape = self._shape(job)
        lst = self._groups[shape]
        del lst[bisect.bisect_left(lst, keyed[0])]
        if not lst:
            del self._groups[shape]  # a round looks at every group: keep only those with jobs

    def _take_arrivals(self) -> None:
        new, self._new = self._new, []
        if not new:
            return
        if self._batch_keys is not None:
            keys = self._batch_keys(new)
        else:
            keys = [self._key_of(j, j.progress, j.attained_service) for j in new]
        for job, keyed in zip(new, keys, strict=True):
            self._enwait(job, keyed)

    # ------------------------------------------------------------------------------------ the round
    def round(
        self, now: float, running: Mapping[str, tuple[float, float]], view: RoundView
    ) -> dict[str, Allocation | None]:
        self._take_arrivals()
        if self._steady is not None:
            self._renew(now, running)  # the cache is exact from here on
        victims = _Victims(self, now, running)
        gangs = _Gangs(self, victims, view) if self._spread else None
        placed, preempted_by = self._walk(victims, gangs)
        return self._settle(victims, placed, preempted_by, gangs.moved if gangs is not None else {})

    def _walk(self, victims: _Victims, gangs: _Gangs | None) -> tuple[dict[str, Allocation], dict[str, str]]:
        """Walk, in the policy's order, the waiting jobs that may change anything (``_next_waiting``),
        the jobs evicted in this round and the running gangs that may consolidate (``gangs``), placing
        each as ``greedy_allocate`` would; returns the jobs placed and those preempted (-> by whom)."""
        index = self._index
        gpu_type = self._type
        preemptive = self._preemptive
        strict = self._strict
        jobs = self._jobs
        wait = self._wait
        placed: dict[str, Allocation] = {}
        preempted_by: dict[str, str] = {}
        evicted: list[tuple[tuple[Any, ...], str]] = []  # heap of (key, name): re-walked at their rank
        ptr = dict.fromkeys(self._groups, 0)
        failed: dict[tuple[int, int], int] = {}
        changes_made = 0
        pos: tuple[Any, ...] | None = None

        while True:
            free = index.type_free(gpu_type)
            best_key, best_shape = self._next_waiting(victims, ptr, failed, changes_made, pos, free)
            from_evicted = False
            while evicted and pos is not None and evicted[0][0] <= pos:
                heapq.heappop(evicted)  # cannot happen (evictions rank after the walk); kept safe
            if evicted and (best_key is None or evicted[0][0] < best_key):
                e_key, e_name = evicted[0]
                e_job = jobs[e_name]
                need = e_job.max_replicas * e_job.gpus_per_replica
                if (
                    strict
                    or need <= free
                    or (preemptive and need <= free + victims.victims_above(victims.run_rank[e_name]))
                ):
                    best_key, best_shape, from_evicted = e_key, None, True
                else:
                    heapq.heappop(evicted)  # a no-op: it stays preempted
                    continue
            if gangs is not None and gangs.before(best_key):
                pos = gangs.key()
                if gangs.visit(index, preempted_by):
                    changes_made += 1
                continue
            if best_key is None:
                break
            pos = best_key
            name = best_key[-1]
            if from_evicted:
                heapq.heappop(evicted)
                rank = victims.run_rank[name]
            else:
                rank = wait[name][1]
            res = self._place(jobs[name], rank, victims, preempted_by, evicted)
            if isinstance(res, Allocation):
                index.commit(res)
                if victims.victims_by_type:
                    victims.reserved[name] = res
                placed[name] = res
                changes_made += 1
            elif strict:
                if res.resolvable:
                    break  # strict FIFO: nobody behind the head starts
            elif best_shape is not None:
                failed[best_shape] = changes_made
        while gangs is not None and gangs.before(None):  # after a strict FIFO stop: running jobs still walk
            gangs.visit(index, preempted_by)
        return placed, preempted_by

    def _next_waiting(
        self,
        victims: _Victims,
        ptr: dict[tuple[int, int], int],
        failed: Mapping[tuple[int, int], int],
        changes_made: int,
        pos: tuple[Any, ...] | None,
        free: int,
    ) -> tuple[tuple[Any, ...] | None, tuple[int, int] | None]:
        """The first waiting job after ``pos`` in the policy's order among the heads of the shape groups
        that pass the module docstring's test (every head, with strict FIFO): its key and shape, or
        (None, None). ``ptr`` (each group's head) moves past ``pos``."""
        strict = self._strict
        preemptive = self._preemptive
        margin = self._margin
        wait = self._wait
        alloc_now = self._alloc
        cached = victims.cached
        best_key: tuple[Any, ...] | None = None
        best_shape: tuple[int, int] | None = None
        for shape, lst in self._groups.items():
            i = ptr[shape]
            if pos is not None and i < len(lst) and lst[i] <= pos:
                i = ptr[shape] = bisect.bisect_right(lst, pos, i)
            if i >= len(lst):
                continue
            key = lst[i]
            if best_key is not None and key >= best_key:
                continue
            if not strict:
                if failed.get(shape) == changes_made:
                    continue
                need = shape[0] * shape[1]
                if need > free:
                    if not preemptive:
                        continue
                    rank = wait[key[-1]][1]
                    if not victims.run_rank and alloc_now:
                        # the cached ranks bound the exact ones from above: a test they fail is failed
                        if cached and need > free + self._hi_above(rank + margin):
                            continue
                        victims.rank_running()
                    if need > free + victims.victims_above(rank):
                        continue
            best_key, best_shape = key, shape
        return best_key, best_shape

    def _place(
        self,
        job: Job,
        rank: float,
        victims: _Victims,
        preempted_by: dict[str, str],
        evicted: list[tuple[tuple[Any, ...], str]],
    ) -> Allocation | Unschedulable:
        """``greedy_allocate``'s placement of one job (not committed): its memoised "short of GPUs"
        answer or a placement attempt, then preemption; jobs it evicts join the ``evicted`` heap."""
        index = self._index
        types_ = self._types
        req = Request(job, types_, (job.max_replicas,), rank=rank)
        gpr = job.gpus_per_replica
        short = index.short_of_gpus(req.replicas, gpr, types_)
        res: Allocation | Unschedulable = _SHORT if short else try_place(index, req, types_)
        if not isinstance(res, Allocation) and self._preemptive:
            if not victims.victims_by_type:
                victims.build()
            before = len(preempted_by)
            res = preempt_for(
                index,
                req,
                types_,
                victims.reserved,
                victims.pending,
                victims.victims_by_type,
                self._margin,
                preempted_by,
            )
            if len(preempted_by) != before:
                for v in list(preempted_by)[before:]:
                    heapq.heappush(evicted, (victims.run_key(v)[0], v))
                victims.refresh()
        return res

    def _settle(
        self,
        victims: _Victims,
        placed: dict[str, Allocation],
        preempted_by: Mapping[str, str],
        moved: Mapping[str, Allocation],
    ) -> dict[str, Allocation | None]:
        """Record the round's placements, evictions and consolidation moves as the state for the next
        round; returns what changed (job -> new allocation, None when preempted)."""
        jobs = self._jobs
        wait = self._wait
        out: dict[str, Allocation | None] = {}
        for name, alloc in moved.items():
            self._hold(name, alloc)
            out[name] = alloc
        for v in preempted_by:
            old = self._alloc.pop(v)
            new = placed.pop(v, None)
            if new is None:
                del self._gpus[v]
                self._spread.discard(v)
                self._forget(v)
                out[v] = None
                # waiting, its progress and attained service stay as now: its key stays this round's
                self._enwait(jobs[v], victims.run_key(v))
            else:
                self._hold(v, new)
                self._cache(v, victims.run_rank[v], -math.inf)
                if new != old:
                    out[v] = new
        for name, alloc in placed.items():
            # its rank when it starts is its waiting rank (nothing it is ranked by moved while it waited)
            self._cache(name, wait[name][1], -math.inf)
            self._unwait(jobs[name])
            self._hold(name, alloc)
            out[name] = alloc
        return out

    def _hold(self, name: str, alloc: Allocation) -> None:
        """Record that running job ``name`` holds ``alloc`` (already taken on the index)."""
        self._alloc[name] = alloc
        self._gpus[name] = alloc.total_gpus
        if self._consolidate is not None and self._is_spread(alloc):
            self._spread.add(name)
        else:
            self._spread.discard(name)

    def _is_spread(self, alloc: Allocation) -> bool:
        """Whether a gang runs on more nodes than the fewest of its type that can hold it (counted by the
        largest node's GPUs, as ``greedy_allocate`` does): no placement of the gang has fewer."""
        per_node = max(1, self._index.largest_node(alloc.gpu_type) // max(1, alloc.gpus_per_replica))
        return alloc.num_nodes > max(1, -(-alloc.replicas // per_node))

    def _fits_on_fewer_nodes(self, alloc: Allocation) -> bool:
        """Whether the gang of running ``alloc`` has a placement on fewer nodes in the GPUs free now plus
        its own (if not, ``greedy._tighter`` finds none: it places only where that placement exists)."""
        index = self._index
        if index.type_free(alloc.gpu_type) == 0:
            return False  # its own GPUs only: its fullest num_nodes - 1 nodes hold fewer replicas
        gpr = alloc.gpus_per_replica
        own = dict(alloc.replicas_per_node)
        slots = [index.free_of(n) // gpr + own.get(n, 0) for n in self._type_nodes]
        return sum(heapq.nlargest(alloc.num_nodes - 1, slots)) >= alloc.replicas


class _Gangs:
    """One round's spread running gangs (``GreedyRounds._is_spread``), in the walk's order, each offered
    ``greedy_allocate``'s consolidation at its turn (``visit``). Reads its ``GreedyRounds``' state."""

    __slots__ = ("_at", "_order", "_rounds", "_rule", "_view", "moved", "victims")

    def __init__(self, rounds: GreedyRounds, victims: _Victims, view: RoundView) -> None:
        self._rounds = rounds
        self.victims = victims
        self._view = view
        self._order = sorted([(victims.run_key(n)[0], n) for n in rounds._spread])
        self._at = 0
        self._rule: ConsolidateFn | None = None
        self.moved: dict[str, Allocation] = {}

    def _pays(self, job: Job, current: Allocation, tighter: Allocation) -> bool:
        """The policy's rule, asked with the job as ``run_round`` would see it (built when first needed)."""
        rule = self._rule
        if rule is None:
            make = self._rounds._consolidate
            assert make is not None  # gangs are only tracked with a rule
            rule = self._rule = make(self._view.snapshot())
        return rule(self._view.job(job.name), current, tighter)

    def before(self, key: tuple[Any, ...] | None) -> bool:
        """Whether the next gang's turn comes before ``key`` (None: the end of the walk)."""
        return self._at < len(self._order) and (key is None or self._order[self._at][0] < key)

    def key(self) -> tuple[Any, ...]:
        """The next gang's order key."""
        return self._order[self._at][0]

    def visit(self, index: FreeIndex, preempted_by: Mapping[str, str]) -> bool:
        """The next gang's turn: move it to fewer nodes as ``greedy_allocate`` would (committed on
        ``index``); whether it moved. A gang evicted earlier in the round is walked as a waiting job."""
        name = self._order[self._at][1]
        self._at += 1
        if name in preempted_by:
            return False
        rounds = self._rounds
        cur = rounds._alloc[name]
        if not rounds._fits_on_fewer_nodes(cur):
            return False  # what ``_tighter`` concludes, without releasing and placing it
        req = Request(rounds._jobs[name], rounds._types, (cur.replicas,), rank=self.victims.run_key(name)[1])
        moved = _tighter(index, req, cur, self._pays)
        if moved is None:
            return False
        index.commit(moved)
        self.moved[name] = moved
        victims = self.victims
        if name in victims.reserved:
            victims.reserved[name] = moved
        if name in victims.pending:
            victims.pending[name] = moved
        return True


class _Victims:
    """One round's running jobs as preemption victims, worked out only when first needed: their exact
    ranks when a preemption test first needs them (a test that the cached ranks already fail needs
    none), the victim order when a preemption is tried. Reads its ``GreedyRounds``' state (same module).
    """

    __slots__ = (
        "_now",
        "_rounds",
        "_running",
        "cached",
        "pending",
        "reserved",
        "run_keys",
        "run_rank",
        "steady",
        "v_ranks",
        "v_suffix",
        "victims_by_type",
    )

    def __init__(self, rounds: GreedyRounds, now: float, running: Mapping[str, tuple[float, float]]) -> None:
        self._rounds = rounds
        self._now = now
        self._running = running
        self.steady = rounds._steady is not None
        self.cached = self.steady or rounds._falling
        self.reserved: dict[str, Allocation] = {}
        self.pending: dict[str, Allocation] = {}
        self.victims_by_type: dict[str, list[tuple[float, str]]] = {}
        self.run_keys: dict[str, tuple[tuple[Any, ...], float]] = {}
        self.run_rank: dict[str, float] = {}
        self.v_ranks: list[float] = []  # ranks of the victims still in place, ascending
        self.v_suffix: list[int] = [0]  # v_suffix[i]: their GPUs from index i on

    def rank_running(self) -> None:
        """The exact rank of every running job (from the cache when it is exact), all pending."""
        rounds = self._rounds
        if self.steady:
            self.run_rank.update(rounds._hi)
        else:
            jobs = rounds._jobs
            rank_of = rounds._rank_of
            for name in rounds._alloc:
                progress, attained = self._running[name]
                self.run_rank[name] = rank = rank_of(jobs[name], progress, attained)
                if self.cached:
                    rounds._cache(name, rank, self._now)
        self.pending.update(rounds._alloc)
        self.refresh()

    def build(self) -> None:
        """``greedy_allocate``'s reserved allocations and victim order, for ``preempt_for``."""
        rounds = self._rounds
        if not self.run_rank:
            self.rank_running()
        self.reserved.update(rounds._alloc)
        self.victims_by_type[rounds._type] = sorted([(-self.run_rank[n], n) for n in rounds._alloc])

    def run_key(self, name: str) -> tuple[tuple[Any, ...], float]:
        """A running job's order key and rank now (memoised for the round)."""
        got = self.run_keys.get(name)
        if got is None:
            rounds = self._rounds
            progress, attained = self._running[name]
            got = rounds._key_of(rounds._jobs[name], progress, attained)
            if got is None:
                raise RuntimeError(f"incremental round: running job {name!r} has no rank")
            self.run_keys[name] = got
        return got

    def refresh(self) -> None:
        """Recompute the pending victims' ranks and GPU suffix sums (after evictions)."""
        gpus = self._rounds._gpus
        run_rank = self.run_rank
        pairs = sorted([(run_rank[v], gpus[v]) for v in self.pending])
        self.v_ranks[:] = [r for r, _ in pairs]
        self.v_suffix[:] = _suffix_sums([g for _, g in pairs])

    def victims_above(self, rank: float) -> int:
        """GPUs of pending victims whose rank exceeds ``rank`` plus the margin."""
        return self.v_suffix[bisect.bisect_right(self.v_ranks, rank + self._rounds._margin)]


def _suffix_sums(values: list[int]) -> list[int]:
    """``out[i] = sum(values[i:])`` for i in 0 .. len(values) (the last is 0)."""
    out = list(itertools.accumulate(reversed(values), initial=0))
    out.reverse()
    return out


_SHORT = Unschedulable("waiting for free GPUs of an allowed type")
