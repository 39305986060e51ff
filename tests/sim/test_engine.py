"""The event engine replays jobs through the real run_round and policies; timings checked by hand."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.core.protocols import MovesRunning
from scheduler.core.round import run_round
from scheduler.core.types import Job, PlacementShape
from scheduler.policies import make_policy
from scheduler.sim.engine import Engine, EngineConfig, EngineResult
from scheduler.sim.reports import summarize
from tests.builders import job, node


class PerGpu:
    """Fake truth: every job does 1 work unit per second per GPU, wherever it runs."""

    def throughput(self, queries: Sequence[tuple[Job, PlacementShape]]) -> list[float]:
        return [float(shape.num_gpus) for _, shape in queries]


def _run(
    jobs: list[Job], gpus: int, policy: str, config: dict[str, object] | None = None, **cfg: object
) -> EngineResult:
    nodes = [node("n0").gpus(gpus, "V100").build()]
    engine = Engine(
        nodes,
        jobs,
        make_policy(policy, config),
        PerGpu(),
        PerGpu(),
        EngineConfig(**cfg),  # type: ignore[arg-type]
        run_round=run_round,
        ideal_durations={j.name: j.total_work / j.max_gpus for j in jobs},
    )
    return engine.run()


def _jct(result: EngineResult) -> dict[str, float | None]:
    return {r.name: r.jct for r in result.records}


# a: t=0, 1 GPU, 100 units -> 0..100.  b: t=10, 2 GPUs, 50 units (2/s) -> needs both GPUs.
# c: t=20, 1 GPU, 10 units.
FIFO_JOBS = [
    job("a").replicas(1).work(100).submitted(0).build(),
    job("b").replicas(2).work(50).submitted(10).build(),
    job("c").replicas(1).work(10).submitted(20).build(),
]


@pytest.mark.parametrize(
    ("backfill", "jct", "makespan", "util"),
    [
        # strict: b waits for a (starts 100, ends 125: JCT 115); c behind b (125..135: JCT 115)
        # GPU-seconds 100 + 2x25 + 10 = 160 over 2 GPUs x 135 s
        (False, {"a": 100.0, "b": 115.0, "c": 115.0}, 135.0, 160 / 270),
        # backfill: c takes the idle GPU at 20 and is done at 30 (JCT 10); b unchanged
        (True, {"a": 100.0, "b": 115.0, "c": 10.0}, 125.0, 160 / 250),
    ],
)
def test_fifo_timeline(backfill: bool, jct: dict[str, float], makespan: float, util: float) -> None:
    result = _run(FIFO_JOBS, 2, "fifo", {"backfill": backfill}, round_seconds=0.0)
    assert _jct(result) == pytest.approx(jct)
    summary = summarize(result, policy="fifo")
    assert summary["makespan_s"] == pytest.approx(makespan)
    assert summary["utilization"] == pytest.approx(util)
    assert summary["avg_jct_s"] == pytest.approx(sum(jct.values()) / 3)
    assert summary["preemptions"] == 0


def test_preemption_charges_the_restart_cost() -> None:
    # 1 GPU, LAS queue boundary at 0.01 GPU-hours = 36 GPU-s.
    # a: t=0, 100 units. b: t=50, 10 units. At 50 a has 50 GPU-s (queue 1), b has 0 (queue 0): b preempts a,
    # runs 50..60. a restarts at 60, pays 5 s restart cost, resumes at 65 with 50 left -> done at 115.
    jobs = [
        job("a").replicas(1).work(100).submitted(0).build(),
        job("b").replicas(1).work(10).submitted(50).build(),
    ]
    result = _run(jobs, 1, "las", {"thresholds_gpu_hours": [0.01]}, round_seconds=0.0, restart_cost_s=5.0)
    assert _jct(result) == pytest.approx({"a": 115.0, "b": 10.0})
    rec = {r.name: r for r in result.records}
    assert (rec["a"].preemptions, rec["a"].restarts) == (1, 1)
    assert (rec["b"].preemptions, rec["b"].restarts) == (0, 0)


LAS_JOBS = [
    job("a").replicas(1).work(100).submitted(0).build(),
    job("b").replicas(1).work(100).submitted(10).build(),
]


def test_las_threshold_crossing_triggers_a_round() -> None:
    # 1 GPU, boundary 36 GPU-s. a runs from 0; at 10 b arrives, both in queue 0, a is older: a keeps.
    # a crosses 36 GPU-s at t=36 -> wake-up round: b (queue 0) preempts a; b runs 36..136 (same queue as a
    # after t=72, and same-queue jobs never evict). a resumes at 136 with 64 left -> 200.
    result = _run(
        LAS_JOBS,
        1,
        "las",
        {"thresholds_gpu_hours": [0.01]},
        round_seconds=0.0,
        wake_thresholds_gpu_s=(36.0,),
    )
    assert _jct(result) == pytest.approx({"a": 200.0, "b": 126.0})


def test_without_wake_ups_nothing_changes_between_events() -> None:
    # same jobs, engine not told the boundary, no periodic rounds: a runs to 100, b 100..200
    result = _run(LAS_JOBS, 1, "las", {"thresholds_gpu_hours": [0.01]}, round_seconds=0.0)
    assert _jct(result) == pytest.approx({"a": 100.0, "b": 190.0})


def test_periodic_rounds_see_the_crossing_at_the_next_tick() -> None:
    # rounds every 50 s while b waits: the tick at t=50 sees a in queue 1 -> b runs 50..150, a 150..200
    result = _run(LAS_JOBS, 1, "las", {"thresholds_gpu_hours": [0.01]}, round_seconds=50.0)
    assert _jct(result) == pytest.approx({"a": 200.0, "b": 140.0})


def test_job_larger_than_the_cluster_never_finishes_and_the_run_ends() -> None:
    jobs = [
        job("big").replicas(4).work(10).submitted(0).build(),
        job("ok").replicas(1).work(10).submitted(0).build(),
    ]
    result = _run(jobs, 2, "fifo", {"backfill": True}, round_seconds=30.0)
    summary = summarize(result, policy="fifo")
    assert (summary["jobs"], summary["unfinished"]) == (1, 1)


@pytest.mark.parametrize(
    ("policy", "config"), [("fifo", None), ("las", {"consolidate": False}), ("srsf", None)]
)
def test_skipping_idle_rounds_changes_no_result(policy: str, config: dict[str, object] | None) -> None:
    # 40 jobs of 1-4 GPUs on 8 GPUs with gaps, so the cluster is sometimes idle and sometimes contended
    jobs = [
        job(f"j{i}").replicas(1 + i % 4).work(50.0 + 37 * (i % 7)).submitted(15.0 * i).build()
        for i in range(40)
    ]
    on = _run(jobs, 8, policy, config, round_seconds=60.0, restart_cost_s=3.0)
    off = _run(jobs, 8, policy, config, round_seconds=60.0, restart_cost_s=3.0, skip_idle_rounds=False)
    assert on.skipped_rounds > 0
    assert off.skipped_rounds == 0 and off.rounds == on.rounds + on.skipped_rounds
    assert _jct(on) == _jct(off)


def test_a_policy_that_moves_running_jobs_gets_a_round_at_every_completion() -> None:
    # LAS consolidates spread gangs, so a completion with nobody waiting may still change something
    jobs = [
        job(f"j{i}").replicas(1 + i % 4).work(50.0 + 37 * (i % 7)).submitted(15.0 * i).build()
        for i in range(40)
    ]
    result = _run(jobs, 8, "las", round_seconds=60.0, restart_cost_s=3.0)
    assert result.skipped_rounds == 0


def test_policies_declare_whether_they_move_running_jobs() -> None:
    assert isinstance(make_policy("las"), MovesRunning) and make_policy("las").moves_running
    assert not make_policy("las", {"consolidate": False}).moves_running
    assert make_policy("las", {"consolidate": False, "starvation_factor": 1.0}).moves_running
    assert not isinstance(make_policy("fifo"), MovesRunning)  # never moves a running job on a quiet round
    # without consolidation, LAS's idle completion rounds are skipped like any other policy's
    jobs = [
        job(f"j{i}").replicas(1 + i % 4).work(50.0 + 37 * (i % 7)).submitted(15.0 * i).build()
        for i in range(40)
    ]
    assert _run(jobs, 8, "las", {"consolidate": False}, round_seconds=60.0).skipped_rounds > 0


def test_a_running_job_wakes_at_every_boundary_it_crosses() -> None:
    # 1 GPU, LAS boundaries 36 and 180 GPU-s. a: t=0, 300 units; b: t=100, 300 units.
    # 100: b (queue 0) preempts a (100 GPU-s, queue 1). 136: b crosses 36 -> queue 1 like a: b keeps running.
    # 280: b crosses 180 -> queue 2, a (queue 1) preempts it; a has 200 left -> done at 480 (it crosses 180 at
    # 360 but b is in queue 2 as well, so a keeps). b resumes at 480 with 120 left -> done at 600.
    jobs = [
        job("a").replicas(1).work(300).submitted(0).build(),
        job("b").replicas(1).work(300).submitted(100).build(),
    ]
    result = _run(
        jobs,
        1,
        "las",
        {"thresholds_gpu_hours": [0.01, 0.05]},
        round_seconds=0.0,
        wake_thresholds_gpu_s=(36.0, 180.0),
    )
    assert _jct(result) == pytest.approx({"a": 480.0, "b": 500.0})


@settings(max_examples=25, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 300), st.sampled_from([1, 1, 2, 4, 8]), st.integers(1, 400)),
        min_size=1,
        max_size=25,
    ),
    st.sampled_from(["fifo", "las", "srsf"]),
    st.sampled_from([0.0, 45.0]),
)
def test_invariants_on_random_workloads(
    rows: list[tuple[int, int, int]], policy: str, round_seconds: float
) -> None:
    # 8 GPUs on one node; job i arrives at t, asks g GPUs and has w units (g units/s -> ideal w/g seconds)
    jobs = [
        job(f"j{i}").replicas(g).work(float(w)).submitted(float(t)).build()
        for i, (t, g, w) in enumerate(rows)
    ]
    result = _run(jobs, 8, policy, round_seconds=round_seconds, restart_cost_s=2.0)
    # never more GPUs allocated than the cluster has
    assert max(result.series_used) <= 8
    assert min(result.series_used) >= 0
    for rec, (_t, g, w) in zip(sorted(result.records, key=lambda r: int(r.name[1:])), rows, strict=True):
        # every job fits, so every job finishes, no sooner than its ideal run time
        assert rec.finish is not None
        assert rec.jct is not None and rec.jct >= w / g - 1e-6
        # it held its GPUs at least for its run time
        assert rec.gpu_seconds >= w - 1e-6
    summary = summarize(result, policy=policy)
    assert 0 < summary["utilization"] <= 1 + 1e-9


def test_a_move_to_a_faster_type_counts_as_a_migration_not_a_preemption() -> None:
    from tests.builders import FakeOracle

    # one V100 and one K80 GPU. "short" (t=0; 2/s on V100, 1/s on K80) takes the V100 and ends at
    # 100 / 2 = 50 s; "long" (t=1, 5x faster on V100) starts on the K80, and when the V100 frees at
    # t=50 the move pays (gain (5 - 1) x 3600 >> 5 x 30 s restart): one migration, no preemption
    nodes = [node("v").gpus(1, "V100").build(), node("k").gpus(1, "K80").build()]
    jobs = [
        job("short").work(100).submitted(0).build(),
        job("long").work(100_000).submitted(1).build(),
    ]
    oracle = FakeOracle(
        speed={("short", "V100"): 2.0, ("short", "K80"): 1.0, ("long", "V100"): 5.0, ("long", "K80"): 1.0}
    )
    engine = Engine(
        nodes,
        jobs,
        make_policy("las"),
        oracle,
        oracle,
        EngineConfig(round_seconds=0, restart_cost_s=30, wake_thresholds_gpu_s=()),
        run_round=run_round,
    )
    result = engine.run()
    rec = {r.name: r for r in result.records}
    assert (rec["long"].migrations, rec["long"].preemptions, rec["long"].restarts) == (1, 0, 1)
    assert (rec["short"].migrations, rec["short"].preemptions) == (0, 0)
    row = summarize(result)
    assert row["migrations_per_job"] == 0.5
    assert row["preemptions_per_job"] == 0.0


def test_a_running_job_is_shown_to_the_policy_with_its_true_rate_as_observed_throughput() -> None:
    from collections.abc import Mapping

    from scheduler.core.decisions import Decision
    from scheduler.core.protocols import ThroughputOracle
    from scheduler.core.types import ClusterSnapshot
    from tests.builders import FakeOracle

    class Recording:
        """LAS that notes what each round's jobs say about their observed throughput."""

        name = "las"

        def __init__(self) -> None:
            self.inner = make_policy("las")
            self.seen: list[tuple[str, bool, float | None]] = []

        def allocate(
            self, snapshot: ClusterSnapshot, jobs: Sequence[Job], oracle: ThroughputOracle
        ) -> Mapping[str, Decision]:
            self.seen += [(j.name, j.name in snapshot.allocations, j.observed_throughput) for j in jobs]
            return self.inner.allocate(snapshot, jobs, oracle)

    # the policy is told 1 unit/s per GPU; the job really makes 3 (truth): "b" waits behind "a" first
    nodes = [node("n0").gpus(1, "V100").build()]
    jobs = [job("a").work(300).submitted(0).build(), job("b").work(300).submitted(1).build()]
    policy = Recording()
    engine = Engine(
        nodes,
        jobs,
        policy,
        FakeOracle(speed={"V100": 1.0}),
        FakeOracle(speed={"V100": 3.0}),
        EngineConfig(round_seconds=10, restart_cost_s=0, wake_thresholds_gpu_s=()),
        run_round=run_round,
    )
    engine.run()
    running = {obs for _, is_running, obs in policy.seen if is_running}
    waiting = {obs for _, is_running, obs in policy.seen if not is_running}
    assert running == {3.0} and waiting == {None}, policy.seen


