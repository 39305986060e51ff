"""``heterogeneity: ordered``: each job's GPU types in a fixed preference order, then by most free GPUs.

Pure. What an admin without a performance model configures: Kueue tries a ClusterQueue's ResourceFlavors
in the order the admin lists them, and kube-scheduler users add a preferred node affinity for the newest
GPU product. An ordering policy (fifo, las, srsf, ftf) with ``heterogeneity: ordered`` keeps its own
order of *who* goes first and lets each job try its allowed types in that preference:

- by default, newest generation first: the types sorted by the GPU catalogue's dense peak rate at the
  job's precision (``perfmodel.gpus.GPUSpec.tflops``: fp32 on CUDA cores, amp on fp16 tensor cores, ...),
  highest first; a type the catalogue does not know (a new product, typed by its raw label) comes last;
- with ``type_order: [H100, A100, ...]``, the admin's own order: the listed types first, in that order,
  then the unlisted ones by peak rate as above.

Types of equal preference (equal peak rate, or unlisted and unknown) go by most free GPUs, then by name.
The order is the same every round; no oracle is asked for it.

``check_type_order`` validates ``type_order`` where a policy's config is built (one line naming the
field and the entry): a duplicate, an empty list, or ``type_order`` with another ``heterogeneity``.
An entry the catalogue knows by a product label (``NVIDIA-H100-80GB-HBM3``) becomes its canonical type
(``H100``); one the catalogue does not know is kept as written (nodes of an unknown product carry its raw
label as their type) and ``unknown_type_order_entries`` names those that no node has, for the shells that
know the cluster (``perfsched simulate`` refuses them).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from perfmodel.gpus import CANONICAL_TYPES, canonical_gpu_type, gpu_spec
from scheduler.core.errors import ConfigError
from scheduler.core.protocols import ThroughputOracle
from scheduler.core.types import ClusterSnapshot, Job
from scheduler.policies.base import FreeByType, TypeInfo, allowed_types, fitting_types


def catalogue_type(name: str) -> str | None:
    """The canonical GPU type the catalogue knows ``name`` as (a canonical name or a product label)."""
    if name in CANONICAL_TYPES:
        return name
    return canonical_gpu_type(name)


def check_type_order(heterogeneity: str, type_order: Sequence[str] | None) -> tuple[str, ...] | None:
    """``type_order`` validated and normalised (product labels to canonical types); ``ConfigError``
    naming the field and the entry at fault. None stays None (the catalogue's default order)."""
    if type_order is None:
        return None
    if heterogeneity != "ordered":
        raise ConfigError(
            f"config field 'type_order': only with heterogeneity=ordered, got heterogeneity={heterogeneity}"
        )
    if not type_order:
        raise ConfigError("config field 'type_order': empty; name at least one GPU type (or leave it out)")
    out: list[str] = []
    for i, raw in enumerate(type_order):
        entry = raw.strip()
        if not entry:
            raise ConfigError(f"config field 'type_order[{i}]': empty GPU type name")
        name = catalogue_type(entry) or entry
        if name in out:
            same = "" if name == entry else f" (the catalogue's {name})"
            raise ConfigError(f"config field 'type_order[{i}]': duplicate GPU type {entry!r}{same}")
        out.append(name)
    return tuple(out)


def unknown_type_order_entries(type_order: Sequence[str] | None, node_types: Iterable[str]) -> list[str]:
    """The ``type_order`` entries that the catalogue does not know and no node of the cluster has."""
    have = set(node_types)
    return [t for t in type_order or () if t not in have and catalogue_type(t) is None]


def check_policy_type_order(policy: object, node_types: Iterable[str]) -> None:
    """``ConfigError`` when ``policy``'s ``type_order`` names a type no node has and the catalogue does
    not know (policies without ``type_order`` pass)."""
    order = getattr(getattr(policy, "config", None), "type_order", None)
    unknown = unknown_type_order_entries(order, node_types)
    if unknown:
        raise ConfigError(
            f"config field 'type_order': unknown GPU type {unknown[0]!r}: no node of the cluster has it and "
            f"the GPU catalogue does not know it (canonical types: {', '.join(CANONICAL_TYPES)})"
        )


def peak_tflops(gpu_type: str, precision: str) -> float:
    """The catalogue's dense peak TFLOP/s of ``gpu_type`` at ``precision``; 0 for a type it does not know."""
    name = catalogue_type(gpu_type)
    if name is None:
        return 0.0
    try:
        return float(gpu_spec(name).tflops(precision))
    except KeyError:
        return 0.0


class TypePreference:
    """Per round: each job's allowed types in the fixed preference order, ties by most free GPUs.

    ``type_order``: the admin's order (None: newest generation first by peak rate at the job's
    precision). Memoised per (allowed set, precision): many jobs share them.
    """

    def __init__(self, free: FreeByType, type_order: Sequence[str] | None = None) -> None:
        self.free = free
        self.rank = {t: i for i, t in enumerate(type_order or ())}
        self._memo: dict[tuple[frozenset[str], str], tuple[str, ...]] = {}

    def key(self, gpu_type: str, precision: str) -> tuple[int, float, int, str]:
        """Sort key: listed types first in their order, then by peak rate (highest first), then by most
        free GPUs, then by name."""
        listed = self.rank.get(gpu_type, len(self.rank))
        return (listed, -peak_tflops(gpu_type, precision), -self.free.free.get(gpu_type, 0), gpu_type)

    def order(self, job: Job, infos: Mapping[str, TypeInfo]) -> tuple[str, ...]:
        """``job``'s allowed types (those it fits in GPU memory, when the oracle can tell), most preferred
        first."""
        memo_key = (job.allowed_gpu_types, job.precision)
        got = self._memo.get(memo_key)
        if got is None:
            got = tuple(sorted(allowed_types(job, infos), key=lambda t: self.key(t, job.precision)))
            self._memo[memo_key] = got
        memory = self.free.memory
        if memory is not None and got:
            return fitting_types(job, got, infos, memory)
        return got


def baseline_order(
    snapshot: ClusterSnapshot,
    oracle: ThroughputOracle | None,
    heterogeneity: str,
    type_order: Sequence[str] | None = None,
) -> FreeByType | TypePreference:
    """The type order of a policy that does not choose types by performance: ``ordered``'s preference,
    else (``agnostic``, and ``aware``'s fallback for jobs it has no row for) the most free GPUs first."""
    free = FreeByType(snapshot, oracle)
    return TypePreference(free, type_order) if heterogeneity == "ordered" else free
