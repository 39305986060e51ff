"""Peak memory per GPU against published configurations that ran, and the words of the verdict.

The set (each ran, so each must be predicted to fit):
- MosaicML llm-foundry benchmark table (scripts/train/benchmarking/README.md, Apache-2.0): the rows closest
  to the memory limit of their GPU under our model (all 209 BF16 rows fit: ``bench/llm_fit.py``);
- NVIDIA Megatron-Bridge performance summary (docs/performance-summary.md, Apache-2.0), DGX-H100 rows:
  Llama 3 8B FSDP on 8 GPUs, Llama 3 70B tp4 pp8 on 64 GPUs and SFT tp4 pp4 on 32 GPUs (FP8 runs: their
  activations are partly 8-bit, so a 16-bit estimate is conservative).
Non-fits are arithmetic on the model states alone (16 bytes a parameter with mixed-precision Adam).
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfmodel.errors import InvalidInputError
from perfmodel.features import HardwareFeatures, JobFeatures
from perfmodel.llm import LLMJobFeatures
from perfmodel.memory import estimate_job, fits
from perfmodel.zoo import LLMArch

H100, A100_40, A100_80 = "NVIDIA-H100-80GB-HBM3", "A100-SXM4-40GB", "A100-SXM4-80GB"


def _mpt(h: int, layers: int, params: float, seq: int, gbs: int, micro: int, ac: bool) -> LLMJobFeatures:
    arch = LLMArch(
        layers, h, h // 128, h // 128, 4 * h, 50432, seq, params, gated_mlp=False, tied_embeddings=True
    )
    return LLMJobFeatures(
        "mpt-bench",
        batch_size=gbs,
        precision="bf16",
        params=params,
        sequence_length=seq,
        micro_batch=micro,
        activation_checkpointing=ac,
        arch=arch,
    )


PUBLISHED_FITS = [
    # (what, job, GPU, GPUs)  -- llm-foundry rows: size, seq, GPUs, micro-batch, global batch, checkpointing
    ("mpt-3b 8192 8xH100 mb3", _mpt(2560, 32, 2667566080, 8192, 144, 3, False), H100, 8),
    ("mpt-1b 2048 64xH100 mb20", _mpt(2048, 24, 1315950592, 2048, 1280, 20, False), H100, 64),
    ("mpt-3b 8192 8xA100-80 mb3", _mpt(2560, 32, 2667566080, 8192, 144, 3, False), A100_80, 8),
    ("mpt-3b 2048 128xA100-40 mb6", _mpt(2560, 32, 2651837440, 2048, 768, 6, False), A100_40, 128),
    ("mpt-760m 8192 8xA100-40 mb3", _mpt(1536, 24, 769907712, 8192, 96, 3, False), A100_40, 8),
    ("mpt-70b 2048 64xH100 mb8 AC", _mpt(8192, 80, 64862437376, 2048, 2048, 8, True), H100, 64),
    ("mpt-30b 8192 8xH100 mb1 AC", _mpt(7168, 48, 30019254272, 8192, 168, 1, True), H100, 8),
    ("mpt-13b 32768 8xH100 mb1 AC", _mpt(5120, 40, 13011240960, 32768, 24, 1, True), H100, 8),
    # Megatron-Bridge DGX-H100
    (
        "llama3-8b fsdp 8xH100",
        LLMJobFeatures(
            "llama3-8b",
            batch_size=128,
            precision="bf16",
            sequence_length=8192,
            sharding="fsdp",
            micro_batch=1,
        ),
        H100,
        8,
    ),
    (
        "llama3-70b tp4xpp8 64xH100",
        LLMJobFeatures(
            "llama3-70b",
            batch_size=256,
            precision="bf16",
            sequence_length=8192,
            sharding="tp4xpp8",
            micro_batch=1,
        ),
        H100,
        64,
    ),
    (
        "llama3-70b sft tp4xpp4 32xH100",
        LLMJobFeatures(
            "llama3-70b",
            batch_size=32,
            precision="bf16",
            sequence_length=4096,
            sharding="tp4xpp4",
            micro_batch=1,
        ),
        H100,
        32,
    ),
]


@pytest.mark.parametrize(("what", "job", "gpu", "count"), PUBLISHED_FITS, ids=[c[0] for c in PUBLISHED_FITS])
def test_published_configurations_fit(what: str, job: LLMJobFeatures, gpu: str, count: int) -> None:
    est = fits(job, HardwareFeatures(gpu, count, 8, count // 8, "nvlink", 3200.0))
    assert est.fits, est.message
    assert est.total_gib > 0.5 * est.capacity_gib  # and not by a silly margin: these were tuned to fill it


@pytest.mark.parametrize(
    ("model", "gpu", "count", "sharding", "floor_gib"),
    [
        # Llama 3 8B with DDP: 16 B x 8.03e9 = 128.5 GB = 119.7 GiB of states on every GPU > 80
        ("llama3-8b", H100, 8, "ddp", 119.6),
        # Llama 3 70B FSDP over 8 A100-80GB: 16 B x 70.55e9 / 8 = 141 GB = 131 GiB per GPU > 80
        ("llama3-70b", A100_80, 8, "fsdp", 131.0),
        # Mixtral keeps every expert: 16 B x 46.7e9 / 8 = 93.4 GB = 87 GiB per GPU > 80
        ("mixtral-8x7b", H100, 8, "fsdp", 86.9),
        # Qwen2.5 7B DDP on a T4: 16 B x 7.62e9 = 113.5 GiB > 16
        ("qwen2.5-7b", "Tesla-T4", 1, "ddp", 113.4),
    ],
)
def test_states_alone_do_not_fit(model: str, gpu: str, count: int, sharding: str, floor_gib: float) -> None:
    job = LLMJobFeatures(model, batch_size=count, precision="bf16", sequence_length=2048, micro_batch=1)
    est = fits(job, gpu, count, sharding)
    assert not est.fits
    assert est.states_gib > floor_gib


def test_message_names_the_need_the_gpu_and_its_memory() -> None:
    job = LLMJobFeatures("llama3-8b", batch_size=64, precision="bf16", sequence_length=4096, micro_batch=8)
    est = fits(job, "Tesla-T4", 8, "fsdp")
    assert not est.fits
    assert est.message.startswith(
        f"needs ~{est.total_gib:.0f} GiB per GPU at micro-batch 8, sequence 4096, fsdp"
    )
    assert "T4 has 16: does not fit" in est.message
    assert "activation checkpointing" in est.message  # a hint the user can act on


def test_sharding_more_ways_needs_less_per_gpu() -> None:
    job = LLMJobFeatures("llama3-70b", batch_size=64, precision="bf16", sequence_length=4096, micro_batch=1)
    per_gpu = [fits(job, H100, n, "fsdp").total_gib for n in (8, 16, 32, 64)]
    assert per_gpu == sorted(per_gpu, reverse=True)
    # checkpointing keeps only each layer's input: far less than the full activations
    ac = LLMJobFeatures(
        "llama3-70b",
        batch_size=64,
        precision="bf16",
        sequence_length=4096,
        micro_batch=1,
        activation_checkpointing=True,
    )
    assert fits(ac, H100, 32, "fsdp").activations_gib < 0.2 * fits(job, H100, 32, "fsdp").activations_gib


def test_non_llm_jobs_get_the_states_lower_bound() -> None:
    est = estimate_job(JobFeatures("resnet50", batch_size=256), HardwareFeatures("V100", 4))
    assert est.fits and not est.activations_known
    assert est.states_gib == pytest.approx(16 * 25.6e6 / 2**30)
    big = estimate_job(
        JobFeatures("custom", batch_size=8, params=7e9, flops_per_sample=1e12), HardwareFeatures("T4", 1)
    )
    assert not big.fits
    with pytest.raises(InvalidInputError, match=r"^sharding: cannot parse"):
        fits(JobFeatures("llama3-8b", batch_size=8), H100, 8, "tp4xpp")


@settings(max_examples=60, deadline=None)
@given(
    model=st.sampled_from(["llama3-8b", "mixtral-8x7b", "qwen2.5-7b", "mpt-30b", "gpt-neox-20b"]),
    seq=st.sampled_from([512, 2048, 8192]),
    micro=st.integers(1, 8),
    ac=st.booleans(),
    sharding=st.sampled_from(["ddp", "fsdp", "tp2", "tp2xpp2"]),
)
def test_memory_moves_the_way_the_knobs_say(
    model: str, seq: int, micro: int, ac: bool, sharding: str
) -> None:
    def gib(n: int, m: int = micro, s: int = seq, a: bool = ac) -> float:
        job = LLMJobFeatures(model, batch_size=64 * n, precision="bf16", sequence_length=s, sharding=sharding,
                             micro_batch=m, activation_checkpointing=a)  # fmt: skip
        return fits(job, H100, 8 * n).total_gib

    # more GPUs never need more memory per GPU (same micro-batch; the batch grows with the GPUs)
    assert gib(2) <= gib(1) + 1e-9
    # a larger micro-batch or a longer sequence never needs less; checkpointing never needs more
    assert gib(1, m=micro + 1) >= gib(1)
    assert gib(1, s=2 * seq) >= gib(1)
    assert gib(1, a=True) <= gib(1, a=False) + 1e-9
