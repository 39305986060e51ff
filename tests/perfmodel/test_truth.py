"""GroundTruth returns measured throughput exactly and extrapolates deterministically where unmeasured."""

from __future__ import annotations

import csv
import gzip
import statistics
from collections import defaultdict
from pathlib import Path

import pytest

from perfmodel.errors import InvalidInputError
from perfmodel.features import resolve
from perfmodel.llm import question_of
from perfmodel.measurements import SHIPPABLE, Measurement, merge, read_shared_tidy
from perfmodel.truth import GroundTruth


@pytest.fixture(scope="module")
def truth() -> GroundTruth:
    return GroundTruth.load()


def test_loads_shipped_table_without_shared_dir(truth: GroundTruth) -> None:
    assert len(truth.measurements) > 1000
    assert {"K80", "P100", "V100", "T4"} <= set(truth.gpu_types())
    assert "resnet50" in truth.models()


def test_measured_configurations_are_returned_exactly(truth: GroundTruth) -> None:
    # Layouts with the same GPU and node counts (Pollux "17" and "44" are both 8 GPUs on 2 nodes) are
    # one question for the truth API: their median is the answer.
    by_key: dict[tuple[str, str, int, str, int, int], list[float]] = defaultdict(list)
    for m in truth.measurements:
        by_key[(m.model, m.dataset, m.batch_size, m.gpu_type, m.num_gpus, m.num_nodes)].append(m.iters_per_s)
    for (model, ds, bs, gpu, n, nodes), values in list(by_key.items())[::61]:
        got = truth.throughput(model, bs, gpu, n, nodes, ds)
        assert got == pytest.approx(statistics.median(values), rel=1e-12)


def test_every_catalogue_entry_is_answerable(truth: GroundTruth) -> None:
    cat = truth.catalogue()
    assert cat
    for jt in cat[::7]:
        for gpu in jt.gpu_types:
            for n in (1, 2, 8):
                got = truth.throughput(jt.model, jt.batch_size, gpu, n, 1, jt.dataset)
                assert got is not None and got > 0


def test_extrapolation_is_deterministic_and_positive(truth: GroundTruth) -> None:
    # 3 GPUs of V100 for ResNet-50 at global batch 192 is not in the table
    a = truth.throughput("resnet50", 192, "V100", 3, 1, "imagenet")
    b = GroundTruth.load().throughput("ResNet-50", 192, "Tesla-V100-SXM2-16GB", 3, 1, "ImageNet")
    assert a is not None and a > 0 and a == b


def test_unmeasured_gpu_type_uses_spec_ratio_and_unknown_gives_none(truth: GroundTruth) -> None:
    # no A100 rows ship; ResNet-50 exists on other types, so rule 3 answers
    a100 = truth.throughput("resnet50", 64, "A100", 1)
    k80 = truth.throughput("resnet50", 64, "K80", 1)
    assert a100 is not None and k80 is not None and a100 > k80
    assert truth.throughput("gpt2", 8, "V100", 1) is None  # never measured
    assert truth.throughput("resnet50", 64, "NoSuchGPU", 1) is None
    assert truth.throughput("resnet18", 64, "V100", 1, dataset="imagenet") is None  # only CIFAR-10 measured


@pytest.mark.parametrize(("bs", "gpus", "nodes"), [(0, 1, 1), (32, 0, 1), (32, 2, 3)])
def test_invalid_questions_raise(truth: GroundTruth, bs: int, gpus: int, nodes: int) -> None:
    with pytest.raises(InvalidInputError):
        truth.throughput("resnet50", bs, "V100", gpus, nodes)


def _write_tidy(path: Path, rows: list[dict[str, str]]) -> None:
    cols = [
        "source",
        "source_file",
        "model",
        "dataset",
        "batch_size",
        "local_batch_size",
        "gpu_type",
        "num_gpus",
        "num_nodes",
        "placement",
        "amp",
        "power_limit_w",
        "iters_per_s",
        "samples_per_s",
        "epochs_per_s",
        "step_time_s",
        "sync_time_s",
        "raw_value",
        "raw_unit",
        "notes",
    ]
    with gzip.open(path, "wt", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=cols)
        w.writeheader()
        for r in rows:
            w.writerow({c: r.get(c, "") for c in cols})


