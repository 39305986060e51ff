"""What each policy does that a user would notice, on small hand-made clusters."""

from __future__ import annotations

import numpy as np
import pytest

from scheduler.core.decisions import ActionKind
from scheduler.core.errors import ConfigError
from scheduler.core.round import run_round
from scheduler.policies import make_policy
from scheduler.policies.hetero import solve_fractional
from tests.builders import FakeOracle, alloc, cluster, job, node, snapshot

HOUR = 3600.0


def started(result) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return {a.job: a.after.gpu_type for a in result.actions if a.kind is ActionKind.START}


# ------------------------------------------------------------------------------------ registry
def test_unknown_policy_lists_known_ones() -> None:
    with pytest.raises(ConfigError, match=r"unknown policy 'nope'; known policies: deadline, elastic, fifo"):
        make_policy("nope")


@pytest.mark.parametrize(
    ("name", "config", "field"),
    [
        ("fifo", {"backfil": True}, "backfil"),
        ("fifo", {"backfill": "yes"}, "backfill"),
        ("las", {"thresholds_gpu_hours": [10, 1]}, "thresholds_gpu_hours"),
        ("las", {"thresholds_gpu_hours": [-1]}, "thresholds_gpu_hours"),
        ("srsf", {"preempt_margin_gpu_s": -5}, "preempt_margin_gpu_s"),
        ("hetero", {"objective": "fastest"}, "objective"),
        ("elastic", {"horizon_s": 0}, "horizon_s"),
        ("deadline", {"rejected": "ignore"}, "rejected"),
        ("deadline", {"slack": 0.5}, "slack"),
    ],
)
def test_bad_config_names_the_field(name: str, config: dict[str, object], field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        make_policy(name, config)


# ------------------------------------------------------------------------------------ fifo
def test_fifo_strict_blocks_and_backfill_fills() -> None:
    nodes = [node("a").gpus(8).build()]
    jobs = [
        job("run").gpus_per_replica(6).submitted(0).build(),
        job("big").gpus_per_replica(4).submitted(1).build(),  # 4 > 2 free: waits
        job("small").gpus_per_replica(2).submitted(2).build(),  # fits in the 2 left
    ]
    strict = run_round(snapshot(nodes), jobs, make_policy("fifo"), FakeOracle())
    assert set(started(strict)) == {"run"}
    backfill = run_round(snapshot(nodes), jobs, make_policy("fifo", {"backfill": True}), FakeOracle())
    assert set(started(backfill)) == {"run", "small"}


# ------------------------------------------------------------------------------------ las
def test_las_demotes_a_job_past_one_gpu_hour() -> None:
    nodes = [node("a").gpus(4).build()]
    # old has 4 GPUs x 0.5 h = 2 GPU-hours > 1 -> queue 1; new has 0 -> queue 0 and preempts it
    old = job("old").gpus_per_replica(4).submitted(0).attained(2 * HOUR).build()
    new = job("new").gpus_per_replica(4).submitted(100).build()
    snap = snapshot(nodes, now=1800, allocations=[alloc("old", "V100", 4, {"a": 1})])
    res = run_round(snap, [old, new], make_policy("las"), FakeOracle())
    kinds = {a.job: a.kind for a in res.actions}
    assert kinds == {"old": ActionKind.PREEMPT, "new": ActionKind.START}
    assert "LAS queue 1" in res.waiting["old"].reason
    # below the threshold (0.9 GPU-hours) both are in queue 0: FIFO, no preemption
    young = job("old").gpus_per_replica(4).submitted(0).attained(0.9 * HOUR).build()
    res = run_round(snap, [young, new], make_policy("las"), FakeOracle())
    assert {a.job: a.kind for a in res.actions} == {"old": ActionKind.KEEP}
    # thresholds are configurable: with [5] GPU-hours, 2 GPU-hours is still queue 0
    res = run_round(snap, [old, new], make_policy("las", {"thresholds_gpu_hours": [5]}), FakeOracle())
    assert {a.job: a.kind for a in res.actions} == {"old": ActionKind.KEEP}


# ------------------------------------------------------------------------------------ srsf
def test_srsf_runs_the_short_job_first() -> None:
    nodes = [node("a").gpus(4).build()]
    # V100 speed 3/GPU: long = 4 GPUs x 36000/12 s = 12000 GPU-s; short = 4 x 1200/12 = 400 GPU-s
    long_job = job("long").gpus_per_replica(4).work(36_000).submitted(0).build()
    short = job("short").gpus_per_replica(4).work(1_200).submitted(10).build()
    res = run_round(snapshot(nodes), [long_job, short], make_policy("srsf"), FakeOracle())
    assert set(started(res)) == {"short"}
    # and a running long job is preempted for it
    snap = snapshot(nodes, allocations=[alloc("long", "V100", 4, {"a": 1})])
    res = run_round(snap, [long_job, short], make_policy("srsf"), FakeOracle())
    assert {a.job: a.kind for a in res.actions} == {"long": ActionKind.PREEMPT, "short": ActionKind.START}


def test_srsf_uses_the_fastest_type_and_one_oracle_call() -> None:
    nodes = [node("k").gpus(4, "K80").build(), node("v").gpus(4, "V100").build()]
    oracle = FakeOracle()
    res = run_round(snapshot(nodes), [job("j").gpus_per_replica(4).build()], make_policy("srsf"), oracle)
    assert started(res) == {"j": "V100"}  # V100 3/GPU beats K80 1/GPU
    assert oracle.calls == 1


# ------------------------------------------------------------------------------------ ftf
def test_ftf_serves_the_most_unfairly_treated_job() -> None:
    nodes = [node("a").gpus(4).build()]
    # both ask 4 V100 (12 units/s). waited: submitted at 0, 3600 units: T_iso = 300 s,
    # T_shared = 1000 + 300 -> rho 4.3.  fresh: submitted at 900, 36000 units: T_iso 3000,
    # T_shared = 100 + 3000 -> rho 1.03.  The waited job goes first although it arrived first anyway
    # and is shorter; swap arrival to show rho, not FIFO, decides.
    waited = job("waited").gpus_per_replica(4).work(3_600).submitted(0).build()
    fresh = job("fresh").gpus_per_replica(4).work(36_000).submitted(900).build()
    res = run_round(snapshot(nodes, now=1000), [fresh, waited], make_policy("ftf"), FakeOracle())
    assert set(started(res)) == {"waited"}
    assert "rho" in res.waiting["fresh"].reason


# ------------------------------------------------------------------------------------ hetero
def test_hetero_puts_the_largest_speedup_on_v100() -> None:
    nodes = [node("v").gpus(1, "V100").build(), node("k").gpus(1, "K80").build()]
    # V100/K80 speed-up: cnn 10/1 = 10x, rnn 2/1 = 2x -> cnn on the V100, rnn on the K80
    speeds = {("cnn", "V100"): 10.0, ("cnn", "K80"): 1.0, ("rnn", "V100"): 2.0, ("rnn", "K80"): 1.0}
    jobs = [job("rnn").submitted(0).build(), job("cnn").submitted(1).build()]
    res = run_round(snapshot(nodes, now=10), jobs, make_policy("hetero"), FakeOracle(speed=speeds))
    assert started(res) == {"cnn": "V100", "rnn": "K80"}
    res = run_round(
        snapshot(nodes, now=10),
        jobs,
        make_policy("hetero", {"objective": "max_total_throughput"}),
        FakeOracle(speed=speeds),
    )
    assert started(res) == {"cnn": "V100", "rnn": "K80"}


def test_hetero_lp_max_min_fairness() -> None:
    # two jobs, one GPU of one type: max-min gives each half the time
    share = solve_fractional(np.array([[1.0], [1.0]]), np.array([1.0, 1.0]), np.array([1.0]))
    assert np.allclose(share, [[0.5], [0.5]], atol=1e-6)
    # max total throughput with a job that is 3x as fast relative... both normalised to 1: any split, sum 1
    share = solve_fractional(
        np.array([[1.0], [1.0]]), np.array([1.0, 1.0]), np.array([1.0]), "max_total_throughput"
    )
    assert share.sum() == pytest.approx(1.0)


# ------------------------------------------------------------------------------------ elastic
def test_elastic_shares_gpus_by_marginal_gain() -> None:
    nodes = [node("a").gpus(8).build()]
    # scaling 0.5: throughput ~ sqrt(GPUs); two elastic jobs 1..8 replicas share 8 GPUs 4/4
    jobs = [job("x").replicas(1, 8).build(), job("y").replicas(1, 8).submitted(1).build()]
    res = run_round(snapshot(nodes), jobs, make_policy("elastic"), FakeOracle(scaling=0.5))
    got = {a.job: a.after.replicas for a in res.actions if a.after}
    assert got == {"x": 4, "y": 4}


def test_elastic_resizes_only_when_the_gain_beats_the_restart_cost() -> None:
    nodes = [node("a").gpus(8).build()]
    j = job("x").replicas(1, 8).build()
    snap = snapshot(nodes, allocations=[alloc("x", "V100", 1, {"a": 7})])
    # 7 -> 8 replicas, linear scaling: gain 1/7 of throughput x 3600 s horizon vs 7/7 x restart cost
    cheap = make_policy("elastic", {"restart_cost_s": 60})  # 514 > 60: grow
    res = run_round(snap, [j], cheap, FakeOracle())
    assert [(a.kind, a.after.replicas if a.after else 0) for a in res.actions] == [(ActionKind.RESIZE, 8)]
    dear = make_policy("elastic", {"restart_cost_s": 3600})  # 514 < 3600: keep
    res = run_round(snap, [j], dear, FakeOracle())
    assert [a.kind for a in res.actions] == [ActionKind.KEEP]


def test_elastic_shrinks_a_big_job_for_a_waiting_one_never_below_min() -> None:
    nodes = [node("a").gpus(8).build()]
    big = job("big").replicas(2, 8).build()
    new = job("new").replicas(1, 8).submitted(5).build()
    snap = snapshot(nodes, allocations=[alloc("big", "V100", 1, {"a": 8})])
    res = run_round(snap, [big, new], make_policy("elastic"), FakeOracle(scaling=0.5))
    after = {a.job: a.after.replicas for a in res.actions if a.after}
    assert after["new"] >= 1 and 2 <= after["big"] < 8


# ------------------------------------------------------------------------------------ deadline
def test_deadline_admits_feasible_and_rejects_infeasible() -> None:
    nodes = [node("a").gpus(4).build()]
    # V100 3/GPU. ok: 6000 units by t=1000 -> needs 6 units/s -> 2 GPUs (2 x 3 = 6, 1000 s).
    # late: 12000 units by t=500 -> 24 units/s -> 8 GPUs > 4 in the cluster: rejected.
    ok = job("ok").replicas(1, 4).work(6_000).deadline(1000).build()
    late = job("late").replicas(1, 4).work(12_000).deadline(500).submitted(1).build()
    res = run_round(snapshot(nodes), [ok, late], make_policy("deadline", {"rejected": "drop"}), FakeOracle())
    assert "ok" in started(res)
    assert "late" not in started(res)
    assert "rejected: deadline cannot be met even with the whole cluster" in res.waiting["late"].reason
    assert not res.waiting["late"].resolvable
    # admitted with the fewest GPUs, the rest shared: with best effort, late takes the other 2 GPUs
    res = run_round(snapshot(nodes), [ok, late], make_policy("deadline"), FakeOracle())
    reps = {a.job: a.after.replicas for a in res.actions if a.after}
    assert reps["ok"] >= 2 and reps.get("late", 0) >= 1 and reps["ok"] + reps.get("late", 0) <= 4


def test_deadline_rejects_when_admitted_jobs_hold_the_gpus() -> None:
    nodes = [node("a").gpus(4).build()]
    # first needs all 4 GPUs (12000 by 1000 -> 12 units/s = 4 x 3); second arrives later, needs 2
    first = job("first").replicas(1, 4).work(12_000).deadline(1000).build()
    second = job("second").replicas(1, 4).work(6_000).deadline(1000).submitted(1).build()
    res = run_round(
        snapshot(nodes), [first, second], make_policy("deadline", {"rejected": "drop"}), FakeOracle()
    )
    assert started(res) == {"first": "V100"}
    assert "given the jobs admitted before it" in res.waiting["second"].reason


# ------------------------------------------------------------------------------------ types
@pytest.mark.parametrize("name", ["fifo", "las", "srsf", "ftf", "hetero", "elastic", "deadline"])
def test_allowed_types_and_rigid_size(name: str) -> None:
    nodes = cluster(("V100", 2, 8), ("K80", 2, 8))
    j = job("j").replicas(3).gpus_per_replica(2).allowed("K80").build()
    res = run_round(snapshot(nodes), [j], make_policy(name), FakeOracle())
    (a,) = res.actions
    assert a.after is not None and a.after.gpu_type == "K80" and a.after.replicas == 3


@pytest.mark.parametrize("name", ["srsf", "ftf", "hetero", "elastic", "deadline"])
def test_one_batched_oracle_call_per_round(name: str) -> None:
    nodes = cluster(("V100", 2, 8), ("K80", 2, 8))
    jobs = [job(f"j{i}").replicas(1, 2).gpus_per_replica(2).submitted(i).build() for i in range(6)]
    snap = snapshot(nodes, now=100, allocations=[alloc("j0", "V100", 2, {"v100-000": 2})])
    oracle = FakeOracle()
    run_round(snap, jobs, make_policy(name), oracle)
    assert oracle.calls == 1


def test_hetero_lp_classes_match_the_per_job_lp() -> None:
    # 3 identical jobs + 1 different, 2 GPUs of one type: max-min gives every job 2/4 = 0.5
    x = np.array([[1.0], [1.0], [1.0], [1.0]])
    share = solve_fractional(x, np.array([1.0, 1.0, 1.0, 1.0]), np.array([2.0]))
    assert np.allclose(share, 0.5, atol=1e-6)
    # two types; job a runs 4x faster on V100 (norm 1 vs 0.25), job b equally (1, 1); one GPU each.
    # max-min: a on V100 full time (1.0), b on K80 full time (1.0)
    x = np.array([[1.0, 0.25], [1.0, 1.0]])
    share = solve_fractional(x, np.array([1.0, 1.0]), np.array([1.0, 1.0]))
    assert np.allclose(share, [[1.0, 0.0], [0.0, 1.0]], atol=1e-6)


def test_las_promote_knob_rescues_a_starved_job() -> None:
    nodes = [node("a").gpus(4).build()]
    # starved: 2 GPU-hours on 4 GPUs = ran 1800 s, then waited 10000 - 0 - 1800 = 8200 s > 2 x 1800
    starved = job("starved").gpus_per_replica(4).submitted(0).attained(2 * HOUR).build()
    # runner: queue 1 too (1.5 GPU-hours), running, arrived earlier than nothing: it keeps the GPUs
    runner = job("runner").gpus_per_replica(4).submitted(5).attained(1.5 * HOUR).build()
    snap = snapshot(nodes, now=10_000, allocations=[alloc("runner", "V100", 4, {"a": 1})])
    res = run_round(snap, [starved, runner], make_policy("las"), FakeOracle())
    # without the knob both are in queue 1: FIFO would pick starved (earlier) but no preemption within a queue
    assert {a.job: a.kind for a in res.actions} == {"runner": ActionKind.KEEP}
    res = run_round(snap, [starved, runner], make_policy("las", {"promote_knob": 2.0}), FakeOracle())
    assert {a.job: a.kind for a in res.actions} == {"runner": ActionKind.PREEMPT, "starved": ActionKind.START}


@pytest.mark.parametrize("name", ["fifo", "las", "srsf", "ftf", "hetero", "elastic", "deadline"])
def test_elastic_job_too_big_for_a_type_still_runs_there_at_a_smaller_size(name: str) -> None:
    # one V100 GPU only; the job may use 1..3 replicas: it runs on the V100 with 1
    nodes = [node("v").gpus(1, "V100").build()]
    j = job("j").replicas(1, 3).build()
    res = run_round(snapshot(nodes), [j], make_policy(name), FakeOracle())
    assert [(a.kind, a.after.replicas if a.after else 0) for a in res.actions] == [(ActionKind.START, 1)]
