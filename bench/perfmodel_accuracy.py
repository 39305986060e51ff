"""Accuracy of the throughput predictor against measured tables, with baselines in the same run.

Data: every row ``perfmodel.train.training_table`` reads from ``../shared/throughput`` -- the tidy
scheduler-paper tables (Gavel, Shockwave, Pollux/Sia, ElasticFlow, Zeus) and the public extracts
(NVIDIA DeepLearningExamples, MLPerf Training, llm-foundry, Megatron-Bridge, NeuSight), including rows
that are not shipped for licence reasons (the benchmark only reads them). Each split trains fresh models
on its training part only:

- ``random``: random 20% hold-out of configurations (seeded; ``--random-draws N`` pools N draws);
- ``logo-gen``: leave one GPU generation out -- no Ampere row of any source in training, test on every
  Ampere row; the same for Hopper. Cold, then after k = 1, 2, 3 observed configurations per (model, GPU
  type) of the held-out generation have gone through ``perfmodel.online.OnlineCorrector``: per draw
  (``--draws``, default 10, seeded) one random order of each (model, GPU type)'s rows, its first k
  observed (nested: k + 1 sees what k saw and one more), errors pooled over the draws. Scored on the
  rest, and on the same rows for every k (those past the first 3 of each order: a group with 2 rows
  leaves the rest at k = 2, which moves the plain figure between k). A "model" here is the job a user
  runs: the model at its precision and software stack (BERT-large in MLPerf code and in plain PyTorch
  fp32 are two). Last, a model new to its GPU type: per draw half the groups observed twice, the other
  half scored (only the GPU-type levels of the correction reach them). ``--breakdown K``: where the error
  after K observed lies (per GPU-count band, source, precision and group, with its share of the summed
  error, the cold bias beside the corrected one and what the correction moved) and what no per-group
  level can remove (in-sample floors of a per-group fit, over all rows and per group, and the rows
  measured twice);
- ``lomo``: leave one model out (each model with at least 10 rows; ``--quick``: every other one), then
  per held-out model its bias, its share of the pooled error and of its own error across nodes, the
  (source, GPU type) cells carrying it, and its family's arithmetic intensity and the step overhead as
  the scaling model fits them without it, beside the fit on every row;
- ``loso``: leave one source out (each public source and each research cluster in turn);
- every split's errors are also broken down per source, per precision (and software stack) and per
  GPU-count class (1 GPU, 2+ GPUs in one node, across nodes); the generation split also pools its
  held-out generations' cold errors per precision.

Methods: ``ours`` = the shipped method as served by ``Predictor.predict`` (fitted physics x XGBoost
corrections + guards + in-node envelope, as ``Predictor.load`` builds it, with the measured anchors unless
``--no-anchors``; perfmodel.llm's constants refitted on the split's llm-foundry training rows, ``fit_llm``);
``ours`` includes the split correction across nodes for models the training rows never measured
(``train.fit_model(sync_split=True)``: the correction forests' answer for a cross-node row's 1-GPU twin
on its compute time, a bounded sync forest on its all-reduce; decision 0151) as ``train`` ships it;
``ours-whole`` = the whole-step factor on every row (the predictor before it);
``ours-syncsplit-placement`` = ``ours`` with a sync forest that reads only the placement and the
modelled all-reduce (neither is in the default methods);
``physics`` = the fitted scaling model alone; ``xgb-plain`` = one XGBoost on the same features
predicting log time directly; ``spec-ratio`` = the nearest measured configuration of the same model (any
GPU, same precision and GPU type where there is one) scaled by the work per sample (FLOPs per sample: an
llm-foundry model's rows run 512- to 65,536-token sequences), linearly in per-GPU batch and GPU count, and
by the GPUs' peak FLOP/s (each row at its own precision) and memory-bandwidth ratios (Habitat-style; it
cannot predict a model it never saw). Without the work per sample it read 600-860% mean error after k
observed: short-sequence rows predicted 65,536-token ones up to 215x too fast. Errors are relative errors of
throughput: MRE = mean, p50 median. Rows of zoo LLMs are asked as the LLM jobs a user submits
(``LLMJobFeatures`` with their sequence length and sharding, and the micro-batch and activation
checkpointing where the source states them, llm-foundry's rows; ``train.rows_of``), and
``Predictor.predict`` answers them with ``perfmodel.llm``: every split also prints the learned-model rows
and the perfmodel.llm rows apart.

Development splits (``--dev``): the leave-one-generation-out split on the older generations instead --
Kepler, Pascal, Turing and Volta held out in turn, at most 40 test rows per (model, precision, stack, GPU
type) -- to choose a change on without looking at the Ampere and Hopper figures the targets are set on.

Run: ``nice python bench/perfmodel_accuracy.py [--shared ../shared/throughput] [--quick]
[--splits random,logo-gen,lomo,loso] [--draws 10] [--no-anchors] [--dev] [--breakdown 2]``.
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root: this file's sibling bench

from bench import llm_fit
from perfmodel.anchor import Anchors
from perfmodel.envelope import MeasuredInNode
from perfmodel.features import design_of, resolve
from perfmodel.gpus import GPUSpec
from perfmodel.llm import is_llm_job
from perfmodel.llm_fit import LLMFit
from perfmodel.measurements import Measurement
from perfmodel.online import OnlineCorrector
from perfmodel.scaling import Physics
from perfmodel.train import (
    DEFAULT_ROUNDS,
    PLACEMENT_SYNC_FEATURES,
    SYNC_FEATURES,
    fit,
    fit_forest,
    fit_physics,
    rows_of,
    training_table,
)
from perfmodel.zoo import Family

ROOT = Path(__file__).resolve().parents[1]
# llm-foundry's GPU names -> the measured table's products (``perfmodel.public``).
_FOUNDRY_PRODUCTS = {
    "h100_80gb": "H100-80GB-HBM3",
    "a100_80gb": "A100-SXM4-80GB",
    "a100_40gb": "A100-SXM4-40GB",
}
# Serve 'ours' with the measured anchors, as ``Predictor.load`` does by default (``--no-anchors``: without).
ANCHORS = True
# The online correction's per-GPU-type level: the default first, then the same-run baselines.
ONLINE_TRENDS = ("structural", "split")

Idx = np.ndarray
Method = Callable[["Data", Idx], Callable[[Idx], np.ndarray]]


class Data:
    def __init__(self, ms: list[Measurement], shared: Path) -> None:
        self.ms = ms
        self.shared = shared
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


def fit_llm(d: Data, train: Idx) -> LLMFit:
    """``perfmodel.llm``'s constants refitted (``llm_fit.fit_on``, as ``bench/llm_fit.py`` fits the
    shipped ones) on the llm-foundry BF16 rows of the training part only: the shipped ``llm_fit.FIT`` was
    fitted on all of them, A100 and H100, so a held-out generation's LLM rows would not be held out."""
    keep = {
        (m.model, m.seq_len, m.num_gpus, m.batch_size, m.gpu_product)
        for m in (d.ms[i] for i in train)
        if m.source.split("+")[0] == "llm_foundry"
    }
    path = d.shared / "public" / llm_fit.TABLE
    rows = [
        r
        for r in llm_fit.rows(path)
        if (
            r[0].model.removesuffix("-bench"),
            r[0].sequence_length,
            r[1].num_gpus,
            r[0].batch_size,
            _FOUNDRY_PRODUCTS[r[3]],
        )
        in keep
    ]
    return llm_fit.fit_on(rows)


