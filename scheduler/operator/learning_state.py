"""The learning oracle's state kept in a ConfigMap, so that a new operator process (a restart, an upgrade,
a new leader) starts from what the cluster taught the predictor instead of cold.

Shell module (I/O through a ``KubeApi``). What is stored (``encode``): a schema version; the oracle's
state (``scheduler.oracles.learning.CorrectedOracle.state``: the offline model's id, the corrector's
records of live and ended jobs and its fitted levels, the held-out answers); and the operator's view of
the TrainingJobs that state accounts for: each live job's uid and the time of its last progress report
learnt (so that the same report is not learnt twice), and the uids of the latest ``ENDED_MAX`` finished
jobs learnt (so that the replay from TrainingJob status skips them), with the completion time below which
every older finished job counts as learnt. JSON, zlib-compressed, in ``binaryData`` under ``KEY``.

``decode`` turns what it reads into a ``Restored`` or one line naming why it cannot be used (missing,
corrupt, a newer or older schema, another offline model or corrector settings); the operator logs that
line once and goes on with the replay alone. ``encode_capped`` trims a state larger than ``MAX_BYTES``
compressed (a ConfigMap holds at most 1 MiB) to fit, least valuable parts first (its docstring lists the
order). ``StateStore`` reads and writes the ConfigMap; it writes only what changed since its last write.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
import logging
import math
import time
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from scheduler.k8s.errors import AlreadyExists, Conflict, KubeApiError, NotFound
from scheduler.k8s.kubeapi import KubeApi
from scheduler.oracles.learning import StateParts, state_parts, trim_state

log = logging.getLogger(__name__)

#: the layout of the stored state; a state of another schema is not restored
SCHEMA = 1
KEY = "learning-state.json.zlib"
#: the largest compressed state written: a ConfigMap holds at most 1 MiB, with room for its metadata
MAX_BYTES = 900 * 1024
#: the ConfigMap's annotation that says when the state was written (RFC 3339, UTC)
WRITTEN = "perfsched.dev/learning-state-written"
#: finished jobs whose uids the state lists (the replay never replays more: ``reconcile.REPLAY_MAX``)
ENDED_MAX = 4096


@dataclass(frozen=True, slots=True)
class Restored:
    """A state read back: the oracle's part, and the TrainingJobs it accounts for."""

    oracle: Mapping[str, Any]
    #: live job key -> (uid, time of the last progress report learnt, or None)
    live: dict[str, tuple[str, float | None]]
    #: uids of finished jobs learnt
    ended: frozenset[str]
    #: a finished job that completed before this (RFC 3339, compared as text) counts as learnt
    ended_before: str
    #: when the state was written (seconds since the epoch: the ConfigMap's ``WRITTEN`` annotation; None
    #: without one)
    written: float | None = None


def _latest(ended: Mapping[str, tuple[str, str]]) -> tuple[list[tuple[str, str]], str]:
    """The latest ``ENDED_MAX`` finished jobs (uid, completion time) by completion time, and the time
    below which every older one counts as learnt: the cut falls between two completion times, so that
    no job left out completed at the cutoff itself (``completed < cutoff`` counts as learnt)."""
    latest = sorted(ended.values(), key=lambda e: (e[1], e[0]))
    start = max(0, len(latest) - ENDED_MAX)
    start = _boundary(latest, start) or start
    return latest[start:], latest[start][1] if 0 < start < len(latest) else ""


def _boundary(latest: Sequence[tuple[str, str]], start: int) -> int | None:
    """``start``, or the next position after it where the completion time changes; None when the jobs
    from ``start`` on all completed at one time."""
    k = start
    while 0 < k < len(latest) and latest[k - 1][1] == latest[k][1]:
        k += 1
    return k if k < len(latest) else None


def _doc(
    oracle_state: Mapping[str, Any],
    live: Mapping[str, tuple[str, float | None]],
    kept: Sequence[tuple[str, str]],
    cutoff: str,
) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "oracle": oracle_state,
        "live": {k: [uid, t] for k, (uid, t) in sorted(live.items())},
        "ended": sorted(uid for uid, _ in kept),
        "endedBefore": cutoff,
    }


