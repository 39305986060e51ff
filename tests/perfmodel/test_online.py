"""Online correction: a job's predictions converge to what it does; a GPU-type bias carries to other jobs."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import pytest

from perfmodel.errors import InvalidInputError
from perfmodel.features import HardwareFeatures, JobFeatures, model_terms, resolve
from perfmodel.llm import LLMJobFeatures
from perfmodel.online import OnlineCorrector, remaining_time
from perfmodel.predictions import Predictions
from perfmodel.predictor import Predictor


@pytest.fixture(scope="module")
def predictor() -> Predictor:
    return Predictor.load()


JOB = JobFeatures("resnet50", "imagenet", 256)
A100x4 = HardwareFeatures("NVIDIA-A100-SXM4-40GB", 4, 4)


def test_job_converges_after_a_few_observations(predictor: Predictor) -> None:
    c = OnlineCorrector(predictor)
    base = predictor.predict([(JOB, A100x4)]).samples_per_s[0]
    true = 1.6 * base  # the job really runs 60% faster than the offline model says
    errors = []
    for k in range(4):
        c.observe(JOB, A100x4, true * (1.01 if k % 2 else 0.99), job_id="ns/job-a")
        got = c.predict([(JOB, A100x4)], job_ids=["ns/job-a"]).samples_per_s[0]
        errors.append(abs(got / true - 1))
    # cold error 1 - 1/1.6 = 37.5%; after 3 observations within 3%, and it keeps shrinking
    assert errors[2] < 0.03 and errors[3] <= errors[0]
    p = c.predict([(JOB, A100x4)], job_ids=["ns/job-a"])
    assert p.low[0] < true < p.high[0]


def test_bias_on_a_gpu_type_is_learned_for_other_jobs(predictor: Predictor) -> None:
    c = OnlineCorrector(predictor)
    other_job = (JobFeatures("resnet50", "imagenet", 512), HardwareFeatures("A100", 8, 8))
    other_model = (JobFeatures("bert", "squad", 32), HardwareFeatures("A100", 1))
    other_gpu = (JOB, HardwareFeatures("V100", 4, 4))
    before = predictor.predict([other_job, other_model, other_gpu]).samples_per_s
    for k in range(3):  # three jobs of ResNet-50 on A100 run 1.5x faster than predicted
        job = JobFeatures("resnet50", "imagenet", 128 * (k + 1))
        hw = HardwareFeatures("A100", 2 * (k + 1), 2 * (k + 1))
        c.observe(job, hw, 1.5 * predictor.predict([(job, hw)]).samples_per_s[0], job_id=f"j{k}")
    after = c.predict([other_job, other_model, other_gpu]).samples_per_s
    # the same model on the same GPU type moves most of the way (x1.5 fully, x1.35 at least)
    assert after[0] / before[0] > 1.35
    # another model on that GPU type moves part of the way (GPU-type level), another GPU not at all
    assert 1.05 < after[1] / before[1] < after[0] / before[0]
    assert after[2] == pytest.approx(before[2])


def test_bad_observation_is_refused(predictor: Predictor) -> None:
    c = OnlineCorrector(predictor)
    with pytest.raises(InvalidInputError, match="observed_samples_per_s"):
        c.observe(JOB, A100x4, 0.0)
    with pytest.raises(InvalidInputError, match="observed_samples_per_s"):
        c.observe(JOB, A100x4, float("nan"))


def test_remaining_time_is_work_over_throughput_with_interval(predictor: Predictor) -> None:
    p = predictor.predict([(JOB, A100x4)])
    # 10,000 iterations left: estimate = 10,000 / iters_per_s; earliest at the high bound, latest at the low
    r = remaining_time(10_000, "iterations", p)
    assert r.seconds == pytest.approx(10_000 / p.iters_per_s[0])
    assert r.earliest == pytest.approx(10_000 / p.iters_high[0])
    assert r.latest == pytest.approx(10_000 / p.iters_low[0])
    assert r.earliest < r.seconds < r.latest
    s = remaining_time(256 * 10_000, "samples", p)
    assert s.seconds == pytest.approx(r.seconds)
    with pytest.raises(InvalidInputError):
        remaining_time(-1, "samples", p)
    with pytest.raises(InvalidInputError):
        remaining_time(1, "epochs", p)


def test_scaling_trend_on_a_gpu_type_carries_to_other_models(predictor: Predictor) -> None:
    # On this GPU type every model loses 20% of its predicted throughput per doubling of the GPU count
    # (a cluster with a slower network than modelled). ResNet-50 is observed at 1..8 GPUs, BERT only on
    # one GPU: BERT on 8 GPUs must inherit the trend, not just ResNet-50's mean error.
    c = OnlineCorrector(predictor)

    def truth(job: JobFeatures, hw: HardwareFeatures) -> float:
        return float(predictor.predict([(job, hw)]).samples_per_s[0] * 0.8 ** math.log2(hw.num_gpus))

    for k, n in enumerate((1, 2, 4, 8, 1, 4)):
        job = JobFeatures("resnet50", "imagenet", 64 * n * (1 + k % 2))
        hw = HardwareFeatures("A100", n, n)
        c.observe(job, hw, truth(job, hw), job_id=f"r{k}")
    bert1 = (JobFeatures("bert", "squad", 32), HardwareFeatures("A100", 1, 1))
    c.observe(*bert1, truth(*bert1), job_id="b")
    bert8 = (JobFeatures("bert", "squad", 256), HardwareFeatures("A100", 8, 8))
    cold = predictor.predict([bert8]).samples_per_s[0]
    got = c.predict([bert8]).samples_per_s[0]
    # truth = cold x 0.8^3 = 0.512 cold (cold error 95%); the trend learned on ResNet-50 removes most of
    # it (the structural level prices the all-reduce of BERT's larger model, not a flat 0.8 per
    # doubling, so some error is left: at most 45% of the cold error, 40% with the shipped model); a
    # BERT-only correction would leave ~95%
    assert abs(cold / truth(*bert8) - 1) > 0.9
    assert abs(got / truth(*bert8) - 1) < 0.45 * abs(cold / truth(*bert8) - 1)


def test_corrected_predictions_stay_monotone_in_one_node(predictor: Predictor) -> None:
    # The job ran twice as fast as predicted on 4 GPUs and at 0.6x on 5 (observed per placement): 5..8
    # GPUs of the same node must not look slower than 4 after the correction (without the envelope they
    # would: 5 GPUs' own correction pulls it down).
    c = OnlineCorrector(predictor)
    rows = [(JOB, HardwareFeatures("NVIDIA-A100-SXM4-40GB", n, n)) for n in range(1, 9)]
    offline = predictor.predict(rows).samples_per_s
    for _ in range(3):
        c.observe(*rows[3], 2.0 * offline[3])
        c.observe(*rows[4], 0.6 * offline[4])
    raw = c._corrected(rows, [None] * len(rows)).samples_per_s
    assert raw[4] < raw[3]  # the per-placement correction alone breaks the order
    got = c.predict(rows)
    s = got.samples_per_s
    assert all(b >= a for a, b in itertools.pairwise(s)), s
    assert s[3] == pytest.approx(raw[3]) and s[4] == pytest.approx(raw[3])
    assert got.low[4] < s[4] < got.high[4]
    assert got.iters_per_s[4] == pytest.approx(s[4] / JOB.batch_size)


def _one_gpu_time(predictor: Predictor, job: JobFeatures, hw: HardwareFeatures) -> float:
    """Offline iteration time of the same job on one GPU of the type at the row's per-GPU batch."""
    local = job.batch_size // hw.num_gpus
    one = (JobFeatures(job.model, job.dataset, local), HardwareFeatures(hw.gpu_type, 1, 1))
    return local / predictor.predict([one]).samples_per_s[0]


