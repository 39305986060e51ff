"""``KubeListWatch``: the ``ListWatchSource`` of ``ClusterCache`` over the API server.

Adapter module (I/O through the official ``kubernetes`` client). Lists and watches Nodes, Pods,
TrainingJobs and the DRA kinds (DeviceClasses, ResourceSlices, ResourceClaims, DeviceTaintRules;
``NotServed`` where the server does not serve one in ``resource.k8s.io/v1``) with
``_preload_content=False`` and parses the raw JSON with orjson: no model deserialisation, so thousands of
pod events cost little. Watches ask for bookmarks so the resourceVersion keeps moving on quiet kinds; 410
Gone is raised as ``WatchGone`` for the cache to relist, and every other failure of the client as a
``scheduler.k8s.errors`` error (``ApiUnavailable`` while the server is down). Kept apart from
``scheduler.k8s.cache`` so the extender (which may not import ``kubernetes``) can use the cache.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson

from scheduler.k8s.cache import DRA_KINDS, Kind, NotServed, WatchGone
from scheduler.k8s.errors import Gone, NotFound, api_call
from scheduler.names import DRA_GROUP, DRA_VERSION, GROUP, TRAININGJOB_PLURAL, VERSION


def _not_served(kind: Kind) -> NotServed:
    return NotServed(f"the API server does not serve {DRA_GROUP}/{DRA_VERSION} {kind.value}")


class KubeListWatch:
    """``ListWatchSource`` over the API server, using the official client with raw JSON replies.

    ``namespace`` empty means all namespaces. Pods are listed without a field selector: terminal pods
    hold no GPUs and are ignored by the cache, but their deletion still has to be seen.
    """

    def __init__(self, api_client: Any, namespace: str = "", request_timeout_s: float = 30.0) -> None:
        from kubernetes import client

        self._core = client.CoreV1Api(api_client)
        self._custom = client.CustomObjectsApi(api_client)
        self._ns = namespace
        self._timeout = request_timeout_s

    def _call(self, kind: Kind, **kwargs: Any) -> Any:
        if kind in DRA_KINDS:
            # cluster-wide even for claims: a claim in any namespace holds devices on a node
            return self._custom.list_cluster_custom_object(
                DRA_GROUP, DRA_VERSION, kind.value, _preload_content=False, **kwargs
            )
        if kind is Kind.NODES:
            return self._core.list_node(_preload_content=False, **kwargs)
        if kind is Kind.PODS:
            if self._ns:
                return self._core.list_namespaced_pod(self._ns, _preload_content=False, **kwargs)
            return self._core.list_pod_for_all_namespaces(_preload_content=False, **kwargs)
        if self._ns:
            return self._custom.list_namespaced_custom_object(
                GROUP, VERSION, self._ns, TRAININGJOB_PLURAL, _preload_content=False, **kwargs
            )
        return self._custom.list_cluster_custom_object(
            GROUP, VERSION, TRAININGJOB_PLURAL, _preload_content=False, **kwargs
        )

    def pods_on(self, node: str, not_older_than: str = "") -> list[dict[str, Any]]:
        """The unfinished pods bound to ``node`` (in the cache's namespace scope), read from the API server
        now, not from a watch: at least as new as resourceVersion ``not_older_than`` (served from the API
        server's watch cache once it holds that version), or without one a consistent read."""
        selector = f"spec.nodeName={node},status.phase!=Succeeded,status.phase!=Failed"
        kwargs: dict[str, Any] = {"field_selector": selector, "_request_timeout": self._timeout}
        if not_older_than:
            kwargs.update(resource_version=not_older_than, resource_version_match="NotOlderThan")
        with api_call(f"list pods on node {node}"):
            resp = self._call(Kind.PODS, **kwargs)
            body = orjson.loads(resp.data)
        items = body.get("items") or []
        return [i for i in items if isinstance(i, dict)]

    def list(self, kind: Kind) -> tuple[list[dict[str, Any]], str]:
        try:
            with api_call(f"list {kind.value}"):
                resp = self._call(kind, _request_timeout=self._timeout)
                body = orjson.loads(resp.data)
        except NotFound:
            if kind is Kind.TRAININGJOBS:
                # CRD not installed yet: no TrainingJobs; the watch retries until it is
                return [], ""
            if kind in DRA_KINDS:
                raise _not_served(kind) from None
            raise
        items = body.get("items") or []
        rv = str((body.get("metadata") or {}).get("resourceVersion", ""))
        return items, rv

    def watch(self, kind: Kind, resource_version: str, timeout_seconds: int) -> Iterator[dict[str, Any]]:
        kwargs: dict[str, Any] = {
            "watch": True,
            "allow_watch_bookmarks": True,
            "timeout_seconds": timeout_seconds,
            # the server ends the watch after timeout_seconds; a silent connection is dead after a bit more
            "_request_timeout": (self._timeout, timeout_seconds + 30),
        }
        if resource_version:
            kwargs["resource_version"] = resource_version
        what = f"watch {kind.value}"
        try:
            with api_call(what):
                resp = self._call(kind, **kwargs)
        except Gone as exc:
            raise WatchGone(exc.detail) from exc
        except NotFound:
            if kind in DRA_KINDS:
                raise _not_served(kind) from None
            raise
        try:
            with api_call(what):
                buf = b""
                for chunk in resp.stream(amt=65536, decode_content=False):
                    buf += chunk
                    while True:
                        nl = buf.find(b"\n")
                        if nl < 0:
                            break
                        line, buf = buf[:nl], buf[nl + 1 :]
                        if line.strip():
                            yield orjson.loads(line)
                if buf.strip():
                    yield orjson.loads(buf)
        finally:
            resp.release_conn()
