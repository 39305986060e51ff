"""GPU catalogue: ``nvidia.com/gpu.product`` label values -> canonical GPU type -> public specs.

NVIDIA GPU Feature Discovery writes the NVML device name with spaces replaced by ``-`` as the
``nvidia.com/gpu.product`` label (``Tesla-V100-SXM2-16GB``, ``NVIDIA-A100-SXM4-80GB``,
``NVIDIA-GeForce-RTX-2080-Ti``), appends ``-SHARED`` when time-slicing renames the resource and
``-MIG-<profile>`` for MIG devices. ``canonical_gpu_type`` maps such a value to one of the canonical type
names every perfsched part uses (``K80 P100 V100 T4 RTX2080Ti RTX6000 A10 A10G A40 L4 L40S A100 H100
H200``); memory-size and form-factor variants are specs of one type, not types (``spec_for_product``).
An unknown product is not an error: ``canonical_gpu_type`` returns None and ``spec_from_labels`` builds a
low-confidence spec from the ``nvidia.com/gpu.memory`` and compute-capability labels.

Spec numbers are the vendors' public datasheet figures (dense tensor-core figures, no sparsity; boost
clocks); each entry names its source. Pure module: constant tables and string functions.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

CANONICAL_TYPES: tuple[str, ...] = (
    "K80",
    "P100",
    "V100",
    "T4",
    "RTX2080Ti",
    "RTX6000",
    "A10",
    "A10G",
    "A40",
    "L4",
    "L40S",
    "A100",
    "H100",
    "H200",
)

# PCIe x16 bandwidth per direction in GB/s by generation (PCI-SIG: 8, 16, 32 GT/s per lane, 128b/130b).
PCIE_GBS = {3: 15.75, 4: 31.5, 5: 63.0}


@dataclass(frozen=True, slots=True)
class GPUSpec:
    """Public specs of one GPU (one device as Kubernetes counts it).

    TFLOP/s are dense peak figures: ``fp32_tflops`` without tensor cores (TF32 is not counted),
    ``fp16_tflops`` / ``bf16_tflops`` with tensor cores and FP32 accumulate where the product has them
    (0.0 = the format is not supported in hardware). ``nvlink_gbs`` is the total NVLink bandwidth of one
    GPU in GB/s, both directions (0.0 = no NVLink in the usual server form factor); ``pcie_gbs`` is the
    host link per direction. ``low_confidence`` marks a spec guessed from labels, not from a datasheet.
    """

    gpu_type: str
    variant: str
    architecture: str
    compute_capability: tuple[int, int]
    fp32_tflops: float
    fp16_tflops: float
    bf16_tflops: float
    memory_gib: float
    memory_bandwidth_gbs: float
    nvlink_gbs: float
    pcie_gbs: float
    low_confidence: bool = False

    def tflops(self, precision: str) -> float:
        """Peak TFLOP/s for a training precision (fp32 | amp | fp16 | bf16).

        ``amp`` runs matrix maths in fp16 on tensor cores; bf16 falls back to fp16 tensor cores and then
        fp32 where the GPU lacks it (that is what frameworks do on such GPUs).
        """
        if precision in ("amp", "fp16"):
            return max(self.fp16_tflops, self.fp32_tflops)
        if precision == "bf16":
            return max(self.bf16_tflops, self.fp32_tflops)
        return self.fp32_tflops


def _s(
    gpu_type: str,
    variant: str,
    arch: str,
    cc: tuple[int, int],
    fp32: float,
    fp16: float,
    bf16: float,
    mem: float,
    bw: float,
    nvlink: float,
    pcie_gen: int,
) -> GPUSpec:
    return GPUSpec(gpu_type, variant, arch, cc, fp32, fp16, bf16, mem, bw, nvlink, PCIE_GBS[pcie_gen])


# Variant specs. Keyed by variant name; the first variant listed for a type is its default spec.
_VARIANTS: tuple[GPUSpec, ...] = (
    # Tesla K80 datasheet: 8.73 TFLOP/s FP32 (boost) and 480 GB/s for the 2-GPU board, 24 GB; one GK210
    # (what Kubernetes counts as one GPU) has half of each. No fast FP16, no tensor cores.
    _s("K80", "K80", "Kepler", (3, 7), 4.37, 4.37, 0.0, 12, 240, 0.0, 3),
    # Tesla P100 datasheet: PCIe 16 GB 9.3 FP32 / 18.7 FP16, 732 GB/s; SXM2 10.6 / 21.2, NVLink 160 GB/s.
    _s("P100", "P100-PCIE-16GB", "Pascal", (6, 0), 9.3, 18.7, 0.0, 16, 732, 0.0, 3),
    _s("P100", "P100-PCIE-12GB", "Pascal", (6, 0), 9.3, 18.7, 0.0, 12, 549, 0.0, 3),
    _s("P100", "P100-SXM2-16GB", "Pascal", (6, 0), 10.6, 21.2, 0.0, 16, 732, 160, 3),
    # Tesla V100 datasheet: SXM2 15.7 FP32 / 125 tensor, 900 GB/s, NVLink 300 GB/s; PCIe 14 / 112;
    # V100S PCIe 16.4 / 130, 1134 GB/s.
    _s("V100", "V100-SXM2-16GB", "Volta", (7, 0), 15.7, 125, 0.0, 16, 900, 300, 3),
    _s("V100", "V100-SXM2-32GB", "Volta", (7, 0), 15.7, 125, 0.0, 32, 900, 300, 3),
    _s("V100", "V100-PCIE-16GB", "Volta", (7, 0), 14.0, 112, 0.0, 16, 900, 0.0, 3),
    _s("V100", "V100-PCIE-32GB", "Volta", (7, 0), 14.0, 112, 0.0, 32, 900, 0.0, 3),
    _s("V100", "V100S-PCIE-32GB", "Volta", (7, 0), 16.4, 130, 0.0, 32, 1134, 0.0, 3),
    # Tesla T4 datasheet: 8.1 FP32, 65 FP16 tensor, 16 GB GDDR6 at 320 GB/s.
    _s("T4", "T4", "Turing", (7, 5), 8.1, 65, 0.0, 16, 320, 0.0, 3),
    # GeForce RTX 2080 Ti (reference board, Turing whitepaper): 13.4 FP32, 53.8 FP16 tensor with FP32
    # accumulate, 11 GB at 616 GB/s. The NVLink bridge is a desktop part; servers have none.
    _s("RTX2080Ti", "RTX-2080-Ti", "Turing", (7, 5), 13.4, 53.8, 0.0, 11, 616, 0.0, 3),
    # Quadro RTX 6000 datasheet: 16.3 FP32, 130.5 tensor, 24 GB at 672 GB/s, 2-way NVLink bridge 100 GB/s.
    _s("RTX6000", "Quadro-RTX-6000", "Turing", (7, 5), 16.3, 130.5, 0.0, 24, 672, 0.0, 3),
    # NVIDIA A10 datasheet: 31.2 FP32, 125 FP16/BF16 tensor, 24 GB at 600 GB/s.
    _s("A10", "A10", "Ampere", (8, 6), 31.2, 125, 125, 24, 600, 0.0, 4),
    # A10G (AWS G5; NVIDIA publishes no datasheet): 80 SMs at lower clocks; public figures (AWS G5 page,
    # TechPowerUp) give about 31.2 FP32 and 70 dense FP16 tensor, 24 GB at 600 GB/s.
    _s("A10G", "A10G", "Ampere", (8, 6), 31.2, 70, 70, 24, 600, 0.0, 4),
    # NVIDIA A40 datasheet: 37.4 FP32, 149.7 FP16/BF16 tensor, 48 GB at 696 GB/s; 2-way NVLink 112.5 GB/s.
    _s("A40", "A40", "Ampere", (8, 6), 37.4, 149.7, 149.7, 48, 696, 0.0, 4),
    # NVIDIA L4 datasheet: 30.3 FP32, 121 FP16/BF16 tensor (242 with sparsity), 24 GB at 300 GB/s.
    _s("L4", "L4", "Ada Lovelace", (8, 9), 30.3, 121, 121, 24, 300, 0.0, 4),
    # NVIDIA L40S datasheet: 91.6 FP32, 362 FP16/BF16 tensor (733 with sparsity), 48 GB at 864 GB/s.
    _s("L40S", "L40S", "Ada Lovelace", (8, 9), 91.6, 362, 362, 48, 864, 0.0, 4),
    # NVIDIA A100 datasheet: 19.5 FP32, 312 FP16/BF16 tensor; 40 GB 1555 GB/s, 80 GB SXM 2039 GB/s,
    # 80 GB PCIe 1935 GB/s; NVLink 600 GB/s (SXM4; the PCIe card's bridge is not counted).
    _s("A100", "A100-SXM4-40GB", "Ampere", (8, 0), 19.5, 312, 312, 40, 1555, 600, 4),
    _s("A100", "A100-SXM4-80GB", "Ampere", (8, 0), 19.5, 312, 312, 80, 2039, 600, 4),
    _s("A100", "A100-PCIE-40GB", "Ampere", (8, 0), 19.5, 312, 312, 40, 1555, 0.0, 4),
    _s("A100", "A100-80GB-PCIE", "Ampere", (8, 0), 19.5, 312, 312, 80, 1935, 0.0, 4),
    # NVIDIA H100 datasheet: SXM5 67 FP32, 989 FP16/BF16 tensor (dense), 80 GB HBM3 3350 GB/s, NVLink
    # 900 GB/s; PCIe 51 / 756, 80 GB HBM2e 2000 GB/s; NVL 60 / 835, 94 GB 3900 GB/s.
    _s("H100", "H100-80GB-HBM3", "Hopper", (9, 0), 67, 989, 989, 80, 3350, 900, 5),
    _s("H100", "H100-PCIE", "Hopper", (9, 0), 51, 756, 756, 80, 2000, 0.0, 5),
    _s("H100", "H100-NVL", "Hopper", (9, 0), 60, 835, 835, 94, 3900, 0.0, 5),
    # NVIDIA H200 datasheet: SXM 67 FP32, 989 FP16/BF16 tensor, 141 GB HBM3e at 4800 GB/s, NVLink 900 GB/s.
    _s("H200", "H200", "Hopper", (9, 0), 67, 989, 989, 141, 4800, 900, 5),
)

_DEFAULT_SPEC: dict[str, GPUSpec] = {}
for _v in _VARIANTS:
    _DEFAULT_SPEC.setdefault(_v.gpu_type, _v)
_VARIANT_BY_NAME: dict[str, GPUSpec] = {v.variant.upper(): v for v in _VARIANTS}

# Canonical-name matchers over the normalised product (upper case, vendor/brand words removed,
# SHARED and MIG suffixes stripped). Order matters: A100 before A10, L40S before L4.
_RULES: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(p), t)
    for p, t in (
        (r"^K80\b", "K80"),
        (r"^P100\b", "P100"),
        (r"^V100S?\b", "V100"),
        (r"^T4\b", "T4"),
        (r"^(RTX-)?2080-?TI\b", "RTX2080Ti"),
        (r"^RTX-?6000$", "RTX6000"),
        (r"^A100\b", "A100"),
        (r"^A10G\b", "A10G"),
        (r"^A10\b", "A10"),
        (r"^A40\b", "A40"),
        (r"^L40S\b", "L40S"),
        (r"^L4\b", "L4"),
        (r"^H100\b", "H100"),
        (r"^H200\b", "H200"),
    )
)
_BRAND_WORDS = ("NVIDIA", "TESLA", "GEFORCE", "QUADRO")
_SUFFIX = re.compile(r"(-MIG-.*|-SHARED)+$")


def _normalise(product_label: str) -> str:
    """Upper-case, spaces/underscores to ``-``, brand words and SHARED/MIG suffixes removed."""
    s = re.sub(r"[\s_]+", "-", product_label.strip().upper())
    s = _SUFFIX.sub("", s)
    # A MIG suffix may come before SHARED (time-sliced MIG devices): strip again.
    s = _SUFFIX.sub("", s)
    words = s.split("-")
    while words and words[0] in _BRAND_WORDS:
        words.pop(0)
    return "-".join(words)


def canonical_gpu_type(product_label: str) -> str | None:
    """Canonical GPU type for an ``nvidia.com/gpu.product`` value, or None for an unknown product.

    Canonical names themselves are accepted too (``V100`` -> ``V100``, ``rtx2080ti`` -> ``RTX2080Ti``).
    """
    if not product_label or not product_label.strip():
        return None
    for name in CANONICAL_TYPES:
        if product_label.strip().upper() == name.upper():
            return name
    norm = _normalise(product_label)
    for pattern, gpu_type in _RULES:
        if pattern.search(norm):
            return gpu_type
    return None


def gpu_spec(gpu_type: str) -> GPUSpec:
    """Default spec of a canonical GPU type (``KeyError`` naming the type if it is not canonical)."""
    try:
        return _DEFAULT_SPEC[gpu_type]
    except KeyError:
        raise KeyError(
            f"unknown GPU type {gpu_type!r}; canonical types are {', '.join(CANONICAL_TYPES)}"
        ) from None


def spec_for_product(product_label: str) -> GPUSpec | None:
    """Spec of the exact variant named by a product label (memory size, form factor), or None if unknown.

    Falls back to the type's default spec when the type is known but the variant is not listed.
    """
    gpu_type = canonical_gpu_type(product_label)
    if gpu_type is None:
        return None
    norm = _normalise(product_label)
    candidates = [v for v in _VARIANTS if v.gpu_type == gpu_type]
    # Longest variant name contained in the normalised label wins (``A100-SXM4-80GB`` over ``A100``).
    best: GPUSpec | None = None
    for v in candidates:
        key = v.variant.upper()
        key = _normalise(key)
        if (norm == key or norm.startswith(key + "-") or norm.startswith(key)) and (
            best is None or len(key) > len(best.variant)
        ):
            best = v
    if best is None:
        # e.g. "A100-PCIE-80GB" spelled differently: choose by memory size when the label states one.
        mem = re.search(r"(\d+)GB", norm)
        if mem:
            same_mem = [v for v in candidates if int(v.memory_gib) == int(mem.group(1))]
            if same_mem:
                return same_mem[0]
        return _DEFAULT_SPEC[gpu_type]
    return best


def _parse_cc(compute_capability: str | tuple[int, int] | None) -> tuple[int, int] | None:
    if compute_capability is None:
        return None
    if isinstance(compute_capability, tuple):
        return compute_capability
    m = re.fullmatch(r"\s*(\d+)(?:\.(\d+))?\s*", compute_capability)
    if not m:
        return None
    return int(m.group(1)), int(m.group(2) or 0)


def spec_from_labels(
    memory_mib: float | None, compute_capability: str | tuple[int, int] | None
) -> GPUSpec | None:
    """A low-confidence spec for an unknown product from its memory and compute-capability labels.

    GFD writes ``nvidia.com/gpu.memory`` (MiB) and ``nvidia.com/gpu.compute.major``/``.minor``. The spec of
    the known variant with the same compute capability (else the nearest lower one) and the closest
    memory size is returned with the label's memory and ``low_confidence=True``; None when neither label
    is usable.
    """
    cc = _parse_cc(compute_capability)
    mem_gib = float(memory_mib) / 1024.0 if memory_mib and memory_mib > 0 else None
    if cc is None and mem_gib is None:
        return None
    pool = list(_VARIANTS)
    if cc is not None:
        same = [v for v in pool if v.compute_capability == cc]
        if not same:
            lower = [v for v in pool if v.compute_capability <= cc]
            if lower:
                top = max(v.compute_capability for v in lower)
                same = [v for v in lower if v.compute_capability == top]
            else:
                same = [v for v in pool if v.compute_capability == min(x.compute_capability for x in pool)]
        pool = same
    if mem_gib is not None:
        target = mem_gib
        pool.sort(key=lambda v: (abs(v.memory_gib - target), v.variant))
    else:
        pool.sort(key=lambda v: v.variant)
    base = pool[0]
    return replace(
        base,
        variant=f"unknown(cc={cc[0]}.{cc[1]})" if cc else "unknown",
        memory_gib=mem_gib if mem_gib is not None else base.memory_gib,
        low_confidence=True,
    )


def spec_ratio(
    reference: GPUSpec, target: GPUSpec, precision: str = "fp32", compute_share: float = 0.5
) -> float:
    """Speed of ``target`` relative to ``reference`` from specs alone (Habitat-style roofline blend).

    A kernel mix that is ``compute_share`` bound by arithmetic and the rest by memory bandwidth runs
    ``(flops ratio) ** share * (bandwidth ratio) ** (1 - share)`` times as fast on the target.
    """
    flops = target.tflops(precision) / reference.tflops(precision)
    bandwidth = target.memory_bandwidth_gbs / reference.memory_bandwidth_gbs
    return float(flops**compute_share * bandwidth ** (1.0 - compute_share))
