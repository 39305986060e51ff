"""Per-operator cost model: the time of one GPU kernel from the GPU's datasheet and a learned utilisation.

Stage "per-operator time on a GPU" of the predictor pipeline. A kernel (``Kernel``: operator class, FLOPs,
bytes moved at the dtype it runs in, GEMM dims for matrix maths) takes on a GPU (``perfmodel.gpus.GPUSpec``)

    t = launch + roofline * exp(w_class . features)

- ``roofline = max(FLOPs / peak(dtype) * q, bytes / memory bandwidth)``: ``peak`` is the datasheet's dense
  rate of the units the dtype runs on (FP32 CUDA cores; TF32, FP16, BF16 and FP8 tensor cores where the
  GPU has them, else its best slower rate, as ``GPUSpec.tflops`` falls back), and ``q = ceil(waves) /
  waves`` the wave-quantisation loss of a GEMM split into 128x128 output tiles over the GPU's SMs
  (NeuSight's tile view: a last partial wave costs a full one).
- ``exp(w . features)`` is the inverse of the achieved utilisation: a small linear model in a few
  GPU-independent features (how compute- or memory-bound the kernel is on this GPU, its roofline size, its
  waves, the reduction depth K, whether it runs on tensor cores, its working set against the L2 cache),
  one weight vector per fitted class, and ``launch`` a fixed per-kernel overhead per class.

Fitted classes: ``gemm`` (matmuls and convolutions as implicit GEMMs), ``elementwise``,
``normalization``, ``reduction`` and ``embedding``. Classes without kernel measurements of their own use a
fitted one: ``attention`` the GEMM model over its QK^T and PV GEMMs (a fused attention kernel is GEMMs plus
a softmax held on chip), ``memory`` (copies, transposes, concatenation) and ``optimizer`` (fused
element-wise updates over the parameters) the element-wise model. Collectives are not kernels here;
``perfmodel.compose`` adds them from the network model.

The weights are fitted (``fit``) on public per-kernel measurements across GPU types
(``perfmodel/data/kernels``, read by ``perfmodel.kernels``), so a GPU with a datasheet and no measurements
gets a prediction by construction. Pure module (numpy; ``fit`` imports scipy's least squares).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from perfmodel.errors import InvalidInputError, ModelFileError
from perfmodel.gpus import GPUSpec

OP_CLASSES: tuple[str, ...] = (
    "gemm",
    "attention",
    "elementwise",
    "normalization",
    "reduction",
    "embedding",
    "memory",
    "optimizer",
)
FITTED_CLASSES: tuple[str, ...] = ("gemm", "elementwise", "normalization", "reduction", "embedding")
# Which fitted model prices each operator class (see the module docstring).
MODEL_OF: dict[str, str] = {
    "gemm": "gemm",
    "attention": "gemm",
    "elementwise": "elementwise",
    "normalization": "normalization",
    "reduction": "reduction",
    "embedding": "embedding",
    "memory": "elementwise",
    "optimizer": "elementwise",
}
DTYPES: tuple[str, ...] = ("fp32", "tf32", "fp16", "bf16", "fp8")
DTYPE_BYTES: dict[str, float] = {"fp32": 4.0, "tf32": 4.0, "fp16": 2.0, "bf16": 2.0, "fp8": 1.0}
TILE = 128  # output tile edge of the GEMM wave model (cuBLAS's common 128x128 CTA tile)
SCHEMA_VERSION = 1

GEMM_FEATURES: tuple[str, ...] = (
    "bias",
    "tensor",
    "balance",
    "size",
    "size_tensor",
    "waves",
    "depth",
    "conv",
)
VECTOR_FEATURES: tuple[str, ...] = ("bias", "size", "cache", "half")


@dataclass(frozen=True, slots=True)
class Kernel:
    """One kernel to price: class, FLOPs and bytes moved at ``dtype``, and GEMM dims for matrix maths.

    ``m``, ``n``, ``k``, ``batch`` are the (implicit) GEMM dims of a ``gemm``/``attention`` kernel (0 when
    unknown: the roofline then has no wave term); ``conv`` marks a convolution (cuDNN's algorithms, e.g.
    Winograd, reach other rates than a plain matmul).
    """

    op_class: str
    flops: float
    bytes: float
    dtype: str = "fp32"
    m: int = 0
    n: int = 0
    k: int = 0
    batch: int = 1
    conv: bool = False

    def __post_init__(self) -> None:
        if self.op_class not in MODEL_OF:
            raise InvalidInputError(
                f"unknown operator class {self.op_class!r}; known classes are {', '.join(OP_CLASSES)}"
            )
        if self.dtype not in DTYPE_BYTES:
            raise InvalidInputError(f"unknown dtype {self.dtype!r}; known dtypes are {', '.join(DTYPES)}")
        if not (math.isfinite(self.flops) and self.flops >= 0):
            raise InvalidInputError(f"kernel flops must be finite and >= 0, got {self.flops}")
        if not (math.isfinite(self.bytes) and self.bytes >= 0):
            raise InvalidInputError(f"kernel bytes must be finite and >= 0, got {self.bytes}")


def on_tensor_cores(spec: GPUSpec, dtype: str) -> bool:
    """Whether a matmul in ``dtype`` runs on tensor cores on this GPU (Volta and newer, a unit for it)."""
    if spec.compute_capability < (7, 0) or dtype == "fp32":
        return False
    if dtype == "tf32":
        return spec.tf32_tflops > 0
    return spec.fp16_tflops > spec.fp32_tflops


def peak_flops(spec: GPUSpec, dtype: str) -> float:
    """Dense peak FLOP/s of the units a ``dtype`` matmul runs on (``GPUSpec.tflops``'s fall-backs)."""
    precision = {"fp32": "fp32", "tf32": "tf32", "fp16": "fp16", "bf16": "bf16", "fp8": "fp8"}[dtype]
    return spec.tflops(precision) * 1e12


def _roofline(kernel: Kernel, spec: GPUSpec) -> tuple[float, float, float]:
    """(compute time with wave quantisation, memory time, waves), seconds."""
    sms = max(spec.sm_count, 1)
    waves = 0.0
    q = 1.0
    if kernel.m > 0 and kernel.n > 0:
        tiles = math.ceil(kernel.m / TILE) * math.ceil(kernel.n / TILE) * max(kernel.batch, 1)
        waves = tiles / sms
        q = math.ceil(waves) / waves
    t_compute = kernel.flops / peak_flops(spec, kernel.dtype) * q
    t_memory = kernel.bytes / (spec.memory_bandwidth_gbs * 1e9)
    return t_compute, t_memory, waves


def _clip(x: float, lo: float, hi: float) -> float:
    return lo if x < lo else hi if x > hi else x


def features(kernel: Kernel, spec: GPUSpec) -> tuple[float, np.ndarray]:
    """(roofline seconds, feature vector) of a kernel on a GPU, in the order of its model's feature names."""
    t_c, t_m, waves = _roofline(kernel, spec)
    roof = max(t_c, t_m, 1e-9)
    size = _clip(math.log10(roof * 1e6), -3.0, 6.0)  # log10 microseconds
    if MODEL_OF[kernel.op_class] == "gemm":
        tensor = 1.0 if on_tensor_cores(spec, kernel.dtype) else 0.0
        balance = _clip(math.log10(max(t_c, 1e-12) / max(t_m, 1e-12)), -3.0, 3.0)
        w = _clip(math.log10(waves), -2.0, 2.0) if waves > 0 else 0.0
        depth = _clip(math.log10(kernel.k), 0.0, 5.0) if kernel.k > 0 else 2.0
        x = np.array([1.0, tensor, balance, size, size * tensor, w, depth, float(kernel.conv)])
    else:
        l2 = max(spec.l2_mib, 1.0) * 1024 * 1024
        cache = _clip(math.log10(max(kernel.bytes, 1.0) / l2), -3.0, 3.0)
        half = 1.0 if DTYPE_BYTES[kernel.dtype] < 4 else 0.0
        x = np.array([1.0, size, cache, half])
    return roof, x


# Ceiling on the per-kernel floor a training step pays: inside a step each kernel is queued behind the
# previous one, so the host-side launch cost hides and only the GPU-side floor remains (vidur's smallest
# kernels take 1-4 us on A100/H100/A40; NeuSight's 25-100 us floors are its host-timed single launches).
LAUNCH_CAP_S = 5e-6


@dataclass(frozen=True, slots=True)
class ClassModel:
    """Fitted weights of one class.

    ``floors_s``: the fitted per-kernel floor of each source's measurements (a property of how the source
    timed its kernels, not of the GPU); ``launch_s``: the floor a kernel pays inside a training step, the
    smallest source floor capped at ``LAUNCH_CAP_S``; ``weights``: the utilisation weights.
    """

    launch_s: float
    weights: tuple[float, ...]
    rows: int  # kernel measurements it was fitted on
    floors_s: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True, slots=True)
