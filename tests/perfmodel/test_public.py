"""The public extracts come into the measurement convention with their provenance and licence."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfmodel.measurements import Measurement, read_table, write_table
from perfmodel.public import parse_llm_foundry, parse_megatron, parse_neusight, shippable
from perfmodel.public_nvidia import mlperf_network_gbps, parse_dle, parse_mlperf

_DLE_HEAD = (
    "GPUs | Batch size / GPU | Throughput - TF32 | Throughput  - mixed precision | "
    "Throughput speedup (TF32 - mixed precision) | Weak scaling - TF32 | Weak scaling  - mixed precision"
)


def _dle(readme: str, heading: str, row: str, header: str = _DLE_HEAD) -> dict[str, str]:
    return {"readme": readme, "heading_path": heading, "header_cells": header, "row_cells": row}


def test_dle_rows_become_one_measurement_per_precision_with_the_directory_licence() -> None:
    rows = [
        _dle(
            "PyTorch/Recommendation/NCF/README.md",
            "NCF > Training performance: NVIDIA DGX A100 (8x A100 40GB)",
            "8 | 131072 | 110.16M | 142.90M | 1.3 | 4.88 | 4.19",
        ),
        # A directory without a LICENSE: read, but not shippable.
        _dle(
            "TensorFlow2/LanguageModeling/BERT/README.md",
            "BERT > Training performance: NVIDIA DGX-1 (8x V100 16GB)",
            "1 | 8 | 10 | 30 | 3 | 1 | 1",
        ),
    ]
    ms = parse_dle(rows)
    ncf = [m for m in ms if m.model == "ncf"]
    assert {m.precision for m in ncf} == {"tf32", "amp"}
    tf32 = next(m for m in ncf if m.precision == "tf32")
    # global batch 8 x 131072, 110.16M samples/s -> iterations/s of the whole job
    assert (tf32.batch_size, tf32.num_gpus, tf32.gpu_product) == (8 * 131072, 8, "A100-SXM4-40GB")
    assert tf32.samples_per_s == pytest.approx(110.16e6)
    assert (tf32.stack, tf32.licence, tf32.source_file) == ("vendor", "Apache-2.0", rows[0]["readme"])
    assert tf32.commit and shippable(tf32)
    bert = [m for m in ms if m.model == "bert-large"]
    assert bert and not any(shippable(m) for m in bert)


def _mlperf(**fields: str) -> dict[str, str]:
    """An MLPerf Training index row: NVIDIA's v3.0 BERT on one DGX H100, with ``fields`` replaced."""
    row = {
        "round": "v3.0",
        "submitter": "NVIDIA",
        "system": "dgxh100_ngc23.04_pytorch",
        "benchmark": "bert",
        "accelerator": "NVIDIA H100-SXM5-80GB",
        "nodes": "1",
        "acc_per_node": "8",
        "interconnect": "",
        "host_networking": "",
        "r0_global_batch_size": "768",
        "r0_tracked_throughput_median": "4000",
    }
    return {**row, **fields}


def test_mlperf_bert_counts_a_packed_sequences_work_within_the_gpus_peak() -> None:
    """MLPerf's BERT runs packed Wikipedia sequences, about 256 real tokens each: NVIDIA's 8 x A100 v3.0
    row (2,558 sequences/s) then needs about half the A100's FP16 peak, where 512 tokens would exceed it."""
    a100 = parse_mlperf(
        [
            _mlperf(
                accelerator="NVIDIA A100-SXM4-80GB",
                r0_global_batch_size="448",
                r0_tracked_throughput_median="2558",
            )
        ]
    )[0]
    per_gpu_tflops = a100.samples_per_s / a100.num_gpus * a100.flops_per_sample / 1e12
    assert a100.precision == "amp"
    assert 0.4 * 312.0 < per_gpu_tflops < 0.6 * 312.0
    # 6 N T + 12 L T^2 d over BERT-large's 302 M non-embedding parameters at T = 256.
    assert a100.flops_per_sample == pytest.approx(6 * 302e6 * 256 + 12 * 24 * 256**2 * 1024)


def test_mlperf_rows_keep_the_rounds_licence_and_whole_system_throughput() -> None:
    base = _mlperf(benchmark="resnet", r0_global_batch_size="3456", r0_tracked_throughput_median="30000")
    ok = parse_mlperf([{**base, "round": "v4.0"}])[0]
    unlicensed = parse_mlperf([{**base, "round": "v4.1"}])[0]
    assert (ok.gpu_type, ok.gpu_product, ok.interconnect, ok.stack) == (
        "H100",
        "H100-80GB-HBM3",
        "nvlink",
        "mlperf",
    )
    assert ok.samples_per_s == pytest.approx(30000) and ok.batch_size == 3456
    assert shippable(ok) and not shippable(unlicensed)
    # Not an NVIDIA GPU, or no throughput: skipped.
    assert parse_mlperf([{**base, "round": "v4.0", "accelerator": "Habana Gaudi2"}]) == []
    assert parse_mlperf([{**base, "round": "v4.0", "r0_tracked_throughput_median": ""}]) == []


