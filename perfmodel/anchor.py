"""Measured anchors for GPU types a model was never measured on (Habitat-style scaling of measurements).

When the shipped table has measurements of a job's model and dataset, but none on the question's GPU
type, measured runs of the same model on other GPUs are a better guide than features alone (the accuracy
benchmark's leave-one-GPU-type-out split shows it). The anchor of such a row has two smooth parts:

- per-GPU speed on one GPU, in work: the model's 1-GPU FLOP/s curve over the FLOPs per GPU per step
  (per-GPU batch x FLOPs per sample: one model's rows may differ in the work per sample, an LLM's
  sequence length; the query's FLOP/s there, over its work per sample, is its samples/s), pooled over the
  GPU types it was measured on at the job's precision and software stack (a group is one (model,
  dataset, precision, stack): MLPerf's tuned code and plain PyTorch, or fp32 and bf16 runs, are not one
  speed) after normalising each type by its spec, ``(peak TFLOP/s at the precision x memory
  bandwidth)^0.5`` with the peak the scaling model uses for the job: the median of the types' curves at
  the union of their measured points, each interpolated linearly in (log work per step, log FLOP/s);
  scaled to the question's GPU by the same spec. Above its largest measured work a curve stays flat
  (FLOP/s saturate); below its smallest it goes on with its own measured trend there (``_slope_below``:
  the slope to the first point at twice the work, held between 0, FLOP/s held, and 1, step time held;
  0.5 for a single point): held flat, a job at a per-GPU batch far under the measured ones would keep
  the FLOP/s of the smallest, per sample as fast as there (docs/decisions/0003-measured-anchors.md).
  A type measured only on
  several GPUs uses its smallest GPU count, per GPU. An fp8 job never measured in fp8 takes the group
  of its 16-bit runs, scaled to the GPU's effective FP8 rate (``gpus.fp8_tflops``: FP8 speeds up the
  GEMMs only, so not the FP8 peak; ``Anchors.group_index``).
- scaling efficiency on n GPUs: measured per-GPU throughput on n GPUs over that type's own 1-GPU curve at
  the same per-GPU batch (median over batches, capped at 1), per GPU count and node kind (one node /
  several), interpolated linearly in log GPU count (flat beyond; 1 on one GPU). The table of the measured
  type whose specs are closest to the question's GPU (``|log spec ratio|`` at the precision, ties to the
  first name) for that node kind, else the median over the model's types, else none (then only the
  1-GPU time is anchored).

So the anchor moves smoothly with the per-GPU batch and the GPU count, while keeping the model's measured
speed and scaling (a nearest-measurement anchor would jump between measured sites as GPUs are added; the
alternatives and their figures: docs/decisions/0003-measured-anchors.md).
``times_of`` answers rows given as arrays with two ``numpy.interp`` calls over all curves and tables.

Pure: built from a list of measurements.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import numpy.typing as npt

from perfmodel import llm
from perfmodel.datasets import canonical_dataset
from perfmodel.errors import InvalidInputError
from perfmodel.features import Resolved, effective_tflops, family_hint, fp32_in_tf32
from perfmodel.gpus import CANONICAL_TYPES, gpu_spec
from perfmodel.llm_fit import FIT, LLMFit
from perfmodel.measurements import Measurement
from perfmodel.scaling import JOB_COLUMNS, STACKS
from perfmodel.zoo import lookup_model

# Weight of the anchor in log space when it applies (the benchmark's best blend: 0.75; on the development
# splits (``bench/perfmodel_accuracy.py --dev``) too).
ANCHOR_WEIGHT = 0.75
# Exponent of the peak TFLOP/s in the spec a group's speeds are scaled by, the memory bandwidth's 1 minus
# it (0.3-0.7 compared on the development splits, ``bench/perfmodel_accuracy.py --dev``: 0.5 best).
SPEC_COMPUTE_WEIGHT = 0.5
# Curves and tables share one interpolation axis each: curve c's knots sit at c x _SPAN + log(x), with
# flat end knots at +-_EDGE around c x _SPAN (log per-GPU batches and log GPU counts lie well inside).
_SPAN = 200.0
_EDGE = 90.0
_LOG2 = math.log(2.0)
_ONE_POINT_SLOPE = 0.5
FloatArray = npt.NDArray[np.float64]


def _log_spec(gpu_type: str, precision: str, tf32_convolutions: bool) -> float:
    """Log of the spec a group's speeds are normalised by: ``(peak TFLOP/s at the group's precision x
    memory bandwidth)^0.5`` -- the rate the scaling model uses for the job (``features.effective_tflops``,
    ``Resolved.nums``' last column: TF32 for an fp32 job whose stack runs it in TF32 on Ampere and newer;
    for fp8
    the Amdahl blend of the FP8 and BF16 peaks, not the FP8 peak), the measure a question's GPU is scaled
    by."""
    s = gpu_spec(gpu_type)
    a = SPEC_COMPUTE_WEIGHT
    rate = effective_tflops(s, precision, tf32_convolutions)
    return a * math.log(rate) + (1.0 - a) * math.log(s.memory_bandwidth_gbs)


_STACK_NAMES = {code: name for name, code in STACKS.items()}
# Groups a job at a precision may be anchored by, in order (``Anchors.group_index``).
_FALLBACK = {"fp8": ("fp8", "bf16", "fp16", "amp")}


def stack_of(r: Resolved) -> str:
    """The software stack of a resolved row (``scaling.STACKS`` name)."""
    return _STACK_NAMES[int(r.nums[JOB_COLUMNS.index("stack")])]


class _Axis:
    """Piecewise-linear functions on one shared axis (see ``_SPAN``), evaluated with one ``np.interp``."""

    def __init__(self) -> None:
        self.x: list[float] = []
        self.y: list[float] = []
        self.count = 0

    def add(self, xs: Sequence[float], ys: Sequence[float], below: float = 0.0) -> int:
        """Add a function given by knots (sorted ``xs``), continued with slope ``below`` before its first
        knot and flat after its last; returns its id."""
        c = self.count
        (x0, *_), (y0, *_) = xs, ys
        self.x.extend([c * _SPAN - _EDGE, *(c * _SPAN + v for v in xs), c * _SPAN + _EDGE])
        self.y.extend([y0 - below * (x0 + _EDGE), *ys, ys[-1]])
        self.count += 1
        return c

    def arrays(self) -> tuple[FloatArray, FloatArray]:
        return np.asarray(self.x, dtype=np.float64), np.asarray(self.y, dtype=np.float64)


def _slope_below(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Slope in (log work per step, log FLOP/s) with which a 1-GPU curve goes on below its smallest
    measured work: its own measured trend from the first knot to the first at least twice the work (else
    the last), held between the physical bounds 0 (FLOP/s stays: the step time shrinks with the batch) and
    1 (the step time stays: a smaller step is never slower, nor faster per sample). A curve of one point
    has no trend: the middle, 0.5."""
    if len(xs) < 2:
        return _ONE_POINT_SLOPE
    j = next((i for i in range(1, len(xs)) if xs[i] - xs[0] >= _LOG2), len(xs) - 1)
    return min(1.0, max(0.0, (ys[j] - ys[0]) / (xs[j] - xs[0])))


