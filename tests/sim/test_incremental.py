"""The engine's incremental rounds (las, srsf, fifo) give the same results as run_round every round.

Each random workload runs twice: once with ``check_incremental`` (the engine runs ``run_round`` next to
the incremental round every round and raises on any difference) and once on the plain ``run_round``
path; the per-job records must match exactly. Plus: when the fast path declines (several GPU types,
elastic jobs, the LAS promote knob) the engine uses ``run_round`` alone, and a wrong incremental round is
caught by the check.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.core.protocols import ThroughputOracle
from scheduler.core.round import IncrementalRound, RoundView, run_round
from scheduler.core.types import Allocation, Job, Node, PlacementShape
from scheduler.policies import make_policy
from scheduler.sim.engine import Engine, EngineConfig, EngineResult, IncrementalMismatch
from tests.builders import cluster, job, node


class Speeds:
    """Fake truth and told oracle: each job has its own per-GPU speed (so SRSF ranks differ by job)."""

    def throughput(self, queries: Sequence[tuple[Job, PlacementShape]]) -> list[float]:
        return [(1.0 + int(j.name[1:]) % 3) * shape.num_gpus for j, shape in queries]


class SpreadSpeeds:
    """``Speeds`` halved on every node a gang spans beyond the first (so LAS's consolidation pays)."""

    def throughput(self, queries: Sequence[tuple[Job, PlacementShape]]) -> list[float]:
        return [
            (1.0 + int(j.name[1:]) % 3) * shape.num_gpus / 2 ** (shape.num_nodes - 1) for j, shape in queries
        ]


POLICIES: list[tuple[str, dict[str, Any] | None]] = [
    # queue boundaries at 36 and 180 GPU-seconds; consolidation (on by default) moves spread gangs
    ("las", {"thresholds_gpu_hours": [0.01, 0.05]}),
    ("las", {"thresholds_gpu_hours": [0.01, 0.05], "consolidate": False}),
    ("las", {"thresholds_gpu_hours": [0.02], "preemptive": False, "consolidate": False}),
    ("srsf", None),
    ("srsf", {"preempt_margin_gpu_s": 50.0}),
    ("fifo", None),  # strict
    ("fifo", {"backfill": True}),
]


def _run(
    nodes: Sequence[Node],
    jobs: Sequence[Job],
    policy: str,
    config: Mapping[str, Any] | None,
    oracle: ThroughputOracle | None = None,
    **cfg: Any,
) -> EngineResult:
    pol = make_policy(policy, config)
    speeds = oracle or Speeds()
    thresholds = tuple(h * 3600.0 for h in (config or {}).get("thresholds_gpu_hours", ()))
    if policy == "las" and not thresholds:
        thresholds = (3600.0, 36000.0)
    return Engine(
        nodes,
        jobs,
        pol,
        speeds,
        speeds,
        EngineConfig(wake_thresholds_gpu_s=thresholds, **cfg),
        run_round=run_round,
    ).run()


def _records(result: EngineResult) -> list[tuple[object, ...]]:
    return [
        (r.name, r.first_start, r.finish, r.preemptions, r.restarts, r.resizes, r.gpu_seconds, r.failed)
        for r in result.records
    ]


NODES = {
    # one 8-GPU node; two 4-GPU nodes in a rack plus a 2-GPU node (gangs can split or fragment)
    "one-node": (node("n0").gpus(8, "V100").build(),),
    "mixed-sizes": (
        node("a").gpus(4, "V100").rack("r1").build(),
        node("b").gpus(4, "V100").rack("r1").build(),
        node("c").gpus(2, "V100").pcie().build(),
    ),
    "four-nodes": cluster(("V100", 4, 2)),
}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(
            st.integers(0, 400),  # submit time
            st.sampled_from([1, 1, 1, 2, 3, 4, 8]),  # replicas
            st.sampled_from([1, 1, 2]),  # GPUs per replica
            st.integers(1, 600),  # work units
            st.integers(0, 1),  # priority
        ),
        min_size=1,
        max_size=30,
    ),
    st.sampled_from(range(len(POLICIES))),
    st.sampled_from(sorted(NODES)),
    st.sampled_from([0.0, 45.0]),
    st.sampled_from([0.0, 7.0]),
    st.booleans(),
)
def test_incremental_rounds_match_run_round(
    rows: list[tuple[int, int, int, int, int]],
    which: int,
    nodes_name: str,
    round_seconds: float,
    restart_cost: float,
    spread_slows: bool,
) -> None:
    nodes = NODES[nodes_name]
    largest = max(n.gpus for n in nodes)
    jobs = [
        job(f"j{i}")
        .replicas(r)
        .gpus_per_replica(min(g, largest))
        .work(float(w))
        .submitted(float(t))
        # a job bigger than the cluster waits for ever (both paths must agree on that too)
        .priority(p)
        .build()
        for i, (t, r, g, w, p) in enumerate(rows)
    ]
    policy, config = POLICIES[which]
    cfg = {"round_seconds": round_seconds, "restart_cost_s": restart_cost}
    oracle = SpreadSpeeds() if spread_slows else Speeds()
    checked = _run(nodes, jobs, policy, config, oracle, check_incremental=True, **cfg)
    plain = _run(nodes, jobs, policy, config, oracle, incremental=False, **cfg)
    # the fast path decided every round (and the check compared each with run_round)
    assert checked.incremental_rounds == checked.rounds
    assert plain.incremental_rounds == 0
    assert _records(checked) == _records(plain)
    assert checked.series_used == plain.series_used
    assert checked.series_waiting == plain.series_waiting
    assert (checked.rounds, checked.skipped_rounds, checked.events) == (
        plain.rounds,
        plain.skipped_rounds,
        plain.events,
    )


