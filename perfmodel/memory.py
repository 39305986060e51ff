"""Peak GPU memory of a training job under its sharding, and whether it fits a GPU.

Per GPU, in bytes (``N`` parameters, ``n`` GPUs, ``tp``/``pp``/``cp`` model-parallel degrees):

- **Model states** (weights, gradients, optimizer). Mixed-precision Adam keeps 16 bytes a parameter
  (16-bit weights and gradients, fp32 master weights, Adam's two moments: 2 + 2 + 4 + 4 + 4; Rajbhandari et
  al. 2020, ZeRO, sec. 3.1); fp32 Adam keeps 4 + 4 + 4 + 4 = 16 as well. ``ddp``: all 16 N on every GPU.
  ``fsdp`` (ZeRO-3): 16 N / n, plus the working set of the unit being computed and the one prefetched
  (their gathered 16-bit weights and the gradients before reduce-scatter: 6 bytes x the largest unit, a
  layer or the embedding). ``tp x pp``: Megatron keeps 16-bit weights and fp32 main gradients of its
  1/(tp pp) of the model (6 bytes) and shards the fp32 master weights and moments over all n GPUs
  (distributed optimizer, 12 bytes; Megatron-Bridge's recipes turn it on).
- **Activations** of one micro-batch ``b`` at sequence ``s`` (16-bit; twice that for fp32), per layer
  (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models", sec. 4.1:
  ``s b h (34 + 5 a s / h)`` for a GPT layer), adapted to today's layers: no dropout masks (Llama, Mistral,
  Qwen train without dropout), FlashAttention (no ``a s^2`` score matrix is kept), grouped-query K/V
  (``kv`` = KV heads x head size) and gated MLPs (``F`` = feed-forward width)::

      per layer = s b (12 h + 4 kv + k F) / (tp cp)      k = 4 for a GeLU MLP, 6 for SwiGLU

  (MHA with a GeLU MLP of 4h gives 32 s b h: Korthikanti's 34 without the two dropout masks; SwiGLU keeps
  the gate and up outputs and their product, the activation being recomputed in the fused kernel as
  Megatron-Core does.) Sequence
  parallelism (on with tensor parallelism) divides all of it by tp. With full activation checkpointing
  each layer keeps only its input (``2 s b h / (tp cp)``) and one layer is recomputed at a time. A 1F1B
  pipeline keeps ``pp`` micro-batches in flight on its first stage, each over ``L / pp`` layers: L layers'
  worth, whatever pp (interleaved schedules keep somewhat more; not modelled). The logits and their
gradient add ``4 s b V / tp`` bytes where there is one stage (with pipelining the last stage holds them,
beside one micro-batch: the first stage is the peak).
- **Overhead**: CUDA context, NCCL buffers and the caching allocator's fragmentation: 1 GiB + 5%.

A job that is not a zoo LLM (``perfmodel.llm.is_llm_job``) has no activation model here: its estimate
is the model states alone, a lower bound (``activations_known`` False), which still catches a 7B-parameter
"model" on a 16 GB GPU. Checked against published configurations that ran (``tests/perfmodel/test_memory``,
``bench/llm_fit.py``). Pure module.
"""

from __future__ import annotations

from dataclasses import dataclass

from perfmodel.errors import InvalidInputError
from perfmodel.features import HardwareFeatures, HardwarePart, JobFeatures, resolve_hw
from perfmodel.llm import LLMJobFeatures, LLMPlan, is_llm_job, plan
from perfmodel.sharding import parse_sharding

GIB = float(1 << 30)
ADAM_BYTES = 16.0
OVERHEAD_GIB = 1.0
OVERHEAD_FRACTION = 0.05


@dataclass(frozen=True, slots=True)
class MemoryEstimate:
    """Predicted peak memory per GPU (GiB) by part, the GPU's memory, and the verdict in words."""

    states_gib: float
    activations_gib: float
    overhead_gib: float
    total_gib: float
    capacity_gib: float
    fits: bool
    micro_batch: int
    activations_known: bool
    message: str


def _states_bytes(p: LLMPlan) -> float:
    n_params, n, sh = p.params_total, p.num_gpus, p.sharding
    if sh.kind == "ddp":
        return ADAM_BYTES * n_params
    if sh.kind == "fsdp":
        a = p.arch
        scale = n_params / a.params_total
        layer = (a.params_total - a.embedding_params * (1 if a.tied_embeddings else 2)) / a.layers * scale
        unit = max(layer, a.embedding_params * scale)
        return ADAM_BYTES * n_params / n + (6.0 * unit if n > 1 else 0.0)
    return 6.0 * n_params / (sh.tp * sh.pp) + (ADAM_BYTES - 4.0) * n_params / n


