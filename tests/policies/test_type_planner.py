"""Heterogeneity-aware GPU type choice (``heterogeneity: aware``) against the free-GPU order (agnostic)."""

from __future__ import annotations

import math

import pytest

from scheduler.core.decisions import ActionKind
from scheduler.core.round import RoundCosts, run_round
from scheduler.policies import make_policy
from scheduler.policies.type_planner import EvictionPrice, eviction_pays, move_pays
from tests.builders import FakeOracle, alloc, job, node, snapshot, with_

ORDERING = ["fifo", "las", "srsf", "ftf"]


def placed(result) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return {a.job: a.after.gpu_type for a in result.actions if a.after is not None}


# one V100 GPU and two K80 GPUs; "meh" is 1.2x faster on V100 than on K80, "gainer" 9x
NODES = [node("v").gpus(1, "V100").build(), node("k").gpus(2, "K80").build()]
SPEEDS = {("meh", "K80"): 1.0, ("meh", "V100"): 1.2, ("gainer", "K80"): 1.0, ("gainer", "V100"): 9.0}


@pytest.mark.parametrize("name", ORDERING)
def test_the_9x_job_gets_the_v100_before_the_1_2x_job(name: str) -> None:
    # "meh" ranks first (earlier, and shorter for SRSF: 10 work / 1.2 per s < 900 / 9 per s);
    # both run, but the V100 goes to the job that gains most from it: 1.2 + 9 (meh K80 + gainer
    # V100: 1 + 9 = 10 units/s) beats 1.2 + 1 (meh V100 + gainer K80: 2.2 units/s)
    jobs = [
        job("meh").work(10).submitted(0).build(),
        job("gainer").work(900).submitted(1).build(),
    ]
    res = run_round(snapshot(NODES, now=10), jobs, make_policy(name), FakeOracle(speed=SPEEDS))
    assert placed(res) == {"meh": "K80", "gainer": "V100"}


@pytest.mark.parametrize("name", ORDERING)
def test_agnostic_takes_the_type_with_most_free_gpus(name: str) -> None:
    # K80 has 2 free GPUs, V100 1: "meh" (first) takes a K80; then K80 and V100 both have 1 free and
    # the tie goes by name (K80), so the 9x job lands on a K80 too: today's free-GPU order
    jobs = [
        job("meh").work(10).submitted(0).build(),
        job("gainer").work(900).submitted(1).build(),
    ]
    policy = make_policy(name, {"heterogeneity": "agnostic"})
    res = run_round(snapshot(NODES, now=10), jobs, policy, FakeOracle(speed=SPEEDS))
    assert placed(res) == {"meh": "K80", "gainer": "K80"}


def test_agnostic_fifo_and_las_never_ask_the_oracle() -> None:
    oracle = FakeOracle(speed=SPEEDS)
    jobs = [job("meh").work(10).build(), job("gainer").work(900).build()]
    for name in ("fifo", "las"):
        run_round(snapshot(NODES), jobs, make_policy(name, {"heterogeneity": "agnostic"}), oracle)
    assert oracle.calls == 0


def test_the_policy_order_still_decides_who_runs() -> None:
    # one GPU in all: LAS gives it to the least-served job whatever its speed-up
    nodes = [node("v").gpus(1, "V100").build(), node("k").gpus(0, "K80").build()]
    jobs = [
        job("served").work(900).attained(7200).build(),  # 2 GPU-hours: LAS queue 1
        job("fresh").work(900).submitted(5).build(),  # queue 0
    ]
    speeds = {("served", "V100"): 9.0, ("fresh", "V100"): 1.2}
    res = run_round(snapshot(nodes, now=10), jobs, make_policy("las"), FakeOracle(speed=speeds))
    assert placed(res) == {"fresh": "V100"}


