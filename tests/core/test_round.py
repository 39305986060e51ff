"""run_round: invariant checks on a policy's decisions and the reasons waiting jobs wait."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

import pytest

from scheduler.core.decisions import ActionKind, Decision
from scheduler.core.errors import ConfigError
from scheduler.core.protocols import ThroughputOracle
from scheduler.core.round import PolicyInvariantError, RoundCosts, run_round
from scheduler.core.types import ClusterSnapshot, Job
from scheduler.policies import make_policy
from tests.builders import FakeOracle, alloc, cluster, job, node, snapshot


class FixedPolicy:
    """Returns the decisions it was built with (to feed run_round bad answers)."""

    name = "fixed"

    def __init__(self, decisions: Mapping[str, Decision]) -> None:
        self.decisions = decisions

    def allocate(
        self, snapshot: ClusterSnapshot, jobs: Sequence[Job], oracle: ThroughputOracle
    ) -> Mapping[str, Decision]:
        return self.decisions


NODES = [node("a").gpus(8, "V100").build(), node("k").gpus(8, "K80").build()]


@pytest.mark.parametrize(
    ("j", "decision", "message"),
    [
        (
            job("j").replicas(2).gpus_per_replica(8).build(),
            alloc("j", "V100", 8, {"a": 2}),
            "over-commits node a",
        ),
        (job("j").replicas(2).gpus_per_replica(2).build(), alloc("j", "V100", 2, {"a": 1}), "outside [2, 2]"),
        (
            job("j").replicas(1, 2).gpus_per_replica(2).build(),
            alloc("j", "V100", 2, {"a": 3}),
            "outside [1, 2]",
        ),
        (job("j").allowed("K80").build(), alloc("j", "V100", 1, {"a": 1}), "not in its allowed types"),
        (job("j").build(), alloc("j", "V100", 1, {"k": 1}), "node k has K80"),
        (job("j").build(), alloc("j", "V100", 1, {"zz": 1}), "unknown node"),
        (job("j").gpus_per_replica(2).build(), alloc("j", "V100", 1, {"a": 2}), "GPUs per replica"),
    ],
)
def test_invariant_violations_name_the_policy(j: Job, decision: object, message: str) -> None:
    policy = FixedPolicy({"j": Decision("j", decision)})  # type: ignore[arg-type]
    with pytest.raises(PolicyInvariantError, match=re.escape(message)) as err:
        run_round(snapshot(NODES), [j], policy, FakeOracle())
    assert "'fixed'" in str(err.value)


def test_missing_decision_is_a_violation() -> None:
    with pytest.raises(PolicyInvariantError, match="no decision"):
        run_round(snapshot(NODES), [job("j").build()], FixedPolicy({}), FakeOracle())


def test_waiting_reasons() -> None:
    nodes = cluster(("V100", 8, 8))  # 64 V100
    jobs = [
        job("big").replicas(16).gpus_per_replica(8).build(),  # 128 GPUs: never
        job("k80").allowed("K80").build(),  # type not in cluster: never
        job("run").replicas(7).gpus_per_replica(8).submitted(1).build(),  # takes 56
        job("w1").replicas(2).gpus_per_replica(8).submitted(2).build(),  # 16 > 8 free
        job("w2").replicas(1).gpus_per_replica(8).submitted(3).build(),  # would fit, strict FIFO blocks it
    ]
    res = run_round(snapshot(nodes), jobs, make_policy("fifo"), FakeOracle())
    w = res.waiting
    assert not w["big"].resolvable and "asks 128 GPUs, cluster has 64" in w["big"].reason
    assert not w["k80"].resolvable and "allows GPU types K80" in w["k80"].reason
    assert w["w1"].resolvable and w["w1"].reason.startswith("waiting for 16 GPUs of type V100: 8 free")
    assert "1 job ahead in the queue" in w["w1"].reason
    assert "blocked behind job w1" in w["w2"].reason
    assert [a.job for a in res.actions if a.kind is ActionKind.START] == ["run"]


def test_costs_are_validated() -> None:
    with pytest.raises(ConfigError, match="restart_cost_s"):
        RoundCosts(restart_cost_s=-1)


def test_effective_decision_reflects_forced_keep() -> None:
    p = job("p").replicas(1).gpus_per_replica(8).non_preemptible().build()
    snap = snapshot(NODES, allocations=[alloc("p", "V100", 8, {"a": 1})])
    res = run_round(snap, [p], FixedPolicy({"p": Decision("p", None)}), FakeOracle())
    assert res.decisions["p"].allocation == alloc("p", "V100", 8, {"a": 1})
    assert "non-preemptible" in res.decisions["p"].reason


@pytest.mark.parametrize("policy", ["fifo", "las", "srsf"])
def test_explain_false_changes_nothing_but_the_wait_reasons(policy: str) -> None:
    nodes = cluster(("V100", 8, 2))  # 8 nodes x 2 V100 = 16 GPUs
    jobs = [job(f"j{i}").replicas(1 + i % 3).gpus_per_replica(2).submitted(i).build() for i in range(8)]
    snap = snapshot(nodes, allocations=[alloc("j0", "V100", 2, {"v100-000": 1})])
    full = run_round(snap, jobs, make_policy(policy), FakeOracle())
    quiet = run_round(snap, jobs, make_policy(policy), FakeOracle(), explain=False)
    assert quiet.decisions == full.decisions and quiet.actions == full.actions
    assert full.waiting and not quiet.waiting  # 8 jobs x 2-6 GPUs on 16 GPUs: some wait


@pytest.mark.parametrize(
    ("spec", "running", "why"),
    [
        # the user narrowed the allowed GPU types to K80 while the job ran on V100
        (
            job("j").allowed("K80"),
            alloc("j", "V100", 2, {"a": 1}),
            "GPU type V100 is no longer in its allowed",
        ),
        # an elastic job scaled from 4 to at most 2 replicas while 4 ran
        (job("j").replicas(1, 2), alloc("j", "V100", 2, {"a": 4}), "4 replicas run, its spec now asks 1-2"),
        # a rigid job whose replica count changed from 2 to 1
        (job("j").replicas(1), alloc("j", "V100", 2, {"a": 2}), "2 replicas run, its spec now asks 1-1"),
    ],
)
@pytest.mark.parametrize("preemptible", [True, False])
@pytest.mark.parametrize("policy", ["fixed", "fifo", "las", "deadline"])
def test_a_running_gang_its_spec_no_longer_allows_is_stopped_not_kept(
    spec: object, running: object, why: str, preemptible: bool, policy: str
) -> None:
    """A policy that keeps what runs (a non-preemptible job, ``fixed`` returning the current allocation)
    on an allocation the user's change no longer allows has it stopped, instead of breaking an invariant
    that refuses every job's round; a policy that moves it may (RESIZE to the allowed shape)."""
    b = spec.gpus_per_replica(2).model("resnet50").progress(10)  # type: ignore[attr-defined]
    j = b.build() if preemptible else b.non_preemptible().build()
    cur = running
    pol = FixedPolicy({"j": Decision("j", cur)}) if policy == "fixed" else make_policy(policy)  # type: ignore[arg-type]
    other = job("other").build()  # a waiting job the round must still start
    if policy == "fixed":
        pol.decisions = {
            "j": Decision("j", cur),
            "other": Decision("other", alloc("other", "K80", 1, {"k": 1})),
        }  # type: ignore[union-attr, arg-type]
    result = run_round(snapshot(NODES, now=1000, allocations=[cur]), [j, other], pol, FakeOracle())  # type: ignore[list-item]
    act = {a.job: a for a in result.actions}
    assert act["j"].kind in (ActionKind.PREEMPT, ActionKind.RESIZE), act["j"]
    if act["j"].kind is ActionKind.PREEMPT:
        assert why in result.decisions["j"].reason
    else:
        assert act["j"].after is not None and act["j"].after != cur
    assert act["other"].kind is ActionKind.START
