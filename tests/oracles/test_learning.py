"""CorrectedOracle: the shipped predictor corrected online, in the core's work units (operator and sim)."""

from __future__ import annotations

import logging

import pytest

from scheduler.core.types import Job, PlacementShape, WorkUnit
from scheduler.oracles.learning import CorrectedOracle, ThroughputLearner
from scheduler.oracles.predictor import PredictorOracle, hardware_features, job_features


def _job(name: str, model: str = "resnet50", batch: int = 64, unit: WorkUnit = WorkUnit.ITERATIONS) -> Job:
    return Job(
        name=name,
        submit_time=0,
        total_work=1,
        model=model,
        dataset="imagenet",
        batch_size=batch,
        work_unit=unit,
    )


V100, K80 = PlacementShape("V100", 1), PlacementShape("K80", 1)


def test_the_corrected_oracle_gives_the_predictors_interval_in_the_jobs_units() -> None:
    oracle = CorrectedOracle.load()
    its = _job("a")
    samples = _job("b", unit=WorkUnit.SAMPLES)
    bad = Job(name="x", submit_time=0, total_work=1)  # no model, no batch size: no interval
    point = oracle.throughput([(its, V100)])[0]
    (lo, hi), (lo_s, hi_s), none = oracle.throughput_interval([(its, V100), (samples, V100), (bad, V100)])
    assert lo < point < hi
    assert (lo_s, hi_s) == pytest.approx((lo * 64, hi * 64))
    assert none == (0.0, 0.0)


def test_cold_it_answers_as_the_plain_predictor_oracle() -> None:
    cold, plain = CorrectedOracle.load(), PredictorOracle.load()
    queries = [(_job("a"), V100), (_job("b", "vgg16", 32), K80), (_job("c", unit=WorkUnit.SAMPLES), V100)]
    assert cold.throughput(queries) == pytest.approx(plain.throughput(queries), rel=1e-9)
    got = [b for pair in cold.throughput_interval(queries) for b in pair]
    assert got == pytest.approx([b for pair in plain.throughput_interval(queries) for b in pair], rel=1e-9)


def test_an_observation_moves_the_job_there_and_its_model_on_that_type_only() -> None:
    oracle = CorrectedOracle.load()
    a, twin, other = _job("a"), _job("a2"), _job("v", "vgg16", 32)
    before = oracle.throughput([(a, V100), (twin, PlacementShape("V100", 2)), (a, K80), (other, K80)])
    oracle.observe(a, V100, 2.0 * before[0])  # twice as fast as predicted
    after = oracle.throughput([(a, V100), (twin, PlacementShape("V100", 2)), (a, K80), (other, K80)])
    assert after[0] == pytest.approx(2.0 * before[0], rel=0.25)  # the job itself, where it ran
    assert after[1] > 1.3 * before[1]  # the same model on more GPUs of that type (shared levels)
    assert after[2:] == pytest.approx(before[2:], rel=1e-9)  # other types: untouched
    lo, hi = oracle.throughput_interval([(a, V100)])[0]
    lo0, hi0 = CorrectedOracle.load().throughput_interval([(a, V100)])[0]
    assert hi / lo < hi0 / lo0  # the observed row's interval narrows


def test_answers_kept_between_observations_are_the_correctors_own() -> None:
    # the oracle keeps each row's answer until the next observation: asking again, in another batch or
    # after an observation, gives what the corrector says now (a stale row would keep the cold value)
    oracle = CorrectedOracle.load()
    a, b = _job("a"), _job("b", "vgg16", 32)
    cold = oracle.throughput([(a, V100), (b, V100)])
    oracle.observe(b, PlacementShape("V100", 4), 3.0 * oracle.throughput([(b, PlacementShape("V100", 4))])[0])
    got = oracle.throughput([(b, V100), (a, V100)])
    preds = oracle.corrector.predict([(job_features(j), hardware_features(V100)) for j in (b, a)])
    assert got == pytest.approx(list(preds.iters_per_s), rel=1e-12)
    # the observed model moves most; the GPU type's shared level moves the other model there too
    assert got[0] / cold[1] > got[1] / cold[0] > 1.05
    lo, hi = oracle.throughput_interval([(b, V100)])[0]
    assert (lo, hi) == pytest.approx((preds.iters_low[0], preds.iters_high[0]), rel=1e-12)


