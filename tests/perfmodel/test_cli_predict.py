"""`perfsched predict` and `perfsched perfmodel train`: answers, batch CSV with an error column, exit 2."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from scheduler.cli import main

HEADER = "model,dataset,batch_size,gpu_product,gpus,gpus_per_node,interconnect,network_gbps,precision"


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    out = capsys.readouterr()
    code = exc.value.code
    return (0 if code is None else int(code)), out.out, out.err


def test_single_prediction_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        [
            "predict",
            "--model",
            "resnet50",
            "--batch-size",
            "256",
            "--gpu-product",
            "NVIDIA-A100-SXM4-40GB",
            "--gpus",
            "8",
            "--gpus-per-node",
            "8",
            "--json",
        ],
        capsys,
    )
    assert code == 0
    d = json.loads(out)
    assert (d["gpu_type"], d["gpus"], d["nodes"], d["per_gpu_batch"]) == ("A100", 8, 1, 32.0)  # 256 / 8
    assert d["pred_iters_per_s"] == pytest.approx(d["pred_samples_per_s"] / 256)
    assert d["pred_samples_per_s_low"] < d["pred_samples_per_s"] < d["pred_samples_per_s_high"]


def test_single_prediction_text(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        [
            "predict",
            "--model",
            "ResNet-18",
            "--dataset",
            "cifar10",
            "--batch-size",
            "128",
            "--gpu-product",
            "Tesla-T4",
            "--precision",
            "amp",
        ],
        capsys,
    )
    assert code == 0 and "samples/s" in out and "iterations/s" in out and "resnet18 on cifar10" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "nosuch", "--batch-size", "8", "--gpu-product", "V100"], "--model: unknown model"),
        (["--model", "resnet50", "--batch-size", "0", "--gpu-product", "V100"], "--batch-size: must be > 0"),
        (["--model", "resnet50", "--batch-size", "8", "--gpu-product", "V100", "--gpus", "0"], "--gpus:"),
        (["--model", "resnet50", "--batch-size", "8"], "--gpu-product: missing"),
        (
            ["--model", "resnet50", "--batch-size", "8", "--gpu-product", "FooGPU"],
            "--gpu-product: unknown GPU",
        ),
        (
            ["--model", "resnet50", "--batch-size", "8", "--gpu-product", "V100", "--precision", "int4"],
            "--precision:",
        ),
        (["--input", "/nonexistent/rows.csv"], "file not found"),
    ],
)
def test_bad_input_exits_2_with_a_message(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(["predict", *args], capsys)
    assert code == 2
    assert message in err and "Traceback" not in err


def test_batch_csv_keeps_going_with_an_error_column(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = tmp_path / "rows.csv"
    rows.write_text(
        HEADER + "\n"
        "resnet50,imagenet,256,NVIDIA-A100-SXM4-40GB,8,8,nvlink,100,fp32\n"
        "nosuch,,32,Tesla-T4,1,,,,\n"
        "bert,squad,0,Tesla-T4,1,,,,\n"
        "bert,squad,32,Tesla-T4,4,2,pcie,25,amp\n"
    )
    code, out, err = run(["predict", "--input", str(rows)], capsys)
    assert code == 0
    got = list(csv.DictReader(io.StringIO(out)))
    assert len(got) == 4
    assert [bool(r["error"]) for r in got] == [False, True, True, False]
    assert "unknown model 'nosuch'" in got[1]["error"] and "batch_size" in got[2]["error"]
    assert float(got[0]["pred_samples_per_s"]) > 0 and float(got[3]["pred_iters_per_s"]) > 0
    assert got[1]["pred_samples_per_s"] == ""
    assert got[0]["model"] == "resnet50"  # input columns are written back
    assert "2 of 4 rows" in err
    code, out, _ = run(["predict", "--input", str(rows), "--json"], capsys)
    assert code == 0 and len(json.loads(out)) == 4


def test_observed_runs_calibrate_predictions(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = tmp_path / "rows.csv"
    rows.write_text(HEADER + "\nresnet50,imagenet,256,NVIDIA-A100-SXM4-40GB,8,8,nvlink,100,fp32\n")
    _, out, _ = run(["predict", "--input", str(rows)], capsys)
    cold = float(next(csv.DictReader(io.StringIO(out)))["pred_samples_per_s"])
    obs = tmp_path / "obs.csv"
    obs.write_text(
        HEADER + ",observed_samples_per_s\n"
        f"resnet50,imagenet,256,NVIDIA-A100-SXM4-40GB,8,8,nvlink,100,fp32,{2 * cold}\n"
        f"resnet50,imagenet,256,NVIDIA-A100-SXM4-40GB,8,8,nvlink,100,fp32,{2 * cold}\n"
    )
    _, out, _ = run(["predict", "--input", str(rows), "--observed", str(obs)], capsys)
    warm = float(next(csv.DictReader(io.StringIO(out)))["pred_samples_per_s"])
    assert warm / cold > 1.8  # two observations at 2x pull the same configuration most of the way
    bad = tmp_path / "bad.csv"
    bad.write_text(HEADER + ",observed_samples_per_s\nresnet50,imagenet,256,V100,1,,,,,fast\n")
    code, _, err = run(["predict", "--input", str(rows), "--observed", str(bad)], capsys)
    assert code == 2 and "line 2" in err and "observed_samples_per_s" in err


def test_train_without_measured_tables_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["perfmodel", "train", "--shared-dir", str(tmp_path)], capsys)
    assert code == 2 and "throughput_isolated_tidy.csv.gz not found" in err


def test_help_lists_every_precision_the_model_takes(capsys: pytest.CaptureFixture[str]) -> None:
    from perfmodel.gpus import PRECISIONS

    code, out, _ = run(["predict", "--help"], capsys)
    assert code == 0
    text = " ".join(out.replace("\u2502", " ").split())  # the help is boxed and wrapped to the width
    assert " | ".join(PRECISIONS) in text


@pytest.mark.parametrize("precision", ["tf32", "fp8"])
def test_every_listed_precision_is_accepted(precision: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(
        [
            "predict",
            "--model",
            "bert",
            "--batch-size",
            "32",
            "--gpu-product",
            "H100",
            "--precision",
            precision,
            "--json",
        ],
        capsys,
    )
    assert code == 0, err
    assert json.loads(out)["precision"] == precision


def test_stack_sets_how_fp32_runs_on_ampere(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["predict", "--model", "bert", "--batch-size", "32", "--gpu-product", "A100", "--json"]

    def speed(*extra: str) -> float:
        code, out, _ = run([*base, *extra], capsys)
        assert code == 0
        return float(json.loads(out)["pred_samples_per_s"])

    research = speed("--precision", "fp32")  # plain PyTorch: FP32 matmuls (19.5 TFLOP/s)
    vendor = speed("--precision", "fp32", "--stack", "vendor")  # NVIDIA's containers: TF32 (156)
    assert vendor > 2.0 * research
    assert vendor == pytest.approx(speed("--precision", "tf32", "--stack", "vendor"))
    code, _, err = run([*base, "--stack", "ngc"], capsys)
    assert code == 2 and "--stack" in err
