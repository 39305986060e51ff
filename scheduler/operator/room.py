"""Room on each node for a new gang's pods, counting the pods that still hold GPUs while they exit.

Pure. The planner frees a stopped gang's GPUs at once (a PREEMPT or RESIZE and a START on its GPUs can
come in one round), but on a cluster the stopped gang's pods keep their GPUs while they checkpoint and
exit (up to the job's ``checkpointGraceSeconds``). Pods created on those GPUs before then would sit
Pending (the extender refuses a node without free GPUs) and count against the start timeout, and the node
would have more GPUs planned than it has. So the operator writes a START's intent at once but creates
its pods only when their nodes have room: ``NodeRoom`` is that count for one round. A gang that waits
this way is created by a later round (``GangState.MISSING``), where the same count decides.

``live`` GPUs are held by pods that stay (bound and not being deleted, or planned on the node and not
bound yet) and by DRA claims no pod counts; ``draining`` GPUs by bound pods being deleted (or stopped this
round) and by the DRA claims of finished pods that kube-controller-manager has not deallocated yet. A
gang waits only when the draining pods are what is in the way: when it does not fit even without them,
the plan is stale (kube-scheduler bound some pod elsewhere than planned) and the pods are created as
before, for kube-scheduler to place.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from scheduler.core.types import Allocation, Node
from scheduler.operator.observe import PodView


def gpus_by_node(alloc: Allocation) -> dict[str, int]:
    """The GPUs ``alloc`` takes on each of its nodes."""
    return {n: r * alloc.gpus_per_replica for n, r in alloc.replicas_per_node}


@dataclass(slots=True)
class NodeRoom:
    """GPUs per node: capacity for jobs, held by pods that stay (``live``), by pods exiting
    (``draining``) and by the DRA claims of finished pods (``releasing``)."""

    capacity: dict[str, int]
    live: Counter[str]
    draining: Counter[str]
    releasing: Counter[str] = field(default_factory=Counter)

    @classmethod
    def of(
        cls,
        nodes: Sequence[Node],
        pods: Sequence[PodView],
        held: Iterable[Allocation] = (),
        releasing: Iterable[Allocation] = (),
    ) -> NodeRoom:
        """The count from this round's nodes, pods and pseudo-allocations of DRA claims: ``held`` ones
        stay, ``releasing`` ones (claims of finished pods) go."""
        live: Counter[str] = Counter()
        draining: Counter[str] = Counter()
        for p in pods:
            info = p.info
            if not p.unfinished or info.gpus <= 0:
                continue
            if info.node_name:
                (draining if p.deleting else live)[info.node_name] += info.gpus
            elif not p.deleting and info.planned_node:
                live[info.planned_node] += info.gpus
        for a in held:
            live.update(gpus_by_node(a))
        going: Counter[str] = Counter()
        for a in releasing:
            going.update(gpus_by_node(a))
        return cls({n.name: n.capacity_for_jobs for n in nodes}, live, draining, going)

    def stop(self, alloc: Allocation) -> None:
        """``alloc``'s pods are deleted with a grace period this round: their GPUs drain."""
        for n, g in gpus_by_node(alloc).items():
            moved = min(g, self.live[n])
            self.live[n] -= moved
            self.draining[n] += moved

    def take(self, need: Mapping[str, int]) -> None:
        """Pods are created for ``need`` (GPUs per node)."""
        self.live.update(need)

    def blocked(self, need: Mapping[str, int]) -> str:
        """Why pods for ``need`` (GPUs per node) must wait for exiting pods or for finished pods' claims to
        be released ("" when they may be created)."""
        cap = self.capacity
        going = self.draining + self.releasing
        short = sorted(n for n, g in need.items() if self.live[n] + going[n] + g > cap.get(n, 0))
        if not short or any(self.live[n] + g > cap.get(n, 0) for n, g in need.items()):
            return ""
        parts = []
        exiting = ", ".join(f"{self.draining[n]} on {n}" for n in short if self.draining[n])
        if exiting:
            parts.append(f"held by pods that are exiting ({exiting})")
        claimed = ", ".join(f"{self.releasing[n]} on {n}" for n in short if self.releasing[n])
        if claimed:
            parts.append(f"that finished pods' ResourceClaims hold until they are released ({claimed})")
        return f"waiting for GPUs {' and GPUs '.join(parts)} before creating the gang's pods"
