"""Kubernetes API failures as perfsched errors, in one place; and ``ApiHealth``, the outage tracker.

Adapter module. Every call ``scheduler.k8s`` makes through the official ``kubernetes`` client runs
inside ``api_call(what)`` (or its result goes through ``translate``), so no perfsched process ever sees
a ``kubernetes`` or ``urllib3`` exception and none needs ``except Exception`` to stay alive.

The mapping (all ``scheduler.core.errors`` subclasses):

- ``ApiException`` by HTTP status: 404 ``NotFound``, 409 ``AlreadyExists`` (reason AlreadyExists) or
  ``Conflict`` (a stale resourceVersion), 400/422 ``Invalid``, 401/403 ``Forbidden``, 410 ``Gone``,
  429 ``Throttled``, 5xx ``ApiUnavailable``, any other status ``PermanentError``;
- every transport failure, i.e. the server could not be reached or its answer could not be read, as
  ``ApiUnavailable``: urllib3's ``MaxRetryError``, ``NewConnectionError``, ``ProtocolError``,
  ``ReadTimeoutError`` and the rest of ``urllib3.exceptions.HTTPError``; ``OSError`` (connection refused
  or reset, socket timeouts, TLS errors); ``http.client.HTTPException`` (``RemoteDisconnected``,
  ``IncompleteRead``); and a reply body that is not JSON (a connection cut mid-reply).

Temporary (retry with backoff): ``Conflict``, ``Throttled``, ``ApiUnavailable``, ``Gone``. Permanent:
the rest. ``is_outage`` says which failures mean "the API server is not there" (``ApiUnavailable``) as
opposed to "it answered no".

``ApiHealth`` is what a long-running component keeps to survive an outage of any length: callers report
each call's outcome (``ok()``/``failed(exc)``); it logs once when an outage starts and once when it
ends (not once per call), says whether the API is available now (for ``/readyz``) and adds the seconds
of every outage to ``perfsched_api_unavailable_seconds_total{component}``.
"""

from __future__ import annotations

import contextlib
import functools
import http.client
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import orjson

from scheduler.core.errors import PerfschedError, PermanentError, TemporaryError

log = logging.getLogger(__name__)


class KubeApiError(PerfschedError):
    """Base of the errors below; ``status`` is the HTTP status (0 when the server gave none) and
    ``detail`` the server's message (or the transport error) without the name of the call."""

    status: int = 0
    detail: str = ""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status
        self.detail = message


class NotFound(KubeApiError, PermanentError):
    """The object does not exist (404)."""


class AlreadyExists(KubeApiError, PermanentError):
    """An object with that name already exists (409 AlreadyExists)."""


class Invalid(KubeApiError, PermanentError):
    """The API server refused the object as invalid (400/422); the message names the field."""


class Forbidden(KubeApiError, PermanentError):
    """Not allowed (401/403): RBAC or authentication."""


class OtherApiError(KubeApiError, PermanentError):
    """Any other 4xx the API server answered: retrying the same request will not help."""


class Conflict(KubeApiError, TemporaryError):
    """The object changed since it was read (409 on resourceVersion): read it again and retry."""


class Gone(KubeApiError, TemporaryError):
    """A watch's or list's resourceVersion is too old (410): list again."""


class Throttled(KubeApiError, TemporaryError):
    """The API server asked us to slow down (429)."""


class ApiUnavailable(KubeApiError, TemporaryError):
    """The API server could not be reached or did not answer usefully (transport error, timeout, 5xx)."""


def api_error_message(exc: Any) -> str:
    """The API server's own message of a client ``ApiException`` (its Status body), else its reason."""
    body = getattr(exc, "body", None)
    if body:
        try:
            parsed = orjson.loads(body)
            if isinstance(parsed, dict) and parsed.get("message"):
                return str(parsed["message"])
        except orjson.JSONDecodeError:
            pass
    return str(getattr(exc, "reason", "") or exc)


def _status_reason(exc: Any) -> str:
    body = getattr(exc, "body", None)
    if body:
        try:
            parsed = orjson.loads(body)
            if isinstance(parsed, dict):
                return str(parsed.get("reason") or "")
        except orjson.JSONDecodeError:
            pass
    return ""


def from_status(status: int, reason: str, message: str) -> KubeApiError:
    """The perfsched error for an HTTP status the API answered (``reason`` from its Status body)."""
    if status == 404:
        return NotFound(message, status)
    if status == 409:
        return AlreadyExists(message, status) if reason == "AlreadyExists" else Conflict(message, status)
    if status in (400, 422):
        return Invalid(message, status)
    if status in (401, 403):
        return Forbidden(message, status)
    if status == 410:
        return Gone(message, status)
    if status == 429:
        return Throttled(message, status)
    if status >= 500 or status == 0:
        return ApiUnavailable(message, status)
    return OtherApiError(f"HTTP {status}: {message}", status)


@functools.cache
def _transport_errors() -> tuple[type[BaseException], ...]:
    from urllib3.exceptions import HTTPError

    # OSError: refused/reset connections, socket timeouts, ssl.SSLError; HTTPException: RemoteDisconnected,
    # IncompleteRead, BadStatusLine from a server that died mid-reply; JSONDecodeError: a reply cut short
    return (HTTPError, OSError, http.client.HTTPException, orjson.JSONDecodeError)


