"""Job and hardware features of a throughput question: what the job and the placement are, checked.

``JobFeatures`` describes the job (zoo model or explicit parameters and FLOPs per sample, dataset, global
batch, precision, software stack); ``HardwareFeatures`` the placement (GPU type or product label, GPUs,
GPUs per node, nodes, interconnect inside a node, network between nodes). ``resolve`` checks both and
turns them into numbers (``Resolved``; its ``nums`` columns are ``scaling.NUM_COLUMNS``); ``model_terms``,
``design_of`` and ``feature_matrix`` run the scaling model and the learned correction's features
(``perfmodel.scaling``) on resolved rows. ``parse_row`` reads a question from CSV-style columns
(``ROW_COLUMNS``). The peak a job's FLOPs run at is the GPU's dense rate at its precision
(``effective_tflops``: for fp32 on Ampere and newer TF32 where the job's stack runs its maths in TF32,
``fp32_in_tf32``; tensor cores for amp/bf16; for fp8 the Amdahl blend of the FP8 and BF16 peaks). Pure.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from perfmodel.datasets import canonical_dataset
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
from perfmodel.llm_fit import fp8_gemm_share
from perfmodel.profile import OperatorProfile, profile_fingerprint
from perfmodel.scaling import (
    DEFAULT_PHYSICS,
    LINK_NETWORK,
    LINK_NVLINK,
    LINK_PCIE,
    NUM_COLUMNS,
    STACKS,
    Design,
    Physics,
    design_of_nums,
    features_of_nums,
    terms_of_nums,
)
from perfmodel.zoo import Family, lookup_model

# Peak-rate columns of a placement: one per precision, then fp32 run in TF32 (``fp32_in_tf32``).
_FP32_CONV = len(PRECISIONS)
_HALF_BYTES = {"fp32": 1.0, "tf32": 1.0}
INTERCONNECTS = ("nvlink", "pcie")


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
    # The numbers ``feature_matrix`` reads, in ``NUM_COLUMNS`` order (filled by ``combine``).
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
    and FLOPs per sample (``llm_fit.fp8_gemm_share``: the longer its sequence, the more of it is attention,
    which stays in BF16), else ``gpus.FP8_GEMM_SHARE``; other precisions do not use it."""
    if precision != "fp8" or family is not Family.TRANSFORMER:
        return FP8_GEMM_SHARE
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


def _nums(rows: Sequence[Resolved]) -> FloatArray:
    m = np.array([r.nums for r in rows], dtype=np.float64)
    if m.shape != (len(rows), len(NUM_COLUMNS)):
        raise ValueError("rows must come from resolve()/combine()")
    return m


def model_terms(rows: Sequence[Resolved], phys: Physics = DEFAULT_PHYSICS) -> tuple[FloatArray, FloatArray]:
    """(compute time, sync time) of the scaling model for each row, in seconds, vectorised."""
    c, s, _ = terms_of_nums(_nums(rows), phys)
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


def feature_matrix(
    rows: Sequence[Resolved], phys: Physics = DEFAULT_PHYSICS
) -> tuple[FloatArray, FloatArray]:
    """(features in ``FEATURE_NAMES`` order, scaling-model iteration time) for each row, vectorised."""
    x, compute, sync = features_of_nums(_nums(rows), phys)
    return x, compute + sync


def design_of(rows: Sequence[Resolved], phys: Physics = DEFAULT_PHYSICS) -> Design:
    """The ``Design`` of resolved rows, vectorised."""
    return design_of_nums(_nums(rows), phys)


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