class CostModel:
    """The fitted per-class models; ``kernel_time`` prices one kernel on one GPU."""

    classes: Mapping[str, ClassModel]
    sources: tuple[str, ...] = ()

    def kernel_time(self, kernel: Kernel, spec: GPUSpec, source: str | None = None) -> float:
        """Seconds one launch of ``kernel`` takes on ``spec`` inside a step (or as ``source`` timed it)."""
        model = self.classes.get(MODEL_OF[kernel.op_class])
        if model is None:
            raise ModelFileError(f"cost model has no fitted {MODEL_OF[kernel.op_class]!r} class")
        if kernel.flops == 0 and kernel.bytes == 0:
            return 0.0
        roof, x = features(kernel, spec)
        floor = dict(model.floors_s).get(source, model.launch_s) if source else model.launch_s
        return floor + roof * math.exp(float(np.dot(model.weights, x)))

    def utilisation(self, kernel: Kernel, spec: GPUSpec) -> float:
        """Share of the roofline rate the kernel reaches, launch overhead included (0-1 mostly)."""
        roof, _ = features(kernel, spec)
        t = self.kernel_time(kernel, spec)
        return roof / t if t > 0 else 0.0

    def to_json(self) -> dict[str, object]:
        return {
            "schema_version": SCHEMA_VERSION,
            "sources": list(self.sources),
            "classes": {
                name: {
                    "launch_s": m.launch_s,
                    "weights": list(m.weights),
                    "rows": m.rows,
                    "floors_s": dict(m.floors_s),
                }
                for name, m in sorted(self.classes.items())
            },
        }

    @staticmethod
    def from_json(doc: Mapping[str, object], where: str = "cost model") -> CostModel:
        if doc.get("schema_version") != SCHEMA_VERSION:
            raise ModelFileError(
                f"{where}: schema_version {doc.get('schema_version')!r}, expected {SCHEMA_VERSION}; "
                "refit it with `python bench/fit_opcost.py`"
            )
        raw = doc.get("classes")
        if not isinstance(raw, dict):
            raise ModelFileError(f"{where}: 'classes' missing or not an object")
        classes: dict[str, ClassModel] = {}
        for name, m in raw.items():
            n_feat = len(GEMM_FEATURES if name == "gemm" else VECTOR_FEATURES)
            try:
                weights = tuple(float(w) for w in m["weights"])
                floors = tuple((str(k), float(v)) for k, v in dict(m.get("floors_s", {})).items())
                cm = ClassModel(float(m["launch_s"]), weights, int(m["rows"]), floors)
            except (KeyError, TypeError, ValueError) as exc:
                raise ModelFileError(f"{where}: class {name!r} is malformed ({exc})") from None
            if name not in FITTED_CLASSES or len(weights) != n_feat:
                raise ModelFileError(f"{where}: class {name!r} unknown or with {len(weights)} weights")
            classes[name] = cm
        sources = doc.get("sources", [])
        return CostModel(classes, tuple(str(s) for s in sources) if isinstance(sources, list) else ())