def _extended(xs: Sequence[float], ys: Sequence[float]) -> tuple[list[float], list[float]]:
    """Knots of a 1-GPU curve continued below its points by ``_slope_below`` and flat above them (FLOP/s
    saturates), for ``np.interp``."""
    s = _slope_below(xs, ys)
    return [xs[0] - _EDGE, *xs, xs[-1] + _EDGE], [ys[0] - s * _EDGE, *ys, ys[-1]]


def _eff_knots(log_n: Sequence[float], effs: Sequence[float], kind: int) -> tuple[list[float], list[float]]:
    """Knots (log GPU count, log efficiency) of a table; in one node 1 GPU has efficiency 1."""
    xs, ys = list(log_n), [math.log(e) for e in effs]
    return ([0.0, *xs], [0.0, *ys]) if kind == 0 else (xs, ys)


def _median_by(pairs: Sequence[tuple[float, float]]) -> tuple[list[float], list[float]]:
    """Sorted distinct keys and the median of their values."""
    by: dict[float, list[float]] = defaultdict(list)
    for k, v in pairs:
        by[k].append(v)
    keys = sorted(by)
    return keys, [statistics.median(by[k]) for k in keys]


def at_default_plan(m: Measurement, fit: LLMFit = FIT) -> Measurement:
    """A zoo LLM's row as if run at the default memory plan (no activation checkpointing, the whole
    per-rank batch in one micro-batch): its speed times the scaling model's ratio between that plan and
    the one it ran with. An anchor knows only the work per GPU per step, so an LLM row's anchor is
    compared with the scaling model at that plan and the question's own plan is priced by the scaling
    model on every GPU type alike (``Predictor`` LLM rows). Other rows unchanged."""
    if not (m.micro_batch or m.activation_checkpointing):
        return m
    ran, hw = llm.question_of(m)
    if not isinstance(ran, llm.LLMJobFeatures):  # not a zoo LLM's row with a sequence length
        return m
    plain = replace(ran, micro_batch=None, activation_checkpointing=False)
    try:
        (fast, slow) = llm.predict([(plain, hw), (ran, hw)], fit).iters_per_s
    except InvalidInputError:
        return m
    return replace(m, iters_per_s=m.iters_per_s * fast / slow)


