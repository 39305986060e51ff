"""``scheduler.core.spread``: why a gang a round starts spans several NVLink domains, judged at the
decision with the round's earlier starts taken, in the policy's order."""

from __future__ import annotations

import random

import pytest

from scheduler.core.decisions import Action, ActionKind
from scheduler.core.round import run_round
from scheduler.core.spread import ALTHOUGH, UNLESS_STOPPED, spread_note, spread_notes
from scheduler.core.types import Allocation, ClusterSnapshot, Interconnect, Job, Node
from scheduler.policies import make_policy
from tests.builders import FakeOracle

A100 = tuple(Node(f"a{i}", "A100", 8) for i in range(3))
K80 = tuple(Node(f"k{i}", "K80", 4, interconnect=Interconnect.PCIE) for i in range(2))


def start(job: str, gpu_type: str, **per_node: int) -> Action:
    return Action(ActionKind.START, job, None, Allocation.of(job, gpu_type, 1, per_node))


def snapshot(**running: dict[str, int]) -> ClusterSnapshot:
    allocs = {job: Allocation.of(job, "A100", 1, per_node) for job, per_node in running.items()}
    return ClusterSnapshot(now=0.0, nodes=A100 + K80, allocations=allocs)


def test_a_gang_spread_because_earlier_starts_of_the_round_took_the_domains() -> None:
    # a0 and a2 half taken by a running job; g1 (decided first) took a1, the only whole domain
    snap = snapshot(run={"a0": 4, "a2": 4})
    acts = [start("g1", "A100", a1=8), start("g2", "A100", a0=4, a2=4)]
    notes = spread_notes(snap, ["g1", "g2"], acts)
    assert notes == {
        "g2": "spread over 2 NVLink domains: no A100 NVLink domain had 8 free GPUs at the decision"
    }


def test_the_policy_order_decides_which_start_saw_a_free_domain() -> None:
    snap = snapshot(run={"a0": 4})
    acts = [start("g2", "A100", a0=4, a2=4), start("g1", "A100", a1=8)]
    # decided g1 first: a1 was taken, a2 had 8 free (a miss, named with its free GPUs)
    first = spread_notes(snap, ["g1", "g2"], acts)["g2"]
    assert first == (
        "spread over 2 NVLink domains although 1 A100 NVLink domain had 8 free GPUs at the decision: a2 (8)"
    )
    # decided g2 first (the actions' own order does not matter): both a1 and a2 were whole
    second = spread_notes(snap, ["g2", "g1"], list(reversed(acts)))["g2"]
    assert ALTHOUGH in second and second.endswith("a1 (8), a2 (8)")


def test_gpus_the_round_stops_are_named_apart_and_one_domain_gets_no_note() -> None:
    # the round preempts "old" on a1 at a point of the policy's walk it does not record: a1 was whole at
    # g's decision only if that came first, so it is no placement miss, and the note says so
    snap = snapshot(old={"a1": 8}, run={"a0": 4, "a2": 4})
    preempt = Action(ActionKind.PREEMPT, "old", snap.allocations["old"], None)
    notes = spread_notes(snap, ["old", "g"], [preempt, start("g", "A100", a0=4, a2=4)])
    assert notes["g"] == (
        "spread over 2 NVLink domains: no A100 NVLink domain had 8 free GPUs at the decision"
        f"{UNLESS_STOPPED}: a1 (8)"
    )
    assert ALTHOUGH not in notes["g"]
    assert spread_notes(snap, ["g"], [start("g", "A100", a1=8)]) == {}


def test_a_type_without_a_domain_that_large_says_so() -> None:
    notes = spread_notes(snapshot(), ["k"], [start("k", "K80", k0=4, k1=4)])
    assert notes == {"k": "spread over 2 nodes: no K80 NVLink domain holds 8 GPUs"}


