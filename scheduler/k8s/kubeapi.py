"""The operator's seam to the Kubernetes API: the ``KubeApi`` protocol and its real implementation.

Adapter module (I/O). ``KubeApi`` is exactly what the operator needs and nothing more: list and watch
TrainingJobs, Pods and Nodes (plus PriorityClasses, to resolve ``priorityClassName``, and the DRA
objects that publish GPUs: DeviceClasses, ResourceSlices, ResourceClaims); create and delete
pods and headless Services, and the Workload / PodGroup of a gang when the operator uses the Workload
API; merge-patch a TrainingJob's status; create Events; get, create and replace
a ``coordination.k8s.io`` Lease. Objects travel as API JSON dicts (camelCase, as the server sends them),
so the conversion into core types happens once, in ``scheduler.k8s.crd`` and ``scheduler.k8s.codec``.

``RealKubeApi`` uses the official ``kubernetes`` client with raw JSON replies (``_preload_content=False``)
and retries temporary failures (429, 5xx, dropped connections) with capped exponential backoff and
jitter. The retry loop is a dozen lines here rather than a dependency (``tenacity``) because the only
policy needed is "retry what the API calls temporary, give up after N attempts"; everything it retries is
idempotent or made so by the caller (deterministic pod names, 404 on delete is success).

Errors raised are those of ``scheduler.k8s.errors`` (all ``scheduler.core.errors`` subclasses, so callers
need not import ``kubernetes``; re-exported here): ``NotFound``, ``AlreadyExists``, ``Invalid``,
``Forbidden`` (permanent), ``Conflict`` (temporary: 409 on a stale resourceVersion) and ``ApiUnavailable``
(temporary: the server was unreachable or answered 429/5xx until the retries ran out). Every call's
outcome is reported to ``RealKubeApi.health`` (an ``ApiHealth``): the operator's outage log and metric.
``scheduler.k8s.fakeapi.FakeKubeApi`` is the in-memory
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

from scheduler.k8s.errors import (
    AlreadyExists,
    ApiHealth,
    ApiUnavailable,
    Conflict,
    Forbidden,
    Invalid,
    KubeApiError,
    NotFound,
    Throttled,
    api_call,
    api_error_message,
    from_status,
)
from scheduler.names import (
    DRA_GROUP,
    DRA_VERSION,
    GANG_API_GROUP,
    GANG_API_VERSION,
    GROUP,
    LABEL_JOB_NAME,
    TRAININGJOB_PLURAL,
    TRAININGQUEUE_PLURAL,
    VERSION,
)

log = logging.getLogger(__name__)

__all__ = [
    "CLUSTER_SCOPED",
    "KINDS",
    "AlreadyExists",
    "ApiUnavailable",
    "Conflict",
    "Forbidden",
    "Invalid",
    "KubeApi",
    "NotFound",
    "Obj",
    "RealKubeApi",
    "api_error_message",
    "classify",
    "retry",
]

T = TypeVar("T")

Obj = dict[str, Any]


#: The kinds ``list``/``watch`` know, by their API plural.
KINDS = (TRAININGJOB_PLURAL, "pods", "nodes", TRAININGQUEUE_PLURAL)
#: Those of ``KINDS`` that are cluster-scoped (watched without a namespace).
CLUSTER_SCOPED = frozenset({"nodes", TRAININGQUEUE_PLURAL})


class KubeApi(Protocol):
    """What the operator does with the Kubernetes API. ``namespace=""`` means all namespaces."""

    def list_trainingjobs(self, namespace: str = "") -> list[Obj]: ...

    def list_pods(self, namespace: str = "", label_selector: str = "") -> list[Obj]: ...

    def list_nodes(self) -> list[Obj]: ...

    def list_priority_classes(self) -> list[Obj]: ...

    def list_dra(self, plural: str) -> list[Obj]:
        """Every ``resource.k8s.io/v1`` object of ``plural`` (``deviceclasses``, ``resourceslices``,
        ``resourceclaims``; claims of all namespaces); empty when the server has no such API."""
        ...

    def list_trainingqueues(self) -> list[Obj]:
        """Every TrainingQueue (cluster-scoped); empty when the TrainingQueue CRD is not installed."""
        ...

    def list_namespaces(self) -> list[Obj]: ...

    def patch_trainingqueue_status(self, name: str, status: Mapping[str, Any]) -> Obj:
        """JSON merge patch of a TrainingQueue's ``status``."""
        ...

    def watch(self, kind: str, namespace: str = "", timeout_seconds: int = 60) -> Iterator[tuple[str, Obj]]:
        """Yield ``(event type, object)`` for changes of ``kind`` from now on, until the server ends it."""
        ...

    def create_pod(self, namespace: str, body: Mapping[str, Any]) -> Obj: ...

    def delete_pod(self, namespace: str, name: str, grace_period_seconds: int | None = None) -> None:
        """Delete a pod (gracefully: SIGTERM, then SIGKILL after the grace period); 404 is success."""
        ...

    def create_service(self, namespace: str, body: Mapping[str, Any]) -> Obj: ...

    def create_gang_object(self, plural: str, namespace: str, body: Mapping[str, Any]) -> Obj:
        """Create a ``scheduling.k8s.io/v1beta1`` object (``workloads``, ``podgroups``); raises
        ``NotFound`` when the server does not serve that API."""
        ...

    def delete_gang_object(self, plural: str, namespace: str, name: str) -> None:
        """Delete a ``scheduling.k8s.io/v1beta1`` object; 404 is success."""
        ...

    def delete_service(self, namespace: str, name: str) -> None: ...

    def patch_trainingjob_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> Obj:
        """JSON merge patch of ``status`` (``None`` values delete keys)."""
        ...

    def create_event(self, namespace: str, body: Mapping[str, Any]) -> None: ...

    def get_lease(self, namespace: str, name: str) -> Obj | None: ...

    def get_configmap(self, namespace: str, name: str) -> Obj | None:
        """A ConfigMap, or None when it does not exist."""
        ...

    def create_configmap(self, namespace: str, body: Mapping[str, Any]) -> Obj:
        """Create a ConfigMap; raises ``AlreadyExists`` when it exists."""
        ...

    def replace_configmap(self, namespace: str, name: str, body: Mapping[str, Any]) -> Obj:
        """Replace a ConfigMap; ``body.metadata.resourceVersion`` must be current, else ``Conflict``."""
        ...

    def create_lease(self, namespace: str, body: Mapping[str, Any]) -> Obj:
        """Create a Lease; raises ``AlreadyExists`` when another candidate created it first."""
        ...

    def replace_lease(self, namespace: str, name: str, body: Mapping[str, Any]) -> Obj:
        """Replace a Lease; ``body.metadata.resourceVersion`` must be current, else ``Conflict``."""
        ...


