"""A TrainingJob's lifecycle transitions: (spec, observed gang, step, now) -> what to write and do.

Pure (no I/O, no clock: ``now`` is passed in). ``transition`` is the whole lifecycle table of the
operator. Given a job's spec, its observed gang (``scheduler.operator.observe.JobView``), the step of the
round and the time, it returns an ``Outcome``: the new status (a ``TrainingJobStatus``, written through
the model), the gang to create, the pods to delete, whether to delete the headless Service, the Events,
the action to count and the figures for metrics. ``scheduler.operator.reconcile`` applies an Outcome in
one order: status, Events, gang, pod deletions, Service, then counters and metrics.

Two steps per round. ``Observed`` (phase 3, no policy): the gang's state alone decides (a finished gang
completes the job, a crashed one counts a failure and is torn down or Fails at the backoff limit, a broken
or stuck one is torn down, a half-created one is completed, leftovers are deleted, a spec that cannot be
scheduled waits with a condition saying why); otherwise the job takes part in the round (``Outcome.job``).
``Planned`` (phase 5): the planner's action for the job (START, RESIZE, PREEMPT, COMPLETE, KEEP, or None
to wait).

Events follow the state they describe. ``status_events`` derives a transition's Event from the stored and
the new status (a new gang generation: Started/Restarted; one more resize or preemption; the phase
becoming Succeeded, Failed or Running; the Running condition turning to a teardown reason; the Admitted
condition turning False for a new reason), in the new status's words. The Event is sent once that status
is written and before the transition's pods are created or deleted, so it is never sent for a change that
was not written. A round that finds a written transition not yet complete (a gang not all created, pods of
a stop still there: the operator may have died before its Event) sends the Event the written status
describes (``_resumed_event``) and completes the change. A decision's Event is named after the decision,
so however often it is sent (by leaders that took over mid-change, or again after it failed to be
recorded) the API server keeps one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

from scheduler.core.decisions import Action, ActionKind, Unschedulable
from scheduler.core.planner import is_migration
from scheduler.core.types import Allocation, Job
from scheduler.k8s import crd
from scheduler.names import LABEL_JOB_NAME
from scheduler.operator.observe import GangState, JobView, PodView, intended_allocation
from scheduler.operator.status import evolve, with_condition

#: Reasons of a gang torn down and requeued (status.reason and the Running condition's reason).
TEARDOWN_REASONS = frozenset({"WorkerFailed", "GangBroken", "NodeFailed", "StartTimeout"})
#: Admitted=False reasons of a job that waits its turn (a Normal Event); others are Warnings.
_WAIT_REASONS = frozenset({"Waiting", "QueueQuota"})
#: Status fields a job that holds no gang does not have.
_GANG_FIELDS = ("allocation", "accounted_time", "estimated_completion")
_RATE_FIELDS = ("observed_throughput", "predicted_throughput")


@dataclass(frozen=True, slots=True)
class Event:
    """A core/v1 Event about the TrainingJob.

    ``key`` names the decision an Event announces (empty: none, e.g. a wait): the Event's name is derived
    from it, so a leader that re-sends the Event of a decision its predecessor already announced (it died
    after the Event and before the pods changed) gets AlreadyExists and the user sees one Event."""

    type: Literal["Normal", "Warning"]
    reason: str
    message: str
    key: str = ""


@dataclass(frozen=True, slots=True)
class GangStart:
    """Create the gang of ``generation`` on ``allocation``; workers resume from ``start_progress``."""

    allocation: Allocation
    generation: int
    start_progress: float


@dataclass(frozen=True, slots=True)
class Observed:
    """Phase 3: what the observed gang alone decides (``job`` is the converted spec, or why it cannot be)."""

    job: Job | Unschedulable
    backoff_limit: int = 3
    #: first wait after a start timeout; each further one doubles, up to ``requeue_backoff_max_s``
    requeue_backoff_s: float = 30.0
    requeue_backoff_max_s: float = 1800.0


@dataclass(frozen=True, slots=True)
class Planned:
    """Phase 5: the planner's ``action`` for the job (None: it waits, for ``why``), and the predicted
    throughput of its allocation after the round."""

    job: Job
    action: Action | None
    why: Unschedulable | None = None
    predicted: float | None = None
    #: for a START spread over several NVLink domains, why (``scheduler.core.spread``); else ""
    spread: str = ""


Step = Observed | Planned


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one transition writes and does (see the module docstring); empty fields mean nothing to do."""

    #: the new status (None: nothing to write)
    status: crd.TrainingJobStatus | None = None
    #: the job's phase and why it waits, for the round's report
    phase: str | None = None
    waiting: str | None = None
    #: the job takes part in the policy's round (phase 3 only), holding ``allocation``
    job: Job | None = None
    allocation: Allocation | None = None
    create: GangStart | None = None
    #: pods to delete, with the job's checkpoint grace period
    delete: tuple[str, ...] = ()
    grace_seconds: int = 30
    #: pods with nothing to checkpoint, deleted first with their own short grace period: 0 for a pod
    #: that is not bound or whose node failed (no kubelet to wait for), 1 for a bound pod that never ran
    quick_delete: tuple[tuple[str, int], ...] = ()
    delete_service: bool = False
    events: tuple[Event, ...] = ()
    #: the action counted in ``perfsched_operator_actions_total`` (start, resize, preempt, ...)
    count: str | None = None
    #: (from GPU type, to GPU type) when the action moves a running job to other GPUs
    #: (``perfsched_operator_migrations_total``)
    migration: tuple[str, str] | None = None
    lost_work: float = 0.0
    work_unit: str = ""
    queue_wait_s: float | None = None
    jct_s: float | None = None
    deadline_met: bool | None = None


