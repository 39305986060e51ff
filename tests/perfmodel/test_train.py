"""Training is reproducible and writes a model the predictor accepts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from perfmodel.learned import SYNC_FACTOR_BOUNDS, LearnedModel, read_model
from perfmodel.measurements import read_table
from perfmodel.predictor import Predictor
from perfmodel.scaling import FEATURE_NAMES, FEATURE_SCHEMA_VERSION, Design
from perfmodel.train import design, fit, fit_model, train
from perfmodel.truth import TABLE_NAME

DATA = Path(__file__).resolve().parents[2] / "perfmodel" / "data"
SHARED = Path(__file__).resolve().parents[3] / "shared" / "throughput"


def test_same_data_and_seed_give_the_same_model() -> None:
    ms = read_table(DATA / TABLE_NAME)[::8]
    _, d, times = design(ms)
    _, a = fit_model(d, times, seed=3)
    _, b = fit_model(d, times, seed=3)
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def test_fit_beats_the_untrained_scaling_model_on_its_data() -> None:
    ms = read_table(DATA / TABLE_NAME)[::4]
    resolved, d, times = design(ms)
    p = fit(ms)
    # The learned model under its fitted physics vs the scaling model with the prior constants.
    pred, _ = p.model.times_of(resolved)
    learned = np.median(np.abs(times / pred - 1))
    analytic = np.median(np.abs(times / (d.compute + d.sync) - 1))
    assert learned < 0.5 * analytic


def test_train_from_shared_tables_writes_a_loadable_model(tmp_path: Path) -> None:
    if not (SHARED / "throughput_isolated_tidy.csv.gz").is_file():
        import pytest

        pytest.skip("../shared/throughput not present")
    report = train(SHARED, tmp_path, seed=0)
    raw = json.loads(report.model_path.read_text())
    assert raw["feature_schema"] == FEATURE_SCHEMA_VERSION
    assert "sia" not in raw["trained_on"]  # only permissive sources
    assert report.table_path.read_bytes() == (DATA / TABLE_NAME).read_bytes()  # shipped table is current
    Predictor.load(report.model_path)


def _split_models() -> tuple[Design, np.ndarray, LearnedModel, LearnedModel, dict[str, Any]]:
    ms = read_table(DATA / TABLE_NAME)[::4]
    _, d, times = design(ms)
    types = [m.gpu_type for m in ms]
    plain, _ = fit_model(d, times, gpu_types=types)
    split, payload = fit_model(d, times, gpu_types=types, sync_split=True)
    return d, times, plain, split, payload


def test_split_correction_changes_only_rows_across_nodes() -> None:
    d, _, plain, split, _ = _split_models()
    cross = d.x[:, FEATURE_NAMES.index("num_nodes")] > 1
    assert cross.any() and (~cross).any()
    a, a1 = plain.times(d)
    b, b1 = split.times(d)
    np.testing.assert_array_equal(a[~cross], b[~cross])
    np.testing.assert_array_equal(a1, b1)
    assert not np.allclose(a[cross], b[cross])


def test_split_correction_adds_a_bounded_multiple_of_the_sync_time_to_the_compute_twin() -> None:
    d, _, _, split, _ = _split_models()
    cross = d.x[:, FEATURE_NAMES.index("num_nodes")] > 1
    t, t1 = split.times(d)
    lo, hi = SYNC_FACTOR_BOUNDS
    factor = split.sync_factor(d.x[cross])
    assert factor.min() >= lo and factor.max() <= hi and np.ptp(factor) > 0
    # Before the guards: the 1-GPU twin's corrected time plus the corrected all-reduce; the guards only
    # raise it to the sync floor, which lies below the modelled all-reduce.
    expect = np.maximum(t1[cross] + d.sync[cross] * factor, d.sync_floor[cross])
    np.testing.assert_allclose(t[cross], expect, rtol=1e-12)
    assert np.all(t[cross] <= t1[cross] + hi * d.sync[cross] * (1 + 1e-12))


def test_split_correction_survives_the_model_file(tmp_path: Path) -> None:
    d, _, _, split, payload = _split_models()
    payload.update(
        {
            "feature_schema": FEATURE_SCHEMA_VERSION,
            "feature_names": list(FEATURE_NAMES),
            "quantiles": {"low": -0.1, "high": 0.1},
            "max_gpus_seen": 64,
        }
    )
    path = tmp_path / "predictor.json"
    path.write_text(json.dumps(payload))
    model, _ = read_model(path)
    assert model.sync_forest is not None
    np.testing.assert_allclose(model.times(d)[0], split.times(d)[0], rtol=1e-12)
