"""The compiled tree walk (``perfmodel._forest``) against the numpy walk it replaces, and its input checks."""

from __future__ import annotations

import numpy as np
import pytest

from perfmodel import forest as forest_module
from perfmodel.features import HardwareFeatures, JobFeatures, feature_matrix, resolve
from perfmodel.forest import Forest
from perfmodel.gpus import CANONICAL_TYPES
from perfmodel.predictor import Predictor
from perfmodel.zoo import model_names

native = pytest.mark.skipif(
    forest_module._native_walk is None, reason="perfmodel._forest not built (no C compiler)"
)


@pytest.fixture(scope="module")
def predictor() -> Predictor:
    return Predictor.load()


def test_the_compiled_walk_is_built_and_used(predictor: Predictor) -> None:
    # `make venv` (pip install -e .) builds it; without it every prediction walks the trees with numpy,
    # about 3x slower on the speed benchmark's batches.
    assert forest_module._native_walk is not None, "perfmodel._forest was not built: is gcc installed?"
    assert predictor.model.forest.native


@native
def test_compiled_walk_equals_the_numpy_walk_on_real_rows(predictor: Predictor) -> None:
    rows = [
        (
            JobFeatures(model=m, batch_size=b, precision=prec),
            HardwareFeatures(
                gpu_type=g, num_gpus=n, gpus_per_node=min(n, 8), num_nodes=max(1, n // 8), interconnect=ic
            ),
        )
        for m in model_names()
        for g in CANONICAL_TYPES[::3]
        for b in (32, 512)
        for n in (1, 3, 8, 16)
        for prec in ("fp32", "amp")
        for ic in ("nvlink", "pcie")
    ]
    x = feature_matrix([resolve(j, h) for j, h in rows])[0]
    f = predictor.model.forest
    # Same leaves; only the summation order differs (tree order here, numpy's pairwise sum there).
    np.testing.assert_allclose(f.predict(x), f.predict_numpy(x), rtol=1e-12, atol=1e-12)
    # Each row on its own gets the same bits as inside the batch.
    assert [f.predict(x[i : i + 1])[0] for i in range(0, len(x), 97)] == f.predict(x)[::97].tolist()


@native
def test_compiled_walk_equals_the_numpy_walk_on_odd_values(predictor: Predictor) -> None:
    f = predictor.model.forest
    rng = np.random.default_rng(7)
    nf = f._features
    x = rng.normal(0.0, 5.0, size=(333, nf))
    # Infinite and NaN features go where numpy sends them: never past a leaf (a leaf's NaN threshold
    # compares False even against +inf), NaN to the left as `x >= threshold` is False.
    x[::5, ::2] = np.inf
    x[1::5, 1::3] = -np.inf
    x[2::5, ::4] = np.nan
    np.testing.assert_allclose(f.predict(x), f.predict_numpy(x), rtol=1e-12, atol=1e-12)
    # Not C-contiguous float64 input is converted, not misread.
    xt = np.asfortranarray(x)
    np.testing.assert_allclose(f.predict(xt), f.predict_numpy(x), rtol=1e-12, atol=1e-12)
    assert f.predict(np.zeros((0, nf))).shape == (0,)


@native
def test_compiled_walk_refuses_buffers_that_do_not_match() -> None:
    walk = forest_module._native_walk
    assert walk is not None
    f = Forest.from_trees(
        [
            {
                "left": [1, -1, -1],
                "right": [2, -1, -1],
                "feature": [1, 0, 0],
                "threshold": [0.5, 0, 0],
                "value": [0, 10.0, 20.0],
            }
        ],
        0.5,
    )
    x = np.zeros((4, 2), dtype=np.float32)
    out = np.empty(4)
    walk(x, 2, f.roots, f.feature, f.threshold, f.child, f.value, f.depth, f.base, out)
    assert out.tolist() == [10.5] * 4  # x1 = 0 < 0.5: left leaf 10, plus base 0.5
    with pytest.raises(ValueError, match="one float64 per row"):
        walk(x, 2, f.roots, f.feature, f.threshold, f.child, f.value, f.depth, f.base, np.empty(3))
    with pytest.raises(ValueError, match="rows x nf"):
        walk(x, 3, f.roots, f.feature, f.threshold, f.child, f.value, f.depth, f.base, out)
    with pytest.raises(ValueError, match="different lengths"):
        walk(x, 2, f.roots, f.feature, f.threshold, f.child.astype(np.int32), f.value, f.depth, f.base, out)
    with pytest.raises(ValueError, match="needs 2 features"):
        f.predict(np.zeros((4, 1)))


def test_forest_refuses_node_arrays_the_walk_could_leave() -> None:
    ok = dict(
        roots=np.array([0]),
        feature=np.array([1, 0, 0]),
        threshold=np.array([0.5, np.nan, np.nan], dtype=np.float32),
        child=np.array([1, 1, 2]),
        value=np.array([0.0, 10.0, 20.0]),
        depth=1,
        base=0.5,
    )
    assert Forest(**ok).predict(np.array([[0.0, 1.0]])).tolist() == [20.5]  # x1 = 1 >= 0.5: right leaf
    with pytest.raises(ValueError, match="out of range"):
        Forest(**{**ok, "child": np.array([2, 1, 2])})  # the right child of node 0 would be node 3
    with pytest.raises(ValueError, match="out of range"):
        Forest(**{**ok, "child": np.array([1, 1, 5])})  # a leaf pointing outside
    with pytest.raises(ValueError, match="different lengths"):
        Forest(**{**ok, "value": np.array([0.0, 10.0])})
    with pytest.raises(ValueError, match="different lengths"):
        Forest(**{**ok, "roots": np.array([3])})
