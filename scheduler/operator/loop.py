"""The operator process: leader election, watches that trigger rounds, the round loop, and its HTTP endpoints.

Shell module (threads and I/O). ``OperatorLoop.run`` runs until its stop event is set:

- the ``LeaseElector`` renews the Lease in its own thread (the round loop only acts while it leads);
- one watch thread per kind (TrainingJobs, perfsched pods, Nodes, TrainingQueues) wakes the loop on
  every change, so a new job, a pod that went Running or finished, a node that came or went, or a queue
  created, deleted or whose spec changed is handled within ``min_interval`` instead of at the next
  period (a TrainingQueue whose status alone changed, as every round writes it, triggers nothing: its
  ``metadata.generation`` did not change); watches that end or fail are restarted with backoff (they only
  trigger rounds: every round lists the cluster afresh, so a missed event costs latency, never
  correctness); without the TrainingQueue CRD its watch retries quietly every minute;
- the loop runs a round every ``period`` seconds, or sooner when triggered, at most every ``min_interval``;
- ``serve_http`` exposes ``/metrics`` (``scheduler.metrics.REGISTRY``), ``/healthz`` (200 while the
  loop has run or skipped a round within three periods, so a wedged loop gets the pod restarted) and
  ``/readyz`` (also 503 while the API server is unreachable, saying for how long).

An API server outage of any length is survived without a traceback: every API failure arrives as a
``scheduler.core.errors`` error; ``health`` (``scheduler.k8s.errors.ApiHealth``, the one ``RealKubeApi``
reports every call to) logs the outage once when it starts and once when it ends, and counts it in
``perfsched_api_unavailable_seconds_total{component="operator"}``. The operator keeps no state that an
outage could lose: when the server is back, the next round lists the cluster afresh and the watches
reconnect. While the leader cannot renew its Lease it stops acting (see ``leader``).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from scheduler import metrics
from scheduler.core.errors import PerfschedError
from scheduler.k8s.errors import ApiHealth
from scheduler.k8s.kubeapi import CLUSTER_SCOPED, KINDS, KubeApi, NotFound
from scheduler.names import TRAININGQUEUE_PLURAL
from scheduler.operator.leader import LeaseElector
from scheduler.operator.reconcile import Operator

log = logging.getLogger(__name__)


class OperatorLoop:
    """Runs an ``Operator`` as a long-lived process (see the module docstring)."""

    def __init__(
        self,
        operator: Operator,
        api: KubeApi,
        *,
        elector: LeaseElector | None = None,
        period_s: float = 5.0,
        min_interval_s: float = 0.5,
        namespace: str = "",
        watch_timeout_s: int = 120,
        health: ApiHealth | None = None,
        max_watch_backoff_s: float = 10.0,
    ) -> None:
        self.operator = operator
        self.api = api
        self.elector = elector
        self.period_s = period_s
        self.min_interval_s = min_interval_s
        self.namespace = namespace
        self.watch_timeout_s = watch_timeout_s
        found = getattr(api, "health", None)
        self.health: ApiHealth = health or (found if isinstance(found, ApiHealth) else ApiHealth("operator"))
        self.max_watch_backoff_s = max_watch_backoff_s
        self._wake = threading.Event()
        self._last_tick = time.monotonic()
        self.rounds = 0

    def is_leader(self) -> bool:
        return self.elector is None or self.elector.is_leader()

    def trigger(self) -> None:
        """Ask for a round soon (called by the watches)."""
        self._wake.set()

    def healthy(self) -> bool:
        return time.monotonic() - self._last_tick < max(30.0, 3 * self.period_s)

    def not_ready(self) -> str:
        """Why the operator is not ready ("" when it is): a stalled loop, or no API server to talk to."""
        if not self.healthy():
            return "round loop stalled"
        self.health.tick()
        if not self.health.available():
            return f"API server unreachable for {self.health.outage_seconds():.0f} s"
        return ""

    # --- watches ---------------------------------------------------------------------------------------

    def _watch(self, kind: str, stop: threading.Event) -> None:
        failures = 0
        generations: dict[str, object] = {}  # TrainingQueues: a round only when a spec changed
        while not stop.is_set():
            try:
                for event, obj in self.api.watch(
                    kind, "" if kind in CLUSTER_SCOPED else self.namespace, self.watch_timeout_s
                ):
                    self.health.ok()
                    if kind != TRAININGQUEUE_PLURAL or _spec_changed(event, obj, generations):
                        self.trigger()
                    if stop.is_set():
                        return
                failures = 0
            except NotFound as exc:  # the TrainingQueue CRD is not installed: no queues to watch yet
                if failures == 0:
                    log.info("cannot watch %s; retrying every minute", kind, extra={"error": str(exc)})
                failures += 1
                stop.wait(60.0)
            except PerfschedError as exc:  # a watch only triggers rounds: log, back off, reconnect
                failures += 1
                delay = min(self.max_watch_backoff_s, 0.5 * 2**failures) * random.uniform(0.5, 1.0)
                if not self.health.failed(exc):  # an outage is logged once, by health
                    log.info(
                        "watch ended with an error; reconnecting", extra={"kind": kind, "error": str(exc)}
                    )
                stop.wait(delay)

    # --- the loop --------------------------------------------------------------------------------------

    def run(self, stop: threading.Event, kinds: Iterable[str] = KINDS) -> None:
        threads = []
        if self.elector is not None:
            threads.append(
                threading.Thread(target=self.elector.run, args=(stop, False), name="lease", daemon=True)
            )
        for kind in kinds:
            threads.append(
                threading.Thread(target=self._watch, args=(kind, stop), name=f"watch-{kind}", daemon=True)
            )
        for t in threads:
            t.start()
        last_round = 0.0
        was_leader = False
        try:
            while not stop.is_set():
                self._wake.wait(self.period_s)
                if stop.is_set():
                    break
                since = time.monotonic() - last_round
                if since < self.min_interval_s:
                    stop.wait(self.min_interval_s - since)
                self._wake.clear()
                self._last_tick = time.monotonic()
                leader = self.is_leader()
                metrics.OPERATOR_LEADER.set(1 if leader else 0)
                if leader != was_leader:
                    log.info("leader" if leader else "standby", extra={"leader": leader})
                    was_leader = leader
                if not leader:
                    self.operator.stand_down()
                    continue
                last_round = time.monotonic()
                round_began = self.health.now()
                try:
                    rep = self.operator.run_round()
                    self.rounds += 1
                    if not rep.skipped:  # the round listed the cluster then: the API server answered
                        self.health.ok(since=round_began)
                    if rep.actions or rep.errors:
                        done = ", ".join(f"{k} {' '.join(v)}" for k, v in sorted(rep.actions.items()))
                        log.info(
                            "round %d: %s%s (%.3f s: list %.3f, policy %.3f, apply %.3f)",
                            self.rounds,
                            done or "no actions",
                            f"; errors: {rep.errors[:3]}" if rep.errors else "",
                            rep.total_seconds,
                            rep.list_seconds,
                            rep.policy_seconds,
                            rep.apply_seconds,
                        )
                except PerfschedError as exc:
                    # an API outage is logged once per outage by health; anything else once per round
                    if not self.health.failed(exc):
                        log.warning("round failed; retrying next period: %s", exc, extra={"error": str(exc)})
                except Exception:  # a bug in a policy or in the operator: keep the others' jobs going
                    log.exception("round failed with an unexpected error; retrying next period")
        finally:
            stop.set()
            # the Lease thread releases the Lease on its way out; watch threads may sit in a long poll and
            # are daemons, so they are not waited for
            for t in threads:
                if t.name == "lease":
                    t.join(timeout=5.0)
            # released only now, after the last round's writes: a standby may take over at once
            if self.elector is not None:
                self.elector.release()
            metrics.OPERATOR_LEADER.set(0)


def _spec_changed(event: str, obj: Any, generations: dict[str, object]) -> bool:
    """Whether a watch event of a TrainingQueue changes what a round does: it was added or deleted, or
    its ``metadata.generation`` (bumped by a spec change, not by a status write) moved."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    if not isinstance(meta, dict):
        return True
    name, generation = str(meta.get("name", "")), meta.get("generation")
    if event == "DELETED":
        generations.pop(name, None)
        return True
    seen = generations.get(name)
    generations[name] = generation
    return event != "MODIFIED" or generation is None or seen != generation


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        log.debug("http " + format, *args)


