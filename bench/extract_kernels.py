"""Build ``perfmodel/data/kernels/kernels.tsv.gz`` from fetched public per-kernel measurements.

Reads two upstream repositories as bare git directories (no work tree needed):

- sitar-lab/NeuSight (MIT): ``scripts/asplos/data/dataset/{train,test}`` per-kernel latencies (ms) of
  batched and plain matmuls, convolutions, element-wise ops, layer norm and softmax in FP32 under PyTorch
  2.1 on P100, V100, T4, L4, A100 (PCIe 40/80 GB) and H100 (SXM). P4 rows are left out (no catalogue spec).
- microsoft/vidur (MIT): ``data/profiling/compute/{a100,h100,a40}/<model>/mlp.csv``, median per-operator
  times (ms) of the FP16 linear projections, RMSNorm, activation, residual add and embedding of LLM layers.

Each output row is one kernel configuration on one GPU: its operator class (the cost model's classes),
operator, dtype, GEMM dims where it is a matmul, FLOPs, bytes moved at its dtype, measured latency in
microseconds, and its source and licence. Groups larger than ``--cap`` rows per (source, GPU, op) are
subsampled deterministically (by a hash of the row's dims), so the same mirrors give the same bytes.

    python bench/extract_kernels.py --neusight /work/.mirror/sitar-lab+NeuSight/repo \\
        --vidur /work/.mirror/microsoft+vidur/repo --out perfmodel/data/kernels/kernels.tsv.gz
"""

from __future__ import annotations

import argparse
import csv
import gzip
import hashlib
import io
import subprocess
import sys
from collections import defaultdict
from collections.abc import Iterator

NEUSIGHT_DEVICES = {
    "Tesla P100-PCIE-16GB": "P100-PCIE-16GB",
    "Tesla V100-PCIE-32GB": "V100-PCIE-32GB",
    "Tesla T4": "T4",
    "NVIDIA L4": "L4",
    "NVIDIA A100-PCIE-40GB": "A100-PCIE-40GB",
    "NVIDIA A100 80GB PCIe": "A100-80GB-PCIE",
    "NVIDIA H100 80GB HBM3": "H100-80GB-HBM3",
}
# vidur's device SKUs (vidur/config/device_sku_config.py: a100 80 GB, h100 80 GB, a40) on DGX nodes.
VIDUR_DEVICES = {"a100": "A100-SXM4-80GB", "h100": "H100-80GB-HBM3", "a40": "A40"}
CONV_COLUMNS = ("B", "Input_Channel", "Output_Channel", "Kernel_Szie", "Input_Size", "Stride", "Padding")
BINARY = {"add", "mul", "div", "pow"}
UNARY = {"addu", "mulu", "divu", "powu", "relu", "gelu", "tanh"}
COLUMNS = (
    "source",
    "licence",
    "gpu_product",
    "op_class",
    "op",
    "dtype",
    "batch",
    "m",
    "n",
    "k",
    "flops",
    "bytes",
    "latency_us",
)


def _git(git_dir: str, *args: str) -> str:
    out = subprocess.run(["git", "--git-dir", git_dir, *args], check=True, capture_output=True, text=True)
    return out.stdout


def _rows(git_dir: str, path: str) -> Iterator[dict[str, str]]:
    yield from csv.DictReader(io.StringIO(_git(git_dir, "show", f"HEAD:{path}")))


def _gemm(
    source: str, gpu: str, op: str, dtype: str, b: int, m: int, n: int, k: int, ms: float, nbytes: float
):  # type: ignore[no-untyped-def]
    cls = "gemm"
    return {
        "source": source,
        "gpu_product": gpu,
        "op_class": cls,
        "op": op,
        "dtype": dtype,
        "batch": b,
        "m": m,
        "n": n,
        "k": k,
        "flops": 2.0 * b * m * n * k,
        "bytes": nbytes,
        "latency_us": ms * 1000.0,
    }


def _dtype(r: dict[str, str]) -> str:
    """``tf32`` where cuBLAS/cuDNN picked a TF32 tensor-core kernel for the FP32 tensors, else ``fp32``."""
    return "tf32" if "tf32" in (r.get("Kernels", "") + r.get("Kernel Name", "")).lower() else "fp32"