def fit_ours(
    d: Data, train: Idx, sync_split: bool = True, sync_features: Sequence[str] = SYNC_FEATURES
) -> Callable[[Idx], np.ndarray]:
    ms = [d.ms[i] for i in train]
    p = fit(ms, sync_split=sync_split, sync_features=sync_features)
    p.llm_fit = fit_llm(d, train)
    # As ``Predictor.load`` builds it from the shipped table: in-node curves and anchors.
    p.anchors = Anchors(ms, p.llm_fit) if ANCHORS else None
    p.measured = MeasuredInNode(ms)
    p.clear_cache()

    def predict(test: Idx) -> np.ndarray:
        s = np.asarray(p.predict([d.rows[i] for i in test]).samples_per_s)
        out: np.ndarray = d.batch[test] / s
        return out

    predict.predictor = p  # type: ignore[attr-defined]
    return predict


def fit_ours_whole(d: Data, train: Idx) -> Callable[[Idx], np.ndarray]:
    """'ours' with the whole-step factor on every row (no split correction across nodes)."""
    return fit_ours(d, train, sync_split=False)


def fit_ours_syncsplit_placement(d: Data, train: Idx) -> Callable[[Idx], np.ndarray]:
    """'ours' with a sync forest that reads the placement and the modelled all-reduce only
    (``train.PLACEMENT_SYNC_FEATURES``: nothing that names the model)."""
    return fit_ours(d, train, sync_split=True, sync_features=PLACEMENT_SYNC_FEATURES)


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
    """The nearest measured configuration of the same model, its time per sample scaled by the work per
    sample (sequence length: one llm-foundry model's rows span 0.4-340 samples/s on the same 8 A100s),
    linearly in the per-GPU batch and GPU count, and by the GPUs' (and precisions') spec ratio."""
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

            def dist(j: int, q: Measurement = q, i: int = int(i)) -> float:
                m = d.ms[j]
                return (
                    abs(math.log(m.local_batch_size / q.local_batch_size))
                    + abs(math.log(m.num_gpus / q.num_gpus))
                    + abs(math.log(d.resolved[j].flops_per_sample / d.resolved[i].flops_per_sample))
                    + (0.0 if m.precision == q.precision else 2.0)
                    + (0.0 if m.stack == q.stack else 1.0)
                    + (0.0 if m.gpu_type == q.gpu_type else 1.0)
                )

            j = min(cands, key=dist)
            ratio = _spec_ratio(d.resolved[j].spec, d.ms[j].precision, d.resolved[i].spec, q.precision)
            work = d.resolved[i].flops_per_sample / d.resolved[j].flops_per_sample
            per_sample_t = d.t_true[j] / d.ms[j].batch_size * d.ms[j].num_gpus * work
            out[k] = per_sample_t * q.batch_size / q.num_gpus / ratio
        return out

    return predict


