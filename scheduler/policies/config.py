"""Typed policy configs: ``parse_config`` builds a policy's frozen config dataclass from a mapping.

Pure. Each field is checked against its annotation (bool, int, float, str, ``Literal`` choices, tuples,
optionals) and any error names the policy and the field; value checks live in the dataclass's
``__post_init__`` (``require``) and raise ``ConfigError`` too.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any, Literal, TypeVar, get_args, get_origin

from scheduler.core.errors import ConfigError

C = TypeVar("C")

#: how an ordering policy picks each job's GPU type: ``aware`` from the throughput matrix
#: (``scheduler.policies.type_planner``), ``ordered`` in a fixed preference order, newest generation
#: first unless ``type_order`` gives the admin's own (``scheduler.policies.ordered``), ``agnostic`` by
#: free GPUs only
Heterogeneity = Literal["aware", "ordered", "agnostic"]
HETEROGENEITY_CHOICES: tuple[str, ...] = ("aware", "ordered", "agnostic")


def _coerce(policy: str, name: str, hint: Any, value: Any) -> Any:
    where = f"policy {policy!r} config field {name!r}"
    origin = get_origin(hint)
    if origin is typing.Union or origin is types.UnionType:
        args = get_args(hint)
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return _coerce(policy, name, inner[0], value)
    if origin is Literal:
        choices = get_args(hint)
        if value not in choices:
            raise ConfigError(f"{where}: must be one of {', '.join(map(repr, choices))}, got {value!r}")
        return value
    if origin is tuple:
        (item, *_rest) = get_args(hint)
        if isinstance(value, str) or not isinstance(value, Sequence):
            raise ConfigError(f"{where}: must be a list, got {value!r}")
        return tuple(_coerce(policy, f"{name}[{i}]", item, v) for i, v in enumerate(value))
    if hint is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: must be true or false, got {value!r}")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where}: must be an integer, got {value!r}")
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{where}: must be a number, got {value!r}")
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where}: must be a string, got {value!r}")
        return value
    return value


def parse_config(cls: type[C], policy: str, config: Mapping[str, Any] | None) -> C:
    """Build the frozen dataclass ``cls`` from a mapping, checking names and types field by field.

    Value checks live in the dataclass's ``__post_init__`` and raise ``ConfigError`` too.
    """
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls!r} is not a dataclass")
    config = dict(config or {})
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(config) - set(fields))
    if unknown:
        raise ConfigError(
            f"policy {policy!r}: unknown config field {unknown[0]!r}; "
            f"known fields: {', '.join(sorted(fields))}"
        )
    hints = typing.get_type_hints(cls)
    kwargs = {k: _coerce(policy, k, hints[k], v) for k, v in config.items()}
    try:
        return cls(**kwargs)
    except ConfigError as exc:
        raise ConfigError(f"policy {policy!r}: {exc}") from None


def require(cond: bool, field: str, message: str) -> None:
    """Raise ``ConfigError`` naming ``field`` unless ``cond``."""
    if not cond:
        raise ConfigError(f"config field {field!r}: {message}")