def test_mlperf_bert_on_hopper_and_blackwell_is_fp8_except_the_clipafter_runs() -> None:
    # The submissions' config_*.sh enable Transformer Engine FP8 (--use_transformer_engine2) for BERT on
    # H100/H200/B200/GB200, except NVIDIA's 64-434-node H100 runs at 2-3 sequences per GPU.
    base = _mlperf()
    one_node = parse_mlperf([base])[0]
    gb200 = parse_mlperf(
        [
            {
                **base,
                "accelerator": "NVIDIA Blackwell GPU (GB200)",
                "nodes": "128",
                "acc_per_node": "4",
                "r0_global_batch_size": "8192",
            }
        ]
    )[0]
    clipafter = parse_mlperf([{**base, "nodes": "434", "r0_global_batch_size": "13888"}])[0]
    a100 = parse_mlperf([{**base, "accelerator": "NVIDIA A100-SXM4-80GB"}])[0]
    resnet = parse_mlperf([{**base, "benchmark": "resnet", "r0_global_batch_size": "3200"}])[0]
    assert (one_node.model, one_node.precision) == ("bert-large", "fp8")
    assert gb200.precision == "fp8"
    assert (clipafter.precision, a100.precision, resnet.precision) == ("amp", "amp", "amp")


def test_the_mlperf_result_whose_tracked_throughput_contradicts_its_run_time_is_left_out() -> None:
    # v3.0 NVIDIA 64 x DGX H100 ResNet-50: result_0 tracks 5.57M images/s, but its 50 epochs of ImageNet
    # took 31.97 s (2.00M images/s); the same code's 8-node row is consistent and stays.
    n64 = _mlperf(
        system="dgxh100_n64_ngc23.04_mxnet",
        benchmark="resnet",
        nodes="64",
        interconnect="NVLINK Gen4 900 GB/s + NVSWITCH Gen3",
        host_networking="Compute: 8x ConnectX-7 IB NDR 400Gb/s",
        r0_global_batch_size="20480",
        r0_tracked_throughput_median="5572642.401",
    )
    n8 = {
        **n64,
        "system": "dgxh100_n8_ngc23.04_mxnet",
        "nodes": "8",
        "r0_global_batch_size": "3200",
        "r0_tracked_throughput_median": "294759.222",
    }
    assert parse_mlperf([n64]) == []
    (kept,) = parse_mlperf([n8])
    assert kept.num_gpus == 64 and kept.samples_per_s == pytest.approx(294759.222)
    # Nor is it in the shipped table (a 512-GPU H100 ResNet-50 row from that file).
    shipped = read_table(Path(__file__).parents[2] / "perfmodel" / "data" / "measurements.csv.gz")
    assert not [m for m in shipped if "dgxh100_n64_ngc23.04_mxnet/resnet" in m.source_file]
    assert [m for m in shipped if "dgxh100_n8_ngc23.04_mxnet/resnet" in m.source_file]


def test_llm_rows_are_sequences_with_flops_per_sequence_and_zoo_style_names() -> None:
    foundry = {
        "Model": "7b",
        "SeqLen (T)": "2048",
        "# GPUs": "8",
        "GPU": "h100_80gb",
        "GlobalBatchSize": "48",
        "Throughput (S/s)": "14",
        "Throughput (T/s)": "29000",
        "NumParams": "6658859008",
        "Precision": "amp_bf16",
    }
    m = parse_llm_foundry([foundry])[0]
    assert (m.model, m.precision, m.sharding, m.seq_len, m.stack) == ("mpt-7b", "bf16", "fsdp", 2048, "llm")
    assert m.samples_per_s == pytest.approx(29000 / 2048)
    # 6 N T dominates: between 6 x params x 2048 x 0.9 and x 1.3
    assert 0.9 < m.flops_per_sample / (6 * 6.658859008e9 * 2048) < 1.3
    neusight = {
        "gpu": "NVIDIA_A100_80GB_PCIe",
        "model": "gpt2_large",
        "mode": "train",
        "seq_len": "1024",
        "batch": "4",
        "variant": "",
        "e2e_latency_ms": "1635.7",
        "path": "scripts/asplos/label/x.json",
    }
    n = parse_neusight([neusight, {**neusight, "mode": "inf"}, {**neusight, "variant": "tp4"}])
    assert len(n) == 1 and n[0].model == "gpt2-large" and n[0].licence == "MIT"
    assert n[0].iters_per_s == pytest.approx(1000 / 1635.7) and n[0].gpu_product == "A100-80GB-PCIE"


