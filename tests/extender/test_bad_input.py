"""Bad input never crashes the extender: malformed bodies get a 4xx naming the problem, never a 500.

Hypothesis throws arbitrary JSON and mutated valid requests at every verb; schemathesis checks the
routes against the app's own OpenAPI schema.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import orjson
import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error

from scheduler.extender import create_app
from scheduler.settings import Settings
from tests.extender.conftest import FakeBinder, FakeOracle
from tests.extender.kube import fed_cache, kube_node, kube_pod, kube_tj

VERBS = ["/filter", "/prioritize", "/bind", "/preempt"]


def make_client() -> TestClient:
    nodes = [kube_node("a", "A100", 8, rack="r1", domain="d1"), kube_node("b", "V100", 4, rack="r1")]
    pods = [kube_pod("tj-w0", 2, job="tj", replica=0, node="a"), kube_pod("tj-w1", 2, job="tj", replica=1)]
    cache = fed_cache(nodes, pods, [kube_tj("tj", replicas=2, gpus=2)])
    return TestClient(
        create_app(Settings(extender_max_body_bytes=4096), cache, FakeOracle(), binder=FakeBinder())
    )


CLIENT = make_client()


@pytest.mark.parametrize(
    ("verb", "body", "status", "message"),
    [
        ("/filter", b"{not json", 400, "request body is not valid JSON"),
        ("/filter", b"", 400, "request body is empty"),
        ("/filter", b"[]", 400, "request body: expected a JSON object (ExtenderArgs), got a list"),
        ("/filter", b'{"Pod": 3, "NodeNames": []}', 400, "Pod: expected a Pod object, got int"),
        ("/filter", b'{"Pod": {"metadata": {}}, "NodeNames": []}', 400, "Pod.metadata.name: missing"),
        ("/filter", b'{"Pod": {"metadata": {"name": "p"}}}', 400, "Nodes and NodeNames are both null"),
        (
            "/prioritize",
            b'{"Pod": {"metadata": {"name": "p"}}, "NodeNames": "a"}',
            400,
            "NodeNames: expected a list",
        ),
        (
            "/prioritize",
            b'{"Pod": {"metadata": {"name": "p"}}, "NodeNames": [1]}',
            400,
            "NodeNames[0]: expected a string",
        ),
        (
            "/filter",
            b'{"Pod": {"metadata": {"name": "p"}}, "Nodes": {"items": [{"metadata": {}}]}}',
            400,
            "Nodes.items[0].metadata.name: missing",
        ),
        (
            "/filter",
            b'{"Pod": {"metadata": {"name": "p"}, "spec": {"containers": [{"resources": {"limits": '
            b'{"nvidia.com/gpu": "two"}}}]}}, "NodeNames": ["a"]}',
            400,
            "Pod /p.spec.containers[0].resources.limits[nvidia.com/gpu]: expected a whole number of GPUs",
        ),
        ("/bind", b'{"PodName": "p"}', 400, "ExtenderBindingArgs: PodNamespace: Field required"),
        (
            "/bind",
            b'{"PodName": 3, "PodNamespace": "n", "Node": "a"}',
            400,
            "PodName: Input should be a valid string",
        ),
        (
            "/preempt",
            b'{"Pod": {"metadata": {"name": "p"}}, "NodeNameToMetaVictims": {"a": 1}}',
            400,
            "ExtenderPreemptionArgs",
        ),
        (
            "/filter",
            b'{"Pod": {"metadata": {"name": "p"}}, "NodeNames": ["' + b"x" * 5000 + b'"]}',
            413,
            "over the limit",
        ),
    ],
)
def test_bad_bodies_get_a_4xx_naming_the_problem(verb: str, body: bytes, status: int, message: str) -> None:
    r = CLIENT.post(verb, content=body, headers={"content-type": "application/json"})
    assert r.status_code == status
    assert message in r.json()["Error"]


def test_body_over_the_limit_without_content_length_is_refused() -> None:
    def chunks():  # type: ignore[no-untyped-def]
        for _ in range(10):
            yield b" " * 1000

    r = CLIENT.post("/filter", content=chunks(), headers={"content-type": "application/json"})
    assert r.status_code == 413


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**40), 2**40)
    | st.floats(allow_nan=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)

VALID: dict[str, Any] = {
    "/filter": {
        "Pod": kube_pod("tj-w1", 2, job="tj", replica=1),
        "Nodes": None,
        "NodeNames": ["a", "b", "zz"],
    },
    "/prioritize": {
        "Pod": kube_pod("p", 2, model="resnet50", batch_size=64),
        "Nodes": None,
        "NodeNames": ["a", "b"],
    },
    "/bind": {"PodName": "tj-w1", "PodNamespace": "team-a", "PodUID": "uid-team-a-tj-w1", "Node": "b"},
    "/preempt": {
        "Pod": kube_pod("p", 2),
        "NodeNameToVictims": None,
        "NodeNameToMetaVictims": {"a": {"Pods": [{"UID": "uid-team-a-tj-w0"}], "NumPDBViolations": 0}},
    },
}


def _paths(obj: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out += _paths(v, (*prefix, i))
    return out


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(verb=st.sampled_from(VERBS), body=json_values)
def test_arbitrary_json_never_causes_a_500(verb: str, body: Any) -> None:
    r = CLIENT.post(verb, content=orjson.dumps(body), headers={"content-type": "application/json"})
    assert r.status_code in (200, 400, 413), r.text


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(verb=st.sampled_from(VERBS), data=st.data())
def test_mutated_valid_requests_never_cause_a_500(verb: str, data: st.DataObject) -> None:
    body = copy.deepcopy(VALID[verb])
    path = data.draw(st.sampled_from(_paths(body)[1:]))
    replacement = data.draw(json_values)
    target = body
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = replacement
    r = CLIENT.post(verb, content=orjson.dumps(body), headers={"content-type": "application/json"})
    assert r.status_code in (200, 400, 413), r.text
    if r.status_code == 200 and verb == "/prioritize":
        assert all(0 <= e["Score"] <= 10 for e in r.json())


def test_openapi_schema_names_the_wire_types() -> None:
    spec = CLIENT.get("/openapi.json").json()
    assert spec["paths"]["/filter"]["post"]["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/ExtenderArgs"
    }
    schemas = spec["components"]["schemas"]
    assert {"ExtenderArgs", "ExtenderFilterResult", "HostPriority", "ExtenderBindingArgs"} <= set(schemas)
    assert set(schemas["ExtenderFilterResult"]["properties"]) == {
        "Nodes",
        "NodeNames",
        "FailedNodes",
        "FailedAndUnresolvableNodes",
        "Error",
    }


SCHEMA = schemathesis.openapi.from_asgi("/openapi.json", CLIENT.app)


@SCHEMA.parametrize()
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
def test_schemathesis_finds_no_server_errors(case: Any) -> None:
    """Every route, with bodies generated from the app's own OpenAPI schema: no 5xx, replies as documented."""
    case.call_and_validate(checks=[not_a_server_error])


