"""CSV/flag rows become (job, placement) pairs with defaults, or errors naming the column."""

from __future__ import annotations

import pytest

from perfmodel.errors import InvalidInputError
from perfmodel.features import parse_row, resolve


def test_defaults_and_node_count() -> None:
    job, hw = parse_row(
        {
            "model": "ResNet-50",
            "batch_size": "256",
            "gpu_product": "NVIDIA-A100-SXM4-40GB",
            "gpus": "16",
            "gpus_per_node": "8",
        }
    )
    # 16 GPUs at 8 per node -> ceil(16 / 8) = 2 nodes; A100 SXM4 has NVLink -> nvlink by default
    assert (hw.num_gpus, hw.gpus_per_node, hw.num_nodes, hw.interconnect) == (16, 8, 2, "nvlink")
    assert (job.batch_size, job.precision, hw.network_gbps) == (256, "fp32", 100.0)
    r = resolve(job, hw)
    assert r.local_batch == 16.0  # 256 / 16 GPUs
    _, t4 = parse_row({"model": "bert", "batch_size": "8", "gpu_product": "Tesla-T4", "gpus": "4"})
    assert (t4.num_nodes, t4.gpus_per_node, t4.interconnect) == (1, 4, "pcie")  # T4 has no NVLink


def test_params_and_flops_replace_a_zoo_name() -> None:
    job, hw = parse_row(
        {"params": "1e8", "flops_per_sample": "3e11", "batch_size": "8", "gpu_product": "V100"}
    )
    r = resolve(job, hw)
    assert (r.params, r.flops_per_sample, r.low_confidence) == (1e8, 3e11, True)


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"model": "resnet51", "batch_size": "8", "gpu_product": "V100"}, "model: unknown model 'resnet51'"),
        ({"model": "resnet50", "batch_size": "0", "gpu_product": "V100"}, "batch_size: must be > 0"),
        ({"model": "resnet50", "batch_size": "x", "gpu_product": "V100"}, "batch_size: not a number"),
        ({"model": "resnet50", "gpu_product": "V100"}, "batch_size: missing"),
        ({"model": "resnet50", "batch_size": "8"}, "gpu_product: missing"),
        ({"model": "resnet50", "batch_size": "8", "gpu_product": "V100", "gpus": "0"}, "gpus: must be > 0"),
        ({"model": "resnet50", "batch_size": "8", "gpu_product": "V100", "gpus": "1.5"}, "gpus: not a whole"),
        ({"model": "resnet50", "batch_size": "8", "gpu_product": "V100", "precision": "int8"}, "precision:"),
        (
            {"model": "resnet50", "batch_size": "8", "gpu_product": "V100", "interconnect": "ib"},
            "interconnect:",
        ),
        (
            {"model": "resnet50", "batch_size": "8", "gpu_product": "V100", "network_gbps": "-1"},
            "network_gbps:",
        ),
    ],
)
def test_bad_rows_name_the_column(row: dict[str, str], message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        parse_row(row)
