"""Leader election on a ``coordination.k8s.io/v1`` Lease, so two operator replicas never act at once.

Shell module (I/O through ``KubeApi``; clocks injected). It follows client-go's ``leaderelection``
semantics: a candidate takes the Lease when it does not exist, when it already holds it, or when the
holder has not renewed it for ``leaseDurationSeconds`` *as observed on the candidate's own clock* (the
record must stay unchanged that long, so clock skew between machines does not matter); every write uses
the Lease's resourceVersion, so of two candidates racing only one succeeds. The leader renews every
``retry_period`` and considers itself leader only while its last successful renewal is less than
``renew_deadline`` old. Because ``renew_deadline < lease_duration``, a leader that cannot renew (API down,
process paused, network partition) stops acting before any other candidate can take over. On a clean
shutdown the leader releases the Lease so a standby takes over at once.

Why not ``kubernetes.leaderelection`` from the official Python client: at the pinned versions it only
ships a ConfigMap lock (no Lease lock), runs the leader's work in a thread it can neither stop nor
fence, and its ``run()`` returns for good after one lost renewal. The algorithm is small, so it is
written here against the ``KubeApi`` seam and tested with the fake API and fake clocks.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from scheduler.core.errors import PerfschedError
from scheduler.k8s.errors import is_outage
from scheduler.k8s.kubeapi import AlreadyExists, KubeApi

log = logging.getLogger(__name__)


def micro_time(t: float) -> str:
    """Unix seconds -> the API's MicroTime format (RFC 3339 with microseconds)."""
    return datetime.fromtimestamp(t, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaseElector:
    """One candidate in the election for Lease ``namespace/name`` (see the module docstring)."""

    def __init__(
        self,
        api: KubeApi,
        *,
        namespace: str,
        name: str,
        identity: str,
        lease_duration_s: float = 15.0,
        renew_deadline_s: float = 10.0,
        retry_period_s: float = 2.0,
        monotonic: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        on_change: Callable[[bool], None] | None = None,
    ) -> None:
        if not retry_period_s < renew_deadline_s < lease_duration_s:
            raise ValueError("leader election needs retry_period < renew_deadline < lease_duration")
        self.api = api
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_duration_s = lease_duration_s
        self.renew_deadline_s = renew_deadline_s
        self.retry_period_s = retry_period_s
        self._mono = monotonic
        self._wall = wall
        self._on_change = on_change
        self._lock = threading.Lock()
        self._renewed_at: float | None = None  # monotonic time of our last successful acquire/renew
        self._observed: tuple[Any, ...] | None = None
        self._observed_at = 0.0
        self._was_leader = False
        self.holder = ""

    # --- queries ---------------------------------------------------------------------------------------

    def is_leader(self) -> bool:
        """True while our last successful renewal is younger than the renew deadline."""
        with self._lock:
            ok = self._renewed_at is not None and self._mono() - self._renewed_at < self.renew_deadline_s
        self._notify(ok)
        return ok

    def _notify(self, leader: bool) -> None:
        if leader != self._was_leader:
            self._was_leader = leader
            log.info("leadership changed", extra={"identity": self.identity, "leader": leader})
            if self._on_change is not None:
                self._on_change(leader)

    # --- one attempt -----------------------------------------------------------------------------------

    def _spec(self, acquire_time: str, transitions: int, now_wall: float) -> dict[str, Any]:
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": max(1, round(self.lease_duration_s)),
            "acquireTime": acquire_time,
            "renewTime": micro_time(now_wall),
            "leaseTransitions": transitions,
        }

    def try_acquire_or_renew(self) -> bool:
        """One attempt to take or keep the Lease; True when we hold it afterwards."""
        now = self._mono()
        wall = self._wall()
        try:
            lease = self.api.get_lease(self.namespace, self.name)
            if lease is None:
                body = {
                    "apiVersion": "coordination.k8s.io/v1",
                    "kind": "Lease",
                    "metadata": {"name": self.name, "namespace": self.namespace},
                    "spec": self._spec(micro_time(wall), 0, wall),
                }
                self.api.create_lease(self.namespace, body)
                return self._won(now)
            spec = lease.get("spec") or {}
            record = (
                spec.get("holderIdentity"),
                spec.get("renewTime"),
                spec.get("acquireTime"),
                spec.get("leaseTransitions"),
                spec.get("leaseDurationSeconds"),
            )
            if record != self._observed:
                self._observed, self._observed_at = record, now
            holder = str(spec.get("holderIdentity") or "")
            self.holder = holder
            duration = float(spec.get("leaseDurationSeconds") or self.lease_duration_s)
            if holder and holder != self.identity and now < self._observed_at + duration:
                return self._lost()
            mine = holder == self.identity
            transitions = int(spec.get("leaseTransitions") or 0) + (0 if mine else 1)
            acquire = str(spec.get("acquireTime") or "") if mine else micro_time(wall)
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {**(lease.get("metadata") or {})},
                "spec": self._spec(acquire or micro_time(wall), transitions, wall),
            }
            self.api.replace_lease(self.namespace, self.name, body)
            return self._won(now)
        except AlreadyExists:
            return self._lost()
        except PerfschedError as exc:
            if not is_outage(exc):  # an unreachable API server is logged once per outage by its ApiHealth
                log.info("lease attempt failed", extra={"identity": self.identity, "error": str(exc)})
            return self.is_leader()  # keep leading until the renew deadline passes

    def _won(self, now: float) -> bool:
        with self._lock:
            self._renewed_at = now
        self.holder = self.identity
        self._observed = None
        self._notify(True)
        return True

    def _lost(self) -> bool:
        with self._lock:
            self._renewed_at = None
        self._notify(False)
        return False

    def release(self) -> None:
        """Give the Lease up (clean shutdown) so a standby replica takes over without waiting."""
        with self._lock:
            held = self._renewed_at is not None
            self._renewed_at = None
        self._notify(False)
        if not held:
            return
        try:
            lease = self.api.get_lease(self.namespace, self.name)
            if lease is None or (lease.get("spec") or {}).get("holderIdentity") != self.identity:
                return
            spec = dict(lease.get("spec") or {})
            spec.update(
                {"holderIdentity": "", "leaseDurationSeconds": 1, "renewTime": micro_time(self._wall())}
            )
            self.api.replace_lease(self.namespace, self.name, {**lease, "spec": spec})
        except PerfschedError as exc:
            log.info("could not release the lease", extra={"error": str(exc)})

    # --- the loop --------------------------------------------------------------------------------------

    def run(self, stop: threading.Event, release: bool = True) -> None:
        """Try to acquire, then renew, every ``retry_period`` (jittered while following) until ``stop``.

        ``release``: give the Lease up on the way out; a caller that still has writes in flight passes
        False and calls ``release`` itself once they are done.
        """
        while not stop.is_set():
            leader = self.try_acquire_or_renew()
            wait = self.retry_period_s if leader else self.retry_period_s * random.uniform(1.0, 1.2)
            stop.wait(wait)
        if release:
            self.release()
