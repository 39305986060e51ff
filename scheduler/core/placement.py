"""Topology-aware gang placement: where the replicas of one job go, all of them or none.

Pure. One algorithm decides placement for the policies (many gangs per round, through ``FreeIndex``),
for the extender (one gang at a time, through ``FreeIndex`` and ``FreeIndex.restricted`` to the nodes
kube-scheduler offered) and for the simulator, so the three agree.

Preference, most wanted first (``LocalityLevel``):

1. one NVLink domain — a single NVLink node, or several nodes sharing a ``perfsched.dev/nvlink-domain``;
2. one node (a PCIe node);
3. one rack; 4. one zone; 5. anywhere in the cluster.

Within a level, fewer nodes win, then best fit: the least GPUs left over on the nodes the gang touches
(so big holes stay whole for big gangs), then the smallest group, then node names (deterministic).
``FreeIndex`` keeps per GPU type and interconnect a bucket of node names per free-GPU count, so a
single-node best fit is a walk over at most "GPUs per node" buckets rather than a loop over all nodes.
With ``prefer`` (a gang's replicas already placed), reusing more of the gang's nodes ranks right after
the level; that search packs only the groups whose lower-bound key can still win and walks the buckets
for the whole type, so its cost follows the gang and its racks, not the cluster.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum
from itertools import islice
from operator import attrgetter

from scheduler.core.decisions import Unschedulable
from scheduler.core.types import Allocation, Interconnect, Node, PlacementShape


class LocalityLevel(IntEnum):
    """How tightly a gang sits; lower is better."""

    NVLINK_DOMAIN = 0
    NODE = 1
    RACK = 2
    ZONE = 3
    CLUSTER = 4


def _as_node_map(nodes: Mapping[str, Node] | Sequence[Node]) -> Mapping[str, Node]:
    if isinstance(nodes, Mapping):
        return nodes
    return {n.name: n for n in nodes}


def locality_level(
    placed: Allocation | Iterable[str], nodes: Mapping[str, Node] | Sequence[Node]
) -> LocalityLevel:
    """The tightest level that holds every node of ``placed`` (an allocation or node names).

    Unknown or empty labels never make two nodes "share" a rack, zone or NVLink domain.
    """
    names = placed.nodes if isinstance(placed, Allocation) else tuple(dict.fromkeys(placed))
    node_map = _as_node_map(nodes)
    members = [node_map[n] for n in names if n in node_map]
    if not members:
        return LocalityLevel.CLUSTER
    if len(members) == 1:
        only = members[0]
        return LocalityLevel.NVLINK_DOMAIN if only.interconnect is Interconnect.NVLINK else LocalityLevel.NODE
    first = members[0]
    if first.nvlink_domain and all(m.nvlink_domain == first.nvlink_domain for m in members):
        return LocalityLevel.NVLINK_DOMAIN
    if first.rack and all(m.rack == first.rack for m in members):
        return LocalityLevel.RACK
    if first.zone and all(m.zone == first.zone for m in members):
        return LocalityLevel.ZONE
    return LocalityLevel.CLUSTER


def spread_of(alloc: Allocation, nodes: Mapping[str, Node] | Sequence[Node]) -> PlacementShape:
    """The hardware shape of a placement, as the throughput predictor wants it.

    ``interconnect`` is NVLink only when every GPU pair talks over NVLink (one NVLink node, or one
    multi-node NVLink domain); ``network_gbps`` is the slowest NIC among the nodes used.
    """
    node_map = _as_node_map(nodes)
    members = [node_map[n] for n in alloc.nodes if n in node_map]
    per_node = max((r for _, r in alloc.replicas_per_node), default=0) * alloc.gpus_per_replica
    level = locality_level(alloc, node_map)
    interconnect = Interconnect.NVLINK if level is LocalityLevel.NVLINK_DOMAIN else Interconnect.PCIE
    network = min((m.network_gbps for m in members), default=100.0)
    return PlacementShape(
        gpu_type=alloc.gpu_type,
        num_gpus=alloc.total_gpus,
        num_nodes=max(1, alloc.num_nodes),
        gpus_per_node=per_node,
        interconnect=interconnect,
        network_gbps=network,
    )


@dataclass(frozen=True, slots=True)
class _Candidate:
    per_node: Mapping[str, int]
    level: LocalityLevel
    leftover: int
    group_free: int
    group: str

    def key(self) -> tuple[int, int, int, int, str, tuple[str, ...]]:
        return (
            int(self.level),
            len(self.per_node),
            self.leftover,
            self.group_free,
            self.group,
            tuple(sorted(self.per_node)),
        )


_GroupKey = tuple[str, str, str]  # (gpu type, kind, label); kind in "domain" | "rack" | "zone"
_KINDS = ("domain", "rack", "zone")
_NO_LABEL = frozenset({""})


@dataclass(frozen=True, slots=True)
class _Layout:
    """What ``FreeIndex`` derives from the nodes alone (not from what is free): shared between indexes.

    ``slots`` (whole replicas per type and replica size) and ``multi`` (the groups of two nodes or
    more, for gang search) are caches filled lazily; they depend on the nodes only, so sharing is safe.
    """

    nodes: dict[str, Node]  # schedulable nodes with GPUs, sorted by name
    types: dict[str, list[str]]  # gpu type -> node names (sorted)
    type_cap: dict[str, int]
    max_free: dict[str, int]  # largest node capacity per type
    # (gpu type, kind, group name) -> node names (sorted); kind in "domain" | "rack" | "zone"
    groups: dict[tuple[str, str, str], list[str]]
    bucket_sizes: dict[tuple[str, bool], int]  # (gpu type, nvlink?) -> number of free-count buckets
    slot_of: dict[str, tuple[int, str, tuple[str, bool]]]  # node -> (capacity, gpu type, bucket key)
    # node -> the groups it is in, in ``_KINDS`` order, and node -> (domain, rack, zone, NVLink?);
    # both may hold more nodes (shared with the layouts ``_sub_layout`` cuts from this one)
    member_of: dict[str, tuple[_GroupKey, ...]]
    labels_of: dict[str, tuple[str, str, str, bool]]
    slots: dict[tuple[str, int], int]
    multi: list[_Groups]  # a cache: the groups of two nodes or more, built when first needed


@dataclass(frozen=True, slots=True)
class _Groups:
    """The NVLink domains, racks and zones of two nodes or more, as gang placement searches them."""

    # per (gpu type, kind), in ``_Layout.groups`` order
    kind_groups: dict[tuple[str, str], list[tuple[_GroupKey, list[str]]]]
    node_groups: dict[str, list[_GroupKey]]  # node -> the groups it is in
    group_order: dict[_GroupKey, tuple[int, int]]  # (1 + kind index, position among the kind's groups)
    type_groups: dict[str, dict[_GroupKey, list[str]]]  # gpu type -> its groups
    members: dict[_GroupKey, list[str]]  # ``_Layout.groups`` (every labelled group, one node or more)
    labels_of: dict[str, tuple[str, str, str, bool]]  # ``_Layout.labels_of`` (no cycle to the layout)
    # caches of ``labels`` and ``holding``, filled when first asked (a search asks about a few groups)
    _labels: dict[_GroupKey, tuple[frozenset[str], frozenset[str], frozenset[str], bool]]
    _holding: dict[_GroupKey, list[_GroupKey]]

    def labels(self, gkey: _GroupKey) -> tuple[frozenset[str], frozenset[str], frozenset[str], bool]:
        """The labels the group's nodes carry (domains, racks, zones) and whether one of them is NVLink."""
        got = self._labels.get(gkey)
        if got is None:
            rows = map(self.labels_of.__getitem__, self.members[gkey])
            dom_of, rack_of, zone_of, nvlink_of = zip(*rows, strict=True)
            doms, racks, zones = (frozenset(ls) - _NO_LABEL for ls in (dom_of, rack_of, zone_of))
            got = self._labels[gkey] = (doms, racks, zones, any(nvlink_of))
        return got

    def holding(self, label: _GroupKey) -> list[_GroupKey]:
        """The groups holding a node with ``label`` (gpu type, kind, label), in no particular order."""
        got = self._holding.get(label)
        if got is None:
            of = self.node_groups
            names = self.members.get(label, ())
            got = self._holding[label] = list(dict.fromkeys(g for n in names for g in of.get(n, ())))
        return got


