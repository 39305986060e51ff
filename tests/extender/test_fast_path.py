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
from scheduler.extender.app import (
    _filter_reply,
    host_priority_bytes,
    host_priority_list,
    host_priority_pieces,
)
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
            _same_answers(fast_side, general_side, pod, names, step)
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


def _same_answers(
    fast_side: Decider, general_side: Decider, pod: dict[str, Any], names: list[str], step: int
) -> None:
    """The fast paths (names given as a list, with and without the memo; names given as the request's
    JSON text, mapped without decoding it) answer what the general path answers."""
    who = f"{pod['metadata']['name']} at step {step}"
    for key in ("", '","'.join(names)):  # without and with the name-list memo
        got = _fast(fast_side, pod, names, key)
        want = _general(general_side, pod, names)
        assert got[0] == want[0], f"filter differs for {who}"
        assert got[1] == want[1], f"prioritize differs for {who}"
        assert got[2].categories == want[2].categories
        assert got[2].passed == len(want[2].passed)
    text = orjson.dumps(names)
    by_text = fast_side.filter_text(pod, text)
    scored = fast_side.prioritize_text(pod, text)
    if not names:
        assert by_text is None and scored is None  # "[]": the ordinary route answers
        return
    want = _general(general_side, pod, names)
    assert by_text is not None and scored is not None, f"names not found from their text for {who}"
    assert by_text.reply == want[0], f"filter from text differs for {who}"
    assert by_text.categories == want[2].categories and by_text.asked == len(names)
    idx, scores = scored
    assert fast_side.table.name_array[idx].tolist() == names
    assert host_priority_pieces(fast_side.table.host_pieces()[idx * 11 + scores].tolist()) == want[1]


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


def _table_of(*names: str) -> Any:
    decider = Decider(fed_cache([kube_node(n, "A100", 8) for n in names]), FakeOracle())
    decider.table.sync()
    return decider.table


@pytest.mark.parametrize(
    ("text", "want"),
    [
        (b'["a","bb"]', ["a", "bb"]),
        (b'["bb","a","gpu-node-0123456789"]', ["bb", "a", "gpu-node-0123456789"]),
        (b'["gpu-node-0123456789"]', ["gpu-node-0123456789"]),
        # not exactly the JSON array of known names, without spaces or escapes: None
        (b'["a", "bb"]', None),  # a space
        (b'[ "a","bb"]', None),
        (b'["a","bb" ]', None),
        (b'["\\u0061","bb"]', None),  # an escape that decodes to a known name
        (b'["a","b"]', None),  # a prefix of a known name
        (b'["bbbb"]', None),  # a known name and more
        (b'["a","ghost"]', None),
        (b'["a","a"]', None),  # twice
        (b'["a",,"bb"]', None),
        (b'["a""bb"]', None),
        (b'["a","bb"]]', None),
        (b'["a","bb"', None),
        (b'"a","bb"]', None),
        (b'["a",1]', None),
        (b'["a",["bb"]]', None),
        (b'["a\x00\x00"]', None),  # bytes past the name's end are not zero padding
        (b'["gpu-node-0123456789-and-more-than-the-longest-name"]', None),
        (b'[""]', None),
        (b"[]", None),
    ],
)
def test_names_are_found_from_their_text_only_when_it_is_exactly_their_json_array(
    text: bytes, want: list[str] | None
) -> None:
    table = _table_of("a", "bb", "bbb", "gpu-node-0123456789")
    got = table.lookup_text(text)
    assert (None if got is None else table.name_array[got].tolist()) == want
    assert (table.lookup_text(text) is None) == (want is None)  # the memo answers the same


def test_names_json_must_escape_are_never_found_from_text() -> None:
    table = _table_of("a", 'we"ird')
    assert table.lookup_text(b'["a"]') is None  # no hash table: a name is not in the text as it is
    assert table.lookup(["a"], "") is not None  # the dict lookup still maps them


@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.text("ab-.0123456789xyz", min_size=1, max_size=30), min_size=1, max_size=60, unique=True))
def test_any_set_of_names_is_found_from_any_order_of_its_text(names: list[str]) -> None:
    table = _table_of(*names)
    rng = random.Random(len(names))
    for _ in range(3):
        order = rng.sample(names, rng.randint(1, len(names)))
        got = table.lookup_text(orjson.dumps(order))
        assert got is not None and table.name_array[got].tolist() == order
    assert table.lookup_text(orjson.dumps([*names, names[0]])) is None


@pytest.mark.parametrize(
    ("text", "want"),
    [
        (b'["n2","n1","n3"]', ["n2", "n1", "n3"]),
        (b'["n3"]', ["n3"]),
        (b'["n1", "n2"]', None),  # a space: not a whole number of segments
        (b'["n1","n2" ,"n3"]', None),
        (b'["n1";"n2"]', None),  # the right length, the wrong separator
        (b'["n1"."n2"]', None),
        (b"[\"n1','n2\"]", None),
        (b'["n1","n4"]', None),  # the right length, unknown
        (b'["n1","n1"]', None),
        (b'["n1","n2"}', None),
        (b'{"n1","n2"]', None),
        (b'["n1","n2","', None),
        (b'["n12"]', None),
        (b'[","]', None),
    ],
)
def test_names_of_one_length_are_found_by_position_with_the_same_exactness(
    text: bytes, want: list[str] | None
) -> None:
    """Names all of one length (node pools' generated names) are read every that many bytes instead
    of between quotes; the answer is the same as for names of any lengths."""
    table = _table_of("n1", "n2", "n3")
    assert table._hashes is None or table._hashes.uniform  # built on first use
    got = table.lookup_text(text)
    assert table._hashes is not None and table._hashes.uniform == len('n1","')
    assert (None if got is None else table.name_array[got].tolist()) == want


@pytest.mark.parametrize("scores", [[], [10], [0, 7], [3, 3, 10]])
def test_host_priority_pieces_are_the_wire_list(scores: list[int]) -> None:
    table = _table_of("a", "bb", "c")
    idx = np.array([0, 1, 2][: len(scores)], dtype=np.int64)
    got = host_priority_pieces(table.host_pieces()[idx * 11 + np.array(scores, dtype=np.int64)].tolist())
    names = table.name_array[idx].tolist()
    assert got == orjson.dumps([{"Host": h, "Score": s} for h, s in zip(names, scores, strict=True)])
