"""Measured throughput tables: reading ``../shared/throughput`` and the shipped copy in ``perfmodel/data``.

The shared tidy table (``throughput_isolated_tidy.csv.gz``) mixes units and conventions. This module
turns every row into one convention, a ``Measurement`` of a data-parallel job: ``batch_size`` is the global
batch (all GPUs), ``iters_per_s`` counts global iterations of the whole job and ``samples_per_s`` =
``iters_per_s * batch_size``:

- Gavel / Shockwave (``steps/s``): a job type's batch size is per worker and a multi-GPU job's steps are
  counted on every worker (``LM (batch size 5)`` reaches 698 steps/s on 8 V100s, 6.4x its 1-GPU rate, which
  only per-worker counting allows). So global batch = batch x GPUs, iterations/s = steps/s / GPUs,
  samples/s = steps/s x batch. ``unconsolidated`` placements are taken as one GPU per server.
- Pollux / Sia: ``step_time`` is seconds per iteration at ``local_bsz`` per GPU, so iterations/s =
  1 / step_time and global batch = GPUs x local_bsz.
- ElasticFlow: rows are global batch sizes, values iterations/s.
- Zeus: epochs/s at the default (highest) power limit, median over optimizers, times the dataset's
  training-set size from ``perfmodel.zoo`` -> samples/s. Its NSDI'23 artifact ran PyTorch 1.10.1 (the
  Dockerfile at ml-energy/zeus@9703b31), whose defaults run matmuls and convolutions in TF32 on the A40;
  the rows keep the ``fp32`` and ``research`` their job asked for (decision 0123).

Rows with the same configuration (model, dataset, global batch, GPU type, GPUs, nodes, GPUs per node) from
several files (Gavel's simulation and physical tables, Shockwave's re-measurements) are merged into their
median, so no configuration appears twice (which would leak between a training and a hold-out split).
``SHIPPABLE`` names the permissively licensed sources that may be copied into the package; the others
(Sia's azure/quad/rtx tables, no license) are read from ``../shared`` only, by benchmarks and tests.
``LEFT_OUT`` names rows that the same harness on other clusters contradicts; they are read by no table.

Pure functions except ``read_shared_tidy``/``read_table``/``write_table``, which read or write the named file.
"""

from __future__ import annotations

import csv
import gzip
import io
import logging
import math
import statistics
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import MISSING, dataclass, fields, replace
from pathlib import Path
from typing import Any

from perfmodel.datasets import canonical_dataset, dataset_info
from perfmodel.errors import ModelFileError

log = logging.getLogger(__name__)

TIDY_FILE = "throughput_isolated_tidy.csv.gz"

# (source, cluster) -> shippable? ``cluster`` is the Pollux/Sia suffix; other sources have one cluster.
LICENSES: dict[str, str] = {
    "gavel": "MIT",
    "shockwave": "MIT",
    "elasticflow": "Apache-2.0",
    "zeus": "Apache-2.0",
    "pollux_aws": "Apache-2.0 (Pollux OSDI'21 artifact)",
    "sia_azure": "no license file: not shipped",
    "sia_quad": "no license file: not shipped",
    "sia_rtx": "no license file: not shipped",
}
SHIPPABLE = frozenset({"gavel", "shockwave", "elasticflow", "zeus", "pollux_aws"})
# Repository commit of each tidy source (``../shared/throughput/README.md``).
TIDY_COMMITS = {
    "gavel": "stanford-futuredata/gavel@c4fa4009",
    "shockwave": "uw-mad-dash/shockwave@8a44f4a2",
    "pollux_sia": "siasosp23/artifacts@aaf7a0de",
    "elasticflow": "pkusys/ElasticFlow@04a0109a",
    "zeus": "ml-energy/zeus@75a8b939",
}

