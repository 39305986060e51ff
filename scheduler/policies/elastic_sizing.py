"""Elastic sizing for the ordering policies: how many GPUs each elastic job gets, in the policy's order.

Pure. ``size_elastic`` takes the ``Request``s an ordering policy built for one round (its rank order,
each job's GPU types in the order to try them, its ranks) and rewrites those of elastic jobs so that an
elastic job's replica count comes from the throughput model instead of "as many as fit, largest first"
(which runs every elastic job at a fixed size: the first to arrive on an idle cluster takes twice its
traced GPUs, later ones start small and never grow). Rigid jobs' requests are returned unchanged, and
when no job of the round is elastic so are all (rigid rounds are untouched: the benchmark's rigid
scenarios give the same reports to the last digit). Only ``heterogeneity: aware`` policies call it: the
agnostic variants, the same-run baseline that counts free GPUs only, keep "largest size that fits".

**GPU types.** An elastic job's types are ranked (``type_planner.aware_orders``) by its predicted speed at
its minimum size, and, running, at the size it has (``planning_table``), where sizing admits it and where
it mostly runs under load, not at its largest size, where it may scale poorly: ranked there, a job 3%
faster on 2 GPUs than on 1 was sent to T4s by its speed on 16 and ran on one T4 for 458 h (H100s were
free). ``sizing_table`` asks the oracle about every size of every elastic job in the round's one call.

How the sizes are made, per round, counting GPUs per type (node boundaries are left to the walk):

1. **Admission in the policy's order, at the minimum size.** Jobs are walked in request order. A
   running job keeps its GPUs (a running job its policy moves to another type, ``TypePlanner``'s priced
   move, frees them and is admitted there when it fits). A waiting job takes its minimum replicas on
   the first of its types with room; with none and a preemptive policy, it takes replicas from running
   elastic jobs on one of its types that rank behind it by more than the margin (least urgent first,
   never below their minimum), and when that is not enough it is planned where evicting jobs ranked
   behind it makes room (``greedy_allocate``'s ``preempt_for`` makes, or declines, those evictions).
   So the policy's order decides who gets GPUs first, as without sizing, but each admitted elastic job
   holds only its minimum and more jobs run.
2. **Spare GPUs by marginal gain.** The GPUs of each type that no admitted job holds go, one replica at a
   time, to the admitted elastic job whose normalised throughput (over its speed at its minimum size on
   its best allowed type) rises most per GPU (``elastic_shares.grow_by_marginal_gain``, the ``elastic``
   policy's step): diminishing returns spread them over jobs. A running job starts from the size it has.
3. **Resizes priced.** A running job grows only when the predicted gain over the horizon (``horizon_s``
   or, if sooner, its predicted finish at the new size) beats the work its restart loses (``resize_pays``:
   restart seconds at the new speed, times ``1 + restarts``), and the new size is predicted at least
   ``MIN_RESIZE_SPEEDUP`` (1.25x, as for a move) faster; a job its growth does not pay for keeps its
   size, and its GPUs go to the others. A running job shrinks only to admit a job its policy ranks
   ahead of it (the policy's own preemption, made partial), never to grow another job.
4. **The walk.** ``greedy_allocate`` then walks the rewritten requests: shrinking jobs first (in place,
   they free the GPUs the admitted ones were planned on), then everyone in the policy's order (a waiting
   elastic job asks for its planned size and every smaller size down to its minimum, on its planned type
   first and then on its other types: the plan counts GPUs, not nodes, and a job whose planned GPUs hold
   no whole replica starts elsewhere rather than wait beside free GPUs), then growing jobs last (in
   place, from the planned size down to what they hold, so growth never evicts anyone nor takes GPUs a
   starting job was planned on; one evicted in the walk by a job ranked ahead asks for every size down to
   its minimum, so it restarts at once on the GPUs left free when any size fits there).

Follows Qiao et al., "Pollux: Co-adaptive Cluster Scheduling for Goodput-Optimized Deep Learning" (OSDI
2021) for the sizes, as the ``elastic`` policy does (throughput over the job's own baseline, summed;
greedy marginal gain instead of Pollux's genetic search; the oracle's throughput stands in for goodput,
with no statistical-efficiency model). Differs from Pollux and from the ``elastic`` policy: who runs is
the ordering policy's decision (LAS, SRSF...), not the sum of speed-ups, so every admitted job first gets
its minimum in the policy's order and only the spare GPUs are shared by marginal gain; jobs ranked ahead
may shrink running jobs ranked behind (Pollux and ``elastic`` shrink only when the sum of speed-ups
rises); and resizes are priced by the restart they cost over a horizon, as type moves are
(``type_planner.move_pays``), rather than by Pollux's re-allocation penalty. Optimus (Peng et al.,
EuroSys 2018) hands out workers by the same marginal-gain argument (the largest drop of remaining time per
added worker), also without keeping an ordering policy's order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from scheduler.core.protocols import ThroughputOracle
from scheduler.core.types import Allocation, ClusterSnapshot, Job
from scheduler.policies.base import TypeInfo, allowed_types
from scheduler.policies.elastic_shares import PredictedThroughputs, Share, grow_by_marginal_gain, size_bounds
from scheduler.policies.greedy import Request
from scheduler.policies.type_planner import DEFAULT_HORIZON_S, MIN_SPEEDUP, MOVE_MARGIN

#: a running elastic job grows only when its new size is predicted at least this much faster, the bar a
#: move to another GPU type must clear (``type_planner.MIN_SPEEDUP``): every GPU freed by a completion
#: does not restart a big job for a few percent, nor does a prediction error of that size. Against 1.1x
#: on the benchmark's elastic scenario (seeds 0-1, loads 0.8-3): resizes per job 0.07-0.67 instead of
#: 0.11-0.78, average JCT -10% .. +3% (docs/decisions/0015-elastic-sizing-in-ordering-policies.md)
MIN_RESIZE_SPEEDUP = MIN_SPEEDUP


def resize_pays(
    job: Job, current_speed: float, new_speed: float, *, restart_cost_s: float, horizon_s: float
) -> bool:
    """Whether resizing a running job from ``current_speed`` to ``new_speed`` (work units/s, same GPU
    type) gains more work over the horizon than its restart loses.

    The horizon is ``horizon_s`` or, if sooner, when the job would finish at the new speed; the cost is
    ``restart_cost_s`` at the new speed (a resize checkpoints first: no progress is lost), times
    ``1 + job.restarts`` as for a move. Never a resize under ``MIN_RESIZE_SPEEDUP``.
    """
    if new_speed <= MIN_RESIZE_SPEEDUP * current_speed or current_speed <= 0:
        return False
    horizon = min(horizon_s, job.remaining_work / new_speed)
    gain = (new_speed - current_speed) * horizon
    return gain > MOVE_MARGIN * (1 + max(0, job.restarts)) * new_speed * restart_cost_s


def sizing_counts(job: Job) -> Sequence[int]:
    """Replica counts a round's table asks about: every size of an elastic job (sizing chooses among
    them), a rigid job's size (``elastic_shares.size_bounds``, what the policies ask without sizing)."""
    if job.is_elastic:
        return range(job.min_replicas, job.max_replicas + 1)
    return size_bounds(job)


