"""Former name of ``scheduler.policies.elastic_shares`` (the elastic-share helpers), kept only as an alias.

Pure; holds no code. ``scheduler.policies.hetaware`` still imports from here (its owner is changing it
in parallel); once it imports ``scheduler.policies.elastic_shares``, delete this module.
"""

from __future__ import annotations

from scheduler.policies.elastic_shares import (
    Share,
    ThroughputTable,
    grow_by_marginal_gain,
    shrink_for,
    size_bounds,
    used_by_type,
)

__all__ = ["Share", "ThroughputTable", "grow_by_marginal_gain", "shrink_for", "size_bounds", "used_by_type"]
