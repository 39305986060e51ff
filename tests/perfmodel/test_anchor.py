"""Measured anchors apply only where a model was measured, but never on the question's GPU type."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from perfmodel.anchor import Anchors
from perfmodel.features import HardwareFeatures, JobFeatures, Resolved, resolve, resolve_job
from perfmodel.gpus import fp8_tflops, gpu_spec
from perfmodel.measurements import Measurement


def m(gpu: str, n: int, batch: int, its: float, nodes: int = 1) -> Measurement:
    return Measurement("test", "resnet50", "imagenet", batch, gpu, n, nodes, n // nodes, "nvlink", 100.0, its)


# V100: 1 GPU at batch 32 (8 it/s = 256 samples/s) and 128 (3 it/s = 384 samples/s); 4 GPUs of one node
# at global 256 (4.5 it/s = 1152 samples/s = 288 per GPU at per-GPU batch 64). T4: 1 GPU at 64, 1.5 it/s
# = 96 samples/s.
ANCHORS = Anchors(
    [m("V100", 1, 32, 8.0), m("V100", 1, 128, 3.0), m("V100", 4, 256, 4.5), m("T4", 1, 64, 1.5)]
)
# sqrt(peak TFLOP/s x memory GB/s) of the datasheets in perfmodel.gpus, the peak the scaling model uses
# for ResNet-50 in fp32: FP32 before Ampere, TF32 (PyTorch's default for convolutions) on the A100.
SPEC = {
    "V100": math.sqrt(15.7 * 900),
    "T4": math.sqrt(8.1 * 320),
    "A100": math.sqrt(
        gpu_spec("A100").tflops("fp32", tf32_convolutions=True) * gpu_spec("A100").memory_bandwidth_gbs
    ),
}


def row(gpu: str, n: int, batch: int, model: str = "resnet50", nodes: int = 1) -> Resolved:
    return resolve(JobFeatures(model, "imagenet", batch), HardwareFeatures(gpu, n, -(-n // nodes), nodes))


def test_applies_only_to_unmeasured_gpu_types_of_measured_models() -> None:
    assert ANCHORS.applies(row("A100", 1, 64))
    assert not ANCHORS.applies(row("V100", 1, 64))
    assert not ANCHORS.applies(row("A100", 1, 64, "bert"))
    t, t1 = ANCHORS.iteration_times([row("V100", 1, 64), row("A100", 1, 64, "bert")])
    assert np.isnan(t).all() and np.isnan(t1).all()


def test_one_gpu_speed_is_the_pooled_spec_normalised_curve() -> None:
    # Normalised per-GPU samples/s: V100 256 / SPEC at 32, 384 / SPEC at 128 (log-linear between, so
    # sqrt(256 x 384) / SPEC at 64); T4 96 / SPEC (flat). The pooled curve is their median in log space
    # (two types: the geometric mean); an A100 at 64 per GPU: pooled(64) x SPEC[A100].
    v64 = math.sqrt(256 * 384) / SPEC["V100"]
    t4 = 96 / SPEC["T4"]
    samples = math.sqrt(v64 * t4) * SPEC["A100"]
    t, t1 = ANCHORS.iteration_times([row("A100", 1, 64)])
    assert t1[0] == pytest.approx(64 / samples) and t[0] == pytest.approx(t1[0])
    # Beyond every measured batch the curve is flat: at 512 per GPU, geometric mean of 384 / SPEC[V100]
    # and the T4's value.
    _, big = ANCHORS.iteration_times([row("A100", 1, 512)])
    assert big[0] == pytest.approx(512 / (math.sqrt(384 / SPEC["V100"] * t4) * SPEC["A100"]))


def test_scaling_efficiency_comes_from_the_closest_measured_gpu() -> None:
    # V100 (closest to A100 in specs) on 4 GPUs at 64 per GPU: 288 / sqrt(256 x 384) = 0.9186 of its 1-GPU
    # curve. A100 on 4 GPUs (global 256): the 1-GPU time at 64 / 0.9186; on 2 GPUs (log-halfway between 1
    # and 4 GPUs) / sqrt(0.9186); on 8, flat beyond 4: / 0.9186. Across nodes nothing was measured: only the
    # 1-GPU time is anchored.
    e4 = 288 / math.sqrt(256 * 384)
    (_, one), (four, tw4), (two, _), (eight, _), (multi, tw_multi) = (
        (a[0], b[0])
        for a, b in (
            ANCHORS.iteration_times([r])
            for r in (
                row("A100", 1, 64),
                row("A100", 4, 256),
                row("A100", 2, 128),
                row("A100", 8, 512),
                row("A100", 4, 256, nodes=2),
            )
        )
    )
    assert tw4 == pytest.approx(one)
    assert four == pytest.approx(one / e4)
    assert two == pytest.approx(one / math.sqrt(e4))
    assert eight == pytest.approx(one / e4)
    assert math.isnan(multi) and tw_multi == pytest.approx(one)
    # K80 is closest to the T4, which has no multi-GPU table: the median over the model's types (V100's).
    k80, k80_one = ANCHORS.iteration_times([row("K80", 4, 256)])
    assert k80[0] == pytest.approx(k80_one[0] / e4)


def test_anchor_moves_smoothly_with_the_per_gpu_batch_and_gpu_count() -> None:
    # Per-GPU throughput rises with the per-GPU batch between the measured 32 and 128, and the whole
    # job's throughput rises with the GPU count at a fixed global batch (no jumps between measurements).
    rows = [row("A100", 1, b) for b in range(32, 129)]
    samples = np.asarray([r.batch_size for r in rows]) / ANCHORS.iteration_times(rows)[0]
    assert (np.diff(samples) > 0).all()
    rows = [row("A100", n, 256) for n in range(1, 9)]
    total = 256 / ANCHORS.iteration_times(rows)[0]
    assert (np.diff(total) > 0).all()


def _speed(gpu: str, precision: str) -> float:
    s = gpu_spec(gpu)
    return math.sqrt(s.tflops(precision) * s.memory_bandwidth_gbs)


def test_groups_are_per_precision_and_stack_and_fp8_takes_the_16_bit_runs() -> None:
    # BERT in bf16 research code on V100 (8 it/s at 32 = 256 samples/s) and in MLPerf code 3x faster:
    # an H100 bf16 research job is anchored by the research runs alone, scaled by the bf16 spec; an fp8
    # one (never measured in fp8) by the same runs, scaled to its effective FP8 rate (the Amdahl blend of
    # ``gpus.fp8_tflops``: less than the FP8 peak, more than bf16); fp32 has no group at all.
    def bert(its: float, stack: str) -> Measurement:
        return Measurement(
            "t", "bert", "squad", 32, "V100", 1, 1, 1, "nvlink", 100.0, its, precision="bf16", stack=stack
        )

    a = Anchors([bert(8.0, "research"), bert(24.0, "mlperf")])

    def t1(precision: str, stack: str = "research") -> float:
        r = resolve(JobFeatures("bert", "squad", 32, precision, stack=stack), HardwareFeatures("H100", 1, 1))
        return float(a.iteration_times([r])[1][0])

    assert t1("bf16") == pytest.approx(32 / (256 * _speed("H100", "bf16") / _speed("V100", "bf16")))
    job = JobFeatures("bert", "squad", 32, "fp8")
    h100 = gpu_spec("H100")
    rate = fp8_tflops(h100, resolve_job(job).gemm_share)
    assert h100.tflops("bf16") < rate < h100.tflops("fp8")
    fp8_speed = math.sqrt(rate * h100.memory_bandwidth_gbs)
    assert t1("fp8") == pytest.approx(32 / (256 * fp8_speed / _speed("V100", "bf16")))
    assert t1("bf16", "mlperf") == pytest.approx(t1("bf16") / 3)
    assert math.isnan(t1("fp32"))


def test_one_models_rows_of_other_work_per_sample_share_one_curve_in_flops() -> None:
    # A custom LLM measured on A100 at 2 samples of 1e12 FLOPs per step (4 samples/s, 4e12 FLOP/s) and at
    # 2 samples of 4e12 FLOPs (1.25 samples/s, 5e12 FLOP/s): on an H100 a job of 2 samples of 2e12 FLOPs
    # (4e12 FLOPs per step, log-halfway) runs sqrt(4e12 x 5e12) FLOP/s x the spec ratio.
    def llm(flops: float, its: float) -> Measurement:
        return Measurement(
            "t", "my-llm", "text", 2, "A100", 1, 1, 1, "nvlink", 100.0, its, precision="bf16",
            stack="llm", params=1e9, flops_per_sample=flops,
        )  # fmt: skip

    a = Anchors([llm(1e12, 2.0), llm(4e12, 0.625)])
    job = JobFeatures("my-llm", "text", 2, "bf16", 1e9, 2e12, "llm")
    t = a.iteration_times([resolve(job, HardwareFeatures("H100", 1, 1))])[1][0]
    rate = math.sqrt(4e12 * 5e12) * _speed("H100", "bf16") / _speed("A100", "bf16")
    assert t == pytest.approx(2 * 2e12 / rate)


def test_below_the_smallest_measured_batch_the_curve_follows_its_measured_trend() -> None:
    # An overhead-bound model: V100 and P100 take the same step time at per-GPU batch 8, 16 and 32 (their
    # FLOP/s rise as fast as the batch). On a K80 (never measured) at per-GPU batch 1 the anchor keeps
    # that trend, the same step time as at 8 (1/8 of its samples/s), instead of holding the FLOP/s of
    # batch 8 (which made it as fast per sample as at 8, and 8 K80s faster than they run).
    rows = [m(gpu, 1, b, its) for gpu, its in (("V100", 25.0), ("P100", 15.0)) for b in (8, 16, 32)]
    a = Anchors(rows)
    t1 = {b: float(a.iteration_times([row("K80", 1, b)])[1][0]) for b in (1, 2, 8)}
    assert t1[1] == pytest.approx(t1[8]) and t1[2] == pytest.approx(t1[8])
    assert [a.work_position(row("K80", 1, b)) for b in (1, 8, 16, 32, 64)] == [-1, 0, 0, 0, 1]
    assert a.work_position(row("V100", 1, 1)) == 0  # measured there: no anchor
    # A curve whose measured FLOP/s stay flat (step time proportional to the batch) keeps doing so.
    flat = Anchors(
        [m(gpu, 1, b, its * 8 / b) for gpu, its in (("V100", 25.0), ("P100", 15.0)) for b in (8, 16, 32)]
    )
    f1, f8 = (float(flat.iteration_times([row("K80", 1, b)])[1][0]) for b in (1, 8))
    assert f1 == pytest.approx(f8 / 8)
    # Measured FLOP/s that fall with the batch at the low end (noise) are held flat below (the step
    # time never grows as the batch shrinks), and one measured batch has no trend: the middle of the
    # bounds (step time x (b / b0)^0.5).
    noisy = Anchors([m("V100", 1, 8, 30.0), m("V100", 1, 16, 10.0)])
    n1, n8 = (float(noisy.iteration_times([row("K80", 1, b)])[1][0]) for b in (1, 8))
    assert n1 == pytest.approx(n8 / 8)
    one = Anchors([m("V100", 1, 64, 4.0)])
    o16, o64 = (float(one.iteration_times([row("K80", 1, b)])[1][0]) for b in (16, 64))
    assert o16 == pytest.approx(o64 * 0.5)


def test_a_type_measured_only_on_a_full_node_anchors_full_nodes_of_other_types() -> None:
    # ResNet-50 measured only on 8 V100s of one node (global 512 and 1024: per-GPU 64 and 128, 2.5 and 1.5
    # it/s = 160 and 192 samples/s per GPU). Its curve is that per-GPU speed, so 8 A100s of one node are
    # anchored at it scaled by the spec, with efficiency 1 (llm-foundry measured its H100s this way: no
    # in-node question on an A100 was anchored before). Fewer GPUs of a node read the same per-GPU speed.
    a = Anchors([m("V100", 8, 512, 2.5), m("V100", 8, 1024, 1.5)])
    t, t1 = a.iteration_times([row("A100", 8, 512), row("A100", 4, 256)])
    per_gpu = 160 / SPEC["V100"] * SPEC["A100"]
    assert t[0] == pytest.approx(64 / per_gpu) and t1[0] == pytest.approx(64 / per_gpu)
    assert t[1] == pytest.approx(64 / per_gpu)


def test_an_llm_measured_on_other_gpus_is_held_near_its_measured_speed_on_a_new_type() -> None:
    """MPT-30B (llm-foundry, FSDP, 2,048 tokens, micro-batch 3, activation checkpointing) on 8 H100s:
    7.82 sequences/s. With its H100 rows out of the anchors' table (measured on A100s only) and a scaling
    model 1.5x too fast on the new generation (as constants fitted on one generation can be), the
    measured A100 speed scaled by the spec holds the answer within 30%; on a type it was measured on,
    the anchor does not apply and the scaling model answers alone."""
    from dataclasses import replace
    from importlib import resources

    from perfmodel.features import HardwareFeatures
    from perfmodel.llm import LLMJobFeatures
    from perfmodel.llm_fit import FIT
    from perfmodel.measurements import read_table
    from perfmodel.predictor import Predictor

    table = read_table(Path(str(resources.files("perfmodel") / "data" / "measurements.csv.gz")))
    a100_only = Anchors([m for m in table if not (m.model == "mpt-30b" and m.gpu_type == "H100")])
    job = LLMJobFeatures(
        "mpt-30b",
        "c4",
        504,
        "bf16",
        stack="llm",
        sequence_length=2048,
        sharding="fsdp",
        micro_batch=3,
        activation_checkpointing=True,
    )
    hw = HardwareFeatures("H100-80GB-HBM3", 8, 8, 1, "nvlink", 3200.0)
    measured = 7.82
    p = Predictor.load(anchors=False)
    p.llm_fit = replace(FIT, gemm_efficiency=1.5 * FIT.gemm_efficiency, attention_efficiency=0.75)
    alone = p.predict([(job, hw)]).samples_per_s[0]
    assert alone / measured > 1.4
    p.anchors = a100_only
    p.clear_cache()
    assert p.predict([(job, hw)]).samples_per_s[0] / measured == pytest.approx(1.0, abs=0.3)
    p.anchors = Anchors(table)
    p.clear_cache()
    assert p.predict([(job, hw)]).samples_per_s[0] == pytest.approx(alone)


def test_an_anchored_llm_keeps_the_speed_ratio_between_gpu_types_whatever_its_memory_plan() -> None:
    """MPT-7B (measured on A100 and H100, not on H200) at 4,096 tokens on 8 GPUs: the H200 / H100 speed
    ratio is a property of the GPUs, so it may not swing with the micro-batch or checkpointing the job
    states. The anchor knows only the work per step; compared with the scaling model at the stated plan,
    micro-batch 1 with checkpointing read H200 1.7x an H100 (the same model alone: 1.01x)."""
    from perfmodel.features import HardwareFeatures
    from perfmodel.llm import LLMJobFeatures
    from perfmodel.predictor import Predictor

    p = Predictor.load()

    def ratio(batch: int, **plan: object) -> float:
        job = LLMJobFeatures("mpt-7b", "c4", batch, "bf16", stack="llm", sequence_length=4096, **plan)  # type: ignore[arg-type]
        h200, h100 = (
            p.predict([(job, HardwareFeatures(g, 8, 8, 1, "nvlink", 3200.0))]).samples_per_s[0]
            for g in ("H200", "H100")
        )
        return h200 / h100

    ratios = [
        ratio(256),
        ratio(256, micro_batch=16, activation_checkpointing=True),
        ratio(64, micro_batch=1, activation_checkpointing=True),
    ]
    assert all(1.0 <= r <= 1.25 for r in ratios), ratios
    assert max(ratios) / min(ratios) < 1.05, ratios
