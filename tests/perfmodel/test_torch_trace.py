"""perfmodel.torch_trace: the counting rules (no PyTorch needed) and the traced route, cross-checked with
the analytic zoo profiles (needs a Python with PyTorch: this one, $PERFSCHED_TORCH_PYTHON or Debian's)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from perfmodel.errors import ProfileError
from perfmodel.opcount import conv_gemms, op_class, optimizer_operators, pointwise_flops
from perfmodel.profile import OpClass, Phase, Source
from perfmodel.profiling import DEFAULT_TORCH_PYTHON, profile_torch, profile_zoo, torch_available

MODELS = Path(__file__).parent / "torch_models" / "models.py"


@pytest.mark.parametrize(
    ("op", "cls"),
    [
        ("aten.convolution.default", "gemm"),
        ("aten::addmm", "gemm"),
        ("aten.bmm.default", "gemm"),
        ("aten._scaled_dot_product_flash_attention.default", "attention"),
        ("aten.native_batch_norm.default", "normalization"),
        ("aten.native_layer_norm_backward.default", "normalization"),
        ("aten._log_softmax.default", "reduction"),
        ("aten.max_pool2d_with_indices_backward.default", "reduction"),
        ("aten.maximum.default", "elementwise"),
        ("aten.embedding_dense_backward.default", "embedding"),
        ("aten.cat.default", "memory"),
        ("aten.relu_.default", "elementwise"),
        ("aten.view.default", None),
        ("aten.t.default", None),
    ],
)
def test_op_class(op: str, cls: str | None) -> None:
    assert op_class(op) == cls


def test_conv_gemms_worked_out() -> None:
    # 3x3 convolution, 64 -> 128 channels, stride 2, on 8 x 64 x 56 x 56: output 8 x 128 x 28 x 28.
    # forward: m = 8 x 28 x 28 = 6,272 pixels, n = 128 filters, k = 64 x 9 = 576.
    g = conv_gemms((8, 64, 56, 56), (128, 64, 3, 3), (8, 128, 28, 28), groups=1)
    assert g == {
        "forward": (6272, 128, 576, 1),
        "grad_input": (6272, 576, 128, 1),
        "grad_weight": (128, 576, 6272, 1),
    }
    # depthwise (groups = channels = 32): one 1 x 9 product per channel and pixel.
    g = conv_gemms((1, 32, 10, 10), (32, 1, 3, 3), (1, 32, 10, 10), groups=32)
    assert g["forward"] == (100, 1, 9, 32)


def test_pointwise_and_optimizer_rules() -> None:
    assert pointwise_flops("aten.relu_", [(4, 8)], [(4, 8)]) == 32  # 1 per output element
    assert pointwise_flops("aten.native_batch_norm", [(4, 8, 2, 2), (8,)], [(4, 8, 2, 2)]) == 5 * 128
    assert pointwise_flops("aten.sum", [(4, 8)], [(8,)]) == 32  # 1 per input element
    assert pointwise_flops("aten.cat", [(4, 8)], [(8, 8)]) == 0
    ops = optimizer_operators([("w", (10, 3))], "sgd-momentum")
    # 4 FLOPs per element (buf = mu buf + g; p -= lr buf); param, grad, buf read, param, buf written.
    assert ops[0]["flops"] == 120 and ops[0]["bytes"] == 4 * 5 * 30
    assert ops[0]["scales_with_batch"] is False and ops[0]["class"] == "optimizer"


def _torch_python() -> str | None:
    if torch_available():
        return None
    exe = os.environ.get("PERFSCHED_TORCH_PYTHON") or DEFAULT_TORCH_PYTHON
    try:
        ok = subprocess.run([exe, "-c", "import torch"], capture_output=True, timeout=120).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        ok = False
    if not ok:
        pytest.skip(f"no Python with PyTorch here (this one or {exe}); e2e/install-tools.sh installs it")
    return exe


def test_traced_resnet50_agrees_with_the_zoo_profile() -> None:
    py = _torch_python()
    traced = profile_torch(f"{MODELS}:resnet50", (3, 224, 224), batch_size=4, python=py)
    zoo = profile_zoo("resnet50", batch_size=4)
    assert traced.model.source == Source.TORCH and traced.model.name == "resnet50"
    assert traced.model.parameters == zoo.model.parameters == 25_557_032
    # Same counting rules, independent operator lists: total and per-phase FLOPs within 1%.
    assert traced.train_flops_per_sample == pytest.approx(zoo.train_flops_per_sample, rel=0.01)
    for ph in Phase:
        assert traced.step_flops(ph) == pytest.approx(zoo.step_flops(ph), rel=0.01)
    convs = [o for o in traced.operators if o.op == "aten.convolution"]
    assert len(convs) == 53
    assert convs[0].gemm is not None and convs[0].gemm.m == 4 * 112 * 112
    wgrads = [o for o in traced.operators if o.name.endswith("grad_weight")]
    assert len(wgrads) == 53 and all(o.gemm is not None and o.gemm.batch_dim == "k" for o in wgrads)
    assert all(o.scales_with_batch for o in traced.operators if o.phase != Phase.OPTIMIZER)


@pytest.mark.parametrize(("name", "params"), [("vgg16", 138_357_544), ("mobilenet_v2", 3_504_872)])
def test_traced_cnns_agree_with_the_zoo_profile(name: str, params: int) -> None:
    py = _torch_python()
    traced = profile_torch(f"{MODELS}:{name}", (3, 224, 224), batch_size=2, python=py)
    zoo = profile_zoo(name, batch_size=2)
    assert traced.model.parameters == zoo.model.parameters == params
    for ph in Phase:  # mobilenet_v2: depthwise (grouped) convolutions
        assert traced.step_flops(ph) == pytest.approx(zoo.step_flops(ph), rel=0.01)


def test_traced_mlp_worked_out() -> None:
    py = _torch_python()
    mlp = profile_torch(f"{MODELS}:mlp", (784,), batch_size=2, optimizer="sgd", python=py)
    fwd = [o for o in mlp.operators if o.phase == Phase.FORWARD and o.op_class == OpClass.GEMM]
    # 2 x 2 x 784 x 256 and 2 x 2 x 256 x 10.
    assert [o.flops for o in fwd] == [802_816, 10_240]
    # The first layer's input needs no gradient: three backward GEMMs (fc2 input + weight, fc1 weight).
    assert len([o for o in mlp.operators if o.phase == Phase.BACKWARD and o.op_class == OpClass.GEMM]) == 3
    # SGD: 2 FLOPs per parameter (784 x 256 + 256 + 256 x 10 + 10 = 203,530).
    assert mlp.step_flops(Phase.OPTIMIZER) == 2 * 203_530


@pytest.mark.parametrize(
    ("factory", "shape", "message"),
    [
        ("raises", (10,), "the factory raised RuntimeError: no weights here"),
        ("not_a_module", (10,), "the factory returned int, not an nn.Module"),
        ("bad_forward", (10,), r"forward at input shape \[2, 10\] failed: RuntimeError"),
        ("missing", (10,), "has no callable 'missing'"),
        ("mlp", (3, 3), r"forward at input shape \[2, 3, 3\] failed"),
    ],
)
def test_untraceable_models_are_named(factory: str, shape: tuple[int, ...], message: str) -> None:
    py = _torch_python()
    with pytest.raises(ProfileError, match=message) as info:
        profile_torch(f"{MODELS}:{factory}", shape, batch_size=2, python=py)
    assert "\n" not in str(info.value)


def test_a_file_that_fails_to_import_is_named(tmp_path: Path) -> None:
    py = _torch_python()
    f = tmp_path / "broken.py"
    f.write_text("import torch\nraise ValueError('half a file')\n", encoding="utf-8")
    with pytest.raises(ProfileError, match=r"importing .*broken\.py failed: ValueError: half a file"):
        profile_torch(f"{f}:build", (3,), python=py)
