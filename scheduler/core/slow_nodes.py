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

``moves_off_slow_nodes`` is the response (run by ``scheduler.core.round.run_round`` when it is given
``SlowNodeMoves``): a running gang with a replica on a flagged node of ratio ``r`` runs at ``r`` of its
pace elsewhere (a gang runs at the pace of its slowest node), so restarting it off the node saves
``remaining time x (1 - r)`` (its remaining time at the pace it makes now; scaled by the predictor's
ratio between the two placements when they differ in shape or GPU type). It is moved (a RESIZE that
restarts it from its checkpoint) when that gain exceeds ``margin`` times what the planner charges a
migration: ``restart_cost_s`` plus the work since its last checkpoint, at its pace. Only onto GPUs that
are free after the round, on nodes not flagged, of a type the job allows: nobody is preempted for it.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from scheduler.core.decisions import Action, ActionKind
from scheduler.core.errors import ConfigError
from scheduler.core.placement import FreeIndex, spread_of
from scheduler.core.protocols import MemoryOracle, ThroughputOracle
from scheduler.core.types import Allocation, ClusterSnapshot, Job, Node


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


@dataclass(frozen=True, slots=True)
class SlowNodeMoves:
    """What ``moves_off_slow_nodes`` needs from its caller: the slowdown ratio of each flagged node, the
    margin the predicted gain must clear (times the restart's cost), and the jobs already moved off a
    slow node within the evidence window (moved at most once per window)."""

    ratios: Mapping[str, float]
    margin: float = 2.0
    moved: frozenset[str] = field(default_factory=frozenset)

    def __post_init__(self) -> None:
        if not self.margin >= 1.0:
            raise ConfigError(f"slow-node move margin must be >= 1, got {self.margin}")
        for node, ratio in self.ratios.items():
            if not 0.0 < ratio < 1.0:
                raise ConfigError(f"slow node {node}: ratio must be in (0, 1), got {ratio}")


@dataclass(frozen=True, slots=True)
class _Candidate:
    index: int
    job: Job
    before: Allocation
    node: str
    ratio: float
    rate: float
    remaining_s: float
    cost_s: float


def moves_off_slow_nodes(
    snapshot: ClusterSnapshot,
    jobs: Sequence[Job],
    actions: Sequence[Action],
    moves: SlowNodeMoves,
    oracle: ThroughputOracle,
    *,
    restart_cost_s: float,
    min_resize_interval_s: float = 0.0,
) -> tuple[tuple[Action, ...], tuple[str, ...]]:
    """The round's ``actions`` with the KEEP of each running gang on a flagged node that pays its restart
    replaced by a RESIZE off the node (see the module docstring), and the jobs so moved.

    A candidate is kept by the round (KEEP), runs (a measured throughput), is preemptible, was not
    changed within ``min_resize_interval_s`` and was not moved off a slow node in this window. The
    largest gains go first; each move takes its GPUs, so two never count the same free ones."""
    if not moves.ratios:
        return tuple(actions), ()
    by_name = {j.name: j for j in jobs}
    candidates: list[_Candidate] = []
    for i, a in enumerate(actions):
        job = by_name.get(a.job)
        if a.kind is not ActionKind.KEEP or a.before is None or job is None:
            continue
        slow = [(moves.ratios[n], n) for n in a.before.nodes if n in moves.ratios]
        rate = job.observed_throughput
        if not slow or not rate or rate <= 0 or job.name in moves.moved or not job.preemptible:
            continue
        changed = job.last_change_time
        if (
            min_resize_interval_s > 0
            and changed is not None
            and snapshot.now - changed < min_resize_interval_s
        ):
            continue
        remaining_s = job.remaining_work / rate
        lost_s = max(0.0, job.progress - job.checkpoint_progress) / rate
        ratio, node = min(slow)
        candidates.append(
            _Candidate(i, job, a.before, node, ratio, rate, remaining_s, restart_cost_s + lost_s)
        )
    if not candidates:
        return tuple(actions), ()

    final = dict(snapshot.allocations)
    for a in actions:
        if a.after is None:
            final.pop(a.job, None)
        else:
            final[a.job] = a.after
    used: dict[str, int] = {}
    for alloc in final.values():
        for n, r in alloc.replicas_per_node:
            used[n] = used.get(n, 0) + r * alloc.gpus_per_replica
    free = {
        n.name: 0 if n.name in moves.ratios else max(0, n.capacity_for_jobs - used.get(n.name, 0))
        for n in snapshot.nodes
    }
    index = FreeIndex(snapshot.nodes, free)
    node_map = snapshot.node_map()
    memory = oracle if isinstance(oracle, MemoryOracle) else None
    out = list(actions)
    moved: list[str] = []
    # the largest upper bound on the gain first (the same shape elsewhere: remaining x (1 - r))
    for c in sorted(candidates, key=lambda c: (-c.remaining_s * (1.0 - c.ratio), c.job.name)):
        best = _best_target(c, index, node_map, oracle, memory)
        if best is None:
            continue
        target, gain = best
        if not gain > moves.margin * c.cost_s:
            continue
        index.commit(target)
        moved.append(c.job.name)
        out[c.index] = Action(
            ActionKind.RESIZE,
            c.job.name,
            c.before,
            target,
            f"slow node {c.node} runs at {c.ratio:.2f}x its peers: restarting elsewhere saves a predicted "
            f"{gain:.0f} s of the {c.remaining_s:.0f} s left, more than {moves.margin:g} x the restart's "
            f"{c.cost_s:.0f} s",
            lost_work=max(0.0, c.job.progress - c.job.checkpoint_progress),
            cost_seconds=restart_cost_s,
        )
    return tuple(out), tuple(moved)


def _best_target(
    c: _Candidate,
    index: FreeIndex,
    node_map: Mapping[str, Node],
    oracle: ThroughputOracle,
    memory: MemoryOracle | None,
) -> tuple[Allocation, float] | None:
    """The free placement off the slow nodes (same replicas, an allowed type) where the gang saves the
    most time, with that time; None when none has room."""
    job, before = c.job, c.before
    targets: list[Allocation] = []
    for gpu_type in index.gpu_types():
        if not job.allows(gpu_type):
            continue
        placed = index.place(
            replicas=before.replicas,
            gpus_per_replica=before.gpus_per_replica,
            gpu_type=gpu_type,
            job=job.name,
        )
        if isinstance(placed, Allocation):
            targets.append(placed)
    if not targets:
        return None
    shapes = [(job, spread_of(before, node_map)), *((job, spread_of(t, node_map)) for t in targets)]
    predicted = oracle.throughput(shapes)
    fits = memory.memory_fit(shapes[1:]) if memory is not None else [None] * len(targets)
    here = predicted[0]
    best: tuple[Allocation, float] | None = None
    for target, there, fit in zip(targets, predicted[1:], fits, strict=True):
        if there <= 0 or here <= 0 or (fit is not None and not fit.fits):
            continue
        # its pace off the slow node: what it makes now over r, times the predictor's ratio of the shapes
        pace = c.rate / c.ratio * there / here
        gain = c.remaining_s - c.job.remaining_work / pace
        if best is None or gain > best[1]:
            best = (target, gain)
    return best