def classify(status: int, reason: str, message: str) -> Exception | None:
    """The perfsched error for an HTTP status from the API, or None when the call should be retried."""
    err = from_status(status, reason, message)
    return None if isinstance(err, Throttled | ApiUnavailable) else err


def retry(
    what: str,
    call: Callable[[], T],
    *,
    attempts: int = 5,
    base_s: float = 0.2,
    cap_s: float = 5.0,
    sleep: Callable[[float], None] = time.sleep,
    health: ApiHealth | None = None,
) -> T:
    """Run ``call``; retry temporary API failures (429, 5xx, transport errors) with capped exponential
    backoff and full jitter. Every failure of the client is translated (``scheduler.k8s.errors``); each
    attempt's outcome goes to ``health``, which logs an outage once. Raises ``ApiUnavailable`` when the
    attempts are used up, and permanent errors and ``Conflict`` at once."""
    last = ""
    for attempt in range(attempts):
        try:
            with api_call(what):
                result = call()
        except (Throttled, ApiUnavailable) as exc:
            last = str(exc)
            if health is not None:
                health.failed(exc)
        except KubeApiError:
            if health is not None:
                health.ok()
            raise
        else:
            if health is not None:
                health.ok()
            return result
        if attempt + 1 < attempts:
            delay = random.uniform(0, min(cap_s, base_s * 2**attempt))
            log.debug("api call failed, retrying", extra={"call": what, "error": last, "delay_s": delay})
            sleep(delay)
    raise ApiUnavailable(f"{what}: gave up after {attempts} attempts ({last})")


