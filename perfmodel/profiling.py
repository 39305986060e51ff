"""``perfsched profile``'s Python API: a model -> the operator profile of one training step.

Three routes, one result (``perfmodel.profile.OperatorProfile``):

- ``profile_zoo(name)``: every model of ``perfmodel.zoo``, counted analytically from its layer table
  (``perfmodel.profile_cnn``, ``perfmodel.profile_llm``); ``ZOO_PROFILES`` names each table's source.
- ``profile_llm(config)``: a transformer from a HuggingFace config.json (or the short keys).
- ``profile_torch("FILE.py:FACTORY", input_shape)``: the module the factory builds, traced on PyTorch's
  meta device by ``perfmodel.torch_trace``; in this process when ``torch`` imports, else in a subprocess
  with ``$PERFSCHED_TORCH_PYTHON`` (default ``/usr/bin/python3``), so the scheduler itself never needs
  PyTorch.

Bad input raises ``ProfileError`` with one line naming the problem. Pure apart from ``profile_torch``,
which runs the user's factory (and maybe a subprocess).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfmodel import profile_cnn as cnn
from perfmodel.errors import ProfileError
from perfmodel.opcount import OPTIMIZERS
from perfmodel.profile import OperatorProfile, Sample, Source, load_profile
from perfmodel.profile_llm import TransformerSpec, load_config, seq2seq_profile, transformer_profile
from perfmodel.profile_net import Net
from perfmodel.profile_record import T
from perfmodel.zoo import lookup_model, model_names

DEFAULT_TORCH_PYTHON = "/usr/bin/python3"
TORCH_TIMEOUT_S = 600.0


@dataclass(frozen=True, slots=True)
class ZooTable:
    """How a zoo model's profile is built: the layer table, what a sample is, the default micro-batch."""

    build: Callable[[Net], None]
    sample: Sample
    batch_size: int
    source: str


def _word_lm(net: Net) -> None:
    # pytorch/examples word_language_model as Gavel runs it: 2-layer LSTM of 200, 33,278-word vocabulary,
    # 35-token sequences; the input projection of all steps at once, the recurrent GEMM step by step.
    b, s, h = net.batch, 35, 200
    x = net.dropout(net.embedding((b, s), 33278, h, "encoder"))
    for layer in range(2):
        with net.scope(f"rnn.l{layer}"):
            net.linear(x, 4 * h, name="ih")
            with net.repeat(s, "step", shared=True):
                r = net.linear(T((b, h)), 4 * h, name="hh")
                net.pointwise([r], "lstm_cell", "cell", flops_per_element=3.0)
            x = net.dropout(T((b, s, h)))
    net.cross_entropy(net.linear(x, 33278, name="decoder"))


def _deepspeech2(net: Net) -> None:
    # deepspeech.pytorch layout: two convolutions over (161 frequency bins x 1200 frames of 10 ms), five
    # bidirectional GRU layers of 768 (directions summed; 38M parameters, the zoo's figure), 29 characters.
    x = net.input((1, 161, 1200))
    with net.scope("conv"):
        x = net.act(net.bn(net.conv(x, 32, (41, 11), (2, 2), (20, 5), bias=True, name="0")), "hardtanh")
        x = net.act(net.bn(net.conv(x, 32, (21, 11), (2, 1), (10, 5), bias=True, name="3")), "hardtanh")
    b, c, f, t = x.shape
    x = net.copy(x, "to_sequence", (b, t, c * f))
    h = 768
    for layer in range(5):
        with net.scope(f"rnns.{layer}"):
            if layer:
                x = net.norm(x, "batch", "batch_norm", channels_dim=2)
            for d in ("fwd", "bwd"):
                with net.scope(d):
                    net.linear(x, 3 * h, name="ih")
                    with net.repeat(t, "step", shared=True):
                        r = net.linear(T((b, h)), 3 * h, name="hh")
                        net.pointwise([r], "gru_cell", "cell", flops_per_element=3.0)
            x = net.add(T((b, t, h)), T((b, t, h)), "sum_directions")
    x = net.norm(x, "batch", "fc.bn", channels_dim=2)
    y = net.linear(x, 29, bias=False, name="fc")
    net.reduce(y, (), "ctc_loss", "ctc_loss")


