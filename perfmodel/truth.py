"""Ground truth for the simulator and the workload emulator: measured throughput plus a fixed extrapolation.

``GroundTruth`` answers "how many iterations per second does this job really make on this placement"
from the measured table shipped in ``perfmodel/data/measurements.csv.gz`` (permissively licensed sources
only; see ``perfmodel/data/README.md`` and ``perfmodel.measurements`` for units), its rows from the
cluster-scheduling research tables only (not the public extracts of ``perfmodel.public``). It is
deliberately *not* the learned predictor: the simulator must be able to measure how wrong the predictor is.

Rules, in order (all deterministic; ``batch_size`` is the global batch, the per-GPU batch is
``batch_size / num_gpus``):

1. **Measured.** The configuration (model, dataset, global batch, GPU type, GPUs, nodes) was measured:
   return the measured iterations/s (the median when several sources, or several layouts with the same
   GPU and node counts, were measured). A GPU type is its default variant (``perfmodel.gpus``: a V100 is
   the 16 GB SXM2 card): where that variant was measured, rows of another one (a 32 GB PCIe V100, say)
   do not enter the median or rule 2's curve; they answer only configurations the default variant was never
   measured on.
2. **Extrapolated on the same GPU type.** The model was measured on this GPU type. Its iteration time is
   modelled as ``T(b, n) = C(b) + S(n, nodes)``: ``C`` is the 1-GPU compute time at per-GPU batch ``b``,
   interpolated log-log between the measured 1-GPU batches (beyond them the end slope, clamped to
   [0.5, 1] above and [0, 1] below); ``S`` is the gradient-sync time, the median of
   ``measured T - C(b)`` over the measured placements with the nearest GPU count and the same
   single-/multi-node kind, scaled by the ring all-reduce factor ``2 (n-1) / n``. Where none was measured
   ``S`` is parameter bytes x ring factor / link (PCIe 3 x16 inside a node; between nodes the placement's
   ``network_gbps``, else the ``GroundTruth``'s, 10 Gb/s by default).
   Across nodes each measured sync time is scaled by the link its row ran on over the placement's
   ``network_gbps`` (a ring all-reduce sends the same bytes through each node's NIC, so the exposed sync
   goes as 1 / link; Gavel's rows ran at 10 Gb/s, see ``Measurement.network_gbps``); a caller without a
   network (``network_gbps=None``) gets the sync as measured. Inside a node nothing depends on the network.
   The answer is anchored on the nearest measured placement ``p``:
   ``T = T_measured(p) x T_model(b, n) / T_model(p)`` (``T_model(p)`` at ``p``'s own link), so
   neighbouring answers share its measurement noise. A measured cross-node configuration asked at another
   link than it ran on is rule 1's value times the same ratio, ``T_model`` at the two links.
3. **Across GPU types.** The model was never measured on this GPU type: take the measured type whose specs
   are closest, apply rule 2 there and divide the compute part by the spec ratio
   ``(FP32 FLOP/s ratio)^0.5 x (memory bandwidth ratio)^0.5``; the sync part (the reference type's, at the
   placement's link) is kept.
4. Otherwise (unknown model, dataset or GPU type): None.
5. **Spreading never speeds a job up.** An answer for a placement over several nodes (rules 1-3, except
   a measured configuration asked at the link it ran on) is at most the same GPUs' answer in one node:
   a ring all-reduce across nodes still passes every in-node link, and the in-node sync is measured, not
   scaled by any link. Without this rule the cross-node sync, measured at 10 Gb/s and scaled down to a
   fast network, fell below the measured in-node sync, and 44% of the catalogue's 4- and 8-GPU gangs
   over 2-4 nodes at 10-400 Gb/s ran faster spread than in one node (up to 9x).

Pure apart from ``GroundTruth.load``, which reads the table file.
"""

from __future__ import annotations

import bisect
import math
import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from importlib import resources
from pathlib import Path

