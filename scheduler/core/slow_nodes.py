"""Slow-node detection from the predictor's residuals: a node where jobs run slower than predicted *and*
slower than the same jobs on peer nodes of the same GPU type.

Pure (no I/O, no clock: times are passed in). perfsched knows what each job *should* achieve on each node,
so a node that throttles (heat, a bad NVLink, a degraded NIC) shows as a residual (observed / predicted
throughput) below that of the same model on its peers. A model the predictor gets wrong is wrong on every
node alike, so comparing the same model across nodes cancels the predictor's error; comparing several
models guards against one job that is slow for its own reasons.

``node_slowdown`` reads the samples of one evidence window (``SlowNodeConfig.window_s``): one per progress
report of a running gang that lies on one node (a gang spread over several nodes runs at the pace of its
slowest one and cannot say which). For each node and model: the median residual on the node over the
median residual of the same model on the other nodes of the type. The node's slowdown ratio is the median
of those per-model ratios; it is *flagged* when the ratio is below ``threshold`` for at least
``min_models`` models with peer samples, with at least ``min_samples`` samples on the node spanning at least
``confirm_s`` (one bad minute is not a slow node).
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from scheduler.core.errors import ConfigError


@dataclass(frozen=True, slots=True)
class GangSample:
    """One progress report of a running gang on a single node: observed / predicted throughput."""

    time: float
    node: str
    gpu_type: str
    model: str
    residual: float


@dataclass(frozen=True, slots=True)
class SlowNodeConfig:
    """Detection settings (see the module docstring); validated at construction."""

    threshold: float = 0.75
    min_models: int = 2
    #: the share of the node's models (with peer samples) that must be below the threshold
    min_share: float = 0.6
    min_samples: int = 6
    window_s: float = 3600.0
    confirm_s: float = 600.0

    def __post_init__(self) -> None:
        if not 0.0 < self.threshold < 1.0:
            raise ConfigError(f"slow-node threshold must be in (0, 1), got {self.threshold}")
        if not 0.0 < self.min_share <= 1.0:
            raise ConfigError(f"slow-node min_share must be in (0, 1], got {self.min_share}")
        if self.min_models < 1 or self.min_samples < 1:
            raise ConfigError("slow-node min_models and min_samples must be >= 1")
        if self.window_s <= 0 or not 0 <= self.confirm_s <= self.window_s:
            raise ConfigError("slow-node window_s must be > 0 and confirm_s in [0, window_s]")


@dataclass(frozen=True, slots=True)
class NodeSlowdown:
    """A node's slowdown ratio (1.0: as fast as its peers), the models it rests on, and the verdict."""

    node: str
    gpu_type: str
    ratio: float
    models: int
    samples: int
    flagged: bool


def node_slowdown(
    samples: Iterable[GangSample], *, now: float, config: SlowNodeConfig | None = None
) -> dict[str, NodeSlowdown]:
    """The slowdown of every node with samples that have peers to compare with (see the module docstring)."""
    config = config or SlowNodeConfig()
    recent = [s for s in samples if now - config.window_s <= s.time <= now and s.residual > 0]
    # (gpu type, model) -> node -> residuals
    by_model: dict[tuple[str, str], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    times: dict[str, list[float]] = defaultdict(list)
    types: dict[str, str] = {}
    for s in recent:
        by_model[(s.gpu_type, s.model)][s.node].append(s.residual)
        times[s.node].append(s.time)
        types[s.node] = s.gpu_type
    out: dict[str, NodeSlowdown] = {}
    for node, gpu_type in sorted(types.items()):
        ratios: list[float] = []
        for (t, _model), per_node in by_model.items():
            if t != gpu_type or node not in per_node:
                continue
            peers = [r for other, rs in per_node.items() if other != node for r in rs]
            if not peers:
                continue
            ratios.append(statistics.median(per_node[node]) / statistics.median(peers))
        if not ratios:
            continue
        ratio = statistics.median(ratios)
        when = times[node]
        slow_models = sum(1 for r in ratios if r < config.threshold)
        flagged = (
            ratio < config.threshold
            and slow_models >= max(config.min_models, math.ceil(config.min_share * len(ratios)))
            and len(when) >= config.min_samples
            and max(when) - min(when) >= config.confirm_s
        )
        out[node] = NodeSlowdown(node, gpu_type, ratio, len(ratios), len(when), flagged)
    return out


def single_node(replicas_per_node: Sequence[tuple[str, int]] | Mapping[str, int]) -> str | None:
    """The node a gang runs on when it runs on one node only (else None: its pace names no node)."""
    nodes = list(
        replicas_per_node.keys() if isinstance(replicas_per_node, Mapping) else dict(replicas_per_node)
    )
    return nodes[0] if len(nodes) == 1 else None
