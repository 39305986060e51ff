"""What the LLM scaling model carries from one GPU generation to the next: the H100/A100 speed ratio
llm-foundry measured, ring collectives over the node's whole network, and FSDP's traffic per micro-batch."""

from __future__ import annotations

import pytest

from perfmodel.features import HardwareFeatures
from perfmodel.llm import LLMJobFeatures, plan, step_time
from perfmodel.llm_fit import FIT
from perfmodel.zoo import LLMArch

H100 = "NVIDIA-H100-80GB-HBM3"
A100 = "NVIDIA-A100-SXM4-80GB"


def _tokens_per_s(job: LLMJobFeatures, hw: HardwareFeatures) -> float:
    p = plan(job, hw)
    return p.tokens_per_step / step_time(p).total


def test_h100_over_a100_speed_is_in_the_band_llm_foundry_measured() -> None:
    # llm-foundry ran MPT-3B at 1024 tokens (micro-batch 20, 6 accumulation steps, 8 GPUs, FSDP, no
    # checkpointing) on H100 and A100 80 GB: 216,369 / 92,643 tokens/s = 2.34x, and 2.21-2.34x for the
    # other 1B/3B runs of 512-1024 tokens -- well below the 3.17x of the BF16 peaks. These short
    # sequences leave attention small: the same GEMM efficiency of the datasheet peak on both,
    # element-wise work over memory bandwidth (1.64x) and a fixed latency per layer pull the ratio down
    # from 3.17x; the model says 2.38x. The band is the measured 2.21-2.34x widened by the model's ~10%
    # in-sample error; neither the peak ratio nor the bandwidth ratio is in it.
    arch = LLMArch(32, 2560, 20, 20, 10240, 50432, 1024, 2_649_216_000, gated_mlp=False, tied_embeddings=True)
    job = LLMJobFeatures(
        "mpt-3b", batch_size=960, precision="bf16", sequence_length=1024, micro_batch=20, arch=arch
    )
    ratio = _tokens_per_s(job, HardwareFeatures(H100, 8)) / _tokens_per_s(job, HardwareFeatures(A100, 8))
    assert 2.1 < ratio < 2.5


def test_fsdp_across_nodes_runs_its_rings_over_the_whole_node_network() -> None:
    # 2 nodes x 8 H100 on 400 Gb/s: NCCL runs one ring per rail, so each node sends and receives the
    # whole parameter buffer through all its NICs together -- 50 GB/s of bus bandwidth per GPU, not 1/8
    # of it. FSDP: 3 x 15/16 x 2 bytes x 8.03e9 parameters per micro-batch, 2 micro-batches a step.
    job = LLMJobFeatures("llama3-8b", batch_size=64, precision="bf16", sequence_length=4096, micro_batch=2)
    p = plan(job, HardwareFeatures(H100, 16, 8, 2, "nvlink", 400.0))
    assert p.grad_accumulation == 2
    want = 2 * 3 * 15 / 16 * 2 * p.params_total / (400.0 / 8 * 1e9 * FIT.link_efficiency)
    assert step_time(p).data_parallel == pytest.approx(want, rel=1e-9)
    # inside one node NVLink (450 GB/s a direction) is the bound
    one = plan(job, HardwareFeatures(H100, 8))
    assert one.grad_accumulation == 4
    assert step_time(one).data_parallel == pytest.approx(
        4 * 3 * 7 / 8 * 2 * one.params_total / (450e9 * FIT.link_efficiency), rel=1e-9
    )


def test_fsdp_gathers_the_parameters_again_for_every_micro_batch() -> None:
    # FULL_SHARD frees each layer's gathered parameters after use: 4 micro-batches of 2 sequences move
    # 4x the parameter traffic of one micro-batch of 8; DDP all-reduces its gradients once a step
    def dp_seconds(sharding: str, micro: int, gpus: int) -> float:
        job = LLMJobFeatures(
            "llama3-8b",
            batch_size=64,
            precision="bf16",
            sequence_length=2048,
            sharding=sharding,
            micro_batch=micro,
        )
        return step_time(plan(job, HardwareFeatures("L40S", gpus))).data_parallel

    assert dp_seconds("fsdp", 2, 8) == pytest.approx(4 * dp_seconds("fsdp", 8, 8))
    assert dp_seconds("ddp", 2, 8) == pytest.approx(dp_seconds("ddp", 8, 8))