def neusight(git_dir: str) -> list[dict[str, object]]:
    commit = _git(git_dir, "rev-parse", "HEAD").strip()[:8]
    source = f"sitar-lab/NeuSight@{commit}"
    base = "scripts/asplos/data/dataset"
    files = _git(git_dir, "ls-tree", "-r", "--name-only", "HEAD", base).splitlines()
    wanted = [f"{base}/test/{n}.csv" for n in ("bmm", "linear", "elem", "ln", "softmax")]
    wanted += [f"{base}/train/{n}.csv" for n in ("elem", "ln", "softmax")]
    wanted += [f for f in files if any(f"/train/collect/{op}/" in f for op in ("bmm", "linear", "conv"))]
    out: list[dict[str, object]] = []
    seen: set[tuple[object, ...]] = set()
    for path in wanted:
        if path not in files:
            continue
        for r in _rows(git_dir, path):
            gpu = NEUSIGHT_DEVICES.get(r["Device"])
            ms = float(r["Latency"])
            if gpu is None or not ms > 0:
                continue
            op = r["OPName"]
            row: dict[str, object]
            if op in ("bmm", "linear"):
                b, m, n, k = (int(float(r[c])) for c in ("B", "M", "N", "K"))
                if op == "bmm":
                    nbytes = 4.0 * b * (m * k + k * n + m * n)
                else:  # input (b*m x k), weight (n x k) shared over the batch, output (b*m x n)
                    nbytes = 4.0 * (b * m * k + n * k + b * m * n)
                row = _gemm(source, gpu, op, _dtype(r), b, m, n, k, ms, nbytes)
            elif op == "conv":
                b, cin, cout, ks, size, stride, pad = (
                    int(float(r[c]))
                    for c in (
                        "B",
                        "Input_Channel",
                        "Output_Channel",
                        "Kernel_Szie",
                        "Input_Size",
                        "Stride",
                        "Padding",
                    )
                )
                ho = (size + 2 * pad - ks) // stride + 1
                if ho <= 0:
                    continue
                m, n, k = b * ho * ho, cout, cin * ks * ks
                nbytes = 4.0 * (b * cin * size * size + cout * cin * ks * ks + b * cout * ho * ho)
                row = _gemm(source, gpu, "conv", _dtype(r), 1, m, n, k, ms, nbytes)
            elif op in BINARY or op in UNARY or op in ("ln", "softmax"):
                elems = int(float(r["B"])) * int(float(r["H"]))
                if op in BINARY:
                    cls, nbytes, flops = "elementwise", 12.0 * elems, float(elems)
                elif op in UNARY:
                    cls, nbytes, flops = "elementwise", 8.0 * elems, float(elems)
                elif op == "ln":
                    cls, nbytes, flops = "normalization", 8.0 * elems, 6.0 * elems
                else:
                    cls, nbytes, flops = "reduction", 8.0 * elems, 5.0 * elems
                row = {
                    "source": source,
                    "gpu_product": gpu,
                    "op_class": cls,
                    "op": op,
                    "dtype": "fp32",
                    "batch": int(float(r["B"])),
                    "m": 0,
                    "n": int(float(r["H"])),
                    "k": 0,
                    "flops": flops,
                    "bytes": nbytes,
                    "latency_us": ms * 1000.0,
                }
            else:
                continue
            key = tuple(row[c] for c in ("gpu_product", "op", "batch", "m", "n", "k"))
            if key in seen:  # the test and train files share some configurations
                continue
            seen.add(key)
            out.append(row)
    return out