def test_health_ready_and_metrics(client_for: Callable[..., TestClient]) -> None:
    from scheduler.k8s.cache import ClusterCache, Kind

    cache = ClusterCache()
    client = client_for(cache)
    assert client.get("/healthz").status_code == 200
    r = client.get("/readyz")
    assert r.status_code == 503 and r.json()["waiting_for"] == [k.value for k in Kind]
    assert r.json()["waiting_for"][:3] == ["nodes", "pods", "trainingjobs"]
    for kind in Kind:
        cache.replace(kind, [], "1")
    assert client.get("/readyz").status_code == 200
    client.post("/filter", json={"Pod": kube_pod("p", 1), "NodeNames": ["nowhere"]})
    text = client.get("/metrics").text
    for series in (
        'perfsched_extender_request_duration_seconds_bucket{le="0.001",verb="filter"}',
        'perfsched_extender_filter_rejections_total{reason="unknown_node"}',
        'perfsched_extender_filter_nodes_count{stage="in"}',
        'perfsched_extender_cache_age_seconds{kind="pods"}',
    ):
        assert series in text


LONG = "p" * 300


@pytest.mark.parametrize(
    ("verb", "body", "message"),
    [
        # a 300-character pod name: Kubernetes names are DNS-1123 subdomains of at most 253 characters
        ("/bind", {"PodName": LONG, "PodNamespace": "ns", "Node": "a"}, "PodName: 300 characters"),
        ("/bind", {"PodName": "p", "PodNamespace": "n" * 64, "Node": "a"}, "PodNamespace: 64 characters"),
        ("/bind", {"PodName": "p", "PodNamespace": "ns", "PodUID": "u" * 129, "Node": "a"}, "PodUID: 129"),
        ("/bind", {"PodName": "p", "PodNamespace": "ns", "Node": "a" * 254}, "Node: 254 characters"),
        ("/bind", {"PodName": "P_Q", "PodNamespace": "ns", "Node": "a"}, "PodName: P_Q is not a DNS-1123"),
        ("/bind", {"PodName": "p", "PodNamespace": "a.b", "Node": "a"}, "PodNamespace: a.b is not"),
        ("/filter", {"Pod": {"metadata": {"name": LONG}}, "NodeNames": ["a"]}, "Pod.metadata.name: 300"),
        ("/prioritize", {"Pod": {"metadata": {"name": "p"}}, "NodeNames": ["a", "n" * 254]}, "NodeNames[1]"),
        ("/preempt", {"Pod": {"metadata": {"name": "p", "namespace": "N S"}}}, "Pod.metadata.namespace"),
    ],
)
def test_names_over_kubernetes_limits_get_a_400_naming_the_field(
    verb: str, body: dict[str, Any], message: str, caplog: pytest.LogCaptureFixture
) -> None:
    r = CLIENT.post(verb, json=body)
    assert r.status_code == 400
    assert message in r.json()["Error"]
    # what the reply and the log quote of the request is capped
    assert len(r.json()["Error"]) < 400
    assert all(len(rec.getMessage()) < 1200 for rec in caplog.records)


