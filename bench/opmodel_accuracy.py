"""End-to-end error of the operator route (profile -> per-operator costs -> step) against measured tables.

Data: the rows ``perfmodel.train.training_table`` reads from ``../shared/throughput`` (research tables and
public extracts, including rows not shipped for licence reasons), limited to the rows the operator route
can answer: a zoo profile exists for the model (``perfmodel.profiling.profile_zoo``) and describes the
row's sample (forward + backward FLOPs per sample within 1.5x of the zoo's figure for the row's dataset),
and the run is data parallel or FSDP (tensor/pipeline-parallel rows are the LLM route's). The splits are
fixed before anything is fitted, from the table alone:

- ``random``: the same seeded 20% hold-out as ``bench/perfmodel_accuracy.py`` (seed 0);
- ``logo-gen``: leave one GPU generation out (Ampere, Hopper): no row of it in training, and the kernel
  cost model refitted without that generation's kernel measurements;
- ``lomo``: leave one model out (each model with at least 10 rows);
- ``loso``: leave one source out (each public source and each research cluster).

Methods, each fitted on the training part of a split only:

- ``composed``: the composition with the kernel-fitted cost model, nothing fitted on throughput rows
  (cold: the same prediction whatever the split, except the generation split's refitted cost model);
- ``composed+cal``: ``composed`` with a host time per forward/backward operator (``HOSTS``) and a
  bounded calibration, both chosen on the training rows: the median log(measured / predicted) time per
  source, else per software stack (``research``, ``vendor``, ``mlperf``, ``llm``), else of all training
  rows, clipped to [1/2, 2]; the host time is the one whose calibrated training rows have the lowest
  median error;
- ``ours``: the shipped predictor trained on the same split's training rows (all of them, also those the
  operator route cannot answer; ``bench/perfmodel_accuracy.py``'s ``fit_ours``: physics x XGBoost
  correction + anchors + in-node envelope).

Errors are relative errors of throughput, MRE (median), per split, then pooled with breakdowns per
precision, per GPU-count class (1 GPU, 2-8 in a node, across nodes) and per source.

    nice python bench/opmodel_accuracy.py [--splits random,logo-gen,lomo,loso] [--methods composed,...]
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import re
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.perfmodel_accuracy import Data, fit_ours, rel_err
from perfmodel.compose import compose
from perfmodel.datasets import canonical_dataset
from perfmodel.errors import PerfModelError
from perfmodel.kernels import default_cost_model, read_kernel_rows
from perfmodel.measurements import Measurement
from perfmodel.opcost import CostModel, fit
from perfmodel.profile import OperatorProfile, Phase
from perfmodel.train import training_table
from perfmodel.zoo import lookup_model

ROOT = Path(__file__).resolve().parents[1]
Idx = np.ndarray
GENERATIONS = ("Ampere", "Hopper")
CAL_BOUND = math.log(2.0)
HOSTS = (0.0, 5e-6, 10e-6, 20e-6, 40e-6)  # host seconds per forward/backward operator, chosen in folds


def _sequence(m: Measurement) -> int | None:
    if m.seq_len:
        return m.seq_len
    found = re.search(r"seq(\d+)", m.dataset)
    return int(found.group(1)) if found else None


def _profile_of(
    m: Measurement, cache: dict[tuple[str, str], OperatorProfile | None], skipped: dict[str, str]
) -> OperatorProfile | None:
    """The zoo profile of a row's model on its dataset, or None (reason in ``skipped``) where the profile
    does not describe the row's sample: its forward + backward FLOPs per sample more than 1.5x from the
    zoo's figure for that dataset (a CIFAR row of an ImageNet-shaped profile, another sequence length)."""
    key = (m.model, m.dataset)
    if key in cache:
        return cache[key]
    from perfmodel.profiling import profile_zoo  # the zoo route of `perfsched profile`

    prof: OperatorProfile | None = None
    try:
        prof = profile_zoo(m.model, batch_size=8, sequence_length=_sequence(m))
    except PerfModelError as exc:
        skipped[f"{m.model}/{m.dataset}"] = str(exc)
    info = lookup_model(m.model)
    if prof is not None and info is not None and info.flops_per_sample:
        zoo = info.flops_per_sample.get(canonical_dataset(m.dataset))
        ours = (prof.step_flops(Phase.FORWARD) + prof.step_flops(Phase.BACKWARD)) / prof.batch_size
        if zoo and not 1 / 1.5 <= ours / zoo <= 1.5:
            skipped[f"{m.model}/{m.dataset}"] = f"profile {ours:.3g} FLOPs/sample, zoo {zoo:.3g}"
            prof = None
    cache[key] = prof
    return prof


