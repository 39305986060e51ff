"""GPUs published through Dynamic Resource Allocation: DeviceClasses, ResourceSlices and ResourceClaims
(``resource.k8s.io/v1``) turned into what perfsched counts per node.

Pure: the decoders take API JSON dicts, ``DraInventory`` is an in-memory index fed by the watch cache
(``scheduler.k8s.cache``) or by one list (the operator). No I/O, no clock, no locking (callers lock).

A DeviceClass with ``spec.extendedResourceName: nvidia.com/gpu`` (KEP-5004, GA in Kubernetes 1.37) makes
DRA devices stand in for the ``nvidia.com/gpu`` extended resource on nodes whose ``allocatable`` lacks it:
a pod asking for ``nvidia.com/gpu: N`` gets a ResourceClaim for N devices of that class, created and
allocated by kube-scheduler's DynamicResources plugin. Which devices a class selects is a CEL expression;
perfsched does not evaluate CEL but reads the two tests NVIDIA's driver's classes make,
``device.driver == "gpu.nvidia.com"`` and ``device.attributes["gpu.nvidia.com"].type == "gpu"`` (a class
without a readable driver test selects the driver ``DRA_GPU_DRIVER``, and says so in ``problems``).

Per node, ``node_gpus`` answers the GPU devices of such classes in the node's ResourceSlices (the newest
generation of each pool only, as the scheduler reads them), which of them are healthy (no device taint
with effect ``NoSchedule`` or ``NoExecute``, from the slice or from a DeviceTaintRule selecting it: NVIDIA's
driver taints a GPU it finds faulty, an admin or a health checker writes a rule), the product,
memory, compute capability and architecture from their attributes, and the attributes perfsched needs
that the devices lack (``productName``: without it the GPUs are counted, typed ``unknown``). ``allocated``
answers the node's devices that allocated ResourceClaims hold and the pods owning those claims, so that
a pod's GPUs are counted once, by its claim when the claim is visible and by its request until then.
``evicted`` answers why a pod must leave its GPUs: a device its allocated claim holds carries a
``NoExecute`` taint the claim's request does not tolerate for good (the tolerations Kubernetes copies into
the allocation result), as kube-controller-manager's device taint eviction decides.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from scheduler.core.errors import ConfigError
from scheduler.k8s.tolerations import tolerates_no_execute
from scheduler.names import (
    DRA_ATTR_ARCHITECTURE,
    DRA_ATTR_COMPUTE_CAPABILITY,
    DRA_ATTR_PRODUCT,
    DRA_ATTR_TYPE,
    DRA_CAPACITY_MEMORY,
    DRA_GPU_DRIVER,
    GPU_RESOURCE,
    LABEL_INTERCONNECT,
)

#: (driver, pool, device): a device's identity in ResourceSlices and in a claim's allocation results.
DeviceKey = tuple[str, str, str]

#: taint effects that keep the scheduler from allocating a device (``None`` is informational only, and an
#: effect Kubernetes adds later counts as ``None``, as the API asks of consumers)
_BLOCKING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})
#: the DeviceTaintRule selector fields perfsched matches devices by
_SELECTOR_KEYS = ("driver", "pool", "device")
#: the attribute perfsched cannot type a GPU without; the others only refine what it knows
REQUIRED_ATTRIBUTES = (DRA_ATTR_PRODUCT,)
#: GPU type of DRA GPUs whose devices carry no ``productName``
UNKNOWN_GPU_TYPE = "unknown"

_RESULT_KEYS = ("driver", "pool", "device")
_DRIVER_TEST = re.compile(r"""device\.driver\s*==\s*["']([^"']+)["']""")
_TYPE_TEST = re.compile(r"""device\.attributes\[\s*["']([^"']+)["']\s*\]\.type\s*==\s*["']([^"']+)["']""")
_QUANTITY = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E|m)?\s*$")
_SUFFIX = {
    None: 1.0,
    "m": 1e-3,
    "k": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "P": 1e15,
    "E": 1e18,
    "Ki": 2.0**10,
    "Mi": 2.0**20,
    "Gi": 2.0**30,
    "Ti": 2.0**40,
    "Pi": 2.0**50,
    "Ei": 2.0**60,
}


class DraError(ConfigError):
    """A DRA object does not have the shape perfsched expects; the message names the field."""


def parse_quantity(value: object, where: str) -> float:
    """A Kubernetes quantity (``80Gi``, ``85899345920``, ``16G``) as a number; ``DraError`` naming
    ``where`` when it is not one."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise DraError(f"{where}: expected a quantity, got {type(value).__name__}")
    m = _QUANTITY.match(str(value))
    if m is None:
        raise DraError(f"{where}: not a quantity: {value!r}")
    return float(m.group(1)) * _SUFFIX[m.group(2)]


