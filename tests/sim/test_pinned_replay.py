"""A small Philly replay's results, pinned: speed work on the simulator must not move a single decision.

The first 400 jobs of the shipped Philly 10k trace on 64 V100s at load 0.8 (``perfsched simulate
--policy srsf,las,fifo:backfill=true --gpus 64 --load 0.8 --jobs 400``), through ``run_simulations``
as the CLI runs it. Each policy's summary figures are compared exactly (floats by ``repr``), and every
job's start, finish, preemptions, restarts, migrations and GPU-seconds through a SHA-256 of their
``repr``: a change in any one job's timeline changes it. When a change of a policy is meant to change
decisions, re-derive the values with the command above and say so in the commit.
"""

from __future__ import annotations

import hashlib

import pytest

from scheduler.sim.engine import EngineResult
from scheduler.sim.simulations import SimulationOutcome, SimulationRequest, run_simulations

# policy spec -> (avg JCT s, p99 JCT s, makespan s, preemptions, utilisation, rounds, events, job digest)
PINNED: dict[str, tuple[float, float, float, int, float, int, int, str]] = {
    "srsf": (
        17298.26344389617,
        582320.4899999999,
        1817173.3111574873,
        37,
        0.3135176871827773,
        754,
        943,
        "0fcefc9aa7041b2329c6292dffeaced1882efb6b727accce0795c8e864e51c4e",
    ),
    "las": (
        16801.317465739718,
        602806.8620059163,
        1615253.0380728515,
        37,
        0.33732713201804077,
        973,
        1036,
        "7a6128804116f0f6ba728cd6c93f3fa90cf9cff51307b28f8fc81e296ccd3fcf",
    ),
    "fifo:backfill=true": (
        21740.281129667514,
        582320.4899999999,
        1615253.0380728515,
        0,
        0.3358333433455112,
        796,
        948,
        "5afe8da073506814da1fa8e1fe25e5b17be758cb469e38429e8bd9cf542d80f9",
    ),
}


def _digest(result: EngineResult) -> str:
    h = hashlib.sha256()
    for r in result.records:
        h.update(
            repr(
                (r.name, r.first_start, r.finish, r.preemptions, r.restarts, r.migrations, r.gpu_seconds)
            ).encode()
        )
    return h.hexdigest()


@pytest.fixture(scope="module")
def outcome() -> SimulationOutcome:
    return run_simulations(SimulationRequest(policies=tuple(PINNED), gpus=64, load=0.8, max_jobs=400))


@pytest.mark.parametrize("spec", list(PINNED))
def test_a_small_philly_replay_gives_the_pinned_results(outcome: SimulationOutcome, spec: str) -> None:
    rows = {row["policy"]: row for row in outcome.report["results"]}
    runs = dict(outcome.runs)
    row = rows[spec]
    got = (
        row["avg_jct_s"],
        row["p99_jct_s"],
        row["makespan_s"],
        row["preemptions"],
        row["utilization"],
        row["rounds"],
        row["events"],
        _digest(runs[spec]),
    )
    assert got == PINNED[spec]
