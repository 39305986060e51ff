"""Fit the LLM scaling model's constants (``perfmodel.llm.FIT``) on public LLM rows, and check memory fit.

Data: ``../shared/throughput/public/mosaic_llmfoundry_benchmarks.tsv.gz`` -- MosaicML llm-foundry's
benchmark table (``scripts/train/benchmarking/README.md``, Apache-2.0): MPT 125M-70B, BF16 (the 7 FP8
rows are left out: the predictor has no fp8 precision yet), PyTorch FSDP, on A100 40/80 GB and H100 80 GB,
8-512 GPUs. The table gives the parameter count (with the learned position embedding, so the hidden size is
the parameter difference between sequence lengths / 512 and the layer count follows from 12 L h^2); the
shapes are MPT's (vocabulary 50432, tied embeddings, 8 GPUs a node; 1600 Gb/s a node for the A100
sections as their titles say, 3200 Gb/s for H100, DGX H100's 8 x 400 Gb/s). SHARD_GRAD_OP rows are
modelled as fsdp.

Prints: the fitted constants, in-sample error, leave-one-GPU-type-out error (fit on H100 rows, test on
A100 rows and back) against a same-run baseline (a constant 40% MFU, the usual rule of thumb), and the
memory-fit check over every row (each ran, so each must fit). Run from the repository root:
``PERFSCHED_SHARED=../shared python bench/llm_fit.py`` (the shared directory holds ``throughput/public``).
"""

from __future__ import annotations

import csv
import gzip
import math
import os
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares

from perfmodel.features import HardwareFeatures
from perfmodel.llm import FIT, LLMFit, LLMJobFeatures, plan, step_time
from perfmodel.memory import estimate
from perfmodel.zoo import LLMArch

DATA = Path(os.environ.get("PERFSCHED_SHARED", "../shared")) / "throughput" / "public"
TABLE = "mosaic_llmfoundry_benchmarks.tsv.gz"
PRODUCT = {"h100_80gb": "NVIDIA-H100-80GB-HBM3", "a100_40gb": "A100-SXM4-40GB", "a100_80gb": "A100-SXM4-80GB"}
SIZES = {
    "125m": 768,
    "350m": 1024,
    "760m": 1536,
    "1b": 2048,
    "3b": 2560,
    "7b": 4096,
    "13b": 5120,
    "30b": 7168,
    "70b": 8192,
}
VOCAB = 50432


