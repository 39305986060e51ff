"""The cache's nodes as numpy arrays, for the extender's vectorised filter and prioritize.

Shell-side helper without I/O: ``NodeTable`` mirrors a ``ClusterCache``'s per-node keys (class,
schedulable, free GPUs) into integer arrays indexed by a node number, so that a filter or prioritize
call maps its node names to numbers once and then decides, per name, with numpy operations instead of
Python passes. The layout (node numbers, names, classes) is rebuilt when the cache's node set changes
(``nodes_version``); the free-GPU array when anything changes (``version``: binds, pod events). Node
name lists are memoised per layout by their joined text: kube-scheduler sends the same candidate list
for pod after pod, and mapping it again would cost one dict lookup per name. A list in a new order
(kube-scheduler's parallel filter appends feasible nodes as its workers finish) is mapped from the
request's JSON text without decoding a name (``lookup_text``): a hash of every name's 8-byte words at
once in numpy, a displacement table (a perfect hash of the layout's names, built on first use), and
an exact check that the text is the JSON array of the names found (see ``_NameHashes``). Callers hold
the cache's lock.

A node's *code* is ``(class * 2 + schedulable) * stride + free GPUs`` (``stride``: the largest GPU
count + 1): a small dense integer, so the distinct codes of a request come from one ``bincount``.
Nodes alike in their code get one filter verdict, except the nodes whose reasons name them (cordoned,
no GPUs): ``own`` marks those.
"""

from __future__ import annotations

import logging
from operator import itemgetter
from typing import Any

import numpy as np
import numpy.typing as npt

from scheduler.core.types import Node
from scheduler.k8s.cache import ClusterCache

log = logging.getLogger(__name__)

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

U8Array = npt.NDArray[np.uint8]
U64Array = npt.NDArray[np.uint64]

#: joined name lists remembered per layout (each holds the list's text and its node numbers)
_NAME_MEMO_SIZE = 8

#: masks keeping the first ``r`` bytes of a little-endian 8-byte word, for ``r`` in 0..8
_MASKS = np.array([(1 << (8 * r)) - 1 for r in range(9)], dtype=np.uint64)
_SEPARATOR = b'","'
_FOLD = np.uint64(32)
#: seeds of the name hash's multipliers, tried in turn until the displacement table can be built
_SEEDS = (0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0xD6E8FEB86659FD93)


def _multipliers(seed: int) -> U64Array:
    """Odd multipliers of the name hash, one per 8-byte word of a name and its separator (names of
    Kubernetes objects: at most 253 bytes, so 33 words)."""
    return np.array(
        [(seed * (2 * c + 1) + 0x632BE59BD9B4E019 * c) % (1 << 64) | 1 for c in range(33)], np.uint64
    )


def _hash(chunks: list[U64Array], multipliers: U64Array) -> U64Array:
    """A 64-bit hash per string from its bytes as 8-byte words (``chunks[c]``: every string's word
    ``c``, zero beyond the string's end)."""
    h: U64Array = chunks[0] * multipliers[0]
    for c in range(1, len(chunks)):
        h += chunks[c] * multipliers[c]
    # a product's low bits depend only on its factors' low bits: fold the high bits down, mix, fold
    h ^= h >> _FOLD
    h *= multipliers[-1]
    h ^= h >> _FOLD
    return h


