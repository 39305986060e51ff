"""Cluster specs: the YAML description of a GPU cluster, its validation, and its expansion into nodes.

A spec names node *pools*; each pool is ``nodes`` identical machines with ``gpus_per_node`` GPUs of
one ``gpu_product`` (the ``nvidia.com/gpu.product`` label value), grouped into NVLink domains and racks.
``load_cluster_spec`` reads and validates a file (or a shipped spec by name) and ``spec_to_nodes``
turns it into the core's ``Node`` tuple; ``node_labels`` gives the Kubernetes labels the e2e harness
puts on the KWOK nodes it creates from the same spec. The format is documented in
``docs/cluster-spec.md``. Reading files is the only I/O; the expansion functions are pure.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from scheduler.core.errors import ConfigError
from scheduler.core.queues import ANY_GPU_TYPE, DEFAULT_QUEUE, FairShare, QueueSpec, Quota
from scheduler.core.types import Interconnect, Node
from scheduler.names import (
    GPU_RESOURCE,
    LABEL_GPU_COUNT,
    LABEL_GPU_MEMORY,
    LABEL_GPU_PRODUCT,
    LABEL_INTERCONNECT,
    LABEL_NETWORK_GBPS,
    LABEL_NVLINK_DOMAIN,
    LABEL_RACK,
    LABEL_ZONE,
)

log = logging.getLogger(__name__)

_POOL_FIELDS = {
    "name",
    "gpu_product",
    "gpus_per_node",
    "nodes",
    "nvlink_domain_size",
    "racks",
    "nodes_per_rack",
    "zone",
    "network_gbps",
    "interconnect",
    "gpu_memory_mib",
}
_SPEC_FIELDS = {"name", "description", "pools", "queues"}
_QUEUE_FIELDS = {"name", "cohort", "weight", "fair_share", "quotas", "tenants"}
_QUOTA_FIELDS = {"gpu_type", "nominal", "borrowing_limit", "lending_limit"}


@dataclass(frozen=True, slots=True)
class PoolSpec:
    """One pool of identical GPU nodes (see ``docs/cluster-spec.md`` for every field)."""

    name: str
    gpu_product: str
    gpu_type: str
    gpus_per_node: int
    nodes: int
    nvlink_domain_size: int = 0
    racks: int = 1
    zone: str = ""
    network_gbps: float = 100.0
    interconnect: Interconnect = Interconnect.PCIE
    gpu_memory_mib: int = 0

    @property
    def gpus(self) -> int:
        return self.gpus_per_node * self.nodes


@dataclass(frozen=True, slots=True)
class ClusterSpec:
    """A validated cluster spec: a name and its pools (``source`` is where it was read from)."""

    name: str
    pools: tuple[PoolSpec, ...]
    description: str = ""
    source: str = ""
    #: tenant queues (empty: no quotas); ``tenants`` maps a trace's group or user to its queue
    queues: tuple[QueueSpec, ...] = ()
    tenants: Mapping[str, str] = field(default_factory=dict)

    def queue_for(self, group: str, user: str) -> str:
        """The queue of a trace job: its group's (Philly's virtual cluster), else its user's, else the
        queue named like its group, else ``default``."""
        names = {q.name for q in self.queues}
        return (
            self.tenants.get(group) or self.tenants.get(user) or (group if group in names else DEFAULT_QUEUE)
        )

    @property
    def total_gpus(self) -> int:
        return sum(p.gpus for p in self.pools)

    def gpu_types(self) -> tuple[str, ...]:
        return tuple(sorted({p.gpu_type for p in self.pools}))


def shipped_cluster_names() -> tuple[str, ...]:
    """Names of the cluster specs shipped inside the package (``scheduler/sim/data/clusters``)."""
    root = resources.files("scheduler.sim") / "data" / "clusters"
    return tuple(sorted(p.name[: -len(".yaml")] for p in root.iterdir() if p.name.endswith(".yaml")))


def _canonical(product: str) -> str | None:
    from perfmodel.gpus import canonical_gpu_type

    return canonical_gpu_type(product)


def _int_field(src: str, where: str, raw: dict[str, Any], key: str, default: int | None, low: int) -> int:
    value = raw.get(key, default)
    if value is None:
        raise ConfigError(f"{src}: {where}.{key}: required field is missing")
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{src}: {where}.{key}: must be an integer, got {value!r}")
    if value < low:
        raise ConfigError(f"{src}: {where}.{key}: must be >= {low}, got {value}")
    return int(value)


def _str_field(src: str, where: str, raw: dict[str, Any], key: str, default: str | None) -> str:
    value = raw.get(key, default)
    if value is None:
        raise ConfigError(f"{src}: {where}.{key}: required field is missing")
    if not isinstance(value, str):
        raise ConfigError(f"{src}: {where}.{key}: must be a string, got {value!r}")
    return value


def _no_unknown(src: str, where: str, raw: dict[str, Any], allowed: set[str]) -> None:
    """Refuse the first field of ``raw`` not in ``allowed``, naming it and the allowed ones."""
    unknown = sorted(set(raw) - allowed)
    if unknown:
        raise ConfigError(
            f"{src}: {where}.{unknown[0]}: unknown field (allowed: {', '.join(sorted(allowed))})"
        )


def _parse_pool(src: str, index: int, raw: Any) -> PoolSpec:
    where = f"pools[{index}]"
    if not isinstance(raw, dict):
        raise ConfigError(f"{src}: {where}: must be a mapping of pool fields, got {raw!r}")
    _no_unknown(src, where, raw, _POOL_FIELDS)
    name = _str_field(src, where, raw, "name", None)
    if not name or not name.replace("-", "").isalnum() or name != name.lower():
        raise ConfigError(f"{src}: {where}.name: must be lower-case letters, digits and '-', got {name!r}")
    product = _str_field(src, where, raw, "gpu_product", None)
    gpu_type = _canonical(product)
    if gpu_type is None:
        raise ConfigError(f"{src}: {where}.gpu_product: unknown GPU product label {product!r}")
    gpn = _int_field(src, where, raw, "gpus_per_node", None, 1)
    nodes = _int_field(src, where, raw, "nodes", None, 1)
    domain = _int_field(src, where, raw, "nvlink_domain_size", 0, 0)
    if domain and domain % gpn:
        raise ConfigError(
            f"{src}: {where}.nvlink_domain_size: must be 0 (PCIe only) or a multiple of gpus_per_node "
            f"({gpn}), got {domain}"
        )
    if "racks" in raw and "nodes_per_rack" in raw:
        raise ConfigError(f"{src}: {where}.nodes_per_rack: give either racks or nodes_per_rack, not both")
    if "nodes_per_rack" in raw:
        per_rack = _int_field(src, where, raw, "nodes_per_rack", None, 1)
        racks = -(-nodes // per_rack)
    else:
        racks = _int_field(src, where, raw, "racks", 1, 1)
        if racks > nodes:
            raise ConfigError(f"{src}: {where}.racks: {racks} racks for only {nodes} nodes")
    zone = _str_field(src, where, raw, "zone", "")
    gbps = raw.get("network_gbps", 100.0)
    if isinstance(gbps, bool) or not isinstance(gbps, int | float) or gbps <= 0:
        raise ConfigError(f"{src}: {where}.network_gbps: must be a positive number, got {gbps!r}")
    default_ic = Interconnect.NVLINK.value if domain else Interconnect.PCIE.value
    ic_raw = _str_field(src, where, raw, "interconnect", default_ic)
    try:
        interconnect = Interconnect(ic_raw)
    except ValueError:
        raise ConfigError(f"{src}: {where}.interconnect: must be nvlink or pcie, got {ic_raw!r}") from None
    if (interconnect is Interconnect.NVLINK) != bool(domain):
        raise ConfigError(
            f"{src}: {where}.interconnect: {ic_raw!r} contradicts nvlink_domain_size={domain} "
            "(0 means PCIe only; NVLink needs a domain size)"
        )
    memory = _int_field(src, where, raw, "gpu_memory_mib", 0, 0)
    return PoolSpec(
        name=name,
        gpu_product=product,
        gpu_type=gpu_type,
        gpus_per_node=gpn,
        nodes=nodes,
        nvlink_domain_size=domain,
        racks=racks,
        zone=zone,
        network_gbps=float(gbps),
        interconnect=interconnect,
        gpu_memory_mib=memory,
    )


def parse_cluster_spec(data: Any, source: str = "<spec>") -> ClusterSpec:
    """Validate a parsed YAML document as a cluster spec; errors name ``source`` and the field."""
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: a cluster spec must be a mapping with 'name' and 'pools'")
    unknown = sorted(set(data) - _SPEC_FIELDS)
    if unknown:
        raise ConfigError(
            f"{source}: {unknown[0]}: unknown field (allowed: {', '.join(sorted(_SPEC_FIELDS))})"
        )
    name = _str_field(source, "spec", data, "name", None)
    description = _str_field(source, "spec", data, "description", "")
    raw_pools = data.get("pools")
    if not isinstance(raw_pools, list) or not raw_pools:
        raise ConfigError(f"{source}: pools: must be a non-empty list of node pools")
    pools = tuple(_parse_pool(source, i, p) for i, p in enumerate(raw_pools))
    seen: set[str] = set()
    for i, pool in enumerate(pools):
        if pool.name in seen:
            raise ConfigError(f"{source}: pools[{i}].name: duplicate pool name {pool.name!r}")
        seen.add(pool.name)
    queues, tenants = _parse_queues(source, data.get("queues", []), {p.gpu_type for p in pools})
    return ClusterSpec(
        name=name, pools=pools, description=description, source=source, queues=queues, tenants=tenants
    )


def _opt_int(src: str, where: str, raw: dict[str, Any], key: str) -> int | None:
    return None if raw.get(key) is None else _int_field(src, where, raw, key, None, 0)


def _parse_queues(src: str, raw: Any, gpu_types: set[str]) -> tuple[tuple[QueueSpec, ...], dict[str, str]]:
    """The ``queues`` list of a spec (docs/cluster-spec.md): QueueSpecs and the tenant -> queue map."""
    if not isinstance(raw, list):
        raise ConfigError(f"{src}: queues: must be a list of queues")
    queues: list[QueueSpec] = []
    tenants: dict[str, str] = {}
    for i, q in enumerate(raw):
        where = f"queues[{i}]"
        if not isinstance(q, dict):
            raise ConfigError(f"{src}: {where}: must be a mapping of queue fields, got {q!r}")
        _no_unknown(src, where, q, _QUEUE_FIELDS)
        name = _str_field(src, where, q, "name", None)
        if name in {x.name for x in queues}:
            raise ConfigError(f"{src}: {where}.name: duplicate queue name {name!r}")
        weight = q.get("weight", 1.0)
        if isinstance(weight, bool) or not isinstance(weight, int | float) or weight <= 0:
            raise ConfigError(f"{src}: {where}.weight: must be a positive number, got {weight!r}")
        fair_raw = _str_field(src, where, q, "fair_share", FairShare.THROUGHPUT.value)
        try:
            fair = FairShare(fair_raw)
        except ValueError:
            raise ConfigError(
                f"{src}: {where}.fair_share: must be throughput or gpus, got {fair_raw!r}"
            ) from None
        raw_quotas = q.get("quotas", [])
        if not isinstance(raw_quotas, list):
            raise ConfigError(f"{src}: {where}.quotas: must be a list")
        quotas: list[Quota] = []
        for k, rq in enumerate(raw_quotas):
            qw = f"{where}.quotas[{k}]"
            if not isinstance(rq, dict):
                raise ConfigError(f"{src}: {qw}: must be a mapping, got {rq!r}")
            _no_unknown(src, qw, rq, _QUOTA_FIELDS)
            gpu_type = _str_field(src, qw, rq, "gpu_type", None)
            if gpu_type != ANY_GPU_TYPE and gpu_type not in gpu_types:
                raise ConfigError(
                    f"{src}: {qw}.gpu_type: no pool has GPU type {gpu_type!r} "
                    f"(types: {', '.join(sorted(gpu_types))}, or '*')"
                )
            quotas.append(
                Quota(
                    gpu_type,
                    _int_field(src, qw, rq, "nominal", 0, 0),
                    _opt_int(src, qw, rq, "borrowing_limit"),
                    _opt_int(src, qw, rq, "lending_limit"),
                )
            )
        try:
            queues.append(
                QueueSpec(name, tuple(quotas), _str_field(src, where, q, "cohort", ""), float(weight), fair)
            )
        except ConfigError as exc:
            raise ConfigError(f"{src}: {where}: {exc}") from None
        members = q.get("tenants", [])
        if not isinstance(members, list) or not all(isinstance(m, str) for m in members):
            raise ConfigError(f"{src}: {where}.tenants: must be a list of trace group or user names")
        for m in members:
            if m in tenants:
                raise ConfigError(f"{src}: {where}.tenants: {m!r} is already in queue {tenants[m]!r}")
            tenants[m] = name
    return tuple(queues), tenants


def load_cluster_spec(path_or_name: str | Path) -> ClusterSpec:
    """Read a cluster spec from a YAML file, or a shipped spec by name (e.g. ``gavel-heterogeneous``)."""
    text: str
    source = str(path_or_name)
    path = Path(path_or_name)
    if path.is_file():
        text = path.read_text(encoding="utf-8")
    elif str(path_or_name) in shipped_cluster_names():
        res = resources.files("scheduler.sim") / "data" / "clusters" / f"{path_or_name}.yaml"
        text = res.read_text(encoding="utf-8")
        source = f"{path_or_name} (shipped)"
    else:
        raise ConfigError(
            f"{source}: no such cluster spec file or shipped spec "
            f"(shipped: {', '.join(shipped_cluster_names())})"
        )
    import yaml  # here, not at the top: a homogeneous cluster (``--gpus N``) needs no YAML parser

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: not valid YAML: {exc}") from None
    return parse_cluster_spec(data, source)


def homogeneous_spec(
    gpus: int, gpu_product: str = "Tesla-V100-SXM2-16GB", gpus_per_node: int = 8
) -> ClusterSpec:
    """The spec behind ``--gpus N``: N GPUs of one type, ``gpus_per_node`` per node, one rack.

    N must be a multiple of ``gpus_per_node`` (a partial node is not a machine anyone buys).
    """
    if gpus < 1 or gpus % gpus_per_node:
        raise ConfigError(f"--gpus: must be a positive multiple of {gpus_per_node}, got {gpus}")
    gpu_type = _canonical(gpu_product)
    if gpu_type is None:
        raise ConfigError(f"--gpus: unknown GPU product label {gpu_product!r}")
    pool = PoolSpec(
        name="gpu",
        gpu_product=gpu_product,
        gpu_type=gpu_type,
        gpus_per_node=gpus_per_node,
        nodes=gpus // gpus_per_node,
        nvlink_domain_size=gpus_per_node,
        interconnect=Interconnect.NVLINK,
    )
    return ClusterSpec(name=f"homogeneous-{gpus}x{gpu_type}", pools=(pool,), source=f"--gpus {gpus}")


def _rack_of(pool: PoolSpec, i: int) -> str:
    # contiguous blocks: racks of ceil(nodes / racks) nodes, the last one possibly smaller
    per_rack = -(-pool.nodes // pool.racks)
    return f"{pool.name}-rack{i // per_rack}"


def _domain_of(pool: PoolSpec, i: int) -> str:
    if not pool.nvlink_domain_size:
        return ""
    nodes_per_domain = pool.nvlink_domain_size // pool.gpus_per_node
    return f"{pool.name}-nvl{i // nodes_per_domain}"


def spec_to_nodes(spec: ClusterSpec) -> tuple[Node, ...]:
    """Expand a spec into nodes named ``<pool>-<i>`` (i from 0), with rack, NVLink domain and zone."""
    nodes: list[Node] = []
    for pool in spec.pools:
        for i in range(pool.nodes):
            nodes.append(
                Node(
                    name=f"{pool.name}-{i}",
                    gpu_type=pool.gpu_type,
                    gpus=pool.gpus_per_node,
                    gpu_product=pool.gpu_product,
                    zone=pool.zone,
                    rack=_rack_of(pool, i),
                    nvlink_domain=_domain_of(pool, i),
                    interconnect=pool.interconnect,
                    network_gbps=pool.network_gbps,
                )
            )
    return tuple(nodes)


def node_labels(spec: ClusterSpec) -> dict[str, dict[str, str]]:
    """The Kubernetes labels (and GPU capacity) of every node of the spec, keyed by node name.

    The e2e harness puts these on the KWOK nodes it creates, so that ``scheduler.k8s`` reads back the
    same ``Node`` values ``spec_to_nodes`` returns. ``nvidia.com/gpu`` here is the capacity to set.
    """
    out: dict[str, dict[str, str]] = {}
    pools = {p.name: p for p in spec.pools}
    for node in spec_to_nodes(spec):
        pool = pools[node.name.rsplit("-", 1)[0]]
        labels = {
            LABEL_GPU_PRODUCT: pool.gpu_product,
            LABEL_GPU_COUNT: str(pool.gpus_per_node),
            LABEL_RACK: node.rack,
            LABEL_NETWORK_GBPS: f"{pool.network_gbps:g}",
            LABEL_INTERCONNECT: pool.interconnect.value,
            GPU_RESOURCE: str(pool.gpus_per_node),
        }
        if pool.gpu_memory_mib:
            labels[LABEL_GPU_MEMORY] = str(pool.gpu_memory_mib)
        if node.zone:
            labels[LABEL_ZONE] = node.zone
        if node.nvlink_domain:
            labels[LABEL_NVLINK_DOMAIN] = node.nvlink_domain
        out[node.name] = labels
    return out
