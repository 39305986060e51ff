"""Composition of a step from operators: precision as the stack runs it, batch scaling, communication."""

from __future__ import annotations

import pytest

from perfmodel.compose import DDP_BUCKET_BYTES, LINK_EFFICIENCY, compose, compose_interval, dtypes_for
from perfmodel.errors import InvalidInputError
from perfmodel.features import HardwareFeatures
from perfmodel.gpus import gpu_spec
from perfmodel.opcost import ClassModel, CostModel
from perfmodel.profile import (
    GemmDims,
    ModelRef,
    OpClass,
    Operator,
    OperatorProfile,
    Phase,
    Sample,
    Source,
    make_profile,
)
from perfmodel.scaling import allreduce_latency_s

# A cost model whose utilisation is exactly 1 and whose launch floor is 0: every kernel takes its roofline.
ROOFLINE = CostModel(
    {
        "gemm": ClassModel(0.0, (0.0,) * 8, 1),
        "elementwise": ClassModel(0.0, (0.0,) * 4, 1),
        "normalization": ClassModel(0.0, (0.0,) * 4, 1),
        "reduction": ClassModel(0.0, (0.0,) * 4, 1),
        "embedding": ClassModel(0.0, (0.0,) * 4, 1),
    }
)


def mlp(params: int = 1_000_000, batch: int = 32) -> OperatorProfile:
    """One big GEMM forward, two backward, an element-wise op, the optimizer over the parameters."""
    m, n, k = batch * 128, 4096, 4096
    gemm = GemmDims(m, n, k)
    ops = [
        Operator(
            "fc", "aten.mm", OpClass.GEMM, Phase.FORWARD, gemm.flops, 4.0 * (m * k + n * k + m * n), gemm=gemm
        ),
        Operator("act", "aten.relu", OpClass.ELEMENTWISE, Phase.FORWARD, m * n, 8.0 * m * n),
        Operator(
            "fc.dx",
            "aten.mm",
            OpClass.GEMM,
            Phase.BACKWARD,
            gemm.flops,
            4.0 * (m * k + n * k + m * n),
            gemm=gemm,
            count=2,
        ),
        Operator(
            "adam",
            "adamw",
            OpClass.OPTIMIZER,
            Phase.OPTIMIZER,
            10.0 * params,
            16.0 * params,
            scales_with_batch=False,
        ),
    ]
    return make_profile(ModelRef("mlp", Source.TORCH, params), batch, Sample(sequence_length=128), ops)


def test_fp32_on_ampere_follows_the_stack_per_operator_class() -> None:
    # (GEMMs and attention, convolutions, other tensors)
    assert dtypes_for("fp32", gpu_spec("A100")) == ("fp32", "tf32", "fp32")  # plain PyTorch defaults
    assert dtypes_for("fp32", gpu_spec("H100"), "research") == ("fp32", "tf32", "fp32")
    for stack in ("vendor", "mlperf", "llm"):  # NVIDIA's containers: TF32 matmuls too
        assert dtypes_for("fp32", gpu_spec("A100"), stack) == ("tf32", "tf32", "fp32")
    assert dtypes_for("tf32", gpu_spec("A100")) == ("tf32", "tf32", "fp32")
    assert dtypes_for("fp32", gpu_spec("V100"), "vendor") == ("fp32", "fp32", "fp32")
    assert dtypes_for("amp", gpu_spec("V100")) == ("fp16", "fp16", "fp16")
    assert dtypes_for("fp8", gpu_spec("H100")) == ("fp8", "fp8", "bf16")
    assert dtypes_for("fp8", gpu_spec("A100")) == ("bf16", "bf16", "bf16")
    with pytest.raises(InvalidInputError, match="precision"):
        dtypes_for("int8", gpu_spec("A100"))
    with pytest.raises(InvalidInputError, match="stack"):
        dtypes_for("fp32", gpu_spec("A100"), "ngc")


def test_fp32_matmuls_in_tf32_only_on_container_stacks() -> None:
    prof = mlp()
    hw = HardwareFeatures("A100")
    research = compose(prof, hw, "fp32", 32, ROOFLINE)
    vendor = compose(prof, hw, "fp32", 32, ROOFLINE, stack="vendor")
    tf32 = compose(prof, hw, "tf32", 32, ROOFLINE)
    assert (research.matmul_dtype, vendor.matmul_dtype) == ("fp32", "tf32")
    assert vendor.samples_per_s == pytest.approx(tf32.samples_per_s)
    assert vendor.samples_per_s > 2.0 * research.samples_per_s  # 156 vs 19.5 TFLOP/s on the GEMMs