def transition(
    spec: crd.TrainingJobSpec | Unschedulable, view: JobView, step: Step, now: float
) -> Outcome | None:
    """The transition of one job for this step of the round (None: nothing to do for it)."""
    if isinstance(step, Observed):
        return _with_orphans(view, _observed(spec, view, step, now))
    assert isinstance(spec, crd.TrainingJobSpec), "a job in the round has a valid spec"
    action, job = step.action, step.job
    if action is None:
        return _wait(spec, view, step.why, now)
    kind = action.kind
    if kind is ActionKind.START:
        return _start(spec, view, job, action, step.predicted, now, step.spread)
    if kind is ActionKind.RESIZE or kind is ActionKind.PREEMPT:
        return _stop(spec, view, job, action, now)
    if kind is ActionKind.COMPLETE:
        return _complete(spec, view, job, now)
    return _keep(spec, view, job, action, step.predicted, now)


# --- phase 3: what the observed gang decides ---------------------------------------------------------------


def _observed(
    spec: crd.TrainingJobSpec | Unschedulable, view: JobView, step: Observed, now: float
) -> Outcome | None:
    state, grace = view.state, _grace(spec)
    stale = _live(view.stale)
    if state is GangState.TERMINAL:
        # Workers of a finished job exit by themselves; whatever still runs a grace period after the
        # end (a replica that hangs in its final barrier) is stopped. A failed job's pods go at once.
        ended = crd.parse_time(view.status.completion_time)
        late = view.status.phase != "Succeeded" or ended is None or now >= ended + grace
        return Outcome(
            phase=view.status.phase or "Pending",
            delete=stale if late else (),
            grace_seconds=grace,
            events=_resumed_event(view) if late else (),
        )
    problem = step.job if isinstance(step.job, Unschedulable) else spec
    if isinstance(problem, Unschedulable):
        return _unschedulable(view, problem, grace, now)
    assert isinstance(spec, crd.TrainingJobSpec) and isinstance(step.job, Job)
    if state is GangState.COMPLETED:
        return _complete(spec, view, step.job, now)
    limit = spec.backoff_limit if spec.backoff_limit is not None else step.backoff_limit
    if state is GangState.CRASHED:
        return _crashed(spec, view, limit, now)
    if state is GangState.STUCK:
        return _start_timeout(spec, view, step, limit, now)
    if state is GangState.BROKEN:
        reason = "NodeFailed" if view.node_failed else "GangBroken"
        message = f"{view.detail}; restarting from the last checkpoint"
        return _teardown(spec, view, "Pending", reason, message, now)
    if state is GangState.DRAINING:
        return _draining(spec, view, now)
    if state is GangState.MISSING:
        alloc = intended_allocation(view.key, view.status)
        if alloc is None:
            return None
        return Outcome(
            job=job_for_round(view, step.job, now),
            allocation=alloc,
            create=GangStart(alloc, view.generation, view.start_progress),
            delete=stale,
            grace_seconds=grace,
            events=_resumed_event(view),
        )
    due = crd.parse_time(view.status.next_attempt_time)
    if state is GangState.IDLE and due is not None and now < due:
        return _backing_off(spec, view, due, now)
    # IDLE, STARTING, RUNNING: the policy decides
    return Outcome(
        job=job_for_round(view, step.job, now), allocation=view.allocation, delete=stale, grace_seconds=grace
    )


