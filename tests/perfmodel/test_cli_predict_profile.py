"""`perfsched predict --profile`: a job composed from its operator profile answers like a zoo model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perfmodel.profile import dump_profile
from scheduler.cli import main
from tests.perfmodel.test_compose import mlp


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    out = capsys.readouterr()
    code = exc.value.code
    return (0 if code is None else int(code)), out.out, out.err


def test_profile_prediction_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "mlp.json"
    dump_profile(mlp(params=20_000_000), path)
    base = ["predict", "--profile", str(path), "--batch-size", "256", "--gpus", "8", "--json"]
    a100 = [*base, "--gpu-product", "NVIDIA-A100-SXM4-80GB", "--precision", "fp32"]
    code, out, _ = run([*a100, "--stack", "vendor"], capsys)
    assert code == 0
    d = json.loads(out)
    assert (d["route"], d["gpu_type"], d["gpus"], d["micro_batch"], d["matmul_dtype"]) == (
        "operators",
        "A100",
        8,
        32,
        "tf32",
    )
    code, out, _ = run(a100, capsys)  # plain PyTorch: FP32 matmuls, TF32 convolutions
    research = json.loads(out)
    assert (research["matmul_dtype"], research["conv_dtype"]) == ("fp32", "tf32")
    assert research["pred_samples_per_s"] < d["pred_samples_per_s"]
    assert d["pred_samples_per_s_low"] < d["pred_samples_per_s"] < d["pred_samples_per_s_high"]
    assert d["pred_iters_per_s"] == pytest.approx(d["pred_samples_per_s"] / 256)
    assert d["step_s"] == pytest.approx(1.0 / d["pred_iters_per_s"])
    code, out, _ = run([*base, "--gpu-product", "Tesla-V100-SXM2-16GB", "--precision", "fp32"], capsys)
    assert code == 0 and json.loads(out)["pred_samples_per_s"] < d["pred_samples_per_s"]


def test_profile_prediction_text(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "mlp.json"
    dump_profile(mlp(), path)
    code, out, _ = run(
        ["predict", "--profile", str(path), "--batch-size", "32", "--gpu-product", "H100"], capsys
    )
    assert code == 0
    assert "operator profile" in out and "samples/s" in out and "matmuls fp32, convolutions tf32" in out


@pytest.mark.parametrize(
    ("doc", "extra", "message"),
    [
        ({"schema_version": 7}, [], "--profile: profile: schema_version 7"),
        (None, ["--model", "resnet50"], "--profile: give the model by its profile alone"),
        (None, ["--gpu-product", "Z9000"], "--gpu-product"),
        (None, ["--batch-size", "0"], "--batch-size"),
        (None, ["--stack", "ngc"], "--stack"),
        (None, ["--sharding", "tp2"], "--sharding"),
    ],
)
def test_bad_input_exits_2_naming_it(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    doc: dict[str, object] | None,
    extra: list[str],
    message: str,
) -> None:
    path = tmp_path / "p.json"
    if doc is None:
        dump_profile(mlp(), path)
    else:
        path.write_text(json.dumps(doc))
    argv = ["predict", "--profile", str(path), "--batch-size", "32", "--gpu-product", "A100", *extra]
    code, _, err = run(argv, capsys)
    assert code == 2
    assert message in err
    assert len(err.strip().splitlines()) == 1
