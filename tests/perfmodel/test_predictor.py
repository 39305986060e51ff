"""The shipped predictor loads fast, refuses foreign model files and predicts physically sane numbers."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfmodel.errors import InvalidInputError, ModelFileError
from perfmodel.features import HardwareFeatures, JobFeatures, Resolved, design_of, feature_matrix, resolve
from perfmodel.forest import Forest
from perfmodel.gpus import CANONICAL_TYPES
from perfmodel.predictor import MODEL_FILE, Predictor
from perfmodel.scaling import STACKS
from perfmodel.zoo import llm_arch, model_names

SHIPPED = Path(__file__).resolve().parents[2] / "perfmodel" / "data" / MODEL_FILE


@pytest.fixture(scope="module")
def predictor() -> Predictor:
    return Predictor.load()


def test_model_of_another_schema_is_refused(tmp_path: Path) -> None:
    raw = json.loads(SHIPPED.read_text())
    raw["feature_schema"] = "perfmodel-features-v0"
    bad = tmp_path / "old.json"
    bad.write_text(json.dumps(raw))
    with pytest.raises(ModelFileError, match=r"feature schema 'perfmodel-features-v0'.*retrain"):
        Predictor.load(bad)


def test_corrupt_or_missing_model_file_is_refused(tmp_path: Path) -> None:
    cut = tmp_path / "cut.json"
    cut.write_text(SHIPPED.read_text()[:1000])
    with pytest.raises(ModelFileError, match="not valid JSON"):
        Predictor.load(cut)
    raw = json.loads(SHIPPED.read_text())
    del raw["forest"]["trees"]
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps(raw))
    with pytest.raises(ModelFileError, match="corrupt"):
        Predictor.load(broken)
    with pytest.raises(ModelFileError, match="not found"):
        Predictor.load(tmp_path / "missing.json")


def test_forest_walks_trees_like_xgboost() -> None:
    # one stump on feature 1 (< 0.5 -> 10, else 20) and one on feature 0 (< 2 -> 1, else -1); base 0.5
    trees = [
        {
            "left": [1, -1, -1],
            "right": [2, -1, -1],
            "feature": [1, 0, 0],
            "threshold": [0.5, 0, 0],
            "value": [0, 10.0, 20.0],
        },
        {
            "left": [1, -1, -1],
            "right": [2, -1, -1],
            "feature": [0, 0, 0],
            "threshold": [2.0, 0, 0],
            "value": [0, 1.0, -1.0],
        },
    ]
    f = Forest.from_trees(trees, 0.5)
    x = np.array([[0.0, 0.0], [3.0, 0.9], [2.0, 0.5]])
    # row 0: 10 + 1 + 0.5; row 1: 20 - 1 + 0.5; row 2: x1 == 0.5 is not < 0.5 -> 20, x0 == 2 -> -1
    assert f.predict(x).tolist() == [11.5, 19.5, 19.5]


def test_predictions_are_consistent(predictor: Predictor) -> None:
    rows = [
        (JobFeatures("resnet50", "imagenet", 256), HardwareFeatures("NVIDIA-A100-SXM4-40GB", 8, 8)),
        (JobFeatures("bert", "squad", 32, "amp"), HardwareFeatures("Tesla-T4", 4, 4, 1, "pcie")),
        (JobFeatures("resnet18", "cifar10", 512), HardwareFeatures("V100", 16, 8, 2, "nvlink", 25)),
    ]
    p = predictor.predict(rows)
    assert len(p) == 3
    for k, (job, _) in enumerate(rows):
        assert p.samples_per_s[k] > 0
        assert p.iters_per_s[k] == pytest.approx(p.samples_per_s[k] / job.batch_size)
        assert p.low[k] < p.samples_per_s[k] < p.high[k]
        assert p.iters_low[k] < p.iters_per_s[k] < p.iters_high[k]
        assert not p.low_confidence[k]
    again = predictor.predict(rows)
    assert again == p  # cached results are the same results


def test_newer_gpu_is_faster_for_a_compute_bound_model(predictor: Predictor) -> None:
    job = JobFeatures("resnet50", "imagenet", 64)
    k80, v100, h100 = predictor.predict(
        [(job, HardwareFeatures(g)) for g in ("K80", "V100", "H100")]
    ).samples_per_s
    assert k80 < v100 < h100


def test_custom_model_and_unknown_gpu_are_low_confidence_with_wider_interval(predictor: Predictor) -> None:
    known = (JobFeatures("resnet50", "", 64), HardwareFeatures("V100"))
    custom = (JobFeatures("mynet", "", 64, params=25.6e6, flops_per_sample=24.5e9), HardwareFeatures("V100"))
    odd_gpu = (
        JobFeatures("resnet50", "", 64),
        HardwareFeatures("NVIDIA-GeForce-RTX-3090", memory_mib=24576, compute_capability="8.6"),
    )
    p = predictor.predict([known, custom, odd_gpu])
    assert p.low_confidence == [False, True, True]
    width = [p.high[k] / p.low[k] for k in range(3)]
    assert width[1] > width[0] and width[2] > width[0]


def test_bad_rows_name_row_and_field(predictor: Predictor) -> None:
    good = (JobFeatures("resnet50", "", 64), HardwareFeatures("V100"))
    with pytest.raises(InvalidInputError, match=r"row 1: batch_size: must be > 0"):
        predictor.predict([good, (JobFeatures("resnet50", "", 0), HardwareFeatures("V100"))])
    with pytest.raises(InvalidInputError, match=r"row 0: model: unknown model 'resnet51'"):
        predictor.predict([(JobFeatures("resnet51", "", 64), HardwareFeatures("V100"))])
    with pytest.raises(InvalidInputError, match=r"gpus: must be > 0"):
        predictor.predict([(JobFeatures("resnet50", "", 64), HardwareFeatures("V100", 0))])
    each = predictor.predict_each([good, (JobFeatures("x", "", 64), HardwareFeatures("V100")), good])
    assert isinstance(each[1], InvalidInputError)
    assert not isinstance(each[0], InvalidInputError) and not isinstance(each[2], InvalidInputError)


NVLINK_PRODUCTS = ["Tesla-V100-SXM2-16GB", "NVIDIA-A100-SXM4-80GB", "NVIDIA-H100-80GB-HBM3", "NVIDIA-H200"]
MODELS = ["resnet18", "resnet50", "vgg16", "bert", "gpt2", "transformer", "lstm", "yolov3", "ncf", "a3c"]


def _linear_bound(predictor: Predictor, job: JobFeatures, hw: HardwareFeatures, n: int) -> float:
    """The most a job on n GPUs of one node may reach: linear scaling from one GPU at a per-GPU batch of
    global / m for some m in 1..n (m = n: the same per-GPU batch), with the 1-GPU times from the per-row
    path. The in-node envelope lets a row reach the best of the same job on fewer GPUs; where the learned
    1-GPU time drops as the batch grows, that can exceed n x one GPU at the same per-GPU batch (see
    docs/decisions/0002-in-node-envelope.md)."""
    fewer = [(job, HardwareFeatures(hw.gpu_type, m, m, 1, hw.interconnect)) for m in range(1, n + 1)]
    resolved = [resolve(j, h) for j, h in fewer]
    _, t1 = predictor.model.times_of(resolved, _anchored(predictor, resolved))
    return float(job.batch_size / t1.min())


@settings(max_examples=60, deadline=None)
@given(
    model=st.sampled_from(MODELS),
    product=st.sampled_from(NVLINK_PRODUCTS),
    per_gpu=st.integers(1, 512),
    precision=st.sampled_from(["fp32", "amp"]),
    n=st.sampled_from([2, 4, 8]),
)
def test_nvlink_node_scaling_is_between_one_gpu_and_linear(
    predictor: Predictor, model: str, product: str, per_gpu: int, precision: str, n: int
) -> None:
    # Same per-GPU batch on 1 and n GPUs of one NVLink node: inside an NVLink node a job is never slower
    # in total than on one of its GPUs -- except inside a measured in-node curve that falls, where the
    # predictor follows the measurements (the envelope does not apply there) -- and never faster than
    # linear scaling from one GPU (at the same per-GPU batch, or a larger one the envelope looked at).
    one = (JobFeatures(model, "", per_gpu, precision), HardwareFeatures(product, 1, 1, 1, "nvlink"))
    many = (JobFeatures(model, "", per_gpu * n, precision), HardwareFeatures(product, n, n, 1, "nvlink"))
    s1, sn = predictor.predict([one, many]).samples_per_s
    assert sn <= _linear_bound(predictor, *many, n) * (1 + 1e-9)
    if predictor.envelope_applies(*many):
        assert s1 * (1 - 1e-9) <= sn


@settings(max_examples=40, deadline=None)
@given(
    model=st.sampled_from(MODELS),
    product=st.sampled_from(["Tesla-T4", "NVIDIA-L4", "Tesla-K80", "NVIDIA-A10G"]),
    per_gpu=st.integers(1, 512),
    n=st.sampled_from([2, 4, 8, 16]),
    nodes=st.sampled_from([1, 2]),
)
def test_no_placement_scales_superlinearly(
    predictor: Predictor, model: str, product: str, per_gpu: int, n: int, nodes: int
) -> None:
    one = (JobFeatures(model, "", per_gpu), HardwareFeatures(product, 1, 1, 1, "pcie"))
    many = (JobFeatures(model, "", per_gpu * n), HardwareFeatures(product, n, n // nodes, nodes, "pcie", 25))
    s1, sn = predictor.predict([one, many]).samples_per_s
    # Across nodes there is no envelope: at most n x one GPU at the same per-GPU batch.
    bound = n * s1 if nodes > 1 else _linear_bound(predictor, *many, n)
    assert sn <= bound * (1 + 1e-9)


def _walk(trees: list[dict[str, list[float]]], base: float, x: list[float]) -> float:
    """The forest's output for one feature row, walking the model file's trees node by node."""
    total = base
    for t in trees:
        i = 0
        while t["left"][i] != -1:
            go_left = np.float32(x[int(t["feature"][i])]) < np.float32(t["threshold"][i])
            i = int(t["left"][i] if go_left else t["right"][i])
        total += t["value"][i]
    return total


def _sample_rows() -> list[tuple[JobFeatures, HardwareFeatures]]:
    """Rows over measured and unmeasured (model, GPU) pairs, precisions, placements and odd inputs."""
    rows = []
    gpus = ["V100", "H100", "Tesla-T4", "NVIDIA-A100-SXM4-80GB", "K80", "L4", "A40", "RTX6000"]
    models = ["resnet50", "resnet18", "bert", "gpt2", "ncf", "yolov3", "lstm", "a3c", "deepspeech2"]
    placements = [
        (1, 1, 1, "nvlink"),
        (4, 4, 1, "pcie"),
        (8, 8, 1, "nvlink"),
        (16, 8, 2, "nvlink"),
        (3, 2, 2, "pcie"),
    ]
    for k in range(400):
        n, per_node, nodes, link = placements[k % len(placements)]
        job = JobFeatures(models[k % len(models)], "", (16 << (k % 4)) * n, ["fp32", "amp", "bf16"][k % 3])
        rows.append(
            (job, HardwareFeatures(gpus[k % len(gpus)], n, per_node, nodes, link, [25.0, 100.0][k % 2]))
        )
    rows.append(
        (JobFeatures("mynet", "", 64, params=25.6e6, flops_per_sample=24.5e9), HardwareFeatures("V100", 2))
    )
    rows.append(
        (
            JobFeatures("resnet50", "", 64),
            HardwareFeatures("NVIDIA-RTX-X", memory_mib=24576, compute_capability="8.6"),
        )
    )
    return rows


def _per_row_reference(predictor: Predictor, rows: list[tuple[JobFeatures, HardwareFeatures]]) -> np.ndarray:
    """Samples/s without the in-node envelope by the plain per-row path: features.resolve per row ->
    design_of -> Anchors.iteration_times -> LearnedModel.times; with the predictor's measured table, a
    cross-node row's features are those of the same row at its reference network (``_reference_network``)."""
    resolved = [resolve(j, h) for j, h in rows]
    anchored = _anchored(predictor, resolved)
    # The split correction across nodes answers the rows of models the table never measured (no anchor
    # group); without anchors, every row.
    unmeasured = None
    if predictor.anchors is not None:
        anchors = predictor.anchors
        unmeasured = np.asarray(
            [
                anchors.group_index(r.model, r.dataset, r.precision, j.stack) < 0
                for r, (j, _) in zip(resolved, rows, strict=True)
            ]
        )
    if predictor.measured is None:
        d = design_of(resolved, predictor.model.physics)
        t, _ = predictor.model.times(d, anchored, predictor.model.seen_of(resolved), None, unmeasured)
    else:
        d = design_of(resolved, predictor.model.physics)
        at = [
            resolve(j, dataclasses.replace(h, network_gbps=_reference_network(predictor, j, h)))
            for j, h in rows
        ]
        d.x[:] = design_of(at, predictor.model.physics).x
        t, _ = predictor.model.times(d, anchored, predictor.model.seen_of(resolved), None, unmeasured)
    return np.asarray([r.batch_size for r in resolved]) / t


