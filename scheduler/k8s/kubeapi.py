"""The operator's seam to the Kubernetes API: the ``KubeApi`` protocol and its real implementation.

Adapter module (I/O). ``KubeApi`` is exactly what the operator needs and nothing more: list and watch
TrainingJobs, Pods and Nodes (plus PriorityClasses, to resolve ``priorityClassName``); create and delete
pods and headless Services; merge-patch a TrainingJob's status; create Events; get, create and replace
a ``coordination.k8s.io`` Lease. Objects travel as API JSON dicts (camelCase, as the server sends them),
so the conversion into core types happens once, in ``scheduler.k8s.crd`` and ``scheduler.k8s.codec``.

``RealKubeApi`` uses the official ``kubernetes`` client with raw JSON replies (``_preload_content=False``)
and retries temporary failures (429, 5xx, dropped connections) with capped exponential backoff and
jitter. The retry loop is a dozen lines here rather than a dependency (``tenacity``) because the only
policy needed is "retry what the API calls temporary, give up after N attempts"; everything it retries is
idempotent or made so by the caller (deterministic pod names, 404 on delete is success).

Errors raised (all ``scheduler.core.errors`` subclasses, so callers need not import ``kubernetes``):
``NotFound`` and ``AlreadyExists`` and ``Invalid`` (permanent: 404, 409 AlreadyExists, 422/400),
``Forbidden`` (permanent: 401/403), ``Conflict`` (temporary: 409 on a stale resourceVersion) and
``ApiUnavailable`` (temporary: retries exhausted). ``scheduler.k8s.fakeapi.FakeKubeApi`` is the in-memory
implementation the unit tests use.
"""

from __future__ import annotations

import contextlib
import logging
import random
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol, TypeVar

import orjson

from scheduler.core.errors import PermanentError, TemporaryError
from scheduler.k8s import crd

log = logging.getLogger(__name__)

T = TypeVar("T")

Obj = dict[str, Any]


class NotFound(PermanentError):
    """The object does not exist (404)."""


class AlreadyExists(PermanentError):
    """An object with that name already exists (409 AlreadyExists)."""


class Invalid(PermanentError):
    """The API server refused the object as invalid (400/422); the message names the field."""


class Forbidden(PermanentError):
    """Not allowed (401/403): RBAC or authentication."""


class Conflict(TemporaryError):
    """The object changed since it was read (409 on resourceVersion): read it again and retry."""


class ApiUnavailable(TemporaryError):
    """The API server did not answer usefully after the configured retries."""


#: The kinds ``list``/``watch`` know, by their API plural.
KINDS = ("trainingjobs", "pods", "nodes")


class KubeApi(Protocol):
    """What the operator does with the Kubernetes API. ``namespace=""`` means all namespaces."""

    def list_trainingjobs(self, namespace: str = "") -> list[Obj]: ...

    def list_pods(self, namespace: str = "", label_selector: str = "") -> list[Obj]: ...

    def list_nodes(self) -> list[Obj]: ...

    def list_priority_classes(self) -> list[Obj]: ...

    def watch(self, kind: str, namespace: str = "", timeout_seconds: int = 60) -> Iterator[tuple[str, Obj]]:
        """Yield ``(event type, object)`` for changes of ``kind`` from now on, until the server ends it."""
        ...

    def create_pod(self, namespace: str, body: Mapping[str, Any]) -> Obj: ...

    def delete_pod(self, namespace: str, name: str, grace_period_seconds: int | None = None) -> None:
        """Delete a pod (gracefully: SIGTERM, then SIGKILL after the grace period); 404 is success."""
        ...

    def create_service(self, namespace: str, body: Mapping[str, Any]) -> Obj: ...

    def delete_service(self, namespace: str, name: str) -> None: ...

    def patch_trainingjob_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> Obj:
        """JSON merge patch of ``status`` (``None`` values delete keys)."""
        ...

    def create_event(self, namespace: str, body: Mapping[str, Any]) -> None: ...

    def get_lease(self, namespace: str, name: str) -> Obj | None: ...

    def create_lease(self, namespace: str, body: Mapping[str, Any]) -> Obj:
        """Create a Lease; raises ``AlreadyExists`` when another candidate created it first."""
        ...

    def replace_lease(self, namespace: str, name: str, body: Mapping[str, Any]) -> Obj:
        """Replace a Lease; ``body.metadata.resourceVersion`` must be current, else ``Conflict``."""
        ...


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


