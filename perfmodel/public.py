"""Readers of the public throughput extracts (``../shared/throughput/public``) into ``Measurement`` rows.

Five sources, each a gzipped TSV extracted from a public repository (see that directory's README):

- ``nvidia_dle``: NVIDIA DeepLearningExamples READMEs, "Training performance results" tables (DGX-1 /
  DGX-2 V100, DGX A100 40/80 GB; FP32 or TF32 and mixed precision; a column named FP32 on an A100 is
  TF32, as NVIDIA's containers run FP32 maths there, and is labelled ``tf32``). Only tables that state
  the per-GPU batch and report samples (images, sequences, ratings) per second are read, for the models below.
  Licence per directory (the repository has no root licence): the nearest LICENSE above the README.
- ``mlperf``: MLCommons Training results v3.0-v5.0, ResNet-50 and BERT-large on NVIDIA GPUs, the median
  ``tracked_stats.throughput`` of result_0 (samples/s of the whole system) at the submission's global
  batch (less the rows in ``_MLPERF_LEFT_OUT``, whose tracked figure contradicts its own run time). Code
  tuned far beyond research code: its own software stack.
- ``llm_foundry``: MosaicML llm-foundry's MPT benchmark table (FSDP, bf16 or fp8), samples = sequences.
- ``megatron_bridge``: NVIDIA Megatron-Bridge performance summary, dense Llama 3 / 3.1 rows (tokens/s per
  GPU; FLOPs per sequence from the table's own model TFLOP/s per GPU), with their TP/PP/CP/EP degrees.
- ``neusight``: NeuSight's end-to-end training latencies (PyTorch, FP32 with TF32 off, one GPU or plain
  data parallelism) of BERT-large, GPT-2 large, GPT-3 XL / 2.7B and OPT-1.3B across P4 .. H100.

Every row carries its source, file, commit (of the repository snapshot checked; empty where only the
extract was available), licence and software stack (``STACKS``). LLM model names are lower case with a
dash before the size (``mpt-7b``, ``llama3-8b``, ``llama3.1-405b``) to match the zoo. Rows are in the
data-parallel convention of ``perfmodel.measurements`` (global batch, global iterations/s); a sample of
an LLM is one sequence and its ``flops_per_sample`` is training FLOPs per sequence.

Not pure: ``read_public`` reads the extract files; the parsers are pure functions of their rows.
"""

from __future__ import annotations

import csv
import gzip
import logging
import math
import re
from collections.abc import Iterable
from pathlib import Path

from perfmodel.errors import ModelFileError
from perfmodel.measurements import Measurement

log = logging.getLogger(__name__)

PUBLIC_DIR = "public"
# Software stacks: how far a source's code is tuned. ``research`` = the scheduler papers' jobs and plain
# PyTorch (what a typical user runs); ``vendor`` = NVIDIA's tuned example code (DALI, fused kernels,
# NHWC); ``mlperf`` = MLPerf submissions; ``llm`` = LLM training frameworks (FSDP/Megatron, fused
# attention). Codes are the feature's values.
STACKS: dict[str, int] = {"research": 0, "vendor": 1, "mlperf": 2, "llm": 3}

COMMITS = {
    "nvidia_dle": "729963dd47e7c8bd462ad10bfac7a7b0b604e6dd",
    "neusight": "6945927d9afcca2b9daf021f8395e53edc5b4eef",
    "llm_foundry": "c90b9b312c644dbde5c9e6eef75c6f1c117d8782",
    "megatron_bridge": "df0289c180dd20ff26933455c7a0a11084f6a36f",
    "mlperf": "",
}
REPOS = {
    "nvidia_dle": "NVIDIA/DeepLearningExamples",
    "neusight": "sitar-lab/NeuSight",
    "llm_foundry": "mosaicml/llm-foundry",
    "megatron_bridge": "NVIDIA-NeMo/Megatron-Bridge",
}


def _tokens(non_embedding_params: float, layers: int, d_model: int, seq: int) -> float:
    """Training FLOPs of one sequence: 6 N T plus 12 L T^2 d for attention (Kaplan et al. 2020)."""
    return 6.0 * non_embedding_params * seq + 12.0 * layers * seq * seq * d_model


