"""Slow-node detection: the rules on small tables, and the calibration trial (scheduler.sim.slow_nodes)."""

from __future__ import annotations

import pytest

from scheduler.core.decisions import Action, ActionKind
from scheduler.core.errors import ConfigError
from scheduler.core.slow_nodes import (
    GangSample,
    SlowNodeConfig,
    SlowNodeMoves,
    moves_off_slow_nodes,
    node_slowdown,
    single_node,
)
from scheduler.core.types import Allocation, Job
from scheduler.sim.slow_nodes import TrialSpec, run_trial
from tests.builders import FakeOracle, alloc, job, node, snapshot, with_

# confirm 600 s, 6 samples: samples at t = 0, 120, ..., 600 (6 per node and model)
TIMES = [0.0, 120.0, 240.0, 360.0, 480.0, 600.0]


def samples(node: str, model: str, residual: float, gpu_type: str = "A100") -> list[GangSample]:
    return [GangSample(t, node, gpu_type, model, residual) for t in TIMES]


def test_a_node_slower_than_its_peers_on_several_models_is_flagged() -> None:
    # the predictor is 30% optimistic on m1 everywhere: residual 0.7 on the peers, 0.7 x 0.6 on n3
    data = [
        *samples("n1", "m1", 0.7), *samples("n2", "m1", 0.7), *samples("n3", "m1", 0.42),
        *samples("n1", "m2", 1.0), *samples("n2", "m2", 1.0), *samples("n3", "m2", 0.6),
    ]  # fmt: skip
    out = node_slowdown(data, now=600.0)
    # ratios on n3: m1 0.42 / 0.7 = 0.6, m2 0.6 / 1.0 = 0.6 -> median 0.6 < 0.75
    assert out["n3"].flagged and out["n3"].ratio == pytest.approx(0.6) and out["n3"].models == 2
    # a healthy node's peers include the slow one: m1 0.7 / median(6 x 0.7, 6 x 0.42) = 0.7 / 0.56 = 1.25,
    # m2 1.0 / median(6 x 1.0, 6 x 0.6) = 1.25 -> faster than its peers, not flagged
    assert not out["n1"].flagged and out["n1"].ratio == pytest.approx(1.25)


@pytest.mark.parametrize(
    ("data", "why"),
    [
        # one slow model only: a job slow for its own reasons, not the node
        ([*samples("n1", "m1", 1.0), *samples("n3", "m1", 0.5)], "one model"),
        # two models but one of them as fast as on its peers: 1 of 2 slow < 60% share ... and min_models 2
        (
            [
                *samples("n1", "m1", 1.0),
                *samples("n3", "m1", 0.5),
                *samples("n1", "m2", 1.0),
                *samples("n3", "m2", 1.0),
            ],
            "one of two models",
        ),
        # slow everywhere the model runs: the predictor's error, not the node (no faster peer)
        (
            [
                *samples("n1", "m1", 0.5),
                *samples("n3", "m1", 0.5),
                *samples("n1", "m2", 0.5),
                *samples("n3", "m2", 0.5),
            ],
            "predictor",
        ),
        # slow for 5 minutes only: less than the confirmation window
        (
            [
                GangSample(t, n, "A100", m, r)
                for t in (0.0, 60.0, 120.0, 180.0, 240.0, 300.0)
                for n, r in (("n1", 1.0), ("n3", 0.5))
                for m in ("m1", "m2")
            ],
            "not confirmed",
        ),
        # the peers of the same model are of another GPU type: nothing to compare with
        (
            [
                *samples("n1", "m1", 1.0, "V100"),
                *samples("n3", "m1", 0.5),
                *samples("n1", "m2", 1.0, "V100"),
                *samples("n3", "m2", 0.5),
            ],
            "type",
        ),
    ],
)
def test_what_is_not_a_slow_node(data: list[GangSample], why: str) -> None:
    out = node_slowdown(data, now=600.0)
    assert not any(v.flagged for v in out.values()), why


def test_samples_outside_the_window_are_forgotten() -> None:
    data = [
        *samples("n1", "m1", 1.0),
        *samples("n3", "m1", 0.5),
        *samples("n1", "m2", 1.0),
        *samples("n3", "m2", 0.5),
    ]
    assert node_slowdown(data, now=600.0)["n3"].flagged
    assert node_slowdown(data, now=600.0 + 3601.0) == {}


def test_config_is_validated_naming_the_setting() -> None:
    with pytest.raises(ConfigError, match="threshold"):
        SlowNodeConfig(threshold=1.2)
    with pytest.raises(ConfigError, match="confirm_s"):
        SlowNodeConfig(window_s=100.0, confirm_s=600.0)


