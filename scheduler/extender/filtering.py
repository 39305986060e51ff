"""Filter: which candidate nodes a pod may go to, each refused node with a reason a person can read.

Shell-side logic without I/O over the ``ClusterCache`` (callers hold its lock). Two stages:

1. per node class (``nodes.NodeIndex``): one replica's verdict, ``class_verdict`` -- the one place that
   says whether a node of a class with so many free GPUs can take the pod (the core's ``check_node``),
   and why not, then whether the pod's job fits in that class's GPU memory (``MemoryOracle``, the same
   check the core's ``run_round`` makes before a start); a further per-class check goes there and
   nowhere else. Names the cache does not know are decided from the request's Node objects, else
   refused as "watch lag".
2. for a pod of a gang, the gang plan (``gang.GangPlans``): only nodes of the plan pass, and the outcome
   names the plan's nodes the service must read afresh from the API server before it answers
   (``FilterOutcome.check``, ``GangPlans.unchecked``); for a lone pod
   with a planned node (an adopted Job's, JobSet's or TrainJob's, ``perfsched.dev/planned-node``), only
   that node while it has room for the pod, else every node that fits.

Memo: ``Verdicts`` maps (pod filter signature, class key) -> verdict; with a memory oracle the signature
includes what of the job its memory depends on. A verdict is a function of the
signature and the class key alone and class numbers are never reused, so entries never go stale; the
table is cleared when it holds 256 signatures (a bound, not a correctness rule).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence, Set
from dataclasses import dataclass, field
from itertools import compress, filterfalse, repeat
from operator import is_, itemgetter, not_
from typing import Any

from scheduler.core.decisions import Unschedulable
from scheduler.core.placement import compact_shape
from scheduler.core.protocols import MemoryOracle
from scheduler.core.types import Node
from scheduler.extender.context import PodContext, filter_signature
from scheduler.extender.gang import GangPlans, describe_plan
from scheduler.extender.nodes import FREE_BITS, FREE_MASK, NodeIndex, names_itself
from scheduler.k8s.cache import gang_of
from scheduler.k8s.codec import decode_node

#: Rejection categories (the ``reason`` label of the rejections metric).
R_UNKNOWN_NODE = "unknown_node"
R_NO_GPUS = "no_gpus"
R_GPU_TYPE = "gpu_type"
R_NOT_ALLOWED = "gpu_type_not_allowed"
R_CORDONED = "cordoned"
R_TOO_SMALL = "node_too_small"
R_FREE = "insufficient_free_gpus"
R_GANG = "outside_gang_placement"
R_JOB = "job_unschedulable"
R_MEMORY = "gpu_memory"
R_UNCHECKED = "gang_plan_unchecked"

#: why a node is refused: (reason, resolvable by waiting, rejection category); None: it passes
Verdict = tuple[str, bool, str] | None


@dataclass(slots=True)
class FilterOutcome:
    """What filter decided: passing node names (request order), failures, and rejection categories."""

    passed: list[str]
    failed: dict[str, str]
    unresolvable: dict[str, str]
    categories: dict[str, int] = field(default_factory=dict)
    managed: bool = True
    #: the gang whose plan the passing nodes are, the pod's key, and the plan's nodes to read from the API
    #: server before answering, each with the GPUs free for the gang as the plan saw them
    gang: tuple[str, str] | None = None
    pod: str = ""
    check: dict[str, int] = field(default_factory=dict)

    def refused(self, reason: str) -> FilterOutcome:
        """This outcome with every passing node refused for ``reason`` (resolvable: a retry may pass)."""
        cats = dict(self.categories)
        if self.passed:
            cats[R_UNCHECKED] = cats.get(R_UNCHECKED, 0) + len(self.passed)
        failed = {**self.failed, **dict.fromkeys(self.passed, reason)}
        return FilterOutcome([], failed, self.unresolvable, cats, self.managed)


def class_verdict(ctx: PodContext, node: Node, free: int, memory: MemoryOracle | None = None) -> Verdict:
    """Whether one replica of the pod fits on ``node`` (or any node of its class) with ``free`` GPUs, and
    (with ``memory``) whether its job fits in the GPU memory of such nodes at the gang's size."""
    why = ctx.fit_on(node, free)
    if why is not None:
        return why.reason, why.resolvable, _category(node, free, ctx)
    if memory is None or ctx.job is None or not node.gpu_type:
        return None
    # what the memory check asks about: the whole gang on nodes like ``node`` (compact)
    total = max(1, ctx.replicas) * ctx.gpus
    shape = compact_shape(
        node.gpu_type, total, max(ctx.gpus, node.gpus), node.interconnect, node.network_gbps
    )
    (fit,) = memory.memory_fit([(ctx.job, shape)])
    if fit is None or fit.fits:
        return None
    # waiting does not help: this node's GPUs are too small for the job as it is configured
    return f"perfsched: node {node.name}: TrainingJob {ctx.pod.job} {fit.message}", False, R_MEMORY


