"""The throughput predictor: batch API, result cache, routes and the in-node envelope.

For a job on ``n`` GPUs at per-GPU batch ``b`` (global batch / n) the learned route predicts

    time = (compute time at b + ring all-reduce time) x exp(forest(features))

the scaling model of ``perfmodel.scaling`` under the model file's fitted ``Physics`` (a GPU is seen
through its datasheet: peak FLOP/s at the job's precision, memory bandwidth, links) times the learned
correction of ``perfmodel.learned`` (trees on ``log(measured / modelled time)``, so unseen GPUs, GPU counts
and placements follow the scaling model's physics rather than a tree's flat extrapolation), blended with
the measured anchors of ``perfmodel.anchor`` and bounded by the physical guards of
``LearnedModel.times``. LLM jobs take the LLM step model (``perfmodel.llm``), anchored to measured rows of
the same model where the table has them. Rows on several GPUs of one node get the in-node envelope and
rows across nodes the cross-node correction (``perfmodel.envelope``). Samples/s = iterations/s x global
batch.

Serving evaluates exactly the functions training does: each batch of rows becomes a matrix of
``Resolved.nums``, then ``scaling.design_of_nums`` and ``LearnedModel.times``; there is no second copy
of any of them here. ``Predictor.predict`` caches results per (job features, placement) in a bounded
LRU; uncached rows are computed together, in one numpy pass over numeric tables of the checked job and
placement sides, and the envelope's extra rows that coincide with each other or with rows of the batch
are computed once.

The interval ``[low, high]`` is the prediction times the 10th / 90th percentile of out-of-fold error
ratios from training, widened 2x (in log space) for low-confidence rows (model or GPU not in the zoo or
catalogue) and placements larger than any training row. Pure apart from ``Predictor.load`` (reads the
model file and the shipped measured table).
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections import OrderedDict
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from perfmodel import llm
from perfmodel.anchor import ANCHOR_WEIGHT, Anchors
from perfmodel.envelope import ENVELOPE_MODES, FALL_RATIO, MeasuredInNode
from perfmodel.errors import InvalidInputError
from perfmodel.features import (
    HardwareFeatures,
    HardwarePart,
    JobFeatures,
    JobPart,
    Resolved,
    combine,
    resolve_hw,
    resolve_job,
)
from perfmodel.learned import LearnedModel, ModelMeta, read_model
from perfmodel.llm_fit import FIT
from perfmodel.measurements import read_table

# ``Predictor.predict``'s answer type, importable from here as from its own module
from perfmodel.predictions import Predictions as Predictions
from perfmodel.scaling import HW_COLUMNS, JOB_COLUMNS, LINK_NVLINK, NUM_COLUMNS, Design, design_of_nums
from perfmodel.truth import TABLE_NAME

log = logging.getLogger(__name__)


MODEL_FILE = "predictor.json"
FloatArray = npt.NDArray[np.float64]
_Key = tuple[object, ...]


class _Table:
    """Rows of numbers that grow by appending (capacity doubles); ``rows`` is the filled part."""

    def __init__(self, width: int, dtype: type[np.generic] = np.float64) -> None:
        self._data = np.zeros((16, width), dtype=dtype)
        self.size = 0

    def add(self, values: Sequence[float]) -> int:
        if self.size == self._data.shape[0]:
            self._data = np.concatenate((self._data, np.zeros_like(self._data)))
        self._data[self.size] = values
        self.size += 1
        return self.size - 1

    @property
    def rows(self) -> npt.NDArray[Any]:
        return self._data[: self.size]

    def tail(self, start: int) -> npt.NDArray[Any]:
        """The filled rows from ``start`` on (a view: writable)."""
        return self._data[start : self.size]


# Extra columns of the job table after ``JobPart.nums``: precision column of the placement's peaks, anchor
# group, low confidence, row of ``MeasuredInNode.largest``.
_JN = len(JOB_COLUMNS)
_J_PREC, _J_GROUP, _J_LOW, _J_CURVE = _JN, _JN + 1, _JN + 2, _JN + 3
_J_WIDTH = _JN + 4
# Extra columns of the placement table after ``HardwarePart.nums``: peak TFLOP/s per precision column
# (``HardwarePart.tflops_by_precision``), low confidence, GPU type's column in ``Anchors.measured``, log
# memory bandwidth, placement class (``Predictor._classes``), column of ``MeasuredInNode.largest``.
_HN = len(HW_COLUMNS)
_H_TF = _HN
_NTF = 7
_H_LOW, _H_TYPE, _H_LOGBW, _H_CLASS, _H_CTYPE, _H_SEEN = (_HN + _NTF + i for i in range(6))
_H_WIDTH = _HN + _NTF + 6
# Columns of ``HardwarePart.nums`` read directly: GPUs, nodes, GPUs per node, link class (``LINK_*``).
_H_GPUS, _H_NODES, _H_GPN, _H_LINK = (
    HW_COLUMNS.index(c) for c in ("gpus", "nodes", "gpus_per_node", "link_class")
)
_NUM_WIDTH = len(NUM_COLUMNS)
# Columns of a ``Resolved.nums`` matrix read by the cross-node correction: stack code, link GB/s.
_M_STACK = JOB_COLUMNS.index("stack")
_M_LINK = _JN + HW_COLUMNS.index("link_gbs")


class Predictor:
    """Batch throughput predictor with a per-(job, placement) cache. Build with ``Predictor.load()``.

    The job and placement sides of rows are checked once each and kept as rows of two numeric tables, so
    a batch of uncached rows is two dictionary look-ups per row and then numpy over the whole batch.
    """

    def __init__(
        self,
        model: LearnedModel,
        meta: ModelMeta,
        cache_size: int = 65536,
        anchors: Anchors | None = None,
        in_node_envelope: bool | None = None,
        measured: MeasuredInNode | None = None,
        envelope: str = "auto",
    ) -> None:
        if envelope not in ENVELOPE_MODES:
            raise ValueError(f"envelope must be one of {', '.join(ENVELOPE_MODES)}, got {envelope!r}")
        self.model = model
        self.meta = meta
        self.anchors = anchors
        # The LLM scaling model's constants (the shipped ``llm_fit.FIT``; the accuracy benchmark refits them
        # on each split's training rows).
        self.llm_fit = FIT
        # Without ``measured`` every row extrapolates: "auto" then applies the envelope to every row on
        # several GPUs of one node, like "always".
        self.measured = measured
        self.envelope = envelope
        if in_node_envelope is not None:
            self.in_node_envelope = in_node_envelope
        # Results per row: (samples/s, iterations/s, low, high, low confidence). Keyed by the row itself
        # (cached hashes; a repeated row object is found by identity), the side tables by ``.key`` tuples.
        self._cache: OrderedDict[
            tuple[JobFeatures, HardwareFeatures], tuple[float, float, float, float, bool]
        ] = OrderedDict()
        self._cache_size = cache_size
        # LLM rows: the factor their measured anchor moves the scaling model's answer by (1: none applies).
        self._llm_anchor_factors: dict[tuple[JobFeatures, HardwareFeatures], float] = {}
        self._reset_parts()

    @property
    def in_node_envelope(self) -> bool:
        """Whether the in-node envelope applies anywhere (``envelope`` is not "never")."""
        return self.envelope != "never"

    @in_node_envelope.setter
    def in_node_envelope(self, on: bool) -> None:
        """``True``: the envelope where the rule says ("auto"); ``False``: nowhere ("never")."""
        self.envelope = "auto" if on else "never"

    def envelope_applies(self, job: JobFeatures, hw: HardwareFeatures) -> bool:
        """Whether the in-node envelope applies to this row (``InvalidInputError`` on a bad row): it is on
        several GPUs of one node and, in "auto" mode, not inside a measured in-node curve that falls (see
        ``MeasuredInNode.follows``)."""
        if llm.is_llm_job(job):
            return False  # LLM rows come from perfmodel.llm, which has no in-node envelope
        j, h = self._ids(job, hw)
        # Scalar twin of ``_envelope_rows`` (the online correction asks row by row).
        hrow = self._htab.rows[h]
        n = float(hrow[_H_GPUS])
        if self.envelope == "never" or hrow[_H_NODES] != 1.0 or n <= 1.0:
            return False
        if self.envelope == "always" or self.measured is None:
            return True
        cell = (int(self._jtab.rows[j, _J_CURVE]), int(hrow[_H_CTYPE]), int(hrow[_H_LINK] == LINK_NVLINK))
        return not (n <= self.measured.largest[cell] and self.measured.floor[cell] < FALL_RATIO)

    def _envelope_rows(self, jt: FloatArray, ht: FloatArray) -> npt.NDArray[np.bool_]:
        """Per row (job and placement table rows): does the in-node envelope apply?"""
        n = ht[:, _H_GPUS]
        if self.envelope == "never":
            return np.zeros(n.size, dtype=np.bool_)
        on: npt.NDArray[np.bool_] = (ht[:, _H_NODES] == 1.0) & (n > 1.0)
        if self.envelope == "auto" and self.measured is not None and on.any():
            on &= ~self.measured.follows(
                jt[:, _J_CURVE].astype(np.intp),
                ht[:, _H_CTYPE].astype(np.intp),
                ht[:, _H_LINK] == LINK_NVLINK,
                n,
            )
        return on

    def _reset_parts(self) -> None:
        self._jobs: dict[_Key, int] = {}
        self._hws: dict[_Key, int] = {}
        self._job_parts: list[JobPart] = []
        self._hw_parts: list[HardwarePart] = []
        self._jtab = _Table(_J_WIDTH)
        self._htab = _Table(_H_WIDTH)
        # Placement classes for the in-node envelope: the placement key without its GPU count, node
        # count and network (one node's links depend only on the GPU and its interconnect).
        self._classes: dict[_Key, int] = {}

    @classmethod
    def load(cls, path: Path | None = None, cache_size: int = 65536, anchors: bool = True) -> Predictor:
        """Load the shipped model (or ``path``); ``ModelFileError`` if missing, corrupt or other schema.

        ``anchors`` (default on) blends the measured anchors (``perfmodel.anchor``) in where a model was
        measured at the job's precision and software stack but never on the question's GPU type: its
        measured speed carried over by the spec ratio, so a GPU generation the model never saw gets the
        physics answer where the learned correction would extrapolate. Anchors are kept per stack and
        precision (tuned-code and half-precision speeds do not carry over to other stacks and precisions)
        and follow the measured trend below the smallest measured batch (the measurements behind both:
        docs/decisions/0003-measured-anchors.md).
        """
        with_anchors = anchors
        if path is None:
            with resources.as_file(resources.files("perfmodel") / "data" / MODEL_FILE) as p:
                model, meta = read_model(Path(p))
        else:
            model, meta = read_model(path)
        # The measured table (beside a given model file, else the shipped one) tells the in-node envelope's
        # rule which in-node curves were measured (and anchors GPU types a model was never measured on,
        # when asked); without it the predictor still works, with the envelope on every one-node row.
        anchor_table = None
        with resources.as_file(resources.files("perfmodel") / "data" / TABLE_NAME) as shipped:
            beside = Path(path).parent / TABLE_NAME if path is not None else None
            source = beside if beside is not None and beside.is_file() else Path(shipped)
            measured = None
            if source.is_file():
                table = read_table(source)
                anchor_table = Anchors(table) if with_anchors else None
                measured = MeasuredInNode(table)
        return cls(model, meta, cache_size, anchor_table, measured=measured)

    def clear_cache(self) -> None:
        """Forget cached results (the resolved job and placement sides stay cached)."""
        self._cache.clear()
        self._llm_anchor_factors.clear()

    def resolve(self, job: JobFeatures, hw: HardwareFeatures) -> Resolved:
        """``features.resolve`` with the job and placement sides cached separately (they recur)."""
        j, h = self._ids(job, hw)
        return combine(self._job_parts[j], self._hw_parts[h])

    def _ids(self, job: JobFeatures, hw: HardwareFeatures) -> tuple[int, int]:
        """Rows of the job and placement tables for a row, checking and adding sides not seen before."""
        j = self._jobs.get(job.key)
        h = self._hws.get(hw.key)
        if j is None or h is None:
            j, h = self._add(job, hw)
        return j, h

    def _add(self, job: JobFeatures, hw: HardwareFeatures) -> tuple[int, int]:
        jp = resolve_job(job) if job.key not in self._jobs else None
        hp = resolve_hw(hw) if hw.key not in self._hws else None
        if jp is not None:
            group = (
                self.anchors.group_index(jp.model, jp.dataset, jp.precision, job.stack)
                if self.anchors is not None
                else -1
            )
            curve = self.measured.group_index(jp.model, jp.dataset) if self.measured is not None else 0
            self._jobs[job.key] = self._jtab.add(
                (*jp.nums, jp.precision_index, group, jp.low_confidence, curve)
            )
            self._job_parts.append(jp)
        if hp is not None:
            spec = hp.spec
            gtype = self.anchors.type_index(spec.gpu_type) if self.anchors is not None else 0
            self._hws[hw.key] = self._htab.add(
                (
                    *hp.nums,
                    *hp.tflops_by_precision,
                    spec.low_confidence,
                    gtype,
                    math.log(spec.memory_bandwidth_gbs),
                    self._classes.setdefault(
                        (hw.gpu_type, hw.interconnect, hw.memory_mib, hw.compute_capability),
                        len(self._classes),
                    ),
                    self.measured.type_index(spec.gpu_type, spec.low_confidence)
                    if self.measured is not None
                    else 0,
                    not spec.low_confidence and spec.gpu_type in self.model.seen_types,
                )
            )
            self._hw_parts.append(hp)
        return self._jobs[job.key], self._hws[hw.key]

    def predict(self, rows: Sequence[tuple[JobFeatures, HardwareFeatures]]) -> Predictions:
        """Predict every row; ``InvalidInputError`` naming the row and field on bad input.

        Use ``predict_each`` to get per-row errors instead of one exception. LLM jobs (``llm.is_llm_job``)
        are answered by ``perfmodel.llm``'s scaling model, the others by the learned model.
        """
        if any(map(llm.is_llm_job, (job for job, _ in rows))):
            out = llm.predict_mixed(rows, self._predict_learned, self.llm_fit)
            return out if self.anchors is None else self._anchor_llm_rows(rows, out)
        return self._predict_learned(rows)

    def _llm_reference_iters(self, job: JobFeatures, hw: HardwareFeatures) -> float:
        """Steps/s the scaling model gives the row at the default memory plan (no activation
        checkpointing, the whole per-rank batch in one micro-batch): what the anchor, which knows only
        the work per GPU per step, is compared with, so that the plan's own cost (recomputation, more
        micro-steps) comes from the scaling model alike on measured and unmeasured GPU types."""
        if isinstance(job, llm.LLMJobFeatures) and (
            job.micro_batch is not None or job.activation_checkpointing
        ):
            job = dataclasses.replace(job, micro_batch=None, activation_checkpointing=False)
        return llm.predict([(job, hw)], self.llm_fit).iters_per_s[0]

    def _anchor_llm_rows(
        self, rows: Sequence[tuple[JobFeatures, HardwareFeatures]], out: Predictions
    ) -> Predictions:
        """LLM rows blended with their measured anchor where one applies (the model measured at its
        precision and stack on other GPU types, not on this one), in log space with the learned path's
        weight: iteration time = scaling model^(1 - w) x anchor^w. Without it an LLM measured on A100s
        would be answered on H100s by the scaling model alone (Hopper cold, llm-foundry's MPT-7B/30B rows:
        docs/decisions/0003-measured-anchors.md)."""
        factors = self._llm_anchor_factors
        f = []
        for row in rows:
            if not llm.is_llm_job(row[0]):
                f.append(1.0)
                continue
            got = factors.get(row)
            if got is None:
                got = 1.0
                try:
                    r: Resolved | None = self.resolve(*row)
                except InvalidInputError:  # an LLM the learned path cannot describe: no anchor
                    r = None
                if r is not None and self.anchors is not None and self.anchors.applies(r):
                    at = float(self.anchors.iteration_times([r])[0][0])
                    if math.isfinite(at) and at > 0:
                        got = (self._llm_reference_iters(*row) * at) ** -ANCHOR_WEIGHT
                if len(factors) >= self._cache_size:
                    factors.clear()
                factors[row] = got
            f.append(got)
        if all(v == 1.0 for v in f):
            return out
        return Predictions(
            [v * x for v, x in zip(f, out.samples_per_s, strict=True)],
            [v * x for v, x in zip(f, out.iters_per_s, strict=True)],
            [v * x for v, x in zip(f, out.low, strict=True)],
            [v * x for v, x in zip(f, out.high, strict=True)],
            [v * x for v, x in zip(f, out.iters_low, strict=True)],
            [v * x for v, x in zip(f, out.iters_high, strict=True)],
            out.low_confidence,
        )

    def _predict_learned(self, rows: Sequence[tuple[JobFeatures, HardwareFeatures]]) -> Predictions:
        """``predict`` by the learned model (no LLM rows)."""
        cache = self._cache
        hits = list(map(cache.get, rows))
        todo = [i for i, h in enumerate(hits) if h is None]
        if todo:
            # The side tables are bounded like the result cache (checked between calls, so the ids of
            # one batch stay valid while it is computed).
            if len(self._jobs) > self._cache_size or len(self._hws) > self._cache_size:
                self._reset_parts()
            fresh = rows if len(todo) == len(rows) else [rows[i] for i in todo]
            jobs, hws = self._jobs, self._hws
            jid = [jobs.get(job.key) for job, _ in fresh]
            hid = [hws.get(hw.key) for _, hw in fresh]
            if None in jid or None in hid:
                for k, (job, hw) in enumerate(fresh):
                    if jid[k] is None or hid[k] is None:
                        try:
                            jid[k], hid[k] = self._add(job, hw)
                        except InvalidInputError as exc:
                            raise InvalidInputError(f"row {todo[k]}: {exc}") from exc
            s, it, lo, hi, low, batch = self._compute(np.asarray(jid), np.asarray(hid))
            s_, it_, lo_, hi_, low_ = s.tolist(), it.tolist(), lo.tolist(), hi.tolist(), low.tolist()
            cache.update(zip(fresh, zip(s_, it_, lo_, hi_, low_, strict=True), strict=True))
            while len(cache) > self._cache_size:
                cache.popitem(last=False)
            if len(todo) == len(rows):
                return Predictions(s_, it_, lo_, hi_, (lo / batch).tolist(), (hi / batch).tolist(), low_)
            for i, res in zip(todo, zip(s_, it_, lo_, hi_, low_, strict=True), strict=True):
                hits[i] = res
        done = [r for r in hits if r is not None]
        batches = [row[0].batch_size for row in rows]
        return Predictions(
            samples_per_s=[r[0] for r in done],
            iters_per_s=[r[1] for r in done],
            low=[r[2] for r in done],
            high=[r[3] for r in done],
            iters_low=[r[2] / b for r, b in zip(done, batches, strict=True)],
            iters_high=[r[3] / b for r, b in zip(done, batches, strict=True)],
            low_confidence=[r[4] for r in done],
        )

    def predict_one(self, job: JobFeatures, hw: HardwareFeatures) -> Predictions:
        return self.predict([(job, hw)])

    def predict_each(
        self, rows: Sequence[tuple[JobFeatures, HardwareFeatures]]
    ) -> list[Predictions | InvalidInputError]:
        """Like ``predict`` but one result per row: a one-row ``Predictions`` or the row's error."""
        out: list[Predictions | InvalidInputError] = []
        good: list[int] = []
        for i, row in enumerate(rows):
            try:
                llm.plan(*row) if llm.is_llm_job(row[0]) else self._ids(*row)
                good.append(i)
                out.append(InvalidInputError("pending"))
            except InvalidInputError as exc:
                out.append(exc)
        if good:
            preds = self.predict([rows[i] for i in good])
            for k, i in enumerate(good):
                out[i] = Predictions(
                    [preds.samples_per_s[k]],
                    [preds.iters_per_s[k]],
                    [preds.low[k]],
                    [preds.high[k]],
                    [preds.iters_low[k]],
                    [preds.iters_high[k]],
                    [preds.low_confidence[k]],
                )
        return out

    def _evaluate(
        self,
        jt: FloatArray,
        ht: FloatArray,
        o: npt.NDArray[np.intp],
        g: FloatArray,
        nodes: FloatArray,
        gpn: FloatArray,
    ) -> tuple[FloatArray, FloatArray]:
        """(samples/s, 1-GPU iteration time at the per-GPU batch) of rows given as their owner's batch row
        ``o`` (of the gathered job and placement tables ``jt``/``ht``) on ``g`` GPUs, ``nodes`` nodes,
        ``gpn`` GPUs per node: the rows' ``Resolved.nums`` matrix, then ``scaling.design_of_nums`` and
        ``LearnedModel.times`` -- the functions training evaluates, guards and anchor blend included."""
        e = o.size
        m = np.empty((e, _NUM_WIDTH))
        m[:, :_JN] = jt[o, :_JN]
        m[:, _JN : _JN + _HN] = ht[o, :_HN]
        m[:, _JN + _H_GPUS] = g
        m[:, _JN + _H_NODES] = nodes
        m[:, _JN + _H_GPN] = gpn
        m[:, -1] = ht[o, _H_TF + jt[o, _J_PREC].astype(np.intp)]
        d = design_of_nums(m, self.model.physics)
        if self.measured is not None:
            self._reference_link_features(self.measured, d, m, ht[o, _H_CTYPE].astype(np.intp), nodes)
        # Inside a measured in-node curve that falls the NVLink guard yields (with or without the envelope;
        # "always" puts the envelope over every such row anyway).
        follows = None
        if self.measured is not None and self.envelope != "always":
            follows = (nodes == 1.0) & self.measured.follows(
                jt[o, _J_CURVE].astype(np.intp),
                ht[o, _H_CTYPE].astype(np.intp),
                ht[o, _H_LINK] == LINK_NVLINK,
                g,
            )
        # The split correction across nodes (``LearnedModel.sync_forest``) only for models the shipped table
        # never measured (no anchor group); without the table every row counts as one.
        unmeasured = jt[o, _J_GROUP] < 0 if self.anchors is not None else None
        t, t1 = self.model.times(d, self._anchored(jt[o], ht[o], m), ht[o, _H_SEEN] > 0, follows, unmeasured)
        samples: FloatArray = m[:, 0] / t
        return samples, t1

    def _reference_link_features(
        self,
        measured: MeasuredInNode,
        d: Design,
        m: FloatArray,
        type_col: npt.NDArray[np.intp],
        nodes: FloatArray,
    ) -> None:
        """Cross-node correction (module docstring): the forests' features of each cross-node row become
        those of the same row at its reference link (``MeasuredInNode.reference_links``), in place; its
        scaling-model times and sync floor stay at its own link."""
        cross = np.flatnonzero(nodes > 1.0)
        if cross.size == 0:
            return
        own = np.log(m[cross, _M_LINK])
        ref = measured.reference_links(type_col[cross], m[cross, _M_STACK], own)
        moved = np.abs(ref - own) > 1e-9
        if moved.any():
            at = m[cross[moved]].copy()
            at[:, _M_LINK] = np.exp(ref[moved])
            d.x[cross[moved]] = design_of_nums(at, self.model.physics).x

    def _anchored(
        self, jt: FloatArray, ht: FloatArray, m: FloatArray
    ) -> tuple[FloatArray, FloatArray] | None:
        """Measured-anchor times of rows and their 1-GPU twins (NaN where none applies), or None: the
        anchor applies to a measured model on a catalogued GPU type it was not measured on."""
        if self.anchors is None:
            return None
        group = jt[:, _J_GROUP].astype(np.intp)
        gtype = ht[:, _H_TYPE].astype(np.intp)
        measured = self.anchors.measured
        ok = (group >= 0) & (ht[:, _H_LOW] == 0) & (gtype < measured.shape[1] - 1)
        if ok.any():
            ok[ok] = ~measured[group[ok], gtype[ok]]
        at = np.full(ok.size, np.nan)
        at1 = at.copy()
        ai = np.flatnonzero(ok)
        if ai.size:
            g = m[ai, _JN + _H_GPUS]
            at[ai], at1[ai] = self.anchors.times_where_applies(
                group[ai],
                gtype[ai],
                m[ai, 0] / g,
                g,
                (m[ai, _JN + _H_NODES] > 1).astype(np.float64),
                np.log(m[ai, -1]),
                ht[ai, _H_LOGBW],
                np.log(m[ai, 2]),
            )
        return at, at1

    def _compute(
        self, jid: npt.NDArray[np.intp], hid: npt.NDArray[np.intp]
    ) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray, npt.NDArray[np.bool_], FloatArray]:
        """(samples/s, iterations/s, low, high, low confidence, global batch) for rows given by their table
        rows.

        In-node envelope (on the rows ``_envelope_rows`` picks): a row on ``n`` > 1 GPUs of one node is
        computed together with the same job on 1 .. n-1 GPUs of that node (same GPU, interconnect, global
        batch) and gets the highest of those throughputs, capped by linear scaling from the lowest 1-GPU
        time among per-GPU batches B/n .. B/1, so that there more GPUs never predict a lower total
        throughput.
        """
        jt = self._jtab.rows.take(jid, axis=0)
        ht = self._htab.rows.take(hid, axis=0)
        k = jid.size
        n = ht[:, _H_GPUS]
        batch = jt[:, 0]
        env = np.flatnonzero(self._envelope_rows(jt, ht))
        if env.size == 0:
            samples = self._evaluate(jt, ht, np.arange(k), n, ht[:, _H_NODES], ht[:, _H_GPN])[0]
        else:
            # The same job on 1 .. n-1 GPUs of the owner's node class, as extra rows; rows that are the
            # same (job, class, GPU count) -- in the batch or among the extras -- are computed once.
            one_node = ht[:, _H_NODES] == 1.0
            reps = n[env].astype(np.intp) - 1
            ends = np.cumsum(reps)
            starts = ends - reps
            owner = np.repeat(env, reps)
            fewer = np.arange(ends[-1]) - np.repeat(starts, reps) + 1.0
            single = np.flatnonzero(one_node)
            src = np.concatenate((single, owner))
            gpus = np.concatenate((n[single], fewer))
            cell = jid * (len(self._classes) + 1) + ht[:, _H_CLASS].astype(np.intp)
            key = cell.take(src) * (int(gpus.max()) + 1) + gpus.astype(np.intp)
            # ``np.unique(key, return_index=True, return_inverse=True)``, without its wrapper's overhead.
            order = np.argsort(key, kind="stable")
            ordered = key.take(order)
            head = np.empty(ordered.size, dtype=np.bool_)
            head[0] = True
            np.not_equal(ordered[1:], ordered[:-1], out=head[1:])
            first = order[head]
            inv = np.empty(key.size, dtype=np.intp)
            inv[order] = np.cumsum(head) - 1
            multi_node = np.flatnonzero(~one_node)
            mn = multi_node.size
            g = np.concatenate((n[multi_node], gpus[first]))
            got, got_t1 = self._evaluate(
                jt,
                ht,
                np.concatenate((multi_node, src[first])),
                g,
                np.concatenate((ht[multi_node, _H_NODES], np.ones(first.size))),
                np.concatenate((ht[multi_node, _H_GPN], gpus[first])),
            )
            samples = np.empty(k)
            samples[multi_node] = got[:mn]
            at = got[mn:][inv]
            samples[single] = at[: single.size]
            best = np.maximum(samples[env], np.maximum.reduceat(at[single.size :], starts))
            # Linear-scaling cap from the 1-GPU times at per-GPU batches B/n .. B/1, made non-increasing
            # in the GPU count (a larger per-GPU batch never takes less time on one GPU): the cap and
            # the envelope both grow with n, so their minimum does too.
            t1 = got_t1[mn:][inv]
            t1_min = np.minimum(
                t1[np.searchsorted(single, env)], np.minimum.reduceat(t1[single.size :], starts)
            )
            samples[env] = np.minimum(best, batch[env] / t1_min)
        iters = samples / batch
        low = (jt[:, _J_LOW] + ht[:, _H_LOW]) > 0
        # q_low/q_high are quantiles of log(measured / predicted) throughput; widened 2x in log space for
        # low-confidence rows and placements larger than any training row.
        widen = np.where(low | (n > self.meta.max_gpus_seen), 2.0, 1.0)
        lo = samples * np.exp(widen * self.meta.q_low)
        hi = samples * np.exp(widen * self.meta.q_high)
        return samples, iters, lo, hi, low, batch
