"""Online correction of predictions from observed throughput, and remaining-time estimates.

The offline predictor is wrong in systematic ways: a GPU generation it never saw, a software stack that
is faster or slower than the measured one, a slow network, one job's data loader. ``OnlineCorrector``
learns a multiplicative correction of the predictor's throughput in nested levels, each fitted to the
``log(observed / predicted)`` residuals left over by the level above it:

1. per GPU type (``trend="structural"``, the default; ``_fit_structure``): how far the offline model's
   compute time, its all-reduce time (within a node and across nodes apart) and its own multi-GPU
   correction are off on that type, fitted in log space with a ridge towards 1, with per model a compute
   factor and a factor on the type's all-reduce (a model's own collectives, shrunk towards the type's).
   The type's all-reduce factors are learned only from how a model's error changes with its placement,
   so one model's runs on 8, 16 and 32 GPUs carry a slow network to other models there, and 1-GPU runs
   do not move multi-node rows through them. Each prediction and observation also asks the predictor
   for its 1-GPU twin (cached there): ``T`` is the offline iteration time of the row, ``T1`` that of the
   same job on one GPU at the same per-GPU batch, ``S`` the scaling model's all-reduce time
   (``perfmodel.features.model_terms``). Two older variants remain as the accuracy benchmark's same-run
   baselines: ``trend="split"`` (a shrunken mean plus ridge slopes on log GPU count, "spans nodes", the
   sync share ``S / (T1 + S)`` and the departure ``log(T / (T1 + S))``) and ``trend="placement"`` (log
   GPUs and node span only);
2. per model x GPU type: a Bayesian linear fit of what the GPU level leaves, in log per-GPU batch, log
   GPU count and log training FLOPs per sample with an intercept (``perfmodel.online_fit``). One run of
   a model on a type moves the whole model there; a second at another batch, GPU count or sequence
   length tilts it within the prior. The GPU-count and work slopes hold only between the observed jobs
   (``_model_gpu_level``);
3. per job (its own data loader, input sizes, ...).

A model's runs on a type that disagree weigh by how far each sits from their robust centre (found from
the offline prediction: ``online_fit.agreement_weights``), so one run measured far off its neighbours does
not move the model's other configurations. Beyond the largest GPU count observed on a GPU type, a model
observed there is corrected no further than at its observed jobs (``_trend``, ``_correction``): the
structural factors scale the offline model's all-reduce and departure, and wherever its curve over GPU
count bends beyond the observed runs they would carry the bend into the correction. A model not observed
on the type keeps the structural level's reach (bounded by perfect scaling of its corrected compute).
Structure, priors and the figures they were chosen by: docs/decisions/0004-online-correction.md and
0130-online-correction-sync-levels-and-agreement.md.

Means are ``sum(residual) / (count + prior)``, with priors of 3 (GPU type) and 0.25 (job) observations. A
job's observations count at most ``job_weight_cap`` times in the shared levels, so one long-running job
reporting every round does not drown the others. ``decay`` < 1 forgets old observations of a job
exponentially (throughput drifts). ``forget`` ends a job: its own level goes, and its record stays in the
shared levels among the latest ``retired_per_model`` forgotten jobs of its model on its GPU type
(``retired_cap`` in all); an older one drops out of them (docs/decisions/0141). The interval of a
corrected prediction narrows with the job's observation count down to the spread of its own residuals.
Corrected predictions keep the predictor's in-node envelope (more GPUs of one node never predict less;
see ``perfmodel.predictor``) on the rows where the predictor applies it. An observation refits the shared
levels of its GPU type only, at the next prediction; the same observations in the same order give the
same predictions.

``remaining_time`` = remaining work / predicted throughput with the interval's bounds. The operator, the
extender and ``perfsched predict --observed`` all use this class. Pure apart from the in-memory state
it holds (no I/O, no clock).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Collection, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from perfmodel.errors import InvalidInputError
from perfmodel.features import HardwareFeatures, JobFeatures, Resolved, model_terms
from perfmodel.llm import is_llm_job
from perfmodel.online_fit import (
    MODEL_PRIOR_SD,
    Point,
    agreement_weights,
    gauss_newton,
    model_x,
    posterior_mean,
    sync_columns,
    within_model_slopes,
)
from perfmodel.predictor import Predictions, Predictor

_V = TypeVar("_V")

PRIOR_GPU = 3.0
PRIOR_MODEL_GPU = 1.0
PRIOR_JOB = 0.25
# Ridge penalty of each per-GPU-type trend slope (in observations x descriptor^2; the same for the four
# descriptors of ``_TREND``): with a few observations that do not vary a descriptor its slope stays near
# zero. On the benchmark's held-out GPU types (3 random runs per model) 0.03 was 0.7 points better, 0.3
# and 1 were 1-2.4 points worse; the smaller the penalty, the further a slope reaches from a few runs,
# so the trend is also clamped to its values at the observed rows.
RIDGE_GPU_SLOPES = 0.1

_TREND = (1, 2, 3, 4)  # indices of Point the per-GPU-type trend regresses on
# A trend on log GPUs and node span only (ridge 1), kept as the benchmark's same-run
# baseline (``OnlineCorrector(trend="placement")``).
_TREND_PLACEMENT_ONLY = (1, 2)
RIDGE_PLACEMENT_ONLY = 1.0
TRENDS = ("structural", "split", "placement")
# The structural level (``OnlineCorrector._fit_structure``): ridge of its all-reduce and departure
# factors towards 1 (in observations), and the largest factor it may fit. The ridge is the ratio of the
# variances of an observation's relative error (5%: run-to-run noise) and of the factors' prior (sd 2:
# a cluster's network or all-reduce may be a few times off the datasheet's): (0.05 / 2)^2.
RIDGE_STRUCTURE = (0.05 / 2.0) ** 2
STRUCTURE_MAX = 16.0
# Per (model, GPU type): a factor on the GPU type's all-reduce factors (``_fit_structure``), pulled
# towards 1 with the weight of this many observations (in log); chosen on the development splits
# (Kepler, Pascal, Turing, Volta held out, 10 draws): after 2 / 3 observed runs 30.4 / 25.2% at 1,
# 30.2 / 25.2% at 0.3, 30.7 / 25.4% at 3, 31.1 / 25.6% without the factor.
RIDGE_MODEL_SYNC = 1.0


def _point(r: Resolved, t: float, t1: float, s: float, llm_job: bool = False) -> Point:
    """The row's descriptors from its offline iteration time ``t``, its 1-GPU twin's ``t1`` and the
    scaling model's all-reduce time ``s``. An LLM job (``perfmodel.llm.is_llm_job``) is predicted by
    perfmodel.llm with its own communication model, so the data-parallel split does not describe it:
    sync share and departure 0 (its structural level is its compute factor alone)."""
    work = math.log(r.flops_per_sample)
    if llm_job:
        return (
            math.log(r.local_batch),
            math.log(r.num_gpus),
            1.0 if r.num_nodes > 1 else 0.0,
            0.0,
            0.0,
            work,
        )
    return (
        math.log(r.local_batch),
        math.log(r.num_gpus),
        1.0 if r.num_nodes > 1 else 0.0,
        s / (t1 + s),
        math.log(t / (t1 + s)),
        work,
    )


def _model_key(r: Resolved) -> str:
    """The model level's key: the model at its precision and software stack (the same model run in
    tuned vendor code, or in bf16 instead of fp32, departs from the offline model differently)."""
    return f"{r.model}|{r.precision}|{int(r.nums[5])}"


def _one_gpu_twin(job: JobFeatures, hw: HardwareFeatures) -> tuple[JobFeatures, HardwareFeatures]:
    """The same job on one GPU of the same type and interconnect at the row's per-GPU batch."""
    local = max(1, round(job.batch_size / hw.num_gpus))
    return (
        JobFeatures(
            job.model, job.dataset, local, job.precision, job.params, job.flops_per_sample, job.stack
        ),
        HardwareFeatures(
            hw.gpu_type, 1, 1, 1, hw.interconnect, hw.network_gbps, hw.memory_mib, hw.compute_capability
        ),
    )