def _activation_bytes(p: LLMPlan) -> float:
    a, sh = p.arch, p.sharding
    s = p.sequence_length / sh.cp
    b = float(p.micro_batch)
    width = 2.0 if p.precision != "fp32" else 4.0
    k = 6.0 if a.gated_mlp else 4.0
    layer = s * b * (12.0 * a.hidden + 4.0 * a.kv_dim + k * a.ffn) / 2.0 * width / sh.tp
    if p.activation_checkpointing:
        stored = a.layers * 2.0 * s * b * a.hidden / 2.0 * width / sh.tp + layer
    else:
        stored = a.layers * layer
    # the logits live on the last pipeline stage, which holds one micro-batch: the first stage peaks
    logits = 4.0 * s * b * a.vocab / sh.tp if sh.pp == 1 else 0.0
    return stored + logits


def estimate(p: LLMPlan) -> MemoryEstimate:
    """Peak memory per GPU of a checked LLM plan (module docstring)."""
    return _verdict(p.hw, _states_bytes(p), _activation_bytes(p), p.micro_batch, True, p)


def _verdict(
    hw: HardwarePart, states: float, acts: float, micro: int, known: bool, p: LLMPlan | None
) -> MemoryEstimate:
    base = (states + acts) / GIB
    overhead = OVERHEAD_GIB + OVERHEAD_FRACTION * base
    total = base + overhead
    cap = float(hw.spec.memory_gib)
    ok = total <= cap
    gpu = hw.spec.variant if not hw.spec.low_confidence else hw.spec.gpu_type
    if p is not None:
        how = (
            f"micro-batch {micro}, sequence {p.sequence_length}, {p.sharding} on {p.num_gpus} GPU"
            f"{'s' if p.num_gpus > 1 else ''}"
            + (", activation checkpointing" if p.activation_checkpointing else "")
        )
        how = "at " + how
    else:
        how = f"for its model states alone on {hw.num_gpus} GPU{'s' if hw.num_gpus > 1 else ''}"
    verb = "fits" if ok else "does not fit"
    message = f"needs ~{total:.0f} GiB per GPU {how}; {gpu} has {cap:g}: {verb}"
    if not ok and p is not None:
        hints = []
        if p.sharding.kind == "ddp":
            hints.append("fsdp")
        if not p.activation_checkpointing:
            hints.append("activation checkpointing")
        if p.micro_batch > 1:
            hints.append("a smaller micro-batch")
        hints.append("more GPUs or a larger GPU")
        message += " (try " + ", ".join(hints) + ")"
    return MemoryEstimate(states / GIB, acts / GIB, overhead, total, cap, ok, micro, known, message)


def estimate_job(job: JobFeatures, hw: HardwareFeatures | HardwarePart) -> MemoryEstimate:
    """Peak memory per GPU of any job: the LLM model for LLM jobs, model states alone otherwise.

    ``InvalidInputError`` names the bad field (params, sequence_length, sharding, gpus, gpu_type, ...).
    """
    part = hw if isinstance(hw, HardwarePart) else resolve_hw(hw)
    if is_llm_job(job):
        return estimate(plan(job, part))
    from perfmodel.zoo import lookup_model

    info = lookup_model(job.model) if job.model else None
    params = job.params if job.params is not None else (info.params if info is not None else None)
    if params is None or not params > 0:
        raise InvalidInputError("params: unknown model and no parameter count; cannot estimate memory")
    return _verdict(
        part, ADAM_BYTES * float(params), 0.0, max(1, job.batch_size // part.num_gpus), False, None
    )


def fits(
    job: JobFeatures, gpu: str | HardwareFeatures, count: int = 1, sharding: str | None = None
) -> MemoryEstimate:
    """Whether ``job`` fits on ``count`` GPUs of ``gpu`` (a product label or canonical type, or a full
    ``HardwareFeatures``) under ``sharding`` (replaces the job's own when given); ``.message`` says it in
    words ("needs ~52 GiB per GPU at micro-batch 8, ...; T4 has 16: does not fit")."""
    if sharding is not None:
        parse_sharding(sharding)  # name the field before anything else
        if not is_llm_job(job):
            pass  # no activation model: the states lower bound (estimate_job) does not depend on it
        elif isinstance(job, LLMJobFeatures):
            from dataclasses import replace

            job = replace(job, sharding=sharding)
        else:
            job = LLMJobFeatures(
                model=job.model,
                dataset=job.dataset,
                batch_size=job.batch_size,
                precision=job.precision,
                params=job.params,
                flops_per_sample=job.flops_per_sample,
                sharding=sharding,
            )
    hw = (
        gpu
        if isinstance(gpu, HardwareFeatures)
        else HardwareFeatures(gpu, count, min(count, 8), -(-count // 8))
    )
    return estimate_job(job, hw)