# ------------------------------------------------------------------------------------ churn priced
# A job runs on a K80 at 1 unit/s; the V100 node is free. Restart cost R = 30 s, horizon 3600 s.
@pytest.mark.parametrize(
    ("v100_speed", "remaining", "lost", "moves", "why"),
    [
        # gain over min(3600, 100000 / 5) = 3600 s: (5 - 1) x 3600 = 14400 > 5 x 30 + 0 = 150: moves
        (5.0, 100_000.0, 0.0, True, "pays"),
        # 1.2x is under the 1.25x the planner asks for (prediction errors of that size are common)
        (1.2, 100_000.0, 0.0, False, "too small a speed-up"),
        # finishes in 100 / 5 = 20 s on V100: gain (5 - 1) x 20 = 80 < 150 restart cost: stays
        (5.0, 100.0, 0.0, False, "almost done"),
        # 20000 work units since the last checkpoint would be lost: 14400 < 150 + 20000: stays
        (5.0, 100_000.0, 20_000.0, False, "too much lost work"),
    ],
)
def test_a_running_job_moves_only_when_the_gain_pays(
    v100_speed: float, remaining: float, lost: float, moves: bool, why: str
) -> None:
    nodes = [node("v").gpus(1, "V100").build(), node("k").gpus(1, "K80").build()]
    done = 50_000.0
    j = with_(
        job("j").work(done + remaining).progress(done, checkpoint=done - lost).build(),
        observed_throughput=1.0,
    )
    snap = snapshot(nodes, now=100, allocations=[alloc("j", "K80", 1, {"k": 1})])
    oracle = FakeOracle(speed={("j", "K80"): 1.0, ("j", "V100"): v100_speed})
    res = run_round(snap, [j], make_policy("las"), oracle, costs=RoundCosts(restart_cost_s=30))
    kinds = {a.job: (a.kind, a.after.gpu_type if a.after else None) for a in res.actions}
    if moves:
        assert kinds["j"] == (ActionKind.RESIZE, "V100"), why
        assert "move from K80 to V100" in next(a.reason for a in res.actions if a.job == "j")
    else:
        assert kinds["j"] == (ActionKind.KEEP, "K80"), why


def _one_move_round(j, k80_predicted: float, v100_predicted: float, here: str = "K80"):  # type: ignore[no-untyped-def]
    # "j" runs on node "k" of type ``here`` (a K80; an A100 where the V100 must not be the newest type,
    # so that the catalogue's peak ratio does not price the move: ``_move_speeds``)
    nodes = [node("v").gpus(1, "V100").build(), node("k").gpus(1, here).build()]
    snap = snapshot(nodes, now=100, allocations=[alloc("j", here, 1, {"k": 1})])
    oracle = FakeOracle(speed={("j", here): k80_predicted, ("j", "V100"): v100_predicted})
    res = run_round(snap, [j], make_policy("las"), oracle, costs=RoundCosts(restart_cost_s=30))
    return next((a.kind, a.after.gpu_type if a.after else None) for a in res.actions if a.job == "j")


def test_a_running_job_is_priced_by_its_measured_throughput_and_the_predicted_ratio() -> None:
    # predicted 1/s on its K80 and 5/s on the free V100: a 5x move that pays
    base = job("j").work(1_000_000).progress(1000, checkpoint=1000)
    assert _one_move_round(with_(base.build(), observed_throughput=1.0), 1.0, 5.0) == (
        ActionKind.RESIZE,
        "V100",
    )
    # not measured yet (it just started; the first progress report is seconds away): no move to price
    assert _one_move_round(base.build(), 1.0, 5.0) == (ActionKind.KEEP, "K80")
    # measured at 4.5/s where it runs: the predictor under-rates this job, and nothing says by less on
    # the V100, so the V100 is still 5x (22.5/s): it moves (comparing 4.5 measured with 5 predicted
    # kept a shufflenet on 8 P100s for 526 h that the truth moves to V100s in its first day)
    measured = with_(base.build(), observed_throughput=4.5)
    assert _one_move_round(measured, 1.0, 5.0) == (ActionKind.RESIZE, "V100")
    # and where the predicted ratio is under the 1.25x bar, being measured fast does not make it one
    # (running on an A100, so the V100 is not the newest type)
    assert _one_move_round(measured, 1.0, 1.2, here="A100") == (ActionKind.KEEP, "A100")
    # measured slower than predicted (0.5/s): the measurement replaces the prediction where it runs, and
    # its own 2x error may be a level error, so the V100's lower bound is 1.2 / 2 = 0.6/s, 1.2x what was
    # measured: no move; a V100 predicted at 2/s (lower bound 1/s, 2x) moves
    slow = with_(base.build(), observed_throughput=0.5)
    assert _one_move_round(slow, 1.0, 1.2, here="A100") == (ActionKind.KEEP, "A100")
    assert _one_move_round(slow, 1.0, 2.0, here="A100") == (ActionKind.RESIZE, "V100")


