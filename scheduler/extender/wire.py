"""The ``k8s.io/kube-scheduler/extender/v1`` wire types, and cheap parsers for the hot path.

Edge module (pydantic, no I/O). The Go types have no JSON tags, so keys are the PascalCase field names
and nil pointers, maps and slices travel as ``null``; the embedded Pod and Node objects use ordinary
camelCase API JSON. The pydantic models document the format (they feed the OpenAPI schema and the
golden tests) and validate the small bodies (bind, preempt); ``parse_extender_args`` checks a filter or
prioritize body's structure by hand instead, because validating thousands of full Node objects with
pydantic would cost more than the whole decision. Go decodes replies case-insensitively and
``TestCompatibility`` sends all-lowercase keys too, so the parsers accept either spelling.
Every parser raises ``WireError`` (a ``ConfigError``) with a message naming the field; the app turns it
into HTTP 400.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from scheduler.core.errors import ConfigError


class WireError(ConfigError):
    """A malformed request (HTTP ``status``: 400, or 413 over the size limit); the message names the field."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


class _Go(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)


_M = TypeVar("_M", bound=_Go)


class NodeList(_Go):
    """``v1.NodeList``: ``{"metadata": {}, "items": [Node, ...]}``."""

    metadata: dict[str, Any] = Field(default_factory=dict)
    items: list[dict[str, Any]] = Field(default_factory=list)


class ExtenderArgs(_Go):
    """Filter and prioritize request. ``Nodes`` is null when nodeCacheCapable, ``NodeNames`` otherwise."""

    Pod: dict[str, Any]
    Nodes: NodeList | None = None
    NodeNames: list[str] | None = None


class ExtenderFilterResult(_Go):
    """Filter reply: the nodes that pass (same form as the request), and the failed ones with reasons."""

    Nodes: NodeList | None = None
    NodeNames: list[str] | None = None
    FailedNodes: dict[str, str] | None = None
    FailedAndUnresolvableNodes: dict[str, str] | None = None
    Error: str = ""


class HostPriority(_Go):
    """One entry of the prioritize reply (``HostPriorityList`` is a JSON array of these); Score 0..10."""

    Host: str
    Score: int = Field(ge=0, le=10)


class ExtenderBindingArgs(_Go):
    PodName: str = Field(min_length=1)
    PodNamespace: str = Field(min_length=1)
    PodUID: str = ""
    Node: str = Field(min_length=1)


class ExtenderBindingResult(_Go):
    Error: str = ""


class MetaPod(_Go):
    UID: str


class MetaVictims(_Go):
    Pods: list[MetaPod] | None = None
    NumPDBViolations: int = 0


class Victims(_Go):
    Pods: list[dict[str, Any]] | None = None
    NumPDBViolations: int = 0


class ExtenderPreemptionArgs(_Go):
    Pod: dict[str, Any]
    NodeNameToVictims: dict[str, Victims] | None = None
    NodeNameToMetaVictims: dict[str, MetaVictims] | None = None


class ExtenderPreemptionResult(_Go):
    NodeNameToMetaVictims: dict[str, MetaVictims] | None = None


@dataclass(frozen=True, slots=True)
class ParsedArgs:
    """A filter/prioritize request after the structural check.

    ``names`` are the candidate node names in request order; ``node_objects`` holds the full Node
    objects when kube-scheduler sent them (nodeCacheCapable false) and is None otherwise.
    """

    pod: dict[str, Any]
    names: list[str]
    node_objects: list[dict[str, Any]] | None


#: Kubernetes' limits on what a request names (``k8s.io/apimachinery`` validation): object names are
#: DNS-1123 subdomains (<= 253 characters), namespaces DNS-1123 labels (<= 63), UIDs at most 128 here
MAX_NAME = 253
MAX_NAMESPACE = 63
MAX_UID = 128
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_UID = re.compile(r"[\x21-\x7e]*")  # printable ASCII, no spaces
#: the most a log line or a reply quotes from a request
QUOTE_LIMIT = 256


def quote(value: object, limit: int = QUOTE_LIMIT) -> str:
    """``repr(value)`` cut to ``limit`` characters, saying how much was left out."""
    text = value if isinstance(value, str) else repr(value)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text) - limit} more characters)"


def check_name(field: str, value: str, kind: str = "name") -> str:
    """``value`` when it is a valid Kubernetes object name (``kind`` "name"), namespace or UID; else
    raise ``WireError`` naming ``field`` and the limit."""
    limit, pattern, what = {
        "name": (MAX_NAME, _SUBDOMAIN, "a DNS-1123 subdomain (lower-case letters, digits, '-', '.')"),
        "namespace": (MAX_NAMESPACE, _LABEL, "a DNS-1123 label (lower-case letters, digits, '-')"),
        "uid": (MAX_UID, _UID, "printable ASCII without spaces"),
    }[kind]
    if len(value) > limit:
        raise WireError(f"{field}: {len(value)} characters, over Kubernetes' limit of {limit}")
    if pattern.fullmatch(value) is None:
        raise WireError(f"{field}: {quote(value, 64)} is not {what}")
    return value