def _with_orphans(view: JobView, out: Outcome | None) -> Outcome | None:
    """Pods bound to a failed node are deleted at once whatever else the job does (no kubelet is left to
    run a grace period, and a pod that is never confirmed gone would hold the job back forever)."""
    orphans = [p.name for p in view.orphans]
    if not orphans:
        return out
    out = out or Outcome()
    quick = {n: g for n, g in out.quick_delete}
    quick.update(dict.fromkeys(orphans, 0))
    return replace(
        out,
        delete=tuple(n for n in out.delete if n not in quick),
        quick_delete=tuple(sorted(quick.items())),
    )


def _unschedulable(view: JobView, problem: Unschedulable, grace: int, now: float) -> Outcome:
    """The spec cannot be scheduled as written: Pending with a condition naming the problem; a gang that
    runs (the spec was edited under it) is stopped, keeping its checkpoint."""
    old = view.status
    reason = "Unschedulable" if problem.resolvable else "InvalidSpec"
    conds = with_condition(old.conditions, "Admitted", False, reason, problem.reason, now=now)
    new = evolve(
        old,
        conditions=conds,
        phase="Pending",
        reason=reason,
        message=problem.reason,
        selector=_selector(view),
        **_none(_GANG_FIELDS),
    )
    # unlike a wait's changing text, each different problem with the spec is news (an edit still wrong);
    # pods to stop of which none is being deleted yet: the round that wrote this died before its Event
    prev = old.condition("Admitted")
    delete = _live([*view.cur, *view.stale])
    news = prev is None or prev.message != problem.reason or bool(delete and not view.draining)
    return Outcome(
        status=new,
        phase="Pending",
        waiting=problem.reason,
        delete=delete,
        grace_seconds=grace,
        events=(Event("Warning", reason, problem.reason),) if news else (),
    )


def _crashed(spec: crd.TrainingJobSpec, view: JobView, limit: int, now: float) -> Outcome:
    """A worker failed: restart from the checkpoint, or Fail once the backoff limit is exceeded."""
    failures = view.status.failures + 1
    if failures <= limit:
        msg = (
            f"{view.detail}; restarting from the last checkpoint (failure {failures}, backoff limit {limit})"
        )
        return _teardown(spec, view, "Pending", "WorkerFailed", msg, now, failures=failures)
    msg = f"backoff limit {limit} exceeded after {failures} worker failures; last: {view.detail}"
    return _fail(spec, view, "WorkerFailed", view.detail, "BackoffLimitExceeded", msg, now, failures=failures)


def _start_timeout(
    spec: crd.TrainingJobSpec, view: JobView, step: Observed, limit: int, now: float
) -> Outcome:
    """Not every replica ran within the start timeout: stop the gang, release its GPUs and requeue the job
    after an exponential backoff (``requeueCount``, ``nextAttemptTime``); Fail past the backoff limit."""
    count = view.status.requeue_count + 1
    if count > limit:
        msg = f"backoff limit {limit} exceeded after {count} start timeouts; last: {view.detail}"
        return _fail(
            spec, view, "StartTimeout", view.detail, "StartTimeoutExceeded", msg, now, requeue_count=count
        )
    wait = min(step.requeue_backoff_max_s, step.requeue_backoff_s * 2 ** (count - 1))
    msg = (
        f"{view.detail}; stopped and requeued (start timeout {count} of backoff limit {limit}), "
        f"next attempt in {wait:.0f} s from the last checkpoint"
    )
    return _teardown(
        spec,
        view,
        "Pending",
        "StartTimeout",
        msg,
        now,
        requeue_count=count,
        next_attempt_time=crd.rfc3339(now + wait),
    )


def _backing_off(spec: crd.TrainingJobSpec, view: JobView, due: float, now: float) -> Outcome:
    """A job requeued after a start timeout waits out its backoff outside the round."""
    old = view.status
    run = old.condition("Running")
    why = (
        run.message if run is not None and run.reason == "StartTimeout" else "the gang did not start in time"
    )
    msg = f"backing off until {crd.rfc3339(due)} ({due - now:.0f} s) after a start timeout: {why}"
    conds = with_condition(old.conditions, "Admitted", False, "StartBackoff", msg, now=now)
    new = evolve(old, **_base(spec, view), phase="Pending", conditions=conds, **_none(_GANG_FIELDS))
    return Outcome(
        status=new, phase="Pending", waiting=msg, delete=_live(view.stale), grace_seconds=_grace(spec)
    )


