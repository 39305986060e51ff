"""perfmodel.profile: the operator-profile schema, round trip, batch rescaling and one-line errors."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from perfmodel.errors import InvalidInputError, ProfileError
from perfmodel.profile import (
    GemmDims,
    ModelRef,
    OpClass,
    Operator,
    OpShapes,
    Phase,
    Sample,
    Source,
    dump_profile,
    load_profile,
    make_profile,
)


def _doc() -> dict[str, Any]:
    # A two-layer toy at batch 4: one 1x1 convolution (forward), its backward (2x), one SGD update.
    # conv: m = 4*8*8 = 256 output pixels, n = 16 output channels, k = 8 input channels:
    #   2*256*16*8 = 65,536 FLOPs; backward 2 x 65,536 = 131,072; SGD over 128 weights: 2*128 = 256.
    #   step = 196,864 FLOPs; per sample /4 = 49,216.
    return {
        "schema_version": 1,
        "model": {"name": "toy", "source": "torch", "parameters": 128},
        "batch_size": 4,
        "sample": {"input_shape": [8, 8, 8]},
        "operators": [
            {
                "name": "conv",
                "op": "aten.convolution",
                "class": "gemm",
                "phase": "forward",
                "shapes": {"inputs": [[4, 8, 8, 8], [16, 8, 1, 1]], "output": [4, 16, 8, 8]},
                "gemm": {"m": 256, "n": 16, "k": 8, "batch": 1},
                "flops": 65536,
                "bytes": 4 * (2048 + 128 + 4096),
                "scales_with_batch": True,
                "count": 1,
            },
            {
                "name": "conv.backward",
                "op": "aten.convolution_backward",
                "class": "gemm",
                "phase": "backward",
                "gemm": {"m": 256, "n": 16, "k": 8, "batch": 2},
                "flops": 131072,
                "bytes": 4 * 2 * (2048 + 128 + 4096),
            },
            {
                "name": "sgd",
                "op": "sgd",
                "class": "optimizer",
                "phase": "optimizer",
                "flops": 256,
                "bytes": 4 * 3 * 128,
                "scales_with_batch": False,
            },
        ],
        "train_flops_per_sample": 49216,
        "param_bytes_by_dtype": {"float32": 512},
    }


def test_load_reads_every_field_and_sums_the_step() -> None:
    p = load_profile(_doc())
    assert p.model == ModelRef("toy", Source.TORCH, 128)
    assert p.batch_size == 4 and p.sample == Sample(input_shape=(8, 8, 8))
    assert [o.op_class for o in p.operators] == [OpClass.GEMM, OpClass.GEMM, OpClass.OPTIMIZER]
    assert p.operators[0].gemm == GemmDims(256, 16, 8, 1)
    assert p.operators[0].gemm.flops == 65536  # 2*256*16*8
    assert p.operators[1].count == 1 and p.operators[1].scales_with_batch  # defaults
    assert p.operators[1].shapes == OpShapes()
    assert p.step_flops() == 196864
    assert p.step_flops(Phase.BACKWARD) == 131072
    assert p.step_bytes(Phase.OPTIMIZER) == 1536
    assert p.param_bytes_by_dtype == {"float32": 512}


def test_round_trip_through_json_and_a_file(tmp_path: Path) -> None:
    p = load_profile(_doc())
    assert load_profile(json.loads(json.dumps(p.to_json()))) == p
    path = tmp_path / "p.json"
    dump_profile(p, path)
    assert load_profile(path) == p
    assert load_profile(str(path)) == p


def test_at_batch_rescales_activations_only() -> None:
    p = load_profile(_doc()).at_batch(8)
    # conv forward and backward double (65,536 -> 131,072; 131,072 -> 262,144), SGD stays 256:
    # step 393,472 / 8 = 49,184 per sample (the optimizer is amortised over more samples).
    assert p.step_flops() == 393472
    assert p.train_flops_per_sample == 49184
    conv = p.operators[0]
    assert conv.gemm == GemmDims(512, 16, 8, 1)
    assert conv.shapes.inputs[0] == (8, 8, 8, 8) and conv.shapes.inputs[1] == (16, 8, 1, 1)
    assert conv.shapes.output == (8, 16, 8, 8)
    assert p.operators[2].flops == 256
    assert load_profile(p.to_json()) == p
    with pytest.raises(ProfileError, match="batch_size"):
        p.at_batch(0)


def test_at_batch_scales_k_of_a_weight_gradient() -> None:
    d = _doc()
    d["operators"][1]["gemm"]["batch_dim"] = "k"
    d["operators"][1]["gemm"]["k"] = 256  # 2 x 256 x 16 x 256 x 2 would be more FLOPs: only dims change
    p = load_profile(d)
    assert p.operators[1].gemm == GemmDims(256, 16, 256, 2, batch_dim="k")
    assert load_profile(p.to_json()) == p
    assert p.at_batch(8).operators[1].gemm == GemmDims(256, 16, 512, 2, batch_dim="k")


def test_make_profile_computes_train_flops() -> None:
    ops = [
        Operator(
            "fc", "aten.mm", OpClass.GEMM, Phase.FORWARD, 2.0 * 4 * 3 * 2, 100.0, gemm=GemmDims(4, 3, 2)
        ),
        Operator(
            "fc.count", "aten.mm", OpClass.GEMM, Phase.BACKWARD, 48.0, 100.0, gemm=GemmDims(4, 3, 2), count=3
        ),
    ]
    p = make_profile(ModelRef("m", Source.LLM, 6), 4, Sample(sequence_length=16), ops)
    assert p.train_flops_per_sample == (48 + 3 * 48) / 4  # 48 per sample


def _with(path: str, value: Any) -> dict[str, Any]:
    d = copy.deepcopy(_doc())
    *parents, last = path.split(".")
    cur: Any = d
    for k in parents:
        cur = cur[int(k)] if k.isdigit() else cur[k]
    if value is _DELETE:
        del cur[last]
    else:
        cur[last] = value
    return d


_DELETE = object()


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        ("schema_version", 2, "schema_version 2 is not supported"),
        ("schema_version", _DELETE, "missing field 'schema_version'"),
        ("schema_version", True, "schema_version True is not supported"),
        ("model", _DELETE, "missing field 'model'"),
        ("model.source", "onnx", "unknown source 'onnx'"),
        ("model.parameters", -1, "parameters must be >= 0"),
        ("batch_size", 0, "batch_size must be a positive integer"),
        ("batch_size", 2.5, "'batch_size' must be an integer"),
        ("sample", {}, "needs 'input_shape' or 'sequence_length'"),
        ("sample.input_shape", [3, -1], "input_shape must be a list of non-negative integers"),
        ("operators", [], "'operators' is empty"),
        ("operators.0.flops", -1.0, r"operators\[0\] \(conv\): flops must be a finite number >= 0"),
        ("operators.0.flops", float("nan"), "flops must be a finite number"),
        ("operators.0.bytes", "many", "'bytes' must be a number"),
        ("operators.1.class", "conv", "unknown operator class 'conv'"),
        ("operators.1.phase", "warmup", "unknown phase 'warmup'"),
        ("operators.1.gemm", _DELETE, "a gemm operator needs its 'gemm' dimensions"),
        ("operators.1.gemm.m", 0, "gemm: m must be a positive integer"),
        ("operators.1.gemm.batch_dim", "n", "batch_dim must be 'm' or 'k'"),
        ("operators.1.gemm.rows", 3, r"gemm: unknown field 'rows'"),
        ("operators.2.count", 0, "count must be a positive integer"),
        ("operators.2.scales_with_batch", "no", "scales_with_batch must be true or false"),
        ("operators.2.name", _DELETE, r"operators\[2\]: missing field 'name'"),
        ("operators.2.flop", 3, "unknown field 'flop'"),
        ("train_flops_per_sample", 60000, "disagrees with its operators"),
        ("param_bytes_by_dtype", {"float32": -4}, "param_bytes_by_dtype.float32 must be a finite number"),
        ("extra", 1, "unknown field 'extra'"),
    ],
)
def test_bad_documents_name_the_problem(path: str, value: Any, message: str) -> None:
    with pytest.raises(ProfileError, match=message) as info:
        load_profile(_with(path, value))
    assert "\n" not in str(info.value)
    assert isinstance(info.value, InvalidInputError)


def test_bad_files_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match=r"missing\.json"):
        load_profile(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json", encoding="utf-8")
    with pytest.raises(ProfileError, match=r"bad\.json: not JSON"):
        load_profile(bad)
    arr = tmp_path / "arr.json"
    arr.write_text("[1]", encoding="utf-8")
    with pytest.raises(ProfileError, match="must be a JSON object"):
        load_profile(arr)
