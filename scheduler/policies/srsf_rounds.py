"""SRSF's order keys and ranks for the simulator's incremental round (``scheduler.policies.incremental``).

Pure, stateful. ``SrsfRanks`` asks the oracle once for each job's peak predicted throughput (the largest
replica count with a positive answer on its fastest allowed type) and then ranks the job by its remaining
service, GPUs x remaining work / that throughput, as ``scheduler.policies.srsf`` ranks it in ``run_round``.
A module of its own so that it can be compiled with the scheduling core (setup.py's ``NATIVE``): a
Philly 10k replay asks it for some 150,000 ranks, while ``srsf.py`` keeps the policy's config, which is
checked against its type hints at run time (``parse_config``) and so stays Python.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from scheduler.core.protocols import ThroughputOracle
from scheduler.core.types import Job
from scheduler.policies.base import TypeInfo, allowed_types
from scheduler.policies.elastic_shares import PredictedThroughputs, size_bounds

#: a job's order key (remaining service, submit time, name) and its rank (the remaining service)
Keyed = tuple[tuple[float, float, str], float]


class SrsfRanks:
    """Each job's remaining service from its peak predicted throughput, asked once per job: every job
    given at construction in one oracle batch, a job first seen later when it arrives (the oracle's
    answers must not depend on the batch, the incremental round's premise)."""

    def __init__(self, oracle: ThroughputOracle, infos: Mapping[str, TypeInfo], jobs: Sequence[Job]) -> None:
        self._oracle = oracle
        self._infos = infos
        self._peak: dict[str, tuple[int, float]] = {}
        self._asked: set[str] = set()
        self._learn(jobs)

    def _learn(self, new: Sequence[Job]) -> None:
        table = PredictedThroughputs(self._oracle, new, self._infos, size_bounds)
        peak = self._peak
        for j in new:
            peaks = {t: table.peak(j, t) for t in allowed_types(j, self._infos)}
            speeds = sorted([(v, t) for t, (_, v) in peaks.items()], key=_fastest_first)
            types = [t for v, t in speeds if v > 0]
            if types:
                peak[j.name] = peaks[types[0]]
        self._asked.update(j.name for j in new)

    def key_of(self, job: Job, progress: float, attained: float) -> Keyed | None:
        """The job's order key and rank at ``progress``; None when no type runs it (it never starts)."""
        got = self._peak.get(job.name)
        if got is None:
            return None
        replicas, best = got
        remaining_s = max(0.0, job.total_work - progress) / best  # ``remaining_work / best``
        svc = replicas * job.gpus_per_replica * remaining_s
        return (svc, job.submit_time, job.name), svc

    def rank_of(self, job: Job, progress: float, attained: float) -> float:
        """``key_of``'s rank alone, for a running job (running jobs were asked for, so they have one)."""
        replicas, best = self._peak[job.name]
        return replicas * job.gpus_per_replica * (max(0.0, job.total_work - progress) / best)

    def batch_keys(self, new: Sequence[Job]) -> list[Keyed | None]:
        """``key_of`` for newly arrived jobs at their own progress, asking the oracle about those not
        asked for yet in one batch."""
        unasked = [j for j in new if j.name not in self._asked]
        if unasked:
            self._learn(unasked)
        return [self.key_of(j, j.progress, j.attained_service) for j in new]


def _fastest_first(speed: tuple[float, str]) -> tuple[float, str]:
    return (-speed[0], speed[1])