# ---------------------------------------------------------------------------------------------------------
# NVIDIA DeepLearningExamples
# README directory -> (model, dataset, params, FLOPs per sample or None for the zoo's).
_DLE_MODELS: dict[str, tuple[str, str]] = {
    "PyTorch/Classification/ConvNets/resnet50v1.5": ("resnet50", "imagenet"),
    "TensorFlow/Classification/ConvNets/resnet50v1.5": ("resnet50", "imagenet"),
    "MxNet/Classification/RN50v1.5": ("resnet50", "imagenet"),
    "PyTorch/Classification/ConvNets/resnext101-32x4d": ("resnext101-32x4d", "imagenet"),
    "TensorFlow/Classification/ConvNets/resnext101-32x4d": ("resnext101-32x4d", "imagenet"),
    "PyTorch/Classification/ConvNets/se-resnext101-32x4d": ("se-resnext101-32x4d", "imagenet"),
    "TensorFlow/Classification/ConvNets/se-resnext101-32x4d": ("se-resnext101-32x4d", "imagenet"),
    "PyTorch/LanguageModeling/BERT": ("bert-large", "squad"),
    "TensorFlow/LanguageModeling/BERT": ("bert-large", "squad"),
    "TensorFlow2/LanguageModeling/BERT": ("bert-large", "squad"),
    "PaddlePaddle/LanguageModeling/BERT": ("bert-large", "squad"),
    "PyTorch/Recommendation/NCF": ("ncf", "movielens-20m"),
}
# ResNeXt-101 32x4d: 44.2M params, 8.0 G multiply-adds; SE-ResNeXt-101 32x4d: 49.0M, 8.0 G (DLE READMEs).
_DLE_EXPLICIT: dict[str, tuple[float, float]] = {
    "resnext101-32x4d": (44.2e6, 6.0 * 8.03e9),
    "se-resnext101-32x4d": (49.0e6, 6.0 * 8.04e9),
}
# Licence of each LICENSE file above a README (read in the repository at COMMITS["nvidia_dle"]).
_DLE_LICENCES: dict[str, str] = {
    "PyTorch/Classification/ConvNets": "BSD-3-Clause",
    "TensorFlow/Classification/ConvNets": "Apache-2.0",
    "MxNet/Classification/RN50v1.5": "Apache-2.0",
    "PyTorch/LanguageModeling/BERT": "Apache-2.0",
    "TensorFlow/LanguageModeling/BERT": "Apache-2.0",
    "PyTorch/Recommendation/NCF": "Apache-2.0",
}
_NUM = re.compile(r"^\s*([0-9][0-9,]*\.?[0-9]*)\s*([KM]?)")


def _number(text: str) -> float | None:
    m = _NUM.match(text.replace("*", ""))
    if not m:
        return None
    try:
        v = float(m.group(1).replace(",", ""))
    except ValueError:
        return None
    return v * {"": 1.0, "K": 1e3, "M": 1e6}[m.group(2)]


def _dle_licence(readme: str) -> str:
    d = readme.rsplit("/", 1)[0]
    while d:
        if d in _DLE_LICENCES:
            return _DLE_LICENCES[d]
        if "/" not in d:
            break
        d = d.rsplit("/", 1)[0]
    return "no LICENSE above the README: not shipped"


def _dle_gpu(heading: str) -> tuple[str, str, float] | None:
    """(GPU type, product, node network Gb/s) of a DGX named in a heading, or None. The network is the
    node's compute fabric, one InfiniBand adapter per GPU pair or GPU: DGX A100 8 x 200 Gb/s HDR, DGX H100
    8 x 400 Gb/s NDR, DGX-2 8 x 100 Gb/s EDR, DGX-1 4 x 100 Gb/s EDR (NVIDIA's DGX datasheets)."""
    h = heading.upper()
    mem = re.search(r"(\d+)\s*G", h.split("DGX", 1)[-1])
    if "A100" in h:
        return ("A100", "A100-SXM4-80GB" if mem and mem.group(1) == "80" else "A100-SXM4-40GB", 1600.0)
    if "H100" in h:
        return ("H100", "H100-80GB-HBM3", 3200.0)
    if "DGX-2" in h:
        return ("V100", "V100-SXM3-32GB", 800.0)
    if "V100" in h or "DGX-1" in h:
        return ("V100", "V100-SXM2-32GB" if mem and mem.group(1) == "32" else "V100-SXM2-16GB", 400.0)
    return None


def _dle_gpus_per_node(product: str) -> int:
    """GPUs in one DGX of the product ``_dle_gpu`` names: 16 in a DGX-2 (V100-SXM3-32GB), 8 otherwise."""
    return 16 if product == "V100-SXM3-32GB" else 8


# GPU types of DeepLearningExamples' tables whose FP32 columns really ran on FP32 CUDA cores.
_PRE_AMPERE = frozenset({"V100", "P100", "T4", "K80"})


def _precision_of(header: str) -> str | None:
    h = header.upper()
    if "MIXED" in h or "AMP" in h or "FP16" in h:
        return "amp"
    if "BF16" in h:
        return "bf16"
    if "TF32" in h:
        return "tf32"
    if "FP32" in h:
        return "fp32"
    return None