def _reference_network(predictor: Predictor, job: JobFeatures, hw: HardwareFeatures) -> float:
    """The network (Gb/s) a row's learned correction is read at: its own on one node; across nodes the
    nearest (in log) its GPU type and stack were measured across nodes on, if any."""
    r = resolve(job, hw)
    measured = predictor.measured
    if hw.num_nodes == 1 or measured is None:
        return hw.network_gbps
    ref = measured.reference_links(
        np.asarray([measured.type_index(r.spec.gpu_type, r.spec.low_confidence)], dtype=np.intp),
        np.asarray([float(STACKS[job.stack])]),
        np.asarray([math.log(hw.network_gbps / 8.0)]),
    )
    return 8.0 * math.exp(float(ref[0]))


def _anchored(predictor: Predictor, resolved: list[Resolved]) -> tuple[np.ndarray, np.ndarray] | None:
    return predictor.anchors.iteration_times(resolved) if predictor.anchors is not None else None


def test_batch_path_equals_the_per_row_reference(predictor: Predictor) -> None:
    # The batch path (numeric tables, array anchors) must give the numbers of the plain per-row path.
    rows = _sample_rows()
    resolved = [resolve(j, h) for j, h in rows]
    # With and without measured anchors (on in the default predictor; ``Predictor.load(anchors=False)``).
    plain = Predictor.load(anchors=False)
    assert predictor.anchors is not None and plain.anchors is None
    assert np.isfinite(predictor.anchors.iteration_times(resolved)).sum() > 50  # the sample uses anchors
    for p in (plain, predictor):
        raw = Predictor(p.model, p.meta, anchors=p.anchors, in_node_envelope=False)
        got_raw = raw.predict(rows)
        want = _per_row_reference(raw, rows)
        # The same bits: the batch path does the per-row path's arithmetic on the same numbers.
        np.testing.assert_array_equal(got_raw.samples_per_s, want)
        assert got_raw.low_confidence == [r.low_confidence for r in resolved]
    # The default predictor's from here on: with the measured table, cross-node rows off a measured network
    # read the correction at their reference network.
    want = _per_row_reference(predictor, rows)
    assert sum(not math.isclose(_reference_network(predictor, j, h), h.network_gbps) for j, h in rows) > 10
    # With the envelope where the rule applies it: such a row on n GPUs of one node gets the best of the
    # same job on 1 .. n GPUs of that node (the reference computed row by row); other rows -- several
    # nodes, one GPU, inside a measured in-node curve that falls -- are the per-row value unchanged.
    got = predictor.predict(rows)
    applies = [predictor.envelope_applies(*row) for row in rows]
    inside = [
        hw.num_nodes == 1 and hw.num_gpus > 1 and not a for (_, hw), a in zip(rows, applies, strict=True)
    ]
    assert sum(applies) > 50 and sum(inside) > 5  # the sample has rows on both sides of the rule
    for k, (job, hw) in enumerate(rows):
        if applies[k]:
            fewer = [
                (
                    job,
                    HardwareFeatures(
                        hw.gpu_type,
                        g,
                        g,
                        1,
                        hw.interconnect,
                        hw.network_gbps,
                        hw.memory_mib,
                        hw.compute_capability,
                    ),
                )
                for g in range(1, hw.num_gpus + 1)
            ]
            best = _per_row_reference(predictor, fewer).max()
        else:
            best = want[k]
        assert got.samples_per_s[k] == pytest.approx(best, rel=1e-9)
        assert got.iters_per_s[k] == pytest.approx(best / job.batch_size, rel=1e-9)
    # A fresh predictor with a tiny side-table bound (tables reset between calls) and one-row calls agree.
    small = Predictor(
        predictor.model, predictor.meta, cache_size=8, anchors=predictor.anchors, measured=predictor.measured
    )
    for k in range(0, len(rows), 37):
        assert small.predict(rows[k : k + 5]).samples_per_s == pytest.approx(
            got.samples_per_s[k : k + 5], rel=1e-12
        )
        assert small.predict_one(*rows[k]).samples_per_s[0] == pytest.approx(got.samples_per_s[k], rel=1e-12)