def _reason(exc: Any) -> str:
    body = getattr(exc, "body", None)
    if body:
        try:
            parsed = orjson.loads(body)
            if isinstance(parsed, dict):
                return str(parsed.get("reason") or "")
        except orjson.JSONDecodeError:
            pass
    return ""


def classify(status: int, reason: str, message: str) -> Exception | None:
    """The perfsched error for an HTTP status from the API, or None when the call should be retried."""
    if status == 404:
        return NotFound(message)
    if status == 409:
        return AlreadyExists(message) if reason == "AlreadyExists" else Conflict(message)
    if status in (400, 422):
        return Invalid(message)
    if status in (401, 403):
        return Forbidden(message)
    if status == 429 or status >= 500 or status == 0:
        return None
    return PermanentError(f"HTTP {status}: {message}")


def retry(
    what: str,
    call: Callable[[], T],
    *,
    attempts: int = 5,
    base_s: float = 0.2,
    cap_s: float = 5.0,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Run ``call``; retry temporary API failures with capped exponential backoff and full jitter."""
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    last = ""
    for attempt in range(attempts):
        try:
            return call()
        except ApiException as exc:
            err = classify(int(exc.status or 0), _reason(exc), api_error_message(exc))
            if err is not None:
                raise err from None
            last = f"HTTP {exc.status}: {api_error_message(exc)}"
        except (HTTPError, OSError) as exc:
            last = f"{type(exc).__name__}: {exc}"
        delay = random.uniform(0, min(cap_s, base_s * 2**attempt))
        log.warning("api call failed, retrying", extra={"call": what, "error": last, "delay_s": delay})
        sleep(delay)
    raise ApiUnavailable(f"{what}: gave up after {attempts} attempts ({last})")


class RealKubeApi:
    """``KubeApi`` over the official client. Build it from an ``ApiClient`` (``load_api_client``)."""

    def __init__(self, api_client: Any, *, attempts: int = 5, request_timeout_s: float = 30.0) -> None:
        from kubernetes import client

        self._client = api_client
        self._core = client.CoreV1Api(api_client)
        self._custom = client.CustomObjectsApi(api_client)
        self._coord = client.CoordinationV1Api(api_client)
        self._sched = client.SchedulingV1Api(api_client)
        self._attempts = attempts
        self._timeout = request_timeout_s
        # Lease calls get one short attempt: the elector retries on its own schedule, and a renewal that
        # hangs longer than the renew deadline must not keep a stale leader believing it leads.
        self._lease_timeout = min(request_timeout_s, 5.0)

    def _json(self, what: str, call: Callable[[], Any], attempts: int | None = None) -> Obj:
        def run() -> Obj:
            resp = call()
            try:
                data = resp.data
            finally:
                resp.release_conn()
            parsed = orjson.loads(data) if data else {}
            return parsed if isinstance(parsed, dict) else {}

        return retry(what, run, attempts=attempts or self._attempts)

    def _items(self, what: str, call: Callable[[], Any]) -> list[Obj]:
        items = self._json(what, call).get("items") or []
        return [i for i in items if isinstance(i, dict)]

    # --- lists -----------------------------------------------------------------------------------------

    def list_trainingjobs(self, namespace: str = "") -> list[Obj]:
        kw: dict[str, Any] = {"_preload_content": False, "_request_timeout": self._timeout}
        if namespace:
            return self._items(
                "list trainingjobs",
                lambda: self._custom.list_namespaced_custom_object(
                    crd.GROUP, crd.VERSION, namespace, crd.PLURAL, **kw
                ),
            )
        return self._items(
            "list trainingjobs",
            lambda: self._custom.list_cluster_custom_object(crd.GROUP, crd.VERSION, crd.PLURAL, **kw),
        )

    def list_pods(self, namespace: str = "", label_selector: str = "") -> list[Obj]:
        kw: dict[str, Any] = {"_preload_content": False, "_request_timeout": self._timeout}
        if label_selector:
            kw["label_selector"] = label_selector
        if namespace:
            return self._items("list pods", lambda: self._core.list_namespaced_pod(namespace, **kw))
        return self._items("list pods", lambda: self._core.list_pod_for_all_namespaces(**kw))

    def list_nodes(self) -> list[Obj]:
        return self._items(
            "list nodes", lambda: self._core.list_node(_preload_content=False, _request_timeout=self._timeout)
        )

    def list_priority_classes(self) -> list[Obj]:
        return self._items(
            "list priorityclasses",
            lambda: self._sched.list_priority_class(_preload_content=False, _request_timeout=self._timeout),
        )

    # --- watch -----------------------------------------------------------------------------------------

    def watch(self, kind: str, namespace: str = "", timeout_seconds: int = 60) -> Iterator[tuple[str, Obj]]:
        if kind not in KINDS:
            raise ValueError(f"unknown kind {kind!r}; expected one of {KINDS}")
        kw: dict[str, Any] = {
            "watch": True,
            "timeout_seconds": timeout_seconds,
            "_preload_content": False,
            "_request_timeout": timeout_seconds + 10,
        }
        if kind == "nodes":
            resp = retry("watch nodes", lambda: self._core.list_node(**kw), attempts=self._attempts)
        elif kind == "pods":
            kw["label_selector"] = crd.LABEL_JOB_NAME
            if namespace:
                resp = retry("watch pods", lambda: self._core.list_namespaced_pod(namespace, **kw))
            else:
                resp = retry("watch pods", lambda: self._core.list_pod_for_all_namespaces(**kw))
        elif namespace:
            resp = retry(
                "watch trainingjobs",
                lambda: self._custom.list_namespaced_custom_object(
                    crd.GROUP, crd.VERSION, namespace, crd.PLURAL, **kw
                ),
            )
        else:
            resp = retry(
                "watch trainingjobs",
                lambda: self._custom.list_cluster_custom_object(crd.GROUP, crd.VERSION, crd.PLURAL, **kw),
            )
        try:
            buf = b""
            for chunk in resp.stream(amt=65536, decode_content=False):
                buf += chunk
                while (nl := buf.find(b"\n")) >= 0:
                    line, buf = buf[:nl], buf[nl + 1 :]
                    if line.strip():
                        event = orjson.loads(line)
                        yield str(event.get("type", "")), event.get("object") or {}
        finally:
            resp.release_conn()

    # --- writes ----------------------------------------------------------------------------------------

    def create_pod(self, namespace: str, body: Mapping[str, Any]) -> Obj:
        return self._json(
            "create pod",
            lambda: self._core.create_namespaced_pod(
                namespace, dict(body), _preload_content=False, _request_timeout=self._timeout
            ),
        )

    def delete_pod(self, namespace: str, name: str, grace_period_seconds: int | None = None) -> None:
        kw: dict[str, Any] = {"_preload_content": False, "_request_timeout": self._timeout}
        if grace_period_seconds is not None:
            kw["grace_period_seconds"] = grace_period_seconds
        with contextlib.suppress(NotFound):
            self._json("delete pod", lambda: self._core.delete_namespaced_pod(name, namespace, **kw))

    def create_service(self, namespace: str, body: Mapping[str, Any]) -> Obj:
        return self._json(
            "create service",
            lambda: self._core.create_namespaced_service(
                namespace, dict(body), _preload_content=False, _request_timeout=self._timeout
            ),
        )

    def delete_service(self, namespace: str, name: str) -> None:
        with contextlib.suppress(NotFound):
            self._json(
                "delete service",
                lambda: self._core.delete_namespaced_service(
                    name, namespace, _preload_content=False, _request_timeout=self._timeout
                ),
            )

    def patch_trainingjob_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> Obj:
        body = {"status": dict(status)}
        return self._json(
            "patch trainingjob status",
            lambda: self._custom.patch_namespaced_custom_object_status(
                crd.GROUP,
                crd.VERSION,
                namespace,
                crd.PLURAL,
                name,
                body,
                _preload_content=False,
                _request_timeout=self._timeout,
            ),
        )

    def create_event(self, namespace: str, body: Mapping[str, Any]) -> None:
        self._json(
            "create event",
            lambda: self._core.create_namespaced_event(
                namespace, dict(body), _preload_content=False, _request_timeout=self._timeout
            ),
        )

    def get_lease(self, namespace: str, name: str) -> Obj | None:
        try:
            return self._json(
                "get lease",
                lambda: self._coord.read_namespaced_lease(
                    name, namespace, _preload_content=False, _request_timeout=self._lease_timeout
                ),
                attempts=1,
            )
        except NotFound:
            return None

    def create_lease(self, namespace: str, body: Mapping[str, Any]) -> Obj:
        return self._json(
            "create lease",
            lambda: self._coord.create_namespaced_lease(
                namespace, dict(body), _preload_content=False, _request_timeout=self._lease_timeout
            ),
            attempts=1,
        )

    def replace_lease(self, namespace: str, name: str, body: Mapping[str, Any]) -> Obj:
        return self._json(
            "replace lease",
            lambda: self._coord.replace_namespaced_lease(
                name, namespace, dict(body), _preload_content=False, _request_timeout=self._lease_timeout
            ),
            attempts=1,
        )