def test_inside_the_interval_a_move_to_the_newest_type_is_priced_by_the_catalogues_peak_ratio() -> None:
    # "j" on a K80, measured at half what was predicted there: the oracle may be 2x off for it anywhere
    # (a level error), so its V100 answer (1.2x the K80's) cannot tell the two apart. The V100 is the
    # newest allowed type (the highest peak rate at the job's precision): the move is priced at the
    # measured speed times the peak rates' ratio, inside the V100's interval, and pays, as ``ordered``
    # would start the job there (on an A100, where the V100 is not the newest, it stays: above). With
    # the oracle exact for it (measured as predicted) it stays.
    base = job("j").work(1_000_000).progress(1000, checkpoint=1000)
    slow = with_(base.build(), observed_throughput=0.5)
    assert _one_move_round(slow, 1.0, 1.2) == (ActionKind.RESIZE, "V100")
    exact = with_(base.build(), observed_throughput=1.0)
    assert _one_move_round(exact, 1.0, 1.2) == (ActionKind.KEEP, "K80")


def test_a_move_must_gain_beyond_what_the_other_jobs_measurements_say_is_unknown() -> None:
    # "j" runs on a A100 measured at 0.5/s (predicted 1/s); the V100 is predicted at 1.2/s. "o", on the
    # other A100, is measured at 0.5/s where 1/s was predicted: the oracle is off by 2x on one node, so
    # the V100's lower bound is 1.2 / 2 = 0.6/s, 1.2x what "j" makes: under the 1.25x bar, no move.
    # At 2/s predicted (lower bound 1.0/s, 2x) it moves.
    nodes = [
        node("v").gpus(1, "V100").build(),
        node("k").gpus(1, "A100").build(),
        node("k2").gpus(1, "A100").build(),
    ]
    base = job("j").work(1_000_000).progress(1000, checkpoint=1000)
    j = with_(base.build(), observed_throughput=0.5)
    other = with_(job("o").work(1_000_000).progress(1000, checkpoint=1000).build(), observed_throughput=0.5)
    snap = snapshot(
        nodes, now=100, allocations=[alloc("j", "A100", 1, {"k": 1}), alloc("o", "A100", 1, {"k2": 1})]
    )
    for v100, moves in ((1.2, False), (2.0, True)):
        speed = {("j", "A100"): 1.0, ("j", "V100"): v100, ("o", "A100"): 1.0, ("o", "V100"): 0.0}
        res = run_round(snap, [j, other], make_policy("las"), FakeOracle(speed=speed), costs=RoundCosts(30))
        kinds = {a.job: (a.kind, a.after.gpu_type if a.after else None) for a in res.actions}
        assert kinds["j"] == ((ActionKind.RESIZE, "V100") if moves else (ActionKind.KEEP, "A100")), v100