class RealKubeApi:
    """``KubeApi`` over the official client. Build it from an ``ApiClient`` (``connect.api_client``)."""

    def __init__(
        self,
        api_client: Any,
        *,
        attempts: int = 5,
        request_timeout_s: float = 30.0,
        health: ApiHealth | None = None,
    ) -> None:
        from kubernetes import client

        #: every call's outcome is reported here: the operator's outage log, metric and /readyz
        self.health = health or ApiHealth("operator")
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

        return retry(what, run, attempts=attempts or self._attempts, health=self.health)

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
                    GROUP, VERSION, namespace, TRAININGJOB_PLURAL, **kw
                ),
            )
        return self._items(
            "list trainingjobs",
            lambda: self._custom.list_cluster_custom_object(GROUP, VERSION, TRAININGJOB_PLURAL, **kw),
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

    def list_dra(self, plural: str) -> list[Obj]:
        try:
            return self._items(
                f"list {plural}",
                lambda: self._custom.list_cluster_custom_object(
                    DRA_GROUP, DRA_VERSION, plural, _preload_content=False, _request_timeout=self._timeout
                ),
            )
        except NotFound:  # no resource.k8s.io/v1 on this server (before Kubernetes 1.34): no DRA GPUs
            return []

    def list_trainingqueues(self) -> list[Obj]:
        try:
            return self._items(
                "list trainingqueues",
                lambda: self._custom.list_cluster_custom_object(
                    GROUP,
                    VERSION,
                    TRAININGQUEUE_PLURAL,
                    _preload_content=False,
                    _request_timeout=self._timeout,
                ),
            )
        except NotFound:  # the TrainingQueue CRD is not installed: no queues
            return []

    def list_namespaces(self) -> list[Obj]:
        return self._items(
            "list namespaces",
            lambda: self._core.list_namespace(_preload_content=False, _request_timeout=self._timeout),
        )

    def patch_trainingqueue_status(self, name: str, status: Mapping[str, Any]) -> Obj:
        body = {"status": dict(status)}
        return self._json(
            "patch trainingqueue status",
            lambda: self._custom.patch_cluster_custom_object_status(
                GROUP,
                VERSION,
                TRAININGQUEUE_PLURAL,
                name,
                body,
                _preload_content=False,
                _request_timeout=self._timeout,
            ),
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
        what = f"watch {kind}"
        if kind == "nodes":
            start: Callable[[], Any] = lambda: self._core.list_node(**kw)  # noqa: E731
        elif kind == "pods":
            kw["label_selector"] = LABEL_JOB_NAME
            if namespace:
                start = lambda: self._core.list_namespaced_pod(namespace, **kw)  # noqa: E731
            else:
                start = lambda: self._core.list_pod_for_all_namespaces(**kw)  # noqa: E731
        elif kind == TRAININGQUEUE_PLURAL:
            start = lambda: self._custom.list_cluster_custom_object(  # noqa: E731
                GROUP, VERSION, TRAININGQUEUE_PLURAL, **kw
            )
        elif namespace:
            start = lambda: self._custom.list_namespaced_custom_object(  # noqa: E731
                GROUP, VERSION, namespace, TRAININGJOB_PLURAL, **kw
            )
        else:
            start = lambda: self._custom.list_cluster_custom_object(  # noqa: E731
                GROUP, VERSION, TRAININGJOB_PLURAL, **kw
            )
        resp = retry(what, start, attempts=self._attempts, health=self.health)
        try:
            with api_call(what):
                buf = b""
                for chunk in resp.stream(amt=65536, decode_content=False):
                    buf += chunk
                    while (nl := buf.find(b"\n")) >= 0:
                        line, buf = buf[:nl], buf[nl + 1 :]
                        if line.strip():
                            event = orjson.loads(line)
                            yield str(event.get("type", "")), event.get("object") or {}
        except ApiUnavailable as exc:
            self.health.failed(exc)
            raise
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

    def create_gang_object(self, plural: str, namespace: str, body: Mapping[str, Any]) -> Obj:
        return self._json(
            f"create {plural}",
            lambda: self._custom.create_namespaced_custom_object(
                GANG_API_GROUP,
                GANG_API_VERSION,
                namespace,
                plural,
                dict(body),
                _preload_content=False,
                _request_timeout=self._timeout,
            ),
        )

    def delete_gang_object(self, plural: str, namespace: str, name: str) -> None:
        with contextlib.suppress(NotFound):
            self._json(
                f"delete {plural}",
                lambda: self._custom.delete_namespaced_custom_object(
                    GANG_API_GROUP,
                    GANG_API_VERSION,
                    namespace,
                    plural,
                    name,
                    _preload_content=False,
                    _request_timeout=self._timeout,
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
                GROUP,
                VERSION,
                namespace,
                TRAININGJOB_PLURAL,
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

    def get_configmap(self, namespace: str, name: str) -> Obj | None:
        try:
            return self._json(
                "get configmap",
                lambda: self._core.read_namespaced_config_map(
                    name, namespace, _preload_content=False, _request_timeout=self._timeout
                ),
            )
        except NotFound:
            return None

    def create_configmap(self, namespace: str, body: Mapping[str, Any]) -> Obj:
        return self._json(
            "create configmap",
            lambda: self._core.create_namespaced_config_map(
                namespace, dict(body), _preload_content=False, _request_timeout=self._timeout
            ),
            attempts=1,
        )

    def replace_configmap(self, namespace: str, name: str, body: Mapping[str, Any]) -> Obj:
        return self._json(
            "replace configmap",
            lambda: self._core.replace_namespaced_config_map(
                name, namespace, dict(body), _preload_content=False, _request_timeout=self._timeout
            ),
            attempts=1,
        )

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