def _per_precision(cell: str) -> list[float]:
    """A DeepLearningExamples cell that gives one value per precision ("128 and 256", "8192")."""
    return [b for b in (_number(x) for x in re.split(r"\s*(?:and|,)\s*", cell)) if b]


def parse_dle(rows: Iterable[dict[str, str]]) -> list[Measurement]:
    """DeepLearningExamples table rows -> measurements (one per precision column with a number)."""
    out: list[Measurement] = []
    for r in rows:
        readme = r["readme"]
        dirname = readme.rsplit("/", 1)[0]
        if dirname not in _DLE_MODELS:
            continue
        heading = r["heading_path"]
        last = heading.split(" > ")[-1]
        if "Time" in last and "Throughput" not in r["header_cells"]:
            continue
        gpu = _dle_gpu(heading)
        if gpu is None:
            continue
        model, dataset = _DLE_MODELS[dirname]
        head = [c.strip().strip("*").strip() for c in r["header_cells"].split("|")]
        cells = [c.strip() for c in r["row_cells"].split("|")]
        if len(cells) < len(head):
            continue
        col = {h.lower(): i for i, h in enumerate(head)}
        n = nodes = None
        if "gpus" in col:
            n = _number(cells[col["gpus"]])
            nodes = 1.0
        if "nodes" in col or "num nodes" in col:
            nodes = _number(cells[col.get("nodes", col.get("num nodes", 0))])
            # A table without a "GPUs / node" column counts whole DGX nodes: 16 GPUs on a DGX-2 / DGX-2H
            # (TensorFlow and TensorFlow2 BERT's "Pre-training training performance: multi-node on
            # DGX-2H 32GB" tables, whose heading names "16x V100 32GB" and whose one-node row repeats the
            # 16-GPU row of the single-node table: 3081.69 / 761.92 sequences/s in TensorFlow's README at
            # COMMITS["nvidia_dle"]), 8 on every other DGX. Read at 8 per node, those rows ran 1.05-1.53x
            # the V100's FP32 peak per GPU.
            per_node = float(_dle_gpus_per_node(gpu[1]))
            per = _number(cells[col["gpus / node"]]) if "gpus / node" in col else per_node
            if nodes is not None and per is not None:
                n = nodes * per
        if not n or not nodes or n <= 0:
            continue
        bcol = next((i for i, h in enumerate(head) if re.match(r"batch size (/|per) gpu", h.lower())), None)
        if bcol is None:
            continue
        batches = _per_precision(cells[bcol])
        if not batches:
            continue
        # A table with accumulation steps but no "Accumulated batch size" column gives the accumulated
        # batch under "Batch size / GPU": BERT pre-training on DGX A100 in PaddlePaddle (8192 with 64 / 32
        # steps) and on DGX-1 in PyTorch (4096 with 128 / 64), where the tables that have both columns
        # give the micro-batch (128 / 256 on A100). Every other row's batch is what one GPU computes per
        # step, so these rows get their micro-batch too: accumulated batch / steps.
        scol = next((i for i, h in enumerate(head) if h.lower().startswith("accumulation steps")), None)
        if scol is not None and not any(h.lower().startswith("accumulated batch") for h in head):
            steps = _per_precision(cells[scol])
            if len(steps) != len(batches):
                continue
            batches = [b / s for b, s in zip(batches, steps, strict=True)]
        bhead = head[bcol].upper()
        order = (
            ["amp", "fp32"]
            if bhead.find("MIXED") >= 0 and bhead.find("MIXED") < max(bhead.find("FP32"), bhead.find("TF32"))
            else ["fp32", "amp"]
        )
        seq = None
        if "sequence length" in col:
            seq = _number(cells[col["sequence length"]])
        elif "sequence length" in last.lower():
            seq = None
        for i, h in enumerate(head):
            hl = h.lower()
            if not hl.startswith("throughput") or "speedup" in hl or "tok" in hl or "mels" in hl:
                continue
            prec = _precision_of(h)
            if prec == "fp32" and gpu[0] not in _PRE_AMPERE:
                # NVIDIA's containers run FP32 maths in TF32 on Ampere and newer (its tables name the
                # column TF32 in most READMEs, FP32 in a few): tensor cores, the ``tf32`` precision.
                prec = "tf32"
            value = _number(cells[i]) if i < len(cells) else None
            if prec is None or value is None or value <= 0:
                continue
            kind = "amp" if prec in ("amp", "bf16") else "fp32"
            local = batches[0] if len(batches) == 1 else batches[order.index(kind)]
            params, flops = _DLE_EXPLICIT.get(model, (0.0, 0.0))
            ds = dataset
            if model == "bert-large":
                is_pretrain = "pre-training" in heading.lower() or seq is not None
                if is_pretrain:
                    s = int(seq or 512)
                    ds, flops = f"wikipedia-seq{s}", _tokens(302e6, 24, 1024, s)
                elif "squad" not in heading.lower() and "fine-tuning" in heading.lower():
                    # PyTorch BERT's fine-tuning table is SQuAD v1.1 at sequence length 384 (its README).
                    ds = "squad"
            nn = int(n)
            out.append(
                Measurement(
                    "nvidia_dle",
                    model,
                    ds,
                    round(local) * nn,
                    gpu[0],
                    nn,
                    int(nodes),
                    min(nn, _dle_gpus_per_node(gpu[1])),
                    "nvlink",
                    gpu[2],
                    value / (local * nn),
                    precision=prec,
                    stack="vendor",
                    gpu_product=gpu[1],
                    params=params,
                    flops_per_sample=flops,
                    source_file=readme,
                    commit=COMMITS["nvidia_dle"],
                    licence=_dle_licence(readme),
                )
            )
    return out