def test_a_learning_oracles_error_is_read_on_what_it_said_before_each_measurement() -> None:
    from dataclasses import dataclass, field

    from scheduler.core.types import Job, PlacementShape

    @dataclass
    class Learned(FakeOracle):
        """A learning oracle after it saw both running jobs: its answers where they run are their
        measurements (0.5/s); before, it said ``before`` there (``throughput_held_out``)."""

        before: dict[tuple[str, str], float] = field(default_factory=dict)

        def throughput_held_out(self, queries: list[tuple[Job, PlacementShape]]) -> list[float]:
            return [self.before.get((j.name, s.gpu_type), self.rate(j, s.gpu_type)) for j, s in queries]

    # "j" and "o" run on A100s at 0.5/s, which the oracle now answers there; the V100 is predicted at
    # 1.2/s for "j". Before it learned, the oracle said 1/s for "o": 2x off, so questions nobody measured
    # (j on V100) may be 2x off too: lower bound 0.6/s, 1.2x what "j" makes, under the 1.25x bar: no
    # move. Read on the learned answers the error is 0 and "j" moves on the point prediction (2.4x).
    nodes = [
        node("v").gpus(1, "V100").build(),
        node("k").gpus(1, "A100").build(),
        node("k2").gpus(1, "A100").build(),
    ]
    j = with_(job("j").work(1_000_000).progress(1000, checkpoint=1000).build(), observed_throughput=0.5)
    other = with_(job("o").work(1_000_000).progress(1000, checkpoint=1000).build(), observed_throughput=0.5)
    snap = snapshot(
        nodes, now=100, allocations=[alloc("j", "A100", 1, {"k": 1}), alloc("o", "A100", 1, {"k2": 1})]
    )
    speed = {("j", "A100"): 0.5, ("j", "V100"): 1.2, ("o", "A100"): 0.5, ("o", "V100"): 0.0}
    for before, moves in (({("o", "A100"): 1.0}, False), ({}, True)):
        oracle = Learned(speed=speed, before=before)
        res = run_round(snap, [j, other], make_policy("las"), oracle, costs=RoundCosts(30))
        kinds = {a.job: (a.kind, a.after.gpu_type if a.after else None) for a in res.actions}
        assert kinds["j"] == ((ActionKind.RESIZE, "V100") if moves else (ActionKind.KEEP, "A100")), before


@pytest.mark.parametrize("name", ORDERING)
@pytest.mark.parametrize(
    ("penalty", "moves"),
    [
        # "j" runs on one 4-GPU K80 node at 1/s per GPU (4/s, measured). On P100 it is predicted 3/s per
        # GPU, 12/s on one node: the planner moves it. But the P100s free are 2 + 1 + 1 on three nodes,
        # where the gang runs at 12 x 0.3 = 3.6/s: under 1.25 x 4 = 5/s, so it keeps its K80 node (moved,
        # it ran slower than priced and the move back paid: a 4-GPU job went K80 -> P100 -> K80 18 times)
        (0.3, False),
        # at 12 x 0.5 = 6/s on the three nodes the move still pays (6 > 5, gain (6 - 4) x 3600 s > 6 x 30)
        (0.5, True),
    ],
)
def test_a_move_to_another_type_is_priced_on_the_spread_it_would_get(
    name: str, penalty: float, moves: bool
) -> None:
    nodes = [node("k").gpus(4, "K80").build(), *(node(f"p{i}").gpus(4, "P100").build() for i in (1, 2, 3))]
    j = with_(job("j").replicas(4).work(1e7).progress(1000, checkpoint=1000).build(), observed_throughput=4.0)
    blockers = [
        job(f"b{i}").replicas(g).work(1e7).non_preemptible().build() for i, g in ((1, 2), (2, 3), (3, 3))
    ]
    snap = snapshot(
        nodes,
        now=100,
        allocations=[
            alloc("j", "K80", 1, {"k": 4}),
            *(alloc(b.name, "P100", 1, {f"p{b.name[1]}": b.max_replicas}) for b in blockers),
        ],
    )
    speed = {("j", "K80"): 1.0, ("j", "P100"): 3.0, **{(b.name, "K80"): 0.0 for b in blockers}}
    oracle = FakeOracle(speed=speed, cross_node_penalty=penalty)
    res = run_round(snap, [j, *blockers], make_policy(name), oracle, costs=RoundCosts(restart_cost_s=30))
    got = next(
        (a.kind, a.after.gpu_type if a.after else None, a.after.num_nodes if a.after else 0)
        for a in res.actions
        if a.job == "j"
    )
    assert got == ((ActionKind.RESIZE, "P100", 3) if moves else (ActionKind.KEEP, "K80", 1))


