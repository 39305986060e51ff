"""The MDOT comparison bench: operator tokens, row features and the PyTorch trainer on a small table."""

from __future__ import annotations

import math
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from bench.mdot_compare import (
    PLACEMENT_COLUMNS,
    ROW_COLUMNS,
    TOKEN_COLUMNS,
    _module,
    encode_profile,
    encode_row,
)
from perfmodel.gpus import gpu_spec
from perfmodel.measurements import Measurement
from perfmodel.opcost import peak_flops
from perfmodel.profile import Phase
from perfmodel.profiling import profile_zoo

ROOT = Path(__file__).resolve().parents[2]
TORCH_PYTHON = "/usr/bin/python3"


def _row(**kw: object) -> Measurement:
    base: dict[str, object] = dict(
        source="test",
        model="resnet50",
        dataset="imagenet",
        batch_size=256,
        gpu_type="V100",
        num_gpus=8,
        num_nodes=1,
        gpus_per_node=8,
        interconnect="nvlink",
        network_gbps=100.0,
        iters_per_s=1.0,
    )
    base.update(kw)
    return Measurement(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("name", "module"),
    [
        ("layer3.1.2.conv.grad_input", "layer3.1.2.conv"),
        ("layer3.1.2.conv.grad_weight", "layer3.1.2.conv"),
        ("layer4.2.2.conv.weight.adamw", "layer4.2.2.conv"),
        ("fc.bias.adamw", "fc"),
        ("layers.*.mlp_residual.backward#1", "layers.*.mlp_residual"),
        ("layer1.0.1.conv", "layer1.0.1.conv"),
    ],
)
def test_backward_and_optimizer_operators_share_their_forward_module(name: str, module: str) -> None:
    assert _module(name) == module


def test_tokens_merge_identical_operators_and_keep_the_step_work() -> None:
    prof = profile_zoo("resnet50", batch_size=8)
    names, cls, phase, x = encode_profile(prof)
    c = {k: i for i, k in enumerate(TOKEN_COLUMNS)}
    # 583 operators; repeated bottleneck blocks with equal shapes collapse into counted tokens.
    assert len(names) == len(cls) == len(phase) == x.shape[0] < len(prof.operators)
    assert x.shape[1] == len(TOKEN_COLUMNS)
    # sum over tokens of count x FLOPs is the step's FLOPs (operators with fewer than 1 FLOP count as 1).
    flops = np.exp(x[:, c["log_flops"]] + x[:, c["log_count"]]).sum()
    assert flops == pytest.approx(prof.step_flops(), rel=1e-3)
    assert ((x[:, c["depth"]] >= 0) & (x[:, c["depth"]] <= 1)).all()
    # the first token is the stem convolution at depth 0; the optimizer tokens are not batch-scaled.
    assert x[0, c["depth"]] == 0 and names[0] == "aten.convolution"
    opt = phase == 2
    assert opt.any() and (x[opt, c["scales_with_batch"]] == 0).all()
    assert Phase.OPTIMIZER.value == "optimizer"


def test_backward_tokens_take_their_forward_modules_depth() -> None:
    prof = profile_zoo("gpt2", batch_size=4)
    _, _, phase, x = encode_profile(prof)
    c = {k: i for i, k in enumerate(TOKEN_COLUMNS)}
    depth, index = x[:, c["depth"]], x[:, c["index"]]
    bwd = phase == 1
    # the backward pass runs the layers in reverse: later in the sequence, shallower in the graph
    assert np.corrcoef(index[bwd], depth[bwd])[0, 1] < -0.9
    # and its last token (the embedding's gradient) sits where the embedding does, at depth 0
    assert depth[bwd][np.argmax(index[bwd])] == 0.0
    assert (np.diff(index) > 0).all()


