"""The learned correction's tree ensemble as flat arrays, walked for many rows at once.

``Forest`` holds gradient-boosted trees (XGBoost, trained by ``perfmodel.train``) as flat numpy arrays and
evaluates them with the compiled walk of ``perfmodel/_forest.c`` where it is built, else with numpy; the
two agree exactly (``tests/perfmodel/test_forest_native.py``). Serving needs neither xgboost's import time
nor its per-call overhead. Pure.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

log = logging.getLogger(__name__)
FloatArray = npt.NDArray[np.float64]


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


# Lanes (rows x trees) per forest pass: the walk's index arrays stay below glibc's 128 KiB mmap threshold
# (12,800 x 8 bytes = 100 KiB; 320 rows of 40 trees), so its temporaries come from the heap instead of
# fresh, page-faulting mappings (``bench/perfmodel_speed.py`` times the walk).
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
