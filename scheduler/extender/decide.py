"""The extender's decisions: which nodes a pod may go to (filter), how good each is (prioritize), and
which preemption candidates are real (preempt).

Shell-side logic without HTTP: it reads the watch-fed ``ClusterCache`` (under its lock, so one request
sees one consistent state), asks the ``ThroughputOracle`` at most once per request (all distinct
placement shapes in one batch, memoised), and uses the core's ``check_node`` for per-node reasons and
``place_gang`` for gang placement, so the extender places gangs exactly as the policies and the
simulator do. No I/O of its own; it holds memo tables (predictions, placement shapes, gang plans,
class scores, locality groups), a gang index per GPU type kept in step with the cache, and the cache's
nodes as numpy arrays (``table.NodeTable``) for the vectorised paths: ``filter_fast`` and
``prioritize_fast`` answer requests of node names the cache knows with the same bytes as ``filter`` and
``prioritize_classes`` (the general path, kept for everything else), per-node verdicts and JSON entries
memoised per kind of pod and re-decided only for nodes whose free GPUs changed.

Pods: a pod is *managed* when it asks for ``nvidia.com/gpu``; others pass through untouched (kube-scheduler
only calls the extender for pods that ask for a managed resource, and blocking a pod we have no opinion
on would be worse than letting it through). A managed pod's job is its TrainingJob (label
``perfsched.dev/job-name``); a GPU pod without one is a one-replica job described by its optional
``perfsched.dev/model`` / ``perfsched.dev/batch-size`` annotations.

Gangs: the replicas of one TrainingJob generation are placed together. The gang's plan is, in order:
the operator's plan (the ``perfsched.dev/planned-node`` annotations of the gang's unplaced pods) while it
still fits; else a plan this extender computed earlier for the gang while it still fits; else a fresh
``place_gang`` over the cache (replicas already bound count as ``prefer``), and, if none of those nodes is
among kube-scheduler's candidates, over the candidates only. A pod passes only nodes of its gang's plan.
"""

from __future__ import annotations

import logging
import math
from collections import Counter, OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import compress, filterfalse, repeat
from operator import ne, not_, or_
from typing import Any

import numpy as np
import orjson

from scheduler.core.decisions import Unschedulable
from scheduler.core.node_fit import GPU_RESOURCE, check_node
from scheduler.core.placement import FreeIndex, LocalityLevel, locality_level, place_gang, spread_of
from scheduler.core.protocols import ThroughputOracle
from scheduler.core.types import Allocation, Interconnect, Job, Node, PlacementShape
from scheduler.extender.table import IntArray, NodeTable, first_positions, present_codes
from scheduler.k8s.cache import ClusterCache
from scheduler.k8s.codec import PodInfo, decode_node, decode_pod

log = logging.getLogger(__name__)

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

_LOCALITY_SCORE = {
    LocalityLevel.NVLINK_DOMAIN: 10.0,
    LocalityLevel.NODE: 10.0,
    LocalityLevel.RACK: 6.0,
    LocalityLevel.ZONE: 3.0,
    LocalityLevel.CLUSTER: 0.0,
}


@dataclass(frozen=True, slots=True)
class Weights:
    """Weights of the three prioritize terms (any non-negative scale; they are normalised)."""

    throughput: float = 6.0
    locality: float = 3.0
    packing: float = 1.0


@dataclass(slots=True)
class FilterOutcome:
    """What filter decided: passing node names (request order), failures, and rejection categories."""

    passed: list[str]
    failed: dict[str, str]
    unresolvable: dict[str, str]
    categories: dict[str, int] = field(default_factory=dict)
    managed: bool = True


@dataclass(slots=True)
class FastFilter:
    """A filter answer for node names, built without a dict per node: the reply's JSON and what the
    metrics need (passing nodes, rejections per category)."""

    reply: bytes
    passed: int
    categories: dict[str, int]
    #: the names asked about
    asked: int = 0


#: rejection categories by number (0: none) in the per-node verdict arrays
_CATEGORIES = (
    "",
    R_UNKNOWN_NODE,
    R_NO_GPUS,
    R_GPU_TYPE,
    R_NOT_ALLOWED,
    R_CORDONED,
    R_TOO_SMALL,
    R_FREE,
    R_GANG,
)
_CATEGORY_NUMBER = {c: i for i, c in enumerate(_CATEGORIES)}


@dataclass(slots=True)
class _Verdicts:
    """Filter verdicts for one kind of pod (GPUs, decided type, allowed types) over one table layout.

    Per node number: ``code``, the node code it was decided for (-1: not yet; a node is decided again
    when its code changes); ``kind``, 0 passes, 1 fails, 2 fails unresolvably; ``category``, the
    rejection category's number in ``_CATEGORIES``; ``fragment``, the node's piece of the reply: its
    name and the separator after it (``name","`` as bytes) if it passes, else its entry in the
    failed-nodes JSON object (``"name":"reason",`` as bytes, comma included). ``by_code`` holds the
    verdicts of codes whose nodes share one (kind, reason JSON, category); nodes whose reason names
    them are decided one by one.
    """

    code: Any
    kind: Any
    category: Any
    fragment: Any
    by_code: dict[int, tuple[int, bytes, int]]
    #: the table's version when every node's verdict was last checked against its code
    version: int = -1


@dataclass(slots=True)
class PodContext:
    """A pod of the request with everything the decisions need, resolved once per request."""

    pod: PodInfo
    gpus: int
    job: Job | None
    job_problem: str
    gpu_type: str | None
    allowed: frozenset[str]
    gang_key: tuple[str, str] | None
    replicas: int  # gang size (1 for a lone pod)
    placed: dict[str, int]  # node -> replicas of the gang already bound or assumed there (not this pod)
    planned: dict[str, int]  # node -> unplaced gang replicas (incl. this pod) the operator planned there

    @property
    def unplaced(self) -> int:
        return max(1, self.replicas - sum(self.placed.values()))


