"""One operator round: list the cluster, observe every TrainingJob, run the policy, apply, write status.

Shell module (I/O through a ``KubeApi``; the clock, policy and oracle are injected). ``Operator.run_round``
is the whole lifecycle loop, in numbered phases:

1. **List** TrainingJobs, pods, nodes and PriorityClasses (everything is rebuilt from the API each round:
   an operator restart loses nothing and does not restart running jobs).
2. **Observe** each job (``scheduler.operator.observe``): its gang's state, progress and checkpoint.
3. **Settle** what needs no policy: a finished gang completes the job; a crashed one counts a failure and
   is torn down (or the job Fails after the backoff limit); a gang that lost a pod or a node (NotReady
   beyond the grace period, tainted NoExecute, deleted) is torn down and restarts from its checkpoint; a
   gang not running within its start timeout is torn down and requeued with exponential backoff (or the
   job Fails after the backoff limit); a job backing off waits outside the round; leftover pods of older
   generations are deleted, those on a failed node at once; a job whose spec cannot be scheduled as
   written gets a condition naming the problem. Failed nodes are not in the snapshot.
4. **Decide**: ``run_round(snapshot, jobs, policy, oracle, costs=...)`` on the jobs that are waiting or
   running. GPUs of pods still draining (or not ours) are held by pseudo-allocations outside the round.
   With ``move_off_slow_nodes``, the nodes flagged slow (phase 6 of earlier rounds) go with it, and a
   gang there whose predicted gain pays its restart is moved off (``scheduler.core.slow_nodes``).
5. **Apply** the actions: START writes the intent (``status.allocation``, a new ``gangGeneration``) then
   creates the gang (a gang spread over several NVLink domains says why, judged on the round's view at
   its decision: ``scheduler.core.spread``); RESIZE and PREEMPT write the intent (no gang) then delete
   the pods with the job's checkpoint grace period, and the job restarts from its checkpoint once they
   are gone; COMPLETE.
6. **Report**: status (phase, conditions saying why, allocation, predicted and observed throughput,
   progress, ETA, counts), Events, metrics; observed throughput feeds the online correction of the
   predictor.

A job that ended since the last round (Succeeded, Failed, deleted, or recreated under the same name with
a new uid) is forgotten by the learning oracle and the per-job maps of this process before the round
(``_track_ends``): its own correction goes, what the shared levels learnt from it stays. The leader
keeps the learning state in a ConfigMap (``_save_state``, ``scheduler.operator.learning_state``); a
process that starts to lead restores it before its round (``_restore_state``), then replays once from
its status each finished TrainingJob still listed that the state had not learnt (its last measured
throughput on its last gang's placement, ``_replay``); without a usable state the replay runs alone and
what finished jobs already deleted taught is lost (docs/learning-state.md).

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
from collections import Counter, deque
from collections.abc import Callable, Collection, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace

from perfmodel.profile import OperatorProfile
from scheduler import metrics
from scheduler.core.decisions import Action, ActionKind, RoundResult, Unschedulable
from scheduler.core.errors import PerfschedError
from scheduler.core.placement import spread_of
from scheduler.core.protocols import Clock, Policy, ThroughputOracle
from scheduler.core.round import RoundCosts, run_round
from scheduler.core.slow_nodes import (
    GangSample,
    SlowNodeConfig,
    SlowNodeMoves,
    node_slowdown,
    single_node,
)
from scheduler.core.spread import ALTHOUGH, spread_notes
from scheduler.core.types import Allocation, ClusterSnapshot, Job, Node, PlacementShape
from scheduler.k8s import crd
from scheduler.k8s.actuator import Actuator, NotLeader, replica_nodes
from scheduler.k8s.codec import (
    CodecError,
    NodeHealth,
    decode_node,
    decode_node_health,
    has_device_plugin_gpus,
    object_name,
)
from scheduler.k8s.dra import UNKNOWN_GPU_TYPE, DraError, DraInventory, DraNodeGpus, decode_taint_rule
from scheduler.k8s.kubeapi import KubeApi, Obj
from scheduler.k8s.profiles import ModelProfiles
from scheduler.names import DRA_API_VERSION
from scheduler.operator.adopted import Adopter, Adoption
from scheduler.operator.learning_state import KINDS, Restored, StateStore, encode_capped, restore_outcome
from scheduler.operator.modelprofile import Condition, profile_condition, with_profile_condition
from scheduler.operator.observe import (
    GangState,
    JobView,
    PodView,
    held_allocations,
    intended_allocation,
    node_failures,
    observe_job,
    pod_view,
    without_tolerated,
)
from scheduler.operator.queues import Tenancy
from scheduler.operator.room import NodeRoom, gpus_by_node
from scheduler.operator.status import evolve, status_patch, status_wire, with_condition
from scheduler.operator.transitions import Observed, Outcome, Planned, transition

log = logging.getLogger(__name__)

#: How long a finished pod's allocated ResourceClaim counts as GPUs being released (a START planned on them
#: waits) before the operator counts it as taken: kube-controller-manager deallocates such claims within
#: seconds; one that stays longer is not about to go.
CLAIM_RELEASE_GRACE_S = 30.0


@dataclass(frozen=True, slots=True)
class OperatorConfig:
    """The operator's knobs (from ``Settings``; see ``scheduler/settings.py`` for each one's meaning)."""

    namespace: str = ""
    costs: RoundCosts = field(default_factory=RoundCosts)
    backoff_limit: int = 3
    gang_start_timeout_s: float = 300.0
    requeue_backoff_s: float = 30.0
    requeue_backoff_max_s: float = 1800.0
    node_failure_grace_s: float = 60.0
    slow_nodes: SlowNodeConfig = field(default_factory=SlowNodeConfig)
    #: keep new gangs off a flagged slow node (what runs there stays)
    exclude_slow_nodes: bool = False
    #: also move running gangs off a flagged slow node where the predicted gain pays the restart
    #: (``scheduler.core.slow_nodes.moves_off_slow_nodes``); implies ``exclude_slow_nodes``
    move_off_slow_nodes: bool = False
    master_port: int = 29500
    instance: str = ""
    #: a Workload / PodGroup per gang generation (Kubernetes 1.37's gang API; PERFSCHED_OPERATOR_WORKLOAD_API)
    workload_api: bool = False
    api_concurrency: int = 8
    #: the ConfigMap (in ``learning_state_namespace``) that keeps the learning oracle's state across
    #: restarts and leader changes (``scheduler.operator.learning_state``); empty: none
    learning_state_configmap: str = ""
    learning_state_namespace: str = "default"
    #: the leader writes the state at most this often, and only when it changed
    learning_state_interval_s: float = 60.0


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
    lands where the scheduler finds space), which keeps the snapshot within every node's capacity. A
    replica whose pod is not created yet (its gang waits for pods exiting on its nodes) holds what is
    free on its node, however short.
    """
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
            if node not in free:
                continue
            # a replica not created yet waits for pods exiting there (``scheduler.operator.room``): what
            # is free on its node now is held for it, so that no other gang takes it meanwhile
            take = gpus if free[node] >= gpus else (free[node] if pod is None else 0)
            if take > 0:
                free[node] -= take
                name = f"{view.key}#planned-{rank}"
                out[name] = Allocation.of(name, types[node], take, {node: 1})
    return out