def _ncf(net: Net) -> None:
    # NeuMF (He et al. 2017) on MovieLens-20M: GMF of 64 and an MLP 256 -> 128 -> 64 over 128-wide user
    # and item embeddings (the ~41k multiply-adds of the zoo's entry), one logit, binary cross-entropy.
    b = net.batch
    users, items = 138493, 26744
    gu = net.embedding((b,), users, 64, "mf_user")
    gi = net.embedding((b,), items, 64, "mf_item")
    mf = net.pointwise([gu, gi], "mul", "gmf")
    x = net.cat([net.embedding((b,), users, 128, "mlp_user"), net.embedding((b,), items, 128, "mlp_item")], 1)
    for i, w in enumerate((128, 64)):
        x = net.act(net.linear(x, w, name=f"mlp.{i}"), "relu")
    y = net.linear(net.cat([mf, x], 1), 1, name="predict")
    net.reduce(y, (), "binary_cross_entropy_with_logits", "loss")


def _autoencoder(net: Net) -> None:
    # Gavel's Recommendation job: an autoencoder over the 26,744 MovieLens-20M items, 512 hidden units.
    x = net.input((26744,))
    y = net.act(net.linear(x, 512, name="encoder"), "selu")
    y = net.linear(y, 26744, name="decoder")
    net.reduce(y, (), "mse_loss", "loss")


_IMG = Sample(input_shape=(3, 224, 224))
ZOO_PROFILES: dict[str, ZooTable] = {
    "resnet18": ZooTable(lambda n: cnn.resnet(n, 18), _IMG, 32, "torchvision resnet18 (He et al. 2016)"),
    "resnet50": ZooTable(lambda n: cnn.resnet(n, 50), _IMG, 32, "torchvision resnet50 (v1.5)"),
    "resnet101": ZooTable(lambda n: cnn.resnet(n, 101), _IMG, 32, "torchvision resnet101 (v1.5)"),
    "vgg16": ZooTable(cnn.vgg16, _IMG, 32, "torchvision vgg16 (configuration D)"),
    "inception_v3": ZooTable(
        cnn.inception_v3, Sample(input_shape=(3, 299, 299)), 32, "torchvision inception_v3 with AuxLogits"
    ),
    "mobilenet_v2": ZooTable(cnn.mobilenet_v2, _IMG, 32, "torchvision mobilenet_v2 (width 1.0)"),
    "shufflenet_v2": ZooTable(cnn.shufflenet_v2, _IMG, 32, "torchvision shufflenet_v2_x1_0"),
    "yolov3": ZooTable(
        cnn.yolov3, Sample(input_shape=(3, 416, 416)), 16, "Redmon & Farhadi 2018, Darknet-53"
    ),
    "cyclegan": ZooTable(
        cnn.cyclegan,
        Sample(input_shape=(3, 256, 256)),
        1,
        "junyanz/pytorch-CycleGAN-and-pix2pix resnet_9blocks",
    ),
    "a3c": ZooTable(cnn.a3c, Sample(input_shape=(1, 42, 42)), 20, "ikostrikov/pytorch-a3c ActorCritic"),
    "lstm": ZooTable(_word_lm, Sample(sequence_length=35), 20, "pytorch/examples word_language_model"),
    "deepspeech2": ZooTable(
        _deepspeech2, Sample(input_shape=(1, 161, 1200)), 8, "SeanNaren/deepspeech.pytorch, GRU 768 x 5"
    ),
    "ncf": ZooTable(_ncf, Sample(input_shape=(2,)), 256, "He et al. 2017 NeuMF"),
    "recommendation": ZooTable(_autoencoder, Sample(input_shape=(26744,)), 64, "Gavel recommendation job"),
}

