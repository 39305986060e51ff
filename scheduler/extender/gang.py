"""Where a gang's unplaced replicas go: the plan filter keeps a gang's pods to.

Shell-side logic without I/O over the ``ClusterCache`` (callers hold its lock). The plan is, in order: a plan
this extender made earlier for the gang, minus the replicas placed since, while it still fits and one of its
nodes is among kube-scheduler's candidates (so every pod of a gang gets the same plan); else the operator's
plan (the TrainingJob's ``status.allocation`` for the pod's generation, less the replicas placed; else the
``perfsched.dev/planned-node`` annotations of the gang's unplaced pods) while it fits the GPUs free for the
gang (``ClusterCache.free_for``: free plus what the cache holds for the gang's own planned pods), except that
a gang planned over several NVLink domains takes one domain of its type that is free now and held for nobody
(``_tighter``); while the operator's plan does not fit, the gang waits for it for ``wait_s``
(``PERFSCHED_EXTENDER_PLAN_WAIT_SECONDS``, 5 s) from the first time it did not, as long as the cache still
holds GPUs for it (a resolvable refusal naming the plan: the extender's watch catching up with the operator's
view, finished pods' claims being released); else a fresh placement with the core's algorithm
(``FreeIndex.place``, so the extender places gangs exactly as the policies and the simulator do) over the
whole cache (replicas already bound count as ``prefer``) and, if none of those nodes is among kube-scheduler's
candidates, over the candidates only (``FreeIndex.restricted``: the whole-cache index cut down to them, what
``place_gang`` over those nodes answers). kube-scheduler offers a sample of the nodes (10% of 5,000): a plan
outside every sample would keep the gang waiting, so an earlier plan that still fits but is not offered is
made again among the candidates only (the whole cache would prefer the same nodes again). Free GPUs are net of
what the cache holds for other pods planned on a node, so no placement here takes GPUs the operator planned
for another gang.
A plan is made from the watch-fed cache, which can lag a pod bound around the extender (by ``nodeName``,
another scheduler, another extender replica): ``unchecked`` names the plan's nodes to read afresh from the
API server before filter passes them, while the gang is not committed to it (none of its replicas placed,
and no other pod of it passed a checked plan in the last ``COMMIT_S``), and the service re-plans on what
the read showed (``service.ExtenderService``).
Memo: ``GangPlans`` keeps the last plan per gang; its one invalidation rule is that a plan
is used only while it still fits the cache's free GPUs and is offered (checked on every use), and the oldest
plans are dropped past 10,000 gangs (as are the pods checked plans were passed to).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence, Set

from scheduler.core.decisions import Unschedulable
from scheduler.core.placement import FreeIndex, LocalityLevel, locality_level
from scheduler.core.types import Allocation, Node
from scheduler.extender.context import PodContext
from scheduler.k8s.cache import ClusterCache

log = logging.getLogger(__name__)

_MAX_PLANS = 10_000
#: how long a gang waits for its operator's plan to fit (the watch catching up with the operator's view,
#: finished pods' claims being released) before it is placed afresh
PLAN_WAIT_S = 5.0
#: how long after a checked plan is passed to one pod of a gang its other pods take the plan without a read
#: of their own while the watch does not show the first one placed yet (``GangPlans.unchecked``)
COMMIT_S = 5.0
#: kube-scheduler may offer other nodes on its next attempt
_NOT_OFFERED = Unschedulable("its placement is on nodes kube-scheduler did not offer this time")


class FreeIndexes:
    """Per GPU type, a core ``FreeIndex`` over the cache's nodes of that type, in step with the cache.

    ``get(t).place(...)`` answers exactly what ``place_gang([nodes of type t], cache.free, ...)`` would,
    without building the index on every call: an index is built once per node set and type; afterwards
    only the nodes the cache reported through ``on_node_change`` since the last call (their free GPUs
    changed) are moved, through the index's own ``commit``/``release``. Invalidation: a new node set
    (``nodes_version``) drops every index. Callers hold the cache's lock.
    """

    def __init__(self, cache: ClusterCache) -> None:
        self._cache = cache
        self._nodes_version = -1
        self._by_type: dict[str, FreeIndex] = {}
        #: nodes whose free GPUs may have changed since the indexes were last brought in step
        self._changed: set[str] = set()
        cache.on_node_change(self._changed.add)

    def get(self, gpu_type: str) -> FreeIndex:
        cache = self._cache
        if cache.nodes_version != self._nodes_version:
            self._by_type = {}
            self._nodes_version = cache.nodes_version
            self._changed.clear()
        elif self._changed:
            self._catch_up()
        index = self._by_type.get(gpu_type)
        if index is None:
            index = FreeIndex([n for n in cache.nodes.values() if n.gpu_type == gpu_type], cache.free)
            self._by_type[gpu_type] = index
        return index

    def _catch_up(self) -> None:
        cache = self._cache
        for name in self._changed:
            node = cache.nodes.get(name)
            index = self._by_type.get(node.gpu_type) if node is not None else None
            if node is None or index is None:
                continue
            now = min(node.capacity_for_jobs, max(0, cache.free.get(name, 0)))
            have = index.free_of(name)
            if now < have:
                index.commit(Allocation.of("perfsched/free-sync", node.gpu_type, have - now, {name: 1}))
            elif now > have:
                index.release(Allocation.of("perfsched/free-sync", node.gpu_type, now - have, {name: 1}))
        self._changed.clear()


class GangPlans:
    """The gang plan of a pod (see the module docstring), with the plans made so far."""

    def __init__(self, cache: ClusterCache, wait_s: float = PLAN_WAIT_S) -> None:
        self._cache = cache
        self._wait_s = wait_s
        self._indexes = FreeIndexes(cache)
        # gang -> (plan for its unplaced replicas, where its replicas were placed when it was made)
        self._plans: dict[tuple[str, str], tuple[Allocation, dict[str, int]]] = {}
        #: gang -> when its operator's plan was first found not to fit
        self._waiting: dict[tuple[str, str], float] = {}
        #: gang -> the pod a checked plan was last passed to, and when (``unchecked``)
        self._passed: dict[tuple[str, str], tuple[str, float]] = {}

    def unchecked(self, ctx: PodContext, plan: Allocation, read: Set[str]) -> dict[str, int]:
        """The nodes of ``plan`` to read from the API server before filter passes them, each with the GPUs
        free for the gang as the plan saw them: none once the gang is committed to a plan (one of its
        replicas placed, or a checked plan passed to another of its pods in the last ``COMMIT_S``:
        kube-scheduler is binding that one, and the watch shows it later), else every node not ``read`` for
        this request."""
        assert ctx.gang_key is not None
        gang = ctx.gang_key
        if ctx.placed:
            return {}
        memo = self._passed.get(gang)
        if memo is not None and memo[0] != ctx.pod.key and self._cache.now() - memo[1] < COMMIT_S:
            return {}
        free_for = self._cache.free_for
        return {n: free_for(n, gang) for n in plan.nodes if n not in read}

    def checked(self, gang: tuple[str, str], pod: str) -> None:
        """Remember that a plan checked against the API server is passed to ``pod`` (its key) of ``gang``."""
        memo, now = self._passed.get(gang), self._cache.now()
        if memo is None or memo[0] == pod or now - memo[1] >= COMMIT_S:
            self._passed[gang] = (pod, now)
            if len(self._passed) > _MAX_PLANS:
                self._passed.pop(next(iter(self._passed)))

    def plan(
        self, ctx: PodContext, fits: Sequence[str], is_fit: Callable[[str], bool]
    ) -> Allocation | Unschedulable:
        """Where the gang's unplaced replicas (this pod included) go; ``fits``: the candidates one replica
        fits on (``is_fit`` answers membership)."""
        assert ctx.gang_key is not None
        earlier = self._earlier_plan(ctx)
        if earlier is not None and any(map(is_fit, earlier.nodes)):
            return earlier
        kept = self._operator_plan(ctx)
        if isinstance(kept, Allocation):
            return self._tighter(ctx, kept, is_fit) or kept
        if kept is not None:
            return kept
        why = (
            "its earlier plan is not among the nodes offered"
            if earlier is not None
            else f"the operator's plan did not fit within {self._wait_s:g} s"
            if ctx.gang_key in self._waiting
            else "no plan of the operator's covers it"
        )
        # the whole-cluster reason (a candidates-only pool is smaller); with an earlier plan that still
        # fits but is not offered, a whole-cluster placement would prefer the same nodes: candidates only
        reason = _NOT_OFFERED if earlier is not None else None
        types = _candidate_types(ctx, fits, self._cache.nodes)
        for pool in (fits,) if earlier is not None else (None, fits):
            for t in types:
                index = self._indexes.get(t)
                result = (index if pool is None else index.restricted(pool)).place(
                    replicas=ctx.unplaced,
                    gpus_per_replica=ctx.gpus,
                    gpu_type=t,
                    job=ctx.pod.job,
                    prefer=ctx.placed or None,
                )
                if isinstance(result, Allocation):
                    if any(map(is_fit, result.nodes)):
                        return self._remember(ctx, result, why)
                elif reason is None:
                    reason = result
            if reason is None:  # the cluster has room, only not among these candidates
                reason = _NOT_OFFERED
        if reason is None:
            reason = Unschedulable(f"no candidate node of GPU type {ctx.gpu_type or 'any'} fits one replica")
        return reason

    def _remember(self, ctx: PodContext, plan: Allocation, why: str) -> Allocation:
        """Keep ``plan`` for the gang's later pods, and log it (the extender places a gang itself rarely:
        each line says why the operator's plan was not followed)."""
        assert ctx.gang_key is not None
        where = describe_plan(plan, self._cache.nodes)
        log.info("gang %s generation %s placed on %s: %s", ctx.pod.job, ctx.gang_key[1], where, why)
        self._plans[ctx.gang_key] = (plan, dict(ctx.placed))
        if len(self._plans) > _MAX_PLANS:
            self._plans.pop(next(iter(self._plans)))
        return plan

    def _tighter(self, ctx: PodContext, plan: Allocation, is_fit: Callable[[str], bool]) -> Allocation | None:
        """A placement in one NVLink domain for a gang the operator planned over several, when one of its
        type is free now and held for nobody (GPUs freed since the operator's round); None if none."""
        nodes = self._cache.nodes
        if ctx.placed or ctx.unplaced < 2 or locality_level(plan, nodes) is LocalityLevel.NVLINK_DOMAIN:
            return None
        result = self._indexes.get(plan.gpu_type).place(
            replicas=ctx.unplaced, gpus_per_replica=ctx.gpus, gpu_type=plan.gpu_type, job=ctx.pod.job
        )
        if (
            isinstance(result, Allocation)
            and locality_level(result, nodes) is LocalityLevel.NVLINK_DOMAIN
            and any(map(is_fit, result.nodes))
        ):
            where = describe_plan(plan, nodes)
            return self._remember(ctx, result, f"one NVLink domain instead of the operator's plan on {where}")
        return None

    def _operator_plan(self, ctx: PodContext) -> Allocation | Unschedulable | None:
        """The operator's plan if it covers every unplaced replica and fits; a wait while it does not fit
        yet and its GPUs are still held for the gang (a gang of more than one replica); else None."""
        assert ctx.gang_key is not None
        nodes = self._cache.nodes
        planned = _remaining(ctx.intent, ctx.placed)
        if sum(planned.values()) < ctx.unplaced:
            planned = ctx.planned
        if not planned or sum(planned.values()) < ctx.unplaced:
            return None
        types = {nodes[n].gpu_type for n in planned if n in nodes}
        if len(types) != 1:
            return None
        gpu_type = types.pop()
        if ctx.gpu_type is not None and gpu_type != ctx.gpu_type:
            return None
        if self._fits_now(planned, ctx.gpus, ctx.gpu_type, ctx.gang_key):
            return Allocation.of(ctx.pod.job, gpu_type, ctx.gpus, planned)
        now = self._cache.now()
        since = self._waiting.get(ctx.gang_key)
        if since is None:
            since = self._waiting[ctx.gang_key] = now
            log.info(
                "gang %s generation %s waits for the GPUs planned for it on %s",
                ctx.pod.job,
                ctx.gang_key[1],
                describe_plan(Allocation.of(ctx.pod.job, gpu_type, ctx.gpus, planned), nodes),
            )
        if len(self._waiting) > _MAX_PLANS:
            self._waiting.pop(next(iter(self._waiting)))
        if ctx.replicas > 1 and now - since < self._wait_s and self._cache.holds_of(ctx.gang_key):
            plan = Allocation.of(ctx.pod.job, gpu_type, ctx.gpus, planned)
            free = sum(min(r * ctx.gpus, self._cache.free_for(n, ctx.gang_key)) for n, r in planned.items())
            return Unschedulable(
                f"waiting for the GPUs planned for it on {describe_plan(plan, nodes)} to be free "
                f"({free} of {plan.total_gpus} free now)"
            )
        return None

    def _earlier_plan(self, ctx: PodContext) -> Allocation | None:
        """Our own earlier plan, minus the replicas placed since, if it still fits."""
        assert ctx.gang_key is not None
        memo = self._plans.get(ctx.gang_key)
        if memo is None or memo[0].gpus_per_replica != ctx.gpus:
            return None
        old, placed_then = memo
        left = dict(old.replicas_per_node)
        for name, r in ctx.placed.items():
            if name in left:
                left[name] = max(0, left[name] - max(0, r - placed_then.get(name, 0)))
        left = {n: r for n, r in left.items() if r > 0}
        if sum(left.values()) < ctx.unplaced or not self._fits_now(
            left, ctx.gpus, ctx.gpu_type, ctx.gang_key
        ):
            return None
        return Allocation.of(ctx.pod.job, old.gpu_type, ctx.gpus, left)

    def _fits_now(
        self, per_node: Mapping[str, int], g: int, gpu_type: str | None, gang: tuple[str, str]
    ) -> bool:
        """Whether ``per_node`` replicas of ``g`` GPUs fit the GPUs free for ``gang`` (its holds added)."""
        nodes = self._cache.nodes
        free_for = self._cache.free_for
        for name, r in per_node.items():
            node = nodes.get(name)
            if node is None or (gpu_type is not None and node.gpu_type != gpu_type):
                return False
            if free_for(name, gang) < r * g:
                return False
        return True