class Composer:
    """Composed step times of table rows under one cost model, memoised per (model, GPU, batch, precision)."""

    def __init__(self, d: Data, profiles: list[OperatorProfile | None], model: CostModel) -> None:
        self.d, self.profiles, self.model = d, profiles, model
        self.memo: dict[tuple[object, ...], tuple[float, float, float, dict[str, float]]] = {}

    def time(self, i: int, host_op_s: float = 0.0) -> float:
        m, prof = self.d.ms[i], self.profiles[i]
        assert prof is not None
        _, hw = self.d.rows[i]
        sharding = "fsdp" if m.sharding == "fsdp" else "ddp"
        p = compose(
            prof,
            hw,
            m.precision,
            m.batch_size,
            self.model,
            sharding=sharding,
            micro_batch=m.micro_batch or None,
            activation_checkpointing=m.activation_checkpointing,
            step_cache=self.memo,
            host_op_s=host_op_s,
            stack=m.stack,
        )
        return 1.0 / p.iters_per_s

    def times(self, rows: Idx, host_op_s: float) -> np.ndarray:
        out = np.full(len(self.d.ms), np.nan)
        for i in rows:
            out[i] = self.time(int(i), host_op_s)
        return out


def _levels(d: Data, train: Idx, t_pred: np.ndarray) -> Callable[[Idx], np.ndarray]:
    """Median log(measured / predicted) per source, else per software stack, else over all training rows,
    clipped to +-ln 2, fitted on ``train`` only; returns the calibrated times of any rows."""
    r = np.log(d.t_true[train] / t_pred[train])
    overall = float(np.median(r)) if r.size else 0.0
    keys = {"source": d.source[train], "stack": np.asarray([d.ms[i].stack for i in train])}
    level = {k: {v: float(np.median(r[col == v])) for v in set(col.tolist())} for k, col in keys.items()}

    def apply(test: Idx) -> np.ndarray:
        off = np.asarray(
            [level["source"].get(str(d.source[i]), level["stack"].get(d.ms[i].stack, overall)) for i in test]
        )
        out: np.ndarray = t_pred[test] * np.exp(np.clip(off, -CAL_BOUND, CAL_BOUND))
        return out

    return apply


def _calibrated(
    d: Data, train: Idx, t_by_host: dict[float, np.ndarray]
) -> tuple[float, Callable[[Idx], np.ndarray]]:
    """Nested choice of the host time per operator (``HOSTS``) and the levels on ``train`` only: the
    host time whose calibrated training rows have the lowest median |log error|."""
    best: tuple[float, float, Callable[[Idx], np.ndarray]] | None = None
    for host, t in sorted(t_by_host.items()):
        apply = _levels(d, train, t)
        score = float(np.median(np.abs(np.log(apply(train) / d.t_true[train]))))
        if best is None or score < best[0]:
            best = (score, host, apply)
    assert best is not None
    return best[1], best[2]


def _band(m: Measurement) -> str:
    if m.num_gpus == 1:
        return "1 GPU"
    return "2-8 in a node" if m.num_nodes == 1 else "across nodes"