def _compress(doc: object, level: int = 9) -> bytes:
    return zlib.compress(json.dumps(doc, separators=(",", ":")).encode(), level)


def encode(
    oracle_state: Mapping[str, Any],
    live: Mapping[str, tuple[str, float | None]],
    ended: Mapping[str, tuple[str, str]],
) -> bytes:
    """The compressed state: ``live`` maps a live job's key to (uid, last report learnt), ``ended`` a
    finished job's key to (uid, completion time); the latest ``ENDED_MAX`` of them are listed."""
    kept, cutoff = _latest(ended)
    return _compress(_doc(oracle_state, live, kept, cutoff))


@dataclass(frozen=True, slots=True)
class Encoded:
    """A state encoded within ``MAX_BYTES`` (``encode_capped``)."""

    #: the compressed state; empty when even the most trimmed state is larger than the bound
    blob: bytes
    #: what it holds, by kind (``KINDS``)
    records: dict[str, int]
    #: what trimming left out, by kind (all zero when the whole state fits)
    trimmed: dict[str, int]
    #: seconds spent encoding (trimming included)
    seconds: float = 0.0
    #: zlib encodings of the whole state it took (1: it fit; at most 1 + ``ATTEMPTS``)
    encodings: int = 1

    @property
    def was_trimmed(self) -> bool:
        return any(self.trimmed.values())


#: what a state holds, as counted by ``Encoded`` (and the operator's metrics): live jobs' records, ended
#: jobs' records in the shared levels, held-out answers, finished jobs listed as learnt (their uids)
KINDS = ("live", "ended", "held_out", "finished")
#: trimming keeps this many ended records per (model, GPU type) until every other ended record is gone
TRIM_KEEP_PER_MODEL = 4
#: encodings of a trimmed state at most (``encode_capped``); the last trims everything trimmable
ATTEMPTS = 4
#: trimming aims this far below ``MAX_BYTES`` (its size estimate is not exact); it then verifies
TRIM_MARGIN = 0.03


def encode_capped(
    oracle_state: Mapping[str, Any],
    live: Mapping[str, tuple[str, float | None]],
    ended: Mapping[str, tuple[str, str]],
) -> Encoded:
    """``encode``, trimmed to ``MAX_BYTES`` when it is larger: the least valuable parts go first
    (docs/learning-state.md, "Over the bound"):

    1. held-out answers, oldest first;
    2. the uids of finished jobs, oldest completed first (the cutoff below which every finished job counts
       as learnt rises to the oldest kept, so none of them is replayed);
    3. ended jobs' records in the shared levels, oldest first, keeping the latest ``TRIM_KEEP_PER_MODEL``
       of each (model, GPU type);
    4. the remaining ended records, oldest first;
    5. live jobs (each with every record and its uid and last report learnt), fewest observations first,
       then the most recently first observed: the next leader does not know them, so it learns a running
       one's latest report again, or replays it from its status if it finished meanwhile.

    A GPU type that loses a record is refit from the records kept by the leader that restores it
    (``scheduler.oracles.learning.trim_state``). The cut is planned from each part's compressed size per
    item, then the trimmed state is encoded and checked; a plan that misses asks for more along the line
    through its last two tries, and the last of ``ATTEMPTS`` trims everything trimmable."""
    started = time.perf_counter()
    kept, cutoff = _latest(ended)
    blob = _compress(_doc(oracle_state, live, kept, cutoff))
    parts = state_parts(oracle_state)
    counts = _counts(parts, kept)
    cap = MAX_BYTES
    if len(blob) <= cap:
        return Encoded(blob, counts, dict.fromkeys(KINDS, 0), time.perf_counter() - started)
    plan = _Plan(oracle_state, parts, live, kept, len(blob))
    target = cap * (1 - TRIM_MARGIN)
    need = len(blob) - target
    tried = [(0.0, float(len(blob)))]  # (estimated saving asked for, size it gave)
    for attempt in range(ATTEMPTS):
        # the last attempt trims everything trimmable: if that fits, something is written
        cut = plan.cut(math.inf if attempt == ATTEMPTS - 1 else need)
        state = trim_state(oracle_state, held_out=cut.held_out, jobs=cut.jobs, ended=cut.ended)
        left = {k: v for k, v in live.items() if k not in cut.jobs}
        uids = kept[cut.finished :]
        out = _compress(_doc(state, left, uids, uids[0][1] if cut.finished and uids else cutoff))
        if len(out) <= cap:
            trimmed = {
                "live": sum(1 for name, *_ in parts.live if name in cut.jobs),
                "ended": len(cut.ended),
                "held_out": cut.held_out,
                "finished": cut.finished,
            }
            records = {k: counts[k] - trimmed[k] for k in KINDS}
            return Encoded(out, records, trimmed, time.perf_counter() - started, 2 + attempt)
        # the estimate fell short: ask for more, along the line through the last two tries (secant)
        tried.append((need, float(len(out))))
        (n0, s0), (n1, s1) = tried[-2], tried[-1]
        slope = (s0 - s1) / (n1 - n0) if n1 > n0 and s0 > s1 else 0.0
        need = n1 + (s1 - target) / slope if slope > 0 else n1 * 1.5
    return Encoded(b"", counts, dict.fromkeys(KINDS, 0), time.perf_counter() - started, 1 + ATTEMPTS)


