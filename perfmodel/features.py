"""Job and hardware features of a throughput question, the physical scaling model, and the feature vector.

``JobFeatures`` describes the job (zoo model or explicit parameters and FLOPs per sample, dataset, global
batch, precision, software stack); ``HardwareFeatures`` the placement (GPU type or product label, GPUs,
GPUs per node, nodes, interconnect inside a node, network between nodes). ``resolve`` checks both and
turns them into numbers; ``model_terms`` is the data-parallel scaling model the learned predictor
corrects, the same vectorised function for training and serving:

    iteration time = compute(per-GPU batch) + sync(parameter bytes, slowest link of the placement)

- compute = the FLOP-bound time (per-GPU batch x FLOPs per sample / (peak FLOP/s x efficiency)) and the
  memory-bound time (the same FLOPs x bytes factor / (arithmetic intensity of the family x memory
  bandwidth)) combined as ``(flop^p + memory^p)^(1/p)`` (p fitted by ``perfmodel.train``; held at 1, a sum,
  it costs leave-one-model-out 6 points of MRE with anchors carrying the held-out generations,
  ``bench/perfmodel_accuracy.py``), plus weight traffic
  (12 x parameters over memory bandwidth) and a fixed step overhead, divided by the software stack's
  speed factor. The peak is the GPU's dense rate at the job's precision (``GPUSpec.tflops``: for fp32 on
  Ampere and newer TF32 where the job's stack runs its maths in TF32, ``fp32_in_tf32``; tensor cores for
  amp/bf16; for fp8 the Amdahl blend of the FP8 and BF16 peaks, ``effective_tflops``); the bytes
  factor is 1 for fp32/tf32 and 1/2 for 16-bit and fp8 activations. A GPU the model never saw gets a
  time from its datasheet figures.
- sync = all-reduce of the gradients: 2 (n-1)/n x parameter bytes (fp32 gradients) / slowest link
  bandwidth, at 70% efficiency, plus the all-reduce's latency as NCCL runs it (hierarchical: the cheaper
  of a ring, 2 (n - N) hops inside the N nodes and 2 (N - 1) across them, and a tree, 2 (g - 1) hops
  inside a node of g GPUs and 2 log2(N) across, at a slightly lower bandwidth; ``_allreduce_latencies``),
  times the share not hidden behind the backward pass. The slowest link is the network
  (``network_gbps``) when the job spans nodes, else NVLink (per-direction half of the GPU's total) or PCIe.

The efficiencies, per-family intensities, overhead and stack factors are ``Physics``: fitted by
``perfmodel.train`` on the measured table (a dozen numbers, least squares in log time) and stored in the
model file; ``Physics()`` holds round priors for use without a model file.

``FEATURE_SCHEMA_VERSION`` names this feature layout; a trained model file records the version it was
trained on and ``perfmodel.predictor`` refuses another one. Pure module.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from perfmodel.errors import InvalidInputError
from perfmodel.gpus import (
    FP8_GEMM_SHARE,
    PRECISIONS,
    GPUSpec,
    canonical_gpu_type,
    fp8_tflops,
    fp32_runs_tf32,
    gpu_spec,
    spec_for_product,
    spec_from_labels,
)
from perfmodel.profile import OperatorProfile, profile_fingerprint
from perfmodel.zoo import Family, canonical_dataset, lookup_model

FEATURE_SCHEMA_VERSION = "perfmodel-features-v5"
# Software stacks (how far the job's code is tuned; see ``perfmodel.public``): the feature's codes.
# ``research`` is what a typical user's PyTorch job is and the default.
STACKS: dict[str, int] = {"research": 0, "vendor": 1, "mlperf": 2, "llm": 3}
# Peak-rate columns of a placement: one per precision, then fp32 run in TF32 (``fp32_in_tf32``).
_FP32_CONV = len(PRECISIONS)
_HALF_BYTES = {"fp32": 1.0, "tf32": 1.0}
# Classes of the slowest link a placement's gradient sync crosses (``Design.link_class``).
LINK_PCIE, LINK_NVLINK, LINK_NETWORK = 0, 1, 2
INTERCONNECTS = ("nvlink", "pcie")

_SYNC_EFFICIENCY = 0.7
# Latency of one all-reduce of the gradients, hierarchical as NCCL runs it (its cost model: NVIDIA/nccl
# src/graph/tuning.cc, the base and per-hop latencies of the Simple protocol, which messages of the size of a
# gradient bucket take; read to learn, not copied). A call costs a base latency; a ring over n GPUs on N
# nodes takes 2 (n - N) hops inside nodes and 2 (N - 1) across the network; a (double binary) tree takes
# 2 (g - 1) hops inside a node of g GPUs and 2 log2(N) across the network, at a slightly lower bus bandwidth
# than the ring. NCCL picks the cheaper per call: the ring on one node and for large messages on a few nodes,
# the tree at hundreds of nodes, where a flat ring's thousands of steps would cost a third of a second.
_ALLREDUCE_BASE_LATENCY_S = 8.4e-6  # baseLatencies, Ring and Tree, Simple
_INTRA_NODE_HOP_S = 4.0e-6  # hwLatencies NVLINK and PCI, Tree, Simple (Ring: 3.4 NVLink, 5.7 PCIe)
_NETWORK_HOP_S = 14e-6  # hwLatencies NET, Ring and Tree, Simple
_TREE_BUS_SHARE = 0.92  # the tree all-reduce's bus bandwidth against the ring's (busBw x .92 there)
# Floor of a multi-GPU iteration (``Design.sync_floor``): the ring all-reduce of the gradients at the slowest
# link's full line rate, times this share. Data parallelism can hide the all-reduce behind the backward
# pass but cannot move the bytes faster than the link, so an iteration never takes less; the share (1/2)
# leaves room for 16-bit gradient all-reduce in tuned code and for node networks labelled per NIC where
# the node has several (the measured tables' fastest multi-node row reaches 0.53 of the floor at 1).
SYNC_FLOOR_SHARE = 0.5


@dataclass(frozen=True, slots=True)
class Physics:
    """The fitted constants of the scaling model (see the module docstring).

    ``cuda_efficiency`` / ``tensor_efficiency``: fraction of the peak reached on FP32 CUDA cores / on
    tensor cores; ``intensity``: FLOPs per byte of activation traffic at fp32, per ``Family`` (in
    ``Family`` order); ``overhead_s``: fixed time per step; ``stack``: log speed factor per ``STACKS``
    code (0 for ``research``).
    """

    cuda_efficiency: float = 0.6
    tensor_efficiency: float = 0.35
    intensity: tuple[float, ...] = (30.0,) * len(Family)
    overhead_s: float = 2e-3
    stack: tuple[float, ...] = (0.0,) * len(STACKS)
    # FLOP-bound and memory-bound time overlap: compute = (flop^p + memory^p)^(1/p) (p = 1: they add,
    # p -> infinity: the roofline's max).
    overlap_p: float = 2.0
    # Share of the all-reduce not hidden behind the backward pass.
    sync_exposed: float = 1.0
    # Tensor-core efficiency of TF32 and of FP8 relative to 16-bit inputs. Both priors are 1: the datasheet
    # rate at the precision with no further discount. A TF32 job's fp32 activations and element-wise work
    # are already in the memory term (bytes factor 1, twice a 16-bit job's), and FP8's rate is already the
    # Amdahl blend of ``gpus.fp8_tflops``, which speeds up only the GEMMs. Fitted on every TF32 row of the
    # table the factor reads 0.97; a table without TF32 rows (a held-out Ampere) keeps the prior.
    tf32_factor: float = 1.0
    fp8_factor: float = 1.0

    def to_json(self) -> dict[str, object]:
        return {
            "cuda_efficiency": self.cuda_efficiency,
            "tensor_efficiency": self.tensor_efficiency,
            "intensity": list(self.intensity),
            "overhead_s": self.overhead_s,
            "stack": list(self.stack),
            "overlap_p": self.overlap_p,
            "sync_exposed": self.sync_exposed,
            "tf32_factor": self.tf32_factor,
            "fp8_factor": self.fp8_factor,
        }

    @staticmethod
    def from_json(raw: Mapping[str, object]) -> Physics:
        """From ``to_json``'s object; ``ValueError`` on a bad one."""
        intensity = tuple(float(v) for v in raw["intensity"])  # type: ignore[attr-defined]
        stack = tuple(float(v) for v in raw["stack"])  # type: ignore[attr-defined]
        if len(intensity) != len(Family) or len(stack) != len(STACKS):
            raise ValueError("physics: intensity or stack of the wrong length")
        p = Physics(
            float(raw["cuda_efficiency"]),  # type: ignore[arg-type]
            float(raw["tensor_efficiency"]),  # type: ignore[arg-type]
            intensity,
            float(raw["overhead_s"]),  # type: ignore[arg-type]
            stack,
            float(raw["overlap_p"]),  # type: ignore[arg-type]
            float(raw["sync_exposed"]),  # type: ignore[arg-type]
            float(raw["tf32_factor"]),  # type: ignore[arg-type]
            float(raw["fp8_factor"]),  # type: ignore[arg-type]
        )
        positive = (p.cuda_efficiency, p.tensor_efficiency, p.sync_exposed, *intensity)
        if not all(v > 0 and math.isfinite(v) for v in positive) or not p.overlap_p >= 1.0:
            raise ValueError("physics: efficiencies and intensities must be positive, overlap_p >= 1")
        return p


