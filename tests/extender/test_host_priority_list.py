"""The prioritize reply's serialiser: byte-for-byte orjson's HostPriorityList for any node names."""

from __future__ import annotations

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.extender.app import host_priority_list


def _reference(names: list[str], keys: list[int | None], scores: dict[int | None, int]) -> bytes:
    return orjson.dumps([{"Host": h, "Score": scores[k]} for h, k in zip(names, keys, strict=True)])


# names that need escaping or are unusual: a quote, a backslash, a control character, non-ASCII, empty
_ODD = ['a"b', "a\\b", "tab\there", "nl\n", "ünïcode-node", "", "\x7f", "gpu-1.zone-a"]


def test_dns_names_and_class_scores() -> None:
    names = ["gpu-0", "gpu-1", "gpu-2", "gone"]
    keys: list[int | None] = [7, 3, 7, None]
    scores: dict[int | None, int] = {7: 10, 3: 4, None: 0}
    assert host_priority_list(names, keys, scores) == (
        b'[{"Host":"gpu-0","Score":10},{"Host":"gpu-1","Score":4},'
        b'{"Host":"gpu-2","Score":10},{"Host":"gone","Score":0}]'
    )
    assert host_priority_list([], [], {None: 0}) == b"[]"


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.one_of(st.sampled_from(_ODD), st.text(max_size=12)),
            st.one_of(st.none(), st.integers(0, 5)),
        ),
        max_size=30,
    ),
    st.lists(st.integers(0, 10), min_size=6, max_size=6),
)
def test_matches_orjson(entries: list[tuple[str, int | None]], table: list[int]) -> None:
    names = [n for n, _ in entries]
    keys = [k for _, k in entries]
    scores: dict[int | None, int] = {i: s for i, s in enumerate(table)}
    scores[None] = 0
    assert host_priority_list(names, keys, scores) == _reference(names, keys, scores)
    assert orjson.loads(host_priority_list(names, keys, scores)) == [
        {"Host": n, "Score": scores[k]} for n, k in entries
    ]
