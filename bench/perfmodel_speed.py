"""Speed of the throughput predictor: model load, 100 fresh rows in one call, cached repeats.

Figures (median of repeated runs after warm-up, one thread):
- load: ``Predictor.load()`` in a fresh interpreter (subprocess; includes importing perfmodel and numpy),
  target <= 1 s; baseline in the same run: loading the same trees into ``xgboost`` (import + Booster)
  as a server that used xgboost directly would.
- 100 rows: ``predict`` of the shipped predictor as the scheduler builds it (``Predictor.load()``: the
  in-node envelope where it extrapolates, see ``perfmodel.envelope.MeasuredInNode``) on 100 (job,
  placement) rows not in the result cache (their job and placement sides were seen before, as in a
  scheduling round), target <= 2 ms; baselines, interleaved with ours on the same batches (the shared
  machine's load moves all alike): the same predictor with the envelope on every one-node row
  (``envelope="always"``; each such row on n GPUs is computed with the same job on 1 .. n-1 GPUs) and
  without any envelope, and the per-row path without it, and the default predictor with its trees walked by
  numpy instead of the compiled ``perfmodel._forest``; ``xgboost.Booster.inplace_predict`` on the same 100
  feature rows (tree evaluation only). Printed with them: how many of the rows get the envelope and how
  many rows the forest walks. Also printed: the same with every cache cold (a new predictor per batch).
- cached: the same call repeated (every row a cache hit), and one cached row, target <= 20 us.
- online correction (``perfmodel.online.OnlineCorrector``, as the operator holds it): 50 observed jobs
  of 9 models on 8 GPU types held, then one more observation followed by ``predict`` of 100 rows (the
  call that refits the correction's levels), with the offline result cache warm (a scheduling round)
  and cold; and ``predict`` of the 100 rows with nothing new observed.

Run: ``nice python bench/perfmodel_speed.py`` (``--online``: the online correction's figures only).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np

from perfmodel.features import HardwareFeatures, JobFeatures
from perfmodel.forest import Forest
from perfmodel.predictor import Predictor
from perfmodel.scaling import FEATURE_NAMES

# The machine this runs on is shared: CPU time of this process (CLOCK_PROCESS_CPUTIME_ID) is what one
# core spends, wall time includes waiting for a core. Both are printed; targets are about the former.
CLOCK = time.process_time


def median_time(
    fn: Callable[[], object], repeat: int, number: int = 1, clock: Callable[[], float] = CLOCK
) -> float:
    times = []
    for _ in range(repeat):
        t = clock()
        for _ in range(number):
            fn()
        times.append((clock() - t) / number)
    return statistics.median(times)


def rows(seed: int) -> list[tuple[JobFeatures, HardwareFeatures]]:
    """100 distinct rows over zoo models, batches, GPU types and placements."""
    models = ["resnet50", "resnet18", "bert", "gpt2", "vgg16", "yolov3", "ncf", "transformer", "lstm"]
    gpus = ["V100", "A100", "H100", "T4", "NVIDIA-A100-SXM4-80GB", "Tesla-V100-SXM2-16GB", "L4", "A40"]
    out = []
    for i in range(100):
        k = seed * 100 + i
        n = [1, 2, 4, 8, 16][k % 5]
        job = JobFeatures(models[k % len(models)], "", 32 * n * (1 + k % 3), ["fp32", "amp"][k % 2])
        per_node = min(n, 8)
        out.append((job, HardwareFeatures(gpus[k % len(gpus)], n, per_node, -(-n // per_node))))
    return out


def elastic_rows(seed: int) -> list[tuple[JobFeatures, HardwareFeatures]]:
    """100 rows as an elastic policy asks them: 12 jobs on 1..8 GPUs of one node, and 4 two-node rows."""
    models = ["resnet50", "resnet18", "bert", "gpt2", "vgg16", "yolov3", "ncf", "transformer", "lstm"]
    gpus = ["V100", "A100", "H100", "T4", "L4", "A40"]
    out = []
    for i in range(12):
        k = seed * 12 + i
        job = JobFeatures(models[k % len(models)], "", 64 * (1 + k % 4), ["fp32", "amp"][k % 2])
        gpu = gpus[k % len(gpus)]
        out += [(job, HardwareFeatures(gpu, n, n, 1)) for n in range(1, 9)]
        if i < 4:
            out.append((job, HardwareFeatures(gpu, 16, 8, 2)))
    return out


def forest_rows(p: Predictor, batches: list[list[tuple[JobFeatures, HardwareFeatures]]]) -> float:
    """Mean number of rows the predictor's forest walks for one batch (result cache cold)."""
    forest = p.model.forest
    walked: list[int] = []
    original = forest.predict

    def counting(x: np.ndarray) -> np.ndarray:
        walked[-1] += x.shape[0]
        return original(x)

    forest.predict = counting  # type: ignore[method-assign]
    try:
        for b in batches:
            walked.append(0)
            p.clear_cache()
            p.predict(b)
    finally:
        del forest.predict
    return statistics.mean(walked)