def product_label(product_name: str) -> str:
    """NVML's device name as GPU Feature Discovery spells it in ``nvidia.com/gpu.product`` (spaces become
    ``-``): ``NVIDIA A100-SXM4-80GB`` -> ``NVIDIA-A100-SXM4-80GB``, so one catalogue types both."""
    return "-".join(product_name.split())


@dataclass(frozen=True, slots=True)
class GpuClass:
    """A DeviceClass that backs ``nvidia.com/gpu``: the driver and device ``type`` its selectors test
    ("" type: any device of the driver). ``problem`` says what perfsched could not read of it."""

    name: str
    driver: str
    device_type: str = ""
    problem: str = ""

    def selects(self, driver: str, attributes: Mapping[str, str]) -> bool:
        if driver != self.driver:
            return False
        return not self.device_type or attributes.get(DRA_ATTR_TYPE, self.device_type) == self.device_type


@dataclass(frozen=True, slots=True)
class DeviceTaint:
    """A device taint with a blocking effect (``NoSchedule`` or ``NoExecute``)."""

    key: str
    value: str
    effect: str

    def __str__(self) -> str:
        return f"{self.key}={self.value}:{self.effect}" if self.value else f"{self.key}:{self.effect}"


@dataclass(frozen=True, slots=True)
class DraDevice:
    """One device of a ResourceSlice: its string-valued attributes (names unqualified when their domain
    is the driver's), GPU memory in MiB (0: not given) and its blocking taint ("" when healthy);
    ``taints`` all its blocking taints."""

    name: str
    attributes: Mapping[str, str]
    memory_mib: int = 0
    taint: str = ""
    taints: tuple[DeviceTaint, ...] = ()


@dataclass(frozen=True, slots=True)
class DeviceTaintRule:
    """A DeviceTaintRule: its taint on every device whose driver, pool and name match the selector's
    fields that are set (an empty selector selects every device)."""

    name: str
    driver: str
    pool: str
    device: str
    taint: DeviceTaint | None

    def selects(self, key: DeviceKey) -> bool:
        wanted = (self.driver, self.pool, self.device)
        return all(not want or want == got for want, got in zip(wanted, key, strict=True))


@dataclass(frozen=True, slots=True)
class DraSlice:
    """A node-local ResourceSlice (``node`` "" for slices not bound to one node, which hold no GPUs)."""

    name: str
    node: str
    driver: str
    pool: str
    generation: int
    devices: tuple[DraDevice, ...] = ()