def _fail(
    spec: crd.TrainingJobSpec,
    view: JobView,
    run_reason: str,
    run_message: str,
    reason: str,
    message: str,
    now: float,
    **counts: int,
) -> Outcome:
    """The job Fails: its pods are stopped (a running one gets the grace period to checkpoint)."""
    old = view.status
    conds = with_condition(old.conditions, "Running", False, run_reason, run_message, now=now)
    conds = with_condition(conds, "Failed", True, reason, message, now=now)
    new = evolve(
        old,
        **_base(spec, view),
        phase="Failed",
        reason=reason,
        message=message,
        completion_time=crd.rfc3339(now),
        conditions=conds,
        next_attempt_time=None,
        **counts,
        **_none(_GANG_FIELDS),
    )
    delete, quick = _split([p for p in view.cur if p.unfinished and not p.deleting] + list(view.stale))
    return Outcome(
        status=new,
        phase="Failed",
        delete=delete,
        quick_delete=quick,
        grace_seconds=spec.checkpoint_grace_seconds,
        delete_service=True,
        events=status_events(old, new, created=_created(view)),
        count="fail",
    )


def _split(pods: Sequence[PodView]) -> tuple[tuple[str, ...], tuple[tuple[str, int], ...]]:
    """Pods to stop: (those that run and get the checkpoint grace period, (name, grace) of those with
    nothing to checkpoint: 0 when not bound to a node, 1 when bound but never Running)."""
    graceful: list[str] = []
    quick: list[tuple[str, int]] = []
    for p in pods:
        if not p.unfinished or p.deleting:
            continue
        if p.info.phase == "Running":
            graceful.append(p.name)
        else:
            quick.append((p.name, 1 if p.info.node_name else 0))
    return tuple(graceful), tuple(quick)


def _teardown(
    spec: crd.TrainingJobSpec,
    view: JobView,
    phase: crd.Phase,
    reason: str,
    message: str,
    now: float,
    **extra: object,
) -> Outcome:
    """Stop the gang (intent first: no allocation), keeping progress up to the checkpoint; ``extra``:
    further status fields (the failure or requeue count)."""
    old = view.status
    conds = with_condition(old.conditions, "Running", False, reason, message, now=now)
    conds = with_condition(conds, "Admitted", False, reason, message, now=now)
    new = evolve(
        old,
        **_base(spec, view),
        phase=phase,
        reason=reason,
        message=message,
        last_change_time=crd.rfc3339(now),
        attained_service=attained(view, now),
        conditions=conds,
        **extra,
        **_none(_GANG_FIELDS + _RATE_FIELDS),
    )
    delete, quick = _split([p for p in view.cur if p.unfinished and not p.deleting] + list(view.stale))
    return Outcome(
        status=new,
        phase=phase,
        delete=delete,
        quick_delete=quick,
        grace_seconds=spec.checkpoint_grace_seconds,
        events=status_events(old, new, created=_created(view)),
        count="restart",
    )


def _draining(spec: crd.TrainingJobSpec, view: JobView, now: float) -> Outcome:
    """The previous gang is checkpointing and exiting; a stop interrupted before it deleted every pod
    is finished here."""
    old = view.status
    left = len(view.draining) + len(view.stale)
    msg = f"waiting for {left} pod(s) of the previous gang to checkpoint and exit"
    phase = _waiting_phase(old)
    conds = with_condition(old.conditions, "Running", False, "Draining", msg, now=now)
    new = evolve(old, **_base(spec, view), phase=phase, conditions=conds, accounted_time=None)
    stale, quick = _split(view.stale)
    return Outcome(
        status=new,
        phase=phase,
        waiting=msg,
        delete=stale,
        quick_delete=quick,
        grace_seconds=spec.checkpoint_grace_seconds,
        events=_resumed_event(view),
    )


def _resumed_event(view: JobView) -> tuple[Event, ...]:
    """The Event of a transition whose status was written and whose pod changes may not have begun (the
    operator died in between), sent by the round that completes it, from the written status.

    Events go out after the status and before the pods, so a gang with none of its pods was started or
    restarted without its Event having been sent for sure. A stop (resize, preemption, teardown, failure)
    repeats its Event for as long as pods of the job remain: which pods are being deleted does not say
    whether the Event went out (a torn-down gang's lost pod was being deleted before the decision, and an
    Event can fail to be recorded while its pods are deleted). The Event carries the decision's key, so
    the API server records it once, and the operator sends each key once per process (``reconcile``).
    """
    st = view.status
    return tuple(replace(e, key=decision_key(st, e.reason)) for e in _resumed(view))


