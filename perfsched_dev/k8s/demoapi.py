"""The few Kubernetes calls the demo makes that the operator's ``KubeApi`` does not have.

Impure adapter: create the demo namespace and TrainingJobs, list TrainingJobs and the Events about them.
Errors become ``scheduler.core.errors`` exceptions so the runner never imports ``kubernetes``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import orjson

from perfsched_dev.k8s.bootstrap import create_namespace
from scheduler.k8s.connect import api_client
from scheduler.k8s.errors import api_call
from scheduler.names import GROUP, TRAININGJOB_PLURAL, VERSION

log = logging.getLogger(__name__)


class DemoApi:
    """TrainingJobs and Events of one namespace, through the official client."""

    def __init__(self, kubeconfig: str, namespace: str) -> None:
        from kubernetes import client as k8s

        self.namespace = namespace
        self._api = api_client(kubeconfig)
        self._custom = k8s.CustomObjectsApi(self._api)
        self._core = k8s.CoreV1Api(self._api)

    def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        with api_call(what):
            return fn(*args, **kwargs)

    def ensure_namespace(self) -> None:
        create_namespace(self._api, self.namespace, {"app.kubernetes.io/part-of": "perfsched-demo"})

    def create_trainingjob(self, body: Mapping[str, Any]) -> None:
        name = body["metadata"]["name"]
        self._call(
            f"create TrainingJob {name}",
            self._custom.create_namespaced_custom_object,
            GROUP,
            VERSION,
            self.namespace,
            TRAININGJOB_PLURAL,
            dict(body),
        )

    def list_trainingjobs(self) -> list[dict[str, Any]]:
        out = self._call(
            "list TrainingJobs",
            self._custom.list_namespaced_custom_object,
            GROUP,
            VERSION,
            self.namespace,
            TRAININGJOB_PLURAL,
        )
        return list(out.get("items", []))

    def recent_events(self, limit: int = 6) -> list[tuple[str, str, str, str]]:
        """The newest Events about TrainingJobs: (time, job, reason, message), newest first."""
        out = self._call(
            "list Events",
            self._core.list_namespaced_event,
            self.namespace,
            field_selector="involvedObject.kind=TrainingJob",
            _preload_content=False,
        )
        with api_call("list Events"):
            items = orjson.loads(out.data).get("items", [])

        def when(e: Mapping[str, Any]) -> str:
            return str(
                e.get("lastTimestamp")
                or e.get("eventTime")
                or e.get("firstTimestamp")
                or e.get("metadata", {}).get("creationTimestamp")
                or ""
            )

        items.sort(key=when, reverse=True)
        return [
            (
                when(e)[11:19],
                str(e.get("involvedObject", {}).get("name", "")),
                str(e.get("reason", "")),
                str(e.get("message", "")),
            )
            for e in items[:limit]
        ]
