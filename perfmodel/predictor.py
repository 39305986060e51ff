"""The throughput predictor: scaling model x learned correction, physical guards, batch API, cache, file.

For a job on ``n`` GPUs at per-GPU batch ``b`` (global batch / n), the predicted iteration time is

    time = (analytic compute time at b + analytic ring all-reduce time) x exp(forest(features))

where the analytic parts are ``perfmodel.features``' scaling model and ``forest`` is a gradient-boosted
tree ensemble (XGBoost, trained by ``perfmodel.train``) on ``log(measured / modelled time)``. The trees
learn a correction factor rather than the time itself, so unseen GPU counts and placements follow the
scaling model's physics instead of a tree's flat extrapolation. Two physical guards then hold for every
multi-GPU prediction, with ``t1`` the prediction for the same job on one GPU at the same per-GPU batch:
data parallelism never scales better than linearly (``time >= t1``), and a job inside one NVLink node is
never slower in total than on one of its GPUs (``time <= n x t1``). For a GPU type on which the job's
model was never measured, while it was measured on others, the estimate is blended (weight 0.75 in log
space) with a measured anchor: the nearest measured configuration of that model scaled by the GPUs' spec
ratio (``perfmodel.anchor``; the accuracy benchmark shows that anchor beats features alone there).
Samples/s = iterations/s x global batch.

The interval ``[low, high]`` is the prediction times the 10th / 90th percentile of out-of-fold error
ratios from training, widened 2x (in log space) for low-confidence rows (model or GPU not in the zoo or
catalogue) and placements larger than any training row. The model file (``perfmodel/data/predictor.json``)
holds the feature-schema version, the trees as flat arrays (evaluated here with numpy: serving needs
neither xgboost's import time nor its per-call overhead) and the quantiles. A file of another schema, or
a corrupt one, is refused with ``ModelFileError``. ``Predictor.predict`` caches results per
(job features, placement) in a bounded LRU.

Pure apart from ``Predictor.load`` (reads the model file).
"""

from __future__ import annotations

import json
import logging
import math
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from perfmodel.anchor import ANCHOR_WEIGHT, Anchors
from perfmodel.errors import InvalidInputError, ModelFileError
from perfmodel.features import (
    FEATURE_NAMES,
    FEATURE_SCHEMA_VERSION,
    LINK_NVLINK,
    Design,
    HardwareFeatures,
    HardwarePart,
    JobFeatures,
    JobPart,
    Resolved,
    combine,
    design_of,
    resolve_hw,
    resolve_job,
)
from perfmodel.measurements import read_table
from perfmodel.truth import TABLE_NAME

log = logging.getLogger(__name__)

MODEL_FILE = "predictor.json"
FloatArray = npt.NDArray[np.float64]


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


@dataclass(frozen=True, slots=True)
class _RowResult:
    samples_per_s: float
    iters_per_s: float
    low: float
    high: float
    low_confidence: bool


