"""The ``k8s.io/kube-scheduler/extender/v1`` wire types, and cheap parsers for the hot path.

Edge module (pydantic, no I/O). The Go types have no JSON tags, so keys are the PascalCase field names
and nil pointers, maps and slices travel as ``null``; the embedded Pod and Node objects use ordinary
camelCase API JSON. The pydantic models document the format (they feed the OpenAPI schema and the
golden tests) and validate the small bodies (bind, preempt); ``parse_extender_args`` checks a filter or
prioritize body's structure by hand instead, because validating thousands of full Node objects with
pydantic would cost more than the whole decision. Go decodes replies case-insensitively and
``TestCompatibility`` sends all-lowercase keys too, so the parsers accept either spelling.
Every parser raises ``WireError`` with a message naming the field; the app turns it into HTTP 400.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError


class WireError(ValueError):
    """A request body does not have the extender wire shape; the message names the field."""


class _Go(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)


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
    #: every name is ASCII with nothing JSON must escape (``plain_names``)
    plain: bool = False
    #: for ``NodeNames`` requests of plain names, a key naming the list exactly (the array's JSON text,
    #: or the names joined by ``","``); the extender memoises name lists by it. "" otherwise.
    names_key: bytes | str = ""


#: bytes JSON escapes inside a string: control characters, the quote and the backslash
_ESCAPED = bytes(range(0x20)) + b'"\\'


def plain_names(names: Sequence[str]) -> bool:
    """Whether the names (strings) are ASCII and hold nothing JSON escapes, so that they may be copied
    into a JSON string verbatim (DNS names always are)."""
    return _plain("".join(names))


def _plain(joined: str, quotes: int = 0) -> bool:
    """Whether ``joined`` is ASCII and holds no byte JSON escapes beyond ``quotes`` quotes (those of
    the separators the caller joined with)."""
    if not joined.isascii():
        return False
    raw = joined.encode()
    return len(raw) - len(raw.translate(None, _ESCAPED)) == quotes


class NameTexts:
    """The JSON texts of ``NodeNames`` arrays already checked (every name a string needing no escaping),
    so that the same array sent again is not checked again. Bounded; not thread-safe (one event loop).

    kube-scheduler sends ExtenderArgs as Go's encoder writes it, ``NodeNames`` last, and often the same
    candidate list for pod after pod. ``find`` recognises a body whose top-level object ends with
    ``"NodeNames":<a remembered text>`` by comparing in place (no scan, no hash over the text);
    ``remember`` stores the text of a body's array (``names_text``) once its names were checked.

    Sound for any body that parses as JSON: the key's quote follows ``{``, ``,`` or whitespace, so it
    opens a key (a quote inside a string is escaped; after a closing quote only ``,:]}`` may follow);
    the array it names is followed by one ``}`` and the end, so the key is the outermost object's, and
    the last of its kind (a JSON decoder keeps the last of duplicate keys).
    """

    def __init__(self, size: int = 16) -> None:
        self._size = size
        self._texts: list[bytes] = []  # most recent last; a list: texts are never hashed

    def find(self, raw: bytes) -> bytes | None:
        """The remembered text that is this body's top-level ``NodeNames`` array, or None."""
        if not self._texts:
            return None
        end = _end(raw)
        if end < 3 or raw[end - 1] != 0x7D:  # "}"
            return None
        texts = self._texts
        for i in range(len(texts) - 1, -1, -1):
            text = texts[i]
            start = end - 1 - len(text)
            field = start - len(_NAMES_FIELD) + 1
            if (
                field > 0
                and raw[field - 1] in _BEFORE_KEY
                and raw.startswith(_NAMES_FIELD, field)
                and raw.startswith(text, start)
            ):
                if i != len(texts) - 1:
                    texts.append(texts.pop(i))
                return text
        return None

    def remember(self, text: bytes) -> None:
        self._texts.append(text)
        if len(self._texts) > self._size:
            del self._texts[0]


_NAMES_FIELD = b'"NodeNames":['
_SPACE = b" \t\r\n"
_BEFORE_KEY = b",{ \t\r\n"


def _end(raw: bytes) -> int:
    """The length of ``raw`` without trailing JSON whitespace."""
    end = len(raw)
    while end and raw[end - 1] in _SPACE:
        end -= 1
    return end


def _names_span(raw: bytes) -> tuple[int, int] | None:
    """Where the top-level ``NodeNames`` array's text starts and ends in ``raw`` (see ``names_text``)."""
    end = _end(raw)
    if end < 3 or raw[end - 2 : end] != b"]}":
        return None
    start = raw.rfind(_NAMES_FIELD, 0, end)
    if start <= 0 or raw[start - 1] not in _BEFORE_KEY:
        return None
    return start + len(_NAMES_FIELD) - 1, end - 1


