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
results) at the cost of what changed (it looks up jobs and the snapshot through a ``RoundView`` only
when the policy needs them, e.g. LAS pricing a consolidation). ``check_incremental`` also runs
``run_round`` every round and raises ``IncrementalMismatch`` if the two disagree (the tests keep it on).
A round in which a running job has reached its total work before its completion event (float rounding)
goes back to ``run_round`` for the rest of the run.
"""

from __future__ import annotations

import heapq
import logging
import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace

from scheduler.core.decisions import Action, ActionKind, RoundResult
from scheduler.core.placement import spread_of
from scheduler.core.planner import is_migration, single_action
from scheduler.core.protocols import MovesRunning, Policy, ThroughputOracle
from scheduler.core.queues import QueueSpec
from scheduler.core.round import IncrementalMismatch as IncrementalMismatch  # raised here, defined there
from scheduler.core.round import IncrementalPolicy, IncrementalRound, RoundCosts
from scheduler.core.types import Allocation, ClusterSnapshot, Job, Node, PlacementShape

log = logging.getLogger(__name__)

# event kinds, in the order they are handled at equal times: completions free GPUs before arrivals
_COMPLETION, _ARRIVAL, _WAKE, _TICK = 0, 1, 2, 3
_EPS = 1e-9

#: ``scheduler.core.round.run_round`` or a stand-in: called as ``fn(snapshot, jobs, policy, oracle,
#: costs=..., explain=False)`` (the engine never reads wait reasons, so it asks for none)
RoundFn = Callable[..., RoundResult]
_JOB_FIELDS = tuple(f.name for f in fields(Job))
_I_PROGRESS, _I_CHECKPOINT, _I_ATTAINED, _I_RESTARTS, _I_CHANGED, _I_OBSERVED = (
    _JOB_FIELDS.index(n)
    for n in (
        "progress",
        "checkpoint_progress",
        "attained_service",
        "restarts",
        "last_change_time",
        "observed_throughput",
    )
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
    #: seconds it held GPUs (running or restarting); the rest of its JCT it waited
    held_seconds: float = 0.0
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


#: a queued event: (time, kind, sequence number for a stable order, job name, the job's version)
_Event = tuple[float, int, int, str, int]


@dataclass(slots=True)
class _Run:
    """The mutable state of one ``Engine.run``: the event heap, who is active and running, counters."""

    result: EngineResult
    heap: list[_Event]
    seq: int
    pending_arrivals: int
    total: int
    thresholds: tuple[float, ...]
    costs: RoundCosts
    one_type: bool
    wall0: float
    cpu0: float
    active: dict[str, _State] = field(default_factory=dict)
    running: dict[str, _State] = field(default_factory=dict)
    allocs: dict[str, Allocation] = field(default_factory=dict)
    finished: int = 0
    tick_at: float = math.inf
    used: int = 0
    elastic_active: int = 0
    session: IncrementalRound | None = None


class _RunningProgress(Mapping[str, tuple[float, float]]):
    """Each running job's (progress, attained service), as the incremental round reads them: looked up
    in the job's state when asked, since a round reads only a few of them."""

    __slots__ = ("_running",)

    def __init__(self, running: dict[str, _State]) -> None:
        self._running = running

    def __getitem__(self, name: str) -> tuple[float, float]:
        st = self._running[name]
        return (st.progress, st.attained)

    def __iter__(self) -> Iterator[str]:
        return iter(self._running)

    def __len__(self) -> int:
        return len(self._running)


class _RoundView:
    """``scheduler.core.round.RoundView`` of the round at ``now``: what ``_decide`` gives ``run_round``."""

    __slots__ = ("_engine", "_now", "_run")

    def __init__(self, engine: Engine, run: _Run, now: float) -> None:
        self._engine = engine
        self._run = run
        self._now = now

    def job(self, name: str) -> Job:
        return self._engine._view(self._run.active[name], self._now)

    def snapshot(self) -> ClusterSnapshot:
        engine = self._engine
        return ClusterSnapshot(
            now=self._now,
            nodes=engine.nodes,
            allocations=dict(self._run.allocs),
            queues=engine.queues,
            restart_cost_s=engine.config.restart_cost_s,
        )