def _spec_ratio(ref: GPUSpec, ref_precision: str, tgt: GPUSpec, precision: str) -> float:
    """``perfmodel.gpus.spec_ratio`` with each side at its own precision (an fp32 row scaled to bf16)."""
    flops = tgt.tflops(precision) / ref.tflops(ref_precision)
    return float(flops**0.5 * (tgt.memory_bandwidth_gbs / ref.memory_bandwidth_gbs) ** 0.5)


METHODS: dict[str, Method] = {
    "ours": fit_ours,
    "ours-whole": fit_ours_whole,
    "ours-syncsplit-placement": fit_ours_syncsplit_placement,
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
    name: str,
    d: Data,
    splits: Sequence[tuple[str, Idx, Idx]],
    methods: Sequence[str],
    kept: dict[str, tuple[np.ndarray, Physics]] | None = None,
) -> dict[str, dict[str, np.ndarray]]:
    """Every method on every (label, train, test) split; prints MRE (median) per split and pooled.
    ``kept``, when given, receives per split label the 'ours' predicted times of its test rows and the
    fitted scaling model's constants of that split."""
    print(f"\n== {name}: MRE (median)  " + "  ".join(f"{m:>20}" for m in methods))
    pooled: dict[str, list[np.ndarray]] = defaultdict(list)
    tests: list[Idx] = []
    for label, train, test in splits:
        cells = []
        for m in methods:
            fitted = METHODS[m](d, train)
            pred = fitted(test)
            if kept is not None and m == "ours":
                kept[label] = (pred, fitted.predictor.model.physics)  # type: ignore[attr-defined]
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
    _precision_lines(d, allt, out, methods)
    for label, want in (("learned-model rows", False), ("perfmodel.llm rows", True)):
        k = d.llm[allt] == want
        print(
            f"    {label:<26} n={int(k.sum()):<6}"
            + "  ".join(f"{summarise(out[m]['all'][k]):>20}" for m in methods)
        )
    # Rows across nodes, where the gradient all-reduce's model matters: by GPU count, and the smaller ones
    # by source (the research tables' 2-64 GPU rows over 10-100 Gb/s networks).
    gpus = np.asarray([d.ms[i].num_gpus for i in allt])
    nodes = np.asarray([d.ms[i].num_nodes for i in allt])
    small, large = (nodes > 1) & (gpus < 256), (nodes > 1) & (gpus >= 256)
    bands = [
        ("1 GPU", gpus == 1),
        ("2+ GPUs in one node", (nodes == 1) & (gpus > 1)),
        ("across nodes", nodes > 1),
        ("multi-node, < 256 GPUs", small),
        ("multi-node, >= 256 GPUs", large),
    ]
    bands += [
        (f"  < 256, {src}", small & (d.source[allt] == src)) for src in sorted(set(d.source[allt].tolist()))
    ]
    for label, k in bands:
        if k.any():
            print(
                f"    {label:<26} n={int(k.sum()):<6}"
                + "  ".join(f"{summarise(out[m]['all'][k]):>20}" for m in methods)
            )
    return out