def test_a_running_job_near_its_end_is_never_moved() -> None:
    # 1/s on its K80, the V100 predicted 2x faster. With 250 units left it finishes in 250 s where it
    # is, under 10 restart costs (300 s): it stays, though on the V100 it would save 125 s for 30
    near_end = with_(
        job("j").work(10_250).progress(10_000, checkpoint=10_000).build(), observed_throughput=1.0
    )
    assert _one_move_round(near_end, 1.0, 2.0) == (ActionKind.KEEP, "K80")
    # with 1000 units left (1000 s where it is) the same move pays
    longer = with_(job("j").work(11_000).progress(10_000, checkpoint=10_000).build(), observed_throughput=1.0)
    assert _one_move_round(longer, 1.0, 2.0) == (ActionKind.RESIZE, "V100")
    # and one measured far faster than predicted (an emulated job at 20/s: 50 s left) stays
    assert _one_move_round(with_(longer, observed_throughput=20.0), 1.0, 100.0) == (ActionKind.KEEP, "K80")


def test_an_evicted_job_does_not_evict_another_job_on_another_type() -> None:
    # "low" (LAS queue 1) runs on the only V100 and is 2x slower on a K80; "old" (queue 2) runs on the
    # only K80. A new job that can run only on the V100 evicts "low". Restarting "low" on the K80 at
    # once would evict "old" too, and both moved back when a V100 freed (on Gavel's cluster one
    # queue-2 job was evicted 54 times so): no eviction cascade onto another type, "low" waits
    nodes = [node("v").gpus(1, "V100").build(), node("k").gpus(1, "K80").build()]
    low = with_(job("low").work(1e6).progress(10, 10).attained(2 * 3600).build(), observed_throughput=2.0)
    old = with_(job("old").work(1e6).progress(10, 10).attained(20 * 3600).build(), observed_throughput=1.0)
    new = job("new").work(1e6).submitted(50).build()
    snap = snapshot(
        nodes, now=100, allocations=[alloc("low", "V100", 1, {"v": 1}), alloc("old", "K80", 1, {"k": 1})]
    )
    speeds = {
        ("low", "V100"): 2.0,
        ("low", "K80"): 1.0,
        ("old", "V100"): 1.0,
        ("old", "K80"): 1.0,
        ("new", "V100"): 9.0,
        ("new", "K80"): 0.0,
    }
    res = run_round(snap, [low, old, new], make_policy("las"), FakeOracle(speed=speeds), costs=RoundCosts(30))
    kinds = {a.job: (a.kind, a.after.gpu_type if a.after else None) for a in res.actions}
    assert kinds == {
        "new": (ActionKind.START, "V100"),
        "low": (ActionKind.PREEMPT, None),
        "old": (ActionKind.KEEP, "K80"),
    }
    # agnostic LAS (the baseline) still restarts it on the K80 at once, evicting "old"
    agn = run_round(
        snap,
        [low, old, new],
        make_policy("las", {"heterogeneity": "agnostic"}),
        FakeOracle(speed=speeds),
        costs=RoundCosts(30),
    )
    assert {a.job: a.kind for a in agn.actions}["old"] is ActionKind.PREEMPT


def test_each_restart_raises_the_bar_for_the_next_move() -> None:
    # 1/s -> 2/s, 2000 units left: the move saves 2000 - 1000 = 1000 s of running; gain over the
    # 1000 s horizon on the V100 is (2 - 1) x 1000 = 1000 units against a cost of 2 x 30 = 60
    j = job("j").work(3000).progress(1000, checkpoint=1000).build()
    assert move_pays(j, 1.0, 2.0, restart_cost_s=30, horizon_s=3600) == (True, 60.0)
    # after 16 restarts it must gain 17 x 60 = 1020 > 1000: it stays
    assert move_pays(j, 1.0, 2.0, restart_cost_s=30, horizon_s=3600, restarts=15)[0] is True
    assert move_pays(j, 1.0, 2.0, restart_cost_s=30, horizon_s=3600, restarts=16)[0] is False


