"""KubeListWatch's direct read of the pods on one node (the extender's check of a gang's plan)."""

from __future__ import annotations

from typing import Any

import orjson

from scheduler.k8s.listwatch import KubeListWatch


class _Resp:
    def __init__(self, items: list[Any]) -> None:
        self.data = orjson.dumps({"metadata": {"resourceVersion": "7"}, "items": items})


class FakeCore:
    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    def list_pod_for_all_namespaces(self, **kw: Any) -> _Resp:
        self.calls.append(("all", (), kw))
        return _Resp([{"metadata": {"name": "p"}}, "not an object"])

    def list_namespaced_pod(self, namespace: str, **kw: Any) -> _Resp:
        self.calls.append(("namespaced", (namespace,), kw))
        return _Resp([])


def source(namespace: str = "") -> tuple[KubeListWatch, FakeCore]:
    lw = KubeListWatch.__new__(KubeListWatch)
    core = FakeCore()
    lw._core, lw._ns, lw._timeout = core, namespace, 3.0
    return lw, core


def test_pods_on_a_node_are_read_with_a_field_selector_and_no_resource_version() -> None:
    lw, core = source()
    assert lw.pods_on("a100-0") == [{"metadata": {"name": "p"}}]
    ((scope, _, kw),) = core.calls
    assert scope == "all"
    assert kw["field_selector"] == "spec.nodeName=a100-0,status.phase!=Succeeded,status.phase!=Failed"
    # no resourceVersion: a consistent read, not the API server's watch cache at some older version
    assert "resource_version" not in kw and kw["_preload_content"] is False


def test_pods_on_a_node_not_older_than_a_version_are_served_from_the_api_servers_cache() -> None:
    lw, core = source()
    lw.pods_on("a100-0", "1234")
    kw = core.calls[0][2]
    assert (kw["resource_version"], kw["resource_version_match"]) == ("1234", "NotOlderThan")


def test_pods_on_a_node_keep_the_caches_namespace_scope() -> None:
    lw, core = source("team-a")
    assert lw.pods_on("n1") == []
    assert core.calls[0][:2] == ("namespaced", ("team-a",))