def forest_inputs(
    p: Predictor, batches: list[list[tuple[JobFeatures, HardwareFeatures]]]
) -> list[np.ndarray]:
    """The feature rows the predictor's forest walks for each batch (result cache cold), in one array each."""
    forest = p.model.forest
    seen: list[list[np.ndarray]] = []
    original = forest.predict

    def recording(x: np.ndarray) -> np.ndarray:
        seen[-1].append(x)
        return original(x)

    forest.predict = recording  # type: ignore[method-assign]
    try:
        for b in batches:
            seen.append([])
            p.clear_cache()
            p.predict(b)
    finally:
        del forest.predict
    return [np.concatenate(x) for x in seen]


def leaf_booster(forest: Forest) -> Any:
    """An xgboost Booster with our trees whose output is each tree's leaf (one class per tree, the leaf's
    node number as its value, base 0): summing our leaf values over its output gives our forest exactly,
    so it times xgboost's C++ tree walk on the same trees (``inplace_predict``, one thread)."""
    import xgboost as xgb

    n_trees = forest.roots.size
    ends = [*forest.roots[1:].tolist(), forest.feature.size]
    trees = []
    for t, (s, e) in enumerate(zip(forest.roots.tolist(), ends, strict=True)):
        ids = np.arange(s, e)
        leaf = forest.child[s:e] == ids
        left = np.where(leaf, -1, forest.child[s:e] - s)
        right = np.where(leaf, -1, forest.child[s:e] + 1 - s)
        parents = np.full(e - s, 2147483647)
        parents[left[~leaf]] = np.flatnonzero(~leaf)
        parents[right[~leaf]] = np.flatnonzero(~leaf)
        n = e - s
        trees.append(
            {
                "base_weights": [0.0] * n,
                "categories": [],
                "categories_nodes": [],
                "categories_segments": [],
                "categories_sizes": [],
                "default_left": [1] * n,
                "id": t,
                "left_children": left.tolist(),
                "right_children": right.tolist(),
                "parents": parents.tolist(),
                "loss_changes": [0.0] * n,
                "split_conditions": np.where(leaf, ids, forest.threshold[s:e]).astype(np.float32).tolist(),
                "split_indices": np.where(leaf, 0, forest.feature[s:e]).tolist(),
                "split_type": [0] * n,
                "sum_hessian": [1.0] * n,
                "tree_param": {
                    "num_deleted": "0",
                    "num_feature": str(len(FEATURE_NAMES)),
                    "num_nodes": str(n),
                    "size_leaf_vector": "1",
                },
            }
        )
    learner = {
        "attributes": {},
        "feature_names": [],
        "feature_types": [],
        "gradient_booster": {
            "model": {
                "cats": {"enc": [], "feature_segments": [], "sorted_idx": []},
                "gbtree_model_param": {"num_parallel_tree": "1", "num_trees": str(n_trees)},
                "iteration_indptr": [0, n_trees],
                "tree_info": list(range(n_trees)),
                "trees": trees,
            },
            "name": "gbtree",
        },
        "learner_model_param": {
            "base_score": "[" + ",".join(["0E0"] * n_trees) + "]",
            "boost_from_average": "0",
            "num_class": str(n_trees),
            "num_feature": str(len(FEATURE_NAMES)),
            "num_target": "1",
        },
        "objective": {"name": "multi:softmax", "softmax_multiclass_param": {"num_class": str(n_trees)}},
    }
    model = {"learner": learner, "version": [int(v) for v in xgb.__version__.split(".")[:3]]}
    booster = xgb.Booster(params={"nthread": 1}, model_file=bytearray(json.dumps(model).encode()))
    booster.set_param({"nthread": 1})
    return booster


