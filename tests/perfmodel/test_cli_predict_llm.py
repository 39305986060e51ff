"""`perfsched predict` for LLM jobs: sequence length, sharding, memory in the JSON, exit 2 naming the flag."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.perfmodel.test_cli_predict import run

LLAMA = ["predict", "--model", "llama3-8b", "--batch-size", "64", "--precision", "bf16"]


def test_llm_json_reports_tokens_memory_and_fit(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [*LLAMA, "--gpu-product", "NVIDIA-H100-80GB-HBM3", "--gpus", "8", "--sequence-length", "4096"]
    code, out, _ = run([*argv, "--micro-batch", "1", "--activation-checkpointing", "--json"], capsys)
    assert code == 0
    d = json.loads(out)
    assert (d["sequence_length"], d["sharding"], d["micro_batch"], d["grad_accumulation"]) == (
        4096,
        "fsdp",
        1,
        8,
    )
    # a sample is a sequence: tokens/s = samples/s x 4096
    assert d["pred_tokens_per_s"] == pytest.approx(d["pred_samples_per_s"] * 4096)
    assert d["fits"] is True and 10 < d["memory_gib_per_gpu"] < 80
    # the same job at micro-batch 8 without checkpointing needs more than an H100 has
    code, out, _ = run([*argv, "--micro-batch", "8", "--json"], capsys)
    d8 = json.loads(out)
    assert d8["fits"] is False and d8["memory_gib_per_gpu"] > 80
    assert d8["memory_message"].startswith(
        f"needs ~{d8['memory_gib_per_gpu']:.0f} GiB per GPU at micro-batch 8"
    )


def test_sharding_changes_memory_not_just_the_label(capsys: pytest.CaptureFixture[str]) -> None:
    base = [*LLAMA, "--gpu-product", "H100", "--gpus", "8", "--micro-batch", "1", "--json"]
    got = {}
    for sharding in ("ddp", "fsdp", "tp2xpp2"):
        code, out, _ = run([*base, "--sharding", sharding], capsys)
        assert code == 0
        got[sharding] = json.loads(out)
    # DDP holds all 16 B x 8.03e9 = 120 GiB of states per GPU; fsdp an eighth of it
    assert got["ddp"]["memory_gib_per_gpu"] > 120 > 80 > got["fsdp"]["memory_gib_per_gpu"]
    assert got["ddp"]["fits"] is False and got["fsdp"]["fits"] is True
    assert got["tp2xpp2"]["data_parallel"] == 2  # 8 / (2 x 2)


def test_non_llm_job_reports_its_states_lower_bound(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        ["predict", "--model", "resnet50", "--batch-size", "64", "--gpu-product", "T4", "--json"], capsys
    )
    d = json.loads(out)
    assert code == 0 and d["fits"] is True and d["memory_activations_known"] is False
    assert "sequence_length" not in d


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--model", "my-llm", "--sequence-length", "2048"], "--params: an LLM needs a parameter count"),
        (["--model", "llama3-8b", "--sequence-length", "0"], "--sequence-length: must be > 0, got 0"),
        (["--model", "llama3-8b", "--sequence-length", "-5"], "--sequence-length: must be > 0, got -5"),
        (["--model", "llama3-8b", "--sharding", "tp4xqq"], "--sharding: cannot parse 'tp4xqq'"),
        (
            ["--model", "llama3-8b", "--sharding", "tp4xpp4"],
            "--sharding: tp4xpp4 splits the model over 16 GPUs",
        ),
        (["--model", "llama3-8b", "--micro-batch", "0"], "--micro-batch: must be > 0"),
    ],
)
def test_bad_llm_input_exits_2_naming_the_flag(
    extra: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["predict", "--batch-size", "64", "--gpu-product", "H100", "--gpus", "8", *extra]
    code, out, err = run(argv, capsys)
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and message in lines[0]


def test_csv_rows_carry_llm_columns_and_memory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = tmp_path / "rows.csv"
    rows.write_text(
        "model,batch_size,gpu_product,gpus,precision,sequence_length,sharding,params\n"
        "llama3-70b,256,H100,64,bf16,4096,tp4xpp8,\n"
        "custom,64,A100,8,bf16,2048,fsdp,1.3e9\n"
        "llama3-8b,64,H100,8,bf16,2048,tp3,\n"
    )
    code, out, _ = run(["predict", "--input", str(rows), "--json"], capsys)
    assert code == 0
    got = json.loads(out)
    assert got[0]["error"] == "" and isinstance(got[0]["fits"], bool) and got[0]["pred_samples_per_s"] > 0
    assert got[1]["error"] == "" and got[1]["fits"] is True  # a 1.3B model from its parameter count
    assert got[2]["error"].startswith("sharding: tensor-parallel degree 3 must divide the 32 attention heads")


def test_a_cnn_with_a_sharding_stays_a_data_parallel_job(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["predict", "--model", "resnet50", "--batch-size", "256", "--gpu-product", "V100", "--gpus", "4"]
    code, out, _ = run([*argv, "--sharding", "ddp", "--json"], capsys)
    plain_code, plain, _ = run([*argv, "--json"], capsys)
    assert code == plain_code == 0
    assert json.loads(out)["pred_samples_per_s"] == json.loads(plain)["pred_samples_per_s"]
    code, _, err = run([*argv, "--sharding", "tp4xqq"], capsys)
    assert code == 2 and "--sharding: cannot parse" in err
