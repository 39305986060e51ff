"""MDOT-style learned model against the composed operator route and the shipped predictor, same splits.

MDOT (Chen Y., Chen S., Mo X., Wu W., Li J., Computer Science (计算机科学) 53(5):129-136, 2026,
doi:10.11896/jsjkx.250900001) turns a model's computation graph into an
operator sequence in topological order, encodes each operator along three dimensions -- its type, its
configuration and its computational load -- adds a graph position encoding, and regresses the training
time with a Transformer over the sequence. Here the sequence is the job's operator profile (``perfsched
profile``'s zoo route, ``perfmodel.profiling.profile_zoo``) at the row's per-GPU micro-batch:

- **type**: the operator (``aten.convolution``, ...), its class and its phase, as learned embeddings;
- **configuration**: log implicit-GEMM dims (m, n, k, batch), whether the batch enters as m or k, log
  element counts of the output and of the first two inputs, tensor rank, log instance count;
- **load**: log FLOPs, log bytes at the job's dtype width (``perfmodel.compose.dtypes_for``), arithmetic
  intensity, and the operator's datasheet roofline on the row's GPU: log FLOPs / peak at the dtype it runs in
  ("fp32" as the row's software stack runs it), log bytes / memory bandwidth;
- the GPU's datasheet (``perfmodel.gpus``: FP32 and matmul peak, bandwidth, SMs, L2, memory, compute
  capability), the precision, the software stack and activation checkpointing, broadcast to every token;
- **graph position**: the operator's depth in the forward graph -- a backward or optimizer operator takes
  the depth of the forward operator of the same module, so the two ends of a layer share a position --
  and its index in the sequence, both as sinusoids of the fraction of the step.

Identical operators (same op, phase, shapes, FLOPs and bytes) are one token with their count, as profiles
already store repeated transformer layers; the compared rows' sequences are 15 to 168 tokens. The
placement (GPU count, nodes, link, the ring all-reduce time of the gradients on it, sharding, gradient
accumulation) enters the readout. Two readouts, one chosen per fold inside its training rows:

- ``sum``: each token's output is its time in context, a factor on its roofline time; the step is the sum
  over tokens times their counts (times the accumulation), plus a communication term from the pooled
  sequence and the placement;
- ``pool``: mean-pooled tokens and the placement -> log(step time / datasheet roofline step time).

Training (``bench/mdot_train.py``) needs PyTorch, which the product does not: it runs in a
``$PERFSCHED_TORCH_PYTHON`` (default ``/usr/bin/python3``) subprocess on one thread, seeded; this script
prepares the arrays in the product's environment. The readout and the training steps are chosen on an
inner hold-out of each fold's training rows, grouped like the split (random rows; a GPU generation;
models; sources), never on the fold's test rows (``bench/mdot_train.py``).

Data, rows and splits are those of ``bench/opmodel_accuracy.py``: the rows the operator route answers (a
zoo profile describes the row's sample; data parallel or FSDP), and its fixed splits (seeded random 20%,
leave one GPU generation out, leave one model out for models with at least 10 rows, leave one source
out). Methods in the same run: ``mdot``; ``composed`` and ``composed+cal`` (the operator route cold and
with its fold-fitted calibration); ``ours`` (the shipped predictor trained on all the fold's training
rows, also those the operator route cannot answer). All methods are scored on the same test rows.

    nice python bench/mdot_compare.py [--splits random,logo-gen,lomo,loso] [--methods mdot,composed,...]
        [--steps 300] [--out bench/results/mdot_compare.json]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.opmodel_accuracy import (
    GENERATIONS,
    HOSTS,
    Composer,
    _band,
    _calibrated,
    _profile_of,
    summarise,
)
from bench.perfmodel_accuracy import Data, fit_ours, rel_err
from perfmodel.compose import dtypes_for
from perfmodel.features import slowest_link_gbs
from perfmodel.gpus import GPUSpec
from perfmodel.kernels import default_cost_model, read_kernel_rows
from perfmodel.measurements import Measurement
from perfmodel.opcost import fit as fit_opcost
from perfmodel.opcost import peak_flops
from perfmodel.profile import BYTES_PER_ELEMENT, OpClass, Operator, OperatorProfile, Phase
from perfmodel.scaling import allreduce_latency_s
from perfmodel.train import training_table

ROOT = Path(__file__).resolve().parents[1]
TRAINER = Path(__file__).resolve().parent / "mdot_train.py"
Idx = np.ndarray

PRECISIONS = ("fp32", "tf32", "amp", "fp16", "bf16", "fp8")
STACKS = ("research", "vendor", "mlperf", "llm")
CLASSES = tuple(c.value for c in OpClass)
PHASES = tuple(p.value for p in Phase)
_WIDTH = {"fp32": 4.0, "tf32": 4.0, "fp16": 2.0, "bf16": 2.0, "fp8": 2.0}
_SUFFIX = re.compile(r"(\.backward|\.grad_input|\.grad_weight|\.grad_bias|\.weight\.\w+|\.bias\.\w+|#\d+)+$")

# Per-token static columns (at the profile's own micro-batch ``b0``); ``BATCH_SCALED`` of them move by
# log(b / b0) for operators whose work grows with the batch.
TOKEN_COLUMNS = (
    "log_flops",
    "log_bytes",
    "log_m",
    "log_n",
    "log_k",
    "log_gemm_batch",
    "batch_in_k",
    "log_out_numel",
    "log_in0_numel",
    "log_in1_numel",
    "rank",
    "log_count",
    "scales_with_batch",
    "is_optimizer",
    "is_matmul",
    "depth",
    "index",
)
BATCH_SCALED = ("log_flops", "log_bytes", "log_out_numel", "log_in0_numel")
ROW_COLUMNS = (
    "log_micro_ratio",  # log(row micro-batch / profile micro-batch)
    "log_peak_matmul",  # log FLOP/s of the dtype the matmuls run in
    "log_peak_fp32",
    "log_bw",  # log bytes/s
    "log_width",  # log(bytes per element of the non-optimizer tensors / 4)
    "log_sm",
    "log_l2",
    "log_mem",
    "cc",
    "tensor_cores",
    "act_ckpt",
    *(f"prec_{p}" for p in PRECISIONS),
    *(f"stack_{s}" for s in STACKS),
)
PLACEMENT_COLUMNS = (
    "log_gpus",
    "log_nodes",
    "log_per_node",
    "across_nodes",
    "nvlink",
    "log_link",
    "log_ring",  # log seconds of the DDP ring all-reduce of the FP32 gradients at line rate
    "fsdp",
    "log_accum",
    "log_micro",
)


def _numel(s: tuple[int, ...]) -> float:
    return math.log(max(1.0, float(math.prod(s)))) if s else 0.0


def _module(name: str) -> str:
    return _SUFFIX.sub("", name)


def encode_profile(profile: OperatorProfile) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray]:
    """One profile as MDOT tokens: (op names, class ids, phase ids, static columns ``TOKEN_COLUMNS``).

    Identical operators merge into one token with their summed count (first position kept); ``depth`` is
    the forward index of the operator's module over the number of forward operators (backward and
    optimizer operators inherit their module's), ``index`` the token's place in the step, both in [0, 1].
    """
    ops = profile.operators
    forward_depth: dict[str, int] = {}
    for o in ops:
        if o.phase == Phase.FORWARD:
            forward_depth.setdefault(_module(o.name), len(forward_depth))
    n_fwd = max(1, len(forward_depth))
    merged: dict[tuple[object, ...], list[object]] = {}
    for i, o in enumerate(ops):
        key = (o.op, o.phase, o.shapes, o.gemm, o.flops, o.bytes, o.scales_with_batch)
        if key in merged:
            merged[key][1] = int(merged[key][1]) + o.count  # type: ignore[call-overload]
        else:
            merged[key] = [o, o.count, i]
    names: list[str] = []
    cls, phase, rows = [], [], []
    n_ops = max(1, len(ops) - 1)
    for o, count, i in merged.values():
        assert isinstance(o, Operator) and isinstance(count, int) and isinstance(i, int)
        depth = forward_depth.get(_module(o.name))
        # A backward-only or loss operator (no forward module of its name) takes its place in the sequence.
        depth_f = i / n_ops if depth is None else depth / n_fwd
        g = o.gemm
        inputs = o.shapes.inputs
        rows.append(
            [
                math.log(max(o.flops, 1.0)),
                math.log(max(o.bytes, 1.0)),
                math.log(g.m) if g else 0.0,
                math.log(g.n) if g else 0.0,
                math.log(g.k) if g else 0.0,
                math.log(g.batch) if g else 0.0,
                1.0 if g and g.batch_dim == "k" else 0.0,
                _numel(o.shapes.output),
                _numel(inputs[0]) if inputs else 0.0,
                _numel(inputs[1]) if len(inputs) > 1 else 0.0,
                float(len(o.shapes.output)),
                math.log(count),
                1.0 if o.scales_with_batch else 0.0,
                1.0 if o.op_class == OpClass.OPTIMIZER else 0.0,
                1.0 if o.op_class in (OpClass.GEMM, OpClass.ATTENTION) else 0.0,
                depth_f,
                i / n_ops,
            ]
        )
        names.append(o.op)
        cls.append(CLASSES.index(o.op_class.value))
        phase.append(PHASES.index(o.phase.value))
    return names, np.asarray(cls), np.asarray(phase), np.asarray(rows, dtype=np.float64)


def _micro(m: Measurement) -> tuple[int, int]:
    """(micro-batch per GPU, accumulation steps) as ``perfmodel.compose.compose`` runs the row."""
    per_gpu = -(-m.batch_size // m.num_gpus)
    micro = min(m.micro_batch or per_gpu, per_gpu)
    return micro, -(-per_gpu // micro)


def encode_row(
    m: Measurement, spec: GPUSpec, profile: OperatorProfile, link_gbs: float
) -> tuple[list[float], list[float]]:
    """(``ROW_COLUMNS``, ``PLACEMENT_COLUMNS``) of one measured row."""
    micro, accum = _micro(m)
    gemm, conv, other = dtypes_for(m.precision, spec, m.stack)
    # One matmul peak per row: the dtype of the class that carries most of its matmul FLOPs (an "fp32"
    # ResNet on plain PyTorch runs its convolutions in TF32 and its classifier GEMM in FP32).
    conv_flops = sum(
        o.total_flops for o in profile.operators if o.op_class.value == "gemm" and "conv" in o.op
    )
    mm_flops = sum(o.total_flops for o in profile.operators if o.op_class.value in ("gemm", "attention"))
    mm = conv if conv_flops >= 0.5 * mm_flops else gemm
    row = [
        math.log(micro / profile.batch_size),
        math.log(peak_flops(spec, mm)),
        math.log(max(spec.fp32_tflops, 1e-3) * 1e12),
        math.log(spec.memory_bandwidth_gbs * 1e9),
        math.log(_WIDTH[other] / BYTES_PER_ELEMENT),
        math.log(max(spec.sm_count, 1)),
        math.log(max(spec.l2_mib, 0.1)),
        math.log(spec.memory_gib),
        spec.compute_capability[0] + spec.compute_capability[1] / 10.0,
        1.0 if spec.compute_capability >= (7, 0) and spec.fp16_tflops > spec.fp32_tflops else 0.0,
        1.0 if m.activation_checkpointing else 0.0,
        *(1.0 if m.precision == p else 0.0 for p in PRECISIONS),
        *(1.0 if m.stack == s else 0.0 for s in STACKS),
    ]
    n = m.num_gpus
    grad = 4.0 * profile.model.parameters
    ring = 2.0 * (n - 1) / n * grad / (link_gbs * 1e9) + allreduce_latency_s(n, m.num_nodes, m.gpus_per_node)
    place = [
        math.log(n),
        math.log(m.num_nodes),
        math.log(max(m.gpus_per_node, 1)),
        1.0 if m.num_nodes > 1 else 0.0,
        1.0 if m.interconnect == "nvlink" else 0.0,
        math.log(link_gbs),
        math.log(ring) if n > 1 else math.log(1e-6),
        1.0 if m.sharding == "fsdp" else 0.0,
        math.log(accum),
        math.log(micro),
    ]
    return row, place


def split_plans(
    d: Data, all_idx: Idx, splits: Sequence[str]
) -> list[tuple[str, str, list[tuple[str, Idx, Idx]]]]:
    """(key, title, folds) of ``bench/opmodel_accuracy.py``'s fixed splits, in its order; ``key`` names
    what an inner hold-out groups by (rows, GPU generation, model, source)."""
    ms = d.ms
    plans: list[tuple[str, str, list[tuple[str, Idx, Idx]]]] = []
    if "random" in splits:
        order = np.random.default_rng(0).permutation(len(ms))
        test, train = np.sort(order[: len(ms) // 5]), np.sort(order[len(ms) // 5 :])
        plans.append(("row", "random 20% hold-out", [("random", train, test)]))
    if "logo-gen" in splits:
        folds = [(g, np.flatnonzero(d.arch != g), np.flatnonzero(d.arch == g)) for g in GENERATIONS]
        plans.append(("arch", "leave one GPU generation out (cold)", folds))
    if "lomo" in splits:
        counts: dict[str, int] = defaultdict(int)
        for i in all_idx:
            counts[ms[i].model] += 1
        models = sorted(m for m, c in counts.items() if c >= 10)
        folds = [(m, np.flatnonzero(d.model != m), np.flatnonzero(d.model == m)) for m in models]
        plans.append(("model", "leave one model out", folds))
    if "loso" in splits:
        sources = sorted(set(d.source[all_idx].tolist()))
        folds = [(s, np.flatnonzero(d.source != s), np.flatnonzero(d.source == s)) for s in sources]
        plans.append(("source", "leave one source out", folds))
    return plans


def write_arrays(path: Path, d: Data, profiles: list[OperatorProfile | None], rows: Idx) -> None:
    """The MDOT training arrays of ``rows`` (covered rows) into ``path`` (an .npz the trainer reads)."""
    keys: dict[tuple[str, str], int] = {}
    tok_op: list[str] = []
    tok_cls, tok_phase, tok_x, offsets = [], [], [], [0]
    prof_of_row, row_x, place_x = [], [], []
    for i in rows:
        m, prof = d.ms[i], profiles[i]
        assert prof is not None
        key = (m.model, m.dataset)
        if key not in keys:
            keys[key] = len(keys)
            names, c, p, x = encode_profile(prof)
            tok_op += names
            tok_cls.append(c)
            tok_phase.append(p)
            tok_x.append(x)
            offsets.append(offsets[-1] + len(names))
        spec = d.resolved[i].spec
        r, pl = encode_row(m, spec, prof, slowest_link_gbs(d.resolved[i]))
        prof_of_row.append(keys[key])
        row_x.append(r)
        place_x.append(pl)
    vocab = sorted(set(tok_op))
    np.savez(
        path,
        tok_op=np.asarray([vocab.index(o) for o in tok_op]),
        tok_cls=np.concatenate(tok_cls),
        tok_phase=np.concatenate(tok_phase),
        tok_x=np.concatenate(tok_x),
        offsets=np.asarray(offsets),
        n_ops=np.asarray(len(vocab)),
        prof=np.asarray(prof_of_row),
        row_x=np.asarray(row_x),
        place_x=np.asarray(place_x),
        log_t=np.log(d.t_true[rows]),
        token_columns=np.asarray(TOKEN_COLUMNS),
        batch_scaled=np.asarray([TOKEN_COLUMNS.index(c) for c in BATCH_SCALED]),
        row_columns=np.asarray(ROW_COLUMNS),
    )


def run_trainer(arrays: Path, folds_path: Path, out: Path, steps: int, seed: int) -> dict[str, object]:
    """Train and predict every fold in one ``$PERFSCHED_TORCH_PYTHON`` subprocess; its report."""
    python = os.environ.get("PERFSCHED_TORCH_PYTHON", "/usr/bin/python3")
    cmd = [
        python,
        str(TRAINER),
        str(arrays),
        str(folds_path),
        str(out),
        "--steps",
        str(steps),
        "--seed",
        str(seed),
    ]
    proc = subprocess.run(cmd, check=False, stdout=sys.stdout, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-1:] or ["(no output)"]
        raise SystemExit(f"mdot_train.py failed (exit {proc.returncode}): {tail[0]}")
    report: dict[str, object] = json.loads(out.with_suffix(".json").read_text())
    return report


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shared", type=Path, default=ROOT.parent / "shared" / "throughput")
    ap.add_argument("--splits", default="random,logo-gen,lomo,loso")
    ap.add_argument("--methods", default="mdot,composed,composed+cal,ours")
    ap.add_argument(
        "--steps", type=int, default=300, help="training steps (the checkpoint is chosen in folds)"
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None, help="write the per-split figures as JSON here")
    args = ap.parse_args(argv)
    methods = args.methods.split(",")
    splits = args.splits.split(",")
    bad = [m for m in methods if m not in ("mdot", "composed", "composed+cal", "ours")]
    if bad:
        ap.error(f"--methods: unknown method {bad[0]!r} (mdot, composed, composed+cal, ours)")
    bad = [s for s in splits if s not in ("random", "logo-gen", "lomo", "loso")]
    if bad:
        ap.error(f"--splits: unknown split {bad[0]!r} (random, logo-gen, lomo, loso)")
    if args.steps < 100:
        ap.error(f"--steps: at least 100, got {args.steps}")
    if not args.shared.is_dir():
        ap.error(f"--shared {args.shared}: not a directory (the throughput tables, ../shared/throughput)")
    t0 = time.time()
    ms = training_table(args.shared, shippable_only=False)
    d = Data(ms, args.shared)
    cache: dict[tuple[str, str], OperatorProfile | None] = {}
    skipped: dict[str, str] = {}
    profiles = [_profile_of(m, cache, skipped) for m in ms]
    covered = np.asarray(
        [
            p is not None and m.tensor_parallel == 1 and m.pipeline_parallel == 1
            for p, m in zip(profiles, ms, strict=True)
        ]
    )
    all_idx = np.flatnonzero(covered)
    print(f"{len(ms)} configurations, {all_idx.size} answered by the operator route (and MDOT)")
    plans = split_plans(d, all_idx, splits)
    # Every fold's train/test rows as positions in ``all_idx`` (the arrays the trainer reads).
    pos = np.full(len(ms), -1)
    pos[all_idx] = np.arange(all_idx.size)
    group_cols = {"row": None, "arch": d.arch, "model": d.model, "source": d.source}
    mdot_pred: dict[tuple[str, str], np.ndarray] = {}
    chosen: dict[str, list[str]] = defaultdict(list)
    if "mdot" in methods:
        with tempfile.TemporaryDirectory(prefix="mdot-") as tmp:
            arrays, folds_path, out = (
                Path(tmp) / "arrays.npz",
                Path(tmp) / "folds.npz",
                Path(tmp) / "pred.npz",
            )
            write_arrays(arrays, d, profiles, all_idx)
            fold_arrays: dict[str, np.ndarray] = {}
            names = []
            for key, title, folds in plans:
                col = group_cols[key]
                for label, train, test in folds:
                    train, test = train[covered[train]], test[covered[test]]
                    if test.size == 0:
                        continue
                    k = len(names)
                    names.append(f"{title}|{label}")
                    fold_arrays[f"train_{k}"] = pos[train]
                    fold_arrays[f"test_{k}"] = pos[test]
                    groups = (
                        np.arange(train.size)
                        if col is None
                        else np.unique(col[train], return_inverse=True)[1]
                    )
                    fold_arrays[f"group_{k}"] = groups
            np.savez(folds_path, names=np.asarray(names), **fold_arrays)
            report = run_trainer(arrays, folds_path, out, args.steps, args.seed)
            pred = np.load(out)
            for k, name in enumerate(names):
                title, label = name.split("|", 1)
                mdot_pred[(title, label)] = np.exp(pred[f"pred_{k}"])
                hp = report["chosen"][k]  # type: ignore[index]
                chosen[title].append(f"{label}: {hp}")
    composers: dict[str, Composer] = {}
    t_cold: dict[float, np.ndarray] = {}
    per_gen: dict[str, dict[float, np.ndarray]] = {}
    if "composed" in methods or "composed+cal" in methods:
        hosts = HOSTS if "composed+cal" in methods else (0.0,)
        composers["cold"] = Composer(d, profiles, default_cost_model())
        t_cold = {h: composers["cold"].times(all_idx, h) for h in hosts}
        kernel_rows = read_kernel_rows()
        for gen in GENERATIONS:
            comp = Composer(d, profiles, fit_opcost([r for r in kernel_rows if r.spec.architecture != gen]))
            held = all_idx[d.arch[all_idx] == gen]
            per_gen[gen] = {}
            for h in hosts:
                t = t_cold[h].copy()
                t[held] = comp.times(held, h)[held]
                per_gen[gen][h] = t
    results: dict[str, object] = {}
    for _, title, folds in plans:
        print(f"\n== {title}: MRE (median)  " + "  ".join(f"{m:>20}" for m in methods))
        pooled: dict[str, list[np.ndarray]] = defaultdict(list)
        tests: list[Idx] = []
        fold_out: dict[str, object] = {}
        for label, train, test in folds:
            train_all, train, test = train, train[covered[train]], test[covered[test]]
            if test.size == 0:
                continue
            t_comp = per_gen.get(label, t_cold)
            cells = []
            for meth in methods:
                if meth == "mdot":
                    pred = mdot_pred[(title, label)]
                elif meth == "composed":
                    pred = t_comp[0.0][test]
                elif meth == "composed+cal":
                    _, apply = _calibrated(d, train, t_comp)
                    pred = apply(test)
                else:
                    pred = fit_ours(d, train_all)(test)
                e = rel_err(pred, d.t_true[test])
                pooled[meth].append(e)
                cells.append(summarise(e))
            tests.append(test)
            fold_out[label] = {m: _stats(pooled[m][-1]) for m in methods} | {"n": int(test.size)}
            print(f"  {label:<28} n={len(test):<6}" + "  ".join(f"{c:>20}" for c in cells), flush=True)
        if not tests:
            continue
        allt = np.concatenate(tests)
        errs = {meth: np.concatenate(v) for meth, v in pooled.items()}
        print(f"  {'pooled':<28} n={allt.size:<6}" + "  ".join(f"{summarise(errs[m]):>20}" for m in methods))
        breakdown: dict[str, object] = {}
        keys = {
            "precision": np.asarray([ms[i].precision for i in allt]),
            "GPUs": np.asarray([_band(ms[i]) for i in allt]),
            "source": d.source[allt],
        }
        for what, col in keys.items():
            for v in sorted(set(col.tolist())):
                k = col == v
                breakdown[f"{what} {v}"] = {m: _stats(errs[m][k]) for m in methods} | {"n": int(k.sum())}
                print(
                    f"    {what} {v:<21} n={int(k.sum()):<6}"
                    + "  ".join(f"{summarise(errs[m][k]):>20}" for m in methods)
                )
        if chosen[title]:
            print("    mdot readout and steps chosen in the folds: " + ", ".join(chosen[title]))
        results[title] = {
            "folds": fold_out,
            "pooled": {m: _stats(errs[m]) for m in methods} | {"n": int(allt.size)},
            "breakdown": breakdown,
            "mdot_chosen": chosen[title],
        }
    print(f"\n({time.time() - t0:.0f} s)")
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=1) + "\n")
    return 0


def _stats(e: np.ndarray) -> dict[str, float]:
    e = e[np.isfinite(e)]
    if e.size == 0:
        return {}
    return {"mre": round(float(e.mean()), 6), "p50": round(float(np.median(e)), 6)}


if __name__ == "__main__":
    sys.exit(main())