class Decider:
    """Filter, prioritize and preempt over a ``ClusterCache`` and a ``ThroughputOracle``."""

    def __init__(
        self,
        cache: ClusterCache,
        oracle: ThroughputOracle | None,
        *,
        weights: Weights = Weights(),
        predict_cache_size: int = 4096,
        on_predict: Callable[[int, int, int], None] | None = None,
    ) -> None:
        self.cache = cache
        self.oracle = oracle
        self.weights = weights
        self._predict_cache: OrderedDict[tuple[Any, ...], float] = OrderedDict()
        self._predict_cache_size = predict_cache_size
        # gang -> (plan for its unplaced replicas, where its replicas were placed when it was made)
        self._plans: dict[tuple[str, str], tuple[Allocation, dict[str, int]]] = {}
        self._shape_memo: dict[tuple[Any, ...], PlacementShape] = {}
        self._free_indexes = FreeIndexes(cache)
        # (node set, job, gang state, set of class keys) -> score per class key
        self._score_memo: dict[tuple[Any, ...], dict[Any, int]] = {}
        self._predict_failures = 0
        self._level_memo: dict[tuple[Any, ...], dict[str, int]] = {}
        self._group_index: tuple[int, dict[tuple[str, str], list[str]]] = (-1, {})
        #: the cache's nodes as arrays, for the vectorised paths (``filter_fast``, ``prioritize_fast``)
        self.table = NodeTable(cache)
        # (layout, GPUs, decided type, allowed types) -> verdicts per node for pods of that kind
        self._verdict_memo: dict[tuple[Any, ...], _Verdicts] = {}
        self._level_arrays: dict[tuple[Any, ...], IntArray] = {}
        # ``_score_fast``: (layout, job, gang state, dense codes present) -> score per dense code
        self._lut_memo: dict[tuple[Any, ...], IntArray] = {}
        # callback(queries sent, cache hits, cache misses) for metrics
        self._on_predict = on_predict

    # --- context ------------------------------------------------------------------------------------
    def context(self, pod_obj: Mapping[str, Any]) -> PodContext:
        """Resolve the request's pod: GPU request, job, the operator's decision and the gang's state."""
        pod = decode_pod(pod_obj)
        gpus = pod.gpus  # decode_pod sums the request with pod_gpu_request (and raises as it does)
        cache = self.cache
        job: Job | None = None
        problem = ""
        replicas = 1
        placed: dict[str, int] = {}
        planned: dict[str, int] = {}
        gang_key: tuple[str, str] | None = None
        info = cache.jobs.get(pod.job) if pod.job else None
        if info is not None:
            job = info.job
            problem = info.problem
        if pod.job:
            gang_key = (pod.job, pod.generation)
            members = cache.gang(pod.job, pod.generation)
            replicas = max(1, len(members) if any(m.key == pod.key for m in members) else len(members) + 1)
            # the gang's size as the operator wrote it on the pod: right even when the watch has not yet
            # shown the gang's other pods (or the TrainingJob) to this extender
            replicas = max(replicas, pod.world_size)
            if info is not None and info.status.allocation is not None:
                alloc = info.status.allocation
                if str(info.status.gang_generation) == pod.generation or not pod.generation:
                    replicas = max(replicas, alloc.replicas)
            for m in members:
                if m.key == pod.key:
                    continue
                where = cache.placed_node(m)
                if where and not m.terminal:
                    placed[where] = placed.get(where, 0) + 1
                elif m.planned_node and not m.terminal:
                    planned[m.planned_node] = planned.get(m.planned_node, 0) + 1
            if pod.planned_node:
                planned[pod.planned_node] = planned.get(pod.planned_node, 0) + 1
        elif gpus > 0 and pod.model and pod.batch_size > 0:
            job = Job(
                name=pod.key,
                submit_time=0.0,
                total_work=1.0,
                gpus_per_replica=gpus,
                model=pod.model,
                batch_size=pod.batch_size,
            )
        allowed = job.allowed_gpu_types if job is not None else frozenset()
        return PodContext(
            pod=pod,
            gpus=gpus,
            job=job,
            job_problem=problem,
            gpu_type=pod.gpu_type or None,
            allowed=allowed,
            gang_key=gang_key,
            replicas=replicas,
            placed=placed,
            planned=planned,
        )

    # --- filter -----------------------------------------------------------------------------------
    def filter(
        self, pod_obj: Mapping[str, Any], names: Sequence[str], node_objects: Sequence[Any] | None
    ) -> FilterOutcome:
        with self.cache.lock:
            self.cache.expire_assumed()
            ctx = self.context(pod_obj)
            if ctx.gpus <= 0:
                return FilterOutcome(list(names), {}, {}, managed=False)
            return self._filter(ctx, names, node_objects)

    def _filter(
        self, ctx: PodContext, names: Sequence[str], node_objects: Sequence[Any] | None
    ) -> FilterOutcome:
        nodes = self.cache.nodes
        g = ctx.gpus
        passed: list[str] = []
        failed: dict[str, str] = {}
        unres: dict[str, str] = {}
        cats: dict[str, int] = {}
        if ctx.job_problem:
            # the TrainingJob itself cannot be scheduled as written: no node will do
            reason = f"perfsched: TrainingJob {ctx.pod.job} cannot be scheduled: {ctx.job_problem}"
            for name in names:
                unres[name] = reason
            cats[R_JOB] = len(names)
            return FilterOutcome([], failed, unres, cats)
        fits, bad_names, bad_keys, verdicts = self._classify(ctx, names, node_objects, cats)
        if bad_names:
            # each key has one verdict (reason, resolvable, category): the failures go into their dicts
            # in request order, a C-speed pass per dict
            reason_of = {k: v[0] for k, v in verdicts.items()}
            kinds = {v[1] for v in verdicts.values()}
            if kinds == {True}:
                failed = dict(zip(bad_names, map(reason_of.__getitem__, bad_keys), strict=True))
            elif kinds == {False}:
                unres = dict(zip(bad_names, map(reason_of.__getitem__, bad_keys), strict=True))
            else:
                resolvable = list(map({k: v[1] for k, v in verdicts.items()}.__getitem__, bad_keys))
                failed = dict(
                    zip(
                        compress(bad_names, resolvable),
                        map(reason_of.__getitem__, compress(bad_keys, resolvable)),
                        strict=True,
                    )
                )
                unresolvable = list(map(not_, resolvable))
                unres = dict(
                    zip(
                        compress(bad_names, unresolvable),
                        map(reason_of.__getitem__, compress(bad_keys, unresolvable)),
                        strict=True,
                    )
                )
        if ctx.gang_key is None or (ctx.replicas <= 1 and not ctx.placed and not ctx.planned):
            passed = fits
        else:
            plan = self._gang_plan(ctx, fits)
            if isinstance(plan, Unschedulable):
                reason = f"perfsched: gang {ctx.pod.job}: {plan.reason}"
                (failed if plan.resolvable else unres).update(dict.fromkeys(fits, reason))
                if fits:
                    cats[R_GANG] = cats.get(R_GANG, 0) + len(fits)
            else:
                in_plan = set(plan.nodes).__contains__
                passed = list(filter(in_plan, fits))
                outside = list(filterfalse(in_plan, fits))
                if outside:
                    where = _describe_plan(plan, nodes)
                    failed.update(
                        dict.fromkeys(
                            outside,
                            f"perfsched: gang {ctx.pod.job} ({ctx.replicas} x {g} GPUs) is placed on "
                            f"{where}; this node is outside that placement",
                        )
                    )
                    cats[R_GANG] = cats.get(R_GANG, 0) + len(outside)
        return FilterOutcome(passed, failed, unres, cats)

    def _classify(
        self,
        ctx: PodContext,
        names: Sequence[str],
        node_objects: Sequence[Any] | None,
        cats: dict[str, int],
    ) -> tuple[list[str], list[str], list[Any], dict[Any, tuple[str, bool, str]]]:
        """Split ``names`` into those one replica fits (request order) and the rest, with their keys.

        A name's key is the cache's filter key (class, schedulable, free GPUs): nodes alike in it get one
        verdict, decided once, and the names are split by C-speed passes. Names whose reason names the
        node (no GPUs, cordoned) and names the cache does not know (decoded from the request's Node
        objects, else "not in the cache yet") get a key of their own. Returns (fits, failing names, their
        keys, verdict per failing key as (reason, resolvable, rejection category)); adds the failing
        names per rejection category to ``cats``.
        """
        nodes = self.cache.nodes
        g = ctx.gpus
        want_type = ctx.gpu_type
        allowed = ctx.allowed
        keys: list[Any] = list(map(self.cache.filter_key.get, names))
        ok: dict[Any, bool] = {}
        verdicts: dict[Any, tuple[str, bool, str]] = {}
        own: set[Any] = set()  # keys whose names each need a verdict of their own
        counts = Counter(keys)  # names per key, keys in order of first occurrence
        i = -1
        for key in counts:
            i = keys.index(key, i + 1)  # first occurrences come in order: one scan in all
            if key is None:
                own.add(key)
                continue
            node = nodes[names[i]]
            f = key & 0xFFFF
            t = node.gpu_type
            if (
                f >= g
                and node.schedulable
                and (want_type is None or t == want_type)
                and (not allowed or t in allowed)
            ):
                ok[key] = True
            elif node.schedulable and node.gpus > 0:
                ok[key] = False
                verdicts[key] = self._verdict(ctx, node, f)
            else:
                own.add(key)
        if own:
            for i in [i for i, k in enumerate(keys) if k in own]:
                name = names[i]
                node_key: Any = ("node", i)
                if keys[i] is not None:
                    one: Node | None = nodes[name]
                    f = keys[i] & 0xFFFF
                else:
                    one = self._node_from_request(node_objects, i)
                    f = 0 if one is None or not one.schedulable else one.gpus
                keys[i] = node_key
                if one is None:
                    ok[node_key] = False
                    verdicts[node_key] = (
                        f"perfsched: node {name} is not in the extender's cache yet (watch lag); retry",
                        True,
                        R_UNKNOWN_NODE,
                    )
                    continue
                why = check_node(one, f, gpus_per_replica=g, gpu_type=want_type, allowed_gpu_types=allowed)
                ok[node_key] = why is None
                if why is not None:
                    verdicts[node_key] = (
                        why.reason,
                        why.resolvable,
                        _category(one, f, g, want_type, allowed),
                    )
        # names per failing key (a key of one's own: one name) for the rejection metrics
        for key, verdict in verdicts.items():
            cats[verdict[2]] = cats.get(verdict[2], 0) + counts.get(key, 1)
        if all(ok.values()):
            return list(names), [], [], verdicts
        fit_flags = list(map(ok.__getitem__, keys))
        bad = list(map(not_, fit_flags))
        return (
            list(compress(names, fit_flags)),
            list(compress(names, bad)),
            list(compress(keys, bad)),
            verdicts,
        )

    def _verdict(self, ctx: PodContext, node: Node, free: int) -> tuple[str, bool, str]:
        """Why one replica of the pod does not fit on ``node`` with ``free`` GPUs (it must not fit)."""
        g = ctx.gpus
        why = check_node(node, free, gpus_per_replica=g, gpu_type=ctx.gpu_type, allowed_gpu_types=ctx.allowed)
        if why is None:  # pragma: no cover - callers pass only nodes the fast check refused
            raise AssertionError(f"node {node.name} fits; no verdict to give")
        return why.reason, why.resolvable, _category(node, free, g, ctx.gpu_type, ctx.allowed)

    def _node_from_request(self, node_objects: Sequence[Any] | None, i: int) -> Node | None:
        """A node sent in full that the cache does not know (yet): decode it from the request."""
        if node_objects is None:
            return None
        try:
            return decode_node(node_objects[i])
        except (ValueError, IndexError):
            return None

    def _fits_now(self, per_node: Mapping[str, int], g: int, gpu_type: str | None) -> bool:
        nodes = self.cache.nodes
        free = self.cache.free
        for name, r in per_node.items():
            node = nodes.get(name)
            if node is None or (gpu_type is not None and node.gpu_type != gpu_type):
                return False
            if free.get(name, 0) < r * g:
                return False
        return True

    def _gang_plan(
        self, ctx: PodContext, fits: Sequence[str], is_fit: Callable[[str], bool] | None = None
    ) -> Allocation | Unschedulable:
        """Where the gang's unplaced replicas (this pod included) should go; see the module docstring.

        ``fits``: the candidate names one replica fits on; ``is_fit`` answers ``name in fits`` in O(1)
        where the caller has it (else a set is built when needed)."""
        assert ctx.gang_key is not None
        g = ctx.gpus
        unplaced = ctx.unplaced
        nodes = self.cache.nodes
        gpu_type = ctx.gpu_type
        # 1. the operator's plan, if it covers every unplaced replica and still fits
        if ctx.planned and sum(ctx.planned.values()) >= unplaced:
            planned_types = {nodes[n].gpu_type for n in ctx.planned if n in nodes}
            if len(planned_types) == 1 and self._fits_now(ctx.planned, g, gpu_type):
                return Allocation.of(ctx.pod.job, planned_types.pop(), g, ctx.planned)
        # 2. our own earlier plan, minus the replicas placed since, if it still fits
        memo = self._plans.get(ctx.gang_key)
        if memo is not None and memo[0].gpus_per_replica == g:
            old, placed_then = memo
            left = dict(old.replicas_per_node)
            for name, r in ctx.placed.items():
                if name in left:
                    left[name] = max(0, left[name] - max(0, r - placed_then.get(name, 0)))
            left = {n: r for n, r in left.items() if r > 0}
            if sum(left.values()) >= unplaced and self._fits_now(left, g, gpu_type):
                return Allocation.of(ctx.pod.job, old.gpu_type, g, left)
        # 3. a fresh placement with the shared algorithm, over the cache, then over the candidates
        types = self._candidate_types(ctx, fits)
        # the reason reported is the whole-cluster one: a candidates-only pool is smaller than the cluster
        reason: Unschedulable | None = None
        for pool in (None, fits):
            for t in types:
                if pool is None:
                    # the whole cluster: an index kept in step with the cache, not rebuilt per call
                    result = self._free_indexes.get(t).place(
                        replicas=unplaced,
                        gpus_per_replica=g,
                        gpu_type=t,
                        job=ctx.pod.job,
                        prefer=ctx.placed or None,
                    )
                else:
                    result = place_gang(
                        [nodes[n] for n in pool if n in nodes and nodes[n].gpu_type == t],
                        self.cache.free,
                        replicas=unplaced,
                        gpus_per_replica=g,
                        gpu_type=t,
                        job=ctx.pod.job,
                        prefer=ctx.placed or None,
                    )
                if isinstance(result, Allocation):
                    offered = (
                        any(map(is_fit, result.nodes))
                        if is_fit is not None
                        else bool(set(result.nodes).intersection(fits))
                    )
                    if offered:
                        self._plans[ctx.gang_key] = (result, dict(ctx.placed))
                        if len(self._plans) > 10_000:
                            self._plans.pop(next(iter(self._plans)))
                        return result
                elif reason is None:
                    reason = result
            if reason is None:
                # the cluster has room, only not among these candidates: kube-scheduler may retry others
                reason = Unschedulable("its placement is on nodes kube-scheduler did not offer this time")
        if reason is None:
            gpu_type = gpu_type or "any"
            reason = Unschedulable(f"no candidate node of GPU type {gpu_type} fits one replica")
        return reason

    def _candidate_types(self, ctx: PodContext, fits: Sequence[str]) -> list[str]:
        """GPU types the gang may use: the decision, else the types of the fitting nodes (placed first)."""
        if ctx.gpu_type:
            return [ctx.gpu_type]
        nodes = self.cache.nodes
        order: dict[str, None] = {}
        for name in ctx.placed:
            if name in nodes:
                order[nodes[name].gpu_type] = None
        for name in fits:
            node = nodes.get(name)
            if node is not None:
                order[node.gpu_type] = None
        return list(order)

    # --- vectorised filter (node names of nodes the cache knows) ---------------------------------
    def filter_fast(
        self, pod_obj: Mapping[str, Any], names: list[str], names_key: bytes | str
    ) -> FastFilter | None:
        """``filter`` for a request of node names, answered as the wire JSON directly; None when the
        general path must answer (a name the cache does not know or named twice, a pod without GPUs,
        a TrainingJob that cannot be scheduled). Byte-for-byte what ``filter`` plus ``orjson`` give.

        The names must need no JSON escaping (``wire.plain_names``); ``names_key`` names the list exactly
        (``wire.ParsedArgs.names_key``; it keys the memo of name lists; "" skips it).
        """
        return self._filter_looked_up(pod_obj, lambda table: table.lookup(names, names_key))

    def filter_text(self, pod_obj: Mapping[str, Any], text: bytes) -> FastFilter | None:
        """``filter_fast`` for a request whose ``NodeNames`` array is given as its JSON text, mapped to
        node numbers without decoding it (``NodeTable.lookup_text``); None when the names are not
        exactly a JSON array of distinct names the cache knows, or the general path must answer."""
        return self._filter_looked_up(pod_obj, lambda table: table.lookup_text(text))

    def _filter_looked_up(
        self, pod_obj: Mapping[str, Any], lookup: Callable[[NodeTable], IntArray | None]
    ) -> FastFilter | None:
        """The vectorised filter over the node numbers ``lookup`` finds in the synced node table."""
        with self.cache.lock:
            self.cache.expire_assumed()
            ctx = self.context(pod_obj)
            if ctx.gpus <= 0 or ctx.job_problem:
                return None
            table = self.table
            table.sync()
            idx = lookup(table)
            if idx is None:
                return None
            return self._filter_fast(ctx, idx)

    def _filter_fast(self, ctx: PodContext, idx: IntArray) -> FastFilter:
        table = self.table
        verdicts = self._verdicts(ctx)
        if verdicts.version != table.version:
            # nodes whose code changed since these verdicts were last brought in step (every node of
            # the layout, so that any later list of names can skip the check until the cache changes)
            stale = np.flatnonzero(verdicts.code != table.code)
            if len(stale):
                self._decide_nodes(ctx, verdicts, stale.tolist())
            verdicts.version = table.version
        kinds = verdicts.kind[idx]
        counts = np.bincount(verdicts.category[idx], minlength=len(_CATEGORIES)).tolist()
        cats = {_CATEGORIES[c]: n for c, n in enumerate(counts) if c and n}
        # every name's piece, passing ones first, then failing, then unresolvable, each in request order
        pieces: list[bytes] = verdicts.fragment[idx[np.argsort(kinds, kind="stable")]].tolist()
        n_pass, n_fail, _ = np.bincount(kinds, minlength=3).tolist()
        if ctx.gang_key is None or (ctx.replicas <= 1 and not ctx.placed and not ctx.planned):
            # the pieces as they are, with the reply's structure around each group: one join
            if n_pass:
                pieces[n_pass - 1] = pieces[n_pass - 1][: -len(b',"')]  # the last name's separator
            if n_fail:
                pieces[n_pass + n_fail - 1] = pieces[n_pass + n_fail - 1][:-1]  # the entries' last comma
            if len(pieces) > n_pass + n_fail:
                pieces[-1] = pieces[-1][:-1]
            pieces.insert(n_pass + n_fail, b'},"FailedAndUnresolvableNodes":{')
            pieces.insert(n_pass, b'],"FailedNodes":{')
            pieces.insert(0, b'{"Nodes":null,"NodeNames":["' if n_pass else b'{"Nodes":null,"NodeNames":[')
            pieces.append(b'},"Error":""}')
            return FastFilter(b"".join(pieces), n_pass, cats, len(idx))
        failed = pieces[n_pass : n_pass + n_fail]
        unres = pieces[n_pass + n_fail :]
        name_bytes = table.name_bytes
        passed: list[bytes]
        fit_mask = kinds == 0
        fit_nodes = idx[fit_mask]
        fit_all = np.zeros(len(table.names), dtype=np.bool_)
        fit_all[fit_nodes] = True
        index_get = table.index.get

        def is_fit(name: str) -> bool:
            i = index_get(name)
            return i is not None and bool(fit_all[i])

        # the fitting names as strings only if the plan needs them (no type decided, or a second pass)
        fits = _LazyNames(lambda: table.name_array[fit_nodes].tolist())
        plan = self._gang_plan(ctx, fits, is_fit)
        if isinstance(plan, Unschedulable):
            passed = []
            if len(fit_nodes):
                extra = _same_reason(
                    name_bytes[fit_nodes].tolist(), f"perfsched: gang {ctx.pod.job}: {plan.reason}"
                )
                (failed if plan.resolvable else unres).append(extra)
                cats[R_GANG] = cats.get(R_GANG, 0) + len(fit_nodes)
        else:
            in_plan = np.zeros(len(table.names), dtype=np.bool_)
            index = table.index
            in_plan[[index[n] for n in plan.nodes if n in index]] = True
            inside = in_plan[idx]
            passed = name_bytes[idx[fit_mask & inside]].tolist()
            outside: list[bytes] = name_bytes[idx[fit_mask & ~inside]].tolist()
            if outside:
                where = _describe_plan(plan, self.cache.nodes)
                extra = _same_reason(
                    outside,
                    f"perfsched: gang {ctx.pod.job} ({ctx.replicas} x {ctx.gpus} GPUs) is placed on "
                    f"{where}; this node is outside that placement",
                )
                failed.append(extra)
                cats[R_GANG] = cats.get(R_GANG, 0) + len(outside)
        # one join over every entry: the entries end in a comma, the last one's is cut
        if failed:
            failed[-1] = failed[-1][:-1]
        if unres:
            unres[-1] = unres[-1][:-1]
        head = b'["' + b'","'.join(passed) + b'"],"FailedNodes":{' if passed else b'[],"FailedNodes":{'
        parts = [b'{"Nodes":null,"NodeNames":', head, *failed, b'},"FailedAndUnresolvableNodes":{']
        parts += unres
        parts.append(b'},"Error":""}')
        reply = b"".join(parts)
        return FastFilter(reply, len(passed), cats, len(idx))

    def _verdicts(self, ctx: PodContext) -> _Verdicts:
        table = self.table
        key = (table.nodes_version, ctx.gpus, ctx.gpu_type, ctx.allowed)
        hit = self._verdict_memo.get(key)
        if hit is None:
            if len(self._verdict_memo) >= 32:  # each holds a fragment per node
                self._verdict_memo.pop(next(iter(self._verdict_memo)))
            size = len(table.names)
            hit = self._verdict_memo[key] = _Verdicts(
                code=np.full(size, -1, dtype=np.int64),
                kind=np.zeros(size, dtype=np.int8),
                category=np.zeros(size, dtype=np.int64),
                fragment=np.full(size, b"", dtype=object),
                by_code={},
            )
        return hit

    def _decide_nodes(self, ctx: PodContext, verdicts: _Verdicts, numbers: Sequence[int]) -> None:
        """Decide these nodes for this kind of pod at their current codes (one ``check_node`` per code,
        or per node where the reason names the node)."""
        g = ctx.gpus
        table = self.table
        by_code = verdicts.by_code
        for i in numbers:
            code = int(table.code[i])
            decided = None if table.own[i] else by_code.get(code)
            if decided is None:
                node = table.nodes[i] if table.own[i] else table.node_of_code(code)[0]
                f = code % table.stride
                why = check_node(
                    node, f, gpus_per_replica=g, gpu_type=ctx.gpu_type, allowed_gpu_types=ctx.allowed
                )
                if why is None:
                    decided = (0, b"", 0)
                else:
                    decided = (
                        1 if why.resolvable else 2,
                        orjson.dumps(why.reason),
                        _CATEGORY_NUMBER[_category(node, f, g, ctx.gpu_type, ctx.allowed)],
                    )
                if not table.own[i]:
                    by_code[code] = decided
            kind, reason, category = decided
            verdicts.code[i] = code
            verdicts.kind[i] = kind
            verdicts.category[i] = category
            name = table.name_bytes[i]
            verdicts.fragment[i] = b'"' + name + b'":' + reason + b"," if kind else name + b'","'

    # --- prioritize -------------------------------------------------------------------------------
    def prioritize(
        self, pod_obj: Mapping[str, Any], names: Sequence[str], node_objects: Sequence[Any] | None
    ) -> list[tuple[str, int]]:
        """A 0..10 score per node name, in request order: the weighted mean of three 0..10 terms.

        - throughput: 10 x predicted throughput of the job with this node in its placement / the best
          candidate's (one oracle call for all distinct shapes); left out without a job model;
        - locality: how tight the gang stays with this node added to its bound replicas (or to the pod's
          planned node): same NVLink domain or node 10, rack 6, zone 3, else 0; left out without anchors;
        - packing (best fit): 10 x (1 - GPUs left free on the node after this pod / node's GPUs).

        Nodes alike in every input of the three terms (type, size, free GPUs, link, network, relation to
        the gang) form one class; each class is scored once. Nodes unknown to the cache score 0.
        """
        keys, scores = self.prioritize_classes(pod_obj, names, node_objects)
        return list(zip(names, map(scores.__getitem__, keys), strict=True))

    def prioritize_classes(
        self, pod_obj: Mapping[str, Any], names: Sequence[str], node_objects: Sequence[Any] | None
    ) -> tuple[list[Any], dict[Any, int]]:
        """``prioritize`` before the per-name expansion: a class key per name and a score per key.

        The score of ``names[i]`` is ``scores[keys[i]]``; the app serialises from this pair directly.
        """
        with self.cache.lock:
            ctx = self.context(pod_obj)
            if ctx.gpus <= 0:
                return [None] * len(names), {None: 0}
            return self._score(ctx, names, node_objects)

    def _score_memo_key(
        self, ctx: PodContext, anchors: Sequence[str], keys: frozenset[Any]
    ) -> tuple[Any, ...]:
        """The key of ``_score_memo``: the node set, the pod's job, GPUs and gang state, and the class keys
        present (scores are relative to the best class present)."""
        return (
            self.cache.nodes_version,
            _job_key(ctx.job) if ctx.job is not None else None,
            ctx.gpus,
            ctx.unplaced,
            tuple(sorted(ctx.placed.items())),
            tuple(anchors),
            keys,
        )

    def _score_terms(self, ctx: PodContext) -> tuple[list[str], _Relation | None, bool, bool, bool, bool]:
        """Which score terms apply to this pod: (anchors -- the gang's placed nodes, else the planned
        node --, their relation, locality on, throughput on, gang spread matters, scores depend on where
        a node stands relative to the anchors)."""
        node_map = self.cache.nodes
        anchors = [a for a in (list(ctx.placed) or [ctx.pod.planned_node]) if a and a in node_map]
        rel = _Relation(anchors, node_map) if anchors else None
        use_loc = rel is not None and self.weights.locality > 0
        use_tp = self.weights.throughput > 0 and ctx.job is not None and self.oracle is not None
        spread_matters = use_tp and bool(ctx.placed)
        relative = rel is not None and (use_loc or spread_matters)
        return anchors, rel, use_loc, use_tp, spread_matters, relative

    def _score(
        self, ctx: PodContext, names: Sequence[str], node_objects: Sequence[Any] | None
    ) -> tuple[list[Any], dict[Any, int]]:
        node_map = self.cache.nodes
        anchors, rel, use_loc, use_tp, spread_matters, relative = self._score_terms(ctx)
        # one C-speed lookup per name: the cache keeps (class << 16) | free GPUs per node
        keys: list[Any] = list(map(self.cache.score_key.get, names))
        present = frozenset(keys)
        if None in present:
            return self._score_slow(ctx, names, node_objects, keys, rel, use_loc, use_tp, spread_matters)
        if relative:
            assert rel is not None
            # the node's relation to the gang and the gang's replicas on it, folded into the same int
            keys = list(map(or_, keys, map(self._level_bits(rel, anchors).get, names, repeat(0))))
            if spread_matters:
                placed = {n: r << _PLACED_SHIFT for n, r in ctx.placed.items()}
                keys = list(map(or_, keys, map(placed.get, names, repeat(0))))
        # scores depend on the set of classes present (throughput is relative to the best of them)
        memo_key = self._score_memo_key(ctx, anchors, frozenset(keys) if relative else present)
        scores = self._score_memo.get(memo_key)
        if scores is not None:
            return keys, scores
        reps: dict[Any, tuple[Node, int]] = {}
        i = -1
        for key in dict.fromkeys(keys):  # in order of first occurrence
            i = keys.index(key, i + 1)  # first occurrences come in order: one scan in all
            reps[key] = (node_map[names[i]], key & 0xFFFF)
        scores, complete = self._score_classes(ctx, reps, rel, use_loc, use_tp, node_map)
        scores[None] = 0
        if complete:
            if len(self._score_memo) >= 1024:
                self._score_memo.clear()
            self._score_memo[memo_key] = scores
        return keys, scores

    def prioritize_fast(
        self, pod_obj: Mapping[str, Any], names: list[str], names_key: bytes | str
    ) -> IntArray | None:
        """``prioritize``'s scores as an array in request order, computed over the node arrays; None
        when the general path must answer (a name the cache does not know or named twice). The same
        scores as ``prioritize_classes`` (same class keys, same memo, same representatives)."""
        found = self._prioritize_looked_up(pod_obj, lambda table: table.lookup(names, names_key))
        return None if found is None else found[1]

    def prioritize_text(self, pod_obj: Mapping[str, Any], text: bytes) -> tuple[IntArray, IntArray] | None:
        """``prioritize_fast`` for a request whose ``NodeNames`` array is given as its JSON text (see
        ``filter_text``): the node numbers of the names, in request order, and their scores."""
        return self._prioritize_looked_up(pod_obj, lambda table: table.lookup_text(text))

    def _prioritize_looked_up(
        self, pod_obj: Mapping[str, Any], lookup: Callable[[NodeTable], IntArray | None]
    ) -> tuple[IntArray, IntArray] | None:
        """(node numbers ``lookup`` finds in the synced node table, their scores), or None."""
        with self.cache.lock:
            ctx = self.context(pod_obj)
            table = self.table
            table.sync()
            idx = lookup(table)
            if idx is None:
                return None
            if ctx.gpus <= 0:
                return idx, np.zeros(len(idx), dtype=np.int64)
            return idx, self._score_fast(ctx, idx)

    def _score_fast(self, ctx: PodContext, idx: IntArray) -> IntArray:
        table = self.table
        anchors, rel, use_loc, use_tp, spread_matters, relative = self._score_terms(ctx)
        # a dense code per name: (class, free GPUs), then the locality level and the gang's replicas on it
        span = table.score_codes
        dense = table.score_code[idx]
        most = 0
        if relative:
            assert rel is not None
            dense += span * self._level_array(rel, anchors)[idx]
            if spread_matters and ctx.placed:
                most = max(ctx.placed.values())
                on = np.zeros(len(table.names), dtype=np.int64)
                for n, r in ctx.placed.items():
                    if n in table.index:
                        on[table.index[n]] = r
                dense += (span * 5) * on[idx]
        present, _ = present_codes(dense, span * 5 * (most + 1))
        job_key = _job_key(ctx.job) if ctx.job is not None else None
        placed_key = tuple(sorted(ctx.placed.items()))
        # the score per code, memoised per layout, pod and set of codes present
        lut_key: tuple[Any, ...] = (table.nodes_version, job_key, ctx.gpus, ctx.unplaced, placed_key)
        lut_key = (*lut_key, tuple(anchors), most, present.tobytes())
        lut = self._lut_memo.get(lut_key)
        if lut is None:
            lut, complete = self._score_lut(ctx, idx, dense, present, rel, use_loc, use_tp, anchors, most)
            if complete:
                if len(self._lut_memo) >= 1024:
                    self._lut_memo.clear()
                self._lut_memo[lut_key] = lut
        result: IntArray = lut[dense]
        return result

    def _score_lut(
        self,
        ctx: PodContext,
        idx: IntArray,
        dense: IntArray,
        present: IntArray,
        rel: _Relation | None,
        use_loc: bool,
        use_tp: bool,
        anchors: Sequence[str],
        most: int,
    ) -> tuple[IntArray, bool]:
        """The score of each present dense code (``_score_fast``) through ``_score``'s class keys and
        memo; and whether it may be memoised (no prediction failed)."""
        table = self.table
        stride = table.stride
        span = table.score_codes
        node_map = self.cache.nodes
        # the class keys ``_score`` uses: (class << 16) | free, level and replicas in the high bits
        rest, scode = np.divmod(present, span)
        keys_arr = (
            ((scode // stride) << 16)
            | (scode % stride)
            | ((rest % 5) << _LEVEL_SHIFT)
            | ((rest // 5) << _PLACED_SHIFT)
        )
        keys: list[int] = keys_arr.tolist()
        memo_key = self._score_memo_key(ctx, anchors, frozenset(keys))
        scores = self._score_memo.get(memo_key)
        complete = True
        if scores is None:
            # representatives: each class's first name in the request, classes in that order
            firsts = first_positions(dense, present)
            order = sorted(range(len(keys)), key=firsts.__getitem__)
            reps: dict[Any, tuple[Node, int]] = {}
            for j in order:
                reps[keys[j]] = (node_map[table.names[int(idx[firsts[j]])]], keys[j] & 0xFFFF)
            scores, complete = self._score_classes(ctx, reps, rel, use_loc, use_tp, node_map)
            scores[None] = 0
            if complete:
                if len(self._score_memo) >= 1024:
                    self._score_memo.clear()
                self._score_memo[memo_key] = scores
        lut = np.zeros(span * 5 * (most + 1), dtype=np.int64)
        lut[present] = [scores[k] for k in keys]
        return lut, complete

    def _level_array(self, rel: _Relation, anchors: Sequence[str]) -> IntArray:
        """Node number -> ``LocalityLevel.CLUSTER - level`` relative to the anchors (``_level_bits``)."""
        table = self.table
        memo_key = (table.nodes_version, tuple(anchors))
        hit = self._level_arrays.get(memo_key)
        if hit is not None:
            return hit
        out = np.zeros(len(table.names), dtype=np.int64)
        index = table.index
        for name, bits in self._level_bits(rel, anchors).items():
            i = index.get(name)
            if i is not None:
                out[i] = bits >> _LEVEL_SHIFT
        if len(self._level_arrays) >= 256:
            self._level_arrays.clear()
        self._level_arrays[memo_key] = out
        return out

    def _level_bits(self, rel: _Relation, anchors: Sequence[str]) -> dict[str, int]:
        """Node name -> its locality level relative to the gang, as key bits; names absent are CLUSTER.

        Built from the node groups (NVLink domain, rack, zone) of the anchors, memoised per anchors and
        node set: the replicas of one gang ask with the same anchors one after another.
        """
        memo_key = (self.cache.nodes_version, tuple(anchors))
        hit = self._level_memo.get(memo_key)
        if hit is not None:
            return hit
        groups = self._groups()
        bits: dict[str, int] = {}
        for kind, label, level in (
            ("zone", rel.zone, LocalityLevel.ZONE),
            ("rack", rel.rack, LocalityLevel.RACK),
            ("domain", rel.domain, LocalityLevel.NVLINK_DOMAIN),
        ):
            if label:
                bits.update(dict.fromkeys(groups.get((kind, label), ()), _level_code(level)))
        node_map = self.cache.nodes
        for a in rel.anchors:
            bits[a] = _level_code(rel.level(node_map[a]))
        if len(self._level_memo) >= 256:
            self._level_memo.clear()
        self._level_memo[memo_key] = bits
        return bits

    def _groups(self) -> dict[tuple[str, str], list[str]]:
        """("domain" | "rack" | "zone", label) -> node names, rebuilt when the cache's nodes change."""
        version = self.cache.nodes_version
        if self._group_index[0] != version:
            groups: dict[tuple[str, str], list[str]] = {}
            for node in self.cache.nodes.values():
                for kind, label in (("domain", node.nvlink_domain), ("rack", node.rack), ("zone", node.zone)):
                    if label:
                        groups.setdefault((kind, label), []).append(node.name)
            self._group_index = (version, groups)
        return self._group_index[1]

    def _score_slow(
        self,
        ctx: PodContext,
        names: Sequence[str],
        node_objects: Sequence[Any] | None,
        keys: list[Any],
        rel: _Relation | None,
        use_loc: bool,
        use_tp: bool,
        spread_matters: bool,
    ) -> tuple[list[Any], dict[Any, int]]:
        """``_score`` when some names are not in the cache: those are keyed by the request's Node objects
        (nodes neither the cache nor the request describe score 0); not memoised."""
        node_map = self.cache.nodes
        reps: dict[Any, tuple[Node, int]] = {}
        if rel is not None and (use_loc or spread_matters):
            keys = self._relative_keys(ctx, names, node_objects, rel, spread_matters, reps)
        else:
            from_request = self._request_keys(names, node_objects, keys)
            fit = self.cache.fit
            i = -1
            for key in dict.fromkeys(keys):
                i = keys.index(key, i + 1)
                if key is None:
                    continue
                rep = from_request.get(key) if type(key) is tuple else None
                reps[key] = rep or (node_map[names[i]], fit[names[i]][1])
        scores, _ = self._score_classes(ctx, reps, rel, use_loc, use_tp, node_map)
        scores[None] = 0
        return keys, scores

    def _request_keys(
        self, names: Sequence[str], node_objects: Sequence[Any] | None, keys: list[Any]
    ) -> dict[Any, tuple[Node, int]]:
        """Key the names the cache does not know (``None`` in ``keys``) by the request's own Node objects,
        in place; return each such key's first node and its free GPUs."""
        out: dict[Any, tuple[Node, int]] = {}
        for i in [i for i, k in enumerate(keys) if k is None]:
            node = self._node_from_request(node_objects, i)
            if node is None:
                continue
            f = node.gpus if node.schedulable else 0
            key = (node.gpu_type, node.gpus, f, node.interconnect, node.network_gbps, node.nvlink_domain)
            keys[i] = key
            if key not in out:
                out[key] = (node, f)
        return out

    def _relative_keys(
        self,
        ctx: PodContext,
        names: Sequence[str],
        node_objects: Sequence[Any] | None,
        rel: _Relation | None,
        spread_matters: bool,
        reps: dict[Any, tuple[Node, int]],
    ) -> list[Any]:
        """Class keys when the node's relation to the gang matters: (own key, locality level, replicas)."""
        node_map = self.cache.nodes
        keys: list[Any] = []
        keys_append = keys.append
        nodes_get = node_map.get
        fit_get = self.cache.fit.get
        for i, name in enumerate(names):
            info = fit_get(name)
            if info is None:
                # not in the cache: a full Node object from the request, keyed by its own attributes
                node = self._node_from_request(node_objects, i)
                if node is None:
                    keys_append(None)
                    continue
                f = node.gpus if node.schedulable else 0
                key: Any = (
                    node.gpu_type,
                    node.gpus,
                    f,
                    node.interconnect,
                    node.network_gbps,
                    node.nvlink_domain,
                )
            else:
                f = info[1]
                key = (info[3] << 16) | f  # one int: class and free GPUs
                node = None
            node = node or nodes_get(name)
            assert rel is not None and node is not None
            key = (key, rel.level(node), ctx.placed.get(name, 0) if spread_matters else 0)
            keys_append(key)
            if key not in reps:
                reps[key] = (node, f)
        return keys

    def _score_classes(
        self,
        ctx: PodContext,
        reps: Mapping[Any, tuple[Node, int]],
        rel: _Relation | None,
        use_loc: bool,
        use_tp: bool,
        node_map: Mapping[str, Node],
    ) -> tuple[dict[Any, int], bool]:
        """A score per class; and whether every term asked for was computed (False: a prediction failed
        and the throughput term was left out, so the answer must not be memoised)."""
        w = self.weights
        g = ctx.gpus
        tp: dict[Any, float] | None = None
        complete = True
        if use_tp:
            shapes = {key: self._shape_for(ctx, node, f, node_map) for key, (node, f) in reps.items()}
            before = self._predict_failures
            tp = self._throughput_term(ctx, shapes)
            complete = self._predict_failures == before
        total_w = w.packing + (w.locality if use_loc else 0.0) + (w.throughput if tp is not None else 0.0)
        out: dict[Any, int] = {}
        for key, (node, f) in reps.items():
            if total_w <= 0 or node.gpus <= 0:
                out[key] = 0
                continue
            s = w.packing * 10.0 * (1.0 - max(0, f - g) / node.gpus)
            if use_loc and rel is not None:
                s += w.locality * _LOCALITY_SCORE[rel.level(node)]
            if tp is not None:
                s += w.throughput * tp[key]
            out[key] = min(10, max(0, math.floor(s / total_w + 0.5)))
        return out, complete

    def _shape_for(
        self, ctx: PodContext, node: Node, free: int, node_map: Mapping[str, Node]
    ) -> PlacementShape:
        """The placement shape the gang has if this pod goes on ``node``.

        Bound replicas stay where they are; the rest of the unplaced replicas go on ``node`` while it
        has room, the remainder on further nodes of the same size (counted, not named).
        """
        g = ctx.gpus
        rest = ctx.unplaced
        here = min(rest, max(1, free // g)) if g > 0 else 1
        memo_key: tuple[Any, ...] | None = None
        if not ctx.placed:
            # a gang with nothing bound yet: the shape depends on the node's class, not on its name
            memo_key = (
                node.gpu_type,
                node.gpus,
                node.interconnect,
                node.network_gbps,
                bool(node.nvlink_domain),
            )
            memo_key = (*memo_key, g, rest, here)
            hit = self._shape_memo.get(memo_key)
            if hit is not None:
                return hit
        shape = self._compute_shape(ctx, node, here, node_map)
        if memo_key is not None:
            if len(self._shape_memo) > 4096:
                self._shape_memo.clear()
            self._shape_memo[memo_key] = shape
        return shape

    def _compute_shape(
        self, ctx: PodContext, node: Node, here: int, node_map: Mapping[str, Node]
    ) -> PlacementShape:
        g = ctx.gpus
        rest = ctx.unplaced
        per_node = dict(ctx.placed)
        per_node[node.name] = per_node.get(node.name, 0) + here
        rest -= here
        alloc = Allocation.of(ctx.pod.job or ctx.pod.key, node.gpu_type, g, per_node)
        nm = node_map if node.name in node_map else {**node_map, node.name: node}
        shape = spread_of(alloc, nm)
        if rest <= 0:
            return shape
        per_extra = max(1, node.gpus // g)
        extra = -(-rest // per_extra)
        return PlacementShape(
            gpu_type=node.gpu_type,
            num_gpus=shape.num_gpus + rest * g,
            num_nodes=shape.num_nodes + extra,
            gpus_per_node=max(shape.gpus_per_node, min(rest, per_extra) * g),
            interconnect=Interconnect.PCIE if not node.nvlink_domain else shape.interconnect,
            network_gbps=shape.network_gbps,
        )

    def _throughput_term(
        self, ctx: PodContext, shapes: Mapping[Any, PlacementShape]
    ) -> dict[Any, float] | None:
        """10 x predicted throughput / the best candidate's, per class; None when nothing is predictable."""
        job = ctx.job
        if job is None or self.oracle is None:
            return None
        jk = _job_key(job)
        by_key = {(*jk, shape): shape for shape in shapes.values()}
        values = self._predict(job, by_key)
        if values is None:
            return None
        raw = {key: values.get((*jk, shape), 0.0) for key, shape in shapes.items()}
        best = max(raw.values(), default=0.0)
        if best <= 0:
            return None
        return {key: 10.0 * max(0.0, v) / best for key, v in raw.items()}

    def _predict(
        self, job: Job, by_key: Mapping[tuple[Any, ...], PlacementShape]
    ) -> dict[tuple[Any, ...], float] | None:
        """Memoised predictions for every key; the misses go to the oracle in one batch."""
        out: dict[tuple[Any, ...], float] = {}
        misses: list[tuple[tuple[Any, ...], PlacementShape]] = []
        cache = self._predict_cache
        for key, shape in by_key.items():
            v = cache.get(key)
            if v is None:
                misses.append((key, shape))
            else:
                cache.move_to_end(key)
                out[key] = v
        sent = 0
        if misses:
            assert self.oracle is not None
            try:
                values = self.oracle.throughput([(job, s) for _, s in misses])
                sent = len(misses)
            except Exception as exc:  # the predictor must never fail a scheduling call
                self._predict_failures += 1
                log.warning("throughput prediction failed for %s: %s; scoring by packing only", job.name, exc)
                if self._on_predict is not None:
                    self._on_predict(len(misses), len(out), len(misses))
                return None
            for (key, _), v in zip(misses, values, strict=False):
                val = float(v) if v is not None and math.isfinite(float(v)) else 0.0
                cache[key] = val
                out[key] = val
            while len(cache) > self._predict_cache_size:
                cache.popitem(last=False)
                self._score_memo.clear()  # memoised scores may rest on the evicted prediction
                self._lut_memo.clear()
        if self._on_predict is not None:
            self._on_predict(sent, len(by_key) - len(misses), len(misses))
        return out

    # --- preempt ----------------------------------------------------------------------------------
    def preempt(
        self, pod_obj: Mapping[str, Any], candidates: Mapping[str, list[tuple[str, int | None]]]
    ) -> dict[str, list[str]]:
        """Keep the candidate nodes where evicting the victims really frees room for this pod.

        ``candidates`` maps node name -> victims as ``(uid, gpus or None when unknown)``. A node is kept
        when the pod's GPU type/allowed types match it and its free GPUs plus the victims' GPUs cover the
        pod's request. Returns node -> victim UIDs (unchanged) for the kept nodes.
        """
        with self.cache.lock:
            ctx = self.context(pod_obj)
            if ctx.gpus <= 0:
                return {n: [u for u, _ in v] for n, v in candidates.items() if v}
            kept: dict[str, list[str]] = {}
            for name, victims in candidates.items():
                node = self.cache.nodes.get(name)
                if node is None or not victims:
                    continue
                freed = 0
                for uid, gpus in victims:
                    if gpus is None:
                        p = self.cache.pod_by_uid(uid)
                        gpus = p.gpus if p is not None and p.node_name == name else 0
                    freed += gpus
                room = self.cache.free.get(name, 0) + freed
                why = check_node(
                    node,
                    room,
                    gpus_per_replica=ctx.gpus,
                    gpu_type=ctx.gpu_type,
                    allowed_gpu_types=ctx.allowed,
                )
                if why is None:
                    kept[name] = [u for u, _ in victims]
            return kept


class FreeIndexes:
    """Per GPU type, a core ``FreeIndex`` over the cache's nodes of that type, in step with the cache.

    ``get(t).place(...)`` answers exactly what ``place_gang([nodes of type t], cache.free, ...)`` would,
    without building the index (and its layout) on every call: an index is built once per node set and
    type, and afterwards only the nodes whose free GPUs changed since the last call are moved, through
    the index's own ``commit``/``release``. Callers hold the cache's lock.
    """

    def __init__(self, cache: ClusterCache) -> None:
        self._cache = cache
        self._nodes_version = -1
        self._version = -1
        self._free: dict[str, int] = {}  # the cache's free GPUs when the indexes were last brought in step
        self._by_type: dict[str, FreeIndex] = {}

    def get(self, gpu_type: str) -> FreeIndex:
        cache = self._cache
        if cache.nodes_version != self._nodes_version:
            self._by_type = {}
            self._nodes_version = cache.nodes_version
            self._version = cache.version
            self._free = dict(cache.free)
        elif cache.version != self._version:
            self._catch_up()
        index = self._by_type.get(gpu_type)
        if index is None:
            index = FreeIndex([n for n in cache.nodes.values() if n.gpu_type == gpu_type], self._free)
            self._by_type[gpu_type] = index
        return index

    def _catch_up(self) -> None:
        cache = self._cache
        free = cache.free
        old = self._free
        names = list(free)
        changed = list(compress(names, map(ne, map(free.__getitem__, names), map(old.get, names))))
        nodes = cache.nodes
        for name in changed:
            node = nodes[name]
            index = self._by_type.get(node.gpu_type)
            if index is None:
                continue
            now = min(node.capacity_for_jobs, max(0, free[name]))
            have = index.free_of(name)
            if now < have:
                index.commit(Allocation.of("perfsched/free-sync", node.gpu_type, have - now, {name: 1}))
            elif now > have:
                index.release(Allocation.of("perfsched/free-sync", node.gpu_type, now - have, {name: 1}))
        self._free = dict(free)
        self._version = cache.version


class _Relation:
    """Where a node stands relative to a gang's anchor nodes: ``locality_level(anchors + [node])``, cheaply.

    Equal to the core's ``locality_level`` (one node alone: NVLink domain or node by its link; else the
    anchors' shared NVLink domain, rack, zone, in that order) without building a list per node.
    """

    __slots__ = ("_anchors", "_domain", "_rack", "_zone")

    @property
    def anchors(self) -> frozenset[str]:
        return frozenset(self._anchors)

    @property
    def domain(self) -> str:
        """The NVLink domain every anchor shares ("" if none)."""
        return self._domain

    @property
    def rack(self) -> str:
        return self._rack

    @property
    def zone(self) -> str:
        return self._zone

    def __init__(self, anchors: Sequence[str], node_map: Mapping[str, Node]) -> None:
        members = [node_map[a] for a in dict.fromkeys(anchors)]
        self._anchors = {m.name for m in members}
        first = members[0]
        self._domain = (
            first.nvlink_domain if all(m.nvlink_domain == first.nvlink_domain for m in members) else ""
        )
        self._rack = first.rack if all(m.rack == first.rack for m in members) else ""
        self._zone = first.zone if all(m.zone == first.zone for m in members) else ""

    def level(self, node: Node) -> LocalityLevel:
        if len(self._anchors) == 1 and node.name in self._anchors:
            return (
                LocalityLevel.NVLINK_DOMAIN
                if node.interconnect is Interconnect.NVLINK
                else LocalityLevel.NODE
            )
        if self._domain and node.nvlink_domain == self._domain:
            return LocalityLevel.NVLINK_DOMAIN
        if self._rack and node.rack == self._rack:
            return LocalityLevel.RACK
        if self._zone and node.zone == self._zone:
            return LocalityLevel.ZONE
        return LocalityLevel.CLUSTER


#: prioritize's class key is ``(class << 16) | free GPUs``; relative to a gang it also carries the
#: node's locality level and the gang's replicas already on it
_LEVEL_SHIFT = 40
_PLACED_SHIFT = 44


def _level_code(level: LocalityLevel) -> int:
    """A level as key bits: CLUSTER is 0, so names outside every group need no entry."""
    return (LocalityLevel.CLUSTER - level) << _LEVEL_SHIFT


def _job_key(job: Job) -> tuple[Any, ...]:
    return (job.name, job.model, job.dataset, job.batch_size, job.precision, job.params, job.flops_per_sample)


def _category(node: Node, free: int, g: int, want_type: str | None, allowed: frozenset[str]) -> str:
    """The rejection category, checked in the same order as ``check_node``."""
    if node.capacity_for_jobs <= 0 and node.gpus <= 0:
        return R_NO_GPUS
    if want_type is not None and node.gpu_type != want_type:
        return R_GPU_TYPE
    if allowed and node.gpu_type not in allowed:
        return R_NOT_ALLOWED
    if not node.schedulable:
        return R_CORDONED
    if node.gpus < g:
        return R_TOO_SMALL
    return R_FREE


class _LazyNames(Sequence[str]):
    """A list of names built on first use (the gang plan needs the fitting names only sometimes)."""

    def __init__(self, build: Callable[[], list[str]]) -> None:
        self._build = build
        self._names: list[str] | None = None

    def _get(self) -> list[str]:
        if self._names is None:
            self._names = self._build()
        return self._names

    def __len__(self) -> int:
        return len(self._get())

    def __getitem__(self, i: Any) -> Any:
        return self._get()[i]

    def __iter__(self) -> Any:
        return iter(self._get())


def _same_reason(names: list[bytes], reason: str) -> bytes:
    """The entries ``"name":"reason",`` of a JSON object, each ending in a comma, for names needing no
    escaping that share one reason: one join with the reason as the separator."""
    tail = b'":' + orjson.dumps(reason) + b","
    return b'"' + (tail + b'"').join(names) + tail


def _describe_plan(plan: Allocation, nodes: Mapping[str, Node]) -> str:
    names = plan.nodes
    shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
    members = [nodes[n] for n in names if n in nodes]
    level = locality_level(plan, nodes)
    if level is LocalityLevel.NVLINK_DOMAIN and len(members) > 1 and members[0].nvlink_domain:
        return f"NVLink domain {members[0].nvlink_domain} (nodes {shown})"
    if level is LocalityLevel.RACK and members:
        return f"rack {members[0].rack} (nodes {shown})"
    return f"node{'s' if len(names) > 1 else ''} {shown}"


__all__ = ["GPU_RESOURCE", "Decider", "FilterOutcome", "PodContext", "Weights"]
