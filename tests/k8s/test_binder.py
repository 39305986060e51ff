"""KubeBinder: Binding bodies, idempotent conflicts, error mapping and the placement merge patch."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from kubernetes.client.exceptions import ApiException

from scheduler.core.errors import PermanentError, TemporaryError
from scheduler.k8s.binder import BindError, KubeBinder, TemporaryBindError


class _Resp:
    def __init__(self, data: dict[str, Any] | None = None) -> None:
        self.data = orjson.dumps(data or {})
        self.released = False

    def read(self) -> bytes:
        return self.data

    def release_conn(self) -> None:
        self.released = True


class FakeCore:
    """Stands in for CoreV1Api: records bindings; ``bind_error`` raises; ``node_of`` is the pod's nodeName."""

    def __init__(self, bind_error: ApiException | None = None, node_of: str = "") -> None:
        self.bind_error = bind_error
        self.node_of = node_of
        self.bodies: list[tuple[str, str, dict[str, Any], dict[str, Any]]] = []

    def create_namespaced_pod_binding(
        self, name: str, namespace: str, body: dict[str, Any], **kw: Any
    ) -> _Resp:
        self.bodies.append((name, namespace, body, kw))
        if self.bind_error is not None:
            raise self.bind_error
        return _Resp()

    def read_namespaced_pod(self, name: str, namespace: str, **kw: Any) -> _Resp:
        return _Resp({"metadata": {"name": name}, "spec": {"nodeName": self.node_of}})


class FakeCustom:
    def __init__(self, error: ApiException | None = None) -> None:
        self.patches: list[tuple[Any, ...]] = []
        self.error = error

    def patch_namespaced_custom_object_status(self, *args: Any, **kw: Any) -> _Resp:
        if self.error is not None:
            raise self.error
        self.patches.append(args)
        return _Resp()


def binder_with(core: FakeCore, custom: FakeCustom | None = None) -> KubeBinder:
    b = KubeBinder.__new__(KubeBinder)
    b._core = core  # type: ignore[attr-defined]
    b._custom = custom or FakeCustom()  # type: ignore[attr-defined]
    return b


def _api_error(status: int, message: str = "") -> ApiException:
    exc = ApiException(status=status, reason="x")
    exc.body = orjson.dumps({"kind": "Status", "message": message}).decode()
    return exc


def test_binding_body_carries_the_uid_and_skips_reply_parsing() -> None:
    core = FakeCore()
    binder_with(core).bind("ns", "p", "uid-1", "n1")
    name, ns, body, kw = core.bodies[0]
    assert (name, ns) == ("p", "ns")
    assert body == {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "p", "namespace": "ns", "uid": "uid-1"},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "n1"},
    }
    # _preload_content=False: the client would bind and then raise ValueError parsing the reply
    assert kw == {"_preload_content": False}


def test_conflict_on_the_same_node_is_success_elsewhere_an_error() -> None:
    conflict = _api_error(409, 'Operation cannot be fulfilled on pods/binding "p": pod p is already assigned')
    binder_with(FakeCore(conflict, node_of="n1")).bind("ns", "p", "u", "n1")  # idempotent
    with pytest.raises(BindError, match="pod ns/p is already bound to n2, not n1"):
        binder_with(FakeCore(conflict, node_of="n2")).bind("ns", "p", "u", "n1")


@pytest.mark.parametrize(
    ("status", "error", "match"),
    [
        (404, PermanentError, "pod ns/p no longer exists"),
        (422, PermanentError, r"binding ns/p to n1 failed \(422\): bad target"),
        (503, TemporaryError, "API server answered 503"),
    ],
)
def test_api_errors_map_to_permanent_or_temporary(status: int, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        binder_with(FakeCore(_api_error(status, "bad target"))).bind("ns", "p", "u", "n1")


def test_placement_is_a_status_merge_patch() -> None:
    custom = FakeCustom()
    binder_with(FakeCore(), custom).record_placement("ns", "tj", {"tj-w0": "n1"})
    assert custom.patches == [
        ("perfsched.dev", "v1alpha1", "ns", "trainingjobs", "tj", {"status": {"placement": {"tj-w0": "n1"}}})
    ]
    with pytest.raises(TemporaryBindError, match="recording placement on TrainingJob ns/tj failed"):
        binder_with(FakeCore(), FakeCustom(_api_error(404, "not found"))).record_placement("ns", "tj", {})