def test_move_pays_arithmetic() -> None:
    j = job("j").work(10_000).progress(1_000, checkpoint=900).build()
    # 9000 left; on 4/s it finishes in 2250 s < 3600: gain (4 - 2) x 2250 = 4500;
    # cost 4 x 30 + (1000 - 900) = 220
    assert move_pays(j, 2.0, 4.0, restart_cost_s=30, horizon_s=3600) == (True, 220.0)
    # slower or equal is never a move
    assert move_pays(j, 4.0, 4.0, restart_cost_s=30, horizon_s=3600)[0] is False


def test_a_move_never_preempts_and_keeps_the_gpus_when_the_target_is_full() -> None:
    # the V100 is held by a job ranked behind ours (LAS queue 2): our job would gain 5x there, but a
    # move is not a reason to evict anyone, so it keeps its K80 and the V100 job keeps running
    nodes = [node("v").gpus(1, "V100").build(), node("k").gpus(1, "K80").build()]
    ours = with_(job("ours").work(100_000).progress(10, 10).build(), observed_throughput=1.0)
    other = job("other").work(100_000).progress(10, 10).attained(20 * 3600).build()
    snap = snapshot(
        nodes, now=100, allocations=[alloc("ours", "K80", 1, {"k": 1}), alloc("other", "V100", 1, {"v": 1})]
    )
    speeds = {("ours", "K80"): 1.0, ("ours", "V100"): 5.0, ("other", "K80"): 1.0, ("other", "V100"): 1.0}
    res = run_round(snap, [ours, other], make_policy("las"), FakeOracle(speed=speeds), costs=RoundCosts(30))
    assert {a.job: a.kind for a in res.actions} == {"ours": ActionKind.KEEP, "other": ActionKind.KEEP}


def test_one_gpu_type_aware_equals_agnostic() -> None:
    nodes = [node("a").gpus(4, "V100").build(), node("b").gpus(2, "V100").build()]
    jobs = [
        job(f"j{i}").gpus_per_replica(1 + i % 3).work(100 * (i + 1)).submitted(i).build() for i in range(6)
    ]
    for name in ORDERING:
        aware = run_round(snapshot(nodes), jobs, make_policy(name), FakeOracle())
        agnostic = run_round(
            snapshot(nodes), jobs, make_policy(name, {"heterogeneity": "agnostic"}), FakeOracle()
        )
        assert aware.actions == agnostic.actions, name


@pytest.mark.parametrize("name", ORDERING)
def test_a_job_running_on_a_cordoned_type_moves_like_a_waiting_one(name: str) -> None:
    # the only P100 node is cordoned (no capacity for jobs): the job running there cannot stay, and
    # both jobs fit on the V100 and the K80 that are left
    nodes = [
        node("p").gpus(1, "P100").cordoned().build(),
        node("v").gpus(1, "V100").build(),
        node("k").gpus(1, "K80").build(),
    ]
    running = job("running").work(1000).progress(10).build()
    waiting = job("waiting").work(1000).submitted(5).build()
    snap = snapshot(nodes, now=10, allocations=[alloc("running", "P100", 1, {"p": 1})])
    res = run_round(snap, [running, waiting], make_policy(name), FakeOracle())
    assert sorted(placed(res).values()) == ["K80", "V100"]


def test_an_evicted_job_restarts_at_once_on_free_gpus_of_another_type() -> None:
    # as above, but the K80 is free: "low" runs on there rather than wait (nobody is evicted for it)
    nodes = [node("v").gpus(1, "V100").build(), node("k").gpus(1, "K80").build()]
    low = with_(job("low").work(1e6).progress(10, 10).attained(2 * 3600).build(), observed_throughput=2.0)
    new = job("new").work(1e6).submitted(50).build()
    snap = snapshot(nodes, now=100, allocations=[alloc("low", "V100", 1, {"v": 1})])
    speeds = {("low", "V100"): 2.0, ("low", "K80"): 1.0, ("new", "V100"): 9.0, ("new", "K80"): 0.0}
    res = run_round(snap, [low, new], make_policy("las"), FakeOracle(speed=speeds), costs=RoundCosts(30))
    kinds = {a.job: (a.kind, a.after.gpu_type if a.after else None) for a in res.actions}
    assert kinds == {"new": (ActionKind.START, "V100"), "low": (ActionKind.RESIZE, "K80")}


