"""Training the predictor from the measured tables: reproducible (seeded, single-threaded by default).

``train(shared_dir, out_dir)`` reads ``throughput_isolated_tidy.csv.gz`` from the shared throughput
directory, keeps the permissively licensed sources (``perfmodel.measurements.SHIPPABLE``), writes the merged
table (``measurements.csv.gz``) and the model file (``predictor.json``) into ``out_dir`` (by default the
package's ``data/``). The model is an XGBoost ensemble on ``log(measured iteration time / scaling-model
time)`` (see ``perfmodel.predictor``); its 10th/90th percentile error ratios for the interval come from
5-fold out-of-fold predictions. ``fit`` and ``fit_forest`` are the building blocks the accuracy benchmark
reuses on other splits. XGBoost is imported only here (training), never when serving.

Not pure: ``train`` reads and writes the named files.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from perfmodel.features import (
    FEATURE_NAMES,
    FEATURE_SCHEMA_VERSION,
    HardwareFeatures,
    JobFeatures,
    Resolved,
    feature_matrix,
    resolve,
)
from perfmodel.measurements import SHIPPABLE, Measurement, read_shared_tidy, write_table
from perfmodel.predictor import MODEL_FILE, Forest, ModelMeta, Predictor
from perfmodel.truth import TABLE_NAME

log = logging.getLogger(__name__)

DEFAULT_PARAMS: dict[str, Any] = {
    "objective": "reg:squarederror",
    "max_depth": 8,
    "eta": 0.2,
    "subsample": 0.8,
    "colsample_bytree": 0.9,
    "min_child_weight": 2.0,
    "lambda": 1.0,
}
DEFAULT_ROUNDS = 40


@dataclass(frozen=True, slots=True)
class TrainReport:
    """What ``train`` did: rows used, files written, out-of-fold error figures."""

    rows: int
    model_path: Path
    table_path: Path
    oof_mre: float
    q_low: float
    q_high: float


def rows_of(measurements: Sequence[Measurement]) -> list[tuple[JobFeatures, HardwareFeatures]]:
    """The (job, placement) question each measurement answers (measured jobs are fp32)."""
    return [
        (
            JobFeatures(m.model, m.dataset, m.batch_size, "fp32"),
            HardwareFeatures(
                m.gpu_type, m.num_gpus, m.gpus_per_node, m.num_nodes, m.interconnect, m.network_gbps
            ),
        )
        for m in measurements
    ]


def design(measurements: Sequence[Measurement]) -> tuple[list[Resolved], npt.NDArray[np.float64]]:
    """Resolved rows and their feature matrix."""
    resolved = [resolve(j, h) for j, h in rows_of(measurements)]
    return resolved, feature_matrix(resolved)[0]


def residual_target(
    measurements: Sequence[Measurement], resolved: Sequence[Resolved]
) -> npt.NDArray[np.float64]:
    """log(measured iteration time / scaling-model time) per row."""
    base = feature_matrix(resolved)[1]
    measured = np.asarray([1.0 / m.iters_per_s for m in measurements])
    out: npt.NDArray[np.float64] = np.log(measured / base)
    return out


def fit_forest(
    x: npt.NDArray[np.float64],
    y: npt.NDArray[np.float64],
    seed: int = 0,
    rounds: int = DEFAULT_ROUNDS,
    nthread: int = 1,
    params: dict[str, Any] | None = None,
) -> tuple[Forest, list[dict[str, list[Any]]], float]:
    """Train XGBoost on (x, y) and return it as a ``Forest`` plus its exported trees and base score."""
    import xgboost as xgb

    p = dict(DEFAULT_PARAMS if params is None else params)
    p.update({"seed": seed, "nthread": nthread, "base_score": float(np.mean(y)) if len(y) else 0.0})
    booster = xgb.train(p, xgb.DMatrix(x, label=y), num_boost_round=rounds)
    raw = json.loads(booster.save_raw("json").decode())
    learner = raw["learner"]
    trees_raw = learner["gradient_booster"]["model"]["trees"]
    base_text = str(learner["learner_model_param"]["base_score"]).strip("[]")
    base = float(base_text)
    trees: list[dict[str, list[Any]]] = []
    for t in trees_raw:
        trees.append(
            {
                "left": [int(v) for v in t["left_children"]],
                "right": [int(v) for v in t["right_children"]],
                "feature": [int(v) for v in t["split_indices"]],
                "threshold": [float(v) for v in t["split_conditions"]],
                "value": [
                    float(c) if left == -1 else 0.0
                    for c, left in zip(t["split_conditions"], t["left_children"], strict=True)
                ],
            }
        )
    forest = Forest.from_trees(trees, base)
    return forest, trees, base


def fit(
    measurements: Sequence[Measurement], seed: int = 0, nthread: int = 1, rounds: int = DEFAULT_ROUNDS
) -> Predictor:
    """An in-memory predictor trained on ``measurements`` (quantiles from its training residuals)."""
    resolved, x = design(measurements)
    y = residual_target(measurements, resolved)
    forest, _, _ = fit_forest(x, y, seed=seed, rounds=rounds, nthread=nthread)
    err = y - forest.predict(x)
    meta = ModelMeta(
        FEATURE_SCHEMA_VERSION,
        FEATURE_NAMES,
        float(np.quantile(-err, 0.1)),
        float(np.quantile(-err, 0.9)),
        max(m.num_gpus for m in measurements),
        "in-memory",
        "perfmodel.train.fit",
    )
    return Predictor(forest, meta)


def _oof_errors(
    x: npt.NDArray[np.float64], y: npt.NDArray[np.float64], seed: int, nthread: int, folds: int = 5
) -> npt.NDArray[np.float64]:
    """Out-of-fold log errors log(measured / predicted) of throughput (= predicted - measured log time)."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(y))
    out = np.zeros(len(y))
    for k in range(folds):
        test = order[k::folds]
        train_idx = np.setdiff1d(order, test)
        forest, _, _ = fit_forest(x[train_idx], y[train_idx], seed=seed, nthread=nthread)
        out[test] = forest.predict(x[test]) - y[test]
    return out


