"""Conversion of raw Kubernetes JSON (Node and Pod objects as plain dicts) into perfsched's core types.

Pure: no I/O and no client objects; it works on the dicts that ``orjson.loads`` gives for API JSON, so
the extender's hot path and the watch cache share one cheap decoder. Node labels read are the ones in
ARCHITECTURE.md (``nvidia.com/gpu.product`` and the topology labels); the GPU count is the node's
allocatable ``nvidia.com/gpu``. A node without it whose GPUs are DRA devices (``scheduler.k8s.dra``,
passed in as ``dra``; GFD's labels may remain on it) counts its healthy devices, typed by their
``productName`` where it has no product label (``unknown`` without either), with the interconnect of
their attribute or the product's form factor (PCIe boards: ``pcie``); other nodes fall back to the
``nvidia.com/gpu.count`` label. A node whose ``Ready`` condition is False or Unknown is not schedulable
(``Node.unavailable`` says why). A pod's GPU
request follows the scheduler's rule for extended resources: requests (or limits, which default them)
summed over containers, and the largest init container if that is more.

Every decoder raises ``CodecError`` (a ``ConfigError``) whose message names the field that is wrong.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

from scheduler.core.errors import ConfigError
from scheduler.core.types import Interconnect, Node
from scheduler.k8s.dra import UNKNOWN_GPU_TYPE, DraNodeGpus
from scheduler.names import (
    ANNOTATION_BATCH_SIZE,
    ANNOTATION_GPU_TYPE,
    ANNOTATION_MODEL,
    ANNOTATION_PLANNED_NODE,
    ANNOTATION_WORLD_SIZE,
    GPU_RESOURCE,
    LABEL_GENERATION,
    LABEL_GPU_COUNT,
    LABEL_GPU_PRODUCT,
    LABEL_INTERCONNECT,
    LABEL_JOB_NAME,
    LABEL_NETWORK_GBPS,
    LABEL_NVLINK_DOMAIN,
    LABEL_RACK,
    LABEL_REPLICA_INDEX,
    LABEL_ZONE,
)

DEFAULT_NETWORK_GBPS = 100.0

_TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


class CodecError(ConfigError):
    """A Kubernetes object does not have the shape perfsched expects; the message names the field."""


def _canonical_gpu_type(product: str) -> str | None:
    # perfmodel owns the product-label catalogue; imported lazily so this module stays cheap to import.
    from perfmodel.gpus import canonical_gpu_type

    return canonical_gpu_type(product)


@lru_cache(maxsize=4096)
def gpu_type_of_product(product: str) -> str:
    """Canonical GPU type of a ``nvidia.com/gpu.product`` label; an unknown product keeps its label.

    Unknown products are not an error (a new GPU generation must still be schedulable): the node keeps
    the raw label as its type, so jobs that name it in ``allowedGPUTypes`` or the operator's decision
    still match it.
    """
    if not product:
        return ""
    try:
        canonical = _canonical_gpu_type(product)
    except ImportError:  # pragma: no cover - perfmodel is part of this distribution
        canonical = None
    return canonical or product


def parse_count(value: object, field: str) -> int:
    """An integer resource quantity (``"8"``, ``8``, ``"8k"`` is refused): extended resources are whole.

    GPUs are an extended resource, which Kubernetes only allows as whole numbers; a decimal suffix such
    as ``"2k"`` or ``"500m"`` is therefore refused with the field named.
    """
    if isinstance(value, bool):
        raise CodecError(f"{field}: expected a whole number, got {value!r}")
    if isinstance(value, int):
        count = value
    elif isinstance(value, str):
        try:
            count = int(value)
        except ValueError:
            raise CodecError(f"{field}: expected a whole number of GPUs, got {value!r}") from None
    else:
        raise CodecError(f"{field}: expected a whole number, got {type(value).__name__}")
    if count < 0:
        raise CodecError(f"{field}: must not be negative, got {count}")
    return count


def _mapping(obj: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any]:
    value = obj.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise CodecError(f"{where}.{key}: expected an object, got {type(value).__name__}")
    return value


def object_name(obj: object, where: str) -> str:
    """``metadata.name`` of an API object, with a clear error when it is missing."""
    if not isinstance(obj, Mapping):
        raise CodecError(f"{where}: expected an object, got {type(obj).__name__}")
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping):
        raise CodecError(f"{where}.metadata: missing or not an object")
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise CodecError(f"{where}.metadata.name: missing or not a string")
    return name


def has_device_plugin_gpus(obj: Mapping[str, Any]) -> bool:
    """Whether a Node object shows device-plugin GPUs (``nvidia.com/gpu`` in allocatable): such a node's
    GPUs are never DRA-backed (kube-scheduler uses DRA for an extended resource only where allocatable
    lacks it). GFD's labels may remain on a DRA node; they do not count here."""
    status = obj.get("status")
    allocatable = status.get("allocatable") if isinstance(status, Mapping) else None
    return isinstance(allocatable, Mapping) and GPU_RESOURCE in allocatable


