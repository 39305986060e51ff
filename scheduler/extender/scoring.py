"""Prioritize: a 0..10 score per candidate node, the weighted mean of three 0..10 terms.

- throughput: 10 x predicted throughput of the job with this node in its placement / the best
  candidate's (one oracle call per request for all distinct placement shapes); left out without a model;
- locality: how tight the gang stays with this node added to its bound replicas (or the pod's planned
  node), by the core's ``locality_level``: same NVLink domain or node 10, rack 6, zone 3, else 0;
- packing (best fit): 10 x (1 - GPUs left free on the node after this pod / node's GPUs).

Shell-side logic without I/O of its own (the oracle is called through ``ThroughputOracle``); callers
hold the cache's lock. Nodes alike in every input of the three terms share a score class: the node's
class key (``nodes.NodeIndex``) plus, when the gang's placement matters, its locality level and the
gang's replicas on it; each class is scored once. Nodes unknown to the cache are keyed by the request's
Node objects, else score 0.

Memo tables, one invalidation rule each:
- ``_predictions`` (job, shape) -> throughput: least recently used entries dropped past
  ``predict_cache_size``; nothing else (a prediction is a function of the job and the shape);
- ``_scores`` (pod score signature, node layout version, classes present) -> score per class: cleared at
  1,024 entries; an answer that left out a failed prediction is never stored;
- ``_levels`` (node layout version, anchors) -> locality bits per node name: cleared at 256 entries;
- ``_shapes`` (node class, GPUs, replicas) -> placement shape of a gang with nothing bound
  yet: pure, cleared at 4,096 entries.
"""

from __future__ import annotations

import logging
import math
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import repeat
from operator import or_
from typing import Any

from scheduler import metrics
from scheduler.core.placement import LocalityLevel, locality_level, spread_of
from scheduler.core.protocols import ThroughputOracle
from scheduler.core.types import Allocation, Interconnect, Node, PlacementShape
from scheduler.extender.context import PodContext, job_key, score_signature
from scheduler.extender.filtering import request_node
from scheduler.extender.nodes import FREE_MASK, NodeIndex, class_of
from scheduler.settings import Settings

log = logging.getLogger(__name__)

_LOCALITY_SCORE = {
    LocalityLevel.NVLINK_DOMAIN: 10.0,
    LocalityLevel.NODE: 10.0,
    LocalityLevel.RACK: 6.0,
    LocalityLevel.ZONE: 3.0,
    LocalityLevel.CLUSTER: 0.0,
}
#: a score class key relative to a gang: the node's class key, its locality level and the gang's
#: replicas on it, in one int
_LEVEL_SHIFT = 40
_PLACED_SHIFT = 44
#: score class key -> a node of that class and its free GPUs
_Reps = dict[Any, tuple[Node, int]]


@dataclass(slots=True)
class _Terms:
    """Which terms apply to one pod, and what locality is measured against."""

    anchors: list[str]
    use_loc: bool
    use_tp: bool
    spread_matters: bool  # the gang's replicas already on a node change the shape it would get

    @property
    def relative(self) -> bool:
        """Whether a node's score depends on where it stands relative to the anchors."""
        return bool(self.anchors) and (self.use_loc or self.spread_matters)