def test_single_node_names_a_node_only_for_a_gang_on_one_node() -> None:
    assert single_node({"n1": 2}) == "n1" and single_node((("n1", 1), ("n2", 1))) is None


@pytest.mark.parametrize("seed", [0, 1])
def test_calibration_one_slow_node_of_16_is_flagged_within_30_min_and_no_healthy_one_in_48_h(
    seed: int,
) -> None:
    # 16 A100 nodes x 3 jobs of 8 models, job-to-job spread 10%, the predictor 20% off per model,
    # one node at 0.6x (bench/slow_nodes.py runs 8 seeds and other settings)
    result = run_trial(seed)
    assert result.first_flag_s is not None and result.first_flag_s <= 30 * 60
    assert result.false_flags == []
    assert result.last_ratio["n07"] == pytest.approx(0.6, abs=0.1)


def test_calibration_without_a_slow_node_flags_nothing() -> None:
    result = run_trial(2, TrialSpec(hours=24.0, slow_node=-1))
    assert result.first_flag_s is None and result.false_flags == []


# --- moving gangs off a slow node ---------------------------------------------------------------------------

N1_SLOW = {"n1": 0.6}


def _keep(*allocs: Allocation) -> tuple[Action, ...]:
    return tuple(Action(ActionKind.KEEP, a.job, a, a) for a in allocs)


def _running(name: str, total: float, progress: float = 1000.0, checkpoint: float = 1000.0) -> Job:
    # makes 6 iterations/s where it runs now (the slow node's pace)
    j = job(name).replicas(1).gpus_per_replica(4).work(total).progress(progress, checkpoint).build()
    return with_(j, observed_throughput=6.0)


A100_PAIR = (node("n1").gpus(8, "A100").build(), node("n2").gpus(8, "A100").build())


@pytest.mark.parametrize(
    ("total", "checkpoint", "moves"),
    [
        # remaining (100000 - 1000) / 6 = 16500 s; saved x (1 - 0.6) = 6600 s > 2 x (restart 30 s) = 60 s
        (100_000.0, 1000.0, True),
        # remaining 200 / 6 = 33.3 s; saved 13.3 s < 60 s: the restart does not pay
        (1_200.0, 1000.0, False),
        # remaining 1000 / 6 = 166.7 s, saved 66.7 s > 60 s (checkpointed just now)
        (2_000.0, 1000.0, True),
        # ... but 1000 iterations since the checkpoint are lost: 2 x (30 + 1000 / 6) = 393 s > 66.7 s
        (2_000.0, 0.0, False),
    ],
)
def test_a_gang_on_a_slow_node_moves_when_the_predicted_gain_pays_the_restart(
    total: float, checkpoint: float, moves: bool
) -> None:
    a = alloc("a", "A100", 4, {"n1": 1})
    snap = snapshot(A100_PAIR, now=1000.0, allocations=[a])
    jobs = [_running("a", total, checkpoint=checkpoint)]
    out, moved = moves_off_slow_nodes(
        snap, jobs, _keep(a), SlowNodeMoves(N1_SLOW), FakeOracle(), restart_cost_s=30.0
    )
    if not moves:
        assert out == _keep(a) and moved == ()
        return
    assert moved == ("a",)
    (act,) = out
    assert (act.kind, act.before, act.after) == (ActionKind.RESIZE, a, alloc("a", "A100", 4, {"n2": 1}))
    assert act.reason.startswith("slow node n1 runs at 0.60x its peers")
    assert (act.cost_seconds, act.lost_work) == (30.0, 1000.0 - checkpoint)


def test_no_move_without_free_healthy_gpus_and_nobody_is_preempted_for_one() -> None:
    a = alloc("a", "A100", 4, {"n1": 1})
    b = alloc("b", "A100", 2, {"n2": 3})  # n2: 6 of 8 held, 2 free < 4; n1 has 4 free but is the slow one
    snap = snapshot(A100_PAIR, now=1000.0, allocations=[a, b])
    jobs = [_running("a", 100_000.0), job("b").replicas(3).gpus_per_replica(2).build()]
    out, moved = moves_off_slow_nodes(
        snap, jobs, _keep(a, b), SlowNodeMoves(N1_SLOW), FakeOracle(), restart_cost_s=30.0
    )
    assert out == _keep(a, b) and moved == ()


