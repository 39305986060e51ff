"""Does throughput per sample fall near a GPU's memory limit? The measured batch sweeps' answer.

Reads the benchmark's table (``perfmodel.train.training_table`` with the unshipped sources, as
``bench/perfmodel_accuracy.py`` does) and takes every one-GPU batch sweep of the scheduler papers' sources
(Zeus, Pollux/Sia, Gavel/Shockwave) that measured a model on GPUs of different memory sizes. Prints:

1. Per model and GPU: the GPU's memory, the per-GPU batch of the sweep's fastest row (samples/s per GPU),
   its largest batch and that batch's speed relative to the fastest, and the speed at the largest batch
   every GPU of the model ran. Zeus swept each model up to the largest batch its GPU held, so its largest
   batches sit at the memory limit; if memory pressure slowed the largest batches, the fall would start
   at a batch that grows with the GPU's memory.
2. A like-for-like test of the two explanations, per (source, model, dataset):
   ``log speed = a_GPU + log(b / (b + h)) - c * max(0, log(x / x0))`` (a saturating rise to the GPU's
   speed, then a fall beyond a knee), with ``x`` = the per-GPU batch ``b`` (one knee for the model on
   every GPU) or ``x`` = ``b`` / the GPU's memory in GiB (the knee at one memory fraction); ``h``, ``x0`` on
   a grid, ``a`` and ``c >= 0`` by least squares; the root-mean-square log error of each, and pooled.

Run from the repository root: ``python bench/memory_knee.py [--shared ../shared/throughput]``.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root: this file's sibling bench

from perfmodel.gpus import gpu_spec, spec_for_product
from perfmodel.measurements import Measurement
from perfmodel.train import training_table

ROOT = Path(__file__).resolve().parent.parent
FAMILIES = {
    "zeus": "zeus",
    "pollux_aws": "pollux/sia",
    "sia_azure": "pollux/sia",
    "sia_quad": "pollux/sia",
    "sia_rtx": "pollux/sia",
    "gavel": "gavel",
    "shockwave": "gavel",
}

Curve = dict[int, float]  # per-GPU batch -> samples/s per GPU


def sweeps(ms: Sequence[Measurement]) -> dict[tuple[str, str, str], dict[tuple[str, float], Curve]]:
    """One-GPU sweeps by (source family, model, dataset), then by (GPU, memory GiB). A row merged from
    several sources (the same configuration measured by each) counts for each one's family."""
    out: dict[tuple[str, str, str], dict[tuple[str, float], Curve]] = defaultdict(lambda: defaultdict(dict))
    for m in ms:
        if m.num_gpus != 1 or not m.data_parallel:
            continue
        spec = spec_for_product(m.gpu_product) if m.gpu_product else gpu_spec(m.gpu_type)
        assert spec is not None
        for family in {FAMILIES[s] for s in m.source.split("+") if s in FAMILIES}:
            out[(family, m.model, m.dataset)][(m.gpu_type, spec.memory_gib)][m.batch_size] = m.samples_per_s
    return out


def knee_fit(curves: dict[tuple[str, float], Curve], by_memory: bool) -> tuple[float, int]:
    """(sum of squared log errors, rows) of the rise-then-knee model over all GPUs of one model."""
    rows = [(g, b, math.log(s), key[1]) for g, (key, c) in enumerate(curves.items()) for b, s in c.items()]
    n_gpus = len(curves)
    y = np.array([r[2] for r in rows])
    b = np.array([float(r[1]) for r in rows])
    x = b / np.array([r[3] for r in rows]) if by_memory else b
    dummies = np.zeros((len(rows), n_gpus))
    dummies[np.arange(len(rows)), [r[0] for r in rows]] = 1.0
    best = math.inf
    for h in np.geomspace(b.min() / 8.0, b.max() * 2.0, 25):
        target = y - np.log(b / (b + h))
        for x0 in np.geomspace(x.min(), x.max(), 30):
            design = np.column_stack([dummies, -np.maximum(0.0, np.log(x / x0))])
            coef = np.linalg.lstsq(design, target, rcond=None)[0]
            if coef[-1] < 0.0:  # a rise beyond the knee is no fall: the knee term is left out
                design = dummies
                coef = np.linalg.lstsq(design, target, rcond=None)[0]
            r = target - design @ coef
            best = min(best, float(r @ r))
    return best, len(rows)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shared", type=Path, default=ROOT.parent / "shared" / "throughput")
    args = ap.parse_args(argv)
    if not args.shared.is_dir():
        ap.error(f"--shared {args.shared}: not a directory (the throughput tables, ../shared/throughput)")
    by_model = sweeps(training_table(args.shared, shippable_only=False))
    totals = {False: 0.0, True: 0.0}
    n_total = 0
    print("source      model / dataset: GPU (GiB): fastest at batch b*, largest batch B: speed at B / at b*")
    for (family, model, dataset), curves in sorted(by_model.items()):
        curves = {k: c for k, c in curves.items() if len(c) >= 4}
        if len({k[1] for k in curves}) < 2:
            continue
        common = min(max(c) for c in curves.values())
        parts = []
        for (gpu, mem), c in sorted(curves.items(), key=lambda kv: kv[0][1]):
            peak_b = max(c, key=lambda k: c[k])
            top = max(c)
            at_common = c.get(common)
            shared = f", at {common} {at_common / c[peak_b]:.2f}" if at_common and top != common else ""
            parts.append(f"{gpu} ({mem:g}): b*={peak_b} B={top} {c[top] / c[peak_b]:.2f}{shared}")
        print(f"{family:<11} {model} / {dataset}: " + "; ".join(parts))
        fits = {flag: knee_fit(curves, flag) for flag in (False, True)}
        n = fits[False][1]
        n_total += n
        for flag in (False, True):
            totals[flag] += fits[flag][0]
        print(
            f"{'':<11}   knee in the batch: rms {math.sqrt(fits[False][0] / n):.3f}; in batch / memory: "
            f"rms {math.sqrt(fits[True][0] / n):.3f} ({n} rows)"
        )
    if n_total:
        print(
            f"pooled over {n_total} rows: knee in the batch rms {math.sqrt(totals[False] / n_total):.3f}, "
            f"in batch / memory rms {math.sqrt(totals[True] / n_total):.3f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
