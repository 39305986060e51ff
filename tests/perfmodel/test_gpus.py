"""GPU Feature Discovery product labels map to canonical types and datasheet specs."""

from __future__ import annotations

import pytest

from perfmodel.gpus import CANONICAL_TYPES, canonical_gpu_type, gpu_spec, spec_for_product, spec_from_labels


@pytest.mark.parametrize(
    ("label", "expected"),
    [
        ("Tesla-V100-SXM2-16GB", "V100"),
        ("Tesla-V100-SXM2-32GB", "V100"),
        ("Tesla-V100-PCIE-32GB", "V100"),
        ("Tesla-V100S-PCIE-32GB", "V100"),
        ("NVIDIA-A100-SXM4-80GB", "A100"),
        ("NVIDIA-A100-SXM4-40GB", "A100"),
        ("NVIDIA-A100-80GB-PCIe", "A100"),
        ("NVIDIA-H100-80GB-HBM3", "H100"),
        ("NVIDIA-H100-PCIe", "H100"),
        ("NVIDIA-H200", "H200"),
        ("Tesla-T4", "T4"),
        ("NVIDIA-L4", "L4"),
        ("NVIDIA-L40S", "L40S"),
        ("NVIDIA-A10", "A10"),
        ("NVIDIA-A10G", "A10G"),
        ("NVIDIA-A40", "A40"),
        ("NVIDIA-GeForce-RTX-2080-Ti", "RTX2080Ti"),
        ("GeForce-RTX-2080-Ti", "RTX2080Ti"),
        ("Quadro-RTX-6000", "RTX6000"),
        ("Tesla-K80", "K80"),
        ("Tesla-P100-PCIE-16GB", "P100"),
        ("Tesla-P100-SXM2-16GB", "P100"),
        # time-slicing (renameByDefault) and MIG suffixes keep the type
        ("Tesla-T4-SHARED", "T4"),
        ("NVIDIA-A100-SXM4-40GB-MIG-1g.5gb", "A100"),
        ("NVIDIA-H100-80GB-HBM3-MIG-3g.40gb-SHARED", "H100"),
        # canonical names are accepted as they are, in any case
        ("V100", "V100"),
        ("rtx2080ti", "RTX2080Ti"),
        # products clusters label today (GFD spellings)
        ("NVIDIA-RTX-6000-Ada-Generation", "RTX6000Ada"),
        ("NVIDIA-RTX-A6000", "RTXA6000"),
        ("NVIDIA-L40", "L40"),
        ("NVIDIA-A30", "A30"),
        ("NVIDIA-H100-NVL", "H100"),
        ("NVIDIA-H200-NVL", "H200"),
        ("NVIDIA-H20", "H20"),
        ("NVIDIA-GH200-480GB", "GH200"),
        ("NVIDIA-B200", "B200"),
        ("NVIDIA-GB200", "GB200"),
        # unknown products are not errors: None, so callers fall back to spec_from_labels
        ("NVIDIA-GeForce-RTX-3090", None),
        ("NVIDIA-GeForce-RTX-5090", None),
        ("", None),
    ],
)
def test_product_label_maps_to_canonical_type(label: str, expected: str | None) -> None:
    assert canonical_gpu_type(label) == expected


def test_every_canonical_type_has_a_spec_with_positive_numbers() -> None:
    for t in CANONICAL_TYPES:
        s = gpu_spec(t)
        assert s.gpu_type == t
        assert s.fp32_tflops > 0 and s.memory_gib > 0 and s.memory_bandwidth_gbs > 0
        assert s.fp16_tflops >= s.fp32_tflops  # tensor cores or, on K80/P100, no slower than fp32


def test_memory_variants_are_specs_of_one_type() -> None:
    # A100 40 GB: 1555 GB/s; 80 GB SXM: 2039 GB/s (NVIDIA datasheet)
    a40 = spec_for_product("NVIDIA-A100-SXM4-40GB")
    a80 = spec_for_product("NVIDIA-A100-SXM4-80GB")
    assert a40 is not None and a80 is not None
    assert (a40.gpu_type, a40.memory_gib, a40.memory_bandwidth_gbs) == ("A100", 40, 1555)
    assert (a80.gpu_type, a80.memory_gib, a80.memory_bandwidth_gbs) == ("A100", 80, 2039)
    pcie = spec_for_product("Tesla-V100-PCIE-16GB")
    assert pcie is not None and pcie.nvlink_gbs == 0.0  # PCIe cards have no NVLink
    # A100 80 GB PCIe: 1935 GB/s, no NVLink; H100 PCIe 2000 GB/s and 756 dense FP16 vs SXM 3350 / 989.4
    a80p = spec_for_product("NVIDIA-A100-80GB-PCIe")
    assert a80p is not None and (a80p.memory_bandwidth_gbs, a80p.nvlink_gbs) == (1935, 0.0)
    hp, hs = spec_for_product("NVIDIA-H100-PCIe"), spec_for_product("NVIDIA-H100-80GB-HBM3")
    assert hp is not None and hs is not None
    assert (hp.memory_bandwidth_gbs, hp.fp16_tflops) == (2000, 756)
    assert (hs.memory_bandwidth_gbs, hs.fp16_tflops, hs.nvlink_gbs) == (3350, 989.4, 900)
    nvl = spec_for_product("NVIDIA-H200-NVL")
    assert nvl is not None and nvl.variant == "H200-NVL" and nvl.memory_gib == 141


def test_precision_picks_the_units_a_framework_uses() -> None:
    a100 = gpu_spec("A100")
    # fp32 on CUDA cores unless convolutions run in TF32 (PyTorch's default on Ampere and newer)
    assert a100.tflops("fp32") == 19.5
    assert a100.tflops("fp32", tf32_convolutions=True) == 156
    assert a100.tflops("tf32") == 156
    assert a100.tflops("bf16") == a100.tflops("amp") == 312
    # no FP8 on Ampere: its best half-precision rate; Hopper has FP8 at twice BF16
    assert a100.tflops("fp8") == 312
    assert gpu_spec("H100").tflops("fp8") == pytest.approx(2 * gpu_spec("H100").tflops("bf16"), rel=1e-3)
    # before Ampere there is no TF32: fp32 and tf32 are the FP32 rate
    assert gpu_spec("V100").tflops("tf32") == gpu_spec("V100").tflops("fp32", tf32_convolutions=True) == 15.7


def test_every_catalogued_spec_has_its_datasheet_figures() -> None:
    from perfmodel.gpus import _VARIANTS

    for v in _VARIANTS:
        assert v.sm_count > 0 and v.l2_mib > 0, v.variant
        assert v.memory_bandwidth_gbs > 0 and v.memory_gib > 0, v.variant
        if v.compute_capability >= (8, 0):
            assert v.tf32_tflops > 0 and v.bf16_tflops > 0, v.variant
        if v.compute_capability >= (8, 9):
            assert v.fp8_tflops > 0, v.variant


def test_unknown_product_spec_from_labels_is_low_confidence() -> None:
    # 24 GiB (24576 MiB) Ampere consumer part (cc 8.6) -> nearest known cc-8.6 spec, marked low confidence
    s = spec_from_labels(24576, "8.6")
    assert s is not None and s.low_confidence
    assert s.compute_capability == (8, 6) and s.memory_gib == 24.0
    assert spec_from_labels(None, None) is None


def test_unknown_gpu_type_name_raises_key_error_naming_it() -> None:
    with pytest.raises(KeyError, match="X9000"):
        gpu_spec("X9000")
