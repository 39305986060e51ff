"""Measured anchors apply only where a model was measured, but never on the question's GPU type."""

from __future__ import annotations

import math

import pytest

from perfmodel.anchor import Anchors
from perfmodel.features import HardwareFeatures, JobFeatures, resolve
from perfmodel.gpus import gpu_spec
from perfmodel.measurements import Measurement


def m(gpu: str, n: int, batch: int, its: float) -> Measurement:
    return Measurement("test", "resnet50", "imagenet", batch, gpu, n, 1, n, "nvlink", 100.0, its)


ANCHORS = Anchors([m("V100", 1, 64, 4.0), m("V100", 4, 256, 3.0), m("T4", 1, 64, 1.5)])


def row(gpu: str, n: int, batch: int, model: str = "resnet50") -> object:
    return resolve(JobFeatures(model, "imagenet", batch), HardwareFeatures(gpu, n, n))


def test_applies_only_to_unmeasured_gpu_types_of_measured_models() -> None:
    assert ANCHORS.applies(row("A100", 1, 64))  # type: ignore[arg-type]
    assert not ANCHORS.applies(row("V100", 1, 64))  # type: ignore[arg-type]
    assert not ANCHORS.applies(row("A100", 1, 64, "bert"))  # type: ignore[arg-type]


def test_anchor_scales_the_nearest_measurement_by_spec_ratio() -> None:
    r = row("A100", 4, 256)
    t = ANCHORS.iteration_time(r, 4, 64.0, False)  # type: ignore[arg-type]
    # nearest: V100, 4 GPUs at 64 per GPU, 3 it/s = 768 samples/s; A100 vs V100 in fp32:
    # sqrt(19.5 / 15.7 x 1555 / 900) = 1.465 -> 1125 samples/s -> 256 / 1125 s per iteration
    ratio = math.sqrt(19.5 / 15.7 * 1555 / 900)
    assert gpu_spec("A100").fp32_tflops == 19.5
    assert t == pytest.approx(256 / (768 * ratio))
    times, twins = ANCHORS.iteration_times([r])  # type: ignore[list-item]
    # the 1-GPU twin anchors on the 1-GPU V100 row: 4 it/s at 64 -> 256 samples/s x ratio
    assert times[0] == pytest.approx(t) and twins[0] == pytest.approx(64 / (256 * ratio))
