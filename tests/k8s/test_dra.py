"""DRA GPUs: DeviceClasses, ResourceSlices and ResourceClaims decode, and the cache counts a DRA node's
capacity and free GPUs from them (claims, bound pods without a visible claim, assumed pods), once each."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from perfsched_dev.k8s import dra as fake
from perfsched_dev.k8s.bootstrap import node_manifest
from scheduler.core.types import Interconnect, Node
from scheduler.k8s.cache import ClusterCache, Kind
from scheduler.k8s.codec import decode_node
from scheduler.k8s.dra import (
    DraError,
    DraInventory,
    decode_claim,
    decode_device_class,
    decode_slice,
    parse_quantity,
)
from tests.extender.kube import fed_cache, gpu_claim, kube_node, kube_pod

V100 = Node("dra-v", "V100", 8, gpu_product="Tesla-V100-SXM2-16GB", rack="r1")
T4 = Node("dra-t", "T4", 4, gpu_product="Tesla-T4", interconnect=Interconnect.PCIE)


def dra_cache(
    *nodes: Node,
    pods: list[dict[str, Any]] | None = None,
    claims: list[dict[str, Any]] | None = None,
    **kw: Any,
) -> ClusterCache:
    return fed_cache(
        [node_manifest(n, dra=True) for n in nodes],
        pods or [],
        classes=[fake.device_class()],
        slices=[fake.resource_slice(n, **kw) for n in nodes],
        claims=claims or [],
    )


def test_quantities() -> None:
    # 16Gi = 16 * 2^30; 16G = 16e9; plain bytes; 1500m = 1.5
    assert parse_quantity("16Gi", "x") == 16 * 2**30
    assert parse_quantity("16G", "x") == 16e9
    assert parse_quantity(17179869184, "x") == 2**34
    assert parse_quantity("1500m", "x") == 1.5
    with pytest.raises(DraError, match=r"^slice\.memory: not a quantity: '16 GiB'$"):
        parse_quantity("16 GiB", "slice.memory")


def test_device_class_selectors_are_read() -> None:
    cls = decode_device_class(fake.device_class())
    assert cls is not None and (cls.driver, cls.device_type, cls.problem) == ("gpu.nvidia.com", "gpu", "")
    other = {"metadata": {"name": "fpga"}, "spec": {"extendedResourceName": "example.com/fpga"}}
    assert decode_device_class(other) is None
    # a class whose CEL perfsched cannot read: NVIDIA's driver is assumed, and the class says so
    opaque = {
        "metadata": {"name": "gpus"},
        "spec": {"extendedResourceName": "nvidia.com/gpu", "selectors": []},
    }
    cls = decode_device_class(opaque)
    assert cls is not None and cls.driver == "gpu.nvidia.com" and "no single `device.driver" in cls.problem


def test_slice_attributes_as_nvidia_publishes_them() -> None:
    s = decode_slice(fake.resource_slice(V100))
    assert (s.node, s.driver, s.pool, s.generation, len(s.devices)) == (
        "dra-v",
        "gpu.nvidia.com",
        "dra-v",
        1,
        8,
    )
    d = s.devices[0]
    assert d.attributes["productName"] == "Tesla V100-SXM2-16GB"
    assert d.attributes["cudaComputeCapability"] == "7.0.0" and d.attributes["architecture"] == "Volta"
    assert d.memory_mib == 16 * 1024 and d.taint == ""


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        ({"metadata": {}}, "ResourceSlice.metadata.name: missing or not a string"),
        (
            {"metadata": {"name": "s"}, "spec": {"pool": {"name": "p"}}},
            "ResourceSlice s.spec.driver: missing",
        ),
        (
            {
                "metadata": {"name": "s"},
                "spec": {"driver": "d", "pool": {"name": "p"}, "devices": [{"name": "g"}, 3]},
            },
            "ResourceSlice s.spec.devices[1]: expected an object, got int",
        ),
        (
            {
                "metadata": {"name": "s"},
                "spec": {
                    "driver": "d",
                    "pool": {"name": "p"},
                    "devices": [{"name": "g", "capacity": {"memory": {"value": "lots"}}}],
                },
            },
            "ResourceSlice s.spec.devices[0].capacity.memory.value: not a quantity: 'lots'",
        ),
    ],
)
def test_bad_slices_name_the_field(obj: dict[str, Any], message: str) -> None:
    with pytest.raises(DraError) as err:
        decode_slice(obj)
    assert str(err.value).startswith(message)


def test_claim_owner_and_devices() -> None:
    c = decode_claim(gpu_claim("p-gpu", "dra-v", [0, 3], owner_uid="u1"))
    assert (c.key, c.owner_uid, c.extended_resource) == ("team-a/p-gpu", "u1", True)
    assert c.devices == (("gpu.nvidia.com", "dra-v", "gpu-0"), ("gpu.nvidia.com", "dra-v", "gpu-3"))
    assert decode_claim(gpu_claim("pending", "dra-v", [])).devices == ()
    bad = gpu_claim("x", "dra-v", [0])
    bad["status"]["allocation"]["devices"]["results"][0].pop("pool")
    with pytest.raises(DraError, match=r"results\[0\]: needs driver, pool, device"):
        decode_claim(bad)


def test_a_dra_node_is_typed_and_counted_from_its_devices() -> None:
    cache = dra_cache(V100, T4)
    v, t = cache.nodes["dra-v"], cache.nodes["dra-t"]
    assert (v.gpu_api, v.gpus, v.gpu_type, v.gpu_product, v.rack) == (
        "dra",
        8,
        "V100",
        "Tesla-V100-SXM2-16GB",
        "r1",
    )
    # the T4 is a PCIe board: its slice's interconnect attribute says so
    assert (t.gpus, t.gpu_type, t.interconnect) == (4, "T4", Interconnect.PCIE)
    assert cache.free == {"dra-v": 8, "dra-t": 4}


def test_interconnect_from_the_product_when_no_attribute() -> None:
    cache = dra_cache(T4, omit=("perfsched.dev/interconnect",))
    # NVIDIA's driver publishes no link: the catalogue's Tesla-T4 has no NVLink
    assert cache.nodes["dra-t"].interconnect is Interconnect.PCIE


def test_claims_and_pods_are_counted_once() -> None:
    pod_a = kube_pod("a", 2, node="dra-v", uid="ua")
    pod_b = kube_pod("b", 3, node="dra-v", uid="ub", phase="Pending")
    cache = dra_cache(V100, pods=[pod_a, pod_b], claims=[gpu_claim("a-gpu", "dra-v", [0, 1], owner_uid="ua")])
    # a's 2 GPUs counted by its claim, b's 3 by its request (its claim not visible yet): 8 - 2 - 3
    assert cache.free["dra-v"] == 3
    cache.apply(Kind.RESOURCECLAIMS, "ADDED", gpu_claim("b-gpu", "dra-v", [2, 3, 4], owner_uid="ub"))
    assert cache.free["dra-v"] == 3  # b now counted by its claim instead: the same 3
    # a finishes, its claim still allocated (the claim controller has not released it): still held
    cache.apply(Kind.PODS, "MODIFIED", kube_pod("a", 2, node="dra-v", uid="ua", phase="Succeeded"))
    assert cache.free["dra-v"] == 3
    cache.apply(Kind.RESOURCECLAIMS, "DELETED", gpu_claim("a-gpu", "dra-v", [0, 1], owner_uid="ua"))
    assert cache.free["dra-v"] == 5
    # a claim of no pod (a user's own ResourceClaim) holds its device too
    cache.apply(Kind.RESOURCECLAIMS, "ADDED", gpu_claim("mine", "dra-v", [7]))
    assert cache.free["dra-v"] == 4
    # an assumed bind counts until the watch shows the pod
    cache.assume("team-a", "c", "uc", "dra-v", 4)
    assert cache.free["dra-v"] == 0
    # its claim (made in PreBind, before the Binding) shows up first: counted once, by the claim
    cache.apply(Kind.RESOURCECLAIMS, "ADDED", gpu_claim("c-gpu", "dra-v", [0, 1, 5, 6], owner_uid="uc"))
    assert cache.free["dra-v"] == 0
    cache.forget("team-a", "c")  # the bind failed; the scheduler's claim still holds the devices
    assert cache.free["dra-v"] == 0
    cache.apply(Kind.RESOURCECLAIMS, "DELETED", gpu_claim("c-gpu", "dra-v", [0, 1, 5, 6], owner_uid="uc"))
    assert cache.free["dra-v"] == 4


def test_tainted_devices_leave_capacity() -> None:
    taint = {"key": "gpu.nvidia.com/xid", "value": "79", "effect": "NoSchedule"}
    info = {"key": "gpu.nvidia.com/ecc", "effect": "None"}  # informational: does not block
    cache = dra_cache(V100, taints={1: taint, 2: info})
    assert cache.nodes["dra-v"].gpus == 7 and cache.free["dra-v"] == 7
    gpus = cache.dra.node_gpus("dra-v")
    assert gpus is not None and gpus.taints == {"gpu-1": "gpu.nvidia.com/xid=79:NoSchedule"}
    # the driver lifts the taint: a new slice generation
    cache.apply(Kind.RESOURCESLICES, "MODIFIED", fake.resource_slice(V100, generation=2))
    assert cache.nodes["dra-v"].gpus == 8


def test_only_the_newest_pool_generation_counts() -> None:
    inv = DraInventory()
    inv.set_class(fake.device_class())
    old = fake.resource_slice(V100, generation=1)
    new = fake.resource_slice(Node("dra-v", "V100", 2, gpu_product="Tesla-V100-SXM2-16GB"), generation=2)
    new["metadata"]["name"] = "dra-v-new"
    inv.set_slice(old)
    inv.set_slice(new)
    gpus = inv.node_gpus("dra-v")
    assert gpus is not None and len(gpus.devices) == 2


def test_missing_product_is_unknown_and_warned(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="scheduler.k8s.cache"):
        cache = dra_cache(V100, omit=("productName",))
    node = cache.nodes["dra-v"]
    # counted, never a silent zero; typed "unknown"
    assert (node.gpus, node.gpu_type) == (8, "unknown") and cache.free["dra-v"] == 8
    assert "DRA GPUs of node dra-v have no productName attribute: typed unknown" in caplog.text


def test_gfd_labels_left_on_a_dra_node_do_not_hide_its_claims() -> None:
    # GFD still labels the node (8 GPUs) but its GPUs are DRA devices: claims count, the label does not
    obj = node_manifest(V100, {"nvidia.com/gpu.count": "8", "nvidia.com/gpu.product": "Tesla-V100-SXM2-16GB"})
    del obj["status"]["allocatable"]["nvidia.com/gpu"]
    cache = fed_cache(
        [obj],
        classes=[fake.device_class()],
        slices=[fake.resource_slice(V100)],
        claims=[gpu_claim("x", "dra-v", [0, 1, 2])],
    )
    assert (cache.nodes["dra-v"].gpu_api, cache.free["dra-v"]) == ("dra", 5)


def test_device_plugin_nodes_ignore_slices() -> None:
    # a node with allocatable nvidia.com/gpu keeps its device-plugin count even if a slice names it
    slice_ = fake.resource_slice(Node("dp", "A100", 2, gpu_product="NVIDIA-A100-SXM4-80GB"))
    cache = fed_cache([kube_node("dp", "A100", 8)], classes=[fake.device_class()], slices=[slice_])
    assert (cache.nodes["dp"].gpus, cache.nodes["dp"].gpu_api) == (8, "")


def test_slices_arriving_after_the_node() -> None:
    cache = fed_cache([node_manifest(V100, dra=True)])
    assert cache.nodes["dra-v"].gpus == 0  # no class, no slice: no GPUs yet
    cache.apply(Kind.DEVICECLASSES, "ADDED", fake.device_class())
    cache.apply(Kind.RESOURCESLICES, "ADDED", fake.resource_slice(V100))
    assert cache.nodes["dra-v"].gpus == 8 and cache.free["dra-v"] == 8
    cache.apply(Kind.DEVICECLASSES, "DELETED", fake.device_class())
    assert cache.nodes["dra-v"].gpus == 0


def test_not_ready_node_takes_no_work() -> None:
    obj = kube_node("n", "A100", 8)
    obj["status"]["conditions"] = [{"type": "Ready", "status": "False", "reason": "KubeletNotReady"}]
    node = decode_node(obj)
    assert not node.schedulable and node.unavailable == "not ready (condition Ready=False: KubeletNotReady)"
    assert node.capacity_for_jobs == 0


def test_mixed_puts_every_second_pool_on_dra() -> None:
    nodes = [Node(f"{t}-{i}", t, 4) for t in ("K80", "P100", "V100") for i in range(2)]
    assert fake.gpu_api_of(nodes, "mixed") == {
        "K80-0": False, "K80-1": False, "P100-0": True, "P100-1": True, "V100-0": False, "V100-1": False
    }  # fmt: skip
    assert all(fake.gpu_api_of(nodes, "dra").values()) and not any(
        fake.gpu_api_of(nodes, "device-plugin").values()
    )
    with pytest.raises(ValueError, match="--gpu-api: expected one of device-plugin, dra, mixed, got 'nvml'"):
        fake.gpu_api_of(nodes, "nvml")


def test_a_pod_with_an_allocated_claim_is_placed_before_its_binding_shows() -> None:
    # kube-scheduler allocated w0's claim on dra-v in PreBind; the Binding has not shown yet: gang-mates
    # must see w0 there (the claim already takes the node's devices)
    w0 = kube_pod("w0", 2, uid="u0", job="tj", replica=0)
    cache = dra_cache(V100, pods=[w0], claims=[gpu_claim("w0-gpu", "dra-v", [0, 1], owner_uid="u0")])
    pod = cache.pod("team-a", "w0")
    assert pod is not None and cache.placed_node(pod) == "dra-v" and cache.free["dra-v"] == 6
    assert cache.dra.claimed_node("nobody") == ""


def test_device_taint_rules_take_the_devices_they_select_out_of_the_extenders_free_gpus() -> None:
    from scheduler.k8s.cache import Kind
    from tests.operator.test_device_taints import taint_rule

    cache = dra_cache(V100, T4)
    # a NoExecute rule on one device of dra-v, a NoSchedule one on all of dra-t, a None one on every device
    rule = taint_rule("xid", {"driver": "gpu.nvidia.com", "pool": "dra-v", "device": "gpu-2"})
    cache.apply(Kind.DEVICETAINTRULES, "ADDED", rule)
    cache.apply(Kind.DEVICETAINTRULES, "ADDED", taint_rule("drain-t", {"pool": "dra-t"}, effect="NoSchedule"))
    cache.apply(Kind.DEVICETAINTRULES, "ADDED", taint_rule("info", {}, effect="None"))
    assert cache.free == {"dra-v": 7, "dra-t": 0}
    assert cache.dra.node_gpus("dra-v").taints == {"gpu-2": "gpu.nvidia.com/xid=48:NoExecute"}  # type: ignore[union-attr]
    # a change that makes the rule unreadable drops it; a deleted rule gives its devices back
    broken = taint_rule("xid", {"pool": 3})
    cache.apply(Kind.DEVICETAINTRULES, "MODIFIED", broken)
    assert cache.free["dra-v"] == 8
    cache.apply(Kind.DEVICETAINTRULES, "DELETED", taint_rule("drain-t", {}))
    assert cache.free == {"dra-v": 8, "dra-t": 4}


def test_a_held_pod_whose_claim_is_allocated_is_counted_by_the_claim_alone() -> None:
    """kube-scheduler allocates a pod's claim in PreBind: from then on the pod is where its claim is, and
    its hold on the planned node ends (wherever the claim is)."""
    v2 = Node("dra-v2", "V100", 8, gpu_product="Tesla-V100-SXM2-16GB", rack="r1")
    cache = dra_cache(V100, v2, pods=[kube_pod("w0", 2, job="tj", replica=0, planned="dra-v", uid="u0")])
    assert cache.free == {"dra-v": 6, "dra-v2": 8}
    cache.apply(Kind.RESOURCECLAIMS, "ADDED", gpu_claim("w0-gpu", "dra-v2", [0, 1], owner_uid="u0"))
    assert cache.free == {"dra-v": 8, "dra-v2": 6}
