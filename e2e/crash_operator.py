"""``perfsched operator`` that SIGKILLs itself right after a chosen step of a change (e2e fault injection).

Run as ``python -m e2e.crash_operator [operator options]``: the real operator (``scheduler.cli``), with
the API calls of ``scheduler.k8s.kubeapi.RealKubeApi`` wrapped so that the process kills itself with
SIGKILL, as a crash would, right after the ``n``-th successful call of one step of a change:

- ``status``: the status patch that writes a change's intent (phase ``Resizing`` or ``Preempted``);
- ``event``: the ``Resized`` / ``Preempted`` Event of a change;
- ``delete``: a pod deletion of a gang this process has just written a change for;
- ``create``: a pod creation of a restarted gang (generation 2 or later: after a resize, preemption,
  migration or node failure).

The kill point is read from the JSON file ``$PERFSCHED_E2E_CRASH_FILE`` (``{"step": ..., "n": ...}``) at
each such call, so that a test arms and disarms a running process; no file, no kill. Before dying the
process appends one JSON line (step, n, job, kind of change, time) to ``$PERFSCHED_E2E_CRASH_LOG``; each
time it becomes the leader it appends one (identity, time) to ``$PERFSCHED_E2E_LEADER_LOG``, so that a
test knows when each leader started to the millisecond. Test tooling: nothing in the product imports it.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

STEPS = ("status", "event", "delete", "create")
CHANGE_PHASES = {"Resizing", "Preempted"}
CHANGE_EVENTS = {"Resized", "Preempted"}


def change_kind(message: str) -> str:
    """resize, move or preempt, from a change's status or Event message (``transitions._stop``)."""
    if message.startswith("resizing"):
        return "resize"
    if message.startswith("moving"):
        return "move"
    return "preempt"


class Crasher:
    """Counts the steps of changes and kills this process at the armed one."""

    def __init__(self, arm_file: Path, log_file: Path) -> None:
        self.arm_file, self.log_file = arm_file, log_file
        self.counts: Counter[str] = Counter()
        #: namespace/job -> kind of the change this process wrote for it last
        self.changing: dict[str, str] = {}

    def point(self) -> tuple[str, int] | None:
        try:
            data = json.loads(self.arm_file.read_text())
        except (OSError, ValueError):
            return None
        return str(data["step"]), int(data["n"])

    def step(self, step: str, job: str, kind: str) -> None:
        point = self.point()
        if point is None or point[0] != step:
            return
        self.counts[step] += 1
        if self.counts[step] < point[1]:
            return
        line = {
            "step": step,
            "n": point[1],
            "job": job,
            "kind": kind,
            "time": time.time(),
            "pid": os.getpid(),
        }
        _append(self.log_file, line)
        os.kill(os.getpid(), signal.SIGKILL)


def _append(path: Path, line: Mapping[str, Any]) -> None:
    with path.open("a") as f:
        f.write(json.dumps(line) + "\n")
        f.flush()
        os.fsync(f.fileno())


def record_leadership(log_file: Path) -> None:
    from scheduler.operator.leader import LeaseElector

    won = LeaseElector._won

    def patched_won(self: LeaseElector, now: float) -> bool:
        # written before this process acts as the leader: its first round may reach the armed step (and
        # SIGKILL it) while a slow fsync of this line is still under way
        if not self.is_leader():
            _append(log_file, {"leader": self.identity, "time": time.time(), "pid": os.getpid()})
        return won(self, now)

    LeaseElector._won = patched_won  # type: ignore[method-assign]


def install(crasher: Crasher) -> None:
    from scheduler.k8s.kubeapi import RealKubeApi

    patch_status = RealKubeApi.patch_trainingjob_status
    create_event = RealKubeApi.create_event
    delete_pod = RealKubeApi.delete_pod
    create_pod = RealKubeApi.create_pod

    def patched_status(self: RealKubeApi, namespace: str, name: str, status: Mapping[str, Any]) -> Any:
        out = patch_status(self, namespace, name, status)
        if status.get("phase") in CHANGE_PHASES:
            kind = change_kind(str(status.get("message") or ""))
            crasher.changing[f"{namespace}/{name}"] = kind
            crasher.step("status", f"{namespace}/{name}", kind)
        return out

    def patched_event(self: RealKubeApi, namespace: str, body: Mapping[str, Any]) -> None:
        create_event(self, namespace, body)
        if body.get("reason") in CHANGE_EVENTS:
            job = f"{namespace}/{(body.get('involvedObject') or {}).get('name', '')}"
            crasher.step("event", job, change_kind(str(body.get("message") or "")))

    def patched_delete(
        self: RealKubeApi, namespace: str, name: str, grace_period_seconds: int | None = None
    ) -> None:
        delete_pod(self, namespace, name, grace_period_seconds)
        job = f"{namespace}/{name.rsplit('-g', 1)[0]}"
        if job in crasher.changing:
            crasher.step("delete", job, crasher.changing[job])

    def patched_create(self: RealKubeApi, namespace: str, body: Mapping[str, Any]) -> Any:
        out = create_pod(self, namespace, body)
        labels = (body.get("metadata") or {}).get("labels") or {}
        if int(labels.get("perfsched.dev/generation") or 0) >= 2:
            job = f"{namespace}/{labels.get('perfsched.dev/job-name', '')}"
            crasher.step("create", job, crasher.changing.get(job, "restart"))
        return out

    RealKubeApi.patch_trainingjob_status = patched_status  # type: ignore[method-assign]
    RealKubeApi.create_event = patched_event  # type: ignore[method-assign]
    RealKubeApi.delete_pod = patched_delete  # type: ignore[method-assign]
    RealKubeApi.create_pod = patched_create  # type: ignore[method-assign]


def main() -> None:
    install(
        Crasher(Path(os.environ["PERFSCHED_E2E_CRASH_FILE"]), Path(os.environ["PERFSCHED_E2E_CRASH_LOG"]))
    )
    record_leadership(Path(os.environ["PERFSCHED_E2E_LEADER_LOG"]))
    from scheduler.cli import main as cli

    cli(["operator", *sys.argv[1:]])


if __name__ == "__main__":
    main()
