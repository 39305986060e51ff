"""CorrectedOracle.state / restore: what the oracle learnt, written and read back bit for bit."""

from __future__ import annotations

import json

import pytest

from perfmodel.errors import InvalidInputError
from scheduler.core.types import Interconnect, Job, PlacementShape, WorkUnit
from scheduler.oracles.learning import CorrectedOracle

MODELS = [("resnet50", 64), ("vgg16", 32), ("bert-large", 32)]
SHAPES = [
    PlacementShape("V100", 1),
    PlacementShape("V100", 4),
    PlacementShape("K80", 2),
    PlacementShape("V100", 8, 2, 4, Interconnect.NVLINK, 25.0),
]


def _job(name: str, model: str, batch: int) -> Job:
    return Job(
        name=name,
        submit_time=0,
        total_work=1,
        model=model,
        dataset="imagenet",
        batch_size=batch,
        work_unit=WorkUnit.ITERATIONS,
    )


def _taught(n: int) -> CorrectedOracle:
    """``n`` jobs over 3 models and 4 placements, each observed at 0.6-1.5x the prediction; the first
    two thirds end (forgotten), the rest stay live."""
    oracle = CorrectedOracle.load()
    for i in range(n):
        model, batch = MODELS[i % 3]
        job, shape = _job(f"ns/j{i}", model, batch), SHAPES[i % 4]
        cold = oracle.throughput([(job, shape)])[0]
        oracle.observe(job, shape, cold * (0.6 + 0.9 * ((i * 7) % 11) / 10))
        if i < 2 * n // 3:
            oracle.forget(job.name)
    return oracle


def _questions() -> list[tuple[Job, PlacementShape]]:
    # live jobs where they ran, ended ones, new jobs of each model, on every placement
    names = ["ns/j20", "ns/j29", "ns/j3", "new"]
    return [(_job(n, m, b), s) for n in names for m, b in MODELS for s in SHAPES]


def test_a_restored_oracle_answers_bit_for_bit_as_the_one_that_wrote_it() -> None:
    taught = _taught(30)
    q = _questions()
    want = (taught.throughput(q), taught.throughput_interval(q), taught.throughput_held_out(q))
    text = json.dumps(taught.state())  # through JSON, as it is stored
    fresh = CorrectedOracle.load()
    assert fresh.throughput(q) != want[0]
    fresh.restore(json.loads(text))
    assert (fresh.throughput(q), fresh.throughput_interval(q), fresh.throughput_held_out(q)) == want
    assert fresh.corrector.jobs() == 10  # the 10 live jobs' own records (j20..j29)
    # and it learns on from there exactly as the writer does
    job = _job("ns/j25", *MODELS[25 % 3])
    for o in (taught, fresh):
        o.observe(job, SHAPES[1], 123.0)
        o.forget("ns/j29")
    assert fresh.throughput(q) == taught.throughput(q)


def test_a_state_written_before_a_refit_restores_the_pending_refit() -> None:
    taught = _taught(12)
    taught.observe(_job("ns/x", "resnet50", 64), SHAPES[0], 500.0)  # refit pending: nothing asked since
    state = json.loads(json.dumps(taught.state()))
    fresh = CorrectedOracle.load()
    fresh.restore(state)
    q = _questions()
    assert fresh.throughput(q) == taught.throughput(q)


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (lambda s: s.update(model="0" * 64), "offline model"),
        (lambda s: s["corrector"].update(settings=[1.0, 3.0, "split", 32, 4096]), "corrector settings"),
        (lambda s: s["corrector"]["retired"].append(["m", "V100", "x", 0, 0, 1, []]), "not a job record"),
        (lambda s: s["corrector"]["jobs"].append([["a", ["V100", 1]], []]), "does not parse"),
        (lambda s: s["corrector"].pop("derived"), "does not parse"),
        (lambda s: s.update(before=[[["m"], ["V100"], 1.0]]), "before"),
    ],
)
def test_a_state_it_cannot_use_is_refused_with_the_reason_and_changes_nothing(change, why) -> None:  # type: ignore[no-untyped-def]
    taught = _taught(9)
    state = json.loads(json.dumps(taught.state()))
    change(state)
    fresh = CorrectedOracle.load()
    fresh.observe(_job("ns/y", "vgg16", 32), SHAPES[2], 40.0)
    q = _questions()
    want = fresh.throughput(q)
    with pytest.raises(InvalidInputError, match=why):
        fresh.restore(state)
    assert fresh.throughput(q) == want


def test_jobs_ended_since_the_last_refit_restore_bit_for_bit() -> None:
    # ending a job moves its record to the retired ones without a refit: refitting the restored records
    # in their new order moves the last bits of some answers (12 of these 48 by 2e-16), so the fitted
    # levels are restored as they stand
    taught = _taught(60)
    q = _questions()
    taught.throughput(q)
    for i in range(40, 60, 3):
        taught.forget(f"ns/j{i}")
    want = taught.throughput(q)
    fresh = CorrectedOracle.load()
    fresh.restore(json.loads(json.dumps(taught.state())))
    assert fresh.throughput(q) == want