def _remaining(intent: Mapping[str, int], placed: Mapping[str, int]) -> dict[str, int]:
    """The replicas of a plan not placed yet, per node."""
    left = {n: r - placed.get(n, 0) for n, r in intent.items()}
    return {n: r for n, r in left.items() if r > 0}


def _candidate_types(ctx: PodContext, fits: Sequence[str], nodes: Mapping[str, Node]) -> list[str]:
    """GPU types the gang may use: the decision, else the types of the fitting nodes (placed first)."""
    if ctx.gpu_type:
        return [ctx.gpu_type]
    order: dict[str, None] = {}
    for name in (*ctx.placed, *fits):
        node = nodes.get(name)
        if node is not None:
            order[node.gpu_type] = None
    return list(order)


def describe_plan(plan: Allocation, nodes: Mapping[str, Node]) -> str:
    """Where a plan puts the gang, as a person reads it (the reason outside nodes are refused)."""
    names = plan.nodes
    shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
    members = [nodes[n] for n in names if n in nodes]
    level = locality_level(plan, nodes)
    if level is LocalityLevel.NVLINK_DOMAIN and len(members) > 1 and members[0].nvlink_domain:
        return f"NVLink domain {members[0].nvlink_domain} (nodes {shown})"
    if level is LocalityLevel.RACK and members:
        return f"rack {members[0].rack} (nodes {shown})"
    return f"node{'s' if len(names) > 1 else ''} {shown}"
