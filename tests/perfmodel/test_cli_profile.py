"""`perfsched profile`: the three routes' flags, the JSON it writes, and exit 2 with one line on bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perfmodel.profile import load_profile
from scheduler.cli import main


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    out = capsys.readouterr()
    code = exc.value.code
    return (0 if code is None else int(code)), out.out, out.err


def test_zoo_profile_to_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["profile", "--zoo", "ResNet-18", "--batch-size", "16"], capsys)
    assert code == 0
    p = load_profile(json.loads(out))
    assert p.model.name == "resnet18" and p.batch_size == 16 and p.model.parameters == 11_689_512
    assert "resnet18: " in err and "11,689,512 parameters" in err


def test_llm_profile_to_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "tiny.json"
    cfg.write_text(
        json.dumps(
            {
                "num_hidden_layers": 2,
                "hidden_size": 64,
                "num_attention_heads": 4,
                "intermediate_size": 128,
                "vocab_size": 1000,
                "max_position_embeddings": 32,
                "hidden_act": "silu",
            }
        ),
        encoding="utf-8",
    )
    out = tmp_path / "p.json"
    code, stdout, _ = run(["profile", "--llm", str(cfg), "--batch-size", "2", "--out", str(out)], capsys)
    assert code == 0 and stdout == ""
    p = load_profile(out)
    assert p.model.name == "tiny" and p.sample.sequence_length == 32 and p.batch_size == 2
    # 2 layers x (4 x 64^2 attention + 3 x 64 x 128 MLP + 2 x 64 norms) + 2 x 1000 x 64 + 64 = 205,888.
    assert p.model.parameters == 2 * (4 * 64 * 64 + 3 * 64 * 128 + 2 * 64) + 2 * 1000 * 64 + 64


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["profile"], "give exactly one of --torch FILE.py:FACTORY, --zoo NAME, --llm CONFIG.json"),
        (["profile", "--zoo", "resnet50", "--llm", "x.json"], "(got --zoo, --llm)"),
        (["profile", "--zoo", "nope"], "--zoo 'nope': not a zoo model"),
        (["profile", "--zoo", "resnet50", "--input-shape", "3"], "--input-shape goes with --torch"),
        (["profile", "--torch", "m.py:f"], "--torch needs --input-shape"),
        (["profile", "--torch", "none.py:f", "--input-shape", "3"], "file none.py does not exist"),
        (["profile", "--torch", "m.py:f", "--input-shape", "3,x"], "--input-shape '3,x'"),
        (["profile", "--zoo", "resnet50", "--batch-size", "0"], "--batch-size must be a positive integer"),
        (["profile", "--zoo", "resnet50", "--optimizer", "lamb"], "unknown optimizer 'lamb'"),
        (["profile", "--llm", "none.json"], "--llm none.json: No such file"),
    ],
)
def test_bad_input_exits_2_with_one_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(argv, capsys)
    assert code == 2 and out == ""
    assert message in err
    assert err.count("\n") == 1


def test_unwritable_out(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["profile", "--zoo", "a3c", "--out", str(tmp_path / "no" / "p.json")], capsys)
    assert code == 2 and "--out" in err