# The most finished TrainingJobs a new operator process replays, the latest completed (the learning
# oracle keeps no more ended jobs than this in its shared levels: ``perfmodel.online.OnlineCorrector``);
# one costs about 7 ms CPU (observe, then the refit of its GPU type at the next answer).
REPLAY_MAX = 4096


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
        adopter: Adopter | None = None,
    ) -> None:
        self.api = api
        self.adopter = adopter
        self.policy = policy
        self.oracle = oracle
        self.config = config or OperatorConfig()
        self.clock: Clock = clock or _SystemClock()
        self.may_act = may_act
        self.known_model = known_model
        self.actuator = Actuator(
            api,
            may_act=may_act,
            master_port=self.config.master_port,
            instance=self.config.instance,
            workload_api=self.config.workload_api,
        )
        self.profiles = ModelProfiles(api)
        #: this round's ModelProfile condition (status, reason, message) of each job with spec.modelProfile
        self._profile_conditions: dict[str, Condition] = {}
        # Only for metrics and de-duplicating observations; never needed for correctness.
        self._observed_report_time: dict[str, float] = {}
        self._warned_dra: set[str] = set()
        self._dra = DraInventory()  # this round's DRA objects (``_list``)
        #: claims of finished pods still allocated -> when a round first saw them so (``_claim_held``)
        self._releasing_since: dict[str, float] = {}
        self._learned: list[tuple[Job, PlacementShape, float]] = []
        # residuals of single-node gangs over the slow-node window, and the nodes flagged (for the Event
        # on a new flag); lost on restart, refilled within the window (the metric says nothing meanwhile)
        self._residuals: deque[GangSample] = deque()
        self._slow_pending: list[GangSample] = []
        self._flagged: dict[str, float] = {}
        # jobs moved off a slow node -> when: at most one such move per job per evidence window (lost on
        # restart with the evidence itself)
        self._moved_off_slow: dict[str, float] = {}
        #: job -> the key of the last decision Event this process recorded (or found recorded)
        self._announced: dict[str, str] = {}
        #: job -> uid of the TrainingJobs listed not finished last round, and of those listed finished
        #: (``_track_ends``)
        self._live: dict[str, str] = {}
        self._ended: dict[str, str] = {}
        #: finished job -> (uid, completion time), for the stored learning state
        self._completed: dict[str, tuple[str, str]] = {}
        #: where the learning state is kept (``learning_state``), and when this process last wrote it
        self._store = (
            StateStore(api, self.config.learning_state_namespace, self.config.learning_state_configmap)
            if self.config.learning_state_configmap and callable(getattr(oracle, "restore", None))
            else None
        )
        self._state_at = float("-inf")
        #: whether the last round ran as leader (a round that finds it newly so restores the state)
        self._leading = False
        #: finished jobs a restored state had learnt (uids; and all that completed before the time)
        self._restored_ended: frozenset[str] = frozenset()
        self._restored_before = ""

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
            rules = self.api.list_dra("devicetaintrules")
            self._taint_rule_warnings(rules)
            self._dra.replace("devicetaintrules", rules)
        classes: dict[str, int] = {}
        for pc in self.api.list_priority_classes():
            name = (pc.get("metadata") or {}).get("name")
            if name:
                classes[str(name)] = int(pc.get("value") or 0)
        return tjs, pods, nodes, classes

    def _nodes(
        self, raw: Sequence[Obj], pods: Sequence[PodView], now: float
    ) -> tuple[list[Node], dict[str, str], dict[str, tuple[tuple[str, str], ...]]]:
        """The GPU nodes the planner may use, the failed nodes (name -> why), and the failed nodes' NoExecute
        taints where those alone fail them (``observe.node_failures``).

        A failed node (NotReady beyond the grace period, tainted NoExecute, deleted under bound pods)
        leaves the planner's capacity until it is healthy again; a node NotReady within the grace period,
        or tainted NoExecute (where gangs that tolerate the taint keep running), keeps the gangs it runs
        but takes no new ones (its capacity is what its pods hold).
        """
        out: list[Node] = []
        unknown: Counter[str] = Counter()
        healths: list[NodeHealth] = []
        for obj in raw:
            name = (obj.get("metadata") or {}).get("name")
            try:
                healths.append(decode_node_health(obj))
            except CodecError as exc:
                log.warning("node health does not decode; taken as healthy", extra={"error": str(exc)})
                if isinstance(name, str) and name:
                    healths.append(NodeHealth(name))
        held: Counter[str] = Counter()
        for p in pods:
            if p.info.holds_gpus:
                held[p.info.node_name] += p.info.gpus
        bound = {p.info.node_name for p in pods if p.info.node_name and p.unfinished}
        failed, suspect, tainted = node_failures(
            healths, bound, now=now, grace_s=self.config.node_failure_grace_s
        )
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
                if node.gpus <= 0 and held[node.name] > 0:
                    # every GPU device tainted, some held by running pods: the node stays listed with
                    # what they hold (they leave only if a NoExecute taint evicts them) and takes no new gang
                    node = replace(
                        node, gpus=len(dra.devices), gpus_external=len(dra.devices) - held[node.name]
                    )
            if node.gpus <= 0 or not node.gpu_type:
                continue
            if node.name in failed and node.name not in tainted:
                continue
            if (
                node.name in suspect
                or node.name in tainted
                or (self._excludes_slow_nodes and node.name in self._flagged)
            ):
                # no new gang here: its capacity is what its pods hold
                node = replace(node, gpus_external=max(node.gpus_external, node.gpus - held[node.name]))
            if node.gpu_type not in crd.CANONICAL_GPU_TYPES:
                unknown[node.gpu_product] += 1
            out.append(node)
        metrics.OPERATOR_UNKNOWN_GPU_PRODUCTS.clear()
        for product, count in unknown.items():
            metrics.OPERATOR_UNKNOWN_GPU_PRODUCTS.labels(product=product).set(count)
        for name, why in sorted(failed.items()):
            if name in held or name in bound:
                log.warning("node failed; its gangs restart elsewhere", extra={"node": name, "why": why})
        return out, failed, tainted

    def _evicted_pods(self, pods: Sequence[PodView]) -> dict[str, str]:
        """The pods that must leave their GPUs because a DRA device they hold is tainted ``NoExecute``
        and their claim does not tolerate it (``DraInventory.evicted``): pod name -> why."""
        out: dict[str, str] = {}
        for p in pods:
            if p.unfinished and p.info.uid:
                why = self._dra.evicted(p.info.uid)
                if why:
                    out[p.name] = why
        return out

    @property
    def _excludes_slow_nodes(self) -> bool:
        # moving gangs off a slow node only pays if no gang (the moved one included) is placed there again
        return self.config.exclude_slow_nodes or self.config.move_off_slow_nodes

    def _slow_node_moves(self, now: float) -> SlowNodeMoves | None:
        """The flagged nodes whose gangs may move off this round (None: moves are off, or none flagged)."""
        if not self.config.move_off_slow_nodes or not self._flagged:
            return None
        window = self.config.slow_nodes.window_s
        self._moved_off_slow = {j: t for j, t in self._moved_off_slow.items() if now - t < window}
        ratios = {n: r for n, r in self._flagged.items() if 0.0 < r < 1.0}
        return SlowNodeMoves(ratios, moved=frozenset(self._moved_off_slow))

    def _claim_held(
        self, views: Sequence[PodView], nodes: Sequence[Node], now: float
    ) -> tuple[dict[str, Allocation], dict[str, Allocation]]:
        """Pseudo-allocations (``<claim>#held``) for the DRA GPUs that allocated ResourceClaims hold on a node
        and that no pod's request counts, split in two:

        - *held*: claims of no pod, of a pod not visible, or of a finished pod whose claim has stayed
          allocated for ``CLAIM_RELEASE_GRACE_S``: taken for now, as ``held_allocations``, never moved;
        - *releasing*: claims of a pod that has finished (Succeeded or Failed), which
          kube-controller-manager deallocates shortly after. The planner sees these GPUs as free, the way
          it sees a stopped gang's; ``NodeRoom`` counts them as draining, so that a START planned on them
          waits for the claim to go rather than the planner spreading a gang around a node a job has
          just left.
        """
        held: dict[str, Allocation] = {}
        releasing: dict[str, Allocation] = {}
        finished = {v.info.uid for v in views if v.info.uid and not v.unfinished}
        seen: dict[str, float] = {}
        for node in nodes:
            if node.gpu_api != "dra":
                continue
            holders = {v.info.uid for v in views if v.info.holds_gpus and v.info.node_name == node.name}
            for claim, (owner, count) in self._dra.claims_on(node.name).items():
                if count <= 0 or (owner and owner in holders):
                    continue
                name = f"{claim}#held"
                alloc = Allocation.of(name, node.gpu_type, count, {node.name: 1})
                if owner and owner in finished:
                    since = seen[claim] = self._releasing_since.get(claim, now)
                    if now - since < CLAIM_RELEASE_GRACE_S:
                        releasing[name] = alloc
                        continue
                held[name] = alloc
        self._releasing_since = seen
        return held, releasing

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

    def _taint_rule_warnings(self, rules: Sequence[Obj]) -> None:
        """A Warning Event on each DeviceTaintRule perfsched cannot read (the message names the field),
        once per process and problem; such a rule taints nothing."""
        for obj in rules:
            try:
                decode_taint_rule(obj)
            except DraError as exc:
                message = f"{exc}: the rule is ignored"
                name = (obj.get("metadata") or {}).get("name") if isinstance(obj, Mapping) else None
                key = f"rule/{message}"
                if key in self._warned_dra or not self.may_act():
                    continue
                self._warned_dra.add(key)
                log.warning(message)
                if isinstance(name, str) and name:
                    self.actuator.node_event(
                        obj,
                        reason="DeviceTaintRuleInvalid",
                        message=message,
                        now=self.clock.now(),
                        kind="DeviceTaintRule",
                        api_version=DRA_API_VERSION,
                    )

    # --- the round -------------------------------------------------------------------------------------

    def run_round(self) -> RoundReport:
        """Run one round (phases 1-6). Returns a report; raises only if listing the cluster fails."""
        started = time.perf_counter()
        now = self.clock.now()
        report = RoundReport(now=now)
        if not self.may_act():
            self._leading = False
            report.skipped = True
            metrics.OPERATOR_ROUNDS.labels(result="skipped_not_leader").inc()
            return report
        if not self._leading:
            self._leading = True
            self._restore_state()
        try:
            self._round(now, report)
            self._save_state(now)
        except NotLeader:
            self._leading = False
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

    def stand_down(self) -> None:
        """This process does not lead now (its loop runs no round): the next round it runs as leader
        restores the learning state first, which another leader may have written meanwhile."""
        self._leading = False

    def _round(self, now: float, report: RoundReport) -> None:
        t_list = time.perf_counter()
        tjs, raw_pods, raw_nodes, classes = self._list()
        report.list_seconds = time.perf_counter() - t_list
        views_all = [v for v in (pod_view(p) for p in raw_pods) if v is not None]
        nodes, failed, tainted = self._nodes(raw_nodes, views_all, now)
        self._track_ends(tjs, views_all, nodes, now)
        claims, releasing = self._claim_held(views_all, nodes, now)
        room = NodeRoom.of(nodes, views_all, claims.values(), releasing.values())

        # --- phase 2 and 3: observe and settle -----------------------------------------------------------
        round_jobs, placing, allocations, accounted = self._settle_all(
            tjs, views_all, nodes, (failed, tainted), classes, now, report, room
        )
        node_types = {n.name: n.gpu_type for n in nodes}
        tenancy = self._tenancy(nodes)
        # adopted Jobs, JobSets, TrainJobs (``scheduler.operator.adopted``): their pods are theirs, not held
        adoption = self._adopt(now, nodes, raw_pods, classes, tenancy, report)
        allocations.update(adoption.allocations)
        accounted.update(adoption.accounted)
        allocations.update(held_allocations(views_all, accounted, node_types))
        allocations.update(claims)
        allocations.update(_planned_reservations(placing, nodes, allocations))
        if self.adopter is not None:
            allocations.update(self.adopter.reserve(adoption, nodes, allocations))
        if tenancy.objects:
            round_jobs = [(view, tenancy.assign(job, job.name.split("/", 1)[0])) for view, job in round_jobs]
        snapshot = ClusterSnapshot(now=now, nodes=tuple(nodes), allocations=allocations, queues=tenancy.specs)

        # --- phase 4: decide -------------------------------------------------------------------------------
        jobs = [job for _, job in round_jobs] + adoption.jobs
        t0 = time.perf_counter()
        try:
            result = run_round(
                snapshot,
                jobs,
                self.policy,
                self.oracle,
                costs=self.config.costs,
                slow_nodes=self._slow_node_moves(now),
            )
        except PerfschedError as exc:
            log.error("round failed: the policy's answer was refused", extra={"error": str(exc)})
            report.errors.append(f"policy: {exc}")
            for view, _ in round_jobs:
                report.phases[view.key] = view.status.phase or "Pending"
            return
        report.policy_seconds = time.perf_counter() - t0
        metrics.OPERATOR_ROUND_SECONDS.labels(phase="policy").observe(report.policy_seconds)
        for name in result.moved_off_slow_nodes:
            self._moved_off_slow[name] = now
            log.info("moving a gang off a slow node", extra={"job": name})

        # --- phase 5 and 6: apply and report --------------------------------------------------------------
        t_apply = time.perf_counter()
        actions = self._apply_all(round_jobs, placing, result, snapshot, now, report, room)
        if self.adopter is not None and adoption.workloads:
            predicted = self._predict_adopted(adoption.jobs, result, snapshot.node_map())
            self.adopter.apply(adoption, result, nodes, predicted, now, report.actions, report.errors)
        report.apply_seconds = time.perf_counter() - t_apply
        if tenancy.objects:
            self._queue_statuses(tenancy, snapshot, jobs, result, report)
        for args in self._learned:
            self._observe(*args)
        self._slow_nodes(now)
        self._cluster_gauges(nodes, actions, allocations, tjs, now, report)

    def _adopt(
        self,
        now: float,
        nodes: Sequence[Node],
        raw_pods: Sequence[Obj],
        classes: Mapping[str, int],
        tenancy: Tenancy,
        report: RoundReport,
    ) -> Adoption:
        """The adopted workloads of this round (none without an ``adopter``)."""
        if self.adopter is None:
            return Adoption()

        def namespace_queue(namespace: str) -> str:
            labels = tenancy.namespace_labels.get(namespace, {})
            return next((name for name, sel in tenancy.selectors if sel.matches(labels)), "")

        return self.adopter.observe(
            now,
            nodes,
            raw_pods,
            classes,
            queues=list(tenancy.objects) if tenancy.objects else None,
            namespace_queue=namespace_queue,
            errors=report.errors,
        )

    def _predict_adopted(
        self, adopted: Sequence[Job], result: RoundResult, node_map: Mapping[str, Node]
    ) -> dict[str, float]:
        """Predicted throughput of each adopted job on its allocation after this round's START or KEEP."""
        actions = {a.job: a for a in result.actions}
        queries = [
            (job, a.after)
            for job in adopted
            if (a := actions.get(job.name)) is not None
            and a.after is not None
            and a.kind in (ActionKind.START, ActionKind.KEEP)
            and job.model
        ]
        if not queries:
            return {}
        try:
            values = self.oracle.throughput([(job, spread_of(alloc, node_map)) for job, alloc in queries])
        except Exception as exc:  # as for TrainingJobs: a broken predictor costs the figure, not the round
            metrics.OPERATOR_ERRORS.labels(step="predict").inc()
            log.error("throughput prediction failed", exc_info=True, extra={"error": str(exc)})
            return {}
        return {job.name: v for (job, _), v in zip(queries, values, strict=True)}

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
        failures: tuple[Mapping[str, str], Mapping[str, tuple[tuple[str, str], ...]]],
        classes: Mapping[str, int],
        now: float,
        report: RoundReport,
        room: NodeRoom,
    ) -> tuple[list[tuple[JobView, Job]], list[tuple[JobView, Job]], dict[str, Allocation], set[str]]:
        """Phases 2 and 3 for every job, oldest first: the jobs in the round, the gangs kube-scheduler is
        still placing, the allocations of the jobs in the round and the pods those account for. A gang
        to complete (``GangState.MISSING``) is created only when ``room`` has it
        (``scheduler.operator.room``). ``failures``: the failed nodes and the NoExecute taints that alone
        fail some of them (a job whose pod template tolerates those keeps its gang there)."""
        failed, tainted = failures
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
        self._profile_conditions.clear()
        for obj in sorted(tjs, key=_creation_order):
            key = crd.job_key(obj)
            spec = crd.parse_spec(obj)
            profile = self._model_profile(key, obj, spec)
            converted = crd.trainingjob_to_job(
                obj,
                now=now,
                known_model=self.known_model,
                cluster_gpu_types=cluster_types,
                priority_classes=classes,
                model_profile=profile,
            )
            view = observe_job(
                obj,
                by_job.get(key, []),
                now=now,
                total_work=spec.work.total if isinstance(spec, crd.TrainingJobSpec) else None,
                node_types=node_types,
                start_timeout_s=_start_timeout(spec, self.config.gang_start_timeout_s),
                failed_nodes=without_tolerated(failed, tainted, _tolerations(obj)) if tainted else failed,
                failed_pods=self._evicted_pods(by_job.get(key, [])),
            )
            step = Observed(
                converted,
                backoff_limit=self.config.backoff_limit,
                requeue_backoff_s=self.config.requeue_backoff_s,
                requeue_backoff_max_s=self.config.requeue_backoff_max_s,
            )
            try:
                out = transition(spec, view, step, now)
                if out is not None and out.create is not None:
                    out, view = _room_for_missing(view, out, room)
                if out is not None:
                    self._execute(view, spec, out, now, report)
            except NotLeader:
                raise
            except PerfschedError as exc:
                self._api_error(report, key, "settle", exc)
                continue
            if out is not None and out.quick_delete:
                # deleted at once (grace 0) or by a kubelet with nothing to wait for: no longer held
                accounted.update(f"{view.namespace}/{name}" for name, grace in out.quick_delete if grace == 0)
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
        room: NodeRoom,
    ) -> list[Action]:
        """Phase 5 and 6 for every job; returns the action of each (a gang being placed keeps its own)."""
        actions = {a.job: a for a in result.actions}
        deferred = _deferred_starts(result.actions, {view.key for view, _ in round_jobs}, room)
        node_map = snapshot.node_map()
        predicted = self._predict([*round_jobs, *placing], actions, node_map)
        spread = spread_notes(snapshot, result.decisions, result.actions)
        for key, note in spread.items():
            # a domain that had room and was not taken is a placement miss (or a backfill reservation)
            level = logging.WARNING if ALTHOUGH in note else logging.INFO
            log.log(level, "gang %s started %s", key, note, extra={"job": key, "why": note})
        self._learned.clear()
        for view, _job in placing:
            alloc = view.allocation or intended_allocation(view.key, view.status)
            actions[view.key] = Action(
                ActionKind.KEEP, view.key, alloc, alloc, "starting: kube-scheduler is placing the gang"
            )

        def apply(view: JobView, job: Job) -> None:
            step = Planned(
                job,
                actions.get(view.key),
                result.waiting.get(view.key),
                predicted.get(view.key),
                spread.get(view.key, ""),
            )
            try:
                self._apply(view, step, node_map, now, report, deferred.get(view.key, ""))
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
        self,
        view: JobView,
        step: Planned,
        node_map: Mapping[str, Node],
        now: float,
        report: RoundReport,
        deferred: str = "",
    ) -> None:
        """Phase 5 and 6 for one job; ``deferred``: why a START's pods wait (``_deferred_starts``)."""
        spec = crd.parse_spec(view.obj)
        assert isinstance(spec, crd.TrainingJobSpec)
        out = transition(spec, view, step, now)
        if out is not None and deferred and out.create is not None:
            out = _defer_start(out, deferred, now)
        if out is not None:
            self._execute(view, spec, out, now, report)
        action = step.action
        observed = view.observed_throughput
        if action is not None and action.kind is ActionKind.KEEP and observed:
            alloc = view.allocation or action.before
            if alloc is not None:
                self._learn(view, step.job, alloc, observed, node_map, step.predicted)

    def _model_profile(
        self, key: str, obj: Obj, spec: crd.TrainingJobSpec | Unschedulable
    ) -> OperatorProfile | str | None:
        """The job's operator profile (or why it cannot be used); records its ModelProfile condition."""
        if not isinstance(spec, crd.TrainingJobSpec) or spec.model_profile is None:
            return None
        namespace = str((obj.get("metadata") or {}).get("namespace", ""))
        profile = self.profiles.resolve(namespace, spec.model_profile)
        self._profile_conditions[key] = profile_condition(spec, namespace, profile)
        return profile

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
        out = with_profile_condition(view.status, out, self._profile_conditions.get(view.key), now)
        if out.status is not None:
            patch = status_patch(view.obj.get("status") or {}, status_wire(out.status))
            if patch:
                self.actuator.patch_status(view.obj, patch)
        # after the status it describes and before the pods; a decision's Event (``key``) once per process
        # (a stop repeats it while its pods remain, for a leader that took over in the middle)
        for e in out.events:
            if e.key and self._announced.get(view.key) == e.key:
                continue
            sent = self.actuator.event(
                view.obj, type_=e.type, reason=e.reason, message=e.message, now=now, key=e.key
            )
            if sent and e.key:
                self._announced[view.key] = e.key
        if out.create is not None:
            assert isinstance(spec, crd.TrainingJobSpec)
            c = out.create
            self.actuator.start_gang(
                view.obj, spec, c.allocation, generation=c.generation, start_progress=c.start_progress
            )
        for name, grace in out.quick_delete:
            self.actuator.delete_pods(view.namespace, [name], grace)
        if out.delete:
            self.actuator.delete_pods(view.namespace, out.delete, out.grace_seconds)
        if out.delete_service:
            self.actuator.delete_service(view.obj)
            if self.actuator.workload_api and view.generation > 0:
                # the job is over: its last gang's PodGroup and Workload go with the Service
                self.actuator.delete_group(view.obj, view.generation)
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
            node = single_node(alloc.replicas_per_node)
            reference = self._shared_prediction(job, alloc, node_map, predicted) if node is not None else 0.0
            if node is not None and reference > 0:
                model = job.model or f"{job.params}/{job.flops_per_sample}"
                now = self.clock.now()
                self._slow_pending.append(GangSample(now, node, alloc.gpu_type, model, observed / reference))
        self._learned.append((job, spread_of(alloc, node_map), observed))

    def _shared_prediction(
        self, job: Job, alloc: Allocation, node_map: Mapping[str, Node], predicted: float
    ) -> float:
        """What the slow-node detection compares a gang's measured throughput with: the oracle's answer
        without the job's own record where it learns per job (``throughput_shared``: the same for every
        job of the model on that shape, so a slow node's jobs read slower than their peers'), else
        ``predicted``; 0 where it cannot answer."""
        shared = getattr(self.oracle, "throughput_shared", None)
        if not callable(shared):
            return predicted
        try:
            got = shared([(job, spread_of(alloc, node_map))])
        except Exception as exc:  # a broken predictor must not stop the lifecycle: counted, logged
            metrics.OPERATOR_ERRORS.labels(step="predict").inc()
            log.error("throughput prediction failed", exc_info=True, extra={"error": str(exc)})
            return 0.0
        return float(got[0]) if got and got[0] > 0 else 0.0

    def _slow_nodes(self, now: float) -> None:
        """Slow-node detection (``scheduler.core.slow_nodes``): the ratio of every node with evidence as
        ``perfsched_node_slowdown_ratio{node}``, a Warning Event ``SlowNode`` on a node newly flagged."""
        cfg = self.config.slow_nodes
        self._residuals.extend(self._slow_pending)
        self._slow_pending.clear()
        while self._residuals and self._residuals[0].time < now - cfg.window_s:
            self._residuals.popleft()
        verdicts = node_slowdown(self._residuals, now=now, config=cfg)
        metrics.NODE_SLOWDOWN_RATIO.clear()
        for node, v in verdicts.items():
            metrics.NODE_SLOWDOWN_RATIO.labels(node=node).set(round(v.ratio, 4))
        flagged = {n: v.ratio for n, v in verdicts.items() if v.flagged}
        for node in sorted(flagged.keys() - self._flagged.keys()):
            v = verdicts[node]
            message = (
                f"jobs run at {v.ratio:.2f}x the throughput of the same models on peer {v.gpu_type} nodes "
                f"({v.models} model(s), {v.samples} reports over the last {cfg.window_s / 60:.0f} min)"
            )
            log.warning("slow node", extra={"node": node, "ratio": v.ratio})
            try:
                self.actuator.node_event(node, reason="SlowNode", message=message, now=now)
            except NotLeader:
                return
        self._flagged = flagged

    def _track_ends(
        self, tjs: Sequence[Obj], pods: Sequence[PodView], nodes: Sequence[Node], now: float
    ) -> None:
        """Forget the TrainingJobs that ended since the last round: finished (Succeeded, Failed), deleted
        or recreated under the same name (a new uid). The learning oracle drops the job's own state (what
        its shared levels learnt stays: ``scheduler.oracles.learning.CorrectedOracle.forget``) and so do
        this process's per-job maps. A finished job this process never saw running (it restarted, or
        took over as leader) is first replayed from its status (``_replay``)."""
        live: dict[str, str] = {}
        ended: dict[str, str] = {}
        completed: dict[str, tuple[str, str]] = {}
        replay: list[Obj] = []
        for obj in tjs:
            key, uid = crd.job_key(obj), str((obj.get("metadata") or {}).get("uid", ""))
            if (obj.get("status") or {}).get("phase") in crd.TERMINAL_PHASES:
                ended[key] = uid
                done = str((obj.get("status") or {}).get("completionTime") or "")
                completed[key] = (uid, done)
                if (
                    self._ended.get(key) != uid
                    and self._live.get(key) != uid
                    and not self._restored(uid, done)
                ):
                    replay.append(obj)
            else:
                live[key] = uid
        forget = getattr(self.oracle, "forget", None)
        for key, uid in self._live.items():
            if live.get(key) != uid:
                self._observed_report_time.pop(key, None)
                if callable(forget):
                    self._call_oracle(forget, key)
        listed = live.keys() | ended.keys()
        for per_job in (self._observed_report_time, self._announced):
            for key in [k for k in per_job if k not in listed]:
                del per_job[key]
        self._live, self._ended, self._completed = live, ended, completed
        self._restored_ended, self._restored_before = frozenset(), ""  # now in ``_ended``
        if replay and callable(forget):
            node_map = {n.name: n for n in nodes}
            # in the order they completed, as they were first learnt
            replay.sort(
                key=lambda o: (str((o.get("status") or {}).get("completionTime") or ""), crd.job_key(o))
            )
            for obj in replay[-REPLAY_MAX:]:
                self._replay(obj, pods, node_map, now)
                self._call_oracle(forget, crd.job_key(obj))

    def _restored(self, uid: str, completed: str) -> bool:
        """Whether the learning state restored at this leadership's start had learnt this finished job."""
        return uid in self._restored_ended or bool(completed and completed < self._restored_before)

    def _restore_state(self) -> None:
        """Restore the learning state from its ConfigMap (``learning_state``) as this process starts to
        lead, before its first round: the oracle's state, the live jobs' uids and last reports learnt,
        and the finished jobs learnt, which ``_track_ends`` then does not replay. A state that cannot be
        used is logged with the reason and ignored: the replay from TrainingJob status runs alone."""
        if self._store is None:
            return
        restore = getattr(self.oracle, "restore", None)
        started = time.perf_counter()
        got = self._store.read()
        if isinstance(got, Restored) and callable(restore):
            try:
                restore(got.oracle)
            except Exception as exc:  # another model, other settings, a value that does not parse
                got = f"not usable ({str(exc)[:200]})"
        if not isinstance(got, Restored):
            metrics.LEARNING_STATE_RESTORES.labels(outcome=restore_outcome(got)).inc()
            if got.startswith("missing"):  # a first start
                log.info("learning state not restored: %s; replaying finished TrainingJobs", got)
            else:
                metrics.OPERATOR_ERRORS.labels(step="learning_state").inc()
                log.warning("learning state not restored: %s; replaying finished TrainingJobs", got)
            return
        metrics.LEARNING_STATE_RESTORES.labels(outcome="restored").inc()
        age = None if got.written is None else max(0.0, self.clock.now() - got.written)
        if age is not None:
            metrics.LEARNING_STATE_RESTORED_AGE.set(age)
        self._live = {key: uid for key, (uid, _) in got.live.items()}
        self._ended = {}
        self._observed_report_time = {key: t for key, (_, t) in got.live.items() if t is not None}
        self._restored_ended, self._restored_before = got.ended, got.ended_before
        log.info(
            "learning state restored",
            extra={
                "live": len(got.live),
                "ended": len(got.ended),
                "age_seconds": None if age is None else round(age, 1),
                "seconds": round(time.perf_counter() - started, 3),
            },
        )

    def _save_state(self, now: float) -> None:
        """Write the learning state (``learning_state``) when ``learning_state_interval_s`` has passed
        since the last write and it changed; the leader only (``may_act`` just before writing)."""
        if self._store is None or now - self._state_at < self.config.learning_state_interval_s:
            return
        state = getattr(self.oracle, "state", None)
        if not callable(state) or not self.may_act():
            return
        self._state_at = now
        try:
            live = {key: (uid, self._observed_report_time.get(key)) for key, uid in self._live.items()}
            encoded = encode_capped(state(), live, self._completed)
        except Exception as exc:  # a state that cannot be written must not stop the lifecycle
            metrics.OPERATOR_ERRORS.labels(step="learning_state").inc()
            metrics.LEARNING_STATE_WRITES.labels(outcome="error").inc()
            log.error("learning state not encoded", exc_info=True, extra={"error": str(exc)})
            return
        if not encoded.blob:  # only under a bound below the smallest state: nothing to trim is left
            outcome = "error"
            self._store.log_once("size", "learning state too large to store even trimmed; not written")
        else:
            outcome = self._store.write(encoded.blob, now)
        if outcome == "written" and encoded.was_trimmed:
            outcome = "trimmed"
            self._store.log_once(  # the metrics keep the figures
                "trim",
                "learning state over its bound: trimmed to fit",
                bytes=len(encoded.blob),
                trimmed=encoded.trimmed,
                seconds=round(encoded.seconds, 3),
            )
        metrics.LEARNING_STATE_WRITES.labels(outcome=outcome).inc()
        if outcome in ("written", "trimmed"):
            metrics.LEARNING_STATE_BYTES.set(len(encoded.blob))
            metrics.LEARNING_STATE_LAST_WRITE.set(now)
            for kind in KINDS:
                metrics.LEARNING_STATE_RECORDS.labels(kind=kind).set(encoded.records[kind])
                metrics.LEARNING_STATE_TRIMMED.labels(kind=kind).set(encoded.trimmed[kind])

    def _replay(self, obj: Obj, pods: Sequence[PodView], node_map: Mapping[str, Node], now: float) -> None:
        """Feed a finished TrainingJob's last measured throughput (``status.observedThroughput``) to the
        oracle at its last gang's placement: ``status.placement`` (the extender's record of where each
        pod was bound), else its pods still listed. Nothing when either is missing, a node is gone, or
        the nodes are of several GPU types."""
        status = crd.parse_status(obj)
        observed = status.observed_throughput
        spec = crd.parse_spec(obj)
        if not observed or observed <= 0 or not isinstance(spec, crd.TrainingJobSpec):
            return
        key = crd.job_key(obj)
        prefix = f"{(obj.get('metadata') or {}).get('name', '')}-g{status.gang_generation}-"
        where = {pod: node for pod, node in status.placement.items() if pod.startswith(prefix)}
        if not where:
            where = {
                pv.name: pv.info.node_name
                for pv in pods
                if pv.info.job == key
                and pv.info.generation == str(status.gang_generation)
                and pv.info.node_name
            }
        if not where or any(n not in node_map for n in where.values()):
            return
        types = {node_map[n].gpu_type for n in where.values()}
        if len(types) != 1:
            return
        profile = None
        if spec.model_profile is not None:
            profile = self.profiles.resolve(
                str((obj.get("metadata") or {}).get("namespace", "")), spec.model_profile
            )
        job = crd.trainingjob_to_job(obj, now=now, known_model=self.known_model, model_profile=profile)
        if not isinstance(job, Job):
            return
        per_node = Counter(where.values())
        alloc = Allocation.of(key, types.pop(), spec.replicas.gpus_per_replica, dict(per_node))
        self._observe(job, spread_of(alloc, node_map), observed)

    @staticmethod
    def _call_oracle(call: Callable[[str], object], key: str) -> None:
        """``forget`` on the oracle; a failure is counted and logged, never raised (as ``_observe``)."""
        try:
            call(key)
        except Exception as exc:
            metrics.OPERATOR_ERRORS.labels(step="learn").inc()
            log.error("online correction failed", exc_info=True, extra={"job": key, "error": str(exc)})

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


