"""One operator round: list the cluster, observe every TrainingJob, run the policy, apply, write status.

Shell module (I/O through a ``KubeApi``; the clock, policy and oracle are injected). ``Operator.run_round``
is the whole lifecycle brain, in numbered phases:

1. **List** TrainingJobs, pods, nodes and PriorityClasses (everything is rebuilt from the API each round:
   an operator restart loses nothing and does not restart running jobs).
2. **Observe** each job (``scheduler.operator.observe``): its gang's state, progress and checkpoint.
3. **Settle** what needs no policy: a finished gang completes the job; a crashed one counts a failure and
   is torn down (or the job Fails after the backoff limit); a gang that lost a pod or node, or was not
   scheduled in time, is torn down; leftover pods of older generations are deleted; a job whose spec
   cannot be scheduled as written gets a condition naming the problem.
4. **Decide**: ``run_round(snapshot, jobs, policy, oracle, costs=...)`` on the jobs that are waiting or
   running. GPUs of pods still draining (or not ours) are held by pseudo-allocations outside the round.
5. **Apply** the actions: START writes the intent (``status.allocation``, a new ``gangGeneration``) then
   creates the gang; RESIZE and PREEMPT write the intent (no gang) then delete the pods with the job's
   checkpoint grace period, and the job restarts from its checkpoint once they are gone; COMPLETE.
6. **Report**: status (phase, conditions saying why, allocation, predicted and observed throughput,
   progress, ETA, counts), Events for every decision, metrics; observed throughput feeds the online
   correction of the predictor.

Writing the intent before acting makes every step safe to repeat: pod names are deterministic, a gang
half-created by a leader that died is completed by the next one, and pods the intent does not name are
deleted. One job's API failure is logged and retried next round; it does not stop the others.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

from scheduler import metrics
from scheduler.core.decisions import Action, ActionKind, RoundResult, Unschedulable
from scheduler.core.errors import PerfschedError
from scheduler.core.placement import spread_of
from scheduler.core.protocols import Clock, Policy, ThroughputOracle
from scheduler.core.round import RoundCosts, run_round
from scheduler.core.types import Allocation, ClusterSnapshot, Job, Node, PlacementShape
from scheduler.k8s import crd
from scheduler.k8s.actuator import Actuator, NotLeader
from scheduler.k8s.codec import CodecError, decode_node
from scheduler.k8s.kubeapi import KubeApi, Obj
from scheduler.operator.observe import GangState, JobView, PodView, held_allocations, observe_job, pod_view
from scheduler.operator.status import get_condition, set_condition, status_patch

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class OperatorConfig:
    """The operator's knobs (from ``Settings``; see ``scheduler/settings.py`` for each one's meaning)."""

    namespace: str = ""
    costs: RoundCosts = field(default_factory=RoundCosts)
    backoff_limit: int = 3
    gang_start_timeout_s: float = 300.0
    master_port: int = 29500
    instance: str = ""
    api_concurrency: int = 8


@dataclass(slots=True)
class RoundReport:
    """What one round did (for logs, tests and the benchmark)."""

    now: float
    skipped: bool = False
    actions: dict[str, list[str]] = field(default_factory=dict)
    phases: dict[str, str] = field(default_factory=dict)
    waiting: dict[str, str] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    list_seconds: float = 0.0
    policy_seconds: float = 0.0
    apply_seconds: float = 0.0
    total_seconds: float = 0.0

    def did(self, kind: str, job: str) -> bool:
        return job in self.actions.get(kind, [])


class _SystemClock:
    def now(self) -> float:
        return time.time()


def _num(x: float) -> str:
    return f"{x:.0f}" if float(x).is_integer() else f"{x:.1f}"


def _describe_alloc(alloc: Allocation) -> str:
    nodes = ", ".join(f"{n} x{r}" if r > 1 else n for n, r in alloc.replicas_per_node)
    return f"{alloc.replicas} x {alloc.gpus_per_replica} {alloc.gpu_type} GPU(s) on {nodes}"


def _placing(view: JobView) -> bool:
    """Whether some replica of the job's gang is not bound to a node yet (or not even created)."""
    if view.state is GangState.MISSING:
        return True
    return any(not p.info.node_name for p in view.cur if p.unfinished and not p.deleting)


