"""What the training table measured inside one node and across nodes, for the in-node envelope and the
cross-node correction of ``perfmodel.predictor``.

In-node envelope: a row on ``n`` > 1 GPUs of one node gets the highest throughput of the same job (same
global batch) on 1 .. n-1 GPUs of the same GPU, interconnect and node, capped by linear scaling from the
lowest 1-GPU time among per-GPU batches B/n .. B/1, so more GPUs never predict a lower total throughput.
It is a prior for extrapolation: where the table measured the job's model on that GPU type and link in one
node on ``n`` GPUs or more and those measurements fall as GPUs are added (``MeasuredInNode.follows``), the
learned model has seen the real curve and answers as it is. ``ENVELOPE_MODES``: "auto" (that rule),
"always" (every one-node multi-GPU row), "never". Across nodes there is no envelope: a slow network may
make more GPUs slower.

Cross-node correction: the trees see the network only through the all-reduce's modelled time and share,
so a row across nodes gets their correction read at the nearest node network (in log) that the table ran
its GPU type and software stack across nodes on (``MeasuredInNode.reference_links``), times the scaling
model at its own network. On every training row this is the identity. Pure.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from perfmodel.gpus import CANONICAL_TYPES, gpu_spec
from perfmodel.measurements import Measurement
from perfmodel.scaling import STACKS

FloatArray = npt.NDArray[np.float64]

# Where the in-node envelope applies (``Predictor.envelope``): "auto" = wherever a row on several GPUs of
# one node is not inside a measured in-node curve that falls (``MeasuredInNode.follows``), "always" =
# every row on several GPUs of one node, "never" = nowhere.
ENVELOPE_MODES = ("auto", "always", "never")
# A measured in-node curve "falls" when, at one global batch, some GPU count's measured throughput is
# below this fraction of the best on fewer GPUs (10%: above measurement noise; the shipped table's
# falling cells drop to 0.47-0.89, its rising ones stay >= 0.99).
FALL_RATIO = 0.9


class MeasuredInNode:
    """What the training table measured inside one node, per cell = (model, dataset, GPU type, NVLink or
    not): the largest GPU count measured in one node (``largest``, 0 where none), and the deepest fall
    (``floor``): over the cell's global batches measured on several GPU counts, the lowest ratio of a
    count's throughput to the best on fewer GPUs at that batch (1.0 when it never falls).

    The in-node envelope's rule (``follows``): a one-node row on ``n`` GPUs whose cell was measured in one
    node on ``n`` GPUs or more, and whose measurements fall (``floor < FALL_RATIO``), is inside a measured
    curve that really drops as GPUs are added; the learned model, trained on it, answers such a row as it
    is, drops included. Every other row on several GPUs of one node -- an unmeasured model x GPU type, a
    parameters/FLOPs-only job, an unknown GPU, more GPUs than measured, or a cell whose measurements only
    rise -- gets the envelope (there a fall can only be the learned model's noise). "NVLink" is the link
    the row really uses: ``nvlink`` on a GPU type without NVLink counts as PCIe, as in
    ``features.resolve_hw``.

    Across nodes it records the node networks each GPU type's rows ran on, per software stack
    (``links``), for ``reference_links``: the link at which the learned correction of a cross-node row is
    read (the module docstring's "cross-node correction"). Pure.
    """

    def __init__(self, measurements: Sequence[Measurement]) -> None:
        groups: dict[tuple[str, str], int] = {}
        types = {t: i for i, t in enumerate(CANONICAL_TYPES)}
        cells: dict[tuple[int, int, int], int] = {}
        sweeps: dict[tuple[int, int, int, int], dict[int, list[float]]] = {}
        links: dict[tuple[int, int], set[float]] = {}
        for m in measurements:
            col = types.get(m.gpu_type)
            if col is not None and m.num_nodes > 1:
                links.setdefault((col, STACKS[m.stack]), set()).add(math.log(m.network_gbps / 8.0))
            if m.num_nodes != 1 or col is None:
                continue
            g = groups.setdefault((m.model, m.dataset), len(groups))
            nvl = int(m.interconnect == "nvlink" and gpu_spec(m.gpu_type).nvlink_gbs > 0)
            cells[(g, col, nvl)] = max(cells.get((g, col, nvl), 0), m.num_gpus)
            sweeps.setdefault((g, col, nvl, m.batch_size), {}).setdefault(m.num_gpus, []).append(
                m.samples_per_s
            )
        self._groups = groups
        self._types = types
        # Per (type column, stack code): the log link bandwidths (GB/s) its cross-node rows ran on.
        self.links = {key: np.asarray(sorted(v)) for key, v in links.items()}
        # Rows: groups, then one for anything else; columns: catalogued types, then anything else.
        self.largest = np.zeros((len(groups) + 1, len(types) + 1, 2), dtype=np.float64)
        self.floor = np.ones_like(self.largest)
        for (g, col, nvl), n in cells.items():
            self.largest[g, col, nvl] = n
        for (g, col, nvl, _), by_n in sweeps.items():
            # Several sources may measure one configuration: their median.
            vals = [float(np.median(by_n[n])) for n in sorted(by_n)]
            for k in range(1, len(vals)):
                self.floor[g, col, nvl] = min(self.floor[g, col, nvl], vals[k] / max(vals[:k]))

    def group_index(self, model: str, dataset: str) -> int:
        """Row of the tables for a (model, dataset); the last row (nothing measured) when never measured."""
        return self._groups.get((model, dataset), len(self._groups))

    def type_index(self, gpu_type: str, low_confidence: bool = False) -> int:
        """Column of the tables for a GPU type; the last column (nothing measured) for an uncatalogued or
        low-confidence one."""
        return len(self._types) if low_confidence else self._types.get(gpu_type, len(self._types))

    def follows(
        self,
        group: npt.NDArray[np.intp],
        type_col: npt.NDArray[np.intp],
        nvlink: npt.NDArray[np.bool_],
        num_gpus: FloatArray,
    ) -> npt.NDArray[np.bool_]:
        """Per one-node row: inside a measured in-node curve that falls (the model answers it as it is)?"""
        cell = (group, type_col, nvlink.astype(np.intp))
        out: npt.NDArray[np.bool_] = (num_gpus <= self.largest[cell]) & (self.floor[cell] < FALL_RATIO)
        return out

    def reference_links(
        self, type_col: npt.NDArray[np.intp], stack: FloatArray, log_link: FloatArray
    ) -> FloatArray:
        """Per cross-node row (type column, stack code, log link GB/s): the log link its learned correction is
        read at -- the nearest (in log) that the table measured that GPU type and stack across nodes on, or
        the row's own where it measured none."""
        out = log_link.copy()
        for (col, code), measured in self.links.items():
            rows = np.flatnonzero((type_col == col) & (stack == code))
            if rows.size:
                near = np.abs(log_link[rows, None] - measured[None, :]).argmin(axis=1)
                out[rows] = measured[near]
        return out

    def cell(self, model: str, dataset: str, gpu_type: str, nvlink: bool) -> tuple[int, float]:
        """(largest GPU count measured in one node, deepest fall) of a cell; (0, 1.0) when unmeasured."""
        at = (self.group_index(model, dataset), self.type_index(gpu_type), int(nvlink))
        return int(self.largest[at]), float(self.floor[at])
