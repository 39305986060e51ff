"""Golden wire JSON of every verb, byte for byte where kube-scheduler's Go types fix the bytes.

Fixtures: the samples of ``docs`` control-plane reference §6.1 and the encodings of
``k8s.io/kube-scheduler/extender/v1`` ``TestCompatibility`` (which also decodes all-lowercase keys).
"""

from __future__ import annotations

from collections.abc import Callable

import orjson
from fastapi.testclient import TestClient

from scheduler.extender import wire
from tests.extender.kube import fed_cache, kube_node, kube_pod

# Go's encodings from extender/v1 TestCompatibility (an empty Go Node/Pod, as encoding/json writes it)
GO_EXTENDER_ARGS = (
    '{"Pod":{"metadata":{"name":"podname"},"spec":{"containers":null},"status":{}},'
    '"Nodes":{"metadata":{},"items":[{"metadata":{"name":"nodename"},"spec":{},"status":{"daemonEndpoints":'
    '{"kubeletEndpoint":{"Port":0}},"nodeInfo":{"machineID":"","systemUUID":"","bootID":"","kernelVersion":"",'
    '"osImage":"","containerRuntimeVersion":"","kubeletVersion":"","kubeProxyVersion":"","operatingSystem":"",'
    '"architecture":""}}}]},"NodeNames":["node1"]}'
)
GO_BINDING_ARGS = (
    '{"PodName":"mypodname","PodNamespace":"mypodnamespace","PodUID":"mypoduid","Node":"mynode"}'
)
GO_PREEMPTION_ARGS = (
    '{"Pod":{"metadata":{"name":"podname"},"spec":{"containers":null},"status":{}},'
    '"NodeNameToVictims":{"foo":{"Pods":[{"metadata":{"name":"podname"},"spec":{"containers":null},'
    '"status":{}}],"NumPDBViolations":1}},"NodeNameToMetaVictims":{"foo":{"Pods":[{"UID":"myuid"}],'
    '"NumPDBViolations":1}}}'
)


def test_go_extender_args_parse_with_pascal_and_lower_case_keys() -> None:
    for text in (GO_EXTENDER_ARGS, GO_EXTENDER_ARGS.lower()):
        args = wire.parse_extender_args(orjson.loads(text))
        # with both present (only Go's test does that) the node names win, as nodeCacheCapable does
        assert args.names == ["node1"] and args.node_objects is None
        assert args.pod["metadata"]["name"] == "podname"
    no_names = orjson.loads(GO_EXTENDER_ARGS)
    no_names["NodeNames"] = None
    args = wire.parse_extender_args(no_names)
    assert args.names == ["nodename"] and args.node_objects is not None


def test_go_types_validate_against_the_pydantic_models() -> None:
    assert wire.ExtenderArgs.model_validate_json(GO_EXTENDER_ARGS).NodeNames == ["node1"]
    bind = wire.parse_binding_args(orjson.loads(GO_BINDING_ARGS))
    assert (bind.PodName, bind.PodNamespace, bind.PodUID, bind.Node) == (
        "mypodname",
        "mypodnamespace",
        "mypoduid",
        "mynode",
    )
    # lower-case keys decode too (Go is case-insensitive)
    assert wire.parse_binding_args(orjson.loads(GO_BINDING_ARGS.lower())).Node == "mynode"
    pre = wire.parse_preemption_args(orjson.loads(GO_PREEMPTION_ARGS))
    assert pre.NodeNameToMetaVictims is not None and pre.NodeNameToMetaVictims["foo"].Pods is not None
    # Go's own reply encodings round-trip through our models with the exact bytes
    result = wire.ExtenderPreemptionResult.model_validate_json(
        '{"NodeNameToMetaVictims":{"foo":{"Pods":[{"UID":"myuid"}],"NumPDBViolations":1}}}'
    )
    assert result.model_dump_json() == (
        '{"NodeNameToMetaVictims":{"foo":{"Pods":[{"UID":"myuid"}],"NumPDBViolations":1}}}'
    )
    assert wire.HostPriority(Host="myhost", Score=1).model_dump_json() == '{"Host":"myhost","Score":1}'
    assert wire.ExtenderBindingResult(Error="myerror").model_dump_json() == '{"Error":"myerror"}'


