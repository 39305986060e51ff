"""Scheduling policies (pure) and their registry by name.

``POLICIES`` maps a policy name to a factory taking the policy's config mapping; ``make_policy`` builds
one by name and raises ``ConfigError`` for an unknown name (listing the known ones) or a bad config
(naming the field). Each policy validates its own typed, frozen config at construction.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from scheduler.core.errors import ConfigError
from scheduler.core.protocols import Policy
from scheduler.policies.deadline import DeadlinePolicy
from scheduler.policies.elastic import ElasticPolicy
from scheduler.policies.fifo import FifoPolicy
from scheduler.policies.ftf import FtfPolicy
from scheduler.policies.hetero import HeteroPolicy
from scheduler.policies.las import LasPolicy
from scheduler.policies.srsf import SrsfPolicy

PolicyFactory = Callable[[Mapping[str, Any] | None], Policy]

POLICIES: dict[str, PolicyFactory] = {
    "fifo": FifoPolicy.from_config,
    "las": LasPolicy.from_config,
    "srsf": SrsfPolicy.from_config,
    "ftf": FtfPolicy.from_config,
    "hetero": HeteroPolicy.from_config,
    "elastic": ElasticPolicy.from_config,
    "deadline": DeadlinePolicy.from_config,
}


def make_policy(name: str, config: Mapping[str, Any] | None = None) -> Policy:
    """The policy registered as ``name``, configured by ``config``; ``ConfigError`` if either is bad."""
    factory = POLICIES.get(name)
    if factory is None:
        raise ConfigError(f"unknown policy {name!r}; known policies: {', '.join(sorted(POLICIES))}")
    return factory(config)


__all__ = ["POLICIES", "PolicyFactory", "make_policy"]
