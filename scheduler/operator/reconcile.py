"""One operator round: list the cluster, observe every TrainingJob, run the policy, apply, write status.

Shell module (I/O through a ``KubeApi``; the clock, policy and oracle are injected). ``Operator.run_round``
is the whole lifecycle loop, in numbered phases:

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
   progress, ETA, counts), Events, metrics; observed throughput feeds the online correction of the
   predictor.

What each transition writes and does is decided by the pure ``scheduler.operator.transitions.transition``
(phases 3 and 5); this module lists, decides, and applies its ``Outcome`` (``_execute``): the status
through its model, then the Events derived from that status change, then the gang, the pod deletions and
the Service. Writing the intent before acting makes every step safe to repeat:
pod names are deterministic, a gang half-created by a leader that died is completed by the next one (and
that one sends the Event the written status describes), and pods the intent does not name are deleted.
One job's API failure is logged and retried next round; it does not stop the others.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from scheduler import metrics
from scheduler.core.decisions import Action, ActionKind, RoundResult, Unschedulable
from scheduler.core.errors import PerfschedError
from scheduler.core.placement import spread_of
from scheduler.core.protocols import Clock, Policy, ThroughputOracle
from scheduler.core.round import RoundCosts, run_round
from scheduler.core.types import Allocation, ClusterSnapshot, Job, Node, PlacementShape
from scheduler.k8s import crd
from scheduler.k8s.actuator import Actuator, NotLeader
from scheduler.k8s.codec import CodecError, decode_node, has_device_plugin_gpus, object_name
from scheduler.k8s.dra import UNKNOWN_GPU_TYPE, DraInventory, DraNodeGpus
from scheduler.k8s.kubeapi import KubeApi, Obj
from scheduler.operator.observe import (
    GangState,
    JobView,
    PodView,
    held_allocations,
    intended_allocation,
    observe_job,
    pod_view,
)
from scheduler.operator.queues import Tenancy
from scheduler.operator.status import status_patch, status_wire
from scheduler.operator.transitions import Observed, Outcome, Planned, transition

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
        self._warned_dra: set[str] = set()
        self._dra = DraInventory()  # this round's DRA objects (``_list``)
        self._learned: list[tuple[Job, PlacementShape, float]] = []

    # --- phase 1: list ---------------------------------------------------------------------------------

    def _list(self) -> tuple[list[Obj], list[Obj], list[Obj], dict[str, int]]:
        tjs = self.api.list_trainingjobs(self.config.namespace)
        pods = self.api.list_pods("")
        nodes = self.api.list_nodes()
        self._dra = DraInventory()
        if not all(has_device_plugin_gpus(n) for n in nodes):  # only nodes without them may be DRA
            for plural in ("deviceclasses", "resourceslices", "resourceclaims"):
                for problem in self._dra.replace(plural, self.api.list_dra(plural)):
                    log.warning("skipping DRA object that does not decode", extra={"error": problem})
        classes: dict[str, int] = {}
        for pc in self.api.list_priority_classes():
            name = (pc.get("metadata") or {}).get("name")
            if name:
                classes[str(name)] = int(pc.get("value") or 0)
        return tjs, pods, nodes, classes

    def _nodes(self, raw: Sequence[Obj], now: float) -> list[Node]:
        out: list[Node] = []
        unknown: Counter[str] = Counter()
        for obj in raw:
            try:
                dra = None
                if not has_device_plugin_gpus(obj):
                    dra = self._dra.node_gpus(object_name(obj, "Node"))
                node = decode_node(obj, dra=dra)
            except CodecError as exc:
                log.warning("skipping node that does not decode", extra={"error": str(exc)})
                continue
            if dra is not None:
                self._dra_warnings(obj, dra, now)
            if node.gpus <= 0 or not node.gpu_type:
                continue
            if node.gpu_type not in crd.CANONICAL_GPU_TYPES:
                unknown[node.gpu_product] += 1
            out.append(node)
        metrics.OPERATOR_UNKNOWN_GPU_PRODUCTS.clear()
        for product, count in unknown.items():
            metrics.OPERATOR_UNKNOWN_GPU_PRODUCTS.labels(product=product).set(count)
        return out

    def _claim_held(self, views: Sequence[PodView], nodes: Sequence[Node]) -> dict[str, Allocation]:
        """Pseudo-allocations (``<claim>#held``) for the DRA GPUs that allocated ResourceClaims hold on a node
        and that no pod's request counts: claims of pods that are not bound there (finished, or not
        visible), and claims of no pod. Taken for now, as ``held_allocations``, never moved."""
        out: dict[str, Allocation] = {}
        for node in nodes:
            if node.gpu_api != "dra":
                continue
            holders = {v.info.uid for v in views if v.info.holds_gpus and v.info.node_name == node.name}
            for claim, (owner, held) in self._dra.claims_on(node.name).items():
                if held > 0 and (not owner or owner not in holders):
                    name = f"{claim}#held"
                    out[name] = Allocation.of(name, node.gpu_type, held, {node.name: 1})
        return out

    def _dra_warnings(self, obj: Obj, gpus: DraNodeGpus, now: float) -> None:
        """A Warning Event on the Node, once per process, for each attribute perfsched needs that its DRA
        GPUs lack (they are then typed ``unknown``), and for each GPU DeviceClass it cannot read."""
        name = gpus.node
        problems = [
            (
                f"{name}/{attribute}",
                f"DRA GPUs of node {name} have no {attribute} attribute: their {len(gpus.devices)} GPUs "
                f"are counted and typed {UNKNOWN_GPU_TYPE}",
            )
            for attribute in gpus.missing
        ]
        problems += [(f"class/{p}", p) for p in self._dra.class_problems()]
        for key, message in problems:
            if key in self._warned_dra or not self.may_act():
                continue
            self._warned_dra.add(key)
            log.warning(message, extra={"node": name})
            self.actuator.node_event(
                obj, type_="Warning", reason="DRAAttributeMissing", message=message, now=now
            )

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
        t_list = time.perf_counter()
        tjs, raw_pods, raw_nodes, classes = self._list()
        report.list_seconds = time.perf_counter() - t_list
        nodes = self._nodes(raw_nodes, now)
        views_all = [v for v in (pod_view(p) for p in raw_pods) if v is not None]

        # --- phase 2 and 3: observe and settle -----------------------------------------------------------
        round_jobs, placing, allocations, accounted = self._settle_all(
            tjs, views_all, nodes, classes, now, report
        )
        node_types = {n.name: n.gpu_type for n in nodes}
        allocations.update(held_allocations(views_all, accounted, node_types))
        allocations.update(self._claim_held(views_all, nodes))
        allocations.update(_planned_reservations(placing, nodes, allocations))
        tenancy = self._tenancy(nodes)
        if tenancy.objects:
            round_jobs = [(view, tenancy.assign(job, job.name.split("/", 1)[0])) for view, job in round_jobs]
        snapshot = ClusterSnapshot(now=now, nodes=tuple(nodes), allocations=allocations, queues=tenancy.specs)

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
            return
        report.policy_seconds = time.perf_counter() - t0
        metrics.OPERATOR_ROUND_SECONDS.labels(phase="policy").observe(report.policy_seconds)

        # --- phase 5 and 6: apply and report --------------------------------------------------------------
        t_apply = time.perf_counter()
        actions = self._apply_all(round_jobs, placing, result, snapshot, now, report)
        report.apply_seconds = time.perf_counter() - t_apply
        if tenancy.objects:
            self._queue_statuses(tenancy, snapshot, jobs, result, report)
        for args in self._learned:
            self._observe(*args)
        self._cluster_gauges(nodes, actions, allocations, tjs, now, report)

    def _tenancy(self, nodes: Sequence[Node]) -> Tenancy:
        """The TrainingQueues (and, when a queue selects namespaces, the namespaces' labels)."""
        queues = self.api.list_trainingqueues()
        if not queues:
            return Tenancy()
        selects = any(
            isinstance(q.get("spec"), dict) and isinstance(q["spec"].get("namespaces"), dict) for q in queues
        )
        namespaces = self.api.list_namespaces() if selects else []
        return Tenancy.of(queues, namespaces, sorted({n.gpu_type for n in nodes}))

    def _queue_statuses(
        self,
        tenancy: Tenancy,
        snapshot: ClusterSnapshot,
        jobs: Sequence[Job],
        result: RoundResult,
        report: RoundReport,
    ) -> None:
        """Write each TrainingQueue's status where it changed (an API error is reported, never raised)."""
        statuses = tenancy.statuses(snapshot, jobs, result, self.oracle)
        types = sorted({n.gpu_type for n in snapshot.nodes})
        metrics.record_queue_gauges(
            {q.name: {t: q.nominal(t) for t in types} for q in tenancy.specs},
            {name: dict(st["usage"]) for name, st in statuses.items()},
            {name: int(st["pendingJobs"]) for name, st in statuses.items()},
            {name: float(st["fairShareRatio"] or 0.0) for name, st in statuses.items()},
        )
        if not self.may_act():
            return
        for name, status in statuses.items():
            current = tenancy.objects[name].get("status") or {}
            if all(current.get(k) == v for k, v in status.items()):
                continue
            for key in ("usage", "borrowed"):  # a merge patch keeps keys it does not name: null them
                stale = set(current.get(key) or {}) - set(status[key])
                status[key] = {**status[key], **dict.fromkeys(stale)}
            try:
                self.api.patch_trainingqueue_status(name, status)
            except PerfschedError as exc:
                self._api_error(report, f"queue/{name}", "write queue status", exc)

    def _settle_all(
        self,
        tjs: Sequence[Obj],
        views_all: Sequence[PodView],
        nodes: Sequence[Node],
        classes: Mapping[str, int],
        now: float,
        report: RoundReport,
    ) -> tuple[list[tuple[JobView, Job]], list[tuple[JobView, Job]], dict[str, Allocation], set[str]]:
        """Phases 2 and 3 for every job, oldest first: the jobs in the round, the gangs kube-scheduler is
        still placing, the allocations of the jobs in the round and the pods those account for."""
        node_types = {n.name: n.gpu_type for n in nodes}
        cluster_types = {n.gpu_type for n in nodes}
        by_job: dict[str, list[PodView]] = {}
        for pv in views_all:
            if pv.info.job:
                by_job.setdefault(pv.info.job, []).append(pv)
        round_jobs: list[tuple[JobView, Job]] = []
        placing: list[tuple[JobView, Job]] = []
        allocations: dict[str, Allocation] = {}
        accounted: set[str] = set()
        for obj in sorted(tjs, key=_creation_order):
            key = crd.job_key(obj)
            spec = crd.parse_spec(obj)
            converted = crd.trainingjob_to_job(
                obj,
                now=now,
                known_model=self.known_model,
                cluster_gpu_types=cluster_types,
                priority_classes=classes,
            )
            view = observe_job(
                obj,
                by_job.get(key, []),
                now=now,
                total_work=spec.work.total if isinstance(spec, crd.TrainingJobSpec) else None,
                node_types=node_types,
                start_timeout_s=self.config.gang_start_timeout_s,
            )
            step = Observed(converted, backoff_limit=self.config.backoff_limit)
            try:
                out = transition(spec, view, step, now)
                if out is not None:
                    self._execute(view, spec, out, now, report)
            except NotLeader:
                raise
            except PerfschedError as exc:
                self._api_error(report, key, "settle", exc)
                continue
            if out is None or out.job is None:
                continue
            if out.allocation is not None and _placing(view):
                # kube-scheduler is still placing this gang: the policy leaves it alone this round
                placing.append((view, out.job))
                continue
            round_jobs.append((view, out.job))
            if out.allocation is not None:
                allocations[key] = out.allocation
                accounted.update(p.info.key for p in view.cur if p.unfinished and not p.deleting)
        return round_jobs, placing, allocations, accounted

    def _apply_all(
        self,
        round_jobs: Sequence[tuple[JobView, Job]],
        placing: Sequence[tuple[JobView, Job]],
        result: RoundResult,
        snapshot: ClusterSnapshot,
        now: float,
        report: RoundReport,
    ) -> list[Action]:
        """Phase 5 and 6 for every job; returns the action of each (a gang being placed keeps its own)."""
        actions = {a.job: a for a in result.actions}
        node_map = snapshot.node_map()
        predicted = self._predict([*round_jobs, *placing], actions, node_map)
        self._learned.clear()
        for view, _job in placing:
            alloc = view.allocation or intended_allocation(view.key, view.status)
            actions[view.key] = Action(
                ActionKind.KEEP, view.key, alloc, alloc, "starting: kube-scheduler is placing the gang"
            )

        def apply(view: JobView, job: Job) -> None:
            step = Planned(job, actions.get(view.key), result.waiting.get(view.key), predicted.get(view.key))
            try:
                self._apply(view, step, node_map, now, report)
            except NotLeader:
                raise
            except PerfschedError as exc:
                self._api_error(report, view.key, "apply", exc)

        # Jobs are independent: their API writes go out concurrently (the writes of one job stay in order).
        # Only I/O runs in the pool; learning from observations happens after it, in this thread.
        everyone = [*round_jobs, *placing]
        if self.config.api_concurrency > 1 and len(everyone) > 1:
            with ThreadPoolExecutor(max_workers=self.config.api_concurrency) as pool:
                for fut in [pool.submit(apply, view, job) for view, job in everyone]:
                    fut.result()
        else:
            for view, job in everyone:
                apply(view, job)
        return list(actions.values())

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

    # --- phase 5: apply ---------------------------------------------------------------------------------

    def _apply(
        self, view: JobView, step: Planned, node_map: Mapping[str, Node], now: float, report: RoundReport
    ) -> None:
        spec = crd.parse_spec(view.obj)
        assert isinstance(spec, crd.TrainingJobSpec)
        out = transition(spec, view, step, now)
        if out is not None:
            self._execute(view, spec, out, now, report)
        action = step.action
        observed = view.observed_throughput
        if action is not None and action.kind is ActionKind.KEEP and observed:
            alloc = view.allocation or action.before
            if alloc is not None:
                self._learn(view, step.job, alloc, observed, node_map, step.predicted)

    def _execute(
        self,
        view: JobView,
        spec: crd.TrainingJobSpec | Unschedulable,
        out: Outcome,
        now: float,
        report: RoundReport,
    ) -> None:
        """Apply one transition's Outcome: the status (through its model), its Events, the gang, the pod
        deletions and the Service, then counters and metrics (see ``scheduler.operator.transitions``)."""
        if out.status is not None:
            patch = status_patch(view.obj.get("status") or {}, status_wire(out.status))
            if patch:
                self.actuator.patch_status(view.obj, patch)
        # after the status it describes and before the pods: a pod change that began says it was sent
        for e in out.events:
            self.actuator.event(view.obj, type_=e.type, reason=e.reason, message=e.message, now=now)
        if out.create is not None:
            assert isinstance(spec, crd.TrainingJobSpec)
            c = out.create
            self.actuator.start_gang(
                view.obj, spec, c.allocation, generation=c.generation, start_progress=c.start_progress
            )
        if out.delete:
            self.actuator.delete_pods(view.namespace, out.delete, out.grace_seconds)
        if out.delete_service:
            self.actuator.delete_service(view.obj)
        if out.count is not None:
            report.actions.setdefault(out.count, []).append(view.key)
            metrics.OPERATOR_ACTIONS.labels(kind=out.count).inc()
        if out.migration is not None:
            metrics.OPERATOR_MIGRATIONS.labels(from_type=out.migration[0], to_type=out.migration[1]).inc()
        if out.lost_work > 0:
            metrics.OPERATOR_LOST_WORK.labels(unit=out.work_unit).inc(out.lost_work)
        if out.queue_wait_s is not None:
            metrics.OPERATOR_QUEUE_WAIT_SECONDS.observe(out.queue_wait_s)
        if out.jct_s is not None:
            metrics.OPERATOR_JCT_SECONDS.observe(out.jct_s)
        if out.deadline_met is not None:
            metrics.OPERATOR_DEADLINES.labels(outcome="met" if out.deadline_met else "missed").inc()
        if out.phase is not None:
            report.phases[view.key] = out.phase
        if out.waiting is not None:
            report.waiting[view.key] = out.waiting

    # --- prediction and learning -------------------------------------------------------------------------

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
        except Exception as exc:  # a broken predictor must not stop the lifecycle: counted, logged, no ETA
            metrics.OPERATOR_ERRORS.labels(step="predict").inc()
            log.error("throughput prediction failed", exc_info=True, extra={"error": str(exc)})
            return {}
        return {key: v for (key, _, _), v in zip(queries, values, strict=True)}

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
            except Exception as exc:  # a learning failure must not stop the lifecycle: counted, logged
                metrics.OPERATOR_ERRORS.labels(step="learn").inc()
                log.error(
                    "online correction failed", exc_info=True, extra={"job": job.name, "error": str(exc)}
                )


def _creation_order(obj: Obj) -> tuple[float, str]:
    """Oldest TrainingJob first (ties by namespace/name)."""
    return (crd.parse_time((obj.get("metadata") or {}).get("creationTimestamp")) or 0, crd.job_key(obj))