def sizing_table(
    oracle: ThroughputOracle, jobs: Sequence[Job], infos: Mapping[str, TypeInfo]
) -> PredictedThroughputs | None:
    """One oracle call for a round with elastic jobs: every live job at ``sizing_counts``; None when no
    live job is elastic (the policy's rigid path is then left as it was)."""
    live = [j for j in jobs if j.remaining_work > 0]
    if not any(j.is_elastic for j in live):
        return None
    return PredictedThroughputs(oracle, live, infos, sizing_counts)


def planning_table(
    snapshot: ClusterSnapshot, jobs: Sequence[Job], table: PredictedThroughputs | None
) -> PredictedThroughputs | None:
    """What ``type_planner.aware_orders`` should choose GPU types from when some job is elastic (``table``
    has every size, ``sizing_counts``): an elastic job at its minimum size (and, running, at the size it
    has), where sizing admits it and where it mostly runs under load, instead of at its largest size,
    where it may scale poorly (a job 3% faster on 2 GPUs than on 1 was ranked by its speed on 16 and
    sent to T4s); rigid jobs at their size. None when ``table`` is None (no elastic job)."""
    if table is None:
        return None
    counts: dict[str, tuple[int, ...]] = {}
    for j in jobs:
        if not j.is_elastic:
            counts[j.name] = (j.max_replicas,)
            continue
        cur = snapshot.allocations.get(j.name)
        counts[j.name] = (j.min_replicas,) if cur is None else (j.min_replicas, cur.replicas)
    return table.only(counts)


