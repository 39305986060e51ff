"""``FakeKubeApi``: an in-memory ``KubeApi`` for unit tests of the operator, with API-server semantics.

Pure in-memory (no I/O; the clock is injected). It keeps what the operator relies on from a real API
server: resourceVersions and uids, ``creationTimestamp``, ``AlreadyExists`` on duplicate names,
``Conflict`` on a stale Lease resourceVersion, JSON merge patch of TrainingJob status, label selectors
(``k``, ``!k``, ``k=v``, ``k!=v``), and graceful pod deletion: deleting a bound, unfinished pod with a
grace period only sets ``deletionTimestamp`` (its GPUs stay held) until the test calls
``finish_deletions``, as a kubelet would after the worker exits. Tests play kubelet and scheduler with
``bind``, ``set_pod_phase`` and ``report_progress``, and inject faults with ``fail_next``, or an API server
outage with ``unreachable``.
"""

from __future__ import annotations

import copy
import queue
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import orjson

from scheduler.k8s import crd
from scheduler.k8s.kubeapi import AlreadyExists, ApiUnavailable, Conflict, NotFound, Obj
from scheduler.names import (
    ANNOTATION_PLANNED_NODE,
    ANNOTATION_PROGRESS,
    API_VERSION,
    GPU_RESOURCE,
    LABEL_JOB_NAME,
    TRAININGJOB_KIND,
    TRAININGJOB_PLURAL,
    TRAININGQUEUE_KIND,
)

Key = tuple[str, str]


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: maps merge recursively, ``None`` deletes, anything else replaces."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, Mapping) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


def selector_matches(selector: str, labels: Mapping[str, str]) -> bool:
    """Whether ``labels`` match an equality-based label selector string."""
    for raw in selector.split(","):
        term = raw.strip()
        if not term:
            continue
        if "!=" in term:
            k, v = term.split("!=", 1)
            if labels.get(k.strip()) == v.strip():
                return False
        elif "=" in term:
            k, v = term.split("=", 1)
            if labels.get(k.strip().rstrip("=")) != v.strip().lstrip("="):
                return False
        elif term.startswith("!"):
            if term[1:].strip() in labels:
                return False
        elif term not in labels:
            return False
    return True