def test_table_round_trips_provenance_and_reads_tables_written_before_it(tmp_path: Path) -> None:
    m = Measurement(
        "nvidia_dle",
        "resnet50",
        "imagenet",
        256,
        "A100",
        1,
        1,
        1,
        "nvlink",
        200.0,
        3.5,
        precision="tf32",
        stack="vendor",
        gpu_product="A100-SXM4-80GB",
        source_file="PyTorch/Classification/ConvNets/resnet50v1.5/README.md",
        commit="abc",
        licence="BSD-3-Clause",
    )
    path = tmp_path / "t.csv.gz"
    write_table([m], path)
    assert read_table(path) == [m]
    # A table of the old layout (no precision/provenance columns) reads with the defaults.
    import gzip

    old = tmp_path / "old.csv.gz"
    with gzip.open(old, "wt") as fh:
        fh.write(
            "source,model,dataset,batch_size,gpu_type,num_gpus,num_nodes,gpus_per_node,interconnect,"
            "network_gbps,iters_per_s\ngavel,lstm,wikitext-2,40,P100,1,1,1,pcie,10,35.7\n"
        )
    (row,) = read_table(old)
    assert (row.precision, row.stack, row.licence) == ("fp32", "research", "")


@pytest.mark.parametrize(
    ("text", "gbps"),
    [
        # the compute fabric, not the storage adapters named first
        (
            "Storage: 2x ConnectX-7 IB NDR 400Gb/s, Compute: 8x ConnectX-7 IB NDR 400Gb/s, "
            "Management: 100Gb/s",
            3200,
        ),
        ("Management: 1 x 25 Gb / Sec Ethernet, Compute: 1 x ConnectX - 6 IB HDR100 100 Gb / Sec", 100),
        ("2x ConnectX-6 IB HDR 200Gb/Sec", 400),
        ("1x Ethernet 80Gb/Sec, 8x NVIDIA NDR (400Gb/s)", 3200),
        ("8x ConnectX-7 IB NDR 400Gb/s + 200Gb/s Ethernet NIC", 3200),
        ("Intel XXV710 25Gb/s Ethernet", 25),
        # GB/s figures are PCIe buses; no rate at all: the default
        ("ROCE2; Data bandwidth for GPU-PCIe: 504 GB/s; PCIe-NIC: 500 GB/s", 200),
        ("Infiniband, Ethernet", 200),
        ("", 200),
    ],
)
def test_mlperf_network_is_the_nodes_compute_fabric(text: str, gbps: float) -> None:
    assert mlperf_network_gbps(text) == gbps


def test_dle_fp32_columns_on_ampere_are_tf32_and_dgx_networks_are_per_node() -> None:
    rows = [
        _dle(
            "PyTorch/Recommendation/NCF/README.md",
            "NCF > Training performance: NVIDIA DGX A100 (8x A100 40GB)",
            "8 | 131072 | 110.16M | 142.90M | 1.3 | 4.88 | 4.19",
        )
    ]
    rows[0]["header_cells"] = rows[0]["header_cells"].replace("TF32", "FP32")
    ms = parse_dle(rows)
    assert {m.precision for m in ms} == {"tf32", "amp"}
    assert {m.network_gbps for m in ms} == {1600.0}  # DGX A100: 8 x 200 Gb/s


