"""Fit the LLM scaling model's constants (``perfmodel.llm_fit.FIT``) on public LLM rows, and check memory fit.

Data: ``../shared/throughput/public/mosaic_llmfoundry_benchmarks.tsv.gz`` -- MosaicML llm-foundry's
benchmark table (``scripts/train/benchmarking/README.md``, Apache-2.0): MPT 125M-70B, BF16 (the 7 FP8
rows are left out: the predictor has no fp8 precision yet), PyTorch FSDP, on A100 40/80 GB and H100 80 GB,
8-512 GPUs. The table gives the parameter count (with the learned position embedding, so the hidden size is
the parameter difference between sequence lengths / 512 and the layer count follows from 12 L h^2); the
shapes are MPT's (vocabulary 50432, tied embeddings, 8 GPUs a node; 1600 Gb/s a node for the A100
sections as their titles say, 3200 Gb/s for H100, DGX H100's 8 x 400 Gb/s). SHARD_GRAD_OP rows are
modelled as fsdp.

Prints, for the model before its two network terms (each GPU held to 1/8 of its node's network, FSDP
traffic once a step; ``before_network_terms``), as shipped, and as shipped with matmuls against vidur's
measured achievable fractions of the peak (``vidur_fractions``: not shipped, docs/llm.md),
each refitted on the same rows: the fitted constants, in-sample error, leave-one-model-size-out error,
leave-one-GPU-generation-out error (fit on A100 rows, test on H100 rows and back), and the error on
Megatron-Bridge's FP8 Llama 3 rows (``megatron_rows``) -- against two same-run baselines: a constant 40%
MFU (the usual rule of thumb) and a constant MFU fitted on each split's training rows. Then the memory-fit
check over every row (each ran, so each must fit).
Run from the repository root: ``PERFSCHED_SHARED=../shared python bench/llm_fit.py`` (the shared
directory holds ``throughput/public``).
"""

from __future__ import annotations

import csv
import gzip
import math
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares

import perfmodel.llm
from perfmodel.features import HardwareFeatures
from perfmodel.llm import LLMJobFeatures, LLMPlan, plan, step_time
from perfmodel.llm_fit import FIT, LLMFit
from perfmodel.memory import estimate
from perfmodel.zoo import LLMArch

DATA = Path(os.environ.get("PERFSCHED_SHARED", "../shared")) / "throughput" / "public"
TABLE = "mosaic_llmfoundry_benchmarks.tsv.gz"
MEGATRON = "megatron_bridge_perf_summary.tsv.gz"
# Megatron-Bridge systems -> (product, network Gb/s per NVLink domain, GPUs per NVLink domain): DGX H100
# and B200 8 x 400 Gb/s, B300 8 x 800 Gb/s; GB200/GB300 NVL72 racks: one NVLink domain of 72 GPUs, one
# 400 / 800 Gb/s NIC per GPU
MEGATRON_SYSTEMS = {
    "DGX-H100": ("NVIDIA-H100-80GB-HBM3", 3200.0, 8),
    "DGX-B200": ("B200", 3200.0, 8),
    "DGX-B300": ("B300", 6400.0, 8),
    "DGX-GB200": ("GB200", 72 * 400.0, 72),
    "DGX-GB300": ("GB300", 72 * 800.0, 72),
}
MEGATRON_MODELS = {"LLAMA3_8B": "llama3-8b", "LLAMA3_70B": "llama3-70b"}
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


Row = tuple[LLMJobFeatures, HardwareFeatures, float, str]


def _first(cell: str) -> int:
    """The first number of a Megatron-Bridge cell (``31357 (29925)``: FP8-CS, then FP8-MX in brackets)."""
    return int(float(cell.split("(")[0].replace(",", "").strip()))


