"""What a scheduling round produces: per-job decisions, the actions that realise them, and wait reasons.

Pure data. ``Unschedulable`` is a value, not an exception, with the two flavours of the extender wire
format: ``resolvable=True`` means "retry later" (``FailedNodes``), ``False`` means "will never fit as
specified" (``FailedAndUnresolvableNodes``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from scheduler.core.types import Allocation


@dataclass(frozen=True, slots=True)
class Unschedulable:
    """Why a job (or a pod on a node) cannot run now, in words a person can act on. ``cause``: a short
    CamelCase word for what holds it (``QueueQuota``: its queue's quota; ``QueueNotFound``: it names a
    missing queue); empty for the scheduler's own waits (the operator then says ``Waiting``)."""

    reason: str
    resolvable: bool = True
    cause: str = ""


@dataclass(frozen=True, slots=True)
class Decision:
    """A policy's answer for one job: the allocation it should have now (None = wait) and why."""

    job: str
    allocation: Allocation | None
    reason: str = ""
    unresolvable: bool = False


class ActionKind(StrEnum):
    START = "start"
    RESIZE = "resize"
    PREEMPT = "preempt"
    KEEP = "keep"
    COMPLETE = "complete"


@dataclass(frozen=True, slots=True)
class Action:
    """One change the operator (or simulator) applies.

    ``before``/``after`` are the job's allocation before and after. ``lost_work`` is the progress thrown
    away (since the last checkpoint) and ``cost_seconds`` the configured restart/resize delay charged.
    """

    kind: ActionKind
    job: str
    before: Allocation | None
    after: Allocation | None
    reason: str = ""
    lost_work: float = 0.0
    cost_seconds: float = 0.0


@dataclass(frozen=True, slots=True)
class RoundResult:
    """Output of ``run_round``: the policy's decisions, the planned actions, why waiting jobs wait, and
    the jobs whose action moves them off a node confirmed slow (``scheduler.core.slow_nodes``)."""

    decisions: Mapping[str, Decision]
    actions: tuple[Action, ...]
    waiting: Mapping[str, Unschedulable] = field(default_factory=dict)
    moved_off_slow_nodes: tuple[str, ...] = ()