def _resumed(view: JobView) -> tuple[Event, ...]:
    st = view.status
    reason, message = st.reason or "", st.message or ""
    if view.state is GangState.MISSING:
        begun = bool(view.cur)
        return () if begun or reason not in ("Started", "Restarted") else (Event("Normal", reason, message),)
    if not view.stale and not view.draining:
        return ()  # nothing of the change is left
    if view.state is GangState.TERMINAL and st.phase == "Failed":
        return (Event("Warning", "Failed", message),)
    if view.state is not GangState.DRAINING:
        return ()
    if st.phase == "Resizing" and reason == "Resized":
        return (Event("Normal", reason, message),)
    if reason in TEARDOWN_REASONS or (st.phase == "Preempted" and reason == "Preempted"):
        return (Event("Warning", reason, message),)
    return ()


# --- phase 5: the planner's action ---------------------------------------------------------------------


def _start(
    spec: crd.TrainingJobSpec,
    view: JobView,
    job: Job,
    action: Action,
    predicted: float | None,
    now: float,
    spread: str = "",
) -> Outcome:
    """START: write the intent (allocation, a new gang generation), then create the gang. ``spread``:
    why the gang spans several NVLink domains, ending the message (Event, Admitted condition)."""
    old = view.status
    alloc = action.after
    assert alloc is not None
    gen = view.generation + 1
    ran_before = view.generation > 0
    start = view.checkpoint
    lost = max(0.0, old.progress - start)
    unit = spec.work.unit.value
    what = f"{'restarted' if ran_before else 'started'} {describe_allocation(alloc)}"
    if ran_before:
        what += f" from checkpoint {_num(start)} {unit}"
    if predicted:
        what += f", predicted {predicted:.3g} {unit}/s"
    message = f"{what}: {action.reason}" if action.reason else what
    if spread:
        message += f"; {spread}"
    reason = "Restarted" if ran_before else "Started"
    conds = with_condition(old.conditions, "Admitted", True, reason, message, now=now)
    conds = with_condition(
        conds, "Running", False, "PodsStarting", f"0/{alloc.replicas} replicas running", now=now
    )
    for t in ("Preempted", "Resized"):
        prev = old.condition(t)
        if prev is not None and prev.status == "True":
            # keep the why: "was it resized / preempted, and for what" stays answerable
            note = f"running again as generation {gen} after: {prev.message}"
            conds = with_condition(conds, t, False, "Restarted", note, now=now)
    changes: dict[str, object] = {
        **_base(spec, replace(view, progress=start)),
        "phase": "Admitted",
        "reason": reason,
        "message": message,
        "gang_generation": gen,
        "allocation": allocation_status(alloc),
        "progress": start,
        "checkpoint_progress": start,
        "lost_work": old.lost_work + lost,
        "restarts": old.restarts + (1 if ran_before else 0),
        "last_change_time": crd.rfc3339(now),
        "accounted_time": now,
        "attained_service": job.attained_service,
        "observed_throughput": None,
        "next_attempt_time": None,
        "conditions": conds,
    }
    if predicted:
        changes["predicted_throughput"] = predicted
        eta = now + max(0.0, spec.work.total - start) / predicted
        changes["estimated_completion"] = crd.rfc3339(eta)
    queue_wait = None
    if not old.admitted_time:
        changes["admitted_time"] = crd.rfc3339(now)
        created = _created(view)
        queue_wait = max(0.0, now - created) if created is not None else None
    if not old.start_time:
        changes["start_time"] = crd.rfc3339(now)
    new = evolve(old, **changes)
    return Outcome(
        status=new,
        phase="Admitted",
        # intent first, then the pods: a leader that dies in between leaves a gang the next one completes
        create=GangStart(alloc, gen, start),
        events=status_events(old, new, created=_created(view)),
        count="start",
        lost_work=lost,
        work_unit=unit,
        queue_wait_s=queue_wait,
    )


