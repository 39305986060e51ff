"""The in-node envelope's rule: monotone where the predictor extrapolates, the learned model where the
training table measured a falling in-node curve (``perfmodel.envelope.MeasuredInNode``)."""

from __future__ import annotations

import itertools

import pytest

from perfmodel.envelope import FALL_RATIO, MeasuredInNode
from perfmodel.features import HardwareFeatures, JobFeatures
from perfmodel.measurements import Measurement
from perfmodel.online import OnlineCorrector
from perfmodel.predictor import Predictor


@pytest.fixture(scope="module")
def predictor() -> Predictor:
    return Predictor.load()


def _m(model: str, gpu: str, n: int, link: str, iters: float, batch: int = 64, nodes: int = 1) -> Measurement:
    return Measurement("test", model, "movielens-20m", batch, gpu, n, nodes, n // nodes, link, 10.0, iters)


# A small table (iterations/s at global batch 64 unless said):
# - NCF on T4 (PCIe): 1 GPU 100; 2 GPUs 80 and 120 (two sources: median 100); 4 GPUs 90 -> ratios to the
#   best on fewer GPUs 100/100 = 1.0 and 90/100 = 0.9; at batch 128: 1 GPU 60, 2 GPUs 42 -> 42/60 = 0.7,
#   the deepest fall. Largest in-node count 4 (the two-node row on 8 GPUs does not count).
# - NCF on V100 over NVLink: 1, 2, 4 GPUs at 10, 19, 36 -> never falls (floor 1.0), largest 4.
# - NCF on A40 listed as "nvlink": an A40 has no NVLink, so it is the PCIe cell.
TABLE = [
    _m("ncf", "T4", 1, "pcie", 100.0),
    _m("ncf", "T4", 2, "pcie", 80.0),
    _m("ncf", "T4", 2, "pcie", 120.0),
    _m("ncf", "T4", 4, "pcie", 90.0),
    _m("ncf", "T4", 1, "pcie", 60.0, batch=128),
    _m("ncf", "T4", 2, "pcie", 42.0, batch=128),
    _m("ncf", "T4", 8, "pcie", 10.0, nodes=2),
    _m("ncf", "V100", 1, "nvlink", 10.0),
    _m("ncf", "V100", 2, "nvlink", 19.0),
    _m("ncf", "V100", 4, "nvlink", 36.0),
    _m("ncf", "A40", 2, "nvlink", 5.0),
]


def test_measured_in_node_cells_record_largest_count_and_deepest_fall() -> None:
    m = MeasuredInNode(TABLE)
    largest, floor = m.cell("ncf", "movielens-20m", "T4", False)
    assert largest == 4 and floor == pytest.approx(0.7)
    assert m.cell("ncf", "movielens-20m", "V100", True) == (4, 1.0)
    assert m.cell("ncf", "movielens-20m", "V100", False) == (0, 1.0)  # never measured over PCIe
    assert m.cell("ncf", "movielens-20m", "A40", False) == (2, 1.0)
    assert m.cell("ncf", "movielens-20m", "A40", True) == (0, 1.0)
    assert m.cell("ncf", "movielens-1m", "T4", False) == (0, 1.0)  # another dataset is another curve
    assert m.cell("resnet50", "imagenet", "H100", True) == (0, 1.0)


def test_rule_follows_falling_measured_curves_and_extrapolates_everything_else(predictor: Predictor) -> None:
    p = Predictor(predictor.model, predictor.meta, anchors=predictor.anchors, measured=MeasuredInNode(TABLE))
    ncf = JobFeatures("ncf", "movielens-20m", 256)
    on_t4 = [p.envelope_applies(ncf, HardwareFeatures("T4", n, n, 1, "pcie")) for n in range(1, 9)]
    # 1 GPU: nothing to envelope; 2..4: inside the falling T4 curve (floor 0.7 < FALL_RATIO); 5..8: more
    # GPUs than measured -> extrapolated.
    assert on_t4 == [False, False, False, False, True, True, True, True]
    assert FALL_RATIO > 0.7
    # The same model on V100 over NVLink was measured rising: there a fall could only be noise.
    assert p.envelope_applies(ncf, HardwareFeatures("V100", 2, 2, 1, "nvlink"))
    # ... and over PCIe it was never measured.
    assert p.envelope_applies(ncf, HardwareFeatures("V100", 2, 2, 1, "pcie"))
    # Unmeasured GPU type, parameters/FLOPs-only job, unknown GPU: extrapolated.
    assert p.envelope_applies(ncf, HardwareFeatures("NVIDIA-A100-SXM4-40GB", 4, 4))
    custom = JobFeatures("mynet", "", 256, params=25.6e6, flops_per_sample=24.5e9)
    assert p.envelope_applies(custom, HardwareFeatures("T4", 2, 2, 1, "pcie"))
    odd = HardwareFeatures("NVIDIA-RTX-X", 2, 2, 1, "pcie", memory_mib=16384, compute_capability="7.5")
    assert p.envelope_applies(ncf, odd)
    # Several nodes: never an envelope (a slow network may really make more GPUs slower).
    assert not p.envelope_applies(ncf, HardwareFeatures("NVIDIA-A100-SXM4-40GB", 16, 8, 2))
    # The flag forces it.
    p.envelope = "always"
    assert p.envelope_applies(ncf, HardwareFeatures("T4", 2, 2, 1, "pcie"))
    p.in_node_envelope = False
    assert p.envelope == "never"
    assert not p.envelope_applies(ncf, HardwareFeatures("NVIDIA-A100-SXM4-40GB", 4, 4))
    p.in_node_envelope = True
    assert p.envelope == "auto"
    # Without a measured table every row extrapolates.
    bare = Predictor(predictor.model, predictor.meta, anchors=predictor.anchors)
    assert bare.envelope_applies(ncf, HardwareFeatures("T4", 2, 2, 1, "pcie"))
    with pytest.raises(ValueError, match="envelope must be one of auto, always, never"):
        Predictor(predictor.model, predictor.meta, envelope="sometimes")


def test_default_follows_a_measured_in_node_fall_the_strict_envelope_hid(predictor: Predictor) -> None:
    # The shipped table (Gavel): LSTM on wikitext-2, global batch 40, P100s over PCIe in one node, measured
    # 1431, 1247, 1052, 668 samples/s on 1, 2, 4, 8 GPUs. The strict envelope held every count at the
    # 1-GPU prediction (~1500: 8 GPUs 2.3x too fast); the default follows the learned curve down.
    job = JobFeatures("lstm", "wikitext-2", 40)
    rows = [(job, HardwareFeatures("P100", n, n, 1, "pcie")) for n in (1, 2, 4, 8)]
    assert not any(predictor.envelope_applies(*r) for r in rows)
    got = predictor.predict(rows).samples_per_s
    strict = Predictor(
        predictor.model,
        predictor.meta,
        anchors=predictor.anchors,
        measured=predictor.measured,
        envelope="always",
    )
    held = strict.predict(rows).samples_per_s
    measured = [1431, 1247, 1052, 668]
    assert all(abs(g / m - 1) < 0.15 for g, m in zip(got, measured, strict=True)), got
    assert got[3] < got[2] < got[1] < got[0]
    assert held[3] > 2 * measured[3]


def test_default_keeps_rising_and_unmeasured_curves_monotone(predictor: Predictor) -> None:
    # ResNet-18 on CIFAR-10 on V100s over NVLink: measured in one node on 1..8 GPUs and never falling
    # (floor 1.0), so every count gets the envelope; ResNet-50 on A100s was never measured at all.
    cases = [
        (JobFeatures("resnet18", "cifar10", 256), "V100"),
        (JobFeatures("resnet50", "imagenet", 256), "NVIDIA-A100-SXM4-40GB"),
    ]
    assert predictor.measured is not None
    assert predictor.measured.cell("resnet18", "cifar10", "V100", True) == (8, 1.0)
    for job, gpu in cases:
        rows = [(job, HardwareFeatures(gpu, n, n, 1, "nvlink")) for n in range(1, 9)]
        assert all(predictor.envelope_applies(*r) for r in rows[1:])
        s = predictor.predict(rows).samples_per_s
        assert all(b >= a for a, b in itertools.pairwise(s)), s


def test_online_correction_keeps_the_rule(predictor: Predictor) -> None:
    # After observing the LSTM job on 4 P100s at its measured speed, the corrected sweep still falls
    # where the measurements fall (no envelope inside that curve), while the ResNet-50 sweep on A100s,
    # extrapolated, stays monotone after an observation on 4 GPUs at twice the prediction.
    c = OnlineCorrector(predictor)
    lstm = JobFeatures("lstm", "wikitext-2", 40)
    lstm_rows = [(lstm, HardwareFeatures("P100", n, n, 1, "pcie")) for n in range(1, 9)]
    c.observe(*lstm_rows[3], 1052.0, job_id="lstm")
    s = c.predict(lstm_rows, ["lstm"] * 8).samples_per_s
    assert s[7] < s[3] < s[0]
    resnet = JobFeatures("resnet50", "imagenet", 256)
    a100 = [(resnet, HardwareFeatures("NVIDIA-A100-SXM4-40GB", n, n)) for n in range(1, 9)]
    c.observe(*a100[3], 2.0 * predictor.predict([a100[3]]).samples_per_s[0], job_id="r")
    s = c.predict(a100, ["r"] * 8).samples_per_s
    assert all(b >= a for a, b in itertools.pairwise(s)), s