def _not_ready(status: Mapping[str, Any], where: str) -> str:
    """Why the node's ``Ready`` condition keeps work off it ("" when Ready or not reported)."""
    conditions = status.get("conditions") or []
    if not isinstance(conditions, list):
        raise CodecError(f"{where}.status.conditions: expected a list, got {type(conditions).__name__}")
    for c in conditions:
        if isinstance(c, Mapping) and c.get("type") == "Ready" and c.get("status") in ("False", "Unknown"):
            reason = f": {c['reason']}" if c.get("reason") else ""
            return f"not ready (condition Ready={c['status']}{reason})"
    return ""


def decode_node(
    obj: Mapping[str, Any],
    gpu_type_of: Callable[[str], str] = gpu_type_of_product,
    dra: DraNodeGpus | None = None,
) -> Node:
    """A Node API object (dict) -> core ``Node``. Nodes without GPUs decode with ``gpus=0``; ``dra`` is
    the node's DRA GPUs (``DraInventory.node_gpus``), used when the node shows no device-plugin GPUs."""
    name = object_name(obj, "Node")
    where = f"Node {name}"
    meta = _mapping(obj, "metadata", where)
    labels = _mapping(meta, "labels", f"{where}.metadata")
    status = _mapping(obj, "status", where)
    spec = _mapping(obj, "spec", where)
    allocatable = _mapping(status, "allocatable", f"{where}.status")
    gpu_api = ""
    product = str(labels.get(LABEL_GPU_PRODUCT, ""))
    default_interconnect = "nvlink"
    if GPU_RESOURCE in allocatable:
        gpus = parse_count(allocatable[GPU_RESOURCE], f"{where}.status.allocatable[{GPU_RESOURCE}]")
    elif dra is not None:  # before GFD's count label, which is blind to the GPUs claims hold
        gpus, gpu_api = len(dra.healthy), "dra"
        product = product or dra.product or UNKNOWN_GPU_TYPE
        default_interconnect = dra.interconnect or ("pcie" if _is_pcie(product) else "nvlink")
    elif LABEL_GPU_COUNT in labels:
        gpus = parse_count(labels[LABEL_GPU_COUNT], f"{where}.metadata.labels[{LABEL_GPU_COUNT}]")
    else:
        gpus = 0
    interconnect_label = str(labels.get(LABEL_INTERCONNECT, default_interconnect)).lower()
    try:
        interconnect = Interconnect(interconnect_label)
    except ValueError:
        raise CodecError(
            f"{where}.metadata.labels[{LABEL_INTERCONNECT}]: expected nvlink or pcie, "
            f"got {interconnect_label!r}"
        ) from None
    network_raw = labels.get(LABEL_NETWORK_GBPS)
    network = DEFAULT_NETWORK_GBPS
    if network_raw is not None:
        try:
            network = float(network_raw)
        except (TypeError, ValueError):
            raise CodecError(
                f"{where}.metadata.labels[{LABEL_NETWORK_GBPS}]: expected a number, got {network_raw!r}"
            ) from None
    unavailable = _not_ready(status, where)
    return Node(
        name=name,
        gpu_type=gpu_type_of(product),
        gpus=gpus,
        gpu_product=product,
        zone=str(labels.get(LABEL_ZONE, "")),
        rack=str(labels.get(LABEL_RACK, "")),
        nvlink_domain=str(labels.get(LABEL_NVLINK_DOMAIN, "")),
        interconnect=interconnect,
        network_gbps=network,
        schedulable=not bool(spec.get("unschedulable", False)) and not unavailable,
        gpu_api=gpu_api,
        unavailable=unavailable,
    )