def cold_call(q: Predictor, batch: list[tuple[JobFeatures, HardwareFeatures]]) -> float:
    """CPU seconds of one ``predict`` of ``batch`` with the result cache cleared first."""
    q.clear_cache()
    t = CLOCK()
    q.predict(batch)
    return CLOCK() - t


def online_figures(p: Predictor) -> None:
    """The online correction's figures (module docstring): observe then predict, 50 observations held."""
    from perfmodel.online import OnlineCorrector

    held, asked = rows(0)[:50], rows(1)
    offline = p.predict(held).samples_per_s
    corr = OnlineCorrector(p)
    for k, ((job, hw), s) in enumerate(zip(held, offline, strict=True)):
        # deterministic "measured" throughputs: each GPU type and model off in its own way
        corr.observe(job, hw, s * (0.7 + 0.05 * (k % 13)), job_id=f"job-{k}")
    corr.predict(asked)
    warm, cold, clean = [], [], []
    for k in range(40):
        job, hw = held[k % 50]
        new = offline[k % 50] * (0.9 + 0.01 * (k % 7))
        t = CLOCK()
        corr.observe(job, hw, new, job_id=f"job-{k % 50}")
        corr.predict(asked)
        warm.append(CLOCK() - t)
        t = CLOCK()
        corr.predict(asked)
        clean.append(CLOCK() - t)
        p.clear_cache()
        t = CLOCK()
        corr.observe(job, hw, new, job_id=f"job-{k % 50}")
        corr.predict(asked)
        cold.append(CLOCK() - t)
    print(
        "online correction, 50 observed jobs held: observe 1 + predict 100 rows "
        f"median {statistics.median(warm) * 1e3:.2f} ms CPU (offline result cache warm), "
        f"{statistics.median(cold) * 1e3:.2f} ms (cold); predict 100 rows, nothing new observed "
        f"{statistics.median(clean) * 1e3:.2f} ms"
    )


