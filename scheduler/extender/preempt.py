"""Preempt: keep the candidate nodes where evicting kube-scheduler's victims really frees room for the pod.

Shell-side logic without I/O over the ``ClusterCache`` (callers hold its lock); no memo. A node is kept
when the pod's GPU type and allowed types match it and its free GPUs plus the victims' GPUs cover one
replica (the core's ``check_node``); victims sent by UID only are looked up in the cache.
"""

from __future__ import annotations

from collections.abc import Mapping

from scheduler.extender import wire
from scheduler.extender.context import PodContext
from scheduler.k8s.cache import ClusterCache
from scheduler.k8s.codec import pod_gpu_request

#: node -> victims as (UID, GPUs, or None when only the UID is known)
Candidates = dict[str, list[tuple[str, int | None]]]


def candidates(args: wire.ExtenderPreemptionArgs) -> Candidates:
    """The request's victims per node; raises ``WireError`` naming a victim without a UID."""
    out: Candidates = {}
    if args.NodeNameToMetaVictims is not None:
        for node, mv in args.NodeNameToMetaVictims.items():
            out[node] = [(p.UID, None) for p in (mv.Pods or [])]
    if args.NodeNameToVictims is not None:
        for node, v in args.NodeNameToVictims.items():
            victims: list[tuple[str, int | None]] = []
            for i, pod in enumerate(v.Pods or []):
                field = f"NodeNameToVictims[{wire.quote(node, 64)}].Pods[{i}]"
                meta = pod.get("metadata") if isinstance(pod, dict) else None
                uid = meta.get("uid") if isinstance(meta, dict) else None
                if not isinstance(uid, str) or not uid:
                    raise wire.WireError(f"{field}.metadata.uid: missing")
                victims.append((uid, pod_gpu_request(pod, field)))
            out[node] = victims
    return out


def keep(
    cache: ClusterCache, ctx: PodContext, victims_by_node: Mapping[str, list[tuple[str, int | None]]]
) -> dict[str, list[str]]:
    """Node -> victim UIDs (unchanged) for the nodes kept."""
    if ctx.gpus <= 0:
        return {n: [u for u, _ in v] for n, v in victims_by_node.items() if v}
    kept: dict[str, list[str]] = {}
    for name, victims in victims_by_node.items():
        node = cache.nodes.get(name)
        if node is None or not victims:
            continue
        freed = 0
        for uid, gpus in victims:
            if gpus is None:
                p = cache.pod_by_uid(uid)
                gpus = p.gpus if p is not None and p.node_name == name else 0
            freed += gpus
        if ctx.fit_on(node, cache.free.get(name, 0) + freed) is None:
            kept[name] = [u for u, _ in victims]
    return kept


def reply(args: wire.ExtenderPreemptionArgs, kept: Mapping[str, list[str]]) -> dict[str, object]:
    """The ExtenderPreemptionResult for the kept nodes, each with the PDB violations kube-scheduler sent."""
    meta = args.NodeNameToMetaVictims or {}
    full = args.NodeNameToVictims or {}
    out: dict[str, object] = {}
    for node, uids in kept.items():
        sent = meta.get(node) or full.get(node)
        pdb = sent.NumPDBViolations if sent is not None else 0
        out[node] = {"Pods": [{"UID": u} for u in uids], "NumPDBViolations": pdb}
    return {"NodeNameToMetaVictims": out}