#: NoExecute taints the node lifecycle controller sets on a NotReady / unreachable node: covered by the
#: Ready condition and its grace period, not a failure by themselves.
_LIFECYCLE_TAINTS = frozenset({"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"})


@dataclass(frozen=True, slots=True)
class NodeHealth:
    """What a Node object says about its health.

    ``ready`` is the Ready condition (True; a node without conditions counts as ready); ``since`` is when
    a not-ready node's Ready condition last changed (None if not given); ``no_execute`` lists the keys of
    ``NoExecute`` taints other than the lifecycle controller's not-ready / unreachable ones (an operator
    or a health checker evicting the node's pods); ``no_execute_taints`` the same taints as (key, value).
    """

    name: str
    ready: bool = True
    since: float | None = None
    no_execute: tuple[str, ...] = ()
    no_execute_taints: tuple[tuple[str, str], ...] = ()


def decode_node_health(obj: Mapping[str, Any]) -> NodeHealth:
    """The Ready condition and NoExecute taints of a Node API object (``CodecError`` naming a bad field)."""
    name = object_name(obj, "Node")
    where = f"Node {name}"
    status = _mapping(obj, "status", where)
    spec = _mapping(obj, "spec", where)
    ready, since = True, None
    conditions = status.get("conditions") or []
    if not isinstance(conditions, list):
        raise CodecError(f"{where}.status.conditions: expected a list, got {type(conditions).__name__}")
    for cond in conditions:
        if isinstance(cond, Mapping) and cond.get("type") == "Ready":
            ready = cond.get("status") == "True"
            since = _timestamp(cond.get("lastTransitionTime")) if not ready else None
    taints = spec.get("taints") or []
    if not isinstance(taints, list):
        raise CodecError(f"{where}.spec.taints: expected a list, got {type(taints).__name__}")
    no_execute_taints = tuple(
        (str(t.get("key", "")), str(t.get("value") or ""))
        for t in taints
        if isinstance(t, Mapping) and t.get("effect") == "NoExecute" and t.get("key") not in _LIFECYCLE_TAINTS
    )
    return NodeHealth(
        name=name,
        ready=ready,
        since=since,
        no_execute=tuple(k for k, _ in no_execute_taints),
        no_execute_taints=no_execute_taints,
    )


def _timestamp(value: object) -> float | None:
    if not isinstance(value, str):
        return None
    try:
        dt = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return (dt if dt.tzinfo is not None else dt.replace(tzinfo=UTC)).timestamp()


@lru_cache(maxsize=1024)
def _is_pcie(product: str) -> bool:
    """Whether a product's GPUs talk over PCIe only: the catalogue's variant has no NVLink
    (``NVIDIA-A100-80GB-PCIe``, ``Tesla-T4``); an unknown product is taken as PCIe when its name says so."""
    try:
        from perfmodel.gpus import spec_for_product

        spec = spec_for_product(product)
    except ImportError:  # pragma: no cover - perfmodel is part of this distribution
        spec = None
    if spec is not None:
        return spec.nvlink_gbs <= 0
    return "PCIE" in product.upper().replace("-", " ").split()


def _container_gpus(container: object, where: str) -> int:
    if not isinstance(container, Mapping):
        raise CodecError(f"{where}: expected an object")
    resources = _mapping(container, "resources", where)
    requests = _mapping(resources, "requests", f"{where}.resources")
    if GPU_RESOURCE in requests:
        return parse_count(requests[GPU_RESOURCE], f"{where}.resources.requests[{GPU_RESOURCE}]")
    limits = _mapping(resources, "limits", f"{where}.resources")
    if GPU_RESOURCE in limits:
        return parse_count(limits[GPU_RESOURCE], f"{where}.resources.limits[{GPU_RESOURCE}]")
    return 0