def test_a_row_gets_the_same_bits_whatever_else_the_call_holds(predictor: Predictor) -> None:
    # One call mixing cached rows, rows of seen sides, a new job and placement, and repeated rows returns
    # for every row exactly what a fresh predictor computes for that row alone (nothing in the batch, the
    # envelope's shared extra rows or the forest's chunks leaks between rows).
    rows = _sample_rows()[:60]
    new = (
        JobFeatures("mynet2", "", 48, params=1e7, flops_per_sample=2e9),
        HardwareFeatures("L4", 4, 4, 1, "pcie"),
    )
    mixed = [
        *rows[:30],
        *rows[:5],
        new,
        *rows[30:],
        *[(j, HardwareFeatures(h.gpu_type, 8, 8)) for j, h in rows[:9]],
    ]
    p = Predictor(predictor.model, predictor.meta, anchors=predictor.anchors, measured=predictor.measured)
    p.predict(rows[::3])
    got = p.predict(mixed)
    for k, row in enumerate(mixed):
        alone = Predictor(
            predictor.model, predictor.meta, anchors=predictor.anchors, measured=predictor.measured
        )
        one = alone.predict_one(*row)
        assert (got.samples_per_s[k], got.iters_per_s[k], got.low[k], got.high[k]) == (
            one.samples_per_s[0],
            one.iters_per_s[0],
            one.low[0],
            one.high[0],
        ), (k, row)
        assert (got.iters_low[k], got.iters_high[k], got.low_confidence[k]) == (
            one.iters_low[0],
            one.iters_high[0],
            one.low_confidence[0],
        )


