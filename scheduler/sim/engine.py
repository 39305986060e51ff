"""The simulator's discrete-event engine: a virtual clock, an event heap, and ``run_round`` on triggers.

The engine replays jobs through the *same* ``scheduler.core.round.run_round`` (policy + placement +
planner) the operator calls. Events are job arrivals, job completions, LAS-style wake-ups (a running
job's attained service crossing one of the policy's queue thresholds) and round ticks. A round is run
at a time when something changed: a job arrived or finished, a wake-up fired, or a tick came while
jobs were waiting (``round_seconds > 0``: ticks every ``round_seconds`` so time-dependent priorities
are re-evaluated; ``round_seconds == 0``: event-driven only, the survey's semantics). Quiet periods
(nobody waiting) cost nothing. Progress is advanced lazily per job from its *true* rate (the truth
oracle at its placement), and the planner's actions are applied with their restart cost (seconds in
which the job holds its GPUs but makes no progress) and lost work. No I/O, no wall clock except for
reporting the engine's own speed; deterministic for a given input.

When the policy offers an incremental round (``scheduler.core.round.IncrementalRound``, e.g. ``las``,
``srsf`` and ``fifo`` on one GPU type with rigid jobs) and ``EngineConfig.incremental`` is on, the engine
reports arrivals and departures to it and asks it each round for the jobs whose allocation changes,
instead of building every active job and calling ``run_round``: the same allocations (so the same
results) at the cost of what changed. ``check_incremental`` also runs ``run_round`` every round and
raises ``IncrementalMismatch`` if the two disagree (the tests keep it on). A round in which a running job
has reached its total work before its completion event (float rounding) goes back to ``run_round`` for
the rest of the run.
"""

from __future__ import annotations

import heapq
import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields

from scheduler.core.decisions import Action, ActionKind, RoundResult
from scheduler.core.placement import spread_of
from scheduler.core.planner import is_migration, single_action
from scheduler.core.protocols import Policy, ThroughputOracle
from scheduler.core.round import IncrementalRound, RoundCosts
from scheduler.core.types import Allocation, ClusterSnapshot, Job, Node

log = logging.getLogger(__name__)

# event kinds, in the order they are handled at equal times: completions free GPUs before arrivals
_COMPLETION, _ARRIVAL, _WAKE, _TICK = 0, 1, 2, 3
_EPS = 1e-9

#: ``scheduler.core.round.run_round`` or a stand-in: called as ``fn(snapshot, jobs, policy, oracle,
#: costs=..., explain=False)`` (the engine never reads wait reasons, so it asks for none)
RoundFn = Callable[..., RoundResult]
_JOB_FIELDS = tuple(f.name for f in fields(Job))
_I_PROGRESS, _I_CHECKPOINT, _I_ATTAINED, _I_RESTARTS, _I_CHANGED = (
    _JOB_FIELDS.index(n)
    for n in ("progress", "checkpoint_progress", "attained_service", "restarts", "last_change_time")
)


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """How the engine runs rounds.

    ``round_seconds``: 0 = event-driven only; > 0 = also a round every that many seconds while jobs
    wait. ``restart_cost_s`` / ``resize_cost_s`` are handed to the planner (the seconds a restart after
    a preemption or migration, or an elastic resize, costs). ``wake_thresholds_gpu_s``: the
    attained-service levels (GPU-seconds) at which a running job's priority changes (LAS queues), so
    a round runs when one is crossed.
    """

    round_seconds: float = 300.0
    restart_cost_s: float = 0.0
    resize_cost_s: float = 0.0
    wake_thresholds_gpu_s: tuple[float, ...] = ()
    progress_every: int = 100
    #: skip a completion's round when it provably changes nothing (one GPU type, rigid jobs, nobody waiting)
    skip_idle_rounds: bool = True
    #: benchmark baseline only: a round at every tick whether or not anything changed (a naive round loop)
    always_tick: bool = False
    #: use the policy's incremental round when it offers one (same results; see the module docstring)
    incremental: bool = True
    #: also run ``run_round`` every round and raise ``IncrementalMismatch`` if the incremental round differs
    check_incremental: bool = False


class IncrementalMismatch(AssertionError):
    """The policy's incremental round and ``run_round`` disagreed (a bug in the incremental round)."""