class Anchors:
    """Smooth measured anchors per (model, dataset); see the module docstring."""

    def __init__(self, measurements: Sequence[Measurement], llm_fit: LLMFit = FIT) -> None:
        measurements = [at_default_plan(m, llm_fit) for m in measurements]
        by: dict[tuple[str, str, str, str], dict[str, list[Measurement]]] = defaultdict(
            lambda: defaultdict(list)
        )
        work: dict[int, float] = {}
        for m in measurements:
            info = lookup_model(m.model)
            dataset = canonical_dataset(m.dataset) if m.dataset else (info.default_dataset if info else "")
            flops = m.flops_per_sample or (info.flops_on(dataset) if info else 0.0)
            if flops <= 0:
                continue
            work[id(m)] = float(flops)
            name = info.name if info else m.model.strip().lower()
            by[(name, dataset, m.precision, m.stack)][m.gpu_type].append(m)
        self._keys = sorted(by)
        # Per group: (smallest, largest) measured log work per GPU per step of its 1-GPU curve.
        self._work_range: list[tuple[float, float]] = []
        self._group_index = {k: i for i, k in enumerate(self._keys)}
        # Columns: every catalogued type, then one for anything else (never anchored).
        self._types = list(CANONICAL_TYPES)
        self._type_index = {t: i for i, t in enumerate(self._types)}
        shape = (len(self._keys), len(self._types) + 1)
        self.measured = np.zeros(shape, dtype=np.bool_)
        # Per (group, type column, node kind): the efficiency table (-1: none); per group: its curve.
        self._eff = np.full((*shape, 2), -1, dtype=np.int64)
        curves, tables = _Axis(), _Axis()
        for g, key in enumerate(self._keys):
            types = sorted(by[key])
            precision = key[2]
            info = lookup_model(key[0])
            conv = precision == "fp32" and fp32_in_tf32(info.family if info else family_hint(key[0]), key[3])
            # Per type: its spec-normalised 1-GPU curve (log per-GPU batch -> log per-GPU samples/s minus
            # the type's log spec), and per node kind {GPU count: efficiency}.
            norm: dict[str, tuple[list[float], list[float]]] = {}
            eff_of: dict[tuple[str, int], dict[float, float]] = {}
            for gpu_type in types:
                col = self._type_index.get(gpu_type)
                if col is not None:
                    self.measured[g, col] = True
                rows = by[key][gpu_type]
                n_min = min(m.num_gpus for m in rows)
                # In work: FLOPs per GPU per step -> FLOP/s per GPU (one model's rows may differ in the
                # work per sample: an LLM's sequence length).
                lbs, per_gpu = _median_by(
                    [
                        (m.local_batch_size * work[id(m)], m.samples_per_s / m.num_gpus * work[id(m)])
                        for m in rows
                        if m.num_gpus == n_min
                    ]
                )
                log_lb, log_s = _extended([math.log(b) for b in lbs], [math.log(v) for v in per_gpu])
                norm[gpu_type] = (log_lb, [v - _log_spec(gpu_type, precision, conv) for v in log_s])
                for kind in (0, 1):
                    pts = [m for m in rows if (m.num_nodes > 1) == bool(kind) and m.num_gpus > n_min]
                    # A type measured on n_min > 1 GPUs at the least: its curve is their per-GPU speed,
                    # so on n_min GPUs of that node kind its efficiency is 1 by construction (without
                    # this point a type measured only on 8 GPUs of one node, llm-foundry's H100s,
                    # anchored no in-node question at all).
                    at_min = [
                        (math.log(n_min), 1.0)
                        for m in rows
                        if n_min > 1 and m.num_gpus == n_min and (m.num_nodes > 1) == bool(kind)
                    ][:1]
                    if not pts and not at_min:
                        continue
                    ns, effs = _median_by(
                        [
                            *at_min,
                            *(
                                (
                                    math.log(m.num_gpus),
                                    math.exp(
                                        math.log(m.samples_per_s / m.num_gpus * work[id(m)])
                                        - float(
                                            np.interp(
                                                math.log(m.local_batch_size * work[id(m)]), log_lb, log_s
                                            )
                                        )
                                    ),
                                )
                                for m in pts
                            ),
                        ]
                    )
                    eff_of[(gpu_type, kind)] = {n: min(1.0, e) for n, e in zip(ns, effs, strict=True)}
            # The group's curve: the median of its types' normalised curves at the union of their batches.
            knots = sorted({v for u in types for v in norm[u][0][1:-1]})
            self._work_range.append((knots[0], knots[-1]))
            pooled_curve = [statistics.median(float(np.interp(v, *norm[u])) for u in types) for v in knots]
            curves.add(knots, pooled_curve, _slope_below(knots, pooled_curve))
            # Efficiency tables: each type's own per node kind, and the median over the types (fallback).
            pooled: dict[int, int] = {}
            for kind in (0, 1):
                vals = [(n, e) for (_, k), t in eff_of.items() if k == kind for n, e in t.items()]
                if vals:
                    pooled[kind] = tables.add(*_eff_knots(*_median_by(vals), kind))
            own = {
                uk: tables.add(*_eff_knots(sorted(t), [t[n] for n in sorted(t)], uk[1]))
                for uk, t in eff_of.items()
            }
            for col, target in enumerate(self._types):
                if self.measured[g, col]:
                    continue
                want = _log_spec(target, precision, conv)
                closest = min(types, key=lambda u: (abs(want - _log_spec(u, precision, conv)), u))
                for kind in (0, 1):
                    self._eff[g, col, kind] = own.get((closest, kind), pooled.get(kind, -1))
        self._cx, self._cy = curves.arrays()
        self._tx, self._ty = tables.arrays()

    def group_index(self, model: str, dataset: str, precision: str, stack: str) -> int:
        """Index of the (model, dataset, precision, stack) group for ``times_of``; -1 when it was never
        measured. An fp8 job never measured in fp8 takes its 16-bit group (bf16, then fp16/amp), scaled
        to the GPU's effective FP8 rate (``gpus.fp8_tflops``) by the spec like any other GPU."""
        for p in _FALLBACK.get(precision, (precision,)):
            g = self._group_index.get((model, dataset, p, stack))
            if g is not None:
                return g
        return -1

    def type_index(self, gpu_type: str) -> int:
        """Column of ``measured`` for a GPU type (anything uncatalogued: the last column, never anchored)."""
        return self._type_index.get(gpu_type, len(self._types))

    def times_of(
        self,
        group: npt.NDArray[np.int64],
        type_col: npt.NDArray[np.int64],
        local_batch: FloatArray,
        num_gpus: FloatArray,
        multi_node: FloatArray,
        log_eff: FloatArray,
        log_bw: FloatArray,
        log_flops: FloatArray,
    ) -> tuple[FloatArray, FloatArray]:
        """(anchored iteration time, anchored 1-GPU time at the same per-GPU batch) of rows given as arrays;
        NaN where no anchor applies (an unmeasured model, a measured GPU type, or an uncatalogued one).

        ``group`` from ``group_index``, ``type_col`` from ``type_index``; ``multi_node`` 1.0 where the row
        spans nodes; ``log_eff`` / ``log_bw`` the logs of the row GPU's peak TFLOP/s for the job (the last
        column of ``Resolved.nums``) and its memory bandwidth.
        """
        k = group.size
        t = np.full(k, np.nan)
        t1 = np.full(k, np.nan)
        ok = group >= 0
        ok[ok] = ~self.measured[group[ok], type_col[ok]] & (type_col[ok] < len(self._types))
        idx = np.flatnonzero(ok)
        if idx.size:
            t[idx], t1[idx] = self.times_where_applies(
                group[idx],
                type_col[idx],
                local_batch[idx],
                num_gpus[idx],
                multi_node[idx],
                log_eff[idx],
                log_bw[idx],
                log_flops[idx],
            )
        return t, t1

    def times_where_applies(
        self,
        group: npt.NDArray[np.intp],
        type_col: npt.NDArray[np.intp],
        local_batch: FloatArray,
        num_gpus: FloatArray,
        multi_node: FloatArray,
        log_eff: FloatArray,
        log_bw: FloatArray,
        log_flops: FloatArray,
    ) -> tuple[FloatArray, FloatArray]:
        """``times_of`` for rows known to be anchored (a measured group, a catalogued GPU type it was not
        measured on): the anchored time is NaN only where no efficiency table applies."""
        log_work = np.log(local_batch) + log_flops
        log_rate = np.interp(group * _SPAN + log_work, self._cx, self._cy) + (
            SPEC_COMPUTE_WEIGHT * log_eff + (1.0 - SPEC_COMPUTE_WEIGHT) * log_bw
        )
        t1: FloatArray = np.exp(log_work - log_rate)
        single = (num_gpus == 1.0) & (multi_node == 0.0)
        t: FloatArray = np.where(single, t1, np.nan)
        table = self._eff[group, type_col, (multi_node > 0).astype(np.int64)]
        many = np.flatnonzero(~single & (table >= 0))
        if many.size:
            log_e = np.interp(table[many] * _SPAN + np.log(num_gpus[many]), self._tx, self._ty)
            t[many] = t1[many] * np.exp(-log_e)
        return t, t1

    def applies(self, r: Resolved) -> bool:
        g = self.group_index(r.model, r.dataset, r.precision, stack_of(r))
        return (
            g >= 0
            and not r.spec.low_confidence
            and not bool(self.measured[g, self.type_index(r.spec.gpu_type)])
        )

    def work_position(self, r: Resolved) -> int:
        """Where a row's work per GPU per step lies against its group's measured 1-GPU curve: -1 below
        its smallest measured work, 1 above its largest, 0 inside (or no anchor applies)."""
        if not self.applies(r):
            return 0
        lo, hi = self._work_range[self.group_index(r.model, r.dataset, r.precision, stack_of(r))]
        w = math.log(r.local_batch * r.flops_per_sample)
        return -1 if w < lo - 1e-9 else (1 if w > hi + 1e-9 else 0)

    def iteration_times(self, rows: Sequence[Resolved]) -> tuple[FloatArray, FloatArray]:
        """``times_of`` for resolved rows: (anchored time of each row, of its 1-GPU twin); NaN where none."""
        return self.times_of(
            np.asarray(
                [self.group_index(r.model, r.dataset, r.precision, stack_of(r)) for r in rows], dtype=np.int64
            ),
            np.asarray(
                [
                    len(self._types) if r.spec.low_confidence else self.type_index(r.spec.gpu_type)
                    for r in rows
                ],
                dtype=np.int64,
            ),
            np.asarray([r.local_batch for r in rows], dtype=np.float64),
            np.asarray([float(r.num_gpus) for r in rows], dtype=np.float64),
            np.asarray([1.0 if r.num_nodes > 1 else 0.0 for r in rows], dtype=np.float64),
            np.log([r.nums[-1] for r in rows]),
            np.log([r.spec.memory_bandwidth_gbs for r in rows]),
            np.log([r.flops_per_sample for r in rows]),
        )