def _counts(parts: StateParts, kept: Sequence[tuple[str, str]]) -> dict[str, int]:
    return {
        "live": len(parts.live),
        "ended": len(parts.ended),
        "held_out": parts.held_out,
        "finished": len(kept),
    }


@dataclass(frozen=True, slots=True)
class _Cut:
    held_out: int
    finished: int
    ended: list[int]
    jobs: frozenset[str]


class _Plan:
    """What to trim for a given saving (``encode_capped``): each part's items in the order they go, each
    priced at its part's compressed size per item (each part compressed alone, scaled so the parts add up
    to the whole state's size), a GPU type's fitted levels priced when the type loses its first record."""

    def __init__(
        self,
        oracle_state: Mapping[str, Any],
        parts: StateParts,
        live: Mapping[str, tuple[str, float | None]],
        kept: Sequence[tuple[str, str]],
        size: int,
    ) -> None:
        corrector = oracle_state["corrector"]

        def each(value: Sequence[object]) -> float:
            return len(_compress(list(value), 6)) / len(value) if value else 0.0

        levels = {t: float(len(_compress(v, 6))) for t, v in parts.levels.items()}
        whole = [
            len(_compress(oracle_state["before"], 6)),
            len(_compress([uid for uid, _ in kept], 6)),
            len(_compress(corrector["retired"], 6)),
            len(_compress(corrector["jobs"], 6)),
            len(_compress(sorted(live.items()), 6)),
            sum(levels.values()),
        ]
        scale = size / max(1.0, float(sum(whole)))
        self.held_out = each(oracle_state["before"]) * scale
        self.finished = each([uid for uid, _ in kept]) * scale
        self.ended = each(corrector["retired"]) * scale
        self.record = each(corrector["jobs"]) * scale
        self.entry = each(sorted(live.items())) * scale
        self.levels = {t: v * scale for t, v in levels.items()}
        self.parts, self.kept = parts, kept
        # ended records: those beyond the latest TRIM_KEEP_PER_MODEL of their group first, then the rest
        seen: dict[tuple[str, str], int] = {}
        late: set[int] = set()
        for k in range(len(parts.ended) - 1, -1, -1):
            group = parts.ended[k]
            seen[group] = seen.get(group, 0) + 1
            if seen[group] <= TRIM_KEEP_PER_MODEL:
                late.add(k)
        self.ended_order = [k for k in range(len(parts.ended)) if k not in late] + sorted(late)
        # live jobs: fewest observations first, then the most recently first observed
        jobs: dict[str, list[int]] = {name: [0, len(parts.live), 0] for name in live}
        self.types: dict[str, set[str]] = {}
        for pos, (name, _, gpu_type, n) in enumerate(parts.live):
            got = jobs.setdefault(name, [0, pos, 0])
            got[0] += n
            got[1] = min(got[1], pos)
            got[2] += 1
            self.types.setdefault(name, set()).add(gpu_type)
        self.jobs = sorted(jobs.items(), key=lambda kv: (kv[1][0], -kv[1][1], kv[0]))

    def cut(self, need: float) -> _Cut:
        """The least valuable items whose estimated size adds up to ``need`` bytes."""
        saved = 0.0
        held = _take(self.parts.held_out, self.held_out, need)
        saved += held * self.held_out
        finished = 0
        if saved < need and len(self.kept) > 1:
            want = min(len(self.kept) - 1, _take(len(self.kept), self.finished, need - saved))
            finished = (_boundary(self.kept, want) or 0) if want else 0
            saved += finished * self.finished
        dirty: set[str] = set()
        ended: list[int] = []
        for k in self.ended_order:
            if saved >= need:
                break
            ended.append(k)
            saved += self.ended
            gpu_type = self.parts.ended[k][1]
            if gpu_type not in dirty:
                dirty.add(gpu_type)
                saved += self.levels.get(gpu_type, 0.0)
        jobs: set[str] = set()
        for name, (_, _, records) in self.jobs:
            if saved >= need:
                break
            jobs.add(name)
            saved += self.entry + records * self.record
            for gpu_type in self.types.get(name, ()):
                if gpu_type not in dirty:
                    dirty.add(gpu_type)
                    saved += self.levels.get(gpu_type, 0.0)
        return _Cut(held, finished, ended, frozenset(jobs))