# Transformers of the zoo that are not LLMArch entries: (spec, source).
_TRANSFORMERS: dict[str, tuple[TransformerSpec, str]] = {
    "bert": (
        TransformerSpec(
            12,
            768,
            12,
            12,
            3072,
            30522,
            384,
            gated_mlp=False,
            tied_embeddings=True,
            norm="layer",
            qkv_bias=True,
            linear_bias=True,
            rotary=False,
            causal=False,
            head="qa",
            positions=512,
        ),
        "bert-base-uncased config.json; SQuAD head, 384-token features",
    ),
    "bert-large": (
        TransformerSpec(
            24,
            1024,
            16,
            16,
            4096,
            30522,
            384,
            gated_mlp=False,
            tied_embeddings=True,
            norm="layer",
            qkv_bias=True,
            linear_bias=True,
            rotary=False,
            causal=False,
            head="qa",
            positions=512,
        ),
        "bert-large-uncased config.json; SQuAD head",
    ),
    "gpt2": (
        TransformerSpec(
            12,
            768,
            12,
            12,
            3072,
            50257,
            1024,
            gated_mlp=False,
            tied_embeddings=True,
            norm="layer",
            qkv_bias=True,
            linear_bias=True,
            rotary=False,
            positions=1024,
        ),
        "openai-community/gpt2 config.json",
    ),
    "gpt2-medium": (
        TransformerSpec(
            24,
            1024,
            16,
            16,
            4096,
            50257,
            1024,
            gated_mlp=False,
            tied_embeddings=True,
            norm="layer",
            qkv_bias=True,
            linear_bias=True,
            rotary=False,
            positions=1024,
        ),
        "openai-community/gpt2-medium config.json",
    ),
}
# Transformer-base (Vaswani et al. 2017): 6 + 6 post-norm layers of 512, 8 heads, FFN 2048 (ReLU), a
# shared 37,000-token vocabulary; Gavel's translation job: ~30 tokens per side.
_SEQ2SEQ = TransformerSpec(
    6,
    512,
    8,
    8,
    2048,
    37000,
    60,
    gated_mlp=False,
    norm="layer",
    qkv_bias=True,
    linear_bias=True,
    rotary=False,
    causal=False,
)


def zoo_sources() -> dict[str, str]:
    """Every zoo model and the source of its layer table."""
    out = {k: v.source for k, v in ZOO_PROFILES.items()}
    out.update({k: v[1] for k, v in _TRANSFORMERS.items()})
    out["transformer"] = "Vaswani et al. 2017 Transformer-base, 30 + 30 tokens"
    for name in model_names():
        m = lookup_model(name)
        if m is not None and m.llm is not None:
            out[name] = m.source
    return out


def _check_optimizer(optimizer: str) -> None:
    if optimizer not in OPTIMIZERS:
        raise ProfileError(f"unknown optimizer {optimizer!r} (one of {', '.join(OPTIMIZERS)})")


def _check_batch(batch_size: int | None) -> None:
    if batch_size is not None and (isinstance(batch_size, bool) or batch_size <= 0):
        raise ProfileError(f"--batch-size must be a positive integer, got {batch_size}")


def profile_zoo(
    name: str, batch_size: int | None = None, optimizer: str = "adamw", sequence_length: int | None = None
) -> OperatorProfile:
    """The profile of a zoo model (any spelling) at ``batch_size`` (default: the table's)."""
    _check_optimizer(optimizer)
    _check_batch(batch_size)
    m = lookup_model(name)
    if m is None:
        raise ProfileError(f"--zoo {name!r}: not a zoo model (the zoo has {', '.join(model_names())})")
    if m.llm is not None:
        sp = TransformerSpec.from_arch(m.llm, sequence_length)
        return transformer_profile(sp, batch_size or 1, m.name, Source.ZOO, optimizer)
    if m.name in _TRANSFORMERS:
        sp = _TRANSFORMERS[m.name][0]
        if sequence_length:
            sp = TransformerSpec(**{**_spec_dict(sp), "sequence_length": sequence_length})
        return transformer_profile(sp, batch_size or 8, m.name, Source.ZOO, optimizer)
    if m.name == "transformer":
        return seq2seq_profile(_SEQ2SEQ, 30, 30, batch_size or 64, m.name, optimizer)
    table = ZOO_PROFILES.get(m.name)
    if table is None:  # a zoo entry added without a layer table: a bug the tests catch
        raise ProfileError(f"--zoo {name!r}: no layer table for this zoo model")
    net = Net(m.name, batch_size or table.batch_size, optimizer)
    table.build(net)
    return net.finish(Source.ZOO, table.sample)


def _spec_dict(sp: TransformerSpec) -> dict[str, Any]:
    return {f: getattr(sp, f) for f in TransformerSpec.__slots__}