def _min_replicas(job: Job) -> int:
    return job.min_replicas if job.is_elastic else job.max_replicas


def _types_of(req: Request, infos: Mapping[str, TypeInfo]) -> tuple[str, ...]:
    """The request's types the job allows and where one of its replicas fits on a node, in order (what
    ``greedy_allocate`` tries). The plan counts GPUs per type, not per node: a type whose nodes are all
    smaller than a replica has GPUs the walk can never place it on, and a job planned there waits while
    another of its types has room (2 x 2-GPU replicas planned on two 1-GPU A100 nodes, 2 K80s free)."""
    allowed = req.job.allowed_gpu_types
    gpr = req.job.gpus_per_replica
    return tuple(
        t
        for t in req.gpu_types
        if (not allowed or t in allowed) and (t not in infos or infos[t].node_gpus >= gpr)
    )


class _Plan:
    """Step 1's state: GPUs free per type and each walked job's planned share (mutable, one per round)."""

    def __init__(self, snapshot: ClusterSnapshot, infos: Mapping[str, TypeInfo], requests: Sequence[Request]):
        self.alloc: dict[str, Allocation] = {}  # running jobs that hold GPUs in the plan, by name
        self.free = {t: info.capacity for t, info in infos.items()}
        asked = {r.job.name: r.job for r in requests}
        for name, a in snapshot.allocations.items():
            job = asked.get(name)
            if job is not None and job.remaining_work <= 0:
                continue  # finished: its GPUs are free this round
            if a.gpu_type in self.free:
                self.free[a.gpu_type] -= a.total_gpus
            if job is not None:
                self.alloc[name] = a
        self.shares: dict[str, Share] = {}
        self.rank: dict[str, float] = {r.job.name: r.rank for r in requests}
        self.walked: set[str] = set()
        self.jobs = asked
        self.blocked = False

    def held(self, name: str) -> int:
        """Replicas a running job holds in the plan so far (less than it runs when shrunk)."""
        share = self.shares.get(name)
        return share.replicas if share is not None else self.alloc[name].replicas

    def donors(self, gpu_type: str, threshold: float) -> list[tuple[float, str]]:
        """Running preemptible jobs on ``gpu_type`` not walked yet, ranked behind ``threshold``, least
        urgent first."""
        out = [
            (-self.rank.get(name, float("inf")), name)
            for name, a in self.alloc.items()
            if a.gpu_type == gpu_type
            and name not in self.walked
            and self.jobs[name].preemptible
            and self.rank.get(name, float("inf")) > threshold
        ]
        out.sort()
        return out

    def shrink_for(self, need: int, gpu_type: str, threshold: float) -> bool:
        """Take replicas from elastic donors (least urgent first, down to their minimum) until ``need``
        GPUs are free on ``gpu_type``; commits only when that suffices."""
        free = self.free.get(gpu_type, 0)
        cuts: dict[str, int] = {}
        for _, name in self.donors(gpu_type, threshold):
            if free >= need:
                break
            job, a = self.jobs[name], self.alloc[name]
            if not job.is_elastic or a.gpus_per_replica != job.gpus_per_replica:
                continue
            spare = self.held(name) - job.min_replicas
            if spare <= 0:
                continue
            k = min(spare, -(-(need - free) // job.gpus_per_replica))
            cuts[name] = k
            free += k * job.gpus_per_replica
        if free < need:
            return False
        for name, k in cuts.items():
            self.shares[name] = Share(gpu_type, self.held(name) - k)
        self.free[gpu_type] = free
        return True

    def evict_for(self, need: int, gpu_type: str, threshold: float) -> bool:
        """Plan the evictions of donors (least urgent first) that free ``need`` GPUs on ``gpu_type``."""
        donors = self.donors(gpu_type, threshold)
        free = self.free.get(gpu_type, 0)
        victims: list[str] = []
        for _, name in donors:
            if free >= need:
                break
            victims.append(name)
            free += self.held(name) * self.alloc[name].gpus_per_replica
        if free < need:
            return False
        for name in victims:
            del self.alloc[name]
            self.shares.pop(name, None)
        self.free[gpu_type] = free
        return True

    def admit(
        self, req: Request, types_: Sequence[str], preemptive: bool, margin: float, strict: bool
    ) -> None:
        """Step 1 for one request (module docstring)."""
        job = req.job
        name = job.name
        self.walked.add(name)
        if job.remaining_work <= 0 or (self.blocked and name not in self.alloc):
            return
        cur = self.alloc.get(name)
        if cur is not None:
            share = self.shares.get(name)
            if cur.gpu_type in types_ or not job.preemptible:
                self.shares.setdefault(name, Share(cur.gpu_type, cur.replicas))
                return
            if share is not None:  # shrunk earlier in the walk: it stays where it is
                return
            self.free[cur.gpu_type] = self.free.get(cur.gpu_type, 0) + cur.total_gpus  # a priced move
        lo = min(req.replicas) if req.replicas else _min_replicas(job)
        need = lo * job.gpus_per_replica
        fits = [t for t in types_ if self.free.get(t, 0) >= need]
        if not fits and preemptive and cur is None:
            threshold = req.rank + margin
            # the first type where shrinking (else evicting) makes room: the search stops there, so
            # running jobs on the other types keep their GPUs
            t_room = next((t for t in types_ if self.shrink_for(need, t, threshold)), None)
            if t_room is None:
                t_room = next((t for t in types_ if self.evict_for(need, t, threshold)), None)
            fits = [] if t_room is None else [t_room]
        if fits:
            t = fits[0]
            self.free[t] -= need
            self.shares[name] = Share(t, lo)
            if cur is not None:
                del self.alloc[name]
        elif cur is not None:  # the move finds no room: it keeps its GPUs
            self.free[cur.gpu_type] -= cur.total_gpus
            self.shares[name] = Share(cur.gpu_type, cur.replicas)
        elif strict and types_:
            self.blocked = True  # strict FIFO: no waiting job behind it starts


def size_elastic(
    snapshot: ClusterSnapshot,
    requests: Sequence[Request],
    oracle: ThroughputOracle,
    infos: Mapping[str, TypeInfo],
    *,
    preemptive: bool,
    margin: float = 0.0,
    strict: bool = False,
    horizon_s: float = DEFAULT_HORIZON_S,
    table: PredictedThroughputs | None = None,
) -> list[Request]:
    """``requests`` (an ordering policy's, in its order) with elastic jobs sized (module docstring).

    ``preemptive``, ``margin`` and ``strict`` are the policy's ``greedy_allocate`` arguments: who may
    shrink whom, and (strict FIFO) that no waiting job behind one that cannot start is admitted, nor does
    any job grow while it waits (the GPUs it waits for would go to growth: it would never start).
    ``table``: the round's ``sizing_table`` (asked otherwise: one more oracle call).
    Returns ``requests`` unchanged (a copy) when no job to size is elastic.
    """
    elastic = [r.job for r in requests if r.job.is_elastic and r.job.remaining_work > 0]
    if not elastic:
        return list(requests)
    plan = _Plan(snapshot, infos, requests)
    types_of = {r.job.name: _types_of(r, infos) for r in requests}
    for req in requests:
        plan.admit(req, types_of[req.job.name], preemptive, margin, strict)
    if table is None:
        table = PredictedThroughputs(oracle, elastic, infos, sizing_counts)
    norm: dict[str, float] = {}
    for j in elastic:
        _, best = table.best_type(j, j.min_replicas, allowed_types(j, infos))
        if best > 0:
            norm[j.name] = best
    if not plan.blocked:  # strict FIFO waiting for GPUs for its head: growth would starve the head
        _grow(snapshot, plan, elastic, table, norm, horizon_s)
    return _rewrite(snapshot, requests, plan.shares)


def _grow(
    snapshot: ClusterSnapshot,
    plan: _Plan,
    elastic: Sequence[Job],
    table: PredictedThroughputs,
    norm: Mapping[str, float],
    horizon_s: float,
) -> None:
    """Step 2 and 3: hand the spare GPUs out by marginal gain; a running job's growth must pay."""
    current = {
        j.name: a
        for j in elastic
        if (a := snapshot.allocations.get(j.name)) is not None
        and j.name in plan.alloc
        and j.gpus_per_replica == a.gpus_per_replica
    }
    frozen: set[str] = {
        j.name
        for j in elastic
        if not j.preemptible
        or (j.name in current and plan.shares.get(j.name, Share(None, 0)).replicas < current[j.name].replicas)
    }
    growers = [j for j in elastic if j.name in plan.shares and j.name in norm]
    for _ in range(len(growers) + 1):
        shares = {n: Share(s.gpu_type, s.replicas) for n, s in plan.shares.items()}
        free = dict(plan.free)
        grow_by_marginal_gain(
            [j for j in growers if j.name not in frozen],
            shares,
            free,
            table,
            norm,
            may_start=lambda j: False,
            may_grow=lambda j, t, r_from, r_to: True,
            types_of=lambda j: (),
        )
        declined = [
            j.name
            for j in growers
            if j.name in current
            and j.name not in frozen
            and shares[j.name].replicas > current[j.name].replicas
            and not resize_pays(
                j,
                table.get(j.name, current[j.name].gpu_type, current[j.name].replicas),
                table.get(j.name, current[j.name].gpu_type, shares[j.name].replicas),
                restart_cost_s=snapshot.restart_cost_s,
                horizon_s=horizon_s,
            )
        ]
        if not declined:
            plan.shares.update(shares)
            plan.free = free
            return
        frozen.update(declined)  # they keep their size; their GPUs go to the others


def _rewrite(
    snapshot: ClusterSnapshot,
    requests: Sequence[Request],
    shares: Mapping[str, Share],
) -> list[Request]:
    """Step 4: the requests in walk order, elastic ones asking for their planned sizes."""
    shrinking: list[Request] = []
    walk: list[Request] = []
    growing: list[Request] = []
    for req in requests:
        job = req.job
        s = shares.get(job.name)
        if not job.is_elastic or s is None or s.gpu_type is None or s.replicas <= 0:
            walk.append(req)
            continue
        cur = snapshot.allocations.get(job.name)
        lo = job.min_replicas
        if cur is not None and cur.gpu_type == s.gpu_type and cur.gpus_per_replica == job.gpus_per_replica:
            if s.replicas < cur.replicas:
                shrinking.append(
                    req._replace(gpu_types=(s.gpu_type,), replicas=(s.replicas,), keep_current=False)
                )
            elif s.replicas > cur.replicas:
                # down to its minimum: in place it stops at the size it holds (``_resize_in_place``
                # keeps it when it cannot grow), but a job ranked ahead may still evict it in the walk,
                # and then it restarts at once at the largest size the free GPUs hold
                sizes = tuple(range(s.replicas, lo - 1, -1))
                growing.append(req._replace(gpu_types=(s.gpu_type,), replicas=sizes, keep_current=False))
            else:
                walk.append(req)
            continue
        # its planned type first, then its other types: the plan counts GPUs per type, so the planned
        # GPUs may be scattered over nodes that hold no whole replica (2 V100s free, one on each of two
        # nodes, for a 2-GPU replica) while another type has room; it then starts there, not waits
        others = tuple(t for t in req.gpu_types if t != s.gpu_type)
        sizes = tuple(range(s.replicas, lo - 1, -1))
        walk.append(req._replace(gpu_types=(s.gpu_type, *others), replicas=sizes))
    return [*shrinking, *walk, *growing]
