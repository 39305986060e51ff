"""``FakeWorkloadApi``: an in-memory ``scheduler.k8s.adopt.WorkloadApi`` for the unit tests.

Holds objects of the adopted kinds by (kind, namespace, name), applies merge patches as the API server
does (RFC 7386), records Events, and can be told to fail the next call. It also plays the kinds'
controllers as far as the tests need: ``finish`` sets the condition that says a workload finished. No I/O.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

from scheduler.k8s import crd
from scheduler.k8s.adopt import WorkloadKind
from scheduler.k8s.errors import NotFound
from scheduler.k8s.fakeapi import merge_patch

Obj = dict[str, Any]


class FakeWorkloadApi:
    """In-memory ``WorkloadApi`` (see the module docstring)."""

    def __init__(
        self, clock: Callable[[], float], *, installed: tuple[str, ...] = ("Job", "JobSet", "TrainJob")
    ):
        self.clock = clock
        self.installed = set(installed)
        self.objects: dict[tuple[str, str, str], Obj] = {}
        self.events: list[Obj] = []
        self.patches: list[tuple[str, str, Obj]] = []
        self._uid = 0
        self._fail: list[Exception] = []

    def fail_next(self, exc: Exception) -> None:
        self._fail.append(exc)

    def _check(self) -> None:
        if self._fail:
            raise self._fail.pop(0)

    def add(self, kind: WorkloadKind, obj: Mapping[str, Any]) -> Obj:
        body = copy.deepcopy(dict(obj))
        meta = body.setdefault("metadata", {})
        meta.setdefault("namespace", "default")
        self._uid += 1
        meta.setdefault("uid", f"uid-{self._uid}")
        meta.setdefault("creationTimestamp", crd.rfc3339(self.clock()))
        body.setdefault("apiVersion", kind.api_version)
        body.setdefault("kind", kind.kind)
        self.objects[(kind.kind, meta["namespace"], meta["name"])] = body
        return body

    def get(self, kind: WorkloadKind, namespace: str, name: str) -> Obj:
        return self.objects[(kind.kind, namespace, name)]

    def finish(
        self, kind: WorkloadKind, namespace: str, name: str, condition: str, message: str = ""
    ) -> None:
        obj = self.get(kind, namespace, name)
        conds = obj.setdefault("status", {}).setdefault("conditions", [])
        conds.append({"type": condition, "status": "True", "message": message})

    def events_for(self, name: str) -> list[tuple[str, str]]:
        return [(e["reason"], e["message"]) for e in self.events if e["involvedObject"]["name"] == name]

    # --- WorkloadApi ------------------------------------------------------------------------------------

    def list_workloads(self, kind: WorkloadKind) -> list[Obj]:
        self._check()
        if kind.kind not in self.installed:
            return []
        return [copy.deepcopy(o) for (k, _, _), o in sorted(self.objects.items()) if k == kind.kind]

    def patch_workload(self, kind: WorkloadKind, namespace: str, name: str, patch: Mapping[str, Any]) -> Obj:
        self._check()
        key = (kind.kind, namespace, name)
        if key not in self.objects:
            raise NotFound(f"{kind.plural} {namespace}/{name} not found")
        self.objects[key] = merge_patch(self.objects[key], patch)
        self.patches.append((kind.kind, name, copy.deepcopy(dict(patch))))
        return copy.deepcopy(self.objects[key])

    def create_event(self, namespace: str, body: Mapping[str, Any]) -> None:
        self.events.append(copy.deepcopy(dict(body)))