def profile_llm(
    config: Mapping[str, Any] | str | Path,
    batch_size: int = 1,
    sequence_length: int | None = None,
    optimizer: str = "adamw",
    name: str | None = None,
) -> OperatorProfile:
    """The profile of a transformer described by a config.json (path or dict)."""
    _check_optimizer(optimizer)
    _check_batch(batch_size)
    where = "LLM config"
    if isinstance(config, (str, Path)):
        where = f"--llm {config}"
        name = name or Path(config).stem
        config = load_config(config)
    sp = TransformerSpec.from_config(config, where, sequence_length)
    label = name or str(config.get("_name_or_path") or config.get("model_type") or "llm")
    return transformer_profile(sp, batch_size, label, Source.LLM, optimizer)


def parse_shape(text: str) -> tuple[int, ...]:
    """``"3,224,224"`` (or ``3x224x224``) -> (3, 224, 224); ``ProfileError`` for anything else."""
    parts = re.split(r"[,x]", text.strip())
    if not all(p.strip().isdigit() and int(p) > 0 for p in parts):
        raise ProfileError(f"--input-shape {text!r}: expected positive integers like 3,224,224")
    return tuple(int(p) for p in parts)


def torch_available() -> bool:
    return importlib.util.find_spec("torch") is not None


def profile_torch(
    spec: str,
    input_shape: Sequence[int],
    batch_size: int = 32,
    optimizer: str = "adamw",
    name: str | None = None,
    python: str | None = None,
) -> OperatorProfile:
    """Trace ``FILE.py:FACTORY`` (module docstring): in-process with torch, else in a subprocess."""
    _check_optimizer(optimizer)
    _check_batch(batch_size)
    shape = tuple(input_shape)
    if not shape or any(d <= 0 for d in shape):
        raise ProfileError(f"--input-shape must be positive integers, got {list(shape)}")
    path = spec.rpartition(":")[0]
    if ":" not in spec or not path:
        raise ProfileError(f"--torch {spec!r}: expected FILE.py:FACTORY")
    if not Path(path).is_file():
        raise ProfileError(f"--torch {spec!r}: file {path} does not exist")
    if python is None and torch_available():
        from perfmodel import torch_trace

        try:
            doc = torch_trace.trace_step(spec, shape, batch_size, optimizer, name=name)
        except torch_trace.TraceError as exc:
            raise ProfileError(str(exc)) from None
        return load_profile(doc)
    return load_profile(_trace_in_subprocess(spec, shape, batch_size, optimizer, name, python))


def _trace_in_subprocess(
    spec: str, shape: tuple[int, ...], batch: int, optimizer: str, name: str | None, python: str | None
) -> dict[str, Any]:
    exe = python or os.environ.get("PERFSCHED_TORCH_PYTHON") or DEFAULT_TORCH_PYTHON
    script = Path(__file__).with_name("torch_trace.py")
    cmd = [exe, str(script), spec, "--input-shape", ",".join(map(str, shape)), "--batch-size", str(batch)]
    cmd += ["--optimizer", optimizer] + (["--name", name] if name else [])
    no_torch = (
        f"--torch needs PyTorch: neither this Python nor {exe} can import torch "
        "(install it, e.g. Debian's python3-torch, or set PERFSCHED_TORCH_PYTHON)"
    )
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=TORCH_TIMEOUT_S, check=False)
    except FileNotFoundError:
        raise ProfileError(no_torch) from None
    except subprocess.TimeoutExpired:
        raise ProfileError(f"--torch {spec!r}: tracing took longer than {TORCH_TIMEOUT_S:.0f} s") from None
    err = proc.stderr.strip().splitlines()
    if proc.returncode != 0:
        if any("No module named 'torch'" in line for line in err):
            raise ProfileError(no_torch)
        last = err[-1] if err else f"exit status {proc.returncode}"
        raise ProfileError(last if proc.returncode == 2 else f"--torch {spec!r}: the tracer failed: {last}")
    try:
        doc = json.loads(proc.stdout)
    except json.JSONDecodeError:
        raise ProfileError(f"--torch {spec!r}: the tracer ({exe}) did not print a profile") from None
    if not isinstance(doc, dict):
        raise ProfileError(f"--torch {spec!r}: the tracer ({exe}) did not print a profile")
    return doc