@dataclass(slots=True)
class JobRecord:
    """What happened to one job (times on the simulation clock, seconds)."""

    name: str
    submit_time: float
    gpus: int
    ideal_duration: float
    deadline: float | None = None
    first_start: float | None = None
    finish: float | None = None
    preemptions: int = 0
    restarts: int = 0
    resizes: int = 0
    #: restarts that moved the running job to other GPUs (another type or other nodes), no wait between
    migrations: int = 0
    gpu_seconds: float = 0.0
    failed: str = ""

    @property
    def jct(self) -> float | None:
        return None if self.finish is None else self.finish - self.submit_time

    @property
    def queueing_delay(self) -> float | None:
        return None if self.first_start is None else self.first_start - self.submit_time


@dataclass(slots=True)
class EngineResult:
    """Per-job records, the cluster time series and the engine's own counters."""

    records: list[JobRecord]
    total_gpus: int
    # step series sampled after every round: (time, GPUs allocated, jobs waiting, jobs running)
    series_t: list[float] = field(default_factory=list)
    series_used: list[int] = field(default_factory=list)
    series_waiting: list[int] = field(default_factory=list)
    series_running: list[int] = field(default_factory=list)
    events: int = 0
    rounds: int = 0
    skipped_rounds: int = 0
    jobs_in_rounds: int = 0
    wall_s: float = 0.0
    cpu_s: float = 0.0
    end_time: float = 0.0
    round_wall_s: float = 0.0
    oracle_wall_s: float = 0.0
    #: rounds decided by the policy's incremental round (the rest went through ``run_round``)
    incremental_rounds: int = 0


@dataclass(slots=True)
class _State:
    job: Job
    record: JobRecord
    alloc: Allocation | None = None
    rate: float = 0.0
    progress: float = 0.0
    updated: float = 0.0
    resume_at: float = 0.0
    attained: float = 0.0
    version: int = 0
    changed_at: float | None = None
    gpus: int = 0
    done_at: float = math.inf
    stale: bool = False
    values: list[object] = field(default_factory=list)
    order: int = 0  # arrival order (the order of the active jobs handed to ``run_round``)