class Scorer:
    """Prioritize over a ``NodeIndex`` and a ``ThroughputOracle`` (see the module docstring)."""

    def __init__(self, index: NodeIndex, oracle: ThroughputOracle | None, settings: Settings) -> None:
        self._index = index
        self._oracle = oracle
        #: the weights of the throughput, locality and packing terms (any non-negative scale; normalised)
        self._weights = (
            settings.extender_weight_throughput,
            settings.extender_weight_locality,
            settings.extender_weight_packing,
        )
        self._predictions: OrderedDict[tuple[Any, ...], float] = OrderedDict()
        self._predict_cache_size = settings.extender_predict_cache_size
        self._scores: dict[tuple[Any, ...], dict[Any, int]] = {}
        self._levels: dict[tuple[Any, ...], dict[str, int]] = {}
        self._shapes: dict[tuple[Any, ...], PlacementShape] = {}
        self._rows_hit = self._rows = 0  # predictions asked for since start, and how many the memo held

    def __call__(
        self, ctx: PodContext, names: Sequence[str], node_objects: Sequence[Any] | None
    ) -> tuple[list[Any], dict[Any, int]]:
        """A score class per name and a score per class: ``names[i]`` scores ``scores[keys[i]]``."""
        if ctx.gpus <= 0:  # not ours: neutral
            return [None] * len(names), {None: 0}
        nodes = self._index.cache.nodes
        w_tp, w_loc, _ = self._weights
        anchors = ctx.anchors(nodes)
        use_tp = w_tp > 0 and ctx.job is not None and self._oracle is not None
        terms = _Terms(anchors, bool(anchors) and w_loc > 0, use_tp, use_tp and bool(ctx.placed))
        keys: list[Any] = self._index.keys(names)
        reps: _Reps = {}
        known = None not in keys
        if not known:
            keys = self._request_keys(names, node_objects, keys, reps)
        if terms.relative:
            keys = self._relative_keys(ctx, terms, names, keys, reps, known)
        memo_key = (score_signature(ctx, anchors), self._index.cache.nodes_version, frozenset(keys))
        scores = self._scores.get(memo_key) if known else None
        if scores is not None:
            return keys, scores
        i = -1
        for key in dict.fromkeys(keys):  # each class's first name, in order
            i = keys.index(key, i + 1)
            if key is not None and key not in reps:
                reps[key] = (nodes[names[i]], key & FREE_MASK)
        scores, complete = self._score_classes(ctx, terms, reps)
        scores[None] = 0
        if known and complete:
            if len(self._scores) >= 1024:
                self._scores.clear()
            self._scores[memo_key] = scores
        return keys, scores

    def _request_keys(
        self, names: Sequence[str], node_objects: Sequence[Any] | None, keys: list[Any], reps: _Reps
    ) -> list[Any]:
        """Key the names the cache does not know by the request's Node objects (None: neither knows)."""
        keys = list(keys)
        for i in [i for i, k in enumerate(keys) if k is None]:
            node = request_node(node_objects, i)
            if node is None:
                continue
            f = node.gpus if node.schedulable else 0
            keys[i] = key = ("request", class_of(node), node.nvlink_domain, f)
            reps.setdefault(key, (node, f))
        return keys

    def _relative_keys(
        self, ctx: PodContext, terms: _Terms, names: Sequence[str], keys: list[Any], reps: _Reps, known: bool
    ) -> list[Any]:
        """Fold each node's locality level (and the gang's replicas on it) into its key."""
        bits = self._level_bits(terms.anchors)
        placed = {n: r << _PLACED_SHIFT for n, r in ctx.placed.items()} if terms.spread_matters else {}
        if known:
            keys = list(map(or_, keys, map(bits.get, names, repeat(0))))
            return list(map(or_, keys, map(placed.get, names, repeat(0)))) if placed else keys
        # some names come from the request: their keys are tuples, the relation added as fields
        out: list[Any] = []
        for name, key in zip(names, keys, strict=True):
            if type(key) is tuple:
                node, f = reps[key]
                level = locality_level(
                    [*terms.anchors, node.name], {**self._index.cache.nodes, node.name: node}
                )
                key = (*key, level, 0)
                reps.setdefault(key, (node, f))
            elif key is not None:
                key = key | bits.get(name, 0) | placed.get(name, 0)
            out.append(key)
        return out

    def _level_bits(self, anchors: list[str]) -> dict[str, int]:
        """Node name -> its locality level relative to the anchors (the core's ``locality_level``) as
        key bits; names absent are at cluster level. Nodes that share the anchors' NVLink domain, rack or
        zone are grouped by where they are, and the level is asked once per group."""
        memo_key = (self._index.cache.nodes_version, tuple(anchors))
        hit = self._levels.get(memo_key)
        if hit is not None:
            return hit
        nodes = self._index.cache.nodes
        groups = self._index.groups()
        first = nodes[anchors[0]]
        near: dict[str, None] = dict.fromkeys(anchors)
        for kind, label in (("zone", first.zone), ("rack", first.rack), ("domain", first.nvlink_domain)):
            if label:
                near.update(dict.fromkeys(groups.get((kind, label), ())))
        anchor_set = set(anchors)
        by_place: dict[tuple[Any, ...], int] = {}
        bits: dict[str, int] = {}
        for name in near:
            node = nodes[name]
            place = (node.nvlink_domain, node.rack, node.zone, name if name in anchor_set else "")
            code = by_place.get(place)
            if code is None:
                level = locality_level([*anchors, name], nodes)
                code = by_place[place] = (LocalityLevel.CLUSTER - level) << _LEVEL_SHIFT
            if code:
                bits[name] = code
        if len(self._levels) >= 256:
            self._levels.clear()
        self._levels[memo_key] = bits
        return bits

    def _score_classes(self, ctx: PodContext, terms: _Terms, reps: _Reps) -> tuple[dict[Any, int], bool]:
        """A score per class; and whether every term asked for was computed (False: a prediction failed
        and the throughput term was left out, so the answer must not be memoised)."""
        w_tp, w_loc, w_pack = self._weights
        g = ctx.gpus
        tp: dict[Any, float] | None = None
        complete = True
        if terms.use_tp:
            shapes = {key: self._shape(ctx, node, f) for key, (node, f) in reps.items()}
            tp, complete = self._throughput_term(ctx, shapes)
        total_w = w_pack + (w_loc if terms.use_loc else 0.0) + (w_tp if tp is not None else 0.0)
        out: dict[Any, int] = {}
        for key, (node, f) in reps.items():
            if total_w <= 0 or node.gpus <= 0:
                out[key] = 0
                continue
            s = w_pack * 10.0 * (1.0 - max(0, f - g) / node.gpus)
            if terms.use_loc:
                s += w_loc * _LOCALITY_SCORE[_level_of(key)]
            if tp is not None:
                s += w_tp * tp[key]
            out[key] = min(10, max(0, math.floor(s / total_w + 0.5)))
        return out, complete

    def _shape(self, ctx: PodContext, node: Node, free: int) -> PlacementShape:
        """The placement shape the gang has if this pod goes on ``node``: bound replicas stay where they
        are; the rest of the unplaced replicas go on ``node`` while it has room, the remainder on further
        nodes of the same size (counted, not named)."""
        g = ctx.gpus
        rest = ctx.unplaced
        here = min(rest, max(1, free // g)) if g > 0 else 1
        memo_key: tuple[Any, ...] | None = None
        if not ctx.placed:  # nothing bound yet: the shape depends on the node's class, not its name
            memo_key = (class_of(node), g, rest, here)
            hit = self._shapes.get(memo_key)
            if hit is not None:
                return hit
        per_node = dict(ctx.placed)
        per_node[node.name] = per_node.get(node.name, 0) + here
        rest -= here
        alloc = Allocation.of(ctx.pod.job or ctx.pod.key, node.gpu_type, g, per_node)
        nodes = self._index.cache.nodes
        shape = spread_of(alloc, nodes if node.name in nodes else {**nodes, node.name: node})
        if rest > 0:
            per_extra = max(1, node.gpus // g)
            shape = PlacementShape(
                gpu_type=node.gpu_type,
                num_gpus=shape.num_gpus + rest * g,
                num_nodes=shape.num_nodes + -(-rest // per_extra),
                gpus_per_node=max(shape.gpus_per_node, min(rest, per_extra) * g),
                interconnect=Interconnect.PCIE if not node.nvlink_domain else shape.interconnect,
                network_gbps=shape.network_gbps,
            )
        if memo_key is not None:
            if len(self._shapes) > 4096:
                self._shapes.clear()
            self._shapes[memo_key] = shape
        return shape

    def _throughput_term(
        self, ctx: PodContext, shapes: Mapping[Any, PlacementShape]
    ) -> tuple[dict[Any, float] | None, bool]:
        """10 x predicted throughput / the best candidate's, per class (None when nothing is
        predictable); and False when the prediction failed."""
        job = ctx.job
        assert job is not None
        jk = job_key(job)
        values = self._predict(job, {(*jk, shape): shape for shape in shapes.values()})
        if values is None:
            return None, False
        raw = {key: values.get((*jk, shape), 0.0) for key, shape in shapes.items()}
        best = max(raw.values(), default=0.0)
        if best <= 0:
            return None, True
        return {key: 10.0 * max(0.0, v) / best for key, v in raw.items()}, True

    def _predict(
        self, job: Any, by_key: Mapping[tuple[Any, ...], PlacementShape]
    ) -> dict[tuple[Any, ...], float] | None:
        """Memoised predictions for every key; the misses go to the oracle in one batch (None: it failed)."""
        out: dict[tuple[Any, ...], float] = {}
        misses: list[tuple[tuple[Any, ...], PlacementShape]] = []
        memo = self._predictions
        for key, shape in by_key.items():
            v = memo.get(key)
            if v is None:
                misses.append((key, shape))
            else:
                memo.move_to_end(key)
                out[key] = v
        self._count(len(out), len(misses))
        if misses:
            assert self._oracle is not None
            try:
                values = self._oracle.throughput([(job, s) for _, s in misses])
            except Exception as exc:  # counted and logged; scoring goes on by packing
                metrics.EXTENDER_ERRORS.labels("predict").inc()
                log.warning("throughput prediction failed for %s: %s; scoring by packing only", job.name, exc)
                return None
            for (key, _), v in zip(misses, values, strict=False):
                val = float(v) if v is not None and math.isfinite(float(v)) else 0.0
                memo[key] = out[key] = val
            while len(memo) > self._predict_cache_size:
                memo.popitem(last=False)
        return out

    def _count(self, hits: int, misses: int) -> None:
        """The predictor metrics: oracle calls, rows hit and missed, hit ratio since start."""
        metrics.EXTENDER_PREDICTOR_CALLS.inc(1 if misses else 0)
        metrics.EXTENDER_PREDICTOR_ROWS.labels("hit").inc(hits)
        metrics.EXTENDER_PREDICTOR_ROWS.labels("miss").inc(misses)
        self._rows_hit, self._rows = self._rows_hit + hits, self._rows + hits + misses
        if self._rows:
            metrics.EXTENDER_PREDICTOR_HIT_RATIO.set(self._rows_hit / self._rows)


def _level_of(key: Any) -> LocalityLevel:
    """The locality level folded into a score class key (cluster when none was)."""
    if type(key) is tuple:
        return LocalityLevel(key[-2]) if len(key) == 6 else LocalityLevel.CLUSTER
    return LocalityLevel(LocalityLevel.CLUSTER - ((key >> _LEVEL_SHIFT) & 0xF))
