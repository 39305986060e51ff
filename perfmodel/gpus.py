"""GPU catalogue: ``nvidia.com/gpu.product`` label values -> canonical GPU type -> public specs.

NVIDIA GPU Feature Discovery writes the NVML device name with spaces replaced by ``-`` as the
``nvidia.com/gpu.product`` label (``Tesla-V100-SXM2-16GB``, ``NVIDIA-A100-SXM4-80GB``,
``NVIDIA-GeForce-RTX-2080-Ti``), appends ``-SHARED`` when time-slicing renames the resource and
``-MIG-<profile>`` for MIG devices. ``canonical_gpu_type`` maps such a value to one of the canonical type
names every perfsched part uses (``CANONICAL_TYPES``: Kepler to Blackwell, e.g. ``V100 A100 H100 H200 L40S
B200 GB200``); memory-size and form-factor variants are specs of one type, not types
(``spec_for_product``: ``NVIDIA-A100-SXM4-80GB``, ``NVIDIA-A100-80GB-PCIe``, ``NVIDIA-H100-PCIe``,
``NVIDIA-H100-NVL``, ``NVIDIA-H200-NVL``, ``NVIDIA-GH200-480GB``). An unknown product is not an error here:
``canonical_gpu_type`` returns None and ``spec_from_labels`` builds a low-confidence spec from the
``nvidia.com/gpu.memory`` and compute-capability labels (the caller refuses a product with neither).

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
    "A30",
    "A40",
    "RTXA5000",
    "RTXA6000",
    "L4",
    "L40",
    "L40S",
    "RTX4090",
    "RTX6000Ada",
    "A100",
    "H100",
    "H200",
    "H20",
    "GH200",
    "B200",
    "GB200",
    "B300",
    "GB300",
)

# PCIe x16 bandwidth per direction in GB/s by generation (PCI-SIG: 8, 16, 32 GT/s per lane, 128b/130b).
PCIE_GBS = {3: 15.75, 4: 31.5, 5: 63.0, 6: 126.0}
# Precisions a job may name. ``fp32`` is what the job's software stack does with fp32 tensors by default
# (``fp32_runs_tf32``); ``tf32`` is a job that enables TF32 everywhere (NVIDIA's examples do); ``amp`` =
# fp16 autocast; ``fp8`` = Transformer Engine FP8 GEMMs (Hopper and newer; elsewhere the GPU's best
# half-precision rate).
PRECISIONS: tuple[str, ...] = ("fp32", "tf32", "amp", "fp16", "bf16", "fp8")
# Software stacks whose "fp32" matmuls run in TF32 on Ampere and newer: they run in NVIDIA's PyTorch
# containers (NGC), which set ``TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1`` (NVIDIA DeepLearningExamples, MLPerf
# Training submissions, llm-foundry's and Megatron's images). Plain PyTorch (the ``research`` stack) keeps
# ``torch.backends.cuda.matmul.allow_tf32 = False``, its default since 1.12.
TF32_MATMUL_STACKS = frozenset({"vendor", "mlperf", "llm"})


def fp32_runs_tf32(stack: str, convolution: bool) -> bool:
    """Whether an ``fp32`` operator of a job on ``stack`` runs on TF32 tensor cores (Ampere and newer).

    Per operator class: convolutions run in TF32 on every stack (cuDNN's ``torch.backends.cudnn.allow_tf32``
    defaults to True in PyTorch), matmuls (GEMMs, attention) only on the stacks of ``TF32_MATMUL_STACKS``.
    """
    return convolution or stack in TF32_MATMUL_STACKS


@dataclass(frozen=True, slots=True)
class GPUSpec:
    """Public specs of one GPU (one device as Kubernetes counts it).

    TFLOP/s are dense peak figures (no sparsity): ``fp32_tflops`` on CUDA cores, ``tf32_tflops`` /
    ``fp16_tflops`` / ``bf16_tflops`` / ``fp8_tflops`` on tensor cores with FP32 accumulate where the
    product has them (0.0 = not supported in hardware). ``nvlink_gbs`` is the total NVLink bandwidth of
    one GPU in GB/s, both directions (0.0 = no NVLink in the usual server form factor); ``pcie_gbs`` is
    the host link per direction. ``sm_count`` streaming multiprocessors, ``l2_mib`` last-level cache.
    ``low_confidence`` marks a spec guessed from labels, not from a datasheet.
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
    tf32_tflops: float = 0.0
    fp8_tflops: float = 0.0
    sm_count: int = 0
    l2_mib: float = 0.0
    nvlink_gen: int = 0
    pcie_gen: int = 3

    def tflops(self, precision: str, tf32_convolutions: bool = False) -> float:
        """Dense peak TFLOP/s of the units a job at ``precision`` runs its matrix maths on.

        ``amp``/``fp16`` use fp16 tensor cores; ``bf16`` bf16 ones, falling back to fp16 tensor cores
        and then fp32 where the GPU lacks them (what frameworks do); ``fp8`` the FP8 rate where the GPU
        has one, else its best half-precision rate; ``tf32`` the TF32 rate (FP32 before Ampere);
        ``fp32`` the FP32 rate, or the TF32 rate when ``tf32_convolutions`` (a job whose maths runs in
        TF32 under its stack's defaults on Ampere and newer, ``fp32_runs_tf32``).
        """
        half = max(self.fp16_tflops, self.fp32_tflops)
        if precision in ("amp", "fp16"):
            return half
        if precision == "bf16":
            return max(self.bf16_tflops, half) if self.bf16_tflops else half
        if precision == "fp8":
            return max(self.fp8_tflops, self.bf16_tflops, half)
        if precision == "tf32" or (precision == "fp32" and tf32_convolutions):
            return max(self.tf32_tflops, self.fp32_tflops)
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
    tf32: float = 0.0,
    fp8: float = 0.0,
    sms: int = 0,
    l2: float = 0.0,
    nvlink_gen: int = 0,
) -> GPUSpec:
    return GPUSpec(
        gpu_type,
        variant,
        arch,
        cc,
        fp32,
        fp16,
        bf16,
        mem,
        bw,
        nvlink,
        PCIE_GBS[pcie_gen],
        False,
        tf32,
        fp8,
        sms,
        l2,
        nvlink_gen,
        pcie_gen,
    )