def _check_in_node_sweep(
    predictor: Predictor, rows: list[tuple[JobFeatures, HardwareFeatures]], s: list[float]
) -> None:
    """``s``: samples/s of one job on 1..N GPUs of one node (``rows``). Where the envelope applies (every
    extrapolated row), a count never predicts less than any smaller count; inside a measured in-node curve
    that falls, the prediction is the learned model's own (it may fall, as the measurements do)."""
    # The same measured in-node curves (inside one that falls the NVLink guard yields too), no envelope.
    raw = Predictor(
        predictor.model,
        predictor.meta,
        anchors=predictor.anchors,
        measured=predictor.measured,
        in_node_envelope=False,
    )
    unguarded = raw.predict(rows).samples_per_s
    for k, row in enumerate(rows):
        if predictor.envelope_applies(*row):
            assert s[k] >= max(s[:k], default=0.0), (k, s)
        else:
            assert s[k] == pytest.approx(unguarded[k], rel=1e-12), (k, s)


@settings(max_examples=40, deadline=None)
@given(
    model=st.sampled_from(model_names()),
    gpu=st.sampled_from(CANONICAL_TYPES),
    batch=st.integers(1, 4096),
    precision=st.sampled_from(["fp32", "amp", "bf16"]),
    interconnect=st.sampled_from(["nvlink", "pcie"]),
)
def test_more_gpus_in_one_node_never_predict_lower_where_the_envelope_applies(
    predictor: Predictor, model: str, gpu: str, batch: int, precision: str, interconnect: str
) -> None:
    # Same job (global batch), GPU type and interconnect on 1..8 GPUs of one node: where the rule applies
    # the envelope (no falling in-node measurements of the model on that GPU and link up to that count),
    # samples/s never go down as GPUs are added; elsewhere they are the learned model's, whatever the
    # order the rows are asked in.
    job = JobFeatures(model, "", batch, precision)
    rows = [(job, HardwareFeatures(gpu, n, n, 1, interconnect)) for n in range(1, 9)]
    fresh = Predictor(predictor.model, predictor.meta, anchors=predictor.anchors, measured=predictor.measured)
    together = fresh.predict(rows[::-1]).samples_per_s[::-1]
    fresh.clear_cache()
    one_by_one = [fresh.predict_one(*r).samples_per_s[0] for r in rows]
    assert together == pytest.approx(one_by_one, rel=1e-12)
    _check_in_node_sweep(predictor, rows, together)


