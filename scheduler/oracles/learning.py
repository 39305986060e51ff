"""The learning throughput oracle: the ``perfmodel`` predictor, corrected online by observed throughput.

The operator answers its policy with ``CorrectedOracle`` and feeds it each running job's reported
throughput (``scheduler.operator.reconcile``); the simulator's ``--oracle predictor`` is the same class,
fed by the engine each time a job starts on a placement (``scheduler.sim.engine``). In-memory state only
(no I/O, no clock). ``CorrectedOracle`` answers the core's ``ThroughputOracle``
questions with ``perfmodel.online.OnlineCorrector.predict`` (offline prediction times the learned
per-GPU-type, per-model-and-type and per-job corrections) and feeds the workers' reported throughput into
the corrector with ``observe``. Each job's observations are its own record per placement (keyed by the
job's name, unique among the jobs alive at once: ``namespace/name`` in the operator, which forgets a
name whose object was deleted or recreated under a new uid), so a job's own correction applies exactly
where it was measured and to no other job, and the shared levels (per GPU type, per model and type) move
every other prediction on that GPU type and model. ``forget`` ends a job (finished, failed or deleted:
the operator and the simulator's engine call it): its own records and caches go, its records stay in the
shared levels among the latest finished jobs of its model (``perfmodel.online.OnlineCorrector.forget``),
and what it answered before each configuration's first measurement stays (``throughput_held_out``; the
latest ``BEFORE_CAP`` configurations). Work units are converted to samples per second for the corrector
(iterations x global batch) and back. A row the predictor cannot answer is 0 ("cannot run there"), as in
``scheduler.oracles.PredictorOracle``, whose feature mapping this class reuses; so is an LLM job on a
placement whose GPU memory it does not fit, and ``memory_fit`` answers the core's ``MemoryOracle`` seam
(``scheduler.oracles.memory``).
"""

from __future__ import annotations

import hashlib
import logging
import math
from collections.abc import Collection, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from scheduler.core.protocols import HeldOutOracle, IntervalOracle, MemoryOracle, ThroughputOracle
from scheduler.core.types import Interconnect, Job, MemoryFit, PlacementShape, WorkUnit
from scheduler.oracles.memory import MemoryFitter
from scheduler.oracles.predictor import cached_job_features, hardware_features

if TYPE_CHECKING:
    from perfmodel.features import JobFeatures
    from perfmodel.online import OnlineCorrector

log = logging.getLogger(__name__)

# Configurations (job features, placement) whose answer before their first measurement is kept for
# ``throughput_held_out``; beyond it the oldest is dropped.
BEFORE_CAP = 4096


class ThroughputLearner(Protocol):
    """An oracle that also learns: ``observe`` records a measured throughput (work units/s); ``forget``
    ends a job (finished, failed or deleted) by its name."""

    def throughput(self, queries: Sequence[tuple[Job, PlacementShape]]) -> list[float]: ...

    def observe(self, job: Job, shape: PlacementShape, throughput: float) -> None: ...

    def forget(self, name: str) -> None: ...


_RowKey = tuple["JobFeatures", PlacementShape, str | None]