class Forest:
    """A tree ensemble as flat arrays, evaluated for many rows at once with numpy.

    Every node has a global index; leaves point to themselves, so ``depth`` steps of
    ``node = left if x[feature] < threshold else right`` reach every row's leaf in every tree.
    """

    def __init__(
        self,
        roots: npt.NDArray[np.int64],
        feature: npt.NDArray[np.int64],
        threshold: FloatArray,
        left: npt.NDArray[np.int64],
        right: npt.NDArray[np.int64],
        value: FloatArray,
        depth: int,
        base: float,
    ) -> None:
        self.roots = roots
        self.feature = feature
        self.threshold = threshold
        self.left = left
        self.right = right
        self.value = value
        self.depth = depth
        self.base = base

    @staticmethod
    def from_trees(trees: Sequence[dict[str, list[Any]]], base: float) -> Forest:
        """Build from per-tree dicts with ``left``, ``right``, ``feature``, ``threshold``, ``value``
        (``left[i] == -1`` marks a leaf); raises ``ValueError`` on inconsistent arrays."""
        roots, feat, thr, lft, rgt, val = [], [], [], [], [], []
        offset = 0
        depth = 0
        for t in trees:
            n = len(t["left"])
            if not (len(t["right"]) == len(t["feature"]) == len(t["threshold"]) == len(t["value"]) == n):
                raise ValueError("tree arrays of different lengths")
            roots.append(offset)
            d = [0] * n
            for i in range(n):
                li, ri = int(t["left"][i]), int(t["right"][i])
                if li == -1:
                    lft.append(offset + i)
                    rgt.append(offset + i)
                    feat.append(0)
                else:
                    if not (0 <= li < n and 0 <= ri < n):
                        raise ValueError("child index out of range")
                    lft.append(offset + li)
                    rgt.append(offset + ri)
                    feat.append(int(t["feature"][i]))
                    d[li] = d[i] + 1
                    d[ri] = d[i] + 1
                thr.append(float(t["threshold"][i]))
                val.append(float(t["value"][i]))
            depth = max(depth, max(d) if d else 0)
            offset += n
        return Forest(
            np.asarray(roots, dtype=np.int64),
            np.asarray(feat, dtype=np.int64),
            np.asarray(thr, dtype=np.float32).astype(np.float64),
            np.asarray(lft, dtype=np.int64),
            np.asarray(rgt, dtype=np.int64),
            np.asarray(val, dtype=np.float64),
            depth,
            base,
        )

    def predict(self, x: FloatArray) -> FloatArray:
        """Sum of leaf values plus the base, for each row of ``x`` (rows x features)."""
        rows, nf = x.shape
        # XGBoost compares float32 features with float32 thresholds: do the same.
        flat = x.astype(np.float32).astype(np.float64).ravel()
        node = np.broadcast_to(self.roots, (rows, self.roots.size)).copy()
        row_off = (np.arange(rows, dtype=np.int64) * nf)[:, None]
        for _ in range(self.depth):
            xv = flat[row_off + self.feature[node]]
            node = np.where(xv < self.threshold[node], self.left[node], self.right[node])
        out: FloatArray = self.value[node].sum(axis=1) + self.base
        return out


@dataclass(frozen=True, slots=True)
class LearnedModel:
    """The learned part: one forest correcting the scaling model (see the module docstring)."""

    forest: Forest

    def times(
        self, d: Design, anchored: tuple[FloatArray, FloatArray] | None = None
    ) -> tuple[FloatArray, FloatArray]:
        """(predicted iteration time, predicted 1-GPU time at the same per-GPU batch) per row.

        ``anchored`` (from ``perfmodel.anchor.Anchors``) gives measured-anchor times for the rows and their
        1-GPU twins (NaN where none applies); they are blended in log space before the guards.
        """
        multi = d.num_gpus > 1
        k = d.x.shape[0]
        # One forest pass over the rows and the 1-GPU twins of the multi-GPU rows.
        corr = self.forest.predict(np.concatenate((d.x, d.x_single[multi])) if multi.any() else d.x)
        t = (d.compute + d.sync) * np.exp(corr[:k])
        t1 = t.copy()
        if multi.any():
            t1[multi] = d.compute[multi] * np.exp(corr[k:])
        if anchored is not None:
            for ours, anchor in ((t, anchored[0]), (t1, anchored[1])):
                ok = ~np.isnan(anchor)
                ours[ok] = np.exp((1 - ANCHOR_WEIGHT) * np.log(ours[ok]) + ANCHOR_WEIGHT * np.log(anchor[ok]))
            t[multi] = np.maximum(t[multi], t1[multi])
            nvl = multi & (d.link_class == LINK_NVLINK)
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
        model = LearnedModel(_forest_of(raw["forest"], path, "forest"))
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