def pod_gpu_request(pod: Mapping[str, Any], where: str = "Pod") -> int:
    """GPUs a pod asks for: the containers' sum, or the largest init container if that is more."""
    spec = _mapping(pod, "spec", where)
    total = 0
    for key in ("containers", "initContainers"):
        containers = spec.get(key)
        if containers is None:
            continue
        if not isinstance(containers, list):
            raise CodecError(f"{where}.spec.{key}: expected a list, got {type(containers).__name__}")
        for i, c in enumerate(containers):
            gpus = _container_gpus(c, f"{where}.spec.{key}[{i}]")
            total = total + gpus if key == "containers" else max(total, gpus)
    return total


@dataclass(frozen=True, slots=True)
class PodInfo:
    """What the scheduler needs to know about one pod.

    ``job`` is ``namespace/name`` of the pod's TrainingJob ("" for pods that belong to none).
    ``holds_gpus`` is true while the pod is bound to a node and not finished: such a pod's GPUs are in
    use whether or not it is Running yet (kube-scheduler counts bound Pending pods the same way).
    """

    uid: str
    namespace: str
    name: str
    node_name: str
    gpus: int
    phase: str
    scheduler_name: str = ""
    job: str = ""
    generation: str = ""
    replica_index: int | None = None
    gpu_type: str = ""
    planned_node: str = ""
    model: str = ""
    batch_size: int = 0
    world_size: int = 0  # replicas in the pod's gang, as the operator wrote it (0: not given)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def terminal(self) -> bool:
        return self.phase in _TERMINAL_PHASES

    @property
    def holds_gpus(self) -> bool:
        return bool(self.node_name) and not self.terminal and self.gpus > 0


def decode_pod(obj: Mapping[str, Any]) -> PodInfo:
    """A Pod API object (dict) -> ``PodInfo``; raises ``CodecError`` naming a malformed field."""
    name = object_name(obj, "Pod")
    meta = _mapping(obj, "metadata", "Pod")
    namespace = str(meta.get("namespace") or "")
    where = f"Pod {namespace}/{name}"
    labels = _mapping(meta, "labels", f"{where}.metadata")
    annotations = _mapping(meta, "annotations", f"{where}.metadata")
    spec = _mapping(obj, "spec", where)
    status = _mapping(obj, "status", where)
    job_name = str(labels.get(LABEL_JOB_NAME, ""))
    replica_raw = labels.get(LABEL_REPLICA_INDEX)
    replica: int | None = None
    if replica_raw is not None:
        try:
            replica = int(replica_raw)
        except (TypeError, ValueError):
            replica = None
    return PodInfo(
        uid=str(meta.get("uid") or ""),
        namespace=namespace,
        name=name,
        node_name=str(spec.get("nodeName") or ""),
        gpus=pod_gpu_request(obj, where),
        phase=str(status.get("phase") or "Pending"),
        scheduler_name=str(spec.get("schedulerName") or ""),
        job=f"{namespace}/{job_name}" if job_name else "",
        generation=str(labels.get(LABEL_GENERATION, "")),
        replica_index=replica,
        gpu_type=str(annotations.get(ANNOTATION_GPU_TYPE, "")),
        planned_node=str(annotations.get(ANNOTATION_PLANNED_NODE, "")),
        model=str(annotations.get(ANNOTATION_MODEL, "")),
        batch_size=_count_annotation(annotations, ANNOTATION_BATCH_SIZE),
        world_size=_count_annotation(annotations, ANNOTATION_WORLD_SIZE),
    )


def _count_annotation(annotations: Mapping[str, Any], key: str) -> int:
    """A non-negative integer annotation; a bad optional annotation must not hide the pod (its GPUs still
    count): it reads as 0, "not given"."""
    raw = annotations.get(key)
    try:
        return max(0, int(raw)) if raw is not None else 0
    except (TypeError, ValueError):
        return 0