def test_unit_conversions_and_license_filter(tmp_path: Path) -> None:
    _write_tidy(
        tmp_path / "throughput_isolated_tidy.csv.gz",
        [
            # Gavel: 40 steps/s summed over 4 workers of batch 16 -> global batch 64, 40 / 4 = 10 it/s
            {
                "source": "gavel",
                "source_file": "simulation_throughputs.json",
                "model": "ResNet-50",
                "batch_size": "16",
                "gpu_type": "V100",
                "num_gpus": "4",
                "placement": "consolidated",
                "iters_per_s": "40",
            },
            # Pollux aws: local batch 8 on 2 GPUs, step 0.5 s -> global 16, 2 it/s
            {
                "source": "pollux_sia",
                "source_file": "imagenet/placements-aws.csv",
                "model": "imagenet",
                "batch_size": "16",
                "local_batch_size": "8",
                "gpu_type": "T4",
                "num_gpus": "2",
                "num_nodes": "1",
                "placement": "2",
                "iters_per_s": "2",
            },
            # Zeus: 0.1 epochs/s of CIFAR-100 (50,000 samples) at batch 100 -> 5000 samples/s = 50 it/s;
            # the lower power limit row is ignored
            {
                "source": "zeus",
                "source_file": "summary_power_v100.csv",
                "model": "shufflenetv2",
                "dataset": "cifar100",
                "batch_size": "100",
                "gpu_type": "V100",
                "num_gpus": "1",
                "power_limit_w": "250",
                "epochs_per_s": "0.1",
            },
            {
                "source": "zeus",
                "source_file": "summary_power_v100.csv",
                "model": "shufflenetv2",
                "dataset": "cifar100",
                "batch_size": "100",
                "gpu_type": "V100",
                "num_gpus": "1",
                "power_limit_w": "100",
                "epochs_per_s": "0.05",
            },
            # Sia azure: no license -> not shippable
            {
                "source": "pollux_sia",
                "source_file": "imagenet/placements-azure.csv",
                "model": "imagenet",
                "batch_size": "8",
                "local_batch_size": "8",
                "gpu_type": "V100-32GB",
                "num_gpus": "1",
                "num_nodes": "1",
                "placement": "1",
                "iters_per_s": "3",
            },
        ],
    )
    shipped = read_shared_tidy(tmp_path, SHIPPABLE)
    got = {(m.source, m.model, m.batch_size, m.gpu_type, m.num_gpus): m.iters_per_s for m in shipped}
    assert got == {
        ("gavel", "resnet50", 64, "V100", 4): pytest.approx(10.0),
        ("pollux_aws", "resnet50", 16, "T4", 2): pytest.approx(2.0),
        ("zeus", "shufflenet_v2", 100, "V100", 1): pytest.approx(50.0),
    }
    everything = read_shared_tidy(tmp_path)
    assert any(m.source == "sia_azure" for m in everything)


def test_network_between_nodes_is_a_parameter_with_the_old_default() -> None:
    # Two nodes of A40s for ResNet-50: A40 was only measured on one GPU, so the sync part is the assumed
    # link (parameters x 4 bytes x ring factor / network). 100 Gb/s makes it faster than the default 10,
    # and the default gives the numbers it gave before the parameter existed (10 Gb/s).
    ms = GroundTruth.load().measurements
    slow, fast, explicit = GroundTruth(ms), GroundTruth(ms, 100.0), GroundTruth(ms, 10.0)
    args = ("resnet50", 256, "A40", 8, 2, "imagenet")
    assert slow.throughput(*args) == explicit.throughput(*args)
    assert fast.throughput(*args) > slow.throughput(*args)  # type: ignore[operator]
    one_node = ("resnet50", 256, "A40", 8, 1, "imagenet")
    assert fast.throughput(*one_node) == slow.throughput(*one_node)
    with pytest.raises(ValueError, match="network_gbps"):
        GroundTruth(ms, 0.0)