class Engine:
    """One simulation run: ``Engine(...).run()`` returns an ``EngineResult``.

    ``policy_oracle`` is what the policy is told (possibly with injected error); if it learns (has
    ``observe(job, shape, throughput)``, as ``scheduler.oracles.learning.CorrectedOracle``), it is told
    each job's true rate every time the job starts on a placement (when the job's observed throughput
    there is first set), as the operator feeds it progress reports, and (``forget(name)``) each job that
    finishes or fails, as the operator tells it of each job that ends. ``truth`` is how
    fast jobs really go (asked with each job as last built: its answer may not depend on a job's
    progress or history). ``ideal_durations`` (seconds per job) feed the fairness metrics.
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
        queues: Sequence[QueueSpec] = (),
    ) -> None:
        self.nodes = tuple(nodes)
        self.queues = tuple(queues)
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
        # a policy oracle that learns (``scheduler.oracles.learning.ThroughputLearner``: it has
        # ``observe(job, shape, throughput)``) is told each job's true rate when the job starts somewhere
        observe = getattr(policy_oracle, "observe", None)
        self._learn: Callable[[Job, PlacementShape, float], object] | None = (
            observe if callable(observe) else None
        )
        # ... and forgets a job when it ends (finished or failed), as the operator does: its own records go,
        # what the shared levels learnt from it stays
        forget = getattr(policy_oracle, "forget", None)
        self._forget: Callable[[str], object] | None = forget if callable(forget) else None
        self._shapes: dict[tuple[str, int, tuple[tuple[str, int], ...]], PlacementShape] = {}

    # -- progress bookkeeping -------------------------------------------------------------------
    def _advance(self, st: _State, now: float) -> None:
        """Bring one job's progress and attained service to ``now`` (at its rate, from when it resumed).

        Conditionals instead of ``max``/``min``: this runs for every running job in every round.
        """
        updated = st.updated
        if now > updated:
            if st.alloc is not None:
                resume_at = st.resume_at
                run_from = updated if updated >= resume_at else resume_at  # max(updated, resume_at)
                if now > run_from:
                    total_work = st.job.total_work
                    p = st.progress + st.rate * (now - run_from)
                    st.progress = total_work if total_work <= p else p  # min(total_work, p)
                gained = st.gpus * (now - updated)
                st.attained += gained
                st.record.gpu_seconds += gained
                st.record.held_seconds += now - updated
                st.stale = True
            st.updated = now

    def _view(self, st: _State, now: float) -> Job:
        # the simulator checkpoints on every preemption (the operator's grace period), so what
        # survives a restart is all progress made; the restart cost is charged in seconds instead.
        # A running job's observed throughput is its true rate where it runs (as the operator's progress
        # reports measure it), None while it waits
        observed = st.rate if st.alloc is not None and st.rate > 0 else None
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
            values[_I_OBSERVED] = observed
            st.job = Job(*values)  # type: ignore[arg-type]
            st.stale = False
        elif st.job.observed_throughput != observed:
            values = st.values
            if values:
                values[_I_OBSERVED] = observed
                st.job = Job(*values)  # type: ignore[arg-type]
            else:
                st.job = replace(st.job, observed_throughput=observed)
        return st.job

    # -- the run --------------------------------------------------------------------------------
    def run(self) -> EngineResult:
        """Replay every job: pop the events at the next time, and run a round there when one is due.

        One round is four phases: bring the running jobs' progress to now (``_advance_running``), decide
        the actions (``_decide``: the incremental round or ``run_round``), apply them
        (``_apply_actions``), and start the jobs whose allocation changed at their true rate
        (``_start_changed``); ``_end_round`` samples the series and queues the next tick.
        """
        r = self._begin()
        while r.heap:
            now = r.heap[0][0]
            dirty, forced = self._pop_events(r, now)
            if not dirty:
                continue
            if self._idle_round(r, forced):
                r.result.skipped_rounds += 1
                self._sample(r.result, now, r.used, 0, len(r.running))
                continue
            progress = self._advance_running(r, now)
            actions = self._decide(r, now, progress)
            changed = self._apply_actions(r, actions, now)
            if changed:
                self._start_changed(r, changed, now)
            self._end_round(r, now)
        return self._end(r)

    def _begin(self) -> _Run:
        """The run's state before the first event: every arrival queued, the incremental round if any."""
        cfg = self.config
        heap: list[_Event] = []
        for seq, (name, st) in enumerate(self.states.items()):
            heap.append((st.job.submit_time, _ARRIVAL, seq, name, 0))
        heapq.heapify(heap)
        r = _Run(
            result=EngineResult(records=[s.record for s in self.states.values()], total_gpus=self.total_gpus),
            heap=heap,
            seq=len(heap),
            pending_arrivals=len(self.states),
            total=len(self.states),
            thresholds=tuple(sorted(t for t in cfg.wake_thresholds_gpu_s if t > 0)),
            costs=RoundCosts(restart_cost_s=cfg.restart_cost_s, resize_cost_s=cfg.resize_cost_s),
            # With one GPU type, only rigid jobs and nobody waiting, a completion leaves every policy
            # nothing to do (no one to start, no one to preempt for, no size or type to change), except
            # one that declares it may move running jobs (``MovesRunning``, e.g. LAS consolidating
            # spread gangs): that one gets a round at every completion even when nobody waits
            one_type=len({n.gpu_type for n in self.nodes}) == 1
            and not (isinstance(self.policy, MovesRunning) and self.policy.moves_running),
            wall0=time.perf_counter(),
            cpu0=time.process_time(),
        )
        if self.on_progress:
            self.on_progress(0, r.total)
        # queues decide who may run before the policy does: the policy's incremental rounds know nothing
        # of them, so with queues every round goes through run_round
        if cfg.incremental and not self.queues and isinstance(self.policy, IncrementalPolicy):
            r.session = self.policy.incremental(
                self.nodes, self.policy_oracle, [s.job for s in self.states.values()]
            )
        return r

    def _pop_events(self, r: _Run, now: float) -> tuple[bool, bool]:
        """Handle every event at ``now``; returns (a round is due, a trigger other than a completion)."""
        dirty = False
        forced = False
        heap = r.heap
        while heap and heap[0][0] <= now:
            _, kind, _, name, version = heapq.heappop(heap)
            r.result.events += 1
            if kind == _ARRIVAL:
                self._on_arrival(r, name)
                dirty = forced = True
            elif kind == _COMPLETION:
                if self._on_completion(r, name, version, now):
                    dirty = True
            elif kind == _WAKE:
                st = self.states[name]
                if st.version == version and st.alloc is not None:
                    dirty = forced = True
                    # a job that keeps running after this round must still wake at its next boundary
                    self._advance(st, now)
                    r.seq = self._push_wake(heap, r.seq, st, now, r.thresholds, crossed=True)
            elif kind == _TICK and now >= r.tick_at:
                r.tick_at = math.inf
                if len(r.active) > len(r.running) or self.config.always_tick:
                    dirty = forced = True
        return dirty, forced

    def _on_arrival(self, r: _Run, name: str) -> None:
        st = self.states[name]
        r.active[name] = st
        r.elastic_active += st.job.is_elastic
        if r.session is not None:
            r.session.add(st.job)
        r.pending_arrivals -= 1

    def _on_completion(self, r: _Run, name: str, version: int, now: float) -> bool:
        """Finish the job unless the event is stale (its allocation changed since); True if it finished."""
        st = self.states[name]
        if st.version != version or st.alloc is None:
            return False
        self._advance(st, now)
        st.progress = st.job.total_work
        st.record.finish = now
        r.used -= st.alloc.total_gpus
        st.alloc = None
        st.version += 1
        del r.running[name], r.allocs[name], r.active[name]
        r.elastic_active -= st.job.is_elastic
        if r.session is not None:
            r.session.remove(name)
        if self._forget is not None:
            self._forget(name)
        r.finished += 1
        if self.on_progress and r.finished % self.config.progress_every == 0:
            self.on_progress(r.finished, r.total)
        return True

    def _idle_round(self, r: _Run, forced: bool) -> bool:
        """True when a completion's round provably changes nothing (see ``EngineConfig.skip_idle_rounds``)."""
        return (
            self.config.skip_idle_rounds
            and not forced
            and r.one_type
            and not r.elastic_active
            and len(r.active) == len(r.running)
        )

    def _advance_running(self, r: _Run, now: float) -> Mapping[str, tuple[float, float]] | None:
        """Bring every running job to ``now``; returns what the incremental round reads (each running
        job's progress and attained service), or None when the round goes through ``run_round``."""
        advance = self._advance
        if r.session is None:
            for st in r.running.values():
                advance(st, now)
            return None
        all_left = True  # every running job still has work left (the incremental round's premise)
        for st in r.running.values():
            advance(st, now)
            if not st.job.total_work - st.progress > 0:
                all_left = False
        if not all_left:
            # a job done before its completion event: run_round's rules for that from here on
            log.debug("incremental rounds stop", extra={"time": now})
            r.session = None
            return None
        return _RunningProgress(r.running)

    def _decide(
        self, r: _Run, now: float, progress: Mapping[str, tuple[float, float]] | None
    ) -> Sequence[Action]:
        """The round's actions: from the incremental round when ``progress`` is given, else ``run_round``."""
        result = r.result
        result.rounds += 1
        if r.session is not None and progress is not None:
            t0 = time.perf_counter()
            changes = r.session.round(now, progress, _RoundView(self, r, now))
            actions = self._actions_for(changes, now)
            if self.config.check_incremental:
                self._check(actions, r.active, r.allocs, now, r.costs)
            result.round_wall_s += time.perf_counter() - t0
            result.incremental_rounds += 1
            return actions
        jobs = [self._view(st, now) for st in r.active.values()]
        snapshot = ClusterSnapshot(now=now, nodes=self.nodes, allocations=dict(r.allocs), queues=self.queues)
        t0 = time.perf_counter()
        rr = self.run_round(snapshot, jobs, self.policy, self.policy_oracle, costs=r.costs, explain=False)
        result.round_wall_s += time.perf_counter() - t0
        return rr.actions

    def _apply_actions(self, r: _Run, actions: Sequence[Action], now: float) -> list[_State]:
        """Apply the round's actions to the active jobs; returns the jobs that start on a new allocation."""
        changed: list[_State] = []
        for action in actions:
            target = r.active.get(action.job)
            if target is not None:
                r.used += self._apply(target, action, now, r.running, r.allocs, changed)
        return changed

    def _start_changed(self, r: _Run, changed: list[_State], now: float) -> None:
        """Ask the truth how fast each changed job runs where it now is, and queue its completion and
        next wake-up; a job placed where it cannot run fails.

        The truth is asked with the job as last built (``_State.job``): how fast a job runs depends on
        what it is (model, batch, work) and where, not on its progress or history, so its ``Job`` is
        rebuilt only when a policy or the planner next looks at it (a frozen 31-field ``Job`` costs
        about 3 µs to build; a Philly 10k replay starts 12,000 times)."""
        t1 = time.perf_counter()
        queries = [(st.job, self._shape(st.alloc)) for st in changed if st.alloc]
        rates = self.truth.throughput(queries) if queries else []
        r.result.oracle_wall_s += time.perf_counter() - t1
        learn = self._learn
        for st, (job, shape), rate in zip([s for s in changed if s.alloc], queries, rates, strict=True):
            if rate <= 0 or not math.isfinite(rate):
                self._fail_unrunnable(r, st)
                continue
            st.rate = rate
            if learn is not None:
                # the job's measured throughput where it now runs, as its progress reports tell the
                # operator's oracle (``scheduler.operator.reconcile``): once per placement it starts on
                learn(job, shape, rate)
            start = max(now, st.resume_at)
            done = start + max(0.0, st.job.total_work - st.progress) / rate
            heapq.heappush(r.heap, (done, _COMPLETION, r.seq, st.job.name, st.version))
            r.seq += 1
            st.done_at = done
            r.seq = self._push_wake(r.heap, r.seq, st, now, r.thresholds)

    def _shape(self, alloc: Allocation) -> PlacementShape:
        """``spread_of(alloc)``, memoised by the placement (many jobs start on the same one)."""
        key = (alloc.gpu_type, alloc.gpus_per_replica, alloc.replicas_per_node)
        shape = self._shapes.get(key)
        if shape is None:
            shape = self._shapes[key] = spread_of(alloc, self.node_map)
        return shape

    def _fail_unrunnable(self, r: _Run, st: _State) -> None:
        """The policy placed the job where it cannot run: record it and let it go."""
        st.record.failed = f"no throughput on {st.alloc.gpu_type if st.alloc else '?'}"
        r.used -= st.alloc.total_gpus if st.alloc else 0
        st.alloc = None
        st.version += 1
        r.running.pop(st.job.name, None)
        r.allocs.pop(st.job.name, None)
        r.active.pop(st.job.name, None)
        if r.session is not None:
            r.session.remove(st.job.name)
        if self._forget is not None:
            self._forget(st.job.name)
        r.finished += 1

    def _end_round(self, r: _Run, now: float) -> None:
        """Sample the series after the round and queue the next tick while jobs wait."""
        cfg = self.config
        waiting = len(r.active) - len(r.running)
        r.result.jobs_in_rounds += len(r.active)
        self._sample(r.result, now, r.used, waiting, len(r.running))
        if (
            cfg.round_seconds > 0
            and (waiting or cfg.always_tick)
            and (r.running or r.pending_arrivals)
            and r.tick_at == math.inf
        ):
            r.tick_at = (math.floor(now / cfg.round_seconds) + 1) * cfg.round_seconds
            heapq.heappush(r.heap, (r.tick_at, _TICK, r.seq, "", 0))
            r.seq += 1

    def _end(self, r: _Run) -> EngineResult:
        result = r.result
        result.end_time = max((rec.finish or 0.0) for rec in result.records) if result.records else 0.0
        result.wall_s = time.perf_counter() - r.wall0
        result.cpu_s = time.process_time() - r.cpu0
        if self.on_progress:
            self.on_progress(r.total, r.total)
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
        heap: list[_Event],
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
        st.rate = 0.0  # until ``_start_changed`` asks the truth where it runs next
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