def test_slow_all_reduce_on_a_gpu_type_carries_to_other_models(predictor: Predictor) -> None:
    # A cluster whose all-reduce is 4x slower than the scaling model's: every job there takes
    #   time = T1 + 4 x S   (T1 = offline 1-GPU time at its per-GPU batch, S = modelled all-reduce time),
    # whatever the offline model's own multi-GPU time T says. ResNet-50 is observed on 1, 2, 4, 8 GPUs of
    # one node and on 16 GPUs over 2 nodes (25 Gb/s); BERT only on one GPU. BERT on more GPUs must follow
    # the cluster's all-reduce, which the trend on the sync share S / (T1 + S) and the departure
    # log(T / (T1 + S)) carries across models.
    c = OnlineCorrector(predictor)

    def truth(job: JobFeatures, hw: HardwareFeatures) -> float:
        s = float(model_terms([resolve(job, hw)], predictor.model.physics)[1][0])
        return job.batch_size / (_one_gpu_time(predictor, job, hw) + 4.0 * s)

    for n, nodes in ((1, 1), (2, 1), (4, 1), (8, 1), (16, 2)):
        job = JobFeatures("resnet50", "imagenet", 64 * n)
        hw = HardwareFeatures("A100", n, min(n, 8), nodes, network_gbps=25.0)
        c.observe(job, hw, truth(job, hw), job_id=f"resnet50-{n}")
    bert1 = (JobFeatures("bert", "squad", 32), HardwareFeatures("A100", 1, 1))
    c.observe(*bert1, truth(*bert1), job_id="bert-1")
    # (GPUs, nodes, most relative error after the observations); cold errors measured with the shipped
    # model: -37%, -36%, -16% (earlier models: -7.5%, +49%, +54%); the trend in log GPUs and node span
    # only left -19% on 8 GPUs of one node, the descriptor trend ("split") -9%.
    cold_errors = []
    for n, nodes, bound in ((8, 1, 0.05), (16, 2, 0.20), (32, 4, 0.15)):
        q = (JobFeatures("bert", "squad", 32 * n), HardwareFeatures("A100", n, 8, nodes, network_gbps=25.0))
        got = c.predict([q]).samples_per_s[0]
        assert abs(got / truth(*q) - 1) < bound, (n, nodes, got / truth(*q))
        cold_errors.append(abs(predictor.predict([q]).samples_per_s[0] / truth(*q) - 1))
    assert max(cold_errors) > 0.25  # some row was far off before the observations


