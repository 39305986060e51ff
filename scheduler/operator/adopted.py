"""The operator's side of adopted workloads: batch/v1 Jobs, JobSets and TrainJobs in the round.

Shell module (I/O through a ``scheduler.k8s.adopt.WorkloadApi``; the decisions are the round's). The
operator calls it at two points of its round (``scheduler.operator.reconcile``):

- ``Adopter.observe`` (before the policy) lists the three kinds, keeps those that are perfsched's (label
  ``perfsched.dev/queue``, or a namespace a TrainingQueue selects), settles what needs no policy (finished
  ones get their final status; refused ones, bad input or both perfsched's and Kueue's label, stay
  suspended with an Event and a status naming the problem; one running although perfsched never admitted it
  is suspended; one whose label was removed is released), and turns the rest into core ``Job``s: waiting
  (suspended) ones and running ones, whose allocation is read from their bound pods. An admitted one whose
  pods are not all bound yet is held by a reservation on nodes of its GPU type, as a TrainingJob's gang is
  while kube-scheduler places it. An admitted one whose pods are not all Running its start timeout after
  the admission (``perfsched.dev/start-timeout-seconds``, default the operator's TrainingJob default) is
  suspended again there, its GPUs released in that round, and requeued after an exponential backoff
  (``requeueCount``, ``nextAttemptTime`` in its status; outside the round meanwhile), or, past the backoff
  limit, left suspended (phase ``Stopped``); its status and Event quote its pods' own reasons
  (``scheduler.operator.observe.pod_problems``), as a TrainingJob's do (decision 0104).
- ``Adopter.apply`` (after the policy) turns the round's actions into writes: START admits (placement and
  size while suspended, then unsuspend), PREEMPT and RESIZE re-suspend (the controller deletes the pods with
  their grace period; a resized job is admitted again at its new size), and every job's
  ``perfsched.dev/status`` annotation (phase, queue, GPU type, replicas, why it waits, predicted throughput,
  ETA) is rewritten where it changed, with an Event on each change of phase or reason.

Attained service (GPU-seconds, what LAS orders by) is kept in the status annotation, so an operator restart
loses nothing. Every API failure of one workload is reported in the round's errors and retried next round.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from scheduler.core.decisions import Action, ActionKind, RoundResult
from scheduler.core.errors import PerfschedError
from scheduler.core.types import Allocation, Job, Node, WorkUnit
from scheduler.k8s import adopt, crd
from scheduler.k8s.adopt import Obj, Workload, WorkloadApi
from scheduler.k8s.errors import Forbidden
from scheduler.names import ANNOTATION_MODEL, ANNOTATION_STATUS, LABEL_QUEUE
from scheduler.operator.observe import PROBLEM_AFTER_S, PodView, pod_problems, pod_view

log = logging.getLogger(__name__)

#: The start of an admitted workload's status message while its pods say why they do not run.
_NOT_STARTING = "pods not running yet"

#: A running workload's status annotation (attained service, progress) is rewritten at most this often.
STATUS_REFRESH_S = 30.0


@dataclass(slots=True)
class Adoption:
    """What ``observe`` found: the adopted jobs in the round, the allocations of running ones, the pods
    those account for, and the admitted ones still being placed (reserved by ``reserve``)."""

    workloads: dict[str, Workload] = field(default_factory=dict)
    jobs: list[Job] = field(default_factory=list)
    allocations: dict[str, Allocation] = field(default_factory=dict)
    accounted: set[str] = field(default_factory=set)
    placing: list[Workload] = field(default_factory=list)
    #: admitted workloads whose pods have said for a while why they do not run (their own reasons)
    problems: dict[str, str] = field(default_factory=dict)
    #: admitted workloads whose pods all ran for the first time this round
    started: set[str] = field(default_factory=set)


def _bound_allocation(
    w: Workload, pods: Sequence[PodView], node_types: Mapping[str, str]
) -> Allocation | None:
    """The allocation of a running workload from its bound, unfinished pods (None when none is bound)."""
    per_node: dict[str, int] = {}
    gpu_type = str(w.status.get("gpuType") or "")
    for p in pods:
        if p.info.holds_gpus and p.info.node_name in node_types:
            per_node[p.info.node_name] = per_node.get(p.info.node_name, 0) + 1
            gpu_type = node_types[p.info.node_name]
    if not per_node:
        return None
    return Allocation.of(w.key, gpu_type, w.gpus_per_replica, per_node)


def _pods_by_owner(pods: Sequence[Obj], keys: Collection[str]) -> dict[tuple[str, str, str], list[PodView]]:
    """Pods by (owner label, namespace, its value), for the labels adopted kinds put on their pods."""
    out: dict[tuple[str, str, str], list[PodView]] = {}
    for obj in pods:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        found = [k for k in keys if k in labels]
        if not found:
            continue
        view = pod_view(obj)
        if view is None:
            continue
        for k in found:
            out.setdefault((k, view.info.namespace, str(labels[k])), []).append(view)
    return out


class Adopter:
    """Adopted workloads in the operator's round (see the module docstring)."""

    def __init__(
        self,
        api: WorkloadApi,
        *,
        may_act: Callable[[], bool] = lambda: True,
        instance: str = "",
        kinds: Sequence[adopt.WorkloadKind] = tuple(adopt.WORKLOAD_KINDS.values()),
        known_model: Callable[[str], bool] | None = None,
        namespace: str = "",
        start_timeout_s: float = 300.0,
        backoff_limit: int = 3,
        requeue_backoff_s: float = 30.0,
        requeue_backoff_max_s: float = 1800.0,
    ) -> None:
        self.api = api
        #: the start timeout of a workload without ``perfsched.dev/start-timeout-seconds`` (0: none)
        self.start_timeout_s = start_timeout_s
        #: start timeouts a workload may have; the next one leaves it suspended
        self.backoff_limit = backoff_limit
        #: first wait after a start timeout; each further one doubles, up to ``requeue_backoff_max_s``
        self.requeue_backoff_s = requeue_backoff_s
        self.requeue_backoff_max_s = requeue_backoff_max_s
        self.known_model = known_model
        #: only this namespace's workloads ("" = all), as the operator's PERFSCHED_NAMESPACE
        self.namespace = namespace
        self._forbidden: set[str] = set()
        self.may_act = may_act
        self.instance = instance
        self.kinds = tuple(kinds)

    # --- before the policy -------------------------------------------------------------------------------

    def observe(
        self,
        now: float,
        nodes: Sequence[Node],
        pods: Sequence[Obj],
        classes: Mapping[str, int],
        *,
        queues: Collection[str] | None,
        namespace_queue: Callable[[str], str],
        errors: list[str],
    ) -> Adoption:
        """List and settle the adopted workloads; the waiting and running ones become round jobs.

        ``queues``: the TrainingQueues that exist (None: no queue CRD or none defined; a label's queue is
        then not checked); ``namespace_queue(ns)``: the queue that selects namespace ``ns`` ("" if none)."""
        node_types = {n.name: n.gpu_type for n in nodes}
        by_label: dict[tuple[str, str, str], list[PodView]] = {}
        out = Adoption()
        for kind in self.kinds:
            try:
                raw = self.api.list_workloads(kind)
            except Forbidden as exc:  # RBAC without this kind: said once, not every round
                if kind.kind not in self._forbidden:
                    self._forbidden.add(kind.kind)
                    log.warning("cannot list %s; not adopting them", kind.plural, extra={"error": str(exc)})
                continue
            except PerfschedError as exc:
                errors.append(f"list {kind.plural}: {exc}")
                continue
            self._forbidden.discard(kind.kind)
            for obj in raw:
                w = adopt.decode(kind, obj, known_queues=queues)
                if self.namespace and w.namespace != self.namespace:
                    continue
                if w.model and self.known_model is not None and not self.known_model(w.model):
                    unknown = (
                        f"unknown model {w.model!r} in annotation {ANNOTATION_MODEL}: "
                        "the predictor does not know it"
                    )
                    w = replace(w, problem="; ".join(p for p in (w.problem, unknown) if p))
                selected = "" if w.labelled or w.kueue else namespace_queue(w.namespace)
                if not w.labelled and not selected:
                    if w.status and not w.kueue:
                        self._write(w, adopt.release_patch(w), errors)
                        self._event(w, "Normal", "Released", f"label {LABEL_QUEUE} removed: released", now)
                    continue
                if w.kueue and not w.labelled:
                    continue  # Kueue's: left alone
                if selected:
                    w = replace(w, queue=selected)
                if not by_label:
                    by_label = _pods_by_owner(pods, {k.pod_label for k in self.kinds})
                mine = by_label.get((kind.pod_label, w.namespace, w.pod_label_value), [])
                self._settle(w, mine, node_types, classes, now, out, errors)
        return out

    def _settle(
        self,
        w: Workload,
        pods: Sequence[PodView],
        node_types: Mapping[str, str],
        classes: Mapping[str, int],
        now: float,
        out: Adoption,
        errors: list[str],
    ) -> None:
        phase = str(w.status.get("phase") or "")
        if w.finished:
            if phase != w.finished:
                self._status(w, {**w.status, "phase": w.finished, "message": w.finish_message}, errors, now)
                self._event(
                    w, "Normal" if w.finished == "Succeeded" else "Warning", w.finished, w.finish_message, now
                )
            return
        if w.problem:
            if not w.suspended:
                self._write(w, adopt.suspend_patch(), errors)
            if phase != "Refused" or w.status.get("message") != w.problem:
                self._status(w, {"phase": "Refused", "queue": w.queue, "message": w.problem}, errors, now)
                self._event(w, "Warning", "Refused", f"perfsched will not run it: {w.problem}", now)
            return
        if not w.suspended and not w.admitted:
            # it started before perfsched saw it (the webhook was down, or the label came later): hold it
            self._write(w, adopt.suspend_patch(), errors)
            self._event(w, "Normal", "Suspended", "suspended until perfsched admits it", now)
            w = replace(w, suspended=True)
        reported = [p.report.progress for p in pods if p.report is not None]
        if w.progress_fraction is None and reported and w.total_work > 1:
            # its workers report as a TrainingJob's do (``perfsched.dev/progress`` on the pods)
            w = replace(w, progress_fraction=min(1.0, max(reported) / w.total_work))
        priority = classes.get(w.priority_class, 0) if w.priority_class else 0
        attained = float(w.status.get("attainedService") or 0.0)
        replicas = int(w.status.get("replicas") or w.replicas)
        job = Job(
            name=w.key,
            submit_time=w.created if w.created is not None else now,
            total_work=w.total_work,
            gpus_per_replica=w.gpus_per_replica,
            min_replicas=w.min_replicas,
            max_replicas=w.max_replicas,
            elastic=w.elastic,
            model=w.model,
            dataset=w.dataset,
            batch_size=w.batch_size,
            precision=w.precision,
            work_unit=WorkUnit.ITERATIONS,
            progress=(w.progress_fraction or 0.0) * w.total_work,
            priority=priority,
            queue=w.queue,
            attained_service=attained,
            restarts=int(w.status.get("restarts") or 0),
            last_change_time=crd.parse_time(w.status.get("admittedTime")) if w.admitted else None,
            user=w.namespace,
        )
        if w.suspended:
            # pods that never ran, deleted by its controller, hold no GPUs a new gang must wait for
            out.accounted.update(p.info.key for p in pods if p.info.phase == "Pending")
            if phase == "Stopped":
                return  # past its backoff limit: suspended until its owner acts
            due = crd.parse_time(w.status.get("nextAttemptTime"))
            if due is not None and now < due:
                return  # backing off after a start timeout: outside the round
            out.workloads[w.key] = w
            out.jobs.append(job)
            return
        if self._timed_out(w, pods, now, out, errors):
            return
        out.workloads[w.key] = w
        alloc = _bound_allocation(w, pods, node_types)
        bound = sum(1 for p in pods if p.info.holds_gpus)
        if alloc is None or bound < replicas:
            out.placing.append(w)  # admitted, pods still being created or placed: reserved, not re-decided
            out.accounted.update(p.info.key for p in pods)
            if alloc is not None:
                out.allocations[f"{w.key}#bound"] = alloc
            return
        out.jobs.append(job)
        out.allocations[w.key] = alloc
        out.accounted.update(p.info.key for p in pods)

    def _timed_out(
        self, w: Workload, pods: Sequence[PodView], now: float, out: Adoption, errors: list[str]
    ) -> bool:
        """Whether admitted ``w`` missed its start timeout: not every pod Running the timeout after its
        admission, whatever the pods say. Then it is suspended again in this round (its pods that never
        ran are released at once; those that run get their grace period from its controller) and requeued
        after an exponential backoff, or, past the backoff limit, left suspended. Before that, the pods'
        own reasons are noted once they have lasted (``PROBLEM_AFTER_S``, at most half the timeout);
        pods Pending with no reason (being bound, containers being created) are never a problem."""
        if w.status.get("startedTime"):
            return False  # it ran: its pods' later failures and restarts are its controller's
        replicas = int(w.status.get("replicas") or w.replicas)
        live = [p for p in pods if p.unfinished and not p.deleting]
        # its GPU pods (a JobSet's launcher is not one of its replicas)
        running = sum(1 for p in live if p.info.phase == "Running" and p.info.gpus > 0) + sum(
            1 for p in pods if p.info.phase == "Succeeded" and p.info.gpus > 0
        )
        if running >= replicas:
            out.started.add(w.key)
            return False
        admitted = crd.parse_time(w.status.get("admittedTime"))
        timeout = float(w.start_timeout_s) if w.start_timeout_s is not None else self.start_timeout_s
        if admitted is None or timeout <= 0:
            return False
        problems = pod_problems(live)
        if now - admitted <= timeout:
            if problems and now - admitted >= min(PROBLEM_AFTER_S, timeout / 2):
                out.problems[w.key] = problems
            return False
        count = int(w.status.get("requeueCount") or 0) + 1
        detail = f"{running}/{replicas} pods running {timeout:.0f} s after its admission"
        if problems:
            detail = f"{detail}: {problems}"
        self._write(w, adopt.suspend_patch(), errors)
        out.accounted.update(p.info.key for p in pods if p.info.phase == "Pending")
        status: dict[str, Any] = {
            k: w.status.get(k) for k in ("queue", "predictor", "restarts", "attainedService")
        }
        last = crd.parse_time(w.status.get("updated"))
        if last is not None and now > last:
            status["attainedService"] = round(
                float(w.status.get("attainedService") or 0.0) + (now - last) * replicas * w.gpus_per_replica,
                1,
            )
        status["requeueCount"] = count
        limit = self.backoff_limit
        if count > limit:
            msg = (
                f"backoff limit {limit} exceeded after {count} start timeouts: stays suspended (fix the job "
                f"and remove the {ANNOTATION_STATUS} annotation to retry); last: {detail}"
            )
            self._status(w, {**status, "phase": "Stopped", "message": msg}, errors, now)
            self._event(w, "Warning", "StartTimeoutExceeded", msg, now)
            return True
        wait = min(self.requeue_backoff_max_s, self.requeue_backoff_s * 2 ** (count - 1))
        due = crd.rfc3339(now + wait)
        msg = (
            f"{detail}; suspended and requeued (start timeout {count} of backoff limit {limit}), "
            f"next attempt at {due} (in {wait:.0f} s)"
        )
        self._status(w, {**status, "phase": "Waiting", "nextAttemptTime": due, "message": msg}, errors, now)
        self._event(w, "Warning", "StartTimeout", msg, now)
        return True

    def reserve(
        self, adoption: Adoption, nodes: Sequence[Node], taken: Mapping[str, Allocation]
    ) -> dict[str, Allocation]:
        """Hold the GPUs of admitted workloads whose pods are not all bound, on nodes of their GPU type
        with room (first fit), so the policy does not give them away while kube-scheduler places them."""
        free = {n.name: n.capacity_for_jobs for n in nodes}
        for alloc in taken.values():
            for node, r in alloc.replicas_per_node:
                if node in free:
                    free[node] -= r * alloc.gpus_per_replica
        out: dict[str, Allocation] = {}
        for w in adoption.placing:
            gpu_type = str(w.status.get("gpuType") or "")
            bound = adoption.allocations.get(f"{w.key}#bound")
            missing = int(w.status.get("replicas") or w.replicas) - (bound.replicas if bound else 0)
            per_node: dict[str, int] = {}
            planned = str(w.status.get("plannedNode") or "")
            # its planned node first (where its pods are sent), then first fit
            for n in sorted(nodes, key=lambda n: (n.name != planned, n.name)):
                while missing > 0 and n.gpu_type == gpu_type and free.get(n.name, 0) >= w.gpus_per_replica:
                    free[n.name] -= w.gpus_per_replica
                    per_node[n.name] = per_node.get(n.name, 0) + 1
                    missing -= 1
            if per_node:
                out[f"{w.key}#planned"] = Allocation.of(
                    f"{w.key}#planned", gpu_type, w.gpus_per_replica, per_node
                )
        return out

    # --- after the policy --------------------------------------------------------------------------------

    def apply(
        self,
        adoption: Adoption,
        result: RoundResult,
        nodes: Sequence[Node],
        predicted: Mapping[str, float],
        now: float,
        report_actions: dict[str, list[str]],
        errors: list[str],
    ) -> None:
        """Write the round's decisions for the adopted workloads (see the module docstring)."""
        actions = {a.job: a for a in result.actions}
        products: dict[str, set[str]] = {}
        for n in nodes:
            products.setdefault(n.gpu_type, set()).add(n.gpu_product or n.gpu_type)
        for key, w in adoption.workloads.items():
            if not self.may_act():
                return
            act = actions.get(key)
            waiting = result.waiting.get(key)
            try:
                self._apply_one(
                    w,
                    act,
                    waiting.reason if waiting else "",
                    products,
                    predicted.get(key),
                    now,
                    report_actions,
                    problems=adoption.problems.get(key, ""),
                    started=key in adoption.started,
                )
            except PerfschedError as exc:
                log.warning(
                    "could not update adopted job; retrying next round", extra={"job": key, "error": str(exc)}
                )
                errors.append(f"{key}: apply: {exc}")

    def _apply_one(
        self,
        w: Workload,
        act: Action | None,
        why_waiting: str,
        products: Mapping[str, set[str]],
        predicted: float | None,
        now: float,
        report_actions: dict[str, list[str]],
        *,
        problems: str = "",
        started: bool = False,
    ) -> None:
        status: dict[str, Any] = {
            "queue": w.queue,
            "attainedService": float(w.status.get("attainedService") or 0.0),
            "updated": crd.rfc3339(now),
        }
        last = crd.parse_time(w.status.get("updated"))
        if w.admitted and last is not None and now > last:
            replicas = int(w.status.get("replicas") or w.replicas)
            status["attainedService"] = round(
                status["attainedService"] + (now - last) * replicas * w.gpus_per_replica, 1
            )
        if w.agnostic:
            status["predictor"] = w.agnostic
        if predicted:
            status["predictedThroughput"] = round(predicted, 4)
        elif w.admitted and w.status.get("predictedThroughput") is not None:
            # no prediction this round (its pods are still being placed): the admission's still holds
            status["predictedThroughput"] = w.status["predictedThroughput"]
        restarts = int(w.status.get("restarts") or 0)
        if restarts:
            status["restarts"] = restarts
        if w.status.get("requeueCount"):
            status["requeueCount"] = w.status["requeueCount"]  # start timeouts so far, against the limit
        kind = act.kind if act is not None else None
        if kind is ActionKind.START and act is not None and act.after is not None:
            after = act.after
            # the node holding most of the planned gang (ties: the first by name)
            planned = min(after.replicas_per_node, key=lambda nr: (-nr[1], nr[0]), default=("", 0))[0]
            for patch in adopt.admit_patches(
                w,
                after.gpu_type,
                sorted(products.get(after.gpu_type, ())),
                after.replicas,
                admission=restarts + 1,
                planned_node=planned,
            ):
                self.api.patch_workload(w.kind, w.namespace, w.name, patch)
            status.update(
                phase="Running",
                gpuType=after.gpu_type,
                replicas=after.replicas,
                plannedNode=planned,
                admittedTime=crd.rfc3339(now),
                admittedMessage=act.reason,
                message=act.reason,
            )
            report_actions.setdefault("start", []).append(w.key)
            self._put_status(w, status)
            self._event(
                w, "Normal", "Admitted", f"admitted on {after.replicas} x {after.gpu_type}: {act.reason}", now
            )
            return
        if kind in (ActionKind.PREEMPT, ActionKind.RESIZE) and act is not None:
            self.api.patch_workload(w.kind, w.namespace, w.name, adopt.suspend_patch())
            word = "preempted" if kind is ActionKind.PREEMPT else "resizing"
            # counted as a TrainingJob's restarts are: each one raises the bar for moving it again
            status.update(phase="Waiting", message=f"{word}: {act.reason}", restarts=restarts + 1)
            report_actions.setdefault(kind.value, []).append(w.key)
            self._put_status(w, status)
            self._event(
                w,
                "Normal",
                "Preempted" if kind is ActionKind.PREEMPT else "Resizing",
                f"re-suspended: {act.reason}",
                now,
            )
            return
        if w.admitted:
            message = w.status.get("message")
            if problems:
                message = f"{_NOT_STARTING}: {problems}"
            elif str(message or "").startswith(_NOT_STARTING):
                message = w.status.get("admittedMessage") or message
            status.update(
                phase="Running",
                gpuType=w.status.get("gpuType"),
                replicas=w.status.get("replicas"),
                plannedNode=w.status.get("plannedNode"),
                admittedTime=w.status.get("admittedTime"),
                admittedMessage=w.status.get("admittedMessage"),
                startedTime=w.status.get("startedTime") or (crd.rfc3339(now) if started else None),
                message=message,
            )
            if w.eta_seconds is not None:
                status["etaSeconds"] = w.eta_seconds
            if w.progress_fraction is not None:
                status["progressPercent"] = round(100.0 * w.progress_fraction, 1)
            self._put_status(w, status)
            if problems and not str(w.status.get("message") or "").startswith(_NOT_STARTING):
                self._event(w, "Warning", "PodsNotStarting", str(message), now)
            return
        message = why_waiting or "waiting for the next round"
        status.update(phase="Waiting", message=message)
        changed = w.status.get("phase") != "Waiting" or w.status.get("message") != message
        self._put_status(w, status)
        if changed:
            self._event(w, "Normal", "Waiting", message, now)

    # --- writes ------------------------------------------------------------------------------------------

    def _put_status(self, w: Workload, status: Mapping[str, Any]) -> None:
        """Rewrite the status annotation when something besides its bookkeeping changed (a running one's
        also every ``STATUS_REFRESH_S``, for its attained service and progress)."""
        skip = ("updated", "attainedService", "progressPercent", "etaSeconds")
        same = {k: v for k, v in status.items() if k not in skip and v is not None} == {
            k: v for k, v in w.status.items() if k not in skip and v is not None
        }
        last, now = crd.parse_time(w.status.get("updated")), crd.parse_time(status.get("updated"))
        if same and (w.status.get("phase") != "Running" or (last and now and now - last < STATUS_REFRESH_S)):
            return
        self.api.patch_workload(w.kind, w.namespace, w.name, adopt.status_patch(status))

    def _status(self, w: Workload, status: Mapping[str, Any], errors: list[str], now: float) -> None:
        self._write(w, adopt.status_patch({**status, "updated": crd.rfc3339(now)}), errors)

    def _write(self, w: Workload, patch: Mapping[str, Any], errors: list[str]) -> None:
        if not self.may_act():
            return
        try:
            self.api.patch_workload(w.kind, w.namespace, w.name, patch)
        except PerfschedError as exc:
            log.warning(
                "could not update adopted job; retrying next round", extra={"job": w.key, "error": str(exc)}
            )
            errors.append(f"{w.key}: settle: {exc}")

    def _event(self, w: Workload, type_: str, reason: str, message: str, now: float) -> None:
        if not self.may_act():
            return
        body = adopt.workload_event(
            w, type_=type_, reason=reason, message=message, now=now, instance=self.instance
        )
        try:
            self.api.create_event(w.namespace, body)
        except PerfschedError as exc:  # events are best effort
            log.warning("could not record event", extra={"reason": reason, "error": str(exc)})