def _precision_lines(
    d: Data, allt: Idx, out: dict[str, dict[str, np.ndarray]], methods: Sequence[str], indent: str = "    "
) -> None:
    """MRE (median) per precision, and per precision and software stack where a precision has several."""
    prec = np.asarray([d.ms[i].precision for i in allt])
    stack = np.asarray([d.ms[i].stack for i in allt])
    for p in sorted(set(prec.tolist())):
        k = prec == p
        print(
            f"{indent}precision {p:<16} n={int(k.sum()):<6}"
            + "  ".join(f"{summarise(out[m]['all'][k]):>20}" for m in methods)
        )
        stacks = sorted(set(stack[k].tolist()))
        for st in stacks if len(stacks) > 1 else ():
            ks = k & (stack == st)
            print(
                f"{indent}  {p}, {st:<18} n={int(ks.sum()):<6}"
                + "  ".join(f"{summarise(out[m]['all'][ks]):>20}" for m in methods)
            )


# The held-out generations the targets are set on, and the development ones (``--dev``) to choose a change
# on without looking at them: each of the older generations held out in turn.
CHECK_GENERATIONS = ("Ampere", "Hopper")
DEV_GENERATIONS = ("Kepler", "Pascal", "Turing", "Volta")
# Development splits score at most this many rows of each (model, precision, stack, GPU type), so that
# Sia's 4,393 V100 rows (batch x GPU-count sweeps of six models) do not decide the Volta figure.
DEV_GROUP_CAP = 40


def _capped(d: Data, rows: Idx, cap: int, seed: int = 0) -> Idx:
    """At most ``cap`` rows (a seeded random choice) of each (model, precision, stack, GPU type)."""
    groups: dict[tuple[str, str, str, str], list[int]] = defaultdict(list)
    for i in rows:
        m = d.ms[i]
        groups[(m.model, m.precision, m.stack, m.gpu_type)].append(int(i))
    rng = np.random.default_rng(seed)
    keep = [i for _, v in sorted(groups.items()) for i in (v if len(v) <= cap else rng.choice(v, cap, False))]
    return np.asarray(sorted(keep), dtype=int)


def logo_generation(
    d: Data,
    methods: Sequence[str],
    ks: Sequence[int],
    draws: int,
    archs: Sequence[str] = CHECK_GENERATIONS,
    cap: int = 0,
    breakdown: int = 0,
) -> None:
    """Leave one GPU generation out (each of ``archs``), cold and after k observed configurations; with
    ``cap`` > 0 at most ``cap`` test rows per (model, precision, stack, GPU type); with ``breakdown`` =
    k > 0 where the error after k observed lies (``_breakdown``)."""
    cold: dict[str, list[np.ndarray]] = defaultdict(list)
    cold_rows: list[Idx] = []
    for arch in archs:
        test = np.flatnonzero(d.arch == arch)
        if cap:
            test = _capped(d, test, cap)
        train = np.flatnonzero(d.arch != arch)
        res = run_split(f"leave-one-generation-out: {arch}", d, [(arch, train, test)], methods)
        for m in methods:
            cold[m].append(res[m]["all"])
        cold_rows.append(test)
        ours = fit_ours(d, train)
        groups: dict[tuple[str, str, str, str], list[int]] = defaultdict(list)
        for i in test:
            groups[_group(d.ms[i])].append(int(i))
        # One random order of each (model, GPU type)'s rows per draw: k observed = its first k (nested, so
        # k + 1 adds one run to what k saw), scored on the rest; "same rows" scores every k on the rows
        # past the first max(ks) of each order, so the k columns compare like with like.
        orders = []
        for draw in range(draws):
            rng = np.random.default_rng(draw)
            orders.append({g: [int(i) for i in rng.permutation(v)] for g, v in groups.items()})
        print(
            f"  {arch}, k observed per (model, GPU type), {draws} draws pooled: MRE (median) on the rest |"
            f" on the same rows for every k | cold on the rest | spec-ratio from the observed"
        )
        for k, trend in ((k, t) for k in ks for t in ONLINE_TRENDS):
            _observed_k(d, ours, orders, k, max(ks), trend, f"  {arch} + {k}, online trend {trend}:")
        _new_models(d, ours, orders, 2, f"  {arch}, a model not observed on its type (2 of half the others):")
        if breakdown:
            _breakdown(d, ours, orders, breakdown, test, arch)
    # The precision target: every precision's cold error over the held-out generations together.
    print(f"\n== leave-one-generation-out, {' + '.join(archs)} pooled, cold, per precision")
    both = {m: {"all": np.concatenate(v)} for m, v in cold.items()}
    _precision_lines(d, np.concatenate(cold_rows), both, methods, indent="  ")


