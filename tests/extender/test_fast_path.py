"""The vectorised filter and prioritize (``Decider.filter_fast`` / ``prioritize_fast``) answer what the
general path answers, byte for byte, as the cache changes under them; and a ``NodeNames`` text is
recognised only where it really is the request's array.

The general path (``Decider.filter`` + the app's reply builder, ``prioritize_classes`` +
``host_priority_list``) is the reference: a second ``Decider`` over the same cache answers it, so that
neither side's memo tables (gang plans, scores) feed the other.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.extender import wire
from scheduler.extender.app import _filter_reply, host_priority_bytes, host_priority_list
from scheduler.extender.decide import Decider, Weights
from scheduler.k8s.cache import ClusterCache, Kind
from tests.extender.conftest import FakeOracle
from tests.extender.kube import fed_cache, kube_node, kube_pod, kube_tj

TYPES = [("A100", 8), ("V100", 8), ("T4", 4), ("A100", 4)]


def _cluster(rng: random.Random, n: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    nodes, pods = [], []
    for i in range(n):
        gpu_type, gpus = TYPES[rng.randrange(len(TYPES))]
        kind = rng.random()
        if kind < 0.05:
            gpu_type, gpus = "", 0  # a CPU node: its reason names it
        nodes.append(
            kube_node(
                f"n{i:03d}",
                gpu_type,
                gpus,
                rack=f"r{i // 6}",
                domain=f"d{i // 3}" if gpu_type == "A100" and rng.random() < 0.5 else "",
                unschedulable=0.05 <= kind < 0.1,  # cordoned: its reason names it too
            )
        )
        used = rng.randint(0, gpus)
        if used:
            pods.append(kube_pod(f"busy-{i}", used, node=f"n{i:03d}", namespace="load"))
    return nodes, pods


def _general(decider: Decider, pod: dict[str, Any], names: list[str]) -> tuple[bytes, bytes, Any]:
    args = wire.ParsedArgs(pod, names, None, True)
    outcome = decider.filter(pod, names, None)
    keys, scores = decider.prioritize_classes(pod, names, None)
    return _filter_reply(outcome, args), host_priority_list(names, keys, scores), outcome


def _fast(decider: Decider, pod: dict[str, Any], names: list[str], key: str) -> tuple[bytes, bytes, Any]:
    fast = decider.filter_fast(pod, names, key)
    scores = decider.prioritize_fast(pod, names, key)
    assert fast is not None and scores is not None
    return fast.reply, host_priority_bytes(names, scores), fast


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    seed=st.integers(0, 2**32 - 1),
    weights=st.sampled_from([(6.0, 3.0, 1.0), (0.0, 3.0, 1.0), (6.0, 0.0, 0.0)]),
)
def test_fast_paths_answer_what_the_general_path_answers(
    seed: int, weights: tuple[float, float, float]
) -> None:
    """Random clusters, pods (lone, typed, gang members with replicas bound and planned) and name lists
    (subsets, new orders, the same list again), with binds, releases, node changes between calls."""
    rng = random.Random(seed)
    nodes, pods = _cluster(rng, rng.randint(5, 60))
    jobs = [
        kube_tj("tj", replicas=3, gpus=2, alloc_replicas=3, gpu_type="A100"),
        kube_tj("tjany", replicas=2, gpus=4, allowed=["A100", "V100"]),
    ]
    placed = rng.choice([n["metadata"]["name"] for n in nodes])
    pods.append(kube_pod("tj-w0", 2, job="tj", replica=0, node=placed, gpu_type="A100"))
    cache = fed_cache(nodes, pods, jobs)
    w = Weights(*weights)
    fast_side = Decider(cache, FakeOracle(), weights=w)
    general_side = Decider(cache, FakeOracle(), weights=w)
    all_names = [n["metadata"]["name"] for n in nodes]
    requests = [
        kube_pod("lone", rng.randint(1, 8), model="resnet50", batch_size=64),
        kube_pod("typed", 2, gpu_type=rng.choice(["A100", "V100", "T4"]), model="resnet50", batch_size=64),
        kube_pod("nomodel", rng.randint(1, 4)),
        kube_pod("tj-w1", 2, job="tj", replica=1, gpu_type="A100", world_size=3),
        kube_pod(
            "tj-w2", 2, job="tj", replica=2, gpu_type="A100", planned=rng.choice(all_names), world_size=3
        ),
        kube_pod(f"tjany-w0-{seed}", 4, job="tjany", replica=0, world_size=2),
    ]
    for step in range(4):
        names = rng.sample(all_names, rng.randint(0, len(all_names)))
        for pod in requests:
            for key in ("", '","'.join(names)):  # without and with the name-list memo
                got = _fast(fast_side, pod, names, key)
                want = _general(general_side, pod, names)
                assert got[0] == want[0], f"filter differs for {pod['metadata']['name']} at step {step}"
                assert got[1] == want[1], f"prioritize differs for {pod['metadata']['name']} at step {step}"
                assert got[2].categories == want[2].categories
                assert got[2].passed == len(want[2].passed)
        # the cluster moves: a bind, a reservation released, a node cordoned or added, a pod gone
        victim = rng.choice(all_names)
        event = step % 4
        if event == 0:
            cache.apply(Kind.PODS, "ADDED", kube_pod(f"new-{step}", 1, node=victim, namespace="load"))
        elif event == 1:
            cache.assume("load", "r1", "u-r1", victim, 1)
        elif event == 2:
            cache.apply(Kind.NODES, "MODIFIED", kube_node(victim, "V100", 8, rack="r0", unschedulable=True))
        else:
            cache.apply(Kind.NODES, "ADDED", kube_node(f"late-{step}", "A100", 8, rack="r1"))
            all_names.append(f"late-{step}")


def test_unknown_or_repeated_names_leave_the_answer_to_the_general_path() -> None:
    cache = fed_cache([kube_node("a", "A100", 8), kube_node("b", "A100", 8)])
    decider = Decider(cache, FakeOracle())
    pod = kube_pod("p", 2)
    assert decider.filter_fast(pod, ["a", "ghost"], "") is None  # not in the cache: a reason of its own
    assert decider.filter_fast(pod, ["a", "b", "a"], "") is None  # twice: the reply's object keeps one
    assert decider.prioritize_fast(pod, ["ghost"], "") is None
    fast = decider.filter_fast(pod, ["b", "a"], "")
    assert fast is not None
    assert orjson.loads(fast.reply)["NodeNames"] == ["b", "a"]


def test_a_pod_without_gpus_is_left_to_the_general_path_by_filter_and_scores_zero() -> None:
    cache = fed_cache([kube_node("a", "A100", 8)])
    decider = Decider(cache, FakeOracle())
    pod = kube_pod("cpu-only", 0)
    assert decider.filter_fast(pod, ["a"], "") is None
    scores = decider.prioritize_fast(pod, ["a"], "")
    assert scores is not None and scores.tolist() == [0]


@pytest.mark.parametrize(
    ("scores", "want"),
    [
        ([], b"[]"),
        ([10], b'[{"Host":"a","Score":10}]'),
        ([0, 7], b'[{"Host":"a","Score":0},{"Host":"b","Score":7}]'),
    ],
)
def test_host_priority_bytes_is_the_wire_list(scores: list[int], want: bytes) -> None:
    names = ["a", "b"][: len(scores)]
    got = host_priority_bytes(names, np.array(scores, dtype=np.int64))
    assert got == want
    assert got == orjson.dumps([{"Host": h, "Score": s} for h, s in zip(names, scores, strict=True)])


POD = {"metadata": {"name": "p", "namespace": "ns"}, "spec": {}}


def _body(text: str) -> tuple[Any, bytes]:
    raw = text.encode()
    return orjson.loads(raw), raw


def test_a_names_text_sent_again_is_recognised_and_names_the_same_list() -> None:
    texts = wire.NameTexts()
    body, raw = _body('{"Pod":' + orjson.dumps(POD).decode() + ',"Nodes":null,"NodeNames":["a","b"]}\n')
    first = wire.parse_extender_args(body, raw, texts)
    assert first.names_key == b'["a","b"]' and first.plain
    body2, raw2 = _body(raw.decode())  # the same bytes again, in new objects
    again = wire.parse_extender_args(body2, raw2, texts)
    assert again.names_key is first.names_key  # the remembered copy: hashed once
    assert again.names == ["a", "b"]


@pytest.mark.parametrize(
    "text",
    [
        # the Pod (last member) ends with a decoy "NodeNames": the text before "}}" is not the request's
        '{"NodeNames":["a","b"],"Pod":{"metadata":{"name":"p"},"NodeNames":["b","a"]}}',
        # a key that merely ends in NodeNames after an escaped quote
        '{"Pod":{"metadata":{"name":"p"}},"NodeNames":["a","b"],"x\\"NodeNames":["b","a"]}',
        # the array is not the last member
        '{"Pod":{"metadata":{"name":"p"}},"NodeNames":["a","b"],"Nodes":null}',
        # lowercase key, spaces inside: parsed, never taken for a remembered text
        '{"pod":{"metadata":{"name":"p"}},"nodenames":["a","b"]}',
        '{"Pod":{"metadata":{"name":"p"}},"NodeNames": ["b","a"]}',
    ],
)
def test_a_remembered_text_elsewhere_in_the_body_is_not_taken_for_the_names(text: str) -> None:
    texts = wire.NameTexts()
    texts.remember(b'["b","a"]')
    body, raw = _body(text)
    args = wire.parse_extender_args(body, raw, texts)
    assert args.names == orjson.loads(raw).get("NodeNames", orjson.loads(raw).get("nodenames"))
    if args.names == ["a", "b"]:
        assert args.names_key != b'["b","a"]'


def test_duplicate_names_keys_follow_the_decoder_the_last_wins() -> None:
    texts = wire.NameTexts()
    texts.remember(b'["b","a"]')
    body, raw = _body('{"Pod":{"metadata":{"name":"p"}},"NodeNames":["a","b"],"NodeNames":["b","a"]}')
    args = wire.parse_extender_args(body, raw, texts)
    assert args.names == ["b", "a"] and args.names_key == b'["b","a"]'


def test_names_needing_escapes_are_not_plain_and_not_remembered() -> None:
    texts = wire.NameTexts()
    for names in (['a"b'], ["a\\b"], ["é"], ["a\nb"], ['a","b']):
        raw = orjson.dumps({"Pod": POD, "Nodes": None, "NodeNames": names})
        args = wire.parse_extender_args(orjson.loads(raw), raw, texts)
        assert not args.plain and args.names_key == ""
    assert texts.find(orjson.dumps({"Pod": POD, "NodeNames": ['a","b']})) is None


def test_the_node_table_follows_node_changes() -> None:
    """Node numbers, codes and names are rebuilt when nodes come and go; free GPUs on every change."""
    cache: ClusterCache = fed_cache([kube_node("a", "A100", 8), kube_node("b", "T4", 4)])
    decider = Decider(cache, FakeOracle())
    pod = kube_pod("p", 4)
    assert orjson.loads(decider.filter_fast(pod, ["a", "b"], "k").reply)["NodeNames"] == ["a", "b"]  # type: ignore[union-attr]
    cache.assume("x", "y", "u", "b", 1)  # 3 of b's 4 GPUs left
    got = orjson.loads(decider.filter_fast(pod, ["a", "b"], "k").reply)  # type: ignore[union-attr]
    assert got["NodeNames"] == ["a"]
    assert got["FailedNodes"] == {"b": "perfsched: needs 4 nvidia.com/gpu of type T4, node has 3 free"}
    cache.apply(Kind.NODES, "DELETED", kube_node("a"))
    assert decider.filter_fast(pod, ["a", "b"], "k") is None  # a is gone: unknown now
    cache.apply(Kind.NODES, "ADDED", kube_node("c", "H100", 8))
    got = orjson.loads(decider.filter_fast(pod, ["c", "b"], "k2").reply)  # type: ignore[union-attr]
    assert got["NodeNames"] == ["c"]
