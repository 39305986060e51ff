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
        # unknown products are not errors: None, so callers fall back to spec_from_labels
        ("NVIDIA-GeForce-RTX-3090", None),
        ("NVIDIA-RTX-6000-Ada-Generation", None),
        ("NVIDIA-L40", None),
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


def test_unknown_product_spec_from_labels_is_low_confidence() -> None:
    # 24 GiB (24576 MiB) Ampere consumer part (cc 8.6) -> nearest known cc-8.6 spec, marked low confidence
    s = spec_from_labels(24576, "8.6")
    assert s is not None and s.low_confidence
    assert s.compute_capability == (8, 6) and s.memory_gib == 24.0
    assert spec_from_labels(None, None) is None


def test_unknown_gpu_type_name_raises_key_error_naming_it() -> None:
    with pytest.raises(KeyError, match="B200"):
        gpu_spec("B200")