def _observed_k(
    d: Data,
    ours: Callable[[Idx], np.ndarray],
    orders: Sequence[dict[tuple[str, str, str, str], list[int]]],
    k: int,
    kmax: int,
    trend: str,
    label: str,
) -> None:
    """The online correction after the first ``k`` rows of each group of each draw's ``orders``."""
    e_rest, e_same, e_cold, e_spec, sources = [], [], [], [], []
    for order in orders:
        corr = OnlineCorrector(ours.predictor, trend=trend)  # type: ignore[attr-defined]
        observed = [i for rows in order.values() for i in rows[:k]]
        for i in observed:
            corr.observe(*d.rows[i], d.ms[i].samples_per_s)
        rest = np.asarray(sorted(i for rows in order.values() for i in rows[k:]), dtype=int)
        same = {i for rows in order.values() for i in rows[kmax:]}
        pred = np.asarray(corr.predict([d.rows[i] for i in rest]).samples_per_s)
        e = rel_err(d.batch[rest] / pred, d.t_true[rest])
        e_rest.append(e)
        e_same.append(e[np.asarray([int(i) in same for i in rest], dtype=bool)])
        e_cold.append(rel_err(ours(rest), d.t_true[rest]))
        e_spec.append(rel_err(fit_spec_ratio(d, np.asarray(sorted(observed)))(rest), d.t_true[rest]))
        sources.append(d.source[rest])
    e, src = np.concatenate(e_rest), np.concatenate(sources)
    print(
        f"{label:<38} n={e.size // len(orders):<4} {summarise(e)} | {summarise(np.concatenate(e_same))} |"
        f" {summarise(np.concatenate(e_cold))} | {summarise(np.concatenate(e_spec))}"
    )
    for s in sorted(set(src.tolist())):
        print(f"    source {s:<19} n={int((src == s).sum()) // len(orders):<6} ours {summarise(e[src == s])}")


# GPU-count bands of the breakdown: (label, fewest GPUs, most GPUs, multi-node).
_BANDS = (
    ("1 GPU", 1, 1, False),
    ("one node", 2, 1 << 30, False),
    ("multi-node < 256 GPUs", 1, 255, True),
    ("multi-node >= 256 GPUs", 256, 1 << 30, True),
)


def _band(m: Measurement) -> str:
    return next(b for b, lo, hi, multi in _BANDS if lo <= m.num_gpus <= hi and (m.num_nodes > 1) == multi)


