"""One scheduling round: ask the policy, check its answer, plan the actions, explain every wait.

Pure. ``run_round(snapshot, jobs, policy, oracle)`` is the single entry point that the operator, the
simulator and the tests call. It validates the policy's decisions against the invariants every policy
must keep (no node over-committed, gangs all-or-nothing within min/max replicas, rigid jobs at exactly
``max_replicas``, only allowed GPU types, whole replicas of the job's size on nodes of the decided type)
and raises ``PolicyInvariantError`` naming the policy and the job when one is broken.

Memory fit (when the oracle is also a ``MemoryOracle``): a decision that would start, move or resize a
job onto a placement whose GPU memory it does not fit is turned into a wait whose reason says why
(``hold_back_non_fits``), whatever the policy; and a waiting job that fits in the memory of none of its
allowed GPU types waits with an unresolvable reason naming the GPU and the memory (``_WaitExplainer``).

Queues (when ``snapshot.queues`` is not empty): ``scheduler.core.admission.admit`` first decides which
jobs their queues' quotas admit this round; the policy decides those, the rest wait (or are reclaimed)
with a reason naming the queue and the limit. Without queues this step is skipped.

Slow nodes (when ``slow_nodes`` is given, by the operator): after planning, a running gang on a node
confirmed slow whose predicted gain pays its restart is moved off it onto free GPUs
(``scheduler.core.slow_nodes.moves_off_slow_nodes``). Without it (the simulator) this step is skipped.

``IncrementalRound`` is the optional fast path of a policy for callers that see every change (the
simulator): a stateful object, made by ``policy.incremental(...)``, that gives the same allocations as
``run_round`` while only looking at what changed since the last round (see the protocol's docstring).
``IncrementalPolicy`` declares that optional capability of a policy; ``RoundView`` is what the round may
look up of the round its caller would otherwise hand ``run_round``.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from scheduler.core.admission import Admission, admit
from scheduler.core.decisions import Action, ActionKind, Decision, RoundResult, Unschedulable
from scheduler.core.errors import ConfigError, PermanentError
from scheduler.core.placement import spread_of
from scheduler.core.planner import outgrown, plan_detailed
from scheduler.core.protocols import MemoryOracle, Policy, ThroughputOracle
from scheduler.core.slow_nodes import SlowNodeMoves, moves_off_slow_nodes
from scheduler.core.types import Allocation, ClusterSnapshot, Job, MemoryFit, Node, PlacementShape

log = logging.getLogger(__name__)


class PolicyInvariantError(PermanentError):
    """A policy returned decisions that break a scheduling invariant (a bug in that policy)."""


class IncrementalMismatch(AssertionError):
    """A policy's incremental round and ``run_round`` disagreed (a bug in the incremental round).

    Defined here rather than beside the simulator's engine, which raises it: a class derived from a
    built-in exception cannot live in a module compiled with mypyc."""


class RoundView(Protocol):
    """What an incremental round may look up, when it needs it, of the round its caller would otherwise
    hand ``run_round``: a job as ``run_round`` would be given it now (progress, restarts, measured
    throughput), and the snapshot as the policy would see it (``restart_cost_s`` filled in)."""

    def job(self, name: str) -> Job:
        """The active job ``name`` as ``run_round`` would be given it."""

    def snapshot(self) -> ClusterSnapshot:
        """The round's snapshot as ``run_round`` hands it to the policy."""


class IncrementalRound(Protocol):
    """A policy's incremental round: ``run_round``'s allocations for a caller that reports every change.

    A policy MAY offer ``incremental(nodes, oracle, jobs) -> IncrementalRound | None`` (the optional
    capability ``IncrementalPolicy``, which callers test with ``isinstance`` before falling back to
    ``run_round``; None means "not for this cluster or these jobs"). The caller starts with an empty
    cluster and then reports each job when it arrives (``add``) and when it leaves while holding or
    waiting for GPUs (``remove``: done or failed); every round it calls ``round`` with the progress and
    attained service of each running job at ``now`` (and a ``RoundView`` for whatever else the policy
    reads, e.g. LAS pricing a consolidation) and applies the changes it returns. The contract: the
    returned changes are exactly the allocations that differ between ``run_round(snapshot, jobs, policy,
    oracle)`` and what runs now, for the snapshot and jobs the caller would otherwise have built, so
    results are identical (the simulator's ``check_incremental`` mode runs both and compares every
    round). It assumes no job reached its total work before its completion is reported (the caller falls
    back to ``run_round`` for such a round and stops using the object), and an oracle whose answer to a
    question does not depend on the other questions in the batch.
    """

    def add(self, job: Job) -> None:
        """A job arrived (waiting, holding nothing)."""

    def remove(self, name: str) -> None:
        """A job left (finished or failed); its GPUs, if any, are free."""

    def round(
        self, now: float, running: Mapping[str, tuple[float, float]], view: RoundView
    ) -> dict[str, Allocation | None]:
        """The jobs whose allocation changes this round (None: stops running), given each running job's
        ``(progress, attained_service)`` at ``now``; the object assumes the caller applies them."""