def _stop(spec: crd.TrainingJobSpec, view: JobView, job: Job, action: Action, now: float) -> Outcome:
    """RESIZE or PREEMPT: write the intent (no gang), then delete the pods with the grace period."""
    old = view.status
    resize = action.kind is ActionKind.RESIZE
    before, after = action.before, action.after
    at_risk = max(0.0, view.progress - view.checkpoint)
    grace = spec.checkpoint_grace_seconds
    if resize and before is not None and after is not None:
        change = (
            f"resizing {before.replicas} -> {after.replicas} replicas"
            if before.gpu_type == after.gpu_type and before.replicas != after.replicas
            else f"moving from {describe_allocation(before)} to {describe_allocation(after)}"
        )
        message = f"{change}: {action.reason}" if action.reason else change
        phase: crd.Phase = "Resizing"
        reason = "Resized"
        counter = {"resizes": old.resizes + 1}
    else:
        message = f"preempted: {action.reason}" if action.reason else "preempted by the policy"
        phase, reason = "Preempted", "Preempted"
        counter = {"preemptions": old.preemptions + 1}
    message += (
        f"; workers get {grace} s to checkpoint (progress since the last checkpoint, "
        f"up to {_num(at_risk)} {spec.work.unit.value}, may be lost)"
    )
    conds = with_condition(old.conditions, reason, True, reason, message, now=now)
    conds = with_condition(conds, "Running", False, reason, message, now=now)
    if not resize:
        conds = with_condition(conds, "Admitted", False, "Preempted", message, now=now)
    new = evolve(
        old,
        **_base(spec, view),
        phase=phase,
        reason=reason,
        message=message,
        **counter,
        last_change_time=crd.rfc3339(now),
        attained_service=job.attained_service,
        conditions=conds,
        **_none(_GANG_FIELDS + _RATE_FIELDS),
    )
    return Outcome(
        status=new,
        phase=phase,
        delete=_live([p for p in view.cur if p.unfinished]),
        grace_seconds=grace,
        events=status_events(old, new, created=_created(view)),
        count="resize" if resize else "preempt",
        migration=(before.gpu_type, after.gpu_type)
        if is_migration(action) and before is not None and after is not None
        else None,
    )


def _complete(spec: crd.TrainingJobSpec, view: JobView, job: Job, now: float) -> Outcome:
    """All declared work is done: Succeeded. The gang's pods are left to exit 0 on their own."""
    old = view.status
    total = spec.work.total
    message = f"all {_num(total)} {spec.work.unit.value} done"
    conds = with_condition(old.conditions, "Running", False, "Completed", "the job finished", now=now)
    conds = with_condition(conds, "Succeeded", True, "Completed", message, now=now)
    changes: dict[str, object] = {
        **_base(spec, view),
        "phase": "Succeeded",
        "reason": "Completed",
        "message": message,
        "progress": total,
        "checkpoint_progress": total,
        "progress_percent": 100.0,
        "progress_percent_text": "100.0%",
        "completion_time": crd.rfc3339(now),
        "attained_service": attained(view, now),
        "conditions": conds,
        **_none(_GANG_FIELDS),
    }
    if view.observed_throughput:
        changes["observed_throughput"] = view.observed_throughput
    new = evolve(old, **changes)
    created = _created(view)
    return Outcome(
        status=new,
        phase="Succeeded",
        delete=_live(view.stale),
        grace_seconds=spec.checkpoint_grace_seconds,
        delete_service=True,
        events=status_events(old, new, created=created),
        count="complete",
        jct_s=now - created if created is not None else None,
        deadline_met=None if job.deadline is None else now <= job.deadline,
    )


def _keep(
    spec: crd.TrainingJobSpec, view: JobView, job: Job, action: Action, predicted: float | None, now: float
) -> Outcome:
    """KEEP: the gang stays; refresh allocation, throughputs, ETA and the Running condition."""
    old = view.status
    alloc = view.allocation or action.before
    assert alloc is not None
    running = view.state is GangState.RUNNING
    phase: crd.Phase = "Running" if running else "Admitted"
    changes: dict[str, object] = {
        **_base(spec, view),
        "phase": phase,
        "allocation": allocation_status(alloc),
        "attained_service": job.attained_service,
        "accounted_time": now,
    }
    observed = view.observed_throughput
    if predicted:
        changes["predicted_throughput"] = predicted
    if observed:
        changes["observed_throughput"] = observed
    rate = observed or predicted
    if rate:
        changes["estimated_completion"] = crd.rfc3339(now + max(0.0, spec.work.total - view.progress) / rate)
    detail = f"{view.running_replicas}/{alloc.replicas} replicas running on {describe_allocation(alloc)}"
    if running:
        changes["conditions"] = with_condition(
            old.conditions, "Running", True, "AllReplicasRunning", detail, now=now
        )
        if old.phase != "Running":
            changes["reason"] = "Running"
            changes["message"] = detail
    elif view.problems:
        # a problem is news (the reason, and a Warning Event) once it lasts (``JobView.problems_last``)
        reason = "PodsNotStarting" if view.problems_last else "PodsStarting"
        changes["conditions"] = with_condition(
            old.conditions, "Running", False, reason, f"{detail}; {view.problems}", now=now
        )
    else:
        changes["conditions"] = with_condition(
            old.conditions, "Running", False, "PodsStarting", detail, now=now
        )
    if action.reason and ("held back" in action.reason or "minimum resize interval" in action.reason):
        changes["message"] = f"kept as it runs: {action.reason}"
    new = evolve(old, **changes)
    return Outcome(status=new, phase=phase, events=status_events(old, new, created=_created(view)))