class Engine:
    """One simulation run: ``Engine(...).run()`` returns an ``EngineResult``.

    ``policy_oracle`` is what the policy is told (possibly with injected error); ``truth`` is how
    fast jobs really go. ``ideal_durations`` (seconds per job) feed the fairness metrics.
    """

    def __init__(
        self,
        nodes: Sequence[Node],
        jobs: Sequence[Job],
        policy: Policy,
        policy_oracle: ThroughputOracle,
        truth: ThroughputOracle,
        config: EngineConfig,
        *,
        run_round: RoundFn,
        ideal_durations: Mapping[str, float] | None = None,
        on_progress: Callable[[int, int], None] | None = None,
    ) -> None:
        self.nodes = tuple(nodes)
        self.node_map = {n.name: n for n in self.nodes}
        self.policy = policy
        self.policy_oracle = policy_oracle
        self.truth = truth
        self.config = config
        self.run_round = run_round
        self.on_progress = on_progress
        ideal = ideal_durations or {}
        self.states: dict[str, _State] = {}
        for job in sorted(jobs, key=lambda j: (j.submit_time, j.name)):
            if job.name in self.states:
                raise ValueError(f"duplicate job name {job.name!r}")
            rec = JobRecord(
                name=job.name,
                submit_time=job.submit_time,
                gpus=job.max_gpus,
                ideal_duration=ideal.get(job.name, math.nan),
                deadline=job.deadline,
            )
            self.states[job.name] = _State(
                job=job, record=rec, updated=job.submit_time, order=len(self.states)
            )
        self.total_gpus = sum(n.capacity_for_jobs for n in self.nodes)

    # -- progress bookkeeping -------------------------------------------------------------------
    def _advance(self, st: _State, now: float) -> None:
        if st.alloc is not None and now > st.updated:
            run_from = max(st.updated, st.resume_at)
            if now > run_from:
                st.progress = min(st.job.total_work, st.progress + st.rate * (now - run_from))
            gained = st.gpus * (now - st.updated)
            st.attained += gained
            st.record.gpu_seconds += gained
            st.stale = True
        st.updated = max(st.updated, now)

    def _view(self, st: _State, now: float) -> Job:
        # the simulator checkpoints on every preemption (the operator's grace period), so what
        # survives a restart is all progress made; the restart cost is charged in seconds instead
        if st.stale:
            # positional construction from a kept value list is ~4x faster than dataclasses.replace
            # on this 27-field class, and this runs for every running job in every round
            values = st.values
            if not values:
                values.extend(getattr(st.job, n) for n in _JOB_FIELDS)
            values[_I_PROGRESS] = st.progress
            values[_I_CHECKPOINT] = st.progress
            values[_I_ATTAINED] = st.attained
            values[_I_RESTARTS] = st.record.restarts
            values[_I_CHANGED] = st.changed_at
            st.job = Job(*values)  # type: ignore[arg-type]
            st.stale = False
        return st.job

    # -- the run --------------------------------------------------------------------------------
    def run(self) -> EngineResult:
        cfg = self.config
        result = EngineResult(records=[s.record for s in self.states.values()], total_gpus=self.total_gpus)
        heap: list[tuple[float, int, int, str, int]] = []
        seq = 0
        for name, st in self.states.items():
            heap.append((st.job.submit_time, _ARRIVAL, seq, name, 0))
            seq += 1
        heapq.heapify(heap)
        active: dict[str, _State] = {}
        running: dict[str, _State] = {}
        allocs: dict[str, Allocation] = {}
        pending_arrivals = len(self.states)
        finished = 0
        tick_at = math.inf
        wall0 = time.perf_counter()
        cpu0 = time.process_time()
        if self.on_progress:
            self.on_progress(0, len(self.states))
        total = len(self.states)
        thresholds = tuple(sorted(t for t in cfg.wake_thresholds_gpu_s if t > 0))
        used = 0
        costs = RoundCosts(restart_cost_s=cfg.restart_cost_s, resize_cost_s=cfg.resize_cost_s)

        # With one GPU type, only rigid jobs and nobody waiting, a completion leaves every policy nothing
        # to do (no one to start, no one to preempt for, no size or type to change): skip that round.
        one_type = len({n.gpu_type for n in self.nodes}) == 1
        elastic_active = 0
        session: IncrementalRound | None = None
        if cfg.incremental:
            make = getattr(self.policy, "incremental", None)
            if make is not None:
                session = make(self.nodes, self.policy_oracle, [s.job for s in self.states.values()])

        while heap:
            now = heap[0][0]
            dirty = False
            forced = False  # a trigger other than a completion
            while heap and heap[0][0] <= now:
                _, kind, _, name, version = heapq.heappop(heap)
                result.events += 1
                if kind == _ARRIVAL:
                    st = self.states[name]
                    active[name] = st
                    elastic_active += st.job.is_elastic
                    if session is not None:
                        session.add(st.job)
                    pending_arrivals -= 1
                    dirty = forced = True
                elif kind == _COMPLETION:
                    st = self.states[name]
                    if st.version != version or st.alloc is None:
                        continue
                    self._advance(st, now)
                    st.progress = st.job.total_work
                    st.record.finish = now
                    used -= st.alloc.total_gpus
                    st.alloc = None
                    st.version += 1
                    del running[name], allocs[name], active[name]
                    elastic_active -= st.job.is_elastic
                    if session is not None:
                        session.remove(name)
                    finished += 1
                    dirty = True
                    if self.on_progress and finished % cfg.progress_every == 0:
                        self.on_progress(finished, total)
                elif kind == _WAKE:
                    st = self.states[name]
                    if st.version == version and st.alloc is not None:
                        dirty = forced = True
                        # a job that keeps running after this round must still wake at its next boundary
                        self._advance(st, now)
                        seq = self._push_wake(heap, seq, st, now, thresholds, crossed=True)
                elif kind == _TICK and now >= tick_at:
                    tick_at = math.inf
                    if len(active) > len(running) or cfg.always_tick:
                        dirty = forced = True
            if not dirty:
                continue
            if (
                cfg.skip_idle_rounds
                and not forced
                and one_type
                and not elastic_active
                and len(active) == len(running)
            ):
                result.skipped_rounds += 1
                self._sample(result, now, used, 0, len(running))
                continue

            # -- one scheduling round at `now` --
            # ``_advance`` for every running job, inlined (this runs for every running job every round)
            progress: dict[str, tuple[float, float]] = {}
            all_left = True  # every running job still has work left (the incremental round's premise)
            for name, st in running.items():
                updated = st.updated
                if now > updated:
                    resume_at = st.resume_at
                    run_from = updated if updated >= resume_at else resume_at  # max(updated, resume_at)
                    if now > run_from:
                        total_work = st.job.total_work
                        p = st.progress + st.rate * (now - run_from)
                        st.progress = total_work if total_work <= p else p  # min(total_work, p)
                    gained = st.gpus * (now - updated)
                    st.attained += gained
                    st.record.gpu_seconds += gained
                    st.stale = True
                    st.updated = now
                if session is not None:
                    if not st.job.total_work - st.progress > 0:
                        all_left = False
                    progress[name] = (st.progress, st.attained)
            if session is not None and not all_left:
                # a job done before its completion event: run_round's rules for that from here on
                log.debug("incremental rounds stop", extra={"time": now})
                session = None
            actions: Sequence[Action] | None = None
            if session is not None:
                t0 = time.perf_counter()
                changes = session.round(now, progress)
                actions = self._actions_for(changes, now)
                if cfg.check_incremental:
                    self._check(actions, active, allocs, now, costs)
                result.round_wall_s += time.perf_counter() - t0
                result.incremental_rounds += 1
            else:
                jobs = [self._view(st, now) for st in active.values()]
                snapshot = ClusterSnapshot(now=now, nodes=self.nodes, allocations=dict(allocs))
                t0 = time.perf_counter()
                rr = self.run_round(
                    snapshot, jobs, self.policy, self.policy_oracle, costs=costs, explain=False
                )
                result.round_wall_s += time.perf_counter() - t0
                actions = rr.actions
            result.rounds += 1
            changed: list[_State] = []
            for action in actions:
                target = active.get(action.job)
                if target is not None:
                    used += self._apply(target, action, now, running, allocs, changed)
            if changed:
                t1 = time.perf_counter()
                queries = [
                    (self._view(st, now), spread_of(st.alloc, self.node_map)) for st in changed if st.alloc
                ]
                rates = self.truth.throughput(queries) if queries else []
                result.oracle_wall_s += time.perf_counter() - t1
                for st, rate in zip([s for s in changed if s.alloc], rates, strict=True):
                    if rate <= 0 or not math.isfinite(rate):
                        # the policy placed the job where it cannot run: record it and let it go
                        st.record.failed = f"no throughput on {st.alloc.gpu_type if st.alloc else '?'}"
                        used -= st.alloc.total_gpus if st.alloc else 0
                        st.alloc = None
                        st.version += 1
                        running.pop(st.job.name, None)
                        allocs.pop(st.job.name, None)
                        active.pop(st.job.name, None)
                        if session is not None:
                            session.remove(st.job.name)
                        finished += 1
                        continue
                    st.rate = rate
                    start = max(now, st.resume_at)
                    done = start + max(0.0, st.job.total_work - st.progress) / rate
                    heapq.heappush(heap, (done, _COMPLETION, seq, st.job.name, st.version))
                    seq += 1
                    st.done_at = done
                    seq = self._push_wake(heap, seq, st, now, thresholds)
            waiting = len(active) - len(running)
            result.jobs_in_rounds += len(active)
            self._sample(result, now, used, waiting, len(running))
            if (
                cfg.round_seconds > 0
                and (waiting or cfg.always_tick)
                and (running or pending_arrivals)
                and tick_at == math.inf
            ):
                tick_at = (math.floor(now / cfg.round_seconds) + 1) * cfg.round_seconds
                heapq.heappush(heap, (tick_at, _TICK, seq, "", 0))
                seq += 1

        result.end_time = max((r.finish or 0.0) for r in result.records) if result.records else 0.0
        result.wall_s = time.perf_counter() - wall0
        result.cpu_s = time.process_time() - cpu0
        if self.on_progress:
            self.on_progress(total, total)
        return result

    def _actions_for(self, changes: Mapping[str, Allocation | None], now: float) -> list[Action]:
        """The planner's actions for an incremental round's changes, in the order ``run_round`` gives."""
        out: list[Action] = []
        cfg = self.config
        for name in sorted(changes, key=lambda n: self.states[n].order):
            st = self.states[name]
            action = single_action(
                self._view(st, now),
                st.alloc,
                changes[name],
                restart_cost_s=cfg.restart_cost_s,
                resize_cost_s=cfg.resize_cost_s,
            )
            if action is not None:
                out.append(action)
        return out

    def _check(
        self,
        actions: Sequence[Action],
        active: Mapping[str, _State],
        allocs: Mapping[str, Allocation],
        now: float,
        costs: RoundCosts,
    ) -> None:
        """Raise ``IncrementalMismatch`` unless ``run_round`` plans the same changes as ``actions``."""
        jobs = [self._view(st, now) for st in active.values()]
        snapshot = ClusterSnapshot(now=now, nodes=self.nodes, allocations=dict(allocs))
        rr = self.run_round(snapshot, jobs, self.policy, self.policy_oracle, costs=costs, explain=False)

        def key(a: Action) -> tuple[object, ...]:
            return (a.kind, a.job, a.before, a.after, a.lost_work, a.cost_seconds)

        want = [key(a) for a in rr.actions if a.kind is not ActionKind.KEEP]
        got = [key(a) for a in actions if a.kind is not ActionKind.KEEP]
        if want != got:
            raise IncrementalMismatch(
                f"incremental round of policy {self.policy.name!r} at t={now}: {got} != run_round's {want}"
            )

    @staticmethod
    def _push_wake(
        heap: list[tuple[float, int, int, str, int]],
        seq: int,
        st: _State,
        now: float,
        thresholds: tuple[float, ...],
        crossed: bool = False,
    ) -> int:
        """Queue a wake-up when the running job's attained service reaches its next queue boundary."""
        if not thresholds or not st.gpus:
            return seq
        # at a wake-up the job sits exactly on the boundary it just crossed: look past it
        level = st.attained + (max(1e-6, 1e-9 * st.attained) if crossed else _EPS)
        for th in thresholds:
            if th > level:
                wake = now + (th - st.attained) / st.gpus
                if wake < st.done_at:
                    heapq.heappush(heap, (wake, _WAKE, seq, st.job.name, st.version))
                    seq += 1
                break
        return seq

    @staticmethod
    def _sample(result: EngineResult, now: float, used: int, waiting: int, running: int) -> None:
        result.series_t.append(now)
        result.series_used.append(used)
        result.series_waiting.append(waiting)
        result.series_running.append(running)

    def _apply(
        self,
        st: _State,
        action: Action,
        now: float,
        running: dict[str, _State],
        allocs: dict[str, Allocation],
        changed: list[_State],
    ) -> int:
        """Apply one planner action to a job; returns the change in GPUs allocated."""
        name = st.job.name
        delta = 0
        kind = action.kind
        if kind is ActionKind.KEEP or kind is ActionKind.COMPLETE:
            return 0
        before = st.alloc
        if before is not None:
            delta -= before.total_gpus
        if action.lost_work > 0:
            st.progress = max(0.0, st.progress - action.lost_work)
            st.stale = True
        if kind is ActionKind.PREEMPT or action.after is None:
            st.alloc = None
            st.changed_at = now
            st.record.preemptions += 1 if kind is ActionKind.PREEMPT else 0
            running.pop(name, None)
            allocs.pop(name, None)
            st.version += 1
            return delta
        after = action.after
        if kind is ActionKind.RESIZE:
            elastic_resize = (
                st.job.is_elastic
                and before is not None
                and before.gpu_type == after.gpu_type
                and action.lost_work == 0
                and before.replicas != after.replicas
            )
            if elastic_resize:
                st.record.resizes += 1
            else:
                st.record.restarts += 1
                st.record.migrations += is_migration(action)
        elif kind is ActionKind.START and st.record.first_start is not None:
            st.record.restarts += 1
        if st.record.first_start is None:
            st.record.first_start = now
        st.alloc = after
        st.gpus = after.total_gpus
        st.resume_at = now + action.cost_seconds
        st.changed_at = now
        st.updated = now
        st.version += 1
        st.stale = True
        running[name] = st
        allocs[name] = after
        changed.append(st)
        return delta + after.total_gpus