def rows(path: Path) -> list[tuple[LLMJobFeatures, HardwareFeatures, float, str]]:
    out = []
    with gzip.open(path, "rt") as fh:
        for r in csv.DictReader(fh, delimiter="\t"):
            if "fp8" in r["Precision"]:
                continue
            h = SIZES[r["Model"]]
            n_params = float(r["NumParams"])
            seq = int(r["SeqLen (T)"])
            layers = round((n_params - VOCAB * h - seq * h) / (12 * h * h))
            gpus = int(r["# GPUs"])
            net = 1600.0 if r["section"].startswith("A100") else 3200.0
            job = LLMJobFeatures(
                model=f"mpt-{r['Model']}-bench",
                batch_size=int(r["GlobalBatchSize"]),
                precision="bf16",
                params=n_params,
                sequence_length=seq,
                sharding="fsdp",
                micro_batch=int(r["MicroBatchSize"]),
                activation_checkpointing=r["Activation Checkpointing"] == "True",
                arch=LLMArch(
                    layers,
                    h,
                    h // 128,
                    h // 128,
                    4 * h,
                    VOCAB,
                    seq,
                    n_params,
                    gated_mlp=False,
                    tied_embeddings=True,
                ),
            )
            hw = HardwareFeatures(PRODUCT[r["GPU"]], gpus, min(8, gpus), max(1, gpus // 8), "nvlink", net)
            out.append((job, hw, float(r["Throughput (T/s)"]), r["GPU"]))
    return out


def log_errors(data: list[tuple[LLMJobFeatures, HardwareFeatures, float, str]], fit: LLMFit) -> np.ndarray:
    errs = []
    for job, hw, tokens, _ in data:
        p = plan(job, hw)
        pred = p.tokens_per_step / step_time(p, fit).total
        errs.append(math.log(pred / tokens))
    return np.asarray(errs)


def fit_on(data: list[tuple[LLMJobFeatures, HardwareFeatures, float, str]]) -> LLMFit:
    def make(x: np.ndarray, rows: int = 0) -> LLMFit:
        return replace(
            FIT,
            gemm_efficiency=float(x[0]),
            hidden_half=float(math.exp(x[1])),
            attention_efficiency=float(x[2]),
            elementwise_bytes=float(math.exp(x[3])),
            layer_overhead_s=float(math.exp(x[4])),
            link_efficiency=float(x[5]),
            rows=rows,
        )

    def resid(x: np.ndarray) -> np.ndarray:
        return log_errors(data, make(x))

    x0 = np.array([0.7, math.log(300.0), 0.4, math.log(40.0), math.log(1e-4), 0.7])
    lo = [0.2, 0.0, 0.05, 0.0, math.log(1e-7), 0.1]
    hi = [1.0, 10.0, 1.0, math.log(2000.0), math.log(1e-2), 1.0]
    f = make(least_squares(resid, x0, bounds=(lo, hi)).x, len(data))
    e = log_errors(data, f)
    return replace(f, log_q_low=float(np.quantile(e, 0.1)), log_q_high=float(np.quantile(e, 0.9)))


def rel(e: np.ndarray) -> tuple[float, float]:
    r = np.abs(np.exp(e) - 1.0)  # |predicted / measured - 1|
    return float(r.mean()), float(np.median(r))


def constant_mfu(data: list[tuple[LLMJobFeatures, HardwareFeatures, float, str]], m: float) -> np.ndarray:
    errs = []
    for job, hw, tokens, _ in data:
        p = plan(job, hw)
        pred = p.spec.tflops("bf16") * 1e12 * m * p.num_gpus / p.flops_per_token
        errs.append(math.log(pred / tokens))
    return np.asarray(errs)


def main() -> int:
    data = rows(DATA / TABLE)
    f = fit_on(data)
    print(f"rows: {len(data)} (llm-foundry BF16)")
    print(
        f"fitted: gemm_efficiency={f.gemm_efficiency:.4f} hidden_half={f.hidden_half:.1f} "
        f"attention_efficiency={f.attention_efficiency:.4f} elementwise_bytes={f.elementwise_bytes:.1f} "
        f"layer_overhead_s={f.layer_overhead_s:.6f} "
        f"link_efficiency={f.link_efficiency:.4f} q10={f.log_q_low:.4f} q90={f.log_q_high:.4f}"
    )
    m, b = rel(log_errors(data, f)), rel(constant_mfu(data, 0.40))
    print(
        f"in-sample relative error (mean, median): model {m[0]:.3f} {m[1]:.3f} | "
        f"constant 40% MFU {b[0]:.3f} {b[1]:.3f}"
    )
    s = rel(log_errors(data, FIT))
    print(f"shipped FIT in-sample (mean, median): {s[0]:.3f} {s[1]:.3f}")
    for held in ("h100_80gb", "a100"):
        train = [r for r in data if not r[3].startswith(held)]
        test = [r for r in data if r[3].startswith(held)]
        g = fit_on(train)
        m, b = rel(log_errors(test, g)), rel(constant_mfu(test, 0.40))
        print(
            f"leave {held} out: fit on {len(train)}, test on {len(test)} rows: model mean/median "
            f"{m[0]:.3f}/{m[1]:.3f} | constant 40% MFU {b[0]:.3f}/{b[1]:.3f}"
        )
    held_out: list[float] = []
    base_out: list[float] = []
    for size in sorted({r[0].model for r in data}):
        train = [r for r in data if r[0].model != size]
        test = [r for r in data if r[0].model == size]
        held_out.extend(np.abs(np.exp(log_errors(test, fit_on(train))) - 1.0))
        base_out.extend(np.abs(np.exp(constant_mfu(test, 0.40)) - 1.0))
    print(
        f"leave one model size out ({len({r[0].model for r in data})} sizes): model mean/median "
        f"{np.mean(held_out):.3f}/{np.median(held_out):.3f} | constant 40% MFU "
        f"{np.mean(base_out):.3f}/{np.median(base_out):.3f}"
    )
    # memory: every row ran, so each must fit
    bad = 0
    worst = 0.0
    for job, hw, _, gpu in data:
        est = estimate(plan(job, hw))
        worst = max(worst, est.total_gib / est.capacity_gib)
        if not est.fits:
            bad += 1
            print(f"  predicted OOM for a published run: {gpu} {job} -> {est.message}")
    print(
        f"memory fit: {len(data) - bad}/{len(data)} published llm-foundry runs predicted to fit; "
        f"highest predicted use {100 * worst:.0f}% of the GPU"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
