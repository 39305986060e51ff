"""What the operator sees: each TrainingJob's gang, progress and health, derived from API objects alone.

Pure (no I/O, ``now`` passed in). Nothing the operator decides is remembered in memory: the intent is in
the TrainingJob's status (``status.allocation`` set = "a gang of generation ``status.gangGeneration``
with this allocation should exist") and the facts are in the pods. ``observe_job`` joins the two:

- ``cur``: pods of the intended generation; ``stale``: unfinished pods that are not (older generations,
  or any pod while no gang is intended), which the operator deletes;
- ``draining``: unfinished pods already being deleted; their GPUs stay taken until they are gone;
- the gang's ``state``: ``IDLE`` (no gang, nothing draining: the job waits for the policy), ``DRAINING``,
  ``STARTING`` (pods created, not all Running), ``RUNNING``, ``COMPLETED`` (replica 0 reported the
  declared work done, or exited 0), ``CRASHED`` (a pod of the gang Failed), ``BROKEN`` (a pod of a
  running gang vanished, or its node failed), ``STUCK`` (not every replica ran within the start timeout),
  ``MISSING`` (fewer pods than the intent: an operator died half-way through creating the gang; recreate
  the rest);
- ``orphans``: unfinished pods (any generation) bound to a failed node, which the operator deletes at once
  (grace 0: no kubelet is left to run their grace period); they hold no GPUs the planner can count;
- ``problems``: what the pods of a gang that is not running say about why (their own reasons, quoted and
  capped: a FailedScheduling message, ImagePullBackOff, CreateContainerConfigError, an unbound claim);
- progress, checkpoint and observed throughput from the ``perfsched.dev/progress`` reports, replica 0
  authoritative, falling back to the values saved in the status.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from scheduler.core.types import Allocation
from scheduler.k8s import crd
from scheduler.k8s.codec import CodecError, NodeHealth, PodInfo, decode_pod
from scheduler.k8s.progress import ProgressReport, parse_progress, parse_start_progress
from scheduler.k8s.tolerations import tolerates_no_execute
from scheduler.names import ANNOTATION_PROGRESS, ANNOTATION_START_PROGRESS


class GangState(StrEnum):
    IDLE = "idle"
    DRAINING = "draining"
    STARTING = "starting"
    RUNNING = "running"
    COMPLETED = "completed"
    CRASHED = "crashed"
    BROKEN = "broken"
    STUCK = "stuck"
    MISSING = "missing"
    TERMINAL = "terminal"


@dataclass(frozen=True, slots=True)
class PodView:
    """One pod of a TrainingJob: the decoded facts plus what only the operator reads."""

    info: PodInfo
    deleting: bool
    report: ProgressReport | None
    start_progress: float | None
    created: float | None
    failure: str = ""
    #: why an unfinished pod does not run yet, in its own words ("" when it just has not got there)
    waiting: str = ""

    @property
    def name(self) -> str:
        return self.info.name

    @property
    def unfinished(self) -> bool:
        return not self.info.terminal

    @property
    def node(self) -> str:
        """Where the pod is (bound) or is planned to be."""
        return self.info.node_name or self.info.planned_node


def _failure_text(obj: Mapping[str, Any]) -> str:
    status = obj.get("status") or {}
    parts = []
    for cs in status.get("containerStatuses") or []:
        term = (cs.get("state") or {}).get("terminated") or {}
        if term:
            parts.append(
                f"container {cs.get('name', '?')} exited with code {term.get('exitCode', '?')}"
                + (f" ({term['reason']})" if term.get("reason") else "")
            )
    if status.get("reason"):
        parts.append(str(status["reason"]) + (f": {status['message']}" if status.get("message") else ""))
    return "; ".join(parts) or "pod failed"


#: seconds a starting gang's pods report a problem before it is news (at most half the start timeout)
PROBLEM_AFTER_S = 10.0
#: container waiting reasons that are progress, not a problem
_STARTING_REASONS = frozenset({"ContainerCreating", "PodInitializing"})
#: longest quoted message of a pod's own reason
MESSAGE_CAP = 200


def quoted(reason: str, message: object) -> str:
    """``Reason "message"``, the message capped at ``MESSAGE_CAP`` characters (one line)."""
    text = " ".join(str(message or "").split())
    if len(text) > MESSAGE_CAP:
        text = text[: MESSAGE_CAP - 3] + "..."
    return f'{reason} "{text}"' if text else reason


def _waiting_text(obj: Mapping[str, Any]) -> str:
    """Why a pod that is not Running is stuck, from its status: a container waiting for a reason other
    than being created (ImagePullBackOff, CreateContainerConfigError, ...), else a PodScheduled=False
    condition (kube-scheduler's FailedScheduling message: no fitting node, an unbound or missing claim)."""
    status = obj.get("status") or {}
    if not isinstance(status, Mapping):
        return ""
    for key in ("initContainerStatuses", "containerStatuses"):
        for cs in status.get(key) or []:
            if not isinstance(cs, Mapping):
                continue
            waiting = (cs.get("state") or {}).get("waiting") or {}
            reason = waiting.get("reason") if isinstance(waiting, Mapping) else None
            if reason and reason not in _STARTING_REASONS:
                return quoted(str(reason), waiting.get("message"))
    for cond in status.get("conditions") or []:
        if isinstance(cond, Mapping) and cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            return quoted(str(cond.get("reason") or "Unschedulable"), cond.get("message"))
    return ""


def pod_view(obj: Mapping[str, Any]) -> PodView | None:
    """A pod API object as a ``PodView``; None for a pod whose fields do not decode."""
    try:
        info = decode_pod(obj)
    except CodecError:
        return None
    meta = obj.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    return PodView(
        info=info,
        deleting=bool(meta.get("deletionTimestamp")),
        report=parse_progress(annotations.get(ANNOTATION_PROGRESS)),
        start_progress=parse_start_progress(annotations.get(ANNOTATION_START_PROGRESS)),
        created=crd.parse_time(meta.get("creationTimestamp")),
        failure=_failure_text(obj) if info.phase == "Failed" else "",
        waiting=_waiting_text(obj) if info.phase == "Pending" else "",
    )


@dataclass(frozen=True, slots=True)
class JobView:
    """A TrainingJob as observed in one round (see the module docstring)."""

    key: str
    obj: Mapping[str, Any]
    status: crd.TrainingJobStatus
    state: GangState
    generation: int
    cur: tuple[PodView, ...] = ()
    stale: tuple[PodView, ...] = ()
    draining: tuple[PodView, ...] = ()
    orphans: tuple[PodView, ...] = ()
    allocation: Allocation | None = None
    progress: float = 0.0
    checkpoint: float = 0.0
    observed_throughput: float | None = None
    start_progress: float = 0.0
    detail: str = ""
    running_replicas: int = 0
    expected_replicas: int = 0
    missing: tuple[int, ...] = field(default_factory=tuple)
    #: the gang lost a node (BROKEN by a node failure, not by its pods)
    node_failed: bool = False
    #: why the pods of a gang that is not running wait, in their own words ("" when none says)
    problems: str = ""
    #: the pods of a gang that is not running have reported ``problems`` for a while: news (see
    #: ``PROBLEM_AFTER_S``)
    problems_last: bool = False

    @property
    def name(self) -> str:
        return str(self.obj["metadata"]["name"])

    @property
    def namespace(self) -> str:
        return str(self.obj["metadata"].get("namespace", "default"))


def intended_allocation(job_key: str, status: crd.TrainingJobStatus) -> Allocation | None:
    """The gang the status says should exist, as a core ``Allocation`` (None: no gang intended)."""
    a = status.allocation
    if a is None or a.replicas <= 0 or not a.replicas_per_node or a.gpus_per_replica <= 0:
        return None
    return Allocation.of(job_key, a.gpu_type, a.gpus_per_replica, a.replicas_per_node)


def observe_job(
    obj: Mapping[str, Any],
    pods: Sequence[PodView],
    *,
    now: float,
    total_work: float | None,
    node_types: Mapping[str, str],
    start_timeout_s: float,
    failed_nodes: Mapping[str, str] | None = None,
    failed_pods: Mapping[str, str] | None = None,
) -> JobView:
    """Join a TrainingJob's status with its pods into a ``JobView`` (pure).

    ``failed_nodes`` maps each failed node (NotReady beyond the grace period, deleted, tainted NoExecute)
    to why (see ``node_failures``); ``failed_pods`` maps each pod that must leave its GPUs while its node
    stays healthy (a DRA device it holds is tainted ``NoExecute``, ``DraInventory.evicted``) to why: the
    gang of such a pod is torn down as on a failed node, and the pod deleted at once.
    ``start_timeout_s`` is the job's start timeout (0: none)."""
    failed = failed_nodes or {}
    failed_pods = failed_pods or {}
    key = crd.job_key(obj)
    status = crd.parse_status(obj)
    gen = status.gang_generation
    intent = intended_allocation(key, status)

    cur = [p for p in pods if intent is not None and p.info.generation == str(gen)]
    cur_names = {p.name for p in cur}
    others = [p for p in pods if p.name not in cur_names]
    orphans = tuple(p for p in pods if p.unfinished and (p.info.node_name in failed or p.name in failed_pods))
    orphan_names = {p.name for p in orphans}
    stale = tuple(p for p in others if p.unfinished and not p.deleting and p.name not in orphan_names)
    draining = tuple(p for p in pods if p.unfinished and p.deleting and p.name not in orphan_names)

    progress, checkpoint, observed = _progress(status, cur, pods, total_work)
    starts = [p.start_progress for p in cur if p.start_progress is not None]
    start_progress = starts[0] if starts else status.checkpoint_progress

    view = JobView(
        key=key,
        obj=obj,
        status=status,
        state=GangState.IDLE,
        generation=gen,
        cur=tuple(cur),
        stale=stale,
        draining=draining,
        orphans=orphans,
        progress=progress,
        checkpoint=checkpoint,
        observed_throughput=observed,
        start_progress=start_progress,
    )

    if status.phase in crd.TERMINAL_PHASES:
        return replace(view, state=GangState.TERMINAL)
    if intent is None:
        return replace(view, state=GangState.DRAINING if (stale or draining) else GangState.IDLE)
    return _gang_state(
        view,
        intent,
        now=now,
        total_work=total_work,
        node_types=node_types,
        start_timeout_s=start_timeout_s,
        failed_nodes=failed,
        failed_pods=failed_pods,
    )


def _progress(
    status: crd.TrainingJobStatus, cur: Sequence[PodView], pods: Sequence[PodView], total_work: float | None
) -> tuple[float, float, float | None]:
    """(progress, checkpoint, observed throughput): replica 0 of the current gang when it reports, else
    what the status saved; the checkpoint is the best any replica-0 report (old gangs included) has seen."""
    progress, checkpoint = status.progress, status.checkpoint_progress
    observed: float | None = None
    r0 = next((p for p in cur if p.info.replica_index == 0), None)
    if r0 is not None and r0.report is not None:
        progress = r0.report.progress
        if not r0.deleting and r0.report.throughput > 0:
            observed = r0.report.throughput
    # A checkpoint survives restarts.
    for p in pods:
        if p.info.replica_index == 0 and p.report is not None:
            checkpoint = max(checkpoint, p.report.checkpoint)
    if total_work is not None:
        progress = min(progress, total_work)
        checkpoint = min(checkpoint, total_work)
    checkpoint = min(checkpoint, max(progress, checkpoint))
    progress = max(progress, checkpoint)
    return progress, checkpoint, observed


def _gang_state(
    view: JobView,
    intent: Allocation,
    *,
    now: float,
    total_work: float | None,
    node_types: Mapping[str, str],
    start_timeout_s: float,
    failed_nodes: Mapping[str, str],
    failed_pods: Mapping[str, str],
) -> JobView:
    """The state of an intended gang (see the module docstring), from its pods."""
    key, status, cur, progress = view.key, view.status, view.cur, view.progress
    expected = intent.replicas
    view = replace(view, expected_replicas=expected)
    done = (total_work is not None and progress >= total_work - 1e-9) or any(
        p.info.replica_index == 0 and p.info.phase == "Succeeded" for p in cur
    )
    if done:
        return replace(view, state=GangState.COMPLETED, detail="replica 0 reported all work done")
    failed = [p for p in cur if p.info.phase == "Failed"]
    if failed:
        return replace(
            view, state=GangState.CRASHED, detail=f"pod {failed[0].name} failed: {failed[0].failure}"
        )
    live = [p for p in cur if p.unfinished and not p.deleting]
    present = {p.info.replica_index for p in cur}
    missing = tuple(i for i in range(expected) if i not in present)
    failed_here = sorted({p.info.node_name for p in cur if p.unfinished and p.info.node_name in failed_nodes})
    if failed_here:
        why = "; ".join(f"node {n} {failed_nodes[n]}" for n in failed_here)
        return replace(view, state=GangState.BROKEN, node_failed=True, detail=why)
    evicted = sorted(p.name for p in cur if p.unfinished and p.name in failed_pods)
    if evicted:
        why = "; ".join(f"pod {n}: {failed_pods[n]}" for n in evicted)
        return replace(view, state=GangState.BROKEN, node_failed=True, detail=why)
    lost_nodes = sorted({p.node for p in live if p.node and p.node not in node_types})
    if lost_nodes:
        return replace(
            view,
            state=GangState.BROKEN,
            node_failed=True,
            detail=f"node {', '.join(lost_nodes)} of the gang is gone",
        )
    wrong = sorted(
        f"{p.name} on {p.info.node_name} ({node_types[p.info.node_name]})"
        for p in live
        if p.info.node_name and node_types[p.info.node_name] != intent.gpu_type
    )
    if wrong:
        return replace(
            view,
            state=GangState.BROKEN,
            detail=f"replicas bound to nodes without the decided {intent.gpu_type} GPUs: {', '.join(wrong)}",
        )
    # A replica that already exited 0 is done, not gone: replica 0 finishing completes the job.
    finished = sum(1 for p in cur if p.info.phase == "Succeeded")
    running = sum(1 for p in live if p.info.phase == "Running") + finished
    view = replace(view, running_replicas=running)
    deleted = [p for p in cur if p.deleting and p.unfinished]
    if missing or deleted:
        if status.phase == "Admitted" and not deleted:
            # The gang was being created when the previous leader stopped: create what is missing.
            return replace(view, state=GangState.MISSING, missing=missing)
        gone = sorted(
            set(missing) | {p.info.replica_index for p in deleted if p.info.replica_index is not None}
        )
        return replace(
            view,
            state=GangState.BROKEN,
            detail=f"replica(s) {', '.join(map(str, gone))} of the running gang disappeared",
        )
    members = [p for p in cur if (p.unfinished and not p.deleting) or p.info.phase == "Succeeded"]
    view = replace(view, allocation=_allocation_of(key, intent, members))
    if running == expected:
        return replace(view, state=GangState.RUNNING)
    problems = pod_problems(live)
    view = replace(view, problems=problems)
    started = min((p.created for p in cur if p.created is not None), default=None)
    if started is None:
        started = crd.parse_time(status.last_change_time)
    if started is not None and problems:
        # kube-scheduler retries and images take a while: a problem is news once it lasts, and always
        # before the start timeout stops the gang
        after = min(PROBLEM_AFTER_S, start_timeout_s / 2) if start_timeout_s > 0 else PROBLEM_AFTER_S
        view = replace(view, problems_last=now - started >= after)
    if started is not None and start_timeout_s > 0 and now - started > start_timeout_s:
        detail = f"{running}/{expected} replicas running {start_timeout_s:.0f} s after the gang started"
        return replace(view, state=GangState.STUCK, detail=f"{detail}: {problems}" if problems else detail)
    return replace(view, state=GangState.STARTING)


def pod_problems(pods: Sequence[PodView]) -> str:
    """What the pods that do not run say, grouped by reason (at most 3), e.g. ``pods a-g1-0, a-g1-1:
    FailedScheduling "0/4 nodes are available: persistentvolumeclaim \"ckpt\" not found"``. Pods that
    wait without a reason (created, being bound with the rest of the gang) are not problems."""
    by_reason: dict[str, list[str]] = {}
    for p in pods:
        if p.waiting and p.info.phase != "Running":
            by_reason.setdefault(p.waiting, []).append(p.name)
    parts = []
    for reason, names in list(by_reason.items())[:3]:
        who = f"pod {names[0]}" if len(names) == 1 else f"pods {', '.join(names)}"
        parts.append(f"{who}: {reason}")
    if len(by_reason) > 3:
        parts.append(f"{len(by_reason) - 3} more reason(s)")
    return "; ".join(parts)


def node_failures(
    healths: Sequence[NodeHealth], pod_nodes: Collection[str], *, now: float, grace_s: float
) -> tuple[dict[str, str], set[str], dict[str, tuple[tuple[str, str], ...]]]:
    """(failed nodes -> why, nodes NotReady still within the grace period, failed nodes -> the NoExecute
    taints that alone fail them), pure.

    A node fails when it is NotReady (Ready False or Unknown) for longer than ``grace_s``, carries a
    ``NoExecute`` taint (other than the lifecycle controller's own), or is gone while pods are bound to
    it (``pod_nodes``: the nodes pods are bound to). A node failed only by its taints is in the third
    map: pods whose spec tolerates those taints for good stay there (``without_tolerated``).
    """
    failed: dict[str, str] = {}
    suspect: set[str] = set()
    tainted: dict[str, tuple[tuple[str, str], ...]] = {}
    known = set()
    for h in healths:
        known.add(h.name)
        down = now - h.since if not h.ready and h.since is not None else None
        if not h.ready and down is not None and down > grace_s:
            why = f"is NotReady for {down:.0f} s (grace period {grace_s:.0f} s)"
            failed[h.name] = (
                f"is tainted NoExecute ({', '.join(sorted(h.no_execute))})" if h.no_execute else why
            )
        elif h.no_execute:
            failed[h.name] = f"is tainted NoExecute ({', '.join(sorted(h.no_execute))})"
            tainted[h.name] = h.no_execute_taints or tuple((k, "") for k in h.no_execute)
            if not h.ready:
                suspect.add(h.name)
        elif not h.ready:
            suspect.add(h.name)
    for name in sorted(set(pod_nodes) - known):
        if name:
            failed[name] = "was deleted"
    return failed, suspect, tainted


def without_tolerated(
    failed: Mapping[str, str], tainted: Mapping[str, Sequence[tuple[str, str]]], tolerations: object
) -> Mapping[str, str]:
    """``failed`` less the nodes failed only by NoExecute taints that ``tolerations`` (a pod spec's)
    tolerate for good: the taint manager leaves such pods running, and so does the operator. Pure."""
    keep = [n for n, taints in tainted.items() if n in failed and tolerates_no_execute(tolerations, taints)]
    if not keep:
        return failed
    return {n: why for n, why in failed.items() if n not in keep}


def _allocation_of(key: str, intent: Allocation, live: Sequence[PodView]) -> Allocation:
    """The gang's allocation where its pods really are (bound node, else the planned one)."""
    per_node: dict[str, int] = {}
    for p in live:
        node = p.node
        if node:
            per_node[node] = per_node.get(node, 0) + 1
    return Allocation.of(key, intent.gpu_type, intent.gpus_per_replica, per_node)


def held_allocations(
    pods: Sequence[PodView], accounted: Collection[str], node_types: Mapping[str, str]
) -> dict[str, Allocation]:
    """Pseudo-allocations for GPUs held by pods no job in the round accounts for, one per pod.

    Pods of perfsched jobs still draining (checkpointing after SIGTERM), leftovers of older generations
    and pods perfsched does not manage all hold their GPUs until they are gone, but only for now: they
    are modelled as allocations of jobs that are not in the round (``"<namespace>/<pod>#held"``), which
    every policy treats as taken and never moves, rather than as ``Node.gpus_external``, which the core
    reads as capacity that will never come back (and would make a waiting job look unschedulable).
    ``accounted`` holds the keys (``namespace/name``) of pods whose GPUs a real allocation already
    counts. A pod holds GPUs while it is bound and unfinished, also while it is being deleted.
    """
    out: dict[str, Allocation] = {}
    for p in pods:
        info = p.info
        gpu_type = node_types.get(info.node_name)
        if not info.holds_gpus or gpu_type is None or info.key in accounted:
            continue
        name = f"{info.key}#held"
        out[name] = Allocation.of(name, gpu_type, info.gpus, {info.node_name: 1})
    return out
