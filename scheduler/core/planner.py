"""The planner: turns what runs now and what the policy wants into actions, and charges their cost.

Pure. Transitions per job (current allocation -> desired allocation):

=====================  ==================  ===========================================================
current                desired             action
=====================  ==================  ===========================================================
any                    (remaining work 0)  COMPLETE
none                   none                (none: the job waits)
none                   A                   START (costs ``restart_cost_s`` if the job ran before)
A                      A (identical)       KEEP
A                      none                PREEMPT (loses progress since the last checkpoint)
A (elastic)            B, same type        RESIZE (checkpoint first: no lost work; ``resize_cost_s``)
A                      B, moved              RESIZE as a restart (migration): lost work + ``restart_cost_s``
=====================  ==================  ===========================================================

A running non-preemptible job is never preempted or moved: its decision is forced to KEEP, unless what
it runs no longer fits its own spec (``outgrown``: its user changed the allowed GPU types, the replica
bounds or the GPUs per replica while it ran), which its user asked to change. A running
job changed less than ``min_resize_interval_s`` ago is not resized (KEEP). When such a forced KEEP
leaves no room for another job's START or RESIZE, that change is held back (the START is dropped and
the job waits; the RESIZE becomes a KEEP of its current allocation), so no node is ever over-committed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from scheduler.core.decisions import Action, ActionKind, Decision
from scheduler.core.types import Allocation, ClusterSnapshot, Job


@dataclass(frozen=True, slots=True)
class PlanDetail:
    """``plan``'s actions plus the changes it held back (job -> reason) to keep nodes within capacity."""

    actions: tuple[Action, ...]
    held_back: Mapping[str, str] = field(default_factory=dict)


def _has_run(job: Job) -> bool:
    return job.progress > 0 or job.attained_service > 0 or job.restarts > 0


def outgrown(job: Job, alloc: Allocation) -> str:
    """Why a running job's allocation no longer fits the job's own spec, "" when it does: its user changed
    the allowed GPU types, the replica bounds or the GPUs per replica while it ran. Such an allocation is
    never kept: no policy may return it (``scheduler.core.round.validate_decisions``)."""
    if job.allowed_gpu_types and alloc.gpu_type not in job.allowed_gpu_types:
        return f"GPU type {alloc.gpu_type} is no longer in its allowed types"
    lo = job.min_replicas if job.is_elastic else job.max_replicas
    if not lo <= alloc.replicas <= job.max_replicas:
        return f"{alloc.replicas} replicas run, its spec now asks {lo}-{job.max_replicas}"
    if alloc.gpus_per_replica != job.gpus_per_replica:
        return f"{alloc.gpus_per_replica} GPUs per replica run, its spec now asks {job.gpus_per_replica}"
    return ""


def _lost(job: Job) -> float:
    return max(0.0, job.progress - job.checkpoint_progress)


def _fits(alloc: Allocation, used: Mapping[str, int], cap: Mapping[str, int]) -> bool:
    return all(
        used.get(n, 0) + r * alloc.gpus_per_replica <= cap.get(n, 0) for n, r in alloc.replicas_per_node
    )


def _take(alloc: Allocation, used: dict[str, int]) -> None:
    for n, r in alloc.replicas_per_node:
        used[n] = used.get(n, 0) + r * alloc.gpus_per_replica


#: a job whose allocation is to change: (job, current allocation, wanted allocation, the policy's reason)
_Change = tuple[Job, Allocation | None, Allocation | None, str]


