"""Greedy gang allocation: the policies' shared walk over their ranked requests.

Pure. Every policy ranks jobs its own way and then hands an ordered list of ``Request``s to
``greedy_allocate``, which walks them in order and places each gang with the core's ``FreeIndex``
(the same placement the extender uses). Running jobs whose allocation still matches their request keep
it untouched (no migration); preemptive policies may evict running jobs ranked behind the requester
(``preempt_for``). ``try_place`` and ``preempt_for`` are public because the simulator's incremental
rounds (``scheduler.policies.incremental``) run exactly this code on their own free-GPU index.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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


_NO_VICTIMS = Unschedulable("no lower-ranked running jobs to preempt")
#: ``try_place``'s answer when every option fails only for want of free GPUs (see ``short_of_gpus``)
_SHORT_OF_GPUS = Unschedulable("waiting for free GPUs of an allowed type")


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
) -> dict[str, Decision]:
    """Walk ``requests`` in order and place each gang; returns a decision for every job in ``jobs``.

    - finished jobs get no allocation; running non-preemptible jobs keep theirs whatever they asked;
    - a running job whose allocation matches its request keeps it; otherwise it is re-placed (kept as it
      is when the new placement fails and the old one still fits);
    - ``preemptive``: when a job does not fit, running jobs ranked behind it (by more than
      ``preempt_margin``) are evicted, least urgent first, until it fits; evictions that turn out not to
      be needed are undone;
    - ``strict``: once a job cannot start, no job behind it starts (strict FIFO);
    - jobs with no request get ``extra``'s decision, else none (waiting, or preempted when running).
    """
    index = FreeIndex(snapshot.nodes, snapshot.free_by_node())
    decisions, reserved = _settle_running(index, snapshot, jobs)
    rank_of = {r.job.name: r.rank for r in requests}
    for name in [n for n in reserved if n not in rank_of]:
        index.release(reserved.pop(name))  # no request: it stops this round, its GPUs are free now
    pending_victims = dict(reserved)  # running, preemptible, not yet walked
    victims_by_type = _victims_by_type(pending_victims, rank_of)
    preempted_by: dict[str, str] = {}
    short_memo: _ShortMemo = {}
    blocked_by: str | None = None
    ahead = 0
    for req in requests:
        job = req.job
        name = job.name
        if name in decisions:  # finished or pinned
            continue
        allowed = job.allowed_gpu_types
        types_ = tuple(t for t in req.gpu_types if t in allowed) if allowed else tuple(req.gpu_types)
        pending_victims.pop(name, None)
        cur = reserved.get(name)
        if cur is not None and _keeps_current(req, cur, types_):
            decisions[name] = Decision(name, cur, req.note)
            ahead += 1
            continue
        if blocked_by is not None and cur is None:
            decisions[name] = Decision(
                name, None, f"blocked behind job {blocked_by} at the head of the queue"
            )
            ahead += 1
            continue
        res = _place_or_keep(index, req, cur, types_, reserved, short_memo)
        if not isinstance(res, Allocation) and preemptive and types_:
            res = preempt_for(
                index, req, types_, reserved, pending_victims, victims_by_type, preempt_margin, preempted_by
            )
        if isinstance(res, Allocation):
            index.commit(res)
            reserved[name] = res
            decisions[name] = Decision(name, res, req.note)
        else:
            decisions[name] = _waiting_decision(req, res, ahead, preempted_by)
            if strict and blocked_by is None and res.resolvable:
                blocked_by = name
            if not res.resolvable:
                continue  # a job that can never run is not "ahead" of anyone
        ahead += 1
    for j in jobs:
        if j.name not in decisions:
            dec = (extra or {}).get(j.name)
            decisions[j.name] = (
                dec if dec is not None else Decision(j.name, None, "not selected by the policy")
            )
    return decisions


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
    if "free but" in res.reason:
        parts.append(res.reason)
    return Decision(name, None, "; ".join(parts), unresolvable=not res.resolvable)


def preempt_for(
    index: FreeIndex,
    req: Request,
    types_: Sequence[str],
    reserved: dict[str, Allocation],
    pending_victims: dict[str, Allocation],
    victims_by_type: Mapping[str, Sequence[tuple[float, str]]],
    margin: float,
    preempted_by: dict[str, str],
) -> Allocation | Unschedulable:
    """Evict running jobs ranked behind ``req`` until it fits; undo evictions not needed."""
    gpr = req.job.gpus_per_replica
    need_min = min(req.replicas) * gpr
    threshold = req.rank + margin
    rank_of: dict[str, float] = {}
    for t in types_:
        victims: list[str] = []
        for neg_rank, v in victims_by_type.get(t, ()):
            if -neg_rank <= threshold:
                break
            if v in pending_victims:
                victims.append(v)
                rank_of[v] = -neg_rank
        if not victims:
            continue
        if index.type_free(t) + sum(reserved[v].total_gpus for v in victims) < need_min:
            continue
        released: list[str] = []
        placed: Allocation | None = None
        for v in victims:
            index.release(reserved[v])
            released.append(v)
            res = try_place(index, req, [t])
            if isinstance(res, Allocation):
                placed = res
                break
        if placed is None:
            for v in released:
                index.commit(reserved[v])
            continue
        index.commit(placed)
        # put back, most urgent first, the evictions that were not needed
        for v in sorted(released, key=lambda v: (rank_of[v], v)):
            if index.fits(reserved[v]):
                index.commit(reserved[v])
            else:
                del reserved[v]
                del pending_victims[v]
                preempted_by[v] = req.job.name
        index.release(placed)  # the caller commits it
        return placed
    return _NO_VICTIMS
