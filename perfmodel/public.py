"""Readers of the public throughput extracts (``../shared/throughput/public``) into ``Measurement`` rows.

Five sources, each a gzipped TSV extracted from a public repository (see that directory's README):

- ``nvidia_dle`` and ``mlperf``: NVIDIA DeepLearningExamples' README tables and MLCommons Training
  results (``perfmodel.public_nvidia``).
- ``llm_foundry``: MosaicML llm-foundry's MPT benchmark table (FSDP, bf16 or fp8), samples = sequences.
- ``megatron_bridge``: NVIDIA Megatron-Bridge performance summary, dense Llama 3 / 3.1 rows (tokens/s per
  GPU; FLOPs per sequence from the table's own model TFLOP/s per GPU), with their TP/PP/CP/EP degrees.
- ``neusight``: NeuSight's end-to-end training latencies (PyTorch, FP32 with TF32 off, one GPU or plain
  data parallelism) of BERT-large, GPT-2 large, GPT-3 XL / 2.7B and OPT-1.3B across P4 .. H100.

Every row carries its source, file, commit (of the repository snapshot checked; empty where only the
extract was available), licence and software stack (``scaling.STACKS``). LLM model names are lower case with a
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
from collections.abc import Iterable
from pathlib import Path

from perfmodel.errors import ModelFileError
from perfmodel.measurements import Measurement
from perfmodel.public_nvidia import parse_dle, parse_mlperf
from perfmodel.public_sources import COMMITS, number, sequence_flops

log = logging.getLogger(__name__)

PUBLIC_DIR = "public"
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
        seq = number(r["SeqLen (T)"])
        n = number(r["# GPUs"])
        gbs = number(r["GlobalBatchSize"])
        sps = number(r["Throughput (S/s)"])
        tps = number(r["Throughput (T/s)"])
        params = number(r["NumParams"])
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
                flops_per_sample=sequence_flops(non_embedding, layers, d, int(seq)),
                seq_len=int(seq),
                sharding="fsdp",
                micro_batch=int(number(r.get("MicroBatchSize", "")) or 0),
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
    its figures are the FP8 ones of later tables (Llama 3 8B on 8 H100s: 725 model TFLOP/s per GPU, where
    the later FP8 row reads the same), so read as BF16 they would claim BF16 runs as fast as FP8."""
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
        n = number(row.get("#-GPUs", ""))
        gbs = number(row.get("GBS", ""))
        mbs = number(row.get("MBS", ""))
        seq = number(row.get("Sequence Length", ""))
        tps = number(row.get("Tokens / sec / GPU", ""))
        tflops = number(row.get("Model TFLOP / sec / GPU", ""))
        if model is None or gpu is None or prec is None or not (n and gbs and seq and tps and tflops and mbs):
            continue
        degrees = {k: int(number(row.get(k, "1")) or 1) for k in ("TP", "PP", "CP", "EP")}
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
        latency = number(r["e2e_latency_ms"])
        batch = number(r["batch"])
        seq = number(r["seq_len"])
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
                flops_per_sample=sequence_flops(non_embedding, layers, d, int(seq)),
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
