"""The data-parallel scaling model over a matrix of resolved rows, and the learned correction's features.

The scaling model the learned predictor corrects (``terms_of_nums``; ``features.model_terms`` for
resolved rows), the same vectorised function for training and serving:

    iteration time = compute(per-GPU batch) + sync(parameter bytes, slowest link of the placement)

- compute = the FLOP-bound time (per-GPU batch x FLOPs per sample / (peak FLOP/s x efficiency)) and the
  memory-bound time (the same FLOPs x bytes factor / (arithmetic intensity of the family x memory
  bandwidth)) combined as ``(flop^p + memory^p)^(1/p)`` (p fitted by ``perfmodel.train``), plus weight
  traffic (12 x parameters over memory bandwidth) and a fixed step overhead, divided by the software
  stack's speed factor (``STACKS``). The peak is ``features.effective_tflops`` at the job's precision;
  the bytes factor is 1 for fp32/tf32 and 1/2 for 16-bit and fp8 activations. A GPU the model never saw
  gets a time from its datasheet figures.
- sync = all-reduce of the gradients: 2 (n-1)/n x parameter bytes (fp32 gradients) / slowest link
  bandwidth, at 70% efficiency, plus the all-reduce's latency as NCCL runs it (hierarchical: the cheaper
  of a ring, 2 (n - N) hops inside the N nodes and 2 (N - 1) across them, and a tree, 2 (g - 1) hops
  inside a node of g GPUs and 2 log2(N) across, at a slightly lower bandwidth; ``allreduce_latency_s``),
  times the share not hidden behind the backward pass. The slowest link is the network when the job
  spans nodes, else NVLink (per-direction half of the GPU's total) or PCIe (``LINK_*`` classes).

The efficiencies, per-family intensities, overhead and stack factors are ``Physics``: fitted by
``perfmodel.train`` on the measured table (a dozen numbers, least squares in log time) and stored in the
model file; ``Physics()`` holds round priors for use without a model file. ``design_of_nums`` turns a
matrix of ``Resolved.nums`` (columns ``NUM_COLUMNS``) into the learned correction's input (``Design``:
the features in ``FEATURE_NAMES`` order, the rows' 1-GPU twins, the modelled times and the sync floor).
``FEATURE_SCHEMA_VERSION`` names this feature layout; a model file records the version it was trained
on and ``perfmodel.learned.read_model`` refuses another one. Pure.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from perfmodel.zoo import Family

FloatArray = npt.NDArray[np.float64]


FEATURE_SCHEMA_VERSION = "perfmodel-features-v5"


# Software stacks: how far a job's code is tuned, and the feature's codes. ``research`` = the scheduler
# papers' jobs and plain PyTorch (what a typical user runs; the default); ``vendor`` = NVIDIA's tuned
# example code (DALI, fused kernels, NHWC); ``mlperf`` = MLPerf submissions; ``llm`` = LLM training
# frameworks (FSDP/Megatron, fused attention).
STACKS: dict[str, int] = {"research": 0, "vendor": 1, "mlperf": 2, "llm": 3}


# Classes of the slowest link a placement's gradient sync crosses (``Design.link_class``).
LINK_PCIE, LINK_NVLINK, LINK_NETWORK = 0, 1, 2


_SYNC_EFFICIENCY = 0.7


# Latency of one all-reduce of the gradients, hierarchical as NCCL runs it (its cost model: NVIDIA/nccl
# src/graph/tuning.cc, the base and per-hop latencies of the Simple protocol, which messages of the size of a
# gradient bucket take; read to learn, not copied). A call costs a base latency; a ring over n GPUs on N
# nodes takes 2 (n - N) hops inside nodes and 2 (N - 1) across the network; a (double binary) tree takes
# 2 (g - 1) hops inside a node of g GPUs and 2 log2(N) across the network, at a slightly lower bus bandwidth
# than the ring. NCCL picks the cheaper per call: the ring on one node and for large messages on a few nodes,
# the tree at hundreds of nodes, where a flat ring's thousands of steps would cost a third of a second.
_ALLREDUCE_BASE_LATENCY_S = 8.4e-6  # baseLatencies, Ring and Tree, Simple


_INTRA_NODE_HOP_S = 4.0e-6  # hwLatencies NVLINK and PCI, Tree, Simple (Ring: 3.4 NVLink, 5.7 PCIe)


_NETWORK_HOP_S = 14e-6  # hwLatencies NET, Ring and Tree, Simple


_TREE_BUS_SHARE = 0.92  # the tree all-reduce's bus bandwidth against the ring's (busBw x .92 there)


# Floor of a multi-GPU iteration (``Design.sync_floor``): the ring all-reduce of the gradients at the slowest
# link's full line rate, times this share. Data parallelism can hide the all-reduce behind the backward
# pass but cannot move the bytes faster than the link, so an iteration never takes less; the share (1/2)
# leaves room for 16-bit gradient all-reduce in tuned code and for node networks labelled per NIC where
# the node has several (the measured tables' fastest multi-node row reaches 0.53 of the floor at 1).
SYNC_FLOOR_SHARE = 0.5


@dataclass(frozen=True, slots=True)
class Physics:
    """The fitted constants of the scaling model (see the module docstring).

    ``cuda_efficiency`` / ``tensor_efficiency``: fraction of the peak reached on FP32 CUDA cores / on
    tensor cores; ``intensity``: FLOPs per byte of activation traffic at fp32, per ``Family`` (in
    ``Family`` order); ``overhead_s``: fixed time per step; ``stack``: log speed factor per ``STACKS``
    code (0 for ``research``).
    """

    cuda_efficiency: float = 0.6
    tensor_efficiency: float = 0.35
    intensity: tuple[float, ...] = (30.0,) * len(Family)
    overhead_s: float = 2e-3
    stack: tuple[float, ...] = (0.0,) * len(STACKS)
    # FLOP-bound and memory-bound time overlap: compute = (flop^p + memory^p)^(1/p) (p = 1: they add,
    # p -> infinity: the roofline's max).
    overlap_p: float = 2.0
    # Share of the all-reduce not hidden behind the backward pass.
    sync_exposed: float = 1.0
    # Tensor-core efficiency of TF32 and of FP8 relative to 16-bit inputs. Both priors are 1: the datasheet
    # rate at the precision with no further discount. A TF32 job's fp32 activations and element-wise work
    # are already in the memory term (bytes factor 1, twice a 16-bit job's), and FP8's rate is already the
    # Amdahl blend of ``gpus.fp8_tflops``, which speeds up only the GEMMs. Fitted on every TF32 row of the
    # table the factor reads 0.97; a table without TF32 rows (a held-out Ampere) keeps the prior.
    tf32_factor: float = 1.0
    fp8_factor: float = 1.0

    def to_json(self) -> dict[str, object]:
        return {
            "cuda_efficiency": self.cuda_efficiency,
            "tensor_efficiency": self.tensor_efficiency,
            "intensity": list(self.intensity),
            "overhead_s": self.overhead_s,
            "stack": list(self.stack),
            "overlap_p": self.overlap_p,
            "sync_exposed": self.sync_exposed,
            "tf32_factor": self.tf32_factor,
            "fp8_factor": self.fp8_factor,
        }

    @staticmethod
    def from_json(raw: Mapping[str, object]) -> Physics:
        """From ``to_json``'s object; ``ValueError`` on a bad one."""
        intensity = tuple(float(v) for v in raw["intensity"])  # type: ignore[attr-defined]
        stack = tuple(float(v) for v in raw["stack"])  # type: ignore[attr-defined]
        if len(intensity) != len(Family) or len(stack) != len(STACKS):
            raise ValueError("physics: intensity or stack of the wrong length")
        p = Physics(
            float(raw["cuda_efficiency"]),  # type: ignore[arg-type]
            float(raw["tensor_efficiency"]),  # type: ignore[arg-type]
            intensity,
            float(raw["overhead_s"]),  # type: ignore[arg-type]
            stack,
            float(raw["overlap_p"]),  # type: ignore[arg-type]
            float(raw["sync_exposed"]),  # type: ignore[arg-type]
            float(raw["tf32_factor"]),  # type: ignore[arg-type]
            float(raw["fp8_factor"]),  # type: ignore[arg-type]
        )
        positive = (p.cuda_efficiency, p.tensor_efficiency, p.sync_exposed, *intensity)
        if not all(v > 0 and math.isfinite(v) for v in positive) or not p.overlap_p >= 1.0:
            raise ValueError("physics: efficiencies and intensities must be positive, overlap_p >= 1")
        return p