def _take(available: int, each: float, need: float) -> int:
    """How many items of ``each`` bytes cover ``need`` bytes (at most ``available``)."""
    if need <= 0:
        return 0
    if math.isinf(need):
        return available
    return min(available, math.ceil(need / each)) if each > 0 else 0


def decode(blob: bytes) -> Restored | str:
    """The state in ``blob``, or why it cannot be used (one line)."""
    try:
        doc = json.loads(zlib.decompress(blob))
    except (zlib.error, ValueError) as exc:
        return f"corrupt ({type(exc).__name__}: {str(exc)[:80]})"
    if not isinstance(doc, dict):
        return "corrupt (not a JSON object)"
    schema = doc.get("schema")
    if not isinstance(schema, int) or isinstance(schema, bool):
        return f"corrupt (schema {str(schema)[:20]!r})"
    if schema != SCHEMA:
        newer = "newer" if schema > SCHEMA else "older"
        return f"schema {schema} is {newer} than this operator's {SCHEMA}"
    oracle, live, ended, cutoff = doc.get("oracle"), doc.get("live"), doc.get("ended"), doc.get("endedBefore")
    if not isinstance(oracle, dict) or not isinstance(live, dict) or not isinstance(ended, list):
        return "corrupt (oracle, live or ended missing)"
    if not isinstance(cutoff, str):
        return "corrupt (endedBefore missing)"
    out: dict[str, tuple[str, float | None]] = {}
    for key, v in live.items():
        if not (isinstance(v, list) and len(v) == 2 and isinstance(v[0], str)):
            return f"corrupt (live job {key[:60]!r})"
        if v[1] is not None and not isinstance(v[1], int | float):
            return f"corrupt (live job {key[:60]!r})"
        out[key] = (v[0], None if v[1] is None else float(v[1]))
    if not all(isinstance(u, str) for u in ended):
        return "corrupt (ended uids)"
    return Restored(oracle, out, frozenset(ended), cutoff)