class Predictor:
    """Batch throughput predictor with a per-(job, placement) cache. Build with ``Predictor.load()``."""

    def __init__(
        self, model: LearnedModel, meta: ModelMeta, cache_size: int = 65536, anchors: Anchors | None = None
    ) -> None:
        self.model = model
        self.meta = meta
        self.anchors = anchors
        self._cache: OrderedDict[tuple[JobFeatures, HardwareFeatures], _RowResult] = OrderedDict()
        self._cache_size = cache_size
        self._jobs: dict[JobFeatures, JobPart] = {}
        self._hws: dict[HardwareFeatures, HardwarePart] = {}

    @classmethod
    def load(cls, path: Path | None = None, cache_size: int = 65536) -> Predictor:
        """Load the shipped model (or ``path``); ``ModelFileError`` if missing, corrupt or other schema."""
        if path is None:
            with resources.as_file(resources.files("perfmodel") / "data" / MODEL_FILE) as p:
                model, meta = _read_model(Path(p))
        else:
            model, meta = _read_model(path)
        # The measured table (beside a given model file, else the shipped one) anchors GPU types a model
        # was never measured on; without it the predictor still works, unanchored.
        anchors = None
        with resources.as_file(resources.files("perfmodel") / "data" / TABLE_NAME) as shipped:
            beside = Path(path).parent / TABLE_NAME if path is not None else None
            source = beside if beside is not None and beside.is_file() else Path(shipped)
            if source.is_file():
                anchors = Anchors(read_table(source))
        return cls(model, meta, cache_size, anchors)

    def clear_cache(self) -> None:
        """Forget cached results (the resolved job and placement sides stay cached)."""
        self._cache.clear()

    def resolve(self, job: JobFeatures, hw: HardwareFeatures) -> Resolved:
        """``features.resolve`` with the job and placement sides cached separately (they recur)."""
        return self._resolve(job, hw)

    def _resolve(self, job: JobFeatures, hw: HardwareFeatures) -> Resolved:
        """Resolve a row, caching the job and placement sides separately (they recur across rows)."""
        j = self._jobs.get(job)
        if j is None:
            j = resolve_job(job)
            if len(self._jobs) >= self._cache_size:
                self._jobs.clear()
            self._jobs[job] = j
        h = self._hws.get(hw)
        if h is None:
            h = resolve_hw(hw)
            if len(self._hws) >= self._cache_size:
                self._hws.clear()
            self._hws[hw] = h
        return combine(j, h)

    def predict(self, rows: Sequence[tuple[JobFeatures, HardwareFeatures]]) -> Predictions:
        """Predict every row; ``InvalidInputError`` naming the row and field on bad input.

        Use ``predict_each`` to get per-row errors instead of one exception.
        """
        results: list[_RowResult | None] = [None] * len(rows)
        todo: list[int] = []
        resolved: list[Resolved] = []
        for i, row in enumerate(rows):
            hit = self._cache.get(row)
            if hit is not None:
                results[i] = hit
                continue
            try:
                resolved.append(self._resolve(*row))
            except InvalidInputError as exc:
                raise InvalidInputError(f"row {i}: {exc}") from exc
            todo.append(i)
        if todo:
            computed = self._compute(resolved)
            for i, res in zip(todo, computed, strict=True):
                results[i] = res
                self._remember(rows[i], res)
        done = [r for r in results if r is not None]
        return Predictions(
            samples_per_s=[r.samples_per_s for r in done],
            iters_per_s=[r.iters_per_s for r in done],
            low=[r.low for r in done],
            high=[r.high for r in done],
            iters_low=[r.low / b for r, b in zip(done, (row[0].batch_size for row in rows), strict=True)],
            iters_high=[r.high / b for r, b in zip(done, (row[0].batch_size for row in rows), strict=True)],
            low_confidence=[r.low_confidence for r in done],
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
                self._resolve(*row)
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

    def _compute(self, resolved: Sequence[Resolved]) -> list[_RowResult]:
        anchored = self.anchors.iteration_times(resolved) if self.anchors is not None else None
        t, _ = self.model.times(design_of(resolved), anchored)
        iters = (1.0 / t).tolist()
        out = []
        q_low, q_high, max_gpus = self.meta.q_low, self.meta.q_high, self.meta.max_gpus_seen
        for r, its in zip(resolved, iters, strict=True):
            # q_low/q_high are quantiles of log(measured / predicted) throughput; widened 2x in log
            # space for low-confidence rows and placements larger than any training row.
            widen = 2.0 if (r.low_confidence or r.num_gpus > max_gpus) else 1.0
            b = r.batch_size
            out.append(
                _RowResult(
                    its * b,
                    its,
                    its * b * math.exp(widen * q_low),
                    its * b * math.exp(widen * q_high),
                    r.low_confidence,
                )
            )
        return out

    def _remember(self, key: tuple[JobFeatures, HardwareFeatures], value: _RowResult) -> None:
        self._cache[key] = value
        if len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