def _doc_cluster() -> tuple[list[dict], list[dict]]:
    # gpu-node-1 has 2 GPUs with 1 held by a running pod: 2 - 1 = 1 free
    nodes = [kube_node("gpu-node-0", "A100", 8), kube_node("gpu-node-1", "A100", 2)]
    pods = [kube_pod("busy", 1, node="gpu-node-1")]
    return nodes, pods


def test_filter_reply_with_full_node_objects_is_the_documented_shape(
    client_for: Callable[..., TestClient],
) -> None:
    client = client_for(fed_cache(*_doc_cluster()))
    # the control-plane reference §6.1 filter request, verbatim
    body = (
        b'{"Pod":{"metadata":{"name":"tj-a-w0","namespace":"team-a","uid":"6f1c"},'
        b'"spec":{"containers":[{"name":"main","resources":{"limits":{"nvidia.com/gpu":"2"}}}]}},'
        b'"Nodes":{"metadata":{},"items":[{"metadata":{"name":"gpu-node-0"}},{"metadata":{"name":"gpu-node-1"}}]},'
        b'"NodeNames":null}'
    )
    r = client.post("/filter", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 200
    assert r.content == (
        b'{"Nodes":{"metadata":{},"items":[{"metadata":{"name":"gpu-node-0"}}]},"NodeNames":null,'
        b'"FailedNodes":{"gpu-node-1":"perfsched: needs 2 nvidia.com/gpu of type A100, node has 1 free"},'
        b'"FailedAndUnresolvableNodes":{},"Error":""}'
    )
    wire.ExtenderFilterResult.model_validate_json(r.content)


def test_filter_reply_with_node_names(client_for: Callable[..., TestClient]) -> None:
    client = client_for(fed_cache(*_doc_cluster()))
    pod = kube_pod("tj-a-w0", 2)
    r = client.post("/filter", json={"Pod": pod, "Nodes": None, "NodeNames": ["gpu-node-0", "gpu-node-1"]})
    assert r.json() == {
        "Nodes": None,
        "NodeNames": ["gpu-node-0"],
        "FailedNodes": {"gpu-node-1": "perfsched: needs 2 nvidia.com/gpu of type A100, node has 1 free"},
        "FailedAndUnresolvableNodes": {},
        "Error": "",
    }


def test_prioritize_reply_is_a_host_priority_list(client_for: Callable[..., TestClient]) -> None:
    client = client_for(fed_cache(*_doc_cluster()))
    pod = kube_pod("p", 1)
    r = client.post(
        "/prioritize", json={"Pod": pod, "Nodes": None, "NodeNames": ["gpu-node-0", "gpu-node-1"]}
    )
    # packing only (no model annotations): gpu-node-0 8 free - 1 = 7 left of 8 -> 10 x 1/8 = 1.25 -> 1;
    # gpu-node-1 1 free - 1 = 0 left -> 10
    assert r.content == b'[{"Host":"gpu-node-0","Score":1},{"Host":"gpu-node-1","Score":10}]'


def test_bind_reply_is_exactly_an_empty_error_on_success(
    client_for: Callable[..., TestClient], binder
) -> None:  # type: ignore[no-untyped-def]
    cache = fed_cache(
        [kube_node("mynode", "A100", 8)], [kube_pod("mypodname", 1, namespace="mypodnamespace")]
    )
    client = client_for(cache)
    r = client.post("/bind", content=GO_BINDING_ARGS.encode(), headers={"content-type": "application/json"})
    assert r.status_code == 200 and r.content == b'{"Error":""}'
    assert binder.binds == [("mypodnamespace", "mypodname", "mypoduid", "mynode")]


def test_preempt_reply_is_meta_victims(client_for: Callable[..., TestClient]) -> None:
    nodes = [kube_node("foo", "A100", 2)]
    victim = kube_pod("podname", 2, node="foo", uid="myuid")
    cache = fed_cache(nodes, [victim])
    client = client_for(cache)
    args = orjson.loads(GO_PREEMPTION_ARGS)
    args["Pod"] = kube_pod("high", 2)
    args["NodeNameToVictims"] = None
    r = client.post("/preempt", json=args)
    assert r.status_code == 200
    # foo: 0 free + 2 from the victim >= 2 asked: kept with its victim and PDB count
    assert r.content == b'{"NodeNameToMetaVictims":{"foo":{"Pods":[{"UID":"myuid"}],"NumPDBViolations":1}}}'
    assert cache.synced
