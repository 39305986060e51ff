"""Scheduling policies (pure), their registry by name, and policy spec strings.

``POLICIES`` maps a policy name to a factory taking the policy's config mapping; ``make_policy`` builds
one by name and raises ``ConfigError`` for an unknown name (listing the known ones) or a bad config
(naming the field). Each policy validates its own typed, frozen config at construction.

A **policy spec** names a policy and overrides fields of its config in one string, the same everywhere
a policy is chosen (``perfsched simulate --policy``, ``perfsched operator --policy``,
``PERFSCHED_OPERATOR_POLICY``, Helm's ``operator.policy``, ``perfsched demo --policy``)::

    NAME[:key=value[;key=value...]]      e.g.  las   las:heterogeneity=agnostic   fifo:backfill=true

Each value is read as a JSON literal when it is one (``true``/``false``, ``null``, numbers, a list
such as ``[1,10]``, a quoted string), a bracketed list that is not JSON item by item
(``type_order=[H100,A100]``: two bare strings), and as a bare string otherwise (``agnostic``); the
policy's typed config (``scheduler.policies.config.parse_config``) then checks the key and the value's
type. A list of specs (``--policy`` of ``perfsched simulate``) is separated by commas *outside* square
brackets, so a list value keeps its commas: ``las:thresholds_gpu_hours=[1,10],fifo``. Values cannot
contain ``;``. ``DEFAULT_POLICY_SPEC`` is the one default every entry point reads. Pure.
"""

from __future__ import annotations

import importlib
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from scheduler.core.errors import ConfigError
from scheduler.core.protocols import Policy

PolicyFactory = Callable[[Mapping[str, Any] | None], Policy]


def _factory(module: str, cls: str) -> PolicyFactory:
    """``scheduler.policies.<module>.<cls>.from_config``, the module imported when a policy is first
    built: a process that runs one policy (``perfsched simulate --policy srsf``) imports that one's
    module and what it uses, not every policy's."""

    def make(config: Mapping[str, Any] | None = None) -> Policy:
        policy: Policy = getattr(importlib.import_module(f"{__name__}.{module}"), cls).from_config(config)
        return policy

    return make


POLICIES: dict[str, PolicyFactory] = {
    "fifo": _factory("fifo", "FifoPolicy"),
    "las": _factory("las", "LasPolicy"),
    "srsf": _factory("srsf", "SrsfPolicy"),
    "ftf": _factory("ftf", "FtfPolicy"),
    "hetero": _factory("hetero", "HeteroPolicy"),
    "elastic": _factory("elastic", "ElasticPolicy"),
    "deadline": _factory("deadline", "DeadlinePolicy"),
}

#: The policy the operator, Helm chart (``operator.policy`` empty) and ``perfsched demo`` run when none is
#: given. Chosen from ``bench/decision_quality.py`` (docs/decision-quality.md; why:
#: docs/decisions/0010-las-default-policy.md); change it here.
DEFAULT_POLICY_SPEC = "las"

_NAME = re.compile(r"[a-z0-9][a-z0-9_-]*")
_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True, slots=True)
class PolicySpec:
    """A parsed policy spec: the policy's registry name and its config overrides, in the order given.

    ``text`` is the canonical spec string (whitespace around names, keys and values removed), the
    label simulations report the policy under.
    """

    name: str
    options: tuple[tuple[str, Any], ...] = ()
    text: str = ""

    @property
    def config(self) -> dict[str, Any]:
        return dict(self.options)


def _value(text: str) -> Any:
    """A spec value: a JSON literal when it parses as one; a bracketed list that is not JSON, its
    comma-separated items each read the same way (``[H100,A100]`` is two bare strings); else the bare
    string."""
    if text[:1] in '[{"' or text in ("true", "false", "null") or text[:1] in "-0123456789":
        try:
            return json.loads(text)
        except ValueError:
            pass
    if text[:1] == "[" and text[-1:] == "]" and "[" not in text[1:-1] and "]" not in text[1:-1]:
        inner = text[1:-1].strip()
        return [_value(item.strip()) for item in inner.split(",")] if inner else []
    return text