def test_every_zoo_model_and_gpu_type_is_monotone_in_one_node_where_the_envelope_applies(
    predictor: Predictor,
) -> None:
    # The whole catalogue x zoo at three batch sizes (hypothesis above samples the rest). Almost every
    # sweep extrapolates (the shipped table measured few models inside a node, on K80, P100, V100 and T4)
    # and is monotone throughout; the ones inside falling measured curves follow the model.
    sweeps = [
        [
            (JobFeatures(model, "", batch, precision), HardwareFeatures(gpu, n, n, 1, link))
            for n in range(1, 9)
        ]
        for model in model_names()
        if llm_arch(model) is None  # LLM rows come from perfmodel.llm (tests/perfmodel/test_llm.py)
        for gpu in CANONICAL_TYPES
        for batch, precision in ((16, "fp32"), (256, "amp"), (2048, "fp32"))
        for link in ("nvlink", "pcie")
    ]
    s = np.asarray(predictor.predict([r for sweep in sweeps for r in sweep]).samples_per_s).reshape(-1, 8)
    applies = np.asarray([[predictor.envelope_applies(*r) for r in sweep] for sweep in sweeps])
    everywhere = applies[:, 1:].all(axis=1)
    assert everywhere.mean() > 0.95
    assert (np.diff(s[everywhere], axis=1) >= 0).all()
    for k in np.flatnonzero(~everywhere):
        _check_in_node_sweep(predictor, sweeps[k], s[k].tolist())


