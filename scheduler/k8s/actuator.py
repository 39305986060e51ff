"""The actuator: turns the operator's decisions into Kubernetes objects (pods, headless Services, Events).

Two halves. The manifest builders (``gang_pods``, ``headless_service``, ``event_body``, ``pod_name``,
``service_name``) are pure: a TrainingJob object and a core ``Allocation`` in, API JSON out. ``Actuator``
does the I/O through a ``KubeApi`` and checks ``may_act()`` (the leader election) before every write, so
a replica that has lost its Lease stops writing at the next call instead of at the next round.

A gang of generation ``g`` has one pod per replica, named ``<job>-g<g>-<i>``: names are deterministic,
so creating a gang twice (an operator restarted half-way, or two rounds racing) creates each pod once
(``AlreadyExists`` counts as done). Pods carry ``schedulerName: perfsched``, an owner reference to the
TrainingJob (the garbage collector removes them with it), the labels ``perfsched.dev/job-name``,
``perfsched.dev/replica-index`` and ``perfsched.dev/generation``, the round's decision as the annotations
``perfsched.dev/gpu-type`` and ``perfsched.dev/planned-node``, ``perfsched.dev/start-progress`` (the
checkpoint the gang resumes from) and the environment of a distributed trainer: ``WORLD_SIZE``, ``RANK``,
``MASTER_ADDR``/``MASTER_PORT`` (replica 0 behind the job's headless Service), and ``PERFSCHED_*`` for the
progress helper. The first container of the template is the worker: it gets the ``nvidia.com/gpu``
request and limit. ``restartPolicy`` is forced to ``Never``: a crashed worker fails the gang, and the
operator restarts the whole gang from its checkpoint (counting it against the backoff limit).
With ``workload_api`` on, each generation also gets a Workload and a PodGroup (``scheduler.k8s.gangapi``)
and its pods point to the PodGroup, so kube-scheduler binds the gang all or nothing.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from scheduler.core.errors import PerfschedError, PermanentError
from scheduler.core.types import Allocation
from scheduler.k8s import crd, gangapi
from scheduler.k8s.kubeapi import AlreadyExists, KubeApi, NotFound, Obj
from scheduler.names import (
    ANNOTATION_BATCH_SIZE,
    ANNOTATION_GPU_TYPE,
    ANNOTATION_MODEL,
    ANNOTATION_PLANNED_NODE,
    ANNOTATION_START_PROGRESS,
    ANNOTATION_TOTAL_WORK,
    ANNOTATION_WORLD_SIZE,
    API_VERSION,
    GPU_RESOURCE,
    LABEL_GENERATION,
    LABEL_JOB_NAME,
    LABEL_REPLICA_INDEX,
    OPERATOR_COMPONENT,
    TRAININGJOB_KIND,
)

log = logging.getLogger(__name__)

SCHEDULER_NAME = "perfsched"
DEFAULT_MASTER_PORT = 29500
COMPONENT = "perfsched-operator"

_DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


class NotLeader(PermanentError):
    """This operator replica does not hold the leader Lease (any more): it must not write."""


def _short(name: str, limit: int, prefix: str = "") -> str:
    """``name`` as a DNS-1035 label of at most ``limit`` characters (hash-suffixed when shortened)."""
    clean = re.sub(r"[^a-z0-9-]", "-", name.lower()).strip("-")
    candidate = f"{prefix}{clean}"
    if _DNS1035.match(candidate) and len(candidate) <= limit:
        return candidate
    if not candidate or not candidate[0].isalpha():
        candidate = f"tj-{candidate}"
    digest = hashlib.sha256(name.encode()).hexdigest()[:6]
    return f"{candidate[: limit - 7].rstrip('-')}-{digest}"


def service_name(job_name: str) -> str:
    """The job's headless Service (a DNS-1035 label, at most 63 characters)."""
    return _short(job_name, 63)


def pod_name(job_name: str, generation: int, replica: int) -> str:
    return f"{job_name}-g{generation}-{replica}"


def pod_hostname(job_name: str, replica: int) -> str:
    """The pod's hostname inside the headless Service's subdomain (a DNS label, at most 63 characters)."""
    suffix = f"-{replica}"
    return _short(job_name, 63 - len(suffix)) + suffix


def master_addr(job_name: str, namespace: str) -> str:
    """DNS name of replica 0: ``<hostname>.<service>.<namespace>.svc``."""
    return f"{pod_hostname(job_name, 0)}.{service_name(job_name)}.{namespace}.svc"


