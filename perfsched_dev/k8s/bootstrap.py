"""Bootstrapping a cluster for perfsched: CRDs, fake GPU nodes, namespaces, service accounts.

Used by the local control plane (``perfsched_dev.devcluster``), the e2e fixtures and the benchmarks, which
must not import ``kubernetes`` themselves. ``node_manifest`` is pure (a core ``Node`` to the Kubernetes
Node object KWOK plays); everything else calls the API server and waits with a deadline, raising
``TemporaryError`` with what it was waiting for when time runs out.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client as k8s

from perfsched_dev.k8s import dra
from scheduler.core.errors import TemporaryError
from scheduler.core.types import Interconnect, Node
from scheduler.k8s.errors import AlreadyExists, ApiUnavailable, Conflict, NotFound, Throttled, api_call
from scheduler.names import (
    DRA_GROUP,
    DRA_VERSION,
    GPU_RESOURCE,
    LABEL_GPU_COUNT,
    LABEL_GPU_PRODUCT,
    LABEL_INTERCONNECT,
    LABEL_NETWORK_GBPS,
    LABEL_NVLINK_DOMAIN,
    LABEL_RACK,
    LABEL_ZONE,
)

log = logging.getLogger(__name__)

#: The annotation KWOK is told to manage nodes by (``--manage-nodes-with-annotation-selector``).
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
KWOK_NODE_VALUE = "fake"
_GFD_PREFIX = "nvidia.com/gpu."


def node_manifest(
    node: Node,
    extra_labels: Mapping[str, str] | None = None,
    cpu: str = "128",
    memory: str = "1Ti",
    pods: int = 110,
    dra: bool = False,
) -> dict[str, Any]:
    """The Kubernetes Node for a fake GPU node: the labels perfsched reads and ``nvidia.com/gpu`` capacity.

    Labels follow NVIDIA GPU Feature Discovery (``nvidia.com/gpu.product``/``.count``) and perfsched's
    topology labels; the status carries the capacity, which KWOK's node stage keeps. With ``dra`` the
    node's GPUs are DRA devices (``perfsched_dev.k8s.dra.resource_slice``): no GPU labels and no
    ``nvidia.com/gpu`` in its capacity, as on a node served by NVIDIA's DRA driver alone.
    """
    labels = {
        "kubernetes.io/hostname": node.name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "type": "kwok",
        LABEL_NETWORK_GBPS: f"{node.network_gbps:g}",
    }
    if not dra:
        labels[LABEL_GPU_PRODUCT] = node.gpu_product or node.gpu_type
        labels[LABEL_GPU_COUNT] = str(node.gpus)
        labels[LABEL_INTERCONNECT] = Interconnect(node.interconnect).value
    if node.rack:
        labels[LABEL_RACK] = node.rack
    if node.nvlink_domain:
        labels[LABEL_NVLINK_DOMAIN] = node.nvlink_domain
    if node.zone:
        labels[LABEL_ZONE] = node.zone
    # a DRA node gets no GPU Feature Discovery labels: its GPUs are typed from their device attributes
    labels.update(
        {
            k: v
            for k, v in (extra_labels or {}).items()
            if k != GPU_RESOURCE and not (dra and k.startswith(_GFD_PREFIX))
        }
    )
    resources = {"cpu": cpu, "memory": memory, "pods": str(pods)}
    if not dra:
        resources[GPU_RESOURCE] = str(node.gpus)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": node.name,
            "labels": labels,
            "annotations": {KWOK_NODE_ANNOTATION: KWOK_NODE_VALUE},
        },
        "spec": {"unschedulable": not node.schedulable},
        "status": {"allocatable": dict(resources), "capacity": dict(resources)},
    }


def create_nodes(
    api: k8s.ApiClient,
    nodes: Sequence[Node],
    extra_labels: Mapping[str, Mapping[str, str]] | None = None,
    workers: int = 8,
    dra_nodes: Collection[str] = (),
) -> None:
    """Create a fake node for each of ``nodes`` (existing nodes of the same name are left alone); those
    named in ``dra_nodes`` publish their GPUs as DRA devices: the GPU DeviceClass and one ResourceSlice
    per node are created first (``perfsched_dev.k8s.dra``)."""
    core = k8s.CoreV1Api(api)
    custom = k8s.CustomObjectsApi(api)
    extra = extra_labels or {}
    dra_set = set(dra_nodes)

    def create_cluster_object(what: str, plural: str, body: dict[str, Any]) -> None:
        try:
            with api_call(what):
                custom.create_cluster_custom_object(DRA_GROUP, DRA_VERSION, plural, body)
        except (AlreadyExists, Conflict):
            pass

    if dra_set:
        create_cluster_object("creating the GPU DeviceClass", "deviceclasses", dra.device_class())

    def create(node: Node) -> None:
        is_dra = node.name in dra_set
        if is_dra:
            create_cluster_object(
                f"creating the ResourceSlice of node {node.name}", "resourceslices", dra.resource_slice(node)
            )
        try:
            with api_call(f"creating node {node.name}"):
                core.create_node(node_manifest(node, extra.get(node.name), dra=is_dra))
        except (AlreadyExists, Conflict):
            pass

    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(create, nodes))


def _wait(what: str, check: Callable[[], bool], timeout_s: float, poll_s: float = 0.25) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with api_call(what):
                if check():
                    return
        except (NotFound, Conflict, Throttled, ApiUnavailable):
            pass  # not there yet, or the API server is still starting
        if time.monotonic() > deadline:
            raise TemporaryError(f"timed out after {timeout_s:g}s waiting for {what}")
        time.sleep(poll_s)


def ready_node_names(api: k8s.ApiClient) -> set[str]:
    """Names of the nodes whose Ready condition is True."""
    out: set[str] = set()
    for node in k8s.CoreV1Api(api).list_node().items:
        for cond in node.status.conditions or []:
            if cond.type == "Ready" and cond.status == "True":
                out.add(node.metadata.name)
    return out


def wait_nodes_ready(api: k8s.ApiClient, names: Iterable[str], timeout_s: float = 60.0) -> None:
    """Wait until every named node reports Ready (KWOK's node stage)."""
    wanted = set(names)
    _wait(f"{len(wanted)} KWOK nodes to become Ready", lambda: wanted <= ready_node_names(api), timeout_s)


def load_crds(paths: Iterable[Path]) -> list[dict[str, Any]]:
    """Every CustomResourceDefinition document in ``paths`` (other kinds are ignored)."""
    docs: list[dict[str, Any]] = []
    for path in paths:
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition":
                docs.append(doc)
    return docs


def apply_crds(api: k8s.ApiClient, crds: Sequence[Mapping[str, Any]], timeout_s: float = 30.0) -> list[str]:
    """Create or replace each CRD and wait until all are Established; returns their names."""
    ext = k8s.ApiextensionsV1Api(api)
    names: list[str] = []
    for crd in crds:
        name = str(crd["metadata"]["name"])
        names.append(name)
        try:
            with api_call(f"creating CRD {name}"):
                ext.create_custom_resource_definition(crd)
        except (AlreadyExists, Conflict):
            with api_call(f"replacing CRD {name}"):
                current = ext.read_custom_resource_definition(name)
                body = dict(crd)
                body["metadata"] = {**crd["metadata"], "resourceVersion": current.metadata.resource_version}
                ext.replace_custom_resource_definition(name, body)

    def established() -> bool:
        for name in names:
            crd = ext.read_custom_resource_definition(name)
            conds = {c.type: c.status for c in (crd.status.conditions or [])}
            if conds.get("Established") != "True":
                return False
        return True

    _wait(f"CRDs {', '.join(names)} to be Established", established, timeout_s)
    return names


def wait_service_account(
    api: k8s.ApiClient, namespace: str, name: str = "default", timeout_s: float = 30.0
) -> None:
    """Wait for a ServiceAccount (the ``default`` one appears once KCM's serviceaccount controller runs)."""
    core = k8s.CoreV1Api(api)
    _wait(
        f"ServiceAccount {namespace}/{name}",
        lambda: core.read_namespaced_service_account(name, namespace) is not None,
        timeout_s,
    )


def create_namespace(api: k8s.ApiClient, name: str, labels: Mapping[str, str] | None = None) -> None:
    """Create a namespace and wait for its ``default`` ServiceAccount, so pods can be created at once."""
    core = k8s.CoreV1Api(api)
    with api_call(f"creating namespace {name}"):
        core.create_namespace({"metadata": {"name": name, "labels": dict(labels or {})}})
    wait_service_account(api, name)


def delete_namespace(api: k8s.ApiClient, name: str) -> None:
    """Ask for a namespace to be deleted (the namespace controller empties it); does not wait."""
    try:
        with api_call(f"deleting namespace {name}"):
            k8s.CoreV1Api(api).delete_namespace(name)
    except NotFound:
        pass
