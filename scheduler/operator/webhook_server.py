"""The operator's HTTPS endpoint for the mutating webhook that suspends adopted workloads at creation.

Shell module (a TLS socket and API reads). ``serve_webhook`` serves ``POST /mutate`` with
``scheduler.k8s.webhook.mutate`` in a daemon thread, over the certificate and key it is given (the chart's
generated or provided Secret; the dev cluster's self-signed pair), and calls ``on_admit`` after each
workload it suspended so the operator runs a round at once (admission within one round of creation).
``NamespaceQueues`` answers which TrainingQueue selects a namespace, from the TrainingQueues and
Namespaces listed at most every ``ttl_s`` seconds (the webhook must answer in milliseconds, and a queue
created a few seconds ago is caught by the operator's next round anyway).
"""

from __future__ import annotations

import json
import logging
import ssl
import threading
import time
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from scheduler.core.errors import PerfschedError
from scheduler.k8s.kubeapi import KubeApi
from scheduler.k8s.webhook import mutate
from scheduler.operator.queues import Tenancy

log = logging.getLogger(__name__)

#: Largest AdmissionReview body read (the API server sends the whole object; JobSets can be large).
MAX_BODY = 3 * 1024 * 1024


class NamespaceQueues:
    """``namespace -> queue`` from the TrainingQueues' namespace selectors, refreshed every ``ttl_s``."""

    def __init__(self, api: KubeApi, ttl_s: float = 5.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.api = api
        self.ttl_s = ttl_s
        self.clock = clock
        self._tenancy = Tenancy()
        self._at = -float("inf")
        self._lock = threading.Lock()

    def __call__(self, namespace: str) -> str:
        with self._lock:
            if self.clock() - self._at >= self.ttl_s:
                try:
                    queues = self.api.list_trainingqueues()
                    selects = any(isinstance((q.get("spec") or {}).get("namespaces"), dict) for q in queues)
                    namespaces = self.api.list_namespaces() if selects else []
                    self._tenancy = Tenancy.of(queues, namespaces, [])
                    self._at = self.clock()
                except PerfschedError as exc:  # keep the last answer; labelled jobs do not need this
                    log.warning("could not list TrainingQueues for the webhook", extra={"error": str(exc)})
            tenancy = self._tenancy
        labels = tenancy.namespace_labels.get(namespace, {})
        return next((name for name, sel in tenancy.selectors if sel.matches(labels)), "")


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    """One thread per request: a slow TLS handshake must not hold up the next admission."""

    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        log.debug("webhook " + format, *args)


def webhook_app(
    namespace_queue: Callable[[str], str], on_admit: Callable[[], None], only_namespace: str = ""
) -> Any:
    """The WSGI app: ``POST /mutate`` answers an AdmissionReview; anything else is 404 (or 400)."""

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("PATH_INFO") != "/mutate" or environ.get("REQUEST_METHOD") != "POST":
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            return [b"not found\n"]
        try:
            size = int(environ.get("CONTENT_LENGTH") or 0)
            review = json.loads(environ["wsgi.input"].read(min(size, MAX_BODY)) or b"{}")
        except (ValueError, OSError) as exc:
            start_response("400 Bad Request", [("Content-Type", "text/plain")])
            return [f"not an AdmissionReview: {exc}\n".encode()]
        answer = mutate(review, namespace_queue, only_namespace)
        if answer["response"].get("patch"):
            on_admit()
        body = json.dumps(answer).encode()
        start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
        return [body]

    return app


def serve_webhook(
    host: str,
    port: int,
    cert_file: str,
    key_file: str,
    namespace_queue: Callable[[str], str],
    on_admit: Callable[[], None] = lambda: None,
    only_namespace: str = "",
) -> tuple[WSGIServer, threading.Thread]:
    """Serve the webhook over TLS in a daemon thread; returns the server (call ``shutdown``)."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert_file, key_file)
    server = make_server(
        host,
        port,
        webhook_app(namespace_queue, on_admit, only_namespace),
        server_class=_ThreadingServer,
        handler_class=_QuietHandler,
    )
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, name="webhook", daemon=True)
    thread.start()
    return server, thread