def test_dle_accumulated_batch_under_the_batch_column_becomes_the_micro_batch() -> None:
    # PaddlePaddle's table gives the accumulated batch under "Batch size / GPU"; PyTorch's gives both
    head = (
        "GPUs | Batch size / GPU (TF32 and FP16) | Accumulation steps (TF32 and FP16) | Sequence length | "
        "Throughput - TF32(sequences/sec) | Throughput - mixed precision(sequences/sec)"
    )
    both = head.replace("| Accumulation", "| Accumulated Batch size / GPU (TF32 and FP16) | Accumulation")
    heading = "BERT > Training performance: NVIDIA DGX A100 (8x A100 80GB) > Pre-training NVIDIA DGX A100"
    paddle = _dle(
        "PaddlePaddle/LanguageModeling/BERT/README.md",
        heading,
        "8 | 8192 and 8192 | 64 and 32 | 128 | 2428 | 5541",
        head,
    )
    torch = _dle(
        "PyTorch/LanguageModeling/BERT/README.md",
        heading,
        "8 | 128 and 256 | 8192 and 8192 | 64 and 32 | 128 | 2505 | 4591",
        both,
    )
    for row in (paddle, torch):
        ms = parse_dle([row])
        assert {m.precision: m.batch_size // m.num_gpus for m in ms} == {"tf32": 128, "amp": 256}
        assert {m.precision: m.dataset for m in ms} == {"tf32": "wikipedia-seq128", "amp": "wikipedia-seq128"}
    # one GPU's step at micro-batch 256 in FP16: 5541 sequences/s over 8 GPUs
    amp = next(m for m in parse_dle([paddle]) if m.precision == "amp")
    assert amp.iters_per_s == pytest.approx(5541 / (8 * 256))


_MEGATRON_HEAD = "Model | #-GPUs | GBS | MBS | Sequence Length | FSDP | TP | PP | CP | VP | EP | GA"
_MEGATRON_TAIL = " | Tokens / sec / GPU | Model TFLOP / sec / GPU"


def test_megatron_rows_of_a_table_without_a_precision_column_are_not_read_as_bf16() -> None:
    row = "LLAMA3_8B | 8 | 128 | 1 | 8192 | 0 | 1 | 1 | 1 | n/a | 1 | 16 | 14079 | 725"
    stated = {
        "container": "25.11",
        "task": "pretraining",
        "section": "System: DGX-H100",
        "header": _MEGATRON_HEAD + " | Precision" + _MEGATRON_TAIL,
        "row": row.replace(" | 14079", " | FP8 | 14079"),
    }
    # the 25.09 tables have no Precision column; their figures are the FP8 ones (725 TFLOP/s a GPU is
    # 73% of an H100's BF16 peak): not BF16, and not a guess either
    unstated = {**stated, "container": "25.09", "header": _MEGATRON_HEAD + _MEGATRON_TAIL, "row": row}
    (m,) = parse_megatron([stated, unstated])
    assert (m.model, m.gpu_type, m.precision, m.num_gpus) == ("llama3-8b", "H100", "fp8", 8)


def test_an_llm_row_is_asked_with_the_micro_batch_and_checkpointing_its_run_used(tmp_path: Path) -> None:
    """llm-foundry's MPT-30B on 8 H100s (2,048 tokens, global batch 504, micro-batch 3, activation
    checkpointing: 7.82 sequences/s). Asked without its memory plan (whole per-GPU batch, no
    recomputation) perfmodel.llm answered 1.7x too fast; asked as run, within 25%."""
    from perfmodel.predictor import Predictor
    from perfmodel.train import rows_of

    foundry = {
        "Model": "30b",
        "SeqLen (T)": "2048",
        "# GPUs": "8",
        "GPU": "h100_80gb",
        "MicroBatchSize": "3",
        "GradAccum": "21",
        "GlobalBatchSize": "504",
        "Throughput (S/s)": "7",
        "Throughput (T/s)": "16022",
        "NumParams": "29975214080",
        "Precision": "amp_bf16",
        "Activation Checkpointing": "True",
    }
    (m,) = parse_llm_foundry([foundry])
    assert (m.micro_batch, m.activation_checkpointing) == (3, True)
    path = tmp_path / "t.csv.gz"
    write_table([m], path)
    (back,) = read_table(path)
    assert (back.micro_batch, back.activation_checkpointing) == (3, True)
    (row,) = rows_of([back])
    got = Predictor.load(anchors=False).predict([row]).samples_per_s[0]
    assert got / m.samples_per_s == pytest.approx(1.0, abs=0.25)


def test_dle_multi_node_tables_without_a_per_node_column_count_the_dgx_named_in_the_heading() -> None:
    # TensorFlow BERT's DGX-2H multi-node table: one node is the 16 GPUs of the single-node table's last row
    head = (
        "Num Nodes | Sequence Length | Batch size / GPU: mixed precision, FP32 | "
        "Gradient Accumulation: mixed precision, FP32 | Global Batch Size | Throughput - mixed precision | "
        "Throughput - FP32"
    )
    dgx2 = _dle(
        "TensorFlow/LanguageModeling/BERT/README.md",
        "BERT > Training performance: NVIDIA DGX-2 (16x V100 32GB) > Pre-training training performance: "
        "multi-node on DGX-2H 32GB",
        "4 | 512 | 8 , 8 | 64 , 64 | 32768 | 2284.23 | 765.04",
        head,
    )
    ms = parse_dle([dgx2])
    assert {(m.num_gpus, m.num_nodes, m.gpus_per_node) for m in ms} == {(64, 4, 16)}
    fp32 = next(m for m in ms if m.precision == "fp32")
    assert fp32.iters_per_s == pytest.approx(765.04 / (64 * 8))
    # a DGX-1 / DGX A100 node is 8 GPUs
    dgx1 = dict(dgx2, heading_path="BERT > Training performance: NVIDIA DGX-1 (8x V100 32GB) > multi-node")
    assert {(m.num_gpus, m.gpus_per_node) for m in parse_dle([dgx1])} == {(32, 8)}