def _deferred_starts(
    actions: Sequence[Action], trainingjobs: Collection[str], room: NodeRoom
) -> dict[str, str]:
    """TrainingJobs (of ``trainingjobs``) whose START must wait for pods exiting on its nodes -> why.

    The round's stops leave their pods draining (``room``); each START, in the order of the actions,
    takes its GPUs when the draining pods are not in the way. An adopted workload's START is not held
    back here (its owner creates its pods) but takes its GPUs."""
    for a in actions:
        if a.kind in (ActionKind.PREEMPT, ActionKind.RESIZE) and a.before is not None:
            room.stop(a.before)
    out: dict[str, str] = {}
    for a in actions:
        if a.kind is not ActionKind.START or a.after is None:
            continue
        need = gpus_by_node(a.after)
        why = room.blocked(need) if a.job in trainingjobs else ""
        if why:
            out[a.job] = why
        else:
            room.take(need)
    return out


def _defer_start(out: Outcome, why: str, now: float) -> Outcome:
    """A START whose intent is written but whose pods wait for room (a later round creates them)."""
    status = out.status
    if status is not None and out.create is not None:
        n = out.create.allocation.replicas
        conds = with_condition(
            status.conditions, "Running", False, "PodsStarting", f"0/{n} replicas running; {why}", now=now
        )
        status = evolve(status, conditions=conds)
    log.info("gang waits for exiting pods", extra={"why": why})
    return replace(out, create=None, status=status, waiting=why)