def _breakdown(
    d: Data,
    ours: Callable[[Idx], np.ndarray],
    orders: Sequence[dict[tuple[str, str, str, str], list[int]]],
    k: int,
    test: Idx,
    arch: str,
) -> None:
    """Where the error after ``k`` observed configurations per (model, GPU type) lies (the default
    correction, the draws of ``orders``): within or beyond the observed runs of the row's group (per-GPU
    batch, GPU count and work per sample all between those of the observed runs, or not), per GPU-count
    band, per source, per precision and per (model, precision, stack, GPU type) group, each with its
    rows per draw, MRE, mean log(measured / predicted) (its bias), the cold MRE and bias on the same
    rows, what the correction did to them (``moved``: the mean and mean absolute log of corrected /
    cold throughput) and its share of the summed error; then what no correction of a group's level and
    slopes can remove, on all of the held-out rows: the floors of a per-group fit to the cold log
    errors, made with every row of the group (in sample): a constant, and a constant plus slopes in log
    per-GPU batch, log GPUs and log work per sample (the online model level's regressors), over all
    rows and for each group listed; and the repeat noise: rows of one configuration (group, GPUs,
    nodes, global batch, work per sample) measured more than once, each against their geometric
    mean."""
    err, logres, cold, cold_log, rows, inside = [], [], [], [], [], []
    for order in orders:
        corr = OnlineCorrector(ours.predictor)  # type: ignore[attr-defined]
        for i in (i for v in order.values() for i in v[:k]):
            corr.observe(*d.rows[i], d.ms[i].samples_per_s)
        rest = np.asarray(sorted(i for v in order.values() for i in v[k:]), dtype=int)
        pred_t = d.batch[rest] / np.asarray(corr.predict([d.rows[i] for i in rest]).samples_per_s)
        err.append(rel_err(pred_t, d.t_true[rest]))
        logres.append(np.log(pred_t / d.t_true[rest]))
        cold_t = ours(rest)
        cold.append(rel_err(cold_t, d.t_true[rest]))
        cold_log.append(np.log(cold_t / d.t_true[rest]))
        rows.append(rest)
        # Whether a row lies within its group's observed runs in every regressor of the model level.
        seen = {g: np.asarray([_where(d, i) for i in v[:k]]) for g, v in order.items() if v[:k]}
        inside.append(
            np.asarray(
                [
                    bool(
                        np.all(
                            (seen[_group(d.ms[i])].min(0) - 1e-9 <= w)
                            & (w <= seen[_group(d.ms[i])].max(0) + 1e-9)
                        )
                    )
                    for i in rest
                    for w in (np.asarray(_where(d, i)),)
                ],
                dtype=bool,
            )
        )
    e, lr, c, clr, idx, ins = (np.concatenate(v) for v in (err, logres, cold, cold_log, rows, inside))
    moved = clr - lr  # log(corrected / cold throughput)
    n, total = len(orders), float(e.sum())
    big = e > 0.3
    print(
        f"  {arch} + {k}, breakdown: MRE {100 * e.mean():.1f}%; {100 * big.mean():.0f}% of the rows are > 30%"
        f" off and carry {100 * e[big].sum() / total:.0f}% of the error (capped at 30%:"
        f" {100 * np.minimum(e, 0.3).mean():.1f}%)"
    )

    def line(label: str, k_: np.ndarray, extra: str = "") -> str:
        return (
            f"    {label:<40} n={int(k_.sum()) // n:<4} {100 * e[k_].mean():5.1f}% bias {lr[k_].mean():+.2f}"
            f" | cold {100 * c[k_].mean():5.1f}% bias {clr[k_].mean():+.2f} | moved {moved[k_].mean():+.2f}"
            f" (abs {np.abs(moved[k_]).mean():.2f}) | share {100 * e[k_].sum() / total:4.1f}%{extra}"
        )

    print(line("within the observed batch, GPUs and work", ins))
    print(line("beyond them in one at least", ~ins))
    band = np.asarray([_band(d.ms[i]) for i in idx])
    for b, *_ in _BANDS:
        if (band == b).any():
            print(line(b, band == b))
    for label, of in (("source", d.source[idx]), ("precision", np.asarray([d.ms[i].precision for i in idx]))):
        by = sorted(((float(e[of == v].sum()), str(v)) for v in set(of.tolist())), reverse=True)
        for _, v in by:
            print(line(f"{label} {v}", of == v))
    # The floors, in sample, on the cold log errors of every held-out row (each group's own as well).
    t = np.asarray(test, dtype=int)
    r0 = np.log(d.t_true[t] / ours(t))
    groups: dict[tuple[str, str, str, str], list[int]] = defaultdict(list)
    for j, i in enumerate(t):
        groups[_group(d.ms[i])].append(j)
    left_const, left_lin = np.empty_like(r0), np.empty_like(r0)
    for js in groups.values():
        y = r0[js]
        left_const[js] = y - y.mean()
        ms = [d.ms[int(t[j])] for j in js]
        x = np.column_stack(
            [
                np.ones(len(js)),
                np.log([m.local_batch_size for m in ms]),
                np.log([float(m.num_gpus) for m in ms]),
                np.log([d.resolved[int(t[j])].flops_per_sample for j in js]),
            ]
        )
        coef, *_ = np.linalg.lstsq(x, y, rcond=None)
        left_lin[js] = y - x @ coef
    key = np.asarray(["|".join(_group(d.ms[i])) for i in idx])
    shares = sorted(((float(e[key == g].sum()), g) for g in set(key.tolist())), reverse=True)
    of_key = {"|".join(g): js for g, js in groups.items()}
    for _, g in shares[:12]:
        js = of_key[g]
        floor = f" | floor {100 * _mre(left_const[js]):.1f} / {100 * _mre(left_lin[js]):.1f}%"
        print(line(g, key == g, floor))
    repeats: dict[tuple[object, ...], list[int]] = defaultdict(list)
    for j, i in enumerate(t):
        m = d.ms[i]
        repeats[(*_group(m), m.num_gpus, m.num_nodes, m.batch_size, d.resolved[i].flops_per_sample)].append(j)
    rep = [j for js in repeats.values() if len(js) > 1 for j in js]
    rep_left = np.concatenate([r0[js] - r0[js].mean() for js in repeats.values() if len(js) > 1] or [r0[:0]])
    noise = (
        f"{len(rep)} rows of {sum(len(js) > 1 for js in repeats.values())} configurations measured more"
        f" than once, {100 * _mre(rep_left):.1f}% off their mean"
        if rep
        else "no configuration measured more than once"
    )
    print(
        f"    floors on all {t.size} rows, in sample: a constant per group {100 * _mre(left_const):.1f}%,"
        f" a constant and the three slopes {100 * _mre(left_lin):.1f}%; repeats: {noise}"
    )