# Source tidy names -> (zoo model, dataset).
_MODEL_MAP: dict[str, tuple[str, str]] = {
    # Gavel / Shockwave job types (Gavel's job table: CIFAR-10 ResNet-18, ImageNet ResNet-50, Multi30k
    # Transformer, Wikitext-2 LSTM, ML-20M autoencoder, Pong A3C, monet2photo CycleGAN).
    "ResNet-18": ("resnet18", "cifar10"),
    "ResNet-50": ("resnet50", "imagenet"),
    "Transformer": ("transformer", "multi30k"),
    "LM": ("lstm", "wikitext-2"),
    "Recommendation": ("recommendation", "movielens-20m"),
    "A3C": ("a3c", "pong"),
    "CycleGAN": ("cyclegan", "monet2photo"),
    # Pollux / Sia / ElasticFlow application names.
    "bert": ("bert", "squad"),
    "cifar10": ("resnet18", "cifar10"),
    "deepspeech2": ("deepspeech2", "librispeech"),
    "imagenet": ("resnet50", "imagenet"),
    "ncf": ("ncf", "movielens-20m"),
    "yolov3": ("yolov3", "voc"),
    # Zeus network names (dataset given by the row).
    "bert_base_uncased": ("bert", ""),
    "resnet50": ("resnet50", ""),
    "shufflenetv2": ("shufflenet_v2", ""),
}
# Gavel job types without a batch size in their name: Gavel's job table runs CycleGAN with its default
# batch of 1 image and A3C with 4 workers (taken as a batch of 4 environment steps).
_DEFAULT_BATCH = {"CycleGAN": 1.0, "A3C": 4.0}
_GPU_MAP = {"V100-32GB": "V100", "QuadroRTX6000": "RTX6000"}
# The exact product where a tidy source's GPU is not its type's default variant (``perfmodel.gpus``: a V100
# is the 16 GB SXM2 card unless a row says otherwise), keyed by (source, the tidy table's GPU name). Sia's
# ``azure`` cluster is Azure's ND40rs_v2 (eight 32 GB V100 SXM2; the tidy table says ``V100-32GB``). Zeus
# does not name the variant: its V100's highest power limit is 250 W, the PCIe card's board power (SXM2:
# 300 W), and its largest batches, which Zeus swept to each GPU's memory limit, exceed those on its 24 GB
# RTX 6000 (ResNet-50 360 against 256 images, DeepSpeech2 192 against 128, BERT 56 against 32): 32 GB.
_GPU_PRODUCT: dict[tuple[str, str], str] = {
    ("zeus", "V100"): "V100-PCIE-32GB",
    ("sia_azure", "V100-32GB"): "V100-SXM2-32GB",
}

# Intra-node link and inter-node network of each measured cluster (public instance specs; where the
# source does not say, an assumption marked as such).
_CLUSTER_LINKS: dict[tuple[str, str], tuple[str, float]] = {
    ("gavel", "V100"): ("nvlink", 10.0),  # AWS p3 (V100 SXM2), 10 Gb/s
    ("gavel", "P100"): ("pcie", 10.0),  # GCP P100 PCIe (assumption: 10 Gb/s)
    ("gavel", "K80"): ("pcie", 10.0),  # AWS p2, 10 Gb/s
    ("pollux_aws", "T4"): ("pcie", 50.0),  # g4dn.12xlarge: 4 x T4 PCIe, 50 Gb/s
    ("elasticflow", "T4"): ("pcie", 50.0),  # same measurements as Pollux aws
    # ND40rs_v2 has 8 x V100 on NVLink and 100 Gb/s InfiniBand, but the Pollux/Sia harness runs one pod per
    # GPU (``nvidia.com/gpu: 1``, ``rdma/hca: 0`` in its AdaptDL job specs), so its runs saw neither: NCCL
    # moves in-node traffic through host memory (PCIe) and cross-node traffic over TCP on the VMs' Ethernet
    # (24 Gb/s, Azure's listed figure). The rows agree: ResNet-50's gradient sync takes 0.071 s on 2 GPUs
    # of one node and 0.003 s on 2 GPUs of two nodes, 0.33 s on 8 GPUs of one node and 0.19 s on 2 x 8.
    ("sia_azure", "V100"): ("pcie", 24.0),
    ("sia_quad", "RTX6000"): ("pcie", 10.0),  # assumption
    ("sia_rtx", "RTX2080Ti"): ("pcie", 10.0),  # assumption
}

