"""ElasticFlow-style deadline scheduling: admission control, fewest GPUs per deadline, then sharing.

Pure. Jobs with a deadline are considered in arrival order (submit time). For each, the policy finds
the fewest GPUs (any allowed type and replica count; ties to the faster type) whose predicted finish
time, ``remaining work / throughput x slack``, is within the deadline, and admits the job only if those
GPUs are still available after the jobs admitted before it. A running job whose current allocation
meets its deadline keeps it. Jobs whose deadline cannot be met are rejected: they run best-effort
(``rejected: best_effort``, the default) or not at all (``rejected: drop``). Jobs without a deadline
are best-effort. GPUs left after the admitted jobs' minimum shares go by marginal speed-up gain
(``elastic_shares.grow_by_marginal_gain``) to best-effort jobs and to admitted elastic jobs. Admitted jobs may
preempt best-effort ones; best-effort jobs never preempt.

Follows Gu et al., "ElasticFlow: An Elastic Serverless Training Platform for Distributed Deep
Learning", ASPLOS 2023. Differs: admission checks that the minimum share is available now until the
deadline (a one-slot plan, more conservative than ElasticFlow's time-slotted plan), admission is
recomputed each round from arrival order instead of being remembered, and rejected jobs may still run
best-effort.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from scheduler.core.decisions import Decision
from scheduler.core.protocols import ThroughputOracle
from scheduler.core.types import ClusterSnapshot, Job
from scheduler.policies.base import type_infos
from scheduler.policies.config import parse_config, require
from scheduler.policies.elastic import min_replicas_of, rank_types
from scheduler.policies.elastic_shares import PredictedThroughputs, Share, grow_by_marginal_gain, used_by_type
from scheduler.policies.greedy import Request, greedy_allocate


@dataclass(frozen=True, slots=True)
class DeadlineConfig:
    """``slack`` multiplies predicted run time (>1 keeps a margin); ``rejected``: what infeasible jobs get."""

    rejected: Literal["best_effort", "drop"] = "best_effort"
    slack: float = 1.0
    horizon_s: float = 3600.0
    restart_cost_s: float = 60.0

    def __post_init__(self) -> None:
        require(self.slack >= 1.0, "slack", "must be >= 1")
        require(self.horizon_s > 0, "horizon_s", "must be > 0")
        require(self.restart_cost_s >= 0, "restart_cost_s", "must be >= 0")


class DeadlinePolicy:
    """Admission control on deadlines, fewest GPUs that meet each, leftover by marginal gain."""

    name = "deadline"

    def __init__(self, config: DeadlineConfig | None = None) -> None:
        self.config = config or DeadlineConfig()

    @classmethod
    def from_config(cls, config: Mapping[str, Any] | None = None) -> DeadlinePolicy:
        return cls(parse_config(DeadlineConfig, cls.name, config))

    def allocate(
        self, snapshot: ClusterSnapshot, jobs: Sequence[Job], oracle: ThroughputOracle
    ) -> Mapping[str, Decision]:
        infos = type_infos(snapshot)
        live = [j for j in jobs if j.remaining_work > 0]
        table = PredictedThroughputs(
            oracle, live, infos, lambda j: range(min_replicas_of(j), j.max_replicas + 1)
        )
        ranking = rank_types(live, infos, table)
        live, norm, types_of, extra = ranking.runnable, ranking.best, ranking.types_of, ranking.unrunnable

        # Capacity admission can count on: everything but GPUs that cannot be taken back.
        done = {j.name for j in jobs if j.remaining_work <= 0}
        ours = {j.name for j in live}
        pinned = {j.name for j in live if not j.preemptible and j.name in snapshot.allocations}
        avail = {t: info.capacity for t, info in infos.items()}
        for t, used in used_by_type(snapshot, exclude=done | (ours - pinned)).items():
            avail[t] = avail.get(t, 0) - used

        shares: dict[str, Share] = {}
        for name in sorted(pinned):
            a = snapshot.allocations[name]
            shares[name] = Share(a.gpu_type, a.replicas)
        admitted, best_effort, notes = self._admit(snapshot, live, pinned, table, avail, shares, extra)

        # Best-effort jobs already running keep their GPUs while capacity allows.
        current = {
            j.name: Share(snapshot.allocations[j.name].gpu_type, snapshot.allocations[j.name].replicas)
            for j in live
            if j.name in snapshot.allocations
        }
        for j in best_effort:
            cur = current.get(j.name)
            if cur is None or j.name in pinned or cur.gpu_type is None:
                continue
            gpus = cur.replicas * j.gpus_per_replica
            if avail.get(cur.gpu_type, 0) >= gpus:
                avail[cur.gpu_type] -= gpus
                shares[j.name] = Share(cur.gpu_type, cur.replicas)

        admitted_names = {j.name for j in admitted}
        grow_by_marginal_gain(
            admitted + best_effort,
            shares,
            avail,
            table,
            norm,
            may_start=lambda j: j.name not in admitted_names and j.name not in extra,
            may_grow=self._may_grow(current, table),
            types_of=lambda j: types_of[j.name],
        )
        requests = self._requests(snapshot, admitted, best_effort, pinned, shares, notes, table, extra)
        return greedy_allocate(snapshot, jobs, requests, preemptive=True, extra=extra)

    def _admit(
        self,
        snapshot: ClusterSnapshot,
        live: Sequence[Job],
        pinned: set[str],
        table: PredictedThroughputs,
        avail: dict[str, int],
        shares: dict[str, Share],
        extra: dict[str, Decision],
    ) -> tuple[list[Job], list[Job], dict[str, str]]:
        """Admission in arrival order: each deadline job gets the fewest available GPUs that meet its
        deadline (taken from ``avail``, its share in ``shares``) or is rejected (best-effort, or dropped
        into ``extra``). Returns the admitted jobs, the best-effort jobs and a note per job."""
        admitted: list[Job] = []
        best_effort: list[Job] = []
        notes: dict[str, str] = {}
        for j in sorted(live, key=lambda j: (j.submit_time, j.name)):
            if j.name in pinned:
                (admitted if j.deadline is not None else best_effort).append(j)
                continue
            if j.deadline is None:
                best_effort.append(j)
                continue
            left = j.deadline - snapshot.now
            if left <= 0:
                notes[j.name] = "deadline passed; best-effort"
                best_effort.append(j)
                continue
            choice, feasible_alone = self._fewest_gpus(snapshot, j, table, avail, left)
            if choice is not None:
                t, r = choice
                avail[t] -= r * j.gpus_per_replica
                shares[j.name] = Share(t, r)
                admitted.append(j)
                notes[j.name] = f"admitted: {r} x {j.gpus_per_replica} {t} meet the deadline in {left:.0f} s"
                continue
            why = (
                "rejected: deadline cannot be met given the jobs admitted before it"
                if feasible_alone
                else "rejected: deadline cannot be met even with the whole cluster"
            )
            if self.config.rejected == "drop":
                extra[j.name] = Decision(j.name, None, why, unresolvable=not feasible_alone)
            else:
                notes[j.name] = f"{why}; best-effort"
                best_effort.append(j)
        return admitted, best_effort, notes

    def _may_grow(
        self, current: Mapping[str, Share], table: PredictedThroughputs
    ) -> Callable[[Job, str, int, int], bool]:
        """Whether a job may grow from ``r_from`` to ``r_to`` replicas of a type: not when it is running
        and non-preemptible; a running job's resize in place must repay its restart cost within the
        horizon."""
        cfg = self.config

        def may_grow(job: Job, t: str, r_from: int, r_to: int) -> bool:
            cur = current.get(job.name)
            if not job.preemptible and cur is not None:
                return False
            if cur is None or r_from != cur.replicas or cur.gpu_type != t:
                return True
            new, old = table.get(job.name, t, r_to), table.get(job.name, t, r_from)
            return (new - old) * cfg.horizon_s > old * cfg.restart_cost_s

        return may_grow

    def _requests(
        self,
        snapshot: ClusterSnapshot,
        admitted: Sequence[Job],
        best_effort: Sequence[Job],
        pinned: set[str],
        shares: Mapping[str, Share],
        notes: Mapping[str, str],
        table: PredictedThroughputs,
        extra: dict[str, Decision],
    ) -> list[Request]:
        """Admitted jobs by deadline, then best-effort ones, each asking for its share (admitted jobs
        may fall back only to replica counts that still meet the deadline); jobs with no share get
        their decision in ``extra``."""
        admitted_names = {j.name for j in admitted}
        requests: list[Request] = []
        ordered = sorted(admitted, key=lambda j: (j.deadline or 0.0, j.name)) + list(best_effort)
        for j in ordered:
            s = shares.get(j.name)
            if s is None or s.gpu_type is None or s.replicas == 0:
                if j.name not in extra:
                    reason = notes.get(j.name, "best-effort")
                    extra[j.name] = Decision(j.name, None, f"{reason}; no GPUs left for best-effort jobs")
                continue
            is_admitted = j.name in admitted_names
            floor = s.replicas if is_admitted and j.name not in pinned else min_replicas_of(j)
            if is_admitted:
                # may fall back only to replica counts that still meet the deadline
                floor = min(floor, self._min_meeting(j, s.gpu_type, table, snapshot.now) or floor)
            reps = tuple(range(s.replicas, floor - 1, -1))
            requests.append(
                Request(
                    j,
                    (s.gpu_type,),
                    reps,
                    rank=0.0 if is_admitted else 1.0,
                    note=notes.get(j.name, "best-effort"),
                    keep_current=False,  # the first replica count is the target, not just an option
                )
            )
        return requests

    def _meets(self, job: Job, thr: float, left: float) -> bool:
        return thr > 0 and job.remaining_work / thr * self.config.slack <= left

    def _min_meeting(self, job: Job, t: str, table: PredictedThroughputs, now: float) -> int | None:
        left = (job.deadline or now) - now
        for r in range(min_replicas_of(job), job.max_replicas + 1):
            if self._meets(job, table.get(job.name, t, r), left):
                return r
        return None

    def _fewest_gpus(
        self,
        snapshot: ClusterSnapshot,
        job: Job,
        table: PredictedThroughputs,
        avail: Mapping[str, int],
        left: float,
    ) -> tuple[tuple[str, int] | None, bool]:
        """(type, replicas) with the fewest GPUs meeting the deadline that is available, and whether
        any choice would meet it on an empty cluster. A running job that meets it where it is stays."""
        cur = snapshot.allocations.get(job.name)
        if (
            cur is not None
            and self._meets(job, table.get(job.name, cur.gpu_type, cur.replicas), left)
            and avail.get(cur.gpu_type, 0) >= cur.total_gpus
        ):
            return (cur.gpu_type, cur.replicas), True
        options: list[tuple[int, float, str, int]] = []
        for t in sorted(avail):
            if not job.allows(t):
                continue
            for r in range(min_replicas_of(job), job.max_replicas + 1):
                thr = table.get(job.name, t, r)
                if self._meets(job, thr, left):
                    options.append((r * job.gpus_per_replica, -thr, t, r))
                    break  # more replicas of this type only cost more GPUs
        options.sort()
        for gpus, _, t, r in options:
            if avail.get(t, 0) >= gpus:
                return (t, r), True
        return None, bool(options)