def _planned_reservations(
    placing: Sequence[tuple[JobView, Job]], nodes: Sequence[Node], taken: Mapping[str, Allocation]
) -> dict[str, Allocation]:
    """Hold the planned node of each unbound replica of gangs being placed, where it still has room.

    Bound pods are already held where they are (``held_allocations``). kube-scheduler may bind a replica
    elsewhere than planned, so a planned node can be short of room: that replica is not reserved (it
    lands where the scheduler finds space), which keeps the snapshot within every node's capacity.
    """
    from scheduler.k8s.actuator import replica_nodes
    from scheduler.operator.observe import intended_allocation

    free = {n.name: n.capacity_for_jobs for n in nodes}
    for alloc in taken.values():
        for node, r in alloc.replicas_per_node:
            if node in free:
                free[node] -= r * alloc.gpus_per_replica
    types = {n.name: n.gpu_type for n in nodes}
    out: dict[str, Allocation] = {}
    for view, job in placing:
        intent = intended_allocation(view.key, view.status)
        plan = replica_nodes(intent) if intent is not None else []
        present = {p.info.replica_index: p for p in view.cur if p.unfinished and not p.deleting}
        for rank in range(view.expected_replicas):
            pod = present.get(rank)
            if pod is not None and pod.info.node_name:
                continue  # bound: held where it is
            node = pod.info.planned_node if pod is not None else (plan[rank] if rank < len(plan) else "")
            gpus = job.gpus_per_replica
            if node in free and free[node] >= gpus:
                free[node] -= gpus
                name = f"{view.key}#planned-{rank}"
                out[name] = Allocation.of(name, types[node], gpus, {node: 1})
    return out