def _small_jobs() -> list[Job]:
    # 6 one-GPU jobs of 100 units and a 3-GPU job on 4 GPUs: someone always waits
    jobs = [job(f"j{i}").replicas(1).work(100.0).submitted(10.0 * i).build() for i in range(6)]
    return [*jobs, job("j9").replicas(3).work(90.0).submitted(5.0).build()]


@pytest.mark.parametrize(
    ("nodes", "jobs", "policy", "config"),
    [
        # two GPU types: the fast path declines
        (cluster(("V100", 1, 4), ("K80", 1, 4)), _small_jobs(), "las", None),
        # an elastic job: declines
        (cluster(("V100", 1, 4)), [*_small_jobs(), job("j8").replicas(1, 2).build()], "fifo", None),
        # the promote knob moves queues with the clock: declines
        (cluster(("V100", 1, 4)), _small_jobs(), "las", {"promote_knob": 2.0, "consolidate": False}),
        # the starvation reservation holds GPUs: declines
        (cluster(("V100", 1, 4)), _small_jobs(), "las", {"starvation_factor": 1.0, "consolidate": False}),
        # a policy without an incremental round
        (cluster(("V100", 1, 4)), _small_jobs(), "ftf", None),
    ],
)
def test_engine_uses_run_round_where_the_fast_path_declines(
    nodes: Sequence[Node], jobs: list[Job], policy: str, config: dict[str, Any] | None
) -> None:
    result = _run(nodes, jobs, policy, config, round_seconds=0.0, check_incremental=True)
    assert result.incremental_rounds == 0
    assert result.rounds > 0
    assert all(r.finish is not None for r in result.records)


def test_las_consolidation_runs_in_the_incremental_rounds() -> None:
    # two 4-GPU nodes: j0 and j1 take 3 GPUs each, so the 2-GPU gang j2 starts spread over both nodes;
    # when j1 finishes, j2 moves onto one node (twice as fast there) in an incremental round
    jobs = [
        job("j0").replicas(3).work(6000.0).submitted(0.0).build(),
        job("j1").replicas(3).work(300.0).submitted(0.0).build(),
        job("j2").replicas(2).work(6000.0).submitted(1.0).build(),
    ]
    nodes = cluster(("V100", 2, 4))
    cfg: dict[str, Any] = {"round_seconds": 0.0, "restart_cost_s": 5.0}
    checked = _run(nodes, jobs, "las", None, SpreadSpeeds(), check_incremental=True, **cfg)
    plain = _run(nodes, jobs, "las", None, SpreadSpeeds(), incremental=False, **cfg)
    assert checked.incremental_rounds == checked.rounds > 0
    assert [r.migrations for r in checked.records] == [0, 0, 1]
    assert _records(checked) == _records(plain)
    # without consolidation j2 stays spread and finishes later
    still = _run(nodes, jobs, "las", {"consolidate": False}, SpreadSpeeds(), **cfg)
    assert still.records[2].finish is not None and checked.records[2].finish is not None
    assert checked.records[2].finish < still.records[2].finish


