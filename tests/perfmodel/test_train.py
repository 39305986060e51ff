"""Training is reproducible and writes a model the predictor accepts."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from perfmodel.measurements import read_table
from perfmodel.predictor import Predictor
from perfmodel.scaling import FEATURE_SCHEMA_VERSION
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