def names_text(raw: bytes) -> bytes | None:
    """The JSON text of the top-level ``NodeNames`` array when it is the object's last member, as in
    ``...,"NodeNames":[...]}`` (trailing whitespace allowed); None otherwise (see ``NameTexts``)."""
    span = _names_span(raw)
    return raw[span[0] : span[1]] if span is not None else None


def split_names(raw: bytes) -> tuple[bytes, bytes] | None:
    """For a body whose top-level object ends with its ``NodeNames`` array (``names_text``): the body
    with that array replaced by ``null``, and the array's text; None otherwise.

    The body is valid JSON exactly when the first part is and the second is a JSON value (a value may
    stand in for any other), and decodes to the first part's object with ``NodeNames`` set to the
    array. So a caller that finds the text to be a JSON array of names it knows, byte for byte, may
    decode only the first part (the pod: small) instead of thousands of names.
    """
    span = _names_span(raw)
    if span is None:
        return None
    start, end = span
    return raw[:start] + b"null" + raw[end:], raw[start:end]


def request_pod(body: object) -> dict[str, Any]:
    """The ``Pod`` of a decoded filter/prioritize body, checked as ``parse_extender_args`` checks it;
    raises ``WireError`` naming the field."""
    if not isinstance(body, dict):
        raise WireError(f"request body: expected a JSON object (ExtenderArgs), got {_kind(body)}")
    pod = _get(body, "Pod")
    if not isinstance(pod, dict):
        raise WireError(f"Pod: expected a Pod object, got {_kind(pod)}")
    meta = pod.get("metadata")
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) or not meta.get("name"):
        raise WireError("Pod.metadata.name: missing or not a string")
    return pod


def _get(body: dict[str, Any], key: str) -> Any:
    if key in body:
        return body[key]
    return body.get(key.lower())


def parse_extender_args(body: object, raw: bytes = b"", texts: NameTexts | None = None) -> ParsedArgs:
    """Check a decoded filter/prioritize body's structure cheaply; raise ``WireError`` naming the field.

    ``raw`` (the body's bytes) and ``texts`` let a ``NodeNames`` array sent before skip the per-name
    checks (see ``NameTexts``).
    """
    pod = request_pod(body)
    assert isinstance(body, dict)
    names_raw = _get(body, "NodeNames")
    nodes_raw = _get(body, "Nodes")
    if names_raw is not None:
        if not isinstance(names_raw, list):
            raise WireError(f"NodeNames: expected a list of node names, got {_kind(names_raw)}")
        seen = texts.find(raw) if raw and texts is not None and names_raw else None
        if seen is not None:
            return ParsedArgs(pod, names_raw, None, True, seen)
        try:
            joined = '","'.join(names_raw)  # C speed; refuses anything but strings
        except TypeError:
            for i, n in enumerate(names_raw):
                if not isinstance(n, str):
                    raise WireError(f"NodeNames[{i}]: expected a string, got {_kind(n)}") from None
            raise
        # the separators hold two quotes each; any other quote (or escape) is inside a name
        plain = _plain(joined, 2 * max(0, len(names_raw) - 1))
        if not plain or not names_raw:
            return ParsedArgs(pod, names_raw, None, plain, "")
        text = names_text(raw) if raw and texts is not None else None
        if text is not None and texts is not None and text == b'["' + joined.encode() + b'"]':
            texts.remember(text)
            return ParsedArgs(pod, names_raw, None, True, text)
        return ParsedArgs(pod, names_raw, None, True, joined)
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
        names.append(name)
    return ParsedArgs(pod, names, items, plain_names(names))


def parse_binding_args(body: object) -> ExtenderBindingArgs:
    if isinstance(body, dict):
        body = {k if k in _BIND_KEYS else _BIND_KEYS_LOWER.get(k.lower(), k): v for k, v in body.items()}
    try:
        return ExtenderBindingArgs.model_validate(body)
    except ValidationError as exc:
        raise WireError(f"ExtenderBindingArgs: {describe(exc)}") from None


def parse_preemption_args(body: object) -> ExtenderPreemptionArgs:
    try:
        return ExtenderPreemptionArgs.model_validate(body)
    except ValidationError as exc:
        raise WireError(f"ExtenderPreemptionArgs: {describe(exc)}") from None


_BIND_KEYS = frozenset(ExtenderBindingArgs.model_fields)
_BIND_KEYS_LOWER = {k.lower(): k for k in _BIND_KEYS}


def describe(exc: ValidationError) -> str:
    """A pydantic error as ``Field.path: message`` parts, at most three."""
    parts = []
    for err in exc.errors()[:3]:
        loc = ".".join(str(p) for p in err["loc"]) or "body"
        parts.append(f"{loc}: {err['msg']}")
    return "; ".join(parts)


def _kind(value: object) -> str:
    if value is None:
        return "null"
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}.get(
        type(value), type(value).__name__
    )