def parse_policy_spec(text: str) -> PolicySpec:
    """Parse one ``NAME[:key=value[;key=value...]]``; ``ConfigError`` naming the spec and what is wrong.

    Only the syntax and the policy name are checked here; keys and value types are checked by the
    policy's config when it is built (``make_policy_from_spec``).
    """
    where = f"policy spec {text!r}"
    name, sep, rest = text.strip().partition(":")
    name = name.strip()
    if not name:
        raise ConfigError(f"{where}: no policy name (expected NAME[:key=value;...])")
    if not _NAME.fullmatch(name) or name not in POLICIES:
        raise ConfigError(f"{where}: unknown policy {name!r}; known policies: {', '.join(sorted(POLICIES))}")
    options: list[tuple[str, Any]] = []
    canonical: list[str] = []
    if sep:
        pairs = [p.strip() for p in rest.split(";")]
        if not any(pairs):
            raise ConfigError(f"{where}: nothing after ':' (expected key=value;...)")
        seen: set[str] = set()
        for pair in pairs:
            if not pair:
                continue  # a trailing or doubled ';'
            key, eq, raw = pair.partition("=")
            key, raw = key.strip(), raw.strip()
            if not eq:
                raise ConfigError(f"{where}: {pair!r} is not key=value")
            if not _KEY.fullmatch(key):
                raise ConfigError(f"{where}: {key!r} is not a config key")
            if not raw:
                raise ConfigError(f"{where}: no value for key {key!r}")
            if key in seen:
                raise ConfigError(f"{where}: key {key!r} given twice")
            seen.add(key)
            options.append((key, _value(raw)))
            canonical.append(f"{key}={raw}")
    label = f"{name}:{';'.join(canonical)}" if canonical else name
    return PolicySpec(name=name, options=tuple(options), text=label)


def split_policy_specs(text: str) -> list[str]:
    """Split a comma-separated list of specs at the commas outside square brackets (empty items dropped)."""
    items: list[str] = []
    depth = 0
    start = 0
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth = max(0, depth - 1)
        elif ch == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    items.append(text[start:])
    return [s.strip() for s in items if s.strip()]


def parse_policy_specs(text: str) -> tuple[PolicySpec, ...]:
    """Parse a comma-separated list of specs (see the module docstring); duplicates are kept once."""
    out: dict[str, PolicySpec] = {}
    items = split_policy_specs(text)
    for i, item in enumerate(items):
        try:
            spec = parse_policy_spec(item)
        except ConfigError as exc:
            if i > 0 and "=" in items[i - 1] and ":" not in item and "=" not in item:
                # "las:thresholds_gpu_hours=1,10": the comma split a list value
                raise ConfigError(f"{exc} (a list value needs brackets: key=[a,b])") from None
            raise
        out.setdefault(spec.text, spec)
    if not out:
        raise ConfigError("no policy spec given (expected NAME[:key=value;...][,...])")
    return tuple(out.values())


def make_policy(name: str, config: Mapping[str, Any] | None = None) -> Policy:
    """The policy registered as ``name``, configured by ``config``; ``ConfigError`` if either is bad."""
    factory = POLICIES.get(name)
    if factory is None:
        raise ConfigError(f"unknown policy {name!r}; known policies: {', '.join(sorted(POLICIES))}")
    return factory(config)


def make_policy_from_spec(spec: str | PolicySpec, base: Mapping[str, Any] | None = None) -> Policy:
    """Build the policy a spec names; the spec's keys override ``base`` (e.g. a config file's fields).

    ``ConfigError`` names the spec and, through the policy's typed config, the key or value at fault.
    """
    parsed = parse_policy_spec(spec) if isinstance(spec, str) else spec
    config = {**dict(base or {}), **parsed.config}
    try:
        return make_policy(parsed.name, config)
    except ConfigError as exc:
        raise ConfigError(f"policy spec {parsed.text!r}: {exc}") from None


def check_single_spec(text: str) -> PolicySpec:
    """Parse a setting that holds exactly one spec (the operator's); a list is refused."""
    items = split_policy_specs(text)
    if len(items) > 1:
        raise ConfigError(f"policy spec {text.strip()!r}: give one policy spec, not a list")
    return parse_policy_spec(text)


__all__ = [
    "DEFAULT_POLICY_SPEC",
    "POLICIES",
    "PolicyFactory",
    "PolicySpec",
    "check_single_spec",
    "make_policy",
    "make_policy_from_spec",
    "parse_policy_spec",
    "parse_policy_specs",
    "split_policy_specs",
]
