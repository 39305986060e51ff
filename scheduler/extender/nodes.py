"""The extender's view of the cache's nodes: node classes, one int key per node, locality groups.

Shell-side data kept in step with ``ClusterCache`` through its ``on_node_change`` hook (called under the
cache's lock, as every reader here is). Nodes alike in everything a decision reads of them (GPU type,
GPU count, GPUs free for jobs, link, network, whether they sit in a multi-node NVLink domain,
schedulable) share a *class*; ``key[name]`` is ``(class << 16) | free GPUs``, so a request's thousands
of names become a few distinct keys with one C-speed ``map`` and each key is decided once.
Invalidation rule: ``key`` changes exactly when the cache calls the hook for that node; class numbers are
never reused, so anything memoised per class number stays true for the life of the process. Keys
``remember``ed for a list of names (filter's passing nodes: what prioritize sends next) answer ``keys`` for
an equal list while no node has changed since (``version``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from scheduler.core.types import Node
from scheduler.k8s.cache import ClusterCache

#: free GPUs take the low 16 bits of a key
FREE_BITS = 16
FREE_MASK = (1 << FREE_BITS) - 1


def class_of(node: Node) -> tuple[Any, ...]:
    """What a node's class is made of: every attribute filter, prioritize and preempt read of a node."""
    return (
        node.gpu_type,
        node.gpus,
        node.capacity_for_jobs,
        node.interconnect,
        node.network_gbps,
        bool(node.nvlink_domain),
        node.schedulable,
        node.gpu_api,
    )


def names_itself(node: Node) -> bool:
    """Whether filter's reason for this node names it (no GPUs, cordoned): decided per node, not class."""
    return node.gpus <= 0 or not node.schedulable


class NodeIndex:
    """Per node: its class key; per class: a representative node; per layout: locality groups."""

    def __init__(self, cache: ClusterCache) -> None:
        self.cache = cache
        self._class_ids: dict[tuple[Any, ...], int] = {}
        #: class number -> a node of that class (any one: they are alike in all a decision reads)
        self.rep: list[Node] = []
        #: node name -> ``(class << 16) | free GPUs``
        self.key: dict[str, int] = {}
        self._groups: tuple[int, dict[tuple[str, str], list[str]]] = (-1, {})
        self.version = 0  # moves on every node change
        self._last: tuple[int, Sequence[str], list[int | None]] = (-1, (), [])
        with cache.lock:
            cache.on_node_change(self._changed)
            for name in list(cache.nodes):
                self._changed(name)

    def _changed(self, name: str) -> None:
        self.version += 1
        node = self.cache.nodes.get(name)
        if node is None:
            self.key.pop(name, None)
            return
        cls = class_of(node)
        cid = self._class_ids.get(cls)
        if cid is None:
            cid = self._class_ids[cls] = len(self.rep)
            self.rep.append(node)
        self.key[name] = (cid << FREE_BITS) | min(FREE_MASK, self.cache.free.get(name, 0))

    def keys(self, names: Sequence[str]) -> list[int | None]:
        """The key of each name (None: the cache does not know the node), in order, at C speed."""
        if self._last[0] == self.version and self._last[1] == names:  # comparing costs less than lookups
            return list(self._last[2])
        return list(map(self.key.get, names))

    def remember(self, names: Sequence[str], keys: list[int | None]) -> None:
        """Keep ``keys`` (each name's key now) to answer the next ``keys(names)`` while no node changes."""
        self._last = (self.version, names, keys)

    def groups(self) -> dict[tuple[str, str], list[str]]:
        """("domain" | "rack" | "zone", label) -> node names; rebuilt when the cache's nodes change."""
        version = self.cache.nodes_version
        if self._groups[0] != version:
            groups: dict[tuple[str, str], list[str]] = {}
            for node in self.cache.nodes.values():
                for kind, label in (("domain", node.nvlink_domain), ("rack", node.rack), ("zone", node.zone)):
                    if label:
                        groups.setdefault((kind, label), []).append(node.name)
            self._groups = (version, groups)
        return self._groups[1]
