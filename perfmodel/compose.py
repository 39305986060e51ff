"""Composition: an operator profile on a GPU type, precision and placement -> step time and throughput.

Stages "step" and "placement and parallelism" of the predictor pipeline. ``compose`` takes an
``OperatorProfile`` (``perfmodel.profile``), prices every operator with the per-operator cost model
(``perfmodel.opcost``) at the per-GPU micro-batch and the precision as the software stack runs it, and adds
the collectives of the parallelism from the network model the scaling model uses (``perfmodel.features``):

    step = forward + backward + optimizer + exposed communication

**Precision as the stack runs it** (``dtypes_for``). The precision is an explicit input:

| precision | GEMMs, convolutions, attention | other operators' tensors |
| --- | --- | --- |
| ``fp32`` | convolutions TF32 on Ampere and newer; GEMMs and attention as the stack runs them | FP32 |
| ``tf32`` | TF32 tensor cores on Ampere and newer, FP32 before | FP32 |

(Before Ampere every fp32 and tf32 operator runs in FP32; the container stacks are ``vendor``, ``mlperf``
and ``llm``, ``research`` runs its fp32 GEMMs and attention in FP32.)
| ``amp`` / ``fp16`` | FP16 tensor cores (Volta and newer) | FP16 (half the bytes) |
| ``bf16`` | BF16 tensor cores (Ampere and newer; FP16 rate where the GPU has none) | BF16 |
| ``fp8`` | FP8 tensor cores (Hopper, Ada and newer; BF16 elsewhere) | BF16 |

``fp32`` follows the job's software stack per operator class (``gpus.fp32_runs_tf32``): PyTorch runs
convolutions in TF32 by default (``torch.backends.cudnn.allow_tf32 = True``) and matmuls in FP32
(``torch.backends.cuda.matmul.allow_tf32 = False``); NVIDIA's PyTorch containers, which the ``vendor``,
``mlperf`` and ``llm`` stacks run in, set ``TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1`` and run matmuls in TF32
too. A job that forces true FP32 convolutions runs slower than this predicts. The optimizer keeps FP32
master weights at every precision (its bytes are never halved).

**Data parallel** (``ddp``): the gradients (parameters x 4 bytes, FP32 as DDP keeps them under AMP) are
all-reduced by a ring, ``2 (n-1)/n`` x bytes over the slowest link of the placement (NVLink or PCIe inside
a node, the node network across nodes) at the link efficiency of the scaling model, plus NCCL's latency
(``scaling.allreduce_latency_s``). DDP overlaps the all-reduce with the backward pass bucket by bucket
(25 MB buckets), so the exposed part is ``max(all-reduce - backward, all-reduce x last bucket share)``.
**FSDP** (``fsdp``, ZeRO-3): per micro-batch an all-gather of the parameters for forward and for backward and
a reduce-scatter of the gradients (``3 (n-1)/n`` x parameter bytes at the precision's width), overlapped
with the forward and backward compute it prefetches for; only what exceeds that compute is exposed.
Tensor and pipeline parallelism are not composed here (their activation traffic needs the layer layout):
``compose`` refuses them and names the LLM route (``perfmodel.llm``) that predicts them.

Pure module.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from perfmodel.errors import InvalidInputError
from perfmodel.features import HardwareFeatures, resolve_hw
from perfmodel.gpus import PRECISIONS, GPUSpec, fp32_runs_tf32
from perfmodel.opcost import CostModel, Kernel
from perfmodel.profile import OpClass, Operator, OperatorProfile, Phase
from perfmodel.scaling import HW_COLUMNS, STACKS, allreduce_latency_s
from perfmodel.sharding import parse_sharding

LINK_EFFICIENCY = 0.7  # achieved share of a link's line rate by NCCL rings (features._SYNC_EFFICIENCY)
DDP_BUCKET_BYTES = 25 * 1024 * 1024  # torch.nn.parallel.DistributedDataParallel bucket_cap_mb default
# Measured / predicted samples/s of the composed route on held-out models, 10th and 90th percentiles
# (bench/opmodel_accuracy.py, leave one model out, 10,412 rows: 0.15 / 1.04 / 3.27 at the 10th / 50th /
# 90th): the ~80% interval ``compose_interval`` gives. Wide: the research tables' harnesses run some
# models 3-7x slower than their operators predict (docs/opmodel.md).
INTERVAL_RATIO = (0.15, 3.27)
# Host time per forward/backward operator of an eager PyTorch step (``step_compute``). 0: chosen among
# 0, 5, 10, 20, 40 us on the training rows of each split by bench/opmodel_accuracy.py, 0 won in 22 of 24
# folds (40 us when deepspeech2 was held out, 10 us for sia_azure).
HOST_OP_S = 0.0
_MATMUL = (OpClass.GEMM, OpClass.ATTENTION)
_LINK_COL = HW_COLUMNS.index("link_gbs")


def dtypes_for(precision: str, spec: GPUSpec, stack: str = "research") -> tuple[str, str, str]:
    """(dtype of the GEMMs and attention, of the convolutions, of the other tensors) a job at
    ``precision`` on software stack ``stack`` runs on ``spec`` (module docstring)."""
    if precision not in PRECISIONS:
        raise InvalidInputError(f"precision: must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    if stack not in STACKS:
        raise InvalidInputError(f"stack: must be one of {', '.join(STACKS)}, got {stack!r}")
    ampere = spec.compute_capability >= (8, 0) and spec.tf32_tflops > 0
    if precision in ("fp32", "tf32"):

        def run(convolution: bool) -> str:
            tf32 = precision == "tf32" or fp32_runs_tf32(stack, convolution)
            return "tf32" if ampere and tf32 else "fp32"

        return run(False), run(True), "fp32"
    if precision in ("amp", "fp16"):
        return "fp16", "fp16", "fp16"
    if precision == "bf16":
        return "bf16", "bf16", "bf16"
    mm = "fp8" if spec.fp8_tflops > 0 else "bf16"
    return mm, mm, "bf16"


@dataclass(frozen=True, slots=True)
class StepBreakdown:
    """One predicted training step: seconds per phase and per operator class, and communication."""

    forward_s: float
    backward_s: float
    optimizer_s: float
    communication_s: float  # the collectives' whole time
    exposed_communication_s: float  # the part not hidden behind compute
    by_class_s: Mapping[str, float] = field(default_factory=dict)

    @property
    def compute_s(self) -> float:
        return self.forward_s + self.backward_s + self.optimizer_s

    @property
    def step_s(self) -> float:
        return self.compute_s + self.exposed_communication_s


@dataclass(frozen=True, slots=True)
class ComposedPrediction:
    """Throughput of a job composed from its operators (``samples_per_s`` of the whole job)."""

    samples_per_s: float
    iters_per_s: float
    gpu_type: str
    gpus_per_node: int
    micro_batch: int
    global_batch: int
    grad_accumulation: int
    matmul_dtype: str
    conv_dtype: str
    other_dtype: str
    sharding: str
    step: StepBreakdown
    low_confidence: bool


def _kernel(o: Operator, matmul_dtype: str, conv_dtype: str, other_dtype: str) -> Kernel:
    """The kernel of one operator instance at the job's dtypes; bytes rescaled from the profile's FP32."""
    if o.op_class == OpClass.OPTIMIZER:
        return Kernel("optimizer", o.flops, o.bytes, "fp32")
    width = {"fp32": 4.0, "tf32": 4.0, "fp16": 2.0, "bf16": 2.0, "fp8": 2.0}[other_dtype]
    nbytes = o.bytes * width / 4.0
    if o.op_class in _MATMUL:
        g = o.gemm
        conv = "conv" in o.op.lower()
        matmul_dtype = conv_dtype if conv else matmul_dtype
        if g is None:
            return Kernel(o.op_class.value, o.flops, nbytes, matmul_dtype, conv=conv)
        return Kernel(o.op_class.value, o.flops, nbytes, matmul_dtype, g.m, g.n, g.k, g.batch, conv)
    return Kernel(o.op_class.value, o.flops, nbytes, other_dtype)


def step_compute(
    profile: OperatorProfile,
    spec: GPUSpec,
    precision: str,
    model: CostModel,
    host_op_s: float = 0.0,
    stack: str = "research",
) -> tuple[float, float, float, dict[str, float]]:
    """(forward, backward, optimizer, per-class) seconds of one step of ``profile`` at its own batch.

    Each forward and backward operator takes at least ``host_op_s``: eager PyTorch dispatches one operator
    at a time from the host, so a step of many small kernels is bound by the host, not the GPU.
    """
    mm, conv, other = dtypes_for(precision, spec, stack)
    phases = {Phase.FORWARD: 0.0, Phase.BACKWARD: 0.0, Phase.OPTIMIZER: 0.0}
    by_class: dict[str, float] = {}
    for o in profile.operators:
        t = model.kernel_time(_kernel(o, mm, conv, other), spec)
        if o.phase != Phase.OPTIMIZER:
            t = max(t, host_op_s)
        t *= o.count
        phases[o.phase] += t
        by_class[o.op_class.value] = by_class.get(o.op_class.value, 0.0) + t
    return phases[Phase.FORWARD], phases[Phase.BACKWARD], phases[Phase.OPTIMIZER], by_class


def _param_bytes(profile: OperatorProfile) -> float:
    if profile.param_bytes_by_dtype:
        return float(sum(profile.param_bytes_by_dtype.values()))
    return 4.0 * profile.model.parameters


def compose(
    profile: OperatorProfile,
    hardware: HardwareFeatures,
    precision: str,
    global_batch: int,
    model: CostModel,
    sharding: str = "ddp",
    micro_batch: int | None = None,
    activation_checkpointing: bool = False,
    step_cache: dict[tuple[object, ...], tuple[float, float, float, dict[str, float]]] | None = None,
    host_op_s: float | None = None,
    stack: str = "research",
) -> ComposedPrediction:
    """Predict one job from its operator profile (module docstring); ``InvalidInputError`` names the field.

    ``global_batch`` is the batch of one optimizer step over all GPUs; each GPU runs ``global_batch /
    GPUs`` samples (rounded up), in micro-batches of ``micro_batch`` (default: all at once). With
    ``activation_checkpointing`` the backward pass recomputes the forward. ``step_cache``, when given,
    memoises the operator sum per (profile, micro-batch, GPU variant, precision, cost model) for callers
    that ask many placements of the same job (the caller owns it; it must not outlive the objects).
    ``host_op_s``: the host's time per forward/backward operator (default ``HOST_OP_S``). ``stack``: the
    job's software stack (``scaling.STACKS``), which decides how ``fp32`` runs (``dtypes_for``).
    """
    host = HOST_OP_S if host_op_s is None else host_op_s
    hw = resolve_hw(hardware)
    spec, n = hw.spec, hw.num_gpus
    if global_batch <= 0:
        raise InvalidInputError(f"batch_size: must be > 0, got {global_batch}")
    shard = parse_sharding(sharding)
    if shard.kind == "tp":
        raise InvalidInputError(
            f"sharding: {shard} (tensor/pipeline parallel) is not composed from operators; "
            "predict it with an LLM config (perfsched predict --model <llm> --sharding ...)"
        )
    per_gpu = -(-global_batch // n)
    micro = per_gpu if micro_batch is None else micro_batch
    if micro <= 0:
        raise InvalidInputError(f"micro_batch: must be > 0, got {micro}")
    micro = min(micro, per_gpu)
    accumulation = -(-per_gpu // micro)
    mm, conv, other = dtypes_for(precision, spec, stack)
    key = (id(profile), micro, spec.variant, precision, id(model), host, stack)
    cached = step_cache.get(key) if step_cache is not None else None
    if cached is None:
        cached = step_compute(profile.at_batch(micro), spec, precision, model, host, stack)
        if step_cache is not None:
            step_cache[key] = cached
    fwd, bwd, opt, by_class = cached
    if activation_checkpointing:
        bwd += fwd
    fwd, bwd = fwd * accumulation, bwd * accumulation
    by_class = {k: v * accumulation if k != "optimizer" else v for k, v in by_class.items()}
    comm = exposed = 0.0
    if n > 1:
        link = hw.nums[_LINK_COL] * 1e9 * LINK_EFFICIENCY
        latency = allreduce_latency_s(n, hw.num_nodes, hw.gpus_per_node)
        ring = (n - 1.0) / n
        if shard.kind == "ddp":
            grad = _param_bytes(profile)
            comm = 2.0 * ring * grad / link + latency
            last_bucket = min(1.0, DDP_BUCKET_BYTES / max(grad, 1.0))
            exposed = max(comm - bwd, comm * last_bucket)
        else:  # fsdp: per micro-batch, gather for forward and backward, reduce-scatter the gradients
            width = 4.0 if precision in ("fp32", "tf32") else 2.0
            volume = 3.0 * ring * profile.model.parameters * width
            comm = accumulation * (volume / link + 3.0 * latency)
            exposed = max(0.0, comm - (fwd + bwd))
    step = StepBreakdown(fwd, bwd, opt, comm, exposed, by_class)
    t = step.step_s
    if not (t > 0 and math.isfinite(t)):
        raise InvalidInputError(f"profile {profile.model.name!r}: its operators add up to no work")
    return ComposedPrediction(
        samples_per_s=global_batch / t,
        iters_per_s=1.0 / t,
        gpu_type=spec.gpu_type,
        gpus_per_node=hw.gpus_per_node,
        micro_batch=micro,
        global_batch=global_batch,
        grad_accumulation=accumulation,
        matmul_dtype=mm,
        conv_dtype=conv,
        other_dtype=other,
        sharding=str(shard),
        step=step,
        low_confidence=spec.low_confidence,
    )


def compose_interval(
    profile: OperatorProfile,
    hardware: HardwareFeatures,
    precision: str,
    global_batch: int,
    model: CostModel,
    sharding: str = "ddp",
    micro_batch: int | None = None,
    stack: str = "research",
) -> tuple[ComposedPrediction, float, float]:
    """``compose`` and its ~80% interval of samples/s: the 10th and 90th percentiles of measured /
    predicted throughput of the composed route on held-out models (``INTERVAL_RATIO``)."""
    p = compose(profile, hardware, precision, global_batch, model, sharding, micro_batch, stack=stack)
    lo, hi = INTERVAL_RATIO
    return p, p.samples_per_s * lo, p.samples_per_s * hi
