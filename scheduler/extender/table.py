"""The cache's nodes as numpy arrays, for the extender's vectorised filter and prioritize.

Shell-side helper without I/O: ``NodeTable`` mirrors a ``ClusterCache``'s per-node keys (class,
schedulable, free GPUs) into integer arrays indexed by a node number, so that a filter or prioritize
call maps its node names to numbers once and then decides, per name, with numpy operations instead of
Python passes. The layout (node numbers, names, classes) is rebuilt when the cache's node set changes
(``nodes_version``); the free-GPU array when anything changes (``version``: binds, pod events). Node
name lists are memoised per layout by their joined text: kube-scheduler sends the same candidate list
for pod after pod, and mapping it again would cost one dict lookup per name. Callers hold the cache's
lock.

A node's *code* is ``(class * 2 + schedulable) * stride + free GPUs`` (``stride``: the largest GPU
count + 1): a small dense integer, so the distinct codes of a request come from one ``bincount``.
Nodes alike in their code get one filter verdict, except the nodes whose reasons name them (cordoned,
no GPUs): ``own`` marks those.
"""

from __future__ import annotations

from operator import itemgetter
from typing import Any

import numpy as np
import numpy.typing as npt

from scheduler.core.types import Node
from scheduler.k8s.cache import ClusterCache

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

#: joined name lists remembered per layout (each holds the list's text and its node numbers)
_NAME_MEMO_SIZE = 8