@dataclass(frozen=True, slots=True)
class DraClaim:
    """A ResourceClaim: ``namespace/name``, the uid of the pod owning it ("" if none) and the devices its
    allocation holds (empty while unallocated)."""

    key: str
    owner_uid: str
    devices: tuple[DeviceKey, ...] = ()
    extended_resource: bool = False
    #: per allocated device, the tolerations of the request it was allocated for (as the API copies them
    #: into the allocation result)
    tolerations: Mapping[DeviceKey, tuple[Mapping[str, Any], ...]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class DraNodeGpus:
    """The DRA GPUs of one node (see the module docstring)."""

    node: str
    devices: tuple[DeviceKey, ...]
    healthy: frozenset[DeviceKey]
    product: str = ""
    memory_mib: int = 0
    compute_capability: str = ""
    architecture: str = ""
    interconnect: str = ""
    missing: tuple[str, ...] = ()
    #: device name -> its blocking taint, for the unhealthy ones
    taints: Mapping[str, str] = field(default_factory=dict)
    #: device -> its blocking taints (the slice's, then the DeviceTaintRules'), for the unhealthy ones
    device_taints: Mapping[DeviceKey, tuple[DeviceTaint, ...]] = field(default_factory=dict)

    @property
    def unhealthy(self) -> int:
        return len(self.devices) - len(self.healthy)


def _name(obj: Mapping[str, Any], kind: str) -> str:
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    if not isinstance(name, str) or not name:
        raise DraError(f"{kind}.metadata.name: missing or not a string")
    return name


def _spec(obj: Mapping[str, Any], where: str) -> Mapping[str, Any]:
    spec = obj.get("spec")
    if spec is None:
        return {}
    if not isinstance(spec, Mapping):
        raise DraError(f"{where}.spec: expected an object, got {type(spec).__name__}")
    return spec


def decode_device_class(obj: Mapping[str, Any]) -> GpuClass | None:
    """A DeviceClass -> ``GpuClass`` when it backs ``nvidia.com/gpu``, else None."""
    name = _name(obj, "DeviceClass")
    spec = _spec(obj, f"DeviceClass {name}")
    if spec.get("extendedResourceName") != GPU_RESOURCE:
        return None
    drivers: list[str] = []
    types: list[str] = []
    selectors = spec.get("selectors") or []
    if not isinstance(selectors, list):
        raise DraError(f"DeviceClass {name}.spec.selectors: expected a list, got {type(selectors).__name__}")
    for sel in selectors:
        expr = ((sel or {}).get("cel") or {}).get("expression") if isinstance(sel, Mapping) else None
        if isinstance(expr, str):
            drivers += _DRIVER_TEST.findall(expr)
            types += [t for domain, t in _TYPE_TEST.findall(expr) if not drivers or domain in drivers]
    if len(set(drivers)) == 1:
        return GpuClass(name, drivers[0], types[0] if len(set(types)) == 1 else "")
    problem = (
        f'DeviceClass {name}: no single `device.driver == "..."` test in spec.selectors; '
        f"counting the devices of driver {DRA_GPU_DRIVER}"
    )
    return GpuClass(name, DRA_GPU_DRIVER, "gpu", problem)


def _attribute_value(raw: object) -> str | None:
    """A DeviceAttribute (``{"string": ...}``, ``{"version": ...}``, ``{"int": ...}``, ``{"bool": ...}``)
    as a string; None when it holds none of those."""
    if not isinstance(raw, Mapping):
        return None
    for key in ("string", "version", "int", "bool"):
        if key in raw and raw[key] is not None:
            value = raw[key]
            return str(value).lower() if isinstance(value, bool) else str(value)
    return None


def _device(raw: object, driver: str, where: str) -> DraDevice:
    if not isinstance(raw, Mapping):
        raise DraError(f"{where}: expected an object, got {type(raw).__name__}")
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        raise DraError(f"{where}.name: missing or not a string")
    attributes: dict[str, str] = {}
    attrs = raw.get("attributes") or {}
    if not isinstance(attrs, Mapping):
        raise DraError(f"{where}.attributes: expected an object, got {type(attrs).__name__}")
    for qualified, value in attrs.items():
        text = _attribute_value(value)
        if text is None:
            continue
        domain, _, short = str(qualified).rpartition("/")
        # ``gpu.nvidia.com/productName`` and ``productName`` are the same attribute of that driver's device
        attributes[short if domain in ("", driver) else str(qualified)] = text
    memory = 0
    capacity = raw.get("capacity") or {}
    if isinstance(capacity, Mapping):
        mem = capacity.get(DRA_CAPACITY_MEMORY) or capacity.get(f"{driver}/{DRA_CAPACITY_MEMORY}")
        if isinstance(mem, Mapping) and mem.get("value") is not None:
            memory = int(parse_quantity(mem["value"], f"{where}.capacity.memory.value") / 2**20)
    taints: list[DeviceTaint] = []
    raw_taints = raw.get("taints") or []
    if not isinstance(raw_taints, list):
        raise DraError(f"{where}.taints: expected a list, got {type(raw_taints).__name__}")
    for i, t in enumerate(raw_taints):
        if not isinstance(t, Mapping):
            raise DraError(f"{where}.taints[{i}]: expected an object")
        if t.get("effect") in _BLOCKING_EFFECTS:
            taints.append(DeviceTaint(str(t.get("key", "")), str(t.get("value") or ""), str(t["effect"])))
    return DraDevice(name, attributes, memory, str(taints[0]) if taints else "", tuple(taints))


def decode_taint_rule(obj: Mapping[str, Any]) -> DeviceTaintRule:
    """A DeviceTaintRule -> ``DeviceTaintRule`` (``taint`` None when its effect blocks nothing);
    ``DraError`` names a malformed field."""
    name = _name(obj, "DeviceTaintRule")
    where = f"DeviceTaintRule {name}"
    spec = _spec(obj, where)
    selector = spec.get("deviceSelector")
    if not isinstance(selector, Mapping):
        raise DraError(f"{where}.spec.deviceSelector: missing or not an object")
    fields: list[str] = []
    for field_name in _SELECTOR_KEYS:
        wanted = selector.get(field_name)
        if wanted is not None and not isinstance(wanted, str):
            got = type(wanted).__name__
            raise DraError(f"{where}.spec.deviceSelector.{field_name}: expected a string, got {got}")
        fields.append(wanted or "")
    taint = spec.get("taint")
    if not isinstance(taint, Mapping):
        raise DraError(f"{where}.spec.taint: missing or not an object")
    key, value, effect = taint.get("key"), taint.get("value"), taint.get("effect")
    if not isinstance(key, str) or not key:
        raise DraError(f"{where}.spec.taint.key: missing or not a string")
    if value is not None and not isinstance(value, str):
        raise DraError(f"{where}.spec.taint.value: expected a string, got {type(value).__name__}")
    if not isinstance(effect, str) or not effect:
        raise DraError(f"{where}.spec.taint.effect: missing or not a string")
    blocking = DeviceTaint(key, value or "", effect) if effect in _BLOCKING_EFFECTS else None
    return DeviceTaintRule(name, fields[0], fields[1], fields[2], blocking)


def decode_slice(obj: Mapping[str, Any]) -> DraSlice:
    """A ResourceSlice -> ``DraSlice``; ``DraError`` names a malformed field."""
    name = _name(obj, "ResourceSlice")
    where = f"ResourceSlice {name}"
    spec = _spec(obj, where)
    driver = spec.get("driver")
    if not isinstance(driver, str) or not driver:
        raise DraError(f"{where}.spec.driver: missing or not a string")
    pool = spec.get("pool")
    if not isinstance(pool, Mapping) or not isinstance(pool.get("name"), str):
        raise DraError(f"{where}.spec.pool.name: missing or not a string")
    try:
        generation = int(pool.get("generation") or 0)
    except (TypeError, ValueError):
        raise DraError(f"{where}.spec.pool.generation: not a number: {pool.get('generation')!r}") from None
    node = spec.get("nodeName") or ""
    if not isinstance(node, str):
        raise DraError(f"{where}.spec.nodeName: expected a string")
    raw_devices = spec.get("devices") or []
    if not isinstance(raw_devices, list):
        raise DraError(f"{where}.spec.devices: expected a list, got {type(raw_devices).__name__}")
    devices = tuple(_device(d, driver, f"{where}.spec.devices[{i}]") for i, d in enumerate(raw_devices))
    return DraSlice(name, node, driver, str(pool["name"]), generation, devices)


def decode_claim(obj: Mapping[str, Any]) -> DraClaim:
    """A ResourceClaim -> ``DraClaim`` (its owning pod and allocated devices)."""
    name = _name(obj, "ResourceClaim")
    meta = obj.get("metadata") or {}
    namespace = str(meta.get("namespace") or "")
    where = f"ResourceClaim {namespace}/{name}"
    owner = ""
    for ref in meta.get("ownerReferences") or []:
        if isinstance(ref, Mapping) and ref.get("kind") == "Pod" and ref.get("apiVersion") == "v1":
            owner = str(ref.get("uid") or "")
            break
    annotations = meta.get("annotations") or {}
    extended = (
        isinstance(annotations, Mapping)
        and annotations.get("resource.kubernetes.io/extended-resource-claim") == "true"
    )
    status = obj.get("status") or {}
    allocation = status.get("allocation") if isinstance(status, Mapping) else None
    devices: list[DeviceKey] = []
    tolerations: dict[DeviceKey, tuple[Mapping[str, Any], ...]] = {}
    if isinstance(allocation, Mapping):
        results = (allocation.get("devices") or {}).get("results") or []
        if not isinstance(results, list):
            raise DraError(f"{where}.status.allocation.devices.results: expected a list")
        for i, r in enumerate(results):
            if not isinstance(r, Mapping) or not all(isinstance(r.get(k), str) for k in _RESULT_KEYS):
                needs = ", ".join(_RESULT_KEYS)
                raise DraError(f"{where}.status.allocation.devices.results[{i}]: needs {needs}")
            devices.append((r["driver"], r["pool"], r["device"]))
            tols = r.get("tolerations") or []
            if not isinstance(tols, list):
                raise DraError(f"{where}.status.allocation.devices.results[{i}].tolerations: expected a list")
            if tols:
                tolerations[devices[-1]] = tuple(t for t in tols if isinstance(t, Mapping))
    return DraClaim(f"{namespace}/{name}", owner, tuple(devices), extended, tolerations)


class DraInventory:
    """DeviceClasses, ResourceSlices and ResourceClaims, indexed by node. Not thread-safe (callers lock).

    Every ``set_*``/``delete_*`` returns the nodes whose answers may have changed (None: possibly all).
    """

    def __init__(self) -> None:
        self.classes: dict[str, GpuClass] = {}
        self._slices: dict[str, DraSlice] = {}
        self._slices_by_node: dict[str, set[str]] = {}
        self._claims: dict[str, DraClaim] = {}
        #: pod uid -> keys of the claims it owns
        self._by_owner: dict[str, set[str]] = {}
        #: device -> the claim whose allocation holds it
        self._holder: dict[DeviceKey, str] = {}
        #: device -> node, for every device of a node-local slice
        self._node_of: dict[DeviceKey, str] = {}
        self._gpus: dict[str, DraNodeGpus | None] = {}
        self._rules: dict[str, DeviceTaintRule] = {}

    # --- writing ------------------------------------------------------------------------------------
    def set_class(self, obj: Mapping[str, Any]) -> set[str] | None:
        name = _name(obj, "DeviceClass")
        cls = decode_device_class(obj)
        if cls is None:
            return self.delete_class(name)
        if self.classes.get(name) == cls:
            return set()
        self.classes[name] = cls
        self._gpus.clear()
        return None

    def delete_class(self, name: str) -> set[str] | None:
        if self.classes.pop(name, None) is None:
            return set()
        self._gpus.clear()
        return None

    def set_rule(self, obj: Mapping[str, Any]) -> set[str] | None:
        """A DeviceTaintRule added or changed (``DraError`` naming a malformed field: the rule is dropped,
        a rule perfsched cannot read taints nothing)."""
        try:
            rule = decode_taint_rule(obj)
        except DraError:
            meta = obj.get("metadata")
            name = meta.get("name") if isinstance(meta, Mapping) else None
            if isinstance(name, str):
                self.delete_rule(name)
            raise
        if self._rules.get(rule.name) == rule:
            return set()
        old = self._rules.get(rule.name)
        self._rules[rule.name] = rule
        return self._rule_nodes(rule, old)

    def delete_rule(self, name: str) -> set[str] | None:
        old = self._rules.pop(name, None)
        return set() if old is None else self._rule_nodes(old, None)

    def _rule_nodes(self, rule: DeviceTaintRule, old: DeviceTaintRule | None) -> set[str]:
        """The nodes with devices ``rule`` or ``old`` select; their answers are dropped."""
        touched = {
            node
            for key, node in self._node_of.items()
            if rule.selects(key) or (old is not None and old.selects(key))
        }
        for node in touched:
            self._gpus.pop(node, None)
        return touched

    def set_slice(self, obj: Mapping[str, Any]) -> set[str]:
        new = decode_slice(obj)
        touched = self._drop_slice(new.name)
        self._slices[new.name] = new
        if new.node:
            self._slices_by_node.setdefault(new.node, set()).add(new.name)
            for d in new.devices:
                self._node_of[(new.driver, new.pool, d.name)] = new.node
            touched.add(new.node)
        for node in touched:
            self._gpus.pop(node, None)
        return touched

    def delete_slice(self, name: str) -> set[str]:
        touched = self._drop_slice(name)
        for node in touched:
            self._gpus.pop(node, None)
        return touched

    def _drop_slice(self, name: str) -> set[str]:
        old = self._slices.pop(name, None)
        if old is None or not old.node:
            return set()
        names = self._slices_by_node.get(old.node, set())
        names.discard(name)
        if not names:
            self._slices_by_node.pop(old.node, None)
        for d in old.devices:
            key = (old.driver, old.pool, d.name)
            if self._node_of.get(key) == old.node and not self._still_published(key):
                self._node_of.pop(key, None)
        return {old.node}

    def _still_published(self, key: DeviceKey) -> bool:
        driver, pool, device = key
        return any(
            s.driver == driver and s.pool == pool and any(d.name == device for d in s.devices)
            for s in self._slices.values()
        )

    def set_claim(self, obj: Mapping[str, Any]) -> set[str]:
        claim = decode_claim(obj)
        touched = self._drop_claim(claim.key)
        self._claims[claim.key] = claim
        if claim.owner_uid:
            self._by_owner.setdefault(claim.owner_uid, set()).add(claim.key)
        for key in claim.devices:
            self._holder[key] = claim.key
            node = self._node_of.get(key)
            if node:
                touched.add(node)
        return touched

    def delete_claim(self, key: str) -> set[str]:
        return self._drop_claim(key)

    def _drop_claim(self, key: str) -> set[str]:
        old = self._claims.pop(key, None)
        touched: set[str] = set()
        if old is None:
            return touched
        owned = self._by_owner.get(old.owner_uid)
        if owned is not None:
            owned.discard(key)
            if not owned:
                del self._by_owner[old.owner_uid]
        for dev in old.devices:
            if self._holder.get(dev) == key:
                del self._holder[dev]
            node = self._node_of.get(dev)
            if node:
                touched.add(node)
        return touched

    def replace(self, kind: str, items: Iterable[Mapping[str, Any]]) -> list[str]:
        """Replace everything of ``kind`` (``deviceclasses``, ``resourceslices``, ``resourceclaims``,
        ``devicetaintrules``); returns the problems of objects that did not decode (each skipped)."""
        problems: list[str] = []
        if kind == "deviceclasses":
            self.classes = {}
        elif kind == "resourceslices":
            self._slices, self._slices_by_node, self._node_of = {}, {}, {}
        elif kind == "devicetaintrules":
            self._rules = {}
        else:
            self._claims, self._holder, self._by_owner = {}, {}, {}
        self._gpus.clear()
        setters: dict[str, Callable[[Mapping[str, Any]], object]] = {
            "deviceclasses": self.set_class,
            "resourceslices": self.set_slice,
            "devicetaintrules": self.set_rule,
        }
        setter = setters.get(kind, self.set_claim)
        for obj in items:
            try:
                setter(obj)
            except DraError as exc:
                problems.append(str(exc))
        return problems

    # --- reading ------------------------------------------------------------------------------------
    @property
    def nodes(self) -> set[str]:
        """Nodes with node-local ResourceSlices."""
        return set(self._slices_by_node)

    def node_gpus(self, node: str) -> DraNodeGpus | None:
        """The node's DRA GPUs, or None when no GPU class selects any device of its slices."""
        if node in self._gpus:
            return self._gpus[node]
        answer = self._node_gpus(node)
        self._gpus[node] = answer
        return answer

    def _node_gpus(self, node: str) -> DraNodeGpus | None:
        if not self.classes:
            return None
        slices = [self._slices[n] for n in self._slices_by_node.get(node, ())]
        newest: dict[tuple[str, str], int] = {}
        for s in slices:
            newest[(s.driver, s.pool)] = max(newest.get((s.driver, s.pool), s.generation), s.generation)
        devices: list[tuple[DeviceKey, DraDevice]] = []
        for s in sorted(slices, key=lambda s: s.name):
            if s.generation != newest[(s.driver, s.pool)]:
                continue
            for d in s.devices:
                if any(c.selects(s.driver, d.attributes) for c in self.classes.values()):
                    devices.append(((s.driver, s.pool, d.name), d))
        if not devices:
            return None
        tainted: dict[DeviceKey, tuple[DeviceTaint, ...]] = {}
        for k, d in devices:
            ruled = tuple(r.taint for r in sorted(self._rules.values(), key=lambda r: r.name) if r.selects(k))
            all_taints = d.taints + tuple(t for t in ruled if t is not None)
            if all_taints:
                tainted[k] = all_taints
        healthy = frozenset(k for k, _ in devices if k not in tainted)
        taints = {k[2]: str(t[0]) for k, t in tainted.items()}

        def common(attribute: str) -> str:
            values = [d.attributes.get(attribute, "") for _, d in devices]
            present = [v for v in values if v]
            # the most frequent value; a node's GPUs are one product in practice
            return max(sorted(set(present)), key=present.count) if present else ""

        missing = tuple(a for a in REQUIRED_ATTRIBUTES if not common(a))
        memories = [d.memory_mib for _, d in devices if d.memory_mib > 0]
        return DraNodeGpus(
            node=node,
            devices=tuple(k for k, _ in devices),
            healthy=healthy,
            product=product_label(common(DRA_ATTR_PRODUCT)),
            memory_mib=min(memories) if memories else 0,
            compute_capability=common(DRA_ATTR_COMPUTE_CAPABILITY),
            architecture=common(DRA_ATTR_ARCHITECTURE),
            interconnect=common(LABEL_INTERCONNECT).lower(),
            missing=missing,
            taints=taints,
            device_taints=tainted,
        )

    def claims_on(self, node: str) -> dict[str, tuple[str, int]]:
        """The allocated claims holding GPU devices of ``node``: claim key -> (owning pod's uid or "", how
        many of the node's healthy GPU devices it holds)."""
        gpus = self.node_gpus(node)
        out: dict[str, tuple[str, int]] = {}
        if gpus is None:
            return out
        for key in gpus.devices:
            claim_key = self._holder.get(key)
            claim = self._claims.get(claim_key) if claim_key is not None else None
            if claim is None:
                continue
            owner, held = out.get(claim.key, (claim.owner_uid, 0))
            out[claim.key] = (owner, held + (key in gpus.healthy))
        return out

    def allocated(self, node: str) -> tuple[int, frozenset[str]]:
        """On ``node``: how many of its healthy GPU devices allocated claims hold, and the uids of the pods
        owning claims that hold any of its GPU devices (those pods' GPUs are counted by their claims)."""
        claims = self.claims_on(node).values()
        return sum(held for _, held in claims), frozenset(owner for owner, _ in claims if owner)

    def claimed_node(self, pod_uid: str) -> str:
        """The node whose devices the allocated claims of pod ``pod_uid`` hold ("" if none): where
        kube-scheduler placed the pod, known from PreBind on, before its Binding shows."""
        for key in sorted(self._by_owner.get(pod_uid, ())):
            claim = self._claims.get(key)
            for dev in claim.devices if claim is not None else ():
                node = self._node_of.get(dev)
                if node:
                    return node
        return ""

    def evicted(self, pod_uid: str) -> str:
        """Why pod ``pod_uid`` must leave its GPUs ("" if it need not): a device its allocated claims hold
        carries ``NoExecute`` taints (from the slice or a DeviceTaintRule) that the request the device was
        allocated for does not tolerate for good."""
        for claim_key in sorted(self._by_owner.get(pod_uid, ())):
            claim = self._claims.get(claim_key)
            for dev in claim.devices if claim is not None else ():
                node = self._node_of.get(dev)
                gpus = self.node_gpus(node) if node else None
                taints = gpus.device_taints.get(dev, ()) if gpus is not None else ()
                no_execute = [t for t in taints if t.effect == "NoExecute"]
                if no_execute and not tolerates_no_execute(
                    list(claim.tolerations.get(dev, ())) if claim is not None else [],
                    [(t.key, t.value) for t in no_execute],
                ):
                    named = ", ".join(str(t) for t in no_execute)
                    return f"its GPU device {'/'.join(dev)} on node {node} is tainted {named}"
        return ""

    def class_problems(self) -> list[str]:
        return [c.problem for c in self.classes.values() if c.problem]
