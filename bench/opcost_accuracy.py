"""Held-out error of the per-operator cost model (``perfmodel.opcost``) on the shipped kernel table.

Splits are fixed before fitting: leave-one-GPU-type-out (every type in the table; all its variants held
out together), leave-one-generation-out (Ampere, Ada Lovelace, Hopper) and a random 20% hold-out of
(GPU, operator, shape) rows (seed 0). Each fold fits the cost model on its training rows only and reports
the mean and median relative error |predicted - measured| / measured per operator class on its held-out
rows, beside the plain datasheet roofline (no learned utilisation) for scale.

    python bench/opcost_accuracy.py                 # all splits
    python bench/opcost_accuracy.py --split gpu     # one family: gpu | generation | random
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from perfmodel.kernels import read_kernel_rows
from perfmodel.opcost import MODEL_OF, KernelRow, features, fit


def _errors(model_rows: Sequence[KernelRow], test: Sequence[KernelRow]) -> dict[str, dict[str, float]]:
    model = fit(model_rows)
    per: dict[str, list[float]] = defaultdict(list)
    roof: dict[str, list[float]] = defaultdict(list)
    for r in test:
        cls = MODEL_OF[r.kernel.op_class]
        if cls not in model.classes:
            continue
        pred = model.kernel_time(r.kernel, r.spec, source=r.source)
        per[cls].append(abs(pred - r.seconds) / r.seconds)
        per["all"].append(per[cls][-1])
        t_roof, _ = features(r.kernel, r.spec)
        roof[cls].append(abs(t_roof - r.seconds) / r.seconds)
        roof["all"].append(roof[cls][-1])
    return {
        cls: {
            "n": len(v),
            "mre": statistics.fmean(v),
            "median": statistics.median(v),
            "roofline_mre": statistics.fmean(roof[cls]),
        }
        for cls, v in per.items()
    }


def _folds(rows: Sequence[KernelRow], family: str) -> list[tuple[str, list[int]]]:
    if family == "gpu":
        keys = sorted({r.spec.gpu_type for r in rows})
        return [(k, [i for i, r in enumerate(rows) if r.spec.gpu_type == k]) for k in keys]
    if family == "generation":
        gens = ("Ampere", "Ada Lovelace", "Hopper")
        return [(g, [i for i, r in enumerate(rows) if r.spec.architecture == g]) for g in gens]
    rng = random.Random(0)
    idx = [i for i in range(len(rows)) if rng.random() < 0.2]
    return [("random-20%", idx)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--split", choices=("gpu", "generation", "random", "all"), default="all")
    ap.add_argument("--json", help="also write the figures to this file")
    a = ap.parse_args(argv)
    rows = read_kernel_rows()
    families = ("gpu", "generation", "random") if a.split == "all" else (a.split,)
    out: dict[str, dict[str, dict[str, dict[str, float]]]] = {}
    t0 = time.perf_counter()
    for fam in families:
        out[fam] = {}
        for name, test_idx in _folds(rows, fam):
            held = set(test_idx)
            train = [r for i, r in enumerate(rows) if i not in held]
            test = [rows[i] for i in test_idx]
            res = _errors(train, test)
            out[fam][name] = res
            for cls in sorted(res):
                e = res[cls]
                print(
                    f"{fam:10s} {name:13s} {cls:14s} n={int(e['n']):6d}  MRE {e['mre']:6.1%}  "
                    f"median {e['median']:6.1%}  (roofline alone {e['roofline_mre']:6.1%})"
                )
    print(f"[{time.perf_counter() - t0:.0f} s]", file=sys.stderr)
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