DEFAULT_PHYSICS = Physics()


FEATURE_NAMES: tuple[str, ...] = (
    "log_local_batch",
    "log_params",
    "log_flops_per_sample",
    "log_fp32_tflops",
    "log_precision_tflops",
    "log_mem_bandwidth",
    "log_mem_gib",
    "compute_capability",
    "family",
    "half_precision",
    "log_compute_time",
    "log_weight_time",
    "log_num_gpus",
    "num_nodes",
    "log_gpus_per_node",
    "log_sync_time",
    "log_sync_share",
    "log_scaling_time",
    "stack",
    "log_sm_count",
    "log_l2_mib",
    "flop_share",
)


# Columns of ``Resolved.nums``: job side (``JobPart.nums``), then placement side (``HardwarePart.nums``),
# then the precision's peak TFLOP/s.
JOB_COLUMNS = ("batch", "params", "flops", "family", "bytes", "stack", "fp8")


HW_COLUMNS = (
    "gpus",
    "nodes",
    "gpus_per_node",
    "fp32_tflops",
    "mem_bandwidth",
    "mem_gib",
    "cc",
    "link_gbs",
    "link_class",
    "sm",
    "l2",
)


NUM_COLUMNS = (*JOB_COLUMNS, *HW_COLUMNS, "tflops")


