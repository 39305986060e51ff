"""Every Prometheus metric perfsched exports, documented, in one place (prefix ``perfsched_``).

Shells import the metric objects from here; pure layers never do. Units are in the names
(``_seconds``, ``_total``, ``_ratio``). ``docs/metrics.md`` is the user-facing reference of this file.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry

#: The registry every perfsched metric is registered on (also served by ``/metrics``).
REGISTRY = CollectorRegistry(auto_describe=True)