# ---------------------------------------------------------------------------------------------------------
# MLPerf Training
_MLPERF_GPUS: tuple[tuple[str, str, str], ...] = (
    # (pattern in the accelerator name, GPU type, product)
    ("A100-PCIE-80GB", "A100", "A100-80GB-PCIE"),
    ("A100 - PCIE - 80 GB", "A100", "A100-80GB-PCIE"),
    ("A100-SXM-40GB", "A100", "A100-SXM4-40GB"),
    ("A100-SXM4-40GB", "A100", "A100-SXM4-40GB"),
    ("A100-SXM-80GB", "A100", "A100-SXM4-80GB"),
    ("A100-SXM4-80GB", "A100", "A100-SXM4-80GB"),
    ("A30", "A30", "A30"),
    ("A40", "A40", "A40"),
    ("A10G", "A10G", "A10G"),
    ("H100 NVL", "H100", "H100-NVL"),
    ("H100-PCIE", "H100", "H100-PCIE"),
    ("H100-SXM5-96GB", "H100", "H100-SXM5-96GB"),
    ("H100-SXM", "H100", "H100-80GB-HBM3"),
    ("H100 80GB HBM3", "H100", "H100-80GB-HBM3"),
    ("H200-NVL", "H200", "H200-NVL"),
    ("H200-SXM", "H200", "H200"),
    ("GB200", "GB200", "GB200"),
    ("B200", "B200", "B200"),
    ("L40S", "L40S", "L40S"),
    ("L40", "L40", "L40"),
    ("L4", "L4", "L4"),
    ("RTX 4090", "RTX4090", "GeForce-RTX-4090"),
    ("RTX A5000", "RTXA5000", "RTX-A5000"),
)
# MLPerf benchmark -> (model, dataset, FLOPs per sample or 0 for the zoo's). BERT is BERT-large phase 2
# on Wikipedia sequences of at most 512 tokens (MLPerf Training rules), which every submission runs packed
# (the ``config_*_pack.sh`` below: several sequences to a 512-token row, no padding), and its throughput
# counts sequences. More than half of a 512-token row is padding in that data (Krell et al. 2021,
# arXiv:2107.02027), so a sequence is 256 tokens of work: at 512, NVIDIA's 8 x A100 v3.0 row (320
# sequences/s per GPU) would run 322 TFLOP/s per GPU, above the A100's 312 TFLOP/s FP16 peak.
_MLPERF_BENCH = {
    "resnet": ("resnet50", "imagenet", 0.0),
    "bert": ("bert-large", "wikipedia-seq512", _tokens(302e6, 24, 1024, 256)),
}
_MLPERF_SHIPPABLE_ROUNDS = frozenset({"v3.0", "v3.1", "v4.0", "v5.0"})
# BERT on Hopper and Blackwell runs its GEMMs in FP8. NVIDIA's BERT code in every round passes
# `--use_transformer_engine2` ("Enable FP8 layers": Transformer Engine `fp8_autocast` with a HYBRID
# `DelayedScaling` recipe, NVIDIA/benchmarks/bert/implementations/pytorch/{run_pretraining,modeling}.py),
# and the config_*.sh of every H100/H200/B200 BERT submission (1-18 nodes) and every GB200 one (2-128
# nodes) sets it: NVIDIA's config_DGXH100_1x8x48x1_pack.sh and _8x8x72x1.sh (mlcommons/training_results_v3.0
# @ 63e326c4, v3.1 @ d06288b2, v4.0 @ 6fe95437, v4.1 @ b87b9e39), config_DGXB200_1x8x48x1_pack.sh (v4.1;
# v5.0 @ 0fdc28f0), the GB200 configs up to the 512-GPU config_GB200_128x4x8x1_pack.sh (v5.0), and the
# other submitters' copies (ASUSTeK, Azure, Dell, Lenovo, Supermicro, HPE, Lambda, Oracle, Cisco, ...; 165
# configs). The exceptions are NVIDIA's 64-434-node H100 runs (config_DGXH100_{64x8x3,96x8x3,384x8x2,
# 434x8x2}x1_pack_clipafter*.sh: no FP8 flag, 4-6 sequences per GPU a step) and Juniper's v4.0 8x8x36 (no
# row here: Juniper's result has no batch size). So: fp8 where the GPU has FP8 units and the run has >= 8
# sequences per GPU, amp otherwise (the A100 and Ada L4/L40/L40S configs never set the flag). ResNet-50
# (MXNet, FP16) is amp.
_MLPERF_FP8_GPUS = frozenset({"H100", "H200", "B200", "GB200"})
_MLPERF_FP8_MIN_PER_GPU = 8.0
# Index rows whose result_0 throughput is not the run's speed, keyed (round, submitter, system, benchmark),
# each with what contradicts what (checked in the result logs). The index keeps result_0's median
# `tracked_stats.throughput`; a run's own pace is its last `eval_accuracy` epoch_num x 1,281,167 ImageNet
# images / (run_stop - run_start). The other v3.0 ResNet-50 result_0 logs (1-448 nodes, all submitters)
# track 1.00-1.12x their run's pace (the evaluations are inside the run time).
_MLPERF_LEFT_OUT: dict[tuple[str, str, str, str], str] = {
    ("v3.0", "NVIDIA", "dgxh100_n64_ngc23.04_mxnet", "resnet"): (
        # mlcommons/training_results_v3.0 @ 63e326c4 NVIDIA/results/dgxh100_n64_ngc23.04_mxnet/resnet/:
        # result_0.txt's median tracked_stats is 5,572,642 images/s (10,884 per GPU, 1.55x the same code's
        # 7,007 per GPU on one DGX H100 at 10x the per-GPU batch), but it evaluates its last at epoch 50
        # after 31.97 s from run_start to run_stop: 2,004,015 images/s (3,914 per GPU), 2.78x less. At the
        # tracked pace its 50 epochs would take 11.5 s; the index's run minutes (0.53) x the tracked
        # figure is 138 epochs. result_1-4.txt of the same system track 2.24-2.25M images/s, 1.04-1.09x
        # their own 2.08-2.15M: result_0's tracked figure is the artefact, not the system's speed.
        "result_0 tracked_stats throughput (5.57M images/s) is 2.78x its own run's pace "
        "(50 epochs x 1,281,167 images in 31.97 s = 2.00M images/s)"
    ),
}