class _NameHashes:
    """The layout's names as 8-byte words and a perfect hash of them, for ``NodeTable.lookup_text``.

    A request's ``NodeNames`` text ``["a","b",...]`` is read as *segments*: each name with the
    separator after it, ``a","`` (the closing ``]`` read as ``,"``), so that one exact comparison of
    every segment with a stored name's checks the text's whole structure too. A segment's 8-byte words
    (zero beyond its end) are hashed; the hash picks a node number through a displacement table (hash
    and displace: the hash's high bits pick a bucket, its low bits XOR the bucket's displacement pick
    the slot; displacements were chosen when the table was built so that no two stored names share a
    slot), with no probing; a name not stored lands on some slot, and the exact comparison rejects it.
    Raises ``ValueError`` when no seed gives a table (never seen; the caller then maps names by dict).
    """

    def __init__(self, names: list[bytes]) -> None:
        n = len(names)
        framed = [x + _SEPARATOR for x in names]
        self.width = width = -(-max(map(len, framed)) // 8)
        #: word ``c`` of every framed name (node number -> its bytes ``8c`` to ``8c + 7`` as a
        #: little-endian word, zero beyond its end)
        words = np.frombuffer(b"".join(x.ljust(8 * width, b"\0") for x in framed), dtype="<u8")
        self.chunks: list[U64Array] = [words[c::width].copy() for c in range(width)]
        #: the framed names' length when they all have the same (node pools' generated names), else 0
        self.uniform = len(framed[0]) if len(set(map(len, framed))) == 1 else 0
        #: node number -> its framed name as one fixed-size item (names of one length only)
        self.rows = np.frombuffer(b"".join(framed), dtype=f"V{self.uniform}") if self.uniform else None
        bits = max(4, n.bit_length() + 1)  # slots: at least 2n
        buckets = bits - 1  # about n buckets
        self.mask = np.uint64((1 << bits) - 1)
        self.bucket_shift = np.uint64(64 - buckets)
        for seed in _SEEDS:
            self.multipliers = _multipliers(seed)
            placed = _displace(_hash(self.chunks, self.multipliers).tolist(), bits, buckets)
            if placed is not None:
                slots, shift = placed
                self.slots = np.array(slots, dtype=np.int64)
                self.shift = np.array(shift, dtype=np.uint64)
                return
        raise ValueError("no displacement table for these names")

    def lookup(self, text: bytes) -> IntArray | None:
        """The node numbers of the strings of ``text`` if it is exactly ``["a","b",...]`` (no space)
        of names stored here (so no escape either); None otherwise."""
        if text[:2] != b'["' or text[-1:] != b"]":
            return None
        width = self.width
        # the text with its closing "]" read as a separator, and zeros to read whole words past the end
        padded = text[:-1] + b',"' + bytes(8 * width + 8 + (-len(text) - 1) % 8)
        # little-endian words at every byte offset (an overlapping view of the padded text)
        words: U64Array = np.ndarray((len(padded) - 7,), dtype="<u8", buffer=padded, strides=(1,))
        chunks = []
        rows = self.rows
        if rows is not None:
            # every segment must have the stored names' one length: they start every that many bytes
            size = self.uniform
            count, rest = divmod(len(text) - 1, size)
            if rest or not count:
                return None
            for c in range(width):
                chunk = words[2 + 8 * c : 2 + 8 * c + count * size : size]
                if size < 8 * c + 8:  # the segments end in this word: zero what follows them
                    chunk = chunk & _MASKS[size - 8 * c]
                chunks.append(chunk)
            found = self._find(chunks)
            # the exact check: the segments are these stored names with their separators, byte for byte
            # (an empty slot, -1, gives the last name, which would have hashed to its own slot)
            if rows[found].tobytes() != padded[2 : 2 + count * size]:
                return None
            return found
        quotes = np.flatnonzero(np.frombuffer(padded, dtype=np.uint8) == 0x22)
        if len(quotes) % 2 == 0:
            return None
        opening = quotes[0::2]
        start = opening[:-1] + 1
        lengths = opening[1:] - opening[:-1]  # a segment: a name and the separator after it
        shortest = int(lengths.min())
        for c in range(width):
            chunk = words[start + 8 * c] if c else words[start]
            if shortest < 8 * c + 8:  # some segment ends in this word: zero what follows it
                chunk &= _MASKS.take(lengths - 8 * c, mode="clip")
            chunks.append(chunk)
        return self._check(chunks)

    def _find(self, chunks: list[U64Array]) -> IntArray:
        """The slot's node number for each segment whose words are ``chunks``: the node of that name
        if it is stored, else any node or -1 (only an exact check tells)."""
        h = _hash(chunks, self.multipliers)
        found: IntArray = self.slots[(h & self.mask) ^ self.shift[h >> self.bucket_shift]]
        return found

    def _check(self, chunks: list[U64Array]) -> IntArray | None:
        """The node numbers of the segments whose words are ``chunks``, or None when one is not a
        stored name with its separator."""
        found = self._find(chunks)
        # the exact check: every segment is a stored name and its separator, byte for byte. A segment
        # holds two quotes, the name's closing one and the last byte (the next name's opening one), as
        # a stored name's does; so equal words (zero past the end) mean equal lengths too, even for a
        # segment longer than the words read. An empty slot (-1) compares with the last name, which
        # would have hashed to its own slot: no match.
        for mine, theirs in zip(self.chunks, chunks, strict=True):
            if (mine[found] != theirs).any():
                return None
        return found


def _displace(hashes: list[int], bits: int, buckets: int) -> tuple[list[int], list[int]] | None:
    """Hash and displace: a displacement per bucket (``hash >> (64 - buckets)``) such that the slots
    ``(hash & (2**bits - 1)) ^ displacement`` of all hashes differ; the slot -> hash number table and
    the displacements, or None when a bucket has no such displacement (two hashes alike in their
    low bits)."""
    size = 1 << bits
    low = size - 1
    members: list[list[tuple[int, int]]] = [[] for _ in range(1 << buckets)]
    for i, h in enumerate(hashes):
        members[h >> (64 - buckets)].append((i, h & low))
    slots = [-1] * size
    shift = [0] * len(members)
    free = 0  # no free slot below it (slots only fill up)
    for b in sorted(range(len(members)), key=lambda b: -len(members[b])):
        group = members[b]
        if not group:
            break
        if len(group) == 1:  # the first free slot will do
            free = slots.index(-1, free)
            shift[b] = group[0][1] ^ free
            slots[free] = group[0][0]
            continue
        for d in range(size):
            at = [base ^ d for _, base in group]
            if all(slots[x] < 0 for x in at) and len(set(at)) == len(at):
                break
        else:
            return None
        shift[b] = d
        for (i, _), x in zip(group, at, strict=True):
            slots[x] = i
    return slots, shift


class NodeTable:
    """Per-node arrays over the cache's nodes, in step with it (see the module docstring)."""

    def __init__(self, cache: ClusterCache) -> None:
        self._cache = cache
        self._nodes_version = -1
        self._version = -1
        self.names: list[str] = []
        self.index: dict[str, int] = {}
        #: node number -> its name (an object array, for fancy indexing)
        self.name_array: npt.NDArray[np.object_] = np.empty(0, dtype=object)
        #: node number -> its name as ASCII bytes (names that are not ASCII never reach the fast paths)
        self.name_bytes: npt.NDArray[np.object_] = np.empty(0, dtype=object)
        #: node number -> its Node
        self.nodes: list[Node] = []
        #: node number -> the cache's class id
        self.cid: IntArray = np.zeros(0, dtype=np.int64)
        #: node number -> True when its filter reason names it (cordoned, or no GPUs at all)
        self.own: BoolArray = np.zeros(0, dtype=np.bool_)
        self.stride = 1
        self.usable = True
        self._free_in_order = False
        self._code_base: IntArray = np.zeros(0, dtype=np.int64)
        self._score_base: IntArray = np.zeros(0, dtype=np.int64)
        #: number of distinct codes (codes run from 0 to ``codes - 1``)
        self.codes = 1
        #: node number -> free GPUs, and -> code (see the module docstring); kept per cache version
        self.free: IntArray = np.zeros(0, dtype=np.int64)
        self.code: IntArray = np.zeros(0, dtype=np.int64)
        #: node number -> ``class * stride + free GPUs`` (prioritize's class key, dense), below
        #: ``score_codes``
        self.score_code: IntArray = np.zeros(0, dtype=np.int64)
        self.score_codes = 1
        #: code -> a node number with that (class, schedulable), for decoding a code to a Node
        self._rep_of_group: dict[int, int] = {}
        self._name_memo: list[tuple[bytes | str, IntArray | None]] = []
        #: the layout's names by hash (built on the first ``lookup_text``; None: not built, or no
        #: name may be found from text because one needs JSON escaping)
        self._hashes: _NameHashes | None = None
        self._host_pieces: npt.NDArray[np.object_] | None = None
        self._hashes_built = False

    @property
    def nodes_version(self) -> int:
        return self._nodes_version

    @property
    def version(self) -> int:
        """The cache's ``version`` the free-GPU arrays were last brought in step with."""
        return self._version

    def sync(self) -> None:
        """Bring the arrays in step with the cache (cheap when nothing changed)."""
        cache = self._cache
        if cache.nodes_version != self._nodes_version or len(cache.filter_key) != len(self.names):
            self._relayout()
        elif cache.version != self._version:
            self._refresh()

    def _relayout(self) -> None:
        cache = self._cache
        self.names = list(cache.filter_key)
        self.index = {n: i for i, n in enumerate(self.names)}
        self.name_array = np.array(self.names, dtype=object)
        self.name_bytes = np.array([n.encode("utf-8") for n in self.names] + [b""], dtype=object)[:-1]
        self.nodes = [cache.nodes[n] for n in self.names]
        self.own = np.fromiter(
            (not (n.schedulable and n.gpus > 0) for n in self.nodes), dtype=np.bool_, count=len(self.nodes)
        )
        self.stride = max((n.gpus for n in self.nodes), default=0) + 1
        self._name_memo.clear()
        self._hashes, self._hashes_built = None, False
        self._host_pieces = None
        self._nodes_version = cache.nodes_version
        fk = np.fromiter(cache.filter_key.values(), dtype=np.int64, count=len(self.names))
        # a node without a class id (never in practice) has a negative key: no fast path then
        self.usable = not len(fk) or int(fk.min()) >= 0
        # class and schedulable change only with the node (a new layout); free GPUs with any event
        groups = fk >> 16
        self.cid = fk >> 17
        self._code_base = groups * self.stride
        self._score_base = self.cid * self.stride
        self.codes = (int(groups.max()) + 1) * self.stride if len(fk) else 1
        self.score_codes = (int(self.cid.max()) + 1) * self.stride if len(fk) else 1
        self._rep_of_group = {}
        for i, grp in enumerate(groups.tolist()):
            self._rep_of_group.setdefault(grp, i)
        # the cache's free-GPU dict holds the same nodes in the same order (both are written together);
        # its values are small ints, quicker to read than the keys' large ones
        self._free_in_order = list(cache.free) == self.names
        self._set_free(fk & 0xFFFF)

    def _refresh(self) -> None:
        cache = self._cache
        n = len(self.names)
        if self._free_in_order and len(cache.free) == n:
            self._set_free(np.fromiter(cache.free.values(), dtype=np.int64, count=n))
        else:
            self._set_free(np.fromiter(cache.filter_key.values(), dtype=np.int64, count=n) & 0xFFFF)

    def _set_free(self, free: IntArray) -> None:
        self.free = free  # never above the node's GPUs, so below ``stride``
        self.code = self._code_base + free
        self.score_code = self._score_base + free
        self._version = self._cache.version

    def node_of_code(self, code: int) -> tuple[Node, int, bool]:
        """A node with this code's class and schedulability, the code's free GPUs, and whether nodes of
        this code are decided one by one (``own``)."""
        i = self._rep_of_group[code // self.stride]
        return self.nodes[i], code % self.stride, bool(self.own[i])

    def lookup(self, names: list[str], key: bytes | str) -> IntArray | None:
        """The node numbers of ``names`` (``key``: a text naming the list exactly, e.g. the names joined
        by a separator no name holds; "" to skip the memo); None when a name is unknown or named
        twice."""
        if not self.usable:
            return None
        memo = self._name_memo
        if key:
            # a short list compared by identity, else by value (a length check first): no text is hashed
            for i in range(len(memo) - 1, -1, -1):
                seen, hit = memo[i]
                if seen is key or (type(seen) is type(key) and seen == key):
                    return hit
        idx: IntArray | None
        try:
            # one C call for every name (a name the cache does not know raises KeyError)
            found: Any = itemgetter(*names)(self.index) if len(names) > 1 else [self.index[n] for n in names]
            idx = np.array(found, dtype=np.int64)
        except KeyError:
            idx = None
        if idx is not None and len(idx) and int(np.bincount(idx).max()) > 1:
            idx = None
        if key:
            memo.append((key, idx))
            if len(memo) > _NAME_MEMO_SIZE:
                del memo[0]
        return idx

    def host_pieces(self) -> npt.NDArray[np.object_]:
        """Per node number ``i`` and score ``s`` (0..10), at ``11 * i + s``: the node's piece of a
        HostPriorityList, ``name","Score":s},{"Host":"`` as bytes (built on first use per layout)."""
        if self._host_pieces is None:
            tails = [f'","Score":{s}}},{{"Host":"'.encode() for s in range(11)]
            pieces = [name + tail for name in self.name_bytes.tolist() for tail in tails]
            self._host_pieces = np.array([*pieces, b""], dtype=object)[:-1]
        return self._host_pieces

    def lookup_text(self, text: bytes) -> IntArray | None:
        """The node numbers of the names of ``text``, a ``NodeNames`` array's JSON text as sent; None
        unless ``text`` is exactly ``["a","b",...]`` of distinct names the cache knows (no space, no
        escape), which is what it maps them from without decoding a name."""
        if not self.usable or len(text) < 4:
            return None
        memo = self._name_memo
        for i in range(len(memo) - 1, -1, -1):
            seen, hit = memo[i]
            if type(seen) is bytes and seen == text:
                return hit
        if not self._hashes_built:
            self._build_hashes()
        if self._hashes is None:
            return None
        idx = self._hashes.lookup(text)
        if idx is None or int(np.bincount(idx).max()) > 1:
            return None
        memo.append((text, idx))
        if len(memo) > _NAME_MEMO_SIZE:
            del memo[0]
        return idx

    def _build_hashes(self) -> None:
        self._hashes_built = True
        self._hashes = None
        if not self.names:
            return
        joined = '","'.join(self.names)
        # names with a quote, a backslash, a control character or anything not ASCII are not in the
        # JSON text as they are in the name (DNS names never are)
        if not joined.isascii() or len(joined.encode().translate(None, _ESCAPED)) != len(joined) - 2 * (
            len(self.names) - 1
        ):
            return
        if max(map(len, self.names)) + len(_SEPARATOR) <= 8 * 33:  # Kubernetes names: at most 253
            try:
                self._hashes = _NameHashes(self.name_bytes.tolist())
            except ValueError:
                log.warning("no hash table for the %d node names: mapping them one by one", len(self.names))


#: bytes JSON escapes inside a string: control characters, the quote and the backslash
_ESCAPED = bytes(range(0x20)) + b'"\\'


def present_codes(codes: IntArray, size: int) -> tuple[IntArray, IntArray]:
    """The distinct values of ``codes`` (each below ``size``), ascending, and how often each occurs."""
    counts = np.bincount(codes, minlength=size)
    present = np.flatnonzero(counts)
    return present, counts[present]


def first_positions(values: IntArray, wanted: IntArray) -> list[int]:
    """For each of the distinct ``wanted`` values (all present in ``values``), its first position."""
    uniq, first = np.unique(values, return_index=True)
    where = np.searchsorted(uniq, wanted)
    return [int(x) for x in first[where].tolist()]


__all__ = ["NodeTable", "first_positions", "present_codes"]
