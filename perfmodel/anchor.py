"""Measured anchors for GPU types a model was never measured on (Habitat-style scaling of a measurement).

When the shipped table has measurements of a job's model and dataset, but none on the question's GPU
type, a measured run of the same model on another GPU is a better guide than features alone (the accuracy
benchmark's leave-one-GPU-type-out split shows it). ``Anchors.iteration_times`` answers such rows with the
nearest measured configuration of that model (distance: |log per-GPU batch ratio| + |log GPU-count ratio|
+ 1 across the single-/multi-node divide; ties to the GPU with the closest specs), scaled to the
question's GPU by the spec ratio ``(effective TFLOP/s ratio)^0.5 x (memory bandwidth ratio)^0.5`` and
linearly in the GPU count; other rows get NaN. The predictor blends this anchor with its own estimate
(``ANCHOR_WEIGHT`` in log space).

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
