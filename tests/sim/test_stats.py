"""``scheduler.sim.stats`` gives numpy's means and percentiles bit for bit (the report's figures)."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from scheduler.sim import stats

# sizes around the pairwise summation's block edges (8, 128) and numpy's buffer size (8192)
SIZES = (1, 2, 7, 8, 9, 15, 16, 17, 127, 128, 129, 255, 256, 257, 1000, 8191, 8192, 8193, 10_000, 20_001)


def _values(rng: random.Random, n: int, kind: int) -> list[float]:
    if kind == 0:
        return [rng.lognormvariate(5.0, 3.0) for _ in range(n)]
    if kind == 1:
        return [rng.uniform(-1e6, 1e6) for _ in range(n)]
    return [rng.randint(0, 10**6) / 7 for _ in range(n)]


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("kind", [0, 1, 2])
def test_mean_and_percentiles_equal_numpys(n: int, kind: int) -> None:
    values = _values(random.Random(n * 3 + kind), n, kind)
    arr = np.asarray(values, dtype=float)
    assert stats.mean(values) == float(arr.mean())
    for q in (0, 1, 25, 50, 99, 99.9, 100):
        assert stats.percentile(values, q) == float(np.percentile(arr, q)), q


def test_naive_sum_differs_so_the_test_can_fail() -> None:
    """On these values a left-to-right sum is not numpy's: the pairwise order matters."""
    values = _values(random.Random(5), 10_000, 0)
    assert stats.fsum_numpy(values) == float(np.sum(values))
    assert sum(values) != float(np.sum(values))


def test_empty_and_nan() -> None:
    assert math.isnan(stats.mean([]))
    assert math.isnan(stats.percentile([], 50))
    assert math.isnan(stats.percentile([1.0, math.nan, 2.0], 50))