def test_forest_arrays_walk_like_the_model_file_trees(predictor: Predictor) -> None:
    raw = json.loads(SHIPPED.read_text())["forest"]
    x = feature_matrix([resolve(j, h) for j, h in _sample_rows()[::7]])[0]
    got = predictor.model.forest.predict(x)
    want = [_walk(raw["trees"], float(raw["base_score"]), list(row)) for row in x]
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)


@pytest.mark.parametrize(
    ("model", "product", "gbps"),
    [
        ("bert", "Tesla-K80", 10.0),
        ("bert", "Tesla-V100-SXM2-16GB", 25.0),
        ("resnet50", "NVIDIA-A100-SXM4-40GB", 10.0),
    ],
)
@pytest.mark.parametrize("batch", [8, 64, 1024])
def test_a_job_over_nodes_is_never_faster_than_its_all_reduce_can_go(
    predictor: Predictor, model: str, product: str, gbps: float, batch: int
) -> None:
    # 8 GPUs on two servers: every iteration ring-all-reduces the fp32 gradients over the network,
    # 2 x 7/8 x 4 bytes x parameters at gbps / 8 GB/s at best; the learned correction once predicted
    # BERT at global batch 8 on 8 K80s over 10 Gb/s at 19.8 it/s (its 1-GPU speed), truth 1.5.
    job = JobFeatures(model, "", batch)
    hw = HardwareFeatures(product, 8, 4, 2, "pcie", gbps)
    r = resolve(job, hw)
    ring_s = 2 * 7 / 8 * 4 * r.params / (gbps / 8 * 1e9)
    got = predictor.predict([(job, hw)]).iters_per_s[0]
    assert got <= 1.0 / (0.5 * ring_s) * (1 + 1e-9)