DEFAULT_PHYSICS = Physics()

FEATURE_NAMES: tuple[str, ...] = (
    "log_local_batch",
    "log_params",
    "log_flops_per_sample",
    "log_fp32_tflops",
    "log_precision_tflops",
    "log_mem_bandwidth",
    "log_mem_gib",
    "compute_capability",
    "family",
    "half_precision",
    "log_compute_time",
    "log_weight_time",
    "log_num_gpus",
    "num_nodes",
    "log_gpus_per_node",
    "log_sync_time",
    "log_sync_share",
    "log_scaling_time",
    "stack",
    "log_sm_count",
    "log_l2_mib",
    "flop_share",
)
_FAMILY_CODE = {f: i for i, f in enumerate(Family)}


@dataclass(frozen=True, slots=True)
class JobFeatures:
    """The job side: ``model`` is a zoo name (any spelling) or free text when ``params`` and
    ``flops_per_sample`` are given; ``batch_size`` is the global batch; ``precision`` one of
    fp32 | amp | fp16 | bf16. ``params``/``flops_per_sample`` override the zoo's figures when given.
    ``profile`` is the job's operator profile (``perfmodel.profile``) when it has one: the operators of
    one training step, for a predictor that composes a step from them; the row's key carries a
    fingerprint of it (name, micro-batch, FLOPs, operator count), not the profile itself."""

    model: str = ""
    dataset: str = ""
    batch_size: int = 0
    precision: str = "fp32"
    params: float | None = None
    flops_per_sample: float | None = None
    stack: str = "research"
    profile: OperatorProfile | None = field(default=None, compare=False)
    # Hash computed once: rows are dictionary keys in the predictor's caches on every call. ``key`` is
    # the fields as a plain tuple (the predictor's caches key on it: tuples hash and compare in C).
    _hash: int = field(init=False, repr=False, compare=False, default=0)
    key: tuple[object, ...] = field(init=False, repr=False, compare=False, default=())

    def __post_init__(self) -> None:
        key = (
            self.model,
            self.dataset,
            self.batch_size,
            self.precision,
            self.params,
            self.flops_per_sample,
            self.stack,
            None if self.profile is None else profile_fingerprint(self.profile),
        )
        object.__setattr__(self, "key", key)
        object.__setattr__(self, "_hash", hash(key))

    def __hash__(self) -> int:
        return self._hash