def serve_http(
    host: str, port: int, healthy: Callable[[], bool], not_ready: Callable[[], str] | None = None
) -> tuple[WSGIServer, threading.Thread]:
    """Serve ``/metrics``, ``/healthz`` and ``/readyz`` in a daemon thread; returns the server (call
    ``shutdown``). ``/readyz`` answers 503 with ``not_ready()``'s reason when it gives one (without
    ``not_ready`` it is ``/healthz``)."""
    from prometheus_client import make_wsgi_app

    metrics_app = make_wsgi_app(metrics.REGISTRY)

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path == "/readyz" and not_ready is not None:
            why = not_ready()
            start_response("503 Service Unavailable" if why else "200 OK", [("Content-Type", "text/plain")])
            return [f"{why or 'ok'}\n".encode()]
        if path in ("/healthz", "/readyz"):
            ok = healthy()
            start_response("200 OK" if ok else "503 Service Unavailable", [("Content-Type", "text/plain")])
            return [b"ok\n" if ok else b"round loop stalled\n"]
        if path == "/metrics":
            return metrics_app(environ, start_response)  # type: ignore[no-any-return]
        start_response("404 Not Found", [("Content-Type", "text/plain")])
        return [b"not found\n"]

    server = make_server(host, port, app, handler_class=_QuietHandler)
    thread = threading.Thread(target=server.serve_forever, name="http", daemon=True)
    thread.start()
    return server, thread