def test_a_job_far_below_its_measured_batches_is_not_sent_to_the_slowest_gpu(predictor: Predictor) -> None:
    # shufflenet_v2 (CIFAR-100) was measured on one P100, V100, A40 and RTX 6000 at per-GPU batch 8 and up,
    # never on a K80, so a K80 gets the measured anchor. At per-GPU batch 1 the measured trend (about the
    # same step time from 8 to 32) says a K80 runs about 1/8 of its batch-8 samples/s; holding the FLOP/s
    # of batch 8 instead had one K80 at 1 per GPU 2x faster than a V100 and 8 K80s (global batch 8, two
    # 4-GPU nodes as in the simulator's Gavel cluster) at 0.85 of 8 V100s, where the true table has 0.26.
    job = JobFeatures("shufflenet_v2", "cifar100", 8)
    one = JobFeatures("shufflenet_v2", "cifar100", 1)

    def samples(j: JobFeatures, hw: HardwareFeatures) -> float:
        return predictor.predict_one(j, hw).samples_per_s[0]

    k80_1, k80_8 = (samples(j, HardwareFeatures("K80", 1, 1, 1, "pcie")) for j in (one, job))
    assert k80_1 <= 0.25 * k80_8
    assert k80_1 < samples(one, HardwareFeatures("V100", 1, 1, 1, "nvlink"))
    k80 = samples(job, HardwareFeatures("K80", 8, 4, 2, "pcie", 10))
    v100 = samples(job, HardwareFeatures("V100", 8, 4, 2, "nvlink", 100))
    assert v100 >= 1.5 * k80


def test_the_split_correction_answers_only_models_the_table_never_measured(predictor: Predictor) -> None:
    # The shipped model carries the split correction across nodes (decision 0151); it answers a cross-node
    # row of a model without an anchor group, and a measured model, or any row on one node, reads as the
    # whole-step factor alone does.
    assert predictor.model.sync_forest is not None
    whole = Predictor(
        dataclasses.replace(predictor.model, sync_forest=None),
        predictor.meta,
        anchors=predictor.anchors,
        measured=predictor.measured,
    )
    across = HardwareFeatures("V100", 16, 8, 2, "nvlink", 25.0)
    measured_job = JobFeatures("resnet50", "imagenet", 512)
    new_job = JobFeatures("mynet", "", 512, params=25.6e6, flops_per_sample=24.5e9)
    assert predictor.anchors is not None
    assert predictor.anchors.group_index("resnet50", "imagenet", "fp32", "research") >= 0
    rows = [
        (measured_job, across),
        (new_job, HardwareFeatures("V100", 8, 8, 1)),
        (new_job, across),
    ]
    ours = predictor.predict(rows).samples_per_s
    base = whole.predict(rows).samples_per_s
    assert ours[0] == base[0] and ours[1] == base[1]
    assert ours[2] != base[2]