def owner_reference(tj: Mapping[str, Any]) -> Obj:
    meta = tj["metadata"]
    return {
        "apiVersion": API_VERSION,
        "kind": TRAININGJOB_KIND,
        "name": meta["name"],
        "uid": meta.get("uid", ""),
        "controller": True,
        "blockOwnerDeletion": True,
    }


def replica_nodes(alloc: Allocation) -> list[str]:
    """Node of each replica index: the node holding most replicas first (replica 0, the master, there)."""
    order = sorted(alloc.replicas_per_node, key=lambda nr: (-nr[1], nr[0]))
    return [node for node, count in order for _ in range(count)]


def _set_env(container: Obj, env: Sequence[Obj]) -> None:
    names = {e["name"] for e in env}
    kept = [e for e in container.get("env") or [] if e.get("name") not in names]
    container["env"] = kept + [copy.deepcopy(e) for e in env]


def gang_pods(
    tj: Mapping[str, Any],
    spec: crd.TrainingJobSpec,
    alloc: Allocation,
    *,
    generation: int,
    start_progress: float,
    master_port: int = DEFAULT_MASTER_PORT,
) -> list[Obj]:
    """The pod manifests of generation ``generation`` of the job's gang on ``alloc`` (pure)."""
    meta = tj["metadata"]
    name, namespace = meta["name"], meta.get("namespace", "default")
    template = spec.template
    tmeta = template.get("metadata") or {}
    tspec = template.get("spec") or {}
    nodes = replica_nodes(alloc)
    world = len(nodes)
    total = spec.work.total
    pods: list[Obj] = []
    for rank, node in enumerate(nodes):
        labels = {str(k): str(v) for k, v in (tmeta.get("labels") or {}).items()}
        labels.update(
            {
                LABEL_JOB_NAME: name,
                LABEL_REPLICA_INDEX: str(rank),
                LABEL_GENERATION: str(generation),
            }
        )
        annotations = {str(k): str(v) for k, v in (tmeta.get("annotations") or {}).items()}
        annotations.update(
            {
                ANNOTATION_GPU_TYPE: alloc.gpu_type,
                ANNOTATION_PLANNED_NODE: node,
                ANNOTATION_START_PROGRESS: _num(start_progress),
                ANNOTATION_TOTAL_WORK: _num(total),
                ANNOTATION_WORLD_SIZE: str(world),
                ANNOTATION_BATCH_SIZE: str(spec.batch_size),
            }
        )
        if spec.model:
            annotations[ANNOTATION_MODEL] = spec.model
        pspec: Obj = copy.deepcopy(dict(tspec))
        pspec["schedulerName"] = SCHEDULER_NAME
        pspec["restartPolicy"] = "Never"
        pspec["hostname"] = pod_hostname(name, rank)
        pspec["subdomain"] = service_name(name)
        pspec["terminationGracePeriodSeconds"] = spec.checkpoint_grace_seconds
        env: list[Obj] = [
            {"name": "WORLD_SIZE", "value": str(world)},
            {"name": "RANK", "value": str(rank)},
            {"name": "MASTER_ADDR", "value": master_addr(name, namespace)},
            {"name": "MASTER_PORT", "value": str(master_port)},
            {"name": "PERFSCHED_POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {
                "name": "PERFSCHED_POD_NAMESPACE",
                "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}},
            },
            {"name": "PERFSCHED_JOB_NAME", "value": name},
            {"name": "PERFSCHED_TOTAL_WORK", "value": _num(total)},
            {"name": "PERFSCHED_WORK_UNIT", "value": spec.work.unit.value},
            {"name": "PERFSCHED_START_PROGRESS", "value": _num(start_progress)},
            {"name": "PERFSCHED_GENERATION", "value": str(generation)},
            {"name": "PERFSCHED_GPU_TYPE", "value": alloc.gpu_type},
        ]
        containers = pspec.get("containers") or []
        for i, c in enumerate(containers):
            _set_env(c, env)
            if i == 0:
                res = c.setdefault("resources", {})
                res.setdefault("limits", {})[GPU_RESOURCE] = str(alloc.gpus_per_replica)
                res.setdefault("requests", {})[GPU_RESOURCE] = str(alloc.gpus_per_replica)
        pods.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": pod_name(name, generation, rank),
                    "namespace": namespace,
                    "labels": labels,
                    "annotations": annotations,
                    "ownerReferences": [owner_reference(tj)],
                },
                "spec": pspec,
            }
        )
    return pods