def test_a_learning_policy_oracle_is_told_each_start_at_the_jobs_true_rate() -> None:
    from dataclasses import dataclass, field

    from tests.builders import FakeOracle

    @dataclass
    class Learning(FakeOracle):
        """FakeOracle that records what it is told (``scheduler.oracles.learning.ThroughputLearner``)."""

        observed: list[tuple[str, str, int, float]] = field(default_factory=list)

        def observe(self, job: Job, shape: PlacementShape, throughput: float) -> None:
            self.observed.append((job.name, shape.gpu_type, shape.num_gpus, throughput))

    # one V100 and one K80; the policy is told both are alike, the truth makes V100 3/s and K80 1/s.
    # "a" (t=0) starts first; "b" (t=1) takes the other GPU; "a" finishes at 100 / its rate and "b",
    # whatever it was given, keeps running: one observation per start, at the truth's rate
    nodes = [node("v").gpus(1, "V100").build(), node("k").gpus(1, "K80").build()]
    jobs = [job("a").work(300).submitted(0).build(), job("b").work(3000).submitted(1).build()]
    told = Learning(speed={"V100": 1.0, "K80": 1.0})
    truth = FakeOracle(speed={"V100": 3.0, "K80": 1.0})
    cfg = EngineConfig(round_seconds=0, restart_cost_s=0, wake_thresholds_gpu_s=())
    result = Engine(nodes, jobs, make_policy("fifo"), told, truth, cfg, run_round=run_round).run()
    starts = sum(1 + r.restarts for r in result.records)
    assert len(told.observed) == starts == 2
    rate = {"V100": 3.0, "K80": 1.0}
    assert sorted(n for n, *_ in told.observed) == ["a", "b"]
    assert all(obs == rate[t] * g for _, t, g, obs in told.observed), told.observed
    # a plain oracle (no observe) runs the same schedule
    plain = Engine(nodes, jobs, make_policy("fifo"), FakeOracle(speed={"V100": 1.0, "K80": 1.0}), truth, cfg,
                   run_round=run_round).run()  # fmt: skip
    assert [r.jct for r in plain.records] == [r.jct for r in result.records]