class Operator:
    """The TrainingJob lifecycle loop's body (see the module docstring); one round at a time."""

    def __init__(
        self,
        api: KubeApi,
        policy: Policy,
        oracle: ThroughputOracle,
        *,
        config: OperatorConfig | None = None,
        clock: Clock | None = None,
        may_act: Callable[[], bool] = lambda: True,
        known_model: Callable[[str], bool] | None = None,
    ) -> None:
        self.api = api
        self.policy = policy
        self.oracle = oracle
        self.config = config or OperatorConfig()
        self.clock: Clock = clock or _SystemClock()
        self.may_act = may_act
        self.known_model = known_model
        self.actuator = Actuator(
            api, may_act=may_act, master_port=self.config.master_port, instance=self.config.instance
        )
        # Only for metrics and de-duplicating observations; never needed for correctness.
        self._observed_report_time: dict[str, float] = {}
        self._learned: list[tuple[Job, PlacementShape, float]] = []
        self._events: list[tuple[Mapping[str, Any], str, str, str, float]] = []
        self._prediction: dict[str, float] = {}

    # --- phase 1: list ---------------------------------------------------------------------------------

    def _list(self) -> tuple[list[Obj], list[Obj], list[Obj], dict[str, int]]:
        tjs = self.api.list_trainingjobs(self.config.namespace)
        pods = self.api.list_pods("")
        nodes = self.api.list_nodes()
        classes: dict[str, int] = {}
        for pc in self.api.list_priority_classes():
            name = (pc.get("metadata") or {}).get("name")
            if name:
                classes[str(name)] = int(pc.get("value") or 0)
        return tjs, pods, nodes, classes

    def _nodes(self, raw: Sequence[Obj]) -> list[Node]:
        out: list[Node] = []
        unknown: Counter[str] = Counter()
        for obj in raw:
            try:
                node = decode_node(obj)
            except CodecError as exc:
                log.warning("skipping node that does not decode", extra={"error": str(exc)})
                continue
            if node.gpus <= 0 or not node.gpu_type:
                continue
            if node.gpu_type not in crd.CANONICAL_GPU_TYPES:
                unknown[node.gpu_product] += 1
            out.append(node)
        metrics.OPERATOR_UNKNOWN_GPU_PRODUCTS.clear()
        for product, count in unknown.items():
            metrics.OPERATOR_UNKNOWN_GPU_PRODUCTS.labels(product=product).set(count)
        return out

    # --- the round -------------------------------------------------------------------------------------

    def run_round(self) -> RoundReport:
        """Run one round (phases 1-6). Returns a report; raises only if listing the cluster fails."""
        started = time.perf_counter()
        now = self.clock.now()
        report = RoundReport(now=now)
        if not self.may_act():
            report.skipped = True
            metrics.OPERATOR_ROUNDS.labels(result="skipped_not_leader").inc()
            return report
        try:
            self._round(now, report)
        except NotLeader:
            report.skipped = True
            metrics.OPERATOR_ROUNDS.labels(result="skipped_not_leader").inc()
            log.warning("lost leadership during a round; stopped writing")
            return report
        except Exception:
            metrics.OPERATOR_ROUNDS.labels(result="error").inc()
            raise
        report.total_seconds = time.perf_counter() - started
        metrics.OPERATOR_ROUNDS.labels(result="error" if report.errors else "ok").inc()
        metrics.OPERATOR_ROUND_SECONDS.labels(phase="total").observe(report.total_seconds)
        phases = Counter(report.phases.values())
        for phase in crd.PHASES:
            metrics.OPERATOR_JOBS.labels(phase=phase).set(phases.get(phase, 0))
        return report

    def _round(self, now: float, report: RoundReport) -> None:
        self._events = []
        t_list = time.perf_counter()
        tjs, raw_pods, raw_nodes, classes = self._list()
        report.list_seconds = time.perf_counter() - t_list
        nodes = self._nodes(raw_nodes)
        node_types = {n.name: n.gpu_type for n in nodes}
        cluster_types = {n.gpu_type for n in nodes}
        views_all = [v for v in (pod_view(p) for p in raw_pods) if v is not None]
        by_job: dict[str, list[PodView]] = {}
        for pv in views_all:
            if pv.info.job:
                by_job.setdefault(pv.info.job, []).append(pv)

        # --- phase 2 and 3: observe and settle -----------------------------------------------------------
        round_jobs: list[tuple[JobView, Job]] = []
        placing: list[tuple[JobView, Job]] = []
        allocations: dict[str, Allocation] = {}
        accounted: set[str] = set()
        for obj in sorted(
            tjs,
            key=lambda o: (
                crd.parse_time((o.get("metadata") or {}).get("creationTimestamp")) or 0,
                crd.job_key(o),
            ),
        ):
            key = crd.job_key(obj)
            spec = crd.parse_spec(obj)
            converted = crd.trainingjob_to_job(
                obj,
                now=now,
                known_model=self.known_model,
                cluster_gpu_types=cluster_types,
                priority_classes=classes,
            )
            total = spec.work.total if isinstance(spec, crd.TrainingJobSpec) else None
            view = observe_job(
                obj,
                by_job.get(key, []),
                now=now,
                total_work=total,
                node_types=node_types,
                start_timeout_s=self.config.gang_start_timeout_s,
            )
            try:
                entry = self._settle(view, spec, converted, now, report)
            except NotLeader:
                raise
            except PerfschedError as exc:
                self._api_error(report, key, "settle", exc)
                entry = None
            if entry is None:
                continue
            job, alloc = entry
            if alloc is not None and _placing(view):
                # kube-scheduler is still placing this gang: the policy leaves it alone this round
                placing.append((view, job))
                continue
            round_jobs.append((view, job))
            if alloc is not None:
                allocations[key] = alloc
                accounted.update(p.info.key for p in view.cur if p.unfinished and not p.deleting)

        allocations.update(held_allocations(views_all, accounted, node_types))
        allocations.update(_planned_reservations(placing, nodes, allocations))
        snapshot = ClusterSnapshot(now=now, nodes=tuple(nodes), allocations=allocations)

        # --- phase 4: decide -------------------------------------------------------------------------------
        jobs = [job for _, job in round_jobs]
        t0 = time.perf_counter()
        try:
            result = run_round(snapshot, jobs, self.policy, self.oracle, costs=self.config.costs)
        except PerfschedError as exc:
            log.error("round failed: the policy's answer was refused", extra={"error": str(exc)})
            report.errors.append(f"policy: {exc}")
            for view, _ in round_jobs:
                report.phases[view.key] = view.status.phase or "Pending"
            self._flush_events(None)
            return
        report.policy_seconds = time.perf_counter() - t0
        metrics.OPERATOR_ROUND_SECONDS.labels(phase="policy").observe(report.policy_seconds)

        # --- phase 5 and 6: apply and report --------------------------------------------------------------
        actions = {a.job: a for a in result.actions}
        node_map = snapshot.node_map()
        t_apply = time.perf_counter()
        predicted = self._predict([*round_jobs, *placing], actions, node_map)
        self._learned.clear()

        def apply(view: JobView, job: Job) -> None:
            try:
                self._apply(
                    view, job, actions.get(view.key), result, predicted.get(view.key), node_map, now, report
                )
            except NotLeader:
                raise
            except PerfschedError as exc:
                self._api_error(report, view.key, "apply", exc)

        # Jobs are independent: their API writes go out concurrently (the writes of one job stay in order).
        # Only I/O runs in the pool; learning from observations happens after it, in this thread.
        for view, _job in placing:
            alloc = view.allocation or self._intent(view)
            actions[view.key] = Action(
                ActionKind.KEEP, view.key, alloc, alloc, "starting: kube-scheduler is placing the gang"
            )
        everyone = [*round_jobs, *placing]
        if self.config.api_concurrency > 1 and len(everyone) > 1:
            with ThreadPoolExecutor(max_workers=self.config.api_concurrency) as pool:
                for fut in [pool.submit(apply, view, job) for view, job in everyone]:
                    fut.result()
                self._flush_events(pool)
        else:
            for view, job in everyone:
                apply(view, job)
            self._flush_events(None)
        report.apply_seconds = time.perf_counter() - t_apply
        for args in self._learned:
            self._observe(*args)
        self._cluster_gauges(nodes, list(actions.values()), allocations, tjs, now, report)

    @staticmethod
    def _cluster_gauges(
        nodes: Sequence[Node],
        actions: Sequence[Action],
        before: Mapping[str, Allocation],
        tjs: Sequence[Obj],
        now: float,
        report: RoundReport,
    ) -> None:
        """GPU capacity and TrainingJob allocations by type after this round, and the oldest wait."""
        capacity: dict[str, int] = {}
        for n in nodes:
            capacity[n.gpu_type] = capacity.get(n.gpu_type, 0) + n.capacity_for_jobs
        final = {k: a for k, a in before.items() if not k.endswith("#held")}
        for act in actions:
            if act.after is None:
                final.pop(act.job, None)
            else:
                final[act.job] = act.after
        allocated: dict[str, int] = {}
        for alloc in final.values():
            allocated[alloc.gpu_type] = allocated.get(alloc.gpu_type, 0) + alloc.total_gpus
        oldest = 0.0
        for obj in tjs:
            key = crd.job_key(obj)
            if key in report.waiting and not (obj.get("status") or {}).get("admittedTime"):
                created = crd.parse_time((obj.get("metadata") or {}).get("creationTimestamp"))
                if created is not None:
                    oldest = max(oldest, now - created)
        metrics.record_cluster_gauges(capacity, allocated, oldest)

    def _api_error(self, report: RoundReport, key: str, what: str, exc: Exception) -> None:
        log.warning(
            "could not update job; will retry next round", extra={"job": key, "step": what, "error": str(exc)}
        )
        metrics.OPERATOR_API_ERRORS.labels(operation=what).inc()
        report.errors.append(f"{key}: {what}: {exc}")

    # --- phase 3: settle -------------------------------------------------------------------------------

    def _settle(
        self,
        view: JobView,
        spec: crd.TrainingJobSpec | Unschedulable,
        converted: Job | Unschedulable,
        now: float,
        report: RoundReport,
    ) -> tuple[Job, Allocation | None] | None:
        """Handle what needs no policy; return the job (and its allocation) if it takes part in the round."""
        st = view.state
        if st is GangState.TERMINAL:
            # Workers of a finished job exit by themselves; whatever still runs a grace period after the
            # end (a replica that hangs in its final barrier) is stopped. A failed job's pods go at once.
            ended = crd.parse_time(view.status.completion_time)
            grace = spec.checkpoint_grace_seconds if isinstance(spec, crd.TrainingJobSpec) else 30
            if view.status.phase != "Succeeded" or ended is None or now >= ended + grace:
                self._delete(view, view.stale, grace=True)
            report.phases[view.key] = view.status.phase or "Pending"
            return None
        if isinstance(converted, Unschedulable) or isinstance(spec, Unschedulable):
            problem = converted if isinstance(converted, Unschedulable) else spec
            assert isinstance(problem, Unschedulable)
            self._unschedulable(view, problem, now, report)
            return None
        if st is GangState.COMPLETED:
            self._complete(view, spec, converted, now, report)
            return None
        if st is GangState.CRASHED:
            self._crashed(view, spec, now, report)
            return None
        if st in (GangState.BROKEN, GangState.STUCK):
            reason = "GangBroken" if st is GangState.BROKEN else "GangNotScheduled"
            self._teardown(
                view,
                spec,
                now,
                report,
                phase="Pending",
                reason=reason,
                message=f"{view.detail}; restarting from the last checkpoint",
            )
            return None
        if st is GangState.DRAINING:
            self._delete(view, view.stale, grace=True)
            self._draining_status(view, spec, now, report)
            return None
        if st is GangState.MISSING:
            alloc = self._intent(view)
            if alloc is None:
                return None
            self.actuator.start_gang(
                view.obj, spec, alloc, generation=view.generation, start_progress=view.start_progress
            )
            self._delete(view, view.stale, grace=True)
            return self._job_for_round(view, converted, now), alloc
        # IDLE, STARTING, RUNNING
        self._delete(view, view.stale, grace=True)
        return self._job_for_round(view, converted, now), view.allocation

    @staticmethod
    def _intent(view: JobView) -> Allocation | None:
        from scheduler.operator.observe import intended_allocation

        return intended_allocation(view.key, view.status)

    def _job_for_round(self, view: JobView, job: Job, now: float) -> Job:
        """The core Job with what the pods say: progress, checkpoint, attained GPU-seconds."""
        running = view.state is GangState.RUNNING or view.state is GangState.STARTING
        progress = view.progress if running else view.checkpoint
        return replace(
            job,
            progress=progress,
            checkpoint_progress=min(view.checkpoint, progress),
            attained_service=self._attained(view, now),
        )

    def _attained(self, view: JobView, now: float) -> float:
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
        intent = self._intent(view)
        if intent is not None and view.state in (GangState.COMPLETED, GangState.CRASHED, GangState.BROKEN):
            return st.attained_service + dt * intent.total_gpus
        return st.attained_service

    def _delete(self, view: JobView, pods: Sequence[PodView], *, grace: bool) -> None:
        spec = crd.parse_spec(view.obj)
        seconds = spec.checkpoint_grace_seconds if isinstance(spec, crd.TrainingJobSpec) else 30
        names = [p.name for p in pods if p.unfinished and not p.deleting]
        if names:
            self.actuator.delete_pods(view.namespace, names, seconds if grace else 0)

    # --- status helpers --------------------------------------------------------------------------------

    def _base_status(self, view: JobView, spec: crd.TrainingJobSpec, now: float) -> dict[str, Any]:
        """The status fields every round recomputes, on top of the stored ones."""
        old = dict(view.obj.get("status") or {})
        new: dict[str, Any] = {k: v for k, v in old.items() if k != "placement"}
        total = spec.work.total
        meta = view.obj["metadata"]
        pct = crd.progress_percent(view.progress, total)
        new.update(
            {
                "selector": f"{crd.LABEL_JOB_NAME}={meta['name']}",
                "workUnit": spec.work.unit.value,
                "totalWork": total,
                "progress": view.progress,
                "checkpointProgress": view.checkpoint,
                "progressPercent": pct,
                "progressPercentText": f"{pct:.1f}%",
                "gangGeneration": view.generation,
            }
        )
        if meta.get("generation") is not None:
            new["observedGeneration"] = int(meta["generation"])
        new["conditions"] = [dict(c) for c in old.get("conditions") or []]
        return new

    def _write(self, view: JobView, new: Mapping[str, Any]) -> None:
        old = view.obj.get("status") or {}
        patch = status_patch(old, new)
        if patch:
            self.actuator.patch_status(view.obj, patch)

    def _event(self, view: JobView, type_: str, reason: str, message: str, now: float) -> None:
        """Queue an Event; the round sends them after every job's pods and status (they are slower to
        matter than a gang waiting for its pods)."""
        self._events.append((view.obj, type_, reason, message, now))

    def _flush_events(self, pool: ThreadPoolExecutor | None) -> None:
        events, self._events = self._events, []

        def send(e: tuple[Mapping[str, Any], str, str, str, float]) -> None:
            obj, type_, reason, message, now = e
            self.actuator.event(obj, type_=type_, reason=reason, message=message, now=now)

        if pool is None:
            for e in events:
                send(e)
        else:
            for fut in [pool.submit(send, e) for e in events]:
                fut.result()

    def _count(self, report: RoundReport, kind: str, key: str) -> None:
        report.actions.setdefault(kind, []).append(key)
        metrics.OPERATOR_ACTIONS.labels(kind=kind).inc()

    # --- settled transitions ---------------------------------------------------------------------------

    def _unschedulable(self, view: JobView, problem: Unschedulable, now: float, report: RoundReport) -> None:
        old = dict(view.obj.get("status") or {})
        new: dict[str, Any] = {k: v for k, v in old.items() if k != "placement"}
        conds = [dict(c) for c in old.get("conditions") or []]
        reason = "Unschedulable" if problem.resolvable else "InvalidSpec"
        prev = get_condition(old, "Admitted")
        set_condition(conds, "Admitted", False, reason, problem.reason, now=now)
        new.update({"conditions": conds, "phase": "Pending", "reason": reason, "message": problem.reason})
        new.pop("allocation", None)
        new.pop("accountedTime", None)
        new.pop("estimatedCompletion", None)
        meta = view.obj["metadata"]
        new["selector"] = f"{crd.LABEL_JOB_NAME}={meta['name']}"
        if view.cur or view.stale:
            # the spec became unschedulable under a running gang (edited): stop it, keep the checkpoint
            self._write(view, new)
            self._delete(view, [*view.cur, *view.stale], grace=True)
        else:
            self._write(view, new)
        if prev is None or prev.get("message") != problem.reason:
            self._event(view, "Warning", reason, problem.reason, now)
        report.phases[view.key] = "Pending"
        report.waiting[view.key] = problem.reason

    def _complete(
        self, view: JobView, spec: crd.TrainingJobSpec, job: Job, now: float, report: RoundReport
    ) -> None:
        new = self._base_status(view, spec, now)
        total = spec.work.total
        new.update(
            {
                "phase": "Succeeded",
                "reason": "Completed",
                "message": f"all {_num(total)} {spec.work.unit.value} done",
                "progress": total,
                "checkpointProgress": total,
                "progressPercent": 100.0,
                "progressPercentText": "100.0%",
                "completionTime": crd.rfc3339(now),
                "attainedService": self._attained(view, now),
            }
        )
        if view.observed_throughput:
            new["observedThroughput"] = view.observed_throughput
        for k in ("allocation", "accountedTime", "estimatedCompletion"):
            new.pop(k, None)
        conds = new["conditions"]
        set_condition(conds, "Running", False, "Completed", "the job finished", now=now)
        set_condition(conds, "Succeeded", True, "Completed", new["message"], now=now)
        self._write(view, new)
        # the gang's pods are left to exit 0 on their own (see the TERMINAL case in _settle)
        self._delete(view, view.stale, grace=True)
        self.actuator.delete_service(view.obj)
        created = crd.parse_time(view.obj["metadata"].get("creationTimestamp"))
        jct = now - created if created is not None else None
        if jct is not None:
            metrics.OPERATOR_JCT_SECONDS.observe(jct)
        if job.deadline is not None:
            metrics.OPERATOR_DEADLINES.labels(outcome="met" if now <= job.deadline else "missed").inc()
        msg = new["message"] + (f" in {jct:.0f} s" if jct is not None else "")
        self._event(view, "Normal", "Succeeded", msg, now)
        self._count(report, "complete", view.key)
        report.phases[view.key] = "Succeeded"

    def _crashed(self, view: JobView, spec: crd.TrainingJobSpec, now: float, report: RoundReport) -> None:
        failures = view.status.failures + 1
        limit = self.config.backoff_limit
        if failures > limit:
            new = self._base_status(view, spec, now)
            msg = f"backoff limit {limit} exceeded after {failures} worker failures; last: {view.detail}"
            new.update(
                {"phase": "Failed", "reason": "BackoffLimitExceeded", "message": msg, "failures": failures}
            )
            new["completionTime"] = crd.rfc3339(now)
            for k in ("allocation", "accountedTime", "estimatedCompletion"):
                new.pop(k, None)
            conds = new["conditions"]
            set_condition(conds, "Running", False, "WorkerFailed", view.detail, now=now)
            set_condition(conds, "Failed", True, "BackoffLimitExceeded", msg, now=now)
            self._write(view, new)
            self._delete(view, [p for p in view.cur if p.unfinished], grace=True)
            self._delete(view, view.stale, grace=True)
            self.actuator.delete_service(view.obj)
            self._event(view, "Warning", "Failed", msg, now)
            self._count(report, "fail", view.key)
            report.phases[view.key] = "Failed"
            return
        msg = (
            f"{view.detail}; restarting from the last checkpoint (failure {failures}, backoff limit {limit})"
        )
        self._teardown(
            view, spec, now, report, phase="Pending", reason="WorkerFailed", message=msg, failures=failures
        )

    def _teardown(
        self,
        view: JobView,
        spec: crd.TrainingJobSpec,
        now: float,
        report: RoundReport,
        *,
        phase: str,
        reason: str,
        message: str,
        failures: int | None = None,
    ) -> None:
        """Stop the gang (intent first: no allocation), keeping progress up to the checkpoint."""
        new = self._base_status(view, spec, now)
        new.update({"phase": phase, "reason": reason, "message": message, "lastChangeTime": crd.rfc3339(now)})
        new["attainedService"] = self._attained(view, now)
        if failures is not None:
            new["failures"] = failures
        for k in (
            "allocation",
            "accountedTime",
            "estimatedCompletion",
            "observedThroughput",
            "predictedThroughput",
        ):
            new.pop(k, None)
        conds = new["conditions"]
        set_condition(conds, "Running", False, reason, message, now=now)
        set_condition(conds, "Admitted", False, reason, message, now=now)
        self._write(view, new)
        self._delete(view, [p for p in view.cur if p.unfinished], grace=True)
        self._delete(view, view.stale, grace=True)
        self._event(view, "Warning", reason, message, now)
        self._count(report, "restart", view.key)
        report.phases[view.key] = phase

    def _draining_status(
        self, view: JobView, spec: crd.TrainingJobSpec, now: float, report: RoundReport
    ) -> None:
        new = self._base_status(view, spec, now)
        left = len(view.draining) + len(view.stale)
        msg = f"waiting for {left} pod(s) of the previous gang to checkpoint and exit"
        phase = view.status.phase if view.status.phase in ("Resizing", "Preempted") else "Pending"
        new["phase"] = phase
        conds = new["conditions"]
        set_condition(conds, "Running", False, "Draining", msg, now=now)
        new.pop("accountedTime", None)
        self._write(view, new)
        report.phases[view.key] = phase
        report.waiting[view.key] = msg

    # --- phase 5 and 6 ---------------------------------------------------------------------------------

    def _predict(
        self,
        round_jobs: Sequence[tuple[JobView, Job]],
        actions: Mapping[str, Action],
        node_map: Mapping[str, Node],
    ) -> dict[str, float]:
        """Predicted throughput of each job's allocation after this round's actions, in one oracle call."""
        queries: list[tuple[str, Job, Allocation]] = []
        for view, job in round_jobs:
            a = actions.get(view.key)
            alloc = a.after if a is not None else view.allocation
            if alloc is not None and a is not None and a.kind in (ActionKind.START, ActionKind.KEEP):
                queries.append((view.key, job, alloc))
        if not queries:
            return {}
        try:
            values = self.oracle.throughput([(job, spread_of(alloc, node_map)) for _, job, alloc in queries])
        except Exception as exc:  # a broken predictor must not stop the lifecycle
            log.warning("throughput prediction failed", extra={"error": str(exc)})
            return {}
        return {key: v for (key, _, _), v in zip(queries, values, strict=True)}

    def _apply(
        self,
        view: JobView,
        job: Job,
        action: Action | None,
        result: RoundResult,
        predicted: float | None,
        node_map: Mapping[str, Node],
        now: float,
        report: RoundReport,
    ) -> None:
        spec = crd.parse_spec(view.obj)
        assert isinstance(spec, crd.TrainingJobSpec)
        kind = action.kind if action is not None else None
        if kind is ActionKind.START:
            assert action is not None and action.after is not None
            self._start(view, spec, job, action, predicted, now, report)
        elif kind is ActionKind.RESIZE or kind is ActionKind.PREEMPT:
            assert action is not None
            self._stop(view, spec, job, action, now, report)
        elif kind is ActionKind.COMPLETE:
            self._complete(view, spec, job, now, report)
        elif kind is ActionKind.KEEP:
            assert action is not None
            self._keep(view, spec, job, action, predicted, node_map, now, report)
        else:
            self._wait(view, spec, result.waiting.get(view.key), now, report)

    def _start(
        self,
        view: JobView,
        spec: crd.TrainingJobSpec,
        job: Job,
        action: Action,
        predicted: float | None,
        now: float,
        report: RoundReport,
    ) -> None:
        alloc = action.after
        assert alloc is not None
        gen = view.generation + 1
        ran_before = view.generation > 0
        start = view.checkpoint
        lost = max(0.0, view.status.progress - start)
        new = self._base_status(replace(view, progress=start), spec, now)
        restarts = view.status.restarts + (1 if ran_before else 0)
        unit = spec.work.unit.value
        what = f"{'restarted' if ran_before else 'started'} {_describe_alloc(alloc)}"
        if ran_before:
            what += f" from checkpoint {_num(start)} {unit}"
        if predicted:
            what += f", predicted {predicted:.3g} {unit}/s"
        message = f"{what}: {action.reason}" if action.reason else what
        new.update(
            {
                "phase": "Admitted",
                "reason": "Restarted" if ran_before else "Started",
                "message": message,
                "gangGeneration": gen,
                "allocation": self._alloc_status(alloc),
                "progress": start,
                "checkpointProgress": start,
                "lostWork": view.status.lost_work + lost,
                "restarts": restarts,
                "lastChangeTime": crd.rfc3339(now),
                "accountedTime": now,
                "attainedService": job.attained_service,
            }
        )
        if predicted:
            new["predictedThroughput"] = predicted
            new["estimatedCompletion"] = crd.rfc3339(now + max(0.0, spec.work.total - start) / predicted)
        new.pop("observedThroughput", None)
        if not view.status.admitted_time:
            new["admittedTime"] = crd.rfc3339(now)
            created = crd.parse_time(view.obj["metadata"].get("creationTimestamp"))
            if created is not None:
                metrics.OPERATOR_QUEUE_WAIT_SECONDS.observe(max(0.0, now - created))
        if not view.status.start_time:
            new["startTime"] = crd.rfc3339(now)
        conds = new["conditions"]
        set_condition(conds, "Admitted", True, new["reason"], message, now=now)
        set_condition(
            conds, "Running", False, "PodsStarting", f"0/{alloc.replicas} replicas running", now=now
        )
        for t in ("Preempted", "Resized"):
            prev = get_condition(new, t)
            if prev is not None and prev.get("status") == "True":
                # keep the why: "was it resized / preempted, and for what" stays answerable
                last = str(prev.get("message", ""))
                set_condition(
                    conds, t, False, "Restarted", f"running again as generation {gen} after: {last}", now=now
                )
        # intent first, then the pods: a leader that dies in between leaves a gang the next one completes
        self._write(view, new)
        self.actuator.start_gang(view.obj, spec, alloc, generation=gen, start_progress=start)
        if lost > 0:
            metrics.OPERATOR_LOST_WORK.labels(unit=unit).inc(lost)
        self._event(view, "Normal", new["reason"], message, now)
        self._count(report, "start", view.key)
        report.phases[view.key] = "Admitted"

    @staticmethod
    def _alloc_status(alloc: Allocation) -> dict[str, Any]:
        return {
            "replicas": alloc.replicas,
            "gpuType": alloc.gpu_type,
            "gpusPerReplica": alloc.gpus_per_replica,
            "nodes": list(alloc.nodes),
            "replicasPerNode": dict(alloc.replicas_per_node),
        }

    def _stop(
        self,
        view: JobView,
        spec: crd.TrainingJobSpec,
        job: Job,
        action: Action,
        now: float,
        report: RoundReport,
    ) -> None:
        """RESIZE or PREEMPT: write the intent (no gang), then delete the pods with the grace period."""
        resize = action.kind is ActionKind.RESIZE
        before, after = action.before, action.after
        unit = spec.work.unit.value
        at_risk = max(0.0, view.progress - view.checkpoint)
        grace = spec.checkpoint_grace_seconds
        if resize and before is not None and after is not None:
            change = (
                f"resizing {before.replicas} -> {after.replicas} replicas"
                if before.gpu_type == after.gpu_type and before.replicas != after.replicas
                else f"moving from {_describe_alloc(before)} to {_describe_alloc(after)}"
            )
            message = f"{change}: {action.reason}" if action.reason else change
            phase, reason, counter = "Resizing", "Resized", "resizes"
        else:
            message = f"preempted: {action.reason}" if action.reason else "preempted by the policy"
            phase, reason, counter = "Preempted", "Preempted", "preemptions"
        message += (
            f"; workers get {grace} s to checkpoint (progress since the last checkpoint, "
            f"up to {_num(at_risk)} {unit}, may be lost)"
        )
        new = self._base_status(view, spec, now)
        new.update(
            {
                "phase": phase,
                "reason": reason,
                "message": message,
                counter: int(getattr(view.status, counter)) + 1,
                "lastChangeTime": crd.rfc3339(now),
                "attainedService": job.attained_service,
            }
        )
        for k in (
            "allocation",
            "accountedTime",
            "estimatedCompletion",
            "observedThroughput",
            "predictedThroughput",
        ):
            new.pop(k, None)
        conds = new["conditions"]
        set_condition(conds, reason, True, reason, message, now=now)
        set_condition(conds, "Running", False, reason, message, now=now)
        if not resize:
            set_condition(conds, "Admitted", False, "Preempted", message, now=now)
        self._write(view, new)
        self._delete(view, [p for p in view.cur if p.unfinished], grace=True)
        self._event(view, "Normal" if resize else "Warning", reason, message, now)
        self._count(report, "resize" if resize else "preempt", view.key)
        report.phases[view.key] = phase

    def _keep(
        self,
        view: JobView,
        spec: crd.TrainingJobSpec,
        job: Job,
        action: Action,
        predicted: float | None,
        node_map: Mapping[str, Node],
        now: float,
        report: RoundReport,
    ) -> None:
        alloc = view.allocation or action.before
        assert alloc is not None
        new = self._base_status(view, spec, now)
        running = view.state is GangState.RUNNING
        phase = "Running" if running else "Admitted"
        new["phase"] = phase
        new["allocation"] = self._alloc_status(alloc)
        new["attainedService"] = job.attained_service
        new["accountedTime"] = now
        unit = spec.work.unit.value
        observed = view.observed_throughput
        if predicted:
            new["predictedThroughput"] = predicted
        if observed:
            new["observedThroughput"] = observed
            self._learn(view, job, alloc, observed, node_map, predicted)
        rate = observed or predicted
        remaining = max(0.0, spec.work.total - view.progress)
        if rate:
            new["estimatedCompletion"] = crd.rfc3339(now + remaining / rate)
        conds = new["conditions"]
        detail = f"{view.running_replicas}/{alloc.replicas} replicas running on {_describe_alloc(alloc)}"
        if running:
            set_condition(conds, "Running", True, "AllReplicasRunning", detail, now=now)
            if view.status.phase != "Running":
                new["reason"] = "Running"
                new["message"] = detail
        else:
            set_condition(conds, "Running", False, "PodsStarting", detail, now=now)
        if action.reason and ("held back" in action.reason or "minimum resize interval" in action.reason):
            new["message"] = f"kept as it runs: {action.reason}"
        self._write(view, new)
        if running and view.status.phase != "Running":
            self._event(view, "Normal", "Running", detail + (f", {rate:.3g} {unit}/s" if rate else ""), now)
        report.phases[view.key] = phase

    def _learn(
        self,
        view: JobView,
        job: Job,
        alloc: Allocation,
        observed: float,
        node_map: Mapping[str, Node],
        predicted: float | None,
    ) -> None:
        """Feed a new progress report into the online correction, once per report."""
        r0 = next((p for p in view.cur if p.info.replica_index == 0), None)
        when = r0.report.time if r0 is not None and r0.report is not None else 0.0
        if self._observed_report_time.get(view.key) == when:
            return
        self._observed_report_time[view.key] = when
        if predicted and observed > 0:
            metrics.OPERATOR_THROUGHPUT_ERROR.labels(gpu_type=alloc.gpu_type).observe(
                abs(predicted - observed) / observed
            )
        self._learned.append((job, spread_of(alloc, node_map), observed))

    def _observe(self, job: Job, shape: PlacementShape, observed: float) -> None:
        """Feed one observation to the oracle's online correction (if the oracle learns)."""
        learn = getattr(self.oracle, "observe", None)
        if callable(learn):
            try:
                learn(job, shape, observed)
            except Exception as exc:  # a learning failure must not stop the lifecycle
                log.warning("online correction failed", extra={"job": job.name, "error": str(exc)})

    def _wait(
        self,
        view: JobView,
        spec: crd.TrainingJobSpec,
        why: Unschedulable | None,
        now: float,
        report: RoundReport,
    ) -> None:
        new = self._base_status(view, spec, now)
        if why is None:
            why = Unschedulable("waiting for the next round")
        reason = "Waiting" if why.resolvable else "Unschedulable"
        phase = view.status.phase if view.status.phase in ("Preempted", "Resizing") else "Pending"
        new["phase"] = phase
        for k in ("allocation", "accountedTime", "estimatedCompletion"):
            new.pop(k, None)
        prev = get_condition(view.obj.get("status") or {}, "Admitted")
        conds = new["conditions"]
        set_condition(conds, "Admitted", False, reason, why.reason, now=now)
        if phase == "Pending":
            new["reason"] = reason
            new["message"] = why.reason
        self._write(view, new)
        if prev is None or prev.get("reason") != reason or prev.get("status") != "False":
            self._event(view, "Normal" if why.resolvable else "Warning", reason, why.reason, now)
        report.phases[view.key] = phase
        report.waiting[view.key] = why.reason