def test_row_features_follow_the_precision_as_the_stack_runs_it() -> None:
    prof = profile_zoo("resnet50", batch_size=8)
    r = {k: i for i, k in enumerate(ROW_COLUMNS)}
    pl = {k: i for i, k in enumerate(PLACEMENT_COLUMNS)}
    a100, v100 = gpu_spec("A100"), gpu_spec("V100")
    row, place = encode_row(_row(gpu_type="A100"), a100, prof, 300.0)
    assert len(row) == len(ROW_COLUMNS) and len(place) == len(PLACEMENT_COLUMNS)
    # an "fp32" ResNet's convolutions run on TF32 tensor cores on an A100 (PyTorch's default), on FP32
    # cores on a V100
    assert row[r["log_peak_matmul"]] == pytest.approx(math.log(peak_flops(a100, "tf32")))
    row_v, _ = encode_row(_row(), v100, prof, 150.0)
    assert row_v[r["log_peak_matmul"]] == pytest.approx(math.log(peak_flops(v100, "fp32")))
    # a transformer's GEMMs: FP32 on plain PyTorch, TF32 in NVIDIA's containers
    bert = profile_zoo("bert", batch_size=8)
    for stack, dtype in (("research", "fp32"), ("vendor", "tf32")):
        row_b, _ = encode_row(
            _row(gpu_type="A100", model="bert", dataset="squad", stack=stack), a100, bert, 300.0
        )
        assert row_b[r["log_peak_matmul"]] == pytest.approx(math.log(peak_flops(a100, dtype)))
    # amp halves the bytes of the non-optimizer tensors
    row_amp, _ = encode_row(_row(precision="amp"), v100, prof, 150.0)
    assert row_amp[r["log_width"]] == pytest.approx(math.log(0.5)) and row_v[r["log_width"]] == 0.0
    # 256 over 8 GPUs = 32 per GPU, in micro-batches of 16: 2 accumulation steps; 32 / 8 profiled
    _, place_mb = encode_row(_row(micro_batch=16), v100, prof, 150.0)
    assert place_mb[pl["log_accum"]] == pytest.approx(math.log(2))
    assert row_v[r["log_micro_ratio"]] == pytest.approx(math.log(32 / 8))
    # the ring all-reduce of 4-byte gradients over 8 GPUs at 150 GB/s: 2 x 7/8 x 4 x params / 150e9 + latency
    ring = 2 * 7 / 8 * 4 * prof.model.parameters / 150e9
    assert math.exp(place[pl["log_ring"]]) > ring * 150 / 300 * 0.99


@pytest.mark.skipif(
    shutil.which(TORCH_PYTHON) is None
    or subprocess.run([TORCH_PYTHON, "-c", "import torch"], capture_output=True, check=False).returncode != 0,
    reason=f"{TORCH_PYTHON} has no PyTorch",
)
def test_trainer_learns_a_table_it_can_represent(tmp_path: Path) -> None:
    # Two profiles on two GPUs at two batch sizes, 1 GPU: step time = 3 x the datasheet roofline sum.
    rng = np.random.default_rng(0)
    tok_op, tok_cls, tok_phase, tok_x, offsets = [], [], [], [], [0]
    profiles = [profile_zoo(n, batch_size=8) for n in ("resnet18", "gpt2")]
    for prof in profiles:
        names, c, p, x = encode_profile(prof)
        tok_op += names
        tok_cls.append(c)
        tok_phase.append(p)
        tok_x.append(x)
        offsets.append(offsets[-1] + len(names))
    vocab = sorted(set(tok_op))
    rows, places, log_t, prof_ids = [], [], [], []
    for k, prof in enumerate(profiles):
        for gpu in ("V100", "A100"):
            for b in (8, 16, 32, 64):
                spec = gpu_spec(gpu)
                row, place = encode_row(
                    _row(gpu_type=gpu, batch_size=b, num_gpus=1, gpus_per_node=1), spec, prof, 150.0
                )
                step = prof.at_batch(b)
                # roofline: FLOPs at the matmul peak, bytes at the bandwidth, whichever is longer, summed
                t = sum(
                    max(o.flops / math.exp(row[1]), o.bytes / math.exp(row[3])) * o.count
                    for o in step.operators
                )
                rows.append(row)
                places.append(place)
                log_t.append(math.log(3.0 * t) + rng.normal(0, 0.01))
                prof_ids.append(k)
    np.savez(
        tmp_path / "a.npz",
        tok_op=np.asarray([vocab.index(o) for o in tok_op]),
        tok_cls=np.concatenate(tok_cls),
        tok_phase=np.concatenate(tok_phase),
        tok_x=np.concatenate(tok_x),
        offsets=np.asarray(offsets),
        n_ops=np.asarray(len(vocab)),
        prof=np.asarray(prof_ids),
        row_x=np.asarray(rows),
        place_x=np.asarray(places),
        log_t=np.asarray(log_t),
        token_columns=np.asarray(TOKEN_COLUMNS),
        batch_scaled=np.asarray(
            [TOKEN_COLUMNS.index(c) for c in ("log_flops", "log_bytes", "log_out_numel", "log_in0_numel")]
        ),
        row_columns=np.asarray(ROW_COLUMNS),
    )
    n = len(log_t)
    test = np.arange(0, n, 4)
    train = np.setdiff1d(np.arange(n), test)
    np.savez(
        tmp_path / "f.npz",
        names=np.asarray(["all|x"]),
        train_0=train,
        test_0=test,
        group_0=np.arange(train.size),
    )
    proc = subprocess.run(
        [
            TORCH_PYTHON,
            str(ROOT / "bench" / "mdot_train.py"),
            str(tmp_path / "a.npz"),
            str(tmp_path / "f.npz"),
            str(tmp_path / "p.npz"),
            "--steps",
            "12",
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    pred = np.load(tmp_path / "p.npz")["pred_0"]
    err = np.abs(np.exp(np.asarray(log_t)[test] - pred) - 1)
    # the roofline times a learned factor fits within the noise and the learned drift of a few steps
    assert err.mean() < 0.15, err