@pytest.mark.parametrize(
    ("model", "bs", "gpu", "n", "nodes", "ds", "measured_gbps"),
    [
        ("lstm", 20, "V100", 4, 4, "wikitext-2", 10.0),  # rule 1: Gavel measured it at 10 Gb/s
        ("lstm", 20, "V100", 8, 2, "wikitext-2", 10.0),  # rule 2: from Gavel's 10 Gb/s rows
        ("resnet50", 256, "P100", 16, 4, "imagenet", 10.0),  # rule 2, beyond the measured counts
        ("resnet50", 1304, "T4", 8, 2, "imagenet", 50.0),  # rule 1: Pollux measured it at 50 Gb/s
        ("resnet50", 256, "A40", 8, 2, "imagenet", 10.0),  # rule 3: V100's sync, measured at 10 Gb/s
    ],
)
def test_cross_node_answers_follow_the_placements_network(
    truth: GroundTruth, model: str, bs: int, gpu: str, n: int, nodes: int, ds: str, measured_gbps: float
) -> None:
    # The exposed gradient sync across nodes goes as 1 / link: a faster network is faster, the link the
    # rows were measured on gives the measured answer, and no network (None) answers as measured.
    as_measured = truth.throughput(model, bs, gpu, n, nodes, ds)
    at = {g: truth.throughput(model, bs, gpu, n, nodes, ds, network_gbps=g) for g in (5.0, 10.0, 25.0, 100.0)}
    assert as_measured is not None and all(v is not None for v in at.values())
    assert at[5.0] < at[10.0] < at[25.0] < at[100.0]  # type: ignore[operator]
    assert truth.throughput(model, bs, gpu, n, nodes, ds, network_gbps=measured_gbps) == pytest.approx(
        as_measured, rel=1e-12
    )
    samples = truth.samples_per_s(model, bs, gpu, n, nodes, ds, network_gbps=100.0)
    assert samples == pytest.approx(at[100.0] * bs)  # type: ignore[operator]


@pytest.mark.parametrize(
    ("model", "bs", "gpu", "n", "ds"),
    [
        ("lstm", 20, "V100", 4, "wikitext-2"),  # measured
        ("lstm", 20, "V100", 8, "wikitext-2"),  # extrapolated (8 GPUs in one node)
        ("resnet50", 256, "A40", 4, "imagenet"),  # another type's measurements
        ("resnet50", 64, "K80", 1, "imagenet"),  # one GPU
    ],
)
def test_in_node_answers_do_not_depend_on_the_network(
    truth: GroundTruth, model: str, bs: int, gpu: str, n: int, ds: str
) -> None:
    base = truth.throughput(model, bs, gpu, n, 1, ds)
    assert base is not None
    for gbps in (1.0, 10.0, 25.0, 400.0):
        assert truth.throughput(model, bs, gpu, n, 1, ds, network_gbps=gbps) == base


@pytest.mark.parametrize("gbps", [0.0, -10.0, float("nan"), float("inf")])
def test_a_network_that_is_not_a_positive_number_is_refused(truth: GroundTruth, gbps: float) -> None:
    with pytest.raises(InvalidInputError, match="network_gbps"):
        truth.throughput("lstm", 20, "V100", 8, 2, "wikitext-2", network_gbps=gbps)


def test_measured_v100_rows_carry_the_memory_their_runs_had(tmp_path: Path) -> None:
    """Gavel's V100 (AWS p3) is the 16 GB default, Zeus' the 32 GB PCIe card, Sia's Azure one the 32 GB
    SXM2: each row resolves to its GPU's memory and peak, and the same configuration measured on two of
    them stays two rows (``merge`` would otherwise take their median as a repeat)."""
    one = {"batch_size": "128", "num_gpus": "1", "num_nodes": "1", "placement": "1"}
    _write_tidy(
        tmp_path / "throughput_isolated_tidy.csv.gz",
        [
            {**one, "source": "gavel", "model": "ResNet-50", "gpu_type": "V100", "iters_per_s": "2"},
            {
                **one,
                "source": "zeus",
                "model": "resnet50",
                "dataset": "imagenet",
                "gpu_type": "V100",
                "power_limit_w": "250",
                "epochs_per_s": "0.0002",
            },
            {
                **one,
                "source": "pollux_sia",
                "source_file": "imagenet/placements-azure.csv",
                "model": "imagenet",
                "local_batch_size": "128",
                "gpu_type": "V100-32GB",
                "iters_per_s": "3",
            },
        ],
    )
    rows = merge(read_shared_tidy(tmp_path))
    specs = {m.source: resolve(*question_of(m)).spec for m in rows}
    assert sorted(specs) == ["gavel", "sia_azure", "zeus"]
    assert {s: spec.memory_gib for s, spec in specs.items()} == {"gavel": 16, "sia_azure": 32, "zeus": 32}
    assert specs["zeus"].variant == "V100-PCIE-32GB" and specs["zeus"].fp32_tflops == pytest.approx(14.0)
    assert specs["sia_azure"].variant == "V100-SXM2-32GB"