def plan_detailed(
    snapshot: ClusterSnapshot,
    jobs: Sequence[Job],
    decisions: Mapping[str, Decision],
    *,
    restart_cost_s: float,
    resize_cost_s: float,
    min_resize_interval_s: float = 0.0,
) -> PlanDetail:
    """``plan`` with the held-back changes reported (``run_round`` uses them to explain waits)."""
    cap = {n.name: n.capacity_for_jobs for n in snapshot.nodes}
    names = {j.name for j in jobs}
    # GPUs of allocations whose jobs are not in this round stay taken.
    used = snapshot.used_by_node(exclude=names)
    out: dict[str, Action] = {}
    held_back: dict[str, str] = {}
    changes = _settle_unchanged(snapshot, jobs, decisions, min_resize_interval_s, used, out)

    # Preemptions free GPUs; resizes then starts take them, each only if it still fits.
    for job, cur, want, reason in changes:
        if want is None and cur is not None:
            out[job.name] = Action(ActionKind.PREEMPT, job.name, cur, None, reason, lost_work=_lost(job))
    for job, cur, want, reason in changes:
        if cur is None or want is None:
            continue
        if _fits(want, used, cap):
            _take(want, used)
            out[job.name] = _resize_action(job, cur, want, reason, restart_cost_s, resize_cost_s)
        elif _fits(cur, used, cap):
            _take(cur, used)
            held_back[job.name] = "change held back: its GPUs are still held by jobs that cannot move"
            out[job.name] = Action(ActionKind.KEEP, job.name, cur, cur, held_back[job.name])
        else:
            held_back[job.name] = "preempted: its GPUs are held by jobs that cannot move"
            out[job.name] = Action(
                ActionKind.PREEMPT, job.name, cur, None, held_back[job.name], lost_work=_lost(job)
            )
    for job, cur, want, reason in changes:
        if cur is not None or want is None:
            continue
        if _fits(want, used, cap):
            _take(want, used)
            cost = restart_cost_s if _has_run(job) else 0.0
            out[job.name] = Action(ActionKind.START, job.name, None, want, reason, cost_seconds=cost)
        else:
            held_back[job.name] = "start held back: its GPUs are still held by jobs that cannot move"

    order = {j.name: i for i, j in enumerate(jobs)}
    return PlanDetail(tuple(out[name] for name in sorted(out, key=lambda n: order[n])), held_back)


def _settle_unchanged(
    snapshot: ClusterSnapshot,
    jobs: Sequence[Job],
    decisions: Mapping[str, Decision],
    min_resize_interval_s: float,
    used: dict[str, int],
    out: dict[str, Action],
) -> list[_Change]:
    """Put in ``out`` the actions that change no GPUs (COMPLETE, and KEEPs wanted or forced, whose GPUs
    are taken in ``used``); returns the other jobs' changes, by job name."""
    changes: list[_Change] = []
    for job in sorted(jobs, key=lambda j: j.name):
        cur = snapshot.allocations.get(job.name)
        dec = decisions.get(job.name)
        want = dec.allocation if dec is not None else cur
        reason = dec.reason if dec is not None else ""
        if not job.total_work - job.progress > 0:  # remaining_work <= 0, without the property call
            out[job.name] = Action(ActionKind.COMPLETE, job.name, cur, None, "all work done")
            continue
        if cur is None and want is None:
            continue
        if cur is not None and (want is cur or want == cur):
            out[job.name] = Action(ActionKind.KEEP, job.name, cur, cur, reason)
            _take(cur, used)
            continue
        if cur is not None and not job.preemptible and not outgrown(job, cur):
            out[job.name] = Action(ActionKind.KEEP, job.name, cur, cur, "non-preemptible: kept as it runs")
            _take(cur, used)
            continue
        if (
            cur is not None
            and want is not None
            and min_resize_interval_s > 0
            and job.last_change_time is not None
            and snapshot.now - job.last_change_time < min_resize_interval_s
        ):
            since = snapshot.now - job.last_change_time
            out[job.name] = Action(
                ActionKind.KEEP,
                job.name,
                cur,
                cur,
                f"changed {since:.0f} s ago, less than the minimum resize interval "
                f"{min_resize_interval_s:.0f} s",
            )
            _take(cur, used)
            continue
        changes.append((job, cur, want, reason))
    return changes