@dataclass(frozen=True, slots=True)
class HardwareFeatures:
    """The placement: ``gpu_type`` is a canonical type or an ``nvidia.com/gpu.product`` label.

    ``gpus_per_node`` 0 means ``ceil(num_gpus / num_nodes)``. For an unknown product, ``memory_mib`` and
    ``compute_capability`` (GFD labels) give a low-confidence spec.
    """

    gpu_type: str
    num_gpus: int = 1
    gpus_per_node: int = 0
    num_nodes: int = 1
    interconnect: str = "nvlink"
    network_gbps: float = 100.0
    memory_mib: float | None = None
    compute_capability: str | None = None
    _hash: int = field(init=False, repr=False, compare=False, default=0)
    key: tuple[object, ...] = field(init=False, repr=False, compare=False, default=())

    def __post_init__(self) -> None:
        key = (
            self.gpu_type,
            self.num_gpus,
            self.gpus_per_node,
            self.num_nodes,
            self.interconnect,
            self.network_gbps,
            self.memory_mib,
            self.compute_capability,
        )
        object.__setattr__(self, "key", key)
        object.__setattr__(self, "_hash", hash(key))

    def __hash__(self) -> int:
        return self._hash


@dataclass(frozen=True, slots=True)
class Resolved:
    """A checked (job, placement) pair in numbers, ready for the scaling model and the feature vector."""

    model: str
    dataset: str
    family: Family
    batch_size: int
    precision: str
    params: float
    flops_per_sample: float
    spec: GPUSpec
    num_gpus: int
    gpus_per_node: int
    num_nodes: int
    interconnect: str
    network_gbps: float
    low_confidence: bool
    # The numbers ``feature_matrix`` reads, in ``_NUM_COLUMNS`` order (filled by ``combine``).
    nums: tuple[float, ...] = ()

    @property
    def local_batch(self) -> float:
        return self.batch_size / self.num_gpus


@dataclass(frozen=True, slots=True)
class JobPart:
    """The checked job side of a row (see ``resolve_job``)."""

    model: str
    dataset: str
    family: Family
    batch_size: int
    precision: str
    params: float
    flops_per_sample: float
    low_confidence: bool
    nums: tuple[float, ...] = ()
    precision_index: int = 0
    # Share of the job's 16-bit step time in GEMMs, what FP8 speeds up (``gpus.fp8_tflops``).
    gemm_share: float = FP8_GEMM_SHARE


@dataclass(frozen=True, slots=True)
class HardwarePart:
    """The checked placement side of a row (see ``resolve_hw``)."""

    spec: GPUSpec
    num_gpus: int
    gpus_per_node: int
    num_nodes: int
    interconnect: str
    network_gbps: float
    nums: tuple[float, ...] = ()
    tflops_by_precision: tuple[float, ...] = ()