from perfmodel.datasets import canonical_dataset
from perfmodel.errors import InvalidInputError
from perfmodel.gpus import CANONICAL_TYPES, canonical_gpu_type, gpu_spec, spec_for_product, spec_ratio
from perfmodel.measurements import Measurement, read_table
from perfmodel.public import PUBLIC_SOURCES
from perfmodel.zoo import canonical_model, lookup_model

TABLE_NAME = "measurements.csv.gz"
# Links assumed where the table has no multi-GPU measurement of a model on a GPU type (GB/s).
PCIE_GBS = 15.75
NETWORK_GBS = 10.0 / 8.0
# Log-log slope of iteration time over per-GPU batch beyond the measured batches.
_SLOPE_ABOVE = (0.5, 1.0)
_SLOPE_BELOW = (0.0, 1.0)
_DEFAULT_SLOPE = 0.8


@dataclass(frozen=True, slots=True)
class JobType:
    """A measured job configuration a trace job can be given.

    ``batch_size`` is the global batch at which ``gpu_counts`` were measured (on ``gpu_types``); work is
    counted in ``work_unit`` (iterations: one iteration processes ``batch_size`` samples).
    """

    model: str
    dataset: str
    batch_size: int
    work_unit: str
    gpu_types: tuple[str, ...]
    gpu_counts: tuple[int, ...]


def _default_variant(m: Measurement) -> bool:
    """Whether ``m`` ran on its GPU type's default variant (no product stated, or the default's)."""
    if not m.gpu_product:
        return True
    spec = spec_for_product(m.gpu_product)
    return spec is None or spec == gpu_spec(m.gpu_type)


def _ring(n: int) -> float:
    return 2.0 * (n - 1) / n if n > 1 else 0.0


def _clamp(x: float, lo_hi: tuple[float, float]) -> float:
    return min(max(x, lo_hi[0]), lo_hi[1])