def headless_service(tj: Mapping[str, Any], *, master_port: int = DEFAULT_MASTER_PORT) -> Obj:
    """The job's headless Service: gives replica 0 the stable DNS name used as ``MASTER_ADDR`` (pure)."""
    meta = tj["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": service_name(meta["name"]),
            "namespace": meta.get("namespace", "default"),
            "labels": {LABEL_JOB_NAME: meta["name"]},
            "ownerReferences": [owner_reference(tj)],
        },
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {LABEL_JOB_NAME: meta["name"]},
            "ports": [{"name": "dist", "port": master_port, "targetPort": master_port}],
        },
    }


def event_name(tj: Mapping[str, Any], key: str) -> str:
    """The name of the Event that announces decision ``key`` about a TrainingJob: the same for every
    operator replica, and different for a job recreated under the same name (its uid is in the hash)."""
    meta = tj["metadata"]
    digest = hashlib.sha256(f"{meta.get('uid', '')}/{key}".encode()).hexdigest()[:16]
    return f"{meta['name']}.{digest}"


def event_body(
    tj: Mapping[str, Any],
    *,
    type_: str,
    reason: str,
    message: str,
    now: float,
    instance: str = "",
    key: str = "",
) -> Obj:
    """A core/v1 Event about the TrainingJob (pure); with a decision ``key`` its name is ``event_name``,
    else the API server generates one."""
    meta = tj["metadata"]
    ts = crd.rfc3339(now)
    namespace = meta.get("namespace", "default")
    naming = {"name": event_name(tj, key)} if key else {"generateName": f"{meta['name']}."}
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {**naming, "namespace": namespace},
        "involvedObject": {
            "apiVersion": API_VERSION,
            "kind": TRAININGJOB_KIND,
            "name": meta["name"],
            "namespace": meta.get("namespace", "default"),
            "uid": meta.get("uid", ""),
        },
        "type": type_,
        "reason": reason,
        "message": message[:1024],
        "source": {"component": COMPONENT},
        "reportingComponent": OPERATOR_COMPONENT,
        "reportingInstance": instance or COMPONENT,
        "firstTimestamp": ts,
        "lastTimestamp": ts,
        "count": 1,
    }


def node_event_body(
    node: Mapping[str, Any] | str,
    *,
    type_: str = "Warning",
    reason: str,
    message: str,
    now: float,
    instance: str = "",
    kind: str = "Node",
    api_version: str = "v1",
) -> Obj:
    """A core/v1 Event about a Node (the object, or its name when only that is known), in the ``default``
    namespace as kubelet's node events are, or about another cluster-scoped object of ``kind`` (pure)."""
    meta: Mapping[str, Any] = {"name": node} if isinstance(node, str) else node["metadata"]
    ts = crd.rfc3339(now)
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{meta['name']}.", "namespace": "default"},
        "involvedObject": {
            "apiVersion": api_version,
            "kind": kind,
            "name": meta["name"],
            "uid": meta.get("uid", ""),
        },
        "type": type_,
        "reason": reason,
        "message": message[:1024],
        "source": {"component": COMPONENT},
        "reportingComponent": OPERATOR_COMPONENT,
        "reportingInstance": instance or COMPONENT,
        "firstTimestamp": ts,
        "lastTimestamp": ts,
        "count": 1,
    }


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(float(x))