@runtime_checkable
class IncrementalPolicy(Protocol):
    """The optional capability of a ``Policy`` with an incremental round (``las``, ``srsf``, ``fifo``).

    ``incremental`` returns a fresh ``IncrementalRound`` for a caller that starts with an empty cluster of
    ``nodes`` and will report ``jobs`` as they arrive, or None when the policy has none for this cluster
    or these jobs. A policy without the method is used through ``run_round`` alone.
    """

    def incremental(
        self, nodes: Sequence[Node], oracle: ThroughputOracle, jobs: Sequence[Job]
    ) -> IncrementalRound | None:
        """An incremental round for these nodes and jobs, or None (use ``run_round``)."""


@dataclass(frozen=True, slots=True)
class RoundCosts:
    """What changing a running job costs, in seconds (see ``scheduler.core.planner``)."""

    restart_cost_s: float = 0.0
    resize_cost_s: float = 0.0
    min_resize_interval_s: float = 0.0

    def __post_init__(self) -> None:
        for name in ("restart_cost_s", "resize_cost_s", "min_resize_interval_s"):
            value = getattr(self, name)
            if not value >= 0:
                raise ConfigError(f"RoundCosts.{name} must be >= 0 seconds, got {value!r}")


def validate_decisions(
    policy_name: str, snapshot: ClusterSnapshot, jobs: Sequence[Job], decisions: Mapping[str, Decision]
) -> None:
    """Raise ``PolicyInvariantError`` if ``decisions`` break an invariant; see the module docstring."""

    def fail(job: str, what: str) -> None:
        raise PolicyInvariantError(f"policy {policy_name!r} broke an invariant for job {job!r}: {what}")

    by_name = {j.name: j for j in jobs}
    for name in decisions:
        if name not in by_name:
            fail(name, "decided a job that is not in this round")
    node_map = snapshot.node_map()
    node_type = {n: node.gpu_type for n, node in node_map.items()}
    used = snapshot.used_by_node(exclude=by_name)
    used_get = used.get
    for job in jobs:
        dec = decisions.get(job.name)
        if dec is None:
            fail(job.name, "returned no decision for it")
            return
        alloc = dec.allocation
        if alloc is None:
            continue
        gpr = alloc.gpus_per_replica
        per_node = alloc.replicas_per_node
        if alloc.job != job.name:
            fail(job.name, f"its allocation names job {alloc.job!r}")
        if gpr != job.gpus_per_replica:
            fail(job.name, f"{gpr} GPUs per replica, the job asks {job.gpus_per_replica}")
        replicas = sum(r for _, r in per_node)
        lo = job.min_replicas if job.is_elastic else job.max_replicas
        if not lo <= replicas <= job.max_replicas:
            fail(job.name, f"{replicas} replicas, outside [{lo}, {job.max_replicas}]")
        gpu_type = alloc.gpu_type
        if job.allowed_gpu_types and gpu_type not in job.allowed_gpu_types:
            fail(job.name, f"GPU type {gpu_type} is not in its allowed types")
        for node_name, r in per_node:
            have = node_type.get(node_name)
            if have is None:
                fail(job.name, f"placed on unknown node {node_name!r}")
                return
            if r <= 0:
                fail(job.name, f"{r} replicas on node {node_name}")
            if have != gpu_type:
                fail(job.name, f"node {node_name} has {have}, the allocation says {gpu_type}")
            used[node_name] = used_get(node_name, 0) + r * gpr
    for node_name, gpus in sorted(used.items()):
        node = node_map.get(node_name)
        cap = node.capacity_for_jobs if node is not None else 0
        if gpus > cap:
            holders = sorted(
                n
                for n, d in decisions.items()
                if d.allocation is not None and d.allocation.gpus_on(node_name)
            )
            raise PolicyInvariantError(
                f"policy {policy_name!r} over-commits node {node_name}: {gpus} GPUs decided, "
                f"{cap} available (jobs {', '.join(holders)})"
            )