class NodeTable:
    """Per-node arrays over the cache's nodes, in step with it (see the module docstring)."""

    def __init__(self, cache: ClusterCache) -> None:
        self._cache = cache
        self._nodes_version = -1
        self._version = -1
        self.names: list[str] = []
        self.index: dict[str, int] = {}
        #: node number -> its name (an object array, for fancy indexing)
        self.name_array: npt.NDArray[np.object_] = np.empty(0, dtype=object)
        #: node number -> its name as ASCII bytes (names that are not ASCII never reach the fast paths)
        self.name_bytes: npt.NDArray[np.object_] = np.empty(0, dtype=object)
        #: node number -> its Node
        self.nodes: list[Node] = []
        #: node number -> the cache's class id
        self.cid: IntArray = np.zeros(0, dtype=np.int64)
        #: node number -> True when its filter reason names it (cordoned, or no GPUs at all)
        self.own: BoolArray = np.zeros(0, dtype=np.bool_)
        self.stride = 1
        self.usable = True
        self._free_in_order = False
        self._code_base: IntArray = np.zeros(0, dtype=np.int64)
        self._score_base: IntArray = np.zeros(0, dtype=np.int64)
        #: number of distinct codes (codes run from 0 to ``codes - 1``)
        self.codes = 1
        #: node number -> free GPUs, and -> code (see the module docstring); kept per cache version
        self.free: IntArray = np.zeros(0, dtype=np.int64)
        self.code: IntArray = np.zeros(0, dtype=np.int64)
        #: node number -> ``class * stride + free GPUs`` (prioritize's class key, dense), below
        #: ``score_codes``
        self.score_code: IntArray = np.zeros(0, dtype=np.int64)
        self.score_codes = 1
        #: code -> a node number with that (class, schedulable), for decoding a code to a Node
        self._rep_of_group: dict[int, int] = {}
        self._name_memo: list[tuple[bytes | str, IntArray | None]] = []

    @property
    def nodes_version(self) -> int:
        return self._nodes_version

    @property
    def version(self) -> int:
        """The cache's ``version`` the free-GPU arrays were last brought in step with."""
        return self._version

    def sync(self) -> None:
        """Bring the arrays in step with the cache (cheap when nothing changed)."""
        cache = self._cache
        if cache.nodes_version != self._nodes_version or len(cache.filter_key) != len(self.names):
            self._relayout()
        elif cache.version != self._version:
            self._refresh()

    def _relayout(self) -> None:
        cache = self._cache
        self.names = list(cache.filter_key)
        self.index = {n: i for i, n in enumerate(self.names)}
        self.name_array = np.array(self.names, dtype=object)
        self.name_bytes = np.array([n.encode("utf-8") for n in self.names] + [b""], dtype=object)[:-1]
        self.nodes = [cache.nodes[n] for n in self.names]
        self.own = np.fromiter(
            (not (n.schedulable and n.gpus > 0) for n in self.nodes), dtype=np.bool_, count=len(self.nodes)
        )
        self.stride = max((n.gpus for n in self.nodes), default=0) + 1
        self._name_memo.clear()
        self._nodes_version = cache.nodes_version
        fk = np.fromiter(cache.filter_key.values(), dtype=np.int64, count=len(self.names))
        # a node without a class id (never in practice) has a negative key: no fast path then
        self.usable = not len(fk) or int(fk.min()) >= 0
        # class and schedulable change only with the node (a new layout); free GPUs with any event
        groups = fk >> 16
        self.cid = fk >> 17
        self._code_base = groups * self.stride
        self._score_base = self.cid * self.stride
        self.codes = (int(groups.max()) + 1) * self.stride if len(fk) else 1
        self.score_codes = (int(self.cid.max()) + 1) * self.stride if len(fk) else 1
        self._rep_of_group = {}
        for i, grp in enumerate(groups.tolist()):
            self._rep_of_group.setdefault(grp, i)
        # the cache's free-GPU dict holds the same nodes in the same order (both are written together);
        # its values are small ints, quicker to read than the keys' large ones
        self._free_in_order = list(cache.free) == self.names
        self._set_free(fk & 0xFFFF)

    def _refresh(self) -> None:
        cache = self._cache
        n = len(self.names)
        if self._free_in_order and len(cache.free) == n:
            self._set_free(np.fromiter(cache.free.values(), dtype=np.int64, count=n))
        else:
            self._set_free(np.fromiter(cache.filter_key.values(), dtype=np.int64, count=n) & 0xFFFF)

    def _set_free(self, free: IntArray) -> None:
        self.free = free  # never above the node's GPUs, so below ``stride``
        self.code = self._code_base + free
        self.score_code = self._score_base + free
        self._version = self._cache.version

    def node_of_code(self, code: int) -> tuple[Node, int, bool]:
        """A node with this code's class and schedulability, the code's free GPUs, and whether nodes of
        this code are decided one by one (``own``)."""
        i = self._rep_of_group[code // self.stride]
        return self.nodes[i], code % self.stride, bool(self.own[i])

    def lookup(self, names: list[str], key: bytes | str) -> IntArray | None:
        """The node numbers of ``names`` (``key``: a text naming the list exactly, e.g. the names joined
        by a separator no name holds; "" to skip the memo); None when a name is unknown or named
        twice."""
        if not self.usable:
            return None
        memo = self._name_memo
        if key:
            # a short list compared by identity, else by value (a length check first): no text is hashed
            for i in range(len(memo) - 1, -1, -1):
                seen, hit = memo[i]
                if seen is key or (type(seen) is type(key) and seen == key):
                    return hit
        idx: IntArray | None
        try:
            # one C call for every name (a name the cache does not know raises KeyError)
            found: Any = itemgetter(*names)(self.index) if len(names) > 1 else [self.index[n] for n in names]
            idx = np.array(found, dtype=np.int64)
        except KeyError:
            idx = None
        if idx is not None and len(idx) and int(np.bincount(idx).max()) > 1:
            idx = None
        if key:
            memo.append((key, idx))
            if len(memo) > _NAME_MEMO_SIZE:
                del memo[0]
        return idx


def present_codes(codes: IntArray, size: int) -> tuple[IntArray, IntArray]:
    """The distinct values of ``codes`` (each below ``size``), ascending, and how often each occurs."""
    counts = np.bincount(codes, minlength=size)
    present = np.flatnonzero(counts)
    return present, counts[present]


def first_positions(values: IntArray, wanted: IntArray) -> list[int]:
    """For each of the distinct ``wanted`` values (all present in ``values``), its first position."""
    uniq, first = np.unique(values, return_index=True)
    where = np.searchsorted(uniq, wanted)
    return [int(x) for x in first[where].tolist()]


__all__ = ["NodeTable", "first_positions", "present_codes"]