def test_a_gang_not_on_the_slow_node_stays() -> None:
    a = alloc("a", "A100", 4, {"n2": 1})
    snap = snapshot(A100_PAIR, now=1000.0, allocations=[a])
    out, moved = moves_off_slow_nodes(
        snap, [_running("a", 100_000.0)], _keep(a), SlowNodeMoves(N1_SLOW), FakeOracle(), restart_cost_s=30.0
    )
    assert out == _keep(a) and moved == ()


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"preemptible": False}, "non-preemptible"),
        ({"last_change_time": 990.0}, "changed 10 s ago, within the minimum resize interval of 60 s"),
        ({"observed_throughput": None}, "not measured yet"),
    ],
)
def test_gangs_that_are_not_moved(change: dict[str, object], why: str) -> None:
    a = alloc("a", "A100", 4, {"n1": 1})
    snap = snapshot(A100_PAIR, now=1000.0, allocations=[a])
    jobs = [with_(_running("a", 100_000.0), **change)]
    _out, moved = moves_off_slow_nodes(
        snap,
        jobs,
        _keep(a),
        SlowNodeMoves(N1_SLOW),
        FakeOracle(),
        restart_cost_s=30.0,
        min_resize_interval_s=60.0,
    )
    assert moved == (), why


def test_at_most_one_move_per_job_per_window() -> None:
    a = alloc("a", "A100", 4, {"n1": 1})
    snap = snapshot(A100_PAIR, now=1000.0, allocations=[a])
    moves = SlowNodeMoves(N1_SLOW, moved=frozenset({"a"}))
    out, moved = moves_off_slow_nodes(
        snap, [_running("a", 100_000.0)], _keep(a), moves, FakeOracle(), restart_cost_s=30.0
    )
    assert out == _keep(a) and moved == ()


def test_a_slower_gpu_type_is_no_escape() -> None:
    # n1 A100 at 0.6x makes 6/s; free only on a V100 node: 6 / 0.6 x (4 x 3) / (4 x 6) = 5/s < 6/s
    nodes = (node("n1").gpus(8, "A100").build(), node("v1").gpus(8, "V100").build())
    a = alloc("a", "A100", 4, {"n1": 1})
    snap = snapshot(nodes, now=1000.0, allocations=[a])
    _out, moved = moves_off_slow_nodes(
        snap, [_running("a", 100_000.0)], _keep(a), SlowNodeMoves(N1_SLOW), FakeOracle(), restart_cost_s=30.0
    )
    assert moved == ()
    # with the V100 at the A100's speed, the same move pays: 6 / 0.6 = 10/s
    faster = FakeOracle(speed={"A100": 6.0, "V100": 6.0})
    _, moved = moves_off_slow_nodes(
        snap, [_running("a", 100_000.0)], _keep(a), SlowNodeMoves(N1_SLOW), faster, restart_cost_s=30.0
    )
    assert moved == ("a",)


def test_two_gangs_never_count_the_same_free_gpus_the_larger_gain_goes_first() -> None:
    a, b = alloc("a", "A100", 4, {"n1": 1}), alloc("b", "A100", 4, {"n1": 1})
    c = alloc("c", "A100", 4, {"n2": 1})  # n2 has room for one of them
    snap = snapshot(A100_PAIR, now=1000.0, allocations=[a, b, c])
    jobs = [_running("a", 10_000.0), _running("b", 100_000.0), _running("c", 100_000.0)]
    out, moved = moves_off_slow_nodes(
        snap, jobs, _keep(a, b, c), SlowNodeMoves(N1_SLOW), FakeOracle(), restart_cost_s=30.0
    )
    assert moved == ("b",)
    assert [x.kind for x in out] == [ActionKind.KEEP, ActionKind.RESIZE, ActionKind.KEEP]


def test_run_round_moves_a_gang_off_a_slow_node_only_when_given_one() -> None:
    from scheduler.core.round import RoundCosts, run_round
    from scheduler.policies import make_policy

    a = alloc("a", "A100", 4, {"n1": 1})
    snap = snapshot(A100_PAIR, now=1000.0, allocations=[a])
    jobs = [_running("a", 100_000.0)]
    costs = RoundCosts(restart_cost_s=30.0)
    plain = run_round(snap, jobs, make_policy("fifo"), FakeOracle(), costs=costs)
    assert [x.kind for x in plain.actions] == [ActionKind.KEEP] and plain.moved_off_slow_nodes == ()
    moved = run_round(
        snap, jobs, make_policy("fifo"), FakeOracle(), costs=costs, slow_nodes=SlowNodeMoves(N1_SLOW)
    )
    assert [x.kind for x in moved.actions] == [ActionKind.RESIZE] and moved.moved_off_slow_nodes == ("a",)
    assert moved.decisions["a"].allocation == alloc("a", "A100", 4, {"n2": 1})


def test_move_settings_are_validated() -> None:
    with pytest.raises(ConfigError, match="margin"):
        SlowNodeMoves(N1_SLOW, margin=0.5)
    with pytest.raises(ConfigError, match="n1"):
        SlowNodeMoves({"n1": 1.2})
