"""Binding pods to nodes and recording a gang's placement on its TrainingJob.

Adapter module (I/O through the official ``kubernetes`` client). ``KubeBinder.bind`` creates the pod's
``Binding`` (``POST .../pods/{name}/binding``) with ``_preload_content=False``: the client would otherwise
bind and then raise ``ValueError: Invalid value for `target``` while parsing the reply
(kubernetes-client/python#825). The Binding carries the pod's UID, so a pod deleted and recreated under
the same name is never bound by a stale request. Binding is idempotent: when the API answers 409
Conflict because the pod is already bound, the pod is read back and the call succeeds if it is on the
requested node. Client failures go through ``scheduler.k8s.errors.api_call``: the API server being
unreachable, timing out or answering 429/5xx is a ``TemporaryBindError`` (kube-scheduler retries the pod),
anything else a ``BindError``.

The gang's placement is recorded as a JSON merge patch of ``status.placement`` (``{pod name: node}``)
through the TrainingJob's status subresource. A merge patch only touches the keys it names, so it does
not race with the operator's own status writes as long as those are patches too (they are); it needs
no resourceVersion and never conflicts. Placement recording is best effort: a failure is logged and
counted by the caller, and the bind still succeeds (the pods' ``spec.nodeName`` is the ground truth).
"""

from __future__ import annotations

import logging
from typing import Any

import orjson

from scheduler.core.errors import PermanentError, TemporaryError
from scheduler.k8s.errors import AlreadyExists, ApiUnavailable, Conflict, KubeApiError, NotFound, api_call
from scheduler.names import GROUP, TRAININGJOB_PLURAL, VERSION

log = logging.getLogger(__name__)


class BindError(PermanentError):
    """The pod could not be bound to the node; the message says why (shown in the pod's events)."""


class TemporaryBindError(TemporaryError):
    """The bind failed for a reason a retry may fix (API unavailable, timeout)."""


class KubeBinder:
    """The extender's ``Binder`` (``scheduler.extender.app.Binder``) over the API server."""

    def __init__(self, api_client: Any) -> None:
        from kubernetes import client

        self._core = client.CoreV1Api(api_client)
        self._custom = client.CustomObjectsApi(api_client)

    def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "namespace": namespace},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        if uid:
            body["metadata"]["uid"] = uid
        what = f"binding {namespace}/{name} to {node}"
        try:
            with api_call(what):
                _drain(
                    self._core.create_namespaced_pod_binding(name, namespace, body, _preload_content=False)
                )
            return
        except (Conflict, AlreadyExists) as exc:
            current = self._node_of(namespace, name)
            if current == node:
                return  # already bound where we wanted it: idempotent success
            if current:
                raise BindError(f"pod {namespace}/{name} is already bound to {current}, not {node}") from None
            raise BindError(f"{what} conflicted: {exc.detail}") from None
        except NotFound:
            raise BindError(f"pod {namespace}/{name} no longer exists") from None
        except KubeApiError as exc:
            if isinstance(exc, TemporaryError):  # unreachable, timed out, 429, 5xx: kube-scheduler retries
                answered = f"API server answered {exc.status}" if exc.status else "API server unreachable"
                raise TemporaryBindError(f"{answered} {what}: {exc.detail}") from None
            raise BindError(f"{what} failed ({exc.status}): {exc.detail}") from None

    def _node_of(self, namespace: str, name: str) -> str:
        try:
            with api_call(f"reading pod {namespace}/{name}"):
                resp = self._core.read_namespaced_pod(name, namespace, _preload_content=False)
                pod = orjson.loads(resp.data)
        except KubeApiError:
            return ""
        return str((pod.get("spec") or {}).get("nodeName") or "")

    def record_placement(self, namespace: str, job_name: str, placement: dict[str, str]) -> None:
        """Merge ``placement`` into the TrainingJob's ``status.placement`` (retries a dropped link)."""
        what = f"recording placement on TrainingJob {namespace}/{job_name}"
        for attempt in range(3):
            try:
                with api_call(what):
                    _drain(
                        self._custom.patch_namespaced_custom_object_status(
                            GROUP,
                            VERSION,
                            namespace,
                            TRAININGJOB_PLURAL,
                            job_name,
                            {"status": {"placement": placement}},
                            _preload_content=False,
                        )
                    )
                return
            except ApiUnavailable as exc:
                if exc.status == 0 and attempt < 2:  # a dropped connection: try again
                    continue
                raise TemporaryBindError(f"{what} failed: {exc.detail}") from None
            except KubeApiError as exc:
                raise TemporaryBindError(f"{what} failed ({exc.status}): {exc.detail}") from None


def _drain(resp: Any) -> None:
    """Read a raw reply to its end, then give the connection back to the pool.

    Releasing a connection whose reply was not read leaves that reply in the socket, and the next request
    on the pooled connection fails with ``ResponseNotReady``.
    """
    try:
        resp.read()
    finally:
        resp.release_conn()