class CorrectedOracle(ThroughputOracle, MemoryOracle, IntervalOracle, HeldOutOracle):
    """``ThroughputOracle`` over an ``OnlineCorrector`` (see the module docstring), and ``MemoryOracle``.

    Answers are kept per (job features, placement) until the next ``observe``, which moves the
    corrections: a policy asks the same rows many times between two observations (the simulator's
    400-job multi-node LAS run asks about 1.1 million rows over 6,500 rounds, with observations in
    about 500 of them), and ``throughput`` and ``throughput_interval`` share one corrected prediction.
    """

    def __init__(self, corrector: OnlineCorrector, model_id: str = "") -> None:
        self.corrector = corrector
        #: names the offline model the corrections are relative to (``load``: a digest of the shipped
        #: model file); a learning state written over another model is not restored (``restore``)
        self.model_id = model_id
        self._warned: set[str] = set()
        self._memory = MemoryFitter()
        self._features: dict[str, JobFeatures] = {}
        # job name -> the placements it has a record of its own on in the corrector (key (name, placement))
        self._observed: dict[str, set[PlacementShape]] = {}
        # (job features, placement, the job's name where it has a record there, else None) -> (iterations/s,
        # low, high) of the corrected prediction, or None where the predictor cannot answer; emptied by
        # ``observe``
        self._rows: dict[_RowKey, tuple[float, float, float] | None] = {}
        # (job features, placement) -> iterations/s predicted there just before its first observation (of
        # any job: a cross-job fact, kept after the job ends; the latest ``BEFORE_CAP``)
        self._before: dict[tuple[JobFeatures, PlacementShape], float] = {}

    def memory_fit(self, queries: Sequence[tuple[Job, PlacementShape]]) -> list[MemoryFit | None]:
        """Peak memory per GPU against the GPU's memory, per question (None where it cannot tell)."""
        return self._memory.memory_fit(queries)

    @classmethod
    def load(cls) -> CorrectedOracle:
        """The shipped predictor with an empty online correction."""
        from perfmodel.online import OnlineCorrector
        from perfmodel.predictor import Predictor

        return cls(OnlineCorrector(Predictor.load()), model_id=shipped_model_id())

    def _warn(self, job: Job, exc: Exception) -> None:
        if job.name not in self._warned:
            self._warned.add(job.name)
            log.warning("predictor cannot answer for job", extra={"job": job.name, "error": str(exc)})

    def _job_features(self, job: Job) -> JobFeatures:
        return cached_job_features(self._features, job)

    def _answers(
        self, queries: Sequence[tuple[Job, PlacementShape]], warn: bool, own: bool = True
    ) -> list[tuple[float, float, float] | None]:
        """Per question the corrected (iterations/s, low, high), None where the predictor cannot answer;
        the rows not kept since the last ``observe`` are predicted in one batch. ``own=False``: without
        the job's own record (the shared levels only)."""
        from perfmodel.errors import InvalidInputError

        observed = self._observed
        keys = [
            (
                self._job_features(job),
                shape,
                job.name if own and shape in observed.get(job.name, ()) else None,
            )
            for job, shape in queries
        ]
        rows = self._rows
        missing = list(dict.fromkeys(k for k in keys if k not in rows))
        if missing:
            feats = [(f, hardware_features(shape)) for f, shape, _ in missing]
            ids = [(name, shape) if name is not None else None for _, shape, name in missing]
            try:
                preds = self.corrector.predict(feats, ids)
                for key, ips, lo, hi in zip(
                    missing, preds.iters_per_s, preds.iters_low, preds.iters_high, strict=True
                ):
                    rows[key] = (ips, lo, hi)
            except InvalidInputError:
                # one bad row must not blind the policy to every other job: answer row by row
                for key, row, jid in zip(missing, feats, ids, strict=True):
                    try:
                        one = self.corrector.predict([row], [jid])
                        rows[key] = (one.iters_per_s[0], one.iters_low[0], one.iters_high[0])
                    except InvalidInputError:
                        rows[key] = None
        out = [rows[k] for k in keys]
        if warn:
            for (job, shape), got in zip(queries, out, strict=True):
                if got is None and job.name not in self._warned:
                    self._warn(job, self._error(job, shape))
        return out

    def _error(self, job: Job, shape: PlacementShape) -> Exception:
        """The predictor's complaint about one row (for the warning, once per job)."""
        from perfmodel.errors import InvalidInputError

        try:
            self.corrector.predict([(self._job_features(job), hardware_features(shape))])
        except InvalidInputError as exc:
            return exc
        return InvalidInputError("no answer")

    def throughput(self, queries: Sequence[tuple[Job, PlacementShape]]) -> list[float]:
        return self._throughput(queries, own=True)

    def throughput_shared(self, queries: Sequence[tuple[Job, PlacementShape]]) -> list[float]:
        """``throughput`` without each job's own record: the offline prediction times the shared levels
        (the GPU type's, the model's on that type) only. Two jobs of one model on one placement shape get
        the same answer, so their measured throughput over it compares the nodes they run on (the
        operator's slow-node detection); with the job's own record each job's answer would absorb its
        own node's slowness."""
        return self._throughput(queries, own=False)

    def _throughput(self, queries: Sequence[tuple[Job, PlacementShape]], own: bool) -> list[float]:
        from perfmodel.llm import LLMJobFeatures

        if not queries:
            return []
        out = []
        for (job, shape), got in zip(queries, self._answers(queries, warn=True, own=own), strict=True):
            ips = got[0] if got is not None else 0.0
            value = ips * job.batch_size if job.work_unit is WorkUnit.SAMPLES else ips
            if value > 0 and isinstance(self._job_features(job), LLMJobFeatures):
                fit = self._memory.one(job, shape)
                value = 0.0 if fit is not None and not fit.fits else value
            out.append(value if value > 0 and math.isfinite(value) else 0.0)
        return out

    def throughput_held_out(self, queries: Sequence[tuple[Job, PlacementShape]]) -> list[float]:
        """``HeldOutOracle``: what it answered for each row just before the row's first observation (its
        current answer for a row never observed), in each job's work units/s."""
        now = self.throughput(queries)
        out = []
        for (job, shape), value in zip(queries, now, strict=True):
            ips = self._before.get((self._job_features(job), shape))
            if ips is not None:
                value = ips * job.batch_size if job.work_unit is WorkUnit.SAMPLES else ips
            out.append(value)
        return out

    def throughput_interval(self, queries: Sequence[tuple[Job, PlacementShape]]) -> list[tuple[float, float]]:
        """The corrected prediction's interval (``IntervalOracle``; it narrows as a job is observed), in
        each job's work units/s; ``(0, 0)`` for a row the predictor cannot answer."""
        if not queries:
            return []
        out: list[tuple[float, float]] = []
        for (job, _), got in zip(queries, self._answers(queries, warn=False), strict=True):
            lo, hi = (got[1], got[2]) if got is not None else (0.0, 0.0)
            k = job.batch_size if job.work_unit is WorkUnit.SAMPLES else 1
            ok = 0 < lo <= hi and math.isfinite(hi)
            out.append((lo * k, hi * k) if ok else (0.0, 0.0))
        return out

    def observe(self, job: Job, shape: PlacementShape, throughput: float) -> None:
        """Record that ``job`` ran at ``throughput`` work units/s on ``shape``; bad input is ignored."""
        from perfmodel.errors import InvalidInputError

        if not (throughput > 0 and math.isfinite(throughput)) or job.batch_size <= 0:
            return
        samples = throughput if job.work_unit is WorkUnit.SAMPLES else throughput * job.batch_size
        key = (self._job_features(job), shape)
        if key not in self._before:
            got = self._answers([(job, shape)], warn=False)[0]
            if got is not None and got[0] > 0:
                self._before[key] = got[0]
                if len(self._before) > BEFORE_CAP:
                    del self._before[next(iter(self._before))]
        try:
            self.corrector.observe(key[0], hardware_features(shape), samples, job_id=(job.name, shape))
        except InvalidInputError as exc:
            self._warn(job, exc)
            return
        self._observed.setdefault(job.name, set()).add(shape)
        self._rows.clear()  # every corrected prediction may have moved

    def forget(self, name: str) -> None:
        """The job ``name`` has ended (finished, failed or deleted): its own records, cached features and
        warning go; its records stay in the shared levels (``OnlineCorrector.forget``)."""
        changed = False
        for shape in self._observed.pop(name, ()):
            changed |= self.corrector.forget((name, shape))
        self._features.pop(name, None)
        self._warned.discard(name)
        if changed:  # an older finished job dropped out of the shared levels
            self._rows.clear()
        else:
            for key in [k for k in self._rows if k[2] == name]:
                del self._rows[key]

    def state(self) -> dict[str, object]:
        """What it has learnt as plain JSON values (``restore`` reads it back): the offline model's id, the
        corrector's records and fitted levels (``OnlineCorrector.state``; a record's job id is the job's
        name and placement) and the held-out answers, oldest first (those of jobs with an operator profile
        are left out: the profile is not in the state, and without it the answer's key differs)."""
        before = [
            [_features_out(f), _shape_out(shape), ips]
            for (f, shape), ips in self._before.items()
            if f.profile is None
        ]
        return {
            "model": self.model_id,
            "corrector": self.corrector.state(_id_out),
            "before": before,
        }

    def restore(self, state: Mapping[str, object]) -> None:
        """Replace what it has learnt with ``state`` (``state``'s output): after it, every answer is the
        one the oracle that wrote it gave, bit for bit, but on the GPU types a trimmed state marks to be
        refit from the records it kept (``trim_state``). ``InvalidInputError`` naming the problem (another
        offline model, other corrector settings, a value that does not parse); it is unchanged then."""
        from perfmodel.errors import InvalidInputError

        if state.get("model") != self.model_id:
            raise InvalidInputError(
                f"written over offline model {str(state.get('model'))[:16]!r}, this is {self.model_id[:16]!r}"
            )
        corrector = state.get("corrector")
        raw_before = state.get("before")
        if not isinstance(corrector, Mapping) or not isinstance(raw_before, list):
            raise InvalidInputError("corrector or before: missing")
        try:
            before: dict[tuple[JobFeatures, PlacementShape], float] = {}
            for row in raw_before[-BEFORE_CAP:]:
                f, shape, ips = row
                before[(_features_in(f), _shape_in(shape))] = float(ips)
        except (TypeError, ValueError, KeyError) as exc:
            raise InvalidInputError(f"before: does not parse: {type(exc).__name__}: {exc}") from None
        self.corrector.restore(corrector, _id_in)  # raises before changing anything
        self._before = before
        self._observed = {}
        for key in self.corrector.job_ids():
            if isinstance(key, tuple) and len(key) == 2 and isinstance(key[0], str):
                self._observed.setdefault(key[0], set()).add(key[1])
        self._rows.clear()
        self._features.clear()

    def jobs(self) -> int:
        """How many jobs it holds state of its own for (asked about, observed or warned of, and not
        forgotten)."""
        return len(self._observed.keys() | self._features.keys() | self._warned)