def _resize_action(
    job: Job, cur: Allocation, want: Allocation, reason: str, restart_cost_s: float, resize_cost_s: float
) -> Action:
    """The RESIZE that moves a running job from ``cur`` to ``want``: in place when it is elastic and
    keeps its type, else a restart (migration) that loses the work since its checkpoint."""
    resize = job.is_elastic and want.gpu_type == cur.gpu_type and want.replicas != cur.replicas
    if resize:
        return Action(
            ActionKind.RESIZE,
            job.name,
            cur,
            want,
            reason or f"resize {cur.replicas} -> {want.replicas} replicas",
            cost_seconds=resize_cost_s,
        )
    what = f"restart: migrate from {','.join(cur.nodes)} to {','.join(want.nodes)}"
    if want.gpu_type != cur.gpu_type:
        what = f"restart: move from {cur.gpu_type} to {want.gpu_type}"
    return Action(
        ActionKind.RESIZE,
        job.name,
        cur,
        want,
        f"{what}; {reason}" if reason else what,
        lost_work=_lost(job),
        cost_seconds=restart_cost_s,
    )


def is_migration(action: Action) -> bool:
    """Whether ``action`` restarts a running job on other GPUs without a wait (another GPU type or other
    nodes): a RESIZE that is not an in-place elastic resize. Preemptions (the job waits) are not."""
    before, after = action.before, action.after
    if action.kind is not ActionKind.RESIZE or before is None or after is None:
        return False
    return before.gpu_type != after.gpu_type or action.lost_work > 0 or before.replicas == after.replicas


def single_action(
    job: Job,
    cur: Allocation | None,
    want: Allocation | None,
    *,
    restart_cost_s: float,
    resize_cost_s: float,
) -> Action | None:
    """The table's action for one job that is free to change, as ``plan`` gives it when nothing is
    held back (the job is preemptible, no minimum resize interval applies and its target has room);
    None when it keeps waiting. Callers that know those conditions hold (the simulator's incremental
    rounds) use it instead of planning every job."""
    if not job.total_work - job.progress > 0:
        return Action(ActionKind.COMPLETE, job.name, cur, None, "all work done")
    if want is None:
        if cur is None:
            return None
        return Action(ActionKind.PREEMPT, job.name, cur, None, "", lost_work=_lost(job))
    if cur is None:
        cost = restart_cost_s if _has_run(job) else 0.0
        return Action(ActionKind.START, job.name, None, want, "", cost_seconds=cost)
    if want is cur or want == cur:
        return Action(ActionKind.KEEP, job.name, cur, cur, "")
    if job.is_elastic and want.gpu_type == cur.gpu_type and want.replicas != cur.replicas:
        return Action(
            ActionKind.RESIZE,
            job.name,
            cur,
            want,
            f"resize {cur.replicas} -> {want.replicas} replicas",
            cost_seconds=resize_cost_s,
        )
    what = f"restart: migrate from {','.join(cur.nodes)} to {','.join(want.nodes)}"
    if want.gpu_type != cur.gpu_type:
        what = f"restart: move from {cur.gpu_type} to {want.gpu_type}"
    return Action(
        ActionKind.RESIZE, job.name, cur, want, what, lost_work=_lost(job), cost_seconds=restart_cost_s
    )


def plan(
    snapshot: ClusterSnapshot,
    jobs: Sequence[Job],
    decisions: Mapping[str, Decision],
    *,
    restart_cost_s: float,
    resize_cost_s: float,
    min_resize_interval_s: float = 0.0,
) -> tuple[Action, ...]:
    """Actions that take the cluster from ``snapshot.allocations`` to ``decisions`` (see module table).

    Jobs missing from ``decisions`` keep what they have. Actions come in the order of ``jobs``.
    """
    return plan_detailed(
        snapshot,
        jobs,
        decisions,
        restart_cost_s=restart_cost_s,
        resize_cost_s=resize_cost_s,
        min_resize_interval_s=min_resize_interval_s,
    ).actions