def _wait(spec: crd.TrainingJobSpec, view: JobView, why: Unschedulable | None, now: float) -> Outcome:
    """No allocation this round: the Admitted condition says why (phase Pending, or still Preempted or
    Resizing while it waits to restart)."""
    old = view.status
    if why is None:
        why = Unschedulable("waiting for the next round")
    reason = why.cause or ("Waiting" if why.resolvable else "Unschedulable")
    phase = _waiting_phase(old)
    changes: dict[str, object] = {
        **_base(spec, view),
        "phase": phase,
        "conditions": with_condition(old.conditions, "Admitted", False, reason, why.reason, now=now),
        **_none(_GANG_FIELDS),
    }
    if phase == "Pending":
        changes["reason"] = reason
        changes["message"] = why.reason
    new = evolve(old, **changes)
    events = status_events(old, new, created=_created(view))
    return Outcome(status=new, phase=phase, waiting=why.reason, events=events)


# --- events from the status change -----------------------------------------------------------------------


#: marks an Event that says why a job waits (not a decision: sent each time the reason changes)
_WAIT = "<wait>"


def decision_key(status: crd.TrainingJobStatus, reason: str) -> str:
    """The decision a status records, for the Event that announces it: the reason and the counters that
    every decision moves (a new gang generation, one more resize, preemption, failure or requeue)."""
    return (
        f"{reason}.g{status.gang_generation}.r{status.resizes}.p{status.preemptions}"
        f".f{status.failures}.q{status.requeue_count}.{status.phase or ''}"
    )


def status_events(
    old: crd.TrainingJobStatus, new: crd.TrainingJobStatus, *, created: float | None
) -> tuple[Event, ...]:
    """The Event a status change announces (at most one; the first rule that matches), in the new
    status's words, keyed by the decision (``decision_key``) unless it only says why a job waits.
    ``created``: the job's creation time (for the completion time in Succeeded)."""
    events = _status_events(old, new, created=created)
    return tuple(replace(e, key="" if e.key == _WAIT else decision_key(new, e.reason)) for e in events)


def _status_events(
    old: crd.TrainingJobStatus, new: crd.TrainingJobStatus, *, created: float | None
) -> tuple[Event, ...]:
    msg = new.message or ""
    if new.gang_generation > old.gang_generation:
        return (Event("Normal", new.reason or "Started", msg),)
    if new.resizes > old.resizes:
        return (Event("Normal", "Resized", msg),)
    if new.preemptions > old.preemptions:
        return (Event("Warning", "Preempted", msg),)
    if new.phase != old.phase and new.phase == "Succeeded":
        ended = crd.parse_time(new.completion_time)
        took = f" in {ended - created:.0f} s" if ended is not None and created is not None else ""
        return (Event("Normal", "Succeeded", msg + took),)
    if new.phase != old.phase and new.phase == "Failed":
        return (Event("Warning", "Failed", msg),)
    run_old, run_new = old.condition("Running"), new.condition("Running")
    torn_down = run_new is not None and run_new.reason in TEARDOWN_REASONS
    if torn_down and run_new is not None and (run_old is None or run_old.message != run_new.message):
        return (Event("Warning", run_new.reason, run_new.message),)
    if (
        run_new is not None
        and run_new.reason == "PodsNotStarting"
        and (run_old is None or run_old.reason != "PodsNotStarting")
    ):
        return (Event("Warning", "PodsNotStarting", run_new.message),)
    if new.phase == "Running" and old.phase != "Running" and run_new is not None:
        rate = new.observed_throughput or new.predicted_throughput
        unit = f" {new.work_unit}/s" if new.work_unit else "/s"
        return (Event("Normal", "Running", run_new.message + (f", {rate:.3g}{unit}" if rate else "")),)
    adm_old, adm_new = old.condition("Admitted"), new.condition("Admitted")
    if adm_new is None or adm_new.status != "False":
        return ()
    if adm_old is None or adm_old.status != "False" or adm_old.reason != adm_new.reason:
        quiet = adm_new.reason in _WAIT_REASONS  # waiting for GPUs or for quota is normal
        kind: Literal["Normal", "Warning"] = "Normal" if quiet else "Warning"
        return (Event(kind, adm_new.reason, adm_new.message, key=_WAIT),)
    return ()