@dataclass(frozen=True, slots=True)
class StateParts:
    """What a ``CorrectedOracle.state`` holds, part by part (``state_parts``), to choose what to trim."""

    #: held-out answers (oldest first)
    held_out: int
    #: per live record, in the order first observed: (job name, model, GPU type, observations)
    live: list[tuple[str, str, str, int]]
    #: per ended job's record in the shared levels, oldest first: (model, GPU type)
    ended: list[tuple[str, str]]
    #: the fitted levels of each GPU type as stored (left out of a type that loses a record)
    levels: dict[str, list[object]]


def state_parts(state: Mapping[str, object]) -> StateParts:
    """The parts of ``state`` (``CorrectedOracle.state``'s output); ``InvalidInputError`` when it is not
    one."""
    from perfmodel.errors import InvalidInputError
    from perfmodel.online import state_levels, state_records

    corrector, before = state.get("corrector"), state.get("before")
    if not isinstance(corrector, Mapping) or not isinstance(before, list):
        raise InvalidInputError("corrector or before: missing")
    live, ended = state_records(corrector)
    records = corrector.get("jobs")
    assert isinstance(records, list)  # state_records read it
    names = [_record_name(x) for x in records]
    return StateParts(
        len(before),
        [(name, m, t, n) for name, (m, t, n) in zip(names, live, strict=True)],
        [(m, t) for m, t, _ in ended],
        state_levels(corrector),
    )


