"""Readers of NVIDIA's tuned training results: DeepLearningExamples' README tables and MLPerf Training.

- ``parse_dle``: NVIDIA DeepLearningExamples READMEs, "Training performance results" tables (DGX-1 /
  DGX-2 V100, DGX A100 40/80 GB; FP32 or TF32 and mixed precision; a column named FP32 on an A100 is
  TF32, as NVIDIA's containers run FP32 maths there, and is labelled ``tf32``). Only tables that state
  the per-GPU batch and report samples (images, sequences, ratings) per second are read, for the models in
  ``_DLE_MODELS``. Licence per directory (the repository has no root licence): the nearest LICENSE above
  the README. Software stack ``vendor``.
- ``parse_mlperf``: MLCommons Training results v3.0-v5.0, ResNet-50 and BERT-large on NVIDIA GPUs, the
  median ``tracked_stats.throughput`` of result_0 (samples/s of the whole system) at the submission's
  global batch (less the rows in ``_MLPERF_LEFT_OUT``, whose tracked figure contradicts its own run
  time). Code tuned far beyond research code: its own software stack, ``mlperf``.

Rows follow ``perfmodel.public``'s conventions. Pure functions of their rows.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from perfmodel.measurements import Measurement
from perfmodel.public_sources import COMMITS, number, sequence_flops

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
    return [b for b in (number(x) for x in re.split(r"\s*(?:and|,)\s*", cell)) if b]


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
            n = number(cells[col["gpus"]])
            nodes = 1.0
        if "nodes" in col or "num nodes" in col:
            nodes = number(cells[col.get("nodes", col.get("num nodes", 0))])
            # A table without a "GPUs / node" column counts whole DGX nodes: 16 GPUs on a DGX-2 / DGX-2H
            # (TensorFlow and TensorFlow2 BERT's "Pre-training training performance: multi-node on
            # DGX-2H 32GB" tables, whose heading names "16x V100 32GB" and whose one-node row repeats the
            # 16-GPU row of the single-node table: 3081.69 / 761.92 sequences/s in TensorFlow's README at
            # COMMITS["nvidia_dle"]), 8 on every other DGX. Read at 8 per node, those rows ran 1.05-1.53x
            # the V100's FP32 peak per GPU.
            per_node = float(_dle_gpus_per_node(gpu[1]))
            per = number(cells[col["gpus / node"]]) if "gpus / node" in col else per_node
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
            seq = number(cells[col["sequence length"]])
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
            value = number(cells[i]) if i < len(cells) else None
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
                    ds, flops = f"wikipedia-seq{s}", sequence_flops(302e6, 24, 1024, s)
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
    "bert": ("bert-large", "wikipedia-seq512", sequence_flops(302e6, 24, 1024, 256)),
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
        tput = number(r["r0_tracked_throughput_median"] or "")
        gbs = number(r["r0_global_batch_size"] or "")
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