def test_a_learning_oracle_is_told_again_after_each_restart() -> None:
    from dataclasses import dataclass, field

    from tests.builders import FakeOracle

    @dataclass
    class Learning(FakeOracle):
        observed: list[tuple[str, float]] = field(default_factory=list)

        def observe(self, job: Job, shape: PlacementShape, throughput: float) -> None:
            self.observed.append((job.name, throughput))

    # the V100-K80 migration case above: "long" starts on the K80 and moves to the V100 at t=50
    nodes = [node("v").gpus(1, "V100").build(), node("k").gpus(1, "K80").build()]
    jobs = [job("short").work(100).submitted(0).build(), job("long").work(100_000).submitted(1).build()]
    speed = {("short", "V100"): 2.0, ("short", "K80"): 1.0, ("long", "V100"): 5.0, ("long", "K80"): 1.0}
    told = Learning(speed=dict(speed))
    cfg = EngineConfig(round_seconds=0, restart_cost_s=30, wake_thresholds_gpu_s=())
    Engine(nodes, jobs, make_policy("las"), told, FakeOracle(speed=speed), cfg, run_round=run_round).run()
    assert told.observed == [("short", 2.0), ("long", 1.0), ("long", 5.0)]


def test_a_learning_oracle_is_told_of_each_job_that_ends() -> None:
    from dataclasses import dataclass, field

    from tests.builders import FakeOracle

    @dataclass
    class Learning(FakeOracle):
        told: list[tuple[str, str]] = field(default_factory=list)

        def observe(self, job: Job, shape: PlacementShape, throughput: float) -> None:
            self.told.append(("observe", job.name))

        def forget(self, name: str) -> None:
            self.told.append(("forget", name))

    # "short" finishes first, "long" moves from the K80 to the V100 (two starts) and finishes; "nowhere"
    # is placed where it cannot run (the truth says 0 everywhere) and fails: each is forgotten once, when
    # it ends, after its observations
    nodes = [node("v").gpus(1, "V100").build(), node("k").gpus(1, "K80").build()]
    jobs = [job("short").work(100).submitted(0).build(), job("long").work(100_000).submitted(1).build()]
    jobs.append(job("nowhere").work(10).submitted(200_000).build())
    speed = {("short", "V100"): 2.0, ("short", "K80"): 1.0, ("long", "V100"): 5.0, ("long", "K80"): 1.0}
    told = Learning(speed={**speed, ("nowhere", "V100"): 1.0, ("nowhere", "K80"): 1.0})
    truth = FakeOracle(speed={**speed, ("nowhere", "V100"): 0.0, ("nowhere", "K80"): 0.0})
    cfg = EngineConfig(round_seconds=0, restart_cost_s=30, wake_thresholds_gpu_s=())
    result = Engine(nodes, jobs, make_policy("las"), told, truth, cfg, run_round=run_round).run()
    assert told.told == [
        ("observe", "short"),
        ("observe", "long"),
        ("forget", "short"),
        ("observe", "long"),
        ("forget", "long"),
        ("forget", "nowhere"),
    ]
    assert [r.failed for r in result.records if r.name == "nowhere"] == ["no throughput on V100"]