class FakeKubeApi:
    """In-memory ``KubeApi``. ``clock`` gives Unix seconds for timestamps (tests pass a fake clock)."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._rv = 0
        self._lock = threading.RLock()
        self.trainingjobs: dict[Key, Obj] = {}
        self.pods: dict[Key, Obj] = {}
        self.nodes: dict[str, Obj] = {}
        self.services: dict[Key, Obj] = {}
        self.leases: dict[Key, Obj] = {}
        self.configmaps: dict[Key, Obj] = {}
        self.priority_classes: dict[str, Obj] = {}
        self.trainingqueues: dict[str, Obj] = {}
        self.namespaces: dict[str, Obj] = {}
        #: DRA objects by plural (``deviceclasses``, ``resourceslices``, ``resourceclaims``)
        self.dra: dict[str, list[Obj]] = {}
        self.events: list[Obj] = []
        #: ``scheduling.k8s.io/v1beta1`` objects by (plural, namespace, name)
        self.gang_objects: dict[tuple[str, str, str], Obj] = {}
        #: False: the server does not serve the Workload API (creating its objects raises ``NotFound``)
        self.serves_workload_api = True
        #: every mutating call, as (verb, namespace, name), for assertions
        self.calls: list[tuple[str, str, str]] = []
        self._faults: dict[str, list[Exception]] = {}
        #: while True every call fails as if the API server were down (open watches end with that error)
        self.unreachable = False
        self._watchers: dict[str, list[queue.Queue[tuple[str, Obj]]]] = {}

    # --- helpers for tests -----------------------------------------------------------------------------

    def _next_rv(self) -> str:
        self._rv += 1
        return str(self._rv)

    def _stamp(self, obj: Obj, namespace: str | None) -> Obj:
        meta = obj.setdefault("metadata", {})
        if namespace is not None:
            meta["namespace"] = namespace
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", crd.rfc3339(self._clock()))
        meta.setdefault("generation", 1)
        meta["resourceVersion"] = self._next_rv()
        return obj

    def _notify(self, kind: str, event: str, obj: Obj) -> None:
        for q in self._watchers.get(kind, []):
            q.put((event, copy.deepcopy(obj)))

    def _fault(self, verb: str) -> None:
        if self.unreachable:
            raise ApiUnavailable(f"{verb}: API server unreachable (NewConnectionError: connection refused)")
        pending = self._faults.get(verb)
        if pending:
            raise pending.pop(0)

    def fail_next(self, verb: str, exc: Exception, times: int = 1) -> None:
        """Make the next ``times`` calls of ``verb`` (a method name) raise ``exc``."""
        self._faults.setdefault(verb, []).extend([exc] * times)

    def add_trainingjob(self, obj: Mapping[str, Any]) -> Obj:
        with self._lock:
            o = self._stamp(copy.deepcopy(dict(obj)), obj["metadata"].get("namespace", "default"))
            o.setdefault("apiVersion", API_VERSION)
            o.setdefault("kind", TRAININGJOB_KIND)
            key = (o["metadata"]["namespace"], o["metadata"]["name"])
            self.trainingjobs[key] = o
            self._notify(TRAININGJOB_PLURAL, "ADDED", o)
            return copy.deepcopy(o)

    def add_trainingqueue(self, obj: Mapping[str, Any]) -> Obj:
        """Create a TrainingQueue, or replace the spec of the one of that name (its generation then grows,
        its status stays)."""
        with self._lock:
            o = self._stamp(copy.deepcopy(dict(obj)), None)
            o.setdefault("apiVersion", API_VERSION)
            o.setdefault("kind", TRAININGQUEUE_KIND)
            name = o["metadata"]["name"]
            old = self.trainingqueues.get(name)
            if old is not None:
                o["metadata"]["generation"] = old["metadata"].get("generation", 1) + 1
                o["metadata"]["uid"] = old["metadata"]["uid"]
                o.setdefault("status", old.get("status"))
            self.trainingqueues[name] = o
            self._notify("trainingqueues", "ADDED" if old is None else "MODIFIED", o)
            return copy.deepcopy(o)

    def delete_trainingqueue(self, name: str) -> None:
        with self._lock:
            o = self.trainingqueues.pop(name, None)
            if o is not None:
                self._notify("trainingqueues", "DELETED", o)

    def add_namespace(self, name: str, labels: Mapping[str, str] | None = None) -> None:
        with self._lock:
            self.namespaces[name] = self._stamp(
                {"metadata": {"name": name, "labels": dict(labels or {})}}, None
            )

    def delete_trainingjob(self, namespace: str, name: str) -> None:
        """Delete a TrainingJob and (as the garbage collector would) the pods and services it owns."""
        with self._lock:
            obj = self.trainingjobs.pop((namespace, name))
            uid = obj["metadata"]["uid"]
            for store in (self.pods, self.services):
                for key, child in list(store.items()):
                    owners = child["metadata"].get("ownerReferences") or []
                    if any(o.get("uid") == uid for o in owners):
                        del store[key]
            self._notify(TRAININGJOB_PLURAL, "DELETED", obj)

    def add_node(self, obj: Mapping[str, Any]) -> Obj:
        with self._lock:
            o = self._stamp(copy.deepcopy(dict(obj)), None)
            self.nodes[o["metadata"]["name"]] = o
            self._notify("nodes", "ADDED", o)
            return o

    def remove_node(self, name: str) -> None:
        with self._lock:
            obj = self.nodes.pop(name)
            self._notify("nodes", "DELETED", obj)

    def add_priority_class(self, name: str, value: int) -> None:
        self.priority_classes[name] = {"metadata": {"name": name}, "value": value}

    def add_foreign_pod(self, namespace: str, name: str, node: str, gpus: int) -> Obj:
        """A running pod perfsched does not manage, holding ``gpus`` GPUs on ``node``."""
        body = {
            "metadata": {"name": name},
            "spec": {
                "nodeName": node,
                "containers": [{"name": "c", "image": "x", "resources": {"limits": {GPU_RESOURCE: gpus}}}],
            },
            "status": {"phase": "Running"},
        }
        with self._lock:
            o = self._stamp(body, namespace)
            self.pods[(namespace, name)] = o
            return o

    def _pod(self, namespace: str, name: str) -> Obj:
        try:
            return self.pods[(namespace, name)]
        except KeyError:
            raise NotFound(f'pods "{name}" not found') from None

    def _touch_pod(self, pod: Obj) -> None:
        pod["metadata"]["resourceVersion"] = self._next_rv()
        self._notify("pods", "MODIFIED", pod)

    def bind(self, namespace: str, name: str, node: str) -> None:
        """Play kube-scheduler: bind a pending pod to ``node``."""
        with self._lock:
            pod = self._pod(namespace, name)
            pod["spec"]["nodeName"] = node
            self._touch_pod(pod)

    def bind_as_planned(self) -> int:
        """Bind every unbound perfsched pod to its ``perfsched.dev/planned-node``; returns how many."""
        n = 0
        with self._lock:
            for pod in self.pods.values():
                planned = (pod["metadata"].get("annotations") or {}).get(ANNOTATION_PLANNED_NODE)
                if planned and not pod["spec"].get("nodeName") and "deletionTimestamp" not in pod["metadata"]:
                    pod["spec"]["nodeName"] = planned
                    self._touch_pod(pod)
                    n += 1
        return n

    def set_pod_phase(self, namespace: str, name: str, phase: str) -> None:
        """Play kubelet: move a pod to ``phase`` (Running, Succeeded, Failed)."""
        with self._lock:
            pod = self._pod(namespace, name)
            pod.setdefault("status", {})["phase"] = phase
            self._touch_pod(pod)

    def run_all_bound(self) -> int:
        """Mark every bound Pending pod Running; returns how many."""
        n = 0
        with self._lock:
            for pod in self.pods.values():
                if (
                    pod["spec"].get("nodeName")
                    and (pod.get("status") or {}).get("phase", "Pending") == "Pending"
                ):
                    pod.setdefault("status", {})["phase"] = "Running"
                    self._touch_pod(pod)
                    n += 1
        return n

    def report_progress(
        self, namespace: str, name: str, *, progress: float, checkpoint: float, throughput: float, time: float
    ) -> None:
        """Play a worker: write the ``perfsched.dev/progress`` annotation."""
        value = orjson.dumps(
            {"progress": progress, "checkpoint": checkpoint, "throughput": throughput, "time": time}
        ).decode()
        with self._lock:
            pod = self._pod(namespace, name)
            pod["metadata"].setdefault("annotations", {})[ANNOTATION_PROGRESS] = value
            self._touch_pod(pod)

    def finish_deletions(self) -> int:
        """Remove every pod that is terminating (its workers exited); returns how many."""
        with self._lock:
            gone = [k for k, p in self.pods.items() if "deletionTimestamp" in p["metadata"]]
            for k in gone:
                pod = self.pods.pop(k)
                self._notify("pods", "DELETED", pod)
            return len(gone)

    def job_pods(self, namespace: str, job: str) -> list[Obj]:
        """The pods of a TrainingJob, sorted by name (test helper)."""
        with self._lock:
            return sorted(
                (
                    copy.deepcopy(p)
                    for (ns, _), p in self.pods.items()
                    if ns == namespace and (p["metadata"].get("labels") or {}).get(LABEL_JOB_NAME) == job
                ),
                key=lambda p: p["metadata"]["name"],
            )

    def status_of(self, namespace: str, name: str) -> Obj:
        return copy.deepcopy(self.trainingjobs[(namespace, name)].get("status") or {})

    # --- KubeApi ---------------------------------------------------------------------------------------

    def list_trainingjobs(self, namespace: str = "") -> list[Obj]:
        self._fault("list_trainingjobs")
        with self._lock:
            return [
                copy.deepcopy(o)
                for (ns, _), o in self.trainingjobs.items()
                if not namespace or ns == namespace
            ]

    def list_pods(self, namespace: str = "", label_selector: str = "") -> list[Obj]:
        self._fault("list_pods")
        with self._lock:
            return [
                copy.deepcopy(p)
                for (ns, _), p in self.pods.items()
                if (not namespace or ns == namespace)
                and selector_matches(label_selector, p["metadata"].get("labels") or {})
            ]

    def list_nodes(self) -> list[Obj]:
        self._fault("list_nodes")
        with self._lock:
            return [copy.deepcopy(n) for n in self.nodes.values()]

    def list_dra(self, plural: str) -> list[Obj]:
        self._fault("list_dra")
        with self._lock:
            return [copy.deepcopy(o) for o in self.dra.get(plural, [])]

    def list_priority_classes(self) -> list[Obj]:
        self._fault("list_priority_classes")
        return [copy.deepcopy(p) for p in self.priority_classes.values()]

    def list_trainingqueues(self) -> list[Obj]:
        self._fault("list_trainingqueues")
        with self._lock:
            return [copy.deepcopy(q) for q in self.trainingqueues.values()]

    def list_namespaces(self) -> list[Obj]:
        self._fault("list_namespaces")
        with self._lock:
            return [copy.deepcopy(n) for n in self.namespaces.values()]

    def patch_trainingqueue_status(self, name: str, status: Mapping[str, Any]) -> Obj:
        self._fault("patch_trainingqueue_status")
        with self._lock:
            self.calls.append(("patch_queue_status", "", name))
            obj = self.trainingqueues.get(name)
            if obj is None:
                raise NotFound(f'trainingqueues.perfsched.dev "{name}" not found')
            obj["status"] = merge_patch(obj.get("status") or {}, dict(status))
            obj["metadata"]["resourceVersion"] = self._next_rv()
            self._notify("trainingqueues", "MODIFIED", obj)  # the status subresource: same generation
            return copy.deepcopy(obj)

    def watch(self, kind: str, namespace: str = "", timeout_seconds: int = 60) -> Iterator[tuple[str, Obj]]:
        self._fault("watch")
        q: queue.Queue[tuple[str, Obj]] = queue.Queue()
        with self._lock:
            self._watchers.setdefault(kind, []).append(q)
        deadline = time.monotonic() + timeout_seconds
        try:
            while True:
                try:
                    event, obj = q.get(timeout=0.05)
                except queue.Empty:
                    self._fault("watch")  # the server went away: the connection drops
                    if time.monotonic() > deadline:
                        return
                    continue
                self._fault("watch")  # a dropped connection delivers nothing buffered before the outage
                if not namespace or obj["metadata"].get("namespace", namespace) == namespace:
                    yield event, obj
        finally:
            with self._lock:
                self._watchers[kind].remove(q)

    def create_pod(self, namespace: str, body: Mapping[str, Any]) -> Obj:
        self._fault("create_pod")
        with self._lock:
            name = body["metadata"]["name"]
            self.calls.append(("create_pod", namespace, name))
            if (namespace, name) in self.pods:
                raise AlreadyExists(f'pods "{name}" already exists')
            pod = self._stamp(copy.deepcopy(dict(body)), namespace)
            pod.setdefault("status", {})["phase"] = "Pending"
            self.pods[(namespace, name)] = pod
            self._notify("pods", "ADDED", pod)
            return copy.deepcopy(pod)

    def delete_pod(self, namespace: str, name: str, grace_period_seconds: int | None = None) -> None:
        self._fault("delete_pod")
        with self._lock:
            self.calls.append(("delete_pod", namespace, name))
            pod = self.pods.get((namespace, name))
            if pod is None:
                return
            phase = (pod.get("status") or {}).get("phase", "Pending")
            graceful = (
                pod["spec"].get("nodeName")
                and phase not in ("Succeeded", "Failed")
                and (grace_period_seconds is None or grace_period_seconds > 0)
            )
            if graceful:
                if "deletionTimestamp" not in pod["metadata"]:
                    pod["metadata"]["deletionTimestamp"] = crd.rfc3339(self._clock())
                    pod["metadata"]["deletionGracePeriodSeconds"] = (
                        grace_period_seconds if grace_period_seconds is not None else 30
                    )
                    self._touch_pod(pod)
            else:
                del self.pods[(namespace, name)]
                self._notify("pods", "DELETED", pod)

    def create_service(self, namespace: str, body: Mapping[str, Any]) -> Obj:
        self._fault("create_service")
        with self._lock:
            name = body["metadata"]["name"]
            self.calls.append(("create_service", namespace, name))
            if (namespace, name) in self.services:
                raise AlreadyExists(f'services "{name}" already exists')
            svc = self._stamp(copy.deepcopy(dict(body)), namespace)
            self.services[(namespace, name)] = svc
            return copy.deepcopy(svc)

    def create_gang_object(self, plural: str, namespace: str, body: Mapping[str, Any]) -> Obj:
        self._fault("create_gang_object")
        with self._lock:
            name = body["metadata"]["name"]
            self.calls.append((f"create_{plural}", namespace, name))
            if not self.serves_workload_api:
                raise NotFound(
                    f"the server could not find the requested resource ({plural}.scheduling.k8s.io)"
                )
            if (plural, namespace, name) in self.gang_objects:
                raise AlreadyExists(f'{plural} "{name}" already exists')
            obj = self._stamp(copy.deepcopy(dict(body)), namespace)
            self.gang_objects[(plural, namespace, name)] = obj
            return copy.deepcopy(obj)

    def delete_gang_object(self, plural: str, namespace: str, name: str) -> None:
        self._fault("delete_gang_object")
        with self._lock:
            self.calls.append((f"delete_{plural}", namespace, name))
            self.gang_objects.pop((plural, namespace, name), None)

    def delete_service(self, namespace: str, name: str) -> None:
        self._fault("delete_service")
        with self._lock:
            self.calls.append(("delete_service", namespace, name))
            self.services.pop((namespace, name), None)

    def patch_trainingjob_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> Obj:
        self._fault("patch_trainingjob_status")
        with self._lock:
            self.calls.append(("patch_status", namespace, name))
            obj = self.trainingjobs.get((namespace, name))
            if obj is None:
                raise NotFound(f'trainingjobs.perfsched.dev "{name}" not found')
            obj["status"] = merge_patch(obj.get("status") or {}, dict(status))
            obj["metadata"]["resourceVersion"] = self._next_rv()
            self._notify(TRAININGJOB_PLURAL, "MODIFIED", obj)
            return copy.deepcopy(obj)

    def create_event(self, namespace: str, body: Mapping[str, Any]) -> None:
        self._fault("create_event")
        with self._lock:
            name = (body.get("metadata") or {}).get("name")
            if name and any((e.get("metadata") or {}).get("name") == name for e in self.events):
                raise AlreadyExists(f'events "{name}" already exists')
            self.events.append(copy.deepcopy(dict(body)))

    def get_configmap(self, namespace: str, name: str) -> Obj | None:
        self._fault("get_configmap")
        with self._lock:
            cm = self.configmaps.get((namespace, name))
            return copy.deepcopy(cm) if cm is not None else None

    def add_configmap(self, namespace: str, name: str, data: Mapping[str, str]) -> Obj:
        """Store a ConfigMap (tests' stand-in for ``kubectl create configmap``)."""
        with self._lock:
            cm = self._stamp({"metadata": {"name": name}, "data": dict(data)}, namespace)
            self.configmaps[(namespace, name)] = cm
            return copy.deepcopy(cm)

    def create_configmap(self, namespace: str, body: Mapping[str, Any]) -> Obj:
        self._fault("create_configmap")
        with self._lock:
            name = body["metadata"]["name"]
            if (namespace, name) in self.configmaps:
                raise AlreadyExists(f'configmaps "{name}" already exists')
            cm = self._stamp(copy.deepcopy(dict(body)), namespace)
            self.configmaps[(namespace, name)] = cm
            self.calls.append(("create_configmap", namespace, name))
            return copy.deepcopy(cm)

    def replace_configmap(self, namespace: str, name: str, body: Mapping[str, Any]) -> Obj:
        self._fault("replace_configmap")
        with self._lock:
            cur = self.configmaps.get((namespace, name))
            if cur is None:
                raise NotFound(f'configmaps "{name}" not found')
            if body["metadata"].get("resourceVersion") != cur["metadata"]["resourceVersion"]:
                raise Conflict(f'configmaps "{name}": the object has been modified')
            new = copy.deepcopy(dict(body))
            # a PUT replaces the labels and annotations with the body's, as the API server does
            meta = {k: v for k, v in cur["metadata"].items() if k not in ("labels", "annotations")}
            given = {k: v for k, v in new["metadata"].items() if k in ("labels", "annotations")}
            new["metadata"] = {**meta, **given, "resourceVersion": self._next_rv()}
            self.configmaps[(namespace, name)] = new
            self.calls.append(("replace_configmap", namespace, name))
            return copy.deepcopy(new)

    def get_lease(self, namespace: str, name: str) -> Obj | None:
        self._fault("get_lease")
        with self._lock:
            lease = self.leases.get((namespace, name))
            return copy.deepcopy(lease) if lease is not None else None

    def create_lease(self, namespace: str, body: Mapping[str, Any]) -> Obj:
        self._fault("create_lease")
        with self._lock:
            name = body["metadata"]["name"]
            if (namespace, name) in self.leases:
                raise AlreadyExists(f'leases "{name}" already exists')
            lease = self._stamp(copy.deepcopy(dict(body)), namespace)
            self.leases[(namespace, name)] = lease
            return copy.deepcopy(lease)

    def replace_lease(self, namespace: str, name: str, body: Mapping[str, Any]) -> Obj:
        self._fault("replace_lease")
        with self._lock:
            cur = self.leases.get((namespace, name))
            if cur is None:
                raise NotFound(f'leases "{name}" not found')
            if body["metadata"].get("resourceVersion") != cur["metadata"]["resourceVersion"]:
                raise Conflict(f'leases "{name}": the object has been modified')
            new = copy.deepcopy(dict(body))
            new["metadata"] = {**cur["metadata"], "resourceVersion": self._next_rv()}
            self.leases[(namespace, name)] = new
            return copy.deepcopy(new)

    def events_for(self, name: str) -> list[tuple[str, str, str]]:
        """``(type, reason, message)`` of the events about the object ``name``, oldest first."""
        return [
            (e.get("type", ""), e.get("reason", ""), e.get("message", ""))
            for e in self.events
            if (e.get("involvedObject") or {}).get("name") == name
        ]