def test_nodes_of_one_nvlink_domain_are_one_domain_and_whole_replicas_count() -> None:
    nodes = {
        n.name: n
        for n in (
            Node("x0", "H100", 4, nvlink_domain="nvl"),
            Node("x1", "H100", 4, nvlink_domain="nvl"),
            Node("y", "H100", 4),
        )
    }
    inside = Allocation.of("g", "H100", 2, {"x0": 2, "x1": 2})
    assert spread_note(inside, nodes, {"x0": 4, "x1": 4, "y": 4}) == ""
    across = Allocation.of("g", "H100", 2, {"x0": 1, "y": 1})
    # 3 free GPUs on each of x0 and x1 hold one 2-GPU replica each: 2 replicas, enough for this gang
    assert spread_note(across, nodes, {"x0": 3, "x1": 3, "y": 2}).endswith(
        "1 H100 NVLink domain had 4 free GPUs at the decision: nvl (4)"
    )
    assert "no H100 NVLink domain had 4 free" in spread_note(across, nodes, {"x0": 1, "x1": 1, "y": 2})


def test_a_real_fifo_round_spreads_only_gangs_that_no_domain_held() -> None:
    def gang(name: str, submitted: float) -> Job:
        return Job(name=name, submit_time=submitted, total_work=100.0, min_replicas=8, max_replicas=8)

    snap = snapshot(run={"a0": 4, "a1": 4})
    jobs = [gang("g1", 1.0), gang("g2", 2.0)]
    result = run_round(snap, jobs, make_policy("fifo"), FakeOracle())
    notes = spread_notes(snap, result.decisions, result.actions)
    starts = {a.job: a.after for a in result.actions if a.kind is ActionKind.START}
    assert starts["g1"] is not None and starts["g1"].nodes == ("a2",) and "g1" not in notes
    assert (
        notes["g2"] == "spread over 2 NVLink domains: no A100 NVLink domain had 8 free GPUs at the decision"
    )


@pytest.mark.parametrize("policy", ["fifo", "srsf", "ftf"])
def test_rounds_of_real_policies_never_spread_a_gang_while_a_domain_of_its_type_was_whole(
    policy: str,
) -> None:
    """Random rounds (running gangs the policy may preempt, a queue of 8 x 1, 1 x 1, 1 x 2 and 2 x 2 jobs):
    the core's placement takes a whole domain when one is free, and the replay agrees with its view."""
    cluster = (
        tuple(Node(f"a{i}", "A100", 8) for i in range(6))
        + tuple(Node(f"v{i}", "V100", 8) for i in range(4))
        + tuple(Node(f"k{i}", "K80", 4, interconnect=Interconnect.PCIE) for i in range(4))
    )
    spread = 0
    for seed in range(40):
        rng = random.Random(seed)
        running: dict[str, Allocation] = {}
        for n in cluster:
            used = min(n.gpus, rng.choice([0, 0, 1, 2, 4, 6, 7, 8]))
            if used:
                running[f"r-{n.name}"] = Allocation.of(f"r-{n.name}", n.gpu_type, 1, {n.name: used})
        snap = ClusterSnapshot(now=100.0, nodes=cluster, allocations=running)
        jobs = [
            Job(
                name=k,
                submit_time=-1.0,
                total_work=rng.choice([50.0, 1000.0]),
                progress=1.0,
                min_replicas=a.total_gpus,
                max_replicas=a.total_gpus,
            )
            for k, a in running.items()
        ]
        for i in range(rng.randint(5, 40)):
            r, g = [(8, 1), (1, 1), (1, 2), (2, 2)][i % 4]
            jobs.append(
                Job(
                    name=f"s-{i:03d}",
                    submit_time=float(i),
                    total_work=100.0,
                    min_replicas=r,
                    max_replicas=r,
                    gpus_per_replica=g,
                )
            )
        result = run_round(snap, jobs, make_policy(policy), FakeOracle())
        notes = spread_notes(snap, result.decisions, result.actions)
        spread += len(notes)
        assert not [n for n in notes.values() if ALTHOUGH in n], seed
    assert spread > 20  # the rounds do spread gangs