(
    _B,
    _P,
    _F,
    _FAM,
    _BYTES,
    _STACK,
    _FP8,
    _N,
    _NODES,
    _GPN,
    _FP32,
    _BW,
    _MEM,
    _CC,
    _LINK,
    _LCLASS,
    _SM,
    _L2,
    _TF,
) = range(len(NUM_COLUMNS))


def terms_of_nums(
    m: FloatArray, phys: Physics = DEFAULT_PHYSICS
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """(compute time, sync time, FLOP-bound time) in seconds per row of a ``_nums`` matrix."""
    n = m[:, _N]
    tensor = m[:, _TF] > m[:, _FP32] * 1.01
    # Tensor-core efficiency by the width of the inputs: TF32 (fp32 activations), 16-bit, FP8.
    eff = np.where(
        tensor,
        phys.tensor_efficiency
        * np.where(m[:, _BYTES] >= 1.0, phys.tf32_factor, np.where(m[:, _FP8] > 0, phys.fp8_factor, 1.0)),
        phys.cuda_efficiency,
    )
    work = (m[:, _B] / n) * m[:, _F]
    flop_t = work / (m[:, _TF] * 1e12 * eff)
    intensity = np.asarray(phys.intensity)[m[:, _FAM].astype(np.intp)]
    mem_t = work * m[:, _BYTES] / (intensity * m[:, _BW] * 1e9)
    speed = np.exp(np.asarray(phys.stack)[m[:, _STACK].astype(np.intp)])
    q = phys.overlap_p
    hi = np.maximum(flop_t, mem_t)
    core = hi * (1.0 + (np.minimum(flop_t, mem_t) / hi) ** q) ** (1.0 / q)
    compute = (core + 12.0 * m[:, _P] / (m[:, _BW] * 1e9) + phys.overhead_s) / speed
    ring = 2.0 * (n - 1.0) / n
    wire = ring * 4.0 * m[:, _P] / (m[:, _LINK] * (1e9 * _SYNC_EFFICIENCY))
    ring_lat, tree_lat = _allreduce_latencies(m)
    sync = np.minimum(wire + ring_lat, wire / _TREE_BUS_SHARE + tree_lat)
    sync *= phys.sync_exposed
    return compute, sync, flop_t / speed


def _allreduce_latencies(m: FloatArray) -> tuple[FloatArray, FloatArray]:
    """(ring, tree) latency in seconds of one all-reduce over each row's placement, NCCL's hierarchical
    model (see ``_ALLREDUCE_BASE_LATENCY_S``); 0 on one GPU."""
    n = m[:, _N]
    nodes = np.maximum(m[:, _NODES], 1.0)
    per_node = np.minimum(m[:, _GPN], n)
    multi = n > 1.0
    ring = (
        _ALLREDUCE_BASE_LATENCY_S
        + 2.0 * (n - nodes) * _INTRA_NODE_HOP_S
        + 2.0 * (nodes - 1.0) * _NETWORK_HOP_S
    )
    tree = _ALLREDUCE_BASE_LATENCY_S + 2.0 * (
        (per_node - 1.0) * _INTRA_NODE_HOP_S + np.log2(nodes) * _NETWORK_HOP_S
    )
    return np.where(multi, ring, 0.0), np.where(multi, tree, 0.0)


def allreduce_latency_s(num_gpus: int, num_nodes: int = 1, gpus_per_node: int = 0) -> float:
    """Latency (seconds) of one all-reduce over ``num_gpus`` GPUs on ``num_nodes`` nodes: the cheaper of
    NCCL's ring and tree (``_allreduce_latencies``); 0 on one GPU."""
    m = np.zeros((1, len(NUM_COLUMNS)))
    m[0, _N], m[0, _NODES] = float(num_gpus), float(num_nodes)
    m[0, _GPN] = float(gpus_per_node or -(-num_gpus // max(num_nodes, 1)))
    ring, tree = _allreduce_latencies(m)
    return float(min(ring[0], tree[0]))


def features_of_nums(m: FloatArray, phys: Physics) -> tuple[FloatArray, FloatArray, FloatArray]:
    """(features in ``FEATURE_NAMES`` order, compute time, sync time) from a ``_nums`` matrix."""
    compute, sync, flop_t = terms_of_nums(m, phys)
    total = compute + sync
    x = np.empty((m.shape[0], len(FEATURE_NAMES)), dtype=np.float64)
    n = m[:, _N]
    x[:, 0] = np.log(m[:, _B] / n)
    x[:, 1] = np.log(m[:, _P])
    x[:, 2] = np.log(m[:, _F])
    x[:, 3] = np.log(m[:, _FP32])
    x[:, 4] = np.log(m[:, _TF])
    x[:, 5] = np.log(m[:, _BW])
    x[:, 6] = np.log(m[:, _MEM])
    x[:, 7] = m[:, _CC]
    x[:, 8] = m[:, _FAM]
    x[:, 9] = m[:, _BYTES]
    x[:, 10] = np.log(compute)
    x[:, 11] = np.log(12.0 * m[:, _P] / (m[:, _BW] * 1e9))
    x[:, 12] = np.log(n)
    x[:, 13] = m[:, _NODES]
    x[:, 14] = np.log(m[:, _GPN])
    x[:, 15] = np.log(sync + 1e-6)
    x[:, 16] = np.log((sync + 1e-6) / total)
    x[:, 17] = np.log(total)
    x[:, 18] = m[:, _STACK]
    x[:, 19] = np.log(m[:, _SM])
    x[:, 20] = np.log(m[:, _L2])
    x[:, 21] = flop_t / compute
    return x, compute, sync


@dataclass(frozen=True, slots=True)
class Design:
    """What the predictor's learned part reads for a batch of rows (see ``perfmodel.learned``).

    ``x_single`` are the features of the same job on one GPU at the same per-GPU batch; ``x`` those of
    the real placement; ``compute``/``sync`` the scaling model's times; ``link_class`` the slowest link
    (``LINK_*``); ``num_gpus`` the GPU counts; ``sync_floor`` the least time an iteration can take for its
    gradient all-reduce (``SYNC_FLOOR_SHARE`` x the ring's bytes at the slowest link's line rate, plus the
    all-reduce's latency; 0 on one GPU).
    """

    x: FloatArray
    x_single: FloatArray
    compute: FloatArray
    sync: FloatArray
    link_class: FloatArray
    num_gpus: FloatArray
    sync_floor: FloatArray

    def take(self, index: npt.NDArray[np.int64] | npt.NDArray[np.bool_]) -> Design:
        """The rows at ``index`` (integer positions or a boolean mask)."""
        return Design(
            self.x[index],
            self.x_single[index],
            self.compute[index],
            self.sync[index],
            self.link_class[index],
            self.num_gpus[index],
            self.sync_floor[index],
        )


def design_of_nums(m: FloatArray, phys: Physics = DEFAULT_PHYSICS) -> Design:
    """The ``Design`` of rows given as a matrix of ``Resolved.nums`` (rows x ``NUM_COLUMNS``): the one
    function training and serving both evaluate."""
    if m.ndim != 2 or m.shape[1] != len(NUM_COLUMNS):
        raise ValueError(f"expected a rows x {len(NUM_COLUMNS)} matrix, got shape {m.shape}")
    k = m.shape[0]
    single = m.copy()
    single[:, _B] = m[:, _B] / m[:, _N]
    single[:, _N] = 1.0
    single[:, _NODES] = 1.0
    single[:, _GPN] = 1.0
    both, compute, sync = features_of_nums(np.concatenate((m, single)), phys)
    n = m[:, _N]
    # Gradient bytes at the floor: 4 for fp32/tf32 jobs, 2 for 16-bit and amp ones (amp keeps fp32
    # gradients in plain PyTorch, but tuned code all-reduces them in 16 bits: the floor takes the lesser).
    grad_bytes = np.where(m[:, _BYTES] >= 1.0, 4.0, 2.0)
    floor = SYNC_FLOOR_SHARE * 2.0 * (n - 1.0) / n * grad_bytes * m[:, _P] / (m[:, _LINK] * 1e9)
    # plus the all-reduce's latency: no algorithm finishes it sooner (the lesser of ring and tree)
    floor += np.minimum(*_allreduce_latencies(m))
    return Design(both[:k], both[k:], compute[:k], sync[:k], m[:, _LCLASS].copy(), n.copy(), floor)