def _mlperf_gpu(accelerator: str) -> tuple[str, str] | None:
    a = accelerator.upper()
    if not a.startswith("NVIDIA"):
        return None
    for pat, t, product in _MLPERF_GPUS:
        if pat.upper() in a:
            return t, product
    return None


_NIC_RATE = re.compile(r"(\d+(?:\.\d+)?)\s*Gb(?:ps|E|\s*/\s*s(?:ec)?)?\b", re.I)
_NIC_COUNT = re.compile(r"(\d+)\s*x\s*(?=[A-Za-z])", re.I)


def mlperf_network_gbps(text: str) -> float:
    """A node's network for the GPUs' traffic in Gb/s from an MLPerf ``host_networking`` text: count x
    rate of the adapters named for compute ("Storage: 2x ... 400Gb/s, Compute: 8x ConnectX-7 IB NDR
    400Gb/s" -> 3200), else the largest count x rate among the adapters not named for storage or
    management; 200 where the text names no rate in Gb/s (GB/s figures are PCIe buses, not networks)."""
    parts = [p for p in re.split(r"[,;+]| and ", text) if p.strip()]
    compute = [p for p in parts if "compute" in p.lower()]
    rest = [p for p in parts if not re.search(r"storage|management", p, re.I)]
    best = 0.0
    for part in compute or rest:
        rate = [m for m in _NIC_RATE.finditer(part) if "GB" not in m.group(0)]
        if not rate:
            continue
        count = _NIC_COUNT.search(part[: rate[0].start()])
        best = max(best, float(count.group(1) if count else 1) * float(rate[0].group(1)))
    return best or 200.0