def trim_state(
    state: Mapping[str, object],
    *,
    held_out: int = 0,
    jobs: Collection[str] = (),
    ended: Collection[int] = (),
) -> dict[str, object]:
    """``state`` (``CorrectedOracle.state``'s output, unchanged) without its ``held_out`` oldest held-out
    answers, every record of the live jobs named in ``jobs`` and the ended jobs' records at the positions
    ``ended`` (of ``StateParts.ended``). The GPU types that lose a record are refit from the records kept
    by the oracle that restores it (``perfmodel.online.trim_state``); the others answer as the writer."""
    from perfmodel.online import trim_state as trim_corrector

    corrector = state["corrector"]
    before = state["before"]
    assert isinstance(corrector, Mapping) and isinstance(before, list)
    drop = set(jobs)
    records = corrector["jobs"]
    assert isinstance(records, list)
    positions = [k for k, x in enumerate(records) if _record_name(x) in drop] if drop else []
    return {
        **state,
        "corrector": trim_corrector(corrector, jobs=positions, retired=ended),
        "before": before[held_out:] if held_out > 0 else before,
    }


def shipped_model_id() -> str:
    """A digest of the shipped offline model file (``perfmodel/data/predictor.json``)."""
    from importlib import resources

    from perfmodel.predictor import MODEL_FILE

    return hashlib.sha256((resources.files("perfmodel") / "data" / MODEL_FILE).read_bytes()).hexdigest()