def test_a_samples_job_is_observed_and_answered_in_samples() -> None:
    oracle = CorrectedOracle.load()
    samples = _job("s", unit=WorkUnit.SAMPLES)
    ips = oracle.throughput([(_job("i"), V100)])[0]  # iterations/s of the same configuration
    oracle.observe(samples, V100, 1.5 * ips * 64)  # 1.5x the prediction, in samples/s
    (got_samples,) = oracle.throughput([(samples, V100)])
    assert got_samples == pytest.approx(1.5 * ips * 64, rel=0.1)  # its own level, in samples/s


@pytest.mark.parametrize("value", [0.0, -1.0, float("nan"), float("inf")])
def test_a_bad_observation_is_ignored(value: float) -> None:
    oracle = CorrectedOracle.load()
    before = oracle.throughput([(_job("a"), V100)])
    oracle.observe(_job("a"), V100, value)
    assert oracle.corrector.observations() == 0
    assert oracle.throughput([(_job("a"), V100)]) == before


def test_a_row_it_cannot_answer_is_0_warned_once_and_blinds_no_other(
    caplog: pytest.LogCaptureFixture,
) -> None:
    oracle = CorrectedOracle.load()
    bad = Job(name="x", submit_time=0, total_work=1)  # no model, no batch size
    with caplog.at_level(logging.WARNING, logger="scheduler.oracles.learning"):
        first = oracle.throughput([(bad, V100), (_job("a"), V100)])
        again = oracle.throughput([(bad, K80)])
    assert first[0] == 0.0 < first[1] and again == [0.0]
    warned = [r for r in caplog.records if r.getMessage() == "predictor cannot answer for job"]
    assert len(warned) == 1 and getattr(warned[0], "job", None) == "x"
    oracle.observe(bad, V100, 5.0)  # cannot be observed either: ignored, no exception
    assert oracle.corrector.observations() == 0


def test_it_is_a_throughput_learner() -> None:
    learner: ThroughputLearner = CorrectedOracle.load()
    assert callable(learner.observe) and callable(learner.forget)


def test_two_jobs_of_one_configuration_have_a_job_level_each() -> None:
    # "a" and "b" run the same model, batch and placement; "a" is measured at 2x the prediction (its
    # data pipeline, say). "a" is answered near its measurement; "b" moves only by the shared levels
    # (the model on that GPU type), less than "a", until it is measured itself; a third job's answer is
    # "b"'s (keyed by configuration, "b" would get "a"'s own level)
    oracle = CorrectedOracle.load()
    a, b, c = _job("a"), _job("b"), _job("c")
    (cold,) = oracle.throughput([(a, V100)])
    oracle.observe(a, V100, 2.0 * cold)
    got_a, got_b, got_c = oracle.throughput([(a, V100), (b, V100), (c, V100)])
    assert got_a == pytest.approx(2.0 * cold, rel=0.05)
    assert cold < got_b < got_a - 0.05 * cold
    assert got_c == got_b
    oracle.observe(b, V100, 0.9 * cold)  # "b" runs slower than predicted: its own answer follows it
    got_a2, got_b2 = oracle.throughput([(a, V100), (b, V100)])
    assert got_b2 < got_b and got_a2 > got_b2 + 0.5 * cold


def test_the_shared_answer_leaves_out_the_jobs_own_record() -> None:
    # "a" measured at 2x: its own answer follows it, its shared answer is what an unmeasured job of the
    # same configuration gets (the shared levels only), the same for every job of that configuration
    oracle = CorrectedOracle.load()
    a, b = _job("a"), _job("b")
    (cold,) = oracle.throughput([(a, V100)])
    oracle.observe(a, V100, 2.0 * cold)
    own_a, own_b = oracle.throughput([(a, V100), (b, V100)])
    shared_a, shared_b = oracle.throughput_shared([(a, V100), (b, V100)])
    assert shared_a == shared_b == own_b
    assert own_a > shared_a + 0.05 * cold
    assert oracle.throughput_shared([]) == []