def parse_mlperf(rows: Iterable[dict[str, str]]) -> list[Measurement]:
    """MLPerf Training index rows -> measurements (ResNet-50 and BERT on NVIDIA GPUs with a throughput)."""
    out: list[Measurement] = []
    for r in rows:
        bench = _MLPERF_BENCH.get(r["benchmark"])
        gpu = _mlperf_gpu(r["accelerator"])
        tput = _number(r["r0_tracked_throughput_median"] or "")
        gbs = _number(r["r0_global_batch_size"] or "")
        try:
            nodes = int(r["nodes"])
            per = int(r["acc_per_node"])
        except ValueError:
            continue
        if bench is None or gpu is None or not tput or not gbs or nodes <= 0 or per <= 0:
            continue
        if (r["round"], r["submitter"], r["system"], r["benchmark"]) in _MLPERF_LEFT_OUT:
            continue
        n = nodes * per
        text = f"{r['interconnect']} {r['accelerator']}".upper()
        nvlink = "NVLINK" in text or "SXM" in text or gpu[0] in ("B200", "GB200")
        net = mlperf_network_gbps(r.get("host_networking", "") or "")
        rnd = r["round"]
        fp8 = r["benchmark"] == "bert" and gpu[0] in _MLPERF_FP8_GPUS and gbs / n >= _MLPERF_FP8_MIN_PER_GPU
        out.append(
            Measurement(
                "mlperf",
                bench[0],
                bench[1],
                int(gbs),
                gpu[0],
                n,
                nodes,
                per,
                "nvlink" if nvlink else "pcie",
                net if 1.0 <= net <= 3200.0 else 200.0,
                tput / gbs,
                precision="fp8" if fp8 else "amp",
                stack="mlperf",
                gpu_product=gpu[1],
                flops_per_sample=bench[2],
                source_file=f"mlcommons/training_results_{rnd}: {r['submitter']}/results/{r['system']}/"
                f"{r['benchmark']}/result_0.txt",
                commit=COMMITS["mlperf"],
                licence="Apache-2.0"
                if rnd in _MLPERF_SHIPPABLE_ROUNDS
                else "no root LICENSE in the checked snapshot: not shipped",
            )
        )
    return out


# ---------------------------------------------------------------------------------------------------------
# LLM sources
# MPT sizes in llm-foundry's benchmark table (scripts/train/yamls/pretrain/mpt-*.yaml): layers, d_model.
_MPT: dict[str, tuple[int, int]] = {
    "125m": (12, 768),
    "350m": (24, 1024),
    "760m": (24, 1536),
    "1b": (24, 2048),
    "3b": (32, 2560),
    "7b": (32, 4096),
    "13b": (40, 5120),
    "30b": (48, 7168),
    "70b": (80, 8192),
}
# (GPU type, product, node network Gb/s): the table does not say; assumed one 200 (A100) or 400 (H100)
# Gb/s adapter per GPU, as on the DGX-class 8-GPU nodes it names.
_FOUNDRY_GPUS = {
    "h100_80gb": ("H100", "H100-80GB-HBM3", 3200.0),
    "a100_80gb": ("A100", "A100-SXM4-80GB", 1600.0),
    "a100_40gb": ("A100", "A100-SXM4-40GB", 1600.0),
}
_LLM_VOCAB = 50368  # MPT's padded vocabulary