def test_sia_azure_rows_carry_the_links_their_runs_used_and_its_ncf_rows_are_left_out(tmp_path: Path) -> None:
    """Sia's Azure V100s ran one pod per GPU without InfiniBand: in-node traffic over PCIe, cross-node over
    24 Gb/s Ethernet. Its NCF rows (8-13x slower than the same harness elsewhere) are not read; another
    cluster's NCF and Azure's other models are."""
    one = {"source": "pollux_sia", "batch_size": "64", "local_batch_size": "32", "num_gpus": "2"}
    _write_tidy(
        tmp_path / "throughput_isolated_tidy.csv.gz",
        [
            {
                **one,
                "source_file": "imagenet/placements-azure.csv",
                "model": "imagenet",
                "gpu_type": "V100-32GB",
                "num_nodes": "1",
                "placement": "2",
                "iters_per_s": "3",
            },
            {
                **one,
                "source_file": "imagenet/placements-azure.csv",
                "model": "imagenet",
                "gpu_type": "V100-32GB",
                "num_nodes": "2",
                "placement": "11",
                "iters_per_s": "4",
            },
            {
                **one,
                "source_file": "ncf/placements-azure.csv",
                "model": "ncf",
                "gpu_type": "V100-32GB",
                "num_nodes": "1",
                "placement": "2",
                "iters_per_s": "9",
            },
            {
                **one,
                "source_file": "ncf/placements-aws.csv",
                "model": "ncf",
                "gpu_type": "T4",
                "num_nodes": "1",
                "placement": "2",
                "iters_per_s": "90",
            },
        ],
    )
    rows = read_shared_tidy(tmp_path)
    got = {(m.source, m.model, m.num_nodes): (m.interconnect, m.network_gbps) for m in rows}
    assert got == {
        ("sia_azure", "resnet50", 1): ("pcie", 24.0),
        ("sia_azure", "resnet50", 2): ("pcie", 24.0),
        ("pollux_aws", "ncf", 1): ("pcie", 50.0),
    }
    in_node = next(m for m in rows if m.source == "sia_azure" and m.num_nodes == 1)
    assert resolve(*question_of(in_node)).spec.variant == "V100-SXM2-32GB"


def test_the_truth_of_a_gpu_type_is_its_default_variant_where_that_was_measured() -> None:
    """Zeus measured ResNet-50 on a 32 GB PCIe V100 at batches Gavel measured on the 16 GB SXM2 default:
    the simulated V100 runs at Gavel's speed there (a second variant must not move the median), and Zeus's
    rows still answer a batch only Zeus measured."""

    def row(source: str, batch: int, its: float, product: str = "") -> Measurement:
        link = "pcie" if product else "nvlink"
        return Measurement(
            source, "resnet50", "imagenet", batch, "V100", 1, 1, 1, link, 10.0, its, gpu_product=product
        )

    rows = [
        row("gavel", 32, 7.8),
        row("zeus", 32, 9.9, "V100-PCIE-32GB"),
        row("gavel", 64, 4.4),
        row("zeus", 64, 4.9, "V100-PCIE-32GB"),
        row("zeus", 256, 1.3, "V100-PCIE-32GB"),
    ]
    truth = GroundTruth(rows)
    assert truth.throughput("resnet50", 32, "V100", 1, dataset="imagenet") == pytest.approx(7.8)
    assert truth.throughput("resnet50", 64, "V100", 1, dataset="imagenet") == pytest.approx(4.4)
    assert truth.throughput("resnet50", 256, "V100", 1, dataset="imagenet") == pytest.approx(1.3)
    assert GroundTruth(rows[1::2] + rows[4:]).throughput("resnet50", 32, "V100", 1, dataset="imagenet") == (
        pytest.approx(9.9)
    )


def test_spreading_a_gang_over_nodes_never_makes_it_faster(truth: GroundTruth) -> None:
    # Rule 5: the cross-node sync, measured at 10 Gb/s and scaled to a fast network, no longer falls
    # below the measured in-node sync (LSTM on 8 H100s read 1.6x faster over 2 nodes at 400 Gb/s).
    one = truth.throughput("lstm", 80, "H100", 8, 1, "wikitext-2")
    two = truth.throughput("lstm", 80, "H100", 8, 2, "wikitext-2", network_gbps=400.0)
    assert one is not None and two is not None and two <= one
    checked = 0
    for jt in truth.catalogue():
        for gpu in ("K80", "V100", "T4", "A100", "H100"):
            for n, nodes in ((4, 2), (8, 2), (8, 4)):
                base = truth.throughput(jt.model, jt.batch_size, gpu, n, 1, jt.dataset)
                for gbps in (10.0, 100.0, 400.0):
                    spread = truth.throughput(jt.model, jt.batch_size, gpu, n, nodes, jt.dataset, gbps)
                    if base is not None and spread is not None:
                        checked += 1
                        assert spread <= base * (1 + 1e-12), (jt, gpu, n, nodes, gbps)
    assert checked > 1000