def _shape_out(s: PlacementShape) -> list[object]:
    return [s.gpu_type, s.num_gpus, s.num_nodes, s.gpus_per_node, s.interconnect.value, s.network_gbps]


def _shape_in(v: object) -> PlacementShape:
    if not isinstance(v, list) or len(v) != 6:
        raise ValueError(f"not a placement: {str(v)[:80]}")
    gpu_type, gpus, nodes, per_node, link, gbps = v
    if not (isinstance(gpu_type, str) and isinstance(gpus, int) and isinstance(nodes, int)):
        raise ValueError(f"not a placement: {str(v)[:80]}")
    if not isinstance(per_node, int) or not isinstance(gbps, int | float):
        raise ValueError(f"not a placement: {str(v)[:80]}")
    return PlacementShape(gpu_type, gpus, nodes, per_node, Interconnect(str(link)), float(gbps))


def _features_out(f: JobFeatures) -> list[object]:
    return [f.model, f.dataset, f.batch_size, f.precision, f.params, f.flops_per_sample, f.stack]


def _features_in(v: object) -> JobFeatures:
    from perfmodel.features import JobFeatures

    if not isinstance(v, list) or len(v) != 7:
        raise ValueError(f"not job features: {str(v)[:80]}")
    model, dataset, batch, precision, params, flops, stack = v
    if not all(isinstance(x, str) for x in (model, dataset, precision, stack)) or not isinstance(batch, int):
        raise ValueError(f"not job features: {str(v)[:80]}")
    for x in (params, flops):
        if x is not None and not isinstance(x, int | float):
            raise ValueError(f"not job features: {str(v)[:80]}")
    return JobFeatures(
        str(model),
        str(dataset),
        batch,
        str(precision),
        None if params is None else float(params),
        None if flops is None else float(flops),
        str(stack),
    )


def _record_name(entry: object) -> str:
    """The job name of a live record as stored (``[[name, placement], record]``)."""
    from perfmodel.errors import InvalidInputError

    key = entry[0] if isinstance(entry, list) and entry else None
    if not isinstance(key, list) or not key or not isinstance(key[0], str):
        raise InvalidInputError(f"not a live record: {str(entry)[:80]}")
    return key[0]


def _id_out(key: Hashable) -> object:
    """A corrector record's job id (the job's name and placement) as JSON."""
    if isinstance(key, tuple) and len(key) == 2 and isinstance(key[1], PlacementShape):
        return [key[0], _shape_out(key[1])]
    raise ValueError(f"not a job id of this oracle: {key!r}"[:120])


def _id_in(v: object) -> Hashable:
    if not isinstance(v, list) or len(v) != 2 or not isinstance(v[0], str):
        raise ValueError(f"not a job id: {str(v)[:80]}")
    return (v[0], _shape_in(v[1]))