def _where(d: Data, i: int) -> tuple[float, float, float]:
    """Row ``i``'s log per-GPU batch, log GPUs and log training FLOPs per sample."""
    m = d.ms[i]
    return (math.log(m.local_batch_size), math.log(m.num_gpus), math.log(d.resolved[i].flops_per_sample))


def _group(m: Measurement) -> tuple[str, str, str, str]:
    return (m.model, m.precision, m.stack, m.gpu_type)


def _mre(log_err: np.ndarray) -> float:
    """MRE of throughput (``rel_err``) from log(measured time / predicted time)."""
    return float(np.abs(np.exp(log_err) - 1.0).mean()) if log_err.size else float("nan")


def _lomo_breakdown(
    d: Data, splits: Sequence[tuple[str, Idx, Idx]], kept: dict[str, tuple[np.ndarray, Physics]]
) -> None:
    """Per held-out model (most summed error first): rows, MRE, median predicted / measured throughput,
    its share of the pooled summed error, the share of its error on rows across nodes, the (source, GPU
    type) cells carrying most of it, and what the scaling model's constants that depend on the model's
    family read without it (its family's arithmetic intensity, the step overhead) against a fit on every
    row."""
    full = fit_physics(d.ms, d.resolved)
    errs = {lab: rel_err(kept[lab][0], d.t_true[test]) for lab, _, test in splits if lab in kept}
    total = sum(float(e.sum()) for e in errs.values())
    print("\n  per held-out model: rows, MRE (median), predicted/measured throughput (median), share of the")
    print("  pooled error, share of its own error across nodes, largest (source, GPU) cells; its family's")
    print("  intensity (FLOP/byte) and the step overhead fitted without it [with every row]")
    order = sorted(((lab, test) for lab, _, test in splits if lab in errs), key=lambda lt: -errs[lt[0]].sum())
    for lab, test in order:
        e, phys = errs[lab], kept[lab][1]
        ratio = d.t_true[test] / kept[lab][0]
        multi = np.asarray([d.ms[i].num_nodes > 1 for i in test])
        cells: dict[tuple[str, str], list[int]] = defaultdict(list)
        for k, i in enumerate(test):
            cells[(str(d.source[i]), d.ms[i].gpu_type)].append(k)
        top = sorted(cells.items(), key=lambda kv: -e[kv[1]].sum())[:2]
        fam = d.resolved[int(test[0])].family
        f = list(Family).index(fam)
        share = 100 * e.sum() / total
        print(
            f"  {lab:<22} n={test.size:<5} {summarise(e)} x{np.median(ratio):4.2f}  {share:4.1f}%"
            f"  nodes>1 {100 * e[multi].sum() / max(e.sum(), 1e-12):3.0f}%  "
            + ", ".join(f"{s}/{g} n={len(k)} x{np.median(ratio[k]):.2f}" for (s, g), k in top)
            + f"  | {fam.value} {phys.intensity[f]:.1f} [{full.intensity[f]:.1f}],"
            f" overhead {1e3 * phys.overhead_s:.1f} [{1e3 * full.overhead_s:.1f}] ms"
        )


