"""Means and percentiles of float lists, equal bit for bit to numpy's ``mean`` and ``percentile``.

The simulator's report (``scheduler.sim.reports.summarize``) needs a few means and percentiles of some
10^4 values per run. numpy's import costs about 0.1 s of CPU, a tenth of a Philly 10k replay, so these
are computed in Python with numpy's own arithmetic, in the same order, so that every reported figure
is the float numpy gives (``tests/sim/test_stats.py`` compares them on random and edge-case inputs):

- ``mean``: numpy sums a float64 array by pairwise summation (``pairwise_sum`` in numpy's
  ``loops_utils.h``: blocks of up to 128 values summed in 8 interleaved partial sums, larger arrays
  split in two halves at a multiple of 8), then divides by the count.
- ``percentile``: numpy's default ``linear`` method: the virtual index ``(n - 1) * q / 100`` into the
  sorted values, and ``_lerp``'s interpolation between its neighbours (``a + (b - a) * t``, or
  ``b - (b - a) * (1 - t)`` when ``t >= 0.5``); any NaN gives NaN.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

_BLOCK = 128  # numpy's PW_BLOCKSIZE


def _pairwise(a: Sequence[float], lo: int, n: int) -> float:
    """numpy's ``pairwise_sum`` of ``a[lo:lo + n]``."""
    if n < 8:
        res = 0.0
        for i in range(lo, lo + n):
            res += a[i]
        return res
    if n <= _BLOCK:
        r0, r1, r2, r3, r4, r5, r6, r7 = a[lo : lo + 8]
        end = lo + n - n % 8
        i = lo + 8
        while i < end:
            r0 += a[i]
            r1 += a[i + 1]
            r2 += a[i + 2]
            r3 += a[i + 3]
            r4 += a[i + 4]
            r5 += a[i + 5]
            r6 += a[i + 6]
            r7 += a[i + 7]
            i += 8
        res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
        for j in range(i, lo + n):
            res += a[j]
        return res
    n2 = n // 2
    n2 -= n2 % 8
    return _pairwise(a, lo, n2) + _pairwise(a, lo + n2, n - n2)


def fsum_numpy(values: Sequence[float]) -> float:
    """``float(np.sum(np.asarray(values, dtype=float)))``."""
    return _pairwise(values, 0, len(values))


def mean(values: Sequence[float]) -> float:
    """``float(np.mean(values))`` for a non-empty list of floats (NaN for an empty one)."""
    if not values:
        return math.nan
    return fsum_numpy(values) / len(values)


def percentile(values: Sequence[float], q: float) -> float:
    """``float(np.percentile(values, q))`` (method ``linear``); NaN for an empty list."""
    n = len(values)
    if not n:
        return math.nan
    if any(v != v for v in values):
        return math.nan
    ordered = sorted(values)
    virtual = (n - 1) * (q / 100)
    if virtual >= n - 1:
        prev = nxt = n - 1
        gamma = virtual - (-1)
    elif virtual < 0:
        prev = nxt = 0
        gamma = virtual
    else:
        prev = math.floor(virtual)
        nxt = prev + 1
        gamma = virtual - prev
    a, b = ordered[prev], ordered[nxt]
    diff = b - a
    if gamma >= 0.5:
        return b - diff * (1 - gamma)
    return a + diff * gamma