_FAMILY_HINTS: tuple[tuple[str, Family], ...] = (
    (
        r"gpt|llama|mistral|mixtral|qwen|mpt|opt|bert|t5|bart|neox|falcon|gemma|phi|bloom|transformer|vit",
        Family.TRANSFORMER,
    ),
    (r"resnet|resnext|vgg|efficientnet|mobilenet|inception|densenet|convnext|unet|cnn", Family.CNN),
    (r"yolo|ssd|rcnn|retinanet|detr", Family.DETECTION),
    (r"lstm|gru|rnn|deepspeech", Family.RNN),
    (r"ncf|dlrm|recommend|wide.?and.?deep", Family.RECSYS),
)


def family_hint(model: str) -> Family:
    """Architecture family of a model the zoo does not know, guessed from its name (``OTHER`` if none)."""
    name = model.strip().lower()
    for pattern, family in _FAMILY_HINTS:
        if re.search(pattern, name):
            return family
    return Family.OTHER


def resolve_job(job: JobFeatures) -> JobPart:
    """Check and complete the job side; ``InvalidInputError`` names the bad field."""
    info = lookup_model(job.model) if job.model else None
    if info is None and (job.params is None or job.flops_per_sample is None):
        what = f"unknown model {job.model!r}" if job.model else "no model"
        raise InvalidInputError(
            f"model: {what}; give a zoo model name (see `perfmodel.zoo.model_names()`) or both params "
            "and flops_per_sample"
        )
    if job.batch_size is None or job.batch_size <= 0:
        raise InvalidInputError(f"batch_size: must be > 0, got {job.batch_size}")
    if job.precision not in PRECISIONS:
        raise InvalidInputError(f"precision: must be one of {', '.join(PRECISIONS)}, got {job.precision!r}")
    if job.stack not in STACKS:
        raise InvalidInputError(f"stack: must be one of {', '.join(STACKS)}, got {job.stack!r}")
    params = job.params if job.params is not None else (info.params if info else 0.0)
    if not params or params <= 0 or not math.isfinite(params):
        raise InvalidInputError(f"params: must be > 0, got {job.params}")
    dataset = canonical_dataset(job.dataset) if job.dataset else (info.default_dataset if info else "")
    flops = (
        job.flops_per_sample if job.flops_per_sample is not None else (info.flops_on(dataset) if info else 0)
    )
    if not flops or flops <= 0 or not math.isfinite(flops):
        raise InvalidInputError(f"flops_per_sample: must be > 0, got {job.flops_per_sample}")
    family = info.family if info else family_hint(job.model)
    # An fp32 job runs its maths in TF32 on Ampere and newer where its stack does (``fp32_in_tf32``).
    pindex = (
        _FP32_CONV
        if job.precision == "fp32" and fp32_in_tf32(family, job.stack)
        else PRECISIONS.index(job.precision)
    )
    return JobPart(
        model=info.name if info else (job.model.strip().lower() or "custom"),
        dataset=dataset,
        family=family,
        batch_size=int(job.batch_size),
        precision=job.precision,
        params=float(params),
        flops_per_sample=float(flops),
        low_confidence=info is None,
        nums=(
            float(job.batch_size),
            float(params),
            float(flops),
            float(_FAMILY_CODE[family]),
            _HALF_BYTES.get(job.precision, 0.5),
            float(STACKS[job.stack]),
            1.0 if job.precision == "fp8" else 0.0,
        ),
        precision_index=pindex,
        gemm_share=_gemm_share(job.precision, family, float(params), float(flops)),
    )


# Families whose FLOPs are convolutions (classifiers, detectors, image-to-image GANs).
CONV_FAMILIES = frozenset({Family.CNN, Family.DETECTION, Family.GAN})


def fp32_in_tf32(family: Family, stack: str) -> bool:
    """Whether an fp32 job of ``family`` on ``stack`` runs its matrix maths at the TF32 rate on Ampere and
    newer (``gpus.fp32_runs_tf32`` for the operator class that carries the family's FLOPs: convolutions
    for ``CONV_FAMILIES``, matmuls otherwise)."""
    return fp32_runs_tf32(stack, family in CONV_FAMILIES)


def _gemm_share(precision: str, family: Family, params: float, flops: float) -> float:
    """GEMM share of an FP8 job's step (``gpus.fp8_tflops``): for a transformer from its parameter count
    and FLOPs per sample (``llm.fp8_gemm_share``: the longer its sequence, the more of it is attention,
    which stays in BF16), else ``gpus.FP8_GEMM_SHARE``; other precisions do not use it."""
    if precision != "fp8" or family is not Family.TRANSFORMER:
        return FP8_GEMM_SHARE
    from perfmodel.llm import fp8_gemm_share  # perfmodel.llm builds on this module

    return fp8_gemm_share(params, flops)