def test_one_gpu_step_is_the_sum_of_rooflines() -> None:
    # A100 TF32 156 TFLOP/s, 1555 GB/s (40 GB SXM default). Batch 32: m = 4096 -> 32 x 32 = 1024 tiles
    # on 108 SMs = 9.48 waves -> q = 10 / 9.48.
    prof = mlp()
    p = compose(prof, HardwareFeatures("A100"), "tf32", 32, ROOFLINE)
    g = prof.operators[0]
    q = 10 / (1024 / 108)
    t_gemm = max(g.flops / 156e12 * q, g.bytes / 1555e9)
    t_act = 8.0 * 4096 * 4096 / 1555e9
    t_opt = 16e6 / 1555e9
    assert p.step.forward_s == pytest.approx(t_gemm + t_act)
    assert p.step.backward_s == pytest.approx(2 * t_gemm)
    assert p.step.optimizer_s == pytest.approx(t_opt)
    assert p.samples_per_s == pytest.approx(32 / (3 * t_gemm + t_act + t_opt))
    assert p.step.exposed_communication_s == 0.0


def test_fp32_is_faster_on_a100_than_true_fp32_would_be_and_amp_faster_still() -> None:
    prof = mlp()
    hw = HardwareFeatures("A100")
    fp32 = compose(prof, hw, "fp32", 32, ROOFLINE, stack="vendor").samples_per_s
    amp = compose(prof, hw, "amp", 32, ROOFLINE).samples_per_s
    v100 = compose(prof, HardwareFeatures("V100"), "fp32", 32, ROOFLINE).samples_per_s
    # V100 runs FP32 on CUDA cores at 15.7 TFLOP/s; A100 TF32 at 156: several times faster.
    assert fp32 > 3 * v100
    assert amp > fp32


def test_global_batch_is_split_over_gpus_and_ddp_all_reduce_hides_behind_backward() -> None:
    prof = mlp(params=50_000_000)
    one = compose(prof, HardwareFeatures("V100"), "fp32", 32, ROOFLINE)
    eight = compose(prof, HardwareFeatures("V100", num_gpus=8, gpus_per_node=8), "fp32", 256, ROOFLINE)
    assert eight.micro_batch == 32
    assert eight.step.compute_s == pytest.approx(one.step.compute_s)
    # Ring all-reduce of 200 MB of FP32 gradients over NVLink (300 GB/s total -> 150 GB/s a direction) at
    # 70%: 2 x 7/8 x 200e6 / 105e9 = 3.33 ms, plus NCCL's latency.
    comm = 2 * 7 / 8 * 200e6 / (150e9 * LINK_EFFICIENCY) + allreduce_latency_s(8, 1, 8)
    assert eight.step.communication_s == pytest.approx(comm)
    exposed = max(comm - one.step.backward_s, comm * DDP_BUCKET_BYTES / 200e6)
    assert eight.step.exposed_communication_s == pytest.approx(exposed)
    # Across 2 nodes on 10 Gb/s the same bytes take 1.25 GB/s: far slower than in one node.
    two_nodes = compose(
        prof, HardwareFeatures("V100", num_gpus=8, num_nodes=2, network_gbps=10), "fp32", 256, ROOFLINE
    )
    assert two_nodes.samples_per_s < eight.samples_per_s / 2


def test_micro_batches_accumulate_and_fsdp_is_composed() -> None:
    prof = mlp(params=50_000_000)
    hw = HardwareFeatures("A100", num_gpus=8, gpus_per_node=8)
    whole = compose(prof, hw, "bf16", 512, ROOFLINE, sharding="fsdp")
    split = compose(prof, hw, "bf16", 512, ROOFLINE, sharding="fsdp", micro_batch=16)
    assert (whole.micro_batch, whole.grad_accumulation) == (64, 1)
    assert (split.micro_batch, split.grad_accumulation) == (16, 4)
    assert split.step.communication_s == pytest.approx(4 * whole.step.communication_s)
    assert whole.sharding == "fsdp"


def test_bad_input_is_one_line_naming_the_field() -> None:
    prof = mlp()
    with pytest.raises(InvalidInputError, match="batch_size"):
        compose(prof, HardwareFeatures("A100"), "fp32", 0, ROOFLINE)
    with pytest.raises(InvalidInputError, match=r"sharding.*LLM"):
        compose(prof, HardwareFeatures("A100", num_gpus=8), "bf16", 64, ROOFLINE, sharding="tp2xpp2")
    with pytest.raises(InvalidInputError, match="gpu_type"):
        compose(prof, HardwareFeatures("Z9000"), "fp32", 32, ROOFLINE)


def test_interval_brackets_the_prediction() -> None:
    p, lo, hi = compose_interval(mlp(), HardwareFeatures("H100"), "bf16", 32, ROOFLINE)
    assert lo < p.samples_per_s < hi