def parse_llm_foundry(rows: Iterable[dict[str, str]]) -> list[Measurement]:
    """llm-foundry MPT benchmark rows -> measurements (samples = sequences)."""
    out: list[Measurement] = []
    for r in rows:
        size = r["Model"].strip().lower()
        gpu = _FOUNDRY_GPUS.get(r["GPU"].strip())
        shape = _MPT.get(size)
        seq = _number(r["SeqLen (T)"])
        n = _number(r["# GPUs"])
        gbs = _number(r["GlobalBatchSize"])
        sps = _number(r["Throughput (S/s)"])
        tps = _number(r["Throughput (T/s)"])
        params = _number(r["NumParams"])
        if gpu is None or shape is None or not seq or not n or not gbs or not params or not (sps or tps):
            continue
        layers, d = shape
        non_embedding = max(params - _LLM_VOCAB * d, 0.5 * params)
        samples = (tps / seq) if tps else float(sps or 0.0)
        prec = "fp8" if "fp8" in r["Precision"].lower() else "bf16"
        nn = int(n)
        out.append(
            Measurement(
                "llm_foundry",
                f"mpt-{size}",
                "c4",
                int(gbs),
                gpu[0],
                nn,
                max(1, -(-nn // 8)),
                min(nn, 8),
                "nvlink",
                gpu[2],
                samples / gbs,
                precision=prec,
                stack="llm",
                gpu_product=gpu[1],
                params=params,
                flops_per_sample=_tokens(non_embedding, layers, d, int(seq)),
                seq_len=int(seq),
                sharding="fsdp",
                micro_batch=int(_number(r.get("MicroBatchSize", "")) or 0),
                activation_checkpointing=r.get("Activation Checkpointing", "").strip().lower() == "true",
                source_file="scripts/train/benchmarking/README.md",
                commit=COMMITS["llm_foundry"],
                licence="Apache-2.0",
            )
        )
    return out


# Megatron-Bridge dense models: name -> (zoo name, parameters).
_MEGATRON_MODELS = {
    "LLAMA3_8B": ("llama3-8b", 8.03e9),
    "LLAMA3_70B": ("llama3-70b", 70.6e9),
    "LLAMA3.1_405B": ("llama3.1-405b", 405.9e9),
}
_MEGATRON_SYSTEMS = {
    "DGX-H100": ("H100", "H100-80GB-HBM3", 400.0),
    "DGX-B200": ("B200", "B200", 400.0),
    "DGX-GB200": ("GB200", "GB200", 400.0),
    "DGX-B300": ("B300", "B300", 800.0),
    "DGX-GB300": ("GB300", "GB300", 800.0),
}


def _megatron_precision(text: str) -> str | None:
    t = text.upper()
    if "FP4" in t:
        return None
    if "FP8" in t:
        return "fp8"
    if "BF16" in t:
        return "bf16"
    return None


def parse_megatron(rows: Iterable[dict[str, str]]) -> list[Measurement]:
    """Megatron-Bridge performance-summary rows of dense Llama models -> measurements.

    A table without a Precision column (the 25.09 release's) is skipped: its precision is not stated, and
    its figures are the FP8 ones of later tables (Llama 3 8B on 8 H100s: 725 model TFLOP/s per GPU, 73% of
    the BF16 peak, where the later FP8 row reads the same); read as BF16, as they once were, they taught
    the predictor BF16 runs as fast as FP8."""
    out: list[Measurement] = []
    for r in rows:
        head = [h.strip() for h in r["header"].split("|")]
        cells = [c.strip() for c in r["row"].split("|")]
        if len(cells) != len(head):
            continue
        row = dict(zip(head, cells, strict=True))
        section = r["section"]
        model_name = (
            section.split(":", 1)[1].strip() if section.startswith("Model:") else row.get("Model", "")
        )
        system = section.split(":", 1)[1].strip() if section.startswith("System:") else row.get("System", "")
        model = _MEGATRON_MODELS.get(model_name.split(" ")[0].upper())
        gpu = _MEGATRON_SYSTEMS.get(system.upper())
        prec = _megatron_precision(row.get("Precision", ""))
        n = _number(row.get("#-GPUs", ""))
        gbs = _number(row.get("GBS", ""))
        mbs = _number(row.get("MBS", ""))
        seq = _number(row.get("Sequence Length", ""))
        tps = _number(row.get("Tokens / sec / GPU", ""))
        tflops = _number(row.get("Model TFLOP / sec / GPU", ""))
        if model is None or gpu is None or prec is None or not (n and gbs and seq and tps and tflops and mbs):
            continue
        degrees = {k: int(_number(row.get(k, "1")) or 1) for k in ("TP", "PP", "CP", "EP")}
        fsdp = row.get("FSDP", "").strip().lower() in ("1", "true", "yes", "y")
        nn = int(n)
        sharding = "fsdp" if fsdp else f"tp{degrees['TP']}xpp{degrees['PP']}"
        out.append(
            Measurement(
                "megatron_bridge",
                model[0],
                "pretraining",
                int(gbs),
                gpu[0],
                nn,
                max(1, -(-nn // (72 if gpu[0].startswith("GB") else 8))),
                min(nn, 72 if gpu[0].startswith("GB") else 8),
                "nvlink",
                gpu[2],
                tps * nn / (seq * gbs),
                precision=prec,
                stack="llm",
                gpu_product=gpu[1],
                params=model[1],
                # The table's model FLOPs per token (its TFLOP/s over its tokens/s) x sequence length.
                flops_per_sample=tflops * 1e12 / tps * seq,
                seq_len=int(seq),
                sharding=sharding,
                tensor_parallel=degrees["TP"],
                pipeline_parallel=degrees["PP"],
                context_parallel=degrees["CP"],
                source_file="docs/performance-summary.md or docs/performance-summary-archive.md",
                commit=COMMITS["megatron_bridge"],
                licence="Apache-2.0",
            )
        )
    return out


# NeuSight label models: name -> (zoo name, params, layers, d_model, non-embedding params).
_NEUSIGHT_MODELS = {
    "bert_large": ("bert-large", 340e6, 24, 1024, 302e6),
    "gpt2_large": ("gpt2-large", 774e6, 36, 1280, 708e6),
    "gpt3_xl": ("gpt3-xl", 1.3e9, 24, 2048, 1.21e9),
    "gpt3_27": ("gpt3-2.7b", 2.7e9, 32, 2560, 2.55e9),
    "opt_13": ("opt-1.3b", 1.3e9, 24, 2048, 1.21e9),
}
_NEUSIGHT_GPUS = {
    "NVIDIA_A100-PCIE-40GB": ("A100", "A100-PCIE-40GB"),
    "NVIDIA_A100-SXM4-40GB": ("A100", "A100-SXM4-40GB"),
    "NVIDIA_A100_80GB_PCIe": ("A100", "A100-80GB-PCIE"),
    "NVIDIA_H100_80GB_HBM3": ("H100", "H100-80GB-HBM3"),
    "NVIDIA_L4": ("L4", "L4"),
    "Tesla_P100-PCIE-16GB": ("P100", "P100-PCIE-16GB"),
    "Tesla_T4": ("T4", "T4"),
    "Tesla_V100-PCIE-32GB": ("V100", "V100-PCIE-32GB"),
}


def parse_neusight(rows: Iterable[dict[str, str]]) -> list[Measurement]:
    """NeuSight end-to-end training latencies (one GPU, or ``dp4``) -> measurements."""
    out: list[Measurement] = []
    for r in rows:
        if r["mode"] != "train":
            continue
        model = _NEUSIGHT_MODELS.get(r["model"])
        gpu = _NEUSIGHT_GPUS.get(r["gpu"])
        variant = r["variant"].strip()
        if model is None or gpu is None or variant not in ("", "dp4"):
            continue
        latency = _number(r["e2e_latency_ms"])
        batch = _number(r["batch"])
        seq = _number(r["seq_len"])
        if not latency or not batch or not seq:
            continue
        n = 4 if variant == "dp4" else 1
        if batch < n:
            continue
        name, params, layers, d, non_embedding = model
        out.append(
            Measurement(
                "neusight",
                name,
                f"seq{int(seq)}",
                int(batch),
                gpu[0],
                n,
                1,
                n,
                "nvlink" if "SXM" in gpu[1] or "HBM3" in gpu[1] else "pcie",
                100.0,
                1000.0 / latency,
                precision="fp32",
                stack="research",
                gpu_product=gpu[1],
                params=params,
                flops_per_sample=_tokens(non_embedding, layers, d, int(seq)),
                seq_len=int(seq),
                source_file=r["path"],
                commit=COMMITS["neusight"],
                licence="MIT",
            )
        )
    return out


_FILES = {
    "nvidia_dle": ("nvidia_dle_training_tables_raw.tsv.gz", parse_dle),
    "mlperf": ("mlperf_training_index.tsv.gz", parse_mlperf),
    "llm_foundry": ("mosaic_llmfoundry_benchmarks.tsv.gz", parse_llm_foundry),
    "megatron_bridge": ("megatron_bridge_perf_summary.tsv.gz", parse_megatron),
    "neusight": ("neusight_e2e_labels.tsv.gz", parse_neusight),
}
PUBLIC_SOURCES = frozenset(_FILES)


def read_public(shared_dir: Path, sources: Iterable[str] | None = None) -> list[Measurement]:
    """Every usable row of the public extracts under ``shared_dir/public`` (all sources by default).

    ``ModelFileError`` names a missing or unreadable extract.
    """
    out: list[Measurement] = []
    for name in sorted(PUBLIC_SOURCES if sources is None else sources):
        fname, parse = _FILES[name]
        path = Path(shared_dir) / PUBLIC_DIR / fname
        try:
            with gzip.open(path, "rt", newline="") as fh:
                rows = list(csv.DictReader(fh, delimiter="\t"))
        except (OSError, EOFError, csv.Error) as exc:
            raise ModelFileError(f"cannot read public extract {path}: {exc}") from exc
        got = [m for m in parse(rows) if math.isfinite(m.iters_per_s) and m.iters_per_s > 0]
        log.info("read public extract", extra={"source": name, "rows": len(got)})
        out.extend(got)
    return out


def shippable(m: Measurement) -> bool:
    """Whether a public row's licence lets it ship in the package (permissive licences only)."""
    return m.licence.split(" ")[0] in ("Apache-2.0", "MIT", "BSD-3-Clause")
