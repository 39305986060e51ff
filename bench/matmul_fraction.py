"""Derive each GPU's achieved dense 16-bit matmul TFLOP/s, and its fraction of the datasheet peak, from
microsoft/vidur's per-operator profiles: the measurement behind docs/llm.md's "not shipped" table
(matmuls against this achievable fraction cost the LLM scaling model accuracy on every split, so
``perfmodel`` runs them against the datasheet peak; ``bench/llm_fit.py`` re-measures that comparison).

Data: microsoft/vidur (MIT licence), ``data/profiling/compute/<device>/<model>/mlp.csv``: one row per
(model, tensor-parallel degree, token count) with the min / median / max over repeated runs of each
operator of a transformer layer in FP16 (``vidur/profiling/mlp/mlp_wrapper.py`` casts the model to
float16), timed in milliseconds. Four of those operators are single dense GEMMs whose shape follows from
the row: ``attn_pre_proj`` (tokens x hidden -> (heads + 2 KV heads) x head dim / tp), ``attn_post_proj``
(heads x head dim / tp -> hidden), ``mlp_up_proj`` (hidden -> (2 if gated) x expanded / tp) and
``mlp_down_proj`` (expanded / tp -> hidden). Each gives 2 M N K / median time. The shipped figure for a
device is the 99th percentile of that throughput over all its GEMM rows: the best the kernels reach on
large shapes, with the top 1% (a single shape or timing outlier) trimmed. The maximum is printed too.
FP16 and BF16 run at the same dense tensor-core rate on every device here (A100, H100, A40).

Run from the repository root with a checkout of vidur (``git clone https://github.com/microsoft/vidur``,
the figures in docs/llm.md are from commit 7d47513363ec447a741ac5e47241580b47724fbf)::

    python bench/matmul_fraction.py /path/to/vidur
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import numpy as np

from perfmodel.gpus import spec_for_product

# vidur's compute-profile device folders -> the catalogue variant whose BF16/FP16 peak the fraction is of
DEVICES = {"a100": "A100-SXM4-80GB", "h100": "H100-80GB-HBM3", "a40": "A40"}
OPS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")


def gemm_shapes(r: dict[str, str]) -> dict[str, tuple[int, int, int]]:
    """(M, K, N) of each GEMM operator of one profile row."""
    tokens, tp = int(r["num_tokens"]), int(r["num_tensor_parallel_workers"])
    hidden, expanded = int(r["n_embd"]), int(r["n_expanded_embd"])
    heads, kv_heads = int(r["n_head"]), int(r["n_kv_head"])
    head_dim = hidden // heads
    up = (2 if r["use_gated_mlp"] == "True" else 1) * expanded
    return {
        "attn_pre_proj": (tokens, hidden, (heads + 2 * kv_heads) * head_dim // tp),
        "attn_post_proj": (tokens, heads * head_dim // tp, hidden),
        "mlp_up_proj": (tokens, hidden, up // tp),
        "mlp_down_proj": (tokens, expanded // tp, hidden),
    }


def device_tflops(folder: Path) -> tuple[np.ndarray, str]:
    """Achieved TFLOP/s of every GEMM row under one device folder, and a description of the best one."""
    out: list[float] = []
    best, where = 0.0, ""
    for path in sorted(folder.rglob("mlp.csv")):
        with path.open() as fh:
            for r in csv.DictReader(fh):
                for op, (m, k, n) in gemm_shapes(r).items():
                    seconds = float(r[f"time_stats.{op}.median"]) * 1e-3
                    tflops = 2.0 * m * k * n / seconds / 1e12
                    out.append(tflops)
                    if tflops > best:
                        best, where = tflops, f"{op} {m}x{k}x{n} ({path.parent.relative_to(folder)})"
    return np.asarray(out), where


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    root = Path(sys.argv[1]) / "data" / "profiling" / "compute"
    print("device  rows  p99 TFLOP/s  max TFLOP/s  peak  p99/peak  max/peak  best shape")
    for folder, variant in DEVICES.items():
        tflops, where = device_tflops(root / folder)
        spec = spec_for_product(variant)
        assert spec is not None, variant
        peak = max(spec.bf16_tflops, spec.fp16_tflops)
        p99, top = float(np.percentile(tflops, 99)), float(tflops.max())
        print(
            f"{folder:6s} {tflops.size:5d}  {p99:11.1f}  {top:11.1f}  {peak:5.1f}  "
            f"{p99 / peak:8.3f}  {top / peak:8.3f}  {where}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