@functools.cache
def _client_errors() -> tuple[type[BaseException], ...]:
    from kubernetes.client.exceptions import ApiException

    return (ApiException, *_transport_errors())


def translate(exc: BaseException, what: str) -> PerfschedError | None:
    """``exc`` raised by the Kubernetes client (or while reading its reply) as a perfsched error.

    ``what`` names the call for the message ("list pods"). Returns ``exc`` itself when it already is a
    perfsched error, and None for anything else (a programming error, which must not be hidden).
    """
    if isinstance(exc, PerfschedError):
        return exc
    from kubernetes.client.exceptions import ApiException

    # a request may carry user input (a pod name of any length): what ends up in logs is capped
    what = _cap(what, 300)
    if isinstance(exc, ApiException):
        status = int(exc.status or 0)
        err = from_status(status, _status_reason(exc), _cap(api_error_message(exc), 1000))
        err.args = (f"{what}: {err.args[0]}",)
        return err
    if isinstance(exc, _transport_errors()):
        err = ApiUnavailable(f"API server unreachable ({type(exc).__name__}: {_short(exc)})")
        err.args = (f"{what}: {err.detail}",)
        return err
    return None


def _short(exc: BaseException, limit: int = 300) -> str:
    return _cap(str(exc), limit)


def _cap(text: str, limit: int) -> str:
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


@contextlib.contextmanager
def api_call(what: str) -> Iterator[None]:
    """Run the body (a Kubernetes client call, and the reading of its reply); re-raise its failures as
    perfsched errors (see the module docstring). Programming errors pass through unchanged."""
    try:
        yield
    except _client_errors() as exc:
        err = translate(exc, what)
        if err is None:  # pragma: no cover - every client error translates
            raise
        raise err from exc


def is_outage(exc: BaseException) -> bool:
    """True when ``exc`` means the API server is not there (unreachable, timing out, answering 5xx)."""
    return isinstance(exc, ApiUnavailable)


class ApiHealth:
    """Whether the API server is reachable, as one component sees it; logs and counts outages. Thread-safe.

    ``failed(exc)`` with an outage error (``is_outage``) starts an outage, or continues it; ``ok()`` (any
    answer from the server, also an error answer) ends it. The first failure is logged at WARNING with
    the error, the recovery at INFO with the outage's length; failures in between are logged at DEBUG.
    ``unavailable_seconds`` counts every outage (the current one up to now); the Prometheus counter
    ``perfsched_api_unavailable_seconds_total{component}`` is advanced on every report, so it lags an
    ongoing outage by at most the caller's retry interval.
    """

    def __init__(
        self,
        component: str,
        *,
        clock: Callable[[], float] = time.monotonic,
        count: Callable[[float], None] | None = None,
    ) -> None:
        self.component = component
        self._clock = clock
        self._lock = threading.Lock()
        self._down_since: float | None = None
        self._counted_until = 0.0
        self._past = 0.0
        self.outages = 0
        self.last_error = ""
        if count is None:
            from scheduler import metrics

            counter = metrics.API_UNAVAILABLE_SECONDS.labels(component=component)
            count = counter.inc
        self._count = count

    def available(self) -> bool:
        """False from the first failed call of an outage until the next call the server answers."""
        with self._lock:
            return self._down_since is None

    def outage_seconds(self) -> float:
        """Length of the current outage so far (0 when the API is available)."""
        with self._lock:
            return 0.0 if self._down_since is None else max(0.0, self._clock() - self._down_since)

    def unavailable_seconds(self) -> float:
        """Seconds of every outage seen, the current one included."""
        with self._lock:
            now = self._clock()
            return self._past + (0.0 if self._down_since is None else max(0.0, now - self._down_since))

    def _advance(self, now: float) -> None:
        if self._down_since is not None and now > self._counted_until:
            self._count(now - self._counted_until)
            self._counted_until = now

    def failed(self, exc: BaseException) -> bool:
        """Report a failed call; returns True when it was an outage error (and it was recorded)."""
        if not is_outage(exc):
            self.ok()  # the server answered, if only with "no"
            return False
        with self._lock:
            now = self._clock()
            self.last_error = str(exc)
            if self._down_since is None:
                self._down_since = self._counted_until = now
                self.outages += 1
                first = True
            else:
                self._advance(now)
                first = False
        if first:
            log.warning(
                "API server unavailable; retrying until it is back (%s)",
                exc,
                extra={"component": self.component, "error": str(exc)},
            )
        else:
            log.debug("API server still unavailable", extra={"component": self.component, "error": str(exc)})
        return True

    def now(self) -> float:
        """The clock ``ok(since=...)`` compares with."""
        return self._clock()

    def ok(self, since: float | None = None) -> None:
        """Report a call the API server answered. ``since``: when that call was made, for a report that
        comes long after it (a whole round): an answer from before the outage began does not end it."""
        if self._down_since is None:  # the common case, without the lock (watch events are frequent)
            return
        with self._lock:
            if self._down_since is None or (since is not None and since < self._down_since):
                return
            now = self._clock()
            self._advance(now)
            seconds = max(0.0, now - self._down_since)
            self._past += seconds
            self._down_since = None
        log.info(
            "API server available again after %.1f s",
            seconds,
            extra={"component": self.component, "outage_seconds": round(seconds, 3)},
        )

    def tick(self) -> None:
        """Advance the metric during an ongoing outage (call it from a periodic loop or a scrape)."""
        with self._lock:
            self._advance(self._clock())
