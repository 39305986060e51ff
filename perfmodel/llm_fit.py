"""The LLM step model's fitted constants, and what they give a transformer known only by its size.

``LLMFit`` holds the constants ``perfmodel.llm`` runs the LLM scaling model with; ``FIT`` is the shipped
fit (``bench/llm_fit.py`` fits and prints it; docs/llm.md has its figures). ``estimate_arch`` gives a
Llama-like shape for a parameter count, and ``fp8_gemm_share`` the share of a transformer's step that FP8
speeds up from its parameters and FLOPs per sample: what the job features (``perfmodel.features``) use for
an FP8 transformer described by those two numbers. Pure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from perfmodel.zoo import LLMArch


def estimate_arch(params: float, layers: int | None = None, hidden: int | None = None) -> LLMArch:
    """A Llama-like shape for ``params`` parameters when only the count is known (low confidence).

    Dense decoders keep hidden / layers near 128 (Llama 3 8B 4096/32, 13B-class 5120/40) and have
    N ~ 12 L h^2, so h ~ (128 N / 12)^(1/3), rounded to a multiple of 128; the feed-forward width is
    8/3 h (SwiGLU), the vocabulary 32000.
    """
    if hidden is None:
        if layers is not None:
            h = math.sqrt(params / (12.0 * layers))
        else:
            h = (128.0 * params / 12.0) ** (1.0 / 3.0)
        hidden = max(128, round(h / 128.0) * 128)
    if layers is None:
        layers = max(1, round(params / (12.0 * hidden * hidden)))
    heads = max(1, hidden // 128)
    return LLMArch(layers, hidden, heads, heads, int(8 * hidden / 3), 32000, 2048, params)


# ----------------------------------------------------------------------------------- the fitted prior
@dataclass(frozen=True, slots=True)
class LLMFit:
    """The scaling model's fitted constants and where they come from (``bench/llm_fit.py`` prints them).

    ``gemm_efficiency`` x h'/(h' + ``hidden_half``): the fraction of peak the dense matmuls reach;
    ``attention_efficiency``: the fraction the attention-score FLOPs reach; ``elementwise_bytes``: bytes
    moved per token, layer and hidden unit by the memory-bound work between matmuls (norms, activations,
    residuals, rotary; forward + backward); ``link_efficiency``: achieved fraction of link bandwidth.
    ``layer_overhead_s``: fixed seconds per layer and micro-batch step (collective and kernel-launch
    latencies that do not shrink with the work). ``log_q_low``/``log_q_high``: 10th/90th percentiles of
    log(predicted / measured) in the fit.
    """

    gemm_efficiency: float
    hidden_half: float
    attention_efficiency: float
    elementwise_bytes: float
    layer_overhead_s: float
    link_efficiency: float
    log_q_low: float
    log_q_high: float
    rows: int
    source: str


# Fitted by ``bench/llm_fit.py`` on the BF16 rows of llm-foundry's benchmark table (MosaicML llm-foundry,
# scripts/train/benchmarking/README.md, Apache-2.0; extract in
# ../shared/throughput/public/mosaic_llmfoundry_benchmarks.tsv.gz), matmuls against the datasheet peak;
# docs/llm.md has the fit's errors on each split. ``hidden_half`` sits on its bound (the data does not pin
# the width dependence down); ``link_efficiency`` is not fitted: with ring collectives over the node's
# whole network no row of the table is bound by its traffic, so it stays at its prior 0.70 (NCCL's bus
# bandwidth is typically 70-90% of the line rate).
FIT = LLMFit(
    gemm_efficiency=0.7394,
    hidden_half=1.0,
    attention_efficiency=0.5026,
    elementwise_bytes=165.4,
    layer_overhead_s=0.007294,
    link_efficiency=0.70,
    log_q_low=-0.1414,
    log_q_high=0.1635,
    rows=209,
    source="llm-foundry benchmark table (Apache-2.0), BF16 rows, fitted by bench/llm_fit.py",
)


# Share of a transformer's 16-bit step time outside attention that its GEMMs take, for jobs whose
# element-wise work and overheads the scaling model does not break down (the learned path's
# ``fp8_gemm_share``): torchao's float8 runs on H100 (pytorch/ao README, docs.pytorch.org/ao "Pre-training
# with float8") read 1.25x for Llama 3.1 8B and 1.43-1.51x for 70B at 8,192 tokens; with attention's
# share of their matmul time from ``FIT`` (0.31 and 0.19) that is a share of 0.58 and 0.82: the middle,
# 0.7. Not fitted on any measured row.
DENSE_GEMM_SHARE = 0.7


def fp8_gemm_share(params: float, flops_per_sample: float, fit: LLMFit = FIT) -> float:
    """Share of a transformer's 16-bit step time in GEMMs (what FP8 speeds up), from its parameter count
    and training FLOPs per sample (a sample = one sequence) when nothing else is known: with the shape
    ``estimate_arch`` gives the count (12 L h = N / h) the FLOPs per sample are 6 N S + (N / h) S^2, which
    fixes the sequence length S; the dense matmuls (6 N S at ``gemm_efficiency``) against attention
    ((N / h) S^2 at ``attention_efficiency``) split the matmul time, of which ``DENSE_GEMM_SHARE`` of
    the rest of the step is GEMMs. A long sequence is mostly attention, which Transformer Engine keeps in
    BF16: llm-foundry's FP8 MPT-1B runs 1.35x its BF16 twin at 512 tokens and 1.05x at 32,768."""
    if not (params > 0 and flops_per_sample > 0):
        return DENSE_GEMM_SHARE
    h = float(estimate_arch(params).hidden)
    seq = h * (math.sqrt(36.0 + 4.0 * flops_per_sample / (params * h)) - 6.0) / 2.0
    dense = 6.0 * params * seq / fit.gemm_efficiency
    attention = params / h * seq * seq / fit.attention_efficiency
    return DENSE_GEMM_SHARE * dense / (dense + attention)