@dataclass(frozen=True, slots=True)
class KernelRow:
    """One measured kernel: the kernel, the GPU it ran on, its latency, where the number comes from."""

    kernel: Kernel
    spec: GPUSpec
    seconds: float
    source: str
    op: str


def _fit_class(rows: Sequence[KernelRow]) -> ClassModel:
    from scipy.optimize import least_squares  # fit-time only: prediction needs numpy alone

    roofs = np.empty(len(rows))
    xs = []
    for i, r in enumerate(rows):
        roofs[i], x = features(r.kernel, r.spec)
        xs.append(x)
    x_mat = np.vstack(xs)
    log_t = np.log(np.array([r.seconds for r in rows]))
    log_roof = np.log(roofs)
    # Rows weighted so that each (GPU, operator) group counts the same whatever its size.
    groups: dict[tuple[str, str], int] = {}
    for r in rows:
        key = (r.spec.variant, r.op)
        groups[key] = groups.get(key, 0) + 1
    weight = np.sqrt(np.array([1.0 / groups[(r.spec.variant, r.op)] for r in rows]))
    weight *= math.sqrt(len(rows) / weight.dot(weight))
    sources = sorted({r.source for r in rows})
    src = np.array([sources.index(r.source) for r in rows])
    n_src = len(sources)

    def residual(p: np.ndarray) -> np.ndarray:
        pred = np.logaddexp(p[:n_src][src], log_roof + x_mat @ p[n_src:])
        return np.asarray((pred - log_t) * weight)

    p0 = np.zeros(n_src + x_mat.shape[1])
    p0[:n_src] = math.log(3e-6)
    p0[n_src] = 0.5
    sol = least_squares(residual, p0, loss="soft_l1", f_scale=0.2, method="trf", x_scale="jac")
    p = sol.x
    floors = tuple((s, float(math.exp(p[i]))) for i, s in enumerate(sources))
    launch = min(LAUNCH_CAP_S, min(f for _, f in floors))
    return ClassModel(launch, tuple(float(v) for v in p[n_src:]), len(rows), floors)


def fit(rows: Sequence[KernelRow]) -> CostModel:
    """Fit every class that has rows (least squares on log latency, robust loss); pure and deterministic."""
    by: dict[str, list[KernelRow]] = {}
    for r in rows:
        by.setdefault(MODEL_OF[r.kernel.op_class], []).append(r)
    classes = {name: _fit_class(rs) for name, rs in sorted(by.items()) if len(rs) >= 20}
    if "elementwise" not in classes or "gemm" not in classes:
        raise InvalidInputError("kernel rows must include at least 20 gemm and 20 elementwise kernels")
    sources = tuple(sorted({r.source for r in rows}))
    return CostModel(classes, sources)
