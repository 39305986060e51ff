"""Shared machinery of the policies: typed config parsing, batched oracle look-ups, greedy gang allocation.

Pure. Every policy ranks jobs its own way and then hands an ordered list of ``Request``s to
``greedy_allocate``, which walks them in order and places each gang with the core's ``FreeIndex``
(the same placement the extender uses). Running jobs whose allocation still matches their request keep
it untouched (no migration); preemptive policies may evict running jobs ranked behind the requester.
Configs are frozen dataclasses built by ``parse_config``, which names the policy and field of any error.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple, TypeVar, get_args, get_origin

from scheduler.core.decisions import Decision, Unschedulable
from scheduler.core.errors import ConfigError
from scheduler.core.placement import FreeIndex, compact_shape
from scheduler.core.protocols import MemoryOracle, ThroughputOracle
from scheduler.core.types import Allocation, ClusterSnapshot, Interconnect, Job, PlacementShape

C = TypeVar("C")

#: how an ordering policy picks each job's GPU type: ``aware`` from the throughput matrix
#: (``scheduler.policies.hetaware``), ``agnostic`` by free GPUs only (the same-run baseline)
Heterogeneity = Literal["aware", "agnostic"]
HETEROGENEITY_CHOICES: tuple[str, ...] = ("aware", "agnostic")


# ------------------------------------------------------------------------------------------ config
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


# ------------------------------------------------------------------------------------------ shapes
@dataclass(frozen=True, slots=True)
class TypeInfo:
    """What a policy assumes about the nodes of one GPU type before placing (for oracle questions)."""

    gpu_type: str
    node_gpus: int
    interconnect: Interconnect
    network_gbps: float
    capacity: int

    def shape(self, num_gpus: int) -> PlacementShape:
        """The compact shape of ``num_gpus`` GPUs of this type: as few nodes as possible."""
        return compact_shape(self.gpu_type, num_gpus, self.node_gpus, self.interconnect, self.network_gbps)


def type_infos(snapshot: ClusterSnapshot) -> dict[str, TypeInfo]:
    """One ``TypeInfo`` per GPU type with schedulable capacity, keyed by type."""
    acc: dict[str, list[Any]] = {}
    for n in snapshot.nodes:
        cap = n.capacity_for_jobs
        if cap <= 0:
            continue
        a = acc.setdefault(n.gpu_type, [0, 0, 0, n.network_gbps, 0])
        a[0] = max(a[0], cap)
        a[1] += 1 if n.interconnect is Interconnect.NVLINK else 0
        a[2] += 1
        a[3] = min(a[3], n.network_gbps)
        a[4] += cap
    return {
        t: TypeInfo(t, a[0], Interconnect.NVLINK if a[1] * 2 >= a[2] else Interconnect.PCIE, a[3], a[4])
        for t, a in sorted(acc.items())
    }


def batch_throughput(oracle: ThroughputOracle, queries: Sequence[tuple[Job, PlacementShape]]) -> list[float]:
    """One batched oracle call; checks that the oracle answered every question."""
    if not queries:
        return []
    out = oracle.throughput(queries)
    if len(out) != len(queries):
        raise ValueError(f"throughput oracle answered {len(out)} of {len(queries)} questions")
    return [float(x) for x in out]


def replica_options(job: Job) -> tuple[int, ...]:
    """Replica counts to try, most first: rigid jobs only ``max_replicas``; elastic ones down to min."""
    if not job.is_elastic:
        return (job.max_replicas,)
    return tuple(range(job.max_replicas, job.min_replicas - 1, -1))


def allowed_types(
    job: Job, infos: Mapping[str, TypeInfo], oracle: ThroughputOracle | None = None
) -> tuple[str, ...]:
    """The GPU types a job may get: those it allows and, when ``oracle`` answers memory questions
    (``MemoryOracle``), whose memory it fits at its count (``fitting_types``)."""
    types = tuple(t for t in infos if job.allows(t))
    if oracle is None or not types or not isinstance(oracle, MemoryOracle):
        return types
    return fitting_types(job, types, infos, oracle)


def fitting_types(
    job: Job, types: Sequence[str], infos: Mapping[str, TypeInfo], oracle: MemoryOracle
) -> tuple[str, ...]:
    """The ``types`` on which ``job`` fits in GPU memory at its smallest GPU count (``min_gpus``), in the
    compact shape a policy asks about: the count a policy may give it that needs the most memory per GPU
    (sharding spreads the model over fewer GPUs, and each GPU's share of the batch is largest). A type the
    oracle cannot judge (None) stays."""
    answers = oracle.memory_fit([(job, infos[t].shape(job.min_gpus)) for t in types])
    return tuple(t for t, fit in zip(types, answers, strict=True) if fit is None or fit.fits)


class FreeByType:
    """Free GPUs per type in a snapshot, computed once; orders each job's allowed types by it.

    With an ``oracle`` that answers memory questions, types the job does not fit are dropped
    (``fitting_types``)."""

    def __init__(self, snapshot: ClusterSnapshot, oracle: ThroughputOracle | None = None) -> None:
        self.memory = oracle if isinstance(oracle, MemoryOracle) else None
        node_free = snapshot.free_by_node()
        self.free: dict[str, int] = {}
        self._memo: dict[frozenset[str], tuple[str, ...]] = {}
        for n in snapshot.nodes:
            self.free[n.gpu_type] = self.free.get(n.gpu_type, 0) + node_free.get(n.name, 0)

    def order(self, job: Job, infos: Mapping[str, TypeInfo]) -> tuple[str, ...]:
        """The job's allowed types, most free GPUs first, then by name (memoised per allowed set)."""
        key = job.allowed_gpu_types
        got = self._memo.get(key)
        if got is None:
            got = tuple(sorted(allowed_types(job, infos), key=lambda t: (-self.free.get(t, 0), t)))
            self._memo[key] = got
        if self.memory is not None and got:
            return fitting_types(job, got, infos, self.memory)
        return got


# ------------------------------------------------------------------------------------------ greedy
class Request(NamedTuple):
    """What a policy asks for one job, in its rank order (immutable; a named tuple because policies
    build one per job per round and a tuple is several times cheaper to build than a frozen dataclass).

    ``gpu_types`` and ``replicas`` are tried in order (replicas outer, types inner). ``rank``: lower is
    more urgent; a preemptive round lets a job evict running jobs whose rank exceeds its own by more than
    the margin. ``note`` tells a waiting person where the job stands (e.g. "LAS queue 1").
    ``keep_current``: a running job whose allocation matches any of the options keeps it; when false
    the first replica count is the target and a running job is resized in place towards it.
    """

    job: Job
    gpu_types: tuple[str, ...]
    replicas: tuple[int, ...]
    rank: float = 0.0
    note: str = ""
    keep_current: bool = True


_NO_VICTIMS = Unschedulable("no lower-ranked running jobs to preempt")
#: ``_try_place``'s answer when every option fails only for want of free GPUs (see ``short_of_gpus``)
_SHORT_OF_GPUS = Unschedulable("waiting for free GPUs of an allowed type")


def _try_place(index: FreeIndex, req: Request, types_: Sequence[str]) -> Allocation | Unschedulable:
    last: Allocation | Unschedulable = Unschedulable("no allowed GPU type in the cluster", resolvable=False)
    any_resolvable = False
    for r in req.replicas:
        for t in types_:
            res = index.place(
                replicas=r, gpus_per_replica=req.job.gpus_per_replica, gpu_type=t, job=req.job.name
            )
            if isinstance(res, Allocation):
                return res
            if res.resolvable or not any_resolvable:
                last = res
            any_resolvable = any_resolvable or res.resolvable
    return last


def _resize_in_place(
    index: FreeIndex, req: Request, cur: Allocation, types_: Sequence[str]
) -> Allocation | None:
    """Shrink or grow a running gang on its own nodes (no migration) when its type stays; None if not.

    Called while ``cur`` is still committed; the result is not committed.
    """
    if cur.gpu_type not in types_ or cur.gpus_per_replica != req.job.gpus_per_replica:
        return None
    for target in req.replicas:
        if target < cur.replicas:
            # drop replicas from the nodes holding the fewest first, so the gang stays tight
            per_node = dict(cur.replicas_per_node)
            drop = cur.replicas - target
            for node_name, r in sorted(cur.replicas_per_node, key=lambda x: (x[1], x[0])):
                take = min(r, drop)
                per_node[node_name] = r - take
                drop -= take
                if drop == 0:
                    break
            return Allocation.of(cur.job, cur.gpu_type, cur.gpus_per_replica, per_node)
        if target > cur.replicas:
            extra = index.place(
                replicas=target - cur.replicas,
                gpus_per_replica=cur.gpus_per_replica,
                gpu_type=cur.gpu_type,
                job=cur.job,
                prefer=dict(cur.replicas_per_node),
            )
            if isinstance(extra, Allocation):
                per_node = dict(cur.replicas_per_node)
                for node_name, r in extra.replicas_per_node:
                    per_node[node_name] = per_node.get(node_name, 0) + r
                return Allocation.of(cur.job, cur.gpu_type, cur.gpus_per_replica, per_node)
        if target == cur.replicas:
            return cur
    return None


def greedy_allocate(
    snapshot: ClusterSnapshot,
    jobs: Sequence[Job],
    requests: Sequence[Request],
    *,
    preemptive: bool,
    strict: bool = False,
    preempt_margin: float = 0.0,
    extra: Mapping[str, Decision] | None = None,
) -> dict[str, Decision]:
    """Walk ``requests`` in order and place each gang; returns a decision for every job in ``jobs``.

    - finished jobs get no allocation; running non-preemptible jobs keep theirs whatever they asked;
    - a running job whose allocation matches its request keeps it; otherwise it is re-placed (kept as it
      is when the new placement fails and the old one still fits);
    - ``preemptive``: when a job does not fit, running jobs ranked behind it (by more than
      ``preempt_margin``) are evicted, least urgent first, until it fits; evictions that turn out not to
      be needed are undone;
    - ``strict``: once a job cannot start, no job behind it starts (strict FIFO);
    - jobs with no request get ``extra``'s decision, else none (waiting, or preempted when running).
    """
    index = FreeIndex(snapshot.nodes, snapshot.free_by_node())
    decisions: dict[str, Decision] = {}
    reserved: dict[str, Allocation] = {}
    for j in jobs:
        cur = snapshot.allocations.get(j.name)
        if not j.total_work - j.progress > 0:  # remaining_work <= 0, without the property call
            if cur is not None:
                index.release(cur)
            decisions[j.name] = Decision(j.name, None, "complete: all work done")
        elif cur is None:
            continue
        elif not j.preemptible:
            decisions[j.name] = Decision(j.name, cur, "non-preemptible: keeps its GPUs")
        else:
            reserved[j.name] = cur
    rank_of = {r.job.name: r.rank for r in requests}
    for name in [n for n in reserved if n not in rank_of]:
        index.release(reserved.pop(name))  # no request: it stops this round, its GPUs are free now
    pending_victims = dict(reserved)  # running, preemptible, not yet walked
    # per GPU type, running jobs least urgent first: a preemption attempt stops at the first one
    # that may not be evicted, so a saturated cluster costs O(1) per waiting job
    victims_by_type: dict[str, list[tuple[float, str]]] = {}
    for v, a in pending_victims.items():
        victims_by_type.setdefault(a.gpu_type, []).append((-rank_of.get(v, float("inf")), v))
    for lst in victims_by_type.values():
        lst.sort()
    preempted_by: dict[str, str] = {}
    short_memo: dict[tuple[tuple[int, ...], int, tuple[str, ...]], tuple[int, bool]] = {}
    blocked_by: str | None = None
    ahead = 0
    for req in requests:
        job = req.job
        name = job.name
        if name in decisions:  # finished or pinned
            continue
        allowed = job.allowed_gpu_types
        types_ = tuple(t for t in req.gpu_types if t in allowed) if allowed else tuple(req.gpu_types)
        pending_victims.pop(name, None)
        cur = reserved.get(name)
        if (
            cur is not None
            and req.keep_current
            and cur.gpu_type in types_
            and cur.replicas in req.replicas
            and cur.gpus_per_replica == job.gpus_per_replica
        ):
            decisions[name] = Decision(name, cur, req.note)
            ahead += 1
            continue
        if blocked_by is not None and cur is None:
            decisions[name] = Decision(
                name, None, f"blocked behind job {blocked_by} at the head of the queue"
            )
            ahead += 1
            continue
        res: Allocation | Unschedulable | None = None
        if cur is not None:
            res = _resize_in_place(index, req, cur, types_)
            index.release(cur)
            del reserved[name]
        if res is None:
            # many waiting jobs share a shape: ask once per shape until the free GPUs change
            shape = (req.replicas, job.gpus_per_replica, types_)
            seen = short_memo.get(shape)
            if seen is None or seen[0] != index.version:
                seen = (index.version, index.short_of_gpus(req.replicas, job.gpus_per_replica, types_))
                short_memo[shape] = seen
            # when short of GPUs, ``_SHORT_OF_GPUS`` is what ``_try_place`` would conclude
            res = _SHORT_OF_GPUS if seen[1] else _try_place(index, req, types_)
        if not isinstance(res, Allocation) and cur is not None and index.fits(cur):
            res = cur  # the change failed: keep what runs
        if not isinstance(res, Allocation) and preemptive and types_:
            res = _preempt_for(
                index, req, types_, reserved, pending_victims, victims_by_type, preempt_margin, preempted_by
            )
        if isinstance(res, Allocation):
            index.commit(res)
            reserved[name] = res
            decisions[name] = Decision(name, res, req.note)
        else:
            parts = [f"{ahead} job{'' if ahead == 1 else 's'} ahead in the queue"]
            if req.note:
                parts.append(req.note)
            if name in preempted_by:
                parts.append(f"preempted by job {preempted_by[name]}")
            if "free but" in res.reason:
                parts.append(res.reason)
            decisions[name] = Decision(name, None, "; ".join(parts), unresolvable=not res.resolvable)
            if strict and blocked_by is None and res.resolvable:
                blocked_by = name
            if not res.resolvable:
                continue  # a job that can never run is not "ahead" of anyone
        ahead += 1
    for j in jobs:
        if j.name not in decisions:
            dec = (extra or {}).get(j.name)
            decisions[j.name] = (
                dec if dec is not None else Decision(j.name, None, "not selected by the policy")
            )
    return decisions


def _preempt_for(
    index: FreeIndex,
    req: Request,
    types_: Sequence[str],
    reserved: dict[str, Allocation],
    pending_victims: dict[str, Allocation],
    victims_by_type: Mapping[str, Sequence[tuple[float, str]]],
    margin: float,
    preempted_by: dict[str, str],
) -> Allocation | Unschedulable:
    """Evict running jobs ranked behind ``req`` until it fits; undo evictions not needed."""
    gpr = req.job.gpus_per_replica
    need_min = min(req.replicas) * gpr
    threshold = req.rank + margin
    rank_of: dict[str, float] = {}
    for t in types_:
        victims: list[str] = []
        for neg_rank, v in victims_by_type.get(t, ()):
            if -neg_rank <= threshold:
                break
            if v in pending_victims:
                victims.append(v)
                rank_of[v] = -neg_rank
        if not victims:
            continue
        if index.type_free(t) + sum(reserved[v].total_gpus for v in victims) < need_min:
            continue
        released: list[str] = []
        placed: Allocation | None = None
        for v in victims:
            index.release(reserved[v])
            released.append(v)
            res = _try_place(index, req, [t])
            if isinstance(res, Allocation):
                placed = res
                break
        if placed is None:
            for v in released:
                index.commit(reserved[v])
            continue
        index.commit(placed)
        # put back, most urgent first, the evictions that were not needed
        for v in sorted(released, key=lambda v: (rank_of[v], v)):
            if index.fits(reserved[v]):
                index.commit(reserved[v])
            else:
                del reserved[v]
                del pending_victims[v]
                preempted_by[v] = req.job.name
        index.release(placed)  # the caller commits it
        return placed
    return _NO_VICTIMS
