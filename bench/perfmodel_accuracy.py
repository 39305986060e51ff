"""Accuracy of the throughput predictor against measured tables, with baselines in the same run.

Data: every row ``perfmodel.train.training_table`` reads from ``../shared/throughput`` -- the tidy
scheduler-paper tables (Gavel, Shockwave, Pollux/Sia, ElasticFlow, Zeus) and the public extracts
(NVIDIA DeepLearningExamples, MLPerf Training, llm-foundry, Megatron-Bridge, NeuSight), including rows
that are not shipped for licence reasons (the benchmark only reads them). Each split trains fresh models
on its training part only:

- ``random``: random 20% hold-out of configurations (seeded);
- ``logo-gen``: leave one GPU generation out -- no Ampere row of any source in training, test on every
  Ampere row; the same for Hopper. Cold, then after k = 1, 2, 3 observed configurations per (model, GPU
  type) of the held-out generation have gone through ``perfmodel.online.OnlineCorrector`` (drawn at
  random, seeded; scored on the remaining rows only). A "model" here is the job a user runs: the model
  at its precision and software stack (BERT-large in MLPerf code and in plain PyTorch fp32 are two);
- ``lomo``: leave one model out (each model with at least 10 rows);
- every split's errors are also broken down per source.

Methods: ``ours`` = the shipped method as served by ``Predictor.predict`` (fitted physics x XGBoost
corrections + guards + in-node envelope, as ``Predictor.load`` builds it; ``--anchors`` adds the
measured anchors);
``physics`` = the fitted scaling model alone; ``xgb-plain`` = one XGBoost on the same features
predicting log time directly; ``spec-ratio`` = the nearest measured configuration of the same model (any
GPU, same precision where there is one) scaled linearly in GPU count and by the GPUs' peak FLOP/s (at
the job's precision) and memory-bandwidth ratios (Habitat-style; it cannot predict a model it never
saw). Errors are relative errors of throughput: MRE = mean, p50 median. Rows of zoo LLMs
are asked as the LLM jobs a user submits (``LLMJobFeatures`` with their sequence length and sharding;
``train.rows_of``; no micro-batch or activation checkpointing, which the tables do not give), and
``Predictor.predict`` answers them with ``perfmodel.llm``: every split also prints the learned-model
rows and the perfmodel.llm rows apart.

Run: ``nice python bench/perfmodel_accuracy.py [--shared ../shared/throughput] [--quick]
[--splits random,logo-gen,lomo]``.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from perfmodel.anchor import Anchors
from perfmodel.features import design_of, resolve
from perfmodel.gpus import spec_ratio
from perfmodel.llm import is_llm_job
from perfmodel.measurements import Measurement
from perfmodel.online import OnlineCorrector
from perfmodel.predictor import MeasuredInNode
from perfmodel.train import DEFAULT_ROUNDS, fit, fit_forest, fit_physics, rows_of, training_table

ROOT = Path(__file__).resolve().parents[1]
# ``--anchors``: serve 'ours' with the measured anchors (``Predictor.load(anchors=True)``).
ANCHORS = False
# The online correction's per-GPU-type level: the default first, then the same-run baselines.
ONLINE_TRENDS = ("structural", "split")

Idx = np.ndarray
Method = Callable[["Data", Idx], Callable[[Idx], np.ndarray]]


class Data:
    def __init__(self, ms: list[Measurement]) -> None:
        self.ms = ms
        self.rows = rows_of(ms)
        self.resolved = [resolve(j, h) for j, h in self.rows]
        self.t_true = np.asarray([1.0 / m.iters_per_s for m in ms])
        self.batch = np.asarray([float(m.batch_size) for m in ms])
        self.arch = np.asarray([r.spec.architecture for r in self.resolved])
        self.source = np.asarray([m.source.split("+")[0] for m in ms])
        self.model = np.asarray([m.model for m in ms])
        # Rows ``Predictor.predict`` hands to perfmodel.llm (LLM jobs: their sequence length and sharding).
        self.llm = np.asarray([is_llm_job(j) for j, _ in self.rows])


def rel_err(pred_t: np.ndarray, true_t: np.ndarray) -> np.ndarray:
    """Relative error of throughput (1/time)."""
    out: np.ndarray = np.abs(true_t / pred_t - 1.0)
    return out


def fit_ours(d: Data, train: Idx) -> Callable[[Idx], np.ndarray]:
    ms = [d.ms[i] for i in train]
    p = fit(ms)
    # As ``Predictor.load`` builds it from the shipped table: in-node curves (anchors only when asked).
    p.anchors = Anchors(ms) if ANCHORS else None
    p.measured = MeasuredInNode(ms)
    p.clear_cache()

    def predict(test: Idx) -> np.ndarray:
        s = np.asarray(p.predict([d.rows[i] for i in test]).samples_per_s)
        out: np.ndarray = d.batch[test] / s
        return out

    predict.predictor = p  # type: ignore[attr-defined]
    return predict


def fit_physics_only(d: Data, train: Idx) -> Callable[[Idx], np.ndarray]:
    phys = fit_physics([d.ms[i] for i in train], [d.resolved[i] for i in train])

    def predict(test: Idx) -> np.ndarray:
        dd = design_of([d.resolved[i] for i in test], phys)
        out: np.ndarray = dd.compute + dd.sync
        return out

    return predict


def fit_plain(d: Data, train: Idx) -> Callable[[Idx], np.ndarray]:
    dd = design_of(d.resolved)
    forest, _ = fit_forest(dd.x[train], np.log(d.t_true[train]), rounds=DEFAULT_ROUNDS)

    def predict(test: Idx) -> np.ndarray:
        out: np.ndarray = np.exp(forest.predict(dd.x[test]))
        return out

    return predict


def fit_spec_ratio(d: Data, train: Idx) -> Callable[[Idx], np.ndarray]:
    by_model: dict[str, list[int]] = defaultdict(list)
    for i in train:
        by_model[d.ms[i].model].append(int(i))

    def predict(test: Idx) -> np.ndarray:
        out = np.full(len(test), np.nan)
        for k, i in enumerate(test):
            q = d.ms[i]
            cands = by_model.get(q.model)
            if not cands:
                continue

            def dist(j: int, q: Measurement = q) -> float:
                m = d.ms[j]
                return (
                    abs(math.log(m.local_batch_size / q.local_batch_size))
                    + abs(math.log(m.num_gpus / q.num_gpus))
                    + (0.0 if m.precision == q.precision else 2.0)
                    + (0.0 if m.stack == q.stack else 1.0)
                )

            j = min(cands, key=dist)
            ref = d.resolved[j].spec
            tgt = d.resolved[i].spec
            ratio = spec_ratio(ref, tgt, q.precision)
            per_sample_t = d.t_true[j] / d.ms[j].batch_size * d.ms[j].num_gpus
            out[k] = per_sample_t * q.batch_size / q.num_gpus / ratio
        return out

    return predict


METHODS: dict[str, Method] = {
    "ours": fit_ours,
    "physics": fit_physics_only,
    "xgb-plain": fit_plain,
    "spec-ratio": fit_spec_ratio,
}


def summarise(e: np.ndarray) -> str:
    e = e[np.isfinite(e)]
    if e.size == 0:
        return "      —        "
    return f"{100 * e.mean():6.1f}% ({100 * np.median(e):5.1f}%)"


def run_split(
    name: str, d: Data, splits: Sequence[tuple[str, Idx, Idx]], methods: Sequence[str]
) -> dict[str, dict[str, np.ndarray]]:
    """Every method on every (label, train, test) split; prints MRE (median) per split and pooled."""
    print(f"\n== {name}: MRE (median)  " + "  ".join(f"{m:>20}" for m in methods))
    pooled: dict[str, list[np.ndarray]] = defaultdict(list)
    tests: list[Idx] = []
    for label, train, test in splits:
        cells = []
        for m in methods:
            pred = METHODS[m](d, train)(test)
            e = rel_err(pred, d.t_true[test])
            pooled[m].append(e)
            cells.append(summarise(e))
        tests.append(test)
        print(f"  {label:<28} n={len(test):<6}" + "  ".join(f"{c:>20}" for c in cells))
    allt = np.concatenate(tests)
    out = {m: {"all": np.concatenate(v)} for m, v in pooled.items()}
    print(
        f"  {'pooled':<28} n={allt.size:<6}" + "  ".join(f"{summarise(out[m]['all']):>20}" for m in methods)
    )
    for src in sorted(set(d.source[allt].tolist())):
        k = d.source[allt] == src
        print(
            f"    source {src:<19} n={int(k.sum()):<6}"
            + "  ".join(f"{summarise(out[m]['all'][k]):>20}" for m in methods)
        )
    for label, want in (("learned-model rows", False), ("perfmodel.llm rows", True)):
        k = d.llm[allt] == want
        print(
            f"    {label:<26} n={int(k.sum()):<6}"
            + "  ".join(f"{summarise(out[m]['all'][k]):>20}" for m in methods)
        )
    return out


def logo_generation(d: Data, methods: Sequence[str], ks: Sequence[int]) -> None:
    """Leave one GPU generation out (Ampere, Hopper), cold and after k observed configurations."""
    for arch in ("Ampere", "Hopper"):
        test = np.flatnonzero(d.arch == arch)
        train = np.flatnonzero(d.arch != arch)
        run_split(f"leave-one-generation-out: {arch}", d, [(arch, train, test)], methods)
        ours = fit_ours(d, train)
        p = ours.predictor  # type: ignore[attr-defined]
        for k, trend in ((k, t) for k in ks for t in ONLINE_TRENDS):
            rng = np.random.default_rng(0)
            corr = OnlineCorrector(p, trend=trend)
            groups: dict[tuple[str, str, str, str], list[int]] = defaultdict(list)
            for i in test:
                m = d.ms[i]
                groups[(m.model, m.precision, m.stack, m.gpu_type)].append(int(i))
            observed: set[int] = set()
            for idxs in groups.values():
                for i in rng.choice(idxs, size=min(k, len(idxs)), replace=False):
                    observed.add(int(i))
                    job, hw = d.rows[i]
                    corr.observe(job, hw, d.ms[i].samples_per_s)
            rest = np.asarray([i for i in test if int(i) not in observed])
            pred = np.asarray(corr.predict([d.rows[i] for i in rest]).samples_per_s)
            e = rel_err(d.batch[rest] / pred, d.t_true[rest])
            cold = rel_err(ours(rest), d.t_true[rest])
            spec = rel_err(fit_spec_ratio(d, np.asarray(sorted(observed)))(rest), d.t_true[rest])
            print(
                f"  {arch} + {k} observed per (model, GPU type), online trend {trend}: n={rest.size:<5}"
                f" ours {summarise(e)}"
                f"   cold on the same rows {summarise(cold)}   spec-ratio from the observed {summarise(spec)}"
            )
            for src in sorted(set(d.source[rest].tolist())):
                kk = d.source[rest] == src
                print(f"    source {src:<19} n={int(kk.sum()):<6} ours {summarise(e[kk])}")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shared", type=Path, default=ROOT.parent / "shared" / "throughput")
    ap.add_argument("--quick", action="store_true", help="fewer models in leave-one-model-out")
    ap.add_argument("--splits", default="random,logo-gen,lomo")
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--anchors", action="store_true", help="'ours' with the measured anchors")
    args = ap.parse_args(argv)
    global ANCHORS
    ANCHORS = args.anchors
    if not args.shared.is_dir():
        shared = Path("/work/shared/throughput")
        args.shared = shared if shared.is_dir() else args.shared
    t0 = time.time()
    ms = training_table(args.shared, shippable_only=False)
    d = Data(ms)
    methods = args.methods.split(",")
    splits = args.splits.split(",")
    print(f"{len(ms)} configurations; sources: " + ", ".join(sorted(set(d.source.tolist()))))
    if "random" in splits:
        rng = np.random.default_rng(0)
        order = rng.permutation(len(ms))
        test, train = np.sort(order[: len(ms) // 5]), np.sort(order[len(ms) // 5 :])
        run_split("random 20% hold-out", d, [("random", train, test)], methods)
    if "logo-gen" in splits:
        logo_generation(d, methods, (1, 2, 3))
    if "lomo" in splits:
        counts: dict[str, int] = defaultdict(int)
        for m in ms:
            counts[m.model] += 1
        models = sorted(m for m, c in counts.items() if c >= 10)
        if args.quick:
            models = models[:: max(1, len(models) // 8)]
        lomo = [(m, np.flatnonzero(d.model != m), np.flatnonzero(d.model == m)) for m in models]
        run_split("leave-one-model-out", d, lomo, methods)
    print(f"\n({time.time() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