def _category(node: Node, free: int, ctx: PodContext) -> str:
    """The rejection category, checked in the same order as ``check_node``."""
    if node.capacity_for_jobs <= 0 and node.gpus <= 0:
        return R_NO_GPUS
    if ctx.gpu_type is not None and node.gpu_type != ctx.gpu_type:
        return R_GPU_TYPE
    if ctx.allowed and node.gpu_type not in ctx.allowed:
        return R_NOT_ALLOWED
    if not node.schedulable:
        return R_CORDONED
    if node.gpus < ctx.gpus:
        return R_TOO_SMALL
    return R_FREE


def request_node(node_objects: Sequence[Any] | None, i: int) -> Node | None:
    """A node the request sent in full (nodeCacheCapable false), decoded; None when absent or bad."""
    if node_objects is None:
        return None
    try:
        return decode_node(node_objects[i])
    except (ValueError, IndexError):
        return None


class Filter:
    """Filter over a ``NodeIndex`` and ``GangPlans`` (see the module docstring)."""

    def __init__(self, index: NodeIndex, plans: GangPlans, memory: MemoryOracle | None = None) -> None:
        self._index = index
        self._plans = plans
        self._memory = memory
        self._memo: dict[tuple[Any, ...], dict[int, Verdict]] = {}

    def __call__(
        self,
        ctx: PodContext,
        names: Sequence[str],
        node_objects: Sequence[Any] | None,
        read: Set[str] = frozenset(),
    ) -> FilterOutcome:
        """The outcome; ``read``: nodes this request read from the API server (``GangPlans.unchecked``)."""
        if ctx.gpus <= 0:  # not ours: it passes untouched
            return FilterOutcome(list(names), {}, {}, managed=False)
        if ctx.job_problem:
            # the TrainingJob itself cannot be scheduled as written: no node will do
            reason = f"perfsched: TrainingJob {ctx.pod.job} cannot be scheduled: {ctx.job_problem}"
            return FilterOutcome([], {}, dict.fromkeys(names, reason), {R_JOB: len(names)} if names else {})
        keys, per_name, counts = self._verdicts(ctx, names, node_objects)
        if self._index.cache.held_nodes():
            self._holds(ctx, names, per_name, counts)
        cats: dict[str, int] = {}
        for v, n in counts.items():
            if v is not None:
                cats[v[2]] = cats.get(v[2], 0) + n
        fits, failed, unres = list(names), {}, {}
        if len(counts) > 1 or None not in counts:  # some refused: split with C-speed passes, in order
            ok = list(map(is_, per_name, repeat(None)))
            fits, keys = list(compress(names, ok)), list(compress(keys, ok))
            bad = list(map(not_, ok))
            verdicts_bad: list[Any] = list(compress(per_name, bad))  # (reason, resolvable, category)
            refused = list(zip(compress(names, bad), map(itemgetter(0), verdicts_bad), strict=True))
            resolvable = list(map(itemgetter(1), verdicts_bad))
            failed = dict(compress(refused, resolvable))
            unres = dict(compress(refused, map(not_, resolvable)))
        if not ctx.in_gang:
            planned = ctx.pod.planned_node
            if planned and len(fits) > 1 and planned in fits:
                # a pod of an adopted job (no gang of its own) goes to the node the round planned while
                # it has room there, as a gang's replica does; elsewhere of its type once it is full
                at = fits.index(planned)
                reason = f"perfsched: the pod's job is planned on node {planned}, which has room"
                failed.update((n, reason) for n in fits if n != planned)
                cats[R_GANG] = cats.get(R_GANG, 0) + len(fits) - 1
                fits, keys = [planned], [keys[at]]
            self._index.remember(fits, keys)  # what the pod's prioritize call will ask about
            return FilterOutcome(fits, failed, unres, cats)
        fit_set = set(fits)
        plan = self._plans.plan(ctx, fits, fit_set.__contains__)
        if isinstance(plan, Unschedulable):
            reason = f"perfsched: gang {ctx.pod.job}: {plan.reason}"
            (failed if plan.resolvable else unres).update(dict.fromkeys(fits, reason))
            if fits:
                cats[R_GANG] = cats.get(R_GANG, 0) + len(fits)
            return FilterOutcome([], failed, unres, cats)
        in_plan = set(plan.nodes).__contains__
        outside = list(filterfalse(in_plan, fits))
        if outside:
            where = describe_plan(plan, self._index.cache.nodes)
            reason = (
                f"perfsched: gang {ctx.pod.job} ({ctx.replicas} x {ctx.gpus} GPUs) is placed on {where}; "
                "this node is outside that placement"
            )
            failed.update(dict.fromkeys(outside, reason))
            cats[R_GANG] = cats.get(R_GANG, 0) + len(outside)
        passed = list(filter(in_plan, fits))
        check = self._plans.unchecked(ctx, plan, read) if passed else {}
        return FilterOutcome(passed, failed, unres, cats, gang=ctx.gang_key, pod=ctx.pod.key, check=check)

    def _holds(
        self, ctx: PodContext, names: Sequence[str], per_name: list[Verdict], counts: Counter[Verdict]
    ) -> None:
        """Where the cache holds GPUs for planned pods (``free`` is net of every hold): judge the nodes the
        pod's own gang holds with its GPUs added back, and say in a refusal how many GPUs are held for
        other pods."""
        cache = self._index.cache
        held = cache.held_nodes()
        gang = ctx.gang_key or gang_of(ctx.pod)
        own = cache.holds_of(gang) if ctx.gang_key is not None else {}
        for i in [i for i, name in enumerate(names) if name in held]:
            name = names[i]
            node = cache.nodes.get(name)
            if node is None:
                continue
            verdict = per_name[i]
            if name in own:
                verdict = class_verdict(ctx, node, cache.free_for(name, gang), self._memory)
            others = cache.held_from(name, gang)
            if verdict is not None and verdict[2] == R_FREE and others > 0:
                verdict = (f"{verdict[0]}; {others} more held for pods planned there", verdict[1], R_FREE)
            if verdict != per_name[i]:
                counts[per_name[i]] -= 1
                counts[verdict] += 1
                per_name[i] = verdict
        for v in [v for v, n in counts.items() if n <= 0]:
            del counts[v]

    def _verdicts(
        self, ctx: PodContext, names: Sequence[str], node_objects: Sequence[Any] | None
    ) -> tuple[list[int | None], list[Verdict], Counter[Verdict]]:
        """Each name's key and verdict, deciding each class key once; and how many names got each verdict."""
        keys = self._index.keys(names)
        counts = Counter(keys)
        sig = filter_signature(ctx, memory=self._memory is not None)
        memo = self._memo.get(sig)
        if memo is None:
            if len(self._memo) >= 256:
                self._memo.clear()
            memo = self._memo[sig] = {}
        rep = self._index.rep
        own: set[int | None] = set()  # keys whose names each get a verdict of their own
        by_verdict: Counter[Verdict] = Counter()
        for key, n in counts.items():
            if key is None or names_itself(rep[key >> FREE_BITS]):
                own.add(key)
                continue
            if key not in memo:
                memo[key] = class_verdict(ctx, rep[key >> FREE_BITS], key & FREE_MASK, self._memory)
            by_verdict[memo[key]] += n
        per_name: list[Verdict] = list(map(memo.get, keys))  # type: ignore[arg-type]  # own keys: None
        if own:  # (a pass over the names only when some need it)
            for i in [i for i, k in enumerate(keys) if k in own]:
                per_name[i] = verdict = self._own_verdict(ctx, names[i], keys[i], node_objects, i)
                by_verdict[verdict] += 1
        return keys, per_name, by_verdict

    def _own_verdict(
        self, ctx: PodContext, name: str, key: int | None, node_objects: Sequence[Any] | None, i: int
    ) -> Verdict:
        if key is not None:
            return class_verdict(ctx, self._index.cache.nodes[name], key & FREE_MASK, self._memory)
        node = request_node(node_objects, i)
        if node is None:
            reason = f"perfsched: node {name} is not in the extender's cache yet (watch lag); retry"
            return reason, True, R_UNKNOWN_NODE
        return class_verdict(ctx, node, node.gpus if node.schedulable else 0, self._memory)