def test_finished_jobs_leave_no_state_of_their_own_and_the_type_keeps_what_it_learnt() -> None:
    # 12 jobs of three models on V100 (1, 2 and 4 GPUs) and K80, each measured at 1.3-2.0x the
    # prediction, then all end: no per-job state is left, and a new job of each model is answered as
    # before they ended (what the GPU types and models learnt stays)
    oracle = CorrectedOracle.load()
    models = [("resnet50", 64), ("vgg16", 32), ("transformer", 128)]
    shapes = [V100, PlacementShape("V100", 2), PlacementShape("V100", 4), K80]
    jobs = [(_job(f"j{k}", *models[k % 3]), shapes[k % 4], 1.3 + 0.06 * k) for k in range(12)]
    for job, shape, f in jobs:
        oracle.observe(job, shape, f * oracle.throughput([(job, shape)])[0])
    fresh = [(_job(f"new-{m}", m, b), s) for m, b in models for s in shapes]
    learnt = oracle.throughput(fresh)
    held_out = oracle.throughput_held_out([(job, shape) for job, shape, _ in jobs])
    assert oracle.jobs() == 12 + 3 and oracle.corrector.jobs() == 12  # the new jobs were only asked about
    for job in [*(j for j, _, _ in jobs), *(j for j, _ in fresh)]:
        oracle.forget(job.name)
    assert oracle.jobs() == 0 and oracle.corrector.jobs() == 0
    assert not oracle._features and not oracle._observed and not oracle._warned
    assert oracle.corrector.observations() == 12  # still in the shared levels
    assert oracle.throughput(fresh) == pytest.approx(learnt, rel=1e-9)
    assert max(learnt[k] / CorrectedOracle.load().throughput([fresh[k]])[0] for k in range(12)) > 1.3
    # what it answered before each configuration's first measurement is a cross-job fact: it stays
    assert oracle.throughput_held_out([(job, shape) for job, shape, _ in jobs]) == held_out
    oracle.forget("j0")  # twice, or a name it never saw: nothing happens
    oracle.forget("never-seen")
    assert oracle.throughput(fresh) == pytest.approx(learnt, rel=1e-9)


def test_a_job_that_ended_no_longer_answers_with_its_own_level() -> None:
    oracle = CorrectedOracle.load()
    a = _job("a")
    (cold,) = oracle.throughput([(a, V100)])
    oracle.observe(a, V100, 3.0 * cold)
    (own,) = oracle.throughput([(a, V100)])
    oracle.forget("a")
    (shared,) = oracle.throughput([(_job("a"), V100)])  # a new job under the same name
    assert own == pytest.approx(3.0 * cold, rel=0.05) and cold < shared < own


def test_held_out_answers_are_what_it_said_before_the_rows_first_observation() -> None:
    from scheduler.core.protocols import HeldOutOracle

    oracle = CorrectedOracle.load()
    assert isinstance(oracle, HeldOutOracle)
    a, b = _job("a"), _job("b", "vgg16", 32, WorkUnit.SAMPLES)
    cold = oracle.throughput([(a, V100), (b, V100)])
    assert oracle.throughput_held_out([(a, V100), (b, V100)]) == cold  # nothing observed: its answers
    oracle.observe(a, V100, 3.0 * cold[0])
    middle = oracle.throughput([(b, V100)])[0]
    oracle.observe(b, V100, 2.0 * middle)
    oracle.observe(a, V100, 3.0 * cold[0])  # a second observation of a row keeps its first "before"
    learned = oracle.throughput([(a, V100), (b, V100)])
    assert learned[0] > 2.0 * cold[0]
    assert oracle.throughput_held_out([(a, V100), (b, V100)]) == pytest.approx([cold[0], middle], rel=1e-12)
    # a row never observed answers as it does now (its shared levels moved)
    (now,) = oracle.throughput([(a, K80)])
    assert oracle.throughput_held_out([(a, K80)]) == [now]