def train(
    shared_dir: Path,
    out_dir: Path | None = None,
    seed: int = 0,
    nthread: int = 1,
) -> TrainReport:
    """Train from ``shared_dir`` (``../shared/throughput``) and write the table and model into ``out_dir``."""
    if out_dir is None:
        out_dir = Path(__file__).resolve().parent / "data"
    out_dir.mkdir(parents=True, exist_ok=True)
    measurements = read_shared_tidy(shared_dir, SHIPPABLE)
    table_path = out_dir / TABLE_NAME
    write_table(measurements, table_path)
    resolved, x = design(measurements)
    y = residual_target(measurements, resolved)
    oof = _oof_errors(x, y, seed, nthread)
    _, trees, base = fit_forest(x, y, seed=seed, nthread=nthread)
    q_low, q_high = float(np.quantile(oof, 0.1)), float(np.quantile(oof, 0.9))
    payload = {
        "feature_schema": FEATURE_SCHEMA_VERSION,
        "feature_names": list(FEATURE_NAMES),
        "base_score": base,
        "trees": trees,
        "quantiles": {"low": q_low, "high": q_high},
        "max_gpus_seen": max(m.num_gpus for m in measurements),
        "trained_on": f"{len(measurements)} configurations from {', '.join(sorted(SHIPPABLE))}",
        "created_by": f"perfmodel.train seed={seed} rounds={DEFAULT_ROUNDS}",
    }
    model_path = out_dir / MODEL_FILE
    # Compact and sorted: the same data and seed give the same bytes (single-threaded training).
    model_path.write_text(json.dumps(payload, separators=(",", ":"), sort_keys=True) + "\n")
    mre = float(np.mean(np.abs(np.exp(oof) - 1.0)))
    log.info("trained perfmodel", extra={"rows": len(measurements), "oof_mre": mre})
    return TrainReport(len(measurements), model_path, table_path, mre, q_low, q_high)