def hold_back_non_fits(
    snapshot: ClusterSnapshot, jobs: Sequence[Job], decisions: Mapping[str, Decision], oracle: MemoryOracle
) -> dict[str, Decision]:
    """The decisions with every start, move or resize onto a placement the job does not fit in GPU memory
    replaced by a wait that says so (the GPUs stay free this round)."""
    out = dict(decisions)
    by_name = {j.name: j for j in jobs}
    node_map = snapshot.node_map()
    asks: list[tuple[str, tuple[Job, PlacementShape]]] = []
    for name, dec in decisions.items():
        alloc = dec.allocation
        if alloc is None or alloc == snapshot.allocations.get(name):
            continue
        asks.append((name, (by_name[name], spread_of(alloc, node_map))))
    if not asks:
        return out
    for (name, (_, shape)), fit in zip(asks, oracle.memory_fit([q for _, q in asks]), strict=True):
        if fit is not None and not fit.fits:
            log.info("decision held back: does not fit GPU memory", extra={"job": name, "why": fit.message})
            out[name] = Decision(
                name, None, f"not started on {shape.num_gpus} x {shape.gpu_type}: {fit.message}"
            )
    return out


def _memory_verdict(
    job: Job, nodes: Sequence[Node], oracle: MemoryOracle
) -> Unschedulable | frozenset[str] | None:
    """An unresolvable reason when ``job`` fits in the memory of none of its allowed GPU types at its
    smallest GPU count (packed on as few of that type's nodes as possible); else the types it fits (or
    the oracle cannot judge); None when there is no allowed type with GPUs."""
    largest: dict[str, Node] = {}
    for n in nodes:
        if n.capacity_for_jobs > 0 and job.allows(n.gpu_type):
            best = largest.get(n.gpu_type)
            if best is None or n.capacity_for_jobs > best.capacity_for_jobs:
                largest[n.gpu_type] = n
    if not largest:
        return None
    count = job.min_gpus
    queries = []
    for t, n in sorted(largest.items()):
        per_node = max(1, n.capacity_for_jobs)
        nodes_needed = -(-count // per_node)
        queries.append(
            (
                job,
                PlacementShape(t, count, nodes_needed, min(count, per_node), n.interconnect, n.network_gbps),
            )
        )
    fits = oracle.memory_fit(queries)
    if any(f is None or f.fits for f in fits):
        return frozenset(q[1].gpu_type for q, f in zip(queries, fits, strict=True) if f is None or f.fits)
    # quote the type that comes closest (most memory left over, i.e. the smallest shortfall)
    closest: MemoryFit = min(
        (f for f in fits if f is not None), key=lambda f: (f.need_gib - f.have_gib, f.message)
    )
    return Unschedulable(f"does not fit in GPU memory on any allowed GPU type: {closest.message}", False)


def _final_allocations(snapshot: ClusterSnapshot, actions: Sequence[Action]) -> dict[str, Allocation]:
    final = dict(snapshot.allocations)
    for a in actions:
        if a.after is None:
            final.pop(a.job, None)
        else:
            final[a.job] = a.after
    return final


@dataclass
class _WaitExplainer:
    """Why jobs wait, from the GPUs per type after the round; memoised per job shape (many jobs share one)."""

    free_by_type: Mapping[str, int]
    cap_by_type: Mapping[str, int]
    largest_by_type: Mapping[str, int]
    memo: dict[tuple[frozenset[str], int, int], Unschedulable | str] = field(default_factory=dict)
    nodes: Sequence[Node] = ()
    memory: MemoryOracle | None = None

    def _by_shape(self, job: Job) -> Unschedulable | str:
        """An unresolvable reason, or the GPU type to quote in the wait reason."""
        key = (job.allowed_gpu_types, job.gpus_per_replica, job.min_gpus)
        got = self.memo.get(key)
        if got is not None:
            return got
        cap, largest = self.cap_by_type, self.largest_by_type
        types = [t for t in sorted(cap) if job.allows(t)]
        result: Unschedulable | str
        if not types:
            allowed = ", ".join(sorted(job.allowed_gpu_types))
            have = ", ".join(sorted(cap)) or "none"
            result = Unschedulable(f"allows GPU types {allowed}; cluster has {have}", resolvable=False)
        elif job.gpus_per_replica > max(largest[t] for t in types):
            biggest = max(largest[t] for t in types)
            result = Unschedulable(
                f"needs {job.gpus_per_replica} GPUs per replica; the largest allowed node has {biggest}",
                resolvable=False,
            )
        elif job.min_gpus > max(cap[t] for t in types):
            best_cap = max(cap[t] for t in types)
            result = Unschedulable(
                f"asks {job.min_gpus} GPUs, cluster has {best_cap} of one allowed type", False
            )
        else:
            # the type it could ever fit on with the most free GPUs now
            fitting = [t for t in types if cap[t] >= job.min_gpus and largest[t] >= job.gpus_per_replica]
            result = max(fitting or types, key=lambda t: (self.free_by_type.get(t, 0), t))
        self.memo[key] = result
        return result

    def reason(self, job: Job, dec: Decision | None, held_back: Mapping[str, str]) -> Unschedulable:
        verdict = self._by_shape(job)
        if isinstance(verdict, Unschedulable):
            return verdict
        if self.memory is not None:
            mem = _memory_verdict(job, self.nodes, self.memory)
            if isinstance(mem, Unschedulable):
                return mem
            if mem and verdict not in mem:
                # quote a type whose memory the job fits, the one with the most free GPUs now
                verdict = max(sorted(mem), key=lambda t: self.free_by_type.get(t, 0))
        if dec is not None and dec.unresolvable:
            return Unschedulable(dec.reason or "the policy will never run it as specified", resolvable=False)
        gpus = f"{job.min_gpus} GPU{'' if job.min_gpus == 1 else 's'}"
        text = f"waiting for {gpus} of type {verdict}: {self.free_by_type.get(verdict, 0)} free"
        extra = held_back.get(job.name) or (dec.reason if dec is not None else "")
        return Unschedulable(f"{text}; {extra}" if extra else text)


def _decide(
    policy: Policy,
    snapshot: ClusterSnapshot,
    jobs: Sequence[Job],
    oracle: ThroughputOracle,
    admission: Admission | None,
) -> dict[str, Decision]:
    """The policy's validated decisions; with queues, the policy decides only the jobs their queues admit
    (on the snapshot ``admit`` prepared) and the others wait (``scheduler.core.admission``). Where the
    admitted jobs may choose among GPU types and the answer breaks a queue's quota, the policy decides
    again with those queues' jobs pinned to the type admission counted them on, then (if still broken)
    with every queue's pinned: admission keeps every quota with those."""
    if admission is None:
        decisions = _stop_outgrown(snapshot, jobs, policy.allocate(snapshot, jobs, oracle))
        validate_decisions(policy.name, snapshot, jobs, decisions)
        return decisions
    admitted = admission.jobs
    pinned: set[str] | None = set()
    while True:
        decisions = _stop_outgrown(
            admission.snapshot, admitted, policy.allocate(admission.snapshot, admitted, oracle)
        )
        validate_decisions(policy.name, admission.snapshot, admitted, decisions)
        broken = admission.guard.broken(decisions) if admission.guard is not None else set()
        if not broken or pinned is None:
            break
        log.debug("quota broken by the policy's choice of GPU types", extra={"queues": sorted(broken)})
        pinned = None if pinned else broken  # the second time, pin every queue's jobs
        admitted = admission.pin(pinned)
    decisions.update(admission.held_decisions())
    return decisions


def _stop_outgrown(
    snapshot: ClusterSnapshot, jobs: Sequence[Job], decisions: Mapping[str, Decision]
) -> dict[str, Decision]:
    """The policy's decisions, where one keeps a running allocation that no longer fits its job's spec
    (``planner.outgrown``: the user changed the allowed GPU types or the replicas while it ran) replaced
    by a stop: the job waits and is placed as its spec now asks. Policies that keep what runs (a
    non-preemptible job, a job changed too recently to move) would otherwise break an invariant and stop
    every job's round."""
    out = dict(decisions)
    for job in jobs:
        cur = snapshot.allocations.get(job.name)
        dec = out.get(job.name)
        if cur is None or dec is None or not (dec.allocation is cur or dec.allocation == cur):
            continue
        why = outgrown(job, cur)
        if why:
            out[job.name] = Decision(job.name, None, f"stopped: {why}")
    return out


def _chooses_types(policy: Policy) -> bool:
    """Whether the policy picks GPU types by performance (``heterogeneity: agnostic`` and ``ordered`` do
    not)."""
    return getattr(getattr(policy, "config", None), "heterogeneity", "aware") not in ("agnostic", "ordered")


def run_round(
    snapshot: ClusterSnapshot,
    jobs: Sequence[Job],
    policy: Policy,
    oracle: ThroughputOracle,
    *,
    costs: RoundCosts | None = None,
    explain: bool = True,
    slow_nodes: SlowNodeMoves | None = None,
) -> RoundResult:
    """Decide, validate and plan one round; returns decisions, actions and why each waiting job waits.

    The returned decisions are the effective ones: where the planner forced a KEEP (non-preemptible
    job, minimum resize interval) or held a change back, the decision says so. ``explain=False``
    leaves ``RoundResult.waiting`` empty instead of wording a reason for every waiting job (callers
    that never show reasons, like the simulator, save that work); decisions and actions are the same.
    ``slow_nodes``: the nodes confirmed slow whose gangs may move off (see the module docstring).
    """
    if costs is not None and snapshot.restart_cost_s != costs.restart_cost_s:
        # the policy prices moves with the restart cost the planner will charge
        snapshot = dataclasses.replace(snapshot, restart_cost_s=costs.restart_cost_s)
    costs = costs or RoundCosts(restart_cost_s=snapshot.restart_cost_s)
    admission = (
        admit(snapshot, jobs, oracle, choose_types=_chooses_types(policy)) if snapshot.queues else None
    )
    decisions = _decide(policy, snapshot, jobs, oracle, admission)
    memory = oracle if isinstance(oracle, MemoryOracle) else None
    if memory is not None:
        decisions = hold_back_non_fits(snapshot, jobs, decisions, memory)
    detail = plan_detailed(
        snapshot,
        jobs,
        decisions,
        restart_cost_s=costs.restart_cost_s,
        resize_cost_s=costs.resize_cost_s,
        min_resize_interval_s=costs.min_resize_interval_s,
    )
    moved: tuple[str, ...] = ()
    if slow_nodes is not None and slow_nodes.ratios:
        moved_actions, moved = moves_off_slow_nodes(
            snapshot,
            jobs,
            detail.actions,
            slow_nodes,
            oracle,
            restart_cost_s=costs.restart_cost_s,
            min_resize_interval_s=costs.min_resize_interval_s,
        )
        detail = dataclasses.replace(detail, actions=moved_actions)
    effective: dict[str, Decision] = dict(decisions)
    acted = set()
    for a in detail.actions:
        acted.add(a.job)
        dec = decisions.get(a.job)
        if a.kind is ActionKind.COMPLETE:
            effective[a.job] = Decision(a.job, None, "complete: all work done")
        elif dec is None or (dec.allocation is not a.after and dec.allocation != a.after):
            effective[a.job] = Decision(a.job, a.after, a.reason)
    for name in detail.held_back:
        if name not in acted:
            effective[name] = Decision(name, None, detail.held_back[name])

    if not explain:
        return RoundResult(decisions=effective, actions=detail.actions, moved_off_slow_nodes=moved)
    final = _final_allocations(snapshot, detail.actions)
    cap_by_type: dict[str, int] = {}
    largest: dict[str, int] = {}
    for n in snapshot.nodes:
        c = n.capacity_for_jobs
        if c > 0:
            cap_by_type[n.gpu_type] = cap_by_type.get(n.gpu_type, 0) + c
            largest[n.gpu_type] = max(largest.get(n.gpu_type, 0), c)
    used: dict[str, int] = {}
    for alloc in final.values():
        for node, r in alloc.replicas_per_node:
            used[node] = used.get(node, 0) + r * alloc.gpus_per_replica
    free_by_type: dict[str, int] = {}
    for n in snapshot.nodes:
        free_by_type[n.gpu_type] = free_by_type.get(n.gpu_type, 0) + max(
            0, n.capacity_for_jobs - used.get(n.name, 0)
        )
    explainer = _WaitExplainer(free_by_type, cap_by_type, largest, nodes=snapshot.nodes, memory=memory)
    waiting: dict[str, Unschedulable] = {}
    for job in jobs:
        if job.name in final or job.remaining_work <= 0:
            continue
        why = explainer.reason(job, effective.get(job.name), detail.held_back)
        held = admission.waiting.get(job.name) if admission is not None else None
        if held is not None and (why.resolvable or not held.resolvable):
            why = held  # its queue holds it back: say which limit
        waiting[job.name] = why
    log.debug(
        "round done",
        extra={
            "policy": policy.name,
            "jobs": len(jobs),
            "actions": len(detail.actions),
            "waiting": len(waiting),
        },
    )
    return RoundResult(
        decisions=effective, actions=detail.actions, waiting=waiting, moved_off_slow_nodes=moved
    )
