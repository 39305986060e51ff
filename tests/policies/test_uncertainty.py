"""Decisions that know what they don't know: the measured spread of the oracle (``Uncertainty``), the
oracle's own interval (``IntervalOracle``), and where an aware policy then asks as ``ordered`` would."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest

from scheduler.core.round import run_round
from scheduler.core.types import Job, PlacementShape
from scheduler.policies import make_policy
from scheduler.policies.type_planner import Uncertainty, calibrate
from tests.builders import FakeOracle, alloc, cluster, job, snapshot, with_

LOG2 = math.log(2.0)

SPREADS = [
    # (measured (observed, predicted, spans nodes), factor on one node, factor across nodes)
    ([], 1.0, 1.0),  # nothing measured: exact
    ([(1.0, 1.0, False)], 1.0, 1.0),  # measured as predicted
    # one job on one node measured at half its prediction: |log 0.5| -> 2x; a gang is never taken as
    # better predicted than a job on one node, so across nodes 2x too
    ([(0.5, 1.0, False)], 2.0, 2.0),
    # ten gangs across nodes, nine 1.25x off and one 35x: the 0.9 quantile of ten sorted errors is the
    # tenth (index int(0.9 * 10) = 9): 35x across nodes; one node knows nothing of it (1x)
    ([(1.25, 1.0, True)] * 9 + [(1.0, 35.0, True)], 1.0, 35.0),
    # a non-positive measurement or prediction says nothing
    ([(0.0, 1.0, False), (1.0, 0.0, True)], 1.0, 1.0),
]  # fmt: skip


@pytest.mark.parametrize(("measured", "single", "multi"), SPREADS)
def test_the_measured_spread_per_class(
    measured: list[tuple[float, float, bool]], single: float, multi: float
) -> None:
    u = calibrate(measured)
    assert u.factor(False) == pytest.approx(single)
    assert u.factor(True) == pytest.approx(multi)


def test_a_jobs_own_error_is_left_out_of_its_own_factor() -> None:
    # two jobs on one node, 2x and 4x off: for the 4x job's own row only the 2x remains (and vice versa)
    u = Uncertainty(single=tuple(sorted([LOG2, 2 * LOG2])))
    assert u.factor(False) == pytest.approx(4.0)  # index int(0.9 * 2) = 1: the larger
    assert u.factor(False, exclude=(False, 2 * LOG2)) == pytest.approx(2.0)
    assert u.factor(False, exclude=(False, LOG2)) == pytest.approx(4.0)
    # a job measured across nodes is left out of the multi-node errors only
    assert u.factor(False, exclude=(True, 2 * LOG2)) == pytest.approx(4.0)


@dataclass
class IntervalFake(FakeOracle):
    """``FakeOracle`` with an interval of ``width`` either side of every answer (``IntervalOracle``)."""

    width: float = 1.0
    interval_calls: int = 0
    asked: list[str] = field(default_factory=list)

    def throughput_interval(self, queries: Sequence[tuple[Job, PlacementShape]]) -> list[tuple[float, float]]:
        self.interval_calls += 1
        return [(x / self.width, x * self.width) for x in self.throughput(queries)]


def placed(result) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return {a.job: a.after.gpu_type for a in result.actions if a.after is not None}


# one V100 and one P100 GPU. "a" is 1.1x faster on V100 than on P100, "b" 3x. Exact answers: the V100
# goes to "b" (a on P100 + b on V100 = 1 + 3 = 4 units/s beats a on V100 + b on P100 = 1.1 + 1 = 2.1)
NODES = cluster(("V100", 1, 1), ("P100", 1, 1))
SPEEDS = {("a", "P100"): 1.0, ("a", "V100"): 1.1, ("b", "P100"): 1.0, ("b", "V100"): 3.0}
CHOICES = [
    # (the oracle's interval factor, placements)
    (1.0, {"a": "P100", "b": "V100"}),  # exact: comparative advantage decides
    # each answer within 1.05x: every ratio between types known within 1.05^2 = 1.1025 <= 1.25: still
    (1.05, {"a": "P100", "b": "V100"}),
    # within 1.5x: a's 1.1x and b's 3x may both be anything from /2.25 to x2.25; as ``ordered`` would,
    # both ask for the V100 first (newest), and the first in the policy's order ("a") gets it
    (1.5, {"a": "V100", "b": "P100"}),
]  # fmt: skip


@pytest.mark.parametrize(("width", "expected"), CHOICES)
@pytest.mark.parametrize("name", ["fifo", "las", "srsf", "ftf"])
def test_an_advantage_inside_the_interval_is_chosen_as_ordered_would(
    name: str, width: float, expected: dict[str, str]
) -> None:
    jobs = [job("a").work(10).submitted(0).build(), job("b").work(30).submitted(1).build()]
    oracle = IntervalFake(speed=SPEEDS, width=width)
    res = run_round(snapshot(NODES, now=10), jobs, make_policy(name), oracle)
    assert placed(res) == expected
    assert oracle.interval_calls >= 1


def test_the_measured_spread_makes_waiting_jobs_ask_as_ordered_would() -> None:
    # the same two waiting jobs under exact answers, but a running job ("r", on a third node's P100)
    # measured at half its prediction: the oracle is 2x off on one node this round, so the waiting
    # jobs' advantages are inside that and both ask for the V100 first; "a" (earlier) gets it
    nodes = (*NODES, *cluster(("K80", 1, 1)))
    running = with_(job("r").work(1_000).progress(10, checkpoint=10).build(), observed_throughput=0.5)
    speeds = {**SPEEDS, ("r", "K80"): 1.0, ("r", "V100"): 0.0, ("r", "P100"): 0.0}
    snap = snapshot(nodes, now=10, allocations=[alloc("r", "K80", 1, {"k80-000": 1})])
    jobs = [running, job("a").work(10).submitted(0).build(), job("b").work(30).submitted(1).build()]
    res = run_round(snap, jobs, make_policy("fifo"), FakeOracle(speed=speeds))
    assert placed(res) == {"r": "K80", "a": "V100", "b": "P100"}
    # measured as predicted: comparative advantage again
    exact = [with_(running, observed_throughput=1.0), *jobs[1:]]
    res = run_round(snap, exact, make_policy("fifo"), FakeOracle(speed=speeds))
    assert placed(res) == {"r": "K80", "a": "P100", "b": "V100"}
