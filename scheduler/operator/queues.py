"""The operator's side of tenant queues: TrainingQueues into the round's snapshot, jobs into queues, and
each queue's status after the round.

Pure (no I/O): ``Tenancy.of(queue_objects, namespace_objects, gpu_types)`` reads what the operator listed;
``assign`` gives a job the queue it belongs to (its ``spec.queue``, else the queue whose
``spec.namespaces`` selects its namespace, first by name, else ``default``); ``statuses`` words each
queue's ``status`` from the round's result. A TrainingQueue whose spec does not parse is left out of the
round (its jobs then wait naming a missing queue; the other queues are scheduled) and its ``Ready``
condition is False with reason ``InvalidSpec``; what it is scheduled despite is a True ``Ready``
condition's reason and message: a quota for a GPU type no node has (``UnknownGPUType``: kept, the type may
be added later), a cohort no other queue is in (``LoneCohort``). Never a crash. Cohorts are flat (a name
shared by queues), so there are no cohort cycles.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from scheduler.core.admission import queue_of, queue_shares
from scheduler.core.decisions import RoundResult
from scheduler.core.protocols import ThroughputOracle
from scheduler.core.queues import ANY_GPU_TYPE, QueueSpec
from scheduler.core.types import Allocation, ClusterSnapshot, Job
from scheduler.k8s import crd

Obj = dict[str, Any]


@dataclass(frozen=True)
class Tenancy:
    """The round's queues: valid specs, namespace selectors, and problems per queue (for conditions)."""

    specs: tuple[QueueSpec, ...] = ()
    selectors: tuple[tuple[str, crd.LabelSelector], ...] = ()
    namespace_labels: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    #: per queue, (reason, message) of what is wrong with it: ``InvalidSpec`` (left out of the round), or
    #: warnings it is scheduled despite (``UnknownGPUType``, ``LoneCohort``)
    problems: Mapping[str, Sequence[tuple[str, str]]] = field(default_factory=dict)
    objects: Mapping[str, Obj] = field(default_factory=dict)

    @staticmethod
    def of(queues: Sequence[Obj], namespaces: Sequence[Obj], gpu_types: Sequence[str]) -> Tenancy:
        specs: list[QueueSpec] = []
        selectors: list[tuple[str, crd.LabelSelector]] = []
        problems: dict[str, list[tuple[str, str]]] = {}
        objects: dict[str, Obj] = {}
        for obj in sorted(queues, key=lambda o: str((o.get("metadata") or {}).get("name") or "")):
            name = str((obj.get("metadata") or {}).get("name") or "")
            if not name:
                continue
            objects[name] = obj
            spec = crd.trainingqueue_to_spec(obj)
            if isinstance(spec, str):
                problems[name] = [("InvalidSpec", spec)]
                continue
            specs.append(spec)
            warn = problems.setdefault(name, [])
            unknown = sorted(q.gpu_type for q in spec.quotas if q.gpu_type not in (ANY_GPU_TYPE, *gpu_types))
            if unknown:
                warn.append(("UnknownGPUType", f"quota for GPU type {', '.join(unknown)} that no node has"))
            raw_sel = (obj.get("spec") or {}).get("namespaces")  # it parsed: a mapping or nothing
            if isinstance(raw_sel, dict):  # valid: it parsed with the spec
                selectors.append((name, crd.LabelSelector.model_validate(raw_sel)))
        for spec in specs:
            peers = [s.name for s in specs if s.cohort == spec.cohort and s.name != spec.name]
            if spec.cohort and not peers:
                problems[spec.name].append(
                    (
                        "LoneCohort",
                        f"no other queue is in cohort {spec.cohort}: nothing to borrow from or lend to",
                    )
                )
        labels = {
            str((n.get("metadata") or {}).get("name")): dict((n.get("metadata") or {}).get("labels") or {})
            for n in namespaces
        }
        return Tenancy(tuple(specs), tuple(selectors), labels, problems, objects)

    def assign(self, job: Job, namespace: str) -> Job:
        """``job`` with its queue: the one it names, else the first queue selecting its namespace."""
        if job.queue or not self.selectors:
            return job
        labels = self.namespace_labels.get(namespace, {})
        for name, sel in self.selectors:
            if sel.matches(labels):
                return replace(job, queue=name)
        return job

    def statuses(
        self, snapshot: ClusterSnapshot, jobs: Sequence[Job], result: RoundResult, oracle: ThroughputOracle
    ) -> dict[str, dict[str, Any]]:
        """Each TrainingQueue's ``status`` after the round (usage from the allocations it ends with).

        ``fairShareRatio``: the queue's share per unit of weight (``queue_shares``: delivered throughput
        normalised per job to its fastest GPU type for ``fairShare: throughput``, GPUs for ``gpus``; the
        figure admission evens out) over the mean of all queues; 1 is its fair share."""
        final: dict[str, Allocation] = dict(snapshot.allocations)
        for a in result.actions:
            if a.after is None:
                final.pop(a.job, None)
            else:
                final[a.job] = a.after
        by_name = {j.name: j for j in jobs}
        usage: dict[str, dict[str, int]] = {}
        admitted: dict[str, int] = {}
        pending: dict[str, int] = {}
        for name, alloc in final.items():
            job = by_name.get(name)
            if job is None:
                continue
            q = queue_of(job)
            per_type = usage.setdefault(q, {})
            per_type[alloc.gpu_type] = per_type.get(alloc.gpu_type, 0) + alloc.total_gpus
            admitted[q] = admitted.get(q, 0) + 1
        for name in result.waiting:
            job = by_name.get(name)
            if job is not None:
                pending[queue_of(job)] = pending.get(queue_of(job), 0) + 1
        specs = {s.name: s for s in self.specs}
        by_job = {name: a for name, a in final.items() if name in by_name}
        per_weight = queue_shares(snapshot, jobs, by_job, oracle)
        mean = sum(per_weight.values()) / len(per_weight) if per_weight else 0.0
        out: dict[str, dict[str, Any]] = {}
        for name in self.objects:
            spec = specs.get(name)
            used = usage.get(name, {})
            borrowed = (
                {t: g - spec.nominal(t) for t, g in used.items() if g > spec.nominal(t)} if spec else {}
            )
            text = ", ".join(
                f"{t} {g}/{spec.nominal(t)}" if spec else f"{t} {g}" for t, g in sorted(used.items())
            )
            problems = self.problems.get(name) or ()
            out[name] = {
                "usage": dict(sorted(used.items())),
                "borrowed": dict(sorted(borrowed.items())),
                "usageText": text or "idle",
                "pendingJobs": pending.get(name, 0),
                "admittedJobs": admitted.get(name, 0),
                "fairShareRatio": round(per_weight.get(name, 0.0) / mean, 3) if mean > 0 and spec else None,
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True" if spec else "False",
                        "reason": problems[0][0] if problems else "Active",
                        "message": "; ".join(m for _, m in problems) or "quotas are enforced",
                    }
                ],
            }
        return out