def test_a_huge_pod_name_is_refused_without_binding_or_quoting_it_whole(
    caplog: pytest.LogCaptureFixture,
) -> None:
    binder = FakeBinder()
    cache = fed_cache([kube_node("a", "A100", 8)])
    client = TestClient(create_app(Settings(), cache, FakeOracle(), binder=binder))
    name = "p" * 1_000_000
    r = client.post("/bind", json={"PodName": name, "PodNamespace": "ns", "PodUID": "u", "Node": "a"})
    assert r.status_code == 400
    assert r.json()["Error"] == "PodName: 1000000 characters, over Kubernetes' limit of 253"
    assert binder.binds == []
    assert all(len(rec.getMessage()) < 1200 for rec in caplog.records)


def test_an_internal_error_is_counted_logged_with_the_request_and_answered(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    from scheduler import metrics
    from scheduler.extender import filtering, scoring

    def boom(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("a bug")

    client = make_client()
    monkeypatch.setattr(filtering.Filter, "__call__", boom)
    monkeypatch.setattr(scoring.Scorer, "__call__", boom)

    def errors(verb: str) -> float:
        return metrics.REGISTRY.get_sample_value("perfsched_extender_errors_total", {"verb": verb}) or 0.0

    before = errors("filter"), errors("prioritize")
    body = {"Pod": kube_pod("p", 1), "NodeNames": ["a", "b"]}
    r = client.post("/filter", json=body)
    # filter: the attempt fails with the wire's Error field (kube-scheduler retries the pod)
    assert r.status_code == 200
    assert r.json()["Error"] == "perfsched: internal error in filter: a bug"
    # prioritize: neutral scores (kube-scheduler ignores prioritize errors anyway)
    r = client.post("/prioritize", json=body)
    assert r.json() == [{"Host": "a", "Score": 0}, {"Host": "b", "Score": 0}]
    assert (errors("filter"), errors("prioritize")) == (before[0] + 1, before[1] + 1)
    logged = [rec for rec in caplog.records if rec.levelname == "ERROR"]
    assert len(logged) == 2
    # the request is logged with the error, cut at 256 characters
    assert all(rec.request.startswith('{"Pod":') for rec in logged)  # type: ignore[attr-defined]
    assert all("more characters)" in rec.request for rec in logged)  # type: ignore[attr-defined]