class _WrongRound:
    """An incremental round that never starts anything (what a bug would look like)."""

    def add(self, job: Job) -> None:
        pass

    def remove(self, name: str) -> None:
        pass

    def round(
        self, now: float, running: Mapping[str, tuple[float, float]], view: RoundView
    ) -> dict[str, Allocation | None]:
        return {}


class _Lying:
    """FIFO with a broken incremental round."""

    def __init__(self) -> None:
        self._inner = make_policy("fifo")
        self.name = "fifo"

    def allocate(self, snapshot: Any, jobs: Any, oracle: Any) -> Any:
        return self._inner.allocate(snapshot, jobs, oracle)

    def incremental(
        self, nodes: Sequence[Node], oracle: ThroughputOracle, jobs: Sequence[Job]
    ) -> IncrementalRound:
        return _WrongRound()


def test_check_mode_catches_an_incremental_round_that_differs() -> None:
    jobs = _small_jobs()
    cfg = EngineConfig(round_seconds=0.0, check_incremental=True)
    engine = Engine(cluster(("V100", 1, 4)), jobs, _Lying(), Speeds(), Speeds(), cfg, run_round=run_round)
    with pytest.raises(IncrementalMismatch, match="run_round's"):
        engine.run()


@pytest.mark.parametrize(("policy", "config"), POLICIES)
def test_a_job_done_before_its_completion_event_sends_the_rest_of_the_run_to_run_round(
    policy: str, config: dict[str, Any] | None
) -> None:
    # j2 runs 175 units at 3 units/s from t=64 on the only GPU: its completion event is at
    # 64 + 175/3 = 122.33333333333334. j4 arrives one float earlier, and the round there sees
    # j2 at 3 x (122.33333333333333 - 64) = 175.0 (rounded up): all work done before its completion.
    # run_round then treats j2 as complete; the engine stops the incremental rounds and agrees with it.
    arrive = math.nextafter(64.0 + 175.0 / 3.0, -math.inf)
    jobs = [
        job("j2").replicas(1).work(175.0).submitted(64.0).build(),
        job("j4").replicas(1).work(10.0).submitted(arrive).build(),
    ]
    nodes = (node("n0").gpus(1, "V100").build(),)
    checked = _run(nodes, jobs, policy, config, round_seconds=0.0, check_incremental=True)
    plain = _run(nodes, jobs, policy, config, round_seconds=0.0, incremental=False)
    assert 0 < checked.incremental_rounds < checked.rounds
    assert _records(checked) == _records(plain)


@pytest.fixture(scope="module")
def philly_slice() -> tuple[Sequence[Job], Any]:
    from perfmodel.truth import GroundTruth
    from scheduler.sim.trace_jobs import WorkloadOptions, build_workload
    from scheduler.sim.traces import load_trace, rescale_load

    truth = GroundTruth.load()
    # the first 250 shipped Philly jobs offered to 16 GPUs at load 1.0: queues, preemptions
    rows = [r for r in load_trace("philly-10k").jobs[:250] if r.num_gpus <= 16]
    scaled, _ = rescale_load(rows, 16, 1.0)
    return build_workload(scaled, truth, WorkloadOptions()).jobs, truth


@pytest.mark.parametrize(
    ("policy", "config"),
    [
        ("las", None),
        ("las", {"consolidate": False}),
        ("srsf", None),
        ("fifo", {"backfill": True}),
        ("fifo", None),
    ],
)
def test_incremental_rounds_match_run_round_on_a_philly_slice(
    philly_slice: tuple[Sequence[Job], Any], policy: str, config: dict[str, Any] | None
) -> None:
    from scheduler.oracles.table import TableOracle

    jobs, truth = philly_slice
    nodes = cluster(("V100", 2, 8))

    def run(**cfg: Any) -> EngineResult:
        told = TableOracle(truth, mre=0.25, seed=1)
        return Engine(
            nodes,
            jobs,
            make_policy(policy, config),
            told,
            TableOracle(truth),
            EngineConfig(
                round_seconds=360.0, restart_cost_s=30.0, wake_thresholds_gpu_s=(3600.0, 36000.0), **cfg
            ),
            run_round=run_round,
        ).run()

    checked = run(check_incremental=True)
    assert checked.incremental_rounds == checked.rounds > 0
    if policy != "fifo":
        assert sum(r.preemptions for r in checked.records) > 0  # the slice exercises preemption
    if config is None and policy == "las":
        assert sum(r.migrations for r in checked.records) > 0  # and LAS's consolidation
    assert _records(checked) == _records(run(incremental=False))