# Variant specs. Keyed by variant name (the ``nvidia.com/gpu.product`` spelling without the brand word);
# the first variant listed for a type is its default spec. Arguments: type, variant, architecture,
# compute capability, FP32, FP16 tensor, BF16 tensor, memory GiB, memory GB/s, NVLink GB/s (total, both
# directions), PCIe generation, TF32 tensor, FP8 tensor, SMs, L2 MiB, NVLink generation.
_VARIANTS: tuple[GPUSpec, ...] = (
    # Tesla K80 datasheet: 8.73 TFLOP/s FP32 (boost) and 480 GB/s for the 2-GPU board, 24 GB; one GK210
    # (what Kubernetes counts as one GPU) has half of each, 13 SMs, 1.5 MB L2. No fast FP16.
    _s("K80", "K80", "Kepler", (3, 7), 4.37, 4.37, 0.0, 12, 240, 0.0, 3, 0, 0, 13, 1.5),
    # Tesla P100 datasheet: PCIe 16 GB 9.3 FP32 / 18.7 FP16, 732 GB/s; SXM2 10.6 / 21.2, NVLink 160 GB/s;
    # 56 SMs, 4 MB L2 (Pascal whitepaper).
    _s("P100", "P100-PCIE-16GB", "Pascal", (6, 0), 9.3, 18.7, 0.0, 16, 732, 0.0, 3, 0, 0, 56, 4),
    _s("P100", "P100-PCIE-12GB", "Pascal", (6, 0), 9.3, 18.7, 0.0, 12, 549, 0.0, 3, 0, 0, 56, 3),
    _s("P100", "P100-SXM2-16GB", "Pascal", (6, 0), 10.6, 21.2, 0.0, 16, 732, 160, 3, 0, 0, 56, 4, 1),
    # Tesla V100 datasheet: SXM2 15.7 FP32 / 125 tensor, 900 GB/s, NVLink 300 GB/s; PCIe 14 / 112;
    # V100S PCIe 16.4 / 130, 1134 GB/s; 80 SMs, 6 MB L2 (Volta whitepaper).
    _s("V100", "V100-SXM2-16GB", "Volta", (7, 0), 15.7, 125, 0.0, 16, 900, 300, 3, 0, 0, 80, 6, 2),
    _s("V100", "V100-SXM2-32GB", "Volta", (7, 0), 15.7, 125, 0.0, 32, 900, 300, 3, 0, 0, 80, 6, 2),
    _s("V100", "V100-SXM3-32GB", "Volta", (7, 0), 15.7, 125, 0.0, 32, 900, 300, 3, 0, 0, 80, 6, 2),
    _s("V100", "V100-PCIE-16GB", "Volta", (7, 0), 14.0, 112, 0.0, 16, 900, 0.0, 3, 0, 0, 80, 6),
    _s("V100", "V100-PCIE-32GB", "Volta", (7, 0), 14.0, 112, 0.0, 32, 900, 0.0, 3, 0, 0, 80, 6),
    _s("V100", "V100S-PCIE-32GB", "Volta", (7, 0), 16.4, 130, 0.0, 32, 1134, 0.0, 3, 0, 0, 80, 6),
    # Tesla T4 datasheet: 8.1 FP32, 65 FP16 tensor, 16 GB GDDR6 at 320 GB/s; 40 SMs, 4 MB L2.
    _s("T4", "T4", "Turing", (7, 5), 8.1, 65, 0.0, 16, 320, 0.0, 3, 0, 0, 40, 4),
    # GeForce RTX 2080 Ti (reference board, Turing whitepaper): 13.4 FP32, 53.8 FP16 tensor with FP32
    # accumulate, 11 GB at 616 GB/s, 68 SMs, 5.5 MB L2. The NVLink bridge is a desktop part.
    _s("RTX2080Ti", "RTX-2080-Ti", "Turing", (7, 5), 13.4, 53.8, 0.0, 11, 616, 0.0, 3, 0, 0, 68, 5.5),
    # Quadro RTX 6000 datasheet: 16.3 FP32, 130.5 tensor, 24 GB at 672 GB/s; 72 SMs, 6 MB L2.
    _s("RTX6000", "Quadro-RTX-6000", "Turing", (7, 5), 16.3, 130.5, 0.0, 24, 672, 0.0, 3, 0, 0, 72, 6),
    # NVIDIA A10 datasheet: 31.2 FP32, 62.5 TF32, 125 FP16/BF16 tensor, 24 GB at 600 GB/s; 72 SMs, 6 MB L2.
    _s("A10", "A10", "Ampere", (8, 6), 31.2, 125, 125, 24, 600, 0.0, 4, 62.5, 0, 72, 6),
    # A10G (AWS G5; NVIDIA publishes no datasheet): 80 SMs at lower clocks; public figures (AWS G5 page,
    # TechPowerUp) give about 31.2 FP32, 35 TF32 and 70 dense FP16 tensor, 24 GB at 600 GB/s.
    _s("A10G", "A10G", "Ampere", (8, 6), 31.2, 70, 70, 24, 600, 0.0, 4, 35, 0, 80, 6),
    # NVIDIA A30 datasheet: 10.3 FP32, 82 TF32, 165 FP16/BF16 tensor, 24 GB HBM2 at 933 GB/s, NVLink
    # bridge 200 GB/s; 56 SMs, 24 MB L2.
    _s("A30", "A30", "Ampere", (8, 0), 10.3, 165, 165, 24, 933, 0.0, 4, 82, 0, 56, 24),
    # NVIDIA A40 datasheet: 37.4 FP32, 74.8 TF32, 149.7 FP16/BF16 tensor, 48 GB at 696 GB/s; 2-way NVLink
    # bridge 112.5 GB/s (not counted); 84 SMs, 6 MB L2.
    _s("A40", "A40", "Ampere", (8, 6), 37.4, 149.7, 149.7, 48, 696, 0.0, 4, 74.8, 0, 84, 6),
    # NVIDIA RTX A5000 datasheet: 27.8 FP32, 222.2 tensor with sparsity (111.1 dense FP16, 55.6 TF32),
    # 24 GB GDDR6 at 768 GB/s; 64 SMs, 6 MB L2.
    _s("RTXA5000", "RTX-A5000", "Ampere", (8, 6), 27.8, 111.1, 111.1, 24, 768, 0.0, 4, 55.6, 0, 64, 6),
    # NVIDIA RTX A6000 datasheet: 38.7 FP32, 309.7 tensor with sparsity (154.8 dense FP16/BF16, 77.4
    # TF32), 48 GB GDDR6 at 768 GB/s, NVLink bridge 112.5 GB/s (not counted); 84 SMs, 6 MB L2.
    _s("RTXA6000", "RTX-A6000", "Ampere", (8, 6), 38.7, 154.8, 154.8, 48, 768, 0.0, 4, 77.4, 0, 84, 6),
    # NVIDIA L4 datasheet: 30.3 FP32, 60 TF32, 121 FP16/BF16, 242.5 FP8 (dense; half the sparse
    # figures), 24 GB at 300 GB/s; 58 SMs, 48 MB L2.
    _s("L4", "L4", "Ada Lovelace", (8, 9), 30.3, 121, 121, 24, 300, 0.0, 4, 60, 242.5, 58, 48),
    # NVIDIA L40 datasheet: 90.5 FP32, 90.5 TF32, 181 FP16/BF16, 362 FP8 (dense), 48 GB at 864 GB/s;
    # 142 SMs, 96 MB L2.
    _s("L40", "L40", "Ada Lovelace", (8, 9), 90.5, 181, 181, 48, 864, 0.0, 4, 90.5, 362, 142, 96),
    # NVIDIA L40S datasheet: 91.6 FP32, 183 TF32, 362 FP16/BF16, 733 FP8 (dense), 48 GB at 864 GB/s;
    # 142 SMs, 96 MB L2.
    _s("L40S", "L40S", "Ada Lovelace", (8, 9), 91.6, 362, 362, 48, 864, 0.0, 4, 183, 733, 142, 96),
    # GeForce RTX 4090 (Ada whitepaper): 82.6 FP32, 82.6 TF32, 165.2 FP16/BF16 with FP32 accumulate,
    # 330.3 FP8, 24 GB GDDR6X at 1008 GB/s; 128 SMs, 72 MB L2.
    _s(
        "RTX4090",
        "GeForce-RTX-4090",
        "Ada Lovelace",
        (8, 9),
        82.6,
        165.2,
        165.2,
        24,
        1008,
        0.0,
        4,
        82.6,
        330.3,
        128,
        72,
    ),
    # NVIDIA RTX 6000 Ada Generation datasheet: 91.1 FP32, 1457 FP8 with sparsity (728.5 dense; 364.2
    # FP16/BF16, 182.1 TF32), 48 GB GDDR6 at 960 GB/s; 142 SMs, 96 MB L2.
    _s(
        "RTX6000Ada",
        "RTX-6000-Ada-Generation",
        "Ada Lovelace",
        (8, 9),
        91.1,
        364.2,
        364.2,
        48,
        960,
        0.0,
        4,
        182.1,
        728.5,
        142,
        96,
    ),
    # NVIDIA A100 datasheet: 19.5 FP32, 156 TF32, 312 FP16/BF16 tensor; 40 GB 1555 GB/s, 80 GB SXM
    # 2039 GB/s, 80 GB PCIe 1935 GB/s; NVLink 600 GB/s (SXM4; the PCIe card's bridge is not counted);
    # 108 SMs, 40 MB L2.
    _s("A100", "A100-SXM4-40GB", "Ampere", (8, 0), 19.5, 312, 312, 40, 1555, 600, 4, 156, 0, 108, 40, 3),
    _s("A100", "A100-SXM4-80GB", "Ampere", (8, 0), 19.5, 312, 312, 80, 2039, 600, 4, 156, 0, 108, 40, 3),
    _s("A100", "A100-PCIE-40GB", "Ampere", (8, 0), 19.5, 312, 312, 40, 1555, 0.0, 4, 156, 0, 108, 40),
    _s("A100", "A100-80GB-PCIE", "Ampere", (8, 0), 19.5, 312, 312, 80, 1935, 0.0, 4, 156, 0, 108, 40),
    # NVIDIA H100 datasheet (dense = half the sparse figures): SXM5 67 FP32, 494.7 TF32, 989.4 FP16/BF16,
    # 1978.9 FP8, 80 GB HBM3 3350 GB/s, NVLink 900 GB/s, 132 SMs; PCIe 51 / 378 / 756 / 1513, 80 GB HBM2e
    # 2000 GB/s, 114 SMs; NVL 60 / 417.5 / 835 / 1670, 94 GB 3900 GB/s (bridge not counted). 50 MB L2.
    _s(
        "H100",
        "H100-80GB-HBM3",
        "Hopper",
        (9, 0),
        67,
        989.4,
        989.4,
        80,
        3350,
        900,
        5,
        494.7,
        1978.9,
        132,
        50,
        4,
    ),
    _s(
        "H100",
        "H100-SXM5-96GB",
        "Hopper",
        (9, 0),
        67,
        989.4,
        989.4,
        96,
        3350,
        900,
        5,
        494.7,
        1978.9,
        132,
        50,
        4,
    ),
    _s("H100", "H100-PCIE", "Hopper", (9, 0), 51, 756, 756, 80, 2000, 0.0, 5, 378, 1513, 114, 50),
    _s("H100", "H100-NVL", "Hopper", (9, 0), 60, 835, 835, 94, 3900, 0.0, 5, 417.5, 1670, 132, 50),
    # NVIDIA H200 datasheet: SXM 67 FP32, 494.7 TF32, 989.4 FP16/BF16, 1978.9 FP8, 141 GB HBM3e at
    # 4800 GB/s, NVLink 900 GB/s; NVL 60 / 417.5 / 835 / 1670 (bridge not counted). 132 SMs, 50 MB L2.
    _s("H200", "H200", "Hopper", (9, 0), 67, 989.4, 989.4, 141, 4800, 900, 5, 494.7, 1978.9, 132, 50, 4),
    _s("H200", "H200-NVL", "Hopper", (9, 0), 60, 835, 835, 141, 4800, 0.0, 5, 417.5, 1670, 132, 50),
    # NVIDIA H20 (HGX H20 product brief): 44 FP32, 74 TF32, 148 FP16/BF16, 296 FP8, 96 GB HBM3 at
    # 4000 GB/s, NVLink 900 GB/s; 78 SMs, 60 MB L2.
    _s("H20", "H20", "Hopper", (9, 0), 44, 148, 148, 96, 4000, 900, 5, 74, 296, 78, 60, 4),
    # NVIDIA GH200 Grace Hopper datasheet: the Hopper GPU of an H100 SXM (67 FP32, 494.7 TF32, 989.4
    # FP16/BF16, 1978.9 FP8) with 96 GB HBM3 at 4000 GB/s (480GB module) or 144 GB HBM3e at 4900 GB/s,
    # NVLink 900 GB/s between superchips; 132 SMs, 50 MB L2.
    _s(
        "GH200",
        "GH200-480GB",
        "Hopper",
        (9, 0),
        67,
        989.4,
        989.4,
        96,
        4000,
        900,
        5,
        494.7,
        1978.9,
        132,
        50,
        4,
    ),
    _s(
        "GH200",
        "GH200-144G-HBM3E",
        "Hopper",
        (9, 0),
        67,
        989.4,
        989.4,
        144,
        4900,
        900,
        5,
        494.7,
        1978.9,
        132,
        50,
        4,
    ),
    # NVIDIA HGX B200 datasheet, per GPU (dense = half the sparse figures): 75 FP32 (estimate from the
    # 600 TFLOP/s FP32 of 8 GPUs), 1100 TF32, 2250 FP16/BF16, 4500 FP8, 180 GB HBM3e at 8000 GB/s, NVLink 5
    # 1800 GB/s; 148 SMs, 126 MB L2 (estimate).
    _s("B200", "B200", "Blackwell", (10, 0), 75, 2250, 2250, 180, 8000, 1800, 5, 1100, 4500, 148, 126, 5),
    # NVIDIA GB200 NVL72 datasheet, per GPU (1/72 of the rack's dense figures): 80 FP32, 1250 TF32,
    # 2500 FP16/BF16, 5000 FP8, 186 GB HBM3e at 8000 GB/s, NVLink 5 1800 GB/s; 148 SMs, 126 MB L2 (estimate).
    _s("GB200", "GB200", "Blackwell", (10, 0), 80, 2500, 2500, 186, 8000, 1800, 5, 1250, 5000, 148, 126, 5),
    # NVIDIA HGX B300 / GB300 NVL72 datasheets, per GPU: Blackwell Ultra keeps B200's dense FP8 and
    # BF16 rates (4500 / 2250; GB300 5000 / 2500), TF32 cut to FP32-class rates is not stated: taken as
    # the B200 figure (estimate); 288 GB HBM3e (270 GB usable on HGX) at 8000 GB/s, NVLink 5 1800 GB/s.
    _s("B300", "B300", "Blackwell", (10, 3), 75, 2250, 2250, 270, 8000, 1800, 6, 1100, 4500, 160, 126, 5),
    _s("GB300", "GB300", "Blackwell", (10, 3), 80, 2500, 2500, 279, 8000, 1800, 6, 1250, 5000, 160, 126, 5),
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
        (r"^RTX-?6000-ADA\b", "RTX6000Ada"),
        (r"^RTX-?6000$", "RTX6000"),
        (r"^RTX-?A6000\b", "RTXA6000"),
        (r"^RTX-?A5000\b", "RTXA5000"),
        (r"^(RTX-)?4090\b", "RTX4090"),
        (r"^A100\b", "A100"),
        (r"^A10G\b", "A10G"),
        (r"^A10\b", "A10"),
        (r"^A30\b", "A30"),
        (r"^A40\b", "A40"),
        (r"^L40S\b", "L40S"),
        (r"^L40\b", "L40"),
        (r"^L4\b", "L4"),
        (r"^H100\b", "H100"),
        (r"^H200\b", "H200"),
        (r"^H20\b", "H20"),
        (r"^GH200\b", "GH200"),
        (r"^GB200\b", "GB200"),
        (r"^B200\b", "B200"),
        (r"^GB300\b", "GB300"),
        (r"^B300\b", "B300"),
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
    # The variant whose name the label starts with (``A100-SXM4-80GB`` over ``A100``), else the one that
    # agrees best on memory size and form factor (``A100-PCIE-80GB`` -> the 80 GB PCIe card).
    exact = [
        v for v in candidates if norm == _normalise(v.variant) or norm.startswith(_normalise(v.variant) + "-")
    ]
    if exact:
        return max(exact, key=lambda v: len(v.variant))
    tokens = set(re.split(r"[-()]", norm))
    mem = re.search(r"(\d+)G", norm)

    def score(v: GPUSpec) -> int:
        vt = set(_normalise(v.variant).split("-"))
        s = 0
        if mem and int(v.memory_gib) == int(mem.group(1)):
            s += 4
        for form in ("PCIE", "NVL"):
            s += 2 if (form in tokens) == (form in vt) else -2
        return s

    return max(candidates, key=lambda v: (score(v), -candidates.index(v)))


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


# Share of a 16-bit training step's time spent in the matmuls (GEMMs) that FP8 speeds up, where the job's
# architecture does not give it (``fp8_tflops``). Public anchors (H100, FP8 against BF16 on the same
# stack): torchao float8 pre-training of Llama 3.1 8B-405B in torchtitan, 1.25x (8B) to 1.34-1.51x
# (70B/405B, pytorch/ao README and docs.pytorch.org/ao "Pre-training with float8"); MosaicML's H100 blog
# (databricks.com/blog/coreweave-nvidia-h100-part-1) and llm-foundry's benchmark table, 1.0-1.35x for
# MPT 1B-3B. With the FP8 peak at 2x BF16, a share s gives 1 / (1 - s/2): 0.5 -> 1.33x, the middle of
# those (not fitted on any measured row).
FP8_GEMM_SHARE = 0.5


def fp8_tflops(spec: GPUSpec, gemm_share: float = FP8_GEMM_SHARE) -> float:
    """Effective TFLOP/s of an FP8 (Transformer Engine) training job: an Amdahl split of its step.

    FP8 speeds up only the GEMMs' maths; attention softmax, norms and element-wise work, the optimizer and
    communication stay in 16-bit, and casting to FP8 adds work. So the rate a job's FLOPs see is the
    harmonic blend ``1 / (share / FP8 peak + (1 - share) / BF16 peak)`` with ``gemm_share`` the share of
    the 16-bit step's time in GEMMs (``FP8_GEMM_SHARE`` where the architecture does not give it;
    ``perfmodel.llm`` computes it from a transformer's GEMM and attention FLOPs). A GPU without FP8 units
    runs the job at its 16-bit rate. Not the FP8 peak: that ratio (2x on Hopper) overstates a job's
    speed-up by 1.3-1.6x against published FP8/BF16 runs (see ``FP8_GEMM_SHARE``).
    """
    if not 0.0 <= gemm_share <= 1.0:
        raise ValueError(f"gemm_share must be in [0, 1], got {gemm_share}")
    half = spec.tflops("bf16")
    fp8 = spec.tflops("fp8")
    return 1.0 / (gemm_share / fp8 + (1.0 - gemm_share) / half)


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
