"""CSV/flag rows become (job, placement) pairs with defaults, or errors naming the column; the scaling
model's gradient all-reduce at large GPU counts."""

from __future__ import annotations

import pytest

from perfmodel.errors import InvalidInputError
from perfmodel.features import HardwareFeatures, JobFeatures, design_of, model_terms, parse_row, resolve
from perfmodel.scaling import allreduce_latency_s


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


def _mlperf_resnet50_on_h100(gpus: int) -> tuple[float, float, float]:
    """(compute, sync, sync floor) in seconds of MLPerf's ResNet-50 at 16 images per GPU on DGX H100 nodes
    (8 GPUs, 8 x 400 Gb/s), under the prior physics."""
    job = JobFeatures("resnet50", "imagenet", 16 * gpus, "amp", stack="mlperf")
    hw = HardwareFeatures("H100", gpus, min(gpus, 8), -(-gpus // 8), "nvlink", 3200.0)
    r = resolve(job, hw)
    compute, sync = model_terms([r])
    return float(compute[0]), float(sync[0]), float(design_of([r]).sync_floor[0])


def test_gradient_sync_at_thousands_of_gpus_takes_milliseconds_not_a_flat_rings_steps() -> None:
    # MLPerf Training v3.1 ran this job on 3,584 H100s in 448 nodes at ~5.7 ms a step. A flat ring over
    # 3,584 GPUs takes 2 x 3,583 steps: at NCCL's 4-14 us a hop that alone is 30-100 ms, at the 50 us
    # this model once charged 0.36 s. NCCL runs rings inside nodes and a tree (log2 of the nodes) across.
    compute, sync, floor = _mlperf_resnet50_on_h100(3584)
    assert sync < 3e-3
    assert sync < compute
    assert 0.0 < floor <= sync
    # the latency grows with log2(nodes) across the network: 448 nodes cost little more than 8
    lat_8, lat_448 = allreduce_latency_s(64, 8), allreduce_latency_s(3584, 448)
    assert 100e-6 < lat_8 < lat_448 < 2.5 * lat_8
    assert lat_448 < 1e-3
    assert _mlperf_resnet50_on_h100(3584)[1] < 1.5 * _mlperf_resnet50_on_h100(64)[1]


def test_allreduce_latency_inside_a_node_is_a_ring_and_across_nodes_the_cheaper_of_ring_and_tree() -> None:
    assert allreduce_latency_s(1) == 0.0
    # one node: 2 (g - 1) hops, rising with the GPU count
    one_node = [allreduce_latency_s(g) for g in (2, 4, 8)]
    assert one_node == sorted(one_node) and one_node[0] > 0.0
    # two nodes of 8: a tree's 2 network hops beat a ring's 2 (N - 1) + 28 in-node ones only a little
    assert allreduce_latency_s(8) < allreduce_latency_s(16, 2) < 2.0 * allreduce_latency_s(8)
    # the node count, not the GPU count, drives it across nodes
    assert allreduce_latency_s(1024, 128) < allreduce_latency_s(1024, 1024)


@pytest.mark.parametrize(
    ("model", "stack", "gpu", "tflops"),
    [
        # A100 SXM: FP32 19.5, TF32 156 dense TFLOP/s; V100 has no TF32 units (15.7 FP32).
        ("bert", "research", "A100", 19.5),  # plain PyTorch: FP32 matmuls
        ("bert", "vendor", "A100", 156.0),  # NVIDIA's containers: TF32 matmuls
        ("bert", "mlperf", "A100", 156.0),
        ("resnet50", "research", "A100", 156.0),  # cuDNN convolutions in TF32 by default
        ("yolov3", "research", "A100", 156.0),
        ("cyclegan", "research", "A100", 156.0),
        ("ncf", "research", "A100", 19.5),
        ("bert", "vendor", "V100", 15.7),
    ],
)
def test_fp32_peak_follows_the_stack_and_operator_class(
    model: str, stack: str, gpu: str, tflops: float
) -> None:
    r = resolve(JobFeatures(model, "", 64, "fp32", stack=stack), HardwareFeatures(gpu))
    assert r.nums[-1] == pytest.approx(tflops, rel=0.01)