def vidur(git_dir: str) -> list[dict[str, object]]:
    commit = _git(git_dir, "rev-parse", "HEAD").strip()[:8]
    source = f"microsoft/vidur@{commit}"
    files = _git(git_dir, "ls-tree", "-r", "--name-only", "HEAD", "data/profiling/compute").splitlines()
    out: list[dict[str, object]] = []
    for path in files:
        if not path.endswith("/mlp.csv"):
            continue
        sku = path.split("/")[3]
        gpu = VIDUR_DEVICES.get(sku)
        if gpu is None:
            continue
        for r in _rows(git_dir, path):
            heads, kv, embd = int(r["n_head"]), int(r["n_kv_head"]), int(r["n_embd"])
            ffn, tokens, tp = (
                int(r["n_expanded_embd"]),
                int(r["num_tokens"]),
                int(r["num_tensor_parallel_workers"]),
            )
            gated = r["use_gated_mlp"].strip().lower() == "true"
            hd = embd // heads
            up = (2 if gated else 1) * ffn // tp
            gemms = {
                "attn_pre_proj": (embd, (heads + 2 * kv) * hd // tp),
                "attn_post_proj": (heads * hd // tp, embd),
                "mlp_up_proj": (embd, up),
                "mlp_down_proj": (ffn // tp, embd),
            }
            for name, (k, n) in gemms.items():
                ms = float(r[f"time_stats.{name}.median"])
                if ms > 0 and n > 0:
                    nbytes = 2.0 * (tokens * k + k * n + tokens * n)
                    out.append(_gemm(source, gpu, "linear", "fp16", 1, tokens, n, k, ms, nbytes))
            vec = {
                # op: (class, elements, bytes per element moved, flops per element)
                "input_layernorm": ("normalization", tokens * embd, 4.0, 6.0),
                "post_attention_layernorm": ("normalization", tokens * embd, 4.0, 6.0),
                "mlp_act": ("elementwise", tokens * ffn // tp, 6.0 if gated else 4.0, 2.0),
                "add": ("elementwise", tokens * embd, 6.0, 1.0),
                "emb": ("embedding", tokens * embd, 4.0, 0.0),
            }
            for name, (cls, elems, bpe, fpe) in vec.items():
                col = f"time_stats.{name}.median"
                if col not in r or not r[col]:
                    continue
                ms = float(r[col])
                if not ms > 0:
                    continue
                out.append(
                    {
                        "source": source,
                        "gpu_product": gpu,
                        "op_class": cls,
                        "op": name,
                        "dtype": "fp16",
                        "batch": tokens,
                        "m": 0,
                        "n": elems // tokens,
                        "k": 0,
                        "flops": fpe * elems,
                        "bytes": bpe * elems,
                        "latency_us": ms * 1000.0,
                    }
                )
    # vidur profiles the same layer shapes for several models: keep one row per distinct configuration
    # (median of the duplicates' latencies).
    merged: dict[tuple[object, ...], list[dict[str, object]]] = defaultdict(list)
    for row in out:
        merged[tuple(row[c] for c in ("gpu_product", "op", "batch", "m", "n", "k"))].append(row)
    result = []
    for rows in merged.values():
        lat = sorted(float(str(x["latency_us"])) for x in rows)
        row = dict(rows[0])
        row["latency_us"] = lat[len(lat) // 2]
        result.append(row)
    return result


def _subsample(rows: list[dict[str, object]], cap: int) -> list[dict[str, object]]:
    groups: dict[tuple[object, ...], list[dict[str, object]]] = defaultdict(list)
    for r in rows:
        groups[(r["source"], r["gpu_product"], r["op"])].append(r)
    kept: list[dict[str, object]] = []
    for key in sorted(groups, key=str):
        g = groups[key]

        def h(r: dict[str, object]) -> str:
            return hashlib.sha1(repr(tuple(r[c] for c in ("batch", "m", "n", "k"))).encode()).hexdigest()

        g.sort(key=h)
        kept.extend(g[:cap])
    return kept


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--neusight", required=True, help="bare git dir of sitar-lab/NeuSight")
    ap.add_argument("--vidur", required=True, help="bare git dir of microsoft/vidur")
    ap.add_argument("--out", default="perfmodel/data/kernels/kernels.tsv.gz")
    ap.add_argument("--cap", type=int, default=2500, help="most rows per (source, GPU, operator)")
    a = ap.parse_args(argv)
    rows = [dict(r, licence="MIT") for r in neusight(a.neusight) + vidur(a.vidur)]
    rows = _subsample(rows, a.cap)
    rows.sort(key=lambda r: tuple(str(r[c]) for c in ("source", "gpu_product", "op_class", "op")))
    buf = io.StringIO()
    w = csv.writer(buf, delimiter="\t", lineterminator="\n")
    w.writerow(COLUMNS)
    for r in rows:
        w.writerow([f"{r[c]:.6g}" if isinstance(r[c], float) else r[c] for c in COLUMNS])
    # mtime=0: the same input gives the same bytes.
    with open(a.out, "wb") as f, gzip.GzipFile(fileobj=f, mode="wb", mtime=0, filename="") as gz:
        gz.write(buf.getvalue().encode())
    counts: dict[tuple[str, str], int] = defaultdict(int)
    for r in rows:
        counts[(str(r["gpu_product"]), str(r["op_class"]))] += 1
    for (gpu, cls), c in sorted(counts.items()):
        print(f"{gpu:16s} {cls:14s} {c:6d}")
    print(f"{len(rows)} rows -> {a.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