def resolve_hw(hw: HardwareFeatures) -> HardwarePart:
    """Check and complete the placement side; ``InvalidInputError`` names the bad field."""
    if hw.num_gpus is None or hw.num_gpus <= 0:
        raise InvalidInputError(f"gpus: must be > 0, got {hw.num_gpus}")
    if hw.num_nodes <= 0 or hw.num_nodes > hw.num_gpus:
        raise InvalidInputError(f"num_nodes: must be in 1..{hw.num_gpus} (the GPU count), got {hw.num_nodes}")
    per_node = hw.gpus_per_node or -(-hw.num_gpus // hw.num_nodes)
    if per_node <= 0 or per_node > hw.num_gpus or per_node * hw.num_nodes < hw.num_gpus:
        raise InvalidInputError(
            f"gpus_per_node: {hw.gpus_per_node} cannot hold {hw.num_gpus} GPUs on {hw.num_nodes} node(s)"
        )
    if hw.interconnect not in INTERCONNECTS:
        raise InvalidInputError(f"interconnect: must be nvlink or pcie, got {hw.interconnect!r}")
    if not hw.network_gbps or hw.network_gbps <= 0:
        raise InvalidInputError(f"network_gbps: must be > 0, got {hw.network_gbps}")
    canonical = canonical_gpu_type(hw.gpu_type)
    spec: GPUSpec | None
    if canonical is not None:
        spec = spec_for_product(hw.gpu_type) if canonical != hw.gpu_type else gpu_spec(canonical)
    else:
        spec = spec_from_labels(hw.memory_mib, hw.compute_capability)
    if spec is None:
        raise InvalidInputError(
            f"gpu_type: unknown GPU {hw.gpu_type!r} (not a known product label, and no memory or "
            "compute-capability labels to estimate it from)"
        )
    if hw.num_nodes > 1:
        link, link_class = hw.network_gbps / 8.0, LINK_NETWORK
    elif hw.interconnect == "nvlink" and spec.nvlink_gbs > 0:
        link, link_class = spec.nvlink_gbs / 2.0, LINK_NVLINK
    else:
        link, link_class = spec.pcie_gbs, LINK_PCIE
    return HardwarePart(
        spec,
        int(hw.num_gpus),
        int(per_node),
        int(hw.num_nodes),
        hw.interconnect,
        float(hw.network_gbps),
        nums=(
            float(hw.num_gpus),
            float(hw.num_nodes),
            float(per_node),
            spec.fp32_tflops,
            spec.memory_bandwidth_gbs,
            spec.memory_gib,
            spec.compute_capability[0] + spec.compute_capability[1] / 10.0,
            link,
            float(link_class),
            float(spec.sm_count or 1),
            float(spec.l2_mib or 1.0),
        ),
        tflops_by_precision=(
            *(effective_tflops(spec, p) for p in PRECISIONS),
            effective_tflops(spec, "fp32", tf32_convolutions=True),
        ),
    )


def combine(j: JobPart, h: HardwarePart) -> Resolved:
    """One resolved row from its checked parts."""
    return Resolved(
        j.model,
        j.dataset,
        j.family,
        j.batch_size,
        j.precision,
        j.params,
        j.flops_per_sample,
        h.spec,
        h.num_gpus,
        h.gpus_per_node,
        h.num_nodes,
        h.interconnect,
        h.network_gbps,
        j.low_confidence or h.spec.low_confidence,
        j.nums
        + h.nums
        + (
            fp8_tflops(h.spec, j.gemm_share)
            if j.precision == "fp8"
            else h.tflops_by_precision[j.precision_index],
        ),
    )


def resolve(job: JobFeatures, hw: HardwareFeatures) -> Resolved:
    """Check and complete a (job, placement) pair; ``InvalidInputError`` names the bad field."""
    return combine(resolve_job(job), resolve_hw(hw))


def effective_tflops(spec: GPUSpec, precision: str, tf32_convolutions: bool = False) -> float:
    """TFLOP/s the scaling model and the anchors run a job's FLOPs at: the dense peak of its matrix maths at
    ``precision`` (``GPUSpec.tflops``); for FP8 the Amdahl blend of the FP8 and BF16 peaks at the default
    GEMM share (``gpus.fp8_tflops``), since FP8 speeds up only the GEMMs."""
    return fp8_tflops(spec) if precision == "fp8" else spec.tflops(precision, tf32_convolutions)


def slowest_link_gbs(r: Resolved) -> float:
    """Per-direction bandwidth (GB/s) of the slowest link the gradient all-reduce crosses."""
    if r.num_nodes > 1:
        return r.network_gbps / 8.0
    if r.interconnect == "nvlink" and r.spec.nvlink_gbs > 0:
        return r.spec.nvlink_gbs / 2.0
    return r.spec.pcie_gbs


FloatArray = npt.NDArray[np.float64]

# Columns of ``Resolved.nums``: job side (``JobPart.nums``), then placement side (``HardwarePart.nums``),
# then the precision's peak TFLOP/s.
JOB_COLUMNS = ("batch", "params", "flops", "family", "bytes", "stack", "fp8")
HW_COLUMNS = (
    "gpus",
    "nodes",
    "gpus_per_node",
    "fp32_tflops",
    "mem_bandwidth",
    "mem_gib",
    "cc",
    "link_gbs",
    "link_class",
    "sm",
    "l2",
)
NUM_COLUMNS = _NUM_COLUMNS = (*JOB_COLUMNS, *HW_COLUMNS, "tflops")
(
    _B,
    _P,
    _F,
    _FAM,
    _BYTES,
    _STACK,
    _FP8,
    _N,
    _NODES,
    _GPN,
    _FP32,
    _BW,
    _MEM,
    _CC,
    _LINK,
    _LCLASS,
    _SM,
    _L2,
    _TF,
) = range(len(_NUM_COLUMNS))


def _nums(rows: Sequence[Resolved]) -> FloatArray:
    m = np.array([r.nums for r in rows], dtype=np.float64)
    if m.shape != (len(rows), len(_NUM_COLUMNS)):
        raise ValueError("rows must come from resolve()/combine()")
    return m


def _terms(m: FloatArray, phys: Physics = DEFAULT_PHYSICS) -> tuple[FloatArray, FloatArray, FloatArray]:
    """(compute time, sync time, FLOP-bound time) in seconds per row of a ``_nums`` matrix."""
    n = m[:, _N]
    tensor = m[:, _TF] > m[:, _FP32] * 1.01
    # Tensor-core efficiency by the width of the inputs: TF32 (fp32 activations), 16-bit, FP8.
    eff = np.where(
        tensor,
        phys.tensor_efficiency
        * np.where(m[:, _BYTES] >= 1.0, phys.tf32_factor, np.where(m[:, _FP8] > 0, phys.fp8_factor, 1.0)),
        phys.cuda_efficiency,
    )
    work = (m[:, _B] / n) * m[:, _F]
    flop_t = work / (m[:, _TF] * 1e12 * eff)
    intensity = np.asarray(phys.intensity)[m[:, _FAM].astype(np.intp)]
    mem_t = work * m[:, _BYTES] / (intensity * m[:, _BW] * 1e9)
    speed = np.exp(np.asarray(phys.stack)[m[:, _STACK].astype(np.intp)])
    q = phys.overlap_p
    hi = np.maximum(flop_t, mem_t)
    core = hi * (1.0 + (np.minimum(flop_t, mem_t) / hi) ** q) ** (1.0 / q)
    compute = (core + 12.0 * m[:, _P] / (m[:, _BW] * 1e9) + phys.overhead_s) / speed
    ring = 2.0 * (n - 1.0) / n
    wire = ring * 4.0 * m[:, _P] / (m[:, _LINK] * (1e9 * _SYNC_EFFICIENCY))
    ring_lat, tree_lat = _allreduce_latencies(m)
    sync = np.minimum(wire + ring_lat, wire / _TREE_BUS_SHARE + tree_lat)
    sync *= phys.sync_exposed
    return compute, sync, flop_t / speed


def _allreduce_latencies(m: FloatArray) -> tuple[FloatArray, FloatArray]:
    """(ring, tree) latency in seconds of one all-reduce over each row's placement, NCCL's hierarchical
    model (see ``_ALLREDUCE_BASE_LATENCY_S``); 0 on one GPU."""
    n = m[:, _N]
    nodes = np.maximum(m[:, _NODES], 1.0)
    per_node = np.minimum(m[:, _GPN], n)
    multi = n > 1.0
    ring = (
        _ALLREDUCE_BASE_LATENCY_S
        + 2.0 * (n - nodes) * _INTRA_NODE_HOP_S
        + 2.0 * (nodes - 1.0) * _NETWORK_HOP_S
    )
    tree = _ALLREDUCE_BASE_LATENCY_S + 2.0 * (
        (per_node - 1.0) * _INTRA_NODE_HOP_S + np.log2(nodes) * _NETWORK_HOP_S
    )
    return np.where(multi, ring, 0.0), np.where(multi, tree, 0.0)


def allreduce_latency_s(num_gpus: int, num_nodes: int = 1, gpus_per_node: int = 0) -> float:
    """Latency (seconds) of one all-reduce over ``num_gpus`` GPUs on ``num_nodes`` nodes: the cheaper of
    NCCL's ring and tree (``_allreduce_latencies``); 0 on one GPU."""
    m = np.zeros((1, len(_NUM_COLUMNS)))
    m[0, _N], m[0, _NODES] = float(num_gpus), float(num_nodes)
    m[0, _GPN] = float(gpus_per_node or -(-num_gpus // max(num_nodes, 1)))
    ring, tree = _allreduce_latencies(m)
    return float(min(ring[0], tree[0]))


def model_terms(rows: Sequence[Resolved], phys: Physics = DEFAULT_PHYSICS) -> tuple[FloatArray, FloatArray]:
    """(compute time, sync time) of the scaling model for each row, in seconds, vectorised."""
    c, s, _ = _terms(_nums(rows), phys)
    return c, s


def compute_time(r: Resolved, phys: Physics = DEFAULT_PHYSICS) -> float:
    """Scaling-model compute time (seconds) of one iteration at the per-GPU batch."""
    return float(model_terms([r], phys)[0][0])


def sync_time(r: Resolved, phys: Physics = DEFAULT_PHYSICS) -> float:
    """Analytic ring all-reduce time of fp32 gradients (seconds); 0 on one GPU."""
    return float(model_terms([r], phys)[1][0])


def scaling_time(r: Resolved, phys: Physics = DEFAULT_PHYSICS) -> float:
    """Iteration time of the scaling model: compute + sync (no overlap assumed; the learned part corrects)."""
    c, s = model_terms([r], phys)
    return float(c[0] + s[0])


def _features(m: FloatArray, phys: Physics) -> tuple[FloatArray, FloatArray, FloatArray]:
    """(features in ``FEATURE_NAMES`` order, compute time, sync time) from a ``_nums`` matrix."""
    compute, sync, flop_t = _terms(m, phys)
    total = compute + sync
    x = np.empty((m.shape[0], len(FEATURE_NAMES)), dtype=np.float64)
    n = m[:, _N]
    x[:, 0] = np.log(m[:, _B] / n)
    x[:, 1] = np.log(m[:, _P])
    x[:, 2] = np.log(m[:, _F])
    x[:, 3] = np.log(m[:, _FP32])
    x[:, 4] = np.log(m[:, _TF])
    x[:, 5] = np.log(m[:, _BW])
    x[:, 6] = np.log(m[:, _MEM])
    x[:, 7] = m[:, _CC]
    x[:, 8] = m[:, _FAM]
    x[:, 9] = m[:, _BYTES]
    x[:, 10] = np.log(compute)
    x[:, 11] = np.log(12.0 * m[:, _P] / (m[:, _BW] * 1e9))
    x[:, 12] = np.log(n)
    x[:, 13] = m[:, _NODES]
    x[:, 14] = np.log(m[:, _GPN])
    x[:, 15] = np.log(sync + 1e-6)
    x[:, 16] = np.log((sync + 1e-6) / total)
    x[:, 17] = np.log(total)
    x[:, 18] = m[:, _STACK]
    x[:, 19] = np.log(m[:, _SM])
    x[:, 20] = np.log(m[:, _L2])
    x[:, 21] = flop_t / compute
    return x, compute, sync


def feature_matrix(
    rows: Sequence[Resolved], phys: Physics = DEFAULT_PHYSICS
) -> tuple[FloatArray, FloatArray]:
    """(features in ``FEATURE_NAMES`` order, scaling-model iteration time) for each row, vectorised."""
    x, compute, sync = _features(_nums(rows), phys)
    return x, compute + sync


@dataclass(frozen=True, slots=True)
class Design:
    """What the predictor's learned part reads for a batch of rows (see ``perfmodel.predictor``).

    ``x_single`` are the features of the same job on one GPU at the same per-GPU batch; ``x`` those of
    the real placement; ``compute``/``sync`` the scaling model's times; ``link_class`` the slowest link
    (``LINK_*``); ``num_gpus`` the GPU counts; ``sync_floor`` the least time an iteration can take for its
    gradient all-reduce (``SYNC_FLOOR_SHARE`` x the ring's bytes at the slowest link's line rate, plus the
    all-reduce's latency; 0 on one GPU).
    """

    x: FloatArray
    x_single: FloatArray
    compute: FloatArray
    sync: FloatArray
    link_class: FloatArray
    num_gpus: FloatArray
    sync_floor: FloatArray

    def take(self, index: npt.NDArray[np.int64] | npt.NDArray[np.bool_]) -> Design:
        """The rows at ``index`` (integer positions or a boolean mask)."""
        return Design(
            self.x[index],
            self.x_single[index],
            self.compute[index],
            self.sync[index],
            self.link_class[index],
            self.num_gpus[index],
            self.sync_floor[index],
        )


def design_of(rows: Sequence[Resolved], phys: Physics = DEFAULT_PHYSICS) -> Design:
    """The ``Design`` of resolved rows, vectorised."""
    return design_of_nums(_nums(rows), phys)


def design_of_nums(m: FloatArray, phys: Physics = DEFAULT_PHYSICS) -> Design:
    """The ``Design`` of rows given as a matrix of ``Resolved.nums`` (rows x ``NUM_COLUMNS``): the one
    function training and serving both evaluate."""
    if m.ndim != 2 or m.shape[1] != len(_NUM_COLUMNS):
        raise ValueError(f"expected a rows x {len(_NUM_COLUMNS)} matrix, got shape {m.shape}")
    k = m.shape[0]
    single = m.copy()
    single[:, _B] = m[:, _B] / m[:, _N]
    single[:, _N] = 1.0
    single[:, _NODES] = 1.0
    single[:, _GPN] = 1.0
    both, compute, sync = _features(np.concatenate((m, single)), phys)
    n = m[:, _N]
    # Gradient bytes at the floor: 4 for fp32/tf32 jobs, 2 for 16-bit and amp ones (amp keeps fp32
    # gradients in plain PyTorch, but tuned code all-reduces them in 16 bits: the floor takes the lesser).
    grad_bytes = np.where(m[:, _BYTES] >= 1.0, 4.0, 2.0)
    floor = SYNC_FLOOR_SHARE * 2.0 * (n - 1.0) / n * grad_bytes * m[:, _P] / (m[:, _LINK] * 1e9)
    # plus the all-reduce's latency: no algorithm finishes it sooner (the lesser of ring and tree)
    floor += np.minimum(*_allreduce_latencies(m))
    return Design(both[:k], both[k:], compute[:k], sync[:k], m[:, _LCLASS].copy(), n.copy(), floor)


def feature_vector(r: Resolved, phys: Physics = DEFAULT_PHYSICS) -> list[float]:
    """The numbers the learned model sees for one row, in ``FEATURE_NAMES`` order."""
    return [float(v) for v in feature_matrix([r], phys)[0][0]]


ROW_COLUMNS: tuple[str, ...] = (
    "model",
    "dataset",
    "batch_size",
    "gpu_product",
    "gpus",
    "gpus_per_node",
    "interconnect",
    "network_gbps",
    "precision",
    "params",
    "flops_per_sample",
    "stack",
)


def _num(row: Mapping[str, str | None], column: str, kind: type[int] | type[float]) -> float | None:
    text = (row.get(column) or "").strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        raise InvalidInputError(f"{column}: not a number: {text!r}") from None
    if not math.isfinite(value):
        raise InvalidInputError(f"{column}: not a finite number: {text!r}")
    if kind is int:
        if value != int(value):
            raise InvalidInputError(f"{column}: not a whole number: {text!r}")
        return int(value)
    return value


def parse_row(row: Mapping[str, str | None]) -> tuple[JobFeatures, HardwareFeatures]:
    """A (job, placement) pair from flag-named text fields (the ``perfsched predict`` CSV columns).

    ``batch_size`` is the global batch; ``gpus_per_node`` defaults to ``gpus`` (one node) and the node count
    is ``ceil(gpus / gpus_per_node)``; ``interconnect`` defaults to NVLink where the GPU has it, else PCIe;
    ``network_gbps`` to 100; ``precision`` to fp32. Raises ``InvalidInputError`` naming the column.
    """
    product = (row.get("gpu_product") or "").strip()
    if not product:
        raise InvalidInputError("gpu_product: missing (an nvidia.com/gpu.product value or a GPU type)")
    batch = _num(row, "batch_size", int)
    if batch is None:
        raise InvalidInputError("batch_size: missing (the global batch size)")
    if batch <= 0:
        raise InvalidInputError(f"batch_size: must be > 0, got {int(batch)}")
    gpus = _num(row, "gpus", int)
    gpus = 1 if gpus is None else gpus
    if gpus <= 0:
        raise InvalidInputError(f"gpus: must be > 0, got {int(gpus)}")
    per_node = _num(row, "gpus_per_node", int)
    per_node = gpus if per_node is None else per_node
    if per_node <= 0:
        raise InvalidInputError(f"gpus_per_node: must be > 0, got {int(per_node)}")
    per_node = min(per_node, gpus)
    nodes = -(-int(gpus) // int(per_node))
    interconnect = (row.get("interconnect") or "").strip().lower()
    if not interconnect:
        canonical = canonical_gpu_type(product)
        has_nvlink = (
            canonical is not None and (spec_for_product(product) or gpu_spec(canonical)).nvlink_gbs > 0
        )
        interconnect = "nvlink" if has_nvlink else "pcie"
    if interconnect not in INTERCONNECTS:
        raise InvalidInputError(f"interconnect: must be nvlink or pcie, got {interconnect!r}")
    network = _num(row, "network_gbps", float)
    network = 100.0 if network is None else network
    if network <= 0:
        raise InvalidInputError(f"network_gbps: must be > 0, got {network}")
    precision = (row.get("precision") or "fp32").strip().lower()
    if precision not in PRECISIONS:
        raise InvalidInputError(f"precision: must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    params = _num(row, "params", float)
    flops = _num(row, "flops_per_sample", float)
    model = (row.get("model") or "").strip()
    if lookup_model(model) is None and (params is None or flops is None):
        what = f"unknown model {model!r}" if model else "missing"
        raise InvalidInputError(f"model: {what}; give a zoo model name or both params and flops_per_sample")
    stack = (row.get("stack") or "research").strip().lower()
    if stack not in STACKS:
        raise InvalidInputError(f"stack: must be one of {', '.join(STACKS)}, got {stack!r}")
    job = JobFeatures(model, (row.get("dataset") or "").strip(), int(batch), precision, params, flops, stack)
    hw = HardwareFeatures(product, int(gpus), int(per_node), nodes, interconnect, float(network))
    return job, hw