# --- shared pieces ------------------------------------------------------------------------------------------


def job_for_round(view: JobView, job: Job, now: float) -> Job:
    """The core Job with what the pods say: progress, checkpoint, attained GPU-seconds, and the throughput
    measured where the gang runs now: what replica 0 reports or, if more, the progress per second of the
    operator's clock since the gang started (None until it reports, and for a job that does not run)."""
    running = view.state is GangState.RUNNING or view.state is GangState.STARTING
    progress = view.progress if running else view.checkpoint
    observed = view.observed_throughput if running and view.allocation is not None else None
    started = job.last_change_time
    if observed and started is not None and now > started:
        # a worker whose clock runs faster than ours (the emulator's time scale) reports per its own
        # second: what the gang made per second of this clock since it started counts too
        observed = max(observed, (progress - view.start_progress) / (now - started))
    return replace(
        job,
        progress=progress,
        checkpoint_progress=min(view.checkpoint, progress),
        attained_service=attained(view, now),
        observed_throughput=observed if observed and observed > 0 else None,
    )


def attained(view: JobView, now: float) -> float:
    """GPU-seconds received: the saved value plus Running replicas' GPUs since it was last accounted.

    A gang that finished (or crashed) since the last round counts its whole intended size up to now.
    """
    st = view.status
    if st.accounted_time is None:
        return st.attained_service
    dt = max(0.0, now - st.accounted_time)
    alloc = view.allocation
    if alloc is not None and view.running_replicas > 0:
        return st.attained_service + dt * view.running_replicas * alloc.gpus_per_replica
    intent = intended_allocation(view.key, st)
    if intent is not None and view.state in (GangState.COMPLETED, GangState.CRASHED, GangState.BROKEN):
        return st.attained_service + dt * intent.total_gpus
    return st.attained_service


def describe_allocation(alloc: Allocation) -> str:
    nodes = ", ".join(f"{n} x{r}" if r > 1 else n for n, r in alloc.replicas_per_node)
    return f"{alloc.replicas} x {alloc.gpus_per_replica} {alloc.gpu_type} GPU(s) on {nodes}"


def allocation_status(alloc: Allocation) -> crd.AllocationStatus:
    return crd.AllocationStatus(
        replicas=alloc.replicas,
        gpu_type=alloc.gpu_type,
        gpus_per_replica=alloc.gpus_per_replica,
        nodes=tuple(alloc.nodes),
        replicas_per_node=dict(alloc.replicas_per_node),
    )


def _base(spec: crd.TrainingJobSpec, view: JobView) -> dict[str, object]:
    """The status fields every round recomputes."""
    total = spec.work.total
    pct = crd.progress_percent(view.progress, total)
    out: dict[str, object] = {
        "selector": _selector(view),
        "work_unit": spec.work.unit.value,
        "total_work": total,
        "progress": view.progress,
        "checkpoint_progress": view.checkpoint,
        "progress_percent": pct,
        "progress_percent_text": f"{pct:.1f}%",
        "gang_generation": view.generation,
    }
    generation = view.obj["metadata"].get("generation")
    if generation is not None:
        out["observed_generation"] = int(generation)
    return out


def _waiting_phase(status: crd.TrainingJobStatus) -> crd.Phase:
    """A job without a gang stays Preempted or Resizing until it restarts; otherwise it is Pending."""
    if status.phase == "Preempted" or status.phase == "Resizing":
        return status.phase
    return "Pending"


def _none(names: Sequence[str]) -> dict[str, None]:
    return dict.fromkeys(names)


def _selector(view: JobView) -> str:
    return f"{LABEL_JOB_NAME}={view.obj['metadata']['name']}"


def _created(view: JobView) -> float | None:
    return crd.parse_time(view.obj["metadata"].get("creationTimestamp"))


def _grace(spec: crd.TrainingJobSpec | Unschedulable) -> int:
    return spec.checkpoint_grace_seconds if isinstance(spec, crd.TrainingJobSpec) else 30


def _live(pods: Sequence[PodView]) -> tuple[str, ...]:
    """Names of the pods that still run and are not being deleted yet."""
    return tuple(p.name for p in pods if p.unfinished and not p.deleting)


def _num(x: float) -> str:
    return f"{x:.0f}" if float(x).is_integer() else f"{x:.1f}"