# Rows left out of every table, with the reason: the same harness's rows on other clusters contradict them.
# Sia's Azure NCF steps take 0.097 s at a per-GPU batch of 32 on one V100 (0.19 s at 32,768), where the
# same AdaptDL NCF takes 0.0073 s on a T4 (Pollux aws), 0.0092 s on an A100 (Sia's dgx), 0.012-0.013 s on
# an RTX 2080 Ti and a Quadro RTX 6000: 8-13x slower on a GPU no slower than those, at every batch and
# placement, which no description of the hardware explains.
LEFT_OUT: dict[tuple[str, str], str] = {
    (
        "sia_azure",
        "ncf",
    ): "1-GPU steps 8-13x slower than the same harness on T4, A100, RTX 2080 Ti and RTX 6000",
}


@dataclass(frozen=True, slots=True)
class Measurement:
    """One measured configuration of a data-parallel training job (see the module docstring for units)."""

    source: str
    model: str
    dataset: str
    batch_size: int
    gpu_type: str
    num_gpus: int
    num_nodes: int
    gpus_per_node: int
    interconnect: str
    network_gbps: float
    iters_per_s: float
    # What else the public sources state (``perfmodel.public``): the job's precision and software stack,
    # the exact product (a ``gpus`` variant; empty = the type's default), parameters and training FLOPs
    # per sample where the zoo has no entry or the sample differs (0 = the zoo's), sequence length and
    # sharding of LLM rows, and the row's provenance.
    precision: str = "fp32"
    stack: str = "research"
    gpu_product: str = ""
    params: float = 0.0
    flops_per_sample: float = 0.0
    seq_len: int = 0
    sharding: str = "ddp"
    tensor_parallel: int = 1
    pipeline_parallel: int = 1
    context_parallel: int = 1
    # What an LLM row's run stated of its memory plan (llm-foundry's table does): sequences per GPU per
    # forward pass (0 = not stated) and activation checkpointing. A user states both in the TrainingJob
    # (``microBatchSize``, ``activationCheckpointing``); asked without them, perfmodel.llm answers a run
    # with no recomputation at the whole per-GPU batch (the 30B rows of llm-foundry read 1.7x too fast).
    micro_batch: int = 0
    activation_checkpointing: bool = False
    source_file: str = ""
    commit: str = ""
    licence: str = ""

    @property
    def local_batch_size(self) -> float:
        return self.batch_size / self.num_gpus

    @property
    def samples_per_s(self) -> float:
        return self.iters_per_s * self.batch_size

    @property
    def data_parallel(self) -> bool:
        """Whether the row is plain or sharded data parallelism (no tensor, pipeline or context split)."""
        return self.tensor_parallel * self.pipeline_parallel * self.context_parallel == 1

    def config_key(self) -> tuple[object, ...]:
        return (
            self.model,
            self.dataset,
            self.batch_size,
            self.gpu_type,
            self.num_gpus,
            self.num_nodes,
            self.gpus_per_node,
            self.precision,
            self.stack,
            self.gpu_product,
            self.flops_per_sample,
            self.sharding,
            self.tensor_parallel,
            self.pipeline_parallel,
            self.context_parallel,
            self.micro_batch,
            self.activation_checkpointing,
        )


def _f(value: str) -> float | None:
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def _source_of(row: dict[str, str]) -> str:
    src = row["source"]
    if src == "pollux_sia":
        cluster = row["source_file"].rsplit("-", 1)[-1].removesuffix(".csv")
        return "pollux_aws" if cluster == "aws" else f"sia_{cluster}"
    return src