def main() -> int:
    if "--online" in sys.argv[1:]:
        online_figures(Predictor.load())
        return 0
    load_code = (
        "import time; t=time.process_time(); w=time.perf_counter(); "
        "from perfmodel.predictor import Predictor; "
        "Predictor.load(); print(time.process_time()-t, time.perf_counter()-w)"
    )
    runs = [
        subprocess.run(
            [sys.executable, "-c", load_code], capture_output=True, text=True, check=True
        ).stdout.split()
        for _ in range(5)
    ]
    cpu = statistics.median(float(r[0]) for r in runs)
    wall = statistics.median(float(r[1]) for r in runs)
    print(
        "load Predictor (fresh interpreter, incl. imports): "
        f"median {cpu * 1e3:.0f} ms CPU, {wall * 1e3:.0f} ms wall (target <= 1000 ms)"
    )

    p = Predictor.load()
    batches = [rows(s) for s in range(60)]
    for b in batches[:10]:  # warm-up: component caches, numpy paths
        p.predict(b)
    fresh, fresh_wall = [], []
    for b in batches[10:]:
        p.clear_cache()
        t, w = CLOCK(), time.perf_counter()
        p.predict(b)
        fresh.append(CLOCK() - t)
        fresh_wall.append(time.perf_counter() - w)
    print(
        "predict 100 rows, result cache cold: "
        f"median {statistics.median(fresh) * 1e6:.0f} us CPU, "
        f"{statistics.median(fresh_wall) * 1e6:.0f} us wall"
        " (target <= 2000 us)"
    )
    # Baselines in the same run, interleaved with the batch path on the same batches: the batch path
    # without the in-node envelope, and the per-row path without it (a Resolved object per row from the
    # cached sides, anchors over Resolved rows, the same trees), which the tests hold equal to it.
    anchors = p.anchors
    flat = Predictor(p.model, p.meta, anchors=anchors, measured=p.measured, envelope="never")
    strict = Predictor(p.model, p.meta, anchors=anchors, measured=p.measured, envelope="always")
    # The default predictor with its trees walked by numpy (where the compiled walk is not built).
    numpy_forest = copy.copy(p.model.forest)
    numpy_forest.native = False
    numpy_gpu_forest = copy.copy(p.model.gpu_forest)
    if numpy_gpu_forest is not None:
        numpy_gpu_forest.native = False
    slow = Predictor(
        dataclasses.replace(p.model, forest=numpy_forest, gpu_forest=numpy_gpu_forest),
        p.meta,
        anchors=anchors,
        measured=p.measured,
    )
    for b in batches[:10]:
        flat.predict(b)
        strict.predict(b)
        slow.predict(b)
    ours, per_row, no_env, always, numpy_walk = [], [], [], [], []
    for b in batches[10:]:
        ours.append(cold_call(p, b))
        numpy_walk.append(cold_call(slow, b))
        always.append(cold_call(strict, b))
        no_env.append(cold_call(flat, b))
        t = CLOCK()
        resolved = [p.resolve(j, h) for j, h in b]
        times, _ = p.model.times_of(resolved, anchors.iteration_times(resolved) if anchors else None)
        [(r.batch_size / x, 1.0 / x, r.low_confidence) for r, x in zip(resolved, times.tolist(), strict=True)]
        per_row.append(CLOCK() - t)
    print(
        f"trees walked by the compiled perfmodel._forest: {p.model.forest.native}; the same default "
        f"predictor walking them with numpy, interleaved: median {statistics.median(numpy_walk) * 1e6:.0f} "
        f"us CPU (ours {statistics.median(ours) * 1e6:.0f} us)"
    )
    print(
        "baselines interleaved on the same batches: the envelope on every one-node row (the default "
        f"before) median {statistics.median(always) * 1e6:.0f} us CPU; without the in-node envelope "
        f"{statistics.median(no_env) * 1e6:.0f} us; per-row path without it "
        f"{statistics.median(per_row) * 1e6:.0f} us "
        f"(ours, interleaved: {statistics.median(ours) * 1e6:.0f} us)"
    )
    walked = {
        name: forest_rows(q, batches[10:]) for name, q in (("ours", p), ("always", strict), ("never", flat))
    }
    enveloped = statistics.mean(sum(p.envelope_applies(*r) for r in b) for b in batches[10:])
    one_node = statistics.mean(sum(h.num_nodes == 1 and h.num_gpus > 1 for _, h in b) for b in batches[10:])
    print(
        f"rows of 100 that get the envelope: {enveloped:.1f} (always: {one_node:.1f}); "
        "forest rows walked per batch (rows + 1-GPU twins + the envelope's smaller placements): "
        + ", ".join(f"{k} {v:.0f}" for k, v in walked.items())
    )
    # The elastic shape (each job on 1..8 GPUs of a node): the envelope's extra rows are rows of the batch.
    el_ours, el_flat, el_always = [], [], []
    for b in [elastic_rows(s) for s in range(60)][10:]:
        el_ours.append(cold_call(p, b))
        el_always.append(cold_call(strict, b))
        el_flat.append(cold_call(flat, b))
    print(
        "predict 100 rows shaped as an elastic policy asks (12 jobs x 1..8 GPUs of a node + 4 two-node "
        f"rows), result cache cold: median {statistics.median(el_ours) * 1e6:.0f} us CPU; "
        f"baselines interleaved: envelope on every one-node row {statistics.median(el_always) * 1e6:.0f} us, "
        f"without the envelope {statistics.median(el_flat) * 1e6:.0f} us"
    )
    cold = []
    for b in batches[10:]:
        q = Predictor(p.model, p.meta, anchors=p.anchors, measured=p.measured)
        t = CLOCK()
        q.predict(b)
        cold.append(CLOCK() - t)
    print(
        "predict 100 rows, every cache cold (new predictor: job and placement sides checked too): "
        f"median {statistics.median(cold) * 1e6:.0f} us CPU"
    )
    b = batches[-1]
    p.predict(b)
    cached_100 = median_time(lambda: p.predict(b), 200)
    one = [b[0]]
    cached_1 = median_time(lambda: p.predict(one), 200, number=20)
    cached_1_wall = median_time(lambda: p.predict(one), 200, number=20, clock=time.perf_counter)
    print(f"predict 100 rows, all cached: median {cached_100 * 1e6:.1f} us CPU")
    print(
        f"predict 1 row, cached: median {cached_1 * 1e6:.1f} us CPU, {cached_1_wall * 1e6:.1f} us wall"
        " (target <= 20 us)"
    )
    online_figures(p)

    # Where the default call's time goes: the forest alone on the rows it walks, interleaved with the calls.
    inputs = forest_inputs(p, batches[10:])
    calls, walks = [], []
    for b, x in zip(batches[10:], inputs, strict=True):
        p.clear_cache()
        t = CLOCK()
        p.predict(b)
        calls.append(CLOCK() - t)
        t = CLOCK()
        p.model.forest.predict(x)
        walks.append(CLOCK() - t)
    call, walk = statistics.median(calls), statistics.median(walks)
    print(
        f"where a default 100-row call goes: median {call * 1e6:.0f} us, of which the forest alone on its "
        f"{statistics.mean(len(x) for x in inputs):.0f} rows {walk * 1e6:.0f} us ({walk / call:.0%}), "
        "the rest "
        f"(features, scaling model, anchors, guards, envelope, cache) {(call - walk) * 1e6:.0f} us"
    )

    # Baseline in the same run: xgboost's own C++ predictor on the same trees (a leaf-index booster, exact).
    try:
        t = time.perf_counter()
        import xgboost  # noqa: F401

        import_s = time.perf_counter() - t
    except ImportError:
        print("baseline: xgboost not installed")
        return 0
    t = time.perf_counter()
    booster = leaf_booster(p.model.forest)
    build_s = time.perf_counter() - t
    forest = p.model.forest

    def xgb_forest(x: np.ndarray) -> np.ndarray:
        leaf = booster.inplace_predict(x, predict_type="margin")
        return forest.value.take(leaf.astype(np.intp)).sum(axis=1) + forest.base  # type: ignore[no-any-return]

    never_inputs = forest_inputs(flat, batches[10:20])
    cases = [("100 rows", inputs[0][:100]), ("'never' rows", never_inputs[0]), ("default rows", inputs[0])]
    for _, x in cases:
        # Same leaves, same summation order as the numpy walk; the compiled walk sums in tree order.
        assert np.array_equal(xgb_forest(x), forest.predict_numpy(x)), "leaf booster differs from our forest"
        assert np.allclose(forest.predict(x), forest.predict_numpy(x), rtol=1e-12, atol=1e-12)
    figures = []
    for name, x in cases:
        native_t, ours_t, xgb_t = [], [], []
        for _ in range(5):
            native_t.append(median_time(lambda: forest.predict(x), 40))  # noqa: B023
            ours_t.append(median_time(lambda: forest.predict_numpy(x), 40))  # noqa: B023
            xgb_t.append(median_time(lambda: xgb_forest(x), 40))  # noqa: B023
        figures.append(
            f"{name} ({len(x)}): compiled {statistics.median(native_t) * 1e6:.0f} us, "
            f"numpy {statistics.median(ours_t) * 1e6:.0f} us, xgboost {statistics.median(xgb_t) * 1e6:.0f} us"
        )
    print(
        "baseline: xgboost's C++ walk of the same trees (inplace_predict, nthread=1, exact via leaf "
        "indices): "
        f"import xgboost {import_s * 1e3:.0f} ms + booster {build_s * 1e3:.0f} ms at load; "
        + "; ".join(figures)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