def _room_for_missing(view: JobView, out: Outcome, room: NodeRoom) -> tuple[Outcome, JobView]:
    """Create the missing replicas of a gang only where ``room`` has them; else the gang waits (no pod,
    no Event: the round that creates the pods sends it) and its view says why."""
    create = out.create
    assert create is not None
    plan = replica_nodes(create.allocation)
    ranks = view.missing if view.state is GangState.MISSING else tuple(range(len(plan)))
    need: Counter[str] = Counter()
    for rank in ranks:
        if rank < len(plan):
            need[plan[rank]] += create.allocation.gpus_per_replica
    why = room.blocked(need)
    if not why:
        room.take(need)
        return out, view
    log.info("gang waits for exiting pods", extra={"job": view.key, "why": why})
    return replace(out, create=None, events=(), waiting=why), replace(view, problems=why)


def _tolerations(obj: Obj) -> object:
    """The tolerations of a TrainingJob's pod template (what its pods carry), as given."""
    template = (obj.get("spec") or {}).get("template") or {}
    return ((template.get("spec") or {}) if isinstance(template, Mapping) else {}).get("tolerations")


def _start_timeout(spec: crd.TrainingJobSpec | Unschedulable, default: float) -> float:
    """The job's start timeout: ``spec.startTimeoutSeconds``, else the operator's default."""
    if isinstance(spec, crd.TrainingJobSpec) and spec.start_timeout_seconds is not None:
        return float(spec.start_timeout_seconds)
    return default


def _creation_order(obj: Obj) -> tuple[float, str]:
    """Oldest TrainingJob first (ties by namespace/name)."""
    return (crd.parse_time((obj.get("metadata") or {}).get("creationTimestamp")) or 0, crd.job_key(obj))
