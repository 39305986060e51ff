"""The DRA objects of a local cluster's fake GPU nodes: a DeviceClass backing ``nvidia.com/gpu`` and one
ResourceSlice per node, shaped as NVIDIA's DRA driver (k8s-dra-driver-gpu) publishes them.

Pure: every function returns API JSON from its inputs (``perfsched_dev.devcluster.cluster`` creates
them; the unit tests feed them to the extender's cache). The driver publishes per GPU the attributes
``type`` (``gpu``), ``uuid``, ``productName`` (NVML's device name: ``Tesla V100-SXM2-16GB``), ``brand``,
``architecture``, ``cudaComputeCapability``, ``driverVersion``, ``cudaDriverVersion``, ``pcieBusID`` and
the capacity ``memory``; the fake slices carry the same (the versions made up, the rest from
``perfmodel.gpus``'s catalogue), plus ``perfsched.dev/interconnect`` (the node's link: NVIDIA's driver
publishes none) and, with ``taints``, device taints as the driver sets on a GPU it finds faulty.
``gpu_api_of`` decides which nodes publish their GPUs this way under ``--gpu-api``.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from typing import Any

from scheduler.core.types import Node
from scheduler.names import (
    DRA_API_VERSION,
    DRA_ATTR_ARCHITECTURE,
    DRA_ATTR_COMPUTE_CAPABILITY,
    DRA_ATTR_PRODUCT,
    DRA_ATTR_TYPE,
    DRA_CAPACITY_MEMORY,
    DRA_GPU_DRIVER,
    GPU_RESOURCE,
    LABEL_INTERCONNECT,
)

#: ``--gpu-api`` values: every node's GPUs through the device plugin, through DRA, or some pools each way
GPU_APIS = ("device-plugin", "dra", "mixed")
DEVICE_CLASS_NAME = DRA_GPU_DRIVER
_DRIVER_VERSION = "570.124.6"  # semver: no leading zeros (the API server checks)
_CUDA_DRIVER_VERSION = "12.8.0"


def gpu_api_of(nodes: Sequence[Node], gpu_api: str) -> dict[str, bool]:
    """Node name -> whether its GPUs are DRA devices. ``mixed``: the pools (GPU types, in order of first
    appearance) at odd positions are DRA, the others device plugin, so a two-pool cluster has one each."""
    if gpu_api not in GPU_APIS:
        raise ValueError(f"--gpu-api: expected one of {', '.join(GPU_APIS)}, got {gpu_api!r}")
    types = list(dict.fromkeys(n.gpu_type for n in nodes))
    dra_types = {t for i, t in enumerate(types) if i % 2 == 1}
    return {n.name: gpu_api == "dra" or (gpu_api == "mixed" and n.gpu_type in dra_types) for n in nodes}


def device_class() -> dict[str, Any]:
    """NVIDIA's GPU DeviceClass, backing the ``nvidia.com/gpu`` extended resource (KEP-5004)."""
    expr = f'device.driver == "{DRA_GPU_DRIVER}" && device.attributes["{DRA_GPU_DRIVER}"].type == "gpu"'
    return {
        "apiVersion": DRA_API_VERSION,
        "kind": "DeviceClass",
        "metadata": {"name": DEVICE_CLASS_NAME},
        "spec": {"selectors": [{"cel": {"expression": expr}}], "extendedResourceName": GPU_RESOURCE},
    }


def nvml_name(product_label: str) -> str:
    """NVML's device name for a GFD product label: the vendor prefix is followed by a space
    (``Tesla-V100-SXM2-16GB`` -> ``Tesla V100-SXM2-16GB``, ``NVIDIA-A100-SXM4-80GB`` ->
    ``NVIDIA A100-SXM4-80GB``)."""
    return re.sub(r"^(Tesla|NVIDIA|Quadro)-", r"\1 ", product_label)


def _spec(product: str) -> tuple[str, str, int]:
    """(architecture, compute capability, memory MiB) of a product from perfmodel's catalogue."""
    from perfmodel.gpus import spec_for_product

    spec = spec_for_product(product)
    if spec is None:
        return "", "", 0
    major, minor = spec.compute_capability
    return spec.architecture, f"{major}.{minor}.0", int(spec.memory_gib * 1024)


def _attr(value: str, kind: str = "string") -> dict[str, str]:
    return {kind: value}


def gpu_device(
    node: Node, index: int, *, omit: Sequence[str] = (), taint: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """Device ``gpu-<index>`` of ``node`` as NVIDIA's driver publishes it (``omit``: attributes left out)."""
    product = node.gpu_product or node.gpu_type
    architecture, cc, memory_mib = _spec(product)
    uuid = "GPU-" + hashlib.sha256(f"{node.name}/{index}".encode()).hexdigest()[:32]
    attributes: dict[str, dict[str, str]] = {
        DRA_ATTR_TYPE: _attr("gpu"),
        "uuid": _attr(uuid),
        DRA_ATTR_PRODUCT: _attr(nvml_name(product)),
        "brand": _attr(product.split("-", 1)[0]),
        DRA_ATTR_ARCHITECTURE: _attr(architecture),
        DRA_ATTR_COMPUTE_CAPABILITY: _attr(cc, "version"),
        "driverVersion": _attr(_DRIVER_VERSION, "version"),
        "cudaDriverVersion": _attr(_CUDA_DRIVER_VERSION, "version"),
        "pcieBusID": _attr(f"0000:{0x10 + index:02x}:00.0"),
        LABEL_INTERCONNECT: _attr(node.interconnect.value),
    }
    device: dict[str, Any] = {
        "name": f"gpu-{index}",
        "attributes": {k: v for k, v in attributes.items() if k not in omit and next(iter(v.values()))},
    }
    if memory_mib and DRA_CAPACITY_MEMORY not in omit:
        device["capacity"] = {DRA_CAPACITY_MEMORY: {"value": f"{memory_mib}Mi"}}
    if taint:
        device["taints"] = [dict(taint)]
    return device


def resource_slice(
    node: Node,
    *,
    generation: int = 1,
    omit: Sequence[str] = (),
    taints: Mapping[int, Mapping[str, str]] | None = None,
) -> dict[str, Any]:
    """The node's ResourceSlice: one pool named after the node, ``node.gpus`` GPU devices."""
    taints = taints or {}
    return {
        "apiVersion": DRA_API_VERSION,
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node.name}-{DRA_GPU_DRIVER}"},
        "spec": {
            "driver": DRA_GPU_DRIVER,
            "nodeName": node.name,
            "pool": {"name": node.name, "generation": generation, "resourceSliceCount": 1},
            "devices": [gpu_device(node, i, omit=omit, taint=taints.get(i)) for i in range(node.gpus)],
        },
    }
