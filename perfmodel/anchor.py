"""Measured anchors for GPU types a model was never measured on (Habitat-style scaling of a measurement).

When the shipped table has measurements of a job's model and dataset, but none on the question's GPU
type, a measured run of the same model on another GPU is a better guide than features alone (the accuracy
benchmark's leave-one-GPU-type-out split shows it). ``Anchors.iteration_times`` answers such rows with the
nearest measured configuration of that model (distance: |log per-GPU batch ratio| + |log GPU-count ratio|
+ 1 across the single-/multi-node divide; ties to the GPU with the closest specs), scaled to the
question's GPU by the spec ratio ``(effective TFLOP/s ratio)^0.5 x (memory bandwidth ratio)^0.5`` and
linearly in the GPU count; other rows get NaN. The predictor blends this anchor with its own estimate
(``ANCHOR_WEIGHT`` in log space).

``times_of`` is the same lookup for rows given as arrays (the predictor's batch path): the nearest site
(a measured per-GPU batch, GPU count and node kind) first, then the GPU at that site with the closest
specs; rows whose second-nearest site is within the tie-break term's bound get the full distance.

Pure: built from a list of measurements; vectorised per (model, dataset) group.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from perfmodel.features import Resolved, effective_tflops
from perfmodel.gpus import GPUSpec, gpu_spec
from perfmodel.measurements import Measurement

# Weight of the anchor in log space when it applies (the benchmark's best blend: 0.75).
ANCHOR_WEIGHT = 0.75
# Bound (with room for rounding) on the spec tie-break term of the distance: 1e-3 x half the log spec
# ratio, and no two catalogued GPUs are 10^4 apart in FLOP/s x bandwidth.
_TIE_BOUND = 1e-3 * 0.5 * math.log(1e4) * 1.01
FloatArray = npt.NDArray[np.float64]


class _Group:
    """One (model, dataset)'s measurements as arrays; layouts with the same GPU type, GPU count, node kind
    and per-GPU batch (Pollux measures several) are one point with their median throughput."""

    def __init__(self, rows: Sequence[Measurement]) -> None:
        points: dict[tuple[str, int, bool, float], list[float]] = defaultdict(list)
        for m in rows:
            points[(m.gpu_type, m.num_gpus, m.num_nodes > 1, m.local_batch_size)].append(m.samples_per_s)
        keys = sorted(points)
        self.gpu_types = sorted({k[0] for k in keys})
        self.log_lb = np.log([k[3] for k in keys])
        self.log_n = np.log([float(k[1]) for k in keys])
        self.multi = np.asarray([1.0 if k[2] else 0.0 for k in keys])
        self.n = np.asarray([float(k[1]) for k in keys])
        self.samples = np.asarray([statistics.median(points[k]) for k in keys])
        self.specs: list[GPUSpec] = [gpu_spec(k[0]) for k in keys]
        self.log_fp32 = np.log([s.fp32_tflops for s in self.specs])
        self.log_bw = np.log([s.memory_bandwidth_gbs for s in self.specs])
        # Sites: the distinct (per-GPU batch, GPU count, node kind) measured, each with the points
        # (GPU types) measured there in index order, padded with -1 (``times_of`` searches sites first).
        sites: dict[tuple[int, bool, float], list[int]] = defaultdict(list)
        for i, k in enumerate(keys):
            sites[(k[1], k[2], k[3])].append(i)
        site_keys = list(sites)
        self.site_log_lb = np.log([k[2] for k in site_keys])
        self.site_log_n = np.log([float(k[0]) for k in site_keys])
        self.site_multi = np.asarray([1.0 if k[1] else 0.0 for k in site_keys])
        width = max(len(v) for v in sites.values())
        self.site_points = np.full((len(site_keys), width), -1, dtype=np.int64)
        for s, site in enumerate(site_keys):
            self.site_points[s, : len(sites[site])] = sites[site]
        pad = self.site_points < 0
        self.site_fp32 = np.where(pad, np.inf, self.log_fp32[self.site_points])
        self.site_bw = np.where(pad, np.inf, self.log_bw[self.site_points])


def _ratio(ref: GPUSpec, target: GPUSpec, precision: str) -> float:
    """Speed of ``target`` at ``precision`` relative to ``ref`` measured in fp32 (roofline blend)."""
    flops = effective_tflops(target, precision) / ref.fp32_tflops
    bandwidth = target.memory_bandwidth_gbs / ref.memory_bandwidth_gbs
    return math.sqrt(flops * bandwidth)


class Anchors:
    """Nearest-measurement anchors per (model, dataset); see the module docstring."""

    def __init__(self, measurements: Sequence[Measurement]) -> None:
        groups: dict[tuple[str, str], list[Measurement]] = defaultdict(list)
        for m in measurements:
            groups[(m.model, m.dataset)].append(m)
        self._groups = {k: _Group(v) for k, v in groups.items()}
        # The array path (``times_of``): groups by index, and which GPU types each group measured.
        self._keys = sorted(self._groups)
        self._group_index = {k: i for i, k in enumerate(self._keys)}
        types = sorted({t for g in self._groups.values() for t in g.gpu_types})
        self._type_index = {t: i for i, t in enumerate(types)}
        # One column more than there are measured types: every other GPU type (never measured).
        self.measured = np.zeros((len(self._keys), len(types) + 1), dtype=np.bool_)
        for i, k in enumerate(self._keys):
            for t in self._groups[k].gpu_types:
                self.measured[i, self._type_index[t]] = True
        # Every group's points and sites concatenated (``times_of`` indexes them globally).
        gs = [self._groups[k] for k in self._keys]
        point_off = np.cumsum([0] + [g.samples.size for g in gs])
        self._site_off = np.cumsum([0] + [g.site_log_lb.size for g in gs])
        self._samples = np.concatenate([g.samples for g in gs]) if gs else np.zeros(0)
        self._n = np.concatenate([g.n for g in gs]) if gs else np.zeros(0)
        self._log_fp32 = np.concatenate([g.log_fp32 for g in gs]) if gs else np.zeros(0)
        self._log_bw = np.concatenate([g.log_bw for g in gs]) if gs else np.zeros(0)
        width = max((g.site_points.shape[1] for g in gs), default=1)
        self._site_points = np.zeros((int(self._site_off[-1]), width), dtype=np.int64)
        self._site_fp32 = np.full(self._site_points.shape, np.inf)
        self._site_bw = np.full(self._site_points.shape, np.inf)
        for g, p0, s0 in zip(gs, point_off, self._site_off, strict=False):
            rows = slice(int(s0), int(s0) + g.site_points.shape[0])
            cols = slice(0, g.site_points.shape[1])
            self._site_points[rows, cols] = np.where(g.site_points < 0, 0, g.site_points + p0)
            self._site_fp32[rows, cols] = g.site_fp32
            self._site_bw[rows, cols] = g.site_bw
        self._point_off = point_off

    def group_index(self, model: str, dataset: str) -> int:
        """Index of the (model, dataset) group for ``times_of``; -1 when it was never measured."""
        return self._group_index.get((model, dataset), -1)

    def type_index(self, gpu_type: str) -> int:
        """Column of ``measured`` for a GPU type (types measured for no model share the last column)."""
        return self._type_index.get(gpu_type, len(self._type_index))

    def times_of(
        self,
        group: npt.NDArray[np.int64],
        local_batch: FloatArray,
        num_gpus: FloatArray,
        multi_node: FloatArray,
        log_fp32: FloatArray,
        log_eff: FloatArray,
        log_bw: FloatArray,
    ) -> tuple[FloatArray, FloatArray]:
        """``iteration_times`` for rows given as arrays, all of which the anchor applies to.

        ``group`` from ``group_index``; ``multi_node`` 1.0 where the row spans nodes; ``log_fp32`` /
        ``log_bw`` the logs of the row GPU's FP32 TFLOP/s and memory bandwidth, ``log_eff`` of its
        ``effective_tflops`` at the row's precision. The same numbers as ``iteration_times``, grouped once
        with numpy instead of per row; a 1-GPU row is its own 1-GPU twin.
        """
        k = group.size
        multi = np.flatnonzero(num_gpus > 1.0)
        # questions: the rows, then the 1-GPU twins (same per-GPU batch) of the multi-GPU rows
        q_group = np.concatenate((group, group[multi]))
        q_lb = np.concatenate((local_batch, local_batch[multi]))
        q_n = np.concatenate((num_gpus, np.ones(multi.size)))
        q_multi = np.concatenate((multi_node, np.zeros(multi.size)))
        q_fp32 = np.concatenate((log_fp32, log_fp32[multi]))
        q_eff = np.concatenate((log_eff, log_eff[multi]))
        q_bw = np.concatenate((log_bw, log_bw[multi]))
        # Sorted by group, each group's questions are one slice.
        order = np.argsort(q_group, kind="stable")
        q_group, q_lb, q_n, q_multi = q_group[order], q_lb[order], q_n[order], q_multi[order]
        q_fp32, q_eff, q_bw = q_fp32[order], q_eff[order], q_bw[order]
        log_lb, log_n = np.log(q_lb), np.log(q_n)
        bounds = np.flatnonzero(np.diff(q_group)) + 1
        starts = np.concatenate(([0], bounds)).tolist()
        ends = np.concatenate((bounds, [q_group.size])).tolist()
        site = np.empty(q_group.size, dtype=np.int64)
        point = np.full(q_group.size, -1, dtype=np.int64)
        for a, b in zip(starts, ends, strict=True):
            gi = int(q_group[a])
            g = self._groups[self._keys[gi]]
            lb_q, n_q, m_q = log_lb[a:b, None], log_n[a:b, None], q_multi[a:b, None]
            # Nearest site by per-GPU batch, GPU count and node kind.
            d0 = np.abs(g.site_log_lb - lb_q) + np.abs(g.site_log_n - n_q)
            d0 += np.abs(g.site_multi - m_q)
            if d0.shape[1] == 1:
                site[a:b] = self._site_off[gi]
                continue
            two = np.partition(d0, 1, axis=1)
            site[a:b] = np.argmin(d0, axis=1) + self._site_off[gi]
            # Another site within _TIE_BOUND of the best could win on the spec tie-break term: those
            # questions get the full distance over every point of the group (as ``iteration_times``).
            near = np.flatnonzero(two[:, 1] - two[:, 0] <= _TIE_BOUND)
            if near.size:
                w = near + a
                dist = np.abs(g.log_lb[None, :] - log_lb[w][:, None]) + np.abs(
                    g.log_n[None, :] - log_n[w][:, None]
                )
                dist += np.abs(g.multi[None, :] - q_multi[w][:, None])
                dist += 1e-3 * np.abs(
                    0.5 * (q_fp32[w][:, None] - g.log_fp32[None, :] + q_bw[w][:, None] - g.log_bw[None, :])
                )
                point[w] = np.argmin(dist, axis=1) + self._point_off[gi]
        # At the chosen site, the measured GPU whose specs are closest to the question's.
        spec = np.abs(0.5 * (q_fp32[:, None] - self._site_fp32[site] + q_bw[:, None] - self._site_bw[site]))
        j = np.where(point >= 0, point, self._site_points[site, np.argmin(spec, axis=1)])
        # Roofline blend of the question's GPU (at its precision) over the measured one (fp32).
        ratio = np.exp(0.5 * (q_eff - self._log_fp32[j] + q_bw - self._log_bw[j]))
        samples = self._samples[j] * ratio * q_n / self._n[j]
        times = np.empty(q_group.size)
        times[order] = q_lb * q_n / samples
        t1 = times[:k].copy()
        t1[multi] = times[k:]
        return times[:k], t1

    def applies(self, r: Resolved) -> bool:
        g = self._groups.get((r.model, r.dataset))
        return g is not None and r.spec.gpu_type not in g.gpu_types and not r.spec.low_confidence

    def iteration_time(self, r: Resolved, num_gpus: int, local_batch: float, multi_node: bool) -> float:
        """Anchored iteration time for ``r``'s job on ``num_gpus`` GPUs of its type (NaN if none)."""
        g = self._groups.get((r.model, r.dataset))
        if g is None or r.spec.gpu_type in g.gpu_types or r.spec.low_confidence:
            return math.nan
        dist = np.abs(g.log_lb - math.log(local_batch)) + np.abs(g.log_n - math.log(num_gpus))
        dist += np.abs(g.multi - (1.0 if multi_node else 0.0))
        # Ties go to the measured GPU whose specs are closest to the question's.
        log_ratio = 0.5 * (
            math.log(r.spec.fp32_tflops) - g.log_fp32 + math.log(r.spec.memory_bandwidth_gbs) - g.log_bw
        )
        dist += 1e-3 * np.abs(log_ratio)
        j = int(np.argmin(dist))
        samples = g.samples[j] * _ratio(g.specs[j], r.spec, r.precision) * num_gpus / g.n[j]
        return float(local_batch * num_gpus / samples)

    def iteration_times(self, rows: Sequence[Resolved]) -> tuple[FloatArray, FloatArray]:
        """(anchored time of each row, anchored time of its 1-GPU twin); NaN where no anchor applies.

        Vectorised per (model, dataset): one distance matrix (questions x measurements) per group.
        """
        k = len(rows)
        t = np.full(k, np.nan)
        t1 = np.full(k, np.nan)
        by_group: dict[tuple[str, str], list[int]] = defaultdict(list)
        for i, r in enumerate(rows):
            if self.applies(r):
                by_group[(r.model, r.dataset)].append(i)
        for key, idx in by_group.items():
            g = self._groups[key]
            qs = [rows[i] for i in idx]
            m = len(qs)
            # questions: the rows, then their 1-GPU twins at the same per-GPU batch
            lb = np.asarray([r.local_batch for r in qs] * 2)
            n = np.concatenate((np.asarray([float(r.num_gpus) for r in qs]), np.ones(m)))
            multi = np.concatenate((np.asarray([1.0 if r.num_nodes > 1 else 0.0 for r in qs]), np.zeros(m)))
            fp32 = np.log([r.spec.fp32_tflops for r in qs] * 2)
            eff = np.log([effective_tflops(r.spec, r.precision) for r in qs] * 2)
            bw = np.log([r.spec.memory_bandwidth_gbs for r in qs] * 2)
            dist = np.abs(g.log_lb[None, :] - np.log(lb)[:, None]) + np.abs(
                g.log_n[None, :] - np.log(n)[:, None]
            )
            dist += np.abs(g.multi[None, :] - multi[:, None])
            # ties go to the measured GPU whose specs are closest to the question's
            dist += 1e-3 * np.abs(
                0.5 * (fp32[:, None] - g.log_fp32[None, :] + bw[:, None] - g.log_bw[None, :])
            )
            j = np.argmin(dist, axis=1)
            # roofline blend of the question's GPU (at its precision) over the measured one (fp32)
            ratio = np.exp(0.5 * (eff - g.log_fp32[j] + bw - g.log_bw[j]))
            samples = g.samples[j] * ratio * n / g.n[j]
            times = lb * n / samples
            t[idx] = times[:m]
            t1[idx] = times[m:]
        return t, t1
