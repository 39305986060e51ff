"""``TableOracle``: measured ground-truth throughput (``perfmodel.truth``) with injectable prediction error.

The simulator uses one ``TableOracle`` with ``mre=0`` as the truth (how fast jobs really progress)
and another with ``mre=m`` as what the policy is told. The error is a multiplicative factor on the
predicted *execution time* (so on 1/throughput), log-normal with sigma chosen so that the mean
relative error of the time estimate is exactly ``m``: for X ~ N(0, s^2),
E|e^X - 1| = e^(s^2/2) * erf(s / sqrt 2). Each (seed, job name, shape) draws its own factor from a
hash, so answers are deterministic, independent of query order and stable across runs and processes.
Not pure in the strict sense (it holds caches), but it does no I/O after construction and no clock.
"""

from __future__ import annotations

import hashlib
import logging
import math
from collections.abc import Sequence
from statistics import NormalDist

from scheduler.core.errors import ConfigError
from scheduler.core.protocols import MeasuredThroughput, ThroughputOracle
from scheduler.core.types import Job, PlacementShape, WorkUnit

log = logging.getLogger(__name__)

_NORMAL = NormalDist()


def mre_of_sigma(sigma: float) -> float:
    """Mean relative error E|e^X - 1| of a log-normal factor e^X, X ~ N(0, sigma^2)."""
    return math.exp(sigma * sigma / 2.0) * math.erf(sigma / math.sqrt(2.0))


def sigma_for_mre(mre: float) -> float:
    """The log-normal sigma whose mean relative error is ``mre`` (bisection: ``mre_of_sigma`` increases)."""
    if mre < 0 or not math.isfinite(mre):
        raise ConfigError(f"mre: must be a finite number >= 0, got {mre!r}")
    if mre == 0:
        return 0.0
    lo, hi = 0.0, 1.0
    while mre_of_sigma(hi) < mre:
        hi *= 2.0
    for _ in range(100):
        mid = (lo + hi) / 2.0
        if mre_of_sigma(mid) < mre:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2.0


def _unit_interval(seed: int, key: str) -> float:
    """A deterministic number in (0, 1) from a seed and a key (blake2b; not Python's salted ``hash``)."""
    digest = hashlib.blake2b(f"{seed}\x00{key}".encode(), digest_size=8).digest()
    return (int.from_bytes(digest, "big") + 0.5) / 2.0**64


def shape_key(shape: PlacementShape) -> str:
    s = shape
    return f"{s.gpu_type}/{s.num_gpus}/{s.num_nodes}/{s.gpus_per_node}/{s.interconnect.value}"


class ErrorInjector:
    """Deterministic multiplicative time-estimate errors with a given mean relative error."""

    def __init__(self, mre: float, seed: int = 0, *, per_shape: bool = True) -> None:
        self.mre = mre
        self.seed = seed
        self.per_shape = per_shape
        self.sigma = sigma_for_mre(mre)
        self._cache: dict[str, float] = {}

    def time_factor(self, job_name: str, shape: PlacementShape | None) -> float:
        """Factor by which the predicted execution time is off (1.0 = exact)."""
        if self.sigma == 0.0:
            return 1.0
        key = job_name if shape is None or not self.per_shape else f"{job_name}|{shape_key(shape)}"
        f = self._cache.get(key)
        if f is None:
            z = _NORMAL.inv_cdf(_unit_interval(self.seed, key))
            f = math.exp(self.sigma * z)
            self._cache[key] = f
        return f


class TableOracle(ThroughputOracle):
    """Measured throughput per (model, batch size, GPU type, GPUs, nodes), with optional injected error.

    Answers are in the job's work units per second (iterations/s x batch size for sample-counted
    jobs). Configurations the table has not measured get ``fallback``'s answer when one is given
    (e.g. a ``PredictorOracle`` for GPU types without measurements), else 0 ("cannot run there").
    ``per_shape=False`` draws one error per job instead of one per (job, shape): the survey's model,
    where each job's execution-time estimate is off by one factor.
    """

    def __init__(
        self,
        truth: MeasuredThroughput,
        *,
        mre: float = 0.0,
        seed: int = 0,
        fallback: ThroughputOracle | None = None,
        per_shape: bool = True,
    ) -> None:
        self.truth = truth
        self.errors = ErrorInjector(mre, seed, per_shape=per_shape)
        self.fallback = fallback
        self._table: dict[tuple[str, int, str, str, int, int, float | None], float | None] = {}

    @property
    def mre(self) -> float:
        return self.errors.mre

    def true_iterations_per_s(self, job: Job, shape: PlacementShape) -> float | None:
        """The table's iterations/s for this job and shape, or None when not measured; across nodes at the
        shape's ``network_gbps`` (the truth scales its measured sync time by the link)."""
        if not job.model or job.batch_size <= 0:
            return None
        gbps = shape.network_gbps if shape.num_nodes > 1 else None
        key = (job.model, job.batch_size, job.dataset, shape.gpu_type, shape.num_gpus, shape.num_nodes, gbps)
        if key in self._table:
            return self._table[key]
        value = self.truth.throughput(
            job.model,
            job.batch_size,
            shape.gpu_type,
            shape.num_gpus,
            shape.num_nodes,
            job.dataset,
            network_gbps=gbps,
        )
        if value is not None and not (value > 0 and math.isfinite(value)):
            value = None
        self._table[key] = value
        return value

    def throughput(self, queries: Sequence[tuple[Job, PlacementShape]]) -> list[float]:
        out: list[float] = [0.0] * len(queries)
        missing: list[int] = []
        for i, (job, shape) in enumerate(queries):
            ips = self.true_iterations_per_s(job, shape)
            if ips is None:
                missing.append(i)
                continue
            per_s = ips * job.batch_size if job.work_unit is WorkUnit.SAMPLES else ips
            out[i] = per_s / self.errors.time_factor(job.name, shape)
        if missing and self.fallback is not None:
            answers = self.fallback.throughput([queries[i] for i in missing])
            for i, value in zip(missing, answers, strict=True):
                job, shape = queries[i]
                out[i] = value / self.errors.time_factor(job.name, shape) if value > 0 else 0.0
        return out
