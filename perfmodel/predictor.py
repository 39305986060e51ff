"""The throughput predictor: fitted scaling model x learned correction, physical guards, batch API, cache.

For a job on ``n`` GPUs at per-GPU batch ``b`` (global batch / n), the predicted iteration time is

    time = (compute time at b + ring all-reduce time) x exp(forest(features))

where the first factor is ``perfmodel.features``' scaling model under the model file's fitted ``Physics``
(a GPU is seen through its datasheet: peak FLOP/s at the job's precision, memory bandwidth, links) and
``forest`` is a gradient-boosted tree ensemble (XGBoost, trained by ``perfmodel.train``) on
``log(measured / modelled time)``. The trees learn a correction factor rather than the time itself, so
unseen GPUs, GPU counts and placements follow the scaling model's physics instead of a tree's flat
extrapolation. Physical guards then hold for multi-GPU rows, with ``t1`` the prediction for the
same job on one GPU at the same per-GPU batch: data parallelism never scales better than linearly
(``time >= t1``); an iteration never takes less than its gradient all-reduce at the slowest link's line
rate (``time >= Design.sync_floor``: the learned correction cannot cancel a slow network it never saw,
which sent 8-GPU jobs over two servers of the simulator's K80 pool to 13x their true speed); and a job
inside one NVLink node is never slower in total than on one of its GPUs (``time <= n x t1``), except
inside a measured in-node curve that falls (``MeasuredInNode.follows``, where the in-node envelope does
not apply either): the table measured such drops, and holding the guard there cost the benchmark's
random hold-out about a point of MRE.
Cross-node correction: a row across nodes gets the forests' correction of the same row at the nearest
node network (in log) that the measured table ran its GPU type and software stack across nodes on
(``MeasuredInNode.reference_links``; its own network where it ran none), times the scaling model at its
own network. The trees see the network only through the all-reduce's modelled time and share, and on a
network its GPU type and stack never ran on they answer from other clusters' rows: the research stack's
V100s ran across nodes at 10 Gb/s only, and the trees' slow-down of BERT over two V100 servers grew from
x1.7 at 10 Gb/s to x3.2 at 100 Gb/s, so a faster network barely helped (the simulator's questions,
``bench/perfmodel_sim_rows.py``: the K80/V100 speed ratio of its > 4-GPU jobs off x2.33 from the truth,
P100/V100 x1.65; read at the measured network x1.29 and x1.06). On every training row the rule is the
identity, so training is unchanged.
Serving evaluates exactly the functions training does: each batch of rows becomes a matrix of
``Resolved.nums``, then ``features.design_of_nums`` and ``LearnedModel.times`` (scaling model,
features, forests, the measured-anchor blend of ``perfmodel.anchor`` where a predictor has anchors --
``Predictor.load`` builds them from the shipped table; ``anchors=False`` leaves them out -- and the
guards); there is no second copy of any of them here.

In-node envelope: a row on ``n`` > 1 GPUs of one node to which the rule applies is computed together
with the same job (same global batch) on 1 .. n-1 GPUs of the same GPU, interconnect and node, and gets the
highest of those throughputs, capped by linear scaling from the lowest 1-GPU time among per-GPU batches
B/n .. B/1; so there more GPUs never predict a lower total throughput. The rule (``Predictor(envelope=
"auto")``, the default; ``MeasuredInNode``): the envelope is a prior for extrapolation. Where the training
table measured the job's model on that GPU type and link inside one node on ``n`` GPUs or more, and those
measurements themselves fall as GPUs are added at a fixed global batch (by >= 10% somewhere), the learned
model has seen the real curve and answers as it is, drops included; every other row on several GPUs of
one node gets the envelope. ``envelope="always"`` applies it to every such row, ``"never"`` nowhere.
Across nodes there is no envelope: a slow network may make more GPUs slower, and the scaling model says
so. Samples/s = iterations/s x global batch.

The interval ``[low, high]`` is the prediction times the 10th / 90th percentile of out-of-fold error
ratios from training, widened 2x (in log space) for low-confidence rows (model or GPU not in the zoo or
catalogue) and placements larger than any training row. The model file (``perfmodel/data/predictor.json``)
holds the feature-schema version, the fitted physics, the trees as flat arrays and the quantiles; the
trees are walked here (``Forest``), so serving needs neither xgboost's import time nor its per-call
overhead. A file of another schema, or a corrupt one, is refused with ``ModelFileError``.
``Predictor.predict`` caches results per (job features, placement) in a bounded LRU; uncached rows are
computed together, in one numpy pass over numeric tables of the checked job and placement sides. The
envelope's extra rows that coincide (same job, node class and GPU count) with each other or with rows of
the batch are computed once.

Pure apart from ``Predictor.load`` (reads the model file).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from perfmodel import llm
from perfmodel.anchor import ANCHOR_WEIGHT, Anchors
from perfmodel.errors import InvalidInputError, ModelFileError
from perfmodel.features import (
    DEFAULT_PHYSICS,
    FEATURE_NAMES,
    FEATURE_SCHEMA_VERSION,
    HW_COLUMNS,
    JOB_COLUMNS,
    LINK_NVLINK,
    NUM_COLUMNS,
    STACKS,
    Design,
    HardwareFeatures,
    HardwarePart,
    JobFeatures,
    JobPart,
    Physics,
    Resolved,
    combine,
    design_of,
    design_of_nums,
    resolve_hw,
    resolve_job,
)
from perfmodel.gpus import CANONICAL_TYPES, gpu_spec
from perfmodel.measurements import Measurement, read_table
from perfmodel.truth import TABLE_NAME

log = logging.getLogger(__name__)


def _load_native_walk() -> Callable[..., None] | None:
    """The compiled tree walk (``perfmodel/_forest.c``, built by setup.py where a C compiler is
    available), or None: then ``Forest`` walks its trees with numpy."""
    try:
        from perfmodel._forest import walk
    except ImportError:  # pragma: no cover - depends on how the package was built
        log.info("perfmodel._forest is not built: the predictor walks its trees with numpy")
        return None
    return walk


_native_walk = _load_native_walk()

MODEL_FILE = "predictor.json"
FloatArray = npt.NDArray[np.float64]
_Key = tuple[object, ...]
# Where the in-node envelope applies (``Predictor.envelope``): "auto" = wherever a row on several GPUs of
# one node is not inside a measured in-node curve that falls (``MeasuredInNode.follows``), "always" =
# every row on several GPUs of one node, "never" = nowhere.
ENVELOPE_MODES = ("auto", "always", "never")
# A measured in-node curve "falls" when, at one global batch, some GPU count's measured throughput is
# below this fraction of the best on fewer GPUs (10%: above measurement noise; the shipped table's
# falling cells drop to 0.47-0.89, its rising ones stay >= 0.99).
FALL_RATIO = 0.9


class MeasuredInNode:
    """What the training table measured inside one node, per cell = (model, dataset, GPU type, NVLink or
    not): the largest GPU count measured in one node (``largest``, 0 where none), and the deepest fall
    (``floor``): over the cell's global batches measured on several GPU counts, the lowest ratio of a
    count's throughput to the best on fewer GPUs at that batch (1.0 when it never falls).

    The in-node envelope's rule (``follows``): a one-node row on ``n`` GPUs whose cell was measured in one
    node on ``n`` GPUs or more, and whose measurements fall (``floor < FALL_RATIO``), is inside a measured
    curve that really drops as GPUs are added; the learned model, trained on it, answers such a row as it
    is, drops included. Every other row on several GPUs of one node -- an unmeasured model x GPU type, a
    parameters/FLOPs-only job, an unknown GPU, more GPUs than measured, or a cell whose measurements only
    rise -- gets the envelope (there a fall can only be the learned model's noise). "NVLink" is the link
    the row really uses: ``nvlink`` on a GPU type without NVLink counts as PCIe, as in
    ``features.resolve_hw``.

    Across nodes it records the node networks each GPU type's rows ran on, per software stack
    (``links``), for ``reference_links``: the link at which the learned correction of a cross-node row is
    read (the module docstring's "cross-node correction"). Pure.
    """

    def __init__(self, measurements: Sequence[Measurement]) -> None:
        groups: dict[tuple[str, str], int] = {}
        types = {t: i for i, t in enumerate(CANONICAL_TYPES)}
        cells: dict[tuple[int, int, int], int] = {}
        sweeps: dict[tuple[int, int, int, int], dict[int, list[float]]] = {}
        links: dict[tuple[int, int], set[float]] = {}
        for m in measurements:
            col = types.get(m.gpu_type)
            if col is not None and m.num_nodes > 1:
                links.setdefault((col, STACKS[m.stack]), set()).add(math.log(m.network_gbps / 8.0))
            if m.num_nodes != 1 or col is None:
                continue
            g = groups.setdefault((m.model, m.dataset), len(groups))
            nvl = int(m.interconnect == "nvlink" and gpu_spec(m.gpu_type).nvlink_gbs > 0)
            cells[(g, col, nvl)] = max(cells.get((g, col, nvl), 0), m.num_gpus)
            sweeps.setdefault((g, col, nvl, m.batch_size), {}).setdefault(m.num_gpus, []).append(
                m.samples_per_s
            )
        self._groups = groups
        self._types = types
        # Per (type column, stack code): the log link bandwidths (GB/s) its cross-node rows ran on.
        self.links = {key: np.asarray(sorted(v)) for key, v in links.items()}
        # Rows: groups, then one for anything else; columns: catalogued types, then anything else.
        self.largest = np.zeros((len(groups) + 1, len(types) + 1, 2), dtype=np.float64)
        self.floor = np.ones_like(self.largest)
        for (g, col, nvl), n in cells.items():
            self.largest[g, col, nvl] = n
        for (g, col, nvl, _), by_n in sweeps.items():
            # Several sources may measure one configuration: their median.
            vals = [float(np.median(by_n[n])) for n in sorted(by_n)]
            for k in range(1, len(vals)):
                self.floor[g, col, nvl] = min(self.floor[g, col, nvl], vals[k] / max(vals[:k]))

    def group_index(self, model: str, dataset: str) -> int:
        """Row of the tables for a (model, dataset); the last row (nothing measured) when never measured."""
        return self._groups.get((model, dataset), len(self._groups))

    def type_index(self, gpu_type: str, low_confidence: bool = False) -> int:
        """Column of the tables for a GPU type; the last column (nothing measured) for an uncatalogued or
        low-confidence one."""
        return len(self._types) if low_confidence else self._types.get(gpu_type, len(self._types))

    def follows(
        self,
        group: npt.NDArray[np.intp],
        type_col: npt.NDArray[np.intp],
        nvlink: npt.NDArray[np.bool_],
        num_gpus: FloatArray,
    ) -> npt.NDArray[np.bool_]:
        """Per one-node row: inside a measured in-node curve that falls (the model answers it as it is)?"""
        cell = (group, type_col, nvlink.astype(np.intp))
        out: npt.NDArray[np.bool_] = (num_gpus <= self.largest[cell]) & (self.floor[cell] < FALL_RATIO)
        return out

    def reference_links(
        self, type_col: npt.NDArray[np.intp], stack: FloatArray, log_link: FloatArray
    ) -> FloatArray:
        """Per cross-node row (type column, stack code, log link GB/s): the log link its learned correction is
        read at -- the nearest (in log) that the table measured that GPU type and stack across nodes on, or
        the row's own where it measured none."""
        out = log_link.copy()
        for (col, code), measured in self.links.items():
            rows = np.flatnonzero((type_col == col) & (stack == code))
            if rows.size:
                near = np.abs(log_link[rows, None] - measured[None, :]).argmin(axis=1)
                out[rows] = measured[near]
        return out

    def cell(self, model: str, dataset: str, gpu_type: str, nvlink: bool) -> tuple[int, float]:
        """(largest GPU count measured in one node, deepest fall) of a cell; (0, 1.0) when unmeasured."""
        at = (self.group_index(model, dataset), self.type_index(gpu_type), int(nvlink))
        return int(self.largest[at]), float(self.floor[at])


@dataclass(frozen=True, slots=True)
class Predictions:
    """Predictions for a batch of rows, in row order (plain lists, one entry per row).

    ``low``/``high`` bound ``samples_per_s`` (the ~80% interval); ``iters_low``/``iters_high`` bound
    ``iters_per_s``. ``low_confidence`` marks rows whose model or GPU was not known to the zoo/catalogue.
    """

    samples_per_s: list[float]
    iters_per_s: list[float]
    low: list[float]
    high: list[float]
    iters_low: list[float]
    iters_high: list[float]
    low_confidence: list[bool]

    def __len__(self) -> int:
        return len(self.samples_per_s)


# Lanes (rows x trees) per forest pass: the walk's index arrays stay below glibc's 128 KiB mmap threshold
# (12,800 x 8 bytes = 100 KiB; 320 rows of 40 trees), so its temporaries come from the heap instead of
# fresh, page-faulting mappings (525 rows of the speed benchmark: 1.05 ms in one pass, 0.78 ms in two).
_FOREST_LANES = 12_800


class Forest:
    """A tree ensemble as flat arrays, evaluated for many rows at once with numpy.

    Every node has a global index; the two children of an inner node sit side by side (``child`` is the
    left one, the right one is ``child + 1``), and a leaf is its own child with a NaN threshold (no
    value compares ``>=`` NaN, not even an infinite one), so
    ``depth`` steps of ``node = child + (x[feature] >= threshold)`` reach every row's leaf in every tree
    (XGBoost goes left when ``x < threshold``; features here are never missing).
    """

    def __init__(
        self,
        roots: npt.NDArray[np.intp],
        feature: npt.NDArray[np.intp],
        threshold: npt.NDArray[np.float32],
        child: npt.NDArray[np.intp],
        value: FloatArray,
        depth: int,
        base: float,
    ) -> None:
        # Contiguous arrays of exactly these item types: the compiled walk reads their raw buffers.
        self.roots = roots = np.ascontiguousarray(roots, dtype=np.intp)
        self.feature = feature = np.ascontiguousarray(feature, dtype=np.intp)
        self.threshold = threshold = np.ascontiguousarray(threshold, dtype=np.float32)
        self.child = child = np.ascontiguousarray(child, dtype=np.intp)
        self.value = value = np.ascontiguousarray(value, dtype=np.float64)
        self.depth = depth
        self.base = base
        # The compiled walk trusts the node arrays: check them once (roots, every inner node's child pair
        # and every leaf's self-reference inside the arrays, non-negative features; the feature count is
        # checked per call).
        n = feature.size
        if not (threshold.size == child.size == value.size == n) or (
            roots.size and (roots.min() < 0 or roots.max() >= n)
        ):
            raise ValueError("forest node arrays of different lengths")
        inner = ~np.isnan(threshold)
        if n and (
            child.min() < 0 or child.max() >= n or (child[inner] + 1).max(initial=0) >= n or feature.min() < 0
        ):
            raise ValueError("forest child or feature index out of range")
        self._features = int(feature.max(initial=-1)) + 1
        self.native = _native_walk is not None

    @staticmethod
    def from_trees(trees: Sequence[dict[str, list[Any]]], base: float) -> Forest:
        """Build from per-tree dicts with ``left``, ``right``, ``feature``, ``threshold``, ``value``
        (``left[i] == -1`` marks a leaf); raises ``ValueError`` on inconsistent arrays."""
        roots: list[int] = []
        feat: list[int] = []
        thr: list[float] = []
        child: list[int] = []
        val: list[float] = []
        depth = 0
        for t in trees:
            n = len(t["left"])
            if not (len(t["right"]) == len(t["feature"]) == len(t["threshold"]) == len(t["value"]) == n):
                raise ValueError("tree arrays of different lengths")
            if n == 0:
                raise ValueError("empty tree")
            # Renumber breadth-first so that siblings are adjacent: (old index, new index, depth).
            roots.append(len(feat))
            queue = [(0, len(feat), 0)]
            feat.append(0)
            thr.append(0.0)
            child.append(0)
            val.append(0.0)
            seen = 1
            while queue:
                nxt = []
                for old, new, d in queue:
                    li, ri = int(t["left"][old]), int(t["right"][old])
                    val[new] = float(t["value"][old])
                    depth = max(depth, d)
                    if li == -1:
                        feat[new], thr[new], child[new] = 0, math.nan, new
                        continue
                    if not (0 <= li < n and 0 <= ri < n):
                        raise ValueError("child index out of range")
                    seen += 2
                    if seen > n:
                        raise ValueError("tree is not a tree (a node reached twice)")
                    feat[new], thr[new], child[new] = (
                        int(t["feature"][old]),
                        float(t["threshold"][old]),
                        len(feat),
                    )
                    for c in (li, ri):
                        nxt.append((c, len(feat), d + 1))
                        feat.append(0)
                        thr.append(0.0)
                        child.append(0)
                        val.append(0.0)
                queue = nxt
        return Forest(
            np.asarray(roots, dtype=np.intp),
            np.asarray(feat, dtype=np.intp),
            # XGBoost compares float32 features with float32 thresholds: do the same.
            np.asarray(thr, dtype=np.float32),
            np.asarray(child, dtype=np.intp),
            np.asarray(val, dtype=np.float64),
            depth,
            base,
        )

    def predict(self, x: FloatArray) -> FloatArray:
        """Sum of leaf values plus the base, for each row of ``x`` (rows x features).

        Walked by the compiled ``perfmodel._forest`` when it was built and ``native`` is on, else by
        ``predict_numpy``: the same leaves (both compare float32 features with float32 thresholds); the
        sums may differ in the last bits (summation order).
        """
        if not self.native or _native_walk is None:
            return self.predict_numpy(x)
        rows, nf = x.shape
        if nf < self._features:
            raise ValueError(f"forest needs {self._features} features, got {nf}")
        xf = np.ascontiguousarray(x, dtype=np.float32)
        out: FloatArray = np.empty(rows, dtype=np.float64)
        _native_walk(
            xf,
            nf,
            self.roots,
            self.feature,
            self.threshold,
            self.child,
            self.value,
            self.depth,
            self.base,
            out,
        )
        return out

    def predict_numpy(self, x: FloatArray) -> FloatArray:
        """``predict`` walked with numpy (the fallback where the compiled walk is not built)."""
        step = max(16, _FOREST_LANES // max(1, self.roots.size))
        if x.shape[0] > step:
            return np.concatenate([self._predict(x[i : i + step]) for i in range(0, x.shape[0], step)])
        return self._predict(x)

    def _predict(self, x: FloatArray) -> FloatArray:
        rows, nf = x.shape
        flat = x.astype(np.float32).ravel()
        # One lane per (row, tree), row-major, as flat arrays (no broadcasting inside the loop).
        node = np.tile(self.roots, rows)
        row_off = np.repeat(np.arange(0, rows * nf, nf, dtype=np.intp), self.roots.size)
        feature, threshold, child = self.feature, self.threshold, self.child
        for _ in range(self.depth):
            at = feature.take(node)
            at += row_off
            right = flat.take(at) >= threshold.take(node)
            node = child.take(node)
            node += right
        out: FloatArray = self.value.take(node).reshape(rows, self.roots.size).sum(axis=1) + self.base
        return out


@dataclass(frozen=True, slots=True)
class LearnedModel:
    """The learned part: the scaling model's fitted ``Physics`` and one forest correcting it (see the
    module docstring)."""

    forest: Forest
    physics: Physics = DEFAULT_PHYSICS
    # Second correction, for GPU types the training table measured (``seen_types``): it may read the GPU's
    # datasheet figures, so it only applies where it has seen the GPU (elsewhere it would extrapolate).
    gpu_forest: Forest | None = None
    seen_types: frozenset[str] = frozenset()

    def seen_of(self, rows: Sequence[Resolved]) -> npt.NDArray[np.bool_]:
        """Per row: was its GPU type measured in training (``gpu_forest`` applies)?"""
        return np.asarray(
            [not r.spec.low_confidence and r.spec.gpu_type in self.seen_types for r in rows], dtype=np.bool_
        )

    def times_of(
        self, rows: Sequence[Resolved], anchored: tuple[FloatArray, FloatArray] | None = None
    ) -> tuple[FloatArray, FloatArray]:
        """``times`` of resolved rows, row by row: their ``Design`` under this model's physics."""
        return self.times(design_of(rows, self.physics), anchored, self.seen_of(rows))

    def times(
        self,
        d: Design,
        anchored: tuple[FloatArray, FloatArray] | None = None,
        seen: npt.NDArray[np.bool_] | None = None,
        follows: npt.NDArray[np.bool_] | None = None,
    ) -> tuple[FloatArray, FloatArray]:
        """(predicted iteration time, predicted 1-GPU time at the same per-GPU batch) per row.

        ``anchored`` (from ``perfmodel.anchor.Anchors``) gives measured-anchor times for the rows and their
        1-GPU twins (NaN where none applies); they are blended in log space before the guards. ``seen``
        marks the rows whose GPU type was measured (``gpu_forest`` applies); None = every row.
        ``follows`` marks the rows inside a measured in-node curve that falls (``MeasuredInNode.follows``):
        there the NVLink guard (never slower than one GPU) is left out, as the measurements break it.
        """
        multi = d.num_gpus > 1
        k = d.x.shape[0]
        # One forest pass over the rows and the 1-GPU twins of the multi-GPU rows.
        any_multi = bool(multi.any())
        x = np.concatenate((d.x, d.x_single[multi])) if any_multi else d.x
        corr = self.forest.predict(x)
        if self.gpu_forest is not None:
            on = np.ones(k, dtype=np.bool_) if seen is None else seen
            on = np.concatenate((on, on[multi])) if any_multi else on
            if on.all():
                corr += self.gpu_forest.predict(x)
            elif on.any():
                corr[on] += self.gpu_forest.predict(x[on])
        t = (d.compute + d.sync) * np.exp(corr[:k])
        t1 = t.copy()
        if any_multi:
            t1[multi] = d.compute[multi] * np.exp(corr[k:])
        if anchored is not None:
            for ours, anchor in ((t, anchored[0]), (t1, anchored[1])):
                ok = ~np.isnan(anchor)
                ours[ok] = np.exp((1 - ANCHOR_WEIGHT) * np.log(ours[ok]) + ANCHOR_WEIGHT * np.log(anchor[ok]))
        if any_multi:
            t[multi] = np.maximum(t[multi], np.maximum(t1[multi], d.sync_floor[multi]))
            nvl = multi & (d.link_class == LINK_NVLINK)
            if follows is not None:
                nvl &= ~follows
            t[nvl] = np.minimum(t[nvl], d.num_gpus[nvl] * t1[nvl])
        return t, t1


@dataclass(frozen=True, slots=True)
class ModelMeta:
    """What a model file says about itself besides the learned parts."""

    schema: str
    feature_names: tuple[str, ...]
    q_low: float
    q_high: float
    max_gpus_seen: int
    trained_on: str
    created_by: str


def _forest_of(raw: Any, path: Path, what: str) -> Forest:
    if not isinstance(raw, dict):
        raise ModelFileError(f"model file {path}: {what} is not an object")
    forest = Forest.from_trees(raw["trees"], float(raw["base_score"]))
    if forest.feature.size and int(forest.feature.max()) >= len(FEATURE_NAMES):
        raise ModelFileError(f"model file {path}: {what} splits on a feature index out of range")
    return forest


def _read_model(path: Path) -> tuple[LearnedModel, ModelMeta]:
    try:
        raw = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ModelFileError(f"model file {path} not found; run `perfsched perfmodel train`") from None
    except (OSError, ValueError) as exc:
        raise ModelFileError(f"model file {path} is not valid JSON ({exc}); retrain it") from exc
    if not isinstance(raw, dict):
        raise ModelFileError(f"model file {path} is not a perfmodel predictor file")
    schema = raw.get("feature_schema")
    if schema != FEATURE_SCHEMA_VERSION:
        raise ModelFileError(
            f"model file {path} was trained for feature schema {schema!r} but this perfmodel uses "
            f"{FEATURE_SCHEMA_VERSION!r}; retrain it with `perfsched perfmodel train`"
        )
    try:
        names = tuple(raw["feature_names"])
        if names != FEATURE_NAMES:
            raise ModelFileError(f"model file {path}: feature names differ from schema {schema}")
        physics = Physics.from_json(raw["physics"]) if "physics" in raw else DEFAULT_PHYSICS
        gpu_forest = _forest_of(raw["gpu_forest"], path, "gpu_forest") if raw.get("gpu_forest") else None
        model = LearnedModel(
            _forest_of(raw["forest"], path, "forest"),
            physics,
            gpu_forest,
            frozenset(str(t) for t in raw.get("seen_types", ())),
        )
        meta = ModelMeta(
            schema=str(schema),
            feature_names=names,
            q_low=float(raw["quantiles"]["low"]),
            q_high=float(raw["quantiles"]["high"]),
            max_gpus_seen=int(raw["max_gpus_seen"]),
            trained_on=str(raw.get("trained_on", "")),
            created_by=str(raw.get("created_by", "")),
        )
    except ModelFileError:
        raise
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise ModelFileError(f"model file {path} is corrupt ({exc!r}); retrain it") from exc
    return model, meta


class _Table:
    """Rows of numbers that grow by appending (capacity doubles); ``rows`` is the filled part."""

    def __init__(self, width: int, dtype: type[np.generic] = np.float64) -> None:
        self._data = np.zeros((16, width), dtype=dtype)
        self.size = 0

    def add(self, values: Sequence[float]) -> int:
        if self.size == self._data.shape[0]:
            self._data = np.concatenate((self._data, np.zeros_like(self._data)))
        self._data[self.size] = values
        self.size += 1
        return self.size - 1

    @property
    def rows(self) -> npt.NDArray[Any]:
        return self._data[: self.size]

    def tail(self, start: int) -> npt.NDArray[Any]:
        """The filled rows from ``start`` on (a view: writable)."""
        return self._data[start : self.size]


# Extra columns of the job table after ``JobPart.nums``: precision column of the placement's peaks, anchor
# group, low confidence, row of ``MeasuredInNode.largest``.
_JN = len(JOB_COLUMNS)
_J_PREC, _J_GROUP, _J_LOW, _J_CURVE = _JN, _JN + 1, _JN + 2, _JN + 3
_J_WIDTH = _JN + 4
# Extra columns of the placement table after ``HardwarePart.nums``: peak TFLOP/s per precision column
# (``HardwarePart.tflops_by_precision``), low confidence, GPU type's column in ``Anchors.measured``, log
# memory bandwidth, placement class (``Predictor._classes``), column of ``MeasuredInNode.largest``.
_HN = len(HW_COLUMNS)
_H_TF = _HN
_NTF = 7
_H_LOW, _H_TYPE, _H_LOGBW, _H_CLASS, _H_CTYPE, _H_SEEN = (_HN + _NTF + i for i in range(6))
_H_WIDTH = _HN + _NTF + 6
# Columns of ``HardwarePart.nums`` read directly: GPUs, nodes, GPUs per node, link class (``LINK_*``).
_H_GPUS, _H_NODES, _H_GPN, _H_LINK = (
    HW_COLUMNS.index(c) for c in ("gpus", "nodes", "gpus_per_node", "link_class")
)
_NUM_WIDTH = len(NUM_COLUMNS)
# Columns of a ``Resolved.nums`` matrix read by the cross-node correction: stack code, link GB/s.
_M_STACK = JOB_COLUMNS.index("stack")
_M_LINK = _JN + HW_COLUMNS.index("link_gbs")


class Predictor:
    """Batch throughput predictor with a per-(job, placement) cache. Build with ``Predictor.load()``.

    The job and placement sides of rows are checked once each and kept as rows of two numeric tables, so
    a batch of uncached rows is two dictionary look-ups per row and then numpy over the whole batch.
    """

    def __init__(
        self,
        model: LearnedModel,
        meta: ModelMeta,
        cache_size: int = 65536,
        anchors: Anchors | None = None,
        in_node_envelope: bool | None = None,
        measured: MeasuredInNode | None = None,
        envelope: str = "auto",
    ) -> None:
        if envelope not in ENVELOPE_MODES:
            raise ValueError(f"envelope must be one of {', '.join(ENVELOPE_MODES)}, got {envelope!r}")
        self.model = model
        self.meta = meta
        self.anchors = anchors
        # The LLM scaling model's constants (the shipped ``llm.FIT``; the accuracy benchmark refits them on
        # each split's training rows).
        self.llm_fit = llm.FIT
        # Without ``measured`` every row extrapolates: "auto" then applies the envelope to every row on
        # several GPUs of one node, like "always".
        self.measured = measured
        self.envelope = envelope
        if in_node_envelope is not None:
            self.in_node_envelope = in_node_envelope
        # Results per row: (samples/s, iterations/s, low, high, low confidence). Keyed by the row itself
        # (cached hashes; a repeated row object is found by identity), the side tables by ``.key`` tuples.
        self._cache: OrderedDict[
            tuple[JobFeatures, HardwareFeatures], tuple[float, float, float, float, bool]
        ] = OrderedDict()
        self._cache_size = cache_size
        # LLM rows: the factor their measured anchor moves the scaling model's answer by (1: none applies).
        self._llm_anchor_factors: dict[tuple[JobFeatures, HardwareFeatures], float] = {}
        self._reset_parts()

    @property
    def in_node_envelope(self) -> bool:
        """Whether the in-node envelope applies anywhere (``envelope`` is not "never")."""
        return self.envelope != "never"

    @in_node_envelope.setter
    def in_node_envelope(self, on: bool) -> None:
        """``True``: the envelope where the rule says ("auto"); ``False``: nowhere ("never")."""
        self.envelope = "auto" if on else "never"

    def envelope_applies(self, job: JobFeatures, hw: HardwareFeatures) -> bool:
        """Whether the in-node envelope applies to this row (``InvalidInputError`` on a bad row): it is on
        several GPUs of one node and, in "auto" mode, not inside a measured in-node curve that falls (see
        ``MeasuredInNode.follows``)."""
        if llm.is_llm_job(job):
            return False  # LLM rows come from perfmodel.llm, which has no in-node envelope
        j, h = self._ids(job, hw)
        # Scalar twin of ``_envelope_rows`` (the online correction asks row by row).
        hrow = self._htab.rows[h]
        n = float(hrow[_H_GPUS])
        if self.envelope == "never" or hrow[_H_NODES] != 1.0 or n <= 1.0:
            return False
        if self.envelope == "always" or self.measured is None:
            return True
        cell = (int(self._jtab.rows[j, _J_CURVE]), int(hrow[_H_CTYPE]), int(hrow[_H_LINK] == LINK_NVLINK))
        return not (n <= self.measured.largest[cell] and self.measured.floor[cell] < FALL_RATIO)

    def _envelope_rows(self, jt: FloatArray, ht: FloatArray) -> npt.NDArray[np.bool_]:
        """Per row (job and placement table rows): does the in-node envelope apply?"""
        n = ht[:, _H_GPUS]
        if self.envelope == "never":
            return np.zeros(n.size, dtype=np.bool_)
        on: npt.NDArray[np.bool_] = (ht[:, _H_NODES] == 1.0) & (n > 1.0)
        if self.envelope == "auto" and self.measured is not None and on.any():
            on &= ~self.measured.follows(
                jt[:, _J_CURVE].astype(np.intp),
                ht[:, _H_CTYPE].astype(np.intp),
                ht[:, _H_LINK] == LINK_NVLINK,
                n,
            )
        return on

    def _reset_parts(self) -> None:
        self._jobs: dict[_Key, int] = {}
        self._hws: dict[_Key, int] = {}
        self._job_parts: list[JobPart] = []
        self._hw_parts: list[HardwarePart] = []
        self._jtab = _Table(_J_WIDTH)
        self._htab = _Table(_H_WIDTH)
        # Placement classes for the in-node envelope: the placement key without its GPU count, node
        # count and network (one node's links depend only on the GPU and its interconnect).
        self._classes: dict[_Key, int] = {}

    @classmethod
    def load(cls, path: Path | None = None, cache_size: int = 65536, anchors: bool = True) -> Predictor:
        """Load the shipped model (or ``path``); ``ModelFileError`` if missing, corrupt or other schema.

        ``anchors`` (default on) blends the measured anchors (``perfmodel.anchor``) in where a model was
        measured at the job's precision and software stack but never on the question's GPU type: its
        measured speed carried over by the spec ratio, which gives a GPU generation the model never saw the
        physics answer where the learned correction would extrapolate (leave-one-generation-out, cold:
        Ampere 33.4% -> 27.7% MRE, Hopper 38.1% -> 30.4%; ``bench/perfmodel_accuracy.py``). They are kept
        per stack and precision: pooled over both and normalised by FP32 specs they send tuned-code and
        half-precision speeds to other GPUs (Ampere 75.7%); and below the smallest measured batch they
        follow the measured trend: held flat there they sent a job at per-GPU batch 1 to K80s in the
        simulator (docs/decisions/0003-measured-anchors.md).
        """
        with_anchors = anchors
        if path is None:
            with resources.as_file(resources.files("perfmodel") / "data" / MODEL_FILE) as p:
                model, meta = _read_model(Path(p))
        else:
            model, meta = _read_model(path)
        # The measured table (beside a given model file, else the shipped one) tells the in-node envelope's
        # rule which in-node curves were measured (and anchors GPU types a model was never measured on,
        # when asked); without it the predictor still works, with the envelope on every one-node row.
        anchor_table = None
        with resources.as_file(resources.files("perfmodel") / "data" / TABLE_NAME) as shipped:
            beside = Path(path).parent / TABLE_NAME if path is not None else None
            source = beside if beside is not None and beside.is_file() else Path(shipped)
            measured = None
            if source.is_file():
                table = read_table(source)
                anchor_table = Anchors(table) if with_anchors else None
                measured = MeasuredInNode(table)
        return cls(model, meta, cache_size, anchor_table, measured=measured)

    def clear_cache(self) -> None:
        """Forget cached results (the resolved job and placement sides stay cached)."""
        self._cache.clear()
        self._llm_anchor_factors.clear()

    def resolve(self, job: JobFeatures, hw: HardwareFeatures) -> Resolved:
        """``features.resolve`` with the job and placement sides cached separately (they recur)."""
        j, h = self._ids(job, hw)
        return combine(self._job_parts[j], self._hw_parts[h])

    def _ids(self, job: JobFeatures, hw: HardwareFeatures) -> tuple[int, int]:
        """Rows of the job and placement tables for a row, checking and adding sides not seen before."""
        j = self._jobs.get(job.key)
        h = self._hws.get(hw.key)
        if j is None or h is None:
            j, h = self._add(job, hw)
        return j, h

    def _add(self, job: JobFeatures, hw: HardwareFeatures) -> tuple[int, int]:
        jp = resolve_job(job) if job.key not in self._jobs else None
        hp = resolve_hw(hw) if hw.key not in self._hws else None
        if jp is not None:
            group = (
                self.anchors.group_index(jp.model, jp.dataset, jp.precision, job.stack)
                if self.anchors is not None
                else -1
            )
            curve = self.measured.group_index(jp.model, jp.dataset) if self.measured is not None else 0
            self._jobs[job.key] = self._jtab.add(
                (*jp.nums, jp.precision_index, group, jp.low_confidence, curve)
            )
            self._job_parts.append(jp)
        if hp is not None:
            spec = hp.spec
            gtype = self.anchors.type_index(spec.gpu_type) if self.anchors is not None else 0
            self._hws[hw.key] = self._htab.add(
                (
                    *hp.nums,
                    *hp.tflops_by_precision,
                    spec.low_confidence,
                    gtype,
                    math.log(spec.memory_bandwidth_gbs),
                    self._classes.setdefault(
                        (hw.gpu_type, hw.interconnect, hw.memory_mib, hw.compute_capability),
                        len(self._classes),
                    ),
                    self.measured.type_index(spec.gpu_type, spec.low_confidence)
                    if self.measured is not None
                    else 0,
                    not spec.low_confidence and spec.gpu_type in self.model.seen_types,
                )
            )
            self._hw_parts.append(hp)
        return self._jobs[job.key], self._hws[hw.key]

    def predict(self, rows: Sequence[tuple[JobFeatures, HardwareFeatures]]) -> Predictions:
        """Predict every row; ``InvalidInputError`` naming the row and field on bad input.

        Use ``predict_each`` to get per-row errors instead of one exception. LLM jobs (``llm.is_llm_job``)
        are answered by ``perfmodel.llm``'s scaling model, the others by the learned model.
        """
        if any(map(llm.is_llm_job, (job for job, _ in rows))):
            out = llm.predict_mixed(rows, self._predict_learned, self.llm_fit)
            return out if self.anchors is None else self._anchor_llm_rows(rows, out)
        return self._predict_learned(rows)

    def _llm_reference_iters(self, job: JobFeatures, hw: HardwareFeatures) -> float:
        """Steps/s the scaling model gives the row at the default memory plan (no activation
        checkpointing, the whole per-rank batch in one micro-batch): what the anchor, which knows only
        the work per GPU per step, is compared with, so that the plan's own cost (recomputation, more
        micro-steps) comes from the scaling model alike on measured and unmeasured GPU types."""
        if isinstance(job, llm.LLMJobFeatures) and (
            job.micro_batch is not None or job.activation_checkpointing
        ):
            job = dataclasses.replace(job, micro_batch=None, activation_checkpointing=False)
        return llm.predict([(job, hw)], self.llm_fit).iters_per_s[0]

    def _anchor_llm_rows(
        self, rows: Sequence[tuple[JobFeatures, HardwareFeatures]], out: Predictions
    ) -> Predictions:
        """LLM rows blended with their measured anchor where one applies (the model measured at its
        precision and stack on other GPU types, not on this one), in log space with the learned path's
        weight: iteration time = scaling model^(1 - w) x anchor^w. Without it an LLM measured on A100s
        would be answered on H100s by the scaling model alone (Hopper cold, llm-foundry's MPT-7B/30B rows:
        docs/decisions/0003-measured-anchors.md)."""
        factors = self._llm_anchor_factors
        f = []
        for row in rows:
            if not llm.is_llm_job(row[0]):
                f.append(1.0)
                continue
            got = factors.get(row)
            if got is None:
                got = 1.0
                try:
                    r: Resolved | None = self.resolve(*row)
                except InvalidInputError:  # an LLM the learned path cannot describe: no anchor
                    r = None
                if r is not None and self.anchors is not None and self.anchors.applies(r):
                    at = float(self.anchors.iteration_times([r])[0][0])
                    if math.isfinite(at) and at > 0:
                        got = (self._llm_reference_iters(*row) * at) ** -ANCHOR_WEIGHT
                if len(factors) >= self._cache_size:
                    factors.clear()
                factors[row] = got
            f.append(got)
        if all(v == 1.0 for v in f):
            return out
        return Predictions(
            [v * x for v, x in zip(f, out.samples_per_s, strict=True)],
            [v * x for v, x in zip(f, out.iters_per_s, strict=True)],
            [v * x for v, x in zip(f, out.low, strict=True)],
            [v * x for v, x in zip(f, out.high, strict=True)],
            [v * x for v, x in zip(f, out.iters_low, strict=True)],
            [v * x for v, x in zip(f, out.iters_high, strict=True)],
            out.low_confidence,
        )

    def _predict_learned(self, rows: Sequence[tuple[JobFeatures, HardwareFeatures]]) -> Predictions:
        """``predict`` by the learned model (no LLM rows)."""
        cache = self._cache
        hits = list(map(cache.get, rows))
        todo = [i for i, h in enumerate(hits) if h is None]
        if todo:
            # The side tables are bounded like the result cache (checked between calls, so the ids of
            # one batch stay valid while it is computed).
            if len(self._jobs) > self._cache_size or len(self._hws) > self._cache_size:
                self._reset_parts()
            fresh = rows if len(todo) == len(rows) else [rows[i] for i in todo]
            jobs, hws = self._jobs, self._hws
            jid = [jobs.get(job.key) for job, _ in fresh]
            hid = [hws.get(hw.key) for _, hw in fresh]
            if None in jid or None in hid:
                for k, (job, hw) in enumerate(fresh):
                    if jid[k] is None or hid[k] is None:
                        try:
                            jid[k], hid[k] = self._add(job, hw)
                        except InvalidInputError as exc:
                            raise InvalidInputError(f"row {todo[k]}: {exc}") from exc
            s, it, lo, hi, low, batch = self._compute(np.asarray(jid), np.asarray(hid))
            s_, it_, lo_, hi_, low_ = s.tolist(), it.tolist(), lo.tolist(), hi.tolist(), low.tolist()
            cache.update(zip(fresh, zip(s_, it_, lo_, hi_, low_, strict=True), strict=True))
            while len(cache) > self._cache_size:
                cache.popitem(last=False)
            if len(todo) == len(rows):
                return Predictions(s_, it_, lo_, hi_, (lo / batch).tolist(), (hi / batch).tolist(), low_)
            for i, res in zip(todo, zip(s_, it_, lo_, hi_, low_, strict=True), strict=True):
                hits[i] = res
        done = [r for r in hits if r is not None]
        batches = [row[0].batch_size for row in rows]
        return Predictions(
            samples_per_s=[r[0] for r in done],
            iters_per_s=[r[1] for r in done],
            low=[r[2] for r in done],
            high=[r[3] for r in done],
            iters_low=[r[2] / b for r, b in zip(done, batches, strict=True)],
            iters_high=[r[3] / b for r, b in zip(done, batches, strict=True)],
            low_confidence=[r[4] for r in done],
        )

    def predict_one(self, job: JobFeatures, hw: HardwareFeatures) -> Predictions:
        return self.predict([(job, hw)])

    def predict_each(
        self, rows: Sequence[tuple[JobFeatures, HardwareFeatures]]
    ) -> list[Predictions | InvalidInputError]:
        """Like ``predict`` but one result per row: a one-row ``Predictions`` or the row's error."""
        out: list[Predictions | InvalidInputError] = []
        good: list[int] = []
        for i, row in enumerate(rows):
            try:
                llm.plan(*row) if llm.is_llm_job(row[0]) else self._ids(*row)
                good.append(i)
                out.append(InvalidInputError("pending"))
            except InvalidInputError as exc:
                out.append(exc)
        if good:
            preds = self.predict([rows[i] for i in good])
            for k, i in enumerate(good):
                out[i] = Predictions(
                    [preds.samples_per_s[k]],
                    [preds.iters_per_s[k]],
                    [preds.low[k]],
                    [preds.high[k]],
                    [preds.iters_low[k]],
                    [preds.iters_high[k]],
                    [preds.low_confidence[k]],
                )
        return out

    def _evaluate(
        self,
        jt: FloatArray,
        ht: FloatArray,
        o: npt.NDArray[np.intp],
        g: FloatArray,
        nodes: FloatArray,
        gpn: FloatArray,
    ) -> tuple[FloatArray, FloatArray]:
        """(samples/s, 1-GPU iteration time at the per-GPU batch) of rows given as their owner's batch row
        ``o`` (of the gathered job and placement tables ``jt``/``ht``) on ``g`` GPUs, ``nodes`` nodes,
        ``gpn`` GPUs per node: the rows' ``Resolved.nums`` matrix, then ``features.design_of_nums`` and
        ``LearnedModel.times`` -- the functions training evaluates, guards and anchor blend included."""
        e = o.size
        m = np.empty((e, _NUM_WIDTH))
        m[:, :_JN] = jt[o, :_JN]
        m[:, _JN : _JN + _HN] = ht[o, :_HN]
        m[:, _JN + _H_GPUS] = g
        m[:, _JN + _H_NODES] = nodes
        m[:, _JN + _H_GPN] = gpn
        m[:, -1] = ht[o, _H_TF + jt[o, _J_PREC].astype(np.intp)]
        d = design_of_nums(m, self.model.physics)
        if self.measured is not None:
            self._reference_link_features(self.measured, d, m, ht[o, _H_CTYPE].astype(np.intp), nodes)
        # Inside a measured in-node curve that falls the NVLink guard yields (with or without the envelope;
        # "always" puts the envelope over every such row anyway).
        follows = None
        if self.measured is not None and self.envelope != "always":
            follows = (nodes == 1.0) & self.measured.follows(
                jt[o, _J_CURVE].astype(np.intp),
                ht[o, _H_CTYPE].astype(np.intp),
                ht[o, _H_LINK] == LINK_NVLINK,
                g,
            )
        t, t1 = self.model.times(d, self._anchored(jt[o], ht[o], m), ht[o, _H_SEEN] > 0, follows)
        samples: FloatArray = m[:, 0] / t
        return samples, t1

    def _reference_link_features(
        self,
        measured: MeasuredInNode,
        d: Design,
        m: FloatArray,
        type_col: npt.NDArray[np.intp],
        nodes: FloatArray,
    ) -> None:
        """Cross-node correction (module docstring): the forests' features of each cross-node row become
        those of the same row at its reference link (``MeasuredInNode.reference_links``), in place; its
        scaling-model times and sync floor stay at its own link."""
        cross = np.flatnonzero(nodes > 1.0)
        if cross.size == 0:
            return
        own = np.log(m[cross, _M_LINK])
        ref = measured.reference_links(type_col[cross], m[cross, _M_STACK], own)
        moved = np.abs(ref - own) > 1e-9
        if moved.any():
            at = m[cross[moved]].copy()
            at[:, _M_LINK] = np.exp(ref[moved])
            d.x[cross[moved]] = design_of_nums(at, self.model.physics).x

    def _anchored(
        self, jt: FloatArray, ht: FloatArray, m: FloatArray
    ) -> tuple[FloatArray, FloatArray] | None:
        """Measured-anchor times of rows and their 1-GPU twins (NaN where none applies), or None: the
        anchor applies to a measured model on a catalogued GPU type it was not measured on."""
        if self.anchors is None:
            return None
        group = jt[:, _J_GROUP].astype(np.intp)
        gtype = ht[:, _H_TYPE].astype(np.intp)
        measured = self.anchors.measured
        ok = (group >= 0) & (ht[:, _H_LOW] == 0) & (gtype < measured.shape[1] - 1)
        if ok.any():
            ok[ok] = ~measured[group[ok], gtype[ok]]
        at = np.full(ok.size, np.nan)
        at1 = at.copy()
        ai = np.flatnonzero(ok)
        if ai.size:
            g = m[ai, _JN + _H_GPUS]
            at[ai], at1[ai] = self.anchors.times_where_applies(
                group[ai],
                gtype[ai],
                m[ai, 0] / g,
                g,
                (m[ai, _JN + _H_NODES] > 1).astype(np.float64),
                np.log(m[ai, -1]),
                ht[ai, _H_LOGBW],
                np.log(m[ai, 2]),
            )
        return at, at1

    def _compute(
        self, jid: npt.NDArray[np.intp], hid: npt.NDArray[np.intp]
    ) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray, npt.NDArray[np.bool_], FloatArray]:
        """(samples/s, iterations/s, low, high, low confidence, global batch) for rows given by their table
        rows.

        In-node envelope (on the rows ``_envelope_rows`` picks): a row on ``n`` > 1 GPUs of one node is
        computed together with the same job on 1 .. n-1 GPUs of that node (same GPU, interconnect, global
        batch) and gets the highest of those throughputs, capped by linear scaling from the lowest 1-GPU
        time among per-GPU batches B/n .. B/1, so that there more GPUs never predict a lower total
        throughput.
        """
        jt = self._jtab.rows.take(jid, axis=0)
        ht = self._htab.rows.take(hid, axis=0)
        k = jid.size
        n = ht[:, _H_GPUS]
        batch = jt[:, 0]
        env = np.flatnonzero(self._envelope_rows(jt, ht))
        if env.size == 0:
            samples = self._evaluate(jt, ht, np.arange(k), n, ht[:, _H_NODES], ht[:, _H_GPN])[0]
        else:
            # The same job on 1 .. n-1 GPUs of the owner's node class, as extra rows; rows that are the
            # same (job, class, GPU count) -- in the batch or among the extras -- are computed once.
            one_node = ht[:, _H_NODES] == 1.0
            reps = n[env].astype(np.intp) - 1
            ends = np.cumsum(reps)
            starts = ends - reps
            owner = np.repeat(env, reps)
            fewer = np.arange(ends[-1]) - np.repeat(starts, reps) + 1.0
            single = np.flatnonzero(one_node)
            src = np.concatenate((single, owner))
            gpus = np.concatenate((n[single], fewer))
            cell = jid * (len(self._classes) + 1) + ht[:, _H_CLASS].astype(np.intp)
            key = cell.take(src) * (int(gpus.max()) + 1) + gpus.astype(np.intp)
            # ``np.unique(key, return_index=True, return_inverse=True)``, without its wrapper's overhead.
            order = np.argsort(key, kind="stable")
            ordered = key.take(order)
            head = np.empty(ordered.size, dtype=np.bool_)
            head[0] = True
            np.not_equal(ordered[1:], ordered[:-1], out=head[1:])
            first = order[head]
            inv = np.empty(key.size, dtype=np.intp)
            inv[order] = np.cumsum(head) - 1
            multi_node = np.flatnonzero(~one_node)
            mn = multi_node.size
            g = np.concatenate((n[multi_node], gpus[first]))
            got, got_t1 = self._evaluate(
                jt,
                ht,
                np.concatenate((multi_node, src[first])),
                g,
                np.concatenate((ht[multi_node, _H_NODES], np.ones(first.size))),
                np.concatenate((ht[multi_node, _H_GPN], gpus[first])),
            )
            samples = np.empty(k)
            samples[multi_node] = got[:mn]
            at = got[mn:][inv]
            samples[single] = at[: single.size]
            best = np.maximum(samples[env], np.maximum.reduceat(at[single.size :], starts))
            # Linear-scaling cap from the 1-GPU times at per-GPU batches B/n .. B/1, made non-increasing
            # in the GPU count (a larger per-GPU batch never takes less time on one GPU): the cap and
            # the envelope both grow with n, so their minimum does too.
            t1 = got_t1[mn:][inv]
            t1_min = np.minimum(
                t1[np.searchsorted(single, env)], np.minimum.reduceat(t1[single.size :], starts)
            )
            samples[env] = np.minimum(best, batch[env] / t1_min)
        iters = samples / batch
        low = (jt[:, _J_LOW] + ht[:, _H_LOW]) > 0
        # q_low/q_high are quantiles of log(measured / predicted) throughput; widened 2x in log space for
        # low-confidence rows and placements larger than any training row.
        widen = np.where(low | (n > self.meta.max_gpus_seen), 2.0, 1.0)
        lo = samples * np.exp(widen * self.meta.q_low)
        hi = samples * np.exp(widen * self.meta.q_high)
        return samples, iters, lo, hi, low, batch
