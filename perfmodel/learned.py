"""The learned residual and the model file: fitted ``Physics`` x tree correction, blended with measured
anchors, under the physical guards.

``LearnedModel.times`` turns a ``Design`` (``perfmodel.scaling``) into predicted iteration times: the
scaling model's compute and sync times times ``exp(forest(features))`` (plus the GPU forest for GPU types
the training table measured; with a ``sync_forest``, a row across nodes of a model the table never
measured instead takes its 1-GPU twin's correction on the compute time and the sync forest's bounded one
on the sync time), the measured-anchor
blend of ``perfmodel.anchor`` where anchors apply, then the guards for multi-GPU rows, with ``t1`` the
same job on one GPU at the same per-GPU batch: never better than linear scaling (``time >= t1``), never
faster than the gradient all-reduce at the slowest link's line rate (``Design.sync_floor``), and inside
one NVLink node never slower than one GPU (``time <= n x t1``), except inside a measured in-node curve
that falls (``perfmodel.envelope.MeasuredInNode.follows``).
``read_model`` reads and checks a model file (``perfmodel/data/predictor.json``: feature-schema version,
physics, trees as flat arrays, quantiles); another schema or a corrupt file is ``ModelFileError``. Pure
apart from ``read_model``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from perfmodel.anchor import ANCHOR_WEIGHT
from perfmodel.errors import ModelFileError
from perfmodel.features import Resolved, design_of
from perfmodel.forest import Forest
from perfmodel.scaling import (
    DEFAULT_PHYSICS,
    FEATURE_NAMES,
    FEATURE_SCHEMA_VERSION,
    LINK_NVLINK,
    Design,
    Physics,
)

FloatArray = npt.NDArray[np.float64]
# Bounds of the split correction's factor on a cross-node row's sync time (``LearnedModel.sync_forest``):
# the all-reduce at a quarter of the modelled time to sixteen times it. Round figures, not fitted.
SYNC_FACTOR_BOUNDS = (0.25, 16.0)
# Column of ``FEATURE_NAMES`` holding the node count.
_NODES_COL = FEATURE_NAMES.index("num_nodes")


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
    # The split correction across nodes (``perfmodel.train.fit_model(sync_split=True)``): when set, a row
    # across nodes of a model the table never measured (``times``' ``unmeasured``) takes the forests'
    # correction of its 1-GPU twin on its compute time only, and this forest's on its sync time, bounded
    # to ``SYNC_FACTOR_BOUNDS``. None: the whole step time takes the forests' correction on every row.
    sync_forest: Forest | None = None

    def seen_of(self, rows: Sequence[Resolved]) -> npt.NDArray[np.bool_]:
        """Per row: was its GPU type measured in training (``gpu_forest`` applies)?"""
        return np.asarray(
            [not r.spec.low_confidence and r.spec.gpu_type in self.seen_types for r in rows], dtype=np.bool_
        )

    def sync_factor(self, x: FloatArray) -> FloatArray:
        """The split correction's factor on the sync time of cross-node rows with features ``x`` (1 without
        a ``sync_forest``)."""
        if self.sync_forest is None:
            return np.ones(x.shape[0])
        lo, hi = np.log(SYNC_FACTOR_BOUNDS)
        out: FloatArray = np.exp(np.clip(self.sync_forest.predict(x), lo, hi))
        return out

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
        unmeasured: npt.NDArray[np.bool_] | None = None,
    ) -> tuple[FloatArray, FloatArray]:
        """(predicted iteration time, predicted 1-GPU time at the same per-GPU batch) per row.

        ``anchored`` (from ``perfmodel.anchor.Anchors``) gives measured-anchor times for the rows and their
        1-GPU twins (NaN where none applies); they are blended in log space before the guards. ``seen``
        marks the rows whose GPU type was measured (``gpu_forest`` applies); None = every row.
        ``follows`` marks the rows inside a measured in-node curve that falls (``MeasuredInNode.follows``):
        there the NVLink guard (never slower than one GPU) is left out, as the measurements break it.
        ``unmeasured`` marks the rows of a model the training table never measured (``Predictor``: no
        anchor group): with a ``sync_forest`` only those rows across nodes take the split correction, and
        a measured model keeps the whole-step factor its own rows taught; None = every row.
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
            if self.sync_forest is not None:
                cross = multi & (d.x[:, _NODES_COL] > 1.0)
                if unmeasured is not None:
                    cross &= unmeasured
                if cross.any():
                    t[cross] = t1[cross] + d.sync[cross] * self.sync_factor(d.x[cross])
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


def read_model(path: Path) -> tuple[LearnedModel, ModelMeta]:
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
            _forest_of(raw["sync_forest"], path, "sync_forest") if raw.get("sync_forest") else None,
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