def _convert(row: dict[str, str]) -> Measurement | None:
    """One tidy row -> a Measurement in the common convention, or None when it cannot be used."""
    src = _source_of(row)
    mapped = _MODEL_MAP.get(row["model"])
    if mapped is None:  # gpt_pmp: pipeline-parallel, not a data-parallel job
        return None
    model, dataset = mapped
    if src == "zeus":  # Zeus names its dataset per row (NCF on MovieLens-1M, BERT on two datasets)
        dataset = row.get("dataset", "")
    dataset = canonical_dataset(dataset or row.get("dataset", ""))
    gpu = _GPU_MAP.get(row["gpu_type"], row["gpu_type"])
    product = _GPU_PRODUCT.get((src, row["gpu_type"]), "")
    n = int(float(row["num_gpus"]))
    bs = _f(row["batch_size"]) or _DEFAULT_BATCH.get(row["model"])
    if bs is None or bs <= 0 or n <= 0:
        return None
    links = _CLUSTER_LINKS.get(("gavel" if src == "shockwave" else src, gpu), ("pcie", 10.0))
    if src in ("gavel", "shockwave"):
        raw = _f(row["iters_per_s"])
        if raw is None or raw <= 0:
            return None
        unconsolidated = row["placement"] == "unconsolidated" and n > 1
        nodes, per_node = (n, 1) if unconsolidated else (1, n)
        return Measurement(src, model, dataset, int(bs) * n, gpu, n, nodes, per_node, *links, raw / n)
    if src.startswith(("pollux", "sia")):
        its = _f(row["iters_per_s"])
        if its is None or its <= 0:
            return None
        nodes = int(float(row["num_nodes"] or 1))
        placement = row["placement"]
        per_node = max(int(c) for c in placement) if placement else -(-n // nodes)
        return Measurement(
            src,
            model,
            dataset,
            round(bs),
            gpu,
            n,
            nodes,
            per_node,
            *links,
            its,
            gpu_product=product,
        )
    if src == "elasticflow":
        its = _f(row["iters_per_s"])
        if its is None or its <= 0:
            return None
        nodes = -(-n // 4)  # g4dn.12xlarge: 4 GPUs per node
        return Measurement(src, model, dataset, int(bs), gpu, n, nodes, min(n, 4), *links, its)
    if src == "zeus":
        eps = _f(row["epochs_per_s"])
        info = dataset_info(dataset)
        if eps is None or eps <= 0 or info is None:
            return None
        samples = eps * info.train_samples
        return Measurement(
            src, model, dataset, int(bs), gpu, 1, 1, 1, "pcie", 10.0, samples / bs, gpu_product=product
        )
    return None


def _zeus_default_power(rows: Iterable[dict[str, str]]) -> list[dict[str, str]]:
    """Keep Zeus rows at each (GPU, dataset, network, batch)'s highest power limit (the GPU's default)."""
    zeus = [r for r in rows if r["source"] == "zeus"]
    top: dict[tuple[str, str, str, str], float] = {}
    for r in zeus:
        k = (r["gpu_type"], r["dataset"], r["model"], r["batch_size"])
        top[k] = max(top.get(k, 0.0), _f(r["power_limit_w"]) or 0.0)
    return [
        r
        for r in zeus
        if (_f(r["power_limit_w"]) or 0.0) == top[(r["gpu_type"], r["dataset"], r["model"], r["batch_size"])]
    ]


def read_shared_tidy(shared_dir: Path, sources: frozenset[str] | None = None) -> list[Measurement]:
    """Read the shared tidy table and return merged measurements of the given sources (default: all).

    Raises ``ModelFileError`` naming the file when it is missing or unreadable.
    """
    path = Path(shared_dir) / TIDY_FILE
    try:
        with gzip.open(path, "rt", newline="") as fh:
            rows = list(csv.DictReader(fh))
    except (OSError, EOFError, csv.Error) as exc:
        raise ModelFileError(f"cannot read measured table {path}: {exc}") from exc
    rows = [r for r in rows if r["source"] != "zeus"] + _zeus_default_power(rows)
    out: list[Measurement] = []
    left_out: dict[tuple[str, str], int] = defaultdict(int)
    for r in rows:
        m = _convert(r)
        if m is None:
            continue
        if sources is not None and m.source not in sources:
            continue
        if (m.source, m.model) in LEFT_OUT:
            left_out[(m.source, m.model)] += 1
            continue
        out.append(
            replace(
                m,
                source_file=r.get("source_file", ""),
                commit=TIDY_COMMITS.get(r["source"], ""),
                licence=LICENSES.get(m.source, ""),
            )
        )
    for (src, model), count in sorted(left_out.items()):
        log.info("left out %d %s %s rows: %s", count, src, model, LEFT_OUT[(src, model)])
    return merge(out)


def merge(measurements: Sequence[Measurement]) -> list[Measurement]:
    """Merge measurements of the same configuration into one with the median throughput.

    The merged row keeps the first source name (sorted) and the links of the first row; the result is
    sorted by configuration, so the same input always gives the same table.
    """
    groups: dict[tuple[object, ...], list[Measurement]] = defaultdict(list)
    for m in measurements:
        groups[m.config_key()].append(m)
    out = []
    for key in sorted(groups, key=repr):
        ms = sorted(groups[key], key=lambda x: (x.source, x.iters_per_s))
        med = statistics.median(x.iters_per_s for x in ms)
        first = ms[0]
        out.append(
            replace(
                first,
                source="+".join(sorted({x.source for x in ms})),
                iters_per_s=med,
                source_file=" ; ".join(sorted({x.source_file for x in ms if x.source_file})),
            )
        )
    return out


_COLUMNS = tuple(f.name for f in fields(Measurement))
# Columns a table written before the public sources lacks: their defaults.
_DEFAULTS = {f.name: f.default for f in fields(Measurement)}


def _cell(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def write_table(measurements: Sequence[Measurement], path: Path) -> None:
    """Write measurements as a gzip CSV (deterministic bytes: no timestamp in the gzip header)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(_COLUMNS)
    for m in measurements:
        w.writerow([_cell(getattr(m, c)) for c in _COLUMNS])
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as gz:
        gz.write(buf.getvalue().encode())


#: each column's conversion from its CSV text, by the field's declared type
_CONVERT: dict[str, Callable[[str], object]] = {"bool": "True".__eq__, "int": int, "float": float, "str": str}


def _default(value: object) -> object:
    """A column the file lacks: its cell (placed after the row's own) holds the field's default."""
    return value


def read_table(path: Path) -> list[Measurement]:
    """Read a table written by ``write_table``; ``ModelFileError`` naming the file and row on bad content.

    Each column's converter is chosen once from the header (the shipped table has some 5,000 rows of
    26 columns, read on every simulator start); a column the file lacks takes the field's default."""
    try:
        with gzip.open(path, "rt", newline="") as fh:
            reader = csv.reader(fh)
            header = next(reader, [])
            rows = [r for r in reader if r]
    except (OSError, EOFError, csv.Error) as exc:
        raise ModelFileError(f"cannot read measured table {path}: {exc}") from exc
    col = {name: i for i, name in enumerate(header)}
    width = len(header)
    types = {f.name: f.type for f in fields(Measurement)}
    # per field: its cell's index and converter; the defaults of absent columns go after the row's
    # cells (index -1: absent and without a default, so every row is bad)
    plan: list[tuple[int, Callable[[Any], object]]] = []
    tail: list[object] = []
    for name in _COLUMNS:
        idx = col.get(name)
        if idx is not None:
            plan.append((idx, _CONVERT.get(str(types[name]), str)))
        elif _DEFAULTS.get(name, MISSING) is MISSING:
            plan.append((-1, _default))
        else:
            plan.append((width + len(tail), _default))
            tail.append(_DEFAULTS[name])
    regular = all(idx >= 0 for idx, _ in plan)
    out = []
    for i, r in enumerate(rows, start=2):
        try:
            if regular and len(r) == width:
                cells = r + tail
                values = [convert(cells[idx]) for idx, convert in plan]
            else:
                values = _irregular_row(r, width, plan, tail)
            out.append(Measurement(*values))  # type: ignore[arg-type]
        except (KeyError, TypeError, ValueError) as exc:
            raise ModelFileError(f"{path}: line {i}: bad row ({exc})") from exc
    return out


def _irregular_row(
    row: list[str], width: int, plan: Sequence[tuple[int, Callable[[Any], object]]], tail: list[object]
) -> list[object]:
    """A row with fewer or more cells than the header, or of a table lacking a column without a default:
    a missing cell takes its field's default (``KeyError`` naming the field where it has none), extra
    cells are ignored; fields in column order, so the first bad one is named."""
    cells: list[object] = [*row[:width], *([None] * (width - len(row))), *tail]
    values: list[object] = []
    for name, (idx, convert) in zip(_COLUMNS, plan, strict=True):
        text = cells[idx] if idx >= 0 else None
        if text is None:
            if _DEFAULTS.get(name, MISSING) is MISSING:
                raise KeyError(name)
            values.append(_DEFAULTS[name])
        else:
            values.append(convert(text))
    return values