def _format_time(t: float) -> str:
    return datetime.fromtimestamp(t, tz=UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _parse_time(stamp: object) -> float | None:
    """Seconds since the epoch of an RFC 3339 time, or None when it is not one."""
    if not isinstance(stamp, str):
        return None
    try:
        got = datetime.fromisoformat(stamp)
    except ValueError:
        return None
    return got.timestamp() if got.tzinfo is not None else None


def restore_outcome(why: str) -> str:
    """The restore outcome (a metric label) of a reason a state cannot be used (``decode``,
    ``StateStore.read``, or the oracle's refusal that the operator prefixes with ``not usable``)."""
    if why.startswith("missing"):
        return "missing"
    if why.startswith("cannot be read"):
        return "unreadable"
    if why.startswith("schema"):
        return "schema"
    if why.startswith("not usable (written over offline model"):
        return "model"
    if why.startswith("not usable (written with corrector settings"):
        return "settings"
    return "corrupt"


@dataclass(slots=True)
class StateStore:
    """The ConfigMap ``name`` in ``namespace`` that holds the state (see the module docstring)."""

    api: KubeApi
    namespace: str
    name: str
    _last: bytes = b""
    _warned: set[str] = field(default_factory=set)

    def log_once(self, what: str, message: str, **extra: object) -> None:
        """Log ``message`` at warning level the first time ``what`` happens, at debug level after."""
        level = logging.DEBUG if what in self._warned else logging.WARNING
        self._warned.add(what)
        log.log(level, message, extra={"configmap": f"{self.namespace}/{self.name}", **extra})

    def read(self) -> Restored | str:
        """The stored state, or why there is none to use (one line)."""
        try:
            cm = self.api.get_configmap(self.namespace, self.name)
        except KubeApiError as exc:
            return f"cannot be read ({type(exc).__name__}: {str(exc)[:120]})"
        if cm is None:
            return "missing (no ConfigMap yet)"
        raw = (cm.get("binaryData") or {}).get(KEY)
        if not isinstance(raw, str):
            return f"corrupt (no binaryData key {KEY})"
        try:
            blob = base64.b64decode(raw, validate=True)
        except (binascii.Error, ValueError) as exc:
            return f"corrupt (base64: {exc})"
        got = decode(blob)
        if isinstance(got, Restored):
            self._last = blob
            stamp = ((cm.get("metadata") or {}).get("annotations") or {}).get(WRITTEN)
            got = dataclasses.replace(got, written=_parse_time(stamp))
        return got

    def write(self, blob: bytes, now: float | None = None) -> str:
        """Store ``blob`` unless it is what was last written or read, or larger than ``MAX_BYTES``.
        Returns the outcome: ``written``, ``unchanged``, ``conflict`` (raced another writer: the next
        write tries again) or ``error`` (an API failure, logged once and retried at the next write; or a
        blob over the bound, which ``encode_capped`` never returns)."""
        if blob == self._last:
            return "unchanged"
        if len(blob) > MAX_BYTES:
            self.log_once("size", "learning state too large to store; not written", bytes=len(blob))
            return "error"
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": self.name,
                "labels": {"app.kubernetes.io/managed-by": "perfsched"},
                "annotations": {
                    "perfsched.dev/learning-state-schema": str(SCHEMA),
                    **({WRITTEN: _format_time(now)} if now is not None else {}),
                },
            },
            "binaryData": {KEY: base64.b64encode(blob).decode()},
        }
        try:
            cur = self.api.get_configmap(self.namespace, self.name)
            if cur is None:
                self.api.create_configmap(self.namespace, body)
            else:
                body["metadata"]["resourceVersion"] = (cur.get("metadata") or {}).get("resourceVersion")
                self.api.replace_configmap(self.namespace, self.name, body)
        except (AlreadyExists, Conflict, NotFound) as exc:  # raced with another writer: next time
            log.info("learning state not written (raced)", extra={"error": str(exc)})
            return "conflict"
        except KubeApiError as exc:
            self.log_once("api", "learning state not written", error=str(exc)[:200])
            return "error"
        self._last = blob
        return "written"