def test_trend_does_not_extrapolate_beyond_what_was_observed(predictor: Predictor) -> None:
    # ResNet-50 on A100 is observed at half the offline throughput per doubling of the GPU count on 1, 2
    # and 4 GPUs (ratios observed / offline: 1, 0.5, 0.25), at two batch sizes. A straight trend in the
    # GPU count would say 0.5^6 = 1/64 on 64 GPUs; the trend is clamped to its values at the observed
    # points, so the correction stays near the lowest observed ratio 0.25 (an unclamped trend would
    # give 0.20 on 8 GPUs and 0.05 on 64).
    c = OnlineCorrector(predictor)
    for k, n in enumerate((1, 2, 4, 1, 2, 4)):
        q = (JobFeatures("resnet50", "imagenet", 64 * n * (1 + k // 3)), HardwareFeatures("A100", n, n))
        c.observe(*q, predictor.predict([q]).samples_per_s[0] * 0.5 ** math.log2(n), job_id=f"j{k}")
    # Beyond the observed GPU counts the correction stays between the lowest observed ratio and its own
    # value at the largest observed count (4 GPUs), without going on down. The corrector's level at 4
    # GPUs moves with the offline model (a retrain shifts it by a few hundredths), so the bounds are
    # relative to it rather than fixed numbers.
    ratios = []
    for n, per_node, nodes in ((4, 4, 1), (8, 8, 1), (64, 8, 8)):
        q = (JobFeatures("resnet50", "imagenet", 64 * n), HardwareFeatures("A100", n, per_node, nodes))
        ratios.append(c.predict([q]).samples_per_s[0] / predictor.predict([q]).samples_per_s[0])
    at4, at8, at64 = ratios
    assert at4 < 0.45, ratios
    assert 0.22 < at64 <= at8 + 1e-9 and at8 <= at4 + 1e-9, ratios


def test_a_model_seen_at_two_batch_sizes_carries_to_its_other_configurations(predictor: Predictor) -> None:
    # On this GPU type BERT runs 1.8x the offline throughput at per-GPU batch 32, and relatively faster at
    # small batches (x (b / 32)^-0.2: the offline model over-rates small batches' overhead on a fast GPU).
    # Seen on one GPU at batches 8 and 64, its other batch sizes and GPU counts on the type must follow:
    # within 5% between the observed batches and on 4 GPUs, and not run off beyond them (a mean plus a
    # kernel-weighted local deviation is +34% / +53% off at 128 / 256: docs/decisions/0004).
    gpu = "NVIDIA-A100-SXM4-80GB"

    def row(local: int, n: int = 1) -> tuple[JobFeatures, HardwareFeatures]:
        return JobFeatures("bert", "squad", local * n), HardwareFeatures(gpu, n, n)

    def truth(job: JobFeatures, hw: HardwareFeatures) -> float:
        local = job.batch_size / hw.num_gpus
        return float(predictor.predict([(job, hw)]).samples_per_s[0] * 1.8 * (local / 32) ** -0.2)

    c = OnlineCorrector(predictor)
    for b in (8, 64):
        c.observe(*row(b), truth(*row(b)), job_id=f"bert-{b}")
    for local, n, bound in ((16, 1, 0.05), (32, 1, 0.05), (32, 4, 0.05), (128, 1, 0.18), (256, 1, 0.25)):
        q = row(local, n)
        assert abs(predictor.predict([q]).samples_per_s[0] / truth(*q) - 1) > 0.15  # cold is off
        assert abs(c.predict([q]).samples_per_s[0] / truth(*q) - 1) < bound, (local, n)


def test_an_llm_seen_at_two_sequence_lengths_carries_to_its_other_configurations(
    predictor: Predictor,
) -> None:
    # Llama 3 8B on H100s runs 1.3x the offline throughput at 4,096 tokens and relatively slower the
    # longer its sequences (x (S / 4096)^-0.25: attention's share of the work, which the offline model
    # under-rates on this GPU). Seen on 8 GPUs at 2,048 and 8,192 tokens (global batch 64), its other
    # batches at those lengths must follow the two runs (within 13%); a correction blind to the work
    # per sample puts both at the mean of the two and is 19% / 17% off.
    gpu = "NVIDIA-H100-80GB-HBM3"

    def row(seq: int, batch: int) -> tuple[LLMJobFeatures, HardwareFeatures]:
        return LLMJobFeatures(
            "llama3-8b", batch_size=batch, precision="bf16", sequence_length=seq
        ), HardwareFeatures(gpu, 8, 8)

    def truth(job: LLMJobFeatures, hw: HardwareFeatures) -> float:
        return float(
            predictor.predict([(job, hw)]).samples_per_s[0]
            * 1.3
            * ((job.sequence_length or 4096) / 4096) ** -0.25
        )

    c = OnlineCorrector(predictor)
    for seq in (2048, 8192):
        c.observe(*row(seq, 64), truth(*row(seq, 64)), job_id=f"llama-{seq}")
    for seq, batch in ((8192, 32), (2048, 128)):
        q = row(seq, batch)
        assert abs(predictor.predict([q]).samples_per_s[0] / truth(*q) - 1) > 0.08  # cold is off
        assert abs(c.predict([q]).samples_per_s[0] / truth(*q) - 1) < 0.13, (seq, batch)


def _mlperf_bert_h100(
    n: int, precision: str = "amp", network_gbps: float = 3200.0
) -> tuple[JobFeatures, HardwareFeatures]:
    """BERT-large (MLPerf code, 6 sequences per GPU) on ``n`` H100s, 8 to a node (``n`` < 8: one node)."""
    job = JobFeatures("bert-large", "wikipedia-seq512", 6 * n, precision=precision, stack="mlperf")
    hw = HardwareFeatures("NVIDIA-H100-80GB-HBM3", n, min(n, 8), max(1, n // 8), network_gbps=network_gbps)
    return job, hw


def _corrected_over_offline(
    c: OnlineCorrector, offline: Predictor, row: tuple[JobFeatures, HardwareFeatures]
) -> float:
    """The corrector's throughput for ``row`` over the offline predictor's."""
    return float(c.predict([row]).samples_per_s[0] / offline.predict([row]).samples_per_s[0])


def test_a_model_seen_at_two_gpu_counts_does_not_carry_their_noise_to_thousands_of_gpus(
    predictor: Predictor,
) -> None:
    # BERT-large (MLPerf code) on H100 nodes runs 1.5x the offline throughput at every GPU count, seen
    # at 8 and 64 GPUs with +-5% run-to-run noise. A straight line through the two runs in log GPUs
    # would carry that noise six e-folds further, to 3,072 GPUs (1.61x there with the noise one way
    # round); the model's GPU-count slope holds between its runs and is flat
    # beyond them, so the correction there stays within what the two runs were corrected by. Below by at
    # most 10%: where the offline model's own GPU-count curve bends (the shipped model's 16 -> 32 H100
    # step is 2.3x) the structural level fades towards the model's, which carries no noise outwards.
    def row(n: int) -> tuple[JobFeatures, HardwareFeatures]:
        return _mlperf_bert_h100(n)

    def ratio(c: OnlineCorrector, n: int) -> float:
        return _corrected_over_offline(c, predictor, row(n))

    for noise in (1.05, 1 / 1.05):
        c = OnlineCorrector(predictor)
        for n, f in ((8, 1 / noise), (64, noise)):
            c.observe(*row(n), predictor.predict([row(n)]).samples_per_s[0] * 1.5 * f, job_id=f"bert-{n}")
        seen = (ratio(c, 8), ratio(c, 64))
        for n in (512, 3072):
            assert 0.9 * min(seen) <= ratio(c, n) <= max(seen) + 1e-6, (noise, n, seen, ratio(c, n))


def test_a_gpu_type_seen_only_within_nodes_does_not_extrapolate_across_nodes(predictor: Predictor) -> None:
    # BERT-large (MLPerf code) on H100 runs 1.5x the offline throughput, seen at 4 and 8 GPUs of one node
    # with the 8-GPU run 10% faster than the 4-GPU one relative to the offline model (noise, or NVLink
    # all-reduce faster than modelled). Those runs say nothing about the node network: on 16 to 3,072
    # GPUs over 100 Gb/s nodes the correction must stay within what the two runs were corrected by (the
    # structural level's departure factor, 1.4 from the two runs, cancelled the offline model's
    # multi-node departure: 11.3x the offline throughput on two nodes).
    def row(n: int) -> tuple[JobFeatures, HardwareFeatures]:
        return _mlperf_bert_h100(n, network_gbps=100.0)

    def ratio(c: OnlineCorrector, n: int) -> float:
        return _corrected_over_offline(c, predictor, row(n))

    c = OnlineCorrector(predictor)
    for n, f in ((4, 1 / 1.05), (8, 1.05)):
        c.observe(*row(n), predictor.predict([row(n)]).samples_per_s[0] * 1.5 * f, job_id=f"bert-{n}")
    seen = (ratio(c, 4), ratio(c, 8))
    for n in (16, 64, 3072):
        assert min(seen) - 1e-6 <= ratio(c, n) <= max(seen) + 1e-6, (n, seen, ratio(c, n))


class _BentPredictor(Predictor):
    """The shipped predictor with its curve over GPU count bent beyond 64 GPUs: per-GPU throughput times
    (GPUs / 64) ** ``power`` there (as a retrained model's may rise from 64 to 512 GPUs of MLPerf runs)."""

    def __init__(self, p: Predictor, power: float) -> None:
        super().__init__(p.model, p.meta, anchors=p.anchors, measured=p.measured, envelope=p.envelope)
        self.power = power

    def predict(self, rows: Sequence[tuple[JobFeatures, HardwareFeatures]]) -> Predictions:
        got = super().predict(rows)
        f = [max(1.0, hw.num_gpus / 64) ** self.power for _, hw in rows]
        s, i, lo, hi, ilo, ihi = (
            [v * k for v, k in zip(vs, f, strict=True)]
            for vs in (got.samples_per_s, got.iters_per_s, got.low, got.high, got.iters_low, got.iters_high)
        )
        return Predictions(s, i, lo, hi, ilo, ihi, got.low_confidence)


@pytest.mark.parametrize("power", [0.25, 0.5, -0.5])
@pytest.mark.parametrize("precision", ["fp32", "amp"])
def test_the_correction_does_not_follow_a_bend_of_the_offline_curve_beyond_the_observed_gpus(
    predictor: Predictor, precision: str, power: float
) -> None:
    # BERT-large (MLPerf code) on H100 nodes seen at 8 and 64 GPUs, 1.5x the offline throughput with
    # +-5% noise, under an offline model whose per-GPU speed rises beyond 64 GPUs. The GPU type's
    # structural factors scale the offline model's all-reduce and departure; carried past 64 GPUs they
    # follow the bend (2.3x at 512 GPUs with the MLPerf-relabelled model). Beyond the observed GPU counts
    # the correction stays within what the observed runs were corrected by, whatever the curve does.
    bent = _BentPredictor(predictor, power)

    def row(n: int) -> tuple[JobFeatures, HardwareFeatures]:
        return _mlperf_bert_h100(n, precision)

    def ratio(c: OnlineCorrector, n: int) -> float:
        return _corrected_over_offline(c, bent, row(n))

    for noise in (1.05, 1 / 1.05):
        c = OnlineCorrector(bent)
        for n, f in ((8, 1 / noise), (64, noise)):
            c.observe(*row(n), bent.predict([row(n)]).samples_per_s[0] * 1.5 * f, job_id=f"bert-{n}")
        # what the corrector gives at the observed configurations (without the in-node envelope, which
        # may lift the 8-GPU row to its 1..7-GPU rows)
        seen = (math.exp(c.correction(*row(8))), math.exp(c.correction(*row(64))))
        for n in (128, 512, 3072):
            assert min(seen) - 1e-6 <= ratio(c, n) <= max(seen) + 1e-6, (noise, n, seen, ratio(c, n))


def _in_and_across(predictor: Predictor, job: JobFeatures, hw: HardwareFeatures, across: float) -> float:
    """Throughput of a job on a cluster whose all-reduce takes the scaling model's time inside a node and
    ``across`` x it over the network: time = T1 + factor x S (T1 = offline 1-GPU time at the row's
    per-GPU batch, S = modelled all-reduce time)."""
    s = float(model_terms([resolve(job, hw)], predictor.model.physics)[1][0])
    factor = across if hw.num_nodes > 1 else 1.0
    return job.batch_size / (_one_gpu_time(predictor, job, hw) + factor * s)


def test_a_slow_network_does_not_slow_the_gpu_types_rows_within_a_node(predictor: Predictor) -> None:
    # NVLink runs as modelled, the 25 Gb/s network 4x slower than modelled. ResNet-50 observed on 1-8
    # GPUs of one node and on 16 and 32 GPUs over 2 and 4 nodes; BERT on one GPU. BERT on 8 GPUs of one
    # node and across nodes must follow the truth within 5% (the all-reduce factors within and across
    # nodes: 0.2% off). One all-reduce factor for both (its in-node runs pull it towards 1, the
    # departure factor takes the rest) reads BERT on 16 and 32 GPUs 2.3x too fast (cold: 1.4x).
    c = OnlineCorrector(predictor)

    def truth(job: JobFeatures, hw: HardwareFeatures) -> float:
        return _in_and_across(predictor, job, hw, across=4.0)

    for n, nodes in ((1, 1), (2, 1), (4, 1), (8, 1), (16, 2), (32, 4)):
        job = JobFeatures("resnet50", "imagenet", 64 * n)
        hw = HardwareFeatures("A100", n, min(n, 8), nodes, network_gbps=25.0)
        c.observe(job, hw, truth(job, hw), job_id=f"resnet50-{n}")
    bert1 = (JobFeatures("bert", "squad", 32), HardwareFeatures("A100", 1, 1))
    c.observe(*bert1, truth(*bert1), job_id="bert-1")
    for n, nodes in ((8, 1), (16, 2), (32, 4)):
        q = (JobFeatures("bert", "squad", 32 * n), HardwareFeatures("A100", n, 8, nodes, network_gbps=25.0))
        got = c.predict([q]).samples_per_s[0]
        assert abs(got / truth(*q) - 1) < 0.05, (n, nodes, got / truth(*q))


def test_a_models_slow_collectives_across_nodes_do_not_slow_its_rows_within_a_node(
    predictor: Predictor,
) -> None:
    # On this GPU type (10 Gb/s between nodes) ResNet-50 runs as the offline model says (observed on 1-32
    # GPUs), but BERT's collectives take 5x the modelled all-reduce time (its own: sharded, or not
    # overlapped), i.e. time = T + 4 x S (T = offline iteration time, S = modelled all-reduce time).
    # BERT is observed on 1 GPU and on 16 and 32 GPUs (2 and 4 nodes). Its row on 2 GPUs of one node
    # (truth 1.5% under the offline model) must stay within 25%: with the GPU type's all-reduce factor
    # alone, the model's own level takes BERT's slowness as a trend in the GPU count and reads 2 GPUs
    # 0.62x the truth (38% off); with a factor on the type's all-reduce per model, 0.81x.
    def truth(job: JobFeatures, hw: HardwareFeatures) -> float:
        s = float(model_terms([resolve(job, hw)], predictor.model.physics)[1][0])
        t = job.batch_size / predictor.predict([(job, hw)]).samples_per_s[0]
        return job.batch_size / (t + (4.0 if job.model == "bert" else 0.0) * s)

    def row(model: str, n: int) -> tuple[JobFeatures, HardwareFeatures]:
        per, data = (64, "imagenet") if model == "resnet50" else (32, "squad")
        return JobFeatures(model, data, per * n), HardwareFeatures(
            "A100", n, min(n, 8), max(1, n // 8), network_gbps=10.0
        )

    c = OnlineCorrector(predictor)
    for n in (1, 2, 4, 8, 16, 32):
        c.observe(*row("resnet50", n), truth(*row("resnet50", n)), job_id=f"resnet50-{n}")
    for n in (1, 16, 32):
        c.observe(*row("bert", n), truth(*row("bert", n)), job_id=f"bert-{n}")
    for model, n, bound in (("bert", 2, 0.25), ("bert", 24, 0.1)):
        q = row(model, n)
        got = c.predict([q]).samples_per_s[0]
        assert abs(got / truth(*q) - 1) < bound, (model, n, got / truth(*q))


def test_one_run_measured_far_off_its_neighbours_does_not_move_the_models_other_rows(
    predictor: Predictor,
) -> None:
    # BERT on one A100 runs 1.3x the offline throughput at every batch; of its three observed runs one
    # was measured at 3x (a bad table row, a run that shared its GPU). Its other batches must stay within
    # 8% of 1.3x (1.39x: the 3x run weighs 0.24 against 1.38 each); weighing the three runs alike
    # puts them at 1.70x (31% off).
    c = OnlineCorrector(predictor)

    def row(b: int) -> tuple[JobFeatures, HardwareFeatures]:
        return JobFeatures("bert", "squad", b), HardwareFeatures("NVIDIA-A100-SXM4-80GB", 1, 1)

    for b, f in ((16, 1.3), (32, 3.0), (64, 1.3)):
        c.observe(*row(b), predictor.predict([row(b)]).samples_per_s[0] * f, job_id=f"bert-{b}")
    for b in (24, 48, 128):
        ratio = c.predict([row(b)]).samples_per_s[0] / predictor.predict([row(b)]).samples_per_s[0]
        assert abs(ratio / 1.3 - 1) < 0.08, (b, ratio)


def test_the_same_observations_give_the_same_predictions_however_often_it_was_asked(
    predictor: Predictor,
) -> None:
    # An observation refits only its GPU type's shared levels, at the next prediction. A corrector asked
    # after every observation (so each type is refitted many times, and a job moves from A100 to H100,
    # which must refit both) must answer exactly as one asked only at the end, and again the same.
    obs = []
    for k, (model, gpu, n) in enumerate(
        [("resnet50", "A100", 1), ("bert", "A100", 8), ("resnet50", "H100", 4), ("bert", "H100", 16)] * 2
        + [("vgg16", "A100", 2)]
    ):
        job = JobFeatures(model, "imagenet" if model != "bert" else "squad", 32 * n * (1 + k // 4))
        hw = HardwareFeatures(gpu, n, min(n, 8), max(1, n // 8))
        obs.append((job, hw, predictor.predict([(job, hw)]).samples_per_s[0] * (0.7 + 0.1 * k), f"j{k}"))
    # VGG-16, the only one of its model on A100, moves to H100: A100's levels must forget it.
    moved = (JobFeatures("vgg16", "imagenet", 128), HardwareFeatures("H100", 2, 2))
    obs.append((*moved, predictor.predict([moved]).samples_per_s[0] * 1.4, "j8"))
    asked = [(job, hw) for job, hw, _, _ in obs]
    often, once = OnlineCorrector(predictor), OnlineCorrector(predictor)
    for job, hw, s, jid in obs:
        often.observe(job, hw, s, job_id=jid)
        often.predict(asked)
        once.observe(job, hw, s, job_id=jid)
    got = often.predict(asked).samples_per_s
    assert got == once.predict(asked).samples_per_s
    assert got == often.predict(asked).samples_per_s


def _observe_runs(c: OnlineCorrector, predictor: Predictor, factors: Sequence[float]) -> None:
    """ResNet-50 runs on 2, 4, 6, ... A100s at ``factors`` x the prediction, one job each ("r0", ...)."""
    for k, f in enumerate(factors):
        job = JobFeatures("resnet50", "imagenet", 128 * (k % 3 + 1))
        hw = HardwareFeatures("A100", 2 * (k % 4 + 1), 2 * (k % 4 + 1))
        c.observe(job, hw, f * predictor.predict([(job, hw)]).samples_per_s[0], job_id=f"r{k}")


def test_forgotten_jobs_leave_their_records_in_the_shared_levels_and_none_of_their_own(
    predictor: Predictor,
) -> None:
    c = OnlineCorrector(predictor)
    _observe_runs(c, predictor, [1.5, 1.4, 1.6, 1.3])
    rows = [(JobFeatures("resnet50", "imagenet", 512), HardwareFeatures("A100", 8, 8)), (JOB, A100x4)]
    rows.append((JobFeatures("bert", "squad", 32), HardwareFeatures("A100", 1)))
    learnt = c.predict(rows).samples_per_s
    own = c.predict([rows[1]], job_ids=["r1"]).samples_per_s[0]
    assert [c.forget(f"r{k}") for k in range(4)] == [False] * 4  # nothing dropped out of the shared levels
    assert c.jobs() == 0 and c.observations() == 4
    assert c.predict(rows).samples_per_s == pytest.approx(learnt, rel=1e-9)
    # "r1" ran at 4 A100s: its own level is gone with it
    assert c.predict([rows[1]], job_ids=["r1"]).samples_per_s[0] == pytest.approx(learnt[1], rel=1e-9) != own
    assert c.forget("r1") is False and c.forget("never") is False


def test_the_shared_levels_keep_the_latest_forgotten_jobs_of_a_model_on_a_type(predictor: Predictor) -> None:
    # with room for 2 forgotten jobs per (model, GPU type), 4 jobs observed and forgotten leave the
    # shared levels as 2 jobs would: the last two ("r2", "r3"); the first two dropped out. The same with
    # room for 2 in all.
    rows = [(JobFeatures("resnet50", "imagenet", 512), HardwareFeatures("A100", 8, 8)), (JOB, A100x4)]
    factors = [2.5, 0.6, 1.4, 1.3]
    for c in (OnlineCorrector(predictor, retired_per_model=2), OnlineCorrector(predictor, retired_cap=2)):
        _observe_runs(c, predictor, factors)
        dropped = [c.forget(f"r{k}") for k in range(4)]
        assert dropped == [False, False, True, True]
        latest = OnlineCorrector(predictor)
        _observe_runs(latest, predictor, factors)
        for k in (0, 1):
            latest._jobs.pop(f"r{k}")
        assert c.observations() == 2
        assert c.predict(rows).samples_per_s == pytest.approx(latest.predict(rows).samples_per_s, rel=1e-9)
    with pytest.raises(InvalidInputError, match="retired_per_model and retired_cap"):
        OnlineCorrector(predictor, retired_per_model=0)