def summarise(e: np.ndarray) -> str:
    e = e[np.isfinite(e)]
    if e.size == 0:
        return "      —        "
    return f"{100 * e.mean():6.1f}% ({100 * np.median(e):5.1f}%)"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shared", type=Path, default=ROOT.parent / "shared" / "throughput")
    ap.add_argument("--splits", default="random,logo-gen,lomo,loso")
    ap.add_argument("--methods", default="composed,composed+cal,ours")
    args = ap.parse_args(argv)
    if importlib.util.find_spec("perfmodel.profiling") is None:
        ap.error("needs perfmodel.profiling (the zoo profiles of `perfsched profile`)")
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
    print(f"{len(ms)} configurations, {int(covered.sum())} answered by the operator route; not answered:")
    for what, why in sorted(skipped.items()):
        print(f"  {what}: {why}")
    methods = args.methods.split(",")
    splits = args.splits.split(",")
    kernel_rows = read_kernel_rows()
    cold = Composer(d, profiles, default_cost_model())
    all_idx = np.flatnonzero(covered)
    cal = "composed+cal" in args.methods.split(",")
    hosts = HOSTS if cal else (0.0,)
    t_cold = {h: cold.times(all_idx, h) for h in hosts}
    per_gen: dict[str, dict[float, np.ndarray]] = {}
    for gen in GENERATIONS:
        comp = Composer(d, profiles, fit([r for r in kernel_rows if r.spec.architecture != gen]))
        held = all_idx[d.arch[all_idx] == gen]
        per_gen[gen] = {}
        for h in hosts:
            t = t_cold[h].copy()
            t[held] = comp.times(held, h)[held]
            per_gen[gen][h] = t
    plans: list[tuple[str, list[tuple[str, Idx, Idx]]]] = []
    if "random" in splits:
        order = np.random.default_rng(0).permutation(len(ms))
        test, train = np.sort(order[: len(ms) // 5]), np.sort(order[len(ms) // 5 :])
        plans.append(("random 20% hold-out", [("random", train, test)]))
    if "logo-gen" in splits:
        plans.append(
            (
                "leave one GPU generation out (cold)",
                [(g, np.flatnonzero(d.arch != g), np.flatnonzero(d.arch == g)) for g in GENERATIONS],
            )
        )
    if "lomo" in splits:
        counts: dict[str, int] = defaultdict(int)
        for i in all_idx:
            counts[ms[i].model] += 1
        models = sorted(m for m, c in counts.items() if c >= 10)
        plans.append(
            (
                "leave one model out",
                [(m, np.flatnonzero(d.model != m), np.flatnonzero(d.model == m)) for m in models],
            )
        )
    if "loso" in splits:
        sources = sorted(set(d.source[all_idx].tolist()))
        plans.append(
            (
                "leave one source out",
                [(s, np.flatnonzero(d.source != s), np.flatnonzero(d.source == s)) for s in sources],
            )
        )
    chosen: dict[str, list[str]] = defaultdict(list)
    for title, folds in plans:
        print(f"\n== {title}: MRE (median)  " + "  ".join(f"{m:>20}" for m in methods))
        pooled: dict[str, list[np.ndarray]] = defaultdict(list)
        ratios: list[np.ndarray] = []
        tests: list[Idx] = []
        for label, train, test in folds:
            # ``ours`` trains on every training row it can read; the composed methods' calibration on the
            # covered ones. All are scored on the covered test rows.
            train_all, train, test = train, train[covered[train]], test[covered[test]]
            if test.size == 0:
                continue
            t_comp = per_gen.get(label, t_cold)
            cells = []
            for meth in methods:
                if meth == "composed":
                    pred = t_comp[0.0][test]
                    ratios.append(pred / d.t_true[test])
                elif meth == "composed+cal":
                    host, apply = _calibrated(d, train, t_comp)
                    chosen[title].append(f"{label}: {host * 1e6:g} us")
                    pred = apply(test)
                else:
                    pred = fit_ours(d, train_all)(test)
                e = rel_err(pred, d.t_true[test])
                pooled[meth].append(e)
                cells.append(summarise(e))
            tests.append(test)
            print(f"  {label:<28} n={len(test):<6}" + "  ".join(f"{c:>20}" for c in cells))
        if not tests:
            continue
        allt = np.concatenate(tests)
        errs = {meth: np.concatenate(v) for meth, v in pooled.items()}
        print(f"  {'pooled':<28} n={allt.size:<6}" + "  ".join(f"{summarise(errs[m]):>20}" for m in methods))
        keys = {
            "precision": np.asarray([ms[i].precision for i in allt]),
            "GPUs": np.asarray([_band(ms[i]) for i in allt]),
            "source": d.source[allt],
        }
        for what, col in keys.items():
            for v in sorted(set(col.tolist())):
                k = col == v
                print(
                    f"    {what} {v:<21} n={int(k.sum()):<6}"
                    + "  ".join(f"{summarise(errs[m][k]):>20}" for m in methods)
                )
        if ratios:
            q = np.quantile(np.concatenate(ratios), [0.1, 0.5, 0.9])
            print(
                "    composed: measured / predicted samples/s, 10th / 50th / 90th percentile: "
                + " / ".join(f"{x:.2f}" for x in q)
            )
        if chosen[title]:
            print("    host time per operator chosen in the folds: " + ", ".join(chosen[title]))
    print(f"\n({time.time() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
