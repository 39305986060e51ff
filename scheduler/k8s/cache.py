"""A thread-safe, watch-fed cache of Nodes, Pods and TrainingJobs for the scheduler extender.

Adapter module (threads, no API client of its own): ``ClusterCache`` is fed through a ``ListWatchSource``
(``scheduler.k8s.listwatch.KubeListWatch`` over the API server, a fake in tests) and keeps
what the extender's hot path needs precomputed: each node as a core ``Node`` and its free GPUs, updated
incrementally on every event. Free GPUs are allocatable GPUs minus

- GPUs of every non-terminal pod bound to the node (``spec.nodeName`` set), Running or not, and
- GPUs of pods this extender has bound but whose binding the watch has not shown yet ("assumed" pods,
  added by ``assume`` before the Binding is created and dropped when the watch shows the pod bound, when
  the bind fails (``forget``), or after a time-to-live), and of pods a direct read of the API server
  showed bound before the watch did (``note_bound``, counted the same way), and
- GPUs *held* for pods the operator has planned on the node (``perfsched.dev/planned-node``) that are not
  bound yet: a gang's planned GPUs are kept for it from the moment its pods appear until they bind, the pod
  goes, or ``hold_ttl_s`` (``PERFSCHED_EXTENDER_PLAN_HOLD_SECONDS``, 30 s) has passed since the cache first
  saw the pod (a plan that has not bound by then no longer holds anything). ``free`` is net of every hold;
  ``free_for(node, gang)`` adds back the gang's own holds (what the gang itself may use), ``holds_of(gang)``
  lists them. A held pod that is assumed, or whose ResourceClaim is allocated, holds nothing: it is counted
  where it is.

On a node whose GPUs are DRA devices (``scheduler.k8s.dra``: DeviceClasses, ResourceSlices, ResourceClaims
and DeviceTaintRules are watched too), capacity is its healthy GPU devices and the pods' share becomes the
devices allocated ResourceClaims hold plus the GPUs of bound or assumed pods whose claim is not visible
yet (a pod owning an allocated claim on the node is counted by the claim, once: kube-scheduler creates the
claim in PreBind, before the Binding).
A cluster without the ``resource.k8s.io/v1`` API lists those kinds as empty and looks again every minute.

Each kind is fed by list + watch from the list's ``resourceVersion``. A watch that ends or drops is
resumed from the last ``resourceVersion`` seen (bookmarks included); ``410 Gone`` (an expired version)
makes the cache relist that kind and replace its contents. While the API server is unreachable the cache
keeps what it holds and retries every kind with capped backoff (``max_backoff_s``); ``health`` (an
``scheduler.k8s.errors.ApiHealth``) logs the outage once, counts it in
``perfsched_api_unavailable_seconds_total{component="extender"}`` and answers ``api_available()``.
``watch_restarts`` and ``age`` are exposed for metrics. Tests drive the cache with a fake
``ListWatchSource`` or by calling ``replace``/``apply``.
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Set
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

from scheduler.core.decisions import Unschedulable
from scheduler.core.errors import PerfschedError, TemporaryError
from scheduler.core.types import Job, Node
from scheduler.k8s import crd
from scheduler.k8s.codec import (
    CodecError,
    PodInfo,
    decode_node,
    decode_pod,
    has_device_plugin_gpus,
    object_name,
)
from scheduler.k8s.dra import DraError, DraInventory
from scheduler.k8s.errors import ApiHealth, Gone
from scheduler.names import GPU_RESOURCE, TRAININGJOB_PLURAL

log = logging.getLogger(__name__)


class Kind(StrEnum):
    """The kinds the cache holds (the values are the API's plural resource names)."""

    NODES = "nodes"
    PODS = "pods"
    TRAININGJOBS = TRAININGJOB_PLURAL
    DEVICECLASSES = "deviceclasses"
    RESOURCESLICES = "resourceslices"
    RESOURCECLAIMS = "resourceclaims"
    DEVICETAINTRULES = "devicetaintrules"


#: the ``resource.k8s.io`` kinds (absent before Kubernetes 1.34: listed as empty then)
DRA_KINDS = frozenset({Kind.DEVICECLASSES, Kind.RESOURCESLICES, Kind.RESOURCECLAIMS, Kind.DEVICETAINTRULES})
#: how long to wait before looking again for a DRA API the server does not serve
_DRA_ABSENT_RETRY_S = 60.0


class NotServed(PerfschedError):
    """The API server does not serve this kind (404 on list or watch): an optional API is absent."""


class WatchGone(Gone):
    """The watch's resourceVersion is too old (HTTP 410 Gone): the kind must be relisted."""


class ListWatchSource(Protocol):
    """Where the cache's objects come from: the API server, or a fake in tests.

    ``list`` returns the items (API JSON dicts) and the list's resourceVersion. ``watch`` yields watch
    events ``{"type": ADDED|MODIFIED|DELETED|BOOKMARK|ERROR, "object": {...}}`` from ``resource_version``
    on, and returns when the server ends the watch. Both raise ``scheduler.core.errors`` errors only:
    ``WatchGone`` on 410, ``scheduler.k8s.errors.ApiUnavailable`` when the server cannot be reached or
    the connection drops.
    """

    def list(self, kind: Kind) -> tuple[list[dict[str, Any]], str]: ...

    def watch(self, kind: Kind, resource_version: str, timeout_seconds: int) -> Iterator[dict[str, Any]]: ...


@dataclass(frozen=True, slots=True)
class TrainingJobInfo:
    """A TrainingJob as the extender uses it: the core ``Job`` (or why it has none) and its status."""

    key: str
    job: Job | None
    problem: str
    status: crd.TrainingJobStatus


@dataclass(slots=True)
class _Assumed:
    node: str
    gpus: int
    uid: str
    expires: float


@dataclass(slots=True)
class _Hold:
    """GPUs held on a pod's planned node until it binds (see the module docstring)."""

    key: str
    node: str
    gpus: int
    uid: str
    gang: tuple[str, str]
    expires: float


def gang_of(pod: PodInfo) -> tuple[str, str]:
    """The gang a pod's holds belong to: (job, generation), or ("", pod key) for a pod of no job."""
    return (pod.job, pod.generation) if pod.job else ("", pod.key)


class ClusterCache:
    """Nodes, pods and TrainingJobs, with free GPUs per node kept current. Thread-safe.

    Readers that need a consistent view across several calls hold ``lock`` (re-entrant) while reading.
    ``version`` increases on every change, so derived data (gang plans) can be memoised per version.
    """

    def __init__(
        self,
        source: ListWatchSource | None = None,
        *,
        assume_ttl_s: float = 60.0,
        hold_ttl_s: float = 30.0,
        watch_timeout_s: int = 300,
        retry_backoff_s: float = 1.0,
        max_backoff_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
        health: ApiHealth | None = None,
    ) -> None:
        self.lock = threading.RLock()
        self._source = source
        self._assume_ttl = assume_ttl_s
        self._hold_ttl = hold_ttl_s
        self._watch_timeout = watch_timeout_s
        self._backoff = retry_backoff_s
        self._max_backoff = max_backoff_s
        #: whether the API server answers, as the watches see it (outage log, metric, ``api_available``)
        self.health = health or ApiHealth("extender")
        self._clock = clock
        self.version = 0
        self.nodes: dict[str, Node] = {}
        #: free GPUs per node (allocatable - bound pods - assumed pods - held GPUs), never below 0
        self.free: dict[str, int] = {}
        #: free GPUs per node before holds
        self._free_raw: dict[str, int] = {}
        #: increases whenever a node is added, changed or removed (not on pod events, unlike ``version``)
        self.nodes_version = 0
        #: called (under ``lock``) with a node's name whenever that node or its free GPUs change or it goes
        #: away; readers keep derived per-node data in step with it (``on_node_change``)
        self._node_listeners: list[Callable[[str], None]] = []
        self._used: dict[str, int] = {}
        #: DRA classes, slices and claims; ``_dra_nodes`` the Node objects of nodes without device-plugin
        #: GPUs (re-decoded when their slices change); ``_holders`` node -> pod key -> (uid, GPUs) of the
        #: pods holding GPUs there
        self.dra = DraInventory()
        self._dra_nodes: dict[str, Mapping[str, Any]] = {}
        self._holders: dict[str, dict[str, tuple[str, int]]] = {}
        self._dra_warned: set[tuple[str, str]] = set()
        self._assumed_by_node: dict[str, int] = {}
        self._pods: dict[str, PodInfo] = {}  # by namespace/name
        self._assumed: dict[str, _Assumed] = {}  # by namespace/name
        #: planned pods' holds (by pod key), the pod keys holding on each node, when each pod's hold ends
        #: (kept across the pod's updates) and a heap of those ends
        self._holds: dict[str, _Hold] = {}
        self._holds_by_node: dict[str, set[str]] = {}
        self._hold_ends: dict[str, float] = {}
        self._hold_heap: list[tuple[float, str]] = []
        #: holds of started gangs none of whose pods exist yet: job -> hold keys; (job, generation) -> end
        self._job_hold_keys: dict[str, list[str]] = {}
        self._job_hold_ends: dict[tuple[str, str], float] = {}
        self._gangs: dict[tuple[str, str], set[str]] = {}  # (job, generation) -> pod keys
        self.jobs: dict[str, TrainingJobInfo] = {}
        self._synced: dict[Kind, bool] = {k: False for k in Kind}
        self._last_event: dict[Kind, float] = {}
        self._rv: dict[Kind, str] = {}
        #: watch restarts by (kind, reason): reason is "ended", "error" or "gone"
        self.watch_restarts: Counter[tuple[str, str]] = Counter()
        self.decode_errors = 0
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    # --- reading ----------------------------------------------------------------------------------
    @property
    def synced(self) -> bool:
        """True once every kind has been listed at least once."""
        return all(self._synced.values())

    def unsynced(self) -> list[str]:
        """Kinds not listed yet (what ``/readyz`` waits for)."""
        return [k.value for k, done in self._synced.items() if not done]

    def api_available(self) -> bool:
        """False while the watches cannot reach the API server (the cache then serves what it holds)."""
        return self.health.available()

    def api_outage_seconds(self) -> float:
        """How long the current API server outage has lasted (0 when the API is available)."""
        return self.health.outage_seconds()

    def pod_by_uid(self, uid: str) -> PodInfo | None:
        with self.lock:
            for p in self._pods.values():
                if p.uid == uid:
                    return p
            return None

    def age(self, kind: Kind) -> float:
        """Seconds since the last list or watch event of ``kind`` (inf before the first)."""
        last = self._last_event.get(kind)
        return float("inf") if last is None else max(0.0, self._clock() - last)

    def pod(self, namespace: str, name: str) -> PodInfo | None:
        with self.lock:
            return self._pods.get(f"{namespace}/{name}")

    def gang(self, job: str, generation: str) -> list[PodInfo]:
        """Pods of one generation of a job's gang, sorted by replica index then name."""
        with self.lock:
            keys = self._gangs.get((job, generation), ())
            pods = [self._pods[k] for k in keys if k in self._pods]
        return sorted(
            pods, key=lambda p: (p.replica_index if p.replica_index is not None else 1 << 30, p.name)
        )

    def bound_gang_pods(self) -> list[PodInfo]:
        """Every pod of a TrainingJob's gang that is bound to a node (whose placement gets recorded)."""
        with self.lock:
            pods = (self._pods.get(k) for keys in self._gangs.values() for k in keys)
            return [p for p in pods if p is not None and p.node_name]

    def assumed_node(self, namespace: str, name: str) -> str | None:
        """The node a pod was assumed onto by a bind the watch has not confirmed yet, if any."""
        with self.lock:
            self._expire_assumed()
            a = self._assumed.get(f"{namespace}/{name}")
            return a.node if a is not None else None

    def placed_node(self, pod: PodInfo) -> str:
        """Where a pod is: its ``nodeName``, else the node an unconfirmed bind put it on, else the node
        whose DRA devices its allocated claim holds (kube-scheduler allocates it in PreBind, before the
        Binding), else ""."""
        if pod.node_name:
            return pod.node_name
        a = self._assumed.get(pod.key)
        if a is not None:
            return a.node
        return self.dra.claimed_node(pod.uid) if pod.uid else ""

    def used(self, node: str) -> int:
        with self.lock:
            return self._used.get(node, 0) + self._assumed_by_node.get(node, 0)

    def now(self) -> float:
        """The cache's clock (monotonic seconds)."""
        return self._clock()

    def free_for(self, node: str, gang: tuple[str, str]) -> int:
        """Free GPUs on ``node`` for a pod of ``gang``: ``free`` plus what the gang itself holds there."""
        keys = self._holds_by_node.get(node)
        if not keys:
            return self.free.get(node, 0)
        others = sum(
            h.gpus for h in map(self._holds.__getitem__, keys) if h.gang != gang and self._holding(h)
        )
        return max(0, self._free_raw.get(node, 0) - others)

    def held_nodes(self) -> Set[str]:
        """Nodes where some planned pod holds GPUs (a live view; empty when nothing is held)."""
        return self._holds_by_node.keys()

    def held_from(self, node: str, gang: tuple[str, str]) -> int:
        """GPUs on ``node`` that are free but held for other gangs' planned pods, as ``gang`` sees them."""
        if node not in self._holds_by_node:
            return 0
        return self._free_raw.get(node, 0) - self.free_for(node, gang)

    def holds_of(self, gang: tuple[str, str]) -> dict[str, int]:
        """Node -> GPUs held there for ``gang`` (its planned pods, its job's plan while they do not all
        exist); empty when it holds nothing."""
        out: dict[str, int] = {}
        job, generation = gang
        keys = [*self._gangs.get(gang, ()), *self._job_hold_keys.get(job, ())] if job else [generation]
        for key in keys:
            h = self._holds.get(key)
            if h is not None and h.gang == gang and self._holding(h):
                out[h.node] = out.get(h.node, 0) + h.gpus
        return out

    def _holding(self, h: _Hold) -> bool:
        """Whether a hold still counts: its pod is neither assumed nor holding an allocated claim."""
        return h.key not in self._assumed and not (h.uid and self.dra.claimed_node(h.uid))

    # --- assumed pods (bind reservations) ---------------------------------------------------------
    def assume(self, namespace: str, name: str, uid: str, node: str, gpus: int) -> None:
        """Reserve ``gpus`` on ``node`` for a pod about to be bound (replacing an earlier reservation)."""
        key = f"{namespace}/{name}"
        with self.lock:
            self._drop_assumed(key)
            existing = self._pods.get(key)
            if existing is not None and existing.holds_gpus:
                return  # the watch already counts it
            self._assume(key, uid, node, gpus)

    def _assume(self, key: str, uid: str, node: str, gpus: int) -> None:
        self._assumed[key] = _Assumed(node, gpus, uid, self._clock() + self._assume_ttl)
        self._assumed_by_node[node] = self._assumed_by_node.get(node, 0) + gpus
        self._refresh_free(node)
        self._refresh_hold(key, node)
        self.version += 1

    def note_bound(self, pod: PodInfo) -> bool:
        """Count a pod that a direct read of the API server shows bound to a node where the cache does not
        count it yet (the watch has not delivered it): like a pod assumed by a bind, until the watch shows
        it bound, finished or gone, or the assume TTL passes. True when the cache's view changed."""
        with self.lock:
            if not pod.holds_gpus or pod.node_name not in self.nodes:
                return False
            known = self._pods.get(pod.key)
            if known is not None and known.holds_gpus and known.uid == pod.uid:
                return False  # the watch counts it already
            mine = self._assumed.get(pod.key)
            if mine is not None and mine.node == pod.node_name and mine.uid == pod.uid:
                return False
            self._drop_assumed(pod.key)
            self._assume(pod.key, pod.uid, pod.node_name, pod.gpus)
            return True

    def reserve(self, namespace: str, name: str, uid: str, node: str, gpus: int) -> str | None:
        """Check that ``gpus`` are free on ``node`` and ``assume`` them, atomically; or say why not.

        Returns None when reserved (or when nothing needs reserving), else a reason a person can read.
        Two binds racing for the last GPUs of a node cannot both succeed.
        """
        with self.lock:
            self._expire_assumed()
            key = f"{namespace}/{name}"
            known = self.nodes.get(node)
            if gpus <= 0:
                return None
            if known is None:
                return f"perfsched: node {node} is not in the extender's cache"
            mine = self._assumed.get(key)
            free = self.free.get(node, 0) + (mine.gpus if mine is not None and mine.node == node else 0)
            if free < gpus:
                return f"perfsched: node {node} no longer fits: needs {gpus} {GPU_RESOURCE}, {free} free"
            self.assume(namespace, name, uid, node, gpus)
            return None

    def forget(self, namespace: str, name: str) -> None:
        """Release a reservation made by ``assume`` (the bind failed)."""
        with self.lock:
            if self._drop_assumed(f"{namespace}/{name}"):
                self.version += 1

    def _drop_assumed(self, key: str) -> bool:
        a = self._assumed.pop(key, None)
        if a is None:
            return False
        left = self._assumed_by_node.get(a.node, 0) - a.gpus
        if left > 0:
            self._assumed_by_node[a.node] = left
        else:
            self._assumed_by_node.pop(a.node, None)
        self._refresh_free(a.node)
        self._refresh_hold(key, a.node)
        return True

    def _refresh_hold(self, key: str, done: str) -> None:
        """Refresh the node ``key``'s hold is on, unless it is ``done`` (already refreshed)."""
        h = self._holds.get(key)
        if h is not None and h.node != done:
            self._refresh_free(h.node)

    def _expire_assumed(self) -> None:
        if self._hold_heap:
            self._expire_holds()
        if not self._assumed:
            return
        now = self._clock()
        expired = [k for k, a in self._assumed.items() if a.expires <= now]
        for k in expired:
            log.warning("assumed pod never showed up bound; releasing its GPUs", extra={"pod": k})
            self._drop_assumed(k)
        if expired:
            self.version += 1

    def _expire_holds(self) -> None:
        now = self._clock()
        heap = self._hold_heap
        expired = False
        while heap and heap[0][0] <= now:
            end, key = heapq.heappop(heap)
            h = self._holds.get(key)
            if h is not None and h.expires == end:
                self._drop_hold(key)
                expired = True
        if expired:
            self.version += 1

    def _add_hold(self, pod: PodInfo) -> None:
        """Hold a planned, unbound pod's GPUs on its planned node, until its hold ends."""
        now = self._clock()
        end = self._hold_ends.get(pod.key)
        if end is None:
            end = self._hold_ends[pod.key] = now + self._hold_ttl
            heapq.heappush(self._hold_heap, (end, pod.key))
        if end <= now:
            return
        self._holds[pod.key] = _Hold(pod.key, pod.planned_node, pod.gpus, pod.uid, gang_of(pod), end)
        self._holds_by_node.setdefault(pod.planned_node, set()).add(pod.key)
        self._refresh_free(pod.planned_node)

    def _job_holds(self, job: str) -> None:
        """Hold a started gang's GPUs, as its TrainingJob's ``status.allocation`` plans them, while the pods
        of its generation do not all exist yet (the operator creates them once pods exiting on its nodes have
        gone): per node, less the GPUs of its pods there (which hold for themselves), until all its pods
        exist, the job ends or changes generation, or ``hold_ttl_s`` has passed."""
        for key in self._job_hold_keys.pop(job, ()):
            self._drop_hold(key)
        info = self.jobs.get(job)
        alloc = info.status.allocation if info is not None else None
        if info is None or alloc is None or alloc.gpus_per_replica <= 0:
            return
        if info.status.phase in crd.TERMINAL_PHASES:
            return
        gang = (job, str(info.status.gang_generation))
        members = [self._pods[k] for k in self._gangs.get(gang, ()) if k in self._pods]
        if len(members) >= alloc.replicas:
            return  # its pods exist: they hold for it
        theirs: dict[str, int] = {}
        for p in members:
            where = p.node_name or p.planned_node
            theirs[where] = theirs.get(where, 0) + p.gpus
        now = self._clock()
        end = self._job_hold_ends.get(gang)
        if end is None:
            end = self._job_hold_ends[gang] = now + self._hold_ttl
        if end <= now:
            return
        keys = []
        for node, r in sorted(alloc.replicas_per_node.items()):
            gpus = r * alloc.gpus_per_replica - theirs.get(node, 0)
            if gpus <= 0:
                continue
            key = f"{job}@{gang[1]}#{node}"
            self._holds[key] = _Hold(key, node, gpus, "", gang, end)
            self._holds_by_node.setdefault(node, set()).add(key)
            heapq.heappush(self._hold_heap, (end, key))
            keys.append(key)
            self._refresh_free(node)
        if keys:
            self._job_hold_keys[job] = keys

    def _drop_hold(self, key: str) -> None:
        h = self._holds.pop(key, None)
        if h is None:
            return
        keys = self._holds_by_node.get(h.node)
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self._holds_by_node[h.node]
        self._refresh_free(h.node)

    def expire_assumed(self) -> None:
        """Drop reservations and holds past their time-to-live (called by the watch loop and by readers)."""
        with self.lock:
            self._expire_assumed()

    # --- writing ----------------------------------------------------------------------------------
    def on_node_change(self, listener: Callable[[str], None]) -> None:
        """Call ``listener(name)`` (under ``lock``) whenever node ``name``, or its free GPUs, change or it
        goes away (``name`` then absent from ``nodes``)."""
        with self.lock:
            self._node_listeners.append(listener)

    def _refresh_free(self, name: str) -> None:
        node = self.nodes.get(name)
        if node is None:
            self.free.pop(name, None)
            self._free_raw.pop(name, None)
        else:
            cap = node.gpus if node.schedulable else 0
            used = self._used.get(name, 0) + self._assumed_by_node.get(name, 0)
            owners: frozenset[str] = frozenset()
            if node.gpu_api == "dra":
                # kube-scheduler creates a pod's claim in PreBind, before the Binding: an assumed or bound
                # pod whose claim is visible is counted by the claim alone
                held, owners = self.dra.allocated(name)
                holders = self._holders.get(name, {}).values()
                used = held + sum(gpus for uid, gpus in holders if not uid or uid not in owners)
                if self._assumed_by_node.get(name):
                    assumed = (a for a in self._assumed.values() if a.node == name)
                    used += sum(a.gpus for a in assumed if not a.uid or a.uid not in owners)
            raw = self._free_raw[name] = max(0, cap - used)
            keys = self._holds_by_node.get(name)
            if keys:
                raw -= sum(h.gpus for h in map(self._holds.__getitem__, keys) if self._holding(h))
            self.free[name] = max(0, raw)
        for listener in self._node_listeners:
            listener(name)

    def replace(self, kind: Kind, items: list[dict[str, Any]], resource_version: str = "") -> None:
        """Replace everything of ``kind`` with a fresh list (initial sync and relist after 410)."""
        with self.lock:
            if kind in DRA_KINDS:
                for problem in self.dra.replace(kind.value, items):
                    self.decode_errors += 1
                    log.warning("ignoring %s object that does not decode: %s", kind.value, problem)
                self._dra_changed(None)
            elif kind is Kind.NODES:
                gone = set(self.nodes)
                self.nodes = {}
                self._dra_nodes = {}
                for obj in items:
                    node = self._decode_node(obj)
                    if node is not None:
                        self.nodes[node.name] = node
                self.free = {}
                for name in gone.union(self.nodes):
                    self._refresh_free(name)
                self.nodes_version += 1
            elif kind is Kind.PODS:
                self._pods = {}
                self._gangs = {}
                self._used = {}
                self._holders = {}
                self._holds = {}
                self._holds_by_node = {}
                for obj in items:
                    pod = self._decode_pod(obj)
                    if pod is not None:
                        self._add_pod(pod)
                for key in [k for k in self._hold_ends if k not in self._pods]:
                    del self._hold_ends[key]
                self._job_hold_keys = {}
                for job in self.jobs:
                    self._job_holds(job)
                for key in [k for k in self._assumed if self._pods.get(k, None) is not None]:
                    if self._pods[key].node_name or self._pods[key].terminal:
                        self._drop_assumed(key)
                for name in self.nodes:
                    self._refresh_free(name)
            else:
                gone = set(self.jobs)
                self.jobs = {}
                for obj in items:
                    info = _decode_trainingjob(obj)
                    self.jobs[info.key] = info
                for job in gone | set(self.jobs):
                    self._job_holds(job)
                self._job_hold_ends = {g: t for g, t in self._job_hold_ends.items() if g[0] in self.jobs}
            self._rv[kind] = resource_version
            self._synced[kind] = True
            self._last_event[kind] = self._clock()
            self.version += 1

    def apply(self, kind: Kind, event_type: str, obj: dict[str, Any]) -> None:
        """Apply one watch event (ADDED, MODIFIED, DELETED; BOOKMARK only moves the resourceVersion)."""
        meta = obj.get("metadata") or {}
        rv = meta.get("resourceVersion") if isinstance(meta, Mapping) else None
        with self.lock:
            self._last_event[kind] = self._clock()
            if isinstance(rv, str) and rv:
                self._rv[kind] = rv
            if event_type == "BOOKMARK":
                return
            deleted = event_type == "DELETED"
            if kind in DRA_KINDS:
                self._apply_dra(kind, obj, deleted)
            elif kind is Kind.NODES:
                self._apply_node(obj, deleted)
            elif kind is Kind.PODS:
                self._apply_pod(obj, deleted)
            else:
                info = _decode_trainingjob(obj)
                if deleted:
                    self.jobs.pop(info.key, None)
                    for gang in [g for g in self._job_hold_ends if g[0] == info.key]:
                        del self._job_hold_ends[gang]
                else:
                    self.jobs[info.key] = info
                self._job_holds(info.key)
            self.version += 1

    def _decode_node(self, obj: Mapping[str, Any]) -> Node | None:
        try:
            if has_device_plugin_gpus(obj):
                return decode_node(obj)
            name = object_name(obj, "Node")
            self._dra_nodes[name] = obj
            gpus = self.dra.node_gpus(name)
            if gpus is not None:
                self._warn_missing(name, gpus.missing)
            return decode_node(obj, dra=gpus)
        except CodecError as exc:
            self.decode_errors += 1
            log.warning("ignoring node that does not decode: %s", exc)
            return None

    def _warn_missing(self, node: str, missing: tuple[str, ...]) -> None:
        for attribute in missing:
            if (node, attribute) not in self._dra_warned:
                self._dra_warned.add((node, attribute))
                log.warning(
                    "DRA GPUs of node %s have no %s attribute: typed unknown",
                    node,
                    attribute,
                    extra={"node": node, "attribute": attribute},
                )

    def _apply_dra(self, kind: Kind, obj: Mapping[str, Any], deleted: bool) -> None:
        meta = obj.get("metadata") or {}
        name = str(meta.get("name", "")) if isinstance(meta, Mapping) else ""
        key = f"{meta.get('namespace') or ''}/{name}" if isinstance(meta, Mapping) else name
        try:
            if kind is Kind.DEVICECLASSES:
                touched = self.dra.delete_class(name) if deleted else self.dra.set_class(obj)
            elif kind is Kind.RESOURCESLICES:
                touched = self.dra.delete_slice(name) if deleted else self.dra.set_slice(obj)
            elif kind is Kind.DEVICETAINTRULES:
                touched = self.dra.delete_rule(name) if deleted else self.dra.set_rule(obj)
            else:
                touched = self.dra.delete_claim(key) if deleted else self.dra.set_claim(obj)
        except DraError as exc:
            self.decode_errors += 1
            log.warning("ignoring %s object that does not decode: %s", kind.value, exc)
            if kind is Kind.DEVICETAINTRULES:
                self._dra_changed(None)  # the rule was dropped
            return
        self._dra_changed(touched)

    def _dra_changed(self, touched: set[str] | None) -> None:
        """Re-decode the DRA nodes among ``touched`` (None: all) and refresh their free GPUs."""
        names = set(self._dra_nodes) if touched is None else touched & set(self._dra_nodes)
        changed = False
        for name in sorted(names):
            node = self._decode_node(self._dra_nodes[name])
            if node is not None and self.nodes.get(name) != node:
                self.nodes[name] = node
                changed = True
            self._refresh_free(name)
        # an allocated claim of a held pod (PreBind) ends its hold, wherever the claim is
        for name in set(self._holds_by_node) - names:
            self._refresh_free(name)
        if changed:
            self.nodes_version += 1

    def _decode_pod(self, obj: Mapping[str, Any]) -> PodInfo | None:
        try:
            return decode_pod(obj)
        except CodecError as exc:
            self.decode_errors += 1
            log.warning("ignoring pod that does not decode: %s", exc)
            return None

    def _apply_node(self, obj: Mapping[str, Any], deleted: bool) -> None:
        if deleted:
            meta = obj.get("metadata") or {}
            name = str(meta.get("name", "")) if isinstance(meta, Mapping) else ""
            self.nodes.pop(name, None)
            self._dra_nodes.pop(name, None)
            self._refresh_free(name)
            self.nodes_version += 1
            return
        if has_device_plugin_gpus(obj):
            meta = obj.get("metadata") or {}
            self._dra_nodes.pop(str(meta.get("name", "")) if isinstance(meta, Mapping) else "", None)
        node = self._decode_node(obj)
        if node is not None:
            if self.nodes.get(node.name) == node:
                return  # a status heartbeat: nothing the scheduler reads changed
            self.nodes[node.name] = node
            self._refresh_free(node.name)
            self.nodes_version += 1

    def _apply_pod(self, obj: Mapping[str, Any], deleted: bool) -> None:
        pod = self._decode_pod(obj)
        if pod is None:
            return
        old = self._pods.get(pod.key)
        if old is not None:
            self._remove_pod(old)
        if deleted:
            self._drop_assumed(pod.key)
            self._hold_ends.pop(pod.key, None)
            return
        self._add_pod(pod)
        if pod.node_name or pod.terminal:
            # the watch now shows where the pod is: its own accounting replaces the reservation
            self._drop_assumed(pod.key)

    def _add_pod(self, pod: PodInfo) -> None:
        self._pods[pod.key] = pod
        if pod.job:
            self._gangs.setdefault((pod.job, pod.generation), set()).add(pod.key)
        if pod.holds_gpus:
            self._used[pod.node_name] = self._used.get(pod.node_name, 0) + pod.gpus
            self._holders.setdefault(pod.node_name, {})[pod.key] = (pod.uid, pod.gpus)
            self._refresh_free(pod.node_name)
        if pod.job in self._job_hold_keys:
            self._job_holds(pod.job)  # the first pod of its generation: the pods hold from now on
        if pod.planned_node and pod.gpus > 0 and not pod.node_name and not pod.terminal:
            self._add_hold(pod)
        elif pod.key in self._hold_ends:
            del self._hold_ends[pod.key]  # bound or finished: it holds nothing again

    def _remove_pod(self, pod: PodInfo) -> None:
        self._pods.pop(pod.key, None)
        self._drop_hold(pod.key)
        if pod.job:
            members = self._gangs.get((pod.job, pod.generation))
            if members is not None:
                members.discard(pod.key)
                if not members:
                    del self._gangs[(pod.job, pod.generation)]
        if pod.holds_gpus:
            left = self._used.get(pod.node_name, 0) - pod.gpus
            if left > 0:
                self._used[pod.node_name] = left
            else:
                self._used.pop(pod.node_name, None)
            holders = self._holders.get(pod.node_name)
            if holders is not None:
                holders.pop(pod.key, None)
                if not holders:
                    del self._holders[pod.node_name]
            self._refresh_free(pod.node_name)

    # --- list + watch loops -----------------------------------------------------------------------
    def sync_once(self, kind: Kind) -> None:
        """List ``kind`` and replace the cache's contents with it (no watch)."""
        if self._source is None:
            raise RuntimeError("ClusterCache has no ListWatchSource")
        items, rv = self._source.list(kind)
        self.replace(kind, items, rv)

    def run_kind(self, kind: Kind, stop: threading.Event | None = None) -> None:
        """List then watch ``kind`` until ``stop`` is set: resume after drops, relist after 410."""
        if self._source is None:
            raise RuntimeError("ClusterCache has no ListWatchSource")
        stop = stop or self._stop
        need_list = True
        failures = 0  # consecutive failures: the retry delay doubles up to max_backoff_s, resets on success
        while not stop.is_set():
            try:
                if need_list:
                    self.sync_once(kind)
                    self.health.ok()
                    need_list = False
                for event in self._source.watch(kind, self._rv.get(kind, ""), self._watch_timeout):
                    if stop.is_set():
                        return
                    self.health.ok()
                    self._handle_event(kind, event)
                    self.expire_assumed()
                    failures = 0
                self.watch_restarts[(kind.value, "ended")] += 1
            except NotServed:
                # an optional API (DRA before 1.34) is absent: nothing of it to count; look again later
                self._synced[kind] = True
                need_list = True
                stop.wait(_DRA_ABSENT_RETRY_S)
            except WatchGone:
                self.health.ok()
                self.watch_restarts[(kind.value, "gone")] += 1
                log.info("watch expired (410 Gone); relisting", extra={"kind": kind.value})
                need_list = True
            except PerfschedError as exc:
                self.watch_restarts[(kind.value, "error")] += 1
                delay = min(self._max_backoff, self._backoff * (2**failures))
                failures += 1
                # an unreachable API server is logged once per outage by ``health``, not per retry
                if not self.health.failed(exc):
                    log.warning("watch of %s failed (%s); retrying in %.1f s", kind.value, exc, delay)
                stop.wait(delay)

    def _handle_event(self, kind: Kind, event: Mapping[str, Any]) -> None:
        etype = event.get("type")
        obj = event.get("object")
        if etype == "ERROR":
            code = obj.get("code") if isinstance(obj, Mapping) else None
            if code == 410:
                raise WatchGone(str(obj.get("message", "resourceVersion too old")))  # type: ignore[union-attr]
            raise TemporaryError(f"watch error event: {obj}")
        if not isinstance(etype, str) or not isinstance(obj, dict):
            return
        self.apply(kind, etype, obj)

    def start(self, kinds: tuple[Kind, ...] = tuple(Kind)) -> None:
        """Start one daemon thread per kind running ``run_kind``."""
        for kind in kinds:
            t = threading.Thread(target=self.run_kind, args=(kind,), name=f"watch-{kind.value}", daemon=True)
            t.start()
            self._threads.append(t)

    def stop(self, timeout: float = 2.0) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout)

    def wait_synced(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.synced:
                return True
            time.sleep(0.05)
        return self.synced


def _decode_trainingjob(obj: Mapping[str, Any]) -> TrainingJobInfo:
    key = crd.job_key(obj)
    converted = crd.trainingjob_to_job(obj, now=time.time())
    status = crd.parse_status(obj)
    if isinstance(converted, Unschedulable):
        return TrainingJobInfo(key, None, converted.reason, status)
    return TrainingJobInfo(key, converted, "", status)