class Actuator:
    """Applies the operator's changes through a ``KubeApi``; every write first checks ``may_act()``."""

    def __init__(
        self,
        api: KubeApi,
        *,
        may_act: Callable[[], bool] = lambda: True,
        master_port: int = DEFAULT_MASTER_PORT,
        instance: str = "",
        workload_api: bool = False,
    ) -> None:
        self.api = api
        self._may_act = may_act
        self._port = master_port
        self._instance = instance
        #: create a Workload / PodGroup per gang generation (``scheduler.k8s.gangapi``); turned off for
        #: good, with one warning, when the server does not serve ``scheduling.k8s.io/v1beta1``
        self.workload_api = workload_api

    def _check(self) -> None:
        if not self._may_act():
            raise NotLeader("this operator replica does not hold the leader Lease")

    def start_gang(
        self,
        tj: Mapping[str, Any],
        spec: crd.TrainingJobSpec,
        alloc: Allocation,
        *,
        generation: int,
        start_progress: float,
    ) -> list[str]:
        """Create the gang's pods, then the headless Service (once); returns the pod names.

        Pods first: they are what the scheduler waits for; the Service only has to exist by the time
        the workers resolve ``MASTER_ADDR``, which they retry while the gang starts.
        """
        namespace = tj["metadata"].get("namespace", "default")
        pods = gang_pods(
            tj, spec, alloc, generation=generation, start_progress=start_progress, master_port=self._port
        )
        group = self._create_group(tj, generation, len(pods)) if self.workload_api else None
        names = []
        for pod in pods:
            if group is not None:
                gangapi.join_group(pod, group)
            self._check()
            try:
                self.api.create_pod(namespace, pod)
            except AlreadyExists:
                log.info("pod already exists", extra={"pod": pod["metadata"]["name"]})
            names.append(pod["metadata"]["name"])
        self._check()
        with contextlib.suppress(AlreadyExists):
            self.api.create_service(namespace, headless_service(tj, master_port=self._port))
        if group is not None and generation > 0:
            self.delete_group(tj, generation - 1)
        return names

    def _create_group(self, tj: Mapping[str, Any], generation: int, min_count: int) -> str | None:
        """Create the generation's Workload, then its PodGroup (each once); the PodGroup's name, or None
        (and the Workload API off from now on) when the server does not serve it."""
        namespace = tj["metadata"].get("namespace", "default")
        owner = owner_reference(tj)
        bodies = (
            (gangapi.WORKLOADS, gangapi.workload_body(tj, generation, min_count, owner)),
            (gangapi.POD_GROUPS, gangapi.pod_group_body(tj, generation, min_count, owner)),
        )
        for plural, body in bodies:
            self._check()
            try:
                self.api.create_gang_object(plural, namespace, body)
            except AlreadyExists:
                log.info(
                    "gang object already exists", extra={"kind": plural, "name": body["metadata"]["name"]}
                )
            except NotFound as exc:
                log.warning(
                    "PERFSCHED_OPERATOR_WORKLOAD_API is on but the API server does not serve "
                    "scheduling.k8s.io/v1beta1 (Kubernetes 1.37 with the GenericWorkload feature gate): "
                    "gangs are scheduled without it",
                    extra={"error": str(exc)},
                )
                self.workload_api = False
                return None
        return gangapi.group_name(tj["metadata"]["name"], generation)

    def delete_group(self, tj: Mapping[str, Any], generation: int) -> None:
        """Delete a gang generation's PodGroup and Workload (404 is success)."""
        meta = tj["metadata"]
        namespace = meta.get("namespace", "default")
        name = gangapi.group_name(meta["name"], generation)
        for plural in (gangapi.POD_GROUPS, gangapi.WORKLOADS):
            self._check()
            self.api.delete_gang_object(plural, namespace, name)

    def delete_pods(self, namespace: str, names: Sequence[str], grace_seconds: int | None) -> None:
        """Delete pods gracefully (SIGTERM, then the grace period for the checkpoint)."""
        for name in names:
            self._check()
            self.api.delete_pod(namespace, name, grace_seconds)

    def delete_service(self, tj: Mapping[str, Any]) -> None:
        self._check()
        meta = tj["metadata"]
        self.api.delete_service(meta.get("namespace", "default"), service_name(meta["name"]))

    def patch_status(self, tj: Mapping[str, Any], status: Mapping[str, Any]) -> Obj:
        self._check()
        meta = tj["metadata"]
        return self.api.patch_trainingjob_status(meta.get("namespace", "default"), meta["name"], status)

    def event(
        self, tj: Mapping[str, Any], *, type_: str, reason: str, message: str, now: float, key: str = ""
    ) -> bool:
        """Record an Event; a failure to record one is logged, never fatal. An Event of a decision
        (``key``) that exists already was sent by a previous leader: it is not sent twice. Returns
        whether the Event is recorded (now or before)."""
        self._check()
        body = event_body(
            tj, type_=type_, reason=reason, message=message, now=now, instance=self._instance, key=key
        )
        try:
            self.api.create_event(tj["metadata"].get("namespace", "default"), body)
        except AlreadyExists:
            log.info(
                "event already recorded", extra={"reason": reason, "event": body["metadata"].get("name")}
            )
        except PerfschedError as exc:  # events are best effort, as in client-go's recorder
            log.warning("could not record event", extra={"reason": reason, "error": str(exc)})
            return False
        return True

    def node_event(
        self,
        node: Mapping[str, Any] | str,
        *,
        type_: str = "Warning",
        reason: str,
        message: str,
        now: float,
        kind: str = "Node",
        api_version: str = "v1",
    ) -> None:
        """Record an Event about a Node (or another cluster-scoped object of ``kind``); a failure to
        record one is logged, never fatal."""
        self._check()
        body = node_event_body(
            node,
            type_=type_,
            reason=reason,
            message=message,
            now=now,
            instance=self._instance,
            kind=kind,
            api_version=api_version,
        )
        try:
            self.api.create_event("default", body)
        except PerfschedError as exc:
            log.warning("could not record event", extra={"reason": reason, "error": str(exc)})