def request_pod(body: object) -> dict[str, Any]:
    """The ``Pod`` of a decoded filter/prioritize/preempt body, its name, namespace and UID checked;
    raises ``WireError`` naming the field."""
    if not isinstance(body, dict):
        raise WireError(f"request body: expected a JSON object (ExtenderArgs), got {_kind(body)}")
    pod = _get(body, "Pod")
    if not isinstance(pod, dict):
        raise WireError(f"Pod: expected a Pod object, got {_kind(pod)}")
    meta = pod.get("metadata")
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) or not meta.get("name"):
        raise WireError("Pod.metadata.name: missing or not a string")
    check_name("Pod.metadata.name", meta["name"])
    for key, kind in (("namespace", "namespace"), ("uid", "uid")):
        value = meta.get(key)
        if value is not None and value != "":
            if not isinstance(value, str):
                raise WireError(f"Pod.metadata.{key}: expected a string, got {_kind(value)}")
            check_name(f"Pod.metadata.{key}", value, kind)
    return pod


def _get(body: dict[str, Any], key: str) -> Any:
    if key in body:
        return body[key]
    return body.get(key.lower())


def parse_extender_args(body: object) -> ParsedArgs:
    """Check a decoded filter/prioritize body's structure cheaply; raise ``WireError`` naming the field.

    Node names are checked for type and length only (a name the cache does not know is answered as
    such, quoted at most ``MAX_NAME`` characters long).
    """
    pod = request_pod(body)
    assert isinstance(body, dict)
    names_raw = _get(body, "NodeNames")
    nodes_raw = _get(body, "Nodes")
    if names_raw is not None:
        if not isinstance(names_raw, list):
            raise WireError(f"NodeNames: expected a list of node names, got {_kind(names_raw)}")
        try:
            "".join(names_raw)  # C speed; refuses anything but strings
        except TypeError:
            i = next(i for i, n in enumerate(names_raw) if not isinstance(n, str))
            raise WireError(f"NodeNames[{i}]: expected a string, got {_kind(names_raw[i])}") from None
        longest = max(map(len, names_raw), default=0)
        if longest > MAX_NAME:
            i = next(i for i, n in enumerate(names_raw) if len(n) > MAX_NAME)
            raise WireError(f"NodeNames[{i}]: {longest} characters, over Kubernetes' limit of {MAX_NAME}")
        return ParsedArgs(pod, names_raw, None)
    if nodes_raw is None:
        raise WireError("Nodes and NodeNames are both null: one of them must list the candidate nodes")
    if not isinstance(nodes_raw, dict):
        raise WireError(f"Nodes: expected a NodeList object, got {_kind(nodes_raw)}")
    items = nodes_raw.get("items")
    if items is None:
        items = []
    if not isinstance(items, list):
        raise WireError(f"Nodes.items: expected a list, got {_kind(items)}")
    names: list[str] = []
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise WireError(f"Nodes.items[{i}]: expected a Node object, got {_kind(item)}")
        m = item.get("metadata")
        name = m.get("name") if isinstance(m, dict) else None
        if not isinstance(name, str) or not name:
            raise WireError(f"Nodes.items[{i}].metadata.name: missing or not a string")
        names.append(check_name(f"Nodes.items[{i}].metadata.name", name))
    return ParsedArgs(pod, names, items)


def parse_binding_args(body: object) -> ExtenderBindingArgs:
    """A bind body, its names checked against Kubernetes' limits; raises ``WireError`` naming the field."""
    if isinstance(body, dict):
        body = {k if k in _BIND_KEYS else _BIND_KEYS_LOWER.get(k.lower(), k): v for k, v in body.items()}
    args = _validate(ExtenderBindingArgs, body)
    check_name("PodName", args.PodName)
    check_name("PodNamespace", args.PodNamespace, "namespace")
    check_name("PodUID", args.PodUID, "uid")
    check_name("Node", args.Node)
    return args


def parse_preemption_args(body: object) -> ExtenderPreemptionArgs:
    """A preempt body (its pod checked as ``request_pod`` does); raises ``WireError`` naming the field."""
    args = _validate(ExtenderPreemptionArgs, body)
    request_pod({"Pod": args.Pod})
    return args


_BIND_KEYS = frozenset(ExtenderBindingArgs.model_fields)
_BIND_KEYS_LOWER = {k.lower(): k for k in _BIND_KEYS}


def _validate(model: type[_M], body: object) -> _M:
    """``body`` as ``model``; else ``WireError`` naming the model and up to three ``Field.path: message``."""
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        parts = [f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}" for e in exc.errors()[:3]]
        raise WireError(f"{model.__name__}: {'; '.join(parts)}") from None


def _kind(value: object) -> str:
    if value is None:
        return "null"
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}.get(
        type(value), type(value).__name__
    )