def megatron_rows(path: Path) -> list[Row]:
    """Megatron-Bridge's FP8 pre-training rows of dense Llama 3 8B / 70B (``docs/performance-summary.md``
    and its archive, Apache-2.0): tokens/s of NVIDIA's tuned NeMo recipes (Transformer Engine FP8 with
    current scaling, fused kernels, CUDA graphs) on DGX H100 and B200 (B300 where listed) and on
    GB200/GB300 NVL72 -- a precision, software stack and two GPU generations the fit never saw. The 25.09
    tables have no precision column: their figures equal the later FP8-CS rows (H100 Llama 3 8B 14,079 vs
    14,451 tokens/s), so they are FP8 too. There is no BF16 Llama row. Not modelled: attention kept in
    BF16 (the model runs it at the FP8 rate too), virtual pipeline stages (a smaller bubble),
    recomputation."""
    out: list[Row] = []
    with gzip.open(path, "rt") as fh:
        for r in csv.DictReader(fh, delimiter="\t"):
            if not r["task"].startswith("Pre-Training"):
                continue
            head = [h.strip() for h in r["header"].split("|")]
            cells = [c.strip() for c in r["row"].split("|")]
            if len(head) != len(cells):
                continue
            row = dict(zip(head, cells, strict=True))
            kind, _, name = r["section"].partition(":")
            model_name = name.strip() if kind == "Model" else row.get("Model", "")
            system_name = name.strip() if kind == "System" else row.get("System", "")
            model = MEGATRON_MODELS.get(model_name.split(" ")[0].upper())
            system = MEGATRON_SYSTEMS.get(system_name.upper())
            precision = row.get("Precision", "FP8").upper()
            if model is None or system is None or not precision.startswith("FP8"):
                continue
            n, seq = _first(row["#-GPUs"]), _first(row["Sequence Length"])
            fsdp = row.get("FSDP", "0").split("(")[0].strip() not in ("0", "n/a", "")
            tp, pp = _first(row["TP"]), _first(row["PP"])
            job = LLMJobFeatures(
                model=model,
                batch_size=_first(row["GBS"]),
                precision="fp8",
                sequence_length=seq,
                sharding="fsdp" if fsdp else f"tp{tp}xpp{pp}",
                micro_batch=_first(row["MBS"]),
            )
            per_node = min(n, system[2])
            hw = HardwareFeatures(system[0], n, per_node, max(1, n // per_node), "nvlink", system[1])
            out.append((job, hw, float(_first(row["Tokens / sec / GPU"])) * n, system_name))
    return out


# Achievable fraction of the dense 16-bit peak from microsoft/vidur's FP16 GEMM profiles (MIT, commit
# 7d47513; bench/matmul_fraction.py: 99th percentile of 2 M N K / median time): A100 250.5 of 312, H100 SXM
# 803.1 of 989.4 TFLOP/s; any other product gets 0.81, about their median. Only for the comparison.
VIDUR_FRACTION = {"A100": 250.5 / 312.0, "H100": 803.1 / 989.4}
VIDUR_FRACTION_OTHER = 0.81


def _as_planned(p: LLMPlan) -> LLMPlan:
    return p


_adjust: Callable[[LLMPlan], LLMPlan] = _as_planned


def log_errors(data: list[Row], fit: LLMFit) -> np.ndarray:
    errs = []
    for job, hw, tokens, _ in data:
        p = _adjust(plan(job, hw))
        pred = p.tokens_per_step / step_time(p, fit).total
        errs.append(math.log(pred / tokens))
    return np.asarray(errs)


def fit_on(data: list[Row]) -> LLMFit:
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
    if not data:  # nothing to fit on (llm-foundry held out): the starting point, with FIT's interval
        return make(x0)
    lo = [0.2, 0.0, 0.05, 0.0, math.log(1e-7), 0.1]
    hi = [1.0, 10.0, 1.0, math.log(2000.0), math.log(1e-2), 1.0]
    f = make(least_squares(resid, x0, bounds=(lo, hi)).x, len(data))
    e = log_errors(data, f)
    return replace(f, log_q_low=float(np.quantile(e, 0.1)), log_q_high=float(np.quantile(e, 0.9)))


def rel(e: np.ndarray) -> tuple[float, float]:
    r = np.abs(np.exp(e) - 1.0)  # |predicted / measured - 1|
    return float(r.mean()), float(np.median(r))


def constant_mfu(data: list[Row], m: float) -> np.ndarray:
    errs = []
    for job, hw, tokens, _ in data:
        p = plan(job, hw)
        pred = p.spec.tflops("bf16") * 1e12 * m * p.num_gpus / p.flops_per_token
        errs.append(math.log(pred / tokens))
    return np.asarray(errs)


@contextmanager
def before_network_terms() -> Iterator[None]:
    """The model without its two network terms (for the same-run comparison): each GPU held to 1/8
    of its node's network across nodes, and FSDP's traffic counted once a step rather than once a
    micro-batch."""
    bus, passes = perfmodel.llm._bus_gbs, perfmodel.llm._fsdp_passes

    def per_gpu_share(p: LLMPlan, group: int, spans_nodes: bool) -> float:
        now = bus(p, group, spans_nodes)  # min(inside the node, the node's whole network) across nodes
        if not spans_nodes or group <= 1:
            return now
        return min(now, p.hw.network_gbps / 8.0 / max(1, p.hw.gpus_per_node))

    perfmodel.llm._bus_gbs = per_gpu_share
    perfmodel.llm._fsdp_passes = lambda p: 1
    try:
        yield
    finally:
        perfmodel.llm._bus_gbs = bus
        perfmodel.llm._fsdp_passes = passes


def _vidur_peak(p: LLMPlan) -> LLMPlan:
    """``p`` on a GPU whose tensor-core peaks are scaled by vidur's achievable fraction of its product."""
    f = next((v for k, v in VIDUR_FRACTION.items() if k in p.spec.variant), VIDUR_FRACTION_OTHER)
    s = p.spec
    spec = replace(
        s, fp16_tflops=s.fp16_tflops * f, bf16_tflops=s.bf16_tflops * f, fp8_tflops=s.fp8_tflops * f
    )
    return replace(p, hw=replace(p.hw, spec=spec))


@contextmanager
def vidur_fractions() -> Iterator[None]:
    """The shipped model with matmuls against vidur's measured achievable fraction of the peak instead of
    the datasheet peak (not shipped: what the fractions would change)."""
    global _adjust
    _adjust = _vidur_peak
    try:
        yield
    finally:
        _adjust = _as_planned


def constant_mfu_fitted(train: list[Row], test: list[Row]) -> np.ndarray:
    """A constant MFU fitted on ``train`` (its geometric mean), applied to ``test``."""
    m = 0.40 * math.exp(-float(np.mean(constant_mfu(train, 0.40))))
    return constant_mfu(test, m)


def evaluate(label: str, data: list[Row], extra: list[Row]) -> LLMFit:
    """Every figure of the model as it stands (the caller may patch it): in-sample, leave one model
    size out, leave one GPU generation out, and the rows of another source."""
    f = fit_on(data)
    print(f"== {label}")
    print(
        f"fitted: gemm_efficiency={f.gemm_efficiency:.4f} hidden_half={f.hidden_half:.1f} "
        f"attention_efficiency={f.attention_efficiency:.4f} elementwise_bytes={f.elementwise_bytes:.1f} "
        f"layer_overhead_s={f.layer_overhead_s:.6f} "
        f"link_efficiency={f.link_efficiency:.4f} q10={f.log_q_low:.4f} q90={f.log_q_high:.4f}"
    )
    m, b = rel(log_errors(data, f)), rel(constant_mfu(data, 0.40))
    c = rel(constant_mfu_fitted(data, data))
    print(
        f"in-sample, {len(data)} rows (mean/median): model {m[0]:.3f}/{m[1]:.3f} | constant 40% MFU "
        f"{b[0]:.3f}/{b[1]:.3f} | constant MFU fitted on the same rows {c[0]:.3f}/{c[1]:.3f}"
    )
    held_out: list[float] = []
    base_out: list[float] = []
    fitted_out: list[float] = []
    sizes = sorted({r[0].model for r in data})
    for size in sizes:
        train = [r for r in data if r[0].model != size]
        test = [r for r in data if r[0].model == size]
        held_out.extend(np.abs(np.exp(log_errors(test, fit_on(train))) - 1.0))
        base_out.extend(np.abs(np.exp(constant_mfu(test, 0.40)) - 1.0))
        fitted_out.extend(np.abs(np.exp(constant_mfu_fitted(train, test)) - 1.0))
    print(
        f"leave one model size out ({len(sizes)} sizes): model {np.mean(held_out):.3f}/"
        f"{np.median(held_out):.3f} | constant 40% MFU {np.mean(base_out):.3f}/{np.median(base_out):.3f} | "
        f"constant MFU fitted on the training rows {np.mean(fitted_out):.3f}/{np.median(fitted_out):.3f}"
    )
    for name, held in (("A100 -> H100", "h100_80gb"), ("H100 -> A100", "a100")):
        train = [r for r in data if not r[3].startswith(held)]
        test = [r for r in data if r[3].startswith(held)]
        g = fit_on(train)
        m, b = rel(log_errors(test, g)), rel(constant_mfu(test, 0.40))
        c = rel(constant_mfu_fitted(train, test))
        print(
            f"{name}: fit on {len(train)}, test on {len(test)} rows: model {m[0]:.3f}/{m[1]:.3f} | "
            f"constant 40% MFU {b[0]:.3f}/{b[1]:.3f} | constant MFU fitted on the training rows "
            f"{c[0]:.3f}/{c[1]:.3f}"
        )
    if extra:
        e = log_errors(extra, f)
        m, b = rel(e), rel(constant_mfu(extra, 0.40))
        c = rel(constant_mfu_fitted(data, extra))
        ratios = " ".join(
            f"{gpu}:{job.model}:{job.sharding}={math.exp(x):.2f}"
            for (job, _, _, gpu), x in zip(extra, e, strict=True)
        )
        print(
            f"Megatron-Bridge FP8 pre-training, {len(extra)} rows (fit on all llm-foundry rows): model "
            f"{m[0]:.3f}/{m[1]:.3f} | constant 40% MFU {b[0]:.3f}/{b[1]:.3f} | constant MFU fitted on "
            f"llm-foundry {c[0]:.3f}/{c[1]:.3f}\n  predicted/measured: {ratios}"
        )
    return f


def main() -> int:
    data = rows(DATA / TABLE)
    extra = megatron_rows(DATA / MEGATRON) if (DATA / MEGATRON).exists() else []
    print(f"rows: {len(data)} (llm-foundry BF16); relative error |predicted / measured - 1| of tokens/s")
    with before_network_terms():
        evaluate("before: 1/8 of the node network per GPU, FSDP traffic once a step", data, extra)
    f = evaluate("after (shipped): rings over the node network, FSDP traffic per micro-batch", data, extra)
    with vidur_fractions():
        evaluate("after, matmuls against vidur's achievable fractions (not shipped)", data, extra)
    s = rel(log_errors(data, FIT))
    print(f"shipped FIT in-sample (mean, median): {s[0]:.3f} {s[1]:.3f}")
    if (
        max(
            abs(f.gemm_efficiency - FIT.gemm_efficiency),
            abs(f.attention_efficiency - FIT.attention_efficiency),
        )
        > 0.01
    ):
        print("note: the shipped FIT differs from this fit: update perfmodel.llm_fit.FIT")
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