def compact_shape(
    gpu_type: str, num_gpus: int, node_gpus: int, interconnect: Interconnect, network_gbps: float
) -> PlacementShape:
    """The shape of ``num_gpus`` GPUs of one type on nodes of ``node_gpus`` GPUs, as few nodes as possible
    (what a policy or the extender asks the oracle about before a placement exists)."""
    per_node = max(1, node_gpus)
    num_nodes = max(1, -(-num_gpus // per_node))
    return PlacementShape(
        gpu_type=gpu_type,
        num_gpus=num_gpus,
        num_nodes=num_nodes,
        gpus_per_node=min(num_gpus, per_node),
        interconnect=interconnect if num_nodes == 1 else Interconnect.PCIE,
        network_gbps=network_gbps,
    )


def _build_layout(nodes: Sequence[Node]) -> _Layout:
    # one pass over the nodes, each node's capacity and labels read once
    by_name: dict[str, Node] = {}
    slot_of: dict[str, tuple[int, str, tuple[str, bool]]] = {}
    member_of: dict[str, tuple[_GroupKey, ...]] = {}
    labels_of: dict[str, tuple[str, str, str, bool]] = {}
    for node in sorted(nodes, key=attrgetter("name")):
        cap = node.capacity_for_jobs
        if cap <= 0:
            continue
        name, gpu_type = node.name, node.gpu_type
        by_name[name] = node
        nvlink = node.interconnect is Interconnect.NVLINK
        slot_of[name] = (cap, gpu_type, (gpu_type, nvlink))
        labels = _labels(node)
        member_of[name] = tuple(
            (gpu_type, kind, lab) for kind, lab in zip(_KINDS, labels, strict=True) if lab
        )
        labels_of[name] = (*labels, nvlink)
    return _assemble(by_name, slot_of, member_of, labels_of)


def _sub_layout(parent: _Layout, names: Iterable[str]) -> _Layout:
    """The layout of ``parent``'s nodes among ``names``: what ``_build_layout`` gives for those nodes,
    assembled from the parent's per-node rows (the nodes are not read again)."""
    picked = sorted(parent.nodes.keys() & set(names))
    nodes, slots = parent.nodes, parent.slot_of
    return _assemble(
        {n: nodes[n] for n in picked}, {n: slots[n] for n in picked}, parent.member_of, parent.labels_of
    )


def _assemble(
    by_name: dict[str, Node],
    slot_of: dict[str, tuple[int, str, tuple[str, bool]]],
    member_of: dict[str, tuple[_GroupKey, ...]],
    labels_of: dict[str, tuple[str, str, str, bool]],
) -> _Layout:
    """A layout from per-node rows (by name, sorted; ``member_of`` and ``labels_of`` may hold more)."""
    types: dict[str, list[str]] = {}
    type_cap: dict[str, int] = {}
    max_free: dict[str, int] = {}
    groups: dict[_GroupKey, list[str]] = {}
    for name, (cap, gpu_type, _) in slot_of.items():
        types.setdefault(gpu_type, []).append(name)
        type_cap[gpu_type] = type_cap.get(gpu_type, 0) + cap
        if cap > max_free.get(gpu_type, 0):
            max_free[gpu_type] = cap
        for gkey in member_of[name]:
            groups.setdefault(gkey, []).append(name)
    bucket_sizes: dict[tuple[str, bool], int] = {}
    for _, gpu_type, key in slot_of.values():
        bucket_sizes.setdefault(key, max_free[gpu_type] + 1)
    return _Layout(
        by_name, types, type_cap, max_free, groups, bucket_sizes, slot_of, member_of, labels_of, {}, []
    )


def _build_groups(layout: _Layout) -> _Groups:
    kind_groups: dict[tuple[str, str], list[tuple[_GroupKey, list[str]]]] = {}
    node_groups: dict[str, list[_GroupKey]] = {}
    for gkey, names in layout.groups.items():
        if len(names) < 2:
            continue
        kind_groups.setdefault((gkey[0], gkey[1]), []).append((gkey, names))
        for n in names:
            node_groups.setdefault(n, []).append(gkey)
    order = {
        g: (1 + _KINDS.index(kind), i) for (_, kind), gs in kind_groups.items() for i, (g, _) in enumerate(gs)
    }
    by_type = {t: {g: ns for k in _KINDS for g, ns in kind_groups.get((t, k), ())} for t in layout.types}
    return _Groups(kind_groups, node_groups, order, by_type, layout.groups, layout.labels_of, {}, {})


def _labels(node: Node) -> tuple[str, str, str]:
    return (node.nvlink_domain, node.rack, node.zone)


#: the last layout built, keyed by its node tuple: the simulator and the policies of one round index
#: the same nodes again and again, so the node-only part is built once (a pure memo, no behaviour)
_last_layout: list[tuple[tuple[Node, ...], _Layout]] = []


def _layout_of(nodes: Sequence[Node]) -> _Layout:
    key = tuple(nodes)
    last = _last_layout[-1] if _last_layout else None  # one read: safe if another thread swaps it
    if last is not None and last[0] == key:
        return last[1]
    layout = _build_layout(key)
    _last_layout[:] = [(key, layout)]
    return layout


class FreeIndex:
    """Free GPUs per node, indexed for fast gang placement; ``commit``/``release`` keep it current.

    ``free`` gives the free GPUs per node name (missing names count as the node's full capacity for
    jobs). Nodes that are unschedulable or have no GPUs never receive a gang.
    """

    __slots__ = (
        "_buckets",
        "_free",
        "_group_free",
        "_groups",
        "_layout",
        "_max_free",
        "_multi",
        "_nodes",
        "_slots",
        "_type_cap",
        "_type_free",
        "_types",
        "_version",
    )

    def __init__(
        self, nodes: Sequence[Node], free: Mapping[str, int] | None = None, *, layout: _Layout | None = None
    ) -> None:
        # ``layout``: these nodes' layout, already built (``restricted`` cuts it from its parent's)
        if layout is None:
            layout = _layout_of(nodes)
        if free is None:
            self._fill(layout, {name: cap for name, (cap, _, _) in layout.slot_of.items()})
        else:
            self._fill(
                layout,
                {
                    name: min(cap, max(0, int(free.get(name, cap))))
                    for name, (cap, _, _) in layout.slot_of.items()
                },
            )

    def restricted(self, names: Iterable[str]) -> FreeIndex:
        """An index over this index's nodes among ``names`` with their free GPUs now: it answers what
        ``FreeIndex([those nodes], self.free_map())`` would, built from this index's layout (cheap
        enough per call, e.g. for the extender's candidates-only gang plan). Other names are ignored."""
        layout = _sub_layout(self._layout, names)
        return FreeIndex(
            tuple(layout.nodes.values()), {name: self._free[name] for name in layout.slot_of}, layout=layout
        )

    def _fill(self, layout: _Layout, free: dict[str, int]) -> None:
        """Set up over ``layout`` with ``free`` (every node's free GPUs, within its capacity; kept)."""
        self._layout = layout
        self._nodes = layout.nodes
        self._types = layout.types
        self._type_cap = layout.type_cap
        self._max_free = layout.max_free
        self._groups = layout.groups
        self._slots = layout.slots
        self._version = 0
        self._free = free
        type_free = self._type_free = dict.fromkeys(layout.types, 0)
        # (gpu type, nvlink?) -> buckets[free count] -> sorted node names
        buckets: dict[tuple[str, bool], list[list[str]]] = {
            key: [[] for _ in range(size)] for key, size in layout.bucket_sizes.items()
        }
        self._buckets = buckets
        for name, (_, gpu_type, key) in layout.slot_of.items():
            f = free[name]
            type_free[gpu_type] += f
            buckets[key][f].append(name)  # names arrive sorted
        # the groups of two nodes or more and their free GPUs, kept current by ``_set_free`` once built
        self._multi: _Groups | None = None
        self._group_free: dict[_GroupKey, int] = {}

    def _multi_groups(self) -> _Groups:
        multi = self._multi
        if multi is None:
            layout = self._layout
            if not layout.multi:
                layout.multi.append(_build_groups(layout))
            multi = self._multi = layout.multi[0]
            free = self._free
            self._group_free = {
                gkey: sum(map(free.__getitem__, names))
                for gs in multi.kind_groups.values()
                for gkey, names in gs
            }
        return multi

    # ----------------------------------------------------------------- queries
    @property
    def nodes(self) -> Mapping[str, Node]:
        return self._nodes

    @property
    def version(self) -> int:
        """A counter that changes whenever the free GPUs change (for callers that memoise answers)."""
        return self._version

    def free_of(self, node: str) -> int:
        return self._free.get(node, 0)

    def free_map(self) -> dict[str, int]:
        return dict(self._free)

    def gpu_types(self) -> tuple[str, ...]:
        return tuple(sorted(self._types))

    def type_free(self, gpu_type: str) -> int:
        return self._type_free.get(gpu_type, 0)

    def type_capacity(self, gpu_type: str) -> int:
        return self._type_cap.get(gpu_type, 0)

    def largest_node(self, gpu_type: str) -> int:
        return self._max_free.get(gpu_type, 0)

    def fits(self, alloc: Allocation) -> bool:
        """Whether ``alloc`` fits in what is free now (same GPU type on every node)."""
        for name, replicas in alloc.replicas_per_node:
            node = self._nodes.get(name)
            if node is None or node.gpu_type != alloc.gpu_type:
                return False
            if self._free[name] < replicas * alloc.gpus_per_replica:
                return False
        return True

    # ---------------------------------------------------------------- updates
    def _set_free(self, name: str, new: int) -> None:
        node = self._nodes[name]
        old = self._free[name]
        if old == new:
            return
        buckets = self._buckets[(node.gpu_type, node.interconnect is Interconnect.NVLINK)]
        old_bucket = buckets[old]
        del old_bucket[bisect.bisect_left(old_bucket, name)]
        bisect.insort(buckets[new], name)
        self._free[name] = new
        self._type_free[node.gpu_type] += new - old
        if self._multi is not None:
            for gkey in self._multi.node_groups.get(name, ()):
                self._group_free[gkey] += new - old
        self._version += 1

    def commit(self, alloc: Allocation) -> None:
        """Take ``alloc``'s GPUs. Raises ``ValueError`` if it does not fit (a caller bug)."""
        if not self.fits(alloc):
            raise ValueError(f"allocation of job {alloc.job!r} does not fit the free GPUs")
        for name, replicas in alloc.replicas_per_node:
            self._set_free(name, self._free[name] - replicas * alloc.gpus_per_replica)

    def release(self, alloc: Allocation) -> None:
        """Give ``alloc``'s GPUs back (capped at each node's capacity; unknown nodes are ignored)."""
        for name, replicas in alloc.replicas_per_node:
            node = self._nodes.get(name)
            if node is None:
                continue
            self._set_free(
                name, min(node.capacity_for_jobs, self._free[name] + replicas * alloc.gpus_per_replica)
            )

    # -------------------------------------------------------------- placement
    def _slots_capacity(self, gpu_type: str, gpr: int) -> int:
        """Whole replicas of ``gpr`` GPUs the type's nodes hold when empty (cached per size)."""
        key = (gpu_type, gpr)
        cached = self._slots.get(key)
        if cached is None:
            slot_of = self._layout.slot_of
            cached = sum(slot_of[n][0] // gpr for n in self._types.get(gpu_type, ()))
            self._slots[key] = cached
        return cached

    def why_not(self, *, replicas: int, gpus_per_replica: int, gpu_type: str) -> Unschedulable | None:
        """A reason the gang can never or cannot now fit by counting alone (None: counts allow it)."""
        need = replicas * gpus_per_replica
        if gpu_type not in self._types:
            return Unschedulable(f"no schedulable node has GPU type {gpu_type}", resolvable=False)
        if gpus_per_replica > self._max_free[gpu_type]:
            return Unschedulable(
                f"needs {gpus_per_replica} GPUs of type {gpu_type} per replica; "
                f"the largest {gpu_type} node has {self._max_free[gpu_type]}",
                resolvable=False,
            )
        if replicas > self._slots_capacity(gpu_type, gpus_per_replica):
            return Unschedulable(
                f"asks {need} GPUs of type {gpu_type}, cluster has {self._type_cap[gpu_type]}",
                resolvable=False,
            )
        free = self._type_free[gpu_type]
        if free < need:
            return Unschedulable(
                f"waiting for {need} GPU{'' if need == 1 else 's'} of type {gpu_type}: {free} free"
            )
        return None

    def short_of_gpus(self, replicas: Sequence[int], gpus_per_replica: int, gpu_types: Sequence[str]) -> bool:
        """Whether ``place`` would refuse every (replica count, type) pair only for want of free GPUs.

        True exactly when, for each pair, ``place`` takes its counting fast path (a resolvable
        "waiting for N GPUs" answer): O(number of types), no search, no reason worded. Greedy
        callers use it to skip placement attempts in a full cluster.
        """
        if not gpu_types or not replicas:
            return False
        fewest = min(replicas)
        if fewest <= 0 or gpus_per_replica <= 0:
            return False  # let ``place`` raise its error
        need = fewest * gpus_per_replica
        most = max(replicas)
        for t in gpu_types:
            free = self._type_free.get(t)
            if (
                free is None
                or free >= need
                or gpus_per_replica > self._max_free[t]
                or most > self._slots_capacity(t, gpus_per_replica)
            ):
                return False
        return True

    def place(
        self,
        *,
        replicas: int,
        gpus_per_replica: int,
        gpu_type: str,
        job: str,
        prefer: Mapping[str, int] | None = None,
    ) -> Allocation | Unschedulable:
        """Place a gang without committing it; see the module docstring for the preference order."""
        if replicas <= 0 or gpus_per_replica <= 0:
            raise ValueError(f"job {job!r}: replicas and gpus_per_replica must be positive")
        need = replicas * gpus_per_replica
        # Fast rejection by counting (the common case in a full cluster) before any search.
        if (
            gpu_type in self._types
            and self._type_free[gpu_type] < need
            and gpus_per_replica <= self._max_free[gpu_type]
            and replicas <= self._slots_capacity(gpu_type, gpus_per_replica)
        ):
            free = self._type_free[gpu_type]
            return Unschedulable(
                f"waiting for {need} GPU{'' if need == 1 else 's'} of type {gpu_type}: {free} free"
            )
        reason = self.why_not(replicas=replicas, gpus_per_replica=gpus_per_replica, gpu_type=gpu_type)
        if reason is not None:
            return reason
        prefer = {n: r for n, r in (prefer or {}).items() if r > 0}
        best = (
            self._place_with_prefer(replicas, gpus_per_replica, gpu_type, prefer)
            if prefer
            else self._place_plain(replicas, gpus_per_replica, gpu_type)
        )
        if best is None:
            return Unschedulable(
                f"waiting for {replicas} replicas x {gpus_per_replica} GPUs of type {gpu_type}: "
                f"{self._type_free[gpu_type]} free but no set of nodes holds whole replicas"
            )
        return Allocation.of(job, gpu_type, gpus_per_replica, best.per_node)

    def _best_single(self, gpu_type: str, nvlink: bool, need: int) -> str | None:
        buckets = self._buckets.get((gpu_type, nvlink))
        if buckets is None:
            return None
        for f in range(need, len(buckets)):
            if buckets[f]:
                return buckets[f][0]
        return None

    def _single(self, name: str, replicas: int, gpr: int) -> _Candidate:
        node = self._nodes[name]
        level = (
            LocalityLevel.NVLINK_DOMAIN if node.interconnect is Interconnect.NVLINK else LocalityLevel.NODE
        )
        f = self._free[name]
        return _Candidate({name: replicas}, level, f - replicas * gpr, f, name)

    def _pack(
        self, names: Sequence[str], replicas: int, gpr: int, prefer: Mapping[str, int]
    ) -> tuple[dict[str, int], int, int] | None:
        """Fewest nodes first (largest holes first), best fit for the last node; prefer-nodes first."""
        slots = [(n, self._free[n] // gpr) for n in names]
        slots = [(n, s) for n, s in slots if s > 0]
        if sum(s for _, s in slots) < replicas:
            return None
        slots.sort(key=lambda x: (0 if x[0] in prefer else 1, -x[1], x[0]))
        chosen: dict[str, int] = {}
        remaining = replicas
        i = 0
        while remaining > 0:
            name, s = slots[i]
            if s >= remaining:
                # best fit for the last piece among the nodes not taken yet (same prefer class)
                cls = 0 if name in prefer else 1
                fit = [
                    (s2, n2) for n2, s2 in slots[i:] if s2 >= remaining and (0 if n2 in prefer else 1) == cls
                ]
                _, n_best = min(fit)
                chosen[n_best] = remaining
                remaining = 0
            else:
                chosen[name] = s
                remaining -= s
            i += 1
        group_free = sum(map(self._free.__getitem__, names))
        leftover = sum(self._free[n] for n in chosen) - replicas * gpr
        return chosen, leftover, group_free

    def _group_candidates(
        self, kind: str, gpu_type: str, replicas: int, gpr: int, prefer: Mapping[str, int]
    ) -> list[_Candidate]:
        need = replicas * gpr
        out: list[_Candidate] = []
        for (_, _, label), names in self._multi_groups().kind_groups.get((gpu_type, kind), ()):
            if self._group_free[(gpu_type, kind, label)] < need:
                continue
            cand = self._group_candidate(label, names, replicas, gpr, prefer)
            if cand is not None:
                out.append(cand)
        return out

    def _group_candidate(
        self, label: str, names: Sequence[str], replicas: int, gpr: int, prefer: Mapping[str, int]
    ) -> _Candidate | None:
        packed = self._pack(names, replicas, gpr, prefer)
        if packed is None:
            return None
        chosen, leftover, group_free = packed
        level = locality_level(list(chosen) + list(prefer), self._nodes)
        return _Candidate(chosen, level, leftover, group_free, label)

    def _cluster_candidate(
        self, gpu_type: str, replicas: int, gpr: int, prefer: Mapping[str, int]
    ) -> _Candidate | None:
        if prefer:
            packed = self._pack_type_prefer(gpu_type, replicas, gpr, prefer)
        else:
            packed = self._pack_by_buckets(gpu_type, replicas, gpr)
        if packed is None:
            return None
        chosen, leftover, group_free = packed
        level = locality_level(list(chosen) + list(prefer), self._nodes)
        return _Candidate(chosen, level, leftover, group_free, "")

    def _pack_by_buckets(
        self, gpu_type: str, replicas: int, gpr: int
    ) -> tuple[dict[str, int], int, int] | None:
        """``_pack`` over all nodes of a type, walking free-count buckets instead of sorting nodes."""
        merged: list[list[str]] = []
        for nvlink in (True, False):
            b = self._buckets.get((gpu_type, nvlink))
            if b is None:
                continue
            for f, names in enumerate(b):
                while len(merged) <= f:
                    merged.append([])
                merged[f].extend(names)
        chosen: dict[str, int] = {}
        remaining = replicas
        for f in range(len(merged) - 1, gpr - 1, -1):
            s = f // gpr
            names = sorted(merged[f])
            for name in names:
                if remaining <= 0:
                    break
                if s >= remaining:
                    # best fit for the last piece: the smallest bucket that still holds it
                    for f2 in range(remaining * gpr, f + 1):
                        cands = sorted(n for n in merged[f2] if n not in chosen)
                        if cands:
                            chosen[cands[0]] = remaining
                            remaining = 0
                            break
                    break
                chosen[name] = s
                remaining -= s
            if remaining <= 0:
                break
        if remaining > 0:
            return None
        leftover = sum(self._free[n] for n in chosen) - replicas * gpr
        return chosen, leftover, self._type_free[gpu_type]

    def _place_plain(self, replicas: int, gpr: int, gpu_type: str) -> _Candidate | None:
        need = replicas * gpr
        name = self._best_single(gpu_type, True, need)
        if name is not None:
            return self._single(name, replicas, gpr)
        domains = self._group_candidates("domain", gpu_type, replicas, gpr, {})
        if domains:
            return min(domains, key=_Candidate.key)
        name = self._best_single(gpu_type, False, need)
        if name is not None:
            return self._single(name, replicas, gpr)
        for kind in ("rack", "zone"):
            groups = self._group_candidates(kind, gpu_type, replicas, gpr, {})
            if groups:
                return min(groups, key=_Candidate.key)
        return self._cluster_candidate(gpu_type, replicas, gpr, {})

    def _pack_type_prefer(
        self, gpu_type: str, replicas: int, gpr: int, prefer: Mapping[str, int]
    ) -> tuple[dict[str, int], int, int] | None:
        """``_pack`` over every node of the type, reading the free-count buckets instead of sorting the
        nodes: the same choice, at a cost that grows with the gang and the node size, not the cluster."""
        lists = [b for b in (self._buckets.get((gpu_type, nv)) for nv in (True, False)) if b is not None]
        if sum((f // gpr) * len(names) for b in lists for f, names in enumerate(b)) < replicas:
            return None
        gang = {n for n in prefer if n in self._nodes and self._nodes[n].gpu_type == gpu_type}

        def holding(s: int) -> Iterator[str]:
            """The nodes outside the gang with room for exactly ``s`` replicas, by name."""
            runs = [names for b in lists for names in b[s * gpr : (s + 1) * gpr] if names]
            merged: Iterable[str] = runs[0] if len(runs) == 1 else heapq.merge(*runs)
            return (n for n in merged if n not in gang)

        chosen: dict[str, int] = {}
        remaining = replicas
        own = sorted((-(self._free[n] // gpr), n) for n in gang if self._free[n] >= gpr)
        for i, (neg, name) in enumerate(own):
            if -neg >= remaining:  # best fit for the last piece among the gang's nodes not taken yet
                chosen[min((-neg2, n2) for neg2, n2 in own[i:] if -neg2 >= remaining)[1]] = remaining
                remaining = 0
                break
            chosen[name] = -neg
            remaining += neg
        for s in range((max(len(b) for b in lists) - 1) // gpr, 0, -1):
            if remaining <= 0:
                break
            for name in holding(s):
                if s >= remaining:
                    # best fit: the first node of the smallest fuller level below this one, else this node
                    smaller = (first for s2 in range(remaining, s) for first in islice(holding(s2), 1))
                    chosen[next(smaller, name)] = remaining
                    remaining = 0
                    break
                chosen[name] = s
                remaining -= s
        leftover = sum(self._free[n] for n in chosen) - replicas * gpr
        return chosen, leftover, self._type_free[gpu_type]

    def _place_with_prefer(
        self, replicas: int, gpr: int, gpu_type: str, prefer: Mapping[str, int]
    ) -> _Candidate | None:
        """The least by ``_prefer_key`` of the single nodes (the gang's own and the best fits), every
        NVLink domain, rack and zone packed by ``_pack``, and the whole type packed the same way.

        A group is packed only when a lower bound of its key (its level from the labels it holds, the
        gang's nodes in it, the fewest nodes and least leftover any placement needs, its free GPUs)
        does not already lose to the best candidate so far, so a gang on a few racks costs those racks.
        """
        need = replicas * gpr
        layout = self._multi_groups()
        best: tuple[_PreferKey, tuple[int, int], _Candidate] | None = None

        def consider(cand: _Candidate | None, order: tuple[int, int]) -> None:
            nonlocal best
            if cand is not None:
                key = _prefer_key(cand, prefer)
                if best is None or (key, order) < best[:2]:
                    best = (key, order, cand)

        singles = [n for n in prefer if n in self._nodes and self._nodes[n].gpu_type == gpu_type]
        best_fit = [b for b in (self._best_single(gpu_type, nv, need) for nv in (True, False)) if b]
        singles += best_fit
        for i, name in enumerate(dict.fromkeys(singles)):
            if self._free[name] >= need:
                c = self._single(name, replicas, gpr)
                level = locality_level([name, *prefer], self._nodes)
                consider(_Candidate(c.per_node, level, c.leftover, c.group_free, c.group), (0, i))
        # no placement uses fewer nodes, nor (on one node) leaves less over, than these
        fewest = max(-(-replicas // (self._max_free[gpu_type] // gpr)), 1 if best_fit else 2)
        least_left = min(self._free[n] for n in best_fit) - need if fewest == 1 else 0
        gang = [n for n in prefer if n in self._nodes]
        labels = [_labels(self._nodes[n]) for n in gang]
        common = [
            lab if lab and all(other[k] == lab for other in labels) else ""
            for k, lab in enumerate(labels[0] if labels else ("", "", ""))
        ]
        # the gang's one node, if it could hold the whole gang alone (a level of its own)
        lone = gang[0] if len(gang) == 1 and self._free[gang[0]] >= need else None
        lone_nvlink = lone is not None and self._nodes[lone].interconnect is Interconnect.NVLINK

        def bound(gkey: _GroupKey) -> tuple[int, int, int, int, int]:
            doms, racks, zones, has_nvlink = layout.labels(gkey)
            if not gang:
                level = 0 if has_nvlink or doms else 1
            else:
                lone_in = lone is not None and gkey in layout.node_groups.get(lone, ())
                level = (
                    0
                    if (common[0] and common[0] in doms) or (lone_in and lone_nvlink)
                    else 1
                    if lone_in
                    else 2
                    if common[1] and common[1] in racks
                    else 3
                    if common[2] and common[2] in zones
                    else 4
                )
            own = sum(1 for n in gang if gkey in layout.node_groups.get(n, ()))
            return (level, -own, fewest, least_left, self._group_free[gkey])

        def pack(gkey: _GroupKey, names: Sequence[str], lower: tuple[int, int, int, int, int]) -> bool:
            """Pack the group unless its bound loses already; False: it lost (and so do larger bounds)."""
            if best is not None and lower > best[0][:5]:
                return False
            consider(self._group_candidate(gkey[2], names, replicas, gpr, prefer), layout.group_order[gkey])
            return True

        groups = layout.type_groups.get(gpu_type, {})
        related = groups
        if gang:  # the groups that may hold the gang's nodes or share a label with all of them
            near = [layout.holding((gpu_type, k, lab)) for k, lab in zip(_KINDS, common, strict=True)]
            near += [[g for g in layout.node_groups.get(n, ()) if g in groups] for n in gang]
            related = {g: groups[g] for g in dict.fromkeys(g for gs in near for g in gs)}
        pending = sorted((bound(g), layout.group_order[g], g) for g in related if self._group_free[g] >= need)
        for lower, _, gkey in pending:
            if not pack(gkey, related[gkey], lower):
                break
        consider(self._cluster_candidate(gpu_type, replicas, gpr, prefer), (len(_KINDS) + 1, 0))
        if gang and (best is None or (4, 0, fewest, least_left) <= best[0][:4]):
            # the other groups can only place the gang across the cluster, reusing none of its nodes
            for gkey, names in groups.items():
                if gkey not in related and self._group_free[gkey] >= need:
                    pack(gkey, names, (4, 0, fewest, least_left, self._group_free[gkey]))
        return None if best is None else best[2]


_PreferKey = tuple[int, int, int, int, int, str, tuple[str, ...]]


def _prefer_key(cand: _Candidate, prefer: Mapping[str, int]) -> _PreferKey:
    """Level first; staying on the gang's nodes beats a tighter-looking spot elsewhere at that level."""
    level, nodes, leftover, group_free, group, names = cand.key()
    return (level, -sum(1 for n in cand.per_node if n in prefer), nodes, leftover, group_free, group, names)


def place_gang(
    nodes: Sequence[Node],
    free: Mapping[str, int],
    *,
    replicas: int,
    gpus_per_replica: int,
    gpu_type: str,
    job: str,
    prefer: Mapping[str, int] | None = None,
) -> Allocation | Unschedulable:
    """Place ``replicas`` replicas of ``gpus_per_replica`` GPUs of ``gpu_type``, all or none.

    ``free`` maps node name to free GPUs (missing: the node's whole capacity for jobs). ``prefer`` maps
    node name to replicas of this gang that already run there (not counted in ``replicas`` nor taken from
    ``free``): the new replicas go where the whole gang stays tightest, staying on those nodes on ties.
    Returns the allocation of the new replicas only, or why it cannot be placed.
    """
    return FreeIndex(nodes, free).place(
        replicas=replicas, gpus_per_replica=gpus_per_replica, gpu_type=gpu_type, job=job, prefer=prefer
    )