class _Group:
    """Measurements of one (model, dataset, GPU type): the compute curve and the sync estimates."""

    def __init__(self, rows: Sequence[Measurement], params: float, network_gbs: float = NETWORK_GBS) -> None:
        self.rows = sorted(rows, key=lambda m: (m.num_gpus, m.num_nodes, m.gpus_per_node, m.batch_size))
        self.params = params
        self.network_gbs = network_gbs
        single = sorted((m.batch_size, 1.0 / m.iters_per_s) for m in self.rows if m.num_gpus == 1)
        if not single:
            # No 1-GPU measurement: use the per-GPU batches of the smallest placements as the curve
            # (over-states compute by their sync share; documented fallback).
            n_min = min(m.num_gpus for m in self.rows)
            single = sorted(
                (round(m.local_batch_size), 1.0 / m.iters_per_s) for m in self.rows if m.num_gpus == n_min
            )
        # Merge equal batches (median) so the curve is a function.
        by_b: dict[float, list[float]] = defaultdict(list)
        for b, t in single:
            by_b[float(b)].append(t)
        self.log_b = [math.log(b) for b in sorted(by_b)]
        self.log_t = [math.log(statistics.median(by_b[b])) for b in sorted(by_b)]
        self._sync_cache: dict[tuple[int, bool, float | None], float] = {}

    def compute_time(self, local_batch: float) -> float:
        """1-GPU iteration time at a per-GPU batch, interpolated log-log (see the module docstring)."""
        x = math.log(local_batch)
        xs, ys = self.log_b, self.log_t
        if len(xs) == 1:
            slope = _DEFAULT_SLOPE
            return math.exp(ys[0] + slope * (x - xs[0]))
        if x <= xs[0]:
            slope = _clamp((ys[1] - ys[0]) / (xs[1] - xs[0]), _SLOPE_BELOW)
            return math.exp(ys[0] + slope * (x - xs[0]))
        if x >= xs[-1]:
            slope = _clamp((ys[-1] - ys[-2]) / (xs[-1] - xs[-2]), _SLOPE_ABOVE)
            return math.exp(ys[-1] + slope * (x - xs[-1]))
        i = bisect.bisect_right(xs, x) - 1
        w = (x - xs[i]) / (xs[i + 1] - xs[i])
        return math.exp(ys[i] + w * (ys[i + 1] - ys[i]))

    def sync_time(self, n: int, multi_node: bool, network_gbps: float | None = None) -> float:
        """Gradient-sync time of an ``n``-GPU placement (see the module docstring); across nodes at
        ``network_gbps`` (Gb/s; None: each measured row's sync as measured)."""
        if n <= 1:
            return 0.0
        gbps = network_gbps if multi_node else None
        key = (n, multi_node, gbps)
        if key in self._sync_cache:
            return self._sync_cache[key]
        multi = [m for m in self.rows if m.num_gpus > 1 and (m.num_nodes > 1) == multi_node]
        if multi:
            counts = sorted({m.num_gpus for m in multi})
            n_p = min(counts, key=lambda c: (abs(math.log(c / n)), c))
            syncs = [
                max(0.0, 1.0 / m.iters_per_s - self.compute_time(m.local_batch_size))
                * (1.0 if gbps is None else m.network_gbps / gbps)
                for m in multi
                if m.num_gpus == n_p
            ]
            value = statistics.median(syncs) * _ring(n) / _ring(n_p)
        else:
            link = (self.network_gbs if gbps is None else gbps / 8.0) if multi_node else PCIE_GBS
            value = _ring(n) * self.params * 4.0 / (link * 1e9)
        self._sync_cache[key] = value
        return value

    def model_time(self, batch_size: int, n: int, nodes: int, network_gbps: float | None = None) -> float:
        return self.compute_time(batch_size / n) + self.sync_time(n, nodes > 1, network_gbps)

    def nearest(self, batch_size: int, n: int, nodes: int) -> Measurement:
        """The measured placement closest to the query (per-GPU batch, GPU count, node kind)."""
        lb = batch_size / n
        gpn = -(-n // nodes)

        def dist(m: Measurement) -> tuple[float, int, int, int]:
            d = abs(math.log2(lb / m.local_batch_size)) + abs(math.log2(n / m.num_gpus))
            d += 1.0 * ((m.num_nodes > 1) != (nodes > 1)) + 0.5 * abs(math.log2(gpn / m.gpus_per_node))
            return (round(d, 9), m.num_gpus, m.num_nodes, m.batch_size)

        return min(self.rows, key=dist)

    def iteration_time(self, batch_size: int, n: int, nodes: int, network_gbps: float | None = None) -> float:
        p = self.nearest(batch_size, n, nodes)
        # the anchor's model time at the link it was measured on (as measured when no network is asked)
        p_link = None if network_gbps is None else p.network_gbps
        ratio = self.model_time(batch_size, n, nodes, network_gbps) / self.model_time(
            p.batch_size, p.num_gpus, p.num_nodes, p_link
        )
        return ratio / p.iters_per_s


def _median(values: list[float]) -> float:
    """``statistics.median``, with a single value (most configurations' case) returned as it is."""
    return values[0] if len(values) == 1 else statistics.median(values)


class GroundTruth:
    """Measured throughput with a deterministic extrapolation; see the module docstring for the rules."""

    def __init__(self, measurements: Sequence[Measurement], network_gbps: float = 10.0) -> None:
        """``network_gbps``: the link between nodes (Gb/s) where a model was never measured across nodes
        on a GPU type (rule 2's assumed sync); the default 10 keeps earlier simulator results."""
        if not (network_gbps > 0 and math.isfinite(network_gbps)):
            raise ValueError(f"network_gbps must be > 0, got {network_gbps}")
        # the cluster-scheduling research tables (Gavel, Shockwave, Pollux, ElasticFlow, Zeus): one
        # convention per key, and the job catalogue the simulator's workloads are drawn from. The public
        # extracts (``perfmodel.public``: vendor-tuned, MLPerf, LLM and NeuSight's few-point rows) train
        # the predictor; here they would mix software stacks under one key and add job types to every
        # simulated workload
        self._rows = [m for m in measurements if m.source not in PUBLIC_SOURCES]
        # the rows of each configuration: the GPU type's default variant where it was measured, else the
        # other variants' (rules 1 and 2 alike)
        exact_rows: dict[tuple[str, str, int, str, int, int], list[Measurement]] = defaultdict(list)
        for m in self._rows:
            exact_rows[(m.model, m.dataset, m.batch_size, m.gpu_type, m.num_gpus, m.num_nodes)].append(m)
        groups: dict[tuple[str, str, str], list[Measurement]] = defaultdict(list)
        for k, rows in exact_rows.items():
            exact_rows[k] = [m for m in rows if _default_variant(m)] or rows
            groups[(k[0], k[1], k[3])].extend(exact_rows[k])
        self._exact = {k: _median([m.iters_per_s for m in v]) for k, v in exact_rows.items()}
        # the link (Gb/s) each measured configuration ran on, for rule 1 asked at another network
        self._exact_link = {k: _median([m.network_gbps for m in v]) for k, v in exact_rows.items()}
        self._groups: dict[tuple[str, str, str], _Group] = {}
        for (model, dataset, gpu), rows in groups.items():
            info = lookup_model(model)
            self._groups[(model, dataset, gpu)] = _Group(
                rows, info.params if info else 25e6, network_gbps / 8.0
            )
        self._datasets: dict[str, list[str]] = defaultdict(list)
        counts: dict[tuple[str, str], int] = defaultdict(int)
        for m in self._rows:
            counts[(m.model, m.dataset)] += 1
        for (model, dataset), _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
            self._datasets[model].append(dataset)
        self._cache: dict[tuple[str, int, str, int, int, str, float | None], float | None] = {}

    @classmethod
    def load(cls, path: Path | None = None, network_gbps: float = 10.0) -> GroundTruth:
        """Load the shipped measured table (or the table at ``path``, written by ``write_table``)."""
        if path is None:
            with resources.as_file(resources.files("perfmodel") / "data" / TABLE_NAME) as p:
                return cls(read_table(Path(p)), network_gbps)
        return cls(read_table(path), network_gbps)

    @property
    def measurements(self) -> list[Measurement]:
        return list(self._rows)

    @cached_property
    def _catalogue(self) -> list[JobType]:
        by: dict[tuple[str, str, int], tuple[set[str], set[int]]] = {}
        for m in self._rows:
            types, counts = by.setdefault((m.model, m.dataset, m.batch_size), (set(), set()))
            types.add(m.gpu_type)
            counts.add(m.num_gpus)
        return [
            JobType(model, dataset, bs, "iterations", tuple(sorted(types)), tuple(sorted(counts)))
            for (model, dataset, bs), (types, counts) in sorted(by.items())
        ]

    def catalogue(self) -> list[JobType]:
        """Every measured (model, dataset, global batch) with the GPU types and counts it was measured on."""
        return list(self._catalogue)

    def gpu_types(self) -> list[str]:
        """Canonical GPU types with at least one measurement, in canonical order."""
        present = {m.gpu_type for m in self._rows}
        return [t for t in CANONICAL_TYPES if t in present]

    def models(self) -> list[str]:
        return sorted(self._datasets)

    def _dataset_for(self, model: str, dataset: str) -> str | None:
        known = self._datasets.get(model)
        if not known:
            return None
        if not dataset:
            info = lookup_model(model)
            if info and info.default_dataset in known:
                return info.default_dataset
            return known[0]
        ds = canonical_dataset(dataset)
        return ds if ds in known else None

    def throughput(
        self,
        model: str,
        batch_size: int,
        gpu_type: str,
        num_gpus: int,
        num_nodes: int = 1,
        dataset: str = "",
        network_gbps: float | None = None,
    ) -> float | None:
        """Iterations/s of the whole job (global batch ``batch_size``), or None when nothing is known.

        ``gpu_type`` is a canonical type (a product label is accepted too). ``network_gbps``: the link
        between the placement's nodes (Gb/s); None answers at the links the table was measured on. It
        matters only across nodes. Raises ``InvalidInputError`` for a batch size or GPU count <= 0, more
        nodes than GPUs or a network that is not a positive number.
        """
        if batch_size <= 0:
            raise InvalidInputError(f"batch_size must be > 0, got {batch_size}")
        if num_gpus <= 0:
            raise InvalidInputError(f"num_gpus must be > 0, got {num_gpus}")
        if num_nodes <= 0 or num_nodes > num_gpus:
            raise InvalidInputError(f"num_nodes must be in 1..num_gpus ({num_gpus}), got {num_nodes}")
        if network_gbps is not None and not (network_gbps > 0 and math.isfinite(network_gbps)):
            raise InvalidInputError(f"network_gbps must be > 0, got {network_gbps}")
        gbps = float(network_gbps) if network_gbps is not None and num_nodes > 1 else None
        key = (model, int(batch_size), gpu_type, int(num_gpus), int(num_nodes), dataset, gbps)
        if key in self._cache:
            return self._cache[key]
        value = self._throughput(*key)
        self._cache[key] = value
        return value

    def samples_per_s(
        self,
        model: str,
        batch_size: int,
        gpu_type: str,
        num_gpus: int,
        num_nodes: int = 1,
        dataset: str = "",
        network_gbps: float | None = None,
    ) -> float | None:
        """Samples/s of the whole job: ``throughput(...) * batch_size``."""
        its = self.throughput(model, batch_size, gpu_type, num_gpus, num_nodes, dataset, network_gbps)
        return None if its is None else its * batch_size

    def _throughput(
        self, model: str, batch_size: int, gpu_type: str, n: int, nodes: int, dataset: str, gbps: float | None
    ) -> float | None:
        name = canonical_model(model)
        gpu = canonical_gpu_type(gpu_type)
        if gpu is None:
            return None
        ds = self._dataset_for(name, dataset)
        if ds is None:
            return None
        exact_key = (name, ds, batch_size, gpu, n, nodes)
        exact = self._exact.get(exact_key)
        group = self._groups.get((name, ds, gpu))
        if exact is not None:
            link = self._exact_link[exact_key]
            if gbps is None or gbps == link or group is None:
                return exact
            value = (
                exact
                * group.model_time(batch_size, n, nodes, link)
                / group.model_time(batch_size, n, nodes, gbps)
            )
            return self._no_faster_than_one_node(value, model, batch_size, gpu, n, nodes, dataset)
        if group is not None:
            value = 1.0 / group.iteration_time(batch_size, n, nodes, gbps)
            return self._no_faster_than_one_node(value, model, batch_size, gpu, n, nodes, dataset)
        # Rule 3: nearest measured GPU type by specs.
        target = gpu_spec(gpu)
        measured = sorted(g for (m, d, g) in self._groups if m == name and d == ds)
        if not measured:
            return None
        ref = min(measured, key=lambda g: (abs(math.log(spec_ratio(gpu_spec(g), target))), g))
        rg = self._groups[(name, ds, ref)]
        t_ref = rg.iteration_time(batch_size, n, nodes, gbps)
        sync = rg.sync_time(n, nodes > 1, gbps)
        compute = max(t_ref - sync, 1e-9)
        ratio = spec_ratio(gpu_spec(ref), target)
        value = 1.0 / (compute / ratio + sync)
        return self._no_faster_than_one_node(value, model, batch_size, gpu, n, nodes, dataset)

    def _no_faster_than_one_node(
        self, value: float, model: str, batch_size: int, gpu: str, n: int, nodes: int, dataset: str
    ) -> float:
        """Rule 5: ``value`` for a placement over several nodes, at most the same GPUs' throughput in one
        node (a ring all-reduce across nodes still passes every in-node link)."""
        if nodes <= 1:
            return value
        one = self.throughput(model, batch_size, gpu, n, 1, dataset)
        return value if one is None else min(value, one)
