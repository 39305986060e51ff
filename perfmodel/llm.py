"""Large language models as first-class jobs: the LLM plan and the LLM scaling model.

An LLM job is a ``JobFeatures`` whose model is a zoo LLM (``perfmodel.zoo.LLMS``), or an ``LLMJobFeatures``
(a ``JobFeatures`` with the sequence length, the sharding, the micro-batch and activation checkpointing).
Its batch is the global batch in sequences; a sample is one sequence, so tokens/s = samples/s x sequence
length. ``Predictor.predict`` hands such rows to ``predict`` here (see ``is_llm_job``).

The sharding spec (``ddp``, ``fsdp``, ``tp<N>xpp<M>[xcp<K>]``) is ``perfmodel.sharding``'s.

Scaling model (one optimizer step of the global batch ``B`` sequences of ``S`` tokens on ``n`` GPUs)::

    compute = (B S / (dp cp) tokens x per-token time / (tp pp) + L / pp x micro-steps x T_LAYER)
              x (4/3 with activation checkpointing)
    per-token time = F_dense / (peak x E_GEMM x h' / (h' + H0)) + F_attention / (peak x E_ATT)
                     + BYTES x layers x h' / memory bandwidth          h' = hidden / tp
    step    = max(compute x (1 + bubble), data-parallel traffic / link) + tensor-parallel traffic / link
    bubble  = (pp - 1) / micro-batches per pipeline (1F1B schedule, Narayanan et al. 2021)

F_dense = 6 N_matmul and F_attention = 12 L h S are the two terms of the zoo's FLOPs per token: the
matmuls run at a fraction of peak that grows with their width, attention at its own (FlashAttention
reaches less of peak than a GEMM), and the memory-bound element-wise work between them (norms,
activations, residual adds) costs bytes over bandwidth: what makes one GPU's MFU differ from another's.
Both fractions are of the datasheet peak at the job's precision (not of a measured per-product
achievable fraction; docs/llm.md compares the two); FP8 runs only the dense matmuls at the FP8 rate and
the rest at BF16 (``compute_seconds_per_token``, ``gpus.fp8_tflops``).

Data-parallel traffic per GPU (bf16, ring collectives, 2 bytes a value, overlapped with compute): DDP
all-reduces the gradients (2 (d-1)/d x 2 N bytes, once a step: gradient accumulation skips the
all-reduce until the last micro-batch); FSDP all-gathers the parameters for forward and for backward and
reduce-scatters the gradients (3 (n-1)/n x 2 N) for every micro-batch (FULL_SHARD frees each layer's
gathered parameters after use, and ZeRO-3 reduces gradients as they are produced); tp/pp all-reduce the
gradients of their 1/(tp pp) of the model across the data-parallel group once a step with Megatron's
distributed optimizer (reduce-scatter + all-gather, 2 (d-1)/d x 2 N / (tp pp)). Tensor parallelism adds
4 all-reduces of the activations (micro-batch x S x hidden x 2 bytes) per layer and micro-batch, which are
not overlapped. Each such collective also pays its latency, NCCL's hierarchical model
(``scaling.allreduce_latency_s``, the same as a data-parallel job's gradient all-reduce): the gradient
all-reduce of DDP and tp/pp once a step, the tensor-parallel ones per call; FSDP's per-layer collectives'
latencies are in the fitted per-layer cost ``T_LAYER``. Links: NVLink (half the GPU's total, per
direction) or PCIe inside a node; across nodes the node's whole network (``network_gbps`` / 8): a ring
collective over k nodes carries about the whole buffer in and out of each node, and NCCL runs one ring
per NIC (rail), so each GPU's bus bandwidth is the node's network, not 1/(GPUs per node) of it (NCCL's
measured bus bandwidth across DGX nodes is about the node's line rate).

``E_GEMM``, ``H0``, ``E_ATT``, ``BYTES``, ``T_LAYER`` (a fixed cost per layer and micro-batch step:
collective and kernel-launch latencies) and the link efficiency are fitted (``bench/llm_fit.py``) on the
public LLM rows in ``../shared/throughput/public``: MosaicML llm-foundry's benchmark table (Apache-2.0;
``scripts/train/benchmarking/README.md``; MPT 125M-70B on A100 40/80 GB and H100, 8-512 GPUs, BF16,
FSDP) -- ``llm_fit.FIT``; docs/llm.md has the fit's figures. Tensor/pipeline parallelism
and DDP are physics only (the table has FSDP rows alone). Pure module (memoised pure functions).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING

from perfmodel.errors import InvalidInputError
from perfmodel.features import HardwareFeatures, HardwarePart, JobFeatures, resolve_hw
from perfmodel.gpus import GPUSpec, fp8_tflops
from perfmodel.llm_fit import FIT, LLMFit, estimate_arch
from perfmodel.predictions import Predictions
from perfmodel.profile import profile_fingerprint
from perfmodel.scaling import allreduce_latency_s
from perfmodel.sharding import Sharding, parse_sharding
from perfmodel.zoo import LLMArch, llm_arch, lookup_model

if TYPE_CHECKING:
    from perfmodel.measurements import Measurement


@dataclass(frozen=True, slots=True)
class LLMJobFeatures(JobFeatures):
    """A ``JobFeatures`` for an LLM: ``sequence_length`` (tokens per sample; None = the zoo default),
    ``sharding`` (spec text, empty = fsdp), ``micro_batch`` (sequences per GPU per forward; None = the
    per-data-parallel-rank batch, or 1 under pipeline parallelism), ``activation_checkpointing``, and
    for a model outside the zoo ``layers``/``hidden`` (estimated from ``params`` when not given) or its
    whole ``arch``.
    ``flops_per_sample`` is filled from the architecture when not given."""

    sequence_length: int | None = None
    sharding: str = ""
    micro_batch: int | None = None
    activation_checkpointing: bool = False
    layers: int | None = None
    hidden: int | None = None
    arch: LLMArch | None = None

    def __post_init__(self) -> None:
        if self.flops_per_sample is None and self.sequence_length and self.sequence_length > 0:
            arch = arch_of(self)
            if arch is not None:
                object.__setattr__(self, "flops_per_sample", arch.flops_per_sequence(self.sequence_length))
        key = (
            self.model,
            self.dataset,
            self.batch_size,
            self.precision,
            self.params,
            self.flops_per_sample,
            self.sequence_length,
            self.sharding,
            self.micro_batch,
            self.activation_checkpointing,
            self.layers,
            self.hidden,
            self.arch,
            None if self.profile is None else profile_fingerprint(self.profile),
        )
        object.__setattr__(self, "key", key)
        object.__setattr__(self, "_hash", hash(key))

    def __hash__(self) -> int:
        return self._hash


@lru_cache(maxsize=4096)
def _zoo_llm(model: str) -> LLMArch | None:
    info = lookup_model(model) if model else None
    return info.llm if info is not None else None


_IS_LLM_NAME: dict[str, bool] = {}


def is_llm_job(job: JobFeatures) -> bool:
    """Whether the LLM scaling model answers this job: an ``LLMJobFeatures``, or a zoo LLM by name.

    On every ``Predictor.predict`` row: one dictionary look-up per model spelling seen."""
    if isinstance(job, LLMJobFeatures):
        return True
    got = _IS_LLM_NAME.get(job.model)
    if got is None:
        got = _zoo_llm(job.model) is not None
        if len(_IS_LLM_NAME) < 65536:
            _IS_LLM_NAME[job.model] = got
    return got


def question_of(m: Measurement) -> tuple[JobFeatures, HardwareFeatures]:
    """The (job, placement) question a measurement answers: its precision, stack and exact product; a zoo
    LLM's row (which ``Predictor.predict`` answers with this module) as the ``LLMJobFeatures`` a user would
    submit, with its sequence length and sharding, and the micro-batch and activation checkpointing where
    its source states them (LLM rows of models outside the zoo stay with the learned model)."""
    hw = HardwareFeatures(
        m.gpu_product or m.gpu_type, m.num_gpus, m.gpus_per_node, m.num_nodes, m.interconnect, m.network_gbps
    )
    common = (
        m.model,
        m.dataset,
        m.batch_size,
        m.precision,
        m.params or None,
        m.flops_per_sample or None,
        m.stack,
    )
    if m.seq_len <= 0 or llm_arch(m.model) is None:
        return JobFeatures(*common), hw
    job = LLMJobFeatures(
        *common,
        sequence_length=m.seq_len,
        sharding=m.sharding,
        micro_batch=m.micro_batch or None,
        activation_checkpointing=m.activation_checkpointing,
    )
    return job, hw


def treat_as_llm(model: str, sequence_length: int | None, other_llm_fields: bool) -> bool:
    """Whether a job described by these fields is an LLM job (what the CLI and the scheduler ask): a zoo
    LLM, or any job that gives a sequence length; a zoo model that is not an LLM (``resnet50``) stays a
    data-parallel job even with a sharding or micro-batch (the learned model answers it); a model outside
    the zoo is an LLM when it gives any LLM field (sharding, micro-batch, activation checkpointing)."""
    if _zoo_llm(model) is not None or sequence_length is not None:
        return True
    if model and lookup_model(model) is not None:
        return False
    return other_llm_fields


def arch_of(job: JobFeatures) -> LLMArch | None:
    """The job's architecture: the zoo's, else estimated from ``params`` (None when neither is known)."""
    arch = _zoo_llm(job.model)
    if arch is not None:
        return arch
    if isinstance(job, LLMJobFeatures) and job.arch is not None:
        return job.arch
    if job.params is None or not job.params > 0 or not math.isfinite(job.params):
        return None
    layers = job.layers if isinstance(job, LLMJobFeatures) else None
    hidden = job.hidden if isinstance(job, LLMJobFeatures) else None
    return estimate_arch(float(job.params), layers, hidden)


@dataclass(frozen=True, slots=True)
class LLMPlan:
    """A checked LLM job on a placement: everything the scaling and memory models read."""

    model: str
    arch: LLMArch
    params_total: float
    params_active: float
    sequence_length: int
    global_batch: int
    micro_batch: int
    grad_accumulation: int
    activation_checkpointing: bool
    precision: str
    sharding: Sharding
    data_parallel: int
    hw: HardwarePart
    low_confidence: bool
    flops_per_token: float = field(default=0.0)

    @property
    def spec(self) -> GPUSpec:
        return self.hw.spec

    @property
    def num_gpus(self) -> int:
        return self.hw.num_gpus

    @property
    def tokens_per_step(self) -> float:
        return float(self.global_batch) * self.sequence_length


@lru_cache(maxsize=4096)
def _placement(hw: HardwareFeatures) -> HardwarePart:
    return resolve_hw(hw)


@lru_cache(maxsize=1024)
def _counts(arch: LLMArch, seq: int) -> tuple[float, float, float]:
    """(total parameters, active parameters, FLOPs per token at ``seq``) of an architecture, memoised."""
    return arch.params_total, arch.params_active, arch.flops_per_token(seq)


def plan(job: JobFeatures, hw: HardwareFeatures | HardwarePart) -> LLMPlan:
    """Check an LLM job on a placement; ``InvalidInputError`` names the bad field."""
    part = hw if isinstance(hw, HardwarePart) else _placement(hw)
    arch = arch_of(job)
    if arch is None:
        what = f"model {job.model!r} is not a zoo LLM" if job.model else "no model"
        raise InvalidInputError(
            f"params: an LLM needs a parameter count ({what}; give params, or a zoo LLM such as llama3-8b)"
        )
    llm_job = job if isinstance(job, LLMJobFeatures) else None
    seq = llm_job.sequence_length if llm_job is not None else None
    if seq is None:
        seq = arch.default_sequence
    if seq <= 0:
        raise InvalidInputError(f"sequence_length: must be > 0, got {seq}")
    if job.batch_size is None or job.batch_size <= 0:
        raise InvalidInputError(f"batch_size: must be > 0, got {job.batch_size}")
    sharding = parse_sharding(llm_job.sharding if llm_job is not None else "")
    if sharding.tp > arch.heads or arch.heads % sharding.tp:
        raise InvalidInputError(
            f"sharding: tensor-parallel degree {sharding.tp} must divide the {arch.heads} attention heads"
        )
    if sharding.pp > arch.layers:
        raise InvalidInputError(f"sharding: {sharding.pp} pipeline stages for {arch.layers} layers")
    dp = sharding.data_parallel(part.num_gpus)
    per_rank = max(1, -(-int(job.batch_size) // dp))
    micro = llm_job.micro_batch if llm_job is not None else None
    if micro is not None and micro <= 0:
        raise InvalidInputError(f"micro_batch: must be > 0, got {micro}")
    if micro is None:
        micro = 1 if sharding.pp > 1 else per_rank
    micro = min(micro, per_rank)
    zoo = _zoo_llm(job.model) is not None
    arch_total, arch_active, arch_flops = _counts(arch, int(seq))
    params_total = arch_total if zoo or job.params is None else float(job.params)
    scale = params_total / arch_total
    attention = 12.0 * arch.layers * arch.hidden * seq
    if llm_job is not None and llm_job.flops_per_sample is not None and llm_job.sequence_length is None:
        flops_per_token = llm_job.flops_per_sample / seq  # given per sample at the default length
    elif zoo:
        flops_per_token = arch_flops
    else:
        # only the count is known: every parameter multiplies (no embedding lookup discounted)
        flops_per_token = 6.0 * params_total + attention
    model_name = lookup_model(job.model).name if zoo else (job.model.strip().lower() or "custom-llm")  # type: ignore[union-attr]
    return LLMPlan(
        model=model_name,
        arch=arch,
        params_total=params_total,
        params_active=arch_active * scale,
        sequence_length=int(seq),
        global_batch=int(job.batch_size),
        micro_batch=int(micro),
        grad_accumulation=-(-per_rank // micro),
        activation_checkpointing=bool(llm_job.activation_checkpointing) if llm_job is not None else False,
        precision=job.precision,
        sharding=sharding,
        data_parallel=dp,
        hw=part,
        low_confidence=not zoo or part.spec.low_confidence,
        flops_per_token=flops_per_token,
    )


def _bus_gbs(p: LLMPlan, group: int, spans_nodes: bool) -> float:
    """Per-GPU bandwidth (GB/s, one direction) of a collective over ``group`` GPUs."""
    spec = p.hw.spec
    nvlink = p.hw.interconnect == "nvlink" and spec.nvlink_gbs > 0
    inside = spec.nvlink_gbs / 2.0 if nvlink else spec.pcie_gbs
    if not spans_nodes or group <= 1:
        return inside
    # a ring collective across nodes moves about the whole buffer in and out of each node, spread over
    # its NICs (NCCL runs one ring per rail), so each GPU's bus bandwidth is the node's whole network
    return min(inside, p.hw.network_gbps / 8.0)


def _fsdp_passes(p: LLMPlan) -> int:
    """How many times a step FSDP gathers the parameters and reduce-scatters the gradients: once for
    every micro-batch (module docstring)."""
    return p.grad_accumulation


# Bytes an FP8 (Transformer Engine) job moves per token, layer and hidden unit to cast GEMM inputs: about
# 16 h values a layer (forward: the inputs of the QKV, output, up and down projections, ~7 h; backward:
# their output gradients, ~9 h), each read in 16-bit and written in FP8 with its transpose (4 bytes),
# less what TE fuses into the preceding norm or activation: an estimate, not fitted (no FP8 zoo row here).
FP8_CAST_BYTES = 48.0


def compute_seconds_per_token(p: LLMPlan, fit: LLMFit = FIT) -> float:
    """Seconds one GPU spends per token of its share (no communication, no bubble, no recomputation):
    dense matmuls at the GEMM efficiency of their width, attention scores at the attention efficiency,
    and the element-wise traffic over memory bandwidth (module docstring).

    FP8: the dense matmuls' share of this 16-bit time runs at the FP8 rate, the rest (attention, which
    Transformer Engine keeps in BF16, and the element-wise work) at the BF16 rate: ``gpus.fp8_tflops``
    with the GEMM share of this architecture, plus ``FP8_CAST_BYTES`` of casting traffic (on a GPU with FP8
    units; elsewhere the job's 16-bit time)."""
    a, sh = p.arch, p.sharding
    fp8 = p.precision == "fp8"
    peak = p.spec.tflops("bf16" if fp8 else p.precision) * 1e12
    width = a.hidden / sh.tp
    attention = 12.0 * a.layers * a.hidden * p.sequence_length
    dense = max(p.flops_per_token - attention, 0.0)
    gemm = fit.gemm_efficiency * width / (width + fit.hidden_half)
    gemm_time = dense / gemm / peak / (sh.tp * sh.pp)
    flops_time = gemm_time + attention / fit.attention_efficiency / peak / (sh.tp * sh.pp)
    traffic = fit.elementwise_bytes * a.layers * width / (p.spec.memory_bandwidth_gbs * 1e9) / sh.pp
    t16 = flops_time + traffic
    if not fp8 or p.spec.tflops("fp8") <= p.spec.tflops("bf16"):
        return t16  # no FP8 units: Transformer Engine runs the job in 16-bit
    rate = fp8_tflops(p.spec, gemm_time / t16) * 1e12
    cast = FP8_CAST_BYTES * a.layers * width / (p.spec.memory_bandwidth_gbs * 1e9) / sh.pp
    return t16 * peak / rate + cast


def mfu(p: LLMPlan, fit: LLMFit = FIT) -> float:
    """Model-FLOPs utilisation of the compute part (no communication, no bubble, no recomputation)."""
    peak = p.spec.tflops(p.precision) * 1e12
    return p.flops_per_token / (p.sharding.tp * p.sharding.pp) / peak / compute_seconds_per_token(p, fit)


@dataclass(frozen=True, slots=True)
class StepTime:
    """One optimizer step: its parts in seconds (``total`` is what the throughput divides by)."""

    compute: float
    bubble: float
    data_parallel: float
    tensor_parallel: float
    total: float


def step_time(p: LLMPlan, fit: LLMFit = FIT) -> StepTime:
    """The scaling model of the module docstring for one step of the global batch."""
    n = p.num_gpus
    # every data-parallel rank (and context-parallel share) processes B S / (dp cp) tokens per step
    compute = p.tokens_per_step / (p.data_parallel * p.sharding.cp) * compute_seconds_per_token(p, fit)
    compute += p.arch.layers / p.sharding.pp * p.grad_accumulation * fit.layer_overhead_s
    if p.activation_checkpointing:
        compute *= 4.0 / 3.0
    sh = p.sharding
    micro_per_pipe = max(1, -(-p.global_batch // (p.data_parallel * p.micro_batch)))
    bubble = compute * (sh.pp - 1) / micro_per_pipe if sh.pp > 1 else 0.0
    nodes = p.hw.num_nodes
    gpn = p.hw.gpus_per_node
    bytes_ = 2.0
    if sh.kind == "ddp":
        d = p.data_parallel
        traffic = 2.0 * (d - 1) / d * bytes_ * p.params_total
        dp_spans = nodes > 1
    elif sh.kind == "fsdp":
        traffic = 3.0 * (n - 1) / n * bytes_ * p.params_total * _fsdp_passes(p)
        dp_spans = nodes > 1
    else:
        d = p.data_parallel
        traffic = 2.0 * (d - 1) / d * bytes_ * p.params_total / (sh.tp * sh.pp)
        # model-parallel groups are packed inside nodes first; the data-parallel group spans nodes as
        # soon as the job does (each node holds whole tp x cp groups at most)
        dp_spans = nodes > 1 and d > 1
    eff = fit.link_efficiency
    dp_time = traffic / (_bus_gbs(p, p.data_parallel if sh.kind != "fsdp" else n, dp_spans) * 1e9 * eff)
    if sh.kind != "fsdp" and p.data_parallel > 1:
        # the gradient all-reduce's latency once a step, NCCL's hierarchical model as for data-parallel
        # jobs (``scaling.allreduce_latency_s``); FSDP's per-layer collectives' latencies are in the
        # fitted per-layer cost (``LLMFit.layer_overhead_s``, fitted on FSDP rows)
        d_nodes = nodes if dp_spans else 1
        dp_time += allreduce_latency_s(p.data_parallel, d_nodes, -(-p.data_parallel // d_nodes))
    tp_time = 0.0
    if sh.tp > 1:
        per = 2.0 * (sh.tp - 1) / sh.tp * bytes_ * p.micro_batch * p.sequence_length / sh.cp * p.arch.hidden
        calls = 4 + (2 if p.activation_checkpointing else 0)
        micro_steps = p.grad_accumulation
        layers_here = p.arch.layers / sh.pp
        tp_nodes = -(-sh.tp // gpn)
        per_call = per / (_bus_gbs(p, sh.tp, sh.tp > gpn) * 1e9 * eff)
        per_call += allreduce_latency_s(sh.tp, tp_nodes, min(sh.tp, gpn))
        tp_time = micro_steps * layers_here * calls * per_call
    total = max(compute + bubble, dp_time) + tp_time
    return StepTime(compute, bubble, dp_time, tp_time, total)


def predict(rows: Sequence[tuple[JobFeatures, HardwareFeatures]], fit: LLMFit = FIT) -> Predictions:
    """Predictions for LLM rows (``InvalidInputError`` naming the row and field on bad input)."""

    s: list[float] = []
    lo: list[float] = []
    hi: list[float] = []
    its: list[float] = []
    ilo: list[float] = []
    ihi: list[float] = []
    low: list[bool] = []
    for i, (job, hw) in enumerate(rows):
        try:
            it, batch, low_confidence = _iterations(job, hw, fit)
        except InvalidInputError as exc:
            raise InvalidInputError(f"row {i}: {exc}") from exc
        widen = 2.0 if low_confidence else 1.0
        qlo, qhi = math.exp(widen * fit.log_q_low), math.exp(widen * fit.log_q_high)
        its.append(it)
        ilo.append(it * qlo)
        ihi.append(it * qhi)
        s.append(it * batch)
        lo.append(s[-1] * qlo)
        hi.append(s[-1] * qhi)
        low.append(low_confidence)
    return Predictions(s, its, lo, hi, ilo, ihi, low)


@lru_cache(maxsize=65536)
def _iterations(job: JobFeatures, hw: HardwareFeatures, fit: LLMFit) -> tuple[float, int, bool]:
    """(optimizer steps/s, global batch, low confidence) of one row; memoised (a pure function of
    hashable rows: scheduling rounds ask the same questions again)."""
    p = plan(job, hw)
    return 1.0 / step_time(p, fit).total, p.global_batch, p.low_confidence


def predict_mixed(
    rows: Sequence[tuple[JobFeatures, HardwareFeatures]],
    learned: Callable[[Sequence[tuple[JobFeatures, HardwareFeatures]]], Predictions],
    fit: LLMFit = FIT,
) -> Predictions:
    """Predictions for a batch in which some rows are LLM jobs: those here (under ``fit``), the others by
    ``learned`` (the predictor's own path), merged back in row order."""

    llm_at = [i for i, (job, _) in enumerate(rows) if is_llm_job(job)]
    other_at = [i for i, (job, _) in enumerate(rows) if not is_llm_job(job)]
    parts: list[tuple[list[int], Predictions]] = []
    if llm_at:
        try:
            parts.append((llm_at, predict([rows[i] for i in llm_at], fit)))
        except InvalidInputError as exc:
            # renumber "row k" of the LLM sub-batch to the caller's row
            msg = str(exc)
            m = re.match(r"row (\d+): (.*)", msg, re.S)
            if m:
                raise InvalidInputError(f"row {llm_at[int(m.group(1))]}: {m.group(2)}") from exc
            raise
    if other_at:
        parts.append((other_at, learned([rows[i] for i in other_at])))
    n = len(rows)
    cols: list[list[float]] = [[0.0] * n for _ in range(6)]
    lowc = [False] * n
    for at, pr in parts:
        for k, i in enumerate(at):
            cols[0][i] = pr.samples_per_s[k]
            cols[1][i] = pr.iters_per_s[k]
            cols[2][i] = pr.low[k]
            cols[3][i] = pr.high[k]
            cols[4][i] = pr.iters_low[k]
            cols[5][i] = pr.iters_high[k]
            lowc[i] = pr.low_confidence[k]
    return Predictions(cols[0], cols[1], cols[2], cols[3], cols[4], cols[5], lowc)
