"""Why a gang a round starts is spread over several NVLink domains, judged at the round's decision.

Pure. ``spread_notes`` replays a round's starts in the policy's decision order over the round's
snapshot: the GPUs free at the round's start (capacity for jobs minus the allocations the snapshot
holds, less those of the jobs the round completes, preempts or moves), each earlier START or RESIZE of
the round taking its GPUs. For a START whose gang spans more than one NVLink domain (or PCIe node) it
says whether, at that point, one domain of the gang's GPU type had room for the whole gang:

- "spread over 2 NVLink domains: no A100 NVLink domain had 8 free GPUs at the decision" (the usual case: the
  domains were taken, by running jobs or by the gangs ahead of it in the round);
- "spread over 2 nodes: no K80 NVLink domain holds 8 GPUs" (the type has no domain that large);
- "spread over 2 NVLink domains although 1 A100 NVLink domain had 8 free GPUs at the decision:
  a100-3 (8)" (its free GPUs in brackets): a placement miss, or room the policy kept for another job
  (an EASY-backfill reservation).

The operator adds the note to the Started Event and the Admitted condition, so that a user sees why
a gang is spread and a bench can judge "a domain fitted" on the decision's own view.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from scheduler.core.decisions import Action, ActionKind
from scheduler.core.types import Allocation, ClusterSnapshot, Interconnect, Node

#: the words that set a note where a domain had room apart (the note's other forms never contain them)
ALTHOUGH = " although "


def _domain(node: Node) -> tuple[str, bool]:
    """The node's NVLink domain (its ``nvlink_domain``, else itself) and whether it is one."""
    nvlink = node.interconnect is Interconnect.NVLINK
    return (node.nvlink_domain or node.name) if nvlink else node.name, nvlink


def spread_note(
    alloc: Allocation, nodes: Mapping[str, Node], free: Mapping[str, int], *, most: int = 3
) -> str:
    """Why ``alloc`` spans several NVLink domains given the GPUs ``free`` per node before it was placed;
    "" when it sits in one domain (or on one node). ``most``: domains named at most, when some fitted."""
    spanned = {_domain(nodes[n]) for n in alloc.nodes if n in nodes}
    if len(spanned) <= 1:
        return ""
    gpr, need = alloc.gpus_per_replica, alloc.total_gpus
    t = alloc.gpu_type
    whole: dict[str, int] = {}  # NVLink domain of the type -> whole replicas free there
    largest: dict[str, int] = {}  # ... and that it holds when empty
    for node in nodes.values():
        name, nvlink = _domain(node)
        if node.gpu_type != t or not nvlink:
            continue
        whole[name] = whole.get(name, 0) + max(0, free.get(node.name, 0)) // gpr
        largest[name] = largest.get(name, 0) + node.capacity_for_jobs // gpr
    what = "NVLink domains" if all(nvlink for _, nvlink in spanned) else "nodes"
    head = f"spread over {len(spanned)} {what}"
    fitted = sorted(d for d, r in whole.items() if r >= alloc.replicas)
    if fitted:
        named = ", ".join(f"{d} ({whole[d] * gpr})" for d in fitted[:most])
        more = f" and {len(fitted) - most} more" if len(fitted) > most else ""
        domains = f"{len(fitted)} {t} NVLink domain{'s' if len(fitted) > 1 else ''}"
        return f"{head}{ALTHOUGH}{domains} had {need} free GPUs at the decision: {named}{more}"
    if not any(r >= alloc.replicas for r in largest.values()):
        return f"{head}: no {t} NVLink domain holds {need} GPUs"
    return f"{head}: no {t} NVLink domain had {need} free GPUs at the decision"


def spread_notes(
    snapshot: ClusterSnapshot, order: Iterable[str], actions: Sequence[Action]
) -> dict[str, str]:
    """Job -> ``spread_note`` for every START of ``actions`` whose gang spans several NVLink domains,
    judged with the round's earlier starts taken (see the module docstring). ``order``: the jobs in the
    policy's decision order (a round's ``decisions``); actions of jobs it does not name come after."""
    by_job = {a.job: a for a in actions}
    freed = [a.job for a in actions if a.kind in (ActionKind.COMPLETE, ActionKind.PREEMPT, ActionKind.RESIZE)]
    free = snapshot.free_by_node(exclude=freed)
    nodes = snapshot.node_map()
    seen: set[str] = set()
    walk: list[Action] = []
    for name in [*order, *by_job]:
        a = by_job.get(name)
        if a is None or name in seen:
            continue
        seen.add(name)
        if a.kind in (ActionKind.START, ActionKind.RESIZE) and a.after is not None:
            walk.append(a)
    out: dict[str, str] = {}
    for a in walk:
        alloc = a.after
        assert alloc is not None
        if a.kind is ActionKind.START:
            note = spread_note(alloc, nodes, free)
            if note:
                out[a.job] = note
        for n, r in alloc.replicas_per_node:
            free[n] = free.get(n, 0) - r * alloc.gpus_per_replica
    return out