def _new_models(
    d: Data,
    ours: Callable[[Idx], np.ndarray],
    orders: Sequence[dict[tuple[str, str, str, str], list[int]]],
    k: int,
    label: str,
) -> None:
    """A model new to its GPU type: per draw, half the (model, GPU type) groups are observed ``k`` times,
    the other half is scored (only the GPU-type levels of the correction can help them)."""
    e_new, e_cold = [], []
    for draw, order in enumerate(orders):
        rng = np.random.default_rng(1000 + draw)
        keys = sorted(order)
        seen = {keys[j] for j in rng.permutation(len(keys))[: len(keys) // 2]}
        corr = OnlineCorrector(ours.predictor)  # type: ignore[attr-defined]
        for g in seen:
            for i in order[g][:k]:
                corr.observe(*d.rows[i], d.ms[i].samples_per_s)
        rest = np.asarray(sorted(i for g in keys if g not in seen for i in order[g]), dtype=int)
        pred = np.asarray(corr.predict([d.rows[i] for i in rest]).samples_per_s)
        e_new.append(rel_err(d.batch[rest] / pred, d.t_true[rest]))
        e_cold.append(rel_err(ours(rest), d.t_true[rest]))
    e = np.concatenate(e_new)
    print(
        f"{label:<38} n={e.size // len(orders):<4} {summarise(e)} | cold {summarise(np.concatenate(e_cold))}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shared", type=Path, default=ROOT.parent / "shared" / "throughput")
    ap.add_argument("--quick", action="store_true", help="fewer models in leave-one-model-out")
    ap.add_argument("--splits", default="random,logo-gen,lomo,loso")
    ap.add_argument("--methods", default=",".join(m for m in METHODS if not m.startswith("ours-")))
    ap.add_argument("--no-anchors", action="store_true", help="'ours' without the measured anchors")
    ap.add_argument("--draws", type=int, default=10, help="random draws of the k observed configurations")
    ap.add_argument(
        "--random-draws",
        type=int,
        default=1,
        help="draws of the random 20%% hold-out (seeds 0..N-1), pooled: one draw moves by ~1 point when "
        "the table gains or loses a row",
    )
    ap.add_argument(
        "--dev",
        action="store_true",
        help="leave-one-generation-out on the development generations (Kepler, Pascal, Turing, Volta held "
        f"out in turn, at most {DEV_GROUP_CAP} test rows per model and GPU type) instead of Ampere, Hopper",
    )
    ap.add_argument(
        "--breakdown",
        type=int,
        default=0,
        metavar="K",
        help="where the leave-one-generation-out error after K observed configurations per (model, GPU "
        "type) lies: per GPU-count band and group, with the in-sample floors and the repeat noise",
    )
    args = ap.parse_args(argv)
    global ANCHORS
    ANCHORS = not args.no_anchors
    if not args.shared.is_dir():
        ap.error(f"--shared {args.shared}: not a directory (the throughput tables, ../shared/throughput)")
    t0 = time.time()
    ms = training_table(args.shared, shippable_only=False)
    d = Data(ms, args.shared)
    methods = args.methods.split(",")
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        ap.error(f"--methods: unknown method {unknown[0]!r} ({', '.join(METHODS)})")
    splits = args.splits.split(",")
    bad = [s for s in splits if s not in ("random", "logo-gen", "lomo", "loso")]
    if bad:
        ap.error(f"--splits: unknown split {bad[0]!r} (random, logo-gen, lomo, loso)")
    print(f"{len(ms)} configurations; sources: " + ", ".join(sorted(set(d.source.tolist()))))
    if "random" in splits:
        draws = []
        for seed in range(args.random_draws):
            order = np.random.default_rng(seed).permutation(len(ms))
            test, train = np.sort(order[: len(ms) // 5]), np.sort(order[len(ms) // 5 :])
            draws.append(("random" if args.random_draws == 1 else f"random, draw {seed}", train, test))
        run_split("random 20% hold-out", d, draws, methods)
    if "logo-gen" in splits:
        if args.dev:
            logo_generation(d, methods, (1, 2, 3), args.draws, DEV_GENERATIONS, DEV_GROUP_CAP, args.breakdown)
        else:
            logo_generation(d, methods, (1, 2, 3), args.draws, breakdown=args.breakdown)
    if "lomo" in splits:
        counts: dict[str, int] = defaultdict(int)
        for m in ms:
            counts[m.model] += 1
        models = sorted(m for m, c in counts.items() if c >= 10)
        if args.quick:
            models = models[:: max(1, len(models) // 8)]
        lomo = [(m, np.flatnonzero(d.model != m), np.flatnonzero(d.model == m)) for m in models]
        kept: dict[str, tuple[np.ndarray, Physics]] = {}
        run_split("leave-one-model-out", d, lomo, methods, kept if "ours" in methods else None)
        if kept:
            _lomo_breakdown(d, lomo, kept)
    if "loso" in splits:
        loso = [
            (s, np.flatnonzero(d.source != s), np.flatnonzero(d.source == s)) for s in sorted(set(d.source))
        ]
        run_split("leave-one-source-out", d, loso, methods)
    print(f"\n({time.time() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