def _eviction_round(  # type: ignore[no-untyped-def]
    policy: str,
    old_restarts: int,
    queued_ahead: bool = False,
    old_elastic: bool = False,
):
    # one V100 node of 2 GPUs and one K80: "old" (LAS queue 2, restarted ``old_restarts`` times) and
    # "soon" (queue 0, 60 s of work left) run on the V100s, "k" (queue 0) on the K80; "new" (queue 0)
    # fits nowhere unless "old" is evicted, or in 60 s when "soon" finishes
    nodes = [node("v").gpus(2, "V100").build(), node("k").gpus(1, "K80").build()]
    old = with_(
        job("old").work(1e6).progress(10, 10).attained(20 * 3600).restarts(old_restarts).build(),
        observed_throughput=1.0,
        **({"elastic": True, "max_replicas": 2} if old_elastic else {}),
    )
    soon = with_(job("soon").work(1000).progress(940, 940).attained(600).build(), observed_throughput=1.0)
    k = with_(job("k").work(1e6).progress(10, 10).attained(600).build(), observed_throughput=1.0)
    new = job("new").work(1e6).submitted(50).build()
    # "ahead" (queue 0, before "new") needs both V100s: it cannot start, nor evict enough, and waits
    ahead = job("ahead").replicas(2).work(1e6).submitted(40).build()
    snap = snapshot(
        nodes,
        now=100,
        allocations=[
            alloc("old", "V100", 1, {"v": 1}),
            alloc("soon", "V100", 1, {"v": 1}),
            alloc("k", "K80", 1, {"k": 1}),
        ],
    )
    config = {} if policy == "aware" else {"heterogeneity": "agnostic"}
    jobs = [old, soon, k, new, *([ahead] if queued_ahead else [])]
    oracle = FakeOracle(speed={"V100": 2.0, ("ahead", "K80"): 0.0})
    res = run_round(snap, jobs, make_policy("las", config), oracle, costs=RoundCosts(30))
    return {a.job: a.kind for a in res.actions}, res


def test_an_eviction_must_pay_its_victims_restarts() -> None:
    # waiting 60 s for "soon" costs "new" 1 GPU x 60 s = 60 GPU-s; evicting "old" costs it a 30 s
    # restart on 1 GPU, times (1 + its restarts): 30 GPU-s after none, 180 after 5
    kinds, _ = _eviction_round("aware", 0)
    assert kinds["old"] is ActionKind.PREEMPT and kinds["new"] is ActionKind.START
    kinds, res = _eviction_round("aware", 5)
    assert kinds["old"] is ActionKind.KEEP and "new" not in kinds  # "old" runs on, "new" waits
    reason = res.decisions["new"].reason
    assert "would cost them more restart time than this job is predicted to wait" in reason
    # agnostic LAS (the baseline) evicts whatever the victim's restarts
    kinds, _ = _eviction_round("agnostic", 5)
    assert kinds["old"] is ActionKind.PREEMPT and kinds["new"] is ActionKind.START
    # with "ahead" waiting for both V100s, the V100 that "soon" frees goes to it, not to "new": waiting
    # would take "new" far longer than 60 s, so evicting "old" pays again
    kinds, res = _eviction_round("aware", 5, queued_ahead=True)
    assert kinds["old"] is ActionKind.PREEMPT and kinds["new"] is ActionKind.START
    assert "ahead" not in kinds
    # an elastic victim is not priced: LAS never grows a running job, so its restart is how it regains
    # its size
    kinds, _ = _eviction_round("aware", 5, old_elastic=True)
    assert kinds["old"] is ActionKind.PREEMPT and kinds["new"] is ActionKind.START