@dataclass(slots=True)
class _JobStats:
    model: str
    gpu_type: str
    weight: float = 0.0
    sum_r: float = 0.0
    sum_r2: float = 0.0
    count: int = 0
    # Where the job ran last (``Point``), for the trend and the similarity kernel.
    point: Point = (0.0, 0.0, 0.0, 0.0, 0.0, 0.0)


@dataclass(frozen=True, slots=True)
class RemainingTime:
    """Seconds left: the estimate and its interval (earliest = at the high throughput bound)."""

    seconds: float
    earliest: float
    latest: float


@dataclass(slots=True)
class OnlineCorrector:
    """Hierarchical multiplicative correction over a ``Predictor`` (see the module docstring)."""

    predictor: Predictor
    decay: float = 1.0
    job_weight_cap: float = 3.0
    # The per-GPU-type level after its bias (see the module docstring): "structural" (the default) fits
    # how far the GPU type's compute, all-reduce and the offline model's own multi-GPU departure are off;
    # "split" regresses on the four placement descriptors; "placement" on log GPUs and node span only
    # (ridge 1). The last two are the accuracy benchmark's same-run baselines.
    trend: str = "structural"
    # Finished jobs kept in the shared levels (``forget``): the latest this many per (model, GPU type),
    # and this many in all.
    retired_per_model: int = 32
    retired_cap: int = 4096
    _jobs: dict[Hashable, _JobStats] = field(default_factory=dict)
    # The records of forgotten jobs still in the shared levels, oldest first (``forget``).
    _retired: deque[_JobStats] = field(default_factory=deque)
    # Shared-level sums (weight, weighted mean residual) per GPU type and per (model, GPU type),
    # rebuilt lazily after observations: predictions cost O(rows), not O(rows x jobs).
    _gpu_sums: dict[str, tuple[float, float]] = field(default_factory=dict)
    _mg_jobs: dict[tuple[str, str], list[tuple[float, float, Point]]] = field(default_factory=dict)
    _dirty: bool = False
    # The GPU types observed since the shared levels were last fitted (``_rebuild`` refits only them).
    _dirty_types: set[str] = field(default_factory=set)
    # Per GPU type: the slopes of its trend, one per descriptor of ``_trend_descriptors``.
    _gpu_slopes: dict[str, tuple[float, ...]] = field(default_factory=dict)
    # Per (model, GPU type): the coefficients of its level on ``model_x`` (``posterior_mean``), and per
    # regressor after the intercept the lowest and highest value at its observed jobs.
    _mg_coef: dict[tuple[str, str], tuple[float, ...]] = field(default_factory=dict)
    _mg_range: dict[tuple[str, str], tuple[tuple[float, float], ...]] = field(default_factory=dict)
    # Per (model, GPU type) observed at more than one GPU count: the lowest and highest shared correction
    # (GPU and model levels) at its observed jobs, which bounds it beyond the GPU type's largest observed
    # GPU count (``_correction``).
    _mg_seen: dict[tuple[str, str], tuple[float, float]] = field(default_factory=dict)
    # Per GPU type: the lowest and highest trend value at its observed points.
    _trend_range: dict[str, tuple[float, float]] = field(default_factory=dict)
    # Per GPU type: whether any observed job of it ran across nodes, and the largest log GPU count of its
    # observed jobs.
    _spans_seen: dict[str, bool] = field(default_factory=dict)
    _gpus_seen: dict[str, float] = field(default_factory=dict)
    # Per GPU type: the structural level's (all-reduce factor, departure factor) and per model its
    # compute factor (``_fit_structure``).
    _gpu_struct: dict[str, tuple[float, float, float]] = field(default_factory=dict)
    _model_compute: dict[tuple[str, str], float] = field(default_factory=dict)
    _model_sync: dict[tuple[str, str], float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.trend not in TRENDS:
            raise InvalidInputError(f"trend: must be one of {', '.join(TRENDS)}, got {self.trend!r}")
        if self.retired_per_model < 1 or self.retired_cap < 1:
            raise InvalidInputError(
                f"retired_per_model and retired_cap: must be >= 1, got {self.retired_per_model} and "
                f"{self.retired_cap}"
            )

    def _key_of(self, job: JobFeatures, hw: HardwareFeatures, job_id: Hashable | None) -> Hashable:
        return job_id if job_id is not None else (job, hw)

    def observe(
        self,
        job: JobFeatures,
        hw: HardwareFeatures,
        observed_samples_per_s: float,
        job_id: Hashable | None = None,
    ) -> float:
        """Record one observation; returns its residual ``log(observed / offline prediction)``.

        ``job_id`` names the job (default: the (job, placement) pair itself). ``InvalidInputError`` on a
        non-positive or non-finite throughput or an invalid job/placement.
        """
        if not (observed_samples_per_s > 0 and math.isfinite(observed_samples_per_s)):
            raise InvalidInputError(f"observed_samples_per_s must be > 0, got {observed_samples_per_s}")
        r = self.predictor.resolve(job, hw)
        twin = _one_gpu_twin(job, hw)
        base, base1 = self.predictor.predict([(job, hw), twin]).samples_per_s
        residual = math.log(observed_samples_per_s / base)
        key = self._key_of(job, hw, job_id)
        st = self._jobs.get(key)
        if st is None or st.model != _model_key(r) or st.gpu_type != r.spec.gpu_type:
            # A job moved to another GPU type starts a new record (its residual there is a new question).
            if st is not None:
                self._dirty_types.add(st.gpu_type)
            st = _JobStats(_model_key(r), r.spec.gpu_type)
            self._jobs[key] = st
        st.weight = st.weight * self.decay + 1.0
        st.sum_r = st.sum_r * self.decay + residual
        st.sum_r2 = st.sum_r2 * self.decay + residual * residual
        st.count += 1
        st.point = _point(
            r,
            job.batch_size / base,
            twin[0].batch_size / base1,
            model_terms([r], self.predictor.model.physics)[1][0],
            is_llm_job(job),
        )
        self._dirty = True
        self._dirty_types.add(r.spec.gpu_type)
        return residual

    def forget(self, job_id: Hashable) -> bool:
        """End the job (or the record) ``job_id`` names: its own level goes, its record stays in the shared
        levels (the GPU type's and its model's there) as one of the latest ``retired_per_model`` forgotten
        records of its model on its type, ``retired_cap`` in all, the oldest dropping out first. Returns
        whether the shared levels changed (an older record dropped out of them); forgetting an unknown
        ``job_id`` does nothing."""
        st = self._jobs.pop(job_id, None)
        if st is None or st.weight <= 0:
            return False
        dropped: set[str] = set()
        same = [
            k for k, old in enumerate(self._retired) if (old.model, old.gpu_type) == (st.model, st.gpu_type)
        ]
        if len(same) >= self.retired_per_model:
            dropped.add(self._retired[same[0]].gpu_type)
            del self._retired[same[0]]
        self._retired.append(st)
        while len(self._retired) > self.retired_cap:
            dropped.add(self._retired.popleft().gpu_type)
        if dropped:
            self._dirty = True
            self._dirty_types |= dropped
        return bool(dropped)

    def _settings(self) -> list[object]:
        return [self.decay, self.job_weight_cap, self.trend, self.retired_per_model, self.retired_cap]

    def state(self, encode_id: Callable[[Hashable], object]) -> dict[str, object]:
        """Everything it has learnt, as plain JSON values (``restore`` reads it back): the settings that
        shape the fit, the live records (each job id through ``encode_id``) and the retired ones in their
        order, and the fitted shared levels as they stand, so that a restored corrector answers bit for
        bit as this one does without refitting (refitting after a reorder moves the last bits)."""
        derived = {name: _plain(list(getattr(self, name).items())) for name in _DERIVED}
        return {
            "settings": [
                self.decay,
                self.job_weight_cap,
                self.trend,
                self.retired_per_model,
                self.retired_cap,
            ],
            "jobs": [[encode_id(k), _record(st)] for k, st in self._jobs.items()],
            "retired": [_record(st) for st in self._retired],
            "derived": derived,
            "dirty": sorted(self._dirty_types) if self._dirty else [],
        }

    def restore(self, state: Mapping[str, object], decode_id: Callable[[object], Hashable]) -> None:
        """Replace what it has learnt with ``state`` (``state``'s output). ``InvalidInputError`` naming
        the problem when ``state`` was written with other settings or does not parse; it is unchanged
        then."""
        try:
            settings = list(_seq(state["settings"]))
            mine = self._settings()
            if settings != mine:
                raise InvalidInputError(f"written with corrector settings {settings}, these are {mine}")
            jobs = {decode_id(k): _stats(v) for k, v in (_seq(x) for x in _seq(state["jobs"]))}
            retired = deque(_stats(v) for v in _seq(state["retired"]))
            if len(retired) > self.retired_cap:
                raise InvalidInputError(f"{len(retired)} retired records, more than {self.retired_cap}")
            derived_in = state["derived"]
            if not isinstance(derived_in, Mapping) or set(derived_in) != set(_DERIVED):
                raise InvalidInputError("derived: not the fitted levels this version keeps")
            derived: dict[str, dict[object, object]] = {}
            for name in _DERIVED:
                table: dict[object, object] = {}
                for k, v in (_seq(x) for x in _seq(derived_in[name])):
                    table[_tuples(k)] = [_tuples(x) for x in _seq(v)] if name == "_mg_jobs" else _tuples(v)
                derived[name] = table
            dirty = {str(t) for t in _seq(state["dirty"])}
        except InvalidInputError:
            raise
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidInputError(f"learning state does not parse: {type(exc).__name__}: {exc}") from None
        self._jobs, self._retired = jobs, retired
        for name, table in derived.items():
            setattr(self, name, table)
        self._dirty, self._dirty_types = bool(dirty), dirty

    def job_ids(self) -> list[Hashable]:
        """The ids of the live job records, in the order they were first observed."""
        return list(self._jobs)

    def jobs(self) -> int:
        """How many job records it holds (live ones: not forgotten)."""
        return len(self._jobs)

    def observations(self) -> int:
        """Observations in the shared levels (of live and of forgotten jobs still in them)."""
        return sum(s.count for s in self._jobs.values()) + sum(s.count for s in self._retired)

    def _rebuild(self) -> None:
        """Refit the shared levels of the GPU types observed since the last fit (each type's levels
        depend on its own observations only)."""
        types, self._dirty_types, self._dirty = self._dirty_types, set(), False
        gpu: dict[str, tuple[float, float]] = {}
        mg: dict[tuple[str, str], list[tuple[float, float, Point]]] = {}
        for st in (*self._jobs.values(), *self._retired):
            if st.weight <= 0 or st.gpu_type not in types:
                continue
            cw = min(st.weight, self.job_weight_cap)
            mean = st.sum_r / st.weight
            w, sm = gpu.get(st.gpu_type, (0.0, 0.0))
            gpu[st.gpu_type] = (w + cw, sm + cw * mean)
            mg.setdefault((st.model, st.gpu_type), []).append((cw, mean, st.point))
        mg = {key: agreement_weights(jobs) for key, jobs in mg.items()}
        _drop(self._gpu_sums, types)
        _drop(self._gpu_slopes, types)
        _drop(self._trend_range, types)
        _drop(self._gpu_struct, types)
        _drop(self._spans_seen, types)
        _drop(self._gpus_seen, types)
        _drop_models(self._model_compute, types)
        _drop_models(self._model_sync, types)
        _drop_models(self._mg_jobs, types)
        _drop_models(self._mg_coef, types)
        _drop_models(self._mg_range, types)
        _drop_models(self._mg_seen, types)
        self._gpu_sums.update(gpu)
        self._mg_jobs.update(mg)
        for gpu_type in gpu:
            keys = [m for (m, g) in mg if g == gpu_type]
            models = [mg[(m, gpu_type)] for m in keys]
            if self.trend == "structural":
                # The structural level (no trend after it: ``_trend_descriptors``).
                self._fit_structure(gpu_type, keys, models)
                models = [
                    [(cw, mean - self._structural(m, gpu_type, p), p) for cw, mean, p in jobs]
                    for m, jobs in zip(keys, models, strict=True)
                ]
            slopes = self._fit_slopes(models, self._gpu_level(gpu_type))
            self._gpu_slopes[gpu_type] = slopes
            seen = [
                self._dot(slopes, p)
                + (self._structural(m, gpu_type, p) if self.trend == "structural" else 0.0)
                for m, jobs in zip(keys, models, strict=True)
                for _, _, p in jobs
            ]
            self._trend_range[gpu_type] = (min(seen), max(seen))
            self._spans_seen[gpu_type] = any(p[2] > 0 for jobs in models for _, _, p in jobs)
            self._gpus_seen[gpu_type] = max(p[1] for jobs in models for _, _, p in jobs)
        # Per (model, GPU type): the posterior mean of its linear level on what the GPU level (bias and
        # trend) leaves of each job's residual (it does not depend on the question).
        for (model, gpu_type), jobs in mg.items():
            bias = self._gpu_level(gpu_type)
            left = [(cw, mean - bias - self._trend(gpu_type, p, model), p) for cw, mean, p in jobs]
            self._mg_coef[(model, gpu_type)] = posterior_mean(left)
            xs = [model_x(p) for _, _, p in jobs]
            self._mg_range[(model, gpu_type)] = tuple(
                (min(x[i] for x in xs), max(x[i] for x in xs)) for i in range(1, len(MODEL_PRIOR_SD))
            )
        # Per (model, GPU type) observed at more than one GPU count (structural level only): the range of
        # the shared correction at its observed jobs (``_correction``). One GPU count leaves it to the
        # type's levels (an all-reduce seen on the type's other models carries to it).
        for (model, gpu_type), jobs in mg.items():
            if (
                self.trend != "structural"
                or max(p[1] for _, _, p in jobs) - min(p[1] for _, _, p in jobs) < 1e-9
            ):
                continue
            seen = [self._shared(model, gpu_type, p) for _, _, p in jobs]
            self._mg_seen[(model, gpu_type)] = (min(seen), max(seen))

    def _fit_structure(
        self, gpu_type: str, keys: Sequence[str], models: Sequence[Sequence[tuple[float, float, Point]]]
    ) -> None:
        """Fit the GPU type's structural level to its observations (it replaces the bias level).

        In units of ``U = T1 + S`` a row's offline time is ``T / U = exp(departure)``; the structural
        level says the GPU type really takes ``a x (1 - share) + m x e x share + k x (exp(departure) -
        1)``: ``a = A x exp(d_model)`` scales the compute (``A`` shared by the type's models, ``d_model``
        per model), ``m`` the scaling model's all-reduce (one factor within a node, one across nodes:
        NVLink and the node network are off by different amounts), ``e`` per model on the type's ``m``
        (its own collectives: FSDP's, an overlap the offline model does not see), ``k`` the offline
        model's learned departure from compute + all-reduce (all 1, ``d = 0``: the offline model).
        Least squares of the log error of the observed times (``gauss_newton``), in two steps: the two
        ``m`` and ``k`` with a free compute factor per model and ``e = 1``, so that only how a model's
        error changes with its placement informs them (one run of each of several models says nothing
        about the all-reduce), ridge-pulled by ``RIDGE_STRUCTURE``; then ``A``, the ``d`` and the ``e``
        with the type's factors fixed, pulled with the weights of ``PRIOR_GPU`` observations for ``log
        A``, ``PRIOR_MODEL_GPU`` for each ``d`` and ``RIDGE_MODEL_SYNC`` for each ``log e``. ``a`` and
        ``m x e`` are clamped to [1/STRUCTURE_MAX, STRUCTURE_MAX], ``k`` to [0, STRUCTURE_MAX].
        """
        nm = len(keys)
        n = 2 * nm + 4  # log A, d per model, log e per model, log m within and across nodes, k
        rows = [
            (col, cw, (1.0 - p[3]) / y, sync_columns(p, y), (math.exp(p[4]) - 1.0) / y)
            for col, jobs in enumerate(models)
            for cw, mean, p in jobs
            # the observed time in units of U (residuals are log throughput: log(T / observed time))
            for y in (math.exp(p[4] - mean),)
        ]
        type_factors = (n - 3, n - 2, n - 1)
        per_model_sync = tuple(range(1 + nm, 1 + 2 * nm))
        centre = [0.0] * (n - 1) + [1.0]
        within = [0.0, *([1e-9] * nm), *([1.0] * nm), *([RIDGE_STRUCTURE] * 3)]
        phi = gauss_newton(rows, nm, within, centre, list(centre), frozen=(0, *per_model_sync))
        levels = [PRIOR_GPU, *([PRIOR_MODEL_GPU] * nm), *([RIDGE_MODEL_SYNC] * nm), 0.0, 0.0, 0.0]
        phi = gauss_newton(rows, nm, levels, centre, [*centre[: n - 3], *phi[n - 3 :]], type_factors)
        lo, hi = 1.0 / STRUCTURE_MAX, STRUCTURE_MAX
        self._model_compute[("", gpu_type)] = min(hi, max(lo, math.exp(phi[0])))
        for j, key in enumerate(keys):
            self._model_compute[(key, gpu_type)] = min(hi, max(lo, math.exp(phi[0] + phi[1 + j])))
            self._model_sync[(key, gpu_type)] = math.exp(phi[1 + nm + j])
        m_in, m_x = (min(hi, max(lo, math.exp(v))) for v in phi[n - 3 : n - 1])
        self._gpu_struct[gpu_type] = (m_in, m_x, min(hi, phi[n - 1]))

    def _structural(self, model: str, gpu_type: str, point: Point) -> float:
        """The structural level's log correction of a row's throughput (``_fit_structure``), unclamped."""
        m_in, m_x, d = self._gpu_struct.get(gpu_type, (1.0, 1.0, 1.0))
        m = (m_x if point[2] > 0 else m_in) * self._model_sync.get((model, gpu_type), 1.0)
        m = min(STRUCTURE_MAX, max(1.0 / STRUCTURE_MAX, m))
        a = self._model_compute.get((model, gpu_type)) or self._model_compute.get(("", gpu_type), 1.0)
        share, dep = point[3], point[4]
        t = a * (1.0 - share) + m * share + d * (math.exp(dep) - 1.0)
        # Never below the compute alone at the lesser of the two factors (d x a negative departure).
        return dep - math.log(max(t, min(a, 1.0) * (1.0 - share)))

    @property
    def _trend_descriptors(self) -> tuple[int, ...]:
        if self.trend == "structural":
            return ()  # the structural level alone (module docstring, level 2)
        return _TREND if self.trend == "split" else _TREND_PLACEMENT_ONLY

    def _dot(self, slopes: Sequence[float], point: Point) -> float:
        return sum(b * point[f] for b, f in zip(slopes, self._trend_descriptors, strict=True))

    def _fit_slopes(
        self, models: Sequence[Sequence[tuple[float, float, Point]]], bias: float
    ) -> tuple[float, ...]:
        """The trend's slopes (``online_fit.within_model_slopes``), none for the structural level."""
        ridge = RIDGE_GPU_SLOPES if self.trend == "split" else RIDGE_PLACEMENT_ONLY
        return within_model_slopes(models, bias, self._trend_descriptors, ridge)

    def _gpu_level(self, gpu_type: str) -> float:
        if self.trend == "structural":
            return 0.0  # the structural level's shared compute factor takes the bias's place
        w, s = self._gpu_sums.get(gpu_type, (0.0, 0.0))
        return s / (w + PRIOR_GPU)

    def _trend(self, gpu_type: str, point: Point, model: str) -> float:
        """The GPU type's trend (or structural level) at ``point`` for ``model``, clamped to its values at
        the observed points (it comes from a few observations: it interpolates between them, it does not
        extrapolate)."""
        got = self._trend_range.get(gpu_type)
        if got is None:
            return 0.0
        lo, hi = got
        trend = self._dot(self._gpu_slopes[gpu_type], point)
        if self.trend == "structural":
            # Above the observed range (up to the largest observed GPU count) only as far as the
            # structural level alone goes: it is bounded by perfect scaling of the model's corrected
            # compute (``_structural``).
            s = self._structural(model, gpu_type, point)
            if point[2] > 0 and not self._spans_seen.get(gpu_type, False):
                # Across nodes on a type observed only within nodes: its factors came from NVLink or
                # PCIe runs and say nothing about the network, so no further than the observed range
                # (a 10% better 4 -> 8 GPU scaling read as 11x the offline throughput on two nodes).
                return min(hi, max(lo, s))
            if (model, gpu_type) in self._mg_jobs and point[1] > self._gpus_seen[gpu_type] + 1e-9:
                # Beyond the largest GPU count observed on the type, no further than the observed range
                # either: the factors scale the offline model's compute, all-reduce and departure, and
                # where its curve over GPU count bends beyond the observed runs (per-GPU speed rising
                # from 64 to 512 GPUs) they would carry the bend into the correction (two BERT runs at
                # 8 and 64 GPUs corrected by 1.40-1.57x read as 2.29x at 512 GPUs and 3.6x at 3,072).
                return min(hi, max(lo, s))
            return min(max(hi, s), max(lo, s + trend))
        return min(hi, max(lo, trend))

    def _model_gpu_level(self, model: str, gpu_type: str, point: Point) -> float:
        """The model's level on this GPU type at ``point``: its linear fit of what the GPU level (bias
        and trend) leaves (``posterior_mean``), shrunk to 0 where it has few observations.

        A GPU-count or work-per-sample slope the model's jobs measured (they ran at more than one value
        of it) holds between them and stays flat beyond them, as the GPU type's trend does (``_trend``):
        two runs at 4 and 8 GPUs 0.1 apart in log error say little about 3,000 GPUs, where the line
        would put 0.9 (the held-out Hopper's 512-3,584 GPU MLPerf runs). A slope no run measured (all
        at one value: one run, or runs at one GPU count) is the prior's share of the intercept and goes
        on with the distance from the reference (``model_x``). The per-GPU batch slope goes on beyond
        the observed batches (small batches underuse a fast GPU more and more; bounded by its prior)."""
        coef = self._mg_coef.get((model, gpu_type))
        if coef is None:
            return 0.0
        x = model_x(point)
        out = coef[0] + coef[1] * x[1]
        for c, v, (lo, hi) in zip(coef[2:], x[2:], self._mg_range[(model, gpu_type)][1:], strict=True):
            out += c * (v if hi - lo < 1e-9 else min(hi, max(lo, v)))
        return out

    def correction(self, job: JobFeatures, hw: HardwareFeatures, job_id: Hashable | None = None) -> float:
        """The log correction applied to this row (sum of the three levels)."""
        if self._dirty:
            self._rebuild()
        r = self.predictor.resolve(job, hw)
        twin = _one_gpu_twin(job, hw)
        base, base1 = self.predictor.predict([(job, hw), twin]).samples_per_s
        point = _point(
            r,
            job.batch_size / base,
            twin[0].batch_size / base1,
            model_terms([r], self.predictor.model.physics)[1][0],
            is_llm_job(job),
        )
        return self._correction(r, point, self._jobs.get(self._key_of(job, hw, job_id)))[0]

    def _shared(self, model: str, gpu_type: str, point: Point) -> float:
        """The shared levels' log correction at ``point`` (GPU type and model x GPU type), unbounded."""
        g = self._gpu_level(gpu_type)
        return g + self._trend(gpu_type, point, model) + self._model_gpu_level(model, gpu_type, point)

    def _correction(self, r: Resolved, point: Point, st: _JobStats | None) -> tuple[float, float, float]:
        """(log correction, job evidence weight, spread of the job's own residuals)."""
        gpu_type = r.spec.gpu_type
        model = _model_key(r)
        total = self._shared(model, gpu_type, point)
        seen = self._mg_seen.get((model, gpu_type))
        if seen is not None and point[1] > self._gpus_seen[gpu_type] + 1e-9:
            # Beyond the largest GPU count observed on the type, a model observed there is corrected
            # no further than at its observed jobs: each level is bounded on its own (``_trend``,
            # ``_model_gpu_level``), their sum is not (the structural level at one end of its range and
            # the model level at the other).
            total = min(seen[1], max(seen[0], total))
        if st is None or st.gpu_type != gpu_type or st.weight <= 0:
            return total, 0.0, 0.0
        mean = st.sum_r / st.weight
        total += st.weight * (mean - total) / (st.weight + PRIOR_JOB)
        std = math.sqrt(max(0.0, st.sum_r2 / st.weight - mean * mean))
        return total, st.weight, std

    def predict(
        self,
        rows: Sequence[tuple[JobFeatures, HardwareFeatures]],
        job_ids: Sequence[Hashable | None] | None = None,
    ) -> Predictions:
        """Corrected predictions for ``rows`` (``job_ids[i]`` names row i's job when given).

        The predictor's in-node envelope holds after correction too (when the predictor applies it): a
        row on n > 1 GPUs of one node gets at least the corrected throughput of the same job on 1 .. n-1
        GPUs of that node (its interval moves with it), so an observed fast run on 4 GPUs does not make
        5 look slower than 4.
        """
        if not self._jobs and not self._retired:
            return self.predictor.predict(rows)
        ids = list(job_ids) if job_ids is not None else [None] * len(rows)
        if len(ids) != len(rows):
            raise InvalidInputError(f"{len(ids)} job ids for {len(rows)} rows")
        if not self.predictor.in_node_envelope:
            return self._corrected(rows, ids)
        extra: list[tuple[JobFeatures, HardwareFeatures]] = []
        extra_ids: list[Hashable | None] = []
        spans: list[tuple[int, int, int]] = []  # (row, first extra, end of its extras)
        for k, ((job, hw), jid) in enumerate(zip(rows, ids, strict=True)):
            if hw.num_nodes == 1 and hw.num_gpus > 1 and self.predictor.envelope_applies(job, hw):
                first = len(extra)
                for g in range(1, hw.num_gpus):
                    extra.append((job, _with_gpus(hw, g)))
                    extra_ids.append(jid)
                spans.append((k, first, len(extra)))
        if not spans:
            return self._corrected(rows, ids)
        allp = self._corrected([*rows, *extra], [*ids, *extra_ids])
        n = len(rows)
        out = [
            list(v[:n]) for v in (allp.samples_per_s, allp.low, allp.high, allp.iters_low, allp.iters_high)
        ]
        s, lo, hi, ilo, ihi = out
        for k, a, b in spans:
            best = max(allp.samples_per_s[n + a : n + b])
            if best > s[k]:
                f = best / s[k]
                s[k], lo[k], hi[k], ilo[k], ihi[k] = best, lo[k] * f, hi[k] * f, ilo[k] * f, ihi[k] * f
        iters = [v / job.batch_size for v, (job, _) in zip(s, rows, strict=True)]
        return Predictions(s, iters, lo, hi, ilo, ihi, list(allp.low_confidence[:n]))

    def _corrected(
        self, rows: Sequence[tuple[JobFeatures, HardwareFeatures]], ids: Sequence[Hashable | None]
    ) -> Predictions:
        """The offline predictions of ``rows`` times each row's correction (no envelope)."""
        twins = [_one_gpu_twin(job, hw) for job, hw in rows]
        base = self.predictor.predict([*rows, *twins])  # rows first, then their twins
        n = len(rows)
        if self._dirty:
            self._rebuild()
        resolved = [self.predictor.resolve(job, hw) for job, hw in rows]
        syncs = model_terms(resolved, self.predictor.model.physics)[1].tolist()
        out: dict[str, list[float]] = {k: [] for k in ("s", "i", "lo", "hi", "ilo", "ihi")}
        for k, ((job, hw), jid) in enumerate(zip(rows, ids, strict=True)):
            r = resolved[k]
            t1 = twins[k][0].batch_size / base.samples_per_s[n + k]
            point = _point(r, job.batch_size / base.samples_per_s[k], t1, syncs[k], is_llm_job(job))
            st = self._jobs.get(self._key_of(job, hw, jid))
            corr, weight, std = self._correction(r, point, st)
            s = base.samples_per_s[k] * math.exp(corr)
            # Interval: the offline one around the corrected value, narrowed by the job's own evidence
            # (1 / sqrt(1 + observations)) but never below the spread of its observed residuals.
            narrow = 1.0 / math.sqrt(1.0 + weight)
            lo_w = max(math.log(base.samples_per_s[k] / base.low[k]) * narrow, std)
            hi_w = max(math.log(base.high[k] / base.samples_per_s[k]) * narrow, std)
            lo, hi = s * math.exp(-lo_w), s * math.exp(hi_w)
            b = job.batch_size
            out["s"].append(s)
            out["i"].append(s / b)
            out["lo"].append(lo)
            out["hi"].append(hi)
            out["ilo"].append(lo / b)
            out["ihi"].append(hi / b)
        return Predictions(
            out["s"], out["i"], out["lo"], out["hi"], out["ilo"], out["ihi"], list(base.low_confidence[:n])
        )


# The fitted shared levels (``_rebuild``'s output) a snapshot carries as they stand (``state``).
_DERIVED = (
    "_gpu_sums",
    "_mg_jobs",
    "_gpu_slopes",
    "_mg_coef",
    "_mg_range",
    "_mg_seen",
    "_trend_range",
    "_spans_seen",
    "_gpus_seen",
    "_gpu_struct",
    "_model_compute",
    "_model_sync",
)


def state_records(
    state: Mapping[str, object],
) -> tuple[list[tuple[str, str, int]], list[tuple[str, str, int]]]:
    """(model, GPU type, observations) of each live record and of each retired record of an
    ``OnlineCorrector.state``, in the order it stores them (the retired ones oldest first).
    ``InvalidInputError`` when it is not one."""
    try:
        jobs = [_stats(_seq(x)[1]) for x in _seq(state["jobs"])]
        retired = [_stats(v) for v in _seq(state["retired"])]
    except (KeyError, IndexError) as exc:
        raise InvalidInputError(f"learning state does not parse: {type(exc).__name__}: {exc}") from None
    return [(s.model, s.gpu_type, s.count) for s in jobs], [(s.model, s.gpu_type, s.count) for s in retired]


def state_levels(state: Mapping[str, object]) -> dict[str, list[object]]:
    """The fitted levels of an ``OnlineCorrector.state``, grouped by GPU type (each entry as stored):
    what ``trim_state`` leaves out of a type that loses a record."""
    derived = state["derived"]
    if not isinstance(derived, Mapping):
        raise InvalidInputError("derived: not the fitted levels this version keeps")
    out: dict[str, list[object]] = {}
    for table in derived.values():
        for x in _seq(table):
            out.setdefault(str(_key_type(_seq(x)[0])), []).append(x)
    return out


def trim_state(
    state: Mapping[str, object], *, jobs: Collection[int] = (), retired: Collection[int] = ()
) -> dict[str, object]:
    """``state`` (an ``OnlineCorrector.state``, unchanged) without the live records at the positions
    ``jobs`` and the retired records at the positions ``retired``. The fitted levels of a GPU type that
    loses a record would no longer match the records kept, so they are left out and the type is marked
    to be refit: a corrector that restores the result refits those types from the records kept at its
    first answer (as after an observation there), and answers as the writer did on every other type."""
    all_jobs, all_retired = _seq(state["jobs"]), _seq(state["retired"])
    drop_jobs, drop_retired = set(jobs), set(retired)
    types = {str(_seq(_seq(all_jobs[k])[1])[1]) for k in drop_jobs}
    types |= {str(_seq(all_retired[k])[1]) for k in drop_retired}
    if not types:
        return dict(state)
    derived = state["derived"]
    if not isinstance(derived, Mapping):
        raise InvalidInputError("derived: not the fitted levels this version keeps")
    # a per-type table is keyed by the GPU type, a per-model one by [model, GPU type]
    kept_derived = {
        name: [x for x in _seq(table) if _key_type(_seq(x)[0]) not in types]
        for name, table in derived.items()
    }
    return {
        **state,
        "jobs": [x for k, x in enumerate(all_jobs) if k not in drop_jobs],
        "retired": [x for k, x in enumerate(all_retired) if k not in drop_retired],
        "derived": kept_derived,
        "dirty": sorted({str(t) for t in _seq(state["dirty"])} | types),
    }


def _key_type(key: object) -> object:
    """The GPU type of a fitted level's key as stored: a per-type table's key is the type, a per-model
    one's [model, GPU type]."""
    return _seq(key)[1] if isinstance(key, list) else key


def _plain(value: object) -> object:
    """Tuples as lists, recursively (JSON's shape); floats stay exact (JSON writes their repr)."""
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    return value


def _tuples(value: object) -> object:
    """Lists as tuples, recursively (``_plain`` undone)."""
    if isinstance(value, list):
        return tuple(_tuples(v) for v in value)
    return value


def _seq(value: object) -> list[object]:
    if not isinstance(value, list):
        raise InvalidInputError(f"expected a list, got {type(value).__name__}")
    return value


def _record(st: _JobStats) -> list[object]:
    return [st.model, st.gpu_type, st.weight, st.sum_r, st.sum_r2, st.count, list(st.point)]


def _stats(value: object) -> _JobStats:
    """A ``_record`` read back; ``InvalidInputError`` when it is not one."""
    v = _seq(value)
    if len(v) != 7 or not isinstance(v[0], str) or not isinstance(v[1], str):
        raise InvalidInputError(f"not a job record: {str(v)[:80]}")
    raw = [*v[2:5], *_seq(v[6])]
    if not isinstance(v[5], int) or not all(isinstance(x, int | float) for x in raw) or len(raw) != 9:
        raise InvalidInputError(f"not a job record: {str(v)[:80]}")
    nums = [float(x) for x in raw if isinstance(x, int | float)]
    if not all(math.isfinite(x) for x in nums) or nums[0] < 0:
        raise InvalidInputError(f"not a job record: {str(v)[:80]}")
    p = nums[3:]
    return _JobStats(v[0], v[1], nums[0], nums[1], nums[2], v[5], (p[0], p[1], p[2], p[3], p[4], p[5]))


def _drop(per_type: dict[str, _V], types: set[str]) -> None:
    """Remove the entries of ``types`` from a per-GPU-type table."""
    for gpu_type in types:
        per_type.pop(gpu_type, None)


def _drop_models(per_model: dict[tuple[str, str], _V], types: set[str]) -> None:
    """Remove the entries of ``types`` from a per-(model, GPU type) table."""
    for key in [k for k in per_model if k[1] in types]:
        del per_model[key]


def _with_gpus(hw: HardwareFeatures, gpus: int) -> HardwareFeatures:
    """The same one-node placement with ``gpus`` GPUs."""
    return HardwareFeatures(
        hw.gpu_type, gpus, gpus, 1, hw.interconnect, hw.network_gbps, hw.memory_mib, hw.compute_capability
    )


def remaining_time(
    remaining_work: float, work_unit: str, predictions: Predictions, index: int = 0
) -> RemainingTime:
    """Remaining seconds = remaining work / predicted throughput, with the interval's bounds.

    ``work_unit`` is ``iterations`` or ``samples`` (the job's declared work unit); ``predictions[index]``
    is the row of the job's current placement.
    """
    if remaining_work < 0 or not math.isfinite(remaining_work):
        raise InvalidInputError(f"remaining work must be >= 0, got {remaining_work}")
    if work_unit == "iterations":
        mid, lo, hi = (
            predictions.iters_per_s[index],
            predictions.iters_low[index],
            predictions.iters_high[index],
        )
    elif work_unit == "samples":
        mid, lo, hi = predictions.samples_per_s[index], predictions.low[index], predictions.high[index]
    else:
        raise InvalidInputError(f"work_unit must be iterations or samples, got {work_unit!r}")
    if min(mid, lo, hi) <= 0:
        raise InvalidInputError("predicted throughput must be > 0")
    return RemainingTime(remaining_work / mid, remaining_work / hi, remaining_work / lo)