def test_eviction_pays_arithmetic() -> None:
    v = with_(job("v").work(1e6).progress(130, 100).restarts(2).build(), observed_throughput=2.0)
    # cost: (1 + 2) x 4 GPUs x (30 s + 30 units / 2 per s) = 540 GPU-s
    assert eviction_pays(2, 271, [v], [4], restart_cost_s=30, horizon_s=3600) is True
    assert eviction_pays(2, 270, [v], [4], restart_cost_s=30, horizon_s=3600) is False
    # the gain stops at the horizon: an endless wait is worth 2 x 200 GPU-s here
    assert eviction_pays(2, math.inf, [v], [4], restart_cost_s=30, horizon_s=200) is False
    # an eviction that wastes nothing (no restart cost, or no victim priced) always pays
    saved = with_(v, checkpoint_progress=v.progress)
    assert eviction_pays(1, 0.0, [saved], [4], restart_cost_s=0, horizon_s=3600) is True
    assert eviction_pays(1, 0.0, [], [], restart_cost_s=30, horizon_s=3600) is True


def test_the_predicted_wait_for_free_gpus() -> None:
    nodes = [node("a").gpus(2, "V100").build(), node("b").gpus(2, "V100").build()]
    r = with_(job("r").work(100).build(), observed_throughput=1.0)  # its GPU frees in 100 s
    price = EvictionPrice(snapshot(nodes, allocations=[alloc("r", "V100", 1, {"a": 1})]), [r])
    assert price.wait_s(2, "V100", 1) == 100.0  # one GPU free now, r's in 100 s
    assert price.wait_s(2, "V100", -1) == math.inf  # two owed to jobs ahead: r's GPU is not enough
    # enough GPUs free but the gang did not fit on them: no known completion helps, so it evicts as before
    assert price.wait_s(2, "V100", 2) == math.inf


@pytest.mark.parametrize("name", ORDERING)
@pytest.mark.parametrize(
    ("t4_speed", "starts_on"),
    [
        # per GPU, 2 on T4 against 10 on H100: a share of 0.2, under MIN_SPREAD_SHARE (0.25): it waits
        (2.0, None),
        # 3 against 10: 0.3 of its best speed, worth starting across the two T4 servers now
        (3.0, "T4"),
    ],
)
def test_a_waiting_gang_does_not_start_spread_over_nodes_where_it_runs_under_a_quarter_of_its_speed(
    name: str, t4_speed: float, starts_on: str | None
) -> None:
    # one 8-GPU H100 server, one GPU of it held by a job that stays; two 4-GPU T4 servers, free. The 8-GPU
    # gang fits only across the two T4 servers. There it would run at t4_speed / 10 of its H100 speed.
    nodes = [
        node("h").gpus(8, "H100").build(),
        node("t1").gpus(4, "T4").build(),
        node("t2").gpus(4, "T4").build(),
    ]
    small = job("small").work(1e6).non_preemptible().build()
    gang = job("gang").replicas(8).work(1e6).submitted(1).build()
    speeds = {("small", "H100"): 10.0, ("small", "T4"): 2.0, ("gang", "H100"): 10.0, ("gang", "T4"): t4_speed}
    snap = snapshot(nodes, now=10, allocations=[alloc("small", "H100", 1, {"h": 1})])
    res = run_round(snap, [small, gang], make_policy(name), FakeOracle(speed=speeds))
    assert placed(res).get("gang") == starts_on
    if starts_on is None:
        assert res.waiting["gang"].resolvable  # it waits for the H100s, not for ever
    # the baselines, which do not know the speeds, start it on the T4s either way
    for baseline in ("ordered", "agnostic"):
        res = run_round(
            snap, [small, gang], make_policy(name, {"heterogeneity": baseline}), FakeOracle(speed=speeds)
        )
        assert placed(res).get("gang") == "T4"
